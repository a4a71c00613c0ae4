"""Training character-level language models: the loop behind examples/train_charlm.py.

One iteration: draw a batch of windows, forward to a loss, backward, clip the gradient
norm, AdamW step, with the learning rate from a warmup + cosine schedule. Every
`eval_interval` iterations: the mean loss over `eval_iters` fixed batches of each split, a
line in OUT_DIR/metrics.jsonl, and a checkpoint (model, optimizer, step, tokenizer, config,
random states) written atomically, so that `--resume` continues exactly where it left off.
"""
from __future__ import annotations

import dataclasses
import json
import argparse
import os
import sys
import signal
import time

import numpy as np

from . import checkpoint
from . import device as devices
from . import random
from .data import CharTokenizer, DataError, TextDataset, load_corpus
from .nn import Embedding, GPT, GPTConfig, LSTMLanguageModel
from .optim import clip_grad_norm_
from .optim.lr_scheduler import warmup_cosine
from .tensor import Tensor, no_grad

CHECKPOINT_NAME = "ckpt.safetensors"
METRICS_NAME = "metrics.jsonl"


class ConfigError(ValueError):
    """A combination of settings that cannot work; reported in one line, without a traceback."""


@dataclasses.dataclass
class TrainConfig:
    data: str = "builtin"           # 'builtin', 'shakespeare', or a path to a UTF-8 text file
    device: str = None              # default: cuda if available, else cpu
    model: str = "gpt"              # 'gpt' or 'lstm'
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64
    batch_size: int = 12
    dropout: float = 0.0
    bias: bool = False
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    max_iters: int = 1000
    lr_decay_iters: int = None      # default: max_iters
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0          # 0 turns clipping off
    eval_interval: int = 250
    eval_iters: int = 20
    seed: int = 1337
    out_dir: str = "out-charlm"
    resume: bool = False
    init_from: str = None           # a checkpoint to start from (fine-tuning)
    freeze_embeddings: bool = False
    freeze_layers: int = 0          # the first N transformer blocks (GPT) are not trained
    drop_unknown: bool = False      # drop characters the starting checkpoint's vocabulary lacks
    num_samples: int = 2
    sample_tokens: int = 300
    progress: bool = True

    MODEL_FIELDS = ("model", "n_layer", "n_head", "n_embd", "block_size", "dropout", "bias")

    def model_settings(self) -> dict:
        return {name: getattr(self, name) for name in self.MODEL_FIELDS}


def validate(config: TrainConfig) -> str:
    """Check the settings; return the canonical device. Raises ConfigError with one clear line."""
    if config.model not in ("gpt", "lstm"):
        raise ConfigError(f"--model must be 'gpt' or 'lstm', got {config.model!r}")
    if config.model == "gpt" and config.n_embd % config.n_head:
        raise ConfigError(f"--n-embd ({config.n_embd}) must be divisible by --n-head ({config.n_head})")
    for name in ("n_layer", "n_embd", "block_size", "batch_size", "max_iters", "eval_interval", "eval_iters"):
        if getattr(config, name) <= 0 and not (name == "max_iters" and getattr(config, name) == 0):
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(config, name)}")
    if not 0 <= config.dropout < 1:
        raise ConfigError(f"--dropout must be in [0, 1), got {config.dropout}")
    if config.resume and config.init_from:
        raise ConfigError("--resume continues OUT_DIR's own run; --init-from starts a new one: pick one")
    try:
        return devices.canonical(config.device)
    except (RuntimeError, ValueError) as e:
        raise ConfigError(str(e)) from None


def build_model(settings: dict, vocab_size: int):
    if settings["model"] == "lstm":
        return LSTMLanguageModel(vocab_size, settings["n_embd"], settings["n_layer"], settings["dropout"],
                                 settings["block_size"])
    return GPT(GPTConfig(block_size=settings["block_size"], vocab_size=vocab_size, n_layer=settings["n_layer"],
                         n_head=settings["n_head"], n_embd=settings["n_embd"], dropout=settings["dropout"],
                         bias=settings["bias"]))


def freeze(model, config: TrainConfig) -> None:
    if config.freeze_embeddings:
        for module in model.modules():
            if isinstance(module, Embedding):
                module.weight.requires_grad_(False)
    if config.freeze_layers:
        if not isinstance(model, GPT):
            raise ConfigError("--freeze-layers applies to GPT models only")
        for block in list(model.transformer.h)[:config.freeze_layers]:
            block.requires_grad_(False)


@no_grad()
def estimate_loss(model, dataset: TextDataset, config: TrainConfig) -> dict:
    """Mean loss over `eval_iters` batches per split. The batches are the same at every
    evaluation (their own seeded generator), so the curve shows the model changing, not the
    batches, and evaluation leaves the training random stream untouched."""
    was_training = model.training
    model.eval()
    losses = {}
    for number, split in enumerate(("train", "val")):
        rng = np.random.default_rng([config.seed, number])
        total = 0.0
        for _ in range(config.eval_iters):
            x, y = dataset.batch(split, config.batch_size, rng)
            total += model(x, y)[1].item()
        losses[split] = total / config.eval_iters
    model.train(was_training)
    return losses


class _StopRequest:
    """Turns Ctrl-C into a flag checked between iterations, so a step is never cut in half."""

    def __init__(self):
        self.requested = False

    def __enter__(self):
        self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        self.requested = True

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self.previous)
        return False


def _read_metrics(path: str, up_to_iter: int) -> list:
    """The metric lines of a run, without those after `up_to_iter` (written after the checkpoint)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [row for row in rows if row["iter"] <= up_to_iter]


def _write_lines(path: str, rows: list) -> None:
    temporary = path + ".tmp"
    with open(temporary, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    os.replace(temporary, path)


def _prepare(config: TrainConfig, device: str, log):
    """Model, tokenizer, dataset and (when resuming) the saved state."""
    saved = None
    source = os.path.join(config.out_dir, CHECKPOINT_NAME) if config.resume else config.init_from
    if source:
        if not os.path.exists(source):
            raise ConfigError(f"no checkpoint at {source}" + (" to resume from" if config.resume else ""))
        saved = checkpoint.load(source)
        tokenizer = CharTokenizer(saved["tokenizer"])
        settings = saved["model_settings"]
        if config.init_from:      # fine-tuning may change dropout; the architecture stays the checkpoint's
            settings = dict(settings, dropout=config.dropout)
    else:
        tokenizer, settings = None, config.model_settings()
    text = load_corpus(config.data)
    if tokenizer is not None and tokenizer.unknown(text):
        missing = tokenizer.unknown(text)
        if not config.drop_unknown:
            raise DataError(f"the text has {len(missing)} character(s) the model's vocabulary lacks: "
                            f"{''.join(missing)!r}; pass --drop-unknown to leave them out")
        log(f"dropping {sum(text.count(c) for c in missing)} occurrences of {len(missing)} unknown character(s)")
        text = "".join(c for c in text if c in tokenizer.index)
    dataset = TextDataset(text, settings["block_size"], tokenizer, device=device)
    random.manual_seed(config.seed)
    model = build_model(settings, dataset.tokenizer.vocab_size)
    if saved is not None:
        model.load_state_dict(saved["model"])
    model.to(device)
    return model, dataset, settings, saved


def train(config: TrainConfig, log=print) -> dict:
    """Run (or resume) training; return the final losses, speed and samples."""
    device = validate(config)
    model, dataset, settings, saved = _prepare(config, device, log)
    freeze(model, config)
    optimizer = model.configure_optimizers(config.weight_decay, config.lr, (config.beta1, config.beta2))
    data_rng = np.random.default_rng(config.seed)
    os.makedirs(config.out_dir, exist_ok=True)
    ckpt_path = os.path.join(config.out_dir, CHECKPOINT_NAME)
    metrics_path = os.path.join(config.out_dir, METRICS_NAME)
    iter_num, metrics = 0, []
    if config.resume:
        optimizer.load_state_dict(saved["optimizer"])
        iter_num = saved["iter"]
        data_rng.bit_generator.state = saved["rng"]["data"]
        random.set_rng_state(saved["rng"]["model"])
        metrics = _read_metrics(metrics_path, iter_num)
        _write_lines(metrics_path, metrics)
        log(f"resuming from iteration {iter_num} of {config.max_iters}")
    elif os.path.exists(metrics_path):
        os.remove(metrics_path)
    decay_iters = config.lr_decay_iters or config.max_iters
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{settings['model']}: {n_params / 1e6:.2f}M parameters, vocabulary {dataset.tokenizer.vocab_size}, "
        f"train {len(dataset.splits['train']):,} / val {len(dataset.splits['val']):,} tokens, device {device}")

    def save_checkpoint():
        checkpoint.save({
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter": iter_num,
            "tokenizer": dataset.tokenizer.chars, "model_settings": settings,
            "config": {k: v for k, v in dataclasses.asdict(config).items()},
            "rng": {"data": data_rng.bit_generator.state, "model": random.get_rng_state()},
        }, ckpt_path)

    progress = _progress_bar(config, iter_num)
    evaluated = {row["iter"] for row in metrics}
    tokens_per_step = config.batch_size * settings["block_size"]
    start = time.time() - (metrics[-1]["elapsed_s"] if metrics else 0.0)
    interval_start, interval_steps = time.time(), 0
    shown_at, shown_iter = time.time(), iter_num
    with _StopRequest() as stop:
        while True:
            lr = warmup_cosine(iter_num, config.lr, config.warmup_iters, decay_iters, config.min_lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            if (iter_num % config.eval_interval == 0 or iter_num == config.max_iters) and iter_num not in evaluated:
                losses = estimate_loss(model, dataset, config)
                elapsed = time.time() - interval_start
                row = {"iter": iter_num, "train_loss": round(losses["train"], 6), "val_loss": round(losses["val"], 6),
                       "lr": lr, "tokens_per_sec": round(interval_steps * tokens_per_step / max(elapsed, 1e-9), 1),
                       "elapsed_s": round(time.time() - start, 2)}
                save_checkpoint()
                with open(metrics_path, "a") as f:
                    f.write(json.dumps(row) + "\n")
                metrics.append(row)
                evaluated.add(iter_num)
                progress.write(f"iter {iter_num}: train loss {row['train_loss']:.4f}, val loss {row['val_loss']:.4f}, "
                               f"{row['tokens_per_sec']:.0f} tokens/s")
                interval_start, interval_steps = time.time(), 0
            if iter_num >= config.max_iters:
                break
            if stop.requested:
                save_checkpoint()
                progress.write(f"interrupted: checkpoint saved at iteration {iter_num}; continue with --resume")
                break
            x, y = dataset.batch("train", config.batch_size, data_rng)
            _, loss = model(x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip:
                clip_grad_norm_(optimizer_params(optimizer), config.grad_clip)
            optimizer.step()
            iter_num += 1
            interval_steps += 1
            if iter_num % 10 == 0 or iter_num == config.max_iters:   # .item() waits for the GPU: not every step
                speed = (iter_num - shown_iter) * tokens_per_step / max(time.time() - shown_at, 1e-9)
                progress.set_postfix(loss=f"{loss.item():.4f}", tok_per_s=f"{speed:.0f}")
                shown_at, shown_iter = time.time(), iter_num
            progress.update(1)
    progress.close()
    samples = []
    if iter_num >= config.max_iters and config.num_samples:
        samples = sample(model, dataset.tokenizer, config.num_samples, config.sample_tokens, temperature=0.8,
                         device=device)
    _plot(metrics, os.path.join(config.out_dir, "loss.png"))
    last = metrics[-1] if metrics else {}
    return {"iter": iter_num, "train_loss": last.get("train_loss"), "val_loss": last.get("val_loss"),
            "elapsed_s": round(time.time() - start, 2), "metrics": metrics, "samples": samples,
            "interrupted": iter_num < config.max_iters}


def optimizer_params(optimizer) -> list:
    return [p for group in optimizer.param_groups for p in group["params"]]


def sample(model, tokenizer: CharTokenizer, num_samples: int, max_new_tokens: int, prompt: str = "\n",
           temperature: float = 1.0, top_k: int = None, device: str = "cpu") -> list:
    """`num_samples` continuations of `prompt` (a newline by default, or the first character when the
    vocabulary has no newline)."""
    if prompt == "\n" and "\n" not in tokenizer.index:
        prompt = tokenizer.chars[0]
    start = Tensor(np.tile(tokenizer.encode(prompt), (num_samples, 1)), device=device)
    out = model.generate(start, max_new_tokens, temperature=temperature, top_k=top_k)
    return [tokenizer.decode(row) for row in out.numpy()]


class _NoProgress:
    def update(self, n): pass
    def set_postfix(self, **kw): pass
    def close(self): pass

    @staticmethod
    def write(line):
        print(line, flush=True)


def _progress_bar(config: TrainConfig, initial: int):
    """tqdm's bar (loss, tokens/s, ETA) when wanted and installed; plain lines otherwise."""
    if not config.progress:
        return _NoProgress()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoProgress()
    return tqdm(total=config.max_iters, initial=initial, unit="it", dynamic_ncols=True)


def _plot(metrics: list, path: str) -> None:
    """A loss curve as PNG, when matplotlib is installed (it is optional)."""
    if len(metrics) < 2:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    figure, axes = plt.subplots(figsize=(6, 4))
    iters = [row["iter"] for row in metrics]
    axes.plot(iters, [row["train_loss"] for row in metrics], label="train")
    axes.plot(iters, [row["val_loss"] for row in metrics], label="val")
    axes.set_xlabel("iteration")
    axes.set_ylabel("cross-entropy loss")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


# ----------------------------------------------------------------------------- command line
def parse_args(argv=None, defaults: TrainConfig = None, description: str = None) -> TrainConfig:
    """Flags named after TrainConfig's fields, with dashes (nanoGPT's names): --n-layer, --lr, ..."""
    defaults = defaults or TrainConfig()
    parser = argparse.ArgumentParser(description=description)
    for field in dataclasses.fields(TrainConfig):
        flag, default = "--" + field.name.replace("_", "-"), getattr(defaults, field.name)
        if field.type in ("bool", bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        else:
            kind = {"int": int, "float": float}.get(str(field.type), str)
            parser.add_argument(flag, type=kind, default=default, metavar=field.name.upper())
    return TrainConfig(**vars(parser.parse_args(argv)))


def run(config: TrainConfig) -> dict:
    """train() for programs: settings and data problems become one 'error:' line and exit code 2."""
    try:
        summary = train(config)
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    for i, text in enumerate(summary["samples"]):
        print(f"--- sample {i + 1} ---\n{text}")
    if summary["val_loss"] is not None:
        print(f"final: train loss {summary['train_loss']:.4f}, val loss {summary['val_loss']:.4f}, "
              f"{summary['elapsed_s']:.0f} s; checkpoint in {config.out_dir}")
    return summary
