"""benchmarks/memory.py runs each variant in its own process (the two-rank ones under mpiexec) and prints its table,
the ratios, and the largest batch within a budget; no time or size is checked against a goal here, only that the
figures are there and sane. A tiny model keeps it to seconds."""
import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


def load():
    spec = importlib.util.spec_from_file_location("benchmark_memory", BENCHMARKS / "memory.py")
    memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(memory)
    return memory


def test_memory_benchmark_prints_each_variant_the_ratios_and_the_budgets_batch(capsys):
    memory = load()
    memory.main(["--config", "gpt", "--block-size", "16", "--batch-size", "2", "--steps", "1",
                 "--only", "float32,checkpointing,DDP x2,ZeRO-1 x2", "--budget-mb", "100000", "--max-batch", "3"])
    out = capsys.readouterr().out
    rows = {line[:15].strip(): line[15:].split() for line in out.splitlines()
            if line[:15].strip() in ("float32", "checkpointing", "DDP x2", "ZeRO-1 x2")}
    assert set(rows) == {"float32", "checkpointing", "DDP x2", "ZeRO-1 x2"}, out
    # The same model and batches: the same loss to the digits shown, checkpointed or sharded.
    assert rows["checkpointing"][-1] == rows["float32"][-1], out
    if rows["ZeRO-1 x2"][0] != "skipped:":
        assert float(rows["ZeRO-1 x2"][4]) < float(rows["DDP x2"][4])          # state MB per process
        assert "ZeRO-1 x2 / DDP x2: optimizer state per process 0.5" in out, out
    assert "checkpointing / float32: peak" in out, out
    budget_lines = [line for line in out.splitlines() if line.startswith("within 100000 MB, ")]
    assert [line.split(",")[1].split(":")[0].strip() for line in budget_lines] == \
        ["float32", "checkpointing", "bf16+ckpt"], out
    assert all("tokens per step (measured peak" in line for line in budget_lines), out


def test_without_values_drops_the_flags_the_workers_must_not_see():
    memory = load()
    assert memory._without_values(["--budget-mb", "5", "--steps", "1", "--only=float32"], ("--budget-mb", "--only")) \
        == ["--steps", "1"]
