"""GPT training-step time as the model widens and the context grows, against its matmul FLOPs.

    python benchmarks/scaling.py                   # cpu: two sweeps of 4 rows, median of 10 steps each
    python benchmarks/scaling.py --with-torch      # and PyTorch eager on the same settings
    python benchmarks/scaling.py --device cuda --steps 20
    python benchmarks/scaling.py --quick           # tiny sizes, one step: checks that it runs

Two sweeps from the CPU recipe (examples/train_charlm.py: 4 layers, 4 heads, batch 12, no
biases, vocabulary 65, AdamW with weight decay 0.1 and clipping at 1.0): n_embd 64 to 512 at
block_size 64, then block_size 32 to 256 at n_embd 128.  A step is what the training loop
does: forward to the loss, backward, clip the gradient norm, AdamW.

FLOPs are counted, not estimated: during one untimed step every matrix product the engine
runs, forward and backward, is recorded (the ops that multiply matrices wrapped, 2 m n k each), and so is
every op (Function.apply wrapped).  The count is checked against nanoGPT's formula,
6 N tokens + 12 n_layer n_embd T tokens with N the parameters in matrix products; the two
agree because the engine computes the full T x T attention scores (masking half of them)
and both gradients of every product.  Only matmul FLOPs: softmax, layer norm, GELU and
AdamW are memory-bound work that the count leaves out.

Reading the table: "time x" and "FLOP x" compare a row with the one above.  Where time
grows as fast as the FLOPs, the matrix products dominate.  Where it grows more slowly, a
fixed cost per op takes a large share: the Python path through the engine, paid "ops" times
a step whatever the sizes (benchmarks/ops.py measures it per op).  Where it grows faster,
the memory traffic of the non-matmul work outgrows the FLOPs (the T x T attention scores).
"fastest" is the quickest timed step: far below the median, other processes were competing.
NumPy's BLAS and torch each use all cores by default; OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
compares the two on one thread, which a busy machine disturbs less.
Without a GPU, --device cuda says so and exits with status 0.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))      # run from a checkout without installing

import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu import device as devices  # noqa: E402
from tinygrad_gpu.nn import gpt_block  # noqa: E402
from tinygrad_gpu.ops import fused, linalg  # noqa: E402
from tinygrad_gpu.optim import clip_grad_norm_  # noqa: E402
from tinygrad_gpu.tensor import Function  # noqa: E402
from tinygrad_gpu.train import TrainConfig, build_model  # noqa: E402
from benchmarks import bench_device  # noqa: E402

VOCAB = 65                     # tiny-shakespeare's characters


# ----------------------------------------------------------------------------- one training step
def our_step(config: TrainConfig, device: str):
    """A function doing one training step of our GPT on a fixed random batch, as train/loop.py does it."""
    tg.manual_seed(0)
    model = build_model(config.model_settings(), VOCAB)
    model.to(device)
    optimizer = model.configure_optimizers(config.weight_decay, config.lr, (config.beta1, config.beta2))
    params = [p for group in optimizer.param_groups for p in group["params"]]
    rng = np.random.default_rng(0)
    x, y = (tg.tensor(rng.integers(0, VOCAB, (config.batch_size, config.block_size)), device=device)
            for _ in range(2))

    def step():
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip:
            clip_grad_norm_(params, config.grad_clip)
        optimizer.step()
    return step, model.num_parameters()


def _products(op, shapes, grads=None) -> int:
    """Matmul FLOPs (2 m n k per product) of one op, given its inputs' shapes: its forward (grads None)
    or its backward, which computes one product per gradient it returns (attention: and dp = dy v^T
    when q or k needs one)."""
    if op is linalg.Linear:                        # x (..., in) times weight (out, in)
        product = 2 * math.prod(shapes[0][:-1]) * shapes[1][0] * shapes[1][1]
        return product if grads is None else product * sum(g is not None for g in grads[:2])
    if op is gpt_block.GPTBlock:                   # x (B, T, C), then the weights of gpt_block.LAYERS
        (B, T, C), linears = shapes[0], (gpt_block.C_ATTN, gpt_block.ATTN_PROJ, gpt_block.C_FC, gpt_block.MLP_PROJ)
        products = [2 * B * T * shapes[1 + i][0] * shapes[1 + i][1] for i in linears]
        attention = 4 * B * T * T * C              # scores and p v: 2 B H T T E each, H E = C
        if grads is None:
            return sum(products) + attention
        # backward: every dx (the block computes them all), the dW returned, and the attention's four products
        return sum(p * (1 + (grads[1 + i] is not None)) for p, i in zip(products, linears)) + 2 * attention
    if op is fused.PackedCausalAttention:          # source, q, k, v: CausalAttention's products, all three grads
        shapes, grads = shapes[1:], None if grads is None else (True, True, True)
        op = fused.CausalAttention
    if op is fused.CausalAttention:                # q (..., L, E), k (..., S, E), v (..., S, Ev)
        (L, E), (S, Ev) = shapes[0][-2:], shapes[2][-2:]
        scores = 2 * math.prod(np.broadcast_shapes(*(s[:-2] for s in shapes))) * L * S
        if grads is None:
            return scores * (E + Ev)
        dq, dk, dv = (g is not None for g in grads)
        return scores * (E * (dq + dk) + Ev * (dv + (dq or dk)))
    a, b = shapes                                  # MatMul: batch x m x n outputs, k products each
    return 0 if grads is not None else 2 * math.prod(np.broadcast_shapes(a[:-2], b[:-2])) * a[-2] * b[-1] * a[-1]


@contextlib.contextmanager
def counting():
    """Count matmul FLOPs and Function applications while the block runs (wrapping, then restoring).

    The products live in five ops: Linear, CausalAttention or PackedCausalAttention, and GPTBlock (a GPT layer
    as one op, on the cpu) forward and backward on arrays, and MatMul (whose backward is made of MatMul ops
    again, counted as they run)."""
    counts = {"flops": 0, "ops": 0}
    originals = {(op, name): op.__dict__[name] for op in (linalg.Linear, fused.CausalAttention,
                                                          fused.PackedCausalAttention, gpt_block.GPTBlock,
                                                          linalg.MatMul)
                 for name in ("forward", "backward")}
    apply = Function.__dict__["apply"]

    def counted(op, name, original):
        def run(ctx, *args, **options):
            result = original(ctx, *args, **options)
            if name == "forward":
                counts["flops"] += _products(op, [a.shape for a in args])
            elif op is not linalg.MatMul:
                counts["flops"] += _products(op, ctx.input_shapes, result)
            return result
        return run

    def counted_apply(cls, *inputs, **options):
        counts["ops"] += 1
        return apply.__func__(cls, *inputs, **options)
    for (op, name), original in originals.items():
        setattr(op, name, counted(op, name, original))
    Function.apply = classmethod(counted_apply)
    try:
        yield counts
    finally:
        for (op, name), original in originals.items():
            setattr(op, name, original)
        Function.apply = apply


def formula_flops(config: TrainConfig) -> int:
    """nanoGPT's estimate of a step's matmul FLOPs (forward 2, backward 4 per parameter and token)."""
    c, tokens = config.n_embd, config.batch_size * config.block_size
    in_products = config.n_layer * 12 * c * c + VOCAB * c      # qkv 3c^2, proj c^2, mlp 8c^2; lm_head
    return 6 * in_products * tokens + 12 * config.n_layer * c * config.block_size * tokens


def step_ms(step, sync, warmup: int, steps: int) -> tuple:
    """(median, fastest) milliseconds per step; the fastest shows how much of the median is other processes."""
    for _ in range(warmup):
        step()
        sync()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        sync()                      # on a GPU the step is only queued until this returns
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, min(times) * 1e3


# ----------------------------------------------------------------------------- the table
def sweeps(args):
    """(title, [TrainConfig]) for each sweep; the CPU recipe with one setting doubling."""
    base = TrainConfig(batch_size=args.batch_size)
    return [(f"n_embd doubles at block_size {args.embd_block}",
             [dataclasses.replace(base, n_embd=c, block_size=args.embd_block) for c in args.n_embd]),
            (f"block_size doubles at n_embd {args.block_embd}",
             [dataclasses.replace(base, n_embd=args.block_embd, block_size=t) for t in args.block_size])]


def measure(config, device, sync, args, torch_parts) -> dict:
    step, n_params = our_step(config, device)
    with counting() as counts:
        step()                      # untimed: counts the work, and warms up (first allocations, kernels)
        sync()
    ms, best = step_ms(step, sync, args.warmup, args.steps)
    row = dict(config=config, params=n_params, ops=counts["ops"], counted=counts["flops"],
               flops=counts["flops"] or formula_flops(config), ms=ms, best=best)
    if torch_parts:
        torch_device, torch_sync = torch_parts
        from benchmarks.torch_gpt import training_step      # only here: torch is optional
        row["torch_ms"], _ = step_ms(training_step(config, VOCAB, torch_device), torch_sync,
                                     args.warmup + 1, args.steps)
    return row


def ratio(a, b) -> str:
    return "-" if b is None else f"{a / b:.2f}x"


def print_rows(rows: list) -> None:
    """Right-aligned columns as wide as their widest cell; rows[0] is the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths)))


def print_sweep(title, rows, floor, with_torch: bool) -> None:
    table = [["n_embd", "block", "params", "ops", "ms/step", "fastest", "fixed", "GFLOP/step", "GFLOP/s",
              "time x", "FLOP x"] + (["torch ms", "ours/torch"] if with_torch else [])]
    previous = None
    for row in rows:
        c = row["config"]
        table.append([str(c.n_embd), str(c.block_size), f"{row['params'] / 1e6:.2f}M", str(row["ops"]),
                      f"{row['ms']:.1f}", f"{row['best']:.1f}", f"{min(floor['best'] / row['best'], 1):.0%}",
                      f"{row['flops'] / 1e9:.3f}", f"{row['flops'] / row['ms'] / 1e6:.1f}",
                      ratio(row["ms"], previous and previous["ms"]), ratio(row["flops"], previous and previous["flops"])]
                     + ([f"{row['torch_ms']:.1f}", ratio(row["ms"], row["torch_ms"])] if with_torch else []))
        previous = row
    print(f"\n{title}")
    print_rows(table)


def parse_sizes(text: str) -> list:
    return [int(n) for n in text.split(",")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu, emu, cuda or cuda:N")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per row (the median is shown)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before timing, after the counted one")
    parser.add_argument("--n-embd", type=parse_sizes, default=[64, 128, 256, 512], help="first sweep's widths")
    parser.add_argument("--embd-block", type=int, default=64, help="block_size during the n_embd sweep")
    parser.add_argument("--block-size", type=parse_sizes, default=[32, 64, 128, 256], help="second sweep's contexts")
    parser.add_argument("--block-embd", type=int, default=128, help="n_embd during the block_size sweep")
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--with-torch", action="store_true", help="add PyTorch eager on the same settings")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and one step: a check that it runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.n_embd, args.embd_block, args.block_size, args.block_embd = [16, 32], 16, [8, 16], 32
        args.steps, args.warmup = 1, 0
    device = bench_device.resolve(args.device, "benchmarks/scaling.py")
    if device is None:
        return 0
    torch_parts, note = None, ""
    if args.with_torch:
        torch, torch_device, torch_sync = bench_device.load_torch(device)
        if torch is None:
            note = f"; no torch column: {torch_device}"
        else:
            torch_parts = (torch_device, torch_sync)
            note = f"; torch {torch.__version__} on {torch_device} ({torch.get_num_threads()} threads)"
    xp, sync = devices.array_module(device), bench_device.synchronizer(device)
    print(f"benchmarks/scaling.py: {device}, {xp.__name__} {xp.__version__}, 4 layers, 4 heads, batch "
          f"{args.batch_size}, vocab {VOCAB}; median of {args.steps} steps after {args.warmup + 1} warm-up; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores{note}")
    mismatched = []
    with devices.use(device):
        # The same ops on almost no data: what a step costs whatever its size (the "fixed" column).
        floor = measure(dataclasses.replace(TrainConfig(batch_size=args.batch_size), n_embd=16, block_size=8),
                        device, sync, args, torch_parts)
        print(f"floor: a step at n_embd 16, block_size 8 ({floor['ops']} ops, "
              f"{floor['flops'] / 1e6:.1f} MFLOP) takes {floor['ms']:.1f} ms (fastest {floor['best']:.1f})"
              + (f", torch {floor['torch_ms']:.1f} ms" if torch_parts else ""))
        for title, configs in sweeps(args):
            rows = [measure(config, device, sync, args, torch_parts) for config in configs]
            print_sweep(title, rows, floor, torch_parts is not None)
            mismatched += [r["config"] for r in rows if r["counted"] != formula_flops(r["config"])]
    print("\nGFLOP/step: the matrix products counted in one step (forward and backward); ops: Function "
          "applications in one step;\nfixed: the floor's fastest step over this row's fastest, the share of "
          "the step that does not grow with the sizes.")
    if mismatched:
        print("the count differs from 6 N tokens + 12 n_layer n_embd T tokens at " +
              ", ".join(f"n_embd {c.n_embd} block {c.block_size}" for c in mismatched) +
              ": some product skips MatMul, or the engine computes fewer")
    else:
        print("On every row the count equals nanoGPT's 6 N tokens + 12 n_layer n_embd T tokens.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
