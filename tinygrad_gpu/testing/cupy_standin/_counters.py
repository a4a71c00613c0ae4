"""What a run asked of the (pretend) GPU: the figures a real GPU would make expensive.

A host sync is any moment the CPU must wait for the GPU's results: reading a value
(``.item()``, ``float()``, ``int()``, ``bool()``), copying back (``.get()``, ``asnumpy``),
and the ops whose result size depends on the data (boolean masks, ``nonzero``).
``sites`` says where each sync came from (the first frame outside the stand-in), which is
how a test or the readiness benchmark points at the line to change. With ``track_sites`` on
(gpu_readiness.py turns it on; it costs the stand-in about a quarter of its time per op, so the test
suite leaves it off), ``launch_sites`` and ``allocation_sites`` say the same of every launch and
allocation, by the op that asked: the first
frame outside the stand-in and the kernels' plumbing (``kernels/``, ``device.py``), as
``file:line (function)``, so that a launch of our GELU kernel is counted at the fused op that
ran it, not at the launcher.
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
    launch_sites: collections.Counter = field(default_factory=collections.Counter)     # which op launched each kernel
    allocation_sites: collections.Counter = field(default_factory=collections.Counter)  # which op allocated each array
    allocated_dtypes: collections.Counter = field(default_factory=collections.Counter)  # allocations by dtype name
    # with track_sites: (site, FLOPs, bytes of the arrays it was given) of every launch, for a cost on paper
    launch_costs: list = field(default_factory=list)

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, collections.Counter() if f.type == "collections.Counter" else
                    [] if f.type == "list" else 0)

    def snapshot(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.type in ("int",)}

    track_sites = False          # a setting, not a count: reset() leaves it

    def allocated(self, dtype) -> None:
        self.allocations += 1
        self.allocated_dtypes[dtype.name] += 1
        if self.track_sites:
            self.allocation_sites[_op_site()] += 1

    def launched(self, ours: bool = False, flops: int = 0, nbytes: int = 0) -> None:
        self.launches += 1
        self.raw_launches += ours
        if self.track_sites:
            site = _op_site()
            self.launch_sites[site] += 1
            self.launch_costs.append((site, flops, nbytes))

    def sync(self, why: str) -> None:
        self.host_syncs += 1
        self.sites[f"{why} at {_caller()}"] += 1


_PLUMBING = (os.path.join("tinygrad_gpu", "kernels") + os.sep, os.path.join("tinygrad_gpu", "device.py"))
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))      # the folder that holds tinygrad_gpu/


def _op_site() -> str:
    """file:line (function) of the first frame outside the stand-in and the kernels' plumbing. Asked at every
    launch and allocation, so what it learns of each code object is kept (abspath asks the OS each time)."""
    frame = sys._getframe(2)
    while frame is not None and _code_place(frame.f_code)[0]:
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{_code_place(frame.f_code)[1]}:{frame.f_lineno} ({frame.f_code.co_name})"


_places = {}       # code object -> (inside the stand-in or the plumbing?, its file as shown)


def _code_place(code) -> tuple:
    place = _places.get(code)
    if place is None:
        path = os.path.abspath(code.co_filename)
        inside = os.path.dirname(path) == _HERE or any(p in path for p in _PLUMBING)
        place = _places[code] = (inside, os.path.relpath(path, _ROOT) if path.startswith(_ROOT + os.sep) else path)
    return place


def _caller() -> str:
    frame = sys._getframe(2)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _HERE:
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{os.path.relpath(frame.f_code.co_filename)}:{frame.f_lineno}"


counters = Counters()
