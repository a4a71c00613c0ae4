"""nn.functional.group_norm and batch_norm against NumPy references written here from PyTorch's formulas.

Property tests compare the forward with the reference and gradcheck it (float64, central differences; the
gradient flows through the statistics); example tests pin the running statistics' update, the errors,
16-bit inputs and, where torch is importable, PyTorch's own numbers.
"""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from checks import check_op, values


def np_group_norm(x, groups, weight=None, bias=None, eps=1e-5):
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    out = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)).reshape(x.shape)
    per_channel = (c,) + (1,) * (x.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out


def np_batch_norm(x, mean, var, weight=None, bias=None, eps=1e-5):
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    out = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


@st.composite
def normalization_case(draw):
    """(N, C, *) with C a multiple of the group count; each group holds at least 2 values (one has no spread)."""
    groups = draw(st.integers(1, 3))
    channels = groups * draw(st.integers(1, 2))
    spatial = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    n = draw(st.integers(1, 3))
    if (channels // groups) * math.prod(spatial) < 2:
        spatial = spatial + (2,)
    return (n, channels) + spatial, groups


@given(case=normalization_case(), data=st.data(), affine=st.sampled_from(["none", "weight", "both"]))
def test_group_norm(case, data, affine):
    shape, groups = case
    arrays = [data.draw(values(shape))]
    if affine != "none":
        arrays.append(data.draw(values(shape[1:2])))
    if affine == "both":
        arrays.append(data.draw(values(shape[1:2])))
    check_op(lambda x, *wb: F.group_norm(x, groups, *wb), lambda x, *wb: np_group_norm(x, groups, *wb), *arrays,
             atol=1e-6, grad_atol=1e-4, second_order=True)


@given(case=normalization_case(), data=st.data(), training=st.booleans())
def test_batch_norm(case, data, training):
    shape, _ = case
    if training and shape[0] * math.prod(shape[2:]) < 2:
        shape = (2,) + shape[1:]
    c = shape[1]
    x, w, b = data.draw(values(shape)), data.draw(values((c,))), data.draw(values((c,)))
    mean, var = data.draw(values((c,))), data.draw(values((c,), 0.5, 2.0))
    if training:
        axes = (0,) + tuple(range(2, len(shape)))

        def reference(x, w, b):
            return np_batch_norm(x, x.mean(axes), x.var(axes), w, b)
        check_op(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), reference, x, w, b,
                 atol=1e-6, grad_atol=1e-4, second_order=True)
    else:
        running = [tg.tensor(mean, dtype=tg.float64), tg.tensor(var, dtype=tg.float64)]
        check_op(lambda x, w, b: F.batch_norm(x, *running, w, b), lambda x, w, b: np_batch_norm(x, mean, var, w, b),
                 x, w, b, second_order=True)


def test_batch_norm_training_moves_the_running_statistics():
    x = np.random.default_rng(0).standard_normal((4, 3, 5))
    running_mean, running_var = tg.zeros(3, dtype=tg.float64), tg.ones(3, dtype=tg.float64)
    out = F.batch_norm(tg.tensor(x), running_mean, running_var, training=True, momentum=0.3)
    np.testing.assert_allclose(out.numpy(), np_batch_norm(x, x.mean((0, 2)), x.var((0, 2))), rtol=1e-10, atol=1e-12)
    # the unbiased variance (n / (n - 1) times the biased one) for running_var, as torch
    np.testing.assert_allclose(running_mean.numpy(), 0.3 * x.mean((0, 2)), rtol=1e-12)
    np.testing.assert_allclose(running_var.numpy(), 0.7 + 0.3 * x.var((0, 2), ddof=1), rtol=1e-12)
    # evaluation normalises by them, and leaves them alone
    before = running_mean.numpy().copy()
    F.batch_norm(tg.tensor(x), running_mean, running_var)
    np.testing.assert_array_equal(running_mean.numpy(), before)


def test_errors_as_in_pytorch():
    x = tg.randn(2, 4, 3)
    with pytest.raises(RuntimeError, match="group_norm: the 4 channels .* num_groups=3"):
        F.group_norm(x, 3)
    with pytest.raises(ValueError, match="group_norm: expected more than 1 value per channel"):
        F.group_norm(tg.randn(1, 2), 2)
    with pytest.raises(RuntimeError, match="group_norm: expected an input of at least 2 dims"):
        F.group_norm(tg.randn(4), 2)
    with pytest.raises(RuntimeError, match=r"group_norm: weight must hold one value per channel, shape \(4,\)"):
        F.group_norm(x, 2, tg.ones(3))
    assert F.group_norm(tg.randn(2, 4, 0), 2).shape == (2, 4, 0)           # empty groups: empty, as in PyTorch 2.13
    assert F.group_norm(tg.randn(2, 0, 3), 1).shape == (2, 0, 3)
    with pytest.raises(NotImplementedError, match="int64"):
        F.group_norm(tg.ones(2, 4, 3, dtype=tg.int64), 2)
    with pytest.raises(ZeroDivisionError):                     # PyTorch's Python divides by the group count too
        F.group_norm(x, 0)
    assert F.group_norm(tg.randn(0, 4, 3), 2).shape == (0, 4, 3)
    with pytest.raises(ValueError, match="batch_norm: expected more than 1 value per channel"):
        F.batch_norm(tg.randn(1, 3), None, None, training=True)
    with pytest.raises(RuntimeError, match="running_mean and running_var must be given"):
        F.batch_norm(tg.randn(4, 3), None, None)
    with pytest.raises(RuntimeError, match="running_mean should hold 3 values"):
        F.batch_norm(tg.randn(2, 3), tg.zeros(2), tg.ones(3))
    with pytest.raises(RuntimeError, match="weight should hold 3 values"):
        F.batch_norm(tg.randn(2, 3), tg.zeros(3), tg.ones(3), tg.ones(2))
    with pytest.raises(RuntimeError, match="share the dtype"):
        F.batch_norm(tg.randn(2, 3, dtype=tg.float64), tg.zeros(3), tg.ones(3))
    with pytest.raises(NotImplementedError, match="int64"):
        F.batch_norm(tg.ones(2, 3, dtype=tg.int64), tg.zeros(3), tg.ones(3))
    assert F.batch_norm(tg.randn(1, 3), tg.zeros(3), tg.ones(3)).shape == (1, 3)     # evaluation: any batch


@pytest.mark.parametrize("dtype", [tg.float16, tg.bfloat16])
def test_16_bit_inputs_compute_in_float32_and_take_float32_parameters(dtype):
    x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    out = F.group_norm(tg.tensor(x).to(dtype=dtype), 2, tg.ones(4), tg.zeros(4))
    assert out.dtype == dtype
    reference = np_group_norm(tg.tensor(x).to(dtype=dtype).float().numpy().astype(np.float64), 2)
    np.testing.assert_allclose(out.float().numpy(), reference, rtol=1e-2, atol=1e-2)
    out = F.batch_norm(tg.tensor(x).to(dtype=dtype), tg.zeros(4), tg.ones(4), tg.ones(4), tg.zeros(4))
    assert out.dtype == dtype


def test_special_values_and_numbers_are_pytorchs():
    """PyTorch computes x * (rstd * weight) + (bias - mean * rstd * weight); so do we, and an infinite weight or
    mean gives its nan where the centred formula would give an infinity."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((3, 4, 5)), rng.standard_normal(4), rng.standard_normal(4)
    theirs = torch.nn.functional.group_norm(torch.tensor(x), 2, torch.tensor(w), torch.tensor(b)).numpy()
    np.testing.assert_allclose(F.group_norm(tg.tensor(x), 2, tg.tensor(w), tg.tensor(b)).numpy(), theirs, rtol=1e-10,
                               atol=1e-12)
    mean, var = rng.standard_normal(4), rng.uniform(0.5, 2, 4)
    mean[1], w[2], var[3] = -np.inf, np.inf, -1.0
    with np.errstate(invalid="ignore"):
        ours = F.batch_norm(tg.tensor(x), tg.tensor(mean), tg.tensor(var), tg.tensor(w), tg.tensor(b)).numpy()
    theirs = torch.nn.functional.batch_norm(torch.tensor(x), torch.tensor(mean), torch.tensor(var), torch.tensor(w),
                                            torch.tensor(b)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)     # nan and inf where PyTorch has them
