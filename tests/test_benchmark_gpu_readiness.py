"""benchmarks/gpu_readiness.py on the CuPy stand-in: a training step of the CPU recipe makes no host sync, in
float32 and in mixed precision (float16's second step overflows, and is skipped without a sync)."""
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_readiness.py"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_cpu_recipes_step_never_waits_for_the_gpu(dtype):
    done = subprocess.run([sys.executable, str(SCRIPT), "--config", "cpu", "--steps", "2", "--dtype", dtype],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "host syncs per step: 0", done.stdout
    steps = [line.split() for line in lines if line.split()[:1] in (["0"], ["1"])]
    assert len(steps) == 2 and all(int(row[1]) == 0 and int(row[4].replace(",", "")) > 0 for row in steps)
    if dtype == "float16":              # the overflow of step 1 halved the GradScaler's scale, on the device
        assert "loss scale 32768" in done.stdout, done.stdout
