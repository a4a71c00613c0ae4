"""examples/train_charlm.py's training loop on one page, laid out like nanoGPT's train.py; it prints the same losses.
What train_charlm.py adds (checkpoints, --resume, metrics, mpiexec, GradScaler, samples) is in tinygrad_gpu/train/.

    python examples/train_minimal.py --max-iters 200 --device cpu    # any setting below, as --name value
"""
import ast
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # run from a checkout

import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu.data import load_corpus  # noqa: E402

# Settings: train_charlm.py's defaults, named as its flags are (tinygrad_gpu/train/config.py).
data, seed = "builtin", 1337    # builtin: Python's own help texts, nothing to download
n_layer, n_head, n_embd, block_size, dropout, bias = 4, 4, 128, 64, 0.0, False
batch_size, lr, weight_decay, beta1, beta2, grad_clip = 12, 1e-3, 0.1, 0.9, 0.99, 1.0
max_iters, warmup_iters, lr_decay_iters, min_lr = 1000, 100, None, 1e-4     # None: decay until max_iters
eval_interval, eval_iters = 250, 20
device = tg.default_device()    # cuda:0 when a GPU is visible, else cpu
SETTINGS = [k for k, v in globals().items() if not k.startswith("_") and isinstance(v, (int, float, str, type(None)))]
args = iter(sys.argv[1:])
for arg in args:                # --name=value or --name value: text for data and device, else a Python literal
    name, has_value, value = arg.removeprefix("--").partition("=")
    name, value = name.replace("-", "_"), value if has_value else next(args, "")
    if name not in SETTINGS:
        sys.exit(f"train_minimal.py: unknown setting {arg}; the settings are {', '.join(SETTINGS)}")
    globals()[name] = value if isinstance(globals()[name], str) else ast.literal_eval(value)
lr_decay_iters = lr_decay_iters or max_iters
ctx = tg.autocast("cuda", dtype=tg.bfloat16, enabled=device.startswith("cuda"))  # GPU: train_charlm's dtype on sm_80+

text = load_corpus(data)
stoi = {c: i for i, c in enumerate(sorted(set(text)))}      # each character is a token; ids in sorted order
ids = np.array([stoi[c] for c in text], dtype=np.int64)
splits = {"train": ids[:int(len(ids) * 0.9)], "val": ids[int(len(ids) * 0.9):]}   # 90% trains, 10% measures


def get_batch(split, rng):
    """batch_size random windows of block_size ids (x), and each shifted by one: the ids to predict (y)."""
    part = splits[split]
    starts = rng.integers(0, len(part) - block_size, size=batch_size)
    x, y = (np.stack([part[i + shift:i + shift + block_size] for i in starts]) for shift in (0, 1))
    return tg.tensor(x, device=device), tg.tensor(y, device=device)


# The seed starts tg's random stream (the initial weights, then dropout); the batches have their own.
tg.manual_seed(seed)
model = tg.nn.GPT(tg.nn.GPTConfig(block_size=block_size, vocab_size=len(stoi), n_layer=n_layer, n_head=n_head,
                                  n_embd=n_embd, dropout=dropout, bias=bias)).to(device)
optimizer = model.configure_optimizers(weight_decay, lr, (beta1, beta2))   # AdamW, decay on matrices only
data_rng = np.random.default_rng(seed)


def get_lr(it):
    """Linear warmup to lr (Adam's first moment estimates are noisy), then a cosine down to min_lr."""
    if it < warmup_iters:
        return lr * (it + 1) / (warmup_iters + 1)
    if it >= lr_decay_iters:
        return min_lr
    progress = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (lr - min_lr)


@tg.no_grad()
def estimate_loss():
    """Each split's mean loss, dropout off, over the same batches each time: the curve shows the model change."""
    losses = {}
    model.eval()
    for number, split in enumerate(["train", "val"]):
        rng, total = np.random.default_rng([seed, number]), 0.0
        for _ in range(eval_iters):
            with ctx:
                total += model(*get_batch(split, rng))[1].item()
        losses[split] = total / eval_iters
    model.train()
    return losses


iter_num = 0
while True:
    for group in optimizer.param_groups:
        group["lr"] = get_lr(iter_num)
    if iter_num % eval_interval == 0 or iter_num == max_iters:
        losses = estimate_loss()
        print(f"iter {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
    if iter_num >= max_iters:
        break
    x, y = get_batch("train", data_rng)
    with ctx:
        logits, loss = model(x, y)
    loss.backward()
    if grad_clip:           # in the optimizer's order, so that the norm adds up as train_charlm's does
        tg.nn.utils.clip_grad_norm_([p for group in optimizer.param_groups for p in group["params"]], grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    iter_num += 1
