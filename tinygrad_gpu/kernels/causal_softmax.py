"""The softmax of causal attention (scale, mask j > i, normalise): causal_softmax.cu, its NumPy
reference, its launcher.  scores: (..., L, S); probs has the same shape.
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import runtime

FILE = "causal_softmax.cu"


def future_mask(xp, L: int, S: int):
    """True where query i must not see key j (j > i)."""
    return xp.triu(xp.ones((L, S), dtype=bool), k=1)


# ----------------------------------------------------------------------------- reference
_causal_bias = {}


def _bias(xp, L: int, S: int, dtype):
    """(L, S): 0 where query i may see key j, -inf where j > i; made once per shape and dtype."""
    key = (xp.__name__, L, S, str(dtype))
    if key not in _causal_bias:
        _causal_bias[key] = xp.where(future_mask(xp, L, S), -xp.inf, 0).astype(dtype)
    return _causal_bias[key]


def reference_forward(scores, scale: float, overwrite: bool = False):
    """softmax over the last dim of scale * scores + causal mask, in one buffer: a copy of scores, or
    scores itself with overwrite=True (fresh arrays of this size are what a CPU step spends its
    time on)."""
    xp = runtime.array_module_of(scores)
    z = scores if overwrite else scores.copy()
    z *= scale
    # Softmax is unchanged by subtracting any number from a row; the row's max keeps exp from
    # overflowing. In float32 and wider, when every score is within +-60, exp can neither overflow
    # (e^60 ~ 1e26, room for the sum of many keys) nor turn a whole row into zeros (e^-60 ~ 1e-26),
    # and the two passes that find and subtract each row's max, the costliest here, are skipped:
    # two reductions of the whole array cost less. A nan fails the test, and takes the rows' way.
    moderate = z.dtype.itemsize >= 4 and (z.size == 0 or bool(z.min() > -60) and bool(z.max() < 60))
    z += _bias(xp, *scores.shape[-2:], z.dtype)
    if not moderate:
        # initial=-inf: NumPy then takes a faster path for rows this short (2.5x for 64 keys); CuPy has no such argument
        z -= z.max(axis=-1, keepdims=True, **({"initial": -np.inf} if xp is np else {}))
    xp.exp(z, out=z)
    z *= 1 / runtime.row_sums(z)[..., None]          # one division per row, then products
    return z


def reference_backward(probs, dprobs, scale: float, overwrite: bool = False):
    """scale p (dp - sum_j p_j dp_j), in dprobs' memory with overwrite=True. Masked entries have p = 0,
    so their gradient is 0."""
    xp = runtime.array_module_of(probs)
    dot = xp.einsum("...j,...j->...", probs, dprobs)[..., None]
    out = dprobs if overwrite else dprobs.copy()
    out -= dot
    out *= probs
    out *= scale
    return out


# ----------------------------------------------------------------------------- launcher
def _rows(kernel: str, device: str, out_like, inputs, scale: float):
    xp = devices.array_module(device)
    inputs = [runtime.contiguous(xp, a, np.float32) for a in inputs]
    L, S = out_like.shape[-2:]
    out = xp.empty(out_like.shape, np.float32)
    rows = out.size // S if S else 0
    if rows:
        runtime.launch(device, FILE, kernel, (rows,), (runtime.row_block(S),),
                       [*inputs, out, np.int32(L), np.int32(S), np.float32(scale)])
    return out


def forward(scores, scale: float, device: str, overwrite: bool = False):
    """overwrite=True: scores is the caller's scratch, which the NumPy reference may compute in."""
    if not runtime.use_kernel(device, scores):
        return reference_forward(scores, scale, overwrite)
    return _rows("causal_softmax_forward", device, scores, [scores], scale)


def backward(probs, dprobs, scale: float, device: str, overwrite: bool = False):
    """overwrite=True: dprobs is the caller's scratch, which the NumPy reference may compute in."""
    if not runtime.use_kernel(device, probs, dprobs):
        return reference_backward(probs, dprobs, scale, overwrite)
    return _rows("causal_softmax_backward", device, probs, [probs, dprobs], scale)
