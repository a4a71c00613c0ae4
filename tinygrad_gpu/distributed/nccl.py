"""The "nccl" backend: collectives on CuPy arrays in GPU memory, by NCCL (CuPy's cupy.cuda.nccl).

NCCL moves data between GPUs itself (NVLink, PCIe, the network) and queues its work on a CUDA
stream like any kernel, so a reduction started here runs after the kernels queued before it and
before those queued after it: the host never waits for it. What NCCL does not do is find its peers:
rank 0 makes a unique id, and MPI carries it to the other ranks (mpi.py), who pass it to
NcclCommunicator. Each rank drives one GPU: number get_node_local_rank() on its machine.
"""
from __future__ import annotations

import importlib
import os

import numpy as np

from .. import device as devices
from .. import dtypes
from .mpi import MPIGroup


class NCCLGroup(MPIGroup):
    """An MPI group (which still carries host values: the id, all_gather_object, barrier)
    whose arrays travel by NCCL."""
    backend = "nccl"

    def __init__(self, comm, device=None):
        """`comm`: MPI's world, which carries the id, or None for a world of one, which uses the GPU
        `device` names (default cuda:0)."""
        super().__init__(comm)
        self.nccl = _nccl_module()
        self.device = _gpu_of(self.rank, self.local_rank, device if comm is None else None)
        unique_id = self.nccl.get_unique_id() if self.rank == 0 else None
        if comm is not None:
            unique_id = comm.bcast(unique_id, root=0)
        with devices.use(self.device):
            self.communicator = self.nccl.NcclCommunicator(self.size, unique_id, self.rank)
        self.ops = {"sum": self.nccl.NCCL_SUM, "avg": self.nccl.NCCL_AVG, "max": self.nccl.NCCL_MAX,
                    "min": self.nccl.NCCL_MIN}

    def check(self, tensor, caller: str) -> None:
        if tensor.device != self.device:
            raise RuntimeError(f"{caller}: backend 'nccl' on rank {self.rank} works on {self.device}, and this "
                               f"tensor is on {tensor.device}; move it there with .to({self.device!r})")
        if not tensor.data.flags.c_contiguous:
            raise RuntimeError(f"{caller}: NCCL needs a contiguous tensor; pass .contiguous() data "
                               f"(shape {tensor.shape})")

    def all_reduce(self, array, op, blocking: bool):
        """Queue the in-place reduction on the current stream: nothing for the host to wait for, either
        way (`blocking` or not, what follows on the stream runs after it)."""
        operation = self.ops[op.value]
        if array.dtype == np.bool_:         # NCCL has no booleans: as bytes, "any" is MAX and "all" MIN
            array, operation = array.view(np.uint8), self.ops["min" if op.value == "min" else "max"]
        with devices.use(self.device):
            self.communicator.allReduce(array.data.ptr, array.data.ptr, array.size, self._type(array, "all_reduce"),
                                        operation, _current_stream())
        return None

    def reduce_scatter(self, output, input, op) -> None:
        with devices.use(self.device):
            self.communicator.reduceScatter(input.data.ptr, output.data.ptr, output.size,
                                            self._type(output, "reduce_scatter_tensor"), self.ops[op.value],
                                            _current_stream())

    def all_gather(self, output, input) -> None:
        """In place when `input` is this rank's own chunk of `output` (NCCL sees the pointers match)."""
        with devices.use(self.device):
            self.communicator.allGather(input.data.ptr, output.data.ptr, input.size,
                                        self._type(input, "all_gather_into_tensor"), _current_stream())

    def broadcast(self, array, src: int) -> None:
        with devices.use(self.device):
            bytes_alike = array.view(np.uint8) if array.dtype == np.bool_ else array
            self.communicator.bcast(bytes_alike.data.ptr, bytes_alike.size, self._type(bytes_alike, "broadcast"), src,
                                    _current_stream())

    def barrier(self) -> None:
        with devices.use(self.device):
            devices.cupy().cuda.get_current_stream().synchronize()
        super().barrier()

    def close(self) -> None:
        self.communicator.destroy()

    def _type(self, array, caller: str) -> int:
        name = {np.float16: "NCCL_FLOAT16", np.float32: "NCCL_FLOAT32", np.float64: "NCCL_FLOAT64",
                np.int32: "NCCL_INT32", np.int64: "NCCL_INT64", np.uint8: "NCCL_UINT8",
                np.int8: "NCCL_INT8", dtypes.bfloat16.type: "NCCL_BFLOAT16"}.get(array.dtype.type)
        if name is None or not hasattr(self.nccl, name):
            raise TypeError(f"{caller}: NCCL has no type for {array.dtype} (rank {self.rank}); convert the tensor "
                            "(bool, float16/32/64, bfloat16, int8, uint8, int32 and int64 work)")
        return getattr(self.nccl, name)


def _gpu_of(rank: int, local_rank: int, asked) -> str:
    """The GPU a rank drives: the one asked for in a world of one; else number local_rank on its
    machine, or the only one a launcher lets it see (CUDA_VISIBLE_DEVICES, one GPU per rank)."""
    if asked is not None and devices.is_cuda(devices.canonical(asked)):
        return devices.canonical(asked)
    gpus = devices.cuda_device_count()
    if local_rank < gpus:
        return f"cuda:{local_rank}"
    if gpus == 1 and os.environ.get("CUDA_VISIBLE_DEVICES"):
        return "cuda:0"
    raise RuntimeError(f"init_process_group: rank {rank} is process {local_rank} on its machine, which shows it "
                       f"{gpus} GPU(s); start at most {gpus} process(es) per machine under nccl, or give each "
                       "process its own GPU with CUDA_VISIBLE_DEVICES")


def _nccl_module():
    """CuPy's NCCL binding, or the reason there is none, as one line."""
    cupy = devices.cupy()
    if cupy is None:
        raise RuntimeError(f"init_process_group: backend 'nccl' needs an NVIDIA GPU, and there is none here "
                           f"({devices.cuda_problem()}); use backend 'mpi' and --device cpu")
    try:
        nccl = importlib.import_module(cupy.__name__ + ".cuda.nccl")
    except ImportError as e:
        raise RuntimeError(f"init_process_group: backend 'nccl' needs CuPy's NCCL binding, which {cupy.__name__} "
                           f"lacks ({e})") from None
    if not nccl.available:
        raise RuntimeError("init_process_group: CuPy finds no NCCL library; install the NCCL wheel: "
                           "pip install 'tinygrad_gpu[gpu]'")
    return nccl


def _current_stream() -> int:
    return devices.cupy().cuda.get_current_stream().ptr
