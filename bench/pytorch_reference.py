#!/usr/bin/env python3
"""PyTorch twin of Ember's reference CNN, for side-by-side comparisons (bench/compare_pytorch.sh).

Same model (Conv32-Pool-Conv64-Pool-Conv64-Flatten-Dense64-Dense10, ReLUs), same initialisation
(Glorot-uniform weights, zero biases: Keras' defaults, as Ember), same optimizer (Adam, lr 1e-3,
eps 1e-7; PyTorch adds eps after the bias correction, TensorFlow/Ember before: a negligible
difference), same data handling (uint8 images normalised per batch).

Modes, each printing CSV rows like Ember's bench_train
(framework,device,batch,mode,median_ms,min_ms,images_per_s,gflops):
  --mode step    training steps on one batch already in memory (data excluded)
  --mode data    the same plus gathering + normalising a shuffled batch from uint8 (data included)
  --mode epochs  full epochs on MNIST (--data-dir): seconds per epoch and test accuracy

Settings, chosen for PyTorch's fastest step on the 2-core AMD EPYC VM (Debian's python3-torch 1.13,
batch 64, 2 threads; measured 2026-11-25 while builds shared the machine, hence ratios of variants run
alternately, leaving out the spells when both OpenMP threads shared one core, see the last point):
  - OpenBLAS (Debian libopenblas0-pthread, which compare_pytorch.sh installs) for the Linear layers:
    Debian's torch takes sgemm from libblas.so.3, the unoptimised reference BLAS unless OpenBLAS
    provides it. Dense(576->64)'s three GEMMs: 3.40 ms -> 0.157 ms; the step 1.06-1.51x (median
    1.27x over 7 alternating pairs of processes) slower on the reference BLAS. main() warns on stderr then.
  - OPENBLAS_NUM_THREADS=1 (set below, before torch loads OpenBLAS): otherwise OpenBLAS runs those GEMMs
    on 2 threads of its own, whose worker then spins beside PyTorch's 2 OpenMP threads (7.5 ms of CPU
    per step): the step 1.61-1.69x slower in 3 pairs of processes, 1.13-1.56x (median 1.33x) in 5
    alternating rounds in one process; the GEMMs alone are faster on 1 thread too (0.157 vs 0.183 ms).
  - channels_last by default: NCHW's step is 1.41x slower (8 alternating rounds in one process,
    10th percentiles 18.2 vs 12.6 ms; 1.48x at 1 thread), so compare_pytorch.sh runs both.
  - torch.set_num_threads(--threads), torch.set_flush_denormal(True) (see main), Adam's default
    single-tensor update, zero_grad(set_to_none=True), CrossEntropyLoss, nothing synchronising in
    the timed steps. Without gain (same method): Adam(foreach=True) 1.02x, zero_grad to zeros 0.99x,
    no flush of denormals 1.00x over these short runs, oneDNN off (NCHW) 2.0x slower; fused Adam is
    CUDA-only in 1.13.
  - glibc's heap kept (--malloc keep, the default; measured 2026-11-26 on a 2-core Intel Xeon with
    AVX-512): PyTorch 1.13 has no caching allocator on the CPU, so every step allocates
    and frees its activations and gradients (~20-35 MB) through glibc malloc, which hands the heap
    top back to the kernel whenever a free leaves more than its trim threshold there and maps the
    largest buffers with mmap; the next step then faults all of it in again: about 4,100 minor
    page faults per channels_last step (5,400 NCHW). mallopt (keep_heap below: 64 MiB of top
    padding, no trimming below 1 GiB, buffers up to 32 MiB on the heap) leaves none in the steady
    state (6 in 300 steps), and the step takes 0.75x the time (median of 6 alternating rounds of
    processes: 11.2 vs 16.3 ms, per round 0.47-0.77; NCHW 0.73x, 15.1 vs 20.3 ms). Ember allocates
    nothing in its steady state, so only the peer paid this. --malloc trim keeps glibc's defaults
    (the peer before 2026-11-26).
  - libgomp's defaults are left alone, as PyTorch's users run it (Ember's apps bound the spin to
    GOMP_SPINCOUNT=10000, apps/openmp_spin.h): under load both OpenMP threads can land on one
    core and spin out each other's time slices (steps of ~400 ms, Ember's too, for seconds at a
    time); OMP_WAIT_POLICY=passive avoids that (25-32 ms there) but costs 1.15-1.2x when quiet.
"""
import argparse
import contextlib
import gzip
import os
import statistics
import struct
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # read when torch loads OpenBLAS: see the docstring

import torch  # noqa: E402 (after OPENBLAS_NUM_THREADS)
import torch.nn as nn  # noqa: E402


def reference_cnn():
    m = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3), nn.ReLU(), nn.Flatten(),
        nn.Linear(576, 64), nn.ReLU(), nn.Linear(64, 10))
    for layer in m:
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(layer.weight)  # Glorot: fan_in = C*R*S, fan_out = K*R*S, as Keras
            nn.init.zeros_(layer.bias)
    return m


def read_idx(path):
    """Raw or gzipped IDX (unsigned byte) -> uint8 tensor."""
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            with (gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")) as f:
                data = f.read()
            zero, dtype, rank = struct.unpack(">HBB", data[:4])
            assert zero == 0 and dtype == 0x08, f"{p}: not an unsigned-byte IDX file"
            dims = struct.unpack(">" + "I" * rank, data[4:4 + 4 * rank])
            return torch.frombuffer(bytearray(data[4 + 4 * rank:]), dtype=torch.uint8).reshape(dims)
    sys.exit(f"pytorch_reference: missing {path}[.gz]; run scripts/fetch_data.sh")


def load_mnist(d):
    return (read_idx(f"{d}/train-images-idx3-ubyte"), read_idx(f"{d}/train-labels-idx1-ubyte").long(),
            read_idx(f"{d}/t10k-images-idx3-ubyte"), read_idx(f"{d}/t10k-labels-idx1-ubyte").long())


def to_batch(images_u8, fmt, device):
    x = images_u8.to(device).unsqueeze(1).float().div_(255.0)
    return x.contiguous(memory_format=torch.channels_last) if fmt == "channels_last" else x


def keep_heap():
    """glibc: keep freed memory in the process instead of returning it to the kernel after every step
    (see the docstring). mallopt's parameters from malloc.h; setting any of them also stops glibc's
    dynamic thresholds, so the mmap threshold is set too (32 MiB: its maximum on 64-bit)."""
    import ctypes
    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    ok = (libc.mallopt(m_mmap_threshold, 32 << 20) == 1 and libc.mallopt(m_trim_threshold, 1 << 30) == 1
          and libc.mallopt(m_top_pad, 64 << 20) == 1)
    if not ok:
        print("pytorch_reference: mallopt failed: glibc's default heap trimming stays", file=sys.stderr)


def warn_if_reference_blas():
    """Debian's torch takes its BLAS (Linear layers) from libblas.so.3: say so if it is the reference one."""
    try:
        with open("/proc/self/maps") as f:
            reference = any("/blas/libblas.so" in line for line in f)  # OpenBLAS's: openblas-pthread/libblas.so
    except OSError:
        return
    if reference:
        print("pytorch_reference: PyTorch uses the reference BLAS (slow Linear layers); "
              "apt-get install libopenblas0-pthread", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["step", "data", "epochs"], default="step")
    ap.add_argument("--memory-format", choices=["nchw", "channels_last"], default="channels_last")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tf32", action="store_true",
                    help="CUDA: allow TF32 in cuBLAS and cuDNN (off here, so FP32 compares with Ember's FP32; "
                         "PyTorch's own default allows it for convolutions)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-sizes", default="64")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-dir", default="data/mnist")
    ap.add_argument("--no-header", action="store_true")
    ap.add_argument("--malloc", choices=["keep", "trim"], default="keep",
                    help="CPU: keep glibc's heap between steps (default; see the docstring) or trim it as glibc does")
    ap.add_argument("--precision", choices=["fp32", "autocast_bf16"], default="fp32",
                    help="autocast_bf16: forward and loss under torch.autocast(dtype=torch.bfloat16), PyTorch's "
                         "mixed precision (its convolutions and matmuls in bf16 on oneDNN; the counterpart of "
                         "Ember's --precision mixed_bf16)")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="GPU: capture the training step (forward, backward, Adam) in a CUDA graph "
                         "(torch.cuda.graphs) and replay it; each batch is copied into the graph's input first")
    a = ap.parse_args()
    if a.malloc == "keep":
        keep_heap()
    torch.set_num_threads(a.threads)  # Debian's build defaults to 1 thread here
    warn_if_reference_blas()
    # Flush denormals to zero, as Ember does: without it, repeated steps on one batch drive
    # PyTorch into denormal arithmetic and its step time up by ~50% (measured here).
    torch.set_flush_denormal(True)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
    if a.cuda_graph and (dev.type != "cuda" or a.mode == "epochs"):
        ap.error("--cuda-graph needs --device cuda and --mode step or data")
    if a.precision != "fp32" and a.cuda_graph:
        ap.error("--precision autocast_bf16 is not combined with --cuda-graph here")
    tag = (f"pytorch-{a.memory_format}" + ("-tf32" if a.tf32 else "") + ("-graph" if a.cuda_graph else "")
           + ("-autocast-bf16" if a.precision == "autocast_bf16" else ""))
    autocast = ((lambda: torch.autocast(dev.type, dtype=torch.bfloat16)) if a.precision == "autocast_bf16"
                else contextlib.nullcontext)
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32

    if a.mode == "epochs":
        xtr, ytr, xte, yte = load_mnist(a.data_dir)
        model = reference_cnn().to(dev)
        if a.memory_format == "channels_last":
            model = model.to(memory_format=torch.channels_last)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
        lossf = nn.CrossEntropyLoss()
        bs = int(a.batch_sizes.split(",")[0])
        if dev.type == "cuda":
            xtr, ytr, xte, yte = xtr.to(dev), ytr.to(dev), xte.to(dev), yte.to(dev)  # preloaded on the GPU
        for epoch in range(a.epochs):
            t0 = time.perf_counter()
            model.train()
            perm = torch.randperm(xtr.shape[0], device=xtr.device)
            for i in range(0, xtr.shape[0], bs):
                idx = perm[i:i + bs]
                x, y = to_batch(xtr[idx], a.memory_format, dev), ytr[idx].to(dev)
                opt.zero_grad(set_to_none=True)
                with autocast():
                    loss = lossf(model(x), y)
                loss.backward()
                opt.step()
            sync()
            train_s = time.perf_counter() - t0
            model.eval()
            correct = 0
            with torch.no_grad():
                for i in range(0, xte.shape[0], 1000):  # fp32 inference
                    correct += (model(to_batch(xte[i:i + 1000], a.memory_format, dev)).argmax(1) == yte[i:i + 1000].to(dev)).sum().item()
            print(f"epoch {epoch + 1}: train {train_s:.2f} s, total {time.perf_counter() - t0:.2f} s, "
                  f"test accuracy {correct / xte.shape[0]:.4f}", flush=True)
        return

    if not a.no_header:
        print("framework,device,batch,mode,median_ms,min_ms,images_per_s,gflops")
    gen = torch.Generator().manual_seed(a.seed)
    # Real MNIST when present (as Ember's bench_train), else random images and labels.
    pool_u8 = torch.randint(0, 256, (60000, 28, 28), dtype=torch.uint8, generator=gen)
    pool_y = torch.randint(0, 10, (60000,), generator=gen)
    if os.path.exists(f"{a.data_dir}/train-images-idx3-ubyte") or os.path.exists(f"{a.data_dir}/train-images-idx3-ubyte.gz"):
        pool_u8 = read_idx(f"{a.data_dir}/train-images-idx3-ubyte")
        pool_y = read_idx(f"{a.data_dir}/train-labels-idx1-ubyte").long()
    if dev.type == "cuda":
        pool_u8, pool_y = pool_u8.to(dev), pool_y.to(dev)
    for bs in [int(b) for b in a.batch_sizes.split(",")]:
        model = reference_cnn().to(dev)
        if a.memory_format == "channels_last":
            model = model.to(memory_format=torch.channels_last)
        # capturable: Adam keeps its step count on the GPU, as a captured graph needs.
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7, **({"capturable": True} if a.cuda_graph else {}))
        lossf = nn.CrossEntropyLoss()
        x_fixed, y_fixed = to_batch(pool_u8[:bs], a.memory_format, dev), pool_y[:bs]

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = lossf(model(x), y)
            loss.backward()
            opt.step()

        if a.cuda_graph:  # PyTorch's whole-network capture recipe: warm up on a side stream, then capture
            static_x, static_y = x_fixed.clone(), y_fixed.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    step(static_x, static_y)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            opt.zero_grad(set_to_none=True)
            with torch.cuda.graph(graph):
                lossf(model(static_x), static_y).backward()
                opt.step()

            def step(x, y):  # noqa: F811 (the captured step replaces the eager one)
                if x is not static_x:
                    static_x.copy_(x)
                    static_y.copy_(y)
                graph.replay()

        times = []
        for i in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            if a.mode == "data":
                idx = torch.randint(0, pool_u8.shape[0], (bs,), device=pool_u8.device)
                step(to_batch(pool_u8[idx], a.memory_format, dev), pool_y[idx])
            else:
                step(x_fixed, y_fixed)
            sync()
            if i >= a.warmup:
                times.append((time.perf_counter() - t0) * 1e3)
        med = statistics.median(times)
        print(f"{tag},{dev.type},{bs},{a.mode},{med:.4f},{min(times):.4f},{bs / med * 1e3:.1f},", flush=True)


if __name__ == "__main__":
    main()
