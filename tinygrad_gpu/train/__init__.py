"""Training character-level language models: what examples/train_charlm.py and finetune_charlm.py run.

Read loop.py first (the loop, on one screen); then config.py (the settings, the model they
describe, freezing), checkpointing.py (save and resume), reporting.py (progress, metrics.jsonl,
the plot) and cli.py (flags and one-line errors).
"""
from .checkpointing import CHECKPOINT_NAME
from .cli import parse_args, run
from .config import ConfigError, TrainConfig, build_model, freeze, validate
from .loop import estimate_loss, optimizer_params, sample, train
from .reporting import METRICS_NAME

__all__ = ["TrainConfig", "ConfigError", "validate", "build_model", "freeze", "train", "estimate_loss", "sample",
           "optimizer_params", "parse_args", "run", "CHECKPOINT_NAME", "METRICS_NAME"]
