"""Checks of values that live on a GPU, made without making the host wait for them.

On ``cpu`` and ``emu`` a bad index raises at once: its values are on the host already. On
``cuda`` reading them would stop the host until the GPU has caught up (a sync), in every
step. So there the comparison runs on the GPU, and its one-element answer waits here, OR-ed
with the answers of the same check since. The host reads them all together the next time it
reads anything from that GPU anyway (``Tensor.item()``, ``.numpy()``, ``.tolist()``,
``float()``; a training loop does so at each log line) and raises then. Results computed in
between are not to be trusted; the ops involved stay inside their arrays (CuPy's indexing
wraps around, our kernels skip what is out of range), so nothing worse than wrong numbers
happens on the GPU. PyTorch's CUDA ops behave the same way with device-side asserts.
"""
from __future__ import annotations

import numpy as np

from . import device as devices

_pending = {}      # (device, error type, message) -> a 0-d bool array on that device


def check(device: str, bad, error_type, message: str, first_bad=None) -> None:
    """Raise error_type(message) if any element of the boolean array `bad` is True: on cpu and emu at
    once, on a GPU at the next read from it (expect_none), so that the host does not wait for it here.
    On the host the values are at hand: first_bad(), where given, says the message naming the first bad one
    (called only there, and only when one is bad)."""
    if devices.is_cuda(device):
        expect_none(device, bad, error_type, message)
    elif bad.any():
        raise error_type(message if first_bad is None else first_bad())


def check_range(device: str, ids, high: int, error_type, message: str, ignore=None, first_bad=None) -> None:
    """check() of `(ids < 0) | (ids >= high)`, ids equal to `ignore` excepted: raise error_type(message)
    if an id is out of range. On a GPU one kernel (kernels/index_check.cu) raises a flag that waits
    here, instead of the five launches and four arrays of the comparison, the any() and the OR.
    first_bad(bad) names the first bad id on the host (given the mask, only when one is bad)."""
    if devices.is_cuda(device):
        from .kernels import index_check
        if index_check.kernel_takes(device, ids):
            key = (device, error_type, message)
            if key not in _pending:
                _pending[key] = devices.array_module(device).zeros((), np.uint32)   # until the next read
            elif _pending[key].dtype != np.uint32:      # found so far by check() (ids the kernel does not take): kept
                _pending[key] = _pending[key].astype(np.uint32)
            index_check.index_check(ids, high, ignore, _pending[key], device)
            return
    bad = (ids < 0) | (ids >= high)
    if ignore is not None:
        bad &= ids != ignore
    check(device, bad, error_type, message, first_bad=None if first_bad is None else lambda: first_bad(bad))


def expect_none(device: str, bad, error_type, message: str) -> None:
    """On GPU `device`: raise error_type(message) at the next read from it if any element of the
    boolean array `bad` is True."""
    key = (device, error_type, message)
    found = bad.any()
    _pending[key] = found if key not in _pending else (_pending[key] | found).astype(bool)


def raise_pending() -> None:
    """Read every waiting check (one transfer per GPU) and raise the first that found something."""
    if not _pending:
        return
    waiting = dict(_pending)
    _pending.clear()
    found = {}
    for device in {key[0] for key in waiting}:
        keys = [key for key in waiting if key[0] == device]
        with devices.use(device):
            flags = devices.array_module(device).stack([waiting[key] for key in keys])
            found.update(zip(keys, devices.move(flags, "cpu")))
    for (device, error_type, message), hit in found.items():
        if hit:
            raise error_type(f"{message} (found on {device} when its values were next read; what was "
                             "computed after it is not to be trusted)")
