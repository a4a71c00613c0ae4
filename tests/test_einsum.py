"""einsum and dot against np.einsum and np.dot, with first and second derivatives.

The equations cover what einsum() rewrites before the Einsum op sees them: implicit outputs,
"..." (also with fewer dims in one operand), a letter repeated within one operand (a diagonal),
letters in one operand only (summed first), three operands, and size-1 dimensions that
broadcast.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_gpu as tg
from checks import check_op, noncontiguous, values

EQUATIONS = [
    "ij,jk->ik", "ij,jk", "bij,bjk->bik", "i,i->", "i,i", "i,j->ij", "ij->ji", "ba", "ij->", "ij->j", "ijk->kji",
    "ii->i", "ii", "iij->j", "iji->ij", "ij,ij,ij->i", "ab,bc,cd->ad", "a,b,c->abc", "ij,kl->", "bi,bj->bij",
    "...ij,...jk->...ik", "...i->...", "...,...->...", "ij...,j->i...", "...ii->...i",
]


def operand_shapes(draw, equation):
    """One shape per operand: a size per letter, and one batch shape for "..." (an operand may use
    only its last dims, as broadcasting aligns them from the right)."""
    terms = equation.split("->")[0].split(",")
    size = {c: draw(st.integers(1, 3)) for c in sorted(set(equation) - set(",.->"))}
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    shapes = []
    for term in terms:
        before, _, after = term.partition("...")
        middle = batch[draw(st.integers(0, len(batch))):] if "..." in term else ()
        shapes.append(tuple(size[c] for c in before) + middle + tuple(size[c] for c in after))
    return shapes


@given(data=st.data())
def test_einsum(data):
    equation = data.draw(st.sampled_from(EQUATIONS))
    arrays = [data.draw(noncontiguous(values(shape))) for shape in operand_shapes(data.draw, equation)]
    as_list = data.draw(st.booleans())
    fn = (lambda *xs: tg.einsum(equation, list(xs))) if as_list else (lambda *xs: tg.einsum(equation, *xs))
    check_op(fn, lambda *arrays: np.einsum(equation, *arrays), *arrays, second_order=True)


def test_einsum_examples():
    a = tg.tensor(np.arange(6.0).reshape(2, 3))
    b = tg.tensor(np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(tg.einsum("ij,jk->ik", a, b).numpy(), a.numpy() @ b.numpy())
    np.testing.assert_array_equal(tg.einsum("ij", a).numpy(), a.numpy())
    np.testing.assert_array_equal(tg.einsum("ji", a).numpy(), a.numpy().T)     # implicit output: sorted letters
    np.testing.assert_array_equal(tg.einsum(" i j -> j i ", a).numpy(), a.numpy().T)
    assert tg.einsum("ii", tg.tensor([[1.0, 2.0], [3.0, 4.0]])).item() == 5.0


def test_einsum_sums_an_ellipsis_missing_from_the_output():
    # PyTorch sums the dims of an ellipsis that an explicit output leaves out (NumPy refuses the equation)
    a = np.random.default_rng(0).standard_normal((2, 3, 2))
    check_op(lambda x: tg.einsum("i...->i", x), lambda a: a.sum(axis=(1, 2)), a, second_order=True)
    check_op(lambda x: tg.einsum("...i,...i->i", x, x), lambda a: (a * a).sum(axis=(0, 1)), a, second_order=True)


def test_einsum_broadcasts_size_one_dimensions():
    a = np.random.default_rng(0).standard_normal((1, 2, 3))
    b = np.random.default_rng(1).standard_normal((4, 3, 2))
    check_op(lambda x, y: tg.einsum("bij,bjk->bik", x, y), np.matmul, a, b, second_order=True)
    check_op(lambda x, y: tg.einsum("...ij,...jk->...ik", x, y), np.matmul, a, b, second_order=True)


def test_einsum_dtypes():
    a, b = np.arange(6).reshape(2, 3), np.arange(12).reshape(3, 4)
    out = tg.einsum("ij,jk->ik", tg.tensor(a), tg.tensor(b))
    assert out.dtype == tg.int64
    np.testing.assert_array_equal(out.numpy(), a @ b)
    summed = tg.einsum("ij->j", tg.tensor(a, dtype=tg.int32))      # one operand summed: a sum, int64 as in PyTorch
    assert summed.dtype == tg.int64
    np.testing.assert_array_equal(summed.numpy(), a.sum(0))
    assert tg.einsum("ij->ji", tg.tensor(a, dtype=tg.int32)).dtype == tg.int32          # nothing summed
    small = tg.einsum("ij,j->i", tg.tensor(a, dtype=tg.int32), tg.tensor([1, 1, 1], dtype=tg.int32))
    assert small.dtype == tg.int32                                  # several operands keep theirs
    np.testing.assert_array_equal(small.numpy(), a.sum(1))
    mixed = tg.einsum("ij,jk->ik", tg.tensor(a), tg.tensor(b, dtype=tg.float32))
    assert mixed.dtype == tg.float32


@pytest.mark.parametrize("equation, shapes, match", [
    ("ij,jk->ik", [(2, 3)], r"has 2 operand\(s\), but 1 tensor"),
    ("i,i", [(2,), (2,), (2,)], r"has 2 operand\(s\), but 3 tensor"),
    ("i1->i", [(2, 2)], "invalid subscript '1'"),
    ("i->i->i", [(2,)], "invalid subscript '-'"),
    ("......i", [(2,)], "invalid subscript '.'"),
    ("ij->i", [(2,)], r"subscripts 'ij' do not fit an operand of shape \(2,\)"),
    ("...ij->i", [(2,)], "do not fit"),
    ("ij,jk->ik", [(2, 3), (4, 2)], "subscript 'j' has size 4 .* but size 3 elsewhere"),
    ("ii->i", [(2, 3)], "subscript 'i' has size 3 .* but size 2 elsewhere"),
    ("ii->i", [(1, 3)], "subscript 'i' is repeated in operand 'ii'"),      # a diagonal needs equal sizes
    ("ij->ii", [(2, 2)], "output subscript 'i' .* appears more than once"),
    ("ij->k", [(2, 2)], "output subscript 'k' .* appears in no operand"),
])
def test_einsum_errors(equation, shapes, match):
    with pytest.raises(RuntimeError, match=match):
        tg.einsum(equation, *[tg.zeros(s) for s in shapes])


def test_einsum_without_operands():
    with pytest.raises(RuntimeError, match="at least one operand"):
        tg.einsum("i")


# ----------------------------------------------------------------------------- dot
@given(st.data())
def test_dot(data):
    n = data.draw(st.integers(0, 4))
    a, b = (data.draw(noncontiguous(values((n,)))) for _ in range(2))
    fn = (lambda x, y: x.dot(y)) if data.draw(st.booleans()) else (lambda x, y: tg.dot(x, y))
    check_op(fn, np.dot, a, b, second_order=True)


def test_dot_of_integers():
    out = tg.dot(tg.tensor([1, 2, 3], dtype=tg.int32), tg.tensor([4, 5, 6], dtype=tg.int32))
    assert out.dtype == tg.int32 and out.shape == () and out.item() == 32


@pytest.mark.parametrize("shape_a, shape_b, dtype_b, match", [
    ((2, 2), (2,), tg.float32, r"1D tensors expected, but got 2D and 1D tensors \(shapes \(2, 2\) and \(2,\)\)"),
    ((), (), tg.float32, "1D tensors expected, but got 0D and 0D"),
    ((2,), (3,), tg.float32, "different lengths, 2 and 3"),
    ((2,), (2,), tg.float64, "same dtype, got float32 and float64"),
])
def test_dot_errors(shape_a, shape_b, dtype_b, match):
    with pytest.raises(RuntimeError, match=match):
        tg.dot(tg.zeros(shape_a), tg.zeros(shape_b, dtype=dtype_b))
