"""Two small functions torch code reaches for: ``from_numpy`` (a tensor over an array's own memory) and
``allclose`` (one Python bool for "these tensors agree")."""
from __future__ import annotations

import sys

import numpy as np

from . import dtypes
from .tensor import Tensor


def from_numpy(ndarray) -> Tensor:
    """A cpu tensor over the array's own memory, as torch.from_numpy: writing into either shows in the other,
    and the dtype is the array's (float64 stays float64; tg.tensor would copy). It is on the cpu whatever the
    default device is, since a GPU cannot share host memory this way; .to(device) copies it there."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray, got a {type(ndarray).__name__}; "
                        "tg.tensor(data) copies other data (numbers, lists, CuPy arrays) into a new tensor")
    if dtypes.category(ndarray.dtype) > 2:
        raise TypeError(f"from_numpy: cannot share an array of {ndarray.dtype}; tensors hold bool, integer and "
                        "floating-point numbers only")
    if not ndarray.dtype.isnative:
        raise ValueError(f"from_numpy: the array's byte order ({ndarray.dtype.str}) is not this machine's "
                         f"({sys.byteorder}-endian), which the ops read; convert a copy first: "
                         "array.astype(array.dtype.newbyteorder('='))")
    return Tensor._wrap(ndarray, "cpu")


def allclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """True when |input - other| <= atol + rtol * |other| everywhere (broadcasting the two), as torch.allclose:
    both must be tensors of one dtype (a float32 compared with a float64 is more often a slip than a wish;
    cast one with .to(dtype=...)). NaNs are equal only with equal_nan=True. Reads the answer on the host."""
    for name, value in (("input", input), ("other", other)):
        if not isinstance(value, Tensor):
            raise TypeError(f"allclose: {name} must be a Tensor, got a {type(value).__name__}; "
                            "wrap numbers with tg.tensor(...)")
    if input.dtype != other.dtype:
        raise RuntimeError(f"allclose: input is {input.dtype} but other is {other.dtype}; cast one to the other's "
                           "dtype with .to(dtype=...)")
    return bool(input.isclose(other, rtol=rtol, atol=atol, equal_nan=equal_nan).all().item())
