"""The fused ops on a CPU, compiled: each kernel's formula as a numba loop over the cores.

A .cu kernel gives each row (or stretch of elements) to a block of threads and keeps the
values of its formula in registers. numba compiles a Python loop to machine code, and
``prange`` hands its iterations out to the CPU's cores; so each function here is that
kernel's loop, with the formula of its ``reference_*`` inside: one pass over memory for
what NumPy does in several, and for large arrays on every core (``PARALLEL_MIN`` says when). The NumPy versions in
``fast_cpu.py`` stay as the path without numba (cross-entropy has none: there the reference is NumPy's path);
both take and return what the references do (16-bit data is computed in float32 and rounded once), and
``tests/test_cpu_kernels.py`` checks both against the references.

Two choices, measured by ``benchmarks/cpu_kernels.py``:

* fastmath flags "reassoc" and "contract" only: LLVM may reorder a row's sum into vector
  lanes and fuse multiply-adds (a sum in lanes is, if anything, more accurate than one
  running total); the rest of fastmath would assume there is no inf or nan.
* GELU's tanh, for float32 data, as a rational function within 8 ulps (``_tanh_rational``): numba's
  math.tanh runs one element at a time (no vector math library in its pip wheel), and
  was 10 times slower than NumPy's; a fraction of polynomials is multiplications and one
  division, which LLVM vectorizes. float64 data keeps math.tanh.

* exp, for float32 data, as a polynomial times a power of two built from its bits (``_exp_parts``),
  within 2 ulps: math.exp is one element at a time too, and so slower than NumPy's exp,
  while this is vector arithmetic (0.10 ms for 196,608 values on one core, NumPy's exp 0.28).
  The softmaxes (attention's and cross-entropy's) use it; float64 data keeps math.exp.

Compiled kernels are kept on disk (``cache.py``'s folder, "numba"), so only the first
run on a machine compiles them (0.2 to 1.5 s each). numba's threads and BLAS's share the
cores: the end of the file says how they take turns.
"""
from __future__ import annotations

import functools
import math
import os
import types

import numba
import numpy as np
from numba import prange

from .. import cache
from . import fast_cpu, mkl_products
from .runtime import working_dtype


REORDERED = {"reassoc", "contract"}          # numba's fastmath flags that we allow (the docstring says why)


class Kernel:
    """One kernel's loop, compiled by numba at its first call in two builds: ``parallel`` hands the iterations of
    its prange out to numba's threads, ``serial`` runs them as a plain loop on the caller's core. _run calls the
    serial build below PARALLEL_MIN elements and the parallel one from there, so a default run compiles only the
    serial builds (and the one parallel build that _start_threads runs), which compile 3 times faster (4.2 s for
    all kernels against 11.9 s, measured) and need no thread count set around each call (that took 5 of a small
    kernel's 7 microseconds).

    A serial loop is vectorized only where LLVM may assume that what it writes does not change what it reads: in
    a parallel loop numba promises that the arrays do not overlap, in a serial one LLVM checks it at run time, and
    where they do overlap, it runs the loop one element at a time. So GELU reads its 17 constants into locals
    before its loop (_held_constants: read from their array inside the loop, they made GELU's serial loop 8 times
    slower; the softmaxes' exp constants, held the same way, measured no faster). And a kernel that may write its
    result over its input (a spare one, *_is_spare) has a loop of its own for that case, which reads and writes
    the one array: given the input twice, as input and as output, the loop failed the check and ran twice as
    slowly as into a new array (layer norm's backward at (768, 128): 77 against 38 us), while the loop of one
    array runs faster than either (35 against 48 us into a new array, with the data out of cache, as in a
    training step)."""

    def __init__(self, function, fastmath):
        self.parallel = _compiled(function, fastmath, parallel=True)
        copy = types.FunctionType(function.__code__, function.__globals__, function.__name__ + "_serial",
                                  function.__defaults__, function.__closure__)
        copy.__qualname__ = function.__qualname__ + "_serial"      # numba names its cache files by it
        self.serial = _compiled(copy, fastmath, parallel=False)


def _compiled(function, fastmath, parallel: bool):
    """numba's compiler for one build of a kernel, kept in our cache folder (numba chooses a function's folder
    when it decorates it: the user's own setting, if any, is put back after). NumPy's error model: a division by
    zero gives inf or nan, as on a GPU, not Python's ZeroDivisionError (a parallel build has it anyway)."""
    users_folder = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = users_folder or cache.cache_dir("numba")
    try:
        return numba.njit(parallel=parallel, cache=True, fastmath=fastmath, error_model="numpy")(function)
    finally:
        numba.config.CACHE_DIR = users_folder


def kernel(function):
    """A kernel whose sums LLVM may reorder into vector lanes, and whose products and sums it may fuse."""
    return Kernel(function, REORDERED)


def kernel_in_order(function):
    """A kernel computed in its written order and rounding, as the reference is (AdamW: the small differences
    a fused multiply-add makes grow through m / sqrt(v) over the steps)."""
    return Kernel(function, False)


# How many cores a kernel call takes. Between two products the other cores are rarely free: after every product
# it shares out, OpenBLAS's worker threads keep spinning for about 0.1 s, waiting for the next one (a product of
# 0.1 ms followed by a 0.3 s sleep costs the process 0.11 s of CPU time), and nothing at run time stops them
# (openblas_set_num_threads does not). A loop shared out meanwhile shares each core with a spinning thread, and
# waits for its slowest part: measured on 2 cores after a product, a GELU of 0.4 M elements took 0.36 ms on one
# core and 0.54 ms on two, and even at 25 M elements two cores gained 3%. Below PARALLEL_MIN elements a call
# stays on the caller's core. Where MKL multiplies instead, in numba's own threads, there is no other pool, and
# _start_threads lowers it to SHARED_PARALLEL_MIN (the end of the file).
PARALLEL_MIN = 1 << 20


def _cores_for(elements: int) -> int:
    """1 below PARALLEL_MIN elements, else as many cores as numba may use here (the user's own limit, if set)."""
    return 1 if elements < PARALLEL_MIN else numba.get_num_threads()


def _parts(elements: int, rows: int) -> int:
    """Stretches of rows, one per core that _run will use: a kernel that keeps something per part (partial sums,
    scratch memory) makes it once per part, not once per row."""
    return max(1, min(_cores_for(elements), rows))


def _run(kernel: Kernel, elements: int, *args):
    """kernel(*args) on _cores_for(elements) cores: its serial build below PARALLEL_MIN, else its parallel one."""
    return (kernel.parallel if elements >= PARALLEL_MIN else kernel.serial)(*args)


def helper(function):
    """A function the kernels call, compiled into them (no loop of its own to share out)."""
    return numba.njit(inline="always", fastmath=REORDERED)(function)


# ----------------------------------------------------------------------------- tanh as a fraction
# tanh(u) ~ u P(u^2) / Q(u^2) for |u| <= TANH_LIMIT, and +-1 beyond (float32's tanh is 1 there to the last
# bit). Degrees 5 and 3, fit by least squares on (0, 9] by benchmarks/cpu_kernels.py's rational_tanh()
# (tests/test_cpu_kernels.py fits them again); in float32 they are within 8 ulps of tanh (4.7e-7).
TANH_LIMIT = 9.0
TANH_P = (0.9999999807186407, 0.12976021491212408, 0.0029818004371197165, 9.821833947504953e-06,
          -1.4419693253421452e-08, 2.2353577758759876e-11)
TANH_Q = (1.0, 0.4630934059694631, 0.02401313818070672, 0.00023652509995564526)


@functools.lru_cache(maxsize=256)
def _constants(dtype, *values):
    """values as an array of the data's dtype: inside a kernel, a Python float is float64, and one float64
    constant would turn a float32 formula into a float64 one (twice the work, half the vector lanes). Made once
    per set of values and kept (the kernels only read it): a training step asks dozens of times."""
    return np.array(values, dtype)


@helper
def _tanh_rational(u, c):
    """tanh(u) from the fraction (c: the constants of _gelu_constants). min and max, not branches: LLVM
    vectorizes them (and a nan stays nan)."""
    limit, one = c[4], c[1]
    u = min(max(u, -limit), limit)
    s = u * u
    top = u * (c[6] + s * (c[7] + s * (c[8] + s * (c[9] + s * (c[10] + s * c[11])))))
    return min(max(top / (c[12] + s * (c[13] + s * (c[14] + s * c[15]))), -one), one)


# ----------------------------------------------------------------------------- GELU (gelu.py)
def _gelu_constants(dtype, k: float, c: float):
    return _constants(dtype, 0.5, 1.0, k, c, TANH_LIMIT, 10.0, *TANH_P, *TANH_Q, 3 * c)


@helper
def _gelu_and_slope(v, rational, c):
    """gelu.cu's formula for one element: out = 0.5 x (1 + t), t = tanh(k x (1 + c x^2)), and its slope gelu'(x) =
    0.5 (1 + t) + x b (1 - t^2) with b = 0.5 k (1 + 3 c x^2). The tanh's argument takes x clipped to +-10: past
    that t is exactly +-1 and the slope exactly 1 or 0, and x^3 cannot overflow (fast_cpu.py's reason)."""
    half, one, k, cubic, clip, three_cubic = c[0], c[1], c[2], c[3], c[5], c[16]
    xc = min(max(v, -clip), clip)
    square = xc * xc
    u = k * xc * (one + cubic * square)
    t = _tanh_rational(u, c) if rational else math.tanh(u)
    return half * v * (one + t), half * (one + t) + xc * (half * k * (one + three_cubic * square)) * (one - t * t)


@helper
def _held_constants(c):
    """_gelu_constants' 17 values as a tuple, read once before the loop (Kernel says why)."""
    return (c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12], c[13], c[14], c[15],
            c[16])


@kernel
def _gelu_loop(x, out, slope, keep_slope, rational, c):
    """gelu.cu's loop, numba giving each core one stretch of the elements. Two loops, not one with an `if
    keep_slope` inside: LLVM vectorizes a loop without that branch (twice as fast, measured), and drops the
    slope's arithmetic from the loop that stores none."""
    held = _held_constants(c)
    if keep_slope:
        for i in prange(x.size):
            out[i], slope[i] = _gelu_and_slope(x[i], rational, held)
    else:
        for i in prange(x.size):
            out[i] = _gelu_and_slope(x[i], rational, held)[0]


def _gelu(x, k: float, c: float, keep_slope: bool):
    work = working_dtype(x.dtype)
    flat = np.ascontiguousarray(x, work).reshape(-1)
    out, slope = np.empty(x.size, work), np.empty(x.size if keep_slope else 0, work)
    _run(_gelu_loop, flat.size, flat, out, slope, keep_slope, work == np.float32, _gelu_constants(work, k, c))
    return out.reshape(x.shape).astype(x.dtype, copy=False), slope.reshape(x.shape) if keep_slope else None


def gelu_forward(x, k: float, c: float):
    return _gelu(x, k, c, keep_slope=False)[0]


def gelu_forward_and_slope(x, k: float, c: float):
    """(gelu(x), gelu'(x)), the slope in float32 at least: the backward is then one multiplication."""
    return _gelu(x, k, c, keep_slope=True)


@kernel
def _multiply_into(a, b, out, into_b):
    """out = a b; into_b: out is b itself (Kernel says why that is a loop of its own)."""
    if into_b:
        for i in prange(b.size):
            b[i] *= a[i]
    else:
        for i in prange(out.size):
            out[i] = a[i] * b[i]


def gelu_backward_from_slope(slope, dout, dtype, dout_is_spare: bool = False):
    """dx = slope dout, in dout's memory when it is spare."""
    if dout.dtype != slope.dtype or not dout.flags.c_contiguous:
        return (slope * dout).astype(dtype, copy=False)
    dx = dout if dout_is_spare else np.empty_like(dout)
    _run(_multiply_into, dout.size, slope.reshape(-1), dout.reshape(-1), dx.reshape(-1), dx is dout)
    return dx.astype(dtype, copy=False)


# ----------------------------------------------------------------------------- layer norm (layernorm.py)
def _inverse(n: int) -> float:
    """1 / n for the row means; nan for rows of no values (the mean of nothing, as NumPy's is)."""
    return 1 / n if n else math.nan


@kernel
def _layernorm_forward_rows(x, weight, bias, has_bias, out, mean, rstd, c):
    """layernorm.cu's forward, a row per iteration: the mean, the variance around it, out = xhat w + b."""
    zero, one, inv_n, eps = c[0], c[1], c[2], c[3]
    rows, n = x.shape
    for row in prange(rows):
        total = zero
        for j in range(n):
            total += x[row, j]
        m = total * inv_n
        spread = zero
        for j in range(n):
            d = x[row, j] - m
            spread += d * d
        r = one / math.sqrt(spread * inv_n + eps)
        mean[row], rstd[row] = m, r
        if has_bias:                           # outside the loop: LLVM vectorizes a loop without the branch
            for j in range(n):
                out[row, j] = (x[row, j] - m) * r * weight[j] + bias[j]
        else:
            for j in range(n):
                out[row, j] = (x[row, j] - m) * r * weight[j]


def layernorm_forward(x, weight, bias, eps: float):
    (rows, n), dtype = x.shape, x.dtype
    work = working_dtype(dtype)
    x, weight = np.ascontiguousarray(x, work), np.ascontiguousarray(weight, work)
    bias_or_none = np.empty(0, work) if bias is None else np.ascontiguousarray(bias, work)
    out, mean, rstd = np.empty((rows, n), work), np.empty(rows, work), np.empty(rows, work)
    _run(_layernorm_forward_rows, x.size, x, weight, bias_or_none, bias is not None, out, mean, rstd,
         _constants(work, 0, 1, _inverse(n), eps))
    return tuple(a.astype(dtype, copy=False) for a in (out, mean, rstd))


@kernel
def _layernorm_backward_rows(x, weight, mean, rstd, dout, dx, into_dout, dx_add, has_add, need_params, dweight_parts,
                             dbias_parts, c):
    """layernorm.cu's backward: dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dout w, a row per
    iteration, plus dx_add where has_add; into_dout: dx is dout itself (each element is read before it is
    written). The parameters' gradients are sums over rows: each of the parts (one per core) sums its stretch
    of rows, and the caller adds the parts, as the fused kernel's blocks leave partial sums."""
    zero, inv_n = c[0], c[2]
    rows, n = x.shape
    parts = dweight_parts.shape[0]
    for part in prange(parts):
        for row in range(part * rows // parts, (part + 1) * rows // parts):
            m, r = mean[row], rstd[row]
            sum_g, sum_gx = zero, zero
            for j in range(n):
                xhat = (x[row, j] - m) * r
                g = dout[row, j] * weight[j]
                sum_g += g
                sum_gx += g * xhat
                if need_params:
                    dweight_parts[part, j] += dout[row, j] * xhat
                    dbias_parts[part, j] += dout[row, j]
            mean_g, mean_gx = sum_g * inv_n, sum_gx * inv_n
            if into_dout:                      # one array read and written (Kernel says why)
                for j in range(n):
                    dout[row, j] = r * (dout[row, j] * weight[j] - mean_g - (x[row, j] - m) * r * mean_gx)
            else:
                for j in range(n):
                    dx[row, j] = r * (dout[row, j] * weight[j] - mean_g - (x[row, j] - m) * r * mean_gx)
            if has_add:                        # a loop of its own: dx rounded, then the sum, as the engine adds
                written = dout if into_dout else dx
                for j in range(n):
                    written[row, j] += dx_add[row, j]


def layernorm_backward(x, weight, mean, rstd, dout, need_params: bool = True, dout_is_spare: bool = False,
                       dx_add=None):
    (rows, n), dtype = x.shape, x.dtype
    work = working_dtype(dtype)
    x, weight, mean, rstd = (np.ascontiguousarray(a, work) for a in (x, weight, mean, rstd))
    converted = np.ascontiguousarray(dout, work)
    dx = converted if dout_is_spare or converted is not dout else np.empty_like(converted)  # a copy is ours
    added = np.empty((0, 0), work) if dx_add is None else np.ascontiguousarray(dx_add, work)
    parts = _parts(x.size, rows)
    width = n if need_params else 0
    dweight_parts, dbias_parts = np.zeros((parts, width), work), np.zeros((parts, width), work)
    _run(_layernorm_backward_rows, x.size, x, weight, mean, rstd, converted, dx, dx is converted, added,
         dx_add is not None, need_params, dweight_parts, dbias_parts, _constants(work, 0, 1, _inverse(n)))
    dweight, dbias = (dweight_parts.sum(0), dbias_parts.sum(0)) if need_params else (None, None)
    return tuple(None if a is None else a.astype(dtype, copy=False) for a in (dx, dweight, dbias))


# ----------------------------------------------------------------------------- exp as p 2^k
# exp(t) = 2^k e^r with k = t log2(e) rounded and r = t - k ln2 (|r| <= ln2 / 2, ln2 in two parts so that k ln2 is
# exact): e^r is its Taylor series to r^7 (within an ulp there), and 2^k is the float32 whose exponent bits are
# k + 127. numba cannot reinterpret a scalar's bits, so a kernel stores each k's bits in an int32 array and reads
# them back through a float32 view of it, in a second loop (_exp_in_place). t below EXP_LOW gives 0 (k + 127 = 0
# is the bits of 0.0): exp(-inf) = 0 exactly, and below e^-88 NumPy's exp gives numbers under 1.2e-38 at most.
EXP_LOW = -88.0
LN2_HIGH, LN2_LOW = 0.693359375, -2.12194440e-4      # their sum is ln2; LN2_HIGH's 9 bits make k LN2_HIGH exact
EXP_AT = 4                  # c[:EXP_AT] are a kernel's own constants, c[EXP_AT:] _exp_parts'


def _with_exp_constants(dtype, *values):
    """A kernel's constants (at most EXP_AT of them) followed by _exp_parts' own."""
    own = (*values, *(0,) * (EXP_AT - len(values)))
    return _constants(dtype, *own, EXP_LOW, 1 / math.log(2), LN2_HIGH, LN2_LOW, 0.5, 1.0,
                      *(1 / math.factorial(i) for i in range(2, 8)))


@helper
def _exp_parts(t, c):
    """(e^r, the int32 bits of 2^k) for exp(t) = e^r 2^k, t a float32 (t <= 0: a softmax's, less the row's
    largest). Clamped with `<`, which keeps a nan a nan."""
    low, log2e, high, low_part, half, one = c[EXP_AT], c[EXP_AT + 1], c[EXP_AT + 2], c[EXP_AT + 3], \
        c[EXP_AT + 4], c[EXP_AT + 5]
    t = low if t < low else t
    k = np.int32(t * log2e - half)            # rounded: truncation towards 0 of t log2(e) - 1/2, for t <= 0
    n = np.float32(k)
    r = (t - n * high) - n * low_part
    p = c[EXP_AT + 11]                        # 1/7!, then Horner's rule down to 1/2!
    for i in range(EXP_AT + 10, EXP_AT + 5, -1):
        p = c[i] + r * p
    return one + r * (one + r * p), (k + np.int32(127)) << np.int32(23)


@helper
def _exp_in_place(values, row, n, powers, own_exp, c, shift):
    """values[row, :n] = exp(values[row, :n] - shift) (a softmax's shift: the row's largest, or its log-sum-exp);
    returns their sum, added up in float64 (in float32 lanes a vocabulary of 50,257 values would lose about 20 ulps
    of it). own_exp (float32 data): by _exp_parts, with powers an int32 scratch of at least n; else by math.exp
    (float64 data). A row of a 2-D array, not a 1-D view of it: numba counts references to every view it makes,
    two atomic operations a row."""
    total = 0.0
    if own_exp:
        two_to_the_k = powers.view(np.float32)
        for j in range(n):
            values[row, j], powers[j] = _exp_parts(values[row, j] - shift, c)
        for j in range(n):
            values[row, j] *= two_to_the_k[j]
            total += values[row, j]
    else:
        for j in range(n):
            values[row, j] = math.exp(values[row, j] - shift)
            total += values[row, j]
    return total


LANES = 16


@helper
def _row_max(values, row, n, scale, lanes):
    """The largest of scale values[row, j] for j < n (n >= 1), in LANES running maxima (lanes: scratch of LANES)
    that the loop updates side by side: one running maximum waits out a max's latency at each element, and LLVM
    does not split it into lanes itself (not even with fastmath's no-nan flag, measured). 2.9 times faster on rows
    of 256. A nan is kept or dropped as max(a, b) keeps it; the row's sum of exps is nan either way."""
    top = scale * values[row, 0]
    whole = n - n % LANES
    if whole:
        for lane in range(LANES):
            lanes[lane] = top
        for j in range(0, whole, LANES):
            for lane in range(LANES):
                lanes[lane] = max(lanes[lane], scale * values[row, j + lane])
        for lane in range(LANES):
            top = max(top, lanes[lane])
    for j in range(whole, n):
        top = max(top, scale * values[row, j])
    return top


# ----------------------------------------------------------------------------- causal softmax (causal_softmax.py)
@kernel
def _causal_softmax_forward_rows(scores, out, into_scores, L, parts, own_exp, c):
    """causal_softmax.cu's forward, a row per iteration: query i (the row's place in its (L, S) matrix) sees keys
    0..i; their scaled scores less the largest, exp'd, divided by their sum; the future's probabilities 0. Unlike
    the kernel, only the keys seen are exp'd: half the work for a square matrix. into_scores: out is scores
    itself (each row's scores are read before its probabilities are written)."""
    scale, zero, one = c[0], c[1], c[2]
    rows, S = scores.shape
    for part in prange(parts):
        powers, lanes, inverse = np.empty(S, np.int32), np.empty(LANES, out.dtype), np.empty(1, out.dtype)
        for row in range(part * rows // parts, (part + 1) * rows // parts):
            seen = min(row % L + 1, S)
            top = _row_max(scores, row, seen, scale, lanes)
            if into_scores:                    # one array read and written (Kernel says why)
                for j in range(seen):
                    scores[row, j] = scale * scores[row, j] - top
            else:
                for j in range(seen):
                    out[row, j] = scale * scores[row, j] - top
            # 1 / sum rounded to the data's dtype: with a float64 factor LLVM widened each product to float64 and
            # divided by the sum inside the loop (a third of the kernel's time on rows of 256)
            inverse[0] = one / _exp_in_place(out, row, seen, powers, own_exp, c, zero)
            r = inverse[0]
            for j in range(seen):
                out[row, j] *= r
            for j in range(seen, S):
                out[row, j] = zero


def causal_softmax_forward(scores, scale: float, scores_is_spare: bool = False):
    """Into scores itself when it is spare (a converted copy is). Scores stored by columns take the kernel
    written for them (below)."""
    if _by_columns(scores):
        return _causal_softmax_forward_by_columns(scores, scale, scores_is_spare)
    dtype, (L, S) = scores.dtype, scores.shape[-2:]
    work = working_dtype(dtype)
    z = np.ascontiguousarray(scores, work)
    out = z if scores_is_spare or z is not scores else np.empty_like(z)
    if z.size:
        rows = z.size // S
        _run(_causal_softmax_forward_rows, z.size, z.reshape(rows, S), out.reshape(rows, S), out is z, L,
             _parts(z.size, rows), work == np.float32, _with_exp_constants(work, scale, 0, 1))
    return out.astype(dtype, copy=False)


@kernel
def _causal_softmax_backward_rows(probs, dout, out, into_dout, c):
    """scale p (dp - sum_j p_j dp_j), a row per iteration; into_dout: out is dout itself."""
    zero, scale = c[0], c[2]
    rows, S = probs.shape
    for row in prange(rows):
        dot = zero
        for j in range(S):
            dot += probs[row, j] * dout[row, j]
        if into_dout:                          # one array read and written (Kernel says why)
            for j in range(S):
                dout[row, j] = scale * probs[row, j] * (dout[row, j] - dot)
        else:
            for j in range(S):
                out[row, j] = scale * probs[row, j] * (dout[row, j] - dot)


def causal_softmax_backward(probs, dout, scale: float, dout_is_spare: bool = False):
    if _by_columns(probs) and _by_columns(dout):
        return _causal_softmax_backward_by_columns(probs, dout, scale, dout_is_spare)
    dtype, S = probs.dtype, probs.shape[-1]
    work = working_dtype(dtype)
    p, dp = np.ascontiguousarray(probs, work), np.ascontiguousarray(dout, work)
    out = dp if dout_is_spare or dp is not dout else np.empty_like(dp)
    if p.size:
        _run(_causal_softmax_backward_rows, p.size, p.reshape(-1, S), dp.reshape(-1, S), out.reshape(-1, S),
             out is dp, _constants(work, 0, 1, scale))
    return out.astype(dtype, copy=False)


# Scores stored by columns: attention on this path computes its (L, S) scores as the transpose of k q^T, an (S, L)
# array (causal_softmax.wants_columns), so that each key's scores for all queries lie side by side in memory. Then a
# query's running max and sum are kept in an array of all queries and updated one key at a time: every loop runs
# along memory in vector lanes, and there is no sum across lanes at the end of each short row (the row kernels'
# cost at L = 64, about 100 ns a row). At the recipe's (12, 4, 64, 64) the forward takes 155 us against 300 by
# rows, the backward 52 against 34 (each query's sum, kept in memory, is read and written at every key): about
# 130 us less a layer. Key j is seen by queries i >= j, so those loops start at j, as an unsigned index: numba
# checks a signed index for a negative value, and that check kept LLVM from vectorizing the loops that do not
# start at 0 (2.7 times slower, measured).
def _by_columns(a) -> bool:
    """Is a (..., L, S) the transposed view of a C-contiguous (..., S, L) array (and not also C-contiguous)?"""
    return a.ndim >= 2 and a.swapaxes(-1, -2).flags.c_contiguous and not a.flags.c_contiguous


def _columns(a):
    """The C-contiguous (heads, S, L) view whose transposes a (..., L, S) stored by columns is."""
    return a.swapaxes(-1, -2).reshape(math.prod(a.shape[:-2]), a.shape[-1], a.shape[-2])


def _from_columns(columns, shape: tuple):
    """_columns undone: the (heads, S, L) array as the (..., L, S) `shape` it stores by columns."""
    return columns.reshape(*shape[:-2], shape[-1], shape[-2]).swapaxes(-1, -2)


@kernel
def _causal_softmax_forward_columns(scores, out, into_scores, parts, own_exp, c):
    """_causal_softmax_forward_rows for scores[head, j, i], query i's score for key j: per head, each query's max
    over the keys it sees, then exp and sum key by key, then each query's probabilities times 1 / its sum (rounded
    to the data's dtype, as in the rows kernel); 0 where the query does not see the key."""
    scale, zero, one = c[0], c[1], c[2]
    heads, S, L = scores.shape
    end = np.uint64(L)
    for part in prange(parts):
        top, total, inverse = np.empty(L, out.dtype), np.empty(L), np.empty(L, out.dtype)
        powers = np.empty(L, np.int32)
        two_to_the_k = powers.view(np.float32)
        for head in range(part * heads // parts, (part + 1) * heads // parts):
            for i in range(L):
                top[i], total[i] = -np.inf, 0.0
            for j in range(S):
                for i in range(np.uint64(j), end):
                    top[i] = max(top[i], scale * scores[head, j, i])
            for j in range(S):
                if into_scores:                # one array read and written (Kernel says why)
                    for i in range(np.uint64(j), end):
                        scores[head, j, i] = scale * scores[head, j, i] - top[i]
                else:
                    for i in range(np.uint64(j), end):
                        out[head, j, i] = scale * scores[head, j, i] - top[i]
                if own_exp:
                    for i in range(np.uint64(j), end):
                        out[head, j, i], powers[i] = _exp_parts(out[head, j, i], c)
                    for i in range(np.uint64(j), end):
                        out[head, j, i] *= two_to_the_k[i]
                        total[i] += out[head, j, i]
                else:
                    for i in range(np.uint64(j), end):
                        out[head, j, i] = math.exp(out[head, j, i])
                        total[i] += out[head, j, i]
                for i in range(min(j, L)):
                    out[head, j, i] = zero
            for i in range(L):
                inverse[i] = one / total[i]
            for j in range(S):
                for i in range(np.uint64(j), end):
                    out[head, j, i] *= inverse[i]


def _causal_softmax_forward_by_columns(scores, scale: float, scores_is_spare: bool):
    dtype, work = scores.dtype, working_dtype(scores.dtype)
    z = _columns(scores).astype(work, copy=False)
    out = z if scores_is_spare or dtype != work else np.empty_like(z)     # a converted copy is spare
    if z.size:
        _run(_causal_softmax_forward_columns, z.size, z, out, out is z, _parts(z.size, len(z)), work == np.float32,
             _with_exp_constants(work, scale, 0, 1))
    return _from_columns(out, scores.shape).astype(dtype, copy=False)


@kernel
def _causal_softmax_backward_columns(probs, dout, out, into_dout, parts, c):
    """_causal_softmax_backward_rows for probabilities and their gradients stored by columns: each query's sum of
    p dp added up key by key, in an array of all queries."""
    zero, scale = c[0], c[2]
    heads, S, L = probs.shape
    for part in prange(parts):
        dot = np.empty(L, out.dtype)
        for head in range(part * heads // parts, (part + 1) * heads // parts):
            for i in range(L):
                dot[i] = zero
            for j in range(S):
                for i in range(L):
                    dot[i] += probs[head, j, i] * dout[head, j, i]
            for j in range(S):
                if into_dout:                  # one array read and written (Kernel says why)
                    for i in range(L):
                        dout[head, j, i] = scale * probs[head, j, i] * (dout[head, j, i] - dot[i])
                else:
                    for i in range(L):
                        out[head, j, i] = scale * probs[head, j, i] * (dout[head, j, i] - dot[i])


def _causal_softmax_backward_by_columns(probs, dout, scale: float, dout_is_spare: bool):
    dtype, work = probs.dtype, working_dtype(probs.dtype)
    p, dp = (_columns(a).astype(work, copy=False) for a in (probs, dout))
    out = dp if dout_is_spare or dout.dtype != work else np.empty_like(dp)
    if p.size:
        _run(_causal_softmax_backward_columns, p.size, p, dp, out, out is dp, _parts(p.size, len(p)),
             _constants(work, 0, 1, scale))
    return _from_columns(out, probs.shape).astype(dtype, copy=False)


# ----------------------------------------------------------------------------- cross-entropy (cross_entropy.py)
@kernel
def _cross_entropy_forward_rows(x, targets, ignore_index, losses, lse, parts, own_exp, c):
    """cross_entropy.cu's forward, a row per iteration: lse = top + log(sum exp(x - top)) with top the row's
    largest logit (two passes where the kernel folds them into one, online); loss = lse - x_t, smoothed towards
    lse - mean(x) when the smoothing e is not 0; 0 for an ignored row, nan for a target out of range (the
    caller checks targets first, as on a GPU)."""
    smoothing, zero, one = c[0], c[1], c[2]
    rows, C = x.shape
    for part in prange(parts):
        values, powers, lanes = np.empty((1, C), x.dtype), np.empty(C, np.int32), np.empty(LANES, x.dtype)
        for row in range(part * rows // parts, (part + 1) * rows // parts):
            top, total = _row_max(x, row, C, one, lanes), 0.0   # total: for the mean, in float64 as the exp's sum
            for j in range(C):
                total += x[row, j]
            for j in range(C):
                values[0, j] = x[row, j] - top
            row_lse = top + math.log(_exp_in_place(values, 0, C, powers, own_exp, c, zero))
            lse[row] = row_lse
            t = targets[row]
            if t == ignore_index:
                losses[row] = zero
            elif t < 0 or t >= C:
                losses[row] = math.nan
            elif smoothing != zero:
                losses[row] = (one - smoothing) * (row_lse - x[row, t]) + smoothing * (row_lse - total / C)
            else:
                losses[row] = row_lse - x[row, t]


def cross_entropy_forward(logits, targets, ignore_index: int, smoothing: float):
    """(losses, lse) of (N, C) logits, C >= 1, in runtime.working_dtype (float32 for 16-bit logits, as the
    reference)."""
    n, work = logits.shape[0], working_dtype(logits.dtype)
    x, targets = np.ascontiguousarray(logits, work), np.ascontiguousarray(targets, np.int64)
    losses, lse = np.empty(n, work), np.empty(n, work)
    _run(_cross_entropy_forward_rows, x.size, x, targets, ignore_index, losses, lse, _parts(x.size, n),
         work == np.float32, _with_exp_constants(work, smoothing, 0, 1))
    return losses, lse


@kernel
def _cross_entropy_backward_rows(x, targets, ignore_index, lse, dout, dx, parts, own_exp, c):
    """cross_entropy.cu's backward: dx = (exp(x - lse) - e / C - (1 - e) [j == target]) dloss, 0 dloss for an
    ignored row."""
    smoothing, zero, one = c[0], c[1], c[2]
    rows, C = x.shape
    for part in prange(parts):
        powers = np.empty(C, np.int32)
        for row in range(part * rows // parts, (part + 1) * rows // parts):
            t = targets[row]
            g = zero if t == ignore_index else dout[row]
            uniform, hit = smoothing / C, one - smoothing
            for j in range(C):
                dx[row, j] = x[row, j] - lse[row]
            _exp_in_place(dx, row, C, powers, own_exp, c, zero)
            for j in range(C):
                dx[row, j] = g * (dx[row, j] - uniform - (hit if j == t else zero))


def cross_entropy_backward(logits, targets, lse, dout, ignore_index: int, smoothing: float):
    """dlogits in the logits' dtype, computed in runtime.working_dtype and rounded once."""
    (n, classes), work = logits.shape, working_dtype(logits.dtype)
    x, targets = np.ascontiguousarray(logits, work), np.ascontiguousarray(targets, np.int64)
    lse, dout = np.ascontiguousarray(lse, work), np.ascontiguousarray(dout, work)
    dx = np.empty((n, classes), work)
    if dx.size:
        _run(_cross_entropy_backward_rows, x.size, x, targets, ignore_index, lse, dout, dx, _parts(x.size, n),
             work == np.float32, _with_exp_constants(work, smoothing, 0, 1))
    return dx.astype(logits.dtype, copy=False)


# ----------------------------------------------------------------------------- embedding (embedding_backward.py)
@kernel
def _embedding_backward_columns(ids, dout, dweight, parts):
    """embedding_backward.cu's sums, without its sort: each core takes a stretch of the columns and adds every
    token's row into its id's row, in token order (the reference's order, so the same sums to the bit)."""
    tokens, dim = dout.shape
    for part in prange(parts):
        for t in range(tokens):
            for j in range(part * dim // parts, (part + 1) * dim // parts):
                dweight[ids[t], j] += dout[t, j]


def embedding_backward(ids, dout, n_embeddings: int):
    """16-bit data takes fast_cpu.py's (numba has no 16-bit arithmetic), and so do ids outside 0..n_embeddings-1,
    which F.embedding refuses before: NumPy's IndexError there, where this loop would write outside the table."""
    ids = np.ascontiguousarray(ids, np.int64)
    outside = ids.size and (ids.min() < 0 or ids.max() >= n_embeddings)
    if outside or dout.dtype != working_dtype(dout.dtype):
        return fast_cpu.embedding_backward(ids, dout, n_embeddings)
    dout = np.ascontiguousarray(dout)
    dweight = np.zeros((n_embeddings, dout.shape[1]), dout.dtype)
    _run(_embedding_backward_columns, dout.size, ids, dout, dweight, _parts(dout.size, dout.shape[1]))
    return dweight


# ----------------------------------------------------------------------------- AdamW (adamw.py)
@kernel_in_order
def _adamw_loop(param, grad, exp_avg, exp_avg_sq, c):
    """adamw.cu's update of one element per iteration, in its order: p, m and v in place."""
    step_size, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps, decay, l2 = \
        c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
    for i in prange(param.size):
        g = grad[i] + l2 * param[i] if l2 != 0 else grad[i]          # (0 * inf would be nan)
        m = exp_avg[i] + one_minus_beta1 * (g - exp_avg[i])
        v = beta2 * exp_avg_sq[i] + one_minus_beta2 * g * g
        exp_avg[i], exp_avg_sq[i] = m, v
        param[i] = param[i] * decay - step_size * (m / (math.sqrt(v) / bias_correction2_sqrt + eps))


def adamw_update(param, grad, exp_avg, exp_avg_sq, step_size, beta1, beta2, bias_correction2_sqrt, eps,
                 decay, l2) -> None:
    """The update in place; 16-bit or strided parameters take fast_cpu.py's (numba has no 16-bit arithmetic)."""
    in_place = all(a.flags.c_contiguous for a in (param, exp_avg, exp_avg_sq))
    if param.dtype != working_dtype(param.dtype) or not in_place:
        return fast_cpu.adamw_update(param, grad, exp_avg, exp_avg_sq, step_size, beta1, beta2,
                                     bias_correction2_sqrt, eps, decay, l2)
    _run(_adamw_loop, param.size, param.reshape(-1), np.ascontiguousarray(grad, param.dtype).reshape(-1),
         exp_avg.reshape(-1), exp_avg_sq.reshape(-1),
         _constants(param.dtype, step_size, 1 - beta1, beta2, 1 - beta2, bias_correction2_sqrt, eps, decay, l2))


# ----------------------------------------------------------------------------- clip's norm (multi_tensor.py)
@kernel
def _sum_of_squares_loop(values):
    """The sum of one flat array's squares: each square in the data's dtype (float32's overflows to inf, as the
    reference's does), added up in float64 lanes."""
    total = 0.0
    for i in prange(values.size):
        total += np.float64(values[i] * values[i])
    return total


def sum_of_squares(arrays):
    """multi_tensor.reference_sum_of_squares of C-contiguous float32 arrays, a 0-d float32 array: one pass over
    each, where the reference squares into a new array and then adds it up (the recipe's 27 gradients: 120
    against 307 us), and a float64 sum rounded once, where the reference rounds each array's sum."""
    total = 0.0
    for a in arrays:
        total += _run(_sum_of_squares_loop, a.size, a.reshape(-1))
    with np.errstate(over="ignore"):
        return np.asarray(total, np.float32)


# ----------------------------------------------------------------------------- numba's threads beside BLAS's
# numba's threads (an OpenMP pool, libgomp's on Linux) and OpenBLAS's take turns on the same cores: a product,
# then a kernel, then a product. Each pool's threads spin for a while after their work, waiting for more, and
# while they spin the other pool cannot run (OpenBLAS's spinning: PARALLEL_MIN's comment): on 2 cores a GELU of
# 0.1 ms took 8 ms after a product. So our pool spins briefly (GOMP_SPINCOUNT, read once when libgomp starts, at
# the first parallel loop) and then sleeps: 0.1 ms for that GELU again. The variable is put back at once, so any
# other OpenMP library keeps its own way.
#
# Where MKL multiplies (kernels/mkl_products.py), it runs in these very threads: one pool, which after a product
# is ready for a kernel at once. Then the pool keeps libgomp's own spinning (with GOMP_SPINCOUNT at 1000, each of
# MKL's products waited for its threads to wake: the recipe's step took 36 ms against 27), and kernels share out
# their rows from SHARED_PARALLEL_MIN elements (measured on the recipe's step: 29 to 31 ms against 33 at
# PARALLEL_MIN; 4,096 and 65,536 elements did no better).
SHARED_PARALLEL_MIN = 1 << 14


def _start_threads():
    global PARALLEL_MIN
    one_pool = mkl_products.library() is not None
    if one_pool:
        PARALLEL_MIN = SHARED_PARALLEL_MIN
    saved = os.environ.get("GOMP_SPINCOUNT")
    if not one_pool:
        os.environ.setdefault("GOMP_SPINCOUNT", "1000")
    try:
        one = np.ones(1, np.float32)
        _multiply_into.parallel(one, one, one, False)
    finally:
        if saved is None:
            os.environ.pop("GOMP_SPINCOUNT", None)


_start_threads()
