"""Counter-based random numbers, Philox4x32-10: philox.cu, its NumPy reference, its launchers.

A stream is two integers, (seed, offset). Element i of a draw is a function of (seed, offset + i)
alone, so a draw of n values moves the offset on by n, and a checkpoint of (seed, offset)
resumes the stream exactly (PyTorch's CUDA generator keeps the same pair).
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import runtime

FILE = "philox.cu"
M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK32, TWO_POW_MINUS_24 = 0xFFFFFFFF, np.float32(2.0 ** -24)


# ----------------------------------------------------------------------------- reference
# philox.cu's formulas, as its header states them. Words are held in uint64 arrays, so that the
# 32x32-bit products are exact; seed and offset are taken mod 2^64, as the kernel's arguments.

def _rounds(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on arrays of counter words (uint64 arrays of 32-bit values) under key (k0, k1)."""
    for r in range(10):
        if r > 0:                                            # the key is bumped before rounds 2..10
            k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
        p0, p1 = np.uint64(M0) * c0, np.uint64(M1) * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ np.uint64(k0), p1 & MASK32, (p0 >> 32) ^ c3 ^ np.uint64(k1), p0 & MASK32
    return c0, c1, c2, c3


def philox4x32_10(counter_words, key_words):
    """One Philox4x32-10 block: 4 counter words and 2 key words in, 4 words out (Python ints)."""
    c = [np.array([w], np.uint64) for w in counter_words]
    return tuple(int(w[0]) for w in _rounds(*c, *key_words))


def reference_bits(n: int, seed: int, offset: int, xp=np):
    """(n, 4) uint32: the 4 output words for each element of a draw of n at (seed, offset)."""
    seed, offset = seed % 2 ** 64, offset % 2 ** 64
    c = xp.arange(n, dtype=np.uint64) + np.uint64(offset)   # wraps mod 2^64, as in the kernel
    zero = xp.zeros(n, np.uint64)
    words = _rounds(c & MASK32, c >> 32, zero, zero, seed & MASK32, seed >> 32)
    return xp.stack(words, axis=1).astype(np.uint32)


def reference_uniform(n: int, seed: int, offset: int, xp=np):
    x0 = reference_bits(n, seed, offset, xp)[:, 0]
    return (x0 >> 8).astype(np.float32) * TWO_POW_MINUS_24


def reference_normal(n: int, seed: int, offset: int, xp=np):
    """Box-Muller in float32, step by step as the kernel computes it."""
    x = reference_bits(n, seed, offset, xp)
    u1 = ((x[:, 0] >> 8) + 1).astype(np.float32) * TWO_POW_MINUS_24     # in (0, 1]: log(u1) is finite
    u2 = (x[:, 1] >> 8).astype(np.float32) * TWO_POW_MINUS_24
    return xp.sqrt(np.float32(-2) * xp.log(u1)) * xp.cos(np.float32(2 * np.pi) * u2)


# ----------------------------------------------------------------------------- launchers
def _draw(kernel: str, device: str, n: int, seed: int, offset: int):
    xp = devices.array_module(device)
    with devices.use(device):
        out = xp.empty(n, np.float32)
        if n:
            args = [out, np.int64(n), np.uint64(seed % 2 ** 64), np.uint64(offset % 2 ** 64)]
            runtime.launch(device, FILE, kernel, (runtime.grid_stride_grid(n),), (256,), args)
    return out


def uniform(device: str, n: int, seed: int, offset: int):
    """n float32 values in [0, 1) on `device`; the next draw of the stream starts at offset + n."""
    if device == "cpu":
        return reference_uniform(n, seed, offset)
    return _draw("philox_uniform", device, n, seed, offset)


def normal(device: str, n: int, seed: int, offset: int):
    """n standard normal float32 values on `device`; the next draw starts at offset + n."""
    if device == "cpu":
        return reference_normal(n, seed, offset)
    return _draw("philox_normal", device, n, seed, offset)
