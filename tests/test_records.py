"""Records for fine-tuning (tinygrad_gpu/records.py): JSONL and CSV tables, templates, errors that name the line
and the field, and CompletionDataset's rows: the loss on the completion and its end-of-text only, one example per
row, none attending to another."""
import json

import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu import records
from tinygrad_gpu.data import DataError
from tinygrad_gpu.nn import GPT, GPTConfig
from tinygrad_gpu.nn import functional as F
from tinygrad_gpu.tokenizers import CharTokenizer

TEMPLATE = "Name: {name}\nFor: {skin}\n<completion>\n{text}\n"
PRODUCTS = [{"name": "Oat Cream", "skin": ["dry", "sensitive"], "text": "Soft and calm."},
            {"name": "Gel", "skin": [], "text": "Light."}]


def _jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    return str(path)


def test_a_template_makes_the_prompt_and_the_completion_from_a_records_fields(tmp_path):
    table = records.read_records(_jsonl(tmp_path / "p.jsonl", PRODUCTS))
    assert [where for where, _ in table] == ["p.jsonl, line 1", "p.jsonl, line 2"]     # the blank line is skipped
    examples = records.examples_from(table, records.Template(TEMPLATE))
    assert examples == [("Name: Oat Cream\nFor: dry, sensitive\n", "Soft and calm."), ("Name: Gel\nFor: \n", "Light.")]


def test_csv_records_and_prompt_completion_records_are_read_as_they_are(tmp_path):
    (tmp_path / "p.csv").write_text('prompt,completion\n"Say hi\n",hello\nSay bye,bye\n', encoding="utf-8")
    table = records.read_records(str(tmp_path / "p.csv"))
    assert records.examples_from(table) == [("Say hi\n", "hello"), ("Say bye", "bye")]
    assert table[1][0] == "p.csv, line 4"            # the quoted field spans two lines


@pytest.mark.parametrize("rows, template, message", [
    ([{"name": "A", "text": "x"}], TEMPLATE, r"p\.jsonl, line 1: the record has no field 'skin', which the template "
                                             r"needs \(its fields: name, text\)"),
    ([PRODUCTS[0], {"prompt": "a"}], None, r"p\.jsonl, line 1: the record has no 'prompt' text.*--template"),
    ([{"prompt": "a", "completion": "b"}, {"prompt": "a"}], None, r"line 2: the record has no 'completion' text"),
])
def test_a_record_without_a_needed_field_names_its_line_and_the_field(tmp_path, rows, template, message):
    table = records.read_records(_jsonl(tmp_path / "p.jsonl", rows))
    with pytest.raises(DataError, match=message):
        records.examples_from(table, template and records.Template(template))


@pytest.mark.parametrize("text, message", [
    ('{"a": 1}\n{"a": \n', r"p\.jsonl, line 2 is not JSON"),
    ('{"a": 1}\n[1, 2]\n', r"p\.jsonl, line 2 holds a list, not a JSON object"),
    ("\n\n", r"holds no records"),
])
def test_a_table_that_cannot_be_read_is_an_error_naming_the_line(tmp_path, text, message):
    (tmp_path / "p.jsonl").write_text(text)
    with pytest.raises(DataError, match=message):
        records.read_records(str(tmp_path / "p.jsonl"))


@pytest.mark.parametrize("text, message", [("{name}\n", "has 0"), ("<completion>\n<completion>\n", "has 2"),
                                           ("{name\n<completion>\n", "not a valid template")])
def test_a_template_needs_one_completion_line_and_valid_fields(text, message):
    with pytest.raises(DataError, match=message):
        records.Template(text)


def test_the_default_template_fits_the_shops_records():
    template = records.Template.from_file(records.DEFAULT_TEMPLATE)
    assert template.completion_fields == ["description"]
    assert set(template.prompt_fields) == {"name", "size", "category", "skin_types", "key_ingredients", "how_to_use",
                                           "warnings"}


def _dataset(examples, block_size, tokenizer=None):
    tokenizer = tokenizer or CharTokenizer("\nabcdefghijklmnopqrstuvwxyz: ")
    return records.CompletionDataset(examples, block_size, tokenizer, val_fraction=0.5,
                                     device=tg.device.default_device()), tokenizer


def test_rows_hold_one_example_with_targets_on_its_completion_and_end_of_text_only():
    dataset, tok = _dataset([("ab:", "cd"), ("xyz:", "q")] * 2, block_size=8)
    x, y = dataset.windows("train", np.array([0, 1]))
    end = tok.end_of_text
    # "ab:" "cd" then the end: inputs a b : c d, targets (ignored twice) c d end, then padding
    np.testing.assert_array_equal(x.numpy()[0], np.concatenate([tok.encode("ab:cd"), [end] * 3]))
    np.testing.assert_array_equal(y.numpy()[0], [-1, -1, *tok.encode("cd"), end, -1, -1, -1])
    np.testing.assert_array_equal(y.numpy()[1], [-1, -1, -1, *tok.encode("q"), end, -1, -1, -1])
    assert dataset.describe() == "train 2 / val 2 examples of at most 8 tokens (5 completion tokens trained on per " \
                                 "epoch)"


def test_the_loss_is_the_completion_tokens_cross_entropy_and_padding_changes_no_logit():
    """Causal attention keeps a row's tokens from the padding after them: the padded row's logits are the example's
    alone, and the loss is the mean over the completion's targets, as computed by hand."""
    dataset, tok = _dataset([("ab:", "cdcd"), ("b:", "a")] * 2, block_size=12)
    tg.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=12, vocab_size=tok.vocab_size)).eval()
    x, y = dataset.windows("train", np.array([0]))
    logits, loss = model(x, y)
    alone, _ = model(tg.tensor(tok.encode("ab:cdcd")[None, :], device=x.device))
    np.testing.assert_allclose(logits.numpy()[0, :7], alone.numpy()[0], rtol=1e-5, atol=1e-6)
    kept = y.numpy()[0] >= 0
    on_host = [tg.tensor(array, device="cpu") for array in (logits.numpy()[0][kept], y.numpy()[0][kept])]
    by_hand = F.cross_entropy(*on_host)
    np.testing.assert_allclose(loss.item(), by_hand.item(), rtol=1e-6)
    assert kept.sum() == 5                                              # c d c d and the end


def test_long_examples_are_cut_and_those_whose_prompt_is_longer_than_the_row_are_left_out():
    dataset, _ = _dataset([("ab:", "cdefgh"), ("abcdefgh:", "x"), ("a:", "b"), ("a:", "c")], block_size=6)
    assert dataset.notes == ["1 of 4 examples are cut short at the end of the row (a --block-size of 6 tokens)",
                             "1 of 4 examples are left out: their prompt alone is longer than the row (a "
                             "--block-size of 6 tokens)"]
    assert len(dataset.splits["train"]) + len(dataset.splits["val"]) == 3
    with pytest.raises(DataError, match="no end-of-text token"):
        _dataset([("a", "b")] * 2, 4, CharTokenizer("ab"))


def test_batches_are_drawn_from_the_examples_on_the_device(device):
    dataset, _ = records.CompletionDataset([("a:", "b"), ("b:", "a")] * 5, 6, CharTokenizer("\nab:"),
                                           device=device), None
    x, y = dataset.batch("train", 3, np.random.default_rng(0))
    assert x.device == y.device == tg.device.canonical(device) and x.shape == y.shape == (3, 6)


def test_an_empty_prompt_trains_on_its_whole_completion_and_a_prompt_as_long_as_the_row_on_one_target():
    rows, notes = records.completion_rows([("", "abcd"), ("abcdef", "gh")], 6, CharTokenizer("\nabcdefgh"))
    assert notes == ["1 of 2 examples are cut short at the end of the row (a --block-size of 6 tokens)"]
    tok = CharTokenizer("\nabcdefgh")
    np.testing.assert_array_equal(rows[0][1], [*tok.encode("bcd"), tok.end_of_text, -1, -1])
    np.testing.assert_array_equal(rows[1][1], [-1, -1, -1, -1, -1, *tok.encode("g")])


def test_a_byte_order_mark_and_a_format_the_value_cannot_take_are_handled(tmp_path):
    (tmp_path / "p.csv").write_text("\ufeffname,size\nOat,150\n", encoding="utf-8")
    table = records.read_records(str(tmp_path / "p.csv"))
    assert table[0][1] == {"name": "Oat", "size": "150"}
    with pytest.raises(DataError, match=r"p\.csv, line 2: the template cannot be filled in from the record"):
        records.examples_from(table, records.Template("{name} {size:.2f}\n<completion>\n{name}"))
