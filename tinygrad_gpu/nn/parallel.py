"""DistributedDataParallel: one copy of the model per process, its gradients averaged after backward.

Each of N processes (ranks, tinygrad_gpu.distributed) runs the same program on its own slice
of the batch. If every rank then steps with the *mean* of the N gradients, every rank takes the
step one process would take on the whole batch, and the copies never drift apart. This wrapper
makes ``loss.backward()`` end with that mean in every ``.grad``:

1. At construction, rank 0's parameters and buffers are broadcast, so all copies start equal.
2. The parameters that train are packed into buckets of about ``bucket_cap_mb`` MiB, taken in the
   reverse of their registration order, which is roughly the order backward finishes them (the
   last layer's first). One collective per bucket instead of one per parameter: each call has a
   fixed cost, a round trip between the processes, that a hundred small tensors would pay a
   hundred times.
3. Each parameter has a post-accumulate hook (autograd.py). When the last gradient of a bucket is
   complete, its gradients are copied into the bucket's flat array and its all_reduce (AVG) starts
   while backward goes on with the earlier layers, so the two can overlap: on GPUs when NCCL runs
   beside backward's kernels, over MPI as far as the library moves a started reduction along on its
   own (MPICH does so only inside later MPI calls; benchmarks/data_parallel.py measures it). Buckets
   start in index order on every rank, as collectives must be called in the same order by all.
4. When backward ends (autograd.queue_callback: reduce_gradients), the remaining buckets start, each
   reduction is waited for, and the averages are copied back into the gradients. A parameter that
   got no gradient on a rank counts as zeros there, and ends with the mean (zeros when no rank
   used it, where a single process would leave .grad None). Every rank must run backward through
   the same buckets: a rank whose backward reaches no trained parameter would leave the others
   waiting.

``no_sync()`` skips all this for the backwards inside it, so gradient accumulation over several
micro-batches reduces once, at the last micro-batch's backward. ``overlap=False`` starts every
reduction only at the end of backward: the plain version, which benchmarks/data_parallel.py
compares with the overlapped one.
"""
from __future__ import annotations

import contextlib
import time
import weakref

from .. import autograd, distributed
from .. import device as devices
from ..tensor import Tensor, no_grad
from .module import Module


class DistributedDataParallel(Module):
    def __init__(self, module: Module, bucket_cap_mb: float = 25, overlap: bool = True):
        super().__init__()
        if not distributed.is_initialized():
            raise RuntimeError("DistributedDataParallel: the process group is not initialised; call "
                               "tg.distributed.init_process_group() first")
        if bucket_cap_mb <= 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be positive, got {bucket_cap_mb}")
        self.module = module
        self.overlap, self.require_sync = overlap, True
        self.reduction_seconds = 0.0        # time this rank spent packing, reducing, waiting and unpacking
        with no_grad():
            for tensor in [*module.parameters(), *(b for _, b in module.named_buffers() if b is not None)]:
                distributed.broadcast(tensor, src=0)
        trained = [p for p in module.parameters() if p.requires_grad]
        self.buckets = _buckets(list(reversed(trained)), int(bucket_cap_mb * 2**20))
        self._bucket_of = {id(p): bucket for bucket in self.buckets for p in bucket.params}
        # A world of one under MPI communicates nothing, so there is nothing to hook.
        communicates = distributed.get_world_size() > 1 or distributed.get_backend() == "nccl"
        self._handles = [p.register_post_accumulate_grad_hook(_weakly(self._gradient_ready)) for p in trained] \
            if communicates else []
        self._in_backward, self._started = False, []

    def forward(self, *args, **kwargs):
        self._forget_a_failed_backward()
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backwards inside keep their gradients local (they add up in .grad as usual); the first
        backward after it averages everything accumulated."""
        previous, self.require_sync = self.require_sync, False
        try:
            yield
        finally:
            self.require_sync = previous

    # ------------------------------------------------------------------ during backward
    def _gradient_ready(self, param) -> None:
        if not self.require_sync:
            return
        if not self._in_backward:
            self._in_backward = True
            for bucket in self.buckets:
                bucket.waiting = len(bucket.params)
            autograd.queue_callback(self.reduce_gradients)
        bucket = self._bucket_of[id(param)]
        bucket.waiting -= 1
        if self.overlap:
            self._start_ready_buckets()

    def _start_ready_buckets(self, all_of_them: bool = False) -> None:
        """Start the next buckets in index order while they are complete (at the end: all of them)."""
        while len(self._started) < len(self.buckets):
            bucket = self.buckets[len(self._started)]
            if bucket.waiting and not all_of_them:
                return
            began = time.perf_counter()
            bucket.pack()
            # The last bucket, and every bucket without overlap, is waited for at once: the blocking call
            # then (MPICH's Allreduce measured faster than starting one and waiting for it).
            # Decided by the bucket's place alone, never by when this rank saw it complete: MPI pairs a
            # rank's blocking call only with blocking calls of the others.
            at_once = not self.overlap or len(self._started) == len(self.buckets) - 1
            work = distributed.all_reduce(bucket.flat, distributed.ReduceOp.AVG, async_op=not at_once)
            self._started.append(work or distributed.Work())
            self.reduction_seconds += time.perf_counter() - began

    def reduce_gradients(self) -> None:
        """Average every gradient over the ranks now: what the end of each backward does (a bucket not
        started yet starts here). Call it yourself only after backwards run under no_sync()."""
        try:
            self._start_ready_buckets(all_of_them=True)
            began = time.perf_counter()
            for bucket, work in zip(self.buckets, self._started):
                work.wait()
                bucket.unpack()
            self.reduction_seconds += time.perf_counter() - began
        finally:
            self._in_backward, self._started = False, []

    def _forget_a_failed_backward(self) -> None:
        """A backward that raised never reached reduce_gradients (the engine drops what was queued):
        finish the reductions it started, which the other ranks started too, and begin afresh."""
        if self._in_backward:
            for work in self._started:
                work.wait()
            self._in_backward, self._started = False, []


class _Bucket:
    """Parameters of one device and dtype whose gradients travel together in one flat array."""

    def __init__(self, params: list):
        first = params[0]
        self.params, self.device = params, first.device
        self.slices, start = [], 0
        for p in params:
            self.slices.append(slice(start, start + p.numel()))
            start += p.numel()
        with devices.use(self.device):
            self.flat = Tensor._wrap(devices.array_module(self.device).zeros(start, dtype=first.dtype), self.device)
        self.waiting = len(params)

    def pack(self) -> None:
        flat = self.flat.data
        for p, part in zip(self.params, self.slices):
            if p.grad is None:
                flat[part] = 0
            else:
                flat[part] = p.grad.data.reshape(-1)

    def unpack(self) -> None:
        flat = self.flat.data
        for p, part in zip(self.params, self.slices):
            mean = flat[part].reshape(p.shape)
            if p.grad is None:
                p.grad = Tensor._wrap(mean.copy(), p.device)
            else:
                p.grad.data[...] = mean


def _weakly(method):
    """`method` as a hook that does not keep its object alive: the engine's hook table must not keep a
    dropped wrapper, and with it the whole model, in memory (nor its hooks running)."""
    reference = weakref.WeakMethod(method)

    def hook(param):
        alive = reference()
        if alive is not None:
            alive(param)
    return hook


def _buckets(params: list, cap_bytes: int) -> list:
    """Consecutive parameters of one device and dtype, cut where a bucket would pass `cap_bytes`
    (a parameter larger than the cap gets a bucket of its own)."""
    buckets, current, size = [], [], 0
    for p in params:
        nbytes = p.numel() * p.dtype.itemsize
        if current and (size + nbytes > cap_bytes or (p.device, p.dtype) != (current[0].device, current[0].dtype)):
            buckets.append(_Bucket(current))
            current, size = [], 0
        current.append(p)
        size += nbytes
    if current:
        buckets.append(_Bucket(current))
    return buckets
