"""Utilities under torch.utils' names: ``data`` (Dataset, DataLoader, random_split) and ``checkpoint``
(activation checkpointing)."""
from . import checkpoint, data

__all__ = ["checkpoint", "data"]
