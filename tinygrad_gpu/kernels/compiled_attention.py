"""causal_attention.cu on a CPU: a numba loop over (batch, head), its small products made by MKL's JIT.

The GPU kernels walk tiles of 32 positions so that the (L, L) scores never reach memory. A CPU core's caches hold
a whole head's scores at the lengths we train (64 x 64 float32 is 16 KB, 256 x 256 is 256 KB), so here a task
takes one (batch, head): one product makes its scores in scratch memory of its own, the softmax runs over them
there, one more product makes its output, and only out and lse go back to memory; the backward recomputes the
probabilities from q, k and lse, as the kernels do, and writes dq, dk, dv through strides (into one buffer laid
out like the projection, for PackedCausalAttention). The formulas are the .cu file's header's, and
causal_attention.py's reference_forward and reference_backward define them; one difference of order: D_i, the
sum of p_ij dp_ij, is added up from the scratch (the .cu file takes it as dout_i . out_i, the same sum).

Why: the plain version (products around causal_softmax) makes each of attention's (L, L) matrices for all heads
at once, so the scores, the probabilities, dp and ds are each written and read back across the whole layer, out
of the caches by the time the next step reads them. At the CPU recipe's sizes the training step took 27.7 ms with
this against 29.6 with the plain version, and nanoGPT's GPU config's 4.03 s against 4.59 (benchmarks/step.py).

The products are MKL's JIT-compiled kernels (mkl_products.small_product): machine code for one size, called from
the loop with three addresses. numba's own loops multiply such matrices several times slower (no register
blocking), and NumPy's BLAS cannot be called from numba's threads; so this path runs where both numba and MKL are
in use, for float32 data without dropout. Elsewhere the cpu runs the plain version.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from . import compiled_cpu, mkl_products
from .compiled_cpu import _exp_in_place, _row_max, LANES

LONGEST = 2048          # L at most: a task's scratch is two (L, L) float32 matrices (32 MB at 2048)


def takes(q, k, v) -> bool:
    """Does this path take q, k, v (float32 NumPy arrays of one shape (..., L, E), L == S)? Where MKL multiplies
    (mkl_products), for L up to LONGEST; causal_attention.supports asks this where the cpu's fused ops are
    compiled (cpu_paths)."""
    return (all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in (q, k, v))
            and q.ndim >= 2 and q.shape == k.shape == v.shape and q.size > 0 and q.shape[-2] <= LONGEST
            and mkl_products.library() is not None)


def _as_heads(a, B: int, H: int, written: bool = False):
    """a (..., L, E) as a (B, H, L, E) array that MKL can read (or, `written`, write) a head's matrix of: its last
    dimension contiguous, its rows apart by at least E (one row: any), every stride a whole number of elements and
    none negative, and for one written no stride 0 where the dimension counts more than 1 (two tasks would write
    one place). A view of a's memory where a is such; else, to read, a contiguous copy, and to write, None."""
    L, E = a.shape[-2:]
    heads = a.reshape(B, H, L, E)
    strides, item = heads.strides, a.itemsize
    fits = ((E == 1 or strides[3] == item) and (L == 1 or strides[2] >= E * item) and min(strides) >= 0
            and all(s % item == 0 for s in strides)
            and not (written and (heads.flags.owndata or any(s == 0 and n > 1 for s, n in zip(strides, heads.shape)))))
    if fits:
        return heads
    return None if written else np.ascontiguousarray(heads)


def _address_and_steps(heads):
    """(the address of heads[0, 0, 0, 0], its (batch, head, time) strides in bytes)."""
    return heads.__array_interface__["data"][0], heads.strides[:3]


def _plan(arrays):
    """What a kernel call needs of its operands (each a (B, H, L, E) array): their addresses (int64), their
    strides (an (n, 3) int64 array of bytes) and their leading dimensions for MKL (elements; E for one row). The
    caller holds the arrays until the kernel has run: an address does not keep a copy alive."""
    where = [_address_and_steps(a) for a in arrays]
    L, E = arrays[0].shape[2:]
    leads = [steps[2] // 4 if L > 1 else E for _, steps in where]
    return np.array([w[0] for w in where], np.int64), np.array([w[1] for w in where], np.int64), leads


def _product(transpose_a, transpose_b, m, n, k, alpha, *leads):
    made = mkl_products.small_product(transpose_a, transpose_b, m, n, k, float(alpha), *leads)
    if made is None:
        raise RuntimeError(f"causal attention on the cpu: MKL could not make a {m} x {k} by {k} x {n} product")
    return made


def _constants():
    return compiled_cpu._with_exp_constants(np.float32, 0, 1)        # zero, one, then the exp's


# ----------------------------------------------------------------------------- forward
@compiled_cpu.kernel
def _forward_heads(products, jitters, addresses, steps, lse, heads, L, parts, c):
    """For each (batch, head): s = scale q k^T (products[0]), the causal softmax of each row in place (lse_i kept),
    p v into out (products[1]). addresses and steps: q's, k's, v's and out's. The future's probabilities are
    written as 0: the product reads them."""
    zero, one = c[0], c[1]
    tasks = lse.shape[0]
    for part in prange(parts):
        s = np.empty((L, L), np.float32)
        powers, lanes = np.empty(L, np.int32), np.empty(LANES, np.float32)
        for task in range(part * tasks // parts, (part + 1) * tasks // parts):
            b, h = task // heads, task % heads
            at = addresses + b * steps[:, 0] + h * steps[:, 1]
            products[0](jitters[0], at[Q], at[K], s.ctypes.data)
            for i in range(L):
                seen = i + 1
                top = _row_max(s, i, seen, one, lanes)
                for j in range(seen):
                    s[i, j] -= top
                total = _exp_in_place(s, i, seen, powers, True, c)
                inverse = one / np.float32(total)
                for j in range(seen):
                    s[i, j] *= inverse
                for j in range(seen, L):
                    s[i, j] = zero
                lse[task, i] = top + math.log(total)
            products[1](jitters[1], s.ctypes.data, at[V], at[OUT])


Q, K, V, OUT = range(4)                     # _forward_heads' operands; the backward's: Q, K, V, DOUT, DQ, DK, DV
DOUT, DQ, DK, DV = range(3, 7)


def forward(q, k, v, scale: float, B: int, H: int):
    """causal_attention.forward on the cpu, for q, k, v of B batches of H heads: (out, lse), out of q's shape laid
    out in memory as (B, L, H, E) (heads merge back into (B, L, H*E) as a view), lse float32 (B*H, L)."""
    L, E = q.shape[-2:]
    out = np.empty((B, L, H, E), np.float32).transpose(0, 2, 1, 3)
    lse = np.empty((B * H, L), np.float32)
    operands = [_as_heads(a, B, H) for a in (q, k, v)] + [out]       # held until the kernel has run: copies
    addresses, steps, leads = _plan(operands)
    made = (_product(False, True, L, L, E, scale, leads[Q], leads[K], L),              # scale q k^T
            _product(False, False, L, E, L, 1.0, L, leads[V], leads[OUT]))             # p v
    products, jitters = tuple(m[0] for m in made), np.array([m[1] for m in made], np.int64)
    work = B * H * L * L
    compiled_cpu._run(_forward_heads, work, products, jitters, addresses, steps, lse, H, L,
                      compiled_cpu._parts(work, B * H), _constants())
    return out.reshape(q.shape), lse


# ----------------------------------------------------------------------------- backward
@compiled_cpu.kernel
def _backward_heads(products, jitters, addresses, steps, lse, heads, L, parts, c):
    """For each (batch, head), with products[n](jitters[n], a, b, c) the five products backward() makes: p from
    the scores again and lse; dv = p^T dout; dp = dout v^T; ds = p (dp - D) in dp's place; dq = scale ds k and
    dk = scale ds^T q. addresses and steps: q's, k's, v's, dout's, dq's, dk's and dv's."""
    zero = c[0]
    tasks = lse.shape[0]
    for part in prange(parts):
        p, dp = np.empty((L, L), np.float32), np.empty((L, L), np.float32)
        powers = np.empty(L, np.int32)
        for task in range(part * tasks // parts, (part + 1) * tasks // parts):
            b, h = task // heads, task % heads
            at = addresses + b * steps[:, 0] + h * steps[:, 1]
            products[SCORES](jitters[SCORES], at[Q], at[K], p.ctypes.data)
            for i in range(L):
                seen = i + 1
                for j in range(seen):
                    p[i, j] -= lse[task, i]
                _exp_in_place(p, i, seen, powers, True, c)
                for j in range(seen, L):
                    p[i, j] = zero
            products[P_DOUT](jitters[P_DOUT], p.ctypes.data, at[DOUT], at[DV])
            products[DOUT_V](jitters[DOUT_V], at[DOUT], at[V], dp.ctypes.data)
            for i in range(L):
                seen = i + 1
                D = zero
                for j in range(seen):
                    D += p[i, j] * dp[i, j]
                for j in range(seen):
                    dp[i, j] = p[i, j] * (dp[i, j] - D)
                for j in range(seen, L):
                    dp[i, j] = zero
            products[DS_K](jitters[DS_K], dp.ctypes.data, at[K], at[DQ])
            products[DS_Q](jitters[DS_Q], dp.ctypes.data, at[Q], at[DK])


SCORES, P_DOUT, DOUT_V, DS_K, DS_Q = range(5)      # _backward_heads' products, in the order it makes them


def backward(q, k, v, lse, dout, scale: float, B: int, H: int, need=(True, True, True), grads=None):
    """causal_attention.backward on the cpu: (dq, dk, dv), None where `need` says no; each wanted one written into
    its array of `grads` where one is given (through its strides where they allow, else copied in)."""
    L, E = q.shape[-2:]
    targets, kept = [], []                  # what the kernel writes; (the given array, a new one) per gradient
    for wanted, given in zip(need, grads or (None, None, None)):
        given = given if wanted else None   # an unwanted gradient goes to scratch, never into a given array
        fits = given is not None and given.shape == q.shape and given.dtype == np.float32
        heads = _as_heads(given, B, H, written=True) if fits else None
        own = np.empty(q.shape, np.float32) if heads is None else None
        targets.append(heads if own is None else own.reshape(B, H, L, E))
        kept.append((given, own))
    dout = dout.astype(np.float32, copy=False)
    operands = [_as_heads(a, B, H) for a in (q, k, v, dout)] + targets     # held until the kernel has run
    addresses, steps, leads = _plan(operands)
    made = [None] * 5
    made[SCORES] = _product(False, True, L, L, E, scale, leads[Q], leads[K], L)            # scale q k^T
    made[P_DOUT] = _product(True, False, L, E, L, 1.0, L, leads[DOUT], leads[DV])          # p^T dout
    made[DOUT_V] = _product(False, True, L, L, E, 1.0, leads[DOUT], leads[V], L)           # dout v^T
    made[DS_K] = _product(False, False, L, E, L, scale, L, leads[K], leads[DQ])            # scale ds k
    made[DS_Q] = _product(True, False, L, E, L, scale, L, leads[Q], leads[DK])             # scale ds^T q
    products, jitters = tuple(m[0] for m in made), np.array([m[1] for m in made], np.int64)
    work = B * H * L * L
    compiled_cpu._run(_backward_heads, work, products, jitters, addresses, steps, lse, H, L,
                      compiled_cpu._parts(work, B * H), _constants())
    results = []
    for wanted, (given, own) in zip(need, kept):
        if given is not None and own is not None:      # a given array the kernel could not write through strides
            given[...] = own
        results.append((own if given is None else given) if wanted else None)
    return tuple(results)
