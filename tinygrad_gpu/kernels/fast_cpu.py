"""The fused ops on a CPU, fast: what each kernel's reference computes, with less memory traffic.

Each kernel file's ``reference_*`` functions define a fused op as plain NumPy formulas.
NumPy runs a formula one operation at a time, and each operation over a whole activation
is a trip out to main memory and, for a new result, fresh memory that the operating system
must map in. That traffic, not the arithmetic, is what these ops cost on a CPU. The
functions here give the references' numbers (up to rounding) with three habits:

* in place: a few buffers for a whole formula (``out=``, ``*=``), not a temporary per step;
* in chunks that fit in a core's cache (``by_chunks``), so that only the first read and
  the last write of an elementwise formula go out to memory (the CPU's version of a kernel
  keeping an element in a register);
* sums of short rows as products with a vector of ones (``row_sums``), which BLAS does for
  many rows at once;

and a few shortcuts, each explained where it is taken: GELU's forward keeps its slope for
the backward, the causal softmax skips the row maxima when every score is moderate, and
the embedding's backward sums each id's rows in one run. A ``*_is_spare`` argument says
that an input is an array nobody else holds (``gradient_sums.py``), so the result may be
computed in it.

Only the ``cpu`` device runs these (NumPy arrays). ``tests/test_cpu_kernels.py`` checks each
against its reference, for float16, float32 and float64 and for extreme values.
"""
from __future__ import annotations

import numpy as np

from .runtime import working_dtype

CHUNK = 1 << 16            # elements: four float32 arrays of this size fit in a CPU core's L2 cache


def by_chunks(compute, *arrays, out):
    """Run compute(*pieces, out=piece) over 1-D `arrays` and `out`, CHUNK elements at a time."""
    for start in range(0, out.size, CHUNK):
        piece = slice(start, start + CHUNK)
        compute(*(a[piece] for a in arrays), out=out[piece])
    return out


def row_sums(a):
    """The sum of each row of a (..., n), as a product with a vector of ones: NumPy reduces a short
    row (a few hundred values) element by element, BLAS sums many rows at once (3-6x faster). For
    long rows (a vocabulary of 50,257) NumPy's pairwise sum is the more accurate: keep it there."""
    return a @ np.ones(a.shape[-1], a.dtype)


def column_sums(a):
    """The sum of each column of a (rows, n), as a product with a vector of ones (3x faster, as above)."""
    return np.ones(a.shape[0], a.dtype) @ a


# ----------------------------------------------------------------------------- GELU (gelu.py)
# gelu.py passes in its constants k = sqrt(2 / pi) and c = 0.044715, so that they are written once.
def _tanh_of_argument(x, square, out, k, c):
    """out = t = tanh(k x (1 + c x^2)), given x^2 in `square`."""
    np.multiply(square, k * c, out=out)
    out += k
    out *= x
    return np.tanh(out, out=out)


def _gelu(x, out, k, c):
    """out = 0.5 x (1 + t). For |x| > 1.8e19, x^2 overflows to inf (on purpose: t is then exactly +-1)."""
    with np.errstate(over="ignore"):
        t = _tanh_of_argument(x, np.square(x, out=out), out, k, c)    # square, not x * x: twice as fast
    t += 1
    t *= x
    t *= 0.5


def _gelu_and_slope(x, slope, out, k, c):
    """out = gelu(x) as _gelu rounds it, and slope = gelu'(x) = 0.5 (1 + t) + x b (1 - t^2), with
    b = 0.5 k (1 + 3 c x^2) the slope of the tanh's argument, halved; factored as
    (1 + t) (0.5 + x b (1 - t)), which takes fewer passes than the sum.

    Both take x clipped to +-10 (xc): past that, t is exactly +-1 in float32 and float64 alike, so
    t and the slope (exactly 1 or 0) are what x itself gives, and x b cannot overflow into
    inf * (1 - t) = nan. Only the last product, 0.5 x (1 + t), needs x itself.
    """
    xc = np.clip(x, -10.0, 10.0, out=slope)
    square = np.square(xc)        # a chunk-sized array, which the allocator hands back each chunk
    t = _tanh_of_argument(xc, square, out, k, c)
    square *= 1.5 * k * c
    square += 0.5 * k
    square *= xc                  # x b
    np.subtract(1, t, out=slope)
    square *= slope               # x b (1 - t)
    square += 0.5
    t += 1
    np.multiply(square, t, out=slope)
    t *= x
    t *= 0.5


def gelu_forward(x, k: float, c: float):
    work = working_dtype(x.dtype)
    out = by_chunks(lambda piece, out: _gelu(piece, out, k, c), x.reshape(-1).astype(work, copy=False),
                    out=np.empty(x.size, work))
    return out.reshape(x.shape).astype(x.dtype, copy=False)


def gelu_forward_and_slope(x, k: float, c: float):
    """(gelu(x), gelu'(x)): a training step's forward keeps the slope, and the backward is then one
    multiplication instead of recomputing tanh (7-15% off GELU's two directions, for an array per
    layer kept until the backward). The slope is kept in float32 at least."""
    work = working_dtype(x.dtype)
    slope = np.empty(x.size, work)
    out = by_chunks(lambda piece, slope, out: _gelu_and_slope(piece, slope, out, k, c),
                    x.reshape(-1).astype(work, copy=False), slope, out=np.empty(x.size, work))
    return out.reshape(x.shape).astype(x.dtype, copy=False), slope.reshape(x.shape)


def gelu_backward_from_slope(slope, dout, dtype, dout_is_spare: bool = False):
    """dx = slope dout, in dout's memory when it is spare."""
    dx = np.multiply(slope, dout, out=dout if dout_is_spare and dout.dtype == slope.dtype else None)
    return dx.astype(dtype, copy=False)


# ----------------------------------------------------------------------------- layer norm (layernorm.py)
# In place, with einsum for the sums of products: each (rows, n) temporary that is not made is a
# pass over memory saved, and those passes are what layer norm costs on a CPU.
def layernorm_forward(x, weight, bias, eps: float):
    n, dtype = x.shape[1], x.dtype
    x = x.astype(working_dtype(dtype), copy=False)
    mean = row_sums(x) / n
    out = x - mean[:, None]                                   # centred
    rstd = 1 / np.sqrt(np.einsum("ij,ij->i", out, out) / n + eps)
    out *= rstd[:, None]                                      # xhat: mean 0, variance 1
    out *= weight
    if bias is not None:
        out += bias
    return out.astype(dtype, copy=False), mean.astype(dtype, copy=False), rstd.astype(dtype, copy=False)


def layernorm_backward(x, weight, mean, rstd, dout, need_params: bool = True, dout_is_spare: bool = False,
                       dx_add=None):
    n, dtype = x.shape[1], x.dtype
    work = working_dtype(dtype)
    x, mean, rstd, converted = (a.astype(work, copy=False) for a in (x, mean, rstd, dout))
    spare = dout_is_spare or converted is not dout            # a converted copy is ours to write in
    dout = converted
    xhat = x - mean[:, None]
    xhat *= rstd[:, None]
    dweight = dbias = None
    if need_params:
        dweight, dbias = np.einsum("ij,ij->j", dout, xhat), column_sums(dout)
    g = np.multiply(dout, weight, out=dout if spare else None)     # after the sums over dout above
    mean_g, mean_gx = row_sums(g) / n, np.einsum("ij,ij->i", g, xhat) / n
    xhat *= mean_gx[:, None]                                  # xhat is spent: reuse its memory
    g -= xhat
    g -= mean_g[:, None]
    g *= rstd[:, None]                                        # rstd (g - mean(g) - xhat mean(g xhat))
    if dx_add is not None:
        g += dx_add.astype(work, copy=False)
    return tuple(None if a is None else a.astype(dtype, copy=False) for a in (g, dweight, dbias))


# ----------------------------------------------------------------------------- causal softmax (causal_softmax.py)
_causal_masks = {}


def _causal_mask(L: int, S: int, dtype):
    """(L, S), added to the scores: 0 where query i may see key j, -inf where j > i; made once per shape and
    dtype."""
    key = (L, S, str(dtype))
    if key not in _causal_masks:
        _causal_masks[key] = np.where(np.triu(np.ones((L, S), dtype=bool), k=1), -np.inf, 0).astype(dtype)
    return _causal_masks[key]


def causal_softmax_forward(scores, scale: float, scores_is_spare: bool = False):
    """In one buffer: scores itself when it is spare (a new product of q and k), else a copy."""
    dtype = scores.dtype
    work = working_dtype(dtype)
    z = scores if scores_is_spare and dtype == work else scores.astype(work)
    z *= scale
    # Softmax is unchanged by subtracting any number from a row; the row's max keeps exp from
    # overflowing. When every scaled score is within +-60, exp can neither overflow (e^60 ~ 1e26,
    # room for the sum of many keys) nor turn a whole row into zeros (e^-60 ~ 1e-26), and the two
    # passes that find and subtract each row's max, the costliest here, are skipped: two
    # reductions of the whole array cost less. A nan fails the test, and takes the rows' way.
    moderate = z.size == 0 or bool(z.min() > -60) and bool(z.max() < 60)
    z += _causal_mask(*scores.shape[-2:], work)
    if not moderate:
        z -= z.max(axis=-1, keepdims=True, initial=-np.inf)   # initial=: NumPy's faster path for short rows
    np.exp(z, out=z)
    z *= 1 / row_sums(z)[..., None]                           # one division per row, then products
    return z.astype(dtype, copy=False)


def causal_softmax_backward(probs, dout, scale: float, dout_is_spare: bool = False):
    """scale p (dp - sum_j p_j dp_j), in dout's memory when it is spare."""
    dtype = probs.dtype
    work = working_dtype(dtype)
    probs = probs.astype(work, copy=False)
    dot = np.einsum("...j,...j->...", probs, dout.astype(work, copy=False))[..., None]
    out = dout if dout_is_spare and dout.dtype == work else dout.astype(work)
    out -= dot
    out *= probs
    out *= scale
    return out.astype(dtype, copy=False)


# ----------------------------------------------------------------------------- embedding (embedding_backward.py)
def embedding_backward(ids, dout, n_embeddings: int):
    """Sort the tokens by id, so that each id's rows are one run, and sum every run with one reduceat
    (np.add.at adds row by row: about 4x slower for a batch of 768 tokens)."""
    dweight = np.zeros((n_embeddings, dout.shape[1]), dout.dtype)
    if not len(ids):
        return dweight
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    run_starts = np.flatnonzero(np.concatenate(([True], sorted_ids[1:] != sorted_ids[:-1])))
    dweight[sorted_ids[run_starts]] = np.add.reduceat(dout[order], run_starts, axis=0)
    return dweight


# ----------------------------------------------------------------------------- AdamW (adamw.py)
def adamw_update(param, grad, exp_avg, exp_avg_sq, step_size, beta1, beta2, bias_correction2_sqrt, eps,
                 decay, l2) -> None:
    """The reference's update in its order and rounding, through one work array (no other temporary)."""
    g = grad.astype(param.dtype, copy=False)
    if l2:
        g = g + l2 * param
    param *= decay
    work = np.empty_like(param)                   # an array even for a 0-d param (g - m would be a scalar)
    np.subtract(g, exp_avg, out=work)
    work *= 1 - beta1
    exp_avg += work                               # m += (1 - beta1) (g - m)
    np.multiply(g, 1 - beta2, out=work)
    work *= g
    exp_avg_sq *= beta2
    exp_avg_sq += work                            # v = beta2 v + (1 - beta2) g^2
    np.sqrt(exp_avg_sq, out=work)
    work /= bias_correction2_sqrt
    work += eps
    np.divide(exp_avg, work, out=work)
    work *= step_size
    param -= work                                 # p -= step_size m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
