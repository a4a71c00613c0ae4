"""LoRA: fine-tune a large model by training a small low-rank update next to each chosen Linear layer.

A frozen weight W (out, in) gets an update of rank r, written as a product of two thin matrices:

    y = x W^T + b + (alpha / r) * (x A^T) B^T        A: (r, in), B: (out, r)

A starts random (the Linear default, kaiming_uniform_ with a=sqrt(5)) and B starts at zero, so the
wrapped model computes exactly what the original did until the first step; only A and B train
(r * (in + out) numbers instead of in * out). Afterwards the update can be folded in,
W <- W + (alpha / r) B A, which leaves a plain model of the original layout and speed.

    apply_lora(model, rank=8, alpha=16)          # wraps attn.c_attn and attn.c_proj, freezes the rest
    ...train...
    tg.save(lora_state_dict(model), "adapter.safetensors")     # just A and B: small
    load_lora(apply_lora(fresh_base), tg.load("adapter.safetensors"))
    merge(model)                                  # a plain GPT again, original parameter names
"""
from __future__ import annotations

import collections
import math

from .. import creation
from ..tensor import no_grad
from . import functional as F
from . import init
from .layers import Dropout, Linear
from .module import Module, Parameter

DEFAULT_TARGETS = ("attn.c_attn", "attn.c_proj")


class LoRALinear(Module):
    """A frozen Linear (``base``) plus a trainable low-rank update ``lora_B @ lora_A`` scaled by alpha / rank.

    State names: ``base.weight``, ``base.bias``, ``lora_A`` (rank, in_features), ``lora_B`` (out_features, rank).
    dropout: applied to the input of the update only (as in the LoRA paper's code), in training mode.
    """

    def __init__(self, base: Linear, rank: int = 8, alpha: float = 16, dropout: float = 0.0):
        super().__init__()
        if not isinstance(base, Linear):
            raise TypeError(f"LoRALinear: wraps an nn.Linear, got {type(base).__name__}")
        _check_rank_alpha("LoRALinear", rank, alpha)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.rank, self.alpha, self.scaling = rank, alpha, alpha / rank
        base.requires_grad_(False)
        self.base = base
        like = dict(device=base.weight.device, dtype=base.weight.dtype)
        self.lora_A = Parameter(creation.empty(rank, self.in_features, **like))
        init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.lora_B = Parameter(creation.zeros(self.out_features, rank, **like))
        self.lora_dropout = Dropout(dropout)

    def forward(self, x):
        update = F.linear(F.linear(self.lora_dropout(x), self.lora_A), self.lora_B)
        return self.base(x) + update * self.scaling

    def delta_weight(self):
        """The update as a full matrix, (alpha / rank) * B @ A, of the base weight's shape (no graph)."""
        with no_grad():
            return (self.lora_B @ self.lora_A) * self.scaling

    def extra_repr(self):
        return f"rank={self.rank}, alpha={self.alpha}"


def _check_rank_alpha(where: str, rank, alpha) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
        raise ValueError(f"{where}: rank must be a positive int, got {rank!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise ValueError(f"{where}: alpha must be a number, got {alpha!r}")


def _parent_and_leaf(model: Module, name: str):
    """The module holding child `name` (dotted) and the child's own name in it."""
    *path, leaf = name.split(".")
    parent = model
    for part in path:
        parent = getattr(parent, part)
    return parent, leaf


def _matches(name: str, target: str) -> bool:
    # whole dotted components only: "attn.c_proj" matches "h.0.attn.c_proj", not "mlp.c_proj"
    return name == target or name.endswith("." + target)


def lora_layers(model: Module) -> "collections.OrderedDict[str, LoRALinear]":
    """The model's LoRALinear layers by name, in registration order."""
    return collections.OrderedDict((n, m) for n, m in model.named_modules() if isinstance(m, LoRALinear))


def apply_lora(model: Module, rank: int = 8, alpha: float = 16, targets=DEFAULT_TARGETS,
               dropout: float = 0.0) -> Module:
    """Wrap, in place, every Linear whose name ends with one of `targets` in a LoRALinear and freeze
    every other parameter of the model; return the model. Only the adapters' A and B then require
    grad, so ``model.configure_optimizers`` (or AdamW on the parameters that require grad) trains them alone.

    targets: name suffixes on dot boundaries; the default wraps attention's c_attn and c_proj.
    Each target must match at least one Linear (a typo would otherwise silently train nothing).
    """
    _check_rank_alpha("apply_lora", rank, alpha)
    targets = (targets,) if isinstance(targets, str) else tuple(targets)
    if not targets:
        raise ValueError("apply_lora: targets is empty; name at least one Linear layer (by name suffix)")
    linears = [n for n, m in model.named_modules() if isinstance(m, Linear) and n]
    chosen = [n for n in linears if any(_matches(n, t) for t in targets)]
    unmatched = [t for t in targets if not any(_matches(n, t) for n in linears)]
    if unmatched:
        wrapped = [n for n in lora_layers(model) if any(_matches(n, t) for t in unmatched)]
        hint = f"; already wrapped: {wrapped[:4]}" if wrapped else ""
        raise ValueError(f"apply_lora: targets {unmatched} match no Linear layer of {type(model).__name__} "
                         f"(targets are name suffixes; Linear layers include {linears[:6]}{hint})")
    model.requires_grad_(False)
    for name in chosen:
        parent, leaf = _parent_and_leaf(model, name)
        setattr(parent, leaf, LoRALinear(getattr(parent, leaf), rank, alpha, dropout))
    return model


def merge(model: Module) -> Module:
    """Fold each adapter into its base weight (W += alpha / rank * B @ A) and put the plain Linear back,
    in place; return the model, whose state_dict has the original names again. Parameters keep their
    requires_grad (frozen after apply_lora); ``model.requires_grad_()`` makes them all trainable."""
    layers = lora_layers(model)
    if not layers:
        raise ValueError(f"merge: {type(model).__name__} has no LoRA layers (apply_lora wraps them)")
    owners = collections.Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    for name, layer in layers.items():
        # A weight shared with another layer (GPT's lm_head and wte) would change that layer too.
        if owners[id(layer.base.weight)] > 1:
            raise ValueError(f"merge: the weight of '{name}' is shared with another layer (weight tying); "
                             "folding the update into it would change that layer as well")
    for name, layer in layers.items():
        weight = layer.base.weight
        weight.data[...] = (weight.detach() + layer.delta_weight()).data
        parent, leaf = _parent_and_leaf(model, name)
        setattr(parent, leaf, layer.base)
    return model


def lora_state_dict(model: Module) -> "collections.OrderedDict":
    """Only the adapters' tensors (``...c_attn.lora_A``, ``...c_attn.lora_B``), by their full names: a small
    file for ``tg.save``; the base weights stay in the original checkpoint."""
    return collections.OrderedDict((k, v) for k, v in model.state_dict().items()
                                   if k.endswith((".lora_A", ".lora_B")))


def load_lora(model: Module, state) -> Module:
    """Copy saved adapters (from ``lora_state_dict``, e.g. via ``tg.load``) into a model wrapped by
    ``apply_lora`` with the same targets and rank; return the model. Every adapter tensor must be
    there and nothing else (KeyError naming the difference); shapes must agree (ValueError)."""
    own = lora_state_dict(model)
    if not own:
        raise ValueError(f"load_lora: {type(model).__name__} has no LoRA layers; call apply_lora(model, ...) "
                         "with the rank and targets the adapter was trained with first")
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        raise KeyError(f"load_lora: missing adapter keys {missing[:6]}, unexpected keys {unexpected[:6]} "
                       "(was the model wrapped with the same targets?)")
    model.load_state_dict(state, strict=False)
    return model
