"""Causal attention: CausalAttention.composition (ops/fused.py) · reference_* · causal_attention.cu (cuda, emu)
· compiled_attention.py (cpu).

Causal self-attention in one kernel per direction (two for the backward): the NumPy reference and the
launcher. On the cpu, compiled_attention.py is the kernels' twin (float32 without dropout, where numba and MKL
are in use); elsewhere the cpu runs CausalAttention's plain version: products around causal_softmax.

q, k, v: (..., L, E) with the same leading (batch) dimensions and L == S; every leading dimension but the
last is a batch, the last is the head (a 3-D input has one batch; a 2-D one, one of each). The kernels
never hold the (L, L) scores in memory: the forward saves the output and each row's log-sum-exp (lse),
and the backward recomputes the probabilities from q, k and lse. Dropout on the attention weights is
drawn inside the kernels from Philox counters (seed, offset), as dropout.cu draws it (kernels/dropout.py's
``keep`` and ``reference_keep`` give the same mask as an array, for the plain version and the references).

The backward writes dq, dk, dv through strides into arrays it is given, when it is given them: for q, k, v
that are the three slices of one tensor (``stacked`` finds it), one buffer laid out like that tensor
(``empty_laid_out_like``) takes all three, so that the gradient of GPT's projection needs no assembly
(ops/fused.py, PackedCausalAttention).
"""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from . import dropout as dropout_kernel
from . import cpu_paths, philox, runtime

FILE = "causal_attention.cu"
TILE = 32                 # the kernels' tile of positions (causal_attention.cu)
THREADS = 128             # 4 threads per position of a tile
HEAD_MAX = 128            # the largest head size the kernels hold in registers and shared memory


# Products each kernel computes per (query, key) pair at or below the diagonal, each 2 E FLOPs: the forward
# q.k and p v; the dq kernel q.k again, dout.v and ds k; the dkdv kernel q.k, dout.v, p^T dout and ds^T q.
PRODUCTS_PER_PAIR = {"causal_attention_forward": 2, "causal_attention_backward_dq": 3,
                     "causal_attention_backward_dkdv": 4}


def flops(kernel: str, rows: int, L: int, E: int) -> int:
    """What a launch of `kernel` (any dtype's entry point) computes for `rows` = batch x heads sequences of L
    positions and head size E: L (L + 1) / 2 causal pairs a sequence (benchmarks/gpu_readiness.py's cost)."""
    base = kernel.removesuffix("_f16").removesuffix("_bf16")
    return PRODUCTS_PER_PAIR[base] * 2 * E * rows * (L * (L + 1) // 2)


# ----------------------------------------------------------------------------- reference
def _scores(q, k, scale):
    """s = scale q k^T with the future (key j > query i) at -inf, in the working dtype."""
    xp, wd = runtime.array_module_of(q), runtime.working_dtype(q.dtype)
    s = scale * (q.astype(wd) @ k.astype(wd).swapaxes(-1, -2))
    L, S = s.shape[-2:]
    return xp.where(xp.triu(xp.ones((L, S), dtype=bool), k=1), -xp.inf, s).astype(wd)


def _weights_scale(xp, shape, wd, dropout, dtype):
    """keep_ij * scale (kernels/dropout.py: the same mask as dropout.cu draws) as an array of the working dtype (1 without dropout)."""
    if dropout is None or not dropout[0]:
        return wd.type(1)
    p, seed, offset = dropout
    keep = dropout_kernel.reference_keep(math.prod(shape), p, seed, offset, dtype, xp=xp)
    return keep.reshape(shape).astype(wd)


def reference_forward(q, k, v, scale: float, dropout=None):
    """(out, lse), as causal_attention.cu's header writes them (dropout = (p, seed, offset) or None):
        s = scale q k^T (future masked),  lse = log sum_j exp(s_j),  p = exp(s - lse),
        out = (p keep / (1 - dropout_p)) v
    lse is float32 (float64 for float64 data); out has q's dtype, 16-bit data computed in float32."""
    xp, dtype = runtime.array_module_of(q), q.dtype
    wd = np.dtype(runtime.working_dtype(dtype))
    s = _scores(q, k, scale)
    m = s.max(axis=-1, keepdims=True)                        # the row's maximum: exp cannot overflow
    lse = m + xp.log(xp.exp(s - m).sum(axis=-1, keepdims=True))
    probs = xp.exp(s - lse)
    w = probs * _weights_scale(xp, s.shape, wd, dropout, dtype)
    return (w @ v.astype(wd)).astype(dtype), lse[..., 0]


def reference_backward(q, k, v, out, lse, dout, scale: float, dropout=None):
    """(dq, dk, dv) from the forward's out and lse, as causal_attention.cu's header writes them:
        p = exp(s - lse),  w = p keep / (1 - dropout_p),  D = rowsum(dout * out),
        dp = (dout v^T) keep / (1 - dropout_p),  ds = p (dp - D),
        dq = scale ds k,  dk = scale ds^T q,  dv = w^T dout
    in q's dtype (16-bit data in float32, rounded once)."""
    xp, dtype = runtime.array_module_of(q), q.dtype
    wd = np.dtype(runtime.working_dtype(dtype))
    q, k, v, out, dout = (a.astype(wd) for a in (q, k, v, out, dout))
    probs = xp.exp(_scores(q, k, scale) - lse.astype(wd)[..., None])     # exp(-inf) = 0 in the future
    kept = _weights_scale(xp, probs.shape, wd, dropout, dtype)
    D = (dout * out).sum(axis=-1, keepdims=True)
    ds = probs * ((dout @ v.swapaxes(-1, -2)) * kept - D)
    dq, dk, dv = scale * (ds @ k), scale * (ds.swapaxes(-1, -2) @ q), (probs * kept).swapaxes(-1, -2) @ dout
    return tuple(g.astype(dtype) for g in (dq, dk, dv))


# ----------------------------------------------------------------------------- launcher
def supports(q, k, v, device: str, dropout: bool = False) -> bool:
    """Do the kernels take these inputs? On emu and cuda, for one dtype (float32, float16, bfloat16), the
    same leading dimensions, L == S, and one head size E <= HEAD_MAX for q, k and v. On the cpu, their
    compiled twin does (compiled_attention.takes: float32, numba and MKL in use), without dropout."""
    if device == "cpu":                     # asked of cpu_paths first: the twin's module imports numba
        return not dropout and cpu_paths.compiled_kernels(device, q) is not None and _cpu_twin().takes(q, k, v)
    return (runtime.use_kernel(device, q, k, v, half=True) and q.ndim >= 2
            and q.shape == k.shape == v.shape and 1 <= q.shape[-1] <= HEAD_MAX and q.size > 0)


def _cpu_twin():
    from . import compiled_attention        # imported at the first use: it imports numba
    return compiled_attention


def _batch_heads(shape) -> tuple:
    """(B, H): every leading dimension but the last is a batch, the last the head."""
    lead = shape[:-2]
    return (math.prod(lead[:-1]), lead[-1]) if lead else (1, 1)


def _owner(a):
    """The array that owns the memory a view `a` lives in."""
    root = a
    while hasattr(getattr(root, "base", None), "dtype"):
        root = root.base
    return root


def _strided(xp, a, B: int, H: int, written: bool = False):
    """a (..., L, E) as the kernel reads (or, `written`, writes) it: (a 1-D C-contiguous array whose element 0
    is a[0, 0, 0, 0], its (batch, head, time) strides in elements). A view of the memory a lives in, when its
    innermost dimension is contiguous (q, k, v cut from one projection: no copy); else a contiguous copy, or,
    for an array to be written, None (a copy would take the kernel's results away from it)."""
    a4 = a.reshape(B, H, *a.shape[-2:])                       # a view where the strides allow it
    item = a4.itemsize
    strides = [0 if n == 1 else s for n, s in zip(a4.shape, a4.strides)]   # a size-1 dim's stride is never used
    root = _owner(a4)
    # the reshape had to copy (owners compared by address: a wrapper may be new each time)
    if written and runtime.address(root) != runtime.address(_owner(a)):
        return None
    if a4.flags.c_contiguous:
        return a4.reshape(-1), tuple(s // item for s in strides[:3])
    fits = (root.dtype == a4.dtype and root.flags.c_contiguous and (strides[3] == item or a4.shape[3] == 1)
            and all(s >= 0 and s % item == 0 for s in strides))
    if not fits:
        if written:
            return None
        a4 = xp.ascontiguousarray(a4)
        return a4.reshape(-1), tuple(s // item for s in a4.strides[:3])
    start = (runtime.address(a4) - runtime.address(root)) // item
    return root.reshape(-1)[start:], tuple(s // item for s in strides[:3])


def stacked(q, k, v):
    """The array `s` of shape (3, *q.shape) with s[0], s[1], s[2] exactly q, k, v (the same memory, the same
    strides), as a view of the memory they live in; or None where there is none such without gaps (q, k, v
    not evenly spaced in one buffer of their dtype, or with strides that leave holes). For q, k, v that are
    slices [0], [1], [2] of one tensor laid out as whole memory (GPT's projection, reshaped and permuted),
    this is that tensor's array again."""
    if not (q.shape == k.shape == v.shape and q.strides == k.strides == v.strides and q.dtype == k.dtype == v.dtype):
        return None
    item, gap = q.itemsize, runtime.address(k) - runtime.address(q)
    if gap <= 0 or gap % item or runtime.address(v) - runtime.address(k) != gap:
        return None
    shape, strides = (3, *q.shape), (gap, *q.strides)
    order = sorted((axis for axis in range(len(shape)) if shape[axis] > 1), key=lambda axis: -strides[axis])
    expected = item                                        # whole memory: each stride the size of the axes inside it
    for axis in reversed(order):
        if strides[axis] != expected:
            return None
        expected *= shape[axis]
    root = _owner(q)
    offset, n = runtime.address(q) - runtime.address(root), math.prod(shape)
    start = offset // item
    if root.dtype != q.dtype or not root.flags.c_contiguous or offset % item or start < 0 or start + n > root.size:
        return None
    order += [axis for axis in range(len(shape)) if shape[axis] == 1]          # anywhere: their strides are unused
    flat = root.reshape(-1)[start:start + n]
    return flat.reshape(tuple(shape[axis] for axis in order)).transpose(tuple(np.argsort(order).tolist()))


def _drops(dropout) -> bool:
    """Is there a dropout to draw ((p, seed, offset) with p > 0)?"""
    return dropout is not None and bool(dropout[0])


def _dropout_args(dropout, dtype) -> list:
    p, seed, offset = dropout if dropout is not None and dropout[0] else (0.0, 0, 0)
    return [np.float32(p), np.float32(dropout_kernel.scale_of(p, dtype) if p else 1.0), np.uint64(seed % 2**64),
            np.uint64(offset % 2**64)]


def forward(q, k, v, scale: float, device: str, dropout=None):
    """(out, lse): out of q's shape, laid out in memory as (B, L, H, E) (heads merge back into (B, L, H*E) as
    a view), lse float32 (B*H, L). dropout: (p, seed, offset) or None."""
    if not supports(q, k, v, device, _drops(dropout)):
        out, lse = reference_forward(q, k, v, scale, dropout)
        return out, lse.reshape(-1, q.shape[-2])
    if device == "cpu":
        return _cpu_twin().forward(q, k, v, scale, *_batch_heads(q.shape))
    xp, dtype = devices.array_module(device), q.dtype
    B, H = _batch_heads(q.shape)
    L, E = q.shape[-2:]
    out = xp.empty((B, L, H, E), dtype)
    lse = xp.empty((B * H, L), np.float32)
    out_view = out.transpose(0, 2, 1, 3)
    arrays, strides = zip(*(_strided(xp, a, B, H) for a in (q, k, v, out_view)))
    runtime.launch(device, FILE, runtime.entry_point("causal_attention_forward", dtype), (B * H, -(-L // TILE)),
                   (THREADS,), [*arrays, lse, np.int32(H), np.int32(L), np.int32(E),
                                *(np.int64(s) for ss in strides for s in ss), np.float32(scale),
                                *_dropout_args(dropout, dtype)])
    return out_view.reshape(q.shape), lse


def empty_laid_out_like(xp, a):
    """An uninitialised array of a's shape and dtype whose axes lie in memory in the order of a's strides
    (largest first), without gaps: a's own layout when a is a permuted view of whole memory, as q, k, v
    stacked in the projection GPT cuts them from are."""
    order = sorted(range(a.ndim), key=lambda axis: -a.strides[axis])           # stable: ties keep their order
    buffer = xp.empty(tuple(a.shape[axis] for axis in order), a.dtype)
    return buffer.transpose(tuple(np.argsort(order).tolist()))


def backward(q, k, v, out, lse, dout, scale: float, device: str, dropout=None, need=(True, True, True), grads=None):
    """(dq, dk, dv), each of q's shape, or None where `need` says it is not wanted. Contiguous arrays of their
    own; or, given `grads` (three arrays of q's shape and dtype, views into any memory with a contiguous last
    dimension, such as the three slices of one buffer laid out like the projection q, k, v came from), the
    kernels write the wanted ones there, each through its own strides, and those are returned."""
    if grads is None:
        grads = tuple(None for _ in range(3))
    if not supports(q, k, v, device, _drops(dropout)) or (
            device != "cpu" and not runtime.use_kernel(device, q, out, dout, half=True)):
        results = reference_backward(q, k, v, out, lse.reshape(q.shape[:-1]), dout, scale, dropout)
        return tuple(_into(target, g) if wanted else None for g, target, wanted in zip(results, grads, need))
    if device == "cpu":
        return _cpu_twin().backward(q, k, v, lse, dout, scale, *_batch_heads(q.shape), need, grads)
    xp, dtype = devices.array_module(device), q.dtype
    B, H = _batch_heads(q.shape)
    L, E = q.shape[-2:]
    arrays, strides = zip(*(_strided(xp, a, B, H) for a in (q, k, v, out, dout)))
    sizes = [np.int32(H), np.int32(L), np.int32(E), *(np.int64(s) for ss in strides for s in ss)]
    scalars = [np.float32(scale), *_dropout_args(dropout, dtype)]
    grid, results = (B * H, -(-L // TILE)), [None, None, None]

    def destinations(wanted):
        """For the gradients `wanted` (their indices): the arrays the kernel writes, each (flat buffer,
        strides), and the arrays to return (a given one, or a new contiguous one where none was given
        or the given one cannot be written through strides: copied into it after the launch). An unwanted
        gradient that the kernel writes anyway (dk or dv) goes to a scratch array, never into one given."""
        written = []
        for n in wanted:
            target = grads[n] if need[n] else None
            fits = target is not None and target.shape == q.shape and target.dtype == dtype
            strided = _strided(xp, target, B, H, written=True) if fits else None
            if strided is None:
                own = xp.empty(q.shape, dtype)
                strided = _strided(xp, own, B, H, written=True)
                results[n] = own if target is None else (own, target)
            else:
                results[n] = target
            written.append(strided)
        return written

    if need[0]:
        (dq, dq_strides), = destinations([0])
        runtime.launch(device, FILE, runtime.entry_point("causal_attention_backward_dq", dtype), grid, (THREADS,),
                       [*arrays, lse, dq, *sizes, *(np.int64(s) for s in dq_strides), *scalars])
    if need[1] or need[2]:
        (dk, dk_strides), (dv, dv_strides) = destinations([1, 2])
        runtime.launch(device, FILE, runtime.entry_point("causal_attention_backward_dkdv", dtype), grid, (THREADS,),
                       [*arrays, lse, dk, dv, *sizes, *(np.int64(s) for s in (*dk_strides, *dv_strides)), *scalars])
    results = [_into(*r[::-1]) if isinstance(r, tuple) else r for r in results]
    return tuple(r if wanted else None for r, wanted in zip(results, need))


def _into(target, grad):
    """grad, or, where a target array was given, grad copied into it (and the target returned)."""
    if target is None:
        return grad
    target[...] = grad
    return target
