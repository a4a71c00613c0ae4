"""The process group this process belongs to, and the public collective calls.

There is at most one group per process (torch's default group). init_process_group makes it;
every call below checks the tensor it is given against the group's backend and hands the array
to the backend (mpi.py or nccl.py), which does the communicating.
"""
from __future__ import annotations

import enum
import os
import sys

from .. import device as devices

# What a launcher sets in each process it starts: MPICH's Hydra (PMI_*) and Open MPI (OMPI_*, PMIX_*).
LAUNCHER_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")
BACKENDS = ("mpi", "nccl")


class ReduceOp(enum.Enum):
    """How all_reduce combines the ranks' values, element by element."""
    SUM = "sum"
    AVG = "avg"         # the sum divided by the world size
    MAX = "max"
    MIN = "min"


class Work:
    """A collective started with async_op=True. wait() returns once its result is in the tensor (on a
    GPU: once it is queued on the current stream, which orders everything after it)."""

    def __init__(self, finish=None):
        self._finish = finish

    def wait(self) -> bool:
        finish, self._finish = self._finish, None
        if finish is not None:
            finish()
        return True

    def is_completed(self) -> bool:
        return self._finish is None


_group = None


def launched_by_mpiexec() -> bool:
    """True in a process that mpiexec (or mpirun, or `python -m mpi4py`) started."""
    return any(name in os.environ for name in LAUNCHER_VARIABLES) or "mpi4py.MPI" in sys.modules


def launcher_rank() -> tuple:
    """(rank, world size) as the launcher told this process, known before any group exists: what an
    error raised before init_process_group can name. (0, 1) without a launcher."""
    for rank, size in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if size in os.environ:
            return int(os.environ.get(rank, 0)), int(os.environ[size])
    return 0, 1


def init_process_group(backend: str = None, device=None) -> None:
    """Join the group of processes that mpiexec started (without mpiexec: a group of one).

    backend: "mpi" for arrays in host memory (cpu, emu), "nccl" for GPU arrays; None picks from
    `device` (default: the default device). Under "nccl", each rank uses the GPU whose number is its
    place among the ranks on its machine (get_node_local_rank; get_device names it; a world of one
    uses `device`), and rank 0's NCCL id reaches the others over MPI.
    """
    global _group
    from . import mpi
    if _group is not None:
        raise RuntimeError("init_process_group: this process already belongs to a process group; call "
                           "destroy_process_group() before starting another")
    if backend is None:
        backend = "nccl" if devices.is_cuda(devices.canonical(device)) else "mpi"
    if backend not in BACKENDS:
        raise ValueError(f"init_process_group: unknown backend {backend!r}; expected 'mpi' (host arrays) or "
                         "'nccl' (NVIDIA GPUs)")
    world = mpi.world() if launched_by_mpiexec() else None
    if backend == "nccl":
        from .nccl import NCCLGroup
        _group = NCCLGroup(world, device)
    else:
        _group = mpi.MPIGroup(world)
    if _group.size > 1:
        _abort_the_job_on_an_uncaught_exception()


def destroy_process_group() -> None:
    global _group
    if _group is not None:
        _group.close()
        _group = None


def is_initialized() -> bool:
    return _group is not None


def _the_group(caller: str):
    if _group is None:
        raise RuntimeError(f"{caller}: the process group is not initialised; call "
                           "tg.distributed.init_process_group() first")
    return _group


def get_rank() -> int:
    return _the_group("get_rank").rank


def get_world_size() -> int:
    return _the_group("get_world_size").size


def get_node_local_rank() -> int:
    """This rank's number among the ranks on its own machine (which GPU it uses under "nccl")."""
    return _the_group("get_node_local_rank").local_rank


def get_backend() -> str:
    return _the_group("get_backend").backend


def get_device() -> str:
    """The device whose tensors this rank's collectives take: its GPU under "nccl", else "cpu"."""
    return getattr(_the_group("get_device"), "device", "cpu")


def all_reduce(tensor, op: ReduceOp = ReduceOp.SUM, async_op: bool = False):
    """Replace `tensor`'s values, on every rank, by their combination over all ranks (in place).
    With async_op=True, returns a Work to wait() on; otherwise None once the result is there."""
    group = _the_group("all_reduce")
    if not isinstance(op, ReduceOp):
        raise TypeError(f"all_reduce: op must be a tg.distributed.ReduceOp (SUM, AVG, MAX, MIN), got {op!r}")
    if op is ReduceOp.AVG and not tensor.is_floating_point():
        raise TypeError(f"all_reduce: ReduceOp.AVG needs a floating-point tensor, got {tensor.dtype}; use SUM "
                        "and divide, or convert with .float()")
    group.check(tensor, "all_reduce")
    work = Work(group.all_reduce(tensor.data, op, blocking=not async_op))
    return work if async_op else work.wait() and None


def reduce_scatter_tensor(output, input, op: ReduceOp = ReduceOp.SUM) -> None:
    """Cut `input` (world size x output's elements, the same shape on every rank) into world-size chunks in rank
    order; rank r's `output` becomes chunk r combined over all ranks (ZeRO's gradients: each rank gets the mean of
    its own shard only, for half the traffic of an all_reduce)."""
    group = _the_group("reduce_scatter_tensor")
    _check_chunks("reduce_scatter_tensor", output, input, group.size, "input")
    if op is ReduceOp.AVG and not input.is_floating_point():
        raise TypeError(f"reduce_scatter_tensor: ReduceOp.AVG needs a floating-point tensor, got {input.dtype}")
    for t in (output, input):
        group.check(t, "reduce_scatter_tensor")
    group.reduce_scatter(output.data, input.data, op)


def all_gather_into_tensor(output_tensor, input_tensor) -> None:
    """Fill `output_tensor` (world size x input's elements) with every rank's `input_tensor`, in rank order, on
    every rank. `input_tensor` may be the rank's own chunk of `output_tensor` (in place: ZeRO's parameters)."""
    group = _the_group("all_gather_into_tensor")
    _check_chunks("all_gather_into_tensor", input_tensor, output_tensor, group.size, "output_tensor")
    for t in (output_tensor, input_tensor):
        group.check(t, "all_gather_into_tensor")
    group.all_gather(output_tensor.data, input_tensor.data)


def _check_chunks(caller: str, chunk, whole, world_size: int, name: str) -> None:
    if whole.numel() != chunk.numel() * world_size or whole.dtype != chunk.dtype:
        raise ValueError(f"{caller}: {name} must hold world size ({world_size}) x {chunk.numel()} elements of "
                         f"{chunk.dtype}, got {whole.numel()} of {whole.dtype} (shape {whole.shape})")


def broadcast(tensor, src: int = 0) -> None:
    """Replace `tensor`'s values on every rank by rank `src`'s (in place)."""
    group = _the_group("broadcast")
    if not 0 <= src < group.size:
        raise ValueError(f"broadcast: src={src} is not a rank of this group of {group.size}")
    group.check(tensor, "broadcast")
    group.broadcast(tensor.data, src)


def barrier() -> None:
    """Return once every rank has called barrier (under "nccl", after the GPU's queued work is done)."""
    _the_group("barrier").barrier()


def all_gather_object(object_list: list, obj) -> None:
    """Fill `object_list` (of world-size length) with each rank's `obj`, in rank order, on every rank.
    For small host values: a flag, a loss, a random generator's state."""
    group = _the_group("all_gather_object")
    if len(object_list) != group.size:
        raise ValueError(f"all_gather_object: object_list has {len(object_list)} places for a group of "
                         f"{group.size}; make it [None] * tg.distributed.get_world_size()")
    object_list[:] = group.all_gather_object(obj)


def abort_job(exit_code: int = 1) -> None:
    """End every rank of the job now, with `exit_code` (MPI_Abort): what a rank that cannot go on calls,
    so the others do not wait for it forever in their next collective, even before a group exists
    (once MPI is running). In a world of one, exits."""
    sys.stderr.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        mpi.COMM_WORLD.Abort(exit_code)
    raise SystemExit(exit_code)


def gather_before_group(value) -> list:
    """Every process's `value`, in rank order, over MPI's world, before any group exists (how a job's ranks
    agree that a setting is wrong before they form one); [value] in a process that mpiexec did not start."""
    if not launched_by_mpiexec():
        return [value]
    from . import mpi
    try:
        world = mpi.world()
    except RuntimeError:            # no mpi4py: init_process_group will say so
        return [value]
    return world.allgather(value) if world.Get_size() > 1 else [value]


def end_job(exit_code: int) -> None:
    """End this rank with `exit_code` where every rank of the job ends alike, having agreed to (on an error
    all of them know): the group is closed and MPI finalized first, so no rank's exit reads as a failure that
    must end the others (abort_job's MPI_Abort, which the launcher reports in lines of its own)."""
    destroy_process_group()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    raise SystemExit(exit_code)


def _abort_the_job_on_an_uncaught_exception() -> None:
    """Under plain `python` (not `python -m mpi4py`) a rank that dies of an exception would leave the
    others blocked in their next collective: print the traceback, say which rank it was, abort all."""
    previous = sys.excepthook
    if getattr(previous, "ends_the_job", False):        # a group made again after destroy_process_group
        return

    def report_and_abort(kind, value, traceback):
        previous(kind, value, traceback)
        group = _group
        if group is not None and group.size > 1:
            print(f"rank {group.rank} of {group.size} failed ({kind.__name__}); ending every rank of the job",
                  file=sys.stderr, flush=True)
            abort_job(1)

    report_and_abort.ends_the_job = True
    sys.excepthook = report_and_abort
