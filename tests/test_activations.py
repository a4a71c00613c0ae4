"""nn.functional's activations against NumPy references written from PyTorch's documented formulas.

Property tests gradcheck each one (first and second order) on values kept 1e-3 away from its
kinks and from softplus's threshold by construction; example tests pin PyTorch's gradients at
the kinks, check that the overflow-prone ones stay finite at |x| = 1000 with the right
gradient, and check dtypes and errors.
"""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from checks import check_op, noncontiguous, shapes, values

ALPHA, SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def np_softplus(x, beta=1.0, threshold=20.0):
    return np.where(x * beta > threshold, x, np.logaddexp(0, beta * x) / beta)


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


# name: (our function, NumPy reference, kinks to stay away from, range of values); the default
# parameters' formulas are the same code as these, and are pinned by the example tests below
CASES = {
    "silu": (F.silu, lambda x: x / (1 + np.exp(-x)), (), 4),
    "softplus_beta2_threshold3": (lambda x: F.softplus(x, beta=2, threshold=3), lambda x: np_softplus(x, 2, 3),
                                  (1.5,), 4),
    "elu_alpha_half": (lambda x: F.elu(x, alpha=0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x)), (0,), 4),
    "selu": (F.selu, lambda x: SCALE * np.where(x > 0, x, ALPHA * np.expm1(x)), (0,), 4),
    "celu_alpha2": (lambda x: F.celu(x, alpha=2.0), lambda x: np.where(x > 0, x, 2 * np.expm1(x / 2)), (0,), 4),
    "leaky_relu_slope": (lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x), (0,), 4),
    "relu6": (F.relu6, lambda x: np.clip(x, 0, 6), (0, 6), 8),
    "hardtanh_bounds": (lambda x: F.hardtanh(x, -2.0, 0.5), lambda x: np.clip(x, -2, 0.5), (-2, 0.5), 3),
    "hardsigmoid": (F.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1), (-3, 3), 5),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6, (-3, 3), 5),
    "mish": (F.mish, lambda x: x * np.tanh(np.logaddexp(0, x)), (), 4),
    "logsigmoid": (F.logsigmoid, lambda x: -np.logaddexp(0, -x), (), 4),
    "softsign": (F.softsign, lambda x: x / (1 + np.abs(x)), (0,), 4),     # |x|: its second derivative jumps at 0
}


@pytest.mark.parametrize("name", list(CASES))
@given(data=st.data())
def test_activation_values_and_gradients(name, data):
    fn, reference, kinks, high = CASES[name]
    # elementwise: small shapes say it all (full Jacobians, second order, 17 cases)
    x = data.draw(noncontiguous(values(data.draw(shapes(max_dims=2, max_side=3)), -high, high, away_from=kinks)))
    check_op(fn, reference, x, second_order=True)


@given(data=st.data())
def test_softmin(data):
    shape = data.draw(shapes(min_dims=1, max_side=3))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = data.draw(values(shape))
    check_op(lambda t: F.softmin(t, dim), lambda a: np_softmax(-a, dim), x, second_order=True)


DEFAULTS = {   # the default parameters, forward on a grid across every kink
    "softplus": (F.softplus, np_softplus),
    "elu": (F.elu, lambda x: np.where(x > 0, x, np.expm1(x))),
    "celu": (F.celu, lambda x: np.where(x > 0, x, np.expm1(x))),
    "leaky_relu": (F.leaky_relu, lambda x: np.where(x > 0, x, 0.01 * x)),
    "hardtanh": (F.hardtanh, lambda x: np.clip(x, -1, 1)),
}


@pytest.mark.parametrize("name", list(DEFAULTS))
def test_default_parameters(name):
    fn, reference = DEFAULTS[name]
    grid = np.linspace(-25, 25, 201)
    np.testing.assert_allclose(fn(tg.tensor(grid, dtype=tg.float64)).numpy(), reference(grid), rtol=1e-13, atol=1e-15)


# ----------------------------------------------------------------------------- kinks
def grad_at(fn, point):
    x = tg.tensor([point], dtype=tg.float64, requires_grad=True)
    fn(x).sum().backward()
    return x.grad.item()


@pytest.mark.parametrize("fn, point, expected", [
    # PyTorch's backward formulas: negative branch at 0 (x > 0 ? 1 : slope)
    (F.leaky_relu, 0.0, 0.01),
    (lambda x: F.leaky_relu(x, 0.2), 0.0, 0.2),
    (lambda x: F.elu(x, alpha=0.5), 0.0, 0.5),
    (F.selu, 0.0, ALPHA * SCALE),
    (lambda x: F.celu(x, alpha=2.0), 0.0, 1.0),
    # only strictly inside (min, max)
    (F.hardtanh, -1.0, 0.0), (F.hardtanh, 1.0, 0.0), (F.hardtanh, 0.999, 1.0),
    (F.relu6, 0.0, 0.0), (F.relu6, 6.0, 0.0), (F.relu6, 5.0, 1.0),
    (F.hardsigmoid, -3.0, 0.0), (F.hardsigmoid, 3.0, 0.0), (F.hardsigmoid, 0.0, 1 / 6),
    # hardswish: x/3 + 1/2 strictly inside (-3, 3); the outer pieces' slopes at -3 and 3
    (F.hardswish, -3.0, 0.0), (F.hardswish, 3.0, 1.0), (F.hardswish, -2.999, -0.4996666666666667), (F.hardswish, -3.001, 0.0), (F.hardswish, 3.001, 1.0),
    # smooth ones at 0
    (F.softplus, 0.0, 0.5), (F.logsigmoid, 0.0, 0.5), (F.silu, 0.0, 0.5), (F.mish, 0.0, 0.6), (F.softsign, 0.0, 1.0),
])
def test_gradients_at_kinks_follow_pytorch(fn, point, expected):
    assert grad_at(fn, point) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_softplus_switches_to_the_identity_above_the_threshold():
    x = tg.tensor([10.0, 10.5, 9.5], dtype=tg.float64, requires_grad=True)
    y = F.softplus(x, beta=2, threshold=20)           # beta x = 20, 21, 19: only the middle one is past it
    y.sum().backward()
    np.testing.assert_array_equal(y.numpy()[1], 10.5)
    np.testing.assert_allclose(y.numpy()[[0, 2]], np.logaddexp(0, [20.0, 19.0]) / 2, rtol=1e-15)
    np.testing.assert_allclose(x.grad.numpy(), [1 / (1 + math.exp(-20)), 1.0, 1 / (1 + math.exp(-19))], rtol=1e-15)


# ----------------------------------------------------------------------------- extremes
EXTREME = {   # name: (function, value at -1000, value at 1000, gradient at -1000, at 1000)
    "softplus": (F.softplus, 0.0, 1000.0, 0.0, 1.0),
    "softplus_no_threshold": (lambda x: F.softplus(x, threshold=math.inf), 0.0, 1000.0, 0.0, 1.0),
    "logsigmoid": (F.logsigmoid, -1000.0, 0.0, 1.0, 0.0),
    "mish": (F.mish, 0.0, 1000.0, 0.0, 1.0),
    "silu": (F.silu, 0.0, 1000.0, 0.0, 1.0),
    "elu": (F.elu, -1.0, 1000.0, 0.0, 1.0),
    "selu": (F.selu, -ALPHA * SCALE, 1000.0 * SCALE, 0.0, SCALE),
    "celu": (lambda x: F.celu(x, alpha=0.5), -0.5, 1000.0, 0.0, 1.0),
}


@pytest.mark.parametrize("dtype", [tg.float32, tg.float64])
@pytest.mark.parametrize("name", list(EXTREME))
def test_large_inputs_stay_finite_with_the_right_gradient(name, dtype):
    fn, low, high, grad_low, grad_high = EXTREME[name]
    x = tg.tensor([-1000.0, 1000.0], dtype=dtype, requires_grad=True)
    y = fn(x)
    y.sum().backward()
    assert y.dtype == dtype
    rtol = 1e-6 if dtype == tg.float32 else 1e-12
    np.testing.assert_allclose(y.numpy(), [low, high], rtol=rtol, atol=1e-30)
    np.testing.assert_allclose(x.grad.numpy(), [grad_low, grad_high], rtol=rtol, atol=1e-30)


# ----------------------------------------------------------------------------- dtypes, errors
@pytest.mark.parametrize("name", ["silu", "selu", "hardswish", "mish", "logsigmoid"])
def test_integer_and_bool_inputs_are_refused_as_in_pytorch(name):
    """PyTorch computes these activations for floating-point tensors only: NotImplementedError otherwise."""
    fn = CASES[name][0]
    for x in (tg.tensor([-2, 0, 3]), tg.tensor([True, False])):
        with pytest.raises(NotImplementedError, match=f"{name}.*{x.dtype}"):
            fn(x)


def test_hardtanh_and_relu6_keep_an_integer_dtype_and_refuse_bool():
    """As PyTorch: the bounds become integers (toward zero), the result keeps the input's integer dtype."""
    x = tg.tensor([-3, 0, 2, 9], dtype=tg.int32)
    assert F.relu6(x).dtype == tg.int32 and F.relu6(x).tolist() == [0, 0, 2, 6]
    assert F.hardtanh(x, -1.5, 2.5).tolist() == [-1, 0, 2, 2]
    with pytest.raises(RuntimeError, match="hardtanh.*bool") as refused:
        F.relu6(tg.tensor([True]))
    assert refused.type is RuntimeError                             # refused on purpose, as PyTorch's
    assert F.softsign(tg.tensor([-2, 0, 3])).dtype == tg.float32      # computed through the division


def test_errors():
    with pytest.raises(RuntimeError, match="celu: alpha must not be 0"):
        F.celu(tg.tensor([1.0]), alpha=0.0)
    with pytest.raises(ValueError, match=r"hardtanh: min_val \(2.0\) must not be greater than max_val \(1.0\)"):
        F.hardtanh(tg.tensor([1.0]), 2.0, 1.0)


# ----------------------------------------------------------------------------- shrinkage, threshold, glu
SHRINKS = {   # name: (our function, NumPy reference, kinks)
    "hardshrink": (lambda x: F.hardshrink(x, 0.5), lambda x: np.where(np.abs(x) > 0.5, x, 0.0), (-0.5, 0.5)),
    "softshrink": (lambda x: F.softshrink(x, 0.5),
                   lambda x: np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0.0)), (-0.5, 0.5)),
    "tanhshrink": (F.tanhshrink, lambda x: x - np.tanh(x), ()),
    "threshold": (lambda x: F.threshold(x, 0.25, -2.0), lambda x: np.where(x > 0.25, x, -2.0), (0.25,)),
}


@pytest.mark.parametrize("name", list(SHRINKS))
@given(data=st.data())
def test_shrinks_and_threshold_values_and_gradients(name, data):
    fn, reference, kinks = SHRINKS[name]
    x = data.draw(noncontiguous(values(data.draw(shapes(max_dims=2, max_side=3)), -3, 3, away_from=kinks)))
    check_op(fn, reference, x, second_order=True)


@given(data=st.data())
def test_glu(data):
    half = data.draw(st.integers(1, 3))
    shape = data.draw(shapes(min_dims=1, max_dims=3, max_side=3))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    shape = tuple(2 * half if i == dim % len(shape) else s for i, s in enumerate(shape))
    x = data.draw(values(shape))

    def reference(a):
        first, second = np.split(a, 2, axis=dim)
        return first / (1 + np.exp(-second))
    check_op(lambda t: F.glu(t, dim), reference, x, second_order=True)


@pytest.mark.parametrize("name, fn", [("hardshrink", lambda t, x: t.hardshrink(x, 0.5)),
                                      ("softshrink", lambda t, x: t.softshrink(x, 0.5)),
                                      ("tanhshrink", lambda t, x: t.tanhshrink(x)),
                                      ("threshold", lambda t, x: t.threshold(x, 0.5, -1.0)),
                                      ("hardswish", lambda t, x: t.hardswish(x)),
                                      ("glu", lambda t, x: t.glu(x.reshape(3, 2), 1))])
def test_special_values_are_pytorchs(name, fn):
    """nan, infinities and signed zeros at and around the kinks come out as PyTorch's kernels give them
    (hardswish(-inf) is nan: -inf * 0; softshrink keeps the sign of a zeroed negative)."""
    torch = pytest.importorskip("torch")
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, -4.0], dtype=np.float32)[:6 if name == "glu" else 8]
    with np.errstate(invalid="ignore"):                 # inf * 0 and inf - inf, on purpose
        ours = fn(F, tg.tensor(x)).numpy()
    theirs = fn(torch.nn.functional, torch.tensor(x)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)             # nan where PyTorch has nan (tanh: last bit)
    zeros = theirs == 0
    np.testing.assert_array_equal(np.signbit(ours[zeros]), np.signbit(theirs[zeros]))


def test_shrink_and_threshold_gradients_at_the_kinks_follow_pytorch():
    # 0 on the closed interval [-lambd, lambd] (hardshrink, softshrink); 0 at x == threshold
    assert grad_at(lambda x: F.hardshrink(x, 0.5), 0.5) == 0.0
    assert grad_at(lambda x: F.hardshrink(x, 0.5), 0.5001) == 1.0
    assert grad_at(lambda x: F.softshrink(x, 0.5), -0.5) == 0.0
    assert grad_at(lambda x: F.threshold(x, 0.5, 2.0), 0.5) == 0.0


def test_shrink_threshold_glu_dtypes_and_errors():
    ints = tg.tensor([-2, 0, 1, 3])
    # threshold keeps an integer dtype (threshold and value truncated toward zero, as PyTorch converts them)
    assert F.threshold(ints, 0.5, 2.5).tolist() == [2, 2, 1, 3] and F.threshold(ints, 0.5, 2.5).dtype == tg.int64
    assert F.threshold(ints, -0.5, -1.0).tolist() == [-1, -1, 1, 3]         # -0.5 -> 0: 0 <= 0
    assert F.tanhshrink(ints).dtype == tg.float32
    for fn in (F.hardshrink, F.softshrink, lambda x: F.glu(x.reshape(2, 2))):
        with pytest.raises(NotImplementedError, match="int64"):
            fn(ints)
    with pytest.raises(NotImplementedError, match="bool"):
        F.threshold(tg.tensor([True]), 0.5, 0.0)
    with pytest.raises(RuntimeError, match="bool") as refused:    # its subtraction refuses bool
        F.tanhshrink(tg.tensor([True]))
    assert refused.type is RuntimeError
    with pytest.raises(RuntimeError, match="softshrink: lambda must be in range"):
        F.softshrink(tg.tensor([1.0]), -0.5)
    np.testing.assert_array_equal(F.hardshrink(tg.tensor([0.25, -0.5]), -0.5).numpy(), [0.25, -0.5])  # no interval
    with pytest.raises(RuntimeError, match="glu: halving dimension must be even"):
        F.glu(tg.ones(2, 3))
    with pytest.raises(RuntimeError, match="glu: does not support 0-d"):
        F.glu(tg.tensor(1.0))
    with pytest.raises(IndexError, match="glu: dim 2"):
        F.glu(tg.ones(2, 2), 2)
    with pytest.raises(RuntimeError, match="glu: halving"):           # the size before the dtype, as PyTorch
        F.glu(tg.ones(1, 3, dtype=tg.int64))
    assert F.glu(tg.zeros(0, 4)).shape == (0, 2)


# ----------------------------------------------------------------------------- softmax's checks
def test_softmax_family_checks_the_dim_first_and_passes_empty_integer_tensors():
    """As PyTorch: a bad dim is an IndexError whatever the dtype; an empty integer tensor has nothing to
    compute and comes back empty, in its dtype; a non-empty one has no integer softmax."""
    for fn in (F.softmax, F.log_softmax, F.softmin):
        with pytest.raises(IndexError, match="dim 2"):
            fn(tg.ones(3, dtype=tg.int64), 2)
        with pytest.raises(IndexError, match="dim -2"):
            fn(tg.ones((), dtype=tg.float32), -2)
        out = fn(tg.zeros(4, 0, dtype=tg.int64), 1)
        assert out.shape == (4, 0) and out.dtype == tg.int64
        with pytest.raises(NotImplementedError, match="int64"):
            fn(tg.ones(2, dtype=tg.int64), 0)
    assert F.softmax(tg.zeros(2, 0), 1, dtype=tg.int64).dtype == tg.int64
    with pytest.raises(RuntimeError, match="bool") as refused:      # softmin negates first: no -bool
        F.softmin(tg.tensor([True]), 5)
    assert refused.type is RuntimeError
    np.testing.assert_allclose(F.softmin(tg.tensor([1, 2]), 0, dtype=tg.float32).numpy(),
                               [1 / (1 + math.exp(-1)), 1 / (1 + math.exp(1))], rtol=1e-6)
    # PyTorch's old rule when dim is left out: 0 for 0-, 1- and 3-d inputs, else 1
    np.testing.assert_allclose(F.softmax(tg.ones(2, 4)).numpy(), np.full((2, 4), 0.25))


def test_gelu_checks_approximate_before_the_dtype():
    with pytest.raises(RuntimeError, match="approximate"):
        F.gelu(tg.tensor([1, 2]), approximate="sigmoid")
    with pytest.raises(NotImplementedError, match="int64"):
        F.gelu(tg.tensor([1, 2]))
