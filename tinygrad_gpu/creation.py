"""Functions that make new tensors: tensor, zeros, ones, full, empty, arange, linspace, eye, randn, meshgrid, ..."""
from __future__ import annotations

import math

import numpy as np

from . import device as devices
from . import dtypes
from . import random
from .ops.movement import shape_arg
from .tensor import Tensor


def _sizes(op: str, size) -> tuple:
    """The *size of zeros(2, 3) or zeros((2, 3)): at least one argument, as in PyTorch (zeros(()) is 0-d)."""
    if not size:
        raise TypeError(f"{op}() missing 1 required positional arguments: \"size\" (zeros(()) makes a 0-d tensor)")
    return size


def _make(array_fn, size, dtype, device, requires_grad, default=dtypes.default_float) -> Tensor:
    device = devices.canonical(device)
    shape = shape_arg(size)
    negative = [n for n in shape if n < 0]
    if negative:                        # PyTorch's error (NumPy's would be a ValueError of its own)
        raise RuntimeError(f"Trying to create tensor with negative dimension {negative[0]}: {list(shape)}")
    with devices.use(device):
        array = array_fn(devices.array_module(device), shape, np.dtype(dtype or default))
    return Tensor._wrap(array, device).requires_grad_(requires_grad)


def tensor(data, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A new tensor from a number, a (nested) list, a NumPy/CuPy array or another tensor (always a copy)."""
    return Tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _make(lambda xp, s, d: xp.zeros(s, dtype=d), _sizes("zeros", size), dtype, device, requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _make(lambda xp, s, d: xp.ones(s, dtype=d), _sizes("ones", size), dtype, device, requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _make(lambda xp, s, d: xp.empty(s, dtype=d), _sizes("empty", size), dtype, device, requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    default = dtypes.scalar_dtype(fill_value, dtypes.bool_)   # 1.5 -> float32, 3 -> int64, True -> bool
    return _make(lambda xp, s, d: xp.full(s, fill_value, dtype=d), (size,), dtype, device, requires_grad, default)


def eye(n, m=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    for name, value in (("n", n), ("m", m)):
        if value is not None and value < 0:
            raise RuntimeError(f"eye: {name} must be greater or equal to 0, got {value}")
    return _make(lambda xp, s, d: xp.eye(n, m, dtype=d), (), dtype, device, requires_grad)


def tril_indices(row, col, offset=0, *, dtype=None, device=None) -> Tensor:
    """The (row, column) positions of a row x col matrix's lower triangle (at and below diagonal number
    offset), as the two rows of a 2 x N int64 tensor, row by row."""
    return _triangle_positions(np.tril_indices, row, col, offset, dtype, device)


def triu_indices(row, col, offset=0, *, dtype=None, device=None) -> Tensor:
    """The positions of the upper triangle (at and above diagonal number offset), like tril_indices."""
    return _triangle_positions(np.triu_indices, row, col, offset, dtype, device)


def _triangle_positions(positions, row, col, offset, dtype, device) -> Tensor:
    if row < 0 or col < 0:
        raise RuntimeError(f"tril_indices/triu_indices: row and col must be >= 0, got {row} and {col}")
    return tensor(np.stack(positions(row, offset, col)).reshape(2, -1), dtype=dtype or dtypes.int64, device=device)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Like range(): integers give int64, any float gives float32."""
    if end is None:
        start, end = 0, start
    if not all(np.isfinite(float(v)) for v in (start, end)):
        raise RuntimeError(f"arange: unsupported range: {start} -> {end}")
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    if (end - start) * step < 0:        # NumPy would give an empty tensor; PyTorch refuses
        raise RuntimeError(f"arange: upper bound and lower bound inconsistent with step sign (from {start} to {end} "
                           f"by {step})")
    is_int = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
    default = dtypes.int64 if is_int else dtypes.default_float
    if not is_int and dtype is not None and np.dtype(dtype) == dtypes.int64:
        # float bounds, int64: PyTorch (2.13) takes their integer parts first, arange(0.5, 4.5, 1.5,
        # dtype=int64) is arange(0, 4, 1); a step whose integer part is 0 is its ValueError
        start, end, step = int(start), int(end), int(step)
        if step == 0:
            raise ValueError("arange: step must be nonzero (its integer part is 0, and the dtype is int64)")
    elif not is_int and dtype is not None and np.dtype(dtype).kind in "iu":
        # float bounds, int32: PyTorch counts the values in floats, then steps from int(start) by int(step)
        # (arange(-2, 1, 0.5, dtype=int32) is six -2s)
        size, first, stride = math.ceil((end - start) / step), int(start), int(step)
        return _make(lambda xp, s, d: (first + xp.arange(size) * stride).astype(d), (), dtype, device, requires_grad)
    return _make(lambda xp, s, d: xp.arange(start, end, step).astype(d, copy=False), (), dtype, device, requires_grad,
                 default)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False) -> Tensor:
    """`steps` evenly spaced values from start to end, both ends included (steps=1 gives [start])."""
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool):
        raise TypeError(f"linspace: steps must be an int, got {type(steps).__name__}")
    if steps < 0:
        raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    if dtype is not None and np.dtype(dtype).kind in "iu":
        # PyTorch's integer linspace: the ends become integers first, the first half steps up from the start and
        # the second half down from the end, each value truncated (linspace(0, 3.5, 6) is 0 0 1 1 2 3)
        first, last = int(start), int(end)
        step = (last - first) / (steps - 1) if steps > 1 else 0.0

        def integers(xp, s, d):
            i = xp.arange(steps)
            return xp.where(i < max(steps // 2, 1), first + step * i, last - step * (steps - 1 - i)).astype(d)
        return _make(integers, (), dtype, device, requires_grad)
    return _make(lambda xp, s, d: xp.linspace(start, end, steps).astype(d, copy=False), (), dtype, device,
                 requires_grad)


def meshgrid(*tensors, indexing="ij") -> tuple:
    """Coordinate grids from 1-D tensors: with indexing "ij", output k has shape
    (len(t0), len(t1), ...) and holds tensors[k]'s values along dim k. "xy" swaps the first two
    dims (NumPy's default, for x-y plots). Each grid is an expanded view, so gradients flow back
    (summed over the copies)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        raise RuntimeError("meshgrid: expected at least one tensor")
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'meshgrid: indexing must be "ij" or "xy", got {indexing!r}')
    for t in tensors:
        if t.ndim > 1:
            raise RuntimeError(f"meshgrid: expected 0-D or 1-D tensors, got shape {t.shape}")
        if t.dtype != tensors[0].dtype or t.device != tensors[0].device:
            raise RuntimeError(f"meshgrid: all tensors must have the same dtype and device, got "
                               f"{tensors[0].dtype} on {tensors[0].device} and {t.dtype} on {t.device}")
    axis_of = list(range(len(tensors)))          # the output dim each input runs along
    if indexing == "xy" and len(tensors) > 1:
        axis_of[0], axis_of[1] = 1, 0
    shape = [0] * len(tensors)
    for t, axis in zip(tensors, axis_of):
        shape[axis] = t.numel()
    return tuple(t.reshape([-1 if a == axis else 1 for a in range(len(shape))]).expand(shape)
                 for t, axis in zip(tensors, axis_of))


def _sample(method: str, device: str, shape: tuple, dtype):
    """Draw with the device's generator; it makes float32 or float64, other floats are cast. PyTorch draws no
    integers this way (NotImplementedError; randint does)."""
    if not dtypes.is_floating(dtype):
        raise NotImplementedError(f"{'randn' if method == 'standard_normal' else 'rand'}: draws floating-point values "
                                  f"only, got dtype {dtype}; use randint for integers")
    native = dtype if dtype in (dtypes.float32, dtypes.float64) else dtypes.float32
    return getattr(random.generator(device), method)(shape, dtype=native).astype(dtype, copy=False)


def randn(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Standard normal samples."""
    device = devices.canonical(device)
    return _make(lambda xp, s, d: _sample("standard_normal", device, s, d), _sizes("randn", size), dtype, device,
                 requires_grad)


def rand(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Uniform samples in [0, 1)."""
    device = devices.canonical(device)
    return _make(lambda xp, s, d: _sample("random", device, s, d), _sizes("rand", size), dtype, device,
                 requires_grad)


def randint(low, high, size=None, dtype=None, device=None) -> Tensor:
    """Integers drawn uniformly from [low, high): randint(low, high, size), or randint(high, size) from 0."""
    if size is None:
        if not isinstance(high, (tuple, list)):
            raise TypeError("randint() needs a size: randint(high, size) or randint(low, high, size)")
        low, high, size = 0, low, high
    if low >= high:
        raise RuntimeError(f"randint: low must be less than high, but got low={low} >= high={high}")
    device = devices.canonical(device)
    return _make(lambda xp, s, d: random.generator(device).integers(low, high, size=s).astype(d),
                 (size,), dtype, device, False, dtypes.int64)


def randperm(n, dtype=None, device=None) -> Tensor:
    if n < 0:
        raise RuntimeError(f"randperm: n must be non-negative, got {n}")
    device = devices.canonical(device)
    return _make(lambda xp, s, d: random.generator(device).permutation(n).astype(d), (), dtype, device, False,
                 dtypes.int64)


def _like(fn):
    def like(x: Tensor, dtype=None, device=None, requires_grad=False) -> Tensor:
        return fn(x.shape, dtype=dtype or x.dtype, device=device or x.device, requires_grad=requires_grad)
    like.__name__ = fn.__name__ + "_like"
    like.__doc__ = f"{fn.__name__} with the shape (and by default the dtype and device) of x."
    return like


def full_like(x: Tensor, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    return full(x.shape, fill_value, dtype=dtype or x.dtype, device=device or x.device, requires_grad=requires_grad)


zeros_like, ones_like, empty_like, randn_like, rand_like = (_like(f) for f in (zeros, ones, empty, randn, rand))
