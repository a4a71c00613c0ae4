"""What a run asked of the (pretend) GPU: the figures a real GPU would make expensive.

A host sync is any moment the CPU must wait for the GPU's results: reading a value
(``.item()``, ``float()``, ``int()``, ``bool()``), copying back (``.get()``, ``asnumpy``),
and the ops whose result size depends on the data (boolean masks, ``nonzero``).
``sites`` says where each sync came from (the first frame outside the stand-in), which is
how a test or the readiness benchmark points at the line to change.
"""
from __future__ import annotations

import collections
import os
import sys
from dataclasses import dataclass, field, fields

_HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Counters:
    host_syncs: int = 0
    bytes_to_device: int = 0
    bytes_to_host: int = 0
    launches: int = 0            # every op that runs a kernel on a GPU: CuPy's own and ours
    raw_launches: int = 0        # of those, our .cu kernels (RawKernel calls)
    allocations: int = 0         # new device arrays (views are not allocations)
    function_lookups: int = 0    # RawModule.get_function calls (each a driver call on a GPU)
    sites: collections.Counter = field(default_factory=collections.Counter)            # where each sync came from
    allocated_dtypes: collections.Counter = field(default_factory=collections.Counter)  # allocations by dtype name

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, collections.Counter() if f.type == "collections.Counter" else 0)

    def snapshot(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.type != "collections.Counter"}

    def allocated(self, dtype) -> None:
        self.allocations += 1
        self.allocated_dtypes[dtype.name] += 1

    def sync(self, why: str) -> None:
        self.host_syncs += 1
        self.sites[f"{why} at {_caller()}"] += 1


def _caller() -> str:
    frame = sys._getframe(2)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _HERE:
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{os.path.relpath(frame.f_code.co_filename)}:{frame.f_lineno}"


counters = Counters()
