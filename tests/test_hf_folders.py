"""Hugging Face GPT-2 folders in and out (nn/hf.py): GPT.from_pretrained and GPT.save_pretrained.

A tiny random GPT-2 folder is written here with NumPy in GPT-2's layout (no prefix, Conv1D weights
(in, out), causal-mask buffers, as the released files have). Saving what was loaded must give back
the same arrays in transformers' layout; the save replaces a folder only when all of it is written.
With transformers installed, the folder we write is also loaded by GPT2LMHeadModel and its logits
compared with ours.
"""
import json
import os

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

import tinygrad_gpu as tg
from tinygrad_gpu.nn import GPT, GPTConfig, Parameter, hf
from tinygrad_gpu.tokenizers import CharTokenizer, load_tokenizer

L, C, V, P, HEADS = 2, 8, 20, 16, 2
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# The keys GPT2Config reads to build the architecture (transformers' own save_pretrained writes them all)
GPT2_CONFIG_KEYS = {"model_type", "architectures", "vocab_size", "n_positions", "n_ctx", "n_embd", "n_layer",
                    "n_head", "n_inner", "activation_function", "layer_norm_epsilon", "resid_pdrop", "embd_pdrop",
                    "attn_pdrop", "initializer_range", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
                    "reorder_and_upcast_attn", "tie_word_embeddings", "bos_token_id", "eos_token_id"}


def gpt2_arrays(seed=0):
    """A random GPT-2 as the released checkpoints store it: unprefixed names, Conv1D (in, out), mask buffers."""
    rng = np.random.default_rng(seed)

    def r(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    arrays = {"wte.weight": r(V, C), "wpe.weight": r(P, C), "ln_f.weight": 1 + r(C), "ln_f.bias": r(C)}
    for i in range(L):
        h = f"h.{i}."
        arrays.update({
            h + "ln_1.weight": 1 + r(C), h + "ln_1.bias": r(C), h + "ln_2.weight": 1 + r(C), h + "ln_2.bias": r(C),
            h + "attn.c_attn.weight": r(C, 3 * C), h + "attn.c_attn.bias": r(3 * C),
            h + "attn.c_proj.weight": r(C, C), h + "attn.c_proj.bias": r(C),
            h + "mlp.c_fc.weight": r(C, 4 * C), h + "mlp.c_fc.bias": r(4 * C),
            h + "mlp.c_proj.weight": r(4 * C, C), h + "mlp.c_proj.bias": r(C),
            h + "attn.bias": np.tril(np.ones((P, P), np.float32))[None, None],
            h + "attn.masked_bias": np.array(-1e4, np.float32),
        })
    return arrays


def hf_folder(path, arrays=None, **config):
    path.mkdir()
    (path / "config.json").write_text(json.dumps(
        {"model_type": "gpt2", "n_layer": L, "n_head": HEADS, "n_embd": C, "n_positions": P, "n_ctx": P,
         "vocab_size": V, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", **config}))
    save_file(gpt2_arrays() if arrays is None else arrays, str(path / "model.safetensors"))
    return path


def stored(folder):
    with safe_open(str(folder / "model.safetensors"), framework="numpy") as f:
        return {name: f.get_tensor(name) for name in f.keys()}, f.metadata()


def logits_of(model, seed=1):
    idx = np.random.default_rng(seed).integers(0, model.config.vocab_size, (2, model.config.block_size))
    return model(tg.tensor(idx))[0].numpy(), idx


def folder_bytes(folder):
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


# ----------------------------------------------------------------------------- round trip and layout
def test_save_then_load_gives_identical_parameters_and_logits(tmp_path):
    model = GPT.from_pretrained(hf_folder(tmp_path / "gpt2"))
    model.save_pretrained(tmp_path / "saved")
    again = GPT.from_pretrained(tmp_path / "saved")
    assert again.config == model.config and again.lm_head.weight is again.transformer.wte.weight
    ours, theirs = model.state_dict(), again.state_dict()
    assert list(ours) == list(theirs)
    for name in ours:
        np.testing.assert_array_equal(theirs[name].numpy(), ours[name].numpy(), err_msg=name)
    np.testing.assert_array_equal(logits_of(again)[0], logits_of(model)[0])


def test_written_file_has_gpt2_names_shapes_and_the_source_arrays(tmp_path):
    source = gpt2_arrays()
    GPT.from_pretrained(hf_folder(tmp_path / "gpt2", source)).save_pretrained(tmp_path / "saved")
    arrays, metadata = stored(tmp_path / "saved")
    assert metadata == {"format": "pt"}                 # transformers refuses safetensors files without it
    # transformers' own layout: prefixed names, no mask buffers, the tied head not written twice
    weights = {k: v for k, v in source.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    assert sorted(arrays) == sorted("transformer." + k for k in weights)
    assert arrays["transformer.h.1.attn.c_attn.weight"].shape == (C, 3 * C)       # Conv1D: (in, out)
    assert arrays["transformer.h.0.mlp.c_proj.weight"].shape == (4 * C, C)
    for name, array in weights.items():
        written = arrays["transformer." + name]
        assert written.dtype == np.float32 and written.flags.c_contiguous
        np.testing.assert_array_equal(written, array, err_msg=name)


def test_written_config_has_gpt2s_keys(tmp_path):
    model = GPT(GPTConfig(block_size=P, vocab_size=V, n_layer=L, n_head=HEADS, n_embd=C, dropout=0.1))
    model.save_pretrained(tmp_path / "saved")
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert GPT2_CONFIG_KEYS <= set(config)
    assert (config["model_type"], config["architectures"], config["activation_function"]) == \
        ("gpt2", ["GPT2LMHeadModel"], "gelu_new")
    assert (config["vocab_size"], config["n_positions"], config["n_ctx"], config["n_embd"], config["n_layer"],
            config["n_head"], config["layer_norm_epsilon"], config["resid_pdrop"]) == (V, P, P, C, L, HEADS, 1e-5, 0.1)
    assert config["tie_word_embeddings"] is True and config["eos_token_id"] is None    # no <|endoftext|> in 20 ids
    big = GPT(GPTConfig(block_size=4, vocab_size=50257, n_layer=1, n_head=1, n_embd=4))
    big.save_pretrained(tmp_path / "big")
    assert json.loads((tmp_path / "big" / "config.json").read_text())["eos_token_id"] == 50256
    # with a tokenizer, its end-of-text id (a small byte-pair vocabulary's <|endoftext|>, a character model's
    # newline) is the folder's bos and eos, which generation stops at
    model.save_pretrained(tmp_path / "char", tokenizer=CharTokenizer("ab\ncd"))
    config = json.loads((tmp_path / "char" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (2, 2)


def test_tokenizer_files_are_written_beside_the_model(tmp_path):
    model = GPT.from_pretrained(hf_folder(tmp_path / "gpt2"))
    model.save_pretrained(tmp_path / "saved", tokenizer=CharTokenizer("abcdefghijklmnopqrst"))
    assert load_tokenizer(tmp_path / "saved").decode([0, 19]) == "at"
    # a later save without a tokenizer keeps the tokenizer's files, as transformers' save_pretrained does
    model.save_pretrained(tmp_path / "saved")
    assert load_tokenizer(tmp_path / "saved").vocab_size == V


def test_a_model_without_biases_is_written_with_zero_biases(tmp_path):
    model = GPT(GPTConfig(block_size=P, vocab_size=V, n_layer=L, n_head=HEADS, n_embd=C, bias=False))
    with pytest.warns(UserWarning, match="zero biases"):
        model.save_pretrained(tmp_path / "saved")
    arrays, _ = stored(tmp_path / "saved")
    assert arrays["transformer.h.0.attn.c_attn.bias"].shape == (3 * C,)
    assert not arrays["transformer.h.1.mlp.c_fc.bias"].any() and not arrays["transformer.ln_f.bias"].any()
    again = GPT.from_pretrained(tmp_path / "saved")
    assert again.config.bias is True
    np.testing.assert_allclose(logits_of(again)[0], logits_of(model)[0], rtol=1e-6, atol=1e-6)


def test_what_gpt2s_layout_cannot_hold_is_refused(tmp_path):
    model = GPT(GPTConfig(block_size=P, vocab_size=V, n_layer=L, n_head=HEADS, n_embd=C))
    model.transformer.h[0].attn.c_attn.lora_A = Parameter(tg.zeros(2, C))
    with pytest.raises(ValueError, match=r"no place for \['transformer\.h\.0\.attn\.c_attn\.lora_A'\].*lora\.merge"):
        model.save_pretrained(tmp_path / "saved")
    untied = GPT(GPTConfig(block_size=P, vocab_size=V, n_layer=L, n_head=HEADS, n_embd=C))
    untied.lm_head.weight = Parameter(tg.zeros(V, C))
    with pytest.raises(ValueError, match="not tied"):
        untied.save_pretrained(tmp_path / "saved")
    assert not (tmp_path / "saved").exists()


# ----------------------------------------------------------------------------- the folder is replaced safely
def test_a_failed_save_leaves_the_old_folder_intact(tmp_path, monkeypatch):
    GPT.from_pretrained(hf_folder(tmp_path / "gpt2")).save_pretrained(tmp_path / "saved")
    (tmp_path / "saved" / "README.md").write_text("our shop's model")
    before = folder_bytes(tmp_path / "saved")
    other = GPT(GPTConfig(block_size=P, vocab_size=V, n_layer=L, n_head=HEADS, n_embd=C))
    writes = []

    def fails_on_the_second_file(path, payload):
        writes.append(path)
        if len(writes) == 2:
            raise OSError("disk full")
        original(path, payload)

    original = hf.write_atomically
    monkeypatch.setattr(hf, "write_atomically", fails_on_the_second_file)
    with pytest.raises(OSError, match="disk full"):
        other.save_pretrained(tmp_path / "saved")
    assert len(writes) == 2 and not writes[0].startswith(str(tmp_path / "saved") + os.sep)   # wrote beside it
    assert folder_bytes(tmp_path / "saved") == before
    assert sorted(os.listdir(tmp_path)) == ["gpt2", "saved"]                                  # nothing left over

    class BrokenTokenizer:
        end_of_text = None

        def save(self, folder):
            raise RuntimeError("cannot write the vocabulary")

    monkeypatch.setattr(hf, "write_atomically", original)
    with pytest.raises(RuntimeError, match="vocabulary"):
        other.save_pretrained(tmp_path / "saved", tokenizer=BrokenTokenizer())
    assert folder_bytes(tmp_path / "saved") == before and sorted(os.listdir(tmp_path)) == ["gpt2", "saved"]
    other.save_pretrained(tmp_path / "saved")          # and a save that succeeds replaces the weights
    assert folder_bytes(tmp_path / "saved")["model.safetensors"] != before["model.safetensors"]
    assert (tmp_path / "saved" / "README.md").read_text() == "our shop's model"
    assert sorted(os.listdir(tmp_path)) == ["gpt2", "saved"]


def test_a_folder_that_is_not_a_model_folder_is_not_replaced(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    model = GPT(GPTConfig(block_size=P, vocab_size=V, n_layer=1, n_head=HEADS, n_embd=C))
    with pytest.raises(FileExistsError, match="no config.json"):
        model.save_pretrained(tmp_path / "notes")
    assert os.listdir(tmp_path / "notes") == ["todo.txt"]


# ----------------------------------------------------------------------------- reading errors
def test_a_pickle_only_folder_is_refused_with_how_to_convert(tmp_path):
    folder = tmp_path / "gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 4,
                                                    "vocab_size": 5, "n_positions": 4}))
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04 not to be unpickled")
    with pytest.raises(FileNotFoundError, match=r"pytorch_model\.bin but no model\.safetensors.*never unpickled.*"
                                                r"save_pretrained\(folder, safe_serialization=True\)") as e:
        GPT.from_pretrained(folder)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("missing", ["config.json", "model.safetensors"])
def test_a_missing_file_is_named_with_its_folder(tmp_path, missing):
    folder = hf_folder(tmp_path / "gpt2")
    (folder / missing).unlink()
    with pytest.raises(FileNotFoundError, match=f"{folder} has no {missing}"):
        GPT.from_pretrained(folder)
    with pytest.raises(FileNotFoundError, match="no folder"):
        GPT.from_pretrained(tmp_path / "nowhere")


def test_configs_and_heads_gpt_cannot_reproduce_are_refused(tmp_path):
    with pytest.raises(ValueError, match="'gpt_neo' model, not GPT-2"):
        GPT.from_pretrained(hf_folder(tmp_path / "a", model_type="gpt_neo"))
    with pytest.raises(ValueError, match="n_inner=16"):
        GPT.from_pretrained(hf_folder(tmp_path / "b", n_inner=16))
    with pytest.raises(ValueError, match="activation 'relu'"):
        GPT.from_pretrained(hf_folder(tmp_path / "c", activation_function="relu"))
    arrays = gpt2_arrays()
    arrays["lm_head.weight"] = arrays["wte.weight"] + 1
    with pytest.raises(ValueError, match="lm_head.weight that differs"):
        GPT.from_pretrained(hf_folder(tmp_path / "d", arrays))


# ----------------------------------------------------------------------------- transformers reads our folder
def test_transformers_loads_our_folder_and_agrees(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")        # what transformers runs on; the package itself never needs it
    model = GPT.from_pretrained(hf_folder(tmp_path / "gpt2"))
    model.save_pretrained(tmp_path / "saved")
    theirs = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "saved")).eval()
    ours, idx = logits_of(model)
    with torch.no_grad():
        expected = theirs(input_ids=torch.tensor(idx)).logits.numpy()
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4)
