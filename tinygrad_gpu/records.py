"""Structured data for fine-tuning: a table of records in, (prompt, completion) examples out, and their batches.

A fine-tuning file is JSON Lines (one object per line) or CSV (a header row, then one record per row).
Records with `prompt` and `completion` fields, the format of hosted fine-tuning services, are used as they are.
Any other table goes through a template: a text with `{field}` placeholders and one line that reads
`<completion>` alone. The lines above that mark, filled in from a record, are the prompt; the lines below are
the completion. tinygrad_gpu/templates/product_description.txt turns the shop's product records into a prompt
of facts and a completion that is the product's description:

    Product: {name}, {size}
    Key ingredients: {key_ingredients}
    ...
    Description:
    <completion>
    {description}

A field that holds a list (skin types, ingredients) is written as its items joined by ", ".

CompletionDataset makes the batches: each example is prompt + completion + the tokenizer's end-of-text id, one
example per row, padded at the end. The loss counts only the completion's tokens and the end-of-text (the
targets of the prompt and of the padding are -1, the ignore_index of GPT's loss), so the model learns to write
descriptions, not to recite product facts. Padding rather than packing several examples into a row: with
causal attention, a row's real tokens never see the padding after them, so no example attends to another and
no attention mask is needed; the price is the padded positions' compute, small when the examples are of
similar length, as a shop's descriptions are.
"""
from __future__ import annotations

import csv
import io
import json
import os
import string

import numpy as np

from . import device as devices
from .data import DataError, read_text
from .tensor import Tensor

COMPLETION_MARK = "<completion>"
DEFAULT_TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates", "product_description.txt")
IGNORE_INDEX = -1          # GPT's cross-entropy skips these targets


# ----------------------------------------------------------------------------- records
def read_records(path: str, text: str = None) -> list:
    """[(where, record)]: each record of a .jsonl or .csv file (whose `text` may be given, read already) with
    where it is ("products.jsonl, line 3"), which every error about it names. Blank lines of a JSONL file are
    skipped."""
    text = (read_text(path) if text is None else text).removeprefix("\ufeff")    # the mark some editors put first
    name = os.path.basename(path)
    if path.endswith(".csv"):
        reader = csv.DictReader(io.StringIO(text, newline=""))     # quoted fields may hold newlines
        records = [(f"{name}, line {reader.line_num}", row) for row in reader]
    elif path.endswith((".jsonl", ".json")):
        records = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"{name}, line {number}"
            try:
                record = json.loads(line)
            except ValueError as e:
                raise DataError(f"{where} is not JSON ({e}); a .jsonl file holds one JSON object per line") from None
            if not isinstance(record, dict):
                raise DataError(f"{where} holds a {type(record).__name__}, not a JSON object with fields")
            records.append((where, record))
    else:
        raise DataError(f"{path}: records are read from .jsonl or .csv files")
    if not records:
        raise DataError(f"{path} holds no records")
    return records


def is_records_file(path) -> bool:
    """Whether --data names a table of records (by its extension) rather than a text."""
    return isinstance(path, str) and path.endswith((".jsonl", ".csv"))


class Template:
    """A prompt and a completion made from a record's fields (see the module's docstring)."""

    def __init__(self, text: str, source: str = "the template"):
        lines = text.split("\n")
        marks = [i for i, line in enumerate(lines) if line.strip() == COMPLETION_MARK]
        if len(marks) != 1:
            raise DataError(f"{source} must have one line that reads {COMPLETION_MARK} alone, where the completion "
                            f"starts; it has {len(marks)}")
        self.source = source
        self.prompt_text = "\n".join(lines[:marks[0]]) + "\n"
        self.completion_text = "\n".join(lines[marks[0] + 1:]).rstrip("\n")
        try:
            self.prompt_fields, self.completion_fields = _fields(self.prompt_text), _fields(self.completion_text)
        except ValueError as e:
            raise DataError(f"{source} is not a valid template ({e}); write a literal brace as {{{{ or }}}}") \
                from None

    @classmethod
    def from_file(cls, path: str) -> "Template":
        return cls(read_text(path), path)

    def prompt(self, record: dict, where: str) -> str:
        return self._fill(self.prompt_text, self.prompt_fields, record, where)

    def completion(self, record: dict, where: str) -> str:
        return self._fill(self.completion_text, self.completion_fields, record, where)

    def _fill(self, text: str, fields: list, record: dict, where: str) -> str:
        values = {}
        for field in fields:
            if field not in record:
                raise DataError(f"{where}: the record has no field {field!r}, which {self.source} needs (its fields: "
                                f"{', '.join(sorted(record)) or 'none'})")
            value = record[field]
            values[field] = ", ".join(map(str, value)) if isinstance(value, list) else \
                "" if value is None else str(value)
        try:
            return text.format_map(values)
        except (ValueError, IndexError, KeyError) as e:     # a format spec the value cannot take ({size:.2f})
            raise DataError(f"{where}: {self.source} cannot be filled in from the record ({e})") from None


def _fields(text: str) -> list:
    return [field for _, field, _, _ in string.Formatter().parse(text) if field is not None]


def template_for(records: list, path: str = None, own=("prompt", "completion")):
    """The Template that makes the records' prompts (and completions): the one at `path` (--template) when given;
    else None for records that have their `own` fields (a prompt and a completion; a prompt alone, for writing
    completions), used as they are; else DEFAULT_TEMPLATE, which fits a shop's product records."""
    if path is None and set(own) <= set(records[0][1]):
        return None
    return Template.from_file(path or DEFAULT_TEMPLATE)


def examples_from(records: list, template: Template = None) -> list:
    """[(prompt, completion)] of each record: its own `prompt` and `completion` fields without a template, else
    the template's."""
    examples = []
    for where, record in records:
        if template is not None:
            examples.append((template.prompt(record, where), template.completion(record, where)))
            continue
        for field in ("prompt", "completion"):
            if not isinstance(record.get(field), str):
                raise DataError(f"{where}: the record has no {field!r} text; records need 'prompt' and "
                                "'completion' fields, or a --template that makes them from the fields they have")
        examples.append((record["prompt"], record["completion"]))
    return examples


# ----------------------------------------------------------------------------- batches
def completion_rows(examples: list, block_size: int, tokenizer) -> tuple:
    """([(inputs, targets)] of `block_size` ids per example, notes on what was adjusted): prompt + completion +
    end-of-text, padded at the end, the targets of the prompt and of the padding -1."""
    end = tokenizer.end_of_text
    if end is None:
        raise DataError("the tokenizer has no end-of-text token to end each example with (a character "
                        "vocabulary needs a newline)")
    rows, cut_short, left_out = [], 0, 0
    for prompt, completion in examples:
        prompt_ids = tokenizer.encode(prompt)
        ids = np.concatenate([prompt_ids, tokenizer.encode(completion), [end]])
        if len(prompt_ids) > block_size:      # no completion token would have a target in the row
            left_out += 1
            continue
        cut_short += len(ids) > block_size + 1
        inputs, targets = ids[:-1][:block_size], ids[1:][:block_size].copy()
        targets[:max(len(prompt_ids) - 1, 0)] = IGNORE_INDEX     # positions that read the prompt and predict it
        row = np.full((2, block_size), [[end], [IGNORE_INDEX]], dtype=np.int64)   # padding after the example
        row[0, :len(inputs)], row[1, :len(targets)] = inputs, targets
        rows.append(row)
    notes = [f"{count} of {len(examples)} examples {what} (a --block-size of {block_size} tokens)"
             for count, what in ((cut_short, "are cut short at the end of the row"),
                                 (left_out, "are left out: their prompt alone is longer than the row")) if count]
    return rows, notes


class CompletionDataset:
    """Prompt/completion examples as padded rows of token ids, split into train and val (the last tenth of the
    examples), served as random rows: the interface of data.TextDataset (batch, draw_starts, windows), where a
    "start" is an example's index. `notes` says what was adjusted: examples cut at the row's length, examples
    left out because their prompt alone fills it."""

    def __init__(self, examples: list, block_size: int, tokenizer, val_fraction: float = 0.1, device: str = "cpu"):
        self.tokenizer, self.block_size, self.device = tokenizer, block_size, devices.canonical(device)
        rows, self.notes = completion_rows(examples, block_size, tokenizer)
        cut = int(len(rows) * (1 - val_fraction))
        # what the training programs' samples start from: the last example's prompt (held out, or left out), which
        # the model never trained on, answered up to end-of-text
        self.sample_prompt, self.sample_end = examples[-1][0], tokenizer.end_of_text
        self.splits = {"train": rows[:cut], "val": rows[cut:]}
        for name, part in self.splits.items():
            if not part:
                raise DataError(f"the {name} split has no examples ({len(rows)} in all, the last tenth held out for "
                                "val); give more records")
        self.counted = {name: np.array([(row[1] != IGNORE_INDEX).sum() for row in part])
                        for name, part in self.splits.items()}
        self.on_device = {name: tuple(devices.move(np.stack([row[i] for row in part]), device) for i in (0, 1))
                          for name, part in self.splits.items()}      # (inputs, targets), each (examples, block)

    def targets_in(self, split: str, starts: np.ndarray) -> int:
        """How many targets the loss counts in the examples `starts` names (read on the host: ranks.py weighs
        micro-batches by it)."""
        return int(self.counted[split][starts].sum())

    def describe(self) -> str:
        trained = int(self.counted["train"].sum())
        return (f"train {len(self.splits['train']):,} / val {len(self.splits['val']):,} examples of at most "
                f"{self.block_size} tokens ({trained:,} completion tokens trained on per epoch)")

    def batch(self, split: str, batch_size: int, rng: np.random.Generator):
        return self.windows(split, self.draw_starts(split, batch_size, rng))

    def draw_starts(self, split: str, count: int, rng: np.random.Generator) -> np.ndarray:
        """Which examples a batch holds (random, with replacement, as text windows are drawn)."""
        return rng.integers(0, len(self.splits[split]), size=count)

    def windows(self, split: str, starts: np.ndarray):
        """(x, y): the examples `starts` names, inputs and targets."""
        inputs, targets = self.on_device[split]
        with devices.use(self.device):
            chosen = devices.move(starts, self.device)
            return Tensor._wrap(inputs[chosen], self.device), Tensor._wrap(targets[chosen], self.device)
