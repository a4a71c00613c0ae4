"""flip, roll, repeat, repeat_interleave, unflatten, unfold, diag, diagonal, linspace and meshgrid.

Each property test draws a shape and the op's arguments; check_op compares the forward with
the NumPy function that defines it (np.flip, np.roll, np.tile, np.repeat, sliding_window_view,
np.diag, np.diagonal, np.meshgrid) and checks first and second derivatives against central
differences. Plain tests pin the gradients that add up (repeat, overlapping windows), integer
dtypes and the errors.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

import tinygrad_gpu as tg
from checks import check_op, noncontiguous, shapes, values


def array_of(draw, shape):
    return draw(noncontiguous(values(shape)))


def dim_of(draw, ndim):
    """A valid dim for `ndim` dimensions, negative half of the time."""
    return draw(st.integers(-ndim, ndim - 1))


def ints(shape):
    return tg.tensor(np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape))


# ----------------------------------------------------------------------------- flip and roll
@given(st.data())
def test_flip(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=1)))
    dims = data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), min_size=1, max_size=a.ndim,
                              unique_by=lambda d: d % a.ndim))
    form = data.draw(st.sampled_from(["method", "method tuple", "function"]))
    fn = {"method": lambda x: x.flip(*dims), "method tuple": lambda x: x.flip(tuple(dims)),
          "function": lambda x: tg.flip(x, dims)}[form]
    check_op(fn, lambda a: np.flip(a, axis=tuple(dims)), a, second_order=True)


@given(st.data())
def test_roll_along_dims(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=1)))
    dims = data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), min_size=1, max_size=3))   # repeats add up
    shifts = [data.draw(st.integers(-6, 6)) for _ in dims]
    fn = (lambda x: x.roll(shifts, dims)) if data.draw(st.booleans()) else (lambda x: tg.roll(x, shifts, dims=dims))
    check_op(fn, lambda a: np.roll(a, shifts, axis=dims), a, second_order=True)


@given(st.data())
def test_roll_without_dims_rolls_the_flattened_tensor(data):
    a = array_of(data.draw, data.draw(shapes()))
    shift = data.draw(st.integers(-30, 30))
    check_op(lambda x: x.roll(shift), lambda a: np.roll(a, shift), a, second_order=True)


def test_roll_by_an_int_along_one_dim():
    x = tg.tensor([[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(x.roll(1, 1).numpy(), [[3, 1, 2], [6, 4, 5]])
    np.testing.assert_array_equal(x.roll(-1, 0).numpy(), [[4, 5, 6], [1, 2, 3]])


# ----------------------------------------------------------------------------- repeat
@given(st.data())
def test_repeat_is_numpys_tile(data):
    a = array_of(data.draw, data.draw(shapes()))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=a.ndim, max_size=a.ndim + 2))
    fn = (lambda x: x.repeat(*sizes)) if sizes and data.draw(st.booleans()) else (lambda x: x.repeat(tuple(sizes)))
    check_op(fn, lambda a: np.tile(a, sizes) if sizes else a, a, second_order=True)


def test_repeat_gradient_adds_the_copies():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    x.repeat(2, 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 6.0])


@given(st.data())
def test_repeat_interleave_int(data):
    a = array_of(data.draw, data.draw(shapes()))
    repeats = data.draw(st.integers(0, 3))
    if a.ndim and data.draw(st.booleans()):
        dim = dim_of(data.draw, a.ndim)
        check_op(lambda x: x.repeat_interleave(repeats, dim), lambda a: np.repeat(a, repeats, axis=dim), a,
                 second_order=True)
    else:
        check_op(lambda x: tg.repeat_interleave(x, repeats), lambda a: np.repeat(a, repeats), a, second_order=True)


@given(st.data())
def test_repeat_interleave_tensor_of_counts(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=1)))
    dim = dim_of(data.draw, a.ndim)
    counts = data.draw(st.lists(st.integers(0, 3), min_size=a.shape[dim], max_size=a.shape[dim]))
    check_op(lambda x: x.repeat_interleave(tg.tensor(counts), dim=dim), lambda a: np.repeat(a, counts, axis=dim),
             a, second_order=True)


def test_repeat_interleave_single_count_tensor_and_counts_alone():
    x = tg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = x.repeat_interleave(tg.tensor([2]), dim=1)
    np.testing.assert_array_equal(y.numpy(), [[1, 1, 2, 2], [3, 3, 4, 4]])
    y.backward(tg.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]))
    np.testing.assert_array_equal(x.grad.numpy(), [[3, 7], [11, 15]])       # the copies' gradients add up
    positions = tg.repeat_interleave(tg.tensor([2, 0, 1]))
    np.testing.assert_array_equal(positions.numpy(), [0, 0, 2])
    assert positions.dtype == tg.int64


# ----------------------------------------------------------------------------- unflatten
@given(st.data())
def test_unflatten(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=1)))
    dim = dim_of(data.draw, a.ndim)
    n = a.shape[dim]
    first = data.draw(st.sampled_from([k for k in range(1, n + 1) if n % k == 0]))
    sizes = [first, n // first] + [1] * data.draw(st.integers(0, 1))
    if data.draw(st.booleans()):
        sizes[data.draw(st.integers(0, len(sizes) - 1))] = -1
    d = dim % a.ndim
    target = a.shape[:d] + (first, n // first) + (1,) * (len(sizes) - 2) + a.shape[d + 1:]
    fn = (lambda x: x.unflatten(dim, sizes)) if data.draw(st.booleans()) else (lambda x: tg.unflatten(x, dim, sizes))
    check_op(fn, lambda a: a.reshape(target), a, second_order=True)


# ----------------------------------------------------------------------------- unfold
@given(st.data())
def test_unfold_is_a_sliding_window_view(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=1)))
    dim = dim_of(data.draw, a.ndim)
    size = data.draw(st.integers(0, a.shape[dim]))
    step = data.draw(st.integers(1, 3))

    def reference(a):
        windows = sliding_window_view(a, size, axis=dim)          # every start, the window last
        return windows[(slice(None),) * (dim % a.ndim) + (slice(None, None, step),)]

    check_op(lambda x: x.unfold(dim, size, step), reference, a, second_order=True)


def test_unfold_gradient_adds_overlapping_windows():
    x = tg.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]], requires_grad=True)
    windows = x.unfold(1, 3, 1)
    np.testing.assert_array_equal(windows.numpy(), [[[1, 2, 3], [2, 3, 4], [3, 4, 5]]])
    windows.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1, 2, 3, 2, 1]])      # how many windows hold each element
    x.grad = None
    x.unfold(1, 2, 2).sum().backward()                                      # the last element is in no window
    np.testing.assert_array_equal(x.grad.numpy(), [[1, 1, 1, 1, 0]])


# ----------------------------------------------------------------------------- diag and diagonal
@given(st.data())
def test_diag_of_a_vector_and_of_a_matrix(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=1, max_dims=2)))
    k = data.draw(st.integers(-4, 4))
    fn = (lambda x: x.diag(k)) if data.draw(st.booleans()) else (lambda x: tg.diag(x, k))
    check_op(fn, lambda a: np.diag(a, k), a, second_order=True)


@given(st.data())
def test_diagonal(data):
    a = array_of(data.draw, data.draw(shapes(min_dims=2, max_dims=4)))
    dim1 = dim_of(data.draw, a.ndim)
    dim2 = data.draw(st.integers(-a.ndim, a.ndim - 1).filter(lambda d: d % a.ndim != dim1 % a.ndim))
    offset = data.draw(st.integers(-4, 4))
    fn = ((lambda x: x.diagonal(offset, dim1, dim2)) if data.draw(st.booleans())
          else (lambda x: tg.diagonal(x, offset=offset, dim1=dim1, dim2=dim2)))
    check_op(fn, lambda a: np.diagonal(a, offset, dim1, dim2), a, second_order=True)


def test_diagonal_defaults_and_its_gradient_is_zero_off_the_diagonal():
    x = tg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    np.testing.assert_array_equal(x.diagonal().numpy(), [0, 4])
    x.diagonal(1).backward(tg.tensor([5.0, 7.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 5, 0], [0, 0, 7]])


# ----------------------------------------------------------------------------- integer dtypes
@pytest.mark.parametrize("op, reference", [
    (lambda x: x.flip(0, 1), lambda a: np.flip(a, (0, 1))),
    (lambda x: x.roll(1, 1), lambda a: np.roll(a, 1, axis=1)),
    (lambda x: x.roll(-2), lambda a: np.roll(a, -2)),
    (lambda x: x.repeat(2, 1, 2), lambda a: np.tile(a, (2, 1, 2))),
    (lambda x: x.repeat_interleave(2, 0), lambda a: np.repeat(a, 2, axis=0)),
    (lambda x: x.repeat_interleave(tg.tensor([1, 0, 2]), 1), lambda a: np.repeat(a, [1, 0, 2], axis=1)),
    (lambda x: x.unflatten(1, (3, 1)), lambda a: a.reshape(2, 3, 1)),
    (lambda x: x.unfold(1, 2, 1), lambda a: sliding_window_view(a, 2, axis=1)),
    (lambda x: x.diag(1), lambda a: np.diag(a, 1)),
    (lambda x: x[0].diag(-1), lambda a: np.diag(a[0], -1)),
    (lambda x: x.diagonal(0, 1, 0), lambda a: np.diagonal(a, 0, 1, 0)),
])
def test_integer_tensors_keep_their_dtype(op, reference):
    x = ints((2, 3))
    out = op(x)
    assert out.dtype == tg.int32
    np.testing.assert_array_equal(out.numpy(), reference(x.numpy()))


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("call, error, match", [
    (lambda x: x.flip(2), IndexError, "flip: dim 2 is out of range"),
    (lambda x: x.flip(0, -2), RuntimeError, "more than once"),
    (lambda x: x.roll((1, 2), (0,)), RuntimeError, "same length"),
    (lambda x: x.roll((1, 2)), RuntimeError, "without dims"),
    (lambda x: x.roll(1, 3), IndexError, "roll: dim 3 is out of range"),
    (lambda x: x.repeat(2), RuntimeError, r"repeat: got 1 sizes \(2,\) for a tensor of shape \(2, 3\)"),
    (lambda x: x.repeat(1, -1), RuntimeError, "must not be negative"),
    (lambda x: x.repeat_interleave(-1), RuntimeError, "must not be negative"),
    (lambda x: x.repeat_interleave(tg.tensor([1, 2]), 1), RuntimeError, "2 repeats for dim 1 of size 3"),
    (lambda x: x.repeat_interleave(tg.tensor([1.0, 2.0]), 0), RuntimeError, "integer tensor"),
    (lambda x: x.repeat_interleave(tg.tensor([1, -2]), 0), RuntimeError, "must not be negative"),
    (lambda x: x.repeat_interleave([1, 2], 0), TypeError, "an int or an integer Tensor"),
    (lambda x: x.repeat_interleave(2, 2), IndexError, "repeat_interleave: dim 2 is out of range"),
    (lambda x: x.unflatten(1, (2, 2)), RuntimeError, r"multiply to 4, not to the size 3 of dim 1"),
    (lambda x: x.unflatten(1, (2, -1)), RuntimeError, "cannot split dim 1 of size 3"),
    (lambda x: x.unflatten(1, (-1, -1)), RuntimeError, "at most one -1"),
    (lambda x: x.unflatten(1, ()), RuntimeError, "must not be empty"),
    (lambda x: x.unflatten(-3, (2, 1)), IndexError, "unflatten: dim -3 is out of range"),
    (lambda x: x.unfold(1, 4, 1), RuntimeError, "window size 4 does not fit dim 1 of size 3"),
    (lambda x: x.unfold(1, 2, 0), RuntimeError, "step must be positive"),
    (lambda x: x.unfold(2, 1, 1), IndexError, "unfold: dim 2 is out of range"),
    (lambda x: x.unsqueeze(0).diag(), RuntimeError, r"1-D or 2-D tensor, got shape \(1, 2, 3\)"),
    (lambda x: x.diagonal(0, 1, -1), RuntimeError, "must be different dims"),
    (lambda x: x.diagonal(0, 0, 2), IndexError, "diagonal: dim 2 is out of range"),
])
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call(tg.zeros(2, 3))


# ----------------------------------------------------------------------------- linspace
@given(st.floats(-10, 10), st.floats(-10, 10), st.integers(0, 7))
def test_linspace_is_numpys(start, end, steps):
    out = tg.linspace(start, end, steps)
    assert out.dtype == tg.float32 and out.shape == (steps,)
    np.testing.assert_allclose(out.numpy(), np.linspace(start, end, steps), rtol=1e-6, atol=1e-5)
    np.testing.assert_array_equal(tg.linspace(start, end, steps, dtype=tg.float64).numpy(),
                                  np.linspace(start, end, steps))


def test_linspace_one_step_integers_and_grad():
    np.testing.assert_array_equal(tg.linspace(3.0, 7.0, 1).numpy(), [3.0])
    out = tg.linspace(0, 10, 4, dtype=tg.int64)
    assert out.dtype == tg.int64
    np.testing.assert_array_equal(out.numpy(), [0, 3, 6, 10])           # PyTorch truncates as astype does
    assert tg.linspace(0, 1, 3, requires_grad=True).requires_grad


def test_linspace_errors():
    with pytest.raises(RuntimeError, match="steps must be non-negative"):
        tg.linspace(0, 1, -1)
    with pytest.raises(TypeError, match="steps must be an int"):
        tg.linspace(0, 1, 2.0)


# ----------------------------------------------------------------------------- meshgrid
@given(st.data())
def test_meshgrid(data):
    count = data.draw(st.integers(1, 3))
    arrays = [data.draw(values(data.draw(shapes(min_dims=1, max_dims=1, max_side=3)))) for _ in range(count)]
    indexing = data.draw(st.sampled_from(["ij", "xy"]))
    as_list = data.draw(st.booleans())

    def fn(*tensors):
        grids = tg.meshgrid(list(tensors), indexing=indexing) if as_list else tg.meshgrid(*tensors, indexing=indexing)
        return tg.stack(grids)

    check_op(fn, lambda *arrays: np.stack(np.meshgrid(*arrays, indexing=indexing)), *arrays, second_order=True)


def test_meshgrid_defaults_to_ij_and_keeps_integer_dtypes():
    rows, cols = tg.meshgrid(tg.arange(2), tg.arange(3))
    assert rows.shape == cols.shape == (2, 3) and rows.dtype == tg.int64
    np.testing.assert_array_equal(rows.numpy(), [[0, 0, 0], [1, 1, 1]])
    np.testing.assert_array_equal(cols.numpy(), [[0, 1, 2], [0, 1, 2]])
    x, y = tg.meshgrid(tg.arange(2), tg.arange(3), indexing="xy")
    assert x.shape == (3, 2)
    np.testing.assert_array_equal(x.numpy(), np.meshgrid(np.arange(2), np.arange(3))[0])


@pytest.mark.parametrize("call, match", [
    (lambda: tg.meshgrid(), "at least one tensor"),
    (lambda: tg.meshgrid(tg.zeros(2), indexing="ji"), 'indexing must be "ij" or "xy"'),
    (lambda: tg.meshgrid(tg.zeros(2, 2)), r"0-D or 1-D tensors, got shape \(2, 2\)"),
    (lambda: tg.meshgrid(tg.zeros(2), tg.arange(2)), "same dtype and device"),
])
def test_meshgrid_errors(call, match):
    with pytest.raises(RuntimeError, match=match):
        call()
