#!/usr/bin/env python3
"""Writes tests/data/gpt_pytorch.safetensors: a two-block GPT's numbers computed by PyTorch, which
tests/apps/test_gpt_parity.cpp checks Ember against in CI without torch (as
pytorch_parity_reference.py does for the CNNs).

Run with Debian's python3-torch (`/usr/bin/python3 bench/pytorch_gpt_parity_reference.py`, the text
in data/moby-dick from scripts/fetch_data.sh). The model is bench/pytorch_gpt.py's, the twin of
apps/gpt.h's gpt_model: here 2 blocks, 4 heads, 32 features, a 16-byte context, over Moby-Dick's 85
distinct bytes; its parameters named as Ember names them. Everything is computed in float64 and
stored rounded to float32: the reference is the gradient of the model, not one float32 rounding of
it. How far PyTorch's own float32 run lies from it is measured and stored in the metadata
(pytorch_f32_*), so that Ember's distance can be read next to PyTorch's.

The training rule is train_gpt's AdamW (optim/optimizer.cpp, optim/adam.h): the gradients clipped to
a global norm of 1.0 (scaled by c / norm when the norm exceeds c), then the decoupled decay
p -= lr * wd * p on the kernels and both embedding tables (wd 0.1), then Adam with lr 1e-3, betas
0.9 and 0.99, eps 1e-8 added to the uncorrected sqrt(v) as TensorFlow does.

The file holds:
  ids_a, targets_a       8 windows of 16 byte ids and their next bytes (i32, 8 x 16)
  ids_b, targets_b       8 more
  init/<param>           the initial parameters: Keras' initialisers (pytorch_gpt.py)
  a/logits, a/loss       at init on batch a (mean cross-entropy over every position)
  a/grad/<param>         every parameter's gradient there
  trained/<param>        after 10 AdamW steps from init on batches a, b, a, b, ...
  b/logits, b/loss       at trained on batch b
  b/grad/<param>         every parameter's gradient there
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_gpt import GPT, read_tokens  # noqa: E402
from pytorch_parity_reference import write_safetensors  # noqa: E402

BLOCKS, HEADS, FEATURES, CONTEXT, BATCH = 2, 4, 32, 16, 8
LR, BETA1, BETA2, EPS, DECAY, CLIPNORM, STEPS = 1e-3, 0.9, 0.99, 1e-8, 0.1, 1.0, 10


def named(model):
    """(Ember's name, parameter, decayed) for every parameter, in apps/gpt.h's layer order."""
    out = [("embedding/embeddings", model.tokens.weight, True),
           ("position_embedding/embeddings", model.positions, True)]
    ln, dense = 0, 0

    def layer_norm(m):
        nonlocal ln
        name = "layer_normalization" + (f"_{ln}" if ln else "")
        ln += 1
        return [(name + "/gamma", m.weight, False), (name + "/beta", m.bias, False)]

    def linear(m):
        nonlocal dense
        name = "dense" + (f"_{dense}" if dense else "")
        dense += 1
        return [(name + "/kernel", m.weight, True), (name + "/bias", m.bias, False)]

    for b, block in enumerate(model.blocks):
        mha = "multi_head_attention" + (f"_{b}" if b else "")
        out += layer_norm(block.ln1)
        out += [(mha + "/qkv_kernel", block.attn.qkv.weight, True), (mha + "/qkv_bias", block.attn.qkv.bias, False),
                (mha + "/output_kernel", block.attn.proj.weight, True),
                (mha + "/output_bias", block.attn.proj.bias, False)]
        out += layer_norm(block.ln2) + linear(block.mlp[0]) + linear(block.mlp[2])
    return out + layer_norm(model.ln) + linear(model.head)


def loss_and_grads(model, ids, targets):
    model.zero_grad(set_to_none=True)
    logits = model(ids)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    return logits.detach(), loss.detach(), [(n, p.grad.detach().clone()) for n, p, _ in named(model)]


def adamw_steps(model, batches):
    """train_gpt's AdamW (module docstring) in the model's precision."""
    params = named(model)
    state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p, _ in params}
    for t, (ids, targets) in enumerate(batches, start=1):
        _, _, grads = loss_and_grads(model, ids, targets)
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for _, g in grads))
        scale = CLIPNORM / norm if norm > CLIPNORM else 1.0
        lr_t = LR * math.sqrt(1 - BETA2**t) / (1 - BETA1**t)
        with torch.no_grad():
            for (n, p, decayed), (_, g) in zip(params, grads):
                g = g * scale
                if decayed:
                    p.sub_(LR * DECAY * p)
                m, v = state[n]
                m.mul_(BETA1).add_(g, alpha=1 - BETA1)
                v.mul_(BETA2).addcmul_(g, g, value=1 - BETA2)
                p.sub_(lr_t * m / (v.sqrt() + EPS))


def worst_scaled(a, b):
    """max |a - b| over max |b|, per tensor, the worst over the list."""
    return max(float((x - y).abs().max() / y.abs().max().clamp_min(1e-30)) for (_, x), (_, y) in zip(a, b))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data/moby-dick/data.txt")
    ap.add_argument("--out", default="tests/data/gpt_pytorch.safetensors")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    vocab, tokens = read_tokens(args.data)
    starts = torch.randint(0, len(tokens) - CONTEXT, (2 * BATCH,))
    windows = tokens[starts[:, None] + torch.arange(CONTEXT + 1)]
    ids = {"a": windows[:BATCH, :-1], "b": windows[BATCH:, :-1]}
    targets = {"a": windows[:BATCH, 1:], "b": windows[BATCH:, 1:]}
    batches = [(ids[k], targets[k]) for k in "abababababab"[:STEPS]]

    model = GPT(len(vocab), CONTEXT, BLOCKS, HEADS, FEATURES).double()
    init = [(n, p.detach().clone()) for n, p, _ in named(model)]
    logits_a, loss_a, grads_a = loss_and_grads(model, ids["a"], targets["a"])
    adamw_steps(model, batches)
    trained = [(n, p.detach().clone()) for n, p, _ in named(model)]
    logits_b, loss_b, grads_b = loss_and_grads(model, ids["b"], targets["b"])

    # PyTorch's own float32 run of the same: its distance to the float64 reference.
    f32 = GPT(len(vocab), CONTEXT, BLOCKS, HEADS, FEATURES)
    with torch.no_grad():
        for (_, p, _), (_, v) in zip(named(f32), init):
            p.copy_(v.float())
    l32_a, _, g32_a = loss_and_grads(f32, ids["a"], targets["a"])
    adamw_steps(f32, batches)
    # The key projection's bias cancels in the softmax (it adds q . b_k to a whole row of scores): its
    # gradient is 0 up to rounding, and Adam's steps on that noise are noise. Its distance is stated apart.
    diffs = [(n, (p.detach().double() - v).abs()) for (n, p, _), (_, v) in zip(named(f32), trained)]
    key = lambda n: n.endswith("/qkv_bias")  # noqa: E731
    traj32 = max(max(float(d.max()) for n, d in diffs if not key(n)),
                 max(float(torch.cat([d[:FEATURES], d[2 * FEATURES:]]).max()) for n, d in diffs if key(n)))
    traj32_key = max(float(d[FEATURES:2 * FEATURES].max()) for n, d in diffs if key(n))
    with torch.no_grad():
        for (_, p, _), (_, v) in zip(named(f32), trained):
            p.copy_(v.float())
    l32_b, _, g32_b = loss_and_grads(f32, ids["b"], targets["b"])
    as64 = lambda gs: [(n, g.double()) for n, g in gs]  # noqa: E731
    meta = {
        "generator": "bench/pytorch_gpt_parity_reference.py",
        "model": f"gpt blocks={BLOCKS} heads={HEADS} features={FEATURES} context={CONTEXT} vocabulary={len(vocab)}",
        "torch": torch.__version__,
        "seed": str(args.seed),
        "precision": "float64, stored as float32",
        "pytorch_f32_logits_a": "%.3g" % float((l32_a.double() - logits_a).abs().max() / logits_a.abs().max()),
        "pytorch_f32_logits_b": "%.3g" % float((l32_b.double() - logits_b).abs().max() / logits_b.abs().max()),
        "pytorch_f32_grads_a": "%.3g" % worst_scaled(as64(g32_a), grads_a),
        "pytorch_f32_grads_b": "%.3g" % worst_scaled(as64(g32_b), grads_b),
        "pytorch_f32_trajectory": "%.3g" % traj32,
        "pytorch_f32_trajectory_key_biases": "%.3g" % traj32_key,
    }
    f = lambda items, prefix: [(prefix + n, t.float()) for n, t in items]  # noqa: E731
    i32 = lambda t: t.to(torch.int32)  # noqa: E731
    tensors = [("ids_a", i32(ids["a"])), ("targets_a", i32(targets["a"])), ("ids_b", i32(ids["b"])),
               ("targets_b", i32(targets["b"]))]
    tensors += f(init, "init/") + [("a/logits", logits_a.float()), ("a/loss", loss_a.reshape(1).float())]
    tensors += f(grads_a, "a/grad/") + f(trained, "trained/")
    tensors += [("b/logits", logits_b.float()), ("b/loss", loss_b.reshape(1).float())] + f(grads_b, "b/grad/")
    write_safetensors(args.out, tensors, meta)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes); loss a {float(loss_a):.6f}, b {float(loss_b):.6f}")
    for k, v in meta.items():
        print(f"  {k}: {v}")


if __name__ == "__main__":
    main()
