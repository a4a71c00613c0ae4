"""More elementwise math: trigonometric and hyperbolic functions, exp2/log2/log10/logaddexp,
rounding and the divisions that round (fmod, %, //, div(rounding_mode=...)), copysign, lerp,
isclose/isinf, and the bitwise ops.

Each op is compared with its definition in NumPy; gradients (first and, where the backward is
Tensor ops, second order) against central differences on domains that keep away from poles and
jumps by construction; PyTorch's conventions at the jumps and for integer tensors are pinned
with plain examples.
"""
import math
import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinygrad_gpu as tg
from tinygrad_gpu import device as devices
from checks import check_op, noncontiguous, shapes, values


# Each example of a gradient check costs central differences (and a second-order check): a third of the
# profile's examples keeps this file fast on two cores, and still scales with the profile.
fewer_examples = settings(max_examples=max(10, settings.default.max_examples // 3))


def broadcastable(n):
    return hnp.mutually_broadcastable_shapes(num_shapes=n, min_dims=0, max_dims=3, min_side=1, max_side=4)


def nonzero(shape):
    """0.5 <= |x| <= 3, either sign."""
    magnitude = st.floats(0.5, 3.0)
    return hnp.arrays(np.float64, shape, elements=st.one_of(magnitude, magnitude.map(lambda v: -v)))


def whole_plus(shape, fractions):
    """k + f for whole k in [-3, 3] and f drawn from `fractions`: away from the jumps by construction."""
    return st.tuples(hnp.arrays(np.float64, shape, elements=st.integers(-3, 3).map(float)),
                     hnp.arrays(np.float64, shape, elements=fractions)).map(lambda kf: np.asarray(kf[0] + kf[1]))


# ----------------------------------------------------------------------------- unary, differentiable
UNARY = {
    "tan": (lambda x: x.tan(), np.tan, (-1.2, 1.2)),
    "asin": (lambda x: x.asin(), np.arcsin, (-0.9, 0.9)),
    "acos": (lambda x: x.acos(), np.arccos, (-0.9, 0.9)),
    "atan": (lambda x: x.atan(), np.arctan, (-3.0, 3.0)),
    "sinh": (lambda x: x.sinh(), np.sinh, (-3.0, 3.0)),
    "cosh": (lambda x: x.cosh(), np.cosh, (-3.0, 3.0)),
    "asinh": (lambda x: x.asinh(), np.arcsinh, (-3.0, 3.0)),
    "acosh": (lambda x: x.acosh(), np.arccosh, (1.1, 3.0)),
    "atanh": (lambda x: x.atanh(), np.arctanh, (-0.9, 0.9)),
    "exp2": (lambda x: x.exp2(), np.exp2, (-3.0, 3.0)),
    "log2": (lambda x: x.log2(), np.log2, (0.2, 3.0)),
    "log10": (lambda x: x.log10(), np.log10, (0.2, 3.0)),
    "expm1": (lambda x: x.expm1(), np.expm1, (-3.0, 3.0)),
    "log1p": (lambda x: x.log1p(), np.log1p, (-0.8, 3.0)),
    "reciprocal": (lambda x: x.reciprocal(), np.reciprocal, (0.3, 3.0)),
}


@pytest.mark.parametrize("name", list(UNARY))
@fewer_examples
@given(data=st.data())
def test_unary(name, data):
    fn, reference, (low, high) = UNARY[name]
    x = data.draw(noncontiguous(values(data.draw(shapes()), low, high)))
    check_op(fn, reference, x, second_order=True)


ROUNDING = {
    "floor": (lambda x: x.floor(), np.floor, st.floats(0.05, 0.95)),
    "ceil": (lambda x: x.ceil(), np.ceil, st.floats(0.05, 0.95)),
    "trunc": (lambda x: x.trunc(), np.trunc, st.floats(0.05, 0.95)),
    "round": (lambda x: x.round(), np.round, st.one_of(st.floats(0.05, 0.45), st.floats(0.55, 0.95))),
}


@pytest.mark.parametrize("name", list(ROUNDING))
@fewer_examples
@given(data=st.data())
def test_rounding_between_the_jumps(name, data):
    fn, reference, fractions = ROUNDING[name]
    x = data.draw(noncontiguous(whole_plus(data.draw(shapes()), fractions)))
    check_op(fn, reference, x)


def test_module_functions_are_the_methods():
    """tg.floor(x) is x.floor() (function_forms.py): a Tensor first, or PyTorch's TypeError; a number first only
    where PyTorch takes one (tg.remainder(5, x))."""
    x = tg.tensor([2.5, -2.5, 7.0])
    for name in ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "exp2", "log2", "log10",
                 "floor", "ceil", "trunc", "round", "isinf", "isposinf", "isneginf", "bitwise_not"]:
        np.testing.assert_array_equal(getattr(tg, name)(x).numpy() if name != "bitwise_not" else
                                      tg.bitwise_not(tg.tensor([6])).numpy(),
                                      getattr(x, name)().numpy() if name != "bitwise_not" else [-7])
        with pytest.raises(TypeError, match=f"{name}.*must be Tensor, not float"):
            getattr(tg, name)(2.5)
    for name in ["logaddexp", "copysign", "fmod", "isclose", "maximum", "eq"]:
        with pytest.raises(TypeError, match=f"{name}.*must be Tensor, not int"):
            getattr(tg, name)(2, x)
    for name in ["remainder", "floor_divide", "div", "add", "sub", "mul", "pow"]:
        np.testing.assert_array_equal(getattr(tg, name)(2, x).numpy(), getattr(tg.full((3,), 2.0), name)(x).numpy())
    for name in ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift"]:
        np.testing.assert_array_equal(getattr(tg, name)(6, tg.tensor([1, 2])).numpy(),
                                      getattr(tg.tensor([6, 6]), name)(tg.tensor([1, 2])).numpy())
    for alias, name in [("arcsin", "asin"), ("arccos", "acos"), ("arctan", "atan"), ("arcsinh", "asinh"),
                        ("arccosh", "acosh"), ("arctanh", "atanh"), ("fix", "trunc")]:
        assert getattr(tg.Tensor, alias) is getattr(tg.Tensor, name), alias
    x, y = tg.tensor([2.5, -2.5, 7.0]), tg.tensor([2.0, 2.0, -2.0])
    np.testing.assert_array_equal(tg.div(x, y, rounding_mode="floor").numpy(), (x // y).numpy())
    np.testing.assert_array_equal(tg.bitwise_not(tg.tensor([6, 5])).numpy(), [-7, -6])


# ----------------------------------------------------------------------------- binary, differentiable
@fewer_examples
@given(data=st.data())
def test_logaddexp(data):
    shape_a, shape_b = data.draw(broadcastable(2)).input_shapes
    a = data.draw(noncontiguous(values(shape_a)))
    b = data.draw(noncontiguous(values(shape_b)))
    check_op(lambda x, y: x.logaddexp(y), np.logaddexp, a, b, second_order=True)


@fewer_examples
@given(data=st.data())
def test_atan2_in_every_quadrant(data):
    """atan2(a, b) with b's sign any (the quadrants), away from the origin where it has no derivative."""
    shape_a, shape_b = data.draw(broadcastable(2)).input_shapes
    a, b = data.draw(noncontiguous(nonzero(shape_a))), data.draw(noncontiguous(nonzero(shape_b)))
    check_op(lambda x, y: x.atan2(y), np.arctan2, a, b, second_order=True)


def test_expm1_and_log1p_keep_their_digits_near_zero():
    x = tg.tensor([1e-10, -1e-12], dtype=tg.float64)
    np.testing.assert_allclose(x.expm1().numpy(), [1e-10 + 5e-21, -1e-12 + 5e-25], rtol=1e-15)
    np.testing.assert_allclose(x.log1p().numpy(), [1e-10 - 5e-21, -1e-12 - 5e-25], rtol=1e-15)
    assert tg.arange(3).reciprocal().dtype == tg.float32 and tg.tensor([0.0]).reciprocal().tolist() == [np.inf]


def test_logaddexp_does_not_overflow():
    a, b = tg.tensor([1000.0, -1000.0], requires_grad=True), tg.tensor([1000.0, -1000.0])
    out = tg.logaddexp(a, b)
    np.testing.assert_allclose(out.numpy(), [1000.0 + math.log(2), -1000.0 + math.log(2)], rtol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [0.5, 0.5])


@fewer_examples
@given(data=st.data())
def test_copysign(data):
    shape_a, shape_b = data.draw(broadcastable(2)).input_shapes
    a = data.draw(noncontiguous(values(shape_a, away_from=[0])))
    b = data.draw(noncontiguous(values(shape_b, away_from=[0])))
    check_op(lambda x, y: x.copysign(y), np.copysign, a, b, second_order=True)


def test_copysign_gradient_conventions():
    # PyTorch: d/da is +1 or -1 (kept or flipped sign), 0 at a == 0; b gets a zero gradient (not None)
    a = tg.tensor([2.0, 2.0, -3.0, 0.0, -0.0, 1.0], dtype=tg.float64, requires_grad=True)
    b = tg.tensor([1.0, -1.0, -5.0, -1.0, 1.0, -0.0], dtype=tg.float64, requires_grad=True)
    out = a.copysign(b)
    np.testing.assert_array_equal(out.numpy(), [2.0, -2.0, -3.0, -0.0, 0.0, -1.0])
    assert np.signbit(out.numpy()).tolist() == [False, True, True, True, False, True]
    out.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, -1.0, 1.0, 0.0, 0.0, -1.0])
    np.testing.assert_array_equal(b.grad.numpy(), np.zeros(6))


@st.composite
def dividend_divisor(draw):
    """(a, b) with 0.5 <= |b| <= 3 and a / b at least 0.1 from a whole number: fmod and remainder are
    smooth there. b's shape is a's trailing dimensions, some of them 1, so a = (k + f) * b keeps a's shape."""
    shape_a = draw(shapes())
    drop = draw(st.integers(0, len(shape_a)))
    shape_b = tuple(draw(st.sampled_from([1, side])) for side in shape_a[drop:])
    b = draw(nonzero(shape_b))
    return np.asarray(draw(whole_plus(shape_a, st.floats(0.1, 0.9))) * b), b


@pytest.mark.parametrize("name, fn, reference", [
    ("fmod", lambda x, y: x.fmod(y), np.fmod),
    ("%", lambda x, y: x % y, np.remainder),
    ("reflected %", lambda x, y: y.__rmod__(x), np.remainder),
], ids=["fmod", "%", "rmod"])
@fewer_examples
@given(pair=dividend_divisor())
def test_fmod_and_remainder(name, fn, reference, pair):
    a, b = pair
    check_op(fn, reference, a, b, second_order=True)


@pytest.mark.parametrize("name, fn, reference", [
    ("x % 1.5", lambda x: x % 1.5, lambda a: np.remainder(a, 1.5)),
    ("x % -1.5", lambda x: x % -1.5, lambda a: np.remainder(a, -1.5)),
    ("x.fmod(-1.5)", lambda x: x.fmod(-1.5), lambda a: np.fmod(a, -1.5)),
    ("5.25 % x", lambda x: 5.25 % x, lambda a: np.remainder(5.25, a)),
], ids=["x % 1.5", "x % -1.5", "fmod(-1.5)", "5.25 % x"])
@fewer_examples
@given(data=st.data())
def test_remainder_with_a_python_number(name, fn, reference, data):
    # x % 1.5: x = (k + f) * 1.5 keeps x / 1.5 away from whole numbers. 5.25 % x: x = +-5.25 / q with
    # q = k + f in [2.1, 8.9], f in [0.1, 0.9], so that 5.25 / x = +-q is away from whole numbers too.
    shape = data.draw(shapes())
    if name.startswith("5.25"):
        quotient = data.draw(whole_plus(shape, st.floats(0.1, 0.9))) + 5
        sign = data.draw(hnp.arrays(np.float64, shape, elements=st.sampled_from([1.0, -1.0])))
        x = np.asarray(5.25 / quotient * sign)
    else:
        x = np.asarray(data.draw(whole_plus(shape, st.floats(0.1, 0.9))) * 1.5)
    check_op(fn, reference, x, second_order=True)


@pytest.mark.parametrize("name, fn, reference", [
    ("//", lambda x, y: x // y, np.floor_divide),
    ("trunc", lambda x, y: x.div(y, rounding_mode="trunc"), lambda a, b: np.trunc(a / b)),
    ("true", lambda x, y: x.div(y, rounding_mode=None), np.divide),
], ids=["//", "trunc", "true"])
@fewer_examples
@given(pair=dividend_divisor())
def test_divisions(name, fn, reference, pair):
    a, b = pair
    check_op(fn, reference, a, b)        # rounded: zero gradients, which central differences confirm


@fewer_examples
@given(data=st.data())
def test_lerp_with_a_tensor_weight(data):
    shape_s, shape_e, shape_w = data.draw(broadcastable(3)).input_shapes
    start, end = data.draw(values(shape_s)), data.draw(noncontiguous(values(shape_e)))
    weight = data.draw(values(shape_w, -0.5, 1.5))
    check_op(lambda s, e, w: s.lerp(e, w), lambda s, e, w: s + w * (e - s), start, end, weight,
             second_order=True)


@pytest.mark.parametrize("weight", [0.25, 1.0, -0.5])
@fewer_examples
@given(data=st.data())
def test_lerp_with_a_number_weight(weight, data):
    shape_s, shape_e = data.draw(broadcastable(2)).input_shapes
    start, end = data.draw(values(shape_s)), data.draw(values(shape_e))
    check_op(lambda s, e: tg.lerp(s, e, weight), lambda s, e: s + weight * (e - s), start, end, second_order=True)


def test_lerp_ends_exactly_at_its_ends():
    # start + 1 * (end - start) would lose `end` to rounding here (1 - 1e8 is not a float32)
    start, end = tg.tensor([1e8, 3.0]), tg.tensor([1.0, 1e-8])
    np.testing.assert_array_equal(start.lerp(end, 1.0).numpy(), end.numpy())
    np.testing.assert_array_equal(start.lerp(end, 0.0).numpy(), start.numpy())


# ----------------------------------------------------------------------------- PyTorch's conventions
@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "round"])
def test_rounding_gradient_is_zero_everywhere_also_at_the_jumps(name):
    x = tg.tensor([-2.0, -1.5, -0.5, 0.0, 0.5, 1.0, 2.5, 0.3], dtype=tg.float64, requires_grad=True)
    y = getattr(x, name)()
    assert y.requires_grad and y.grad_fn is not None      # recorded, as in PyTorch
    y.backward(tg.ones(8, dtype=tg.float64))
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(8))


def test_rounded_division_gradient_is_zero():
    a = tg.tensor([3.0, -3.0, 4.0], dtype=tg.float64, requires_grad=True)
    b = tg.tensor([2.0, 2.0, 2.0], dtype=tg.float64, requires_grad=True)
    (a // b + a.div(b, rounding_mode="trunc")).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.zeros(3))
    np.testing.assert_array_equal(b.grad.numpy(), np.zeros(3))


def test_fmod_and_remainder_gradient_for_the_divisor_is_minus_the_rounded_quotient():
    a = tg.tensor([7.0, -7.0, 7.0, -7.0], dtype=tg.float64, requires_grad=True)
    b = tg.tensor([2.0, 2.0, -2.0, -2.0], dtype=tg.float64, requires_grad=True)
    (a.fmod(b) + a % b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 2.0, 2.0, 2.0])
    # trunc(a/b) = [3, -3, -3, 3], floor(a/b) = [3, -4, -4, 3]
    np.testing.assert_array_equal(b.grad.numpy(), [-6.0, 7.0, 7.0, -6.0])


def test_round_goes_half_to_even_and_takes_decimals():
    np.testing.assert_array_equal(tg.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 0.49]).round().numpy(),
                                  [0.0, 2.0, 2.0, -0.0, -2.0, 0.0])
    x = np.array([1.2345, -2.5, 0.125, 1234.5, 0.0])
    for decimals in [2, 1, 0, -1, -2]:
        np.testing.assert_array_equal(tg.tensor(x, dtype=tg.float64).round(decimals=decimals).numpy(),
                                      np.round(x, decimals), err_msg=f"decimals={decimals}")
    np.testing.assert_array_equal(tg.round(tg.tensor([1234.5, 15.0]), decimals=-1).numpy(), [1230.0, 20.0])


def test_remainder_follows_the_divisor_and_fmod_the_dividend():
    a, b = tg.tensor([-3, 3, -3, 3]), tg.tensor([2, 2, -2, -2])
    assert (a % b).tolist() == [1, 1, -1, -1] == [x % y for x, y in zip([-3, 3, -3, 3], [2, 2, -2, -2])]
    assert a.fmod(b).tolist() == [-1, 1, -1, 1]
    assert (a // b).tolist() == [-2, 1, 1, -2]                          # toward minus infinity
    assert a.div(b, rounding_mode="trunc").tolist() == [-1, 1, 1, -1]  # toward zero
    assert a.div(b, rounding_mode="floor").tolist() == a.floor_divide(b).tolist() == [-2, 1, 1, -2]
    assert a.remainder(b).tolist() == [1, 1, -1, -1]
    assert (7 % b).tolist() == [1, 1, -1, -1] and (7 // b).tolist() == [3, 3, -4, -4]
    x, y = tg.tensor([-3.5, 3.5, -3.5, 3.5]), tg.tensor([2.0, 2.0, -2.0, -2.0])
    assert (x % y).tolist() == [0.5, 1.5, -1.5, -0.5]
    assert x.fmod(y).tolist() == [-1.5, 1.5, -1.5, 1.5]
    assert (x // y).tolist() == [-2.0, 1.0, 1.0, -2.0]
    assert x.div(y, rounding_mode="trunc").tolist() == [-1.0, 1.0, 1.0, -1.0]


@pytest.mark.parametrize("call", [lambda a, b: a // b, lambda a, b: a % b, lambda a, b: a.fmod(b),
                                  lambda a, b: a.div(b, rounding_mode="trunc"), lambda a, b: 7 // b],
                         ids=["//", "%", "fmod", "trunc", "7 //"])
def test_integer_division_by_zero_raises(call):
    # At once on the host; on a GPU when values are next read (no sync in the op)
    a, b = tg.tensor([7, 8], dtype=tg.int32), tg.tensor([2, 0], dtype=tg.int32)
    with pytest.raises(RuntimeError, match="integer division by zero"):        # PyTorch's type
        call(a, b).numpy()


@pytest.mark.skipif(not (tg.default_device().startswith("cuda")
                         and getattr(devices.cupy(), "__name__", "").endswith("cupy_standin")),
                    reason="reads the CuPy stand-in's counters (the cuda pass)")
def test_integer_division_checks_its_divisor_without_a_host_sync():
    from tinygrad_gpu.testing.cupy_standin import counters
    a, b = tg.tensor([7, 8]), tg.tensor([2, 0])
    counters.reset()
    out = a // b
    assert counters.host_syncs == 0, counters.sites
    with pytest.raises(RuntimeError, match="floor_divide.*division by zero"):
        out.numpy()


def test_floating_division_by_zero_gives_inf_and_nan():
    a, zero = tg.tensor([1.0, -1.0, 0.0]), tg.tensor([0.0, 0.0, 0.0])
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal((a // zero).numpy(), [np.inf, -np.inf, np.nan])
        assert np.isnan((a % zero).numpy()).all() and np.isnan(a.fmod(zero).numpy()).all()


# ----------------------------------------------------------------------------- dtypes
def t(data, dtype):
    return tg.tensor(data, dtype=dtype)


@pytest.mark.parametrize("make, dtype", [
    (lambda: t([0, 1], tg.int64).asin(), tg.float32),
    (lambda: t([1, 2], tg.int32).cosh(), tg.float32),
    (lambda: t([1, 2], tg.int64).log2(), tg.float32),
    (lambda: t([True, False], tg.bool).exp2(), tg.float32),
    (lambda: t([1.0, 2.0], tg.float16).tan(), tg.float16),
    (lambda: t([1.0, 2.0], tg.float64).log10(), tg.float64),
    (lambda: t([1, 2], tg.int64).floor(), tg.int64),
    (lambda: t([1, 2], tg.int32).ceil(), tg.int32),
    (lambda: t([1, 2], tg.int32).round(), tg.int32),
    (lambda: t([1.5, 2.5], tg.float16).round(), tg.float16),
    (lambda: t([7, 8], tg.int64) // t([2, 3], tg.int64), tg.int64),
    (lambda: t([7, 8], tg.int32) // 2, tg.int32),
    (lambda: 7 // t([7, 8], tg.int32), tg.int32),
    (lambda: t([7, 8], tg.int32) % t([2, 3], tg.int32), tg.int32),
    (lambda: t([7, 8], tg.int32).fmod(t([2, 3], tg.int64)), tg.int64),
    (lambda: t([7, 8], tg.int64) // 2.5, tg.float32),
    (lambda: t([7, 8], tg.int64) % 2.5, tg.float32),
    (lambda: t([True, False], tg.bool) % 2, tg.int64),
    (lambda: t([7, 8], tg.int64).div(t([2, 3], tg.int64), rounding_mode="trunc"), tg.int64),
    (lambda: t([7, 8], tg.int64).div(2, rounding_mode="floor"), tg.int64),
    (lambda: t([7, 8], tg.int64).div(2), tg.float32),
    (lambda: t([7.0, 8.0], tg.float64).div(2, rounding_mode="floor"), tg.float64),
    (lambda: t([1, -2], tg.int64).copysign(-1), tg.float32),
    (lambda: t([1.0, 2.0], tg.float16).copysign(t([1.0], tg.float32)), tg.float32),
    (lambda: t([1.0, 2.0], tg.float64).lerp(t([3.0, 4.0], tg.float64), 0.5), tg.float64),
    (lambda: t([1, 2], tg.int64).isinf(), tg.bool),
    (lambda: t([1, 2], tg.int64).isclose(t([1, 3], tg.int64)), tg.bool),
    (lambda: t([1, 2], tg.int32) & t([3, 4], tg.int64), tg.int64),
    (lambda: t([1, 2], tg.int32) ^ 7, tg.int32),
    (lambda: t([True, False], tg.bool) ^ t([True, True], tg.bool), tg.bool),
    (lambda: t([True, False], tg.bool) | 2, tg.int64),
    (lambda: t([1, 2], tg.int32) << 2, tg.int32),
    (lambda: ~t([1, 2], np.uint8), np.uint8),
])
def test_dtypes_follow_pytorch(make, dtype):
    assert make().dtype == dtype


def test_rounding_an_integer_tensor_keeps_its_values():
    x = t([-3, 0, 7], tg.int64)
    for name in ["floor", "ceil", "trunc", "round"]:
        out = getattr(x, name)()
        assert out.dtype == tg.int64 and out.tolist() == [-3, 0, 7], name


def test_integer_results_carry_no_gradient():
    out = t([7, 8], tg.int64) // 2
    assert not out.requires_grad and out.grad_fn is None


# ----------------------------------------------------------------------------- no gradient: tests of values
def test_isinf_isposinf_isneginf():
    x = tg.tensor([1.0, math.inf, -math.inf, math.nan, 0.0])
    assert x.isinf().tolist() == [False, True, True, False, False]
    assert x.isposinf().tolist() == [False, True, False, False, False]
    assert x.isneginf().tolist() == [False, False, True, False, False]
    assert tg.tensor([1, -2]).isinf().tolist() == [False, False]
    assert tg.isposinf(tg.tensor([3], dtype=tg.int32)).tolist() == [False]


@given(data=st.data())
def test_isclose_matches_its_definition(data):
    shape_a, shape_b = data.draw(broadcastable(2)).input_shapes
    near = st.sampled_from([0.0, 1.0, -1.0, 1.0 + 1e-6, 1.0 + 1e-4, 1e-9, math.inf, -math.inf, math.nan])
    a = data.draw(hnp.arrays(np.float64, shape_a, elements=near))
    b = data.draw(hnp.arrays(np.float64, shape_b, elements=near))
    rtol, atol = data.draw(st.sampled_from([(1e-5, 1e-8), (1e-3, 0.0), (0.0, 1e-3)]))
    equal_nan = data.draw(st.booleans())
    x = tg.tensor(a, dtype=tg.float64, requires_grad=True)
    out = x.isclose(tg.tensor(b, dtype=tg.float64), rtol=rtol, atol=atol, equal_nan=equal_nan)
    assert out.dtype == tg.bool and not out.requires_grad
    # finite: |a - b| <= atol + rtol |b|; infinities only close to themselves; NaN only with equal_nan
    with np.errstate(invalid="ignore"):
        within = np.isfinite(a) & np.isfinite(b) & (np.abs(a - b) <= atol + rtol * np.abs(b))
    expected = within | (a == b)
    expected = expected | (equal_nan & np.isnan(a) & np.isnan(b))
    np.testing.assert_array_equal(out.numpy(), expected)


def test_isclose_defaults_are_pytorchs():
    x = tg.tensor([1.0, 1.0, 0.0, 0.0], dtype=tg.float64)
    y = tg.tensor([1.0 + 0.9e-5, 1.0 + 1.2e-5, 0.9e-8, 1.2e-8], dtype=tg.float64)
    assert x.isclose(y).tolist() == [True, False, True, False]
    assert tg.isclose(x, tg.tensor(1.0, dtype=tg.float64)).tolist() == [True, True, False, False]
    with pytest.raises(TypeError, match="isclose.*must be Tensor"):          # as PyTorch: no number for other
        tg.isclose(x, 1.0)


# ----------------------------------------------------------------------------- bitwise
BITWISE = [("&", operator.and_, np.bitwise_and), ("|", operator.or_, np.bitwise_or),
           ("^", operator.xor, np.bitwise_xor), ("<<", operator.lshift, np.left_shift),
           (">>", operator.rshift, np.right_shift)]


@pytest.mark.parametrize("symbol, op, reference", BITWISE, ids=[c[0] for c in BITWISE])
@given(data=st.data())
def test_bitwise_on_integers(symbol, op, reference, data):
    shape_a, shape_b = data.draw(broadcastable(2)).input_shapes
    dtype = data.draw(st.sampled_from([np.int32, np.int64]))
    shift = symbol in ("<<", ">>")
    bits = np.iinfo(dtype).bits
    a = data.draw(hnp.arrays(dtype, shape_a))
    b = data.draw(hnp.arrays(dtype, shape_b, elements=st.integers(0, bits - 1) if shift else None))
    out = op(tg.tensor(a), tg.tensor(b))
    assert out.dtype == dtype and not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), reference(a, b))
    # a Python int on either side takes the tensor's type
    k = data.draw(st.integers(0, bits - 1) if shift else st.integers(np.iinfo(dtype).min, np.iinfo(dtype).max))
    right, left = op(tg.tensor(a), k), op(k, tg.tensor(b))
    assert right.dtype == left.dtype == dtype
    np.testing.assert_array_equal(right.numpy(), reference(a, dtype(k)))
    np.testing.assert_array_equal(left.numpy(), reference(dtype(k), b))


@given(data=st.data())
def test_bitwise_on_bools_is_logical(data):
    shape_a, shape_b = data.draw(broadcastable(2)).input_shapes
    a, b = data.draw(hnp.arrays(np.bool_, shape_a)), data.draw(hnp.arrays(np.bool_, shape_b))
    x, y = tg.tensor(a), tg.tensor(b)
    for out, expected in [(x & y, a & b), (x | y, a | b), (x ^ y, a ^ b), (~x, ~a), (True ^ y, ~b),
                          (x.bitwise_xor(y), a ^ b), (tg.bitwise_not(x), ~a), (False | y, b)]:
        assert out.dtype == tg.bool
        np.testing.assert_array_equal(out.numpy(), expected)


def test_python_int_beside_int32_is_wrapped_on_either_side():
    i32 = tg.tensor([1, 6], dtype=tg.int32)
    for out in [i32 | 0xFFFFFFFF, 0xFFFFFFFF | i32]:
        assert out.dtype == tg.int32 and out.tolist() == [-1, -1]
    assert (0xFFFFFFFF & i32).tolist() == [1, 6] and (i32 ^ 0xFFFFFFFF).tolist() == [-2, -7]
    assert (1 << i32).tolist() == [2, 64] and (256 >> i32).tolist() == [128, 4]
    assert (i32 << 2).tolist() == [4, 24] and (i32 >> 1).tolist() == [0, 3]
    assert (tg.tensor([-8]) >> 1).tolist() == [-4]                  # arithmetic shift keeps the sign


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("call, match", [
    (lambda: tg.tensor([1.0]) & tg.tensor([1.0]), "bitwise_and.*float32"),
    (lambda: tg.tensor([1]) | 1.5, "bitwise_or.*float32"),
    (lambda: 1.5 ^ tg.tensor([1]), "bitwise_xor.*float32"),
    (lambda: tg.tensor([1.0], dtype=tg.float64).bitwise_not(), "bitwise_not.*float64"),
    (lambda: tg.tensor([1.0]) << 1, "bitwise_left_shift.*float32"),
    (lambda: tg.tensor([True]) >> tg.tensor([True]), "bitwise_right_shift.*bool"),
    (lambda: tg.tensor([True]) % tg.tensor([True]), "remainder.*bool"),
    (lambda: tg.tensor([True]) // tg.tensor([True]), "floor_divide.*bool"),
    (lambda: tg.tensor([1.0]).div(2, rounding_mode="round"), "div.*rounding_mode.*'round'"),
    (lambda: tg.tensor([15]).round(decimals=-1), "round.*decimals.*int64"),
    (lambda: tg.tensor([True]).floor(), "floor.*bool"),
    (lambda: tg.tensor([1.0]).isclose(tg.tensor([1.0]), rtol=-1), "isclose.*rtol"),
], ids=["& float", "| 1.5", "1.5 ^", "~ float", "<< float", ">> bool", "% bool", "// bool", "div mode",
        "round int decimals", "floor bool", "isclose rtol"])
def test_errors_a_pytorch_user_catches_as_runtime_errors(call, match):
    with pytest.raises(RuntimeError, match=match):
        call()


def test_pytorchs_other_errors():
    """Where PyTorch raises TypeError or NotImplementedError (a RuntimeError too), so do we."""
    with pytest.raises(TypeError, match="invert.*float64"):
        ~tg.tensor([1.0], dtype=tg.float64)
    with pytest.raises(NotImplementedError, match="logaddexp.*int64"):
        tg.tensor([1, 2]).logaddexp(tg.tensor([1, 2]))
    with pytest.raises(NotImplementedError, match="lerp.*int64"):
        tg.tensor([1, 2]).lerp(tg.tensor([3, 4]), 0.5)
    with pytest.raises(RuntimeError, match="lerp.*end.*float64"):
        tg.tensor([1.0]).lerp(tg.tensor([2.0], dtype=tg.float64), 0.5)
    with pytest.raises(RuntimeError, match="isclose.*int64 did not match float32"):
        tg.tensor([1, 2]).isclose(tg.tensor([1.0, 2.5]))


@pytest.mark.parametrize("name, call", [
    ("fmod", lambda a, b: a.fmod(b)), ("remainder", lambda a, b: a % b), ("floor_divide", lambda a, b: a // b),
    ("logaddexp", tg.logaddexp), ("copysign", tg.copysign), ("lerp", lambda a, b: a.lerp(b, 0.5)),
    ("lerp", lambda a, b: tg.ones(2, 3).lerp(tg.ones(2, 3), b)), ("isclose", tg.isclose),
    ("bitwise_and", lambda a, b: a.long() & b.long()), ("bitwise_left_shift", lambda a, b: a.long() << b.long()),
], ids=["fmod", "remainder", "floor_divide", "logaddexp", "copysign", "lerp", "lerp weight", "isclose", "&", "<<"])
def test_non_broadcastable_shapes_name_op_and_shapes(name, call):
    a, b = tg.ones(2, 3, requires_grad=True), tg.ones(4, 1, 2)
    with pytest.raises(RuntimeError, match=rf"{name}.*\(2, 3\).*\(4, 1, 2\)"):
        call(a, b)
