#!/usr/bin/env bash
# The test command: installs what is missing, fetches MNIST (the real-data test needs it), and
# builds and tests the two configurations CI requires, warnings as errors:
#   1. build/test-cuda  CUDA backend on when the toolkit is found (compiles and links every
#      .cu and cuDNN/cuBLAS/NCCL call site), Release: every test, the real-data one included;
#   2. build/test-asan  CUDA and MPI off, ASan + UBSan: every test but the real-data one (an
#      MNIST epoch under ASan takes minutes and checks nothing the release run does not). MPI is
#      off here because OpenMPI's own allocations fail LeakSanitizer; configuration 1 runs the
#      MPI tests (mpirun -np 2 on loopback);
# Configuration 1 also builds the API reference (the docs target: doxygen, a warning fails), runs
# the GPU check's first plan on its binaries (scripts/gpu_check.sh: without a GPU every GPU item is
# skipped, so the harness itself is exercised), installs the package and compiles every C++ block
# of README.md and docs/usage.md against it (scripts/check_doc_snippets.py). The script
# then runs the IDX and safetensors fuzzers for a bounded time each (clang's libFuzzer). First of all,
# scripts/check_layering.py checks the folders' floors from the #include lines, and
# clang-format that every C++ file is formatted.
# Environment: EMBER_TEST_PARTS (default "release sanitize fuzz") picks the parts after the
# layering and formatting checks: release = configuration 1, sanitize = configuration 2, fuzz =
# the fuzzers. CI's host run takes "release" only, because the fresh root then runs this whole
# command again and its configuration 2 and fuzzers are the host's, bit for bit (no CUDA, no
# MPI in either): those run once per CI (configuration 1 twice: with CUDA on the host, CPU-only
# in the root).
# Exit status: non-zero if any step or test fails, 2 for an unknown part.
set -euo pipefail
cd "$(dirname "$0")/.."
export CTEST_OUTPUT_ON_FAILURE=1
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
PARTS=${EMBER_TEST_PARTS:-release sanitize fuzz}
for part in $PARTS; do
  case "$part" in release|sanitize|fuzz) ;; *)
    echo "test.sh: unknown part '$part' in EMBER_TEST_PARTS (release, sanitize, fuzz)" >&2; exit 2 ;;
  esac
done
wants() { [[ " $PARTS " == *" $1 "* ]]; }

scripts/setup.sh
scripts/fetch_data.sh mnist
scripts/fetch_data.sh fashion-mnist  # examples/fine_tuning and examples/augmentation

section() { printf '\n=== %s ===\n' "$*"; }

section "layering: includes only downward, relative; public headers = ember.h's closure"
python3 scripts/check_layering.py
section "formatting: clang-format (.clang-format) leaves every C++ file as it is"
git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format --dry-run -Werror

# The installed package: public headers free of CUDA, the example project and the shadowing
# consumer built against it.
check_install() {  # check_install <build dir> <prefix> [extra CXX flags for the example]
  rm -rf "$2"
  cmake --install "$1" --prefix "$2" >/dev/null
  if grep -rEn '#include <(cuda|cudnn|cublas|nccl|mpi)' "$2/include"; then
    echo "public headers expose a CUDA/MPI header" >&2; return 1
  fi
  # libember itself needs no MPI or CUDA library to start (both are modules loaded on demand).
  if ldd "$(find "$2" -name 'libember.so.*' -type f | head -1)" | grep -E 'lib(mpi|cudart|cudnn|cublas|nccl)'; then
    echo "libember links an MPI or CUDA library: a CPU-only program could not start without it" >&2; return 1
  fi
  local example
  for example in custom_model residual_model two_input regression autoencoder multilabel text_model fine_tuning augmentation; do
    cmake -S examples/$example -B "$1/$example" -G Ninja -DCMAKE_PREFIX_PATH="$PWD/$2" \
          -DCMAKE_CXX_FLAGS="${3:-}" >/dev/null
    cmake --build "$1/$example"
    "$1/$example/$example" data/mnist
  done
  # A consumer with its own core/, data/ and layers/ headers on its include path, and no
  # C++ standard of its own: Ember's headers must still find theirs, and C++20 come with it.
  cmake -S tests/consumer -B "$1/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$PWD/$2" \
        -DCMAKE_CXX_FLAGS="${3:-}" >/dev/null
  cmake --build "$1/consumer"
  "$1/consumer/consumer"
}

if wants release; then
section "configuration 1: CUDA=AUTO, Release, -Werror"
cmake -S . -B build/test-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=AUTO -DEMBER_WERROR=ON
cmake --build build/test-cuda
section "configuration 1: the API reference (doxygen over the public headers; a warning fails)"
cmake --build build/test-cuda --target docs
# -j1: each test process already uses both cores through OpenMP.
ctest --test-dir build/test-cuda -j1

section "configuration 1: the GPU check's first run on these binaries (without a GPU: every GPU item skipped)"
rm -rf build/test-cuda/gpu-check
OUT=build/test-cuda/gpu-check GPU_CHECK_BUILD=build/test-cuda GPU_CHECK_DEADLINE=120 bash scripts/gpu_check.sh run first
[[ $(wc -l <build/test-cuda/gpu-check/summary.txt) -ge 14 ]] || { echo "gpu_check: summary.txt lacks items" >&2; exit 1; }

section "configuration 1: install + examples/ (custom_model, residual_model, two_input, regression, autoencoder, multilabel, text_model, fine_tuning, augmentation)"
check_install build/test-cuda build/install-cuda
section "configuration 1: every C++ block of README.md and docs/usage.md compiles against the installed package"
python3 scripts/check_doc_snippets.py build/install-cuda/include README.md docs/usage.md
fi

if wants sanitize; then
section "configuration 2: CUDA=OFF, MPI=OFF, ASan + UBSan, -Werror"
cmake -S . -B build/test-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_CUDA=OFF -DEMBER_MPI=OFF -DEMBER_SANITIZE=ON \
      -DEMBER_WERROR=ON
cmake --build build/test-asan
# Not the real-data runs (ten processes reading MNIST under ASan) nor the engine fixtures (their
# hashes are the Release build's rounding).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/test-asan -j1 -LE 'realdata|fixtures'
section "configuration 2: install + examples/ (custom_model, residual_model, two_input, regression, autoencoder, multilabel, text_model, fine_tuning, augmentation)"
ASAN_OPTIONS=detect_leaks=1 check_install build/test-asan build/install-asan "-fsanitize=address,undefined"
fi

if wants fuzz; then

section "fuzzing the IDX and safetensors readers for ${FUZZ_SECONDS}s each"
CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_FUZZ=ON \
      -DEMBER_TESTS=OFF -DEMBER_APPS=OFF -DEMBER_CUDA=OFF -DEMBER_MPI=OFF >/dev/null
cmake --build build/fuzz --target fuzz_idx fuzz_safetensors
corpus=$(mktemp -d); trap 'rm -rf "$corpus"' EXIT
for reader in idx safetensors; do
  mkdir -p "$corpus/$reader"
  cp tests/fuzz/corpus_$reader/* "$corpus/$reader"/
  # A crash, leak, sanitizer report or an input above 2 GiB RSS makes the fuzzer exit non-zero.
  build/fuzz/tests/fuzz/fuzz_$reader -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -print_final_stats=1 \
    "$corpus/$reader" >"$corpus/$reader.log" 2>&1 || { tail -n 40 "$corpus/$reader.log"; exit 1; }
  echo "fuzz_$reader: $(grep -o 'number_of_executed_units: [0-9]*' "$corpus/$reader.log" | cut -d' ' -f2) executions, no crash"
done
fi

section "all tests passed ($PARTS)"
