"""benchmarks/gpu_check.sh, the GPU run prepared for a lent machine, runs to its summary without a GPU."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tinygrad_gpu as tg

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "gpu_check.sh"


@pytest.mark.skipif(tg.cuda_available(), reason="this machine has a GPU: the script would run in full")
@pytest.mark.skipif(not (shutil.which("bash") and shutil.which("timeout")), reason="needs bash and coreutils' timeout")
def test_every_part_runs_and_the_summary_names_each(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), "logs"], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=dict(os.environ, PYTHON=sys.executable))     # logs: a folder under the caller's
    summary = done.stdout.split("=== summary")[-1]
    for part in ("gpu", "tests", "cudapass", "readiness", "readyhalf", "precision", "kernels", "step", "scaling",
                 "infer", "nccl"):
        assert f"\n{part} " in summary, done.stdout[-2000:]
        assert (tmp_path / "logs" / f"{part}.log").exists()
    assert "step.py wrote no results" in done.stdout + done.stderr     # no cuda device here, so no table
