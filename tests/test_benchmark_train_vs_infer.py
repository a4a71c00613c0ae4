"""benchmarks/train_vs_infer.py runs (--quick, tiny shapes) and prints its table; nothing here checks a time."""
import importlib.util
from pathlib import Path

import pytest

import tinygrad_gpu as tg
from tinygrad_gpu.nn import GPT, GPTConfig

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"
ROWS = ("training", "generate cached, batch 1", "generate cached, batch 16", "generate uncached, batch 1")


def load(name):
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train_vs_infer = load("train_vs_infer")


def test_quick_run_prints_four_rows_per_model_with_every_column(capsys):
    assert train_vs_infer.main(["--quick", "--price-per-hour", "3.5"]) == 0
    out = capsys.readouterr().out
    assert "$3.50 an hour (an example price)" in out
    headers = [line.split() for line in out.splitlines() if line.lstrip().startswith("tokens/s")]
    assert headers == [["tokens/s", "FLOPs/token", "GFLOP/s", "$/M", "tokens", "measured"]] * 2   # one per model
    for row in ROWS:
        lines = [line for line in out.splitlines() if line.startswith(row + " ")]
        assert len(lines) == 2
        for line in lines:
            tokens_per_s, flops, gflops, dollars = line[len(row):].split()[:4]
            assert float(tokens_per_s.replace(",", "")) > 0 and float(flops) > 0 and float(dollars) > 0
    assert out.count("ratios: training : cached generation tokens/s") == 2
    assert "cached : uncached (batch 1)" in out


def test_generation_flops_follow_the_stated_formula():
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=8, block_size=8, vocab_size=11, bias=False))
    n, layers_width = model.num_params(), 2 * 8
    # from a one-token prompt, 3 new tokens see contexts 1, 2, 3
    cached = sum(2 * n + 4 * layers_width * t for t in (1, 2, 3)) / 3
    uncached = sum(t * (2 * n + 4 * layers_width * t) for t in (1, 2, 3)) / 3
    assert train_vs_infer.generation_flops_per_token(model, 3, cached=True) == pytest.approx(cached)
    assert train_vs_infer.generation_flops_per_token(model, 3, cached=False) == pytest.approx(uncached)
    # the forward of a full block is a third of training's count per token
    assert 3 * train_vs_infer.forward_flops(model, 1, 8) == pytest.approx(model.flops_per_token())


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        train_vs_infer.main(["--quick", "--price-per-hour", "0"])
    with pytest.raises(SystemExit, match="must fit in block_size 16"):
        train_vs_infer.main(["--quick", "--model", "cpu-recipe", "--new-tokens", "16"])


@pytest.mark.skipif(tg.cuda_available(), reason="this machine has a GPU")
def test_without_a_gpu_cuda_says_so_and_succeeds(capsys):
    assert train_vs_infer.main(["--device", "cuda"]) == 0
    assert "Nothing to time here" in capsys.readouterr().out
