"""Softmax cross-entropy over rows of logits: cross_entropy.cu, its NumPy reference, its launcher.

``forward(logits, targets, ...)`` returns each row's loss and log-sum-exp (saved for the
backward); ``backward(...)`` returns dlogits.  logits: (N, C) float; targets: (N,) integer.
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import runtime

FILE = "cross_entropy.cu"


# ----------------------------------------------------------------------------- reference
def reference_forward(logits, targets, ignore_index: int, smoothing: float):
    xp = runtime.array_module_of(logits)
    top = logits.max(axis=1, keepdims=True)
    shifted = logits - top
    lse = (top + xp.log(xp.exp(shifted, out=shifted).sum(axis=1, keepdims=True)))[:, 0]
    kept = targets != ignore_index
    picked = xp.take_along_axis(logits, xp.where(kept, targets, 0)[:, None], axis=1)[:, 0]
    loss = lse - picked
    if smoothing:
        loss = (1 - smoothing) * loss + smoothing * (lse - logits.mean(axis=1))
    return xp.where(kept, loss, 0).astype(logits.dtype, copy=False), lse


def reference_backward(logits, targets, lse, dlosses, ignore_index: int, smoothing: float):
    xp = runtime.array_module_of(logits)
    n, c = logits.shape
    kept = targets != ignore_index
    d = logits - lse[:, None]                 # in place from here: softmax - e / C - (1 - e) onehot
    xp.exp(d, out=d)
    if smoothing:
        d -= smoothing / c
    d[xp.arange(n)[kept], targets[kept]] -= 1 - smoothing
    d *= xp.where(kept, dlosses, 0)[:, None]
    return d.astype(logits.dtype, copy=False)


# ----------------------------------------------------------------------------- launcher
def forward(logits, targets, ignore_index: int, smoothing: float, device: str):
    if not runtime.use_kernel(device, logits):
        return reference_forward(logits, targets, ignore_index, smoothing)
    xp = devices.array_module(device)
    n, c = logits.shape
    logits, targets = runtime.contiguous(xp, logits), runtime.contiguous(xp, targets, np.int64)
    losses, lse = xp.empty(n, np.float32), xp.empty(n, np.float32)
    if n:
        runtime.launch(device, FILE, "cross_entropy_forward", (n,), (runtime.row_block(c),),
                       [logits, targets, losses, lse, np.int32(c), np.int64(ignore_index), np.float32(smoothing)])
    return losses, lse


def backward(logits, targets, lse, dlosses, ignore_index: int, smoothing: float, device: str):
    if not runtime.use_kernel(device, logits):
        return reference_backward(logits, targets, lse, dlosses, ignore_index, smoothing)
    xp = devices.array_module(device)
    n, c = logits.shape
    logits, targets = runtime.contiguous(xp, logits), runtime.contiguous(xp, targets, np.int64)
    dlosses = runtime.contiguous(xp, dlosses, np.float32)
    dlogits = xp.empty((n, c), np.float32)
    if n:
        runtime.launch(device, FILE, "cross_entropy_backward", (n,), (runtime.row_block(c),),
                       [logits, targets, lse, dlosses, dlogits, np.int32(c), np.int64(ignore_index),
                        np.float32(smoothing)])
    return dlogits
