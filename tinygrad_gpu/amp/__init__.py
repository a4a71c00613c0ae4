"""Mixed precision: autocast (run each op in the dtype it needs) and GradScaler (keep float16
gradients from underflowing), with torch.amp's names. autocast_mode.py and grad_scaler.py explain."""
from .autocast_mode import autocast, get_autocast_dtype, is_autocast_enabled
from .grad_scaler import GradScaler

__all__ = ["autocast", "GradScaler", "get_autocast_dtype", "is_autocast_enabled"]
