"""Peak memory per process of a training step, and what each way of saving memory costs in time.

    python benchmarks/memory.py                          # GPT-2 small's shape, block 256, batch 2, cpu
    python benchmarks/memory.py --budget-mb 4000         # and the largest batch x block within 4000 MB
    python benchmarks/memory.py --config gpt             # the default run's GPT (train_charlm.py's shape)

Each variant runs in its own process (its peak is its own; the two-rank ones under `mpiexec -n 2`, each
rank one thread, the peak of the larger rank): a GPT with random weights, AdamW, the same batches, the
training loop's own step (train/loop.py training_step):

    float32        the plain step
    bfloat16       the forward under bfloat16 autocast (the parameters, gradients and AdamW's state float32)
    checkpointing  each block's activations recomputed in backward (tg.utils.checkpoint)
    DDP x2         two ranks, DistributedDataParallel: every rank holds all of AdamW's state
    ZeRO-1 x2      two ranks, ZeroRedundancyOptimizer: each holds half of it
    LoRA           rank-8 adapters on attention, the rest frozen (nn/lora.py)

and their useful combinations. "peak MB" is the process's resident high-water mark (VmHWM) from the warm-up
step on (on Linux it is reset after the model and optimizer are made; elsewhere it counts from the process's
start), "start MB" the resident memory then (the model, the imports), and "state MB" the optimizer's state on
that process. The package keeps freed memory in the process (device.py's malloc tuning: without it a
GPT-2-sized float32 step took 15.6 s here against 3.6 s with it, page-faulting in fresh memory for every
temporary), so the
resident size after the warm-up step is about that step's peak, and the peak of later steps adds to it only
what they need beyond.
The time per step is the median after a warm-up step; checkpointing's extra forward shows there.
Ratios at the end are against float32 (and ZeRO-1 against DDP), measured in this run.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from step import host_memory_mb  # noqa: E402

SHAPES = {"gpt2": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, bias=True),
          "gpt": dict(n_layer=4, n_head=4, n_embd=128, vocab_size=96, bias=False)}
# name: (dtype, checkpointing, ranks, optimizer sharding, LoRA)
VARIANTS = {
    "float32": ("float32", False, 1, False, False),
    "bfloat16": ("bfloat16", False, 1, False, False),
    "checkpointing": ("float32", True, 1, False, False),
    "bf16+ckpt": ("bfloat16", True, 1, False, False),
    "DDP x2": ("float32", False, 2, False, False),
    "ZeRO-1 x2": ("float32", False, 2, True, False),
    "ZeRO-1+ckpt x2": ("float32", True, 2, True, False),
    "LoRA": ("float32", False, 1, False, True),
    "LoRA+ckpt": ("float32", True, 1, False, True),
}


def worker(args) -> dict:
    import tinygrad_gpu as tg
    from tinygrad_gpu import distributed
    from tinygrad_gpu.nn import GPT, GPTConfig, lora
    from tinygrad_gpu.nn.parallel import DistributedDataParallel
    from tinygrad_gpu.train.loop import sharded, training_step
    from tinygrad_gpu.train.precision import Precision

    dtype, checkpointing, ranks, sharding, low_rank = VARIANTS[args.variant]
    if ranks > 1:
        distributed.init_process_group("mpi")
    tg.manual_seed(0)
    model = GPT(GPTConfig(**SHAPES[args.config], block_size=args.block_size, dropout=0.0)).to(args.device)
    if low_rank:
        lora.apply_lora(model, rank=8, alpha=16)
    if checkpointing:
        model.gradient_checkpointing_enable()
    optimizer = model.configure_optimizers(0.1, 1e-4, (0.9, 0.95))
    ddp_model = model
    if sharding:
        optimizer = sharded(optimizer)
    elif ranks > 1:
        ddp_model = DistributedDataParallel(model)
    precision = Precision.for_run(dtype, args.device)
    vocab = SHAPES[args.config]["vocab_size"]
    rng = np.random.default_rng(0)
    start_mb, times = host_memory_mb("VmRSS"), []
    _reset_peak()                       # the steps' peak, not the imports' or the model's making
    for i in range(1 + args.steps):
        ids = rng.integers(0, vocab, (args.batch_size, args.block_size + 1))
        x, y = tg.tensor(ids[:, :-1], device=args.device), tg.tensor(ids[:, 1:], device=args.device)
        began = time.perf_counter()
        loss, _ = training_step(ddp_model, optimizer, [(x, y)], 1.0, precision)
        loss.item()                     # the step's work is done once its loss can be read
        if i:
            times.append(time.perf_counter() - began)
    state = optimizer.optim.state if sharding else optimizer.state
    row = {"params": sum(p.numel() for p in model.parameters()),
           "trained": sum(p.numel() for p in model.parameters() if p.requires_grad),
           "s_per_step": float(np.median(times)), "peak_mb": host_memory_mb(), "start_mb": start_mb,
           "state_mb": sum(v.nbytes for s in state.values() for v in s.values() if hasattr(v, "nbytes")) / 2**20,
           "loss": float(loss.item())}
    if ranks > 1:                       # the larger rank's memory, rank 0's time
        rows = [None] * ranks
        distributed.all_gather_object(rows, row)
        row = {**row, **{key: max(r[key] for r in rows) for key in ("peak_mb", "start_mb", "state_mb")}}
    return row


def _reset_peak() -> None:
    """Start VmHWM afresh at the current resident size (Linux: writing 5 to clear_refs); elsewhere the peak
    counts from the process's start."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def mpiexec():
    return shutil.which("mpiexec") or shutil.which("mpiexec", path=os.path.dirname(sys.executable))


def measure(argv: list, variant: str, batch_size: int = None) -> dict:
    """One variant in a process of its own (two under mpiexec); None where mpiexec is missing."""
    ranks = VARIANTS[variant][2]
    command = [sys.executable, os.path.abspath(__file__), *argv, "--variant", variant]
    if batch_size is not None:
        command += ["--batch-size", str(batch_size)]
    env = dict(os.environ)
    if ranks > 1:
        if mpiexec() is None:
            return None
        command = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", *command[1:]]
        env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1")   # a core each
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def largest_batch(argv: list, variant: str, budget_mb: float, known: dict, max_batch: int) -> tuple:
    """The largest batch (at --block-size, up to `max_batch`) whose step peaks within `budget_mb`, each tried in
    a process of its own: batches 1, 2, 4, ... until one does not fit, then halving the gap between the largest
    that fits and the smallest that does not. (The resident peak is not linear enough in the batch to predict
    from two points.) `known`: rows measured already, by batch. Returns (batch, its row), or (0, None) when even
    batch 1 does not fit."""
    def fits(batch):
        if batch not in known:
            known[batch] = measure(argv, variant, batch)
        return known[batch]["peak_mb"] <= budget_mb

    if not fits(1):
        return 0, None
    good, bad = 1, None
    while bad is None and good < max_batch:
        trial = min(2 * good, max_batch)
        good, bad = (trial, None) if fits(trial) else (good, trial)
    while bad is not None and bad - good > 1:
        middle = (good + bad) // 2
        good, bad = (middle, bad) if fits(middle) else (good, middle)
    return good, known[good]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", choices=sorted(SHAPES), default="gpt2",
                   help="gpt2: GPT-2 small's shape (124M parameters); gpt: train_charlm.py's default GPT")
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up step")
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", help="comma-separated variants (default: all)")
    p.add_argument("--budget-mb", type=float, help="also find the largest batch x block that trains within this "
                   "many MB, for float32, checkpointing and bf16+ckpt")
    p.add_argument("--max-batch", type=int, default=64, help="the largest batch the budget's search tries")
    p.add_argument("--variant", choices=sorted(VARIANTS), help=argparse.SUPPRESS)     # set in the workers
    argv = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args(argv)
    if args.variant:
        row = worker(args)
        if int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", 0))) == 0:
            print(json.dumps(row))
        return
    passed = _without_values(argv, ("--budget-mb", "--only", "--max-batch"))
    names = args.only.split(",") if args.only else list(VARIANTS)
    rows = {name: measure(passed, name) for name in names}
    shape = SHAPES[args.config]
    print(f"GPT ({args.config}): {shape['n_layer']} layers, n_embd {shape['n_embd']}, vocabulary "
          f"{shape['vocab_size']}; block {args.block_size}, batch {args.batch_size} per process, {args.device}, "
          f"median of {args.steps} steps")
    print(f"{'':15} {'trained':>12} {'s/step':>8} {'peak MB':>9} {'start MB':>9} {'state MB':>9} {'loss':>8}")
    for name, r in rows.items():
        if r is None:
            print(f"{name:15} skipped: no mpiexec (the [dist] extra)")
            continue
        print(f"{name:15} {r['trained']:>12,} {r['s_per_step']:>8.2f} {r['peak_mb']:>9.0f} {r['start_mb']:>9.0f} "
              f"{r['state_mb']:>9.1f} {r['loss']:>8.4f}")
    base = rows.get("float32")
    if base:
        for name, r in rows.items():
            if r is not None and name != "float32" and VARIANTS[name][2] == 1:
                print(f"{name} / float32: peak {r['peak_mb'] / base['peak_mb']:.2f}x, peak above start "
                      f"{_above(r) / _above(base):.2f}x, time {r['s_per_step'] / base['s_per_step']:.2f}x")
    if rows.get("DDP x2") and rows.get("ZeRO-1 x2"):
        ddp, zero = rows["DDP x2"], rows["ZeRO-1 x2"]
        print(f"ZeRO-1 x2 / DDP x2: optimizer state per process {zero['state_mb'] / ddp['state_mb']:.2f}x, peak "
              f"{zero['peak_mb'] / ddp['peak_mb']:.2f}x, time {zero['s_per_step'] / ddp['s_per_step']:.2f}x")
    if args.budget_mb:
        for name in ("float32", "checkpointing", "bf16+ckpt"):
            known = {args.batch_size: rows[name]} if rows.get(name) else {}
            batch, row = largest_batch(passed, name, args.budget_mb, known, args.max_batch)
            print(f"within {args.budget_mb:.0f} MB, {name}: " + (
                f"batch {batch} x block {args.block_size} = {batch * args.block_size:,} tokens per step "
                f"(measured peak {row['peak_mb']:.0f} MB, {row['s_per_step']:.2f} s/step)" if batch
                else "not even batch 1") + (" (--max-batch)" if batch == args.max_batch else ""))


def _above(row) -> float:
    return max(row["peak_mb"] - row["start_mb"], 1e-9)


def _without_values(argv: list, flags: tuple) -> list:
    """argv without `flags` and their values (the workers measure one variant at one batch)."""
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in flags:
            skip = True
        elif not any(a.startswith(flag + "=") for flag in flags):
            kept.append(a)
    return kept


if __name__ == "__main__":
    main()
