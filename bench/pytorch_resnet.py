#!/usr/bin/env python3
"""The small residual CNN of `train_mnist --model resnet` (apps/model_zoo.h), in PyTorch: the
reference for its recipe (does it reach 93.0% on Fashion-MNIST in 15 epochs, and what does an
epoch cost on this machine?) and its side-by-side peer in bench/compare_resnet.sh.

  stem  Conv32 3x3 same, no bias - BN - ReLU - MaxPool 2          28x28 -> 14x14x32
  res1  [Conv32 3x3 - BN - ReLU - Conv32 3x3 - BN] + x - ReLU      14x14x32
  res2  [Conv64 3x3 s2 - BN - ReLU - Conv64 3x3 - BN] + [Conv64 1x1 s2 - BN](x) - ReLU   7x7x64
  res3  [Conv64 3x3 - BN - ReLU - Conv64 3x3 - BN] + x - ReLU      7x7x64
  head  GlobalAvgPool - Dropout 0.5 - Dense 10

Every convolution without bias (BatchNormalization's beta takes its place), BatchNormalization as
Keras' (momentum 0.99 = PyTorch's 0.01, epsilon 1e-3), Glorot-uniform kernels, Adam 1e-3 (eps 1e-7)
with a cosine schedule to 0 over the epochs (per epoch, as train_mnist's --lr-schedule cosine),
batch 64, inputs u8 / 255, no augmentation. 2 threads, OpenBLAS with one thread (see
pytorch_reference.py). Prints one line per epoch and the test accuracy.

  /usr/bin/python3 bench/pytorch_resnet.py --data-dir data/fashion-mnist --epochs 15 --seed 1

First runs without the Dropout (2026-11-25, the 2-core AMD EPYC VM, PyTorch 1.13): 151,274
parameters, 25-32 s per epoch; after 15 epochs 93.24% (seed 1), 93.16% (seed 2), 92.99% (seed 3);
training loss 0.014-0.018 at the end: it overfits. Ember's model without it: 92.92% (seed 1); with
Dropout 0.3 93.04%, with 0.5 93.11%, which both now have (docs/benchmarks.md).
"""
import argparse
import contextlib
import math
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from pytorch_reference import keep_heap, read_idx  # noqa: E402


def bn(c):
    return nn.BatchNorm2d(c, eps=1e-3, momentum=0.01)


def conv(cin, cout, k, stride=1):
    return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(conv(cin, cout, 3, stride), bn(cout), nn.ReLU(), conv(cout, cout, 3), bn(cout))
        self.short = nn.Sequential(conv(cin, cout, 1, stride), bn(cout)) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.short(x))


def resnet():
    m = nn.Sequential(conv(1, 32, 3), bn(32), nn.ReLU(), nn.MaxPool2d(2),
                      Block(32, 32, 1), Block(32, 64, 2), Block(64, 64, 1),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.5), nn.Linear(64, 10))
    for mod in m.modules():
        if isinstance(mod, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(mod.weight)
            if mod.bias is not None:
                nn.init.zeros_(mod.bias)
    return m


def peak_rss_kib():
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmHWM:")).split()[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="data/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--evaluate-only", action="store_true",
                    help="no training: evaluate the initial model on the test set under no_grad (batch 256) "
                         "and print the time and the peak RSS before and after (bench/inference_memory.sh)")
    ap.add_argument("--precision", choices=["fp32", "autocast_bf16"], default="fp32",
                    help="autocast_bf16: the training forward and loss under torch.autocast(\"cpu\", "
                         "dtype=torch.bfloat16) (train_gpt/train_mnist --precision mixed_bf16's counterpart)")
    ap.add_argument("--malloc", choices=["keep", "trim"], default="keep",
                    help="keep glibc's heap between steps (default) or trim it as glibc does (pytorch_reference.py)")
    a = ap.parse_args()
    autocast = ((lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.precision == "autocast_bf16"
                else contextlib.nullcontext)
    if a.malloc == "keep":
        keep_heap()
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(a.seed)
    d = a.data_dir
    tx, ty = read_idx(f"{d}/train-images-idx3-ubyte"), read_idx(f"{d}/train-labels-idx1-ubyte").long()
    vx, vy = read_idx(f"{d}/t10k-images-idx3-ubyte"), read_idx(f"{d}/t10k-labels-idx1-ubyte").long()
    to_x = lambda u8: (u8.unsqueeze(1).float() / 255.0).contiguous(memory_format=torch.channels_last)  # noqa: E731
    model = resnet().to(memory_format=torch.channels_last)
    print(f"parameters: {sum(p.numel() for p in model.parameters())}")
    if a.evaluate_only:
        model.eval()
        before = peak_rss_kib()
        t0, correct = time.perf_counter(), 0
        with torch.no_grad():
            for i in range(0, vx.shape[0], 256):
                correct += int((model(to_x(vx[i:i + 256])).argmax(1) == vy[i:i + 256]).sum())
        print(f"evaluation: {time.perf_counter() - t0:.2f} s, test accuracy {correct / vx.shape[0] * 100:.2f}%, "
              f"peak RSS {before} KiB before, {peak_rss_kib()} KiB after", flush=True)
        return
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    n = tx.shape[0]
    for epoch in range(a.epochs):
        for g in opt.param_groups:  # cosine to 0 over the epochs, per epoch
            g["lr"] = a.lr * 0.5 * (1 + math.cos(math.pi * epoch / a.epochs))
        model.train()
        perm = torch.randperm(n)
        t0, total = time.perf_counter(), 0.0
        for i in range(0, n, 64):
            idx = perm[i:i + 64]
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = loss_fn(model(to_x(tx[idx])), ty[idx])
            loss.backward()
            opt.step()
            total += float(loss) * len(idx)
        secs = time.perf_counter() - t0
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, vx.shape[0], 256):
                correct += int((model(to_x(vx[i:i + 256])).argmax(1) == vy[i:i + 256]).sum())
        print(f"epoch {epoch + 1}/{a.epochs}: {secs:.1f} s, loss {total / n:.4f}, "
              f"test accuracy {correct / vx.shape[0] * 100:.2f}%", flush=True)


if __name__ == "__main__":
    main()
