#!/usr/bin/env bash
# The main job (train_mnist) against bench_train, ROUNDS rounds, alternating, medians:
# - step: train_mnist's time per step is the wall time of a 450-step run minus that of a 50-step
#   run, over 400 (loading, plan building and the final evaluation cancel); bench_train's is its
#   'data' mode's median at batch 64 (a median: the train_mnist figure is a mean, jitter included);
# - epoch: the wall time of `train_mnist --epochs 1` (process start, loading, 938 steps, the test
#   set's evaluation) against 938 bench_train steps plus 10,000 images at its 'eval' rate (batch 256,
#   evaluate()'s default).
#   EMBER_BIN=build/release/apps ROUNDS=5 bench/main_job_step.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${EMBER_BIN:-build/release/apps}
ROUNDS=${ROUNDS:-5}
wall() { /usr/bin/time -f %e "$BIN"/train_mnist --device cpu --epochs 1 --steps "$1" --quiet 2>&1 >/dev/null | tail -1; }
fit_ms=() bench_ms=() epoch_s=() predicted_s=()
for r in $(seq "$ROUNDS"); do
  short=$(wall 50)
  long=$(wall 450)
  fit=$(awk -v a="$short" -v b="$long" 'BEGIN { printf "%.3f", (b - a) / 400 * 1000 }')
  out=$("$BIN"/bench_train --batch-sizes 64,256 --steps 400 --warmup 20)
  bench=$(awk '$1 == 64 && $2 == "data" { print $3 }' <<<"$out")
  eval_ips=$(awk '$1 == 256 && $2 == "eval" { print $5 }' <<<"$out")
  epoch=$(wall 100000)
  predicted=$(awk -v s="$bench" -v e="$eval_ips" 'BEGIN { printf "%.3f", 938 * s / 1000 + 10000 / e }')
  echo "round $r: step: train_mnist ${fit} ms (50 steps ${short} s, 450 steps ${long} s), bench_train ${bench} ms;" \
    "epoch: ${epoch} s, 938 steps + evaluation at ${eval_ips} images/s: ${predicted} s"
  fit_ms+=("$fit") bench_ms+=("$bench") epoch_s+=("$epoch") predicted_s+=("$predicted")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
f=$(median "${fit_ms[@]}") b=$(median "${bench_ms[@]}")
e=$(median "${epoch_s[@]}") p=$(median "${predicted_s[@]}")
awk -v f="$f" -v b="$b" -v e="$e" -v p="$p" 'BEGIN {
  printf "median step: train_mnist %.3f ms, bench_train %.3f ms, ratio %.3f\n", f, b, f / b
  printf "median epoch: train_mnist %.2f s, steps + evaluation %.2f s, ratio %.3f\n", e, p, e / p }'
