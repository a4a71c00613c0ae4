"""Generate text from a checkpoint written by train_charlm.py or finetune_charlm.py.

    python examples/sample.py --out-dir out-charlm --prompt "The " --num-samples 3 --temperature 0.8
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # run from a checkout

import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu.data import CharTokenizer, DataError  # noqa: E402
from tinygrad_gpu.train import CHECKPOINT_NAME, build_model, sample  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default="out-charlm", help="folder holding ckpt.safetensors")
    parser.add_argument("--prompt", default="\n")
    parser.add_argument("--num-samples", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=500)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--device", default=None)
    args = parser.parse_args(argv)
    path = os.path.join(args.out_dir, CHECKPOINT_NAME)
    try:
        device = tg.device.canonical(args.device)
        if not os.path.exists(path):
            raise DataError(f"no checkpoint at {path}; train one with examples/train_charlm.py --out-dir {args.out_dir}")
        saved = tg.load(path)
        tokenizer = CharTokenizer(saved["tokenizer"])
        model = build_model(saved["model_settings"], tokenizer.vocab_size)
        model.load_state_dict(saved["model"])
        model.to(device)
        tg.manual_seed(args.seed)
        texts = sample(model, tokenizer, args.num_samples, args.max_new_tokens, prompt=args.prompt,
                       temperature=args.temperature, top_k=args.top_k, device=device)
    except (DataError, RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    for i, text in enumerate(texts):
        print(f"--- sample {i + 1} ---\n{text}")


if __name__ == "__main__":
    main()
