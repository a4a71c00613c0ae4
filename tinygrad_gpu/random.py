"""Random numbers: one generator per device, all reseeded by ``tg.manual_seed``.

NumPy's PCG64 generator serves ``cpu`` and ``emu``; each GPU has a CuPy generator, so random
tensors are made where they are used.  The same seed gives the same numbers on the same
device; ``cpu`` and ``cuda`` draw different streams.
"""
from __future__ import annotations

import numpy as np

from . import device as devices

_seed = int(np.random.SeedSequence().entropy % (2**63))
_generators = {}


def manual_seed(seed: int) -> None:
    """Make every later random op reproducible."""
    global _seed
    _seed = int(seed)
    _generators.clear()


def initial_seed() -> int:
    return _seed


def generator(device: str):
    """The generator that draws random numbers for `device` (created on first use)."""
    key = "cpu" if not devices.is_cuda(device) else device
    if key not in _generators:
        if devices.is_cuda(device):
            import cupy
            with devices.use(device):
                _generators[key] = cupy.random.default_rng(_seed)
        else:
            _generators[key] = np.random.default_rng(_seed)
    return _generators[key]


def get_rng_state() -> dict:
    """The CPU generator's state, a plain dict that can be stored in checkpoint metadata."""
    return generator("cpu").bit_generator.state


def set_rng_state(state: dict) -> None:
    generator("cpu").bit_generator.state = state
