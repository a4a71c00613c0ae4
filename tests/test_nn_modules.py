"""The loss and activation Modules (nn/loss_modules.py, nn/activation_modules.py) and tg.nn.utils' clipping:
each Module gives its functional's values and gradients, holds its options the way torch's does, and agrees
with torch.nn where torch is installed."""
import math

import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu import nn
from tinygrad_gpu.nn import functional as F

RNG = np.random.default_rng(0)
LOGITS = RNG.standard_normal((5, 4))
LABELS = np.array([0, 3, 1, 3, 2])
PROBS = 1 / (1 + np.exp(-RNG.standard_normal((5, 4))))
BINARY = (RNG.random((5, 4)) > 0.5).astype(np.float64)
CLASS_WEIGHT = np.array([0.5, 1.0, 2.0, 1.5])


def ours(array, grad=False):
    return tg.tensor(array, dtype=tg.float64, requires_grad=grad) if array.dtype.kind == "f" else tg.tensor(array)


# ----------------------------------------------------------------------------- losses
LOSSES = {   # name -> (our module, torch's constructor as a function of torch, input, target)
    "MSELoss": (lambda: nn.MSELoss(), lambda torch: torch.nn.MSELoss(), LOGITS, PROBS),
    "MSELoss-sum": (lambda: nn.MSELoss(reduction="sum"), lambda torch: torch.nn.MSELoss(reduction="sum"),
                    LOGITS, PROBS),
    "CrossEntropyLoss": (lambda: nn.CrossEntropyLoss(), lambda torch: torch.nn.CrossEntropyLoss(), LOGITS, LABELS),
    "CrossEntropyLoss-options": (
        lambda: nn.CrossEntropyLoss(ignore_index=3, label_smoothing=0.1, reduction="sum"),
        lambda torch: torch.nn.CrossEntropyLoss(ignore_index=3, label_smoothing=0.1, reduction="sum"), LOGITS, LABELS),
    "CrossEntropyLoss-probabilities": (lambda: nn.CrossEntropyLoss(label_smoothing=0.2),
                                       lambda torch: torch.nn.CrossEntropyLoss(label_smoothing=0.2), LOGITS,
                                       PROBS / PROBS.sum(1, keepdims=True)),
    "CrossEntropyLoss-weighted": (
        lambda: nn.CrossEntropyLoss(tg.tensor(CLASS_WEIGHT, dtype=tg.float64), label_smoothing=0.1),
        lambda torch: torch.nn.CrossEntropyLoss(torch.tensor(CLASS_WEIGHT), label_smoothing=0.1), LOGITS, LABELS),
    "L1Loss": (lambda: nn.L1Loss(), lambda torch: torch.nn.L1Loss(), LOGITS, PROBS),
    "NLLLoss": (lambda: nn.NLLLoss(), lambda torch: torch.nn.NLLLoss(), LOGITS, LABELS),
    "NLLLoss-weighted": (lambda: nn.NLLLoss(weight=tg.tensor(CLASS_WEIGHT, dtype=tg.float64), ignore_index=1),
                         lambda torch: torch.nn.NLLLoss(weight=torch.tensor(CLASS_WEIGHT), ignore_index=1),
                         LOGITS, LABELS),
    "BCELoss": (lambda: nn.BCELoss(), lambda torch: torch.nn.BCELoss(), PROBS, BINARY),
    "BCELoss-weighted": (lambda: nn.BCELoss(weight=tg.tensor(CLASS_WEIGHT, dtype=tg.float64), reduction="none"),
                         lambda torch: torch.nn.BCELoss(weight=torch.tensor(CLASS_WEIGHT), reduction="none"),
                         PROBS, BINARY),
    "BCEWithLogitsLoss": (lambda: nn.BCEWithLogitsLoss(), lambda torch: torch.nn.BCEWithLogitsLoss(), LOGITS, BINARY),
    "BCEWithLogitsLoss-pos_weight": (
        lambda: nn.BCEWithLogitsLoss(pos_weight=tg.tensor(CLASS_WEIGHT, dtype=tg.float64), reduction="sum"),
        lambda torch: torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(CLASS_WEIGHT), reduction="sum"),
        LOGITS, BINARY),
}


@pytest.mark.parametrize("name", list(LOSSES))
def test_loss_module_matches_torch(name):
    torch = pytest.importorskip("torch")
    make_ours, make_theirs, x, t = LOSSES[name]
    xo = ours(x, grad=True)
    loss = make_ours()(xo, ours(t))
    loss.sum().backward()
    xt = torch.tensor(x, requires_grad=True)
    reference = make_theirs(torch)(xt, torch.tensor(t))
    reference.sum().backward()
    np.testing.assert_allclose(loss.numpy(), reference.detach().numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_loss_modules_are_their_functionals():
    x, t = ours(LOGITS), ours(LABELS)
    assert nn.CrossEntropyLoss(label_smoothing=0.1)(x, t).item() == \
        F.cross_entropy(x, t, label_smoothing=0.1).item()
    assert nn.MSELoss()(x, ours(PROBS)).item() == pytest.approx(np.mean((LOGITS - PROBS) ** 2), rel=1e-12)
    none = nn.NLLLoss(reduction="none")(x, t).numpy()
    np.testing.assert_array_equal(none, -LOGITS[np.arange(5), LABELS])
    # by hand: BCE with logits is softplus(x) - t x
    by_hand = np.mean(np.log1p(np.exp(LOGITS)) - BINARY * LOGITS)
    assert nn.BCEWithLogitsLoss()(x, ours(BINARY)).item() == pytest.approx(by_hand, rel=1e-12)


def test_loss_weights_are_buffers_with_torchs_names():
    w = tg.tensor(CLASS_WEIGHT)
    assert list(nn.NLLLoss(weight=w).state_dict()) == ["weight"]
    assert list(nn.BCEWithLogitsLoss(weight=w, pos_weight=w).state_dict()) == ["weight", "pos_weight"]
    assert list(nn.BCELoss().state_dict()) == [] and list(nn.CrossEntropyLoss().state_dict()) == []


def test_loss_weight_state_dict_names_match_torch():
    torch = pytest.importorskip("torch")
    w = CLASS_WEIGHT
    assert list(nn.BCEWithLogitsLoss(weight=tg.tensor(w), pos_weight=tg.tensor(w)).state_dict()) == \
        list(torch.nn.BCEWithLogitsLoss(weight=torch.tensor(w), pos_weight=torch.tensor(w)).state_dict())
    assert list(nn.NLLLoss(weight=tg.tensor(w)).state_dict()) == \
        list(torch.nn.NLLLoss(weight=torch.tensor(w)).state_dict())


def test_loss_options_are_checked_when_built_and_keyword_only():
    with pytest.raises(ValueError, match="MSELoss: reduction must be 'mean', 'sum' or 'none', got 'avg'"):
        nn.MSELoss(reduction="avg")
    with pytest.raises(ValueError, match="CrossEntropyLoss: label_smoothing must be in"):
        nn.CrossEntropyLoss(label_smoothing=1.5)
    with pytest.raises(TypeError):                     # torch's second positional argument is size_average
        nn.CrossEntropyLoss(None, -100)
    weight = tg.tensor(CLASS_WEIGHT)
    assert nn.CrossEntropyLoss(weight).weight is weight and list(nn.CrossEntropyLoss(weight).state_dict()) == ["weight"]


# ----------------------------------------------------------------------------- activations
X = np.concatenate([np.linspace(-30, 30, 13), RNG.standard_normal(11)]).reshape(4, 6)
X[0, 0] = 25.0   # softplus with beta=2 passes its threshold of 20 here

ACTIVATIONS = {  # name -> (ours, torch's as a function of torch)
    "Identity": (lambda: nn.Identity(54, unused=1), lambda torch: torch.nn.Identity(54, unused=1)),
    "Tanh": (lambda: nn.Tanh(), lambda torch: torch.nn.Tanh()),
    "Sigmoid": (lambda: nn.Sigmoid(), lambda torch: torch.nn.Sigmoid()),
    "SiLU": (lambda: nn.SiLU(), lambda torch: torch.nn.SiLU()),
    "Softmax": (lambda: nn.Softmax(dim=1), lambda torch: torch.nn.Softmax(dim=1)),
    "Softmax-0": (lambda: nn.Softmax(0), lambda torch: torch.nn.Softmax(0)),
    "LogSoftmax": (lambda: nn.LogSoftmax(dim=-1), lambda torch: torch.nn.LogSoftmax(dim=-1)),
    "LeakyReLU": (lambda: nn.LeakyReLU(), lambda torch: torch.nn.LeakyReLU()),
    "LeakyReLU-0.2": (lambda: nn.LeakyReLU(0.2), lambda torch: torch.nn.LeakyReLU(0.2)),
    "ELU": (lambda: nn.ELU(), lambda torch: torch.nn.ELU()),
    "ELU-0.5": (lambda: nn.ELU(alpha=0.5), lambda torch: torch.nn.ELU(alpha=0.5)),
    "Softplus": (lambda: nn.Softplus(), lambda torch: torch.nn.Softplus()),
    "Softplus-beta": (lambda: nn.Softplus(beta=2.0, threshold=10.0), lambda torch: torch.nn.Softplus(2.0, 10.0)),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_module_matches_torch(name):
    torch = pytest.importorskip("torch")
    make_ours, make_theirs = ACTIVATIONS[name]
    upstream = RNG.standard_normal(X.shape)
    xo = ours(X, grad=True)
    y = make_ours()(xo)
    (y * ours(upstream)).sum().backward()
    xt = torch.tensor(X, requires_grad=True)
    module = make_theirs(torch)
    yt = module(xt)
    (yt * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-15)
    assert repr(make_ours()) == repr(module)


def test_activation_values_by_formula():
    x = ours(X)
    np.testing.assert_allclose(nn.Sigmoid()(x).numpy(), 1 / (1 + np.exp(-X)), rtol=1e-12)
    np.testing.assert_allclose(nn.SiLU()(x).numpy(), X / (1 + np.exp(-X)), rtol=1e-12)
    np.testing.assert_allclose(nn.LeakyReLU(0.2)(x).numpy(), np.where(X > 0, X, 0.2 * X), rtol=1e-15)
    np.testing.assert_allclose(nn.ELU(0.5)(x).numpy(), np.where(X > 0, X, 0.5 * np.expm1(np.minimum(X, 0))),
                               rtol=1e-12, atol=1e-15)
    softmax = np.exp(X - X.max(1, keepdims=True))
    softmax /= softmax.sum(1, keepdims=True)
    np.testing.assert_allclose(nn.Softmax(dim=1)(x).numpy(), softmax, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(nn.LogSoftmax(dim=1)(x).exp().numpy(), softmax, rtol=1e-12, atol=1e-300)
    beta = 2.0
    expected = np.where(beta * X > 10, X, np.log1p(np.exp(beta * X)) / beta)
    np.testing.assert_allclose(nn.Softplus(beta, 10.0)(x).numpy(), expected, rtol=1e-12)
    assert nn.Identity()(x) is x


def test_activation_modules_in_a_sequential_train():
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 8), nn.SiLU(), nn.Linear(8, 2),
                          nn.LogSoftmax(dim=1))
    x, y = tg.randn(16, 3), tg.tensor(np.arange(16) % 2)
    opt = tg.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(30):
        loss = nn.NLLLoss()(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] and all(math.isfinite(v) for v in losses)


def test_activation_option_errors():
    with pytest.raises(ValueError, match="Softmax: dim=None would guess.*Softmax\\(dim=-1\\)"):
        nn.Softmax()(tg.zeros(2, 3))
    with pytest.raises(ValueError, match="LogSoftmax: dim=None"):
        nn.LogSoftmax()(tg.zeros(2, 3))
    for module in (nn.SiLU, nn.LeakyReLU, nn.ELU):
        with pytest.raises(ValueError, match=f"{module.__name__}: inplace=True is not supported"):
            module(inplace=True)


# ----------------------------------------------------------------------------- nn.utils
def test_nn_utils_is_reachable_and_is_the_optimizers_clip():
    from tinygrad_gpu.optim import clip_grad_norm_
    assert tg.nn.utils.clip_grad_norm_ is clip_grad_norm_
    p = nn.Parameter(tg.zeros(4))
    p.grad = tg.tensor([3.0, 4.0, 0.0, 0.0])
    norm = tg.nn.utils.clip_grad_norm_([p], 1.0)
    assert norm.item() == pytest.approx(5.0)
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8, 0, 0], rtol=1e-5)


def test_clip_grad_value_clamps_each_entry_in_place():
    a, b, c = nn.Parameter(tg.zeros(3)), nn.Parameter(tg.zeros(2, 2)), nn.Parameter(tg.zeros(1))
    a.grad = tg.tensor([1.0, -3.0, 0.2])
    b.grad = tg.tensor([[float("nan"), -0.1], [0.5, 9.0]])
    grad_array = a.grad.data
    assert tg.nn.utils.clip_grad_value_([a, b, c], 0.5) is None          # c has no gradient: skipped
    assert a.grad.data is grad_array
    np.testing.assert_array_equal(a.grad.numpy(), np.array([0.5, -0.5, 0.2], np.float32))
    np.testing.assert_array_equal(b.grad.numpy(), np.array([[np.nan, -0.1], [0.5, 0.5]], np.float32))
    tg.nn.utils.clip_grad_value_(a, 0.1)                                  # one tensor, as torch allows
    np.testing.assert_array_equal(a.grad.numpy(), np.array([0.1, -0.1, 0.1], np.float32))
    with pytest.raises(ValueError, match="clip_grad_value_: clip_value must be a non-negative number, got -1.0"):
        tg.nn.utils.clip_grad_value_([a], -1)


def test_clip_grad_value_matches_torch():
    torch = pytest.importorskip("torch")
    g = (RNG.standard_normal((3, 5)) * 3).astype(np.float32)
    p = nn.Parameter(tg.tensor(g))
    p.grad = tg.tensor(g)
    q = torch.nn.Parameter(torch.tensor(g))
    q.grad = torch.tensor(g)
    tg.nn.utils.clip_grad_value_(p, 1.25)
    torch.nn.utils.clip_grad_value_(q, 1.25)
    np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
