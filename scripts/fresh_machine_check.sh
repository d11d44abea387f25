#!/usr/bin/env bash
# Proves the README's two commands on a brand-new machine: builds a minimal Debian 12 root
# (mmdebstrap --variant=minbase bookworm), gives it only what a fresh machine of this kind gets
# from its environment (the host's apt sources, its extra CA certificates, its npm registry
# settings, /etc/resolv.conf), copies a clean clone of this repository's HEAD into it and runs,
# exactly as the README says, in a clean environment (env -i, HOME and PATH only):
#   scripts/train.sh --epochs 1    must exit 0 with a test accuracy >= 97%
#   scripts/test.sh                must exit 0
# and prints one verdict line per command with its time. CUDA is not a Debian package, so the
# root builds CPU-only: the newcomer's case.
#
# Usage: scripts/fresh_machine_check.sh [both|train|test]     (default: both; root only)
# Environment:
#   EMBER_DEB_CACHE  folder keeping downloaded .deb files between runs (default
#                    /var/cache/ember-fresh-root/debs; "" for none). apt still resolves and
#                    installs every package inside the root, so a cached file can make a
#                    download faster but can never stand in for a package setup.sh omits.
#   EMBER_KEEP_ROOT=1  keep the root afterwards (its path is printed) for a look inside.
# Exit status: 0 when every command passed, 1 when one failed, 2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
what=${1:-both}
case "$what" in both|train|test) ;; *) echo "usage: $0 [both|train|test]" >&2; exit 2 ;; esac
[[ $(id -u) -eq 0 ]] || { echo "fresh_machine_check: must run as root (mmdebstrap, chroot, mounts)" >&2; exit 2; }

cache=${EMBER_DEB_CACHE-/var/cache/ember-fresh-root/debs}
work=$(mktemp -d /var/tmp/ember-fresh.XXXXXX)
root=$work/root
mounted=()

elapsed() { local s=$1; printf '%dm%02ds' $((s / 60)) $((s % 60)); }

cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" 2>/dev/null ||
      echo "fresh_machine_check: could not unmount ${mounted[i]}" >&2
  done
  mounted=()
  # Mounts the root's own tests made inside it (ip netns binds run/netns onto itself, even when
  # it then fails in a chroot): deepest first, only under $work.
  local m
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done < <(awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r)
  if [[ "${EMBER_KEEP_ROOT:-0}" == "1" ]]; then echo "fresh_machine_check: root kept at $root"; return; fi
  # Never delete through a mount that is still there (a bound /dev would be the host's).
  if grep -q " $work/" /proc/mounts; then
    echo "fresh_machine_check: mounts remain under $work; not removing it" >&2
  else
    rm -rf --one-file-system "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bind() {  # bind <host path> <path inside the root>
  mkdir -p "$root$2"
  mount --bind "$1" "$root$2"
  mounted+=("$root$2")
}

# --- the root ----------------------------------------------------------------------------------
t0=$SECONDS
if ! command -v mmdebstrap >/dev/null; then
  echo "fresh_machine_check: installing mmdebstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null; }
fi
# The host's apt sources, as they are (one-line and deb822 files alike).
sources=()
[[ -s /etc/apt/sources.list ]] && grep -qE '^[[:space:]]*deb' /etc/apt/sources.list && sources+=(/etc/apt/sources.list)
for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do [[ -f $f ]] && sources+=("$f"); done
((${#sources[@]})) || { echo "fresh_machine_check: the host has no apt sources" >&2; exit 1; }

echo "fresh_machine_check: creating a minimal Debian 12 root in $root"
if ! mmdebstrap --variant=minbase --mode=root --quiet bookworm "$root" "${sources[@]}" >"$work/mmdebstrap.log" 2>&1; then
  tail -n 20 "$work/mmdebstrap.log" >&2
  echo "fresh_machine_check: mmdebstrap failed" >&2; exit 1
fi
# What a fresh machine of this kind gets from its environment, and nothing else.
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/usr/local/share/ca-certificates"
for f in /usr/local/share/ca-certificates/*.crt; do [[ -f $f ]] && cp "$f" "$root/usr/local/share/ca-certificates/"; done
[[ -f /etc/npmrc ]] && cp /etc/npmrc "$root/etc/npmrc"
[[ -f /root/.npmrc ]] && cp -p /root/.npmrc "$root/root/.npmrc"
# ca-certificates is not in minbase: setup.sh installs it, and its postinst then runs
# update-ca-certificates over the copied certificates. Where it is already there, run it now.
[[ -x "$root/usr/sbin/update-ca-certificates" ]] && chroot "$root" update-ca-certificates >/dev/null

# A clean clone of HEAD: what is committed, nothing of this working tree's builds or data.
git clone -q --no-hardlinks "$repo" "$root/root/ember"

mkdir -p "$root/proc"; mount -t proc proc "$root/proc"; mounted+=("$root/proc")
bind /sys /sys
bind /dev /dev
bind /dev/pts /dev/pts
mountpoint -q /dev/shm && bind /dev/shm /dev/shm
if [[ -n "$cache" ]]; then
  mkdir -p "$cache/partial"
  bind "$cache" /var/cache/apt/archives
fi
echo "fresh_machine_check: root ready in $(elapsed $((SECONDS - t0)))"

# --- the README's commands -----------------------------------------------------------------------
fail=0
verdicts=()
run_in_root() {  # run_in_root <name> <command line>; its log is $work/<name>.log
  local name=$1 cmd=$2 start=$SECONDS rc=0
  echo "fresh_machine_check: running '$cmd' in the root (log: $work/$name.log)"
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /root/ember && $cmd" </dev/null 2>&1 | tee "$work/$name.log" || rc=${PIPESTATUS[0]}
  LAST_RC=$rc
  LAST_TIME=$(elapsed $((SECONDS - start)))
}
why() {  # the line of a log that best names the problem, most telling kind first
  local p
  for p in 'Could NOT find' '^E: ' 'fatal error' 'error:' 'tests failed out of' 'FAILED' 'CMake Error' 'not found'; do
    grep -m1 -E -- "$p" "$1" && return
  done
  tail -n 1 "$1"
}

if [[ $what == both || $what == train ]]; then
  run_in_root train "scripts/train.sh --epochs 1"
  acc=$(grep -oE 'Test accuracy: [0-9.]+%' "$work/train.log" | tail -n 1 | grep -oE '[0-9.]+' || true)
  if ((LAST_RC != 0)); then
    verdicts+=("FAIL  scripts/train.sh --epochs 1  exit $LAST_RC in $LAST_TIME: $(why "$work/train.log")"); fail=1
  elif [[ -z $acc ]] || ! awk -v a="$acc" 'BEGIN { exit !(a >= 97.0) }'; then
    verdicts+=("FAIL  scripts/train.sh --epochs 1  exit 0 in $LAST_TIME but test accuracy '${acc:-none}' < 97%"); fail=1
  else
    verdicts+=("PASS  scripts/train.sh --epochs 1  exit 0, test accuracy $acc% in $LAST_TIME")
  fi
fi
if [[ $what == both || $what == test ]]; then
  run_in_root test "scripts/test.sh"
  if ((LAST_RC != 0)); then
    verdicts+=("FAIL  scripts/test.sh  exit $LAST_RC in $LAST_TIME: $(why "$work/test.log")"); fail=1
  else
    verdicts+=("PASS  scripts/test.sh  exit 0 in $LAST_TIME")
  fi
fi

echo
echo "=== fresh Debian 12 root (minbase): $(elapsed $((SECONDS - t0))) in all ==="
for v in "${verdicts[@]}"; do echo "fresh_machine_check: $v"; done
exit $fail
