"""Convolution, built on one op: im2col (and col2im, its backward).

im2col cuts the padded input into the patches a kernel sees as it slides over it (its docstring
draws it). Once the patches stand as columns, a convolution is a matrix product (weights times
patches). So conv2d and conv_transpose2d below are compositions of im2col, col2im and matmul, and
take their gradients (and second derivatives) from those ops; unfold is im2col itself, laid out as
PyTorch's F.unfold; conv1d is conv2d on images of height 1. Pooling (ops/pooling.py) takes the same
patches and reduces each one instead.

Output sizes, the checks and their order, and the dtypes taken (integers too, as PyTorch's CPU) are
PyTorch's.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import dtypes
from ..amp import autocast_mode
from ..creation import zeros
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


def _check_same_dtype(op: str, x: Tensor, *others: Tensor) -> None:
    for name, t in zip(("weight", "bias"), others):
        if t is not None and t.dtype != x.dtype:
            raise RuntimeError(f"{op}: input ({x.dtype}) and {name} ({t.dtype}) must have the same dtype; "
                               f"convert one with .to({x.dtype})")


def _check_conv_dtypes(op: str, x: Tensor, weight: Tensor, bias: Tensor) -> None:
    """Convolutions take floats and, as PyTorch's CPU kernels do, int32 and int64 (exact sums, no gradient);
    not bool (NotImplementedError, as PyTorch's). Input, weight and bias share one dtype."""
    _check_same_dtype(op, x, weight, bias)
    if x.dtype == dtypes.bool_:
        raise NotImplementedError(f"{op}: not implemented for bool tensors (as in PyTorch); convert them first, "
                                  "e.g. x.float()")


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
    Floats, and int32 or int64 (PyTorch's CPU convolves integers too, exactly).
    """
    op = "conv2d"
    input, weight, bias = autocast_mode.low_precision(input, weight, bias)      # a product: low precision
    x, unbatched = _batched(op, input)
    _check_weight(op, weight)
    out = _convolution(op, x, weight, bias, pair(op, "stride", stride, 1), padding,
                       pair(op, "dilation", dilation, 1), groups)
    return out.squeeze(0) if unbatched else out


def conv1d(input: Tensor, weight: Tensor, bias: Tensor = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """The 1-d convolution: out[n, o, t] = bias[o] + sum over c of o's group and i of
    weight[o, c, i] * padded[n, c, t * stride + i * dilation].

    input (N, C, L) or (C, L); weight (out_channels, C / groups, k); padding an int, "valid" or "same".
    Computed as conv2d of a height-1 image by a height-1 kernel (the same patches, one row of them)."""
    op = "conv1d"
    input, weight, bias = autocast_mode.low_precision(input, weight, bias)
    if input.ndim not in (2, 3):
        raise RuntimeError(f"{op}: expected a 2-d (C, L) or 3-d (N, C, L) input, got shape {input.shape}")
    if weight.ndim != 3:
        raise RuntimeError(f"{op}: weight must be 3-d (out_channels, in_channels / groups, k), got shape "
                           f"{weight.shape}")
    stride, dilation = single(op, "stride", stride, 1), single(op, "dilation", dilation, 1)
    if not isinstance(padding, str):
        padding = (0, single(op, "padding", padding, 0))
    x = input.unsqueeze(-2) if input.ndim == 3 else input.unsqueeze(0).unsqueeze(-2)
    out = _convolution(op, x, weight.unsqueeze(-2), bias, (1, stride), padding, (1, dilation), groups)
    out = out.squeeze(-2)
    return out.squeeze(0) if input.ndim == 2 else out


def single(op: str, name: str, value, minimum: int) -> int:
    """An int, or a sequence of one int (PyTorch's 1-d layers take both); at least `minimum`."""
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be an int or a 1-tuple of ints, got {value!r}")
    if value < minimum:
        raise RuntimeError(f"{op}: {name} must be {'positive' if minimum else 'non-negative'}, got {value}")
    return int(value)


def _convolution(op: str, x: Tensor, weight: Tensor, bias: Tensor, stride: tuple, padding, dilation: tuple,
                 groups) -> Tensor:
    """conv2d of the 4-d x by the 4-d weight (the checks, the padding, im2col and one matmul); `op` names the
    caller in errors."""
    _check_conv_dtypes(op, x, weight, bias)
    groups = _check_groups(groups)
    out_channels, group_in, kh, kw = weight.shape
    _check_bias(op, bias, weight, out_channels)
    if out_channels % groups or not out_channels:
        raise RuntimeError(f"{op}: weight of shape {weight.shape} has {out_channels} output channels, "
                           f"which groups={groups} does not divide (at least one per group)")
    if x.shape[1] != group_in * groups:
        raise RuntimeError(f"{op}: weight of shape {weight.shape} with groups={groups} expects an input with "
                           f"{group_in * groups} channels, got input of shape {x.shape} ({x.shape[1]} channels)")
    (n, _, h, w), kernel = x.shape, (kh, kw)
    if n and x.shape[1] and not h * w:
        raise RuntimeError(f"{op}: input of shape {x.shape} has an empty image; only an empty batch or no channels "
                           "are supported, as in PyTorch")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise RuntimeError(f"{op}: padding must be an int, a pair, 'valid' or 'same', got {padding!r}")
        if padding == "same" and stride != (1, 1):
            raise RuntimeError(f"{op}: padding='same' is not supported for strided convolutions (stride {stride})")
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
    return out


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
    _check_conv_dtypes(op, x, weight, bias)
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
    if n and in_channels and not h * w:
        raise RuntimeError(f"{op}: input of shape {input.shape} has an empty image; only an empty batch or no "
                           "channels are supported, as in PyTorch")
    out_size = tuple((size - 1) * s - 2 * p + d * (k - 1) + extra + 1 for size, s, p, d, k, extra in
                     zip((h, w), stride, padding, dilation, (kh, kw), output_padding))
    # PyTorch's CPU refuses an empty output, except on its oneDNN path (float32, a batch of 2 or more), which
    # returns it; we follow both (never a negative size)
    if min(out_size) < 0 or (min(out_size) == 0 and not (x.dtype == dtypes.float32 and n >= 2)):
        raise RuntimeError(f"{op}: input of shape {input.shape} gives an empty output {out_size}; "
                           "the padding is too large")
    if not n * in_channels or not min(out_size):
        # nothing to spread (PyTorch returns the empty result, or the bias alone); the sums times 0 (0: x is
        # empty, or the result is) keep the graph for backward
        shape = (n, group_out * groups, *out_size)
        keep = x.sum() * 0 if min(out_size) else (x.sum() + weight.sum()) * 0
        out = zeros(shape, dtype=x.dtype, device=x.device) + keep
        if bias is not None:
            out = out + bias.reshape(group_out * groups, 1, 1)
        return out.squeeze(0) if unbatched else out
    # The conv2d this transposes reads an input of out_size through windows whose count is (h, w).
    windows = Windows((kh, kw), stride, dilation, padding, out_size, (h, w))
    weights_t = weight.reshape(groups, in_channels // groups, group_out * kh * kw).transpose(-1, -2)
    patches = weights_t @ x.reshape(n, groups, in_channels // groups, h * w)
    out = Col2im.apply(patches.reshape(n, groups * group_out, kh, kw, h, w), windows=windows)
    if bias is not None:
        out = out + bias.reshape(groups * group_out, 1, 1)
    return out.squeeze(0) if unbatched else out


# ----------------------------------------------------------------------------- unfold (im2col as a function)
def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """The sliding patches of an image as columns: (N, C, H, W) -> (N, C * kh * kw, L), L the number of
    windows (OH * OW), column l holding window l's C * kh * kw values in (channel, kernel row, kernel column)
    order; an unbatched (C, H, W) gives (C * kh * kw, L). Im2col (above) does the work; its backward, col2im,
    adds each column back where it was cut from (overlapping windows add up). Conv2d is this followed by one
    matrix product with the weights."""
    op = "unfold"
    if input.ndim < 3:            # PyTorch reads dim 2 before it checks the shape: an IndexError
        raise IndexError(f"{op}: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape {input.shape}")
    if input.ndim > 4 or 0 in input.shape[input.ndim - 3:] or (input.ndim == 3 and input.shape[0] == 0):
        raise RuntimeError(f"{op}: expected a 3-d or 4-d (batch mode) input with nothing empty but the batch, got "
                           f"shape {input.shape}")
    kernel, dilation = pair(op, "kernel_size", kernel_size, 1), pair(op, "dilation", dilation, 1)
    padding, stride = pair(op, "padding", padding, 0), pair(op, "stride", stride, 1)
    if dtypes.category(input.dtype) == 1:
        raise NotImplementedError(f"{op}: not implemented for {input.dtype} tensors (as in PyTorch); convert "
                                  "first, e.g. x.float()")
    x, unbatched = _batched(op, input)
    out_size = tuple((n + 2 * p - (d * (k - 1) + 1)) // s + 1 for n, p, d, k, s in
                     zip(x.shape[2:], padding, dilation, kernel, stride))
    if min(out_size) < 1:
        raise RuntimeError(f"{op}: an input of spatial size {tuple(x.shape[2:])} with kernel_size {kernel}, "
                           f"dilation {dilation}, padding {padding} and stride {stride} gives {out_size} windows; "
                           "each must be at least one")
    windows = Windows(kernel, stride, dilation, padding, x.shape[2:], out_size)
    n, c = x.shape[:2]
    columns = Im2col.apply(x, windows=windows, fill=0).reshape(n, c * math.prod(kernel), math.prod(out_size))
    return columns.squeeze(0) if unbatched else columns
