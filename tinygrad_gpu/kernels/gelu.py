"""GELU, tanh approximation: gelu.cu, its NumPy reference, its launcher."""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from . import runtime

FILE = "gelu.cu"
K, C = math.sqrt(2 / math.pi), 0.044715


# ----------------------------------------------------------------------------- reference
def _tanh_of_inner(xp, x):
    """(t, u, xc): t = tanh(K (x + C x^3)), u = 1 + C x^2, xc = x clipped to [-10, 10]. Beyond |x| = 10
    tanh is +-1 to within 1e-37, so the clip changes nothing there and keeps x^3 from overflowing."""
    xc = xp.minimum(x, 10.0)      # minimum/maximum with out=: np.clip costs twice as much here
    xp.maximum(xc, -10.0, out=xc)
    u = xc * xc
    u *= C
    u += 1                        # 1 + C x^2
    t = xc * u                    # x + C x^3
    t *= K
    return xp.tanh(t, out=t), u, xc


def reference_forward(x):
    """0.5 x (1 + t). In place on two buffers: each op that makes a new array of this size also makes
    the CPU fetch fresh memory, so the in-place form is about twice as fast as the one-line formula."""
    xp, shape = runtime.array_module_of(x), x.shape
    x = x.reshape(-1)             # 1-D: NumPy would turn 0-d results into scalars, which out= cannot take
    t, _, _ = _tanh_of_inner(xp, x)
    t += 1
    t *= x
    t *= 0.5
    return t.reshape(shape)


def reference_backward(x, dy):
    """dy * (0.5 (1 + t) + 0.5 x (1 - t^2) K (1 + 3 C x^2)), in place like the forward."""
    xp, shape = runtime.array_module_of(x), x.shape
    x, dy = x.reshape(-1), dy.reshape(-1)
    t, u, xc = _tanh_of_inner(xp, x)
    u *= 3
    u -= 2                        # 1 + 3 C x^2
    u *= xc
    u *= 0.5 * K                  # 0.5 x K (1 + 3 C x^2)
    sech2 = t * t
    xp.subtract(1, sech2, out=sech2)
    u *= sech2                    # the x-derivative of tanh's argument, through tanh
    t += 1
    t *= 0.5
    t += u
    t *= dy
    return t.reshape(shape)


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
