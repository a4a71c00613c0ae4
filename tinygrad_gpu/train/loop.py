"""The training loop behind examples/train_charlm.py, laid out like nanoGPT's train.py.

One iteration: draw a batch of windows, forward to a loss, backward, clip the gradient
norm, AdamW step, with the learning rate from a warmup + cosine schedule. Every
`eval_interval` iterations: the mean loss over `eval_iters` fixed batches of each split, a
checkpoint (checkpointing.py), and a line in OUT_DIR/metrics.jsonl (reporting.py), so that
`--resume` continues exactly where it left off. A batch may be cut into micro-batches whose
gradients add up (--gradient-accumulation-steps), and shared among processes started by mpiexec
(ranks.py), which average their gradients through DistributedDataParallel.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys

import numpy as np

from .. import distributed, random
from ..data import TextDataset
from ..distributed.optim import ZeroRedundancyOptimizer
from ..nn import GPT, lora
from ..nn.parallel import DistributedDataParallel
from ..ops.movement import stack
from ..optim import clip_grad_norm_
from ..optim.lr_scheduler import warmup_cosine
from ..tensor import Tensor, no_grad
from ..tokenizers import Tokenizer
from . import checkpointing, compute, datasets, resuming
from .config import ConfigError, TrainConfig, build_model, device_named, freeze, validate
from .divergence import DivergenceWatch
from .energy import EnergyMeter
from .precision import Precision
from .ranks import Ranks, agreeing_on_errors, backend_for
from .reporting import Report


def train(config: TrainConfig, log=print) -> dict:
    """Run (or resume) training; return the final losses, samples, and what the run computed and cost
    (reporting.Report.totals: tokens, flops, elapsed_s, mfu, and cost with --price-per-hour). Under
    mpiexec, every rank calls it (ranks.py); rank 0 alone logs, writes and samples."""
    if config.resume and "init_from" not in config.chosen():
        # a program's default starting point (finetune_charlm.py's): a resumed run starts from its own checkpoint
        config = dataclasses.replace(config, init_from=None)
    if config.template:             # kept by its absolute path, as --data is: a resumed run may start elsewhere
        config = dataclasses.replace(config, template=os.path.abspath(config.template))
    with agreeing_on_errors(distributed.gather_before_group):     # the settings, alike on every rank
        validate(config)
        device = device_named(config.device)
        backend = backend_for(config, device)
    ranks = Ranks(device, backend)
    try:
        summary = _train(config, ranks, log if ranks.is_main else _silent)
    except BaseException:
        if ranks.world_size == 1:       # with others, the group stays for cli.one_line_errors to end the job
            ranks.close()
        raise
    ranks.close()
    return summary


def _train(config: TrainConfig, ranks: Ranks, log) -> dict:
    device = ranks.device
    # Every rank finds the same mistakes here (nothing in the block communicates), and they agree before going
    # on: one reports, all end together. Nothing is written before they have agreed.
    with agreeing_on_errors(ranks.gather):
        checkpointing.claim_out_dir(config)       # every rank looks before rank 0 writes (after DDP's broadcast)
        config, model, dataset, settings, saved, data, changes = _prepare(config, device, log)
        ranks.share_micro_batches(config)         # a resumed run's own --gradient-accumulation-steps
        checkpointing.check_world_size(saved, ranks.world_size, config)
        if ranks.rank:                  # dropout's stream differs per rank; rank 0 keeps a single process's
            random.manual_seed(config.seed + ranks.rank)
        freeze(model, config)
        if not any(p.requires_grad for p in model.parameters()):
            raise ConfigError("nothing would train: every parameter is frozen (--freeze-layers, --freeze-embeddings, "
                              "--lora-rank); freeze less")
        if config.gradient_checkpointing:
            if not hasattr(model, "gradient_checkpointing_enable"):
                raise ConfigError(f"--gradient-checkpointing recomputes transformer blocks, and this run's model "
                                  f"({settings['model']}) has none: leave the flag out")
            model.gradient_checkpointing_enable()
        optimizer = model.configure_optimizers(config.weight_decay, config.lr, (config.beta1, config.beta2))
        # --dtype: autocast, and float16's GradScaler; a resumed run keeps the dtype it was saved in, unless
        # told otherwise
        precision = Precision.for_run(config.dtype or (saved.get("dtype") if config.resume else None), device)
        sharding = config.zero_stage == 1 and ranks.communicates
        if sharding and precision.scaler:
            raise ConfigError("--zero-stage 1 cannot run with float16's GradScaler (each process would find overflows "
                              "in its own gradients and skip steps alone); use --dtype bfloat16 or float32")
        data_rng = np.random.default_rng(config.seed)       # alike on every rank: all draw the same windows
        iter_num = 0
        if config.resume:
            iter_num = checkpointing.restore(saved, optimizer, data_rng, ranks.rank, precision.scaler)
    if ranks.is_main:
        os.makedirs(config.out_dir, exist_ok=True)
    if config.resume:
        log(f"resuming from iteration {iter_num} of {config.max_iters}")
    if sharding:                    # ZeRO-1: the optimizer averages (reduce-scatters) the gradients itself
        optimizer = sharded(optimizer)
    elif config.zero_stage:
        log("--zero-stage 1: a single process has nothing to share its optimizer state with; it keeps all of it")
    # The model the step runs: with other processes, wrapped to average the gradients (DDP), else the model itself.
    ddp_model = DistributedDataParallel(model) if ranks.communicates and not sharding else model
    if ranks.communicates:
        log(ranks.describe() + (", AdamW's state sharded among them (ZeRO-1)" if sharding else ""))
        sys.stdout.flush()          # the pids, where a job that hangs before its first evaluation shows them
    n_params = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log(f"{settings['model']}: {n_params / 1e6:.2f}M parameters" +
        (f" ({trained:,} trained)" if trained < n_params else "") +
        f", vocabulary {dataset.tokenizer.vocab_size}, {dataset.describe()}, device {device}")
    tokens_per_step = ranks.global_micro_batches * config.batch_size * settings["block_size"]
    if ranks.global_micro_batches > 1:
        log(f"each step: {ranks.global_micro_batches} micro-batches of {config.batch_size} windows "
            f"({ranks.micro_batches} per process), {tokens_per_step:,} tokens")
    flops_per_token = model.flops_per_token(settings["block_size"])
    peak = None
    if ranks.is_main:               # only rank 0 reports; the peak of all ranks' devices, each like rank 0's
        peak, peak_source = compute.peak_flops(device, precision.low_dtype or next(model.parameters()).dtype)
        peak = peak * ranks.world_size if peak is not None else None
        log(f"{flops_per_token / 1e6:.2f} MFLOP per token trained; " +
            (f"peak {peak / 1e12:.3g} TFLOP/s ({peak_source})" if peak is not None else peak_source))
    ranks.wait_for_all()            # the others wait here: a CPU probe measures a machine nobody else loads
    log(f"computing in {precision.name}" + (" (autocast; parameters and optimizer state in float32" +
                                            (", loss scaled by a GradScaler)" if precision.scaler else ")")
                                            if precision.low_dtype is not None else ""))
    meter = EnergyMeter(device, config.watts) if ranks.is_main else None      # energy.py: NVML, RAPL or --watts
    if meter is not None and meter.source and ranks.world_size > 1 and not meter.estimated:
        meter.source += f" of rank 0 alone, 1 of {ranks.world_size} processes"
    if meter is not None:
        log(f"energy: {meter.source or 'not measured here (give --watts W for an estimate)'}")
    report = Report(config, iter_num, tokens_per_step, flops_per_token, peak, ranks.world_size, ranks.is_main,
                    precision.name, meter, changes)
    watch = DivergenceWatch(config)
    decay_iters = config.lr_decay_iters or config.max_iters

    def save_checkpoint():
        watch.check()               # never a checkpoint of weights that diverged
        rank_states = ranks.gather(checkpointing.rng_state())      # every rank's dropout stream
        if sharding:
            optimizer.consolidate_state_dict(to=0)                  # every rank's shard of AdamW's state
        if ranks.is_main:
            checkpointing.save(os.path.join(config.out_dir, checkpointing.CHECKPOINT_NAME), model, optimizer,
                               iter_num, dataset.tokenizer, settings, config, data_rng, rank_states, precision, data,
                               report.changes)
        watch.saved_at = iter_num

    with watch, _StopRequest() as stop, report:         # the watch shows the steps' warnings as the run ends
        while True:
            lr = warmup_cosine(iter_num, config.lr, config.warmup_iters, decay_iters, config.min_lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            evaluation_due = iter_num % config.eval_interval == 0 or iter_num == config.max_iters
            if evaluation_due and iter_num not in report.evaluated:   # a resumed run may start at one it has
                watch.check()
                with watch.holding_warnings():
                    losses = estimate_loss(model, dataset, config, ranks, precision)
                watch.check_losses(iter_num, losses)
                row = report.measure(iter_num, losses, lr)
                save_checkpoint()           # after measuring: saving is not training time
                report.record(row)
            if iter_num >= config.max_iters:
                break
            if ranks.any(stop.requested):   # all ranks stop at the same step, and save once
                save_checkpoint()
                report.close_progress()     # the bar first, so that it is not drawn again below the message
                report.write(f"interrupted: checkpoint saved at iteration {iter_num}; continue with --resume")
                break
            batches, shares = ranks.step_batches(dataset, "train", config.batch_size, data_rng)
            with watch.holding_warnings():
                loss, norm = training_step(ddp_model, optimizer, batches, config.grad_clip, precision, shares)
            # A GradScaler's overflowing steps have an infinite norm by design (and are skipped): its loss is watched
            watch.note(iter_num, loss, None if precision.scaler else norm)
            iter_num += 1
            report.step(iter_num, loss)
            if iter_num % 10 == 0:          # where the progress bar reads the loss too
                watch.check()
    totals = report.totals(iter_num)        # before sampling: the figures are the training's
    samples = []
    if iter_num >= config.max_iters and config.num_samples and ranks.is_main:
        # a fine-tuning run's samples answer a held-out prompt, and a GPT's stop where an answer ends
        prompt, end = getattr(dataset, "sample_prompt", None), getattr(dataset, "sample_end", None)
        samples = sample(model, dataset.tokenizer, config.num_samples, config.sample_tokens, prompt, temperature=0.8,
                         device=device, **({"eos_token_id": end} if end is not None and isinstance(model, GPT) else {}))
    last = report.metrics[-1] if report.metrics else {}
    return {"iter": iter_num, "train_loss": last.get("train_loss"), "val_loss": last.get("val_loss"),
            **totals, "metrics": report.metrics, "samples": samples,
            "interrupted": iter_num < config.max_iters, "rank": ranks.rank, "world_size": ranks.world_size}


def training_step(model, optimizer, batches: list, grad_clip: float, precision: Precision = None,
                  shares: list = None):
    """Forward, backward, clip, update: (the loss without its graph, the norm before clipping or None).

    `batches` are the step's micro-batches, (x, y) each. Their gradients add up in .grad, each loss
    scaled by 1 / len(batches), or by its entry of `shares` (ranks.step_batches: micro-batches that count
    different numbers of targets), so the step is the one their union would give in one batch (gradient
    accumulation). Under DistributedDataParallel only the last backward averages across ranks.
    `precision` (precision.py): each forward under its autocast region, and with float16 its
    GradScaler's scale, unscale, step and update, all decided on the device. Nothing here reads a
    number on the host, so on a GPU the host queues the whole step and runs ahead
    (benchmarks/gpu_readiness.py counts: 0 host syncs).
    """
    scaler = precision.scaler if precision is not None else None
    optimizer.zero_grad(set_to_none=True)
    losses = []
    for i, (x, y) in enumerate(batches):
        local = i < len(batches) - 1 and isinstance(model, DistributedDataParallel)
        with model.no_sync() if local else contextlib.nullcontext():
            with precision.autocast() if precision is not None else contextlib.nullcontext():
                _, loss = model(x, y)
            share = loss * shares[i] if shares else loss if len(batches) == 1 else loss / len(batches)
            (scaler.scale(share) if scaler else share).backward()
        losses.append(loss.detach())
    if scaler:
        scaler.unscale_(optimizer)          # clip the true gradients, not the scaled ones
    if not grad_clip:
        norm = None
    elif isinstance(optimizer, ZeroRedundancyOptimizer):    # the mean gradient is spread over the ranks' shards
        norm = optimizer.clip_grad_norm_(grad_clip)
    else:
        norm = clip_grad_norm_(optimizer_params(optimizer), grad_clip)
    if scaler:
        scaler.step(optimizer)              # skipped, on the device, when a gradient overflowed
        scaler.update()
    else:
        optimizer.step()
    if len(losses) == 1:
        return losses[0], norm
    # the step's loss on this rank: its micro-batches' mean, each weighed by its counted targets when they differ
    return (stack(losses).mean() if not shares else (stack(losses) * Tensor(shares, device=losses[0].device)).sum()
            / sum(shares)), norm


def sharded(optimizer):
    """The optimizer as a ZeroRedundancyOptimizer of its class and groups, keeping this rank's shard of its state
    (a resumed run's, restored whole)."""
    zero = ZeroRedundancyOptimizer([dict(group) for group in optimizer.param_groups], type(optimizer),
                                   **optimizer.defaults)
    if optimizer.state:
        zero.load_state_dict(optimizer.state_dict())
    return zero


def _prepare(config: TrainConfig, device: str, log):
    """The run's settings (a resumed run's own, resuming.py), model, dataset, model settings, the checkpoint
    the run starts from (None: a fresh model), the text's record, and the changes a resumed run was allowed."""
    saved = checkpointing.load_start(config)
    config, changes = resuming.kept_settings(config, saved)
    config, text, data_change = resuming.kept_text(config, saved)
    changes = resuming.merged_changes(changes, data_change)
    for name, (old, new) in changes.items():
        log(f"changed on resuming: {name} " + (f"{old['source']} -> {new['source']}" if name == "data" else
                                                f"{old} -> {new}"))
    tokenizer = checkpointing.tokenizer_of(saved) if saved is not None else None
    settings = checkpointing.model_settings(saved, config)
    data = resuming.data_record(config.data, text, config.template)
    dataset = datasets.open_dataset(config, text, tokenizer, settings["block_size"], device, log)
    random.manual_seed(config.seed)
    model = build_model(settings, dataset.tokenizer.vocab_size)
    if saved is not None:
        checkpointing.load_weights(model, saved)
    if config.init_from:            # fine-tuning: from a LoRA run's merged weights, with adapters of its own
        if lora.lora_layers(model):
            lora.merge(model).requires_grad_(True)      # merged, every weight may train again
        if settings.get("lora_rank"):
            if not isinstance(model, GPT):
                raise ConfigError(f"--lora-rank adapts attention layers, and this run's model ({settings['model']}) "
                                  "has none: leave the flag out")
            lora.apply_lora(model, settings["lora_rank"], settings["lora_alpha"])
    model.to(device)
    return config, model, dataset, settings, saved, data, changes


@no_grad()
def estimate_loss(model, dataset: TextDataset, config: TrainConfig, ranks: Ranks = None,
                  precision: Precision = None) -> dict:
    """Mean loss over `eval_iters` batches per split. The batches are the same at every
    evaluation (their own seeded generator), so the curve shows the model changing, not the
    batches, and evaluation leaves the training random stream untouched. Batches are as large as a
    training step's; under mpiexec each rank evaluates its share and the ranks add up their sums.
    Micro-batches that count different numbers of targets weigh them as a step does (ranks.step_batches).
    With `precision`, the forward passes run in its autocast region, as training's do."""
    was_training = model.training
    model.eval()
    losses = {}
    for number, split in enumerate(("train", "val")):
        rng = np.random.default_rng([config.seed, number])
        total, weighed = 0.0, False
        for _ in range(config.eval_iters):
            batches, shares = ranks.step_batches(dataset, split, config.batch_size, rng) if ranks else \
                ([dataset.batch(split, config.batch_size, rng)], None)
            for i, (x, y) in enumerate(batches):
                with precision.autocast() if precision is not None else contextlib.nullcontext():
                    loss = model(x, y)[1].item()
                total += loss * shares[i] if shares else loss
            weighed = shares is not None
        # each iteration's weighed losses add up to the world's size times its mean; equal ones to their number
        parts = ranks.world_size if weighed else ranks.global_micro_batches if ranks else 1
        losses[split] = (ranks.total(total) if ranks else total) / (config.eval_iters * parts)
    model.train(was_training)
    return losses


def optimizer_params(optimizer) -> list:
    """Every parameter the optimizer trains (frozen ones are not among them): what gets clipped."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def sample(model, tokenizer: Tokenizer, num_samples: int, max_new_tokens: int, prompt: str = None,
           temperature: float = 1.0, top_k: int = None, device: str = "cpu", **options) -> list:
    """`num_samples` continuations of `prompt`; by default the tokenizer's `default_prompt` (a newline,
    or a character model's first character when its vocabulary has no newline). `options` go to the
    model's generate (a GPT's top_p, use_cache and eos_token_id: each text then ends before it)."""
    if prompt is None:
        prompt = tokenizer.default_prompt
    start = Tensor(np.tile(tokenizer.encode(prompt), (num_samples, 1)), device=device)
    out = model.generate(start, max_new_tokens, temperature=temperature, top_k=top_k, **options).numpy()
    end, new = options.get("eos_token_id"), start.shape[1]
    return [tokenizer.decode(row if end is None or end not in row[new:] else row[:new + list(row[new:]).index(end)])
            for row in out]


def _silent(*args, **kwargs):
    """The log of ranks other than 0: one voice per run."""


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
