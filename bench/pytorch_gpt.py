#!/usr/bin/env python3
"""apps/train_gpt.cpp's recipe in PyTorch, its side-by-side peer: the same small GPT (apps/gpt.h) on
the bytes of a text, trained and validated the same way.

Model (GPT-2 style, pre-LN, --dropout as nanoGPT's, 0 by default): token Embedding(V, C) plus a learned position table (T, C);
--blocks blocks of x += MHA(LayerNorm(x)), x += Linear(4C->C)(GELU-tanh(Linear(C->4C)(LayerNorm(x))));
a final LayerNorm and a Linear(C, V) head. MHA is causal self-attention over --heads heads of C/H
features: one fused qkv Linear(C, 3C) whose outputs are [queries | keys | values], heads side by side
in each (Ember's qkv_kernel, PyTorch's in_proj_weight layout), softmax(Q K^T / sqrt(D)) V, then
Linear(C, C). LayerNorm eps 1e-5.
Initialisers (Keras' defaults, as Ember): Glorot-uniform Linear weights (the qkv matrix with Ember's
fans: fan_in C, fan_out C, one projection's width, not 3C), zero biases, LayerNorm 1 and 0, both
embedding tables U(-0.05, 0.05).
Recipe: vocabulary = the text's distinct bytes, sorted; the first 90% of tokens train, the last 10%
validate. Each step draws --batch-size random windows (nanoGPT's get_batch: starts uniform in
[0, n - T - 1]); mean cross-entropy; AdamW (betas 0.9, 0.99, eps 1e-8, weight decay 0.1 on the Linear
weights and the embedding tables only) with a global grad-norm clip of 1.0; a linear warm-up over 100
steps to 1e-3, then a cosine down to 1e-4 at the last step. PyTorch adds eps after Adam's bias
correction, TensorFlow/Ember before: a negligible difference. Validation: the mean cross-entropy over
every position of the validation tokens' non-overlapping windows, in batches of 64.
Peer settings as pytorch_reference.py: --threads (2), denormals flushed, OpenBLAS on one thread,
glibc's heap kept (--malloc). Each step (zero_grad, forward, backward, clip, AdamW) is timed with
perf_counter, the batch drawn and the rate set outside; the median is reported.

  /usr/bin/python3 bench/pytorch_gpt.py --steps 2000 --json gpt_pytorch.json
"""
import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # read when torch loads OpenBLAS: see pytorch_reference.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from pytorch_reference import keep_heap, warn_if_reference_blas  # noqa: E402


def glorot_(w, fan_in, fan_out):
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    nn.init.uniform_(w, -limit, limit)


def linear(n_in, n_out, fan_out=None):
    m = nn.Linear(n_in, n_out)
    glorot_(m.weight, n_in, n_out if fan_out is None else fan_out)
    nn.init.zeros_(m.bias)
    return m


class CausalSelfAttention(nn.Module):
    def __init__(self, c, heads, t, dropout=0.0):
        super().__init__()
        self.heads, self.d, self.dropout = heads, c // heads, dropout
        self.qkv = linear(c, 3 * c, fan_out=c)  # Ember's fans: fan_out = H * key_dim = C
        self.proj = linear(c, c)
        self.register_buffer("future", torch.ones(t, t, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, x):
        n, t, c = x.shape
        q, k, v = (z.view(n, t, self.heads, self.d).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        att = F.softmax(att.masked_fill(self.future[:t, :t], float("-inf")), dim=-1)
        att = F.dropout(att, self.dropout, self.training)
        return self.proj((att @ v).transpose(1, 2).reshape(n, t, c))


class Block(nn.Module):
    def __init__(self, c, heads, t, dropout=0.0):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(c, eps=1e-5), nn.LayerNorm(c, eps=1e-5)
        self.attn = CausalSelfAttention(c, heads, t, dropout)
        self.mlp = nn.Sequential(linear(c, 4 * c), nn.GELU(approximate="tanh"), linear(4 * c, c))
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    def __init__(self, vocabulary, t, blocks, heads, c, dropout=0.0):
        super().__init__()
        self.tokens = nn.Embedding(vocabulary, c)
        self.positions = nn.Parameter(torch.empty(t, c))
        nn.init.uniform_(self.tokens.weight, -0.05, 0.05)  # Keras' Embedding initialiser
        nn.init.uniform_(self.positions, -0.05, 0.05)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*[Block(c, heads, t, dropout) for _ in range(blocks)])
        self.ln = nn.LayerNorm(c, eps=1e-5)
        self.head = linear(c, vocabulary)

    def forward(self, ids):
        return self.head(self.ln(self.blocks(self.drop(self.tokens(ids) + self.positions[:ids.shape[1]]))))


def read_tokens(path):
    """The file's distinct bytes, sorted (the vocabulary), and its bytes as ids into it."""
    with open(path, "rb") as f:
        text = f.read()
    vocab = sorted(set(text))
    lookup = torch.zeros(256, dtype=torch.long)
    lookup[torch.tensor(vocab)] = torch.arange(len(vocab))
    return vocab, lookup[torch.frombuffer(bytearray(text), dtype=torch.uint8).long()]


def learning_rate(s, steps, warmup, peak, floor):
    """apps/gpt.h's gpt_learning_rate: the rate before step s (0-based)."""
    if s < warmup:
        return peak * (s + 1) / warmup
    r = min(1.0, (s - warmup) / max(steps - 1 - warmup, 1))
    return floor + 0.5 * (1.0 + math.cos(math.pi * r)) * (peak - floor)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data/moby-dick/data.txt")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=12)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--dropout", type=float, default=0.0, help="nanoGPT's dropout (train_gpt --dropout)")
    ap.add_argument("--seed", type=int, default=1, help="initialisation (torch.manual_seed) and window draws")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--json", help="write the figures (val_loss, median_step_ms, ...) as JSON here")
    ap.add_argument("--precision", choices=["fp32", "autocast_bf16"], default="fp32",
                    help="autocast_bf16: the training forward and loss under torch.autocast(\"cpu\", "
                         "dtype=torch.bfloat16) (train_gpt/train_mnist --precision mixed_bf16's counterpart)")
    ap.add_argument("--malloc", choices=["keep", "trim"], default="keep",
                    help="keep glibc's heap between steps (default) or trim it as glibc does (pytorch_reference.py)")
    a = ap.parse_args()
    autocast = ((lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.precision == "autocast_bf16"
                else contextlib.nullcontext)
    if a.features % a.heads:
        ap.error(f"--features {a.features} is not a multiple of --heads {a.heads}")
    if a.malloc == "keep":
        keep_heap()
    torch.set_num_threads(a.threads)
    warn_if_reference_blas()
    torch.set_flush_denormal(True)  # as Ember (see pytorch_reference.py)
    torch.manual_seed(a.seed)
    warmup, peak, floor, t = 100, 1e-3, 1e-4, a.context

    vocab, tokens = read_tokens(a.data)
    n_val = int(len(tokens) * 0.1)
    split = len(tokens) - n_val
    train, val = tokens[:split], tokens[split:]

    model = GPT(len(vocab), t, a.blocks, a.heads, a.features, a.dropout)
    decay = [p for p in model.parameters() if p.dim() == 2]  # Linear weights and the two embedding tables
    no_decay = [p for p in model.parameters() if p.dim() != 2]  # biases, LayerNorm gammas and betas
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=peak, betas=(0.9, 0.99), eps=1e-8)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"pytorch_gpt: {len(tokens)} bytes ({len(vocab)} distinct), {split} for training, {n_val} for validation; "
          f"{n_params} parameters; cpu, {a.threads} threads", flush=True)

    gen = torch.Generator().manual_seed(a.seed)
    offsets = torch.arange(t + 1)
    step_ms, window_loss = [], 0.0
    model.train()
    t0 = time.perf_counter()
    for s in range(a.steps):
        starts = torch.randint(0, len(train) - t, (a.batch_size,), generator=gen)  # 0 .. n - T - 1
        w = train[starts[:, None] + offsets]
        x, y = w[:, :-1], w[:, 1:]
        lr = learning_rate(s, a.steps, warmup, peak, floor)
        for g in opt.param_groups:
            g["lr"] = lr
        s0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = F.cross_entropy(model(x).reshape(-1, len(vocab)), y.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step_ms.append((time.perf_counter() - s0) * 1e3)
        value = loss.item()
        if not math.isfinite(value):
            sys.exit(f"pytorch_gpt: the loss is {value} at step {s + 1}")
        window_loss += value
        if (s + 1) % a.log_every == 0 or s + 1 == a.steps:
            mean = window_loss / (s % a.log_every + 1)
            print(f"step {s + 1}/{a.steps} - loss: {mean:.4f} - lr: {lr:.2e} - {step_ms[-1]:.1f} ms/step", flush=True)
            window_loss = 0.0
    train_s = time.perf_counter() - t0
    median = statistics.median(step_ms)

    # Non-overlapping windows j: x = val[jT, jT + T), y = val[jT + 1, jT + T + 1), jT + T + 1 <= len(val).
    windows = (len(val) - 1) // t
    model.eval()
    total = 0.0
    with torch.no_grad():
        for j in range(0, windows, 64):
            starts = torch.arange(j, min(j + 64, windows)) * t
            w = val[starts[:, None] + offsets]
            total += F.cross_entropy(model(w[:, :-1]).reshape(-1, len(vocab)), w[:, 1:].reshape(-1),
                                     reduction="sum").item()
    val_tokens = windows * t
    val_loss = total / val_tokens
    print(f"Validation loss: {val_loss:.4f} nats/byte on {val_tokens} tokens")
    print(f"Training time: {train_s:.1f} s, median step {median:.2f} ms "
          f"({a.steps} steps of {a.batch_size} x {t} bytes)")
    if a.json:
        figures = {"val_loss": val_loss, "val_tokens": val_tokens, "median_step_ms": median,
                   "train_seconds": train_s, "steps": a.steps,
                   "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                   "tokens_per_s": a.batch_size * t / (median / 1e3)}
        with open(a.json, "w") as f:
            json.dump(figures, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
