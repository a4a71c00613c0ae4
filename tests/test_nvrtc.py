"""Every kernel compiles with NVRTC for sm_80 (A100) and sm_90 (H100), without a GPU.

CuPy's public compile helpers ask the driver which GPU is present, so they fail on a
machine without one; its NVRTC program wrapper (``cupy.cuda.compiler._NVRTCProgram``)
compiles for a named architecture with no device at all.  The options are the ones
``cupy.RawModule`` uses for our sources (runtime.CUDA_OPTIONS, then what CuPy adds).
Each file is compiled twice, as runtime.py builds it on a GPU: without TG_HALF_PRECISION (the
float32 entry points, with no NVIDIA header at all) and with it (every entry point, with
NVIDIA's cuda_fp16.h and cuda_bf16.h).
Needs cupy-cuda12x, nvidia-cuda-nvrtc-cu12 and nvidia-cuda-runtime-cu12 (the headers);
.ci/run installs them, and this test skips, saying which is missing, where they are absent.
"""
import importlib.util
import re
from pathlib import Path

import pytest

from tinygrad_gpu.kernels import runtime

KERNEL_FILES = ["adamw.cu", "causal_softmax.cu", "cross_entropy.cu", "embedding_backward.cu", "gelu.cu",
                "grad_scaler.cu", "layernorm.cu", "philox.cu",
                "dropout.cu", "causal_attention.cu", "multi_tensor.cu", "index_check.cu"]         # the .h files are pasted into the files that include them
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
        nvrtc.getVersion()       # loads the library
    except Exception as e:       # CuPy missing, or its NVRTC library (nvidia-cuda-nvrtc-cu12) not loadable
        pytest.skip(f"NVRTC is not usable here ({type(e).__name__}: {e}); "
                    "pip install cupy-cuda12x nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12")
    include = _cuda_include_dir()
    if include is None:
        pytest.skip("CUDA headers not found: pip install nvidia-cuda-runtime-cu12")
    options = runtime.CUDA_OPTIONS + (f"-I{core._get_header_dir_path()}", "-ftz=true",
                                      "--device-as-default-execution-space")
    return compiler, options, f"-I{include}"


def test_the_list_is_complete():
    """A new .cu file must join this list (and get its emulator test in test_kernels.py)."""
    assert sorted(KERNEL_FILES) == runtime.kernel_files()


@pytest.mark.parametrize("half", [False, True], ids=["float32", "16-bit"])
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("filename", KERNEL_FILES)
def test_nvrtc_compiles(nvrtc_options, filename, arch, half):
    """Without the macro, the float32 entry points alone and no CUDA headers on the include path (a GPU whose
    CuPy finds none still runs them); with it, every entry point."""
    compiler, options, cuda_headers = nvrtc_options
    source = runtime.source(filename)
    program = compiler._NVRTCProgram(source, filename, method="cubin")
    build = (cuda_headers, runtime.HALF_OPTION) if half else ()
    try:
        cubin, _ = program.compile(options + build + (f"-arch=sm_{arch}",))
    except compiler.CompileException as e:
        pytest.fail(f"NVRTC could not compile {filename} for sm_{arch} with options {build}:\n{e}")
    for kernel in re.findall(r"__global__\s+void\s+(\w+)", source):
        built = kernel.encode() + b"\0" in cubin       # its name in the binary's string table
        wanted = half or not runtime.is_half_entry_point(kernel)
        assert built == wanted, f"{kernel} {'missing from' if wanted else 'in'} the sm_{arch} binary of {filename}"


def test_the_16_bit_build_without_the_headers_fails_naming_them(nvrtc_options):
    """What a GPU whose CuPy finds no CUDA headers meets at its first 16-bit launch: NVRTC's log names the
    header, which is how runtime.py recognises the failure and says where to get them."""
    compiler, options, _ = nvrtc_options
    program = compiler._NVRTCProgram(runtime.source("gelu.cu"), "gelu.cu", method="cubin")
    try:
        program.compile(options + (runtime.HALF_OPTION, "-arch=sm_80"))
    except compiler.CompileException as e:
        assert 'cannot open source file "cuda_fp16.h"' in str(e)
    else:
        pytest.skip("this NVRTC finds cuda_fp16.h without an include path")
