"""BinaryCrossEntropy: the elementwise loss of nn.functional.binary_cross_entropy, as its own Function.

-(t log x + (1 - t) log(1 - x)) with each log clamped at -100, as PyTorch does, so that x = 0
or 1 gives a finite loss. Composed from log and clamp, its gradient would be nan there: the
clamp stops the gradient (0), and log's backward, 1 / x at x = 0, then multiplies 0 by inf.
PyTorch's gradient, (x - t) / max(x (1 - x), 1e-12), is finite on all of [0, 1]; so is ours.
"""
from __future__ import annotations

import numpy as np

from ..tensor import Function, Tensor
from .elementwise import where

LOG_FLOOR = -100.0            # PyTorch's clamp of log(x) and log(1 - x)
EPSILON = 1e-12               # PyTorch's floor of x (1 - x) in the gradient


def clamped_log(v: Tensor) -> Tensor:
    """max(log v, -100) as Tensor ops, with a finite gradient (0) at v = 0: the log is taken of 1 there."""
    positive = v > 0
    return where(positive, where(positive, v, 1.0).log().clamp(min=LOG_FLOOR), LOG_FLOOR)


class BinaryCrossEntropy(Function):
    """The loss of each probability x against its target t (same shape, same dtype)."""

    def forward(ctx, x, t):
        ctx.save_for_backward(x, t)
        xp = ctx.xp
        # log(0) = -inf, clamped at once; on a GPU an x outside [0, 1] gives nan here before the check
        # made by binary_cross_entropy raises (deferred_checks.py)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_x = xp.maximum(xp.log(x.data), LOG_FLOOR)
            log_rest = xp.maximum(xp.log(1 - x.data), LOG_FLOOR)
        return -(t.data * log_x + (1 - t.data) * log_rest)

    def backward(ctx, grad):
        x, t = ctx.saved_tensors
        grad_x = grad_t = None
        if ctx.needs_input_grad[0]:
            grad_x = grad * (x - t) / (x * (1 - x)).clamp(min=EPSILON)
        if ctx.needs_input_grad[1]:              # the loss is linear in t
            grad_t = grad * (clamped_log(1 - x) - clamped_log(x))
        return grad_x, grad_t
