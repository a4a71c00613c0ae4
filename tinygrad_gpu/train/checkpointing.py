"""A run's checkpoint and folder: what a checkpoint holds, writing it, starting from one (--resume,
--init-from, sample.py), and whose folder --out-dir is.

A checkpoint holds everything needed to continue exactly where the run was: the weights, AdamW's
moments, the iteration, the tokenizer (its description: tokenizers.py), the architecture, the
settings, and both random streams (the batches' and the model's, which dropout draws from; under
mpiexec, every rank's model stream, and the number of ranks).
tg.save writes it atomically, so a kill mid-save leaves the previous one.
"""
from __future__ import annotations

import os

from .. import checkpoint, random, tokenizers
from ..nn import hf, lora
from ..nn.hf import is_model_folder
from .config import ConfigError, TrainConfig, build_model, check_against_checkpoint
from .reporting import METRICS_NAME

CHECKPOINT_NAME = "ckpt.safetensors"
# What each use of a checkpoint needs in it.
FOR_WEIGHTS = ("model", "tokenizer", "model_settings")
FOR_RESUMING = FOR_WEIGHTS + ("optimizer", "iter", "rng")


class CheckpointError(ConfigError):
    """A checkpoint that is missing, unreadable or not of these programs; reported in one line."""


def save(path: str, model, optimizer, iter_num: int, tokenizer, settings: dict, config: TrainConfig,
         data_rng, rank_states: list = None, precision=None, data: dict = None, changes: dict = None) -> None:
    """`rank_states`: every rank's rng_state() under mpiexec (the data stream is alike on all ranks);
    `precision`: the run's dtype (precision.py), and a float16 run's GradScaler, whose scale and growth
    tracker a resumed run continues from; `data`: what the run trains on (resuming.data_record), which a
    resumed run reads again; `changes`: settings a resumed run was allowed to change that no metrics row has
    recorded yet (resuming.py)."""
    rank_states = rank_states or [rng_state()]
    rng = {"data": data_rng.bit_generator.state, **rank_states[0]}
    if len(rank_states) > 1:
        rng["ranks"] = rank_states
    checkpoint.save({
        "model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter": iter_num,
        "tokenizer": tokenizer.describe(), "model_settings": settings, "config": config.flags(),
        "rng": rng, "world_size": len(rank_states),
        **({"dtype": precision.name} if precision is not None else {}),
        **({"data": data} if data is not None else {}),
        **({"changes": changes} if changes else {}),
        **({"grad_scaler": precision.scaler.state_dict()} if precision is not None and precision.scaler else {}),
    }, path)


def rng_state() -> dict:
    """This process's model streams (dropout's): the CPU generator's state and each GPU stream's."""
    return {"model": random.get_rng_state(), "cuda": random.get_cuda_rng_state_all()}


def read(path: str, needs=FOR_WEIGHTS) -> dict:
    """The checkpoint at `path`, if it is one of these programs' with the parts `needs`."""
    try:
        saved = checkpoint.load(path)
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {path}") from None
    except ValueError as e:                   # truncated, another format, damaged metadata
        raise CheckpointError(str(e)) from None
    missing = [key for key in needs if not isinstance(saved, dict) or key not in saved]
    if missing:
        raise CheckpointError(f"{path} is not a checkpoint of the training programs (it has no "
                              f"{', '.join(repr(k) for k in missing)}); train_charlm.py writes them")
    return saved


def tokenizer_of(saved: dict):
    """The tokenizer a checkpoint was trained with (older checkpoints hold a character vocabulary string)."""
    return tokenizers.from_description(saved["tokenizer"])


def claim_out_dir(config: TrainConfig) -> None:
    """A run's folder is its own: a new run does not start in a folder that holds another run's
    checkpoint or metrics, unless --overwrite says to replace them."""
    if config.resume or config.overwrite:
        return
    found = [name for name in (CHECKPOINT_NAME, METRICS_NAME) if os.path.exists(os.path.join(config.out_dir, name))]
    if found:
        raise ConfigError(f"{config.out_dir} holds another run ({' and '.join(found)}); continue it with --resume, "
                          "choose another --out-dir, or pass --overwrite to replace it")


def load_start(config: TrainConfig) -> dict:
    """The checkpoint a run starts from: OUT_DIR's own (--resume), another run's (--init-from), or
    None for a fresh model. Architecture flags given on the command line must agree with it."""
    if config.resume:
        path = os.path.join(config.out_dir, CHECKPOINT_NAME)
        if not os.path.exists(path):
            raise CheckpointError(f"no checkpoint at {path} to resume from")
        saved = read(path, FOR_RESUMING)
    elif config.init_from and is_model_folder(config.init_from):
        path = config.init_from
        saved = read_gpt2_folder(path)
    elif config.init_from:
        path = config.init_from
        if not os.path.exists(path):
            raise CheckpointError(f"--init-from {path}: no such file or folder; give a run's checkpoint "
                                  f"({CHECKPOINT_NAME}) or a Hugging Face GPT-2 folder (config.json, model.safetensors "
                                  "and the tokenizer's files)")
        if os.path.isdir(path):
            raise CheckpointError(f"--init-from {path} is a folder without config.json: give a run's checkpoint "
                                  f"({os.path.join(path, CHECKPOINT_NAME)}) or a Hugging Face GPT-2 folder")
        saved = read(path, FOR_WEIGHTS)
    else:
        return None
    check_against_checkpoint(config, saved["model_settings"], path)
    return saved


def read_gpt2_folder(folder: str) -> dict:
    """A Hugging Face GPT-2 folder as a start like a checkpoint's: its weights, its tokenizer and its architecture.
    Its position table (`positions`) is its longest context; the rows a run trains on (block_size) are chosen by
    the run (model_settings)."""
    try:
        fields, state = hf.read_folder(folder)
        tokenizer = tokenizers.GPT2Tokenizer(folder)
    # a file missing or unreadable, a model GPT cannot be, no tokenizers library
    except (OSError, ValueError, ImportError) as e:
        raise CheckpointError(str(e)) from None
    settings = dict(model="gpt", n_layer=fields["n_layer"], n_head=fields["n_head"], n_embd=fields["n_embd"],
                    block_size=None, positions=fields["block_size"], vocab_size=fields["vocab_size"], dropout=0.0,
                    bias=True)
    return {"model": state, "tokenizer": tokenizer.describe(), "model_settings": settings}


def model_settings(saved: dict, config: TrainConfig) -> dict:
    """The architecture: the checkpoint's when there is one, since its weights must fit. Fine-tuning (--init-from)
    chooses the dropout and the adapters (TrainConfig.CHOSEN_WHEN_FINE_TUNING), and from a GPT-2 folder the rows it
    trains on, at most the model's context."""
    if saved is None:
        return config.model_settings()
    if not config.init_from:
        return saved["model_settings"]
    settings = dict(saved["model_settings"], **{name: getattr(config, name)
                                                for name in TrainConfig.CHOSEN_WHEN_FINE_TUNING})
    if "positions" in settings:
        if config.block_size > settings["positions"]:
            raise ConfigError(f"--block-size {config.block_size} is longer than the context of {config.init_from} "
                              f"({settings['positions']} positions); give at most {settings['positions']}")
        settings["block_size"] = config.block_size
    return settings


def load_model(folder: str) -> tuple:
    """(model, tokenizer) to generate with, from a GPT-2 folder (config.json) or from a run's folder (its
    checkpoint: a character model, or a GPT-2 run with its adapters)."""
    if is_model_folder(folder):
        saved = read_gpt2_folder(folder)
        saved["model_settings"]["block_size"] = saved["model_settings"]["positions"]
    else:
        path = os.path.join(folder, CHECKPOINT_NAME)
        if not os.path.exists(path):
            raise CheckpointError(f"no checkpoint at {path} and no GPT-2 folder (config.json) at {folder}; train one "
                                  f"with examples/train_charlm.py --out-dir {folder}")
        saved = read(path)
    tokenizer = tokenizer_of(saved)
    model = build_model(saved["model_settings"], tokenizer.vocab_size)
    load_weights(model, saved)
    return model, tokenizer


def load_weights(model, saved: dict) -> None:
    """The checkpoint's weights into `model`, which must be the architecture they were saved from. A checkpoint
    of a LoRA run holds its adapters: the model gets them first, of the run's rank."""
    settings = saved.get("model_settings", {})
    try:
        if settings.get("lora_rank") and not lora.lora_layers(model):
            lora.apply_lora(model, settings["lora_rank"], settings["lora_alpha"])
        model.load_state_dict(saved["model"])
    except (KeyError, ValueError) as e:
        raise CheckpointError(f"the checkpoint's weights do not fit its model: {e}") from None


def restore(saved: dict, optimizer, data_rng, rank: int = 0, scaler=None) -> int:
    """Put AdamW's state, the GradScaler's (a float16 run's), and both random streams (rank `rank`'s model
    stream) back as the saved run left them; its iteration. (The weights are already in: they were loaded
    before the optimizer was made.) A scaler the saved run did not have starts afresh."""
    optimizer.load_state_dict(saved["optimizer"])
    if scaler is not None and "grad_scaler" in saved:
        scaler.load_state_dict(saved["grad_scaler"])
    data_rng.bit_generator.state = saved["rng"]["data"]
    own = saved["rng"]["ranks"][rank] if "ranks" in saved["rng"] else saved["rng"]
    random.set_rng_state(own["model"])
    random.set_cuda_rng_state_all(own.get("cuda", {}))     # absent from checkpoints made on a cpu
    return saved["iter"]


def check_world_size(saved: dict, world_size: int, config: TrainConfig) -> None:
    """--resume continues with as many processes as saved the run: each one's share of the batches and
    its random stream depend on how many there are."""
    if not config.resume:
        return
    saved_by = saved.get("world_size", 1)
    if saved_by != world_size:
        how = f"mpiexec -n {saved_by} python -m mpi4py ..." if saved_by > 1 else "one process, without mpiexec"
        raise CheckpointError(f"the run in {config.out_dir} was saved by {saved_by} process(es) and this one has "
                              f"{world_size}; each process's share of the batches and its random stream depend on "
                              f"the number, so resume it the way it ran: {how}")
