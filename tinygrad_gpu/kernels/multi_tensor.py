"""Multi-tensor kernels, one launch for a whole list of tensors: multi_tensor.cu, its NumPy references, its launchers.

clip_grad_norm_ (tinygrad_gpu.optim.clip) calls them for float32 tensors on one device, and Adam/AdamW
(tinygrad_gpu.optim.adam) on one emu or cuda device; other dtypes and devices keep their per-tensor paths:

    norm, coefficient = norm_and_clip_coefficient(grads, max_norm=1.0, device=d)   # both 0-d float32, on d
    scale_(grads, coefficient, device=d)                                            # every grad *= coefficient
    adamw_update(params, grads, exp_avgs, exp_avg_sqs, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                 weight_decay=0.01, step=t, device=d)                               # adamw.adamw_update, for all
    adamw_update_skippable(params, grads, exp_avgs, exp_avg_sqs, steps, found_inf, lr=1e-3, ..., device=d)
    halves = cast(arrays, bfloat16, device=d)          # each array in another float dtype: views of one new array

Lists of arrays, the k-th of each list belonging to one tensor; every array float32 and C-contiguous (a gradient
of another dtype or layout is copied to one first), updated in place. Each call launches once per table of up to
MAX_TENSORS tensors (the table goes with the launch, by value: multi_tensor.cu says why), plus one launch to
count the steps of the skippable update. On the cpu the launchers run the references, but the sum of squares runs
compiled_cpu.py's where numba runs the cpu's kernels (kernels/cpu_paths.py).
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from .. import dtypes
from . import adamw, cpu_paths, runtime

FILE = "multi_tensor.cu"
MAX_TENSORS = 64           # multi_tensor.cu's MT_MAX_TENSORS
LISTS = 5                  # and MT_LISTS: param (or the one list), grad, exp_avg, exp_avg_sq, step
STEP_LIST = 4              # and MT_STEP: the step counts' list, 0-d arrays
CHUNK = 4096               # and MT_CHUNK (only the grid depends on it here: any grid covers every chunk)
BLOCK = 256
NORM_BLOCKS = 512          # the norm's grid at most: one partial sum per block in the workspace
MAX_BLOCKS = 4096
# multi_tensor.cu's struct TensorTable, field for field; align=True lays it out as a C compiler does.
TABLE = np.dtype({"names": ["start", "list", "count"],
                  "formats": [("i8", (MAX_TENSORS + 1,)), ("u8", (LISTS, MAX_TENSORS)), "i4"]}, align=True)
assert TABLE.itemsize == 3088, "multi_tensor.cu's static_assert says 3088 bytes"


# ----------------------------------------------------------------------------- references
def reference_sum_of_squares(tensors):
    """The sum of g * g over every element of every tensor, in float32 (a 0-d array): an overflowing square or
    sum gives inf, an inf inf, a nan nan. (The kernel adds in another order: equal to float32 rounding.)"""
    xp = runtime.array_module_of(tensors[0]) if tensors else np
    total = xp.zeros((), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for t in tensors:
            total = total + (t * t).sum(dtype=np.float32)
    return total


def reference_clip_coefficient(norm, max_norm: float):
    """min(max_norm / (norm + 1e-6), 1) in float32, as clip_grad_norm_ computes it: nan for a nan norm, 0 for inf."""
    xp = runtime.array_module_of(norm)
    with np.errstate(invalid="ignore", divide="ignore"):
        return xp.minimum(np.float32(max_norm) / (norm + np.float32(1e-6)), np.float32(1))


def reference_norm_clip_(tensors, total, norm, coefficient, max_norm: float, last: bool) -> None:
    """multi_tensor_norm_clip on one table, the 0-d float32 arrays in place: total += the table's sum of squares;
    after the last table, norm = sqrt(total), coefficient = reference_clip_coefficient(norm) and total = 0."""
    total[...] = total + reference_sum_of_squares(tensors)
    if last:
        norm[...] = runtime.array_module_of(total).sqrt(total)
        coefficient[...] = reference_clip_coefficient(norm, max_norm)
        total[...] = 0


def reference_scale_(tensors, coefficient) -> None:
    """multi_tensor_scale: every tensor *= coefficient (a 0-d float32 array), in place; inf * 0 is nan."""
    with np.errstate(invalid="ignore", over="ignore"):
        for t in tensors:
            t *= coefficient


def reference_adamw_update(params, grads, exp_avgs, exp_avg_sqs, **scalars) -> None:
    """multi_tensor_adamw_update: adamw.reference_update of every tensor with the same scalars, in place."""
    for lists in zip(params, grads, exp_avgs, exp_avg_sqs):
        adamw.reference_update(*lists, **scalars)


def reference_adamw_count_step(steps, found_inf) -> None:
    """multi_tensor_adamw_count_step: adamw.reference_count_step of each 0-d step array."""
    for step in steps:
        adamw.reference_count_step(step, found_inf)


def reference_cast(arrays, dtype) -> list:
    """multi_tensor_cast_*: each array in `dtype` (rounded to nearest even into 16 bits; exact into float32)."""
    return [a.astype(dtype) for a in arrays]


def reference_adamw_update_skippable(params, grads, exp_avgs, exp_avg_sqs, steps, found_inf, **scalars) -> None:
    """multi_tensor_adamw_update_skippable: adamw.reference_update_skippable of every tensor at its own step."""
    for lists in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
        adamw.reference_update_skippable(*lists, found_inf, **scalars)


# ----------------------------------------------------------------------------- tables
def tables(*lists) -> list:
    """[(table, elements)]: the tensors of `lists` (list j's k-th array is tensor k's j-th) as TensorTables of up
    to MAX_TENSORS tensors each (numpy.void scalars, what a launch takes for a struct), with their element counts.
    The tables hold bare addresses: the caller keeps the arrays alive until the launches are made."""
    out = []
    for first in range(0, len(lists[0]), MAX_TENSORS):
        part = range(first, min(len(lists[0]), first + MAX_TENSORS))
        table = np.zeros((), TABLE)
        table["start"][1:len(part) + 1] = np.cumsum([lists[0][k].size for k in part])
        table["count"] = len(part)
        for j, arrays in enumerate(lists):
            table["list"][j, :len(part)] = [runtime.address(arrays[k]) for k in part]
        out.append((table[()], int(table["start"][len(part)])))
    return out


def _grid(elements: int, most: int) -> tuple:
    return (max(1, min(most, -(-elements // CHUNK))),)


def _check(op: str, device: str, **lists) -> None:
    """One size per tensor across the lists, float32 and C-contiguous (the kernels write in place, in flat memory)."""
    names = list(lists)
    counts = {name: len(arrays) for name, arrays in lists.items()}
    if len(set(counts.values())) > 1:
        raise ValueError(f"{op}: the lists must be as long as each other, got {counts}")
    for k, arrays in enumerate(zip(*lists.values())):
        shapes = [a.shape for a in arrays]
        if len(set(shapes)) > 1:
            raise ValueError(f"{op}: tensor {k} has {', '.join(f'{n} {s}' for n, s in zip(names, shapes))}: "
                             "they must have one shape")
        for name, a in zip(names, arrays):
            if isinstance(a, np.generic):
                raise TypeError(f"{op}: {name}[{k}] is a NumPy scalar ({a!r}); the kernel needs an array to address")
            if a.dtype != np.float32 or not a.flags.c_contiguous:
                raise ValueError(f"{op}: {name}[{k}] must be a C-contiguous float32 array (the kernel updates flat "
                                 f"float32 memory on {device}), got {a.dtype} of shape {a.shape}, "
                                 f"{'C-contiguous' if a.flags.c_contiguous else 'not C-contiguous'}")


def _float32_grads(grads, device: str) -> list:
    """The gradients as C-contiguous float32 arrays of their shapes: themselves when they are, else copies
    (reshaped: ascontiguousarray makes a 0-d array 1-d)."""
    xp = devices.array_module(device)
    return [g if g.dtype == np.float32 and g.flags.c_contiguous else
            runtime.contiguous(xp, g, np.float32).reshape(g.shape) for g in grads]


# ----------------------------------------------------------------------------- the norm's workspace
class _Workspace:
    """What multi_tensor_norm_clip keeps between its launches, all 0 between calls: one partial sum per block,
    the ticket counter, the running total; and the coefficient it leaves for scale_. Made once per device."""

    def __init__(self, device: str):
        xp = devices.array_module(device)
        with devices.use(device):
            self.partials = xp.zeros(NORM_BLOCKS, np.float32)
            self.ticket = xp.zeros((), np.uint32)
            self.total = xp.zeros((), np.float32)
            self.coefficient = xp.zeros((), np.float32)


def _workspace(device: str) -> _Workspace:
    return runtime.kept_per_device(_Workspace, device)


# ----------------------------------------------------------------------------- launchers
def norm_and_clip_coefficient(grads, max_norm: float, device: str):
    """(norm, coefficient): the 2-norm of all of `grads` together, a new 0-d float32 array, and
    min(max_norm / (norm + 1e-6), 1), a 0-d float32 array of this device's workspace that the next call
    overwrites. Both stay on `device`: the host reads neither. grads: float32, C-contiguous."""
    _check("norm_and_clip_coefficient", device, grads=grads)
    xp = devices.array_module(device)
    if device == "cpu":
        compiled = cpu_paths.compiled_kernels(device, *grads[:1])
        norm = xp.sqrt(compiled.sum_of_squares(grads) if compiled else reference_sum_of_squares(grads))
        return norm, reference_clip_coefficient(norm, max_norm)
    work = _workspace(device)
    with devices.use(device):
        norm = xp.empty((), np.float32)
    parts = tables(grads) or [(np.zeros((), TABLE)[()], 0)]        # no tensors at all: a norm of 0
    for i, (table, elements) in enumerate(parts):
        runtime.launch(device, FILE, "multi_tensor_norm_clip", _grid(elements, NORM_BLOCKS), (BLOCK,),
                       [table, work.partials, work.ticket, work.total, norm, work.coefficient, np.float32(max_norm),
                        np.int32(i == len(parts) - 1)])
    return norm, work.coefficient


def scale_(tensors, coefficient, device: str) -> None:
    """Multiply every tensor by coefficient (a 0-d float32 array on `device`), in place."""
    _check("scale_", device, tensors=tensors)
    if device == "cpu":
        if coefficient != 1:        # times 1 changes no value: clip's coefficient when the norm is under its bound
            reference_scale_(tensors, coefficient)
        return
    for table, elements in tables(tensors):
        if elements:
            runtime.launch(device, FILE, "multi_tensor_scale", _grid(elements, MAX_BLOCKS), (BLOCK,),
                           [table, coefficient])


def adamw_update(params, grads, exp_avgs, exp_avg_sqs, lr: float, beta1: float, beta2: float, eps: float,
                 weight_decay: float, step: int, device: str, decoupled: bool = True) -> None:
    """adamw.adamw_update of every parameter, all at step `step`: params, exp_avgs and exp_avg_sqs in place."""
    grads = _float32_grads(grads, device)
    _check("multi_tensor.adamw_update", device, params=params, grads=grads, exp_avgs=exp_avgs,
           exp_avg_sqs=exp_avg_sqs)
    s = adamw.step_scalars(lr, beta1, beta2, weight_decay, step, decoupled)
    if device == "cpu":
        for lists in zip(params, grads, exp_avgs, exp_avg_sqs):
            adamw.adamw_update(*lists, lr, beta1, beta2, eps, weight_decay, step, device, decoupled)
        return
    for table, elements in tables(params, grads, exp_avgs, exp_avg_sqs):
        if elements:
            runtime.launch(device, FILE, "multi_tensor_adamw_update", _grid(elements, MAX_BLOCKS), (BLOCK,),
                           [table, np.float32(s["step_size"]), np.float32(1 - beta1), np.float32(beta2),
                            np.float32(1 - beta2), np.float32(s["bias_correction2_sqrt"]), np.float32(eps),
                            np.float32(s["decay"]), np.float32(s["l2"])])


def adamw_update_skippable(params, grads, exp_avgs, exp_avg_sqs, steps, found_inf, lr: float, beta1: float,
                           beta2: float, eps: float, weight_decay: float, device: str, decoupled: bool = True) -> None:
    """adamw.adamw_update_skippable of every parameter: unless found_inf (float32, 0-d) is set, count each one's
    step (steps: float32 0-d arrays) and update it at that step; else change nothing. Decided on the device:
    two launches per table (the count, then the update), and the host reads nothing."""
    grads = _float32_grads(grads, device)
    _check("multi_tensor.adamw_update_skippable", device, params=params, grads=grads, exp_avgs=exp_avgs,
           exp_avg_sqs=exp_avg_sqs)
    if len(steps) != len(params) or any(s.dtype != np.float32 or s.shape != () for s in steps):
        raise ValueError(f"multi_tensor.adamw_update_skippable: steps must be {len(params)} float32 0-d arrays, got "
                         f"{[(str(s.dtype), s.shape) for s in steps]}")
    if device == "cpu":
        for lists in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
            adamw.adamw_update_skippable(*lists, found_inf, lr, beta1, beta2, eps, weight_decay, device, decoupled)
        return
    w = adamw.weight_decay_scalars(lr, weight_decay, decoupled)
    for table, elements in tables(params, grads, exp_avgs, exp_avg_sqs, steps):
        runtime.launch(device, FILE, "multi_tensor_adamw_count_step", (1,), (MAX_TENSORS,), [table, found_inf])
        if elements:
            runtime.launch(device, FILE, "multi_tensor_adamw_update_skippable", _grid(elements, MAX_BLOCKS),
                           (BLOCK,), [table, found_inf, np.float64(lr), np.float64(beta1), np.float64(beta2),
                                      np.float32(eps), np.float32(w["decay"]), np.float32(w["l2"])])


def cast_kernel(source, dtype) -> str:
    """The multi_tensor_cast_* entry point from `source` to `dtype`: one of them float32, the other 16 bits."""
    source, dtype = np.dtype(source), np.dtype(dtype)
    if source == np.float32 and dtypes.is_half(dtype):
        return runtime.entry_point("multi_tensor_cast_to", dtype)
    if dtype == np.float32 and dtypes.is_half(source):
        return runtime.entry_point("multi_tensor_cast_from", source)
    raise ValueError(f"multi_tensor.cast: casts float32 to float16 or bfloat16 or back, not {source} to {dtype}")


def cast(arrays, dtype, device: str, into=None) -> list:
    """Each of `arrays` (one dtype, float32 or 16 bits) in `dtype` (16 bits or float32), in one launch per table:
    the results are C-contiguous views of one new flat array, laid end to end in the order given. into: for each
    array, a C-contiguous array of its shape and `dtype` to write instead, or None (the places the engine keeps
    for gradients)."""
    if not arrays:
        return []
    dtype, kernel = np.dtype(dtype), cast_kernel(arrays[0].dtype, dtype)
    if any(a.dtype != arrays[0].dtype for a in arrays):
        raise ValueError(f"multi_tensor.cast: the arrays must share one dtype, got {sorted({str(a.dtype) for a in arrays})}")
    into = [None] * len(arrays) if into is None else list(into)
    if device == "cpu":
        made = reference_cast(arrays, dtype)
        for out, value in zip(into, made):
            if out is not None:
                out[...] = value
        return [value if out is None else out for out, value in zip(into, made)]
    xp = devices.array_module(device)
    with devices.use(device):                  # on cuda:1, its arrays are made and sliced there
        arrays = [runtime.contiguous(xp, a).reshape(a.shape) for a in arrays]   # (a 0-d array stays 0-d)
        missing = sum(a.size for a, out in zip(arrays, into) if out is None)
        flat = xp.empty(missing, dtype) if any(out is None for out in into) else None
        outs, start = [], 0
        for a, out in zip(arrays, into):
            if out is None:
                out, start = flat[start:start + a.size].reshape(a.shape), start + a.size
            elif out.shape != a.shape or out.dtype != dtype or not out.flags.c_contiguous:
                raise ValueError(f"multi_tensor.cast: an array to write must be C-contiguous {dtype} of shape "
                                 f"{a.shape}, got {out.dtype} of shape {out.shape}")
            outs.append(out)
    for table, elements in tables(arrays, outs):
        if elements:
            runtime.launch(device, FILE, kernel, _grid(elements, MAX_BLOCKS), (BLOCK,), [table])
    return outs
