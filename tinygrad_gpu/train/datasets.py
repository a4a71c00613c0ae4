"""What --data names, as batches: a text (data.TextDataset: random windows), a folder of token files
(token_files.TokenFileDataset: the same windows, read through np.memmap), or a table of records
(records.CompletionDataset: prompt/completion examples, the loss on the completions only)."""
from __future__ import annotations

import os

from .. import records
from ..data import DataError, TextDataset, load_corpus
from ..token_files import META_FILE, TokenFileDataset, is_token_folder
from ..tokenizers import CharTokenizer


def read_source(name_or_path: str) -> str:
    """The text --data names, whose SHA-256 a checkpoint keeps (resuming.py): a folder of token files is
    represented by its meta.json, which records the source file's SHA-256 and the tokenizer."""
    if name_or_path and is_token_folder(name_or_path):
        with open(os.path.join(name_or_path, META_FILE), encoding="utf-8") as f:
            return f.read()
    if isinstance(name_or_path, str) and os.path.isdir(name_or_path):
        raise DataError(f"--data {name_or_path} is a folder without meta.json; give a UTF-8 text file, a table of "
                        "records (.jsonl or .csv), or a folder of token files made by python -m tinygrad_gpu.prepare")
    return load_corpus(name_or_path)


def open_dataset(config, text: str, tokenizer, block_size: int, device: str, log):
    """The dataset --data names, in the model's tokenizer (None: a new character model's, made from the data)."""
    if config.data and is_token_folder(config.data):
        return TokenFileDataset(config.data, block_size, tokenizer, device=device)
    if records.is_records_file(config.data):
        examples = examples_of(config, records.read_records(config.data, text), log)
        if tokenizer is not None:       # a character model's vocabulary may lack some of the records' characters
            dropped = unknown_to_drop(config, tokenizer, "".join(p + c for p, c in examples), log)
            examples = [(without(prompt, dropped), without(completion, dropped)) for prompt, completion in examples]
        if tokenizer is None:           # a new character model: the examples' characters, and a newline to end each
            tokenizer = CharTokenizer.from_text("\n" + "".join(p + c for p, c in examples))
        dataset = records.CompletionDataset(examples, block_size, tokenizer, device=device)
        for note in dataset.notes:
            log(note)
        return dataset
    if tokenizer is not None:
        text = without(text, unknown_to_drop(config, tokenizer, text, log))
    return TextDataset(text, block_size, tokenizer, device=device)


def unknown_to_drop(config, tokenizer, text: str, log) -> set:
    """The characters of `text` the model's vocabulary lacks (a byte-level BPE lacks none), which --drop-unknown
    leaves out; without it, they are a DataError that names them."""
    missing = tokenizer.unknown(text)
    if missing and not config.drop_unknown:
        raise DataError(f"the text has {len(missing)} character(s) the model's vocabulary lacks: "
                        f"{''.join(missing)!r}; pass --drop-unknown to leave them out")
    if missing:
        log(f"dropping {sum(text.count(c) for c in missing)} occurrences of {len(missing)} unknown character(s)")
    return set(missing)


def without(text: str, characters: set) -> str:
    return "".join(c for c in text if c not in characters) if characters else text


def examples_of(config, table: list, log) -> list:
    """(prompt, completion) of each record, made as records.template_for says."""
    template = records.template_for(table, config.template)
    if template is not None and config.template is None:
        log(f"the records have no prompt and completion fields: making them with the template {template.source}")
    return records.examples_from(table, template)
