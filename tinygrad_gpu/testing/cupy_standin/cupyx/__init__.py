"""``cupyx`` on the stand-in: ``scipy.special`` ufuncs (with CuPy's loops) and ``scatter_add``."""
import numpy as np

from .._array import compute
from . import scipy  # noqa: F401  (cupyx.scipy.special, as the real package offers it)


def scatter_add(a, slices, value):
    compute(np.add.at, a, slices, value)


def errstate(**kwargs):
    return np.errstate(**kwargs)
