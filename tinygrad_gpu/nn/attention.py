"""Attention written out as Tensor ops, with PyTorch's rules at the edges (scaled_dot_product_attention in
nn/functional.py checks its arguments and calls these, or the fused causal ops of ops/fused.py).

    scores  = q k^T * scale            (..., L, S): how well query i matches key j
    scores += mask                     a bool mask counts as 0 where True (may attend) and -inf where False
    weights = softmax(scores) along S  each query's weights over the keys sum to 1
    out     = weights v                (..., L, Ev)

The edges, as PyTorch 2.14 gives them on the CPU:

* A query that may attend to no key gets weights 0, so its output and gradients are 0 (softmax alone
  would give 0 / 0 = nan). Which rows count as "attending to nothing" depends on the kernel PyTorch picks:
  its plain ("math") path takes the rows whose scores are all -inf (a nan score is a score: nan + -inf
  stays nan, and the row's output is nan); its fused CPU kernel, which it takes without a mask (causal or
  not) for 3- and 4-d inputs with one head size E == Ev and no dropout (`skips_nan` below), takes the rows
  with no score above -inf, since it skips nan when it looks for a row's largest score. (It does so for
  rows shorter than its vector width, 8 floats or 4 doubles on AVX2; longer ones it reads in vectors, which
  carry nan. Real scores hold no nan anyway.)
* The causal mask (key j <= query i, the top-left triangle when L != S) is written over the scores as
  -inf by the fused kernel (a nan there disappears), and added as -inf by the plain path.
* An empty key dim (E = 0) gives scores 0: every key weighs the same (PyTorch's scale 1 / sqrt(0) = inf
  never multiplies anything, since it scales q and k, which are empty).
* No values (S = 0), or an empty result: zeros, without further checks (see no_values).
"""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from ..creation import full, zeros
from ..ops.elementwise import where
from ..tensor import Tensor


def skips_nan(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor, dropout_p: float) -> bool:
    """Does PyTorch's CPU take its fused kernel here, which skips nan scores when it looks for a row's
    largest one? Without a mask or dropout, for 3- and 4-d inputs with E == Ev (found by trying PyTorch 2.14:
    2-d and 5-d inputs, E != Ev, a mask or dropout take its plain path)."""
    return (attn_mask is None and not dropout_p and query.ndim in (3, 4) and key.ndim == value.ndim == query.ndim
            and query.shape[-1] == key.shape[-1] == value.shape[-1])


def additive_mask(mask: Tensor, dtype) -> Tensor:
    """A bool mask (True: may attend) as the numbers added to the scores: 0 where True, -inf where False."""
    if mask.dtype != np.bool_:
        return mask
    return where(mask, zeros((), dtype=dtype, device=mask.device), full((), -math.inf, dtype=dtype, device=mask.device))


def attention(q: Tensor, k: Tensor, v: Tensor, scale: float, mask: Tensor = None, causal: bool = False,
              keep: Tensor = None, skip_nan: bool = False) -> Tensor:
    """(softmax(scale q k^T + mask) * keep) v with the rules of the module docstring. mask: bool or float,
    broadcastable to (..., L, S), or None; causal: key j > query i masked out; keep: the dropout's mask,
    scaled by 1 / (1 - dropout_p), or None; skip_nan: which rows attend to nothing (skips_nan says)."""
    scores = q @ k.transpose(-2, -1) * scale
    if causal:
        L, S = q.shape[-2], k.shape[-2]
        xp = devices.array_module(q.device)
        with devices.use(q.device):
            visible = Tensor._wrap(xp.tril(xp.ones((L, S), dtype=bool)), q.device)     # key j <= query i
        # written over the scores by the fused kernel, added by the plain path (where nan + -inf stays nan)
        scores = scores.masked_fill(~visible, -math.inf) if skip_nan else scores + additive_mask(visible, scores.dtype)
    if mask is not None:
        scores = scores + additive_mask(mask, scores.dtype)
    with devices.use(scores.device):
        data = scores.data
        empty_rows = ~(data > -np.inf).any(axis=-1, keepdims=True) if skip_nan else \
            (data == -np.inf).all(axis=-1, keepdims=True)
        empty_rows = Tensor._wrap(empty_rows, scores.device)
    # Those rows' scores become 0 first, so that their softmax (then replaced by 0) sends no nan backward.
    weights = scores.masked_fill(empty_rows, 0.0).softmax(-1).masked_fill(empty_rows, 0.0)
    return (weights if keep is None else weights * keep) @ v


def no_values(query: Tensor, shape: tuple) -> Tensor:
    """The output where there is nothing to average: an empty result, or no values (S = 0). PyTorch answers
    zeros here before looking at the shapes any further, and nan everywhere if the query holds a nan or an
    infinity anywhere (its products still see the query)."""
    out = zeros(shape, dtype=query.dtype, device=query.device)
    if not query.numel() or not out.numel():
        return out
    return where(query.isfinite().all(), out, math.nan)
