"""The training programs end to end: a smoke run, sampling, fine-tuning (and what it freezes),
resume after a kill or Ctrl-C, and one-line errors for bad settings."""
import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import tinygrad_gpu as tg
from tinygrad_gpu import nn
from tinygrad_gpu.train import TrainConfig, freeze

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "4",
        "--eval-iters", "2", "--no-progress", "--num-samples", "1", "--sample-tokens", "40", "--warmup-iters", "5",
        "--lr", "1e-2", "--min-lr", "1e-3"]
TEXT = ("The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs! " * 60)


@pytest.fixture(autouse=True)
def _stand_in_kernels_as_references(monkeypatch):
    """Whole training runs are too slow for the emulator: on the CuPy stand-in (the cuda pass) our kernels
    run as their NumPy references here, subprocesses included. Each kernel is proven against its reference
    on emu (test_kernels.py), and each adapter against the kernel (test_standin_kernel_references.py)."""
    monkeypatch.setenv("TINYGRAD_GPU_STANDIN_KERNELS", "reference")


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
    # cost fields only with --price-per-hour; energy fields where a counter measures (RAPL, NVML) or with --watts
    assert set(rows[0]) - {"energy_kwh", "energy_source"} == {"iter", "train_loss", "val_loss", "lr", "tokens_per_sec",
                                                               "world_size", "dtype", "elapsed_s", "flops",
                                                               "tflops_per_sec", "mfu"}
    # the default: float32 on the cpu, bfloat16 on a GPU of compute capability 8.0 (the stand-in's, in the cuda pass)
    assert rows[0]["dtype"] == ("bfloat16" if tg.cuda_available() else "float32")
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
    rows = _metrics(out)
    if how == "SIGINT":
        # exit code 130 (128 + SIGINT) once the checkpoint is saved, so that `train && next` stops too
        assert process.returncode == 130 and "interrupted: checkpoint saved" in stdout, stderr
        stopped = int(stdout.split("interrupted: checkpoint saved at iteration ")[1].split(";")[0])
        last = stdout.strip().splitlines()[-1]           # the iteration reached, and the last losses measured
        assert last.startswith(f"stopped at iteration {stopped} of 60; last measured at iteration {rows[-1]['iter']}: "
                               f"train loss {rows[-1]['train_loss']:.4f}, val loss {rows[-1]['val_loss']:.4f}"), last
    assert rows[-1]["iter"] < 60, "the run finished before it could be interrupted"
    resumed = _run("train_charlm.py", "--data", corpus, "--out-dir", out, "--max-iters", "60",
                   "--eval-interval", "10", "--dropout", "0.1", "--resume", *TINY)
    assert resumed.returncode == 0 and "resuming from iteration" in resumed.stdout, resumed.stderr
    assert _losses(_metrics(out)) == _losses(_metrics(reference))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_half_precision_run_records_its_dtype_and_resumes_exactly(tmp_path, corpus, dtype):
    """--dtype trains under autocast (float16 with a GradScaler, whose scale and growth tracker the
    checkpoint keeps): a run stopped at iteration 20 and resumed gives the uninterrupted run's losses."""
    common = ["--data", corpus, "--eval-interval", "10", "--lr-decay-iters", "40", "--dtype", dtype, *TINY]
    reference, resumed = str(tmp_path / "reference"), str(tmp_path / "resumed")
    whole = _run("train_charlm.py", *common, "--out-dir", reference, "--max-iters", "40")
    assert whole.returncode == 0 and f"computing in {dtype} (autocast" in whole.stdout, whole.stderr
    assert ("GradScaler" in whole.stdout) == (dtype == "float16")
    assert _run("train_charlm.py", *common, "--out-dir", resumed, "--max-iters", "20").returncode == 0
    saved = tg.load(os.path.join(resumed, "ckpt.safetensors"))
    assert ("grad_scaler" in saved) == (dtype == "float16")
    again = _run("train_charlm.py", *common, "--out-dir", resumed, "--max-iters", "40", "--resume")
    assert again.returncode == 0, again.stderr
    rows = _metrics(resumed)
    assert _losses(rows) == _losses(_metrics(reference)) and {r["dtype"] for r in rows} == {dtype}
    assert rows[-1]["val_loss"] < rows[0]["val_loss"] - 0.5                # it learns
    final, reference_final = (tg.load(os.path.join(folder, "ckpt.safetensors")) for folder in (resumed, reference))
    # the scaler went on from the saved one (a fresh one would count 20 clean steps, not the whole run's)
    assert final.get("grad_scaler") == reference_final.get("grad_scaler") and final["dtype"] == dtype
    # resumed without --dtype, a run keeps the dtype it was saved in
    kept = _run("train_charlm.py", *[a for a in common if a not in ("--dtype", dtype)], "--out-dir", resumed,
                "--max-iters", "50", "--resume")
    assert kept.returncode == 0 and f"computing in {dtype}" in kept.stdout, kept.stderr


@pytest.mark.parametrize("args, message", [
    (["--dtype", "float64"], "invalid choice"),
    (["--n-embd", "30", "--n-head", "4"], "divisible"),
    (["--device", "tpu"], "unknown device"),
    (["--data", "/no/such/file.txt"], "no text file"),
    (["--resume"], "no checkpoint"),
    (["--block-size", "5000"], "fewer than block_size"),
    (["--model", "rnn"], "--model"),
    (["--lr", "-0.001"], "--lr must not be negative"),
    (["--beta2", "1.5"], "--beta2 must be in [0, 1)"),
    (["--lr", "fast"], "invalid float value"),
    (["--grad-clip", "-1"], "--grad-clip"),
    (["--warmup-iters", "-5"], "--warmup-iters"),
    (["--freeze-layers", "3", "--n-layer", "2"], "more than the model's 2 blocks"),
    (["--no-such-flag"], "unrecognized arguments"),
    (["--resume", "--overwrite"], "pick one"),
    (["--price-per-hour", "-2"], "--price-per-hour must not be negative"),
])
def test_bad_settings_are_one_line_errors(tmp_path, corpus, args, message):
    base = ["--data", corpus, "--out-dir", str(tmp_path / "o"), "--max-iters", "1"]
    result = _run("train_charlm.py", *base, *args)
    _assert_one_line_error(result, message)


def _assert_one_line_error(result, message, code=2):
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and message in result.stderr, result.stderr
    assert result.stderr.strip().startswith("error:") and len(result.stderr.strip().splitlines()) == 1


@pytest.fixture
def trained(tmp_path, corpus):
    """A finished tiny run's folder (2 layers)."""
    out = str(tmp_path / "base")
    result = _run("train_charlm.py", "--data", corpus, "--out-dir", out, "--max-iters", "10", "--eval-interval", "10",
                  *TINY, "--n-layer", "2", "--num-samples", "0")
    assert result.returncode == 0, result.stderr
    return out


def test_a_new_run_does_not_replace_another_runs_folder(tmp_path, corpus, trained):
    """The README's runs each have a folder; a new run in another run's folder is refused, and the other run's
    checkpoint and metrics stay as they were, until --overwrite says to replace them."""
    files = {name: open(os.path.join(trained, name), "rb").read() for name in ("ckpt.safetensors", "metrics.jsonl")}
    other = ["--data", corpus, "--out-dir", trained, "--max-iters", "10", "--eval-interval", "5", *TINY]
    refused = _run("train_charlm.py", *other, "--model", "lstm")
    _assert_one_line_error(refused, "holds another run")
    assert all(option in refused.stderr for option in ("--resume", "--out-dir", "--overwrite"))
    assert {name: open(os.path.join(trained, name), "rb").read() for name in files} == files
    replaced = _run("train_charlm.py", *other, "--model", "lstm", "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert [r["iter"] for r in _metrics(trained)] == [0, 5, 10]       # a new run starts metrics.jsonl anew
    assert open(os.path.join(trained, "ckpt.safetensors"), "rb").read() != files["ckpt.safetensors"]


@pytest.mark.parametrize("program, args, message", [
    ("train_charlm.py", ["--data", "{corpus}", "--out-dir", "{damaged}", "--resume"], "not a readable safetensors"),
    ("sample.py", ["--out-dir", "{damaged}"], "not a readable safetensors file"),
    ("train_charlm.py", ["--data", "{corpus}", "--out-dir", "{new}", "--init-from", "{plain}"], "not a checkpoint of"),
    ("finetune_charlm.py", ["--data", "{corpus}", "--out-dir", "{new}", "--init-from", "{plain}"], "not a checkpoint"),
    ("sample.py", ["--out-dir", "{trained}", "--temperature", "0"], "--temperature must be positive"),
])
def test_unreadable_and_foreign_checkpoints_are_one_line_errors(tmp_path, corpus, trained, program, args, message):
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    with open(os.path.join(trained, "ckpt.safetensors"), "rb") as f:
        (damaged / "ckpt.safetensors").write_bytes(f.read()[:4000])      # cut short, as by a full disk
    plain = str(tmp_path / "plain.safetensors")
    import tinygrad_gpu as tg
    tg.save({"weight": tg.ones(3)}, plain)                               # safetensors, not a training checkpoint
    places = dict(corpus=corpus, damaged=str(damaged), new=str(tmp_path / "new"), plain=plain, trained=trained)
    _assert_one_line_error(_run(program, *(a.format(**places) for a in args)), message)


@pytest.mark.parametrize("program", ["train_charlm.py", "finetune_charlm.py"])
def test_architecture_flags_that_contradict_the_checkpoint_are_errors(tmp_path, corpus, trained, program):
    start = ["--init-from", os.path.join(trained, "ckpt.safetensors"), "--data", corpus, "--out-dir",
             str(tmp_path / "ft"), "--max-iters", "2", "--eval-interval", "2", *TINY]      # TINY says --n-layer 1
    result = _run(program, *start)
    _assert_one_line_error(result, "--n-layer 1 contradicts the checkpoint")
    assert "n_layer is 2" in result.stderr
    resumed = _run("train_charlm.py", "--data", corpus, "--out-dir", trained, "--resume", "--n-embd", "32",
                   "--n-head", "2")
    _assert_one_line_error(resumed, "--n-embd 32 contradicts the checkpoint")


def test_a_steps_warnings_are_shown_unless_the_run_diverged():
    """np.errstate does not hide the loop's warnings: the watch holds them until the run ends, and drops them only
    with a diverging run's one-line error (overflows foretell it, and it says more)."""
    import warnings
    from tinygrad_gpu.train.divergence import DivergenceWatch, TrainingDiverged

    def run(loss: float) -> list:
        with warnings.catch_warnings(record=True) as shown:
            with contextlib.suppress(TrainingDiverged), DivergenceWatch(TrainConfig()) as watch:
                for step in range(3):       # three steps warn from one place: shown once, as Python shows it
                    with watch.holding_warnings():
                        warnings.warn("an op you added warns", RuntimeWarning)
                        watch.note(step, tg.tensor(1.0 if step < 2 else loss))
                    watch.check()
                    assert not shown            # held until the run ends
        return [str(w.message) for w in shown]

    assert run(1.5) == ["an op you added warns"]
    assert run(float("inf")) == []
    with pytest.raises(ZeroDivisionError), warnings.catch_warnings(record=True) as shown:
        with DivergenceWatch(TrainConfig()).holding_warnings():   # a step that fails: its warnings at once
            warnings.warn("about to divide by zero", RuntimeWarning)
            1 / 0
    assert [str(w.message) for w in shown] == ["about to divide by zero"]


def test_a_diverging_run_stops_and_keeps_its_last_good_checkpoint(tmp_path, corpus):
    out = str(tmp_path / "out")
    result = _run("train_charlm.py", "--data", corpus, "--out-dir", out, "--max-iters", "200", "--eval-interval", "5",
                  *TINY, "--lr", "1e4")
    _assert_one_line_error(result, "became", code=1)
    assert "--lr" in result.stderr and "--grad-clip" in result.stderr and "is kept" in result.stderr
    assert "RuntimeWarning" not in result.stderr and "final:" not in result.stdout
    import numpy as np
    import tinygrad_gpu as tg
    saved = tg.load(os.path.join(out, "ckpt.safetensors"))
    assert all(np.isfinite(t.numpy()).all() for t in saved["model"].values())
    assert all(np.isfinite([r["train_loss"], r["val_loss"]]).all() for r in _metrics(out))
    assert f"checkpoint of iteration {saved['iter']}" in result.stderr


def test_help_is_a_manual():
    result = _run("train_charlm.py", "--help")
    assert result.returncode == 0
    text = result.stdout
    for group in ("data:", "model:", "optimisation:", "schedule:", "evaluation and output:", "devices:"):
        assert group in text
    flags = [f.name.replace("_", "-") for f in dataclasses.fields(TrainConfig) if f.metadata.get("group")]
    assert len(flags) >= 30
    entries = re.split(r"\n(?=  -)", text.split("options:", 1)[1])     # one per flag, its sentence wrapped below
    for flag in flags:
        (entry,) = [e for e in entries if re.match(rf"\s*--{flag}[ ,\n]", e)]
        sentence = " ".join(entry.split()[2:])
        assert len(sentence) > 25 and "(default:" in sentence, (flag, entry)
    assert "{gpt,lstm}" in text and "'shakespeare'" in text and "'builtin'" in text
    finetune = _run("finetune_charlm.py", "--help").stdout
    assert "(default: 0.0003)" in " ".join(finetune.split())       # each program's own defaults


def test_without_a_terminal_there_is_no_progress_bar_but_a_line_per_evaluation(tmp_path, corpus):
    options = [o for o in TINY if o != "--no-progress"]
    result = _run("train_charlm.py", "--data", corpus, "--out-dir", str(tmp_path / "o"), "--max-iters", "40",
                  "--eval-interval", "20", *options)
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr and "it/s" not in result.stderr and len(result.stderr) < 200, result.stderr
    assert [l.split(":")[0] for l in result.stdout.splitlines() if l.startswith("iter ")] == \
        ["iter 0", "iter 20", "iter 40"]


@pytest.mark.skipif(__import__("tinygrad_gpu").cuda_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_a_one_line_error(tmp_path, corpus):
    result = _run("train_charlm.py", "--data", corpus, "--out-dir", str(tmp_path / "o"), "--device", "cuda")
    assert result.returncode == 2 and "CUDA is unavailable" in result.stderr and "Traceback" not in result.stderr


# ----------------------------------------------------------------------------- the README's commands
def _readme_commands():
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"^```bash\n(.*?)^```$", text, flags=re.M | re.S)
    commands = [part.split() for block in blocks for line in block.splitlines()
                for part in line.split("#")[0].split("&&")]
    return [words for words in commands if words and words[0] == "python"]


def test_the_readmes_runs_each_have_a_folder_that_git_ignores():
    """Each README command can run after the others without loss: no two training runs share an --out-dir,
    and every folder the programs write (their defaults included) is in .gitignore."""
    folders = []
    for words in _readme_commands():
        program = os.path.basename(words[1])
        if program in ("train_charlm.py", "finetune_charlm.py"):
            given = words[words.index("--out-dir") + 1] if "--out-dir" in words else None
            folders.append(given or {"train_charlm.py": "out-charlm", "finetune_charlm.py": "out-finetune"}[program])
    assert len(folders) >= 6 and len(set(folders)) == len(folders), folders
    ignored = [line.strip().rstrip("/") for line in open(os.path.join(ROOT, ".gitignore")) if line.strip()]
    for folder in folders:
        assert any(__import__("fnmatch").fnmatch(folder, pattern) for pattern in ignored), folder


def test_the_comparison_with_nanogpt_says_it_needs_torch():
    code = ("import runpy, sys; sys.modules['torch'] = None; "            # torch absent, whether installed or not
            f"sys.argv = ['quality_vs_nanogpt.py', '--max-iters', '1']; "
            f"runpy.run_path({os.path.join(ROOT, 'benchmarks', 'quality_vs_nanogpt.py')!r}, run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    _assert_one_line_error(result, "needs PyTorch")


def test_the_plot_has_an_extra():
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    assert any(requirement.startswith("matplotlib") for requirement in extras["plot"])


def test_gradient_checkpointing_trains_the_same_run_to_the_last_bit(tmp_path, corpus):
    """--gradient-checkpointing recomputes each block in backward, dropout's masks included: the same curve exactly.
    An LSTM has no blocks to recompute: one line. --zero-stage 1 in one process keeps the whole state, saying so."""
    from tinygrad_gpu.train import parse_args, train
    runs = {}
    for extra in ([], ["--gradient-checkpointing"], ["--zero-stage", "1"]):
        out = str(tmp_path / ("run" + "".join(extra)))
        said = []
        train(parse_args(["--data", corpus, "--out-dir", out, "--max-iters", "20", "--eval-interval", "10",
                          "--dropout", "0.1", "--num-samples", "0", *TINY, *extra]), log=said.append)
        runs[tuple(extra)] = _losses(_metrics(out))
        if extra == ["--zero-stage", "1"]:
            assert any("nothing to share its optimizer state with" in line for line in said), said
    assert runs[()] == runs[("--gradient-checkpointing",)] == runs[("--zero-stage", "1")]
    refused = _run("train_charlm.py", "--data", corpus, "--out-dir", str(tmp_path / "lstm"), "--model", "lstm",
                   "--gradient-checkpointing", *TINY)
    assert refused.returncode == 2 and refused.stderr.startswith("error: --gradient-checkpointing recomputes"), \
        refused.stderr
