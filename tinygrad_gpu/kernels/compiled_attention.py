"""causal_attention.cu on a CPU: a numba loop over (batch, head), its small products made by MKL's JIT.

The GPU kernels walk tiles of 32 positions so that the (L, L) scores never reach memory. A CPU core's caches hold
a whole head's scores at the lengths we train (64 x 64 float32 is 16 KB, 256 x 256 is 256 KB), so here a task
takes one (batch, head): products make its scores in scratch memory of its own, the softmax runs over them there,
more products make its output, and only out and lse go back to memory. Each product takes a block of rows and
only the keys they see, as the kernels skip the tiles above the diagonal (BLOCKS). The backward recomputes the
probabilities from q, k and lse, as the kernels do, and writes dq, dk, dv through strides (into one buffer laid
out like the projection, for PackedCausalAttention). The formulas are the .cu file's header's, and
causal_attention.py's reference_forward and reference_backward define them; one difference of order: D_i, the
sum of p_ij dp_ij, is added up from the scratch (the .cu file takes it as dout_i . out_i, the same sum).

Why: the plain version (products around causal_softmax) makes each of attention's (L, L) matrices for all heads
at once, so the scores, the probabilities, dp and ds are each written and read back across the whole layer, out
of the caches by the time the next step reads them. Measured on a 2-core Xeon, the CPU recipe's training step took
28.0 to 29.0 ms with this against 29.8 to 31.7 with the plain version (separate processes, taken in turn), and
nanoGPT's GPU config's 4.03 s against 4.59 with one block of rows.

The products are MKL's JIT-compiled kernels (mkl_products.small_product): machine code for one size, called from
the loop with three addresses (_multiply). numba's own loops multiply such matrices several times slower (no register
blocking), and NumPy's BLAS cannot be called from numba's threads; so this path runs where both numba and MKL are
in use, for float32 data without dropout. Elsewhere the cpu runs the plain version.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic

from . import compiled_cpu, mkl_products
from .compiled_cpu import _exp_in_place, _row_max, LANES

LONGEST = 2048          # L at most: a task's scratch is two (L, L) float32 matrices (32 MB at 2048)
ITEM = 4                # bytes of a float32: the kernels move addresses by rows of their scratch
# A head's rows go in BLOCKS blocks, each multiplied with the keys it sees: 5/8 of the (L, L) products' work. At the
# GPU config (L = 256) the step took 3.56 to 3.71 s against 3.87 to 3.98 with one block (8 blocks: 3.52 to 3.63); at
# the CPU recipe's L = 64 the same within the noise.
BLOCKS = 4


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
    leads = [steps[2] // ITEM if L > 1 else E for _, steps in where]
    return np.array([w[0] for w in where], np.int64), np.array([w[1] for w in where], np.int64), leads


def _product(transpose_a, transpose_b, m, n, k, alpha, *leads):
    made = mkl_products.small_product(transpose_a, transpose_b, m, n, k, float(alpha), *leads)
    if made is None:
        raise RuntimeError(f"causal attention on the cpu: MKL could not make a {m} x {k} by {k} x {n} product")
    return made


def _constants():
    return compiled_cpu._with_exp_constants(np.float32, 0, 1, -np.inf)     # zero, one, -inf, then the exp's


@compiled_cpu.helper
def _padded(i, r1):
    """How many of row i's scores a loop takes: the i + 1 it sees, rounded up to whole LANES (the future among them
    set to -inf first), at most r1. Loops of whole vectors, with no element-by-element remainder: at the recipe's
    sizes a layer's forward took 234 against 253 us, its backward 315 against 329 (with the subtraction of the
    row's max or lse in a loop of its own, and loops of i + 1)."""
    return min(r1, (i // LANES + 1) * LANES)


@intrinsic
def _multiply(typingctx, kernel, jitter, a, b, c):
    """kernel(jitter, a, b, c) from a kernel's loop: a call to the C function at the address `kernel`, one of MKL's
    JIT products (mkl_products.small_product), with four 64-bit arguments. The addresses come in an int64 array,
    which numba types as one argument; a tuple of ctypes functions was typed again, function by function, at every
    call (10 us of the forward's call, 20 of the backward's)."""
    word = types.int64

    def codegen(context, builder, signature, args):
        values = [context.cast(builder, value, kind, word) for value, kind in zip(args, signature.args)]
        function = builder.inttoptr(values[0], ir.FunctionType(ir.VoidType(), [ir.IntType(64)] * 4).as_pointer())
        builder.call(function, values[1:])
        return context.get_dummy_value()
    return types.void(kernel, jitter, a, b, c), codegen


@compiled_cpu.helper
def _task_addresses(task, heads, addresses, steps):
    """Where each operand's matrix of this task's (batch, head) starts: its address moved by its batch and head
    steps."""
    return addresses + (task // heads) * steps[:, 0] + (task % heads) * steps[:, 1]


@compiled_cpu.helper
def _hide_future(values, i, n, minus_inf):
    """values[i, j] = -inf for the keys j > i among the row's first n (_padded): all in its last LANES."""
    for j in range(max(0, n - LANES), n):
        values[i, j] = values[i, j] if j <= i else minus_inf


# ----------------------------------------------------------------------------- forward
@compiled_cpu.kernel
def _forward_heads(products, jitters, addresses, steps, lse, heads, L, block, parts, c):
    """For each (batch, head), block of rows by block of rows (r0..r1): s = scale q k^T for the keys 0..r1 those
    rows see (products[0, r]), the causal softmax of each row in place (lse_i kept), p v into out (products[1, r]);
    products[kind, r] is called with jitters[kind, r] (_multiply).
    addresses and steps: q's, k's, v's and out's. The future's probabilities up to r1 are written as 0: the product
    reads them."""
    zero, one, minus_inf = c[0], c[1], c[2]
    tasks = lse.shape[0]
    for part in prange(parts):
        s = np.empty((L, L), np.float32)
        powers, lanes = np.empty(L, np.int32), np.empty(LANES, np.float32)
        for task in range(part * tasks // parts, (part + 1) * tasks // parts):
            at = _task_addresses(task, heads, addresses, steps)
            for r0 in range(0, L, block):                  # block r: rows r0..r1 (fewer than BLOCKS where L is)
                r, r1 = r0 // block, min(L, r0 + block)
                rows_at = s.ctypes.data + r0 * L * ITEM
                _multiply(products[0, r], jitters[0, r], at[Q] + r0 * steps[Q, 2], at[K], rows_at)
                for i in range(r0, r1):
                    n = _padded(i, r1)
                    _hide_future(s, i, n, minus_inf)     # exp(-inf) is 0
                    top = _row_max(s, i, n, one, lanes)
                    total = _exp_in_place(s, i, n, powers, True, c, top)
                    inverse = one / np.float32(total)
                    for j in range(n):
                        s[i, j] *= inverse
                    for j in range(n, r1):
                        s[i, j] = zero
                    lse[task, i] = top + math.log(total)
                _multiply(products[1, r], jitters[1, r], rows_at, at[V], at[OUT] + r0 * steps[OUT, 2])


Q, K, V, OUT = range(4)                     # _forward_heads' operands; the backward's: Q, K, V, DOUT, DQ, DK, DV
DOUT, DQ, DK, DV = range(3, 7)


def _block(L: int) -> int:
    return -(-L // BLOCKS)


def _blocks(L: int) -> list:
    """(r0, r1) of each of the BLOCKS blocks of rows (the last shorter, or empty where L < BLOCKS)."""
    block = _block(L)
    return [(r0, min(L, r0 + block)) for r0 in range(0, L, block)]


def _kernels(made) -> tuple:
    """made (kinds of product, each a list by block of (kernel, jitter)) as a kernel's two arguments: the kernels'
    and the jitters' addresses, each a (kinds, blocks) int64 array."""
    return tuple(np.array([[m[i] for m in kind] for kind in made], np.int64) for i in (0, 1))


def forward(q, k, v, scale: float, B: int, H: int):
    """causal_attention.forward on the cpu, for q, k, v of B batches of H heads: (out, lse), out of q's shape laid
    out in memory as (B, L, H, E) (heads merge back into (B, L, H*E) as a view), lse float32 (B*H, L)."""
    L, E = q.shape[-2:]
    out = np.empty((B, L, H, E), np.float32).transpose(0, 2, 1, 3)
    lse = np.empty((B * H, L), np.float32)
    operands = [_as_heads(a, B, H) for a in (q, k, v)] + [out]       # held until the kernel has run: copies
    addresses, steps, leads = _plan(operands)
    products, jitters = _forward_products(L, E, float(scale), *leads)
    work = B * H * L * L
    compiled_cpu._run(_forward_heads, work, products, jitters, addresses, steps, lse, H, L, _block(L),
                      compiled_cpu._parts(work, B * H), _constants())
    return out.reshape(q.shape), lse


@functools.lru_cache(maxsize=None)
def _forward_products(L: int, E: int, scale: float, lead_q: int, lead_k: int, lead_v: int, lead_out: int):
    """_forward_heads' two arguments for these sizes (made once: a step asks again for every layer): for each block
    of rows r0..r1 and the keys 0..r1 they see, scale q k^T, then p v."""
    blocks = _blocks(L)
    return _kernels(([_product(False, True, r1 - r0, r1, E, scale, lead_q, lead_k, L) for r0, r1 in blocks],
                     [_product(False, False, r1 - r0, E, r1, 1.0, L, lead_v, lead_out) for r0, r1 in blocks]))


# ----------------------------------------------------------------------------- backward
@compiled_cpu.kernel
def _backward_heads(products, jitters, addresses, steps, lse, heads, L, block, parts, c):
    """For each (batch, head), with _multiply(products[kind, r], jitters[kind, r], a, b, c) the products backward()
    makes for block r: block of rows by block of rows, p from the scores again and lse, dp = dout v^T, ds = p (dp - D)
    in dp's place, and dq = scale ds k; then block of keys by block of keys (the rows from the block's first on, the
    rest of its column being 0), dv = p^T dout and dk = scale ds^T q. addresses and steps: q's, k's, v's, dout's,
    dq's, dk's and dv's."""
    zero, minus_inf = c[0], c[2]
    tasks = lse.shape[0]
    for part in prange(parts):
        p, dp = np.empty((L, L), np.float32), np.empty((L, L), np.float32)
        powers = np.empty(L, np.int32)
        for task in range(part * tasks // parts, (part + 1) * tasks // parts):
            at = _task_addresses(task, heads, addresses, steps)
            for r0 in range(0, L, block):                  # block r: rows r0..r1 (fewer than BLOCKS where L is)
                r, r1 = r0 // block, min(L, r0 + block)
                p_at, dp_at = p.ctypes.data + r0 * L * ITEM, dp.ctypes.data + r0 * L * ITEM
                _multiply(products[SCORES, r], jitters[SCORES, r], at[Q] + r0 * steps[Q, 2], at[K], p_at)
                _multiply(products[DOUT_V, r], jitters[DOUT_V, r], at[DOUT] + r0 * steps[DOUT, 2], at[V], dp_at)
                for i in range(r0, r1):
                    n = _padded(i, r1)
                    _hide_future(p, i, n, minus_inf)     # exp(-inf) is 0
                    _exp_in_place(p, i, n, powers, True, c, lse[task, i])
                    D = zero
                    for j in range(n):
                        D += p[i, j] * dp[i, j]
                    for j in range(n):
                        dp[i, j] = p[i, j] * (dp[i, j] - D)
                    for j in range(n, r1):
                        p[i, j] = zero
                        dp[i, j] = zero
                _multiply(products[DS_K, r], jitters[DS_K, r], dp_at, at[K], at[DQ] + r0 * steps[DQ, 2])
            for r0 in range(0, L, block):
                r = r0 // block
                corner = (r0 * L + r0) * ITEM                   # [r0, r0]: the block's column, from its diagonal
                dout_at, q_at = at[DOUT] + r0 * steps[DOUT, 2], at[Q] + r0 * steps[Q, 2]
                _multiply(products[P_DOUT, r], jitters[P_DOUT, r], p.ctypes.data + corner, dout_at,
                          at[DV] + r0 * steps[DV, 2])
                _multiply(products[DS_Q, r], jitters[DS_Q, r], dp.ctypes.data + corner, q_at,
                          at[DK] + r0 * steps[DK, 2])


SCORES, DOUT_V, DS_K, P_DOUT, DS_Q = range(5)      # _backward_heads' products, in the order it makes them


@functools.lru_cache(maxsize=None)
def _backward_products(L: int, E: int, scale: float, *leads):
    """_backward_heads' two arguments for these sizes and the leading dimensions of q, k, v, dout, dq, dk, dv."""
    made, blocks = [None] * 5, _blocks(L)
    # a block of rows r0..r1 and the keys 0..r1 they see: scale q k^T, dout v^T, scale ds k
    made[SCORES] = [_product(False, True, r1 - r0, r1, E, scale, leads[Q], leads[K], L) for r0, r1 in blocks]
    made[DOUT_V] = [_product(False, True, r1 - r0, r1, E, 1.0, leads[DOUT], leads[V], L) for r0, r1 in blocks]
    made[DS_K] = [_product(False, False, r1 - r0, E, r1, scale, L, leads[K], leads[DQ]) for r0, r1 in blocks]
    # a block of keys r0..r1 and the rows r0..L that see them: p^T dout, scale ds^T q
    made[P_DOUT] = [_product(True, False, r1 - r0, E, L - r0, 1.0, L, leads[DOUT], leads[DV]) for r0, r1 in blocks]
    made[DS_Q] = [_product(True, False, r1 - r0, E, L - r0, scale, L, leads[Q], leads[DK]) for r0, r1 in blocks]
    return _kernels(made)


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
    products, jitters = _backward_products(L, E, float(scale), *leads)
    work = B * H * L * L
    compiled_cpu._run(_backward_heads, work, products, jitters, addresses, steps, lse, H, L, _block(L),
                      compiled_cpu._parts(work, B * H), _constants())
    results = []
    for wanted, (given, own) in zip(need, kept):
        if given is not None and own is not None:      # a given array the kernel could not write through strides
            given[...] = own
        results.append((own if given is None else given) if wanted else None)
    return tuple(results)
