"""layernorm.cu's one-launch backward (layernorm_backward_fused) against the reference and the plain pair.

Groups of rows per block, each group's column sums in a workspace, the last block to finish adds them in
a fixed order. Tolerances: dx is the plain kernel's formula with its row sums taken by a warp instead of a
block, so it differs from the reference by float32 noise (as in test_kernels.py's test_layernorm). dweight
and dbias are float32 sums over the rows in an order of their own (each warp's rows, then the warps, then
the groups) where NumPy sums pairwise: any two such orders differ by at most about rows * EPS * (the sum
of the terms' magnitudes), the textbook bound on a float32 sum's rounding; a 16-bit result adds one step of
its grid (it is rounded once from that float32 sum). Each run of the fused kernel gives the same bits,
whatever order the emulator runs the blocks and threads in (TINYGRAD_GPU_EMU_SHUFFLE).
"""
import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu import device as devices
from tinygrad_gpu import dtypes
from tinygrad_gpu.kernels import layernorm, runtime

from conftest import gpu, host, on, requires_gpu

EPS = float(np.finfo(np.float32).eps)
KERNEL_DEVICES = ["emu", pytest.param("cuda", marks=[gpu, requires_gpu])]
on_kernel_devices = pytest.mark.parametrize("device", KERNEL_DEVICES)
STORAGE_DTYPES = [dtypes.float32, dtypes.float16, dtypes.bfloat16]
by_storage_dtype = pytest.mark.parametrize("dtype", STORAGE_DTYPES, ids=lambda d: np.dtype(d).name)
STEP = {dtypes.float32: 0.0, dtypes.float16: 2.0**-10, dtypes.bfloat16: 2.0**-7}
on_standin = pytest.mark.skipif(not tg.cuda_available() or
                                not getattr(devices.cupy(), "__name__", "").endswith("cupy_standin"),
                                reason="reads the CuPy stand-in's counters")


def wide(a):
    return a.astype(np.float64)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32}[a.itemsize])


def problem(rng, rows, n, dtype, bias=True, add=False):
    """x (mean 5, spread 2), weight, bias or None, dout, dx_add or None; mean and rstd from the reference."""
    x = (2 * rng.standard_normal((rows, n)) + 5).astype(np.float32).astype(dtype)
    weight, b = (rng.standard_normal(n).astype(np.float32).astype(dtype) for _ in range(2))
    dout = rng.standard_normal((rows, n)).astype(np.float32).astype(dtype)
    dx_add = rng.standard_normal((rows, n)).astype(np.float32).astype(dtype) if add else None
    _, mean, rstd = layernorm.reference_forward(x, weight, b if bias else None, 1e-5)
    return x, weight, b if bias else None, dout, dx_add, mean, rstd


def check_against_reference(got, x, weight, dout, dx_add, mean, rstd, need_bias):
    dtype = x.dtype
    want = layernorm.reference_backward(x, weight, mean, rstd, dout, True, dx_add=dx_add)
    dx, dweight, dbias = got
    assert (dbias is None) == (not need_bias)
    xhat = (wide(x) - wide(mean)[:, None]) * wide(rstd)[:, None]
    # dx: the row's terms rstd |dout w| and |xhat| rstd mean|g xhat| meet, as in test_layernorm
    terms = wide(rstd)[:, None] * (np.abs(wide(dout) * wide(weight)) + np.abs(xhat) *
                                   np.abs(wide(dout) * wide(weight) * xhat).mean(axis=1, keepdims=True))
    if dx_add is not None:
        terms = terms + np.abs(wide(dx_add))
    rows = x.shape[0]
    bounds = (16 * EPS * terms.max(axis=1, keepdims=True),
              rows * EPS * np.abs(wide(dout) * xhat).sum(axis=0),           # a float32 sum's rounding, any order
              rows * EPS * np.abs(wide(dout)).sum(axis=0))
    for name, g, w, bound in zip(("dx", "dweight", "dbias"), (dx, dweight, dbias), want, bounds):
        if g is None:
            continue
        assert g.dtype == dtype and g.shape == w.shape
        error = np.abs(wide(g) - wide(w))
        allowed = bound + STEP[dtype] * np.abs(wide(w)) + 1e-30
        assert (error <= allowed).all(), f"{name}: worst error {error.max()} (allowed {allowed.min()})"


# Odd row counts, a last group that is short, rows fewer than a group, n not a multiple of 32, n = 1, n at the
# limit (1024: 32 columns a lane).
CASES = [(77, 37, True, True), (5, 45, False, False), (130, 100, True, False), (33, 1, False, True),
         (40, 1024, True, True), (16, 31, True, False)]


@on_kernel_devices
@by_storage_dtype
@pytest.mark.parametrize("rows, n, bias, add", CASES)
def test_fused_backward_matches_the_reference_and_the_pair(device, dtype, rows, n, bias, add):
    device = devices.canonical(device)
    rng = np.random.default_rng(rows * 1000 + n)
    x, weight, b, dout, dx_add, mean, rstd = problem(rng, rows, n, dtype, bias, add)
    args = on(device, x, weight, mean, rstd, dout)
    fused = host(*layernorm.backward(*args, True, device, need_bias=bias, dx_add=on(device, dx_add)[0], fused=True))
    check_against_reference(fused, x, weight, dout, dx_add, mean, rstd, bias)
    pair = host(*layernorm.backward(*args, True, device, need_bias=bias, dx_add=on(device, dx_add)[0], fused=False))
    check_against_reference(pair, x, weight, dout, dx_add, mean, rstd, bias)
    assert int(host(layernorm._workspace(device).ticket)[0]) == 0      # ready for the next


@by_storage_dtype
def test_fused_backward_gives_the_same_bits_whatever_order_the_blocks_run_in(dtype, monkeypatch):
    """Several groups (so a last block that sums the others' partials): the emulator's shuffled schedules change
    which block finishes last and when each thread runs, and nothing of the result."""
    x, weight, _, dout, dx_add, mean, rstd = problem(np.random.default_rng(3), 150, 70, dtype, add=True)
    results = []
    for shuffle in ("0", "1", "5", "12345"):
        monkeypatch.setenv("TINYGRAD_GPU_EMU_SHUFFLE", shuffle)
        results.append([bits(a) for a in layernorm.backward(x, weight, mean, rstd, dout, True, "emu",
                                                            dx_add=dx_add, fused=True)])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)


def test_the_launcher_chooses_one_launch_where_the_fused_kernel_fits(monkeypatch):
    launched, real_launch = [], runtime.launch

    def recording(device, filename, kernel, grid, block, args, shared_mem=0):
        launched.append((kernel, tuple(grid)))
        real_launch(device, filename, kernel, grid, block, args, shared_mem)

    monkeypatch.setattr(runtime, "launch", recording)
    rng = np.random.default_rng(1)

    def kernels_for(rows, n, need_params=True):
        x, weight, _, dout, _, mean, rstd = problem(rng, rows, n, np.float32)
        launched.clear()
        layernorm.backward(x, weight, mean, rstd, dout, need_params, "emu")
        return launched[:]

    assert kernels_for(64, 40) == [("layernorm_backward_fused", (4,))]         # groups of 16 rows
    assert kernels_for(layernorm.FUSED_MIN_ROWS - 1, 40) == [("layernorm_backward", (15,)),
                                                              ("layernorm_backward_params", (2,))]
    assert [k for k, _ in kernels_for(20, layernorm.FUSED_MAX_N + 1)] == ["layernorm_backward",
                                                                          "layernorm_backward_params"]
    assert kernels_for(64, 40, need_params=False) == [("layernorm_backward", (64,))]
    # the GPU config's 16384 rows: 512 groups of 32; few rows still make groups of at least 16, many at most 64
    assert layernorm.group_rows(16384) == 32 and layernorm.group_rows(20) == 16 and layernorm.group_rows(10**6) == 64
    with pytest.raises(ValueError, match="fused kernel"):
        x, weight, _, dout, _, mean, rstd = problem(rng, 20, 40, np.float32)
        layernorm.backward(x, weight, mean, rstd, dout, False, "emu", fused=True)


def test_the_workspace_is_kept_and_grown_per_device():
    rng = np.random.default_rng(2)
    work = layernorm._workspace("emu")
    for rows in (40, 40, 400, 40):
        x, weight, _, dout, _, mean, rstd = problem(rng, rows, 50, np.float32)
        before = work.partials
        layernorm.backward(x, weight, mean, rstd, dout, True, "emu")
        needed = 2 * -(-rows // layernorm.group_rows(rows)) * 50
        assert work.partials.size >= needed
        if before.size >= needed:
            assert work.partials is before                 # no new allocation when the old one is large enough
    assert layernorm._workspace("emu") is work and int(work.ticket) == 0


@on_standin
def test_on_the_standin_a_layer_norm_backward_is_one_launch_and_its_three_results(monkeypatch):
    x, weight, b, dout, dx_add, mean, rstd = problem(np.random.default_rng(4), 64, 48, np.float32, add=True)
    from tinygrad_gpu.testing.cupy_standin import counters
    args = on("cuda", x, weight, mean, rstd, dout, dx_add)
    layernorm.backward(*args[:5], True, "cuda", dx_add=args[5])         # the first call makes the workspace
    counters.reset()
    got = host(*layernorm.backward(*args[:5], True, "cuda", dx_add=args[5]))
    assert counters.raw_launches == 1
    assert counters.allocations == 3                                  # dx, dweight, dbias: nothing else
    check_against_reference(got, x, weight, dout, dx_add, mean, rstd, True)


@pytest.mark.parametrize("fused", [True, False])
@by_storage_dtype
def test_a_spare_dout_takes_dx_in_place_with_the_same_bits(dtype, fused):
    """dout_is_spare: the one-launch kernel, and the plain kernel when no parameter's gradient is wanted, write dx
    over dout (no dx buffer), and the numbers are those of a separate dx; the plain pair with the parameters'
    gradients must read dout after dx is written, so it keeps dout."""
    x, weight, _, dout, dx_add, mean, rstd = problem(np.random.default_rng(5), 70, 45, dtype, add=True)
    for need_params in ((True, False) if not fused else (True,)):
        want = [bits(a) for a in layernorm.backward(x, weight, mean, rstd, dout, need_params, "emu", dx_add=dx_add,
                                                    fused=fused) if a is not None]
        spare = dout.copy()
        got = layernorm.backward(x, weight, mean, rstd, spare, need_params, "emu", dout_is_spare=True,
                                 dx_add=dx_add, fused=fused)
        assert (got[0] is spare) == (fused or not need_params)
        for a, b in zip(want, [bits(a) for a in got if a is not None]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("dout_dtype", [dtypes.float16, dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_a_spare_dx_add_takes_dx_when_a_16_bit_dout_cannot(dout_dtype, fused):
    """Float32 x with a 16-bit dout (a layer norm that feeds products, under autocast): dx cannot be written over
    dout, so with dx_add_is_spare it is written over dx_add (the residual stream's gradient), with the bits of a
    separate dx; without it, dx_add is only read."""
    x, weight, _, _, dx_add, mean, rstd = problem(np.random.default_rng(6), 70, 45, np.float32, add=True)
    dout = np.random.default_rng(7).standard_normal((70, 45)).astype(np.float32).astype(dout_dtype)
    for need_params in (True, False) if not fused else (True,):
        want = [bits(a) for a in layernorm.backward(x, weight, mean, rstd, dout, need_params, "emu", dx_add=dx_add,
                                                    fused=fused) if a is not None]
        for spare in (True, False):
            given = dx_add.copy()
            got = layernorm.backward(x, weight, mean, rstd, dout, need_params, "emu", dout_is_spare=True,
                                     dx_add=given, dx_add_is_spare=spare, fused=fused)
            assert (got[0] is given) == spare
            np.testing.assert_array_equal(given, dx_add if not spare else got[0])
            for a, b in zip(want, [bits(a) for a in got if a is not None]):
                np.testing.assert_array_equal(a, b)
