"""nn.GPT: nanoGPT's parameter names and shapes, weight tying, initialisation, loss, causality,
training on one batch, generation, FLOP estimate, optimizer groups, and loading a Hugging Face
GPT-2 checkpoint (written here, random) checked against a NumPy GPT-2 forward pass."""
import json
import math
import time

import numpy as np
import pytest
from safetensors.numpy import save_file

import tinygrad_gpu as tg
from tinygrad_gpu import nn
from tinygrad_gpu.nn import GPT, GPTConfig

from checks import overfit

TINY = dict(block_size=8, vocab_size=13, n_layer=2, n_head=2, n_embd=8)


def tiny(**changes):
    return GPT(GPTConfig(**{**TINY, **changes}))


def ids(*shape, vocab=TINY["vocab_size"], seed=0):
    return tg.tensor(np.random.default_rng(seed).integers(0, vocab, shape))


# ----------------------------------------------------------------------------- names, shapes, tying
NANOGPT_KEYS_WITH_BIAS = [
    "transformer.wte.weight", "transformer.wpe.weight",
    "transformer.h.0.ln_1.weight", "transformer.h.0.ln_1.bias",
    "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.bias",
    "transformer.h.0.attn.c_proj.weight", "transformer.h.0.attn.c_proj.bias",
    "transformer.h.0.ln_2.weight", "transformer.h.0.ln_2.bias",
    "transformer.h.0.mlp.c_fc.weight", "transformer.h.0.mlp.c_fc.bias",
    "transformer.h.0.mlp.c_proj.weight", "transformer.h.0.mlp.c_proj.bias",
    "transformer.h.1.ln_1.weight", "transformer.h.1.ln_1.bias",
    "transformer.h.1.attn.c_attn.weight", "transformer.h.1.attn.c_attn.bias",
    "transformer.h.1.attn.c_proj.weight", "transformer.h.1.attn.c_proj.bias",
    "transformer.h.1.ln_2.weight", "transformer.h.1.ln_2.bias",
    "transformer.h.1.mlp.c_fc.weight", "transformer.h.1.mlp.c_fc.bias",
    "transformer.h.1.mlp.c_proj.weight", "transformer.h.1.mlp.c_proj.bias",
    "transformer.ln_f.weight", "transformer.ln_f.bias",
    "lm_head.weight",
]

NANOGPT_KEYS_WITHOUT_BIAS = [
    "transformer.wte.weight", "transformer.wpe.weight",
    "transformer.h.0.ln_1.weight", "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_proj.weight",
    "transformer.h.0.ln_2.weight", "transformer.h.0.mlp.c_fc.weight", "transformer.h.0.mlp.c_proj.weight",
    "transformer.h.1.ln_1.weight", "transformer.h.1.attn.c_attn.weight", "transformer.h.1.attn.c_proj.weight",
    "transformer.h.1.ln_2.weight", "transformer.h.1.mlp.c_fc.weight", "transformer.h.1.mlp.c_proj.weight",
    "transformer.ln_f.weight",
    "lm_head.weight",
]


def expected_shape(key, V, T, C):
    shapes = {"wte.weight": (V, C), "wpe.weight": (T, C), "c_attn.weight": (3 * C, C), "c_attn.bias": (3 * C,),
              "attn.c_proj.weight": (C, C), "c_fc.weight": (4 * C, C), "c_fc.bias": (4 * C,),
              "mlp.c_proj.weight": (C, 4 * C), "lm_head.weight": (V, C)}
    return next((s for suffix, s in shapes.items() if key.endswith(suffix)), (C,))


@pytest.mark.parametrize("bias, keys", [(True, NANOGPT_KEYS_WITH_BIAS), (False, NANOGPT_KEYS_WITHOUT_BIAS)])
def test_state_dict_keys_and_shapes_are_nanogpts(bias, keys):
    model = tiny(bias=bias)
    state = model.state_dict()
    assert list(state) == keys
    for key, value in state.items():
        assert value.shape == expected_shape(key, 13, 8, 8), key
    # named_parameters lists the tied lm_head.weight once, under its first name.
    assert [n for n, _ in model.named_parameters()] == keys[:-1]


def num_params_formula(V, T, C, L, bias):
    per_block = 12 * C * C + (13 * C if bias else 2 * C)     # 4 matrices; 2 LayerNorms; biases 3C + C + 4C + C
    return V * C + T * C + L * per_block + (2 * C if bias else C)


@pytest.mark.parametrize("bias", [True, False])
def test_lm_head_is_tied_to_wte_and_num_params_matches_the_formula(bias):
    model = tiny(bias=bias)
    assert model.lm_head.weight is model.transformer.wte.weight
    total = num_params_formula(13, 8, 8, 2, bias)
    assert model.num_params(non_embedding=False) == total
    assert model.num_params() == total - 8 * 8                     # without the position table
    assert sum(p.numel() for p in model.parameters()) == total
    # Gradients from both uses meet in the one tensor; an update moves both.
    _, loss = model(ids(2, 5), ids(2, 5, seed=1))
    loss.backward()
    assert model.lm_head.weight.grad is model.transformer.wte.weight.grad
    model.to("emu")
    assert model.lm_head.weight is model.transformer.wte.weight and model.lm_head.weight.device == "emu"


def test_initialisation_std():
    config = GPTConfig(block_size=64, vocab_size=512, n_layer=4, n_head=4, n_embd=128)
    model = GPT(config)
    residual_std = 0.02 / math.sqrt(2 * config.n_layer)
    seen = set()
    for name, p in model.named_parameters():
        w = p.numpy().astype(np.float64)
        if name.endswith("c_proj.weight"):
            std, seen_as = residual_std, "c_proj"
        elif w.ndim == 2:
            std, seen_as = 0.02, "matrix"
        elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
            assert np.all(w == 1), name
            seen.add("ln")
            continue
        else:
            assert np.all(w == 0), name                             # every bias starts at zero
            seen.add("bias")
            continue
        seen.add(seen_as)
        assert abs(w.std() - std) < 0.04 * std, (name, w.std(), std)
        assert abs(w.mean()) < 0.04 * std, (name, w.mean())
    assert seen == {"c_proj", "matrix", "ln", "bias"}


# ----------------------------------------------------------------------------- forward and loss
def test_forward_shapes_and_loss_none_without_targets():
    model = tiny()
    logits, loss = model(ids(3, 5))
    assert logits.shape == (3, 5, 13) and loss is None
    logits, loss = model(ids(2, 8))                                # exactly block_size is fine
    assert logits.shape == (2, 8, 13)


def test_loss_at_initialisation_is_about_log_vocab():
    model = GPT(GPTConfig(block_size=16, vocab_size=64, n_layer=2, n_head=2, n_embd=32))
    _, loss = model(ids(8, 16, vocab=64), ids(8, 16, vocab=64, seed=1))
    assert loss.shape == () and loss.requires_grad
    assert abs(loss.item() - math.log(64)) < 0.1, loss.item()


def np_cross_entropy(logits, targets):
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return -np.take_along_axis(log_probs, targets[:, None], 1)[:, 0]


def test_targets_of_minus_one_are_ignored():
    model = tiny()
    targets = np.random.default_rng(1).integers(0, 13, (2, 6))
    targets[0, :4] = -1
    targets[1, 5] = -1
    logits, loss = model(ids(2, 6), tg.tensor(targets))
    flat_logits, flat_targets = logits.numpy().reshape(12, 13).astype(np.float64), targets.reshape(-1)
    kept = flat_targets != -1
    expected = np_cross_entropy(flat_logits[kept], flat_targets[kept]).mean()
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    loss.backward()
    assert model.transformer.wte.weight.grad is not None


def test_sequence_longer_than_block_size_is_a_clear_error():
    with pytest.raises(ValueError, match=r"9.*block_size 8"):
        tiny()(ids(1, 9))


def test_n_embd_not_divisible_by_n_head_is_a_clear_error():
    with pytest.raises(ValueError, match=r"n_embd \(10\).*divisible.*n_head \(3\)"):
        GPTConfig(n_embd=10, n_head=3)


def test_causality_later_tokens_do_not_change_earlier_logits():
    model = tiny(n_layer=2)
    first = ids(2, 8).numpy()
    second = first.copy()
    second[:, 5] = (second[:, 5] + 1) % 13
    a, _ = model(tg.tensor(first))
    b, _ = model(tg.tensor(second))
    np.testing.assert_allclose(a.numpy()[:, :5], b.numpy()[:, :5], rtol=1e-6, atol=1e-7)
    assert not np.allclose(a.numpy()[:, 5:], b.numpy()[:, 5:], rtol=1e-6, atol=1e-7)   # from 5 on, it may


def test_gradcheck_loss_through_the_whole_model():
    model = tiny(n_layer=1, vocab_size=7, n_embd=4).to(tg.float64)
    for p in model.parameters():              # non-trivial LayerNorm weights and biases
        nn.init.normal_(p, 0.0, 0.5)
    x, y = ids(2, 5, vocab=7), ids(2, 5, vocab=7, seed=1)
    block = model.transformer.h[0]
    weights = [model.transformer.wte.weight, model.transformer.wpe.weight, block.attn.c_attn.weight,
               block.attn.c_attn.bias, block.ln_2.weight, block.mlp.c_proj.weight, model.transformer.ln_f.bias]
    tg.gradcheck(lambda *ws: model(x, y)[1], weights)
    tg.gradcheck(lambda *ws: model(x)[0], weights[:3])


def test_dropout_is_active_only_in_training():
    model = tiny(dropout=0.5)
    x = ids(2, 6)
    train_a, train_b = model(x)[0].numpy(), model(x)[0].numpy()
    assert not np.allclose(train_a, train_b)
    model.eval()
    np.testing.assert_array_equal(model(x)[0].numpy(), model(x)[0].numpy())


def test_tiny_gpt_overfits_one_batch():
    B, T, V = 4, 16, 16
    model = GPT(GPTConfig(block_size=T, vocab_size=V, n_layer=2, n_head=2, n_embd=32))
    data = np.random.default_rng(0).integers(0, V, (B, T + 1))
    data[:, 0] = np.arange(B)      # distinct first tokens: otherwise two rows could share a context
    x, y = tg.tensor(data[:, :-1]), tg.tensor(data[:, 1:])          # with different next tokens (loss > 0)
    optimizer = model.configure_optimizers(weight_decay=0.0, learning_rate=1e-2, betas=(0.9, 0.99))
    start = time.perf_counter()
    losses = overfit(lambda: model(x, y)[1], optimizer)
    seconds = time.perf_counter() - start
    print(f"GPT overfit: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {len(losses)} steps, {seconds:.2f} s")
    assert abs(losses[0] - math.log(V)) < 0.1
    assert losses[-1] < 0.05, f"final loss {losses[-1]} after {len(losses)} steps"


# ----------------------------------------------------------------------------- generation
def greedy(model, idx, steps):
    idx = idx.numpy()
    for _ in range(steps):
        logits, _ = model(tg.tensor(idx[:, -model.config.block_size:]))
        idx = np.concatenate([idx, logits.numpy()[:, -1].argmax(-1)[:, None]], 1)
    return idx


def test_generate_shape_range_and_prefix():
    model = tiny()
    start = ids(3, 2)
    out = model.generate(start, 10)
    assert out.shape == (3, 12) and out.dtype == start.dtype and not out.requires_grad
    assert np.array_equal(out.numpy()[:, :2], start.numpy())
    assert out.numpy().min() >= 0 and out.numpy().max() < 13
    assert model.training                                            # generate restores the mode


def test_generate_temperature_zero_and_top_k_one_are_greedy():
    model = tiny()
    start = ids(2, 3)
    expected = greedy(model, start, 12)                              # 15 > block_size 8: context is cropped
    np.testing.assert_array_equal(model.generate(start, 12, temperature=0).numpy(), expected)
    np.testing.assert_array_equal(model.generate(start, 12, temperature=0).numpy(), expected)
    np.testing.assert_array_equal(model.generate(start, 12, top_k=1).numpy(), expected)


def test_generate_same_seed_same_sample():
    model = tiny()
    start = ids(2, 3)
    tg.manual_seed(5)
    first = model.generate(start, 12).numpy()
    tg.manual_seed(5)
    np.testing.assert_array_equal(model.generate(start, 12).numpy(), first)
    tg.manual_seed(6)
    assert not np.array_equal(model.generate(start, 12).numpy(), first)


def test_generate_crops_a_context_longer_than_block_size():
    model = tiny()
    start = ids(2, 12)                                               # already longer than block_size 8
    out = model.generate(start, 3, temperature=0)
    assert out.shape == (2, 15)
    np.testing.assert_array_equal(out.numpy(), greedy(model, start, 3))
    # The first new token depends only on the last block_size tokens.
    changed = start.numpy().copy()
    changed[:, :4] = (changed[:, :4] + 1) % 13
    np.testing.assert_array_equal(model.generate(tg.tensor(changed), 1, temperature=0).numpy()[:, -1],
                                  out.numpy()[:, 12])


def test_sampling_follows_the_softmax_and_top_k():
    model = tiny()
    model.lm_head.weight.data[...] *= 10       # a spread-out distribution, far from uniform
    context = np.tile(ids(1, 4).numpy(), (4000, 1))
    logits, _ = model(tg.tensor(context[:1]))
    probs = np.exp(logits.numpy()[0, -1].astype(np.float64))
    probs /= probs.sum()
    drawn = model.generate(tg.tensor(context), 1).numpy()[:, -1]
    frequencies = np.bincount(drawn, minlength=13) / len(drawn)
    assert np.abs(frequencies - probs).max() < 0.03, (frequencies, probs)
    # top_k=3: only the three likeliest, in proportion to their probabilities.
    top3 = np.argsort(probs)[-3:]
    restricted = np.zeros(13)
    restricted[top3] = probs[top3] / probs[top3].sum()
    drawn = model.generate(tg.tensor(context), 1, top_k=3).numpy()[:, -1]
    assert set(drawn.tolist()) <= set(top3.tolist())
    assert np.abs(np.bincount(drawn, minlength=13) / len(drawn) - restricted).max() < 0.03
    # Temperature: a high one flattens the distribution towards uniform.
    drawn = model.generate(tg.tensor(context), 1, temperature=1e6).numpy()[:, -1]
    assert np.abs(np.bincount(drawn, minlength=13) / len(drawn) - 1 / 13).max() < 0.03


# ----------------------------------------------------------------------------- accounting, optimizer
def test_flops_per_token_formula():
    model = tiny()
    N = num_params_formula(13, 8, 8, 2, True) - 8 * 8
    assert model.flops_per_token() == 6 * N + 12 * 2 * 8 * 8


def test_configure_optimizers_decays_matrices_only():
    model = tiny()
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=3e-4, betas=(0.9, 0.95))
    decay, no_decay = optimizer.param_groups
    params = list(model.parameters())
    assert {id(p) for p in decay["params"]} == {id(p) for p in params if p.ndim == 2}
    assert {id(p) for p in no_decay["params"]} == {id(p) for p in params if p.ndim == 1}
    assert len(decay["params"]) + len(no_decay["params"]) == len(params)
    assert len(decay["params"]) == 2 + 4 * 2                                  # wte (= lm_head), wpe, 4 per block
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert decay["lr"] == no_decay["lr"] == 3e-4 and decay["betas"] == (0.9, 0.95)
    assert isinstance(optimizer, tg.optim.AdamW)


def test_configure_optimizers_leaves_frozen_parameters_out():
    model = tiny()
    model.transformer.wpe.weight.requires_grad_(False)
    model.transformer.h[0].requires_grad_(False)
    decay, no_decay = model.configure_optimizers(weight_decay=0.1, learning_rate=3e-4).param_groups
    trained = [p for p in model.parameters() if p.requires_grad]
    assert len(trained) < len(list(model.parameters()))
    assert [id(p) for p in decay["params"]] == [id(p) for p in trained if p.ndim == 2]      # order kept too
    assert [id(p) for p in no_decay["params"]] == [id(p) for p in trained if p.ndim == 1]
    # A group that freezing empties is left out, as before, so saved optimizer states still fit.
    for p in model.parameters():
        if p.ndim == 2:
            p.requires_grad_(False)
    (only,) = model.configure_optimizers(weight_decay=0.1, learning_rate=3e-4).param_groups
    assert only["weight_decay"] == 0.0 and [id(p) for p in only["params"]] == [id(p) for p in trained if p.ndim == 1]


# ----------------------------------------------------------------------------- Hugging Face GPT-2
def gpt2_arrays(L=2, C=8, V=20, P=16, seed=0):
    """A random GPT-2 in Hugging Face's layout: Conv1D weights (in, out), attention-mask buffers."""
    rng = np.random.default_rng(seed)

    def r(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    arrays = {"wte.weight": r(V, C), "wpe.weight": r(P, C), "ln_f.weight": 1 + r(C), "ln_f.bias": r(C)}
    for i in range(L):
        h = f"h.{i}."
        arrays.update({
            h + "ln_1.weight": 1 + r(C), h + "ln_1.bias": r(C),
            h + "attn.c_attn.weight": r(C, 3 * C), h + "attn.c_attn.bias": r(3 * C),
            h + "attn.c_proj.weight": r(C, C), h + "attn.c_proj.bias": r(C),
            h + "ln_2.weight": 1 + r(C), h + "ln_2.bias": r(C),
            h + "mlp.c_fc.weight": r(C, 4 * C), h + "mlp.c_fc.bias": r(4 * C),
            h + "mlp.c_proj.weight": r(4 * C, C), h + "mlp.c_proj.bias": r(C),
            h + "attn.bias": np.tril(np.ones((P, P), np.float32))[None, None],   # a mask, not a weight
            h + "attn.masked_bias": np.array(-1e4, np.float32),
        })
    return arrays


def np_gpt2_logits(a, idx, L, n_head):
    """GPT-2's forward pass in float64 NumPy, straight from the Hugging Face arrays."""
    a = {k: v.astype(np.float64) for k, v in a.items()}

    def layer_norm(x, w, b):
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    B, T = idx.shape
    x = a["wte.weight"][idx] + a["wpe.weight"][np.arange(T)]
    C = x.shape[-1]
    hs = C // n_head
    for i in range(L):
        p = lambda name: a[f"h.{i}.{name}"]                                   # noqa: E731
        h = layer_norm(x, p("ln_1.weight"), p("ln_1.bias"))
        q, k, v = np.split(h @ p("attn.c_attn.weight") + p("attn.c_attn.bias"), 3, axis=-1)
        q, k, v = (t.reshape(B, T, n_head, hs).transpose(0, 2, 1, 3) for t in (q, k, v))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hs)
        scores = np.where(np.tril(np.ones((T, T), bool)), scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        y = (weights @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = layer_norm(x, p("ln_2.weight"), p("ln_2.bias"))
        x = x + gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias")) @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    return layer_norm(x, a["ln_f.weight"], a["ln_f.bias"]) @ a["wte.weight"].T


def write_checkpoint(directory, arrays, L=2, n_head=2, C=8, V=20, P=16):
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(
        {"model_type": "gpt2", "n_layer": L, "n_head": n_head, "n_embd": C, "n_positions": P, "n_ctx": P,
         "vocab_size": V, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}))
    save_file(arrays, str(directory / "model.safetensors"))
    return str(directory)


@pytest.mark.parametrize("prefixed", [False, True])
def test_from_pretrained_matches_a_numpy_gpt2(tmp_path, prefixed):
    arrays = gpt2_arrays()
    stored = {("transformer." + k if prefixed else k): v for k, v in arrays.items()}
    if prefixed:
        stored["lm_head.weight"] = arrays["wte.weight"]          # some exports write the tied head too
    model = GPT.from_pretrained(write_checkpoint(tmp_path / "gpt2", stored))
    assert (model.config.n_layer, model.config.n_head, model.config.n_embd, model.config.block_size,
            model.config.vocab_size, model.config.bias) == (2, 2, 8, 16, 20, True)
    assert model.lm_head.weight is model.transformer.wte.weight
    # Conv1D weights (in, out) become Linear weights (out, in).
    np.testing.assert_array_equal(model.transformer.h[1].attn.c_attn.weight.numpy(),
                                  arrays["h.1.attn.c_attn.weight"].T)
    np.testing.assert_array_equal(model.transformer.h[0].mlp.c_proj.weight.numpy(),
                                  arrays["h.0.mlp.c_proj.weight"].T)
    np.testing.assert_array_equal(model.transformer.wpe.weight.numpy(), arrays["wpe.weight"])
    idx = np.random.default_rng(1).integers(0, 20, (2, 16))
    logits, _ = model(tg.tensor(idx))
    np.testing.assert_allclose(logits.numpy(), np_gpt2_logits(arrays, idx, L=2, n_head=2), rtol=1e-4, atol=1e-4)


def test_from_pretrained_overrides_and_missing_weights(tmp_path):
    arrays = gpt2_arrays(seed=2)
    model = GPT.from_pretrained(write_checkpoint(tmp_path / "a", arrays), dropout=0.1)
    assert model.config.dropout == 0.1
    del arrays["h.1.mlp.c_fc.bias"]
    with pytest.raises(KeyError, match=r"transformer\.h\.1\.mlp\.c_fc\.bias"):
        GPT.from_pretrained(write_checkpoint(tmp_path / "b", arrays))
