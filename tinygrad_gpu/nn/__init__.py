"""Neural-network building blocks. ``functional`` holds the stateless layer functions and losses."""
from . import functional

__all__ = ["functional"]
