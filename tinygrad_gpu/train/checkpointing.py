"""A run's checkpoint: what it holds, writing it, and starting from one (--resume, --init-from).

It holds everything needed to continue exactly where the run was: the weights, AdamW's moments,
the iteration, the vocabulary, the architecture, the settings, and both random streams (the
batches' and the model's, which dropout draws from). tg.save writes it atomically, so a kill
mid-save leaves the previous one.
"""
from __future__ import annotations

import dataclasses
import os

from .. import checkpoint, random
from .config import ConfigError, TrainConfig

CHECKPOINT_NAME = "ckpt.safetensors"


def save(path: str, model, optimizer, iter_num: int, tokenizer, settings: dict, config: TrainConfig,
         data_rng) -> None:
    checkpoint.save({
        "model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter": iter_num,
        "tokenizer": tokenizer.chars, "model_settings": settings, "config": dataclasses.asdict(config),
        "rng": {"data": data_rng.bit_generator.state, "model": random.get_rng_state()},
    }, path)


def load_start(config: TrainConfig) -> dict:
    """The checkpoint a run starts from: OUT_DIR's own (--resume), another run's (--init-from), or
    None for a fresh model."""
    source = os.path.join(config.out_dir, CHECKPOINT_NAME) if config.resume else config.init_from
    if not source:
        return None
    if not os.path.exists(source):
        raise ConfigError(f"no checkpoint at {source}" + (" to resume from" if config.resume else ""))
    return checkpoint.load(source)


def model_settings(saved: dict, config: TrainConfig) -> dict:
    """The architecture: the checkpoint's when there is one, since its weights must fit."""
    if saved is None:
        return config.model_settings()
    if config.init_from:      # fine-tuning may change dropout; the architecture stays the checkpoint's
        return dict(saved["model_settings"], dropout=config.dropout)
    return saved["model_settings"]


def restore(saved: dict, optimizer, data_rng) -> int:
    """Put AdamW's state and both random streams back as the saved run left them; its iteration.
    (The weights are already in: they were loaded before the optimizer was made.)"""
    optimizer.load_state_dict(saved["optimizer"])
    data_rng.bit_generator.state = saved["rng"]["data"]
    random.set_rng_state(saved["rng"]["model"])
    return saved["iter"]
