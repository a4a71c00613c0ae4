"""Training character-level language models: what examples/train_charlm.py and finetune_charlm.py run.

For the loop alone, on one page, read examples/train_minimal.py: it prints the same losses. Then
loop.py (train: that loop with resuming, mpiexec's ranks, micro-batches, mixed precision, divergence
checks, checkpoints and reports around it); then config.py (the settings, each a documented
flag, the model they describe, freezing), checkpointing.py (save, resume, whose folder --out-dir
is), divergence.py (stopping a run whose loss is no longer a number), reporting.py (progress,
metrics.jsonl, the plot, FLOPs, MFU and cost), compute.py (the device's peak FLOP/s), ranks.py
(the processes of a run under mpiexec: each one's share of a batch) and cli.py (flags, one-line
errors, the last lines).
"""
from .checkpointing import CHECKPOINT_NAME, CheckpointError
from .cli import one_line_errors, parse_args, run
from .config import ConfigError, TrainConfig, build_model, freeze, validate
from .divergence import TrainingDiverged
from .loop import estimate_loss, optimizer_params, sample, train
from .reporting import METRICS_NAME

__all__ = ["TrainConfig", "ConfigError", "CheckpointError", "TrainingDiverged", "validate", "build_model", "freeze",
           "train", "estimate_loss", "sample", "optimizer_params", "parse_args", "run", "one_line_errors",
           "CHECKPOINT_NAME", "METRICS_NAME"]
