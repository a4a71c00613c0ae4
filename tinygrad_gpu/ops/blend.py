"""Ops that weigh one value against another: copysign (the magnitude of one, the sign of the other),
lerp (a point on the way from one to the other) and isclose (whether two agree within a tolerance).
"""
from __future__ import annotations

from .. import device as devices
from .. import dtypes
from .elementwise import _Binary, check_broadcast, zero_gradient
from ..tensor import Function, Tensor


class CopySign(_Binary):
    """|a| with the sign of b (the sign bit: -0.0 counts as negative)."""

    float_only = True        # integers give floats, as in PyTorch

    def forward(ctx, a, b):
        xp = ctx.xp
        if ctx.recording:
            # d/da is +1 where a keeps its sign, -1 where it flips, and 0 at a == 0 (PyTorch's convention).
            # A constant, so it has no derivative of its own (nor has the result almost anywhere).
            ctx.slope = xp.sign(a.data) * xp.copysign(1, b.data)
        return xp.copysign(a.data, b.data)

    def backward(ctx, grad):
        # b only chooses a sign: PyTorch gives it a zero gradient (not None)
        return (grad * Tensor._wrap(ctx.slope, ctx.device) if ctx.needs_input_grad[0] else None,
                zero_gradient(grad) if ctx.needs_input_grad[1] else None)


class Lerp(Function):
    """start + weight * (end - start)."""

    def forward(ctx, start, end, weight):
        ctx.save_for_backward(start, end, weight)
        xp, s, e, w = ctx.xp, start.data, end.data, weight.data
        difference = e - s
        # Two formulas, as PyTorch computes it: each exact at its own end (weight 0 gives start, 1 gives end)
        return xp.where(xp.abs(w) < 0.5, s + w * difference, e - difference * (1 - w))

    def backward(ctx, grad):
        start, end, weight = ctx.saved_tensors
        needed = ctx.needs_input_grad
        return (grad * (1 - weight) if needed[0] else None,
                grad * weight if needed[1] else None,
                grad * (end - start) if needed[2] else None)


def promoted_together(op: str, first: Tensor, *others) -> list:
    """`first` and the others (tensors or Python numbers) in one dtype, after checking devices and shapes (in
    PyTorch's order: shapes before dtypes). The compositions of ops/compositions.py use it too."""
    tensors = [first] + [first._as_tensor(o) for o in others]
    for t in tensors[1:]:
        if t.device != first.device:
            raise RuntimeError(f"{op}: expected all tensors on the same device, got {first.device} and {t.device}")
    check_broadcast(op, *(t.shape for t in tensors))
    dtype, ndim = first.dtype, first.ndim
    for t in tensors[1:]:
        dtype, ndim = dtypes.promote(dtype, ndim, t.dtype, t.ndim), max(ndim, t.ndim)
    return [t.to(dtype=dtype) for t in tensors]


def lerp(start: Tensor, end, weight) -> Tensor:
    """Linear interpolation; weight is a number or a tensor (then it gets a gradient too). As in PyTorch, for
    floating-point tensors of one dtype only: nothing is promoted (except a 0-d weight, which PyTorch takes
    like a number, whatever its dtype)."""
    for name, t in (("end", end), ("weight", weight)):       # PyTorch checks the dtypes match first
        if isinstance(t, Tensor) and t.dtype != start.dtype and (name == "end" or t.ndim):
            raise RuntimeError(f"lerp: expected dtype {start.dtype} for `{name}` but got dtype {t.dtype}")
    dtypes.reject_non_floating("lerp", start.dtype)
    return Lerp.apply(*promoted_together("lerp", start, end, weight))


def isclose(a: Tensor, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tensor:
    """|a - other| <= atol + rtol * |other| elementwise (equal infinities are close; NaNs only with
    equal_nan=True), as a bool tensor; no gradient."""
    if rtol < 0 or atol < 0:
        raise RuntimeError(f"isclose: rtol and atol must be non-negative, got rtol={rtol}, atol={atol}")
    if isinstance(other, Tensor) and other.dtype != a.dtype:
        raise RuntimeError(f"isclose: {a.dtype} did not match {other.dtype}; convert one first (PyTorch promotes "
                           "nothing here)")
    x, y = promoted_together("isclose", a.detach(), other.detach() if isinstance(other, Tensor) else other)
    xp = devices.array_module(a.device)
    with devices.use(a.device):
        return Tensor._wrap(xp.isclose(x.data, y.data, rtol=rtol, atol=atol, equal_nan=equal_nan), a.device)
