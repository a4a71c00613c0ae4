"""One Adam/AdamW step for one parameter tensor, in place: adamw.cu, its NumPy reference, its launcher.

The optimizers (tinygrad_gpu.optim) call ``adamw_update`` once per parameter per step:

    adamw_update(p.data, p.grad.data, state["exp_avg"], state["exp_avg_sq"], lr=1e-3, beta1=0.9,
                 beta2=0.999, eps=1e-8, weight_decay=0.01, step=t, device=p.device)   # AdamW
    adamw_update(..., decoupled=False)                                             # Adam (L2 penalty)

param, exp_avg and exp_avg_sq are updated in place (float32 master weights and moments
on emu and cuda; the reference accepts any float dtype); grad may be any float dtype.
"""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from . import fast_cpu, runtime

FILE = "adamw.cu"


def step_scalars(lr, beta1, beta2, weight_decay, step: int, decoupled: bool) -> dict:
    """The per-step constants, in double precision (1 - 0.999**t loses digits in float32)."""
    if step < 1:
        raise ValueError(f"adamw_update: step counts from 1, got {step}")
    return dict(step_size=lr / (1 - beta1 ** step), bias_correction2_sqrt=math.sqrt(1 - beta2 ** step),
                decay=1 - lr * weight_decay if decoupled else 1.0, l2=0.0 if decoupled else weight_decay)


# ----------------------------------------------------------------------------- reference
def reference_update(param, grad, exp_avg, exp_avg_sq, step_size, beta1, beta2, bias_correction2_sqrt, eps,
                     decay, l2) -> None:
    """adamw.cu's update, in its order; param, exp_avg and exp_avg_sq in place."""
    g = grad.astype(param.dtype) + l2 * param if l2 else grad.astype(param.dtype)     # 0 * inf would be nan
    param *= decay
    exp_avg += (1 - beta1) * (g - exp_avg)
    exp_avg_sq *= beta2
    exp_avg_sq += (1 - beta2) * g * g
    param -= step_size * (exp_avg / (runtime.array_module_of(param).sqrt(exp_avg_sq) / bias_correction2_sqrt + eps))


# ----------------------------------------------------------------------------- launcher
def adamw_update(param, grad, exp_avg, exp_avg_sq, lr: float, beta1: float, beta2: float, eps: float,
                 weight_decay: float, step: int, device: str, decoupled: bool = True) -> None:
    """Update param, exp_avg and exp_avg_sq in place (AdamW; Adam with decoupled=False)."""
    if not (param.shape == grad.shape == exp_avg.shape == exp_avg_sq.shape):
        raise ValueError(f"adamw_update: param {param.shape}, grad {grad.shape}, exp_avg {exp_avg.shape} and "
                         f"exp_avg_sq {exp_avg_sq.shape} must have one shape")
    s = step_scalars(lr, beta1, beta2, weight_decay, step, decoupled)
    if device == "cpu":
        fast_cpu.adamw_update(param, grad, exp_avg, exp_avg_sq, s["step_size"], beta1, beta2,
                              s["bias_correction2_sqrt"], eps, s["decay"], s["l2"])
        return
    if not runtime.use_kernel(device, param, exp_avg, exp_avg_sq):
        reference_update(param, grad, exp_avg, exp_avg_sq, s["step_size"], beta1, beta2,
                         s["bias_correction2_sqrt"], eps, s["decay"], s["l2"])
        return
    for name, a in (("param", param), ("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)):
        if not a.flags.c_contiguous:
            raise ValueError(f"adamw_update: {name} must be C-contiguous: the kernel updates it in place")
    xp = devices.array_module(device)
    grad = runtime.contiguous(xp, grad, np.float32)
    n = param.size
    if n:
        runtime.launch(device, FILE, "adamw_update", (runtime.grid_stride_grid(n),), (256,),
                       [param, grad, exp_avg, exp_avg_sq, np.int64(n), np.float32(s["step_size"]),
                        np.float32(1 - beta1), np.float32(beta2), np.float32(1 - beta2),
                        np.float32(s["bias_correction2_sqrt"]), np.float32(eps), np.float32(s["decay"]),
                        np.float32(s["l2"])])
