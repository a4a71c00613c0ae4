"""Dropout with its mask drawn inside the kernel: dropout.cu, its NumPy reference, its launcher.

``multiply(x, p, seed, offset, device)`` is x * keep, keep = 1 / (1 - p) where the Philox uniform at
counter offset + i is >= p, else 0; the forward multiplies x by it, the backward the output's
gradient, with the same (seed, offset), so the mask is drawn twice and never stored.  ``keep`` is the
mask itself, as the unfused dropout builds it (the composition of ops.fused.Dropout).  (seed, offset)
come from tinygrad_gpu.random.philox_counters.
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import philox, runtime

FILE = "dropout.cu"


def scale_of(p: float, dtype) -> float:
    """1 / (1 - p) as the kept elements get it: rounded to the data's dtype, the dtype the unfused mask
    (kept.astype(dtype) * (1 / (1 - p))) holds; 0 for p = 1 (nothing is kept). The kernels of dropout and
    of the attention get it as a float32, exact for their dtypes."""
    return float(np.dtype(dtype).type(1.0 / (1.0 - p) if p < 1 else 0.0))


# ----------------------------------------------------------------------------- reference
# dropout.cu's formulas. p is compared as a float32, as the unfused `uniforms >= p` compares it (NumPy 2
# and CuPy 14 cast a Python float to the float32 array's dtype); float16 and bfloat16 data is multiplied
# in float32 and rounded once, which is what the unfused 16-bit product x * keep gives, the product of
# two 16-bit values being exact in float32.

def reference_keep(n: int, p: float, seed: int, offset: int, dtype, scale=None, xp=np):
    """(n,) in the working dtype: scale (by default scale_of(p, dtype)) where the Philox uniform at
    offset + i is >= p, else 0."""
    scale = scale_of(p, dtype) if scale is None else float(scale)
    kept = philox.reference_uniform(n, seed, offset, xp) >= np.float32(p)
    return xp.where(kept, scale, 0.0).astype(runtime.working_dtype(dtype))


def reference(x, p: float, seed: int, offset: int, scale=None):
    """x * keep in x's dtype (x of any shape; element i in C order reads counter offset + i). scale: the
    kept elements' factor, by default scale_of(p, x.dtype), what the launcher gives the kernel."""
    xp = runtime.array_module_of(x)
    keep = reference_keep(x.size, p, seed, offset, x.dtype, scale, xp).reshape(x.shape)
    return (x.astype(runtime.working_dtype(x.dtype)) * keep).astype(x.dtype)


# ----------------------------------------------------------------------------- launcher
def multiply(x, p: float, seed: int, offset: int, device: str, x_is_spare: bool = False):
    """x * keep on `device` ('emu' or a GPU) for x of a kernel dtype (float32, float16, bfloat16); the
    reference for other dtypes. x_is_spare: nobody else holds x, and the kernel writes the result into it
    (the backward's incoming gradient, when the engine says it is spare)."""
    if not runtime.use_kernel(device, x, half=True):
        return reference(x, p, seed, offset)
    xp = devices.array_module(device)
    x = runtime.contiguous(xp, x)
    out = x if x_is_spare else xp.empty(x.shape, x.dtype)      # a copy made by contiguous() is spare too
    n = out.size
    if n:
        args = [x, out, np.int64(n), np.float32(p), np.float32(scale_of(p, x.dtype)), np.uint64(seed % 2 ** 64),
                np.uint64(offset % 2 ** 64)]
        runtime.launch(device, FILE, runtime.entry_point("dropout_multiply", x.dtype), (runtime.grid_stride_grid(n),),
                       (256,), args)
    return out


def keep(shape, dtype, p: float, seed: int, offset: int, device: str):
    """The mask as an array of `shape` and `dtype` on `device`: what the kernel multiplies by, drawn as the
    unfused dropout draws it (a philox_uniform draw compared with p, then scaled), so that x * keep(...)
    is the kernel's result. For the composition (a graph of the backward, create_graph=True)."""
    with devices.use(device):
        kept = philox.uniform(device, int(np.prod(shape, dtype=np.int64)), seed, offset).reshape(shape) >= p
        return kept.astype(dtype) * scale_of(p, dtype)
