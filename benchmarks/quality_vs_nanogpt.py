"""Our engine and PyTorch on the same random numbers: is a gap in val loss the engine, or the dice?

examples/train_charlm.py and nanoGPT both report a val loss after training, but they draw different
random numbers (initial weights, training batches, evaluation batches), so their figures differ by
chance as well. This script trains the GPT with either engine on either random stream:

    --stream ours      train_charlm.py's: weights from our generator, NumPy batches, the same evaluation
                       batches at every evaluation
    --stream nanogpt   nanoGPT's train.py, replayed: torch.manual_seed(seed); the modules' default
                       initialisation, then GPT-2's; the first batch drawn before the loop and each
                       next one before the backward; eval_iters fresh batches per split at every
                       evaluation, drawn from the same generator

It prints each evaluation and, at the end, the loss over the whole val split (every window of
block_size, side by side), which has no sampling noise. nanoGPT's CPU recipe:

    python benchmarks/quality_vs_nanogpt.py --engine ours --stream nanogpt \\
        --data ../shared/data/tinyshakespeare.txt --max-iters 2000 --beta2 0.99
    python benchmarks/quality_vs_nanogpt.py --engine torch --stream nanogpt ...   # what nanoGPT computes
    python benchmarks/quality_vs_nanogpt.py --engine torch --stream ours ...      # PyTorch on our stream

The other flags are train_charlm.py's (GPT, dropout 0; --seed is 1337 as in nanoGPT). Needs torch.
"""
import argparse
import math
import os
import sys
import time
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu.data import TextDataset, load_corpus  # noqa: E402
from tinygrad_gpu.optim import clip_grad_norm_  # noqa: E402
from tinygrad_gpu.optim.lr_scheduler import warmup_cosine  # noqa: E402
from tinygrad_gpu.train import build_model, parse_args  # noqa: E402


def nanogpt_initial_weights(torch, TorchGPT, shape, seed: int) -> dict:
    """The weights nanoGPT's GPT starts from, drawn in its order: every module's default
    initialisation first (it consumes random numbers too), then N(0, 0.02) for Linear and Embedding
    weights in module order, then the residual projections again with 0.02 / sqrt(2 n_layer)."""
    torch.manual_seed(seed)
    model = TorchGPT(shape)

    def gpt2_init(module):
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(module.weight, 0.0, 0.02)
            if getattr(module, "bias", None) is not None:
                torch.nn.init.zeros_(module.bias)
    model.apply(gpt2_init)                              # the tied table twice: as wte, then as lm_head
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight"):
            torch.nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * shape.n_layer))
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


class OurEngine:
    def __init__(self, config, vocab_size: int, weights: dict):
        self.model = build_model(config.model_settings(), vocab_size)
        self.model.load_state_dict({k: tg.tensor(v) for k, v in weights.items()})
        self.optimizer = self.model.configure_optimizers(config.weight_decay, config.lr, (config.beta1, config.beta2))
        self.clip = config.grad_clip

    def loss(self, x, y) -> float:
        with tg.no_grad():
            return self.model(tg.tensor(x), tg.tensor(y))[1].item()

    def step(self, x, y, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        _, loss = self.model(tg.tensor(x), tg.tensor(y))
        self.optimizer.zero_grad()
        loss.backward()
        clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()

    def train(self, mode: bool) -> None:
        self.model.train(mode)


class TorchEngine:
    def __init__(self, torch, TorchGPT, train_step, config, shape, weights: dict):
        self.torch, self.train_step, self.clip = torch, train_step, config.grad_clip
        with torch.random.fork_rng():                   # building it must not move nanoGPT's stream
            self.model = TorchGPT(shape)
        self.model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        self.optimizer = self.model.configure_optimizers(config.weight_decay, config.lr, (config.beta1, config.beta2))

    def loss(self, x, y) -> float:
        with self.torch.no_grad():
            return self.model(self.torch.from_numpy(x), self.torch.from_numpy(y))[1].item()

    def step(self, x, y, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.train_step(self.model, self.optimizer, self.torch.from_numpy(x), self.torch.from_numpy(y), self.clip)

    def train(self, mode: bool) -> None:
        self.model.train(mode)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=False)
    parser.add_argument("--engine", choices=("ours", "torch"), default="ours")
    parser.add_argument("--stream", choices=("ours", "nanogpt"), default="nanogpt")
    own, rest = parser.parse_known_args()
    config = parse_args(rest, description=__doc__.split("\n\n")[0])
    try:
        import torch
    except ImportError:
        print("error: this comparison needs PyTorch (nanoGPT's random stream is its generator): pip install torch",
              file=sys.stderr)
        raise SystemExit(2) from None
    from torch_gpt import TorchGPT, train_step

    dataset = TextDataset(load_corpus(config.data), config.block_size)
    splits = {name: np.asarray(ids, dtype=np.int64) for name, ids in dataset.splits.items()}
    shape = types.SimpleNamespace(vocab_size=dataset.tokenizer.vocab_size, block_size=config.block_size,
                                  n_layer=config.n_layer, n_head=config.n_head, n_embd=config.n_embd, bias=config.bias)
    B, T = config.batch_size, config.block_size

    def windows(split, starts):
        offsets = np.asarray(starts)[:, None] + np.arange(T)
        return splits[split][offsets], splits[split][offsets + 1]

    if own.stream == "nanogpt":
        weights = nanogpt_initial_weights(torch, TorchGPT, shape, config.seed)

        def batch(split):                               # nanoGPT's get_batch: torch's global generator
            return windows(split, torch.randint(len(splits[split]) - T, (B,)).numpy())
        eval_batches = batch
    else:
        tg.manual_seed(config.seed)                     # exactly as train/loop.py builds its model
        weights = {k: v.numpy() for k, v in build_model(config.model_settings(), shape.vocab_size).state_dict().items()}
        data_rng = np.random.default_rng(config.seed)

        def batch(split):
            return windows(split, data_rng.integers(0, len(splits[split]) - T, size=B))

        def eval_batches(split):                        # train.estimate_loss's fixed batches
            rngs = eval_batches.rngs
            return windows(split, rngs[split].integers(0, len(splits[split]) - T, size=B))
    engine = OurEngine(config, shape.vocab_size, weights) if own.engine == "ours" else \
        TorchEngine(torch, TorchGPT, train_step, config, shape, weights)

    def evaluate() -> dict:
        if own.stream == "ours":
            eval_batches.rngs = {s: np.random.default_rng([config.seed, n]) for n, s in enumerate(("train", "val"))}
        engine.train(False)
        losses = {s: sum(engine.loss(*eval_batches(s)) for _ in range(config.eval_iters)) / config.eval_iters
                  for s in ("train", "val")}
        engine.train(True)
        return losses

    print(f"engine {own.engine}, stream {own.stream}, seed {config.seed}, {config.max_iters} iterations")
    decay_iters = config.lr_decay_iters or config.max_iters
    start = time.time()
    x_next, y_next = batch("train")
    for it in range(config.max_iters + 1):
        lr = warmup_cosine(it, config.lr, config.warmup_iters, decay_iters, config.min_lr)
        if it % config.eval_interval == 0 or it == config.max_iters:
            losses = evaluate()
            print(f"iter {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
                  f"{time.time() - start:.1f} s", flush=True)
        if it == config.max_iters:
            break
        x, y = x_next, y_next
        x_next, y_next = batch("train")                 # drawn before the backward, as nanoGPT does
        engine.step(x, y, lr)

    engine.train(False)
    starts = np.arange((len(splits["val"]) - 1) // T) * T
    total = sum(engine.loss(*windows("val", starts[i:i + 256])) * len(starts[i:i + 256])
                for i in range(0, len(starts), 256))
    print(f"whole val split ({len(starts)} windows of {T}): loss {total / len(starts):.4f}")


if __name__ == "__main__":
    main()
