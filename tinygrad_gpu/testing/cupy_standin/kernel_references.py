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

import ctypes

import ml_dtypes
import numpy as np

from ...kernels import adamw, causal_softmax, cross_entropy, embedding_backward, gelu, grad_scaler, layernorm, philox
from ...kernels import causal_attention, dropout
from ...kernels import multi_tensor
from ...kernels import index_check


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


# ----------------------------------------------------------------------------- causal_attention.cu
def _attention_views(args, count: int, written: int = 0):
    """A causal_attention launch's arguments: its first `count` tensors (read), then the lse, then `written`
    output tensors (the backward's gradients), then H, L, E, three element strides per tensor (the read ones',
    then the written ones'), scale and the dropout. Every tensor comes back as a (B, H, L, E) view of its flat
    buffer through its strides (writing to an output's view writes the kernel's output), with the lse
    (B, H, L), scale and dropout."""
    arrays, lse, outputs = args[:count], args[count], args[count + 1:count + 1 + written]
    H, L, E = (int(n) for n in args[count + 1 + written:count + 4 + written])
    strides = [int(s) for s in args[count + 4 + written:len(args) - 5]]
    assert len(strides) == 3 * (count + written)
    scale, p, _keep_scale, seed, offset = args[-5:]
    BH = lse.size // L
    views = [np.lib.stride_tricks.as_strided(a, (BH // H, H, L, E), tuple(s * a.itemsize for s in
                                                                          (*strides[3 * n:3 * n + 3], 1)))
             for n, a in enumerate((*arrays, *outputs))]
    dropout = (float(p), int(seed), int(offset)) if p else None
    return views[:count], lse.reshape(BH // H, H, L), views[count:], float(scale), dropout


def causal_attention_flops(name: str, args) -> int:
    """The FLOPs of a causal_attention launch (causal_attention.flops), read from its arguments."""
    count, written = (4, 0) if "forward" in name else (5, 1 if "_dq" in name else 2)
    (q, *_), lse, *_ = _attention_views(args, count, written)
    return causal_attention.flops(name, lse.shape[0] * lse.shape[1], lse.shape[2], q.shape[-1])


def _causal_attention_forward(grid, block, args):
    (q, k, v, out), lse, _, scale, dropout = _attention_views(args, 4)
    out[...], lse[...] = causal_attention.reference_forward(q, k, v, scale, dropout)


def _causal_attention_backward(grid, block, args, written: int):
    """dq (the dq kernel, written = 1) or dk and dv (the dkdv kernel, written = 2), each through its own
    strides: the reference computes all three, and each kernel's adapter keeps what its kernel writes."""
    (q, k, v, out, dout), lse, outputs, scale, dropout = _attention_views(args, 5, written)
    dq, dk, dv = causal_attention.reference_backward(q, k, v, out, lse, dout, scale, dropout)
    for view, grad in zip(outputs, (dq,) if written == 1 else (dk, dv)):
        view[...] = grad


def _causal_attention_backward_dq(grid, block, args):
    _causal_attention_backward(grid, block, args, written=1)


def _causal_attention_backward_dkdv(grid, block, args):
    _causal_attention_backward(grid, block, args, written=2)


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


# ----------------------------------------------------------------------------- dropout.cu
def _dropout_multiply(grid, block, args):
    x, y, n, p, scale, seed, offset = args            # y's dtype: x's, or a 16-bit one for dropout_multiply_to_*
    _flat(y, n)[...] = dropout.reference_multiply(_flat(x, n), float(p), int(seed), int(offset), scale, y.dtype)


def _dropout_add(grid, block, args):
    x, residual, y, n, p, scale, seed, offset = args
    _flat(y, n)[...] = dropout.reference_add(_flat(residual, n), _flat(x, n), float(p), int(seed), int(offset), scale)


# ----------------------------------------------------------------------------- embedding_backward.cu
def _embedding_backward(grid, block, args):
    ids, _order, dout, dweight, dim, _tokens, n_embeddings = args
    ids = ids.reshape(-1)
    keep = (ids >= 0) & (ids < n_embeddings)          # the kernel adds nothing for an id out of range
    # The kernel writes only the rows of ids that occur; the others keep the launcher's zeros.
    _rows(dweight, dim)[...] += embedding_backward.reference_embedding_backward(ids[keep], _rows(dout, dim)[keep],
                                                                                int(n_embeddings))


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


# ----------------------------------------------------------------------------- index_check.cu
def _index_check(grid, block, args):
    ids, n, high, ignore, has_ignore, found = args
    index_check.reference_index_check(_flat(ids, n), int(high), int(ignore) if has_ignore else None, found)


# ----------------------------------------------------------------------------- layernorm.cu
def _layernorm_forward(grid, block, args):
    x, weight, bias, out, mean, rstd, n, eps = args
    _rows(out, n)[...], mean[...], rstd[...] = layernorm.reference_forward(_rows(x, n), weight, bias, float(eps))


def _layernorm_forward_naive(grid, block, args):
    x, weight, bias, out, mean, rstd, _n_rows, n, eps = args       # n_rows: out's rows, as the array says too
    _layernorm_forward(grid, block, (x, weight, bias, out, mean, rstd, n, eps))


def _layernorm_backward(grid, block, args):
    x, weight, mean, rstd, dout, dx_add, dx, n = args
    _rows(dx, n)[...] = layernorm.reference_backward(_rows(x, n), weight, mean, rstd, _rows(dout, n), need_params=False,
                                                     dx_add=None if dx_add is None else _rows(dx_add, n))[0]


def _layernorm_backward_params(grid, block, args):
    x, mean, rstd, dout, dweight, dbias, n_rows, n = args
    # dweight and dbias do not depend on weight, which this kernel is not given: ones stand in for it
    # (the reference's dx, computed with them, is thrown away).
    _, want_dweight, want_dbias = layernorm.reference_backward(_rows(x, n), np.ones(int(n), np.float32), mean, rstd,
                                                               _rows(dout, n), need_params=True)
    for out, want in ((dweight, want_dweight), (dbias, want_dbias)):
        if out is not None:                             # a null pointer: a gradient the kernel does not store
            out[...] = want


def _layernorm_backward_fused(grid, block, args):
    x, weight, mean, rstd, dout, dx_add, dx, dweight, dbias, partials, _ticket, n_rows, n, per_block = args
    n, per_block = int(n), int(per_block)
    x, dout = _rows(x, n), _rows(dout, n)
    _rows(dx, n)[...], want_dweight, want_dbias = layernorm.reference_backward(
        x, weight, mean, rstd, dout, need_params=True, dx_add=None if dx_add is None else _rows(dx_add, n))
    for out, want in ((dweight, want_dweight), (dbias, want_dbias)):
        if out is not None:                             # a null pointer: a gradient the kernel does not store
            out[...] = want
    # The workspace as the kernel leaves it: the groups' column sums in its first 2 * groups * n floats, the
    # rest untouched. The ticket is 0 before and after.
    sums = layernorm.reference_group_sums(x, mean, rstd, dout, per_block)
    _flat(partials, sums.size)[...] = sums.reshape(-1)


# ----------------------------------------------------------------------------- multi_tensor.cu
def table_arrays(table, j: int, zero_d: bool = False, dtype=np.float32) -> list:
    """List j of a multi_tensor.cu TensorTable (the numpy.void a launch got) as NumPy views of the memory its
    addresses name: flat, with the sizes the table gives (list 0's), or 0-d (`zero_d`: the step counts); of
    `dtype` (a cast's 16-bit list: table_dtypes). The stand-in's arrays are NumPy memory of this process, so
    an address is all it takes."""
    start, views, dtype = table["start"], [], np.dtype(dtype)
    for k in range(int(table["count"])):
        n = 1 if zero_d else int(start[k + 1] - start[k])
        view = np.ctypeslib.as_array((ctypes.c_uint8 * (n * dtype.itemsize)).from_address(
            int(table["list"][j, k]))).view(dtype) if n else np.zeros(0, dtype)
        views.append(view.reshape(()) if zero_d else view)
    return views


def table_dtypes(name: str) -> list:
    """The dtype of each list of the table that kernel `name` takes: float32, but for a cast's 16-bit side."""
    dtypes_ = [np.dtype(np.float32)] * multi_tensor.LISTS
    if name.startswith("multi_tensor_cast_"):
        half = {"f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}[name.rsplit("_", 1)[1]]
        dtypes_[1 if "_to_" in name else 0] = half
    return dtypes_


def launch_flops(name: str, args) -> int:
    """The products a launch of our kernel `name` computes (2 FLOPs a multiply-add), for gpu_readiness.py's cost
    on paper: the attention kernels', whose products are inside them; 0 for the rest (elementwise work is not
    counted, as it is not for the array library's launches)."""
    return causal_attention_flops(name, args) if name.startswith("causal_attention_") else 0


def table_bytes(table, name: str = "") -> int:
    """The bytes of the arrays a TensorTable names (of table_dtypes(name); a step count is one value), each counted
    once: the traffic of a launch given it, for gpu_readiness.py's cost on paper (the stand-in cannot see
    through it)."""
    count, start, sizes = int(table["count"]), table["start"], table_dtypes(name)
    elements = [(1 if j == multi_tensor.STEP_LIST else int(start[count] - start[0])) * sizes[j].itemsize
                for j in range(multi_tensor.LISTS) if count and table["list"][j, 0]]
    return sum(elements)


def _multi_tensor_norm_clip(grid, block, args):
    table, _partials, _ticket, total, norm, coefficient, max_norm, last = args
    # The partial sums and the ticket are 0 before a launch and after it (its last block resets them).
    multi_tensor.reference_norm_clip_(table_arrays(table, 0), total, norm, coefficient, float(max_norm), bool(last))


def _multi_tensor_scale(grid, block, args):
    table, coefficient = args
    multi_tensor.reference_scale_(table_arrays(table, 0), coefficient)


def _multi_tensor_adamw_update(grid, block, args):
    table, step_size, one_minus_beta1, _beta2, one_minus_beta2, bc2_sqrt, eps, decay, l2 = args
    # 1 - (1 - beta), Python floats: as _adamw_update says why
    multi_tensor.reference_adamw_update(*(table_arrays(table, j) for j in range(4)), step_size=float(step_size),
                                        beta1=1 - float(one_minus_beta1), beta2=1 - float(one_minus_beta2),
                                        bias_correction2_sqrt=float(bc2_sqrt), eps=float(eps), decay=float(decay),
                                        l2=float(l2))


def _multi_tensor_cast(name):
    def adapter(grid, block, args):
        (table,), (source, target) = args, table_dtypes(name)[:2]
        for out, value in zip(table_arrays(table, 1, dtype=target),
                              multi_tensor.reference_cast(table_arrays(table, 0, dtype=source), target)):
            out[...] = value
    return adapter


def _multi_tensor_adamw_count_step(grid, block, args):
    table, found_inf = args
    multi_tensor.reference_adamw_count_step(table_arrays(table, multi_tensor.STEP_LIST, zero_d=True),
                                            found_inf)


def _multi_tensor_adamw_update_skippable(grid, block, args):
    table, found_inf, lr, beta1, beta2, eps, decay, l2 = args
    multi_tensor.reference_adamw_update_skippable(*(table_arrays(table, j) for j in range(4)),
                                                  table_arrays(table, multi_tensor.STEP_LIST, zero_d=True),
                                                  found_inf, lr=float(lr),
                                                  beta1=float(beta1), beta2=float(beta2), eps=float(eps),
                                                  decay=float(decay), l2=float(l2))


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
    "causal_attention_forward": _causal_attention_forward,
    "causal_attention_forward_f16": _causal_attention_forward,
    "causal_attention_forward_bf16": _causal_attention_forward,
    "causal_attention_backward_dq": _causal_attention_backward_dq,
    "causal_attention_backward_dq_f16": _causal_attention_backward_dq,
    "causal_attention_backward_dq_bf16": _causal_attention_backward_dq,
    "causal_attention_backward_dkdv": _causal_attention_backward_dkdv,
    "causal_attention_backward_dkdv_f16": _causal_attention_backward_dkdv,
    "causal_attention_backward_dkdv_bf16": _causal_attention_backward_dkdv,
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
    "dropout_multiply": _dropout_multiply,
    "dropout_multiply_f16": _dropout_multiply,
    "dropout_multiply_bf16": _dropout_multiply,
    "dropout_multiply_to_f16": _dropout_multiply,
    "dropout_multiply_to_bf16": _dropout_multiply,
    "dropout_add": _dropout_add,
    "dropout_add_f16": _dropout_add,
    "dropout_add_bf16": _dropout_add,
    "embedding_backward": _embedding_backward,
    "index_check": _index_check, "index_check_i32": _index_check,
    "gelu_forward": _gelu_forward,
    "gelu_forward_f16": _gelu_forward,
    "gelu_forward_bf16": _gelu_forward,
    "gelu_backward": _gelu_backward,
    "gelu_backward_f16": _gelu_backward,
    "gelu_backward_bf16": _gelu_backward,
    "layernorm_forward": _layernorm_forward,
    "layernorm_forward_f16": _layernorm_forward,
    "layernorm_forward_bf16": _layernorm_forward,
    "layernorm_forward_naive": _layernorm_forward_naive,
    "layernorm_forward_naive_f16": _layernorm_forward_naive,
    "layernorm_forward_naive_bf16": _layernorm_forward_naive,
    "layernorm_backward": _layernorm_backward,
    "layernorm_backward_f16": _layernorm_backward,
    "layernorm_backward_bf16": _layernorm_backward,
    "layernorm_backward_params": _layernorm_backward_params,
    "layernorm_backward_params_f16": _layernorm_backward_params,
    "layernorm_backward_params_bf16": _layernorm_backward_params,
    "layernorm_backward_fused": _layernorm_backward_fused,
    "layernorm_backward_fused_f16": _layernorm_backward_fused,
    "layernorm_backward_fused_bf16": _layernorm_backward_fused,
    **{f"layernorm_{kernel}_{way}{suffix}": adapter for suffix in ("_f16", "_bf16")
       for kernel, way, adapter in (("forward", "to", _layernorm_forward), ("backward", "from", _layernorm_backward),
                                    ("backward_params", "from", _layernorm_backward_params),
                                    ("backward_fused", "from", _layernorm_backward_fused))},
    "philox_uniform": _philox_uniform,
    "philox_normal": _philox_normal,
    "multi_tensor_norm_clip": _multi_tensor_norm_clip,
    "multi_tensor_scale": _multi_tensor_scale,
    **{name: _multi_tensor_cast(name) for name in ("multi_tensor_cast_to_f16", "multi_tensor_cast_to_bf16",
                                                   "multi_tensor_cast_from_f16", "multi_tensor_cast_from_bf16")},
    "multi_tensor_adamw_update": _multi_tensor_adamw_update,
    "multi_tensor_adamw_count_step": _multi_tensor_adamw_count_step,
    "multi_tensor_adamw_update_skippable": _multi_tensor_adamw_update_skippable,
}


def launch(name: str, grid, block, args) -> None:
    """Run kernel `name`'s reference on a launch's NumPy arrays and scalars (what RawKernel hands the emulator)."""
    if name not in BY_KERNEL:
        raise NotImplementedError(f"TINYGRAD_GPU_STANDIN_KERNELS=reference: kernel {name!r} has no reference adapter "
                                  "(add one to tinygrad_gpu/testing/cupy_standin/kernel_references.py)")
    BY_KERNEL[name](tuple(grid), tuple(block), tuple(args))
