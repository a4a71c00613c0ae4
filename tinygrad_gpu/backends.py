"""``tg.backends.cuda.matmul.allow_tf32``: PyTorch's switch, and its default (False).

TF32 is a tensor-core format for float32 products on Ampere GPUs and later: the inputs keep
float32's range but only 10 bits of mantissa (float16's), and the sums stay float32. A
matmul runs several times faster and agrees with float32 to about 1e-3 relative. CuPy decides
the compute type of its float32 products (cuBLAS GEMMs) with
``cupy._core._routines_linalg.set_compute_type(numpy.float32, ...)``; this switch sets it, and
sets it again whenever CuPy is first used, so the environment variable ``CUPY_TF32`` does not
turn it on behind PyTorch's default. Nothing here touches a ``cpu`` or ``emu`` tensor.
"""
from __future__ import annotations

import numpy as np

from . import device as devices


class _Matmul:
    def __init__(self):
        self._allow_tf32 = False

    @property
    def allow_tf32(self) -> bool:
        """May float32 matrix products on a GPU use TF32 tensor cores? (default False, as PyTorch)"""
        return self._allow_tf32

    @allow_tf32.setter
    def allow_tf32(self, allow: bool) -> None:
        self._allow_tf32 = bool(allow)
        apply_to_cupy()


class _Cuda:
    def __init__(self):
        self.matmul = _Matmul()


class _Backends:
    def __init__(self):
        self.cuda = _Cuda()


backends = _Backends()


def apply_to_cupy() -> None:
    """Tell CuPy the compute type of float32 products (where CuPy has a GPU; asking looks for one)."""
    cupy = devices.cupy()
    if cupy is None:
        return
    linalg = cupy._core._routines_linalg
    kind = linalg.COMPUTE_TYPE_TF32 if backends.cuda.matmul.allow_tf32 else linalg.COMPUTE_TYPE_DEFAULT
    linalg.set_compute_type(np.float32, kind)


devices.ON_CUDA_FOUND.append(apply_to_cupy)
