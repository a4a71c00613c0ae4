"""Reductions, softmax and log_softmax against NumPy, with PyTorch's semantics.

Property tests draw shapes (0-d and size-1 included), a `dim` (None, int, negative int,
tuple, or () which PyTorch reads as "all dims") and `keepdim`; check_op checks the forward against NumPy, first and second
derivatives against central differences, and that nothing is mutated or aliased.
max/min get values at least 0.25 apart (`spread`), so that no difference quotient
straddles a tie; the conventions at ties are pinned by the example tests.
"""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_gpu as tg
from checks import check_op, noncontiguous, shapes, spread, values


def t64(data, requires_grad=True):
    return tg.tensor(np.asarray(data, dtype=np.float64), dtype=tg.float64, requires_grad=requires_grad)


def np_axis(dim, ndim):
    """The NumPy axis for a PyTorch dim: () means all; a 0-d tensor accepts dim 0 and -1 and reduces nothing."""
    if dim is None or dim == ():
        return None
    dims = dim if isinstance(dim, tuple) else (dim,)
    return tuple(d % ndim for d in dims) if ndim else ()


def reduced_count(shape, dim):
    axis = np_axis(dim, len(shape))
    return math.prod(shape) if axis is None else math.prod(shape[d] for d in axis)




@st.composite
def shape_and_dim(draw, dims=("none", "int", "tuple", "empty"), min_dims=0, max_dims=3):
    """(shape, dim, keepdim) with dim None, an int (maybe negative), a tuple, or () (all dims, as in torch)."""
    shape = draw(shapes(min_dims=min_dims, max_dims=max_dims))
    n = max(len(shape), 1)
    kind = draw(st.sampled_from(dims))
    if kind == "none":
        dim = None
    elif kind == "empty":
        dim = ()
    elif kind == "int":
        dim = draw(st.integers(-n, n - 1))
    else:
        picked = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
        dim = tuple(d - n if draw(st.booleans()) else d for d in picked)
    return shape, dim, draw(st.booleans())


# ----------------------------------------------------------------------------- sum, mean
@given(st.data())
def test_sum(data):
    shape, dim, keepdim = data.draw(shape_and_dim())
    a = data.draw(noncontiguous(values(shape)))
    check_op(lambda x: x.sum(dim, keepdim), lambda a: np.sum(a, np_axis(dim, a.ndim), keepdims=keepdim), a,
             second_order=True)


@given(st.data())
def test_mean(data):
    shape, dim, keepdim = data.draw(shape_and_dim())
    a = data.draw(noncontiguous(values(shape)))
    check_op(lambda x: x.mean(dim, keepdim), lambda a: np.mean(a, np_axis(dim, a.ndim), keepdims=keepdim), a,
             second_order=True)


def test_an_empty_dim_tuple_reduces_every_dim_like_pytorch():
    a = np.arange(6.0).reshape(2, 3)
    x = t64(a)
    assert x.sum(()).item() == 15.0 and x.sum([], keepdim=True).shape == (1, 1)
    assert x.mean(()).item() == 2.5 and x.amax([]).item() == 5.0 and x.amin(()).item() == 0.0
    np.testing.assert_allclose(x.var(()).item(), a.var(ddof=1))
    np.testing.assert_allclose(x.logsumexp(()).item(), np.log(np.exp(a).sum()))


def test_sum_of_ints_is_int64_and_mean_of_ints_is_an_error():
    x = tg.tensor([[1, 2], [3, 4]], dtype=tg.int32)
    assert x.sum().dtype == tg.int64 and x.sum().item() == 10
    assert tg.tensor([True, True, False]).sum().item() == 2
    with pytest.raises(RuntimeError, match="mean.*float"):
        x.mean()


# ----------------------------------------------------------------------------- var, std
@st.composite
def correction_kwargs(draw, count, at_least_one_left):
    """correction= or unbiased= (PyTorch's two spellings), keeping count - correction >= 1 if asked."""
    allowed = [0, 1] if count > 1 or not at_least_one_left else [0]
    correction = draw(st.sampled_from(allowed))
    spelling = draw(st.sampled_from(["correction", "unbiased", "default"]))
    if spelling == "default" and correction == 1:
        return {}, 1
    if spelling == "unbiased":
        return {"unbiased": bool(correction)}, correction
    return {"correction": correction}, correction


@given(st.data())
def test_var(data):
    shape, dim, keepdim = data.draw(shape_and_dim())
    kwargs, ddof = data.draw(correction_kwargs(reduced_count(shape, dim), at_least_one_left=True))
    a = data.draw(noncontiguous(spread(shape)))
    check_op(lambda x: x.var(dim, keepdim=keepdim, **kwargs),
             lambda a: np.var(a, np_axis(dim, a.ndim), ddof=ddof, keepdims=keepdim), a, second_order=True)


@given(st.data())
def test_std(data):
    # at least two distinct values per reduction, so std > 0 and its derivative is finite
    shape, dim, keepdim = data.draw(shape_and_dim(min_dims=1).filter(lambda s: reduced_count(s[0], s[1]) > 1))
    kwargs, ddof = data.draw(correction_kwargs(reduced_count(shape, dim), at_least_one_left=True))
    a = data.draw(noncontiguous(spread(shape)))
    check_op(lambda x: x.std(dim, keepdim=keepdim, **kwargs),
             lambda a: np.std(a, np_axis(dim, a.ndim), ddof=ddof, keepdims=keepdim), a, second_order=True)


def test_var_of_one_element_with_bessel_correction_is_nan():
    with np.errstate(divide="ignore", invalid="ignore"):
        assert np.isnan(t64([3.0]).var().item())
        assert t64([3.0]).var(correction=0).item() == 0.0
    assert t64([1.0, 3.0]).var().item() == 2.0 and t64([1.0, 3.0]).var(unbiased=False).item() == 1.0


def test_std_of_constant_values_has_zero_gradient_like_pytorch():
    x = t64([2.0, 2.0, 2.0])
    with np.errstate(divide="ignore", invalid="ignore"):
        x.std().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])


# ----------------------------------------------------------------------------- max, min, amax, amin
@given(st.data(), st.sampled_from(["max", "min"]))
def test_full_max_min(data, kind):
    a = data.draw(noncontiguous(spread(data.draw(shapes()))))
    check_op(lambda x: getattr(x, kind)(), getattr(np, kind), a, second_order=True)


@given(st.data(), st.sampled_from(["amax", "amin"]))
def test_amax_amin(data, kind):
    shape, dim, keepdim = data.draw(shape_and_dim())
    a = data.draw(noncontiguous(spread(shape)))
    reference = np.max if kind == "amax" else np.min
    check_op(lambda x: getattr(x, kind)(dim, keepdim), lambda a: reference(a, np_axis(dim, a.ndim), keepdims=keepdim),
             a, second_order=True)


def np_arg(a, dim, keepdim, kind):
    """NumPy's argmax/argmin with PyTorch's dim handling (0-d: index 0)."""
    if a.ndim == 0:
        return np.array(0)
    return getattr(np, kind)(a, axis=dim, keepdims=keepdim)


@given(st.data(), st.sampled_from(["max", "min"]))
def test_max_min_with_dim_return_values_and_indices(data, kind):
    shape, dim, keepdim = data.draw(shape_and_dim(dims=("int",)))
    a = data.draw(noncontiguous(spread(shape)))
    result = getattr(t64(a), kind)(dim, keepdim=keepdim)
    values_, indices = result                      # a namedtuple, like torch.return_types.max
    assert result.values is values_ and result.indices is indices
    assert indices.dtype == tg.int64 and not indices.requires_grad
    np.testing.assert_array_equal(indices.numpy(), np_arg(a, dim, keepdim, "arg" + kind))
    check_op(lambda x: getattr(x, kind)(dim, keepdim=keepdim).values,
             lambda a: getattr(np, kind)(a, axis=np_axis(dim, a.ndim), keepdims=keepdim), a, second_order=True)


@given(st.data(), st.sampled_from(["argmax", "argmin"]))
def test_argmax_argmin(data, kind):
    shape, dim, keepdim = data.draw(shape_and_dim(dims=("none", "int")))
    keepdim = keepdim and dim is not None
    a = data.draw(noncontiguous(spread(shape)))
    out = getattr(t64(a), kind)(dim, keepdim=keepdim)
    assert out.dtype == tg.int64 and not out.requires_grad and out.grad_fn is None
    expected = getattr(np, kind)(a) if dim is None else np_arg(a, dim, keepdim, kind)
    assert out.shape == np.shape(expected)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_full_max_and_amax_share_the_gradient_evenly_among_ties():
    x = t64([1.0, 3.0, 3.0])
    x.max().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.5, 0.5])
    x = t64([[2.0, 2.0, 1.0], [0.0, 5.0, 5.0]])
    x.amax(1).backward(tg.tensor([1.0, 4.0], dtype=tg.float64))
    np.testing.assert_array_equal(x.grad.numpy(), [[0.5, 0.5, 0.0], [0.0, 2.0, 2.0]])
    x = t64([[4.0, 1.0], [1.0, 1.0]])
    x.min().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0.0, 1 / 3], [1 / 3, 1 / 3]])
    x = t64([[7.0, 7.0], [7.0, 7.0]])
    x.amin((0, 1)).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 2), 0.25))


def test_max_with_dim_sends_the_whole_gradient_to_the_first_index_of_a_tie():
    x = t64([[1.0, 3.0, 3.0], [5.0, 5.0, 0.0]])
    values_, indices = x.max(1)
    np.testing.assert_array_equal(indices.numpy(), [1, 0])
    values_.backward(tg.tensor([1.0, 2.0], dtype=tg.float64))
    np.testing.assert_array_equal(x.grad.numpy(), [[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]])
    y = t64([[2.0, 2.0], [2.0, 9.0]])
    values_, indices = y.min(0, keepdim=True)
    np.testing.assert_array_equal(indices.numpy(), [[0, 0]])
    values_.sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [[1.0, 1.0], [0.0, 0.0]])


def test_argmax_argmin_pick_the_first_of_ties():
    x = tg.tensor([[1.0, 4.0, 4.0], [2.0, 2.0, 2.0]])
    assert x.argmax().item() == 1 and x.argmin().item() == 0
    np.testing.assert_array_equal(x.argmax(1).numpy(), [1, 0])
    np.testing.assert_array_equal(x.argmin(-1, keepdim=True).numpy(), [[0], [0]])


def test_zero_d_and_size_one_reductions():
    x = t64(3.0)
    values_, indices = x.max(0)
    assert values_.item() == 3.0 and indices.item() == 0 and indices.shape == ()
    assert x.argmax(-1).item() == 0 and x.amin(0).item() == 3.0 and x.sum(-1).shape == ()
    values_.backward()
    assert x.grad.item() == 1.0
    y = t64([[5.0]])
    assert y.max(1).values.shape == (1,) and y.max(1, keepdim=True).values.shape == (1, 1)
    assert y.sum((0, 1), keepdim=True).shape == (1, 1) and y.logsumexp(-1).shape == (1,)


# ----------------------------------------------------------------------------- logsumexp
def np_logsumexp(a, axis, keepdims):
    shift = np.max(a, axis=axis, keepdims=True)
    shift = np.where(np.isfinite(shift), shift, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - shift), axis=axis, keepdims=True)) + shift
    return out if keepdims else np.squeeze(out, axis=axis)


@given(st.data())
def test_logsumexp(data):
    shape, dim, keepdim = data.draw(shape_and_dim(dims=("int", "tuple")))
    a = data.draw(noncontiguous(values(shape, -5.0, 5.0)))
    check_op(lambda x: x.logsumexp(dim, keepdim), lambda a: np_logsumexp(a, np_axis(dim, a.ndim), keepdim), a,
             second_order=True)


def test_logsumexp_is_stable_for_large_values():
    a = np.array([[1e4, 1e4 + 1.0, -1e4], [-1e4, -1e4, -1e4 - 2.0]])
    x = t64(a)
    out = x.logsumexp(1)
    np.testing.assert_allclose(out.numpy(), np_logsumexp(a, 1, False), rtol=1e-12)
    np.testing.assert_allclose(out.numpy()[1], -1e4 + np.log(2 + np.exp(-2.0)), rtol=1e-12)
    out.sum().backward()
    softmax = np.exp(a - np_logsumexp(a, 1, True))
    np.testing.assert_allclose(x.grad.numpy(), softmax, rtol=1e-12)
    check_op(lambda x: x.logsumexp(-1), lambda a: np_logsumexp(a, 1, False), a, grad_atol=1e-4, second_order=True)


def test_logsumexp_with_minus_infinity_entries():
    a = np.array([[0.0, -np.inf, 1.0], [-np.inf, 2.0, -np.inf]])
    x = t64(a)
    out = x.logsumexp(1)
    np.testing.assert_allclose(out.numpy(), [np.log(1 + np.e), 2.0])
    out.backward(tg.tensor([1.0, 3.0], dtype=tg.float64))
    grad = x.grad.numpy()
    assert np.isfinite(grad).all(), f"nan or inf in the gradient: {grad}"
    np.testing.assert_allclose(grad, [[1 / (1 + np.e), 0.0, np.e / (1 + np.e)], [0.0, 3.0, 0.0]])
    check_op(lambda x: x.logsumexp(1), lambda a: np_logsumexp(a, 1, False), a, second_order=True)
    with np.errstate(divide="ignore"):          # every entry -inf: the sum is 0 and its log -inf, as in PyTorch
        assert t64([-np.inf, -np.inf]).logsumexp(0).item() == -np.inf


# ----------------------------------------------------------------------------- softmax, log_softmax
def np_softmax(a, axis):
    e = np.exp(a - np.max(a, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@given(st.data(), st.sampled_from(["softmax", "log_softmax"]))
def test_softmax_and_log_softmax(data, kind):
    shape, dim, _ = data.draw(shape_and_dim(dims=("int",)))
    a = data.draw(noncontiguous(values(shape, -5.0, 5.0)))
    axis = np_axis(dim, a.ndim)
    reference = (lambda a: np_softmax(a, axis)) if kind == "softmax" else (lambda a: np.log(np_softmax(a, axis)))
    check_op(lambda x: getattr(x, kind)(dim), reference, a, second_order=True)


def test_softmax_is_stable_for_large_values():
    x = t64([[1e4, 1e4 + 1.0, 0.0], [-1e4, -1e4, -1e4]])
    np.testing.assert_allclose(x.softmax(1).numpy(), [[1 / (1 + np.e), np.e / (1 + np.e), 0.0], [1 / 3] * 3])
    np.testing.assert_allclose(x.log_softmax(-1).numpy()[1], [-np.log(3)] * 3)
    assert np.isfinite(x.log_softmax(1).numpy()[0, :2]).all()
    np.testing.assert_allclose(x.softmax(0).numpy().sum(0), [1.0, 1.0, 1.0])


def test_float32_stays_float32_and_large_float32_values_stay_finite():
    x = tg.tensor([[1e4, 0.0, -3.0], [-1e4, 5.0, 5.0]], requires_grad=True)
    for out in (x.sum(1), x.mean(), x.var(0), x.std(), x.amax(1), x.max(1).values, x.logsumexp(1), x.softmax(1),
                x.log_softmax(0)):
        assert out.dtype == tg.float32
        assert np.isfinite(out.numpy()).all()
        x.grad = None
        out.sum().backward()
        assert x.grad.dtype == tg.float32 and np.isfinite(x.grad.numpy()).all()
    np.testing.assert_allclose(x.log_softmax(1).numpy(), [[0.0, -1e4, -1e4 - 3.0], [-1e4 - 5.0 - np.log(2),
                                                          -np.log(2), -np.log(2)]], rtol=1e-6)


# ----------------------------------------------------------------------------- clear errors
@pytest.mark.parametrize("call", [
    lambda x: x.sum(2), lambda x: x.mean((0, -3)), lambda x: x.var(5), lambda x: x.amax(-3), lambda x: x.max(2),
    lambda x: x.argmax(2), lambda x: x.logsumexp(3), lambda x: x.softmax(2), lambda x: x.log_softmax(-3),
])
def test_dim_out_of_range_is_a_clear_error(call):
    with pytest.raises(IndexError, match=r"out of range.*2 dimension"):
        call(tg.ones(2, 3))


def test_picking_reductions_of_empty_tensors_follow_pytorch():
    """max, min, amax, amin, argmax and argmin need an element in each reduced dim: over all dims of an empty
    tensor they ask for a dim (RuntimeError; IndexError from the arg ones), over a named dim of size 0 they raise
    IndexError; over a non-empty dim of a tensor empty elsewhere they give an empty result, as PyTorch does."""
    x = tg.zeros(0, 3)
    for call in (lambda: x.max(), lambda: x.min(), lambda: x.amax()):
        with pytest.raises(RuntimeError, match=r"dim to be specified.*\(0, 3\)"):
            call()
    for call in (lambda: x.argmax(), lambda: x.amax(0), lambda: x.max(0), lambda: x.argmin(0), lambda: x.amin((0, 1))):
        with pytest.raises(IndexError, match=r"\(0, 3\)"):
            call()
    assert x.amax(1).shape == (0,) and x.argmax(1).shape == (0,) and x.argmax(1).dtype == tg.int64
    values, indices = tg.zeros(0, 3, dtype=tg.int64).min(1, keepdim=True)
    assert values.shape == indices.shape == (0, 1) and values.dtype == indices.dtype == tg.int64
    np.testing.assert_array_equal(tg.zeros(2, 0).logsumexp(1).numpy(), [-np.inf, -np.inf])
    assert tg.zeros(2, 0).softmax(1).shape == (2, 0) and tg.zeros(0, 2).log_softmax(1).shape == (0, 2)


def test_repeated_or_tuple_dims_where_not_allowed_are_clear_errors():
    with pytest.raises(RuntimeError, match="twice"):
        tg.ones(2, 3).sum((1, -1))
    with pytest.raises(TypeError, match="max.*single int"):
        tg.ones(2, 3).max((0, 1))


# ----------------------------------------------------------------------------- every device
def test_reductions_on_every_device(device):
    a = np.array([[0.3, -1.2, 2.0], [1.1, 0.4, -0.7]])
    for fn, reference in [(lambda x: x.sum(1), lambda a: a.sum(1)),
                          (lambda x: x.var(0), lambda a: a.var(0, ddof=1)),
                          (lambda x: x.max(1).values, lambda a: a.max(1)),
                          (lambda x: x.amin(), lambda a: a.min()),
                          (lambda x: x.logsumexp(1), lambda a: np_logsumexp(a, 1, False)),
                          (lambda x: x.softmax(-1), lambda a: np_softmax(a, 1))]:
        check_op(fn, reference, a, second_order=True, device=device)
    assert tg.tensor(a, device=device).argmax(1).tolist() == [2, 0]
