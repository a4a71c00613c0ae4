"""Helpers shared by the gradient tests: hypothesis strategies and one checking routine.

``check_op(fn, reference, *arrays)`` is the heart of the op tests.  It
1. runs `fn` on float64 tensors made from `arrays` and compares with `reference` (NumPy);
2. gradchecks `fn` (central differences, random upstream gradient; tg.gradcheck);
3. checks that backward mutated neither the inputs nor the upstream gradient.
"""
import math

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinygrad_gpu as tg
from tinygrad_gpu.device import array_module


def shapes(min_dims=0, max_dims=3, min_side=1, max_side=4):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def values(shape, low=-3.0, high=3.0, away_from=None):
    """float64 arrays in [low, high]; `away_from`: keep |x - a| > 1e-3 for each a (kinks)."""
    elements = st.floats(low, high, allow_nan=False, allow_infinity=False, width=64)
    if away_from is not None:
        elements = elements.filter(lambda v: all(abs(v - a) > 1e-3 for a in away_from))
    return hnp.arrays(np.float64, shape, elements=elements)


@st.composite
def spread(draw, shape):
    """float64 values at least 0.25 apart, in a random order: no ties for max, sort or pooling to break."""
    count = math.prod(shape)
    order = np.array(draw(st.permutations(range(count))), dtype=np.float64)
    jitter = draw(hnp.arrays(np.float64, count, elements=st.floats(0, 0.25)))
    return ((order - count / 2) * 0.5 + jitter).reshape(shape)


@st.composite
def noncontiguous(draw, array_strategy):
    """The drawn array, or a strided (non-contiguous) view holding the same values."""
    array = draw(array_strategy)
    if array.ndim == 0 or not draw(st.booleans()):
        return array
    wide = np.zeros(array.shape[:-1] + (2 * array.shape[-1],))
    wide[..., ::2] = array
    return wide[..., ::2]


def as_tensors(arrays, device=None, requires_grad=True):
    return [tg.tensor(a, dtype=tg.float64, device=device, requires_grad=requires_grad) if
            np.asarray(a).dtype.kind == "f" else tg.tensor(a, device=device) for a in arrays]


def _tensor_of_view(array, device):
    """A float64 leaf tensor whose data keeps the array's (possibly non-contiguous) layout."""
    t = tg.tensor(np.zeros(0), dtype=tg.float64, device=device)
    # On NumPy devices keep the very view, strides and all; a GPU gets a copy.
    t.data = tg.tensor(array, dtype=tg.float64, device=device).data if device.startswith("cuda") else array
    return t.requires_grad_()


def check_op(fn, reference, *arrays, atol=1e-7, rtol=1e-6, grad_atol=1e-5, grad_rtol=1e-3,
             second_order=False, device=None):
    """Forward against `reference`, gradients against central differences, no mutation. On the
    default device unless `device` is given (cuda in the suite's run through the CuPy stand-in)."""
    device = tg.device.canonical(device)
    tensors = [_tensor_of_view(a, device) for a in arrays]
    before = [a.copy() for a in arrays]
    out = fn(*tensors)
    if reference is not None:
        np.testing.assert_allclose(out.numpy(), reference(*arrays), atol=atol, rtol=rtol)
        assert out.dtype == tg.float64
    tg.gradcheck(fn, tensors, atol=grad_atol, rtol=grad_rtol)
    upstream = tg.randn(out.shape, dtype=out.dtype, device=device)
    upstream_before = upstream.numpy().copy()
    out = fn(*tensors)
    out.backward(upstream)
    np.testing.assert_array_equal(upstream.numpy(), upstream_before, err_msg="backward mutated the upstream grad")
    for t, a, b in zip(tensors, arrays, before):
        np.testing.assert_array_equal(t.numpy(), b, err_msg="an op mutated its input")
    grads = [t.grad.data for t in tensors if t.grad is not None]
    xp = array_module(tensors[0].device)
    for i in range(len(grads)):
        for j in range(i + 1, len(grads)):
            assert not xp.shares_memory(grads[i], grads[j]), "two inputs' gradients share memory"
    if second_order:
        tg.gradgradcheck(fn, tensors, atol=grad_atol, rtol=grad_rtol)


def overfit(loss_of_batch, optimizer, max_steps: int = 300, stop_below: float = 0.01) -> list:
    """Train on one fixed batch until the loss drops below `stop_below` (or max_steps); the losses.
    A model that cannot memorise one batch has a bug in its forward, its backward or its update."""
    losses = []
    for _ in range(max_steps):
        loss = loss_of_batch()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if losses[-1] < stop_below:
            break
    return losses
