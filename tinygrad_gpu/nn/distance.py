"""The angle between vectors along a dim: cosine_similarity (reached as ``nn.functional.cosine_similarity``).
A composition of Tensor ops, so the gradients come from the ops."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..ops.compositions import vector_norm
from ..ops.elementwise import check_broadcast
from ..ops.movement import normalize_dim
from ..tensor import Tensor


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """The cosine of the angle between x1 and x2 along dim: <x1, x2> / (||x1|| ||x2||), in [-1, 1].

    Computed as PyTorch does, each vector divided by its length first (clamped below at eps, so a zero
    vector gives 0) and the unit vectors' dot product taken after: the products of large vectors cannot
    overflow that way. x1 and x2 broadcast (dim counts in the broadcast shape); integers and bools are
    converted to the promoted floating dtype, which must exist (two integer tensors are an error)."""
    check_broadcast("cosine_similarity", x1.shape, x2.shape)
    common = dtypes.promote(x1.dtype, x1.ndim, x2.dtype, x2.ndim)
    if not dtypes.is_floating(common):
        raise RuntimeError(f"cosine_similarity: needs a floating-point input, got {x1.dtype} and {x2.dtype}; "
                           "convert them first, e.g. x.float()")
    x1, x2 = (x if x.is_floating_point() else x.to(dtype=common) for x in (x1, x2))
    shape = tuple(np.broadcast_shapes(x1.shape, x2.shape))
    x1, x2 = (x if x.shape == shape else x.expand(shape) for x in (x1, x2))
    dim = normalize_dim("cosine_similarity", dim, max(len(shape), 1))
    unit1 = x1 / vector_norm(x1, 2, dim, keepdim=True).clamp(min=eps)
    unit2 = x2 / vector_norm(x2, 2, dim, keepdim=True).clamp(min=eps)
    return (unit1 * unit2).sum(dim)
