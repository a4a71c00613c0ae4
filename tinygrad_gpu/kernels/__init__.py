"""Our CUDA kernels for the hot fused ops, each beside the NumPy function that defines it.

One ``.cu`` file per fused op, and a Python file of the same name holding its NumPy
reference (what the ``cpu`` device runs, and what the kernel must agree with) and its
launcher (grid and block for any shape).  Read a ``.cu`` file's opening comment first:
which thread handles which data, how the reduction works, why it is numerically safe.

    cross_entropy.cu       softmax + cross-entropy per row, forward and backward
    layernorm.cu           layer norm forward (saves mean, rstd), backward (dx, dweight, dbias)
    gelu.cu                GELU (tanh approximation), forward and backward
    adamw.cu               one Adam/AdamW step, in place (called by tinygrad_gpu.optim)
    embedding_backward.cu  scatter-add of gradient rows by token id
    causal_softmax.cu      scale + causal mask + softmax of attention, forward and backward
    block_reduce.h         warp and block sums/maxima shared by the row kernels

Where they run (``runtime.py``): ``cuda`` through ``cupy.RawModule``; ``emu`` through the
CPU emulator (``emulator.py`` and ``cuda_emu.h``); ``cpu`` runs the references.  The
autograd Functions that call them live in ``tinygrad_gpu/ops/fused.py``; ``nn.functional``
routes to those.  ``with kernels.fused(False):`` (or ``TINYGRAD_GPU_FUSED=0``) turns the
routing off, so the same ops run as compositions of Tensor ops, for comparison.
"""
from . import adamw, causal_softmax, cross_entropy, embedding_backward, gelu, layernorm
from .adamw import adamw_update
from .runtime import fused, fused_enabled, kernel_files

__all__ = ["adamw", "adamw_update", "causal_softmax", "cross_entropy", "embedding_backward", "fused",
           "fused_enabled", "gelu", "kernel_files", "layernorm"]
