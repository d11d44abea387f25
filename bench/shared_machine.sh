#!/usr/bin/env bash
# The reference CNN's step (batch 64, 'data' mode) and a single image's predict, on a quiet machine
# and beside two busy threads of another process (two shell loops), ROUNDS rounds, the
# configurations alternating within each round; medians of the rounds. Ember on 2 threads, on 1 and
# on the cores other processes leave free (--threads free), Ember on 2 with libgomp's default spin
# (GOMP_SPINCOUNT=300000; the apps set 10000 where neither it nor OMP_WAIT_POLICY is set and no
# thread binding is, see apps/openmp_spin.h), and PyTorch 1.13 on 2 (bench/pytorch_reference.py, the step only), side by side.
#   EMBER_BIN=build/release/apps ROUNDS=3 bench/shared_machine.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${EMBER_BIN:-build/release/apps}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-300}
PY=${PYTHON:-/usr/bin/python3}
declare -A results
load_pids=()
start_load() { for _ in 1 2; do sh -c 'while :; do :; done' & load_pids+=($!); done; sleep 1; }
stop_load() { kill "${load_pids[@]}" 2>/dev/null || true; wait "${load_pids[@]}" 2>/dev/null || true; load_pids=(); }
trap stop_load EXIT
ember() {  # $1: threads (or free), then VAR=value settings; prints "<step ms> <predict ms>"
  local threads=$1
  shift
  env "$@" "$BIN"/bench_train --batch-sizes 1,64 --steps "$STEPS" --warmup 20 --threads "$threads" |
    awk '$1 == 64 && $2 == "data" { s = $3 } $1 == 1 && $2 == "predict" { p = $3 } END { print s, p }'
}
torch_step() { "$PY" bench/pytorch_reference.py --mode data --threads 2 --batch-sizes 64 --steps "$STEPS" --no-header |
  awk -F, '{ print $5 }'; }
for r in $(seq "$ROUNDS"); do
  for state in quiet loaded; do
    [[ $state == loaded ]] && start_load
    read -r s p <<<"$(ember 2)"
    results[$state,ember-2,step]+="$s " results[$state,ember-2,predict]+="$p "
    read -r s p <<<"$(ember 1)"
    results[$state,ember-1,step]+="$s " results[$state,ember-1,predict]+="$p "
    read -r s p <<<"$(ember free)"
    results[$state,ember-free,step]+="$s " results[$state,ember-free,predict]+="$p "
    read -r s p <<<"$(ember 2 GOMP_SPINCOUNT=300000)"
    results[$state,ember-2-spin300k,step]+="$s " results[$state,ember-2-spin300k,predict]+="$p "
    if "$PY" -c 'import torch' 2>/dev/null; then results[$state,pytorch,step]+="$(torch_step) "; fi
    [[ $state == loaded ]] && stop_load
  done
  echo "round $r done" >&2
done
median() { printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf "%-16s %-8s %12s %12s %8s %16s\n" who state "step ms" "predict ms" "x quiet" "rounds (step)"
# x quiet: against the same configuration's quiet step
for who in ember-2 ember-1 ember-free ember-2-spin300k pytorch; do
  [[ -z ${results[quiet,$who,step]:-} ]] && continue
  q=$(median "${results[quiet,$who,step]}")
  for state in quiet loaded; do
    s=$(median "${results[$state,$who,step]}")
    p=$( [[ $who == pytorch ]] && echo - || median "${results[$state,$who,predict]}")
    printf "%-16s %-8s %12s %12s %8.2f   %s\n" "$who" "$state" "$s" "$p" "$(awk -v a="$s" -v b="$q" 'BEGIN { print a / b }')" \
      "${results[$state,$who,step]}"
  done
done
