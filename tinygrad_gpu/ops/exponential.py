"""Exponentials and logarithms beyond base e: exp2, log2, log10, expm1 and log1p (exact near 0), and logaddexp
(log(e^a + e^b)).

exp and log themselves live in elementwise.py. Backwards are Tensor ops (second derivatives work).
"""
from __future__ import annotations

import math

from .elementwise import _Binary
from ..tensor import Function


class Exp2(Function):
    saves_output = True

    def forward(ctx, x):
        return ctx.xp.exp2(x.data)

    def backward(ctx, grad):
        return grad * ctx.output * math.log(2)


class Log2(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.log2(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (x * math.log(2))


class Log10(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.log10(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (x * math.log(10))


class Expm1(Function):
    """e^x - 1, without the cancellation of exp(x) - 1 for small x."""

    saves_output = True

    def forward(ctx, x):
        return ctx.xp.expm1(x.data)

    def backward(ctx, grad):
        return grad * (ctx.output + 1)


class Log1p(Function):
    """log(1 + x), without the rounding of 1 + x for small x."""

    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.log1p(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (x + 1)


class LogAddExp(_Binary):
    """log(e^a + e^b) without overflow: the array modules compute it as max(a, b) + log1p(e^-|a - b|)."""

    float_only = True

    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return ctx.xp.logaddexp(a.data, b.data)

    def backward(ctx, grad):
        # d/da = e^a / (e^a + e^b) = sigmoid(a - b), which never overflows either
        a, b = ctx.saved_tensors
        return (grad * (a - b).sigmoid() if ctx.needs_input_grad[0] else None,
                grad * (b - a).sigmoid() if ctx.needs_input_grad[1] else None)
