"""Tokenize a corpus once, into token files that training reads from disk:

    python -m tinygrad_gpu.prepare --tokenizer (char|FOLDER) --data FILE --out DIR [--overwrite]

DIR gets nanoGPT's layout (its data/*/prepare.py): train.bin and val.bin hold the token ids as raw
little-endian arrays, uint16 while the vocabulary has at most 65,536 tokens (GPT-2's 50,257 do) and
uint32 beyond, and meta.json says what they are: the tokenizer (its describe(), from which
tokenizers.from_description rebuilds it), the dtype, the vocabulary size, each split's token count and
the source file (its path, size and SHA-256). Training maps the files with np.memmap
(token_files.TokenFileDataset): nothing is tokenized at the start of a run, and only the windows of a
batch are read, so a corpus may be larger than memory. Preparing streams too: the text is read,
encoded and written a few MB at a time.

The split is TextDataset's, the first 90% of the ids to train and the rest to validate, so a run gives
the same batches, and losses, from the folder as from the text file.

--tokenizer char makes a CharTokenizer of the text's own characters (as TextDataset does; it takes a
first pass over the file); a FOLDER is read by tokenizers.load_tokenizer (a Hugging Face GPT-2 folder, or
a folder where a tokenizer was saved).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys

import numpy as np
from tqdm import tqdm

from .data import DataError, check_text_file
from .token_files import META_FILE, is_token_folder
from .tokenizers import CharTokenizer, Tokenizer, load_tokenizer, split_for_encoding
from .train.cli import Parser, one_line_errors

READ_CHARS = 1_000_000          # text read, encoded and written at a time, whatever the corpus's size
VAL_FRACTION = 0.1              # TextDataset's
UINT16_LIMIT = 2 ** 16          # vocabularies up to this size fit ids in uint16


def main(argv=None) -> dict:
    parser = Parser(prog="python -m tinygrad_gpu.prepare",
                    description="Tokenize a text file once into DIR/train.bin, DIR/val.bin and DIR/meta.json.")
    parser.add_argument("--tokenizer", required=True, metavar="char|FOLDER",
                        help="char (the text's own characters), or a folder holding a tokenizer (a Hugging Face "
                             "GPT-2 folder, or one a tokenizer was saved in)")
    parser.add_argument("--data", required=True, metavar="FILE", help="the UTF-8 text file to tokenize")
    parser.add_argument("--out", required=True, metavar="DIR", help="the folder to write")
    parser.add_argument("--overwrite", action="store_true", help="replace DIR when it holds token files already")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (shown only on a terminal)")
    args = parser.parse_args(argv)
    with one_line_errors():
        meta = prepare(args.tokenizer, args.data, args.out, overwrite=args.overwrite,
                       progress=sys.stderr.isatty() and not args.no_progress)
    tokens = meta["tokens"]
    print(f"{args.out}: {tokens['train']:,} train and {tokens['val']:,} val tokens as {meta['dtype']}, "
          f"vocabulary {meta['vocab_size']:,}")
    return meta


def prepare(tokenizer: str, data: str, out: str, overwrite: bool = False, progress: bool = False) -> dict:
    """Write the token files of the text file `data` into the folder `out`; what meta.json says.
    `tokenizer`: 'char' or a tokenizer's folder. A failure leaves `out` as it was."""
    _check_source(data)
    _check_out(out, overwrite)
    tokenizer = _tokenizer(tokenizer, data, progress)
    dtype = np.dtype("<u2" if tokenizer.vocab_size <= UINT16_LIMIT else "<u4")
    # Everything is written into a new folder beside `out`, which takes its name only once it is complete.
    work = f"{os.path.abspath(out)}.{os.getpid()}.tmp"
    shutil.rmtree(work, ignore_errors=True)     # left by a killed run of a process that had our id
    os.makedirs(work)
    try:
        tokens = _write_ids(tokenizer, data, dtype, work, progress)
        meta = {"dtype": dtype.name, "vocab_size": tokenizer.vocab_size, "tokens": tokens, "val_fraction": VAL_FRACTION,
                "source": {"path": os.path.abspath(data), "bytes": os.path.getsize(data), "sha256": _sha256(data)},
                "tokenizer": tokenizer.describe()}      # last: GPT-2's is 1.4 MB, the rest reads first
        with open(os.path.join(work, META_FILE), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1, ensure_ascii=False)
        _move_into_place(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return meta


def _check_source(path: str) -> None:
    """The checks of data.read_text, without reading the whole file."""
    check_text_file(path)
    if os.path.getsize(path) == 0:
        raise DataError(f"{path} is empty")


def _check_out(out: str, overwrite: bool) -> None:
    if os.path.exists(out) and not os.path.isdir(out):
        raise DataError(f"{out} is a file; --out names the folder to write")
    if os.path.isdir(out) and os.listdir(out):
        if not is_token_folder(out):
            raise DataError(f"{out} holds files other than token files; give a new or empty folder as --out")
        if not overwrite:
            raise DataError(f"{out} holds token files already; add --overwrite to replace them")


def _tokenizer(name: str, data: str, progress: bool) -> Tokenizer:
    if name == "char":          # the characters of the whole text: a first pass over the file
        chars = set()
        for text in _pieces(data, "reading characters", progress):
            chars.update(text)
        return CharTokenizer("".join(sorted(chars)))
    try:
        return load_tokenizer(name)
    except ImportError as e:    # GPT-2's needs the tokenizers library
        raise DataError(str(e)) from None


def _pieces(path: str, what: str, progress: bool):
    """The text of the file at `path`, a few MB at a time, cut where any tokenizer's encoding may be cut
    (tokenizers.SAFE_CUT), with a progress bar over its bytes."""
    try:
        f = open(path, encoding="utf-8")        # as read_text opens it: "\r\n" reads as "\n"
    except PermissionError:
        raise DataError(f"{path} cannot be read: permission denied") from None
    with f, tqdm(total=os.path.getsize(path), desc=what, unit="B", unit_scale=True, disable=not progress) as bar:
        rest = ""
        while True:
            try:
                text = f.read(READ_CHARS)
            except UnicodeDecodeError as e:
                raise DataError(f"{path} is not UTF-8 text ({e})") from None
            if not text:
                break
            *whole, rest = split_for_encoding(rest + text, READ_CHARS)      # the end waits for what follows
            yield from whole
            bar.update(f.buffer.tell() - bar.n)
        if rest:
            yield rest


def _write_ids(tokenizer: Tokenizer, data: str, dtype: np.dtype, folder: str, progress: bool) -> dict:
    """Encode the file into folder/train.bin and folder/val.bin; the token count of each."""
    train, val = os.path.join(folder, "train.bin"), os.path.join(folder, "val.bin")
    total = 0
    with open(train, "wb") as f:        # all the ids first: where val begins depends on how many there are
        for text in _pieces(data, "tokenizing", progress):
            ids = tokenizer.encode(text)
            ids.astype(dtype).tofile(f)
            total += len(ids)
    cut = int(total * (1 - VAL_FRACTION))       # as TextDataset cuts
    tokens = {"train": cut, "val": total - cut}
    for name, count in tokens.items():
        if count < 2:       # a window and its target need two ids at least
            raise DataError(f"the {name} split has {count} {tokenizer.unit}, fewer than 2; use more text "
                            f"(this text has {total} {tokenizer.unit})")
    with open(train, "r+b") as f, open(val, "wb") as v:     # then the last 10% moves to val.bin
        f.seek(cut * dtype.itemsize)
        shutil.copyfileobj(f, v)
        f.truncate(cut * dtype.itemsize)
    return tokens


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _move_into_place(work: str, out: str) -> None:
    """Rename the finished folder `work` to `out`; an `out` already there (empty, or token files that
    --overwrite replaces) is set aside first and removed last."""
    if os.path.isdir(out):
        old = work + ".old"
        os.rename(out, old)
        os.rename(work, out)
        shutil.rmtree(old)
    else:
        os.rename(work, out)


if __name__ == "__main__":
    main()
