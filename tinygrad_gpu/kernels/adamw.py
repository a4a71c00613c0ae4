"""AdamW, three ways (a step is never differentiated: no composition): reference_* · adamw.cu · *_cpu.py (cpu).

One Adam/AdamW step for one parameter tensor, in place: the NumPy reference and the launcher.

The optimizers (tinygrad_gpu.optim) call ``adamw_update`` once per parameter per step:

    adamw_update(p.data, p.grad.data, state["exp_avg"], state["exp_avg_sq"], lr=1e-3, beta1=0.9,
                 beta2=0.999, eps=1e-8, weight_decay=0.01, step=t, device=p.device)   # AdamW
    adamw_update(..., decoupled=False)                                             # Adam (L2 penalty)

and, under a GradScaler, the skippable step, whose step count and overflow flag stay on the device:

    adamw_update_skippable(p.data, p.grad.data, state["exp_avg"], state["exp_avg_sq"], state["step"],
                           found_inf, lr=1e-3, ..., device=p.device)   # state["step"]: float32, 0-d

param, exp_avg and exp_avg_sq are updated in place (float32 master weights and moments
on emu and cuda; the reference accepts any float dtype); grad may be any float dtype.
"""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from . import cpu_paths, runtime

FILE = "adamw.cu"


def step_scalars(lr, beta1, beta2, weight_decay, step: int, decoupled: bool) -> dict:
    """The per-step constants, in double precision (1 - 0.999**t loses digits in float32)."""
    if step < 1:
        raise ValueError(f"adamw_update: step counts from 1, got {step}")
    scalars = bias_corrections(lr, beta1, beta2, step)
    scalars.update(weight_decay_scalars(lr, weight_decay, decoupled))
    return scalars


def bias_corrections(lr, beta1, beta2, step) -> dict:
    """step_size and bias_correction2_sqrt at step t, in double (as adamw_update_skippable's threads 0 do)."""
    return dict(step_size=lr / (1 - beta1 ** step), bias_correction2_sqrt=math.sqrt(1 - beta2 ** step))


def weight_decay_scalars(lr, weight_decay, decoupled: bool) -> dict:
    """decay multiplies p (AdamW), l2 * p joins the gradient (Adam); the other is 1 or 0."""
    return dict(decay=1 - lr * weight_decay if decoupled else 1.0, l2=0.0 if decoupled else weight_decay)


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


def reference_count_step(step, found_inf) -> None:
    """adamw_count_step: step += 1 in place (0-d NumPy arrays) unless found_inf is set."""
    if found_inf == 0:
        step += 1


def reference_update_skippable(param, grad, exp_avg, exp_avg_sq, step, found_inf, lr, beta1, beta2, eps, decay,
                               l2) -> None:
    """adamw_update_skippable: nothing when found_inf is set; else reference_update at step t = step (already
    counted), its bias corrections in double. It reads found_inf and step on the host: on cuda (float64
    parameters: the kernels are float32) that is a sync."""
    if found_inf != 0:
        return
    s = bias_corrections(lr, beta1, beta2, float(step))
    reference_update(param, grad, exp_avg, exp_avg_sq, s["step_size"], beta1, beta2, s["bias_correction2_sqrt"], eps,
                     decay, l2)


# ----------------------------------------------------------------------------- launcher
def _check_shapes(param, grad, exp_avg, exp_avg_sq) -> None:
    if not (param.shape == grad.shape == exp_avg.shape == exp_avg_sq.shape):
        raise ValueError(f"adamw_update: param {param.shape}, grad {grad.shape}, exp_avg {exp_avg.shape} and "
                         f"exp_avg_sq {exp_avg_sq.shape} must have one shape")


def _check_in_place(param, exp_avg, exp_avg_sq) -> None:
    for name, a in (("param", param), ("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)):
        if not a.flags.c_contiguous:
            raise ValueError(f"adamw_update: {name} must be C-contiguous: the kernel updates it in place")


def adamw_update(param, grad, exp_avg, exp_avg_sq, lr: float, beta1: float, beta2: float, eps: float,
                 weight_decay: float, step: int, device: str, decoupled: bool = True) -> None:
    """Update param, exp_avg and exp_avg_sq in place (AdamW; Adam with decoupled=False)."""
    _check_shapes(param, grad, exp_avg, exp_avg_sq)
    s = step_scalars(lr, beta1, beta2, weight_decay, step, decoupled)
    cpu = cpu_paths.cpu_kernels(device)        # every dtype: the update is written for any
    if cpu:
        cpu.adamw_update(param, grad, exp_avg, exp_avg_sq, s["step_size"], beta1, beta2,
                         s["bias_correction2_sqrt"], eps, s["decay"], s["l2"])
        return
    if not runtime.use_kernel(device, param, exp_avg, exp_avg_sq):
        reference_update(param, grad, exp_avg, exp_avg_sq, s["step_size"], beta1, beta2,
                         s["bias_correction2_sqrt"], eps, s["decay"], s["l2"])
        return
    _check_in_place(param, exp_avg, exp_avg_sq)
    xp = devices.array_module(device)
    grad = runtime.contiguous(xp, grad, np.float32)
    n = param.size
    if n:
        runtime.launch(device, FILE, "adamw_update", (runtime.grid_stride_grid(n),), (256,),
                       [param, grad, exp_avg, exp_avg_sq, np.int64(n), np.float32(s["step_size"]),
                        np.float32(1 - beta1), np.float32(beta2), np.float32(1 - beta2),
                        np.float32(s["bias_correction2_sqrt"]), np.float32(eps), np.float32(s["decay"]),
                        np.float32(s["l2"])])


def adamw_update_skippable(param, grad, exp_avg, exp_avg_sq, step, found_inf, lr: float, beta1: float,
                           beta2: float, eps: float, weight_decay: float, device: str, decoupled: bool = True) -> None:
    """adamw_update for a GradScaler's step, decided on the device: unless found_inf (float32, 0-d) is set, count
    the step (step: float32, 0-d, steps taken so far) and update param, exp_avg and exp_avg_sq in place, at that
    step; when it is set, change nothing. step and found_inf live on `device`, and the host reads neither (on the
    cpu they are at hand). Two launches on emu and cuda: the count, one thread, then the update."""
    _check_shapes(param, grad, exp_avg, exp_avg_sq)
    if step.dtype != np.float32 or step.shape != ():
        raise ValueError(f"adamw_update_skippable: step must be a float32 0-d array, got {step.dtype} {step.shape}")
    if device == "cpu":
        cpu = cpu_paths.cpu_kernels(device)              # before the count: a bad switch must not count a step
        reference_count_step(step, found_inf)
        if found_inf == 0:
            s = step_scalars(lr, beta1, beta2, weight_decay, int(step), decoupled)
            (cpu.adamw_update if cpu else reference_update)(param, grad, exp_avg, exp_avg_sq, s["step_size"], beta1,
                                                            beta2, s["bias_correction2_sqrt"], eps, s["decay"], s["l2"])
        return
    w = weight_decay_scalars(lr, weight_decay, decoupled)
    kernel = runtime.use_kernel(device, param, exp_avg, exp_avg_sq)
    if kernel:
        _check_in_place(param, exp_avg, exp_avg_sq)        # before the count: a refused step must not count
    runtime.launch(device, FILE, "adamw_count_step", (1,), (1,), [step, found_inf])
    if not kernel:
        reference_update_skippable(param, grad, exp_avg, exp_avg_sq, step, found_inf, lr, beta1, beta2, eps,
                                   w["decay"], w["l2"])
        return
    grad = runtime.contiguous(devices.array_module(device), grad, np.float32)
    n = param.size
    if n:
        runtime.launch(device, FILE, "adamw_update_skippable", (runtime.grid_stride_grid(n),), (256,),
                       [param, grad, exp_avg, exp_avg_sq, np.int64(n), step, found_inf, np.float64(lr),
                        np.float64(beta1), np.float64(beta2), np.float32(eps), np.float32(w["decay"]),
                        np.float32(w["l2"])])
