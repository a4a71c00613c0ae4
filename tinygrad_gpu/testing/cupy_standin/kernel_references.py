"""Our kernels' NumPy references, in the kernels' calling convention: a fast stand-in for the emulator.

On the CuPy stand-in a ``RawKernel`` launch normally runs the real ``.cu`` kernel through the CPU
emulator (``tinygrad_gpu/kernels/emulator.py``).  That is right but slow: a training step of
nanoGPT's GPU config takes minutes.  For large runs on the stand-in (``benchmarks/gpu_readiness.py``
on the GPU config, where what is measured is the Python side: syncs, transfers, launches), set
``TINYGRAD_GPU_STANDIN_KERNELS=reference`` and each launch runs the kernel's NumPy reference instead
(``reference*`` in the ``.py`` beside each ``.cu``).  Nothing is lost in what the kernels compute:
tests/test_kernels.py proves each kernel against these same references on the ``emu`` device, and
tests/test_standin_kernel_references.py proves each adapter here against the emulated kernel.

``BY_KERNEL[name](grid, block, args)`` takes a launch as the kernel gets it: ``args`` the NumPy
arrays (the flat, C-contiguous buffers, shaped as the launcher made them) and NumPy scalars in the
kernel's parameter order.  It writes the kernel's outputs into the output arrays, in place, as the
kernel does, including what a backward kernel reads later (a forward's mean, rstd or lse), and
leaves alone what the kernel leaves alone.  grid and block do not matter: every kernel computes
the same whatever its launch shape.  A kernel's float16 and bfloat16 entry points (``NAME_f16``,
``NAME_bf16``) share its adapter: the references compute 16-bit data in float32 and round once to
the output arrays' dtypes, as the kernels do.
"""
from __future__ import annotations

import numpy as np

from ...kernels import adamw, causal_softmax, cross_entropy, embedding_backward, gelu, grad_scaler, layernorm, philox


def _flat(a, n):
    """The first n elements of a's buffer, as a view (writing to it writes a)."""
    return a.reshape(-1)[:int(n)]


def _rows(a, n):
    """a's buffer as rows of n values, as a view."""
    return a.reshape(-1, int(n))


# ----------------------------------------------------------------------------- adamw.cu
def _adamw_update(grid, block, args):
    param, grad, exp_avg, exp_avg_sq, n, step_size, one_minus_beta1, _beta2, one_minus_beta2, bc2_sqrt, eps, decay, \
        l2 = args
    # The reference takes beta and computes 1 - beta; the kernel gets 1 - beta rounded once to float32.
    # Giving the reference 1 - (1 - beta) (exact in Python floats) makes its 1 - beta the kernel's exactly.
    # Python floats, so that NumPy computes in float32 as the kernel does.
    adamw.reference_update(*(_flat(a, n) for a in (param, grad, exp_avg, exp_avg_sq)), float(step_size),
                           1 - float(one_minus_beta1), 1 - float(one_minus_beta2), float(bc2_sqrt), float(eps),
                           float(decay), float(l2))


def _adamw_count_step(grid, block, args):
    step, found_inf = args
    adamw.reference_count_step(step, found_inf)


def _adamw_update_skippable(grid, block, args):
    param, grad, exp_avg, exp_avg_sq, n, step, found_inf, lr, beta1, beta2, eps, decay, l2 = args
    # lr, beta1 and beta2 arrive as the doubles the kernel gets; the reference rounds 1 - beta as the kernel does.
    adamw.reference_update_skippable(*(_flat(a, n) for a in (param, grad, exp_avg, exp_avg_sq)), step, found_inf,
                                     float(lr), float(beta1), float(beta2), float(eps), float(decay), float(l2))


# ----------------------------------------------------------------------------- causal_softmax.cu
def _causal_softmax_forward(grid, block, args):
    scores, probs, L, S, scale = args
    L, S = int(L), int(S)
    probs.reshape(-1, L, S)[...] = causal_softmax.reference_forward(scores.reshape(-1, L, S), float(scale))


def _causal_softmax_backward(grid, block, args):
    probs, dprobs, dscores, L, S, scale = args
    L, S = int(L), int(S)
    # The kernel never reads the masked columns (above the diagonal) and writes 0 there: zero them.
    future = causal_softmax.future_mask(np, L, S)
    y, dy = (np.where(future, np.float32(0), a.reshape(-1, L, S)) for a in (probs, dprobs))
    dscores.reshape(-1, L, S)[...] = causal_softmax.reference_backward(y, dy, float(scale))


# ----------------------------------------------------------------------------- cross_entropy.cu
def _out_of_range(targets, n_classes, ignore_index):
    """Targets the kernel cannot use (Python reports them later, deferred_checks.py): its loss is NaN there."""
    return (targets != ignore_index) & ((targets < 0) | (targets >= n_classes))


def _cross_entropy_forward(grid, block, args):
    logits, targets, losses, lse, n_classes, ignore_index, smoothing = args
    bad = _out_of_range(targets, n_classes, ignore_index)
    loss, lse[...] = cross_entropy.reference_forward(_rows(logits, n_classes), np.where(bad, ignore_index, targets),
                                                     int(ignore_index), float(smoothing))
    losses[...] = np.where(bad, np.float32(np.nan), loss)


def _cross_entropy_backward(grid, block, args):
    logits, targets, lse, dlosses, dlogits, n_classes, ignore_index, smoothing = args
    _rows(dlogits, n_classes)[...] = cross_entropy.reference_backward(_rows(logits, n_classes), targets, lse, dlosses,
                                                                      int(ignore_index), float(smoothing))


# ----------------------------------------------------------------------------- embedding_backward.cu
def _embedding_backward(grid, block, args):
    ids, _order, dout, dweight, dim, _tokens, n_embeddings = args
    ids = ids.reshape(-1)
    keep = (ids >= 0) & (ids < n_embeddings)          # the kernel adds nothing for an id out of range
    # The kernel writes only the rows of ids that occur; the others keep the launcher's zeros.
    _rows(dweight, dim)[...] += embedding_backward.reference(ids[keep], _rows(dout, dim)[keep], int(n_embeddings))


# ----------------------------------------------------------------------------- gelu.cu
def _gelu_forward(grid, block, args):
    x, y, n = args
    _flat(y, n)[...] = gelu.reference_forward(_flat(x, n))


def _gelu_backward(grid, block, args):
    x, dy, dx, n = args
    _flat(dx, n)[...] = gelu.reference_backward(_flat(x, n), _flat(dy, n))


# ----------------------------------------------------------------------------- grad_scaler.cu
def _amp_non_finite_check_and_unscale(grid, block, args):
    grad, n, found_inf, scale = args
    grad_scaler.reference_non_finite_check_and_unscale_(_flat(grad, n), found_inf, scale)


def _amp_update_scale(grid, block, args):
    scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval = args
    grad_scaler.reference_update_scale_(scale, growth_tracker, found_inf, float(growth_factor), float(backoff_factor),
                                        int(growth_interval))


# ----------------------------------------------------------------------------- layernorm.cu
def _layernorm_forward(grid, block, args):
    x, weight, bias, out, mean, rstd, n, eps = args
    _rows(out, n)[...], mean[...], rstd[...] = layernorm.reference_forward(_rows(x, n), weight, bias, float(eps))


def _layernorm_backward(grid, block, args):
    x, weight, mean, rstd, dout, dx, n = args
    _rows(dx, n)[...] = layernorm.reference_backward(_rows(x, n), weight, mean, rstd, _rows(dout, n),
                                                     need_params=False)[0]


def _layernorm_backward_params(grid, block, args):
    x, mean, rstd, dout, dweight, dbias, n_rows, n = args
    # dweight and dbias do not depend on weight, which this kernel is not given: ones stand in for it
    # (the reference's dx, computed with them, is thrown away).
    _, dweight[...], dbias[...] = layernorm.reference_backward(_rows(x, n), np.ones(int(n), np.float32), mean, rstd,
                                                               _rows(dout, n), need_params=True)


# ----------------------------------------------------------------------------- philox.cu
def _philox_uniform(grid, block, args):
    out, n, seed, offset = args
    _flat(out, n)[...] = philox.reference_uniform(int(n), int(seed), int(offset))


def _philox_normal(grid, block, args):
    out, n, seed, offset = args
    _flat(out, n)[...] = philox.reference_normal(int(n), int(seed), int(offset))


BY_KERNEL = {
    "adamw_update": _adamw_update,
    "adamw_count_step": _adamw_count_step,
    "adamw_update_skippable": _adamw_update_skippable,
    "amp_non_finite_check_and_unscale": _amp_non_finite_check_and_unscale,
    "amp_update_scale": _amp_update_scale,
    "causal_softmax_forward": _causal_softmax_forward,
    "causal_softmax_forward_f16": _causal_softmax_forward,
    "causal_softmax_forward_bf16": _causal_softmax_forward,
    "causal_softmax_backward": _causal_softmax_backward,
    "causal_softmax_backward_f16": _causal_softmax_backward,
    "causal_softmax_backward_bf16": _causal_softmax_backward,
    "cross_entropy_forward": _cross_entropy_forward,
    "cross_entropy_forward_f16": _cross_entropy_forward,
    "cross_entropy_forward_bf16": _cross_entropy_forward,
    "cross_entropy_backward": _cross_entropy_backward,
    "cross_entropy_backward_f16": _cross_entropy_backward,
    "cross_entropy_backward_bf16": _cross_entropy_backward,
    "embedding_backward": _embedding_backward,
    "gelu_forward": _gelu_forward,
    "gelu_forward_f16": _gelu_forward,
    "gelu_forward_bf16": _gelu_forward,
    "gelu_backward": _gelu_backward,
    "gelu_backward_f16": _gelu_backward,
    "gelu_backward_bf16": _gelu_backward,
    "layernorm_forward": _layernorm_forward,
    "layernorm_forward_f16": _layernorm_forward,
    "layernorm_forward_bf16": _layernorm_forward,
    "layernorm_backward": _layernorm_backward,
    "layernorm_backward_f16": _layernorm_backward,
    "layernorm_backward_bf16": _layernorm_backward,
    "layernorm_backward_params": _layernorm_backward_params,
    "layernorm_backward_params_f16": _layernorm_backward_params,
    "layernorm_backward_params_bf16": _layernorm_backward_params,
    "philox_uniform": _philox_uniform,
    "philox_normal": _philox_normal,
}


def launch(name: str, grid, block, args) -> None:
    """Run kernel `name`'s reference on a launch's NumPy arrays and scalars (what RawKernel hands the emulator)."""
    if name not in BY_KERNEL:
        raise NotImplementedError(f"TINYGRAD_GPU_STANDIN_KERNELS=reference: kernel {name!r} has no reference adapter "
                                  "(add one to tinygrad_gpu/testing/cupy_standin/kernel_references.py)")
    BY_KERNEL[name](tuple(grid), tuple(block), tuple(args))
