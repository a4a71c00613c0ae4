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


def expect_none(device: str, bad, error_type, message: str) -> None:
    """On GPU `device`: raise error_type(message) at the next read from it if any element of the
    boolean array `bad` is True."""
    key = (device, error_type, message)
    found = bad.any()
    _pending[key] = found if key not in _pending else _pending[key] | found


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
