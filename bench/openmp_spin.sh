#!/usr/bin/env bash
# How long libgomp's waiting threads spin (GOMP_SPINCOUNT) against the reference CNN's 2-thread step
# (batch 64, 'data' mode) and a single image's predict, on a quiet machine and beside two busy
# threads of another process (two shell loops), ROUNDS rounds, the spin counts alternating within
# each round; medians of the rounds, and every round's step. 300000 is libgomp's default, 10000
# what Ember's apps set (apps/openmp_spin.h), 0 what OMP_WAIT_POLICY=passive gives.
#   EMBER_BIN=build/release/apps ROUNDS=5 SPINS="0 1000 10000 300000" bench/openmp_spin.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${EMBER_BIN:-build/release/apps}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-150}
SPINS=${SPINS:-0 1000 10000 300000}
declare -A results
load_pids=()
start_load() { for _ in 1 2; do sh -c 'while :; do :; done' & load_pids+=($!); done; sleep 1; }
stop_load() { kill "${load_pids[@]}" 2>/dev/null || true; wait "${load_pids[@]}" 2>/dev/null || true; load_pids=(); }
trap stop_load EXIT
for r in $(seq "$ROUNDS"); do
  for state in quiet loaded; do
    [[ $state == loaded ]] && start_load
    for spin in $SPINS; do
      results[$state,$spin]+="$(GOMP_SPINCOUNT=$spin "$BIN"/bench_train --batch-sizes 1,64 --steps "$STEPS" --warmup 20 \
        --threads 2 | awk '$1 == 64 && $2 == "data" { s = $3 } $1 == 1 && $2 == "predict" { p = $3 } END { print s "/" p }') "
    done
    [[ $state == loaded ]] && stop_load
  done
  echo "round $r done" >&2
done
median() { printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf "%-8s %-8s %10s %12s   %s\n" spin state "step ms" "predict ms" "rounds (step)"
for spin in $SPINS; do
  for state in quiet loaded; do
    steps=$(printf '%s\n' ${results[$state,$spin]} | cut -d/ -f1 | tr '\n' ' ')
    predicts=$(printf '%s\n' ${results[$state,$spin]} | cut -d/ -f2 | tr '\n' ' ')
    printf "%-8s %-8s %10s %12s   %s\n" "$spin" "$state" "$(median "$steps")" "$(median "$predicts")" "$steps"
  done
done
