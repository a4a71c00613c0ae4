"""The backward engine's contract: accumulation, freeing, retain/create graph, tg.grad, memory."""
import gc
import tracemalloc

import numpy as np
import pytest

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from tinygrad_gpu.kernels import gelu as gelu_reference
from tinygrad_gpu.tensor import Function


def test_leaf_gradients_accumulate_across_backward_calls():
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() + 3)
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3, 3, 3])


def test_non_leaf_gradients_are_not_kept():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    h.sum().backward()
    assert h.grad is None and not h.is_leaf and x.is_leaf
    np.testing.assert_allclose(x.grad.numpy(), [2, 2])


def test_backward_twice_needs_retain_graph():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()


def test_retain_graph_allows_a_second_backward():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * 2 * x.numpy())


def test_backward_of_non_scalar_needs_gradient():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    with pytest.raises(RuntimeError, match=r"gradient=.*\(2,\)|\(2,\).*gradient="):
        y.backward()
    with pytest.raises(RuntimeError, match="shape"):
        y.backward(tg.ones(3))
    y.backward(tg.tensor([1.0, 10.0]))
    np.testing.assert_allclose(x.grad.numpy(), [3, 30])


def test_backward_of_a_tensor_without_graph_is_a_clear_error():
    with pytest.raises(RuntimeError, match="does not require grad"):
        tg.tensor([1.0, 2.0]).sum().backward()


def test_graph_is_recorded_only_when_needed():
    a, w = tg.ones(2), tg.ones(2, requires_grad=True)
    assert (a * 2).grad_fn is None and not (a * 2).requires_grad
    assert (a * w).grad_fn is not None and (a * w).requires_grad
    with tg.no_grad():
        y = a * w
        assert not tg.is_grad_enabled()
        with tg.enable_grad():
            assert (a * w).requires_grad
    assert y.grad_fn is None and not y.requires_grad and tg.is_grad_enabled()

    @tg.no_grad()
    def evaluate(t):
        return t * 2
    assert not evaluate(w).requires_grad
    with tg.set_grad_enabled(False):
        assert not (w * 2).requires_grad


def test_detach_shares_values_but_not_the_graph():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    d = (x * 2).detach()
    assert not d.requires_grad and d.grad_fn is None
    y = (d * x).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), d.numpy())


def test_only_floating_tensors_can_require_grad():
    with pytest.raises(RuntimeError, match="floating-point.*int64"):
        tg.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="floating-point"):
        tg.arange(3).requires_grad_()
    assert not (tg.ones(2, requires_grad=True).argmax()).requires_grad


def test_a_chain_of_100000_ops_backpropagates_without_recursion():
    x = tg.tensor(1.0, dtype=tg.float64, requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.00001
    y.backward()
    assert x.grad.item() == pytest.approx(1.00001 ** 100_000, rel=1e-9)
    del y   # freeing a long chain must not overflow the stack either
    gc.collect()


class CountingIdentity(Function):
    calls = 0

    def forward(ctx, x):
        return x.data.copy()

    def backward(ctx, grad):
        CountingIdentity.calls += 1
        return grad


def test_each_node_backward_runs_once_in_a_diamond():
    CountingIdentity.calls = 0
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = CountingIdentity.apply(x)
    y = (h * h + h.exp() + h).sum()       # h feeds three branches
    y.backward()
    assert CountingIdentity.calls == 1
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() + np.exp(x.numpy()) + 1)


def test_second_and_third_derivatives_with_create_graph():
    x = tg.tensor([0.5, -1.5, 2.0], dtype=tg.float64, requires_grad=True)
    y = (x ** 3).sum()
    (dy,) = tg.grad(y, x, create_graph=True)
    np.testing.assert_allclose(dy.numpy(), 3 * x.numpy() ** 2)
    (d2y,) = tg.grad(dy.sum(), x, create_graph=True)
    np.testing.assert_allclose(d2y.numpy(), 6 * x.numpy())
    (d3y,) = tg.grad(d2y.sum(), x)
    np.testing.assert_allclose(d3y.numpy(), [6, 6, 6])
    assert x.grad is None, "tg.grad must not touch .grad"


def test_backward_with_create_graph_gives_a_differentiable_grad():
    x = tg.tensor([1.0, 2.0], dtype=tg.float64, requires_grad=True)
    (x.sin().sum()).backward(create_graph=True)
    assert x.grad.requires_grad
    (g,) = tg.grad(x.grad.sum(), x)
    np.testing.assert_allclose(g.numpy(), -np.sin(x.numpy()))


def test_grad_of_intermediate_and_unused_inputs():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    unused = tg.tensor([3.0], requires_grad=True)
    h = x * 3
    y = (h * h).sum()
    gh, gx, gu = tg.grad(y, [h, x, unused], allow_unused=True)
    np.testing.assert_allclose(gh.numpy(), 2 * h.numpy())
    np.testing.assert_allclose(gx.numpy(), 18 * x.numpy())
    assert gu is None
    with pytest.raises(RuntimeError, match="not used"):
        tg.grad((x * x).sum(), [x, unused])
    with pytest.raises(RuntimeError, match="does not require grad"):
        tg.grad((x * x).sum(), [tg.ones(2)])


def test_gradients_never_alias_each_other_or_the_upstream_gradient():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    b = tg.tensor([3.0, 4.0], requires_grad=True)
    upstream = tg.tensor([1.0, 1.0])
    (a + b).backward(upstream)
    assert not tg.device.array_module(a.device).shares_memory(a.grad.data, b.grad.data)
    assert not tg.device.array_module(a.device).shares_memory(a.grad.data, upstream.data)
    (a + b).backward(upstream)                 # in-place accumulation must not leak into b or upstream
    np.testing.assert_allclose(a.grad.numpy(), [2, 2])
    np.testing.assert_allclose(b.grad.numpy(), [2, 2])
    np.testing.assert_allclose(upstream.numpy(), [1, 1])


def test_slices_and_sums_accumulate_in_place_without_writing_shared_gradients():
    """The pieces of a split send back sparse slice gradients, which the engine adds into one buffer of
    its own; a gradient that arrives shared (Add hands the same tensor to both inputs) is read, never
    written; a leaf keeps a sum the engine made without a copy, and later backwards add into it."""
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.normal(size=(3, 4)), requires_grad=True)
    a, b, c = x.split(1, dim=0)
    out = (a + b) + a * 2 + (c * 0 + b)          # a: twice; b: twice, both shared; c: once
    upstream = tg.tensor(rng.normal(size=(1, 4)))
    before = upstream.numpy().copy()
    out.backward(upstream, retain_graph=True)
    np.testing.assert_array_equal(upstream.numpy(), before)
    want = np.concatenate([3 * before, 2 * before, 0 * before])
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-15)
    assert not tg.device.array_module(a.device).shares_memory(x.grad.data, upstream.data)
    out.backward(upstream)
    np.testing.assert_allclose(x.grad.numpy(), 2 * want, rtol=1e-15)
    np.testing.assert_array_equal(upstream.numpy(), before)

    y = tg.tensor(rng.normal(size=(5,)), requires_grad=True)      # a leaf whose two gradients are one tensor
    z = y + y
    g = tg.tensor(rng.normal(size=(5,)))
    z.backward(g)
    np.testing.assert_allclose(y.grad.numpy(), 2 * g.numpy())
    assert not tg.device.array_module(a.device).shares_memory(y.grad.data, g.data)

    # a residual: Add's shared gradient reaches h first, then GELU's fresh one, which takes the sum
    h = tg.tensor(rng.normal(size=(4, 6)), requires_grad=True)
    r = h * 1.0
    g = tg.tensor(rng.normal(size=(4, 6)))
    before = g.numpy().copy()
    (r + F.gelu(r, approximate="tanh")).backward(g)
    slope = gelu_reference.reference_backward(h.numpy(), np.ones((4, 6)))
    np.testing.assert_allclose(h.grad.numpy(), before * (1 + slope), rtol=1e-12)
    np.testing.assert_array_equal(g.numpy(), before)


def test_backward_frees_saved_tensors():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    node = y.grad_fn
    assert hasattr(node, "saved_tensors")
    y.sum().backward()
    assert not hasattr(node, "saved_tensors") and node.freed


def test_intermediates_are_released_when_backward_finishes():
    tracemalloc.start()      # NumPy reports its buffers to tracemalloc
    try:
        x = tg.randn(1000, 1000, dtype=tg.float64, requires_grad=True)     # 8 MB per array
        h = x.exp()
        loss = (h * h).sum()       # Mul saves h for its backward; Exp saves its output (h's buffer)
        del h
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        loss.backward()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # x.grad (8 MB) is new and h (8 MB) must be gone, though `loss` is still alive: no growth.
    assert after - before < 1_000_000, f"memory grew by {(after - before) / 1e6:.1f} MB"


def test_memory_does_not_grow_over_200_training_iterations():
    tg.manual_seed(0)
    w1 = tg.randn(32, 64, requires_grad=True)
    w2 = tg.randn(64, 10, requires_grad=True)
    data, labels = tg.randn(16, 32), tg.randint(0, 10, (16,))
    tracemalloc.start()
    try:
        for step in range(200):
            logits = (data @ w1).relu() @ w2
            loss = tg.nn.functional.cross_entropy(logits, labels)
            loss.backward()
            with tg.no_grad():
                for w in (w1, w2):
                    w.data -= 1e-3 * w.grad.data
                    w.grad = None
            if step == 20:
                gc.collect()
                early = tracemalloc.get_traced_memory()[0]
        gc.collect()
        late = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert late - early < 200_000, f"memory grew by {(late - early) / 1e3:.0f} kB over 180 iterations"


def test_ops_on_different_devices_are_a_clear_error():
    with pytest.raises(RuntimeError, match="cpu.*emu|emu.*cpu"):
        tg.ones(2, device="cpu") + tg.ones(2, device="emu")
    with pytest.raises(RuntimeError, match="cpu.*emu|emu.*cpu"):
        tg.ones(2, 2, device="cpu") @ tg.ones(2, 2, device="emu")


def test_moving_between_devices_is_differentiable():
    x = tg.tensor([1.0, 2.0], device="cpu", requires_grad=True)
    y = x.to("emu")
    assert y.device == "emu"
    (y * y).sum().backward()
    assert x.grad.device == "cpu"
    np.testing.assert_allclose(x.grad.numpy(), [2, 4])


def test_grad_dtype_follows_the_leaf_in_mixed_precision():
    x = tg.tensor([1.0, 2.0], requires_grad=True)                       # float32
    y = tg.tensor([1.0, 2.0], dtype=tg.float64, requires_grad=True)
    z = x * y                                                           # promoted to float64
    assert z.dtype == tg.float64
    z.sum().backward()
    assert x.grad.dtype == tg.float32 and y.grad.dtype == tg.float64


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_a_non_finite_output_leaves_the_other_gradients_alone():
    """The implied gradient of a scalar output is 1, not out * 0 + 1 (nan when out is inf or nan): one
    bad element must not poison every gradient. PyTorch gives [nan, 0.25] and [inf, e] here."""
    x = tg.tensor([-1.0, 4.0], requires_grad=True)
    x.sqrt().sum().backward()
    assert np.isnan(x.grad.numpy()[0]) and x.grad.numpy()[1] == 0.25
    y = tg.tensor([1000.0, 1.0], requires_grad=True)
    with np.errstate(over="ignore"):
        y.exp().sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [np.inf, np.e], rtol=1e-6)



class _DoublesAndAddsWhatWaits(Function):
    """2x, whose backward adds the gradient already waiting for x into its own (take_gradient_so_far)."""
    taken = []

    def forward(ctx, x):
        return x.data * 2

    def backward(ctx, grad):
        so_far, _ = ctx.take_gradient_so_far(0)
        type(ctx).taken.append(None if so_far is None else so_far.numpy().copy())
        mine = grad * 2
        return mine if so_far is None else mine + so_far


@pytest.mark.parametrize("create_graph", [False, True])
def test_a_backward_may_take_the_gradient_waiting_for_its_input(create_graph):
    """y = sum(2x * x): the product's backward runs first and sends 2x to x, which waits when the doubling's
    backward runs; that one is handed 2x and returns its own 2 * x plus it. The engine has nothing left to add:
    4x in all. Recorded (create_graph), nothing is handed over and the engine adds."""
    _DoublesAndAddsWhatWaits.taken = []
    x = tg.Tensor([1.0, -2.0], requires_grad=True)
    y = (_DoublesAndAddsWhatWaits.apply(x) * x).sum()
    (gx,) = tg.grad(y, [x], create_graph=create_graph)
    np.testing.assert_allclose(gx.numpy(), [4.0, -8.0])
    taken = _DoublesAndAddsWhatWaits.taken
    assert len(taken) == 1 and (taken[0] is None) == create_graph
    if not create_graph:
        np.testing.assert_allclose(taken[0], [2.0, -4.0])


def test_nothing_is_taken_when_nothing_waits():
    _DoublesAndAddsWhatWaits.taken = []
    x = tg.Tensor([1.0, 2.0], requires_grad=True)
    _DoublesAndAddsWhatWaits.apply(x).sum().backward()
    assert _DoublesAndAddsWhatWaits.taken == [None]
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])

