#!/usr/bin/env bash
# train_mnist --model resnet (apps/model_zoo.h) against the same model in PyTorch
# (bench/pytorch_resnet.py) on Fashion-MNIST, side by side on this machine: EPOCHS epochs each,
# alternately, for ROUNDS rounds in one invocation, so that machine noise hits both alike.
# Reports per framework the median training time per epoch (validation excluded in both) and the
# process's peak RSS (everything: the data set, the framework, the activations), and Ember's ratio.
#
#   bench/compare_resnet.sh          # CPU, 2 threads
# Env: ROUNDS (3), EPOCHS (2), THREADS (2), PYTHON (/usr/bin/python3), EMBER_BIN (build/release/apps),
#      DATA (data/fashion-mnist)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3} EPOCHS=${EPOCHS:-2} THREADS=${THREADS:-2} PYTHON=${PYTHON:-/usr/bin/python3}
EMBER_BIN=${EMBER_BIN:-build/release/apps} DATA=${DATA:-data/fashion-mnist}
[[ -x $EMBER_BIN/train_mnist ]] || { echo "compare_resnet: build first (cmake --build build/release)" >&2; exit 1; }
[[ -d $DATA ]] || { echo "compare_resnet: no $DATA (scripts/fetch_data.sh fashion-mnist)" >&2; exit 1; }
source bench/pytorch_peer.sh
ensure_pytorch_peer compare_resnet "$PYTHON" cpu
# pytorch_resnet.py reads raw IDX files: a folder of gunzipped copies when the data set is gzipped.
raw_dir=$(mktemp -d); trap 'rm -rf "$raw_dir"' EXIT
raw_idx_copy "$DATA" "$raw_dir"
rows=()
for r in $(seq 1 "$ROUNDS"); do
  log=$(mktemp)
  /usr/bin/time -f "%M" -o "$log.rss" "$EMBER_BIN"/train_mnist --device cpu --model resnet --dataset fashion-mnist \
    --data-dir "$DATA" --epochs "$EPOCHS" --seed "$r" --threads "$THREADS" --quiet --history "$log.json" >/dev/null
  # Training seconds per epoch: the training images over the epoch's training throughput.
  while read -r s; do rows+=("ember,$s,$(cat "$log.rss")"); done < <(
    "$PYTHON" -c 'import json,sys; h=json.load(open(sys.argv[1]))
for e in h["history"]: print("%.2f" % (60000 / e["images_per_second"]))' "$log.json")
  /usr/bin/time -f "%M" -o "$log.rss" "$PYTHON" bench/pytorch_resnet.py --data-dir "$raw_dir" --epochs "$EPOCHS" \
    --seed "$r" --threads "$THREADS" > "$log"
  while read -r s; do rows+=("pytorch,$s,$(cat "$log.rss")"); done < <(sed -n 's/^epoch [0-9]*\/[0-9]*: \([0-9.]*\) s.*/\1/p' "$log")
  rm -f "$log" "$log.rss" "$log.json"
  echo "round $r/$ROUNDS done" >&2
done
printf '%s\n' "${rows[@]}" | "$PYTHON" -c '
import statistics, sys
rows = [l.strip().split(",") for l in sys.stdin if l.strip()]
med = {}
for fw in ("ember", "pytorch"):
    secs = [float(r[1]) for r in rows if r[0] == fw]
    rss = [int(r[2]) for r in rows if r[0] == fw]
    med[fw] = statistics.median(secs)
    print(f"{fw:8s} epoch (training) median {med[fw]:.1f} s over {len(secs)} epochs (min {min(secs):.1f}, max {max(secs):.1f}); "
          f"peak RSS median {statistics.median(rss) / 1024:.0f} MiB")
print("ember / pytorch epoch time: %.2f" % (med["ember"] / med["pytorch"]))
'
