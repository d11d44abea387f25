#!/usr/bin/env bash
# Ember vs PyTorch on the reference CNN, side by side on this machine: the same model, init,
# optimizer and batch, run alternately (Ember, PyTorch NCHW, PyTorch channels_last) for
# ROUNDS rounds in one invocation, so that machine noise hits all three alike. Reports the
# median over rounds of each run's median step time, and Ember's ratio to PyTorch's faster
# layout (the anchor). Each CPU round also times oneDNN's sgemm (n = 2000, bench_matmul): the
# step's GFLOP/s (direct-convolution FLOP) are reported as a fraction of that same-run peak,
# which does not depend on the day's machine as absolute times do. Optionally (EPOCHS=1) also one
# full MNIST epoch each, with peak RSS.
#
#   bench/compare_pytorch.sh                 # CPU, 2 threads, batch 64
#   DEVICE=cuda bench/compare_pytorch.sh     # on a GPU machine (PyTorch's own build there)
# Env: ROUNDS (5), STEPS (200), BATCH (64), THREADS (2), EPOCHS (0), PYTHON (/usr/bin/python3),
#      EMBER_BIN (build/release/apps), OUT (bench/results)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5} STEPS=${STEPS:-200} BATCH=${BATCH:-64} THREADS=${THREADS:-2} EPOCHS=${EPOCHS:-0}
PYTHON=${PYTHON:-/usr/bin/python3} EMBER_BIN=${EMBER_BIN:-build/release/apps} OUT=${OUT:-bench/results}
DEVICE=${DEVICE:-cpu}
mkdir -p "$OUT"
[[ -x $EMBER_BIN/bench_train ]] || { echo "compare_pytorch: build first (cmake --build build/release)" >&2; exit 1; }
source bench/pytorch_peer.sh  # installs the peer (python3-torch, OpenBLAS) when missing, and says so
ensure_pytorch_peer compare_pytorch "$PYTHON" "$DEVICE"

raw="$OUT/compare_${DEVICE}_raw.csv"
echo "round,framework,device,batch,mode,median_ms,min_ms,images_per_s,gflops" > "$raw"
for r in $(seq 1 "$ROUNDS"); do
  tmp=$(mktemp)
  "$EMBER_BIN"/bench_train --device "$([[ $DEVICE == cuda ]] && echo gpu || echo cpu)" --batch-sizes "$BATCH" \
    --steps "$STEPS" --threads "$THREADS" --csv "$tmp" >/dev/null
  tail -n +2 "$tmp" | sed "s/^/$r,/" >> "$raw"
  if [[ $DEVICE == cpu ]]; then  # the same-run GEMM peak: oneDNN sgemm at n = 2000
    "$EMBER_BIN"/bench_matmul --sizes 2000 --naive-max 0 --threads "$THREADS" --csv "$tmp" >/dev/null
    awk -F, -v r="$r" 'NR == 2 { printf "%s,onednn-sgemm,cpu,2000,sgemm,%s,%s,,%s\n", r, $3, $3, $4 }' "$tmp" >> "$raw"
  fi
  for fmt in nchw channels_last; do
    for mode in step data; do
      "$PYTHON" bench/pytorch_reference.py --mode $mode --memory-format $fmt --device "$DEVICE" --threads "$THREADS" \
        --batch-sizes "$BATCH" --steps "$STEPS" --no-header | sed "s/^/$r,/" >> "$raw"
    done
  done
  rm -f "$tmp"
  echo "round $r/$ROUNDS done" >&2
done

"$PYTHON" - "$raw" "$OUT/compare_${DEVICE}.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault((r["framework"], r["mode"]), []).append(float(r["median_ms"]))
out = open(sys.argv[2], "w")
out.write("framework,mode,rounds,median_ms,min_round_ms,max_round_ms\n")
print(f"{'framework':24s} {'mode':5s} {'median ms':>10s} {'range over rounds':>20s}")
for (fw, mode), v in sorted(by.items()):
    print(f"{fw:24s} {mode:5s} {statistics.median(v):10.3f} {min(v):9.3f} .. {max(v):7.3f}")
    out.write(f"{fw},{mode},{len(v)},{statistics.median(v):.4f},{min(v):.4f},{max(v):.4f}\n")
peaks = [float(r["gflops"]) for r in rows if r["framework"] == "onednn-sgemm"]
peak = statistics.median(peaks) if peaks else None
# The step's FLOP (direct convolution, apps/model_zoo.h) from Ember's rows: the same model.
step = next((r for r in rows if r["framework"] == "ember" and r["mode"] == "step"), None)
gflop = float(step["gflops"]) * float(step["median_ms"]) / 1e3 if step else None
if peak:
    print(f"oneDNN sgemm (n = 2000), same run: {peak:.0f} GFLOP/s (median over rounds); the step: {gflop:.3f} GFLOP")
for mode in ("step", "data"):
    e = statistics.median(by[("ember", mode)])
    if peak:
        for fw in ("ember", "pytorch-nchw", "pytorch-channels_last"):
            g = gflop / (statistics.median(by[(fw, mode)]) / 1e3)
            print(f"{mode}: {fw:22s} {g:5.0f} GFLOP/s = {g / peak:.2f} of the same-run sgemm peak")
    torch_best = min(statistics.median(by[(f"pytorch-{f}", mode)]) for f in ("nchw", "channels_last"))
    # Per-round ratios too: each round ran both back to back, so their spread shows the noise.
    per_round = []
    for rnd in sorted({r["round"] for r in rows}):
        def get(fw):
            return [float(r["median_ms"]) for r in rows if r["round"] == rnd and r["framework"] == fw and r["mode"] == mode]
        t = min(get("pytorch-nchw") + get("pytorch-channels_last"))
        per_round.append(get("ember")[0] / t)
    print(f"{mode}: Ember / PyTorch(best layout) = {e / torch_best:.3f}  (per round {min(per_round):.3f} .. {max(per_round):.3f})")
PY

if [[ "$EPOCHS" -gt 0 && -d data/mnist ]]; then
  echo "--- $EPOCHS epoch(s) on MNIST, time and peak RSS ---"
  /usr/bin/time -f "ember: peak RSS %M KB, %e s" "$EMBER_BIN"/train_mnist --device "$([[ $DEVICE == cuda ]] && echo gpu || echo cpu)" --epochs "$EPOCHS" \
    --threads "$THREADS" --seed 1 --quiet
  /usr/bin/time -f "pytorch-channels_last: peak RSS %M KB, %e s" "$PYTHON" bench/pytorch_reference.py --mode epochs \
    --epochs "$EPOCHS" --memory-format channels_last --device "$DEVICE" --threads "$THREADS"
fi
