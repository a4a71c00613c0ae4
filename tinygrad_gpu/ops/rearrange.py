"""Rearranging ops: flip, roll, repeat, repeat_interleave, unflatten, unfold, diag and diagonal.

Like the movement ops they do no arithmetic: every output element is a copy of one input
element. So every backward sends each gradient element back to where its value came from,
and where one input element was copied several times (repeat, overlapping unfold windows) the
gradients of its copies add up. Several ops come in inverse pairs, each the other's backward:
flip and flip, roll by s and roll by -s, unfold and fold, diagonal and embedding a diagonal.
repeat, repeat_interleave and unflatten are compositions of reshape, expand and indexing, so
their gradients come from those ops.
"""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from .. import dtypes
from ..tensor import Function, Tensor
from .movement import normalize_dim, shape_arg


def _dims(op: str, dims, ndim: int) -> tuple:
    """An int or a sequence of dims (x.flip(0), x.flip(0, 1), x.flip((0, 1))) as non-negative ints, in
    their order and with repeats kept (roll pairs each with a shift), where reduce.normalize_dims sorts
    them and reads () as every dim."""
    if isinstance(dims, (int, np.integer)):
        dims = (dims,)
    # A 0-d tensor accepts dim 0 and -1, as in PyTorch (and the op does nothing to it).
    return tuple(normalize_dim(op, d, max(ndim, 1)) for d in shape_arg(tuple(dims)))


# ----------------------------------------------------------------------------- flip
class Flip(Function):
    """Reverse the order of the elements along each of `dims`."""

    def forward(ctx, x, dims):
        ctx.dims = dims
        return ctx.xp.flip(x.data, axis=dims)

    def backward(ctx, grad):
        return Flip.apply(grad, dims=ctx.dims)        # reversing twice restores the order


def flip(x: Tensor, dims) -> Tensor:
    dims = _dims("flip", dims, x.ndim)
    if len(set(dims)) != len(dims):
        raise RuntimeError(f"flip: dims {dims} name a dimension more than once")
    if x.ndim == 0 or not dims:
        return x
    return Flip.apply(x, dims=dims)


# ----------------------------------------------------------------------------- roll
class Roll(Function):
    """Shift the elements along each dim by its shift, those pushed off the end coming back at the start."""

    def forward(ctx, x, shifts, dims):
        ctx.shifts, ctx.dims = shifts, dims
        return ctx.xp.roll(x.data, shifts, axis=dims)

    def backward(ctx, grad):
        return Roll.apply(grad, shifts=tuple(-s for s in ctx.shifts), dims=ctx.dims)    # roll back


def roll(x: Tensor, shifts, dims=None) -> Tensor:
    shifts = (shifts,) if isinstance(shifts, (int, np.integer)) else tuple(shifts)
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError(f"roll: without dims, shifts must be a single number, got {shifts}")
        # PyTorch rolls the flattened tensor and restores its shape
        return roll(x.flatten(), shifts, 0).reshape(x.shape)
    if x.ndim == 0:
        raise IndexError(f"roll: dims {dims} given for a 0-d tensor, which has no dimensions")
    dims = _dims("roll", dims, x.ndim)
    if len(shifts) != len(dims):
        raise RuntimeError(f"roll: shifts {shifts} and dims {dims} must have the same length")
    total = {}                          # rolling one dim twice rolls it by the sum of the shifts
    for s, d in zip(shifts, dims):
        total[d] = total.get(d, 0) + int(s)
    return Roll.apply(x, shifts=tuple(total.values()), dims=tuple(total))


# ----------------------------------------------------------------------------- repeat
def repeat(x: Tensor, sizes) -> Tensor:
    """x.repeat(r0, r1, ...): the tensor tiled r0 times along dim 0, r1 times along dim 1, ...
    (NumPy's tile). More sizes than dims put new leading dims in front.

    Written as reshape, expand, reshape: each dim n becomes a pair (1, n), the 1 stretches to r
    copies, and the pair (r, n) merges into r * n. The gradient is expand's: the copies' sum.
    """
    sizes = shape_arg(sizes)
    if len(sizes) < x.ndim:
        raise RuntimeError(f"repeat: got {len(sizes)} sizes {sizes} for a tensor of shape {x.shape}; "
                           f"give at least one per dimension ({x.ndim})")
    if any(r < 0 for r in sizes):
        raise RuntimeError(f"repeat: sizes {sizes} must not be negative")
    shape = (1,) * (len(sizes) - x.ndim) + x.shape
    pairs = [m for n in shape for m in (1, n)]
    copies = [m for r, n in zip(sizes, shape) for m in (r, n)]
    return x.reshape(pairs).expand(copies).reshape([r * n for r, n in zip(sizes, shape)])


def repeat_interleave(x: Tensor, repeats=None, dim=None) -> Tensor:
    """Each element repeated in place: [a, b].repeat_interleave(2) is [a, a, b, b].

    `repeats` is an int, or a 1-D integer tensor with a count per element (or a single count);
    dim=None works on the flattened tensor. tg.repeat_interleave(counts) alone gives the
    indices 0, 1, ... each repeated counts[i] times.
    """
    if repeats is None:
        if x.ndim != 1:
            raise RuntimeError(f"repeat_interleave: a tensor of counts alone must be 1-D, got shape {x.shape}")
        with devices.use(x.device):
            positions = Tensor._wrap(devices.array_module(x.device).arange(x.shape[0]), x.device)
        return repeat_interleave(positions, x)
    if dim is None:
        x, dim = x.flatten(), 0
    d = normalize_dim("repeat_interleave", dim, x.ndim)
    if isinstance(repeats, (int, np.integer)):
        if repeats < 0:
            raise RuntimeError(f"repeat_interleave: repeats must not be negative, got {repeats}")
        # a new dim after d holds the copies: (..., n, 1, ...) -> (..., n, repeats, ...) -> (..., n * repeats, ...)
        shape = x.shape
        copies = x.unsqueeze(d + 1).expand(shape[:d + 1] + (int(repeats),) + shape[d + 1:])
        return copies.reshape(shape[:d] + (shape[d] * int(repeats),) + shape[d + 1:])
    if not isinstance(repeats, Tensor):
        raise TypeError(f"repeat_interleave: repeats must be an int or an integer Tensor, got {type(repeats).__name__}")
    if repeats.ndim > 1 or dtypes.category(repeats.dtype) != 1:
        raise RuntimeError(f"repeat_interleave: repeats must be a 0-d or 1-D integer tensor, got shape "
                           f"{repeats.shape} and dtype {repeats.dtype}")
    if repeats.numel() not in (1, x.shape[d]):
        raise RuntimeError(f"repeat_interleave: {repeats.numel()} repeats for dim {dim} of size {x.shape[d]} "
                           f"(tensor shape {x.shape}); give one count per element, or a single count")
    # The output's size depends on the counts: read them on the host (a sync on a GPU, unavoidable).
    counts = repeats.numpy().reshape(-1)
    if (counts < 0).any():
        raise RuntimeError(f"repeat_interleave: repeats must not be negative, got {counts.tolist()}")
    index = np.repeat(np.arange(x.shape[d]), counts)      # the source of each output element
    return x[(slice(None),) * d + (index,)]                 # indexing's backward adds the copies' gradients


# ----------------------------------------------------------------------------- unflatten
def unflatten(x: Tensor, dim: int, sizes) -> Tensor:
    """Split dim into several: a (2, 12) tensor unflattened at dim 1 into (3, 4) becomes (2, 3, 4).
    One size may be -1 (whatever is left). Flatten's inverse, and like it a reshape."""
    normalize_dim("unflatten", dim, max(x.ndim, 1))       # the dim is checked first, as in PyTorch
    if x.ndim == 0:
        raise RuntimeError("unflatten: a 0-d tensor has no dim to unflatten")
    d = normalize_dim("unflatten", dim, x.ndim)
    sizes = tuple(int(n) for n in sizes)
    n = x.shape[d]
    if not sizes:
        raise RuntimeError("unflatten: sizes must not be empty")
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        raise RuntimeError(f"unflatten: invalid sizes {sizes} (at most one -1, no other negative sizes)")
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if known == 0 or n % known:
            raise RuntimeError(f"unflatten: sizes {sizes} cannot split dim {dim} of size {n} (tensor shape {x.shape})")
        sizes = tuple(n // known if s == -1 else s for s in sizes)
    elif known != n:
        raise RuntimeError(f"unflatten: sizes {sizes} multiply to {known}, not to the size {n} of dim {dim} "
                           f"(tensor shape {x.shape})")
    return x.reshape(x.shape[:d] + sizes + x.shape[d + 1:])


# ----------------------------------------------------------------------------- unfold and fold
class Unfold(Function):
    """x.unfold(dim, size, step): the windows of `size` elements along dim, starting every `step`.

    Dim becomes the number of windows and a new last dim runs through one window:
    out[..., w, ..., k] = x[..., w * step + k, ...]. Windows may overlap (step < size), so one
    input element can land in several places; the backward (Fold) adds their gradients.
    """

    def forward(ctx, x, dim, size, step):
        ctx.input_shape, ctx.dim, ctx.size, ctx.step = x.shape, dim, size, step
        xp = ctx.xp
        count = (x.shape[dim] - size) // step + 1
        positions = xp.arange(count)[:, None] * step + xp.arange(size)     # (window, place in window)
        windows = xp.take(x.data, positions, axis=dim)                      # dim -> (count, size)
        return xp.moveaxis(windows, dim + 1, -1)

    def backward(ctx, grad):
        return Fold.apply(grad, shape=ctx.input_shape, dim=ctx.dim, size=ctx.size, step=ctx.step)


class Fold(Function):
    """Unfold's backward: put every window's values back where they came from, adding where windows
    overlap. Place k of all windows is one strided slice of dim (k, k + step, k + 2 step, ...), so
    a loop over the `size` places adds whole slices (within one slice no position repeats)."""

    def forward(ctx, windows, shape, dim, size, step):
        ctx.dim, ctx.size, ctx.step = dim, size, step
        out = ctx.xp.zeros(shape, dtype=windows.dtype)
        count = windows.shape[dim]
        for k in range(size):
            place_k = slice(k, k + (count - 1) * step + 1, step)
            out[(slice(None),) * dim + (place_k,)] += windows.data[..., k]
        return out

    def backward(ctx, grad):
        return Unfold.apply(grad, dim=ctx.dim, size=ctx.size, step=ctx.step)


def unfold(x: Tensor, dimension: int, size: int, step: int) -> Tensor:
    if x.ndim == 0:                     # PyTorch: one element along dim 0 or -1, windows of it without that dim
        normalize_dim("unfold", dimension, 1)
        windows = unfold(x.reshape(1), 0, size, step)
        return windows.reshape(windows.shape[1:])
    d = normalize_dim("unfold", dimension, x.ndim)
    if step <= 0:
        raise RuntimeError(f"unfold: step must be positive, got {step}")
    if not 0 <= size <= x.shape[d]:
        raise RuntimeError(f"unfold: window size {size} does not fit dim {dimension} of size {x.shape[d]} "
                           f"(tensor shape {x.shape}); it must be between 0 and {x.shape[d]}")
    return Unfold.apply(x, dim=d, size=int(size), step=int(step))


# ----------------------------------------------------------------------------- diagonal
def _diagonal_positions(xp, length: int, offset: int):
    """Rows and columns of the `length` elements of a matrix's diagonal number `offset`
    (0 the main one, > 0 above it, < 0 below it)."""
    along = xp.arange(length)
    return along + max(-offset, 0), along + max(offset, 0)


class Diagonal(Function):
    """x.diagonal(offset, dim1, dim2): the elements x[..., i, ..., i + offset, ...] of dims dim1 and
    dim2, as a new last dim (the other dims keep their order in front)."""

    def forward(ctx, x, offset, dim1, dim2):
        ctx.input_shape, ctx.offset, ctx.dim1, ctx.dim2 = x.shape, offset, dim1, dim2
        return ctx.xp.diagonal(x.data, offset, dim1, dim2)

    def backward(ctx, grad):
        return EmbedDiagonal.apply(grad, shape=ctx.input_shape, offset=ctx.offset, dim1=ctx.dim1, dim2=ctx.dim2)


class EmbedDiagonal(Function):
    """zeros(shape) with `values` written on the diagonal that Diagonal reads: Diagonal's backward,
    and diag() of a vector."""

    def forward(ctx, values, shape, offset, dim1, dim2):
        ctx.offset, ctx.dim1, ctx.dim2 = offset, dim1, dim2
        xp = ctx.xp
        others = [n for i, n in enumerate(shape) if i not in (dim1, dim2)]
        out = xp.zeros(others + [shape[dim1], shape[dim2]], dtype=values.dtype)    # the two dims last
        rows, cols = _diagonal_positions(xp, values.shape[-1], offset)
        out[..., rows, cols] = values.data
        return xp.moveaxis(out, (-2, -1), (dim1, dim2))

    def backward(ctx, grad):
        return Diagonal.apply(grad, offset=ctx.offset, dim1=ctx.dim1, dim2=ctx.dim2)


def diagonal(x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    d1, d2 = normalize_dim("diagonal", dim1, max(x.ndim, 1)), normalize_dim("diagonal", dim2, max(x.ndim, 1))
    if d1 == d2:
        raise RuntimeError(f"diagonal: dim1 and dim2 must be different dims, got {dim1} and {dim2}")
    return Diagonal.apply(x, offset=int(offset), dim1=d1, dim2=d2)


def diag(x: Tensor, diagonal: int = 0) -> Tensor:
    """A vector -> the square matrix with it on diagonal number `diagonal`; a matrix -> that diagonal."""
    if x.ndim == 1:
        n = x.shape[0] + abs(diagonal)
        return EmbedDiagonal.apply(x, shape=(n, n), offset=int(diagonal), dim1=0, dim2=1)
    if x.ndim == 2:
        return Diagonal.apply(x, offset=int(diagonal), dim1=0, dim2=1)
    raise RuntimeError(f"diag: expected a 1-D or 2-D tensor, got shape {x.shape}; "
                       "for more dimensions use diagonal(offset, dim1, dim2)")
