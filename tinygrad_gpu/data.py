"""Text for language models: corpora, and batches of token ids.

A model learns from (input, target) pairs cut from one long sequence of token ids: the
input is `block_size` consecutive ids and the target is the same window shifted by one,
so every position learns to predict the token (a character, for a character model) that
follows it. The tokenizers that turn text into ids live in tokenizers.py.
"""
from __future__ import annotations

import hashlib
import os
import stat
import urllib.request

import numpy as np

from . import device as devices
from .cache import cache_dir
from .tensor import Tensor
from .tokenizers import CharTokenizer, DataError, Tokenizer  # noqa: F401  (data.CharTokenizer, as before)

SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


# ----------------------------------------------------------------------------- corpora
def builtin_corpus() -> str:
    """English text every CPython installation carries: the help topics behind help('if') etc.
    (the language reference, about 465,000 characters). Needs no download."""
    try:
        from pydoc_data.topics import topics
        return "\n\n".join(topics[name] for name in sorted(topics))
    except ImportError:     # a trimmed Python without pydoc_data: the standard library's own source
        folder = os.path.dirname(os.__file__)
        names = sorted(n for n in os.listdir(folder) if n.endswith(".py"))
        parts, size = [], 0
        for name in names:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                parts.append(f.read())
            size += len(parts[-1])
            if size > 500_000:
                break
        return "\n".join(parts)


def shakespeare() -> str:
    """tiny-shakespeare (1,115,394 characters), downloaded once into the cache and checked by SHA-256."""
    path = cache_dir("data", "tinyshakespeare.txt")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            with urllib.request.urlopen(SHAKESPEARE_URL, timeout=30) as response:
                payload = response.read()
        except OSError as e:
            raise DataError(f"could not download tiny-shakespeare from {SHAKESPEARE_URL} ({e}). Offline? Download "
                            f"it elsewhere and pass --data PATH, or put it at {path}") from None
        digest = hashlib.sha256(payload).hexdigest()
        if digest != SHAKESPEARE_SHA256:
            raise DataError(f"the downloaded tiny-shakespeare has SHA-256 {digest}, expected {SHAKESPEARE_SHA256}")
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "wb") as f:
            f.write(payload)
        os.replace(temporary, path)
    return read_text(path)


def read_text(path: str) -> str:
    """The UTF-8 text of the file at `path`; anything else (no file, a folder, a pipe or a device, which open()
    would wait on, a file we may not read) is a DataError that says which."""
    check_text_file(path)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except PermissionError:
        raise DataError(f"{path} cannot be read: permission denied") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not UTF-8 text ({e})") from None


def check_text_file(path: str) -> None:
    """A DataError unless `path` is a regular file (not missing, not a folder, not a pipe or a device)."""
    if not os.path.exists(path):
        raise DataError(f"no text file at {path}")
    if os.path.isdir(path):
        raise DataError(f"{path} is a folder; give the path of a UTF-8 text file")
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise DataError(f"{path} is not a regular file (a pipe or a device); give the path of a UTF-8 text file")


def load_corpus(name_or_path: str = "builtin") -> str:
    """'builtin' (no download), 'shakespeare' (downloaded once), or the path of a UTF-8 text file."""
    if name_or_path in (None, "", "builtin"):
        return builtin_corpus()
    if name_or_path == "shakespeare":
        return shakespeare()
    return read_text(name_or_path)


# ----------------------------------------------------------------------------- batches
class TextDataset:
    """A corpus encoded once, split 90/10 into train and val, served as random windows."""

    def __init__(self, text: str, block_size: int, tokenizer: Tokenizer = None, val_fraction: float = 0.1,
                 device: str = "cpu"):
        """`tokenizer`: any of tokenizers.py's; by default a CharTokenizer of the text's own characters."""
        if not text:
            raise DataError("the training text is empty")
        self.tokenizer = tokenizer or CharTokenizer.from_text(text)
        self.block_size, self.device = block_size, devices.canonical(device)
        ids = self.tokenizer.encode(text)
        cut = int(len(ids) * (1 - val_fraction))
        self.splits = {"train": ids[:cut], "val": ids[cut:]}
        self._check_lengths(len(ids))
        # The token arrays live on the training device, so batches are cut there without copies.
        self.on_device = {name: devices.move(part, device) for name, part in self.splits.items()}
        self._window = None

    def _check_lengths(self, total: int) -> None:
        """Each split must hold at least one window and its target."""
        for name, part in self.splits.items():
            if len(part) < self.block_size + 1:
                unit = self.tokenizer.unit
                raise DataError(f"the {name} split has {len(part)} {unit}, fewer than block_size + 1 = "
                                f"{self.block_size + 1}; use more text (this text has {total} {unit}) or a "
                                "smaller --block-size")

    def describe(self) -> str:
        return f"train {len(self.splits['train']):,} / val {len(self.splits['val']):,} {self.tokenizer.unit}"

    def batch(self, split: str, batch_size: int, rng: np.random.Generator):
        """(x, y): `batch_size` random windows of `block_size` ids, and the same shifted by one."""
        return self.windows(split, self.draw_starts(split, batch_size, rng))

    def draw_starts(self, split: str, count: int, rng: np.random.Generator) -> np.ndarray:
        """Where `count` random windows start (on the host: a few integers per window)."""
        return rng.integers(0, len(self.splits[split]) - self.block_size, size=count)

    def windows(self, split: str, starts: np.ndarray):
        """(x, y): the windows of `block_size` ids that begin at `starts`, and the same shifted by one."""
        data = self.on_device[split]
        with devices.use(self.device):
            if self._window is None:              # 0 .. block_size - 1, made once, not in every batch
                self._window = devices.array_module(self.device).arange(self.block_size)[None, :]
            offsets = devices.move(starts, self.device)[:, None] + self._window
            return Tensor._wrap(data[offsets], self.device), Tensor._wrap(data[offsets + 1], self.device)
