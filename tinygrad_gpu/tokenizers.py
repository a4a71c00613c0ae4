"""Tokenizers: text to token ids and back, behind one interface that data, training, sampling and
checkpoints use, whichever kind a model was trained with.

- `CharTokenizer`: one id per distinct character of the training text (the character models).
- `GPT2Tokenizer`: GPT-2's byte-level byte-pair encoding, read from the tokenizer files of a Hugging
  Face GPT-2 folder (`tokenizer.json`, or `vocab.json` + `merges.txt`) through the `tokenizers` library
  (`pip install "tinygrad_gpu[hf]"`). It works on UTF-8 bytes, so it encodes any text, nothing is unknown.

Both have `encode(text) -> int64 array`, `decode(ids) -> str`, `vocab_size`, `end_of_text`, `unknown(text)`,
`default_prompt`, `save(path)` and `describe()`; `load_tokenizer(path)` reads back what `save` wrote,
and `from_description(...)` what `describe()` gave (a training checkpoint stores that description).
Nothing here reaches the network: the files are read from a folder on disk.
"""
from __future__ import annotations

import json
import os
import re

import numpy as np

# What a saved CharTokenizer's file is called inside a folder; a GPT-2 tokenizer saves Hugging Face's
# own tokenizer.json, so the folder can sit beside a model's weights.
CHAR_FILE = "char_tokenizer.json"
GPT2_FILE = "tokenizer.json"
GPT2_VOCAB_FILES = ("vocab.json", "merges.txt")
END_OF_TEXT = "<|endoftext|>"       # GPT-2's one special token, between documents


class DataError(ValueError):
    """Text that cannot be used for training (missing, empty, too short, undecodable, outside the vocabulary),
    or tokenizer files that cannot be read. It lives here, below data.py, because the tokenizers raise it
    too; `tinygrad_gpu.data.DataError` is the same class."""


class Tokenizer:
    """What every tokenizer offers. The subclasses below fill it in."""

    kind = None                 # the name a description and a saved file carry, to load the right class
    unit = "tokens"             # what one id stands for, in messages ("the val split has 7 tokens")

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    @property
    def default_prompt(self) -> str:
        """The text a sample starts from when the user gives none."""
        return "\n"

    @property
    def end_of_text(self):
        """The id that ends a document (a fine-tuning example, a generated description), or None when the
        vocabulary has none."""
        return None

    def encode(self, text: str) -> np.ndarray:
        raise NotImplementedError

    def decode(self, ids) -> str:
        raise NotImplementedError

    def unknown(self, text: str) -> list:
        """The characters of `text` this tokenizer cannot encode, sorted (none, for most)."""
        return []

    def describe(self) -> dict:
        """A JSON-able description naming the kind, from which `from_description` rebuilds it."""
        raise NotImplementedError

    def save(self, path) -> str:
        """Write the tokenizer into the folder `path` (made if needed), or to `path` itself when it
        ends in .json; the file written."""
        raise NotImplementedError

    def _file_in(self, path, name: str) -> str:
        path = os.fspath(path)
        if not path.endswith(".json"):
            path = os.path.join(path, name)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return path


# ----------------------------------------------------------------------------- characters
class CharTokenizer(Tokenizer):
    """One id per distinct character, in sorted order. The vocabulary is saved with checkpoints."""

    kind = "char"
    unit = "characters"

    def __init__(self, chars: str):
        self.chars = "".join(chars)
        if len(set(self.chars)) != len(self.chars):
            raise ValueError("CharTokenizer: the vocabulary has repeated characters")
        self.index = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    @property
    def default_prompt(self) -> str:
        return "\n" if "\n" in self.index else self.chars[0]

    @property
    def end_of_text(self):
        # A character model's documents are lines (the shop's corpus has one product per line), so a
        # newline ends one.
        return self.index.get("\n")

    def unknown(self, text: str) -> list:
        return sorted(set(text) - set(self.chars))

    def encode(self, text: str) -> np.ndarray:
        try:
            return np.fromiter((self.index[c] for c in text), dtype=np.int64, count=len(text))
        except KeyError:
            missing = self.unknown(text)
            raise DataError(f"CharTokenizer: {len(missing)} character(s) not in the vocabulary: "
                            f"{''.join(missing)!r} (repr: {missing!r})") from None

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in np.asarray(ids).reshape(-1))

    def describe(self) -> dict:
        return {"kind": self.kind, "chars": self.chars}

    def save(self, path) -> str:
        path = self._file_in(path, CHAR_FILE)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.describe(), f, ensure_ascii=False)
        return path


# ----------------------------------------------------------------------------- GPT-2's byte pairs
def _tokenizers_library():
    """The `tokenizers` library, imported only when a GPT-2 tokenizer is used: the package works without it."""
    try:
        import tokenizers
    except ImportError:
        raise ImportError('GPT2Tokenizer needs the tokenizers library: pip install "tinygrad_gpu[hf]"') from None
    return tokenizers


class GPT2Tokenizer(Tokenizer):
    """GPT-2's byte-level BPE, read from a Hugging Face GPT-2 folder (never downloaded).

    `GPT2Tokenizer(folder)` reads `folder/tokenizer.json`, or else `folder/vocab.json` and
    `folder/merges.txt`; a path to a tokenizer.json file works too.
    """

    kind = "gpt2"

    def __init__(self, folder):
        self._backend = _read_gpt2_files(os.fspath(folder))

    @classmethod
    def train(cls, lines, vocab_size: int) -> "GPT2Tokenizer":
        """A new byte-level BPE of `vocab_size` tokens learnt from the texts `lines`, set up as GPT-2's is: no
        prefix space, every byte mapped to a printable character before merging (so any text encodes),
        <|endoftext|> one token. For small GPT-2s made offline (examples/make_tiny_gpt2.py) and tests."""
        tokenizers = _tokenizers_library()
        backend = tokenizers.Tokenizer(tokenizers.models.BPE())
        backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = tokenizers.decoders.ByteLevel()
        trainer = tokenizers.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[END_OF_TEXT],
                                                 show_progress=False,
                                                 initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
        backend.train_from_iterator(lines, trainer)
        return cls.from_json(backend.to_str())

    @classmethod
    def from_json(cls, text: str) -> "GPT2Tokenizer":
        """From the text of a tokenizer.json (what `describe()` keeps)."""
        self = cls.__new__(cls)
        self._backend = _parse_tokenizer_json(text, "the tokenizer.json text")
        return self

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    @property
    def end_of_text(self):
        return self._backend.token_to_id(END_OF_TEXT)

    def encode(self, text: str) -> np.ndarray:
        # In pieces, which the library encodes in parallel (a corpus of many MB takes seconds, not minutes),
        # cut where the ids come out as one call's would. No special tokens are added around the text:
        # GPT-2 adds none, and ids must follow the text exactly.
        encodings = self._backend.encode_batch(split_for_encoding(text), add_special_tokens=False)
        return np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in encodings])

    def decode(self, ids) -> str:
        # Special tokens stay in (<|endoftext|> between documents), so decode(encode(text)) == text.
        ids = [int(i) for i in np.asarray(ids).reshape(-1)]
        return self._backend.decode(ids, skip_special_tokens=False)

    def describe(self) -> dict:
        # Hugging Face's tokenizer.json as one string: GPT-2's is about 1.4 MB of text, which fits the JSON
        # header where tg.save keeps everything that is not a tensor (safetensors allows 100 MB there).
        return {"kind": self.kind, "tokenizer.json": self._backend.to_str()}

    def save(self, path) -> str:
        path = self._file_in(path, GPT2_FILE)
        self._backend.save(path)
        return path


# GPT-2 splits text into words by a regular expression before it merges byte pairs, and where a run of
# whitespace ends depends on what follows it: "\n\n" is two words before "b" in "a\n\nb" ("\n", "\n") but
# one in "a\n\n" alone, so a text cut after a blank line is encoded differently. A run of whitespace that
# a word follows always gives its last character to that word or to a word of its own ("a  b" is "a",
# " ", " b"), so the text may be cut right before that last character: nothing on either side changes.
# Not before "<": <|endoftext|> is taken out of the text first, and the whitespace before it ends there.
SAFE_CUT = re.compile(r"(?=[ \t\n][^\s<])")
PIECE_CHARS = 100_000       # about 25,000 tokens of English per piece


def split_for_encoding(text: str, size: int = None) -> list:
    """`text` cut at SAFE_CUTs into pieces of at least `size` characters (PIECE_CHARS by default; the last
    piece may be shorter), whose encodings, one after the other, are the encoding of the whole text."""
    size = size or PIECE_CHARS
    pieces, start = [], 0
    while len(text) - start > size:
        cut = SAFE_CUT.search(text, start + size)
        if cut is None:
            break
        pieces.append(text[start:cut.start()])
        start = cut.start()
    return pieces + [text[start:]]


def _parse_tokenizer_json(text: str, where: str):
    tokenizers = _tokenizers_library()
    try:
        return tokenizers.Tokenizer.from_str(text)
    except Exception as e:          # the library raises plain Exceptions for files it cannot read
        raise DataError(f"GPT2Tokenizer: {where} is not a tokenizer the tokenizers library can read ({e})") \
            from None


def _read_gpt2_files(path: str):
    """A `tokenizers.Tokenizer` from a GPT-2 folder's files (or a tokenizer.json file)."""
    if os.path.isfile(path):
        folder, json_file = os.path.dirname(path), path
    elif os.path.isdir(path):
        folder, json_file = path, os.path.join(path, GPT2_FILE)
    else:
        raise DataError(f"GPT2Tokenizer: no folder at {path}")
    if os.path.isfile(json_file):
        with open(json_file, encoding="utf-8") as f:
            return _parse_tokenizer_json(f.read(), json_file)
    vocab, merges = (os.path.join(folder, name) for name in GPT2_VOCAB_FILES)
    missing = [name for name, file in zip(GPT2_VOCAB_FILES, (vocab, merges)) if not os.path.isfile(file)]
    if missing:
        raise DataError(f"GPT2Tokenizer: {folder} has no {GPT2_FILE}, and {' and '.join(missing)} "
                        f"{'is' if len(missing) == 1 else 'are'} missing too; it reads {GPT2_FILE}, or vocab.json "
                        "and merges.txt, from a Hugging Face GPT-2 folder (nothing is downloaded)")
    tokenizers = _tokenizers_library()
    try:
        model = tokenizers.models.BPE.from_file(vocab, merges)
    except Exception as e:
        raise DataError(f"GPT2Tokenizer: cannot read {vocab} and {merges} as byte-pair files ({e})") from None
    # The pipeline GPT-2's own tokenizer.json describes: split the text GPT-2's way and map every byte to a
    # printable character before merging; undo that mapping when decoding. <|endoftext|> is one token.
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    backend.post_processor = tokenizers.processors.ByteLevel(trim_offsets=False)
    if backend.token_to_id(END_OF_TEXT) is not None:
        backend.add_special_tokens([END_OF_TEXT])
    return backend


# ----------------------------------------------------------------------------- loading either kind
def from_description(description) -> Tokenizer:
    """The tokenizer a `describe()` gave, as a training checkpoint stores it. A plain string is the
    vocabulary of a CharTokenizer, as checkpoints held it before there were other kinds."""
    if isinstance(description, str):
        return CharTokenizer(description)
    kind = description.get("kind") if isinstance(description, dict) else None
    if kind == CharTokenizer.kind:
        return CharTokenizer(description["chars"])
    if kind == GPT2Tokenizer.kind:
        return GPT2Tokenizer.from_json(description["tokenizer.json"])
    raise DataError(f"unknown tokenizer description (kind {kind!r}); expected 'char' or 'gpt2'")


def load_tokenizer(path) -> Tokenizer:
    """The tokenizer saved at `path` by either kind's `save`: a folder holding char_tokenizer.json, or a
    GPT-2 folder (tokenizer.json, or vocab.json + merges.txt), or one of those .json files itself."""
    path = os.fspath(path)
    if os.path.isdir(path) and not any(os.path.exists(os.path.join(path, name))
                                       for name in (CHAR_FILE, GPT2_FILE) + GPT2_VOCAB_FILES):
        raise DataError(f"{path} holds no saved tokenizer: no {CHAR_FILE} (a CharTokenizer), no {GPT2_FILE} and "
                        "no vocab.json and merges.txt (GPT-2's)")
    char_file = os.path.join(path, CHAR_FILE) if os.path.isdir(path) else path
    if os.path.isfile(char_file):
        with open(char_file, encoding="utf-8") as f:
            try:
                saved = json.load(f)
            except ValueError as e:
                raise DataError(f"{char_file} is not JSON ({e})") from None
        if isinstance(saved, dict) and saved.get("kind") == CharTokenizer.kind:
            return from_description(saved)
    return GPT2Tokenizer(path)
