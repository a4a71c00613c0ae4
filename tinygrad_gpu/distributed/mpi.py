"""The "mpi" backend: collectives on arrays in host memory (NumPy: the cpu and emu devices), by MPI.

mpi4py gives Python MPI's calls; the MPICH wheel gives the library and `mpiexec` (both in the
``[dist]`` extra). The MPI wheels are not CUDA-aware: only host arrays may be handed to them.
"""
from __future__ import annotations

import numpy as np

from .. import device as devices


def world():
    """MPI's world communicator (importing mpi4py.MPI starts MPI in this process)."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RuntimeError(f"this process was started by mpiexec, but mpi4py is not importable ({e}); install "
                           "the [dist] extra: pip install 'tinygrad_gpu[dist]'") from None
    return MPI.COMM_WORLD


def _mpi_op(op, dtype: np.dtype):
    """MPI's operation for `op` on `dtype`. MPI defines no arithmetic on booleans, only logic: their
    sum and max are "any", their min "all" (what PyTorch's backends give too)."""
    from mpi4py import MPI
    if dtype == np.bool_:
        return MPI.LAND if op.value == "min" else MPI.LOR
    return {"sum": MPI.SUM, "avg": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op.value]


class MPIGroup:
    """`comm` is MPI's world, or None for a program started without mpiexec (a world of one, in which
    every collective is already done)."""
    backend = "mpi"

    def __init__(self, comm):
        self.comm = comm
        self.rank, self.size = (comm.Get_rank(), comm.Get_size()) if comm is not None else (0, 1)
        self.local_rank = node_local_rank(comm)

    def check(self, tensor, caller: str) -> None:
        if devices.is_cuda(tensor.device):
            raise RuntimeError(f"{caller}: backend 'mpi' works on arrays in host memory, and this tensor is on "
                               f"{tensor.device} (the MPI wheels cannot read GPU memory); use backend 'nccl' for "
                               "GPU tensors, or move the tensor with .to('cpu')")

    def all_reduce(self, array: np.ndarray, op, blocking: bool):
        """Reduce `array` in place, or (not blocking) start to; return what finishes it (None: nothing
        to wait for). MPICH's blocking Allreduce measured faster than starting and waiting at once."""
        if self.comm is None:
            return None
        from mpi4py import MPI
        buffer = array if array.flags.c_contiguous else np.ascontiguousarray(array)
        try:
            if blocking:
                self.comm.Allreduce(MPI.IN_PLACE, buffer, op=_mpi_op(op, buffer.dtype))
                request = None
            else:
                request = self.comm.Iallreduce(MPI.IN_PLACE, buffer, op=_mpi_op(op, buffer.dtype))
        except MPI.Exception:               # an op MPI does not define for the type (MAX of complex numbers)
            raise TypeError(f"all_reduce: MPI cannot apply {op.name} to {buffer.dtype}; convert the tensor to a "
                            "real floating-point or integer dtype") from None

        def finish():
            if request is not None:
                request.Wait()
            if op.value == "avg":
                np.divide(buffer, self.size, out=buffer)
            if buffer is not array:
                array[...] = buffer
        return finish

    def reduce_scatter(self, output: np.ndarray, input: np.ndarray, op) -> None:
        """MPI's Reduce_scatter_block: every chunk the same size."""
        if self.comm is None:
            output[...] = input.reshape(output.shape)
            return
        result = output if output.flags.c_contiguous else np.empty_like(output)
        self.comm.Reduce_scatter_block(np.ascontiguousarray(input), result, op=_mpi_op(op, input.dtype))
        if op.value == "avg":
            np.divide(result, self.size, out=result)
        if result is not output:
            output[...] = result

    def all_gather(self, output: np.ndarray, input: np.ndarray) -> None:
        """MPI's Allgather; in place (MPI_IN_PLACE) when `input` is this rank's own chunk of `output`."""
        if self.comm is None:
            output[...] = input.reshape(output.shape)
            return
        from mpi4py import MPI
        if not output.flags.c_contiguous:
            raise ValueError(f"all_gather_into_tensor: the output must be contiguous (shape {output.shape})")
        own = output.reshape(-1)[self.rank * input.size:(self.rank + 1) * input.size]
        in_place = input.ctypes.data == own.ctypes.data and input.flags.c_contiguous
        self.comm.Allgather(MPI.IN_PLACE if in_place else np.ascontiguousarray(input), output)

    def broadcast(self, array: np.ndarray, src: int) -> None:
        if self.comm is None:
            return
        buffer = array if array.flags.c_contiguous else np.ascontiguousarray(array)
        self.comm.Bcast(buffer, root=src)
        if buffer is not array:
            array[...] = buffer

    def barrier(self) -> None:
        if self.comm is not None:
            self.comm.Barrier()

    def all_gather_object(self, obj) -> list:
        return [obj] if self.comm is None else self.comm.allgather(obj)

    def close(self) -> None:
        pass        # MPI itself ends when the process does (mpi4py calls MPI_Finalize at exit)


def node_local_rank(comm) -> int:
    """This process's number among the ranks on its machine: MPI's shared-memory split of the world."""
    if comm is None:
        return 0
    from mpi4py import MPI
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank()
    finally:
        node.Free()
