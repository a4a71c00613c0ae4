"""benchmarks/gpu_readiness.py on the CuPy stand-in: a training step of the CPU recipe makes no host sync, in
float32 and in mixed precision (float16's second step overflows, and is skipped without a sync)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tinygrad_gpu.data import TextDataset, load_corpus

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
    steps = [line.split() for line in lines if re.match(r"\s*[01] +\d+ +[\d,]+ +[\d,]+ +[\d,]+ \(", line)]
    assert len(steps) == 2 and all(int(row[1]) == 0 and int(row[4].replace(",", "")) > 0 for row in steps)
    if dtype == "float16":              # the overflow of step 1 halved the GradScaler's scale, on the device
        assert "loss scale 32768" in done.stdout, done.stdout
    # The cost on paper: the step's products add up to a GPT's (forward, then twice that backward), the
    # attention's counted inside our kernels (2 + 3 + 4 products of each causal pair, by head size).
    L, C, H, T, B = 4, 128, 4, 64, 12
    V = TextDataset(load_corpus("builtin"), T, device="cpu").tokenizer.vocab_size
    N = B * T
    linear = 3 * (L * 2 * N * 12 * C * C + 2 * N * C * V)
    attention = L * 9 * 2 * (C // H) * B * H * (T * (T + 1) // 2)
    gflop = float(re.search(r"products: ([\d.]+) GFLOP", done.stdout).group(1))
    assert abs(gflop - (linear + attention) / 1e9) < 0.006, (gflop, (linear + attention) / 1e9)
    assert re.search(r"bound by: the (host|GPU) \(", done.stdout), done.stdout
