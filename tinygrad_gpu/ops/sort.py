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

import numpy as np

from .. import device as devices
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
