"""Adam (L2 weight decay folded into the gradient) and AdamW (decoupled weight decay).

Per parameter, with gradient g at step t (counting from 1):

    m = beta1 m + (1 - beta1) g               running mean of gradients
    v = beta2 v + (1 - beta2) g^2             running mean of squared gradients
    p = p - lr * (m / (1 - beta1^t)) / (sqrt(v) / sqrt(1 - beta2^t) + eps)

The divisions by (1 - beta^t) correct the bias of m and v, which start at zero.
Adam adds weight_decay * p to g first; AdamW instead shrinks p by (1 - lr * weight_decay)
before the update, so the decay does not pass through the adaptive scaling.
The arithmetic is one fused kernel per parameter: tinygrad_gpu/kernels/adamw.cu, defined by the
NumPy reference beside it in kernels/adamw.py (the cpu runs kernels/fast_cpu.py's version).
"""
from __future__ import annotations

from .. import device as devices
from .. import kernels
from .optimizer import Optimizer


class Adam(Optimizer):
    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"{type(self).__name__}: need lr, eps, weight_decay >= 0 and 0 <= betas < 1; got "
                             f"lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    def update(self, param, grad, state, group):
        if "step" not in state:
            state["step"] = 0
            # zeros_like, not param * 0: that is nan where param is inf, and for a 0-d parameter a
            # NumPy scalar that the in-place updates of adamw_update could not change
            xp = devices.array_module(param.device)
            state["exp_avg"] = xp.zeros_like(param.data)
            state["exp_avg_sq"] = xp.zeros_like(param.data)
        state["step"] += 1
        beta1, beta2 = group["betas"]
        kernels.adamw.adamw_update(param.data, grad, state["exp_avg"], state["exp_avg_sq"], lr=group["lr"], beta1=beta1,
                                   beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"],
                                   step=state["step"], device=param.device, decoupled=self.decoupled)


class AdamW(Adam):
    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


def configure_adamw(params, weight_decay: float, lr: float, betas=(0.9, 0.95), eps: float = 1e-8) -> AdamW:
    """nanoGPT's optimizer for a language model (GPT's and LSTMLanguageModel's configure_optimizers):
    weight decay on matrices and embeddings (2-D and up), none on biases and norms, which only
    shift and scale. Frozen parameters (requires_grad False) are left out, and so is a group left
    empty by them, so the groups are the same ones a checkpoint's optimizer state was saved with."""
    params = [p for p in params if p.requires_grad]
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return AdamW([group for group in groups if group["params"]], lr=lr, betas=betas, eps=eps)
