"""The stand-in's ndarray: NumPy data behind CuPy's surface, refusals and differences.

Every array lives on one device (an int). Work runs on the current device
(``cuda.Device(n)``), and an operand that lives elsewhere is refused as CuPy refuses it.
Results come back as new stand-in arrays on that device; a NumPy scalar result (a sum, an
element) becomes a 0-d array, as CuPy returns, so reading it is an explicit sync.
"""
from __future__ import annotations

import numbers

import ml_dtypes
import numpy as np

from . import _api
from ._counters import counters

IMPLICIT_CONVERSION = ("Implicit conversion to a NumPy array is not allowed. "
                       "Please use `.get()` to construct a NumPy array explicitly.")


class _Devices:
    count = 2
    current = 0


def current_device() -> int:
    return _Devices.current


class Device:
    """A pretend GPU; ``with Device(n):`` makes it current, as on CuPy."""

    def __init__(self, device=None):
        self.id = _Devices.current if device is None else int(device)
        if not 0 <= self.id < _Devices.count:
            raise RuntimeError(f"cudaErrorInvalidDevice: invalid device ordinal {self.id}")
        self._previous = []

    def __enter__(self):
        self._previous.append(_Devices.current)
        _Devices.current = self.id
        return self

    def __exit__(self, *exc):
        _Devices.current = self._previous.pop()
        return False

    def use(self):
        _Devices.current = self.id

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"<CUDA Device {self.id}>"


# ----------------------------------------------------------------------------- in and out
def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def unwrap(value, roots=None):
    """The NumPy data behind `value` (arrays, lists and tuples of them), checked for device."""
    if isinstance(value, ndarray):
        if value._device != _Devices.current:
            raise ValueError(f"The device where the array resides ({value._device}) is different from the "
                             f"current device ({_Devices.current}). Peer access is unavailable between these devices.")
        if roots is not None:
            roots.append(_root(value._a))
        return value._a
    if isinstance(value, np.ndarray):
        raise TypeError(f"Unsupported type {type(value)}")
    if isinstance(value, (list, tuple)):
        return type(value)(unwrap(v, roots) for v in value)
    if isinstance(value, dict):
        return {k: unwrap(v, roots) for k, v in value.items()}
    return value


def wrap(result, roots=()):
    """Stand-in arrays for NumPy results; a result that is not a view of an input is an allocation."""
    if isinstance(result, np.generic):
        result = np.asarray(result)
    if isinstance(result, np.ndarray):
        if not any(_root(result) is r for r in roots):
            counters.allocated(result.dtype)
        return ndarray._from_numpy(result, _Devices.current)
    if isinstance(result, tuple):
        return tuple(wrap(r, roots) for r in result)
    if isinstance(result, list):
        return [wrap(r, roots) for r in result]
    return result


def compute(function, *args, may_be_view=False, kernel=True, **kwargs):
    """Run a NumPy function on unwrapped arguments and wrap what it returns. It counts as a kernel
    launch unless it only made a view (reshape, transpose, a slice) or runs none (`kernel`: empty())."""
    roots = []
    args, kwargs = unwrap(args, roots), unwrap(kwargs, roots)
    allocations = counters.allocations
    raw = function(*args, **kwargs)
    result = wrap(raw, roots)
    if kernel and (not may_be_view or counters.allocations > allocations):
        if counters.track_sites:             # what the launch costs a GPU, for gpu_readiness.py's table
            counters.launched(flops=_flops(function, args, raw), nbytes=array_bytes((args, kwargs, raw)))
        else:
            counters.launched()
    return result


def array_bytes(value) -> int:
    """The bytes of the NumPy arrays in `value` (nested in lists, tuples and dicts): what a launch given them
    reads or writes, each counted once (the traffic of a kernel that touches every element once)."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (list, tuple)):
        return sum(array_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(array_bytes(v) for v in value.values())
    return 0


def _flops(function, args, result) -> int:
    """2 M N K for each matrix product (a multiply and an add per term); elementwise work is not counted."""
    if function in (np.matmul, _matmul) and isinstance(result, np.ndarray) and len(args) >= 2 and result.ndim:
        return 2 * result.size * np.shape(args[0])[-1]
    return 0


# ----------------------------------------------------------------------------- indexing
def _wrap_index(key, shape):
    """CuPy's integer-array indexing wraps out-of-range indices around instead of raising."""
    key = key if isinstance(key, tuple) else (key,)
    key = unwrap(tuple(_host_index(k) for k in key))
    consumed = sum(1 if not (isinstance(k, np.ndarray) and k.dtype == bool) else k.ndim
                   for k in key if k is not None and k is not Ellipsis)
    out, axis = [], 0
    for k in key:
        if k is Ellipsis:
            axis += len(shape) - consumed
        elif k is None:
            pass
        elif isinstance(k, np.ndarray) and k.dtype == bool:
            counters.sync("boolean mask index (output size depends on the data)")
            axis += k.ndim
        else:
            if isinstance(k, np.ndarray) and k.dtype.kind in "iu" and axis < len(shape) and shape[axis] > 0:
                k = np.mod(k, shape[axis])
            axis += 1
        out.append(k)
    return tuple(out)


def _host_index(k):
    """Lists and NumPy arrays used as indices are copied to the device, as CuPy does."""
    if isinstance(k, (list, np.ndarray)):
        array = np.array(k)
        counters.bytes_to_device += array.nbytes
        counters.allocated(array.dtype)
        return ndarray._from_numpy(array, _Devices.current)
    return k


# ----------------------------------------------------------------------------- the class
_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b as CuPy computes it: cuBLAS multiplies 16-bit floats with float32 sums and rounds the product
    once to their dtype. (NumPy's 16-bit products are slow element loops, and bfloat16's returns float32.)"""
    if a.dtype in _HALF and a.dtype == b.dtype:
        return (a.astype(np.float32) @ b.astype(np.float32)).astype(a.dtype)
    return np.matmul(a, b)


def _binary(name):
    numpy_method = {"__matmul__": _matmul, "__rmatmul__": lambda a, b: _matmul(b, a)}.get(name) or \
        getattr(np.ndarray, name)

    def method(self, other):
        if isinstance(other, np.ndarray):
            raise TypeError(f"Unsupported type {type(other)}")
        if not isinstance(other, (ndarray, numbers.Number, np.generic)):
            return NotImplemented
        result = compute(numpy_method, self, other)
        return self if name.startswith("__i") else result       # in place: the same array
    method.__name__ = name
    return method


def _unary(name):
    def method(self):
        return compute(getattr(np.ndarray, name), self)
    method.__name__ = name
    return method


class MemoryPointer:
    """cupy.cuda.MemoryPointer, what ndarray.data is: the address of the array's first element (ptr) and its
    device (device_id). Kernels that take a table of arrays by address (kernels/multi_tensor.py) read ptr."""

    __slots__ = ("ptr", "device_id")

    def __init__(self, ptr: int, device_id: int):
        self.ptr, self.device_id = ptr, device_id


class _Flags:
    """CuPy's flags: contiguity and ownership; no writeable flag (CuPy has no read-only arrays)."""

    def __init__(self, a):
        self.c_contiguous, self.f_contiguous, self.owndata = (a.flags.c_contiguous, a.flags.f_contiguous,
                                                               a.base is None)


class ndarray:
    """An array on a pretend GPU. Only CuPy's attributes exist (see cupy_api.json)."""

    __slots__ = ("_a", "_device", "__weakref__")
    __array_ufunc__ = None            # NumPy's ufuncs refuse it (and binary ops defer to ours)

    def __init__(self, shape, dtype=float):
        self._a = np.empty(shape, dtype)
        self._device = _Devices.current
        counters.allocated(self._a.dtype)

    @classmethod
    def _from_numpy(cls, array: np.ndarray, device: int) -> "ndarray":
        made = object.__new__(cls)
        made._a, made._device = _writeable(array), device
        return made

    # --- refusals: no implicit trip to the host
    def __array__(self, *args, **kwargs):
        raise TypeError(IMPLICIT_CONVERSION)

    def __array_function__(self, func, types, args, kwargs):
        return NotImplemented

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    # --- explicit trips, each counted
    def get(self, stream=None, order="C", out=None, blocking=True):
        counters.sync(".get()")
        counters.bytes_to_host += self._a.nbytes
        return np.array(self._a, order=order)

    def set(self, arr, stream=None):
        if not isinstance(arr, np.ndarray) or arr.shape != self.shape:
            raise ValueError(f"set: expected a numpy.ndarray of shape {self.shape}")
        counters.bytes_to_device += arr.nbytes
        self._a[...] = arr

    def item(self, *args):
        counters.sync(".item()")
        counters.bytes_to_host += self._a.itemsize
        return self._a.item(*args)

    def tolist(self):
        counters.sync(".tolist()")
        counters.bytes_to_host += self._a.nbytes
        return self._a.tolist()

    def _scalar(self, kind, why):
        if self.size != 1:
            raise TypeError(f"only length-1 arrays can be converted to Python scalars (shape {self.shape})")
        counters.sync(why)
        counters.bytes_to_host += self._a.itemsize
        return kind(self._a.reshape(()))

    def __float__(self):
        return self._scalar(float, "float()")

    def __int__(self):
        return self._scalar(int, "int()")

    def __bool__(self):
        return self._scalar(bool, "bool()")

    def __complex__(self):
        return self._scalar(complex, "complex()")

    def nonzero(self):
        counters.sync("nonzero() (output size depends on the data)")
        return compute(np.nonzero, self)

    # --- what an array is
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: _Flags(self._a))
    data = property(lambda self: MemoryPointer(self._a.__array_interface__["data"][0], self._device))
    T = property(lambda self: ndarray._from_numpy(self._a.T, self._device))
    mT = property(lambda self: ndarray._from_numpy(np.swapaxes(self._a, -1, -2), self._device))

    @property
    def base(self):
        return None if self._a.base is None else ndarray._from_numpy(_root(self._a), self._device)

    @property
    def device(self):
        return Device(self._device)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "version": 3,
                "data": (self._a.__array_interface__["data"][0], False), "strides": self.strides}

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __repr__(self):
        return f"standin.ndarray(device={self._device}, shape={self.shape}, dtype={self.dtype})"

    # --- indexing
    def __getitem__(self, key):
        index = _wrap_index(key, self.shape)
        return compute(lambda a: a[index], self, may_be_view=True)

    def __setitem__(self, key, value):
        index = _wrap_index(key, self.shape)
        unwrap(self)
        if isinstance(value, np.ndarray):
            if value.ndim and all(not isinstance(k, np.ndarray) for k in index):
                raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
            counters.bytes_to_device += value.nbytes
        else:
            value = unwrap(value)
        counters.launched(nbytes=2 * np.asarray(self._a[index]).nbytes if counters.track_sites else 0)   # read, write
        self._a[index] = value

    # --- any other method CuPy's ndarray has runs NumPy's
    def __getattr__(self, name):
        if name.startswith("_") or name not in _api.NDARRAY or not hasattr(np.ndarray, name):
            raise AttributeError(f"'cupy.ndarray' object has no attribute {name!r}")
        bound = getattr(np.ndarray, name)
        return lambda *args, **kwargs: compute(bound, self, *args, may_be_view=name in _api.VIEWS, **kwargs)

    def astype(self, dtype, order="K", casting=None, subok=None, copy=True):
        if not copy and np.dtype(dtype) == self.dtype:
            return self
        return compute(np.ndarray.astype, self, dtype, order=order)

    def copy(self, order="C"):
        return compute(np.array, self, order=order, copy=True)

    def view(self, *args, **kwargs):
        return compute(np.ndarray.view, self, *args, may_be_view=True, **kwargs)

    def reshape(self, *shape, order="C"):
        return compute(np.ndarray.reshape, self, *shape, order=order, may_be_view=True)

    def fill(self, value):
        counters.launched(nbytes=self._a.nbytes)
        self._a.fill(unwrap(value))


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__",
              "__matmul__", "__rmatmul__", "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__",
              "__lshift__", "__rlshift__", "__rshift__", "__rrshift__", "__eq__", "__ne__", "__lt__", "__le__",
              "__gt__", "__ge__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
              "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__"):
    setattr(ndarray, _name, _binary(_name))
for _name in ("__neg__", "__pos__", "__abs__", "__invert__"):
    setattr(ndarray, _name, _unary(_name))
ndarray.__hash__ = None


def _writeable(array: np.ndarray) -> np.ndarray:
    """CuPy has no read-only arrays: a broadcast view can be written through (and the writes
    overlap), so the stand-in hands out writeable views where NumPy would refuse."""
    root = _root(array)
    if array.flags.writeable or not root.flags.writeable:
        return array
    offset = array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return np.ndarray(array.shape, array.dtype, buffer=root, offset=offset, strides=array.strides)
