"""Automatic mixed precision, as torch.autocast does it: ``with tg.autocast("cuda"):`` (also
``tg.amp.autocast``).

Inside the region each op casts its floating inputs according to the kind of op it is; the
parameters themselves stay float32 (their casts are copies, made once per region):

* **low precision**: the matrix products (``@``/matmul, F.linear, F.scaled_dot_product_attention,
  F.conv2d and F.conv_transpose2d, einsum)
  run in the region's dtype, bfloat16 or float16: the tensor cores' formats, and where nearly all
  of a transformer's FLOPs are. Their sums are float32 inside (cuBLAS; on the CPU a float32 product
  rounded once);
* **float32**: the ops that need float32's range or precision (softmax, log_softmax, cross_entropy,
  nll_loss, mse_loss, binary_cross_entropy_with_logits, layer_norm, normalize, softplus, softmin,
  sum, prod, cumsum, cumprod, exp, log, log2, log10, rsqrt, pow, tan, sinh, cosh, asin, acos, and a
  number divided by a tensor) cast 16-bit inputs up, and return float32;
* **everything else** (+, *, gelu, dropout, reshapes, ...) runs in the dtype of its inputs, with the
  usual promotion: a float32 residual stream plus a bfloat16 branch is float32.

These are PyTorch's CUDA autocast lists for the ops this library has, and they apply on every
device (``"cuda"``, ``"cpu"``, ``"emu"``), so that the CPU rehearses what a GPU will compute.
float64 tensors are never cast (as in PyTorch), and neither is anything outside a region.

Where we differ from PyTorch:

* PyTorch's CPU autocast has a shorter float32 list (it leaves softmax, layer_norm, sum, exp and
  log in their input's dtype); we use the CUDA list on the CPU too. For a GPT the two agree: the
  only float32-listed ops it meets are layer_norm, which gets the float32 residual stream anyway,
  and cross_entropy, which both lists have.
* cross_entropy does not make a float32 copy of the logits: our kernel reads 16-bit logits and
  computes in float32, which gives PyTorch's numbers without a (batch x vocabulary) float32 array.
* The float32 ops decide for themselves only: an op built from other ops (logsumexp, var, ...)
  casts as its parts do, where PyTorch casts once for the whole op.
* F.binary_cross_entropy is refused inside a float16 or bfloat16 region, as PyTorch refuses it.
* A LayerNorm made with ``feeds_products=True`` (GPT's are) returns the region's dtype, not float32:
  its output goes only into products, which would cast it, so the kernel writes it so at once
  (computed in float32, rounded once: the same numbers each way, one launch fewer each way).

Backward passes run with autocast off, so each backward op computes in the dtypes its forward
chose (``autograd.run_backward`` calls ``suspended()``); a parameter's gradient flows back through
its cast and arrives float32. The casts of leaves that require grad (the parameters) are kept for
the rest of the region (``cache_enabled``), so a weight used twice (tied, or in every step of an
LSTM) is cast once; the cache empties when the outermost region ends, which is why a region
should hold the forward pass and the loss, not the optimizer's step.

On emu and cuda the parameters' casts are made together: a training loop's regions cast the same
parameters step after step, so the first time a region meets a parameter that the last region cast,
it casts every parameter the last region cast (those still alive) in one launch (``fused.casts_together``),
and the backward casts their gradients back in one launch too (the engine gathers them:
``autograd._Scope``). The numbers are the one-by-one casts'. (A parameter changed in place in the middle
of a region, under no_grad, after the first of them was met would keep its earlier value there.)

This module holds the state and the casting rules; the ops call ``low_precision``, ``float32``
and ``suspended``. It imports no tensors: the ops give it theirs (and ``ops.fused`` its function that
casts tensors together, as ``_State.cast_together``).
"""
from __future__ import annotations

import functools
import weakref

import numpy as np

from .. import dtypes

DEFAULT_DTYPE = {"cuda": dtypes.float16, "emu": dtypes.float16, "cpu": dtypes.bfloat16}   # PyTorch's defaults


class _State:
    dtype_by_device_type = {}     # "cuda" / "cpu" / "emu" -> the low dtype, while a region is on for it
    caching_by_device_type = {}   # the same -> the innermost region's cache_enabled
    depth = 0                     # how many autocast regions (enabled or not) are open
    suspended = 0                 # > 0 while a backward runs: no casting at all
    cache = {}                    # id(leaf) -> (leaf, its cast): the casts of parameters in this region
    cast_in_region = {}           # (device, dtype) -> [leaf]: the parameters this outermost region has cast
    cast_in_last_region = {}      # the same, of the last outermost region (weak references), until cast again
    cast_together = None          # ops.fused.casts_together, which ops/fused.py puts here (this module imports no ops)


def device_type(device: str) -> str:
    """'cuda' for 'cuda:N', else the device itself ('cpu', 'emu')."""
    return "cuda" if device.startswith("cuda") else device


def region_open() -> bool:
    """Is any autocast region open? (Every float32-listed op asks first: the common answer is no.)"""
    return bool(_State.dtype_by_device_type)


def region_dtype(device: str):
    """The low dtype of the autocast region that covers tensors on `device` now, or None."""
    if _State.suspended or not _State.dtype_by_device_type:
        return None
    return _State.dtype_by_device_type.get(device_type(device))


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    return not _State.suspended and device_type in _State.dtype_by_device_type


def get_autocast_dtype(device_type: str):
    """The dtype autocast("device_type") casts to (its default when no region is open)."""
    return _State.dtype_by_device_type.get(device_type, DEFAULT_DTYPE[device_type])


class autocast:
    """``with tg.autocast("cuda", dtype=tg.bfloat16):`` (PyTorch's signature; also a decorator).

    device_type: "cuda", "cpu" or "emu" (the CUDA kernels on the CPU); dtype: float16 (default on
    cuda and emu) or bfloat16 (default on cpu); enabled=False makes a region where nothing is cast
    (inside an enabled one, too); cache_enabled: keep the parameters' casts for the region.
    """

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled: bool = True):
        if device_type not in DEFAULT_DTYPE:
            raise ValueError(f"autocast: device_type must be 'cuda', 'cpu' or 'emu', got {device_type!r}")
        dtype = DEFAULT_DTYPE[device_type] if dtype is None else np.dtype(dtype)
        if enabled and not dtypes.is_half(dtype):
            raise ValueError(f"autocast: dtype must be float16 or bfloat16, got {dtype}; for float32 leave "
                             "autocast out (or pass enabled=False)")
        self.device_type, self.dtype, self.enabled, self.cache_enabled = device_type, dtype, bool(enabled), cache_enabled
        self._previous = []

    def __enter__(self):
        kind = self.device_type
        self._previous.append((_State.dtype_by_device_type.get(kind), _State.caching_by_device_type.get(kind)))
        if self.enabled:
            _State.dtype_by_device_type[kind] = self.dtype
            _State.caching_by_device_type[kind] = self.cache_enabled
        else:
            _State.dtype_by_device_type.pop(kind, None)
        _State.depth += 1
        return self

    def __exit__(self, *exc):
        dtype, caching = self._previous.pop()
        if dtype is None:
            _State.dtype_by_device_type.pop(self.device_type, None)
        else:
            _State.dtype_by_device_type[self.device_type] = dtype
            _State.caching_by_device_type[self.device_type] = caching
        _State.depth -= 1
        if _State.depth == 0:               # the outermost region ends: its parameters' casts go
            _State.cache.clear()
            _State.cast_in_last_region = {key: [weakref.ref(leaf) for leaf in leaves]
                                          for key, leaves in _State.cast_in_region.items()}
            _State.cast_in_region = {}
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device_type, self.dtype, self.enabled, self.cache_enabled):
                return fn(*args, **kwargs)
        return wrapper


class suspended:
    """No casting inside (backward passes; the parts of an op that already cast its inputs)."""

    def __enter__(self):
        _State.suspended += 1
        return self

    def __exit__(self, *exc):
        _State.suspended -= 1
        return False


def _cast(t, dtype, cache: bool):
    """t in `dtype`. With `cache`, a leaf that requires grad (a parameter) is cast once per region: later uses
    share the cast, and its node, whose backward can be gone through by each of their graphs
    (elementwise.Cast). Only a cast that recorded its graph is kept: one made under no_grad would cut the
    parameter off from every later use's graph."""
    if t.dtype == dtype:
        return t
    if not (cache and t.requires_grad and t.is_leaf):
        return t.to(dtype=dtype)
    kept = _State.cache.get(id(t))
    if kept is not None and kept[0] is t and kept[1].dtype == dtype:
        return kept[1]
    if _cast_last_regions_parameters(t, dtype):
        return _State.cache[id(t)][1]
    cast = t.to(dtype=dtype)
    if cast.requires_grad:                  # recorded: grad mode was on
        _State.cache[id(t)] = (t, cast)     # the leaf is kept too, so that its id stays its own
        _State.cast_in_region.setdefault((t.device, dtype), []).append(t)
    return cast


def _cast_last_regions_parameters(t, dtype) -> bool:
    """If `t` is among the parameters the last region cast to `dtype` on its device (emu or cuda), cast all of
    them that are still leaves of float32 that require grad, in one launch, and keep those casts for this region
    (once per region); True when `t`'s cast is among them."""
    key = (t.device, dtype)
    last = _State.cast_in_last_region.get(key)
    if not last or t.device == "cpu" or _State.cast_together is None:
        return False
    leaves = [leaf for leaf in (ref() for ref in last) if leaf is not None and leaf.is_leaf and leaf.requires_grad
              and leaf.dtype == dtypes.float32 and leaf.device == t.device and id(leaf) not in _State.cache]
    if not any(leaf is t for leaf in leaves):
        return False
    casts = _State.cast_together(leaves, dtype)
    if casts is None:
        return False
    del _State.cast_in_last_region[key]
    for leaf, cast in zip(leaves, casts):
        _State.cache[id(leaf)] = (leaf, cast)
    _State.cast_in_region.setdefault(key, []).extend(leaves)
    return True


def low_precision(*tensors):
    """The inputs of a matrix product, cast to the region's dtype (float32 ones; float64 and
    non-floating ones, and None, pass unchanged). Outside a region: the inputs as they are."""
    if not _State.dtype_by_device_type:         # no region open: every op asks, so answer at once
        return tensors
    given = [t for t in tensors if t is not None]
    dtype = region_dtype(given[0].device) if given else None
    if dtype is None:
        return tensors
    cache = _State.caching_by_device_type.get(device_type(given[0].device), True)
    return tuple(t if t is None or not _castable(t) else _cast(t, dtype, cache) for t in tensors)


def float32(*tensors):
    """The inputs of a float32-listed op, 16-bit floats cast up to float32 inside a region."""
    if not _State.dtype_by_device_type:
        return tensors
    given = [t for t in tensors if t is not None]
    if not given or region_dtype(given[0].device) is None:
        return tensors
    return tuple(t.to(dtype=dtypes.float32) if t is not None and dtypes.is_half(t.dtype) else t for t in tensors)


def _castable(t) -> bool:
    return dtypes.is_floating(t.dtype) and t.dtype != dtypes.float64


def is_kept_cast(node) -> bool:
    """Is `node` the cast of a parameter that this region keeps (made once, shared by every later use in it)?"""
    return any(cast._ctx is node for _, cast in _State.cache.values())


def regions_now() -> tuple:
    """What the open autocast regions cast to now, per device type: what tg.utils.checkpoint records at the forward
    so that its recomputation, run inside a backward, casts alike."""
    return dict(_State.dtype_by_device_type), dict(_State.caching_by_device_type)


class regions_as:
    """Inside: the autocast regions `regions_now()` recorded, casting even within a backward, with a cache of
    parameter casts of their own; after: everything as it was."""

    def __init__(self, regions: tuple):
        self.regions = regions

    def __enter__(self):
        self.saved = (_State.dtype_by_device_type, _State.caching_by_device_type, _State.depth, _State.suspended,
                      _State.cache, _State.cast_in_region, _State.cast_in_last_region)
        dtypes_now, caching = self.regions
        _State.dtype_by_device_type, _State.caching_by_device_type = dict(dtypes_now), dict(caching)
        _State.depth, _State.suspended = 1, 0
        _State.cache, _State.cast_in_region, _State.cast_in_last_region = {}, {}, {}
        return self

    def __exit__(self, *exc):
        (_State.dtype_by_device_type, _State.caching_by_device_type, _State.depth, _State.suspended,
         _State.cache, _State.cast_in_region, _State.cast_in_last_region) = self.saved
        return False
