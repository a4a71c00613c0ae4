"""The command line of the training programs: TrainConfig's fields as documented flags, one way to
report a mistake, and the summary a run ends with (its losses, and what it computed and cost)."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import sys

from .. import distributed
from ..data import DataError
from .config import GROUPS, ConfigError, TrainConfig
from .divergence import TrainingDiverged
from .loop import train
from .ranks import RanksStopped
from .reporting import cost_line


INTERRUPTED = 130          # a run's exit code after Ctrl-C: 128 + SIGINT, as the shell reports such a program


class Parser(argparse.ArgumentParser):
    """argparse, whose mistakes (an unknown flag, a value of the wrong type or not among the choices)
    read like every other: one line, `error: ...`, exit code 2. A flag must be written whole (no
    abbreviations: --max-iter is a mistake, not --max-iters), and an unknown one gets the closest known
    flag as a suggestion."""

    def __init__(self, **options):
        super().__init__(allow_abbrev=False, **options)

    def parse_args(self, args=None, namespace=None):
        known, unknown = self.parse_known_args(args, namespace)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}{self._suggestion(unknown)}")
        return known

    def _suggestion(self, unknown: list) -> str:
        flags = [flag for flag in self._option_string_actions if flag.startswith("--")]
        for word in unknown:
            close = difflib.get_close_matches(word.split("=")[0], flags, n=1, cutoff=0.8)      # no wild guesses
            if word.startswith("-") and close:
                return f"; did you mean {close[0]}?"
        return ""

    def error(self, message):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


@contextlib.contextmanager
def one_line_errors():
    """Settings, data and checkpoints that cannot work end the program with one line, `error: ...`, and
    exit code 2; a run that diverged, the same way with exit code 1. Anything else is a bug and
    keeps its traceback. Under mpiexec, a mistake that the ranks agreed on (ranks.agreeing_on_errors: the
    settings, the data, the checkpoint) is said once, by rank 0, and every rank exits with its code; one that
    a rank found alone is said by that rank, named, and it ends every rank of the job (the others would
    otherwise wait for it forever)."""
    try:
        yield
    except RanksStopped as e:       # every rank knows: one line, from rank 0, and all end with exit code 2
        if e.rank == 0:
            where = "" if e.every_rank else f" (rank {e.first_rank} of {e.world_size})"
            sys.stderr.write(f"error{where}: {e}\n")
        distributed.end_job(2)
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
            metavar = "{" + ",".join(map(str, meta["choices"])) + "}" if meta["choices"] else field.name.upper()
            groups[meta["group"]].add_argument(flag, type=kind, choices=meta["choices"], metavar=metavar, **options)
    return parser


def run(config: TrainConfig) -> dict:
    """train() for programs: one-line errors, the samples, and a last line that says where the run stands. A
    run stopped by Ctrl-C ends, once its checkpoint is saved, with exit code 130 on every rank (128 + SIGINT,
    the shell's code for it), so that `train && next-step` stops too."""
    with one_line_errors():
        summary = train(config)
    if summary["interrupted"]:
        if not summary["rank"]:
            _say_where_it_stopped(summary, config)
        distributed.end_job(INTERRUPTED)
    if summary["rank"]:             # under mpiexec, rank 0 speaks for the run
        return summary
    for i, text in enumerate(summary["samples"]):
        print(f"--- sample {i + 1} ---\n{text}")
    print(f"final: {_measured(summary)}, {summary['elapsed_s']:.0f} s; checkpoint in {config.out_dir}")
    print(cost_line(summary, config.price_per_hour))
    return summary


def _measured(summary: dict) -> str:
    last = summary["metrics"][-1] if summary["metrics"] else None
    return "no losses measured yet" if last is None else \
        f"train loss {last['train_loss']:.4f}, val loss {last['val_loss']:.4f}"


def _say_where_it_stopped(summary: dict, config: TrainConfig) -> None:
    """An interrupted run's last lines: what it cost so far, and how to continue."""
    print(cost_line(summary, config.price_per_hour))
    at = f" at iteration {summary['metrics'][-1]['iter']}" if summary["metrics"] else ""
    print(f"stopped at iteration {summary['iter']} of {config.max_iters}; last measured{at}: {_measured(summary)}; "
          f"checkpoint in {config.out_dir} (continue with --resume)")
