"""The energy a run uses, where the hardware says how much, and its CO2 given the grid's intensity.

Three sources, the first that applies:

- an NVIDIA GPU: NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``: millijoules
  since the driver loaded, Volta and later), through ``nvidia-ml-py`` (the ``[gpu]`` extra); the
  GPU's own energy, not the host's;
- a Linux CPU: RAPL's package counters (``/sys/class/powercap/intel-rapl:N/energy_uj``, one per
  socket; AMD's CPUs report there too), readable by root on most kernels; they wrap around at
  ``max_energy_range_uj``, which the meter undoes;
- otherwise nothing is measured. ``--watts W`` then gives an estimate, W times the seconds trained,
  and every figure made from it says "estimated" (metrics rows: ``energy_source``).

A meter reads its counter at the start and whenever asked, and returns the joules since the start.
"""
from __future__ import annotations

import glob
import os
import time

from .. import device as devices

RAPL_GLOB = "/sys/class/powercap/intel-rapl:[0-9]*"        # the package domains, not their sub-domains


class EnergyMeter:
    """`source` says what measures (None: nothing); `joules()` is the energy since the meter was made."""

    def __init__(self, device: str, watts: float = None):
        self.source, self.estimated, self._read = None, False, None
        if devices.is_cuda(device):
            self._read = _nvml_reader(int(device.split(":")[1]))
            self.source = "NVML (the GPU)" if self._read else None
        elif device == "cpu":
            self._read = _rapl_reader()
            self.source = "RAPL (the CPU packages)" if self._read else None
        if self._read is None and watts is not None:
            start = time.time()
            self._read = lambda: watts * (time.time() - start)
            self.source, self.estimated = f"--watts {watts:g} (estimated)", True
        self._start = self._read() if self._read else None

    def joules(self):
        """Joules since the meter started; None when nothing measures or estimates."""
        return None if self._read is None else self._read() - self._start


def _nvml_reader(index: int):
    """A function returning GPU `index`'s energy counter in joules, or None where NVML cannot give it."""
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)          # not every GPU has the counter
    except Exception:                       # not installed, no driver, or a GPU without the counter
        return None
    return lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0


def _rapl_reader():
    """A function returning the CPU packages' energy in joules (wrap-arounds undone), or None."""
    domains = []
    for folder in sorted(glob.glob(RAPL_GLOB)):
        try:
            with open(os.path.join(folder, "energy_uj")) as f:
                first = int(f.read())
            with open(os.path.join(folder, "max_energy_range_uj")) as f:
                wrap = int(f.read())
        except (OSError, ValueError):       # unreadable (not root, or a kernel that hides it)
            continue
        domains.append({"path": os.path.join(folder, "energy_uj"), "wrap": wrap, "last": first, "total": 0})
    if not domains:
        return None

    def read():
        for d in domains:
            with open(d["path"]) as f:
                now = int(f.read())
            d["total"] += now - d["last"] if now >= d["last"] else now + d["wrap"] - d["last"]
            d["last"] = now
        return sum(d["total"] for d in domains) / 1e6
    return read


def kwh(joules: float) -> float:
    return joules / 3.6e6
