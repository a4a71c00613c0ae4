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
    assert lines[-3] == "host syncs per step: 0", done.stdout
    launches, allocations = (int(line.split(": ")[1]) for line in lines[-2:])
    assert lines[-2].startswith("launches per step: ") and lines[-1].startswith("allocations per step: ")
    breakdown = done.stdout.split("launches of step 1, by op (")[1]
    assert int(breakdown.split(" in all")[0]) == launches          # the breakdown adds up to the last step's count
    assert "ops/fused.py (forward)" in breakdown and "optim/" in breakdown, breakdown      # counted at the ops
    steps = [line.split() for line in lines if line.split()[:1] in (["0"], ["1"])]
    assert len(steps) == 2 and all(int(row[1]) == 0 and int(row[4].replace(",", "")) > 0 for row in steps)
    if dtype == "float16":              # the overflow of step 1 halved the GradScaler's scale, on the device
        assert "loss scale 32768" in done.stdout, done.stdout
