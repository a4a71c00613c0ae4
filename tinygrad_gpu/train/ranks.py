"""The processes of one training run: which one this is, its device, and its share of every batch.

    mpiexec -n 2 python -m mpi4py examples/train_charlm.py

starts two copies of the program (rank 0 and rank 1). Every rank builds the same model, draws
the same random windows for every step (the data generator is seeded alike on all ranks), and
trains on its own slice of them: with --gradient-accumulation-steps G (micro-batches of
--batch-size B per step, across all ranks; default one per rank), a step's global batch is G x B
windows, and rank r runs micro-batches r*G/N .. (r+1)*G/N - 1. DistributedDataParallel averages
the gradients, so N ranks take exactly the step one process with G x B windows would take (up to
the rounding of the sums). Evaluation is shared the same way. Rank 0 alone prints, writes
metrics.jsonl and saves checkpoints; the checkpoint holds every rank's random stream, so
--resume under the same number of ranks continues exactly.

Without mpiexec (and without --backend) a run is a world of one: nothing here communicates.
"""
from __future__ import annotations

import contextlib
import os
import socket

from .. import device as devices
from .. import distributed
from ..data import DataError
from .config import ConfigError


class RanksStopped(ConfigError):
    """A mistake in the settings, the data or a checkpoint that every rank of the job knows about (agreeing_on_errors):
    its message, the first rank that found it, whether every rank found the same, and this rank's number."""

    def __init__(self, message: str, first_rank: int, every_rank: bool, rank: int, world_size: int):
        super().__init__(message)
        self.first_rank, self.every_rank, self.rank, self.world_size = first_rank, every_rank, rank, world_size


@contextlib.contextmanager
def agreeing_on_errors(gather):
    """Run the block on every rank, then agree: if it raised a one-line error (ConfigError, DataError) on some
    rank, every rank raises RanksStopped with the first rank's, so that one line reports it and the ranks end
    together (cli.one_line_errors). `gather`: every rank's value in rank order (Ranks.gather, or
    distributed.gather_before_group before the group exists). The block must not communicate: a rank that
    failed early would miss its collectives. In a world of one the error passes unchanged."""
    failure = None
    try:
        yield
    except (ConfigError, DataError) as error:
        failure = error
    found = gather(None if failure is None else str(failure))
    if len(found) == 1:
        if failure is not None:
            raise failure
        return
    failed = [rank for rank, message in enumerate(found) if message is not None]
    if failed:
        rank = distributed.get_rank() if distributed.is_initialized() else distributed.launcher_rank()[0]
        every_rank = len(failed) == len(found) and len(set(found)) == 1
        raise RanksStopped(found[failed[0]], failed[0], every_rank, rank, len(found)) from failure


def backend_for(config, device: str):
    """How this run's processes communicate: None for a world of one (no mpiexec, no --backend), else mpi or
    nccl (_backend). Decided before the group exists, alike on every rank."""
    if distributed.launched_by_mpiexec() or config.backend is not None:
        return _backend(config.backend, device)
    return None


class Ranks:
    def __init__(self, device: str, backend: str = None):
        """Join the run's process group under `backend` (backend_for): the rank's device (under nccl, GPU number
        node-local-rank)."""
        self.backend = backend
        if backend is not None:
            try:
                distributed.init_process_group(self.backend, device)
            except RuntimeError as e:       # no GPU for nccl, no mpi4py: one line, as every mistake
                raise ConfigError(str(e)) from None
            if self.backend == "nccl":      # each rank its own GPU (--device cuda:N counts without mpiexec)
                device = distributed.get_device()
        self.rank = distributed.get_rank() if self.backend else 0
        self.world_size = distributed.get_world_size() if self.backend else 1
        self.device, self.is_main = device, self.rank == 0
        self.global_micro_batches = self.micro_batches = None       # share_micro_batches, once the settings are known

    def share_micro_batches(self, config) -> None:
        """A step's micro-batches (--gradient-accumulation-steps; a resumed run's own), an equal share each."""
        self.global_micro_batches = config.gradient_accumulation_steps or self.world_size
        self.micro_batches = self.global_micro_batches // self.world_size
        if self.global_micro_batches % self.world_size:
            raise ConfigError(f"--gradient-accumulation-steps {self.global_micro_batches} is not a multiple of the "
                              f"{self.world_size} processes: each runs an equal share of a step's micro-batches; "
                              f"pass a multiple of {self.world_size}, or leave it out (one per process)")

    @property
    def communicates(self) -> bool:
        """Is there a group whose collectives do something? (A world of one under mpi has none to do.)"""
        return self.backend is not None and (self.world_size > 1 or self.backend == "nccl")

    def describe(self) -> str:
        """One line: how many processes, where each one runs (so a rank named by pid can be found)."""
        where = self.gather(f"rank {self.rank} pid {os.getpid()} on {socket.gethostname()} ({self.device})")
        return f"{self.world_size} processes over {self.backend}: " + ", ".join(where)

    def batches(self, dataset, split: str, batch_size: int, rng) -> list:
        """This rank's micro-batches, (x, y) each, of one global batch drawn from `rng` (the same
        draw on every rank)."""
        return self.step_batches(dataset, split, batch_size, rng)[0]

    def step_batches(self, dataset, split: str, batch_size: int, rng) -> tuple:
        """(batches(), each micro-batch's share of the step's loss, or None for equal shares). Examples whose
        loss counts some tokens only (records.CompletionDataset) hold different numbers of counted targets:
        the step's loss is the mean over all the global batch's counted targets, so a micro-batch weighs its
        count over their total, times the number of ranks, whose average DistributedDataParallel takes.
        Every rank knows every count: the draw is alike on all."""
        starts = dataset.draw_starts(split, self.global_micro_batches * batch_size, rng)
        parts = [starts[i * batch_size:(i + 1) * batch_size] for i in range(self.global_micro_batches)]
        mine = parts[self.rank * self.micro_batches:(self.rank + 1) * self.micro_batches]
        shares = None
        if hasattr(dataset, "targets_in"):
            counts = [dataset.targets_in(split, part) for part in parts]
            shares = [self.world_size * dataset.targets_in(split, part) / sum(counts) for part in mine]
        return [dataset.windows(split, part) for part in mine], shares

    def gather(self, value) -> list:
        """Every rank's `value`, in rank order, on every rank."""
        if self.world_size == 1:
            return [value]
        values = [None] * self.world_size
        distributed.all_gather_object(values, value)
        return values

    def wait_for_all(self) -> None:
        """Return once every rank has reached this line (a barrier)."""
        if self.world_size > 1:
            distributed.barrier()

    def any(self, flag: bool) -> bool:
        """True on every rank when it is True on some rank (Ctrl-C reaches ranks at different moments;
        all must stop at the same step, or one would wait for the others forever)."""
        return any(self.gather(bool(flag)))

    def total(self, value: float) -> float:
        """The sum of `value` over the ranks, added in rank order: the same number on every rank."""
        return sum(self.gather(value))

    def close(self) -> None:
        if self.backend is not None:
            distributed.destroy_process_group()


def _backend(asked: str, device: str) -> str:
    """The backend for `device`: nccl moves GPU arrays, mpi host arrays."""
    backend = asked or ("nccl" if devices.is_cuda(device) else "mpi")
    if backend == "nccl" and not devices.cuda_available():
        raise ConfigError(f"--backend nccl needs an NVIDIA GPU, and there is none here ({devices.cuda_problem()}); "
                          "train on the cpu with --backend mpi")
    if backend == "nccl" and not devices.is_cuda(device):
        raise ConfigError(f"--backend nccl averages gradients in GPU memory, and this run's device is {device}; "
                          "use --device cuda, or --backend mpi")
    if backend == "mpi" and devices.is_cuda(device):
        raise ConfigError(f"--backend mpi averages gradients in host memory (the MPI wheels cannot read GPU "
                          f"memory), and this run's device is {device}; use --backend nccl")
    return backend
