"""Weight initialisation, in place and without recording a graph (PyTorch's nn.init names).

The scaled initialisers keep the variance of activations (or of gradients) about the same from
layer to layer: each draws with std = gain / sqrt(fan), where fan counts the inputs (fan_in) or
outputs (fan_out) of one unit and gain makes up for what the nonlinearity after it does to the
variance (``calculate_gain``). Xavier/Glorot averages the two fans; Kaiming/He picks one.
"""
from __future__ import annotations

import math

from .. import device as devices
from .. import random
from ..tensor import Tensor


def _fill(tensor: Tensor, draw) -> Tensor:
    """Write draw(generator) into the tensor, on its device (a GPU's generator draws float32)."""
    with devices.use(tensor.device):
        tensor.data[...] = draw(random.generator(tensor.device)).astype(tensor.dtype, copy=False)
    return tensor


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    return _fill(tensor, lambda generator: generator.standard_normal(tensor.shape) * std + mean)


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    return _fill(tensor, lambda generator: generator.uniform(a, b, tensor.shape))


def constant_(tensor: Tensor, val: float) -> Tensor:
    with devices.use(tensor.device):
        tensor.data[...] = val
    return tensor


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1)


def eye_(tensor: Tensor) -> Tensor:
    """The identity matrix (ones on the diagonal of a 2-D tensor, also a rectangular one)."""
    if tensor.ndim != 2:
        raise ValueError(f"eye_: needs a 2-D tensor, got shape {tensor.shape}")
    with devices.use(tensor.device):
        tensor.data[...] = devices.array_module(tensor.device).eye(*tensor.shape, dtype=tensor.dtype)
    return tensor


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0) -> Tensor:
    """Normal(mean, std) draws, each redrawn until it lies in [a, b] (a and b are values, not multiples
    of std). Quick when [a, b] holds a good share of the normal's mass, as the usual windows do; each
    round reads how many values are left to redraw (one host read a round: this is no hot path)."""
    if not a < b:
        raise ValueError(f"trunc_normal_: needs a < b, got a={a}, b={b}")

    def draw(generator):
        values = generator.standard_normal(tensor.shape) * std + mean
        while True:
            outside = (values < a) | (values > b)
            count = int(outside.sum())
            if count == 0:
                return values
            values[outside] = generator.standard_normal((count,)) * std + mean
    return _fill(tensor, draw)


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The factor by which the std of weights followed by `nonlinearity` is scaled up (PyTorch's values):
    1 for linear layers, convolutions and sigmoid; 5/3 for tanh; sqrt(2) for relu;
    sqrt(2 / (1 + slope^2)) for leaky_relu (param = slope, default 0.01); 3/4 for selu."""
    if nonlinearity in ("linear", "sigmoid", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                        "conv_transpose2d", "conv_transpose3d"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"calculate_gain: the negative slope of leaky_relu must be a number, got {param!r}")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _calculate_fan_in_and_fan_out(tensor: Tensor):
    """PyTorch's rule for a weight of shape (out, in, *kernel): fan_in = in * prod(kernel), fan_out =
    out * prod(kernel) (a Linear's (out, in), a convolution's (out, in, kh, kw))."""
    if tensor.ndim < 2:
        raise ValueError(f"fan in and fan out need a tensor of at least 2 dims, got shape {tensor.shape}")
    receptive_field = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive_field, tensor.shape[0] * receptive_field


def _fan(tensor: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _kaiming_std(tensor: Tensor, a, mode: str, nonlinearity: str) -> float:
    return calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    """U(-bound, bound) with bound = sqrt(3) * gain / sqrt(fan) (a uniform of that std; He et al., 2015).
    a: the negative slope of leaky_relu."""
    if 0 in tensor.shape:          # nothing to fill (and a fan of 0)
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    """N(0, std^2) with std = gain / sqrt(fan) (He et al., 2015). a: the negative slope of leaky_relu."""
    if 0 in tensor.shape:
        return tensor
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity))


def _xavier_std(tensor: Tensor, gain: float) -> float:
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """U(-bound, bound) with bound = sqrt(3) * gain * sqrt(2 / (fan_in + fan_out)) (Glorot & Bengio, 2010)."""
    bound = math.sqrt(3.0) * _xavier_std(tensor, gain)
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)) (Glorot & Bengio, 2010)."""
    return normal_(tensor, 0.0, _xavier_std(tensor, gain))


def fan_in_uniform_(tensor: Tensor, fan_in: int) -> Tensor:
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for a fan given by the caller: PyTorch's default for Linear
    weights and biases and for LSTM. For a Linear weight it is kaiming_uniform_(w, a=sqrt(5)), but a bias
    (and every LSTM tensor, whose fan is hidden_size) has no fan of its own shape, hence this form."""
    bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return uniform_(tensor, -bound, bound)
