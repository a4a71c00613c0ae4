"""Which array library backs a tensor, and how arrays move between devices.

Three devices exist:

* ``cpu``  -- NumPy arrays; fused ops run their NumPy reference functions.
* ``cuda`` / ``cuda:N`` -- CuPy arrays on NVIDIA GPU number N.
* ``emu``  -- NumPy arrays; fused ops run our CUDA kernels through the CPU emulator
  (tinygrad_gpu/kernels); every other op computes exactly as on ``cpu``.

The default is ``cuda`` when CuPy imports *and* sees a GPU, otherwise ``cpu``; the
environment variable ``TINYGRAD_GPU_DEVICE`` overrides it.  For tests and benchmarks,
``TINYGRAD_GPU_CUPY=standin`` puts a strict stand-in for CuPy behind ``cuda`` on a machine
without a GPU (``tinygrad_gpu/testing/cupy_standin``).  Importing this module never
fails and never prints: a machine with CuPy installed but no driver simply has no
``cuda`` device, and asking for one there raises a clear error.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import sys

import numpy as np

STANDIN = "tinygrad_gpu.testing.cupy_standin"       # TINYGRAD_GPU_CUPY=standin: for tests and benchmarks
ON_CUDA_FOUND = []      # called once CuPy is found usable (backends.py sets CuPy's switches there)
_cupy = None            # the cupy module once imported successfully
_cuda_checked = False   # have we tried?
_cuda_problem = ""      # why cuda is unavailable, for error messages


def _probe_cuda() -> None:
    """Import CuPy and count GPUs once; remember why it failed if it did."""
    global _cupy, _cuda_checked, _cuda_problem
    if _cuda_checked:
        return
    _cuda_checked = True
    try:
        # The stand-in is loaded by name, as cupy is: it sits above the library (it runs our kernels
        # through the emulator) and is no part of it.
        name = STANDIN if os.environ.get("TINYGRAD_GPU_CUPY", "").lower() == "standin" else "cupy"
        cupy = importlib.import_module(name)
    except Exception as e:  # not installed, or a broken install: both mean "no cuda"
        _cuda_problem = f"CuPy is not importable ({type(e).__name__}: {e}); install tinygrad_gpu[gpu]"
        return
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CuPy present but no driver / no GPU
        _cuda_problem = f"CuPy is installed but found no usable GPU ({type(e).__name__}: {e})"
        return
    if count == 0:
        _cuda_problem = "CuPy is installed but reports 0 GPUs"
        return
    _cupy = cupy
    for hook in ON_CUDA_FOUND:       # backends.py: float32 products as tg.backends.cuda.matmul.allow_tf32 says
        hook()


def cuda_available() -> bool:
    """True when CuPy imports and sees at least one GPU."""
    _probe_cuda()
    return _cupy is not None


def cuda_problem() -> str:
    """Why there is no cuda device here ("" when there is one)."""
    _probe_cuda()
    return _cuda_problem


def cupy():
    """The cupy module behind ``cuda`` (the real one, or the stand-in); None without cuda."""
    return _cupy if cuda_available() else None


def cupyx():
    """cupyx, from the same place as cupy."""
    return importlib.import_module(STANDIN + ".cupyx" if _cupy.__name__ == STANDIN else "cupyx")


def cuda_device_count() -> int:
    return _cupy.cuda.runtime.getDeviceCount() if cuda_available() else 0


def canonical(device) -> str:
    """Normalise a device name: 'cpu', 'emu', 'cuda' -> 'cuda:0', 'cuda:1'. Checks that it exists."""
    if device is None:
        return default_device()
    name = str(device).strip().lower()
    if name in ("cpu", "emu"):
        return name
    if name == "cuda" or name.startswith("cuda:"):
        index_text = name[5:] or "0"
        if not index_text.isdigit():
            raise ValueError(f"unknown device {device!r}: expected 'cpu', 'emu', 'cuda' or 'cuda:N'")
        if not cuda_available():
            raise RuntimeError(f"device {device!r} requested but CUDA is unavailable: {_cuda_problem}. "
                               "Use device='cpu' (or 'emu' to run the CUDA kernels on the CPU).")
        index = int(index_text)
        if index >= cuda_device_count():
            raise RuntimeError(f"device {device!r} requested but only {cuda_device_count()} GPU(s) are visible")
        return f"cuda:{index}"
    raise ValueError(f"unknown device {device!r}: expected 'cpu', 'emu', 'cuda' or 'cuda:N'")


_default = None


def default_device() -> str:
    """'cuda:0' when a GPU is usable, else 'cpu'; TINYGRAD_GPU_DEVICE overrides."""
    global _default
    if _default is None:
        chosen = os.environ.get("TINYGRAD_GPU_DEVICE")
        _default = canonical(chosen) if chosen else ("cuda:0" if cuda_available() else "cpu")
    return _default


def set_default_device(device) -> None:
    global _default
    _default = canonical(device)


def is_cuda(device: str) -> bool:
    return device.startswith("cuda")


def array_module(device: str):
    """numpy for 'cpu' and 'emu', cupy for 'cuda:N'."""
    return _cupy if is_cuda(device) else np


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NOTHING = _Nothing()


def use(device: str):
    """Context manager that makes `device` current, so CuPy allocates on the right GPU (and runs there:
    CuPy refuses, or reaches across by peer access, an array that lives on another GPU)."""
    return _cupy.cuda.Device(int(device[5:] or 0)) if is_cuda(device) else _NOTHING


def move(array, device: str):
    """Copy `array` onto `device` (no copy when it already lives there)."""
    if is_cuda(device):
        with use(device):
            return _cupy.asarray(array)
    if _cupy is not None and isinstance(array, _cupy.ndarray):
        return array.get()
    return np.asarray(array)


def _keep_freed_memory_in_the_process() -> None:
    """Stop glibc from handing large freed blocks back to the operating system.

    By default glibc serves each allocation above a threshold (128 KiB and up) with a fresh
    mmap and unmaps it on free, so every large NumPy temporary of every op is new memory
    whose pages fault in on first touch. On a small CPU training step that was about a
    fifth of the time. With no mmap and a high trim threshold, freed blocks stay in the heap
    and the next op reuses them. The cost: the process keeps its peak memory until exit.
    Set TINYGRAD_GPU_MALLOC_TUNING=0 to leave glibc's defaults alone.
    """
    if os.environ.get("TINYGRAD_GPU_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4          # mallopt parameter numbers from glibc's malloc.h
        libc.mallopt(M_MMAP_MAX, 0)
        libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    except (OSError, AttributeError):                  # not glibc (musl, say): nothing to tune
        pass


_keep_freed_memory_in_the_process()
