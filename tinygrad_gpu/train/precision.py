"""--dtype: what a run's matrix products compute in, nanoGPT's way.

``float32`` computes everything in float32. ``bfloat16`` and ``float16`` run the forward pass
(and the evaluation) under ``tg.autocast``: the matrix products in 16 bits on the tensor cores,
the losses, softmaxes and normalisations in float32, the parameters, their gradients and AdamW's
state in float32 (amp/autocast_mode.py). float16 keeps 5 exponent bits, so small gradients
underflow to 0: its runs scale the loss with a ``tg.amp.GradScaler``, which also skips, on the
device, the steps whose gradients overflowed. bfloat16 has float32's exponent and needs no scaler.

The default, as nanoGPT picks it: bfloat16 on a GPU that has bfloat16 tensor cores (compute
capability 8.0 and up), float16 on an older GPU, float32 on the CPU (which has no 16-bit
arithmetic: NumPy converts every 16-bit element to float32 and back, so 16 bits there is slower,
and only a rehearsal of what a GPU will compute).
"""
from __future__ import annotations

import dataclasses

from .. import device as devices
from .. import dtypes
from ..amp import GradScaler, autocast
from ..amp.autocast_mode import device_type
from .config import ConfigError

CHOICES = ("float32", "bfloat16", "float16")


def gpu_capability(device: str) -> tuple:
    """(major, minor) compute capability of GPU `device` ('cuda:N')."""
    properties = devices.cupy().cuda.runtime.getDeviceProperties(int(devices.canonical(device).split(":")[1]))
    return properties["major"], properties["minor"]


def cupy_holds_bfloat16() -> bool:
    """Can CuPy make a bfloat16 array? CuPy 14 with ml_dtypes and NumPy 2.1.2 or later can; CuPy 13 cannot."""
    try:
        devices.cupy().empty(0, dtypes.bfloat16)
        return True
    except (TypeError, ValueError):
        return False


def choose(name, device: str) -> str:
    """The dtype a run on `device` computes in: `name` (--dtype) when given, else the default above."""
    if name is not None and name not in CHOICES:
        raise ConfigError(f"--dtype must be one of {', '.join(CHOICES)}, got {name!r}")
    if not devices.is_cuda(device):
        return name or "float32"
    major, minor = gpu_capability(device)
    if name == "bfloat16" and (major, minor) < (8, 0):
        raise ConfigError(f"--dtype bfloat16: {device} (compute capability {major}.{minor}) has no bfloat16 tensor "
                          "cores (8.0 and up have them); use --dtype float16, which scales the loss, or float32")
    if name in (None, "bfloat16") and (major, minor) >= (8, 0) and not cupy_holds_bfloat16():
        if name:
            raise ConfigError("--dtype bfloat16: this CuPy cannot hold bfloat16 arrays (CuPy 14 with NumPy 2.1.2 or "
                              "later can: pip install -e '.[gpu]'); use --dtype float16")
        return "float16"            # the GPU has bfloat16, this CuPy does not: float16 with a scaler
    return name or ("bfloat16" if (major, minor) >= (8, 0) else "float16")


@dataclasses.dataclass
class Precision:
    """A run's dtype: the autocast region of its forward passes and, for float16, its GradScaler."""
    name: str
    device: str
    scaler: GradScaler = None

    @classmethod
    def for_run(cls, name, device: str) -> "Precision":
        name = choose(name, device)
        return cls(name, device, GradScaler(device) if name == "float16" else None)

    @property
    def low_dtype(self):
        """bfloat16 or float16; None for float32."""
        return None if self.name == "float32" else getattr(dtypes, self.name)

    def autocast(self):
        """The region a forward pass runs in (a region that casts nothing, for float32)."""
        return autocast(device_type(self.device), dtype=self.low_dtype, enabled=self.low_dtype is not None)
