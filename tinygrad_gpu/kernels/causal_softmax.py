"""Causal softmax: CausalAttention.composition (ops/fused.py) · reference_* · causal_softmax.cu · *_cpu.py (cpu).

The softmax of causal attention (scale, mask j > i, normalise): the NumPy reference and the launcher.
scores: (..., L, S); probs has the same shape.
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import cpu_paths, runtime

FILE = "causal_softmax.cu"


def future_mask(xp, L: int, S: int):
    """True where query i must not see key j (j > i)."""
    return xp.triu(xp.ones((L, S), dtype=bool), k=1)


# ----------------------------------------------------------------------------- reference
def reference_forward(scores, scale: float):
    """causal_softmax.cu's forward: z = scale * scores, the future masked out, the row's max subtracted
    (so that exp cannot overflow), exp, and each row divided by its sum. The probabilities have the
    scores' dtype: float32 and float64 are computed as they are, float16 and bfloat16 in float32 and
    rounded once at the end."""
    xp, dtype = runtime.array_module_of(scores), scores.dtype
    z = scale * scores.astype(runtime.working_dtype(dtype))
    z = xp.where(future_mask(xp, *scores.shape[-2:]), -xp.inf, z)
    e = xp.exp(z - z.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(dtype)


def reference_backward(probs, dout, scale: float):
    """scale p (dp - sum_j p_j dp_j): 0 where masked, since p is 0 there. In the dtype of probs, computed
    as the forward is (16-bit data in float32, the sum too, rounded once at the end)."""
    dtype = probs.dtype
    probs, dout = (a.astype(runtime.working_dtype(dtype)) for a in (probs, dout))
    return (scale * probs * (dout - (probs * dout).sum(axis=-1, keepdims=True))).astype(dtype)


# ----------------------------------------------------------------------------- launcher
def wants_columns(device: str, scores_like) -> bool:
    """Does the softmax here run faster on scores stored by columns: the (..., L, S) scores as the transposed
    view of an (..., S, L) array, which attention makes as (k q^T)^T at the same cost? The compiled CPU kernels
    do (compiled_cpu.py says why; about twice as fast at L = 64). Every path takes either layout."""
    return cpu_paths.compiled_kernels(device, scores_like) is not None


def _rows(kernel: str, device: str, out_like, inputs, scale: float):
    """Launch `kernel` for inputs of one dtype (float32, float16 or bfloat16); the output has it too."""
    xp, dtype = devices.array_module(device), out_like.dtype
    inputs = [runtime.contiguous(xp, a) for a in inputs]
    L, S = out_like.shape[-2:]
    out = xp.empty(out_like.shape, dtype)
    rows = out.size // S if S else 0
    if rows:
        runtime.launch(device, FILE, runtime.entry_point(kernel, dtype), (rows,), (runtime.row_block(S),),
                       [*inputs, out, np.int32(L), np.int32(S), np.float32(scale)])
    return out


def forward(scores, scale: float, device: str, scores_is_spare: bool = False):
    """scores_is_spare: nobody else holds scores, and the CPU may compute the probabilities in it."""
    cpu = cpu_paths.cpu_kernels(device, scores)
    if cpu:
        return cpu.causal_softmax_forward(scores, scale, scores_is_spare)
    if not runtime.use_kernel(device, scores, half=True):
        return reference_forward(scores, scale)
    return _rows("causal_softmax_forward", device, scores, [scores], scale)


def backward(probs, dout, scale: float, device: str, dout_is_spare: bool = False):
    """dout_is_spare: nobody else holds dout, and the CPU may compute the result in it (as in forward)."""
    cpu = cpu_paths.cpu_kernels(device, probs, dout)
    if cpu:
        return cpu.causal_softmax_backward(probs, dout, scale, dout_is_spare)
    if not runtime.use_kernel(device, probs, dout, half=True):
        return reference_backward(probs, dout, scale)
    return _rows("causal_softmax_backward", device, probs, [probs, dout], scale)
