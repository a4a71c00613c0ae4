"""benchmarks/step.py runs end to end on a tiny GPT: its workers, the NumPy model's gradient check
against our engine, the table, and a clear row when torch is missing. No timing is asserted."""
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import tinygrad_gpu as tg

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"
spec = importlib.util.spec_from_file_location("benchmark_step", BENCHMARKS / "step.py")
benchmark = importlib.util.module_from_spec(spec)
spec.loader.exec_module(benchmark)

TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", "16", "--batch-size", "2",
        "--steps", "2", "--warmup", "1", "--rounds", "1"]


def torch_importable():
    return importlib.util.find_spec("torch") is not None


def test_tiny_run_of_ours_and_numpy(tmp_path, capsys):
    out = tmp_path / "step.json"
    assert benchmark.main(TINY + ["--only", "ours,numpy", "--json", str(out)]) == 0
    text = capsys.readouterr().out

    check = re.search(r"\[numpy\] gradient check against our engine: .* (\d+) gradients, "
                      r"worst max rel diff (\S+) \(.*\): ok", text)
    assert check, text
    assert int(check.group(1)) == 10            # wte, wpe, 6 in the block, ln_f, and lm_head (tied to wte)
    assert float(check.group(2)) < 1e-4

    header = text.index("implementation")
    table = text[header:]
    for name in ("ours", "numpy"):
        assert re.search(rf"^{name}\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+\s+[\d,]+\s+\d+\.\d", table, re.M), table
    assert "time ours/numpy" in table
    assert "torch" not in table.split("ratios")[0]      # not asked for

    [report] = json.loads(out.read_text())
    rows = {r["name"]: r for r in report["rows"]}
    assert report["steps"] == 2 and report["warmup"] == 1
    for r in rows.values():
        assert len(r["times_ms"]) == 2 and r["median_ms"] > 0 and r["peak_mb"] > r["base_mb"] > 0
    assert rows["numpy"]["grad_check_worst_rel"] < 1e-4
    # same weights, same batch, same update rule: the three steps' losses agree, and training moved
    assert rows["ours"]["loss_first"] == pytest.approx(rows["numpy"]["loss_first"], rel=1e-5)
    assert rows["ours"]["loss_last"] == pytest.approx(rows["numpy"]["loss_last"], rel=1e-4)
    assert rows["ours"]["loss_last"] < rows["ours"]["loss_first"]


def test_rounds_take_turns_and_pool_their_steps(tmp_path, capsys):
    out = tmp_path / "step.json"
    assert benchmark.main(TINY + ["--only", "ours,numpy,ours", "--rounds", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("gradient check against our engine") == 2         # numpy ran once per round
    assert re.search(r"^time ratios round by round: ours/numpy \d+\.\d\d \d+\.\d\d$", text, re.M), text
    [report] = json.loads(out.read_text())
    assert report["rounds"] == 2 and [r["name"] for r in report["rows"]] == ["ours", "numpy"]
    for r in report["rows"]:
        assert len(r["times_ms"]) == 4 and len(r["round_ms"]) == 2
        assert r["median_ms"] == pytest.approx(float(np.median(r["times_ms"])))


def test_profile_shows_cprofile_and_the_time_inside_each_op(capsys):
    assert benchmark.main(TINY + ["--only", "ours", "--profile"]) == 0
    text = capsys.readouterr().out
    assert "cProfile over" in text
    ops = re.findall(r"\[ours\]\s+(\d+\.\d+)\s+(\w+)\.(forward|backward)", text)
    assert {"GPTBlock", "Linear", "LayerNormRows", "CrossEntropyRows"} <= {name for _, name, _ in ops}
    step_ms = float(re.search(r"step (\d+\.\d+) ms:", text).group(1))
    assert 0 < sum(float(ms) for ms, _, direction in ops if direction == "forward") < step_ms


@pytest.mark.skipif(torch_importable(), reason="torch is installed here")
def test_missing_torch_is_a_row_not_a_traceback(capsys):
    assert benchmark.main(TINY + ["--only", "torch"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^torch\s+skipped: torch not importable$", text, re.M), text
    assert "Traceback" not in text


@pytest.mark.skipif(not torch_importable(), reason="torch is not installed")
def test_torch_row_starts_from_the_same_weights(tmp_path, capsys):
    out = tmp_path / "step.json"
    assert benchmark.main(TINY + ["--only", "ours,torch", "--json", str(out)]) == 0
    assert "ours/torch" in capsys.readouterr().out
    rows = {r["name"]: r for r in json.loads(out.read_text())[0]["rows"]}
    assert rows["torch"]["loss_first"] == pytest.approx(rows["ours"]["loss_first"], rel=1e-5)
    assert rows["torch"]["loss_last"] == pytest.approx(rows["ours"]["loss_last"], rel=1e-4)


def test_a_wrong_gradient_fails_the_check_and_names_it():
    rng = np.random.default_rng(0)
    ref = {"a.weight": rng.standard_normal((4, 3)).astype(np.float32), "b.weight": rng.standard_normal(3)}
    ok, worst, line = benchmark.check_gradients(2.0, dict(ref), 2.0, ref)
    assert ok and worst == 0 and line.endswith(": ok")
    wrong = dict(ref, **{"b.weight": ref["b.weight"] * (1 + 1e-3)})
    ok, worst, line = benchmark.check_gradients(2.0, wrong, 2.0, ref)
    assert not ok and worst > 1e-4 and "FAILED" in line and "b.weight" in line
    ok, _, line = benchmark.check_gradients(2.0, {"a.weight": ref["a.weight"]}, 2.0, ref)     # one missing
    assert not ok and "b.weight" in line


@pytest.mark.skipif(shutil.which("false") is None, reason="needs the false command")
def test_a_failing_worker_is_a_failed_row_and_exit_status_1(capsys, monkeypatch):
    monkeypatch.setattr(sys, "executable", shutil.which("false"))      # every worker exits with status 1
    assert benchmark.main(TINY + ["--only", "ours"]) == 1
    assert re.search(r"^ours\s+FAILED: worker exited with status 1$", capsys.readouterr().out, re.M)


@pytest.mark.skipif(tg.cuda_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_one_error_line(capsys):
    assert benchmark.main(TINY + ["--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: device 'cuda' requested but CUDA is unavailable") and "Traceback" not in err


def test_the_numpy_worker_stops_loudly_when_its_gradients_disagree(tmp_path, capsys):
    """The worker run in this process on a reference whose c_fc gradient was nudged by 1e-3."""
    cfg = dict(n_layer=1, n_head=2, n_embd=32, block_size=16, batch_size=2, vocab_size=65)
    setup, reference, _ = benchmark.prepare(cfg, 0, str(tmp_path), need_reference=True)
    saved = tg.load(reference)
    name = "transformer.h.0.mlp.c_fc.weight"
    saved["grads"][name] = saved["grads"][name] * 1.001
    tg.save(saved, reference)
    args = benchmark.parse_args(["--worker", "numpy", "--setup", setup, "--reference", reference,
                                 "--steps", "1", "--warmup", "0"])
    assert benchmark.worker_main(args) == 1
    out = capsys.readouterr().out
    assert re.search(rf"gradient check against our engine: .*: FAILED \(tolerance 0.0001\): {re.escape(name)}$",
                     out, re.M), out
    result = json.loads(out.split("RESULT ", 1)[1])
    assert "differ" in result["failed"] and "times_ms" not in result
