"""examples/finetune_gpt2.py end to end on a tiny GPT-2 folder built here: random weights in GPT-2's
layout and a byte-pair tokenizer trained on the shop's text with the `tokenizers` library. On the shop's
product records (the loss on the descriptions only), full and LoRA fine-tuning lower the val loss, the
folder written at the end loads back with the same logits, a run resumes exactly, and every mistake is
one line."""
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import tinygrad_gpu as tg
from conftest import CUDA_PASS, example
from tinygrad_gpu.nn import GPT
from tinygrad_gpu.tokenizers import GPT2Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHOP = os.path.join(ROOT, "examples", "data", "shop_products.txt")
QUIET = ["--no-progress", "--eval-iters", "1", "--warmup-iters", "2", "--num-samples", "0"]


def _run(tiny_gpt2, out, *flags):
    return example("finetune_gpt2").main(["--init-from", str(tiny_gpt2), "--out-dir", str(out), *QUIET, *flags])


def _val(result):
    """The val loss before the first step and after the last."""
    return result["metrics"][0]["val_loss"], result["metrics"][-1]["val_loss"]


@pytest.mark.parametrize("lora_rank", [0, 8])
def test_fine_tuning_on_the_shop_records_lowers_the_val_loss_and_writes_a_folder_that_loads(
        tiny_gpt2, tmp_path, lora_rank, capsys):
    out = tmp_path / "out"
    result = _run(tiny_gpt2, out, "--batch-size", "2", "--max-iters", "30", "--eval-interval", "30", "--lr", "3e-3",
                  "--lora-rank", str(lora_rank), "--price-per-hour", "2", "--num-samples", "1", "--sample-tokens", "8")
    before, after = _val(result)
    # LoRA trains attention's adapters only, which move a tiny random model's predictions less
    assert after < before - (0.01 if lora_rank else 0.1)
    printed = capsys.readouterr().out
    assert "the records have no prompt and completion fields: making them with the template" in printed
    assert f"val loss on the held-out data: {before:.4f} at iteration 0, {after:.4f} at iteration 30" in printed
    assert (out / "adapter.safetensors").exists() == bool(lora_rank)
    folder = out / "huggingface"
    reloaded = GPT.from_pretrained(folder)
    tokenizer = GPT2Tokenizer(folder)
    ids = tg.tensor(tokenizer.encode("Gentle cleanser with ceramides")[None, :32])
    with tg.no_grad():
        want, got = result["model"].eval()(ids)[0], reloaded.eval()(ids)[0]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    config = json.loads((folder / "config.json").read_text())
    assert config["eos_token_id"] == config["bos_token_id"] == tokenizer.end_of_text is not None
    assert isinstance(result["samples"][0], str)
    # 30 steps of 2 rows of 384 tokens
    cost = r"^trained 23\.0k tokens at [\d.]+[kMGT]? tokens/s, [\d.]+ [kMGT]?FLOP, .*\$[\d.e-]+ at \$2\.00/h$"
    assert re.search(cost, printed, re.M)


@pytest.mark.skipif(CUDA_PASS, reason="its processes run on the cpu: once, in the first pass")
def test_a_killed_run_resumes_to_the_run_that_was_not(tiny_gpt2, tmp_path):
    """With LoRA and dropout: a run killed (SIGKILL) after its checkpoint at iteration 10 and resumed gives the
    uninterrupted run's losses at every evaluation and its adapters bit for bit: the adapters, AdamW's state, the
    batches' and dropout's random streams all come back from the checkpoint."""
    flags = ["--init-from", str(tiny_gpt2), *QUIET, "--batch-size", "2", "--max-iters", "30", "--eval-interval", "5",
             "--lora-rank", "4", "--dropout", "0.1", "--device", "cpu"]
    env = {k: v for k, v in os.environ.items() if k != "TINYGRAD_GPU_DEVICE"}
    program = [sys.executable, os.path.join(ROOT, "examples", "finetune_gpt2.py")]
    whole = subprocess.run([*program, *flags, "--out-dir", str(tmp_path / "whole")], capture_output=True, text=True,
                           env=env, timeout=300)
    assert whole.returncode == 0, whole.stderr
    killed = subprocess.Popen([*program, *flags, "--out-dir", str(tmp_path / "killed")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 120
    while not any(row["iter"] >= 10 for row in _rows(tmp_path / "killed")) and time.time() < deadline:
        assert killed.poll() is None, "the run ended before it could be killed"
        time.sleep(0.01)
    killed.kill()
    killed.wait()
    assert _rows(tmp_path / "killed")[-1]["iter"] < 30, "the run finished before it was killed"
    resumed = subprocess.run([*program, "--out-dir", str(tmp_path / "killed"), "--resume", "--device", "cpu",
                              "--no-progress"], capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0 and "resuming from iteration" in resumed.stdout, resumed.stderr
    losses = [[(r["iter"], r["train_loss"], r["val_loss"]) for r in _rows(tmp_path / name)]
              for name in ("whole", "killed")]
    assert losses[0] == losses[1] and len(losses[0]) == 7
    adapters = [tg.load(str(tmp_path / name / "adapter.safetensors")) for name in ("whole", "killed")]
    for name, array in adapters[0].items():
        np.testing.assert_array_equal(adapters[1][name].numpy(), array.numpy(), err_msg=name)


def _rows(out):
    path = os.path.join(out, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def test_text_files_still_fine_tune_in_windows(tiny_gpt2, tmp_path, capsys):
    result = _run(tiny_gpt2, tmp_path / "out", "--data", SHOP, "--block-size", "32", "--batch-size", "4",
                  "--max-iters", "20", "--eval-interval", "20", "--lr", "3e-3")
    before, after = _val(result)
    assert after < before - 0.1 and "train 59,1" not in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--batch-size", "0"], "error: --batch-size must be positive, got 0"),
    (["--block-size", "400"], "error: --block-size 400 is longer than the context of {tiny} (384 positions); give at "
                              "most 384"),
    (["--init-from", "{tmp}/nowhere"], "error: --init-from {tmp}/nowhere: no such file or folder; give a run's "
                                       "checkpoint"),
    (["--data", "{tmp}"], "error: --data {tmp} is a folder without meta.json"),
    (["--data", SHOP, "--template", "t.txt"], "error: --template makes prompts and completions from records"),
    (["--lora-rank", "-2"], "error: --lora-rank must not be negative"),
])
def test_mistakes_are_one_line_errors(tiny_gpt2, tmp_path, capsys, flags, message):
    flags = [f.format(tmp=tmp_path, tiny=tiny_gpt2) for f in flags]
    with pytest.raises(SystemExit) as stopped:
        _run(tiny_gpt2, tmp_path / "out", "--max-iters", "1", *flags)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.startswith(message.format(tmp=tmp_path, tiny=tiny_gpt2)), err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_an_existing_run_is_not_overwritten_and_a_start_is_needed(tiny_gpt2, tmp_path, capsys):
    _run(tiny_gpt2, tmp_path / "out", "--batch-size", "2", "--max-iters", "1", "--block-size", "128")
    before = (tmp_path / "out" / "ckpt.safetensors").read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        _run(tiny_gpt2, tmp_path / "out", "--max-iters", "1")
    assert stopped.value.code == 2 and "holds another run" in capsys.readouterr().err
    assert (tmp_path / "out" / "ckpt.safetensors").read_bytes() == before
    with pytest.raises(SystemExit) as stopped:
        example("finetune_gpt2").main(["--out-dir", str(tmp_path / "new")])
    assert stopped.value.code == 2 and "give --init-from (a GPT-2 folder)" in capsys.readouterr().err


def test_sample_py_reads_the_written_folder_with_and_without_the_cache(tiny_gpt2, capsys):
    sample = example("sample")
    texts = []
    for extra in ([], ["--no-cache"]):
        sample.main(["--out-dir", str(tiny_gpt2), "--prompt", "Serum", "--num-samples", "2", "--max-new-tokens", "12",
                     "--temperature", "0.9", "--top-p", "0.9", "--seed", "5", "--device", "cpu", *extra])
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and texts[0].count("--- sample") == 2 and "Serum" in texts[0]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_fine_tuning_in_half_precision_lowers_the_val_loss_and_keeps_float32_weights(tiny_gpt2, tmp_path, dtype,
                                                                                     capsys):
    result = _run(tiny_gpt2, tmp_path / "out", "--batch-size", "2", "--block-size", "128", "--max-iters", "20",
                  "--eval-interval", "20", "--lr", "3e-3", "--dtype", dtype)
    assert f"computing in {dtype}" in capsys.readouterr().out
    before, after = _val(result)
    assert after < before - 0.1
    assert {p.dtype for p in result["model"].parameters()} == {tg.float32}     # autocast casts copies only


def test_gradient_checkpointing_fine_tunes_to_the_same_weights(tiny_gpt2, tmp_path):
    """--gradient-checkpointing recomputes each block in backward, dropout's masks too: the same model, bit for bit."""
    results = []
    for extra in ([], ["--gradient-checkpointing"]):
        results.append(_run(tiny_gpt2, tmp_path / str(len(extra)), "--batch-size", "2", "--block-size", "128",
                            "--max-iters", "4", "--eval-interval", "4", "--dropout", "0.1", *extra))
    assert _val(results[0]) == _val(results[1])
    for (name, p), q in zip(results[0]["model"].named_parameters(), results[1]["model"].parameters()):
        np.testing.assert_array_equal(q.numpy(), p.numpy(), err_msg=name)


def test_a_lora_runs_checkpoint_fine_tunes_on_with_every_weight(tiny_gpt2, tmp_path, capsys):
    """--init-from a LoRA run's checkpoint: its adapters are merged into the weights, which all train from there."""
    _run(tiny_gpt2, tmp_path / "lora", "--batch-size", "2", "--max-iters", "2", "--lora-rank", "4",
         "--block-size", "128")
    capsys.readouterr()
    example("finetune_gpt2").main(["--init-from", str(tmp_path / "lora" / "ckpt.safetensors"), "--out-dir",
                                   str(tmp_path / "next"), *QUIET, "--batch-size", "2", "--max-iters", "2",
                                   "--block-size", "128"])
    assert "trained)" not in capsys.readouterr().out            # the parameter count names no frozen share
    saved = tg.load(str(tmp_path / "next" / "ckpt.safetensors"))
    assert saved["model_settings"]["lora_rank"] == 0 and not any("lora" in name for name in saved["model"])


def test_an_edited_template_is_refused_on_resume(tiny_gpt2, tmp_path, capsys):
    template = tmp_path / "t.txt"
    template.write_text("Product: {name}\n<completion>\n{description}\n")
    _run(tiny_gpt2, tmp_path / "out", "--template", str(template), "--batch-size", "2", "--max-iters", "2",
         "--block-size", "128")
    template.write_text("Name: {name}\n<completion>\n{description}\n")
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        example("finetune_gpt2").main(["--out-dir", str(tmp_path / "out"), "--resume", "--max-iters", "4", *QUIET])
    assert stopped.value.code == 2 and "the run's text or its --template has changed" in capsys.readouterr().err
