"""grad_scaler.cu and adamw.cu's skippable step against their NumPy references, on emu and on cuda.

Sizes are rarely multiples of the block (256 threads), and the grid-stride loop is made to wrap
(more elements than the grid has threads); infs and nans sit anywhere, the first and last element
included. The unscale must be exact: the reference multiplies by the same float32 reciprocal.
"""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinygrad_gpu import device as devices
from tinygrad_gpu.kernels import adamw, grad_scaler

from conftest import gpu, requires_gpu

KERNEL_DEVICES = ["emu", pytest.param("cuda", marks=[gpu, requires_gpu])]
on_kernel_devices = pytest.mark.parametrize("device", KERNEL_DEVICES)
SIZES = st.one_of(st.integers(1, 600), st.sampled_from([255, 257, 4096 * 256 + 5]))
SCALES = st.sampled_from([1.0, 3.0, 2.0 ** 16, 2.0 ** -20, 1e38, 7e-40])     # 7e-40: subnormal, 1 / it is inf


def on(device, *arrays):
    """Copies on `device` (on emu, a move alone would hand the kernel the caller's own array)."""
    return [devices.move(np.array(a), devices.canonical(device)) for a in arrays]


def back(*arrays):
    return [np.array(devices.move(a, "cpu")) for a in arrays]


# ----------------------------------------------------------------------------- amp_non_finite_check_and_unscale
@on_kernel_devices
@given(SIZES, SCALES, st.sampled_from([0.0, 1.0]), st.lists(st.sampled_from([math.inf, -math.inf, math.nan]),
       max_size=3), st.integers(0, 2 ** 32 - 1))
def test_unscale(device, n, scale, found_before, bad_values, seed):
    rng = np.random.default_rng(seed)
    grad = (rng.standard_normal(n) * 1e3).astype(np.float32)
    places = rng.choice([0, n - 1, int(rng.integers(0, n))], len(bad_values)) if n else []
    grad[places] = bad_values
    scale, found_inf = np.float32(scale), np.float32(found_before)
    on_device = on(device, grad, found_inf, scale)
    grad_scaler.non_finite_check_and_unscale_(*on_device, device)
    got_grad, got_found = back(*on_device[:2])
    want_grad, want_found = grad.copy(), np.array(found_inf)
    grad_scaler.reference_non_finite_check_and_unscale_(want_grad, want_found, np.array(scale))
    np.testing.assert_array_equal(got_grad, want_grad)
    assert got_found == want_found == (1.0 if bad_values or found_before else 0.0)
    assert got_found.dtype == np.float32 and got_found.shape == ()


def test_unscale_reference_is_the_textbook_formula():
    grad = np.float32([1.0, -6.0, np.inf, 0.0, 3e38])
    found_inf = np.zeros((), np.float32)
    grad_scaler.reference_non_finite_check_and_unscale_(grad, found_inf, np.full((), 3.0, np.float32))
    assert found_inf == 1.0
    third = np.float32(1 / 3)                                   # 1/3 in double, rounded once to float32
    np.testing.assert_array_equal(grad, np.float32([third, -6 * third, np.inf, 0.0, np.float32(3e38) * third]))
    clean = np.float32([2.0, 4.0])
    found_inf[...] = 0
    grad_scaler.reference_non_finite_check_and_unscale_(clean, found_inf, np.full((), 2.0, np.float32))
    assert found_inf == 0.0 and clean.tolist() == [1.0, 2.0]


@on_kernel_devices
def test_unscale_of_a_strided_gradient(device):
    """A gradient that is not C-contiguous is unscaled through a copy and written back in place."""
    grad = np.arange(12, dtype=np.float32).reshape(3, 4) * 4
    grad[2, 1] = np.nan
    [g, found_inf, scale] = on(device, grad, np.float32(0), np.float32(4))
    view = g.T
    grad_scaler.non_finite_check_and_unscale_(view, found_inf, scale, device)
    got, found = back(g, found_inf)
    want = np.arange(12, dtype=np.float32).reshape(3, 4)
    want[2, 1] = np.nan
    np.testing.assert_array_equal(got, want)
    assert found == 1.0


# ----------------------------------------------------------------------------- amp_update_scale
UPDATE_CASES = [  # scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval
    (1024.0, 0, 0.0, 2.0, 0.5, 3), (1024.0, 2, 0.0, 2.0, 0.5, 3), (1024.0, 2, 1.0, 2.0, 0.5, 3),
    (1024.0, 5, 2.0, 2.0, 0.5, 3),            # two devices' flags added up: still an overflow
    (1024.0, 5, 0.0, 2.0, 0.5, 3),            # past the interval (set_growth_interval lowered it): counts on
    (3.0, 0, 0.0, 1.1, 0.3, 1), (3.0, 0, 1.0, 1.1, 0.3, 1),       # factors that float32 cannot hold exactly
    (2.0 ** 127, 0, 0.0, 2.0, 0.5, 1),        # growth to inf is refused, the tracker restarts
    (3e38, 0, 0.0, 1.5, 0.5, 1), (1e-45, 0, 1.0, 2.0, 0.5, 1),    # 1e-45: the smallest subnormal, backed off to 0
]


@on_kernel_devices
@pytest.mark.parametrize("case", UPDATE_CASES)
def test_update_scale(device, case):
    scale, tracker, found_inf, growth_factor, backoff_factor, interval = case
    arrays = [np.array(scale, np.float32), np.array(tracker, np.int32), np.array(found_inf, np.float32)]
    on_device = on(device, *arrays)
    grad_scaler.update_scale_(*on_device, growth_factor, backoff_factor, interval, device)
    want = [a.copy() for a in arrays]
    grad_scaler.reference_update_scale_(*want, growth_factor, backoff_factor, interval)
    for got, expected in zip(back(*on_device), want):
        assert got.dtype == expected.dtype and got.shape == () and got == expected


@pytest.mark.parametrize("case", UPDATE_CASES)
def test_update_scale_reference_matches_torch(case):
    torch = pytest.importorskip("torch")
    scale, tracker, found_inf, growth_factor, backoff_factor, interval = case
    theirs = [torch.tensor(scale, dtype=torch.float32), torch.tensor(tracker, dtype=torch.int32),
              torch.tensor(found_inf, dtype=torch.float32)]
    torch._amp_update_scale_(*theirs, growth_factor, backoff_factor, interval)
    ours = [np.array(scale, np.float32), np.array(tracker, np.int32), np.array(found_inf, np.float32)]
    grad_scaler.reference_update_scale_(*ours, growth_factor, backoff_factor, interval)
    assert (float(ours[0]), int(ours[1])) == (theirs[0].item(), theirs[1].item())


def test_update_scale_reference_is_pytorchs_rule():
    def update(scale, tracker, found_inf, growth_factor=2.0, backoff_factor=0.5, interval=3):
        arrays = [np.array(scale, np.float32), np.array(tracker, np.int32), np.array(found_inf, np.float32)]
        grad_scaler.reference_update_scale_(*arrays, growth_factor, backoff_factor, interval)
        return float(arrays[0]), int(arrays[1])
    assert update(8.0, 0, 0.0) == (8.0, 1) and update(8.0, 2, 0.0) == (16.0, 0)
    assert update(8.0, 2, 1.0) == (4.0, 0) and update(8.0, 7, 0.0) == (8.0, 8)
    assert update(2.0 ** 127, 2, 0.0) == (2.0 ** 127, 0)
    assert update(3.0, 0, 0.0, growth_factor=1.1, interval=1) == (float(np.float32(3.0 * 1.1)), 0)


# ----------------------------------------------------------------------------- adamw.cu, the skippable step
@on_kernel_devices
@given(st.integers(1, 700), st.booleans(), st.sampled_from([0.0, 0.1]), st.integers(0, 2 ** 32 - 1))
def test_adamw_skippable(device, n, decoupled, weight_decay, seed):
    """Three steps, the second overflowed: it changes nothing (the count included), the others are
    adamw_update's at the count of steps taken, bit for bit."""
    rng = np.random.default_rng(seed)
    state = [(rng.standard_normal(n)).astype(np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32)]
    expected = [a.copy() for a in state]
    step = np.zeros((), np.float32)
    on_device = on(device, *state, step)
    options = dict(lr=1e-2, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=weight_decay, decoupled=decoupled)
    taken = 0
    for overflow in (False, True, False):
        grad = rng.standard_normal(n).astype(np.float32)
        before = back(*on_device)
        adamw.adamw_update_skippable(on_device[0], *on(device, grad), *on_device[1:], *on(device, np.float32(overflow)),
                                     device=device, **options)
        if overflow:
            for got, want in zip(back(*on_device), before):
                np.testing.assert_array_equal(got, want)
            continue
        taken += 1
        _plain_step(device, expected, grad, taken, options)
        for got, want in zip(back(*on_device[:3]), expected):
            np.testing.assert_array_equal(got, want)
        assert back(on_device[3])[0] == taken


def _plain_step(device, expected, grad, step, options):
    """adamw_update (host step count) on `device`, into the host arrays `expected`."""
    arrays = on(device, *expected)
    adamw.adamw_update(arrays[0], *on(device, grad), *arrays[1:], step=step, device=device, **options)
    for mine, result in zip(expected, back(*arrays)):
        mine[...] = result


@pytest.mark.parametrize("overflow", [False, True])
def test_adamw_skippable_reference(overflow):
    """The references in the kernels' convention: count, then update at that count, or neither."""
    p, g = np.float32([1.0, -2.0]), np.float32([0.5, 0.25])
    m, v, step = np.zeros(2, np.float32), np.zeros(2, np.float32), np.full((), 2.0, np.float32)
    found_inf = np.float32(overflow)
    adamw.reference_count_step(step, found_inf)
    adamw.reference_update_skippable(p, g, m, v, step, found_inf, 0.1, 0.9, 0.99, 1e-8, 1.0, 0.0)
    if overflow:
        assert step == 2.0 and p.tolist() == [1.0, -2.0] and not m.any() and not v.any()
        return
    want_p = np.float32([1.0, -2.0])
    s = adamw.step_scalars(0.1, 0.9, 0.99, 0.0, 3, True)
    adamw.reference_update(want_p, g, np.zeros(2, np.float32), np.zeros(2, np.float32), s["step_size"], 0.9, 0.99,
                           s["bias_correction2_sqrt"], 1e-8, 1.0, 0.0)
    assert step == 3.0
    np.testing.assert_array_equal(p, want_p)


def test_adamw_skippable_rejects_a_step_that_is_not_a_float32_scalar():
    a = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="float32 0-d"):
        adamw.adamw_update_skippable(a, a, a, a, np.zeros((), np.int32), np.float32(0), 1e-3, 0.9, 0.99, 1e-8, 0.0,
                                     device="emu")
