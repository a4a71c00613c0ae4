"""GPT's Block as one op (nn/gpt_block.py) against the same block run op by op.

The one op calls the kernels the layers' own ops call, in the same order, so on the cpu its output and every
gradient must be the op-by-op graph's exactly, not merely close. The op-by-op run is the same model with
Block.one_op_layers answering None. Also: where the block must run op by op instead (dropout at work, float64,
autocast, the reference path, LoRA's layers, ...), that it does; a nan in the attention; frozen parameters; a
graph of the backward (create_graph), tg.grad, gradient checkpointing and generation with a cache.
"""
import contextlib

import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu import kernels
from tinygrad_gpu.kernels import cpu_paths
from tinygrad_gpu.nn import gpt, gpt_block
from tinygrad_gpu.nn.lora import apply_lora


def small_gpt(bias=False, dropout=0.0, n_head=2, n_embd=16, n_layer=2, dtype=None, seed=0):
    tg.manual_seed(seed)
    model = tg.nn.GPT(tg.nn.GPTConfig(block_size=16, vocab_size=11, n_layer=n_layer, n_head=n_head, n_embd=n_embd,
                                      dropout=dropout, bias=bias))
    return model if dtype is None else model.to(dtype)


@contextlib.contextmanager
def op_by_op(monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(gpt.Block, "one_op_layers", lambda self, x: None)
        yield


def blocks_in_graph(t):
    """How many GPTBlock nodes the graph behind t has."""
    seen, stack, count = set(), [t.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or isinstance(node, tg.Tensor) or id(node) in seen:
            continue
        seen.add(id(node))
        count += type(node) is gpt_block.GPTBlock
        stack.extend(node.next_nodes)
    return count


def loss_and_grads(model, idx, targets):
    for p in model.parameters():
        p.grad = None
    _, loss = model(idx, targets)
    loss.backward()
    return loss, {name: None if p.grad is None else p.grad.numpy() for name, p in model.named_parameters()}


def assert_same(a, b):
    (loss_a, grads_a), (loss_b, grads_b) = a, b
    np.testing.assert_array_equal(loss_a.numpy(), loss_b.numpy())
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        if grads_a[name] is None or grads_b[name] is None:
            assert grads_a[name] is None and grads_b[name] is None, name
        else:
            np.testing.assert_array_equal(grads_a[name], grads_b[name], err_msg=name)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(3, 16, 16, 2), (2, 5, 24, 3), (1, 1, 8, 1), (4, 13, 32, 4)])
def test_the_one_op_gives_the_layers_numbers_exactly(monkeypatch, bias, shape):
    B, T, C, H = shape
    model = small_gpt(bias=bias, n_head=H, n_embd=C)
    rng = np.random.default_rng(1)
    idx, targets = (tg.tensor(rng.integers(0, 11, (B, T))) for _ in range(2))
    one_op = loss_and_grads(model, idx, targets)
    assert blocks_in_graph(one_op[0]) == 2
    with op_by_op(monkeypatch):
        layers = loss_and_grads(model, idx, targets)
        assert blocks_in_graph(layers[0]) == 0
    assert_same(one_op, layers)


def test_every_cpu_path_but_the_reference_runs_it(monkeypatch):
    """The compiled path (numba; the attention by its twin where MKL multiplies) and the NumPy path both run the one
    op, with their own kernels on both sides; the reference path (a learner's) runs the layers one by one."""
    model = small_gpt()
    idx = tg.tensor(np.random.default_rng(2).integers(0, 11, (2, 16)))
    paths = ["numpy"] + (["compiled"] if cpu_paths.numba_installed() else [])
    for path in paths:
        monkeypatch.setenv(cpu_paths.CPU_KERNELS, path)
        one_op = loss_and_grads(model, idx, idx)
        assert blocks_in_graph(one_op[0]) == 2, path
        with op_by_op(monkeypatch):
            assert_same(one_op, loss_and_grads(model, idx, idx))
    monkeypatch.setenv(cpu_paths.CPU_KERNELS, "reference")
    assert blocks_in_graph(model(idx, idx)[1]) == 0


def test_without_a_graph_the_output_is_the_same(monkeypatch):
    model = small_gpt(bias=True, dropout=0.2).eval()          # eval: the dropout is not at work
    idx = tg.tensor(np.random.default_rng(3).integers(0, 11, (3, 16)))
    with tg.no_grad():
        logits, _ = model(idx)
        with op_by_op(monkeypatch):
            expected, _ = model(idx)
    np.testing.assert_array_equal(logits.numpy(), expected.numpy())
    assert blocks_in_graph(model(idx, idx)[1]) == 2


@pytest.mark.parametrize("case", ["dropout", "float64", "autocast", "fused off", "lora", "other gelu", "cache",
                                  "switched off", "wrong weight"])
def test_the_block_runs_op_by_op_where_the_one_op_does_not_apply(case):
    model = small_gpt(dropout=0.1 if case == "dropout" else 0.0, dtype=tg.float64 if case == "float64" else None)
    idx = tg.tensor(np.random.default_rng(4).integers(0, 11, (2, 16)))
    if case == "lora":
        apply_lora(model, rank=2, alpha=4)
    if case == "other gelu":
        model.transformer.h[0].mlp.gelu.approximate = "none"
    if case == "switched off":
        model.transformer.h[1].as_one_op = False
    if case == "wrong weight":          # op by op, so that F.linear's error names the shapes
        model.transformer.h[0].attn.c_proj.weight = tg.nn.Parameter(tg.zeros(16, 8))
        with pytest.raises(RuntimeError, match=r"linear: input of shape \(2, 16, 16\) does not fit weight"):
            model(idx, idx)
        return
    if case == "cache":
        out = model.generate(idx[:, :4], max_new_tokens=3, temperature=1.0, top_k=1)
        assert out.shape == (2, 7)
        return
    context = {"autocast": tg.autocast("cpu", dtype=tg.bfloat16), "fused off": kernels.fused(False)}.get(
        case, contextlib.nullcontext())
    with context:
        _, loss = model(idx, idx)
    assert blocks_in_graph(loss) == (1 if case in ("other gelu", "switched off") else 0)


def test_a_nan_in_the_attention_runs_the_block_op_by_op(monkeypatch):
    """PyTorch's rules decide what attention gives for non-finite inputs (scaled_dot_product_attention applies
    them): the block then runs op by op, and gives what op by op gives."""
    model = small_gpt()
    block = model.transformer.h[0]
    x = tg.tensor(np.random.default_rng(5).standard_normal((2, 16, 16)).astype(np.float32))
    x.data[1, 3, 5] = np.inf
    assert block.one_op_layers(x) is not None
    with tg.no_grad():
        out = block(x)
        with op_by_op(monkeypatch):
            expected = block(x)
    assert not np.isfinite(out.numpy()).all()
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


def test_frozen_parameters_get_no_gradient_and_the_rest_the_same(monkeypatch):
    model = small_gpt(bias=True)
    for name, p in model.named_parameters():
        if name.startswith("transformer.h.1.attn") or name.endswith("ln_2.bias") or name.startswith("transformer.w"):
            p.requires_grad_(False)
    idx = tg.tensor(np.random.default_rng(6).integers(0, 11, (2, 16)))
    one_op = loss_and_grads(model, idx, idx)
    assert one_op[1]["transformer.h.1.attn.c_attn.weight"] is None and one_op[1]["transformer.h.0.ln_2.bias"] is None
    with op_by_op(monkeypatch):
        assert_same(one_op, loss_and_grads(model, idx, idx))


def test_tg_grad_of_the_blocks_input(monkeypatch):
    block = small_gpt(bias=True).transformer.h[0]
    x = tg.tensor(np.random.default_rng(7).standard_normal((2, 9, 16)).astype(np.float32), requires_grad=True)
    (dx,) = tg.grad((block(x) ** 2).sum(), [x])
    with op_by_op(monkeypatch):
        (expected,) = tg.grad((block(x) ** 2).sum(), [x])
    np.testing.assert_array_equal(dx.numpy(), expected.numpy())


def test_a_graph_of_the_backward_differentiates_the_block(monkeypatch):
    """create_graph=True: the engine differentiates GPTBlock's composition (the layers as functions), and the
    second derivative is the op-by-op graph's."""
    block = small_gpt(bias=True, n_embd=8).transformer.h[0]
    x = tg.tensor(np.random.default_rng(8).standard_normal((2, 5, 8)), dtype=tg.float32, requires_grad=True)

    def second_derivatives():
        params = list(block.parameters())
        grads = tg.grad((block(x) ** 2).sum(), [x, *params], create_graph=True)
        return tg.grad(sum((g * g).sum() for g in grads), [x, *params])
    got = second_derivatives()
    with op_by_op(monkeypatch):
        expected = second_derivatives()
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_gradient_checkpointing_gives_the_same_gradients(monkeypatch):
    model = small_gpt()
    idx = tg.tensor(np.random.default_rng(9).integers(0, 11, (2, 16)))
    expected = loss_and_grads(model, idx, idx)
    model.gradient_checkpointing_enable()
    assert_same(loss_and_grads(model, idx, idx), expected)
