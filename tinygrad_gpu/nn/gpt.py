"""GPT: a decoder-only transformer laid out exactly like nanoGPT (and so like GPT-2).

    idx (B, T) -> wte(idx) + wpe(positions) -> n_layer x Block -> ln_f -> lm_head -> logits (B, T, vocab)
    Block:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
    attn:   causal multi-head self-attention, q, k, v from one Linear (c_attn), output through c_proj
    mlp:    Linear(4x wider) -> GELU (tanh approximation) -> Linear back

Parameter names match nanoGPT's ``state_dict`` key for key (``transformer.h.0.attn.c_attn.weight``,
``lm_head.weight`` tied to ``transformer.wte.weight``, Linear weights (out, in)), so its
checkpoints load with strict=True, and ``from_pretrained`` maps a Hugging Face GPT-2 checkpoint.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os

from .. import creation
from ..optim import configure_adamw
from ..tensor import Tensor
from . import functional as F
from . import init, sampling
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


class CausalSelfAttention(Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_attn = Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = Dropout(config.dropout)
        self.resid_dropout = Dropout(config.dropout)
        self.n_head, self.n_embd = config.n_head, config.n_embd

    def forward(self, x):
        B, T, C = x.shape
        # (B, T, 3C) -> q, k and v, each (B, n_head, T, head_size): each head attends independently
        q, k, v = self.c_attn(x).reshape(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.attn_dropout.p if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, T, C)       # heads side by side again
        return self.resid_dropout(self.c_proj(y))


class MLP(Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = GELU(approximate="tanh")
        self.c_proj = Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = ModuleDict(dict(
            wte=Embedding(config.vocab_size, config.n_embd),
            wpe=Embedding(config.block_size, config.n_embd),
            drop=Dropout(config.dropout),
            h=ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
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

    def flops_per_token(self) -> float:
        """Training FLOPs per token (forward + backward): 6 per parameter for the matrix products
        plus the attention scores, 12 * n_layer * n_embd * block_size (nanoGPT's estimate)."""
        c = self.config
        return 6 * self.num_params() + 12 * c.n_layer * c.n_embd * c.block_size

    def estimate_mfu(self, tokens_per_second: float, peak_flops: float) -> float:
        """Model FLOPs utilisation: achieved training FLOP/s as a fraction of the hardware's peak."""
        return self.flops_per_token() * tokens_per_second / peak_flops

    def forward(self, idx: Tensor, targets: Tensor = None):
        """Logits for every position, and the mean cross-entropy against `targets` (ignore_index -1)."""
        if idx.ndim != 2:
            raise ValueError(f"GPT: idx must be (batch, time) token ids, got shape {idx.shape}")
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"GPT: sequence of length {T} is longer than block_size {self.config.block_size}; "
                             "crop it to the last block_size tokens")
        positions = creation.arange(T, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(positions))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay: float, learning_rate: float, betas=(0.9, 0.95), eps=1e-8):
        """AdamW with weight decay on matrices and embeddings (2-D and up) only, not on biases and norms;
        frozen parameters left out (optim.configure_adamw)."""
        return configure_adamw(self.parameters(), weight_decay, learning_rate, betas, eps)

    def generate(self, idx: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int = None) -> Tensor:
        """Extend each row of `idx` by `max_new_tokens` sampled tokens (see nn.sampling.generate)."""
        return sampling.generate(self, idx, max_new_tokens, temperature, top_k, self.config.block_size)

    # ------------------------------------------------------------------ Hugging Face GPT-2
    CONV1D_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")

    @classmethod
    def from_pretrained(cls, path: str, **overrides) -> "GPT":
        """Load a Hugging Face GPT-2 checkpoint directory (config.json + model.safetensors).

        GPT-2 stores its Linear layers as "Conv1D" with weights (in, out); ours are (out, in),
        so those four weights are transposed. The attention-mask buffers are not weights and are
        skipped. `overrides` can change config fields such as dropout.
        """
        from ..checkpoint import read_safetensors
        with open(os.path.join(path, "config.json")) as f:
            hf = json.load(f)
        config = GPTConfig(block_size=hf.get("n_positions", hf.get("n_ctx", 1024)), vocab_size=hf["vocab_size"],
                           n_layer=hf["n_layer"], n_head=hf["n_head"], n_embd=hf["n_embd"], bias=True)
        config = dataclasses.replace(config, **overrides)
        model = cls(config)
        state = {}
        for name, array in read_safetensors(os.path.join(path, "model.safetensors")).items():
            if name.endswith((".attn.bias", ".attn.masked_bias")):
                continue
            key = name if name.startswith(("transformer.", "lm_head.")) else "transformer." + name
            state[key] = array.T if key.endswith(cls.CONV1D_WEIGHTS) else array
        state.setdefault("lm_head.weight", state["transformer.wte.weight"])
        model.load_state_dict(state, strict=True)
        return model
