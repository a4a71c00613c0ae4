"""Softplus: the one activation that needs its own Function (nn/activations.py holds the rest).

softplus(x) = log(1 + exp(x)) composed from exp and log overflows: exp(x) is inf above about
88 (float32) or 709 (float64), so the value is inf, and the gradient of log at inf (0) times
the gradient of exp there (inf) is nan, even where a ``where`` picks another branch, since
``where`` sends a zero gradient into the branch it did not pick and 0 * inf is nan.
The forward below only ever takes exp of a number <= 0. logsigmoid, mish and
binary_cross_entropy_with_logits are built on it.
"""
from __future__ import annotations

from ..tensor import Function
from .elementwise import where


class Softplus(Function):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's switch to the
    line the curve approaches; threshold=inf never switches)."""

    def forward(ctx, x, beta, threshold):
        ctx.save_for_backward(x)
        ctx.beta, ctx.threshold = beta, threshold
        xp = ctx.xp
        z = x.data * beta
        # log(1 + e^z) = max(z, 0) + log(1 + e^-|z|): the same number, with exp of -|z| <= 0 only
        smooth = (xp.maximum(z, 0) + xp.log1p(xp.exp(-xp.abs(z)))) / beta
        return xp.where(z > threshold, x.data, smooth)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        z = x * ctx.beta
        # d/dx log(1 + e^(beta x)) / beta = sigmoid(beta x), which our Sigmoid computes without overflow
        return where(z > ctx.threshold, grad, grad * z.sigmoid())
