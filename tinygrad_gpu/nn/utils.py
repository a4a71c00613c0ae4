"""torch.nn.utils' gradient clipping, where torch code looks for it: ``tg.nn.utils.clip_grad_norm_``.

clip_grad_norm_ is the optimizer package's (optim/clip.py: one scale for all gradients, kept on the device);
this module only gives it torch's second address, and adds clip_grad_value_.
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from ..optim.clip import clip_grad_norm_
from ..tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient, in place, to [-clip_value, clip_value], element by element. Unlike clipping by
    norm this changes the update's direction; it only bounds the single entries. foreach is accepted for
    torch's signature and changes nothing (each gradient is one array operation either way)."""
    clip_value = float(clip_value)
    if not clip_value >= 0:                                    # nan is refused too
        raise ValueError(f"clip_grad_value_: clip_value must be a non-negative number, got {clip_value}")
    for p in [parameters] if isinstance(parameters, Tensor) else parameters:
        g = p.grad
        if g is None:
            continue
        with devices.use(g.device), np.errstate(invalid="ignore"):
            devices.array_module(g.device).clip(g.data, -clip_value, clip_value, out=g.data)
