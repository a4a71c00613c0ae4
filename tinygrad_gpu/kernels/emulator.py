"""The ``emu`` device: our CUDA kernels compiled for the CPU and launched through ctypes.

    module = emulator.compile_file("tinygrad_gpu/kernels/gelu.cu")
    module.launch("gelu_forward", grid=(4,), block=(256,), args=[x, y, np.int64(x.size)])

``cuda_emu.h`` gives CUDA C its meaning on a CPU (read its opening comment first); this
module prepares a ``.cu`` source for g++, compiles it once into a shared library kept in a
cache directory, and launches its kernels with the same grid, block and arguments that
``cupy.RawModule`` would get on a GPU.  Arguments are NumPy arrays (passed as pointers)
and NumPy scalars (``np.int32``, ``np.float32``, ...), exactly as for CuPy; every launch
is checked against the kernel's parameter types first, so a launcher bug shows up here as
a clear error instead of a wrong answer on a GPU.  A C struct passed by value is a NumPy
structured scalar (``np.zeros((), np.dtype(..., align=True))[()]``, a ``numpy.void``), as
CuPy takes it; its itemsize must be the struct's size.

Options: ``shuffle=seed`` (or the environment variable ``TINYGRAD_GPU_EMU_SHUFFLE``) runs
the threads of each block in a random order at every barrier, which exposes races that
the fixed order hides.  ``TINYGRAD_GPU_CACHE`` moves the cache (default
``~/.cache/tinygrad_gpu``); ``CXX`` picks the compiler.  This is a correctness and
learning tool: a kernel runs thousands of times slower than on a GPU.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from .. import cache, dtypes

HEADER = Path(__file__).with_name("cuda_emu.h")
# -U_FORTIFY_SOURCE: glibc's checked longjmp aborts when a fiber jumps onto another stack.
# -DTG_HALF_PRECISION=1: our kernels' float16 and bfloat16 entry points (half_precision.h), always
# here: cuda_emu.h defines the 16-bit types itself, where a GPU needs NVIDIA's headers for them.
FLAGS = ("-std=gnu++17", "-O2", "-fPIC", "-shared", "-fopenmp", "-U_FORTIFY_SOURCE", "-w", "-DTG_HALF_PRECISION=1")

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_DYNAMIC_SHARED = 48 * 1024       # what a launch may ask for without opting in on a GPU


class EmulatorError(RuntimeError):
    """A kernel could not be compiled or launched on the emulator."""


class KernelCompileError(EmulatorError):
    pass


class KernelDeadlock(EmulatorError):
    """The threads of a block can never all meet at a barrier: the kernel would hang on a GPU."""


# ----------------------------------------------------------------------------- compiling
def find_compiler() -> str:
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if not compiler or not shutil.which(compiler):
        raise EmulatorError("the 'emu' device compiles CUDA kernels for the CPU with a C++ compiler, and none was "
                            "found (tried $CXX, g++, c++, clang++). Install one (e.g. `apt install g++`) or use "
                            "device='cpu', which runs the NumPy references instead.")
    return compiler


@functools.lru_cache(maxsize=None)
def _compiler_identity(compiler: str) -> str:
    """The compiler's version banner: part of the cache key, so an upgrade recompiles."""
    try:
        return subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise EmulatorError(f"the C++ compiler {compiler!r} does not run ({e})") from None


def cache_dir() -> Path:
    return Path(cache.cache_dir("emu"))


_KERNEL = re.compile(r"__global__\s+void\s+(\w+)\s*\(")
# `extern __shared__ float buffer[];` -> a pointer to this core's dynamic shared memory.
# (A declaration can't be turned into that by a macro, so the source is rewritten, on the same line.)
_DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([\w\s]+?)\s*(\w+)\s*\[\s*\]\s*;")


def prepare_source(source: str, filename: str) -> tuple[str, list]:
    """The C++ g++ compiles for `source`, and the names of its kernels."""
    kernels = _KERNEL.findall(source)
    body = _DYNAMIC_SHARED.sub(r"\1* \2 = (\1*)emu_dynamic_shared();", source)
    entry_points = "".join(
        f'extern "C" int emu_launch__{k}(const unsigned* g, const unsigned* b, unsigned long long smem, void** a, '
        f'unsigned long long seed, char* err, unsigned long long n) '
        f'{{ return emu_launch({k}, "{k}", g, b, smem, a, seed, err, n); }}\n'
        f'extern "C" const char* emu_signature__{k}() {{ return emu_signature({k}); }}\n' for k in kernels)
    quoted = filename.replace("\\", "\\\\").replace('"', '\\"')
    text = f'#include "cuda_emu.h"\n#line 1 "{quoted}"\n{body}\n#line 1 "emulator entry points"\n{entry_points}'
    return text, kernels


_modules = {}     # cache key -> Module, so each source is loaded once per process


def compile_source(source: str, filename: str = "kernel.cu") -> Module:
    """Compile CUDA C `source` for the emulator (or reuse the cached build); `filename` names it in errors."""
    text, kernels = prepare_source(source, filename)
    compiler = find_compiler()
    key_text = "\0".join([text, HEADER.read_text(), compiler, _compiler_identity(compiler), *FLAGS])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:32]
    if key in _modules:
        return _modules[key]
    directory = cache_dir()
    library = directory / f"{Path(filename).stem}-{key}.so"
    if not library.exists():
        directory.mkdir(parents=True, exist_ok=True)
        # Build under a private name, then rename: a rename is atomic, so parallel test
        # processes never load a half-written library.
        fd, partial = tempfile.mkstemp(suffix=".so.partial", dir=directory)
        os.close(fd)
        try:
            result = subprocess.run([compiler, *FLAGS, "-I", str(HEADER.parent), "-x", "c++", "-", "-o", partial],
                                    input=text, capture_output=True, text=True)
            if result.returncode != 0:
                raise KernelCompileError(f"the emulator could not compile {filename} with {compiler} "
                                         f"(file:line of each problem below):\n{result.stderr.strip()}")
            os.replace(partial, library)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
    module = Module(library, kernels, filename)
    _modules[key] = module
    return module


def compile_file(path) -> Module:
    path = Path(path)
    return compile_source(path.read_text(), str(path))


# ----------------------------------------------------------------------------- launching
def _dim3(value, what: str, limits) -> tuple:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{what} must have 1 to 3 dimensions, got {value!r}")
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    for d, limit, axis in zip(dims, limits, "xyz"):
        if not 1 <= d <= limit:
            raise ValueError(f"{what}.{axis} = {d} is outside 1..{limit} (a GPU rejects this launch too)")
    return dims


_SCALAR_TYPES = {"f4": ctypes.c_float, "f8": ctypes.c_double, "b1": ctypes.c_bool,
                 "i1": ctypes.c_int8, "i2": ctypes.c_int16, "i4": ctypes.c_int32, "i8": ctypes.c_int64,
                 "u1": ctypes.c_uint8, "u2": ctypes.c_uint16, "u4": ctypes.c_uint32, "u8": ctypes.c_uint64}


def _type_code(arg):
    """The emulator's code for a launch argument: 'pf4' for a float32 array, 'i4' for np.int32, ...
    (cuda_emu.h's emu_type_code gives the parameters' codes). Arrays of the three 2-byte types differ:
    'pf2' float16 (__half), 'pbf2' bfloat16 (__nv_bfloat16), 'pu2' uint16 (unsigned short). A struct by value
    is 's' and its size in bytes: a NumPy structured scalar (numpy.void) of that itemsize."""
    if arg is None:
        return "p"                   # a null pointer fits any pointer parameter
    if isinstance(arg, np.ndarray):
        if arg.dtype == dtypes.bfloat16:
            return "pbf2"            # NumPy's kind+bytes would be 'V2', a void type's
        return "p" + ("b1" if arg.dtype == np.bool_ else f"{arg.dtype.kind}{arg.dtype.itemsize}")
    if isinstance(arg, np.generic) and not isinstance(arg, (np.bool_, np.void)):
        return f"{arg.dtype.kind}{arg.dtype.itemsize}"
    if isinstance(arg, np.bool_):
        return "b1"
    if isinstance(arg, np.void) and arg.dtype.fields is not None:
        return f"s{arg.dtype.itemsize}"
    raise TypeError(f"kernel arguments are NumPy arrays or NumPy scalars (np.int32(3), np.float32(0.5)), as for "
                    f"CuPy; got {type(arg).__name__} {arg!r}: say which C type it is")


def _struct_bytes(arg: np.void):
    """A copy of a structured scalar's bytes in 8-byte-aligned memory (the struct's pointers and long longs
    want it; a bytes object or a char buffer promises less), for the kernel to copy its parameter from."""
    data = arg.tobytes()
    words = (ctypes.c_uint64 * max(1, -(-len(data) // 8)))()
    ctypes.memmove(words, data, len(data))
    return words


def _shuffle_seed(shuffle) -> int:
    if shuffle is None:
        shuffle = os.environ.get("TINYGRAD_GPU_EMU_SHUFFLE", "0")
    return int(shuffle) & (2**64 - 1)


class Module:
    """One compiled .cu file; ``launch`` runs one of its kernels."""

    def __init__(self, library: Path, kernels: list, filename: str):
        self.library = ctypes.CDLL(str(library))
        self.kernels = kernels
        self.filename = filename
        self._signatures = {}

    def signature(self, kernel: str) -> list:
        if kernel not in self._signatures:
            if kernel not in self.kernels:
                raise EmulatorError(f"{self.filename} has no kernel {kernel!r} (it has: {', '.join(self.kernels)})")
            fn = getattr(self.library, f"emu_signature__{kernel}")
            fn.restype = ctypes.c_char_p
            self._signatures[kernel] = fn().decode().split()
        return self._signatures[kernel]

    def _pack(self, kernel: str, args) -> list:
        """ctypes values for `args`, checked against the kernel's parameter types."""
        expected = self.signature(kernel)
        if len(args) != len(expected):
            raise TypeError(f"kernel {kernel!r} takes {len(expected)} arguments ({' '.join(expected)}), "
                            f"got {len(args)}")
        values = []
        for i, (arg, want) in enumerate(zip(args, expected)):
            got = _type_code(arg)
            fits = (got == want or (got == "p" and want.startswith("p"))            # None: a null pointer
                    or (got.startswith("p") and want in ("pv0", "pi1", "pu1")))      # void*, char*: any array
            if not fits and want[0] == "s" == got[0]:
                raise TypeError(f"kernel {kernel!r} argument {i}: the kernel takes a struct of {want[1:]} bytes, "
                                f"got a structured scalar of {got[1:]} bytes (dtype {arg.dtype}); its NumPy dtype "
                                "must match the C struct field for field, with align=True")
            if not fits and want.startswith("p") and got[0] == "p":
                raise TypeError(f"kernel {kernel!r} argument {i}: expected an array of {want[1:]} "
                                f"(kind+bytes), got dtype {arg.dtype}")
            if not fits:
                raise TypeError(f"kernel {kernel!r} argument {i}: the kernel takes {want} (kind+bytes), "
                                f"got {got} ({type(arg).__name__}); convert it, e.g. np.int32(n)")
            if isinstance(arg, np.ndarray):
                if not arg.flags.c_contiguous:
                    raise ValueError(f"kernel {kernel!r} argument {i}: arrays must be C-contiguous "
                                     "(np.ascontiguousarray), as the kernel indexes them as flat memory")
                values.append(ctypes.c_void_p(arg.ctypes.data))
            elif arg is None:
                values.append(ctypes.c_void_p(0))
            elif got[0] == "s":
                values.append(_struct_bytes(arg))
            else:
                values.append(_SCALAR_TYPES[got](arg.item()))
        return values

    def check(self, kernel: str, grid, block, args, shared_mem: int = 0):
        """What a GPU checks before a launch: the grid, the block, the shared memory, and each argument
        against the kernel's parameter types. Returns (grid, block, argument values) for launch()."""
        grid3 = _dim3(grid, "grid", MAX_GRID)
        block3 = _dim3(block, "block", MAX_BLOCK)
        if block3[0] * block3[1] * block3[2] > MAX_THREADS_PER_BLOCK:
            raise ValueError(f"block {block3} has more than {MAX_THREADS_PER_BLOCK} threads (a GPU rejects it too)")
        if not 0 <= shared_mem <= MAX_DYNAMIC_SHARED:
            raise ValueError(f"shared_mem={shared_mem} bytes: a launch may ask for 0..{MAX_DYNAMIC_SHARED}")
        return grid3, block3, self._pack(kernel, list(args))

    def launch(self, kernel: str, grid, block, args, shared_mem: int = 0, shuffle=None) -> None:
        """Run `kernel` over `grid` blocks of `block` threads, like ``RawModule.get_function(kernel)``."""
        grid3, block3, values = self.check(kernel, grid, block, args, shared_mem)
        pointers = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p)
                                                             for v in values])
        error = ctypes.create_string_buffer(4096)
        fn = getattr(self.library, f"emu_launch__{kernel}")
        failed = fn((ctypes.c_uint * 3)(*grid3), (ctypes.c_uint * 3)(*block3), ctypes.c_ulonglong(shared_mem),
                    pointers, ctypes.c_ulonglong(_shuffle_seed(shuffle)), error, ctypes.c_ulonglong(len(error)))
        if failed:                       # cuda_emu.h's EmuResult: 2 is a deadlock
            raise (KernelDeadlock if failed == 2 else EmulatorError)(error.value.decode(errors="replace"))
