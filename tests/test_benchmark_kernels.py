"""benchmarks/kernels.py runs: its whole table on the emulator, and a polite exit without a GPU."""
import importlib.util
from pathlib import Path

import pytest

import tinygrad_gpu as tg

spec = importlib.util.spec_from_file_location("benchmark_kernels",
                                              Path(__file__).parent.parent / "benchmarks" / "kernels.py")
benchmark = importlib.util.module_from_spec(spec)
spec.loader.exec_module(benchmark)


def test_the_table_on_the_emulator(capsys):
    assert benchmark.main(["--device", "emu", "--small", "--repeat", "1"]) == 0
    table = capsys.readouterr().out
    for name in ("cross_entropy fwd", "cross_entropy bwd", "layernorm fwd", "layernorm bwd", "gelu fwd", "gelu bwd",
                 "adamw", "embedding bwd", "causal softmax fwd", "causal softmax bwd"):
        assert name in table
    for name in ("cross_entropy fwd", "layernorm bwd", "gelu fwd", "causal softmax bwd"):   # the 16-bit kernels
        assert f"{name} bf16" in table
    assert table.count("x\n") >= 30                        # a speed-up on every row
    # layer norm's forward against its naive rung (one thread per row), in both precisions and both widths
    ladder = [line for line in table.splitlines() if line.startswith("layernorm fwd vs naive")]
    assert len(ladder) == 4 and sum(" bf16 " in line for line in ladder) == 2
    assert all(float(line.split()[-1].rstrip("x")) > 0 for line in ladder)


@pytest.mark.skipif(tg.cuda_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_says_so_and_succeeds(capsys):
    assert benchmark.main([]) == 0
    assert "needs an NVIDIA GPU" in capsys.readouterr().out
