"""Fine-tune a GPT-2 folder on your own data, fully or with LoRA, and write a GPT-2 folder back.

    python examples/finetune_gpt2.py --init-from gpt2                        # the shop's products -> descriptions
    python examples/finetune_gpt2.py --init-from gpt2 --lora-rank 8 --out-dir out-gpt2-lora
    python examples/finetune_gpt2.py --init-from gpt2 --data my_text.txt --block-size 128 --out-dir out-mine
    python examples/finetune_gpt2.py --out-dir out-gpt2-finetune --resume    # after Ctrl-C or a kill

--init-from is a Hugging Face GPT-2 folder already on disk (config.json, model.safetensors, and
tokenizer.json or vocab.json + merges.txt); nothing is downloaded. --data is a table of records
(.jsonl or .csv: each record's prompt and completion, or fields a --template makes them from; the
loss counts the completions only), a text file cut into windows of --block-size tokens, or a folder
of token files (python -m tinygrad_gpu.prepare). By default it is the shop's 136 product records,
examples/data/shop_products.jsonl, which the template tinygrad_gpu/templates/product_description.txt
turns into a prompt of the product's facts and its description as the completion. The last tenth is
held out: its val loss is shown before the first step and after the last.

It runs the training programs' loop (tinygrad_gpu/train): checkpoints in --out-dir every
--eval-interval steps, --resume exactly where a run stopped, metrics.jsonl, the cost, --dtype,
data parallel under mpiexec, one-line errors. With --lora-rank, only low-rank adapters on
attention's c_attn and c_proj train (tinygrad_gpu/nn/lora.py), and without --lr at 1e-3 rather
than the 1e-4 of full fine-tuning (adapters start at zero). At the end, OUT_DIR/huggingface
receives a GPT-2 folder that this project and `transformers` both load (adapters merged into the
weights), and, for LoRA, OUT_DIR/adapter.safetensors the adapters alone.
"""
import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # run from a checkout

import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu.nn import lora  # noqa: E402
from tinygrad_gpu.train import TrainConfig, one_line_errors, parse_args, run  # noqa: E402
from tinygrad_gpu.train.checkpointing import load_model  # noqa: E402
from tinygrad_gpu.train.config import ConfigError  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORT_NAME = "huggingface"         # OUT_DIR/huggingface: the GPT-2 folder written at the end
DEFAULTS = TrainConfig(data=os.path.join(HERE, "data", "shop_products.jsonl"), out_dir="out-gpt2-finetune",
                       block_size=384, batch_size=4, max_iters=100, lr=1e-4, min_lr=1e-5, warmup_iters=10,
                       weight_decay=0.0, beta2=0.95, eval_interval=25, eval_iters=10, num_samples=1, sample_tokens=80)
LORA_LR = 1e-3                      # adapters start at zero and need larger steps than the weights themselves


def parse(argv=None) -> TrainConfig:
    config = parse_args(argv, defaults=DEFAULTS, description=__doc__.split("\n\n")[0])
    if config.lora_rank and "lr" not in config.chosen():
        config = dataclasses.replace(config, lr=LORA_LR, min_lr=LORA_LR / 10)
    return config


def main(argv=None) -> dict:
    config = parse(argv)
    with one_line_errors():
        if not (config.init_from or config.resume):
            raise ConfigError("finetune_gpt2.py adapts a trained model: give --init-from (a GPT-2 folder), or "
                              "--resume to continue the run in --out-dir")
    summary = run(config)           # ends the program on Ctrl-C (exit code 130) and on one-line errors
    if summary["rank"]:             # under mpiexec, rank 0 writes the folder
        return summary
    if summary["metrics"]:
        before, after = summary["metrics"][0], summary["metrics"][-1]
        print(f"val loss on the held-out data: {before['val_loss']:.4f} at iteration {before['iter']}, "
              f"{after['val_loss']:.4f} at iteration {after['iter']}")
    return dict(summary, model=export(config.out_dir))


def export(out_dir: str):
    """The run's last checkpoint as a GPT-2 folder (OUT_DIR/huggingface), and a LoRA run's adapters alone
    (OUT_DIR/adapter.safetensors); the model written."""
    model, tokenizer = load_model(out_dir)
    adapter = lora.lora_state_dict(model)
    if adapter:
        tg.save(adapter, os.path.join(out_dir, "adapter.safetensors"))
        lora.merge(model)           # plain GPT-2 weights again, for the folder
    folder = os.path.join(out_dir, EXPORT_NAME)
    model.save_pretrained(folder, tokenizer=tokenizer)
    print(f"wrote a GPT-2 folder to {folder}" + (" (and the adapters: adapter.safetensors)" if adapter else ""))
    return model


if __name__ == "__main__":
    main()
