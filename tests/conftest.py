"""Shared pytest set-up: hypothesis profiles and the device list.

Hypothesis profiles are chosen with the environment variable TG_HYPOTHESIS_PROFILE:
``ci`` (default: few examples, keeps the suite fast on 2 cores), ``dev`` (more) and
``thorough`` (many; for a change to the engine).
"""
import os

import pytest
from hypothesis import HealthCheck, settings

import tinygrad_gpu as tg

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=50, **_common)
settings.register_profile("dev", max_examples=200, **_common)
settings.register_profile("thorough", max_examples=1000, **_common)
settings.load_profile(os.environ.get("TG_HYPOTHESIS_PROFILE", "ci"))

gpu = pytest.mark.gpu
requires_gpu = pytest.mark.skipif(not tg.cuda_available(), reason="no CUDA GPU visible (CuPy missing or no driver)")

# Tests parametrised over devices run on every device this machine has.
DEVICES = ["cpu", "emu", pytest.param("cuda", marks=[gpu, requires_gpu])]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(autouse=True)
def _seeded():
    tg.manual_seed(0)
