"""Each CUDA kernel (tinygrad_gpu/kernels/*.cu) against its NumPy reference, on emu and on cuda.

Shapes are drawn so that row lengths and row counts are rarely multiples of the block size
(32..1024 threads): a single row, a single element, odd sizes, vocabularies of 65 and
50,257.  Tolerances are float32's: EPS (2**-23) times the size of the numbers involved
and a small factor for the different summation orders of a block reduction and NumPy.
"""
import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tinygrad_gpu import device as devices
from tinygrad_gpu.kernels import adamw, causal_softmax, cross_entropy, embedding_backward, gelu, layernorm

from conftest import gpu, requires_gpu

EPS = float(np.finfo(np.float32).eps)
KERNEL_DEVICES = ["emu", pytest.param("cuda", marks=[gpu, requires_gpu])]
on_kernel_devices = pytest.mark.parametrize("device", KERNEL_DEVICES)
SIZES = st.one_of(st.integers(1, 70), st.sampled_from([31, 33, 65, 127, 255, 257, 1000, 1025, 4097]))


def on(device, *arrays):
    return [devices.move(a, devices.canonical(device)) for a in arrays]


def back(*arrays):
    return [devices.move(a, "cpu") for a in arrays]


def assert_close(got, want, tolerance):
    """|got - want| <= tolerance, elementwise (tolerance may be an array)."""
    error = np.abs(got.astype(np.float64) - want)
    worst = np.unravel_index(np.argmax(error - tolerance), error.shape) if error.size else ()
    assert (error <= tolerance).all(), f"at {worst}: got {got[worst]}, want {want[worst]}"


def float32(rng, shape, scale=1.0, offset=0.0):
    return (offset + scale * rng.standard_normal(shape)).astype(np.float32)


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
    scale = 1 + np.abs(logits).max()
    assert np.isfinite(losses).all() and np.isfinite(lse).all() and np.isfinite(dlogits).all()
    np.testing.assert_allclose(lse, want_lse, rtol=0, atol=8 * EPS * scale)
    np.testing.assert_allclose(losses, want_losses, rtol=0, atol=8 * EPS * scale * (1 + 10 * smoothing))
    # softmax = exp(x - lse) inherits lse's absolute error as a relative one
    np.testing.assert_allclose(dlogits, want_dlogits, rtol=0, atol=8 * EPS * scale * np.abs(dlosses).max() + 1e-7)
    assert (dlogits[targets == ignore_index] == 0).all() and (losses[targets == ignore_index] == 0).all()


@on_kernel_devices
@given(cross_entropy_case())
def test_cross_entropy(device, case):
    check_cross_entropy(device, *case)


@on_kernel_devices
@pytest.mark.parametrize("rows, classes", [(1, 65), (64, 65), (1, 50257), (2, 50257)])
def test_cross_entropy_vocabularies(device, rows, classes):
    rng = np.random.default_rng(classes + rows)
    logits, targets = float32(rng, (rows, classes), 3.0), rng.integers(0, classes, rows)
    check_cross_entropy(device, logits, targets, -100, 0.1)
    check_cross_entropy(device, logits, targets, -100, 0.0)


@on_kernel_devices
def test_cross_entropy_with_masked_classes_and_no_smoothing_is_finite(device):
    """-inf logits (masked classes) leave the loss finite; the mean over the row, -inf then, enters only
    with label smoothing (0 * inf would be nan)."""
    logits = np.float32([[-np.inf, 1.0, 2.0, 0.5], [0.0, -np.inf, 3.0, 1.0], [-np.inf] * 3 + [0.0]])
    targets = np.array([2, 3, 3])
    losses, lse = back(*cross_entropy.forward(*on(device, logits, targets), -100, 0.0, device))
    want_losses, want_lse = cross_entropy.reference_forward(logits, targets, -100, 0.0)
    shifted = logits.astype(np.float64) - logits.max(1, keepdims=True)
    exact = np.log(np.exp(shifted).sum(1)) - shifted[np.arange(3), targets]
    np.testing.assert_allclose(losses, exact, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(want_losses, exact, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6)


# ----------------------------------------------------------------------------- layernorm.cu
@on_kernel_devices
@given(st.integers(1, 40), SIZES, st.sampled_from([(0.0, 1.0), (100.0, 1.0), (3.0, 0.01)]),
       st.sampled_from([1e-5, 0.1]), st.booleans(), st.integers(0, 2**32 - 1))
@example(rows=15, n=2, location=(0.0, 1.0), eps=1e-5, need_params=False, seed=2)    # rstd 25 in row 11
def test_layernorm(device, rows, n, location, eps, need_params, seed):
    rng = np.random.default_rng(seed)
    x = float32(rng, (rows, n), scale=location[1], offset=location[0])
    weight, bias, dout = float32(rng, n), float32(rng, n), float32(rng, (rows, n))
    out, mean, rstd = layernorm.forward(*on(device, x, weight, bias), eps, device)
    grads = layernorm.backward(*on(device, x, weight, mean, rstd, dout), need_params, device)
    want_out, want_mean, want_rstd = layernorm.reference_forward(x, weight, bias, eps)
    want_grads = layernorm.reference_backward(x, weight, want_mean, want_rstd, dout, need_params)
    # float32 loses about |mean| / spread of the digits of x - mean: scale the tolerance by it
    spread = location[0] / location[1] + 1
    tol = 8 * EPS * spread * math.sqrt(n)
    out, mean, rstd = back(out, mean, rstd)
    np.testing.assert_allclose(mean, want_mean, rtol=0, atol=tol * location[1])
    np.testing.assert_allclose(rstd, want_rstd, rtol=tol, atol=0)
    np.testing.assert_allclose(out, want_out, rtol=0, atol=tol * 4 * np.abs(weight).max() + tol)
    # dx cancels terms of size rstd |dout weight|: a row of nearly equal values (a large rstd) keeps
    # only the last digits of them, in the kernel and in the reference alike
    cancelled = 8 * EPS * np.abs(rstd).max() * np.abs(dout * weight).max()
    for got, want in zip(back(*(g for g in grads if g is not None)), (w for w in want_grads if w is not None)):
        np.testing.assert_allclose(got, want, rtol=0, atol=tol * rows * np.abs(want).max() + tol + cancelled)
    assert (grads[1] is None) == (not need_params)


# ----------------------------------------------------------------------------- gelu.cu
@on_kernel_devices
@given(st.one_of(st.integers(0, 300), st.sampled_from([4097, 256 * 4096 + 3])), st.integers(0, 2**32 - 1))
def test_gelu(device, n, seed):
    rng = np.random.default_rng(seed)
    x = float32(rng, n, scale=4.0)
    x[:min(n, 4)] = np.float32([1e20, -1e20, 1e6, -30.0])[:min(n, 4)]     # saturation stays finite
    dy = float32(rng, n)
    y, dx = back(gelu.forward(*on(device, x), device), gelu.backward(*on(device, x, dy), device))
    # 1 + tanh(u) cancels for x < 0: its one-ulp error (EPS) is scaled by 0.5 |x| in y, and
    # by the terms of the slope (up to about 14 near x = -5) in dx.
    assert_close(y, gelu.reference_forward(x), 4 * EPS * (1 + np.abs(x)))
    assert_close(dx, gelu.reference_backward(x, dy), 64 * EPS * np.abs(dy))
    assert np.isfinite(y).all() and np.isfinite(dx).all()


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
    np.testing.assert_array_equal(got, embedding_backward.reference(ids, dout, n_embeddings))


# ----------------------------------------------------------------------------- causal_softmax.cu
@on_kernel_devices
@given(st.integers(1, 3), st.integers(1, 2), SIZES.filter(lambda s: s <= 300), st.integers(1, 70),
       st.sampled_from([0.125, 1.0, 3.0]), st.integers(0, 2**32 - 1))
def test_causal_softmax(device, batch, heads, L, S, scale, seed):
    rng = np.random.default_rng(seed)
    scores, dprobs = float32(rng, (batch, heads, L, S), 3.0), float32(rng, (batch, heads, L, S))
    (probs,) = back(causal_softmax.forward(*on(device, scores), scale, device))
    np.testing.assert_allclose(probs, causal_softmax.reference_forward(scores, scale), rtol=0, atol=32 * EPS * scale)
    assert (probs[..., np.triu(np.ones((L, S), bool), 1)] == 0).all()          # nothing from the future
    (dscores,) = back(causal_softmax.backward(*on(device, probs, dprobs), scale, device))
    want = causal_softmax.reference_backward(probs, dprobs, scale)
    np.testing.assert_allclose(dscores, want, rtol=0, atol=32 * EPS * scale * np.abs(dprobs).max())
