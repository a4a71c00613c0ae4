"""Where a fused op runs, and how a kernel is launched there.

* ``cuda``: the ``.cu`` file through ``cupy.RawModule``, compiled once per GPU and cached;
* ``emu``: the same file through the CPU emulator (``emulator.py``);
* ``cpu``: the fast CPU versions (``fast_cpu.py``), which compute what the references do;
* any other dtype than float32 on ``emu`` and ``cuda`` (the kernels are written for float32):
  the NumPy reference next to the kernel, which is the definition of what it must compute.

Nothing here compiles or imports the emulator until a kernel is launched on ``emu``.

Launchers (one per kernel file) build the argument list once: arrays and NumPy scalars,
the same for CuPy and for the emulator.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from .. import device as devices

KERNEL_DIR = Path(__file__).parent
CUDA_OPTIONS = ("--std=c++17",)


# ----------------------------------------------------------------------------- the switch
class _Switch:
    enabled = os.environ.get("TINYGRAD_GPU_FUSED", "1").lower() not in ("0", "false", "no", "off")


def fused_enabled() -> bool:
    """Do nn.functional's hot ops use the fused kernels (True unless TINYGRAD_GPU_FUSED=0)?"""
    return _Switch.enabled


class fused:
    """``with kernels.fused(False):`` computes nn.functional's ops as plain compositions of Tensor ops."""

    def __init__(self, enabled: bool):
        self.enabled, self.previous = bool(enabled), []

    def __enter__(self):
        self.previous.append(_Switch.enabled)
        _Switch.enabled = self.enabled
        return self

    def __exit__(self, *exc):
        _Switch.enabled = self.previous.pop()
        return False


# ----------------------------------------------------------------------------- sources
_LOCAL_INCLUDE = re.compile(r'^[ \t]*#include[ \t]+"([\w.]+)"[ \t]*$', re.M)


def source(filename: str) -> str:
    """The text of kernels/`filename` with our own headers pasted in.

    Pasting (with #line directives, so errors still name the right file and line) keeps
    each compiled unit self-contained: CuPy's and the emulator's caches are keyed by this
    text, so editing a header recompiles every kernel that uses it.
    """
    path = KERNEL_DIR / filename
    text = path.read_text()

    def paste(match):
        header = KERNEL_DIR / match.group(1)
        line = text.count("\n", 0, match.start()) + 2
        return f'#line 1 "{header}"\n{header.read_text()}\n#line {line} "{path}"'
    return _LOCAL_INCLUDE.sub(paste, text)


def kernel_files() -> list:
    return sorted(p.name for p in KERNEL_DIR.glob("*.cu"))


# ----------------------------------------------------------------------------- dispatch
def use_kernel(device: str, *arrays) -> bool:
    """Kernels run on emu and cuda for float32 data; everything else takes the NumPy reference (the
    launchers send the cpu to fast_cpu.py before they ask). An optional input that is absent (None)
    does not count."""
    return device != "cpu" and all(a.dtype == np.float32 for a in arrays if a is not None and a.dtype.kind == "f")


_cuda_modules, _cuda_functions = {}, {}


def _cuda_module(filename: str, device: str):
    key = (filename, device)
    if key not in _cuda_modules:
        with devices.use(device):
            _cuda_modules[key] = devices.cupy().RawModule(code=source(filename), options=CUDA_OPTIONS)
    return _cuda_modules[key]


def _cuda_function(filename: str, kernel: str, device: str):
    """The kernel's function object, looked up once per (file, kernel, GPU): CuPy's get_function makes a
    new one, and asks the driver again, on every call."""
    key = (filename, kernel, device)
    if key not in _cuda_functions:
        with devices.use(device):
            _cuda_functions[key] = _cuda_module(filename, device).get_function(kernel)
    return _cuda_functions[key]


_emu_modules = {}


def emu_module(filename: str):
    """kernels/`filename` built for the emulator: once per process (and on disk across processes)."""
    if filename not in _emu_modules:
        from . import emulator       # only now: the emu device is the emulator's only user
        _emu_modules[filename] = emulator.compile_source(source(filename), str(KERNEL_DIR / filename))
    return _emu_modules[filename]


def launch(device: str, filename: str, kernel: str, grid, block, args, shared_mem: int = 0) -> None:
    """Run `kernel` from kernels/`filename` on `device` ('emu' or 'cuda:N')."""
    if devices.is_cuda(device):
        with devices.use(device):
            _cuda_function(filename, kernel, device)(tuple(grid), tuple(block), tuple(args), shared_mem=shared_mem)
    elif device == "emu":
        emu_module(filename).launch(kernel, grid, block, args, shared_mem)
    else:
        raise ValueError(f"kernels run on 'emu' and 'cuda', not {device!r} (cpu runs fast_cpu.py)")


# ----------------------------------------------------------------------------- shapes
def row_block(n: int) -> int:
    """Threads for a block that owns one row of n values: about 4 values per thread, whole warps, <= 1024."""
    threads = -(-n // 4)                              # ceil(n / 4)
    return min(1024, max(32, -(-threads // 32) * 32))


def grid_stride_grid(n: int, block: int = 256, max_blocks: int = 4096) -> int:
    """Blocks for a grid-stride loop over n elements: enough to fill a GPU, no more than needed."""
    return max(1, min(max_blocks, -(-n // block)))


def array_module_of(array):
    """numpy or cupy, whichever `array` belongs to (the references run on both)."""
    return devices.array_module("cuda") if hasattr(array, "__cuda_array_interface__") else np


def contiguous(xp, array, dtype=None):
    """The array as a C-contiguous block of memory (the kernels index flat memory)."""
    return xp.ascontiguousarray(array, dtype=dtype)


# ----------------------------------------------------------------------------- dtypes
def working_dtype(dtype):
    """What a reference computes in: float16 data in float32, as the kernels accumulate (squares
    and sums of half-precision values overflow at 65504); float32 and float64 as they are."""
    return np.promote_types(dtype, np.float32)
