"""GPT's Block as one op: the whole layer's forward and backward, side by side, on arrays.

    x1  = x + c_proj(attention(c_attn(ln_1(x))))         the attention half
    out = x1 + mlp.c_proj(gelu(c_fc(ln_2(x1))))          the MLP half

Block.forward (nn/gpt.py) runs this where it can (``one_op_layers`` there says when: the cpu, float32, no dropout
at work, GPT's own layers). Each step is the same call the layer's own op makes (kernels.layernorm, linalg.product,
fused.CausalAttention's compute_forward, kernels.gelu), in the same order, so the output and every gradient are
the op-by-op graph's to the last bit (tests/test_gpt_block.py checks that). What it saves is the engine's work
around those calls: the graph gets one node per layer instead of eighteen (two layer norms, four linears, the
attention and the seven views that cut q, k, v and merge the heads, the GELU, two residual adds), each with its
apply, its module call and its checks, and its turn in the backward. Measured on the CPU recipe's step (2-core
Xeon, one process, the two taken in turn): 20.5 ms against 23.0 op by op. The llm.c way, in Python: a layer's
forward, then its backward by hand.

The backward follows the forward upward, each line the chain rule of one line above: for y = x W^T + b,
dx = dy W, dW = dy^T x, db = the sum of dy's rows; a residual add passes its gradient to both sides.
"""
from __future__ import annotations

import math
import types

import numpy as np

from .. import kernels
from ..ops.fused import CausalAttention
from ..ops.linalg import product, sum_rows
from ..tensor import Function, Tensor
from . import functional as F

# The layers, in the order their weights (and then their biases, if the block has them) follow x in apply's inputs
LAYERS = ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj")
LN_1, C_ATTN, ATTN_PROJ, LN_2, C_FC, MLP_PROJ = range(6)


class AttentionNotFinite(Exception):
    """The attention's output has a nan or an infinity: for such inputs PyTorch's rules (nn/attention.py) decide
    what attention gives, and Block.forward runs its layers one by one instead (scaled_dot_product_attention
    applies those rules)."""


class GPTBlock(Function):
    """apply(x, *weights, *biases, n_head=, eps=(ln_1's, ln_2's), bias=): x (B, T, C) float32; the weights of LAYERS
    in that order, then their biases where bias is True."""

    backward_returns_spare = True

    @staticmethod
    def composition(x, *params, n_head, eps, bias):
        """The block as Tensor ops (what a graph of the backward differentiates): Block's own layers, as functions."""
        w, b = params[:6], (params[6:] if bias else (None,) * 6)
        B, T, C = x.shape
        q, k, v = F.linear(F.layer_norm(x, (C,), w[LN_1], b[LN_1], eps[0]), w[C_ATTN], b[C_ATTN]) \
            .reshape(B, T, 3, n_head, C // n_head).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, w[ATTN_PROJ], b[ATTN_PROJ])
        h = F.gelu(F.linear(F.layer_norm(x, (C,), w[LN_2], b[LN_2], eps[1]), w[C_FC], b[C_FC]), approximate="tanh")
        return x + F.linear(h, w[MLP_PROJ], b[MLP_PROJ])

    def forward(ctx, x, *params, n_head, eps, bias):
        device, (B, T, C) = ctx.device, x.shape
        w = [p.data for p in params[:6]]
        b = [p.data for p in params[6:]] if bias else [None] * 6

        def linear(rows, i):                             # ops/linalg.py's Linear: rows @ W^T, then + b
            out = product(rows, w[i].T)
            if b[i] is not None:
                out += b[i]
            return out

        x = x.data.reshape(B * T, C)                     # every position a row
        h1, mean1, rstd1 = kernels.layernorm.forward(x, w[LN_1], b[LN_1], eps[0], device)
        qkv = linear(h1, C_ATTN)
        # q, k, v as GPT cuts them, (B, n_head, T, head size) views of qkv: PackedCausalAttention's source
        source = qkv.reshape(B, T, 3, n_head, C // n_head).transpose(2, 0, 3, 1, 4)
        attention = types.SimpleNamespace(device=device, recording=ctx.recording)     # what compute_forward keeps
        q, k, v = (Tensor._wrap(source[i], device) for i in range(3))
        y = CausalAttention.compute_forward(attention, q, k, v, 1.0 / math.sqrt(C // n_head), None, None)
        if not np.isfinite(y).all():
            raise AttentionNotFinite
        y = y.transpose(0, 2, 1, 3).reshape(B * T, C)    # heads side by side again (a view: y is laid out so)
        x1 = linear(y, ATTN_PROJ)
        x1 += x                                          # the residual add, into the product's new array
        h2, mean2, rstd2 = kernels.layernorm.forward(x1, w[LN_2], b[LN_2], eps[1], device)
        u = linear(h2, C_FC)
        if ctx.recording:
            g, slope = kernels.gelu.forward_keeping_slope(u, device)
            ctx.saved = (x, h1, mean1, rstd1, source, attention, y, x1, h2, mean2, rstd2, u, g, slope)
            ctx.weights, ctx.shape, ctx.n_head, ctx.bias = w, (B, T, C), n_head, bias
        else:
            g = kernels.gelu.forward(u, device)
        out = linear(g, MLP_PROJ)
        out += x1
        return out.reshape(B, T, C)

    def backward(ctx, grad):
        x, h1, mean1, rstd1, source, attention, y, x1, h2, mean2, rstd2, u, g, slope = ctx.saved
        device, w, (B, T, C), n_head = ctx.device, ctx.weights, ctx.shape, ctx.n_head
        need = ctx.needs_input_grad
        dw, db = [None] * 6, [None] * 6

        def linear(dout, rows, i):                       # Linear's backward: dx = dy W; dW = dy^T x; db = sum dy
            if need[1 + i]:
                dw[i] = product(dout.T, rows, out=ctx.gradient_slot(1 + i))
            if ctx.bias and need[7 + i]:
                db[i] = sum_rows(dout)
            return product(dout, w[i])

        def layer_norm(dout, rows, weight, mean, rstd, i, residual):  # dout: a new array, ours to write dx over
            need_params = need[1 + i] or (ctx.bias and need[7 + i])      # residual's gradient: added to dx
            dx, dw[i], dbias = kernels.layernorm.backward(rows, weight, mean, rstd, dout, need_params, device,
                                                          dout_is_spare=True, need_bias=ctx.bias, dx_add=residual)
            db[i] = dbias if ctx.bias else None
            return dx

        dout = grad.data.reshape(B * T, C)
        # out = x1 + mlp: the residual hands dout to x1; the MLP, top to bottom
        du = kernels.gelu.backward(u, linear(dout, g, MLP_PROJ), device, slope, dout_is_spare=True)
        dx1 = layer_norm(linear(du, h2, C_FC), x1, w[LN_2], mean2, rstd2, LN_2, residual=dout)
        # x1 = x + attention: the same two ways down
        dy = linear(dx1, y, ATTN_PROJ).reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3)
        dqkv = np.empty((B * T, 3 * C), np.float32)    # dq, dk, dv written through strides: PackedCausalAttention's way
        dsource = dqkv.reshape(B, T, 3, n_head, C // n_head).transpose(2, 0, 3, 1, 4)
        CausalAttention.compute_backward(attention, source[0], source[1], source[2], dy, (True, True, True),
                                         into=(dsource[0], dsource[1], dsource[2]))
        dx = layer_norm(linear(dqkv, h1, C_ATTN), x, w[LN_1], mean1, rstd1, LN_1, residual=dx1)
        grads = [dx.reshape(B, T, C), *dw, *(db if ctx.bias else ())]
        return tuple(Tensor._wrap(a, device) if a is not None and wanted else None for a, wanted in zip(grads, need))
