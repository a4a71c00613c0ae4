"""Reductions (sum, prod, mean, var, max, min, argmax, any, all, logsumexp) and softmax / log_softmax.

A reduction's backward spreads the output gradient back over the reduced dimensions:
reshape it to the "keepdim" shape, then broadcast to the input's shape.
"""
from __future__ import annotations

import collections
import math

import numpy as np

from .. import device as devices
from .. import dtypes
from ..tensor import Function, Tensor, is_grad_enabled
from . import movement
from .gather import Gather

# What x.max(dim) returns, as in PyTorch: a pair with .values and .indices. The other ops that
# answer with values and their positions (sort, topk, cummax, cummin) return it too.
ValuesIndices = collections.namedtuple("ValuesIndices", ["values", "indices"])


def normalize_dims(op: str, dim, ndim: int) -> tuple:
    """dim=None -> every dimension; ints may be negative; a tuple may name several.

    An empty tuple or list also means every dimension: PyTorch's rule (x.sum(dim=()) is x.sum()).
    """
    dims = (dim,) if isinstance(dim, (int, np.integer)) else None if dim is None else tuple(dim)
    if not dims:
        return tuple(range(ndim))
    result = [movement.normalize_dim(op, d, max(ndim, 1)) for d in dims]     # a 0-d tensor takes dim 0 or -1
    if len(set(result)) != len(result):
        raise RuntimeError(f"{op}: dim {dim} names a dimension twice")
    return tuple(sorted(result)) if ndim else ()


def keepdim_shape(shape: tuple, dims: tuple) -> tuple:
    return tuple(1 if i in dims else n for i, n in enumerate(shape))


def check_nonempty(op: str, shape: tuple, dims: tuple, all_dims: bool) -> None:
    """max, min and their args pick an element, so each reduced dim needs one; the others may be empty (the
    result is then empty too). PyTorch's errors: a named dim of size 0 is an IndexError, and a reduction over
    every dim of an empty tensor asks for a dim (an IndexError from argmax and argmin, a RuntimeError from the
    others)."""
    if all_dims and math.prod(shape) == 0:
        error = IndexError if op.startswith("arg") else RuntimeError
        raise error(f"{op}(): Expected reduction dim to be specified for input.numel() == 0 (shape {shape}); "
                    "name the dim to reduce")
    for d in dims:
        if shape[d] == 0:
            raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size (shape {shape})")


def _spread(grad: Tensor, input_shape: tuple, dims: tuple) -> Tensor:
    """The gradient of a reduction, broadcast back over the reduced dims."""
    return grad.reshape(keepdim_shape(input_shape, dims)).expand(input_shape)


# ----------------------------------------------------------------------------- sum and mean
class Sum(Function):
    def forward(ctx, x, dims, keepdim):
        ctx.input_shape, ctx.dims = x.shape, dims
        if dtypes.is_half(x.dtype):       # 16-bit floats add up in float32, then round once
            return ctx.xp.sum(x.data, axis=dims, keepdims=keepdim, dtype=dtypes.float32).astype(x.dtype)
        return ctx.xp.sum(x.data, axis=dims, keepdims=keepdim, dtype=x.dtype)    # (NumPy widens int32, bool)

    def backward(ctx, grad):
        return _spread(grad, ctx.input_shape, ctx.dims)


def check_differentiable_dtype(op: str, x: Tensor, dtype) -> None:
    """sum, prod, cumsum and cumprod with dtype=: an integer or bool result of an input that requires grad is
    PyTorch's RuntimeError (it could carry no gradient), not a silent cut in the graph."""
    if x.requires_grad and is_grad_enabled() and not dtypes.is_floating(dtype):
        raise RuntimeError(f"{op}: dtype={np.dtype(dtype)} for an input that requires grad: autograd does not "
                           "support that dtype; reduce x.detach(), or pick a floating dtype")


def sum(x: Tensor, dim=None, keepdim=False, dtype=None) -> Tensor:
    dims = normalize_dims("sum", dim, x.ndim)          # the dims are checked first, as in PyTorch
    if dtype is not None:
        check_differentiable_dtype("sum", x, dtype)
        x = x.to(dtype=dtype)
    elif x.dtype.kind in "bi" and x.dtype.itemsize < 8:
        x = x.long()                     # PyTorch sums bool and small ints as int64
    return Sum.apply(x, dims=dims, keepdim=keepdim)


class Prod(Function):
    def forward(ctx, x, dims, keepdim):
        ctx.save_for_backward(x)
        ctx.dims = dims
        return ctx.xp.prod(x.data, axis=dims, keepdims=keepdim, dtype=x.dtype)

    def backward(ctx, grad):
        # d(prod)/dx_k is the product of all the other elements. Dividing the product by x_k would fail
        # where x_k is 0, so multiply the products before and after k instead.
        (x,) = ctx.saved_tensors
        if x.numel() == 0 or x.ndim == 0:        # nothing to differentiate, or the product is x itself
            return _spread(grad, x.shape, ctx.dims)
        several = len(ctx.dims) > 1              # dim=None on a tensor with 2+ dims: one long row
        row, d = (x.reshape(-1), 0) if several else (x, ctx.dims[0])
        return _spread(grad, x.shape, ctx.dims) * _products_of_the_others(row, d).reshape(x.shape)


def _products_of_the_others(x: Tensor, d: int) -> Tensor:
    """For each element along dim d, the product of all the other elements there (exact with zeros)."""
    def exclusive_cumprod(v):                    # out_k = v_0 * ... * v_(k-1), out_0 = 1
        ones = Tensor._wrap(devices.array_module(v.device).ones(keepdim_shape(v.shape, (d,)), dtype=v.dtype),
                            v.device)
        return movement.cat([ones, v[(slice(None),) * d + (slice(None, -1),)]], d).cumprod(d)
    return exclusive_cumprod(x) * exclusive_cumprod(x.flip(d)).flip(d)


def prod(x: Tensor, dim=None, keepdim=False, dtype=None) -> Tensor:
    """The product of all elements, or along one dim (PyTorch's prod takes a single int)."""
    if dim is not None:
        dim = movement.normalize_dim("prod", dim, max(x.ndim, 1))     # one int: normalize_dims takes tuples too
    if dtype is not None:
        check_differentiable_dtype("prod", x, dtype)
        x = x.to(dtype=dtype)
    elif not x.is_floating_point():
        x = x.long()                     # PyTorch multiplies bool and integers as int64
    dims = normalize_dims("prod", dim, x.ndim)
    return Prod.apply(x, dims=dims, keepdim=keepdim)


def mean(x: Tensor, dim=None, keepdim=False, dtype=None) -> Tensor:
    """dtype: x is converted to it first, as PyTorch does (mean(dtype=tg.float32) of an integer tensor)."""
    if dtype is not None:
        x = x.to(dtype=dtype)
    if not x.is_floating_point():
        raise RuntimeError(f"mean(): could not infer the output dtype: the input is {x.dtype}, and a mean needs a "
                           "floating-point tensor; convert it with .float(), or pass dtype=tg.float32")
    dims = normalize_dims("mean", dim, x.ndim)
    count = int(np.prod([x.shape[d] for d in dims]))
    total = sum(x, dims, keepdim)           # the op, not the method: autocast runs mean in x's dtype
    return total / count if count else total * float("nan")


def correction_of(unbiased, correction) -> int:
    """var/std take PyTorch's `correction` (default 1, Bessel's) or the older `unbiased` flag."""
    if correction is not None:
        return correction
    return 0 if unbiased is False else 1


def var(x: Tensor, dim=None, keepdim=False, correction=1) -> Tensor:
    if not x.is_floating_point():
        raise RuntimeError(f"std and var only support floating-point tensors, got {x.dtype}; convert first, "
                           "e.g. x.float()")
    dims = normalize_dims("var", dim, x.ndim)
    count = int(np.prod([x.shape[d] for d in dims]))
    centered = x - mean(x, dims, keepdim=True)
    with np.errstate(divide="ignore", invalid="ignore"):   # too few elements gives inf/nan, as in PyTorch
        return sum(centered * centered, dims, keepdim) / max(count - correction, 0)


class SqrtOfVariance(Function):
    """sqrt for std: where the variance is 0 (constant values) the gradient is 0, as in PyTorch,
    instead of 0 * inf = nan from the plain square root's 1 / (2 sqrt(v))."""

    saves_output = True

    def forward(ctx, variance):
        return ctx.xp.sqrt(variance.data)

    def backward(ctx, grad):
        std = ctx.output
        return grad.masked_fill(std == 0, 0.0) / (2 * std.masked_fill(std == 0, 1.0))


def std(x: Tensor, dim=None, keepdim=False, correction=1) -> Tensor:
    return SqrtOfVariance.apply(var(x, dim, keepdim, correction))


# ----------------------------------------------------------------------------- max and min
class Amax(Function):
    """max (or min) over dims; ties share the gradient evenly (PyTorch's rule for amax and max())."""

    def forward(ctx, x, dims, keepdim, kind):
        ctx.save_for_backward(x)
        ctx.dims = dims
        out = (ctx.xp.max if kind == "max" else ctx.xp.min)(x.data, axis=dims, keepdims=True)
        ctx.hits = x.data == out
        return out if keepdim else out.reshape([n for i, n in enumerate(out.shape) if i not in dims])

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        hits = ctx.hits.astype(x.dtype)
        share = Tensor._wrap(hits / hits.sum(axis=ctx.dims, keepdims=True), x.device)
        return grad.reshape(keepdim_shape(x.shape, ctx.dims)) * share


def amax(x: Tensor, dim, keepdim, kind, op: str = None) -> Tensor:
    dims = normalize_dims(kind, dim, x.ndim)
    check_nonempty(op or "a" + kind, x.shape, dims, dim is None or dim == ())
    return Amax.apply(x, dims=dims, keepdim=keepdim, kind=kind)


def arg_extreme(x: Tensor, dim, keepdim, kind) -> Tensor:
    """argmax / argmin (the first index on ties); no gradient."""
    if x.dtype == dtypes.bool_:
        raise RuntimeError(f"{kind}(): does not support bool input (as in PyTorch); convert it first, e.g. x.long()")
    check_nonempty(kind, x.shape, () if dim is None else (movement.normalize_dim(kind, dim, max(x.ndim, 1)),)
                   if x.ndim else (), dim is None)
    xp = devices.array_module(x.device)
    if dim is None:
        index = getattr(xp, kind)(x.data)
        out = index.reshape((1,) * x.ndim) if keepdim else index.reshape(())
    elif x.ndim == 0:                      # a 0-d tensor accepts dim 0 or -1; its one element is index 0
        movement.normalize_dim(kind, dim, 1)
        out = xp.zeros((), dtype=np.int64)
    else:
        out = getattr(xp, kind)(x.data, axis=movement.normalize_dim(kind, dim, x.ndim), keepdims=keepdim)
    return Tensor._wrap(out.astype(np.int64, copy=False), x.device)


def along_one_dim(op: str, x: Tensor, dim, run):
    """run(x, d) for ops that work along one dim `d` (scans, sorts). A 0-d tensor accepts dim 0 or -1, as
    in PyTorch, and runs as a tensor of one element; the result is shaped back to 0-d."""
    d = movement.normalize_dim(op, dim, max(x.ndim, 1))
    if x.ndim:
        return run(x, d)
    out = run(x.reshape(1), 0)
    if isinstance(out, ValuesIndices):
        return ValuesIndices(*(t.reshape(()) for t in out))
    return out.reshape(())


def extreme(x: Tensor, dim, keepdim, kind):
    """x.max() -> a tensor; x.max(dim) -> (values, indices), the gradient going to the index."""
    if dim is None:
        return amax(x, None, False, kind, op=kind)
    d = movement.normalize_dim(kind, dim, max(x.ndim, 1))   # a 0-d tensor takes dim 0 or -1
    if x.ndim:
        check_nonempty(kind, x.shape, (d,), False)
    # argmax of a bool is PyTorch's error, max(dim) of one is not: the positions are found as 0s and 1s
    indices = arg_extreme(x if x.dtype != dtypes.bool_ else x.int(), d, True, "argmax" if kind == "max" else "argmin")
    if x.ndim == 0:                        # nothing to pick from: the value is the element itself
        return ValuesIndices(x, indices)
    values = Gather.apply(x, indices, dim=d)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return ValuesIndices(values, indices)


def any_or_all(x: Tensor, name: str, dim=None, keepdim=False) -> Tensor:
    """any / all over dim (None: every dim; an int or a tuple) as a bool tensor; no gradient."""
    out = getattr(devices.array_module(x.device), name)(x.data, axis=normalize_dims(name, dim, x.ndim),
                                                        keepdims=keepdim)
    return Tensor._wrap(out, x.device)


def logsumexp(x: Tensor, dim, keepdim=False) -> Tensor:
    """log(sum(exp(x))) without overflow: shift by the (constant) max first."""
    x = x._floating()
    dims = normalize_dims("logsumexp", dim, x.ndim)
    if any(x.shape[d] == 0 for d in dims):                 # a sum of no terms: log 0 = -inf, nothing to shift
        with np.errstate(divide="ignore"):
            return x.exp().sum(dims, keepdim=keepdim).log()
    shift = x.detach().amax(dims, keepdim=True)
    shift = shift.masked_fill(~shift.isfinite(), 0.0)      # all -inf (or inf) rows: no shift
    out = (x - shift).exp().sum(dims, keepdim=True).log() + shift
    return out if keepdim else out.squeeze(dims) if dims else out


# ----------------------------------------------------------------------------- softmax
def _shifted(xp, data, dim):
    """data minus each row's max along dim (a 0-d tensor is its own row), so that exp cannot overflow; computed
    in float32 for 16-bit floats. A row of nan, inf or -inf stays nan, as in PyTorch."""
    work = data.astype(dtypes.accumulator(data.dtype), copy=False)
    with np.errstate(invalid="ignore"):                  # inf - inf: nan, on purpose
        if not data.ndim:
            return work - work
        return work - work.max(axis=dim, keepdims=True, initial=-xp.inf) if data.size else work


def _softmax_array(xp, data, dim):
    """Computed in float32 for 16-bit floats, rounded once (as PyTorch's kernels do)."""
    e = xp.exp(_shifted(xp, data, dim))
    return (e / (e.sum(axis=dim, keepdims=True) if data.ndim else e)).astype(data.dtype, copy=False)


def softmax(x: Tensor, dim, dtype, op) -> Tensor:
    """softmax or log_softmax (op): dtype converts x first, as in PyTorch, which has no integer softmax."""
    normalize_dims(op.op_name(), dim, x.ndim)           # PyTorch checks the dim before the dtype
    x = x if dtype is None else x.to(dtype=dtype)
    dtypes.reject_non_floating(op.op_name(), x.dtype, advice="convert first, e.g. x.float(), or pass dtype=tg.float32")
    return op.apply(x._in_float32(), dim=dim)


class Softmax(Function):
    saves_output = True

    def forward(ctx, x, dim):
        (ctx.dim,) = normalize_dims("softmax", dim, x.ndim) or (0,)
        return _softmax_array(ctx.xp, x.data, ctx.dim)

    def backward(ctx, grad):
        y = ctx.output                     # dx = y * (g - sum(g * y))
        return y * (grad - (grad * y).sum(ctx.dim, keepdim=True))


class LogSoftmax(Function):
    saves_output = True

    def forward(ctx, x, dim):
        (ctx.dim,) = normalize_dims("log_softmax", dim, x.ndim) or (0,)
        xp, shifted = ctx.xp, _shifted(ctx.xp, x.data, ctx.dim)
        total = xp.exp(shifted).sum(axis=ctx.dim, keepdims=True) if x.ndim else xp.exp(shifted)
        return (shifted - xp.log(total)).astype(x.dtype, copy=False)

    def backward(ctx, grad):
        y = ctx.output                     # dx = g - softmax * sum(g)
        return grad - y.exp() * grad.sum(ctx.dim, keepdim=True)
