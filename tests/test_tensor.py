"""Tensor creation, dtype rules, conversion, devices, and the module-level function API."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tinygrad_gpu as tg
from conftest import gpu, requires_gpu


# ----------------------------------------------------------------------------- dtypes
@pytest.mark.parametrize("data, dtype", [
    (1.5, tg.float32), ([1.0, 2.0], tg.float32), ([[1, 2.5]], tg.float32),
    (3, tg.int64), ([1, 2], tg.int64), (True, tg.bool_), ([True, False], tg.bool_),
    (np.zeros(2), tg.float64), (np.zeros(2, np.float32), tg.float32), (np.arange(3, dtype=np.int32), tg.int32),
    (np.float64(2.0), tg.float64),
])
def test_dtype_of_new_tensors_follows_pytorch(data, dtype):
    assert tg.tensor(data).dtype == dtype
    assert tg.Tensor(data).dtype == dtype


def test_explicit_dtype_and_conversions():
    x = tg.tensor([1.7, -2.2], dtype=tg.float64)
    assert x.dtype == tg.float64
    assert x.float().dtype == tg.float32 and x.half().dtype == tg.float16
    assert x.long().tolist() == [1, -2] and x.long().dtype == tg.int64
    assert x.to(tg.float32).dtype == tg.float32 and x.to("cpu", tg.float32).dtype == tg.float32
    assert x.int().dtype == tg.int32 and x.bool().tolist() == [True, True]


def test_tensor_copies_its_input():
    a = np.zeros(3, dtype=np.float32)
    t = tg.tensor(a)
    a[0] = 5
    assert t.tolist() == [0, 0, 0]
    assert tg.tensor(t).data is not t.data


def test_bad_data_is_a_clear_error():
    with pytest.raises(ValueError, match="rectangular"):           # PyTorch's error type for ragged lists
        tg.tensor([[1, 2], [3]])
    with pytest.raises(TypeError, match="tensor"):
        tg.tensor([object()])


# ----------------------------------------------------------------------------- creation
def test_creation_functions():
    assert tg.zeros(2, 3).shape == (2, 3) and tg.zeros((2, 3)).tolist() == [[0] * 3] * 2
    assert tg.ones(4).dtype == tg.float32 and tg.ones(4).tolist() == [1] * 4
    assert tg.empty(5, dtype=tg.float64).dtype == tg.float64
    assert tg.full((2,), 7).dtype == tg.int64 and tg.full((2,), 0.5).dtype == tg.float32
    assert tg.full((2,), 0.5).tolist() == [0.5, 0.5]
    assert tg.arange(4).tolist() == [0, 1, 2, 3] and tg.arange(4).dtype == tg.int64
    assert tg.arange(0, 1, 0.25).tolist() == [0, 0.25, 0.5, 0.75] and tg.arange(0, 1, 0.25).dtype == tg.float32
    # float bounds with an integer dtype, as PyTorch 2.13: int64 truncates the arguments first, int32 counts
    # the values in floats and steps by int(step); integer linspace truncates its ends first
    assert tg.arange(0.5, 3.7, 1.5, dtype=tg.int64).tolist() == [0, 1, 2]
    assert tg.arange(-2, 1, 0.5, dtype=tg.int32).tolist() == [-2] * 6
    with pytest.raises(ValueError, match="step"):
        tg.arange(0, 1, 0.5, dtype=tg.int64)
    assert tg.linspace(0, 3.5, 6, dtype=tg.int64).tolist() == [0, 0, 1, 1, 2, 3]
    assert tg.linspace(1, 2, 1, dtype=tg.int32).tolist() == [1]
    np.testing.assert_array_equal(tg.eye(3).numpy(), np.eye(3))
    assert tg.eye(2, 3).shape == (2, 3)
    x = tg.ones(2, 3, dtype=tg.float64)
    for like in (tg.zeros_like, tg.ones_like, tg.empty_like, tg.randn_like, tg.rand_like):
        y = like(x)
        assert y.shape == x.shape and y.dtype == tg.float64 and y.device == x.device
    assert tg.full_like(x, 3.0).tolist() == [[3.0] * 3] * 2
    assert tg.zeros(2, requires_grad=True).requires_grad


def test_random_functions_are_reproducible_and_have_the_right_distribution():
    tg.manual_seed(123)
    a = tg.randn(10_000)
    tg.manual_seed(123)
    b = tg.randn(10_000)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert a.dtype == tg.float32
    assert abs(a.mean().item()) < 0.05 and abs(a.std().item() - 1) < 0.05
    u = tg.rand(10_000)
    assert 0 <= u.min().item() and u.max().item() < 1 and abs(u.mean().item() - 0.5) < 0.02
    r = tg.randint(3, 7, (1000,))
    assert r.dtype == tg.int64 and set(r.tolist()) == {3, 4, 5, 6}
    assert sorted(tg.randperm(6).tolist()) == list(range(6))
    assert tg.randn(3, dtype=tg.float64).dtype == tg.float64 and tg.randn(3, dtype=tg.float16).dtype == tg.float16


# ----------------------------------------------------------------------------- properties
def test_properties_and_conversion():
    x = tg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert x.shape == (2, 3) and x.ndim == 2 and x.dim() == 2 and x.numel() == 6 and len(x) == 2
    assert x.size() == (2, 3) and x.size(1) == 3 and x.size(-1) == 3
    assert x.T.shape == (3, 2) and x.T.tolist() == [[1, 4], [2, 5], [3, 6]]
    assert x.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert isinstance(x.numpy(), np.ndarray) and x.numpy().dtype == np.float32
    assert x[1, 2].item() == 6.0 and float(x[0, 0]) == 1.0 and int(x[1, 0]) == 4
    assert [row.tolist() for row in x] == [[1, 2, 3], [4, 5, 6]]
    assert x.is_leaf and x.grad_fn is None and x.is_floating_point()
    assert "tensor(" in repr(x) and "requires_grad=True" in repr(tg.ones(1, requires_grad=True))
    with pytest.raises(RuntimeError, match="one element"):
        x.item()
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(x)
    with pytest.raises(TypeError, match="0-d"):
        len(tg.tensor(1.0))


def test_module_functions_mirror_methods():
    x = tg.tensor([[0.5, -1.0], [2.0, 0.25]])
    np.testing.assert_allclose(tg.exp(x).numpy(), x.exp().numpy())
    np.testing.assert_allclose(tg.softmax(x, 1).numpy(), x.softmax(1).numpy())
    assert tg.sum(x, 0).tolist() == x.sum(0).tolist()
    assert tg.cat([x, x]).shape == (4, 2) and tg.stack([x, x], 1).shape == (2, 2, 2)
    assert tg.where(x > 0, x, 0.0).tolist() == [[0.5, 0.0], [2.0, 0.25]]
    assert tg.maximum(x, tg.zeros(2)).tolist() == [[0.5, 0.0], [2.0, 0.25]]
    assert tg.matmul(x, x).shape == (2, 2)
    assert [t.shape for t in tg.split(x, 1)] == [(1, 2), (1, 2)]


# ----------------------------------------------------------------------------- devices
def test_devices_here():
    assert tg.default_device() in ("cpu", "cuda:0")
    assert tg.ones(1, device="emu").device == "emu"
    assert tg.ones(1, device="cpu").to("emu").to("cpu").device == "cpu"
    with pytest.raises(ValueError, match="unknown device"):
        tg.ones(1, device="tpu")


@pytest.mark.skipif(tg.cuda_available(), reason="this machine has a GPU")
def test_asking_for_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="CUDA is unavailable.*device='cpu'"):
        tg.ones(1, device="cuda")
    with pytest.raises(RuntimeError, match="CUDA is unavailable"):
        tg.ones(1).to("cuda")


def _python(code: str, **env) -> subprocess.CompletedProcess:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    full_env = {k: v for k, v in os.environ.items() if k != "TINYGRAD_GPU_DEVICE"}
    full_env.update(env, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)


def test_import_is_silent_and_picks_a_default_device():
    result = _python("import tinygrad_gpu as tg; assert tg.ones(2).device == tg.default_device()")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""


def test_import_with_cupy_but_no_gpu_falls_back_to_cpu():
    try:
        import cupy  # noqa: F401
    except Exception:
        pytest.skip("CuPy is not installed (CI installs it to run this test)")
    if tg.cuda_available():
        pytest.skip("this machine has a GPU")
    result = _python("import tinygrad_gpu as tg; print(tg.default_device())")
    assert result.returncode == 0 and result.stdout.strip() == "cpu" and result.stderr == ""


def test_environment_variable_overrides_the_default_device():
    result = _python("import tinygrad_gpu as tg; print(tg.default_device(), tg.ones(1).device)",
                     TINYGRAD_GPU_DEVICE="emu")
    assert result.stdout.split() == ["emu", "emu"], result.stderr


@gpu
@requires_gpu
def test_cuda_tensors_round_trip():
    x = tg.tensor([1.0, 2.0], device="cuda")
    assert x.device == "cuda:0" and x.to("cpu").tolist() == [1.0, 2.0]
