"""gradient_sums.py: adding gradients up in place where that is safe, and the check that keeps it so.

The engine writes into an array only when it is spare (nobody else holds it). A Function that
declares backward_returns_spare promises its backward returns arrays it has just made; with
TINYGRAD_GPU_CHECK_SPARE=1 (on for the whole suite, see conftest.py) every such promise is
checked as the backward runs.
"""
import numpy as np
import pytest

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from tinygrad_gpu import gradient_sums
from tinygrad_gpu.gradient_sums import GradientSums, SliceGradient
from tinygrad_gpu.ops import fused, linalg
from tinygrad_gpu.tensor import Function, Tensor

from conftest import allocation


def test_the_suite_runs_with_the_check_on():
    assert gradient_sums.CHECK_SPARE, "conftest.py sets TINYGRAD_GPU_CHECK_SPARE=1 before importing tinygrad_gpu"


class _Liar(Function):
    """Declares its gradients spare, and returns, by `lie`, an array someone else holds."""

    backward_returns_spare = True

    def forward(ctx, a, b, lie):
        ctx.save_for_backward(a, b)
        ctx.lie, ctx.kept = lie, a.data * 2
        return a.data * b.data

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        fresh = Tensor._wrap(grad.data * b.data, grad.device)
        lies = {"incoming": (grad, fresh), "saved input": (a, fresh),
                "kept array": (Tensor._wrap(ctx.kept[::-1], a.device), fresh),        # a view of it
                "each other": (fresh, Tensor._wrap(fresh.data[::-1], grad.device)), "honest": (fresh, grad * a)}
        return lies[ctx.lie]


@pytest.mark.parametrize("lie, what", [("incoming", "its incoming gradient"), ("saved input", "its saved_tensors"),
                                       ("kept array", "its kept"), ("each other", "its gradient for input 1")])
def test_a_backward_whose_spare_gradients_are_held_elsewhere_is_caught(lie, what):
    a, b = tg.tensor([1.0, 2.0], requires_grad=True), tg.tensor([3.0, 4.0], requires_grad=True)
    upstream = tg.tensor([1.0, 1.0])
    with pytest.raises(RuntimeError, match=f"declares backward_returns_spare.*{what}"):
        _Liar.apply(a, b, lie=lie).backward(upstream)


def test_an_honest_backward_passes_the_check_and_the_check_can_be_off(monkeypatch):
    a, b = tg.tensor([1.0, 2.0], requires_grad=True), tg.tensor([3.0, 4.0], requires_grad=True)
    _Liar.apply(a, b, lie="honest").backward(tg.tensor([1.0, 1.0]))
    np.testing.assert_allclose(a.grad.numpy(), [3, 4])
    monkeypatch.setattr(gradient_sums, "CHECK_SPARE", False)
    a.grad = None
    _Liar.apply(a, b, lie="saved input").backward(tg.tensor([1.0, 1.0]))      # unchecked: trusted


class _HandsOn(Function):
    """a + 2b, whose backward hands its gradient on to a as it is (or, by `lie`, to both)."""

    hands_on_its_gradient = True

    def forward(ctx, a, b, lie=False):
        ctx.lie = lie
        return a.data + 2 * b.data

    def backward(ctx, grad):
        return grad, (grad if ctx.lie else Tensor._wrap(grad.data * 2, grad.device))


class _Fresh(Function):
    """3x, its gradient a new array (spare): what it sends is kept in `sent`."""

    backward_returns_spare = True
    sent = []

    def forward(ctx, x):
        return x.data * 3

    def backward(ctx, grad):
        type(ctx).sent.append(grad.data * 3)
        return Tensor._wrap(type(ctx).sent[-1], grad.device)


def test_a_gradient_handed_on_is_spare_exactly_when_it_came_in_spare():
    """A leaf keeps the handed-on gradient without a copy when it came from an op that made it; given by the
    caller (not spare), it gets a copy; handing one gradient to two inputs is caught."""
    a, b = tg.tensor([1.0, 2.0], requires_grad=True), tg.tensor([3.0, 4.0], requires_grad=True)
    _Fresh.sent = []
    _Fresh.apply(_HandsOn.apply(a, b)).sum().backward()
    shares_memory = tg.device.array_module(a.device).shares_memory
    assert shares_memory(a.grad.data, _Fresh.sent[0])
    np.testing.assert_array_equal(b.grad.numpy(), [6, 6])
    a.grad = b.grad = None
    upstream = tg.tensor([1.0, 1.0])
    _HandsOn.apply(a, b).backward(upstream)
    assert not shares_memory(a.grad.data, upstream.data)
    with pytest.raises(RuntimeError, match="declares hands_on_its_gradient.*its gradient for input 1"):
        _Fresh.apply(_HandsOn.apply(a, b, lie=True)).sum().backward()


def test_a_gpt_training_step_keeps_every_promise(monkeypatch):
    """A training step of a small GPT with dropout (every fused op, both directions), twice: each
    backward that declares spare gradients is checked, and each kind of such op is among them."""
    checked = set()
    check = gradient_sums.check_spare

    def counting(node, *args):
        checked.add(type(node))
        check(node, *args)
    monkeypatch.setattr(gradient_sums, "check_spare", counting)
    tg.manual_seed(0)
    model = tg.nn.GPT(tg.nn.GPTConfig(block_size=8, vocab_size=11, n_layer=2, n_head=2, n_embd=8, dropout=0.1))
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=1e-3)
    idx = tg.randint(0, 11, (3, 8))
    for _ in range(2):
        _, loss = model(idx, idx)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        tg.optim.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    assert {linalg.Linear, fused.LayerNormRows, fused.GeluTanh, fused.CrossEntropyRows,
            fused.EmbeddingLookup} <= checked
    # the attention: GPT's q, k, v cut from one projection go in packed where the tiled kernels run (emu, cuda)
    assert checked & {fused.CausalAttention, fused.PackedCausalAttention}
    if idx.device != "cpu":                     # dropout's own kernels, on emu and cuda
        assert {fused.Dropout, fused.DropoutAdd} <= checked


def test_the_plain_sums_give_a_gpts_gradients(monkeypatch):
    """PlainGradientSums (TINYGRAD_GPU_PLAIN_SUMS=1: nothing spare, nothing in place, no places in one array):
    a GPT's gradients agree with the optimised sums', up to the order of float32 additions."""
    def gradients(plain: bool) -> dict:
        monkeypatch.setattr(gradient_sums, "PLAIN", plain)
        tg.manual_seed(0)
        model = tg.nn.GPT(tg.nn.GPTConfig(block_size=8, vocab_size=11, n_layer=2, n_head=2, n_embd=8, dropout=0.1))
        idx = tg.randint(0, 11, (3, 8))
        _, loss = model(idx, idx)
        loss.backward()
        return {name: p.grad for name, p in model.named_parameters()}

    optimised, plain = gradients(False), gradients(True)
    assert optimised.keys() == plain.keys()
    for name in optimised:
        np.testing.assert_allclose(plain[name].numpy(), optimised[name].numpy(), rtol=1e-5, atol=1e-7, err_msg=name)
    # The optimised sums write parameters' gradients into one array (slot); the plain ones, each its own.
    assert len({allocation(g.data) for g in optimised.values()}) < len(optimised)
    assert len({allocation(g.data) for g in plain.values()}) == len(plain)


# ----------------------------------------------------------------------------- GradientSums itself
def _t(values):
    return tg.tensor(values, dtype=tg.float64)


def test_sums_are_made_in_an_array_of_their_own_and_then_added_into_in_place():
    node = object()
    sums = GradientSums(recorded=False)
    first, second, third = _t([1.0, 2.0]), _t([10.0, 20.0]), _t([100.0, 200.0])
    sums.add(node, first)                      # held by someone else (not spare): kept, never written
    sums.add(node, second)
    total = sums.sums[id(node)]
    assert total is not first and total is not second
    sums.add(node, third)
    assert sums.sums[id(node)] is total        # the sum is spare: added into in place
    grad, spare = sums.pop(node)
    np.testing.assert_array_equal(grad.numpy(), [111, 222])
    assert spare and (first.numpy() == [1, 2]).all() and (second.numpy() == [10, 20]).all()


def test_a_spare_contribution_takes_the_sum_and_a_shared_one_is_only_read():
    node = object()
    sums = GradientSums(recorded=False)
    shared, fresh = _t([1.0, 2.0]), _t([10.0, 20.0])
    sums.add(node, shared)
    sums.add(node, fresh, spare=True)          # nobody else holds it: the sum goes into it
    grad, spare = sums.pop(node)
    assert grad is fresh and spare
    np.testing.assert_array_equal(grad.numpy(), [11, 22])
    np.testing.assert_array_equal(shared.numpy(), [1, 2])
    assert sums.pop(node) == (None, False)


def test_slices_meet_in_one_zero_filled_buffer():
    node = object()
    sums = GradientSums(recorded=False)
    x = _t(np.zeros((4, 2)))
    pieces = [SliceGradient(_t([[1.0, 2.0]]), x.shape, (slice(i, i + 1),)) for i in range(3)]
    for piece in pieces:
        sums.add(node, piece)
    grad, spare = sums.pop(node)
    np.testing.assert_array_equal(grad.numpy(), [[1, 2], [1, 2], [1, 2], [0, 0]])
    assert spare
    lone = GradientSums(recorded=False)
    lone.add(node, pieces[0])
    grad, spare = lone.pop(node)
    assert spare and grad.shape == (4, 2)       # made dense when popped: a new buffer, spare


def test_a_recorded_sum_is_never_in_place():
    node = object()
    sums = GradientSums(recorded=True)
    a, b = _t([1.0]), _t([2.0])
    sums.add(node, a, spare=True)
    sums.add(node, b, spare=True)
    grad, spare = sums.pop(node)
    assert not spare and grad is not a and grad is not b
    np.testing.assert_array_equal(a.numpy(), [1])


# ----------------------------------------------------------------------------- recorded backward of fused ops
def test_a_fused_op_given_one_tensor_twice_differentiates_each_use_once():
    """create_graph through a fused op recomputes its composition; an input that fills two places (q and
    k and v all x here) must get the gradient of each place once, as the unfused graph gives."""
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((1, 1, 4, 3))

    def second_order(enabled):
        with tg.kernels.fused(enabled):
            x = tg.tensor(x0, requires_grad=True)
            (gx,) = tg.grad(F.scaled_dot_product_attention(x, x, x, is_causal=True).tanh().sum(), [x],
                            create_graph=True)
            return gx.numpy(), tg.grad((gx * gx).sum(), [x])[0].numpy()
    for got, want in zip(second_order(True), second_order(False)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- the step's gradients in one array
def test_a_backwards_parameter_gradients_are_written_into_one_array(device):
    """Linear's dW and layer norm's parameters' gradients (its kernel's, on emu and cuda) go straight into places
    the engine made in one array for the leaves whose .grad the backward makes: views of it, no copies; the
    values those of separate arrays."""
    tg.manual_seed(1)
    layers = tg.nn.Sequential(tg.nn.Linear(6, 8), tg.nn.LayerNorm(8), tg.nn.Linear(8, 3, bias=False)).to(device)
    x = tg.randn(20, 6, device=device)
    layers(x).square().sum().backward()
    grads = {name: p.grad for name, p in layers.named_parameters()}
    written = ["0.weight", "2.weight"] + (["1.weight", "1.bias"] if device != "cpu" else [])
    assert len({allocation(grads[name].data) for name in written}) == 1
    for name, p in layers.named_parameters():                    # against a backward that takes no places
        (want,) = tg.grad(layers(x).square().sum(), [p])
        np.testing.assert_allclose(grads[name].numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def test_places_are_new_each_backward_and_gradients_still_add_up(device):
    """A gradient a caller kept from the last step is never written again (each backward makes its own array);
    a second backward without zero_grad adds into .grad as always."""
    tg.manual_seed(2)
    layer = tg.nn.Linear(5, 4).to(device)
    x = tg.randn(3, 5, device=device)
    layer(x).sum().backward()
    kept = layer.weight.grad
    first = kept.numpy().copy()
    layer.weight.grad = None
    (2 * layer(x)).sum().backward()
    np.testing.assert_array_equal(kept.numpy(), first)
    assert allocation(layer.weight.grad.data) != allocation(kept.data)
    layer(x).sum().backward()                                    # accumulates: 2 + 1 times the first
    np.testing.assert_allclose(layer.weight.grad.numpy(), 3 * first, rtol=1e-6)


def test_a_tied_weight_takes_its_place_once_and_adds_the_other_use(device):
    tg.manual_seed(3)
    w = tg.randn(7, 4, device=device, requires_grad=True)
    x, ids = tg.randn(5, 4, device=device), tg.tensor([0, 3, 3, 6], device=device)
    loss = F.linear(x, w).square().sum() + F.embedding(ids, w).sum()
    loss.backward()
    w2 = w.detach().requires_grad_()
    want_product = tg.grad(F.linear(x, w2).square().sum(), [w2])[0].numpy()
    want_lookup = tg.grad(F.embedding(ids, w2).sum(), [w2])[0].numpy()
    np.testing.assert_allclose(w.grad.numpy(), want_product + want_lookup, rtol=1e-6, atol=1e-6)
