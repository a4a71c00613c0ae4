"""dropout.cu (the mask drawn inside the kernel, in both directions) and layer norm's optional pointers.

The dropout kernel must draw exactly the mask the unfused dropout draws on a GPU, `stream.random(shape)
>= p` on that GPU's Philox stream, and multiply as the unfused x * keep does, so that a training run's
numbers do not change when dropout is fused. On emu the stream is a PhiloxStream on emu (its draws run
philox.cu there); on cuda (the stand-in, or a GPU) it is the device's own. Layer norm without a bias
passes a null pointer instead of a buffer of zeros, and its parameters' kernel writes dweight and dbias
instead of adding to zeroed buffers.
"""
import types

import numpy as np
import pytest

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from tinygrad_gpu import device as devices
from tinygrad_gpu import dtypes, kernels, random
from tinygrad_gpu.kernels import dropout, layernorm, philox
from tinygrad_gpu.ops import fused

from conftest import gpu, requires_gpu

KERNEL_DEVICES = ["emu", pytest.param("cuda", marks=[gpu, requires_gpu])]
on_kernel_devices = pytest.mark.parametrize("device", KERNEL_DEVICES)
STORAGE_DTYPES = [dtypes.float32, dtypes.float16, dtypes.bfloat16]
by_storage_dtype = pytest.mark.parametrize("dtype", STORAGE_DTYPES, ids=lambda d: np.dtype(d).name)
on_standin = pytest.mark.skipif(not tg.cuda_available() or
                                not getattr(devices.cupy(), "__name__", "").endswith("cupy_standin"),
                                reason="reads the CuPy stand-in's counters")


def on(device, *arrays):
    return [devices.move(a, devices.canonical(device)) for a in arrays]


def host(a):
    return devices.move(a, "cpu")


def bits(a):
    """a's bytes as unsigned integers: equal bits, not just equal values (-0.0 is not 0.0, NaN is NaN)."""
    a = np.ascontiguousarray(host(a))
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])


def data(rng, shape, dtype):
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def unfused_keep(stream, shape, p, dtype):
    """nn.functional._dropout_keep's arithmetic on `stream`: kept = uniform >= p, then kept * 1 / (1 - p)."""
    kept = stream.random(shape, dtype=np.float32) >= p
    return kept.astype(dtype) * (1.0 / (1.0 - p))


# ----------------------------------------------------------------------------- the kernel
@on_kernel_devices
@by_storage_dtype
@pytest.mark.parametrize("p", [0.0, 0.2, 0.999])
@pytest.mark.parametrize("shape", [(1,), (37,), (3, 300), (2, 5, 131)])
def test_kernel_is_the_reference_bit_for_bit(device, dtype, p, shape):
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    x = data(rng, shape, dtype)
    for seed, offset in ((0, 0), (12345678901234567, 2**64 - 600)):      # the counter wraps around 2^64
        (got,) = on(device, dropout.multiply(*on(device, x), p, seed, offset, device))
        want = dropout.reference_multiply(x, p, seed, offset)
        assert host(got).dtype == dtype and host(got).shape == shape
        np.testing.assert_array_equal(bits(got), bits(want))


@by_storage_dtype
@pytest.mark.parametrize("p", [0.0, 0.2, 0.999])
def test_mask_is_the_gpu_streams_draw(dtype, p):
    """The kernel's y is the unfused x * keep, keep drawn by a Philox stream at the same counters: the
    stream's own draw (philox.cu on emu), and philox.reference_uniform >= p."""
    rng = np.random.default_rng(1)
    x = data(rng, (4, 77), dtype)
    x[0, :3] = [np.inf, -np.inf, np.nan]                 # dropped or kept, as the unfused product treats them
    seed, offset = 987654321, 5000
    stream = random.PhiloxStream("emu", seed, offset)
    with np.errstate(invalid="ignore"):                    # inf * 0 is NaN, in both
        want = x * unfused_keep(stream, x.shape, p, dtype)
    assert stream.offset == offset + x.size
    got = dropout.multiply(x, p, seed, offset, "emu")
    np.testing.assert_array_equal(bits(got), bits(want))
    kept = (philox.reference_uniform(x.size, seed, offset) >= p).reshape(x.shape)
    finite = np.isfinite(x.astype(np.float64))
    assert ((got.astype(np.float64) != 0) == (kept & (x.astype(np.float64) != 0)))[finite].all()
    if p == 0.999:
        assert kept.sum() < 5                            # almost everything dropped
    if p == 0.0:
        assert kept.all()


def test_the_16_bit_scale_is_the_unfused_masks():
    """The unfused mask holds 1 / (1 - p) in the data's dtype; the kernel gets that value, as a float32."""
    for dtype in STORAGE_DTYPES:
        mask = np.ones(3, bool).astype(dtype) * (1.0 / (1.0 - 0.3))
        assert mask.dtype == dtype and float(mask[0]) == float(dropout.scale_of(0.3, dtype))
    assert dropout.scale_of(0.3, dtypes.bfloat16) != dropout.scale_of(0.3, np.float32)


def test_in_place_on_a_spare_array():
    rng = np.random.default_rng(2)
    dy = data(rng, (3, 50), np.float32)
    want = dropout.reference_multiply(dy, 0.4, 11, 22)
    got = dropout.multiply(dy, 0.4, 11, 22, "emu", x_is_spare=True)
    assert got is dy
    np.testing.assert_array_equal(got, want)


def test_other_dtypes_take_the_reference():
    x = np.random.default_rng(3).standard_normal(40)                      # float64: no entry point
    np.testing.assert_array_equal(dropout.multiply(x, 0.3, 5, 6, "emu"), dropout.reference_multiply(x, 0.3, 5, 6))


# ----------------------------------------------------------------------------- the autograd Function
@on_kernel_devices
@by_storage_dtype
def test_backward_draws_the_same_mask_again(device, dtype):
    rng = np.random.default_rng(4)
    x = tg.tensor(data(rng, (6, 33), dtype), device=device, requires_grad=True)
    dy = data(rng, (6, 33), dtype)
    y = fused.Dropout.apply(x, p=0.3, seed=77, offset=1234)
    assert type(y._ctx).__name__ == "Dropout" and y.dtype == dtype
    y.backward(tg.tensor(dy, device=device))
    np.testing.assert_array_equal(bits(y.data), bits(dropout.reference_multiply(host(x.data), 0.3, 77, 1234)))
    np.testing.assert_array_equal(bits(x.grad.data), bits(dropout.reference_multiply(dy, 0.3, 77, 1234)))


@on_kernel_devices
def test_gradient_of_the_gradient_is_the_composition(device):
    """create_graph=True differentiates the composition, x * keep with keep drawn by philox.cu at the same
    counters: its first gradient is the kernel's, and the gradient of that with respect to dy is keep."""
    rng = np.random.default_rng(5)
    x = tg.tensor(data(rng, (5, 40), np.float32), device=device, requires_grad=True)
    dy = tg.tensor(data(rng, (5, 40), np.float32), device=device, requires_grad=True)
    y = fused.Dropout.apply(x, p=0.5, seed=3, offset=9)
    (dx,) = tg.grad(y, [x], dy, create_graph=True)
    np.testing.assert_array_equal(host(dx.data), dropout.reference_multiply(host(dy.data), 0.5, 3, 9))
    dx.sum().backward()
    keep = dropout.reference_keep(200, 0.5, 3, 9, np.float32).reshape(5, 40)
    np.testing.assert_array_equal(host(dy.grad.data), keep)
    np.testing.assert_array_equal(host(fused.Dropout.composition(x, 0.5, 3, 9).data), host(y.data))


# ----------------------------------------------------------------------------- F.dropout
def test_cpu_keeps_its_numpy_mask():
    tg.manual_seed(21)
    y = F.dropout(tg.ones(500, device="cpu"), 0.3).numpy()
    want = (np.random.default_rng(21).random(500, dtype=np.float32) >= 0.3).astype(np.float32) * (1 / 0.7)
    np.testing.assert_array_equal(y, want)


def test_emu_uses_the_kernel_seeded_by_its_numpy_generator(monkeypatch):
    launched, launch = [], kernels.runtime.launch
    monkeypatch.setattr(kernels.runtime, "launch", lambda device, f, k, *a, **o: (launched.append(k),
                                                                                  launch(device, f, k, *a, **o)))
    x = tg.ones(300, device="emu", requires_grad=True)
    tg.manual_seed(8)
    first = F.dropout(x, 0.5)
    first.sum().backward()
    assert launched == ["dropout_multiply", "dropout_multiply"]           # one launch each way
    tg.manual_seed(8)
    np.testing.assert_array_equal(F.dropout(x, 0.5).numpy(), first.numpy())   # reproducible under manual_seed
    np.testing.assert_array_equal(x.grad.numpy(), first.numpy())
    tg.manual_seed(8)
    seed, offset = random.philox_counters("emu", 300)
    want = dropout.reference_multiply(np.ones(300, np.float32), 0.5, seed, offset)
    np.testing.assert_array_equal(first.numpy(), want)
    with kernels.fused(False):
        assert type(F.dropout(x, 0.5)._ctx).__name__ != "Dropout"


@pytest.mark.skipif(not tg.cuda_available(), reason="no cuda device (a GPU, or TINYGRAD_GPU_CUPY=standin)")
@by_storage_dtype
def test_on_a_gpu_fused_dropout_gives_the_unfused_numbers(dtype):
    """Same seed, same counters, same arithmetic: a GPU training run's masks and losses do not change."""
    x0 = data(np.random.default_rng(6), (7, 61), dtype)
    dy = tg.tensor(data(np.random.default_rng(7), (7, 61), dtype), device="cuda")
    results = []
    for enabled in (True, False):
        with kernels.fused(enabled):
            tg.manual_seed(13)
            x = tg.tensor(x0, device="cuda", requires_grad=True)
            y = F.dropout(F.dropout(x, 0.2), 0.6)                            # two draws: the stream moves on
            assert (type(y._ctx).__name__ == "Dropout") == enabled
            y.backward(dy)
            results.append((bits(y.data), bits(x.grad.data), random.generator(x.device).offset))
    (y1, g1, offset1), (y2, g2, offset2) = results
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(g1, g2)
    assert offset1 == offset2 == 2 * x0.size


@on_standin
def test_on_the_standin_a_dropout_is_one_launch_and_one_array_each_way(monkeypatch):
    from tinygrad_gpu import gradient_sums
    from tinygrad_gpu.testing.cupy_standin import counters
    monkeypatch.setattr(gradient_sums, "CHECK_SPARE", False)    # the suite's own check reads pointers on the host
    x = tg.ones(4, 64, device="cuda", requires_grad=True)
    counters.reset()
    y = F.dropout(x, 0.2)
    assert (counters.launches, counters.allocations) == (1, 1)
    dy = tg.ones(4, 64, device="cuda")
    counters.reset()
    y.backward(dy)
    assert counters.raw_launches == 1


# ----------------------------------------------------------------------------- residual + dropout(branch)
ADD_DEVICES = ["emu", pytest.param("cuda", marks=pytest.mark.skipif(
    not tg.cuda_available(), reason="no cuda device (a GPU, or TINYGRAD_GPU_CUPY=standin)"))]


@pytest.mark.parametrize("device", ADD_DEVICES)
@by_storage_dtype
def test_dropout_add_gives_the_unfused_numbers_each_way(device, dtype):
    """F.dropout_add(residual, x) against residual + F.dropout(x), two ops (each its own kernel; the dropout's
    numbers against the unfused mask's are the test above): the same bits forward, the same bits for both
    gradients, a branch's gradient in the branch's dtype, and the stream moved on as far (the next draw the
    same)."""
    rng = np.random.default_rng(21)
    r0, x0, dy0 = data(rng, (3, 5, 67), np.float32), data(rng, (3, 5, 67), dtype), data(rng, (3, 5, 67), np.float32)
    results = []
    for one_op in (True, False):
        tg.manual_seed(14)
        r = tg.tensor(r0, device=device, requires_grad=True)
        x = tg.tensor(x0, device=device, requires_grad=True)
        y = F.dropout_add(r, x, 0.3) if one_op else r + F.dropout(x, 0.3)
        assert (type(y._ctx).__name__ == "DropoutAdd") == one_op and y.dtype == np.float32
        y.backward(tg.tensor(dy0, device=device))
        assert x.grad.dtype == dtype
        results.append((bits(y.data), bits(r.grad.data), bits(x.grad.data), tg.rand(3, device=device).numpy()))
    for one_op_result, two_ops_result in zip(*results):
        np.testing.assert_array_equal(one_op_result, two_ops_result)
    with kernels.fused(False):
        assert type(F.dropout_add(r, x, 0.3)._ctx).__name__ != "DropoutAdd"


def test_dropout_add_kernel_against_its_reference():
    rng = np.random.default_rng(22)
    for dtype in STORAGE_DTYPES:
        residual, x = data(rng, (9, 33), np.float32), data(rng, (9, 33), dtype)
        got = dropout.add(residual, x, 0.25, 99, 2 ** 64 - 100, "emu")       # the counter wraps around
        np.testing.assert_array_equal(bits(got), bits(dropout.reference_add(residual, x, 0.25, 99, 2 ** 64 - 100)))
        dy = data(rng, (9, 33), np.float32)
        got = dropout.multiply(dy, 0.25, 5, 6, "emu", dtype=dtype)
        assert got.dtype == dtype
        np.testing.assert_array_equal(bits(got), bits(dropout.reference_multiply(dy.astype(dtype), 0.25, 5, 6)))
    with pytest.raises(ValueError, match="dropout.multiply: a float16 x gives float16"):
        dropout.multiply(data(rng, 4, np.float16), 0.5, 1, 2, "emu", dtype=np.float32)


def test_dropout_add_outside_the_kernel_is_the_sum():
    """cpu, float64, a broadcast residual, eval mode, p = 0 and 1: the two ops it stands for."""
    r, x = tg.randn(4, 6, dtype=tg.float64, requires_grad=True), tg.randn(4, 6, dtype=tg.float64, requires_grad=True)
    assert tg.gradcheck(lambda r, x: F.dropout_add(r, x, 0.0), (r, x))
    np.testing.assert_array_equal(F.dropout_add(r, x, 0.5, training=False).numpy(), (r + x).numpy())
    np.testing.assert_array_equal(F.dropout_add(r, x, 1.0).numpy(), r.numpy())
    tg.manual_seed(2)
    got = F.dropout_add(tg.ones(6, device="emu"), tg.ones(4, 6, device="emu"), 0.5)     # broadcast: unfused
    assert type(got._ctx).__name__ != "DropoutAdd" and got.shape == (4, 6)


@on_standin
def test_on_the_standin_a_residual_add_with_a_16_bit_branch_is_one_launch_each_way(monkeypatch):
    from tinygrad_gpu import gradient_sums
    from tinygrad_gpu.testing.cupy_standin import counters
    monkeypatch.setattr(gradient_sums, "CHECK_SPARE", False)    # the suite's own check reads pointers on the host
    r = tg.ones(4, 64, device="cuda", requires_grad=True)
    x = tg.ones(4, 64, device="cuda", dtype=tg.bfloat16, requires_grad=True)
    counters.reset()
    y = F.dropout_add(r, x, 0.2)
    assert (counters.launches, counters.allocations) == (1, 1)
    counters.reset()
    y.backward(tg.ones(4, 64, device="cuda"))
    assert counters.raw_launches == 1


# ----------------------------------------------------------------------------- layer norm's optional pointers
def _poisoned_empty(monkeypatch):
    """layernorm.py's xp.empty on emu gives NaN-filled arrays: a kernel output left unwritten shows."""
    numpy_like = types.SimpleNamespace(**{name: getattr(np, name) for name in dir(np) if not name.startswith("__")})
    numpy_like.empty = lambda shape, dtype=np.float32: np.full(shape, np.nan, dtype)
    monkeypatch.setattr(layernorm.devices, "array_module", lambda device: numpy_like if device == "emu"
                        else devices.array_module(device))


@by_storage_dtype
def test_layernorm_without_a_bias_and_its_written_gradients(dtype, monkeypatch):
    rng = np.random.default_rng(9)
    rows, n = 5, 45
    x, weight, dout = data(rng, (rows, n), dtype), data(rng, n, dtype), data(rng, (rows, n), dtype)
    with_zeros = layernorm.forward(x, weight, np.zeros(n, dtype), 1e-5, "emu")
    _poisoned_empty(monkeypatch)
    out, mean, rstd = layernorm.forward(x, weight, None, 1e-5, "emu")
    assert mean.base is rstd.base is not None                 # one (2, rows) allocation
    for got, want in zip((out, mean, rstd), with_zeros):
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))    # -0.0 == +0.0
    dx, dweight, dbias = layernorm.backward(x, weight, mean, rstd, dout, True, "emu")
    want = layernorm.backward(x, weight, *with_zeros[1:], dout, True, "emu")
    for got, expected in zip((dx, dweight, dbias), want):
        assert not np.isnan(got.astype(np.float64)).any()
        np.testing.assert_array_equal(bits(got), bits(expected))
    dx2, dweight2, none = layernorm.backward(x, weight, mean, rstd, dout, True, "emu", need_bias=False)
    assert none is None
    np.testing.assert_array_equal(bits(dx2), bits(dx))
    np.testing.assert_array_equal(bits(dweight2), bits(dweight))
    assert layernorm.backward(x, weight, mean, rstd, dout, True, "cpu", need_bias=False)[2] is None


def test_layernorm_of_no_rows_has_zero_parameter_gradients():
    x, weight = np.zeros((0, 6), np.float32), np.ones(6, np.float32)
    out, mean, rstd = layernorm.forward(x, weight, None, 1e-5, "emu")
    dx, dweight, dbias = layernorm.backward(x, weight, mean, rstd, x, True, "emu")
    assert out.shape == dx.shape == (0, 6) and mean.shape == rstd.shape == (0,)
    np.testing.assert_array_equal(dweight, np.zeros(6))
    np.testing.assert_array_equal(dbias, np.zeros(6))


@on_standin
def test_on_the_standin_a_layer_norm_without_bias_allocates_only_what_its_kernels_write():
    from tinygrad_gpu.testing.cupy_standin import counters
    rng = np.random.default_rng(10)
    x, weight, dout = on("cuda", data(rng, (4, 40), np.float32), data(rng, 40, np.float32),
                         data(rng, (4, 40), np.float32))
    counters.reset()
    out, mean, rstd = layernorm.forward(x, weight, None, 1e-5, "cuda:0")
    assert (counters.launches, counters.allocations) == (1, 1)          # out, mean and rstd together
    counters.reset()
    layernorm.backward(x, weight, mean, rstd, dout, True, "cuda:0", need_bias=False)
    assert (counters.launches, counters.allocations) == (2, 2)          # dx and dweight, nothing zeroed
    counters.reset()
    layernorm.backward(x, weight, mean, rstd, dout, True, "cuda:0")
    assert (counters.launches, counters.allocations) == (2, 3)
