"""Cross-entropy: CrossEntropyRows.composition (ops/fused.py) · reference_* · cross_entropy.cu · compiled_cpu.py.

Softmax cross-entropy over rows of logits: the NumPy reference and the launcher.

``forward(logits, targets, ...)`` returns each row's loss and log-sum-exp (saved for the
backward); ``backward(...)`` returns dlogits.  logits: (N, C) float; targets: (N,) integer.
The losses and lse are float32 for float32, float16 and bfloat16 logits (float64 for float64),
dout (the losses' gradient) comes in float32 too, and dlogits has the logits' dtype.
The cpu runs compiled_cpu.py's kernels on its compiled path, else the reference (kernels/cpu_paths.py).
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import cpu_paths, runtime

FILE = "cross_entropy.cu"


# ----------------------------------------------------------------------------- reference
def reference_forward(logits, targets, ignore_index: int, smoothing: float):
    """cross_entropy.cu's forward: lse = log(sum exp x), the row's max taken out first so that exp
    cannot overflow; loss = (1 - e)(lse - x_t) + e (lse - mean x), with the smoothing term only when
    e is not 0 (a -inf logit would give 0 * inf there); 0 where the target is ignored.
    Computed in runtime.working_dtype (float32 for float16 and bfloat16 logits), and returned in it:
    the kernels keep the losses and lse in float32 for every 16-bit type."""
    xp = runtime.array_module_of(logits)
    work = runtime.working_dtype(logits.dtype)
    x = logits.astype(work)
    top = x.max(axis=1)
    lse = top + xp.log(xp.exp(x - top[:, None]).sum(axis=1))
    kept = targets != ignore_index
    loss = lse - xp.take_along_axis(x, xp.where(kept, targets, 0)[:, None], axis=1)[:, 0]
    if smoothing:
        loss = (1 - smoothing) * loss + smoothing * (lse - x.mean(axis=1))
    return xp.where(kept, loss, 0).astype(work), lse.astype(work)


def reference_backward(logits, targets, lse, dout, ignore_index: int, smoothing: float):
    """dlogits = (softmax - e / C - (1 - e) onehot(target)) * dloss, per row; 0 for an ignored row.
    Computed in runtime.working_dtype (float32 for float16 and bfloat16 logits), rounded once to the
    logits' dtype."""
    xp, dtype = runtime.array_module_of(logits), logits.dtype
    work = runtime.working_dtype(dtype)
    x, lse, dout = (a.astype(work) for a in (logits, lse, dout))
    onehot = (xp.arange(x.shape[1]) == targets[:, None]).astype(work)
    d = xp.exp(x - lse[:, None]) - smoothing / x.shape[1] - (1 - smoothing) * onehot
    return (d * xp.where(targets != ignore_index, dout, 0)[:, None]).astype(dtype)


# ----------------------------------------------------------------------------- launcher
def forward(logits, targets, ignore_index: int, smoothing: float, device: str):
    """(losses, lse) of (N, C) logits: float32 for float32, float16 and bfloat16 logits."""
    cpu = cpu_paths.compiled_kernels(device, logits)
    if cpu and logits.shape[1]:                  # (a row of no logits: the reference's error)
        return cpu.cross_entropy_forward(logits, targets, ignore_index, smoothing)
    if not runtime.use_kernel(device, logits, half=True):
        return reference_forward(logits, targets, ignore_index, smoothing)
    xp = devices.array_module(device)
    n, c = logits.shape
    logits, targets = runtime.contiguous(xp, logits), runtime.contiguous(xp, targets, np.int64)
    losses, lse = xp.empty(n, np.float32), xp.empty(n, np.float32)
    if n:
        kernel = runtime.entry_point("cross_entropy_forward", logits.dtype)
        runtime.launch(device, FILE, kernel, (n,), (runtime.row_block(c),),
                       [logits, targets, losses, lse, np.int32(c), np.int64(ignore_index), np.float32(smoothing)])
    return losses, lse


def backward(logits, targets, lse, dout, ignore_index: int, smoothing: float, device: str):
    """dlogits, in the logits' dtype; lse is what forward() returned, dout the losses' gradient."""
    cpu = cpu_paths.compiled_kernels(device, logits)
    if cpu:
        return cpu.cross_entropy_backward(logits, targets, lse, dout, ignore_index, smoothing)
    if not runtime.use_kernel(device, logits, half=True):
        return reference_backward(logits, targets, lse, dout, ignore_index, smoothing)
    xp = devices.array_module(device)
    n, c = logits.shape
    logits, targets = runtime.contiguous(xp, logits), runtime.contiguous(xp, targets, np.int64)
    dout = runtime.contiguous(xp, dout, np.float32)
    dlogits = xp.empty((n, c), logits.dtype)
    if n:
        kernel = runtime.entry_point("cross_entropy_backward", logits.dtype)
        runtime.launch(device, FILE, kernel, (n,), (runtime.row_block(c),),
                       [logits, targets, lse, dout, dlogits, np.int32(c), np.int64(ignore_index),
                        np.float32(smoothing)])
    return dlogits
