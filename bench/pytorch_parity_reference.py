#!/usr/bin/env python3
"""Writes tests/data/reference_cnn_pytorch.safetensors and tests/data/bn_cnn_pytorch.safetensors:
two models' numbers computed by PyTorch, which tests/layers/test_pytorch_parity.cpp checks Ember
against in CI without torch (as llm.c tests against a state file dumped by PyTorch).

Run with Debian's python3-torch (`/usr/bin/python3 bench/pytorch_parity_reference.py`, MNIST in
data/mnist from scripts/fetch_data.sh). The model is bench/pytorch_reference.py's twin of Ember's
(Conv32-Pool-Conv64-Pool-Conv64-Flatten-Dense64-Dense10, Flatten in NCHW order as Ember's), its
parameters named as Ember names them. The second model is train_mnist's bn-cnn without its
Dropout (whose random mask PyTorch cannot share): Conv32(same)-BatchNorm-ReLU-Pool-Conv64(same)-
BatchNorm-ReLU-Pool-Flatten-Dense10, BatchNormalization as Keras' (momentum 0.99, i.e. PyTorch's
0.01; epsilon 1e-3) in training mode (batch statistics), its moving statistics after the 10 steps
stored too (trained_state/<layer>/moving_mean, moving_variance: the variance with Bessel's
correction, as Ember and PyTorch keep it). Everything is computed in float64 and stored rounded to
float32: the reference is the gradient of the model that Keras and PyTorch define, not one
float32 rounding of it. How far PyTorch's own float32 run lies from it is measured here and
stored in the metadata (pytorch_f32_*), so that Ember's distance can be read next to PyTorch's.

The file holds:
  images_a, labels_a     MNIST training images 0..63 (u8, N x 1 x 28 x 28) and labels (i32)
  images_b, labels_b     training images 64..127
  init/<param>           the initial parameters: Glorot-uniform kernels, zero biases (Keras')
  a/logits, a/loss       at init on batch a (softmax cross-entropy, mean over the batch)
  a/grad/<param>         every parameter's gradient there
  trained/<param>        after 10 Adam steps from init on batches a, b, a, b, ... (Ember's Adam:
                         lr 1e-3, beta1 0.9, beta2 0.999, eps 1e-7 added to the uncorrected sqrt(v)
                         as TensorFlow does; optim/adam.h)
  b/logits, b/loss       at trained on batch b
  b/grad/<param>         every parameter's gradient there
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_reference import load_mnist, reference_cnn  # noqa: E402

LR, BETA1, BETA2, EPS, STEPS = 1e-3, 0.9, 0.999, 1e-7, 10


def bn_cnn():
    """train_mnist's bn-cnn (apps/model_zoo.h) without Dropout, initialised as Keras does."""
    bn = lambda c: nn.BatchNorm2d(c, eps=1e-3, momentum=0.01)  # noqa: E731 (Keras' 0.99)
    m = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), bn(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), bn(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 10))
    for layer in m:
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
    return m


# Per model: Ember's layer name for each nn.Sequential index that has parameters.
# A convolution's bias right before BatchNormalization cancels (the batch mean is subtracted): its
# gradient is 0 up to rounding, and Adam's steps on that rounding noise are noise (PyTorch's own
# float32 run lands 7e-3 from the float64 one there). Such biases are stored but left out of the
# metadata's figures, and tests/layers/test_pytorch_parity.cpp checks them apart.
CANCELLED = {"bn_cnn": ("conv2d/bias", "conv2d_1/bias")}
MODELS = {
    "reference_cnn": (reference_cnn, {0: "conv2d", 3: "conv2d_1", 6: "conv2d_2", 9: "dense", 11: "dense_1"}),
    "bn_cnn": (bn_cnn, {0: "conv2d", 1: "batch_normalization", 4: "conv2d_1", 5: "batch_normalization_1",
                        9: "dense"}),
}


def named(model, names):
    out = []
    for i, layer in enumerate(model):
        if i in names:
            bn = isinstance(layer, nn.BatchNorm2d)
            out.append((names[i] + ("/gamma" if bn else "/kernel"), layer.weight))
            out.append((names[i] + ("/beta" if bn else "/bias"), layer.bias))
    return out


def named_state(model, names):
    return [(names[i] + "/moving_mean", layer.running_mean) for i, layer in enumerate(model)
            if isinstance(layer, nn.BatchNorm2d)] + \
           [(names[i] + "/moving_variance", layer.running_var) for i, layer in enumerate(model)
            if isinstance(layer, nn.BatchNorm2d)]


def loss_and_grads(model, names, x, y):
    model.zero_grad(set_to_none=True)
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    return logits.detach(), loss.detach(), [(n, p.grad.detach().clone()) for n, p in named(model, names)]


def adam_steps(model, names, batches):
    """Ember's Adam (optim/adam.h) in the model's precision."""
    state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in named(model, names)}
    for t, (x, y) in enumerate(batches, start=1):
        _, _, grads = loss_and_grads(model, names, x, y)
        lr_t = LR * math.sqrt(1 - BETA2**t) / (1 - BETA1**t)
        with torch.no_grad():
            for (n, p), (_, g) in zip(named(model, names), grads):
                m, v = state[n]
                m.mul_(BETA1).add_(g, alpha=1 - BETA1)
                v.mul_(BETA2).addcmul_(g, g, value=1 - BETA2)
                p.sub_(lr_t * m / (v.sqrt() + EPS))


def write_safetensors(path, tensors, metadata):
    dtypes = {torch.float32: "F32", torch.int32: "I32", torch.uint8: "U8"}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors:
        t = t.contiguous().cpu()
        data = t.numpy().tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(tmp, path)


def worst_scaled(a, b, skip=()):
    """max |a - b| over max |b|, per tensor, the worst over the list (tensors named in skip left out)."""
    return max(float((x - y).abs().max() / y.abs().max().clamp_min(1e-30))
               for (n, x), (_, y) in zip(a, b) if n not in skip)


def write_model(key, out, images, labels, seed):
    make, names = MODELS[key]
    torch.manual_seed(seed)
    x64 = {k: v.unsqueeze(1).double() / 255.0 for k, v in images.items()}
    batches = lambda x: [(x[k], labels[k]) for k in "abababababab"[:STEPS]]  # noqa: E731
    model = make().double()  # Glorot-uniform kernels, zero biases, BatchNorm's ones and zeros
    model.train()
    init = [(n, p.detach().clone()) for n, p in named(model, names)]
    logits_a, loss_a, grads_a = loss_and_grads(model, names, x64["a"], labels["a"])
    # The init batch moved BatchNorm's moving statistics: the steps start from the initial ones.
    for m in model:
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
    adam_steps(model, names, batches(x64))
    trained = [(n, p.detach().clone()) for n, p in named(model, names)]
    trained_state = [(n, t.detach().clone()) for n, t in named_state(model, names)]
    logits_b, loss_b, grads_b = loss_and_grads(model, names, x64["b"], labels["b"])

    # PyTorch's own float32 run of the same: its distance to the float64 reference.
    f32 = make()
    with torch.no_grad():
        for (_, p), (_, v) in zip(named(f32, names), init):
            p.copy_(v.float())
    x32 = {k: v.unsqueeze(1).float() / 255.0 for k, v in images.items()}
    l32_a, _, g32_a = loss_and_grads(f32, names, x32["a"], labels["a"])
    for m in f32:
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
    adam_steps(f32, names, batches(x32))
    skip = CANCELLED.get(key, ())
    traj32 = max(float((p.detach().double() - v).abs().max())
                 for (n, p), (_, v) in zip(named(f32, names), trained) if n not in skip)
    with torch.no_grad():
        for (_, p), (_, v) in zip(named(f32, names), trained):
            p.copy_(v.float())
    l32_b, _, g32_b = loss_and_grads(f32, names, x32["b"], labels["b"])
    as64 = lambda gs: [(n, g.double()) for n, g in gs]  # noqa: E731
    meta = {
        "generator": "bench/pytorch_parity_reference.py",
        "model": key,
        "torch": torch.__version__,
        "seed": str(seed),
        "precision": "float64, stored as float32",
        "pytorch_f32_logits_a": "%.3g" % float((l32_a.double() - logits_a).abs().max() / logits_a.abs().max()),
        "pytorch_f32_logits_b": "%.3g" % float((l32_b.double() - logits_b).abs().max() / logits_b.abs().max()),
        "pytorch_f32_grads_a": "%.3g" % worst_scaled(as64(g32_a), grads_a, skip),
        "pytorch_f32_grads_b": "%.3g" % worst_scaled(as64(g32_b), grads_b, skip),
        "pytorch_f32_trajectory": "%.3g" % traj32,
    }
    f = lambda items, prefix: [(prefix + n, t.float()) for n, t in items]  # noqa: E731
    tensors = [("images_a", images["a"].unsqueeze(1)), ("labels_a", labels["a"].int()),
               ("images_b", images["b"].unsqueeze(1)), ("labels_b", labels["b"].int())]
    tensors += f(init, "init/") + [("a/logits", logits_a.float()), ("a/loss", loss_a.reshape(1).float())]
    tensors += f(grads_a, "a/grad/") + f(trained, "trained/") + f(trained_state, "trained_state/")
    tensors += [("b/logits", logits_b.float()), ("b/loss", loss_b.reshape(1).float())] + f(grads_b, "b/grad/")
    write_safetensors(out, tensors, meta)
    print(f"wrote {out} ({os.path.getsize(out)} bytes); loss a {float(loss_a):.6f}, b {float(loss_b):.6f}")
    for k, v in meta.items():
        print(f"  {k}: {v}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="data/mnist")
    ap.add_argument("--out-dir", default="tests/data")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(2)
    train_x, train_y, _, _ = load_mnist(args.data_dir)
    images = {"a": train_x[0:64], "b": train_x[64:128]}
    labels = {"a": train_y[0:64], "b": train_y[64:128]}
    for key in MODELS:
        write_model(key, f"{args.out_dir}/{key}_pytorch.safetensors", images, labels, args.seed)


if __name__ == "__main__":
    main()
