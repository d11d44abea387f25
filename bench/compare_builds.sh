#!/usr/bin/env bash
# Two builds' training steps side by side (a change against its base), alternating in ROUNDS
# rounds so that machine noise hits both alike; also the new build under --conv-algorithms exact.
# Prints each round's bench_train medians (batch 64, ms per step with data excluded / included).
#   BASE_BIN=/path/to/base/build/apps NEW_BIN=build/dev/apps ROUNDS=5 bench/compare_builds.sh
# (the base built from a worktree of the base commit: git worktree add ../base <commit>).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5} STEPS=${STEPS:-400} BATCH=${BATCH:-64}
: "${BASE_BIN:?set BASE_BIN to the apps folder of the base build}"
NEW_BIN=${NEW_BIN:-build/dev/apps}
medians() {  # medians() <bench_train> [flags]: "step data"
  "$@" --batch-sizes "$BATCH" --steps "$STEPS" --warmup 30 --data-dir data/mnist |
    awk '$2 == "step" { s = $3 } $2 == "data" { d = $3 } END { print s, d }'
}
for r in $(seq "$ROUNDS"); do
  base=$(medians "$BASE_BIN"/bench_train)
  fast=$(medians "$NEW_BIN"/bench_train)
  exact=$(medians "$NEW_BIN"/bench_train --conv-algorithms exact)
  echo "round $r: base $base | fast $fast | exact $exact"
done
