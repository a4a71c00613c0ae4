"""``cupyx`` on the stand-in: ``scipy.special``, whose ufuncs keep CuPy's loops."""
from . import scipy  # noqa: F401
