"""Are all indices in range? index_check.cu, its NumPy reference, its launcher.

``index_check(ids, high, ignore, found, device)`` sets the 0-d uint32 array `found` to 1 on the device
when some id is outside 0 .. high - 1 and is not `ignore` (None: nothing is ignored); otherwise it
leaves `found` as it was. ids: int64 or int32, any shape. deferred_checks.check_range is its caller.
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from . import runtime

FILE = "index_check.cu"
ENTRY_POINTS = {np.dtype(np.int64): "index_check", np.dtype(np.int32): "index_check_i32"}


def reference_index_check(ids, high: int, ignore, found) -> None:
    """index_check.cu's flag, as its composition computes it: found = 1 if any id is bad, else unchanged."""
    bad = (ids < 0) | (ids >= high)
    if ignore is not None:
        bad &= ids != ignore
    if bad.any():
        found[...] = 1


def kernel_takes(device: str, ids) -> bool:
    """Does the kernel check these ids? On cuda and emu, for int64 and int32 ids."""
    return device != "cpu" and ids.dtype in ENTRY_POINTS


def index_check(ids, high: int, ignore, found, device: str) -> None:
    if found.dtype != np.uint32 or found.shape != ():
        raise ValueError(f"index_check: found must be a 0-d uint32 array, got {found.dtype} {found.shape}")
    if not kernel_takes(device, ids):
        reference_index_check(ids, high, ignore, found)
        return
    ids = runtime.contiguous(devices.array_module(device), ids)
    if ids.size:
        runtime.launch(device, FILE, ENTRY_POINTS[ids.dtype], (runtime.grid_stride_grid(ids.size),), (256,),
                       [ids, np.int64(ids.size), np.int64(high), np.int64(0 if ignore is None else ignore),
                        np.int32(ignore is not None), found])
