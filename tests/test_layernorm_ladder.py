"""layernorm.cu's two forward kernels, the ladder's rungs: the naive one (one thread per row) and the block one
(one block per row, block reductions), each against the NumPy reference, and the launcher's choice between them.

The reference runs in float64 on the same inputs (16-bit inputs widen exactly): the exact values the kernels
approximate in float32. Tolerances are the textbook bounds of those float32 computations, for either kernel's
order of summation: a sum of n terms rounded one by one is off by at most n * EPS * (the sum of their
magnitudes). So the mean is off by at most n EPS mean|x|; the sum of squares, its n products and the
differences x - mean by (n + 4) EPS of itself, and rstd (its square root, rsqrtf's few ulps) by (n + 8) EPS of
itself; each output value carries the mean's error times rstd, rstd's relative error, and a few roundings of
its own. A 16-bit out adds one step of its grid (it is rounded once from float32), or half a subnormal step
for a value too small for its normal numbers (float16's below 6e-5).
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinygrad_gpu import device as devices
from tinygrad_gpu import dtypes
from tinygrad_gpu.kernels import layernorm, runtime

from conftest import gpu, host, on, requires_gpu

EPS = float(np.finfo(np.float32).eps)
KERNEL_DEVICES = ["emu", pytest.param("cuda", marks=[gpu, requires_gpu])]
STORAGE_DTYPES = [dtypes.float32, dtypes.float16, dtypes.bfloat16]
STEP = {dtypes.float32: 0.0, dtypes.float16: 2.0**-10, dtypes.bfloat16: 2.0**-7}
FLOOR = {dtypes.float32: 2.0**-150, dtypes.float16: 2.0**-25, dtypes.bfloat16: 2.0**-134}   # half a subnormal step

# (rows, n, bias, offset): a single row; n not a multiple of any block (the block kernel's row_block(n) threads,
# a warp); more rows than one block of the naive kernel (NAIVE_BLOCK + 3: a second block of mostly spare
# threads); n = 1 (x - mean = 0, out = bias); rows longer than the block kernel's 1024 threads; and x = 1000 +
# noise, where a one-pass variance (mean(x^2) - mean^2) would cancel.
CASES = [(1, 37, True, 5.0), (5, 130, False, 5.0), (layernorm.NAIVE_BLOCK + 3, 45, True, 5.0),
         (3, 1, True, 5.0), (2, 4103, False, 5.0), (7, 64, True, 1000.0)]


def wide(a):
    return None if a is None else a.astype(np.float64)


def problem(rows, n, dtype, bias, offset):
    rng = np.random.default_rng(rows * 10_000 + n)
    x = (2 * rng.standard_normal((rows, n)) + offset).astype(np.float32).astype(dtype)
    weight, b = (rng.standard_normal(n).astype(np.float32).astype(dtype) for _ in range(2))
    return x, weight, b if bias else None


def check_forward(got, x, weight, bias, eps):
    """got = (out, mean, rstd) from a kernel: dtypes and shapes as the block kernel writes them, values within
    float32's bounds of the exact ones (the module docstring)."""
    out, mean, rstd = got
    rows, n = x.shape
    assert out.dtype == x.dtype and out.shape == x.shape
    assert mean.dtype == rstd.dtype == np.float32 and mean.shape == rstd.shape == (rows,)
    want_out, want_mean, want_rstd = layernorm.reference_forward(wide(x), wide(weight), wide(bias), eps)
    mean_bound = n * EPS * np.abs(wide(x)).mean(axis=1) + 1e-30
    # the variance about a mean off by mean_bound is larger by its square: relative (mean_bound rstd)^2
    rstd_bound = ((n + 8) * EPS + (mean_bound * want_rstd) ** 2) * want_rstd
    assert (np.abs(wide(mean) - want_mean) <= mean_bound).all(), np.abs(wide(mean) - want_mean).max()
    assert (np.abs(wide(rstd) - want_rstd) <= rstd_bound).all(), np.abs(wide(rstd) / want_rstd - 1).max()
    xhat = (wide(x) - want_mean[:, None]) * want_rstd[:, None]
    w = np.abs(wide(weight))
    out_bound = (w * (mean_bound * want_rstd)[:, None] + w * np.abs(xhat) * ((n + 12) * EPS)
                 + 4 * EPS * (np.abs(want_out) + (0 if bias is None else np.abs(wide(bias))))
                 + STEP[x.dtype] * np.abs(want_out) + FLOOR[x.dtype])
    error = np.abs(wide(out) - want_out)
    worst = np.unravel_index(error.argmax(), error.shape)
    assert (error <= out_bound).all(), f"out: worst error {error.max()} at {worst} (allowed {out_bound[worst]})"


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", STORAGE_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("version", layernorm.FORWARD_VERSIONS)
@pytest.mark.parametrize("rows, n, bias, offset", CASES)
def test_each_forward_kernel_matches_the_reference(device, dtype, version, rows, n, bias, offset):
    x, weight, b = problem(rows, n, dtype, bias, offset)
    device = devices.canonical(device)
    got = host(*layernorm.forward(*on(device, x, weight, b), 1e-5, device, version=version))
    check_forward(got, x, weight, b, 1e-5)


@given(st.sampled_from(layernorm.FORWARD_VERSIONS), st.sampled_from(STORAGE_DTYPES), st.integers(1, 2 * 128 + 5),
       st.integers(1, 300), st.booleans(), st.sampled_from([0.0, 5.0, 100.0]))
def test_each_forward_kernel_on_drawn_shapes(version, dtype, rows, n, bias, offset):
    """Rows past one or two of the naive kernel's blocks, rows not a multiple of any block or warp, on emu."""
    x, weight, b = problem(rows, n, dtype, bias, offset)
    check_forward(layernorm.forward(x, weight, b, 1e-5, "emu", version=version), x, weight, b, 1e-5)


def test_the_two_kernels_agree_on_a_gpt_sized_row():
    """The same inputs, both rungs: the same outputs to float32 rounding (their sums run in different orders)."""
    x, weight, b = problem(4, 384, np.float32, True, 5.0)
    naive = layernorm.forward(x, weight, b, 1e-5, "emu", version="naive")
    block = layernorm.forward(x, weight, b, 1e-5, "emu", version="block")
    for a, c in zip(naive, block):
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)


def test_the_launcher_runs_the_kernel_asked_for(monkeypatch):
    launched, real_launch = [], runtime.launch

    def recording(device, filename, kernel, grid, block, args, shared_mem=0):
        launched.append((kernel, tuple(grid), tuple(block)))
        real_launch(device, filename, kernel, grid, block, args, shared_mem)

    monkeypatch.setattr(runtime, "launch", recording)
    x, weight, b = problem(layernorm.NAIVE_BLOCK + 3, 40, np.float32, True, 0.0)
    layernorm.forward(x, weight, b, 1e-5, "emu")                                   # the block kernel by default
    layernorm.forward(x, weight, b, 1e-5, "emu", version="naive")
    layernorm.forward(x.astype(dtypes.bfloat16), weight.astype(dtypes.bfloat16), None, 1e-5, "emu", version="naive")
    layernorm.forward(x[:0], weight, b, 1e-5, "emu", version="naive")             # no rows: no launch
    assert launched == [("layernorm_forward", (layernorm.NAIVE_BLOCK + 3,), (runtime.row_block(40),)),
                        ("layernorm_forward_naive", (2,), (layernorm.NAIVE_BLOCK,)),
                        ("layernorm_forward_naive_bf16", (2,), (layernorm.NAIVE_BLOCK,))]


@pytest.mark.parametrize("device", ["cpu", "emu"])
def test_an_unknown_version_is_refused_naming_the_op_and_the_choices(device):
    x, weight, b = problem(2, 8, np.float32, True, 0.0)
    with pytest.raises(ValueError, match=r"layernorm\.forward: version must be one of 'block', 'naive', not 'fast'"):
        layernorm.forward(x, weight, b, 1e-5, device, version="fast")
    with pytest.raises(ValueError, match=r"layernorm\.forward: the naive kernel writes out in x's dtype"):
        layernorm.forward(x, weight, b, 1e-5, device, out_dtype=dtypes.bfloat16, version="naive")


def test_the_cpu_takes_either_version_and_computes_the_same():
    """The version picks a kernel on emu and cuda; the cpu has one path, which either name reaches."""
    x, weight, b = problem(3, 20, np.float32, True, 5.0)
    for a, c in zip(layernorm.forward(x, weight, b, 1e-5, "cpu", version="naive"),
                    layernorm.forward(x, weight, b, 1e-5, "cpu")):
        np.testing.assert_array_equal(a, c)
