"""tg.linalg, as torch.linalg: the vector norm (ops/compositions.py); products are tg.matmul, tg.einsum and kin."""
from .ops.compositions import vector_norm

__all__ = ["vector_norm"]
