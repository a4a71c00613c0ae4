"""Draw the graph that backward walks, for a small MLP and for one transformer block.

    python examples/draw_graph.py --out-dir graphs

Writes graphs/mlp.dot and graphs/block.dot, and renders each to .svg when Graphviz's `dot`
program is on PATH (otherwise it says how to). Each op is numbered in the order backward
runs it: the loss's op is #1, the ops nearest the parameters come last.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # run from a checkout

import tinygrad_gpu as tg  # noqa: E402
import tinygrad_gpu.nn.functional as F  # noqa: E402
from tinygrad_gpu import nn  # noqa: E402
from tinygrad_gpu.nn.gpt import Block, GPTConfig  # noqa: E402


def mlp_loss() -> tg.Tensor:
    """Cross-entropy of a Linear-ReLU-Linear classifier on a batch of 4 (8 features, 3 classes)."""
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    x, target = tg.randn(4, 8), tg.tensor([0, 2, 1, 2])
    return F.cross_entropy(model(x), target)


def block_loss() -> tg.Tensor:
    """Mean squared output of one GPT block on 1 sequence of 4 positions: small enough to read."""
    block = Block(GPTConfig(block_size=4, vocab_size=16, n_layer=1, n_head=2, n_embd=8))
    block.as_one_op = False          # each op its own node (on the cpu the block would be one: nn/gpt_block.py)
    x = tg.randn(1, 4, 8)
    return F.mse_loss(block(x), tg.zeros(1, 4, 8))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default="graphs", help="folder for the .dot (and .svg) files")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    tg.manual_seed(0)
    for name, loss in (("mlp", mlp_loss()), ("block", block_loss())):
        for suffix in (".dot", ".svg"):       # without Graphviz, the .svg step says how to make it
            written = tg.viz.save(loss, os.path.join(args.out_dir, name + suffix), number_backward=True)
        print(f"{name}: {written}")


if __name__ == "__main__":
    main()
