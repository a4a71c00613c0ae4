"""ZeroRedundancyOptimizer: ZeRO stage 1, each rank keeping the optimizer state of its shard of the parameters.

Under DistributedDataParallel every rank holds AdamW's two moments for every parameter, twice the model's
size, and every rank computes the same update. ZeRO stage 1 (llm.c's ``-z 1``) cuts that work and memory
into world-size shards:

1. Each parameter group's parameters live in one flat array (each parameter's .data is a view into it),
   padded to a multiple of the world size and cut into equal contiguous shards: rank r owns shard r.
2. step(): the gradients, packed into one flat array per group, are reduce-scattered (AVG), so rank r
   receives the mean gradient of its shard only, for half the traffic of an all_reduce.
3. The wrapped optimizer (`optimizer_class`, AdamW say) sees one parameter per group: the rank's shard, a
   view of the flat array. Its state (the moments) is made for the shard alone: 1 / world size of it.
4. The updated shards are all-gathered back into the flat arrays in place, so every rank's parameters
   are the whole updated model again.

The update is elementwise, so each element gets the arithmetic DDP's AdamW would give it; the result
differs from DDP only in the order of the gradient sums (tests/distributed_job.py: 1e-9 in float64).
Clipping needs the norm of the whole averaged gradient, which no rank holds: clip_grad_norm_ adds the
squares of each shard and all_reduces that one number.

Saving (PyTorch's protocol): every rank calls consolidate_state_dict(to=0), which gathers the shards'
state; rank 0's state_dict() is then the wrapped optimizer's own format, per parameter, as if it had
never been sharded, so a checkpoint resumes under any number of ranks (load_state_dict keeps the shard).

A parameter without a gradient on a step counts as zeros, as under DistributedDataParallel (AdamW's moments
decay and weight decay applies to it); a frozen one (requires_grad False) is left out of the shards and never
changes. The parameters' own gradients (.grad, each rank's, never averaged) are let go when step() or clip_grad_norm_
packs them for the reduce-scatter: from then on the shard's mean gradient is the one that counts, and the
memory of the whole gradient is free before AdamW runs (after a step, p.grad is None, as after zero_grad).
So a rank holds the parameters, the gradients until they are packed, and 2 / world size of AdamW's state,
where DistributedDataParallel holds the parameters, the gradients, its buckets' copy of them and all of
the state (benchmarks/memory.py measures both).

float16's GradScaler is not supported: each rank would find overflows in its own gradients and skip steps
alone.
"""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from ..optim.clip import _norm
from ..optim.optimizer import Optimizer
from ..tensor import Tensor
from . import group as _group


class ZeroRedundancyOptimizer(Optimizer):
    def __init__(self, params, optimizer_class, process_group=None, **defaults):
        if process_group is not None:
            raise ValueError("ZeroRedundancyOptimizer: only the default process group is supported; leave "
                             "process_group=None")
        self.rank, self.world_size = _group.get_rank(), _group.get_world_size()     # (names the missing group)
        self.optimizer_class, self._shards, self.optim = optimizer_class, [], None
        self._reduced = False               # this step's gradients already reduce-scattered (by clip_grad_norm_)
        self._consolidated = None           # rank `to`'s whole state, from consolidate_state_dict
        super().__init__(params, defaults)

    def add_param_group(self, group: dict) -> None:
        """The group, and for its parameters that train (frozen ones never get a gradient, and stay as they are)
        a shard and a group of the wrapped optimizer holding it."""
        super().add_param_group(group)
        group = self.param_groups[-1]
        trained = [p for p in group["params"] if p.requires_grad]
        if not trained:
            return
        shard = _GroupShard(trained, self.rank, self.world_size)
        inner = {"params": [shard.param], **_hyper(group)}
        if self.optim is None:
            self.optim = self.optimizer_class([inner], **self.defaults)
        else:
            self.optim.add_param_group(inner)
        shard.group, shard.inner = group, self.optim.param_groups[-1]
        self._shards.append(shard)
        for key, value in _hyper(shard.inner).items():      # the wrapped optimizer's defaults too
            group.setdefault(key, value)

    # ------------------------------------------------------------------ the step
    def reduce_gradients(self) -> None:
        """Each group's gradients packed and reduce-scattered: the mean over the ranks of this rank's shard."""
        if not self._reduced:
            for shard in self._shards:
                shard.check_views()         # before anything changes
            for shard in self._shards:
                shard.reduce_gradients()
            self._reduced = True

    def clip_grad_norm_(self, max_norm: float) -> Tensor:
        """optim.clip_grad_norm_ on the mean gradient, which is spread over the ranks' shards: each rank's sum of
        squares, all_reduced, is the square of the whole norm. Returns the norm before clipping."""
        if not self._shards:
            return Tensor(0.0)
        self.reduce_gradients()
        shards = [s for s in self._shards if s.param.grad is not None]
        device = self._shards[0].param.device
        with devices.use(device):
            xp = devices.array_module(device)
            # the norm of the shards' norms, as clip_grad_norm_ takes the norm of the gradients' norms
            squares = sum((devices.move(_norm(xp, s.param.grad.data, 2.0), device) ** 2 for s in shards),
                          xp.zeros((), np.float64))
            total = Tensor._wrap(xp.reshape(squares, (1,)), device)
            _group.all_reduce(total)
            norm = xp.sqrt(total.data[0])
            scale = xp.minimum(max_norm / (norm + 1e-6), 1.0)
            result = Tensor._wrap(norm.astype(self._shards[0].param.dtype), device)
        for s in shards:
            with devices.use(s.param.device):
                s.param.grad.data *= devices.move(scale, s.param.device).astype(s.param.dtype)
        return result

    def step(self) -> None:
        if not self._shards:                # nothing trains
            return
        self.reduce_gradients()
        self._reduced = False
        for shard in self._shards:
            shard.inner.update(_hyper(shard.group))     # what the training loop set (this step's learning rate)
        self.optim.step()
        for shard in self._shards:
            shard.all_gather()

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        if self.optim is not None:
            self.optim.zero_grad(set_to_none)
        self._reduced = False

    # ------------------------------------------------------------------ saving and resuming
    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather every shard's state on rank `to` (every rank must call it), for its state_dict()."""
        whole = {}
        for shard in self._shards:
            state = self.optim.state.get(id(shard.param))
            if not state:
                continue
            # an array over the shard (a moment) is gathered whole and cut per parameter; a number (the step) is shared
            gathered = {key: shard.gather(value) for key, value in state.items() if _is_shard_array(value, shard)}
            for p, part in zip(shard.params, shard.slices):
                whole[id(p)] = {key: gathered[key][part].reshape(p.shape) if key in gathered else value
                                for key, value in state.items()}
        self._consolidated = whole if self.rank == to else None

    def state_dict(self) -> dict:
        """The wrapped optimizer's state_dict for every parameter, on the rank consolidate_state_dict sent it to."""
        if self._consolidated is None:
            raise RuntimeError(f"ZeroRedundancyOptimizer.state_dict on rank {self.rank}: call "
                               "consolidate_state_dict(to=...) on every rank first, and state_dict() on that rank")
        self.state = self._consolidated
        try:
            return super().state_dict()
        finally:
            self.state, self._consolidated = {}, None       # the whole state held no longer than needed

    def load_state_dict(self, state_dict: dict) -> None:
        """A state_dict of the whole (from any number of ranks, or from the plain optimizer): this rank keeps its
        shard of it."""
        super().load_state_dict(state_dict)
        whole, self.state = self.state, {}
        for shard in self._shards:
            shard.inner.update(_hyper(shard.group))
            states = [whole.get(id(p)) for p in shard.params]
            if all(s is None for s in states):
                continue
            if any(s is None for s in states):
                raise ValueError("ZeroRedundancyOptimizer.load_state_dict: the saved state covers only some of a "
                                 "group's parameters; each group's parameters must all have been stepped")
            # an entry of each parameter's shape (a moment) is cut into shards; a number (the step) is shared
            self.optim.state[id(shard.param)] = {
                key: shard.own_part([s[key] for s in states])
                if all(not np.isscalar(s[key]) and np.shape(s[key]) == p.shape for s, p in zip(states, shard.params))
                else value for key, value in states[0].items()}


class _GroupShard:
    """One parameter group's flat array of parameters and this rank's shard of it."""

    def __init__(self, params: list, rank: int, world_size: int):
        first = params[0]
        for p in params:
            if (p.device, p.dtype) != (first.device, first.dtype):
                raise ValueError(f"ZeroRedundancyOptimizer: a parameter group's parameters must share one device "
                                 f"and dtype (one flat array each); got {first.device} {first.dtype} and "
                                 f"{p.device} {p.dtype}: put them in separate groups")
        self.params, self.device, self.world_size = params, first.device, world_size
        self.slices, start = [], 0
        for p in params:
            self.slices.append(slice(start, start + p.numel()))
            start += p.numel()
        self.size = math.ceil(start / world_size)          # each rank's shard; the last ones padded with zeros
        xp = devices.array_module(self.device)
        with devices.use(self.device):
            self.flat = xp.zeros(self.size * world_size, dtype=first.dtype)
        self.own = slice(rank * self.size, (rank + 1) * self.size)
        self.param = Tensor._wrap(self.flat[self.own], self.device, requires_grad=True)
        self._as_views()
        _group.broadcast(Tensor._wrap(self.flat, self.device), src=0)    # every rank starts from rank 0's values

    def _as_views(self) -> None:
        """Each parameter's .data becomes a view into the flat array, which takes its values."""
        with devices.use(self.device):
            for p, part in zip(self.params, self.slices):
                view = self.flat[part].reshape(p.shape)
                view[...] = p.data
                p.data = view
        self._views = [p.data for p in self.params]

    def reduce_gradients(self) -> None:
        """The parameters' gradients packed into one flat array, each .grad let go once packed (the flat array
        holds it now), and reduce-scattered: this rank's shard of their mean, the shard parameter's .grad."""
        xp = devices.array_module(self.device)
        with devices.use(self.device):
            flat_grad = xp.zeros(self.size * self.world_size, dtype=self.flat.dtype)
            for p, part in zip(self.params, self.slices):
                if p.grad is not None:
                    flat_grad[part] = p.grad.data.reshape(-1)
                    p.grad = None
            grad = xp.empty(self.size, dtype=self.flat.dtype)
            _group.reduce_scatter_tensor(Tensor._wrap(grad, self.device), Tensor._wrap(flat_grad, self.device),
                                         _group.ReduceOp.AVG)
        self.param.grad = Tensor._wrap(grad, self.device)

    def check_views(self) -> None:
        if any(p.data is not view for p, view in zip(self.params, self._views)):
            raise RuntimeError("ZeroRedundancyOptimizer: a parameter's .data was replaced after the optimizer was "
                               "made (moved, cast or loaded anew); make the optimizer after such changes")

    def all_gather(self) -> None:
        with devices.use(self.device):
            _group.all_gather_into_tensor(Tensor._wrap(self.flat, self.device), self.param)

    def gather(self, value):
        """A state array of this rank's shard, all ranks' shards together (the flat layout)."""
        with devices.use(self.device):
            whole = devices.array_module(self.device).empty(self.size * self.world_size, dtype=value.dtype)
            _group.all_gather_into_tensor(Tensor._wrap(whole, self.device), Tensor._wrap(value, self.device))
        return whole

    def own_part(self, arrays: list):
        """This rank's shard of the flat array the per-parameter `arrays` make together."""
        xp = devices.array_module(self.device)
        with devices.use(self.device):
            flat = xp.zeros(self.size * self.world_size, dtype=self.flat.dtype)
            for part, array in zip(self.slices, arrays):
                flat[part] = devices.move(array, self.device).reshape(-1)
            return flat[self.own].copy()


def _is_shard_array(value, shard: _GroupShard) -> bool:
    """Is this state entry an array over the shard, not a number?"""
    return not np.isscalar(value) and np.shape(value) == (shard.size,)


def _hyper(group: dict) -> dict:
    return {key: value for key, value in group.items() if key != "params"}
