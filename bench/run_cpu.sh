#!/usr/bin/env bash
# Every CPU benchmark of docs/benchmarks.md, then the plots: results in bench/results.
# Needs a Release build in build/release (scripts/train.sh makes one) and, for the PyTorch
# comparison, python3-torch (EMBER_SETUP_BENCH=1 scripts/setup.sh installs it and gnuplot).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${EMBER_BIN:-build/release/apps}
mkdir -p bench/results
"$BIN"/bench_matmul --csv bench/results/matmul_cpu.csv
"$BIN"/bench_conv --devices cpu --csv bench/results/conv_cpu.csv
"$BIN"/bench_train --csv bench/results/train_cpu.csv
EMBER_BIN=$BIN EPOCHS=${EPOCHS:-1} bench/compare_pytorch.sh
bench/plot.sh
