"""Corpora, the character tokenizer and batching (tinygrad_gpu.data)."""
import io
import os
import urllib.request

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinygrad_gpu import data
from tinygrad_gpu.data import CharTokenizer, DataError, TextDataset

SHARED_SHAKESPEARE = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "tinyshakespeare.txt")


@given(st.text(min_size=1, max_size=200))
def test_tokenizer_round_trip(text):
    tokenizer = CharTokenizer.from_text(text)
    ids = tokenizer.encode(text)
    assert ids.dtype == np.int64 and len(ids) == len(text)
    assert tokenizer.decode(ids) == text
    assert tokenizer.chars == "".join(sorted(set(text))) and tokenizer.vocab_size == len(set(text))


def test_unknown_characters_are_a_clear_error():
    tokenizer = CharTokenizer.from_text("hello world")
    with pytest.raises(DataError, match=r"2 character\(s\).*'XZ'"):
        tokenizer.encode("hello XZ")
    assert tokenizer.unknown("hello XZ!") == ["!", "X", "Z"]
    with pytest.raises(ValueError, match="repeated"):
        CharTokenizer("aab")


def test_builtin_corpus_needs_no_download():
    text = data.load_corpus("builtin")
    assert len(text) > 100_000 and len(set(text)) > 60
    assert data.load_corpus("builtin") == text      # deterministic


def test_file_errors(tmp_path):
    with pytest.raises(DataError, match="no text file"):
        data.load_corpus(str(tmp_path / "missing.txt"))
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(DataError, match="not UTF-8"):
        data.load_corpus(str(binary))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(DataError, match="empty"):
        TextDataset(data.load_corpus(str(empty)), block_size=8)
    with pytest.raises(DataError, match="is a folder"):
        data.load_corpus(str(tmp_path))
    if hasattr(os, "mkfifo"):                # open() on a pipe would wait for a writer forever
        os.mkfifo(tmp_path / "pipe")
        with pytest.raises(DataError, match="not a regular file"):
            data.load_corpus(str(tmp_path / "pipe"))
    if os.name == "posix" and os.geteuid() != 0:            # root reads anything
        locked = tmp_path / "locked.txt"
        locked.write_text("secret")
        locked.chmod(0)
        with pytest.raises(DataError, match="permission denied"):
            data.load_corpus(str(locked))


def test_text_too_short_for_the_block_size():
    with pytest.raises(DataError, match=r"val split has 10 characters, fewer than block_size \+ 1 = 17"):
        TextDataset("abcdefghij" * 10, block_size=16)
    TextDataset("abcdefghij" * 10, block_size=9)       # 9 + 1 characters in val: just enough


def test_split_and_batches():
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    dataset = TextDataset(text, block_size=8)
    assert len(dataset.splits["train"]) == 900 and len(dataset.splits["val"]) == 100
    rng = np.random.default_rng(0)
    x, y = dataset.batch("train", 5, rng)
    assert x.shape == (5, 8) and y.shape == (5, 8) and x.dtype == np.int64
    np.testing.assert_array_equal(x.numpy()[:, 1:], y.numpy()[:, :-1])    # y is x shifted by one
    for row in x.numpy():      # each row is a real window of the train split
        assert dataset.tokenizer.decode(row) in text[:900]
    x2, _ = dataset.batch("train", 5, np.random.default_rng(0))
    np.testing.assert_array_equal(x.numpy(), x2.numpy())                    # seeded
    xv, _ = dataset.batch("val", 3, rng)
    assert dataset.tokenizer.decode(xv.numpy()[0]) in text[900:]


def test_batches_on_the_emu_device():
    dataset = TextDataset("abcdefghij" * 50, block_size=4, device="emu")
    x, y = dataset.batch("train", 2, np.random.default_rng(1))
    assert x.device == "emu" and y.device == "emu"


def test_shakespeare_download_is_checked_and_cached(tmp_path, monkeypatch):
    if not os.path.exists(SHARED_SHAKESPEARE):
        pytest.skip("../shared/data/tinyshakespeare.txt is not present")
    payload = open(SHARED_SHAKESPEARE, "rb").read()
    monkeypatch.setenv("TINYGRAD_GPU_CACHE", str(tmp_path))
    calls = []

    def fake_urlopen(url, timeout):
        calls.append(url)
        return io.BytesIO(payload)
    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    text = data.load_corpus("shakespeare")
    assert len(text) == 1_115_394 and len(set(text)) == 65 and calls == [data.SHAKESPEARE_URL]
    assert data.load_corpus("shakespeare") == text and len(calls) == 1     # second time: from the cache
    dataset = TextDataset(text, block_size=64)
    assert len(dataset.splits["train"]) == 1_003_854 and len(dataset.splits["val"]) == 111_540


def test_shakespeare_offline_and_corrupt_downloads_are_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYGRAD_GPU_CACHE", str(tmp_path))

    def offline(url, timeout):
        raise OSError("Name or service not known")
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DataError, match="Offline.*--data PATH"):
        data.load_corpus("shakespeare")
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"not shakespeare"))
    with pytest.raises(DataError, match="SHA-256"):
        data.load_corpus("shakespeare")
    assert not os.path.exists(tmp_path / "data" / "tinyshakespeare.txt")   # nothing bad was cached
