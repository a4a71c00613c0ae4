"""examples/describe_products.py on a tiny GPT-2 folder built here (random weights, a byte-pair tokenizer trained on
the shop's text) and on a character checkpoint trained for two steps: batched prompts of different lengths give
each product the description it gets alone, each stops at the end-of-text, and mistakes are one line."""
import csv
import json
import os
import re

import pytest

from conftest import example
from tinygrad_gpu.nn import GPT
from tinygrad_gpu.tokenizers import GPT2Tokenizer
from tinygrad_gpu.train import TrainConfig, train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHOP = os.path.join(ROOT, "examples", "data", "shop_products.txt")
FIELDS = ("name", "size", "category", "skin_types", "key_ingredients", "how_to_use", "warnings")
PRODUCTS = [dict(zip(FIELDS, values)) for values in [        # prompts of 87, 170, 88, 158 and 125 tokens
    ("Oat Balm", "50 ml", "moisturiser", ["dry"], ["oat"], "Apply at night.", ""),
    ("Clear Gel Cleanser With Green Tea", "150 ml", "cleanser", ["oily", "combination"],
     ["green tea", "zinc", "salicylic acid"], "Massage onto damp skin for thirty seconds, then rinse well with "
     "lukewarm water.", "Avoid the eyes."),
    ("Rose Mist", "100 ml", "toner", ["all"], ["rose water"], "Spray.", ""),
    ("Barrier Repair Night Cream", "30 ml", "moisturiser", ["dry", "mature", "sensitive"], ["ceramides", "squalane"],
     "Warm a pea-sized amount between your fingers and press into the skin.", "Patch test first."),
    ("Daily Fluid SPF 30", "40 ml", "sunscreen", ["normal"], ["zinc oxide"], "Apply generously before going out.",
     "Reapply every two hours."),
]]


@pytest.fixture(scope="module")
def eos_gpt2(tiny_gpt2, tmp_path_factory):
    """The tiny GPT-2 with <|endoftext|>'s embedding scaled by -10, so that it becomes the likeliest token in some
    contexts (where its logit was negative): greedy decoding ends four of the products at once and the fifth after
    a few tokens."""
    model, tokenizer = GPT.from_pretrained(tiny_gpt2), GPT2Tokenizer(tiny_gpt2)
    model.transformer.wte.weight.data[tokenizer.end_of_text] *= -10
    folder = tmp_path_factory.mktemp("eos-gpt2")
    model.save_pretrained(folder, tokenizer=tokenizer)
    return folder


@pytest.fixture
def products(tmp_path):
    path = tmp_path / "new.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PRODUCTS))
    return path


def describe(model, products, out, *extra):
    return example("describe_products").main(["--model", str(model), "--products", str(products), "--out", str(out),
                                              "--device", "cpu", *extra])


def tokens_reported(text: str) -> int:
    return int(re.search(r": (\d+) tokens generated at", text).group(1))


def test_a_batch_of_five_gives_each_product_its_own_description(tiny_gpt2, products, tmp_path, capsys):
    batched = describe(tiny_gpt2, products, tmp_path / "batched.jsonl", "--temperature", "0", "--batch-size", "5",
                       "--max-new-tokens", "12", "--price-per-hour", "2")
    line = capsys.readouterr().out
    assert re.fullmatch(rf"wrote 5 descriptions to {re.escape(str(tmp_path))}/batched\.jsonl: 60 tokens generated at "
                        r"[\d.]+[kM]? tokens/s, \d+ s, \$[\d.e-]+ at \$2\.00/h\n", line), line
    one_by_one = describe(tiny_gpt2, products, tmp_path / "one.jsonl", "--temperature", "0", "--batch-size", "1",
                          "--max-new-tokens", "12")
    assert batched == one_by_one
    assert [{k: v for k, v in row.items() if k != "generated"} for row in batched] == PRODUCTS   # the input, in order
    assert all(isinstance(row["generated"], str) and row["generated"] for row in batched)
    assert len({row["generated"] for row in batched}) > 1              # each row continues its own prompt
    with open(tmp_path / "batched.jsonl", encoding="utf-8") as f:
        assert [json.loads(line) for line in f] == batched
    assert sorted(os.listdir(tmp_path)) == ["batched.jsonl", "new.jsonl", "one.jsonl"]   # no temporary file left


def test_descriptions_stop_at_the_end_of_text(tiny_gpt2, eos_gpt2, products, tmp_path, capsys):
    options = ["--temperature", "0", "--max-new-tokens", "12"]
    rows = describe(eos_gpt2, products, tmp_path / "out.jsonl", *options)
    generated = tokens_reported(capsys.readouterr().out)
    assert generated < 5 * 12                                          # rows ended before max-new-tokens
    assert not any("<|endoftext|>" in row["generated"] for row in rows)
    assert any(row["generated"] for row in rows) and any(not row["generated"] for row in rows)
    assert rows == describe(eos_gpt2, products, tmp_path / "one.jsonl", "--batch-size", "1", *options)
    capsys.readouterr()
    describe(tiny_gpt2, products, tmp_path / "plain.jsonl", *options)   # whose model never says it: all 12 tokens
    assert tokens_reported(capsys.readouterr().out) == 5 * 12


def test_sampled_descriptions_follow_the_seed(eos_gpt2, products, tmp_path):
    runs = [describe(eos_gpt2, products, tmp_path / "out.jsonl", "--temperature", "1", "--top-k", "50", "--top-p",
                     "0.95", "--max-new-tokens", "8", "--seed", seed) for seed in ("1", "1", "2")]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    assert not any("<|endoftext|>" in row["generated"] for run in runs for row in run)


def test_a_csv_table_and_an_explicit_template_give_the_same(tiny_gpt2, products, tmp_path):
    table = tmp_path / "new.csv"
    with open(table, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows({k: ", ".join(v) if isinstance(v, list) else v for k, v in p.items()} for p in PRODUCTS)
    options = ["--temperature", "0", "--max-new-tokens", "6"]
    want = describe(tiny_gpt2, products, tmp_path / "a.jsonl", *options)
    template = os.path.join(ROOT, "tinygrad_gpu", "templates", "product_description.txt")
    got = describe(tiny_gpt2, table, tmp_path / "b.jsonl", "--template", template, *options)
    assert [row["generated"] for row in got] == [row["generated"] for row in want]


def test_a_character_checkpoint_with_prompt_fields(tmp_path, capsys):
    out = tmp_path / "run"
    train(TrainConfig(data=SHOP, max_iters=2, n_layer=1, n_head=1, n_embd=16, block_size=256, batch_size=2,
                      eval_interval=2, eval_iters=1, num_samples=0, out_dir=str(out)), log=lambda *a: None)
    products = tmp_path / "prompts.jsonl"
    prompts = ["Rose Mist, 100 ml. ", "Barrier Repair Night Cream, 30 ml. Our richest", "Oat Balm, 50 ml."]
    products.write_text("".join(json.dumps({"sku": i, "prompt": p}) + "\n" for i, p in enumerate(prompts)))
    options = ["--max-new-tokens", "40", "--temperature", "0"]
    rows = describe(out, products, tmp_path / "out.jsonl", "--batch-size", "3", *options)
    assert [row["sku"] for row in rows] == [0, 1, 2] and [row["prompt"] for row in rows] == prompts
    assert rows == describe(out, products, tmp_path / "one.jsonl", "--batch-size", "1", *options)
    capsys.readouterr()
    sampled = describe(out, products, tmp_path / "sampled.jsonl", "--max-new-tokens", "40", "--temperature", "1")
    assert tokens_reported(capsys.readouterr().out) < 3 * 40         # some rows wrote a newline, which ends them
    assert all(len(row["generated"]) <= 40 and "\n" not in row["generated"] for row in sampled)


@pytest.mark.parametrize("arguments, message", [
    (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
    (["--temperature", "-0.5"], "--temperature must be 0 or more"),
    (["--top-k", "0"], "--top-k must be at least 1"),
    (["--top-p", "1.5"], r"--top-p must be in \(0, 1\]"),
    (["--top-p", "0"], r"--top-p must be in \(0, 1\]"),
    (["--batch-size", "two"], "argument --batch-size: invalid int value"),
    (["--max-new-tokens", "300"], r"new\.jsonl, line 2: its prompt is 108 tokens, and the model's window holds 84 "
                                  "besides --max-new-tokens"),
    (["--template", "missing.txt"], "missing.txt"),
])
def test_mistakes_are_one_line_and_exit_code_2(tiny_gpt2, products, tmp_path, capsys, arguments, message):
    with pytest.raises(SystemExit) as stopped:
        describe(tiny_gpt2, products, tmp_path / "out.jsonl", *arguments)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert re.search(message, err), err
    assert not (tmp_path / "out.jsonl").exists()


def test_a_folder_without_a_model_is_one_line(products, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        describe(tmp_path, products, tmp_path / "out.jsonl")
    assert stopped.value.code == 2 and "no checkpoint at" in capsys.readouterr().err
