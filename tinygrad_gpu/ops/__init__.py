"""Differentiable ops, one file per family: elementwise, reduce, movement, linalg."""
