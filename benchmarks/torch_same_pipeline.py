"""Train the same GPT in PyTorch through our own data pipeline: same initial weights, same batches,
same schedule, same fixed evaluation batches as tinygrad_gpu.train. If the two engines compute the
same thing, both runs print the same losses; what is left between either of them and another
project's published figure is then that project's random stream, not the engine.

    python benchmarks/torch_same_pipeline.py --data ../shared/data/tinyshakespeare.txt --max-iters 2000 --beta2 0.99
    python examples/train_charlm.py        --data ../shared/data/tinyshakespeare.txt --max-iters 2000 --beta2 0.99

Takes the training flags of examples/train_charlm.py (GPT only, dropout 0). Needs torch.
"""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from tinygrad_gpu import random  # noqa: E402
from tinygrad_gpu.data import TextDataset, load_corpus  # noqa: E402
from tinygrad_gpu.optim.lr_scheduler import warmup_cosine  # noqa: E402
from tinygrad_gpu.train import build_model, parse_args  # noqa: E402


def main():
    config = parse_args(description=__doc__.split("\n\n")[0])
    try:
        import torch
    except ImportError:
        print("torch is not importable: install it to run this comparison")
        return
    from torch_gpt import TorchGPT, train_step
    dataset = TextDataset(load_corpus(config.data), config.block_size)
    random.manual_seed(config.seed)                   # exactly as train.py builds its model
    ours = build_model(config.model_settings(), dataset.tokenizer.vocab_size)
    model = TorchGPT(ours.config)
    model.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in ours.state_dict().items()})
    optimizer = model.configure_optimizers(config.weight_decay, config.lr, (config.beta1, config.beta2))
    data_rng = np.random.default_rng(config.seed)      # train.py's batch stream

    def batch(split, rng):
        x, y = dataset.batch(split, config.batch_size, rng)
        return torch.from_numpy(x.numpy()), torch.from_numpy(y.numpy())

    @torch.no_grad()
    def evaluate():                                     # train.estimate_loss's fixed batches
        model.eval()
        losses = []
        for number, split in enumerate(("train", "val")):
            rng = np.random.default_rng([config.seed, number])
            losses.append(sum(model(*batch(split, rng))[1].item() for _ in range(config.eval_iters)) / config.eval_iters)
        model.train()
        return losses

    start = time.time()
    for it in range(config.max_iters + 1):
        lr = warmup_cosine(it, config.lr, config.warmup_iters, config.lr_decay_iters or config.max_iters, config.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if it % config.eval_interval == 0 or it == config.max_iters:
            train_loss, val_loss = evaluate()
            print(f"iter {it}: train loss {train_loss:.4f}, val loss {val_loss:.4f}, {time.time() - start:.0f} s",
                  flush=True)
        if it == config.max_iters:
            break
        train_step(model, optimizer, *batch("train", data_rng), config.grad_clip)


if __name__ == "__main__":
    main()
