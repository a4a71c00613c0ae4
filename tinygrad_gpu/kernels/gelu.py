"""GELU (tanh): GeluTanh.composition (ops/fused.py) · reference_* · gelu.cu (cuda, emu) · *_cpu.py (cpu).

This file holds the reference and the launcher; kernels/__init__.py says when each definition runs."""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from . import cpu_paths, runtime

FILE = "gelu.cu"
K, C = math.sqrt(2 / math.pi), 0.044715


# ----------------------------------------------------------------------------- reference
# gelu.cu's formulas, as its header states them. For |x| > about 1e13, x^3 overflows to inf and t
# is exactly +-1, as on a GPU: NumPy would warn about that overflow, and about the 0 * inf the
# kernel skips with its branch, which where() skips here. float32 and float64 data is computed in
# its own dtype; float16 and bfloat16 data in float32, rounded once to its dtype at the end, as
# the kernel's 16-bit entry points do (runtime.working_dtype).

def reference_forward(x):
    """gelu(x) in x's dtype."""
    xp, v = runtime.array_module_of(x), x.astype(runtime.working_dtype(x.dtype))
    with np.errstate(over="ignore"):
        t = xp.tanh(K * (v + C * v * v * v))
    return (0.5 * v * (1 + t)).astype(x.dtype)


def reference_backward(x, dout):
    """dout * gelu'(x) in x's dtype."""
    xp, v = runtime.array_module_of(x), x.astype(runtime.working_dtype(x.dtype))
    with np.errstate(over="ignore", invalid="ignore"):
        t = xp.tanh(K * (v + C * v * v * v))
        sech2 = 1 - t * t
        slope = 0.5 * (1 + t) + xp.where(sech2 != 0, 0.5 * v * sech2 * K * (1 + 3 * C * v * v), 0)
    return (dout * slope).astype(x.dtype)          # a 16-bit dout times the float32 slope is float32


# ----------------------------------------------------------------------------- launcher
def _elementwise(kernel: str, device: str, *inputs, into_last: bool = False):
    """Launch `kernel` for inputs of one dtype (float32, float16 or bfloat16); the output has it too. into_last:
    the output is written over the last input (a spare array; a copy made by contiguous() is spare too)."""
    xp, dtype = devices.array_module(device), inputs[0].dtype
    inputs = [runtime.contiguous(xp, a) for a in inputs]
    out = inputs[-1] if into_last else xp.empty(inputs[0].shape, dtype)
    n = out.size
    if n:
        runtime.launch(device, FILE, runtime.entry_point(kernel, dtype), (runtime.grid_stride_grid(n),), (256,),
                       [*inputs, out, np.int64(n)])
    return out


def forward(x, device: str):
    cpu = cpu_paths.cpu_kernels(device, x)
    if cpu:
        return cpu.gelu_forward(x, K, C)
    if not runtime.use_kernel(device, x, half=True):
        return reference_forward(x)
    return _elementwise("gelu_forward", device, x)


def forward_keeping_slope(x, device: str):
    """(gelu(x), slope) for a forward whose backward will follow: on the CPU, for float32 and float64
    data, slope is gelu'(x), which makes the backward one multiplication (fast_cpu.py says why);
    elsewhere it is None, and the backward recomputes it."""
    cpu = cpu_paths.cpu_kernels(device, x)
    if cpu:
        return cpu.gelu_forward_and_slope(x, K, C)
    return forward(x, device), None


def backward(x, dout, device: str, slope=None, dout_is_spare: bool = False):
    """dx for the output's gradient dout; `slope` is what forward_keeping_slope() kept, if anything. dout_is_spare:
    nobody else holds dout, and dx is computed in it (a copy made by contiguous() is spare too)."""
    cpu = None if slope is None else cpu_paths.cpu_kernels(device)
    if cpu:          # (switched to the reference since the forward: the slope is recomputed, below)
        return cpu.gelu_backward_from_slope(slope, dout, x.dtype, dout_is_spare)
    if not runtime.use_kernel(device, x, dout, half=True):
        return reference_backward(x, dout)
    return _elementwise("gelu_backward", device, x, dout, into_last=dout_is_spare)
