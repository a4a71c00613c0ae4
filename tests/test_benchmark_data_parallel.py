"""benchmarks/data_parallel.py runs (--quick: a tiny model, two steps) and prints its table and ratios;
--nccl without a GPU says why it skipped. Nothing here checks a time, only that the figures are sane.

The benchmark runs in a subprocess: its workers are mpiexec jobs, and this process must not import
mpi4py.MPI (MPI would start here and take pytest for one of mpiexec's ranks).
"""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tinygrad_gpu as tg

ROOT = Path(__file__).parent.parent
SCRIPT = ROOT / "benchmarks" / "data_parallel.py"
ROW = re.compile(r"^(?P<ranks>[12])\s+(?P<ddp>\S.*?)\s+(?P<ms>[\d.]+)\s+\((?P<p10>\d+)-(?P<p90>\d+)\)\s+"
                 r"(?P<cpu>[\d.]+)\s+(?P<tokens>[\d,]+)\s+(?P<reducing>[\d.]+|-)\s+(?P<share>[\d.]+|-)$")
RATIO = re.compile(r"[\d.]+(?=x)")


def run(*args, timeout=120):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_quick_run_prints_every_row_sane_figures_and_the_ratios(tmp_path):
    if not (shutil.which("mpiexec") or shutil.which("mpiexec", path=os.path.dirname(sys.executable))):
        pytest.skip("no mpiexec on PATH (install the [dist] extra: mpi4py and the mpich wheel)")
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not importable (install the [dist] extra)")
    done = run("--quick", "--json", str(tmp_path / "report.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout

    rows = [ROW.match(line).groupdict() for line in out.splitlines() if ROW.match(line)]
    assert [(r["ranks"], r["ddp"].split(" (")[0]) for r in rows] == [
        ("1", "none"), ("2", "25 MiB buckets"), ("2", "small buckets"), ("2", "small buckets")], out
    assert rows[2]["ddp"].endswith(", overlap") and rows[3]["ddp"].endswith(", no overlap")
    for r in rows:
        assert float(r["ms"]) > 0 and float(r["cpu"]) > 0 and int(r["tokens"].replace(",", "")) > 0, r
        assert int(r["p10"]) <= int(r["p90"])
        if r["ranks"] == "1":
            assert r["reducing"] == r["share"] == "-"        # one process reduces nothing
        else:
            assert float(r["reducing"]) >= 0 and 0 <= float(r["share"]) <= 1, r

    reductions = [line for line in out.splitlines() if line.startswith("  DDP.reduce_gradients")
                  or line.startswith("  MPI Allreduce")]
    assert len(reductions) == 3 and all(float(line.split()[-2]) > 0 for line in reductions), out
    for start, count in (("ratio 2 ranks : 1 rank tokens/s", 2),       # the ratio and the ideal 2.00x
                         ("ratio overlap : no overlap step time", 1),
                         ("ratio DDP.reduce_gradients : MPI Allreduce", 2)):
        lines = [line for line in out.splitlines() if line.startswith(start)]
        assert len(lines) == 1, out
        ratios = RATIO.findall(lines[0])
        assert len(ratios) == count and all(float(r) > 0 for r in ratios), lines[0]

    report = json.loads((tmp_path / "report.json").read_text())
    assert [row["ranks"] for row in report["rows"]] == [1, 2, 2, 2]
    assert all(row["replicas_identical"] for row in report["rows"])     # the copies took the same steps
    assert report["ratios"]["two_vs_one"] > 0 and len(report["ratios"]["ours_vs_mpi"]) == 2


@pytest.mark.skipif(tg.cuda_available(), reason="this machine has a GPU: --nccl would run its checks")
def test_nccl_without_a_gpu_skips_in_one_line_and_succeeds():
    done = run("--nccl", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("benchmarks/data_parallel.py --nccl: skipped: "), done.stdout
