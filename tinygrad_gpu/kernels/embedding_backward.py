"""Embedding backward (scatter-add of gradient rows by token id): embedding_backward.cu, its
NumPy reference, its launcher.  ids: (tokens,) integers; dout: (tokens, dim); returns
dweight: (n_embeddings, dim).
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import fast_cpu, runtime

FILE = "embedding_backward.cu"


def reference(ids, dout, n_embeddings: int):
    """Row i of dweight is the sum of the rows of dout whose id is i: add.at accumulates repeated ids,
    where a plain dweight[ids] += dout would keep only one of them."""
    xp = runtime.array_module_of(dout)
    dweight = xp.zeros((n_embeddings, dout.shape[1]), dout.dtype)
    xp.add.at(dweight, ids, dout)
    return dweight


def order_by_id(xp, ids, n_embeddings: int):
    """Token numbers sorted by (id, token number): each id's tokens side by side, in token order.
    Sorting the unique key id * tokens + t needs no stable sort.  Ids out of range are clipped to
    -1 or n_embeddings first, so the key cannot overflow (the kernel skips them either way)."""
    tokens = len(ids)
    key = xp.clip(ids, -1, n_embeddings) * tokens + xp.arange(tokens, dtype=np.int64)
    return xp.argsort(key).astype(np.int64)


def embedding_backward(ids, dout, n_embeddings: int, device: str):
    if device == "cpu":
        return fast_cpu.embedding_backward(ids, dout, n_embeddings)
    if not runtime.use_kernel(device, dout):
        return reference(ids, dout, n_embeddings)
    xp = devices.array_module(device)
    ids, dout = runtime.contiguous(xp, ids, np.int64), runtime.contiguous(xp, dout, np.float32)
    tokens, dim = dout.shape
    dweight = xp.zeros((n_embeddings, dim), np.float32)
    if tokens and dim:
        runtime.launch(device, FILE, "embedding_backward", (tokens,), (min(1024, max(32, -(-dim // 32) * 32)),),
                       [ids, order_by_id(xp, ids, n_embeddings), dout, dweight, np.int32(dim), np.int64(tokens),
                        np.int64(n_embeddings)])
    return dweight
