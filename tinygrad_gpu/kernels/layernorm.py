"""Layer norm over the last dimension: layernorm.cu, its NumPy reference, its launcher.

``forward(x, weight, bias, eps)`` -> (out, mean, rstd); ``backward(x, weight, mean, rstd,
dout, need_params)`` -> (dx, dweight, dbias).  x and dout: (rows, n); weight, bias: (n,), bias
may be None (no shift).
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import runtime

FILE = "layernorm.cu"


# ----------------------------------------------------------------------------- reference
# Written in place, with einsum for the sums of products: each (rows, n) temporary that is not
# made is a pass over memory saved, and those passes are what layer norm costs on a CPU.

def reference_forward(x, weight, bias, eps: float):
    xp, n, dtype = runtime.array_module_of(x), x.shape[1], x.dtype
    x = x.astype(runtime.working_dtype(dtype), copy=False)
    mean = runtime.row_sums(x) / n
    out = x - mean[:, None]                                   # centred
    rstd = 1 / xp.sqrt(xp.einsum("ij,ij->i", out, out) / n + eps)
    out *= rstd[:, None]                                      # xhat: mean 0, variance 1
    out *= weight
    if bias is not None:
        out += bias
    return out.astype(dtype, copy=False), mean.astype(dtype, copy=False), rstd.astype(dtype, copy=False)


def reference_backward(x, weight, mean, rstd, dout, need_params: bool = True, overwrite: bool = False):
    """dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dout * weight: the two means remove what
    normalising cancels (a shift and a rescaling). dweight = sum of dout xhat, dbias = sum of dout.
    overwrite=True: dout is the caller's scratch, and dx is computed in its memory."""
    xp, n, dtype = runtime.array_module_of(x), x.shape[1], x.dtype
    work = runtime.working_dtype(dtype)
    x, mean, rstd, dout = (a.astype(work, copy=False) for a in (x, mean, rstd, dout))
    xhat = x - mean[:, None]
    xhat *= rstd[:, None]
    dweight = dbias = None
    if need_params:
        dweight, dbias = xp.einsum("ij,ij->j", dout, xhat), runtime.column_sums(dout)
    g = xp.multiply(dout, weight, out=dout if overwrite else None)       # after the sums over dout above
    mean_g, mean_gx = runtime.row_sums(g) / n, xp.einsum("ij,ij->i", g, xhat) / n
    xhat *= mean_gx[:, None]                                  # xhat is spent: reuse its memory
    g -= xhat
    g -= mean_g[:, None]
    g *= rstd[:, None]
    return tuple(None if a is None else a.astype(dtype, copy=False) for a in (g, dweight, dbias))


# ----------------------------------------------------------------------------- launcher
def forward(x, weight, bias, eps: float, device: str):
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


def backward(x, weight, mean, rstd, dout, need_params: bool, device: str, overwrite: bool = False):
    """overwrite=True: dout is the caller's scratch, which the NumPy reference may compute in."""
    if not runtime.use_kernel(device, x, weight, dout):
        return reference_backward(x, weight, mean, rstd, dout, need_params, overwrite)
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
