"""What a token costs: training against generation, with and without the key-value cache, on one model.

    python benchmarks/train_vs_infer.py                          # both models on the CPU
    python benchmarks/train_vs_infer.py --model cpu-recipe       # only the small one (a minute or less)
    python benchmarks/train_vs_infer.py --device cuda --price-per-hour 3.50
    python benchmarks/train_vs_infer.py --quick                  # tiny shapes: checks that it runs

Two models with random weights: "cpu-recipe", the GPT that examples/train_charlm.py trains by
default (tinygrad_gpu/train/config.py: 4 layers, 4 heads, n_embd 128, block 64, no biases; vocabulary 65,
tiny-shakespeare's characters as in benchmarks/step.py; the built-in corpus has 103, which changes little),
and "gpt2-small" (12 layers, 12 heads, n_embd 768, vocabulary 50257, biases) with block 256 instead of
GPT-2's 1024, to keep a CPU run to minutes. Four rows for each:

  training          forward, cross-entropy, backward, clipping at 1.0 and AdamW
                    (tinygrad_gpu.train.loop.training_step) on a fresh random batch; median of the timed steps.
  generate cached   GPT.generate(..., use_cache=True), greedy, at batch 1 and at batch 16: a one-token
                    prompt, then --new-tokens tokens, each fed through the model alone against the kept keys
                    and values. Only the generated tokens count.
  generate uncached GPT.generate(..., use_cache=False) at batch 1: every new token reruns the whole context.

FLOPs per token follow PaLM's accounting (Chowdhery et al. 2022, appendix B; nanoGPT's estimate_mfu uses
it): training costs 6N + 12 L C T per token, N the parameters in matrix products (the position table
left out, the tied token table counted once: GPT.num_params()), L layers, C = n_embd, T = block_size.
A forward is a third of that: 2N for the matrix products and 4 L C T for attention (the scores q k^T
and the weighted sum of the values, 2 C T each per layer, T the keys attended to). So a cached token
at context length T costs 2N + 4 L C T, and an uncached one reruns the forward of all T positions,
T (2N + 4 L C T). The column shows the run's average over its context lengths 1 .. new tokens.
"GFLOP/s" is tokens/s times that: how busy the arithmetic units were kept.

"$/M tokens" is what a million tokens cost at --price-per-hour for the machine, an example price
(default 2.00 an hour, roughly a rented data-centre GPU; set your own). The last lines print the
ratios measured in this run: training tokens/s against cached generation's, and cached against uncached.
Timings are wall-clock on a shared machine (the load average is printed): compare figures of one run.
NumPy's BLAS uses every core by default; where other processes hold them, its threads wait on each
other in the small products of batch-16 generation, which can then fall below batch 1's speed:
OPENBLAS_NUM_THREADS=1 measures on one thread, which a busy machine disturbs less.
On cuda every timer stops after a host read of the result (the loss, the generated ids), which waits
for the GPU's queued work. Without a GPU, --device cuda says so and exits with status 0.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))      # run from a checkout without installing
sys.path.append(str(HERE))                # bench_device

import bench_device  # noqa: E402
import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu import device as devices  # noqa: E402
from tinygrad_gpu.nn import GPT, GPTConfig  # noqa: E402
from tinygrad_gpu.train.loop import training_step  # noqa: E402

MODELS = {
    "cpu-recipe": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=65, bias=False),
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, block_size=256, vocab_size=50257, bias=True),
}
# Training batch (rows of block_size tokens) per model. GPT-2 small's step on two CPU cores takes
# seconds per row, so the CPU gets batch 1 there; a GPU needs rows to fill its cores.
TRAIN_BATCH = {"cpu-recipe": {"cpu": 12, "cuda": 12}, "gpt2-small": {"cpu": 1, "cuda": 8}}
# New tokens per generation row. On the CPU, GPT-2 small without the cache would rerun up to 255
# positions per token (minutes), so it generates 32 there; elsewhere the whole block after the prompt.
CPU_NEW_TOKENS = {"gpt2-small": 32}
QUICK_SHAPE = dict(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=65, bias=False)
GENERATION_BATCHES = (1, 16)
LR, BETAS, WEIGHT_DECAY, GRAD_CLIP = 1e-3, (0.9, 0.99), 0.1, 1.0


# ============================================================================= FLOPs (PaLM's accounting)
def forward_flops(model: GPT, tokens: int, context: int) -> float:
    """Forward FLOPs of `tokens` positions that each attend to `context` keys (2N + 4 L C T each)."""
    c = model.config
    return tokens * (2 * model.num_params() + 4 * c.n_layer * c.n_embd * context)


def generation_flops_per_token(model: GPT, new_tokens: int, cached: bool) -> float:
    """Average forward FLOPs per generated token from a one-token prompt. Token i (from 0) is chosen
    from a context of i + 1 tokens: with the cache only that last position runs; without it all of them."""
    contexts = range(1, new_tokens + 1)
    if cached:
        total = sum(forward_flops(model, 1, t) for t in contexts)
    else:
        total = sum(forward_flops(model, t, t) for t in contexts)
    return total / new_tokens


# ============================================================================= measuring
def time_training(model: GPT, device: str, batch: int, steps: int, warmup: int, rng) -> float:
    """Training tokens per second: batch * block_size tokens over the median step time."""
    block, vocab = model.config.block_size, model.config.vocab_size
    optimizer = model.configure_optimizers(WEIGHT_DECAY, LR, BETAS)
    times = []
    for i in range(warmup + steps):
        ids = rng.integers(0, vocab, (batch, block + 1))
        x, y = tg.tensor(ids[:, :-1], device=device), tg.tensor(ids[:, 1:], device=device)
        start = time.perf_counter()
        loss, _ = training_step(model, optimizer, [(x, y)], GRAD_CLIP)
        loss.item()                     # a host read: on a GPU it waits until the step's work is done
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return batch * block / statistics.median(times)


def time_generation(model: GPT, device: str, batch: int, new_tokens: int, use_cache: bool, rng) -> float:
    """Generated tokens per second (the one-token prompt not counted), after an untimed warm-up run
    (a GPU compiles its kernels on first use; the CPU's first run pays for its allocations)."""
    prompt = tg.tensor(rng.integers(0, model.config.vocab_size, (batch, 1)), device=device)
    model.generate(prompt, min(new_tokens, 4), temperature=0, use_cache=use_cache).numpy()
    start = time.perf_counter()
    model.generate(prompt, new_tokens, temperature=0, use_cache=use_cache).numpy()   # a host read of the ids
    return batch * new_tokens / (time.perf_counter() - start)


def measure_model(name: str, shape: dict, device: str, args) -> dict:
    tg.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = GPT(GPTConfig(**shape, dropout=0.0)).to(device)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    batch = args.batch_size or (2 if args.quick else TRAIN_BATCH[name][kind])
    new_tokens = args.new_tokens or (4 if args.quick else CPU_NEW_TOKENS.get(name, shape["block_size"] - 1)
                                     if kind == "cpu" else shape["block_size"] - 1)
    if new_tokens + 1 > shape["block_size"]:
        raise SystemExit(f"--new-tokens {new_tokens}: a one-token prompt plus the new tokens must fit in "
                         f"block_size {shape['block_size']}")
    print(f"\n{name}{' (shrunk by --quick)' if args.quick else ''}: n_layer {shape['n_layer']}, "
          f"n_head {shape['n_head']}, n_embd {shape['n_embd']}, block {shape['block_size']}, "
          f"vocab {shape['vocab_size']}, "
          f"{'biases' if shape['bias'] else 'no biases'}; N = {model.num_params() / 1e6:.2f}M; training batch "
          f"{batch} x {shape['block_size']}, median of {args.steps} steps after {args.warmup} warm-up; "
          f"generation: {new_tokens} new tokens from a one-token prompt, greedy", flush=True)
    rows = [dict(row="training", measured=f"{batch}x{shape['block_size']} tokens/step",
                 tokens_per_s=time_training(model, device, batch, args.steps, args.warmup, rng),
                 flops=model.flops_per_token())]
    model.train(False)                  # generate switches to eval anyway; no dropout here either way
    for b in GENERATION_BATCHES:
        rows.append(dict(row=f"generate cached, batch {b}", measured=f"{b}x{new_tokens} new tokens",
                         tokens_per_s=time_generation(model, device, b, new_tokens, True, rng),
                         flops=generation_flops_per_token(model, new_tokens, cached=True)))
    rows.append(dict(row="generate uncached, batch 1", measured=f"1x{new_tokens} new tokens",
                     tokens_per_s=time_generation(model, device, 1, new_tokens, False, rng),
                     flops=generation_flops_per_token(model, new_tokens, cached=False)))
    return dict(name=name, rows=rows)


# ============================================================================= printing
def print_table(result: dict, price_per_hour: float) -> None:
    head = f"{'':28}{'tokens/s':>12}{'FLOPs/token':>14}{'GFLOP/s':>10}{'$/M tokens':>12}   measured"
    print(head)
    print("-" * len(head))
    for r in result["rows"]:
        dollars = price_per_hour / 3600 / r["tokens_per_s"] * 1e6
        print(f"{r['row']:28}{r['tokens_per_s']:12,.1f}{r['flops']:14.3g}{r['tokens_per_s'] * r['flops'] / 1e9:10.2f}"
              f"{dollars:12.4g}   {r['measured']}")
    speed = {r["row"]: r["tokens_per_s"] for r in result["rows"]}
    train, cached1, cached16 = speed["training"], speed["generate cached, batch 1"], speed["generate cached, batch 16"]
    print(f"ratios: training : cached generation tokens/s {train / cached1:.2f}x at batch 1, "
          f"{train / cached16:.2f}x at batch 16; cached : uncached (batch 1) "
          f"{cached1 / speed['generate uncached, batch 1']:.2f}x")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="both", choices=[*MODELS, "both"])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    parser.add_argument("--price-per-hour", type=float, default=2.00,
                        help="the machine's price per hour for the $/M tokens column (an example: 2.00)")
    parser.add_argument("--steps", type=int, default=3, help="timed training steps (the median counts)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed training steps first")
    parser.add_argument("--batch-size", type=int, help="training batch (default 12 for cpu-recipe; gpt2-small "
                                                       "1 on the CPU, 8 on cuda)")
    parser.add_argument("--new-tokens", type=int, help="tokens per generation row (default block_size - 1; "
                                                       "gpt2-small on the CPU 32)")
    parser.add_argument("--seed", type=int, default=1337, help="for the weights, batches and prompts")
    parser.add_argument("--quick", action="store_true", help="every model shrunk to 1 layer, n_embd 32, block 16, "
                                                             "one training step, 4 new tokens: a check that it runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.warmup = 1, 0
    if args.steps < 1 or args.warmup < 0 or args.price_per_hour <= 0 or (args.new_tokens or 1) < 1 \
            or (args.batch_size or 1) < 1:
        parser.error("--steps, --batch-size and --new-tokens must be at least 1, --warmup at least 0, "
                     "--price-per-hour above 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    device = bench_device.resolve(args.device, "benchmarks/train_vs_infer.py")
    if device is None:
        return 0
    if device == "emu":
        print("error: the emulator is for correctness, not speed: use --device cpu or cuda", file=sys.stderr)
        return 2
    print(f"benchmarks/train_vs_infer.py: device {device}; ${args.price_per_hour:.2f} an hour (an example "
          f"price); load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    names = list(MODELS) if args.model == "both" else [args.model]
    with devices.use(device):           # CuPy allocates on the chosen GPU
        for name in names:
            shape = QUICK_SHAPE if args.quick else MODELS[name]
            print_table(measure_model(name, shape, device, args), args.price_per_hour)
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} at the end: other processes make these timings noisy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
