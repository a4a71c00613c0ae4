"""conv2d, conv_transpose2d, max_pool2d, avg_pool2d and their modules against NumPy, with PyTorch's semantics.

The references below are written from the definitions in PyTorch's docs, as plain loops over the
output positions (or, for the transposed convolution, over the input positions it spreads from).
Property tests draw small shapes, strides, paddings, dilations and groups; check_op compares the
forward with the reference and the first (and, for the compositions, second) derivatives with
central differences. max_pool2d gets distinct values at least 0.5 apart, so no difference quotient
straddles a tie; the tie rule itself (the first maximum of a window takes the gradient) is pinned
by example tests.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrad_gpu as tg
from checks import check_op, overfit, spread, values
from tinygrad_gpu import nn
from tinygrad_gpu.nn import functional as F


# ----------------------------------------------------------------------------- NumPy references
def conv2d_np(x, w, b=None, stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1):
    """out[n, o, y, x] = b[o] + sum over c, i, j of w[o, c, i, j] * padded[n, first channel of o's group + c,
    y * sh + i * dh, x * sw + j * dw]; `padding` is ((top, bottom), (left, right))."""
    n, _, _, _ = x.shape
    out_channels, group_in, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    padded = np.pad(x, ((0, 0), (0, 0), padding[0], padding[1]))
    oh = (padded.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (padded.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, out_channels, oh, ow))
    for b_ in range(n):
        for o in range(out_channels):
            first = (o // (out_channels // groups)) * group_in
            for y in range(oh):
                for x_ in range(ow):
                    patch = padded[b_, first:first + group_in, y * sh:y * sh + dh * (kh - 1) + 1:dh,
                                   x_ * sw:x_ * sw + dw * (kw - 1) + 1:dw]
                    out[b_, o, y, x_] = (patch * w[o]).sum() + (0.0 if b is None else b[o])
    return out


def conv_transpose2d_np(x, w, b=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0), dilation=(1, 1),
                        groups=1):
    """Each input pixel x[n, c, y, x] adds x * w[c, o, i, j] to out[n, o + first output channel of c's group,
    y * sh + i * dh - ph, x * sw + j * dw - pw]; out has (H - 1) * s - 2 p + d (k - 1) + output_padding + 1 rows."""
    n, in_channels, h, wd = x.shape
    _, group_out, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + output_padding[0] + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + output_padding[1] + 1
    full = np.zeros((n, group_out * groups, oh + 2 * ph + sh * 2, ow + 2 * pw + sw * 2))   # room on every side
    group_in = in_channels // groups
    for b_ in range(n):
        for c in range(in_channels):
            first = (c // group_in) * group_out
            for y in range(h):
                for x_ in range(wd):
                    for i in range(kh):
                        for j in range(kw):
                            full[b_, first:first + group_out, y * sh + i * dh, x_ * sw + j * dw] += \
                                x[b_, c, y, x_] * w[c, :, i, j]
    out = full[:, :, ph:ph + oh, pw:pw + ow]
    return out if b is None else out + b.reshape(-1, 1, 1)


def pool_out_size(size, k, s, p, d, ceil_mode):
    """PyTorch's rule: floor (or ceil) of (size + 2p - d(k-1) - 1) / s, plus 1; a ceil_mode window that
    would start in the right padding is dropped."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def max_pool2d_np(x, k, s, p, d, ceil_mode=False):
    """Each window's largest input element (padding never wins) and its flat index row * W + col;
    on ties the first one met in row-major order."""
    n, c, h, w = x.shape
    oh, ow = pool_out_size(h, k[0], s[0], p[0], d[0], ceil_mode), pool_out_size(w, k[1], s[1], p[1], d[1], ceil_mode)
    out, index = np.zeros((n, c, oh, ow), x.dtype), np.zeros((n, c, oh, ow), np.int64)
    for b_ in range(n):
        for ch in range(c):
            for y in range(oh):
                for x_ in range(ow):
                    best, where = None, None
                    for i in range(k[0]):
                        for j in range(k[1]):
                            r, col = y * s[0] - p[0] + i * d[0], x_ * s[1] - p[1] + j * d[1]
                            if 0 <= r < h and 0 <= col < w and (best is None or x[b_, ch, r, col] > best):
                                best, where = x[b_, ch, r, col], r * w + col
                    out[b_, ch, y, x_], index[b_, ch, y, x_] = best, where
    return out, index


def avg_pool2d_np(x, k, s, p, ceil_mode=False, count_include_pad=True, divisor_override=None):
    """Each window's sum over its input elements, divided by the window's size: padding included (but not
    what hangs past it in ceil_mode) when count_include_pad, else only the input elements it covers."""
    n, c, h, w = x.shape
    oh, ow = pool_out_size(h, k[0], s[0], p[0], 1, ceil_mode), pool_out_size(w, k[1], s[1], p[1], 1, ceil_mode)
    out = np.zeros((n, c, oh, ow))
    for y in range(oh):
        for x_ in range(ow):
            top, left = y * s[0] - p[0], x_ * s[1] - p[1]
            bottom, right = min(top + k[0], h + p[0]), min(left + k[1], w + p[1])
            with_padding = (bottom - top) * (right - left)
            top, left, bottom, right = max(top, 0), max(left, 0), min(bottom, h), min(right, w)
            inside = (bottom - top) * (right - left)
            divisor = divisor_override or (with_padding if count_include_pad else inside)
            out[:, :, y, x_] = x[:, :, top:bottom, left:right].sum(axis=(2, 3)) / divisor
    return out


# ----------------------------------------------------------------------------- strategies
# An example of the gradient tests below runs whole Jacobians, first and second order, of a whole
# convolution (hundreds of evaluations): a third of the profile's examples keeps the file fast in CI
# and still grows with the "dev" and "thorough" profiles (the cuda pass's profile draws fewer already).
fewer_examples = settings(max_examples=max(5, settings.default.max_examples // 3))


@st.composite
def conv_case(draw):
    """A conv2d configuration: N <= 2, C <= 3, H, W <= 6, kernel <= 3, stride 1-2, padding 0-1, dilation 1-2,
    groups 1 or 2 (then 2 input channels); the input is at least one (dilated) kernel wide once padded."""
    groups = draw(st.sampled_from([1, 2]))
    in_channels = 2 if groups == 2 else draw(st.integers(1, 3))
    out_channels = groups * draw(st.integers(1, 2))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 1)), draw(st.integers(0, 1)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    size = tuple(draw(st.integers(max(1, d * (k - 1) + 1 - 2 * p), 6)) for k, p, d in zip(kernel, padding, dilation))
    n = draw(st.integers(1, 2))
    return dict(x_shape=(n, in_channels, *size), w_shape=(out_channels, in_channels // groups, *kernel),
                stride=stride, padding=padding, dilation=dilation, groups=groups)




@st.composite
def pool_case(draw, dilation=True):
    """A pooling configuration: kernel <= 3, stride 1-2 (or None: the kernel), padding up to half the kernel."""
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = draw(st.sampled_from([None, (1, 1), (2, 2), (1, 2), (2, 1)]))
    padding = tuple(draw(st.integers(0, k // 2)) for k in kernel)
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilation else (1, 1)
    # A dilated window may step over a short input and read only padding (PyTorch then gives -inf and
    # an index outside the input); the inputs here are at least one dilated window long, so never.
    size = tuple(draw(st.integers(max(1, d * (k - 1) + 1 - (2 * p if d == 1 else 0)), 6))
                 for k, p, d in zip(kernel, padding, dil))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), *size)
    return dict(shape=shape, kernel=kernel, stride=stride, padding=padding, dilation=dil,
                ceil_mode=draw(st.booleans()))


# ----------------------------------------------------------------------------- conv2d
@fewer_examples
@given(st.data())
def test_conv2d(data):
    case = data.draw(conv_case())
    with_bias = data.draw(st.booleans())
    arrays = [data.draw(values(case["x_shape"])), data.draw(values(case["w_shape"]))]
    if with_bias:
        arrays.append(data.draw(values(case["w_shape"][:1])))
    s, p, d, g = case["stride"], case["padding"], case["dilation"], case["groups"]
    check_op(lambda x, w, *b: F.conv2d(x, w, *b, stride=s, padding=p, dilation=d, groups=g),
             lambda x, w, *b: conv2d_np(x, w, *b, stride=s, padding=((p[0],) * 2, (p[1],) * 2), dilation=d, groups=g),
             *arrays, second_order=True)


@fewer_examples
@given(st.data())
def test_conv2d_padding_same_keeps_the_size_and_puts_an_odd_total_after(data):
    kernel = (data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)))
    dilation = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    x = data.draw(values((1, 2, data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)))))
    w = data.draw(values((2, 2, *kernel)))
    totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
    padding = tuple((t // 2, t - t // 2) for t in totals)
    check_op(lambda x, w: F.conv2d(x, w, padding="same", dilation=dilation),
             lambda x, w: conv2d_np(x, w, padding=padding, dilation=dilation), x, w)


def test_conv2d_padding_valid_is_no_padding():
    x, w = tg.randn(1, 2, 5, 4), tg.randn(3, 2, 2, 3)
    np.testing.assert_array_equal(F.conv2d(x, w, padding="valid").numpy(), F.conv2d(x, w).numpy())
    assert F.conv2d(x, w, padding="valid").shape == (1, 3, 4, 2)


def test_conv2d_takes_unbatched_input_and_keeps_float32():
    x, w, b = tg.randn(3, 5, 5), tg.randn(4, 3, 2, 2), tg.randn(4)
    out = F.conv2d(x, w, b, padding=1)
    assert out.shape == (4, 6, 6) and out.dtype == tg.float32
    np.testing.assert_allclose(out.numpy(), F.conv2d(x.unsqueeze(0), w, b, padding=1).numpy()[0], rtol=1e-6)
    np.testing.assert_allclose(out.numpy(), conv2d_np(x.numpy()[None], w.numpy(), b.numpy(),
                                                      padding=((1, 1), (1, 1)))[0], rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- conv_transpose2d
@st.composite
def transpose_case(draw):
    """A conv2d case and an output_padding that brings conv_transpose2d back to conv2d's input size."""
    case = draw(conv_case())
    h, w = case["x_shape"][2:]
    k, s, p, d = case["w_shape"][2:], case["stride"], case["padding"], case["dilation"]
    out = [(n + 2 * p_ - d_ * (k_ - 1) - 1) // s_ + 1 for n, k_, s_, p_, d_ in zip((h, w), k, s, p, d)]
    case["output_padding"] = tuple(n - ((o - 1) * s_ - 2 * p_ + d_ * (k_ - 1) + 1)
                                   for n, o, k_, s_, p_, d_ in zip((h, w), out, k, s, p, d))
    case["y_shape"] = (case["x_shape"][0], case["w_shape"][0], *out)
    return case


@fewer_examples
@given(st.data())
def test_conv_transpose2d(data):
    case = data.draw(transpose_case())
    y = data.draw(values(case["y_shape"]))
    w = data.draw(values(case["w_shape"]))
    b = data.draw(values((case["w_shape"][1] * case["groups"],)))
    kwargs = dict(stride=case["stride"], padding=case["padding"], output_padding=case["output_padding"],
                  dilation=case["dilation"], groups=case["groups"])
    check_op(lambda y, w, b: F.conv_transpose2d(y, w, b, **kwargs),
             lambda y, w, b: conv_transpose2d_np(y, w, b, **kwargs), y, w, b, second_order=True)


@given(st.data())
def test_conv_transpose2d_is_the_adjoint_of_conv2d(data):
    """<conv2d(x, w), y> == <x, conv_transpose2d(y, w)>: the transposed convolution is conv2d's transpose."""
    case = data.draw(transpose_case())
    x = tg.tensor(data.draw(values(case["x_shape"])), dtype=tg.float64)
    w = tg.tensor(data.draw(values(case["w_shape"])), dtype=tg.float64)
    y = tg.tensor(data.draw(values(case["y_shape"])), dtype=tg.float64)
    s, p, d, g = case["stride"], case["padding"], case["dilation"], case["groups"]
    forward = F.conv2d(x, w, stride=s, padding=p, dilation=d, groups=g)
    back = F.conv_transpose2d(y, w, stride=s, padding=p, output_padding=case["output_padding"], dilation=d, groups=g)
    assert forward.shape == y.shape and back.shape == x.shape
    np.testing.assert_allclose((forward * y).sum().item(), (x * back).sum().item(), rtol=1e-9, atol=1e-9)


def test_conv_transpose2d_with_stride_2_doubles_the_size_and_spreads_each_pixel():
    x = tg.tensor([[[[1.0, 2.0]]]])                     # (1, 1, 1, 2)
    w = tg.ones(1, 1, 2, 2)
    out = F.conv_transpose2d(x, w, stride=2)
    np.testing.assert_array_equal(out.numpy(), [[[[1, 1, 2, 2], [1, 1, 2, 2]]]])
    assert F.conv_transpose2d(x[0], w, stride=2, output_padding=1).shape == (1, 3, 5)   # unbatched input


# ----------------------------------------------------------------------------- max_pool2d
@fewer_examples
@given(st.data())
def test_max_pool2d(data):
    case = data.draw(pool_case())
    x = data.draw(spread(case["shape"]))
    k, s, p, d, ceil = case["kernel"], case["stride"], case["padding"], case["dilation"], case["ceil_mode"]
    check_op(lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil),
             lambda x: max_pool2d_np(x, k, s or k, p, d, ceil)[0], x, second_order=True)
    _, indices = F.max_pool2d(tg.tensor(x), k, s, p, d, ceil_mode=ceil, return_indices=True)
    assert indices.dtype == tg.int64
    np.testing.assert_array_equal(indices.numpy(), max_pool2d_np(x, k, s or k, p, d, ceil)[1])


def test_max_pool2d_ties_give_the_whole_gradient_to_the_first_maximum():
    # PyTorch scans each window row by row and moves on only for a strictly larger value.
    x = tg.tensor([[[[1.0, 3.0], [3.0, 2.0]]]], requires_grad=True)
    out, indices = F.max_pool2d(x, 2, return_indices=True)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[[[0, 1], [0, 0]]]])
    assert indices.tolist() == [[[[1]]]]
    # Overlapping windows of equal values: each window picks its own first element.
    y = tg.tensor([[[5.0, 5.0, 5.0]]], requires_grad=True)
    F.max_pool2d(y, (1, 2), stride=1).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [[[1, 1, 0]]])


def test_max_pool2d_of_integers_keeps_their_dtype():
    x = tg.tensor([[[[-5, -7], [-6, -8]]]])
    out = F.max_pool2d(x, 3, stride=1, padding=1)        # padding never wins, even over negative values
    assert out.dtype == tg.int64
    np.testing.assert_array_equal(out.numpy(), [[[[-5, -5], [-5, -5]]]])


# ----------------------------------------------------------------------------- avg_pool2d
@fewer_examples
@given(st.data())
def test_avg_pool2d(data):
    case = data.draw(pool_case(dilation=False))
    x = data.draw(values(case["shape"]))
    k, s, p, ceil = case["kernel"], case["stride"], case["padding"], case["ceil_mode"]
    include = data.draw(st.booleans())
    override = data.draw(st.sampled_from([None, 3]))
    check_op(lambda x: F.avg_pool2d(x, k, s, p, ceil, include, override),
             lambda x: avg_pool2d_np(x, k, s or k, p, ceil, include, override), x, second_order=True)


def test_avg_pool2d_divisors_with_padding_and_ceil_mode():
    x = tg.ones(1, 1, 3, 3)
    # padding 1, kernel 2, stride 2: the corner window holds 1 input element and 3 padding zeros
    np.testing.assert_allclose(F.avg_pool2d(x, 2, padding=1).numpy()[0, 0], [[0.25, 0.5], [0.5, 1.0]])
    np.testing.assert_allclose(F.avg_pool2d(x, 2, padding=1, count_include_pad=False).numpy(), np.ones((1, 1, 2, 2)))
    # no padding, ceil_mode: the last window hangs past the input, and only its inside is counted
    np.testing.assert_allclose(F.avg_pool2d(x, 2, ceil_mode=True).numpy(), np.ones((1, 1, 2, 2)))
    assert F.avg_pool2d(x[0], 2).shape == (1, 1, 1)      # unbatched input


# ----------------------------------------------------------------------------- conv1d, integers, empty results
@fewer_examples
@given(st.data())
def test_conv1d(data):
    """conv1d is conv2d of a height-1 image: the same reference, one row of it."""
    groups = data.draw(st.sampled_from([1, 2]))
    in_channels, out_channels = groups * data.draw(st.integers(1, 2)), groups * data.draw(st.integers(1, 2))
    k, stride, dilation = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    padding = data.draw(st.sampled_from([0, 1, "valid"] + (["same"] if stride == 1 else [])))
    pad = {"valid": 0, "same": None}.get(padding, padding)
    total = dilation * (k - 1)
    before, after = (total // 2, total - total // 2) if padding == "same" else (pad, pad)
    length = data.draw(st.integers(max(1, total + 1 - before - after), 6))
    x = data.draw(values((data.draw(st.integers(1, 2)), in_channels, length)))
    w = data.draw(values((out_channels, in_channels // groups, k)))
    b = data.draw(values((out_channels,)))
    check_op(lambda x, w, b: F.conv1d(x, w, b, stride, padding, dilation, groups),
             lambda x, w, b: conv2d_np(x[:, :, None], w[:, :, None], b, (1, stride), ((0, 0), (before, after)),
                                       (1, dilation), groups)[:, :, 0], x, w, b, second_order=True)


def test_conv1d_unbatched_errors_and_pytorch():
    x, w = tg.randn(2, 5), tg.randn(3, 2, 2)
    assert F.conv1d(x, w).shape == (3, 4)
    with pytest.raises(RuntimeError, match=r"conv1d: expected a 2-d \(C, L\) or 3-d \(N, C, L\) input"):
        F.conv1d(tg.randn(1, 2, 5, 1), w)
    with pytest.raises(RuntimeError, match="conv1d: weight must be 3-d"):
        F.conv1d(x, tg.randn(3, 2))
    with pytest.raises(RuntimeError, match="conv1d: padding='same' is not supported for strided"):
        F.conv1d(x, w, stride=2, padding="same")
    with pytest.raises(RuntimeError, match="conv1d: .*bigger than the padded input"):
        F.conv1d(tg.randn(1, 2, 1), w)
    torch = pytest.importorskip("torch")
    xs, ws, bs = (np.random.default_rng(i).standard_normal(shape) for i, shape in enumerate([(2, 4, 7), (6, 2, 3), (6,)]))
    ours = F.conv1d(tg.tensor(xs), tg.tensor(ws), tg.tensor(bs), stride=2, padding=1, dilation=2, groups=2)
    theirs = torch.nn.functional.conv1d(torch.tensor(xs), torch.tensor(ws), torch.tensor(bs), stride=2, padding=1,
                                        dilation=2, groups=2)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)


@pytest.mark.parametrize("dtype", [tg.int32, tg.int64])
def test_conv_of_integers_is_exact_and_keeps_the_dtype(dtype):
    """PyTorch's CPU convolves int32 and int64 tensors (no gradient); so do we, exactly."""
    rng = np.random.default_rng(0)
    x, w, b = rng.integers(-9, 10, (2, 4, 5, 5)), rng.integers(-9, 10, (4, 2, 3, 2)), rng.integers(-9, 10, 4)
    out = F.conv2d(tg.tensor(x, dtype=dtype), tg.tensor(w, dtype=dtype), tg.tensor(b, dtype=dtype), stride=(2, 1),
                   padding=1, groups=2)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.numpy(), conv2d_np(x, w, b, (2, 1), ((1, 1), (1, 1)), (1, 1), 2))
    assert F.conv1d(tg.tensor(x[:, :, 0], dtype=dtype), tg.tensor(w[:, :, 0], dtype=dtype), groups=2).dtype == dtype
    assert F.conv_transpose2d(tg.tensor(x, dtype=dtype), tg.tensor(w, dtype=dtype)).dtype == dtype


def test_convolutions_of_empty_batches_and_outputs_follow_pytorch():
    w = tg.randn(2, 1, 2, 3, requires_grad=True)
    assert F.conv2d(tg.zeros(0, 1, 4, 4), w).shape == (0, 2, 3, 2)
    # a transposed convolution of an empty batch is empty; of no channels, the bias alone
    assert F.conv_transpose2d(tg.zeros(0, 2, 3, 3), w).shape == (0, 1, 4, 5)
    np.testing.assert_array_equal(F.conv_transpose2d(tg.zeros(2, 0, 3, 3), tg.zeros(0, 1, 2, 2),
                                                     tg.tensor([1.5])).numpy(), np.full((2, 1, 4, 4), 1.5))
    # an empty output: PyTorch's oneDNN path (float32, a batch of 2 or more) returns it, the others refuse
    out = F.conv_transpose2d(tg.ones(2, 2, 1, 5), w, stride=2, padding=1)
    assert out.shape == (2, 1, 0, 9)
    out.sum().backward()
    assert w.grad.shape == w.shape and not w.grad.numpy().any()
    with pytest.raises(RuntimeError, match="empty output"):
        F.conv_transpose2d(tg.ones(1, 2, 1, 5), w, stride=2, padding=1)
    with pytest.raises(RuntimeError, match="empty output"):
        F.conv_transpose2d(tg.ones(2, 2, 1, 5, dtype=tg.float64), w.double(), stride=2, padding=1)
    with pytest.raises(RuntimeError, match="empty image"):
        F.conv_transpose2d(tg.ones(1, 2, 4, 0), w)


# ----------------------------------------------------------------------------- 1-d pooling, small inputs
@fewer_examples
@given(st.data())
def test_max_pool1d_and_avg_pool1d(data):
    """The 2-d references on height-1 images."""
    k, stride = data.draw(st.integers(1, 3)), data.draw(st.sampled_from([None, 1, 2]))
    padding, ceil = data.draw(st.integers(0, k // 2)), data.draw(st.booleans())
    length = data.draw(st.integers(max(1, k - 2 * padding), 6))
    shape = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)), length)
    x = data.draw(spread(shape))
    s = stride or k
    check_op(lambda t: F.max_pool1d(t, k, stride, padding, ceil_mode=ceil),
             lambda a: max_pool2d_np(a[:, :, None], (1, k), (1, s), (0, padding), (1, 1), ceil)[0][:, :, 0], x,
             second_order=True)
    _, indices = F.max_pool1d(tg.tensor(x), k, stride, padding, ceil_mode=ceil, return_indices=True)
    np.testing.assert_array_equal(indices.numpy(),
                                  max_pool2d_np(x[:, :, None], (1, k), (1, s), (0, padding), (1, 1), ceil)[1][:, :, 0])
    include = data.draw(st.booleans())
    check_op(lambda t: F.avg_pool1d(t, k, stride, padding, ceil, include),
             lambda a: avg_pool2d_np(a[:, :, None], (1, k), (1, s), (0, padding), ceil, include)[:, :, 0], x,
             second_order=True)


def test_1d_pooling_unbatched_and_errors():
    assert F.max_pool1d(tg.randn(3, 6), 2).shape == (3, 3)
    assert F.avg_pool1d(tg.randn(3, 6), 3).shape == (3, 2)
    with pytest.raises(RuntimeError, match="max_pool1d: .*too small"):
        F.max_pool1d(tg.randn(2, 2), 3)
    with pytest.raises(RuntimeError, match="max_pool1d: expected a 2-d or 3-d .* got shape \\(2, 0, 5\\)"):
        F.max_pool1d(tg.randn(2, 0, 5), 3)
    with pytest.raises(NotImplementedError, match="max_pool1d: not implemented for int64"):   # PyTorch: floats
        F.max_pool1d(tg.ones(1, 2, 4, dtype=tg.int64), 2)
    with pytest.raises(TypeError, match="max_pool1d: kernel_size must be an int"):
        F.max_pool1d(tg.randn(1, 2, 4), (2, 2))


def test_pooling_keeps_a_ceil_mode_window_longer_than_the_input_as_pytorch():
    """PyTorch's output size, floor or ceil of (size + 2 padding - span) / stride plus 1, may count a ceil_mode
    window that reaches past a short input; it averages (or takes the largest of) the part inside."""
    x = tg.tensor([[[[1.0, 5.0]]]])
    np.testing.assert_array_equal(F.max_pool2d(x, 2, ceil_mode=True).numpy(), [[[[5.0]]]])
    np.testing.assert_array_equal(F.avg_pool2d(x, 2, ceil_mode=True).numpy(), [[[[3.0]]]])
    with pytest.raises(RuntimeError, match="too small"):
        F.max_pool2d(x, 2)


# ----------------------------------------------------------------------------- adaptive_avg_pool2d
def adaptive_avg_pool2d_np(x, size):
    """Output (i, j) averages rows floor(i H / OH) .. ceil((i + 1) H / OH) - 1, and likewise the columns."""
    h, w = x.shape[-2:]
    oh, ow = size
    out = np.zeros(x.shape[:-2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            rows = slice(i * h // oh, -(-(i + 1) * h // oh))
            cols = slice(j * w // ow, -(-(j + 1) * w // ow))
            out[..., i, j] = x[..., rows, cols].mean(axis=(-2, -1))
    return out


@fewer_examples
@given(st.data())
def test_adaptive_avg_pool2d(data):
    shape = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)), data.draw(st.integers(1, 6)),
             data.draw(st.integers(1, 6)))
    if data.draw(st.booleans()):
        shape = shape[1:]                                     # unbatched
    size = (data.draw(st.integers(1, 7)), data.draw(st.integers(1, 7)))
    x = data.draw(values(shape))
    check_op(lambda t: F.adaptive_avg_pool2d(t, size), lambda a: adaptive_avg_pool2d_np(a, size), x, second_order=True)


def test_adaptive_avg_pool2d_sizes_errors_and_pytorch():
    x = tg.randn(2, 3, 5, 7)
    assert F.adaptive_avg_pool2d(x, 3).shape == (2, 3, 3, 3)
    assert F.adaptive_avg_pool2d(x, (None, 2)).shape == (2, 3, 5, 2)      # None keeps the input's size
    assert F.adaptive_avg_pool2d(x, (0, 2)).shape == (2, 3, 0, 2)
    # (1, 1) is the mean over the last two dims, for any input with two (PyTorch's shortcut)
    np.testing.assert_allclose(F.adaptive_avg_pool2d(x, 1).numpy(), x.numpy().mean((-2, -1), keepdims=True), rtol=1e-6)
    assert np.isnan(F.adaptive_avg_pool2d(tg.ones(1, 3, 0), 1).numpy()).all()
    with pytest.raises(RuntimeError, match="adaptive_avg_pool2d: expected a 3-d"):
        F.adaptive_avg_pool2d(tg.ones(3, 5), 2)
    with pytest.raises(RuntimeError, match="nothing empty but the batch"):
        F.adaptive_avg_pool2d(tg.ones(1, 4, 0), 2)
    with pytest.raises(NotImplementedError, match="int64"):
        F.adaptive_avg_pool2d(tg.ones(1, 2, 3, dtype=tg.int64), 2)
    with pytest.raises(RuntimeError, match=">= 0"):
        F.adaptive_avg_pool2d(x, -1)
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(0).standard_normal((2, 3, 5, 7))
    for size in (3, (2, 4), (5, 6), (4, None)):
        np.testing.assert_allclose(F.adaptive_avg_pool2d(tg.tensor(a), size).numpy(),
                                   torch.nn.functional.adaptive_avg_pool2d(torch.tensor(a), size).numpy(), rtol=1e-12)


# ----------------------------------------------------------------------------- unfold
def unfold_np(x, k, d, p, s):
    """(N, C, H, W) -> (N, C kh kw, L): window l's values, channel by channel, kernel row by row."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.zeros((n, c, k[0], k[1], oh, ow))
    for i in range(k[0]):
        for j in range(k[1]):
            out[:, :, i, j] = padded[:, :, i * d[0]:i * d[0] + (oh - 1) * s[0] + 1:s[0],
                                     j * d[1]:j * d[1] + (ow - 1) * s[1] + 1:s[1]]
    return out.reshape(n, c * k[0] * k[1], oh * ow)


@fewer_examples
@given(st.data())
def test_unfold(data):
    k = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    d, p, s = [(data.draw(st.integers(lo, 2)), data.draw(st.integers(lo, 2))) for lo in (1, 0, 1)]
    size = tuple(data.draw(st.integers(max(1, dd * (kk - 1) + 1 - 2 * pp), 6)) for kk, dd, pp in zip(k, d, p))
    x = data.draw(values((data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)), *size)))
    check_op(lambda t: F.unfold(t, k, d, p, s), lambda a: unfold_np(a, k, d, p, s), x, second_order=True)


def test_unfold_shapes_errors_and_pytorch():
    assert F.unfold(tg.randn(2, 3, 4), 2).shape == (8, 6)                  # unbatched (C, H, W)
    assert F.unfold(tg.zeros(0, 2, 3, 4), 2).shape == (0, 8, 6)
    assert F.unfold(tg.ones(1, 1, 2, 2, dtype=tg.bool), 1).dtype == tg.bool
    with pytest.raises(IndexError, match="unfold: expected a 3-d"):
        F.unfold(tg.ones(3, 4), 2)
    with pytest.raises(RuntimeError, match="nothing empty but the batch"):
        F.unfold(tg.ones(1, 0, 3, 4), 2)
    with pytest.raises(RuntimeError, match="each must be at least one"):
        F.unfold(tg.ones(1, 2, 3, 4), 4)
    with pytest.raises(NotImplementedError, match="int64"):
        F.unfold(tg.ones(1, 2, 3, 4, dtype=tg.int64), 2)
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(0).standard_normal((2, 3, 5, 6))
    np.testing.assert_array_equal(F.unfold(tg.tensor(a), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)).numpy(),
                                  torch.nn.functional.unfold(torch.tensor(a), (2, 3), dilation=(1, 2), padding=1,
                                                             stride=(2, 1)).numpy())


# ----------------------------------------------------------------------------- errors
def test_errors_name_the_op_and_the_shapes():
    x, w = tg.randn(1, 4, 5, 5), tg.randn(8, 3, 3, 3)
    with pytest.raises(RuntimeError, match=r"conv2d: weight of shape \(8, 3, 3, 3\) with groups=1 expects an input "
                                           r"with 3 channels, got input of shape \(1, 4, 5, 5\)"):
        F.conv2d(x, w)
    with pytest.raises(RuntimeError, match="groups=2 does not divide"):
        F.conv2d(tg.randn(1, 4, 5, 5), tg.randn(3, 2, 3, 3), groups=2)
    with pytest.raises(RuntimeError, match=r"bigger than the padded input \(0 \+ 2 \+ 0 = 2\)"):
        F.conv2d(tg.randn(1, 1, 2, 2), tg.randn(1, 1, 3, 3))
    assert F.conv2d(tg.randn(1, 1, 2, 2), tg.randn(1, 1, 3, 3), padding=1).shape == (1, 1, 2, 2)
    with pytest.raises(RuntimeError, match="bigger than the padded input"):
        F.conv2d(tg.randn(1, 1, 3, 3), tg.randn(1, 1, 2, 2), dilation=3)
    with pytest.raises(RuntimeError, match=r"conv2d: stride must be positive, got \(0, 0\)"):
        F.conv2d(tg.randn(1, 3, 5, 5), w, stride=0)
    with pytest.raises(TypeError, match="stride must be an int or a pair of ints"):
        F.conv2d(tg.randn(1, 3, 5, 5), w, stride=1.5)
    with pytest.raises(RuntimeError, match="padding must be non-negative"):
        F.conv2d(tg.randn(1, 3, 5, 5), w, padding=-1)
    with pytest.raises(RuntimeError, match="padding='same' is not supported for strided convolutions"):
        F.conv2d(tg.randn(1, 3, 5, 5), w, padding="same", stride=2)
    with pytest.raises(RuntimeError, match="'valid' or 'same', got 'full'"):
        F.conv2d(tg.randn(1, 3, 5, 5), w, padding="full")
    with pytest.raises(RuntimeError, match=r"bias of shape \(3,\) does not fit"):
        F.conv2d(tg.randn(1, 3, 5, 5), w, tg.randn(3))
    with pytest.raises(RuntimeError, match=r"3-d \(C, H, W\) or 4-d .* got shape \(5, 5\)"):
        F.conv2d(tg.randn(5, 5), w)
    with pytest.raises(NotImplementedError, match="conv2d: not implemented for bool"):
        F.conv2d(tg.zeros(1, 3, 5, 5, dtype=tg.bool), w.to(dtype=tg.bool))
    with pytest.raises(RuntimeError, match="same dtype"):
        F.conv2d(tg.zeros(1, 3, 5, 5, dtype=tg.int64), w)
    with pytest.raises(RuntimeError, match="empty image"):
        F.conv2d(tg.zeros(1, 3, 0, 5), w, padding=2)
    with pytest.raises(RuntimeError, match="same dtype"):
        F.conv2d(tg.randn(1, 3, 5, 5, dtype=tg.float64), w)


def test_transpose_and_pool_errors():
    with pytest.raises(RuntimeError, match=r"conv_transpose2d: weight of shape \(2, 3, 3, 3\) with groups=1 "
                                           r"expects an input with 2 channels"):
        F.conv_transpose2d(tg.randn(1, 3, 4, 4), tg.randn(2, 3, 3, 3))
    with pytest.raises(RuntimeError, match="output_padding .* must be smaller than the stride"):
        F.conv_transpose2d(tg.randn(1, 2, 4, 4), tg.randn(2, 3, 3, 3), stride=2, output_padding=2)
    with pytest.raises(RuntimeError, match=r"max_pool2d: padding \(2, 2\) must be at most half of kernel_size"):
        F.max_pool2d(tg.randn(1, 1, 6, 6), 3, padding=2)
    with pytest.raises(RuntimeError, match=r"max_pool2d: an input of spatial size \(2, 2\) .* output of size "
                                           r"\(0, 0\), too small"):
        F.max_pool2d(tg.randn(1, 1, 2, 2), 3)
    with pytest.raises(RuntimeError, match="nothing empty but the batch"):
        F.max_pool2d(tg.randn(1, 1, 0, 2), 1)
    with pytest.raises(RuntimeError, match="avg_pool2d: stride must be positive"):
        F.avg_pool2d(tg.randn(1, 1, 4, 4), 2, stride=0)
    with pytest.raises(RuntimeError, match="divisor_override must be a non-zero int"):
        F.avg_pool2d(tg.randn(1, 1, 4, 4), 2, divisor_override=0)
    with pytest.raises(RuntimeError, match="avg_pool2d: needs a floating-point input"):
        F.avg_pool2d(tg.zeros(1, 1, 4, 4, dtype=tg.int64), 2)
    with pytest.raises(ValueError, match="groups=2 must divide in_channels"):
        nn.Conv2d(3, 4, 3, groups=2)


# ----------------------------------------------------------------------------- modules
def test_conv2d_module_has_pytorchs_parameters_and_init():
    conv = nn.Conv2d(4, 6, (3, 2), padding=1, groups=2)
    assert list(conv.state_dict()) == ["weight", "bias"]
    assert conv.weight.shape == (6, 2, 3, 2) and conv.bias.shape == (6,)
    bound = 1 / math.sqrt(2 * 3 * 2)              # fan_in = in / groups * kh * kw
    for p in (conv.weight, conv.bias):
        assert np.abs(p.numpy()).max() <= bound and np.abs(p.numpy()).max() > bound / 2
    x = tg.randn(2, 4, 5, 5)
    np.testing.assert_allclose(conv(x).numpy(), F.conv2d(x, conv.weight, conv.bias, padding=1, groups=2).numpy())
    assert nn.Conv2d(1, 1, 3, bias=False).bias is None
    assert "groups=2" in repr(conv)
    assert nn.Conv2d(2, 2, 4, padding="same")(tg.randn(2, 5, 5)).shape == (2, 5, 5)


def test_pool_and_shape_modules():
    x = tg.randn(2, 3, 6, 6)
    np.testing.assert_array_equal(nn.MaxPool2d(2)(x).numpy(), F.max_pool2d(x, 2).numpy())
    values_, indices = nn.MaxPool2d(3, stride=2, padding=1, return_indices=True)(x)
    assert values_.shape == indices.shape == (2, 3, 3, 3)
    np.testing.assert_allclose(nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False)(x).numpy(),
                               avg_pool2d_np(x.numpy(), (3, 3), (2, 2), (1, 1), True, False), rtol=1e-5, atol=1e-6)
    assert nn.Flatten()(x).shape == (2, 108) and nn.Flatten(0, 1)(x).shape == (6, 6, 6)
    np.testing.assert_array_equal(nn.ReLU()(x).numpy(), np.maximum(x.numpy(), 0))


def test_a_small_cnn_overfits_one_batch():
    images, labels = tg.randn(8, 1, 8, 8), tg.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(8 * 4 * 4, 4))
    optimizer = tg.optim.Adam(model.parameters(), lr=1e-2)
    losses = overfit(lambda: F.cross_entropy(model(images), labels), optimizer, max_steps=200, stop_below=0.05)
    assert losses[0] > 1.0 and losses[-1] < 0.05, (losses[0], losses[-1], len(losses))
