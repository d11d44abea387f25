#!/usr/bin/env bash
# train_gpt (apps/gpt.h) against the same model and recipe in PyTorch (bench/pytorch_gpt.py) on
# Moby-Dick's bytes, side by side on this machine: STEPS steps each, alternately, for ROUNDS rounds
# (seeds 1, 2, ...) in one invocation, so that machine noise hits both alike. Reports per framework
# the median of the rounds' median steps, tokens per second at it, the process's peak RSS and each
# round's validation loss, and Ember's step ratio.
#
#   bench/compare_gpt.sh                      # step times: 3 rounds of 200 steps
#   STEPS=2000 bench/compare_gpt.sh           # the whole recipe: validation losses too
# Env: ROUNDS (3), STEPS (200), THREADS (2), PYTHON (/usr/bin/python3), EMBER_BIN (build/release/apps),
#      DATA (data/moby-dick/data.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-200} THREADS=${THREADS:-2} PYTHON=${PYTHON:-/usr/bin/python3}
EMBER_BIN=${EMBER_BIN:-build/release/apps} DATA=${DATA:-data/moby-dick/data.txt}
[[ -x $EMBER_BIN/train_gpt ]] || { echo "compare_gpt: build first (cmake --build build/release)" >&2; exit 1; }
[[ -f $DATA ]] || { echo "compare_gpt: no $DATA (scripts/fetch_data.sh moby-dick)" >&2; exit 1; }
source bench/pytorch_peer.sh
ensure_pytorch_peer compare_gpt "$PYTHON" cpu
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
summary() {  # summary FILE.json: "validation loss,median step ms"
  "$PYTHON" -c 'import json,sys; h=json.load(open(sys.argv[1])); print("%.4f,%.3f" % (h["val_loss"], h["median_step_ms"]))' "$1"
}
rows=()
for r in $(seq 1 "$ROUNDS"); do
  /usr/bin/time -f "%M" -o "$work/rss" "$EMBER_BIN"/train_gpt --data "$DATA" --steps "$STEPS" --seed "$r" \
    --threads "$THREADS" --device cpu --quiet --history "$work/e.json" >/dev/null
  rows+=("ember,$(summary "$work/e.json"),$(cat "$work/rss")")
  /usr/bin/time -f "%M" -o "$work/rss" "$PYTHON" bench/pytorch_gpt.py --data "$DATA" --steps "$STEPS" --seed "$r" \
    --threads "$THREADS" --json "$work/p.json" >/dev/null
  rows+=("pytorch,$(summary "$work/p.json"),$(cat "$work/rss")")
  echo "round $r/$ROUNDS done: ${rows[-2]} / ${rows[-1]}" >&2
done
printf '%s\n' "${rows[@]}" | "$PYTHON" -c '
import statistics, sys
rows = [l.strip().split(",") for l in sys.stdin if l.strip()]
sep = ", "
tokens = 12 * 64
med = {}
for fw in ("ember", "pytorch"):
    r = [x for x in rows if x[0] == fw]
    steps = [float(x[2]) for x in r]
    med[fw] = statistics.median(steps)
    each = sep.join("%.1f" % s for s in steps)
    losses = sep.join(x[1] for x in r)
    rss = statistics.median(int(x[3]) for x in r) / 1024
    print(f"{fw:8s} step median {med[fw]:.1f} ms (rounds: {each}); {tokens / med[fw] * 1000:.0f} tokens/s; "
          f"peak RSS median {rss:.0f} MiB; validation loss per round {losses} "
          f"(mean {statistics.mean(float(x[1]) for x in r):.4f})")
print("ember / pytorch step: %.2f" % (med["ember"] / med["pytorch"]))
'
