"""benchmarks/gpu_readiness.py on the CuPy stand-in: a training step of the CPU recipe makes no host sync."""
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_readiness.py"


def test_the_cpu_recipes_step_never_waits_for_the_gpu():
    done = subprocess.run([sys.executable, str(SCRIPT), "--config", "cpu", "--steps", "2"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "host syncs per step: 0", done.stdout
    steps = [line.split() for line in lines if line.split()[:1] in (["0"], ["1"])]
    assert len(steps) == 2 and all(int(row[1]) == 0 and int(row[4].replace(",", "")) > 0 for row in steps)
