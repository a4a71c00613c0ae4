"""A GPT trained by hand in NumPy: forward, backward and AdamW written out, with no autograd.

The same model as tinygrad_gpu.nn.GPT with bias=False and dropout 0 (nanoGPT's layout, tanh
GELU, lm_head tied to the token embedding), in float32. It is the yardstick for our engine
on the CPU (benchmarks/step.py): what a training step costs when nobody records a graph.

Each layer is a pair of functions, forward then backward. The forward returns its output and
a cache (what its backward needs); the backward takes the gradient of the output and that
cache, writes the parameters' gradients into arrays it is given, and returns the gradient
of the input. Activations are 2-D, (B*T, C), except inside attention.

Written to be lean, because the point is speed: results are written into existing arrays
(``out=``, ``*=``) instead of allocating temporaries, and a backward may overwrite its cache
once it has read it, since each cache is used exactly once.

    model = NumpyGPT(weights, n_head=4)          # weights: {nanoGPT name: array}
    opt = AdamW(model, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    loss = model.forward(idx, targets)           # idx, targets: (B, T) integers
    model.backward()                             # fills model.grads (same names)
    clip_grad_norm_(model.unique_grads(), 1.0)
    opt.step()
"""
from __future__ import annotations

import math

import numpy as np

GELU_C = math.sqrt(2.0 / math.pi)       # tanh GELU: 0.5 x (1 + tanh(GELU_C (x + 0.044715 x^3)))
LN_EPS = 1e-5


# ----------------------------------------------------------------------------- embedding
def embedding_forward(table, idx):
    """Row idx[b, t] of the table for every position: (B, T) -> (B, T, C)."""
    return table[idx]


def embedding_backward(dtable, idx, dout):
    """Adds (does not overwrite) into dtable: a token that occurs twice gets both gradients, and with
    weight tying dtable already holds lm_head's gradient. np.add.at accumulates repeated indices,
    which dtable[idx] += dout would not."""
    np.add.at(dtable, idx.ravel(), dout)


# ----------------------------------------------------------------------------- linear (no bias)
def linear_forward(x, w):
    """y = x W^T, with W stored (out_features, in_features) as in PyTorch. The cache is x itself."""
    return x @ w.T


def linear_backward(dy, x, w, dw):
    """dW = dy^T x, written into dw (overwriting it); returns dx = dy W."""
    np.matmul(dy.T, x, out=dw)
    return dy @ w


# ----------------------------------------------------------------------------- layer norm (no bias)
def layernorm_forward(x, w):
    """Normalise each row to mean 0, variance 1, then scale by w. Cache: xhat and 1/std per row."""
    xhat = x - x.mean(axis=1, keepdims=True)
    var = np.einsum("ij,ij->i", xhat, xhat) / x.shape[1]          # row sums of squares, no temporary
    rstd = (1.0 / np.sqrt(var + LN_EPS))[:, None]
    xhat *= rstd
    return xhat * w, (xhat, rstd)


def layernorm_backward(dy, w, cache, dw):
    """dw = sum over rows of dy * xhat; dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy w:
    the two means remove the parts of g that normalisation cancels (a shift and a rescaling)."""
    xhat, rstd = cache
    np.einsum("ij,ij->j", dy, xhat, out=dw)
    g = dy * w
    n = g.shape[1]
    mean_g = g.mean(axis=1, keepdims=True)
    mean_gx = (np.einsum("ij,ij->i", g, xhat) / n)[:, None]
    xhat *= mean_gx                      # the cache is spent: reuse its memory
    g -= xhat
    g -= mean_g
    g *= rstd
    return g


# ----------------------------------------------------------------------------- tanh GELU
def gelu_forward(x):
    """0.5 x (1 + tanh(GELU_C (x + 0.044715 x^3))), built in one array. The cache is x itself."""
    y = x * x
    y *= 0.044715
    y += 1.0
    y *= x
    y *= GELU_C                          # the tanh's argument, u
    np.tanh(y, out=y)
    y += 1.0
    y *= x
    y *= 0.5
    return y


def gelu_backward(dy, x):
    """d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) u'  with t = tanh(u), u' = GELU_C (1 + 3 * 0.044715 x^2);
    factored as (1 + t)(0.5 + a (1 - t)) with a = 0.5 x u'. tanh is recomputed rather than cached
    (as PyTorch does): one (B*T, 4C) array less per layer. dy is overwritten with dx."""
    a = x * x
    t = a * 0.044715
    t += 1.0
    t *= x
    t *= GELU_C
    np.tanh(t, out=t)
    a *= 3 * 0.044715
    a += 1.0
    a *= x
    a *= 0.5 * GELU_C                    # a = 0.5 x u'
    np.subtract(1.0, t, out=t)           # t <- 1 - tanh
    a *= t
    a += 0.5
    np.subtract(2.0, t, out=t)           # t <- 1 + tanh
    a *= t
    dy *= a
    return dy


# ----------------------------------------------------------------------------- causal self-attention
_causal_masks = {}


def causal_mask(T):
    """(T, T): 0 where a query may look (keys at or before it), -inf after it; added to the scores."""
    if T not in _causal_masks:
        _causal_masks[T] = np.triu(np.full((T, T), -np.inf, np.float32), k=1)
    return _causal_masks[T]


def attention_forward(qkv, B, T, n_head):
    """qkv (B*T, 3C), the output of c_attn -> y (B*T, C), heads side by side (the input of c_proj).

    Per head: softmax(q k^T / sqrt(head_size) + causal mask) v. Cache: q (already scaled), k, v
    and the attention probabilities (B, n_head, T, T), which the backward needs.
    """
    C = qkv.shape[1] // 3
    hs = C // n_head
    # (B, T, 3, nh, hs) -> (3, B, nh, T, hs): one copy gives contiguous q, k and v for the matmuls
    heads = np.ascontiguousarray(qkv.reshape(B, T, 3, n_head, hs).transpose(2, 0, 3, 1, 4))
    q, k, v = heads
    q *= 1.0 / math.sqrt(hs)             # scaling q (T x hs) is cheaper than scaling the scores (T x T)
    att = q @ k.swapaxes(-1, -2)
    att += causal_mask(T)
    att -= att.max(axis=-1, keepdims=True)          # softmax over keys, in place
    np.exp(att, out=att)
    att /= att.sum(axis=-1, keepdims=True)
    y = att @ v                                     # (B, nh, T, hs)
    return y.transpose(0, 2, 1, 3).reshape(B * T, C), (heads, att)


def attention_backward(dy, cache, B, T, n_head):
    """dy (B*T, C) -> dqkv (B*T, 3C). Softmax's backward: ds = p * (dp - sum_j p_j dp_j)."""
    heads, att = cache
    q, k, v = heads
    hs = q.shape[-1]
    dy = dy.reshape(B, T, n_head, hs).transpose(0, 2, 1, 3)
    dheads = np.empty_like(heads)
    np.matmul(att.swapaxes(-1, -2), dy, out=dheads[2])       # dv = p^T dy
    ds = dy @ v.swapaxes(-1, -2)                              # dp = dy v^T, turned into ds in place:
    ds *= att
    att *= ds.sum(axis=-1, keepdims=True)                     # att is spent: reuse its memory
    ds -= att                                                 # masked entries: p = 0, so ds = 0
    np.matmul(ds, k, out=dheads[0])                           # scores = q_scaled k^T
    dheads[0] *= 1.0 / math.sqrt(hs)
    np.matmul(ds.swapaxes(-1, -2), q, out=dheads[1])          # q is the scaled q
    return dheads.transpose(1, 3, 0, 2, 4).reshape(B * T, 3 * n_head * hs)


# ----------------------------------------------------------------------------- cross-entropy
def cross_entropy_forward(logits, targets):
    """Mean of -log softmax(logits)[target] over rows. The logits are turned into the
    probabilities in place: that is all the backward needs."""
    rows = np.arange(len(targets))
    logits -= logits.max(axis=1, keepdims=True)         # for exp's sake; softmax does not change
    picked = logits[rows, targets]
    np.exp(logits, out=logits)
    sums = logits.sum(axis=1)
    logits /= sums[:, None]
    loss = float(np.mean(np.log(sums) - picked))        # log-sum-exp minus the target's logit
    return loss, (logits, targets)


def cross_entropy_backward(cache):
    """d loss / d logits = (softmax - one_hot(target)) / rows, in the probabilities' memory."""
    probs, targets = cache
    probs[np.arange(len(targets)), targets] -= 1.0
    probs *= 1.0 / len(targets)
    return probs


# ----------------------------------------------------------------------------- the model
class NumpyGPT:
    """nanoGPT with bias=False and no dropout, on a dict of float32 arrays named as in its state_dict."""

    def __init__(self, weights: dict, n_head: int):
        self.params = {name: np.array(a, dtype=np.float32) for name, a in weights.items()}
        if any(name.endswith(".bias") for name in self.params):
            raise ValueError("NumpyGPT: this model has no biases (bias=False)")
        wte = self.params["transformer.wte.weight"]
        if not np.array_equal(wte, self.params["lm_head.weight"]):
            raise ValueError("NumpyGPT: lm_head.weight must equal transformer.wte.weight (they are tied)")
        self.params["lm_head.weight"] = wte              # one array under both names, as in the module
        self.grads = {name: np.zeros_like(p) for name, p in self.params.items()}
        self.grads["lm_head.weight"] = self.grads["transformer.wte.weight"]
        self.n_head = n_head
        self.n_layer = sum(1 for name in self.params if name.endswith(".ln_1.weight"))
        self.cache = None

    def unique(self, arrays: dict) -> list:
        """Each array once (the tied table appears under two names)."""
        return list({id(a): a for a in arrays.values()}.values())

    def unique_grads(self) -> list:
        return self.unique(self.grads)

    def forward(self, idx, targets) -> float:
        """The mean cross-entropy of next-token predictions; keeps what backward() needs."""
        p = self.params
        B, T = idx.shape
        x = embedding_forward(p["transformer.wte.weight"], idx)
        x += p["transformer.wpe.weight"][:T]             # the position table broadcasts over the batch
        x = x.reshape(B * T, -1)
        layers = []
        for i in range(self.n_layer):
            pre, c = f"transformer.h.{i}.", {}
            # x = x + c_proj(attention(c_attn(ln_1(x)))); the residual sum happens in place, since
            # the backward of an addition needs no inputs
            c["ln_1_out"], c["ln_1"] = layernorm_forward(x, p[pre + "ln_1.weight"])
            qkv = linear_forward(c["ln_1_out"], p[pre + "attn.c_attn.weight"])
            c["attn_out"], c["attn"] = attention_forward(qkv, B, T, self.n_head)
            x += linear_forward(c["attn_out"], p[pre + "attn.c_proj.weight"])
            # x = x + c_proj(gelu(c_fc(ln_2(x))))
            c["ln_2_out"], c["ln_2"] = layernorm_forward(x, p[pre + "ln_2.weight"])
            c["fc_out"] = linear_forward(c["ln_2_out"], p[pre + "mlp.c_fc.weight"])
            c["gelu_out"] = gelu_forward(c["fc_out"])
            x += linear_forward(c["gelu_out"], p[pre + "mlp.c_proj.weight"])
            layers.append(c)
        final, ln_f = layernorm_forward(x, p["transformer.ln_f.weight"])
        logits = linear_forward(final, p["lm_head.weight"])
        loss, ce = cross_entropy_forward(logits, targets.ravel())
        self.cache = dict(idx=idx, layers=layers, final=final, ln_f=ln_f, ce=ce)
        return loss

    def backward(self) -> None:
        """Gradients of the last forward's loss into self.grads; the activations are freed."""
        c, p, g = self.cache, self.params, self.grads
        self.cache = None
        idx = c["idx"]
        B, T = idx.shape
        dfinal = linear_backward(cross_entropy_backward(c["ce"]), c["final"], p["lm_head.weight"],
                                 g["lm_head.weight"])
        dx = layernorm_backward(dfinal, p["transformer.ln_f.weight"], c["ln_f"], g["transformer.ln_f.weight"])
        for i in reversed(range(self.n_layer)):
            L, pre = c["layers"].pop(), f"transformer.h.{i}."      # pop: each layer's cache freed when done
            # x = x + c_proj(gelu(c_fc(ln_2(x)))): dx flows on unchanged, plus the branch's gradient
            dh = linear_backward(dx, L["gelu_out"], p[pre + "mlp.c_proj.weight"], g[pre + "mlp.c_proj.weight"])
            dh = gelu_backward(dh, L["fc_out"])
            dh = linear_backward(dh, L["ln_2_out"], p[pre + "mlp.c_fc.weight"], g[pre + "mlp.c_fc.weight"])
            dx += layernorm_backward(dh, p[pre + "ln_2.weight"], L["ln_2"], g[pre + "ln_2.weight"])
            # x = x + c_proj(attention(c_attn(ln_1(x))))
            dh = linear_backward(dx, L["attn_out"], p[pre + "attn.c_proj.weight"], g[pre + "attn.c_proj.weight"])
            dh = attention_backward(dh, L["attn"], B, T, self.n_head)
            dh = linear_backward(dh, L["ln_1_out"], p[pre + "attn.c_attn.weight"], g[pre + "attn.c_attn.weight"])
            dx += layernorm_backward(dh, p[pre + "ln_1.weight"], L["ln_1"], g[pre + "ln_1.weight"])
        # x = wte[idx] + wpe[:T]
        dwpe = g["transformer.wpe.weight"]
        dx.reshape(B, T, -1).sum(axis=0, out=dwpe[:T])
        dwpe[T:] = 0.0
        # last: lm_head's backward above wrote the tied table's gradient; the embedding adds to it
        embedding_backward(g["transformer.wte.weight"], idx, dx)


# ----------------------------------------------------------------------------- clipping and AdamW
def clip_grad_norm_(grads: list, max_norm: float) -> float:
    """Scale all gradients by one factor so that their joint L2 norm is at most max_norm (PyTorch's
    rule, 1e-6 included); returns the norm before clipping."""
    total = math.sqrt(sum(float(np.vdot(gr, gr)) for gr in grads))
    scale = max_norm / (total + 1e-6)
    if scale < 1.0:
        for gr in grads:
            gr *= scale
    return total


class AdamW:
    """torch.optim.AdamW's update, with weight decay on 2-D parameters only (nanoGPT's groups):

        p -= lr * wd * p                       (decoupled decay, 2-D only)
        m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
        p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    """

    def __init__(self, model: NumpyGPT, lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1):
        self.params = model.unique(model.params)
        # the gradient arrays live as long as the model (backward writes into them): pair them once
        grad_of = {id(model.params[name]): model.grads[name] for name in model.params}
        self.grads = [grad_of[id(p)] for p in self.params]
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.m = [np.zeros_like(p) for p in self.params]
        self.v = [np.zeros_like(p) for p in self.params]
        self.scratch = [np.empty_like(p) for p in self.params]     # one work array each: no temporaries
        self.t = 0

    def step(self) -> None:
        self.t += 1
        beta1, beta2 = self.betas
        step_size = self.lr / (1 - beta1 ** self.t)
        bias_correction2_sqrt = math.sqrt(1 - beta2 ** self.t)
        for p, g, m, v, s in zip(self.params, self.grads, self.m, self.v, self.scratch):
            if p.ndim >= 2:
                p *= 1 - self.lr * self.weight_decay
            m *= beta1
            np.multiply(g, 1 - beta1, out=s)
            m += s
            v *= beta2
            np.multiply(g, g, out=s)
            s *= 1 - beta2
            v += s
            np.sqrt(v, out=s)
            s /= bias_correction2_sqrt
            s += self.eps
            np.divide(m, s, out=s)
            s *= step_size
            p -= s
