"""tg.distributed and DistributedDataParallel: a world of one in this process, and two-process jobs.

The first half needs no launcher: a program started without mpiexec is a world of one, in which the
collectives return at once, plus the two autograd hooks DDP is built on. The second half starts
`mpiexec -n 2` on tests/distributed_job.py (each rank checks its own results there) and compares
what the job trained with one process training on the whole batch, computed here with the job's
own model, data and loop. Those tests are skipped where mpiexec or mpi4py is missing.

This process never imports mpi4py.MPI: doing so starts MPI, and the library would then take this
process for one that mpiexec started.
"""
import gc
import importlib.util
import os
import shutil
import subprocess
import sys
import time
import weakref

import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu import autograd
from tinygrad_gpu import distributed as dist
from tinygrad_gpu.distributed.optim import ZeroRedundancyOptimizer
from tinygrad_gpu.nn.parallel import DistributedDataParallel as DDP
from tinygrad_gpu.optim import clip_grad_norm_

import distributed_job as job
from conftest import gpu, requires_gpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "tests", "distributed_job.py")
# Per set-up bound on max|ddp - single| / max|single|, over the tensors. Measured: ~5e-13 for float64
# AdamW, ~7e-7 for float32 SGD with momentum (two ranks add their halves in another order than one
# process adds the whole); a rank stepping on its own half-batch alone lands over 1 away.
BOUNDS = {"float64-adamw": 1e-9, "float32-sgd": 1e-5}


@pytest.fixture(autouse=True)
def _no_group_left_behind():
    dist.destroy_process_group()
    yield
    dist.destroy_process_group()


# ----------------------------------------------------------------------------- a world of one
def test_without_mpiexec_the_world_is_one_process():
    dist.init_process_group()
    assert dist.is_initialized() and dist.get_backend() == "mpi"
    assert (dist.get_rank(), dist.get_world_size(), dist.get_node_local_rank()) == (0, 1, 0)


@pytest.mark.parametrize("op", list(dist.ReduceOp))
@pytest.mark.parametrize("dtype", [tg.float32, tg.float64])
def test_in_a_world_of_one_every_reduction_leaves_the_values_unchanged(op, dtype):
    dist.init_process_group("mpi")
    values = np.array([[1.5, -2.25, 3.0], [0.1, 7.0, -0.3]])
    t = tg.tensor(values, dtype=dtype)
    assert dist.all_reduce(t, op) is None
    assert t.dtype == dtype
    np.testing.assert_array_equal(t.numpy(), values.astype(dtype))
    work = dist.all_reduce(t, op, async_op=True)
    assert isinstance(work, dist.Work) and work.wait() is True and work.is_completed()
    np.testing.assert_array_equal(t.numpy(), values.astype(dtype))


def test_in_a_world_of_one_broadcast_barrier_and_gather_are_identities():
    dist.init_process_group("mpi")
    t = tg.tensor([[1, 2], [3, 4]])
    dist.broadcast(t, src=0)
    np.testing.assert_array_equal(t.numpy(), [[1, 2], [3, 4]])
    dist.barrier()
    gathered = [None]
    dist.all_gather_object(gathered, {"loss": 1.25})
    assert gathered == [{"loss": 1.25}]


def test_a_group_can_be_destroyed_and_made_again():
    dist.init_process_group("mpi")
    dist.destroy_process_group()
    assert not dist.is_initialized()
    dist.destroy_process_group()        # a second destroy has nothing to do
    dist.init_process_group("mpi")
    assert dist.is_initialized() and dist.get_world_size() == 1


@pytest.mark.parametrize("call", [dist.get_rank, dist.get_world_size, dist.get_node_local_rank, dist.get_backend,
                                  dist.barrier, lambda: dist.all_reduce(tg.ones(2)),
                                  lambda: dist.broadcast(tg.ones(2)), lambda: dist.all_gather_object([None], 1)])
def test_calls_before_init_process_group_name_it(call):
    with pytest.raises(RuntimeError, match="init_process_group"):
        call()


def test_init_process_group_twice_is_refused():
    dist.init_process_group("mpi")
    with pytest.raises(RuntimeError, match="destroy_process_group"):
        dist.init_process_group("mpi")
    assert dist.get_world_size() == 1       # the first group is still there


@pytest.mark.skipif(tg.cuda_available(), reason="this machine has a GPU, so nccl may well start")
def test_nccl_without_a_gpu_is_a_one_line_error():
    with pytest.raises(RuntimeError) as raised:
        dist.init_process_group("nccl")
    message = str(raised.value)
    assert "\n" not in message
    assert "nccl" in message and "GPU" in message
    assert not dist.is_initialized()        # nothing half-made is left for the next init to trip on


def test_an_unknown_backend_is_a_value_error():
    with pytest.raises(ValueError, match="gloo"):
        dist.init_process_group("gloo")
    assert not dist.is_initialized()


def test_all_reduce_refuses_an_op_that_is_not_a_reduce_op():
    dist.init_process_group("mpi")
    t = tg.ones(3)
    for op in ("sum", None, 0):
        with pytest.raises(TypeError, match="ReduceOp"):
            dist.all_reduce(t, op)


def test_average_of_an_integer_tensor_is_a_type_error():
    dist.init_process_group("mpi")
    t = tg.tensor([1, 2, 3])
    with pytest.raises(TypeError, match="AVG"):
        dist.all_reduce(t, dist.ReduceOp.AVG)
    np.testing.assert_array_equal(t.numpy(), [1, 2, 3])


def test_bad_arguments_to_broadcast_and_gather_are_value_errors():
    dist.init_process_group("mpi")
    with pytest.raises(ValueError, match="src=1"):
        dist.broadcast(tg.ones(2), src=1)
    with pytest.raises(ValueError, match="get_world_size"):
        dist.all_gather_object([None, None], 1)


def test_abort_job_in_a_world_of_one_just_exits_with_the_code():
    with pytest.raises(SystemExit) as exited:
        dist.abort_job(3)                                 # no group at all
    assert exited.value.code == 3
    dist.init_process_group("mpi")
    with pytest.raises(SystemExit) as exited:
        dist.abort_job(4)
    assert exited.value.code == 4


# ----------------------------------------------------------------------------- autograd hooks
def test_post_accumulate_hook_runs_once_and_sees_the_finished_gradient():
    w = tg.tensor([1.0, -2.0, 3.0], requires_grad=True)
    x = tg.tensor([0.5, 4.0, -1.0])
    seen = []
    w.register_post_accumulate_grad_hook(lambda leaf: seen.append((leaf is w, leaf.grad.numpy().copy())))
    ((w * x).sum() + (w * w).sum()).backward()           # w gets two contributions
    assert len(seen) == 1 and seen[0][0]
    np.testing.assert_array_equal(seen[0][1], x.numpy() + 2 * w.numpy())
    (w * 3).sum().backward()                              # accumulates into .grad: the hook sees the total
    assert len(seen) == 2
    np.testing.assert_array_equal(seen[1][1], x.numpy() + 2 * w.numpy() + 3)
    np.testing.assert_array_equal(seen[1][1], w.grad.numpy())


def test_hooks_run_in_registration_order_and_remove_stops_one():
    w = tg.ones(2, requires_grad=True)
    calls = []
    first = w.register_post_accumulate_grad_hook(lambda _: calls.append("first"))
    w.register_post_accumulate_grad_hook(lambda _: calls.append("second"))
    (w * 2).sum().backward()
    assert calls == ["first", "second"]
    first.remove()
    first.remove()                                        # removing twice changes nothing
    (w * 2).sum().backward()
    assert calls == ["first", "second", "second"]


def test_post_accumulate_hook_is_not_run_by_tg_grad():
    # tg.grad returns gradients without adding them into .grad, so there is nothing accumulated to report.
    w = tg.ones(2, requires_grad=True)
    calls = []
    w.register_post_accumulate_grad_hook(calls.append)
    (g,) = tg.grad((w * w).sum(), [w])
    np.testing.assert_array_equal(g.numpy(), [2, 2])
    assert calls == [] and w.grad is None


def test_post_accumulate_hook_needs_a_leaf_that_requires_grad():
    w = tg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        (w * 2).register_post_accumulate_grad_hook(lambda _: None)
    with pytest.raises(RuntimeError, match="leaf"):
        tg.ones(2).register_post_accumulate_grad_hook(lambda _: None)


def test_hooks_whose_handles_are_dropped_all_stay():
    # Handles once took their key from id(handle): a dropped handle's id came back for the next one,
    # whose hook then replaced the first.
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda t: seen.append("first"))
    w.register_post_accumulate_grad_hook(lambda t: seen.append("second"))
    (w * w).sum().backward()
    assert seen == ["first", "second"]


def test_a_hook_goes_away_with_its_tensor():
    w = tg.ones(2, requires_grad=True)
    calls = []
    w.register_post_accumulate_grad_hook(lambda _: calls.append(1))
    alive, dead_id = weakref.ref(w), id(w)
    del w
    gc.collect()
    assert alive() is None                               # the registry does not keep the tensor alive
    # Nor does it hand the hook to a new tensor at the same address (CPython reuses it at once).
    successors = []
    while len(successors) < 100 and dead_id not in map(id, successors):
        successors.append(tg.ones(2, requires_grad=True))
    sum((v * 2).sum() for v in successors).backward()
    assert calls == []


def test_queue_callback_outside_backward_is_refused():
    with pytest.raises(RuntimeError, match="backward"):
        autograd.queue_callback(lambda: None)


def test_queued_callbacks_run_once_after_every_gradient_is_in():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    b = tg.tensor([3.0, 4.0], requires_grad=True)
    seen = []

    def hook(_):
        seen.append(("hook: b has its gradient", b.grad is not None))
        autograd.queue_callback(lambda: seen.append(("callback: b has its gradient", b.grad is not None)))
        autograd.queue_callback(lambda: seen.append(("second callback", None)))
    a.register_post_accumulate_grad_hook(hook)
    (a * (b * 3).exp()).sum().backward()                  # b lies deeper than a: it is finished after a
    assert seen == [("hook: b has its gradient", False), ("callback: b has its gradient", True),
                    ("second callback", None)]
    with pytest.raises(RuntimeError, match="backward"):   # the backward is over: no more queueing
        autograd.queue_callback(lambda: None)
    (b * 2).sum().backward()                              # a backward that does not reach `a` runs none
    assert len(seen) == 3


# ----------------------------------------------------------------------------- DDP in one process
def test_ddp_needs_a_process_group():
    with pytest.raises(RuntimeError, match="init_process_group"):
        DDP(job.make_model(tg.float32, seed=0))


def test_ddp_refuses_a_bucket_cap_that_is_not_positive():
    dist.init_process_group("mpi")
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        DDP(job.make_model(tg.float32, seed=0), bucket_cap_mb=0)


def test_ddp_in_a_world_of_one_leaves_the_gradients_exactly_alone():
    dist.init_process_group("mpi")
    plain, wrapped = job.make_model(tg.float32, seed=0), job.make_model(tg.float32, seed=0)
    net = DDP(wrapped, bucket_cap_mb=job.TINY_BUCKETS_MB)
    assert net.module is wrapped and len(net.buckets) > 1
    x, y = next(job.global_batches())
    for model in (plain, net):
        for _ in range(2):                                # a second backward accumulates, as without DDP
            _, loss = model(tg.tensor(x), tg.tensor(y))
            loss.backward()
    for (name, p), q in zip(plain.named_parameters(), wrapped.parameters()):
        np.testing.assert_array_equal(q.grad.numpy(), p.grad.numpy(), err_msg=name)
    assert net.reduction_seconds == 0.0                  # nothing was packed or reduced


@pytest.mark.parametrize("backend, device", [("mpi", "cpu"), pytest.param("nccl", "cuda", marks=[gpu, requires_gpu])])
def test_zero_1_in_a_world_of_one_steps_as_adamw(backend, device):
    """One rank holds every shard: ZeroRedundancyOptimizer's steps are AdamW's (through the backend's own
    reduce-scatter and all-gather: on a GPU, NCCL's), its clip the plain one's, its consolidated state AdamW's."""
    dist.init_process_group(backend, device=device)
    # float64: in float32 AdamW's g / sqrt(v) turns the last bits of a near-zero gradient (the clip's scale rounds
    # otherwise than the plain clip's) into visible steps
    models = [job.make_model(tg.float64, seed=0).to(dist.get_device() if backend == "nccl" else device)
              for _ in range(2)]
    plain = tg.optim.AdamW(list(models[0].parameters()), lr=1e-2, weight_decay=0.1)
    zero = ZeroRedundancyOptimizer(list(models[1].parameters()), tg.optim.AdamW, lr=1e-2, weight_decay=0.1)
    for x, y in job.global_batches():
        norms = []
        for model, optimizer in zip(models, (plain, zero)):
            optimizer.zero_grad()
            model(tg.tensor(x, device=model.lm_head.weight.device), tg.tensor(y, device=model.lm_head.weight.device)
                  )[1].backward()
            norms.append(float(clip_grad_norm_(list(model.parameters()), 0.5) if optimizer is plain
                               else optimizer.clip_grad_norm_(0.5)))
            optimizer.step()
        assert norms[1] == pytest.approx(norms[0], rel=1e-12)
    for p, q in zip(*(m.parameters() for m in models)):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-9, atol=1e-12)
        assert q.grad is None                   # handed to the shard at the step
    zero.consolidate_state_dict(to=0)
    saved, expected = zero.state_dict(), plain.state_dict()
    assert saved["param_groups"] == expected["param_groups"] and saved["state"].keys() == expected["state"].keys()
    for key, entry in expected["state"].items():
        assert saved["state"][key]["step"] == entry["step"] == job.STEPS
        np.testing.assert_allclose(saved["state"][key]["exp_avg"].numpy(), entry["exp_avg"].numpy(), rtol=1e-9,
                                   atol=1e-14)


def test_zero_1_leaves_frozen_parameters_alone_and_keeps_0_d_ones_and_empty_groups():
    dist.init_process_group("mpi")
    scalar, vector = tg.nn.Parameter(tg.ones(())), tg.nn.Parameter(tg.ones(3))
    frozen = tg.nn.Parameter(tg.ones(2)).requires_grad_(False)
    zero = ZeroRedundancyOptimizer([{"params": [scalar, vector, frozen]}, {"params": []}], tg.optim.AdamW, lr=0.1,
                                   weight_decay=0.5)
    plain = [tg.nn.Parameter(tg.ones(())), tg.nn.Parameter(tg.ones(3))]
    reference = tg.optim.AdamW(plain, lr=0.1, weight_decay=0.5)
    for params, optimizer in (((scalar, vector), zero), (plain, reference)):
        for _ in range(2):
            optimizer.zero_grad()
            (params[0] * 3 + params[1].sum() * 2).backward()
            optimizer.step()
    np.testing.assert_array_equal(frozen.numpy(), np.ones(2))          # weight decay never reached it
    np.testing.assert_allclose(scalar.numpy(), plain[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(vector.numpy(), plain[1].numpy(), rtol=1e-6)
    zero.consolidate_state_dict()
    again = ZeroRedundancyOptimizer([{"params": [scalar, vector, frozen]}, {"params": []}], tg.optim.AdamW, lr=0.1)
    again.load_state_dict(zero.state_dict())            # the 0-d parameter first: its moments are still sharded
    assert zero._consolidated is None                   # rank 0 no longer holds the whole state
    state, = again.optim.state.values()
    assert state["step"] == 2 and state["exp_avg"].shape == (4,)


def test_zero_1_refuses_what_it_cannot_shard():
    dist.init_process_group("mpi")
    model = job.make_model(tg.float32, seed=0)
    mixed = [model.lm_head.weight, tg.nn.Parameter(tg.zeros(3, dtype=tg.float64))]
    with pytest.raises(ValueError, match="share one device and dtype"):
        ZeroRedundancyOptimizer(mixed, tg.optim.AdamW)
    with pytest.raises(ValueError, match="only the default process group"):
        ZeroRedundancyOptimizer(list(model.parameters()), tg.optim.AdamW, process_group="group")
    zero = ZeroRedundancyOptimizer(list(model.parameters()), tg.optim.SGD, lr=0.1, momentum=0.9)
    with pytest.raises(RuntimeError, match="call consolidate_state_dict"):
        zero.state_dict()
    model.to(tg.float64)                        # the parameters' .data replaced: no longer the flat array's views
    model(*(tg.tensor(a) for a in next(job.global_batches())))[1].backward()
    with pytest.raises(RuntimeError, match="replaced after the optimizer was made"):
        zero.step()


# ----------------------------------------------------------------------------- two processes
def _mpiexec():
    found = shutil.which("mpiexec") or shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    if found is None:
        pytest.skip("no mpiexec on PATH (install the [dist] extra: mpi4py and the mpich wheel)")
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not importable (install the [dist] extra)")
    return found


def launch(case, out_dir, timeout=120, under_mpi4py=True):
    """Run `case` of distributed_job.py on two ranks; returns (returncode, stdout + stderr, seconds).
    On a timeout, ends the job and fails: SIGTERM first, on which mpiexec ends the ranks itself (they
    are not in its process group, so a kill aimed at it alone would leave them to its proxy)."""
    command = [_mpiexec(), "-n", "2", sys.executable, *(["-m", "mpi4py"] if under_mpi4py else []),
               JOB, case, str(out_dir)]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
    began = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            stdout, stderr = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        pytest.fail(f"{case}: the job was still running after {timeout} s\n{stdout}\n{stderr}")
    return process.returncode, stdout + stderr, time.monotonic() - began


def run_job(case, out_dir):
    returncode, output, _ = launch(case, out_dir)
    assert returncode == 0, f"{case} failed on some rank:\n{output}"
    assert sorted(p.name for p in out_dir.glob("done-*")) == ["done-0", "done-1"], output


def single_process(setup, rows=slice(None)):
    """What one process gets training on `rows` of every batch (default: all of them)."""
    dtype, optimizer = job.SETUPS[setup]
    model = job.make_model(dtype, seed=0)
    return job.train(model, job.make_optimizer(optimizer, list(model.parameters())), rows)


def relative_difference(ours, reference):
    assert ours.keys() == reference.keys()
    return max(np.abs(ours[k] - reference[k]).max() / np.abs(reference[k]).max() for k in reference)


def test_collectives_on_two_ranks(tmp_path):
    run_job("collectives", tmp_path)


def test_two_ranks_train_as_one_process_on_the_whole_batch(tmp_path):
    run_job("equivalence", tmp_path)                      # the ranks also checked they ended bitwise equal
    for setup, bound in BOUNDS.items():
        reference = single_process(setup)
        with np.load(tmp_path / f"{setup}.npz") as saved:
            ddp = dict(saved)
        assert relative_difference(ddp, reference) < bound, setup
        # Without the averaging, rank 0 would have trained on its half of each batch: far outside the bound.
        assert relative_difference(single_process(setup, rows=slice(0, job.BATCH)), reference) > 1000 * bound


def test_zero_1_on_two_ranks_matches_ddp_and_one_process(tmp_path):
    """ZeroRedundancyOptimizer (reduce-scattered gradients, AdamW's state halved, parameters all-gathered) against
    DDP with AdamW and one process with the whole batch, float64, clipped; the job also checks the state's size and
    an exact resume from a consolidated checkpoint."""
    run_job("zero", tmp_path)
    reference = single_process("float64-adamw")
    with np.load(tmp_path / "zero.npz") as zero, np.load(tmp_path / "ddp.npz") as ddp:
        zero, ddp = dict(zero), dict(ddp)
    assert relative_difference(zero, ddp) < BOUNDS["float64-adamw"]
    assert relative_difference(zero, reference) < BOUNDS["float64-adamw"]


def test_accumulating_two_micro_batches_under_no_sync_matches_the_whole_batch(tmp_path):
    run_job("accumulation", tmp_path)                     # and no_sync's backwards communicated nothing
    for setup, bound in BOUNDS.items():
        with np.load(tmp_path / f"{setup}.npz") as saved:
            ddp = dict(saved)
        assert relative_difference(ddp, single_process(setup)) < bound, setup


def test_overlap_and_bucket_size_change_no_bit_of_the_result(tmp_path):
    run_job("overlap", tmp_path)


def test_ddp_averages_again_after_a_backward_that_raised(tmp_path):
    run_job("recover", tmp_path)


def test_a_layer_used_on_one_rank_only_is_averaged_without_a_hang(tmp_path):
    run_job("unused", tmp_path)


def test_a_dropped_wrapper_goes_with_its_hooks(tmp_path):
    run_job("dropped_wrapper", tmp_path)


def test_abort_job_before_any_group_ends_every_rank(tmp_path):
    returncode, output, seconds = launch("abort_before_a_group", tmp_path, timeout=30, under_mpi4py=False)
    assert returncode == 2, output
    assert seconds < 30


def test_an_exception_on_one_rank_ends_the_job_and_names_the_rank(tmp_path):
    # Plain python, not -m mpi4py: the library's own handler must abort the job, since rank 0 is
    # waiting in a reduction that rank 1 will never join.
    returncode, output, seconds = launch("raise", tmp_path, timeout=30, under_mpi4py=False)
    assert returncode != 0, output
    assert "rank 1 of 2 failed (PlannedFailure)" in output, output
    assert "rank 1 fails here on purpose" in output, output          # the traceback is printed too
    assert "rank 0 of 2 failed" not in output, output
    assert not list(tmp_path.glob("done-*"))
    assert seconds < 30
