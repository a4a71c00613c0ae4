"""Activation functions with PyTorch's names and signatures (reached as ``nn.functional.<name>``).

Each is a composition of Tensor ops, so its gradient and second derivative come from the ops
it is made of. softplus, and logsigmoid and mish built on it, use the Softplus Function
(ops/activations.py says why). Integer and bool inputs go where PyTorch takes them: hardtanh, relu6 and
threshold keep an integer tensor's dtype, softsign and tanhshrink compute it in float32, and the others
refuse both (NotImplementedError, as PyTorch's kernels have no integer versions). Bool is refused with
PyTorch's kind of error: RuntimeError where it refuses bool on purpose (hardtanh, relu6, and tanhshrink and
softmin, whose subtraction and negation do), NotImplementedError elsewhere.

At their kinks they follow PyTorch's backward formulas:
- leaky_relu, elu, selu, celu: at 0 the slope of the negative side (alpha for elu, 1 for celu);
- hardtanh, relu6, hardsigmoid: gradient only strictly inside the sloped piece, 0 at its ends;
- hardswish: slope x/3 + 1/2 strictly inside (-3, 3); 0 at -3 and 1 at 3;
- hardshrink, softshrink: 0 on [-lambd, lambd], ends included; threshold: 0 at x == threshold.
"""
from __future__ import annotations

import math

from .. import dtypes
from ..ops.activations import Softplus
from ..ops.elementwise import where
from ..ops.movement import normalize_dim
from ..tensor import Tensor

# SELU's constants (Klambauer et al., 2017), to the digits PyTorch uses
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def floating_only(op: str, x: Tensor) -> Tensor:
    """x, when it is floating-point; PyTorch computes these activations for floats only."""
    dtypes.reject_non_floating(op, x.dtype)
    return x


def silu(input: Tensor) -> Tensor:
    """x * sigmoid(x) (also called swish)."""
    x = floating_only("silu", input)
    return x * x.sigmoid()


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta; x itself where beta x > threshold."""
    x = floating_only("softplus", input)._in_float32()          # autocast: float32
    return Softplus.apply(x, beta=beta, threshold=threshold)


def logsigmoid(input: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), finite for any x."""
    return -Softplus.apply(-floating_only("logsigmoid", input), beta=1.0, threshold=math.inf)


def mish(input: Tensor) -> Tensor:
    """x * tanh(softplus(x))."""
    x = floating_only("mish", input)
    return x * Softplus.apply(x, beta=1.0, threshold=math.inf).tanh()


def softsign(input: Tensor) -> Tensor:
    """x / (1 + |x|) (an integer tensor gives float32 through the division; a bool one has no abs)."""
    return input / (1 + input.abs())


# ----------------------------------------------------------------------------- softmax and friends
def _implicit_softmax_dim(ndim: int) -> int:
    """PyTorch's old rule for a softmax called without dim (it warns that this is deprecated): dim 0 for 0-, 1-
    and 3-d inputs, else dim 1."""
    return 0 if ndim in (0, 1, 3) else 1


def _softmax_family(op: str, input: Tensor, dim, dtype, method: str) -> Tensor:
    """softmax or log_softmax along dim, in PyTorch's order of checks: the dim first (IndexError), then the
    dtype (converted to `dtype` when one is given). There is no integer softmax (NotImplementedError), but an
    empty integer tensor has nothing to compute and comes back as it is, as in PyTorch."""
    if dim is None:
        dim = _implicit_softmax_dim(input.ndim)
    normalize_dim(op, dim, max(input.ndim, 1))             # a 0-d tensor takes dim 0 or -1
    x = input if dtype is None else input.to(dtype=dtype)
    if x.numel() == 0 and not x.is_floating_point():
        return x.clone()
    return getattr(x, method)(dim)


def softmax(input: Tensor, dim: int = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """exp(x) / sum(exp(x)) along dim: positive, summing to 1. dtype converts x first (softmax of 16-bit
    data in float32, say); computed in float32 for 16-bit floats and rounded once."""
    return _softmax_family("softmax", input, dim, dtype, "softmax")


def log_softmax(input: Tensor, dim: int = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """log(softmax(x)) along dim, computed as x - logsumexp(x) so that it stays finite where softmax
    underflows to 0."""
    return _softmax_family("log_softmax", input, dim, dtype, "log_softmax")


def softmin(input: Tensor, dim: int = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """softmax(-x) along dim: the smallest values weigh most. Negating comes first, as in PyTorch, so a bool
    tensor is refused for that (there is no -bool: a RuntimeError, PyTorch's class) before its dim is
    looked at."""
    dtypes.reject_bool("softmin", input.dtype, advice="negating a mask is ~mask; for numbers convert first, "
                       "e.g. x.float()", error=RuntimeError)
    return _softmax_family("softmin", -input, dim, dtype, "softmax")


def _expm1_of_negative_part(x: Tensor) -> Tensor:
    """exp(min(x, 0)) - 1: the negative branch of the ELU family. The min matters where x > 0:
    that branch is not picked there, but exp(x) could overflow to inf, and the zero gradient that
    `where` sends into the unpicked branch would become 0 * inf = nan."""
    return x.clamp(max=0).exp() - 1


def elu(input: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha (exp(x) - 1) otherwise."""
    x = floating_only("elu", input)
    return where(x > 0, x, alpha * _expm1_of_negative_part(x))


def selu(input: Tensor) -> Tensor:
    """scale * elu(x, alpha) with SELU's self-normalising constants."""
    return SELU_SCALE * elu(floating_only("selu", input), SELU_ALPHA)


def celu(input: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha (exp(x / alpha) - 1) otherwise."""
    if alpha == 0:
        raise RuntimeError("celu: alpha must not be 0 (the formula divides by it)")
    x = floating_only("celu", input)
    return where(x > 0, x, alpha * _expm1_of_negative_part(x / alpha))


def leaky_relu(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    """x for x > 0, negative_slope * x otherwise."""
    x = floating_only("leaky_relu", input)
    return where(x > 0, x, x * negative_slope)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """x clipped to [min_val, max_val]. Unlike clamp (whose gradient passes at the bounds), the
    gradient is 0 at the bounds themselves, as PyTorch's hardtanh gives it."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) must not be greater than max_val ({max_val})")
    x = input
    dtypes.reject_bool("hardtanh", x.dtype, error=RuntimeError)
    if not x.is_floating_point():          # PyTorch keeps an integer tensor's dtype: the bounds become integers
        min_val, max_val = int(min_val), int(max_val)
    return where(x <= min_val, min_val, where(x >= max_val, max_val, x))


def relu6(input: Tensor) -> Tensor:
    """min(max(x, 0), 6), as hardtanh(x, 0, 6) (PyTorch defines it so, kinks included)."""
    return hardtanh(input, 0.0, 6.0)


def hardsigmoid(input: Tensor) -> Tensor:
    """relu6(x + 3) / 6: 0 below -3, 1 above 3, a line between."""
    return relu6(floating_only("hardsigmoid", input) + 3) / 6


def hardswish(input: Tensor) -> Tensor:
    """x * relu6(x + 3) / 6: 0 up to -3, x from 3 on, x (x + 3) / 6 between. Written piece by piece so
    that the kinks get PyTorch's slopes: 0 at -3, 1 at 3 (the outer pieces' slopes). The flat piece is
    x * 0 rather than 0, as PyTorch's x * relu6(x + 3) / 6 computes it: -inf gives nan there, and
    x < 0 gives -0.0."""
    x = floating_only("hardswish", input)
    return where(x <= -3, x * 0, where(x >= 3, x, x * (x + 3) / 6))


# ----------------------------------------------------------------------------- shrinkage and thresholds
def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """x where |x| > lambd, 0 inside [-lambd, lambd] (the ends included). nan stays nan, as in PyTorch
    (it is not inside the interval); a negative lambd makes the interval empty, so x comes back unchanged.
    The gradient is 1 outside the interval and 0 inside it."""
    x = floating_only("hardshrink", input)
    return where((x >= -lambd) & (x <= lambd), 0.0, x)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """x - lambd above lambd, x + lambd below -lambd, 0 between: hardshrink with the jumps taken out, so the
    result is continuous. The middle piece is x * 0, as PyTorch computes it (nan stays nan, -0.5 gives -0.0).
    lambd must be >= 0 (PyTorch refuses a negative one: the pieces would overlap)."""
    x = floating_only("softshrink", input)
    if not lambd >= 0:
        raise RuntimeError(f"softshrink: lambda must be in range [0, inf) (a negative one makes the pieces "
                           f"overlap), but found {lambd}")
    return where(x > lambd, x - lambd, where(x < -lambd, x + lambd, x * 0))


def tanhshrink(input: Tensor) -> Tensor:
    """x - tanh(x): about x^3 / 3 near 0, x -+ 1 far from it. An integer tensor computes in float32
    (through tanh, as in PyTorch); a bool one has no subtraction."""
    dtypes.reject_bool("tanhshrink", input.dtype, advice="convert first, e.g. x.float()", error=RuntimeError)
    return input - input.tanh()


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """x where x > threshold, `value` elsewhere (nan stays nan: it is not <= threshold). The gradient passes
    only where x > threshold. An integer tensor keeps its dtype: threshold and value become integers first
    (truncated toward zero, as PyTorch converts them to the tensor's type); bool has no version."""
    if inplace:
        raise NotImplementedError("threshold: inplace=True is not supported here; use the returned tensor")
    x = input
    if x.dtype == dtypes.bool_:
        raise NotImplementedError("threshold: not implemented for bool tensors (as in PyTorch); convert first, "
                                  "e.g. x.float()")
    if not x.is_floating_point():
        threshold, value = int(threshold), int(value)
    return where(x <= threshold, value, x)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """The gated linear unit: split x in two halves a, b along dim, and give a * sigmoid(b) (the second half
    gates the first). The dim's size must be even; the result has half of it."""
    if input.ndim == 0:
        raise RuntimeError("glu: does not support 0-d tensors (scalars): the halved dim must have an even size")
    d = normalize_dim("glu", dim, input.ndim)
    size = input.shape[d]
    if size % 2:
        raise RuntimeError(f"glu: halving dimension must be even, but dimension {d} of input shape {input.shape} "
                           f"is size {size}")
    x = floating_only("glu", input)
    a = x.narrow(d, 0, size // 2)
    b = x.narrow(d, size // 2, size // 2)
    return a * b.sigmoid()
