# Sourced by the side-by-side benchmarks: ensure_pytorch_peer NAME PYTHON DEVICE installs the peer
# when missing and says so: Debian's python3-torch, with OpenBLAS for its Linear layers (its
# libblas.so.3 is otherwise the reference BLAS: 3.4 ms of GEMMs per step instead of 0.16 ms, see
# bench/pytorch_reference.py). Exits when PYTHON still has no torch.
ensure_pytorch_peer() {
  local name=$1 python=$2 device=$3 need=() sudo
  [[ $python == /usr/bin/python3 ]] && ! "$python" -c "import torch" 2>/dev/null && need+=(python3-torch)
  [[ $device == cpu ]] && command -v dpkg-query >/dev/null &&
    [[ $(dpkg-query -W -f '${Status}' libopenblas0-pthread 2>/dev/null) != *" installed" ]] && need+=(libopenblas0-pthread)
  if ((${#need[@]})); then
    echo "$name: installing ${need[*]} with apt-get" >&2
    sudo=$([[ $EUID -ne 0 ]] && echo sudo || true)
    $sudo apt-get install -y --no-install-recommends "${need[@]}" >/dev/null ||
      { $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; }
    echo "$name: installed ${need[*]}" >&2
  fi
  "$python" -c "import torch" 2>/dev/null || { echo "$name: $python has no torch (apt-get install python3-torch)" >&2; exit 1; }
}

# raw_idx_copy DATA DIR: the four IDX files of DATA, gunzipped where they are gzipped, into DIR (the
# PyTorch scripts read raw IDX files).
raw_idx_copy() {
  local data=$1 dir=$2 f
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    if [[ -f $data/$f ]]; then cp "$data/$f" "$dir/"; else gunzip -c "$data/$f.gz" > "$dir/$f"; fi
  done
}
