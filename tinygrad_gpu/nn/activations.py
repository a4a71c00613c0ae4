"""Activation functions with PyTorch's names and signatures (reached as ``nn.functional.<name>``).

Each is a composition of Tensor ops, so its gradient and second derivative come from the ops
it is made of. softplus, and logsigmoid and mish built on it, use the Softplus Function
(ops/activations.py says why). Integer and bool inputs go where PyTorch takes them: hardtanh and relu6
keep an integer tensor's dtype, softsign computes it in float32, and the others refuse both
(NotImplementedError, as PyTorch's kernels have no integer versions).

At their kinks they follow PyTorch's backward formulas:
- leaky_relu, elu, selu, celu: at 0 the slope of the negative side (alpha for elu, 1 for celu);
- hardtanh, relu6, hardsigmoid: gradient only strictly inside the sloped piece, 0 at its ends;
- hardswish: slope x/3 + 1/2 strictly inside (-3, 3); 0 at -3 and 1 at 3.
"""
from __future__ import annotations

import math

from .. import dtypes
from ..ops.activations import Softplus
from ..ops.elementwise import where
from ..tensor import Tensor

# SELU's constants (Klambauer et al., 2017), to the digits PyTorch uses
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def floating_only(op: str, x: Tensor) -> Tensor:
    """x, when it is floating-point; PyTorch computes these activations for floats only."""
    if not x.is_floating_point():
        raise NotImplementedError(f"{op}: not implemented for {x.dtype} tensors (as in PyTorch); convert first, "
                                  "e.g. x.float()")
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


def softmin(input: Tensor, dim: int) -> Tensor:
    """softmax(-x) along dim."""
    return (-floating_only("softmin", input)).softmax(dim)


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
    dtypes.reject_bool("hardtanh", x.dtype)
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
    that the kinks get PyTorch's slopes: 0 at -3, 1 at 3 (the outer pieces' slopes)."""
    x = floating_only("hardswish", input)
    return where(x <= -3, 0.0, where(x >= 3, x, x * (x + 3) / 6))
