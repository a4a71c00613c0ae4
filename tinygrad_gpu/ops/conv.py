"""Convolution and pooling, built on one op: im2col (and col2im, its backward).

im2col cuts the padded input into the patches a kernel sees as it slides over it (its docstring
draws it). Once the patches stand as columns, a convolution is a matrix product (weights times
patches) and a pooling is a max or a mean over each patch. So conv2d, conv_transpose2d,
max_pool2d and avg_pool2d below are compositions of im2col, col2im, matmul and reductions, and
take their gradients (and second derivatives) from those ops.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import device as devices
from .. import dtypes
from ..amp import autocast_mode
from ..tensor import Function, Tensor


# ----------------------------------------------------------------------------- where the windows sit
@dataclasses.dataclass(frozen=True)
class Windows:
    """The geometry of a sliding kernel; every field is a (height, width) pair.

    Window (oh, ow) starts at position (oh * stride, ow * stride) of the padded input and reads
    `kernel` elements along each axis, `dilation` apart. The padded input has `padding` rows
    (columns) before the input and, after it, as many as the last window needs.
    """
    kernel: tuple
    stride: tuple
    dilation: tuple
    padding: tuple        # before the input: (top, left)
    in_size: tuple        # the input's (H, W), unpadded
    out_size: tuple       # how many windows fit along each axis: (OH, OW)

    def padded_size(self) -> tuple:
        return tuple(max(p + n, (o - 1) * s + d * (k - 1) + 1) for p, n, o, s, d, k in
                     zip(self.padding, self.in_size, self.out_size, self.stride, self.dilation, self.kernel))

    def interior(self) -> tuple:
        """The slices of the padded input that hold the input itself."""
        return tuple(slice(p, p + n) for p, n in zip(self.padding, self.in_size))

    def taps(self):
        """For each kernel element (i, j): the strided slices of the padded input it reads, one element per
        window. A loop over the kh * kw kernel elements (few), not over the output positions (many)."""
        (kh, kw), (sh, sw), (dh, dw), (oh, ow) = self.kernel, self.stride, self.dilation, self.out_size
        for i in range(kh):
            for j in range(kw):
                yield i, j, (slice(i * dh, i * dh + (oh - 1) * sh + 1, sh),
                             slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))


def im2col_array(xp, x, windows: Windows, fill):
    """(N, C, H, W) -> patches (N, C, kh, kw, OH, OW), with
    patches[n, c, i, j, oh, ow] = padded[n, c, oh * sh + i * dh, ow * sw + j * dw]; padding reads `fill`."""
    n, c = x.shape[:2]
    if windows.padded_size() == tuple(windows.in_size):
        padded = x                                    # no padding: read the input itself
    else:
        padded = xp.full((n, c, *windows.padded_size()), fill, dtype=x.dtype)
        padded[(..., *windows.interior())] = x
    patches = xp.empty((n, c, *windows.kernel, *windows.out_size), dtype=x.dtype)
    for i, j, (rows, cols) in windows.taps():
        patches[:, :, i, j] = padded[:, :, rows, cols]
    return patches


class Im2col(Function):
    """The sliding patches of a padded (N, C, H, W) input, as (N, C, kh, kw, OH, OW).

        padded input (one channel)     the patch each output position sees (kernel 2x2, stride 1)
            a b c                          out[0, 0]: a b      out[0, 1]: b c
            d e f                                     d e                 e f
            g h i                          out[1, 0]: d e      out[1, 1]: e f
                                                      g h                 h i

    Its backward, col2im, goes the other way: it adds every patch back into the place it was cut
    from. Patches overlap (e sits in all four above), so whatever lands on one place adds up: the
    gradient of e is the sum of the gradients of its four copies. col2im is the adjoint (the
    transpose) of im2col, so each one is the other's backward.
    """

    def forward(ctx, x, windows, fill):
        ctx.windows = windows
        return im2col_array(ctx.xp, x.data, windows, fill)

    def backward(ctx, grad):
        return Col2im.apply(grad, windows=ctx.windows)     # padding positions were constants: dropped


class Col2im(Function):
    """Patches (N, C, kh, kw, OH, OW) added back into an (N, C, H, W) image: overlaps add up."""

    def forward(ctx, patches, windows):
        ctx.windows = windows
        n, c = patches.shape[:2]
        padded = ctx.xp.zeros((n, c, *windows.padded_size()), dtype=patches.dtype)
        for i, j, (rows, cols) in windows.taps():
            padded[:, :, rows, cols] += patches.data[:, :, i, j]     # one slice has no repeated positions
        return padded[(..., *windows.interior())]

    def backward(ctx, grad):
        return Im2col.apply(grad, windows=ctx.windows, fill=0)


# ----------------------------------------------------------------------------- argument checks
def pair(op: str, name: str, value, minimum: int) -> tuple:
    """An int, or a pair of ints, as (height, width); each at least `minimum`."""
    def is_int(v):
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)
    if is_int(value):
        value = (value, value)
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and all(is_int(v) for v in value)):
        raise TypeError(f"{op}: {name} must be an int or a pair of ints, got {value!r}")
    if min(value) < minimum:
        raise RuntimeError(f"{op}: {name} must be {'positive' if minimum else 'non-negative'}, got {tuple(value)}")
    return int(value[0]), int(value[1])


def _batched(op: str, x: Tensor):
    """(N, C, H, W) as it is; an unbatched (C, H, W) gets a batch of one. Also: whether to drop it after."""
    if x.ndim == 4:
        return x, False
    if x.ndim == 3:
        return x.unsqueeze(0), True
    raise RuntimeError(f"{op}: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape {x.shape}")


def _window_count(op: str, size: int, before: int, after: int, kernel: int, stride: int, dilation: int,
                  ceil_mode: bool = False) -> int:
    """How many windows fit along one axis of `size` elements padded with `before` and `after` more.

    With ceil_mode a last, partial window is kept if it starts inside the input or its left padding."""
    reach = dilation * (kernel - 1) + 1           # the elements one window spans, dilation included
    padded = before + size + after
    if reach > padded:
        raise RuntimeError(f"{op}: the kernel (size {kernel}, dilation {dilation}: it spans {reach}) is bigger "
                           f"than the padded input ({before} + {size} + {after} = {padded}); use a smaller "
                           "kernel or more padding")
    count = (padded - reach + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (count - 1) * stride >= before + size:
        count -= 1
    return count


def _check_float_and_same_dtype(op: str, x: Tensor, *others: Tensor) -> None:
    if not x.is_floating_point():
        raise RuntimeError(f"{op}: needs a floating-point input, got {x.dtype}; convert it with .float()")
    for name, t in zip(("weight", "bias"), others):
        if t is not None and t.dtype != x.dtype:
            raise RuntimeError(f"{op}: input ({x.dtype}) and {name} ({t.dtype}) must have the same dtype; "
                               f"convert one with .to({x.dtype})")


def _check_weight(op: str, weight: Tensor) -> None:
    if weight.ndim != 4:
        raise RuntimeError(f"{op}: weight must be 4-d, got shape {weight.shape}")


def _check_bias(op: str, bias: Tensor, weight: Tensor, out_channels: int) -> None:
    if bias is not None and bias.shape != (out_channels,):
        raise RuntimeError(f"{op}: bias of shape {bias.shape} does not fit weight of shape {weight.shape}: "
                           f"need ({out_channels},), one per output channel")


def _check_groups(groups) -> int:
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool):
        raise TypeError(f"groups must be an int, got {groups!r}")
    if groups < 1:
        raise RuntimeError(f"groups must be positive, got {groups}")
    return int(groups)


# ----------------------------------------------------------------------------- convolution
def conv2d(input: Tensor, weight: Tensor, bias: Tensor = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """out[n, o] = bias[o] + sum over the channels c of o's group of (weight[o, c] cross-correlated with input[n, c]).

    input (N, C, H, W) or (C, H, W); weight (out_channels, C / groups, kh, kw); padding an int, a pair,
    "valid" (none) or "same" (the output keeps H x W; stride 1 only; an odd total goes to the bottom/right).
    As matrices: weights (groups, out / groups, C / groups * kh * kw) @ patches (N, groups, same, OH * OW).
    """
    op = "conv2d"
    input, weight, bias = autocast_mode.low_precision(input, weight, bias)      # a product: low precision
    x, unbatched = _batched(op, input)
    _check_float_and_same_dtype(op, x, weight, bias)
    groups = _check_groups(groups)
    _check_weight(op, weight)
    out_channels, group_in, kh, kw = weight.shape
    _check_bias(op, bias, weight, out_channels)
    if out_channels % groups:
        raise RuntimeError(f"{op}: weight of shape {weight.shape} has {out_channels} output channels, "
                           f"which groups={groups} does not divide")
    if x.shape[1] != group_in * groups:
        raise RuntimeError(f"{op}: weight of shape {weight.shape} with groups={groups} expects an input with "
                           f"{group_in * groups} channels, got input of shape {input.shape} ({x.shape[1]} channels)")
    stride, dilation = pair(op, "stride", stride, 1), pair(op, "dilation", dilation, 1)
    (n, _, h, w), kernel = x.shape, (kh, kw)
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise RuntimeError(f"{op}: padding must be an int, a pair, 'valid' or 'same', got {padding!r}")
        if padding == "same" and stride != (1, 1):
            raise RuntimeError(f"{op}: padding='same' needs stride 1, got stride {stride}")
        totals = [d * (k - 1) if padding == "same" else 0 for d, k in zip(dilation, kernel)]
        before = tuple(t // 2 for t in totals)
        after = tuple(t - b for t, b in zip(totals, before))
    else:
        before = after = pair(op, "padding", padding, 0)
    out_size = tuple(_window_count(op, size, b, a, k, s, d) for size, b, a, k, s, d in
                     zip((h, w), before, after, kernel, stride, dilation))
    windows = Windows(kernel, stride, dilation, before, (h, w), out_size)
    columns = Im2col.apply(x, windows=windows, fill=0).reshape(n, groups, group_in * kh * kw, math.prod(out_size))
    out = (weight.reshape(groups, out_channels // groups, group_in * kh * kw) @ columns).reshape(
        n, out_channels, *out_size)
    if bias is not None:
        out = out + bias.reshape(out_channels, 1, 1)
    return out.squeeze(0) if unbatched else out


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor = None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1) -> Tensor:
    """The gradient of conv2d with respect to its input, as a forward op (a "fractionally strided" conv).

    input (N, C, H, W) or (C, H, W); weight (C, out_channels / groups, kh, kw), the layout of the conv2d
    it transposes. Each input pixel spreads weight-times-pixel over a kh x kw patch of the output:
    weights^T @ input gives the patches, col2im (im2col's adjoint) adds them into place. The output is
    (H - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1 along each axis;
    output_padding (smaller than stride or dilation) picks among the input sizes that conv2d maps
    to the same H.
    """
    op = "conv_transpose2d"
    input, weight, bias = autocast_mode.low_precision(input, weight, bias)
    x, unbatched = _batched(op, input)
    _check_float_and_same_dtype(op, x, weight, bias)
    groups = _check_groups(groups)
    _check_weight(op, weight)
    in_channels, group_out, kh, kw = weight.shape
    _check_bias(op, bias, weight, group_out * groups)
    if in_channels % groups:
        raise RuntimeError(f"{op}: weight of shape {weight.shape} has {in_channels} input channels, "
                           f"which groups={groups} does not divide")
    if x.shape[1] != in_channels:
        raise RuntimeError(f"{op}: weight of shape {weight.shape} with groups={groups} expects an input with "
                           f"{in_channels} channels, got input of shape {input.shape} ({x.shape[1]} channels)")
    stride, dilation = pair(op, "stride", stride, 1), pair(op, "dilation", dilation, 1)
    padding, output_padding = pair(op, "padding", padding, 0), pair(op, "output_padding", output_padding, 0)
    for extra, s, d in zip(output_padding, stride, dilation):
        if extra >= s and extra >= d:
            raise RuntimeError(f"{op}: output_padding {output_padding} must be smaller than the stride {stride} "
                               f"or the dilation {dilation}")
    n, _, h, w = x.shape
    out_size = tuple((size - 1) * s - 2 * p + d * (k - 1) + extra + 1 for size, s, p, d, k, extra in
                     zip((h, w), stride, padding, dilation, (kh, kw), output_padding))
    if min(out_size) < 1:
        raise RuntimeError(f"{op}: input of shape {input.shape} gives an empty output {out_size}; "
                           "the padding is too large")
    # The conv2d this transposes reads an input of out_size through windows whose count is (h, w).
    windows = Windows((kh, kw), stride, dilation, padding, out_size, (h, w))
    weights_t = weight.reshape(groups, in_channels // groups, group_out * kh * kw).transpose(-1, -2)
    patches = weights_t @ x.reshape(n, groups, in_channels // groups, h * w)
    out = Col2im.apply(patches.reshape(n, groups * group_out, kh, kw, h, w), windows=windows)
    if bias is not None:
        out = out + bias.reshape(groups * group_out, 1, 1)
    return out.squeeze(0) if unbatched else out


# ----------------------------------------------------------------------------- pooling
def _pool_windows(op: str, x: Tensor, kernel_size, stride, padding, dilation, ceil_mode: bool) -> Windows:
    kernel = pair(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None else pair(op, "stride", stride, 1)
    padding, dilation = pair(op, "padding", padding, 0), pair(op, "dilation", dilation, 1)
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise RuntimeError(f"{op}: padding {padding} must be at most half of kernel_size {kernel}")
    out_size = tuple(_window_count(op, size, p, p, k, s, d, ceil_mode) for size, p, k, s, d in
                     zip(x.shape[2:], padding, kernel, stride, dilation))
    return Windows(kernel, stride, dilation, padding, x.shape[2:], out_size)


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """The largest value of each window; padding reads -inf, so it never wins. stride defaults to kernel_size.

    The gradient goes to the FIRST maximum of each window in row-major order (PyTorch's rule at ties);
    return_indices also gives where each maximum sits, as a flat index into its channel's H * W input.
    """
    op = "max_pool2d"
    x, unbatched = _batched(op, input)
    if x.dtype == dtypes.bool_:
        raise RuntimeError(f"{op}: bool input is not supported; convert it with .float() or .long()")
    windows = _pool_windows(op, x, kernel_size, stride, padding, dilation, ceil_mode)
    fill = -math.inf if x.is_floating_point() else int(np.iinfo(x.dtype).min)
    n, c = x.shape[:2]
    patches = Im2col.apply(x, windows=windows, fill=fill).reshape(n, c, math.prod(windows.kernel), *windows.out_size)
    values, picked = patches.max(dim=2)           # max(dim) sends the gradient to argmax: the first maximum
    if unbatched:
        values, picked = values.squeeze(0), picked.squeeze(0)
    if not return_indices:
        return values
    return values, _input_positions(picked, windows)


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
    x, unbatched = _batched(op, input)
    _check_float_and_same_dtype(op, x)
    windows = _pool_windows(op, x, kernel_size, stride, padding, 1, ceil_mode)
    sums = Im2col.apply(x, windows=windows, fill=0).sum((2, 3))
    if divisor_override is not None:
        if not isinstance(divisor_override, (int, np.integer)) or divisor_override == 0:
            raise RuntimeError(f"{op}: divisor_override must be a non-zero int, got {divisor_override!r}")
        out = sums / divisor_override
    else:
        out = sums / _window_sizes(x, windows, count_include_pad)
    return out.squeeze(0) if unbatched else out


def _window_sizes(x: Tensor, windows: Windows, count_include_pad: bool) -> Tensor:
    """How many elements each window averages: the windows run over ones, as over the input, and add up."""
    if count_include_pad:        # the padding counts: as if it were part of the input, with no padding
        padded = tuple(n + 2 * p for n, p in zip(windows.in_size, windows.padding))
        windows = dataclasses.replace(windows, padding=(0, 0), in_size=padded)
    xp = devices.array_module(x.device)
    with devices.use(x.device):
        ones = xp.ones((1, 1, *windows.in_size), dtype=x.dtype)
        return Tensor._wrap(im2col_array(xp, ones, windows, 0).sum(axis=(2, 3)), x.device)
