"""benchmarks/lora.py runs both variants in their own processes and prints its table and ratios; no
time is checked here. A tiny model keeps it to seconds."""
import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


def test_lora_benchmark_prints_both_variants_and_the_ratios(capsys):
    spec = importlib.util.spec_from_file_location("benchmark_lora", BENCHMARKS / "lora.py")
    lora = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lora)
    lora.main(["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--vocab-size", "50", "--block-size", "8",
               "--batch-size", "2", "--rank", "2", "--steps", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (["full"], ["lora"])}
    assert int(rows["lora"][2].replace(",", "")) < int(rows["full"][2].replace(",", ""))    # trained parameters
    assert "ratios LoRA/full: time" in out and "peak memory" in out
