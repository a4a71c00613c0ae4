"""The energy a run reports: RAPL's counters (a fake sysfs here), NVML's (a fake pynvml), --watts as an
estimate that says so, nothing where nothing measures; the metrics rows and the closing line."""
import json
import os
import subprocess
import sys
import types

import pytest

from tinygrad_gpu.train import energy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rapl(tmp_path, *domains):
    for i, (energy_uj, wrap) in enumerate(domains):
        folder = tmp_path / f"intel-rapl:{i}"
        folder.mkdir()
        (folder / "energy_uj").write_text(str(energy_uj))
        (folder / "max_energy_range_uj").write_text(str(wrap))
    return str(tmp_path / "intel-rapl:[0-9]*")


def test_rapl_adds_up_every_package_and_undoes_the_wrap_around(tmp_path, monkeypatch):
    monkeypatch.setattr(energy, "RAPL_GLOB", _rapl(tmp_path, (5_000_000, 10_000_000), (1_000_000, 10_000_000)))
    meter = energy.EnergyMeter("cpu")
    assert meter.source.startswith("RAPL") and not meter.estimated and meter.joules() == 0
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("9000000")        # +4 J
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("500000")         # wrapped: +9.5 J
    assert meter.joules() == pytest.approx(13.5)
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("1000000")        # wrapped: +2 J
    assert meter.joules() == pytest.approx(15.5)


def test_nvml_reads_the_gpus_total_energy_counter(monkeypatch):
    counter = {"mJ": 1_000_000}
    fake = types.SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: ("gpu", i),
                                 nvmlDeviceGetTotalEnergyConsumption=lambda handle: counter["mJ"])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(energy.devices, "is_cuda", lambda device: device.startswith("cuda"))
    meter = energy.EnergyMeter("cuda:0", watts=300)
    assert meter.source.startswith("NVML") and not meter.estimated      # measured wins over --watts
    counter["mJ"] += 2500
    assert meter.joules() == pytest.approx(2.5)


def test_without_a_counter_only_watts_give_a_figure_and_it_says_estimated(tmp_path, monkeypatch):
    monkeypatch.setattr(energy, "RAPL_GLOB", str(tmp_path / "none:[0-9]*"))
    nothing = energy.EnergyMeter("cpu")
    assert nothing.source is None and nothing.joules() is None
    guessed = energy.EnergyMeter("cpu", watts=50)
    assert guessed.estimated and "estimated" in guessed.source and guessed.joules() >= 0
    assert energy.EnergyMeter("emu").joules() is None


def test_a_run_reports_its_energy_and_co2(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The quick brown fox jumps over the lazy dog. " * 200)
    out = tmp_path / "out"
    args = ["--data", str(corpus), "--out-dir", str(out), "--max-iters", "20", "--eval-interval", "10",
            "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "4",
            "--eval-iters", "2", "--no-progress", "--num-samples", "0", "--device", "cpu",
            "--watts", "3600", "--grid-gco2-per-kwh", "400"]
    env = {k: v for k, v in os.environ.items() if k != "TINYGRAD_GPU_DEVICE"}
    done = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "train_charlm.py"), *args],
                          capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    kwh = [row["energy_kwh"] for row in rows]
    assert kwh == sorted(kwh) and kwh[-1] > 0 and {row["energy_source"] for row in rows} == {"--watts 3600 (estimated)"}
    # 3600 W is 1 Wh a second: the estimate is the run's seconds, in Wh
    assert kwh[-1] == pytest.approx(rows[-1]["elapsed_s"] / 1000, rel=0.5)
    last = done.stdout.strip().splitlines()[-1]
    assert "kWh (estimated)" in last and "g CO2 at 400 g/kWh" in last, last
