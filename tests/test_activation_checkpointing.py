"""tg.utils.checkpoint.checkpoint and GPT.gradient_checkpointing_enable: the gradients equal those without
checkpointing bit for bit (dropout drawing the same masks, autocast casting alike, on cpu and emu), the
peak memory of a training step falls, hooks and tg.grad see the parameters inside as usual, and what is
refused says so."""
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tinygrad_gpu as tg
from tinygrad_gpu.nn import GPT, GPTConfig
from tinygrad_gpu.utils.checkpoint import checkpoint

SMALL = dict(block_size=16, vocab_size=23, n_layer=3, n_head=2, n_embd=16, bias=True)


def gpt_step(checkpointed: bool, device="cpu", dtype=None, autocast=None, dropout=0.2, steps=2, **config):
    """The loss and every gradient after `steps` backwards (accumulated) of a small GPT with dropout."""
    tg.manual_seed(0)
    model = GPT(GPTConfig(**{**SMALL, "dropout": dropout, **config}))
    if dtype is not None:
        model.to(dtype)
    model.to(device)
    if checkpointed:
        model.gradient_checkpointing_enable()
    rng = np.random.default_rng(1)
    x, y = (tg.tensor(rng.integers(0, SMALL["vocab_size"], (3, SMALL["block_size"])), device=device)
            for _ in range(2))
    tg.manual_seed(7)                   # the dropout stream, alike for both runs
    for _ in range(steps):
        with tg.autocast(device, dtype=autocast) if autocast else tg.enable_grad():
            _, loss = model(x, y)
        loss.backward()
    return loss.item(), {name: p.grad.numpy() for name, p in model.named_parameters()}


def assert_bit_equal(plain, checkpointed):
    assert plain[0] == checkpointed[0]
    for name, grad in plain[1].items():
        assert np.array_equal(grad, checkpointed[1][name]), name


def test_checkpointed_gpt_gradients_are_bit_equal(device):
    """On every device: on emu the CUDA kernels (the fused dropout drawing its own counters), on cuda a Philox
    stream set back to its offset."""
    steps = 1 if device == "emu" else 2             # emu runs the kernels on the CPU: slow
    assert_bit_equal(gpt_step(False, device=device, steps=steps), gpt_step(True, device=device, steps=steps))


def test_checkpointed_gpt_gradients_are_bit_equal_in_float64():
    assert_bit_equal(gpt_step(False, dtype=tg.float64), gpt_step(True, dtype=tg.float64))


def test_checkpointed_gpt_gradients_are_bit_equal_under_bfloat16_autocast():
    assert_bit_equal(gpt_step(False, autocast=tg.bfloat16), gpt_step(True, autocast=tg.bfloat16))


def test_checkpointed_gpt_gradients_are_bit_equal_under_float16_autocast_on_emu():
    """Two steps: from the second region on, emu casts all the parameters the last region cast at once, before
    the blocks run, and a checkpointed block meets its parameters' casts made outside it."""
    assert_bit_equal(gpt_step(False, device="emu", steps=2, autocast=tg.float16),
                     gpt_step(True, device="emu", steps=2, autocast=tg.float16))


def test_without_the_saved_random_state_the_recomputed_masks_differ():
    """What makes the equality above: the recomputation draws the forward's masks only because the
    generators are set back (preserve_rng_state=False leaves them where the forward left them)."""
    tg.manual_seed(0)
    w = tg.randn(8, 8, requires_grad=True)
    x = tg.randn(4, 8)

    def f(x):
        return tg.nn.functional.dropout(x @ w, 0.5).tanh()

    grads = []
    for preserve in (True, False):
        w.grad = None
        tg.manual_seed(3)
        checkpoint(f, x, use_reentrant=False, preserve_rng_state=preserve).sum().backward()
        grads.append(w.grad.numpy())
    w.grad = None
    tg.manual_seed(3)
    f(x).sum().backward()
    assert np.array_equal(grads[0], w.grad.numpy())
    assert not np.array_equal(grads[1], w.grad.numpy())


def test_a_step_with_checkpointed_blocks_peaks_lower():
    """The activations of one block at a time: with 6 blocks and a long context the traced peak of a
    forward and backward falls well below the plain one (NumPy reports its buffers to tracemalloc)."""
    config = dict(block_size=128, vocab_size=50, n_layer=6, n_head=4, n_embd=64, dropout=0.1)
    peaks = {}
    for checkpointed in (False, True):
        tg.manual_seed(0)
        model = GPT(GPTConfig(**config))
        if checkpointed:
            model.gradient_checkpointing_enable()
        x = tg.tensor(np.random.default_rng(0).integers(0, 50, (8, 128)))
        tracemalloc.start()
        try:
            model(x, x)[1].backward()
            peaks[checkpointed] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peaks[True] < 0.6 * peaks[False], peaks


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_a_function_of_arguments_and_parameters_gets_the_plain_gradients(rows, width, seed):
    """Any function: Tensor and non-Tensor arguments, keyword arguments, parameters reached through a
    closure, an argument that needs no gradient."""
    rng = np.random.default_rng(seed)
    w = tg.tensor(rng.standard_normal((width, width)), requires_grad=True)
    b = tg.tensor(rng.standard_normal(width), requires_grad=True)
    x = tg.tensor(rng.standard_normal((rows, width)), requires_grad=True)
    c = tg.tensor(rng.standard_normal((rows, width)))

    def f(x, c, power, shift=0.0):
        return ((x @ w + b).tanh() * c + shift) ** power

    def grads(out):
        for t in (w, b, x):
            t.grad = None
        (out * out).sum().backward()
        return [t.grad.numpy() for t in (w, b, x)]

    plain = grads(f(x, c, 2, shift=0.5))
    checkpointed = grads(checkpoint(f, x, c, 2, shift=0.5, use_reentrant=False))
    for a, b_ in zip(plain, checkpointed):
        assert np.array_equal(a, b_)


def test_gradcheck_through_a_checkpoint():
    rng = np.random.default_rng(0)
    w = tg.tensor(rng.standard_normal((3, 3)), requires_grad=True)
    x = tg.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    assert tg.gradcheck(lambda x, w: checkpoint(lambda x: (x @ w).sin(), x, use_reentrant=False), (x, w))


def test_parameters_inside_get_their_hooks_and_tg_grad_reaches_them():
    """The parameters are inputs of the checkpoint's node: the outer backward accumulates them and runs
    their post-accumulate hooks (DistributedDataParallel's) once each, and a callback queued there runs
    after all of them; tg.grad finds them as well."""
    tg.manual_seed(0)
    layer = tg.nn.Linear(4, 4)
    x = tg.randn(2, 4, requires_grad=True)
    seen, finished = [], []
    for p in layer.parameters():
        p.register_post_accumulate_grad_hook(lambda p: (seen.append(p), tg.autograd.queue_callback(
            lambda: finished.append(len(seen))) if len(seen) == 1 else None))
    checkpoint(layer, x, use_reentrant=False).sum().backward()
    assert sorted(map(id, seen)) == sorted(map(id, layer.parameters()))      # each once
    assert finished == [2]
    gw, = tg.grad(checkpoint(layer, x, use_reentrant=True).sum(), [layer.weight])
    assert np.array_equal(gw.numpy(), layer.weight.grad.numpy())


def test_without_grad_or_in_eval_nothing_is_recomputed():
    calls = []

    def f(x):
        calls.append(1)
        return x * 2

    x = tg.ones(3, requires_grad=True)
    with tg.no_grad():
        out = checkpoint(f, x, use_reentrant=False)
    assert not out.requires_grad and len(calls) == 1
    model = GPT(GPTConfig(**SMALL))
    model.gradient_checkpointing_enable()
    model.eval()
    _, loss = model(tg.zeros(1, 4, dtype=tg.int64), tg.zeros(1, 4, dtype=tg.int64))
    assert loss.grad_fn is not None and type(loss.grad_fn).__name__ != "Checkpoint"
    model.gradient_checkpointing_disable()
    assert not model.gradient_checkpointing


def test_differentiating_twice_through_a_checkpoint_is_refused():
    x = tg.tensor([0.5, 1.0], requires_grad=True)
    y = checkpoint(lambda x: (x ** 3).sum(), x, use_reentrant=False)
    with pytest.raises(RuntimeError, match="checkpoint: differentiating twice"):
        tg.grad(y, x, create_graph=True)


def test_a_function_that_returns_no_tensor_is_a_type_error():
    x = tg.ones(2, requires_grad=True)
    with pytest.raises(TypeError, match="checkpoint: the function must return one Tensor, got tuple"):
        checkpoint(lambda x: (x, x), x, use_reentrant=False)
    with pytest.raises(TypeError, match="use_reentrant must be True, False or None"):
        checkpoint(lambda x: x, x, use_reentrant="no")


def test_tensors_from_outside_come_in_as_arguments_positional_or_keyword():
    """A keyword argument's gradient arrives as a positional one's does; a tensor computed outside and reached
    through a closure is refused (the recomputation would differentiate through the outer graph too)."""
    tg.manual_seed(0)
    x, w = tg.randn(3, 4, requires_grad=True), tg.randn(4, 4, requires_grad=True)

    def f(a, b=None):
        return ((a + b) @ w).tanh()

    grads = []
    for checkpointed in (False, True):
        x.grad = w.grad = None
        h = x * 1.5
        y = checkpoint(f, h, b=h * 3, use_reentrant=False) if checkpointed else f(h, b=h * 3)
        y.sum().backward()
        grads.append((x.grad.numpy(), w.grad.numpy()))
    for plain, checkpointed in zip(*grads):
        assert np.array_equal(plain, checkpointed)
    outside = x * 2
    with pytest.raises(ValueError, match="checkpoint: the function uses a tensor computed outside it .by mul."):
        checkpoint(lambda a: a + outside, x * 1.0, use_reentrant=False)
