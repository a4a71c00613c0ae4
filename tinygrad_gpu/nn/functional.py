"""tinygrad_gpu.nn.functional: losses and layer functions with PyTorch's signatures.

These are compositions of Tensor ops, so their gradients (and second derivatives) come
from the ops they are made of.  The hot ones (cross_entropy, layer_norm, gelu with
approximate="tanh", embedding, causal attention) route to fused ops instead
(``tinygrad_gpu/ops/fused.py``: our CUDA kernels on emu and cuda, ``kernels/compiled_cpu.py`` or
``kernels/fast_cpu.py`` on cpu), behind the same signatures and computing the same values; ``with
tinygrad_gpu.kernels.fused(False):`` runs the compositions those fused ops name instead.

This file holds the hot ones and the classification losses; the rest live by family and are reached from
here: activations and softmax (nn/activations.py), pointwise losses (nn/pointwise_losses.py), group and batch
norm (nn/normalization.py), pad (nn/padding.py), cosine similarity (nn/distance.py), attention's edge rules
(nn/attention.py), interpolate (nn/resampling.py), convolution and unfold (ops/conv.py), pooling
(ops/pooling.py). Each follows PyTorch's checks in PyTorch's order, so that a wrong call raises the exception
PyTorch raises (tests/test_torch_differential.py compares the two).
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
from ..creation import ones, zeros_like
from ..ops import linalg
from ..ops.activations import Softplus
from ..ops.elementwise import check_broadcast, gelu as _gelu, where
from ..ops.losses import BinaryCrossEntropy
from ..ops.movement import normalize_dim
from ..tensor import Tensor
from ..ops.conv import conv1d, conv2d, conv_transpose2d, unfold  # noqa: F401  (F.conv2d, ...)
from ..ops.pooling import (adaptive_avg_pool2d, avg_pool1d, avg_pool2d, max_pool1d,  # noqa: F401  (F.max_pool2d, ...)
                           max_pool2d)
from .activations import (celu, elu, glu, hardshrink, hardsigmoid, hardswish, hardtanh, leaky_relu,  # noqa: F401
                          log_softmax, logsigmoid, mish, relu6, selu, silu, softmax, softmin, softplus, softshrink,
                          softsign, tanhshrink, threshold)
from . import attention as _attention
from .distance import cosine_similarity  # noqa: F401  (F.cosine_similarity)
from ..ops.compositions import vector_norm as _vector_norm
from .normalization import batch_norm, group_norm  # noqa: F401  (F.batch_norm, F.group_norm)
from .padding import pad  # noqa: F401  (F.pad)
from .pointwise_losses import (check_reduction as _check_reduction, huber_loss, kl_div, l1_loss,  # noqa: F401
                               mse_loss, smooth_l1_loss)
from .pointwise_losses import apply_reduction as _reduce
from .resampling import interpolate, max_unpool2d  # noqa: F401  (F.interpolate, F.max_unpool2d)


def _use_fused(*tensors) -> bool:
    """Route to a fused op: unless switched off, for floating-point tensors of one dtype (None: absent)."""
    given = [t for t in tensors if t is not None]
    return kernels.fused_enabled() and given[0].is_floating_point() and all(t.dtype == given[0].dtype for t in given)


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0); an integer tensor keeps its dtype; bool has no relu (a RuntimeError, as in PyTorch)."""
    if inplace:
        raise NotImplementedError("relu: inplace=True is not supported here; use the returned tensor")
    dtypes.reject_bool("relu", input.dtype, error=RuntimeError)
    return input.relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """x * Phi(x), Phi the standard normal CDF; approximate="tanh" uses GPT-2's tanh formula instead.
    The argument is checked before the dtype, as PyTorch does."""
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"gelu: approximate argument must be either 'none' or 'tanh', got {approximate!r}")
    if approximate == "tanh" and _use_fused(x):
        return fused.GeluTanh.apply(x)
    return _gelu(x, approximate)


def linear(x: Tensor, weight: Tensor, bias: Tensor = None) -> Tensor:
    """x @ weight.T + bias, with weight stored (out_features, in_features) as in PyTorch (one op:
    ``ops/linalg.py``); a 1-D weight gives x @ weight."""
    if weight.ndim == 2:
        return linalg.linear(x, weight, bias)
    out = x @ weight
    return out if bias is None else out + bias


# ----------------------------------------------------------------------------- losses
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
    if not input.is_floating_point():             # PyTorch's log_softmax refuses integers before any other check
        raise NotImplementedError(f"cross_entropy: not implemented for {input.dtype} logits (as in PyTorch: there "
                                  "is no integer log_softmax); convert them first, e.g. logits.float()")
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
    if target.is_floating_point():                        # class probabilities
        return _probability_targets(input, target, class_dim, label_smoothing, reduction).to(dtype=loss_dtype)

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


def _probability_targets(input, target, class_dim, label_smoothing, reduction, per_class=None) -> Tensor:
    """cross_entropy against class probabilities: -sum over the classes of target * log_softmax(input) (each
    class weighted by per_class, when given); label smoothing mixes the uniform distribution into target."""
    if target.shape != input.shape:
        raise ValueError(f"cross_entropy: probability targets must have the input's shape {input.shape}, "
                         f"got {target.shape}")
    if label_smoothing:
        target = target * (1 - label_smoothing) + label_smoothing / input.shape[class_dim]
    terms = target * input.log_softmax(class_dim)
    return _reduce(-(terms if per_class is None else terms * per_class).sum(class_dim), reduction)


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
    per_class = weight.to(dtype=input.dtype).reshape((n_classes,) + (1,) * (input.ndim - class_dim - 1))
    if target.is_floating_point():                        # class probabilities
        return _probability_targets(input, target, class_dim, label_smoothing, reduction, per_class)
    log_probs = input.log_softmax(class_dim)
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
    # PyTorch checks both, each element in [0, 1] (so nan fails too): probabilities and their targets
    for name, v in (("input", x), ("target", t)):
        message = f"binary_cross_entropy: all elements of {name} must be probabilities, between 0 and 1"
        with devices.use(v.device):
            outside = ~((v.data >= 0) & (v.data <= 1))
            deferred_checks.check(v.device, outside, RuntimeError, message,
                                  first_bad=lambda: f"{message}, got {v.data[outside][0]}")
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


# ----------------------------------------------------------------------------- one-hot, normalising
def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 tensor of shape (*tensor.shape, num_classes): 1 at each value's class, 0 elsewhere.
    num_classes=-1 takes the largest value + 1 (a read of the data: the result's shape depends on it)."""
    if tensor.dtype != dtypes.int64:                     # PyTorch takes int64 (LongTensor) only
        raise RuntimeError(f"one_hot: expects an int64 tensor of class indices, got {tensor.dtype}; convert it "
                           "first, e.g. x.long()")
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


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None) -> Tensor:
    """x / max(||x||_p, eps) along dim: unit vectors, and a zero vector stays zero. p is any real or +-inf
    (0 counts the nonzero elements, as PyTorch's vector_norm does); the norm of 16-bit floats is computed in
    float32 and rounded once, and eps is rounded to the input's dtype (1e-12 is 0 in float16, so a zero vector
    gives 0 / 0 = nan there, as in PyTorch). Integer tensors are refused, as by PyTorch's norm."""
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported here; use the returned tensor")
    if not input.is_floating_point():
        raise RuntimeError(f"normalize: the norm needs a floating-point tensor, got {input.dtype}; convert it "
                           "first, e.g. x.float()")
    dim = normalize_dim("normalize", dim, max(input.ndim, 1))
    return input / _vector_norm(input, p, dim, keepdim=True).clamp(min=eps)


# ----------------------------------------------------------------------------- layers
def layer_norm(x: Tensor, normalized_shape, weight: Tensor = None, bias: Tensor = None,
               eps: float = 1e-5, *, out_dtype=None) -> Tensor:
    """Normalise over the last len(normalized_shape) dims to mean 0, variance 1; then scale and shift.

    out_dtype (not PyTorch's): the result's dtype, float16 or bfloat16 for float32 data (after autocast's
    cast up): computed in float32 and rounded once, as .to(out_dtype) of the float32 result would be, but
    written so by the kernel, without a cast of its own each way (nn.LayerNorm's feeds_products)."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(normalized_shape)
    if k > x.ndim or x.shape[x.ndim - k:] != normalized_shape:
        raise RuntimeError(f"layer_norm: input of shape {x.shape} does not end with normalized_shape "
                           f"{normalized_shape}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.shape != normalized_shape:
            raise RuntimeError(f"layer_norm: {name} of shape {t.shape} does not match normalized_shape "
                               f"{normalized_shape}")
    if x.numel() == 0:          # nothing to normalise; the parameters stay in the graph (their gradients: 0)
        out = x * 1
        out = out if weight is None else out * weight
        out = out if bias is None else out + bias
        return out if out_dtype is None else out.to(dtype=out_dtype)
    x, weight, bias = autocast_mode.float32(x, weight, bias)     # autocast: the statistics need float32
    if out_dtype is not None and (x.dtype != dtypes.float32 or not dtypes.is_half(out_dtype)):
        raise ValueError(f"layer_norm: out_dtype {np.dtype(out_dtype)} is for float32 data and float16 or bfloat16 "
                         f"out, got {x.dtype} data; leave it out to get the data's dtype")
    n = math.prod(normalized_shape)
    weight = weight.reshape(n) if weight is not None else ones(n, dtype=x.dtype, device=x.device)
    bias = () if bias is None else (bias.reshape(n),)          # no shift: nothing to add, no gradient to sum
    op = fused.LayerNormRows.apply if _use_fused(x, weight, *bias) and x.numel() else fused.LayerNormRows.composition
    return op(x, weight, *bias, eps=eps, out_dtype=None if out_dtype is None else np.dtype(out_dtype))


def embedding(input: Tensor, weight: Tensor, padding_idx: int = None, max_norm: float = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of the (num_embeddings, dim) `weight` picked by the integer tensor `input`: shape input.shape +
    (dim,). Repeated ids add up their gradients.

    padding_idx (negative counts from the end): that row is still looked up, but it gets no gradient, so
    a padding token's vector stays as it was initialised (usually zeros), as in PyTorch."""
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: max_norm, scale_grad_by_freq and sparse are not supported here")
    if input.dtype not in (dtypes.int64, dtypes.int32):
        raise RuntimeError(f"embedding: indices must be an integer tensor (int64 or int32), got {input.dtype}; convert "
                           "them first, e.g. idx.long()")
    if weight.ndim != 2:
        raise RuntimeError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got shape {weight.shape}")
    n, ids = weight.shape[0], input.data
    if padding_idx is not None:
        if padding_idx > 0 and padding_idx >= n or padding_idx < -n:     # 0 passes unchecked, even with no rows
            # PyTorch checks this with an assert statement, hence the AssertionError
            raise AssertionError(f"embedding: padding_idx={padding_idx} must be within num_embeddings (valid: "
                                 f"{-n}..{n - 1})")
        padding_idx = int(padding_idx) % n if n else 0
    if n == 0 and input.numel():
        raise RuntimeError(f"embedding: weight of shape {weight.shape} has no rows to look up {input.numel()} "
                           "indices in")
    valid = f"for {n} embeddings (valid: 0..{n - 1})"
    # PyTorch's gather of empty (dim 0) rows reports a bad index as a RuntimeError, its ordinary one an IndexError
    error = RuntimeError if weight.shape[1] == 0 else IndexError
    with devices.use(input.device):
        deferred_checks.check_range(input.device, ids, n, error, f"embedding: an index is out of range {valid}",
                                    first_bad=lambda bad: f"embedding: index {ids[bad][0]} is out of range {valid}")
    rows = fused.EmbeddingLookup.apply(weight, input) if _use_fused(weight) else weight[input]
    if padding_idx is None or not rows.requires_grad:
        return rows
    # the same values, but the positions that read the padding row pass no gradient back to it
    return where((input == padding_idx).unsqueeze(-1), rows.detach(), rows)


def _dropout_keep(shape, p: float, device: str, dtype):
    """The dropout's mask: 1 / (1 - p) where an element is kept (each with probability 1 - p), else 0."""
    with devices.use(device):
        kept = random.generator(device).random(shape, dtype=np.float32) >= p
        return Tensor._wrap(kept.astype(dtype) * (1.0 / (1.0 - p) if p < 1 else 0.0), device)


def dropout(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability p and scale the rest by 1 / (1 - p) (only when training).

    As in PyTorch: outside training, with p = 0, or for an empty tensor, x comes back as it is; p = 1 gives
    x * 0 in x's dtype (nan for inf, and zeros of an integer or bool tensor); anything else needs a
    floating-point tensor, since the kept elements are scaled by a float."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1] (a probability), got {p}")
    if inplace:
        raise NotImplementedError("dropout: inplace=True is not supported here; use the returned tensor")
    if not training or p == 0.0 or x.numel() == 0:
        return x
    if p == 1.0:
        return x * 0.0 if x.is_floating_point() else zeros_like(x)
    if not x.is_floating_point():
        raise RuntimeError(f"dropout: the kept elements are scaled by 1 / (1 - p) = {1 / (1 - p):g}, a float, which "
                           f"a {x.dtype} tensor cannot hold; convert it first, e.g. x.float()")
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
    float (added to the scores), broadcastable to (..., L, S). A query that may attend to no key gets 0.
    The rules at the edges (empty dims, nan and infinities, rows with nothing to attend to) are PyTorch's:
    nn/attention.py spells them out.
    """
    if is_causal and attn_mask is not None:
        raise RuntimeError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1], got {dropout_p}")
    shapes = f"query {query.shape}, key {key.shape} and value {value.shape}"
    if min(query.ndim, key.ndim, value.ndim) < 2:
        raise RuntimeError(f"scaled_dot_product_attention: {shapes} must all have at least 2 dims "
                           "((..., L, E), (..., S, E), (..., S, Ev))")
    try:
        batch = tuple(np.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2]))
    except ValueError:
        raise RuntimeError(f"scaled_dot_product_attention: the batch dimensions of {shapes} cannot be broadcast "
                           "together") from None
    out_shape = batch + (query.shape[-2], value.shape[-1])
    if math.prod(out_shape) == 0 or value.numel() == 0:          # nothing to compute (PyTorch checks no further)
        return _attention.no_values(query, out_shape)
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise RuntimeError(f"scaled_dot_product_attention: {shapes} do not fit (need (..., L, E), (..., S, E), "
                           "(..., S, Ev))")
    if query.shape[-1] == 0:
        scale = 1.0                  # the scores are empty sums, 0, whatever the scale (PyTorch's is inf here)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    float_mask = attn_mask if attn_mask is not None and attn_mask.is_floating_point() else None
    query, key, value, float_mask = autocast_mode.low_precision(query, key, value, float_mask)   # its products
    attn_mask = float_mask if float_mask is not None else attn_mask
    keep = dropout = None
    tiled = is_causal and _use_fused(query, key, value) and fused.CausalAttention.runs_kernel(query, key, value,
                                                                                              dropout_p)
    if dropout_p:            # one mask for the attention weights, of the scores' shape
        shape = (*np.broadcast_shapes(query.shape[:-2], key.shape[:-2]), query.shape[-2], key.shape[-2])
        if tiled:            # drawn inside the kernels, from the counters a drawn mask would have read
            dropout = (dropout_p, *random.philox_counters(query.device, math.prod(shape)))
        else:
            keep = _dropout_keep(shape, dropout_p, query.device, query.dtype)
    if is_causal and _use_fused(query, key, value):
        # q, k, v cut as source[0], [1], [2] from one tensor (GPT's projection): one op of source, whose backward
        # writes the three gradients into one buffer laid out like source (fused.PackedCausalAttention says why):
        # the kernels do (the cpu's twin of them too), and elsewhere on the cpu the plain version's products
        packed = tiled or query.device == "cpu"
        source = fused.PackedCausalAttention.source_of(query, key, value) if packed else None
        if source is not None:
            out = fused.PackedCausalAttention.apply(source, query, key, value, scale=scale, dropout=dropout,
                                                    keep=keep)
        else:
            out = fused.CausalAttention.apply(query, key, value, scale=scale, keep=keep, dropout=dropout)
        # The fused ops give PyTorch's numbers for finite inputs. A nan or an infinity among them shows in the
        # output, and PyTorch's result then follows rules of its own (nn/attention.py): on the host, where a
        # look at the output costs little, such an output is computed again by the composition below.
        if devices.is_cuda(query.device) or _all_finite(out):
            return out
    if dropout is not None:  # the tiled kernels would have drawn it; the composition needs it as a mask
        keep = fused.CausalAttention._keep(query, key, None, dropout)
    return _attention.attention(query, key, value, scale, attn_mask, is_causal, keep,
                               _attention.skips_nan(query, key, value, attn_mask, dropout_p))


def _all_finite(t: Tensor) -> bool:
    """No nan or infinity in t (a read of its data: on the host, one pass over it)."""
    with devices.use(t.device):
        return bool(devices.array_module(t.device).isfinite(t.data).all())
