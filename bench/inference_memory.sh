#!/usr/bin/env bash
# Inference memory and time of the resnet demo (train_mnist --model resnet) against the same model
# in PyTorch (bench/pytorch_resnet.py --evaluate-only, under no_grad): Fashion-MNIST's 10,000 test
# images at batch 256 on the CPU, alternating for ROUNDS rounds in one invocation. Per run: the
# evaluation's seconds and the process's peak RSS (everything: the data sets, the libraries, the
# activations); Ember also prints how far its tensors grew during the evaluation
# (host_memory_stats), PyTorch its peak RSS before and after the evaluation. With EMBER_BASE_BIN
# (another build's apps folder, e.g. one from before a change) that build runs in the same rounds.
#
#   bench/inference_memory.sh
# Rows: framework, evaluation s, process s, peak RSS KiB, note.
# Env: ROUNDS (5), THREADS (2), PYTHON (/usr/bin/python3), EMBER_BIN (build/release/apps),
#      EMBER_BASE_BIN (unset), DATA (data/fashion-mnist)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5} THREADS=${THREADS:-2} PYTHON=${PYTHON:-/usr/bin/python3}
EMBER_BIN=${EMBER_BIN:-build/release/apps} DATA=${DATA:-data/fashion-mnist}
[[ -x $EMBER_BIN/train_mnist ]] || { echo "inference_memory: build first (cmake --build build/release)" >&2; exit 1; }
[[ -d $DATA ]] || { echo "inference_memory: no $DATA (scripts/fetch_data.sh fashion-mnist)" >&2; exit 1; }
source bench/pytorch_peer.sh
ensure_pytorch_peer inference_memory "$PYTHON" cpu
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
raw_idx_copy "$DATA" "$work"
# A checkpoint of the model to evaluate (one training step: the memory does not depend on the weights).
"$EMBER_BIN"/train_mnist --device cpu --model resnet --dataset fashion-mnist --data-dir "$DATA" --steps 1 \
  --threads "$THREADS" --quiet --save "$work/resnet.st" > /dev/null
builds=("ember:$EMBER_BIN")
[[ -n ${EMBER_BASE_BIN:-} ]] && builds+=("ember-base:$EMBER_BASE_BIN")
rows=()
for r in $(seq 1 "$ROUNDS"); do
  for b in "${builds[@]}"; do
    name=${b%%:*} bin=${b#*:}
    /usr/bin/time -f "%e %M" -o "$work/rss" "$bin"/train_mnist --device cpu --evaluate-only --load "$work/resnet.st" \
      --dataset fashion-mnist --data-dir "$DATA" --threads "$THREADS" > "$work/out"
    read -r wall rss < "$work/rss"
    secs=$(sed -n 's/^Evaluation: \([0-9.]*\) s.*/\1/p' "$work/out")  # a build from before it printed none
    grown=$(sed -n 's/.*host tensors at most \(.*\) above.*/tensors +\1/p' "$work/out")
    rows+=("$name,${secs:-nan},$wall,$rss,${grown:-n/a}")
  done
  # --malloc trim: glibc's default, which hands freed memory back: PyTorch's best case for memory
  # (the timing benchmarks keep the heap instead, its best case for time).
  /usr/bin/time -f "%e %M" -o "$work/rss" "$PYTHON" bench/pytorch_resnet.py --data-dir "$work" --evaluate-only \
    --threads "$THREADS" --malloc trim > "$work/out"
  read -r wall rss < "$work/rss"
  rows+=("pytorch,$(sed -n 's/^evaluation: \([0-9.]*\) s.*/\1/p' "$work/out"),$wall,$rss,$(
    sed -n 's/.*peak RSS \([0-9]*\) KiB before, \([0-9]*\) KiB after.*/peak RSS \1 KiB before evaluating/p' "$work/out")")
  echo "round $r/$ROUNDS done" >&2
done
printf '%s\n' "${rows[@]}"
printf '%s\n' "${rows[@]}" | "$PYTHON" -c '
import statistics, sys
rows = [l.strip().split(",") for l in sys.stdin if l.strip()]
for fw in dict.fromkeys(r[0] for r in rows):
    secs = [float(r[1]) for r in rows if r[0] == fw and r[1] != "nan"]
    wall = [float(r[2]) for r in rows if r[0] == fw]
    rss = [int(r[3]) for r in rows if r[0] == fw]
    t = "median %.2f s (%.2f-%.2f)" % (statistics.median(secs), min(secs), max(secs)) if secs else "not printed"
    print(f"{fw:11s} evaluation {t}; process {statistics.median(wall):.2f} s; "
          f"peak RSS median {statistics.median(rss) / 1024:.0f} MiB")
'
