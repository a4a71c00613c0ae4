"""nn.functional's fused ops (tinygrad_gpu/ops/fused.py) in float32: our kernels on emu (and cuda)
against the NumPy references on cpu and against the plain compositions of Tensor ops, for
values and gradients; second derivatives through the fused ops; the on/off switch.

(The float64 property tests in test_functional.py run the same fused ops on cpu, with
gradchecks and second-order checks, which pins the references to the math.)
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from tinygrad_gpu import kernels
from tinygrad_gpu.ops import fused

from conftest import gpu, requires_gpu

on_kernel_devices = pytest.mark.parametrize("device", ["emu", pytest.param("cuda", marks=[gpu, requires_gpu])])


def run(device, fn, floats, integers=(), fused_op=None):
    """fn's output and the gradients of its float inputs, for a fixed random upstream gradient."""
    tensors = [tg.tensor(a, dtype=tg.float32, device=device, requires_grad=True) for a in floats]
    out = fn(*tensors, *[tg.tensor(i, device=device) for i in integers])
    assert fused_op is None or in_graph(out, fused_op), f"{fused_op.__name__} did not run"
    upstream = np.random.default_rng(0).standard_normal(out.shape).astype(np.float32)
    out.backward(tg.tensor(upstream, device=device))
    return [out.numpy()] + [None if t.grad is None else t.grad.numpy() for t in tensors]   # None: unused


def check_everywhere(device, fn, floats, integers=(), fused_op=None):
    on_device = run(device, fn, floats, integers, fused_op)
    references = run("cpu", fn, floats, integers, fused_op)
    with kernels.fused(False):
        composed = run("cpu", fn, floats, integers)
    for got, reference, composition in zip(on_device, references, composed):
        if composition is None:
            assert got is None and reference is None
            continue
        scale = np.abs(composition).max(initial=1.0)
        np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5 * scale)
        np.testing.assert_allclose(reference, composition, rtol=1e-4, atol=1e-5 * scale)


def in_graph(out, op) -> bool:
    """Is there a node of Function class `op` in the graph that made `out`?"""
    stack, seen = [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or isinstance(node, tg.Tensor) or id(node) in seen:
            continue
        if isinstance(node, op):
            return True
        seen.add(id(node))
        stack.extend(node.next_nodes)
    return False


def floats(rng, shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


@on_kernel_devices
@given(st.integers(1, 6), st.integers(2, 70), st.sampled_from([(), (3,)]), st.sampled_from(["mean", "sum", "none"]),
       st.sampled_from([0.0, 0.1]), st.integers(0, 2**32 - 1))
def test_cross_entropy(device, n, classes, extra, reduction, smoothing, seed):
    rng = np.random.default_rng(seed)
    logits = floats(rng, (n, classes) + extra, 3.0)
    target = rng.integers(0, classes, (n,) + extra)
    target.flat[rng.random(target.size) < 0.3] = -100
    target.flat[0] = 1                                          # at least one kept target

    def fn(x, t):
        return F.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)
    check_everywhere(device, fn, [logits], [target], fused.CrossEntropyRows)


@on_kernel_devices
@given(st.sampled_from([(1,), (3,), (2, 5)]), st.sampled_from([(7,), (65,), (4, 9)]), st.booleans(), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_layer_norm(device, batch, normalized, with_weight, with_bias, seed):
    rng = np.random.default_rng(seed)
    arrays = [floats(rng, batch + normalized)] + [floats(rng, normalized)] * 2

    def fn(x, w, b):
        return F.layer_norm(x, normalized, w if with_weight else None, b if with_bias else None)
    check_everywhere(device, fn, arrays, fused_op=fused.LayerNormRows)


@on_kernel_devices
@given(st.sampled_from([(1,), (300,), (3, 33)]), st.integers(0, 2**32 - 1))
def test_gelu_tanh(device, shape, seed):
    check_everywhere(device, lambda x: F.gelu(x, approximate="tanh"), [floats(np.random.default_rng(seed), shape, 3)],
                     fused_op=fused.GeluTanh)


@on_kernel_devices
@given(st.integers(1, 20), st.integers(1, 40), st.sampled_from([(), (5,), (2, 7)]), st.integers(0, 2**32 - 1))
def test_embedding(device, n_embeddings, dim, ids_shape, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, n_embeddings, ids_shape)
    check_everywhere(device, lambda w, i: F.embedding(i, w), [floats(rng, (n_embeddings, dim))], [ids],
                     fused.EmbeddingLookup)


@on_kernel_devices
@given(st.integers(1, 2), st.integers(1, 3), st.integers(1, 40), st.integers(1, 9), st.sampled_from([None, 0.5]),
       st.integers(0, 2**32 - 1))
def test_causal_attention(device, batch, heads, length, dim, scale, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (floats(rng, (batch, heads, length, dim)) for _ in range(3))

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    check_everywhere(device, fn, [q, k, v], fused_op=fused.CausalAttention)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("small_product", [0, 10 ** 6])
def test_a_product_with_a_transposed_operand_is_a_times_b_transposed(monkeypatch, dtype, small_product):
    """Both ways the cpu multiplies by b^T (b^T copied contiguous, or b^T as a view), for stacked matrices."""
    from tinygrad_gpu.ops import linalg
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", small_product)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((2, 3, 9, 5)).astype(dtype) for _ in range(2))
    got = linalg.product_with_transposed(a, b[:, :, 1:])               # b: a strided view, as k is in GPT
    want = (a.astype(np.float64) @ b[:, :, 1:].astype(np.float64).swapaxes(-1, -2))
    assert got.dtype == dtype and got.shape == (2, 3, 9, 8)
    half = dtype == np.float16
    np.testing.assert_allclose(got, want, rtol=2e-3 if half else 1e-5, atol=1e-2 if half else 1e-5)


@pytest.mark.parametrize("device", ["cpu", "emu"])
def test_a_second_backward_through_the_fused_ops_gives_the_same_gradients(device):
    """retain_graph: a fused op's CPU backward that computes in its incoming gradient (layer norm, GELU)
    leaves what it kept from the forward (GELU's slope) as it was, for the second backward."""
    rng = np.random.default_rng(2)
    x = tg.tensor(floats(rng, (2, 3, 8)), device=device, requires_grad=True)
    w = tg.tensor(floats(rng, (8,)), device=device, requires_grad=True)
    labels = tg.tensor([1, 7, 0, 3, 5, 2], device=device)
    h = F.gelu(F.layer_norm(x, (8,), w, w * 0.5), approximate="tanh")
    h = F.scaled_dot_product_attention(h, h, h, is_causal=True)
    loss = F.cross_entropy(h.reshape(6, 8), labels)
    grads = []
    for _ in range(2):
        x.grad = w.grad = None
        loss.backward(retain_graph=True)
        grads.append((x.grad.numpy(), w.grad.numpy()))
    for first, second in zip(*grads):
        np.testing.assert_allclose(second, first, rtol=1e-6, atol=1e-7)


def test_a_gradient_asked_for_is_not_the_scratch_of_the_backward_it_feeds():
    """Layer norm's backward on the CPU computes in its incoming gradient when that array is the
    engine's own; not when tg.grad hands that same gradient back to the caller."""
    rng = np.random.default_rng(3)
    x = tg.tensor(floats(rng, (4, 8)), requires_grad=True)
    w = tg.tensor(floats(rng, (5, 8)), requires_grad=True)
    h = F.layer_norm(x, (8,))
    y = F.linear(h, w)
    grad_h, grad_x = tg.grad((y * y).sum(), [h, x])
    np.testing.assert_allclose(grad_h.numpy(), (2 * y.numpy()) @ w.numpy(), rtol=1e-5, atol=1e-6)
    grad_x_alone, = tg.grad((F.linear(F.layer_norm(x, (8,)), w) ** 2).sum(), [x])
    np.testing.assert_allclose(grad_x.numpy(), grad_x_alone.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["cross_entropy", "layer_norm", "gelu", "embedding", "attention"])
def test_second_derivatives_through_fused_ops(name):
    """backward(create_graph=True) through a fused op on emu matches the composition's second derivative."""
    rng = np.random.default_rng(1)
    x0, w0 = floats(rng, (3, 8)), floats(rng, (8,))
    ids, labels = tg.tensor([[0, 2, 2]], device="emu"), tg.tensor([1, 7, -100], device="emu")
    fns = {"cross_entropy": lambda x, w: F.cross_entropy(x * w, labels, label_smoothing=0.1),
           "layer_norm": lambda x, w: F.layer_norm(x, (8,), w, w * 0.5).tanh().sum(),
           "gelu": lambda x, w: F.gelu(x * w, approximate="tanh").sum(),
           "embedding": lambda x, w: (F.embedding(ids, x) * w).tanh().sum(),
           "attention": lambda x, w: F.scaled_dot_product_attention(*(t.reshape(1, 1, 3, 8) * w for t in (x,) * 3),
                                                                    is_causal=True).tanh().sum()}

    def second(enabled):
        with kernels.fused(enabled):
            x, w = (tg.tensor(a, device="emu", requires_grad=True) for a in (x0, w0))
            gx, gw = tg.grad(fns[name](x, w), [x, w], create_graph=True)
            return [g.numpy() for g in tg.grad((gx * gx).sum() + (gw * gw).sum(), [x, w])]
    for got, want in zip(second(True), second(False)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_switch_turns_routing_off():
    x = tg.ones(2, 3, requires_grad=True)
    assert isinstance(F.gelu(x, approximate="tanh").grad_fn, fused.GeluTanh)
    with kernels.fused(False):
        assert not kernels.fused_enabled()
        assert not isinstance(F.gelu(x, approximate="tanh").grad_fn, fused.GeluTanh)
    assert kernels.fused_enabled()
    assert not isinstance(F.gelu(x).grad_fn, fused.GeluTanh)      # exact GELU has no kernel
