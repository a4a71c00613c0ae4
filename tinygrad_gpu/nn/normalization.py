"""Normalisation by statistics over groups of elements: group_norm and batch_norm (reached as
``nn.functional.<name>``; layer_norm, the hot one, routes to a fused op from nn/functional.py).

    y = (x - mean) / sqrt(var + eps) * weight + bias          (var: the biased variance, divided by n)

What the mean and variance are taken over is the difference:

    input (N, C, *)      layer_norm: each sample's last dims          batch_norm: each channel, over N and *
                         group_norm: each sample's group of C / G channels, with *

Both are compositions of Tensor ops (mean, var, rsqrt), so the gradient flows through the statistics too,
as it must: each output depends on every input of its group. 16-bit inputs are computed in float32 and
rounded once at the end, as PyTorch's CPU kernels do; weight and bias are per channel (C,).

PyTorch's checks, followed here: fewer than 2 dims is an error; a group (or, in training, a channel) of one
value has no variance to speak of (ValueError); mismatched parameter sizes are RuntimeErrors; integers have
no version (NotImplementedError).
"""
from __future__ import annotations

import math

from .. import device as devices
from .. import dtypes
from ..tensor import Tensor, no_grad


def _check_one_value_per_group(op: str, size: list) -> None:
    """PyTorch's _verify_batch_size: normalising a single value gives 0 / 0."""
    if size[0] * math.prod(size[2:]) == 1:
        raise ValueError(f"{op}: expected more than 1 value per channel when training, got input size {size}")


def _computed_in(x: Tensor):
    """The dtype the statistics are computed in: float32 for 16-bit floats, the dtype itself otherwise."""
    return dtypes.float32 if dtypes.is_half(x.dtype) else x.dtype


def _per_channel(t: Tensor, ndim: int, dtype) -> Tensor:
    """A (C,) parameter shaped (C, 1, ..., 1) to broadcast over (N, C, *), in the computation's dtype."""
    return t.to(dtype=dtype).reshape((t.shape[0],) + (1,) * (ndim - 2))


def group_norm(input: Tensor, num_groups: int, weight: Tensor = None, bias: Tensor = None,
               eps: float = 1e-5) -> Tensor:
    """Normalise each sample's channels in num_groups groups of C / num_groups channels (with everything
    after them), then scale and shift each channel by weight and bias (C,). Independent of the batch size,
    so it behaves the same in training and evaluation (Wu and He, 2018)."""
    op = "group_norm"
    if input.ndim < 2:
        raise RuntimeError(f"{op}: expected an input of at least 2 dims (N, C, *), got shape {input.shape}")
    n, c, spatial = input.shape[0], input.shape[1], input.shape[2:]
    _check_one_value_per_group(op, [n * c // num_groups, num_groups, *spatial])
    if num_groups < 1 or c % num_groups:
        raise RuntimeError(f"{op}: the {c} channels of input shape {input.shape} cannot be split into "
                           f"num_groups={num_groups} groups of equal size")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t.shape[0] != c):
            raise RuntimeError(f"{op}: {name} must hold one value per channel, shape ({c},), got {t.shape}")
    dtypes.reject_non_floating(op, input.dtype)
    dtype = _computed_in(input)
    x = input.to(dtype=dtype)
    groups = x.reshape(n, num_groups, c // num_groups * math.prod(spatial))   # a row: one group of one sample
    mean = groups.mean(-1, keepdim=True)
    rstd = (groups.var(-1, keepdim=True, correction=0) + eps).rsqrt()
    # per (sample, channel): each channel takes its group's statistics
    shape = (n, c) + (1,) * len(spatial)
    channel_mean = mean.expand(n, num_groups, c // num_groups).reshape(shape)
    channel_rstd = rstd.expand(n, num_groups, c // num_groups).reshape(shape)
    weight = None if weight is None else _per_channel(weight, input.ndim, dtype)
    bias = None if bias is None else _per_channel(bias, input.ndim, dtype)
    return _scale_and_shift(x, channel_mean, channel_rstd, weight, bias).to(dtype=input.dtype)


def _scale_and_shift(x: Tensor, mean: Tensor, rstd: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """(x - mean) * rstd * weight + bias, arranged as PyTorch's CPU kernels compute it: x * scale + shift with
    scale = rstd * weight and shift = bias - mean * scale. The same number up to rounding, and the same nan
    where an infinity meets a zero or another infinity (an infinite weight or mean, say). (The price: a group
    of one element, whose exact output is its bias, comes out with rounding noise, as PyTorch's does.)"""
    scale = rstd if weight is None else rstd * weight
    shift = -mean * scale if bias is None else bias - mean * scale
    return x * scale + shift


def batch_norm(input: Tensor, running_mean: Tensor, running_var: Tensor, weight: Tensor = None,
               bias: Tensor = None, training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel (dim 1) of (N, C, *) by its mean and variance, then scale and shift it.

    training=True: the statistics are the batch's (over N and *; the gradient flows through them), and
    running_mean / running_var, when given, move a step towards them in place:
        running = (1 - momentum) * running + momentum * batch statistic
    (the unbiased variance, n / (n - 1) times the biased one, for running_var), as torch does.
    training=False: the running statistics normalise instead (they must be given).

    A 16-bit input may come with float32 statistics and parameters (computed in float32, rounded once);
    otherwise all share the input's dtype, as PyTorch's CPU requires."""
    op = "batch_norm"
    if training:
        _check_one_value_per_group(op, list(input.shape))
    c = input.shape[1] if input.ndim > 1 else 0
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and t.numel() != c:
            raise RuntimeError(f"{op}: {name} should hold {c} values (one per channel of input shape "
                               f"{input.shape}), not {t.numel()}")
    if not training and (running_mean is None or running_var is None):
        raise RuntimeError(f"{op}: running_mean and running_var must be given in evaluation mode "
                           "(training=False normalises by them)")
    dtypes.reject_non_floating(op, input.dtype)
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and t.dtype != input.dtype and not (dtypes.is_half(input.dtype) and t.dtype == dtypes.float32):
            raise RuntimeError(f"{op}: {name} is {t.dtype} but input is {input.dtype}; they must share the dtype "
                               "(or be float32 for a 16-bit input)")
    dtype = _computed_in(input)
    x = input.to(dtype=dtype)
    dims = (0,) + tuple(range(2, input.ndim))
    shape = (1, c) + (1,) * (input.ndim - 2)                     # per channel, broadcast over the rest
    if training:
        mean, var = x.mean(dims), x.var(dims, correction=0)
        count = input.numel() // max(c, 1)
        if running_mean is not None and running_var is not None and count:
            _update_running_statistics(running_mean, running_var, mean, var, count, momentum)
    else:
        mean, var = running_mean.to(dtype=dtype), running_var.to(dtype=dtype)
    weight = None if weight is None else weight.to(dtype=dtype).reshape(shape)
    bias = None if bias is None else bias.to(dtype=dtype).reshape(shape)
    rstd = (var.reshape(shape) + eps).rsqrt()
    return _scale_and_shift(x, mean.reshape(shape), rstd, weight, bias).to(dtype=input.dtype)


def _update_running_statistics(running_mean: Tensor, running_var: Tensor, mean: Tensor, var: Tensor, count: int,
                               momentum: float) -> None:
    """One step of the running estimates, written into the buffers' arrays (a module's state dict sees the
    same arrays); recorded in no graph."""
    unbiased = count / (count - 1) if count > 1 else math.nan
    with no_grad():
        new_mean = running_mean * (1 - momentum) + mean.detach() * momentum
        new_var = running_var * (1 - momentum) + var.detach() * (momentum * unbiased)
    for buffer, value in ((running_mean, new_mean), (running_var, new_var)):
        with devices.use(buffer.device):
            buffer.data[...] = value.data.astype(buffer.dtype, copy=False)
