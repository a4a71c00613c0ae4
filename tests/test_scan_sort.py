"""prod, the scans (cumsum, cumprod, cummax, cummin, logcumsumexp) and sorting (sort, argsort, msort,
topk) against NumPy definitions, with PyTorch's semantics.

Property tests draw a shape (0-d and size-1 included) and a dim; check_op checks the forward, first and
second derivatives against central differences, and that nothing is mutated or aliased. By
construction: prod and cumprod get values at least 0.5 away from 0 (their zeros are the example tests'
job, where the gradient is compared with its exact value); sort, topk, cummax and cummin get values
at least 0.01 apart, so no difference quotient straddles a tie. PyTorch's choices at ties (which index
wins) and with NaN are pinned by example tests.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinygrad_gpu as tg
from checks import check_op, noncontiguous, shapes, spread, values


def t64(data, requires_grad=True):
    return tg.tensor(np.asarray(data, dtype=np.float64), dtype=tg.float64, requires_grad=requires_grad)


@st.composite
def shape_and_dim(draw):
    """A shape and one dim of it (maybe negative); a 0-d shape takes 0 or -1, as in PyTorch. Sides up to 3
    keep the second-order checks (a full Jacobian of the gradient) quick."""
    shape = draw(shapes(max_side=3))
    n = max(len(shape), 1)
    return shape, draw(st.integers(-n, n - 1))


def np_axis(dim, ndim):
    return dim % ndim if ndim else None


@st.composite
def away_from_zero(draw, shape):
    """Magnitudes in [0.5, 2] with random signs: products stay moderate and no factor is near 0."""
    magnitudes = draw(values(shape, 0.5, 2.0))
    signs = draw(hnp.arrays(np.float64, shape, elements=st.sampled_from([-1.0, 1.0])))
    return np.asarray(magnitudes * signs)        # 0-d stays an array


def along_last(fn, a, axis):
    """Apply fn (of a 1-d row -> 1-d row) to every row of `a` along `axis`; 0-d counts as one row."""
    if a.ndim == 0:
        return fn(a.reshape(1)).reshape(())
    return np.apply_along_axis(fn, axis, a)


# ----------------------------------------------------------------------------- PyTorch's definitions in NumPy
def cummax_indices(row, kind):
    """PyTorch's cummax/cummin index: the LAST position holding the best value so far (>= / <=), and
    once a NaN appears, the last NaN so far."""
    out, best, best_at = [], row[0], 0
    for i, v in enumerate(row):
        better = v >= best if kind == "cummax" else v <= best
        if np.isnan(v) or (not np.isnan(best) and better):
            best, best_at = v, i
        out.append(best_at)
    return np.array(out)


def stable_order(row, descending):
    """Python's sorted is stable: equal values keep their original order, in either direction."""
    return np.array(sorted(range(len(row)), key=lambda i: -row[i] if descending else row[i]), dtype=np.int64)


def cumprod_gradient_by_definition(row, upstream):
    """grad_k = sum over i >= k of upstream_i * (x_0 ... x_i without x_k)."""
    n = len(row)
    return np.array([sum(upstream[i] * np.prod([row[j] for j in range(i + 1) if j != k]) for i in range(k, n))
                     for k in range(n)])


def logcumsumexp_gradient_by_definition(row, upstream):
    """grad_k = sum over i >= k of upstream_i * exp(x_k - y_i); every exponent is <= 0 (y_i >= x_k)."""
    y = np.logaddexp.accumulate(row)
    return np.array([sum(upstream[i] * np.exp(row[k] - y[i]) for i in range(k, len(row))) for k in range(len(row))])


# ----------------------------------------------------------------------------- prod
@given(st.data())
def test_prod(data):
    shape = data.draw(shapes(max_side=3))
    dim = data.draw(st.one_of(st.none(), st.integers(-max(len(shape), 1), max(len(shape), 1) - 1)))
    keepdim = data.draw(st.booleans())
    a = data.draw(noncontiguous(away_from_zero(shape)))
    axis = None if dim is None else np_axis(dim, a.ndim)
    check_op(lambda x: x.prod(dim, keepdim), lambda a: np.prod(a, axis=axis, keepdims=keepdim), a,
             second_order=True)


def test_prod_gradient_with_zeros_is_the_product_of_the_others():
    x = t64([[2.0, 0.0, 3.0, 4.0], [2.0, 0.0, 3.0, 0.0], [1.0, 2.0, 3.0, 4.0]])
    x.prod(1).backward(tg.tensor([1.0, 1.0, 2.0], dtype=tg.float64))
    # one zero: only the zero's gradient is non-zero (2 * 3 * 4); two zeros: all 0; none: 2 * prod / x_k
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 24, 0, 0], [0, 0, 0, 0], [48, 24, 16, 12]])
    y = t64([[0.0, 2.0], [3.0, -1.0]])
    y.prod().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [[-6.0, 0.0], [0.0, 0.0]])
    # prod is a polynomial, so differences are exact enough at zeros too, second order included
    check_op(lambda x: x.prod(1), lambda a: a.prod(1), x.numpy(), second_order=True)
    check_op(lambda x: x.prod(), lambda a: a.prod(), np.array([[0.0, 2.0], [3.0, -1.0]]), second_order=True)


def test_prod_dtypes_like_pytorch():
    assert tg.tensor([2, 3, 4], dtype=tg.int32).prod().dtype == tg.int64
    assert tg.tensor([2, 3, 4], dtype=tg.int32).prod().item() == 24
    assert tg.tensor([[True, False], [True, True]]).prod(1).dtype == tg.int64
    assert tg.tensor([[True, False], [True, True]]).prod(1).tolist() == [0, 1]
    assert tg.tensor([1.5, 2.0]).prod().dtype == tg.float32
    assert tg.tensor([2, 3]).prod(dtype=tg.float64).dtype == tg.float64
    assert tg.zeros(0).prod().item() == 1.0 and tg.ones(2, 0).prod(1).tolist() == [1.0, 1.0]
    assert t64(3.0).prod(0).item() == 3.0 and t64([[2.0], [3.0]]).prod(0, keepdim=True).shape == (1, 1)


# ----------------------------------------------------------------------------- cumsum, cumprod
@given(st.data())
def test_cumsum(data):
    shape, dim = data.draw(shape_and_dim())
    a = data.draw(noncontiguous(values(shape)))
    check_op(lambda x: x.cumsum(dim), lambda a: along_last(np.cumsum, a, np_axis(dim, a.ndim)), a,
             second_order=True)


@given(st.data())
def test_cumprod(data):
    shape, dim = data.draw(shape_and_dim())
    a = data.draw(noncontiguous(away_from_zero(shape)))
    check_op(lambda x: x.cumprod(dim), lambda a: along_last(np.cumprod, a, np_axis(dim, a.ndim)), a,
             second_order=True)


@pytest.mark.parametrize("row", [[2.0, 0.0, 3.0, 4.0], [0.0, 2.0, -1.0], [2.0, 0.0, 3.0, 0.0, 5.0],
                                 [0.0, 0.0, 2.0], [1.5, 2.0, 0.0], [0.0]])
def test_cumprod_gradient_with_zeros_is_exact(row):
    upstream = np.array([1.0, -2.0, 3.0, 0.5, 2.0])[:len(row)]
    x = t64(row)
    x.cumprod(0).backward(tg.tensor(upstream, dtype=tg.float64))
    expected = cumprod_gradient_by_definition(row, upstream)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-15)
    # with create_graph=True the gradient is computed the other way (differentiable at zeros): the same numbers
    (graph_grad,) = tg.grad(x.cumprod(0), [x], [tg.tensor(upstream, dtype=tg.float64)], create_graph=True)
    np.testing.assert_allclose(graph_grad.numpy(), expected, rtol=1e-15)
    # cumprod is a polynomial: differences are right at zeros too, second order included
    check_op(lambda x: x.cumprod(0), np.cumprod, np.array(row), second_order=True)


def test_cumprod_gradient_with_zeros_in_some_rows_only():
    a = np.array([[2.0, 0.0, 3.0], [1.0, 2.0, 3.0], [0.0, 0.0, 4.0]])
    x = t64(a)
    x.cumprod(1).sum().backward()
    expected = [cumprod_gradient_by_definition(row, np.ones(3)) for row in a]
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    np.testing.assert_array_equal(expected[0], [1.0, 2 + 6, 0.0])     # the zero's gradient: 2 + 2 * 3


def test_cumsum_and_cumprod_dtypes_like_pytorch():
    ints = tg.tensor([[1, 2, 3], [4, 5, 6]], dtype=tg.int32)
    assert ints.cumsum(1).dtype == tg.int64 and ints.cumsum(1).tolist() == [[1, 3, 6], [4, 9, 15]]
    assert ints.cumprod(0).dtype == tg.int64 and ints.cumprod(0).tolist() == [[1, 2, 3], [4, 10, 18]]
    flags = tg.tensor([True, False, True])
    assert flags.cumsum(0).dtype == tg.int64 and flags.cumsum(0).tolist() == [1, 1, 2]
    assert flags.cumprod(0).tolist() == [1, 0, 0]
    assert ints.cumsum(1, dtype=tg.float64).dtype == tg.float64
    assert tg.tensor([0.5, 2.0]).cumprod(0).dtype == tg.float32 and tg.tensor([0.5]).cumsum(0).dtype == tg.float32
    assert tg.cumsum(t64(3.0), -1).item() == 3.0 and tg.cumprod(t64(3.0), 0).shape == ()
    for empty in (tg.zeros(2, 0).cumsum(1), tg.zeros(2, 0).cumprod(1), tg.zeros(2, 0).cummax(1).indices,
                  tg.zeros(2, 0).logcumsumexp(1), tg.zeros(2, 0).sort(1).values):
        assert empty.shape == (2, 0)


# ----------------------------------------------------------------------------- cummax, cummin
@given(st.data(), st.sampled_from(["cummax", "cummin"]))
def test_cummax_cummin(data, kind):
    shape, dim = data.draw(shape_and_dim())
    a = data.draw(noncontiguous(spread(shape)))
    axis = np_axis(dim, a.ndim)
    result = getattr(t64(a), kind)(dim)
    values_, indices = result                      # a named pair, like torch.return_types.cummax
    assert result.values is values_ and result.indices is indices
    assert indices.dtype == tg.int64 and not indices.requires_grad and indices.shape == a.shape
    np.testing.assert_array_equal(indices.numpy(), along_last(lambda r: cummax_indices(r, kind), a, axis))
    ufunc = np.maximum if kind == "cummax" else np.minimum
    check_op(lambda x: getattr(x, kind)(dim).values, lambda a: along_last(ufunc.accumulate, a, axis), a,
             second_order=True)


def test_cummax_and_cummin_pick_the_last_of_equal_values_like_pytorch():
    x = t64([1.0, 3.0, 3.0, 2.0, 3.0])
    values_, indices = x.cummax(0)
    np.testing.assert_array_equal(values_.numpy(), [1, 3, 3, 3, 3])
    np.testing.assert_array_equal(indices.numpy(), [0, 1, 2, 2, 4])
    values_.backward(tg.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=tg.float64))
    np.testing.assert_array_equal(x.grad.numpy(), [1, 2, 7, 0, 5])       # each gradient goes to its index
    y = t64([[2.0, 1.0, 1.0, 4.0], [5.0, 5.0, 5.0, 5.0]])
    np.testing.assert_array_equal(y.cummin(1).indices.numpy(), [[0, 1, 2, 2], [0, 1, 2, 3]])
    np.testing.assert_array_equal(y.cummax(0).indices.numpy(), [[0, 0, 0, 0], [1, 1, 1, 1]])


def test_cummax_with_nan_keeps_the_last_nan_like_pytorch():
    values_, indices = t64([1.0, np.nan, 3.0, np.nan, 0.0]).cummax(0)
    np.testing.assert_array_equal(values_.numpy(), [1.0, np.nan, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(indices.numpy(), [0, 1, 1, 3, 3])
    np.testing.assert_array_equal(t64([2.0, 1.0, np.nan, 0.0]).cummin(0).indices.numpy(), [0, 1, 2, 2])


def test_cummax_of_integers_and_of_a_0d_tensor():
    values_, indices = tg.tensor([[3, 1, 4, 1, 5]], dtype=tg.int32).cummax(1)
    assert values_.dtype == tg.int32 and values_.tolist() == [[3, 3, 4, 4, 5]] and indices.tolist() == [[0, 0, 2, 2, 4]]
    values_, indices = tg.tensor([True, False, True]).cummin(0)
    assert values_.tolist() == [True, False, False] and indices.tolist() == [0, 1, 1]
    values_, indices = tg.cummax(t64(2.5), 0)
    assert values_.shape == () and values_.item() == 2.5 and indices.item() == 0


# ----------------------------------------------------------------------------- logcumsumexp
@given(st.data())
def test_logcumsumexp(data):
    shape, dim = data.draw(shape_and_dim())
    a = data.draw(noncontiguous(values(shape, -5.0, 5.0)))
    check_op(lambda x: x.logcumsumexp(dim), lambda a: along_last(np.logaddexp.accumulate, a, np_axis(dim, a.ndim)),
             a, second_order=True)


def test_logcumsumexp_is_stable_for_large_values():
    a = np.array([[1000.0, 1001.0, -1000.0, 999.0], [-1000.0, 0.0, 700.0, -5.0]])
    x = t64(a)
    out = x.logcumsumexp(1)
    np.testing.assert_allclose(out.numpy(), np.logaddexp.accumulate(a, axis=1), rtol=1e-14)
    assert out.numpy()[1, 0] == -1000.0          # a small first value is not lost (no log(0) = -inf)
    np.testing.assert_allclose(out.numpy()[0, 1], 1001.0 + np.log1p(np.exp(-1.0)), rtol=1e-14)
    upstream = np.array([[1.0, -2.0, 0.5, 3.0], [-1.0, 2.0, -0.5, 1.0]])     # both signs
    out.backward(tg.tensor(upstream, dtype=tg.float64))
    expected = [logcumsumexp_gradient_by_definition(row, g) for row, g in zip(a, upstream)]
    assert np.isfinite(x.grad.numpy()).all()
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12, atol=1e-300)


def test_logcumsumexp_refuses_integers_and_float32_stays_float32():
    with pytest.raises(NotImplementedError, match="logcumsumexp"):  # as PyTorch: no integer logcumsumexp
        tg.tensor([1, 2, 3]).logcumsumexp(0)
    x = tg.tensor([[1e4, 0.0, -3.0]], requires_grad=True)
    out = tg.logcumsumexp(x, 1)
    assert out.dtype == tg.float32 and np.isfinite(out.numpy()).all()
    out.sum().backward()
    assert x.grad.dtype == tg.float32 and np.isfinite(x.grad.numpy()).all()


# ----------------------------------------------------------------------------- sort, argsort, msort, topk
@given(st.data(), st.booleans())
def test_sort(data, descending):
    shape, dim = data.draw(shape_and_dim())
    a = data.draw(noncontiguous(spread(shape)))
    axis = np_axis(dim, a.ndim)
    result = t64(a).sort(dim, descending)
    values_, indices = result                      # a named pair, like torch.return_types.sort
    assert result.values is values_ and result.indices is indices and indices.dtype == tg.int64
    expected_order = along_last(lambda r: stable_order(r, descending), a, axis)
    np.testing.assert_array_equal(indices.numpy(), expected_order)
    np.testing.assert_array_equal(t64(a).argsort(dim, descending).numpy(), expected_order)

    def reference(a):
        ascending = along_last(np.sort, a, axis)
        return along_last(lambda r: r[::-1], ascending, axis) if descending else ascending
    check_op(lambda x: x.sort(dim, descending=descending).values, reference, a, second_order=True)


@given(st.data(), st.booleans())
def test_topk(data, largest):
    shape, dim = data.draw(shape_and_dim())
    a = data.draw(noncontiguous(spread(shape)))
    axis = np_axis(dim, a.ndim)
    k = data.draw(st.integers(1, a.shape[axis] if a.ndim else 1))

    def first_k(row, order_only=False):
        order = stable_order(row, descending=largest)[:k]
        return order if order_only else row[order]
    values_, indices = t64(a).topk(k, dim, largest=largest)
    np.testing.assert_array_equal(indices.numpy(), along_last(lambda r: first_k(r, True), a, axis))
    check_op(lambda x: x.topk(k, dim, largest).values, lambda a: along_last(first_k, a, axis), a, second_order=True)


def test_sort_keeps_equal_values_in_their_original_order_both_ways():
    x = t64([2.0, 1.0, 2.0, 1.0, 3.0])
    for stable in (False, True):
        np.testing.assert_array_equal(x.sort(stable=stable).indices.numpy(), [1, 3, 0, 2, 4])
        np.testing.assert_array_equal(x.sort(descending=True, stable=stable).indices.numpy(), [4, 0, 2, 1, 3])
    np.testing.assert_array_equal(tg.argsort(x, descending=True).numpy(), [4, 0, 2, 1, 3])
    # longer than NumPy's insertion-sort cut-off (16), where an unstable sort would shuffle ties
    many = tg.tensor([1.0] * 20 + [0.0] * 20)
    np.testing.assert_array_equal(many.argsort().numpy(), list(range(20, 40)) + list(range(20)))
    np.testing.assert_array_equal(many.argsort(descending=True).numpy(), list(range(40)))


def test_sort_gradient_goes_back_to_each_value_s_position():
    x = t64([[2.0, 1.0, 2.0, 1.0]])
    values_, indices = x.sort(1, descending=True)
    values_.backward(tg.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=tg.float64))
    np.testing.assert_array_equal(indices.numpy(), [[0, 2, 1, 3]])
    np.testing.assert_array_equal(x.grad.numpy(), [[1.0, 3.0, 2.0, 4.0]])


def test_topk_ties_pick_the_smaller_index_first():
    x = t64([1.0, 3.0, 3.0, 2.0, 1.0])
    values_, indices = tg.topk(x, 2)
    np.testing.assert_array_equal(values_.numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(indices.numpy(), [1, 2])
    np.testing.assert_array_equal(x.topk(3, largest=False).indices.numpy(), [0, 4, 3])
    values_.backward(tg.tensor([1.0, 2.0], dtype=tg.float64))
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 2.0, 0.0, 0.0])
    assert x.topk(0).values.shape == (0,) and x.topk(2, sorted=False).indices.tolist() == [1, 2]


def test_sort_puts_nan_last_ascending_and_first_descending_like_pytorch():
    x = t64([np.nan, 1.0, 0.0, np.nan])
    np.testing.assert_array_equal(x.sort().values.numpy(), [0.0, 1.0, np.nan, np.nan])
    np.testing.assert_array_equal(x.sort().indices.numpy(), [2, 1, 0, 3])
    np.testing.assert_array_equal(x.sort(descending=True).indices.numpy(), [0, 3, 1, 2])


def test_sorting_dtypes_0d_and_module_functions():
    ints = tg.tensor([[3, 1, 2], [0, -5, 7]], dtype=tg.int32)
    values_, indices = tg.sort(ints, 1)
    assert values_.dtype == tg.int32 and indices.dtype == tg.int64
    assert values_.tolist() == [[1, 2, 3], [-5, 0, 7]] and indices.tolist() == [[1, 2, 0], [1, 0, 2]]
    assert tg.tensor([True, False, True]).sort(descending=True).indices.tolist() == [0, 2, 1]
    assert ints.topk(1, dim=0).values.tolist() == [[3, 1, 7]]
    np.testing.assert_array_equal(tg.msort(ints).numpy(), np.sort(ints.numpy(), axis=0))
    np.testing.assert_array_equal(ints.msort().numpy(), ints.sort(0).values.numpy())
    assert tg.tensor([0.5, -1.0]).sort().values.dtype == tg.float32
    values_, indices = t64(4.0).sort(0)
    assert values_.shape == () and values_.item() == 4.0 and indices.item() == 0
    assert t64(4.0).topk(1).values.item() == 4.0 and tg.argsort(t64(4.0)).item() == 0
    assert tg.zeros(0).sort().values.shape == (0,)


# ----------------------------------------------------------------------------- clear errors
@pytest.mark.parametrize("call", [
    lambda x: x.prod(2), lambda x: x.cumsum(-3), lambda x: x.cumprod(2), lambda x: x.cummax(2),
    lambda x: x.cummin(-3), lambda x: x.logcumsumexp(5), lambda x: x.sort(2), lambda x: x.argsort(-3),
    lambda x: x.topk(1, dim=2),
])
def test_dim_out_of_range_is_an_index_error(call):
    with pytest.raises(IndexError, match=r"out of range.*2 dimension"):
        call(tg.ones(2, 3))


def test_topk_with_k_larger_than_the_size_is_a_runtime_error():
    with pytest.raises(RuntimeError, match=r"topk: k=5 .*size 3"):
        tg.ones(2, 3).topk(5)
    with pytest.raises(RuntimeError, match=r"topk: k=-1 .*size 2"):
        tg.ones(2, 3).topk(-1, dim=0)
    with pytest.raises(TypeError, match="topk: k must be an int"):
        tg.ones(3).topk(1.5)


def test_a_tuple_of_dims_where_one_dim_is_taken_is_a_type_error():
    with pytest.raises(TypeError, match="prod.*single int"):
        tg.ones(2, 3).prod((0, 1))
    with pytest.raises(TypeError, match="cumsum.*single int"):
        tg.ones(2, 3).cumsum((0, 1))
