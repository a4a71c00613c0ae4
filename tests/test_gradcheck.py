"""Tests of the checker itself: tg.gradcheck and tg.gradgradcheck.

A checker that passes everything is worse than none, so most tests here feed it a
deliberately wrong gradient (a custom Function) and ask that it fail, naming the input,
the element and both values, on both of its paths: the full Jacobian (small inputs) and
one random direction (more than 64 elements).
"""
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_gpu as tg
from tinygrad_gpu.tensor import Function, Tensor

from checks import shapes, values

SMALL, LARGE = (3, 4), (9, 10)            # 12 elements: full Jacobian; 90 > 64: random direction
MESSAGE = re.compile(r"input (\d+) .*?element \(([\d, ]*)\).*?analytical ([^ ,]+), numerical ([^ ,)]+)")


def double(shape, seed=0, requires_grad=True):
    data = np.random.default_rng(seed).uniform(0.5, 2.0, shape)
    return tg.tensor(data, dtype=tg.float64, requires_grad=requires_grad)


class SquareWrongAt(Function):
    """x**2 whose backward doubles the gradient of one element: analytical = 2 * numerical there."""

    def forward(ctx, x, at):
        ctx.save_for_backward(x)
        ctx.at = at
        return x.data ** 2

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        factor = np.ones(x.shape)
        factor[ctx.at] = 2.0
        return grad * 2 * x * Tensor(factor, dtype=x.dtype)


class CubeFlatBackward(Function):
    """x**3 with a correct first derivative built from raw arrays: it cannot be differentiated again."""

    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.data ** 3

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * Tensor(3 * x.data ** 2)       # a constant: d/dx of it is (wrongly) 0


def counting(fn):
    """fn, and a list whose length is the number of times fn was called."""
    calls = []

    def wrapped(*xs):
        calls.append(1)
        return fn(*xs)
    return wrapped, calls


def failure(check, fn, inputs):
    with pytest.raises(tg.GradcheckError) as info:
        check(fn, inputs)
    match = MESSAGE.search(str(info.value))
    assert match, f"message does not name input, element and values: {info.value}"
    input_number, element, analytical, numerical = match.groups()
    return int(input_number), tuple(int(n) for n in element.split(",") if n.strip()), float(analytical), \
        float(numerical)


# ----------------------------------------------------------------------------- correct functions pass
@given(st.data())
def test_passes_on_correct_small_functions(data):
    shape_a, shape_b = data.draw(shapes(max_dims=2)), data.draw(shapes(max_dims=2))
    a = tg.tensor(data.draw(values(shape_a)), dtype=tg.float64, requires_grad=True)
    b = tg.tensor(data.draw(values(shape_b)), dtype=tg.float64, requires_grad=True)
    fn = lambda a, b: (a.sin() * b.sum() + a.exp(), b.tanh())   # noqa: E731  (two outputs)
    assert tg.gradcheck(fn, (a, b)) is True
    assert tg.gradgradcheck(fn, (a, b)) is True


def test_small_inputs_use_the_full_jacobian():
    x = double(SMALL)
    fn, calls = counting(lambda x: (x * x).tanh())
    assert tg.gradcheck(fn, x)
    assert len(calls) == 1 + 2 * x.numel()      # one pair of evaluations per element


def test_large_inputs_use_one_random_direction():
    x, y = double(LARGE), double((LARGE[1],), seed=1)
    fn, calls = counting(lambda x, y: (x * y).tanh().sum(1) + (x @ y).exp())
    assert tg.gradcheck(fn, (x, y))
    assert len(calls) == 1 + 2                  # two evaluations, whatever the size
    assert tg.gradgradcheck(lambda x, y: (x * y).tanh() * x, (x, y))


def test_threshold_is_full_jacobian_max():
    x = double((65,))
    fn, calls = counting(lambda x: x.sin())
    assert tg.gradcheck(fn, x, full_jacobian_max=65)
    assert len(calls) == 1 + 2 * 65


@pytest.mark.parametrize("shape", [SMALL, LARGE])
def test_inputs_are_restored(shape):
    x = double(shape)
    before = x.numpy().copy()
    tg.gradcheck(lambda x: x.exp(), x)
    assert tg.gradcheck(lambda x: SquareWrongAt.apply(x, at=(0, 0)), x, raise_exception=False) is False
    np.testing.assert_array_equal(x.numpy(), before)


# ----------------------------------------------------------------------------- wrong gradients fail
@pytest.mark.parametrize("shape, at", [(SMALL, (1, 2)), (LARGE, (6, 3)), ((70,), (69,))])
def test_wrong_gradient_is_reported_with_input_element_and_values(shape, at):
    x = double(shape)
    number, element, analytical, numerical = failure(tg.gradcheck, lambda x: SquareWrongAt.apply(x, at=at), x)
    assert (number, element) == (0, at)
    assert analytical == pytest.approx(2 * numerical, rel=1e-4) and abs(numerical) > 1e-3


@pytest.mark.parametrize("shape", [SMALL, LARGE])
def test_input_number_counts_unchecked_arguments(shape):
    """The wrong op is on fn's fourth argument; integer, constant and correct arguments come first."""
    ids, constant, y, x = tg.tensor([0, 1]), double((2,), requires_grad=False), double(shape, seed=1), double(shape)
    fn = lambda ids, c, y, x: SquareWrongAt.apply(x, at=(2, 1)) * c[ids].sum() + y.sin()   # noqa: E731
    number, element, _, _ = failure(tg.gradcheck, fn, (ids, constant, y, x))
    assert (number, element) == (3, (2, 1))


@pytest.mark.parametrize("shape", [SMALL, LARGE])
def test_raise_exception_false_returns_false(shape):
    x = double(shape)
    assert tg.gradcheck(lambda x: SquareWrongAt.apply(x, at=(0, 1)), x, raise_exception=False) is False
    assert tg.gradcheck(lambda x: x ** 2, x, raise_exception=False) is True
    assert tg.gradgradcheck(lambda x: CubeFlatBackward.apply(x), x, raise_exception=False) is False


@pytest.mark.parametrize("shape", [SMALL, LARGE])
def test_gradgradcheck_catches_a_backward_that_cannot_be_differentiated(shape):
    x = double(shape)
    assert tg.gradcheck(lambda x: CubeFlatBackward.apply(x), x)          # first order is right
    assert tg.gradgradcheck(lambda x: x ** 3, x)
    number, element, analytical, numerical = failure(tg.gradgradcheck, lambda x: CubeFlatBackward.apply(x), x)
    assert number == 0 and len(element) == 2
    assert analytical == 0.0 and abs(numerical) > 1e-3


# ----------------------------------------------------------------------------- misuse
def test_float32_inputs_are_rejected():
    x = tg.tensor([1.0, 2.0], requires_grad=True)          # float32 by default
    with pytest.raises(ValueError, match=r"input 0 is float32.*float64"):
        tg.gradcheck(lambda x: x * x, x)


def test_nothing_to_check_is_an_error():
    with pytest.raises(ValueError, match="requires_grad"):
        tg.gradcheck(lambda x: x * x, double((2,), requires_grad=False))
