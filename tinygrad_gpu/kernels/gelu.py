"""GELU, tanh approximation: gelu.cu, its NumPy reference, its launcher."""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from . import runtime

FILE = "gelu.cu"
K, C = math.sqrt(2 / math.pi), 0.044715


# ----------------------------------------------------------------------------- reference
def reference_forward(x):
    xp = runtime.array_module_of(x)
    with np.errstate(over="ignore"):                    # x^3 overflows for |x| > 1e13: tanh(inf) = 1
        return (0.5 * x * (1 + xp.tanh(K * (x + C * x * x * x)))).astype(x.dtype)


def reference_backward(x, dy):
    xp = runtime.array_module_of(x)
    with np.errstate(over="ignore", invalid="ignore"):
        t = xp.tanh(K * (x + C * x * x * x))
        sech2 = 1 - t * t
        slope = 0.5 * (1 + t) + xp.where(sech2 != 0, 0.5 * x * sech2 * K * (1 + 3 * C * x * x), 0)
    return (dy * slope).astype(x.dtype)


# ----------------------------------------------------------------------------- launcher
def _elementwise(kernel: str, device: str, *inputs):
    xp = devices.array_module(device)
    inputs = [runtime.contiguous(xp, a, np.float32) for a in inputs]
    out = xp.empty(inputs[0].shape, np.float32)
    n = out.size
    if n:
        runtime.launch(device, FILE, kernel, (runtime.grid_stride_grid(n),), (256,), [*inputs, out, np.int64(n)])
    return out


def forward(x, device: str):
    if not runtime.use_kernel(device, x):
        return reference_forward(x)
    return _elementwise("gelu_forward", device, x)


def backward(x, dy, device: str):
    if not runtime.use_kernel(device, x, dy):
        return reference_backward(x, dy)
    return _elementwise("gelu_backward", device, x, dy)
