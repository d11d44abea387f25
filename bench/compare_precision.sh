#!/usr/bin/env bash
# The reference CNN's training step (batch 64, 'data' mode: a fresh random batch each step) in fp32
# and in mixed bf16, Ember beside PyTorch 1.13 (bench/pytorch_reference.py, channels_last;
# --precision autocast_bf16 is torch.autocast(dtype=bfloat16)), ROUNDS rounds with the four
# configurations alternating within each, medians of the rounds. Each round also times the same
# run's GEMM peaks (n = 2000: oneDNN's sgemm, and the bf16 product Ember's mixed_bf16 runs on), to
# which the steps' FLOP (the convolutions' and dense layers' direct multiply-adds x 2) are compared.
#   EMBER_BIN=build/release/apps ROUNDS=5 bench/compare_precision.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${EMBER_BIN:-build/release/apps}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-300}
THREADS=${THREADS:-2}
PY=${PYTHON:-/usr/bin/python3}
declare -A results
ember() {  # $1: precision; prints "<step ms> <GFLOP/s>"
  "$BIN"/bench_train --batch-sizes 64 --steps "$STEPS" --warmup 30 --threads "$THREADS" --precision "$1" |
    awk '$1 == 64 && $2 == "data" { print $3, $6 }'
}
torch_step() {  # $1: precision
  "$PY" bench/pytorch_reference.py --mode data --threads "$THREADS" --batch-sizes 64 --steps "$STEPS" --warmup 30 \
    --no-header --precision "$1" | awk -F, '{ print $5 }'
}
# A CPU without bf16 instructions runs the policy in fp32 (bench_train refuses it, strict): its
# mixed_bf16 row and bf16 peak are left out, and the output says so.
bf16=1
"$BIN"/bench_matmul --sizes 64 --naive-max 0 --threads 1 --bf16 >/dev/null 2>&1 || bf16=0
peaks() {  # prints "<sgemm GFLOP/s> <bf16 GFLOP/s>" (the second "-" without bf16)
  local tmp
  tmp=$(mktemp)
  if ((bf16)); then
    "$BIN"/bench_matmul --sizes 2000 --naive-max 0 --threads "$THREADS" --bf16 --csv "$tmp" >/dev/null
    awk -F, 'NR == 2 { print $4, $11 }' "$tmp"
  else
    "$BIN"/bench_matmul --sizes 2000 --naive-max 0 --threads "$THREADS" --csv "$tmp" >/dev/null
    awk -F, 'NR == 2 { print $4, "-" }' "$tmp"
  fi
  rm -f "$tmp"
}
have_torch=0
"$PY" -c 'import torch' 2>/dev/null && have_torch=1
for r in $(seq "$ROUNDS"); do
  read -r s g <<<"$(ember fp32)"
  results[ember-fp32]+="$s " gflop_fp32=$g
  if ((bf16)); then
    read -r s _ <<<"$(ember mixed_bf16)"
    results[ember-mixed_bf16]+="$s "
  fi
  if ((have_torch)); then
    results[pytorch-fp32]+="$(torch_step fp32) "
    results[pytorch-autocast_bf16]+="$(torch_step autocast_bf16) "
  fi
  read -r p32 p16 <<<"$(peaks)"
  results[peak-sgemm]+="$p32 " results[peak-bf16]+="$p16 "
  echo "round $r done" >&2
done
median() { printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
e32=$(median "${results[ember-fp32]}")
p32=$(median "${results[peak-sgemm]}")
if ((bf16)); then
  e16=$(median "${results[ember-mixed_bf16]}")
  p16=$(median "${results[peak-bf16]}")
fi
# The step's FLOP from bench_train's GFLOP/s column (the same FLOP count in either precision).
step_gflop=$(awk -v ms="$e32" -v g="$gflop_fp32" 'BEGIN { print ms * g / 1000 }')
printf "%-24s %10s %14s %s\n" configuration "step ms" "x Ember fp32" "rounds"
for who in ember-fp32 ember-mixed_bf16 pytorch-fp32 pytorch-autocast_bf16; do
  [[ -z ${results[$who]:-} ]] && continue
  m=$(median "${results[$who]}")
  printf "%-24s %10s %14.3f %s\n" "$who" "$m" "$(awk -v a="$m" -v b="$e32" 'BEGIN { print a / b }')" "${results[$who]}"
done
if ! ((bf16)); then
  echo "ember-mixed_bf16: not run: this CPU has no bf16 instructions, so the policy runs fp32 (the fp32 row)"
  printf "same-run peak (n = 2000): sgemm %s GFLOP/s; the step: %s GFLOP\n" "$p32" "$step_gflop"
  awk -v g="$step_gflop" -v a="$e32" -v p="$p32" 'BEGIN {
    printf "Ember fp32: %.0f GFLOP/s, %.2f of the sgemm peak\n", g / a * 1000, g / a * 1000 / p }'
  exit 0
fi
if [[ -n ${results[pytorch-autocast_bf16]:-} ]]; then
  pa=$(median "${results[pytorch-autocast_bf16]}")
  printf "Ember mixed_bf16 / PyTorch autocast bf16: %.3f\n" "$(awk -v a="$e16" -v b="$pa" 'BEGIN { print a / b }')"
fi
printf "same-run peaks (n = 2000): sgemm %s GFLOP/s, bf16 product %s GFLOP/s; the step: %s GFLOP\n" "$p32" "$p16" "$step_gflop"
awk -v g="$step_gflop" -v a="$e32" -v b="$e16" -v p="$p32" -v q="$p16" 'BEGIN {
  printf "Ember fp32: %.0f GFLOP/s, %.2f of the sgemm peak; mixed_bf16: %.0f GFLOP/s, %.3f of the bf16 peak\n",
    g / a * 1000, g / a * 1000 / p, g / b * 1000, g / b * 1000 / q }'
