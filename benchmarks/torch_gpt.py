"""nanoGPT in PyTorch with the parameter names of tinygrad_gpu.nn.GPT: the eager-mode yardstick of
benchmarks/step.py (the structure of the reference model in tests/test_torch_parity.py), so that
our state_dict loads into it with strict=True and both start from the same weights.

Importing this module imports torch; step.py and scaling.py import it only where they run PyTorch.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm(nn.Module):
    """nanoGPT's LayerNorm: the bias is optional."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        self.n_head, self.n_embd = c.n_head, c.n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = LayerNorm(c.n_embd, bias=c.bias)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c.n_embd, bias=c.bias)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TorchGPT(nn.Module):
    """`c`: any object with block_size, vocab_size, n_layer, n_head, n_embd and bias (no dropout)."""

    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_size, c.n_embd),
            wpe=nn.Embedding(c.block_size, c.n_embd),
            h=nn.ModuleList([Block(c) for _ in range(c.n_layer)]),
            ln_f=LayerNorm(c.n_embd, bias=c.bias),
        ))
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight          # weight tying

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        """nanoGPT's groups, decay on 2-D parameters only; PyTorch's default implementation (a loop
        on the CPU, foreach on CUDA), as a user gets it."""
        params = list(self.parameters())
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)


def training_step(config, vocab_size: int, device, seed: int = 0):
    """A function doing one step (forward, backward, clip, AdamW) on a fixed random batch, with torch's
    own initial weights (only its time matters to scaling.py). `config`: a tinygrad_gpu TrainConfig."""
    import types
    torch.manual_seed(seed)
    shape = types.SimpleNamespace(vocab_size=vocab_size, block_size=config.block_size, n_layer=config.n_layer,
                                  n_head=config.n_head, n_embd=config.n_embd, bias=config.bias)
    model = TorchGPT(shape).to(device)
    optimizer = model.configure_optimizers(config.weight_decay, config.lr, (config.beta1, config.beta2))
    x = torch.randint(0, vocab_size, (config.batch_size, config.block_size), device=device)
    y = torch.randint(0, vocab_size, (config.batch_size, config.block_size), device=device)

    return lambda: train_step(model, optimizer, x, y, config.grad_clip)


def train_step(model, optimizer, x, y, grad_clip: float):
    """Forward, backward, clip the gradient norm (0: no clipping), AdamW step; returns the loss."""
    _, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss
