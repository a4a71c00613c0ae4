"""The CuPy stand-in itself: strict where CuPy is strict, and counting what a GPU makes expensive.

These tests import the stand-in directly, so they run in every pass of the suite; the suite's
second pass in CI runs everything else on ``cuda`` through it (TINYGRAD_GPU_CUPY=standin).
"""
import json
from pathlib import Path

import numpy as np
import pytest

from tinygrad_gpu.kernels import gelu, runtime
from tinygrad_gpu.testing import cupy_standin as cp
from tinygrad_gpu.testing.cupy_standin import counters


@pytest.fixture(autouse=True)
def _fresh_counters():
    counters.reset()


def test_no_implicit_trip_to_the_host():
    x = cp.arange(4, dtype=cp.float32)
    for attempt in (lambda: np.asarray(x), lambda: np.exp(x), lambda: np.shares_memory(x, x),
                    lambda: np.concatenate([x, x]), lambda: x + np.ones(4, np.float32)):
        with pytest.raises(TypeError):
            attempt()
    assert counters.host_syncs == 0


def test_explicit_trips_are_counted_with_their_bytes_and_place():
    x = cp.asarray(np.ones((2, 3), np.float32))
    assert counters.bytes_to_device == 24
    assert x.get().tolist() == [[1.0] * 3] * 2 and cp.asnumpy(x).shape == (2, 3)
    total = x.sum()
    assert isinstance(total, cp.ndarray) and total.shape == ()      # a reduction stays on the device
    assert float(total) == 6.0 and total.item() == 6.0 and bool(total > 0)
    assert counters.host_syncs == 5 and counters.bytes_to_host == 2 * 24 + 4 + 4 + 1      # the bool: 1 byte
    assert any("test_cupy_standin.py" in site for site in counters.sites)


def test_only_what_cupy_has_exists():
    x = cp.zeros(3)
    with pytest.raises(AttributeError):
        cp.random.default_rng(0).permutation(3)         # CuPy's Generator has no permutation
    with pytest.raises(AttributeError):
        cp.random.default_rng(0).normal(size=3)
    with pytest.raises(AttributeError):
        cp.errstate                                      # NumPy's, not CuPy's
    with pytest.raises(AttributeError):
        x.tobytes_no_such_method
    with pytest.raises(AttributeError):
        x.flags.writeable                                # no read-only arrays on CuPy
    with pytest.raises(NotImplementedError):
        cp.multiply.at(x, [0], 1.0)                      # CuPy implements ufunc.at for few ufuncs


def test_cupys_documented_differences():
    x = cp.arange(5)
    assert x[cp.asarray(np.array([5, -6, 7]))].get().tolist() == [0, 4, 2]     # out of range wraps around
    half = cp.asarray(np.array([0.5], np.float16))
    assert cp.exp(half).dtype == np.float16
    from tinygrad_gpu.testing.cupy_standin.cupyx.scipy import special
    assert special.erf(half).dtype == np.float64                                # erf's loops: e->d, f->f, d->d
    with pytest.raises(TypeError):
        cp.negative(cp.zeros(2, dtype=bool))                                    # no loop takes bool
    view = cp.broadcast_to(cp.zeros(1), (3,))
    view[1] = 5.0                                                               # writeable, and overlapping
    assert view.get().tolist() == [5.0, 5.0, 5.0]
    with pytest.raises(ValueError, match="fill"):
        cp.zeros(3)[:] = np.ones(3)


def test_each_array_lives_on_one_device():
    a = cp.ones(2)
    with cp.cuda.Device(1):
        b = cp.ones(2)
        assert b.device.id == 1
        with pytest.raises(ValueError, match=r"resides \(0\).*current device \(1\)"):
            a + b
        moved = cp.asarray(a)                             # asarray copies onto the current device
        assert moved.device.id == 1 and (moved + b).get().tolist() == [2.0, 2.0]
    with pytest.raises(ValueError):
        b.sum()


def test_views_are_not_allocations_but_ops_are():
    x = cp.zeros((4, 6), dtype=cp.float32)
    counters.reset()
    x.reshape(6, 4)
    x.T
    x[1:3]
    assert counters.allocations == 0 and counters.launches == 0
    x + 1
    x[cp.asarray(np.array([0, 2]))]                       # the index's copy to the device is one too
    assert counters.allocations == 3 and counters.launches == 2
    assert counters.allocated_dtypes == {"float32": 2, "int64": 1}
    x += 1                                                # in place: a launch, no allocation
    assert counters.allocations == 3 and counters.launches == 3


def test_a_raw_kernel_runs_the_real_kernel_through_the_emulator():
    rng = np.random.default_rng(0)
    host = rng.standard_normal(1000).astype(np.float32)
    x, y = cp.asarray(host), cp.empty(1000, dtype=cp.float32)
    kernel = cp.RawModule(code=runtime.source(gelu.FILE)).get_function("gelu_forward")
    kernel((4,), (256,), (x, y, np.int64(1000)))
    np.testing.assert_allclose(y.get(), gelu.reference_forward(host), rtol=1e-5, atol=1e-6)   # tanhf's rounding
    assert counters.raw_launches == 1 and counters.function_lookups == 1
    with pytest.raises(TypeError, match="NumPy scalars"):
        kernel((4,), (256,), (x, y, 1000))                # a Python int has no C type


def test_the_list_of_cupy_names_is_what_the_installed_cupy_has():
    """cupy_api.json is regenerated with python -m tinygrad_gpu.testing.cupy_standin.make_api_list."""
    pytest.importorskip("cupy")
    from tinygrad_gpu.testing.cupy_standin import make_api_list
    committed = json.loads((Path(make_api_list.__file__).with_name("cupy_api.json")).read_text())
    assert committed == json.loads(json.dumps(make_api_list.api()))
