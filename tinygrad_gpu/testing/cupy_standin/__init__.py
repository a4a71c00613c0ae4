"""A strict stand-in for CuPy, so that the ``cuda`` path runs on a machine without a GPU.

For tests and benchmarks only: ``TINYGRAD_GPU_CUPY=standin`` puts it behind ``cuda``,
``cuda:0`` and ``cuda:1`` (``TINYGRAD_GPU_STANDIN_DEVICES`` sets how many pretend GPUs).

What it proves: the Python side of the ``cuda`` path. Its arrays keep NumPy data but offer
only what ``cupy.ndarray`` offers; a module function, ufunc method or generator method
exists only if CuPy 14 has it (``cupy_api.json``, read from the installed cupy by
``make_api_list.py``); our ``.cu`` kernels run for real, through the CPU emulator (or as
their NumPy references with ``TINYGRAD_GPU_STANDIN_KERNELS=reference``, for runs too big for
the emulator: kernel_references.py); and
``counters`` records what a GPU makes expensive: host syncs (with the line that caused
each), bytes each way, kernel launches, allocations, kernel-function lookups.

CuPy's documented differences from NumPy that it reproduces (from "Differences between
CuPy and NumPy", https://docs.cupy.dev/en/stable/user_guide/difference.html, unless noted):

* no implicit conversion to NumPy: ``np.asarray(x)`` and ``x.__array__()`` raise TypeError
  with CuPy's message (https://docs.cupy.dev/en/stable/user_guide/interoperability.html).
  CuPy hands a NumPy ufunc or function called on its arrays on to its own function of the
  same name (``__array_ufunc__``, ``__array_function__``); the stand-in refuses them all, so
  that the code names its array module;
* NumPy arrays are not operands: ``cupy_array + numpy_array`` raises TypeError ("Universal
  functions only work with CuPy array or scalar");
* out-of-range integer-array indices wrap around instead of raising ("Out-of-bounds indices");
* reductions return 0-d arrays, not NumPy scalars ("Zero-dimensional array"); reading one is a sync;
* no read-only arrays: ``flags`` has no ``writeable``, and a broadcast view can be written
  through (cupy/_core/flags.pyx; https://github.com/cupy/cupy/issues/2616);
* each ufunc takes the first of its own loops (``cupy.exp.types``) that the inputs cast to
  safely and refuses inputs no loop takes: ``cupyx.scipy.special.erf`` on float16 gives float64;
  ``ufunc.at``, ``reduce``, ``accumulate`` and ``reduceat`` exist for a few ufuncs only
  (cupy/_core/_kernel.pyx);
* ``a[:] = numpy_array`` raises ValueError unless the value is 0-d (cupy/_core/_routines_indexing.pyx);
* bfloat16 (ml_dtypes') is a dtype of its own: its ufunc loops are the 'E' entries of each ufunc's types
  (CuPy 14 adds them when ml_dtypes is installed, https://github.com/cupy/cupy/pull/9494), and a product
  of two 16-bit matrices is rounded once from float32 sums, as cuBLAS computes it
  (cupy/_core/_routines_linalg.pyx), where NumPy's bfloat16 product would return float32;
* ``cupy.random.Generator`` has no ``permutation`` and no ``normal``
  (https://github.com/cupy/cupy/issues/7726);
* an array on another device than the current one is refused with ValueError, as CuPy 14
  refuses it where the GPUs have no peer access (https://github.com/cupy/cupy/pull/5496; with
  peer access CuPy warns and reaches across). ``cupy.asarray`` copies an array from another
  device onto the current one.

Where it stops: it is not a model of speed (NumPy does the arithmetic), and it cannot show
the numerics of the GPU's hardware (``__expf``, fused multiply-add, flush-to-zero).
"""
from __future__ import annotations

import os

import numpy as np

from . import _api, _core, cuda, random  # noqa: F401  (_core: the TF32 switch)
from ._array import IMPLICIT_CONVERSION, compute, current_device, ndarray
from ._array import _Devices
from ._counters import counters
from ._ufunc import ufunc

__version__ = _api.VERSION
_Devices.count = int(os.environ.get("TINYGRAD_GPU_STANDIN_DEVICES", "2"))
RawModule, RawKernel = cuda.RawModule, cuda.RawKernel
# Functions that wait for the GPU: an output size that depends on the data, or (shares_memory)
# pointers read on the host.
_SYNCING = {"nonzero", "flatnonzero", "argwhere", "unique", "extract", "compress", "bincount", "shares_memory"}


def _from_host(value, dtype=None):
    """A copy of host data on the current device."""
    host = np.array(value, dtype=dtype)
    counters.bytes_to_device += host.nbytes
    counters.allocated(host.dtype)
    return ndarray._from_numpy(host, current_device())


def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0, blocking=False):
    if isinstance(obj, ndarray):
        if obj._device != current_device():            # a copy from one GPU to another
            made = ndarray._from_numpy(np.array(obj._a, dtype=dtype, order=order), current_device())
            counters.allocated(made.dtype)
            return made
        return compute(np.array, obj, dtype=dtype, copy=copy, order=order, may_be_view=not copy)
    return _from_host(obj, dtype)


def asarray(a, dtype=None, order=None, *, blocking=False):
    if isinstance(a, ndarray) and a._device == current_device():
        return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
    return array(a, dtype=dtype)


def asnumpy(a, stream=None, order="C", out=None, *, blocking=True):
    if isinstance(a, ndarray):
        return a.get(order=order)
    return np.asarray(a, order=order)


def where(condition, x=None, y=None):
    if x is None and y is None:
        counters.sync("where(condition) (output size depends on the data)")
        return compute(np.where, condition)
    return compute(np.where, condition, x, y)


class _Namespace:
    """A CuPy submodule (``cupy.linalg``): NumPy's function of the same name, if CuPy has it."""

    def __init__(self, label, numpy_module, allowed):
        self._label, self._numpy, self._allowed = label, numpy_module, allowed

    def __getattr__(self, name):
        if name not in self._allowed or not hasattr(self._numpy, name):
            raise AttributeError(f"module {self._label!r} has no attribute {name!r}")
        function = getattr(self._numpy, name)
        return lambda *args, **kwargs: compute(function, *args, **kwargs)


linalg = _Namespace("cupy.linalg", np.linalg, _api.LINALG)


def __getattr__(name):
    if name not in _api.MODULE:
        raise AttributeError(f"module 'cupy' has no attribute {name!r}")
    if name in _api.UFUNC_TYPES:
        made = ufunc(name, getattr(np, name), _api.UFUNC_TYPES[name])
    else:
        found = getattr(np, name, None)
        if found is None:
            raise NotImplementedError(f"cupy.{name} exists in CuPy but not in the stand-in; add it there if needed")
        if isinstance(found, type) or not callable(found):       # dtypes, constants, classes
            return found
        may_be_view, syncs = name in _api.VIEWS, name in _SYNCING

        def made(*args, **kwargs):
            if syncs:
                counters.sync(f"{name}() (output size depends on the data)")
            return compute(found, *args, may_be_view=may_be_view, kernel=name not in _api.UNINITIALISED, **kwargs)
        made.__name__ = name
    globals()[name] = made
    return made
