"""Movement ops: they rearrange, select or combine elements without arithmetic.

reshape, permute, expand, indexing, cat, triangle masks and moving between devices.  Their
backward passes move the gradient back to where each element came from; many are written
as the opposite movement (the backward of a permute is the inverse permute, of an expand a
sum, of indexing an "add at index").
"""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from .. import deferred_checks, dtypes
from ..gradient_sums import SliceGradient, sum_to_shape
from ..tensor import Function, Tensor, is_grad_enabled


def shape_arg(shape) -> tuple:
    """Accept f(2, 3) as well as f((2, 3)) for a shape (reshape, permute, zeros, ...)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(n) for n in shape)


def normalize_dim(op: str, dim, ndim: int) -> int:
    """One dim as a non-negative int; negative dims count from the end (the one place every op checks a dim)."""
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise TypeError(f"{op}: dim must be a single int, got {dim!r}")
    if not -ndim <= dim < ndim:
        raise IndexError(f"{op}: dim {dim} is out of range for a tensor with {ndim} dimension(s)")
    return int(dim) % ndim


# ----------------------------------------------------------------------------- reshape
class Reshape(Function):
    def forward(ctx, x, shape):
        ctx.input_shape = x.shape
        return x.data.reshape(shape)

    def backward(ctx, grad):
        return grad.reshape(ctx.input_shape)


def reshape(x: Tensor, shape) -> Tensor:
    shape = shape_arg(shape)
    known = math.prod(n for n in shape if n != -1)
    if shape.count(-1) > 1 or any(n < -1 for n in shape):
        raise RuntimeError(f"reshape: invalid target shape {shape} (at most one -1, no other negative sizes)")
    if shape.count(-1) == 1:
        if known == 0 or x.numel() % known:
            raise RuntimeError(f"reshape: cannot reshape a tensor of shape {x.shape} ({x.numel()} elements) "
                             f"into {shape}")
        shape = tuple(x.numel() // known if n == -1 else n for n in shape)
    elif known != x.numel():
        raise RuntimeError(f"reshape: cannot reshape a tensor of shape {x.shape} ({x.numel()} elements) "
                         f"into {shape} ({known} elements)")
    if shape == x.shape:
        return x
    return Reshape.apply(x, shape=shape)


def flatten(x: Tensor, start_dim=0, end_dim=-1) -> Tensor:
    if x.ndim == 0:                     # its dims 0 and -1 name the one place a 0-d tensor has
        normalize_dim("flatten", start_dim, 1), normalize_dim("flatten", end_dim, 1)
        return x.reshape(1)
    start, end = normalize_dim("flatten", start_dim, x.ndim), normalize_dim("flatten", end_dim, x.ndim)
    if start > end:
        raise RuntimeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    return x.reshape(x.shape[:start] + (math.prod(x.shape[start:end + 1]),) + x.shape[end + 1:])


def squeeze(x: Tensor, dim=None) -> Tensor:
    if dim is None:
        dims = [i for i, n in enumerate(x.shape) if n == 1]
    else:
        dims = [normalize_dim("squeeze", d, max(x.ndim, 1)) for d in ((dim,) if isinstance(dim, int) else dim)]
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"squeeze: a dim appears more than once in {dim}")
    return x.reshape(tuple(n for i, n in enumerate(x.shape) if not (i in dims and n == 1)))


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    d = normalize_dim("unsqueeze", dim, x.ndim + 1)
    return x.reshape(x.shape[:d] + (1,) + x.shape[d:])


# ----------------------------------------------------------------------------- permute
class Permute(Function):
    def forward(ctx, x, dims):
        ctx.dims = dims
        return x.data.transpose(dims)

    def backward(ctx, grad):
        return grad.permute(tuple(np.argsort(ctx.dims).tolist()))


def permute(x: Tensor, dims) -> Tensor:
    dims = shape_arg(dims)
    # Range first: on a 2-d tensor (0, 3) would otherwise wrap around to (0, 1).
    in_range = all(-x.ndim <= d < x.ndim for d in dims)
    if not in_range or sorted(d % x.ndim for d in dims) != list(range(x.ndim)):
        raise RuntimeError(f"permute: {dims} is not a permutation of the {x.ndim} dimensions of shape {x.shape}")
    dims = tuple(d % x.ndim for d in dims)
    if dims == tuple(range(x.ndim)):
        return x
    return Permute.apply(x, dims=dims)


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    if x.ndim < 2 and dim0 in (0, -1) and dim1 in (0, -1):
        return x
    order = list(range(x.ndim))
    a, b = normalize_dim("transpose", dim0, x.ndim), normalize_dim("transpose", dim1, x.ndim)
    order[a], order[b] = order[b], order[a]
    return x.permute(tuple(order))


def movedim(x: Tensor, source, destination) -> Tensor:
    """Move dim source to position destination, the others keeping their order; or several at once, given as
    tuples of one length (each source dim lands at its destination)."""
    sources = tuple(source) if isinstance(source, (tuple, list)) else (source,)
    targets = tuple(destination) if isinstance(destination, (tuple, list)) else (destination,)
    if x.ndim == 0:                     # dims 0 and -1 of a 0-d tensor: nothing to move
        for d in sources + targets:
            normalize_dim("movedim", d, 1)
        return x
    if len(sources) != len(targets):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(sources)} dims) should "
                           f"contain the same number of dims as destination ({list(targets)} dims)")
    sources = [normalize_dim("movedim", d, x.ndim) for d in sources]
    targets = [normalize_dim("movedim", d, x.ndim) for d in targets]
    for given, name in ((sources, "source"), (targets, "destination")):
        if len(set(given)) != len(given):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({given})")
    order = [None] * x.ndim
    for s, t in zip(sources, targets):
        order[t] = s
    rest = iter(d for d in range(x.ndim) if d not in sources)
    return x.permute(tuple(d if d is not None else next(rest) for d in order))


# ----------------------------------------------------------------------------- expand
class Expand(Function):
    def forward(ctx, x, shape):
        ctx.input_shape = x.shape
        return ctx.xp.broadcast_to(x.data, shape)   # a read-only view: no memory is copied

    def backward(ctx, grad):
        return sum_to_shape(grad, ctx.input_shape)


def expand(x: Tensor, shape) -> Tensor:
    shape = shape_arg(shape)
    extra = len(shape) - x.ndim
    if extra < 0:
        raise RuntimeError(f"expand: target shape {shape} has fewer dimensions than the tensor's {x.shape}")
    if any(n == -1 for n in shape[:extra]):
        raise RuntimeError(f"expand: -1 in {shape} is not allowed for a new leading dimension (it has no size to keep)")
    target = tuple(x.shape[i - extra] if n == -1 and i >= extra else n for i, n in enumerate(shape))
    for i, n in enumerate(x.shape):
        if n != 1 and n != target[i + extra]:
            raise RuntimeError(f"expand: cannot expand shape {x.shape} to {shape}: only dimensions of size 1 "
                             "can grow")
    if target == x.shape:
        return x
    return Expand.apply(x, shape=target)


# ----------------------------------------------------------------------------- indexing
def _index_parts(index) -> tuple:
    """The index as a tuple with one part per indexed dimension, read as PyTorch reads it.

    A list is one integer-array index (x[[0, 2]]), unless it is short (under 32 entries) and holds a
    list, tuple, tensor, array, slice, None or ...: then it is read as a tuple of parts, so
    x[[[0, 1], [1, 2]]] is x[[0, 1], [1, 2]] and x[[[0, 1]]] is x[[0, 1]]. NumPy once had this rule too;
    PyTorch kept it, NumPy now reads such a list as one nested index array.
    """
    if isinstance(index, tuple):
        return index
    if isinstance(index, list) and len(index) < 32 and any(
            isinstance(part, (list, tuple, Tensor, np.ndarray, slice)) or part is None or part is Ellipsis
            or hasattr(part, "__cuda_array_interface__") for part in index):
        return tuple(index)
    return (index,)


def _normalize_index(x: Tensor, index):
    """Turn an index into arrays on x's device; boolean masks become integer positions.

    Returns (index, basic): `basic` means only ints, slices, None and Ellipsis, which
    select each element at most once, so the backward can assign instead of accumulate.
    """
    xp = devices.array_module(x.device)
    given = [part.data if isinstance(part, Tensor) else part for part in _index_parts(index)]
    # where each part starts among x's dims: "..." stands for the dims no other part takes; a mask takes as
    # many as it has, None takes none
    taken = sum(_dims_taken(part) for part in given)
    if taken > x.ndim:                         # PyTorch checks this before the parts themselves
        raise IndexError(f"getitem: too many indices for a tensor of dimension {x.ndim} (shape {x.shape})")
    parts, basic, axis = [], True, 0
    for part in given:
        if part is Ellipsis:
            axis += x.ndim - taken
        elif part is not None:
            axis += _check_mask(part, x.shape, axis)
        if isinstance(part, (list, tuple, np.ndarray)) or hasattr(part, "__cuda_array_interface__"):
            # A list or a tuple inside the index is an integer (or boolean) array, nested ones too: x[(0, 1),]
            # is x[[0, 1]]. An empty one selects nothing (NumPy alone would make it float).
            if isinstance(part, (list, tuple)):
                part = np.asarray(part, dtype=np.int64) if len(part) == 0 else np.asarray(part)
            part = devices.move(part, x.device)
            if part.dtype == np.bool_:
                # a mask selects the positions where it is true; a 0-d one, a new dim of size 1 or 0 (True,
                # False), the array library takes as it is
                parts.extend((part,) if part.ndim == 0 else xp.nonzero(part))
                basic = False
                continue
            if part.dtype.kind not in "iu":
                raise IndexError(f"getitem: index arrays must be integers or booleans, got {part.dtype}")
            basic = False
        elif isinstance(part, slice) and part.step is not None and part.step <= 0:
            raise ValueError(f"getitem: step must be greater than zero, got {part.step} (PyTorch has no reversed "
                             "slices; use .flip(dim))")
        elif not (isinstance(part, (int, np.integer, slice)) or part is None or part is Ellipsis):
            raise IndexError(f"getitem: unsupported index of type {type(part).__name__}")
        parts.append(part)
    return tuple(parts), basic


def _dims_taken(part) -> int:
    """How many of x's dims one part of an index takes: None and ... none (... takes the rest, counted
    apart), a boolean mask as many as it has (a 0-d one none), anything else one."""
    if part is None or part is Ellipsis:
        return 0
    if isinstance(part, (list, tuple)):
        part = np.asarray(part)
    return part.ndim if getattr(part, "dtype", None) == np.bool_ else 1


def _check_mask(part, shape: tuple, axis: int) -> int:
    """How many of x's dims `part` of an index takes, starting at `axis`; a boolean mask must have their sizes
    (NumPy's error names only the first mismatch in its own words; this is PyTorch's IndexError)."""
    if isinstance(part, (list, tuple)):
        part = np.asarray(part)
    if getattr(part, "dtype", None) != np.bool_:
        return 1
    covered = tuple(shape[axis:axis + part.ndim])
    if tuple(part.shape) != covered:
        raise IndexError(f"getitem: the shape of the mask {list(part.shape)} does not match the shape "
                         f"{list(covered)} of the indexed tensor's dims {axis}.. (tensor shape {tuple(shape)})")
    return part.ndim


def _expect_indices_in_range(shape, index, device):
    """CuPy wraps an integer-array index that is out of range around instead of raising (NumPy raises):
    on a GPU, compare on the device and raise at the next read (deferred_checks.py)."""
    used = sum(part is not None and part is not Ellipsis for part in index)
    axis = 0
    for part in index:
        if part is Ellipsis:
            axis += len(shape) - used
            continue
        if part is None:
            continue
        if not isinstance(part, (int, np.integer, slice)) and part.dtype.kind in "iu":
            n = shape[axis]
            deferred_checks.expect_none(device, (part < -n) | (part >= n), IndexError,
                                        f"getitem: an index is out of range for dimension {axis} of size {n} "
                                        f"(tensor shape {shape})")
        axis += 1


class GetItem(Function):
    def forward(ctx, x, index, basic):
        ctx.input_shape, ctx.index, ctx.basic = x.shape, index, basic
        if not basic and devices.is_cuda(ctx.device):
            _expect_indices_in_range(x.shape, index, ctx.device)
        try:
            return x.data[index]
        except IndexError as e:
            raise IndexError(f"getitem: {e} (tensor shape {x.shape})") from None

    def backward(ctx, grad):
        if ctx.basic and not is_grad_enabled():
            # sparse: added into one buffer with its neighbours' (the pieces of a split); gradient_sums.py
            return SliceGradient(grad, ctx.input_shape, ctx.index)
        return AddAtIndex.apply(grad, shape=ctx.input_shape, index=ctx.index, basic=ctx.basic)


class AddAtIndex(Function):
    """zeros(shape) with `values` added at `index`: the backward of indexing.

    Repeated integer indices (x[[0, 0]]) must add up, hence add.at, which accumulates,
    where a plain assignment would keep only the last write.
    """

    def forward(ctx, values, shape, index, basic):
        ctx.index, ctx.basic = index, basic
        out = ctx.xp.zeros(shape, dtype=values.dtype)
        if basic:
            out[index] = values.data
        else:
            ctx.xp.add.at(out, index, values.data)
        return out

    def backward(ctx, grad):
        return GetItem.apply(grad, index=ctx.index, basic=ctx.basic)


def getitem(x: Tensor, index) -> Tensor:
    index, basic = _normalize_index(x, index)
    if not basic and any(isinstance(part, (int, np.integer)) for part in index):
        # PyTorch applies a plain integer as basic indexing, before the index tensors: x[1, :, d] is
        # x[1][:, d]. NumPy would count the integer as one more index array, and when a slice stands
        # between them it moves the selected dimensions to the front. So: the integers (and the
        # slices and new axes) first, as a view; then the index arrays, on every dimension that is left.
        def is_basic(part):
            return isinstance(part, (int, np.integer, slice)) or part is None or part is Ellipsis
        first = tuple(part if is_basic(part) else slice(None) for part in index)
        then = tuple(slice(None) if isinstance(part, slice) or part is None else part
                     for part in index if not isinstance(part, (int, np.integer)))
        x, index = GetItem.apply(x, index=first, basic=True), then
    return GetItem.apply(x, index=index, basic=basic)


# ----------------------------------------------------------------------------- combine, split
class Cat(Function):
    def forward(ctx, *tensors, dim):
        ctx.dim, ctx.sizes = dim, [t.shape[dim] for t in tensors]
        return ctx.xp.concatenate([t.data for t in tensors], axis=dim)

    def backward(ctx, grad):
        grads, start = [], 0
        for size, needed in zip(ctx.sizes, ctx.needs_input_grad):
            selector = (slice(None),) * ctx.dim + (slice(start, start + size),)
            grads.append(grad[selector] if needed else None)
            start += size
        return tuple(grads)


def cat(tensors, dim=0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("cat: expected a non-empty list of tensors")
    first = tensors[0]
    if first.ndim == 0:
        raise RuntimeError("cat: zero-dimensional tensors cannot be concatenated; use stack")
    d = normalize_dim("cat", dim, first.ndim)
    for i, t in enumerate(tensors[1:], 1):
        if t.ndim != first.ndim or any(a != b for j, (a, b) in enumerate(zip(t.shape, first.shape)) if j != d):
            raise RuntimeError(f"cat: tensor {i} has shape {t.shape} but tensor 0 has shape {first.shape}; "
                             f"all sizes must match except along dim {dim}")
    dtype = first.dtype
    for t in tensors[1:]:
        dtype = dtypes.promote(dtype, 1, t.dtype, 1)
    return Cat.apply(*[t.to(dtype=dtype) for t in tensors], dim=d)


def stack(tensors, dim=0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack: expected a non-empty list of tensors")
    d = normalize_dim("stack", dim, tensors[0].ndim + 1)     # the dim is checked first, as in PyTorch
    for i, t in enumerate(tensors[1:], 1):
        if t.shape != tensors[0].shape:
            raise RuntimeError(f"stack: tensor {i} has shape {t.shape} but tensor 0 has shape {tensors[0].shape}; "
                             "all must be equal")
    return cat([t.unsqueeze(d) for t in tensors], dim=d)


def split(x: Tensor, split_size_or_sections, dim=0) -> tuple:
    at_least_1d("split", x)
    d = normalize_dim("split", dim, x.ndim)
    n = x.shape[d]
    if isinstance(split_size_or_sections, int):
        if split_size_or_sections <= 0:
            raise RuntimeError(f"split: split size must be positive, got {split_size_or_sections}")
        sizes = [min(split_size_or_sections, n - s) for s in range(0, n, split_size_or_sections)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise RuntimeError(f"split: sections {sizes} add up to {sum(sizes)}, but dim {dim} has size {n}")
    pieces, start = [], 0
    for size in sizes:
        pieces.append(x[(slice(None),) * d + (slice(start, start + size),)])
        start += size
    return tuple(pieces)


def at_least_1d(op: str, x: Tensor) -> None:
    """Ops that cut along a dim refuse a 0-d tensor outright, as PyTorch does (before looking at the dim)."""
    if x.ndim == 0:
        raise RuntimeError(f"{op}: expects at least a 1-dimensional tensor, got a 0-d one")


def unbind(x: Tensor, dim=0) -> tuple:
    """The slices of x along dim, each without that dim."""
    d = normalize_dim("unbind", dim, x.ndim)
    return tuple(x[(slice(None),) * d + (i,)] for i in range(x.shape[d]))


def narrow(x: Tensor, dim, start, length) -> Tensor:
    """x's `length` entries along dim from `start` (which may count from the end), as a view."""
    at_least_1d("narrow", x)
    d = normalize_dim("narrow", dim, x.ndim)
    n = x.shape[d]
    if not -n <= start <= n:
        raise IndexError(f"narrow: start ({start}) is out of range for dim {dim} of size {n}")
    start = start + n if start < 0 else start
    if length < 0 or start + length > n:
        raise RuntimeError(f"narrow: start ({start}) + length ({length}) exceeds dimension size ({n}), or length is "
                           "negative")
    return x[(slice(None),) * d + (slice(start, start + length),)]


def index_select(x: Tensor, dim, index) -> Tensor:
    """x's entries along dim at the positions of `index`, a 1-D (or 0-d) integer tensor; repeats allowed."""
    d = normalize_dim("index_select", dim, max(x.ndim, 1))
    if not isinstance(index, Tensor):
        raise TypeError(f"index_select(): argument 'index' must be Tensor, not {type(index).__name__}")
    if index.dtype not in (dtypes.int32, dtypes.int64):
        raise RuntimeError(f"index_select(): Expected dtype int32 or int64 for index, got {index.dtype}")
    if index.ndim > 1:
        raise IndexError(f"index_select(): Index is supposed to be a vector, got shape {index.shape}")
    n = x.shape[d] if x.ndim else 1
    if x.ndim and not n and index.numel():
        raise RuntimeError(f"index_select(): dim {dim} of shape {x.shape} is empty: there is nothing to select")
    check_positions("index_select", x.device, index, dim, n)
    if x.ndim == 0:                       # a 0-d tensor: index 0 along its dim 0 or -1 gives it back, 0-d
        return x.reshape(1)[(index.reshape(-1),)].reshape(())
    return x[(slice(None),) * d + (index.reshape(-1),)]


def check_positions(op: str, device, index: Tensor, dim, n: int, error=IndexError) -> None:
    """index_select and index_add take positions in [0, n) only (no negative ones, unlike x[index]); the kind
    of error is PyTorch's, which depends on the op's path (index_add of a matrix raises RuntimeError)."""
    with devices.use(device):
        deferred_checks.check(device, (index.data < 0) | (index.data >= n), error,
                              f"{op}(): an index is out of range for dim {dim}, which takes positions 0 to {n - 1}")


def chunk(x: Tensor, chunks: int, dim=0) -> tuple:
    at_least_1d("chunk", x)
    if chunks <= 0:
        raise RuntimeError(f"chunk: number of chunks must be positive, got {chunks}")
    d = normalize_dim("chunk", dim, x.ndim)
    n = x.shape[d]
    if n == 0:                          # PyTorch: `chunks` empty pieces (split would give one)
        return tuple(x[(slice(None),) * d + (slice(0, 0),)] for _ in range(chunks))
    return split(x, math.ceil(n / chunks), dim)


class Triangle(Function):
    """tril / triu: keep the lower (upper) triangle of the last two dimensions."""

    def forward(ctx, x, diagonal, upper):
        if x.ndim < 2:
            raise RuntimeError(f"{'triu' if upper else 'tril'}: needs at least 2 dimensions, got shape {x.shape}")
        ctx.diagonal, ctx.upper = diagonal, upper
        return (ctx.xp.triu if upper else ctx.xp.tril)(x.data, diagonal)

    def backward(ctx, grad):
        return Triangle.apply(grad, diagonal=ctx.diagonal, upper=ctx.upper)


class ToDevice(Function):
    """x.to(device): the gradient travels back to the input's device."""

    def forward(ctx, x, device):
        ctx.out_device = device
        if devices.is_cuda(x.device) and not devices.is_cuda(device):
            deferred_checks.raise_pending()          # values reach the host: the GPU's checks too
        return devices.move(x.data, device)

    def backward(ctx, grad):
        return grad.to(ctx.device)
