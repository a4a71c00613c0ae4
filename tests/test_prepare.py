"""Token files (tinygrad_gpu.prepare writes them, tinygrad_gpu.token_files reads them): nanoGPT's layout, ids
identical to encoding the text in one call and split as TextDataset splits them, the same batches as TextDataset's,
GPT-2's encoding in pieces equal to one call's, one-line errors, the atomic replace, and tokenizer mismatches.

The GPT-2-style tokenizer is a tiny byte-level BPE trained here with the `tokenizers` library on text full of
blank lines and indentation, so that it has the merges ("\\n\\n", runs of spaces) a badly placed cut would change."""
import functools
import hashlib
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import DEVICES
from tinygrad_gpu import prepare
from tinygrad_gpu import tokenizers as tk
from tinygrad_gpu.data import DataError, TextDataset, read_text
from tinygrad_gpu.token_files import TokenFileDataset, is_token_folder, read_meta

LINES = ["def shop(order):", "    return order's total", "", "", "  indented  twice", "\tthe café's crème brûlée",
         "日本 🙂 <|endoftext|> next", "x  ", "    ", "new socks, new shoes... the same shop!"]
TEXT = "\n".join(LINES * 12)
TRICKY = ["a\n\nb", "a  \nb", "\n\n  indented", "x\n's\n'S it's", "no newline at all, just words",
          "a" + " " * 40 + "b", "   leading and trailing   ", "\n", "crème\n\n\n日本\n🙂 <|endoftext|>\n\n<|endoftext|>",
          "tabs\t\t\tand\r\nreturns\x0b\x0c\xa0\u2028\u3000x", ""]


@functools.lru_cache(maxsize=None)
def _bpe_json() -> str:
    pytest.importorskip("tokenizers")
    return tk.GPT2Tokenizer.train([TEXT] * 4, 400).describe()["tokenizer.json"]


def _one_call(tokenizer, text: str) -> np.ndarray:
    """What encoding the whole text in one call gives: the reference for any encoding in pieces."""
    if isinstance(tokenizer, tk.GPT2Tokenizer):
        return np.asarray(tokenizer._backend.encode(text, add_special_tokens=False).ids, dtype=np.int64)
    return tokenizer.encode(text)


@pytest.fixture
def gpt2_folder(tmp_path):
    folder = tmp_path / "gpt2"
    tk.GPT2Tokenizer.from_json(_bpe_json()).save(folder)
    return str(folder)


@pytest.fixture(params=["char", "gpt2"])
def kind(request):
    return request.param


@pytest.fixture
def corpus(tmp_path):
    """The text file, with Windows newlines in places (read_text reads them as "\\n", and so must prepare)."""
    path = tmp_path / "corpus.txt"
    path.write_bytes(TEXT.replace("twice\n", "twice\r\n").encode("utf-8"))
    return str(path)


def _tokenizer_flag(kind, request):
    return "char" if kind == "char" else request.getfixturevalue("gpt2_folder")


def _prepare(data, out, tokenizer, *extra):
    return prepare.main(["--tokenizer", tokenizer, "--data", data, "--out", str(out), "--no-progress", *extra])


# ----------------------------------------------------------------------------- what prepare writes
def test_files_hold_the_ids_of_one_call_split_as_text_dataset_splits(kind, request, corpus, tmp_path, monkeypatch,
                                                                     capsys):
    monkeypatch.setattr(prepare, "READ_CHARS", 50)          # many reads, each cut and carried over
    monkeypatch.setattr(tk, "PIECE_CHARS", 7)               # and many pieces for encode_batch
    out = tmp_path / "tokens"
    meta = _prepare(corpus, out, _tokenizer_flag(kind, request))
    assert sorted(os.listdir(out)) == ["meta.json", "train.bin", "val.bin"]
    assert sorted(os.listdir(tmp_path)) == sorted(["corpus.txt", "tokens"] + (["gpt2"] if kind == "gpt2" else []))
    assert meta == read_meta(out) and is_token_folder(out) and not is_token_folder(tmp_path)

    text = read_text(corpus)
    tokenizer = tk.from_description(meta["tokenizer"])
    assert tokenizer.kind == kind and "\r" not in text
    if kind == "char":
        assert meta["tokenizer"] == tk.CharTokenizer.from_text(text).describe()
    else:
        assert meta["tokenizer"] == tk.load_tokenizer(request.getfixturevalue("gpt2_folder")).describe()
    ids = _one_call(tokenizer, text)
    reference = TextDataset(text, 4, tokenizer=tokenizer)
    cut = len(reference.splits["train"])
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == tokenizer.vocab_size
    assert meta["tokens"] == {"train": cut, "val": len(ids) - cut}
    for name, part in (("train", ids[:cut]), ("val", ids[cut:])):
        assert os.path.getsize(out / f"{name}.bin") == 2 * len(part)
        np.testing.assert_array_equal(np.fromfile(out / f"{name}.bin", dtype="<u2"), part)
        np.testing.assert_array_equal(reference.splits[name], part)
    with open(corpus, "rb") as f:
        payload = f.read()
    assert meta["source"] == {"path": os.path.abspath(corpus), "bytes": len(payload),
                              "sha256": hashlib.sha256(payload).hexdigest()}
    assert f"{cut:,} train and {len(ids) - cut:,} val tokens as uint16" in capsys.readouterr().out


def test_large_vocabularies_are_written_as_uint32(corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "UINT16_LIMIT", 10)        # the char vocabulary here has more than 10 characters
    meta = _prepare(corpus, tmp_path / "tokens", "char")
    assert meta["dtype"] == "uint32" and meta["vocab_size"] > 10
    ids = tk.CharTokenizer.from_text(read_text(corpus)).encode(read_text(corpus))
    assert os.path.getsize(tmp_path / "tokens" / "train.bin") == 4 * meta["tokens"]["train"]
    dataset = TokenFileDataset(tmp_path / "tokens", 4)
    np.testing.assert_array_equal(np.concatenate([dataset.splits["train"], dataset.splits["val"]]), ids)


# ----------------------------------------------------------------------------- reading them back
@pytest.mark.parametrize("device", DEVICES)
def test_batches_are_text_datasets_batches(kind, request, corpus, tmp_path, device):
    _prepare(corpus, tmp_path / "tokens", _tokenizer_flag(kind, request))
    files = TokenFileDataset(tmp_path / "tokens", 8, device=device)
    memory = TextDataset(read_text(corpus), 8, tokenizer=files.tokenizer, device=device)
    assert files.tokenizer.kind == kind and files.block_size == 8 and files.device == memory.device
    for name, part in files.splits.items():
        assert isinstance(part, np.memmap) and not part.flags.writeable and len(part) == len(memory.splits[name])
    for seed in range(3):
        for split in ("train", "val"):
            rng_files, rng_memory = np.random.default_rng(seed), np.random.default_rng(seed)
            for _ in range(2):
                (x, y), (x_want, y_want) = files.batch(split, 5, rng_files), memory.batch(split, 5, rng_memory)
                assert x.device == y.device == memory.device and x.shape == (5, 8)
                assert x.numpy().dtype == y.numpy().dtype == np.int64
                np.testing.assert_array_equal(x.numpy(), x_want.numpy())
                np.testing.assert_array_equal(y.numpy(), y_want.numpy())
            starts = files.draw_starts(split, 7, rng_files)
            np.testing.assert_array_equal(starts, memory.draw_starts(split, 7, rng_memory))


def test_too_short_splits_are_text_datasets_error(corpus, tmp_path):
    _prepare(corpus, tmp_path / "tokens", "char")
    block_size = len(TokenFileDataset(tmp_path / "tokens", 4).splits["val"])       # val is one id short
    with pytest.raises(DataError) as want:
        TextDataset(read_text(corpus), block_size)
    with pytest.raises(DataError) as got:
        TokenFileDataset(tmp_path / "tokens", block_size)
    assert str(got.value) == str(want.value) and "the val split has" in str(got.value)


def test_a_different_tokenizer_is_refused_with_how_to_prepare_again(corpus, tmp_path, gpt2_folder):
    _prepare(corpus, tmp_path / "chars", "char")
    _prepare(corpus, tmp_path / "bpe", gpt2_folder)
    text = read_text(corpus)
    # The same tokenizers, made anew, are accepted.
    assert TokenFileDataset(tmp_path / "chars", 4, tokenizer=tk.CharTokenizer.from_text(text)).tokenizer.kind == "char"
    same = tk.from_description(tk.load_tokenizer(gpt2_folder).describe())
    assert TokenFileDataset(tmp_path / "bpe", 4, tokenizer=same).tokenizer is same
    for folder, model in ((tmp_path / "chars", tk.CharTokenizer.from_text(text + "Z")),
                          (tmp_path / "chars", same), (tmp_path / "bpe", tk.CharTokenizer.from_text(text))):
        with pytest.raises(DataError, match="prepared with another tokenizer") as error:
            TokenFileDataset(folder, 4, tokenizer=model)
        message = str(error.value)
        theirs = read_meta(folder)
        assert f"({theirs['tokenizer']['kind']}, {theirs['vocab_size']} tokens)" in message
        assert f"({model.kind}, {model.vocab_size} tokens)" in message
        assert f"python -m tinygrad_gpu.prepare --tokenizer FOLDER --data {os.path.abspath(corpus)}" in message


def test_read_meta_of_a_folder_without_token_files(tmp_path):
    with pytest.raises(DataError, match="holds no meta.json"):
        read_meta(tmp_path)


# ----------------------------------------------------------------------------- GPT-2 in pieces
def test_cutting_after_a_blank_line_would_change_the_ids():
    """Why SAFE_CUT is not "after any newline": this tokenizer merges "\\n\\n", which a cut before the "b" of
    "a\\n\\nb" would make one word instead of two."""
    tokenizer = tk.GPT2Tokenizer.from_json(_bpe_json())
    assert list(_one_call(tokenizer, "a\n\n")) + list(_one_call(tokenizer, "b")) != list(_one_call(tokenizer, "a\n\nb"))
    assert tk.split_for_encoding("a\n\nb", 1) == ["a\n", "\nb"]
    # In a run of whitespace, only before its last character, and never before "<" (<|endoftext|>)
    assert tk.split_for_encoding("a" + " " * 40 + "b", 3) == ["a" + " " * 39, " b"]
    assert tk.split_for_encoding("a  <|endoftext|>", 1) == ["a  <|endoftext|>"]
    assert tk.split_for_encoding("one two three", 1) == ["one", " two", " three"]


@pytest.mark.parametrize("text", TRICKY)
def test_encode_in_pieces_is_one_call(text, monkeypatch):
    tokenizer = tk.GPT2Tokenizer.from_json(_bpe_json())
    want = _one_call(tokenizer, text)
    for size in (1, 2, 3, 5, 100_000):
        monkeypatch.setattr(tk, "PIECE_CHARS", size)
        got = tokenizer.encode(text)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)


PARTS = ["\n", "\n\n", " ", "  ", "\t", "\r", "a", "b", "Shop", "'s", "'", ".", "!", "é", "日本", "🙂", "\xa0", "\u2028",
         "\x1c", "\x85", "12", "<|endoftext|>", "<", "|"]


@given(parts=st.lists(st.sampled_from(PARTS), max_size=30), size=st.integers(1, 6))
def test_encode_in_pieces_is_one_call_on_random_texts(parts, size):
    tokenizer, text = tk.GPT2Tokenizer.from_json(_bpe_json()), "".join(parts)
    pieces = tk.split_for_encoding(text, size)
    assert "".join(pieces) == text and all(len(piece) >= size for piece in pieces[:-1])
    got = np.concatenate([_one_call(tokenizer, piece) for piece in pieces])
    np.testing.assert_array_equal(got, _one_call(tokenizer, text))


# ----------------------------------------------------------------------------- errors and replacing
def _error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        prepare.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    return err


def test_mistakes_are_one_line_errors(tmp_path, capsys, corpus):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "latin1.txt").write_bytes("crème brûlée\n".encode("latin-1"))
    (tmp_path / "short.txt").write_text("ab", encoding="utf-8")
    (tmp_path / "no-tokenizer").mkdir()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine", encoding="utf-8")
    out = str(tmp_path / "out")
    for data, tokenizer, want, where in [(tmp_path / "missing.txt", "char", "no text file at", out),
                                         (tmp_path, "char", "is a folder", out),
                                         (tmp_path / "empty.txt", "char", "is empty", out),
                                         (tmp_path / "latin1.txt", "char", "is not UTF-8 text", out),
                                         (corpus, str(tmp_path / "no-tokenizer"), "holds no saved tokenizer", out),
                                         (tmp_path / "short.txt", "char", "the train split has 1 characters", out),
                                         (corpus, "char", "holds files other than token files", tmp_path / "busy"),
                                         (corpus, "char", "is a file", corpus)]:
        err = _error(capsys, ["--tokenizer", tokenizer, "--data", str(data), "--out", str(where), "--no-progress"])
        assert want in err, err
    assert _error(capsys, ["--tokenizer", "char", "--data", corpus, "--out", out, "--overwrit"]).endswith(
        "did you mean --overwrite? (see python -m tinygrad_gpu.prepare --help)\n")
    assert "required: --out" in _error(capsys, ["--tokenizer", "char", "--data", corpus])
    # Nothing was left behind: no out folder, no half-written temporary one.
    assert sorted(os.listdir(tmp_path)) == ["busy", "corpus.txt", "empty.txt", "latin1.txt", "no-tokenizer",
                                            "short.txt"]


def test_an_existing_folder_is_replaced_only_with_overwrite_and_only_when_complete(tmp_path, capsys, monkeypatch):
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text(TEXT, encoding="utf-8")
    second.write_text(TEXT.upper(), encoding="utf-8")
    out = tmp_path / "tokens"
    old = _prepare(str(first), out, "char")
    assert "add --overwrite" in _error(capsys, ["--tokenizer", "char", "--data", str(second), "--out", str(out)])

    def disk_full(path):
        raise OSError("No space left on device")
    with monkeypatch.context() as patch:        # a failure after the new files are written keeps the old folder
        patch.setattr(prepare, "_sha256", disk_full)
        with pytest.raises(OSError, match="No space"):
            _prepare(str(second), out, "char", "--overwrite")
    assert read_meta(out) == old

    new = _prepare(str(second), out, "char", "--overwrite")
    assert read_meta(out) == new and new["source"]["path"] == str(second) != old["source"]["path"]
    dataset = TokenFileDataset(out, 4)
    assert dataset.tokenizer.decode(dataset.splits["train"][:3]) == TEXT.upper()[:3]
    assert sorted(os.listdir(tmp_path)) == ["first.txt", "second.txt", "tokens"]
    assert sorted(os.listdir(out)) == ["meta.json", "train.bin", "val.bin"]


# ----------------------------------------------------------------------------- training from a folder
def _tiny_gpt2_model_folder(tmp_path) -> str:
    """A GPT-2 folder (random weights, the tiny byte-pair tokenizer) to fine-tune from."""
    from tinygrad_gpu.nn import GPT, GPTConfig
    tokenizer = tk.GPT2Tokenizer.from_json(_bpe_json())
    folder = str(tmp_path / "model")
    GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, vocab_size=tokenizer.vocab_size)).save_pretrained(
        folder, tokenizer=tokenizer)
    return folder


@pytest.mark.parametrize("start", ["a new character model", "a GPT-2 folder"])
def test_a_run_on_the_prepared_folder_has_the_losses_of_a_run_on_the_raw_file(tmp_path, start):
    """The same text, read raw or from its token files: the same batches, so the same losses at every evaluation
    (and a resumed run keeps reading the folder)."""
    from tinygrad_gpu.train import TrainConfig, train
    source = tmp_path / "corpus.txt"
    source.write_text(TEXT * 3, encoding="utf-8")
    model = _tiny_gpt2_model_folder(tmp_path) if start == "a GPT-2 folder" else None
    prepare.main(["--tokenizer", model or "char", "--data", str(source), "--out", str(tmp_path / "tokens"),
                  "--no-progress"])
    settings = dict(init_from=model, n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4, max_iters=6,
                    eval_interval=3, eval_iters=2, num_samples=0, progress=False, warmup_iters=2, device="cpu")
    runs = [train(TrainConfig(data=data, out_dir=str(tmp_path / name), **settings), log=lambda *a: None)
            for name, data in (("raw", str(source)), ("folder", str(tmp_path / "tokens")))]
    losses = [[(r["iter"], r["train_loss"], r["val_loss"]) for r in run["metrics"]] for run in runs]
    assert losses[0] == losses[1] and len(losses[0]) == 3
    resumed = train(TrainConfig(out_dir=str(tmp_path / "folder"), resume=True, max_iters=9, eval_interval=3,
                                eval_iters=2, num_samples=0, progress=False), log=lambda *a: None)
    assert resumed["iter"] == 9


def test_a_folder_prepared_with_another_tokenizer_is_refused_by_a_run(tmp_path):
    from tinygrad_gpu.train import TrainConfig, train
    source = tmp_path / "corpus.txt"
    source.write_text(TEXT * 3, encoding="utf-8")
    prepare.main(["--tokenizer", "char", "--data", str(source), "--out", str(tmp_path / "tokens"), "--no-progress"])
    with pytest.raises(DataError, match="was prepared with another tokenizer \\(char, .*than the model's \\(gpt2"):
        train(TrainConfig(data=str(tmp_path / "tokens"), init_from=_tiny_gpt2_model_folder(tmp_path), block_size=16,
                          out_dir=str(tmp_path / "out"), max_iters=1, num_samples=0, progress=False),
              log=lambda *a: None)
