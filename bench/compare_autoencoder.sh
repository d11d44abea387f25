#!/usr/bin/env bash
# examples/autoencoder against the same recipe in PyTorch (bench/pytorch_autoencoder.py: Glorot
# weights as Ember's and Keras' Dense, Adam 1e-3 with eps 1e-7, batch 256, 10 epochs), side by
# side on this machine: seeds 1..SEEDS, Ember then PyTorch for each seed, in one invocation.
# Reports each run's test MSE and median seconds per epoch, then the means. Installs the PyTorch
# peer (python3-torch, libopenblas0-pthread) when missing, and says so.
#
#   bench/compare_autoencoder.sh
# Env: SEEDS (3), BUILD (build/dev: an Ember build to install and build the example against),
#      PYTHON (/usr/bin/python3), DATA (data/mnist)
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-3} BUILD=${BUILD:-build/dev} PYTHON=${PYTHON:-/usr/bin/python3} DATA=${DATA:-data/mnist}
[[ -f $BUILD/build.ninja || -f $BUILD/Makefile ]] || { echo "compare_autoencoder: no Ember build in $BUILD" >&2; exit 1; }
[[ -d $DATA ]] || { echo "compare_autoencoder: no $DATA (scripts/fetch_data.sh mnist)" >&2; exit 1; }
source bench/pytorch_peer.sh
ensure_pytorch_peer compare_autoencoder "$PYTHON" cpu
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cmake --install "$BUILD" --prefix "$work/prefix" >/dev/null
cmake -S examples/autoencoder -B "$work/example" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/example" >/dev/null
rows=()
for s in $(seq 1 "$SEEDS"); do
  "$work/example/autoencoder" "$DATA" "$s" > "$work/ember.log" || true  # its own check may fail: report anyway
  rows+=("ember,$s,$(sed -n 's/^test_mse //p' "$work/ember.log"),$(sed -n 's/^epoch [0-9]*:.*, \([0-9.]*\) s$/\1/p' "$work/ember.log" | tr '\n' ' ')")
  "$PYTHON" bench/pytorch_autoencoder.py --data-dir "$DATA" --seed "$s" > "$work/torch.log"
  rows+=("pytorch,$s,$(sed -n 's/^test_mse //p' "$work/torch.log"),$(sed -n 's/^epoch [0-9]*\/[0-9]*: \([0-9.]*\) s.*/\1/p' "$work/torch.log" | tr '\n' ' ')")
  echo "seed $s/$SEEDS done" >&2
done
printf '%s\n' "${rows[@]}" | "$PYTHON" -c '
import statistics, sys
runs = {}
print("framework  seed  test_mse  s/epoch (median)")
for line in sys.stdin:
    fw, seed, mse, secs = line.strip().split(",")
    med = statistics.median(float(x) for x in secs.split())
    runs.setdefault(fw, []).append((float(mse), med))
    print(f"{fw:9s}  {seed:>4s}  {float(mse):.5f}  {med:.2f}")
for fw, r in runs.items():
    print(f"{fw:9s}  mean  {statistics.mean(m for m, _ in r):.5f}  {statistics.median(s for _, s in r):.2f}")
e, p = runs["ember"], runs["pytorch"]
print(f"ember / pytorch: test_mse {statistics.mean(m for m, _ in e) / statistics.mean(m for m, _ in p):.3f}, "
      f"s/epoch {statistics.median(s for _, s in e) / statistics.median(s for _, s in p):.2f}")
'
