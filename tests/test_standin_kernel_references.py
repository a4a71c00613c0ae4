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
from tinygrad_gpu.kernels import index_check
from tinygrad_gpu.kernels import causal_attention, dropout, runtime
from tinygrad_gpu.kernels import multi_tensor
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


def drive_causal_attention(rng, dtype=np.float32):
    """q, k, v as strided views of one (B, T, 3, H, E) projection (T = COLS, not a multiple of the tile),
    with and without dropout, the gradients written contiguous and through strides (each into a buffer of
    its own laid out as (B, T, H, E): the adapter test copies each argument, so gradients sharing one buffer
    would not compare); and contiguous inputs of another shape."""
    B, H, E = 2, 2, 8
    qkv = normal(rng, (B, COLS, 3, H, E), dtype=dtype).transpose(2, 0, 3, 1, 4)
    for dropout in (None, (0.25, 12345678901234567, 2 ** 64 - 50)):       # the counter wraps around 2^64
        out, lse = causal_attention.forward(*qkv, 0.3, "emu", dropout)
        dout = normal(rng, out.shape, dtype=dtype)
        causal_attention.backward(*qkv, out, lse, dout, 0.3, "emu", dropout)
        grads = tuple(np.zeros((B, COLS, H, E), dtype).transpose(0, 2, 1, 3) for _ in range(3))
        causal_attention.backward(*qkv, out, lse, dout, 0.3, "emu", dropout, grads=grads)
    q, k, v = (normal(rng, (3, 5, 4), dtype=dtype) for _ in range(3))
    out, lse = causal_attention.forward(q, k, v, 0.5, "emu")
    causal_attention.backward(q, k, v, out, lse, normal(rng, out.shape, dtype=dtype), 0.5, "emu")


def drive_cross_entropy(rng, dtype=np.float32):
    for smoothing in (0.0, 0.1):
        logits = normal(rng, (ROWS + 2, COLS), 3.0, dtype)
        targets = rng.integers(0, COLS, ROWS + 2)
        targets[1] = -100                                              # ignored
        targets[3] = COLS + 2                                          # out of range: NaN loss, reported later
        losses, lse = cross_entropy.forward(logits, targets, -100, smoothing, "emu")
        cross_entropy.backward(logits, targets, lse, normal(rng, ROWS + 2), -100, smoothing, "emu")


DROPOUTS = ((0.2, 0, 0), (0.999, 12345678901234567, 2 ** 64 - 50), (0.0, 7, 3))   # the counter wraps around


def drive_dropout(rng, dtype=np.float32):
    for p, seed, offset in DROPOUTS:
        dropout.multiply(normal(rng, (ROWS, COLS), 3.0, dtype), p, seed, offset, "emu")


def drive_dropout_to(rng, dtype):
    """dropout_multiply_to_*: a float32 gradient in, the 16-bit branch's dtype out."""
    for p, seed, offset in DROPOUTS:
        dropout.multiply(normal(rng, (ROWS, COLS), 3.0), p, seed, offset, "emu", dtype=dtype)


def drive_dropout_add(rng, dtype=np.float32):
    for p, seed, offset in DROPOUTS:
        dropout.add(normal(rng, (ROWS, COLS), 3.0), normal(rng, (ROWS, COLS), 3.0, dtype), p, seed, offset, "emu")


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


def drive_index_check(rng):
    for dtype, ignore in ((np.int64, None), (np.int32, -100), (np.int64, -100)):
        ids = rng.integers(-3, COLS + 3, (ROWS, COLS)).astype(dtype)
        ids[0, :4] = -100                                             # ignored where an ignore value is given
        for high in (COLS, COLS + 10):                                # some out of range, then none
            found = np.zeros((), np.uint32)
            index_check.index_check(ids if high == COLS else np.clip(ids, 0, None), high, ignore, found, "emu")


def drive_layernorm(rng, dtype=np.float32):
    for bias in (normal(rng, COLS, dtype=dtype), None):
        x = (normal(rng, (ROWS, COLS), 2.0) + np.float32(5)).astype(dtype)
        weight = normal(rng, COLS, dtype=dtype)
        _, mean, rstd = layernorm.forward(x, weight, bias, 1e-5, "emu")
        layernorm.backward(x, weight, mean, rstd, normal(rng, (ROWS, COLS), dtype=dtype), True, "emu",
                           need_bias=bias is not None,             # None: null pointers for bias and dbias
                           dx_add=None if bias is None else normal(rng, (ROWS, COLS), dtype=dtype))


def drive_layernorm_naive(rng, dtype=np.float32):
    """The ladder's first rung (one thread per row), with and without bias."""
    for bias in (normal(rng, COLS, dtype=dtype), None):
        x = (normal(rng, (ROWS, COLS), 2.0) + np.float32(5)).astype(dtype)
        layernorm.forward(x, normal(rng, COLS, dtype=dtype), bias, 1e-5, "emu", version="naive")


def drive_layernorm_fused(rng, dtype=np.float32):
    """The one-launch backward: groups of rows (the last one short), rows fewer than a group, a grown
    workspace holding a larger launch's sums past this launch's; with and without bias and dx_add."""
    for rows, bias, add in ((COLS + 40, True, True), (ROWS, False, False), (COLS, True, False)):
        x = (normal(rng, (rows, COLS), 2.0) + np.float32(5)).astype(dtype)
        weight = normal(rng, COLS, dtype=dtype)
        _, mean, rstd = layernorm.forward(x, weight, None, 1e-5, "emu")
        layernorm.backward(x, weight, mean, rstd, normal(rng, (rows, COLS), dtype=dtype), True, "emu", need_bias=bias,
                           dx_add=normal(rng, (rows, COLS), dtype=dtype) if add else None, fused=True)


def drive_layernorm_mixed(rng, dtype, fused):
    """float32 data, a 16-bit out and dout (autocast's layer norm): the forward's to_*, the backward's from_*."""
    for bias in (normal(rng, COLS), None):
        rows = COLS + 40 if fused else ROWS
        x = normal(rng, (rows, COLS), 2.0) + np.float32(5)
        weight = normal(rng, COLS)
        _, mean, rstd = layernorm.forward(x, weight, bias, 1e-5, "emu", out_dtype=dtype)
        layernorm.backward(x, weight, mean, rstd, normal(rng, (rows, COLS), dtype=dtype), True, "emu",
                           need_bias=bias is not None, dx_add=None if bias is None else normal(rng, (rows, COLS)),
                           fused=fused)


def drive_philox(rng):
    for seed, offset in ((0, 0), (12345678901234567, 2 ** 64 - 50)):  # the counter wraps around 2^64
        philox.uniform("emu", ROWS * COLS, seed, offset)
        philox.normal("emu", ROWS * COLS, seed, offset)


def drive_multi_tensor_norm(rng):
    shapes = [(COLS,), (0,), (ROWS, COLS), (), (5000,)] * 14            # 70 tensors: two tables
    for value in (None, np.nan):
        grads = [np.asarray(normal(rng, s)) for s in shapes]                # the 0-d one: an array
        if value is not None:
            grads[69][1] = value                                        # in the second table
        norm, coefficient = multi_tensor.norm_and_clip_coefficient(grads, 1.0, "emu")
        multi_tensor.scale_(grads, coefficient, "emu")


def drive_multi_tensor_adamw(rng):
    shapes = [(ROWS, COLS), (0,), (), (COLS,)] * 17                     # 68 tensors: two tables
    for decoupled, found_inf in ((True, None), (False, None), (True, 0.0), (True, 1.0), (False, 0.0)):
        params, grads, m = ([np.asarray(normal(rng, s)) for s in shapes] for _ in range(3))     # 0-d: arrays
        v = [np.asarray(np.abs(normal(rng, s, 1e-2))) for s in shapes]
        settings = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1, device="emu", decoupled=decoupled)
        if found_inf is None:
            multi_tensor.adamw_update(params, grads, m, v, step=7, **settings)
        else:
            steps = [np.full((), 3.0 + k % 2, np.float32) for k in range(len(shapes))]
            multi_tensor.adamw_update_skippable(params, grads, m, v, steps, np.full((), found_inf, np.float32),
                                                **settings)


def drive_multi_tensor_cast(rng, dtype):
    shapes = [(ROWS, COLS), (0,), (), (COLS,), (5000,)] * 14                # 70 tensors: two tables
    halves = multi_tensor.cast([np.asarray(normal(rng, s, 3.0)) for s in shapes], dtype, "emu")
    multi_tensor.cast(halves, np.float32, "emu")


# The multi-tensor kernels get their tensors as addresses in a table: test_table_adapter_matches_the_emulated_kernel.
CAST_KERNELS = {multi_tensor.cast_kernel(a, b): functools.partial(drive_multi_tensor_cast, dtype=half)
                for half in dtypes.HALF for a, b in ((np.float32, half), (half, np.float32))}
TABLE_KERNELS = {"multi_tensor_norm_clip", "multi_tensor_scale", "multi_tensor_adamw_update",
                 "multi_tensor_adamw_count_step", "multi_tensor_adamw_update_skippable", *CAST_KERNELS}

DRIVERS = {
    "adamw_update": drive_adamw,
    "adamw_count_step": drive_adamw_skippable, "adamw_update_skippable": drive_adamw_skippable,
    "amp_non_finite_check_and_unscale": drive_grad_scaler, "amp_update_scale": drive_grad_scaler,
    "causal_softmax_forward": drive_causal_softmax, "causal_softmax_backward": drive_causal_softmax,
    "causal_attention_forward": drive_causal_attention, "causal_attention_backward_dq": drive_causal_attention,
    "causal_attention_backward_dkdv": drive_causal_attention,
    "cross_entropy_forward": drive_cross_entropy, "cross_entropy_backward": drive_cross_entropy,
    "dropout_multiply": drive_dropout, "dropout_add": drive_dropout_add,
    "embedding_backward": drive_embedding_backward,
    "index_check": drive_index_check, "index_check_i32": drive_index_check,
    "gelu_forward": drive_gelu, "gelu_backward": drive_gelu,
    "layernorm_forward": drive_layernorm, "layernorm_backward": drive_layernorm,
    "layernorm_forward_naive": drive_layernorm_naive,
    "layernorm_backward_params": drive_layernorm, "layernorm_backward_fused": drive_layernorm_fused,
    "philox_uniform": drive_philox, "philox_normal": drive_philox,
}
DRIVERS.update({runtime.entry_point(name, dtype): functools.partial(DRIVERS[name], dtype=dtype)
                for name in ("causal_attention_forward", "causal_attention_backward_dq", "causal_attention_backward_dkdv",
                             "causal_softmax_forward", "causal_softmax_backward", "cross_entropy_forward",
                             "cross_entropy_backward", "gelu_forward", "gelu_backward", "layernorm_forward",
                             "layernorm_forward_naive",
                             "layernorm_backward", "layernorm_backward_params", "layernorm_backward_fused")
                for dtype in dtypes.HALF})
DRIVERS.update({runtime.entry_point(name, dtype): functools.partial(drive, dtype=dtype)
                for name, drive in (("dropout_multiply", drive_dropout), ("dropout_multiply_to", drive_dropout_to),
                                    ("dropout_add", drive_dropout_add))
                for dtype in dtypes.HALF})
DRIVERS.update({f"layernorm_{kernel}{suffix}": functools.partial(drive_layernorm_mixed, dtype=dtype,
                                                                  fused=kernel == "backward_fused_from")
                for kernel in ("forward_to", "backward_from", "backward_params_from", "backward_fused_from")
                for dtype, suffix in ((np.float16, "_f16"), (dtypes.bfloat16, "_bf16"))})
DRIVERS.update({"multi_tensor_norm_clip": drive_multi_tensor_norm, "multi_tensor_scale": drive_multi_tensor_norm,
                **{name: drive_multi_tensor_adamw for name in TABLE_KERNELS if "adamw" in name}, **CAST_KERNELS})
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


@pytest.mark.parametrize("kernel", sorted(set(kernel_references.BY_KERNEL) - TABLE_KERNELS))
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


def table_memory(name, args) -> list:
    """What a multi-tensor launch may touch: its array arguments and the arrays its table names (lists 1-3 of a
    norm's or a scale's table are empty: their addresses are 0)."""
    memory = [a for a in args if isinstance(a, np.ndarray)]
    for table in (a for a in args if isinstance(a, np.void)):
        count = int(table["count"])
        for j, dtype in enumerate(kernel_references.table_dtypes(name)):
            if table["list"][j, :count].any():
                memory += kernel_references.table_arrays(table, j, zero_d=j == multi_tensor.STEP_LIST, dtype=dtype)
    return memory


TABLE_TOLERANCE = {"multi_tensor_norm_clip": TOLERANCE["default"], "multi_tensor_scale": dict(rtol=0, atol=0),
                   "multi_tensor_adamw_update": TOLERANCE["adamw_update"],
                   "multi_tensor_adamw_count_step": dict(rtol=0, atol=0),
                   "multi_tensor_adamw_update_skippable": TOLERANCE["adamw_update_skippable"],
                   **{name: dict(rtol=0, atol=0) for name in CAST_KERNELS}}


@pytest.mark.parametrize("kernel", sorted(TABLE_KERNELS))
def test_table_adapter_matches_the_emulated_kernel(kernel, monkeypatch):
    """A table holds addresses, so copies of the arguments do not copy the tensors: each launch is checked as
    it happens. The memory it may touch is saved, the kernel runs, its results are saved and the memory put
    back as it was; the adapter runs on it and must leave it as the kernel did; the kernel's results stay."""
    checked, real_launch = [], runtime.launch

    def checking(device, filename, name, grid, block, args, shared_mem=0):
        if name != kernel:
            return real_launch(device, filename, name, grid, block, args, shared_mem)
        memory = table_memory(name, args)
        before = [a.copy() for a in memory]
        real_launch(device, filename, name, grid, block, args, shared_mem)
        after = [a.copy() for a in memory]
        for a, b in zip(memory, before):
            a[...] = b
        kernel_references.BY_KERNEL[name](tuple(grid), tuple(block), tuple(args))
        for i, (got, want) in enumerate(zip(memory, after)):
            np.testing.assert_allclose(wide(got), wide(want), err_msg=f"{name}: array {i}", **TABLE_TOLERANCE[name])
            got[...] = want
        checked.append(len(memory))

    monkeypatch.setattr(runtime, "launch", checking)
    DRIVERS[kernel](np.random.default_rng(SEED))
    assert len(checked) >= 2 and min(checked) > 0, f"the driver launched {len(checked)} {kernel}"
