"""Weight initialisation, in place and without recording a graph (PyTorch's nn.init names)."""
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


def zeros_(tensor: Tensor) -> Tensor:
    tensor.data[...] = 0
    return tensor


def ones_(tensor: Tensor) -> Tensor:
    tensor.data[...] = 1
    return tensor


def fan_in_uniform_(tensor: Tensor, fan_in: int) -> Tensor:
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for Linear weights and biases and for LSTM."""
    bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return uniform_(tensor, -bound, bound)
