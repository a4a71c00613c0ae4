"""Elementwise ops: arithmetic, unary math, GELU, clamp, maximum/minimum, where, comparisons.
More elementwise math has files of its own: trigonometric.py, exponential.py, rounding.py (also % and //),
blend.py (copysign, lerp, isclose) and bitwise.py (~ & | ^ << >>).

Each class is one op: ``forward`` computes on arrays, ``backward`` returns the gradient of
each input written with Tensor ops (so ``create_graph=True`` can differentiate it again).
Binary ops receive inputs already promoted to one dtype (``Tensor._binary``) and may
return gradients of the broadcast shape: the engine sums them back (``gradient_sums.sum_to_shape``).
"""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from .. import dtypes
from ..tensor import Function, Tensor


def check_broadcast(op: str, *shapes) -> None:
    """Raise an error naming the op and the shapes when they cannot be broadcast together."""
    if all(s == shapes[0] or not s for s in shapes):    # equal shapes, or 0-d: always compatible
        return
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        shown = " and ".join(str(tuple(s)) for s in shapes)
        raise RuntimeError(f"{op}: shapes {shown} cannot be broadcast together (each dimension must match "
                         "or be 1, counting from the last)") from None


class _Binary(Function):
    """Shared forward prologue of two-input ops: check that the shapes broadcast."""

    @classmethod
    def apply(cls, a, b, **options):
        check_broadcast(cls.op_name(), a.shape, b.shape)
        return super().apply(a, b, **options)


# ----------------------------------------------------------------------------- arithmetic
class Add(_Binary):
    def forward(ctx, a, b):
        return a.data + b.data

    def backward(ctx, grad):
        return grad, grad


class Sub(_Binary):
    rejects_bool = "for masks use ^ (logical_xor) or ~ (logical_not); for numbers convert first, e.g. x.long()"

    def forward(ctx, a, b):
        return a.data - b.data

    def backward(ctx, grad):
        return grad, -grad


class Mul(_Binary):
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a.data * b.data

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return (grad * b if ctx.needs_input_grad[0] else None,
                grad * a if ctx.needs_input_grad[1] else None)


class Div(_Binary):
    float_only = True     # 7 / 2 is 3.5, as in PyTorch

    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a.data / b.data

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return (grad / b if ctx.needs_input_grad[0] else None,
                -grad * a / (b * b) if ctx.needs_input_grad[1] else None)


class Reciprocal(Function):
    """1 / x; d/dx = -1 / x^2 = -y^2."""

    saves_output = True

    def forward(ctx, x):
        with np.errstate(divide="ignore"):           # 1 / 0 is inf, as in PyTorch
            return 1 / x.data

    def backward(ctx, grad):
        y = ctx.output
        return -grad * y * y


class Neg(Function):
    def forward(ctx, x):
        return -x.data

    def backward(ctx, grad):
        return -grad


class PowScalar(Function):
    """x ** c for a Python number c."""

    def forward(ctx, x, exponent):
        ctx.save_for_backward(x)
        ctx.exponent = exponent
        return x.data ** exponent

    def backward(ctx, grad):
        (x,), c = ctx.saved_tensors, ctx.exponent
        if c == 0:
            return grad * 0          # d/dx x**0 is 0 everywhere, also at x = 0
        return grad * c * x ** (c - 1)


class Pow(_Binary):
    """a ** b for two tensors. Integers to a negative power follow C's integer arithmetic, as PyTorch does
    (NumPy refuses them): 1 and -1 keep their magnitude, anything else gives 0."""

    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        if a.dtype.kind not in "iu" or not (b.data < 0).any():
            return a.data ** b.data
        xp = ctx.xp
        whole = a.data ** xp.maximum(b.data, 0)
        negative_power = xp.where(a.data == 1, 1, xp.where(a.data == -1, 1 - 2 * (b.data % 2), 0))
        return xp.where(b.data < 0, negative_power, whole).astype(a.dtype)

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            # d/da a**b = b * a**(b-1), and 0 where b == 0 (PyTorch), also at a == 0 where 0 * 0**-1
            # would be nan: the base 1 there keeps inf out. Only at a == 0, so that elsewhere
            # d/db (b * a**(b-1)) = a**(b-1) (1 + b log a) stays right for second derivatives at b == 0.
            safe_a = where((a == 0) & (b == 0), 1.0, a)
            grad_a = grad * b * safe_a ** (b - 1)
        if ctx.needs_input_grad[1]:
            # d/db a**b = a**b * log(a); PyTorch defines it as 0 where a == 0 and b >= 0.
            # log(1), not log(0), in the masked places, so no -inf reaches second derivatives.
            zero_base = (a == 0) & (b >= 0)
            safe_log = where(zero_base, 1.0, a).log()
            grad_b = where(zero_base, 0.0, grad * a ** b * safe_log)
        return grad_a, grad_b


class PowOfNumber(Function):
    """c ** x for a Python number c (number ** tensor): d/dx = c^x log c, PyTorch's formula for a number base: at
    c = 0 it is 0 where x >= 0 (0^x is flat there) and -inf where x < 0; a bool base False is not 0 to PyTorch,
    whose gradient there is 0 * log 0 = nan."""

    saves_output = True

    def forward(ctx, x, base):
        ctx.base = base
        ctx.save_for_backward(x)
        with np.errstate(divide="ignore", invalid="ignore"):     # 0 ** -1 is inf, (-2) ** 0.5 nan
            return ctx.xp.power(x.dtype.type(base), x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        with np.errstate(divide="ignore", invalid="ignore"):
            log_base = float(np.log(np.float64(ctx.base)))
        slope = ctx.output * log_base
        if ctx.base == 0 and not isinstance(ctx.base, bool):
            slope = where(x >= 0, 0.0, slope)
        return grad * slope


def pow(base: Tensor, exponent) -> Tensor:
    exponent_dtype = exponent.dtype if isinstance(exponent, Tensor) else np.asarray(exponent).dtype
    if base.dtype == dtypes.bool_ and isinstance(exponent, (bool, np.bool_)):
        return base.clone() if exponent else base == base      # PyTorch: x ** True is x, x ** False all True
    if base.dtype == dtypes.bool_ and exponent_dtype == dtypes.bool_:
        dtypes.reject_bool("pow", base.dtype)
    if isinstance(exponent, Tensor):
        return base._binary(Pow, exponent)
    if base.dtype == dtypes.bool_ and isinstance(exponent, int):
        base = base.long()              # PyTorch: bool ** 2 is int64 (NumPy would give int8)
    if isinstance(exponent, int) and exponent < 0 and not base.is_floating_point():
        raise RuntimeError(f"pow: an integer tensor ({base.dtype}) to the negative integer power {exponent} is not "
                           "allowed (as in PyTorch); make one of them a float, e.g. x.float() ** -2")
    if isinstance(exponent, float) and not base.is_floating_point():
        base = base._floating()
    return PowScalar.apply(base, exponent=exponent)


class Clone(Function):
    def forward(ctx, x):
        return x.data.copy()

    def backward(ctx, grad):
        return grad


class Cast(Function):
    """x.to(dtype): the gradient is cast back to the input's dtype. It keeps nothing but what the engine
    keeps of every node (the input's dtype among it), so a backward can go through it again: autocast
    hands one cast of a parameter to every use of it in a region, each in a graph of its own."""

    # The gradient cast back is a new array (x.to makes a Cast only between two different dtypes), so a
    # parameter keeps it as its .grad without a copy.
    backward_returns_spare = True

    def forward(ctx, x, dtype):
        return x.data.astype(dtype)

    def backward(ctx, grad):
        return grad.to(dtype=ctx.input_dtypes[0])


# ----------------------------------------------------------------------------- unary math
class Exp(Function):
    saves_output = True

    def forward(ctx, x):
        return ctx.xp.exp(x.data)

    def backward(ctx, grad):
        return grad * ctx.output


class Log(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.log(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / x


class Sqrt(Function):
    saves_output = True

    def forward(ctx, x):
        return ctx.xp.sqrt(x.data)

    def backward(ctx, grad):
        return grad / (2 * ctx.output)


class Rsqrt(Function):
    saves_output = True

    def forward(ctx, x):
        return 1 / ctx.xp.sqrt(x.data)

    def backward(ctx, grad):
        y = ctx.output                      # y = x^(-1/2), dy/dx = -y^3 / 2
        return grad * -0.5 * y * y * y


class Tanh(Function):
    saves_output = True

    def forward(ctx, x):
        return ctx.xp.tanh(x.data)

    def backward(ctx, grad):
        y = ctx.output
        return grad * (1 - y * y)


class Sigmoid(Function):
    saves_output = True

    def forward(ctx, x):
        xp = ctx.xp
        # exp of a negative number only, so no overflow for large |x|
        z = xp.exp(-xp.abs(x.data))
        return xp.where(x.data >= 0, 1 / (1 + z), z / (1 + z))

    def backward(ctx, grad):
        y = ctx.output
        return grad * y * (1 - y)


class Sin(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.sin(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


class Cos(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.cos(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return -grad * x.sin()


def _erf_array(array, xp):
    """erf on an array. NumPy has none: use SciPy when installed, else Python's math.erf per element.

    Dispatch on the array module, not on isinstance(array, np.ndarray): arithmetic on 0-d NumPy
    arrays returns NumPy scalars (np.float64), which are not ndarrays but are not CuPy either.
    """
    if xp is not np:      # CuPy's erf turns float16 into float64 (its loops are e->d, f->f, d->d)
        return devices.cupyx().scipy.special.erf(array).astype(array.dtype, copy=False)
    array = np.asarray(array)
    try:
        from scipy.special import erf
    except ImportError:
        erf = np.vectorize(math.erf, otypes=[array.dtype])
    return erf(array).astype(array.dtype, copy=False)


class Erf(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _erf_array(x.data, ctx.xp)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (2 / math.sqrt(math.pi)) * (-(x * x)).exp()


class Relu(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.maximum(x.data, 0)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return where(x > 0, grad, 0.0)        # relu'(0) = 0, as in PyTorch


class Abs(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.abs(x.data)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * sign(x)                 # abs'(0) = 0, as in PyTorch


def zero_gradient(grad: Tensor) -> Tensor:
    """Zeros shaped like `grad`: the gradient of a piecewise-constant op (sign, floor, //, ...). PyTorch
    records such ops and gives them zeros rather than no gradient, so a loss built from them can backward."""
    with devices.use(grad.device):
        return Tensor._wrap(devices.array_module(grad.device).zeros_like(grad.data), grad.device)


class Sign(Function):
    """-1, 0 or 1 (0 for nan, as PyTorch gives it), with a zero gradient."""

    def forward(ctx, x):
        signs = ctx.xp.sign(x.data)
        return ctx.xp.where(signs != signs, 0, signs).astype(x.dtype) if x.dtype.kind != "i" else signs

    def backward(ctx, grad):
        return zero_gradient(grad)


def sign(x: Tensor) -> Tensor:
    return x.clone() if x.dtype == dtypes.bool_ else Sign.apply(x)      # a bool is its own sign, as in PyTorch


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU with the tanh approximation (GPT-2's), as Tensor ops:
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). F.gelu(x, approximate="tanh") runs it as one fused op
    (ops/fused.py, GeluTanh), whose recorded backward differentiates this composition."""
    return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())


class GeluExact(Function):
    """GELU(x) = x * Phi(x), Phi the standard normal CDF."""

    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 0.5 * x.data * (1 + _erf_array(x.data / math.sqrt(2), ctx.xp))

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        cdf = 0.5 * (1 + (x / math.sqrt(2)).erf())
        pdf = (-0.5 * x * x).exp() / math.sqrt(2 * math.pi)
        return grad * (cdf + x * pdf)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    dtypes.reject_non_floating("gelu", x.dtype)           # PyTorch has no integer GELU
    if approximate == "tanh":
        return gelu_tanh(x)
    if approximate == "none":
        return GeluExact.apply(x)
    raise RuntimeError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


# ----------------------------------------------------------------------------- selection
class Clamp(Function):
    def forward(ctx, x, low, high):
        ctx.save_for_backward(x)
        ctx.low, ctx.high = low, high
        return ctx.xp.clip(x.data, low, high).astype(x.dtype, copy=False)   # (NumPy widens bfloat16)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        inside = Tensor._wrap(ctx.xp.ones(x.shape, dtype=bool), x.device)
        if ctx.low is not None:
            inside = inside & (x >= ctx.low)
        if ctx.high is not None:
            inside = inside & (x <= ctx.high)
        return where(inside, grad, 0.0)       # the gradient passes at the bounds, as in PyTorch


class ClampTensor(Function):
    """clamp with tensor bounds; `bounds` holds the ones given (low first), flagged by has_low/has_high."""

    def forward(ctx, x, *bounds, has_low, has_high):
        ctx.save_for_backward(x, *bounds)
        ctx.has_low, ctx.has_high = has_low, has_high
        low = bounds[0].data if has_low else None
        high = bounds[-1].data if has_high else None
        return ctx.xp.clip(x.data, low, high).astype(x.dtype, copy=False)

    def backward(ctx, grad):
        x, *bounds = ctx.saved_tensors
        low = bounds[0] if ctx.has_low else None
        high = bounds[-1] if ctx.has_high else None
        # PyTorch's rules: x gets the gradient where low <= x <= high (bounds included, as for numbers);
        # low where x < low (unless low > high); high where x > high, and wherever high < low (the
        # result is high there). No gradient is ever split.
        if low is None:
            to_x, to_high = x <= high, x > high
        elif high is None:
            to_x, to_low = x >= low, x < low
        else:
            to_x, to_low, to_high = (x >= low) & (x <= high), (x < low) & (low < high), (x > high) | (high < low)
        grads = [where(to_x, grad, 0.0)]
        if low is not None:
            grads.append(where(to_low, grad, 0.0))
        if high is not None:
            grads.append(where(to_high, grad, 0.0))
        return tuple(g if needed else None for g, needed in zip(grads, ctx.needs_input_grad))


def clamp(x: Tensor, low=None, high=None) -> Tensor:
    if low is None and high is None:
        raise RuntimeError("clamp: give at least one of min and max")     # PyTorch's kind of error
    if isinstance(low, Tensor) != isinstance(high, Tensor) and low is not None and high is not None:
        # PyTorch takes a 0-d tensor beside a number as a number; a bigger one is its TypeError
        low, high = (v.item() if isinstance(v, Tensor) and v.ndim == 0 else v for v in (low, high))
        if isinstance(low, Tensor) or isinstance(high, Tensor):
            raise TypeError(f"clamp(): min and max must both be Tensors or both be numbers (as in PyTorch), got "
                            f"{type(low).__name__} and {type(high).__name__}")
    bounds = [v for v in (low, high) if v is not None]
    check_broadcast("clamp", x.shape, *(v.shape for v in bounds if isinstance(v, Tensor)))     # shapes first
    # the result dtype: x's and the bounds' together (a bool tensor with an int bound is int64, as in PyTorch)
    dtype = dtypes.promote_all((x.dtype, x.ndim), *((v.dtype, v.ndim) if isinstance(v, Tensor) else v
                                                   for v in bounds))
    if not (len(bounds) == 1 and isinstance(bounds[0], Tensor)):     # one tensor bound: a maximum, bool too
        dtypes.reject_bool("clamp", dtype)
    if not any(isinstance(v, Tensor) for v in bounds):
        return Clamp.apply(x.to(dtype=dtype), low=low, high=high)
    bounds = [x._as_tensor(v) for v in bounds]
    return ClampTensor.apply(x.to(dtype=dtype), *(bound.to(dtype=dtype) for bound in bounds),
                             has_low=low is not None, has_high=high is not None)


class _Extremum(_Binary):
    """maximum / minimum: where both inputs are equal the gradient is split evenly."""

    pick = None

    def forward(ctx, a, b):
        xp = ctx.xp
        a_wins = xp.greater(a.data, b.data) if ctx.pick == "max" else xp.less(a.data, b.data)
        # share of the gradient that goes to `a`: 1 where a wins, 1/2 on ties, 0 elsewhere
        ctx.share_a = xp.where(a_wins, 1.0, xp.where(a.data == b.data, 0.5, 0.0)).astype(a.dtype)
        return xp.maximum(a.data, b.data) if ctx.pick == "max" else xp.minimum(a.data, b.data)

    def backward(ctx, grad):
        share_a = Tensor._wrap(ctx.share_a, ctx.device)
        return grad * share_a, grad * (1 - share_a)


class Maximum(_Extremum):
    pick = "max"


class Minimum(_Extremum):
    pick = "min"


class Where(Function):
    def forward(ctx, condition, a, b):
        ctx.condition = condition
        return ctx.xp.where(condition.data, a.data, b.data)

    def backward(ctx, grad):
        c = ctx.condition
        return (None,
                where(c, grad, 0.0) if ctx.needs_input_grad[1] else None,
                where(c, 0.0, grad) if ctx.needs_input_grad[2] else None)


def where(condition, a=None, b=None) -> Tensor:
    """Elements of `a` where `condition` is true, else of `b` (either may be a Python number). With the condition
    alone, its nonzero positions, one index tensor per dim (condition.nonzero(as_tuple=True))."""
    if not isinstance(condition, Tensor):
        raise TypeError("where: the condition must be a bool tensor")
    if a is None and b is None:
        return condition.nonzero(as_tuple=True)
    if condition.dtype != np.bool_:
        raise TypeError(f"where: the condition must be a bool tensor, got {condition.dtype}; "
                        "compare it first, e.g. mask != 0")
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = Tensor(a, device=condition.device)     # both Python numbers: 1.0 -> float32, 1 -> int64
    if not isinstance(a, Tensor):
        a = b._as_tensor(a)
    b = a._as_tensor(b)
    dtype = dtypes.promote(a.dtype, a.ndim, b.dtype, b.ndim)
    a, b = a.to(dtype=dtype), b.to(dtype=dtype)
    check_broadcast("where", condition.shape, a.shape, b.shape)
    return Where.apply(condition, a, b)


# ----------------------------------------------------------------------------- no gradient
def compare(a: Tensor, other, name: str) -> Tensor:
    """==, !=, <, <=, >, >= as bool tensors (comparisons have no gradient), made in the dtype that arithmetic
    between the two would have (PyTorch's rule): a float16 tensor against a float64 number compares in float16,
    an int64 tensor against a float32 one in float32."""
    b = a._as_tensor(other)
    if a.device != b.device:
        raise RuntimeError(f"{name}: expected both tensors on the same device, got {a.device} and {b.device}")
    check_broadcast(name, a.shape, b.shape)
    dtype = dtypes.promote(a.dtype, a.ndim, b.dtype, b.ndim)
    with devices.use(a.device):
        values = [t.data.astype(dtype, copy=False) for t in (a, b)]
        return Tensor._wrap(getattr(devices.array_module(a.device), name)(*values), a.device)


def logical(a: Tensor, other, name: str) -> Tensor:
    xp = devices.array_module(a.device)
    if other is None:
        return Tensor._wrap(getattr(xp, name)(a.data), a.device)
    b = a._as_tensor(other)
    check_broadcast(name, a.shape, b.shape)
    return Tensor._wrap(getattr(xp, name)(a.data, b.data), a.device)


def predicate(a: Tensor, name: str) -> Tensor:
    """isfinite, isnan, isinf, ...: a bool tensor of a's shape."""
    return Tensor._wrap(getattr(devices.array_module(a.device), name)(a.data), a.device)
