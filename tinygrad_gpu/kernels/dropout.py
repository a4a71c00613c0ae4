"""Dropout: Dropout.composition (ops/fused.py) · reference_* · dropout.cu (cuda, emu); the cpu: a NumPy mask.

Dropout with its mask drawn inside the kernel: the NumPy reference and the launcher.

``multiply(x, p, seed, offset, device)`` is x * keep, keep = 1 / (1 - p) where the Philox uniform at
counter offset + i is >= p, else 0; the forward multiplies x by it, the backward the output's
gradient, with the same (seed, offset), so the mask is drawn twice and never stored.  ``add(residual, x,
...)`` is residual + x * keep (a transformer's residual add, with its branch's dropout), whose backward is
``multiply(dy, ..., dtype=x's dtype)``.  ``keep`` is the mask itself, as the unfused dropout builds it
(the composition of ops.fused.Dropout).  (seed, offset) come from tinygrad_gpu.random.philox_counters.
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


def reference_multiply(x, p: float, seed: int, offset: int, scale=None, dtype=None):
    """x * keep in `dtype`, by default x's (x of any shape; element i in C order reads counter offset + i).
    scale: the kept elements' factor, by default scale_of(p, dtype), what the launcher gives the kernel."""
    xp, dtype = runtime.array_module_of(x), x.dtype if dtype is None else np.dtype(dtype)
    x = x.astype(dtype, copy=False)             # a float32 gradient becomes the 16-bit branch's first, as unfused
    keep = reference_keep(x.size, p, seed, offset, dtype, scale, xp).reshape(x.shape)
    return (x.astype(runtime.working_dtype(dtype)) * keep).astype(dtype)


def reference_add(residual, x, p: float, seed: int, offset: int, scale=None):
    """residual + x * keep: the dropout rounded to x's dtype, then added in float32 (residual float32)."""
    return residual + reference_multiply(x, p, seed, offset, scale).astype(residual.dtype)


# ----------------------------------------------------------------------------- launcher
def multiply(x, p: float, seed: int, offset: int, device: str, x_is_spare: bool = False, dtype=None):
    """x * keep on `device` ('emu' or a GPU) for x of a kernel dtype (float32, float16, bfloat16); the
    reference for other dtypes. x_is_spare: nobody else holds x, and the kernel writes the result into it
    (the backward's incoming gradient, when the engine says it is spare). dtype: the result's, by default
    x's; a float32 x may give float16 or bfloat16 (keep is then scale_of(p, dtype), the branch's factor:
    the backward of add)."""
    dtype = x.dtype if dtype is None else np.dtype(dtype)
    if dtype == x.dtype:
        kernel = "dropout_multiply"
    elif x.dtype == np.float32 and dtype in runtime.KERNEL_DTYPES:
        kernel = "dropout_multiply_to"
    else:
        raise ValueError(f"dropout.multiply: a {x.dtype} x gives {x.dtype}, or float32 a 16-bit float, not {dtype}")
    if not runtime.use_kernel(device, x, half=True):
        return reference_multiply(x, p, seed, offset, scale_of(p, dtype), dtype)
    xp = devices.array_module(device)
    x = runtime.contiguous(xp, x)
    out = x if x_is_spare and dtype == x.dtype else xp.empty(x.shape, dtype)   # a copy made by contiguous() is spare too
    _launch(device, runtime.entry_point(kernel, dtype), x, None, out, p, scale_of(p, dtype), seed, offset)
    return out


def add(residual, x, p: float, seed: int, offset: int, device: str):
    """residual + x * keep on `device`, in one launch: residual float32, x float32, float16 or bfloat16 of
    residual's shape; the result float32. Anything else takes the reference."""
    if not (runtime.use_kernel(device, x, half=True) and residual.dtype == np.float32 and residual.shape == x.shape):
        return reference_add(residual, x, p, seed, offset)
    xp = devices.array_module(device)
    x, residual = runtime.contiguous(xp, x), runtime.contiguous(xp, residual)
    out = xp.empty(x.shape, residual.dtype)
    _launch(device, runtime.entry_point("dropout_add", x.dtype), x, residual, out, p, scale_of(p, x.dtype), seed, offset)
    return out


def _launch(device, kernel, x, residual, out, p, scale, seed, offset):
    """One launch of `kernel` (dropout_multiply*: no residual argument; dropout_add*: one) over out.size elements."""
    n = out.size
    if n:
        args = [x, *([] if residual is None else [residual]), out, np.int64(n), np.float32(p), np.float32(scale),
                np.uint64(seed % 2 ** 64), np.uint64(offset % 2 ** 64)]
        runtime.launch(device, FILE, kernel, (runtime.grid_stride_grid(n),), (256,), args)


def keep(shape, dtype, p: float, seed: int, offset: int, device: str):
    """The mask as an array of `shape` and `dtype` on `device`: what the kernel multiplies by, drawn as the
    unfused dropout draws it (a philox_uniform draw compared with p, then scaled), so that x * keep(...)
    is the kernel's result. For the composition (a graph of the backward, create_graph=True)."""
    with devices.use(device):
        kept = philox.uniform(device, int(np.prod(shape, dtype=np.int64)), seed, offset).reshape(shape) >= p
        return kept.astype(dtype) * scale_of(p, dtype)
