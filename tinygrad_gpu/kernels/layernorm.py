"""Layer norm: LayerNormRows.composition (ops/fused.py) · reference_* · layernorm.cu (cuda, emu) · *_cpu.py (cpu).

Layer norm over the last dimension: the NumPy reference and the launcher.

``forward(x, weight, bias, eps)`` -> (out, mean, rstd); ``backward(x, weight, mean, rstd,
dout, need_params, need_bias=True)`` -> (dx, dweight, dbias).  x and dout: (rows, n); weight,
bias: (n,), bias may be None (no shift).  x, weight, bias and dout share one dtype, which out,
dx, dweight and dbias have too; mean and rstd are float32 for float32, float16 and bfloat16 data
(float64 for float64).  One mix is taken too, for autocast: float32 data with out (``out_dtype``) and
dout in float16 or bfloat16.

The launchers allocate only what the kernels write: a missing bias, or a dbias nobody wants,
goes to the kernel as a null pointer (None: the emulator's null, and CuPy's from version 14 on,
cupy/cuda/function.pyx ``_pointer``; CuPy 13 passed garbage, cupy issue #9046), never as a
buffer of zeros; dweight and dbias are written, not added to, so they are not zeroed first;
out, mean and rstd are views of one allocation (runtime.empty_together), mean and rstd the two rows of a
(2, rows) array.

The forward has two kernels, a ladder of two rungs: ``version="block"`` (the default, the one every caller
uses: a block of threads per row, block reductions) and ``version="naive"`` (one thread per row, plain loops:
the first rung, slow on purpose, kept for reading and for benchmarks/kernels.py's comparison; layernorm.cu's
comment on it says why it is slow). Both compute the reference's formula and write the same outputs in the
same dtypes; the naive one has no mixed-dtype (``out_dtype``) entry points. The version picks a kernel on emu
and cuda; the cpu's path has one way only.

The backward with the parameters' gradients is one launch (layernorm_backward_fused) where it fits: rows
in groups of GROUP_ROWS_MIN to GROUP_ROWS_MAX, n <= FUSED_MAX_N; its workspace (the groups' column sums) and
ticket are kept per device, grown when a launch needs more, so a training step allocates none of them.
Elsewhere (few rows, long rows, or only dx wanted) it is the plain kernels: layernorm_backward, then
layernorm_backward_params for the parameters' gradients.
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from .. import dtypes
from . import cpu_paths, runtime

FILE = "layernorm.cu"
FUSED_BLOCK = 256          # layernorm.cu's 32 * LN_FUSED_WARPS
FUSED_MAX_N = 1024         # and 32 * LN_FUSED_MAX_PER_LANE: a lane keeps its columns' sums in registers
# Rows per block of the fused backward: as many as keep about TARGET_BLOCKS blocks in the grid (enough to fill
# a GPU of 100-odd SMs several times over: the GPU config's 16384 rows make 512 groups of 32), but at least
# GROUP_ROWS_MIN (2 rows a warp: with fewer, a block's closing work -- its warps' sums through shared memory,
# its row of the workspace, its share of the last block's sum over all groups -- outweighs its rows) and at most
# GROUP_ROWS_MAX (more rows per block, and the grid no longer fills the GPU).  Chosen on paper, untimed on a GPU.
TARGET_BLOCKS = 512
GROUP_ROWS_MIN, GROUP_ROWS_MAX = 16, 64
# Fewer rows than one smallest group: the fused grid would be a single block of partly idle warps that
# does all the work alone, so the pair (one block per row, then the column sums) runs instead.
FUSED_MIN_ROWS = GROUP_ROWS_MIN
FORWARD_VERSIONS = ("block", "naive")     # forward's kernels: the block reduction (the default), one thread per row
NAIVE_BLOCK = 128                         # threads per block of layernorm_forward_naive: 128 rows a block


# ----------------------------------------------------------------------------- reference
def reference_forward(x, weight, bias, eps: float, out_dtype=None):
    """layernorm.cu's forward: mean, variance around the mean, xhat, then scale and shift. Computed in
    runtime.working_dtype (float32 for float16 and bfloat16 data); out is rounded once to out_dtype (by
    default x's), mean and rstd stay in the working dtype, as the kernel saves them."""
    xp, dtype = runtime.array_module_of(x), x.dtype
    x = x.astype(runtime.working_dtype(dtype))
    mean = x.mean(axis=1)
    var = ((x - mean[:, None]) ** 2).mean(axis=1)
    rstd = 1 / xp.sqrt(var + eps)
    out = (x - mean[:, None]) * rstd[:, None] * weight       # a 16-bit weight or bias meets float32: float32
    if bias is not None:
        out = out + bias
    return out.astype(dtype if out_dtype is None else out_dtype), mean, rstd


def reference_backward(x, weight, mean, rstd, dout, need_params: bool = True, dx_add=None):
    """dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dout * weight: the two means remove what
    normalising cancels (a shift and a rescaling); plus dx_add where it is given (a gradient of x from
    elsewhere, summed in). dweight = sum of dout xhat, dbias = sum of dout. Computed in
    runtime.working_dtype (float32 for float16 and bfloat16 data, the sums too), each result rounded
    once to x's dtype (dout may be 16-bit where x is float32: the mixed kernels')."""
    dtype = x.dtype
    x, mean, rstd, dout = (a.astype(runtime.working_dtype(dtype)) for a in (x, mean, rstd, dout))
    xhat = (x - mean[:, None]) * rstd[:, None]
    g = dout * weight
    dx = rstd[:, None] * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    if dx_add is not None:
        dx = dx + dx_add.astype(dx.dtype)
    dweight, dbias = ((dout * xhat).sum(axis=0), dout.sum(axis=0)) if need_params else (None, None)
    return tuple(None if a is None else a.astype(dtype) for a in (dx, dweight, dbias))


def reference_group_sums(x, mean, rstd, dout, rows_per_block: int):
    """What layernorm_backward_fused leaves in its workspace: for each group of rows_per_block rows (the last one
    fewer), the column sums of dout * xhat, then of dout, in float32: shape (2, groups, n). Its dweight and dbias
    are these summed over the groups (reference_backward's numbers, in another order)."""
    xp, (rows, n) = runtime.array_module_of(x), x.shape
    x, mean, rstd, dout = (a.astype(runtime.working_dtype(x.dtype)) for a in (x, mean, rstd, dout))
    groups = -(-rows // rows_per_block)
    terms = xp.zeros((2, groups * rows_per_block, n), np.float32)   # rows past the end add nothing
    terms[0, :rows], terms[1, :rows] = dout * ((x - mean[:, None]) * rstd[:, None]), dout
    return terms.reshape(2, groups, rows_per_block, n).sum(axis=2)


# ----------------------------------------------------------------------------- the fused backward's workspace
class _Workspace:
    """What layernorm_backward_fused needs beside its arrays: the groups' column sums (float32, written by
    every launch before they are read: never zeroed) and the ticket counter (0 between launches)."""

    def __init__(self, device: str):
        self.device, self.xp = device, devices.array_module(device)
        with devices.use(device):
            self.partials = self.xp.empty(0, np.float32)
            self.ticket = self.xp.zeros((), np.uint32)

    def partials_for(self, count: int):
        """At least `count` floats of partial sums: the cached buffer, replaced by a larger one when too small
        (the launches before it, on the same stream, are done with the old one before the next one runs)."""
        if self.partials.size < count:
            with devices.use(self.device):
                self.partials = self.xp.empty(count, np.float32)
        return self.partials


def _workspace(device: str) -> _Workspace:
    return runtime.kept_per_device(_Workspace, device)


def group_rows(rows: int) -> int:
    """Rows per block of the fused backward for `rows` rows (see TARGET_BLOCKS)."""
    return min(GROUP_ROWS_MAX, max(GROUP_ROWS_MIN, -(-rows // TARGET_BLOCKS)))


def use_fused(rows: int, n: int, need_params: bool) -> bool:
    """Does backward make one launch (layernorm_backward_fused) rather than the pair?"""
    return need_params and rows >= FUSED_MIN_ROWS and 1 <= n <= FUSED_MAX_N


# ----------------------------------------------------------------------------- launcher
def forward(x, weight, bias, eps: float, device: str, out_dtype=None, version: str = "block"):
    """out_dtype: out's, by default x's; float16 or bfloat16 for float32 x, weight and bias (the mixed kernels:
    computed as for float32, out rounded once). version: which kernel runs on emu and cuda, "block" (one block
    per row) or "naive" (one thread per row; not with a mixed out_dtype); checked on every device."""
    out_dtype = x.dtype if out_dtype is None else np.dtype(out_dtype)
    if out_dtype != x.dtype and not (x.dtype == np.float32 and dtypes.is_half(out_dtype)):
        raise ValueError(f"layernorm.forward: {x.dtype} data gives {x.dtype}, or float32 a 16-bit out, not {out_dtype}")
    if version not in FORWARD_VERSIONS:
        raise ValueError(f"layernorm.forward: version must be one of {', '.join(map(repr, FORWARD_VERSIONS))}, "
                         f"not {version!r}")
    if version == "naive" and out_dtype != x.dtype:
        raise ValueError(f"layernorm.forward: the naive kernel writes out in x's dtype ({x.dtype}), not {out_dtype}; "
                         f"use version='block' for a mixed out_dtype")
    cpu = cpu_paths.cpu_kernels(device, x, weight, bias)
    if cpu:
        out, mean, rstd = cpu.layernorm_forward(x, weight, bias, eps)
        return out.astype(out_dtype, copy=False), mean, rstd
    if not runtime.use_kernel(device, x, weight, bias, half=True):
        return reference_forward(x, weight, bias, eps, out_dtype)
    xp, dtype = devices.array_module(device), x.dtype
    rows, n = x.shape
    x, weight = runtime.contiguous(xp, x), runtime.contiguous(xp, weight)
    bias = None if bias is None else runtime.contiguous(xp, bias)      # None: a null pointer, nothing added
    # out and the statistics in one allocation. They die together where out feeds a product, as in a GPT: the
    # product keeps out for its backward, which runs just before this one's, the last to read the statistics.
    # Elsewhere out's memory stays until this backward.
    out, statistics = runtime.empty_together(xp, ((rows, n), out_dtype), ((2, rows), np.float32))
    mean, rstd = statistics[0], statistics[1]                           # two contiguous rows
    if version == "naive":                                              # one thread per row
        if rows:
            runtime.launch(device, FILE, runtime.entry_point("layernorm_forward_naive", dtype),
                           (-(-rows // NAIVE_BLOCK),), (NAIVE_BLOCK,),
                           [x, weight, bias, out, mean, rstd, np.int32(rows), np.int32(n), np.float32(eps)])
        return out, mean, rstd
    kernel = runtime.entry_point("layernorm_forward", dtype) if out_dtype == dtype else \
        runtime.entry_point("layernorm_forward_to", out_dtype)
    if rows:                                                            # one block per row
        runtime.launch(device, FILE, kernel, (rows,), (runtime.row_block(n),),
                       [x, weight, bias, out, mean, rstd, np.int32(n), np.float32(eps)])
    return out, mean, rstd


def _kernel_dtypes(device: str, x, weight, dout) -> bool:
    """Do these take a backward kernel: one dtype of the kernels' (x's), or float32 with a 16-bit dout?"""
    if dout is not None and dout.dtype != x.dtype and x.dtype == np.float32 and dtypes.is_half(dout.dtype):
        return runtime.use_kernel(device, x, weight)
    return runtime.use_kernel(device, x, weight, dout, half=True)


def _entry(kernel: str, x, dout) -> str:
    """kernel's entry point for x's dtype, or its _from_f16 / _from_bf16 one for a 16-bit dout of float32 x."""
    return runtime.entry_point(kernel, x.dtype) if dout.dtype == x.dtype else \
        runtime.entry_point(kernel + "_from", dout.dtype)


def adds_in_kernel(device: str, x, weight, dout) -> bool:
    """Does backward run a kernel for these arrays that adds dx_add on the way out (the cpu's compiled or NumPy
    path, or the kernels)? Elsewhere (the reference) a caller lets the engine sum the gradients, as it would
    anyway."""
    return cpu_paths.cpu_kernels(device, x, weight, dout) is not None or _kernel_dtypes(device, x, weight, dout)


def backward(x, weight, mean, rstd, dout, need_params: bool, device: str, dout_is_spare: bool = False,
             need_bias: bool = True, dx_add=None, fused=None, params_into=(None, None), dx_add_is_spare: bool = False):
    """dout_is_spare: nobody else holds dout, and dx may be computed in it (on the cpu, by the compiled and the NumPy
    paths; on emu and cuda by the kernels that may, see layernorm.cu).
    need_bias=False (no bias, or its gradient is not wanted): dbias is None, and the kernel stores none (a null
    pointer). dx_add
    (rows, n) of x's dtype, or None: returned dx is dx + dx_add (see adds_in_kernel); dx_add_is_spare: nobody
    else holds dx_add, and dx is written over it where it is not written over dout. fused: on emu and
    cuda, True or False forces the one-launch kernel or the pair (tests; True still needs need_params and
    0 < n <= FUSED_MAX_N); None lets use_fused choose. params_into: (dweight, dbias) arrays of (n,) to write the
    parameters' gradients into, or None for new ones (where adds_in_kernel; the cpu copies them in)."""
    if dx_add is not None and not adds_in_kernel(device, x, weight, dout):
        dx, dweight, dbias = backward(x, weight, mean, rstd, dout, need_params, device, dout_is_spare, need_bias)
        return dx + dx_add, dweight, dbias
    if device == "cpu" and x.dtype == np.float32 and dtypes.is_half(dout.dtype):
        dout, dout_is_spare = dout.astype(np.float32), True    # the cpu's float32 way, on a new (spare) array
    cpu = cpu_paths.cpu_kernels(device, x, weight, dout)
    if cpu:
        if dx_add is not None and np.may_share_memory(dx_add, dout):    # dx may be written over dout first
            dx_add = dx_add.copy()
        dx, dweight, dbias = cpu.layernorm_backward(x, weight, mean, rstd, dout, need_params, dout_is_spare, dx_add)
        if params_into[0] is not None:                  # the engine's place for it: copied in (n values)
            params_into[0][...] = dweight
            dweight = params_into[0]
        if need_bias and params_into[1] is not None:
            params_into[1][...] = dbias
            dbias = params_into[1]
        return dx, dweight, (dbias if need_bias else None)
    if not _kernel_dtypes(device, x, weight, dout):
        dx, dweight, dbias = reference_backward(x, weight, mean, rstd, dout, need_params)
        return dx, dweight, (dbias if need_bias else None)
    xp, dtype = devices.array_module(device), x.dtype
    rows, n = x.shape
    x, weight, dout = (runtime.contiguous(xp, a) for a in (x, weight, dout))
    dx_add = None if dx_add is None else runtime.contiguous(xp, dx_add)
    if fused is None:
        fused = use_fused(rows, n, need_params)
    elif fused and not (need_params and rows and 1 <= n <= FUSED_MAX_N):
        raise ValueError(f"layernorm.backward: the fused kernel computes the parameters' gradients of 1 or more "
                         f"rows of 1 to {FUSED_MAX_N} values, not need_params={need_params} for {rows} rows of {n}")
    # dx written over a spare dout (a copy made by contiguous() is spare too), unless the plain pair's second
    # kernel must read dout after the first has written dx; else over a spare dx_add (a 16-bit dout cannot
    # hold float32 dx: a layer norm that feeds products, under autocast), which no kernel reads again
    if dout_is_spare and dout.dtype == dtype and (fused or not need_params):
        dx = dout
    elif dx_add is not None and dx_add_is_spare:
        dx = dx_add
    else:
        dx = xp.empty((rows, n), dtype)

    def parameters_gradients():                          # the kernel writes them: new arrays, or the places given
        dweight = xp.empty(n, dtype) if params_into[0] is None else params_into[0]
        return dweight, ((xp.empty(n, dtype) if params_into[1] is None else params_into[1]) if need_bias else None)
    if fused:
        dweight, dbias = parameters_gradients()
        per_block = group_rows(rows)
        blocks = -(-rows // per_block)
        work = _workspace(device)
        runtime.launch(device, FILE, _entry("layernorm_backward_fused", x, dout), (blocks,), (FUSED_BLOCK,),
                       [x, weight, mean, rstd, dout, dx_add, dx, dweight, dbias, work.partials_for(2 * blocks * n),
                        work.ticket, np.int32(rows), np.int32(n), np.int32(per_block)])
        return dx, dweight, dbias
    if rows:
        runtime.launch(device, FILE, _entry("layernorm_backward", x, dout), (rows,), (runtime.row_block(n),),
                       [x, weight, mean, rstd, dout, dx_add, dx, np.int32(n)])
    if not need_params:
        return dx, None, None
    dweight, dbias = parameters_gradients()
    if not rows:                                         # no rows: sums of nothing, and no launch to write them
        for gradient in (dweight, dbias):
            if gradient is not None:
                gradient[...] = 0
        return dx, dweight, dbias
    if n:
        runtime.launch(device, FILE, _entry("layernorm_backward_params", x, dout), (-(-n // 32),), (32, 8),
                       [x, mean, rstd, dout, dweight, dbias, np.int32(rows), np.int32(n)])
    return dx, dweight, dbias
