"""Data-parallel training's plumbing: a group of processes that add up their arrays.

Data parallelism runs N copies of one program, started together by ``mpiexec -n N``. Each copy
(a *rank*, numbered 0 .. N-1) holds the whole model and trains on its own slice of every batch;
after each backward the ranks average their gradients, so every copy takes the same step and the
copies stay equal. This package is that averaging and the few other collective operations
training needs, with torch.distributed's names:

    init_process_group(backend=None)   join the group: "mpi" (arrays in host memory, over MPI) or
                                       "nccl" (CuPy arrays on NVIDIA GPUs, over NCCL); None picks
                                       "nccl" when the default device is a GPU, else "mpi"
    get_rank(), get_world_size(), get_node_local_rank(), get_device(), is_initialized(),
    destroy_process_group()
    all_reduce(t, op=ReduceOp.SUM)     each rank's t becomes the SUM (AVG, MAX, MIN) over all ranks
    broadcast(t, src=0)                each rank's t becomes rank src's
    barrier()                          wait until every rank gets here
    all_gather_object(list, obj)       small Python values (a flag, a loss) from every rank
    reduce_scatter_tensor(out, input)  rank r's out becomes the SUM (AVG, ...) of chunk r of every rank's input
    all_gather_into_tensor(out, input) every rank's input, in rank order, in each rank's out

The communication is MPI's (mpi4py, the ``[dist]`` extra) and NCCL's (CuPy's binding, the ``[gpu]``
extra); nothing here opens a socket. Read group.py (the group and the public calls), then mpi.py
and nccl.py (one backend each). nn/parallel.py builds DistributedDataParallel on these calls, and
optim.py ZeroRedundancyOptimizer (each rank keeps the optimizer state of its shard of the parameters).

Started without mpiexec, a program is a world of one process: under "mpi" every call returns at
once and nothing is communicated; under "nccl" a one-GPU communicator still makes the calls.
"""
from .group import (ReduceOp, Work, abort_job, all_gather_into_tensor, all_gather_object, all_reduce, barrier,
                    broadcast, reduce_scatter_tensor,
                    destroy_process_group, end_job, gather_before_group, get_backend, get_device, get_node_local_rank,
                    get_rank, get_world_size, init_process_group, is_initialized, launched_by_mpiexec, launcher_rank)

__all__ = ["ReduceOp", "Work", "init_process_group", "destroy_process_group", "is_initialized", "get_rank",
           "get_world_size", "get_node_local_rank", "get_backend", "get_device", "all_reduce", "broadcast", "barrier",
           "all_gather_object", "reduce_scatter_tensor", "all_gather_into_tensor", "abort_job", "end_job",
           "gather_before_group", "launched_by_mpiexec", "launcher_rank", "optim"]
from . import optim  # noqa: E402  (after the collectives it uses; tg.distributed.optim as torch.distributed.optim)
