"""Data types and PyTorch's promotion rules.

A tensor's dtype is a NumPy dtype (``tg.float32 is np.dtype('float32')``), so arrays and
tensors speak the same language.  Promotion follows PyTorch, not NumPy:

* Python floats and lists of floats become float32 (NumPy would pick float64).
* Mixing categories (bool < integer < floating) takes the higher category's type:
  int64 tensor + float32 tensor -> float32 (NumPy would pick float64).
* Within a category the wider type wins, but a 0-d tensor does not widen a tensor
  that has dimensions: float32 tensor + float64 scalar tensor -> float32.
* A Python scalar never widens a tensor of its own category: float16 tensor * 2.0 -> float16.
* bfloat16 and float16 hold neither each other's range nor each other's precision: together they
  give float32, as in PyTorch.

bfloat16 comes from ml_dtypes (a dependency: a small wheel that needs only NumPy, and the same
type JAX, CuPy and safetensors use), so that ``tg.bfloat16`` and checkpoints stored as BF16 work
on every install. NumPy sees it as a 16-bit type of its own (its ``kind`` is 'V', not 'f'), which
is why the code asks ``is_floating`` here rather than looking at ``dtype.kind``.
"""
import ml_dtypes
import numpy as np

bool_ = np.dtype(np.bool_)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)

default_float = float32
HALF = (float16, bfloat16)          # the 16-bit floats: computed in float32, stored in 16 bits


def is_floating(dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype == bfloat16


_HALF_DTYPES = frozenset(HALF)


def is_half(dtype) -> bool:
    if isinstance(dtype, np.dtype):
        return dtype in _HALF_DTYPES        # one hash lookup: asked of every array a fused op on the cpu takes
    return dtype in HALF            # anything that compares equal to a dtype (np.float16, "bfloat16")


def category(dtype) -> int:
    """0 for bool, 1 for integers, 2 for floating point."""
    dtype = np.dtype(dtype)
    if dtype == bfloat16:
        return 2
    return {"b": 0, "i": 1, "u": 1, "f": 2}.get(dtype.kind, 3)


def accumulator(dtype):
    """The dtype sums of `dtype` are added up in: float32 for the 16-bit floats (as PyTorch and the
    GPUs' libraries do: 16-bit sums lose every addend below 1/256 or 1/2048 of the total, and float16's
    overflow at 65504), the dtype itself otherwise."""
    return float32 if is_half(dtype) else np.dtype(dtype)


def widest_float(dtype_a, dtype_b):
    """The float that holds both: the wider one, and float32 for bfloat16 with float16."""
    dtype_a, dtype_b = np.dtype(dtype_a), np.dtype(dtype_b)
    if {dtype_a, dtype_b} == {float16, bfloat16}:
        return float32
    return dtype_a if dtype_a.itemsize >= dtype_b.itemsize else dtype_b


class finfo:
    """``tg.finfo(tg.bfloat16)``: the limits of a floating dtype, under PyTorch's names (bits, eps, max, min,
    tiny, smallest_normal, resolution, dtype)."""

    def __init__(self, dtype=None):
        dtype = default_float if dtype is None else np.dtype(dtype)
        if not is_floating(dtype):
            raise TypeError(f"finfo: {dtype} is not a floating-point dtype; use numpy.iinfo for integers")
        info = ml_dtypes.finfo(dtype) if dtype == bfloat16 else np.finfo(dtype)
        self.dtype, self.bits = dtype.name, dtype.itemsize * 8
        self.eps, self.max, self.min = float(info.eps), float(info.max), float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 10.0 ** -int(info.precision)        # PyTorch: 0.01 for bfloat16, 0.001 for float16

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})")


def promote(dtype_a, ndim_a: int, dtype_b, ndim_b: int):
    """The result dtype of a binary op between two tensors (PyTorch's rules above)."""
    if dtype_a == dtype_b:
        return dtype_a
    cat_a, cat_b = category(dtype_a), category(dtype_b)
    if cat_a != cat_b:
        return dtype_a if cat_a > cat_b else dtype_b
    if (ndim_a == 0) != (ndim_b == 0):  # a dimensioned tensor outranks a 0-d one
        return dtype_b if ndim_a == 0 else dtype_a
    if cat_a == 2:
        return widest_float(dtype_a, dtype_b)
    return np.promote_types(dtype_a, dtype_b)


def promote_all(*operands):
    """The result dtype of an op over several operands (clamp's x, min and max): each a (dtype, ndim) pair for a
    tensor, or a Python number. The highest category present wins; within it, the tensors with dimensions
    decide, else the 0-d ones, else the numbers (as a bool, int64 or the default float)."""
    tiers = ([], [], [])                               # dimensioned tensors, 0-d tensors, Python numbers
    for operand in operands:
        if isinstance(operand, tuple):
            tiers[0 if operand[1] else 1].append(np.dtype(operand[0]))
        else:
            tiers[2].append(scalar_dtype(operand, bool_))
    top = max(category(d) for tier in tiers for d in tier)
    for tier in tiers:
        deciding = [d for d in tier if category(d) == top]
        if deciding:
            result = deciding[0]
            for d in deciding[1:]:
                result = promote(result, 1, d, 1)
            return result


def reject_non_floating(op: str, *given, advice: str = "convert first, e.g. x.float()") -> None:
    """PyTorch computes many ops for floating-point dtypes only (its kernels have no integer or bool version):
    its NotImplementedError when any of the given dtypes is not a float."""
    for d in given:
        if not is_floating(d):
            raise NotImplementedError(f"{op}: not implemented for {np.dtype(d)} tensors (as in PyTorch); {advice}")


def reject_bool(op: str, *given, advice: str = "convert first, e.g. x.long()", error=NotImplementedError) -> None:
    """PyTorch has no bool version of some arithmetic (-, negation, abs, pow of two bools, //, %, floor, ...):
    an error when any of the given dtypes is bool, of PyTorch's kind: NotImplementedError (a RuntimeError) where
    its kernel has no bool version, RuntimeError where it refuses bool on purpose (-, unary + and -, relu,
    hardtanh). NumPy would compute some of them (bool - int, abs) and refuse others with errors of its own."""
    if any(np.dtype(d) == bool_ for d in given):
        raise error(f"{op}: not defined for bool tensors (as in PyTorch); {advice}")


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
