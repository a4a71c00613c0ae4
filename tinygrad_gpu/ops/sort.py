"""Sorting: sort, argsort and topk (msort is sort along dim 0).

Each op finds the order as int64 indices first (no gradient), then reads the values there with
`gather`, whose backward adds each gradient back to the position its value came from. cummax and
cummin (scan.py) pick their values the same way.

Order among equal values: this sort is always stable, whatever `stable` says (with stable=False
PyTorch promises no order, so the stable one is a right answer there too). Equal values keep their
original order, ascending and descending alike, as PyTorch's stable sort does. topk takes the start
of the same order: among equal values the smaller index comes first, for largest=True and
largest=False. NaN counts as larger than every number, as in PyTorch: last when ascending, first when
descending.
"""
from __future__ import annotations

import math

import numpy as np

from .. import device as devices
from .. import dtypes
from ..tensor import Tensor
from . import movement
from .gather import Gather
from .reduce import ValuesIndices, along_one_dim


# ----------------------------------------------------------------------------- sort
def _stable_order(xp, data, dim: int, descending: bool):
    """The indices that sort `data` along `dim`, equal values in their original order.

    kind="stable" on both array modules: NumPy's default ("quicksort", an introsort) is not stable;
    CuPy's argsort is always stable (its documentation: kind=None means "stable", and it accepts no
    other kind), so the same call is right on NumPy and on CuPy.
    Neither sorts in descending order, and reversing an ascending stable order would put equal
    values last-first. So: sort the reversed row ascending (equal values come out last-first in
    terms of the original positions), reverse that order (now first-first, values descending), and
    turn positions in the reversed row back into original positions (p -> n - 1 - p).
    """
    if not descending:
        return xp.argsort(data, axis=dim, kind="stable")
    order_of_reversed = xp.argsort(xp.flip(data, axis=dim), axis=dim, kind="stable")
    return (data.shape[dim] - 1) - xp.flip(order_of_reversed, axis=dim)


def _sorted_indices(x: Tensor, d: int, descending: bool) -> Tensor:
    xp = devices.array_module(x.device)
    with devices.use(x.device):
        order = _stable_order(xp, x.data, d, descending).astype(np.int64, copy=False)
    return Tensor._wrap(order, x.device)


def sort(x: Tensor, dim=-1, descending=False, stable=False):
    """(values, indices) sorted along `dim`; the gradient goes back to where each value came from."""
    def run(x, d):
        indices = _sorted_indices(x, d, descending)
        return ValuesIndices(Gather.apply(x, indices, dim=d), indices)
    return along_one_dim("sort", x, dim, run)


def argsort(x: Tensor, dim=-1, descending=False, stable=False) -> Tensor:
    """The int64 indices that sort `x` along `dim` (no gradient)."""
    return along_one_dim("argsort", x, dim, lambda x, d: _sorted_indices(x, d, descending))


def topk(x: Tensor, k, dim=-1, largest=True, sorted=True):
    """(values, indices) of the k largest (or smallest) along `dim`, best first. They come sorted
    even with sorted=False (where PyTorch promises no order)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"topk: k must be an int, got {k!r}")
    if x.dtype == bool:
        raise RuntimeError("topk: does not support bool tensors (as in PyTorch); convert first, e.g. x.long()")
    if x.ndim == 0:                     # PyTorch: k 0 or 1 of a 0-d tensor gives the element itself
        movement.normalize_dim("topk", dim, 1)
        if k not in (0, 1):
            raise RuntimeError(f"topk: k={k} is out of range for a 0-d tensor; k must be 0 or 1")
        return ValuesIndices(x.clone(), Tensor._wrap(devices.array_module(x.device).zeros((), np.int64), x.device))

    def run(x, d):
        if not 0 <= k <= x.shape[d]:
            raise RuntimeError(f"topk: k={k} is out of range for dim {dim} of size {x.shape[d]}; "
                               f"k must lie between 0 and {x.shape[d]}")
        indices = _sorted_indices(x, d, largest)[(slice(None),) * d + (slice(0, k),)]
        return ValuesIndices(Gather.apply(x, indices, dim=d), indices)
    return along_one_dim("topk", x, dim, run)


# ----------------------------------------------------------------------------- no gradient
def unique(x: Tensor, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct values of x, ascending (also with sorted=False, where PyTorch promises no order); with
    return_inverse, where each element of x is among them (x's shape); with return_counts, how often each
    occurs."""
    if dim is not None:
        raise NotImplementedError("unique(dim=...): only the distinct elements of the whole tensor are built; "
                                  "leave dim=None")
    xp = devices.array_module(x.device)
    with devices.use(x.device):
        # equal_nan=False: each nan is a value of its own, as in PyTorch (NumPy and CuPy would keep one)
        values, inverse, counts = xp.unique(x.data.reshape(-1), return_inverse=True, return_counts=True,
                                            equal_nan=False)
        parts = [Tensor._wrap(values, x.device)]
        if return_inverse:
            parts.append(Tensor._wrap(inverse.astype(np.int64).reshape(x.shape), x.device))
        if return_counts:
            parts.append(Tensor._wrap(counts.astype(np.int64), x.device))
    return parts[0] if len(parts) == 1 else tuple(parts)


def searchsorted(sorted_sequence: Tensor, values, *, right=False, side=None, out_int32=False) -> Tensor:
    """Where each value would go into the sorted last dim of sorted_sequence to keep it sorted: before equal
    elements, or after them with right=True (side="right").

    A binary search per value, all values in step: each round halves every value's range [lo, hi) by
    looking at the element in its middle. The test is PyTorch's, written as a negation (go right unless the
    middle element is > the value, >= for the left side), so that a nan, false in every comparison, steers
    the search as it steers PyTorch's: a nan value ends at the far right, a nan element sends values past it."""
    right = right or side == "right"
    values = sorted_sequence._as_tensor(values)
    if sorted_sequence.ndim > 1 and sorted_sequence.shape[:-1] != values.shape[:-1]:
        raise RuntimeError(f"searchsorted(): the leading dims of the boundaries {sorted_sequence.shape} and of the "
                           f"values {values.shape} must match (or the boundaries be 1-D)")
    dtype = dtypes.promote(sorted_sequence.dtype, sorted_sequence.ndim, values.dtype, values.ndim)
    xp = devices.array_module(values.device)
    with devices.use(values.device):
        n = sorted_sequence.shape[-1] if sorted_sequence.ndim else 1
        searches = math.prod(sorted_sequence.shape[:-1])          # rows of boundaries (1: one row for all values)
        rows = sorted_sequence.data.astype(dtype, copy=False).reshape(searches, n)
        wanted = values.data.astype(dtype, copy=False).reshape(searches, values.numel() // max(searches, 1))
        lo = xp.zeros(wanted.shape, dtypes.int64)
        hi = xp.full(wanted.shape, n, dtypes.int64)
        for _ in range(n.bit_length()):                   # a range of n shrinks to nothing in that many halvings
            searching = lo < hi
            mid = (lo + hi) // 2
            middle = xp.take_along_axis(rows, xp.minimum(mid, n - 1), axis=-1)
            go_right = ~(middle > wanted) if right else ~(middle >= wanted)
            lo = xp.where(searching & go_right, mid + 1, lo)
            hi = xp.where(searching & ~go_right, mid, hi)
        positions = lo.reshape(values.shape).astype(dtypes.int32 if out_int32 else dtypes.int64)
    return Tensor._wrap(positions, values.device)
