"""Products: matmul (PyTorch's rules: 1-D operands, broadcast batch dimensions), linear, dot and einsum."""
from __future__ import annotations

import math
import string

import numpy as np

from .. import dtypes, kernels
from ..amp import autocast_mode
from ..kernels.runtime import array_module_of
from ..tensor import Function, Tensor


def product(a, b, out=None):
    """a @ b of two arrays, into `out` if given (an array of the product's shape and dtype; on the cpu it may be
    a strided view: PackedCausalAttention's three gradients are views of one buffer). 16-bit floats multiply
    as cuBLAS multiplies them on a GPU: float32 sums, one rounding at the end (CuPy asks cuBLAS for exactly
    that). NumPy has no 16-bit BLAS (its bfloat16 product is a slow loop over elements
    that returns float32), so on the CPU the operands are widened to float32, multiplied by BLAS, and the
    product rounded back: the GPU's numbers, up to the order of the sums. Where Intel's MKL is installed (the
    `mkl` extra), it multiplies instead of NumPy's BLAS: kernels/mkl_products.py says why."""
    if isinstance(a, np.ndarray):
        if dtypes.is_half(a.dtype):
            made = product(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
            if out is None:
                return made
            out[...] = made
            return out
        made = kernels.mkl_products.multiply(a, b, out)     # None where MKL is not in use (its module says when)
        if made is not None:
            return made
    return a @ b if out is None else array_module_of(a).matmul(a, b, out=out)


# Matrices whose product is at most SMALL_PRODUCT multiply-adds, OpenBLAS multiplies with kernels that skip packing,
# but a row-major a @ b^T it sends down its packing path all the same (its rule for a transposed operand, read in
# column-major terms). At the recipe's attention, 48 products q @ k^T of (64, 32) by (32, 64) took 164 us that way;
# copying k^T into contiguous memory first took 28 us and the product then 95. For larger matrices both go through
# packing, and the transposing copy is all cost (13 ms at the GPU config's attention, against a 41 ms product).
# Where MKL multiplies (kernels/mkl_products.py), the recipe's step was 0.3 ms faster with the copy (three runs' mean).
SMALL_PRODUCT = 10 ** 6


def product_with_transposed(a, b):
    """a @ b^T for b (..., n, k): on the cpu, b^T copied contiguous first where the matrices are small (above)."""
    bt = b.swapaxes(-1, -2)
    small = a.shape[-2] * a.shape[-1] * b.shape[-2] <= SMALL_PRODUCT
    return product(a, np.ascontiguousarray(bt) if small and isinstance(b, np.ndarray) else bt)


def rows_of(a):
    """a (..., n) as the 2-D (rows, n) that one product takes: every leading dimension a row. Sizes, not -1:
    with n == 0, -1 cannot be worked out."""
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])


def sum_rows(a):
    """a.sum(0), in float32 for 16-bit floats (a bias's gradient adds up every row of a batch)."""
    return a.sum(0, dtype=dtypes.accumulator(a.dtype)).astype(a.dtype, copy=False)


class MatMul(Function):
    """a @ b for a, b with at least 2 dimensions; leading (batch) dimensions broadcast."""

    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        if b.ndim == 2 and a.ndim > 2:
            # x @ W with x (..., k): one (rows, k) @ (k, n) product instead of a loop of small ones
            # over the batch, which is how the array libraries treat a stacked operand (about 2x faster
            # for a GPT's layers on the CPU)
            return product(rows_of(a.data), b.data).reshape(*a.shape[:-1], b.shape[-1])
        return product(a.data, b.data)

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = grad @ b.transpose(-1, -2) if ctx.needs_input_grad[0] else None
        grad_b = None
        if ctx.needs_input_grad[1]:
            if b.ndim == 2 and a.ndim > 2:
                # A shared weight (x @ W with x batched): fold the batch into the rows, one GEMM,
                # instead of a batch of products that would then be summed.
                grad_b = rows_of(a).transpose(0, 1) @ rows_of(grad)
            else:
                grad_b = a.transpose(-1, -2) @ grad
        return grad_a, grad_b


def check_product_dtypes(op: str, *tensors) -> None:
    """Products take one dtype, as PyTorch's do (it promotes nothing there, and has no bool product)."""
    if len({t.dtype for t in tensors}) > 1:
        raise RuntimeError(f"{op}: expected the operands to have the same dtype, got "
                           f"{' and '.join(str(t.dtype) for t in tensors)}; convert one first, e.g. w.to(x.dtype)")
    dtypes.reject_bool(op, tensors[0].dtype)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"matmul: both operands need at least 1 dimension, got shapes {a.shape} and {b.shape}; "
                         "use * to multiply by a scalar")
    inner_a = a.shape[-1]
    inner_b = b.shape[-2] if b.ndim > 1 else b.shape[0]
    if inner_a != inner_b:
        raise RuntimeError(f"matmul: shapes {a.shape} and {b.shape} do not fit: the last dimension of the first "
                         f"({inner_a}) must equal the {'second-to-last' if b.ndim > 1 else 'only'} dimension "
                         f"of the second ({inner_b})")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise RuntimeError(f"matmul: the batch dimensions of shapes {a.shape} and {b.shape} cannot be broadcast "
                         "together") from None
    a, b = autocast_mode.low_precision(a, b)
    if max(a.ndim, b.ndim) > 2:       # PyTorch's batched product refuses a bool first operand before all else
        dtypes.reject_bool("matmul", a.dtype)
    check_product_dtypes("matmul", a, b)
    # A vector becomes a matrix for the product, and its added dimension is removed after.
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    out = MatMul.apply(a2, b2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    if a.ndim == 1:
        out = out.squeeze(-2) if b.ndim > 1 else out.squeeze(-1)
    return out


class Linear(Function):
    """x @ weight.T (+ bias): x (..., in), weight (out, in) as PyTorch stores it, bias (out,).

    One op instead of a transpose, a matmul and an add, in each direction: all rows of x (every
    leading dimension) go through a single 2-D product. Its backward works on the arrays; when a
    graph of the backward is wanted, the engine differentiates the composition instead.
    """

    backward_returns_spare = True

    @staticmethod
    def composition(x, weight, bias=None):
        out = x @ weight.transpose(0, 1)
        return out if bias is None else out + bias

    def forward(ctx, x, weight, bias=None):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        rows = rows_of(x.data)
        out = product(rows, weight.data.T)
        if bias is not None:
            out += bias.data
        return out.reshape(*x.shape[:-1], weight.shape[0])

    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        need_x, need_weight = ctx.needs_input_grad[:2]
        need_bias = ctx.has_bias and ctx.needs_input_grad[2]
        grad_rows = rows_of(grad.data)
        dweight = ctx.gradient_slot(1) if need_weight else None     # the weight's place in the step's gradients
        grads = (product(grad_rows, weight.data).reshape(x.shape) if need_x else None,              # dx = dy W
                 product(grad_rows.T, rows_of(x.data), out=dweight) if need_weight else None,  # dW = dy^T x
                 *((sum_rows(grad_rows) if need_bias else None,) if ctx.has_bias else ()))          # db = sum dy
        return tuple(None if g is None else Tensor._wrap(g, ctx.device) for g in grads)


def linear(x: Tensor, weight: Tensor, bias: Tensor = None) -> Tensor:
    """x @ weight.T + bias, with weight (out_features, in_features) as in PyTorch."""
    if weight.ndim != 2 or x.ndim == 0 or x.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"linear: input of shape {x.shape} does not fit weight of shape {weight.shape} "
                         f"(need input (..., {weight.shape[-1] if weight.ndim else '?'}) and weight (out, in))")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise RuntimeError(f"linear: bias of shape {bias.shape} does not fit weight of shape {weight.shape} "
                         f"(need ({weight.shape[0]},))")
    x, weight, bias = autocast_mode.low_precision(x, weight, bias)
    check_product_dtypes("linear", *(t for t in (x, weight, bias) if t is not None))
    return Linear.apply(x, weight) if bias is None else Linear.apply(x, weight, bias)


def dot(a: Tensor, b: Tensor) -> Tensor:
    """The dot product of two vectors of equal length: sum of a[i] * b[i] (a 0-d tensor)."""
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"dot: 1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors "
                           f"(shapes {a.shape} and {b.shape}); use matmul or einsum for more dimensions")
    if a.shape != b.shape:
        raise RuntimeError(f"dot: the vectors have different lengths, {a.shape[0]} and {b.shape[0]}")
    if a.dtype != b.dtype:
        raise RuntimeError(f"dot: expected both vectors to have the same dtype, got {a.dtype} and {b.dtype}")
    dtypes.reject_bool("dot", a.dtype)
    return matmul(a, b)


def outer(a: Tensor, b: Tensor) -> Tensor:
    """a_i b_j for two vectors: a (n,), b (m,) -> (n, m), in their promoted dtype."""
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"outer: Expected 1-D arguments, got shapes {a.shape} and {b.shape}")
    return a.unsqueeze(1) * b.unsqueeze(0)


# ----------------------------------------------------------------------------- einsum
class Einsum(Function):
    """einsum("ij,jk->ik", a, b) on operands whose letters are spelled out (no "..."), appear at
    most once in each operand, and each appear in at least two places: two operands, or an operand
    and the output. einsum() below brings every equation to that form.

    The output is a sum of products, linear in each operand, so the gradient of operand i is an
    einsum too: the output's gradient times all the other operands, summed into operand i's
    letters. ("ij,jk->ik": grad_a = einsum("ik,jk->ij", grad, b), grad @ b.T.) Every letter of
    operand i appears in the output or in another operand, so that einsum has all it needs;
    and since it calls this op, the backward can be differentiated again.
    """

    def forward(ctx, *operands, inputs, output):
        ctx.save_for_backward(*operands)
        ctx.input_letters, ctx.output_letters = inputs, output      # (ctx.output is the forward's result)
        dtype = operands[0].dtype
        data = [x.data.astype(dtypes.accumulator(dtype), copy=False) for x in operands]   # 16-bit: float32 sums
        return ctx.xp.einsum(",".join(inputs) + "->" + output, *data).astype(dtype, copy=False)

    def backward(ctx, grad):
        operands = ctx.saved_tensors
        grads = []
        for i, needed in enumerate(ctx.needs_input_grad):
            others = [j for j in range(len(operands)) if j != i]
            grads.append(Einsum.apply(grad, *(operands[j] for j in others),
                                      inputs=(ctx.output_letters, *(ctx.input_letters[j] for j in others)),
                                      output=ctx.input_letters[i]) if needed else None)
        return tuple(grads)


_LETTERS = string.ascii_uppercase + string.ascii_lowercase      # sorted as the implicit output sorts them


def _parse_equation(equation: str, operands) -> tuple:
    """The letters of each operand and of the output, with each "..." spelled out as letters of its
    own: the ellipsis dims, aligned from the right as in broadcasting. Without "->" the output is
    the ellipsis dims, then the letters that appear exactly once, in alphabetical order."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    for part in terms + [rhs]:
        bad = [c for c in part.replace("...", "", 1) if c not in _LETTERS]
        if bad:
            raise RuntimeError(f"einsum: invalid subscript {bad[0]!r} in equation {equation!r}: use letters a-z "
                               "and A-Z, at most one '...' per operand, ',' between operands and one '->'")
    if len(terms) != len(operands):
        raise RuntimeError(f"einsum: the equation {equation!r} has {len(terms)} operand(s), "
                           f"but {len(operands)} tensor(s) were given")
    named = [len(term.replace("...", "")) for term in terms]
    for term, n, x in zip(terms, named, operands):
        fits = x.ndim >= n if "..." in term else x.ndim == n
        if not fits:
            raise RuntimeError(f"einsum: subscripts {term!r} do not fit an operand of shape {x.shape} "
                               f"({x.ndim} dimension(s))")
    ellipsis_ndim = max([x.ndim - n for term, n, x in zip(terms, named, operands) if "..." in term], default=0)
    ellipsis = "".join([c for c in _LETTERS if c not in equation][:ellipsis_ndim])
    inputs = tuple(term.replace("...", ellipsis[len(ellipsis) - (x.ndim - n):])
                   for term, n, x in zip(terms, named, operands))
    if arrow:
        output = rhs.replace("...", ellipsis)
    else:
        letters = "".join(inputs)
        output = ellipsis + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ellipsis))
    for c in output:
        if output.count(c) > 1 or not any(c in term for term in inputs):
            raise RuntimeError(f"einsum: output subscript {c!r} in {equation!r} "
                               f"{'appears more than once' if output.count(c) > 1 else 'appears in no operand'}")
    return inputs, output


def _take_diagonals(term: str, x: Tensor, equation: str) -> tuple:
    """A letter repeated within one operand ("ii->i") reads its diagonal: take it, so that every
    letter appears once. diagonal() puts the diagonal last: the letter moves to the end."""
    for c in dict.fromkeys(term):
        while term.count(c) > 1:
            first, second = term.index(c), term.index(c, term.index(c) + 1)
            if x.shape[first] != x.shape[second]:
                raise RuntimeError(f"einsum: subscript {c!r} is repeated in operand {term!r} of {equation!r}, "
                                   f"but its dimensions have different sizes in shape {x.shape}")
            x = x.diagonal(0, first, second)
            term = term[:first] + term[first + 1:second] + term[second + 1:] + c
    return term, x


def einsum(equation: str, *operands) -> Tensor:
    """Einstein summation: einsum("ij,jk->ik", a, b) is a @ b, einsum("ii", a) the trace,
    einsum("bi,bi->b", a, b) rowwise dot products. Letters name dimensions; letters missing from
    the output are summed over; "..." stands for the remaining dimensions. The operands may also
    come as one list. Dimensions of size 1 broadcast against the same letter's size elsewhere."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise RuntimeError("einsum: needs at least one operand")
    operands = autocast_mode.low_precision(*operands)            # products, as PyTorch's (through bmm)
    inputs, output = _parse_equation(equation, operands)
    sizes = {}
    for term, x in zip(inputs, operands):
        for c, n in zip(term, x.shape):
            if n != 1 and sizes.get(c, 1) not in (1, n):
                raise RuntimeError(f"einsum: subscript {c!r} has size {n} in an operand of shape {x.shape}, "
                                   f"but size {sizes[c]} elsewhere in {equation!r} (only size 1 broadcasts)")
            sizes[c] = n if n != 1 else sizes.get(c, 1)
    terms, tensors = [], []
    for i, (term, x) in enumerate(zip(inputs, operands)):
        term, x = _take_diagonals(term, x, equation)
        # A letter in no other operand and not in the output is just summed over: do that first, so
        # that Einsum sees every letter in two places (its backward relies on that).
        elsewhere = output + "".join(t for j, t in enumerate(inputs) if j != i)
        lone = tuple(p for p, c in enumerate(term) if c not in elsewhere)
        if lone:
            # sum makes int64 of smaller integers; PyTorch's einsum does too for a lone operand, and keeps
            # the operands' dtype when there are several
            summed = x.sum(dim=lone)
            x = summed if len(operands) == 1 else summed.to(dtype=x.dtype)
            term = "".join(c for c in term if c in elsewhere)
        terms.append(term)
        tensors.append(x.expand(tuple(sizes[c] for c in term)))     # size-1 dims broadcast
    dtype = tensors[0].dtype
    for x in tensors[1:]:
        dtype = dtypes.promote(dtype, 1, x.dtype, 1)
    return Einsum.apply(*(x.to(dtype=dtype) for x in tensors), inputs=tuple(terms), output=output)
