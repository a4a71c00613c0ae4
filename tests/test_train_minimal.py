"""examples/train_minimal.py, the training loop on one page, is train_charlm.py's loop: run with the same
settings, both measure the same losses. And it stays one page of the public API."""
import ast
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINIMAL = os.path.join(ROOT, "examples", "train_minimal.py")
# Small enough for a few seconds on 2 cores; dropout on, so that its random stream must follow the same seed too.
SMALL = {"n-layer": 1, "n-head": 2, "n-embd": 16, "block-size": 16, "batch-size": 4, "dropout": 0.1,
         "max-iters": 30, "eval-interval": 10, "eval-iters": 2, "warmup-iters": 5, "lr": 1e-2, "min-lr": 1e-3}


def _run(script, *args):
    # Each program picks its default device as a user's run would: the cpu, or in the cuda pass the CuPy
    # stand-in (bfloat16 under autocast), with our kernels as their NumPy references (fast enough there).
    env = {k: v for k, v in os.environ.items() if k != "TINYGRAD_GPU_DEVICE"}
    env["TINYGRAD_GPU_STANDIN_KERNELS"] = "reference"
    result = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script), *args], capture_output=True,
                            text=True, timeout=240, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_train_minimal_measures_the_losses_train_charlm_measures(tmp_path):
    flags = [f"--{name}={value}" for name, value in SMALL.items()]
    printed = re.findall(r"^iter (\d+): train loss (\d+\.\d{4}), val loss (\d+\.\d{4})$",
                         _run("train_minimal.py", *flags), flags=re.M)
    _run("train_charlm.py", *flags, f"--out-dir={tmp_path}", "--no-progress", "--num-samples=0")
    with open(tmp_path / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    assert [int(it) for it, _, _ in printed] == [row["iter"] for row in rows] == [0, 10, 20, 30]
    # The same operations in the same order on the same numbers: the losses are equal to the bit. What is
    # compared is what each writes down: train_minimal's to 4 decimals, metrics.jsonl's rounded to 6, so they
    # may differ by those roundings alone (5e-5 + 5e-7); any real difference in the data, seeds, initialisation,
    # schedule or update shows as more within a few steps.
    for (it, train, val), row in zip(printed, rows):
        for shown, kept in ((train, row["train_loss"]), (val, row["val_loss"])):
            assert abs(float(shown) - kept) <= 5e-5 + 5e-7 + 1e-12, (it, printed, rows)
    assert float(printed[-1][1]) < float(printed[0][1]) - 0.5, printed     # it trained: not two untrained models


def test_train_minimal_is_one_page_of_the_public_api():
    with open(MINIMAL, encoding="utf-8") as f:
        source = f.read()
    assert len(source.splitlines()) <= 100, "train_minimal.py is the loop on one page: at most 100 lines"
    tree = ast.parse(source)
    private = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tinygrad_gpu"):
            private += [node.module] if any(part.startswith("_") for part in node.module.split(".")) else []
            private += [alias.name for alias in node.names if alias.name.startswith("_")]
        elif isinstance(node, ast.Import):
            private += [a.name for a in node.names if a.name.startswith("tinygrad_gpu") and "._" in a.name]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.endswith("__"):
            private.append(node.attr)       # tg._x, or a private part of what tg made (model._init_weights)
    assert not private, f"train_minimal.py uses tinygrad_gpu's private names: {private}"
