"""kernels/causal_attention.cu: causal attention tile by tile (online softmax, dropout drawn inside).

The kernels on emu against their NumPy reference (which defines them) and against today's plain version
(products around the causal_softmax kernel, the dropout as a drawn mask built from the same Philox
counters); odd lengths that are not a multiple of the tile, strided q, k, v cut from one projection,
float16 and bfloat16 entry points; the reference's gradients against central differences; and the
routing: nn.functional.scaled_dot_product_attention takes the kernels (one launch forward, two
backward, no causal_softmax) where they apply, the plain version elsewhere. Then the packed form
(fused.PackedCausalAttention): q, k, v cut as source[0], [1], [2] from one tensor go in as that one tensor,
and the backward kernels write the three gradients through strides into one buffer laid out like it:
the gradients of a GPT-like block against today's three-tensor op and a float64 reference, another use
of q beside the attention, second derivatives, the routing's refusals, and the launches it saves.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from tinygrad_gpu import device as devices
from tinygrad_gpu import dtypes, kernels, random
from tinygrad_gpu.kernels import causal_attention as ca
from tinygrad_gpu.kernels import dropout as dropout_kernel
from tinygrad_gpu.kernels import philox, runtime
from tinygrad_gpu.ops import fused

SIZES = [(2, 2, 37, 16), (1, 3, 1, 5), (1, 1, 33, 128), (2, 1, 70, 7)]      # (B, H, T, E); 37, 33, 70: odd tiles
DROPOUT = [None, (0.3, 12345678901234567, 2**64 - 1000)]                  # the counter wraps around 2^64


def normal(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def projection(rng, B, H, T, E, dtype=np.float32):
    """q, k, v as GPT cuts them: strided views of one (B, T, 3, H, E) array, each (B, H, T, E)."""
    return tuple(normal(rng, (B, T, 3, H, E), dtype).transpose(2, 0, 3, 1, 4))


def wide(a):
    return np.asarray(a, np.float64)


def close(got, want, rtol, atol_scale):
    """Relative to the largest value of `want`: sums of many products cancel."""
    np.testing.assert_allclose(wide(got), wide(want), rtol=rtol, atol=atol_scale * max(1.0, np.abs(wide(want)).max()))


# ----------------------------------------------------------------------------- the kernels against the reference
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dropout", DROPOUT, ids=["no-dropout", "dropout"])
def test_kernels_match_the_reference(size, dropout):
    rng = np.random.default_rng(sum(size))
    q, k, v = projection(rng, *size)
    scale = 1 / math.sqrt(size[-1])
    out, lse = ca.forward(q, k, v, scale, "emu", dropout)
    want_out, want_lse = ca.reference_forward(q, k, v, scale, dropout)
    close(out, want_out, 1e-5, 1e-6)
    close(lse.reshape(want_lse.shape), want_lse, 1e-5, 1e-6)
    dout = normal(rng, out.shape)
    grads = ca.backward(q, k, v, out, lse, dout, scale, "emu", dropout)
    wants = ca.reference_backward(q, k, v, want_out, want_lse, dout, scale, dropout)
    for got, want in zip(grads, wants):
        assert got.shape == q.shape and got.flags.c_contiguous
        close(got, want, 1e-4, 2e-6)


def test_the_output_is_laid_out_for_the_head_merge_and_strided_inputs_are_not_copied(monkeypatch):
    """out (B, H, T, E) lives in memory as (B, T, H, E): y.transpose(1, 2).reshape(B, T, C) is a view. The
    kernel gets the projection's own memory for q, k and v (three views into one buffer), not copies."""
    B, H, T, E = 2, 3, 9, 4
    q, k, v = projection(np.random.default_rng(1), B, H, T, E)
    launched, launch = [], runtime.launch
    monkeypatch.setattr(runtime, "launch", lambda device, f, name, grid, block, args, *rest:
                        (launched.append(args), launch(device, f, name, grid, block, args, *rest)))
    out, _ = ca.forward(q, k, v, 0.5, "emu")
    assert out.transpose(0, 2, 1, 3).flags.c_contiguous
    assert np.shares_memory(out.transpose(0, 2, 1, 3).reshape(B, T, H * E), out)
    buffers = launched[0][:3]
    assert all(np.shares_memory(a, q.base) for a in buffers)
    assert launched[0][8:17] == [np.int64(n) for n in (T * 3 * H * E, E, 3 * H * E)] * 3     # q's, k's, v's strides


@pytest.mark.parametrize("dtype", dtypes.HALF, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("dropout", DROPOUT, ids=["no-dropout", "dropout"])
def test_16_bit_entry_points(dtype, dropout):
    """float32 inside, each output rounded once: within a few steps of the 16-bit grid of the reference
    (which computes in float32 from the same 16-bit inputs)."""
    rng = np.random.default_rng(3)
    q, k, v = projection(rng, 2, 2, 37, 16, dtype)
    out, lse = ca.forward(q, k, v, 0.25, "emu", dropout)
    assert out.dtype == dtype and lse.dtype == np.float32
    want_out, want_lse = ca.reference_forward(q, k, v, 0.25, dropout)
    step = {dtypes.float16: 2.0**-10, dtypes.bfloat16: 2.0**-7}[np.dtype(dtype)]
    close(out, want_out, 2 * step, step)
    close(lse.reshape(want_lse.shape), want_lse, 1e-5, 1e-6)
    dout = normal(rng, out.shape, dtype)
    for got, want in zip(ca.backward(q, k, v, out, lse, dout, 0.25, "emu", dropout),
                         ca.reference_backward(q, k, v, out, want_lse, dout, 0.25, dropout)):
        assert got.dtype == dtype
        close(got, want, 2 * step, 2 * step)


# ----------------------------------------------------------------------------- against today's plain version
def plain_mask(shape, dropout):
    """Today's mask from the same counters: `random(shape) >= p` of a Philox draw, times 1 / (1 - p)."""
    p, seed, offset = dropout
    u = philox.reference_uniform(math.prod(shape), seed, offset).reshape(shape)
    return (u >= p).astype(np.float64) * (1.0 / (1.0 - p))


@pytest.mark.parametrize("size", SIZES[:2] + SIZES[3:])
@pytest.mark.parametrize("dropout", DROPOUT, ids=["no-dropout", "dropout"])
def test_kernels_match_the_plain_version(size, dropout):
    """The plain version in float64 on the cpu (the engine differentiating today's composition), with the
    dropout as a mask drawn from the counters the kernels read."""
    rng = np.random.default_rng(7)
    q, k, v = projection(rng, *size)
    dout = normal(rng, q.shape)
    B, H, T, E = size
    keep = None if dropout is None else tg.tensor(plain_mask((B, H, T, T), dropout), dtype=tg.float64)
    tensors = [tg.tensor(np.ascontiguousarray(a), dtype=tg.float64, requires_grad=True) for a in (q, k, v)]
    with kernels.fused(False):
        y = fused.CausalAttention.composition(*tensors, 0.4, keep=keep)
    y.backward(tg.tensor(dout, dtype=tg.float64))
    out, lse = ca.forward(q, k, v, 0.4, "emu", dropout)
    close(out, y.numpy(), 1e-4, 1e-6)
    for got, t in zip(ca.backward(q, k, v, out, lse, dout, 0.4, "emu", dropout), tensors):
        close(got, t.grad.numpy(), 1e-4, 2e-6)


def test_the_reference_gradients_are_derivatives():
    """Central differences of the reference's forward (float64) along a random direction of each input: the
    reference backward is the derivative of the reference forward (with a fixed dropout mask)."""
    rng = np.random.default_rng(11)
    shape, dropout = (1, 2, 6, 3), (0.25, 99, 5)
    q, k, v = (rng.standard_normal(shape) for _ in range(3))
    dout = rng.standard_normal(shape)

    def f(q, k, v):
        return (ca.reference_forward(q, k, v, 0.7, dropout)[0] * dout).sum()
    out, lse = ca.reference_forward(q, k, v, 0.7, dropout)
    grads = ca.reference_backward(q, k, v, out, lse, dout, 0.7, dropout)
    for n, grad in enumerate(grads):
        direction, h = rng.standard_normal(shape), 1e-6
        plus, minus = [list((q, k, v)) for _ in range(2)]
        plus[n], minus[n] = plus[n] + h * direction, minus[n] - h * direction
        numerical = (f(*plus) - f(*minus)) / (2 * h)
        assert np.isclose((grad * direction).sum(), numerical, rtol=1e-6, atol=1e-8)


def test_the_dropout_is_the_mask_the_stream_would_draw():
    """keep_ij is the Philox uniform at offset + row-major index >= p: the decisions of philox.uniform's draw
    on emu (the kernel), and p = 1 keeps nothing."""
    shape, (p, seed, offset) = (2, 3, 5, 5), (0.4, 2024, 17)
    drawn = philox.uniform("emu", math.prod(shape), seed, offset).reshape(shape) >= np.float32(p)
    np.testing.assert_array_equal(dropout_kernel.reference_keep(math.prod(shape), p, seed, offset, np.float32)
                                  .reshape(shape) != 0, drawn)
    q, k, v = projection(np.random.default_rng(0), 1, 1, 5, 4)
    out, _ = ca.forward(q, k, v, 1.0, "emu", (1.0, seed, offset))
    assert not out.any()


# ----------------------------------------------------------------------------- routing
def kernel_device():
    """The stand-in's (or a GPU's) cuda when it is the default device (the cuda pass), else emu."""
    default = devices.default_device()
    return default if devices.is_cuda(default) else "emu"


def test_scaled_dot_product_attention_runs_the_kernels_and_nothing_else(monkeypatch):
    device = kernel_device()
    launched, launch = [], runtime.launch
    monkeypatch.setattr(runtime, "launch", lambda d, f, name, *rest, **options:
                        (launched.append(name), launch(d, f, name, *rest, **options)))
    rng = np.random.default_rng(5)
    qkv = tg.tensor(normal(rng, (2, 37, 3, 2, 8)), device=device, requires_grad=True)
    q, k, v = qkv.permute(2, 0, 3, 1, 4)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.2)
    assert launched == ["causal_attention_forward"]       # the dropout's mask too: no philox draw
    (y * y).sum().backward()
    assert launched == ["causal_attention_forward", "causal_attention_backward_dq", "causal_attention_backward_dkdv"]
    assert qkv.grad.shape == qkv.shape


def test_scaled_dot_product_attention_with_dropout_matches_the_plain_version():
    """The same counters give the same mask: on a GPU's stream the kernels read exactly the counters the
    plain version's drawn mask reads, so the two agree after the same manual_seed; on emu (whose plain mask
    comes from NumPy's generator) the plain version is given the mask of the counters the kernels got."""
    device = kernel_device()
    rng = np.random.default_rng(8)
    arrays = [normal(rng, (2, 2, 37, 16)) for _ in range(3)]
    dout = normal(rng, (2, 2, 37, 16))

    def run(fused_on):
        tensors = [tg.tensor(a, device=device, requires_grad=True) for a in arrays]
        tg.manual_seed(3)
        with kernels.fused(fused_on):
            if fused_on or devices.is_cuda(device):
                y = F.scaled_dot_product_attention(*tensors, is_causal=True, dropout_p=0.3)
            else:
                seed, offset = random.philox_counters(device, 2 * 2 * 37 * 37)
                keep = tg.tensor(plain_mask((2, 2, 37, 37), (0.3, seed, offset)).astype(np.float32), device=device)
                y = fused.CausalAttention.composition(*tensors, 0.25, keep=keep)
        y.backward(tg.tensor(dout, device=device))
        return [y.numpy()] + [t.grad.numpy() for t in tensors]
    for got, want in zip(run(True), run(False)):
        close(got, want, 1e-4, 2e-6)


def test_the_plain_version_stays_where_the_kernels_do_not_apply(monkeypatch):
    launched, launch = [], runtime.launch
    monkeypatch.setattr(runtime, "launch", lambda d, f, name, *rest, **options:
                        (launched.append(name), launch(d, f, name, *rest, **options)))
    rng = np.random.default_rng(9)
    q, k, v = (tg.tensor(normal(rng, (1, 2, 5, 4)), device="emu", dtype=tg.float64) for _ in range(3))
    F.scaled_dot_product_attention(q, k, v, is_causal=True)               # float64: the plain version
    q, k, v = (tg.tensor(normal(rng, (1, 2, 5, 4)), device="emu") for _ in range(3))
    F.scaled_dot_product_attention(q, k, v)                                # not causal
    assert not any(name.startswith("causal_attention") for name in launched)
    assert not fused.CausalAttention.runs_kernel(q, k[:, :, :3], v[:, :, :3])    # L != S: a kv cache's step
    assert not fused.CausalAttention.runs_kernel(*(tg.tensor(normal(rng, (1, 1, 3, 129)), device="emu")
                                                   for _ in range(3)))           # heads of more than 128
    cpu = [tg.tensor(normal(rng, (1, 2, 5, 4)), device="cpu", dtype=tg.float64) for _ in range(3)]
    assert not fused.CausalAttention.runs_kernel(*cpu)                          # the cpu's twin: float32 only
    cpu = [t.float() for t in cpu]
    assert fused.CausalAttention.runs_kernel(*cpu) == compiled_twin_runs()
    assert not fused.CausalAttention.runs_kernel(*cpu, dropout_p=0.1)          # it draws no dropout


# ----------------------------------------------------------------------------- the cpu's compiled twin
def compiled_twin_runs() -> bool:
    """Does the cpu run the kernels' twin here (kernels/compiled_attention.py: numba's compiled path and MKL)?"""
    q = np.zeros((1, 1, 2, 2), np.float32)
    return ca.supports(q, q, q, "cpu")


needs_twin = pytest.mark.skipif(not compiled_twin_runs(), reason="the cpu's twin needs numba and MKL (the "
                                "compiled and mkl extras)")


def laid_out(rng, B, H, T, E, layout):
    """q, k, v as GPT cuts them from its projection, or three contiguous (B, H, T, E) arrays, or three of
    another layout ((B, T, H, E) memory: the heads' rows interleaved)."""
    if layout == "projection":
        return projection(rng, B, H, T, E)
    if layout == "interleaved":
        return tuple(normal(rng, (B, T, H, E)).transpose(0, 2, 1, 3) for _ in range(3))
    return tuple(normal(rng, (B, H, T, E)) for _ in range(3))


def as_accurate(got, float32, exact, largest_score):
    """got within 8 times the float32 reference's own distance from the float64 one, plus what rounding the scores
    alone may cost (a score s of float32 is off by up to s * eps, and exp turns that into a relative error of the
    probabilities: 8 eps times the largest |s|, and 1e-6, of the largest value): about as accurate as the
    definition computed in float32, which large scores make inexact whatever the order of the sums."""
    got, float32, exact = (wide(a) for a in (got, float32, exact))
    eps = np.finfo(np.float32).eps
    limit = 8 * np.abs(float32 - exact).max() + (1e-6 + 8 * eps * largest_score) * max(1.0, np.abs(exact).max())
    assert np.abs(got - exact).max() <= limit


def twin_against_the_reference(q, k, v, dout, scale):
    """The twin's out, lse, dq, dk, dv against reference_forward and reference_backward, in float32 and float64."""
    out, lse = ca.forward(q, k, v, scale, "cpu")
    assert out.transpose(0, 2, 1, 3).flags.c_contiguous                # laid out for the heads' merge, as on a GPU
    grads = ca.backward(q, k, v, out, lse, dout, scale, "cpu")
    float32 = ca.reference_forward(q, k, v, scale)
    wq, wk, wv = (wide(a) for a in (q, k, v))
    exact = ca.reference_forward(wq, wk, wv, scale)
    float32 += ca.reference_backward(q, k, v, *float32, dout, scale)
    exact += ca.reference_backward(wq, wk, wv, *exact, wide(dout), scale)
    largest_score = abs(scale) * (np.abs(wq) @ np.abs(wk).swapaxes(-1, -2)).max()
    for got, f, e in zip((out, lse.reshape(exact[1].shape), *grads), float32, exact):
        assert got.shape == e.shape and got.dtype == np.float32
        as_accurate(got, f, e, largest_score)


@needs_twin
@pytest.mark.parametrize("size", SIZES + [(12, 4, 64, 32), (1, 2, 256, 16)], ids=str)
@pytest.mark.parametrize("layout", ["projection", "contiguous", "interleaved"])
def test_the_cpu_twin_matches_the_reference(size, layout):
    rng = np.random.default_rng(sum(size))
    q, k, v = laid_out(rng, *size, layout)
    B, H, T, E = size
    twin_against_the_reference(q, k, v, normal(rng, (B, H, T, E)), 1 / math.sqrt(E))


@needs_twin
@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 3), H=st.integers(1, 3), T=st.integers(1, 70), E=st.integers(1, 40),
       layout=st.sampled_from(["projection", "contiguous", "interleaved"]), magnitude=st.sampled_from([1e-3, 1, 30]),
       scale=st.floats(0.01, 4), seed=st.integers(0, 2 ** 16))
def test_the_cpu_twin_matches_the_reference_for_any_size_and_magnitude(B, H, T, E, layout, magnitude, scale, seed):
    """Scores from tiny to far beyond exp's range (magnitude 30, scale up to 4: the row's largest is subtracted
    before the exp, as the kernels and the reference do)."""
    rng = np.random.default_rng(seed)
    q, k, v = (a * np.float32(magnitude) for a in laid_out(rng, B, H, T, E, layout))
    twin_against_the_reference(q, k, v, normal(rng, (B, H, T, E)), scale)


@pytest.mark.parametrize("device", ["emu", "cpu"])
def test_a_broadcast_gradient_is_read_as_the_values_it_stands_for(device):
    """y.sum()'s backward hands the attention a gradient of ones with every stride 0. The kernels read their
    operands through strides with the last one taken as contiguous, and MKL reads rows of at least E: such a
    gradient is copied first (it was read as one value and whatever memory followed it)."""
    size = (2, 2, 5, 3) if device == "emu" else (3, 2, 64, 32)     # the cpu's copy as large as its scratch
    q, k, v = projection(np.random.default_rng(8), *size)
    out, lse = ca.forward(q, k, v, 0.5, device)
    ones = np.broadcast_to(np.float32(1), out.shape)
    want = ca.reference_backward(q, k, v, *ca.reference_forward(q, k, v, 0.5), np.ones(out.shape, np.float32), 0.5)
    for got, w in zip(ca.backward(q, k, v, out, lse, ones, 0.5, device), want):
        close(got, w, 1e-5, 1e-6)
    for _ in range(3):                      # the copy is read while the kernel runs (not freed before it)
        dq, dk, dv = ca.backward(q, k, v, out, lse, ones, 0.5, device, need=(True, False, True))
        assert dk is None
        close(dq, want[0], 1e-5, 1e-6)
        close(dv, want[2], 1e-5, 1e-6)
    tensors = [tg.tensor(a.copy(), device=device, requires_grad=True) for a in (q, k, v)]
    F.scaled_dot_product_attention(*tensors, is_causal=True, scale=0.5).sum().backward()
    for t, w in zip(tensors, want):
        close(t.grad.numpy(), w, 1e-5, 1e-6)


@needs_twin
def test_the_cpu_twin_writes_into_the_buffer_it_is_given_and_only_what_is_wanted():
    B, H, T, E = 2, 3, 37, 8
    q, k, v = projection(np.random.default_rng(4), B, H, T, E)
    out, lse = ca.forward(q, k, v, 0.3, "cpu")
    dout = normal(np.random.default_rng(5), out.shape)
    contiguous = ca.backward(q, k, v, out, lse, dout, 0.3, "cpu")
    buffer = np.full((B, T, 3, H, E), np.nan, np.float32)
    slices = tuple(buffer.transpose(2, 0, 3, 1, 4))
    written = ca.backward(q, k, v, out, lse, dout, 0.3, "cpu", grads=slices)
    assert all(w is s for w, s in zip(written, slices))
    for got, want in zip(written, contiguous):
        np.testing.assert_array_equal(got, want)                           # the same products, the same bits
    buffer[...] = np.nan
    dq, dk, dv = ca.backward(q, k, v, out, lse, dout, 0.3, "cpu", need=(False, True, False), grads=slices)
    assert dq is None and dv is None and dk is slices[1]
    assert np.isnan(buffer[:, :, 0::2]).all() and not np.isnan(buffer[:, :, 1]).any()


def test_the_cpu_runs_the_plain_version_where_the_twin_cannot(monkeypatch):
    """float64, dropout, NumPy's fast path or the reference, no MKL: the plain version (products around
    causal_softmax)."""
    from tinygrad_gpu.kernels import cpu_paths, mkl_products
    rng = np.random.default_rng(3)

    def run(dtype=tg.float32, dropout_p=0.0):
        tensors = [tg.tensor(a, dtype=dtype, device="cpu", requires_grad=True) for a in projection(rng, 2, 2, 6, 4)]
        y = F.scaled_dot_product_attention(*tensors, is_causal=True, dropout_p=dropout_p)
        tiled = y.grad_fn.tiled
        y.backward(tg.ones_like(y))
        return tiled

    assert run() == compiled_twin_runs()
    assert not run(tg.float64) and not run(dropout_p=0.2)
    monkeypatch.setenv(cpu_paths.CPU_KERNELS, "numpy")
    assert not run()
    monkeypatch.setenv(cpu_paths.CPU_KERNELS, "reference")
    assert not run()
    if cpu_paths.numba_installed():
        from tinygrad_gpu.kernels import compiled_attention        # it imports numba
        monkeypatch.setenv(cpu_paths.CPU_KERNELS, "compiled")
        monkeypatch.setattr(mkl_products, "library", lambda: None)
        assert not run()
        assert not compiled_attention.takes(*projection(rng, 1, 1, 3, 2))


# ----------------------------------------------------------------------------- gradients written through strides
@pytest.mark.parametrize("dropout", DROPOUT, ids=["no-dropout", "dropout"])
@pytest.mark.parametrize("dtype", [np.float32, dtypes.bfloat16], ids=["float32", "bfloat16"])
def test_the_backward_writes_into_one_buffer_laid_out_like_the_projection(dropout, dtype):
    """Given dq, dk, dv as the three slices of one (B, T, 3, H, E) buffer, the kernels write each through its
    strides: the same numbers as the contiguous arrays they write otherwise, every element written, and the
    buffer's (B, T, 3 C) form is the gradient of the projection with no copy."""
    B, H, T, E = 2, 3, 37, 8
    q, k, v = projection(np.random.default_rng(4), B, H, T, E, dtype)
    out, lse = ca.forward(q, k, v, 0.3, "emu", dropout)
    dout = normal(np.random.default_rng(5), out.shape, dtype)
    contiguous = ca.backward(q, k, v, out, lse, dout, 0.3, "emu", dropout)
    buffer = np.full((B, T, 3, H, E), np.nan, dtype)                  # NaN: an element left unwritten shows
    slices = tuple(buffer.transpose(2, 0, 3, 1, 4))
    written = ca.backward(q, k, v, out, lse, dout, 0.3, "emu", dropout, grads=slices)
    assert all(w is s for w, s in zip(written, slices))
    for got, want in zip(written, contiguous):
        np.testing.assert_array_equal(wide(got), wide(want))              # one kernel, the same arithmetic
    assert not np.isnan(wide(buffer)).any()
    # only dk wanted: the slices of dq and of dv (which the dkdv kernel computes too) are left alone
    buffer[...] = np.nan
    dq, dk, dv = ca.backward(q, k, v, out, lse, dout, 0.3, "emu", dropout, need=(False, True, False), grads=slices)
    assert dq is None and dv is None and dk is slices[1]
    assert np.isnan(wide(buffer[:, :, 0::2])).all() and not np.isnan(wide(buffer[:, :, 1])).any()


def test_a_destination_the_kernels_cannot_write_through_strides_gets_a_copy():
    """A given array whose last dimension is not contiguous (or of another dtype) is not written through
    strides: the kernel writes a contiguous array, copied into it. The reference path (float64) fills it too."""
    q, k, v = projection(np.random.default_rng(6), 1, 2, 9, 4)
    out, lse = ca.forward(q, k, v, 0.5, "emu")
    dout = normal(np.random.default_rng(7), out.shape)
    want = ca.backward(q, k, v, out, lse, dout, 0.5, "emu")
    odd = [np.zeros((1, 2, 9, 8), np.float32)[..., ::2] for _ in range(3)]
    got = ca.backward(q, k, v, out, lse, dout, 0.5, "emu", grads=odd)
    for g, o, w in zip(got, odd, want):
        assert g is o
        np.testing.assert_array_equal(g, w)
    q64, k64, v64, out64, dout64 = (a.astype(np.float64) for a in (q, k, v, out, dout))
    into = [np.zeros(q.shape) for _ in range(3)]
    got = ca.backward(q64, k64, v64, out64, lse.astype(np.float64), dout64, 0.5, "emu", grads=into)
    assert all(g is i for g, i in zip(got, into)) and all(i.any() for i in into)


def test_stacked_finds_the_projection_and_refuses_memory_with_holes():
    B, H, T, E = 2, 3, 5, 4
    whole = np.zeros((B, T, 3, H, E), np.float32)
    cut = whole.transpose(2, 0, 3, 1, 4)
    again = ca.stacked(*cut)
    assert again.shape == cut.shape and again.strides == cut.strides and runtime.address(again) == runtime.address(cut)
    wider = np.zeros((B, T, 3, H, E + 1), np.float32)[..., :E].transpose(2, 0, 3, 1, 4)    # a gap after each row
    assert ca.stacked(*wider) is None
    assert ca.stacked(cut[1], cut[0], cut[2]) is None                   # not in order
    assert ca.stacked(cut[0], cut[1], np.zeros_like(cut[2])) is None    # another buffer


# ----------------------------------------------------------------------------- the packed op in a GPT-like block
B_, T_, H_, E_ = 2, 37, 2, 8


def block(device, dtype, dropout_p, *, packed=True, also_q=False, monkeypatch=None, keep=None, create_graph=False):
    """A GPT attention block's forward and backward, as gpt.CausalSelfAttention cuts q, k, v: (output,
    gradients of x, of c_attn's and c_proj's weights). packed=False: today's three-tensor op (the routing to
    the packed one switched off); keep: a float64 run of the plain version with that dropout mask. also_q:
    q is used once more beside the attention. create_graph: the gradients are differentiated once more."""
    rng = np.random.default_rng(21)
    C = H_ * E_
    x, w_attn, w_proj, g, r = (normal(rng, shape) for shape in ((B_, T_, C), (3 * C, C), (C, C), (B_, T_, C),
                                                                 (B_, H_, T_, E_)))
    x, w_attn, w_proj = (tg.tensor(a, device=device, dtype=dtype, requires_grad=True) for a in (x, w_attn, w_proj))
    g, r = (tg.tensor(a, device=device, dtype=dtype) for a in (g, r))
    tg.manual_seed(17)
    q, k, v = (x @ w_attn.T).reshape(B_, T_, 3, H_, E_).permute(2, 0, 3, 1, 4)
    with monkeypatch.context() as patch:
        if not packed:
            patch.setattr(fused.PackedCausalAttention, "source_of", staticmethod(lambda q, k, v: None))
        if keep is not None:
            y = fused.CausalAttention.composition(q, k, v, 1 / math.sqrt(E_), keep=keep)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    if keep is None and (fused.CausalAttention.runs_kernel(q, k, v) or device == "cpu"):
        assert type(y.grad_fn) is (fused.PackedCausalAttention if packed else fused.CausalAttention)
    out = y.transpose(1, 2).reshape(B_, T_, C) @ w_proj.T
    loss = (out * g).sum() + ((q * r).sum() if also_q else 0)
    if create_graph:
        grads = tg.grad(loss, [x, w_attn, w_proj], create_graph=True)
        (sum((gr * gr).sum() for gr in grads)).backward()
    else:
        loss.backward()
    return [out.numpy()] + [t.grad.numpy() for t in (x, w_attn, w_proj)]


def counters_of_the_dropout(monkeypatch):
    """Record the Philox counters scaled_dot_product_attention reserves for the kernels' dropout."""
    drawn, draw = [], random.philox_counters
    monkeypatch.setattr(random, "philox_counters", lambda device, n: drawn.append(draw(device, n)) or drawn[-1])
    return drawn


@pytest.mark.parametrize("also_q", [False, True], ids=["attention-only", "q-used-twice"])
@pytest.mark.parametrize("dropout_p", [0.0, 0.2], ids=["no-dropout", "dropout"])
def test_the_packed_block_has_todays_gradients_and_the_float64_references(monkeypatch, dropout_p, also_q):
    """Packed against today's op (the same kernels: the same numbers, summed in another order at most) and
    against the plain version in float64 on the cpu with the dropout mask of the counters the kernels read.
    With q used once more, that use's gradient flows through q's slice into the same projection."""
    device = kernel_device()
    drawn = counters_of_the_dropout(monkeypatch)
    packed = block(device, tg.float32, dropout_p, also_q=also_q, monkeypatch=monkeypatch)
    today = block(device, tg.float32, dropout_p, packed=False, also_q=also_q, monkeypatch=monkeypatch)
    for got, want in zip(packed, today):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    shape = (B_, H_, T_, T_)
    keep = None
    if dropout_p:
        assert len(drawn) == 2 and drawn[0] == drawn[1]                  # both runs drew the same mask
        keep = tg.tensor(plain_mask(shape, (dropout_p, *drawn[0])), dtype=tg.float64, device="cpu")
    else:
        keep = tg.ones(shape, dtype=tg.float64, device="cpu")
    reference = block("cpu", tg.float64, dropout_p, also_q=also_q, monkeypatch=monkeypatch, keep=keep)
    for got, want in zip(packed, reference):
        close(got, want, 1e-4, 1e-5)


@pytest.mark.parametrize("also_q", [False, True], ids=["attention-only", "q-used-twice"])
@pytest.mark.parametrize("dropout_p", [0.0, 0.2], ids=["no-dropout", "dropout"])
def test_the_cpu_packs_too_with_todays_numbers_bit_for_bit(monkeypatch, dropout_p, also_q):
    """On the cpu the packed op runs the plain version, whose backward writes dq, dk and dv into the one buffer
    with out=: the same products as the three-tensor op's, so the same bits, dropout (NumPy's mask) included."""
    packed = block("cpu", tg.float32, dropout_p, also_q=also_q, monkeypatch=monkeypatch)
    today = block("cpu", tg.float32, dropout_p, packed=False, also_q=also_q, monkeypatch=monkeypatch)
    for got, want in zip(packed, today):
        np.testing.assert_array_equal(got, want)


def test_second_derivatives_through_the_packed_op_are_todays(monkeypatch):
    """create_graph differentiates the packed op's composition (CausalAttention's on the three slices):
    the same gradients of gradients as today's op, whose composition is the same."""
    device = kernel_device()
    packed = block(device, tg.float32, 0.2, monkeypatch=monkeypatch, create_graph=True)
    today = block(device, tg.float32, 0.2, packed=False, monkeypatch=monkeypatch, create_graph=True)
    for got, want in zip(packed, today):
        close(got, want, 1e-5, 1e-6)


def test_tg_grad_of_q_itself_goes_through_the_packed_op():
    """q, k and v are the packed op's inputs too: asked for by tg.grad, their own gradients come back (today's
    op's), where otherwise the gradient would go to the projection and q would look unused."""
    device = kernel_device()
    rng = np.random.default_rng(8)
    source = tg.tensor(normal(rng, (B_, T_, 3, H_, E_)), device=device, requires_grad=True) * 1.0
    g = tg.tensor(normal(rng, (B_, H_, T_, E_)), device=device)
    grads = []
    for route in ("packed", "today"):
        q, k, v = source.permute(2, 0, 3, 1, 4)
        y = (F.scaled_dot_product_attention(q, k, v, is_causal=True) if route == "packed" else
             fused.CausalAttention.apply(q, k, v, scale=1 / math.sqrt(E_)))
        if route == "packed" and fused.CausalAttention.runs_kernel(q, k, v):
            assert type(y.grad_fn) is fused.PackedCausalAttention
        grads.append([t.numpy() for t in tg.grad((y * g).sum(), [q, v])])
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_the_routing_packs_only_three_slices_of_one_tensor():
    device = kernel_device()
    rng = np.random.default_rng(2)
    qkv = tg.tensor(normal(rng, (2, 9, 3, 2, 4)), device=device, requires_grad=True)
    cut = qkv.permute(2, 0, 3, 1, 4)
    source_of = fused.PackedCausalAttention.source_of
    q, k, v = cut
    source = source_of(q, k, v)
    assert source is not None and source.grad_fn is cut.grad_fn and source.shape == cut.shape
    assert runtime.address(source.data) == runtime.address(cut.data) and source.data.strides == cut.data.strides
    leaf = tg.tensor(normal(rng, (3, 2, 2, 9, 4)), device=device, requires_grad=True)
    assert source_of(*leaf) is leaf                                      # a leaf stands for itself
    with tg.no_grad():
        assert source_of(*cut) is None                                   # nothing is recorded
    assert source_of(cut[1], cut[0], cut[2]) is None                     # not source[0], [1], [2]
    assert source_of(q, k, cut[2] * 1) is None                           # another op made v
    other = qkv.permute(2, 0, 3, 1, 4)
    assert source_of(q, k, other[2]) is None                             # another tensor's slice
    four = tg.tensor(normal(rng, (4, 2, 2, 9, 4)), device=device, requires_grad=True)
    assert source_of(four[0], four[1], four[2]) is None                  # three of four
    untracked = tg.tensor(normal(rng, (3, 2, 2, 9, 4)), device=device)
    assert source_of(*untracked) is None                                 # no gradient wanted
    wide_leaf = tg.tensor(normal(rng, (3, 2, 2, 9, 5)), device=device, requires_grad=True)
    gappy = wide_leaf[:, :, :, :, :4]
    assert source_of(*gappy) is None                                     # memory with holes
    used = tg.tensor(normal(rng, (3, 2, 2, 9, 4)), device=device, requires_grad=True) * 1
    a, b, c = used
    (a.sum() + b.sum() + c.sum()).backward()                             # frees the slices' nodes
    assert source_of(a, b, c) is None


@pytest.mark.parametrize("where", ["kernels", "cpu"])
def test_an_intermediate_source_sends_its_gradient_on_without_copies(where):
    """The gradient reaching qkv's projection (B, T, 3 C) through the permute and the reshape is the packed
    op's buffer itself, viewed: contiguous, in one allocation (on the cpu too, where the products write it)."""
    device = kernel_device() if where == "kernels" else "cpu"
    rng = np.random.default_rng(12)
    proj = tg.tensor(normal(rng, (2, 9, 3 * 2 * 4)), device=device, requires_grad=True)
    q, k, v = proj.reshape(2, 9, 3, 2, 4).permute(2, 0, 3, 1, 4)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert type(y.grad_fn) is fused.PackedCausalAttention
    (grad,) = tg.grad(y.transpose(1, 2).reshape(2, 9, 8).sum(), [proj])
    assert grad.shape == proj.shape and grad.data.flags.c_contiguous
    owner = ca._owner(grad.data)                                        # the buffer itself, not a copy of it
    assert owner.size == grad.data.size and runtime.address(owner) == runtime.address(grad.data) and owner.ndim == 5


def on_standin():
    return getattr(devices.cupy(), "__name__", "").endswith("cupy_standin") and tg.cuda_available()


@pytest.mark.skipif(not on_standin(), reason="reads the CuPy stand-in's counters (the cuda pass)")
@pytest.mark.parametrize("dropout_p", [0.0, 0.2], ids=["no-dropout", "dropout"])
def test_one_layers_attention_backward_is_two_launches_and_one_allocation(monkeypatch, dropout_p):
    """From the gradient of the merged heads (B, T, C) to the gradient of the projection (B, T, 3 C): the dq
    and dkdv kernels and the one buffer they write, nothing else (no zero fill, no slice sums, no copies at
    the permute and the reshape). Today's three-tensor op needs several launches and allocations more."""
    from tinygrad_gpu import gradient_sums
    from tinygrad_gpu.testing.cupy_standin import counters
    monkeypatch.setattr(gradient_sums, "CHECK_SPARE", False)     # the suite's own check reads pointers on the host
    B, T, H, E = 2, 33, 2, 8

    def backward_counts(packed):
        proj = tg.tensor(normal(np.random.default_rng(1), (B, T, 3 * H * E)), device="cuda", requires_grad=True)
        dy = tg.tensor(normal(np.random.default_rng(2), (B, T, H * E)), device="cuda")
        with monkeypatch.context() as patch:
            if not packed:
                patch.setattr(fused.PackedCausalAttention, "source_of", staticmethod(lambda q, k, v: None))
            q, k, v = proj.reshape(B, T, 3, H, E).permute(2, 0, 3, 1, 4)
            tg.manual_seed(5)                                  # both runs: the same dropout
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
        merged = y.transpose(1, 2).reshape(B, T, H * E)
        counters.reset()
        (grad,) = tg.grad(merged, [proj], grad_outputs=dy)      # as it reaches c_attn's backward: no leaf's copy
        return counters.launches, counters.raw_launches, counters.allocations, grad.numpy()
    launches, ours, allocations, grad = backward_counts(packed=True)
    assert (launches, ours, allocations) == (2, 2, 1)
    today_launches, _, today_allocations, today_grad = backward_counts(packed=False)
    assert today_launches >= launches + 5 and today_allocations >= allocations + 3
    np.testing.assert_array_equal(grad, today_grad)
