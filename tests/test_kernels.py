"""Each CUDA kernel (tinygrad_gpu/kernels/*.cu) against its NumPy reference, on emu and on cuda.

Shapes are drawn so that row lengths and row counts are rarely multiples of the block size
(32..1024 threads): a single row, a single element, odd sizes, vocabularies of 65 and
50,257.  Tolerances are float32's: EPS (2**-23) times the size of the numbers involved
and a small factor for the different summation orders of a block reduction and NumPy.
The kernels with float16 and bfloat16 entry points (GELU, causal softmax, cross-entropy,
layer norm) are tested in all three dtypes; STEP says what the 16-bit outputs add.
"""
import contextlib
import math
import types

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import tinygrad_gpu as tg
from tinygrad_gpu import device as devices
from tinygrad_gpu import dtypes
from tinygrad_gpu.kernels import adamw, causal_softmax, cpu_paths, cross_entropy, embedding_backward, gelu, layernorm, runtime

from conftest import allocation, gpu, on, requires_gpu

EPS = float(np.finfo(np.float32).eps)
KERNEL_DEVICES = ["emu", pytest.param("cuda", marks=[gpu, requires_gpu])]
on_kernel_devices = pytest.mark.parametrize("device", KERNEL_DEVICES)
SIZES = st.one_of(st.integers(1, 70), st.sampled_from([31, 33, 65, 127, 255, 257, 1000, 1025, 4097]))

# The 16-bit kernels and the references load the same 16-bit values (exact in float32), compute in
# float32 and round each output once to its dtype, so their float32 results differ by float32's
# noise alone (the tolerances of the float32 tests). Where the two fall either side of a rounding
# boundary, the rounded outputs are neighbours on the 16-bit grid: one step apart, which is at most
# eps * |value| (eps = 2**-10 for float16's 10 fraction bits, 2**-7 for bfloat16's 7), or the
# smallest subnormal near 0 (2**-24, 2**-133). float32 outputs of 16-bit inputs (cross-entropy's
# losses and lse, layer norm's mean and rstd) keep float32's tolerances.
HALF = [dtypes.float16, dtypes.bfloat16]
STORAGE_DTYPES = [dtypes.float32, *HALF]
STEP = {dtypes.float32: (0.0, 0.0), dtypes.float16: (2.0**-10, 2.0**-24), dtypes.bfloat16: (2.0**-7, 2.0**-133)}
by_storage_dtype = pytest.mark.parametrize("dtype", STORAGE_DTYPES, ids=lambda d: np.dtype(d).name)


def back(*arrays):
    return [devices.move(a, "cpu") for a in arrays]


def assert_close(got, want, tolerance):
    """|got - want| <= tolerance, elementwise (tolerance may be an array)."""
    error = np.abs(got.astype(np.float64) - want)
    worst = np.unravel_index(np.argmax(error - tolerance), error.shape) if error.size else ()
    assert (error <= tolerance).all(), f"at {worst}: got {got[worst]}, want {want[worst]}"


def float32(rng, shape, scale=1.0, offset=0.0):
    return (offset + scale * rng.standard_normal(shape)).astype(np.float32)


def rounding(want):
    """How far a kernel's output may be from the reference's for rounding to want's dtype alone (STEP)."""
    relative, smallest = STEP[want.dtype]
    return relative * np.abs(want.astype(np.float64)) + smallest


def wide(a):
    return a.astype(np.float64)


# ----------------------------------------------------------------------------- cross_entropy.cu
@st.composite
def cross_entropy_case(draw):
    rows, classes = draw(st.integers(1, 40)), draw(SIZES.filter(lambda c: c >= 2))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if draw(st.booleans()):                                     # extreme logits: +-1e4 and 0
        logits = rng.choice(np.float32([-1e4, 0.0, 1e4]), (rows, classes))
    else:
        logits = float32(rng, (rows, classes), scale=draw(st.sampled_from([0.1, 3.0, 30.0])))
    ignore_index = draw(st.sampled_from([-100, 0, 1]))
    targets = rng.integers(0, classes, rows)
    targets[rng.random(rows) < draw(st.sampled_from([0.0, 0.3, 1.0]))] = ignore_index   # up to all ignored
    return logits, targets, ignore_index, draw(st.sampled_from([0.0, 0.1, 0.55]))


def check_cross_entropy(device, logits, targets, ignore_index, smoothing, seed=0):
    dlosses = float32(np.random.default_rng(seed), len(targets))
    losses, lse = cross_entropy.forward(*on(device, logits, targets), ignore_index, smoothing, device)
    dlogits = cross_entropy.backward(*on(device, logits, targets, lse, dlosses), ignore_index, smoothing, device)
    losses, lse, dlogits = back(losses, lse, dlogits)
    want_losses, want_lse = cross_entropy.reference_forward(logits, targets, ignore_index, smoothing)
    want_dlogits = cross_entropy.reference_backward(logits, targets, want_lse, dlosses, ignore_index, smoothing)
    assert losses.dtype == lse.dtype == np.float32 and dlogits.dtype == logits.dtype     # for every logits dtype
    scale = 1 + np.abs(wide(logits)).max()
    assert np.isfinite(losses).all() and np.isfinite(lse).all() and np.isfinite(wide(dlogits)).all()
    np.testing.assert_allclose(lse, want_lse, rtol=0, atol=8 * EPS * scale)
    np.testing.assert_allclose(losses, want_losses, rtol=0, atol=8 * EPS * scale * (1 + 10 * smoothing))
    # softmax = exp(x - lse) inherits lse's absolute error as a relative one
    assert_close(dlogits, wide(want_dlogits), 8 * EPS * scale * np.abs(dlosses).max() + 1e-7 + rounding(want_dlogits))
    assert (wide(dlogits)[targets == ignore_index] == 0).all() and (losses[targets == ignore_index] == 0).all()


@on_kernel_devices
@by_storage_dtype
@given(cross_entropy_case())
def test_cross_entropy(device, dtype, case):
    logits, *rest = case
    check_cross_entropy(device, logits.astype(dtype), *rest)


@on_kernel_devices
@by_storage_dtype
@pytest.mark.parametrize("rows, classes", [(1, 65), (64, 65), (1, 50257), (2, 50257)])
def test_cross_entropy_vocabularies(device, dtype, rows, classes):
    rng = np.random.default_rng(classes + rows)
    logits, targets = float32(rng, (rows, classes), 3.0).astype(dtype), rng.integers(0, classes, rows)
    check_cross_entropy(device, logits, targets, -100, 0.1)
    check_cross_entropy(device, logits, targets, -100, 0.0)


@on_kernel_devices
@by_storage_dtype
def test_cross_entropy_with_masked_classes_and_no_smoothing_is_finite(device, dtype):
    """-inf logits (masked classes) leave the loss finite; the mean over the row, -inf then, enters only
    with label smoothing (0 * inf would be nan)."""
    logits = np.float32([[-np.inf, 1.0, 2.0, 0.5], [0.0, -np.inf, 3.0, 1.0], [-np.inf] * 3 + [0.0]]).astype(dtype)
    targets = np.array([2, 3, 3])
    losses, lse = back(*cross_entropy.forward(*on(device, logits, targets), -100, 0.0, device))
    want_losses, want_lse = cross_entropy.reference_forward(logits, targets, -100, 0.0)
    shifted = wide(logits) - wide(logits).max(1, keepdims=True)
    exact = np.log(np.exp(shifted).sum(1)) - shifted[np.arange(3), targets]
    np.testing.assert_allclose(losses, exact, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(want_losses, exact, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6)


# ----------------------------------------------------------------------------- layernorm.cu
@on_kernel_devices
@by_storage_dtype
@given(st.integers(1, 40), SIZES, st.sampled_from([(0.0, 1.0), (100.0, 1.0), (3.0, 0.01)]),
       st.sampled_from([1e-5, 0.1]), st.booleans(), st.integers(0, 2**32 - 1))
@example(rows=15, n=2, location=(0.0, 1.0), eps=1e-5, need_params=False, seed=2)    # rstd 25 in row 11
def test_layernorm(device, dtype, rows, n, location, eps, need_params, seed):
    rng = np.random.default_rng(seed)
    x = float32(rng, (rows, n), scale=location[1], offset=location[0]).astype(dtype)
    weight, bias, dout = (float32(rng, shape).astype(dtype) for shape in (n, n, (rows, n)))
    out, mean, rstd = layernorm.forward(*on(device, x, weight, bias), eps, device)
    grads = layernorm.backward(*on(device, x, weight, mean, rstd, dout), need_params, device)
    want_out, want_mean, want_rstd = layernorm.reference_forward(x, weight, bias, eps)
    want_grads = layernorm.reference_backward(x, weight, want_mean, want_rstd, dout, need_params)
    # float32 loses about |mean| / spread of the digits of x - mean: scale the tolerance by it
    spread = location[0] / location[1] + 1
    tol = 8 * EPS * spread * math.sqrt(n)
    out, mean, rstd = back(out, mean, rstd)
    assert out.dtype == dtype and mean.dtype == rstd.dtype == np.float32
    np.testing.assert_allclose(mean, want_mean, rtol=0, atol=tol * location[1])
    np.testing.assert_allclose(rstd, want_rstd, rtol=tol, atol=0)
    assert_close(out, wide(want_out), tol * 4 * np.abs(wide(weight)).max() + tol + rounding(want_out))
    # dx cancels terms of size rstd |dout weight|: a row of nearly equal values (a large rstd) keeps
    # only the last digits of them, in the kernel and in the reference alike
    cancelled = 8 * EPS * np.abs(rstd).max() * np.abs(wide(dout) * wide(weight)).max()
    for got, want in zip(back(*(g for g in grads if g is not None)), (w for w in want_grads if w is not None)):
        assert got.dtype == dtype
        assert_close(got, wide(want), tol * rows * np.abs(wide(want)).max() + tol + cancelled + rounding(want))
    assert (grads[1] is None) == (not need_params)


# ----------------------------------------------------------------------------- gelu.cu
@on_kernel_devices
@by_storage_dtype
@given(st.one_of(st.integers(0, 300), st.sampled_from([4097, 256 * 4096 + 3])), st.integers(0, 2**32 - 1))
def test_gelu(device, dtype, n, seed):
    if dtype != np.float32:     # n past the grid runs the same template code in every dtype: float32 tests it
        n = min(n, 4097)
    rng = np.random.default_rng(seed)
    x = float32(rng, n, scale=4.0)
    big = min(1e20, tg.finfo(dtype).max / 2)                              # float16 ends at 65504
    x[:min(n, 4)] = np.float32([big, -big, min(1e6, big), -30.0])[:min(n, 4)]     # saturation stays finite
    x, dy = x.astype(dtype), float32(rng, n).astype(dtype)
    y, dx = back(gelu.forward(*on(device, x), device), gelu.backward(*on(device, x, dy), device))
    want_y, want_dx = gelu.reference_forward(x), gelu.reference_backward(x, dy)
    assert y.dtype == dx.dtype == dtype
    # 1 + tanh(u) cancels for x < 0: its one-ulp error (EPS) is scaled by 0.5 |x| in y, and
    # by the terms of the slope (up to about 14 near x = -5) in dx.
    assert_close(y, wide(want_y), 4 * EPS * (1 + np.abs(wide(x))) + rounding(want_y))
    assert_close(dx, wide(want_dx), 64 * EPS * np.abs(wide(dy)) + rounding(want_dx))
    assert np.isfinite(wide(y)).all() and np.isfinite(wide(dx)).all()


@on_kernel_devices
@by_storage_dtype
def test_gelu_backward_over_a_spare_gradient_writes_it_with_the_same_bits(device, dtype):
    rng = np.random.default_rng(4)
    x, dy = float32(rng, 3000, scale=4.0).astype(dtype), float32(rng, 3000).astype(dtype)
    (want,) = back(gelu.backward(*on(device, x, dy), device))
    x_on, spare = on(device, x, dy)
    got = gelu.backward(x_on, spare, device, dout_is_spare=True)
    assert runtime.address(got) == runtime.address(spare)                # written over dy
    np.testing.assert_array_equal(back(got)[0].view(np.uint8), want.view(np.uint8))


# ----------------------------------------------------------------------------- adamw.cu
@on_kernel_devices
@given(st.integers(1, 2000), st.booleans(), st.sampled_from([0.0, 0.1]), st.integers(0, 2**32 - 1))
def test_adamw(device, n, decoupled, weight_decay, seed):
    rng = np.random.default_rng(seed)
    state = [float32(rng, n), np.zeros(n, np.float32), np.zeros(n, np.float32)]
    expected = [a.copy() for a in state]
    on_device = on(device, *state)
    options = dict(lr=1e-2, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=weight_decay, decoupled=decoupled)
    for step in range(1, 4):
        grad = float32(rng, n)
        adamw.adamw_update(on_device[0], *on(device, grad), *on_device[1:], step=step, device=device, **options)
        adamw.adamw_update(expected[0], grad, *expected[1:], step=step, device="cpu", **options)
    for got, want in zip(back(*on_device), expected):
        np.testing.assert_allclose(got, want, rtol=16 * EPS, atol=16 * EPS * 1e-2)


def test_adamw_reference_is_the_textbook_formula():
    """Three AdamW steps of the reference, in float64, against m and v written as sums over past gradients."""
    rng = np.random.default_rng(0)
    p, m, v = rng.standard_normal(5), np.zeros(5), np.zeros(5)
    want, grads = p.copy(), []
    lr, b1, b2, eps, wd = 1e-2, 0.9, 0.99, 1e-8, 0.1
    for t in range(1, 4):
        grads.append(rng.standard_normal(5))
        adamw.adamw_update(p, grads[-1], m, v, lr, b1, b2, eps, wd, step=t, device="cpu")
        m_t = (1 - b1) * sum(b1 ** (t - k) * g for k, g in enumerate(grads, 1))
        v_t = (1 - b2) * sum(b2 ** (t - k) * g * g for k, g in enumerate(grads, 1))
        want = want * (1 - lr * wd) - lr * (m_t / (1 - b1 ** t)) / (np.sqrt(v_t / (1 - b2 ** t)) + eps)
    np.testing.assert_allclose(m, m_t, rtol=1e-12)
    np.testing.assert_allclose(v, v_t, rtol=1e-12)
    np.testing.assert_allclose(p, want, rtol=1e-12)


def test_adamw_rejects_what_it_cannot_update_in_place():
    a = np.zeros((4, 4), np.float32)
    with pytest.raises(ValueError, match="one shape"):
        adamw.adamw_update(a, a[:2], a, a, 1e-3, 0.9, 0.99, 1e-8, 0.0, step=1, device="cpu")
    with pytest.raises(ValueError, match="step counts from 1"):
        adamw.adamw_update(a, a, a, a, 1e-3, 0.9, 0.99, 1e-8, 0.0, step=0, device="cpu")
    with pytest.raises(ValueError, match="C-contiguous"):
        adamw.adamw_update(a.T, a, a.copy(), a.copy(), 1e-3, 0.9, 0.99, 1e-8, 0.0, step=1, device="emu")


# ----------------------------------------------------------------------------- embedding_backward.cu
@on_kernel_devices
@given(st.integers(1, 300), st.integers(1, 50), SIZES, st.integers(0, 2**32 - 1))
def test_embedding_backward(device, tokens, n_embeddings, dim, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, n_embeddings, tokens)                 # repeated ids, in no particular order
    dout = float32(rng, (tokens, dim))
    (got,) = back(embedding_backward.embedding_backward(*on(device, ids, dout), n_embeddings, device))
    # Each id's rows are added in token order, as add.at adds them: the same bits, every run.
    np.testing.assert_array_equal(got, embedding_backward.reference_embedding_backward(ids, dout, n_embeddings))


# ----------------------------------------------------------------------------- causal_softmax.cu
@on_kernel_devices
@by_storage_dtype
@given(st.integers(1, 3), st.integers(1, 2), SIZES.filter(lambda s: s <= 300), st.integers(1, 70),
       st.sampled_from([0.125, 1.0, 3.0]), st.integers(0, 2**32 - 1))
def test_causal_softmax(device, dtype, batch, heads, L, S, scale, seed):
    rng = np.random.default_rng(seed)
    scores, dprobs = (float32(rng, (batch, heads, L, S), s).astype(dtype) for s in (3.0, 1.0))
    (probs,) = back(causal_softmax.forward(*on(device, scores), scale, device))
    want = causal_softmax.reference_forward(scores, scale)
    assert probs.dtype == dtype
    assert_close(probs, wide(want), 32 * EPS * scale + rounding(want))
    assert (wide(probs)[..., np.triu(np.ones((L, S), bool), 1)] == 0).all()          # nothing from the future
    (dscores,) = back(causal_softmax.backward(*on(device, probs, dprobs), scale, device))
    want = causal_softmax.reference_backward(probs, dprobs, scale)
    assert dscores.dtype == dtype
    assert_close(dscores, wide(want), 32 * EPS * scale * np.abs(wide(dprobs)).max() + rounding(want))


# ----------------------------------------------------------------------------- 16-bit data: dispatch
@pytest.mark.parametrize("dtype", HALF, ids=lambda d: np.dtype(d).name)
def test_16_bit_data_on_the_cpu_is_the_reference(dtype):
    """The cpu sends float16 and bfloat16 data to the references (compiled_cpu.py and fast_cpu.py are written
    for float32 and float64): their very numbers, in the dtypes the kernels give."""
    rng = np.random.default_rng(0)
    x, dy, scores, weight, bias = (float32(rng, shape).astype(dtype) for shape in ((6, 37), (6, 37), (2, 6, 9), 37, 37))
    targets = rng.integers(0, 37, 6)

    def same(got, want):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(wide(g), wide(w))
    same([gelu.forward(x, "cpu"), gelu.backward(x, dy, "cpu")],
         [gelu.reference_forward(x), gelu.reference_backward(x, dy)])
    y, slope = gelu.forward_keeping_slope(x, "cpu")
    assert slope is None and y.dtype == dtype
    probs = causal_softmax.forward(scores, 0.5, "cpu")
    same([probs, causal_softmax.backward(probs, scores, 0.5, "cpu")],
         [causal_softmax.reference_forward(scores, 0.5), causal_softmax.reference_backward(probs, scores, 0.5)])
    losses, lse = cross_entropy.forward(x, targets, -100, 0.1, "cpu")
    assert losses.dtype == lse.dtype == np.float32
    same([losses, lse, cross_entropy.backward(x, targets, lse, losses, -100, 0.1, "cpu")],
         [*cross_entropy.reference_forward(x, targets, -100, 0.1),
          cross_entropy.reference_backward(x, targets, lse, losses, -100, 0.1)])
    out, mean, rstd = layernorm.forward(x, weight, bias, 1e-5, "cpu")
    assert out.dtype == dtype and mean.dtype == rstd.dtype == np.float32
    same([out, mean, rstd, *layernorm.backward(x, weight, mean, rstd, dy, True, "cpu")],
         [*layernorm.reference_forward(x, weight, bias, 1e-5),
          *layernorm.reference_backward(x, weight, mean, rstd, dy)])


def test_which_data_runs_a_kernel(monkeypatch):
    monkeypatch.delenv(cpu_paths.CPU_KERNELS, raising=False)     # the default path: compiled or numpy
    f32, f16, bf16 = (np.zeros(3, dtype) for dtype in STORAGE_DTYPES)
    assert runtime.use_kernel("emu", f32, np.zeros(3, np.int64)) and not runtime.use_kernel("cpu", f32)
    assert runtime.use_kernel("emu", f16, half=True) and runtime.use_kernel("cuda:0", bf16, None, half=True)
    # A kernel with float32 entry points alone (AdamW, embedding backward) leaves 16-bit data to its reference,
    # and so does every kernel for float64 data or inputs of two dtypes.
    assert not runtime.use_kernel("emu", f16) and not runtime.use_kernel("emu", bf16)
    assert not runtime.use_kernel("emu", np.zeros(3), half=True)
    assert not runtime.use_kernel("emu", f16, bf16, half=True) and not runtime.use_kernel("emu", f32, f16, half=True)
    assert [runtime.entry_point("gelu_forward", dtype) for dtype in STORAGE_DTYPES] == \
        ["gelu_forward", "gelu_forward_f16", "gelu_forward_bf16"]
    assert runtime.working_dtype(dtypes.float16) == runtime.working_dtype(dtypes.bfloat16) == np.float32
    assert cpu_paths.cpu_kernels("cpu", f32, np.zeros(3)) is not None and cpu_paths.cpu_kernels("cpu", f32, bf16) is None


@on_kernel_devices
def test_arrays_made_together_are_aligned_views_of_one_allocation_that_do_not_overlap(device):
    """runtime.empty_together: each array of its own shape and dtype, C-contiguous, starting a multiple of
    runtime.ALIGNMENT bytes into the allocation; writing one leaves the others as they were; a layer norm's
    output and statistics so."""
    xp = devices.array_module(devices.canonical(device))
    layouts = [((3, 5), dtypes.bfloat16), ((2, 7), np.float32), ((0, 4), np.float16), ((1,), np.float64)]
    arrays = runtime.empty_together(xp, *layouts)
    assert [(a.shape, a.dtype) for a in arrays] == [(shape, np.dtype(dtype)) for shape, dtype in layouts]
    assert all(a.flags.c_contiguous and (runtime.address(a) - allocation(a)) % runtime.ALIGNMENT == 0
               for a in arrays if a.size)
    assert len({allocation(a) for a in arrays}) == 1 and arrays[0].base.nbytes < sum(a.nbytes for a in arrays) + \
        len(arrays) * runtime.ALIGNMENT
    for i, a in enumerate(arrays):
        a[...] = i + 1
    for i, a in enumerate(arrays):
        assert bool((a == i + 1).all())
    x = devices.move(np.ones((4, 8), np.float32), devices.canonical(device))
    out, mean, rstd = layernorm.forward(x, x[0], None, 1e-5, devices.canonical(device), dtypes.bfloat16)
    assert runtime.address(mean) - runtime.address(out) >= out.nbytes and runtime.address(rstd) == \
        runtime.address(mean) + mean.nbytes


def test_a_gpu_without_the_16_bit_headers_runs_float32_and_says_how_to_get_them(monkeypatch):
    """CuPy on a GPU, imitated: NVRTC fails to find cuda_fp16.h wherever TG_HALF_PRECISION asks for it. The
    float32 kernels are built without the macro and run; the first 16-bit launch names the headers and the
    wheel that has them."""
    built = []

    class RawModule:
        def __init__(self, code, options):
            self.options = options
            built.append(options)

        def get_function(self, name):
            if runtime.HALF_OPTION in self.options:     # what CuPy raises, with NVRTC's log as its text
                raise RuntimeError('gelu.cu(21): catastrophic error: cannot open source file "cuda_fp16.h"')
            return lambda grid, block, args, shared_mem=0: None

    monkeypatch.setattr(runtime.devices, "cupy", lambda: types.SimpleNamespace(RawModule=RawModule))
    monkeypatch.setattr(runtime.devices, "use", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(runtime, "_cuda_modules", {})
    monkeypatch.setattr(runtime, "_cuda_functions", {})
    runtime.launch("cuda:0", "gelu.cu", "gelu_forward", (1,), (32,), [])
    assert built == [runtime.CUDA_OPTIONS]
    with pytest.raises(runtime.HalfHeadersMissing, match=r"cuda_fp16\.h and cuda_bf16\.h.*not found.*"
                                                          r"pip install nvidia-cuda-runtime-cu12.*CUDA toolkit"):
        runtime.launch("cuda:0", "gelu.cu", "gelu_forward_bf16", (1,), (32,), [])
    assert built[-1] == (*runtime.CUDA_OPTIONS, runtime.HALF_OPTION)
    runtime.launch("cuda:0", "gelu.cu", "gelu_backward", (1,), (32,), [])       # float32 still runs


@on_kernel_devices
@by_storage_dtype
def test_layernorm_backward_adds_the_gradient_from_elsewhere_as_it_writes_dx(device, dtype):
    """dx_add: the kernel stores dx + dx_add, its float32 dx plus the other gradient, rounded once; in float32
    that is its own dx plus dx_add to the bit. LayerNormRows hands it the residual stream's gradient."""
    rng = np.random.default_rng(5)
    x, dout, dx_add = (float32(rng, (7, 37)).astype(dtype) for _ in range(3))
    weight = float32(rng, 37).astype(dtype)
    _, mean, rstd = layernorm.forward(*on(device, x, weight), None, 1e-5, device)
    alone = back(layernorm.backward(*on(device, x, weight, mean, rstd, dout), False, device)[0])[0]
    summed = back(layernorm.backward(*on(device, x, weight, mean, rstd, dout), False, device,
                                     dx_add=on(device, dx_add)[0])[0])[0]
    if dtype == dtypes.float32:
        np.testing.assert_array_equal(summed, alone + dx_add)
    else:
        # alone was rounded once more than the kernel's float32 dx: one step of it, and one of the sum
        assert_close(summed, wide(alone) + wide(dx_add), rounding(alone) + rounding(summed))
