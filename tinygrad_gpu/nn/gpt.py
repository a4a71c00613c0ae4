"""GPT: a decoder-only transformer laid out exactly like nanoGPT (and so like GPT-2).

    idx (B, T) -> wte(idx) + wpe(positions) -> n_layer x Block -> ln_f -> lm_head -> logits (B, T, vocab)
    Block:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
    attn:   causal multi-head self-attention, q, k, v from one Linear (c_attn), output through c_proj
    mlp:    Linear(4x wider) -> GELU (tanh approximation) -> Linear back

Parameter names match nanoGPT's ``state_dict`` key for key (``transformer.h.0.attn.c_attn.weight``,
``lm_head.weight`` tied to ``transformer.wte.weight``, Linear weights (out, in)), so its
checkpoints load with strict=True; ``from_pretrained`` and ``save_pretrained`` read and write
Hugging Face GPT-2 folders (nn/hf.py).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import creation, dtypes, kernels
from ..amp import autocast_mode
from ..ops.movement import cat
from ..optim import configure_adamw
from ..tensor import Tensor
from ..utils.checkpoint import checkpoint
from . import functional as F
from . import gpt_block, hf, init, sampling
from .layers import Dropout, Embedding, GELU, LayerNorm, Linear
from .module import Module, ModuleDict, ModuleList


@dataclasses.dataclass
class GPTConfig:
    block_size: int = 1024          # longest sequence the position table covers
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True               # biases in Linear and LayerNorm layers (GPT-2 has them)

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig: n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")


class KVCache:
    """One attention layer's keys and values for the positions seen so far, each (B, n_head, T_so_far,
    head_size). Generating with it, a new token's step computes one position's query, key and value
    and attends over the kept ones, instead of running the whole context through the model again."""

    def __init__(self):
        self.keys = self.values = None

    def __len__(self):
        return 0 if self.keys is None else self.keys.shape[2]

    def extend(self, keys: Tensor, values: Tensor):
        """Append the new positions' keys and values; return all of them."""
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self.keys, self.values = cat([self.keys, keys], dim=2), cat([self.values, values], dim=2)
        return self.keys, self.values


class CausalSelfAttention(Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_attn = Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = Dropout(config.dropout)
        self.resid_dropout = Dropout(config.dropout)
        self.n_head, self.n_embd = config.n_head, config.n_embd

    def forward(self, x, cache: KVCache = None, residual: Tensor = None, mask: Tensor = None):
        """The attention's output; with `residual`, residual + that output (the Block's residual add, made
        with the dropout in one op). mask: which keys each query may see, (B, 1, T, S) bool, for left-padded
        rows (GPT.forward's padding); it says all, causality included. None: the usual causal attention."""
        B, T, C = x.shape
        # (B, T, 3C) -> q, k and v, each (B, n_head, T, head_size): each head attends independently
        q, k, v = self.c_attn(x).reshape(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.extend(k, v)                # the keys and values of every position so far
        S, dropout_p = k.shape[2], self.attn_dropout.p if self.training else 0.0
        if mask is not None:                         # left padding: the mask says causality and padding both
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        elif S == T:                                 # nothing cached: the usual causal attention
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
        else:
            # New query i sits at position S - T + i: it sees every cached key and the new ones up to
            # itself. A single new token (the usual step when generating) sees them all: no mask at all.
            visible = None if T == 1 else creation.ones(T, S, dtype=bool, device=x.device).tril(S - T)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, dropout_p=dropout_p)
        y = y.transpose(1, 2).reshape(B, T, C)       # heads side by side again
        return self.resid_dropout(self.c_proj(y), residual)


class MLP(Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = GELU(approximate="tanh")
        self.c_proj = Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = Dropout(config.dropout)

    def forward(self, x, residual: Tensor = None):
        """The MLP's output; with `residual`, residual + that output (one op with the dropout)."""
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))), residual)


class Block(Module):
    # On the cpu the whole block runs as one op where it can (one_op_layers); False keeps it op by op, for a
    # graph that shows each op (examples/draw_graph.py), or to time each op
    as_one_op = True

    def __init__(self, config: GPTConfig):
        super().__init__()
        # feeds_products: each layer norm's output goes only into a product (c_attn, c_fc, lm_head), so under
        # autocast it is written in the products' dtype at once instead of cast by a launch of its own
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias, feeds_products=True)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias, feeds_products=True)
        self.mlp = MLP(config)

    def forward(self, x, cache: KVCache = None, mask: Tensor = None):
        layers = self.one_op_layers(x) if cache is None and mask is None else None
        if layers is not None:
            try:
                return gpt_block.GPTBlock.apply(x, *(layer.weight for layer in layers),
                                                *(layer.bias for layer in layers if layer.bias is not None),
                                                n_head=self.attn.n_head, eps=(layers[0].eps, layers[3].eps),
                                                bias=layers[0].bias is not None)
            except gpt_block.AttentionNotFinite:
                pass                                 # op by op, below: PyTorch's rules for such attention
        # x = x + attn(ln_1(x)), then x = x + mlp(ln_2(x)); each branch adds itself to x as it ends, so that
        # the add and the branch's dropout are one op (on a GPU, one kernel each way: nn.functional.dropout_add)
        x = self.attn(self.ln_1(x), cache, residual=x, mask=mask)
        return self.mlp(self.ln_2(x), residual=x)

    def one_op_layers(self, x: Tensor):
        """The layers of gpt_block.LAYERS, in that order, where this block runs as one op (nn/gpt_block.py), else
        None. A speed trick for the cpu, where the engine's work around each op is a large part of a small model's
        step: for float32 x and parameters outside autocast, on the compiled or NumPy fast path of the fused ops
        (not the reference: a learner reading the graph sees every op), with no dropout at work and GPT's own
        layers (a LoRA layer, say, runs op by op)."""
        if not (self.as_one_op and x.device == "cpu" and x.dtype == dtypes.float32 and x.ndim == 3
                and kernels.fused_enabled() and kernels.cpu_paths.cpu_path() != "reference"
                and autocast_mode.region_dtype(x.device) is None):
            return None
        attn, mlp = self.attn, self.mlp
        layers = (self.ln_1, attn.c_attn, attn.c_proj, self.ln_2, mlp.c_fc, mlp.c_proj)       # gpt_block.LAYERS
        if (self.training and not attn.attn_dropout.p == attn.resid_dropout.p == mlp.dropout.p == 0) \
                or tuple(map(type, layers)) != _ONE_OP_TYPES or type(mlp.gelu) is not GELU \
                or mlp.gelu.approximate != "tanh":
            return None
        weights, biases = [layer.weight for layer in layers], [layer.bias for layer in layers]
        if len({b is None for b in biases}) > 1 or any(w is None for w in weights):    # GPT's biases: all or none
            return None
        # the shapes GPT gives them; anything else (a weight swapped for a wrong one) runs op by op, whose errors
        # name the shapes that do not fit
        C, hidden = x.shape[-1], weights[4].shape[0]
        if [w.shape for w in weights] != [(C,), (3 * C, C), (C, C), (C,), (hidden, C), (C, hidden)] or any(
                b is not None and b.shape != w.shape[:1] for w, b in zip(weights, biases)):
            return None
        params = weights + [b for b in biases if b is not None]
        if any(p.device != "cpu" or p.data.dtype != np.float32 for p in params):
            return None
        return layers


_ONE_OP_TYPES = (LayerNorm, Linear, Linear, LayerNorm, Linear, Linear)


class GPT(Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = ModuleDict(dict(
            wte=Embedding(config.vocab_size, config.n_embd),
            wpe=Embedding(config.block_size, config.n_embd),
            drop=Dropout(config.dropout),
            h=ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias, feeds_products=True),
        ))
        self.lm_head = Linear(config.n_embd, config.vocab_size, bias=False)
        # Weight tying: the output layer scores each token with its own input embedding.
        self.transformer.wte.weight = self.lm_head.weight
        self._init_weights()

    def _init_weights(self):
        """GPT-2's initialisation: N(0, 0.02) weights, zero biases, and the projections that add
        into the residual stream scaled down by sqrt(2 * n_layer) so its variance stays put."""
        for module in self.modules():
            if isinstance(module, (Linear, Embedding)):
                init.normal_(module.weight, 0.0, 0.02)
            if isinstance(module, Linear) and module.bias is not None:
                init.zeros_(module.bias)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                init.normal_(p, 0.0, 0.02 / math.sqrt(2 * self.config.n_layer))

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; by default without the position table (as nanoGPT reports it). The token
        table counts once, since it is the output layer too."""
        n = self.num_parameters()
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def flops_per_token(self, context: int = None) -> float:
        """Training FLOPs per token (forward + backward): 6 per parameter for the matrix products
        plus the attention scores, 12 * n_layer * n_embd * context (nanoGPT's estimate). `context`: the
        rows trained on, when shorter than block_size (fine-tuning GPT-2 on 256 of its 1024 positions)."""
        c = self.config
        return 6 * self.num_params() + 12 * c.n_layer * c.n_embd * (context or c.block_size)

    def estimate_mfu(self, tokens_per_second: float, peak_flops: float) -> float:
        """Model FLOPs utilisation: achieved training FLOP/s as a fraction of the hardware's peak."""
        return self.flops_per_token() * tokens_per_second / peak_flops

    def forward(self, idx: Tensor, targets: Tensor = None, caches: list = None, padding=None):
        """Logits for every position, and the mean cross-entropy against `targets` (ignore_index -1).

        caches: one KVCache per layer (``new_caches()``). `idx` then holds the tokens that follow the
        cached ones: their positions continue from the caches' length, and their keys and values are
        appended to the caches.
        padding: rows of different lengths, left-padded: (B,) ints (a list or NumPy array), how many tokens
        row b starts with that are padding, counted over the whole sequence (cached tokens included, so a
        cached step passes the same numbers again). A row's real tokens get positions 0, 1, 2, ... from its
        first real token and no query sees a padding key, so its logits are those of the row run alone
        (what the padding's own positions compute is never meant to be read).
        """
        if idx.ndim != 2:
            raise ValueError(f"GPT: idx must be (batch, time) token ids, got shape {idx.shape}")
        B, T = idx.shape
        if caches is not None and len(caches) != self.config.n_layer:
            raise ValueError(f"GPT: got {len(caches)} caches for {self.config.n_layer} layers; use new_caches()")
        start = 0 if caches is None else len(caches[0])
        if start + T > self.config.block_size:
            raise ValueError(f"GPT: sequence of length {start + T} ({start} cached, {T} new) is longer than "
                             f"block_size {self.config.block_size}; crop it to the last block_size tokens")
        if padding is None:        # the usual path: shared positions 0..T-1 and is_causal, no mask
            positions, mask = self._positions(start, T, idx.device), None
        else:
            positions, mask = self._padded_positions(padding, start, T, idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(positions))
        for block, cache in zip(self.transformer.h, caches or [None] * self.config.n_layer):
            if self.gradient_checkpointing and self.training and cache is None:
                x = checkpoint(block, x, mask=mask, use_reentrant=False)
            else:
                x = block(x, cache, mask)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def _positions(self, start: int, T: int, device: str) -> Tensor:
        """start, ..., start + T - 1: made once per length and device for the usual start of 0 (every training
        step asks for the same ones; on a GPU that is a launch and an allocation saved per step)."""
        if start:
            return creation.arange(start, start + T, device=device)
        made = self.__dict__.setdefault("_made_positions", {})
        if (T, device) not in made:
            made[T, device] = creation.arange(T, device=device)
        return made[T, device]

    @staticmethod
    def _padded_positions(padding, start: int, T: int, device: str):
        """Left-padded rows' positions (B, T) and attention mask (B, 1, T, S) for the columns start..start+T-1 of
        a sequence of S = start + T, row b's first padding[b] columns being padding. Small, so made with NumPy
        and copied over; the 1 broadcasts the mask over the heads."""
        pad = np.asarray(padding, dtype=np.int64).reshape(-1, 1)           # (B, 1)
        columns, keys = np.arange(start, start + T), np.arange(start + T)
        positions = np.maximum(columns - pad, 0)          # counted from each row's first real token
        # query column i sees key column j when j <= i (causal) and j is no padding; a padding query then sees
        # nothing, and attention gives it 0 (never nan)
        visible = (keys <= columns[:, None]) & (keys >= pad[:, :, None])  # (T, S) & (B, 1, S) -> (B, T, S)
        return Tensor(positions, device=device), Tensor(visible[:, None], device=device)

    gradient_checkpointing = False

    def gradient_checkpointing_enable(self) -> None:
        """Keep only each block's input while training; backward recomputes the block (utils/checkpoint.py):
        the activations of one block at a time instead of all, for one more forward pass per step."""
        self.gradient_checkpointing = True

    def gradient_checkpointing_disable(self) -> None:
        self.gradient_checkpointing = False

    def configure_optimizers(self, weight_decay: float, learning_rate: float, betas=(0.9, 0.95), eps=1e-8):
        """AdamW with weight decay on matrices and embeddings (2-D and up) only, not on biases and norms;
        frozen parameters left out (optim.configure_adamw)."""
        return configure_adamw(self.parameters(), weight_decay, learning_rate, betas, eps)

    def new_caches(self) -> list:
        """Empty key-value caches, one per layer, for forward(..., caches=...)."""
        return [KVCache() for _ in range(self.config.n_layer)]

    def generate(self, idx: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int = None,
                 top_p: float = None, use_cache: bool = True, prompt_lengths=None,
                 eos_token_id: int = None) -> Tensor:
        """Extend each row of `idx` by `max_new_tokens` sampled tokens (see nn.sampling.generate);
        with `use_cache`, each new token runs through the model alone, against the layers' kept keys
        and values. The tokens are the same either way (up to the rounding of the last bits, which
        could only tip a near-tie).

        prompt_lengths: prompts of different lengths in one batch, left-padded to idx's length: (B,) ints,
        row b's prompt being its last prompt_lengths[b] tokens (the padding's ids do not matter: forward's
        `padding` hides them). Each row then gets the tokens it would get alone. The padded prompts and the
        new tokens must fit in block_size: the window does not slide (it would move each row differently).
        eos_token_id: a row that produces it is finished, and its later tokens are that id too; generation
        stops once every row is, so the result can be shorter than max_new_tokens.
        """
        padding = self._left_padding(idx, max_new_tokens, prompt_lengths)
        if use_cache:
            next_logits = self._cached_next_logits(padding)
        elif padding is not None:     # the whole (uncropped: it fits) context each time, padding hidden
            def next_logits(idx):
                return self(idx, padding=padding)[0][:, -1, :]
        else:
            next_logits = None        # sampling.generate's own: the whole context, cropped to block_size
        return sampling.generate(self, idx, max_new_tokens, temperature, top_k, self.config.block_size,
                                 top_p, next_logits, eos_token_id)

    def _left_padding(self, idx: Tensor, max_new_tokens: int, prompt_lengths):
        """forward's `padding` for generate's prompt_lengths: None when no row is padded (the plain path)."""
        if prompt_lengths is None:
            return None
        (B, T), lengths = idx.shape, np.asarray(prompt_lengths)
        if lengths.shape != (B,) or not ((1 <= lengths) & (lengths <= T)).all():
            raise ValueError(f"generate: prompt_lengths must hold one length from 1 to {T} (idx's length) for each "
                             f"of idx's {B} rows, got {prompt_lengths}")
        if (lengths == T).all():
            return None
        if T + max_new_tokens > self.config.block_size:
            raise ValueError(f"generate: padded prompts of {T} tokens + max_new_tokens {max_new_tokens} = "
                             f"{T + max_new_tokens} tokens do not fit in block_size {self.config.block_size}; ask "
                             "for fewer new tokens or shorten the longest prompt")
        return T - lengths

    def _cached_next_logits(self, padding=None):
        """next_logits for sampling.generate that feeds the model only the tokens its caches lack (with
        forward's `padding`, the same each step: it counts columns from the sequence's start)."""
        block_size, caches = self.config.block_size, self.new_caches()

        def next_logits(idx):
            nonlocal caches
            if idx.shape[1] > block_size:
                # The window slides: every kept token moves down one position and the first drops out,
                # and both change every layer's keys and values. So once the context is longer than
                # block_size, each step recomputes the cropped context (as the uncached path does)
                # and the cache saves nothing; until then a step costs one position.
                # (never with padding: generate checked that the padded rows fit)
                caches, idx = self.new_caches(), idx[:, -block_size:]
            logits, _ = self(idx[:, len(caches[0]):], caches=caches, padding=padding)
            return logits[:, -1, :]
        return next_logits

    # ------------------------------------------------------------------ Hugging Face GPT-2 (nn/hf.py)
    @classmethod
    def from_pretrained(cls, folder, **overrides) -> "GPT":
        """Load a Hugging Face GPT-2 folder (config.json + model.safetensors; never pickle files).
        `overrides` change config fields such as dropout."""
        return hf.from_pretrained(cls, GPTConfig, folder, **overrides)

    def save_pretrained(self, folder, tokenizer=None) -> None:
        """Write a GPT-2 folder that transformers' GPT2LMHeadModel loads (config.json, model.safetensors,
        and the tokenizer's files if one is given), replacing `folder` only once all of it is written."""
        hf.save_pretrained(self, folder, tokenizer)
