"""Scans: cumsum, cumprod, cummax, cummin and logcumsumexp along one dimension.

Output position i along `dim` summarises input positions 0..i. cumsum and cumprod use the array
module's own; cummax, cummin and logcumsumexp run `inclusive_scan` below (log2(n) vectorised steps),
because CuPy has no maximum.accumulate or logaddexp.accumulate.

The backwards run the other way: an output at position i depends on every input at or before i, so
the gradient of the input at k collects from every output at or after k (`reverse_cumsum`).
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from .. import dtypes
from ..tensor import Function, Tensor, is_grad_enabled
from .gather import Gather
from . import movement, reduce
from .reduce import ValuesIndices, along_one_dim


def reverse_cumsum(x: Tensor, d: int) -> Tensor:
    """out_k = x_k + x_(k+1) + ... + x_(n-1) along dim d."""
    return x.flip(d).cumsum(d).flip(d)


def inclusive_scan(xp, arrays: tuple, combine) -> tuple:
    """Scan along the last axis in ceil(log2 n) steps (Hillis and Steele's parallel scan).

    After the step with stride s, position i holds the combination of positions i-2s+1..i: its own
    partial result combined with the one s places before it. `combine(earlier, later)` takes and
    returns tuples of arrays (a scan may carry several, like values and indices); it must be
    associative, and need not be commutative: `earlier` always covers the positions before `later`.
    """
    n = arrays[0].shape[-1]
    if n < 2:              # nothing to combine; copies, so that a result never shares the input's memory
        return tuple(a.copy() for a in arrays)
    stride = 1
    while stride < n:
        earlier = tuple(a[..., :-stride] for a in arrays)
        later = tuple(a[..., stride:] for a in arrays)
        arrays = tuple(xp.concatenate([a[..., :stride], c], axis=-1)
                       for a, c in zip(arrays, combine(earlier, later)))
        stride *= 2
    return arrays


def _as_int64_unless_floating(x: Tensor, dim, dtype, op: str) -> Tensor:
    """cumsum and cumprod: `dtype` converts the input first; bool and integers accumulate in int64. PyTorch's
    checks come in its order: the dim, then bool, then a dtype autograd cannot carry."""
    movement.normalize_dim(op, dim, max(x.ndim, 1))
    if dtype is not None:
        dtypes.reject_bool(op, dtype)
        reduce.check_differentiable_dtype(op, x, dtype)
        return x.to(dtype=dtype)
    return x if x.is_floating_point() else x.long()


# ----------------------------------------------------------------------------- cumsum
class CumSum(Function):
    def forward(ctx, x, dim):
        ctx.dim = dim
        return ctx.xp.cumsum(x.data, axis=dim, dtype=x.dtype)      # (NumPy would widen int32 to int64)

    def backward(ctx, grad):
        return reverse_cumsum(grad, ctx.dim)


def cumsum(x: Tensor, dim, dtype=None) -> Tensor:
    x = _as_int64_unless_floating(x, dim, dtype, "cumsum")
    return along_one_dim("cumsum", x, dim, lambda x, d: CumSum.apply(x, dim=d))


# ----------------------------------------------------------------------------- cumprod
class CumProd(Function):
    saves_output = True

    def forward(ctx, x, dim):
        ctx.save_for_backward(x)
        ctx.dim = dim
        return ctx.xp.cumprod(x.data, axis=dim, dtype=x.dtype)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        if is_grad_enabled():          # a graph of this backward is wanted (create_graph=True)
            return _cumprod_gradient_as_polynomial(x, grad, ctx.dim)
        # y_i = x_0 ... x_i, so dy_i/dx_k (k <= i) is that product without x_k. Along each row:
        # - before the row's first zero, x_k != 0 and the product is y_i / x_k, so
        #   grad_k = reverse_cumsum(g * y)_k / x_k (the terms from the zero on vanish with y);
        # - at the first zero z, the product is y'_i, the cumprod with x_z replaced by 1:
        #   grad_z = reverse_cumsum(g * y')_z;
        # - after it, every product still holds x_z = 0: grad_k = 0.
        # Every row gets all three, masked, so no host sync asks which rows hold zeros.
        d, y = ctx.dim, ctx.output
        is_zero = x == 0
        zeros_so_far = is_zero.long().cumsum(d)
        before, first_zero = zeros_so_far == 0, is_zero & (zeros_so_far == 1)
        before_part = reverse_cumsum(grad * y, d) / x.where(before, 1.0)
        skipping_the_zero = x.where(~first_zero, 1.0).cumprod(d)
        at_zero_part = reverse_cumsum(grad * skipping_the_zero, d)
        return before_part.where(before, at_zero_part.where(first_zero, 0.0))


def _cumprod_gradient_as_polynomial(x: Tensor, grad: Tensor, d: int) -> Tensor:
    """cumprod's gradient written so that its own derivatives are right at zeros too.

    The masked formula above is constant (0) after a row's first zero, but the true gradient there
    is a polynomial in x whose derivatives need not vanish. Here each row gets an n-by-n matrix
    P[k, i] = the cumprod up to i with x_k replaced by 1, and grad_k = sum over i >= k of g_i P[k, i]:
    products and sums only. O(n^2) memory per row, so it is used only when a graph is recorded
    (PyTorch makes the same trade).
    """
    x_row, g_row = x.movedim(d, -1), grad.movedim(d, -1)
    n = x_row.shape[-1]
    xp = devices.array_module(x.device)
    with devices.use(x.device):
        k, i = xp.arange(n)[:, None], xp.arange(n)[None, :]
        off_diagonal, from_k_on = Tensor._wrap(k != i, x.device), Tensor._wrap(i >= k, x.device)
    rows = x_row.unsqueeze(-2).expand(*x_row.shape[:-1], n, n)       # rows[..., k, i] = x_i
    without_x_k = rows.where(off_diagonal, 1.0).cumprod(-1)
    return (without_x_k * g_row.unsqueeze(-2)).where(from_k_on, 0.0).sum(-1).movedim(-1, d)


def cumprod(x: Tensor, dim, dtype=None) -> Tensor:
    x = _as_int64_unless_floating(x, dim, dtype, "cumprod")
    return along_one_dim("cumprod", x, dim, lambda x, d: CumProd.apply(x, dim=d))


# ----------------------------------------------------------------------------- cummax, cummin
def _extreme_so_far(xp, values, kind):
    """The combine step of cummax/cummin on (value, index) pairs, with PyTorch's choices: on ties the
    later index wins (>= for cummax, <= for cummin), and a NaN, once seen, wins over every number (a
    later NaN over an earlier one)."""
    better = xp.greater_equal if kind == "cummax" else xp.less_equal

    def combine(earlier, later):
        (value_before, index_before), (value, index) = earlier, later
        take_later = better(value, value_before)
        if dtypes.is_floating(values.dtype):
            take_later = xp.isnan(value) | (take_later & ~xp.isnan(value_before))
        return xp.where(take_later, value, value_before), xp.where(take_later, index, index_before)
    return combine


def cumulative_extreme(x: Tensor, dim, kind: str):
    """x.cummax(dim) / x.cummin(dim) -> (values, indices); the gradient goes to the chosen index."""
    def run(x, d):
        xp = devices.array_module(x.device)
        with devices.use(x.device):
            values = xp.moveaxis(x.data, d, -1)
            positions = xp.broadcast_to(xp.arange(values.shape[-1], dtype=np.int64), values.shape)
            _, indices = inclusive_scan(xp, (values, positions), _extreme_so_far(xp, values, kind))
            indices = Tensor._wrap(xp.moveaxis(indices, -1, d), x.device)
        return ValuesIndices(Gather.apply(x, indices, dim=d), indices)
    return along_one_dim(kind, x, dim, run)


# ----------------------------------------------------------------------------- logcumsumexp
class LogCumSumExp(Function):
    saves_output = True

    def forward(ctx, x, dim):
        ctx.save_for_backward(x)
        ctx.dim = dim
        xp = ctx.xp
        # log(exp(a) + exp(b)) pairwise: logaddexp shifts by the larger of the two, so no step overflows
        # and a small early value is not lost next to a large later one.
        (out,) = inclusive_scan(xp, (xp.moveaxis(x.data, dim, -1),), lambda a, b: (xp.logaddexp(a[0], b[0]),))
        return xp.moveaxis(out, -1, dim)

    def backward(ctx, grad):
        # dy_i/dx_k = exp(x_k - y_i) for k <= i, so grad_k = sum over i >= k of g_i exp(x_k - y_i).
        # Each term is at most |g_i| (y_i >= x_k), but exp(x_k) * sum(g_i exp(-y_i)) would overflow;
        # so sum in log space, the positive and the negative parts of g apart:
        # grad_k = exp(x_k + reverse_logcumsumexp(log g+ - y)_k) - (the same with g-).
        # Where a part is 0 its log is a very negative finite number instead of -inf, which would give
        # -inf - (-inf) = nan inside the scan: -sqrt(largest float), so that subtracting y cannot
        # overflow, and its exp is still 0.
        (x,) = ctx.saved_tensors
        d, y = ctx.dim, ctx.output
        very_negative = -float(np.sqrt(np.finfo(x.dtype).max))

        def from_part(part):
            log_part = part.where(part > 0, 1.0).log().where(part > 0, very_negative)
            return (x + (log_part - y).flip(d).logcumsumexp(d).flip(d)).exp()
        return from_part(grad) - from_part(-grad)


def logcumsumexp(x: Tensor, dim) -> Tensor:
    movement.normalize_dim("logcumsumexp", dim, max(x.ndim, 1))
    dtypes.reject_non_floating("logcumsumexp", x.dtype)
    return along_one_dim("logcumsumexp", x, dim, lambda x, d: LogCumSumExp.apply(x, dim=d))
