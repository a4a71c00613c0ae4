"""Pooling: each window of the input reduced to one value, through the patches of ops/conv.py's im2col.

    max_pool2d   the largest value of each window (its gradient goes to that element, the first of equal ones)
    avg_pool2d   the mean of each window (counting the zero padding or not)
    adaptive_avg_pool2d   the mean over windows chosen so that the output has a given size

The 1-d versions are the 2-d ones on images of height 1. adaptive_avg_pool2d, whose windows differ in
size, gathers them with index_select instead of im2col. Output sizes, the checks and their order, and the
dtypes taken (integers for max_pool2d, floats for the rest) are PyTorch's.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import device as devices
from .. import dtypes
from ..tensor import Tensor
from .conv import Im2col, Windows, _batched, im2col_array, pair, single
from .elementwise import where


def _check_float(op: str, x: Tensor) -> None:
    if not x.is_floating_point():
        raise RuntimeError(f"{op}: needs a floating-point input, got {x.dtype}; convert it with .float()")


def _pool_output_size(size: int, pad: int, kernel: int, stride: int, dilation: int, ceil_mode: bool) -> int:
    """How many windows fit along one axis (PyTorch's pooling_output_shape): floor, or with ceil_mode ceil, of
    (size + 2 pad - reach) / stride, plus one; a ceil_mode window must still start inside the input or its
    left padding. May be 0 or less: the caller says that is too small."""
    reach = dilation * (kernel - 1) + 1
    count = (size + 2 * pad - reach + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (count - 1) * stride >= size + pad:
        count -= 1
    return count


def _check_pool_input(op: str, input: Tensor, spatial: int = 2) -> None:
    """(C, *spatial) or (N, C, *spatial) with nothing empty but the batch, as PyTorch's pooling requires."""
    if input.ndim not in (spatial + 1, spatial + 2) or 0 in input.shape[input.ndim - spatial - 1:] or \
            (input.ndim == spatial + 1 and input.shape[0] == 0):
        raise RuntimeError(f"{op}: expected a {spatial + 1}-d or {spatial + 2}-d (batch mode) input with nothing empty "
                           f"but the batch, got shape {input.shape}")


def _pool_windows(op: str, x: Tensor, kernel_size, stride, padding, dilation, ceil_mode: bool) -> Windows:
    kernel = pair(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None or stride == () or stride == [] else pair(op, "stride", stride, 1)
    padding, dilation = pair(op, "padding", padding, 0), pair(op, "dilation", dilation, 1)
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise RuntimeError(f"{op}: padding {padding} must be at most half of kernel_size {kernel}")
    out_size = tuple(_pool_output_size(size, p, k, s, d, ceil_mode) for size, p, k, s, d in
                     zip(x.shape[2:], padding, kernel, stride, dilation))
    if min(out_size) < 1:
        raise RuntimeError(f"{op}: an input of spatial size {tuple(x.shape[2:])} with kernel_size {kernel}, stride "
                           f"{stride}, padding {padding} and dilation {dilation} gives an output of size {out_size}, "
                           "too small; use a smaller kernel or more padding")
    return Windows(kernel, stride, dilation, padding, x.shape[2:], out_size)


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """The largest value of each window; padding reads -inf, so it never wins. stride defaults to kernel_size.

    The gradient goes to the FIRST maximum of each window in row-major order (PyTorch's rule at ties);
    return_indices also gives where each maximum sits, as a flat index into its channel's H * W input.
    """
    op = "max_pool2d"
    _check_pool_input(op, input)
    x, unbatched = _batched(op, input)
    if x.dtype == dtypes.bool_:
        raise RuntimeError(f"{op}: bool input is not supported; convert it with .float() or .long()")
    windows = _pool_windows(op, x, kernel_size, stride, padding, dilation, ceil_mode)
    values, picked = _max_over_windows(x, windows)
    if unbatched:
        values, picked = values.squeeze(0), picked.squeeze(0)
    if not return_indices:
        return values
    return values, _input_positions(picked, windows)


def _max_over_windows(x: Tensor, windows: Windows):
    """Each window's largest value, and which of its kernel elements holds it (N, C, OH, OW) each."""
    fill = -math.inf if x.is_floating_point() else int(np.iinfo(x.dtype).min)
    n, c = x.shape[:2]
    patches = Im2col.apply(x, windows=windows, fill=fill).reshape(n, c, math.prod(windows.kernel), *windows.out_size)
    return patches.max(dim=2)           # max(dim) sends the gradient to argmax: the first maximum


def max_pool1d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """The largest value of each window along the last dim of (N, C, L) or (C, L): max_pool2d of a height-1
    image (the same windows, one row of them). Floating point only, as PyTorch's max_pool1d."""
    op = "max_pool1d"
    _check_pool_input(op, input, spatial=1)
    dtypes.reject_non_floating(op, input.dtype)
    kernel = single(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None or stride == () or stride == [] else single(op, "stride", stride, 1)
    x = input.unsqueeze(-2) if input.ndim == 3 else input.unsqueeze(0).unsqueeze(-2)
    windows = _pool_windows(op, x, (1, kernel), (1, stride), (0, single(op, "padding", padding, 0)),
                            (1, single(op, "dilation", dilation, 1)), ceil_mode)
    values, picked = _max_over_windows(x, windows)
    positions = _input_positions(picked, windows) if return_indices else None
    values = values.squeeze(-2) if input.ndim == 3 else values.squeeze(-2).squeeze(0)
    if not return_indices:
        return values
    return values, positions.squeeze(-2) if input.ndim == 3 else positions.squeeze(-2).squeeze(0)


def _input_positions(picked: Tensor, windows: Windows) -> Tensor:
    """The kernel element picked in each window -> its flat index row * W + column in the unpadded input."""
    kw, (sh, sw), (dh, dw), (ph, pw) = windows.kernel[1], windows.stride, windows.dilation, windows.padding
    (oh, ow), width = windows.out_size, windows.in_size[1]
    xp = devices.array_module(picked.device)
    with devices.use(picked.device):
        k = picked.data
        rows = xp.arange(oh, dtype=np.int64).reshape(oh, 1) * sh - ph + (k // kw) * dh
        cols = xp.arange(ow, dtype=np.int64) * sw - pw + (k % kw) * dw
        return Tensor._wrap(rows * width + cols, picked.device)


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int = None) -> Tensor:
    """The mean of each window; stride defaults to kernel_size. The divisor is the window's size, counting
    its zero padding (count_include_pad=True) or only its input elements (False); a ceil_mode window that
    hangs past the padding counts only the part inside it. divisor_override replaces all of that."""
    op = "avg_pool2d"
    _check_pool_input(op, input)
    x, unbatched = _batched(op, input)
    _check_float(op, x)
    windows = _pool_windows(op, x, kernel_size, stride, padding, 1, ceil_mode)
    sums = Im2col.apply(x, windows=windows, fill=0).sum((2, 3))
    if divisor_override is not None:
        if not isinstance(divisor_override, (int, np.integer)) or divisor_override == 0:
            raise RuntimeError(f"{op}: divisor_override must be a non-zero int, got {divisor_override!r}")
        out = sums / divisor_override
    else:
        out = sums / _window_sizes(x, windows, count_include_pad)
    return out.squeeze(0) if unbatched else out


def avg_pool1d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """The mean of each window along the last dim of (N, C, L) or (C, L): avg_pool2d of a height-1 image, as
    PyTorch computes it (its errors name the 2-d shapes, ours the 1-d ones)."""
    op = "avg_pool1d"
    _check_pool_input(op, input, spatial=1)
    kernel = single(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None or stride == () or stride == [] else single(op, "stride", stride, 1)
    out = avg_pool2d(input.unsqueeze(-2), (1, kernel), (1, stride), (0, single(op, "padding", padding, 0)),
                     ceil_mode, count_include_pad)
    return out.squeeze(-2)


def _window_sizes(x: Tensor, windows: Windows, count_include_pad: bool) -> Tensor:
    """How many elements each window averages: the windows run over ones, as over the input, and add up."""
    if count_include_pad:        # the padding counts: as if it were part of the input, with no padding
        padded = tuple(n + 2 * p for n, p in zip(windows.in_size, windows.padding))
        windows = dataclasses.replace(windows, padding=(0, 0), in_size=padded)
    xp = devices.array_module(x.device)
    with devices.use(x.device):
        ones = xp.ones((1, 1, *windows.in_size), dtype=x.dtype)
        return Tensor._wrap(im2col_array(xp, ones, windows, 0).sum(axis=(2, 3)), x.device)


# ----------------------------------------------------------------------------- adaptive pooling
def _adaptive_windows(n: int, m: int):
    """The m windows of adaptive pooling over n positions: output i averages positions floor(i n / m) up to
    ceil((i + 1) n / m), exclusive (PyTorch's start_index and end_index). They cover all n positions, may
    overlap by one, and differ in length by at most one or two; returned as a (m, longest) index array
    (short windows repeat their last position), the (m, longest) bool array of which entries count, and the
    (m,) lengths."""
    starts = (np.arange(m) * n) // m
    ends = -((-(np.arange(m) + 1) * n) // m)            # ceil division
    lengths = ends - starts
    longest = int(lengths.max()) if m else 0
    offsets = np.arange(longest)
    counted = offsets < lengths[:, None]
    index = np.minimum(starts[:, None] + offsets, ends[:, None] - 1)
    return index, counted, lengths


def _adaptive_mean(x: Tensor, dim: int, m: int) -> Tensor:
    """x averaged along dim over the m adaptive windows: the windows' positions gathered with index_select
    (its backward adds each window's gradient back into every position it read), the padding entries of short
    windows replaced by 0 (not multiplied: 0 * inf would be nan), summed and divided by each window's length."""
    n = x.shape[dim]
    index, counted, lengths = _adaptive_windows(n, m)
    xp = devices.array_module(x.device)
    with devices.use(x.device):
        flat = Tensor._wrap(xp.asarray(index.reshape(-1)), x.device)
        shape = [1] * (x.ndim + 1)
        shape[dim], shape[dim + 1] = index.shape
        keep = Tensor._wrap(xp.asarray(counted.reshape(shape)), x.device)
        shape = [1] * x.ndim
        shape[dim] = m
        divisor = Tensor._wrap(xp.asarray(lengths.reshape(shape).astype(x.dtype)), x.device)
    picked = x.index_select(dim, flat).unflatten(dim, index.shape)
    return where(keep, picked, 0.0).sum(dim + 1) / divisor


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Average pooling to a given output size (OH, OW), whatever the input's: output (i, j) averages the input
    rows floor(i H / OH) .. ceil((i + 1) H / OH) - 1 and likewise the columns (windows of nearly equal size
    that cover the input). output_size: an int (square), or a pair whose None entries keep the input's size.
    input (N, C, H, W) or (C, H, W), floating point. Separable: rows first, then columns."""
    op = "adaptive_avg_pool2d"
    if isinstance(output_size, (int, np.integer)):
        sizes = (int(output_size),) * 2
    else:
        sizes = tuple(output_size)
        if input.ndim <= len(sizes):           # PyTorch's Python wants a dim more than the sizes, to fill in None
            raise ValueError(f"{op}: an output_size of {len(sizes)} sizes needs an input of at least "
                             f"{len(sizes) + 1} dims, got shape {input.shape}")
        if len(sizes) != 2:
            raise RuntimeError(f"{op}: output_size must be an int or a pair (OH, OW), got {output_size!r}")
        sizes = tuple(input.shape[-2 + i] if v is None else int(v) for i, v in enumerate(sizes))
    if sizes == (1, 1):
        # PyTorch's shortcut: the mean over the last two dims, for any input with two or more (an empty image
        # gives nan, integers are refused as by mean)
        if input.ndim < 2:
            raise IndexError(f"{op}: the output size (1, 1) averages the last two dims; got shape {input.shape}")
        return input.mean((-2, -1), keepdim=True)
    if input.ndim not in (3, 4):
        raise RuntimeError(f"{op}: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape {input.shape}")
    if 0 in input.shape[-3:] if input.ndim == 3 else 0 in input.shape[1:]:
        raise RuntimeError(f"{op}: expected an input with nothing empty but the batch, got shape {input.shape}")
    if min(sizes) < 0:
        raise RuntimeError(f"{op}: output_size must be >= 0, got {sizes}")
    dtypes.reject_non_floating(op, input.dtype)
    return _adaptive_mean(_adaptive_mean(input, input.ndim - 2, sizes[0]), input.ndim - 1, sizes[1])
