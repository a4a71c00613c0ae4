"""nll_loss, binary_cross_entropy(_with_logits), one_hot, pad, normalize and nn.init, against NumPy
references written here from PyTorch's documented formulas.

Property tests gradcheck the differentiable ones (first and second order; inputs kept away from
the kinks by construction); example tests pin the edges (probabilities of exactly 0 and 1, logits
of +-1000, zero vectors, everything ignored) and the errors. The initialisers are checked by the
statistics of 10^5 draws (std within 2% of the formula's; the standard error is about 0.2%) and
by their bounds.
"""
import contextlib
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from tinygrad_gpu.nn import init
from checks import check_op, shapes, spread, values

REDUCTIONS = st.sampled_from(["mean", "sum", "none"])


def np_reduce(losses, reduction):
    return losses if reduction == "none" else losses.sum() if reduction == "sum" else losses.mean()


def weights(shape):
    return values(shape, 0.5, 2.0)


# ----------------------------------------------------------------------------- nll_loss
def np_nll_loss(logp, target, weight=None, ignore_index=-100, reduction="mean"):
    """-weight[t] * logp[t] per target; ignored ones give 0; "mean" divides by the kept targets' weight."""
    per_class = np.moveaxis(logp, 1 if logp.ndim >= 2 else 0, -1)
    kept = target != ignore_index
    safe = np.where(kept, target, 0)
    picked = np.take_along_axis(per_class, safe[..., None], -1)[..., 0]
    class_weight = np.where(kept, (np.ones(per_class.shape[-1]) if weight is None else weight)[safe], 0.0)
    losses = -picked * class_weight
    return losses.sum() / class_weight.sum() if reduction == "mean" else np_reduce(losses, reduction)


@st.composite
def nll_case(draw):
    """Scores of shape (C,), (N, C) or (N, C, d); targets (some ignored, the first one never)."""
    n_classes, n, d = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    shape, target_shape = draw(st.sampled_from([((n_classes,), ()), ((n, n_classes), (n,)),
                                                ((n, n_classes, d), (n, d))]))
    ignore_index = draw(st.sampled_from([-100, 1]))
    classes = st.integers(0, n_classes - 1)
    target = draw(hnp.arrays(np.int64, target_shape, elements=st.one_of(classes, st.just(ignore_index))))
    target.reshape(-1)[:1] = draw(classes.filter(lambda c: c != ignore_index))     # so the mean is not 0 / 0
    weight = draw(st.none() | weights((n_classes,)))
    return draw(values(shape)), target, weight, ignore_index


@given(case=nll_case(), reduction=REDUCTIONS)
def test_nll_loss(case, reduction):
    logp, target, weight, ignore_index = case
    target_t = tg.tensor(target)
    weight_t = None if weight is None else tg.tensor(weight, dtype=tg.float64)
    check_op(lambda x: F.nll_loss(x, target_t, weight_t, ignore_index, reduction),
             lambda a: np_nll_loss(a, target, weight, ignore_index, reduction), logp, second_order=True)


def test_nll_loss_of_log_softmax_is_cross_entropy():
    logits = tg.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]], dtype=tg.float64)
    target = tg.tensor([2, 1])
    np.testing.assert_allclose(F.nll_loss(F.log_softmax(logits, 1), target).numpy(),
                               F.cross_entropy(logits, target).numpy(), rtol=1e-14)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("targets", ["indices", "probabilities"])
def test_cross_entropy_with_class_weights(reduction, smoothing, targets):
    """weight= gradchecked on (N, C, d) logits with an ignored target, against the formula written out: each
    class's term scaled by its weight; "mean" over class indices divides by the kept targets' total weight
    (smoothing's part too), over probabilities by their count. And against torch's where it is installed."""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((3, 4, 2)), rng.random(4) + 0.1
    if targets == "indices":
        target = np.array([[1, 3], [-100, 0], [2, 2]])
    else:
        target = rng.random((3, 4, 2))
        target /= target.sum(1, keepdims=True)

    def loss(logits):
        return F.cross_entropy(logits, tg.tensor(target), weight=tg.tensor(w), reduction=reduction,
                               label_smoothing=smoothing)

    def reference(logits):
        log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
        weighted = log_p * w[None, :, None]
        if targets == "probabilities":
            losses = -(((1 - smoothing) * target + smoothing / 4) * weighted).sum(1)
            return {"mean": losses.mean(), "sum": losses.sum(), "none": losses}[reduction]
        kept = target != -100
        picked = np.take_along_axis(weighted, np.where(kept, target, 0)[:, None], 1)[:, 0]
        losses = np.where(kept, -(1 - smoothing) * picked - smoothing / 4 * weighted.sum(1), 0.0)
        total = np.where(kept, w[np.where(kept, target, 0)], 0.0).sum()
        return {"mean": losses.sum() / total, "sum": losses.sum(), "none": losses}[reduction]
    check_op(loss, reference, x)
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(target), weight=torch.tensor(w),
                                             reduction=reduction, label_smoothing=smoothing)
    np.testing.assert_allclose(loss(tg.tensor(x)).numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_nll_loss_everything_ignored_gives_nan_for_the_mean():
    logp = tg.tensor([[-1.0, -2.0]], requires_grad=True)
    target = tg.tensor([-100])
    with np.errstate(invalid="ignore"):
        assert math.isnan(F.nll_loss(logp, target).item())     # 0 / 0, as in PyTorch
    assert F.nll_loss(logp, target, reduction="sum").item() == 0.0
    F.nll_loss(logp, target, reduction="sum").backward()
    np.testing.assert_array_equal(logp.grad.numpy(), [[0.0, 0.0]])


def test_nll_loss_errors():
    logp = tg.tensor([[-1.0, -2.0, -0.5]])
    with pytest.raises(IndexError, match="nll_loss: .*out of range for 3 classes"):
        F.nll_loss(logp, tg.tensor([3])).item()         # item(): on a GPU the check is read with the value
    with pytest.raises(TypeError, match="nll_loss: class-index targets must be integers, got float32"):
        F.nll_loss(logp, tg.tensor([1.0]))
    with pytest.raises(ValueError, match=r"nll_loss: input of shape \(1, 3\) needs class-index targets of shape"):
        F.nll_loss(logp, tg.tensor([1, 2]))
    with pytest.raises(RuntimeError, match=r"nll_loss: weight must hold one number per class, shape \(3,\)"):
        F.nll_loss(logp, tg.tensor([1]), weight=tg.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="nll_loss: input must have a class dimension"):
        F.nll_loss(tg.tensor(1.0), tg.tensor(0))
    with pytest.raises(ValueError, match="nll_loss: reduction must be"):
        F.nll_loss(logp, tg.tensor([1]), reduction="avg")


# ----------------------------------------------------------------------------- binary cross-entropy
def np_bce(x, t, weight=None, reduction="mean"):
    losses = -(t * np.maximum(np.log(x), -100) + (1 - t) * np.maximum(np.log1p(-x), -100))
    return np_reduce(losses if weight is None else losses * weight, reduction)


def np_bce_with_logits(x, t, weight=None, reduction="mean", pos_weight=None):
    log_weight = 1 if pos_weight is None else 1 + (pos_weight - 1) * t
    losses = (1 - t) * x + log_weight * np.logaddexp(0, -x)
    return np_reduce(losses if weight is None else losses * weight, reduction)


@st.composite
def bce_case(draw, x_values):
    shape = draw(shapes(max_side=3))          # two inputs, second order: small shapes keep it quick
    x, t = draw(x_values(shape)), draw(values(shape, 0.0, 1.0))
    weight = draw(st.none() | weights(shape[draw(st.integers(0, len(shape))):]))     # a trailing part: broadcasts
    return x, t, weight


@given(case=bce_case(lambda shape: values(shape, 0.05, 0.95)), reduction=REDUCTIONS)
def test_binary_cross_entropy(case, reduction):
    x, t, weight = case
    t = np.asarray(np.clip(t, 1e-3, 1 - 1e-3))      # central differences step the target by 1e-6: it must stay in [0, 1]
    weight_t = None if weight is None else tg.tensor(weight, dtype=tg.float64)
    check_op(lambda a, b: F.binary_cross_entropy(a, b, weight_t, reduction),
             lambda a, b: np_bce(a, b, weight, reduction), x, t, second_order=True)


def test_binary_cross_entropy_at_zero_and_one_is_finite_as_in_pytorch():
    x = tg.tensor([0.0, 1.0, 0.0, 1.0], dtype=tg.float64, requires_grad=True)
    t = tg.tensor([1.0, 0.0, 0.0, 1.0], dtype=tg.float64, requires_grad=True)
    loss = F.binary_cross_entropy(x, t, reduction="sum")
    assert loss.item() == 200.0                       # each log clamped at -100
    loss.backward()
    # PyTorch's gradient (x - t) / max(x (1 - x), 1e-12); the loss is linear in t, with slope log(1-x) - log(x)
    np.testing.assert_array_equal(x.grad.numpy(), [-1e12, 1e12, 0.0, 0.0])
    np.testing.assert_array_equal(t.grad.numpy(), [100.0, -100.0, 100.0, -100.0])


def test_binary_cross_entropy_errors():
    with pytest.raises(RuntimeError, match="binary_cross_entropy: all elements of input must be probabilities"):
        F.binary_cross_entropy(tg.tensor([0.5, 1.5]), tg.tensor([0.0, 1.0])).item()
    # nan is no probability either, and targets are checked too (as PyTorch does)
    with pytest.raises(RuntimeError, match="all elements of input must be probabilities"):
        F.binary_cross_entropy(tg.tensor([0.5, math.nan]), tg.tensor([0.0, 1.0])).item()
    with pytest.raises(RuntimeError, match="all elements of target must be probabilities"):
        F.binary_cross_entropy(tg.tensor([0.5, 0.5]), tg.tensor([0.0, 1.5])).item()
    with pytest.raises(ValueError, match=r"binary_cross_entropy: target of shape \(1,\) must have the input's shape"):
        F.binary_cross_entropy(tg.tensor([0.5, 0.5]), tg.tensor([1.0]))
    with pytest.raises(RuntimeError, match="binary_cross_entropy: shapes"):
        F.binary_cross_entropy(tg.tensor([0.5, 0.5]), tg.tensor([1.0, 0.0]), weight=tg.tensor([1.0, 2.0, 3.0]))


@st.composite
def logits_case(draw):
    x, t, weight = draw(bce_case(lambda shape: values(shape, -4.0, 4.0)))
    pos_weight = draw(st.none() | weights(x.shape[-1:])) if x.ndim else None
    return x, t, weight, pos_weight


@given(case=logits_case(), reduction=REDUCTIONS)
def test_binary_cross_entropy_with_logits(case, reduction):
    x, t, weight, pos_weight = case
    weight_t, pos_weight_t = (None if w is None else tg.tensor(w, dtype=tg.float64) for w in (weight, pos_weight))
    check_op(lambda a, b: F.binary_cross_entropy_with_logits(a, b, weight_t, reduction, pos_weight_t),
             lambda a, b: np_bce_with_logits(a, b, weight, reduction, pos_weight), x, t, second_order=True)


@pytest.mark.parametrize("dtype", [tg.float32, tg.float64])
def test_binary_cross_entropy_with_logits_at_1000(dtype):
    x = tg.tensor([-1000.0, 1000.0, -1000.0, 1000.0], dtype=dtype, requires_grad=True)
    t = tg.tensor([0.0, 1.0, 1.0, 0.0], dtype=dtype)
    loss = F.binary_cross_entropy_with_logits(x, t, reduction="none", pos_weight=tg.tensor([3.0], dtype=dtype))
    loss.sum().backward()
    np.testing.assert_array_equal(loss.numpy(), [0.0, 0.0, 3000.0, 1000.0])
    # d/dx = (1 - t) - (1 + (p - 1) t) sigmoid(-x)
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, -3.0, 1.0])


def test_binary_cross_entropy_with_logits_is_bce_of_sigmoid():
    x = tg.tensor([-2.0, 0.3, 1.5], dtype=tg.float64)
    t = tg.tensor([0.2, 1.0, 0.0], dtype=tg.float64)
    np.testing.assert_allclose(F.binary_cross_entropy_with_logits(x, t).numpy(),
                               F.binary_cross_entropy(x.sigmoid(), t).numpy(), rtol=1e-14)


def test_binary_cross_entropy_with_logits_errors():
    with pytest.raises(ValueError, match="binary_cross_entropy_with_logits: target of shape"):
        F.binary_cross_entropy_with_logits(tg.tensor([0.5, 0.5]), tg.tensor([1.0]))
    with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits: shapes"):
        F.binary_cross_entropy_with_logits(tg.tensor([[0.5, 0.5]]), tg.tensor([[1.0, 0.0]]),
                                           pos_weight=tg.tensor([1.0, 2.0, 3.0]))


# ----------------------------------------------------------------------------- smooth_l1, huber, kl_div
def np_smooth_l1(x, t, beta):
    z = np.abs(x - t)
    return np.where(z < beta, 0.5 * z * z / beta, z - 0.5 * beta) if beta else z


def np_huber(x, t, delta):
    z = np.abs(x - t)
    return np.where(z < delta, 0.5 * z * z, delta * (z - 0.5 * delta))


@st.composite
def pair_case(draw, kinks):
    """x and t of mutually broadcastable shapes, |x - t| kept 1e-3 away from the kinks."""
    shapes_ = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3)).input_shapes
    x, t = draw(values(shapes_[0])), draw(values(shapes_[1]))
    d = np.abs(np.broadcast_to(x, np.broadcast_shapes(x.shape, t.shape)) - t)
    for k in kinks:
        if np.any(np.abs(d - k) < 1e-3):
            return draw(pair_case(kinks))
    return x, t


@given(data=st.data(), beta=st.sampled_from([1.0, 0.5, 0.0]), reduction=REDUCTIONS)
def test_smooth_l1_loss(data, beta, reduction):
    x, t = data.draw(pair_case((0.0, beta)))
    check_op(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=beta),
             lambda a, b: np_reduce(np_smooth_l1(a, b, beta), reduction), x, t, second_order=True)


@given(data=st.data(), delta=st.sampled_from([1.0, 0.5, 2.0]), reduction=REDUCTIONS)
def test_huber_loss(data, delta, reduction):
    x, t = data.draw(pair_case((0.0, delta)))
    check_op(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=delta),
             lambda a, b: np_reduce(np_huber(a, b, delta), reduction), x, t, second_order=True)


def test_huber_is_delta_times_smooth_l1_and_the_slopes_meet_at_the_kink():
    x = tg.tensor([-3.0, -0.5, 0.25, 2.0, 0.75], dtype=tg.float64, requires_grad=True)
    t = tg.zeros(5, dtype=tg.float64)
    np.testing.assert_allclose(F.huber_loss(x, t, "none", delta=0.75).numpy(),
                               0.75 * F.smooth_l1_loss(x, t, reduction="none", beta=0.75).numpy(), rtol=1e-15)
    F.huber_loss(x, t, "sum", delta=0.75).backward()
    np.testing.assert_allclose(x.grad.numpy(), [-0.75, -0.5, 0.25, 0.75, 0.75])      # at |d| = delta: delta


def np_kl_div(x, t, reduction, log_target):
    if log_target:
        losses = np.exp(t) * (t - x)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            losses = np.where(t == 0, 0.0, t * np.log(np.where(t == 0, 1.0, t))) - t * x
    if reduction == "batchmean":
        return losses.sum() / x.shape[0] if x.ndim else losses.sum()
    return np_reduce(losses, reduction)


@given(data=st.data(), reduction=st.sampled_from(["batchmean", "sum", "mean", "none"]), log_target=st.booleans())
def test_kl_div(data, reduction, log_target):
    shapes_ = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3)).input_shapes
    x = data.draw(values(shapes_[0], -3.0, 0.0))                          # log-probabilities
    t = data.draw(values(shapes_[1], -3.0, 0.0) if log_target else values(shapes_[1], 0.05, 1.0))
    with pytest.warns(UserWarning, match="batch size") if reduction == "mean" else contextlib.nullcontext():
        check_op(lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=log_target),
                 lambda a, b: np_kl_div(a, b, reduction, log_target), x, t, second_order=True)


def test_kl_div_of_a_zero_target_is_zero_with_a_finite_gradient():
    x = tg.tensor([-1.0, -2.0], dtype=tg.float64, requires_grad=True)
    t = tg.tensor([0.0, 1.0], dtype=tg.float64, requires_grad=True)
    loss = F.kl_div(x, t, reduction="sum")
    assert loss.item() == 2.0                      # 0 log 0 = 0, and 1 (log 1 - (-2))
    loss.backward()
    assert np.isfinite(t.grad.numpy()).all()


def test_pointwise_losses_dtypes_and_errors_as_in_pytorch():
    ints = tg.tensor([0, 1])
    with pytest.raises(NotImplementedError, match="smooth_l1_loss: not implemented for int64"):
        F.smooth_l1_loss(ints, ints)
    assert F.smooth_l1_loss(ints, tg.tensor([2, 1]), reduction="sum", beta=0.0).tolist() == 2   # beta 0: l1
    with pytest.raises(RuntimeError, match="smooth_l1_loss: beta must be >= 0"):
        F.smooth_l1_loss(tg.ones(2), tg.ones(2), beta=-1.0)
    with pytest.raises(RuntimeError, match="huber_loss: delta must be > 0"):
        F.huber_loss(tg.ones(2), tg.ones(2), delta=0.0)
    with pytest.raises(NotImplementedError, match="huber_loss: not implemented for int64"):
        F.huber_loss(ints, ints)
    with pytest.raises(RuntimeError, match="cannot hold it"):          # the loss keeps input's dtype
        F.huber_loss(ints, tg.ones(2))
    assert F.huber_loss(tg.ones(2, dtype=tg.float16), tg.ones(2)).dtype == tg.float16
    # the other losses expand first: a 0-d input no longer gives way to the other's dtype
    assert F.smooth_l1_loss(tg.tensor(1.0), tg.ones(2, dtype=tg.float16)).dtype == tg.float32
    assert F.mse_loss(tg.tensor(1.0), tg.ones(2, dtype=tg.float16)).dtype == tg.float32
    with pytest.raises(NotImplementedError, match="mse_loss: not implemented for int64"):
        F.mse_loss(ints, ints)
    assert F.mse_loss(tg.tensor([True]), tg.tensor([0.5], dtype=tg.bfloat16)).dtype == tg.bfloat16
    with pytest.raises(RuntimeError, match="l1_loss.*bool") as refused:    # PyTorch's subtraction refuses bool
        F.l1_loss(tg.ones(2), tg.tensor([True, False]))
    assert refused.type is RuntimeError
    for fn in (F.smooth_l1_loss, F.huber_loss, F.mse_loss, F.l1_loss):
        with pytest.raises(RuntimeError, match="cannot be broadcast"):      # the shapes before the reduction
            fn(tg.ones(2), tg.ones(3), reduction="batchmean")
        with pytest.raises(ValueError, match="reduction must be"):
            fn(tg.ones(2), tg.ones(2), reduction="batchmean")
    with pytest.raises(RuntimeError, match="kl_div: integer inputs are not supported"):
        F.kl_div(ints, tg.ones(2), reduction="sum")
    with pytest.raises(ValueError, match="kl_div: reduction must be"):
        F.kl_div(tg.ones(2), tg.ones(2), reduction="avg")
    assert F.kl_div(tg.tensor(-1.0), tg.tensor(0.5), reduction="batchmean").shape == ()      # 0-d: the sum


def test_new_losses_are_pytorchs():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, t = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    p = rng.uniform(0.05, 1, (3, 4))
    for ours, theirs in [(F.smooth_l1_loss(tg.tensor(x), tg.tensor(t), beta=0.5),
                          torch.nn.functional.smooth_l1_loss(torch.tensor(x), torch.tensor(t).expand(3, 4), beta=0.5)),
                         (F.huber_loss(tg.tensor(x), tg.tensor(t), reduction="sum", delta=0.7),
                          torch.nn.functional.huber_loss(torch.tensor(x), torch.tensor(t).expand(3, 4), reduction="sum",
                                                         delta=0.7)),
                         (F.kl_div(tg.tensor(x), tg.tensor(p), reduction="batchmean"),
                          torch.nn.functional.kl_div(torch.tensor(x), torch.tensor(p), reduction="batchmean")),
                         (F.kl_div(tg.tensor(x), tg.tensor(x), reduction="none", log_target=True),
                          torch.nn.functional.kl_div(torch.tensor(x), torch.tensor(x), reduction="none",
                                                     log_target=True))]:
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-15)


# ----------------------------------------------------------------------------- one_hot
@pytest.mark.parametrize("dtype", [tg.int64])
def test_one_hot(dtype):
    ids = np.array([[0, 2], [1, 0]])
    out = F.one_hot(tg.tensor(ids, dtype=dtype))
    assert out.dtype == tg.int64 and out.shape == (2, 2, 3)            # classes: the largest value + 1
    np.testing.assert_array_equal(out.numpy(), np.eye(3, dtype=np.int64)[ids])
    np.testing.assert_array_equal(F.one_hot(tg.tensor(ids, dtype=dtype), 5).numpy(), np.eye(5, dtype=np.int64)[ids])
    np.testing.assert_array_equal(F.one_hot(tg.tensor(2), 4).numpy(), [0, 0, 1, 0])
    assert F.one_hot(tg.zeros(0, dtype=dtype), 3).shape == (0, 3)


def test_one_hot_errors():
    with pytest.raises(RuntimeError, match="one_hot: class -1 is out of range for 3 classes"):
        F.one_hot(tg.tensor([0, -1, 2]))
    with pytest.raises(RuntimeError, match="one_hot: .*out of range for 2 classes"):
        F.one_hot(tg.tensor([0, 2]), 2).numpy()           # numpy(): on a GPU the check is read with the value
    with pytest.raises(RuntimeError, match="one_hot: expects an int64 tensor of class indices, got float32"):
        F.one_hot(tg.tensor([1.0]))
    with pytest.raises(RuntimeError, match="got int32"):                  # PyTorch takes int64 only
        F.one_hot(tg.tensor([1], dtype=tg.int32))
    with pytest.raises(RuntimeError, match="one_hot: cannot infer the number of classes from an empty tensor"):
        F.one_hot(tg.zeros(0, dtype=tg.int64))
    with pytest.raises(RuntimeError, match="one_hot: num_classes must be -1"):
        F.one_hot(tg.tensor([0]), -2)


# ----------------------------------------------------------------------------- pad
def np_pad(x, pad, mode="constant", value=0.0):
    """PyTorch's pad with NumPy: np.pad with the positive amounts, the negative ones cropped off; circular
    padding crops first and then wraps around what is left."""
    dims = [(x.ndim - 1 - i, pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]
    if mode == "circular":
        keep = [slice(None)] * x.ndim
        for d, before, after in dims:
            keep[d] = slice(max(-before, 0), x.shape[d] - max(-after, 0))
        x = x[tuple(keep)]
        dims = [(d, max(before, 0), max(after, 0)) for d, before, after in dims]
    grow, crop = [(0, 0)] * x.ndim, [slice(None)] * x.ndim
    for dim, before, after in dims:
        grow[dim] = (max(before, 0), max(after, 0))
        crop[dim] = slice(max(-before, 0), x.shape[dim] + max(before, 0) + max(after, 0) - max(-after, 0))
    np_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    extra = {"constant_values": value} if mode == "constant" else {}
    return np.pad(x, grow, mode=np_mode, **extra)[tuple(crop)]


@st.composite
def pad_case(draw):
    """A constant padding of any dims (crops included), or a reflect / replicate / circular padding of the last
    1-3 dims of an input with one or two more (PyTorch's rule), crops included, within each mode's limits."""
    mode = draw(st.sampled_from(["constant", "reflect", "replicate", "circular"]))
    if mode == "constant":
        shape = draw(shapes(min_dims=1))
        padded = draw(st.integers(1, len(shape)))
    else:
        padded = draw(st.integers(1, 3))
        shape = draw(shapes(min_dims=padded + 1, max_dims=padded + 2, max_side=3 if padded == 3 else 4))
    pad = []
    for side in reversed(shape[len(shape) - padded:]):
        if mode == "constant":                # crops too, as long as something (or nothing) is left
            before = draw(st.integers(-side, 3))
            after = draw(st.integers(-(side + min(before, 0)), 3))
        elif mode == "reflect":               # mirrors at most side - 1; keeps at least one element
            before = draw(st.integers(-(side - 1), side - 1))
            after = draw(st.integers(max(-(side - 1), 1 - side - before), side - 1))
        elif mode == "replicate":
            before = draw(st.integers(-(side - 1), 3))
            after = draw(st.integers(1 - side - before, 3))
        else:                                 # crops first, then wraps around what is left at most once
            amounts = st.integers(-(side - 1), side)
            before, after = draw(st.tuples(amounts, amounts).filter(
                lambda ba: 1 <= side + min(ba[0], 0) + min(ba[1], 0) >= max(ba)))
        pad += [before, after]
    return draw(values(shape)), tuple(pad), mode


@given(case=pad_case(), value=st.sampled_from([0.0, -1.5]))
def test_pad(case, value):
    x, pad, mode = case
    fill = {"value": value} if mode == "constant" else {}
    check_op(lambda t: F.pad(t, pad, mode, **fill), lambda a: np_pad(a, pad, mode, value), x, second_order=True)


def test_pad_examples():
    x = tg.tensor([[1, 2, 3]])
    assert F.pad(x, (2, 1), "reflect").tolist() == [[3, 2, 1, 2, 3, 2]]
    assert F.pad(x, (2, 1), "replicate").tolist() == [[1, 1, 1, 2, 3, 3]]
    assert F.pad(x, (2, 1), "circular").tolist() == [[2, 3, 1, 2, 3, 1]]
    assert F.pad(x, (-1, 1), "circular").tolist() == [[2, 3, 2]]       # crop 1, then wrap what is left
    assert F.pad(x, (1, -1), "circular").tolist() == [[2, 1, 2]]
    padded = F.pad(tg.tensor([1, 2, 3]), (1, -1), value=7)
    assert padded.tolist() == [7, 1, 2] and padded.dtype == tg.int64
    assert F.pad(tg.ones(2, 3), (1, 1, 2, 0)).shape == (4, 5)      # last dim first, as in PyTorch
    assert F.pad(tg.ones(2, 2, 3), (0, 0, -1, -1), "reflect").shape == (2, 0, 3)   # one size left >= 1: allowed


def test_pad_is_pytorchs():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for shape, pad, mode in [((2, 3, 4), (-1, 2, 1, -1), "circular"), ((1, 2, 4), (-1, 2), "circular"),
                             ((2, 3, 4), (2, -1, 1, 2), "reflect"), ((1, 2, 3, 4), (-1, 3, 2, -2), "replicate"),
                             ((2, 2, 2, 2, 3), (1, 1, -1, 0, 1, 1), "circular"), ((3, 4), (-2, 1, 1, -3), "constant")]:
        x = rng.standard_normal(shape)
        np.testing.assert_array_equal(F.pad(tg.tensor(x), pad, mode).numpy(),
                                      torch.nn.functional.pad(torch.tensor(x), pad, mode).numpy(), err_msg=str(pad))


def test_pad_repeated_sources_add_their_gradients():
    x = tg.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    F.pad(x, (2, 2), "replicate").sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[3.0, 1.0, 3.0]])


def test_pad_errors():
    x = tg.ones(2, 3)
    with pytest.raises(RuntimeError, match="pad: needs two amounts"):
        F.pad(x, (1, 1, 1))
    with pytest.raises(RuntimeError, match="pad: 6 amounts pad 3 dims, but the input of shape"):
        F.pad(x, (1,) * 6)
    with pytest.raises(RuntimeError, match=r"pad: reflect padding \(3, 0\) must be less than the size 3"):
        F.pad(x, (3, 0), "reflect")
    with pytest.raises(RuntimeError, match="pad: circular padding .* wrap around more than once"):
        F.pad(x, (0, 4), "circular")
    with pytest.raises(RuntimeError, match="wraps around what its crop leaves"):
        F.pad(x, (3, -1), "circular")
    with pytest.raises(RuntimeError, match="pad: padding .* crops dim 1 of size 3 below nothing"):
        F.pad(x, (-2, -2))
    with pytest.raises(RuntimeError, match="below nothing"):
        F.pad(tg.ones(3, 0), (-1, 2))                  # PyTorch crops before it pads: -1 of nothing
    with pytest.raises(NotImplementedError, match="unrecognised padding mode 'mirror'"):
        F.pad(x, (1, 1), "mirror")
    with pytest.raises(RuntimeError, match="pad: mode 'reflect' takes no value"):
        F.pad(x, (1, 1), "reflect", value=1.0)
    assert F.pad(x, (1, 1), "reflect", value=0).shape == (2, 5)      # 0 passes, as in PyTorch
    # PyTorch's non-constant modes pad the last 1-3 dims of an input with one or two more
    with pytest.raises(NotImplementedError, match="not supported for a 1-d input"):
        F.pad(tg.ones(3), (1, 1), "reflect")
    with pytest.raises(NotImplementedError, match="not supported for a 2-d input"):
        F.pad(x, (1, 1, 1, 1), "replicate")
    with pytest.raises(RuntimeError, match="every dim but the batch"):
        F.pad(tg.ones(2, 0, 3), (1, 1), "reflect")
    with pytest.raises(RuntimeError, match="too small"):                 # no padded dim left at all
        F.pad(tg.ones(1, 2, 2), (-1, -1, -1, -1), "replicate")
    assert F.pad(tg.ones(1, 2, 3), (0, 0, -1, -1), "replicate").shape == (1, 0, 3)    # one left is enough
    with pytest.raises(NotImplementedError, match="bool"):
        F.pad(tg.ones(2, 3, dtype=tg.bool), (1, 1), "replicate")
    assert F.pad(tg.ones(2, 3, dtype=tg.bool), (1, 1), "circular").dtype == tg.bool


# ----------------------------------------------------------------------------- normalize
def np_normalize(x, p, dim, eps=1e-12):
    norm = np.abs(x).max(dim, keepdims=True) if p == math.inf else (np.abs(x) ** p).sum(dim, keepdims=True) ** (1 / p)
    return x / np.maximum(norm, eps)


@given(data=st.data(), p=st.sampled_from([1.0, 2.0, 3.0, math.inf]))
def test_normalize(data, p):
    shape = data.draw(shapes(min_dims=1, max_side=3))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    if p == math.inf:       # positive and 0.25 apart: no ties for the largest |x|, not even within gradcheck's step
        x = data.draw(spread(shape))
        x = x - x.min() + 0.5
    else:                   # |x| has a kink at 0 (p = 1)
        x = data.draw(values(shape, away_from=(0.0,)))
    check_op(lambda t: F.normalize(t, p, dim), lambda a: np_normalize(a, p, dim), x, second_order=True)


def test_normalize_zero_vector_stays_zero_with_a_finite_gradient():
    x = tg.zeros(2, 3, dtype=tg.float64, requires_grad=True)
    y = F.normalize(x, dim=1)
    y.sum().backward()
    np.testing.assert_array_equal(y.numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 3), 1e12))     # 1 / eps, as PyTorch gives it


def test_normalize_errors_and_other_norms():
    with pytest.raises(RuntimeError, match="normalize: the norm needs a floating-point tensor, got int64"):
        F.normalize(tg.ones(2, 2, dtype=tg.int64))
    with pytest.raises(IndexError, match="dim 2"):
        F.normalize(tg.ones(2, 2), dim=2)
    x = np.array([[3.0, 0.0, -4.0], [0.0, 0.0, 2.0]])
    # p = 0 divides by the count of nonzeros, p < 0 by the generalised mean's norm, as PyTorch's vector_norm
    np.testing.assert_allclose(F.normalize(tg.tensor(x), p=0).numpy(), x / [[2.0], [1.0]])
    np.testing.assert_allclose(F.normalize(tg.tensor(x), p=-math.inf, dim=0).numpy(), x / np.maximum(np.abs(x).min(0), 1e-12))


def test_normalize_nan_and_inf_as_in_pytorch():
    x = np.array([[math.inf, 1.0, 0.0], [math.nan, 1.0, 1.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    with np.errstate(invalid="ignore"):                 # inf / inf and 0 / 0, on purpose
        out = F.normalize(tg.tensor(x), dim=1).numpy()
    np.testing.assert_array_equal(np.isnan(out), [[True, False, False], [True, True, True], [False, False, False]])
    np.testing.assert_array_equal(out[0, 1:], [0.0, 0.0])      # 1 / inf
    # float16's eps of 1e-12 is 0: a zero vector gives 0 / 0
    with np.errstate(invalid="ignore"):
        assert np.isnan(F.normalize(tg.zeros(1, 2, dtype=tg.float16)).numpy()).all()


# ----------------------------------------------------------------------------- nn.init
def stats(t):
    a = t.numpy().astype(np.float64)
    return a.mean(), a.std(), a.min(), a.max()


@pytest.mark.parametrize("dtype", [tg.float32, tg.float64])
@pytest.mark.parametrize("mode", ["fan_in", "fan_out"])
def test_kaiming_uniform(mode, dtype):
    w = tg.empty(400, 250, dtype=dtype)
    assert init.kaiming_uniform_(w, a=0.5, mode=mode) is w and w.dtype == dtype
    fan = 250 if mode == "fan_in" else 400
    std = math.sqrt(2 / (1 + 0.5 ** 2)) / math.sqrt(fan)
    mean, sd, low, high = stats(w)
    bound = math.sqrt(3) * std
    assert -bound <= low < -0.99 * bound and 0.99 * bound < high <= bound
    assert sd == pytest.approx(std, rel=0.02) and abs(mean) < 0.02 * std


def test_kaiming_normal():
    w = tg.empty(250, 100, 2, 2)          # a convolution's (out, in, kh, kw): fan_in = 100 * 4
    init.kaiming_normal_(w, nonlinearity="relu")
    mean, sd, _, _ = stats(w)
    assert sd == pytest.approx(math.sqrt(2) / math.sqrt(400), rel=0.02) and abs(mean) < 0.02 * sd


def test_xavier():
    w = tg.empty(400, 250)
    init.xavier_uniform_(w, gain=2.0)
    bound = 2.0 * math.sqrt(6 / 650)
    mean, sd, low, high = stats(w)
    assert -bound <= low < -0.99 * bound and 0.99 * bound < high <= bound
    assert sd == pytest.approx(bound / math.sqrt(3), rel=0.02)
    init.xavier_normal_(w, gain=init.calculate_gain("tanh"))
    mean, sd, _, _ = stats(w)
    assert sd == pytest.approx(5 / 3 * math.sqrt(2 / 650), rel=0.02) and abs(mean) < 0.02 * sd


def test_trunc_normal():
    mu, sigma, a, b = 1.0, 2.0, -1.0, 2.0           # a window that is not symmetric about the mean
    w = init.trunc_normal_(tg.empty(100_000), mu, sigma, a, b)
    mean, sd, low, high = stats(w)
    assert a <= low < a + 0.01 and b - 0.01 < high <= b

    def pdf(z):
        return math.exp(-z * z / 2) / math.sqrt(2 * math.pi)

    def cdf(z):
        return (1 + math.erf(z / math.sqrt(2))) / 2
    alpha, beta = (a - mu) / sigma, (b - mu) / sigma
    mass = cdf(beta) - cdf(alpha)
    shift = (pdf(alpha) - pdf(beta)) / mass
    expected_sd = sigma * math.sqrt(1 + (alpha * pdf(alpha) - beta * pdf(beta)) / mass - shift ** 2)
    assert mean == pytest.approx(mu + sigma * shift, abs=0.02 * expected_sd)
    assert sd == pytest.approx(expected_sd, rel=0.02)
    with pytest.raises(ValueError, match="trunc_normal_: needs a < b"):
        init.trunc_normal_(w, a=1.0, b=1.0)


def test_linear_default_is_kaiming_uniform_with_a_sqrt5():
    """PyTorch initialises Linear's weight with kaiming_uniform_(a=sqrt(5)); ours draws the same numbers."""
    tg.manual_seed(3)
    w = init.kaiming_uniform_(tg.empty(30, 20), a=math.sqrt(5))
    tg.manual_seed(3)
    np.testing.assert_allclose(w.numpy(), tg.nn.Linear(20, 30).weight.numpy(), rtol=1e-6)


def test_constant_zeros_ones_eye():
    w = tg.empty(2, 3, dtype=tg.float64)
    np.testing.assert_array_equal(init.constant_(w, 0.25).numpy(), np.full((2, 3), 0.25))
    np.testing.assert_array_equal(init.zeros_(w).numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(init.ones_(w).numpy(), np.ones((2, 3)))
    np.testing.assert_array_equal(init.eye_(w).numpy(), np.eye(2, 3))
    assert w.dtype == tg.float64
    with pytest.raises(ValueError, match=r"eye_: needs a 2-D tensor, got shape \(2, 2, 2\)"):
        init.eye_(tg.empty(2, 2, 2))


@pytest.mark.parametrize("nonlinearity, param, gain", [
    ("linear", None, 1.0), ("conv2d", None, 1.0), ("conv_transpose3d", None, 1.0), ("sigmoid", None, 1.0),
    ("tanh", None, 5 / 3), ("relu", None, math.sqrt(2)), ("selu", None, 0.75),
    ("leaky_relu", None, math.sqrt(2 / (1 + 0.01 ** 2))), ("leaky_relu", 0.2, math.sqrt(2 / 1.04)),
    ("leaky_relu", 0, math.sqrt(2)),
])
def test_calculate_gain(nonlinearity, param, gain):
    assert init.calculate_gain(nonlinearity, param) == pytest.approx(gain, rel=1e-15)


def test_fans_and_errors():
    assert init._calculate_fan_in_and_fan_out(tg.empty(16, 8, 3, 3)) == (72, 144)
    assert init._calculate_fan_in_and_fan_out(tg.empty(5, 7)) == (7, 5)
    with pytest.raises(ValueError, match="fan in and fan out need a tensor of at least 2 dims"):
        init.kaiming_uniform_(tg.empty(5))
    with pytest.raises(ValueError, match="mode must be 'fan_in' or 'fan_out', got 'fan_avg'"):
        init.kaiming_normal_(tg.empty(5, 5), mode="fan_avg")
    with pytest.raises(ValueError, match="calculate_gain: unsupported nonlinearity 'gelu'"):
        init.calculate_gain("gelu")
    with pytest.raises(ValueError, match="calculate_gain: the negative slope of leaky_relu must be a number"):
        init.calculate_gain("leaky_relu", True)
