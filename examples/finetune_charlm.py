"""Fine-tune a trained character model on your own text, e.g. a shop's product descriptions.

    python examples/train_charlm.py                    # first, a base model in out-charlm/
    python examples/finetune_charlm.py                 # then adapt it to examples/data/shop_products.txt
    python examples/finetune_charlm.py --data mine.txt --freeze-embeddings --freeze-layers 2 --out-dir out-mine

It starts from --init-from (a checkpoint of ours), keeps its architecture and vocabulary
(an architecture flag that says otherwise is an error), and continues training on --data with
a lower learning rate, in its own --out-dir; optionally the embeddings and
the first transformer blocks stay frozen, which protects what the base model learnt when the
new text is small. The val loss on the new text is shown before the first step and after
the last. Characters the base vocabulary lacks are an error unless --drop-unknown is given.
(GPT-2 checkpoints load with GPT.from_pretrained, but they need GPT-2's own byte-pair
tokenizer, which this project does not ship; a character model's checkpoint fits here.)
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # run from a checkout

from tinygrad_gpu.train import TrainConfig, parse_args, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULTS = TrainConfig(init_from=os.path.join("out-charlm", "ckpt.safetensors"),
                       data=os.path.join(HERE, "data", "shop_products.txt"), out_dir="out-finetune",
                       lr=3e-4, min_lr=3e-5, warmup_iters=20, max_iters=200, eval_interval=50, eval_iters=10,
                       batch_size=8)

if __name__ == "__main__":
    summary = run(parse_args(defaults=DEFAULTS, description=__doc__.split("\n\n")[0]))
    if summary["metrics"]:
        before, after = summary["metrics"][0], summary["metrics"][-1]
        print(f"val loss on the new text: {before['val_loss']:.4f} before fine-tuning, "
              f"{after['val_loss']:.4f} after {after['iter']} iterations")
