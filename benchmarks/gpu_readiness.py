"""Does a GPT training step keep a GPU busy? Count what it asks of the host, step by step.

    python benchmarks/gpu_readiness.py                   # CPU recipe and GPU config, on the CuPy stand-in
    python benchmarks/gpu_readiness.py --config cpu --steps 3
    python benchmarks/gpu_readiness.py --real            # on a real GPU, with CuPy
    python benchmarks/gpu_readiness.py --dtype bfloat16  # the step under autocast (float16: with a GradScaler)

A GPU runs ahead of the host only while the host does not wait for it. Every host sync (a
value read back: ``.item()``, ``float()``, ``.get()``, a boolean mask) stops the host until
the GPU has finished everything queued, so a step with one sync cannot overlap Python's work
with the GPU's. The step measured is ``train.loop.training_step`` (forward, cross-entropy,
backward, clip_grad_norm_(1.0), AdamW), the one examples/train_charlm.py runs, on batches
cut on the device as the loop cuts them.

On the stand-in (``TINYGRAD_GPU_CUPY=standin``, set here unless --real) the table shows per
step: host syncs, bytes each way, kernel launches (ours in brackets), allocations and
kernel-function lookups, and where each sync came from. The loss is read once, after the
last step, as a log line would (not counted). ``--dtype bfloat16`` or ``float16`` runs each
step's forward under autocast, as ``train_charlm.py --dtype`` does; float16 adds the GradScaler,
and its second step gets an overflow (an inf written into one gradient as backward finishes), so
that the skipped step, decided on the device, is counted too. Under the table: the last step's
launches and allocations by op (file and function) and by line, each counted where the op asked
for it (a launch of our kernel at the fused op that ran it). The output ends with three lines a
script can read: ``host syncs per step: N`` (the most any step made), ``launches per step: N`` and
``allocations per step: N`` (the most any step after the first made, which also builds AdamW's
state; of all the configs measured). The GPU config's kernels run as their NumPy references there
(TINYGRAD_GPU_STANDIN_KERNELS=reference: the emulator would take minutes a step); the
counts are the same either way. The stand-in is not a model of speed: time is not shown.

Then what the last step costs on paper: the FLOPs of its matrix products (2 M N K each, ours inside
the attention kernels too), the bytes of the arrays each launch is given (each counted once: a lower
bound on its memory traffic), and the H200 time they project from NVIDIA's datasheet (each launch the
slower of its FLOPs at the peak and its bytes at HBM's bandwidth, one after another), against the host's
time to issue the launches (CuPy's measured cost per kernel plus ours per op). The larger bounds the step.

With --real, on a GPU: each step runs under ``cupyx.allow_synchronize(False)``, which makes
CuPy raise at any sync, and the table shows the same two bounds measured: the host's time to issue the
step, the GPU's time to run it (CUDA events, the step queued behind a spinning kernel so that its
kernels run back to back), which of them bounds the step, and the memory pool.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))      # run from a checkout without installing

CONFIGS = {
    "cpu": dict(label="CPU recipe", n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12, dropout=0.0),
    "gpu": dict(label="nanoGPT shakespeare_char GPU config", n_layer=6, n_head=6, n_embd=384, block_size=256,
                batch_size=64, dropout=0.2),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", choices=("cpu", "gpu", "both"), default="both")
    parser.add_argument("--steps", type=int, default=3, help="training steps per config (default 3)")
    parser.add_argument("--real", action="store_true", help="use CuPy on a real GPU instead of the stand-in")
    parser.add_argument("--top", type=int, default=12, help="ops and lines shown in each breakdown (default 12)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                        help="what the step computes in (train_charlm.py's --dtype; default float32)")
    return parser.parse_args(argv)


def build(config: dict):
    import numpy as np

    import tinygrad_gpu as tg
    from tinygrad_gpu.data import TextDataset, load_corpus
    from tinygrad_gpu.nn import GPT, GPTConfig
    tg.manual_seed(0)
    dataset = TextDataset(load_corpus("builtin"), config["block_size"], device="cuda")
    model = GPT(GPTConfig(n_layer=config["n_layer"], n_head=config["n_head"], n_embd=config["n_embd"],
                          block_size=config["block_size"], vocab_size=dataset.tokenizer.vocab_size,
                          dropout=config["dropout"], bias=False)).to("cuda")
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99))
    return model, optimizer, dataset, np.random.default_rng(0)


def precision_for(model, dtype: str):
    """train_charlm.py's Precision for `dtype`; for float16, a hook that overflows one gradient in step 1."""
    from tinygrad_gpu.train.precision import Precision
    precision = Precision.for_run(dtype, "cuda:0")
    if precision.scaler is not None:
        weight, steps_seen = model.lm_head.weight, [0]

        def overflow_in_step_1(param):
            if steps_seen[0] == 1:
                param.grad.data[0, 0] = float("inf")        # on the device: a launch, no sync
            steps_seen[0] += 1
        weight.register_post_accumulate_grad_hook(overflow_in_step_1)
    return precision


def measure_standin(config: dict, steps: int, dtype: str, top: int) -> dict:
    """The table's rows; then, of the last step, launches and allocations by op and by line. Returns the
    most host syncs any step made, and the most launches and allocations of any step after the first
    (the first also builds AdamW's state and looks the kernels up)."""
    from tinygrad_gpu.testing.cupy_standin import counters
    from tinygrad_gpu.train.loop import training_step
    model, optimizer, dataset, rng = build(config)
    precision = precision_for(model, dtype)
    counters.track_sites = True                 # each launch and allocation counted at the op that asked
    print(f"{'step':>4} {'syncs':>6} {'to GPU':>10} {'to host':>8} {'launches (ours)':>16} {'allocations':>12} "
          f"{'lookups':>8}")
    worst = {"host syncs": 0, "launches": 0, "allocations": 0}
    for step in range(steps):
        counters.reset()
        x, y = dataset.batch("train", config["batch_size"], rng)
        loss, _ = training_step(model, optimizer, [(x, y)], 1.0, precision)
        c = counters
        print(f"{step:>4} {c.host_syncs:>6} {c.bytes_to_device:>10,} {c.bytes_to_host:>8,} "
              f"{c.launches:>9,} ({c.raw_launches:>3}) {c.allocations:>12,} {c.function_lookups:>8}")
        for site, n in c.sites.most_common():
            print(f"       sync x{n}: {site}")
        worst["host syncs"] = max(worst["host syncs"], c.host_syncs)
        if step >= 1 or steps == 1:
            worst["launches"] = max(worst["launches"], c.launches)
            worst["allocations"] = max(worst["allocations"], c.allocations)
        last = {"launches": c.launch_sites.copy(), "allocations": c.allocation_sites.copy()}   # before the read below
        costs = list(c.launch_costs)
    print(f"loss after {steps} steps: {loss.item():.4f}" + scale_note(precision))
    for what, sites in last.items():
        print_breakdown(f"{what} of step {steps - 1}", sites, top)
    print_cost_on_paper(f"step {steps - 1}", costs, dtype)
    return worst


# What a step costs on paper. The GPU's figures are NVIDIA's H200 SXM datasheet (dense: no sparsity); the
# host's are CuPy's measured cost of issuing one elementwise kernel (CuPy PRs #3298 and #7265: about 11 us of
# CPU; a reduction costs more, near 28 us, and our RawKernel launches somewhat less) and our engine's own cost
# per op on top (about 4 us, benchmarks/ops.py), each launch taken as one op of ours.
H200_PEAK_FLOPS = {"bfloat16": 989e12, "float16": 989e12, "tf32": 494e12, "float32": 67e12}
H200_HBM_BYTES_PER_S = 4.8e12
CUPY_SECONDS_PER_LAUNCH, ENGINE_SECONDS_PER_OP = 11e-6, 4e-6


def projected_gpu_seconds(costs, peak_flops: float) -> float:
    """Each launch takes the longer of its products at the peak and its bytes at HBM's bandwidth; the launches
    run one after another. No launch is given a floor (a real kernel takes a few microseconds however small, and
    reaches neither peak), so this is a lower bound."""
    return sum(max(flops / peak_flops, nbytes / H200_HBM_BYTES_PER_S) for _, flops, nbytes in costs)


def print_cost_on_paper(title: str, costs, dtype: str) -> None:
    """FLOPs and bytes of the step's launches, the H200 time they project, against the host's time to issue them."""
    launches, flops, nbytes = len(costs), sum(c[1] for c in costs), sum(c[2] for c in costs)
    products = sum(1 for c in costs if c[1])
    host = launches * (CUPY_SECONDS_PER_LAUNCH + ENGINE_SECONDS_PER_OP)
    peaks = ("bfloat16",) if dtype != "float32" else ("float32", "tf32")    # float32 products: TF32 if allowed
    gpu = {name: projected_gpu_seconds(costs, H200_PEAK_FLOPS[name]) for name in peaks}
    print(f"what {title} costs on paper (H200 SXM datasheet: {H200_PEAK_FLOPS['bfloat16'] / 1e12:.0f} TFLOP/s "
          f"bfloat16, {H200_PEAK_FLOPS['tf32'] / 1e12:.0f} TF32, {H200_PEAK_FLOPS['float32'] / 1e12:.0f} float32, "
          f"{H200_HBM_BYTES_PER_S / 1e12:.1f} TB/s HBM; dense):")
    print(f"  products: {flops / 1e9:.2f} GFLOP in {products} launches; arrays read and written: "
          f"{nbytes / 1e9:.2f} GB by {launches} launches ({nbytes / max(1, launches) / 1e6:.2f} MB a launch)")
    for name, seconds in gpu.items():
        print(f"  GPU, products at the {name} peak, each launch bound by the slower of FLOPs and bytes: "
              f"{1e3 * seconds:.2f} ms (a lower bound)")
    print(f"  host: {launches} launches x ({CUPY_SECONDS_PER_LAUNCH * 1e6:.0f} us CuPy's + "
          f"{ENGINE_SECONDS_PER_OP * 1e6:.0f} us ours) = {1e3 * host:.2f} ms")
    fastest = min(gpu.values())
    print(f"  bound by: {'the host' if host > fastest else 'the GPU'} ({1e3 * host:.2f} ms host against "
          f"{1e3 * fastest:.2f} ms GPU)")


def print_breakdown(title: str, sites, top: int) -> None:
    """The `top` ops (file and function) and lines that made the most of `sites`' count."""
    by_op = collections.Counter()
    for site, n in sites.items():
        by_op[re.sub(r":\d+ ", " ", site)] += n          # file:line (function) -> file (function)
    total = sum(sites.values())
    for label, counts in (("by op", by_op), ("by line", sites)):
        print(f"{title}, {label} ({total} in all; the {top} largest):")
        for site, n in counts.most_common(top):
            print(f"  {n:>5}  {site}")


def scale_note(precision) -> str:
    """The GradScaler's scale after the steps (read after the last one, as a log line would)."""
    return "" if precision.scaler is None else f"; loss scale {precision.scaler.get_scale():g}"


# One thread that waits on the GPU's nanosecond timer: the queue in front of it fills while it runs.
SPIN = r'''
extern "C" __global__ void spin(unsigned long long nanoseconds) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < nanoseconds);
}
'''


def measure_real(config: dict, steps: int, dtype: str) -> dict:
    import cupy
    import numpy as np
    import cupyx
    from tinygrad_gpu.train.loop import training_step
    model, optimizer, dataset, rng = build(config)
    precision = precision_for(model, dtype)
    pool = cupy.get_default_memory_pool()
    # host ms: until training_step returns, which (no sync) is the host's time to issue the step. GPU ms: the
    # GPU's own time for it, from CUDA events around the step, issued while a spinning kernel holds the GPU (a
    # quarter of a second), so the step's kernels are all queued when the GPU reaches them and run back to back
    # (a * marks a step whose issue outlasted the spin: its GPU ms then includes waits for the host). The larger
    # of the two bounds the step: the measured form of the stand-in's cost on paper.
    spin = cupy.RawKernel(SPIN, "spin")
    print(f"{'step':>4} {'syncs':>6} {'host ms':>9} {'GPU ms':>9} {'bound by':>9} {'pool MB':>9}")
    for step in range(steps):
        cupy.cuda.Device().synchronize()
        begin, end = cupy.cuda.Event(), cupy.cuda.Event()
        spin((1,), (1,), (np.uint64(250_000_000),))
        begin.record()
        start, syncs = time.perf_counter(), 0
        x, y = dataset.batch("train", config["batch_size"], rng)
        try:
            with cupyx.allow_synchronize(False):
                loss, _ = training_step(model, optimizer, [(x, y)], 1.0, precision)
        except cupyx.DeviceSynchronized:          # the first sync stops the step: show where, and stop
            import traceback
            traceback.print_exc(limit=-4)
            print(f"{step:>4} {'>= 1':>6}")
            return {"host syncs": 1}
        host = time.perf_counter() - start
        outlasted = begin.done                   # the spin ended before the host had issued everything
        end.record()
        end.synchronize()
        gpu = cupy.cuda.get_elapsed_time(begin, end) / 1e3
        print(f"{step:>4} {syncs:>6} {1e3 * host:>9.2f} {1e3 * gpu:>8.2f}{'*' if outlasted else ' '} "
              f"{'host' if host >= gpu else 'GPU':>9} {pool.used_bytes() / 2**20:>9.1f}")
    print(f"loss after {steps} steps: {loss.item():.4f}" + scale_note(precision))
    return {"host syncs": 0}


def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.real:
        os.environ["TINYGRAD_GPU_CUPY"] = "standin"
    os.environ["TINYGRAD_GPU_CHECK_SPARE"] = "0"     # the test suite's check reads pointers on the host: not a step's
    names = ("cpu", "gpu") if args.config == "both" else (args.config,)
    worst = {}
    for name in names:
        config = CONFIGS[name]
        if name == "gpu" and not args.real:
            os.environ.setdefault("TINYGRAD_GPU_STANDIN_KERNELS", "reference")
        print(f"== {config['label']}: {config['n_layer']} layers, {config['n_embd']} wide, "
              f"block {config['block_size']}, "
              f"batch {config['batch_size']}, dropout {config['dropout']}, {args.dtype} "
              f"({'real GPU' if args.real else 'CuPy stand-in'})")
        measured = (measure_real(config, args.steps, args.dtype) if args.real else
                    measure_standin(config, args.steps, args.dtype, args.top))
        worst = {what: max(worst.get(what, 0), n) for what, n in measured.items()}
    for what, n in worst.items():            # lines for a script: the most of all the configs measured
        print(f"{what} per step: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
