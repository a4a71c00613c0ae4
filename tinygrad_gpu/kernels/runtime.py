"""Where a fused op runs, and how a kernel is launched there.

* ``cuda``: the ``.cu`` file through ``cupy.RawModule``, compiled once per GPU and cached;
* ``emu``: the same file through the CPU emulator (``emulator.py``);
* ``cpu``: for float32 and float64 data, numba's compiled versions (``compiled_cpu.py``) when numba
  is installed, else NumPy's fast versions (``fast_cpu.py``), which compute what the references do;
  ``$TINYGRAD_GPU_CPU_KERNELS`` forces one, or the reference (``cpu_paths.py``); float16 and bfloat16
  data there takes the NumPy reference;
* on ``emu`` and ``cuda``, data of a dtype the kernel has no entry point for (float64, inputs of
  mixed dtypes, 16-bit data for a float32-only kernel): the NumPy reference next to the kernel,
  which is the definition of what it must compute.

The kernels of GELU, causal softmax, cross-entropy and layer norm have float16 and bfloat16 entry
points besides the float32 ones (``entry_point`` names them; ``use_kernel(..., half=True)``). 16-bit
data is computed in float32 everywhere, by the kernels and the references alike, and each output is
rounded once to its dtype (``working_dtype``). On ``cuda`` each kernel file is compiled into two
modules: the float32 kernels alone, which need no header, and, at the first 16-bit launch, the whole
file with ``-DTG_HALF_PRECISION=1``, which needs NVIDIA's cuda_fp16.h and cuda_bf16.h
(``half_precision.h`` says why they are kept apart).

Nothing here compiles or imports the emulator until a kernel is launched on ``emu``.

Launchers (one per kernel file) build the argument list once: arrays and NumPy scalars,
the same for CuPy and for the emulator.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np

from .. import device as devices
from .. import dtypes

KERNEL_DIR = Path(__file__).parent
CUDA_OPTIONS = ("--std=c++17",)
HALF_OPTION = "-DTG_HALF_PRECISION=1"     # compiles the 16-bit entry points (half_precision.h)


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
KERNEL_DTYPES = {dtypes.float32: "", dtypes.float16: "_f16", dtypes.bfloat16: "_bf16"}   # -> entry point suffix


def use_kernel(device: str, *arrays, half: bool = False) -> bool:
    """Do these inputs of one kernel call run the kernel? On emu and cuda, when its floating-point
    inputs share one dtype: float32, or also float16 and bfloat16 for a kernel with 16-bit entry
    points (`half`; entry_point names them). Anything else takes the NumPy reference (the launchers
    send the cpu to its own path before they ask: cpu_paths.py). The arrays given are the call's
    data; what a kernel reads in float32 whatever the data's dtype (a layer norm's saved mean and
    rstd, cross-entropy's lse and dlosses) is not given. Integer arrays (targets) and an optional
    input that is absent (None) do not count."""
    floating = {a.dtype for a in arrays if a is not None and dtypes.is_floating(a.dtype)}
    return device != "cpu" and len(floating) <= 1 and floating <= (set(KERNEL_DTYPES) if half else {dtypes.float32})


def entry_point(kernel: str, dtype) -> str:
    """The name of `kernel`'s entry point for data of `dtype`: gelu_forward, gelu_forward_f16, gelu_forward_bf16."""
    return kernel + KERNEL_DTYPES[np.dtype(dtype)]


def is_half_entry_point(kernel: str) -> bool:
    """Is `kernel` a float16 or bfloat16 entry point (one that needs the TG_HALF_PRECISION build)?"""
    return kernel.endswith(tuple(suffix for suffix in KERNEL_DTYPES.values() if suffix))


_cuda_modules, _cuda_functions = {}, {}


def _cuda_module(filename: str, device: str, half: bool):
    """The file built for `device`, without the 16-bit entry points or (`half`) with them. CuPy compiles
    a RawModule when its first function is looked up."""
    key = (filename, device, half)
    if key not in _cuda_modules:
        options = CUDA_OPTIONS + (HALF_OPTION,) if half else CUDA_OPTIONS
        with devices.use(device):
            _cuda_modules[key] = devices.cupy().RawModule(code=source(filename), options=options)
    return _cuda_modules[key]


class HalfHeadersMissing(RuntimeError):
    """NVRTC could not find NVIDIA's cuda_fp16.h or cuda_bf16.h, which the 16-bit kernels include."""


def _cuda_function(filename: str, kernel: str, device: str):
    """The kernel's function object, looked up once per (file, kernel, GPU): CuPy's get_function makes a
    new one, and asks the driver again, on every call."""
    key = (filename, kernel, device)
    if key not in _cuda_functions:
        half = is_half_entry_point(kernel)
        with devices.use(device):
            try:
                _cuda_functions[key] = _cuda_module(filename, device, half).get_function(kernel)
            except Exception as e:       # CuPy's CompileException, whose text is NVRTC's log
                if half and ("cuda_fp16.h" in str(e) or "cuda_bf16.h" in str(e)):
                    raise HalfHeadersMissing(
                        f"the float16/bfloat16 kernels of {filename} include NVIDIA's CUDA headers cuda_fp16.h and "
                        "cuda_bf16.h, and they were not found. Get them with `pip install nvidia-cuda-runtime-cu12` "
                        "(the CUDA 12 runtime's headers, where CuPy looks), or install a CUDA toolkit and set "
                        f"CUDA_PATH to it. (float32 kernels do not need them.) NVRTC said:\n{e}") from e
                raise
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
        raise ValueError(f"kernels run on 'emu' and 'cuda', not {device!r} (cpu runs cpu_paths.cpu_kernels())")


# ----------------------------------------------------------------------------- kept buffers
_kept = {}


def kept_per_device(make, device: str):
    """make(device), made once per device and kept: a kernel's workspace that every launch reuses (partial
    sums, a ticket counter), so that a training step does not allocate it again. A new array module (a
    test's stand-in) gets its own."""
    key = (make, device, id(devices.array_module(device)))
    if key not in _kept:
        _kept[key] = make(device)
    return _kept[key]


# ----------------------------------------------------------------------------- arrays made together
ALIGNMENT = 256          # bytes: each array made together starts where a new allocation would (CuPy's are 512)


def empty_together(xp, *layouts) -> list:
    """Uninitialised C-contiguous arrays of the (shape, dtype) `layouts`, views of one allocation: for a kernel's
    outputs that live and die together (a layer norm's output, which a product keeps, and the statistics its
    backward reads), one ask of the memory pool instead of one each; on a GPU each ask costs host time. Each
    starts a multiple of ALIGNMENT bytes into the allocation, as aligned as an array of its own would be for the
    kernels' loads."""
    starts, end = [], 0
    for shape, dtype in layouts:
        starts.append(end)
        end += -(-math.prod(shape) * np.dtype(dtype).itemsize // ALIGNMENT) * ALIGNMENT
    memory = xp.empty(end, np.uint8)
    return [memory[start:start + math.prod(shape) * np.dtype(dtype).itemsize].view(dtype).reshape(shape)
            for start, (shape, dtype) in zip(starts, layouts)]


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


def address(array) -> int:
    """Where an array's element 0 lies in memory (NumPy or CuPy): what a kernel's pointer to it is."""
    interface = array.__cuda_array_interface__ if hasattr(array, "__cuda_array_interface__") else \
        array.__array_interface__
    return interface["data"][0]


def contiguous(xp, array, dtype=None):
    """The array as a C-contiguous block of memory (the kernels index flat memory)."""
    return xp.ascontiguousarray(array, dtype=dtype)


# ----------------------------------------------------------------------------- dtypes
def working_dtype(dtype):
    """What a reference computes in: float16 and bfloat16 data in float32, as the kernels do (squares
    and sums of float16 values overflow at 65504, and bfloat16 keeps 8 significant bits of a sum);
    float32 and float64 as they are. (ml_dtypes teaches NumPy that bfloat16 with float32 is float32.)"""
    return np.promote_types(dtype, np.float32)
