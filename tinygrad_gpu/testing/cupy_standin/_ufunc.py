"""CuPy's ufuncs on the stand-in: NumPy computes, CuPy's type signatures decide what is allowed.

A CuPy ufunc lists its loops (``cupy.exp.types`` is ['e->e', 'f->f', ...]). It takes the
first loop every input casts to safely, and refuses inputs no loop takes. Where that loop's
output differs from NumPy's (``cupyx.scipy.special.erf`` has 'e->d': float16 in, float64
out), the stand-in returns CuPy's dtype.
"""
from __future__ import annotations

import numbers

import ml_dtypes
import numpy as np

from . import _api
from ._array import compute, ndarray


def loop_dtype(char: str):
    """The dtype of a loop's type character. 'E' is bfloat16 (ml_dtypes' character, which CuPy 14 uses for
    its bfloat16 loops when ml_dtypes is installed, and which np.dtype() does not parse)."""
    return np.dtype(ml_dtypes.bfloat16) if char == "E" else np.dtype(char)


def _fits(value, char: str) -> bool:
    wanted = loop_dtype(char)
    kind = "f" if char == "E" else wanted.kind              # bfloat16's NumPy kind is 'V'; a float to CuPy
    if isinstance(value, (ndarray, np.generic)):
        return np.can_cast(value.dtype, wanted, "safe")
    if isinstance(value, bool):
        return True
    if isinstance(value, numbers.Integral):
        return kind in "iufc"
    if isinstance(value, numbers.Real):
        return kind in "fc"
    if isinstance(value, numbers.Complex):
        return kind == "c"
    return True


# Which ufuncs CuPy 14 implements each method for (others raise NotImplementedError); read from
# cupy/_core/_kernel.pyx. `outer` works for every ufunc.
_SUPPORTED_METHOD = {
    "reduce": {"add", "multiply"}, "accumulate": {"add", "multiply"}, "reduceat": {"add"},
    "at": {"add", "subtract", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor"},
}


class ufunc:
    def __init__(self, name: str, numpy_function, types):
        self.name, self._numpy, self.types = name, numpy_function, list(types)
        self.nin = len(self.types[0].split("->")[0])
        self.nout = len(self.types[0].split("->")[1])
        self.nargs = self.nin + self.nout

    def _loop(self, inputs):
        for signature in self.types:
            chars = signature.split("->")[0]
            if len(chars) == len(inputs) and all(_fits(v, c) for v, c in zip(inputs, chars)):
                return signature
        dtypes = tuple(getattr(v, "dtype", type(v)) for v in inputs)
        raise TypeError(f"Wrong type ({dtypes}) of arguments for cupy_{self.name}")

    def __call__(self, *args, out=None, dtype=None, **kwargs):
        inputs = args[:self.nin]
        signature = self._loop(inputs)
        if dtype is not None:
            kwargs["dtype"] = dtype
        result = compute(self._numpy, *args, out=out, **kwargs)
        if out is not None:
            return out
        loop_out = loop_dtype(signature.split("->")[1][0])
        all_arrays = all(isinstance(v, ndarray) for v in inputs)
        if dtype is None and all_arrays and isinstance(result, ndarray) and result.dtype != loop_out:
            result = result.astype(loop_out)
        return result

    def __getattr__(self, name):
        if name.startswith("_") or name not in _api.UFUNC_METHODS or not hasattr(self._numpy, name):
            raise AttributeError(f"'cupy.ufunc' object has no attribute {name!r}")
        if name in _SUPPORTED_METHOD and self.name not in _SUPPORTED_METHOD[name]:
            raise NotImplementedError(f"`cupy_{self.name}.{name}` is not supported yet")
        method = getattr(self._numpy, name)
        return lambda *args, **kwargs: compute(method, *args, **kwargs)

    def __repr__(self):
        return f"<standin ufunc 'cupy_{self.name}'>"
