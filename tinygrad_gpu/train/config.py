"""A run's settings: TrainConfig (each field a documented flag), their checks, the model they
describe, and what stays frozen."""
from __future__ import annotations

import dataclasses

from .. import device as devices
from ..nn import Embedding, GPT, GPTConfig, LSTMLanguageModel
from ..records import is_records_file


class ConfigError(ValueError):
    """A combination of settings that cannot work; reported in one line, without a traceback."""


GROUPS = ("data", "model", "optimisation", "schedule", "evaluation and output", "devices")
# What --resume does with each setting (resuming.py). KEPT_ON_RESUME: the text's handling, the optimisation and
# the schedule keep the run's values; another value needs --allow-setting-change. CHANGEABLE_ON_RESUME: how long
# the run goes on and what it reports may change; left out, they keep the run's values too. CHOSEN_EACH_TIME:
# where and how this invocation runs, from its own command line. The architecture is the checkpoint's.
CHANGEABLE_ON_RESUME = ("max_iters", "eval_interval", "eval_iters", "num_samples", "sample_tokens", "price_per_hour",
                        "watts", "grid_gco2_per_kwh")
CHOSEN_EACH_TIME = ("progress", "device", "dtype", "backend", "gradient_checkpointing", "zero_stage")
KEPT_ON_RESUME = ("drop_unknown", "template", "seed", "batch_size", "gradient_accumulation_steps", "lr", "weight_decay",
                  "beta1", "beta2", "grad_clip", "warmup_iters", "lr_decay_iters", "min_lr", "freeze_embeddings",
                  "freeze_layers")


def _flag(default, group: str, help: str, choices=None, shown=None):
    """A field that is also a command-line flag: its group in --help, a sentence, its choices, and how
    its default reads when the value alone would say little (None)."""
    return dataclasses.field(default=default, metadata=dict(group=group, help=help, choices=choices, shown=shown))


@dataclasses.dataclass
class TrainConfig:
    data: str = _flag("builtin", "data", "what to train on: 'builtin' (Python's own help texts, nothing to "
                      "download), 'shakespeare' (tiny-shakespeare, downloaded once and checked), the path of a "
                      "UTF-8 text file, a folder of token files (python -m tinygrad_gpu.prepare), or a table of "
                      "records (.jsonl or .csv) to fine-tune on: prompt and completion, the loss on the "
                      "completions only")
    template: str = _flag(None, "data", "with --data records: a template file that makes each record's prompt "
                          "and completion from its fields (tinygrad_gpu/records.py)", shown="the records' own prompt "
                          "and completion; records without them go through tinygrad_gpu/templates/"
                          "product_description.txt")
    drop_unknown: bool = _flag(False, "data", "leave out the characters that the starting checkpoint's vocabulary "
                               "lacks (with --init-from) instead of stopping")
    seed: int = _flag(1337, "data", "seeds the batches, the initial weights and dropout")
    model: str = _flag("gpt", "model", "the architecture", choices=("gpt", "lstm"))
    n_layer: int = _flag(4, "model", "transformer blocks (LSTM layers)")
    n_head: int = _flag(4, "model", "attention heads per block; must divide --n-embd")
    n_embd: int = _flag(128, "model", "the width of each position's vector")
    block_size: int = _flag(64, "model", "the context: how many characters the model sees at once")
    dropout: float = _flag(0.0, "model", "the probability of zeroing an activation while training, in [0, 1)")
    bias: bool = _flag(False, "model", "biases in the Linear and LayerNorm layers (GPT-2 has them)")
    init_from: str = _flag(None, "model", "start from this checkpoint (fine-tuning); its architecture and "
                           "vocabulary are kept", shown="a new model")
    freeze_embeddings: bool = _flag(False, "model", "do not train the embeddings (with GPT, also the output "
                                    "layer, which shares the token embedding)")
    freeze_layers: int = _flag(0, "model", "do not train the first N transformer blocks (GPT only)")
    lora_rank: int = _flag(0, "model", "with --init-from: train low-rank adapters of this rank on attention's "
                           "c_attn and c_proj instead of every weight (LoRA; 0: every weight trains)")
    lora_alpha: float = _flag(16.0, "model", "LoRA's scale: each adapter's update is multiplied by alpha / rank")
    batch_size: int = _flag(12, "optimisation", "windows of --block-size characters per step")
    gradient_accumulation_steps: int = _flag(None, "optimisation", "micro-batches of --batch-size windows per "
                                             "step, across all processes; each process runs an equal share, so "
                                             "under mpiexec it must be a multiple of their number",
                                             shown="one per process")
    lr: float = _flag(1e-3, "optimisation", "AdamW's peak learning rate")
    weight_decay: float = _flag(0.1, "optimisation", "AdamW's decoupled weight decay, on matrices only")
    beta1: float = _flag(0.9, "optimisation", "AdamW's decay rate of the gradients' mean, in [0, 1)")
    beta2: float = _flag(0.99, "optimisation", "AdamW's decay rate of the squared gradients' mean, in [0, 1)")
    grad_clip: float = _flag(1.0, "optimisation", "clip the gradients' joint norm to this; 0 turns clipping off")
    max_iters: int = _flag(1000, "schedule", "training steps in all")
    warmup_iters: int = _flag(100, "schedule", "steps of linear warmup from 0 to --lr")
    lr_decay_iters: int = _flag(None, "schedule", "the step where the cosine decay reaches --min-lr",
                                shown="--max-iters")
    min_lr: float = _flag(1e-4, "schedule", "the learning rate at the end of the decay")
    eval_interval: int = _flag(250, "evaluation and output", "measure the losses, save a checkpoint and write a "
                               "metrics line every this many steps")
    eval_iters: int = _flag(20, "evaluation and output", "batches per split in each measurement")
    out_dir: str = _flag("out-charlm", "evaluation and output", "this run's folder: ckpt.safetensors, "
                         "metrics.jsonl, loss.png")
    resume: bool = _flag(False, "evaluation and output", "continue the run whose checkpoint is in --out-dir, on "
                         "the same text and with the same settings; only these may change: " +
                         ", ".join("--" + name.replace("_", "-") for name in CHANGEABLE_ON_RESUME + CHOSEN_EACH_TIME))
    allow_data_change: bool = _flag(False, "evaluation and output", "with --resume: continue on the text --data "
                                    "gives, though it is not the text the run trained on")
    allow_setting_change: bool = _flag(False, "evaluation and output", "with --resume: take the settings given on "
                                       "the command line (--lr, --batch-size, ...) from here on, though the run "
                                       "had others")
    overwrite: bool = _flag(False, "evaluation and output", "start a new run in an --out-dir that holds "
                            "another run, replacing it")
    num_samples: int = _flag(2, "evaluation and output", "texts to sample at the end")
    sample_tokens: int = _flag(300, "evaluation and output", "characters per sample")
    progress: bool = _flag(None, "evaluation and output", "a progress bar with the loss and speed",
                           shown="on when the output is a terminal")
    device: str = _flag(None, "devices", "cpu, cuda (cuda:N) or emu (our CUDA kernels on the CPU, slow)",
                        shown="cuda when a GPU is visible, else cpu")
    dtype: str = _flag(None, "devices", "what the matrix products compute in: float32, or bfloat16 / float16 under "
                       "autocast (parameters and AdamW's state stay float32; float16 scales the loss with a "
                       "GradScaler)", choices=("float32", "bfloat16", "float16"),
                       shown="bfloat16 on a GPU of compute capability 8.0 and up, float16 on older GPUs, float32 on "
                       "the CPU")
    backend: str = _flag(None, "devices", "how processes started by mpiexec average their gradients: mpi (host "
                         "memory, cpu) or nccl (GPUs)", choices=("mpi", "nccl"), shown="nccl on cuda, else mpi")
    gradient_checkpointing: bool = _flag(False, "devices", "keep only each transformer block's input in the forward "
                                         "pass and recompute the block in backward: the activations of one block "
                                         "at a time, for a second forward pass (GPT only; the same gradients)")
    zero_stage: int = _flag(0, "devices", "under mpiexec, 1 shards AdamW's state across the processes (ZeRO stage "
                            "1: each keeps and updates its share of the parameters); 0 keeps it whole on each",
                            choices=(0, 1))
    price_per_hour: float = _flag(None, "devices", "what an hour of this machine costs, in dollars: adds the cost "
                                  "so far to metrics.jsonl and to the run's last line", shown="no cost shown")
    watts: float = _flag(None, "devices", "the machine's power draw, in watts: an estimate of the run's energy where "
                         "no counter measures it (NVML on NVIDIA GPUs, RAPL on Linux CPUs), marked as estimated",
                         shown="measured where the hardware can, else none")
    grid_gco2_per_kwh: float = _flag(None, "devices", "the grid's carbon intensity, in grams of CO2 per kWh: adds "
                                     "the run's CO2 to its last line", shown="no CO2 shown")
    # The flags given on the command line (parse_args fills it); None for a TrainConfig made in code. Read it
    # through chosen(), which answers for both.
    given: tuple = dataclasses.field(default=None, metadata=dict(group=None))

    MODEL_FIELDS = ("model", "n_layer", "n_head", "n_embd", "block_size", "dropout", "bias", "lora_rank", "lora_alpha")
    # What a run starting from a trained model (--init-from) may choose for itself: the dropout, the adapters,
    # and, from a GPT-2 folder (whose position table is the model's longest context), the rows it trains on.
    CHOSEN_WHEN_FINE_TUNING = ("dropout", "lora_rank", "lora_alpha")

    def model_settings(self) -> dict:
        return {name: getattr(self, name) for name in self.MODEL_FIELDS}

    def chosen(self) -> tuple:
        """The settings chosen on purpose, which a resumed run takes over its own (resuming.py): the flags given
        on the command line, or, for a TrainConfig made in code, the fields that differ from TrainConfig's
        defaults."""
        if self.given is not None:
            return self.given
        default = TrainConfig()
        return tuple(name for name, value in self.flags().items() if value != getattr(default, name))

    def flags(self) -> dict:
        """The settings that are flags, by name (what a checkpoint records of the run)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata.get("group")}


def validate(config: TrainConfig) -> None:
    """Check the settings (--device's name is device_named's to check). Raises ConfigError with one clear line."""
    def flag(name):
        return "--" + name.replace("_", "-")

    if config.model not in ("gpt", "lstm"):
        raise ConfigError(f"--model must be 'gpt' or 'lstm', got {config.model!r}")
    if config.model == "gpt" and config.n_embd % config.n_head:
        raise ConfigError(f"--n-embd ({config.n_embd}) must be divisible by --n-head ({config.n_head})")
    for name in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "eval_interval", "eval_iters"):
        if getattr(config, name) <= 0:
            raise ConfigError(f"{flag(name)} must be positive, got {getattr(config, name)}")
    for name in ("max_iters", "warmup_iters", "lr", "min_lr", "weight_decay", "grad_clip", "freeze_layers",
                 "num_samples", "sample_tokens"):
        if getattr(config, name) < 0:
            raise ConfigError(f"{flag(name)} must not be negative, got {getattr(config, name)}")
    for name in ("price_per_hour", "watts", "grid_gco2_per_kwh"):
        if getattr(config, name) is not None and getattr(config, name) < 0:
            raise ConfigError(f"{flag(name)} must not be negative, got {getattr(config, name)}")
    for name in ("lr_decay_iters", "gradient_accumulation_steps"):
        if getattr(config, name) is not None and getattr(config, name) <= 0:
            raise ConfigError(f"{flag(name)} must be positive, got {getattr(config, name)}")
    for name in ("dropout", "beta1", "beta2"):
        if not 0 <= getattr(config, name) < 1:
            raise ConfigError(f"{flag(name)} must be in [0, 1), got {getattr(config, name)}")
    if config.resume and config.init_from:
        raise ConfigError("--resume continues OUT_DIR's own run; --init-from starts a new one: pick one")
    for name in ("allow_data_change", "allow_setting_change"):
        if getattr(config, name) and not config.resume:
            raise ConfigError(f"{flag(name)} applies to --resume, which continues a run; a new run takes any "
                              "--data and settings")
    if config.resume and config.overwrite:
        raise ConfigError("--resume continues the run in --out-dir; --overwrite replaces it: pick one")
    if config.template is not None and not is_records_file(config.data):
        raise ConfigError(f"--template makes prompts and completions from records, and --data {config.data} is not a "
                          "table of records (.jsonl or .csv)")
    if config.lora_rank < 0 or config.lora_alpha <= 0:
        raise ConfigError(f"--lora-rank must not be negative and --lora-alpha must be positive, got "
                          f"{config.lora_rank} and {config.lora_alpha}")
    if config.lora_rank and not (config.init_from or config.resume):
        raise ConfigError("--lora-rank adapts a trained model, and a new one has learnt nothing to adapt: give "
                          "--init-from (a run's checkpoint or a GPT-2 folder)")
    if config.zero_stage not in (0, 1):
        raise ConfigError(f"--zero-stage must be 0 (each process keeps all of AdamW's state) or 1 (sharded), got "
                          f"{config.zero_stage}")


def device_named(name: str) -> str:
    """The canonical name of the device --device asks for; one that does not exist is a ConfigError."""
    try:
        return devices.canonical(name)
    except (RuntimeError, ValueError) as e:
        raise ConfigError(str(e)) from None


def check_against_checkpoint(config: TrainConfig, settings: dict, path: str) -> None:
    """Architecture settings chosen on purpose (TrainConfig.chosen: the command line's flags) must agree with the
    checkpoint being loaded, whose architecture wins (its weights must fit); fine-tuning may change the dropout and
    the adapters, and from a GPT-2 folder the rows it trains on (TrainConfig.CHOSEN_WHEN_FINE_TUNING)."""
    chosen = config.chosen()
    free = TrainConfig.CHOSEN_WHEN_FINE_TUNING + (("block_size",) if "positions" in settings else ()) \
        if config.init_from else ()
    for name in TrainConfig.MODEL_FIELDS:
        saved = settings.get(name, getattr(TrainConfig, name))    # older checkpoints lack the newer fields
        if name in chosen and name not in free and getattr(config, name) != saved:
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(config, name)} contradicts the checkpoint "
                              f"{path}, whose {name} is {saved}; leave the flag out to keep the checkpoint's, or "
                              "train a new model")


def build_model(settings: dict, vocab_size: int):
    """The model that `settings` (TrainConfig.model_settings(), or a checkpoint's) describe, without adapters
    (checkpointing.load_weights adds those a checkpoint has). A model from a GPT-2 folder keeps its vocabulary
    size and its position table (`positions`), which may be longer than the rows it trains on (block_size)."""
    vocab_size = settings.get("vocab_size", vocab_size)
    if settings["model"] == "lstm":
        return LSTMLanguageModel(vocab_size, settings["n_embd"], settings["n_layer"], settings["dropout"],
                                 settings["block_size"])
    return GPT(GPTConfig(block_size=settings.get("positions", settings["block_size"]), vocab_size=vocab_size,
                         n_layer=settings["n_layer"], n_head=settings["n_head"], n_embd=settings["n_embd"],
                         dropout=settings["dropout"], bias=settings["bias"]))


def freeze(model, config: TrainConfig) -> None:
    """Stop training the embeddings (--freeze-embeddings) and the first blocks (--freeze-layers):
    their parameters stop requiring grad, so configure_optimizers leaves them out."""
    if config.freeze_embeddings:
        for module in model.modules():
            if isinstance(module, Embedding):
                module.weight.requires_grad_(False)
    if config.freeze_layers:
        if not isinstance(model, GPT):
            raise ConfigError("--freeze-layers applies to GPT models only")
        blocks = list(model.transformer.h)
        if config.freeze_layers > len(blocks):
            raise ConfigError(f"--freeze-layers {config.freeze_layers} is more than the model's "
                              f"{len(blocks)} blocks")
        for block in blocks[:config.freeze_layers]:
            block.requires_grad_(False)
