#!/usr/bin/env python3
"""examples/autoencoder's recipe in PyTorch, its side-by-side peer (bench/compare_autoencoder.sh):
an MNIST autoencoder, Dense 784-256-64-256-784 with ReLU and a sigmoid on the output, mean squared
error, Adam 1e-3 (eps 1e-7, Keras'), batch 256, 10 epochs, Glorot-uniform weights and zero biases
(Keras' and Ember's initialisers), inputs u8 / 255 and the same values as targets, a shuffle per
epoch. 2 threads, OpenBLAS with one thread (see pytorch_reference.py). Prints one line per epoch
and `test_mse X` last, as the example does.

  /usr/bin/python3 bench/pytorch_autoencoder.py --data-dir data/mnist --seed 1
"""
import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from pytorch_reference import keep_heap, read_idx  # noqa: E402


def autoencoder(glorot):
    m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 64), nn.ReLU(),
                      nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 784), nn.Sigmoid())
    for mod in m.modules():
        if glorot and isinstance(mod, nn.Linear):
            nn.init.xavier_uniform_(mod.weight)
            nn.init.zeros_(mod.bias)
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="data/mnist")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--init", choices=["glorot", "torch"], default="glorot",
                    help="glorot: Keras' and Ember's (the same recipe); torch: nn.Linear's own (kaiming-uniform)")
    ap.add_argument("--malloc", choices=["keep", "trim"], default="keep",
                    help="keep glibc's heap between steps (default) or trim it as glibc does (pytorch_reference.py)")
    a = ap.parse_args()
    if a.malloc == "keep":
        keep_heap()
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(a.seed)
    d = a.data_dir
    tx = read_idx(f"{d}/train-images-idx3-ubyte").reshape(-1, 784).float() / 255.0
    vx = read_idx(f"{d}/t10k-images-idx3-ubyte").reshape(-1, 784).float() / 255.0
    model = autoencoder(a.init == "glorot")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.MSELoss()
    n = tx.shape[0]
    for epoch in range(a.epochs):
        perm = torch.randperm(n)
        t0, total = time.perf_counter(), 0.0
        for i in range(0, n, 256):
            x = tx[perm[i:i + 256]]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), x)
            loss.backward()
            opt.step()
            total += float(loss) * x.shape[0]
        print(f"epoch {epoch + 1}/{a.epochs}: {time.perf_counter() - t0:.1f} s, loss {total / n:.5f}", flush=True)
    with torch.no_grad():
        mse = sum(float(loss_fn(model(vx[i:i + 1000]), vx[i:i + 1000])) * 1000 for i in range(0, 10000, 1000)) / 10000
    print(f"test_mse {mse:.5f}")


if __name__ == "__main__":
    main()
