"""Data-parallel training on the CPU: what a second rank buys, and what averaging the gradients costs.

    python benchmarks/data_parallel.py              # the CPU recipe, 1 rank then 2 ranks (about a minute)
    python benchmarks/data_parallel.py --quick      # a tiny model, two steps: checks that it runs
    python benchmarks/data_parallel.py --nccl       # on a GPU machine: the nccl backend, a world of one

The model is the CPU recipe's (tinygrad_gpu/train/config.py's defaults: a GPT of 4 layers, 4 heads,
n_embd 128, block 64, no biases, batch 12 per rank) on the built-in corpus, trained by
tinygrad_gpu.train.loop.training_step (forward, backward, clipping at 1.0, AdamW) as
examples/train_charlm.py trains it. The script starts itself as the workers of three jobs,
`mpiexec -n 1`, `mpiexec -n 2` and `mpiexec -n 1` again (under `python -m mpi4py`, so a rank that
fails ends its job), each rank with one BLAS/OpenMP thread, so that a rank is one core. Every rank
draws the same windows and trains on its own 12 (train/ranks.py), so two ranks process 24 windows
per step and their tokens/s counts both. Rank 0 writes the job's results to a file that this
process reads.

The 1-rank jobs train the plain model (a world of one communicates nothing, so training uses no
DistributedDataParallel there); their row pools the steps of both, one job before the 2-rank job
and one after it, so that a machine whose speed drifts moves the ratio less. The 2-rank job trains
three copies, taking turns (--rounds) so that the drift spreads over all of them:

  default      DistributedDataParallel(model): 25 MiB buckets, which hold this model's gradients
               in one bucket; that bucket can only start once backward is over. What training runs.
  overlap      buckets of a --buckets'th of the gradients, each reduced as soon as backward has
               finished its parameters, while backward goes on with the earlier layers.
  no overlap   the same buckets, all started once backward is over (overlap=False).

A step's time is the slowest rank's (each step ends in a collective, so the ranks move together),
and the table shows the median, with the 10th and 90th percentiles. "CPU ms" is the processor time
a rank used per step (median, mean over the ranks): well below ms/step, the rank waited for a core
that other processes held (MPI's waits spin, so they count as processor time). "reducing" is DDP's
reduction_seconds per step: packing, reducing, waiting for the other rank and unpacking; "share" is
that over the rank's own step time (the mean over the ranks).

The last part times averaging the gradients alone, with backward's gradients in place: DDP's
reduce_gradients() (one bucket, and the overlap copy's several) against MPI's own in-place
Allreduce (mpi4py) of one float32 buffer with as many bytes, taking turns, each after a barrier;
the slowest rank's median time counts. The ratio is what our packing, averaging and unpacking add.

The ratio lines at the end compare figures from this run only. The machine's other processes make
them noisy (the load average is printed): on a 2-core machine that others share, the second rank
competes with them for the second core. Without mpiexec (pip install 'tinygrad_gpu[dist]') the
script says so and exits with status 2.

--nccl, for a GPU machine, runs without mpiexec (a world of one on cuda:0): init_process_group("nccl"),
then checks that all_reduce (SUM, AVG, MAX, MIN), broadcast and barrier give the right values on cuda
tensors, and that a few DistributedDataParallel training steps give the gradients, and so the weights,
of the same model trained without it (over one rank the mean of the gradients is the gradient itself),
timing both. One line per check; the exit status is 1 on a mismatch. Without a GPU it prints one line
saying why it skipped and exits with status 0.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))             # run from a checkout without installing
sys.path.append(str(HERE))                # bench_device

import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu import device as devices  # noqa: E402
from tinygrad_gpu import distributed as dist  # noqa: E402
from tinygrad_gpu.train.config import TrainConfig  # noqa: E402

RECIPE = TrainConfig()                    # the CPU recipe: the defaults of examples/train_charlm.py
QUICK = dict(n_layer=1, n_head=2, n_embd=32, block_size=16, batch_size=4, steps=2, warmup=1, rounds=1, repeats=3)
VARIANTS = ("default", "overlap", "no overlap")       # the 2-rank job's copies of the model
ONE_THREAD = dict(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
JOB_TIMEOUT_S = 600
SCRIPT = "benchmarks/data_parallel.py"


# ============================================================================= in a worker (a rank)
def make_model(args, vocab_size: int, device: str = "cpu"):
    from tinygrad_gpu.nn import GPT, GPTConfig
    tg.manual_seed(args.seed)             # every copy, on every rank, starts from the same weights
    config = GPTConfig(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, block_size=args.block_size,
                       vocab_size=vocab_size, dropout=0.0, bias=RECIPE.bias)
    return GPT(config).to(device)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def gradient_bytes(model) -> int:
    return sum(p.numel() * p.dtype.itemsize for p in model.parameters() if p.requires_grad)


class Copy:
    """One copy of the model that a job trains: its wrapper (or the bare model), optimizer and batches."""

    def __init__(self, name: str, args, ddp_model, model):
        self.name, self.ddp_model, self.model = name, ddp_model, model
        self.optimizer = model.configure_optimizers(RECIPE.weight_decay, RECIPE.lr, (RECIPE.beta1, RECIPE.beta2))
        self.rng = np.random.default_rng(args.seed)     # each copy sees the same windows, on every rank
        self.times, self.reducing, self.cpu = [], [], []

    def step(self, ranks, dataset, batch_size: int, record: bool) -> None:
        from tinygrad_gpu.train.loop import training_step
        batches = ranks.batches(dataset, "train", batch_size, self.rng)
        reduced = getattr(self.ddp_model, "reduction_seconds", 0.0)
        start, cpu = time.perf_counter(), time.process_time()
        loss, _ = training_step(self.ddp_model, self.optimizer, batches, RECIPE.grad_clip)
        loss.item()
        elapsed = time.perf_counter() - start
        if record:
            self.times.append(elapsed)
            self.cpu.append(time.process_time() - cpu)
            self.reducing.append(getattr(self.ddp_model, "reduction_seconds", 0.0) - reduced)

    def fingerprint(self) -> str:
        """A digest of every weight: equal on all ranks when the copies took the same steps."""
        digest = hashlib.sha256()
        for p in self.model.parameters():
            digest.update(p.numpy().tobytes())
        return digest.hexdigest()


def worker(args) -> dict:
    """One rank of a job: train the job's copies in turns, then (on 2 ranks) time the reductions alone."""
    from tinygrad_gpu.data import TextDataset, load_corpus
    from tinygrad_gpu.nn.parallel import DistributedDataParallel
    from tinygrad_gpu.train.ranks import Ranks

    tg.set_default_device("cpu")
    ranks = Ranks("cpu", "mpi")                         # joins the job's group, as training does
    ranks.share_micro_batches(TrainConfig())             # one micro-batch per rank
    dataset = TextDataset(load_corpus("builtin"), args.block_size)
    vocab = dataset.tokenizer.vocab_size
    total_bytes = gradient_bytes(make_model(args, vocab))
    small_buckets_mb = total_bytes / args.buckets / 2**20
    if ranks.communicates:
        copies = []
        for name in VARIANTS:
            model = make_model(args, vocab)
            ddp_model = DistributedDataParallel(model) if name == "default" else \
                DistributedDataParallel(model, bucket_cap_mb=small_buckets_mb, overlap=name == "overlap")
            copies.append(Copy(name, args, ddp_model, model))
    else:
        model = make_model(args, vocab)
        copies = [Copy("none", args, model, model)]

    for copy in copies:
        for _ in range(args.warmup):
            copy.step(ranks, dataset, args.batch_size, record=False)
    for round_steps in np.array_split(np.arange(args.steps), args.rounds):
        for copy in copies:
            for _ in round_steps:
                copy.step(ranks, dataset, args.batch_size, record=True)

    result = dict(world_size=ranks.world_size, vocab_size=vocab, gradient_bytes=total_bytes,
                  params=sum(p.numel() for p in copies[0].model.parameters()), rows=[])
    for copy in copies:             # each rank's seconds per step; the parent sums them up
        result["rows"].append(dict(
            name=copy.name, ranks=ranks.world_size, buckets=len(getattr(copy.ddp_model, "buckets", [])),
            overlap=getattr(copy.ddp_model, "overlap", None), times=ranks.gather(copy.times),
            cpu=ranks.gather(copy.cpu), reducing=ranks.gather(copy.reducing) if ranks.communicates else None,
            replicas_identical=len(set(ranks.gather(copy.fingerprint()))) == 1))
    if ranks.communicates:
        by_name = {copy.name: copy.ddp_model for copy in copies}
        result["reduction"] = time_reductions(by_name["default"], by_name["overlap"], total_bytes, args.repeats,
                                              ranks)
    return result


def time_reductions(one_bucket, several, nbytes: int, repeats: int, ranks) -> list:
    """Median time (the slowest rank's) of DDP.reduce_gradients() against MPI's Allreduce of as many bytes.

    The copies hold the gradients of their last backward. Averaging them again leaves them equal
    on all ranks, so repeats reduce real gradients without changing what the next repeat sees."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    raw = np.zeros(nbytes // 4, dtype=np.float32)     # zeros: repeated sums stay finite
    methods = [(f"DDP.reduce_gradients, {plural(len(ddp.buckets), 'bucket')}", ddp.reduce_gradients)
               for ddp in (one_bucket, several)]
    methods.append(("MPI Allreduce, one float32 buffer", lambda: comm.Allreduce(MPI.IN_PLACE, raw, op=MPI.SUM)))
    seconds = {name: [] for name, _ in methods}
    for i in range(repeats + 1):                      # the first round warms up
        for name, reduce in methods:
            comm.Barrier()                            # both ranks start together: no wait for a late one
            start = time.perf_counter()
            reduce()
            if i:
                seconds[name].append(time.perf_counter() - start)
    rows = []
    for name, _ in methods:
        slowest = np.max(np.array(ranks.gather(seconds[name])), axis=0)
        rows.append(dict(name=name, ms=float(np.median(slowest)) * 1e3, bytes=nbytes))
    return rows


# ============================================================================= in the parent
def find_mpiexec():
    """mpiexec, or None after saying what is missing."""
    found = shutil.which("mpiexec") or shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    if found is None:
        print(f"{SCRIPT}: no mpiexec on PATH; install the [dist] extra (mpi4py and the mpich wheel)")
    elif importlib.util.find_spec("mpi4py") is None:
        print(f"{SCRIPT}: mpi4py is not importable; install the [dist] extra")
        found = None
    return found


def run_job(mpiexec: str, ranks: int, argv: list, result: str) -> dict:
    """Start `ranks` workers of this script under mpiexec and return rank 0's results (written to `result`)."""
    command = [mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py", __file__, *argv, "--worker", result]
    env = dict(os.environ, **ONE_THREAD,
               PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    # A session of its own, so that a job that hangs can be ended whole, mpiexec and its ranks together.
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        raise RuntimeError(f"the {ranks}-rank job was still running after {JOB_TIMEOUT_S} s:\n{output[-3000:]}")
    if process.returncode != 0 or not os.path.exists(result):
        raise RuntimeError(f"the {ranks}-rank job failed (exit status {process.returncode}):\n{output[-3000:]}")
    with open(result) as f:
        return json.load(f)


def summarise(row: dict, tokens_per_rank_step: int) -> dict:
    """The table's figures from a row's seconds per step, a list per rank."""
    slowest = np.max(np.array(row["times"]), axis=0)      # a step is over when its last rank is done
    step = float(np.median(slowest))
    row.update(step_ms=step * 1e3, step_ms_p10_p90=[float(np.percentile(slowest, q)) * 1e3 for q in (10, 90)],
               tokens_per_s=row["ranks"] * tokens_per_rank_step / step,
               cpu_ms=statistics.mean(map(statistics.median, row["cpu"])) * 1e3, reducing_ms=None, share=None)
    if row["reducing"] is not None:
        row.update(reducing_ms=statistics.mean(map(statistics.mean, row["reducing"])) * 1e3,
                   share=statistics.mean(sum(red) / sum(own) for red, own in zip(row["reducing"], row["times"])))
    return row


def pooled(rows: list) -> dict:
    """One row from the same copy's rows of several jobs: their steps together."""
    row = dict(rows[0])
    for key in ("times", "cpu"):
        row[key] = [sum(columns, []) for columns in zip(*(r[key] for r in rows))]
    row["replicas_identical"] = all(r["replicas_identical"] for r in rows)
    return row


def describe_row(row: dict) -> str:
    if row["ranks"] == 1:
        return "none (one process)"
    overlap = "overlap" if row["overlap"] else "no overlap"
    cap = "25 MiB buckets" if row["name"] == "default" else "small buckets"
    return f"{cap} ({row['buckets']}), {overlap}"


def print_report(args, ones: list, two: dict, load: tuple) -> dict:
    one = ones[0]
    rows = [summarise(row, args.batch_size * args.block_size)
            for row in [pooled([job["rows"][0] for job in ones]), *two["rows"]]]
    print(f"GPT {args.n_layer} layers, {args.n_head} heads, n_embd {args.n_embd}, block {args.block_size}, "
          f"vocabulary {one['vocab_size']} (built-in corpus): {one['params']:,} parameters, "
          f"{one['gradient_bytes'] / 2**20:.2f} MiB of gradients; batch {args.batch_size} per rank, cpu, one BLAS "
          f"thread per rank; {args.steps} timed steps per row (+{args.warmup} warm-up) in {plural(args.rounds, 'turn')}, "
          f"the 1-rank row {len(ones)} x {args.steps} (a job before and one after the 2-rank job)")
    print(f"{'ranks':<6}{'DDP':<32}{'ms/step':>9}{'(p10-p90)':>13}{'CPU ms':>8}{'tokens/s':>10}{'reducing ms':>13}"
          f"{'share':>7}")
    for row in rows:
        low, high = row["step_ms_p10_p90"]
        reducing = "-" if row["reducing_ms"] is None else f"{row['reducing_ms']:.1f}"
        share = "-" if row["share"] is None else f"{row['share']:.3f}"
        print(f"{row['ranks']:<6}{describe_row(row):<32}{row['step_ms']:9.1f}{f'({low:.0f}-{high:.0f})':>13}"
              f"{row['cpu_ms']:8.1f}{row['tokens_per_s']:10,.0f}{reducing:>13}{share:>7}")
    print(f"averaging the gradients alone ({two['gradient_bytes'] / 2**20:.2f} MiB, 2 ranks, median of "
          f"{args.repeats}, slowest rank):")
    for row in two["reduction"]:
        print(f"  {row['name']:<40}{row['ms']:8.2f} ms")
    base, named = rows[0], {row["name"]: row for row in rows[1:]}
    raw = two["reduction"][-1]["ms"]
    ratios = dict(two_vs_one=named["default"]["tokens_per_s"] / base["tokens_per_s"],
                  overlap_vs_not=named["overlap"]["step_ms"] / named["no overlap"]["step_ms"],
                  ours_vs_mpi=[row["ms"] / raw for row in two["reduction"][:-1]])
    print(f"ratio 2 ranks : 1 rank tokens/s: {ratios['two_vs_one']:.2f}x (2.00x would be perfect scaling)")
    print(f"ratio overlap : no overlap step time ({named['overlap']['buckets']} buckets): "
          f"{ratios['overlap_vs_not']:.2f}x (below 1: overlapping pays)")
    print("ratio DDP.reduce_gradients : MPI Allreduce of the same bytes: "
          + ", ".join(f"{r:.2f}x ({row['name'].split(', ')[1]})"
                      for r, row in zip(ratios["ours_vs_mpi"], two["reduction"])))
    print(f"load average (1 min) {load[0]:.2f} at the start, {load[1]:.2f} at the end, on {os.cpu_count()} cores: "
          "other processes make these timings noisy")
    return dict(rows=rows, reduction=two["reduction"], ratios=ratios, load_average=list(load),
                settings={k: getattr(args, k) for k in ("n_layer", "n_head", "n_embd", "block_size", "batch_size",
                                                         "steps", "warmup", "rounds", "repeats", "buckets")})


def measure(args, argv: list) -> int:
    mpiexec = find_mpiexec()
    if mpiexec is None:
        return 2
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tg-data-parallel-") as folder:
        results = []
        # The baseline runs before and after the 2-rank job: a machine whose speed drifts during the run
        # then moves the ratio less.
        for number, ranks in enumerate((1, 2, 1)):
            print(f"running {plural(ranks, 'rank')} ...", flush=True)
            try:
                results.append(run_job(mpiexec, ranks, argv, os.path.join(folder, f"job-{number}.json")))
            except RuntimeError as e:
                print(f"{SCRIPT}: {e}", file=sys.stderr)
                return 1
    report = print_report(args, [results[0], results[2]], results[1], (load_start, os.getloadavg()[0]))
    diverged = [row["name"] for row in report["rows"] if not row["replicas_identical"]]
    if diverged:
        print(f"error: the ranks' weights differ after training ({', '.join(diverged)}): the copies did not take "
              "the same steps", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if diverged else 0


# ============================================================================= --nccl, on a GPU
class Checks:
    """Prints a line per check and remembers whether any failed."""

    def __init__(self):
        self.failed = self.count = 0

    def __call__(self, what: str, ok: bool, detail: str = "") -> bool:
        self.count += 1
        self.failed += not ok
        print(f"{what}: {'ok' if ok else 'MISMATCH'}{f' ({detail})' if detail else ''}", flush=True)
        return ok


def relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    scale = float(np.max(np.abs(b))) or 1.0
    return float(np.max(np.abs(a - b))) / scale


def nccl_skip_reason():
    """Why --nccl cannot run here (None: it can)."""
    if not tg.cuda_available():
        return f"no GPU ({devices.cuda_problem()})"
    if devices.cupy().__name__ == devices.STANDIN:
        return "the CuPy stand-in (TINYGRAD_GPU_CUPY=standin) has no NCCL"
    return None


def nccl_check(args) -> int:
    reason = nccl_skip_reason()
    if reason is not None:
        print(f"{SCRIPT} --nccl: skipped: {reason}")
        return 0
    if dist.launched_by_mpiexec():
        print(f"{SCRIPT} --nccl: checks a world of one; run it without mpiexec", file=sys.stderr)
        return 2
    try:
        dist.init_process_group("nccl")
    except RuntimeError as e:           # a GPU, but no NCCL library: the check cannot run, and it should
        print(f"init_process_group('nccl'): FAILED ({e})")
        return 1
    try:
        device, cupy = f"cuda:{dist.get_node_local_rank()}", devices.cupy()
        try:
            nccl_version = importlib.import_module(cupy.__name__ + ".cuda.nccl").get_version()
        except Exception:               # the version is only shown
            nccl_version = "?"
        gpu = cupy.cuda.runtime.getDeviceProperties(dist.get_node_local_rank())["name"].decode()
        print(f"{SCRIPT} --nccl: a world of {dist.get_world_size()} on {device} ({gpu}), NCCL {nccl_version}",
              flush=True)
        return collective_checks(args, device)
    finally:
        dist.destroy_process_group()


def collective_checks(args, device: str) -> int:
    """The checks of --nccl on `device`, in the process group already made (a world of one)."""
    import bench_device
    from tinygrad_gpu.data import TextDataset, load_corpus
    from tinygrad_gpu.nn.parallel import DistributedDataParallel
    from tinygrad_gpu.train.loop import training_step

    sync = bench_device.synchronizer(device)
    tg.set_default_device("cpu")        # the models are made on the host, then moved: the same weights for both
    check = Checks()

    # Collectives: over one rank each reduction, and a broadcast from it, leaves the values as they were.
    values = {"float32": np.array([[1.5, -2.25, 3.0], [0.125, 7.0, -0.5]], dtype=np.float32),
              "int32": np.array([[3, -1, 7], [0, 12, -5]], dtype=np.int32)}
    with devices.use(device):
        for dtype, array in values.items():
            for op in dist.ReduceOp:
                if op is dist.ReduceOp.AVG and dtype == "int32":
                    continue            # AVG is for floating point (all_reduce refuses it)
                t = tg.tensor(array, device=device)
                dist.all_reduce(t, op)
                check(f"all_reduce {op.name} {dtype}", np.array_equal(t.numpy(), array))
        t = tg.tensor(values["float32"], device=device)
        dist.all_reduce(t, dist.ReduceOp.SUM, async_op=True).wait()
        check("all_reduce SUM float32 async_op=True", np.array_equal(t.numpy(), values["float32"]))
        t = tg.tensor(values["float32"], device=device)
        dist.broadcast(t, src=0)
        check("broadcast src=0", np.array_equal(t.numpy(), values["float32"]))
        start = time.perf_counter()
        dist.barrier()
        check("barrier", True, f"returned in {(time.perf_counter() - start) * 1e3:.2f} ms")

        # DDP against the bare model: same weights, same batches, the same AdamW steps.
        dataset = TextDataset(load_corpus("builtin"), args.block_size, device=device)
        vocab = dataset.tokenizer.vocab_size
        plain, wrapped = make_model(args, vocab, device), make_model(args, vocab, device)
        ddp = DistributedDataParallel(wrapped, bucket_cap_mb=gradient_bytes(wrapped) / args.buckets / 2**20)
        ddp_models = {"ddp": (ddp, wrapped.configure_optimizers(RECIPE.weight_decay, RECIPE.lr,
                                                              (RECIPE.beta1, RECIPE.beta2))),
                    "plain": (plain, plain.configure_optimizers(RECIPE.weight_decay, RECIPE.lr,
                                                                (RECIPE.beta1, RECIPE.beta2)))}
        rng = np.random.default_rng(args.seed)
        seconds, worst = {"ddp": [], "plain": []}, 0.0
        for step in range(args.warmup + args.steps):
            x, y = dataset.batch("train", args.batch_size, rng)
            order = ("ddp", "plain") if step % 2 else ("plain", "ddp")     # neither always goes first
            for name in order:
                ddp_model, optimizer = ddp_models[name]
                sync()
                start = time.perf_counter()
                training_step(ddp_model, optimizer, [(x, y)], RECIPE.grad_clip)
                sync()
                if step >= args.warmup:
                    seconds[name].append(time.perf_counter() - start)
            for (name, p), q in zip(plain.named_parameters(), wrapped.parameters()):
                worst = max(worst, relative_difference(q.grad.numpy(), p.grad.numpy()))
        steps = args.warmup + args.steps
        # The same kernels on the same inputs: the gradients should agree bit for bit; a few units in
        # the last place are allowed in case a library picks another algorithm for one of the two.
        check(f"DDP gradients = plain gradients over {steps} steps, {len(ddp.buckets)} buckets", worst <= 1e-6,
              f"largest difference {worst:.3g} of the tensor's largest gradient")
        weights = max(relative_difference(q.numpy(), p.numpy())
                      for p, q in zip(plain.parameters(), wrapped.parameters()))
        check(f"DDP weights = plain weights after {steps} steps", weights <= 1e-5, f"largest difference {weights:.3g}")
    ddp_ms, plain_ms = (statistics.median(seconds[name]) * 1e3 for name in ("ddp", "plain"))
    print(f"step time, median of {args.steps}: DDP {ddp_ms:.2f} ms, plain {plain_ms:.2f} ms; ratio DDP : plain "
          f"{ddp_ms / plain_ms:.2f}x (DDP's reduction_seconds {ddp.reduction_seconds / steps * 1e3:.2f} ms/step)")
    print(f"nccl: {check.count - check.failed} of {check.count} checks passed")
    return 1 if check.failed else 0


# ============================================================================= arguments
def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-layer", type=int, default=RECIPE.n_layer)
    parser.add_argument("--n-head", type=int, default=RECIPE.n_head)
    parser.add_argument("--n-embd", type=int, default=RECIPE.n_embd)
    parser.add_argument("--block-size", type=int, default=RECIPE.block_size)
    parser.add_argument("--batch-size", type=int, default=RECIPE.batch_size, help="windows per rank per step")
    parser.add_argument("--steps", type=int, default=30, help="timed training steps per row (the median counts)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed training steps first, per row")
    parser.add_argument("--rounds", type=int, default=6, help="the 2-rank copies take turns this many times")
    parser.add_argument("--repeats", type=int, default=50, help="timed reductions of each kind")
    parser.add_argument("--buckets", type=int, default=4, help="the overlap rows cut the gradients into about "
                                                               "this many buckets")
    parser.add_argument("--seed", type=int, default=RECIPE.seed)
    parser.add_argument("--quick", action="store_true", help="1 layer, n_embd 32, block 16, batch 4, two steps: "
                                                             "a check that it runs")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--nccl", action="store_true", help="check the nccl backend on a GPU (a world of one)")
    parser.add_argument("--worker", metavar="RESULT", help=argparse.SUPPRESS)    # set for the ranks
    args = parser.parse_args(argv)
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    if min(args.steps, args.rounds, args.repeats, args.buckets, args.batch_size) < 1 or args.warmup < 0 \
            or args.rounds > args.steps:
        parser.error("--steps, --rounds, --repeats, --buckets and --batch-size must be at least 1, --warmup at "
                     "least 0, and --rounds at most --steps")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.nccl:
        return nccl_check(args)
    if args.worker:
        result = worker(args)
        if dist.get_rank() == 0:
            with open(args.worker, "w") as f:
                json.dump(result, f)
        return 0
    return measure(args, argv)


if __name__ == "__main__":
    sys.exit(main())
