"""GELU, tanh approximation: gelu.cu, its NumPy reference, its launcher."""
from __future__ import annotations

import contextlib
import math

import numpy as np

from .. import device as devices
from . import runtime

FILE = "gelu.cu"
K, C = math.sqrt(2 / math.pi), 0.044715


# ----------------------------------------------------------------------------- reference
# Both directions are written in place, a few buffers for the whole formula, and run chunk by
# chunk (runtime.by_chunks): a fresh array per operation would make the CPU fetch fresh memory
# each time, and that, not the arithmetic, is what a GELU costs on a CPU.

def _tanh_of_argument(x, square, out):
    """out = t = tanh(K x (1 + C x^2)), given x^2 in `square` (which may be `out` itself)."""
    xp = runtime.array_module_of(x)
    xp.multiply(square, K * C, out=out)
    out += K
    out *= x                      # the tanh's argument, K x (1 + C x^2)
    return xp.tanh(out, out=out)


def _forward(x, out):
    """out = 0.5 x (1 + tanh(K x (1 + C x^2))). No clip is needed: for |x| > 1.8e19, x^2 overflows
    to inf, the tanh is then exactly +-1 and out is x or 0, as it should be."""
    xp = runtime.array_module_of(x)
    xp.square(x, out=out)         # not multiply(x, x, out=): NumPy squares twice as fast
    _tanh_of_argument(x, out, out)
    out += 1
    out *= x
    out *= 0.5


def _forward_and_slope(x, slope, out):
    """out = gelu(x), rounded exactly as _forward rounds it, and slope = gelu'(x), in one pass over
    the data: a training step's forward keeps the slope, and its backward is then one
    multiplication instead of recomputing tanh.

    gelu'(x) = 0.5 (1 + t) + x b (1 - t^2), with t = tanh(K x (1 + C x^2)) and b = 0.5 K (1 + 3 C x^2)
    (the slope of the tanh's argument, halved); factored as (1 + t) (0.5 + x b (1 - t)).
    That costs two operations fewer than _capped_forward_and_slope, but x b overflows to inf
    once |x| passes about 1e12, and inf * (1 - t) is then nan where it should be 0. NumPy can
    tell: such a chunk raises, and is computed again the capped way. CuPy raises nothing and
    always takes the capped way.
    """
    xp = runtime.array_module_of(x)
    if xp is np:
        try:
            with np.errstate(over="raise", invalid="raise"):
                _factored_forward_and_slope(x, slope, out)
            return
        except FloatingPointError:
            pass
    _capped_forward_and_slope(x, slope, out)


def _factored_forward_and_slope(x, slope, out):
    xp = runtime.array_module_of(x)
    t = _tanh_of_argument(x, xp.square(x, out=slope), out)
    slope *= 1.5 * K * C
    slope += 0.5 * K
    slope *= x                    # x b
    slope *= xp.subtract(1, t)    # a chunk-sized array, which the allocator hands back each chunk
    slope += 0.5
    t += 1                        # t <- 1 + t
    slope *= t                    # (1 + t) (0.5 + x b (1 - t))
    t *= x
    t *= 0.5                      # out = 0.5 x (1 + t)


def _capped_forward_and_slope(x, slope, out):
    """The unfactored sum, for any x: x^2 is capped at 1e30 so that b stays finite, and 1 - t^2 is
    multiplied in before x, so that where |x| is huge b (1 - t^2) x is 0 rather than inf * 0 = nan."""
    xp = runtime.array_module_of(x)
    xp.square(x, out=slope)
    t = _tanh_of_argument(x, xp.minimum(slope, 1e30, out=slope), out)
    slope *= 1.5 * K * C
    slope += 0.5 * K              # b
    scratch = xp.subtract(1, t)
    slope *= scratch
    t += 1                        # t <- 1 + t
    slope *= t                    # b (1 - t^2)
    slope *= x
    xp.multiply(t, 0.5, out=scratch)
    slope += scratch              # + 0.5 (1 + t)
    t *= x
    t *= 0.5                      # out = 0.5 x (1 + t)


def _backward(x, dy, out):
    """out = dy gelu'(x), the slope recomputed from x (the kernel's way: nothing kept by the forward)."""
    _forward_and_slope(x, out, runtime.array_module_of(x).empty_like(out))
    out *= dy


def _in_place(compute, x, *others):
    """compute(x, *others, out=...) on 1-D views (out= cannot take NumPy's 0-d scalars), chunk by chunk,
    in float32 at least (the cap on x^2 above must be a finite number)."""
    xp, work = runtime.array_module_of(x), runtime.working_dtype(x.dtype)
    out = xp.empty(x.size, work)
    with _overflow_is_expected(xp):
        runtime.by_chunks(compute, *(a.reshape(-1).astype(work, copy=False) for a in (x, *others)), out=out)
    return out.reshape(x.shape).astype(x.dtype, copy=False)


def _overflow_is_expected(xp):
    """x^2 overflows to inf for huge |x| (see above), on purpose: NumPy would warn, CuPy never does."""
    return np.errstate(over="ignore") if xp is np else contextlib.nullcontext()


def reference_forward(x):
    return _in_place(_forward, x)


def reference_backward(x, dy):
    return _in_place(_backward, x, dy)


def reference_forward_and_slope(x):
    """(gelu(x), gelu'(x)); reference_backward(x, dy) is dy times the second."""
    work = runtime.working_dtype(x.dtype)
    slope = runtime.array_module_of(x).empty(x.shape, work)
    out = _in_place(_forward_and_slope, x, slope.reshape(-1))
    return out, slope


# ----------------------------------------------------------------------------- launcher
def _elementwise(kernel: str, device: str, *inputs):
    xp = devices.array_module(device)
    inputs = [runtime.contiguous(xp, a, np.float32) for a in inputs]
    out = xp.empty(inputs[0].shape, np.float32)
    n = out.size
    if n:
        runtime.launch(device, FILE, kernel, (runtime.grid_stride_grid(n),), (256,), [*inputs, out, np.int64(n)])
    return out


def forward(x, device: str):
    if not runtime.use_kernel(device, x):
        return reference_forward(x)
    return _elementwise("gelu_forward", device, x)


def forward_keeping_slope(x, device: str):
    """(out, slope) for a forward whose backward will follow: slope is gelu'(x) where the NumPy
    reference runs, None where the kernel does. On a CPU, keeping the slope instead of recomputing
    tanh in the backward takes 7-15% off GELU's two directions (an array per layer kept
    until the backward); the GPU's backward kernel recomputes it, keeping nothing."""
    if not runtime.use_kernel(device, x):
        return reference_forward_and_slope(x)
    return forward(x, device), None


def backward(x, dy, device: str, slope=None, overwrite: bool = False):
    """dx for the output's gradient dy; `slope` is what forward_keeping_slope() kept, if anything.
    overwrite=True: dy is the caller's scratch, and dx = slope dy is computed in its memory."""
    if slope is not None:
        dx = runtime.array_module_of(dy).multiply(slope, dy, out=dy if overwrite else None)
        return dx.astype(x.dtype, copy=False)                # x's dtype, as reference_backward returns
    if not runtime.use_kernel(device, x, dy):
        return reference_backward(x, dy)
    return _elementwise("gelu_backward", device, x, dy)
