"""The multi-process half of tests/test_distributed.py: what each rank of a two-process job runs.

    mpiexec -n 2 python -m mpi4py tests/distributed_job.py CASE OUT_DIR

Every rank checks its own results with assert (under ``-m mpi4py`` a failed assert aborts the whole
job, so a rank never waits forever for a partner that died) and, once its case is done, writes
OUT_DIR/done-RANK: the test then knows both ranks got to the end, not just that mpiexec exited 0.
Results the test compares with a single process are saved by rank 0 as OUT_DIR/*.npz.

The file is not named test_*.py, so pytest does not collect it; test_distributed.py imports its
model, data and training loop to compute the single-process reference with exactly the same code.
The `raise` case is meant for plain ``python`` (not ``-m mpi4py``): it checks the library's own
handler for an exception that nobody catches.
"""
import contextlib
import itertools
import os
import sys
import time

import numpy as np

import tinygrad_gpu as tg
from tinygrad_gpu import distributed as dist
from tinygrad_gpu.nn import GPT, GPTConfig, Linear, Module
from tinygrad_gpu.distributed.optim import ZeroRedundancyOptimizer
from tinygrad_gpu.nn.parallel import DistributedDataParallel as DDP
from tinygrad_gpu.optim import clip_grad_norm_

WORLD = 2          # ranks in every job the tests start
BATCH = 4          # sequences per rank per step; the single-process reference takes WORLD * BATCH
STEPS = 5
CONFIG = GPTConfig(block_size=8, vocab_size=11, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
# The two set-ups the equivalence is measured on, each with the bound its precision allows (the
# bound is on max|ddp - single| / max|single| per tensor; see test_distributed.py).
SETUPS = {"float64-adamw": (tg.float64, "adamw"), "float32-sgd": (tg.float32, "sgd")}
TINY_BUCKETS_MB = 0.001    # ~1 KiB: every layer's gradients need several buckets


def make_model(dtype, seed: int) -> GPT:
    tg.manual_seed(seed)
    model = GPT(CONFIG)
    if dtype == tg.float64:
        model.to(tg.float64)
    return model


def make_optimizer(name: str, params):
    if name == "adamw":
        return tg.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
    return tg.optim.SGD(params, lr=0.1, momentum=0.9)


def global_batches():
    """Each step's whole batch (WORLD * BATCH sequences): the same on every rank and in the reference."""
    rng = np.random.default_rng(5)
    for _ in range(STEPS):
        tokens = rng.integers(0, CONFIG.vocab_size, size=(WORLD * BATCH, CONFIG.block_size + 1))
        yield tokens[:, :-1], tokens[:, 1:]


def train(model, optimizer, rows: slice, micro_batches: int = 1, net=None, steps=(0, STEPS)) -> dict:
    """Steps `steps` (first, end) of STEPS on rows `rows` of each global batch, split into `micro_batches`
    equal parts whose losses are scaled by 1 / micro_batches (so the accumulated gradient is the mean over
    the rows); all but the last backward of a step run under net.no_sync(). Gradients clipped to norm 0.5
    (a ZeroRedundancyOptimizer's own clip_grad_norm_: no rank holds the whole mean gradient). Returns the
    final state as arrays."""
    net = model if net is None else net
    params = list(model.parameters())
    for x, y in itertools.islice(global_batches(), *steps):
        x, y = x[rows], y[rows]
        optimizer.zero_grad()
        for i, part in enumerate(np.array_split(np.arange(len(x)), micro_batches)):
            local = i < micro_batches - 1 and isinstance(net, DDP)
            with net.no_sync() if local else contextlib.nullcontext():
                _, loss = net(tg.tensor(x[part]), tg.tensor(y[part]))
                (loss * (1.0 / micro_batches)).backward()
        if isinstance(optimizer, ZeroRedundancyOptimizer):
            optimizer.clip_grad_norm_(0.5)
        else:
            clip_grad_norm_(params, 0.5)
        optimizer.step()
    return {name: t.numpy().copy() for name, t in model.state_dict().items()}


def ddp_train(setup: str, **ddp_options):
    """`train` under DDP on this rank's BATCH rows of each batch; returns (final state, the DDP)."""
    dtype, optimizer = SETUPS[setup]
    rank = dist.get_rank()
    model = make_model(dtype, seed=rank)       # rank 1 starts elsewhere: DDP's broadcast must undo that
    net = DDP(model, **ddp_options)
    rows = slice(rank * BATCH, (rank + 1) * BATCH)
    state = train(model, make_optimizer(optimizer, list(model.parameters())), rows, 1, net)
    return state, net


def same_on_every_rank(state: dict) -> bool:
    states = [None] * dist.get_world_size()
    dist.all_gather_object(states, state)
    return all(other.keys() == state.keys() and all(np.array_equal(other[k], state[k]) for k in state)
               for other in states)


class CountingAllReduce:
    """Stands in for tg.distributed.all_reduce (which DDP calls through the module) and notes, for
    each call, how many parameters' gradients the backward running then had still to finish (0 for
    a call made once backward is over). A post-accumulate hook registered after DDP's own counts
    the finished ones, so when DDP's hook for a parameter starts a bucket, that parameter still
    counts as outstanding."""

    def __init__(self, params):
        self.params = list(params)
        self.finished, self.outstanding = 0, []
        self.handles = [p.register_post_accumulate_grad_hook(self._count) for p in self.params]

    def _count(self, _):
        if self.finished == 0:              # the first gradient of a backward: count afresh after it
            tg.autograd.queue_callback(self._reset)
        self.finished += 1

    def _reset(self):
        self.finished = 0

    def __enter__(self):
        self.real = dist.all_reduce

        def all_reduce(*args, **kwargs):
            self.outstanding.append(len(self.params) - self.finished)
            return self.real(*args, **kwargs)
        dist.all_reduce = all_reduce
        return self

    def __exit__(self, *exc):
        dist.all_reduce = self.real
        for handle in self.handles:
            handle.remove()


# ---------------------------------------------------------------------------------------- cases
def case_collectives(out_dir: str) -> None:
    dist.init_process_group("mpi")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.is_initialized() and dist.get_backend() == "mpi"
    assert world == WORLD
    assert dist.get_node_local_rank() == rank          # both ranks run on this one machine

    # Rank r holds (r + 1) * base, so each op has a distinct answer: SUM 3 base, AVG 1.5 base, MAX
    # rank 1's value where base > 0 and rank 0's where base < 0, MIN the other way round.
    base = np.array([[1, -2, 3], [-4, 5, 6]])
    mine, theirs = (rank + 1) * base, (2 - rank) * base
    expected = {dist.ReduceOp.SUM: mine + theirs, dist.ReduceOp.AVG: (mine + theirs) / 2,
                dist.ReduceOp.MAX: np.maximum(mine, theirs), dist.ReduceOp.MIN: np.minimum(mine, theirs)}
    for dtype in (tg.float32, tg.float64, tg.int64):
        for op, want in expected.items():
            t = tg.tensor(mine, dtype=dtype)
            if op is dist.ReduceOp.AVG and dtype == tg.int64:
                try:
                    dist.all_reduce(t, op)
                except TypeError as e:
                    assert "AVG" in str(e), e
                else:
                    raise AssertionError("all_reduce AVG of an int64 tensor did not raise TypeError")
                assert np.array_equal(t.numpy(), mine)     # refused before touching the tensor
                continue
            assert dist.all_reduce(t, op) is None
            assert t.dtype == dtype and np.array_equal(t.numpy(), want), (dtype, op, t.numpy())

    # A refused call communicates nothing, so the next collective still pairs up across ranks.
    for wrong in ("sum", None):
        try:
            dist.all_reduce(tg.tensor(mine, dtype=tg.float32), wrong)
        except TypeError:
            pass
        else:
            raise AssertionError(f"all_reduce with op={wrong!r} did not raise TypeError")
    t = tg.tensor(mine, dtype=tg.float32)
    dist.all_reduce(t)                                   # SUM is the default
    assert np.array_equal(t.numpy(), mine + theirs)

    # Views: the result lands in the view's own elements, hence in the tensor it views, and the
    # elements outside the view are left alone.
    whole = tg.tensor(mine, dtype=tg.float64)
    transposed = whole.T
    assert not transposed.data.flags.c_contiguous
    dist.all_reduce(transposed, dist.ReduceOp.MAX)
    assert np.array_equal(transposed.numpy(), np.maximum(mine, theirs).T)
    assert np.array_equal(whole.numpy(), np.maximum(mine, theirs))
    whole = tg.tensor(mine, dtype=tg.int64)
    dist.all_reduce(whole[:, ::2])
    assert np.array_equal(whole.numpy()[:, ::2], (mine + theirs)[:, ::2])
    assert np.array_equal(whole.numpy()[:, 1], mine[:, 1])

    # async_op: two reductions in flight at once, waited for in the opposite order.
    first, second = tg.tensor(mine, dtype=tg.float32), tg.tensor(mine, dtype=tg.float64)
    work_first = dist.all_reduce(first, dist.ReduceOp.MIN, async_op=True)
    work_second = dist.all_reduce(second, dist.ReduceOp.AVG, async_op=True)
    assert isinstance(work_first, dist.Work) and isinstance(work_second, dist.Work)
    assert work_second.wait() is True and work_first.wait() is True
    assert work_first.is_completed() and work_second.is_completed()
    assert work_first.wait() is True                   # waiting again is harmless
    assert np.array_equal(first.numpy(), np.minimum(mine, theirs))
    assert np.array_equal(second.numpy(), (mine + theirs) / 2)

    # broadcast: from rank 1, for a float and an int tensor, then into a view from rank 0.
    for dtype in (tg.float32, tg.int64):
        t = tg.tensor(mine, dtype=dtype)
        assert dist.broadcast(t, src=1) is None
        assert t.dtype == dtype and np.array_equal(t.numpy(), 2 * base)
    whole = tg.tensor(mine, dtype=tg.float64)
    view = whole.T
    dist.broadcast(view, src=0)
    assert np.array_equal(view.numpy(), base.T) and np.array_equal(whole.numpy(), base)
    try:
        dist.broadcast(tg.tensor(mine), src=world)
    except ValueError:
        pass
    else:
        raise AssertionError(f"broadcast from src={world} in a world of {world} did not raise ValueError")

    # barrier: rank 1 is slow to write a file; rank 0 must not get past the barrier before it has.
    flag = os.path.join(out_dir, "written-before-the-barrier")
    if rank == 1:
        time.sleep(0.3)
        with open(flag, "w") as f:
            f.write("rank 1")
    dist.barrier()
    assert os.path.exists(flag), "rank 0 left the barrier before rank 1 reached it"

    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "name": f"rank-{rank}", "values": [rank] * (rank + 1)})
    assert gathered == [{"rank": r, "name": f"rank-{r}", "values": [r] * (r + 1)} for r in range(world)]
    try:
        dist.all_gather_object([None], rank)
    except ValueError:
        pass
    else:
        raise AssertionError("all_gather_object with a list of the wrong length did not raise ValueError")
    gathered = [None] * world                          # and the refused call left nothing half-done
    dist.all_gather_object(gathered, rank * 10)
    assert gathered == [0, 10]

    # reduce_scatter_tensor: rank r ends with chunk r of the sum (the mean); all_gather_into_tensor, also in place.
    values = np.arange(2 * world * 3, dtype=np.float64).reshape(2 * world, 3) * (rank + 1)
    mine = tg.zeros(2, 3, dtype=tg.float64)
    dist.reduce_scatter_tensor(mine, tg.tensor(values))
    assert np.array_equal(mine.numpy(), (values / (rank + 1) * 3)[2 * rank:2 * rank + 2])
    dist.reduce_scatter_tensor(mine, tg.tensor(values), op=dist.ReduceOp.AVG)
    assert np.array_equal(mine.numpy(), (values / (rank + 1) * 1.5)[2 * rank:2 * rank + 2])
    everyone = tg.zeros(world * 4, dtype=tg.float32)
    dist.all_gather_into_tensor(everyone, tg.full((4,), float(rank)))
    assert np.array_equal(everyone.numpy(), np.repeat(np.arange(world, dtype=np.float32), 4))
    in_place = tg.full((world * 4,), -1.0)
    in_place.data[rank * 4:(rank + 1) * 4] = rank + 7
    dist.all_gather_into_tensor(in_place, tg.Tensor._wrap(in_place.data[rank * 4:(rank + 1) * 4], "cpu"))
    assert np.array_equal(in_place.numpy(), np.repeat(np.arange(world, dtype=np.float32) + 7, 4))
    try:
        dist.reduce_scatter_tensor(tg.zeros(3), tg.zeros(5))
    except ValueError as e:
        assert "world size (2) x 3 elements" in str(e), e
    else:
        raise AssertionError("reduce_scatter_tensor with an input of the wrong size did not raise ValueError")


def case_equivalence(out_dir: str) -> None:
    dist.init_process_group("mpi")
    for setup in SETUPS:
        state, net = ddp_train(setup, bucket_cap_mb=TINY_BUCKETS_MB)
        assert len(net.buckets) > 1
        assert same_on_every_rank(state), f"{setup}: the ranks ended with different parameters"
        if dist.get_rank() == 0:
            np.savez(os.path.join(out_dir, f"{setup}.npz"), **state)


def zero_adamw(model, two_groups: bool = False):
    """make_optimizer("adamw") sharded; with `two_groups`, in nanoGPT's groups (decay on matrices only)."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.ndim >= 2]},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}] if two_groups else params
    return ZeroRedundancyOptimizer(groups, tg.optim.AdamW, lr=1e-2, weight_decay=0.1)


def case_zero(out_dir: str) -> None:
    """ZeRO-1 on two ranks against DDP with AdamW (float64, clipped, 5 steps), each saved for the test to compare
    with one process; each rank's optimizer state is half of AdamW's; a run saved after 3 steps and resumed
    from its consolidated state ends bit for bit where the uninterrupted run does."""
    dist.init_process_group("mpi")
    rank = dist.get_rank()
    rows = slice(rank * BATCH, (rank + 1) * BATCH)
    model = make_model(tg.float64, seed=rank)        # rank 1 starts elsewhere: ZeRO's broadcast must undo that
    optimizer = zero_adamw(model)
    state = train(model, optimizer, rows)
    assert same_on_every_rank(state), "ZeRO-1: the ranks ended with different parameters"

    n_params = sum(p.numel() for p in model.parameters())
    kept = sum(v.size for s in optimizer.optim.state.values() for v in s.values() if not np.isscalar(v))
    assert 2 * n_params / WORLD <= kept <= 2 * n_params / WORLD + 2 * 2 * WORLD, (kept, n_params)
    whole = [None] * WORLD
    dist.all_gather_object(whole, kept)
    assert sum(whole) < 2 * n_params + 2 * 2 * WORLD            # the shards share out AdamW's 2 x parameters

    ddp_state, _ = ddp_train("float64-adamw")
    optimizer.consolidate_state_dict(to=0)
    if rank == 0:
        np.savez(os.path.join(out_dir, "zero.npz"), **state)
        np.savez(os.path.join(out_dir, "ddp.npz"), **ddp_state)
        saved = optimizer.state_dict()
        assert sorted(saved["state"]) == list(range(len(list(model.parameters()))))
        assert set(saved["state"][0]) == {"step", "exp_avg", "exp_avg_sq"} and saved["state"][0]["step"] == STEPS
    else:
        try:
            optimizer.state_dict()
        except RuntimeError as e:
            assert "consolidate_state_dict" in str(e), e
        else:
            raise AssertionError("state_dict() on a rank the state was not consolidated to did not raise")

    # Save after 3 steps, resume from the file on every rank, 2 more steps (two groups, each sharded).
    model = make_model(tg.float64, seed=0)
    optimizer = zero_adamw(model, two_groups=True)
    state = train(model, optimizer, rows)
    model = make_model(tg.float64, seed=0)
    optimizer = zero_adamw(model, two_groups=True)
    train(model, optimizer, rows, steps=(0, 3))
    optimizer.consolidate_state_dict(to=0)
    path = os.path.join(out_dir, "after-3.safetensors")
    if rank == 0:
        tg.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    dist.barrier()
    saved = tg.load(path)
    resumed = make_model(tg.float64, seed=5)
    resumed.load_state_dict(saved["model"])
    optimizer = zero_adamw(resumed, two_groups=True)
    optimizer.load_state_dict(saved["optimizer"])
    again = train(resumed, optimizer, rows, steps=(3, STEPS))
    assert all(np.array_equal(again[k], state[k]) for k in state), "ZeRO-1: the resumed run ended elsewhere"


def case_accumulation(out_dir: str) -> None:
    dist.init_process_group("mpi")
    for setup in SETUPS:
        dtype, optimizer = SETUPS[setup]
        model = make_model(dtype, seed=dist.get_rank())
        net = DDP(model, bucket_cap_mb=TINY_BUCKETS_MB)
        with CountingAllReduce(model.parameters()) as counter:
            rows = slice(dist.get_rank() * BATCH, (dist.get_rank() + 1) * BATCH)
            state = train(model, make_optimizer(optimizer, list(model.parameters())), rows, 2, net)
        # One reduction per bucket per step: the no_sync micro-batches communicated nothing.
        assert len(counter.outstanding) == STEPS * len(net.buckets), (counter.outstanding, len(net.buckets))
        assert same_on_every_rank(state), f"{setup}: the ranks ended with different parameters"
        if dist.get_rank() == 0:
            np.savez(os.path.join(out_dir, f"{setup}.npz"), **state)


def case_overlap(out_dir: str) -> None:
    dist.init_process_group("mpi")
    runs = {}
    for overlap, cap in ((True, TINY_BUCKETS_MB), (False, TINY_BUCKETS_MB), (True, 25)):
        dtype, optimizer = SETUPS["float32-sgd"]
        model = make_model(dtype, seed=dist.get_rank())
        net = DDP(model, bucket_cap_mb=cap, overlap=overlap)
        assert net.module is model
        # Every trained parameter in exactly one bucket, the buckets in reverse registration order.
        in_buckets = [p for bucket in net.buckets for p in bucket.params]
        assert [id(p) for p in in_buckets] == [id(p) for p in reversed(list(model.parameters()))]
        with CountingAllReduce(model.parameters()) as counter:
            rows = slice(dist.get_rank() * BATCH, (dist.get_rank() + 1) * BATCH)
            runs[overlap, cap] = train(model, make_optimizer(optimizer, list(model.parameters())), rows, 1, net)
        outstanding = counter.outstanding
        assert len(outstanding) == STEPS * len(net.buckets)
        assert net.reduction_seconds > 0
        if not overlap:
            # Every bucket waited for the end of backward.
            assert set(outstanding) == {0}, outstanding
        elif cap == TINY_BUCKETS_MB:
            # The first buckets started while backward still had other layers' gradients to finish.
            assert max(outstanding) > 1, outstanding
        else:
            # A single bucket holding everything starts with the last gradient, from its hook.
            assert set(outstanding) == {1}, outstanding
        if cap == TINY_BUCKETS_MB:
            assert len(net.buckets) > 2, len(net.buckets)
        else:
            assert len(net.buckets) == 1
    # Averaging is elementwise, so neither when a bucket starts nor how the gradients are cut into
    # buckets can change a single bit of the result.
    reference = runs[True, TINY_BUCKETS_MB]
    for key, state in runs.items():
        assert all(np.array_equal(state[k], reference[k]) for k in reference), f"{key} differs from overlap"
    assert same_on_every_rank(reference)

    # Buffers travel with the parameters at construction: rank 0's values become everyone's.
    class WithBuffer(Module):
        def __init__(self, value):
            super().__init__()
            self.weight = tg.nn.Parameter(tg.full((3,), float(value)))
            self.register_buffer("running", tg.full((2, 2), float(value)))

    module = WithBuffer(10 + dist.get_rank())
    DDP(module)
    assert np.array_equal(module.weight.numpy(), np.full(3, 10.0))
    assert np.array_equal(module.running.numpy(), np.full((2, 2), 10.0))


class PlannedFailure(RuntimeError):
    pass


def case_raise(out_dir: str) -> None:
    """Rank 1 raises from inside backward; rank 0 is left waiting in a reduction that rank 1 will never
    join. Only the library's handler for uncaught exceptions (MPI_Abort) can end the job."""
    dist.init_process_group("mpi")
    model = make_model(tg.float32, seed=0)
    net = DDP(model, bucket_cap_mb=TINY_BUCKETS_MB)

    def fail(_):
        raise PlannedFailure("rank 1 fails here on purpose")
    if dist.get_rank() == 1:
        model.transformer.wpe.weight.register_post_accumulate_grad_hook(fail)
    x, y = next(global_batches())
    _, loss = net(tg.tensor(x[:BATCH]), tg.tensor(y[:BATCH]))
    loss.backward()
    dist.barrier()          # not reached by rank 1; keeps rank 0 from finishing if its backward ever returned


def case_recover(out_dir: str) -> None:
    """Every rank's backward raises once, from a hook, after DDP has counted some gradients: the next
    forward must start afresh, so the next backward averages again (it did not, once)."""
    dist.init_process_group("mpi")
    rank = dist.get_rank()
    model = Linear(3, 1)
    net = DDP(model)
    planned = [True]

    def fail_once(_):
        if planned and planned.pop():
            raise PlannedFailure("a transient failure in backward")
    model.bias.register_post_accumulate_grad_hook(fail_once)
    x = tg.ones(2, 3) * (rank + 1)
    try:
        net(x).sum().backward()
        raise AssertionError("the planned failure did not happen")
    except PlannedFailure:
        pass
    model.weight.grad = model.bias.grad = None
    net(x).sum().backward()
    assert model.weight.grad.tolist() == [[3.0, 3.0, 3.0]]       # the mean of rank 0's 2s and rank 1's 4s
    flags = tg.tensor([rank == 0, False, True])                 # booleans: MAX is "any", MIN "all"
    dist.all_reduce(flags, dist.ReduceOp.MAX)
    assert flags.tolist() == [True, False, True]
    flags = tg.tensor([rank == 0, False, True])
    dist.all_reduce(flags, dist.ReduceOp.MIN)
    assert flags.tolist() == [False, False, True]


def case_unused(out_dir: str) -> None:
    """A layer used on rank 0 only: rank 1 sees its buckets complete only at the end of backward, rank 0
    during it. The ranks must still make the same calls (a blocking reduction on one rank against a
    started one on the other hung), and the layer ends with the mean of rank 0's gradient and zeros."""
    dist.init_process_group("mpi")
    rank = dist.get_rank()
    tg.manual_seed(0)
    first, second = Linear(4, 4), Linear(4, 1)
    model = Module()
    model.first, model.second = first, second
    net = DDP(model, bucket_cap_mb=1e-6)                           # a bucket per parameter
    assert len(net.buckets) == 4
    x = tg.ones(3, 4)
    hidden = net.module.first(x)
    loss = net.module.second(hidden).sum() if rank == 0 else hidden.sum()
    loss.backward()
    gathered = [None] * WORLD
    dist.all_gather_object(gathered, second.weight.grad.numpy())
    assert np.array_equal(gathered[0], gathered[1])                 # averaged on both ranks
    assert np.abs(gathered[0]).max() > 0                            # rank 0's half of its gradient


def case_dropped_wrapper(out_dir: str) -> None:
    """A wrapper that is dropped goes, with its hooks: the engine's table of hooks does not keep it (and
    the model) alive, and the model wrapped again reduces once per backward, not once per wrapper."""
    import gc
    import weakref
    dist.init_process_group("mpi")
    model = Linear(3, 1)
    first = DDP(model)
    gone = weakref.ref(first)
    del first
    gc.collect()
    assert gone() is None
    net = DDP(model)
    calls = []
    original = dist.all_reduce

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)
    dist.all_reduce = counting
    try:
        net(tg.ones(2, 3)).sum().backward()
    finally:
        dist.all_reduce = original
    assert len(calls) == len(net.buckets) == 1


def case_abort_before_a_group(out_dir: str) -> None:
    """Rank 1 gives up before any process group exists, while rank 0 already waits in an MPI call:
    abort_job must end the job (under plain python nothing else would)."""
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_rank() == 1:
        dist.abort_job(2)
    MPI.COMM_WORLD.Barrier()


CASES = {"unused": case_unused, "dropped_wrapper": case_dropped_wrapper,
         "abort_before_a_group": case_abort_before_a_group, "collectives": case_collectives, "equivalence": case_equivalence,
         "accumulation": case_accumulation, "zero": case_zero,
         "overlap": case_overlap, "raise": case_raise, "recover": case_recover}


def main(argv) -> None:
    case, out_dir = argv[1], argv[2]
    CASES[case](out_dir)
    with open(os.path.join(out_dir, f"done-{dist.get_rank()}"), "w") as f:
        f.write(case)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv)
