"""Every kernel compiles with NVRTC for sm_80 (A100) and sm_90 (H100), without a GPU.

CuPy's public compile helpers ask the driver which GPU is present, so they fail on a
machine without one; its NVRTC program wrapper (``cupy.cuda.compiler._NVRTCProgram``)
compiles for a named architecture with no device at all.  The options are the ones
``cupy.RawModule`` uses for our sources (runtime.CUDA_OPTIONS, then what CuPy adds).
Needs cupy-cuda12x, nvidia-cuda-nvrtc-cu12 and nvidia-cuda-runtime-cu12 (the headers);
.ci/run installs them, and this test skips, saying which is missing, where they are absent.
"""
import importlib.util
import re
from pathlib import Path

import pytest

from tinygrad_gpu.kernels import runtime

KERNEL_FILES = ["adamw.cu", "causal_softmax.cu", "cross_entropy.cu", "embedding_backward.cu", "gelu.cu",
                "layernorm.cu", "philox.cu"]         # block_reduce.h is pasted into the files that include it
ARCHS = ["80", "90"]


def _cuda_include_dir():
    spec = importlib.util.find_spec("nvidia.cuda_runtime")
    for root in (spec.submodule_search_locations or []) if spec else []:
        if (Path(root) / "include" / "cuda_runtime.h").exists():
            return Path(root) / "include"
    return None


@pytest.fixture(scope="module")
def nvrtc_options():
    try:
        from cupy._core import core
        from cupy.cuda import compiler
        from cupy_backends.cuda.libs import nvrtc
        version = nvrtc.getVersion()
    except Exception as e:       # CuPy missing, or its NVRTC library (nvidia-cuda-nvrtc-cu12) not loadable
        pytest.skip(f"NVRTC is not usable here ({type(e).__name__}: {e}); "
                    "pip install cupy-cuda12x nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12")
    include = _cuda_include_dir()
    if include is None:
        pytest.skip("CUDA headers not found: pip install nvidia-cuda-runtime-cu12")
    options = runtime.CUDA_OPTIONS + (f"-I{core._get_header_dir_path()}", f"-I{include}", "-ftz=true",
                                      "--device-as-default-execution-space")
    return compiler, options, version


def test_the_list_is_complete():
    """A new .cu file must join this list (and get its emulator test in test_kernels.py)."""
    assert sorted(KERNEL_FILES) == runtime.kernel_files()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("filename", KERNEL_FILES)
def test_nvrtc_compiles(nvrtc_options, filename, arch):
    compiler, options, _ = nvrtc_options
    source = runtime.source(filename)
    program = compiler._NVRTCProgram(source, filename, method="cubin")
    try:
        cubin, _ = program.compile(options + (f"-arch=sm_{arch}",))
    except compiler.CompileException as e:
        pytest.fail(f"NVRTC could not compile {filename} for sm_{arch}:\n{e}")
    for kernel in re.findall(r"__global__\s+void\s+(\w+)", source):    # every entry point is in the binary
        assert kernel.encode() in cubin, f"{kernel} missing from the sm_{arch} binary of {filename}"
