#!/usr/bin/env python3
"""Writes tests/data/gelu_pytorch.safetensors: GELU, exact and tanh-approximated, and its gradient,
computed by PyTorch, which tests/layers/test_activations.cpp checks Ember against in CI without
torch.

Run with Debian's python3-torch: `/usr/bin/python3 bench/pytorch_gelu_reference.py`. The values
are PyTorch's GELU (`approximate="none"` and `"tanh"`) and its autograd gradient computed in
float64 and stored rounded to float32: the reference is the function, not one float32 rounding of
it. How far PyTorch's own float32 run lies from it is stored in the metadata (pytorch_f32_*, the
largest |difference| / max(1, |x|), and for the gradients / max(1, x^2)), so that Ember's distance
can be read next to PyTorch's.

The file holds:
  x                 401 points on [-8, 8], then 0, -0, +-1e-4, +-20, +-1e4, +-1e20 (f32)
  dy                an output gradient per point, uniform on [-1, 1] (seed 7)
  exact/y, exact/dx GELU(x) = x Phi(x) and dy * GELU'(x)
  tanh/y, tanh/dx   the same for x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2
"""
import json
import os

import torch
import torch.nn.functional as F

from pytorch_parity_reference import write_safetensors  # the same writer as the CNN's reference


def gelu_and_grad(x, dy, approximate):
    x = x.clone().requires_grad_(True)
    y = F.gelu(x, approximate=approximate)
    (dx,) = torch.autograd.grad(y, x, dy)
    return y.detach(), dx


def main():
    specials = [0.0, -0.0, 1e-4, -1e-4, 20.0, -20.0, 1e4, -1e4, 1e20, -1e20]
    x32 = torch.cat([torch.linspace(-8, 8, 401, dtype=torch.float32), torch.tensor(specials, dtype=torch.float32)])
    gen = torch.Generator().manual_seed(7)
    dy32 = torch.rand(x32.shape, generator=gen, dtype=torch.float32) * 2 - 1
    tensors, meta = [("x", x32), ("dy", dy32)], {}
    scale1 = torch.clamp(x32.double().abs(), min=1.0)
    for key, approximate in (("exact", "none"), ("tanh", "tanh")):
        y64, dx64 = gelu_and_grad(x32.double(), dy32.double(), approximate)
        y32, dx32 = gelu_and_grad(x32, dy32, approximate)
        tensors += [(f"{key}/y", y64.float()), (f"{key}/dx", dx64.float())]
        finite = x32.abs() < 1e3  # x^2 beyond float's range below: PyTorch's f32 gradient is its own affair there
        ey = ((y32.double() - y64).abs() / scale1)[finite].max().item()
        edx = ((dx32.double() - dx64).abs() / scale1.pow(2))[finite].max().item()
        meta[f"pytorch_f32_{key}_y"] = f"{ey:.3e}"
        meta[f"pytorch_f32_{key}_dx"] = f"{edx:.3e}"
    meta["torch"] = torch.__version__
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "gelu_pytorch.safetensors")
    write_safetensors(os.path.normpath(out), tensors, meta)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
