"""Full fine-tuning against LoRA on a GPT-2-small-shaped model: seconds per step and peak memory.

    python benchmarks/lora.py                       # 124M parameters, block 128, batch 4, cpu
    python benchmarks/lora.py --n-layer 2 --steps 2 # a quicker look

Each variant runs in its own process (so its peak memory is its own): a GPT with GPT-2 small's
shape and random weights, AdamW, the same batches. "full" trains every weight; "lora" wraps
attention's c_attn and c_proj with rank-8 adapters (tinygrad_gpu/nn/lora.py) and trains only
those. The last line prints the ratios LoRA / full, measured in this run.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from step import host_memory_mb  # noqa: E402


def worker(args) -> dict:
    import tinygrad_gpu as tg
    from tinygrad_gpu.nn import GPT, GPTConfig, lora
    from tinygrad_gpu.train.loop import training_step

    tg.manual_seed(0)
    config = GPTConfig(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, block_size=args.block_size,
                       vocab_size=args.vocab_size, bias=True, dropout=0.0)
    model = GPT(config).to(args.device)
    if args.variant == "lora":
        lora.apply_lora(model, rank=args.rank, alpha=2 * args.rank)
    optimizer = model.configure_optimizers(0.0, 1e-4, (0.9, 0.95))
    rng = np.random.default_rng(0)
    times = []
    base_mb = host_memory_mb("VmRSS")
    for i in range(args.warmup + args.steps):
        ids = rng.integers(0, config.vocab_size, (args.batch_size, args.block_size + 1))
        x, y = tg.tensor(ids[:, :-1], device=args.device), tg.tensor(ids[:, 1:], device=args.device)
        start = time.perf_counter()
        loss, _ = training_step(model, optimizer, [(x, y)], 1.0)
        loss.item()                     # the step's work is done once its loss can be read
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    return {"variant": args.variant, "params": sum(p.numel() for p in model.parameters()),
            "trained": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "s_per_step": float(np.median(times)), "peak_mb": host_memory_mb(), "base_mb": base_mb}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--n-embd", type=int, default=768)
    p.add_argument("--vocab-size", type=int, default=50257)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--variant", choices=["full", "lora"], help=argparse.SUPPRESS)     # set in the workers
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    if args.variant:
        print(json.dumps(worker(args)))
        return
    rows = {}
    for variant in ("full", "lora"):
        command = [sys.executable, __file__, *argv, "--variant", variant]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        rows[variant] = json.loads(out.strip().splitlines()[-1])
    print(f"GPT: {args.n_layer} layers, n_embd {args.n_embd}, vocabulary {args.vocab_size}, block {args.block_size}, batch {args.batch_size}, "
          f"{args.device}, LoRA rank {args.rank}")
    print(f"{'':6} {'parameters':>12} {'trained':>12} {'s/step':>8} {'peak MB':>9} {'start MB':>9}")
    for variant, r in rows.items():
        print(f"{variant:6} {r['params']:>12,} {r['trained']:>12,} {r['s_per_step']:>8.2f} {r['peak_mb']:>9.0f} "
              f"{r['base_mb']:>9.0f}")
    full, low = rows["full"], rows["lora"]
    print(f"ratios LoRA/full: time {low['s_per_step'] / full['s_per_step']:.2f}x, peak memory "
          f"{low['peak_mb'] / full['peak_mb']:.2f}x, peak above start "
          f"{(low['peak_mb'] - low['base_mb']) / (full['peak_mb'] - full['base_mb']):.2f}x")


if __name__ == "__main__":
    main()
