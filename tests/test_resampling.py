"""nn.functional.interpolate (nearest, nearest-exact, linear, bilinear) and max_unpool2d (nn/resampling.py):
gradients by central differences, hand examples whose answers are known without a formula, PyTorch's choices of
positions at the edges and its errors, and, where torch is installed, its values and gradients."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from checks import check_op

CASES = [((1, 2, 5), "nearest", dict(size=8)), ((2, 1, 4), "nearest-exact", dict(scale_factor=0.7)),
         ((1, 2, 5), "linear", dict(size=3)), ((1, 1, 4), "linear", dict(scale_factor=2.5, align_corners=True)),
         ((1, 2, 3, 4), "bilinear", dict(size=(5, 2))), ((1, 1, 3, 3), "bilinear", dict(scale_factor=1.5)),
         ((1, 1, 2, 3, 2), "nearest", dict(scale_factor=(2, 1, 1.5)))]


@pytest.mark.parametrize("shape, mode, options", CASES)
@given(seed=st.integers(0, 2**32 - 1))
def test_interpolate_gradients(shape, mode, options, seed):
    x = np.random.default_rng(seed).standard_normal(shape)
    check_op(lambda t: F.interpolate(t, mode=mode, **options), None, x)


@pytest.mark.parametrize("shape, mode, options", CASES)
def test_interpolate_is_pytorchs(shape, mode, options):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float64):
        x = rng.standard_normal(shape).astype(dtype)
        ours, theirs = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        got, want = F.interpolate(ours, mode=mode, **options), torch.nn.functional.interpolate(theirs, mode=mode,
                                                                                              **options)
        upstream = rng.standard_normal(tuple(want.shape)).astype(dtype)
        got.backward(tg.tensor(upstream))
        want.backward(torch.tensor(upstream))
        tolerance = 1e-6 if dtype == np.float32 else 1e-13
        assert got.shape == tuple(want.shape) and got.dtype == dtype
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), atol=tolerance)
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), atol=10 * tolerance)


def test_interpolate_examples():
    ramp = tg.tensor([[[0.0, 1.0, 2.0, 3.0]]])
    np.testing.assert_array_equal(F.interpolate(ramp, scale_factor=2).numpy()[0, 0], [0, 0, 1, 1, 2, 2, 3, 3])
    # align_corners: the ends stay the ends, and a ramp stays a ramp
    np.testing.assert_allclose(F.interpolate(ramp, size=7, mode="linear", align_corners=True).numpy()[0, 0],
                               np.linspace(0, 3, 7))
    # without it, the first and last output positions sit at the edges' pixel centres: clamped there
    out = F.interpolate(ramp, size=8, mode="linear").numpy()[0, 0]
    assert out[0] == 0 and out[-1] == 3 and np.all(np.diff(out) >= 0)
    image = tg.arange(4.0).reshape(1, 1, 2, 2)
    np.testing.assert_allclose(F.interpolate(image, size=(3, 3), mode="bilinear", align_corners=True).numpy()[0, 0],
                               [[0, 0.5, 1], [1, 1.5, 2], [2, 2.5, 3]])


def test_interpolate_errors():
    x = tg.zeros(1, 1, 4)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(x, size=2, align_corners=True)
    with pytest.raises(NotImplementedError, match="bilinear.*4-D"):          # PyTorch's class, too
        F.interpolate(x, size=2, mode="bilinear")
    with pytest.raises(NotImplementedError, match="3-D, 4-D or 5-D"):
        F.interpolate(tg.zeros(4, 4), size=2)
    with pytest.raises(NotImplementedError, match="bicubic"):
        F.interpolate(tg.zeros(1, 1, 4, 4), size=2, mode="bicubic")
    with pytest.raises(ValueError, match="one value per spatial dim"):
        F.interpolate(tg.zeros(1, 1, 4, 4), size=(2, 2, 2))
    # sizes that leave nothing: RuntimeError, as PyTorch's kernels raise it
    with pytest.raises(RuntimeError, match="greater than 0"):
        F.interpolate(x, scale_factor=0.1)
    with pytest.raises(RuntimeError, match="greater than 0"):
        F.interpolate(tg.zeros(1, 1, 0), size=3)


def test_interpolate_keeps_pytorchs_infinities_and_nans():
    """Where a neighbour's weight is 0, inf * 0 = nan reaches the output, as in PyTorch: an unchanged size blends
    each position with itself (weights 1 and 0), and positions are computed as PyTorch's fused multiply-add
    computes them (a tiny weight, not 0, keeps an infinity an infinity)."""
    torch = pytest.importorskip("torch")
    for x, kwargs in [(np.array([[[1.0, np.inf, -2.0, 0.5]]], np.float32), dict(size=4, mode="linear")),
                      (np.array([[[-np.inf]]], np.float32), dict(size=5, mode="linear")),
                      (np.array([[[0.0, 0.0, np.inf, 0.0, 0.0]]], np.float32), dict(scale_factor=3.0, mode="linear")),
                      (np.array([[[[np.inf, 1.0], [2.0, -np.inf]]]], np.float16), dict(scale_factor=3.0, mode="bilinear"))]:
        ours = F.interpolate(tg.tensor(x), **kwargs).numpy()
        theirs = torch.nn.functional.interpolate(torch.tensor(x), **kwargs).numpy()
        np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs), err_msg=str(kwargs))
        np.testing.assert_allclose(np.nan_to_num(ours), np.nan_to_num(theirs), rtol=1e-3, err_msg=str(kwargs))


@given(seed=st.integers(0, 2**32 - 1), batched=st.booleans())
def test_max_unpool2d_puts_each_maximum_back(seed, batched):
    """Unpooling max_pool2d's output gives the input where each window's maximum was and 0 elsewhere; the
    gradient of each value is the upstream gradient at its position (gradchecked)."""
    rng = np.random.default_rng(seed)
    x = rng.permutation(32).astype(np.float64).reshape(1, 2, 4, 4)          # distinct: no ties
    x = x if batched else x[0]
    values, indices = F.max_pool2d(tg.tensor(x), 2, return_indices=True)
    restored = F.max_unpool2d(values, indices, 2).numpy()
    kept = restored != 0
    np.testing.assert_array_equal(restored[kept], x[kept])
    assert kept.sum() == values.numel()
    check_op(lambda v: F.max_unpool2d(v, indices, 2), None, values.numpy())


def test_max_unpool2d_sizes_and_errors():
    values, indices = F.max_pool2d(tg.arange(16.0).reshape(1, 1, 4, 4), 2, return_indices=True)
    assert F.max_unpool2d(values, indices, 2).shape == (1, 1, 4, 4)
    assert F.max_unpool2d(values, indices, 2, output_size=(5, 5)).shape == (1, 1, 5, 5)
    assert F.max_unpool2d(values, indices, 3, stride=1).shape == (1, 1, 4, 4)
    with pytest.raises(RuntimeError, match="out of range"):     # on a GPU at the next read (deferred_checks.py)
        F.max_unpool2d(values, indices * 10, 2).numpy()
    with pytest.raises(RuntimeError, match="int64 tensor of the input's shape"):
        F.max_unpool2d(values, indices.float(), 2)
