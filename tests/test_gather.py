"""gather, scatter, scatter_add, scatter_reduce, masked_select, nonzero and nested index lists.

The references are PyTorch's definitions written as plain loops: each element of `index` stands
at its own coordinates p and names the place q = p with q[dim] = index[p]; gather reads x[q],
the scatters send src[p] to q. Property tests draw shapes, a dim (negative too), an index no
larger than x along the other dims, and a src at least as large as the index. Where a gradient
is defined only for distinct indices (scatter overwrites), the index has distinct places; amax
and amin get values at least 0.25 apart, prod values away from 0, by construction. Conventions at
ties are pinned by example tests.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_gpu as tg
from checks import check_op, noncontiguous, shapes, values


# ----------------------------------------------------------------------------- references
def place(p, index, dim):
    q = list(p)
    q[dim] = index[p]
    return tuple(q)


def np_gather(x, dim, index):
    out = np.empty(index.shape, dtype=x.dtype)
    for p in np.ndindex(index.shape):
        out[p] = x[place(p, index, dim)]
    return out


REDUCERS = {"sum": sum, "prod": np.prod, "mean": np.mean, "amax": max, "amin": min, "last": lambda v: v[-1]}


def np_scatter_reduce(x, dim, index, src, reduce, include_self=True):
    sent = {}
    for p in np.ndindex(index.shape):
        sent.setdefault(place(p, index, dim), []).append(src[p])
    out = x.copy()
    for q, vals in sent.items():
        out[q] = REDUCERS[reduce](([x[q]] if include_self else []) + vals)
    return out


# ----------------------------------------------------------------------------- strategies
@st.composite
def cases(draw, distinct_places=False, larger_src=False):
    """(x shape, dim, index, src shape). distinct_places: no two index elements name the same place."""
    x_shape = draw(shapes(min_dims=1, max_dims=3))
    ndim = len(x_shape)
    dim = draw(st.integers(-ndim, ndim - 1))
    d = dim % ndim
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    along = draw(st.integers(1, x_shape[d] if distinct_places else 4))
    index_shape = tuple(along if e == d else draw(st.integers(1, n)) for e, n in enumerate(x_shape))
    if distinct_places:
        # every fiber along d: the first `along` entries of its own shuffle of 0..n-1
        fibers = np.broadcast_to(np.arange(x_shape[d]).reshape([-1 if e == d else 1 for e in range(ndim)]),
                                 index_shape[:d] + (x_shape[d],) + index_shape[d + 1:])
        index = np.take(rng.permuted(fibers, axis=d), np.arange(along), axis=d)
    else:
        index = rng.integers(0, x_shape[d], index_shape)
    src_shape = tuple(n + (draw(st.integers(0, 1)) if larger_src else 0) for n in index_shape)
    return x_shape, dim, index, src_shape


def spread_values(draw, *shapes_):
    """Arrays of the given shapes holding distinct values, all at least 0.25 apart, in a random order."""
    sizes = [int(np.prod(s)) for s in shapes_]
    order = np.array(draw(st.permutations(range(sum(sizes)))), dtype=np.float64) * 0.25 - 1.0
    pieces = np.split(order, np.cumsum(sizes)[:-1])
    return [piece.reshape(s) for piece, s in zip(pieces, shapes_)]


# ----------------------------------------------------------------------------- gradients
@given(cases(), st.data())
def test_gather(case, data):
    x_shape, dim, index, _ = case
    x = data.draw(noncontiguous(values(x_shape)))
    i = tg.tensor(index)
    check_op(lambda t: t.gather(dim, i), lambda a: np_gather(a, dim % a.ndim, index), x, second_order=True)


@given(cases(distinct_places=True, larger_src=True), st.one_of(st.none(), st.floats(-2, 2)), st.data())
def test_scatter(case, number, data):
    """src a tensor (number None), or a number, given as value=."""
    x_shape, dim, index, src_shape = case
    x, src = data.draw(values(x_shape)), data.draw(values(src_shape))
    i = tg.tensor(index)
    if number is None:
        check_op(lambda a, b: a.scatter(dim, i, b),
                 lambda a, b: np_scatter_reduce(a, dim % a.ndim, index, b, "last"), x, src, second_order=True)
    else:
        check_op(lambda a: tg.scatter(a, dim, i, value=number),
                 lambda a: np_scatter_reduce(a, dim % a.ndim, index, np.full(index.shape, number), "last"),
                 x, second_order=True)


@given(cases(larger_src=True), st.data())
def test_scatter_add(case, data):
    x_shape, dim, index, src_shape = case
    x, src = data.draw(values(x_shape)), data.draw(noncontiguous(values(src_shape)))
    i = tg.tensor(index)
    check_op(lambda a, b: a.scatter_add(dim, i, b), lambda a, b: np_scatter_reduce(a, dim % a.ndim, index, b, "sum"),
             x, src, second_order=True)


@given(cases(larger_src=True), st.sampled_from(["sum", "prod", "mean", "amax", "amin"]), st.booleans(), st.data())
def test_scatter_reduce(case, reduce, include_self, data):
    x_shape, dim, index, src_shape = case
    if reduce in ("amax", "amin"):
        x, src = spread_values(data.draw, x_shape, src_shape)         # no ties anywhere
    elif reduce == "prod":
        x, src = data.draw(values(x_shape, 0.5, 2.0)), data.draw(values(src_shape, -2.0, -0.5))
    else:
        x, src = data.draw(values(x_shape)), data.draw(values(src_shape))
    i = tg.tensor(index)
    check_op(lambda a, b: a.scatter_reduce(dim, i, b, reduce, include_self=include_self),
             lambda a, b: np_scatter_reduce(a, dim % a.ndim, index, b, reduce, include_self), x, src,
             second_order=True)


@given(st.data())
def test_masked_select_broadcasts_and_sends_the_gradient_back(data):
    shape = data.draw(shapes(min_dims=0, max_dims=3))
    mask_shape = shape[data.draw(st.integers(0, len(shape))):]
    mask = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).random(mask_shape) < 0.5
    m = tg.tensor(mask)
    check_op(lambda a: a.masked_select(m), lambda a: np.broadcast_to(a, shape)[np.broadcast_to(mask, shape)],
             data.draw(values(shape)), second_order=True)


# ----------------------------------------------------------------------------- conventions and examples
def test_gather_backward_adds_up_repeated_indices():
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x.gather(0, tg.tensor([2, 0, 2, 2])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 3.0])


def test_amax_splits_the_gradient_evenly_among_ties():
    # place 1 gets max(x[1], src[0], src[1]) = max(3, 3, 2): x[1] and src[0] tie and share its gradient
    x = tg.tensor([1.0, 3.0], requires_grad=True)
    src = tg.tensor([3.0, 2.0, 5.0], requires_grad=True)
    out = x.scatter_reduce(0, tg.tensor([1, 1, 0]), src, "amax")
    np.testing.assert_array_equal(out.numpy(), [5.0, 3.0])
    out.backward(tg.tensor([10.0, 1.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.5])
    np.testing.assert_array_equal(src.grad.numpy(), [0.5, 0.0, 10.0])


def test_amin_without_self_ignores_a_tie_with_the_replaced_value():
    # include_self=False: x[0] takes no part, so its equal value gets nothing and src[0] gets all
    x = tg.tensor([2.0, 7.0], requires_grad=True)
    src = tg.tensor([2.0, 4.0], requires_grad=True)
    out = x.scatter_reduce(0, tg.tensor([0, 0]), src, "amin", include_self=False)
    np.testing.assert_array_equal(out.numpy(), [2.0, 7.0])
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0])
    np.testing.assert_array_equal(src.grad.numpy(), [1.0, 0.0])


def _prod_grads(x, src, include_self, upstream=None):
    x, src = tg.tensor(x, requires_grad=True), tg.tensor(src, requires_grad=True)
    out = x.scatter_reduce(0, tg.tensor([0, 0, 1]), src, "prod", include_self=include_self)
    out.backward(tg.ones(out.shape) if upstream is None else tg.tensor(upstream))
    return out.numpy(), x.grad.numpy(), src.grad.numpy()


def test_prod_with_one_zero_sends_the_product_of_the_others_to_it():
    # place 0 multiplies x[0]=2, src[0]=0, src[1]=4: the zero's gradient is 2 * 4, the others' 0
    out, x_grad, src_grad = _prod_grads([2.0, 3.0], [0.0, 4.0, 5.0], True)
    np.testing.assert_array_equal(out, [0.0, 15.0])
    np.testing.assert_array_equal(x_grad, [0.0, 5.0])
    np.testing.assert_array_equal(src_grad, [8.0, 0.0, 3.0])
    # the zero is x's own: x[0] gets 2 * 4 (times its upstream 1), src[2] 3 (times 2)
    out, x_grad, src_grad = _prod_grads([0.0, 3.0], [2.0, 4.0, 5.0], True, upstream=[1.0, 2.0])
    np.testing.assert_array_equal(x_grad, [8.0, 10.0])
    np.testing.assert_array_equal(src_grad, [0.0, 0.0, 6.0])


def test_prod_with_two_zeros_has_a_zero_gradient_there():
    out, x_grad, src_grad = _prod_grads([0.0, 3.0], [0.0, 4.0, 5.0], True)
    np.testing.assert_array_equal(out, [0.0, 15.0])
    np.testing.assert_array_equal(x_grad, [0.0, 5.0])
    np.testing.assert_array_equal(src_grad, [0.0, 0.0, 3.0])
    out, x_grad, src_grad = _prod_grads([2.0, 3.0], [0.0, 0.0, 5.0], True)
    np.testing.assert_array_equal(x_grad, [0.0, 5.0])
    np.testing.assert_array_equal(src_grad, [0.0, 0.0, 3.0])


def test_prod_without_self_does_not_count_xs_zero():
    # include_self=False: place 0 multiplies only src[0]=0 and src[1]=4, so src[0] is the lone zero;
    # place 2 receives nothing and keeps x[2]=0, whose gradient passes through unchanged
    out, x_grad, src_grad = _prod_grads([0.0, 3.0, 0.0], [0.0, 4.0, 5.0], False)
    np.testing.assert_array_equal(out, [0.0, 5.0, 0.0])
    np.testing.assert_array_equal(x_grad, [0.0, 0.0, 1.0])
    np.testing.assert_array_equal(src_grad, [4.0, 0.0, 1.0])


def test_mean_counts_x_itself_unless_include_self_is_false():
    x, src, i = tg.tensor([1.0, 10.0]), tg.tensor([2.0, 3.0, 4.0]), tg.tensor([0, 0, 0])
    np.testing.assert_allclose(x.scatter_reduce(0, i, src, "mean").numpy(), [2.5, 10.0])
    np.testing.assert_allclose(x.scatter_reduce(0, i, src, "mean", include_self=False).numpy(), [3.0, 10.0])


def test_zero_dimensional_tensors_count_as_one_element():
    x = tg.tensor(5.0, requires_grad=True)
    picked = x.gather(0, tg.tensor([0, 0]))
    assert picked.shape == (2,)
    picked.sum().backward()
    assert x.grad.shape == () and x.grad.item() == 2.0
    assert tg.tensor([4.0, 5.0]).gather(0, tg.tensor(1)).shape == ()
    assert tg.tensor(1.0).scatter(0, tg.tensor([0]), 7.0).item() == 7.0


def test_the_callers_of_gather_keep_their_gradients():
    x = tg.tensor([[1.0, 5.0, 5.0], [4.0, 2.0, 0.0]], requires_grad=True)
    values, indices = x.max(1)
    values.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0], [1, 0, 0]])    # a tie: the first index only
    logits = tg.tensor([[1.0, 2.0, 0.5]], requires_grad=True)
    for target in (tg.tensor([1]), tg.tensor([1], dtype=tg.int32)):
        loss = tg.nn.functional.nll_loss(logits.log_softmax(1), target)
        expected = -(2.0 - np.log(np.exp([1.0, 2.0, 0.5]).sum()))
        np.testing.assert_allclose(loss.item(), expected, rtol=1e-6)


# ----------------------------------------------------------------------------- dtypes
@pytest.mark.parametrize("dtype", [tg.int64, tg.int32, tg.bool])
def test_gather_and_scatter_keep_integer_and_bool_dtypes(dtype):
    x_np = (np.arange(6).reshape(2, 3) % 2 if dtype == tg.bool else np.arange(6).reshape(2, 3)).astype(dtype)
    index = np.array([[2, 0], [1, 1]])
    out = tg.tensor(x_np).gather(1, tg.tensor(index))
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.numpy(), np_gather(x_np, 1, index))
    scattered = tg.tensor(x_np).scatter(1, tg.tensor([[0], [2]]), 1)
    assert scattered.dtype == dtype
    np.testing.assert_array_equal(scattered.numpy(), np_scatter_reduce(x_np, 1, np.array([[0], [2]]),
                                                                       np.ones((2, 1), dtype), "last"))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_of_integers(reduce, include_self):
    x, src, index = np.array([3, -7, 5]), np.array([4, -2, 9, 1]), np.array([1, 1, 0, 1])
    out = tg.tensor(x).scatter_reduce(0, tg.tensor(index), tg.tensor(src), reduce, include_self=include_self)
    assert out.dtype == tg.int64
    expected = np_scatter_reduce(x, 0, index, src, "sum" if reduce == "mean" else reduce, include_self)
    if reduce == "mean":                  # integer means round down, as in PyTorch
        counts = np.array([1, 3, 0]) + include_self
        expected = np.where(counts > 0, expected // np.maximum(counts, 1), x)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_scatter_add_of_integers_adds_repeats():
    out = tg.zeros(3, dtype=tg.int64).scatter_add(0, tg.tensor([0, 2, 2, 2]), tg.tensor([1, 1, 1, 1]))
    assert out.dtype == tg.int64
    np.testing.assert_array_equal(out.numpy(), [1, 0, 3])


@given(st.data())
def test_nonzero(data):
    shape = data.draw(shapes(min_dims=0, max_dims=3))
    a = data.draw(values(shape)) * np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).integers(0, 2, shape)
    t = tg.tensor(a)
    found = tg.nonzero(t)
    assert found.dtype == tg.int64 and found.shape == (np.count_nonzero(a), a.ndim)
    np.testing.assert_array_equal(found.numpy(), np.argwhere(a))
    as_tuple = t.nonzero(as_tuple=True)
    expected = np.nonzero(a.reshape(-1) if a.ndim == 0 else a)      # a 0-d tensor counts as shape (1,)
    assert len(as_tuple) == len(expected)
    for got, want in zip(as_tuple, expected):
        assert got.dtype == tg.int64
        np.testing.assert_array_equal(got.numpy(), want)


def test_nonzero_of_bool_and_int_tensors():
    np.testing.assert_array_equal(tg.tensor([[True, False], [False, True]]).nonzero().numpy(), [[0, 0], [1, 1]])
    np.testing.assert_array_equal(tg.tensor([0, 3, 0, -1], dtype=tg.int32).nonzero().numpy(), [[1], [3]])
    assert tg.zeros(2, 3).nonzero().shape == (0, 2)


def test_masked_select_of_integers():
    out = tg.masked_select(tg.tensor([[1, 2], [3, 4]]), tg.tensor([True, False]))
    assert out.dtype == tg.int64
    np.testing.assert_array_equal(out.numpy(), [1, 3])


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("dtype", [np.int32, np.int16, np.uint8])
def test_an_index_of_any_integer_dtype_works(dtype):
    x = tg.tensor([1.0, 2.0, 3.0])
    index = tg.tensor(np.array([2, 0], dtype))
    np.testing.assert_array_equal(x.gather(0, index).numpy(), [3.0, 1.0])
    np.testing.assert_array_equal(x.scatter_add(0, index, tg.ones(2)).numpy(), [2.0, 2.0, 4.0])
    np.testing.assert_array_equal(x.scatter_reduce(0, index, tg.tensor([5.0, 5.0]), "prod").numpy(), [5.0, 2.0, 15.0])


def test_index_must_be_an_integer_tensor():
    x = tg.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"gather\(\): Expected an integer dtype for index, got float32"):
        x.gather(0, tg.tensor([0.0]))
    with pytest.raises(RuntimeError, match=r"scatter_add\(\): Expected an integer dtype for index, got bool"):
        x.scatter_add(0, tg.tensor([True]), x)
    with pytest.raises(TypeError, match=r"index must be a Tensor"):
        x.gather(0, [0])


@pytest.mark.parametrize("bad", [3, -1])
def test_out_of_range_indices_raise(bad):
    # cpu raises at once; a GPU raises at the next read of its values (deferred_checks.py)
    x = tg.tensor([1.0, 2.0, 3.0])
    i = tg.tensor([0, bad])
    with pytest.raises(RuntimeError, match="out of bounds for dimension 0 with size 3"):
        x.gather(0, i).numpy()
    with pytest.raises(RuntimeError, match="out of bounds for dimension 0 with size 3"):
        x.scatter_add(0, i, tg.ones(2)).numpy()
    with pytest.raises(RuntimeError, match="out of bounds for dimension 0 with size 3"):
        x.scatter_reduce(0, i, tg.ones(2), "amax").numpy()


def test_shape_and_dtype_errors():
    x = tg.zeros(2, 3)
    with pytest.raises(RuntimeError, match=r"gather\(\): index must have as many dimensions"):
        x.gather(0, tg.tensor([0]))
    with pytest.raises(RuntimeError, match=r"larger than the tensor's \(2, 3\) along a dimension other than dim 0"):
        x.gather(0, tg.zeros(1, 4, dtype=tg.int64))
    with pytest.raises(RuntimeError, match=r"larger than src's \(1, 1\)"):
        x.scatter(0, tg.zeros(1, 2, dtype=tg.int64), tg.ones(1, 1))
    with pytest.raises(RuntimeError, match=r"scatter\(\): Expected self.dtype to be equal to src.dtype"):
        x.scatter(0, tg.zeros(1, 1, dtype=tg.int64), tg.ones(1, 1, dtype=tg.float64))
    with pytest.raises(IndexError, match=r"gather\(\): dim 2 is out of range"):
        x.gather(2, tg.zeros(1, 1, dtype=tg.int64))
    with pytest.raises(RuntimeError, match=r"reduce must be one of sum, prod, mean, amax, amin, got 'max'"):
        x.scatter_reduce(0, tg.zeros(1, 1, dtype=tg.int64), x, "max")
    with pytest.raises(TypeError, match=r"exactly one of src"):
        x.scatter(0, tg.zeros(1, 1, dtype=tg.int64))
    with pytest.raises(RuntimeError, match=r"masked_select\(\): expected a bool tensor for mask, got int64"):
        x.masked_select(tg.ones(3, dtype=tg.int64))
    with pytest.raises(RuntimeError, match=r"masked_select: shapes \(2, 3\) and \(2,\) cannot be broadcast"):
        x.masked_select(tg.tensor([True, False]))


# ----------------------------------------------------------------------------- nested index lists
X = np.arange(12.0).reshape(3, 4)


@pytest.mark.parametrize("index", [
    ((0,),),                        # a tuple inside the index tuple is an integer array: x[[0]]
    ([0, 1], [1, 2]),
    ((0, 1), (1, 2)),
    (((0, 1), (1, 2)),),            # a nested tuple: one (2, 2) index array
    ([[0, 1], [1, 2]], slice(None)),
    (slice(None), (1, 3)),
    [[0]] * 32,                     # 32 entries or more: one index array, in PyTorch as in NumPy
], ids=repr)
def test_nested_indices_where_numpy_and_pytorch_agree(index):
    x = tg.tensor(X, requires_grad=True)
    out = x[index]
    np.testing.assert_array_equal(out.numpy(), X[index])
    out.sum().backward()
    expected = np.zeros_like(X)
    np.add.at(expected, index, 1.0)
    np.testing.assert_array_equal(x.grad.numpy(), expected)


@pytest.mark.parametrize("index, expected", [
    # A short list holding a list (or a slice, None, ...) is read as a tuple by PyTorch; NumPy reads it as
    # one index array (x[[[0, 1]]] would be shape (1, 2, 4) there). PyTorch's results, written out:
    ([[0, 1]], [[0, 1, 2, 3], [4, 5, 6, 7]]),                  # x[[0, 1]]
    ([[0, 1], [1, 2]], [1, 6]),                                # x[[0, 1], [1, 2]]
    ([0, [1, 2]], [1, 2]),                                     # x[0, [1, 2]]
    ([slice(None), 1], [1, 5, 9]),                             # x[:, 1]
    ([None, 2], [[8, 9, 10, 11]]),                             # x[None, 2]
], ids=repr)
def test_a_short_list_of_sequences_is_read_as_a_tuple(index, expected):
    out = tg.tensor(X)[index]
    np.testing.assert_array_equal(out.numpy(), np.array(expected, dtype=np.float64))
