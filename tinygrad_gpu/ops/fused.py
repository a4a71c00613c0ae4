"""Fused ops: autograd Functions whose forward and backward each run one of our kernels.

Each Function computes what a composition of Tensor ops in ``nn.functional`` computes, but
in one kernel per direction instead of a dozen array operations (``tinygrad_gpu/kernels``):
the ``.cu`` kernel on ``emu`` and ``cuda`` for float32 data, its NumPy reference on ``cpu``
and for other dtypes.  ``nn.functional`` routes its hot ops here.

Second derivatives.  A kernel computes numbers, not a graph.  When a backward runs with
grad mode on (``backward(create_graph=True)``), each Function returns the same gradient
written as Tensor ops instead, which records a graph that can be differentiated again.
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from .. import random

from ..kernels import causal_softmax, cross_entropy, embedding_backward, gelu, layernorm, runtime
from .elementwise import GeluTanh as _GeluTanhOp
from ..tensor import Function, Tensor, is_grad_enabled


class CrossEntropyRows(Function):
    """The loss of each row of (N, C) logits against (N,) class indices; 0 where the index is ignored."""

    fresh_gradients = True

    def forward(ctx, logits, labels, ignore_index, label_smoothing):
        ctx.save_for_backward(logits, labels)
        ctx.ignore_index, ctx.smoothing = ignore_index, label_smoothing
        losses, ctx.lse = cross_entropy.forward(logits.data, labels.data, ignore_index, label_smoothing, ctx.device)
        return losses

    def backward(ctx, grad):
        logits, labels = ctx.saved_tensors
        if is_grad_enabled():               # d loss / d logits = softmax - e / C - (1 - e) onehot, per kept row
            xp, (n, c) = ctx.xp, logits.shape
            kept = labels.data != ctx.ignore_index
            onehot = xp.zeros((n, c), dtype=logits.dtype)
            onehot[xp.arange(n)[kept], labels.data[kept]] = 1 - ctx.smoothing
            row_grad = (grad * Tensor._wrap(kept.astype(logits.dtype), ctx.device)).unsqueeze(1)
            return (logits.softmax(1) - ctx.smoothing / c - Tensor._wrap(onehot, ctx.device)) * row_grad, None
        dlogits = cross_entropy.backward(logits.data, labels.data, ctx.lse, grad.data, ctx.ignore_index, ctx.smoothing,
                                         ctx.device)
        return Tensor._wrap(dlogits, ctx.device), None


class LayerNormRows(Function):
    """Layer norm over the last n values of x (..., n), scaled by weight (n,) and shifted by bias (n,),
    if there is one: the kernel sees x as (rows, n), every leading dimension a row."""

    fresh_gradients = True

    def forward(ctx, x, weight, bias=None, eps=1e-5):
        ctx.save_for_backward(x, weight)
        ctx.eps, ctx.has_bias = eps, bias is not None
        rows = x.data.reshape(-1, weight.shape[0])
        out, ctx.mean, ctx.rstd = layernorm.forward(rows, weight.data, None if bias is None else bias.data, eps,
                                                    ctx.device)
        return out.reshape(x.shape)

    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        need_weight = ctx.needs_input_grad[1]
        need_bias = ctx.has_bias and ctx.needs_input_grad[2]
        n = weight.shape[0]
        if is_grad_enabled():
            x, grad = x.reshape(-1, n), grad.reshape(-1, n)
            centered = x - x.mean(1, keepdim=True)
            rstd = ((centered * centered).mean(1, keepdim=True) + ctx.eps).rsqrt()
            xhat = centered * rstd
            g = grad * weight
            dx = rstd * (g - g.mean(1, keepdim=True) - xhat * (g * xhat).mean(1, keepdim=True))
            return (dx.reshape(ctx.input_meta[0]), (grad * xhat).sum(0) if need_weight else None,
                    *((grad.sum(0) if need_bias else None,) if ctx.has_bias else ()))
        dx, dweight, dbias = layernorm.backward(x.data.reshape(-1, n), weight.data, ctx.mean, ctx.rstd,
                                                grad.data.reshape(-1, n), need_weight or need_bias, ctx.device,
                                                overwrite=ctx.grad_is_spare)
        grads = (dx.reshape(x.shape), dweight, dbias)[:3 if ctx.has_bias else 2]
        return tuple(None if a is None or not needed else Tensor._wrap(a, ctx.device)
                     for a, needed in zip(grads, (True, need_weight, need_bias)))


class GeluTanh(Function):
    """GELU with the tanh approximation."""

    fresh_gradients = True

    def forward(ctx, x):
        ctx.save_for_backward(x)
        if not ctx.recording:
            return gelu.forward(x.data, ctx.device)
        out, ctx.slope = gelu.forward_keeping_slope(x.data, ctx.device)
        return out

    def backward(ctx, grad):
        if is_grad_enabled():               # the unfused op's backward is already written in Tensor ops
            return _GeluTanhOp.backward(ctx, grad)
        (x,) = ctx.saved_tensors
        return Tensor._wrap(gelu.backward(x.data, grad.data, ctx.device, ctx.slope, overwrite=ctx.grad_is_spare),
                            ctx.device)


class CausalAttention(Function):
    """dropout(softmax(scale q k^T, key j > query i masked out)) v, for q (..., L, E), k (..., S, E),
    v (..., S, Ev).

    One op where the composition is eight (a transpose, two products, the scale, the mask, the
    softmax, the dropout) in each direction. The softmax is the causal_softmax kernel; the
    products are the array library's. The backward, written out (p: the probabilities, keep: the
    dropout's mask divided by 1 - dropout_p, or 1; dy: the output's gradient):

        dv = (p keep)^T dy      dp = (dy v^T) keep      ds = softmax backward of dp (scale included)
        dq = ds k               dk = ds^T q
    """

    fresh_gradients = True

    def forward(ctx, q, k, v, scale, dropout_p):
        ctx.save_for_backward(q, k, v)
        ctx.scale, ctx.keep = scale, None
        scores = q.data @ k.data.swapaxes(-1, -2)           # a fresh array: the softmax may overwrite it
        ctx.probs = weights = causal_softmax.forward(scores, scale, ctx.device, overwrite=True)
        if dropout_p:
            draws = random.generator(ctx.device).random(weights.shape, dtype=np.float32)
            scale_kept = 1 / (1 - dropout_p) if dropout_p < 1 else 0.0      # p = 1 keeps nothing
            ctx.keep = (draws >= dropout_p).astype(weights.dtype) * weights.dtype.type(scale_kept)
            weights = weights * ctx.keep
        ctx.weights = weights
        return _product_laid_out_like(weights, v.data, q.data)

    def backward(ctx, grad):
        q, k, v = ctx.saved_tensors
        need_q, need_k, need_v = ctx.needs_input_grad
        keep = None if ctx.keep is None else Tensor._wrap(ctx.keep, ctx.device)
        if is_grad_enabled():               # the same steps in Tensor ops, p recomputed as a function of q and k
            p = _causal_softmax_as_tensors(q @ k.transpose(-2, -1), ctx.scale)
            dp = grad @ v.transpose(-2, -1)
            dp, weights = (dp, p) if keep is None else (dp * keep, p * keep)
            ds = ctx.scale * p * (dp - (dp * p).sum(-1, keepdim=True))
            return (ds @ k if need_q else None, ds.transpose(-2, -1) @ q if need_k else None,
                    weights.transpose(-2, -1) @ grad if need_v else None)
        dy, ds = grad.data, None
        if need_q or need_k:
            dp = dy @ v.data.swapaxes(-1, -2)
            if keep is not None:
                dp *= ctx.keep
            ds = causal_softmax.backward(ctx.probs, dp, ctx.scale, ctx.device, overwrite=True)
        grads = (ds @ k.data if need_q else None, ds.swapaxes(-1, -2) @ q.data if need_k else None,
                 ctx.weights.swapaxes(-1, -2) @ dy if need_v else None)
        return tuple(None if g is None else Tensor._wrap(g, ctx.device) for g in grads)


def _product_laid_out_like(a, b, like):
    """a @ b, its axes in memory in the order of `like`'s strides. Attention's output is laid out like
    its query: q cut from a (batch, time, heads, size) projection gives an output whose heads merge
    back into (batch, time, channels) with a view instead of a copy."""
    if runtime.array_module_of(like) is not np:     # on a GPU the copy at the merge costs little
        return a @ b
    shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    return np.matmul(a, b, out=np.empty_like(like, dtype=np.result_type(a, b), shape=shape))


def _causal_softmax_as_tensors(scores: Tensor, scale: float) -> Tensor:
    """What the causal_softmax kernel computes, as a composition of Tensor ops (differentiable again)."""
    future = causal_softmax.future_mask(devices.array_module(scores.device), *scores.shape[-2:])
    return (scores * scale).masked_fill(Tensor._wrap(future, scores.device), float("-inf")).softmax(-1)


class EmbeddingLookup(Function):
    """weight[ids]: a gather.  Its gradient is EmbeddingScatter, whose gradient is this again."""

    fresh_gradients = True

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
        return embedding_backward.embedding_backward(ids.data.reshape(-1), grad.data.reshape(-1, dim), n_embeddings,
                                                     ctx.device)

    def backward(ctx, grad):
        return EmbeddingLookup.apply(grad, ctx.ids), None
