"""Loss scaling on the device: grad_scaler.cu, its NumPy references, its launchers.

tinygrad_gpu.amp.GradScaler calls them; the scale (float32), the growth tracker (int32) and the
found_inf flags (float32) are 0-d arrays on the gradients' device, so the host reads none of them:

    non_finite_check_and_unscale_(grad, found_inf, scale, device)     # once per gradient, in unscale_()
    update_scale_(scale, growth_tracker, found_inf, growth_factor=2.0, backoff_factor=0.5,
                  growth_interval=2000, device=device)                # once per step, in update()
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import runtime

FILE = "grad_scaler.cu"


# ----------------------------------------------------------------------------- reference
def inverse_scale(scale):
    """float32(1 / float64(scale)), PyTorch's reciprocal: in double, rounded once (a 0-d array or NumPy scalar)."""
    with np.errstate(divide="ignore", over="ignore"):
        return (1.0 / scale.astype(np.float64)).astype(np.float32)


def reference_non_finite_check_and_unscale_(grad, found_inf, scale) -> None:
    """grad_scaler.cu's unscale, in place: found_inf = 1 if grad holds an inf or a nan (else it keeps its
    value), then grad *= inv_scale. Array operations only, so that on cuda the host waits for nothing."""
    xp = runtime.array_module_of(grad)
    found_inf[...] = xp.maximum(found_inf, ~xp.isfinite(grad).all())
    with np.errstate(invalid="ignore", over="ignore"):          # inf * 0 when the scale is inf, as on a GPU
        grad *= inverse_scale(scale)


def reference_update_scale_(scale, growth_tracker, found_inf, growth_factor: float, backoff_factor: float,
                            growth_interval: int) -> None:
    """grad_scaler.cu's scale update, on 0-d NumPy arrays, in place (PyTorch's _amp_update_scale_)."""
    with np.errstate(over="ignore"):                             # growth past float32's range is refused below
        if found_inf != 0:
            scale[...] = np.float32(float(scale) * backoff_factor)
            growth_tracker[...] = 0
            return
        successful = int(growth_tracker) + 1
        if successful == growth_interval:
            grown = np.float32(float(scale) * growth_factor)
            if np.isfinite(grown):
                scale[...] = grown
            growth_tracker[...] = 0
        else:
            growth_tracker[...] = successful


# ----------------------------------------------------------------------------- launchers
def non_finite_check_and_unscale_(grad, found_inf, scale, device: str) -> None:
    """Multiply grad by 1 / scale in place, and set found_inf (a float32 0-d array) to 1 if grad held an inf
    or a nan before. found_inf and scale (float32, 0-d) live on `device`, as grad does."""
    if device == "cpu" or not runtime.use_kernel(device, grad):
        reference_non_finite_check_and_unscale_(grad, found_inf, scale)
        return
    n = grad.size
    if not n:
        return
    # The kernel walks flat memory: a strided gradient is unscaled in a contiguous copy, then put back.
    work = grad if grad.flags.c_contiguous else runtime.contiguous(devices.array_module(device), grad)
    runtime.launch(device, FILE, "amp_non_finite_check_and_unscale", (runtime.grid_stride_grid(n),), (256,),
                   [work, np.int64(n), found_inf, scale])
    if work is not grad:
        grad[...] = work


def update_scale_(scale, growth_tracker, found_inf, growth_factor: float, backoff_factor: float,
                  growth_interval: int, device: str) -> None:
    """Back off (found_inf set) or count a clean step and grow every growth_interval of them: scale (float32)
    and growth_tracker (int32) in place, all three 0-d arrays on `device`."""
    if device == "cpu":
        reference_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval)
        return
    runtime.launch(device, FILE, "amp_update_scale", (1,), (1,),
                   [scale, growth_tracker, found_inf, np.float64(growth_factor), np.float64(backoff_factor),
                    np.int32(growth_interval)])
