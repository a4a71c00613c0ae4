"""Gradient clipping by global norm."""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from ..tensor import Tensor


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False) -> Tensor:
    """Scale all gradients together so that their joint norm is at most max_norm; return the norm
    before clipping. One scale for all keeps the update's direction. A nan or inf norm scales by
    nan or 0 as PyTorch does (or raises with error_if_nonfinite)."""
    grads = [p.grad for p in ([parameters] if isinstance(parameters, Tensor) else parameters) if p.grad is not None]
    if not grads:
        return Tensor(0.0)
    device = grads[0].device
    xp = devices.array_module(device)
    if norm_type == math.inf:
        # xp.max over the per-tensor maxima, not Python's max(): that drops a nan unless it comes first
        total = xp.max(xp.stack([xp.abs(g.data).max().astype("float64") for g in grads]))
    elif norm_type == 2:
        total = sum(_sum_of_squares(g.data) for g in grads)
        if not math.isfinite(float(total)):     # a square overflowed float32 (or a gradient is inf or nan)
            total = sum((g.data.astype("float64") ** 2).sum() for g in grads)
        total = total ** 0.5
    else:
        total = sum((xp.abs(g.data.astype("float64")) ** norm_type).sum() for g in grads) ** (1.0 / norm_type)
    total_norm = float(total)
    if error_if_nonfinite and not math.isfinite(total_norm):
        raise RuntimeError(f"clip_grad_norm_: the total norm of the gradients is {total_norm}; "
                           "pass error_if_nonfinite=False to clip anyway")
    scale = min(max_norm / (total_norm + 1e-6), 1.0) if not math.isnan(total_norm) else math.nan
    if scale < 1.0 or math.isnan(scale):
        for g in grads:
            g.data *= scale
    return Tensor(total_norm, dtype=grads[0].dtype, device=device)     # in the gradients' dtype, as PyTorch


def _sum_of_squares(array):
    """In float32 (float16 squares overflow past 256), with the array library's pairwise summation,
    which keeps the error small for millions of values (a dot product adds them up one by one);
    the total in float64. Twice as fast as squaring in float64; see the fallback above."""
    flat = array.reshape(-1).astype(np.promote_types(array.dtype, np.float32), copy=False)
    with np.errstate(over="ignore"):            # caught by the caller, which squares in float64 then
        return (flat * flat).sum().astype("float64")
