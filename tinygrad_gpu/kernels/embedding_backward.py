"""Embedding backward: weight[ids]'s backward (plain) · reference_* · embedding_backward.cu · *_cpu.py (cpu).

The scatter-add of gradient rows by token id: the NumPy reference and the launcher.
ids: (tokens,) integers; dout: (tokens, dim); returns dweight: (n_embeddings, dim).
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import cpu_paths, runtime

FILE = "embedding_backward.cu"


def reference_embedding_backward(ids, dout, n_embeddings: int):
    """Row i of dweight is the sum of the rows of dout whose id is i: add.at accumulates repeated ids,
    where a plain dweight[ids] += dout would keep only one of them."""
    xp = runtime.array_module_of(dout)
    dweight = xp.zeros((n_embeddings, dout.shape[1]), dout.dtype)
    xp.add.at(dweight, ids, dout)
    return dweight


def order_by_id(xp, ids):
    """Token numbers sorted by (id, token number): each id's tokens side by side, in token order. That is
    a stable sort of the ids, one launch (CuPy's argsort is always stable; NumPy's when asked). Ids out of
    range sort like any other; the kernel skips their runs."""
    return xp.argsort(ids, kind="stable")


def embedding_backward(ids, dout, n_embeddings: int, device: str):
    cpu = cpu_paths.cpu_kernels(device)        # dout of any dtype: the sums are NumPy's own
    if cpu:
        return cpu.embedding_backward(ids, dout, n_embeddings)
    if not runtime.use_kernel(device, dout):
        return reference_embedding_backward(ids, dout, n_embeddings)
    xp = devices.array_module(device)
    ids, dout = runtime.contiguous(xp, ids, np.int64), runtime.contiguous(xp, dout, np.float32)
    tokens, dim = dout.shape
    dweight = xp.zeros((n_embeddings, dim), np.float32)
    if tokens and dim:
        runtime.launch(device, FILE, "embedding_backward", (tokens,), (min(1024, max(32, -(-dim // 32) * 32)),),
                       [ids, order_by_id(xp, ids), dout, dweight, np.int32(dim), np.int64(tokens),
                        np.int64(n_embeddings)])
    return dweight
