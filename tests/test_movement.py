"""Movement ops, indexing and matmul against NumPy, with PyTorch's semantics.

Each property test draws a shape (0-d and size-1 included) and the op's arguments,
and check_op checks the forward against NumPy, first and second derivatives against
central differences, and that nothing is mutated or aliased.  Indexing with repeated
integer indices must accumulate its gradient: that is checked against np.add.at.
"""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinygrad_gpu as tg
from checks import check_op, noncontiguous, shapes, values


def t64(data, requires_grad=True):
    return tg.tensor(np.asarray(data, dtype=np.float64), dtype=tg.float64, requires_grad=requires_grad)


def dim_of(draw, ndim):
    """A valid dim for `ndim` dimensions, negative half of the time."""
    return draw(st.integers(-ndim, ndim - 1))


def array_of(draw, shape):
    return draw(noncontiguous(values(shape)))


def grad_of(fn, a, upstream):
    """d/da of sum(upstream * fn(a)), by backward."""
    x = t64(a)
    fn(x).backward(tg.tensor(upstream, dtype=tg.float64))
    return x.grad.numpy()


# ----------------------------------------------------------------------------- reshape family
@given(st.data())
def test_reshape_and_view_with_minus_one(data):
    shape = data.draw(shapes())
    a = array_of(data.draw, shape)
    target = list(data.draw(st.permutations(shape)))                  # same number of elements
    if data.draw(st.booleans()):
        target.insert(data.draw(st.integers(0, len(target))), 1)
    if target and data.draw(st.booleans()):
        target[data.draw(st.integers(0, len(target) - 1))] = -1
    method = data.draw(st.sampled_from(["reshape", "view"]))
    as_tuple = data.draw(st.booleans())
    as_tuple = as_tuple or not target  # x.reshape() is a TypeError; x.reshape(()) is the 0-d form
    fn = (lambda x: getattr(x, method)(tuple(target))) if as_tuple else (lambda x: getattr(x, method)(*target))
    check_op(fn, lambda a: a.reshape(target), a, second_order=True)


@given(st.data())
def test_flatten(data):
    shape = data.draw(shapes(min_dims=1))
    a = array_of(data.draw, shape)
    start = dim_of(data.draw, a.ndim)
    end = data.draw(st.integers(start % a.ndim, a.ndim - 1)) - data.draw(st.sampled_from([0, a.ndim]))
    s, e = start % a.ndim, end % a.ndim
    expected_shape = shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:]
    check_op(lambda x: x.flatten(start, end), lambda a: a.reshape(expected_shape), a, second_order=True)


def test_flatten_defaults_and_zero_d():
    assert t64(np.zeros((2, 3, 4))).flatten().shape == (24,)
    assert t64(np.zeros((2, 3, 4))).flatten(1).shape == (2, 12)
    assert t64(5.0).flatten().shape == (1,)


@given(st.data())
def test_squeeze(data):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=2))
    a = array_of(data.draw, shape)
    n = max(a.ndim, 1)
    dim = data.draw(st.one_of(st.none(), st.integers(-n, n - 1),
                              st.lists(st.integers(-n, n - 1), max_size=n, unique_by=lambda d: d % n).map(tuple)))
    dims = range(a.ndim) if dim is None else [d % n for d in ((dim,) if isinstance(dim, int) else dim)]
    kept = [size for i, size in enumerate(shape) if not (i in dims and size == 1)]   # non-1 dims stay, as in torch
    fn = (lambda x: x.squeeze()) if dim is None else (lambda x: x.squeeze(dim))
    check_op(fn, lambda a: a.reshape(kept), a, second_order=True)


@given(st.data())
def test_unsqueeze(data):
    a = array_of(data.draw, data.draw(shapes()))
    dim = data.draw(st.integers(-a.ndim - 1, a.ndim))
    check_op(lambda x: x.unsqueeze(dim), lambda a: np.expand_dims(a, dim), a, second_order=True)


# ----------------------------------------------------------------------------- permute family
@given(st.data())
def test_permute(data):
    a = array_of(data.draw, data.draw(shapes()))
    order = [d - a.ndim if data.draw(st.booleans()) else d for d in data.draw(st.permutations(range(a.ndim)))]
    check_op(lambda x: x.permute(tuple(order)), lambda a: a.transpose([d % a.ndim for d in order]), a,
             second_order=True)
    check_op(lambda x: x.permute(tuple(order)), lambda a: a.transpose([d % a.ndim for d in order]), a)


@given(st.data())
def test_transpose_T_and_movedim(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=1, max_dims=4, max_side=3)))
    d0, d1 = dim_of(data.draw, a.ndim), dim_of(data.draw, a.ndim)
    check_op(lambda x: x.transpose(d0, d1), lambda a: np.swapaxes(a, d0, d1), a, second_order=True)
    check_op(lambda x: x.T, lambda a: a.T, a, second_order=True)
    check_op(lambda x: x.movedim(d0, d1), lambda a: np.moveaxis(a, d0, d1), a, second_order=True)


def test_movedim_moves_one_dim_and_keeps_the_others_in_order():
    x = tg.zeros(2, 3, 4, 5)
    assert x.movedim(0, -1).shape == (3, 4, 5, 2) and x.movedim(-1, 1).shape == (2, 5, 3, 4)
    assert x.T.shape == (5, 4, 3, 2) and x.transpose(-1, 0).shape == (5, 3, 4, 2)
    assert x.movedim((0, 1), (3, 0)).shape == (3, 4, 5, 2) and x.mT.shape == (2, 3, 5, 4)
    with pytest.raises(RuntimeError, match="same number of dims"):
        x.movedim((0, 1), 2)
    with pytest.raises(RuntimeError, match="repeated dim"):
        x.movedim((0, 0), (1, 2))
    with pytest.raises(RuntimeError, match="mT.*matrices"):
        tg.zeros(3).mT


@given(st.data())
def test_movedim_of_several_dims_mT_and_view_as(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=2, max_dims=4, max_side=3)))
    order = data.draw(st.permutations(range(a.ndim)))
    k = data.draw(st.integers(1, a.ndim))
    sources, targets = tuple(order[:k]), tuple(data.draw(st.permutations(range(a.ndim)))[:k])
    check_op(lambda x: x.movedim(sources, targets), lambda a: np.moveaxis(a, sources, targets), a, second_order=True)
    check_op(lambda x: x.mT, lambda a: np.swapaxes(a, -1, -2), a, second_order=True)
    check_op(lambda x: x.view_as(tg.zeros(a.size)), lambda a: a.reshape(-1), a)


@given(st.data())
def test_unbind_narrow_and_index_select(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=1, max_dims=3, max_side=4)))
    d = dim_of(data.draw, a.ndim)
    n = a.shape[d]
    for i in range(n):
        check_op(lambda x: x.unbind(d)[i], lambda a: np.take(a, i, axis=d), a)
    start = data.draw(st.integers(-n, n - 1))
    length = data.draw(st.integers(0, n - start % n))
    check_op(lambda x: x.narrow(d, start, length),
             lambda a: np.take(a, range(start % n, start % n + length), axis=d), a)
    index = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=5)), dtype=np.int64)
    check_op(lambda x: x.index_select(d, tg.tensor(index)), lambda a: np.take(a, index, axis=d), a)   # repeats add


def test_index_select_and_narrow_errors_are_pytorchs():
    x = tg.zeros(2, 3)
    with pytest.raises(IndexError, match="vector"):
        x.index_select(1, tg.tensor([[1]]))
    with pytest.raises(RuntimeError, match="int32 or int64"):
        x.index_select(1, tg.tensor([1.0]))
    assert x.index_select(1, tg.tensor(2)).shape == (2, 1)
    with pytest.raises(RuntimeError, match="exceeds dimension size"):
        x.narrow(1, 2, 2)
    with pytest.raises(IndexError, match="out of range"):
        tg.tensor(1.0).unbind(0)


# ----------------------------------------------------------------------------- expand
@given(st.data())
def test_expand(data):
    target = data.draw(shapes(max_dims=4, max_side=3))
    kept = data.draw(st.integers(0, len(target)))                   # trailing dims the input has
    shape = tuple(1 if data.draw(st.booleans()) else n for n in target[len(target) - kept:])
    a = array_of(data.draw, shape)
    new = len(target) - kept
    # -1 keeps the input's size: allowed where that size is already the target's
    args = [-1 if i >= new and shape[i - new] == n and data.draw(st.booleans()) else n for i, n in enumerate(target)]
    check_op(lambda x: x.expand(tuple(args)), lambda a: np.broadcast_to(a, target), a, second_order=True)
    check_op(lambda x: x.expand_as(tg.zeros(target)), lambda a: np.broadcast_to(a, target), a)


def test_expand_gradient_sums_over_the_copies():
    g = grad_of(lambda x: x.expand(2, 3, -1), np.array([[1.0], [2.0], [3.0]]), np.arange(6.0).reshape(2, 3, 1))
    np.testing.assert_array_equal(g, [[0.0 + 3.0], [1.0 + 4.0], [2.0 + 5.0]])


# ----------------------------------------------------------------------------- indexing
@st.composite
def basic_index(draw, shape):
    """A tuple of ints, slices (positive steps: PyTorch refuses the others), None and at most one Ellipsis."""
    forward_slices = lambda n: st.slices(n).map(lambda s: slice(s.start, s.stop, abs(s.step) if s.step else None))
    parts = [draw(st.one_of(st.integers(-n, n - 1), forward_slices(n))) for n in shape]
    keep = draw(st.integers(0, len(parts)))
    if draw(st.booleans()):
        skipped = draw(st.integers(0, len(parts) - keep))
        parts = parts[:keep] + [Ellipsis] + parts[keep + skipped:]
    else:
        parts = parts[:keep]
    for _ in range(draw(st.integers(0, 2))):
        parts.insert(draw(st.integers(0, len(parts))), None)
    return tuple(parts)


@given(st.data())
def test_getitem_basic(data):
    a = array_of(data.draw, data.draw(shapes(max_dims=3)))
    index = data.draw(basic_index(a.shape))
    check_op(lambda x: x[index], lambda a: a[index], a, second_order=True)


def test_getitem_examples():
    a = np.arange(24.0).reshape(2, 3, 4)
    for index in [1, -1, (0, -2), slice(None, None, 3), (..., 1), (None, 1, ..., None), (slice(1, None), None, 0),
                  (Ellipsis, slice(None, None, 2)), (0, slice(0, 3, 2), -1)]:
        np.testing.assert_array_equal(t64(a)[index].numpy(), a[index], err_msg=str(index))
    check_op(lambda x: x[:, ::2, None, 1:], lambda a: a[:, ::2, None, 1:], a, second_order=True)
    for backwards in [slice(None, None, -1), (0, slice(3, 0, -2))]:
        with pytest.raises(ValueError, match="step"):  # PyTorch has no negative steps; flip is the way
            t64(a)[backwards]


@st.composite
def integer_index(draw, size, max_dims=2):
    """Integer positions in [-size, size), repeats likely, as a list, an int64 array or a Tensor."""
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=max_dims, min_side=1, max_side=5))
    positions = draw(hnp.arrays(np.int64, shape, elements=st.integers(-size, size - 1)))
    # A nested list is no index array in PyTorch: x[[[0, 1], [1, 0]]] reads as x[[0, 1], [1, 0]] (test_gather.py)
    kind = draw(st.sampled_from(["list", "array", "tensor"] if positions.ndim == 1 else ["array", "tensor"]))
    wrapped = positions.tolist() if kind == "list" else tg.tensor(positions) if kind == "tensor" else positions
    return wrapped, positions


@given(st.data())
def test_getitem_integer_arrays_accumulate_repeated_indices(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=1)))
    index, positions = data.draw(integer_index(a.shape[0]))
    check_op(lambda x: x[index], lambda a: a[positions], a, second_order=True)
    upstream = np.random.default_rng(0).standard_normal(a[positions].shape)
    expected = np.zeros(a.shape)
    np.add.at(expected, positions, upstream)
    np.testing.assert_allclose(grad_of(lambda x: x[index], a, upstream), expected, rtol=1e-12)


@given(st.data())
def test_getitem_integer_array_after_a_slice_and_in_two_dims(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=2)))
    index, positions = data.draw(integer_index(a.shape[1], max_dims=1))
    rows = data.draw(hnp.arrays(np.int64, positions.shape, elements=st.integers(0, a.shape[0] - 1)))
    for fn_index, np_index in [((slice(None), index), (slice(None), positions)),
                               ((rows.tolist(), index), (rows, positions)),
                               ((Ellipsis, index, slice(None)) if a.ndim > 2 else (Ellipsis, index),
                                (Ellipsis, positions, slice(None)) if a.ndim > 2 else (Ellipsis, positions))]:
        check_op(lambda x: x[fn_index], lambda a: a[np_index], a, second_order=True)
        upstream = np.random.default_rng(1).standard_normal(a[np_index].shape)
        expected = np.zeros(a.shape)
        np.add.at(expected, np_index, upstream)
        np.testing.assert_allclose(grad_of(lambda x: x[fn_index], a, upstream), expected, rtol=1e-12)


def test_empty_index_lists_select_nothing():
    x = t64(np.arange(6.0).reshape(2, 3))
    assert x[[]].shape == (0, 3) and x[:, []].shape == (2, 0) and x[np.array([], dtype=np.int64)].shape == (0, 3)
    x[[]].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 3)))


def test_repeated_index_gradient_example():
    x = t64([10.0, 20.0, 30.0])
    x[[0, 2, 0, 0]].backward(tg.tensor([1.0, 2.0, 3.0, 4.0], dtype=tg.float64))
    np.testing.assert_array_equal(x.grad.numpy(), [8.0, 0.0, 2.0])
    y = t64(np.ones((2, 2)))
    y[tg.tensor([[1, 1], [1, -1]])].sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [[0.0, 0.0], [4.0, 4.0]])   # row 1 picked 4 times


@given(st.data())
def test_getitem_boolean_masks(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=1)))
    whole = data.draw(st.booleans())
    mask = data.draw(hnp.arrays(np.bool_, a.shape if whole else a.shape[:1]))
    index = tg.tensor(mask) if data.draw(st.booleans()) else mask
    check_op(lambda x: x[index], lambda a: a[mask], a, second_order=True)
    upstream = np.random.default_rng(2).standard_normal(a[mask].shape)
    expected = np.zeros(a.shape)
    expected[mask] = upstream
    np.testing.assert_array_equal(grad_of(lambda x: x[index], a, upstream), expected)


def test_boolean_mask_from_a_comparison():
    x = t64([[1.0, -2.0], [-3.0, 4.0]])
    y = x[x > 0]
    np.testing.assert_array_equal(y.numpy(), [1.0, 4.0])
    (y * tg.tensor([2.0, 3.0], dtype=tg.float64)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2.0, 0.0], [0.0, 3.0]])


# ----------------------------------------------------------------------------- cat, stack, split, chunk
@given(st.data())
def test_cat(data):
    shape = data.draw(shapes(min_dims=1))
    dim = dim_of(data.draw, len(shape))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    arrays = []
    for size in sizes:
        piece = list(shape)
        piece[dim] = size
        arrays.append(array_of(data.draw, tuple(piece)))
    check_op(lambda *xs: tg.cat(list(xs), dim), lambda *arrs: np.concatenate(arrs, axis=dim), *arrays,
             second_order=True)


@given(st.data())
def test_stack(data):
    shape = data.draw(shapes())
    arrays = [array_of(data.draw, shape) for _ in range(data.draw(st.integers(1, 3)))]
    dim = data.draw(st.integers(-len(shape) - 1, len(shape)))
    check_op(lambda *xs: tg.stack(xs, dim), lambda *arrs: np.stack(arrs, axis=dim), *arrays, second_order=True)


def weighted_concat(pieces):
    """One output that depends on every piece with its own weight, so that each piece's backward is checked."""
    return tg.cat([p.reshape(-1) * (i + 1) for i, p in enumerate(pieces)])


def np_weighted_concat(pieces):
    return np.concatenate([p.reshape(-1) * (i + 1) for i, p in enumerate(pieces)])


@given(st.data())
def test_split(data):
    shape = data.draw(shapes(min_dims=1))
    a = array_of(data.draw, shape)
    dim = dim_of(data.draw, a.ndim)
    n = shape[dim]
    if data.draw(st.booleans()):
        arg = data.draw(st.integers(1, n + 1))
        cuts = list(range(arg, n, arg))
    else:
        cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3)))
        arg = [hi - lo for lo, hi in zip([0] + cuts, cuts + [n])]
    expected = np.split(a, cuts, axis=dim)
    pieces = t64(a).split(arg, dim)
    assert [p.shape for p in pieces] == [e.shape for e in expected]
    check_op(lambda x: weighted_concat(x.split(arg, dim)),
             lambda a: np_weighted_concat(np.split(a, cuts, axis=dim)), a, second_order=True)


@pytest.mark.parametrize("n, chunks, sizes", [(7, 3, [3, 3, 1]), (6, 4, [2, 2, 2]), (5, 5, [1] * 5), (2, 5, [1, 1]),
                                              (6, 3, [2, 2, 2]), (1, 1, [1])])
def test_chunk_sizes_follow_torch(n, chunks, sizes):
    a = np.arange(float(2 * n)).reshape(n, 2)
    pieces = t64(a).chunk(chunks)
    assert [p.shape[0] for p in pieces] == sizes
    assert [p.shape for p in t64(a.T).chunk(chunks, dim=-1)] == [(2, s) for s in sizes]
    np.testing.assert_array_equal(np.concatenate([p.numpy() for p in pieces]), a)
    check_op(lambda x: weighted_concat(x.chunk(chunks)),
             lambda a: np_weighted_concat(np.split(a, np.cumsum(sizes)[:-1])), a, second_order=True)


@given(st.data())
def test_chunk(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=1)))
    dim = dim_of(data.draw, a.ndim)
    chunks = data.draw(st.integers(1, 5))
    pieces = tg.chunk(t64(a), chunks, dim)
    size = -(-a.shape[dim] // chunks)
    assert len(pieces) <= chunks and all(p.shape[dim] == size for p in pieces[:-1])
    assert 1 <= pieces[-1].shape[dim] <= size
    np.testing.assert_array_equal(np.concatenate([p.numpy() for p in pieces], axis=dim), a)
    check_op(lambda x: weighted_concat(x.chunk(chunks, dim)), None, a, second_order=True)


# ----------------------------------------------------------------------------- tril, triu
@given(st.data(), st.sampled_from(["tril", "triu"]))
def test_tril_triu(data, kind):
    a = array_of(data.draw, data.draw(shapes(min_dims=2, max_dims=3)))
    diagonal = data.draw(st.integers(-4, 4))
    check_op(lambda x: getattr(x, kind)(diagonal), lambda a: getattr(np, kind)(a, diagonal), a, second_order=True)
    check_op(lambda x: getattr(tg, kind)(x, diagonal=diagonal), lambda a: getattr(np, kind)(a, diagonal), a)


# ----------------------------------------------------------------------------- matmul
MATMUL_SHAPES = [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((2, 1, 3, 4), (5, 4, 2)),
                 ((3, 4), (2, 4, 5)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((2, 3, 4), (4, 2)), ((1, 1), (1, 1))]


@pytest.mark.parametrize("shape_a, shape_b", MATMUL_SHAPES)
def test_matmul_shapes(shape_a, shape_b):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
    check_op(lambda x, y: x @ y, np.matmul, a, b, second_order=True)
    check_op(lambda x, y: tg.matmul(x, y), np.matmul, a, b)


@given(st.data())
def test_matmul_broadcast_batches(data):
    (batch_a, batch_b), _ = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    m, k, n = (data.draw(st.integers(1, 3)) for _ in range(3))
    a = array_of(data.draw, batch_a + (m, k))
    b = array_of(data.draw, batch_b + (k, n))
    vector_a, vector_b = data.draw(st.booleans()), data.draw(st.booleans())
    a = a[(0,) * len(batch_a) + (0,)] if vector_a else a        # sometimes a 1-D operand
    b = b[(0,) * len(batch_b) + (slice(None), 0)] if vector_b else b
    check_op(lambda x, y: x @ y, np.matmul, a, b, second_order=True)


def test_matmul_mixed_with_a_constant_operand():
    a = np.arange(6.0).reshape(2, 3)
    w = tg.tensor(np.ones((3, 2)), dtype=tg.float64)         # on the default device, as check_op
    check_op(lambda x: x @ w, lambda a: a @ np.ones((3, 2)), a, second_order=True)
    check_op(lambda x: w.T @ x.T, lambda a: np.ones((2, 3)) @ a.T, a, second_order=True)


# ----------------------------------------------------------------------------- clear errors
def test_reshape_mismatch_names_the_op_and_both_shapes():
    with pytest.raises(RuntimeError, match=r"reshape.*\(2, 3\).*\(4, 2\)"):
        tg.ones(2, 3).reshape(4, 2)
    with pytest.raises(RuntimeError, match=r"reshape.*\(2, 3\).*\(4, -1\)"):
        tg.ones(2, 3).view(4, -1)
    with pytest.raises(RuntimeError, match=r"reshape.*-1"):
        tg.ones(2, 3).reshape(-1, -1)


def test_matmul_mismatch_names_both_shapes():
    with pytest.raises(RuntimeError, match=r"matmul.*\(2, 3\).*\(2, 3\)"):
        tg.ones(2, 3) @ tg.ones(2, 3)
    with pytest.raises(RuntimeError, match=r"matmul.*\(3,\).*\(4,\)"):
        tg.ones(3) @ tg.ones(4)
    with pytest.raises(RuntimeError, match=r"matmul.*\(2, 3, 4\).*\(3, 4, 5\)"):
        tg.ones(2, 3, 4) @ tg.ones(3, 4, 5)
    with pytest.raises(RuntimeError, match=r"matmul.*\(\).*\(3,\)"):
        tg.ones(()) @ tg.ones(3)


def test_expand_errors():
    with pytest.raises(RuntimeError, match=r"expand.*\(2, 3\).*\(4, 3\)"):
        tg.ones(2, 3).expand(4, 3)
    with pytest.raises(RuntimeError, match=r"expand.*-1.*leading"):
        tg.ones(2, 3).expand(-1, 2, 3)
    with pytest.raises(RuntimeError, match=r"expand.*fewer dimensions"):
        tg.ones(2, 3).expand(3)


def test_cat_and_stack_with_mismatched_shapes():
    with pytest.raises(RuntimeError, match=r"cat.*\(2, 4\).*\(2, 3\)"):
        tg.cat([tg.ones(2, 3), tg.ones(2, 4)], dim=0)
    with pytest.raises(RuntimeError, match=r"cat.*\(3,\).*\(2, 3\)"):
        tg.cat([tg.ones(2, 3), tg.ones(3)])
    with pytest.raises(RuntimeError, match=r"stack.*\(3, 2\).*\(2, 3\)"):
        tg.stack([tg.ones(2, 3), tg.ones(3, 2)])
    with pytest.raises(RuntimeError, match="non-empty"):
        tg.cat([])


@pytest.mark.parametrize("call", [
    lambda x: x.transpose(0, 2), lambda x: x.unsqueeze(3), lambda x: x.unsqueeze(-4), lambda x: x.flatten(0, 2),
    lambda x: x.movedim(2, 0), lambda x: x.squeeze(2), lambda x: tg.cat([x, x], 2), lambda x: tg.stack([x, x], -4),
    lambda x: x.split(1, dim=-3), lambda x: x.chunk(2, dim=2),
])
def test_dim_out_of_range_is_a_clear_error(call):
    with pytest.raises(IndexError, match=r"out of range.*\d dimension"):
        call(tg.ones(2, 3))


@pytest.mark.parametrize("dims", [(0, 0), (0,), (0, 1, 2), (0, 3), (1, -3), (2, -2)])
def test_permute_not_a_permutation(dims):
    with pytest.raises(RuntimeError, match=r"permute.*not a permutation.*\(2, 3\)"):     # PyTorch's kind
        tg.ones(2, 3).permute(*dims)


@pytest.mark.parametrize("index", [2, -3, (0, 3), [0, 2], np.array([1, -3]), tg.tensor([0, 5])])
def test_index_out_of_range(index):
    # On a GPU an index array is checked there and the error comes with the next read (deferred_checks.py).
    with pytest.raises(IndexError, match=r"getitem.*out of (bounds|range).*\(2, 3\)"):
        tg.ones(2, 3)[index].numpy()


def test_other_movement_errors():
    with pytest.raises(IndexError, match="getitem.*float"):
        tg.ones(3)[np.array([0.5])]
    with pytest.raises(RuntimeError, match=r"tril.*2 dimensions.*\(3,\)"):
        tg.ones(3).tril()
    with pytest.raises(RuntimeError, match=r"split.*\[1, 1\].*3"):
        tg.ones(3).split([1, 1])
    with pytest.raises(RuntimeError, match="chunk.*positive"):
        tg.ones(3).chunk(0)


# ----------------------------------------------------------------------------- every device
def test_movement_on_every_device(device):
    a = np.arange(12.0).reshape(3, 4) / 7
    b = np.linspace(-1, 1, 8).reshape(4, 2)
    index = np.array([2, 0, 2])
    for fn, reference in [(lambda x: x.reshape(2, -1).T, lambda a: a.reshape(2, -1).T),
                          (lambda x: x[index, 1:], lambda a: a[index, 1:]),
                          (lambda x: x[x.detach() > 0.5], lambda a: a[a > 0.5]),
                          (lambda x: x[None, ::2].expand(2, -1, -1),
                           lambda a: np.broadcast_to(a[None, ::2], (2, 2, 4))),
                          (lambda x: tg.cat(x.chunk(2, 1)[::-1], 0), lambda a: np.concatenate([a[:, 2:], a[:, :2]])),
                          (lambda x: x.triu(1), lambda a: np.triu(a, 1))]:
        check_op(fn, reference, a, second_order=True, device=device)
    check_op(lambda x, y: x @ y, np.matmul, a, b, second_order=True, device=device)


# ----------------------------------------------------------------------------- PyTorch's indexing rule
@pytest.mark.parametrize("key", [
    (1, slice(None), slice(3, 11, 2), "d", slice(0, 2)),   # the case: a slice between 1 and d
    (1, slice(None), "d"),
    (None, 1, "d", None, 2),
], ids=["1,:,3:11:2,d,0:2", "1,:,d", "None,1,d,None,2"])
def test_an_integer_beside_index_tensors_is_basic_indexing_as_in_pytorch(key):
    """PyTorch applies a plain integer first, as basic indexing: x[1, :, d] is x[1][:, d]. NumPy counts
    the integer as one more index array and, with a slice between them, moves the selected dimensions
    to the front: another shape, other values. Each case here is one where the two rules differ."""
    a = np.arange(2 * 3 * 12 * 5 * 4, dtype=np.float64).reshape(2, 3, 12, 5, 4)
    d = np.array([[0, 1], [1, 0]])
    numpy_key = tuple(d if part == "d" else part for part in key)
    first = tuple(slice(None) if part == "d" else part for part in key)          # the integers, as a view
    then = tuple(d if part == "d" else slice(None) for part in key if not isinstance(part, int))
    expected = a[first][then]
    assert a[numpy_key].shape != expected.shape or not np.array_equal(a[numpy_key], expected)
    tensor_key = tuple(tg.tensor(d) if part == "d" else part for part in key)
    check_op(lambda t: t[tensor_key], lambda x: x[first][then], a)
