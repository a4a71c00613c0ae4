"""Layer norm over the last dimension: layernorm.cu, its NumPy reference, its launcher.

``forward(x, weight, bias, eps)`` -> (out, mean, rstd); ``backward(x, weight, mean, rstd,
dout, need_params)`` -> (dx, dweight, dbias).  x and dout: (rows, n); weight, bias: (n,).
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import runtime

FILE = "layernorm.cu"


# ----------------------------------------------------------------------------- reference
def reference_forward(x, weight, bias, eps: float):
    xp = runtime.array_module_of(x)
    mean = x.mean(axis=1)
    centered = x - mean[:, None]
    rstd = 1 / xp.sqrt((centered * centered).mean(axis=1) + eps)
    out = centered * rstd[:, None] * weight + bias
    return out.astype(x.dtype, copy=False), mean.astype(x.dtype, copy=False), rstd.astype(x.dtype, copy=False)


def reference_backward(x, weight, mean, rstd, dout, need_params: bool = True):
    xhat = (x - mean[:, None]) * rstd[:, None]
    g = dout * weight
    dx = rstd[:, None] * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    if not need_params:
        return dx.astype(x.dtype, copy=False), None, None
    dweight, dbias = (dout * xhat).sum(axis=0), dout.sum(axis=0)
    return dx.astype(x.dtype, copy=False), dweight.astype(x.dtype, copy=False), dbias.astype(x.dtype, copy=False)


# ----------------------------------------------------------------------------- launcher
def forward(x, weight, bias, eps: float, device: str):
    if not runtime.use_kernel(device, x, weight, bias):
        return reference_forward(x, weight, bias, eps)
    xp = devices.array_module(device)
    rows, n = x.shape
    x, weight, bias = (runtime.contiguous(xp, a) for a in (x, weight, bias))
    out, mean, rstd = xp.empty((rows, n), np.float32), xp.empty(rows, np.float32), xp.empty(rows, np.float32)
    if rows:
        runtime.launch(device, FILE, "layernorm_forward", (rows,), (runtime.row_block(n),),
                       [x, weight, bias, out, mean, rstd, np.int32(n), np.float32(eps)])
    return out, mean, rstd


def backward(x, weight, mean, rstd, dout, need_params: bool, device: str):
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
