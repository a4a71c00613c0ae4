"""Make a small GPT-2 folder offline, to try the fine-tuning flow where GPT-2 itself cannot be downloaded.

    python examples/make_tiny_gpt2.py --out tiny-gpt2
    python examples/finetune_gpt2.py --init-from tiny-gpt2 --data builtin --block-size 128 --batch-size 12 \
        --max-iters 1000 --lr 1e-3 --min-lr 1e-4 --warmup-iters 100 --weight-decay 0.1 --eval-interval 250 \
        --out-dir tiny-gpt2-base              # teach it some English: a GPT-2 folder in tiny-gpt2-base/huggingface

The folder has GPT-2's layout (config.json, model.safetensors, tokenizer.json) and GPT-2's kind of
tokenizer, a byte-level byte-pair encoding, trained here on --data with the `tokenizers` library
(`pip install "tinygrad_gpu[hf]"`) and ending documents with <|endoftext|>. Its weights are GPT-2's
initialisation, random: it knows nothing until trained, which the second command above does.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # run from a checkout

import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu.data import load_corpus  # noqa: E402
from tinygrad_gpu.nn import GPT, GPTConfig  # noqa: E402
from tinygrad_gpu.tokenizers import GPT2Tokenizer  # noqa: E402
from tinygrad_gpu.train import ConfigError, one_line_errors  # noqa: E402
from tinygrad_gpu.train.cli import Parser  # noqa: E402


def main(argv=None) -> GPT:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the folder to write")
    parser.add_argument("--data", default="builtin", help="the text the tokenizer learns from: 'builtin', "
                        "'shakespeare' or a file (default: %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=4096, help="tokens in the vocabulary, at least 257 "
                        "(default: %(default)s; GPT-2's is 50257)")
    parser.add_argument("--n-layer", type=int, default=4, help="(default: %(default)s; GPT-2: 12)")
    parser.add_argument("--n-head", type=int, default=4, help="(default: %(default)s; GPT-2: 12)")
    parser.add_argument("--n-embd", type=int, default=128, help="(default: %(default)s; GPT-2: 768)")
    parser.add_argument("--context", type=int, default=512, help="positions (default: %(default)s; GPT-2: 1024)")
    parser.add_argument("--seed", type=int, default=1337, help="(default: %(default)s)")
    args = parser.parse_args(argv)
    with one_line_errors():
        if args.vocab_size < 257:
            raise ConfigError(f"--vocab-size must be at least 257 (256 bytes and <|endoftext|>), got {args.vocab_size}")
        if min(args.n_layer, args.n_head, args.n_embd, args.context) < 1 or args.n_embd % args.n_head:
            raise ConfigError("--n-layer, --n-head, --n-embd and --context must be positive, and --n-head must "
                              "divide --n-embd")
        if os.path.exists(args.out) and os.listdir(args.out):
            raise ConfigError(f"{args.out} exists and is not empty; choose another --out")
        try:
            tokenizer = GPT2Tokenizer.train(load_corpus(args.data).splitlines(), args.vocab_size)
        except ImportError as e:        # no tokenizers library: the message says what to install
            raise ConfigError(str(e)) from None
    tg.manual_seed(args.seed)
    model = GPT(GPTConfig(block_size=args.context, vocab_size=tokenizer.vocab_size, n_layer=args.n_layer,
                          n_head=args.n_head, n_embd=args.n_embd, bias=True))
    model.save_pretrained(args.out, tokenizer=tokenizer)
    print(f"wrote a GPT-2 folder to {args.out}: {model.num_params() / 1e6:.2f}M parameters, vocabulary "
          f"{tokenizer.vocab_size}, context {args.context}; random weights")
    return model


if __name__ == "__main__":
    main()
