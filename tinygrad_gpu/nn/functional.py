"""tinygrad_gpu.nn.functional: losses and layer functions with PyTorch's signatures.

These are compositions of Tensor ops, so their gradients (and second derivatives) come
from the ops they are made of.  The hot ones (cross_entropy, layer_norm, gelu with
approximate="tanh", embedding, causal attention) route to fused ops instead
(``tinygrad_gpu/ops/fused.py``: our CUDA kernels on emu and cuda, ``kernels/fast_cpu.py`` on
cpu), behind the same signatures and computing the same values; ``with
tinygrad_gpu.kernels.fused(False):`` runs the compositions those fused ops name instead.
"""
from __future__ import annotations

import math

import numpy as np

from .. import deferred_checks, dtypes
from .. import device as devices
from ..ops import fused
from .. import kernels
from .. import random
from ..creation import ones
from ..ops import linalg
from ..ops.elementwise import check_broadcast, gelu as _gelu
from ..tensor import Tensor


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


def softmax(x: Tensor, dim: int) -> Tensor:
    return x.softmax(dim)


def log_softmax(x: Tensor, dim: int) -> Tensor:
    return x.log_softmax(dim)


def linear(x: Tensor, weight: Tensor, bias: Tensor = None) -> Tensor:
    """x @ weight.T + bias, with weight stored (out_features, in_features) as in PyTorch (one op:
    ``ops/linalg.py``); a 1-D weight gives x @ weight."""
    if weight.ndim == 2:
        return linalg.linear(x, weight, bias)
    out = x @ weight
    return out if bias is None else out + bias


# ----------------------------------------------------------------------------- losses
def cross_entropy(input: Tensor, target: Tensor, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Softmax cross-entropy between logits and class indices (or class probabilities).

    input: (C,), (N, C) or (N, C, d1, ...) logits; target: (), (N,) or (N, d1, ...) class
    indices (positions equal to `ignore_index` contribute nothing and are not counted in
    the mean), or a float tensor of input's shape holding class probabilities.
    With label smoothing e, the target distribution is (1 - e) one-hot + e uniform.
    """
    _check_reduction("cross_entropy", reduction)
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
        losses = -(target * input.log_softmax(class_dim)).sum(class_dim)
        return losses if reduction == "none" else losses.sum() if reduction == "sum" else losses.mean()

    expected = input.shape[:1] + input.shape[2:] if input.ndim >= 2 else ()
    if target.shape != expected:
        raise ValueError(f"cross_entropy: input of shape {input.shape} needs class-index targets of shape "
                         f"{expected}, got {target.shape}")
    if dtypes.category(target.dtype) != 1:
        raise TypeError(f"cross_entropy: class-index targets must be integers, got {target.dtype}")
    # One row of class scores per target: classes last, everything else flattened.
    rows = input.movedim(class_dim, -1).reshape(-1, n_classes) if input.ndim >= 2 else input.reshape(1, n_classes)
    labels = target.reshape(-1)
    ids = labels.data                                    # checked on the arrays: no graph to record here
    valid = f"for {n_classes} classes (valid: 0..{n_classes - 1}, or ignore_index={ignore_index})"
    with devices.use(labels.device):
        kept_ids = ids != ignore_index
        bad = kept_ids & ((ids < 0) | (ids >= n_classes))
        count = kept_ids.sum().astype(input.dtype)
        if devices.is_cuda(labels.device):    # read with the next value the host reads: no sync here
            deferred_checks.expect_none(labels.device, bad, IndexError,
                                        f"cross_entropy: a target is out of range {valid}")
        elif bad.any():
            raise IndexError(f"cross_entropy: target {ids[bad][0].item()} is out of range {valid}")
    op = fused.CrossEntropyRows.apply if _use_fused(rows) else fused.CrossEntropyRows.composition
    nll = op(rows, labels, ignore_index=ignore_index, label_smoothing=label_smoothing)
    if reduction == "none":
        return nll.reshape(target.shape)
    if reduction == "sum":
        return nll.sum()
    return nll.sum() / Tensor._wrap(count, labels.device)      # 0 kept targets gives nan, as in PyTorch


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    _check_reduction("mse_loss", reduction)
    check_broadcast("mse_loss", input.shape, target.shape)
    diff = input - target
    squared = diff * diff
    return squared if reduction == "none" else squared.sum() if reduction == "sum" else squared.mean()


# ----------------------------------------------------------------------------- layers
def layer_norm(x: Tensor, normalized_shape, weight: Tensor = None, bias: Tensor = None,
               eps: float = 1e-5) -> Tensor:
    """Normalise over the last len(normalized_shape) dims to mean 0, variance 1; then scale and shift."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(normalized_shape)
    if x.shape[x.ndim - k:] != normalized_shape:
        raise ValueError(f"layer_norm: input of shape {x.shape} does not end with normalized_shape "
                         f"{normalized_shape}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.shape != normalized_shape:
            raise ValueError(f"layer_norm: {name} of shape {t.shape} does not match normalized_shape "
                             f"{normalized_shape}")
    n = math.prod(normalized_shape)
    weight = weight.reshape(n) if weight is not None else ones(n, dtype=x.dtype, device=x.device)
    bias = () if bias is None else (bias.reshape(n),)          # no shift: nothing to add, no gradient to sum
    op = fused.LayerNormRows.apply if _use_fused(x, weight, *bias) and x.numel() else fused.LayerNormRows.composition
    return op(x, weight, *bias, eps=eps)


def embedding(input: Tensor, weight: Tensor) -> Tensor:
    """Rows of `weight` picked by the integer tensor `input`; repeated ids add up their gradients."""
    if dtypes.category(input.dtype) != 1:
        raise TypeError(f"embedding: indices must be an integer tensor, got {input.dtype}")
    n, ids = weight.shape[0], input.data
    valid = f"for {n} embeddings (valid: 0..{n - 1})"
    if devices.is_cuda(input.device):         # read with the next value the host reads: no sync here
        if input.numel():
            with devices.use(input.device):       # the extremes say it all, without an array of flags
                deferred_checks.expect_none(input.device, (ids.min() < 0) | (ids.max() >= n), IndexError,
                                            f"embedding: an index is out of range {valid}")
    elif input.numel() and (ids.min() < 0 or ids.max() >= n):
        raise IndexError(f"embedding: index {ids.max() if ids.max() >= n else ids.min()} is out of range {valid}")
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
    return x * _dropout_keep(x.shape, p, x.device, x.dtype)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float = None) -> Tensor:
    """softmax(q k^T * scale + mask) v over the last two dims of (..., L, E), (..., S, E), (..., S, Ev).

    is_causal: position i attends to positions <= i.  attn_mask: bool (True = may attend) or
    float (added to the scores), broadcastable to (..., L, S).
    """
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1], got {dropout_p}")
    shapes = f"query {query.shape}, key {key.shape} and value {value.shape}"
    if min(query.ndim, key.ndim, value.ndim) < 2 or query.shape[-1] != key.shape[-1] \
            or key.shape[-2] != value.shape[-2]:
        raise ValueError(f"scaled_dot_product_attention: {shapes} do not fit (need (..., L, E), (..., S, E), "
                         "(..., S, Ev))")
    try:
        np.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except ValueError:
        raise ValueError(f"scaled_dot_product_attention: the batch dimensions of {shapes} cannot be broadcast "
                         "together") from None
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    keep = None
    if dropout_p:            # one mask for the attention weights, of the scores' shape
        shape = (*np.broadcast_shapes(query.shape[:-2], key.shape[:-2]), query.shape[-2], key.shape[-2])
        keep = _dropout_keep(shape, dropout_p, query.device, query.dtype)
    if is_causal:
        op = fused.CausalAttention.apply if _use_fused(query, key, value) else fused.CausalAttention.composition
        return op(query, key, value, scale=scale, keep=keep)
    return fused.attention(query, key, value, scale, attn_mask, keep)
