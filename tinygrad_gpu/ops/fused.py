"""Fused ops: autograd Functions whose forward and backward each run one of our kernels.

Each Function is one op where a composition of Tensor ops would be a dozen: one kernel per
direction (``tinygrad_gpu/kernels``): the ``.cu`` kernel on ``emu`` and ``cuda`` for float32
data, on ``cpu`` the compiled versions of ``kernels/compiled_cpu.py`` or the NumPy ones of
``kernels/fast_cpu.py`` (or the reference itself, where it is cheap already: cross-entropy), and the NumPy reference for other dtypes.
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
from ..amp import autocast_mode
from ..tensor import Function, Tensor, is_grad_enabled
from .elementwise import Cast, gelu_tanh
from .linalg import product, product_with_transposed
from .movement import GetItem


class CrossEntropyRows(Function):
    """The loss of each row of (N, C) logits against (N,) class indices; 0 where the index is ignored."""

    backward_returns_spare = True

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
    if there is one: the kernel sees x as (rows, n), every leading dimension a row. out_dtype: the output's,
    by default x's; a 16-bit one for float32 data (computed in float32, rounded once: the cast a product
    that reads it would make, made by the kernel itself)."""

    backward_returns_spare = True

    @staticmethod
    def composition(x, weight, bias=None, eps=1e-5, out_dtype=None):
        rows = x.reshape(-1, weight.shape[0])
        centered = rows - rows.mean(1, keepdim=True)
        out = centered * ((centered * centered).mean(1, keepdim=True) + eps).rsqrt() * weight
        out = (out if bias is None else out + bias).reshape(x.shape)
        return out if out_dtype is None else out.to(dtype=out_dtype)

    def forward(ctx, x, weight, bias=None, eps=1e-5, out_dtype=None):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        rows = x.data.reshape(-1, weight.shape[0])
        out, ctx.mean, ctx.rstd = kernels.layernorm.forward(rows, weight.data, None if bias is None else bias.data,
                                                            eps, ctx.device, out_dtype)
        return out.reshape(x.shape)

    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        n = weight.shape[0]
        need_weight = ctx.needs_input_grad[1]
        need_bias = ctx.has_bias and ctx.needs_input_grad[2]
        rows, dout = x.data.reshape(-1, n), grad.data.reshape(-1, n)
        # x's gradient from the rest of the graph (a residual stream's), added by the kernel as it writes dx
        in_kernel = kernels.layernorm.adds_in_kernel(ctx.device, rows, weight.data, dout)
        so_far, so_far_is_spare = ctx.take_gradient_so_far(0) if in_kernel else (None, False)
        # the parameters' gradients written where the engine keeps this step's (the kernels write them anyway)
        params_into = (ctx.gradient_slot(1) if in_kernel and need_weight else None,
                       ctx.gradient_slot(2) if in_kernel and need_bias else None)
        dx, dweight, dbias = kernels.layernorm.backward(rows, weight.data, ctx.mean, ctx.rstd, dout,
                                                        need_weight or need_bias, ctx.device,
                                                        dout_is_spare=ctx.grad_output_is_spare, need_bias=need_bias,
                                                        dx_add=None if so_far is None else so_far.data.reshape(-1, n),
                                                        dx_add_is_spare=so_far_is_spare,
                                                        params_into=params_into)
        grads = (dx.reshape(x.shape), dweight, dbias)[:3 if ctx.has_bias else 2]
        return tuple(None if a is None or not needed else Tensor._wrap(a, ctx.device)
                     for a, needed in zip(grads, (True, need_weight, need_bias)))


class GeluTanh(Function):
    """GELU with the tanh approximation, one op (elementwise.gelu_tanh is its composition)."""

    backward_returns_spare = True
    composition = staticmethod(gelu_tanh)

    def forward(ctx, x):
        ctx.save_for_backward(x)
        if not ctx.recording:
            return kernels.gelu.forward(x.data, ctx.device)
        out, ctx.slope = kernels.gelu.forward_keeping_slope(x.data, ctx.device)
        return out

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        dx = kernels.gelu.backward(x.data, grad.data, ctx.device, ctx.slope, dout_is_spare=ctx.grad_output_is_spare)
        return Tensor._wrap(dx, ctx.device)


def attention(q: Tensor, k: Tensor, v: Tensor, scale: float, mask: Tensor = None, keep: Tensor = None) -> Tensor:
    """(softmax(scale q k^T + mask) * keep) v as Tensor ops. mask: bool (True: may attend) or float
    (added to the scores), or None; keep: the dropout's mask, scaled by 1 / (1 - dropout_p), or None."""
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == np.bool_ else scores + mask
        # A query the mask lets see no key attends to nothing: its output and gradients are 0, as in PyTorch
        # (softmax of a row of -inf alone is nan). Its scores become 0 first, so that no nan reaches a backward.
        blind = Tensor._wrap(~(scores.data > -np.inf).any(axis=-1, keepdims=True), scores.device)
        scores = scores.masked_fill(blind, 0.0)
        weights = scores.softmax(-1).masked_fill(blind, 0.0)
    else:
        weights = scores.softmax(-1)
    return (weights if keep is None else weights * keep) @ v


class CausalAttention(Function):
    """dropout(softmax(scale q k^T, key j > query i masked out)) v, for q (..., L, E), k (..., S, E),
    v (..., S, Ev). The dropout is either `keep`, its mask scaled by 1 / (1 - dropout_p), or `dropout` =
    (p, seed, offset): the mask whose decisions are Philox uniforms at those counters (kernels/philox.cu),
    drawn where it is used; or neither.

    Where the tiled kernels take the inputs (emu and cuda; float32, float16 or bfloat16 data; L == S; one
    head size <= 128; no `keep`), it is kernels/causal_attention.cu: one kernel forward, two backward,
    and the (L, S) scores, probabilities and mask never reach memory; the forward keeps only its output
    and each row's log-sum-exp. On the cpu their twin does the same for float32 data without dropout,
    where numba and MKL are in use (kernels/compiled_attention.py). Everywhere else (float64, a kv-cache's
    L != S, a mask given as `keep`, the cpu's other cases), the plain version: the products of the array
    library around the causal_softmax kernel, whose backward, written out (p: the probabilities; dy: the
    output's gradient), is

        dv = (p keep)^T dy      dp = (dy v^T) keep      ds = softmax backward of dp (scale included)
        dq = ds k               dk = ds^T q

    On the compiled CPU path without the twin the scores and dp are made as (k q^T)^T and (v dy^T)^T: the same
    sums, stored by columns, which its softmax kernels run through faster (kernels.causal_softmax.wants_columns);
    the products that take them then read a transposed operand, at no cost.

    q, k, v that are three slices of one tensor (GPT's) take PackedCausalAttention instead, below.
    """

    backward_returns_spare = True

    @staticmethod
    def composition(q, k, v, scale, keep=None, dropout=None):
        xp, L, S = devices.array_module(q.device), q.shape[-2], k.shape[-2]
        visible = Tensor._wrap(xp.tril(xp.ones((L, S), dtype=bool)), q.device)      # key j <= query i
        return attention(q, k, v, scale, visible, CausalAttention._keep(q, k, keep, dropout))

    @staticmethod
    def runs_kernel(q, k, v, dropout_p: float = 0.0) -> bool:
        """Do these inputs take the tiled kernels (which draw a dropout's mask themselves; the cpu's twin of them
        draws none, and takes no dropout)?"""
        return kernels.causal_attention.supports(q.data, k.data, v.data, q.device, dropout=bool(dropout_p))

    @staticmethod
    def _keep(q, k, keep, dropout):
        """The dropout's mask as a Tensor (or None): `keep`, or the one `dropout`'s counters give."""
        if dropout is None or keep is not None:
            return keep
        shape = (*np.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])
        return Tensor._wrap(kernels.dropout.keep(shape, q.dtype, *dropout, q.device), q.device)

    def forward(ctx, q, k, v, scale, keep=None, dropout=None):
        ctx.save_for_backward(q, k, v)
        return CausalAttention.compute_forward(ctx, q, k, v, scale, keep, dropout)

    def backward(ctx, grad):
        q, k, v = ctx.saved_tensors
        grads = CausalAttention.compute_backward(ctx, q.data, k.data, v.data, grad.data, ctx.needs_input_grad)
        return tuple(None if g is None else Tensor._wrap(g, ctx.device) for g in grads)

    @staticmethod
    def compute_forward(ctx, q, k, v, scale, keep, dropout):
        """The output's array for the Tensors q, k, v, by the kernels or the plain version; what the backward needs
        goes into ctx (PackedCausalAttention's forward is this too)."""
        ctx.scale = scale
        ctx.tiled = keep is None and CausalAttention.runs_kernel(q, k, v, dropout[0] if dropout else 0.0)
        if ctx.tiled:
            ctx.dropout = dropout
            out, ctx.lse = kernels.causal_attention.forward(q.data, k.data, v.data, scale, ctx.device, dropout)
            ctx.out = out if ctx.recording else None
            return out
        keep = CausalAttention._keep(q, k, keep, dropout)
        ctx.keep = None if keep is None else keep.data
        ctx.by_columns = kernels.causal_softmax.wants_columns(ctx.device, q.data)
        scores = _scores(q.data, k.data, ctx.by_columns)   # a new array: the softmax may compute in it
        ctx.probs = weights = kernels.causal_softmax.forward(scores, scale, ctx.device, scores_is_spare=True)
        if keep is not None:
            weights = weights * ctx.keep
        ctx.weights = weights
        return _product_laid_out_like(weights, v.data, q.data)

    @staticmethod
    def compute_backward(ctx, q, k, v, dy, need, into=(None, None, None)) -> tuple:
        """(dq, dk, dv) as arrays, None where `need` says no, for the arrays q, k, v and the output's gradient dy, from
        what compute_forward kept in ctx; each wanted one written into its array of `into` where one is given
        (three views into one buffer: PackedCausalAttention's)."""
        if ctx.tiled:
            return kernels.causal_attention.backward(q, k, v, ctx.out, ctx.lse, dy, ctx.scale, ctx.device,
                                                     ctx.dropout, need, grads=into)
        ds = None
        if need[0] or need[1]:
            dp = _scores(dy, v, ctx.by_columns)        # stored as the probabilities are
            if ctx.keep is not None:
                dp *= ctx.keep
            ds = kernels.causal_softmax.backward(ctx.probs, dp, ctx.scale, ctx.device, dout_is_spare=True)
        return (product(ds, k, out=into[0]) if need[0] else None,
                product(ds.swapaxes(-1, -2), q, out=into[1]) if need[1] else None,
                product(ctx.weights.swapaxes(-1, -2), dy, out=into[2]) if need[2] else None)


class PackedCausalAttention(Function):
    """CausalAttention of q, k, v = source[0], source[1], source[2]: one input, `source` (3, ..., L, E), the
    way GPT cuts q, k, v from its projection (c_attn(x).reshape(B, T, 3, H, E).permute(2, 0, 3, 1, 4)). Where
    the tiled kernels run, and on the cpu (scaled_dot_product_attention routes here, see `source_of`).

    Why one input instead of three: three gradients dq, dk, dv would go back through three slices of
    source, which the engine assembles into a zero-filled buffer of source's shape (a fill, a copy, two
    adds); and that buffer, contiguous in the permuted order (3, B, H, T, E), must be copied again by the
    backward of the permute and the reshape to reach the projection's (B, T, 3 C). Here the backward
    kernels (on the cpu, the plain version's products, through out=) write dq, dk and dv through strides
    straight into one buffer laid out in memory as source's data is, i.e. as the projection's output: the
    permute's and the reshape's backward are views, and nothing is filled, added or copied. The numbers are
    CausalAttention's, element for element.

    Other uses of q, k or v still send their gradients through the slices into source, where they add.
    q, k and v are inputs too, given no gradient, so that the graph still leads to them: when a backward
    wants one of them itself (tg.grad(y, [q])), the gradients go to q, k and v instead, as three arrays,
    and through the slices into source from there.
    """

    backward_returns_spare = True

    @staticmethod
    def composition(source, q, k, v, scale, dropout=None, keep=None):
        return CausalAttention.composition(q, k, v, scale, keep=keep, dropout=dropout)

    @staticmethod
    def source_of(q: Tensor, k: Tensor, v: Tensor):
        """`source` when the graph says q, k, v are source[0], source[1], source[2] of one tensor (each made by
        a GetItem with the plain integer index 0, 1, 2 of the same input node, still unreleased) and their
        arrays are those slices of one gapless array: a Tensor for source, standing for its node in the
        graph. None whenever anything differs (then CausalAttention takes q, k, v as they are): no graph is
        recorded (no_grad, or inputs that need no gradient), another op made them, other indices, a source
        whose memory the slices do not pin down."""
        if not is_grad_enabled():
            return None
        nodes = [t._ctx for t in (q, k, v)]
        if not all(type(node) is GetItem for node in nodes):
            return None
        child = nodes[0].next_nodes[0]
        for i, node in enumerate(nodes):
            index = getattr(node, "index", None)                  # a released node keeps no index
            if node.freed or index is None or not node.basic or len(index) != 1 or node.next_nodes[0] is not child:
                return None
            part = index[0]
            if isinstance(part, bool) or not isinstance(part, (int, np.integer)) or int(part) != i:
                return None
            if tuple(node.input_shape) != (3, *q.shape):
                return None
        if child is None:
            return None
        with devices.use(q.device):                                # views made on cuda:1 are made there
            data = kernels.causal_attention.stacked(q.data, k.data, v.data)
        if isinstance(child, Tensor):                              # a leaf: its own array, if it is the same memory
            same = data is not None and child.shape == data.shape and child.dtype == data.dtype and all(
                n == 1 or a == b for n, a, b in zip(data.shape, data.strides, child.data.strides)) \
                and kernels.runtime.address(child.data) == kernels.runtime.address(data)
            return child if same else None
        return None if data is None else Tensor._wrap(data, q.device, requires_grad=True, ctx=child)

    def forward(ctx, source, q, k, v, scale, dropout=None, keep=None):
        ctx.save_for_backward(source)
        return CausalAttention.compute_forward(ctx, q, k, v, scale, keep, dropout)     # q, k, v: source's slices

    def backward(ctx, grad):
        (source,) = ctx.saved_tensors
        q, k, v = (source.data[i] for i in range(3))
        if any(ctx.input_is_wanted(i) for i in (1, 2, 3)):         # q, k or v itself asked for: theirs
            grads = CausalAttention.compute_backward(ctx, q, k, v, grad.data, (True, True, True))
            return (None, *(Tensor._wrap(g, ctx.device) for g in grads))
        dsource = kernels.causal_attention.empty_laid_out_like(ctx.xp, source.data)
        CausalAttention.compute_backward(ctx, q, k, v, grad.data, (True, True, True),
                                         into=(dsource[0], dsource[1], dsource[2]))
        return Tensor._wrap(dsource, ctx.device), None, None, None


def _scores(a, b, by_columns: bool):
    """a @ b^T, one of attention's (L, S) matrices (the scores q k^T, or dp = dy v^T), stored by columns where
    by_columns (causal_softmax.wants_columns): made as (b a^T)^T, the same sums."""
    return product_with_transposed(b, a).swapaxes(-1, -2) if by_columns else product_with_transposed(a, b)


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

    backward_returns_spare = True

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


class Dropout(Function):
    """x * keep, keep = 1 / (1 - p) where the Philox uniform at counter offset + i is >= p, else 0: dropout
    in one kernel each way (kernels/dropout.cu). The forward draws the mask inside the kernel from (seed,
    offset); the backward draws it again from the same pair, so no mask is stored (the unfused dropout
    keeps one of x's size, made by three launches, and multiplies by it in both directions)."""

    backward_returns_spare = True

    @staticmethod
    def composition(x, p, seed, offset):
        keep = kernels.dropout.keep(x.shape, x.dtype, p, seed, offset, x.device)
        return x * Tensor._wrap(keep, x.device)

    def forward(ctx, x, p, seed, offset):
        ctx.p, ctx.seed, ctx.offset = p, seed, offset
        return kernels.dropout.multiply(x.data, p, seed, offset, ctx.device)

    def backward(ctx, grad):
        dx = kernels.dropout.multiply(grad.data, ctx.p, ctx.seed, ctx.offset, ctx.device,
                                      x_is_spare=ctx.grad_output_is_spare)
        return Tensor._wrap(dx, ctx.device)


class DropoutAdd(Function):
    """residual + x * keep, the keep of Dropout above: a residual add and its branch's dropout in one kernel each
    way (kernels/dropout.cu's dropout_add). residual float32; x float32 or 16 bits, rounded after its dropout
    as the unfused op stores it; the sum float32. The backward sends the output's gradient to residual as it
    is, and through the mask to x, stored in x's dtype by the same launch."""

    hands_on_its_gradient = True          # residual's is the output's; x's is new

    @staticmethod
    def composition(residual, x, p, seed, offset):
        return residual + Dropout.composition(x, p, seed, offset)

    def forward(ctx, residual, x, p, seed, offset):
        ctx.p, ctx.seed, ctx.offset = p, seed, offset
        return kernels.dropout.add(residual.data, x.data, p, seed, offset, ctx.device)

    def backward(ctx, grad):
        dx = None
        if ctx.needs_input_grad[1]:
            dx = Tensor._wrap(kernels.dropout.multiply(grad.data, ctx.p, ctx.seed, ctx.offset, ctx.device,
                                                       dtype=ctx.input_dtypes[1]), ctx.device)
        return grad, dx


class CastTogether(Cast):
    """x.to(dtype), where the cast was made together with others' by one launch (casts_together below). Its
    backward is Cast's, gradient cast back to x's dtype; the engine gathers those of a backward's casts that
    lead straight to leaves and makes them together too, with backward_together: one launch for all."""

    _ENGINE_FIELDS = Cast._ENGINE_FIELDS + ("out_dtype",)       # for the engine's place of its gradient

    def forward(ctx, x, dtype, made):
        ctx.out_dtype = made.dtype
        return made

    @staticmethod
    def backward_together(nodes, grads) -> list:
        """The backward of every node, as one multi-tensor cast when the gradients share a dtype."""
        back = {node.input_dtypes[0] for node in nodes}
        if len(back) > 1 or len({g.dtype for g in grads}) > 1:
            return [node.backward(g) for node, g in zip(nodes, grads)]
        device = nodes[0].device
        made = kernels.multi_tensor.cast([g.data for g in grads], back.pop(), device,
                                         into=[node.gradient_slot(0) for node in nodes])
        return [Tensor._wrap(m, device) for m in made]


def casts_together(tensors, dtype):
    """[t.to(dtype) for t in tensors] in one launch (kernels/multi_tensor.cu), recorded: float32 tensors of one emu
    or cuda device, cast to float16 or bfloat16, each result a view of one new array. autocast casts a region's
    parameters so (amp/autocast_mode.py). None, and nothing is cast, when no graph is recorded (no_grad) or
    fused ops are switched off."""
    if not (is_grad_enabled() and kernels.fused_enabled()):
        return None
    made = kernels.multi_tensor.cast([t.data for t in tensors], dtype, tensors[0].device)
    return [CastTogether.apply(t, dtype=np.dtype(dtype), made=m) for t, m in zip(tensors, made)]


autocast_mode._State.cast_together = casts_together
