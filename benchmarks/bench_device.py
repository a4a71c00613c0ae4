"""What the benchmarks share: the device (or a polite exit without a GPU), waiting for it, and torch.

Each script times the same work on our engine and, when it imports, on PyTorch, on the same
hardware: torch's cpu next to our cpu and emu (both NumPy), torch's cuda:N next to our cuda:N.
"""
from __future__ import annotations

from tinygrad_gpu import device as devices


def resolve(name: str, script: str):
    """The canonical device name, or None after printing why it cannot be used.

    A missing GPU is not an error for a benchmark: the caller prints nothing more and exits 0,
    so a CPU-only CI can run `--device cuda` and see the reason instead of a traceback.
    """
    try:
        return devices.canonical(name)
    except RuntimeError as e:
        print(f"{script} --device {name}: {e}\nNothing to time here: run it on a machine with an NVIDIA GPU "
              "(pip install -e '.[gpu]'), or pass --device cpu.")
        return None


def _gpu_index(device: str) -> int:
    return int(device.split(":")[1])


def synchronizer(device: str):
    """A function that waits until the device has finished its queued work (nothing to wait for on the CPU).

    CuPy returns as soon as a kernel is queued, so a timer read without this measures only
    the launch.  cudaDeviceSynchronize waits for every stream of the GPU, torch's included.
    """
    if not devices.is_cuda(device):
        return lambda: None
    return devices.array_module(device).cuda.Device(_gpu_index(device)).synchronize


def load_torch(device: str):
    """(torch, torch.device, its synchronize) on the hardware `device` runs on, or (None, reason, None)."""
    try:
        import torch
    except Exception as e:          # not installed (CI), or a broken install: no torch column either way
        return None, f"torch is not importable ({type(e).__name__}: {e})", None
    if not devices.is_cuda(device):
        return torch, torch.device("cpu"), lambda: None
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no GPU (a CPU-only build?)", None
    index = _gpu_index(device)
    return torch, torch.device("cuda", index), lambda: torch.cuda.synchronize(index)
