"""CuPy's names, as listed in cupy_api.json (written by make_api_list.py from the installed cupy)."""
import json
from pathlib import Path

_API = json.loads(Path(__file__).with_name("cupy_api.json").read_text())

VERSION = _API["cupy_version"]
MODULE = frozenset(_API["module"])
LINALG = frozenset(_API["linalg"])
NDARRAY = frozenset(_API["ndarray"])
RANDOM = frozenset(_API["random"])
GENERATOR = frozenset(_API["generator"])
UFUNC_METHODS = frozenset(_API["ufunc_methods"])
UFUNC_TYPES = _API["ufunc_types"]
SPECIAL_UFUNC_TYPES = _API["cupyx_scipy_special_ufunc_types"]

# Functions and methods that may return a view of their input: no kernel runs unless they copy.
VIEWS = frozenset({"reshape", "ravel", "transpose", "swapaxes", "moveaxis", "squeeze", "expand_dims",
                   "broadcast_to", "broadcast_arrays", "atleast_1d", "atleast_2d", "atleast_3d", "asarray",
                   "ascontiguousarray", "split", "array_split", "view", "diagonal", "real", "imag",
                   "flip", "fliplr", "flipud", "rollaxis", "asanyarray"})
# Functions that allocate without running a kernel.
UNINITIALISED = frozenset({"empty", "empty_like"})
