"""PyTorch functions that are compositions of our ops: no Function of their own, so each gradient is the one
its ops already define (and test). Tensor takes most of them as methods (tensor.py), the package as module
functions; PyTorch's aliases are in tensor.py beside the names they stand for.

Where a composition could make nan out of a branch that `where` discards (sinc at 0, xlogy at x == 0), it
feeds that branch a harmless value instead: `where`'s backward sends zero to the discarded branch, but zero
times an infinite local derivative would still be nan.
"""
from __future__ import annotations

import collections
import math

import numpy as np

from .. import dtypes
from ..tensor import Tensor
from . import blend, elementwise, linalg, movement, rearrange, reduce
from .elementwise import where

MinMax = collections.namedtuple("MinMax", ["min", "max"])        # aminmax's answer, with PyTorch's field names


# ----------------------------------------------------------------------------- elementwise
def erfc(x):
    """1 - erf(x)."""
    return 1 - x._floating().erf()


def logit(x, eps=None):
    """log(x / (1 - x)), x first clamped to [eps, 1 - eps] when eps is given (then the gradient is 0 outside)."""
    x = x._floating()
    if eps is not None:
        x = x.clamp(eps, 1 - eps)
    return (x / (1 - x)).log()


def signbit(x):
    """True where the sign bit is set: negative numbers, -0.0 and a negative nan too."""
    if x.dtype == dtypes.bool_:
        return x.logical_and(x.logical_not())                       # all False, x's shape
    return elementwise.predicate(x, "signbit")


def frac(x):
    """x - trunc(x), the fractional part with x's sign."""
    dtypes.reject_non_floating("frac", x.dtype)
    return x - x.trunc()


def deg2rad(x):
    return x._floating() * (math.pi / 180)


def rad2deg(x):
    return x._floating() * (180 / math.pi)


def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    """nan, inf and -inf replaced by finite numbers (by default 0 and the dtype's largest and lowest); integer and
    bool tensors have none, and come back unchanged. The gradient is x's where x is finite, 0 elsewhere."""
    if not dtypes.is_floating(x.dtype):
        return x.clone()
    info = dtypes.finfo(x.dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    filled = where(x.isnan(), x._scalar_like(nan), x)
    return where(x.isposinf(), x._scalar_like(posinf), where(x.isneginf(), x._scalar_like(neginf), filled))


def sinc(x):
    """sin(pi x) / (pi x), and 1 at 0 (with gradient 0 there)."""
    x = x._floating()
    at_zero = x.detach() == 0
    safe = where(at_zero, 1, x) * math.pi
    return where(at_zero, 1, safe.sin() / safe)


def fmax(a, b):
    """maximum that takes the number where one side is nan (maximum takes the nan)."""
    return _nan_ignoring("fmax", a, b, a.maximum(b))


def fmin(a, b):
    """minimum that takes the number where one side is nan."""
    return _nan_ignoring("fmin", a, b, a.minimum(b))


def _nan_ignoring(op, a, b, picked):
    a, b = blend.promoted_together(op, a, b)
    if not dtypes.is_floating(picked.dtype):
        return picked
    return where(b.isnan(), a, where(a.isnan(), b, picked))


def hypot(a, b):
    """sqrt(a**2 + b**2); inf where either is infinite, even beside a nan (C's hypot, and PyTorch's)."""
    a, b = blend.promoted_together("hypot", a, b)
    dtypes.reject_non_floating("hypot", a.dtype)
    return where(a.isinf() | b.isinf(), math.inf, (a * a + b * b).sqrt())


def xlogy(x, y):
    """x * log(y), and 0 where x is 0 (even where y is 0 or inf); nan where y is nan."""
    x, y = blend.promoted_together("xlogy", x, y)
    x, y = x._floating(), y._floating()
    x_is_zero = x.detach() == 0
    product = x * where(x_is_zero, 1, y).log()
    return where(y.detach().isnan(), math.nan, product)


def logaddexp2(a, b):
    """log2(2**a + 2**b), through logaddexp in base e."""
    a, b = blend.promoted_together("logaddexp2", a, b)
    dtypes.reject_non_floating("logaddexp2", a.dtype)
    return (a * math.log(2)).logaddexp(b * math.log(2)) / math.log(2)


def rsub(input, other, alpha=1):
    """other - alpha * input (torch.rsub)."""
    return input._as_tensor(other).sub(input, alpha=alpha)


def equal(a, b) -> bool:
    """True when a and b have the same shape and equal elements (a Python bool)."""
    return a.shape == b.shape and bool((a == b).all())


# ----------------------------------------------------------------------------- reductions
def nansum(x, dim=None, keepdim=False, *, dtype=None):
    """sum that counts nan as 0."""
    if dtypes.is_floating(x.dtype):
        x = where(x.isnan(), 0, x)
    return x.sum(dim, keepdim, dtype=dtype)


def nanmean(x, dim=None, keepdim=False, *, dtype=None):
    """mean over the elements that are not nan (nan where all are)."""
    if not dtypes.is_floating(x.dtype if dtype is None else dtype):
        raise RuntimeError(f"nanmean(): expected a floating point input, got {x.dtype}")
    counted = x.isnan().logical_not()
    return nansum(x, dim, keepdim, dtype=dtype) / counted.sum(dim, keepdim)


def var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """(var, mean) over the same dims."""
    return (x.var(dim, unbiased, keepdim, correction), x.mean(dim, keepdim))


def std_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """(std, mean) over the same dims."""
    return (x.std(dim, unbiased, keepdim, correction), x.mean(dim, keepdim))


def aminmax(x, *, dim=None, keepdim=False):
    """(min, max) in one call, with amin's and amax's gradients."""
    dims = () if dim is None else dim
    if dim is None and x.numel() == 0:
        raise RuntimeError(f"aminmax(): cannot compute aminmax over an empty tensor (shape {x.shape}); name a dim")
    return MinMax(x.amin(dims, keepdim), x.amax(dims, keepdim))


def count_nonzero(x, dim=None):
    """How many elements are not zero (int64), over dim (an int or a tuple) or all."""
    return (x != 0).sum(dim)


def median(x, dim=None, keepdim=False):
    """The lower median: the element at position (n - 1) // 2 once sorted; nan if there is a nan. Without a dim,
    a 0-d tensor (nan for an empty one); with a dim, (values, indices)."""
    if dim is None:
        if x.numel() == 0 and dtypes.is_floating(x.dtype):
            return x._scalar_like(math.nan).to(dtype=x.dtype)
        return kthvalue(x.reshape(-1), (x.numel() - 1) // 2 + 1, 0, median=True).values
    d = movement.normalize_dim("median", dim, max(x.ndim, 1))
    n = x.shape[d] if x.ndim else 1
    return kthvalue(x, (n - 1) // 2 + 1, d, keepdim, median=True)


def kthvalue(x, k, dim=-1, keepdim=False, *, median=False):
    """The k-th smallest element along dim (k from 1), with its position, as (values, indices). nan sorts last,
    and a median (median=True) of a row with a nan is that nan."""
    if x.dtype == dtypes.bool_:
        raise NotImplementedError(f"{'median' if median else 'kthvalue'}: not implemented for bool tensors "
                                  "(as in PyTorch); convert first, e.g. x.long()")
    d = movement.normalize_dim("kthvalue", dim, max(x.ndim, 1))
    column = x if x.ndim else x.reshape(1)
    n = column.shape[d]
    if not 1 <= k <= n:
        raise IndexError(f"kthvalue(): k = {k} is out of range for a dim of size {n} (shape {x.shape})") \
            if n == 0 else RuntimeError(f"kthvalue(): selected number k = {k} is out of range for a dim of size {n}")
    ordered = column.sort(d, stable=True)
    position = column._scalar_like(k - 1).to(dtype=dtypes.int64)
    if median and dtypes.is_floating(x.dtype):                    # the first nan, where a row has one
        nans = column.isnan().sum(d, keepdim=True)
        position = where(nans > 0, n - nans, position)
    position = position.expand(reduce.keepdim_shape(column.shape, (d,)))
    values, indices = ordered.values.gather(d, position), ordered.indices.gather(d, position)
    if not keepdim or not x.ndim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return reduce.ValuesIndices(values, indices)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """(sum |x|**ord)**(1/ord) over dim (every dim when None); ord inf is max |x|, -inf min |x|, 0 the count
    of nonzeros. 16-bit floats are summed in float32 and rounded once, as PyTorch's CPU does. The norm of a
    zero vector has gradient 0 (PyTorch's choice), not the root's infinite slope times 0."""
    out_dtype = x.dtype if dtype is None else dtype
    if not dtypes.is_floating(out_dtype):
        raise RuntimeError(f"linalg.vector_norm: expected a floating point input, got {x.dtype}; convert first, "
                           "e.g. x.float()")
    x = x.to(dtype=out_dtype)
    wide = x.float() if dtypes.is_half(x.dtype) else x
    dims = () if dim is None else dim
    size = wide.abs()
    if abs(ord) == math.inf:
        reduced = range(x.ndim) if dims == () else (dims,) if isinstance(dims, int) else dims
        sizes = [x.shape[movement.normalize_dim("linalg.vector_norm", d, max(x.ndim, 1))] if x.ndim else 1
                 for d in reduced]
        if 0 in sizes:
            raise RuntimeError(f"linalg.vector_norm: the {ord} norm of an empty dim of shape {x.shape} has no "
                               "value (a max or min of nothing)")
        norm = size.amax(dims, keepdim) if ord > 0 else size.amin(dims, keepdim)
    elif ord == 0:
        norm = (x != 0).sum(dims, keepdim).to(dtype=wide.dtype)
        # PyTorch's count has a gradient, zero everywhere: add a term that is 0 with gradient 0 (clamp passes
        # the gradient only where |x| = 0, and there |x|'s is 0)
        norm = norm + size.clamp(max=0).sum(dims, keepdim) if x.requires_grad else norm
    elif ord == 1:
        norm = size.sum(dims, keepdim)
    else:
        total = (size ** ord).sum(dims, keepdim)
        # the root of 0 has an infinite slope (ord > 1): take it of 1 there and put 0 back (nan stays nan)
        zero = total == 0
        norm = where(zero, 0.0, where(zero, 1.0, total) ** (1 / ord)) if ord > 0 else total ** (1 / ord)
    return norm.to(dtype=out_dtype)


def norm(x, p="fro", dim=None, keepdim=False, dtype=None):
    """Tensor.norm: a vector norm over dim ('fro' is 2)."""
    return vector_norm(x, 2 if p in ("fro", None) else p, dim, keepdim, dtype=dtype)


def trace(x):
    """The sum of a matrix's main diagonal."""
    dtypes.reject_bool("trace", x.dtype)
    if x.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, got shape {x.shape}")
    return x.diagonal().sum()


# ----------------------------------------------------------------------------- shapes
def t(x):
    """The transpose of a matrix; a vector or a 0-d tensor as it is."""
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, got shape {x.shape}; use transpose(0, 1)")
    return x.transpose(0, 1) if x.ndim == 2 else x


def ravel(x):
    return x.reshape(-1)


def broadcast_to(x, shape):
    return x.expand(tuple(shape))


def broadcast_shapes(*shapes) -> tuple:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise RuntimeError(f"broadcast: shapes {', '.join(map(str, shapes))} are not broadcastable") from None


def broadcast_tensors(*tensors) -> tuple:
    shape = broadcast_shapes(*(t.shape for t in tensors))
    return tuple(t.expand(shape) for t in tensors)


def tile(x, dims):
    """repeat, with the sizes given for the last dims only (the others once)."""
    dims = movement.shape_arg((dims,))
    if not dims and not x.ndim:
        return x.clone()
    return x.repeat(*((1,) * (x.ndim - len(dims)) + dims))


def fliplr(x):
    if x.ndim < 2:
        raise RuntimeError(f"fliplr: expected a tensor of at least 2 dims, got shape {x.shape}")
    return x.flip(1)


def flipud(x):
    if x.ndim < 1:
        raise RuntimeError("flipud: expected a tensor of at least 1 dim, got a 0-d one")
    return x.flip(0)


def diag_embed(x, offset=0, dim1=-2, dim2=-1):
    """Matrices with x's last dim on diagonal number `offset`, in dims dim1 and dim2 of the result."""
    ndim = x.ndim + 1
    d1, d2 = movement.normalize_dim("diag_embed", dim1, ndim), movement.normalize_dim("diag_embed", dim2, ndim)
    if d1 == d2:
        raise RuntimeError(f"diag_embed: dim1 and dim2 must be different dims, got {dim1} and {dim2}")
    n = (x.shape[-1] if x.ndim else 1) + abs(offset)
    shape = list(x.shape[:-1])
    for d in sorted((d1, d2)):
        shape.insert(d, n)
    return rearrange.EmbedDiagonal.apply(x if x.ndim else x.reshape(1), shape=tuple(shape), offset=int(offset),
                                         dim1=d1, dim2=d2)


def tensor_split(x, indices_or_sections, dim=0):
    """Pieces of x along dim: n of as equal sizes as can be (the first size % n one longer), or cut at the
    given indices."""
    movement.at_least_1d("tensor_split", x)
    d = movement.normalize_dim("tensor_split", dim, x.ndim)
    size = x.shape[d]
    if isinstance(indices_or_sections, (int, np.integer)):
        n = int(indices_or_sections)
        if n <= 0:
            raise RuntimeError(f"tensor_split: the number of sections must be at least 1, got {n}")
        lengths = [size // n + (i < size % n) for i in range(n)]
        cuts = np.cumsum([0] + lengths).tolist()
    else:
        cuts = [0] + [min(max(i + size if i < 0 else i, 0), size) for i in indices_or_sections] + [size]
    return tuple(x.narrow(d, start, max(stop - start, 0)) for start, stop in zip(cuts, cuts[1:]))


def hstack(tensors):
    """cat along dim 1, or dim 0 for vectors (0-d ones count as vectors)."""
    tensors = [t.reshape(1) if t.ndim == 0 else t for t in tensors]
    return movement.cat(tensors, 0 if tensors and tensors[0].ndim == 1 else 1)


def vstack(tensors):
    """cat along dim 0, with vectors as rows."""
    return movement.cat([t.reshape(1, -1) if t.ndim < 2 else t for t in tensors], 0)


def take(x, index):
    """x flattened, at the positions of index (any shape)."""
    return x.reshape(-1)[index]


def take_along_dim(x, indices, dim=None):
    """gather with indices broadcast against x outside dim; without a dim, of both flattened."""
    if dim is None:
        return x.reshape(-1).gather(0, indices.reshape(-1))
    d = movement.normalize_dim("take_along_dim", dim, x.ndim)      # a 0-d tensor has no dim 0 here
    outside = lambda shape: shape[:d] + (1,) + shape[d + 1:]                  # noqa: E731
    shape = broadcast_shapes(outside(x.shape), outside(indices.shape))
    return x.expand(shape[:d] + x.shape[d:d + 1] + shape[d + 1:]).gather(
        d, indices.expand(shape[:d] + indices.shape[d:d + 1] + shape[d + 1:]))


def argwhere(x):
    return x.nonzero()


def index_add(x, dim, index, source, *, alpha=1):
    """x with alpha * source[i] added at position index[i] of dim (repeated positions add up)."""
    d = movement.normalize_dim("index_add", dim, max(x.ndim, 1))
    if index.ndim > 1:
        raise IndexError(f"index_add(): index must be a vector, got shape {index.shape}")
    movement.check_positions("index_add", x.device, index, dim, x.shape[d] if x.ndim else 1,
                             error=IndexError if x.ndim <= 1 else RuntimeError)
    along = [1] * max(source.ndim, 1)
    along[d] = -1
    positions = index.reshape(along).expand(source.shape if source.ndim else (1,))
    return x.scatter_add(d, positions, source * alpha if alpha != 1 else source)


# ----------------------------------------------------------------------------- products
def _check_ndim(op: str, expected: tuple, *tensors):
    for t, n in zip(tensors, expected):
        if t.ndim != n:
            shapes = " and ".join(str(u.shape) for u in tensors)
            raise RuntimeError(f"{op}: expected {'-D, '.join(map(str, expected))}-D tensors, got shapes {shapes}")


def mm(a, b):
    _check_ndim("mm", (2, 2), a, b)
    return a @ b


def bmm(a, b):
    _check_ndim("bmm", (3, 3), a, b)
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"bmm: the batch sizes differ: shapes {a.shape} and {b.shape}")
    return a @ b


def mv(a, b):
    _check_ndim("mv", (2, 1), a, b)
    return a @ b


def addmm(input, a, b, *, beta=1, alpha=1):
    """beta * input + alpha * (a @ b); input is not read when beta is 0."""
    product = mm(a, b)
    product = product if alpha == 1 else product * alpha
    return product + input if beta == 1 else product if beta == 0 else product + input * beta


def tensordot(a, b, dims=2):
    """The sum of products over dims of a and b: the last `dims` of a with the first of b, or the two lists."""
    if isinstance(dims, (int, np.integer)):
        if dims < 0:
            raise RuntimeError(f"tensordot: expects dims >= 0, got {dims}")
        dims_a, dims_b = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        dims_a, dims_b = ([d] if isinstance(d, int) else list(d) for d in dims)
    dims_a = [movement.normalize_dim("tensordot", d, a.ndim) for d in dims_a]
    dims_b = [movement.normalize_dim("tensordot", d, b.ndim) for d in dims_b]
    for i, j in zip(dims_a, dims_b):
        if a.shape[i] != b.shape[j]:
            raise RuntimeError(f"tensordot: contracted dims differ in size: {a.shape} dim {i}, {b.shape} dim {j}")
    linalg.check_product_dtypes("tensordot", a, b)
    free_a = [d for d in range(a.ndim) if d not in dims_a]
    free_b = [d for d in range(b.ndim) if d not in dims_b]
    rows, inner, columns = (math.prod(t.shape[d] for d in ds) for t, ds in ((a, free_a), (a, dims_a), (b, free_b)))
    left = a.permute(free_a + dims_a).reshape(rows, inner)
    right = b.permute(dims_b + free_b).reshape(inner, columns)
    return (left @ right).reshape([a.shape[d] for d in free_a] + [b.shape[d] for d in free_b])


def kron(a, b):
    """The Kronecker product: every element of a times the whole of b, in a's layout."""
    ndim = max(a.ndim, b.ndim)
    a = a.reshape((1,) * (ndim - a.ndim) + a.shape)
    b = b.reshape((1,) * (ndim - b.ndim) + b.shape)
    interleaved_a = a.reshape(tuple(n for m in a.shape for n in (m, 1)))
    interleaved_b = b.reshape(tuple(n for m in b.shape for n in (1, m)))
    return (interleaved_a * interleaved_b).reshape(tuple(m * n for m, n in zip(a.shape, b.shape)))


# ----------------------------------------------------------------------------- dtypes
def result_type(a, b):
    """The dtype arithmetic between a and b (Tensors or Python numbers) would have."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        return dtypes.promote(Tensor(a).dtype, 0, Tensor(b).dtype, 0)
    if not isinstance(a, Tensor):
        a, b = b, a
    b = a._as_tensor(b)
    return dtypes.promote(a.dtype, a.ndim, b.dtype, b.ndim)


def promote_types(type1, type2):
    """The smallest dtype both fit in, by the rule arithmetic between two tensors uses."""
    return dtypes.promote(np.dtype(type1), 1, np.dtype(type2), 1)


def get_default_dtype():
    return dtypes.default_float


def is_tensor(x) -> bool:
    return isinstance(x, Tensor)
