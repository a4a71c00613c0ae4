"""benchmarks/mixed_precision.py on the CPU recipe's model: a row per dtype, and 16-bit steps that allocate less."""
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "mixed_precision.py"


def test_each_dtype_has_a_row_and_half_precision_takes_less_memory():
    done = subprocess.run([sys.executable, str(SCRIPT), "--config", "cpu"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {m.group(1): m.groups()[1:] for m in re.finditer(r"^ours\s+(\w+)\s+([\d.]+)\s+[\d,]+\s+([\d.]+)\s+-\s+"
                                                             r"([\d.]+)\s+([\d.]+)$", done.stdout, re.M)}
    assert set(rows) == {"float32", "bfloat16", "float16"}, done.stdout
    assert rows["float32"][1] == "1.00"
    memory = {dtype: float(row[2]) for dtype, row in rows.items()}
    assert memory["bfloat16"] < 0.9 * memory["float32"] and memory["float16"] < 0.9 * memory["float32"], done.stdout
    losses = [float(row[3]) for row in rows.values()]
    assert max(losses) - min(losses) < 0.01, done.stdout         # the same step, to 16-bit rounding
    ratios = re.search(r"peak memory against float32: bfloat16 ([\d.]+)x, float16 ([\d.]+)x", done.stdout)
    assert ratios and float(ratios.group(1)) < 0.9, done.stdout
