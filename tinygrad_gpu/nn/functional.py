"""tinygrad_gpu.nn.functional: losses and layer functions with PyTorch's signatures.

These are compositions of Tensor ops, so their gradients (and second derivatives) come
from the ops they are made of.  The hot ones (cross_entropy, layer_norm, gelu with
approximate="tanh", embedding, causal attention) route to fused ops instead
(``tinygrad_gpu/ops/fused.py``: our CUDA kernels on emu and cuda, ``kernels/compiled_cpu.py`` or
``kernels/fast_cpu.py`` on cpu), behind the same signatures and computing the same values; ``with
tinygrad_gpu.kernels.fused(False):`` runs the compositions those fused ops name instead.
"""
from __future__ import annotations

import math

import numpy as np

from .. import deferred_checks, dtypes
from .. import device as devices
from ..amp import autocast_mode
from ..ops import fused
from .. import kernels
from .. import random
from ..creation import full, ones
from ..ops import linalg
from ..ops.activations import Softplus
from ..ops.elementwise import check_broadcast, gelu as _gelu, where
from ..ops.losses import BinaryCrossEntropy
from ..ops.movement import cat
from ..tensor import Tensor
from ..ops.conv import avg_pool2d, conv2d, conv_transpose2d, max_pool2d  # noqa: F401  (F.conv2d, ...)
from .activations import (celu, elu, hardsigmoid, hardswish, hardtanh, leaky_relu, logsigmoid, mish,  # noqa: F401
                          relu6, selu, silu, softmin, softplus, softsign)
from .resampling import interpolate, max_unpool2d  # noqa: F401  (F.interpolate, F.max_unpool2d)


def _check_reduction(op: str, reduction: str) -> None:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _use_fused(*tensors) -> bool:
    """Route to a fused op: unless switched off, for floating-point tensors of one dtype (None: absent)."""
    given = [t for t in tensors if t is not None]
    return kernels.fused_enabled() and given[0].is_floating_point() and all(t.dtype == given[0].dtype for t in given)


def relu(x: Tensor) -> Tensor:
    return x.relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    if approximate == "tanh" and _use_fused(x):
        return fused.GeluTanh.apply(x)
    return _gelu(x, approximate)


def softmax(x: Tensor, dim: int, dtype=None) -> Tensor:
    return x.softmax(dim, dtype)


def log_softmax(x: Tensor, dim: int, dtype=None) -> Tensor:
    return x.log_softmax(dim, dtype)


def linear(x: Tensor, weight: Tensor, bias: Tensor = None) -> Tensor:
    """x @ weight.T + bias, with weight stored (out_features, in_features) as in PyTorch (one op:
    ``ops/linalg.py``); a 1-D weight gives x @ weight."""
    if weight.ndim == 2:
        return linalg.linear(x, weight, bias)
    out = x @ weight
    return out if bias is None else out + bias


# ----------------------------------------------------------------------------- losses
def _reduce(losses: Tensor, reduction: str) -> Tensor:
    return losses if reduction == "none" else losses.sum() if reduction == "sum" else losses.mean()


def _class_rows(op: str, input: Tensor, target: Tensor, ignore_index: int):
    """Check class-index targets against (C,), (N, C) or (N, C, d1, ...) scores; return one row of scores
    per target (classes last, everything else flattened), the targets flat, and a bool array: not ignored."""
    class_dim = 1 if input.ndim >= 2 else 0
    n_classes = input.shape[class_dim]
    expected = input.shape[:1] + input.shape[2:] if input.ndim >= 2 else ()
    if target.shape != expected:
        raise ValueError(f"{op}: input of shape {input.shape} needs class-index targets of shape "
                         f"{expected}, got {target.shape}")
    if dtypes.category(target.dtype) != 1:
        raise TypeError(f"{op}: class-index targets must be integers, got {target.dtype}")
    rows = input.movedim(class_dim, -1).reshape(-1, n_classes) if input.ndim >= 2 else input.reshape(1, n_classes)
    labels = target.reshape(-1)
    ids = labels.data                                    # checked on the arrays: no graph to record here
    valid = f"for {n_classes} classes (valid: 0..{n_classes - 1}, or ignore_index={ignore_index})"
    with devices.use(labels.device):
        deferred_checks.check_range(labels.device, ids, n_classes, IndexError,
                                    f"{op}: a target is out of range {valid}", ignore=ignore_index,
                                    first_bad=lambda bad: f"{op}: target {ids[bad][0]} is out of range {valid}")
        kept = ids != ignore_index
    return rows, labels, kept


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Softmax cross-entropy between logits and class indices (or class probabilities).

    input: (C,), (N, C) or (N, C, d1, ...) logits; target: (), (N,) or (N, d1, ...) class
    indices (positions equal to `ignore_index` contribute nothing and are not counted in
    the mean), or a float tensor of input's shape holding class probabilities.
    With label smoothing e, the target distribution is (1 - e) one-hot + e uniform.
    weight (C,): each class's loss is scaled by its weight; with class indices, "mean" then divides by
    the kept targets' total weight (as nll_loss does), with probabilities by their count.
    """
    if weight is not None:
        return _weighted_cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing)
    _check_reduction("cross_entropy", reduction)
    # Autocast runs cross_entropy in float32. The fused kernel reads 16-bit logits as they are and computes
    # in float32 (the same numbers, without a float32 copy of every logit); the composition casts first.
    in_region = autocast_mode.region_dtype(input.device) is not None
    loss_dtype = dtypes.float32 if in_region and dtypes.is_half(input.dtype) else input.dtype
    if in_region and not _use_fused(input):
        input, target = autocast_mode.float32(input, target)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if input.ndim == 0:
        raise ValueError("cross_entropy: input must have a class dimension, got a 0-d tensor")
    class_dim = 1 if input.ndim >= 2 else 0
    n_classes = input.shape[class_dim]

    if target.is_floating_point():                        # class probabilities
        if target.shape != input.shape:
            raise ValueError(f"cross_entropy: probability targets must have the input's shape {input.shape}, "
                             f"got {target.shape}")
        if label_smoothing:
            target = target * (1 - label_smoothing) + label_smoothing / n_classes
        return _reduce(-(target * input.log_softmax(class_dim)).sum(class_dim), reduction).to(dtype=loss_dtype)

    rows, labels, kept = _class_rows("cross_entropy", input, target, ignore_index)
    op = fused.CrossEntropyRows.apply if _use_fused(rows) else fused.CrossEntropyRows.composition
    # The fused op's losses are float32 for 16-bit logits (its kernel's arithmetic); they are reduced in
    # float32 and rounded to the logits' dtype once, outside autocast, as PyTorch does.
    nll = op(rows, labels, ignore_index=ignore_index, label_smoothing=label_smoothing)
    if reduction == "none":
        return nll.reshape(target.shape).to(dtype=loss_dtype)
    if reduction == "sum":
        return nll.sum().to(dtype=loss_dtype)
    with devices.use(labels.device):
        # float32 and float64 count exactly as they sum (one launch); a 16-bit sum would not, so it is cast
        count = kept.sum(dtype=nll.dtype) if not dtypes.is_half(nll.dtype) else kept.sum().astype(nll.dtype)
        count = Tensor._wrap(count, labels.device)
    return (nll.sum() / count).to(dtype=loss_dtype)             # 0 kept targets gives nan, as in PyTorch


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """|input - target|, reduced (its gradient at 0 is 0, abs's)."""
    _check_reduction("l1_loss", reduction)
    check_broadcast("l1_loss", input.shape, target.shape)
    input, target = autocast_mode.float32(input, target)
    return _reduce((input - target).abs(), reduction)


def _weighted_cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing) -> Tensor:
    """cross_entropy with class weights, as Tensor ops (the fused op has no weights): log_softmax, then
    nll_loss's weighted sum; label smoothing adds e / C of every class's weighted log-probability, which
    "mean" divides by the same total weight as the nll part."""
    _check_reduction("cross_entropy", reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if input.ndim == 0:
        raise ValueError("cross_entropy: input must have a class dimension, got a 0-d tensor")
    input, weight = autocast_mode.float32(input, weight)
    class_dim = 1 if input.ndim >= 2 else 0
    n_classes = input.shape[class_dim]
    if weight.shape != (n_classes,):
        raise RuntimeError(f"cross_entropy: weight must hold one number per class, shape ({n_classes},), got "
                           f"{weight.shape}")
    log_probs = input.log_softmax(class_dim)
    per_class = weight.to(dtype=input.dtype).reshape((n_classes,) + (1,) * (input.ndim - class_dim - 1))
    if target.is_floating_point():                        # class probabilities
        if target.shape != input.shape:
            raise ValueError(f"cross_entropy: probability targets must have the input's shape {input.shape}, "
                             f"got {target.shape}")
        if label_smoothing:
            target = target * (1 - label_smoothing) + label_smoothing / n_classes
        return _reduce(-(target * log_probs * per_class).sum(class_dim), reduction)
    nll = nll_loss(log_probs, target, weight, ignore_index, reduction)
    if not label_smoothing:
        return nll
    _, labels, kept = _class_rows("cross_entropy", input, target, ignore_index)
    kept = Tensor._wrap(kept, labels.device).reshape(target.shape)
    smooth = where(kept, -(log_probs * per_class).sum(class_dim), 0.0)
    if reduction == "mean":
        with devices.use(labels.device):
            safe_ids = devices.array_module(labels.device).where(kept.data.reshape(-1), labels.data, 0)
        smooth = smooth.sum() / where(kept.reshape(-1), weight.to(dtype=input.dtype)[Tensor._wrap(safe_ids,
                                                                                            labels.device)], 0.0).sum()
    else:
        smooth = _reduce(smooth, reduction)
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / n_classes)


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    _check_reduction("mse_loss", reduction)
    check_broadcast("mse_loss", input.shape, target.shape)
    input, target = autocast_mode.float32(input, target)
    diff = input - target
    return _reduce(diff * diff, reduction)


def nll_loss(input: Tensor, target: Tensor, weight: Tensor = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class-index targets, given log-probabilities (log_softmax's output).

    input: (C,), (N, C) or (N, C, d1, ...); target: (), (N,) or (N, d1, ...) class indices. A target's
    loss is -weight[class] * input[class]; targets equal to `ignore_index` give 0 and weigh nothing.
    "mean" divides the sum by the total weight of the kept targets (their count without `weight`).
    """
    _check_reduction("nll_loss", reduction)
    input, weight = autocast_mode.float32(input, weight)
    if input.ndim == 0:
        raise ValueError("nll_loss: input must have a class dimension, got a 0-d tensor")
    rows, labels, kept = _class_rows("nll_loss", input, target, ignore_index)
    n_classes, device = rows.shape[1], labels.device
    if weight is not None and weight.shape != (n_classes,):
        raise RuntimeError(f"nll_loss: weight must hold one number per class, shape ({n_classes},), "
                           f"got {weight.shape}")
    with devices.use(device):
        safe_ids = devices.array_module(device).where(kept, labels.data, 0)   # an ignored target picks class 0...
    kept = Tensor._wrap(kept, device)                                           # ...and `where` drops it again
    picked = rows.gather(1, Tensor._wrap(safe_ids[:, None], device).long()).reshape(-1)     # one entry per row
    if weight is None:
        losses, total = where(kept, -picked, 0.0), kept.sum().to(dtype=rows.dtype)
    else:
        class_weight = weight.to(dtype=rows.dtype)[Tensor._wrap(safe_ids, device)]
        losses, total = where(kept, -picked * class_weight, 0.0), where(kept, class_weight, 0.0).sum()
    if reduction == "mean":
        return losses.sum() / total                   # nothing kept gives 0 / 0 = nan, as in PyTorch
    return _reduce(losses.reshape(target.shape), reduction)


def _check_same_shape(op: str, input: Tensor, target: Tensor, weight: Tensor) -> None:
    if target.shape != input.shape:
        raise ValueError(f"{op}: target of shape {target.shape} must have the input's shape {input.shape}")
    if weight is not None:
        check_broadcast(op, input.shape, weight.shape)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor = None, reduction: str = "mean") -> Tensor:
    """-weight * (t log x + (1 - t) log(1 - x)) for probabilities x in [0, 1], each log clamped at -100
    as in PyTorch (so x = 0 or 1 gives a finite loss; the gradient stays finite too: ops/losses.py)."""
    _check_reduction("binary_cross_entropy", reduction)
    if autocast_mode.region_dtype(input.device) is not None:
        raise RuntimeError("binary_cross_entropy is unsafe inside an autocast region (16-bit probabilities lose "
                           "what log needs near 0 and 1), as in PyTorch: compute logits and use "
                           "binary_cross_entropy_with_logits, which autocast runs in float32, or leave the loss "
                           "outside the region")
    _check_same_shape("binary_cross_entropy", input, target, weight)
    x = input._floating()
    t = target.to(dtype=x.dtype)
    message = "binary_cross_entropy: all elements of input must be probabilities, between 0 and 1"
    with devices.use(x.device):
        outside = (x.data < 0) | (x.data > 1)
        deferred_checks.check(x.device, outside, RuntimeError, message,
                              first_bad=lambda: f"{message}, got {x.data[outside][0]}")
    losses = BinaryCrossEntropy.apply(x, t)
    return _reduce(losses if weight is None else losses * weight, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor = None,
                                     reduction: str = "mean", pos_weight: Tensor = None) -> Tensor:
    """binary_cross_entropy(sigmoid(x), t) from the logits x, finite for any x:
    (1 - t) x + (1 + (p - 1) t) softplus(-x), since -log sigmoid(x) = softplus(-x) and
    -log(1 - sigmoid(x)) = x + softplus(-x). p = pos_weight scales the positive term (one number per
    class, broadcast along the last dim); weight scales each loss."""
    _check_reduction("binary_cross_entropy_with_logits", reduction)
    _check_same_shape("binary_cross_entropy_with_logits", input, target, weight)
    input, target, weight, pos_weight = autocast_mode.float32(input, target, weight, pos_weight)
    x = input._floating()
    positive_weight = 1
    if pos_weight is not None:
        check_broadcast("binary_cross_entropy_with_logits", input.shape, pos_weight.shape)
        positive_weight = 1 + (pos_weight - 1) * target
    losses = (1 - target) * x + positive_weight * Softplus.apply(-x, beta=1.0, threshold=math.inf)
    return _reduce(losses if weight is None else losses * weight, reduction)


# ----------------------------------------------------------------------------- one-hot, padding, normalising
def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 tensor of shape (*tensor.shape, num_classes): 1 at each value's class, 0 elsewhere.
    num_classes=-1 takes the largest value + 1 (a read of the data: the result's shape depends on it)."""
    if dtypes.category(tensor.dtype) != 1:
        raise RuntimeError(f"one_hot: expects an integer tensor of class indices, got {tensor.dtype}")
    if num_classes < -1:
        raise RuntimeError(f"one_hot: num_classes must be -1 (the largest value + 1) or a count, got {num_classes}")
    ids, device = tensor.data, tensor.device
    xp = devices.array_module(device)
    with devices.use(device):
        if num_classes == -1:              # the values are read anyway (a sync on a GPU): check them at once
            if tensor.numel() == 0:
                raise RuntimeError("one_hot: cannot infer the number of classes from an empty tensor; give num_classes")
            low, high = devices.move(xp.stack([ids.min(), ids.max()]), "cpu").tolist()
            num_classes = high + 1
            if low < 0:
                raise RuntimeError(f"one_hot: class {low} is out of range for {num_classes} classes (valid: 0..{high})")
        else:
            bad = (ids < 0) | (ids >= num_classes)
            classes = f"for {num_classes} classes (valid: 0..{num_classes - 1})"
            deferred_checks.check(device, bad, RuntimeError, f"one_hot: a class is out of range {classes}",
                                  first_bad=lambda: f"one_hot: class {ids[bad][0]} is out of range {classes}")
        out = (ids[..., None] == xp.arange(num_classes)).astype(dtypes.int64)
    return Tensor._wrap(out, device)


def _pad_constant(x: Tensor, dim: int, before: int, after: int, value) -> Tensor:
    """Crop the negative amounts off dim, then put blocks full of `value` on the positive sides."""
    n, keep = x.shape[dim], (slice(None),) * dim
    x = x[keep + (slice(max(-before, 0), n - max(-after, 0)),)]

    def block(size):
        return full(x.shape[:dim] + (size,) + x.shape[dim + 1:], value, dtype=x.dtype, device=x.device)
    pieces = ([block(before)] if before > 0 else []) + [x] + ([block(after)] if after > 0 else [])
    return cat(pieces, dim) if len(pieces) > 1 else x


def _pad_by_index(x: Tensor, dim: int, before: int, after: int, mode: str) -> Tensor:
    """Index dim with the source of each output position -before .. n + after - 1, folded back into
    0 .. n - 1 the mode's way. Indexing adds up the gradients of repeated positions."""
    n = x.shape[dim]
    if mode == "reflect" and max(before, after) >= n:
        raise RuntimeError(f"pad: reflect padding ({before}, {after}) must be less than the size {n} of dim {dim}")
    if mode == "circular" and max(before, after) > n:
        raise RuntimeError(f"pad: circular padding ({before}, {after}) must be at most the size {n} of dim {dim} "
                           "(it would wrap around more than once)")
    if mode == "replicate" and n == 0:
        raise RuntimeError(f"pad: replicate padding of dim {dim} needs at least one element there, it has none")
    fold = {"reflect": lambda i: -i if i < 0 else 2 * (n - 1) - i if i >= n else i,    # mirror, edge once
            "replicate": lambda i: min(max(i, 0), n - 1),                              # repeat the edge
            "circular": lambda i: i % n}[mode]                                           # wrap around
    return x[(slice(None),) * dim + ([fold(i) for i in range(-before, n + after)],)]


def pad(input: Tensor, pad, mode: str = "constant", value: float = None) -> Tensor:
    """Pad the last len(pad) // 2 dims: pad = (before, after) for the last dim, then for the one before it,
    and so on (PyTorch's order). Negative amounts crop. mode: "constant" (fill with `value`, default 0),
    "reflect" (mirror, not repeating the edge), "replicate" (repeat the edge), "circular" (wrap around).
    Differentiable in every mode: slices and concatenation, or indexing."""
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ValueError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    if value not in (None, 0) and mode != "constant":
        raise RuntimeError(f"pad: {mode} padding takes no value (only mode='constant' fills with one)")
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) > 2 * input.ndim:
        raise RuntimeError(f"pad: needs two amounts (before, after) per padded dim, at most {2 * input.ndim} for an "
                           f"input of shape {input.shape}, got {pad}")
    out = input
    for i in range(len(pad) // 2):
        dim, before, after = input.ndim - 1 - i, pad[2 * i], pad[2 * i + 1]
        if input.shape[dim] + before + after < 0:
            raise RuntimeError(f"pad: padding ({before}, {after}) of dim {dim} (size {input.shape[dim]}) leaves a "
                               "negative size")
        if before or after:
            out = (_pad_constant(out, dim, before, after, 0 if value is None else value) if mode == "constant"
                   else _pad_by_index(out, dim, before, after, mode))
    return out


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(||x||_p, eps) along dim: unit vectors, and a zero vector stays zero (p > 0, or inf)."""
    x = input._floating()
    if p == math.inf:
        norm = x.abs().amax(dim, keepdim=True)
    elif p > 0:
        total = (x.abs() ** p).sum(dim, keepdim=True)
        # total ** (1/p) has an infinite slope at 0 (p > 1), and 0 times it is nan even where the clamp
        # below stops the gradient; so the root is taken of 1 there and then replaced by 0.
        nonzero = total > 0
        norm = where(nonzero, where(nonzero, total, 1.0) ** (1 / p), 0.0)
    else:
        raise ValueError(f"normalize: p must be positive (or math.inf), got {p}")
    return x / norm.clamp(min=eps)


# ----------------------------------------------------------------------------- layers
def layer_norm(x: Tensor, normalized_shape, weight: Tensor = None, bias: Tensor = None,
               eps: float = 1e-5, *, out_dtype=None) -> Tensor:
    """Normalise over the last len(normalized_shape) dims to mean 0, variance 1; then scale and shift.

    out_dtype (not PyTorch's): the result's dtype, float16 or bfloat16 for float32 data (after autocast's
    cast up): computed in float32 and rounded once, as .to(out_dtype) of the float32 result would be, but
    written so by the kernel, without a cast of its own each way (nn.LayerNorm's feeds_products)."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(normalized_shape)
    if x.shape[x.ndim - k:] != normalized_shape:
        raise ValueError(f"layer_norm: input of shape {x.shape} does not end with normalized_shape "
                         f"{normalized_shape}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.shape != normalized_shape:
            raise ValueError(f"layer_norm: {name} of shape {t.shape} does not match normalized_shape "
                             f"{normalized_shape}")
    x, weight, bias = autocast_mode.float32(x, weight, bias)     # autocast: the statistics need float32
    if out_dtype is not None and (x.dtype != dtypes.float32 or not dtypes.is_half(out_dtype)):
        raise ValueError(f"layer_norm: out_dtype {np.dtype(out_dtype)} is for float32 data and float16 or bfloat16 "
                         f"out, got {x.dtype} data; leave it out to get the data's dtype")
    n = math.prod(normalized_shape)
    weight = weight.reshape(n) if weight is not None else ones(n, dtype=x.dtype, device=x.device)
    bias = () if bias is None else (bias.reshape(n),)          # no shift: nothing to add, no gradient to sum
    op = fused.LayerNormRows.apply if _use_fused(x, weight, *bias) and x.numel() else fused.LayerNormRows.composition
    return op(x, weight, *bias, eps=eps, out_dtype=None if out_dtype is None else np.dtype(out_dtype))


def embedding(input: Tensor, weight: Tensor) -> Tensor:
    """Rows of `weight` picked by the integer tensor `input`; repeated ids add up their gradients."""
    if dtypes.category(input.dtype) != 1:
        raise TypeError(f"embedding: indices must be an integer tensor, got {input.dtype}")
    n, ids = weight.shape[0], input.data
    valid = f"for {n} embeddings (valid: 0..{n - 1})"
    with devices.use(input.device):
        deferred_checks.check_range(input.device, ids, n, IndexError, f"embedding: an index is out of range {valid}",
                                    first_bad=lambda bad: f"embedding: index {ids[bad][0]} is out of range {valid}")
    return fused.EmbeddingLookup.apply(weight, input) if weight.ndim == 2 and _use_fused(weight) else weight[input]


def _dropout_keep(shape, p: float, device: str, dtype):
    """The dropout's mask: 1 / (1 - p) where an element is kept (each with probability 1 - p), else 0."""
    with devices.use(device):
        kept = random.generator(device).random(shape, dtype=np.float32) >= p
        return Tensor._wrap(kept.astype(dtype) * (1.0 / (1.0 - p) if p < 1 else 0.0), device)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability p and scale the rest by 1 / (1 - p) (only when training)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    if x.device != "cpu" and x.dtype in kernels.runtime.KERNEL_DTYPES and _use_fused(x):
        # One kernel each way, the mask drawn inside it (kernels/dropout.cu) where x * _dropout_keep takes
        # five launches. On a GPU the kernel reads the counters the unfused random(shape) draw would have
        # read, so the masks, and a training run's losses, are the same fused or not. On emu the seed comes
        # from the NumPy generator (random.philox_counters), so emu's masks differ from the unfused ones
        # there and from the cpu's (which keeps its NumPy mask, below).
        seed, offset = random.philox_counters(x.device, x.numel())
        return fused.Dropout.apply(x, p=p, seed=seed, offset=offset)
    return x * _dropout_keep(x.shape, p, x.device, x.dtype)


def dropout_add(residual: Tensor, x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """residual + dropout(x, p, training): a transformer's residual add with its branch's dropout, one op.
    (Not a PyTorch function; the numbers are those of the two ops it stands for.)

    On emu and cuda, a float32 residual and an x of its shape in float32 or 16 bits take one kernel each
    way (kernels/dropout.cu): forward, the mask drawn and the sum made in one pass; backward, x's gradient
    is the output's through the mask, in x's dtype, and the residual's is the output's itself. Unfused,
    a 16-bit branch under autocast is three launches forward (dropout, cast up, add) and two back."""
    if training and 0.0 < p < 1.0 and x.device != "cpu" and residual.dtype == dtypes.float32 \
            and x.dtype in kernels.runtime.KERNEL_DTYPES and residual.shape == x.shape \
            and residual.device == x.device and kernels.fused_enabled():
        seed, offset = random.philox_counters(x.device, x.numel())     # the counters dropout(x) would draw
        return fused.DropoutAdd.apply(residual, x, p=p, seed=seed, offset=offset)
    return residual + dropout(x, p, training)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float = None) -> Tensor:
    """softmax(q k^T * scale + mask) v over the last two dims of (..., L, E), (..., S, E), (..., S, Ev).

    is_causal: position i attends to positions <= i.  attn_mask: bool (True = may attend) or
    float (added to the scores), broadcastable to (..., L, S).
    """
    if is_causal and attn_mask is not None:
        raise RuntimeError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1], got {dropout_p}")
    shapes = f"query {query.shape}, key {key.shape} and value {value.shape}"
    if min(query.ndim, key.ndim, value.ndim) < 2 or query.shape[-1] != key.shape[-1] \
            or key.shape[-2] != value.shape[-2]:
        raise RuntimeError(f"scaled_dot_product_attention: {shapes} do not fit (need (..., L, E), (..., S, E), "
                         "(..., S, Ev))")
    try:
        np.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except ValueError:
        raise RuntimeError(f"scaled_dot_product_attention: the batch dimensions of {shapes} cannot be broadcast "
                         "together") from None
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    float_mask = attn_mask if attn_mask is not None and attn_mask.is_floating_point() else None
    query, key, value, float_mask = autocast_mode.low_precision(query, key, value, float_mask)   # its products
    attn_mask = float_mask if float_mask is not None else attn_mask
    keep = dropout = None
    tiled = is_causal and _use_fused(query, key, value) and fused.CausalAttention.runs_kernel(query, key, value)
    if dropout_p:            # one mask for the attention weights, of the scores' shape
        shape = (*np.broadcast_shapes(query.shape[:-2], key.shape[:-2]), query.shape[-2], key.shape[-2])
        if tiled:            # drawn inside the kernels, from the counters a drawn mask would have read
            dropout = (dropout_p, *random.philox_counters(query.device, math.prod(shape)))
        else:
            keep = _dropout_keep(shape, dropout_p, query.device, query.dtype)
    if is_causal:
        # q, k, v cut as source[0], [1], [2] from one tensor (GPT's projection): one op of source, whose backward
        # writes the three gradients into one buffer laid out like source (fused.PackedCausalAttention says why):
        # the kernels do, and on the cpu the plain version's products
        packed = tiled or query.device == "cpu" and _use_fused(query, key, value)
        source = fused.PackedCausalAttention.source_of(query, key, value) if packed else None
        if source is not None:
            return fused.PackedCausalAttention.apply(source, query, key, value, scale=scale, dropout=dropout,
                                                     keep=keep)
        op = fused.CausalAttention.apply if _use_fused(query, key, value) else fused.CausalAttention.composition
        return op(query, key, value, scale=scale, keep=keep, dropout=dropout)
    return fused.attention(query, key, value, scale, attn_mask, keep)
