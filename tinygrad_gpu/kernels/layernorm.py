"""Layer norm over the last dimension: layernorm.cu, its NumPy reference, its launcher.

``forward(x, weight, bias, eps)`` -> (out, mean, rstd); ``backward(x, weight, mean, rstd,
dout, need_params)`` -> (dx, dweight, dbias).  x and dout: (rows, n); weight, bias: (n,), bias
may be None (no shift).
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import fast_cpu, runtime

FILE = "layernorm.cu"


# ----------------------------------------------------------------------------- reference
def reference_forward(x, weight, bias, eps: float):
    """layernorm.cu's forward: mean, variance around the mean, xhat, then scale and shift."""
    xp, dtype = runtime.array_module_of(x), x.dtype
    x = x.astype(runtime.working_dtype(dtype))
    mean = x.mean(axis=1)
    var = ((x - mean[:, None]) ** 2).mean(axis=1)
    rstd = 1 / xp.sqrt(var + eps)
    out = (x - mean[:, None]) * rstd[:, None] * weight
    if bias is not None:
        out = out + bias
    return out.astype(dtype), mean.astype(dtype), rstd.astype(dtype)


def reference_backward(x, weight, mean, rstd, dout, need_params: bool = True):
    """dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dout * weight: the two means remove what
    normalising cancels (a shift and a rescaling). dweight = sum of dout xhat, dbias = sum of dout."""
    dtype = x.dtype
    x, mean, rstd, dout = (a.astype(runtime.working_dtype(dtype)) for a in (x, mean, rstd, dout))
    xhat = (x - mean[:, None]) * rstd[:, None]
    g = dout * weight
    dx = rstd[:, None] * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    dweight, dbias = ((dout * xhat).sum(axis=0), dout.sum(axis=0)) if need_params else (None, None)
    return tuple(None if a is None else a.astype(dtype) for a in (dx, dweight, dbias))


# ----------------------------------------------------------------------------- launcher
def forward(x, weight, bias, eps: float, device: str):
    if device == "cpu":
        return fast_cpu.layernorm_forward(x, weight, bias, eps)
    if not runtime.use_kernel(device, x, weight, bias):
        return reference_forward(x, weight, bias, eps)
    xp = devices.array_module(device)
    rows, n = x.shape
    bias = xp.zeros(n, np.float32) if bias is None else bias
    x, weight, bias = (runtime.contiguous(xp, a) for a in (x, weight, bias))
    out, mean, rstd = xp.empty((rows, n), np.float32), xp.empty(rows, np.float32), xp.empty(rows, np.float32)
    if rows:
        runtime.launch(device, FILE, "layernorm_forward", (rows,), (runtime.row_block(n),),
                       [x, weight, bias, out, mean, rstd, np.int32(n), np.float32(eps)])
    return out, mean, rstd


def backward(x, weight, mean, rstd, dout, need_params: bool, device: str, dout_is_spare: bool = False):
    """dout_is_spare: nobody else holds dout, and the CPU computes dx in it."""
    if device == "cpu":
        return fast_cpu.layernorm_backward(x, weight, mean, rstd, dout, need_params, dout_is_spare)
    if not runtime.use_kernel(device, x, weight, dout):
        return reference_backward(x, weight, mean, rstd, dout, need_params)
    xp = devices.array_module(device)
    rows, n = x.shape
    x, weight, dout = (runtime.contiguous(xp, a, np.float32) for a in (x, weight, dout))
    dx = xp.empty((rows, n), np.float32)
    if rows:
        runtime.launch(device, FILE, "layernorm_backward", (rows,), (runtime.row_block(n),),
                       [x, weight, mean, rstd, dout, dx, np.int32(n)])
    if not need_params:
        return dx, None, None
    dweight, dbias = xp.zeros(n, np.float32), xp.zeros(n, np.float32)
    if rows:
        runtime.launch(device, FILE, "layernorm_backward_params", (-(-n // 32),), (32, 8),
                       [x, mean, rstd, dout, dweight, dbias, np.int32(rows), np.int32(n)])
    return dx, dweight, dbias
