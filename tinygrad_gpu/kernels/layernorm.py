"""Layer norm over the last dimension: layernorm.cu, its NumPy reference, its launcher.

``forward(x, weight, bias, eps)`` -> (out, mean, rstd); ``backward(x, weight, mean, rstd,
dout, need_params)`` -> (dx, dweight, dbias).  x and dout: (rows, n); weight, bias: (n,), bias
may be None (no shift).  x, weight, bias and dout share one dtype, which out, dx, dweight and
dbias have too; mean and rstd are float32 for float32, float16 and bfloat16 data (float64 for
float64).
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import fast_cpu, runtime

FILE = "layernorm.cu"


# ----------------------------------------------------------------------------- reference
def reference_forward(x, weight, bias, eps: float):
    """layernorm.cu's forward: mean, variance around the mean, xhat, then scale and shift. Computed in
    runtime.working_dtype (float32 for float16 and bfloat16 data); out is rounded once to x's dtype,
    mean and rstd stay in the working dtype, as the kernel saves them."""
    xp, dtype = runtime.array_module_of(x), x.dtype
    x = x.astype(runtime.working_dtype(dtype))
    mean = x.mean(axis=1)
    var = ((x - mean[:, None]) ** 2).mean(axis=1)
    rstd = 1 / xp.sqrt(var + eps)
    out = (x - mean[:, None]) * rstd[:, None] * weight       # a 16-bit weight or bias meets float32: float32
    if bias is not None:
        out = out + bias
    return out.astype(dtype), mean, rstd


def reference_backward(x, weight, mean, rstd, dout, need_params: bool = True):
    """dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dout * weight: the two means remove what
    normalising cancels (a shift and a rescaling). dweight = sum of dout xhat, dbias = sum of dout.
    Computed in runtime.working_dtype (float32 for float16 and bfloat16 data, the sums too), each
    result rounded once to x's dtype."""
    dtype = x.dtype
    x, mean, rstd, dout = (a.astype(runtime.working_dtype(dtype)) for a in (x, mean, rstd, dout))
    xhat = (x - mean[:, None]) * rstd[:, None]
    g = dout * weight
    dx = rstd[:, None] * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    dweight, dbias = ((dout * xhat).sum(axis=0), dout.sum(axis=0)) if need_params else (None, None)
    return tuple(None if a is None else a.astype(dtype) for a in (dx, dweight, dbias))


# ----------------------------------------------------------------------------- launcher
def forward(x, weight, bias, eps: float, device: str):
    if runtime.use_fast_cpu(device, x, weight, bias):
        return fast_cpu.layernorm_forward(x, weight, bias, eps)
    if not runtime.use_kernel(device, x, weight, bias, half=True):
        return reference_forward(x, weight, bias, eps)
    xp, dtype = devices.array_module(device), x.dtype
    rows, n = x.shape
    bias = xp.zeros(n, dtype) if bias is None else bias
    x, weight, bias = (runtime.contiguous(xp, a) for a in (x, weight, bias))
    out, mean, rstd = xp.empty((rows, n), dtype), xp.empty(rows, np.float32), xp.empty(rows, np.float32)
    if rows:
        runtime.launch(device, FILE, runtime.entry_point("layernorm_forward", dtype), (rows,), (runtime.row_block(n),),
                       [x, weight, bias, out, mean, rstd, np.int32(n), np.float32(eps)])
    return out, mean, rstd


def backward(x, weight, mean, rstd, dout, need_params: bool, device: str, dout_is_spare: bool = False):
    """dout_is_spare: nobody else holds dout, and the CPU computes dx in it."""
    if runtime.use_fast_cpu(device, x, weight, dout):
        return fast_cpu.layernorm_backward(x, weight, mean, rstd, dout, need_params, dout_is_spare)
    if not runtime.use_kernel(device, x, weight, dout, half=True):
        return reference_backward(x, weight, mean, rstd, dout, need_params)
    xp, dtype = devices.array_module(device), x.dtype
    rows, n = x.shape
    x, weight, dout = (runtime.contiguous(xp, a) for a in (x, weight, dout))
    dx = xp.empty((rows, n), dtype)
    if rows:
        runtime.launch(device, FILE, runtime.entry_point("layernorm_backward", dtype), (rows,), (runtime.row_block(n),),
                       [x, weight, mean, rstd, dout, dx, np.int32(n)])
    if not need_params:
        return dx, None, None
    dweight, dbias = xp.zeros(n, dtype), xp.zeros(n, dtype)
    if rows:
        runtime.launch(device, FILE, runtime.entry_point("layernorm_backward_params", dtype), (-(-n // 32),), (32, 8),
                       [x, mean, rstd, dout, dweight, dbias, np.int32(rows), np.int32(n)])
    return dx, dweight, dbias
