#!/usr/bin/env bash
# The test command: installs what is missing, fetches MNIST (the real-data test needs it), and
# builds and tests the two configurations CI requires, warnings as errors:
#   1. build/test-cuda  CUDA backend on when the toolkit is found (compiles and links every
#      .cu and cuDNN/cuBLAS/NCCL call site), Release: every test, the real-data one included;
#   2. build/test-asan  CUDA off, ASan + UBSan: every test but the real-data one (an MNIST
#      epoch under ASan takes minutes and checks nothing the release run does not);
# then runs the IDX-reader fuzzer for a bounded time (clang's libFuzzer).
# Exit status: non-zero if any step or test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export CTEST_OUTPUT_ON_FAILURE=1
FUZZ_SECONDS=${FUZZ_SECONDS:-30}

scripts/setup.sh
scripts/fetch_data.sh mnist

section() { printf '\n=== %s ===\n' "$*"; }

section "configuration 1: CUDA=AUTO, Release, -Werror"
cmake -S . -B build/test-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=AUTO -DEMBER_WERROR=ON
cmake --build build/test-cuda
# -j1: each test process already uses both cores through OpenMP.
ctest --test-dir build/test-cuda -j1

section "configuration 2: CUDA=OFF, ASan + UBSan, -Werror"
cmake -S . -B build/test-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_CUDA=OFF -DEMBER_SANITIZE=ON \
      -DEMBER_WERROR=ON
cmake --build build/test-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/test-asan -j1 -LE realdata

section "fuzzing the IDX reader for ${FUZZ_SECONDS}s"
CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_FUZZ=ON \
      -DEMBER_TESTS=OFF -DEMBER_APPS=OFF -DEMBER_CUDA=OFF -DEMBER_MPI=OFF >/dev/null
cmake --build build/fuzz --target fuzz_idx
corpus=$(mktemp -d); trap 'rm -rf "$corpus"' EXIT
cp tests/fuzz/corpus/* "$corpus"/
build/fuzz/tests/fuzz/fuzz_idx -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -print_final_stats=1 \
  "$corpus" 2>&1 | tail -n 3

section "all tests passed"
