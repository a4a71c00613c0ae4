"""Utilities under torch.utils' names: ``data`` (Dataset, DataLoader, random_split)."""
from . import data

__all__ = ["data"]
