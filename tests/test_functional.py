"""tinygrad_gpu.nn.functional against NumPy references written here with PyTorch's semantics.

Each property test compares the forward pass with the reference and gradchecks it through
``check_op`` (second order where it is cheap); example tests pin error messages, edge cases
(everything ignored, extreme logits, a GPT-2-sized vocabulary) and dropout's statistics.
"""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F

from checks import check_op, shapes, values
from conftest import DEVICES

on_devices = pytest.mark.parametrize("device", DEVICES)     # cpu, emu, and cuda where present

REDUCTIONS = st.sampled_from(["mean", "sum", "none"])


# ----------------------------------------------------------------------------- NumPy references
def np_log_softmax(x, axis):
    shifted = x - x.max(axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


def np_softmax(x, axis):
    return np.exp(np_log_softmax(x, axis))


def np_reduce(losses, reduction):
    return losses if reduction == "none" else losses.sum() if reduction == "sum" else losses.mean()


def np_cross_entropy(logits, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """PyTorch's formula: (1-e) * nll + e * mean over classes of -log_softmax; ignored positions excluded."""
    class_dim = 1 if logits.ndim >= 2 else 0
    logp = np_log_softmax(logits, class_dim)
    n_classes = logits.shape[class_dim]
    if target.dtype.kind == "f":                                  # class probabilities
        smoothed = target * (1 - label_smoothing) + label_smoothing / n_classes
        return np_reduce(-(smoothed * logp).sum(class_dim), reduction)
    logp = np.moveaxis(logp, class_dim, -1)                       # (..., C), matching target's shape
    kept = target != ignore_index
    picked = np.take_along_axis(logp, np.where(kept, target, 0)[..., None], -1)[..., 0]
    losses = np.where(kept, -(1 - label_smoothing) * picked - label_smoothing * logp.mean(-1), 0.0)
    if reduction == "mean":
        return losses.sum() / kept.sum()
    return np_reduce(losses, reduction)


def np_layer_norm(x, k, weight, bias, eps):
    axes = tuple(range(x.ndim - k, x.ndim))
    centered = x - x.mean(axes, keepdims=True)
    out = centered / np.sqrt((centered ** 2).mean(axes, keepdims=True) + eps)
    out = out if weight is None else out * weight
    return out if bias is None else out + bias


def np_gelu(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def np_attention(q, k, v, mask=None, is_causal=False, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if is_causal:
        mask = np.tril(np.ones(scores.shape[-2:], dtype=bool))    # top-left aligned, as in PyTorch
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    return np_softmax(scores, -1) @ v


def t64(array, device=None, requires_grad=True):
    return tg.tensor(array, dtype=tg.float64, device=device, requires_grad=requires_grad)


# ----------------------------------------------------------------------------- cross_entropy
@st.composite
def class_index_case(draw):
    """(logits, targets, ignore_index): layouts (C,)/(), (N, C)/(N,), (N, C, d1)/(N, d1); >= 1 target kept."""
    n, c, d = draw(st.integers(1, 4)), draw(st.integers(2, 5)), draw(st.integers(1, 3))
    shape, target_shape = draw(st.sampled_from([((c,), ()), ((n, c), (n,)), ((n, c, d), (n, d))]))
    ignore_index = draw(st.sampled_from([-100, -1, 0]))            # 0: a real class can be the ignored one
    classes = [k for k in range(c) if k != ignore_index]
    target = draw(hnp.arrays(np.int64, target_shape, elements=st.sampled_from(classes)))
    ignored = draw(hnp.arrays(bool, target_shape))
    ignored.flat[draw(st.integers(0, target.size - 1))] = False
    return draw(values(shape)), np.where(ignored, ignore_index, target), ignore_index


@on_devices
@given(class_index_case(), REDUCTIONS, st.sampled_from([0.0, 0.1, 0.55, 0.99]), st.booleans())
def test_cross_entropy_class_indices(device, case, reduction, smoothing, second_order):
    logits, target, ignore_index = case
    options = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=smoothing)
    check_op(lambda x: F.cross_entropy(x, tg.tensor(target, device=device), **options),
             lambda x: np_cross_entropy(x, target, **options), logits, second_order=second_order, device=device)


@on_devices
@given(st.sampled_from([(4,), (2, 3), (2, 3, 2)]), st.data(), REDUCTIONS, st.sampled_from([0.0, 0.25]))
def test_cross_entropy_probability_targets(device, shape, data, reduction, smoothing):
    logits = data.draw(values(shape))
    probs = np_softmax(data.draw(values(shape)), 1 if len(shape) > 1 else 0)
    options = dict(reduction=reduction, label_smoothing=smoothing)
    check_op(lambda x, p: F.cross_entropy(x, p, **options), lambda x, p: np_cross_entropy(x, p, **options),
             logits, probs, second_order=True, device=device)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_all_targets_ignored(reduction, smoothing):
    logits = t64(np.random.default_rng(0).normal(size=(3, 4)))
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = F.cross_entropy(logits, tg.tensor([-100, -100, -100]), reduction=reduction, label_smoothing=smoothing)
        expected = {"mean": np.nan, "sum": 0.0, "none": np.zeros(3)}[reduction]   # 0 / 0 for the mean, as PyTorch
        np.testing.assert_array_equal(loss.numpy(), expected)
        loss.sum().backward()
    np.testing.assert_array_equal(logits.grad.numpy(), np.zeros((3, 4)))   # the loss depends on no logit


@pytest.mark.parametrize("dtype", [tg.float32, tg.float64])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@on_devices
def test_cross_entropy_extreme_logits_stay_finite(device, dtype, smoothing):
    logits = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, 1e4], [1e4, 1e4, -1e4]])
    target = np.array([1, 0, 2])
    x = tg.tensor(logits, dtype=dtype, device=device, requires_grad=True)
    loss = F.cross_entropy(x, tg.tensor(target, device=device), label_smoothing=smoothing)
    loss.backward()
    assert np.isfinite(loss.item()) and np.isfinite(x.grad.numpy()).all()
    np.testing.assert_allclose(loss.item(), np_cross_entropy(logits, target, label_smoothing=smoothing), rtol=1e-6)
    if dtype == tg.float64:
        targets = tg.tensor(target, device=device)
        check_op(lambda x: F.cross_entropy(x, targets, label_smoothing=smoothing), None, logits, device=device)


@given(st.integers(1, 4), st.data())
def test_cross_entropy_vocabulary_of_65(n, data):
    """260 logits: gradcheck takes its random-direction path here."""
    logits, target = data.draw(values((n, 65))), data.draw(hnp.arrays(np.int64, (n,), elements=st.integers(0, 64)))
    check_op(lambda x: F.cross_entropy(x, tg.tensor(target)), lambda x: np_cross_entropy(x, target), logits)


@pytest.mark.parametrize("n", [1, 2])
@on_devices
def test_cross_entropy_gpt2_vocabulary(device, n):
    c = 50257
    rng = np.random.default_rng(n)
    logits, target = 3 * rng.standard_normal((n, c)), rng.integers(0, c, n)
    x = tg.tensor(logits, dtype=tg.float32, device=device, requires_grad=True)
    loss = F.cross_entropy(x, tg.tensor(target, device=device))
    loss.backward()
    np.testing.assert_allclose(loss.item(), np_cross_entropy(logits, target), rtol=1e-5)
    grad = x.grad.numpy()
    np.testing.assert_allclose(grad.sum(1), 0.0, atol=1e-6)                 # each row of softmax - onehot sums to 0
    expected = np_softmax(logits, 1)
    expected[np.arange(n), target] -= 1
    np.testing.assert_allclose(grad, expected / n, atol=1e-7)


def test_cross_entropy_errors():
    logits = tg.zeros(2, 5, device="cpu")         # on a host device the message names the target (a GPU's:
    with pytest.raises(IndexError, match=r"target 7 .*\b5 classes"):         # test_cuda_path.py)
        F.cross_entropy(logits, tg.tensor([1, 7], device="cpu"))
    with pytest.raises(IndexError, match=r"target -3 .*\b5 classes"):
        F.cross_entropy(logits, tg.tensor([-3, 1], device="cpu"))
    with pytest.raises(ValueError, match=r"shape"):
        F.cross_entropy(logits, tg.tensor([1, 2, 3]))                       # one target too many
    with pytest.raises(ValueError, match=r"shape"):
        F.cross_entropy(logits, tg.tensor([[1], [2]]))
    with pytest.raises(ValueError, match=r"shape"):
        F.cross_entropy(logits, tg.tensor([1.0, 2.0]))                      # float targets must be (2, 5)
    with pytest.raises(ValueError, match=r"reduction.*'avg'"):
        F.cross_entropy(logits, tg.tensor([1, 2]), reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(logits, tg.tensor([1, 2]), label_smoothing=1.5)


# ----------------------------------------------------------------------------- mse_loss
@given(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3), st.data(), REDUCTIONS)
def test_mse_loss(shapes_, data, reduction):
    a, b = (data.draw(values(s)) for s in shapes_.input_shapes)
    check_op(lambda a, b: F.mse_loss(a, b, reduction=reduction), lambda a, b: np_reduce((a - b) ** 2, reduction),
             a, b, second_order=True)


@given(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3), st.data(), REDUCTIONS)
def test_l1_loss(shapes_, data, reduction):
    """|a - b| with a and b drawn from different ranges: never equal, away from abs's kink."""
    a, b = data.draw(values(shapes_.input_shapes[0], 0.5, 3)), data.draw(values(shapes_.input_shapes[1], -3, -0.5))
    check_op(lambda a, b: F.l1_loss(a, b, reduction=reduction), lambda a, b: np_reduce(np.abs(a - b), reduction),
             a, b, second_order=True)


@pytest.mark.parametrize("shape_a, shape_b", [((2, 3), (3,)), ((3,), (2, 1))])
def test_mse_loss_broadcast_reductions(shape_a, shape_b):
    a, b = tg.zeros(shape_a), tg.ones(shape_b)
    assert F.mse_loss(a, b, reduction="none").shape == np.broadcast_shapes(shape_a, shape_b)
    assert F.mse_loss(a, b, reduction="sum").item() == 6.0
    assert F.mse_loss(a, b).item() == 1.0                  # the mean is over the broadcast shape


def test_mse_loss_errors():
    with pytest.raises(RuntimeError, match=r"\(2, 3\).*\(4,\)"):
        F.mse_loss(tg.zeros(2, 3), tg.zeros(4))
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(tg.zeros(2), tg.zeros(2), reduction="max")


# ----------------------------------------------------------------------------- layer_norm
@on_devices
@given(st.data(), shapes(max_dims=2, max_side=3), shapes(min_dims=1, max_dims=2, max_side=4),
       st.booleans(), st.booleans(), st.sampled_from([1e-5, 1e-3, 0.1]), st.booleans())
def test_layer_norm(device, data, batch, normalized, with_weight, with_bias, eps, as_int):
    x, w, b = data.draw(values(batch + normalized)), data.draw(values(normalized)), data.draw(values(normalized))
    shape_arg = normalized[0] if as_int and len(normalized) == 1 else normalized

    def affine(w, b):                                   # w and b are always checked; unused ones get 0
        return w if with_weight else None, b if with_bias else None
    check_op(lambda x, w, b: F.layer_norm(x, shape_arg, *affine(w, b), eps=eps),
             lambda x, w, b: np_layer_norm(x, len(normalized), *affine(w, b), eps),
             x, w, b, second_order=x.size <= 12, device=device)


def test_layer_norm_shape_mismatch():
    # RuntimeError, as PyTorch raises for a shape that does not fit
    with pytest.raises(RuntimeError, match=r"\(2, 3\).*\(4,\)"):
        F.layer_norm(tg.zeros(2, 3), 4)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(tg.zeros(2, 3), (2, 4))
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(tg.zeros(3), (1, 3))                 # more normalized dims than the input has
    with pytest.raises(RuntimeError, match="weight of shape"):
        F.layer_norm(tg.zeros(2, 3), 3, weight=tg.ones(2))


@pytest.mark.parametrize("shape, normalized", [((0, 3), (3,)), ((2, 0), (0,)), ((0,), (0,)), ((2, 1, 0), (1, 0))])
def test_layer_norm_of_empty_tensors_is_empty_as_in_pytorch(shape, normalized):
    x = tg.zeros(shape, requires_grad=True)
    w, b = tg.ones(normalized, requires_grad=True), tg.zeros(normalized, requires_grad=True)
    out = F.layer_norm(x, normalized, w, b)
    assert out.shape == shape and out.dtype == tg.float32
    out.sum().backward()
    assert w.grad.shape == normalized and not w.grad.numpy().any()      # nothing was normalised: 0


# ----------------------------------------------------------------------------- embedding
@on_devices
@given(st.integers(1, 6), st.integers(1, 4), st.data())
def test_embedding(device, n_embeddings, dim, data):
    weight = data.draw(values((n_embeddings, dim)))
    ids = data.draw(hnp.arrays(np.int64, shapes(max_dims=2), elements=st.integers(0, n_embeddings - 1)))
    check_op(lambda w: F.embedding(tg.tensor(ids, device=device), w), lambda w: w[ids], weight, device=device)
    w = t64(weight, device)
    upstream = np.random.default_rng(0).normal(size=ids.shape + (dim,))
    F.embedding(tg.tensor(ids, device=device), w).backward(tg.tensor(upstream, dtype=tg.float64, device=device))
    expected = np.zeros_like(weight)
    np.add.at(expected, ids, upstream)                                       # repeated ids add up
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_embedding_repeated_ids_accumulate():
    w = t64(np.arange(8.0).reshape(4, 2))
    F.embedding(tg.tensor([[1, 1, 3], [1, 0, 3]]), w).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [[1, 1], [3, 3], [0, 0], [2, 2]])


def test_embedding_errors():
    w = tg.zeros(4, 2, device="cpu")              # on a host device the message names the index
    with pytest.raises(IndexError, match=r"index 4 .*\b4 embeddings"):
        F.embedding(tg.tensor([0, 4], device="cpu"), w)
    with pytest.raises(IndexError, match=r"index -1 "):
        F.embedding(tg.tensor([-1, 2], device="cpu"), w)
    with pytest.raises(RuntimeError, match="integer tensor .int64 or int32."):     # PyTorch: a RuntimeError too
        F.embedding(tg.tensor([0.0, 1.0]), w)
    with pytest.raises(RuntimeError, match="weight must be 2-D"):
        F.embedding(tg.tensor([0]), tg.zeros(4))
    with pytest.raises(RuntimeError, match="no rows"):
        F.embedding(tg.tensor([0]), tg.zeros(0, 2))
    assert F.embedding(tg.zeros(0, dtype=tg.int64), tg.zeros(0, 2)).shape == (0, 2)
    with pytest.raises(AssertionError, match="padding_idx=4 must be within num_embeddings"):    # PyTorch asserts
        F.embedding(tg.tensor([0]), w, padding_idx=4)
    with pytest.raises(AssertionError, match="padding_idx=-5"):
        F.embedding(tg.tensor([0]), w, padding_idx=-5)


@pytest.mark.parametrize("padding_idx", [1, -3])
def test_embedding_padding_idx_gets_no_gradient_but_keeps_its_row(padding_idx):
    """The padding row is looked up as any other, but its gradient is 0 (PyTorch's rule, so that a padding
    token's vector stays as initialised); every other row gets the sum of its positions' upstream rows."""
    weight = np.random.default_rng(0).standard_normal((4, 3))
    ids = np.array([[1, 0, 1], [3, 1, 2]])
    w = t64(weight)
    out = F.embedding(tg.tensor(ids), w, padding_idx=padding_idx)
    np.testing.assert_array_equal(out.numpy(), weight[ids])
    upstream = np.random.default_rng(1).standard_normal(out.shape)
    (out * tg.tensor(upstream)).sum().backward()
    expected = np.zeros_like(weight)
    np.add.at(expected, ids, upstream)
    expected[padding_idx % 4] = 0
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-12)
    torch = pytest.importorskip("torch")
    tw = torch.tensor(weight, requires_grad=True)
    (torch.nn.functional.embedding(torch.tensor(ids), tw, padding_idx=padding_idx) * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-12)


# ----------------------------------------------------------------------------- dropout
def test_dropout_identities():
    x = t64(np.random.default_rng(0).uniform(1, 2, (3, 4)))
    for out in (F.dropout(x, 0.5, training=False), F.dropout(x, 0.0)):
        np.testing.assert_array_equal(out.numpy(), x.numpy())
    zeros = F.dropout(x, 1.0)
    np.testing.assert_array_equal(zeros.numpy(), np.zeros((3, 4)))
    zeros.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((3, 4)))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
@pytest.mark.parametrize("dtype", [tg.float32, tg.float64])
@on_devices
def test_dropout_statistics_and_gradient(device, p, dtype):
    n = 100_000
    x = tg.ones(n, dtype=dtype, device=device, requires_grad=True)
    out = F.dropout(x, p)
    assert out.dtype == dtype
    y = out.numpy()
    kept = y != 0
    assert abs(kept.mean() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)      # about 1 - p kept
    np.testing.assert_allclose(y[kept], 1 / (1 - p), rtol=1e-6)              # scaled by 1 / (1 - p)
    assert abs(y.mean() - 1) < 5 * math.sqrt(p / (1 - p) / n)               # expectation preserved
    upstream = np.random.default_rng(1).normal(size=n)
    out.backward(tg.tensor(upstream, dtype=dtype, device=device))
    np.testing.assert_allclose(x.grad.numpy(), upstream * kept / (1 - p), rtol=1e-6, atol=1e-6)


def test_dropout_gradcheck_with_a_fixed_mask():
    def fn(x):
        tg.manual_seed(3)                                   # the same mask on every evaluation
        return F.dropout(x, 0.4)
    check_op(fn, None, np.random.default_rng(0).normal(size=(4, 5)))


def test_dropout_manual_seed():
    x = tg.ones(1000)
    tg.manual_seed(7)
    first, second = F.dropout(x, 0.5).numpy(), F.dropout(x, 0.5).numpy()
    tg.manual_seed(7)
    np.testing.assert_array_equal(F.dropout(x, 0.5).numpy(), first)
    assert not np.array_equal(first, second)                # the stream moves on between calls
    tg.manual_seed(8)
    assert not np.array_equal(F.dropout(x, 0.5).numpy(), first)


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_dropout_invalid_p(p):
    with pytest.raises(ValueError, match=r"dropout.*p"):
        F.dropout(tg.ones(3), p)


# ----------------------------------------------------------------------------- gelu, linear, softmax
@on_devices
@given(st.sampled_from(["none", "tanh"]), st.data())
def test_gelu(device, approximate, data):
    x = data.draw(values(data.draw(shapes()), low=-5, high=5))
    check_op(lambda x: F.gelu(x, approximate=approximate), lambda x: np_gelu(x, approximate), x, second_order=True,
             device=device)


def test_gelu_bad_approximate():
    with pytest.raises(RuntimeError, match="approximate"):
        F.gelu(tg.ones(2), approximate="fast")


@given(shapes(max_dims=2, max_side=3), st.integers(1, 4), st.integers(1, 4), st.booleans(), st.data())
def test_linear(batch, n_in, n_out, with_bias, data):
    arrays = [data.draw(values(batch + (n_in,))), data.draw(values((n_out, n_in)))]
    arrays += [data.draw(values((n_out,)))] if with_bias else []
    check_op(lambda x, w, *b: F.linear(x, w, *b), lambda x, w, *b: x @ w.T + (b[0] if b else 0),
             *arrays, second_order=True)


@on_devices
@given(st.sampled_from(["softmax", "log_softmax"]), shapes(min_dims=1), st.data())
def test_softmax_wrappers(device, name, shape, data):
    x, dim = data.draw(values(shape)), data.draw(st.integers(-len(shape), len(shape) - 1))
    reference = np_softmax if name == "softmax" else np_log_softmax
    check_op(lambda x: getattr(F, name)(x, dim), lambda x: reference(x, dim), x, second_order=True, device=device)


# ----------------------------------------------------------------------------- attention
@st.composite
def attention_case(draw):
    b, h = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    l, s = draw(st.integers(1, 4)), draw(st.integers(1, 4))     # L != S allowed
    e, ev = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    arrays = [draw(values(shape)) for shape in ((b, h, l, e), (b, h, s, e), (b, h, s, ev))]
    kind = draw(st.sampled_from(["none", "causal", "bool", "float"]))
    mask_shape = draw(st.sampled_from([(l, s), (1, h, l, s), (b, 1, l, s)]))
    if kind == "bool":
        mask = draw(hnp.arrays(bool, mask_shape))
        mask[..., np.arange(l), np.arange(l) % s] = True              # every query may attend somewhere
        arrays.append(mask)
    elif kind == "float":
        arrays.append(draw(values(mask_shape, low=-2, high=2)))
    scale = draw(st.sampled_from([None, 0.3, 2.0]))
    return arrays, kind, scale


@on_devices
@given(attention_case())
def test_scaled_dot_product_attention(device, case):
    arrays, kind, scale = case
    differentiable = arrays if kind == "float" else arrays[:3]        # a float mask gets a gradient too
    mask = tg.tensor(arrays[3], device=device) if kind == "bool" else None

    def fn(q, k, v, *float_mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask[0] if float_mask else mask,
                                              is_causal=kind == "causal", scale=scale)

    def reference(q, k, v, *float_mask):
        return np_attention(q, k, v, float_mask[0] if float_mask else arrays[3] if kind == "bool" else None,
                            is_causal=kind == "causal", scale=scale)
    check_op(fn, reference, *differentiable, device=device)


@on_devices
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_a_query_that_sees_no_key_gets_zeros_as_in_pytorch(device, kind):
    """A mask row that allows nothing (False everywhere, or -inf everywhere): the output row is 0 and so is every
    gradient through it (PyTorch 2.x on all its paths), not nan; the other rows are unchanged, and gradchecked."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.normal(size=(1, 2, 3, 2)) for _ in range(3))
    visible = np.ones((3, 3), bool)
    visible[1] = False
    mask = tg.tensor(visible if kind == "bool" else np.where(visible, 0.0, -np.inf), device=device)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def reference(q, k, v):
        out = np_attention(q, k, v, visible, is_causal=False)
        out[..., 1, :] = 0
        return out
    with np.errstate(invalid="ignore"):           # the reference's own nan row is overwritten above
        check_op(fn, reference, q, k, v, device=device)
    q_t, k_t, v_t = (t64(a, device) for a in (q, k, v))
    fn(q_t, k_t, v_t)[..., 1, :].sum().backward()
    for t in (q_t, k_t, v_t):
        assert (t.grad.numpy() == 0).all()


def test_attention_second_order():
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, 2, 3, 2)) for _ in range(3))
    check_op(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
             lambda q, k, v: np_attention(q, k, v, is_causal=True), q, k, v, second_order=True)


@on_devices
def test_causal_attention_ignores_the_future(device):
    rng = np.random.default_rng(0)
    length = 5
    q, k, v = (rng.normal(size=(2, 2, length, 3)) for _ in range(3))
    base = F.scaled_dot_product_attention(*(t64(a, device) for a in (q, k, v)), is_causal=True).numpy()
    for i in range(length):
        moved = []
        for a in (q, k, v):
            a = a.copy()
            a[..., i:, :] += rng.normal(size=a[..., i:, :].shape)         # change positions >= i
            moved.append(a)
        out = F.scaled_dot_product_attention(*(t64(a, device) for a in moved), is_causal=True).numpy()
        np.testing.assert_array_equal(out[..., :i, :], base[..., :i, :])  # positions < i cannot see it
        assert not np.allclose(out[..., i:, :], base[..., i:, :])         # position i and later do
    q_t, k_t, v_t = (t64(a, device) for a in (q, k, v))
    F.scaled_dot_product_attention(q_t, k_t, v_t, is_causal=True)[..., 1, :].sum().backward()
    for t in (k_t, v_t):
        assert (t.grad.numpy()[..., 2:, :] == 0).all() and (t.grad.numpy()[..., :2, :] != 0).any()


def test_causal_attention_dropout_drops_the_same_weights_both_ways():
    """Dropout inside the fused attention: the output is (p * keep) v for the mask the node kept, about
    1 - p of the weights survive, and the gradient (generator reseeded before each evaluation, so one
    mask throughout) passes gradcheck and the second-order check."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 3, 6, 4)) for _ in range(3))

    def fn(q, k, v):
        tg.manual_seed(5)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.4)
    out = fn(*(t64(a) for a in (q, k, v)))
    keep = tg.device.move(out.grad_fn.keep, "cpu")          # the node's array, copied from wherever it lives
    assert set(np.unique(keep)) == {0.0, 1 / 0.6} and 0.4 < (keep > 0).mean() < 0.8
    probs = np_attention(q, k, np.eye(6)[None, None].repeat(3, 1).repeat(2, 0), is_causal=True)
    np.testing.assert_allclose(out.numpy(), (probs * keep) @ v, rtol=1e-12)
    check_op(fn, None, q, k, v, second_order=True)


def test_half_precision_layer_norm_and_gelu_compute_in_float32():
    """float16 data: the references square and sum in float32, so rows of large values (sums of
    squares past 65504) and GELU's slope at |x| = 300 (x^2 past 65504) stay right."""
    rng = np.random.default_rng(0)
    x64 = rng.standard_normal((4, 768)) * 10
    x = tg.tensor(x64.astype(np.float16), requires_grad=True)
    y = F.layer_norm(x, (768,))
    x16 = x64.astype(np.float16).astype(np.float64)
    want = (x16 - x16.mean(1, keepdims=True)) / np.sqrt(x16.var(1, keepdims=True) + 1e-5)
    assert y.dtype == tg.float16
    np.testing.assert_allclose(y.numpy(), want, atol=4e-3)
    y.sum().backward()
    assert np.isfinite(x.grad.numpy()).all() and np.abs(x.grad.numpy()).max() < 1e-2   # d(sum)/dx is ~0
    g = tg.tensor(np.array([300.0, -300.0, 1000.0, 1.0], np.float16), requires_grad=True)
    F.gelu(g, approximate="tanh").sum().backward()
    np.testing.assert_allclose(g.grad.numpy(), [1.0, 0.0, 1.0, 1.0829], atol=2e-3)


def test_attention_dropout_p_is_checked_and_one_drops_everything():
    q = tg.ones(1, 3, 4, requires_grad=True)
    for p in (-0.5, 1.5):
        with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\], got"):
            F.scaled_dot_product_attention(q, q, q, is_causal=True, dropout_p=p)
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True, dropout_p=1.0)
    assert (out.numpy() == 0).all()
    out.sum().backward()
    assert (q.grad.numpy() == 0).all()


def test_attention_errors():
    q = tg.zeros(1, 1, 2, 3)
    with pytest.raises(RuntimeError, match="attn_mask.*is_causal|is_causal.*attn_mask"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=tg.ones(2, 2, dtype=tg.bool), is_causal=True)
    with pytest.raises(RuntimeError, match="do not fit"):
        F.scaled_dot_product_attention(q, tg.zeros(1, 1, 2, 4), q)
    with pytest.raises(RuntimeError, match=r"batch dimensions of query \(1, 1, 2, 3\), key \(1, 2, 2, 3\)"):
        F.scaled_dot_product_attention(q, tg.zeros(1, 2, 2, 3), tg.zeros(1, 3, 2, 3), is_causal=True)


def test_attention_at_the_edges_is_pytorchs():
    """Empty dims, E = 0, and nan or inf in q, k, v: PyTorch's rules (nn/attention.py spells them out), checked
    against torch itself on its CPU."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    nan, inf = math.nan, math.inf
    cases = [  # (q shape, k shape, v shape, mask, is_causal)
        ((3, 2), (0, 2), (0, 3), None, False),            # no keys: zeros
        ((2, 3, 2), (2, 0, 2), (2, 0, 1), None, True),
        ((3, 0), (4, 0), (4, 3), None, False),            # E = 0: every key weighs the same
        ((2, 3, 0), (2, 4, 0), (2, 4, 3), None, True),
        ((0, 2), (4, 2), (4, 3), None, False),            # an empty result
        ((3, 2), (4, 2), (4, 0), None, False),
        ((2, 1, 3, 2), (2, 1, 4, 2), (2, 1, 4, 2), None, True),
        ((2, 3, 2), (2, 4, 2), (2, 4, 3), "bool", False),
        ((3, 2), (4, 2), (4, 3), "float", False),
    ]
    for q_shape, k_shape, v_shape, mask_kind, causal in cases:
        if causal and tg.default_device().startswith("cuda") and 0 not in q_shape + k_shape + v_shape:
            continue        # on a GPU the fused causal kernels run, unchecked for nan (their arithmetic, not these rules)
        q, k, v = (rng.standard_normal(s) for s in (q_shape, k_shape, v_shape))
        for a in (q, k, v):                               # specials: nan, inf and -inf sprinkled in
            if a.size:
                a.flat[rng.integers(a.size)] = rng.choice([nan, inf, -inf])
        mask = None
        if mask_kind:
            visible = rng.random((q_shape[-2], k_shape[-2])) < 0.5
            visible[0] = False                            # a query that may attend to no key
            mask = visible if mask_kind == "bool" else np.where(visible, 0.0, -inf)
        ours_in = [tg.tensor(a) for a in (q, k, v)] + ([tg.tensor(mask)] if mask is not None else [])
        theirs_in = [torch.tensor(a) for a in (q, k, v)] + ([torch.tensor(mask)] if mask is not None else [])
        with np.errstate(invalid="ignore", divide="ignore"):
            ours = F.scaled_dot_product_attention(*ours_in[:3], attn_mask=ours_in[3] if mask is not None else None,
                                                  is_causal=causal).numpy()
        theirs = torch.nn.functional.scaled_dot_product_attention(
            *theirs_in[:3], attn_mask=theirs_in[3] if mask is not None else None, is_causal=causal).numpy()
        assert ours.shape == theirs.shape, (q_shape, k_shape, v_shape)
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12, err_msg=str((q_shape, mask_kind, causal)))


def test_attention_shapes_errors():
    with pytest.raises(RuntimeError, match="at least 2 dims"):
        F.scaled_dot_product_attention(tg.zeros(3), tg.zeros(3), tg.zeros(3))
    # an empty result, or no values, is computed before the shapes are compared (PyTorch returns it too)
    assert F.scaled_dot_product_attention(tg.zeros(3, 2), tg.zeros(4, 3), tg.zeros(4, 0)).shape == (3, 0)
    assert F.scaled_dot_product_attention(tg.zeros(3, 2), tg.zeros(1, 2), tg.zeros(0, 5)).shape == (3, 5)


# ----------------------------------------------------------------------------- cosine_similarity
def np_cosine_similarity(a, b, dim, eps=1e-8):
    a, b = np.broadcast_arrays(a, b)
    unit_a = a / np.maximum(np.sqrt((a * a).sum(dim, keepdims=True)), eps)
    unit_b = b / np.maximum(np.sqrt((b * b).sum(dim, keepdims=True)), eps)
    return (unit_a * unit_b).sum(dim)


@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3, max_side=3), st.data())
def test_cosine_similarity(shapes_, data):
    shapes_ = shapes_.input_shapes
    ndim = max(len(s) for s in shapes_)
    dim = data.draw(st.integers(-ndim, ndim - 1))
    a, b = data.draw(values(shapes_[0], away_from=(0.0,))), data.draw(values(shapes_[1], away_from=(0.0,)))
    check_op(lambda x, y: F.cosine_similarity(x, y, dim), lambda x, y: np_cosine_similarity(x, y, dim), a, b,
             second_order=True)


def test_cosine_similarity_edges_dtypes_and_pytorch():
    # a zero vector gives 0 (its length is clamped at eps); parallel vectors 1, opposite ones -1
    np.testing.assert_allclose(F.cosine_similarity(tg.tensor([[0.0, 0.0], [1.0, 2.0], [1.0, 2.0]]),
                                                   tg.tensor([[1.0, 1.0], [2.0, 4.0], [-1.0, -2.0]])).numpy(),
                               [0.0, 1.0, -1.0], atol=1e-7)
    assert F.cosine_similarity(tg.tensor(2.0), tg.tensor(3.0), dim=0).item() == 1.0          # 0-d: dim 0 or -1
    assert F.cosine_similarity(tg.tensor([1, 2]), tg.tensor([1.0, 2.0]), dim=0).dtype == tg.float32
    assert F.cosine_similarity(tg.ones(3, dtype=tg.float16), tg.ones(3, dtype=tg.bfloat16), dim=0).dtype == tg.float32
    with pytest.raises(RuntimeError, match="floating-point"):
        F.cosine_similarity(tg.tensor([1, 2]), tg.tensor([1, 2]), dim=0)
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        F.cosine_similarity(tg.ones(2, 3), tg.ones(3, 3), dim=5)           # the shapes before the dim
    with pytest.raises(IndexError, match="dim 1"):
        F.cosine_similarity(tg.tensor(2.0), tg.tensor(3.0), dim=1)
    torch = pytest.importorskip("torch")
    a, b = np.random.default_rng(0).standard_normal((2, 3, 4)), np.random.default_rng(1).standard_normal((3, 1))
    np.testing.assert_allclose(F.cosine_similarity(tg.tensor(a), tg.tensor(b), dim=1).numpy(),
                               torch.nn.functional.cosine_similarity(torch.tensor(a), torch.tensor(b), dim=1).numpy(),
                               rtol=1e-12)


# ----------------------------------------------------------------------------- dropout of other dtypes
def test_dropout_of_integers_and_empty_tensors_follows_pytorch():
    ints = tg.tensor([1, 2, 3])
    assert F.dropout(ints, 0.5, training=False) is ints and F.dropout(ints, 0.0) is ints
    zeros = F.dropout(ints, 1.0)
    assert zeros.dtype == tg.int64 and zeros.tolist() == [0, 0, 0]
    assert F.dropout(tg.tensor([True]), 1.0).tolist() == [False]
    with pytest.raises(RuntimeError, match="a float, which a int64 tensor cannot hold"):
        F.dropout(ints, 0.5)
    empty = tg.zeros(0, dtype=tg.int64)
    assert F.dropout(empty, 0.5) is empty
    x = tg.tensor([math.inf, 1.0])
    with np.errstate(invalid="ignore"):
        assert np.isnan(F.dropout(x, 1.0).numpy()[0])        # x * 0, as PyTorch computes it
