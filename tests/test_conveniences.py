"""from_numpy and allclose (conveniences.py) and cuda.is_available (cuda.py), imported from their modules;
against torch.from_numpy and torch.allclose where torch is installed."""
import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu import cuda, device
from tinygrad_gpu.conveniences import allclose, from_numpy

DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_]


# ----------------------------------------------------------------------------- from_numpy
def test_from_numpy_shares_memory_both_ways():
    array = np.arange(6.0).reshape(2, 3)
    t = from_numpy(array)
    assert t.dtype == tg.float64 and t.shape == (2, 3) and t.device == "cpu" and not t.requires_grad
    array[0, 1] = 100.0
    assert t.tolist()[0][1] == 100.0
    t.data[1, 2] = -1.0                        # what an optimizer's in-place update does
    assert array[1, 2] == -1.0
    assert np.shares_memory(t.numpy(), array)


def test_from_numpy_keeps_views_and_their_strides():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = base[:, 1::2].T
    t = from_numpy(view)
    assert t.shape == (2, 3) and t.tolist() == view.tolist()
    base[0, 1] = 50
    assert t.tolist()[0][0] == 50
    assert (t * 2).tolist() == (view * 2).tolist()


def test_from_numpy_result_takes_part_in_autograd():
    t = from_numpy(np.array([1.0, 2.0, 3.0])).requires_grad_()
    (t * t).sum().backward()
    assert t.grad.tolist() == [2.0, 4.0, 6.0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_from_numpy_keeps_the_dtype_as_torch_does(dtype):
    array = np.ones((2, 2), dtype)
    assert from_numpy(array).dtype == np.dtype(dtype)
    torch = pytest.importorskip("torch")
    assert str(torch.from_numpy(array).dtype).replace("torch.", "") == np.dtype(dtype).name


def test_from_numpy_refuses_what_it_cannot_share():
    with pytest.raises(TypeError, match=r"from_numpy: expected a numpy.ndarray, got a list; tg.tensor\(data\)"):
        from_numpy([1.0, 2.0])
    with pytest.raises(TypeError, match="numpy.ndarray, got a float64"):          # a numpy scalar is no array
        from_numpy(np.float64(1.0))
    for bad in (np.array(["a"]), np.array([object()]), np.array([1j])):
        with pytest.raises(TypeError, match=f"from_numpy: cannot share an array of {bad.dtype}"):
            from_numpy(bad)
    with pytest.raises(ValueError, match="from_numpy: the array's byte order"):
        from_numpy(np.ones(2, dtype=np.dtype(np.float32).newbyteorder("S")))


# ----------------------------------------------------------------------------- allclose
CASES = [   # (a, b, options)
    ([1.0, 2.0], [1.0, 2.0 + 1e-6], {}),
    ([1.0, 2.0], [1.0, 2.1], {}),
    ([1.0, 2.0], [1.0, 2.1], dict(atol=0.2)),
    ([1.0, 2.0], [1.0, 2.1], dict(rtol=0.1)),
    ([0.0], [1e-9], {}),
    ([0.0], [1e-7], {}),
    ([float("nan"), 1.0], [float("nan"), 1.0], {}),
    ([float("nan"), 1.0], [float("nan"), 1.0], dict(equal_nan=True)),
    ([float("inf")], [float("inf")], {}),
    ([float("inf")], [float("-inf")], {}),
    ([[1.0, 2.0], [1.0, 2.0]], [1.0, 2.0], {}),            # broadcasting
    ([], [], {}),
]


def test_allclose_by_hand():
    expected = [True, False, True, True, True, False, False, True, True, False, True, True]
    for (a, b, options), answer in zip(CASES, expected):
        result = allclose(tg.tensor(a), tg.tensor(b), **options)
        assert type(result) is bool and result is answer, (a, b, options)
    assert allclose(tg.tensor([1, 2]), tg.tensor([1, 2]))      # integers compare exactly


@pytest.mark.parametrize("a, b, options", CASES)
def test_allclose_matches_torch(a, b, options):
    torch = pytest.importorskip("torch")
    assert allclose(tg.tensor(a), tg.tensor(b), **options) == torch.allclose(torch.tensor(a), torch.tensor(b),
                                                                                  **options)


def test_allclose_errors_as_torch_raises_them():
    with pytest.raises(RuntimeError, match="allclose: input is float32 but other is float64"):
        allclose(tg.tensor([1.0]), tg.tensor([1.0], dtype=tg.float64))
    with pytest.raises(TypeError, match="allclose: other must be a Tensor, got a float"):
        allclose(tg.tensor([1.0]), 1.0)
    with pytest.raises(TypeError, match="allclose: input must be a Tensor, got a list"):
        allclose([1.0], tg.tensor([1.0]))
    with pytest.raises(Exception, match=r"\(2,\).*\(3,\)|\(3,\).*\(2,\)"):
        allclose(tg.ones(2), tg.ones(3))


def test_allclose_refusals_match_torch():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        torch.allclose(torch.ones(1), torch.ones(1, dtype=torch.float64))
    with pytest.raises(TypeError):
        torch.allclose(torch.ones(1), 1.0)


# ----------------------------------------------------------------------------- cuda
def test_cuda_namespace_asks_the_device_layer():
    assert cuda.is_available() is device.cuda_available()
    assert cuda.device_count() == device.cuda_device_count()
    assert (cuda.device_count() > 0) == cuda.is_available()
