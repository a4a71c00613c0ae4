from . import _routines_linalg  # noqa: F401
