"""The command line of the training programs: TrainConfig's fields as documented flags, one way to
report a mistake, and the summary a run ends with (its losses, and what it computed and cost)."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys

from .. import distributed
from ..data import DataError
from .config import GROUPS, ConfigError, TrainConfig
from .divergence import TrainingDiverged
from .loop import train
from .reporting import cost_line


class Parser(argparse.ArgumentParser):
    """argparse, whose mistakes (an unknown flag, a value of the wrong type or not among the choices)
    read like every other: one line, `error: ...`, exit code 2."""

    def error(self, message):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


@contextlib.contextmanager
def one_line_errors():
    """Settings, data and checkpoints that cannot work end the program with one line, `error: ...`, and
    exit code 2; a run that diverged, the same way with exit code 1. Anything else is a bug and
    keeps its traceback. Under mpiexec the line names the rank, and every rank of the job ends
    (the others would otherwise wait for this one forever)."""
    try:
        yield
    except (ConfigError, DataError) as e:
        _fail(e, 2)
    except TrainingDiverged as e:
        _fail(e, 1)


def _fail(error: Exception, exit_code: int) -> None:
    if distributed.is_initialized():
        rank, world = distributed.get_rank(), distributed.get_world_size()
    else:                           # an error before the group was formed (no GPU for nccl, say)
        rank, world = distributed.launcher_rank()
    if world == 1:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(exit_code) from None
    # One write of the whole line: the ranks share the terminal, and print's separate newline can interleave.
    sys.stderr.write(f"error (rank {rank} of {world}): {error}\n")
    sys.stderr.flush()
    distributed.abort_job(exit_code)


def parse_args(argv=None, defaults: TrainConfig = None, description: str = None) -> TrainConfig:
    """Flags named after TrainConfig's fields, with dashes (nanoGPT's names): --n-layer, --lr, ...;
    --help lists them by group, each with its sentence and default."""
    defaults = defaults or TrainConfig()
    values = vars(_parser(defaults, description).parse_args(argv))
    given = vars(_parser(defaults, description, only_given=True).parse_args(argv))
    return TrainConfig(**values, given=tuple(sorted(given)))


def _parser(defaults: TrainConfig, description: str, only_given: bool = False) -> Parser:
    """The flags; with only_given, a flag left out is left out of the result too (no default)."""
    parser = Parser(description=description)
    groups = {name: parser.add_argument_group(name) for name in GROUPS}
    for field in dataclasses.fields(TrainConfig):
        meta = field.metadata
        if not meta.get("group"):
            continue
        flag, default = "--" + field.name.replace("_", "-"), getattr(defaults, field.name)
        options = dict(default=argparse.SUPPRESS if only_given else default,
                       help=f"{meta['help']} (default: {meta['shown'] or default})")
        if field.type in ("bool", bool):
            groups[meta["group"]].add_argument(flag, action=argparse.BooleanOptionalAction, **options)
        else:
            kind = {"int": int, "float": float}.get(str(field.type), str)
            metavar = "{" + ",".join(meta["choices"]) + "}" if meta["choices"] else field.name.upper()
            groups[meta["group"]].add_argument(flag, type=kind, choices=meta["choices"], metavar=metavar, **options)
    return parser


def run(config: TrainConfig) -> dict:
    """train() for programs: one-line errors, the samples, and a last line that says where the run stands."""
    with one_line_errors():
        summary = train(config)
    if summary["rank"]:             # under mpiexec, rank 0 speaks for the run
        return summary
    for i, text in enumerate(summary["samples"]):
        print(f"--- sample {i + 1} ---\n{text}")
    last = summary["metrics"][-1] if summary["metrics"] else None
    measured = ("no losses measured yet" if last is None else
                f"train loss {last['train_loss']:.4f}, val loss {last['val_loss']:.4f}")
    if summary["interrupted"]:            # the last line says how to continue
        print(cost_line(summary, config.price_per_hour))
        at = "" if last is None else f" at iteration {last['iter']}"
        print(f"stopped at iteration {summary['iter']} of {config.max_iters}; last measured{at}: {measured}; "
              f"checkpoint in {config.out_dir} (continue with --resume)")
    else:
        print(f"final: {measured}, {summary['elapsed_s']:.0f} s; checkpoint in {config.out_dir}")
        print(cost_line(summary, config.price_per_hour))
    return summary
