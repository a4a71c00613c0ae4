"""``tg.cuda.is_available()``: torch.cuda's question, asked of the device layer (device.py), which knows
whether CuPy imports and sees a GPU (the CuPy stand-in counts: it is what the `cuda` device runs on then)."""
from __future__ import annotations

from . import device as _devices

__all__ = ["is_available", "device_count"]


def is_available() -> bool:
    """True when the `cuda` device can be used here."""
    return _devices.cuda_available()


def device_count() -> int:
    """How many GPUs the `cuda` device sees (0 without one)."""
    return _devices.cuda_device_count()
