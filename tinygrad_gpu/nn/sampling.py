"""Text generation: extend a sequence one sampled token at a time, for any model whose
forward(idx) returns (logits, loss) with logits of shape (batch, time, vocab).

``generate`` runs the loop; ``choose_next`` turns one position's logits into token ids
(greedy, temperature, top-k, top-p). Everything stays on the model's device: the chosen ids
too, so a GPU never waits for the host between tokens.
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from .. import random
from ..tensor import Tensor, no_grad


def check_sampling_arguments(temperature: float, top_k: int = None, top_p: float = None) -> None:
    if temperature < 0:
        raise ValueError(f"generate: temperature must be >= 0, got {temperature}")
    if top_k is not None and (not isinstance(top_k, (int, np.integer)) or top_k < 1):
        raise ValueError(f"generate: top_k must be a positive integer or None, got {top_k!r}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"generate: top_p must be in (0, 1] or None, got {top_p}")


def choose_next(logits, temperature: float = 1.0, top_k: int = None, top_p: float = None, device: str = "cpu"):
    """The next token of each row of `logits` (a (batch, vocab) array on `device`), as an array of ids.

    temperature divides the logits (lower: safer choices; 0: always the likeliest). top_k keeps
    the k likeliest tokens; top_p then keeps the nucleus: the likeliest tokens whose probabilities
    (after top_k) add up to at least top_p, the fewest that do. Tokens tied with the nucleus's least
    likely one are all kept, so a tie never makes the choice depend on the sort's order.
    """
    xp = devices.array_module(device)
    # In float32 (float16 at least widened), never float64: a GPU's float64 is slow, and the
    # cumulative sum's rounding moves each token's share by far less than a sample can show.
    logits = logits.astype(np.promote_types(logits.dtype, np.float32), copy=False)
    if temperature == 0:
        return logits.argmax(axis=-1)
    logits = logits / temperature
    vocab = logits.shape[-1]
    if top_k is not None and top_k < vocab:
        kth_largest = xp.partition(logits, -top_k, axis=-1)[:, -top_k, None]
        logits = xp.where(logits < kth_largest, -xp.inf, logits)
    weights = xp.exp(logits - logits.max(axis=-1, keepdims=True))
    if top_p is not None and top_p < 1.0:          # top_p = 1 keeps every token: skip the sort
        probs = weights / weights.sum(axis=-1, keepdims=True)
        descending = -xp.sort(-probs, axis=-1)
        # The nucleus is the tokens before the cumulative sum reaches top_p, and the one that reaches it.
        before = (xp.cumsum(descending, axis=-1) < top_p).sum(axis=-1, keepdims=True)
        least_kept = xp.take_along_axis(descending, xp.minimum(before, vocab - 1), axis=-1)
        weights = xp.where(probs >= least_kept, weights, 0)
    cdf = xp.cumsum(weights, axis=-1)
    u = random.generator(device).random((logits.shape[0], 1), dtype=logits.dtype) * cdf[:, -1:]
    # inverse-CDF sampling: the first token whose cumulative weight passes u (u in [0, total),
    # so a token of weight 0 is never picked, not even at u = 0)
    return xp.minimum((cdf <= u).sum(axis=-1), vocab - 1)


@no_grad()
def generate(model, idx: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int = None,
             block_size: int = None, top_p: float = None, next_logits=None, eos_token_id: int = None) -> Tensor:
    """Extend each row of `idx` by `max_new_tokens` tokens drawn by ``choose_next``.

    next_logits(idx) gives the last position's logits (batch, vocab) for the sequence so far. By
    default it runs the model on the whole context, cropped to the last `block_size` tokens; a
    model with a key-value cache passes one that feeds it only the tokens it has not seen.
    eos_token_id: a row that has produced it is finished: its later tokens are eos_token_id again, and
    the loop ends as soon as every row is finished (the result is then shorter).
    """
    check_sampling_arguments(temperature, top_k, top_p)
    next_logits = next_logits or _whole_context(model, block_size)
    was_training = model.training
    model.eval()
    xp = devices.array_module(idx.device)
    finished = None                            # (batch,) bool on the device, with an eos_token_id
    try:
        with devices.use(idx.device):          # the sampling arithmetic runs on the model's GPU
            for _ in range(max_new_tokens):
                next_ids = choose_next(next_logits(idx).data, temperature, top_k, top_p, idx.device)
                if eos_token_id is not None:
                    just = next_ids == eos_token_id
                    finished = just if finished is None else finished | just
                    next_ids = xp.where(finished, eos_token_id, next_ids)    # a finished row writes eos again
                idx = Tensor._wrap(xp.concatenate([idx.data, next_ids[:, None].astype(idx.dtype)], axis=1), idx.device)
                # Stopping early means the host reads whether every row is done: a wait for the GPU each step,
                # so only when an eos_token_id asks for it (without one the GPU never waits between tokens).
                if finished is not None and bool(finished.all()):
                    break
    finally:
        model.train(was_training)
    return idx


def _whole_context(model, block_size):
    """next_logits without a cache: the model reads the whole context, cropped to block_size, each time."""
    def next_logits(idx):
        context = idx if block_size is None or idx.shape[1] <= block_size else idx[:, -block_size:]
        return model(context)[0][:, -1, :]
    return next_logits
