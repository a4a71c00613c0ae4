"""tinygrad_gpu: a from-scratch reverse-mode autograd engine on NumPy (CPU) and CuPy (GPU).

    import tinygrad_gpu as tg
    x = tg.tensor([[1., 2.]], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    x.grad                      # tensor([[2., 4.]])

Names and semantics follow PyTorch.  Start reading with docs/how_it_works.md, a tour of one
training step; then device.py, dtypes.py, tensor.py (Tensor and Function), autograd.py (the
backward pass) and gradient_sums.py, ops/ (each op's forward and backward side by side),
nn/functional.py, gradcheck.py.
"""
from . import amp, distributed, dtypes, nn, optim, viz
from .amp import autocast
from .backends import backends
from .checkpoint import load, save
from .autograd import grad
from .creation import (arange, empty, empty_like, eye, full, full_like, linspace, meshgrid, ones, ones_like, rand,
                       rand_like, randint, randn, randn_like, randperm, tensor, zeros, zeros_like)
from .device import cuda_available, default_device, set_default_device
from .dtypes import bfloat16, bool_, finfo, float16, float32, float64, int32, int64
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .ops.elementwise import where
from .ops.linalg import dot, einsum, matmul
from .ops.movement import cat, chunk, split, stack
from .ops.rearrange import diag, diagonal, flip, repeat_interleave, roll, unflatten
from .random import get_rng_state, initial_seed, manual_seed, set_rng_state
from .tensor import Tensor, enable_grad, is_grad_enabled, no_grad, set_grad_enabled

bool = bool_  # noqa: A001  (PyTorch spells it tg.bool)
long, double, half = int64, float64, float16

# PyTorch offers most tensor methods as module functions too: tg.exp(x) is x.exp().
_METHODS_AS_FUNCTIONS = (
    "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "abs", "sin", "cos", "erf", "sign", "square",
    "clamp", "clip", "maximum", "minimum", "masked_fill", "isfinite", "isnan", "logical_not", "logical_and",
    "logical_or", "sum", "mean", "var", "std", "max", "min", "amax", "amin", "argmax", "argmin", "logsumexp",
    "softmax", "log_softmax", "reshape", "flatten", "permute", "transpose", "movedim", "squeeze", "unsqueeze",
    "tril", "triu", "numel", "any", "all",
    "gather", "scatter", "scatter_add", "scatter_reduce", "masked_select", "nonzero",
    "prod", "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "sort", "argsort", "msort", "topk",
    "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "arcsin", "arccos", "arctan",
    "arcsinh", "arccosh", "arctanh", "exp2", "log2", "log10", "logaddexp", "floor", "ceil", "trunc", "fix", "round",
    "fmod", "remainder", "floor_divide", "div", "copysign", "lerp", "isclose", "isinf", "isposinf", "isneginf",
    "bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift",
)
for _name in _METHODS_AS_FUNCTIONS:
    globals()[_name] = getattr(Tensor, _name)
del _name

__version__ = "0.1.0"
