"""Optimizers, schedules and gradient clipping against torch.optim's documented algorithms.

Each update rule is written out again here in NumPy (float64) from PyTorch's documentation and
run beside ours for several steps; the gradients depend on the current parameters, so an error
in any step compounds into the later ones instead of hiding.
"""
import math

import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu.nn import GPT, GPTConfig
from tinygrad_gpu.optim import SGD, Adam, AdamW, clip_grad_norm_
from tinygrad_gpu.optim.lr_scheduler import LambdaLR, WarmupCosineLR, warmup_cosine

STEPS = 6
TOL = {np.float32: dict(rtol=2e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-14)}
SHAPES = [(3, 4), (5,), ()]


# ----------------------------------------------------------------------------- references
def reference_sgd(lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    """torch.optim.SGD's algorithm, one parameter at a time: (p, g, state) -> new p."""
    def step(p, g, state):
        if weight_decay:
            g = g + weight_decay * p
        if momentum:
            if "buf" not in state:
                state["buf"] = g.copy()                       # first step: no dampening
            else:
                state["buf"] = momentum * state["buf"] + (1 - dampening) * g
            g = g + momentum * state["buf"] if nesterov else state["buf"]
        return p - lr * g
    return step


def reference_adam(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    """torch.optim.Adam (L2 decay added to the gradient) or AdamW (decoupled decay)."""
    beta1, beta2 = betas

    def step(p, g, state):
        t = state["t"] = state.get("t", 0) + 1
        if weight_decay and decoupled:
            p = p * (1 - lr * weight_decay)
        elif weight_decay:
            g = g + weight_decay * p
        state["m"] = beta1 * state.get("m", 0.0) + (1 - beta1) * g
        state["v"] = beta2 * state.get("v", 0.0) + (1 - beta2) * g * g
        m_hat = state["m"] / (1 - beta1 ** t)
        v_hat = state["v"] / (1 - beta2 ** t)
        return p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return step


def gradient(p, step, index):
    """A gradient that depends on the parameter (a quadratic pull towards 0.3) plus fixed noise."""
    noise = np.random.default_rng(1000 * step + index).standard_normal(np.shape(p))
    return 1.5 * (p - 0.3) + noise


def run_both(make_optimizer, reference, dtype, steps=STEPS):
    """Run our optimizer and the reference side by side; return both parameter lists."""
    rng = np.random.default_rng(7)
    initial = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    params = [tg.tensor(a, requires_grad=True) for a in initial]
    expected = [a.astype(np.float64) for a in initial]
    states = [{} for _ in params]
    opt = make_optimizer(params)
    for step in range(steps):
        for i, p in enumerate(params):
            p.grad = tg.tensor(gradient(p.numpy().astype(np.float64), step, i).astype(dtype))
        opt.step()
        for i, p in enumerate(params):
            g = gradient(expected[i], step, i)
            expected[i] = reference(expected[i], g, states[i])
            assert p.dtype == dtype and p.shape == initial[i].shape
            np.testing.assert_allclose(p.numpy(), expected[i], **TOL[dtype], err_msg=f"step {step} param {i}")
    for p, a in zip(params, initial):          # the rule really moved them (a no-op could not pass)
        assert np.abs(p.numpy().astype(np.float64) - a).max() > 1e-2


SGD_CASES = {
    "plain": dict(lr=0.1),
    "momentum": dict(lr=0.05, momentum=0.9),
    "dampening": dict(lr=0.05, momentum=0.8, dampening=0.3),
    "nesterov": dict(lr=0.05, momentum=0.9, nesterov=True),
    "weight_decay": dict(lr=0.1, weight_decay=0.05),
    "everything": dict(lr=0.03, momentum=0.7, weight_decay=0.1, nesterov=True),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", SGD_CASES)
def test_sgd_matches_the_documented_update(case, dtype):
    kwargs = SGD_CASES[case]
    run_both(lambda ps: SGD(ps, **kwargs), reference_sgd(**kwargs), dtype)


ADAM_CASES = {
    "adam": (Adam, dict(lr=0.01)),
    "adam_l2": (Adam, dict(lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)),
    "adamw": (AdamW, dict(lr=0.01, weight_decay=0.1)),
    "adamw_default_decay": (AdamW, dict(lr=0.02, betas=(0.9, 0.99))),
    "adamw_strong_decay": (AdamW, dict(lr=0.05, weight_decay=2.0, eps=1e-4)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ADAM_CASES)
def test_adam_and_adamw_match_the_documented_update(case, dtype):
    cls, kwargs = ADAM_CASES[case]
    decoupled = cls is AdamW
    reference = reference_adam(**{"weight_decay": 0.01 if decoupled else 0.0, **kwargs}, decoupled=decoupled)
    run_both(lambda ps: cls(ps, **kwargs), reference, dtype)


def test_adam_and_adamw_differ_only_through_weight_decay():
    """Same hyper-parameters, decay on: Adam's L2 decay passes through the adaptive scaling, AdamW's not."""
    def final(cls, wd):
        p = tg.tensor([1.0, -2.0, 3.0], dtype=np.float64, requires_grad=True)
        opt = cls([p], lr=0.1, weight_decay=wd)
        for step in range(STEPS):
            p.grad = tg.tensor(gradient(p.numpy(), step, 0))
            opt.step()
        return p.numpy()
    np.testing.assert_array_equal(final(Adam, 0.0), final(AdamW, 0.0))
    assert np.abs(final(Adam, 0.5) - final(AdamW, 0.5)).max() > 1e-3


def test_adam_state_starts_at_zero_even_for_non_finite_parameters():
    """The moments start at exactly zero (not param * 0, which is nan where param is inf)."""
    p = tg.tensor([math.inf, 1.0], requires_grad=True)
    p.grad = tg.tensor([1.0, 1.0])
    opt = Adam([p], lr=0.1)
    opt.step()
    state = opt.state_dict()["state"][0]
    assert np.isfinite(state["exp_avg"].numpy()).all() and np.isfinite(state["exp_avg_sq"].numpy()).all()
    assert p.numpy()[0] == math.inf


# ----------------------------------------------------------------------------- groups, skipping, zero_grad
def test_param_groups_use_their_own_lr_and_weight_decay():
    a = tg.tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    b = tg.tensor([3.0], dtype=np.float64, requires_grad=True)
    c = tg.tensor([-1.0], dtype=np.float64, requires_grad=True)
    opt = SGD([{"params": [a]}, {"params": b, "lr": 0.5}, {"params": [c], "weight_decay": 0.1, "lr": 0.2}],
              lr=0.1, momentum=0.5)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5, 0.2]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.0, 0.0, 0.1]
    assert all(g["momentum"] == 0.5 for g in opt.param_groups)           # defaults fill the rest
    refs = [reference_sgd(lr=0.1, momentum=0.5), reference_sgd(lr=0.5, momentum=0.5),
            reference_sgd(lr=0.2, momentum=0.5, weight_decay=0.1)]
    expected, states = [a.numpy().copy(), b.numpy().copy(), c.numpy().copy()], [{}, {}, {}]
    for step in range(STEPS):
        for i, p in enumerate((a, b, c)):
            p.grad = tg.tensor(gradient(p.numpy(), step, i))
            expected[i] = refs[i](expected[i], gradient(expected[i], step, i), states[i])
        opt.step()
        for p, e in zip((a, b, c), expected):
            np.testing.assert_allclose(p.numpy(), e, rtol=1e-12)


def test_adamw_groups_decay_only_where_asked():
    w = tg.tensor([[1.0, 1.0]], requires_grad=True)
    bias = tg.tensor([1.0, 1.0], requires_grad=True)
    opt = AdamW([{"params": [w], "weight_decay": 0.5}, {"params": [bias], "weight_decay": 0.0}], lr=0.1)
    for _ in range(3):
        w.grad, bias.grad = tg.zeros(1, 2), tg.zeros(2)   # zero gradients: only decay can move them
        opt.step()
    np.testing.assert_allclose(w.numpy(), (1 - 0.1 * 0.5) ** 3, rtol=1e-6)
    np.testing.assert_array_equal(bias.numpy(), [1.0, 1.0])


@pytest.mark.parametrize("make", [lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
                                  lambda ps: Adam(ps, lr=0.1), lambda ps: AdamW(ps, lr=0.1)],
                         ids=["sgd", "adam", "adamw"])
def test_parameters_without_grad_are_skipped(make):
    a = tg.tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    frozen = tg.tensor([5.0], dtype=np.float64, requires_grad=True)
    opt = make([a, frozen])
    for step in range(3):
        a.grad = tg.tensor([1.0, -1.0], dtype=np.float64)
        opt.step()
    np.testing.assert_array_equal(frozen.numpy(), [5.0])                 # weight decay did not touch it
    assert list(opt.state_dict()["state"]) == [0]                        # and it has no state
    assert not np.array_equal(a.numpy(), [1.0, 2.0])
    # its first gradient later gives exactly a first step (Adam's own step count starts at 1)
    twin = tg.tensor([5.0], dtype=np.float64, requires_grad=True)
    fresh = make([twin])
    frozen.grad, twin.grad = tg.tensor([0.5], dtype=np.float64), tg.tensor([0.5], dtype=np.float64)
    opt.step()
    fresh.step()
    np.testing.assert_array_equal(frozen.numpy(), twin.numpy())


def test_parameters_that_do_not_require_grad_may_be_given_and_stay_put():
    """Freezing layers with requires_grad_(False) and still passing model.parameters() works, as in PyTorch."""
    frozen = tg.tensor([1.0, 2.0])
    live = tg.tensor([1.0], requires_grad=True)
    opt = AdamW([frozen, live], lr=0.1, weight_decay=0.1)
    live.grad = tg.tensor([1.0])
    opt.step()
    np.testing.assert_array_equal(frozen.numpy(), [1.0, 2.0])
    assert live.numpy()[0] < 1.0


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad(set_to_none):
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    b = tg.tensor([[3.0]], requires_grad=True)
    never = tg.tensor([0.0], requires_grad=True)
    (a.sum() * 2 + (b * b).sum()).backward()
    grad_a = a.grad
    opt = SGD([a, b, never], lr=0.1)
    opt.zero_grad(set_to_none=set_to_none)
    assert never.grad is None
    if set_to_none:
        assert a.grad is None and b.grad is None
    else:
        assert a.grad is grad_a                                          # zeroed in place
        np.testing.assert_array_equal(a.grad.numpy(), [0.0, 0.0])
        np.testing.assert_array_equal(b.grad.numpy(), [[0.0]])
    (a.sum() * 3).backward()                                             # accumulates from a clean start
    np.testing.assert_array_equal(a.grad.numpy(), [3.0, 3.0])


def test_step_rejects_a_gradient_of_the_wrong_shape():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    a.grad = tg.tensor([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="shape"):
        SGD([a], lr=0.1).step()


@pytest.mark.parametrize("make, match", [
    (lambda ps: SGD(ps, lr=-0.1), "lr"),
    (lambda ps: SGD(ps, lr=0.1, momentum=-0.5), "momentum"),
    (lambda ps: SGD(ps, lr=0.1, weight_decay=-1.0), "weight_decay"),
    (lambda ps: SGD(ps, lr=0.1, nesterov=True), "nesterov"),
    (lambda ps: SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), "nesterov"),
    (lambda ps: Adam(ps, lr=-1e-3), "lr"),
    (lambda ps: Adam(ps, betas=(1.0, 0.999)), "betas"),
    (lambda ps: Adam(ps, betas=(0.9, 1.0)), "betas"),
    (lambda ps: Adam(ps, betas=(-0.1, 0.9)), "betas"),
    (lambda ps: Adam(ps, eps=-1e-8), "eps"),
    (lambda ps: AdamW(ps, weight_decay=-0.1), "weight_decay"),
    (lambda ps: AdamW(ps, betas=(0.9, 1.5)), "betas"),
])
def test_invalid_hyper_parameters_are_clear_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make([tg.tensor([1.0], requires_grad=True)])


def test_invalid_parameter_lists_are_clear_errors():
    a = tg.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="empty"):
        SGD([], lr=0.1)
    with pytest.raises(ValueError, match="leaf"):
        SGD([a * 2], lr=0.1)
    with pytest.raises(TypeError, match="Tensor"):
        SGD([np.ones(2)], lr=0.1)
    with pytest.raises(ValueError, match="more than one group"):
        SGD([{"params": [a]}, {"params": [a]}], lr=0.1)
    with pytest.raises(ValueError, match="more than once"):
        SGD([a, a], lr=0.1)                       # stepping it twice per step would be a silent bug


# ----------------------------------------------------------------------------- state_dict and resuming
def tiny_gpt(seed):
    tg.manual_seed(seed)
    return GPT(GPTConfig(block_size=8, vocab_size=11, n_layer=2, n_head=2, n_embd=16, dropout=0.0, bias=True))


BATCHES = [(np.random.default_rng(s).integers(0, 11, (2, 8)), np.random.default_rng(100 + s).integers(0, 11, (2, 8)))
           for s in range(6)]


def train(model, opt, sched, batches):
    losses = []
    for x, y in batches:
        _, loss = model(tg.tensor(x), tg.tensor(y))
        opt.zero_grad()
        loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def make_training(seed):
    model = tiny_gpt(seed)
    opt = model.configure_optimizers(weight_decay=0.1, learning_rate=3e-3, betas=(0.9, 0.99))
    sched = WarmupCosineLR(opt, warmup_iters=2, decay_iters=5, min_lr=3e-4)
    return model, opt, sched


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_training_resumes_bit_for_bit_from_a_saved_checkpoint(kind, tmp_path):
    def setup(seed):
        model, opt, sched = make_training(seed)
        if kind == "sgd":
            opt = SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
            sched = WarmupCosineLR(opt, warmup_iters=2, decay_iters=5, min_lr=0.01)
        return model, opt, sched

    model, opt, sched = setup(seed=1)
    uninterrupted = train(model, opt, sched, BATCHES)

    model, opt, sched = setup(seed=1)
    first = train(model, opt, sched, BATCHES[:3])
    path = tmp_path / "ckpt.safetensors"
    tg.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
             "iter": 3}, path)
    del model, opt, sched

    model, opt, sched = setup(seed=2)                      # different initial weights, fresh state
    checkpoint = tg.load(path)
    model.load_state_dict(checkpoint["model"])
    opt.load_state_dict(checkpoint["optimizer"])
    sched.load_state_dict(checkpoint["scheduler"])
    assert checkpoint["iter"] == 3
    second = train(model, opt, sched, BATCHES[3:])
    assert first + second == uninterrupted                 # exact float equality, every step

    reference, ropt, rsched = setup(seed=1)
    train(reference, ropt, rsched, BATCHES)
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in ropt.param_groups]


def test_optimizer_state_dict_contents_and_round_trip():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    b = tg.tensor([3.0], requires_grad=True)
    opt = AdamW([{"params": [a], "weight_decay": 0.1}, {"params": [b], "lr": 0.5}], lr=0.01, betas=(0.8, 0.9))
    for _ in range(2):
        a.grad, b.grad = tg.tensor([1.0, -1.0]), tg.tensor([2.0])
        opt.step()
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0], [1]]
    assert sd["param_groups"][1]["lr"] == 0.5 and sd["param_groups"][0]["weight_decay"] == 0.1
    assert sd["state"][0]["step"] == 2 and sd["state"][1]["step"] == 2
    assert sd["state"][0]["exp_avg"].device == "cpu" and sd["state"][0]["exp_avg"].shape == (2,)

    a2, b2 = tg.tensor(a.numpy(), requires_grad=True), tg.tensor(b.numpy(), requires_grad=True)
    opt2 = AdamW([{"params": [a2]}, {"params": [b2]}], lr=1.0, betas=(0.5, 0.5))
    opt2.load_state_dict(sd)
    assert opt2.param_groups[1]["lr"] == 0.5 and opt2.param_groups[0]["betas"] == (0.8, 0.9)
    assert opt2.param_groups[0]["params"][0] is a2                      # params are not replaced
    for p, q in ((a, a2), (b, b2)):
        p.grad = q.grad = tg.tensor(np.full(p.shape, 0.7, np.float32))
    opt.step()
    opt2.step()
    assert np.array_equal(a.numpy(), a2.numpy()) and np.array_equal(b.numpy(), b2.numpy())


def test_load_state_dict_rejects_a_different_layout():
    a, b = tg.tensor([1.0], requires_grad=True), tg.tensor([1.0], requires_grad=True)
    sd = SGD([a, b], lr=0.1).state_dict()
    with pytest.raises(ValueError, match="groups"):
        SGD([{"params": [a]}, {"params": [b]}], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="groups"):
        SGD([a], lr=0.1).load_state_dict(sd)


# ----------------------------------------------------------------------------- clip_grad_norm_
def with_grads(*grads, dtype=np.float64):
    params = []
    for g in grads:
        p = tg.zeros(np.shape(g), dtype=dtype, requires_grad=True)
        p.grad = tg.tensor(np.asarray(g, dtype=dtype))
        params.append(p)
    return params


def test_clip_returns_the_total_norm_and_scales_to_max_norm():
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal((4, 5)), rng.standard_normal(7), rng.standard_normal(())]
    params = with_grads(*grads)
    total = np.sqrt(sum((g ** 2).sum() for g in grads))
    norm = clip_grad_norm_(params, max_norm=1.0)
    assert isinstance(norm, tg.Tensor)
    np.testing.assert_allclose(norm.item(), total, rtol=1e-12)
    scale = 1.0 / (total + 1e-6)                          # PyTorch's clip_coef
    for p, g in zip(params, grads):
        np.testing.assert_allclose(p.grad.numpy(), g * scale, rtol=1e-12)
    clipped = np.sqrt(sum((p.grad.numpy() ** 2).sum() for p in params))
    assert clipped <= 1.0 and clipped == pytest.approx(1.0, rel=1e-5)


def test_clip_norm_of_float32_gradients_overflows_as_pytorchs_and_does_not_drift():
    """Squares past float32's range (3e19^2) make the norm inf and the gradients 0, as PyTorch's
    clip_grad_norm_ gives (tensor(inf), zeros): a norm computed on the device cannot fall back to
    float64 without reading it first. Millions of equal values keep their exact norm (a one-by-one
    float32 dot product is off by about 5e-4 here)."""
    [p] = with_grads(np.array([3e19, 4e19, 0.0, 0.0]), dtype=np.float32)
    assert clip_grad_norm_([p], 1.0).item() == math.inf
    np.testing.assert_array_equal(p.grad.numpy(), [0, 0, 0, 0])
    [p] = with_grads(np.full(4_000_000, 0.01), dtype=np.float32)
    assert clip_grad_norm_([p], 100.0).item() == pytest.approx(20.0, rel=1e-6)


def test_clip_leaves_small_gradients_unchanged():
    grads = [np.array([0.1, -0.2]), np.array([[0.3]])]
    params = with_grads(*grads, dtype=np.float32)
    norm = clip_grad_norm_(iter(params), max_norm=5.0)               # a generator works too
    np.testing.assert_allclose(norm.item(), np.sqrt(0.14), rtol=1e-6)
    for p, g in zip(params, grads):
        assert np.array_equal(p.grad.numpy(), g.astype(np.float32))
        assert p.grad.dtype == np.float32


def test_clip_skips_parameters_without_grad_and_accepts_one_tensor():
    p, = with_grads([3.0, 4.0])
    none = tg.zeros(2, requires_grad=True)
    assert clip_grad_norm_([p, none], 1.0).item() == pytest.approx(5.0)
    assert none.grad is None
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8], rtol=1e-6)
    q, = with_grads([0.0, -8.0])
    assert clip_grad_norm_(q, 2.0).item() == pytest.approx(8.0)
    np.testing.assert_allclose(q.grad.numpy(), [0.0, -2.0], rtol=1e-6)
    assert clip_grad_norm_([none], 1.0).item() == 0.0


@pytest.mark.parametrize("norm_type, expected",
                         [(math.inf, 7.0), (1.0, 14.0), (3.0, (1 + 8 + 27 + 343 + 1) ** (1 / 3))])
def test_clip_other_norm_types(norm_type, expected):
    params = with_grads([1.0, -2.0, 3.0], [[-7.0], [1.0]])
    before = [p.grad.numpy().copy() for p in params]   # .numpy() shares memory
    norm = clip_grad_norm_(params, 2.0, norm_type=norm_type)
    np.testing.assert_allclose(norm.item(), expected, rtol=1e-12)
    for p, g in zip(params, before):
        np.testing.assert_allclose(p.grad.numpy(), g * 2.0 / (expected + 1e-6), rtol=1e-12)


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
@pytest.mark.parametrize("nan_first", [True, False], ids=["nan_first", "nan_last"])
def test_clip_nan_norm_makes_every_gradient_nan(norm_type, nan_first):
    grads = [[1.0, math.nan, 3.0], [2.0, 2.0]]
    params = with_grads(*(grads if nan_first else grads[::-1]))
    norm = clip_grad_norm_(params, 1.0, norm_type=norm_type)
    assert math.isnan(norm.item())
    assert all(np.isnan(p.grad.numpy()).all() for p in params)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")    # inf * 0, on purpose
@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_clip_inf_norm_scales_by_zero(norm_type):
    params = with_grads([1.0, math.inf, -3.0], [2.0])
    norm = clip_grad_norm_(params, 1.0, norm_type=norm_type)
    assert norm.item() == math.inf
    # PyTorch multiplies by clip_coef = max_norm / inf = 0: finite entries become 0, inf * 0 is nan
    np.testing.assert_array_equal(params[0].grad.numpy(), [0.0, math.nan, 0.0])
    np.testing.assert_array_equal(params[1].grad.numpy(), [0.0])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_clip_error_if_nonfinite_raises_and_leaves_gradients_alone(bad):
    params = with_grads([1.0, bad], [100.0])
    with pytest.raises(RuntimeError, match="non-finite|nonfinite|inf|nan"):
        clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(params[1].grad.numpy(), [100.0])
    clip_grad_norm_(with_grads([3.0, 4.0]), 1.0, error_if_nonfinite=True)   # finite: no error


# ----------------------------------------------------------------------------- schedules
def nanogpt_get_lr(it, learning_rate, warmup_iters, lr_decay_iters, min_lr):
    """nanoGPT's train.py, verbatim in substance."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def test_warmup_cosine_values():
    lr, warmup, decay, floor = 1e-3, 10, 110, 1e-4
    values = [warmup_cosine(it, lr, warmup, decay, floor) for it in range(130)]
    for it, v in enumerate(values):
        assert v == pytest.approx(nanogpt_get_lr(it, lr, warmup, decay, floor), rel=1e-12, abs=1e-15), it
    assert values[:warmup] == pytest.approx([lr * (it + 1) / (warmup + 1) for it in range(warmup)])   # linear
    assert np.all(np.diff(values[:warmup + 1]) > 0)
    assert values[warmup] == pytest.approx(lr)                                   # the peak
    assert values[warmup + (decay - warmup) // 2] == pytest.approx((lr + floor) / 2)   # cosine midpoint
    assert np.all(np.diff(values[warmup:decay + 1]) < 0)                         # decays monotonically
    assert values[decay:] == [floor] * (130 - decay)                            # then the floor


def test_warmup_cosine_edge_cases():
    assert warmup_cosine(0, 1.0, 0, 10, 0.1) == 1.0                              # no warmup: start at the peak
    assert warmup_cosine(5, 1.0, 5, 5, 0.1) == 0.1                              # no decay span: the floor
    assert warmup_cosine(3, 1.0, 5, 100, 0.1) == pytest.approx(4 / 6)


def two_group_sgd(lrs=(1e-2, 1e-1)):
    a, b = tg.tensor([1.0], requires_grad=True), tg.tensor([1.0], requires_grad=True)
    return SGD([{"params": [a], "lr": lrs[0]}, {"params": [b], "lr": lrs[1]}], lr=0.5)


def test_warmup_cosine_lr_sets_every_group_each_step():
    opt = two_group_sgd()
    sched = WarmupCosineLR(opt, warmup_iters=3, decay_iters=10, min_lr=1e-3)
    for it in range(14):
        expected = [warmup_cosine(it, 1e-2, 3, 10, 1e-3), warmup_cosine(it, 1e-1, 3, 10, 1e-2)]
        assert [g["lr"] for g in opt.param_groups] == pytest.approx(expected, rel=1e-12)
        assert sched.get_last_lr() == [g["lr"] for g in opt.param_groups]
        opt.step()
        sched.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([1e-3, 1e-2])


def test_scheduled_lr_is_the_one_the_next_step_uses():
    p = tg.tensor([0.0], dtype=np.float64, requires_grad=True)
    opt = SGD([p], lr=1.0)
    sched = LambdaLR(opt, lambda it: 0.5 ** it)
    total = 0.0
    for it in range(4):
        p.grad = tg.tensor([1.0], dtype=np.float64)
        opt.step()
        total += 0.5 ** it
        assert p.item() == pytest.approx(-total)
        sched.step()


def test_warmup_cosine_lr_state_dict_round_trip(tmp_path):
    opt = two_group_sgd()
    sched = WarmupCosineLR(opt, warmup_iters=3, decay_iters=10, min_lr=1e-3)
    for _ in range(5):
        opt.step()
        sched.step()
    tg.save({"scheduler": sched.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "s.safetensors")
    loaded = tg.load(tmp_path / "s.safetensors")

    opt2 = two_group_sgd(lrs=(7.0, 9.0))                 # a fresh run with other lrs: the saved ones win
    sched2 = WarmupCosineLR(opt2, warmup_iters=3, decay_iters=10, min_lr=1e-3)
    opt2.load_state_dict(loaded["optimizer"])
    sched2.load_state_dict(loaded["scheduler"])
    assert sched2.last_epoch == 5
    for _ in range(8):
        assert sched2.get_last_lr() == sched.get_last_lr()
        sched.step()
        sched2.step()


def test_lambda_lr():
    opt = two_group_sgd()
    sched = LambdaLR(opt, lambda it: 1.0 / (it + 1))
    assert sched.get_last_lr() == pytest.approx([1e-2, 1e-1])
    for it in range(1, 6):
        sched.step()
        assert sched.last_epoch == it
        assert sched.get_last_lr() == pytest.approx([1e-2 / (it + 1), 1e-1 / (it + 1)], rel=1e-12)
    state = sched.state_dict()
    opt2 = two_group_sgd()
    sched2 = LambdaLR(opt2, lambda it: 1.0 / (it + 1))
    sched2.load_state_dict(state)
    assert sched2.get_last_lr() == sched.get_last_lr()
