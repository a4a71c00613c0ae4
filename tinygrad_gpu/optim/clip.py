"""Gradient clipping by global norm, without the host waiting for the GPU.

The norm is computed where the gradients are, and the scale stays there too: every gradient is
multiplied by min(max_norm / (norm + 1e-6), 1) as a device scalar, as PyTorch does, instead of
reading the norm on the host to decide whether to scale (which would stop the host until the GPU
has finished the backward, in every step).

Two ways to the same numbers. The plain one, per tensor: each gradient's norm by array operations, the
norm of those norms, then every gradient times the scale (three launches or so per gradient). The fast
one, for the 2-norm of float32 gradients on one device: on emu or cuda two launches for all of them
(kernels/multi_tensor.cu: the norm and the scale computed in one, then the multiplication), on the cpu
one pass over each gradient for the norm (compiled where numba runs the cpu's kernels) and one to scale
it, with none of the plain way's per-gradient arrays; the sums run in another order, so the norm agrees
with the plain one to float32 rounding. ``foreach=False`` (PyTorch's name) takes the plain way everywhere.
"""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from .. import kernels
from ..tensor import Tensor


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None) -> Tensor:
    """Scale all gradients together so that their joint norm is at most max_norm; return the norm
    before clipping. One scale for all keeps the update's direction. A nan or inf norm scales by
    nan or 0 as PyTorch does (or raises with error_if_nonfinite, which must read the norm).
    foreach=False takes the per-tensor path even where the multi-tensor kernels apply (None and True
    use them where they do)."""
    grads = [p.grad for p in ([parameters] if isinstance(parameters, Tensor) else parameters) if p.grad is not None]
    if not grads:
        return Tensor(0.0)
    if foreach is not False and _multi_tensor_applies(grads, norm_type):
        return _clip_multi_tensor(grads, max_norm, error_if_nonfinite)
    return _clip_per_tensor(grads, max_norm, norm_type, error_if_nonfinite)


def _multi_tensor_applies(grads, norm_type: float) -> bool:
    """The 2-norm of float32, C-contiguous gradients all on one device: kernels/multi_tensor.py. A gradient given
    twice takes the plain way: two blocks scaling one element at once would race on a GPU."""
    device = grads[0].device
    return norm_type == 2 and len({id(g) for g in grads}) == len(grads) and all(
        g.device == device and g.dtype == np.float32 and g.data.flags.c_contiguous for g in grads)


def _clip_multi_tensor(grads, max_norm: float, error_if_nonfinite: bool) -> Tensor:
    """Two launches: the norm and the scale min(max_norm / (norm + 1e-6), 1) together, then every gradient
    times the scale; both stay on the device (only error_if_nonfinite reads the norm, before any scaling)."""
    device = grads[0].device
    arrays = [g.data for g in grads]
    with devices.use(device):
        norm, scale = kernels.multi_tensor.norm_and_clip_coefficient(arrays, max_norm, device)
        if error_if_nonfinite and not math.isfinite(float(norm)):
            raise RuntimeError(f"clip_grad_norm_: the total norm of the gradients is {float(norm)}; "
                               "pass error_if_nonfinite=False to clip anyway")
        kernels.multi_tensor.scale_(arrays, scale, device)
    return Tensor._wrap(norm, device)


def _clip_per_tensor(grads, max_norm: float, norm_type: float, error_if_nonfinite: bool) -> Tensor:
    """The plain way: each gradient's norm by array operations, the norm of the norms, then the scale."""
    device = grads[0].device
    xp = devices.array_module(device)
    per_tensor = []
    for g in grads:                     # each gradient's norm where it lives; then all on the first one's device
        with devices.use(g.device):
            norm = _norm(devices.array_module(g.device), g.data.reshape(-1), norm_type)
        per_tensor.append(devices.move(norm, device))
    with devices.use(device):
        # The joint norm is the norm of the per-tensor norms, for every p.
        total = _norm(xp, xp.stack(per_tensor), norm_type)
        if error_if_nonfinite and not math.isfinite(float(total)):
            raise RuntimeError(f"clip_grad_norm_: the total norm of the gradients is {float(total)}; "
                               "pass error_if_nonfinite=False to clip anyway")
        scale = xp.minimum(max_norm / (total + 1e-6), 1.0)        # nan stays nan; inf gives 0
        result = Tensor._wrap(total.astype(grads[0].dtype), device)   # in the gradients' dtype, as PyTorch
    scales = {}                         # the scale once per (device, dtype), not once per gradient
    for g in grads:
        with devices.use(g.device), np.errstate(invalid="ignore"):    # inf * 0, as PyTorch gives it
            if (g.device, g.dtype) not in scales:
                scales[g.device, g.dtype] = devices.move(scale, g.device).astype(g.dtype)
            g.data *= scales[g.device, g.dtype]
    return result


def _norm(xp, values, norm_type: float):
    """The p-norm of a flat array, in float32 at least (float16 squares overflow past 256).

    The sum is the array library's pairwise one, which keeps the error small over millions of
    values (a dot product adds them one by one). As in PyTorch, float32 squares past its range
    (gradients above about 1.8e19) make the norm inf, which clips every gradient to 0 and which
    the training loop reports as a diverged run. An inf entry gives inf, a nan gives nan.
    """
    values = values.astype(np.promote_types(values.dtype, np.float32), copy=False)
    if values.size == 0:
        return xp.zeros((), values.dtype)
    if norm_type == math.inf:
        return xp.maximum(values.max(), -values.min())       # max |x| without an array of |x|
    with np.errstate(over="ignore"):
        if norm_type == 2:
            return xp.sqrt((values * values).sum())
        return (xp.abs(values) ** norm_type).sum() ** (1.0 / norm_type)
