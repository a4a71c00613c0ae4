"""``cupy.random`` on the stand-in: only the generator methods CuPy has (no ``permutation`` on a
Generator, no ``normal``), drawing with NumPy on the current pretend device."""
from __future__ import annotations

import numpy as np

from . import _api
from ._array import compute


class Generator:
    def __init__(self, numpy_generator: np.random.Generator):
        self._numpy = numpy_generator

    def __getattr__(self, name):
        if name.startswith("_") or name not in _api.GENERATOR:
            raise AttributeError(f"'cupy.random._generator_api.Generator' object has no attribute {name!r}")
        method = getattr(self._numpy, name)
        return lambda *args, **kwargs: compute(method, *args, **kwargs)


def default_rng(seed=None) -> Generator:
    return Generator(np.random.default_rng(seed))


def __getattr__(name):
    if name not in _api.RANDOM:
        raise AttributeError(f"module 'cupy.random' has no attribute {name!r}")
    raise NotImplementedError(f"cupy.random.{name} exists in CuPy but not in the stand-in; add it there if needed")
