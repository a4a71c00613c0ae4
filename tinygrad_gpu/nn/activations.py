"""Activation functions with PyTorch's names and signatures (reached as ``nn.functional.<name>``).

Each is a composition of Tensor ops, so its gradient and second derivative come from the ops
it is made of. softplus, and logsigmoid and mish built on it, use the Softplus Function
(ops/activations.py says why). Integer inputs compute in float32, as the math functions do.

At their kinks they follow PyTorch's backward formulas:
- leaky_relu, elu, selu, celu: at 0 the slope of the negative side (alpha for elu, 1 for celu);
- hardtanh, relu6, hardsigmoid: gradient only strictly inside the sloped piece, 0 at its ends;
- hardswish: slope x/3 + 1/2 strictly inside (-3, 3); 0 at -3 and 1 at 3.
"""
from __future__ import annotations

import math

from ..ops.activations import Softplus
from ..ops.elementwise import where
from ..tensor import Tensor

# SELU's constants (Klambauer et al., 2017), to the digits PyTorch uses
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def silu(input: Tensor) -> Tensor:
    """x * sigmoid(x) (also called swish)."""
    x = input._floating()
    return x * x.sigmoid()


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta; x itself where beta x > threshold."""
    return Softplus.apply(input._floating()._in_float32(), beta=beta, threshold=threshold)   # autocast: float32


def logsigmoid(input: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), finite for any x."""
    return -Softplus.apply(-input._floating(), beta=1.0, threshold=math.inf)


def mish(input: Tensor) -> Tensor:
    """x * tanh(softplus(x))."""
    x = input._floating()
    return x * Softplus.apply(x, beta=1.0, threshold=math.inf).tanh()


def softsign(input: Tensor) -> Tensor:
    """x / (1 + |x|)."""
    x = input._floating()
    return x / (1 + x.abs())


def softmin(input: Tensor, dim: int) -> Tensor:
    """softmax(-x) along dim."""
    return (-input._floating()).softmax(dim)


def _expm1_of_negative_part(x: Tensor) -> Tensor:
    """exp(min(x, 0)) - 1: the negative branch of the ELU family. The min matters where x > 0:
    that branch is not picked there, but exp(x) could overflow to inf, and the zero gradient that
    `where` sends into the unpicked branch would become 0 * inf = nan."""
    return x.clamp(max=0).exp() - 1


def elu(input: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha (exp(x) - 1) otherwise."""
    x = input._floating()
    return where(x > 0, x, alpha * _expm1_of_negative_part(x))


def selu(input: Tensor) -> Tensor:
    """scale * elu(x, alpha) with SELU's self-normalising constants."""
    return SELU_SCALE * elu(input, SELU_ALPHA)


def celu(input: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha (exp(x / alpha) - 1) otherwise."""
    if alpha == 0:
        raise RuntimeError("celu: alpha must not be 0 (the formula divides by it)")
    x = input._floating()
    return where(x > 0, x, alpha * _expm1_of_negative_part(x / alpha))


def leaky_relu(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    """x for x > 0, negative_slope * x otherwise."""
    x = input._floating()
    return where(x > 0, x, x * negative_slope)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """x clipped to [min_val, max_val]. Unlike clamp (whose gradient passes at the bounds), the
    gradient is 0 at the bounds themselves, as PyTorch's hardtanh gives it."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) must not be greater than max_val ({max_val})")
    x = input._floating()
    return where(x <= min_val, min_val, where(x >= max_val, max_val, x))


def relu6(input: Tensor) -> Tensor:
    """min(max(x, 0), 6), as hardtanh(x, 0, 6) (PyTorch defines it so, kinks included)."""
    return hardtanh(input, 0.0, 6.0)


def hardsigmoid(input: Tensor) -> Tensor:
    """relu6(x + 3) / 6: 0 below -3, 1 above 3, a line between."""
    return relu6(input._floating() + 3) / 6


def hardswish(input: Tensor) -> Tensor:
    """x * relu6(x + 3) / 6: 0 up to -3, x from 3 on, x (x + 3) / 6 between. Written piece by piece so
    that the kinks get PyTorch's slopes: 0 at -3, 1 at 3 (the outer pieces' slopes)."""
    x = input._floating()
    return where(x <= -3, 0.0, where(x >= 3, x, x * (x + 3) / 6))
