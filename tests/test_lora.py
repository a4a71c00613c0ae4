"""nn.lora: LoRALinear's forward and gradients, apply_lora (names, freezing, what the optimizer sees),
training that moves only the adapters, merge() back to a plain GPT with the same logits, adapter
files saved and loaded, and the errors. A small random GPT, no download."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tinygrad_gpu as tg
from tinygrad_gpu import nn
from tinygrad_gpu.nn import GPT, GPTConfig
from tinygrad_gpu.nn.lora import LoRALinear, apply_lora, load_lora, lora_layers, lora_state_dict, merge

from checks import check_op, values

# LoRALinear is two F.linear calls and a scale; test_functional.test_linear checks their second derivatives.
fewer_examples = settings(max_examples=max(5, settings.default.max_examples // 3))

TINY = dict(block_size=8, vocab_size=13, n_layer=2, n_head=2, n_embd=8)


def tiny(dtype=None):
    model = GPT(GPTConfig(**TINY))
    return model if dtype is None else model.to(dtype)


def ids(*shape, seed=0):
    return tg.tensor(np.random.default_rng(seed).integers(0, TINY["vocab_size"], shape))


def logits_of(model, x):
    with tg.no_grad():
        return model(x)[0].numpy()


def snapshot(model):
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def train(model, steps=3, lr=3e-2):
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=lr)
    x, y = ids(2, 8, seed=1), ids(2, 8, seed=2)
    for _ in range(steps):
        _, loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return optimizer


# ----------------------------------------------------------------------------- LoRALinear
@fewer_examples
@given(st.data())
def test_lora_linear_forward_and_gradients(data):
    n_in, n_out, rank = (data.draw(st.integers(1, 4)) for _ in range(3))
    batch = data.draw(st.sampled_from([(), (2,), (2, 3)]))
    layer = LoRALinear(nn.Linear(n_in, n_out, dtype=tg.float64), rank=rank, alpha=3.0)
    W, b = layer.base.weight.numpy(), layer.base.bias.numpy()
    x = data.draw(values(batch + (n_in,)))
    A, B = data.draw(values((rank, n_in))), data.draw(values((n_out, rank)))

    def fn(x, A, B):
        layer.lora_A, layer.lora_B = A, B          # the check's own tensors, so gradients reach them
        return layer(x)

    def reference(x, A, B):
        return x @ W.T + b + (3.0 / rank) * (x @ A.T) @ B.T

    check_op(fn, reference, x, A, B)


def test_lora_linear_starts_as_its_base_and_freezes_it():
    base = nn.Linear(6, 5)
    layer = LoRALinear(base, rank=3, alpha=6)
    assert layer.lora_A.shape == (3, 6) and layer.lora_B.shape == (5, 3)
    assert layer.scaling == 2.0 and layer.lora_A.dtype == base.weight.dtype
    a = layer.lora_A.numpy()
    assert np.all(np.abs(a) <= 1 / math.sqrt(6)) and np.abs(a).max() > 0.1 / math.sqrt(6)   # Linear's default
    np.testing.assert_array_equal(layer.lora_B.numpy(), 0)
    x = tg.randn(4, 6)
    np.testing.assert_array_equal(layer(x).numpy(), base(x).numpy())
    assert not base.weight.requires_grad and not base.bias.requires_grad
    assert [n for n, p in layer.named_parameters() if p.requires_grad] == ["lora_A", "lora_B"]
    layer.lora_B.data[...] = 1.0
    layer(x).sum().backward()
    assert base.weight.grad is None and layer.lora_A.grad is not None and layer.lora_B.grad is not None


def test_lora_dropout_acts_on_the_update_in_training_only():
    layer = LoRALinear(nn.Linear(8, 8), rank=4, alpha=4, dropout=0.5)
    layer.lora_B.data[...] = 1.0
    x = tg.randn(16, 8)
    plain = (layer.base(x) + (x @ layer.lora_A.T) @ layer.lora_B.T).numpy()
    assert not np.allclose(layer(x).numpy(), plain)
    np.testing.assert_allclose(layer.eval()(x).numpy(), plain, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- apply_lora
def test_apply_lora_wraps_attention_names_and_starts_identical():
    model, x = tiny(), ids(2, 8)
    before, original_keys = logits_of(model, x), list(model.state_dict())
    assert apply_lora(model, rank=2, alpha=4) is model
    np.testing.assert_array_equal(logits_of(model, x), before)
    keys = list(model.state_dict())
    for i in range(2):
        for layer in ("c_attn", "c_proj"):
            prefix = f"transformer.h.{i}.attn.{layer}."
            assert {prefix + s for s in ("base.weight", "base.bias", "lora_A", "lora_B")} <= set(keys)
        assert f"transformer.h.{i}.mlp.c_proj.weight" in keys        # "attn.c_proj" is no bare "c_proj"
    assert model.state_dict()["transformer.h.0.attn.c_attn.lora_B"].shape == (24, 2)
    assert len(keys) == len(original_keys) + 8
    assert list(lora_layers(model)) == [f"transformer.h.{i}.attn.{n}" for i in range(2) for n in ("c_attn", "c_proj")]


def test_targets_are_name_suffixes():
    model = apply_lora(tiny(), rank=1, targets="c_proj")
    assert list(lora_layers(model)) == [f"transformer.h.{i}.{n}.c_proj" for i in range(2) for n in ("attn", "mlp")]


def test_only_the_adapters_require_grad_and_reach_the_optimizer():
    model = apply_lora(tiny(), rank=2)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(n.endswith((".lora_A", ".lora_B")) for n in trainable) and len(trainable) == 8
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=1e-3)
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(p) for p in model.parameters() if p.requires_grad}


def test_training_moves_only_the_adapters():
    model, x = apply_lora(tiny(), rank=2), ids(2, 8)
    before, logits_before = snapshot(model), logits_of(model, x)
    train(model)
    after = snapshot(model)
    for key, value in before.items():
        if key.endswith((".lora_A", ".lora_B")):
            continue
        np.testing.assert_array_equal(after[key], value, err_msg=key)
    assert not np.array_equal(after["transformer.h.0.attn.c_attn.lora_B"], 0)
    assert np.abs(logits_of(model, x) - logits_before).max() > 1e-4
    assert all(p.grad is None for p in model.parameters() if not p.requires_grad)


# ----------------------------------------------------------------------------- merge
@pytest.mark.parametrize("dtype, rtol", [(tg.float64, 1e-10), (tg.float32, 1e-5)])
def test_merge_gives_a_plain_gpt_with_the_same_logits(dtype, rtol):
    model, x = tiny(dtype), ids(2, 8)
    original_keys = list(model.state_dict())
    apply_lora(model, rank=2, alpha=8)
    train(model)
    trained = logits_of(model, x)
    assert merge(model) is model
    assert list(model.state_dict()) == original_keys and not lora_layers(model)
    assert type(model.transformer.h[0].attn.c_attn) is nn.Linear
    merged = logits_of(model, x)
    np.testing.assert_allclose(merged, trained, rtol=rtol, atol=rtol * np.abs(trained).max())
    assert merged.dtype == trained.dtype


def test_merge_folds_alpha_over_rank_b_a_into_the_weight():
    model = apply_lora(tiny(tg.float64), rank=2, alpha=3, targets=("h.0.attn.c_attn",))
    layer = model.transformer.h[0].attn.c_attn
    layer.lora_B.data[...] = tg.randn(24, 2, dtype=tg.float64).data
    W, A, B = (t.numpy().copy() for t in (layer.base.weight, layer.lora_A, layer.lora_B))
    merge(model)
    np.testing.assert_allclose(model.transformer.h[0].attn.c_attn.weight.numpy(), W + 1.5 * B @ A, rtol=1e-12)


# ----------------------------------------------------------------------------- adapter files
def test_adapter_saved_and_loaded_into_a_fresh_wrapped_base(tmp_path):
    base, x = tiny(), ids(2, 8)
    base_state = snapshot(base)
    apply_lora(base, rank=2, alpha=4)
    train(base)
    adapter = lora_state_dict(base)
    assert sorted(adapter) == sorted(f"transformer.h.{i}.attn.{n}.lora_{m}" for i in range(2)
                                     for n in ("c_attn", "c_proj") for m in "AB")
    tg.save(adapter, tmp_path / "adapter.safetensors")

    fresh = tiny()
    fresh.load_state_dict(base_state)
    assert not np.array_equal(logits_of(fresh, x), logits_of(base, x))
    apply_lora(fresh, rank=2, alpha=4)
    assert load_lora(fresh, tg.load(tmp_path / "adapter.safetensors")) is fresh
    np.testing.assert_array_equal(logits_of(fresh, x), logits_of(base, x))


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("rank", [0, -2, 2.5, True])
def test_rank_must_be_a_positive_int(rank):
    with pytest.raises(ValueError, match="rank must be a positive int"):
        apply_lora(tiny(), rank=rank)
    with pytest.raises(ValueError, match="rank must be a positive int"):
        LoRALinear(nn.Linear(2, 2), rank=rank)


def test_a_target_that_matches_nothing_names_it_and_the_linear_layers():
    model = tiny()
    with pytest.raises(ValueError, match=r"\['attn.qkv'\] match no Linear.*transformer.h.0.attn.c_attn"):
        apply_lora(model, targets=("attn.c_attn", "attn.qkv"))
    assert not lora_layers(model) and all(p.requires_grad for p in model.parameters())   # left untouched
    apply_lora(model)
    with pytest.raises(ValueError, match="already wrapped"):
        apply_lora(model)
    with pytest.raises(ValueError, match="targets is empty"):
        apply_lora(tiny(), targets=())


def test_lora_linear_wraps_only_a_linear():
    with pytest.raises(TypeError, match="wraps an nn.Linear"):
        LoRALinear(nn.LayerNorm(4))


def test_merge_and_load_need_lora_layers():
    with pytest.raises(ValueError, match="merge: GPT has no LoRA layers"):
        merge(tiny())
    with pytest.raises(ValueError, match="call apply_lora"):
        load_lora(tiny(), {})


def test_merge_refuses_a_tied_weight():
    model = apply_lora(tiny(), targets=("lm_head",))
    with pytest.raises(ValueError, match="'lm_head' is shared with another layer"):
        merge(model)
    assert "lm_head" in lora_layers(model)          # nothing was merged


def test_load_lora_names_missing_and_unexpected_keys():
    model = apply_lora(tiny(), rank=2)
    adapter = dict(lora_state_dict(apply_lora(tiny(), rank=2, targets=("attn.c_attn",))))
    with pytest.raises(KeyError, match="missing adapter keys.*h.0.attn.c_proj.lora_A"):
        load_lora(model, adapter)
    adapter = dict(lora_state_dict(model), extra=tg.zeros(1))
    with pytest.raises(KeyError, match="unexpected keys \\['extra'\\]"):
        load_lora(model, adapter)
    wrong_rank = lora_state_dict(apply_lora(tiny(), rank=3))
    with pytest.raises(ValueError, match="shape"):
        load_lora(model, wrong_rank)
