"""A corpus tokenized once, read from disk: the folders `python -m tinygrad_gpu.prepare` writes.

A folder holds train.bin and val.bin, the token ids as raw arrays (nanoGPT's layout), and meta.json,
which says their dtype and names the tokenizer. `TokenFileDataset` serves batches from them as
`TextDataset` does from a text in memory, drawn the same way, so the same text gives the same batches
either way; but the ids stay on disk behind np.memmap and only the windows of a batch are read, so a
corpus may be larger than memory.
"""
from __future__ import annotations

import json
import os

import numpy as np

from . import device as devices
from .data import TextDataset
from .tensor import Tensor
from .tokenizers import DataError, Tokenizer, from_description

META_FILE = "meta.json"
SPLITS = ("train", "val")


def is_token_folder(path) -> bool:
    """Whether `path` is a folder that prepare wrote (it holds meta.json)."""
    return os.path.isfile(os.path.join(os.fspath(path), META_FILE))


def read_meta(folder) -> dict:
    """The meta.json of a prepared folder: dtype, vocab_size, the token count of each split, the tokenizer's
    description and the source file."""
    path = os.path.join(os.fspath(folder), META_FILE)
    if not os.path.isfile(path):
        raise DataError(f"{folder} holds no {META_FILE}: it is not a folder of token files (make one with "
                        "python -m tinygrad_gpu.prepare)")
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except ValueError as e:
            raise DataError(f"{path} is not JSON ({e})") from None


class TokenFileDataset(TextDataset):
    """A prepared folder's train and val ids, served as random windows: TextDataset's batches, drawn by its
    draw_starts, so the batches are the same; only where the windows are read from differs."""

    def __init__(self, folder, block_size: int, tokenizer: Tokenizer = None, device: str = "cpu"):
        """`tokenizer`: the model's, which must be the one the folder was prepared with; by default the
        folder's own."""
        folder = os.fspath(folder)
        meta = read_meta(folder)
        if tokenizer is not None and tokenizer.describe() != meta["tokenizer"]:
            raise DataError(_mismatch(folder, meta, tokenizer))
        self.tokenizer = tokenizer or from_description(meta["tokenizer"])
        self.block_size, self.device = block_size, devices.canonical(device)
        # Read-only maps of the files (little-endian, as prepare writes them): len() and indexing work, and
        # only what is indexed is read.
        dtype = np.dtype(meta["dtype"]).newbyteorder("<")
        try:
            self.splits = {name: np.memmap(os.path.join(folder, f"{name}.bin"), dtype=dtype, mode="r")
                           for name in SPLITS}
        except (OSError, ValueError) as e:       # a file missing, or empty
            raise DataError(f"{folder}: cannot read its token files ({e}); prepare the folder again") from None
        for name, part in self.splits.items():
            if len(part) != meta["tokens"][name]:
                raise DataError(f"{folder}/{name}.bin holds {len(part)} tokens, but {META_FILE} says "
                                f"{meta['tokens'][name]}; prepare the folder again")
        self._check_lengths(sum(meta["tokens"].values()))
        self._host_window = np.arange(block_size)[None, :]

    def windows(self, split: str, starts: np.ndarray):
        """(x, y): the windows of `block_size` ids that begin at `starts`, and the same shifted by one,
        gathered on the host from the file and moved to the device as int64."""
        data = self.splits[split]
        offsets = np.asarray(starts)[:, None] + self._host_window
        x, y = (devices.move(data[at].astype(np.int64), self.device) for at in (offsets, offsets + 1))
        return Tensor._wrap(x, self.device), Tensor._wrap(y, self.device)


def _mismatch(folder: str, meta: dict, tokenizer: Tokenizer) -> str:
    return (f"{folder} was prepared with another tokenizer ({meta['tokenizer']['kind']}, {meta['vocab_size']} "
            f"tokens) than the model's ({tokenizer.kind}, {tokenizer.vocab_size} tokens); prepare it again with "
            "the model's tokenizer, saved in a folder: python -m tinygrad_gpu.prepare --tokenizer FOLDER "
            f"--data {meta['source']['path']} --out {folder} --overwrite")
