"""``cupy.cuda`` on the stand-in: devices, the runtime's device count, and our kernels run by the emulator.

``RawModule(code=...)`` builds the .cu text for the CPU with the project's CUDA emulator
(``tinygrad_gpu/kernels/emulator.py``, the same build the ``emu`` device uses), and a
``RawKernel`` launch runs it on the arrays' NumPy data: the real kernel, not its reference.
With ``TINYGRAD_GPU_STANDIN_KERNELS=reference`` a launch runs the kernel's NumPy reference
instead (kernel_references.py), for runs too big for the emulator: the training tests' whole
runs and the readiness benchmark's GPU config.
"""
from __future__ import annotations

import os

import numpy as np

from . import _array
from ._array import Device  # noqa: F401  (cupy.cuda.Device)
from ._counters import counters


class runtime:
    @staticmethod
    def getDeviceCount() -> int:
        return _array._Devices.count

    @staticmethod
    def getDeviceProperties(device: int) -> dict:
        """The name, as bytes like CuPy's (no GPU has it, so nothing knows this one's peak FLOP/s), and a
        compute capability: 8.0 (an A100's, the first with bfloat16 tensor cores), or
        TINYGRAD_GPU_STANDIN_CAPABILITY (e.g. "7.0", a GPU whose 16-bit type is float16 alone)."""
        _array.Device(device)                   # an ordinal out of range is refused, as by CUDA
        major, minor = os.environ.get("TINYGRAD_GPU_STANDIN_CAPABILITY", "8.0").split(".")
        return {"name": b"CuPy stand-in (NumPy)", "major": int(major), "minor": int(minor)}



def _launch_bytes(name: str, args) -> int:
    """The bytes of a launch's arrays, including those a multi-tensor table (a struct argument) names."""
    from .kernel_references import table_bytes
    tables = sum(table_bytes(a, name) for a in args if isinstance(a, np.void))
    return _array.array_bytes([a for a in args if isinstance(a, np.ndarray)]) + tables


class RawKernel:
    def __init__(self, module: "RawModule", name: str):
        self.module, self.name = module, name

    def __call__(self, grid, block, args, *, shared_mem=0, stream=None):
        arrays = []
        for a in args:
            if isinstance(a, _array.ndarray):
                arrays.append(_array.unwrap(a))
            elif isinstance(a, np.ndarray):
                raise TypeError(f"{self.name}: a NumPy array cannot be a kernel argument; move it with cupy.asarray")
            elif isinstance(a, (int, float)) and not isinstance(a, (bool, np.generic)):    # np.float64 is a float
                raise TypeError(f"{self.name}: pass Python numbers as NumPy scalars (np.int32, np.float32) so "
                                "the kernel gets the C type it declares")
            else:
                arrays.append(a)
        if counters.track_sites:           # what the launch costs a GPU, for gpu_readiness.py's table
            from .kernel_references import launch_flops
            counters.launched(ours=True, flops=launch_flops(self.name, arrays), nbytes=_launch_bytes(self.name, arrays))
        else:
            counters.launched(ours=True)
        if os.environ.get("TINYGRAD_GPU_STANDIN_KERNELS", "emulate") == "reference":
            from . import kernel_references              # fast, for big runs: kernel_references.py says why
            self.module._built().check(self.name, grid, block, arrays, shared_mem)     # the launch a GPU takes
            kernel_references.launch(self.name, grid, block, arrays)
        else:
            self.module._built().launch(self.name, tuple(grid), tuple(block), tuple(arrays), shared_mem)


class RawModule:
    def __init__(self, code=None, path=None, options=(), backend="nvrtc", name_expressions=None, **kwargs):
        if code is None:
            raise NotImplementedError("the stand-in builds RawModule from code= only")
        self.code, self.options, self._module = code, tuple(options), None

    def _built(self):
        if self._module is None:
            from ...kernels import emulator
            self._module = emulator.compile_source(self.code, "<standin RawModule>")
        return self._module

    def get_function(self, name: str) -> RawKernel:
        counters.function_lookups += 1
        return RawKernel(self, name)

