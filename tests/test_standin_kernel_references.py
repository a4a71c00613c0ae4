"""The stand-in's reference adapters (cupy_standin/kernel_references.py) against the emulated kernels.

For each kernel: its launcher runs on ``emu`` with small random inputs (rows of 37, not a multiple
of a warp), and every launch is recorded, its arguments before and after; the adapter then runs on
copies of the arguments from before, and must leave every array as the kernel left it.  Plain
``emu``: the stand-in is not involved.  A kernel's float16 and bfloat16 entry points are driven
by the same launchers with 16-bit inputs.
"""
import functools
import os
import re

import numpy as np
import pytest

from tinygrad_gpu import dtypes
from tinygrad_gpu.kernels import (adamw, causal_softmax, cross_entropy, embedding_backward, gelu, grad_scaler,
                                  layernorm, philox)
from tinygrad_gpu.kernels import runtime
from tinygrad_gpu.testing.cupy_standin import kernel_references

KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(')
ROWS, COLS = 3, 37
SEED = int(os.environ.get("TG_TEST_SEED", "0"))   # to try more inputs locally


def kernels_in_sources() -> set:
    return {name for f in runtime.kernel_files() for name in KERNEL.findall((runtime.KERNEL_DIR / f).read_text())}


def normal(rng, shape, scale=1.0, dtype=np.float32):
    return (scale * rng.standard_normal(shape)).astype(np.float32).astype(dtype)


# ----------------------------------------------------------------------------- drivers: the public launchers on emu
def drive_adamw(rng):
    for step, decoupled in ((1, True), (7, False)):
        param, grad = normal(rng, (ROWS, COLS)), normal(rng, (ROWS, COLS))
        if step == 1:                                                  # the first step: v = (1 - beta2) g^2
            m, v = np.zeros_like(param), np.zeros_like(param)
        else:
            m, v = normal(rng, (ROWS, COLS)), np.abs(normal(rng, (ROWS, COLS), 1e-2))
        adamw.adamw_update(param, grad, m, v, lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1,
                           step=step, device="emu", decoupled=decoupled)


def drive_adamw_skippable(rng):
    for found_inf, decoupled in ((0.0, True), (1.0, True), (0.0, False)):    # a step, a skipped one, Adam's
        param, grad = normal(rng, (ROWS, COLS)), normal(rng, (ROWS, COLS))
        m, v = normal(rng, (ROWS, COLS)), np.abs(normal(rng, (ROWS, COLS), 1e-2))
        step, flag = np.full((), 6.0, np.float32), np.full((), found_inf, np.float32)
        adamw.adamw_update_skippable(param, grad, m, v, step, flag, lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8,
                                     weight_decay=0.1, device="emu", decoupled=decoupled)


def drive_causal_softmax(rng, dtype=np.float32):
    for shape in ((2, 5, COLS), (ROWS, COLS, COLS), (2, COLS, 5)):      # L < S, L = S, L > S
        L, S = shape[-2:]
        probs = causal_softmax.forward(normal(rng, shape, 3.0, dtype), 0.3, "emu")
        causal_softmax.backward(probs, normal(rng, shape, dtype=dtype), 0.3, "emu")
        # Probabilities where the mask is too: the kernel must not read them, nor the adapter use them.
        causal_softmax.backward(np.abs(normal(rng, shape, dtype=dtype)), normal(rng, shape, dtype=dtype), 0.3, "emu")


def drive_cross_entropy(rng, dtype=np.float32):
    for smoothing in (0.0, 0.1):
        logits = normal(rng, (ROWS + 2, COLS), 3.0, dtype)
        targets = rng.integers(0, COLS, ROWS + 2)
        targets[1] = -100                                              # ignored
        targets[3] = COLS + 2                                          # out of range: NaN loss, reported later
        losses, lse = cross_entropy.forward(logits, targets, -100, smoothing, "emu")
        cross_entropy.backward(logits, targets, lse, normal(rng, ROWS + 2), -100, smoothing, "emu")


def drive_embedding_backward(rng):
    ids = np.array([3, 0, 3, 10, -1, 11, 3], np.int64)                 # repeats, and two ids out of range
    embedding_backward.embedding_backward(ids, normal(rng, (len(ids), COLS)), 11, "emu")


def drive_gelu(rng, dtype=np.float32):
    x = normal(rng, (ROWS, COLS), 3.0, dtype)
    gelu.forward(x, "emu")
    gelu.backward(x, normal(rng, (ROWS, COLS), dtype=dtype), "emu")


def drive_grad_scaler(rng):
    overflowed = normal(rng, (ROWS, COLS), 1e3)
    overflowed[1, 5], overflowed[2, COLS - 1] = np.inf, np.nan
    for grad in (overflowed, normal(rng, (ROWS, COLS))):
        found_inf = np.zeros((), np.float32)
        grad_scaler.non_finite_check_and_unscale_(grad, found_inf, np.full((), 3.0, np.float32), "emu")
        for tracker in (0, 1):                                         # counts, or grows (growth_interval 2)
            grad_scaler.update_scale_(np.full((), 1024.0, np.float32), np.full((), tracker, np.int32), found_inf,
                                      2.0, 0.5, 2, "emu")


def drive_layernorm(rng, dtype=np.float32):
    for bias in (normal(rng, COLS, dtype=dtype), None):
        x = (normal(rng, (ROWS, COLS), 2.0) + np.float32(5)).astype(dtype)
        weight = normal(rng, COLS, dtype=dtype)
        _, mean, rstd = layernorm.forward(x, weight, bias, 1e-5, "emu")
        layernorm.backward(x, weight, mean, rstd, normal(rng, (ROWS, COLS), dtype=dtype), True, "emu")


def drive_philox(rng):
    for seed, offset in ((0, 0), (12345678901234567, 2 ** 64 - 50)):  # the counter wraps around 2^64
        philox.uniform("emu", ROWS * COLS, seed, offset)
        philox.normal("emu", ROWS * COLS, seed, offset)


DRIVERS = {
    "adamw_update": drive_adamw,
    "adamw_count_step": drive_adamw_skippable, "adamw_update_skippable": drive_adamw_skippable,
    "amp_non_finite_check_and_unscale": drive_grad_scaler, "amp_update_scale": drive_grad_scaler,
    "causal_softmax_forward": drive_causal_softmax, "causal_softmax_backward": drive_causal_softmax,
    "cross_entropy_forward": drive_cross_entropy, "cross_entropy_backward": drive_cross_entropy,
    "embedding_backward": drive_embedding_backward,
    "gelu_forward": drive_gelu, "gelu_backward": drive_gelu,
    "layernorm_forward": drive_layernorm, "layernorm_backward": drive_layernorm,
    "layernorm_backward_params": drive_layernorm,
    "philox_uniform": drive_philox, "philox_normal": drive_philox,
}
DRIVERS.update({runtime.entry_point(name, dtype): functools.partial(DRIVERS[name], dtype=dtype)
                for name in ("causal_softmax_forward", "causal_softmax_backward", "cross_entropy_forward",
                             "cross_entropy_backward", "gelu_forward", "gelu_backward", "layernorm_forward",
                             "layernorm_backward", "layernorm_backward_params")
                for dtype in dtypes.HALF})
# float32 rounding and different summation orders. gelu's derivative cancels twice for x of a few units
# (0.5 (1 + t) and 1 - t^2 with t = tanh(u) near -1), so one ulp of tanhf shows as ~1e-7 |x|^3 there.
# adamw's arithmetic is the kernel's, step for step: relative only, as its moments are small numbers.
TOLERANCE = {"default": dict(rtol=1e-5, atol=1e-6), "gelu_backward": dict(rtol=1e-5, atol=2e-5),
             "adamw_update": dict(rtol=1e-6, atol=0), "adamw_update_skippable": dict(rtol=1e-6, atol=0),
             "amp_non_finite_check_and_unscale": dict(rtol=0, atol=0)}
# A 16-bit output is rounded once from float32 results that differ by the noise above; where they fall either
# side of a rounding boundary, it differs by one step of its grid: eps |value| (2**-10, 2**-7) at most.
HALF_STEP = {dtypes.float16: 2.0**-10, dtypes.bfloat16: 2.0**-7}


def wide(a):
    """An array to compare in float64 (NumPy's comparisons do not take bfloat16)."""
    return a.astype(np.float64) if a.dtype.kind in "fV" else a


def copied(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def test_every_kernel_has_an_adapter_and_a_driver():
    names = kernels_in_sources()
    assert "layernorm_backward_params" in names and len(names) >= 13
    assert set(kernel_references.BY_KERNEL) == names
    assert set(DRIVERS) == names


@pytest.mark.parametrize("kernel", sorted(kernel_references.BY_KERNEL))
def test_adapter_matches_the_emulated_kernel(kernel, monkeypatch):
    launches, real_launch = [], runtime.launch

    def recording(device, filename, name, grid, block, args, shared_mem=0):
        before = copied(args)
        real_launch(device, filename, name, grid, block, args, shared_mem)
        launches.append((name, grid, block, before, copied(args)))

    monkeypatch.setattr(runtime, "launch", recording)
    DRIVERS[kernel](np.random.default_rng(SEED))
    mine = [launch for launch in launches if launch[0] == kernel]
    assert mine, f"the driver launched no {kernel}"
    tolerance = TOLERANCE.get(re.sub(r"_b?f16$", "", kernel), TOLERANCE["default"])     # a 16-bit one: its float32's
    for name, grid, block, before, after in mine:
        args = copied(before)
        kernel_references.BY_KERNEL[name](tuple(grid), tuple(block), tuple(args))
        for i, (got, want) in enumerate(zip(args, after)):
            if isinstance(want, np.ndarray):
                assert got.shape == want.shape and got.dtype == want.dtype
                step = HALF_STEP.get(want.dtype, 0.0)
                np.testing.assert_allclose(wide(got), wide(want), err_msg=f"{name}: argument {i}",
                                           rtol=tolerance["rtol"] + step, atol=tolerance["atol"])
            else:
                assert got == want


def test_launch_names_a_missing_adapter():
    with pytest.raises(NotImplementedError, match="no reference adapter"):
        kernel_references.launch("no_such_kernel", (1,), (32,), [])
