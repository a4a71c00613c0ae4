"""The command line of the training programs: TrainConfig's fields as flags, and one-line errors."""
from __future__ import annotations

import argparse
import dataclasses
import sys

from ..data import DataError
from .config import ConfigError, TrainConfig
from .loop import train


def parse_args(argv=None, defaults: TrainConfig = None, description: str = None) -> TrainConfig:
    """Flags named after TrainConfig's fields, with dashes (nanoGPT's names): --n-layer, --lr, ..."""
    defaults = defaults or TrainConfig()
    parser = argparse.ArgumentParser(description=description)
    for field in dataclasses.fields(TrainConfig):
        flag, default = "--" + field.name.replace("_", "-"), getattr(defaults, field.name)
        if field.type in ("bool", bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        else:
            kind = {"int": int, "float": float}.get(str(field.type), str)
            parser.add_argument(flag, type=kind, default=default, metavar=field.name.upper())
    return TrainConfig(**vars(parser.parse_args(argv)))


def run(config: TrainConfig) -> dict:
    """train() for programs: settings and data problems become one 'error:' line and exit code 2."""
    try:
        summary = train(config)
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    for i, text in enumerate(summary["samples"]):
        print(f"--- sample {i + 1} ---\n{text}")
    if summary["val_loss"] is not None:
        print(f"final: train loss {summary['train_loss']:.4f}, val loss {summary['val_loss']:.4f}, "
              f"{summary['elapsed_s']:.0f} s; checkpoint in {config.out_dir}")
    return summary
