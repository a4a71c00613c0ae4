"""Train a character-level language model and print what it writes.

    python examples/train_charlm.py                        # small GPT on a built-in corpus, in out-charlm/
    python examples/train_charlm.py --data shakespeare --out-dir out-shakespeare   # tiny-shakespeare (downloaded once)
    python examples/train_charlm.py --data my_text.txt --max-iters 3000 --out-dir out-mine
    python examples/train_charlm.py --model lstm --out-dir out-lstm                # an LSTM instead of a transformer
    python examples/train_charlm.py --resume               # continue the run in --out-dir

The defaults (4 layers, 4 heads, 128 dimensions, 64-character context, batch 12, 1000
iterations) take 55 to 61 s on a 2-core CPU with numba, 72 to 75 s without, and end at train
loss 1.79, val loss 1.70 (the README's measured run). Every --eval-interval iterations the
train and val losses are printed and added to OUT_DIR/metrics.jsonl, and a checkpoint is
saved; Ctrl-C saves one and stops. A folder holds one run: a new run in a folder that has one
asks for --resume, another --out-dir or --overwrite. Sample from it later with examples/sample.py.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # run from a checkout

from tinygrad_gpu.train import parse_args, run  # noqa: E402

if __name__ == "__main__":
    run(parse_args(description=__doc__.split("\n\n")[0]))
