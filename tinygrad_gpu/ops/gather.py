"""Gather and scatter: read or write a tensor's elements at the positions an index tensor names.

For dim 0 of a 3-d tensor, PyTorch's rule reads ``out[i][j][k] = x[index[i][j][k]][j][k]``: each
element of ``index`` stands at its own coordinates and replaces the one along ``dim`` with its
value (alike for the other dims). ``gather`` reads there; ``scatter`` writes ``src`` there (into a
copy), ``scatter_add`` adds and ``scatter_reduce`` reduces. ``index`` has as many dimensions as
the tensor and is no larger than it along the other dims (nor larger than ``src`` anywhere). The
two directions are each other's backward: the gradient of a gather is a scatter-add of the
incoming gradient, that of a scatter-add a gather.

``masked_select`` and ``nonzero`` close the file: their result's size depends on the values, so
on a GPU they must wait for it (a host sync that no implementation can avoid).
"""
from __future__ import annotations

import numpy as np

from .. import deferred_checks, dtypes
from .. import device as devices
from ..tensor import Function, Tensor
from .elementwise import check_broadcast, where
from .movement import cat, normalize_dim


# ----------------------------------------------------------------------------- shared helpers
def _positions(xp, index, dim: int) -> tuple:
    """The integer-array index (one array per dimension) that reaches the place each element of `index`
    names: its value along `dim`, its own coordinates along every other dimension."""
    def coordinate(d, n):
        return xp.arange(n).reshape([n if e == d else 1 for e in range(index.ndim)])
    return tuple(index if d == dim else coordinate(d, n) for d, n in enumerate(index.shape))


def _corner(array, shape):
    """The leading block of `shape` of a larger array (or tensor): the part of `src` that an index reaches."""
    if array.shape == tuple(shape):
        return array
    return array[tuple(slice(0, n) for n in shape)]


def _zeros(shape, like: Tensor) -> Tensor:
    """Zeros of `shape` with like's dtype, on like's device."""
    with devices.use(like.device):
        return Tensor._wrap(devices.array_module(like.device).zeros(shape, dtype=like.dtype), like.device)


def _pad_to(t: Tensor, shape) -> Tensor:
    """`t` in the leading corner of zeros of `shape`: the elements of `src` that no index reaches get
    a zero gradient."""
    for d, (have, want) in enumerate(zip(t.shape, shape)):
        if have < want:
            t = cat([t, _zeros(t.shape[:d] + (want - have,) + t.shape[d + 1:], t)], d)
    return t


def _zeros_at(t: Tensor, index: Tensor, dim: int) -> Tensor:
    """A copy of `t` with zeros written at the places `index` names (what a scatter overwrote)."""
    return Scatter.apply(t, index, _zeros(index.shape, t), dim=dim)


# ----------------------------------------------------------------------------- gather
class Gather(Function):
    """x's elements at the places index names. gather() checks the index first; ops that made the indices
    themselves (sort, topk, max(dim), cummax) call Gather.apply and skip those checks (on a GPU they
    cost a pass over the index and a copy)."""

    def forward(ctx, x, index, dim):
        ctx.save_for_backward(index)
        ctx.input_shape, ctx.dim = x.shape, dim
        return x.data[_positions(ctx.xp, index.data, dim)]

    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        # Each gathered element sends its gradient back to where it was read; an element read twice
        # gets both (hence an add, not a write).
        into = _zeros(ctx.input_shape, grad)
        return ScatterAdd.apply(into, index, grad, dim=ctx.dim), None


# ----------------------------------------------------------------------------- scatter family
class Scatter(Function):
    """A copy of x with src written at the places index names. Where two indices name one place the
    result is undefined (here: one of them wins), as in PyTorch."""

    def forward(ctx, x, index, src, dim):
        ctx.save_for_backward(index)
        ctx.dim, ctx.src_shape = dim, src.shape
        out = x.data.copy()
        out[_positions(ctx.xp, index.data, dim)] = _corner(src.data, index.shape)
        return out

    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        grad_x = _zeros_at(grad, index, ctx.dim) if ctx.needs_input_grad[0] else None    # overwritten: no effect
        grad_src = _pad_to(Gather.apply(grad, index, dim=ctx.dim), ctx.src_shape) if ctx.needs_input_grad[2] else None
        return grad_x, None, grad_src


class ScatterAdd(Function):
    """A copy of x with src added at the places index names; repeated places add up (add.at accumulates
    where a plain assignment would keep only the last write)."""

    def forward(ctx, x, index, src, dim):
        ctx.save_for_backward(index)
        ctx.dim, ctx.src_shape = dim, src.shape
        out = x.data.copy()
        ctx.xp.add.at(out, _positions(ctx.xp, index.data, dim), _corner(src.data, index.shape))
        return out

    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        grad_src = _pad_to(Gather.apply(grad, index, dim=ctx.dim), ctx.src_shape) if ctx.needs_input_grad[2] else None
        return grad if ctx.needs_input_grad[0] else None, None, grad_src


def _identity(reduce: str, dtype):
    """The value that leaves a reduction unchanged: where include_self=False, x's own value is replaced by it."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtypes.is_floating(dtype):
        return -np.inf if reduce == "amax" else np.inf
    if dtype.kind == "b":
        return reduce == "amin"
    info = np.iinfo(dtype)
    return int(info.min) if reduce == "amax" else int(info.max)


def _multiply_at(xp, out, positions, values, dim: int) -> None:
    """out[positions] *= values, with repeated positions all multiplying in. CuPy has no multiply.at (only
    add, subtract, maximum, minimum and bitwise ufuncs offer .at), so: one slice of the index along `dim`
    at a time. Within a slice every element keeps its own coordinates along the other dims, so no two
    name the same place, and a read-multiply-write is safe. One path for every device."""
    shape = positions[dim].shape
    full = [xp.broadcast_to(p, shape) for p in positions]
    for j in range(shape[dim]):
        along = (slice(None),) * dim + (j,)
        place = tuple(p[along] for p in full)
        out[place] = out[place] * values[along]


class ScatterReduce(Function):
    """A copy of x where each place that index names holds the reduction (sum, prod, mean, amax, amin) of
    the src values sent there, and of x's own value unless include_self=False."""

    saves_output = True

    def forward(ctx, x, index, src, dim, reduce, include_self):
        xp = ctx.xp
        ctx.save_for_backward(x, index, src)
        ctx.dim, ctx.reduce, ctx.include_self = dim, reduce, include_self
        positions, values = _positions(xp, index.data, dim), _corner(src.data, index.shape)
        out = x.data.copy()
        if not include_self:
            out[positions] = _identity(reduce, out.dtype)
        if reduce in ("sum", "mean"):
            xp.add.at(out, positions, values)
        elif reduce == "amax":
            xp.maximum.at(out, positions, values)
        elif reduce == "amin":
            xp.minimum.at(out, positions, values)
        else:
            _multiply_at(xp, out, positions, values, dim)
        if reduce == "mean":
            counts = (xp.ones if include_self else xp.zeros)(x.shape, dtype=out.dtype)
            xp.add.at(counts, positions, xp.ones(index.shape, dtype=out.dtype))
            ctx.counts = xp.maximum(counts, 1)       # a place nothing was sent to keeps x's value (or 0)
            # integer means round down, as PyTorch's do
            out = out / ctx.counts if dtypes.is_floating(out.dtype) else out // ctx.counts
        return out

    def backward(ctx, grad):
        x, index, src = ctx.saved_tensors
        dim, reduce = ctx.dim, ctx.reduce
        reached = _corner(src, index.shape)

        def gathered(t):
            return Gather.apply(t, index, dim=dim)

        if reduce == "sum":
            grad_x, grad_src = grad, gathered(grad)
        elif reduce == "mean":
            share = grad / Tensor._wrap(ctx.counts, ctx.device)
            grad_x, grad_src = share, gathered(share)
        elif reduce == "prod":
            # d(product)/d(factor) is the product of the other factors at its place: result / factor for
            # a nonzero factor (0 when another factor is 0, as it should be); for a 0, see _lone_zero_products.
            result, lone = ctx.output, _lone_zero_products(x, index, reached, dim, ctx.include_self)
            grad_x = grad * where(x == 0, lone, result / _zeros_as_ones(x))
            grad_src = gathered(grad) * where(reached == 0, gathered(lone), gathered(result) / _zeros_as_ones(reached))
        else:
            # amax/amin: the gradient goes to every value equal to the result, split evenly among ties.
            result = ctx.output
            x_is_result = (x == result).to(dtype=grad.dtype)
            if not ctx.include_self:       # x's own value took no part where src was sent
                x_is_result = _zeros_at(x_is_result, index, dim)
            src_is_result = (reached == gathered(result)).to(dtype=grad.dtype)
            share = grad / ScatterAdd.apply(x_is_result, index, src_is_result, dim=dim)
            grad_x, grad_src = x_is_result * share, src_is_result * gathered(share)
        if not ctx.include_self:
            grad_x = _zeros_at(grad_x, index, dim)
        return (grad_x if ctx.needs_input_grad[0] else None, None,
                _pad_to(grad_src, src.shape) if ctx.needs_input_grad[2] else None)


def _zeros_as_ones(t: Tensor) -> Tensor:
    """t with 1 for each 0: a divisor that is never 0, or a factor that leaves a product unchanged."""
    return t.masked_fill(t == 0, 1)


def _lone_zero_products(x, index, reached, dim, include_self) -> Tensor:
    """Per place of a scatter_reduce prod: the product of its other factors where exactly one factor is 0
    (that 0's gradient), else 0 (as in PyTorch: with two zeros every factor's gradient is 0). Counting the
    zeros keeps the gradient free of 0 / 0."""
    def is_zero(t):
        return (t == 0).to(dtype=t.dtype)
    x_zeros = is_zero(x) if include_self else _zeros_at(is_zero(x), index, dim)    # x's own factor left out
    zeros = ScatterAdd.apply(x_zeros, index, is_zero(reached), dim=dim)
    nonzero_product = ScatterReduce.apply(_zeros_as_ones(x), index, _zeros_as_ones(reached), dim=dim,
                                          reduce="prod", include_self=include_self)
    return nonzero_product * (zeros == 1).to(dtype=x.dtype)


# ----------------------------------------------------------------------------- checks and entry points
def _checked_index(op: str, x: Tensor, dim, index, src=None):
    """Check index (and src) against x as PyTorch does; returns (dim, index): dim non-negative, index as
    int64 with its values in range (_in_range). PyTorch takes an index of any integer dtype."""
    if not isinstance(index, Tensor):
        raise TypeError(f"{op}(): index must be a Tensor, got {type(index).__name__}")
    if dtypes.category(index.dtype) != 1:
        raise RuntimeError(f"{op}(): Expected an integer dtype for index, got {index.dtype}; convert it with .long()")
    ndim = max(x.ndim, 1)        # PyTorch reads a 0-d tensor as one of shape (1,) here
    if max(index.ndim, 1) != ndim:
        raise RuntimeError(f"{op}(): index must have as many dimensions as the tensor: index has shape "
                           f"{index.shape}, the tensor {x.shape}")
    d = normalize_dim(f"{op}()", dim, ndim)
    x_shape, index_shape = x.shape or (1,), index.shape or (1,)
    if any(i > n for e, (i, n) in enumerate(zip(index_shape, x_shape)) if e != d):
        raise RuntimeError(f"{op}(): index of shape {index.shape} is larger than the tensor's {x.shape} along a "
                           f"dimension other than dim {d}")
    if src is not None:
        if max(src.ndim, 1) != ndim:
            raise RuntimeError(f"{op}(): src must have as many dimensions as the index: src has shape {src.shape}, "
                               f"index {index.shape}")
        if any(i > n for i, n in zip(index_shape, src.shape or (1,))):
            raise RuntimeError(f"{op}(): index of shape {index.shape} is larger than src's {src.shape}")
        if src.dtype != x.dtype:
            raise RuntimeError(f"{op}(): Expected self.dtype to be equal to src.dtype, got {x.dtype} and "
                               f"{src.dtype}; convert one with .to()")
    return d, _in_range(op, index.long(), d, x_shape[d])


def _in_range(op: str, index: Tensor, d: int, size: int) -> Tensor:
    """index, its values checked to lie in [0, size): unlike x[i], a negative one does not count from the end.

    On cpu and emu a bad value raises at once. On a GPU the comparison runs there and raises at the next
    read (deferred_checks.py); meanwhile the returned index is wrapped into range, so that the op stays
    inside its arrays and computes wrong numbers, never a bad memory access.
    """
    if index.numel() == 0:
        return index
    if size == 0:
        raise RuntimeError(f"{op}(): index out of bounds for dimension {d} with size 0")
    data, bounds = index.data, f"out of bounds for dimension {d} with size {size}"
    with devices.use(index.device):
        bad = (data < 0) | (data >= size)
        deferred_checks.check(index.device, bad, RuntimeError, f"{op}(): an index is {bounds}",
                              first_bad=lambda: f"{op}(): index {data[bad][0]} is {bounds}")
        if devices.is_cuda(index.device):
            return Tensor._wrap(data % size, index.device)
    return index


def _one_dimensional(*tensors):
    """Each 0-d tensor as shape (1,), the way PyTorch reads it in gather and scatter."""
    return [t.reshape(1) if t.ndim == 0 else t for t in tensors]


def gather(x: Tensor, dim, index: Tensor) -> Tensor:
    d, index = _checked_index("gather", x, dim, index)
    shape = index.shape
    x, index = _one_dimensional(x, index)
    return Gather.apply(x, index, dim=d).reshape(shape)


def _scatter(op: str, function, x: Tensor, dim, index: Tensor, src: Tensor, **options) -> Tensor:
    d, index = _checked_index(op, x, dim, index, src)
    shape = x.shape
    x, index, src = _one_dimensional(x, index, src)
    return function.apply(x, index, src, dim=d, **options).reshape(shape)


def scatter(x: Tensor, dim, index: Tensor, src=None, value=None) -> Tensor:
    """x.scatter(dim, index, src) writes a tensor's values; x.scatter(dim, index, 2.0) (or value=2.0) a number."""
    if (src is None) == (value is None):
        raise TypeError("scatter(): give exactly one of src (a tensor or a number) and value (a number)")
    if not isinstance(src, Tensor):
        fill = value if src is None else src
        if not isinstance(fill, (int, float, bool, np.number, np.bool_)):
            raise TypeError(f"scatter(): src must be a Tensor or a number, got {type(fill).__name__}")
        shape = index.shape if isinstance(index, Tensor) else ()
        src = x._scalar_like(fill).to(dtype=x.dtype).expand(shape)
    return _scatter("scatter", Scatter, x, dim, index, src)


def scatter_add(x: Tensor, dim, index: Tensor, src: Tensor) -> Tensor:
    return _scatter("scatter_add", ScatterAdd, x, dim, index, src)


REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def scatter_reduce(x: Tensor, dim, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:
    if reduce not in REDUCTIONS:
        raise RuntimeError(f"scatter_reduce(): reduce must be one of {', '.join(REDUCTIONS)}, got {reduce!r}")
    if reduce == "mean":
        dtypes.reject_bool("scatter_reduce(reduce='mean')", x.dtype)
    return _scatter("scatter_reduce", ScatterReduce, x, dim, index, src, reduce=reduce,
                    include_self=bool(include_self))


# ----------------------------------------------------------------------------- data-dependent sizes
def masked_select(x: Tensor, mask: Tensor) -> Tensor:
    """The elements of x where mask is True, as a 1-d tensor; mask and x broadcast together. The
    gradient flows back through the indexing it is made of."""
    if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool_:
        found = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise RuntimeError(f"masked_select(): expected a bool tensor for mask, got {found}")
    check_broadcast("masked_select", x.shape, mask.shape)
    shape = np.broadcast_shapes(x.shape, mask.shape)
    return x.expand(shape).reshape(-1)[mask.expand(shape).reshape(-1)]


def nonzero(x: Tensor, as_tuple: bool = False):
    """The coordinates of the non-zero elements, in row-major order: an int64 tensor of shape (n, x.ndim),
    or with as_tuple=True one 1-d tensor per dimension (a 0-d x counts as shape (1,) there, as in PyTorch)."""
    xp = devices.array_module(x.device)
    with devices.use(x.device):
        if as_tuple:
            found = xp.nonzero(x.data.reshape(1) if x.ndim == 0 else x.data)
            return tuple(Tensor._wrap(a.astype(np.int64, copy=False), x.device) for a in found)
        return Tensor._wrap(xp.argwhere(x.data).astype(np.int64, copy=False), x.device)
