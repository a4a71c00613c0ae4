"""Bitwise ops on integer and bool tensors: ~ (bitwise_not), & | ^ (bitwise_and/or/xor) and the
shifts << >> (bitwise_left_shift / bitwise_right_shift).

On bool tensors ~ & | ^ are logical not/and/or/xor, as in PyTorch; shifts need integers. A float tensor
has no bitwise ops: RuntimeError naming the op and the dtype, as in PyTorch. A Python int beside an
integer tensor takes the tensor's type, wrapped to its bits (Tensor._scalar_like): an int32 tensor
| 0xFFFFFFFF ors with -1. Results are integers or bools, so nothing here has a gradient.
"""
from __future__ import annotations

from .. import device as devices
from .. import dtypes
from .elementwise import check_broadcast
from ..tensor import Tensor

# PyTorch's name -> the array modules' (NumPy's and CuPy's) name
_ARRAY_FUNCTION = {"bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
                   "bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift"}
_SHIFTS = ("bitwise_left_shift", "bitwise_right_shift")


def _check_dtype(op: str, dtype, bool_allowed: bool = True) -> None:
    if dtypes.category(dtype) == 1 or (bool_allowed and dtypes.category(dtype) == 0):
        return
    kinds = "integer or bool" if bool_allowed else "integer"
    raise NotImplementedError(f"{op}: needs {kinds} tensors, got {dtype} (as in PyTorch); for a float tensor use "
                       "logical ops, or convert first, e.g. x.long()")


def bitwise_not(x: Tensor) -> Tensor:
    _check_dtype("bitwise_not", x.dtype)
    with devices.use(x.device):
        return Tensor._wrap(devices.array_module(x.device).invert(x.data), x.device)


def bitwise(a: Tensor, other, op: str, reverse: bool = False) -> Tensor:
    """a <op> other (other op a when `reverse`, for a Python number on the left), dtypes promoted as by
    the arithmetic ops."""
    b = a._as_tensor(other)
    if reverse:
        a, b = b, a
    if a.device != b.device:
        raise RuntimeError(f"{op}: expected both tensors on the same device, got {a.device} and {b.device}")
    check_broadcast(op, a.shape, b.shape)          # the shapes first, then the dtypes, in PyTorch's order
    dtype = dtypes.promote(a.dtype, a.ndim, b.dtype, b.ndim)
    _check_dtype(op, dtype, bool_allowed=op not in _SHIFTS)
    function = getattr(devices.array_module(a.device), _ARRAY_FUNCTION[op])
    with devices.use(a.device):
        return Tensor._wrap(function(a.to(dtype=dtype).data, b.to(dtype=dtype).data), a.device)
