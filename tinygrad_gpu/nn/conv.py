"""Convolution and pooling layers: Conv2d, MaxPool2d, AvgPool2d. Thin Modules around the functions of
``ops/conv.py`` and ``ops/pooling.py`` (F.conv2d, F.max_pool2d, F.avg_pool2d), with PyTorch's names and
parameter layout."""
from __future__ import annotations

import math

from .. import creation
from ..ops.conv import pair
from . import functional as F
from . import init
from .module import Module, Parameter


class Conv2d(Module):
    """A 2-d convolution (cross-correlation, as in PyTorch), weight stored as (out, in / groups, kh, kw)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, device=None, dtype=None):
        super().__init__()
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: groups={groups} must divide in_channels ({in_channels}) and "
                             f"out_channels ({out_channels})")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = pair("Conv2d", "kernel_size", kernel_size, 1)
        self.stride, self.dilation = pair("Conv2d", "stride", stride, 1), pair("Conv2d", "dilation", dilation, 1)
        if isinstance(padding, str) and padding == "same" and self.stride != (1, 1):
            raise ValueError(f"Conv2d: padding='same' needs stride 1, got stride {self.stride}")
        self.padding = padding if isinstance(padding, str) else pair("Conv2d", "padding", padding, 0)
        self.weight = Parameter(creation.empty(out_channels, in_channels // groups, *self.kernel_size,
                                               device=device, dtype=dtype))
        self.bias = Parameter(creation.empty(out_channels, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        # each output sums over (in / groups) * kh * kw inputs: PyTorch's fan_in for the bound
        fan_in = math.prod(self.weight.shape[1:])
        init.fan_in_uniform_(self.weight, fan_in)
        if self.bias is not None:
            init.fan_in_uniform_(self.bias, fan_in)

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self):
        extras = [f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"]
        if self.padding != (0, 0):
            extras.append(f"padding={self.padding!r}")
        if self.dilation != (1, 1):
            extras.append(f"dilation={self.dilation}")
        if self.groups != 1:
            extras.append(f"groups={self.groups}")
        if self.bias is None:
            extras.append("bias=False")
        return ", ".join(extras)


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, kernel_size if stride is None else stride, padding
        self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override

    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                            self.divisor_override)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
