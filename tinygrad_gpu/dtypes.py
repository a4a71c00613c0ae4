"""Data types and PyTorch's promotion rules.

A tensor's dtype is a NumPy dtype (``tg.float32 is np.dtype('float32')``), so arrays and
tensors speak the same language.  Promotion follows PyTorch, not NumPy:

* Python floats and lists of floats become float32 (NumPy would pick float64).
* Mixing categories (bool < integer < floating) takes the higher category's type:
  int64 tensor + float32 tensor -> float32 (NumPy would pick float64).
* Within a category the wider type wins, but a 0-d tensor does not widen a tensor
  that has dimensions: float32 tensor + float64 scalar tensor -> float32.
* A Python scalar never widens a tensor of its own category: float16 tensor * 2.0 -> float16.
"""
import numpy as np

bool_ = np.dtype(np.bool_)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)

default_float = float32


def is_floating(dtype) -> bool:
    return np.dtype(dtype).kind == "f"


def category(dtype) -> int:
    """0 for bool, 1 for integers, 2 for floating point."""
    kind = np.dtype(dtype).kind
    return {"b": 0, "i": 1, "u": 1, "f": 2}.get(kind, 3)


def promote(dtype_a, ndim_a: int, dtype_b, ndim_b: int):
    """The result dtype of a binary op between two tensors (PyTorch's rules above)."""
    if dtype_a == dtype_b:
        return dtype_a
    cat_a, cat_b = category(dtype_a), category(dtype_b)
    if cat_a != cat_b:
        return dtype_a if cat_a > cat_b else dtype_b
    if (ndim_a == 0) != (ndim_b == 0):  # a dimensioned tensor outranks a 0-d one
        return dtype_b if ndim_a == 0 else dtype_a
    return np.promote_types(dtype_a, dtype_b)


def scalar_dtype(value, tensor_dtype):
    """The dtype a Python scalar takes when combined with a tensor of `tensor_dtype`."""
    value_category = 0 if isinstance(value, (bool, np.bool_)) else 1 if isinstance(value, (int, np.integer)) else 2
    if value_category <= category(tensor_dtype):
        return np.dtype(tensor_dtype)
    return (bool_, int64, default_float)[value_category]


def wrap_int(value: int, dtype) -> int:
    """A Python int as an integer of `dtype` holds it: its low bits, two's complement (PyTorch wraps a
    constant that does not fit the tensor's type; NumPy refuses it with OverflowError)."""
    bits = np.dtype(dtype).itemsize * 8
    value &= (1 << bits) - 1
    return value - (1 << bits) if np.dtype(dtype).kind == "i" and value >= 1 << (bits - 1) else value


def infer(data_dtype, from_python: bool):
    """The dtype of a new tensor: Python floats -> float32, NumPy arrays keep theirs."""
    if from_python and data_dtype == float64:
        return default_float
    return np.dtype(data_dtype)
