"""Fused ops: autograd Functions whose forward and backward each run one of our kernels.

Each Function is one op where a composition of Tensor ops would be a dozen: one kernel per
direction (``tinygrad_gpu/kernels``): the ``.cu`` kernel on ``emu`` and ``cuda`` for float32
data, on ``cpu`` the fast versions of ``kernels/fast_cpu.py`` (or the reference itself, where
it is cheap already: cross-entropy), and the NumPy reference for other dtypes.
``nn.functional`` routes its hot ops here.

Each one states what it computes as its ``composition``: the same op written as Tensor
ops, defined once and used twice. It is what runs when fused ops are switched off
(``kernels.fused(False)``), and what the engine differentiates when a graph of the backward
is wanted (``create_graph=True``): a kernel computes numbers, not a graph.
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from .. import dtypes
from .. import kernels
from ..tensor import Function, Tensor
from .elementwise import gelu_tanh
from .linalg import product


class CrossEntropyRows(Function):
    """The loss of each row of (N, C) logits against (N,) class indices; 0 where the index is ignored."""

    returns_spare_gradients = True

    @staticmethod
    def composition(logits, labels, ignore_index=-100, label_smoothing=0.0):
        log_probs = logits.log_softmax(1)
        kept = labels != ignore_index
        nll = -log_probs.gather(1, labels.masked_fill(~kept, 0).long().unsqueeze(1)).squeeze(1)
        if label_smoothing:
            nll = (1 - label_smoothing) * nll - label_smoothing * log_probs.mean(1)
        return nll.masked_fill(~kept, 0.0)

    def forward(ctx, logits, labels, ignore_index=-100, label_smoothing=0.0):
        ctx.save_for_backward(logits, labels)
        ctx.ignore_index, ctx.smoothing = ignore_index, label_smoothing
        losses, ctx.lse = kernels.cross_entropy.forward(logits.data, labels.data, ignore_index, label_smoothing,
                                                        ctx.device)
        return losses

    def backward(ctx, grad):
        logits, labels = ctx.saved_tensors
        dlogits = kernels.cross_entropy.backward(logits.data, labels.data, ctx.lse, grad.data, ctx.ignore_index,
                                                 ctx.smoothing, ctx.device)
        return Tensor._wrap(dlogits, ctx.device), None


class LayerNormRows(Function):
    """Layer norm over the last n values of x (..., n), scaled by weight (n,) and shifted by bias (n,),
    if there is one: the kernel sees x as (rows, n), every leading dimension a row."""

    returns_spare_gradients = True

    @staticmethod
    def composition(x, weight, bias=None, eps=1e-5):
        rows = x.reshape(-1, weight.shape[0])
        centered = rows - rows.mean(1, keepdim=True)
        out = centered * ((centered * centered).mean(1, keepdim=True) + eps).rsqrt() * weight
        return (out if bias is None else out + bias).reshape(x.shape)

    def forward(ctx, x, weight, bias=None, eps=1e-5):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        rows = x.data.reshape(-1, weight.shape[0])
        out, ctx.mean, ctx.rstd = kernels.layernorm.forward(rows, weight.data, None if bias is None else bias.data,
                                                            eps, ctx.device)
        return out.reshape(x.shape)

    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        n = weight.shape[0]
        need_weight = ctx.needs_input_grad[1]
        need_bias = ctx.has_bias and ctx.needs_input_grad[2]
        dx, dweight, dbias = kernels.layernorm.backward(x.data.reshape(-1, n), weight.data, ctx.mean, ctx.rstd,
                                                        grad.data.reshape(-1, n), need_weight or need_bias,
                                                        ctx.device, dout_is_spare=ctx.grad_is_spare)
        grads = (dx.reshape(x.shape), dweight, dbias)[:3 if ctx.has_bias else 2]
        return tuple(None if a is None or not needed else Tensor._wrap(a, ctx.device)
                     for a, needed in zip(grads, (True, need_weight, need_bias)))


class GeluTanh(Function):
    """GELU with the tanh approximation, one op (elementwise.gelu_tanh is its composition)."""

    returns_spare_gradients = True
    composition = staticmethod(gelu_tanh)

    def forward(ctx, x):
        ctx.save_for_backward(x)
        if not ctx.recording:
            return kernels.gelu.forward(x.data, ctx.device)
        out, ctx.slope = kernels.gelu.forward_keeping_slope(x.data, ctx.device)
        return out

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        dx = kernels.gelu.backward(x.data, grad.data, ctx.device, ctx.slope, dy_is_spare=ctx.grad_is_spare)
        return Tensor._wrap(dx, ctx.device)


def attention(q: Tensor, k: Tensor, v: Tensor, scale: float, mask: Tensor = None, keep: Tensor = None) -> Tensor:
    """(softmax(scale q k^T + mask) * keep) v as Tensor ops. mask: bool (True: may attend) or float
    (added to the scores), or None; keep: the dropout's mask, scaled by 1 / (1 - dropout_p), or None."""
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == np.bool_ else scores + mask
    weights = scores.softmax(-1)
    return (weights if keep is None else weights * keep) @ v


class CausalAttention(Function):
    """dropout(softmax(scale q k^T, key j > query i masked out)) v, for q (..., L, E), k (..., S, E),
    v (..., S, Ev); keep is the dropout's mask, scaled by 1 / (1 - dropout_p), or None.

    One op where the composition is eight (a transpose, two products, the scale, the mask, the
    softmax, the dropout) in each direction. The softmax is the causal_softmax kernel; the
    products are the array library's. The backward, written out (p: the probabilities; dy: the
    output's gradient):

        dv = (p keep)^T dy      dp = (dy v^T) keep      ds = softmax backward of dp (scale included)
        dq = ds k               dk = ds^T q
    """

    returns_spare_gradients = True

    @staticmethod
    def composition(q, k, v, scale, keep=None):
        xp, L, S = devices.array_module(q.device), q.shape[-2], k.shape[-2]
        visible = Tensor._wrap(xp.tril(xp.ones((L, S), dtype=bool)), q.device)      # key j <= query i
        return attention(q, k, v, scale, visible, keep)

    def forward(ctx, q, k, v, scale, keep=None):
        ctx.save_for_backward(q, k, v)
        ctx.scale, ctx.keep = scale, None if keep is None else keep.data
        scores = product(q.data, k.data.swapaxes(-1, -2))   # a new array: the softmax may compute in it
        ctx.probs = weights = kernels.causal_softmax.forward(scores, scale, ctx.device, scores_are_spare=True)
        if keep is not None:
            weights = weights * ctx.keep
        ctx.weights = weights
        return _product_laid_out_like(weights, v.data, q.data)

    def backward(ctx, grad):
        q, k, v = ctx.saved_tensors
        need_q, need_k, need_v = ctx.needs_input_grad
        dy, ds = grad.data, None
        if need_q or need_k:
            dp = product(dy, v.data.swapaxes(-1, -2))
            if ctx.keep is not None:
                dp *= ctx.keep
            ds = kernels.causal_softmax.backward(ctx.probs, dp, ctx.scale, ctx.device, dprobs_are_spare=True)
        grads = (product(ds, k.data) if need_q else None, product(ds.swapaxes(-1, -2), q.data) if need_k else None,
                 product(ctx.weights.swapaxes(-1, -2), dy) if need_v else None)
        return tuple(None if g is None else Tensor._wrap(g, ctx.device) for g in grads)


def _product_laid_out_like(a, b, like):
    """a @ b, its axes in memory in the order of `like`'s strides. Attention's output is laid out like
    its query: q cut from a (batch, time, heads, size) projection gives an output whose heads merge
    back into (batch, time, channels) with a view instead of a copy."""
    if not isinstance(like, np.ndarray) or dtypes.is_half(a.dtype):    # on a GPU the copy at the merge costs
        return product(a, b)                                            # little; 16-bit: see linalg.product
    shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    return np.matmul(a, b, out=np.empty_like(like, dtype=np.result_type(a, b), shape=shape))


class EmbeddingLookup(Function):
    """weight[ids]: a gather.  Its gradient is EmbeddingScatter, whose gradient is this again."""

    returns_spare_gradients = True

    def forward(ctx, weight, ids):
        ctx.ids, ctx.n_embeddings = ids, weight.shape[0]
        return weight.data[ids.data]

    def backward(ctx, grad):
        return EmbeddingScatter.apply(grad, ctx.ids, n_embeddings=ctx.n_embeddings), None


class EmbeddingScatter(Function):
    """Add the rows of grad (ids.shape + (dim,)) into the rows ids of an (n_embeddings, dim) zero tensor."""

    def forward(ctx, grad, ids, n_embeddings):
        ctx.ids = ids
        dim = grad.shape[-1]
        return kernels.embedding_backward.embedding_backward(ids.data.reshape(-1), grad.data.reshape(-1, dim),
                                                             n_embeddings, ctx.device)

    def backward(ctx, grad):
        return EmbeddingLookup.apply(grad, ctx.ids), None
