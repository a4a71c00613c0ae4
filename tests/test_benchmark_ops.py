"""benchmarks/ops.py and benchmarks/scaling.py run and print their tables; nothing here checks a time.

Tiny settings (--quick) keep both under a few seconds on two cores.  The torch columns are
checked only where torch imports (not in CI).
"""
import importlib.util
from pathlib import Path

import pytest

import tinygrad_gpu as tg

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


def load(name):
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ops, scaling = load("ops"), load("scaling")


def test_ops_table_has_every_op(capsys):
    assert ops.main(["--quick", "--no-torch"]) == 0
    table = capsys.readouterr().out
    for column in ("raw", "no-grad", "record", "fwd+bwd", "overhead", "ng/raw", "nodes"):
        assert column in table
    for name, *_ in ops.CASES:
        line = next(line for line in table.splitlines() if line.startswith(name + " "))
        cells = line[len("getitem int array") + 1:].split()          # the numbers after the name column
        assert len(cells) == 8 and cells[5].endswith("x") and cells[6].endswith("x")
    assert "median overhead per op" in table


def test_ops_size_option_and_a_subset(capsys):
    assert ops.main(["--quick", "--no-torch", "--size", "16", "--ops", "matmul,cross_entropy"]) == 0
    table = capsys.readouterr().out
    assert "16x16" in table and "matmul" in table and "cross_entropy" in table and "softmax" not in table


def test_scaling_table_counts_the_flops(capsys):
    assert scaling.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "floor: a step at n_embd 16" in out and "n_embd doubles" in out and "block_size doubles" in out
    for column in ("ms/step", "fastest", "fixed", "GFLOP/step", "GFLOP/s", "time x", "FLOP x"):
        assert column in out
    # the matmul FLOPs counted in the engine agree with nanoGPT's formula on every row
    assert "On every row the count equals" in out


def test_counting_restores_the_engine():
    from tinygrad_gpu.ops import linalg
    from tinygrad_gpu.tensor import Function
    before = linalg.MatMul.forward, Function.__dict__["apply"]
    with scaling.counting() as counts:
        (tg.ones(2, 3) @ tg.ones(3, 4)).sum()
    assert counts["flops"] == 2 * 2 * 4 * 3 and counts["ops"] >= 2
    assert (linalg.MatMul.forward, Function.__dict__["apply"]) == before


@pytest.mark.skipif(tg.cuda_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("script", [ops, scaling])
def test_without_a_gpu_cuda_says_so_and_succeeds(script, capsys):
    assert script.main(["--device", "cuda"]) == 0
    assert "Nothing to time here" in capsys.readouterr().out


def test_torch_columns_where_torch_imports(capsys):
    pytest.importorskip("torch")
    assert ops.main(["--quick", "--ops", "add,layer_norm"]) == 0
    assert "torch f+b" in capsys.readouterr().out
    assert scaling.main(["--quick", "--with-torch", "--n-embd", "16", "--block-size", "8"]) == 0
    assert "ours/torch" in capsys.readouterr().out
