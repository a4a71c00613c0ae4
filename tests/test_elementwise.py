"""Elementwise ops: forward against NumPy, gradients (first and second order) against
central differences, PyTorch's conventions at kinks, comparisons, dtype promotion, errors.

Property tests draw small shapes (at most 3 dims of side 4), broadcasting pairs from
``mutually_broadcastable_shapes`` (0-d and size-1 dims included) and non-contiguous
views; domains keep every op away from its kinks and poles by construction.
"""
import math
import operator

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from checks import check_op, noncontiguous, shapes, values
from conftest import gpu, requires_gpu

# Elementwise ops have no CUDA kernels of their own, so `emu` would only repeat `cpu`.
on_devices = pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[gpu, requires_gpu])])


# ----------------------------------------------------------------------------- strategies
def broadcastable(n):
    return hnp.mutually_broadcastable_shapes(num_shapes=n, min_dims=0, max_dims=3, min_side=1, max_side=4)


def nonzero(shape):
    """Values with 0.5 <= |x| <= 3, either sign (denominators)."""
    magnitude = st.floats(0.5, 3.0)
    return hnp.arrays(np.float64, shape, elements=st.one_of(magnitude, magnitude.map(lambda v: -v)))


def distinct_pair(draw, shape_a, shape_b):
    """Two arrays whose values are all distinct (0.01 apart at least), so max/min have no ties."""
    na, nb = int(np.prod(shape_a)), int(np.prod(shape_b))
    pool = draw(hnp.arrays(np.float64, na + nb, unique=True,
                           elements=st.integers(-300, 300).map(lambda i: i / 100)))
    return pool[:na].reshape(shape_a), pool[na:].reshape(shape_b)


DOMAINS = {
    "any": lambda shape: values(shape),
    "positive": lambda shape: values(shape, 0.5, 2.5),
    "nonzero": nonzero,
    "exponent": lambda shape: values(shape, -2.0, 2.0),
}


def erf_np(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def gelu_tanh_np(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


# ----------------------------------------------------------------------------- binary
BINARY = {
    "add": (lambda a, b: a + b, np.add, "any", "any"),
    "sub": (lambda a, b: a - b, np.subtract, "any", "any"),
    "mul": (lambda a, b: a * b, np.multiply, "any", "any"),
    "div": (lambda a, b: a / b, np.divide, "any", "nonzero"),
    "pow": (lambda a, b: a ** b, np.power, "positive", "exponent"),
}


@on_devices
@pytest.mark.parametrize("name", list(BINARY))
@given(data=st.data())
def test_binary_broadcasting(name, device, data):
    fn, reference, domain_a, domain_b = BINARY[name]
    shape_a, shape_b = data.draw(broadcastable(2)).input_shapes
    a = data.draw(noncontiguous(DOMAINS[domain_a](shape_a)))
    b = data.draw(noncontiguous(DOMAINS[domain_b](shape_b)))
    check_op(fn, reference, a, b, second_order=True, device=device)


@on_devices
@pytest.mark.parametrize("name", ["maximum", "minimum"])
@given(data=st.data())
def test_maximum_minimum_broadcasting(name, device, data):
    shape_a, shape_b = data.draw(broadcastable(2)).input_shapes
    a, b = distinct_pair(data.draw, shape_a, shape_b)
    check_op(lambda x, y: getattr(tg, name)(x, y), getattr(np, name), a, b, second_order=True, device=device)


# Ops with one tensor and a Python number, on either side.
WITH_SCALAR = [
    ("x + 2", lambda x: x + 2, lambda x: x + 2, "any"),
    ("2 + x", lambda x: 2 + x, lambda x: 2 + x, "any"),
    ("x - 2.5", lambda x: x - 2.5, lambda x: x - 2.5, "any"),
    ("2 - x", lambda x: 2 - x, lambda x: 2 - x, "any"),
    ("x * 3", lambda x: x * 3, lambda x: x * 3, "any"),
    ("-1.5 * x", lambda x: -1.5 * x, lambda x: -1.5 * x, "any"),
    ("x / 4", lambda x: x / 4, lambda x: x / 4, "any"),
    ("2 / x", lambda x: 2 / x, lambda x: 2 / x, "nonzero"),
    ("2 ** x", lambda x: 2 ** x, lambda x: 2.0 ** x, "any"),
    ("0.5 ** x", lambda x: 0.5 ** x, lambda x: 0.5 ** x, "any"),
    ("-x", lambda x: -x, np.negative, "any"),
    ("neg", lambda x: x.neg(), np.negative, "any"),
]


@pytest.mark.parametrize("name, fn, reference, domain", WITH_SCALAR, ids=[c[0] for c in WITH_SCALAR])
@on_devices
@given(data=st.data())
def test_ops_with_a_python_scalar(name, fn, reference, domain, device, data):
    x = data.draw(noncontiguous(DOMAINS[domain](data.draw(shapes()))))
    check_op(fn, reference, x, second_order=True, device=device)


@on_devices
@pytest.mark.parametrize("exponent", [0, 1, 2, 3, -1, 0.5, -1.5, 2.5])
@given(data=st.data())
def test_pow_tensor_scalar(exponent, device, data):
    whole_nonnegative = float(exponent).is_integer() and exponent >= 0
    x = data.draw(noncontiguous(values(data.draw(shapes()), *((-2.0, 2.0) if whole_nonnegative else (0.5, 2.5)))))
    check_op(lambda t: t ** exponent, lambda a: a ** exponent, x, second_order=True, device=device)


# ----------------------------------------------------------------------------- unary
UNARY = {
    "abs": (lambda x: x.abs(), np.abs, dict(away_from=[0])),
    "relu": (lambda x: x.relu(), lambda a: np.maximum(a, 0), dict(away_from=[0])),
    "sign": (lambda x: x.sign(), np.sign, dict(away_from=[0])),
    "exp": (lambda x: x.exp(), np.exp, {}),
    "log": (lambda x: x.log(), np.log, dict(low=0.2)),
    "sqrt": (lambda x: x.sqrt(), np.sqrt, dict(low=0.2)),
    "rsqrt": (lambda x: x.rsqrt(), lambda a: 1 / np.sqrt(a), dict(low=0.2)),
    "tanh": (lambda x: x.tanh(), np.tanh, {}),
    "sigmoid": (lambda x: x.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), {}),
    "sin": (lambda x: x.sin(), np.sin, {}),
    "cos": (lambda x: x.cos(), np.cos, {}),
    "erf": (lambda x: x.erf(), erf_np, {}),
    "gelu": (lambda x: F.gelu(x), lambda a: 0.5 * a * (1 + erf_np(a / math.sqrt(2))), {}),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), gelu_tanh_np, {}),
    "square": (lambda x: x.square(), lambda a: a * a, {}),
}


@on_devices
@pytest.mark.parametrize("name", list(UNARY))
@given(data=st.data())
def test_unary(name, device, data):
    fn, reference, domain = UNARY[name]
    x = data.draw(noncontiguous(values(data.draw(shapes()), **domain)))
    check_op(fn, reference, x, second_order=True, device=device)


def test_module_functions_match_methods():
    x = tg.tensor([0.5, 1.5, 2.0])
    for name in ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "abs", "sin", "cos", "erf", "square"]:
        np.testing.assert_array_equal(getattr(tg, name)(x).numpy(), getattr(x, name)().numpy(), err_msg=name)
    # the composition against the fused op: equal on the cpu, within float32 rounding where a kernel runs
    np.testing.assert_allclose(x.gelu("tanh").numpy(), F.gelu(x, approximate="tanh").numpy(), rtol=1e-6)


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(RuntimeError, match="approximate"):
        F.gelu(tg.tensor([1.0]), approximate="fast")


# ----------------------------------------------------------------------------- selection
CLAMP_BOUNDS = [(-1.0, 1.0), (-0.5, None), (None, 0.25), (0.0, 2.0)]


@on_devices
@pytest.mark.parametrize("low, high", CLAMP_BOUNDS)
@given(data=st.data())
def test_clamp_away_from_bounds(low, high, device, data):
    bounds = [v for v in (low, high) if v is not None]
    x = data.draw(noncontiguous(values(data.draw(shapes()), away_from=bounds)))
    check_op(lambda t: t.clamp(low, high), lambda a: np.clip(a, low, high), x, second_order=True, device=device)


@on_devices
@given(data=st.data())
def test_clamp_with_tensor_bounds(device, data):
    shape_x, shape_low, shape_high = data.draw(broadcastable(3)).input_shapes
    x, low = distinct_pair(data.draw, shape_x, shape_low)
    high = low + data.draw(hnp.arrays(np.float64, shape_high, elements=st.floats(0.1, 2.0)))  # low < high
    high = np.asarray(high).reshape(np.broadcast_shapes(shape_low, shape_high))
    assume(np.abs(np.subtract.outer(x.ravel(), high.ravel())).min() > 1e-3)
    check_op(lambda t, lo, hi: t.clamp(lo, hi), np.clip, x, low, high, second_order=True, device=device)
    check_op(lambda t, lo: t.clamp(min=lo), lambda a, lo: np.maximum(a, lo), x, low, device=device)
    check_op(lambda t, hi: t.clamp(max=hi), lambda a, hi: np.minimum(a, hi), x, high, device=device)
    check_op(lambda t, lo: t.clamp_min(lo), lambda a, lo: np.maximum(a, lo), x, low, device=device)
    check_op(lambda t, hi: tg.clamp_max(t, hi), lambda a, hi: np.minimum(a, hi), x, high, device=device)


@on_devices
@given(data=st.data())
def test_outer(device, data):
    a = data.draw(values(data.draw(shapes(min_dims=1, max_dims=1))))
    b = data.draw(values(data.draw(shapes(min_dims=1, max_dims=1))))
    check_op(lambda x, y: tg.outer(x, y), np.outer, a, b, second_order=True, device=device)


@on_devices
@given(data=st.data())
def test_where_broadcasts_condition_and_branches(device, data):
    shape_c, shape_a, shape_b = data.draw(broadcastable(3)).input_shapes
    condition = data.draw(hnp.arrays(np.bool_, shape_c))
    a = data.draw(noncontiguous(values(shape_a)))
    b = data.draw(noncontiguous(values(shape_b)))
    mask = tg.tensor(condition, device=device)
    check_op(lambda x, y: tg.where(mask, x, y), lambda x, y: np.where(condition, x, y), a, b,
             second_order=True, device=device)


@on_devices
@given(data=st.data())
def test_where_with_a_python_number(device, data):
    shape_c, shape_a = data.draw(broadcastable(2)).input_shapes
    condition = data.draw(hnp.arrays(np.bool_, shape_c))
    a = data.draw(values(shape_a))
    mask = tg.tensor(condition, device=device)
    check_op(lambda x: tg.where(mask, x, -7.0), lambda x: np.where(condition, x, -7.0), a,
             second_order=True, device=device)
    check_op(lambda x: tg.where(mask, 2, x), lambda x: np.where(condition, 2.0, x), a,
             second_order=True, device=device)


@on_devices
@given(data=st.data())
def test_masked_fill(device, data):
    shape_x = data.draw(shapes())
    shape_m = data.draw(hnp.broadcastable_shapes(shape_x, max_dims=len(shape_x), max_side=4))
    mask = data.draw(hnp.arrays(np.bool_, shape_m))
    x = data.draw(noncontiguous(values(shape_x)))
    fill_here = tg.tensor(mask, device=device)
    check_op(lambda t: t.masked_fill(fill_here, 0.5), lambda a: np.where(mask, 0.5, a), x,
             second_order=True, device=device)


# ----------------------------------------------------------------------------- kinks (PyTorch's conventions)
def grads_of(fn, *values, device="cpu"):
    leaves = [tg.tensor(v, dtype=tg.float64, device=device, requires_grad=True) for v in values]
    fn(*leaves).sum().backward()
    return [leaf.grad.numpy() for leaf in leaves]


@on_devices
def test_relu_gradient_at_zero_is_zero(device):
    (g,) = grads_of(lambda x: x.relu(), [-1.0, 0.0, 2.0], device=device)
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0])


@on_devices
def test_abs_gradient_at_zero_is_zero(device):
    (g,) = grads_of(lambda x: x.abs(), [-1.0, 0.0, 2.0], device=device)
    np.testing.assert_array_equal(g, [-1.0, 0.0, 1.0])


@on_devices
def test_sign_is_recorded_with_zero_gradient(device):
    x = tg.tensor([-2.0, 0.0, 3.0], device=device, requires_grad=True)
    y = x.sign()
    assert y.requires_grad                       # as in torch: a loss made of it can call backward
    np.testing.assert_array_equal(y.numpy(), [-1.0, 0.0, 1.0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])


@on_devices
def test_clamp_gradient_passes_at_the_bounds(device):
    (g,) = grads_of(lambda x: x.clamp(-1.0, 1.0), [-2.0, -1.0, 0.0, 1.0, 2.0], device=device)
    np.testing.assert_array_equal(g, [0.0, 1.0, 1.0, 1.0, 0.0])
    (g,) = grads_of(lambda x: x.clamp(2.0, 1.0), [0.0, 1.5, 3.0], device=device)   # min > max: all max
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0])


@on_devices
def test_clamp_with_tensor_bounds_passes_gradient_to_x_at_the_bounds(device):
    # torch.clamp(x, min=lo, max=hi), tensor bounds: x gets the gradient where lo <= x <= hi
    x = [-2.0, -1.0, 0.0, 1.0, 2.0]
    gx, glo, ghi = grads_of(lambda x, lo, hi: x.clamp(lo, hi), x, [-1.0] * 5, [1.0] * 5, device=device)
    np.testing.assert_array_equal(gx, [0.0, 1.0, 1.0, 1.0, 0.0])
    np.testing.assert_array_equal(glo, [1.0, 0.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(ghi, [0.0, 0.0, 0.0, 0.0, 1.0])
    gx, glo = grads_of(lambda x, lo: x.clamp(min=lo), x, [-1.0] * 5, device=device)
    np.testing.assert_array_equal(gx, [0.0, 1.0, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(glo, [1.0, 0.0, 0.0, 0.0, 0.0])
    # min > max: the result is max, and max takes the whole gradient
    gx, glo, ghi = grads_of(lambda x, lo, hi: x.clamp(lo, hi), [0.0, 1.5, 3.0], [2.0] * 3, [1.0] * 3, device=device)
    np.testing.assert_array_equal(gx, [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(glo, [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(ghi, [1.0, 1.0, 1.0])


@on_devices
@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_ties_split_the_gradient(name, device):
    ga, gb = grads_of(lambda a, b: getattr(tg, name)(a, b), [1.0, 2.0, 5.0], [1.0, 3.0, 4.0], device=device)
    first_wins = [0.0, 0.0, 1.0] if name == "maximum" else [0.0, 1.0, 0.0]
    np.testing.assert_array_equal(ga, np.array([0.5, 0.0, 0.0]) + first_wins)
    np.testing.assert_array_equal(gb, np.array([0.5, 1.0, 1.0]) - first_wins)


@on_devices
def test_x_to_the_zero_has_zero_gradient_at_zero(device):
    (g,) = grads_of(lambda x: x ** 0, [0.0, 2.0], device=device)
    np.testing.assert_array_equal(g, [0.0, 0.0])
    (g, _) = grads_of(lambda x, e: x ** e, [0.0, 2.0], [0.0, 0.0], device=device)
    np.testing.assert_array_equal(g, [0.0, 0.0])


@on_devices
def test_pow_exponent_gradient_at_base_zero_is_zero(device):
    gb, ge = grads_of(lambda b, e: b ** e, [0.0, 0.0, 0.0], [2.0, 1.0, 0.0], device=device)
    np.testing.assert_array_equal(ge, [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(gb, [0.0, 1.0, 0.0])
    (ge,) = grads_of(lambda e: 0.0 ** e, [2.0, 0.5], device=device)
    np.testing.assert_array_equal(ge, [0.0, 0.0])


@on_devices
def test_pow_second_derivatives_at_base_zero_are_the_limits(device):
    # f = b**e at b = 0: f_bb = e(e-1) b**(e-2) -> 2 for e = 2 and 0 for e = 3; f_be, f_ee -> 0
    b = tg.tensor([0.0, 0.0], dtype=tg.float64, device=device, requires_grad=True)
    e = tg.tensor([2.0, 3.0], dtype=tg.float64, device=device, requires_grad=True)
    gb, ge = tg.grad((b ** e).sum(), [b, e], create_graph=True)
    np.testing.assert_array_equal(gb.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(ge.numpy(), [0.0, 0.0])
    d_b, d_e = tg.grad((gb + ge).sum(), [b, e])
    np.testing.assert_array_equal(d_b.numpy(), [2.0, 0.0])
    np.testing.assert_array_equal(d_e.numpy(), [0.0, 0.0])


# ----------------------------------------------------------------------------- no gradient
COMPARISONS = [("==", operator.eq, np.equal), ("!=", operator.ne, np.not_equal), ("<", operator.lt, np.less),
               ("<=", operator.le, np.less_equal), (">", operator.gt, np.greater),
               (">=", operator.ge, np.greater_equal)]


@on_devices
@pytest.mark.parametrize("symbol, compare, reference", COMPARISONS, ids=[c[0] for c in COMPARISONS])
@given(data=st.data())
def test_comparisons_give_bool_without_grad(symbol, compare, reference, device, data):
    shape_a, shape_b = data.draw(broadcastable(2)).input_shapes
    small = st.integers(-2, 2).map(float)          # small integers: ties are common
    a = data.draw(hnp.arrays(np.float64, shape_a, elements=small))
    b = data.draw(hnp.arrays(np.float64, shape_b, elements=small))
    x = tg.tensor(a, dtype=tg.float64, device=device, requires_grad=True)
    y = tg.tensor(b, dtype=tg.int64, device=device)
    cases = [(compare(x, y), reference(a, b)), (compare(x, 1.0), reference(a, 1.0)),
             (compare(1, x), reference(1, a))]                          # reflected: 1 < x is x > 1
    for out, expected in cases:
        assert out.dtype == tg.bool and not out.requires_grad and out.grad_fn is None
        assert out.device == x.device
        np.testing.assert_array_equal(out.numpy(), expected)


def test_comparison_result_cannot_start_backward():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="does not require grad"):
        (x > 1).float().sum().backward()


@on_devices
@given(data=st.data())
def test_logical_ops(device, data):
    shape_a, shape_b = data.draw(broadcastable(2)).input_shapes
    a = data.draw(hnp.arrays(np.bool_, shape_a))
    b = data.draw(hnp.arrays(np.bool_, shape_b))
    ta, tb = tg.tensor(a, device=device), tg.tensor(b, device=device)
    cases = [(ta & tb, a & b), (ta | tb, a | b), (~ta, ~a), (ta.logical_and(tb), a & b),
             (ta.logical_or(tb), a | b), (tg.logical_not(ta), ~a), (ta & True, a), (ta | False, a)]
    for out, expected in cases:
        assert out.dtype == tg.bool and out.device == ta.device
        np.testing.assert_array_equal(out.numpy(), expected)


def test_logical_ops_on_numbers_treat_nonzero_as_true():
    x, y = tg.tensor([0.0, 1.5, -2.0, 0.0]), tg.tensor([3, 0, 1, 0])
    np.testing.assert_array_equal(x.logical_and(y).numpy(), [False, False, True, False])
    np.testing.assert_array_equal(x.logical_or(y).numpy(), [True, True, True, False])
    np.testing.assert_array_equal(x.logical_not().numpy(), [True, False, False, True])


def test_and_or_invert_on_integers_are_bitwise():
    # torch: & | ~ are bitwise_and / bitwise_or / bitwise_not, which are logical only on bool tensors
    a, b = tg.tensor([1, 2, 6]), tg.tensor([3, 1, 3])
    np.testing.assert_array_equal((a & b).numpy(), [1, 0, 2])
    np.testing.assert_array_equal((a | b).numpy(), [3, 3, 7])
    np.testing.assert_array_equal((~a).numpy(), [-2, -3, -7])


# ----------------------------------------------------------------------------- dtypes
def t(data, dtype):
    return tg.tensor(data, dtype=dtype)


@pytest.mark.parametrize("make, dtype", [
    (lambda: t([1.0, 2.0], tg.float32) * 2.0, tg.float32),
    (lambda: t([1.0, 2.0], tg.float32) * 2, tg.float32),
    (lambda: t([1, 2], tg.int64) * 2.5, tg.float32),
    (lambda: t([1, 2], tg.int64) * 2, tg.int64),
    (lambda: 2.5 - t([1, 2], tg.int64), tg.float32),
    (lambda: t([1, 2], tg.int64) + t([1.0, 2.0], tg.float32), tg.float32),
    (lambda: t([1.0, 2.0], tg.float32) + t(1.0, tg.float64), tg.float32),
    (lambda: t([1.0, 2.0], tg.float32) + t([1.0, 2.0], tg.float64), tg.float64),
    (lambda: t(1.0, tg.float32) + t(1.0, tg.float64), tg.float64),
    (lambda: t([1, 2], tg.int64) + t(1.0, tg.float64), tg.float64),   # a 0-d tensor of a higher category counts
    (lambda: t([7, 8], tg.int64) / t([2, 2], tg.int64), tg.float32),
    (lambda: t([7, 8], tg.int64) / 2, tg.float32),
    (lambda: t([1.0, 2.0], tg.float16) * 2.0, tg.float16),
    (lambda: t([1.0, 2.0], tg.float16) + 1, tg.float16),
    (lambda: t([1, 2], tg.int64) ** 2, tg.int64),
    (lambda: t([1, 2], tg.int64) ** 0.5, tg.float32),
    (lambda: 2.0 ** t([1, 2], tg.int64), tg.float32),
    (lambda: t([1, 2], tg.int32) + t([1, 2], tg.int64), tg.int64),
    (lambda: t([True, False], tg.bool) + t([1, 2], tg.int32), tg.int32),
    (lambda: t([1, 2], tg.int64).exp(), tg.float32),
    (lambda: t([1.0, 2.0], tg.float16).sigmoid(), tg.float16),
    (lambda: tg.maximum(t([1, 2], tg.int64), t([1.5, 0.5], tg.float32)), tg.float32),
    (lambda: tg.where(t([True, False], tg.bool), t([1.0, 2.0], tg.float32), 0.0), tg.float32),
    (lambda: tg.where(t([True, False], tg.bool), t([1, 2], tg.int64), 0.5), tg.float32),
    (lambda: t([1.0, 2.0], tg.float32).clamp(0.0, 1.5), tg.float32),
    (lambda: t([1.0, 2.0], tg.float16).clamp(0.0, 1.5), tg.float16),
    (lambda: t([1, 2], tg.int64).clamp(0.5, 1.5), tg.float32),
    (lambda: t([1, 2], tg.int32).clamp(0, 1), tg.int32),
    (lambda: t([1, 2], tg.int64).clamp(t(0.5, tg.float64)), tg.float64),
    (lambda: t([1.0, 2.0], tg.float32).clamp(t(0.5, tg.float64), t([1.0, 3.0], tg.float32)), tg.float32),
])
def test_dtype_promotion_follows_pytorch(make, dtype):
    assert make().dtype == dtype


def test_int_division_is_true_division():
    np.testing.assert_array_equal((t([7, -7], tg.int64) / t([2, 2], tg.int64)).numpy(), [3.5, -3.5])


def test_masked_fill_keeps_the_tensor_dtype():
    # torch: masked_fill never changes self's dtype (the value is cast to it)
    out = t([1, 2, 3], tg.int64).masked_fill(t([True, False, True], tg.bool), 2.5)
    assert out.dtype == tg.int64
    np.testing.assert_array_equal(out.numpy(), [2, 2, 2])


def test_grads_have_the_dtype_of_their_leaf():
    w = tg.tensor([1.0, 2.0], dtype=tg.float32, requires_grad=True)
    v = tg.tensor([3.0, 4.0], dtype=tg.float64, requires_grad=True)
    s = tg.tensor(0.5, dtype=tg.float64, requires_grad=True)
    out = w * v + s
    assert out.dtype == tg.float64
    out.sum().backward()
    assert w.grad.dtype == tg.float32 and v.grad.dtype == tg.float64 and s.grad.dtype == tg.float64
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 4.0])
    np.testing.assert_allclose(v.grad.numpy(), [1.0, 2.0])
    np.testing.assert_allclose(s.grad.numpy(), 2.0)
    w.grad = None
    (w + s).sum().backward()                       # 0-d float64 does not widen: float32 result
    assert w.grad.dtype == tg.float32 and s.grad.dtype == tg.float64
    np.testing.assert_allclose(s.grad.numpy(), 4.0)


def test_float32_ops_compute_in_float32():
    x = tg.tensor([0.1, 0.2, 0.3], requires_grad=True)
    y = (x * 3 + 1).exp().log().sqrt()
    assert y.dtype == tg.float32
    y.sum().backward()
    assert x.grad.dtype == tg.float32


# ----------------------------------------------------------------------------- errors
BINARY_CALLS = [("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
                ("div", lambda a, b: a / b), ("pow", lambda a, b: a ** b), ("maximum", tg.maximum),
                ("minimum", tg.minimum), ("less", lambda a, b: a < b), ("equal", lambda a, b: a == b),
                ("logical_and", lambda a, b: a.logical_and(b)), ("clamp", lambda a, b: a.clamp(max=b))]


@pytest.mark.parametrize("name, call", BINARY_CALLS, ids=[c[0] for c in BINARY_CALLS])
def test_non_broadcastable_shapes_name_op_and_shapes(name, call):
    a, b = tg.ones(2, 3, requires_grad=True), tg.ones(4, 1, 2)
    with pytest.raises(RuntimeError, match=rf"{name}.*\(2, 3\).*\(4, 1, 2\)"):
        call(a, b)


def test_where_non_broadcastable_shapes():
    with pytest.raises(RuntimeError, match=r"where.*\(3,\).*\(2,\)"):
        tg.where(tg.ones(3) > 0, tg.ones(2), 0.0)


@pytest.mark.parametrize("condition", [tg.tensor([1.0, 0.0]), tg.tensor([1, 0]), [True, False]],
                         ids=["float", "int", "list"])
def test_where_needs_a_bool_condition(condition):
    with pytest.raises(TypeError, match="bool"):
        tg.where(condition, tg.ones(2), tg.zeros(2))


# ----------------------------------------------------------------------------- where we follow PyTorch
def test_a_python_int_joins_an_integer_tensor_wrapped_to_its_type():
    """PyTorch wraps the constant to the tensor's type (two's complement); NumPy raised OverflowError."""
    i32 = tg.tensor([1, 2], dtype=tg.int32)
    assert (i32 | 0xFFFFFFFF).tolist() == [-1, -1] and (i32 | 0xFFFFFFFF).dtype == tg.int32
    assert (i32 + (2**32 + 3)).tolist() == [4, 5]
    assert (tg.tensor([250], dtype=np.uint8) + 300).tolist() == [(250 + 300) % 256]
    assert (tg.tensor([5]) + 2**62).tolist() == [5 + 2**62]                  # int64 holds it: unchanged


@pytest.mark.parametrize("call", [lambda: tg.ones(2).clamp(None, None), lambda: tg.tensor([1, 2]) ** -2,
                                  lambda: tg.ones(2, 3).permute(0)], ids=["clamp", "int ** -2", "permute"])
def test_errors_a_pytorch_user_catches_as_runtime_errors(call):
    with pytest.raises(RuntimeError, match="clamp|pow|permute"):
        call()

