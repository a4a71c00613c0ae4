"""Shared pytest set-up: the spare-gradient check, hypothesis profiles and the device list.

The whole suite runs with TINYGRAD_GPU_CHECK_SPARE=1 (unless it is set otherwise): after every
backward that declares its gradients spare, the engine checks that they share memory with nothing
the op holds (tinygrad_gpu/gradient_sums.py), so a wrong declaration fails the test that ran it.

Hypothesis profiles are chosen with the environment variable TG_HYPOTHESIS_PROFILE:
``ci`` (default: few examples, keeps the suite fast on 2 cores), ``dev`` (more) and
``thorough`` (many; for a change to the engine).
"""
import os

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("TINYGRAD_GPU_CHECK_SPARE", "1")      # before tinygrad_gpu reads it, here and in subprocesses
import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu import deferred_checks  # noqa: E402

# Tests parametrised over devices run on every device this machine has. In the cuda pass
# (TINYGRAD_GPU_DEVICE=cuda: CI's second pass, through the CuPy stand-in with
# TINYGRAD_GPU_CUPY=standin, or benchmarks/gpu_check.sh on a GPU) they run on cuda only, and so
# does every test that uses the default device: cpu and emu ran in the first pass.
CUDA_PASS = os.environ.get("TINYGRAD_GPU_DEVICE", "").lower().startswith("cuda")

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# The cuda pass proves that the cuda path computes what the first pass checked the properties of, so in CI it
# draws fewer examples (the stand-in is slow: it checks every CuPy call as a GPU would run it).
settings.register_profile("ci", max_examples=20 if CUDA_PASS else 50, **_common)
settings.register_profile("dev", max_examples=200, **_common)
settings.register_profile("thorough", max_examples=1000, **_common)
settings.load_profile(os.environ.get("TG_HYPOTHESIS_PROFILE", "ci"))

gpu = pytest.mark.gpu
requires_gpu = pytest.mark.skipif(not tg.cuda_available(), reason="no CUDA GPU visible (CuPy missing or no driver)")

DEVICES = ["cuda"] if CUDA_PASS else ["cpu", "emu", pytest.param("cuda", marks=[gpu, requires_gpu])]

# The cuda pass runs every test file but those that test the cpu or emu devices alone, our scripts
# on the cpu, or the stand-in itself (they ran in the first pass).
ON_HOST_ONLY = ("test_benchmark_cpu_kernels.py", "test_benchmark_gpu_check.py", "test_benchmark_gpu_readiness.py", "test_benchmark_kernels.py",
                "test_benchmark_mixed_precision.py",
                "test_benchmark_lora.py", "test_benchmark_memory.py", "test_benchmark_train_vs_infer.py",
                "test_benchmark_data_parallel.py",
                "test_benchmark_ops.py", "test_benchmark_step.py", "test_cupy_standin.py", "test_docs.py",
                "test_emulator.py", "test_cpu_kernels.py", "test_cpu_paths_agree.py", "test_gpt_block.py",
                "test_gpt_emu.py",
                "test_imports.py", "test_nvrtc.py",
                "test_standin_kernel_references.py", "test_distributed.py", "test_train_distributed.py")
collect_ignore = list(ON_HOST_ONLY) if CUDA_PASS else []


def on(device, *arrays):
    """The arrays moved to `device` (None stays None: an absent bias, say), for calling a kernel's launcher."""
    from tinygrad_gpu import device as devices
    return [None if a is None else devices.move(a, devices.canonical(device)) for a in arrays]


def host(*arrays):
    """The arrays a launcher returned, as NumPy arrays (None stays None)."""
    from tinygrad_gpu import device as devices
    return [None if a is None else devices.move(a, "cpu") for a in arrays]


def allocation(array):
    """Where the memory an array is a view of starts, for tests that ask whether arrays share one allocation. By
    address: the CuPy stand-in makes a new .base object each time, so id() and `is` cannot tell there."""
    from tinygrad_gpu.kernels import runtime
    return runtime.address(array if array.base is None else array.base)


def example(name: str):
    """The program examples/<name>.py as a module, to call its main() in this process (the examples are no
    package)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory):
    """A tiny GPT-2 folder: random weights in GPT-2's layout (2 blocks of 32 wide, 384 positions, enough for a shop
    product's prompt and description) and a 1,000-token byte-level BPE learnt from the shop's text."""
    from tinygrad_gpu.nn import GPT, GPTConfig
    from tinygrad_gpu.tokenizers import GPT2Tokenizer
    pytest.importorskip("tokenizers")
    shop = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "data",
                        "shop_products.txt")
    with open(shop, encoding="utf-8") as f:
        tokenizer = GPT2Tokenizer.train(f.read().splitlines(), 1000)
    folder = tmp_path_factory.mktemp("tiny-gpt2")
    tg.manual_seed(0)
    GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=384, vocab_size=tokenizer.vocab_size,
                  bias=True)).save_pretrained(folder, tokenizer=tokenizer)
    return folder


@pytest.fixture(autouse=True)
def _seeded():
    tg.manual_seed(0)
    yield
    deferred_checks.raise_pending()      # a GPU index check a test left unread fails that test, not the next
