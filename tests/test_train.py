"""The training programs end to end: a smoke run, sampling, fine-tuning (and what it freezes),
resume after a kill or Ctrl-C, and one-line errors for bad settings."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tinygrad_gpu import nn
from tinygrad_gpu.train import TrainConfig, freeze

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "4",
        "--eval-iters", "2", "--no-progress", "--num-samples", "1", "--sample-tokens", "40", "--warmup-iters", "5",
        "--lr", "1e-2", "--min-lr", "1e-3"]
TEXT = ("The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs! " * 60)


def _run(script, *args, timeout=240, **popen):
    env = {k: v for k, v in os.environ.items() if k != "TINYGRAD_GPU_DEVICE"}
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, **popen)


def _metrics(out_dir):
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _losses(rows):
    return [(r["iter"], r["train_loss"], r["val_loss"], r["lr"]) for r in rows]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT)
    return str(path)


@pytest.mark.parametrize("model", ["gpt", "lstm"])
def test_smoke_run_writes_metrics_checkpoint_and_samples(tmp_path, corpus, model):
    out = str(tmp_path / "out")
    result = _run("train_charlm.py", "--data", corpus, "--out-dir", out, "--max-iters", "30",
                  "--eval-interval", "10", "--model", model, *TINY)
    assert result.returncode == 0, result.stderr
    rows = _metrics(out)
    assert [r["iter"] for r in rows] == [0, 10, 20, 30]
    assert set(rows[0]) == {"iter", "train_loss", "val_loss", "lr", "tokens_per_sec", "elapsed_s"}
    assert rows[-1]["train_loss"] < rows[0]["train_loss"] - 0.3, rows
    assert os.path.exists(os.path.join(out, "ckpt.safetensors"))
    assert "--- sample 1 ---" in result.stdout and "final: train loss" in result.stdout

    sampled = _run("sample.py", "--out-dir", out, "--num-samples", "2", "--max-new-tokens", "25",
                   "--prompt", "The ")
    assert sampled.returncode == 0, sampled.stderr
    texts = sampled.stdout.split("--- sample ")[1:]
    assert len(texts) == 2 and all(t.split("\n", 1)[1].startswith("The ") for t in texts)


def test_finetune_reports_val_loss_before_and_after(tmp_path, corpus):
    base = str(tmp_path / "base")
    assert _run("train_charlm.py", "--data", corpus, "--out-dir", base, "--max-iters", "20",
                "--eval-interval", "20", *TINY, "--n-layer", "2").returncode == 0
    shop = os.path.join(EXAMPLES, "data", "shop_products.txt")
    common = ["--init-from", os.path.join(base, "ckpt.safetensors"), "--data", shop, "--max-iters", "40", "--lr", "3e-3",
              "--eval-interval", "20", "--eval-iters", "4", "--no-progress", "--num-samples", "0",
              "--out-dir", str(tmp_path / "ft")]
    refused = _run("finetune_charlm.py", *common)
    assert refused.returncode == 2 and "--drop-unknown" in refused.stderr and "Traceback" not in refused.stderr
    result = _run("finetune_charlm.py", *common, "--drop-unknown", "--freeze-embeddings", "--freeze-layers", "1")
    assert result.returncode == 0, result.stderr
    line = [l for l in result.stdout.splitlines() if l.startswith("val loss on the new text")][0]
    before, after = (float(w) for w in line.replace(",", "").split() if w.replace(".", "").isdigit()
                     and "." in w)
    assert after < before, line


def test_freeze_embeddings_finds_them_by_type_not_by_name():
    class PositionTable(nn.Embedding):        # a subclass is an Embedding all the same
        pass

    class Embedding(nn.Linear):               # only the name of one
        pass

    model = nn.Sequential(PositionTable(10, 4), Embedding(4, 4))
    freeze(model, TrainConfig(freeze_embeddings=True))
    assert not model[0].weight.requires_grad
    assert model[1].weight.requires_grad and model[1].bias.requires_grad


def _start(out, corpus, extra=()):
    env = {k: v for k, v in os.environ.items() if k != "TINYGRAD_GPU_DEVICE"}
    return subprocess.Popen([sys.executable, os.path.join(EXAMPLES, "train_charlm.py"), "--data", corpus,
                             "--out-dir", out, "--max-iters", "60", "--eval-interval", "10", "--dropout", "0.1",
                             *TINY, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_iteration(out, iteration, process, timeout=120):
    deadline = time.time() + timeout
    path = os.path.join(out, "metrics.jsonl")
    while time.time() < deadline:
        if os.path.exists(path) and any(r["iter"] >= iteration for r in _metrics(out)):
            return
        if process.poll() is not None:
            pytest.fail(f"training ended early: {process.stderr.read()}")
        time.sleep(0.01)
    pytest.fail("training made no progress")


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
def test_resume_after_a_kill_reproduces_the_uninterrupted_run(tmp_path, corpus, how):
    reference = str(tmp_path / "reference")
    assert _run("train_charlm.py", "--data", corpus, "--out-dir", reference, "--max-iters", "60",
                "--eval-interval", "10", "--dropout", "0.1", *TINY).returncode == 0
    out = str(tmp_path / "killed")
    process = _start(out, corpus)
    _wait_for_iteration(out, 20, process)
    process.send_signal(signal.SIGKILL if how == "SIGKILL" else signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    if how == "SIGINT":
        assert process.returncode == 0 and "interrupted: checkpoint saved" in stdout, stderr
    rows = _metrics(out)
    assert rows[-1]["iter"] < 60, "the run finished before it could be interrupted"
    resumed = _run("train_charlm.py", "--data", corpus, "--out-dir", out, "--max-iters", "60",
                   "--eval-interval", "10", "--dropout", "0.1", "--resume", *TINY)
    assert resumed.returncode == 0 and "resuming from iteration" in resumed.stdout, resumed.stderr
    assert _losses(_metrics(out)) == _losses(_metrics(reference))


@pytest.mark.parametrize("args, message", [
    (["--n-embd", "30", "--n-head", "4"], "divisible"),
    (["--device", "tpu"], "unknown device"),
    (["--data", "/no/such/file.txt"], "no text file"),
    (["--resume"], "no checkpoint"),
    (["--block-size", "5000"], "fewer than block_size"),
    (["--model", "rnn"], "--model"),
])
def test_bad_settings_are_one_line_errors(tmp_path, corpus, args, message):
    base = ["--data", corpus, "--out-dir", str(tmp_path / "o"), "--max-iters", "1"]
    result = _run("train_charlm.py", *base, *args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and message in result.stderr
    assert result.stderr.strip().startswith("error:") and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(__import__("tinygrad_gpu").cuda_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_a_one_line_error(tmp_path, corpus):
    result = _run("train_charlm.py", "--data", corpus, "--out-dir", str(tmp_path / "o"), "--device", "cuda")
    assert result.returncode == 2 and "CUDA is unavailable" in result.stderr and "Traceback" not in result.stderr
