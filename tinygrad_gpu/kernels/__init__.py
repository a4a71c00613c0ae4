"""Our CUDA kernels for the hot fused ops, each beside the NumPy function that defines it.

One ``.cu`` file per fused op, and a Python file of the same name holding its NumPy
reference (the definition of what the kernel must compute, written as the formulas of the
``.cu`` file's opening comment) and its launcher (grid and block for any shape).  Read a
``.cu`` file's opening comment first: which thread handles which data, how the reduction
works, why it is numerically safe.

    cross_entropy.cu       softmax + cross-entropy per row, forward and backward
    layernorm.cu           layer norm forward (saves mean, rstd), backward (dx, dweight, dbias); a naive forward beside
                           the block one, one thread per row (the launcher's version="naive")
    gelu.cu                GELU (tanh approximation), forward and backward
    adamw.cu               one Adam/AdamW step, in place, or none after an overflow (called by tinygrad_gpu.optim)
    grad_scaler.cu         loss scaling: unscale a gradient, finding inf/nan; update the scale (amp.GradScaler)
    embedding_backward.cu  scatter-add of gradient rows by token id
    causal_softmax.cu      scale + causal mask + softmax of attention, forward and backward
    causal_attention.cu    causal attention tile by tile (online softmax, dropout drawn inside), forward and backward
    dropout.cu             dropout's multiply, its mask drawn in the kernel (Philox) in both directions
    multi_tensor.cu        one launch for a list of tensors: global grad norm + clip coefficient, scale, Adam/AdamW,
                           float32 <-> 16-bit casts
    index_check.cu         are all indices in range? one flag on the GPU (deferred_checks.check_range)
    philox.cu              counter-based random numbers (Philox4x32-10): uniform and normal float32 draws
    block_reduce.h         warp and block sums/maxima shared by the row kernels
    adamw.h                one element of an Adam/AdamW step, shared by adamw.cu and multi_tensor.cu
    philox.h               the Philox4x32-10 rounds, shared by philox.cu and the kernels that draw numbers
    half_precision.h       loads and stores of float16 and bfloat16 as float32, for the kernels' 16-bit entry points

Where they run (``runtime.py``): ``cuda`` through ``cupy.RawModule``; ``emu`` through the
CPU emulator (``emulator.py`` and ``cuda_emu.h``); ``cpu`` runs ``compiled_cpu.py`` (numba)
when numba is installed, else ``fast_cpu.py`` (NumPy): the same numbers as the references
with less memory traffic (``cpu_paths.py`` says which, and how to force one); causal attention's
there is ``compiled_attention.py``, numba's loop around MKL's products, where MKL is installed too.  The autograd Functions that call them
live in ``tinygrad_gpu/ops/fused.py``; ``nn.functional`` routes to those.  ``with
kernels.fused(False):`` (or ``TINYGRAD_GPU_FUSED=0``) turns the routing off, so the same ops
run as compositions of Tensor ops, for comparison.

Each fused op is defined four times, and each module's docstring opens by saying where: its
``composition`` in ``ops/fused.py`` (Tensor ops: what ``create_graph=True`` differentiates, and what
``kernels.fused(False)`` runs); the ``reference_*`` functions in its ``.py`` here (NumPy formulas, the
definition of correct: the cpu runs them with ``TINYGRAD_GPU_CPU_KERNELS=reference``); the ``.cu`` kernel
(``cuda`` and ``emu``); and its cpu versions in ``compiled_cpu.py`` (``compiled_attention.py``) and
``fast_cpu.py``.

A launcher argument ``<array>_is_spare=True`` (``dout_is_spare``, ``x_is_spare``, ...) says that nobody
else holds that array, so the result may be written into it (``gradient_sums.py`` explains spare arrays);
a backward launcher's incoming gradient is always ``dout``.

The kernel modules load on first use (``kernels.gelu`` imports ``gelu.py`` when it is first
named), so that ``import tinygrad_gpu`` stays quick and compiles nothing.
"""
import importlib

from .runtime import fused, fused_enabled, kernel_files

_MODULES = ("adamw", "causal_softmax", "cross_entropy", "embedding_backward", "emulator", "fast_cpu", "gelu",
            "grad_scaler", "layernorm", "philox", "dropout", "causal_attention",
            "multi_tensor", "index_check", "cpu_paths", "mkl_products")

__all__ = ["fused", "fused_enabled", "kernel_files", *_MODULES]


def __getattr__(name):
    """kernels.gelu and the like: the submodule, imported the first time it is asked for."""
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
