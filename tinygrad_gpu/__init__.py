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
from . import amp, autograd, cuda, distributed, dtypes, function_forms, linalg, nn, optim, utils, viz
from .amp import autocast
from .backends import backends
from .checkpoint import load, save
from .ops.compositions import (broadcast_shapes, broadcast_tensors, get_default_dtype, hstack, is_tensor, promote_types,
                           result_type, rsub, std_mean, tensordot, var_mean, vstack)
from .conveniences import allclose, from_numpy
from .autograd import grad
from .creation import (arange, empty, empty_like, eye, full, full_like, linspace, meshgrid, ones, ones_like, rand,
                       rand_like, randint, randn, randn_like, randperm, tensor, tril_indices, triu_indices, zeros,
                       zeros_like)
from .device import cuda_available, default_device, set_default_device
from .dtypes import bfloat16, bool_, finfo, float16, float32, float64, int32, int64
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .ops.elementwise import where
from .ops.linalg import dot, einsum, matmul
from .ops.movement import cat, chunk, split, stack
from .ops.rearrange import diag, diagonal, flip, repeat_interleave, roll, unflatten
from .ops.sort import searchsorted, unique
from .random import get_rng_state, initial_seed, manual_seed, set_rng_state
from .tensor import Tensor, enable_grad, is_grad_enabled, no_grad, set_grad_enabled

bool = bool_  # noqa: A001  (PyTorch spells it tg.bool)
long, double, half = int64, float64, float16
concat = concatenate = cat

# PyTorch offers most tensor methods as module functions too: tg.exp(x) is x.exp() (function_forms.py).
globals().update(function_forms.function_forms())

__version__ = "0.1.0"
