"""Compare models on products they never saw: how well each predicts their descriptions, and how its own read.

    python examples/evaluate_descriptions.py --models tiny-gpt2-base/huggingface out-shop/huggingface

For each --models folder (a GPT-2 folder or a run folder of ours), on the held-out products
(examples/data/shop_products_heldout.jsonl by default), through the template that made the training
prompts:
- loss: the mean cross-entropy of the held-out descriptions' tokens given their prompts (and of the
  end-of-text after each), in nats per token: the val loss of fine-tuning, on all held-out products;
- descriptions written for them (describe_products.py's batched generation, --temperature 0 by default:
  the likeliest token each time, so the figures do not depend on a draw), measured plainly:
  - ingredients named: the share of the products' key ingredients that their descriptions name
    (case-insensitive), the facts a shop most needs right;
  - copied: the share of descriptions holding a sentence of at least --min-words words found word
    for word in a training description (--train), which says the model recites rather than writes.
The table, and each model's descriptions in --out-dir, are what the README quotes.
"""
import importlib.util
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # run from a checkout

import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu import records  # noqa: E402
from tinygrad_gpu.train import one_line_errors  # noqa: E402
from tinygrad_gpu.train.checkpointing import load_model  # noqa: E402
from tinygrad_gpu.train.cli import Parser  # noqa: E402
from tinygrad_gpu.train.config import ConfigError, device_named  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _example(name: str):
    """Another example program as a module (the examples are no package)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@tg.no_grad()
def description_loss(model, tokenizer, examples: list, device: str, batch_size: int = 8) -> float:
    """Mean cross-entropy per completion token (the end-of-text included) over all `examples`, each in a row as long
    as the longest example, at most the model's context (a longer example is cut there)."""
    longest = max(len(tokenizer.encode(p)) + len(tokenizer.encode(c)) for p, c in examples)
    rows, _ = records.completion_rows(examples, min(longest, model.config.block_size), tokenizer)
    model.eval()
    total, count = 0.0, 0
    for first in range(0, len(rows), batch_size):
        batch = np.stack(rows[first:first + batch_size])
        x, y = (tg.tensor(batch[:, i], device=device) for i in (0, 1))
        tokens = int((batch[:, 1] != records.IGNORE_INDEX).sum())
        total += model(x, y)[1].item() * tokens         # the batch's mean, weighted by its tokens
        count += tokens
    return total / count


def sentences(text: str, min_words: int) -> list:
    """The sentences of `text` with at least `min_words` words, normalised for comparison (lower case, single
    spaces)."""
    parts = (" ".join(part.lower().split()) for part in re.split(r"(?<=[.!?])\s+", text))
    return [part for part in parts if len(part.split()) >= min_words]


def fit(rows: list, training_sentences: set, min_words: int) -> dict:
    """The plain measures of generated descriptions (the module's docstring)."""
    named = total = copied = 0
    for row in rows:
        text = row["generated"].lower()
        ingredients = row.get("key_ingredients") or []
        if isinstance(ingredients, str):            # a CSV cell: "colloidal oat, glycerin"
            ingredients = [part.strip() for part in ingredients.split(",") if part.strip()]
        named += sum(ingredient.lower() in text for ingredient in ingredients)
        total += len(ingredients)
        copied += any(sentence in training_sentences for sentence in sentences(row["generated"], min_words))
    return {"ingredients_named": named / max(total, 1), "copied": copied / len(rows)}


def main(argv=None) -> list:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", required=True, help="GPT-2 folders or run folders, compared in order "
                        "(before fine-tuning, then after)")
    parser.add_argument("--products", default=os.path.join(HERE, "data", "shop_products_heldout.jsonl"),
                        help="the held-out products, with their descriptions (default: %(default)s)")
    parser.add_argument("--train", default=os.path.join(HERE, "data", "shop_products.jsonl"), help="the training "
                        "records, whose descriptions a copied sentence is looked up in (default: %(default)s)")
    parser.add_argument("--template", default=records.DEFAULT_TEMPLATE, help="makes prompts and descriptions from "
                        "the records (default: %(default)s)")
    parser.add_argument("--out-dir", default="evaluation", help="each model's descriptions, as <n>-<name>.jsonl "
                        "(default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=160, help="(default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=0.0, help="(default: %(default)s: the likeliest token)")
    parser.add_argument("--min-words", type=int, default=6, help="the shortest sentence that counts as copied "
                        "(default: %(default)s: short ones such as 'Fragrance free.' recur by themselves)")
    parser.add_argument("--device", default=None)
    args = parser.parse_args(argv)
    describe = _example("describe_products")
    with one_line_errors():
        device = device_named(args.device)
        if args.min_words < 1 or args.max_new_tokens < 1:
            raise ConfigError("--min-words and --max-new-tokens must be at least 1")
        template = records.Template.from_file(args.template)
        table = records.read_records(args.products)
        examples = records.examples_from(table, template)
        training = {s for _, c in records.examples_from(records.read_records(args.train), template)
                    for s in sentences(c, args.min_words)}
        models = [(folder, *load_model(folder)) for folder in args.models]
        os.makedirs(args.out_dir, exist_ok=True)
        results = []
        for number, (folder, model, tokenizer) in enumerate(models, 1):
            model.to(device)
            loss = description_loss(model, tokenizer, examples, device)
            out = os.path.join(args.out_dir, f"{number}-{os.path.basename(os.path.normpath(folder))}.jsonl")
            device_flag = ["--device", args.device] if args.device else []
            rows = describe.main(["--model", folder, "--products", args.products, "--out", out, "--template",
                                  args.template, "--max-new-tokens", str(args.max_new_tokens), "--temperature",
                                  str(args.temperature), "--no-progress", *device_flag])
            results.append({"model": folder, "loss": loss, **fit(rows, training, args.min_words)})
    print(f"{len(table)} held-out products; loss in nats per description token; ingredients named: share of their "
          f"key ingredients the descriptions name; copied: descriptions with a sentence of {args.min_words}+ words "
          "from a training description")
    print(f"{'model':40} {'loss':>7} {'ingredients named':>18} {'copied':>7}")
    for r in results:
        print(f"{r['model'][-40:]:40} {r['loss']:7.3f} {r['ingredients_named']:18.0%} {r['copied']:7.0%}")
    with open(os.path.join(args.out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
