"""The cpu's products through Intel MKL (the `mkl` extra), in the same threads as numba's kernels.

NumPy multiplies with the OpenBLAS it ships, and OpenBLAS keeps a pool of threads of its own: after each
product they spin for about 0.1 s, waiting for the next, so numba's kernels (another pool, GNU OpenMP's)
find the other cores busy and stay on one (compiled_cpu.PARALLEL_MIN). MKL can run in GNU OpenMP's threads
themselves (its "GNU" threading layer, on libgomp): then products and kernels take turns in one pool, and
kernels share out their rows from compiled_cpu.SHARED_PARALLEL_MIN elements. On Intel CPUs MKL also
multiplies faster at our sizes. Measured on a 2-core Intel Xeon (AVX-512), the CPU recipe's step took 29 to
31 ms against 33 to 34 with OpenBLAS: 33 with MKL's products alone, the rest from kernels on both cores; and
nanoGPT's GPU config's 12 to 17% less (its attention's 384 products of 256 x 256 at a time: one call shared
out over the cores, where NumPy makes one threaded call per matrix). README, "Benchmarks", has more.

MKL is a large download (229 MB, 685 MB installed) and fastest on Intel's CPUs, so it is an extra, not a
dependency. Without it, without libgomp, away from Linux, or with ``TINYGRAD_GPU_CPU_BLAS=numpy``,
``multiply`` returns None and the caller multiplies with NumPy (ops/linalg.py's ``product``). The choice is
made once, at the first product or compiled kernel: OpenMP's threads cannot change libraries afterwards.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import math
import os
import site
import sys

import numpy as np

CPU_BLAS = "TINYGRAD_GPU_CPU_BLAS"        # mkl (the default where it is installed) or numpy
CPU_BLASES = ("mkl", "numpy")

# mkl_service.h's values
ROW_MAJOR, NO_TRANSPOSE, TRANSPOSE = 101, 111, 112
THREADING_GNU, INTERFACE_LP64 = 3, 0
LARGEST_INT = 2 ** 31 - 1                 # LP64: MKL's sizes and strides are 32-bit ints
# Products of fewer multiply-adds NumPy does: a call to MKL costs about 10 us (5 in ctypes and MKL, 5 in this
# file), NumPy's 1 (32 x 64 by 64 x 64: 12.1 against 2.4 us; a 1-layer GPT of width 32 took 2.0 ms a step with
# every product by MKL, 1.5 with this threshold, 1.4 on NumPy's BLAS). Below this size OpenBLAS multiplies on
# the calling thread, so its pool of threads is not woken.
NUMPY_BELOW = 1 << 18


def chosen() -> str:
    """$TINYGRAD_GPU_CPU_BLAS, checked: "mkl" (where it can be loaded), "numpy", or "" (unset: MKL if installed)."""
    value = os.environ.get(CPU_BLAS, "")
    if value and value not in CPU_BLASES:
        raise ValueError(f"{CPU_BLAS}={value!r}: say one of {', '.join(CPU_BLASES)}, or leave it unset")
    return value


def library_path():
    """MKL's single dynamic library, libmkl_rt: where pip's `mkl` wheel puts it (the environment's lib folder, or
    the user's), else wherever the system's loader finds it."""
    for prefix in (sys.prefix, site.getuserbase()):
        found = sorted(glob.glob(os.path.join(prefix, "lib", "libmkl_rt.so*")))
        if found:
            return found[-1]
    return ctypes.util.find_library("mkl_rt")


class _Mkl:
    """libmkl_rt's functions that we call, with their argument types: a (batch of) float32 or float64 product."""

    def __init__(self, lib):
        at, i = ctypes.c_void_p, ctypes.c_int
        self.gemm, self.gemm_batch = {}, {}
        for dtype, letter, number in ((np.dtype(np.float32), "s", ctypes.c_float),
                                      (np.dtype(np.float64), "d", ctypes.c_double)):
            gemm = getattr(lib, f"cblas_{letter}gemm")
            gemm.argtypes = [i, i, i, i, i, i, number, at, i, at, i, number, at, i]
            gemm.restype = None
            batch = getattr(lib, f"cblas_{letter}gemm_batch")      # every argument an array (one group of them)
            batch.argtypes = [i] + [at] * 13 + [i, at]
            batch.restype = None
            self.gemm[dtype], self.gemm_batch[dtype] = gemm, batch
        # MKL's JIT: machine code for one product of fixed sizes, strides and alpha (beta 0), made once and called
        # as kernel(jitter, a, b, c) with three addresses: no argument checks, no threads (compiled_attention.py)
        self.jit_create = lib.mkl_cblas_jit_create_sgemm
        self.jit_create.argtypes = [ctypes.POINTER(at), i, i, i, i, i, i, ctypes.c_float, i, i, ctypes.c_float, i]
        self.jit_create.restype = i
        self.jit_kernel = lib.mkl_jit_get_sgemm_ptr
        self.jit_kernel.argtypes, self.jit_kernel.restype = [at], at


@functools.lru_cache(maxsize=None)
def library():
    """The loaded MKL, set to run in libgomp's threads, or None where products stay NumPy's (see the module's
    docstring). libgomp is loaded first, with its symbols global, so that MKL's GNU layer and numba's OpenMP
    pool find the one copy."""
    if chosen() == "numpy":
        return None
    path = library_path() if sys.platform.startswith("linux") else None
    if path is None:
        if chosen() == "mkl":
            raise RuntimeError(f"{CPU_BLAS}=mkl, but MKL is not installed: pip install mkl (Linux on x86-64), "
                               "or choose numpy")
        return None
    try:
        ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL)
        lib = ctypes.CDLL(path)
        if lib.MKL_Set_Threading_Layer(THREADING_GNU) != THREADING_GNU or \
                lib.MKL_Set_Interface_Layer(INTERFACE_LP64) != INTERFACE_LP64:
            return None
        return _Mkl(lib)
    except (OSError, AttributeError):
        if chosen() == "mkl":
            raise
        return None


def _operand(x):
    """(x or a contiguous copy of it, MKL's transpose flag for it, its leading dimension): the last two axes of
    x read as a row-major matrix (NO_TRANSPOSE) or as the transpose of one (TRANSPOSE, a matrix stored by
    columns, such as w.T), whatever the strides of the batch axes (the pointers to each matrix are bytes)."""
    (rows, cols), (step_row, step_col), item = x.shape[-2:], x.strides[-2:], x.itemsize
    if step_col == item and max(1, cols) * item <= step_row <= LARGEST_INT * item and step_row % item == 0:
        return x, NO_TRANSPOSE, step_row // item
    if step_row == item and max(1, rows) * item <= step_col <= LARGEST_INT * item and step_col % item == 0:
        return x, TRANSPOSE, step_col // item
    return np.ascontiguousarray(x), NO_TRANSPOSE, max(1, cols)


def _addresses(x, batch: tuple):
    """The address of each matrix of x (..., r, c) in the batch `batch` (x's own batch axes broadcast to it), in
    C order, as uint64: the pointer arrays of MKL's batched product."""
    strides = np.broadcast_to(x, batch + x.shape[-2:]).strides[:-2]
    offsets = np.zeros((), np.int64)
    for size, stride in zip(batch, strides):
        offsets = np.add.outer(offsets, np.arange(size, dtype=np.int64) * stride)
    return (offsets.reshape(-1) + x.ctypes.data).astype(np.uint64)


def _multiply_matrices(gemm, a, b, out):
    """multiply's work for two matrices (Linear's products, a few each layer): the same checks and call, without
    the batch's bookkeeping, which took most of the 9 us a call cost above MKL's own 2 us."""
    (m, k), n, dtype = a.shape, b.shape[1], a.dtype
    if min(m, n, k) == 0 or max(m, n, k) > LARGEST_INT or m * n * k < NUMPY_BELOW:
        return None
    if out is None:
        out, step = np.empty((m, n), dtype), max(1, n)
    else:
        item, (step_row, step_col) = dtype.itemsize, out.strides
        if out.shape != (m, n) or out.dtype != dtype or step_col != item or step_row % item \
                or not n * item <= step_row <= LARGEST_INT * item or np.may_share_memory(out, a) \
                or np.may_share_memory(out, b):
            return None
        step = step_row // item
    (a, flag_a, lead_a), (b, flag_b, lead_b) = _operand(a), _operand(b)
    gemm(ROW_MAJOR, flag_a, flag_b, m, n, k, 1.0, a.ctypes.data, lead_a, b.ctypes.data, lead_b, 0.0, out.ctypes.data,
         step)
    return out


def multiply(a, b, out=None):
    """a @ b by MKL, into `out` if given, for two float32 or two float64 NumPy arrays of at least 2 dimensions
    (leading axes broadcast): what NumPy's matmul returns, up to the order of each sum. None where MKL is not in
    use or does not take these arrays (other dtypes, empty matrices, products under NUMPY_BELOW multiply-adds,
    sizes beyond 32-bit ints, an `out` that is not row-major or overlaps an input): then the caller multiplies
    with NumPy."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.ndim < 2 or b.ndim < 2:
        return None
    mkl = library()
    if mkl is None:
        return None
    dtype = a.dtype
    if dtype != b.dtype or dtype not in mkl.gemm:
        return None
    if a.ndim == b.ndim == 2:
        return _multiply_matrices(mkl.gemm[dtype], a, b, out)
    (m, k), n = a.shape[-2:], b.shape[-1]
    if 0 in (m, n, k) or max(m, n, k) > LARGEST_INT:
        return None
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if out is None:
        out = np.empty((*batch, m, n), dtype)
    elif out.shape != (*batch, m, n) or out.dtype != dtype or np.may_share_memory(out, a) \
            or np.may_share_memory(out, b):
        return None
    count = math.prod(batch)
    if count == 0:                            # nothing to multiply (and NumPy gives an empty array 0 strides)
        return out
    if count * m * n * k < NUMPY_BELOW:
        return None
    step = out.strides[-2] // dtype.itemsize
    if out.strides[-1] != dtype.itemsize or out.strides[-2] % dtype.itemsize or not n <= step <= LARGEST_INT:
        return None
    (a, flag_a, lead_a), (b, flag_b, lead_b) = _operand(a), _operand(b)
    if not batch:
        mkl.gemm[dtype](ROW_MAJOR, flag_a, flag_b, m, n, k, 1.0, a.ctypes.data, lead_a, b.ctypes.data, lead_b, 0.0,
                        out.ctypes.data, step)
        return out
    if count > LARGEST_INT:
        return None
    # one group of `count` products: each argument of the group an array of one value, each matrix an address
    sizes = np.array([flag_a, flag_b, m, n, k, lead_a, lead_b, step, count], np.int32)
    scalars = np.array([1, 0], dtype)
    pointers = [_addresses(x, batch) for x in (a, b, out)]
    size_at = [sizes.ctypes.data + i * sizes.itemsize for i in range(len(sizes))]
    mkl.gemm_batch[dtype](ROW_MAJOR, *size_at[:5], scalars.ctypes.data, pointers[0].ctypes.data, size_at[5],
                          pointers[1].ctypes.data, size_at[6], scalars.ctypes.data + dtype.itemsize,
                          pointers[2].ctypes.data, size_at[7], 1, size_at[8])
    return out


JIT_FAILED = 2                            # mkl_cblas_jit_create_sgemm's MKL_JIT_ERROR (1, MKL_NO_JIT, still works)


@functools.lru_cache(maxsize=None)
def small_product(transpose_a: bool, transpose_b: bool, m: int, n: int, k: int, alpha: float, lead_a: int,
                  lead_b: int, lead_c: int):
    """(kernel, jitter), two addresses (ints): MKL's JIT-compiled float32 product c = alpha op(a) op(b), op(a)
    (m, k), op(b) (k, n), all row-major with these leading dimensions, c overwritten; the machine code at `kernel`
    is a C function called as kernel(jitter, a, b, c) with the three matrices' addresses (compiled_attention calls
    it from numba). Made once per set of arguments and kept for the process (attention makes about two dozen for
    a layout of q, k, v). None where MKL is not in use or cannot make it."""
    mkl = library()
    if mkl is None:
        return None
    jitter = ctypes.c_void_p()
    flag = {False: NO_TRANSPOSE, True: TRANSPOSE}
    status = mkl.jit_create(ctypes.byref(jitter), ROW_MAJOR, flag[transpose_a], flag[transpose_b], m, n, k, alpha,
                            lead_a, lead_b, 0.0, lead_c)
    if status == JIT_FAILED or not jitter.value:
        return None
    return mkl.jit_kernel(jitter), jitter.value
