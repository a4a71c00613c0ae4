"""Mixed precision: what a training step takes in float32, bfloat16 and float16 (memory, time), what
the dtypes train to (--quality), and on a GPU the tokens/s and MFU of float32, TF32 and bfloat16.

    python benchmarks/mixed_precision.py                 # nanoGPT's GPU config on the CPU, one step a dtype (minutes)
    python benchmarks/mixed_precision.py --config cpu    # the CPU recipe's model: seconds
    python benchmarks/mixed_precision.py --quality       # + train_charlm.py for 500 iterations in each dtype
    python benchmarks/mixed_precision.py --device cuda   # on a GPU: float32, TF32, bfloat16, float16 (+ PyTorch)

Each variant runs in its own process: a GPT with random weights, AdamW, the same batches, the step of
train_charlm.py (``train.loop.training_step``) with its ``--dtype`` (bfloat16 and float16 under
autocast, float16 with a GradScaler; TF32 is float32 with ``tg.backends.cuda.matmul.allow_tf32``).
Ratios are against float32 in the same run.

On the CPU: one warm-up step builds AdamW's state, then one measured step: its time, and the peak of
the memory NumPy allocated during it, from ``tracemalloc`` (NumPy reports its buffers to it), so the
parameters, gradients and AdamW's moments count only as far as the step allocates them anew. What
half precision saves there is the activations: the products' outputs, the attention scores and
probabilities are 2 bytes an element instead of 4. What it costs on a CPU is time: neither NumPy nor
the CPU's BLAS has 16-bit arithmetic, so every 16-bit array is widened to float32 for each operation
and rounded back (a product runs in float32 BLAS between two conversions).

On a GPU: warm-up steps, then the median of timed steps; tokens/s, and the MFU against the datasheet
peak of the variant's kind of product (train/compute.py); the memory pool's size after the steps;
and, when PyTorch sees the GPU, its eager step under torch.autocast beside ours.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

CONFIGS = {
    "gpu": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch_size=64, dropout=0.2),
    "cpu": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12, dropout=0.0),
}
VOCAB = 65
CPU_VARIANTS = ("float32", "bfloat16", "float16")
GPU_VARIANTS = ("float32", "tf32", "bfloat16", "float16")


def _dtype_of(variant: str) -> str:
    return "float32" if variant == "tf32" else variant


def worker_ours(config_name: str, variant: str, device: str, steps: int) -> dict:
    import numpy as np

    import tinygrad_gpu as tg
    from tinygrad_gpu.nn import GPT, GPTConfig
    from tinygrad_gpu.train import compute
    from tinygrad_gpu.train.loop import training_step
    from tinygrad_gpu.train.precision import Precision

    c = CONFIGS[config_name]
    tg.backends.cuda.matmul.allow_tf32 = variant == "tf32"
    tg.manual_seed(0)
    model = GPT(GPTConfig(n_layer=c["n_layer"], n_head=c["n_head"], n_embd=c["n_embd"], block_size=c["block_size"],
                          vocab_size=VOCAB, dropout=c["dropout"], bias=False)).to(device)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99))
    precision = Precision.for_run(_dtype_of(variant), device)
    rng = np.random.default_rng(0)

    def step():
        ids = rng.integers(0, VOCAB, (c["batch_size"], c["block_size"] + 1))
        x, y = tg.tensor(ids[:, :-1], device=device), tg.tensor(ids[:, 1:], device=device)
        return training_step(model, optimizer, [(x, y)], 1.0, precision)[0]

    tokens = c["batch_size"] * c["block_size"]
    if device == "cpu":
        step().item()                            # AdamW's moments are made here
        tracemalloc.start()
        start = time.perf_counter()
        loss = step().item()
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return {"variant": variant, "loss": loss, "s_per_step": seconds, "tokens_per_s": tokens / seconds,
                "peak_mb": peak / 2**20}
    cupy = tg.device.cupy()           # (the CuPy stand-in, to try this script without a GPU, has no pool)
    sync = getattr(cupy.cuda.runtime, "deviceSynchronize", lambda: None)
    times = []
    for i in range(2 + steps):
        sync()
        start = time.perf_counter()
        loss = step()
        sync()
        if i >= 2:
            times.append(time.perf_counter() - start)
    seconds = float(np.median(times))
    peak, _ = compute.peak_flops(device, precision.low_dtype or tg.float32)
    mfu = model.flops_per_token() * tokens / seconds / peak if peak else None
    pool = cupy.get_default_memory_pool().total_bytes() / 2**20 if hasattr(cupy, "get_default_memory_pool") else 0
    return {"variant": variant, "loss": loss.item(), "s_per_step": seconds, "tokens_per_s": tokens / seconds,
            "mfu": mfu, "peak_mb": pool}


def worker_torch(config_name: str, variant: str, device: str, steps: int) -> dict:
    """PyTorch eager on the same model shape, under torch.autocast (and its GradScaler for float16)."""
    try:
        import torch
    except ImportError:
        return {"variant": variant, "skipped": "torch not importable"}
    if not torch.cuda.is_available():
        return {"variant": variant, "skipped": "torch sees no CUDA device"}
    import types

    import numpy as np
    from torch_gpt import TorchGPT
    c = CONFIGS[config_name]
    torch.backends.cuda.matmul.allow_tf32 = variant == "tf32"
    torch.manual_seed(0)
    model = TorchGPT(types.SimpleNamespace(vocab_size=VOCAB, block_size=c["block_size"], n_layer=c["n_layer"],
                                           n_head=c["n_head"], n_embd=c["n_embd"], bias=False)).to(device)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99))
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(variant)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype is torch.float16)
    x = torch.randint(0, VOCAB, (c["batch_size"], c["block_size"]), device=device)
    y = torch.randint(0, VOCAB, (c["batch_size"], c["block_size"]), device=device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.float16, enabled=dtype is not None):
            _, loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        return loss

    times = []
    for i in range(2 + steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - start)
    seconds = float(np.median(times))
    return {"variant": variant, "loss": loss.item(), "s_per_step": seconds,
            "tokens_per_s": c["batch_size"] * c["block_size"] / seconds,
            "peak_mb": torch.cuda.max_memory_reserved() / 2**20}


def quality(dtype: str, iters: int, out_dir: str) -> dict:
    """train_charlm.py's default run for `iters` iterations in `dtype`: its last losses and time."""
    command = [sys.executable, os.path.join(ROOT, "examples", "train_charlm.py"), "--dtype", dtype,
               "--max-iters", str(iters), "--eval-interval", str(iters), "--out-dir", out_dir, "--no-progress",
               "--num-samples", "0", "--device", "cpu"]
    start = time.perf_counter()
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    found = re.search(r"final: train loss ([\d.]+), val loss ([\d.]+)", out)
    return {"dtype": dtype, "train_loss": float(found.group(1)), "val_loss": float(found.group(2)),
            "seconds": time.perf_counter() - start}


def _run(argv: list, engine: str, variant: str) -> dict:
    command = [sys.executable, __file__, *argv, "--worker", engine, "--variant", variant]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        return {"variant": variant, "failed": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "?"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", choices=sorted(CONFIGS), default="gpu")
    p.add_argument("--device", default="cpu", help="cpu, or cuda for the GPU table")
    p.add_argument("--steps", type=int, default=5, help="timed steps per variant on a GPU (default 5)")
    p.add_argument("--quality", action="store_true", help="also train train_charlm.py's default in each dtype")
    p.add_argument("--quality-iters", type=int, default=500)
    p.add_argument("--worker", choices=("ours", "torch"), help=argparse.SUPPRESS)       # set in the workers
    p.add_argument("--variant", choices=GPU_VARIANTS, help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    if args.worker:
        work = worker_ours if args.worker == "ours" else worker_torch
        print(json.dumps(work(args.config, args.variant, args.device, args.steps)))
        return
    c = CONFIGS[args.config]
    gpu = args.device.startswith("cuda")
    print(f"GPT ({args.config} config): {c['n_layer']} layers, {c['n_embd']} wide, block {c['block_size']}, "
          f"batch {c['batch_size']}, dropout {c['dropout']}, {args.device}; each variant in its own process")
    engines = ("ours", "torch") if gpu else ("ours",)
    rows = [(engine, _run(argv, engine, variant)) for engine in engines
            for variant in (GPU_VARIANTS if gpu else CPU_VARIANTS)]
    base = {engine: row for engine, row in rows if row["variant"] == "float32" and "s_per_step" in row}
    print(f"{'engine':<7} {'variant':<9} {'ms/step':>9} {'tokens/s':>10} {'x float32':>10} "
          f"{'MFU':>6} {'peak MB' if not gpu else 'pool MB':>9} {'loss':>8}")
    for engine, row in rows:
        if "s_per_step" not in row:
            print(f"{engine:<7} {row['variant']:<9}  {row.get('skipped') or 'failed: ' + row.get('failed', '?')}")
            continue
        speedup = row["tokens_per_s"] / base[engine]["tokens_per_s"] if engine in base else float("nan")
        mfu = f"{100 * row['mfu']:5.1f}%" if row.get("mfu") is not None else f"{'-':>6}"
        print(f"{engine:<7} {row['variant']:<9} {1e3 * row['s_per_step']:9.1f} {row['tokens_per_s']:10,.0f} "
              f"{speedup:10.2f} {mfu} {row['peak_mb']:9.1f} {row['loss']:8.4f}")
    memory = {row["variant"]: row["peak_mb"] for engine, row in rows if "peak_mb" in row}
    if not gpu and "float32" in memory:
        print("peak memory against float32: " + ", ".join(f"{v} {memory[v] / memory['float32']:.2f}x"
                                                         for v in CPU_VARIANTS[1:] if v in memory))
    if args.quality:
        print(f"\ntrain_charlm.py's default run (builtin corpus), {args.quality_iters} iterations, cpu:")
        print(f"{'dtype':<9} {'train':>8} {'val':>8} {'val - float32':>14} {'seconds':>8}")
        with tempfile.TemporaryDirectory() as folder:
            results = [quality(dtype, args.quality_iters, os.path.join(folder, dtype)) for dtype in CPU_VARIANTS]
        for r in results:
            print(f"{r['dtype']:<9} {r['train_loss']:8.4f} {r['val_loss']:8.4f} "
                  f"{r['val_loss'] - results[0]['val_loss']:+14.4f} {r['seconds']:8.0f}")


if __name__ == "__main__":
    main()
