"""What the hardware could do: the peak FLOP/s that a run's model FLOPs utilisation (MFU) divides by.

MFU = achieved training FLOP/s / peak FLOP/s, where the achieved figure counts the model's
FLOPs per token (GPT.flops_per_token, LSTMLanguageModel.flops_per_token) times the tokens
trained per second. The peak depends on the device:

- an NVIDIA GPU: its datasheet's dense peak (without 2:4 sparsity, which a dense model never
  uses) for the kind of matrix product the run does: float32 on the CUDA cores, float32 through
  TF32 tensor cores when tg.backends.cuda.matmul.allow_tf32 is on, float16 on tensor cores;
- the CPU: no datasheet fits every CPU, so a short float32 matmul probe measures what NumPy's
  BLAS reaches here, once per machine; the result waits in a small JSON file for later runs.
"""
from __future__ import annotations

import json
import os
import platform
import re
import time

import numpy as np

from .. import device as devices
from ..cache import cache_dir
from ..backends import backends

# Dense peak TFLOP/s: (float32 on CUDA cores, TF32 tensor cores, float16 tensor cores with float32 sums).
# bfloat16 runs at float16's rate on every GPU here that has it (compute capability 8.0 and up).
# None for TF32: the GPU predates it, so float32 products run at the float32 rate.
# A datasheet that lists only figures "with sparsity" is halved. More specific names come first:
# the first pattern found in the GPU's name wins.
GPU_PEAK_TFLOPS = [
    # NVIDIA H200 datasheet (H200 NVL column): 60 FP32; 835 TF32, 1,671 FP16 with sparsity.
    (r"H200 NVL", (60.0, 417.5, 835.5)),
    # NVIDIA H200 datasheet (H200 SXM column): 67 FP32; 989 TF32, 1,979 FP16 with sparsity.
    (r"H200", (67.0, 494.5, 989.5)),
    # NVIDIA H100 datasheet (H100 NVL column): 60 FP32; 835 TF32, 1,671 FP16 with sparsity.
    (r"H100 NVL", (60.0, 417.5, 835.5)),
    # NVIDIA H100 datasheet (H100 PCIe column): 51 FP32; 756 TF32, 1,513 FP16 with sparsity.
    (r"H100 PCIe", (51.0, 378.0, 756.5)),
    # NVIDIA H100 datasheet (H100 SXM column): 67 FP32; 989 TF32, 1,979 FP16 with sparsity.
    (r"H100", (67.0, 494.5, 989.5)),
    # NVIDIA A100 datasheet: 19.5 FP32, 156 TF32, 312 FP16 (dense; both 40 GB and 80 GB, PCIe and SXM).
    (r"A100", (19.5, 156.0, 312.0)),
    # NVIDIA A10 datasheet: 31.2 FP32, 62.5 TF32, 125 FP16 (dense).
    (r"A10", (31.2, 62.5, 125.0)),
    # NVIDIA L40S datasheet: 91.6 FP32; 366 TF32, 733 FP16 with sparsity.
    (r"L40S", (91.6, 183.0, 366.5)),
    # NVIDIA L4 datasheet: 30.3 FP32; 120 TF32, 242 FP16 with sparsity.
    (r"L4", (30.3, 60.0, 121.0)),
    # NVIDIA Ada Lovelace architecture whitepaper, appendix (GeForce RTX 4090): 82.6 FP32, 82.6 TF32,
    # 165.2 FP16 with FP32 accumulate (dense).
    (r"RTX 4090", (82.6, 82.6, 165.2)),
    # NVIDIA Ampere GA102 whitepaper, appendix (GeForce RTX 3090): 35.6 FP32, 35.6 TF32,
    # 71 FP16 with FP32 accumulate (dense).
    (r"RTX 3090", (35.6, 35.6, 71.0)),
    # NVIDIA V100 datasheet (PCIe column): 14 FP32, 112 tensor (FP16).
    (r"V100[- ]PCIE", (14.0, None, 112.0)),
    # NVIDIA V100 datasheet (SXM2 column): 15.7 FP32, 125 tensor (FP16).
    (r"V100", (15.7, None, 125.0)),
    # NVIDIA T4 datasheet: 8.1 FP32, 65 FP16 mixed precision (FP16/FP32).
    (r"T4", (8.1, None, 65.0)),
]

# The CPU probe: square float32 products of these sides, each timed for PROBE_SECONDS.
PROBE_SIDES = (256, 512, 1024)
PROBE_SECONDS = 0.1
CACHE_NAME = "cpu_peak_flops.json"


def peak_flops(device: str, dtype) -> tuple:
    """(peak FLOP/s or None, what it is) for training a model of `dtype` on `device` ('cpu', 'emu',
    'cuda:N'). None when no peak is known (an unlisted GPU, the emulator): then there is no MFU."""
    if devices.is_cuda(device):
        name = gpu_name(int(device.split(":")[1]))
        kind = ("float16" if np.dtype(dtype).itemsize == 2 else
                "TF32" if backends.cuda.matmul.allow_tf32 else "float32")
        peak = gpu_peak_flops(name, kind)
        if peak is None:
            return None, f"no peak FLOP/s listed for the GPU {name!r} (train/compute.py's table): no MFU"
        return peak, f"{name}, {np.dtype(dtype).name if kind == 'float16' else kind} datasheet peak"
    if device == "cpu":
        return cpu_peak_flops(), f"float32 matmul measured on {cpu_model()}"
    return None, f"{device} is not hardware that has a peak: no MFU"


def gpu_name(index: int) -> str:
    """The name the CUDA runtime reports for GPU `index`, e.g. 'NVIDIA H100 80GB HBM3'."""
    name = devices.cupy().cuda.runtime.getDeviceProperties(index)["name"]
    return name.decode() if isinstance(name, bytes) else name


def gpu_peak_flops(name: str, kind: str):
    """The dense peak FLOP/s of the GPU called `name` for products of `kind` ('float32', 'TF32' or
    'float16'); None for a GPU the table lacks."""
    for pattern, (float32, tf32, float16) in GPU_PEAK_TFLOPS:
        # Whole words only: "A10" is not the start of "A100", nor "L4" that of "L40S".
        if re.search(rf"(?<![A-Za-z0-9]){pattern}(?![A-Za-z0-9])", name, re.IGNORECASE):
            tflops = {"float32": float32, "TF32": tf32 or float32, "float16": float16}[kind]
            return tflops * 1e12
    return None


# The variables that cap BLAS's threads (OpenMP's, OpenBLAS's, MKL's).
THREAD_LIMITS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def cpu_peak_flops() -> float:
    """This machine's float32 matmul FLOP/s: from the cache when this CPU, core count and NumPy were
    measured before, else measured now (a few hundred ms) and cached."""
    path, key = os.path.join(cache_dir(), CACHE_NAME), _machine_key()
    known = _read_json(path)
    if key not in known:
        known[key] = measure_cpu_peak()
        _write_json(path, known)
    return known[key]


def measure_cpu_peak() -> float:
    """The best float32 matmul FLOP/s over a few sizes (a product of two n x n matrices is 2 n^3
    FLOPs). The fastest single product counts: other processes only ever slow one down."""
    rng = np.random.default_rng(0)
    best = 0.0
    for n in PROBE_SIDES:
        a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
        a @ b                                           # the first product also starts BLAS's threads
        deadline = time.perf_counter() + PROBE_SECONDS
        fastest = float("inf")
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            a @ b
            fastest = min(fastest, time.perf_counter() - start)
        best = max(best, 2 * n ** 3 / fastest)
    return best


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; what platform knows elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "an unknown CPU"


def _machine_key() -> str:
    """What the probe's result depends on: the CPU, how many cores BLAS may use (all of them, unless a
    thread limit says otherwise: one per rank under mpiexec, say), and NumPy's BLAS."""
    limits = [f"{name}={os.environ[name]}" for name in THREAD_LIMITS if os.environ.get(name)]
    return " | ".join([cpu_model(), f"{os.cpu_count()} cores", *limits, f"numpy {np.__version__}"])


def _read_json(path: str) -> dict:
    try:
        with open(path) as f:
            known = json.load(f)
    except (OSError, ValueError):          # absent, unreadable or damaged: measure again
        return {}
    return known if isinstance(known, dict) else {}


def _write_json(path: str, known: dict) -> None:
    """Write atomically; a cache that cannot be written (read-only home, full disk) costs only a
    probe at the next run, so it never stops this one."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w") as f:
            json.dump(known, f, indent=1)
        os.replace(temporary, path)
    except OSError:
        pass
