"""Tokenizers behind one interface (tinygrad_gpu.tokenizers): the character tokenizer and GPT-2's byte-level
BPE read from a Hugging Face folder, saving and loading either, the checkpoint's description of each (and the
plain character string older checkpoints hold), and training runs resumed with either.

Nothing is downloaded: the GPT-2-style folders are made here by training a tiny byte-level BPE with the
`tokenizers` library, the way GPT-2's own was made (ByteLevel pre-tokenizer and decoder)."""
import functools
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_gpu as tg
from tinygrad_gpu import tokenizers as tk
from tinygrad_gpu.data import CharTokenizer, DataError, TextDataset
from tinygrad_gpu.device import default_device
from tinygrad_gpu.train import TrainConfig, build_model, checkpointing, sample, train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINES = ["the shop sells shoes and socks", "crème brûlée for the café", "new socks, new shoes, the same shop",
         "orders ship within two days"]
ODD = "crème, 日本, emoji 🙂\n\ttabs  and  spaces <|endoftext|> the end"
TEXT = "\n".join(LINES * 40)


@functools.lru_cache(maxsize=None)
def _trained_bpe_json() -> str:
    """A tiny GPT-2-style tokenizer: 256 byte symbols, <|endoftext|> and a few dozen merges, as tokenizer.json."""
    hf = pytest.importorskip("tokenizers")
    backend = hf.Tokenizer(hf.models.BPE())
    backend.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = hf.decoders.ByteLevel()
    backend.post_processor = hf.processors.ByteLevel(trim_offsets=False)
    trainer = hf.trainers.BpeTrainer(vocab_size=320, special_tokens=[tk.END_OF_TEXT], show_progress=False,
                                     initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(LINES, trainer)
    return backend.to_str()


@pytest.fixture
def gpt2_folder(tmp_path):
    """A folder holding tokenizer.json, as a Hugging Face GPT-2 folder does."""
    folder = tmp_path / "gpt2"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(_trained_bpe_json(), encoding="utf-8")
    return folder


@pytest.fixture
def gpt2_vocab_folder(tmp_path):
    """A folder holding vocab.json and merges.txt only (the older GPT-2 folders)."""
    hf = pytest.importorskip("tokenizers")
    folder = tmp_path / "gpt2-vocab"
    folder.mkdir()
    hf.Tokenizer.from_str(_trained_bpe_json()).model.save(str(folder))
    assert sorted(os.listdir(folder)) == ["merges.txt", "vocab.json"]
    return folder


# ----------------------------------------------------------------------------- GPT-2's byte pairs
def test_gpt2_tokenizer_round_trips_any_text(gpt2_folder):
    tokenizer = tk.GPT2Tokenizer(gpt2_folder)
    ids = tokenizer.encode(ODD)
    assert isinstance(ids, np.ndarray) and ids.dtype == np.int64 and ids.ndim == 1
    assert ids.min() >= 0 and ids.max() < tokenizer.vocab_size
    assert tokenizer.decode(ids) == ODD
    assert tokenizer.decode(list(ids)) == ODD and tokenizer.decode(tg.tensor(ids).numpy()) == ODD
    assert 257 < tokenizer.vocab_size <= 320            # 256 bytes, <|endoftext|>, and the merges learnt
    assert tokenizer.unknown(ODD) == []                  # byte-level: nothing is unknown
    # the merges are used: the trained words take fewer tokens than their bytes; <|endoftext|> is one token
    assert len(tokenizer.encode("the shop sells shoes")) < len("the shop sells shoes") / 2
    eot = tokenizer.encode(tk.END_OF_TEXT)
    assert len(eot) == 1 and tokenizer.decode(eot) == tk.END_OF_TEXT


@given(st.text(max_size=60))
def test_gpt2_round_trip_property(text):
    tokenizer = tk.GPT2Tokenizer.from_json(_trained_bpe_json())
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_vocab_and_merges_read_like_tokenizer_json(gpt2_folder, gpt2_vocab_folder):
    from_json, from_vocab = tk.GPT2Tokenizer(gpt2_folder), tk.GPT2Tokenizer(gpt2_vocab_folder)
    assert from_vocab.vocab_size == from_json.vocab_size
    text = ODD + "\n" + TEXT[:300]
    np.testing.assert_array_equal(from_vocab.encode(text), from_json.encode(text))
    assert from_vocab.decode(from_vocab.encode(text)) == text
    assert tk.GPT2Tokenizer(gpt2_folder / "tokenizer.json").encode(text).tolist() == from_json.encode(text).tolist()


def test_missing_files_are_one_line_errors(tmp_path, gpt2_vocab_folder):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=r"empty has no tokenizer\.json, and vocab\.json and merges\.txt are "
                                        r"missing too") as error:
        tk.GPT2Tokenizer(empty)
    assert "\n" not in str(error.value)
    os.remove(gpt2_vocab_folder / "merges.txt")
    with pytest.raises(DataError, match=r"gpt2-vocab has no tokenizer\.json, and merges\.txt is missing too"):
        tk.GPT2Tokenizer(gpt2_vocab_folder)
    with pytest.raises(DataError, match="no folder at .*nowhere"):
        tk.GPT2Tokenizer(tmp_path / "nowhere")
    with pytest.raises(DataError, match=r"empty holds no saved tokenizer: no char_tokenizer\.json"):
        tk.load_tokenizer(empty)


def test_a_damaged_tokenizer_json_is_a_one_line_error(tmp_path):
    pytest.importorskip("tokenizers")
    (tmp_path / "tokenizer.json").write_text('{"model": "half a file')
    with pytest.raises(DataError, match="tokenizer.json is not a tokenizer the tokenizers library can read") as error:
        tk.GPT2Tokenizer(tmp_path)
    assert "\n" not in str(error.value)


def test_a_missing_library_is_a_one_line_import_error(tmp_path, monkeypatch):
    (tmp_path / "tokenizer.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "tokenizers", None)        # `import tokenizers` now fails, installed or not
    with pytest.raises(ImportError, match=r'^GPT2Tokenizer needs the tokenizers library: pip install '
                                          r'"tinygrad_gpu\[hf\]"$'):
        tk.GPT2Tokenizer(tmp_path)
    with pytest.raises(ImportError, match="pip install"):
        tk.from_description({"kind": "gpt2", "tokenizer.json": "{}"})
    # the character tokenizer and everything else still work without it
    tokenizer = tk.from_description(CharTokenizer.from_text("abc").describe())
    assert tokenizer.decode(tokenizer.encode("cab")) == "cab"


def test_the_package_imports_without_the_library():
    code = ("import sys; sys.modules['tokenizers'] = None; "
            "import tinygrad_gpu.data, tinygrad_gpu.tokenizers, tinygrad_gpu.train; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


# ----------------------------------------------------------------------------- saving and loading either kind
def test_char_tokenizer_saves_and_loads(tmp_path):
    tokenizer = CharTokenizer.from_text(ODD)
    assert tokenizer.decode(tokenizer.encode(ODD)) == ODD and tokenizer.encode(ODD).dtype == np.int64
    written = tokenizer.save(tmp_path / "folder")
    assert written == str(tmp_path / "folder" / tk.CHAR_FILE)
    for path in (tmp_path / "folder", written, tokenizer.save(tmp_path / "elsewhere" / "chars.json")):
        loaded = tk.load_tokenizer(path)
        assert isinstance(loaded, CharTokenizer) and loaded.chars == tokenizer.chars
    assert tk.from_description(tokenizer.describe()).chars == tokenizer.chars
    assert tokenizer.describe() == {"kind": "char", "chars": tokenizer.chars}


def test_gpt2_tokenizer_saves_and_loads(tmp_path, gpt2_vocab_folder):
    tokenizer = tk.GPT2Tokenizer(gpt2_vocab_folder)
    written = tokenizer.save(tmp_path / "saved")
    assert written == str(tmp_path / "saved" / "tokenizer.json")        # Hugging Face's own file name
    for path in (tmp_path / "saved", written):
        loaded = tk.load_tokenizer(path)
        assert isinstance(loaded, tk.GPT2Tokenizer) and loaded.vocab_size == tokenizer.vocab_size
        np.testing.assert_array_equal(loaded.encode(ODD), tokenizer.encode(ODD))
    assert isinstance(tk.load_tokenizer(gpt2_vocab_folder), tk.GPT2Tokenizer)
    description = tokenizer.describe()
    assert description["kind"] == "gpt2" and isinstance(description["tokenizer.json"], str)
    np.testing.assert_array_equal(tk.from_description(description).encode(ODD), tokenizer.encode(ODD))


def test_descriptions_old_and_unknown():
    old = tk.from_description("\n !abc")           # what checkpoints held before there were other kinds
    assert isinstance(old, CharTokenizer) and old.chars == "\n !abc"
    with pytest.raises(DataError, match="unknown tokenizer description .*'bert'"):
        tk.from_description({"kind": "bert"})


def test_the_checkpoint_keeps_the_description_through_tg_save(tmp_path, gpt2_folder):
    for tokenizer in (CharTokenizer.from_text(ODD), tk.GPT2Tokenizer(gpt2_folder)):
        tg.save({"tokenizer": tokenizer.describe()}, tmp_path / "ckpt.safetensors")
        loaded = checkpointing.tokenizer_of(tg.load(tmp_path / "ckpt.safetensors"))
        assert type(loaded) is type(tokenizer) and loaded.describe() == tokenizer.describe()
        assert loaded.decode(loaded.encode(ODD)) == ODD


# ----------------------------------------------------------------------------- data, sampling and training
def test_text_dataset_takes_either_tokenizer(gpt2_folder):
    tokenizer = tk.GPT2Tokenizer(gpt2_folder)
    dataset = TextDataset(TEXT, block_size=8, tokenizer=tokenizer)
    ids = tokenizer.encode(TEXT)
    assert len(dataset.splits["train"]) + len(dataset.splits["val"]) == len(ids) < len(TEXT) / 2
    x, y = dataset.batch("train", 3, np.random.default_rng(0))
    assert x.shape == (3, 8) and x.dtype == np.int64
    np.testing.assert_array_equal(x.numpy()[:, 1:], y.numpy()[:, :-1])
    assert all(tokenizer.decode(row) in TEXT for row in dataset.batch("val", 3, np.random.default_rng(1))[0].numpy())
    with pytest.raises(DataError, match=r"val split has \d+ tokens, fewer than block_size \+ 1"):
        TextDataset(TEXT[:200], block_size=16, tokenizer=tokenizer)
    assert isinstance(TextDataset(TEXT, block_size=8).tokenizer, CharTokenizer)     # the default, as before


def test_default_prompts():
    assert CharTokenizer.from_text("ab\n").default_prompt == "\n"
    assert CharTokenizer.from_text("ba").default_prompt == "a"          # no newline: the first character


def test_sample_with_a_gpt2_tokenizer(gpt2_folder):
    tokenizer = tk.GPT2Tokenizer(gpt2_folder)
    tg.manual_seed(0)
    settings = TrainConfig(n_layer=1, n_head=2, n_embd=16, block_size=8).model_settings()
    device = default_device()       # cpu, or cuda in the stand-in pass
    model = build_model(settings, tokenizer.vocab_size).to(device)
    texts = sample(model, tokenizer, 2, 5, device=device)
    assert len(texts) == 2 and all(t.startswith("\n") for t in texts)
    prompted = sample(model, tokenizer, 1, 3, prompt="crème ", device=device)
    assert prompted[0].startswith("crème ")


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    # Whole runs on the CuPy stand-in (the cuda pass) use our kernels' NumPy references, as test_train.py's do.
    monkeypatch.setenv("TINYGRAD_GPU_STANDIN_KERNELS", "reference")
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT + "\n" + ODD, encoding="utf-8")
    return str(path)


def _config(out, corpus, max_iters, **settings):
    return TrainConfig(data=corpus, out_dir=str(out), n_layer=1, n_head=2, n_embd=16, block_size=8, batch_size=4,
                       eval_iters=1, eval_interval=2, max_iters=max_iters, lr_decay_iters=4, warmup_iters=1,
                       lr=1e-2, min_lr=1e-3, num_samples=1, sample_tokens=6, progress=False, **settings)


def _losses(summary):
    return [(r["iter"], r["train_loss"], r["val_loss"], r["lr"]) for r in summary["metrics"]]


def _quiet(*args):
    pass


def test_training_resumes_with_a_gpt2_tokenizer(tmp_path, corpus, gpt2_folder, capsys):
    """A run whose checkpoint holds a GPT-2 tokenizer resumes with it, exactly as if never stopped."""
    tokenizer = tk.GPT2Tokenizer(gpt2_folder)
    config = _config(tmp_path / "a", corpus, 4)
    tg.manual_seed(config.seed)
    model = build_model(config.model_settings(), tokenizer.vocab_size)
    optimizer = model.configure_optimizers(config.weight_decay, config.lr, (config.beta1, config.beta2))
    start = tmp_path / "a" / checkpointing.CHECKPOINT_NAME
    checkpointing.save(str(start), model, optimizer, 0, tokenizer, config.model_settings(), config,
                       np.random.default_rng(config.seed))
    shutil.copytree(tmp_path / "a", tmp_path / "b")

    straight = train(_config(tmp_path / "a", corpus, 4, resume=True), log=_quiet)
    train(_config(tmp_path / "b", corpus, 2, resume=True), log=_quiet)
    resumed = train(_config(tmp_path / "b", corpus, 4, resume=True), log=_quiet)
    assert [r[0] for r in _losses(straight)] == [0, 2, 4]
    assert _losses(resumed) == _losses(straight)
    assert isinstance(straight["samples"][0], str) and straight["samples"][0].startswith("\n")
    saved = tg.load(tmp_path / "b" / checkpointing.CHECKPOINT_NAME)
    assert saved["iter"] == 4 and saved["tokenizer"] == tokenizer.describe()

    _sample_program(tmp_path / "b", "crème ")
    assert capsys.readouterr().out.count("crème ") == 2


def test_training_resumes_from_an_old_checkpoint_holding_plain_chars(tmp_path, corpus, capsys):
    """Checkpoints written before there were other tokenizers hold the characters as a string; they still
    resume (and sample), exactly as the run would have gone on."""
    straight = train(_config(tmp_path / "a", corpus, 4), log=_quiet)
    train(_config(tmp_path / "b", corpus, 2), log=_quiet)
    path = tmp_path / "b" / checkpointing.CHECKPOINT_NAME
    saved = tg.load(path)
    assert saved["tokenizer"]["kind"] == "char"
    saved["tokenizer"] = saved["tokenizer"]["chars"]                # as an older version wrote it
    tg.save(saved, path)
    resumed = train(_config(tmp_path / "b", corpus, 4, resume=True), log=_quiet)
    assert _losses(resumed) == _losses(straight) and [r[0] for r in _losses(straight)] == [0, 2, 4]
    finished = tg.load(path)
    assert finished["tokenizer"] == {"kind": "char", "chars": "".join(sorted(set(TEXT + "\n" + ODD)))}

    finished["tokenizer"] = finished["tokenizer"]["chars"]          # sample.py reads the old form too
    tg.save(finished, path)
    _sample_program(tmp_path / "b", None)
    out = capsys.readouterr().out
    assert out.count("--- sample") == 2 and "--- sample 1 ---\n\n" in out      # the newline it starts from


def _sample_program(out_dir, prompt):
    """examples/sample.py in this process (its main), two samples."""
    import runpy
    main = runpy.run_path(os.path.join(ROOT, "examples", "sample.py"))["main"]
    args = ["--out-dir", str(out_dir), "--num-samples", "2", "--max-new-tokens", "4"]
    main(args + (["--prompt", prompt] if prompt is not None else []))
