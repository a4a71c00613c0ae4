"""Trigonometric and hyperbolic functions and their inverses: tan, asin, acos, atan, sinh, cosh,
asinh, acosh, atanh (sin and cos live in elementwise.py).

Each backward is the textbook derivative written with Tensor ops, so it can be differentiated again.
Outside an inverse function's domain (asin of 2, acosh of 0.5) the forward gives NaN, as in PyTorch.
"""
from __future__ import annotations

from ..tensor import Function
from .elementwise import _Binary


class Tan(Function):
    saves_output = True

    def forward(ctx, x):
        return ctx.xp.tan(x.data)

    def backward(ctx, grad):
        y = ctx.output                        # tan' = 1 + tan^2
        return grad * (1 + y * y)


class Asin(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.arcsin(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (1 - x * x).rsqrt()


class Acos(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.arccos(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return -grad * (1 - x * x).rsqrt()


class Atan(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.arctan(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (1 + x * x)


class Sinh(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.sinh(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cosh()


class Cosh(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.cosh(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.sinh()


class Asinh(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.arcsinh(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x * x + 1).rsqrt()


class Acosh(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.arccosh(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ((x - 1) * (x + 1)).rsqrt()       # x^2 - 1 as a product: exact near x = 1


class Atanh(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.arctanh(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (1 - x * x)


class Atan2(_Binary):
    """atan2(a, b): the angle of the point (b, a), in (-pi, pi]; the quadrant comes from both signs.
    d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2)."""

    float_only = True

    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return ctx.xp.arctan2(a.data, b.data)

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        scaled = grad / (a * a + b * b)
        return (scaled * b if ctx.needs_input_grad[0] else None,
                -scaled * a if ctx.needs_input_grad[1] else None)
