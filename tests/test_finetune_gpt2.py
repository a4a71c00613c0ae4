"""examples/finetune_gpt2.py end to end on a tiny GPT-2 folder built here: random weights in GPT-2's
layout and a byte-pair tokenizer trained on the shop's text with the `tokenizers` library. Full and
LoRA fine-tuning lower the val loss, and the folder written at the end loads back with the same logits."""
import importlib.util
import os
import re

import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu.nn import GPT, GPTConfig
from tinygrad_gpu.tokenizers import GPT2Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHOP = os.path.join(ROOT, "examples", "data", "shop_products.txt")


def _example():
    spec = importlib.util.spec_from_file_location("finetune_gpt2", os.path.join(ROOT, "examples", "finetune_gpt2.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    hf = pytest.importorskip("tokenizers")
    backend = hf.Tokenizer(hf.models.BPE())
    backend.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = hf.decoders.ByteLevel()
    trainer = hf.trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"], show_progress=False,
                                     initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet())
    with open(SHOP, encoding="utf-8") as f:
        backend.train_from_iterator(f.read().splitlines(), trainer)
    tokenizer = GPT2Tokenizer.from_json(backend.to_str())
    folder = tmp_path_factory.mktemp("tiny-gpt2")
    tg.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=64, vocab_size=tokenizer.vocab_size, bias=True,
                          dropout=0.0))
    model.save_pretrained(folder, tokenizer=tokenizer)
    return folder


@pytest.mark.parametrize("lora_rank", [0, 8])
def test_fine_tuning_lowers_the_val_loss_and_writes_a_folder_that_loads(tiny_gpt2, tmp_path, lora_rank, capsys):
    out = tmp_path / "out"
    result = _example().main(["--init-from", str(tiny_gpt2), "--data", SHOP, "--out-dir", str(out),
                              "--block-size", "32", "--batch-size", "4", "--max-iters", "60", "--eval-interval", "60",
                              "--eval-iters", "2", "--lr", "3e-3", "--warmup-iters", "2", "--sample-tokens", "8",
                              "--lora-rank", str(lora_rank), "--price-per-hour", "2"])
    # LoRA trains attention's adapters only, which move a tiny random model's predictions less
    assert result["after"]["val"] < result["before"]["val"] - (0.02 if lora_rank else 0.1)
    assert (out / "adapter.safetensors").exists() == bool(lora_rank)
    reloaded = GPT.from_pretrained(out)
    ids = tg.tensor(GPT2Tokenizer(out).encode("Gentle cleanser with ceramides")[None, :32])
    with tg.no_grad():
        want, got = result["model"].eval()(ids)[0], reloaded.eval()(ids)[0]
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert isinstance(result["samples"][0], str)
    cost = r"^trained 7\.7k tokens at [\d.]+[kMGT]? tokens/s, [\d.]+ [kMGT]?FLOP, .*\$[\d.e-]+ at \$2\.00/h$"      # 60 steps of 4 x 32 tokens
    assert re.search(cost, capsys.readouterr().out, re.M)


def test_sample_py_reads_the_written_folder_with_and_without_the_cache(tiny_gpt2, capsys):
    spec = importlib.util.spec_from_file_location("sample", os.path.join(ROOT, "examples", "sample.py"))
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    texts = []
    for extra in ([], ["--no-cache"]):
        sample.main(["--out-dir", str(tiny_gpt2), "--prompt", "Serum", "--num-samples", "2", "--max-new-tokens", "12",
                     "--temperature", "0.9", "--top-p", "0.9", "--seed", "5", "--device", "cpu", *extra])
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and texts[0].count("--- sample") == 2 and "Serum" in texts[0]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_fine_tuning_in_half_precision_lowers_the_val_loss_and_keeps_float32_weights(tiny_gpt2, tmp_path, dtype,
                                                                                   capsys):
    out = tmp_path / "out"
    result = _example().main(["--init-from", str(tiny_gpt2), "--data", SHOP, "--out-dir", str(out),
                              "--block-size", "32", "--batch-size", "4", "--max-iters", "40", "--eval-interval", "40",
                              "--eval-iters", "2", "--lr", "3e-3", "--warmup-iters", "2", "--sample-tokens", "0",
                              "--dtype", dtype])
    assert f"computing in {dtype}" in capsys.readouterr().out
    assert result["after"]["val"] < result["before"]["val"] - 0.1
    assert {p.dtype for p in result["model"].parameters()} == {tg.float32}     # autocast casts copies only


def test_gradient_checkpointing_fine_tunes_to_the_same_weights(tiny_gpt2, tmp_path):
    """--gradient-checkpointing recomputes each block in backward, dropout's masks too: the same model, bit for bit."""
    results = []
    for extra in ([], ["--gradient-checkpointing"]):
        results.append(_example().main(["--init-from", str(tiny_gpt2), "--data", SHOP, "--out-dir",
                                        str(tmp_path / str(len(extra))), "--block-size", "32", "--batch-size", "2",
                                        "--max-iters", "4", "--eval-interval", "4", "--eval-iters", "1",
                                        "--dropout", "0.1", "--sample-tokens", "0", *extra]))
    assert results[0]["after"] == results[1]["after"]
    for (name, p), q in zip(results[0]["model"].named_parameters(), results[1]["model"].parameters()):
        np.testing.assert_array_equal(q.numpy(), p.numpy(), err_msg=name)
