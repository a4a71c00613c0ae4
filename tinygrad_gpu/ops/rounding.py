"""Rounding, and the divisions that round: floor, ceil, trunc, round(decimals), fmod, remainder (%),
floor division (//) and div(rounding_mode="trunc" | "floor").

PyTorch's conventions, which these follow:
* floor, ceil, trunc and round of an integer tensor give its values unchanged, in its own dtype;
* a rounded result is piecewise constant, so its gradient is 0 everywhere, also at the jumps (the op is
  still recorded, so a loss built from it can call backward);
* remainder takes the sign of the divisor (Python's %), fmod the sign of the dividend (C's fmod);
  d/db of a - b * q is -q, with q = a // b for remainder and q = trunc(a / b) for fmod;
* // rounds toward minus infinity (floor), div(rounding_mode="trunc") toward zero;
* on integer tensors %, //, fmod and the rounded divisions stay integer, and dividing by zero raises
  PyTorch's RuntimeError (its message says ZeroDivisionError). On a GPU that check would make the host
  wait for the GPU, so there it is read later, with the next values read from that GPU
  (deferred_checks.py); meanwhile the zero divisors are replaced by 1, so the results hold defined (but
  meaningless) numbers.
Floating-point division by zero gives inf or nan instead, as in PyTorch.
"""
from __future__ import annotations

from .. import deferred_checks, dtypes
from .. import device as devices
from .elementwise import _Binary, zero_gradient
from ..tensor import Function, Tensor


# ----------------------------------------------------------------------------- rounding to whole numbers
class _Stepwise(Function):
    """An op whose result is piecewise constant: gradient 0 everywhere, as in PyTorch."""

    def backward(ctx, grad):
        return zero_gradient(grad)


class Floor(_Stepwise):
    def forward(ctx, x):
        return ctx.xp.floor(x.data)


class Ceil(_Stepwise):
    def forward(ctx, x):
        return ctx.xp.ceil(x.data)


class Trunc(_Stepwise):
    def forward(ctx, x):
        return ctx.xp.trunc(x.data)


class Round(_Stepwise):
    """Halves go to the even neighbour (2.5 -> 2), as in PyTorch; decimals < 0 rounds to tens, hundreds..."""

    def forward(ctx, x, decimals):
        return ctx.xp.round(x.data, decimals or 0)


def to_whole(x: Tensor, op: type, **options) -> Tensor:
    """floor / ceil / trunc / round: an integer tensor is whole already and comes back as a copy."""
    if x.is_floating_point():
        return op.apply(x, **options)
    dtypes.reject_bool(op.op_name(), x.dtype)
    if options.get("decimals") is not None:         # PyTorch: round() of an integer works, round(decimals=0) not
        raise NotImplementedError(f"round: decimals={options['decimals']} needs a floating-point tensor, got "
                                  f"{x.dtype} (as in PyTorch); convert first, e.g. x.float().round(...)")
    return x.clone()


# ----------------------------------------------------------------------------- divisions that round
def _divisor(ctx, op: str, a: Tensor, b: Tensor):
    """b's array, checked: integer division by zero is a RuntimeError (see the module docstring)."""
    dtypes.reject_bool(op, a.dtype)
    if a.dtype.kind not in "iu" or a.numel() == 0:      # (dividing nothing divides by nothing)
        return b.data
    zero = b.data == 0
    deferred_checks.check(ctx.device, zero, RuntimeError,      # PyTorch's type: RuntimeError("ZeroDivisionError")
                          f"{op}: integer division by zero (divisor of shape {b.shape}, dtype {b.dtype})")
    # On a GPU the check comes later: meanwhile 0 -> 1, as integer division by zero is undefined there.
    return b.data + zero if devices.is_cuda(ctx.device) else b.data


class Fmod(_Binary):
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return ctx.xp.fmod(a.data, _divisor(ctx, "fmod", a, b))

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return (grad if ctx.needs_input_grad[0] else None,
                -grad * a.div(b, rounding_mode="trunc") if ctx.needs_input_grad[1] else None)


class Remainder(_Binary):
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return ctx.xp.remainder(a.data, _divisor(ctx, "remainder", a, b))

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return (grad if ctx.needs_input_grad[0] else None,
                -grad * a.div(b, rounding_mode="floor") if ctx.needs_input_grad[1] else None)


class _RoundedDivide(_Binary):
    """a / b rounded to a whole number: gradient 0 for both inputs, as in PyTorch."""

    name = None

    @classmethod
    def op_name(cls) -> str:
        return cls.name

    def backward(ctx, grad):
        return (zero_gradient(grad) if ctx.needs_input_grad[0] else None,
                zero_gradient(grad) if ctx.needs_input_grad[1] else None)


class FloorDivide(_RoundedDivide):
    name = "floor_divide"

    def forward(ctx, a, b):
        return ctx.xp.floor_divide(a.data, _divisor(ctx, ctx.name, a, b))


class TruncDivide(_RoundedDivide):
    name = "div(rounding_mode='trunc')"

    def forward(ctx, a, b):
        xp, divisor = ctx.xp, _divisor(ctx, ctx.name, a, b)
        if dtypes.is_floating(a.dtype):
            return xp.trunc(a.data / divisor)
        # Integers: the floor quotient is one too low where the division is inexact and the true
        # quotient negative (the only case where floor and trunc differ). Adding a bool keeps the dtype.
        q = xp.floor_divide(a.data, divisor)
        return q + ((q * divisor != a.data) & (q < 0))


_ROUNDED_DIVISIONS = {"trunc": TruncDivide, "floor": FloorDivide}


def div(a: Tensor, other, rounding_mode=None) -> Tensor:
    """a / other (true division, floats even for integers), or rounded toward zero or minus infinity."""
    if rounding_mode is None:
        return a / other
    if rounding_mode not in _ROUNDED_DIVISIONS:
        raise RuntimeError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    return a._binary(_ROUNDED_DIVISIONS[rounding_mode], other)
