#!/usr/bin/env bash
# The GPU check: everything a session with a lent GPU must run, in two halves.
#
#   scripts/gpu_check.sh prepare     here (Debian, no GPU): builds build/gpu (Release, CUDA on,
#                                    MPI off) and gathers a bundle in gpu-bundle/ (binaries,
#                                    libember, libember_cuda and the non-CUDA libraries they
#                                    need: oneDNN, spdlog, fmt, OpenCL loader, libgomp), also
#                                    packed as gpu-bundle.tar.xz (~21 MB instead of ~63: the
#                                    device tool carries 64 MiB at most, tree included)
#   scripts/gpu_check.sh run [PART...]  on the GPU machine (device tool, carry gpu-bundle.tar.xz,
#                                    or the gpu-bundle folder): unpacks the archive, points
#                                    LD_LIBRARY_PATH at the bundle and at the CUDA libraries of
#                                    the PyTorch there, then runs every check and writes a log
#                                    to $OUT (or gpu-bundle/) for docs/gpu-verification.md
#
# Parts: info gputests sanitize placement train bench (and tests: every unit test binary whole,
# CPU tests included, for a machine without a time limit). Each part appends to the log under
# $OUT as it goes (every command line-buffered, so a call stopped at its limit still returns what
# ran) and prints its own seconds. The device tool stops a command after 10 minutes and lends 30
# minutes of device time per session, machine start included, so a session runs the check in
# four calls (estimates for one H100, not yet measured; docs/gpu-verification.md keeps the
# measured ones):
#   call 1: run info gputests    ~4 min   the GPU unit tests (test_cuda_*, the GPU tests of
#                                         test_distribute, test_device and test_train_mnist)
#   call 2: run sanitize         ~7 min   compute-sanitizer memcheck (parity, the C2 tests, losses,
#                                         training) and racecheck (parity, fused loss, folded advances)
#   call 3: run placement train  ~7 min   soft placement, OOM, train_mnist on MNIST
#   call 4: run bench            ~5 min   bench_train next to PyTorch, bench_conv, bench_matmul
# With the machine's start (~3 min) about 26 minutes. Each call carries gpu-bundle.tar.xz (the
# binaries, libember*, oneDNN/spdlog/fmt/OpenCL/libgomp, MNIST gzipped) and needs on the device
# machine: the NVIDIA driver, python3 with PyTorch's CUDA 13 wheels (their nvidia/ libraries:
# cudart, cuBLAS, cuDNN, NCCL), and for call 2 compute-sanitizer (the toolkit's bin folder).
# Checks today (each later issue adds its own):
#   nvidia-smi; ember_info and --doctor (devices, versions compiled vs loaded); every unit test
#   (CUDA check macros; test_cuda_tensor: copies, the allocator's reuse and cap;
#   test_cuda_parity: every GPU op against the CPU, the device gather, metric sums, SGD;
#   test_cuda_fused_loss / test_cuda_folded_advances: issue 34's C2 kernels (set_fused_loss,
#   set_fused_advance) against the kernels they replace, bit for bit; test_cuda_fused_dense: Dense
#   through cuBLASLt epilogues (set_fused_dense) against the CPU and the unfused path;
#   test_cuda_losses: the losses, metrics and the gather of f32 data against the CPU;
#   test_cuda_training: training steps and fit() on the GPU vs the CPU, no allocation in the
#   steady state; test_distribute: NCCL all-reduce/broadcast over every local GPU, communicators
#   from a unique id, Mirrored on 1 GPU == Default bit for bit, on 2 GPUs == 1 GPU;
#   test_train_mnist: the same through the app); compute-sanitizer memcheck and racecheck (call 2); soft placement (a missing gpu:99) and an out-of-memory error
#   on purpose (a 4 MiB cap); train_mnist --device gpu --epochs 5 on MNIST (>= 99.0%) in TF32
#   (the default) and FP32 (--no-tf32), --strategy mirrored with two replicas on one GPU and on
#   every GPU. Issue 15's unit tests: fit's host waits do not grow with its steps
#   (CudaTraining.FitWaitsForTheGpuOnlyWhereItReadsItsTotals), the probe makes no context,
#   rows beyond 2^20, deterministic cuDNN choice, three replicas on one GPU vs one, the NCCL
#   clique abort (2 GPUs); CUDA graphs (CudaGraphs.*: graph == eager bit for bit, replay, a failed
#   capture) and train_mnist --cuda-graphs (5 epochs, >= 99.0%, the epoch time against the goal
#   of 0.1 s), and the speed switches together for one epoch (--cuda-graphs --cudnn-find --fused-conv
#   --fused-dense --fused-loss --fused-advance --nhwc). bench_train (its 'graph' row on the GPU) alternating with PyTorch on the
#   same GPU, FP32 against FP32 and TF32 against TF32; bench_conv on CPU and GPU;
#   bench_matmul's cuBLAS columns.
#   Not here: MultiWorker over MPI (the bundle carries no MPI; its NCCL part is covered by the
#   unique-id test with threads in place of processes).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
BUNDLE=gpu-bundle

prepare() {
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON -DEMBER_MPI=OFF >/dev/null
  cmake --build build/gpu
  rm -rf "$BUNDLE" && mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
  cp build/gpu/apps/{train_mnist,ember_info,bench_matmul,bench_train,bench_conv} "$BUNDLE/bin/"
  # Every test binary but the real-MNIST one (train_mnist covers MNIST there); the bundle and
  # the working tree must stay under the device tool's 64 MiB (it is ~60 MiB with MNIST).
  for t in build/gpu/tests/test_*; do
    [[ -x $t && -f $t && $(basename "$t") != test_mnist_real ]] && cp "$t" "$BUNDLE/bin/"
  done
  cp -P build/gpu/libember.so* build/gpu/libember_cuda.so* "$BUNDLE/lib/"
  # Non-CUDA shared libraries the binaries need that a bare machine lacks (CUDA ones come from
  # the PyTorch installation there).
  for lib in libdnnl.so.2 libspdlog.so.1.10 libfmt.so.9 libOpenCL.so.1 libgomp.so.1; do
    cp -L "/usr/lib/x86_64-linux-gnu/$lib" "$BUNDLE/lib/"
  done
  strip --strip-unneeded "$BUNDLE"/bin/* "$BUNDLE"/lib/libember*.so.*.* 2>/dev/null || true
  if [[ -d data/mnist ]]; then  # gzipped: 11 MB instead of 55
    mkdir -p "$BUNDLE/mnist"
    for f in data/mnist/*-ubyte; do gzip -c "$f" > "$BUNDLE/mnist/$(basename "$f").gz"; done
  fi
  # The device machine's copy of the tree has no .git: the commit travels in the bundle.
  echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!gpu-bundle*' || echo '+uncommitted')" > "$BUNDLE/COMMIT"
  du -sh "$BUNDLE"
  tar -cf - "$BUNDLE" | xz -T0 -6 > "$BUNDLE.tar.xz"
  du -sh "$BUNDLE.tar.xz"
  echo "carry: $BUNDLE.tar.xz (device tool), then: scripts/gpu_check.sh run"
}

# The checks, in parts, so that a device session can spread them over several calls (the
# device tool stops a command after 10 minutes): `run` runs all, `run tests sanitize` some.
# Each part sets status=1 when something fails.
part_info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || status=1
  echo "== ember_info";          "$B"/ember_info || status=1
  echo "== ember_info --doctor"; "$B"/ember_info --doctor || status=1
}

# A command with its output line-buffered (the log is a file: a call stopped at its limit keeps
# every line written so far), timed.
lb() {
  local t0=$SECONDS rc=0
  if command -v stdbuf >/dev/null; then stdbuf -oL -eL "$@" || rc=$?; else "$@" || rc=$?; fi
  echo "   ($((SECONDS - t0)) s, exit $rc)"
  return "$rc"
}

# Data the tests read from the source tree, found where this copy of it is.
test_data() { export EMBER_PARITY_DIR="$PWD/tests/data" EMBER_MNIST_DIR="$BUNDLE/mnist"; }

part_tests() {  # every test binary whole (CPU tests too: slow, for a machine without a limit)
  local t
  test_data
  for t in "$B"/test_*; do
    echo "== $(basename "$t")"; lb "$t" --gtest_brief=1 || status=1
  done
}

part_gputests() {  # the tests that need a GPU (the CPU ones run in CI)
  local t
  test_data
  for t in test_cuda_checks test_cuda_tensor test_cuda_parity test_cuda_fused_loss test_cuda_fused_dense \
           test_cuda_folded_advances test_cuda_losses test_cuda_training; do
    echo "== $t"; lb "$B/$t" --gtest_brief=1 || status=1
  done
  echo "== test_device (placement)"; lb "$B"/test_device --gtest_brief=1 || status=1
  echo "== test_distribute (NCCL, GPU replicas)"
  lb "$B"/test_distribute --gtest_brief=1 --gtest_filter='Nccl.*:MirroredGpu.*' || status=1
  echo "== test_train_mnist (the app on the GPU)"
  lb "$B"/test_train_mnist --gtest_brief=1 --gtest_filter='*Gpu*:*Cuda*' || status=1
}

# compute-sanitizer: on PATH, else in the toolkit's bin folder; said when there is none.
find_sanitizer() {
  local c
  for c in "$(command -v compute-sanitizer || true)" /usr/local/cuda/bin/compute-sanitizer \
           /usr/local/cuda-*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer; do
    [[ -n $c && -x $c ]] && { echo "$c"; return; }
  done
}

part_sanitize() {
  local san_bin
  san_bin=$(find_sanitizer)
  if [[ -z $san_bin ]]; then
    echo "== compute-sanitizer not found (PATH, /usr/local/cuda*/bin): memcheck and racecheck NOT RUN"; return
  fi
  echo "== $san_bin"
  # Tests that make CUDA API calls fail on purpose (a capture that waits for the host, a refused
  # write inside a capture) would count as errors: left out here, they run in gputests.
  local skip='-CudaGraphs.CapturingWorkThatWaitsForTheHostFailsAndLeavesTheGpuUsable:CudaGraphs.ALearningRateWriteInsideACaptureIsRefused'
  local tool t san rc
  for tool in memcheck racecheck; do
    for t in test_cuda_parity test_cuda_fused_loss test_cuda_fused_dense test_cuda_folded_advances test_cuda_losses \
             test_cuda_training; do
      # racecheck is slow: the own kernels' tests only (not cuBLASLt's, not training)
      [[ $tool == racecheck && ( $t == test_cuda_fused_dense || $t == test_cuda_losses || $t == test_cuda_training ) ]] \
        && continue
      echo "== compute-sanitizer --tool $tool $t"
      rc=0
      san=$(lb "$san_bin" --tool "$tool" --error-exitcode 9 "$B/$t" --gtest_brief=1 --gtest_filter="$skip" 2>&1) || rc=$?
      echo "$san" | tail -n 15
      if grep -q "Device not supported" <<<"$san"; then
        echo "   compute-sanitizer cannot attach on this machine (gVisor hosts refuse it): not run"
      elif [[ $rc != 0 ]]; then
        status=1
      fi
    done
  done
}

part_placement() {
  echo "== soft placement: gpu:99 falls back to the cpu with one warning"
  local soft oom rc=0
  soft=$("$B"/train_mnist --device gpu:99 --steps 2 --epochs 1 --quiet --data-dir "$BUNDLE/mnist" 2>&1) || status=1
  echo "$soft"; grep -q "running on cpu" <<<"$soft" || { echo "FAIL: no fallback warning"; status=1; }
  echo "== out of memory on purpose: a 4 MiB cap"
  oom=$("$B"/train_mnist --device gpu --strict-placement --gpu-memory-limit 4MiB --steps 2 --epochs 1 \
        --data-dir "$BUNDLE/mnist" 2>&1) || rc=$?
  echo "$oom" | tail -n 2; echo "exit code $rc"
  [[ $rc == 1 ]] && grep -qi "out of memory" <<<"$oom" || { echo "FAIL: expected exit 1 and an out-of-memory error"; status=1; }
}

part_train() {
  if [[ ! -d $BUNDLE/mnist ]]; then
    echo "== train_mnist skipped: no $BUNDLE/mnist (prepare copies data/mnist gzipped when present)"; return
  fi
  local math
  for math in tf32 fp32; do  # TF32 is the default (as TensorFlow); FP32 with --no-tf32
    echo "== train_mnist --device gpu --epochs 5, $math math (>= 99.0% expected)"
    lb "$B"/train_mnist --device gpu --strict-placement --epochs 5 --seed 1 --data-dir "$BUNDLE/mnist" \
      --gpu-memory-fraction 0.5 --log-device-placement --history "$out/history_gpu_$math.json" \
      $([[ $math == fp32 ]] && echo --no-tf32) || status=1
    python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["test"]["accuracy"]; print("test accuracy", a); sys.exit(a < 0.99)' \
      "$out/history_gpu_$math.json" || { echo "FAIL: below 99.0%"; status=1; }
  done
  # Issue 15's goal: one epoch at batch 64 in <= 0.1 s with CUDA graphs (the training part of
  # the epoch: 60000 / images_per_second; 'seconds' adds the evaluation).
  echo "== train_mnist --cuda-graphs --epochs 5, TF32 (>= 99.0%; epoch goal <= 0.1 s)"
  lb "$B"/train_mnist --device gpu --strict-placement --epochs 5 --seed 1 --cuda-graphs --data-dir "$BUNDLE/mnist" \
    --history "$out/history_gpu_graphs.json" || status=1
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))
for e in j["history"]: print("epoch", e["epoch"], "train s %.4f" % (60000 / e["images_per_second"]), "with eval s %.4f" % e["seconds"])
a=j["test"]["accuracy"]; print("test accuracy", a); sys.exit(a < 0.99)' "$out/history_gpu_graphs.json" \
    || { echo "FAIL: below 99.0%"; status=1; }
  # Issue 17's layers end to end on the GPU (BatchNormalization, Dropout in the step, with and
  # without graphs; MNIST: Fashion-MNIST is not in the bundle).
  echo "== train_mnist --model bn-cnn, 3 epochs (>= 98.5%), eager then --cuda-graphs --nhwc"
  local g
  for g in "" "--cuda-graphs --nhwc"; do
    lb "$B"/train_mnist --device gpu --strict-placement --model bn-cnn --epochs 3 --seed 1 --lr-schedule cosine $g \
      --data-dir "$BUNDLE/mnist" --history "$out/history_gpu_bn.json" || status=1
    python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["test"]["accuracy"]; print("test accuracy", a); sys.exit(a < 0.985)' \
      "$out/history_gpu_bn.json" || { echo "FAIL: below 98.5%"; status=1; }
  done
  # Issue 32's graph model end to end on the GPU (merge layers, gradient sums, use_bias=false),
  # and its checkpoint recreated without --model.
  echo "== train_mnist --model resnet, 2 epochs on MNIST (>= 98.5%), then --evaluate-only --load"
  lb "$B"/train_mnist --device gpu --strict-placement --model resnet --epochs 2 --seed 1 --data-dir "$BUNDLE/mnist" \
    --history "$out/history_gpu_resnet.json" --save "$out/resnet.safetensors" || status=1
  python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["test"]["accuracy"]; print("test accuracy", a); sys.exit(a < 0.985)' \
    "$out/history_gpu_resnet.json" || { echo "FAIL: below 98.5%"; status=1; }
  lb "$B"/train_mnist --device gpu --strict-placement --evaluate-only --load "$out/resnet.safetensors" \
    --data-dir "$BUNDLE/mnist" || status=1
  echo "== the speed switches together: --cuda-graphs --cudnn-find --fused-conv --fused-dense --fused-loss --fused-advance --nhwc, 1 epoch"
  lb "$B"/train_mnist --device gpu --strict-placement --epochs 1 --seed 1 --cuda-graphs --cudnn-find --fused-conv \
    --fused-dense --fused-loss --fused-advance --nhwc \
    --data-dir "$BUNDLE/mnist" || status=1
  echo "== train_mnist --conv-algorithms exact, 1 epoch: FP32, deterministic direct/GEMM cuDNN algorithms (placement shows them)"
  lb "$B"/train_mnist --device gpu --strict-placement --conv-algorithms exact --epochs 1 --seed 1 --log-device-placement \
    --data-dir "$BUNDLE/mnist" || status=1
  echo "== train_mnist --strategy mirrored --gpus 0,0: two replicas on one GPU (host-summed), 1 epoch"
  lb "$B"/train_mnist --device gpu --strict-placement --strategy mirrored --gpus 0,0 --epochs 1 --seed 1 \
    --data-dir "$BUNDLE/mnist" || status=1
  echo "== PyTorch on the same GPU, 5 epochs (FP32, data on the GPU)"
  lb python3 bench/pytorch_reference.py --device cuda --mode epochs --epochs 5 --batch-sizes 64 \
    --data-dir "$BUNDLE/mnist" || true
  echo "== train_mnist --strategy mirrored on every GPU (NCCL), 1 epoch"
  lb "$B"/train_mnist --device gpu --strict-placement --strategy mirrored --epochs 1 --seed 1 \
    --data-dir "$BUNDLE/mnist" || status=1
}

part_bench() {
  echo "== bench_train on the GPU next to PyTorch on the same GPU (batch 64 and 1024), data on the GPU"
  local r fmt
  for r in 1 2 3; do
    lb "$B"/bench_train --device gpu --batch-sizes 64,1024 --steps 100 --data-dir "$BUNDLE/mnist" || status=1
    for fmt in nchw channels_last; do
      lb python3 bench/pytorch_reference.py --device cuda --memory-format $fmt --batch-sizes 64,1024 --steps 100 \
        --mode data --data-dir "$BUNDLE/mnist" --no-header || true
    done
    # PyTorch's step captured in a CUDA graph (torch.cuda.graphs): the launch-bound step's floor.
    lb python3 bench/pytorch_reference.py --device cuda --cuda-graph --memory-format channels_last \
      --batch-sizes 64,1024 --steps 100 --mode data --data-dir "$BUNDLE/mnist" --no-header || true
    lb "$B"/bench_train --device gpu --allow-tf32 --batch-sizes 64,1024 --steps 100 --data-dir "$BUNDLE/mnist" || status=1
    lb "$B"/bench_train --device gpu --allow-tf32 --nhwc --batch-sizes 64,1024 --steps 100 --data-dir "$BUNDLE/mnist" \
      || status=1
    lb python3 bench/pytorch_reference.py --device cuda --tf32 --memory-format channels_last --batch-sizes 64,1024 \
      --steps 100 --mode data --data-dir "$BUNDLE/mnist" --no-header || true
  done
  echo "== bench_conv (the tutorials' conv experiment, CPU vs GPU)"
  lb "$B"/bench_conv --devices cpu,gpu --threads 16 --csv "$out/conv_gpu.csv" || status=1
  echo "== bench_matmul (CPU vs cuBLAS)"
  lb "$B"/bench_matmul --sizes 50,100,500,1000,2000,5000,7000,10000 --naive-max 500 --threads 16 \
    --csv "$out/matmul_gpu.csv" || status=1
}

ALL_PARTS="info gputests sanitize placement train bench"
KNOWN_PARTS="$ALL_PARTS tests"

run_checks() {
  local parts=("$@") p
  [[ ${#parts[@]} -gt 0 ]] || read -r -a parts <<<"$ALL_PARTS"
  for p in "${parts[@]}"; do
    [[ " $KNOWN_PARTS " == *" $p "* ]] || { echo "gpu_check: unknown part '$p' (parts: $KNOWN_PARTS)" >&2; exit 2; }
  done
  if [[ ! -d $BUNDLE && -f $BUNDLE.tar.xz ]]; then  # tar may lack xz there; Python's tarfile has it
    tar -xJf "$BUNDLE.tar.xz" 2>/dev/null ||
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall()' "$BUNDLE.tar.xz"
  fi
  [[ -d $BUNDLE ]] || { echo "gpu_check: no $BUNDLE: run 'scripts/gpu_check.sh prepare' first" >&2; exit 1; }
  out=${OUT:-$BUNDLE}
  # The NVIDIA libraries beside PyTorch: every folder under the `nvidia` namespace package that
  # holds shared libraries (nvidia/<lib>/lib for CUDA 12 wheels, nvidia/cu13/lib and the like
  # for CUDA 13 ones).
  local libs="$PWD/$BUNDLE/lib" d
  while IFS= read -r d; do
    [[ -n $d ]] && libs="$libs:$d"
  done < <(python3 -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null |
           while IFS= read -r root; do find "$root" -name 'lib*.so*' -printf '%h\n'; done | sort -u)
  export LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}"
  B=$BUNDLE/bin
  status=0
  export EMBER_TRAIN_MNIST_BIN="$PWD/$B/train_mnist"  # for test_train_mnist, built with this machine's path
  local log="$out/gpu_check-$(IFS=-; echo "${parts[*]}").log"
  {
    echo "== gpu_check $(date -u +%FT%TZ) commit $(cat "$BUNDLE/COMMIT" 2>/dev/null || echo '?') (of the bundle)," \
         "parts: ${parts[*]}"
    for p in "${parts[@]}"; do
      local t0=$SECONDS
      echo "=== part $p"
      "part_$p"
      echo "=== part $p: $((SECONDS - t0)) s"
    done
    echo "== result: $([[ $status == 0 ]] && echo PASS || echo FAIL)"
  } > "$log" 2>&1  # a group, not a pipe: $status must survive it
  cat "$log"
  return "$status"
}

case "$mode" in
  prepare) prepare ;;
  run) shift; run_checks "$@" ;;
  *) echo "usage: $0 prepare | run [$KNOWN_PARTS]" >&2; exit 2 ;;
esac
