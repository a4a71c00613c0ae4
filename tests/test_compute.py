"""What a run computes and costs: FLOPs per token (GPT, LSTM) against the formulas by hand, the GPU
peak table, the CPU probe and its cache, and the figures a training run writes, prints and returns,
resumed runs included."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

import tinygrad_gpu as tg
from tinygrad_gpu import device as devices
from tinygrad_gpu import nn
from tinygrad_gpu.train import TrainConfig, compute, train
from tinygrad_gpu.train.reporting import Report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs! " * 60
# A tiny GPT (test_train.py's TINY settings): 1 layer, 2 heads, 16 wide, 16 characters, batch 4.
TINY = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4, eval_iters=2, warmup_iters=5, lr=1e-2,
            min_lr=1e-3, num_samples=0, progress=False)
TOKENS_PER_STEP = 4 * 16
FINAL_LINE = re.compile(r"trained [\d.]+[kMGTPE]? tokens at [\d.]+[kMGTPE]? tokens/s, [\d.]+ [kMGTPE]?FLOP, "
                        r"([\d.]+% MFU, )?[\d.]+ (s|min|h)(, \$[\d.e-]+ at \$\d+\.\d\d/h)?")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """The CPU probe's cache in this test's folder, never the user's."""
    monkeypatch.setenv("TINYGRAD_GPU_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TINYGRAD_GPU_STANDIN_KERNELS", "reference")    # test_train.py says why


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT)
    return str(path)


def _tiny_gpt_flops_per_token():
    C, L, T, V = 16, 1, 16, len(set(TEXT))
    return 6 * (L * (12 * C * C + 2 * C) + C + V * C) + 12 * L * C * T


# ----------------------------------------------------------------------------- FLOPs per token
def test_gpt_flops_per_token_by_hand():
    C, L, T, V = 8, 2, 8, 11
    model = nn.GPT(nn.GPTConfig(block_size=T, vocab_size=V, n_layer=L, n_head=2, n_embd=C, bias=False))
    # Per block: attention's 3C x C and C x C, the MLP's 4C x C and C x 4C, two LayerNorm weights.
    # Then ln_f, and the token table (which is also the output layer); the position table is a lookup.
    matrices = L * (12 * C * C + 2 * C) + C + V * C
    assert model.flops_per_token() == 6 * matrices + 12 * L * C * T == 11520
    # rows shorter than the position table (fine-tuning GPT-2 on part of its context) attend over fewer keys
    assert model.flops_per_token(context=4) == 6 * matrices + 12 * L * C * 4


def test_lstm_flops_per_token_by_hand():
    H, L, V = 8, 2, 11
    model = nn.LSTMLanguageModel(V, H, n_layer=L)
    per_layer = 4 * H * H + 4 * H * H + 4 * H + 4 * H        # W_ih, W_hh, b_ih, b_hh (the input is H wide too)
    head = H * V + V
    assert model.flops_per_token() == 6 * (L * per_layer + head) == 7506    # the embedding is left out


# ----------------------------------------------------------------------------- peaks
@pytest.mark.parametrize("name, kind, tflops", [
    ("NVIDIA H100 80GB HBM3", "float32", 67.0),
    ("NVIDIA H100 80GB HBM3", "TF32", 494.5),
    ("NVIDIA H100 PCIe", "float16", 756.5),
    ("NVIDIA H200", "float16", 989.5),
    ("NVIDIA H200 NVL", "TF32", 417.5),
    ("NVIDIA A100-SXM4-80GB", "TF32", 156.0),
    ("NVIDIA A10", "float32", 31.2),                 # not the A100
    ("NVIDIA L4", "float16", 121.0),                 # not the L40S
    ("NVIDIA L40S", "float16", 366.5),
    ("NVIDIA GeForce RTX 4090", "float16", 165.2),
    ("Tesla V100-PCIE-16GB", "float16", 112.0),
    ("Tesla V100-SXM2-32GB", "TF32", 15.7),          # no TF32 before Ampere: float32's rate
    ("Tesla T4", "TF32", 8.1),
])
def test_gpu_peak_by_name(name, kind, tflops):
    assert compute.gpu_peak_flops(name, kind) == pytest.approx(tflops * 1e12)


@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA B200", "AMD Instinct MI300X", "CuPy stand-in (NumPy)"])
def test_an_unlisted_gpu_has_no_peak(name):
    assert compute.gpu_peak_flops(name, "float32") is None


def test_the_peak_follows_tf32_and_the_dtype(monkeypatch):
    monkeypatch.setattr(compute, "gpu_name", lambda index: "NVIDIA H200")
    assert compute.peak_flops("cuda:0", tg.float32) == (67e12, "NVIDIA H200, float32 datasheet peak")
    assert compute.peak_flops("cuda:0", tg.float16)[0] == 989.5e12
    monkeypatch.setattr(compute.backends.cuda.matmul, "_allow_tf32", True)    # the switch, without telling CuPy
    assert compute.peak_flops("cuda:0", tg.float32) == (494.5e12, "NVIDIA H200, TF32 datasheet peak")
    monkeypatch.setattr(compute, "gpu_name", lambda index: "NVIDIA B200")
    peak, why = compute.peak_flops("cuda:0", tg.float32)
    assert peak is None and "'NVIDIA B200'" in why and "no MFU" in why
    assert compute.peak_flops("emu", tg.float32)[0] is None


@pytest.mark.skipif(not tg.cuda_available(), reason="no GPU (real or stand-in)")
def test_this_gpus_name_is_looked_up():
    name = compute.gpu_name(0)
    peak, why = compute.peak_flops("cuda:0", tg.float32)
    assert peak == compute.gpu_peak_flops(name, "float32") and name in why


# ----------------------------------------------------------------------------- the CPU probe and its cache
def test_the_cpu_probe_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("TINYGRAD_GPU_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []

    def probe():
        calls.append(1)
        return measure()
    measure = compute.measure_cpu_peak
    monkeypatch.setattr(compute, "measure_cpu_peak", probe)
    first = compute.cpu_peak_flops()
    assert first > 1e8 and len(calls) == 1          # any CPU of this century does 0.1 GFLOP/s
    with open(tmp_path / "tinygrad_gpu" / "cpu_peak_flops.json") as f:
        cached = json.load(f)
    assert list(cached.values()) == [first] and compute.cpu_model() in list(cached)[0]
    assert compute.cpu_peak_flops() == first and len(calls) == 1
    assert compute.peak_flops("cpu", tg.float32)[0] == first and len(calls) == 1


def test_a_cache_that_cannot_be_written_or_read_costs_only_a_probe(tmp_path, monkeypatch):
    monkeypatch.setattr(compute, "measure_cpu_peak", lambda: 5e9)
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    monkeypatch.setenv("TINYGRAD_GPU_CACHE", str(blocked / "cache"))        # a folder inside a file
    assert compute.cpu_peak_flops() == 5e9
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / compute.CACHE_NAME).write_text("{not json")
    monkeypatch.setenv("TINYGRAD_GPU_CACHE", str(damaged))
    assert compute.cpu_peak_flops() == 5e9
    assert json.loads((damaged / compute.CACHE_NAME).read_text()) == {compute._machine_key(): 5e9}


# ----------------------------------------------------------------------------- a run's figures
def test_a_run_writes_flops_mfu_and_cost_and_ends_with_them(tmp_path, corpus):
    out = str(tmp_path / "out")
    args = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items() if k != "progress"]
    env = {k: v for k, v in os.environ.items() if k != "TINYGRAD_GPU_DEVICE"}
    result = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "train_charlm.py"), "--data", corpus,
                             "--out-dir", out, "--max-iters", "20", "--eval-interval", "10", "--no-progress",
                             "--price-per-hour", "2", *args], capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, result.stderr
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    gpu = tg.cuda_available()           # the program trains there when it can: in the cuda pass, on the stand-in
    if not gpu:
        with open(os.path.join(os.environ["TINYGRAD_GPU_CACHE"], compute.CACHE_NAME)) as f:
            (peak,) = json.load(f).values()
    per_token = _tiny_gpt_flops_per_token()
    for row in rows:
        assert row["flops"] == row["iter"] * TOKENS_PER_STEP * per_token
        assert row["tflops_per_sec"] == pytest.approx(row["tokens_per_sec"] * per_token / 1e12, rel=1e-3, abs=1e-6)
        assert row["mfu"] is None if gpu else row["mfu"] == pytest.approx(row["tokens_per_sec"] * per_token / peak,
                                                                          rel=1e-3, abs=1e-6)
        assert row["cost"] == pytest.approx(row["elapsed_s"] / 3600 * 2, rel=1e-5)
    assert rows[0]["cost_per_million_tokens"] is None                     # no tokens trained yet
    assert rows[-1]["cost_per_million_tokens"] == pytest.approx(rows[-1]["cost"] / (20 * TOKENS_PER_STEP) * 1e6,
                                                                rel=1e-5)
    assert rows[-1]["tflops_per_sec"] > 0 and (gpu or rows[-1]["mfu"] > 0)
    last = result.stdout.strip().splitlines()[-1]
    assert FINAL_LINE.fullmatch(last) and ("MFU" in last) != gpu and last.endswith(" at $2.00/h"), last
    assert last.startswith("trained 1.3k tokens at ") and f" tokens/s, {20 * TOKENS_PER_STEP * per_token / 1e6:.1f} MFLOP, " \
        in last, last


def test_a_resumed_run_keeps_the_cumulative_figures(tmp_path, corpus):
    """Resuming takes the iteration and the elapsed time from the kept rows, so FLOPs, elapsed time and
    cost go on from where the first part stopped. Runs on the default device (the stand-in's GPU in the
    cuda pass, whose peak nobody knows: no MFU, and no crash)."""
    lines = []
    config = TrainConfig(data=corpus, out_dir=str(tmp_path / "out"), max_iters=10, eval_interval=5,
                         price_per_hour=3.0, **TINY)
    first = train(config, log=lines.append)
    resumed = train(TrainConfig(**{**config.flags(), "max_iters": 20, "resume": True}), log=lines.append)
    per_token = _tiny_gpt_flops_per_token()
    rows = resumed["metrics"]
    assert [r["iter"] for r in rows] == [0, 5, 10, 15, 20]
    assert [r["flops"] for r in rows] == [r["iter"] * TOKENS_PER_STEP * per_token for r in rows]
    assert rows[:3] == first["metrics"]                              # the first part's rows, as they were
    assert first["flops"] == rows[2]["flops"] and resumed["flops"] == rows[4]["flops"]
    assert resumed["tokens"] == 20 * TOKENS_PER_STEP
    assert rows[3]["elapsed_s"] >= first["elapsed_s"] and resumed["elapsed_s"] >= rows[4]["elapsed_s"]
    costs = [r["cost"] for r in rows]
    assert costs == sorted(costs) and resumed["cost"] == pytest.approx(resumed["elapsed_s"] / 3600 * 3, rel=1e-5)
    gpu = devices.is_cuda(devices.default_device())
    assert first["mfu"] is None if gpu else 0 < first["mfu"]
    assert (resumed["mfu"] is None) == gpu == (rows[-1]["mfu"] is None)   # the stand-in's GPU has no peak
    assert any(("no MFU" if gpu else "TFLOP/s") in line for line in lines), lines


def test_the_progress_bar_shows_mfu(tmp_path):
    shown = []

    class Bar:
        def update(self, n): pass
        def set_postfix(self, **values): shown.append(values)

    report = Report(TrainConfig(out_dir=str(tmp_path), max_iters=100, progress=False), 0, tokens_per_step=64,
                    flops_per_token=10**9, peak_flops=1e12)
    report.progress = Bar()
    for iter_num in range(1, 10):
        report.step(iter_num, tg.tensor(2.5))
    assert shown == []                                    # every 10 iterations
    report.shown_at = time.time() - 1.0                   # 10 steps of 64 tokens took a second
    report.step(10, tg.tensor(2.5))
    assert shown == [{"loss": "2.5000", "tok_per_s": "640", "mfu": "64.0%"}]     # 640 x 1e9 / 1e12
