"""The basic layers: Linear, Embedding, LayerNorm, Dropout, GELU, ReLU, Flatten. Each is a thin Module
holding its parameters around a function from ``nn.functional``."""
from __future__ import annotations

from .. import creation, dtypes
from ..amp import autocast_mode
from . import functional as F
from . import init
from .module import Module, Parameter


class Linear(Module):
    """y = x W^T + b, W stored as (out_features, in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(creation.empty(out_features, in_features, device=device, dtype=dtype))
        self.bias = Parameter(creation.empty(out_features, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        init.fan_in_uniform_(self.weight, self.in_features)
        if self.bias is not None:
            init.fan_in_uniform_(self.bias, self.in_features)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """A lookup table: row i of `weight` is the vector for id i."""

    def __init__(self, num_embeddings: int, embedding_dim: int, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(creation.randn(num_embeddings, embedding_dim, device=device, dtype=dtype))

    def forward(self, ids):
        return F.embedding(ids, self.weight)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    """PyTorch's LayerNorm. feeds_products=True (not PyTorch's): the output goes only into matrix products,
    so under autocast it is written in the region's dtype at once (F.layer_norm's out_dtype: the same numbers
    as the float32 output the products would cast), saving the cast's launch each way."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None, feeds_products: bool = False):
        super().__init__()
        self.feeds_products = feeds_products
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        affine = elementwise_affine
        self.weight = Parameter(creation.ones(self.normalized_shape, device=device, dtype=dtype)) if affine else None
        self.bias = Parameter(creation.zeros(self.normalized_shape, device=device, dtype=dtype)) \
            if affine and bias else None

    def forward(self, x):
        low = autocast_mode.region_dtype(x.device) if self.feeds_products else None
        out_dtype = low if x.dtype in (dtypes.float32, *dtypes.HALF) else None      # a float64 x is never cast
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps, out_dtype=out_dtype)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, bias={self.bias is not None}"


class Dropout(Module):
    """Zeroes elements with probability p in training mode; the identity in eval mode.
    forward(x, residual) is residual + dropout(x), as one op (F.dropout_add: a residual add's branch)."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = p

    def forward(self, x, residual=None):
        if residual is not None:
            return F.dropout_add(residual, x, self.p, self.training)
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)

    def extra_repr(self):
        return f"approximate='{self.approximate}'"


class ReLU(Module):
    def forward(self, x):
        return F.relu(x)


class Flatten(Module):
    """Flattens dims start_dim..end_dim into one; the default keeps the batch dim: (N, C, H, W) -> (N, C*H*W)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
