"""Generate text from a checkpoint written by train_charlm.py or finetune_charlm.py, or from a GPT-2 folder.

    python examples/sample.py --out-dir out-charlm --prompt "The " --num-samples 3 --temperature 0.8
    python examples/sample.py --out-dir out-gpt2-finetune --prompt "Night cream" --top-p 0.9

A folder holding config.json is read as a Hugging Face GPT-2 folder (finetune_gpt2.py writes one),
with its byte-pair tokenizer. GPT models keep each layer's keys and values between tokens (a KV
cache); --no-cache recomputes the whole context for every token instead, with the same result.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # run from a checkout

import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu.train import ConfigError, one_line_errors, sample  # noqa: E402
from tinygrad_gpu.train.checkpointing import load_model  # noqa: E402
from tinygrad_gpu.train.cli import Parser  # noqa: E402
from tinygrad_gpu.train.config import device_named  # noqa: E402


def main(argv=None):
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default="out-charlm", help="the run's folder, holding ckpt.safetensors "
                        "(default: %(default)s)")
    parser.add_argument("--prompt", default=None, help="the text each sample continues (default: a newline, or "
                        "a character model's first character when its vocabulary has none)")
    parser.add_argument("--num-samples", type=int, default=3, help="how many texts (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=500, help="tokens per text (characters, for a "
                        "character model) (default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=0.8, help="below 1 the likely characters become "
                        "likelier, above 1 less so (default: %(default)s)")
    parser.add_argument("--top-k", type=int, default=None, help="draw only from the k likeliest characters "
                        "(default: all)")
    parser.add_argument("--top-p", type=float, default=None, help="draw only from the likeliest tokens whose "
                        "probabilities add up to p (default: all)")
    parser.add_argument("--no-cache", action="store_true", help="recompute the whole context for each token")
    parser.add_argument("--seed", type=int, default=1337, help="seeds the draws (default: %(default)s)")
    parser.add_argument("--device", default=None, help="cpu, cuda (cuda:N) or emu (default: cuda when a GPU is "
                        "visible, else cpu)")
    args = parser.parse_args(argv)
    with one_line_errors():
        for name, least in (("num_samples", 1), ("max_new_tokens", 0), ("top_k", 1)):
            value = getattr(args, name)
            if value is not None and value < least:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least {least}, got {value}")
        if not args.temperature > 0:
            raise ConfigError(f"--temperature must be positive, got {args.temperature}")
        device = device_named(args.device)
        model, tokenizer = load_model(args.out_dir)
        model.to(device)
        tg.manual_seed(args.seed)
        # (only GPT's generate takes these; the LSTM's has neither)
        options = {"top_p": args.top_p, "use_cache": not args.no_cache} if args.top_p or args.no_cache else {}
        texts = sample(model, tokenizer, args.num_samples, args.max_new_tokens, prompt=args.prompt,
                       temperature=args.temperature, top_k=args.top_k, device=device, **options)
    for i, text in enumerate(texts):
        print(f"--- sample {i + 1} ---\n{text}")


if __name__ == "__main__":
    main()
