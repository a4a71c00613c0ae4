"""CuPy's compute-type switch for GEMMs (``cupy._core._routines_linalg``), remembered but without
effect: the stand-in multiplies with NumPy, so TF32's numerics are beyond it."""
import numpy as np

COMPUTE_TYPE_TBD, COMPUTE_TYPE_DEFAULT, COMPUTE_TYPE_PEDANTIC = 0, 1, 2
COMPUTE_TYPE_FP16, COMPUTE_TYPE_FP32, COMPUTE_TYPE_FP64, COMPUTE_TYPE_BF16, COMPUTE_TYPE_TF32 = 3, 4, 5, 6, 7
_compute_types = {}


def set_compute_type(dtype, compute_type):
    if compute_type not in range(8):
        raise ValueError(f"Unknown compute type: {compute_type}")
    _compute_types[np.dtype(dtype).char] = compute_type


def get_compute_type(dtype):
    return _compute_types.get(np.dtype(dtype).char, COMPUTE_TYPE_DEFAULT)
