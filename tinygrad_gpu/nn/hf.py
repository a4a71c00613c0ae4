"""Hugging Face GPT-2 folders in and out (config.json + model.safetensors), never pickle.

GPT-2's parameter names are ours (``transformer.h.0.attn.c_attn.weight``; files converted from
the original release leave out the ``transformer.`` prefix). The layouts differ in three ways:
- its four projections are "Conv1D" layers whose weights are stored (in, out); our Linear keeps
  (out, in), so those weights are transposed on the way in and on the way out;
- its attention layers may carry causal-mask buffers (``attn.bias``, ``attn.masked_bias``), which
  are not weights: skipped when reading, not written;
- the output layer is the token table (tied), so ``lm_head.weight`` is stored at most once, and
  transformers' own save_pretrained leaves it out; so do we.
GPT-2 always has biases. A model built with bias=False is written with zero biases (the same
function: a zero bias adds nothing) and a warning, since it loads back as a bias=True model.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
import warnings

import numpy as np

from ..checkpoint import read_safetensors, write_atomically

CONV1D_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_BLOCK_LAYERS = ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj")
_ENDOFTEXT = 50256                   # GPT-2's <|endoftext|> token, its bos and eos


def gpt2_names(n_layer: int) -> list:
    """The parameter names of a GPT-2 with `n_layer` blocks, in our (prefixed) spelling."""
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    for i in range(n_layer):
        names += [f"transformer.h.{i}.{layer}.{kind}" for layer in _BLOCK_LAYERS for kind in ("weight", "bias")]
    return names + ["transformer.ln_f.weight", "transformer.ln_f.bias"]


# ----------------------------------------------------------------------------- reading
def from_pretrained(cls, config_class, folder, **overrides):
    """A `cls` model (GPT) built from a GPT-2 folder; `overrides` change config fields (dropout, ...)."""
    config, state = read_folder(folder)
    model = cls(config_class(**dict(config, **overrides)))
    model.load_state_dict(state, strict=True)
    return model


def read_folder(folder) -> tuple:
    """(the GPTConfig fields, the state dict in our names and layout) of a GPT-2 folder, without building a model
    (the training programs build theirs from the fields, once)."""
    folder = os.fspath(folder)
    with open(_existing(folder, "config.json")) as f:
        hf = json.load(f)
    _check_config(hf, folder)
    config = dict(block_size=hf.get("n_positions", hf.get("n_ctx", 1024)), vocab_size=hf["vocab_size"],
                  n_layer=hf["n_layer"], n_head=hf["n_head"], n_embd=hf["n_embd"], bias=True)
    state = {}
    for name, array in read_safetensors(_existing(folder, "model.safetensors")).items():
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        key = name if name.startswith(("transformer.", "lm_head.")) else "transformer." + name
        state[key] = array.T if key.endswith(CONV1D_WEIGHTS) else array
    wte = state.get("transformer.wte.weight")
    head = state.setdefault("lm_head.weight", wte)
    if wte is not None and head is not wte and not np.array_equal(head, wte):
        raise ValueError(f"from_pretrained: {folder} has an lm_head.weight that differs from wte.weight; "
                         "GPT's output layer is tied to the token table, so an untied head cannot be loaded")
    return config, state


def is_model_folder(path) -> bool:
    """Whether `path` is a Hugging Face model folder (it holds config.json)."""
    return os.path.isfile(os.path.join(os.fspath(path), "config.json"))


def _existing(folder: str, name: str) -> str:
    path = os.path.join(folder, name)
    if os.path.isfile(path):
        return path
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"from_pretrained: no folder {folder}")
    if name == "model.safetensors" and os.path.exists(os.path.join(folder, "pytorch_model.bin")):
        raise FileNotFoundError(
            f"from_pretrained: {folder} has pytorch_model.bin but no model.safetensors; pickle files can run "
            "code when loaded, so they are never unpickled here. Convert once with transformers: "
            "GPT2LMHeadModel.from_pretrained(folder).save_pretrained(folder, safe_serialization=True)")
    raise FileNotFoundError(f"from_pretrained: {folder} has no {name} (a GPT-2 folder holds config.json "
                            "and model.safetensors)")


def _check_config(hf: dict, folder: str) -> None:
    """Refuse configs our GPT cannot reproduce, rather than load weights into the wrong function."""
    n_inner = hf.get("n_inner")
    activation = hf.get("activation_function", "gelu_new")
    if hf.get("model_type", "gpt2") != "gpt2":
        raise ValueError(f"from_pretrained: {folder} holds a {hf['model_type']!r} model, not GPT-2")
    if n_inner not in (None, 4 * hf["n_embd"]):
        raise ValueError(f"from_pretrained: {folder} has n_inner={n_inner}; GPT's MLP is 4 * n_embd wide")
    if activation not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"from_pretrained: {folder} uses activation {activation!r}; GPT uses GELU's tanh "
                         "approximation (gelu_new)")


# ----------------------------------------------------------------------------- writing
def save_pretrained(model, folder, tokenizer=None) -> None:
    """Write `model` (a GPT) as a GPT-2 folder that transformers' GPT2LMHeadModel loads.

    The folder is replaced as a whole: everything is written into a new folder beside it, which is
    then renamed into place, so a failed save leaves an existing folder as it was. Files of the old
    folder that this save does not write (a tokenizer's files, a README) are kept, as transformers'
    save_pretrained keeps them.
    """
    config = model.config
    arrays = _gpt2_arrays(model)
    # GPT-2's <|endoftext|> begins and ends its documents: the tokenizer's id for it, else GPT-2's own id in a
    # vocabulary as large as GPT-2's
    end_of_text = tokenizer.end_of_text if tokenizer is not None else \
        _ENDOFTEXT if config.vocab_size > _ENDOFTEXT else None
    document = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": config.vocab_size,
        "n_positions": config.block_size, "n_ctx": config.block_size, "n_embd": config.n_embd,
        "n_layer": config.n_layer, "n_head": config.n_head, "n_inner": None, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5, "resid_pdrop": config.dropout, "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout, "initializer_range": 0.02, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False, "tie_word_embeddings": True,
        "use_cache": True, "torch_dtype": model.transformer.wte.weight.dtype.name,
        "bos_token_id": end_of_text, "eos_token_id": end_of_text,
    }

    def write(into):
        from safetensors.numpy import save as to_bytes
        # transformers refuses safetensors files without a "format" entry in their metadata
        write_atomically(os.path.join(into, "model.safetensors"), to_bytes(arrays, metadata={"format": "pt"}))
        write_atomically(os.path.join(into, "config.json"), (json.dumps(document, indent=2) + "\n").encode())
        if tokenizer is not None:
            tokenizer.save(into)

    _replace_folder(os.path.abspath(os.fspath(folder)), write)


def _gpt2_arrays(model) -> dict:
    """The model's parameters under GPT-2's names and layout, as contiguous NumPy arrays of the model's dtype
    (a bfloat16 model is written as BF16, as transformers writes one)."""
    if model.lm_head.weight is not model.transformer.wte.weight:
        raise ValueError("save_pretrained: lm_head.weight is not tied to transformer.wte.weight; GPT-2's layout "
                         "has one table for both")
    ours = {name: t.numpy() for name, t in model.state_dict().items() if name != "lm_head.weight"}
    names = gpt2_names(model.config.n_layer)
    unknown = sorted(set(ours) - set(names))
    if unknown:
        raise ValueError(f"save_pretrained: GPT-2's layout has no place for {unknown[:3]} ({len(unknown)} in all); "
                         "merge adapters into the weights first (LoRA: tg.nn.lora.merge(model))")
    if not model.config.bias:
        warnings.warn("save_pretrained: the model has no biases but GPT-2 always has them; writing zero biases "
                      "(same outputs), so the folder loads back as a bias=True model",
                      stacklevel=4)           # points at the line that called GPT.save_pretrained
    arrays = {}
    for name in names:
        if name in ours:
            array = ours[name].T if name.endswith(CONV1D_WEIGHTS) else ours[name]
        else:            # a bias of a bias=False model: as long as its weight's first (output) axis
            array = np.zeros(ours[name[:-len("bias")] + "weight"].shape[0])
        arrays[name] = np.ascontiguousarray(array, dtype=model.transformer.wte.weight.dtype)
    return arrays


def _replace_folder(folder: str, write) -> None:
    """Run write(new_folder) on a fresh folder beside `folder`, then swap it in with renames."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise NotADirectoryError(f"save_pretrained: {folder} is a file, not a folder")
    if os.path.isdir(folder) and os.listdir(folder) and not os.path.exists(os.path.join(folder, "config.json")):
        raise FileExistsError(f"save_pretrained: {folder} holds files but no config.json, so it is not a model "
                              "folder and is not replaced; save into a new or empty folder")
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    tag = f".{os.getpid()}.{uuid.uuid4().hex[:12]}"
    new, old = folder + tag + ".tmp", folder + tag + ".old"
    os.mkdir(new)
    try:
        write(new)
        if os.path.isdir(folder):
            _carry_over(folder, new)
            os.rename(folder, old)
        try:
            os.rename(new, folder)
        except BaseException:
            if os.path.isdir(old):
                os.rename(old, folder)
            raise
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _carry_over(old: str, new: str) -> None:
    """Hard-link (or copy, across file systems) into `new` what `old` has and `new` lacks."""
    def link_or_copy(source, target):
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)

    for name in os.listdir(old):
        source, target = os.path.join(old, name), os.path.join(new, name)
        if os.path.lexists(target):
            continue
        if os.path.isdir(source) and not os.path.islink(source):
            shutil.copytree(source, target, symlinks=True, copy_function=link_or_copy)
        else:
            link_or_copy(source, target)
