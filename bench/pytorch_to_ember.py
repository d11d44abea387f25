#!/usr/bin/env python3
"""Writes a model trained in PyTorch as an Ember checkpoint that `load_model` (and
`train_mnist --evaluate-only --load FILE`) reads: the worked example of docs/usage.md's
"The checkpoint format".

It trains bench/pytorch_reference.py's reference CNN (Ember's, layer for layer) for --steps Adam
steps on MNIST, prints its test accuracy, and writes --out: a safetensors file whose metadata holds
the architecture (version 2: every layer's name, type, configuration, parameter shapes and inbound
layers; the input and the outputs) and whose tensors are the parameters under Ember's names
("conv2d/kernel", ...). PyTorch's layouts are Ember's (Conv2d weight (K, C, R, S), Linear weight
(out, in)) and its Flatten is NCHW order as Ember's, so the weights are written as they are. No
optimizer state: load_model then gives a model to evaluate or predict with, or to compile afresh.

  /usr/bin/python3 bench/pytorch_to_ember.py --steps 300 --out /tmp/from_pytorch.safetensors
  build/release/apps/train_mnist --evaluate-only --load /tmp/from_pytorch.safetensors
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from pytorch_parity_reference import write_safetensors  # noqa: E402
from pytorch_reference import load_mnist, reference_cnn  # noqa: E402


def layer(name, kind, inbound, config=None, params=()):
    """One entry of the architecture's "layers": configuration values are strings, as Layer::config()
    gives them; params lists each tensor's name (after "<layer>/") and shape."""
    return {"name": name, "type": kind, "inbound": [inbound], "config": config or {},
            "params": [{"name": n, "shape": list(s)} for n, s in params]}


def ember_checkpoint(model):
    """(architecture, tensors) for bench/pytorch_reference.py's reference_cnn(): nn.Sequential
    indices 0, 3, 6 are the convolutions (each followed by its ReLU, fused in Ember's Conv2D), 2 and
    5 the pools, 9 and 11 the Linear layers."""
    layers, tensors, previous = [], [], "input_1"
    convs, denses = 0, 0
    for i, m in enumerate(model):
        relu_next = i + 1 < len(model) and isinstance(model[i + 1], nn.ReLU)
        if isinstance(m, nn.Conv2d):
            name = "conv2d" + (f"_{convs}" if convs else "")
            convs += 1
            config = {"filters": str(m.out_channels), "kernel": "%d,%d" % m.kernel_size,
                      "activation": "relu" if relu_next else "linear", "padding": "valid",
                      "strides": "%d,%d" % m.stride, "use_bias": "true"}
            params = [("kernel", m.weight.shape), ("bias", m.bias.shape)]
            layers.append(layer(name, "Conv2D", previous, config, params))
        elif isinstance(m, nn.Linear):
            name = "dense" + (f"_{denses}" if denses else "")
            denses += 1
            config = {"units": str(m.out_features), "activation": "relu" if relu_next else "linear"}
            layers.append(layer(name, "Dense", previous, config, [("kernel", m.weight.shape), ("bias", m.bias.shape)]))
        elif isinstance(m, nn.MaxPool2d):
            name = "max_pool2d" + (f"_{i // 3}" if i // 3 else "")
            layers.append(layer(name, "MaxPool2D", previous, {"pool": "2,2", "strides": "2,2", "padding": "valid"}))
        elif isinstance(m, nn.Flatten):
            name = "flatten"
            layers.append(layer(name, "Flatten", previous))
        else:
            continue  # a ReLU: its layer above applies it
        if hasattr(m, "weight"):
            tensors += [(name + "/kernel", m.weight.detach().float()), (name + "/bias", m.bias.detach().float())]
        previous = name
    architecture = {"version": 2, "model": "Sequential", "name": "from_pytorch", "input_name": "input_1",
                    "input_shape": [1, 28, 28], "inputs": [{"name": "input_1", "shape": [1, 28, 28]}],
                    "outputs": [previous], "layers": layers}
    return architecture, tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="data/mnist")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(2)
    train_x, train_y, test_x, test_y = load_mnist(a.data_dir)
    model = reference_cnn()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for s in range(a.steps):
        idx = torch.randint(0, len(train_x), (64,))
        loss = nn.functional.cross_entropy(model(train_x[idx].unsqueeze(1).float() / 255.0), train_y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(test_x[i:i + 1000].unsqueeze(1).float() / 255.0).argmax(1) == test_y[i:i + 1000]).sum())
                      for i in range(0, len(test_x), 1000))
    architecture, tensors = ember_checkpoint(model)
    write_safetensors(a.out, tensors, {"format": "ember", "architecture": json.dumps(architecture)})
    print(f"PyTorch after {a.steps} steps: test accuracy {correct / len(test_x):.4f} ({correct} of {len(test_x)}); "
          f"wrote {a.out}")


if __name__ == "__main__":
    main()
