"""Which of its three paths the cpu device runs for a fused op, and the switch that forces one.

* "compiled": ``compiled_cpu.py``, each kernel's loop compiled by numba and shared out over the
  cores (the default when numba is installed);
* "numpy": ``fast_cpu.py``, the references' numbers computed by NumPy in place and in chunks (the
  default without numba);
* "reference": each kernel file's ``reference_*`` formulas, the definition of correct, and the slowest.

``TINYGRAD_GPU_CPU_KERNELS=compiled|numpy|reference`` forces one. It is read at every launch, not at import,
so a program (or a test, with monkeypatch.setenv) may change it in os.environ as it runs; an op whose forward
and backward straddle a change takes, in each direction, the path then named. Both fast modules have the same
functions with the same contract, so a launcher asks ``cpu_kernels`` for the module and calls it; an op that
only the compiled path speeds up (cross-entropy) asks ``compiled_kernels``.
"""
from __future__ import annotations

import functools
import importlib.util
import os

from .. import dtypes

CPU_KERNELS = "TINYGRAD_GPU_CPU_KERNELS"      # compiled, numpy or reference: forces one of the cpu's paths
CPU_PATHS = ("compiled", "numpy", "reference")


@functools.lru_cache(maxsize=None)
def numba_installed() -> bool:
    """Does numba import? Found is not enough: a numba built for an older NumPy is found and then fails."""
    if importlib.util.find_spec("numba") is None:
        return False
    try:
        import numba  # noqa: F401
    except Exception:
        return False
    return True


def cpu_path() -> str:
    """What the cpu device runs for a fused op: $TINYGRAD_GPU_CPU_KERNELS when it is set, else "compiled"
    (compiled_cpu.py) when numba is installed, else "numpy" (fast_cpu.py). "reference" runs each kernel file's
    plain NumPy formulas, the definition of correct, and the slowest."""
    return _path_named(_variable(), numba_installed())


_ENCODED = os.environ.encodekey(CPU_KERNELS) if hasattr(os.environ, "encodekey") else None


def _variable() -> str:
    """os.environ.get(CPU_KERNELS, ""), read from the dict that os.environ keeps its entries in (CPython's
    os._Environ: `_data`, keys and values encoded; every change to os.environ goes through it). os.environ.get
    raises and catches a KeyError when the variable is unset, the usual case: 0.6 us against 0.03, and a training
    step asks some 90 times (1% of the CPU recipe's step). Where there is no such dict (os.environ replaced
    by a plain one, say), os.environ.get itself."""
    entries = getattr(os.environ, "_data", None)
    if _ENCODED is None or not isinstance(entries, dict):
        return os.environ.get(CPU_KERNELS, "")
    value = entries.get(_ENCODED)
    return "" if value is None else os.environ.decodevalue(value)


@functools.lru_cache(maxsize=None)
def _path_named(chosen: str, with_numba: bool) -> str:
    """cpu_path's answer, worked out once per value of the variable: a training step asks some 90 times."""
    if chosen and chosen not in CPU_PATHS:
        raise ValueError(f"{CPU_KERNELS}={chosen!r}: say one of {', '.join(CPU_PATHS)}, or leave it unset")
    if chosen == "compiled" and not with_numba:
        raise RuntimeError(f"{CPU_KERNELS}=compiled needs numba: pip install numba (or choose numpy)")
    return chosen or ("compiled" if with_numba else "numpy")


@functools.lru_cache(maxsize=None)
def _module(path: str):
    """The module that runs `path` (compiled_cpu or fast_cpu), imported at its first use: numba takes half a
    second to import."""
    return importlib.import_module(f".{'compiled_cpu' if path == 'compiled' else 'fast_cpu'}", __package__)


def cpu_kernels(device: str, *arrays):
    """The module whose functions the cpu runs for these inputs of a fused op: compiled_cpu or fast_cpu (the
    same names, the same contract), or None for the reference (cpu_path() says which). For float32 and float64
    data, what both are written for; float16 and bfloat16 data takes the reference, which computes in float32
    and rounds once."""
    if device != "cpu":
        return None
    for a in arrays:
        if a is not None and dtypes.is_half(a.dtype):
            return None
    path = cpu_path()
    return None if path == "reference" else _module(path)


def compiled_kernels(device: str, *arrays):
    """compiled_cpu where cpu_kernels chooses it, else None: for an op whose NumPy path is its reference
    (cross-entropy: a pass or two over (N, C) logits, cheap beside the product that made them)."""
    cpu = cpu_kernels(device, *arrays)
    return cpu if cpu is not None and cpu_path() == "compiled" else None
