"""A run's settings: TrainConfig, their checks, the model they describe, and what stays frozen."""
from __future__ import annotations

import dataclasses

from .. import device as devices
from ..nn import Embedding, GPT, GPTConfig, LSTMLanguageModel


class ConfigError(ValueError):
    """A combination of settings that cannot work; reported in one line, without a traceback."""


@dataclasses.dataclass
class TrainConfig:
    data: str = "builtin"           # 'builtin', 'shakespeare', or a path to a UTF-8 text file
    device: str = None              # default: cuda if available, else cpu
    model: str = "gpt"              # 'gpt' or 'lstm'
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64
    batch_size: int = 12
    dropout: float = 0.0
    bias: bool = False
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    max_iters: int = 1000
    lr_decay_iters: int = None      # default: max_iters
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0          # 0 turns clipping off
    eval_interval: int = 250
    eval_iters: int = 20
    seed: int = 1337
    out_dir: str = "out-charlm"
    resume: bool = False
    init_from: str = None           # a checkpoint to start from (fine-tuning)
    freeze_embeddings: bool = False
    freeze_layers: int = 0          # the first N transformer blocks (GPT) are not trained
    drop_unknown: bool = False      # drop characters the starting checkpoint's vocabulary lacks
    num_samples: int = 2
    sample_tokens: int = 300
    progress: bool = True

    MODEL_FIELDS = ("model", "n_layer", "n_head", "n_embd", "block_size", "dropout", "bias")

    def model_settings(self) -> dict:
        return {name: getattr(self, name) for name in self.MODEL_FIELDS}


def validate(config: TrainConfig) -> str:
    """Check the settings; return the canonical device. Raises ConfigError with one clear line."""
    if config.model not in ("gpt", "lstm"):
        raise ConfigError(f"--model must be 'gpt' or 'lstm', got {config.model!r}")
    if config.model == "gpt" and config.n_embd % config.n_head:
        raise ConfigError(f"--n-embd ({config.n_embd}) must be divisible by --n-head ({config.n_head})")
    for name in ("n_layer", "n_embd", "block_size", "batch_size", "max_iters", "eval_interval", "eval_iters"):
        if getattr(config, name) <= 0 and not (name == "max_iters" and getattr(config, name) == 0):
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(config, name)}")
    if not 0 <= config.dropout < 1:
        raise ConfigError(f"--dropout must be in [0, 1), got {config.dropout}")
    if config.resume and config.init_from:
        raise ConfigError("--resume continues OUT_DIR's own run; --init-from starts a new one: pick one")
    try:
        return devices.canonical(config.device)
    except (RuntimeError, ValueError) as e:
        raise ConfigError(str(e)) from None


def build_model(settings: dict, vocab_size: int):
    """The model that `settings` (TrainConfig.model_settings(), or a checkpoint's) describe."""
    if settings["model"] == "lstm":
        return LSTMLanguageModel(vocab_size, settings["n_embd"], settings["n_layer"], settings["dropout"],
                                 settings["block_size"])
    return GPT(GPTConfig(block_size=settings["block_size"], vocab_size=vocab_size, n_layer=settings["n_layer"],
                         n_head=settings["n_head"], n_embd=settings["n_embd"], dropout=settings["dropout"],
                         bias=settings["bias"]))


def freeze(model, config: TrainConfig) -> None:
    """Stop training the embeddings (--freeze-embeddings) and the first blocks (--freeze-layers):
    their parameters stop requiring grad, so configure_optimizers leaves them out."""
    if config.freeze_embeddings:
        for module in model.modules():
            if isinstance(module, Embedding):
                module.weight.requires_grad_(False)
    if config.freeze_layers:
        if not isinstance(model, GPT):
            raise ConfigError("--freeze-layers applies to GPT models only")
        for block in list(model.transformer.h)[:config.freeze_layers]:
            block.requires_grad_(False)
