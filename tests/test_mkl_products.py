"""kernels/mkl_products.py: MKL's products against NumPy's, for every layout and batch the engine hands it, and
the switch. The products need MKL (the `mkl` extra; CI installs it) and skip without it; the switch's tests run
everywhere."""
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinygrad_gpu.kernels import mkl_products

needs_mkl = pytest.mark.skipif(mkl_products.library() is None, reason="MKL is not installed (pip install mkl)")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def laid_out(rng, shape, dtype, layout):
    """An array of `shape` whose last two axes are stored as asked: "rows" (C order), "columns" (the transpose of
    a C-contiguous array, as w.T is), "gaps" (a slice with a row stride wider than a row), "reversed" (negative
    strides: MKL cannot read them, so multiply copies them first)."""
    if layout == "columns":
        return np.ascontiguousarray(rng.standard_normal(shape).astype(dtype).swapaxes(-1, -2)).swapaxes(-1, -2)
    if layout == "gaps":
        return rng.standard_normal((*shape[:-1], shape[-1] + 3)).astype(dtype)[..., 1:shape[-1] + 1]
    if layout == "reversed":
        return rng.standard_normal(shape).astype(dtype)[..., ::-1, :]
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture(autouse=True)
def every_size_to_mkl(monkeypatch):
    """The products here are small: MKL takes them all the same (NUMPY_BELOW would send them to NumPy)."""
    monkeypatch.setattr(mkl_products, "NUMPY_BELOW", 0)


def tolerance(dtype, k):
    return dict(rtol=1e-5, atol=1e-5 * k) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12 * k)


@needs_mkl
@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 40),
       batch_a=st.sampled_from([(), (3,), (2, 3), (1, 3), (2, 1)]), batch_b=st.sampled_from([(), (3,), (2, 3)]),
       dtype=st.sampled_from([np.float32, np.float64]),
       layout_a=st.sampled_from(["rows", "columns", "gaps", "reversed"]),
       layout_b=st.sampled_from(["rows", "columns", "gaps", "reversed"]), seed=st.integers(0, 2 ** 16))
def test_a_product_is_numpys_up_to_the_order_of_its_sums(m, n, k, batch_a, batch_b, dtype, layout_a, layout_b, seed):
    rng = np.random.default_rng(seed)
    a = laid_out(rng, (*batch_a, m, k), dtype, layout_a)
    b = laid_out(rng, (*batch_b, k, n), dtype, layout_b)
    made = mkl_products.multiply(a, b)
    assert made is not None and made.dtype == dtype
    np.testing.assert_allclose(made, np.matmul(a, b), **tolerance(dtype, k))


@needs_mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_product_goes_into_a_strided_out_as_attentions_gradients_do(dtype):
    """PackedCausalAttention writes dq, dk, dv into three views of one (B, T, 3, H, E) buffer: rows of E values
    with a row stride of 3 H E, batch strides mixed."""
    rng = np.random.default_rng(0)
    B, T, H, E = 2, 8, 3, 4
    buffer = np.full((B, T, 3, H, E), np.nan, dtype)
    views = buffer.transpose(2, 0, 3, 1, 4)
    ds = rng.standard_normal((B, H, T, T)).astype(dtype)
    k = rng.standard_normal((B, H, T, E)).astype(dtype)
    for view in views:
        assert mkl_products.multiply(ds, k, out=view) is view
        np.testing.assert_allclose(view, ds @ k, **tolerance(dtype, T))
    assert not np.isnan(buffer).any()


@needs_mkl
def test_it_leaves_to_numpy_what_mkl_does_not_take():
    """None, so that linalg.product multiplies with NumPy: integers, two dtypes, empty matrices, an out that
    overlaps an input or is not row-major, 1-D operands."""
    f = np.ones((4, 4), np.float32)
    assert mkl_products.multiply(np.ones((4, 4), np.int64), np.ones((4, 4), np.int64)) is None
    assert mkl_products.multiply(f, f.astype(np.float64)) is None
    assert mkl_products.multiply(np.ones((4, 0), np.float32), np.ones((0, 4), np.float32)) is None
    assert mkl_products.multiply(f, f, out=f) is None
    assert mkl_products.multiply(f, f, out=np.empty((4, 4), np.float32).T) is None
    assert mkl_products.multiply(f, np.ones(4, np.float32)) is None
    assert mkl_products.multiply(f, f, out=np.empty((4, 5), np.float32)) is None


@needs_mkl
def test_products_below_numpy_below_are_left_to_numpy(monkeypatch):
    monkeypatch.setattr(mkl_products, "NUMPY_BELOW", 64 * 64 * 64)
    assert mkl_products.multiply(np.ones((64, 64), np.float32), np.ones((64, 63), np.float32)) is None
    assert mkl_products.multiply(np.ones((64, 64), np.float32), np.ones((64, 64), np.float32)) is not None
    assert mkl_products.multiply(np.ones((2, 32, 64), np.float32), np.ones((64, 64), np.float32)) is not None


@needs_mkl
def test_an_empty_batch_gives_an_empty_product():
    made = mkl_products.multiply(np.ones((0, 3, 4), np.float32), np.ones((4, 5), np.float32))
    assert made.shape == (0, 3, 5)


@needs_mkl
def test_mkl_runs_in_the_threads_of_numbas_kernels():
    """One libgomp.so.1 in the process, MKL's GNU threading layer on it, and the compiled kernels sharing out rows
    from SHARED_PARALLEL_MIN elements (compiled_cpu's last comment says why)."""
    pytest.importorskip("numba")
    from tinygrad_gpu.kernels import compiled_cpu
    mkl_products.multiply(np.ones((300, 300), np.float32), np.ones((300, 300), np.float32))
    with open("/proc/self/maps") as maps:
        libraries = {line.split()[-1] for line in maps if "gomp" in line or "mkl_" in line}
    # PyTorch, where imported, brings a libgomp of its own, which only it uses
    torch_folder = os.path.dirname(sys.modules["torch"].__file__) if "torch" in sys.modules else None
    ours = {os.path.realpath(p) for p in libraries if os.path.basename(p).startswith("libgomp")
            and not (torch_folder and p.startswith(torch_folder))}
    assert len(ours) == 1
    assert any("mkl_gnu_thread" in p for p in libraries)
    assert compiled_cpu.PARALLEL_MIN == compiled_cpu.SHARED_PARALLEL_MIN


def run_python(code: str, **env):
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, **env}, timeout=300)
    return result


def test_the_switch_says_numpy_and_products_stay_numpys():
    result = run_python("""
        import numpy as np
        from tinygrad_gpu.kernels import mkl_products
        assert mkl_products.library() is None
        assert mkl_products.multiply(np.ones((3, 3), np.float32), np.ones((3, 3), np.float32)) is None
        print("numpy")""", TINYGRAD_GPU_CPU_BLAS="numpy")
    assert result.returncode == 0 and result.stdout.strip() == "numpy", result.stderr


def test_the_switch_refuses_a_name_it_does_not_know():
    result = run_python("""
        from tinygrad_gpu.kernels import mkl_products
        mkl_products.library()""", TINYGRAD_GPU_CPU_BLAS="openblas")
    assert result.returncode != 0 and "TINYGRAD_GPU_CPU_BLAS='openblas': say one of mkl, numpy" in result.stderr


def test_asking_for_mkl_where_it_is_absent_says_how_to_install_it():
    result = run_python("""
        from tinygrad_gpu.kernels import mkl_products
        mkl_products.library_path = lambda: None
        mkl_products.library()""", TINYGRAD_GPU_CPU_BLAS="mkl")
    assert result.returncode != 0 and "pip install mkl" in result.stderr


@needs_mkl
def test_a_training_step_agrees_with_the_one_on_numpys_blas():
    """A small GPT's loss and gradients with MKL's products and with NumPy's (TINYGRAD_GPU_CPU_BLAS=mkl, then
    numpy, each in a process of its own), from the same weights and batch."""
    code = """
        import numpy as np
        import tinygrad_gpu as tg
        from tinygrad_gpu import nn
        from tinygrad_gpu.kernels import mkl_products
        mkl_products.NUMPY_BELOW = 0          # a small model's products, by MKL all the same
        tg.manual_seed(0)
        model = nn.GPT(nn.GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=20, dropout=0.0))
        rng = np.random.default_rng(0)
        x, y = tg.tensor(rng.integers(0, 20, (3, 16))), tg.tensor(rng.integers(0, 20, (3, 16)))
        _, loss = model(x, y)
        loss.backward()
        np.savez(OUT, loss=loss.numpy(),
                 **{name: p.grad.numpy() for name, p in model.named_parameters()})
        """
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for blas in ("mkl", "numpy"):
            paths[blas] = os.path.join(folder, f"{blas}.npz")
            result = run_python(f"OUT = {paths[blas]!r}\n" + textwrap.dedent(code), TINYGRAD_GPU_CPU_BLAS=blas)
            assert result.returncode == 0, result.stderr
        with np.load(paths["mkl"]) as ours, np.load(paths["numpy"]) as theirs:
            assert set(ours) == set(theirs)
            for name in ours:
                scale = max(1e-6, float(np.abs(theirs[name]).max()))
                np.testing.assert_allclose(ours[name] / scale, theirs[name] / scale, atol=1e-5, err_msg=name)
