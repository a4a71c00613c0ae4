"""Text generation: extend a sequence one sampled token at a time, for any model whose
forward(idx) returns (logits, loss) with logits of shape (batch, time, vocab)."""
from __future__ import annotations

import numpy as np

from .. import device as devices
from .. import random
from ..tensor import Tensor, no_grad


@no_grad()
def generate(model, idx: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int = None,
             block_size: int = None) -> Tensor:
    """Sample from the model's next-token distribution, divided by `temperature` (lower: safer
    choices; 0: always the likeliest), restricted to the `top_k` likeliest tokens when given.
    The context is cropped to the last `block_size` tokens."""
    if temperature < 0:
        raise ValueError(f"generate: temperature must be >= 0, got {temperature}")
    was_training = model.training
    model.eval()
    xp = devices.array_module(idx.device)
    try:
        with devices.use(idx.device):          # the sampling arithmetic runs on the model's GPU
            for _ in range(max_new_tokens):
                context = idx if block_size is None or idx.shape[1] <= block_size else idx[:, -block_size:]
                logits, _ = model(context)
                # In float32 (float16 at least widened), never float64: a GPU's float64 is slow, and the
                # cumulative sum's rounding moves each token's share by far less than a sample can show.
                logits = logits.data[:, -1, :].astype(np.promote_types(logits.dtype, np.float32), copy=False)
                if temperature == 0:
                    next_ids = logits.argmax(axis=-1)
                else:
                    logits = logits / temperature
                    if top_k is not None and top_k < logits.shape[-1]:
                        kth_largest = xp.partition(logits, -top_k, axis=-1)[:, -top_k, None]
                        logits = xp.where(logits < kth_largest, -xp.inf, logits)
                    probs = xp.exp(logits - logits.max(axis=-1, keepdims=True))
                    cdf = xp.cumsum(probs, axis=-1)
                    u = random.generator(idx.device).random((logits.shape[0], 1), dtype=logits.dtype) * cdf[:, -1:]
                    # inverse-CDF sampling: the first token whose cumulative weight passes u (u in [0, total),
                    # so a token of weight 0 is never picked, not even at u = 0)
                    next_ids = xp.minimum((cdf <= u).sum(axis=-1), logits.shape[-1] - 1)
                idx = Tensor._wrap(xp.concatenate([idx.data, next_ids[:, None].astype(idx.dtype)], axis=1), idx.device)
    finally:
        model.train(was_training)
    return idx
