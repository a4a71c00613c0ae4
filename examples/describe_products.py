"""Write a description of each product in a table with a trained model, many products per batch.

    python examples/describe_products.py --model out-gpt2-finetune/huggingface --products new.jsonl --out out.jsonl
    python examples/describe_products.py --model out-charlm --products new.csv --out descriptions.jsonl --temperature 0

--model is a GPT-2 folder (config.json) or a run folder of ours holding ckpt.safetensors (examples/sample.py's
load). --products is a .jsonl or .csv table of records; each becomes a prompt through --template (by default
tinygrad_gpu/templates/product_description.txt, of which only the prompt part, above <completion>, is filled: the
records need no description), or, without --template, through its own `prompt` field when it has one. The model
continues each prompt until its end-of-text token (GPT-2's <|endoftext|>, a character model's newline) or
--max-new-tokens, and --out receives each input record plus "generated": that continuation, without the prompt
and the end-of-text. Prompts of different lengths share a batch (left-padded: GPT.generate's prompt_lengths) and
each new token runs against the kept keys and values (the KV cache).
"""
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # run from a checkout

import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu import records  # noqa: E402
from tinygrad_gpu.data import DataError  # noqa: E402
from tinygrad_gpu.nn import GPT  # noqa: E402
from tinygrad_gpu.train import ConfigError, one_line_errors  # noqa: E402
from tinygrad_gpu.train.checkpointing import load_model  # noqa: E402
from tinygrad_gpu.train.cli import Parser  # noqa: E402
from tinygrad_gpu.train.config import device_named  # noqa: E402
from tinygrad_gpu.train.reporting import _prefixed, time_and_cost  # noqa: E402


def parse(argv=None):
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a GPT-2 folder (config.json) or a run's folder holding "
                        "ckpt.safetensors")
    parser.add_argument("--products", required=True, help="the records to describe, .jsonl or .csv")
    parser.add_argument("--out", required=True, help="the .jsonl file to write: each record plus \"generated\"")
    parser.add_argument("--template", default=None, help="makes each record's prompt (default: the records' own "
                        "prompt field, else tinygrad_gpu/templates/product_description.txt)")
    parser.add_argument("--batch-size", type=int, default=8, help="products per batch (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=200, help="the longest description, in tokens "
                        "(default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=0.8, help="0: always the likeliest token; below 1 "
                        "safer choices, above 1 bolder ones (default: %(default)s)")
    parser.add_argument("--top-k", type=int, default=None, help="draw only from the k likeliest tokens")
    parser.add_argument("--top-p", type=float, default=None, help="draw only from the likeliest tokens whose "
                        "probabilities add up to p")
    parser.add_argument("--seed", type=int, default=1337, help="seeds the draws (default: %(default)s)")
    parser.add_argument("--device", default=None, help="cpu, cuda (cuda:N) or emu (default: cuda when a GPU is "
                        "visible, else cpu)")
    parser.add_argument("--price-per-hour", type=float, default=None, help="the machine's price in dollars per "
                        "hour, to report what the descriptions cost")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (there is one only when "
                        "stderr is a terminal anyway)")
    return parser.parse_args(argv)


def check(args) -> None:
    for name, least in (("batch_size", 1), ("max_new_tokens", 1), ("top_k", 1)):
        value = getattr(args, name)
        if value is not None and value < least:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least {least}, got {value}")
    if not args.temperature >= 0:
        raise ConfigError(f"--temperature must be 0 or more, got {args.temperature}")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise ConfigError(f"--top-p must be in (0, 1], got {args.top_p}")
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder):       # found now, not once every description has been written
        raise ConfigError(f"--out {args.out}: there is no folder {folder} to write it in")


def prompts_of(table: list, template_path: str = None) -> list:
    """Each record's prompt, made as records.template_for says (only the template's prompt part: the records need
    no description)."""
    template = records.template_for(table, template_path, own=("prompt",))
    if template is not None:
        return [template.prompt(record, where) for where, record in table]
    for where, record in table:
        if not isinstance(record.get("prompt"), str):
            raise DataError(f"{where}: the record has no 'prompt' text, as the first one has; give every record one, "
                            "or a --template that makes it from the fields they have")
    return [record["prompt"] for _, record in table]


def encode_all(tokenizer, table: list, prompts: list, room: int) -> list:
    """The prompts' token ids; a prompt that leaves no room for the new tokens in the model's window is an error
    naming its record (found before any generating: a long run should not fail half way)."""
    encoded = []
    for (where, _), prompt in zip(table, prompts):
        try:
            ids = tokenizer.encode(prompt)
        except DataError as e:          # a character the vocabulary lacks
            raise DataError(f"{where}: {e}") from None
        if not len(ids):
            raise DataError(f"{where}: its prompt is empty; a description continues the product's facts")
        if len(ids) > room:
            raise DataError(f"{where}: its prompt is {len(ids)} tokens, and the model's window holds {room} besides "
                            "--max-new-tokens; lower --max-new-tokens or shorten the record")
        encoded.append(ids)
    return encoded


def describe_batch(model, tokenizer, prompt_ids: list, args, device: str) -> list:
    """(text, tokens generated) of each prompt of one batch."""
    end = tokenizer.end_of_text         # None: a character vocabulary without a newline, which then never stops
    longest = max(map(len, prompt_ids))
    idx = np.full((len(prompt_ids), longest), 0 if end is None else end, dtype=np.int64)
    for row, ids in zip(idx, prompt_ids):
        row[longest - len(ids):] = ids                                     # left padding: the prompts end together
    out = model.generate(tg.Tensor(idx, device=device), args.max_new_tokens, temperature=args.temperature,
                         top_k=args.top_k, top_p=args.top_p, prompt_lengths=[len(ids) for ids in prompt_ids],
                         eos_token_id=end).numpy()
    results = []
    for new in out[:, longest:]:
        ends = np.flatnonzero(new == end)
        n = ends[0] if ends.size else len(new)                             # the text stops before the end-of-text
        results.append((tokenizer.decode(new[:n]), n + bool(ends.size)))   # which was generated too
    return results


def write_atomically(path: str, rows: list) -> None:
    """All of the file or none of it: written beside it, then renamed over it (a rename is atomic)."""
    temporary = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def summary(count: int, path: str, tokens: int, seconds: float, price_per_hour: float = None) -> str:
    """`wrote 16 descriptions to out.jsonl: 2.1k tokens generated at 180 tokens/s, 12 s, $0.0067 at $2.00/h`"""
    return (f"wrote {count} descriptions to {path}: {_prefixed(tokens)} tokens generated at "
            f"{_prefixed(tokens / max(seconds, 1e-9))} tokens/s, {time_and_cost(seconds, price_per_hour)}")


def progress_bar(total: int, wanted: bool):
    """tqdm's bar over the products when wanted and someone watches (stderr is a terminal), else None."""
    if not (wanted and sys.stderr.isatty()):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="product", dynamic_ncols=True)


def main(argv=None) -> list:
    args = parse(argv)
    with one_line_errors():
        check(args)
        device = device_named(args.device)
        table = records.read_records(args.products)
        model, tokenizer = load_model(args.model)
        if not isinstance(model, GPT):
            raise ConfigError(f"{args.model} holds a {type(model).__name__}; describing products needs a GPT")
        model.to(device)
        prompt_ids = encode_all(tokenizer, table, prompts_of(table, args.template),
                                model.config.block_size - args.max_new_tokens)
        tg.manual_seed(args.seed)
        bar, rows, tokens, start = progress_bar(len(table), not args.no_progress), [], 0, time.time()
        for first in range(0, len(table), args.batch_size):
            batch = slice(first, first + args.batch_size)
            for (_, record), (text, generated) in zip(table[batch], describe_batch(model, tokenizer, prompt_ids[batch],
                                                                                   args, device)):
                rows.append({**record, "generated": text})
                tokens += generated
            if bar is not None:
                bar.update(len(prompt_ids[batch]))
        seconds = time.time() - start
        if bar is not None:
            bar.close()
        write_atomically(args.out, rows)
    print(summary(len(rows), args.out, tokens, seconds, args.price_per_hour))
    return rows


if __name__ == "__main__":
    main()
