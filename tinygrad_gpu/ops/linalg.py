"""Matrix multiplication with PyTorch's rules: 1-D operands and broadcast batch dimensions."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..tensor import Function, Tensor


class MatMul(Function):
    """a @ b for a, b with at least 2 dimensions; leading (batch) dimensions broadcast."""

    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        if b.ndim == 2 and a.ndim > 2:
            # x @ W with x (..., k): one (rows, k) @ (k, n) product instead of a loop of small ones
            # over the batch, which is how the array libraries treat a stacked operand (about 2x faster
            # for a GPT's layers on the CPU)
            return (a.data.reshape(-1, a.shape[-1]) @ b.data).reshape(*a.shape[:-1], b.shape[-1])
        return a.data @ b.data

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = grad @ b.transpose(-1, -2) if ctx.needs_input_grad[0] else None
        grad_b = None
        if ctx.needs_input_grad[1]:
            if b.ndim == 2 and a.ndim > 2:
                # A shared weight (x @ W with x batched): fold the batch into the rows, one GEMM,
                # instead of a batch of products that would then be summed.
                grad_b = a.reshape(-1, a.shape[-1]).transpose(0, 1) @ grad.reshape(-1, grad.shape[-1])
            else:
                grad_b = a.transpose(-1, -2) @ grad
        return grad_a, grad_b


def matmul(a: Tensor, b: Tensor) -> Tensor:
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: both operands need at least 1 dimension, got shapes {a.shape} and {b.shape}; "
                         "use * to multiply by a scalar")
    inner_a = a.shape[-1]
    inner_b = b.shape[-2] if b.ndim > 1 else b.shape[0]
    if inner_a != inner_b:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not fit: the last dimension of the first "
                         f"({inner_a}) must equal the {'second-to-last' if b.ndim > 1 else 'only'} dimension "
                         f"of the second ({inner_b})")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: the batch dimensions of shapes {a.shape} and {b.shape} cannot be broadcast "
                         "together") from None
    dtype = dtypes.promote(a.dtype, a.ndim, b.dtype, b.ndim)
    a, b = a.to(dtype=dtype), b.to(dtype=dtype)
    # A vector becomes a matrix for the product, and its added dimension is removed after.
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    out = MatMul.apply(a2, b2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    if a.ndim == 1:
        out = out.squeeze(-2) if b.ndim > 1 else out.squeeze(-1)
    return out


class Linear(Function):
    """x @ weight.T (+ bias): x (..., in), weight (out, in) as PyTorch stores it, bias (out,).

    One op instead of a transpose, a matmul and an add, in each direction: all rows of x (every
    leading dimension) go through a single 2-D product. Its backward works on the arrays; when a
    graph of the backward is wanted, the engine differentiates the composition instead.
    """

    returns_spare_gradients = True

    @staticmethod
    def composition(x, weight, bias=None):
        out = x @ weight.transpose(0, 1)
        return out if bias is None else out + bias

    def forward(ctx, x, weight, bias=None):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        rows = x.data.reshape(-1, x.shape[-1])
        out = rows @ weight.data.T
        if bias is not None:
            out += bias.data
        return out.reshape(*x.shape[:-1], weight.shape[0])

    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        need_x, need_weight = ctx.needs_input_grad[:2]
        need_bias = ctx.has_bias and ctx.needs_input_grad[2]
        grad_rows = grad.data.reshape(-1, grad.shape[-1])
        grads = ((grad_rows @ weight.data).reshape(x.shape) if need_x else None,                    # dx = dy W
                 (grad_rows.T @ x.data.reshape(-1, x.shape[-1])) if need_weight else None,          # dW = dy^T x
                 *((grad_rows.sum(0) if need_bias else None,) if ctx.has_bias else ()))             # db = sum dy
        return tuple(None if g is None else Tensor._wrap(g, ctx.device) for g in grads)


def linear(x: Tensor, weight: Tensor, bias: Tensor = None) -> Tensor:
    """x @ weight.T + bias, with weight (out_features, in_features) as in PyTorch."""
    if weight.ndim != 2 or x.ndim == 0 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: input of shape {x.shape} does not fit weight of shape {weight.shape} "
                         f"(need input (..., {weight.shape[-1] if weight.ndim else '?'}) and weight (out, in))")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(f"linear: bias of shape {bias.shape} does not fit weight of shape {weight.shape} "
                         f"(need ({weight.shape[0]},))")
    if any(t is not None and t.dtype != x.dtype for t in (weight, bias)):     # mixed dtypes: promote as @ and + do
        return Linear.composition(x, weight, bias)
    return Linear.apply(x, weight) if bias is None else Linear.apply(x, weight, bias)
