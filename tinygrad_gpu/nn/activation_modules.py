"""Activation functions as Modules, with torch.nn's names, for Sequential stacks: ``Sequential(Linear(4, 8),
Tanh(), Linear(8, 1))``. Each is its function from ``nn.functional`` (or the Tensor method) and the options
it was built with; GELU and ReLU live in layers.py.

torch's ``inplace=True`` overwrites the input to save memory. Here no op overwrites a tensor that autograd may
still need, so ``inplace=True`` is refused rather than silently ignored (the result would be right, but code
that relies on the input having changed would not be).
"""
from __future__ import annotations

from . import functional as F
from .module import Module


def _no_inplace(name: str, inplace: bool) -> None:
    if inplace:
        raise ValueError(f"{name}: inplace=True is not supported (no op here overwrites its input); "
                         "drop the argument to get the same values in a new tensor")


class Identity(Module):
    """Returns its input; takes and ignores any arguments, as torch's does (a placeholder for a layer)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Tanh(Module):
    def forward(self, input):
        return input.tanh()


class Sigmoid(Module):
    def forward(self, input):
        return input.sigmoid()


class SiLU(Module):
    """x * sigmoid(x)."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        _no_inplace("SiLU", inplace)

    def forward(self, input):
        return F.silu(input)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        _no_inplace("LeakyReLU", inplace)
        self.negative_slope = negative_slope

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}"


class ELU(Module):
    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        _no_inplace("ELU", inplace)
        self.alpha = alpha

    def forward(self, input):
        return F.elu(input, self.alpha)

    def extra_repr(self):
        return f"alpha={self.alpha}"


class Softplus(Module):
    """log(1 + exp(beta x)) / beta; x itself where beta x > threshold."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class _AlongDim(Module):
    """Softmax and LogSoftmax. torch's dim=None picks a dim by the input's rank (deprecated there, with a
    warning); here it is an error, since the guess is often the batch dim."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def _dim(self, input) -> int:
        if self.dim is None:
            raise ValueError(f"{type(self).__name__}: dim=None would guess the dimension for input of shape "
                             f"{input.shape}; build it with the dim to normalise, e.g. {type(self).__name__}(dim=-1)")
        return self.dim

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmax(_AlongDim):
    def forward(self, input):
        return F.softmax(input, self._dim(input))


class LogSoftmax(_AlongDim):
    def forward(self, input):
        return F.log_softmax(input, self._dim(input))
