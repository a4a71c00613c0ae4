"""Losses that compare input and target element by element, then reduce: l1_loss, mse_loss, smooth_l1_loss,
huber_loss and kl_div (reached as ``nn.functional.<name>``).

    d = input - target, z = |d|
    l1_loss         z
    mse_loss        d^2
    smooth_l1_loss  d^2 / (2 beta) where z < beta, else z - beta / 2       (quadratic near 0, then linear)
    huber_loss      d^2 / 2 where z < delta, else delta (z - delta / 2)    (= delta * smooth_l1 with beta = delta)
    kl_div          target (log target - input): input holds log-probabilities, target probabilities
                    (or log-probabilities, with log_target=True)

reduction: "mean" (over every element), "sum" or "none"; kl_div adds "batchmean", the sum divided by the
batch size (dim 0), which is the mathematically proper KL divergence per sample.

All are compositions of Tensor ops, so gradients come from the ops (at the kinks they agree with PyTorch's
formulas: 0 at d = 0 for l1, the linear piece's slope at z = beta for smooth_l1 and huber).

As in PyTorch, input and target are first expanded to their common shape (a shape error comes before any
other, and a 0-d input no longer gives way to the other's dtype), then the reduction is checked
(ValueError), then the values: mse, smooth_l1 and huber need a floating dtype (NotImplementedError, as
PyTorch's kernels), l1 computes integers too (exact, with "sum" and "none"), kl_div refuses integers.
"""
from __future__ import annotations

import warnings

import numpy as np

from .. import dtypes
from ..amp import autocast_mode
from ..ops.elementwise import check_broadcast, where
from ..tensor import Tensor

REDUCTIONS = ("mean", "sum", "none")


def check_reduction(op: str, reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def apply_reduction(losses: Tensor, reduction: str) -> Tensor:
    return losses if reduction == "none" else losses.sum() if reduction == "sum" else losses.mean()


def broadcast_pair(op: str, input: Tensor, target: Tensor):
    """input and target expanded to their common shape, as PyTorch's pointwise losses do first
    (torch.broadcast_tensors): a shape error comes before any other, and a 0-d input no longer gives way to
    the other's dtype (a 0-d float32 input and a (2,) float16 target give a float32 loss)."""
    check_broadcast(op, input.shape, target.shape)
    shape = tuple(np.broadcast_shapes(input.shape, target.shape))
    return (input if input.shape == shape else input.expand(shape),
            target if target.shape == shape else target.expand(shape))


def _floating_difference(op: str, input: Tensor, target: Tensor) -> Tensor:
    """input - target in their promoted dtype, which must be floating (PyTorch's mse, smooth_l1 and huber
    kernels have no integer versions); input and target already expanded to one shape."""
    dtype = dtypes.promote(input.dtype, input.ndim, target.dtype, target.ndim)
    if not dtypes.is_floating(dtype):
        raise NotImplementedError(f"{op}: not implemented for {dtype} (as in PyTorch); convert input and target "
                                  "to floats first, e.g. x.float()")
    return input.to(dtype=dtype) - target.to(dtype=dtype)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """|input - target|, reduced (its gradient at 0 is 0, abs's). Integers work with reduction "sum" and
    "none" (a mean of integers has no dtype, as in PyTorch)."""
    input, target = broadcast_pair("l1_loss", input, target)
    check_reduction("l1_loss", reduction)
    # PyTorch's subtraction refuses bool (a RuntimeError), whatever the other operand
    dtypes.reject_bool("l1_loss", input.dtype, target.dtype, advice="convert first, e.g. x.float()", error=RuntimeError)
    input, target = autocast_mode.float32(input, target)
    return apply_reduction((input - target).abs(), reduction)


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """(input - target)^2, reduced. Floating point only, as PyTorch's kernel: the promoted dtype of the two
    (float32 for float16 with bfloat16, the float for a float with an integer or bool) must be a float."""
    input, target = broadcast_pair("mse_loss", input, target)
    check_reduction("mse_loss", reduction)
    input, target = autocast_mode.float32(input, target)
    diff = _floating_difference("mse_loss", input, target)
    return apply_reduction(diff * diff, reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0) -> Tensor:
    """|d| - beta / 2 for |d| >= beta, d^2 / (2 beta) below: L1 with the kink at 0 rounded off by a parabola
    (Fast R-CNN's box loss). Its slope is d / beta inside, sign(d) outside: continuous at |d| = beta.
    beta = 0 is plain l1_loss (integers allowed there, as in PyTorch); beta < 0 is an error.
    (size_average and reduce are PyTorch's deprecated arguments: leave them None.)"""
    _no_legacy("smooth_l1_loss", size_average, reduce)
    if beta == 0.0:
        return l1_loss(input, target, reduction)
    input, target = broadcast_pair("smooth_l1_loss", input, target)
    check_reduction("smooth_l1_loss", reduction)
    if beta < 0:
        raise RuntimeError(f"smooth_l1_loss: beta must be >= 0 (it is where the parabola meets the line), got {beta}")
    input, target = autocast_mode.float32(input, target)
    z = _floating_difference("smooth_l1_loss", input, target).abs()
    return apply_reduction(where(z < beta, 0.5 * z * z / beta, z - 0.5 * beta), reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Tensor = None) -> Tensor:
    """d^2 / 2 for |d| < delta, delta (|d| - delta / 2) beyond: quadratic for small errors, linear for large
    ones, so outliers pull with a force of at most delta. delta must be > 0. weight (broadcastable to the
    loss) scales each element's loss before the reduction.

    Unlike the other losses here, PyTorch's huber_loss gives the loss in input's dtype: computed in the
    promoted dtype of input and target (expanded to one shape), then converted (so an integer or bool input
    with a float target is an error: the float loss cannot be stored in it)."""
    input_dtype = input.dtype
    input, target = broadcast_pair("huber_loss", input, target)
    check_reduction("huber_loss", reduction)
    if not delta > 0:
        raise RuntimeError(f"huber_loss: delta must be > 0 (where the parabola meets the line), got {delta}")
    input, target = autocast_mode.float32(input, target)
    dtype = dtypes.promote(input.dtype, input.ndim, target.dtype, target.ndim)
    if dtypes.category(dtype) > dtypes.category(input_dtype):
        raise RuntimeError(f"huber_loss: the loss is computed in {dtype} and given in input's dtype, which cannot "
                           f"hold it ({input_dtype}); convert input to a float first, e.g. x.float()")
    z = _floating_difference("huber_loss", input, target).abs()
    losses = where(z < delta, 0.5 * z * z, delta * (z - 0.5 * delta)).to(dtype=input_dtype)
    if weight is not None:
        check_broadcast("huber_loss", losses.shape, weight.shape)
        losses = losses * weight
    return apply_reduction(losses, reduction)


def _xlogx(t: Tensor) -> Tensor:
    """t log t, with 0 log 0 = 0 (PyTorch's xlogy(t, t)). The log is taken of 1 where t = 0, so that no
    inf reaches a gradient there (0 * log 0 would be 0 * -inf = nan in the backward)."""
    zero = t == 0
    return where(zero, 0.0, t * where(zero, 1.0, t).log())


def kl_div(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """The Kullback-Leibler divergence of input's distribution from target's, elementwise:
    target (log target - input), input being log-probabilities (log_softmax's output) and target
    probabilities; with log_target, target holds log-probabilities too: exp(target) (target - input).

    reduction "batchmean" divides the sum by the batch size (dim 0 of input; a 0-d input is not divided):
    the divergence per sample. "mean" divides by the number of elements (PyTorch warns that this is not the
    divergence). input and target broadcast; integers are refused, as by PyTorch."""
    _no_legacy("kl_div", size_average, reduce)
    if reduction not in REDUCTIONS + ("batchmean",):
        raise ValueError(f"kl_div: reduction must be 'batchmean', 'mean', 'sum' or 'none', got {reduction!r}")
    if reduction == "mean":
        warnings.warn("kl_div: reduction='mean' divides the total by the number of elements, not by the batch "
                      "size; reduction='batchmean' gives the KL divergence per sample (PyTorch's warning too)")
    if not (input.is_floating_point() and target.is_floating_point()):
        raise RuntimeError(f"kl_div: integer inputs are not supported (got {input.dtype} and {target.dtype}); "
                           "input holds log-probabilities and target probabilities: convert them to floats")
    check_broadcast("kl_div", input.shape, target.shape)
    input, target = autocast_mode.float32(input, target)
    if log_target:
        losses = target.exp() * (target - input)
    else:
        losses = _xlogx(target) - target * input
    if reduction == "batchmean":
        total = losses.sum()
        return total / input.shape[0] if input.ndim else total
    return apply_reduction(losses, reduction)


def _no_legacy(op: str, size_average, reduce) -> None:
    if size_average is not None or reduce is not None:
        raise NotImplementedError(f"{op}: size_average and reduce are deprecated in PyTorch and not supported "
                                  "here; use reduction='mean', 'sum' or 'none'")
