"""Resizing and unpooling (reached as ``nn.functional.interpolate`` and ``nn.functional.max_unpool2d``).

Both are compositions of Tensor ops, so their gradients come from the ops they are made of: interpolate picks
input positions along each resized dim with index_select (whose backward adds a gradient into every position
it read, as often as it read it) and blends neighbours with weights; max_unpool2d scatters each value to the
position max_pool2d took it from (its backward gathers the gradient from there).

Where an output position reads from, for an input of n positions resized to m, follows PyTorch exactly,
including the float arithmetic it does this in (float32 positions for float32 data), so that the picked
neighbours agree at the edges:

* "nearest": src = min(floor(dst * s), n - 1), s = n / m, or 1 / scale_factor when one was given (PyTorch
  keeps the caller's scale to compute the positions); "nearest-exact": floor((dst + 0.5) s) instead.
* "linear", "bilinear": src = max((dst + 0.5) s - 0.5, 0), its two neighbours floor(src) and the next one
  (the last position repeats at the edge), weighted by how near src lies to each; with align_corners, the
  corners of input and output line up: src = dst (n - 1) / (m - 1). A dim whose size does not change blends
  each position with itself (weights 1 and 0), as PyTorch does.
"""
from __future__ import annotations

import math

import numpy as np

from .. import deferred_checks, dtypes
from .. import device as devices
from ..tensor import Tensor

MODES = {"nearest": None, "nearest-exact": None, "linear": 1, "bilinear": 2}    # the spatial dims each needs
NEAREST = ("nearest", "nearest-exact")


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                recompute_scale_factor=None, antialias: bool = False) -> Tensor:
    """Resize the spatial dims (all but the first two: batch and channels) to `size`, or by `scale_factor`."""
    if mode not in MODES:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported here; choose one of "
                                  f"{', '.join(MODES)}")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported here")
    spatial, wanted = max(input.ndim - 2, 0), MODES[mode]
    if mode in NEAREST and align_corners is not None:
        raise ValueError("interpolate: align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear")
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    in_sizes = input.shape[2:]
    if size is not None:
        out_sizes = _per_dim("size", size, spatial)
        scales = [None] * spatial
    else:
        scales = [float(s) for s in _per_dim("scale_factor", scale_factor, spatial)]
        out_sizes = [math.floor(n * s) for n, s in zip(in_sizes, scales)]
        if recompute_scale_factor:
            scales = [None] * spatial
    # PyTorch checks the arguments first (ValueError), then picks a kernel for the input's dims and the mode
    if input.ndim not in (3, 4, 5) or (wanted is not None and spatial != wanted):
        need = f"a {wanted + 2}-D input (batch, channels and {wanted} spatial dim(s))" if wanted else \
            "a 3-D, 4-D or 5-D input (batch, channels, then 1 to 3 spatial dims)"
        raise NotImplementedError(f"interpolate: mode {mode!r} needs {need}, got shape {input.shape}")
    if any(not isinstance(m, (int, np.integer)) for m in out_sizes):
        raise TypeError(f"interpolate: the output sizes must be ints, got {list(out_sizes)}")
    if min(in_sizes) <= 0 or min(out_sizes) <= 0:
        raise RuntimeError(f"interpolate: input and output sizes must be greater than 0, got input shape "
                           f"{input.shape} and output size {list(out_sizes)}")
    if 0 in input.shape[1:2]:
        raise RuntimeError(f"interpolate: expected an input with channels, got shape {input.shape}")
    # PyTorch's CPU blends 16-bit floats in float32 for bilinear (rounding once at the end), in the 16-bit
    # type itself for linear; we do the same (it decides, with infinities, between inf and nan)
    widen = mode == "bilinear" and dtypes.is_half(input.dtype)
    out = input.float() if widen else input
    for d, (n, m, s) in enumerate(zip(in_sizes, out_sizes, scales)):
        out = _resize_dim(out, 2 + d, n, int(m), s, mode, bool(align_corners))
    return out.to(dtype=input.dtype) if widen else out


def _per_dim(name: str, value, spatial: int) -> list:
    values = list(value) if isinstance(value, (tuple, list)) else [value] * spatial
    if len(values) != spatial:
        raise ValueError(f"interpolate: {name} must give one value per spatial dim ({spatial}), got {value}")
    return values


def _resize_dim(x: Tensor, dim: int, n: int, m: int, scale, mode: str, align_corners: bool) -> Tensor:
    """x resized from n to m positions along dim."""
    real = np.float64 if x.dtype == np.float64 else np.float32         # PyTorch's arithmetic for positions
    dst = np.arange(m, dtype=real)
    if mode in NEAREST:
        s = real(1.0 / scale) if scale else real(n) / real(m)
        shift = real(0.5) if mode == "nearest-exact" else real(0)
        src = np.minimum(np.floor((dst + shift) * s).astype(np.int64), n - 1)
        if m == n and mode == "nearest":                               # PyTorch's shortcut, exact
            src = np.arange(m)
        return x.index_select(dim, _indices(src, x.device))
    if m == n:
        # PyTorch's rule for an unchanged size: each position blends with itself, weights 1 and 0 (so an
        # infinity there gives inf * 1 + inf * 0 = nan, as in PyTorch)
        low = high = np.arange(n)
        far = np.zeros(m, dtype=real)
    else:
        if align_corners:
            src = dst * (real(n - 1) / real(m - 1) if m > 1 else real(0))
        else:
            s = real(1.0 / scale) if scale else real(n) / real(m)
            src = np.maximum(_fused_multiply_add(s, dst + real(0.5), real(-0.5)), real(0))
        low = np.minimum(np.floor(src).astype(np.int64), n - 1)
        high = np.minimum(low + 1, n - 1)
        far = np.clip(src - low, 0, 1).astype(real)
    # both weights computed in `real` and rounded to x's dtype, as PyTorch's lambda0 and lambda1
    near = (real(1) - far).astype(x.dtype)
    shape = [1] * x.ndim
    shape[dim] = m
    with devices.use(x.device):
        near, far = (Tensor._wrap(devices.move(w.astype(x.dtype).reshape(shape), x.device), x.device)
                     for w in (near, far))
    return x.index_select(dim, _indices(low, x.device)) * near + x.index_select(dim, _indices(high, x.device)) * far


def _fused_multiply_add(a, b, c):
    """a * b + c as PyTorch's compiled CPU kernels compute the source positions: for float32 (and the 16-bit
    floats, whose positions are float32) as one fused multiply-add, rounded once (exact in float64, then
    rounded); for float64 as written, rounded twice (what PyTorch 2.14 gives on the positions we tried, mostly).
    It matters only where a product would round to exactly 0.5 - 0.5 = 0, leaving no weight instead of a
    tiny one: whether a neighbouring infinity gives nan or inf."""
    if np.dtype(type(a)) == np.float32:
        return (np.float64(a) * np.asarray(b, dtype=np.float64) + np.float64(c)).astype(np.float32)
    return a * b + c


def _indices(positions, device: str) -> Tensor:
    with devices.use(device):
        return Tensor._wrap(devices.move(positions.astype(np.int64), device), device)


def max_unpool2d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """max_pool2d undone: each value goes back to the position `indices` (max_pool2d's return_indices) says it
    came from, a flat row * W + column of its channel's output plane; everything else is 0. The output plane is
    (H - 1) stride - 2 padding + kernel_size per dim, or output_size."""
    if input.ndim not in (3, 4):
        raise RuntimeError(f"max_unpool2d: expected a 3-D or 4-D input, got shape {input.shape}")
    if not isinstance(indices, Tensor) or indices.shape != input.shape or indices.dtype != np.int64:
        raise RuntimeError(f"max_unpool2d: indices must be an int64 tensor of the input's shape {input.shape}, got "
                           f"{getattr(indices, 'shape', type(indices).__name__)} "
                           f"{getattr(indices, 'dtype', '')}")
    pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)     # noqa: E731
    kernel = pair(kernel_size)
    stride, padding = pair(kernel if stride is None else stride), pair(padding)
    if output_size is not None:
        height, width = tuple(output_size)[-2:]
    else:
        height, width = ((n - 1) * s - 2 * p + k for n, s, p, k in zip(input.shape[-2:], stride, padding, kernel))
    plane = height * width
    flat_indices = indices.reshape(*indices.shape[:-2], -1)
    with devices.use(input.device):
        deferred_checks.check_range(input.device, flat_indices.data, plane, RuntimeError,
                                    f"max_unpool2d: an index is out of range for an output plane of {height} x "
                                    f"{width} (flat indices 0..{plane - 1})")
        zeros = Tensor._wrap(devices.array_module(input.device).zeros((*input.shape[:-2], plane), input.dtype),
                             input.device)
    out = zeros.scatter(-1, flat_indices, input.reshape(*input.shape[:-2], -1))
    return out.reshape(*input.shape[:-2], height, width)
