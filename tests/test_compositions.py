"""The PyTorch functions built from our ops (ops/compositions.py) and PyTorch's other names for our ops: values
against NumPy, gradients by central differences (check_op), the edges PyTorch defines (nan, -0.0, empty
dims, out-of-range arguments). tests/test_torch_differential.py compares them with torch itself where it is
installed."""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_gpu as tg
from checks import check_op, shapes, spread, values

t64 = lambda a: tg.tensor(np.asarray(a, dtype=np.float64))      # noqa: E731


# ----------------------------------------------------------------------------- elementwise
@given(st.data())
def test_elementwise_compositions_and_their_gradients(data):
    a = data.draw(values(data.draw(shapes()), low=-2.0, high=2.0, away_from=[-2.0, -1.0, 0.0, 1.0, 2.0]))
    for fn, reference in [
            (lambda x: x.erfc(), lambda a: 1 - np.vectorize(math.erf)(a)),
            (lambda x: x.frac(), lambda a: a - np.trunc(a)),
            (lambda x: x.deg2rad(), np.deg2rad), (lambda x: x.rad2deg(), np.rad2deg),
            (lambda x: x.sinc(), np.sinc),
            (lambda x: tg.hypot(x, x * 0.5 + 1), lambda a: np.hypot(a, a * 0.5 + 1)),
            (lambda x: tg.logaddexp2(x, -x), lambda a: np.logaddexp2(a, -a)),
            (lambda x: tg.xlogy(x, x.abs() + 0.5), lambda a: a * np.log(np.abs(a) + 0.5)),
            (lambda x: tg.fmax(x, -x), lambda a: np.fmax(a, -a)), (lambda x: tg.fmin(x, -x), lambda a: np.fmin(a, -a))]:
        check_op(fn, reference, a)
    p = data.draw(values(data.draw(shapes()), low=0.05, high=0.95))
    check_op(lambda x: x.logit(), lambda p: np.log(p / (1 - p)), p)
    clamped = lambda p: np.clip(p, 0.2, 0.8)          # noqa: E731
    outside = data.draw(st.booleans())                # all clamped (gradient 0) or none (a kink at the bounds)
    check_op(lambda x: x.logit(eps=0.2), lambda p: np.log(clamped(p) / (1 - clamped(p))),
             np.asarray(np.clip(p, 0.05, 0.19) if outside else np.clip(p, 0.21, 0.79)))


def test_elementwise_edges_pytorch_defines():
    x = t64([0.0, -0.0, -2.0, math.nan, -math.nan, math.inf])
    assert x.signbit().tolist() == list(np.signbit(x.numpy()))          # -0.0 and a negative nan count
    assert tg.tensor([-1, 0, 3]).signbit().tolist() == [True, False, False]
    assert x.sinc()[0].item() == 1.0
    np.testing.assert_array_equal(t64([math.nan, math.inf, -math.inf, 1.5]).nan_to_num().numpy(),
                                  [0.0, np.finfo(np.float64).max, np.finfo(np.float64).min, 1.5])
    assert t64([math.nan, math.inf]).nan_to_num(nan=2.0, posinf=9.0).tolist() == [2.0, 9.0]
    assert tg.tensor([3, 4]).nan_to_num().tolist() == [3, 4]
    # xlogy: 0 where x is 0, even at y = 0 or inf; nan where y is nan; gradients 0 where x is 0
    x, y = t64([0.0, 0.0, 2.0, 1.0]).requires_grad_(), t64([0.0, math.inf, math.e, math.nan]).requires_grad_()
    out = tg.xlogy(x, y)
    np.testing.assert_array_equal(out.numpy(), [0.0, 0.0, 2.0, math.nan])
    out[:3].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[:3], [0.0, 0.0, 1.0])
    # sinc at 0: value 1, gradient 0 (not the nan of 0/0)
    z = t64([0.0, 0.5]).requires_grad_()
    z.sinc().sum().backward()
    assert z.grad[0].item() == 0.0 and np.isfinite(z.grad.numpy()).all()
    # fmax takes the number beside a nan, maximum the nan
    a, b = t64([math.nan, 1.0, math.nan]), t64([2.0, math.nan, math.nan])
    np.testing.assert_array_equal(tg.fmax(a, b).numpy(), [2.0, 1.0, math.nan])
    assert math.isnan(tg.maximum(a, b)[0].item())


def test_dtypes_of_the_compositions_follow_pytorch():
    i = tg.tensor([1, 0, -2])
    assert i.erfc().dtype == i.deg2rad().dtype == i.sinc().dtype == i.logit().dtype == tg.float32
    assert i.signbit().dtype == tg.bool and i.sgn().dtype == tg.int64
    assert tg.fmax(i, tg.tensor([0.5])).dtype == tg.float32 and tg.fmax(i, i).dtype == tg.int64
    assert tg.xlogy(i, i).dtype == tg.float32
    h = tg.tensor([1.0], dtype=tg.float16)
    assert h.frac().dtype == h.erfc().dtype == h.deg2rad().dtype == tg.float16
    for call in [lambda: i.frac(), lambda: tg.hypot(i, i), lambda: tg.logaddexp2(i, i)]:
        with pytest.raises(NotImplementedError, match="int64"):
            call()
    with pytest.raises(RuntimeError, match="broadcast"):           # the shapes are checked before the dtypes
        tg.hypot(i, tg.tensor([1, 2]))


def test_pytorchs_other_names_are_the_same_ops():
    x, y = t64([[1.0, -2.0, 3.0]]), t64([[0.5], [2.0]])
    for alias, name in [("subtract", "sub"), ("multiply", "mul"), ("divide", "div")]:
        np.testing.assert_array_equal(getattr(tg, alias)(x, y).numpy(), getattr(x, name)(y).numpy())
        np.testing.assert_array_equal(getattr(x, alias)(y).numpy(), getattr(x, name)(y).numpy())
    for alias, name in [("negative", "neg"), ("absolute", "abs"), ("sgn", "sign"), ("ravel", "flatten"),
                        ("positive", "clone")]:
        np.testing.assert_array_equal(getattr(x, alias)().numpy(), getattr(x, name)().numpy())
    assert x.swapaxes(0, 1).shape == x.swapdims(0, 1).shape == x.moveaxis(0, 1).shape == (3, 1)
    assert tg.concat([x, x]).shape == (2, 3) and tg.concatenate([x, x], 1).shape == (1, 6)
    assert tg.rsub(x, 2).tolist() == [[1.0, 4.0, -1.0]] and tg.rsub(x, y, alpha=2).shape == (2, 3)
    assert tg.logical_xor(tg.tensor([1, 0, 2]), tg.tensor([0, 0, 3])).tolist() == [True, False, False]
    with pytest.raises(TypeError, match="logical_xor"):
        tg.logical_xor(tg.tensor([1]), 1)
    with pytest.raises(RuntimeError, match="bool") as refused:
        tg.tensor([True]).negative()
    assert type(refused.value) is RuntimeError         # PyTorch's kind here, not NotImplementedError


# ----------------------------------------------------------------------------- reductions
@given(st.data())
def test_reductions_and_their_gradients(data):
    a = data.draw(spread(data.draw(shapes(min_dims=1))))
    a = a + np.where(a >= 0, 0.1, -0.1)               # away from |x|'s kink at 0 too
    dim = data.draw(st.integers(-a.ndim, a.ndim - 1))
    check_op(lambda x: x.nansum(dim), lambda a: np.nansum(a, dim), a)
    check_op(lambda x: x.nanmean(dim, keepdim=True), lambda a: np.nanmean(a, dim, keepdims=True), a)
    check_op(lambda x: tg.var_mean(x, dim, correction=0)[0] + tg.var_mean(x, dim)[1],
             lambda a: np.var(a, dim) + np.mean(a, dim), a)
    if a.shape[dim] > 1:
        check_op(lambda x: tg.std_mean(x, dim)[0], lambda a: np.std(a, dim, ddof=1), a)
    check_op(lambda x: x.aminmax(dim=dim).min - x.aminmax(dim=dim).max, lambda a: a.min(dim) - a.max(dim), a)
    check_op(lambda x: x.median(dim).values, lambda a: np.sort(a, dim).take((a.shape[dim] - 1) // 2, dim), a)
    check_op(lambda x: x.median(), lambda a: np.sort(a, None)[(a.size - 1) // 2], a)
    k = data.draw(st.integers(1, a.shape[dim]))
    check_op(lambda x: x.kthvalue(k, dim).values, lambda a: np.sort(a, dim).take(k - 1, dim), a)
    magnitudes = np.sort(np.abs(a), None)
    apart = magnitudes.size < 2 or min(magnitudes[1] - magnitudes[0], magnitudes[-1] - magnitudes[-2]) > 1e-3
    for p in [1, 2, 3] + ([math.inf, -math.inf] if apart else []):     # a tie in |x| has no derivative there
        reference = {math.inf: lambda a: np.abs(a).max(), -math.inf: lambda a: np.abs(a).min()}.get(
            p, lambda a: (np.abs(a) ** p).sum() ** (1 / p))
        check_op(lambda x: tg.linalg.vector_norm(x, p), reference, a)
    check_op(lambda x: x.norm(dim=dim), lambda a: np.sqrt((a * a).sum(dim)), a)


def test_reduction_edges():
    x = t64([[3.0, math.nan, 1.0], [2.0, 0.0, 5.0]])
    assert x.nansum().item() == 11.0 and x.nanmean(1).tolist() == [2.0, 7 / 3]
    assert math.isnan(t64([math.nan, math.nan]).nanmean().item())
    with pytest.raises(RuntimeError, match="nanmean"):
        tg.tensor([1, 2]).nanmean()
    median = x.median(1)
    assert math.isnan(median.values[0].item()) and median.indices.tolist() == [1, 0]      # a nan is the median
    assert tg.tensor([4, 1, 3, 2]).median().item() == 2                                     # the lower of two
    assert math.isnan(tg.zeros(0).median().item())
    assert tg.tensor([[4, 1, 3]]).kthvalue(2, 1, keepdim=True).indices.tolist() == [[2]]
    for k in [0, 4]:
        with pytest.raises(RuntimeError, match="out of range"):
            tg.tensor([1, 2, 3]).kthvalue(k)
    with pytest.raises(NotImplementedError, match="bool"):
        tg.tensor([True]).median()
    assert tg.count_nonzero(tg.tensor([[0, 1], [2, 0]]), dim=0).tolist() == [1, 1]
    assert tg.count_nonzero(tg.tensor([[0, 1], [2, 3]])).item() == 3
    mm = tg.tensor([[2, 7], [5, -1]]).aminmax()
    assert (mm.min.item(), mm.max.item()) == (-1, 7)
    with pytest.raises(RuntimeError, match="aminmax"):
        tg.zeros(0).aminmax()
    assert tg.linalg.vector_norm(t64([3.0, 0.0, -4.0]), 0).item() == 2.0
    with pytest.raises(RuntimeError, match="floating"):
        tg.tensor([1, 2]).norm()
    # the count's gradient is zero everywhere, as PyTorch's
    v = t64([3.0, 0.0]).requires_grad_()
    tg.linalg.vector_norm(v, 0).backward()
    assert v.grad.tolist() == [0.0, 0.0]
    assert tg.tensor([[1, 2], [3, 4]]).trace().item() == 5
    with pytest.raises(RuntimeError, match="matrix"):
        tg.ones(2, 2, 2).trace()


# ----------------------------------------------------------------------------- shapes
@given(st.data())
def test_shape_compositions_and_their_gradients(data):
    a = data.draw(values(data.draw(shapes(min_dims=2, max_dims=3))))
    check_op(lambda x: x.t() if x.ndim == 2 else x.mT, lambda a: np.swapaxes(a, -1, -2), a)
    check_op(lambda x: x.fliplr(), np.fliplr, a)
    check_op(lambda x: x.flipud(), np.flipud, a)
    check_op(lambda x: tg.tile(x, (2, 1)), lambda a: np.tile(a, (2, 1)), a)
    check_op(lambda x: tg.broadcast_to(x, (2,) + x.shape), lambda a: np.broadcast_to(a, (2,) + a.shape), a)
    offset = data.draw(st.integers(-2, 2))
    check_op(lambda x: x.diag_embed(offset), lambda a: np.stack([np.diag(r, offset) for r in a.reshape(
        -1, a.shape[-1])]).reshape(a.shape[:-1] + (a.shape[-1] + abs(offset),) * 2), a)
    n = data.draw(st.integers(1, 4))
    check_op(lambda x: tg.cat(x.tensor_split(n, -1), -1), lambda a: a, a)
    assert [p.shape[-1] for p in t64(a).tensor_split(n, -1)] == [len(p) for p in np.array_split(
        np.arange(a.shape[-1]), n)]
    check_op(lambda x: tg.hstack([x, x]), lambda a: np.hstack([a, a]), a)
    check_op(lambda x: tg.vstack([x[0], x[-1]]), lambda a: np.vstack([a[0], a[-1]]), a)
    index = data.draw(st.lists(st.integers(-a.size, a.size - 1), min_size=1, max_size=5))
    check_op(lambda x: tg.take(x, tg.tensor(index)), lambda a: np.take(a, index), a)
    positions = np.argsort(a, axis=-1)
    check_op(lambda x: tg.take_along_dim(x, tg.tensor(positions), -1),
             lambda a: np.take_along_axis(a, positions, -1), a)
    rows = np.array(data.draw(st.lists(st.integers(0, a.shape[0] - 1), min_size=1, max_size=4)))
    source = np.arange(len(rows) * math.prod(a.shape[1:]), dtype=np.float64).reshape((len(rows),) + a.shape[1:])

    def index_add_reference(a):
        out = a.copy()
        np.add.at(out, rows, 2 * source)
        return out
    check_op(lambda x: x.index_add(0, tg.tensor(rows), t64(source), alpha=2), index_add_reference, a)


def test_shape_edges():
    x = tg.arange(6).reshape(2, 3)
    assert tg.tensor(5).t().item() == 5 and tg.tensor([1, 2]).t().tolist() == [1, 2]
    with pytest.raises(RuntimeError, match="t\\(\\)"):
        tg.ones(1, 2, 3).t()
    assert tg.tile(tg.tensor(3), ()).item() == 3 and x.tile(2).shape == (2, 6)
    with pytest.raises(RuntimeError, match="fliplr"):
        tg.tensor([1, 2]).fliplr()
    a, b = tg.broadcast_tensors(tg.ones(2, 1), tg.zeros(3))
    assert a.shape == b.shape == (2, 3) and tg.broadcast_shapes((2, 1), (3,)) == (2, 3)
    with pytest.raises(RuntimeError, match="broadcast"):
        tg.broadcast_tensors(tg.ones(2), tg.ones(3))
    assert [t.tolist() for t in x.tensor_split([1, 5], dim=1)] == [[[0], [3]], [[1, 2], [4, 5]], [[], []]]
    with pytest.raises(RuntimeError, match="sections"):
        x.tensor_split(0)
    assert tg.argwhere(tg.tensor([[0, 2], [3, 0]])).tolist() == [[0, 1], [1, 0]]
    assert [t.tolist() for t in tg.where(tg.tensor([[0, 2], [3, 0]]) > 0)] == [[0, 1], [1, 0]]
    with pytest.raises(IndexError):
        tg.take_along_dim(tg.tensor(1.0), tg.tensor(0), 0)          # a 0-d tensor has no dim 0 here
    for shape, error in [((4,), IndexError), ((4, 2), RuntimeError)]:     # PyTorch's kinds, which differ
        for bad in ([4], [-1]):
            with pytest.raises(error, match="index_add") as raised:   # (on a GPU at the next read: deferred_checks)
                tg.zeros(shape).index_add(0, tg.tensor(bad), tg.ones((1,) + shape[1:])).numpy()
            assert raised.type is error
    assert tg.hstack([tg.tensor([1, 2]), tg.tensor(3)]).tolist() == [1, 2, 3]


# ----------------------------------------------------------------------------- products
@given(st.data())
def test_products_and_their_gradients(data):
    n, k, m = (data.draw(st.integers(1, 3)) for _ in range(3))
    a, b, c = (data.draw(values(shape)) for shape in [(2, n, k), (2, k, m), (n, m)])
    check_op(lambda x, y: tg.bmm(x, y), np.matmul, a, b)
    check_op(lambda x, y: x.mm(y), np.matmul, a[0], b[0])
    check_op(lambda x, y: x.mv(y), np.matmul, a[0], b[0, :, 0])
    check_op(lambda i, x, y: tg.addmm(i, x, y, beta=0.5, alpha=2), lambda i, x, y: 0.5 * i + 2 * x @ y, c, a[0], b[0])
    check_op(lambda x, y: tg.tensordot(x, y, dims=1), lambda x, y: np.tensordot(x, y, 1), a, b[0])
    check_op(lambda x, y: tg.tensordot(x, y, dims=([0, 2], [0, 1])), lambda x, y: np.tensordot(x, y, ([0, 2], [0, 1])),
             a, b)
    check_op(lambda x, y: tg.kron(x, y), np.kron, a[0], b[1])


def test_product_edges():
    with pytest.raises(RuntimeError, match="mm"):
        tg.ones(2, 2, 2).mm(tg.ones(2, 2))
    with pytest.raises(RuntimeError, match="batch"):
        tg.bmm(tg.ones(2, 1, 2), tg.ones(3, 2, 1))
    assert tg.addmm(t64([math.nan]), t64([[1.0]]), t64([[2.0]]), beta=0).item() == 2.0    # input unread at beta 0
    assert tg.tensordot(tg.ones(2, 0), tg.ones(0, 3), dims=1).tolist() == [[0.0] * 3] * 2
    with pytest.raises(RuntimeError, match="contracted"):
        tg.tensordot(tg.ones(2, 3), tg.ones(2, 3), dims=1)
    assert tg.kron(tg.tensor([1, 2]), tg.tensor([[1], [10]])).tolist() == [[1, 2], [10, 20]]


# ----------------------------------------------------------------------------- no gradient
def test_unique_searchsorted_and_triangle_indices():
    x = t64([[3.0, 1.0, math.nan], [1.0, math.nan, 3.0]])
    values_, inverse, counts = tg.unique(x, return_inverse=True, return_counts=True)
    assert values_.tolist()[:2] == [1.0, 3.0] and len(values_) == 4                  # each nan its own value
    assert inverse.shape == x.shape and counts.tolist() == [2, 2, 1, 1]
    boundaries = t64([1.0, 2.0, 2.0, 5.0])
    assert tg.searchsorted(boundaries, t64([0.0, 2.0, 6.0])).tolist() == [0, 1, 4]
    assert tg.searchsorted(boundaries, t64([0.0, 2.0, 6.0]), right=True).tolist() == [0, 3, 4]
    assert tg.searchsorted(t64([[1.0, 3.0], [0.0, 9.0]]), t64([[2.0], [10.0]])).tolist() == [[1], [2]]
    rows, cols = np.tril_indices(3, 0, 4)
    assert tg.tril_indices(3, 4).tolist() == [rows.tolist(), cols.tolist()]
    rows, cols = np.triu_indices(3, 1, 3)
    assert tg.triu_indices(3, 3, 1).tolist() == [rows.tolist(), cols.tolist()]


def test_dtype_functions():
    assert tg.result_type(tg.tensor([1]), 2.5) == tg.float32
    assert tg.result_type(tg.tensor([1.0], dtype=tg.float16), tg.tensor(1.0, dtype=tg.float64)) == tg.float16
    assert tg.promote_types(tg.float16, tg.bfloat16) == tg.float32 and tg.promote_types(tg.int32, tg.bool) == tg.int32
    assert tg.get_default_dtype() == tg.float32
    assert tg.is_tensor(tg.ones(1)) and not tg.is_tensor(np.ones(1))
    assert tg.is_floating_point(tg.ones(1)) and not tg.is_floating_point(tg.tensor([1]))
    assert tg.tensor([1, 2]).type_as(tg.ones(1, dtype=tg.float16)).dtype == tg.float16
    assert tg.equal(tg.tensor([1, 2]), tg.tensor([1, 2])) is True and not tg.equal(tg.ones(2), tg.ones(3))


def test_module_forms_want_a_tensor_first():
    for name in ["erfc", "median", "trace", "ravel", "mm", "nansum"]:
        with pytest.raises(TypeError, match=name):
            getattr(tg, name)([1.0, 2.0])
