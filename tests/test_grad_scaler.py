"""tg.amp.GradScaler: PyTorch's rules, decided on the device.

Against torch.amp.GradScaler where PyTorch is installed (the same gradients, overflows injected
into some of them, give the same scales, the same skipped steps and the same parameters); without
it, against sequences worked out by hand, an AdamW that never saw the skipped steps, and
PyTorch's errors. On the CuPy stand-in, a scaled training step, overflow included, makes no
host sync. The kernels themselves: test_grad_scaler_kernels.py.
"""
import math

import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu import device as devices
from tinygrad_gpu.amp import GradScaler
from tinygrad_gpu.nn import GPT, GPTConfig
from tinygrad_gpu.optim import SGD, Adam, AdamW, clip_grad_norm_

on_standin = pytest.mark.skipif(not tg.cuda_available() or
                                not getattr(devices.cupy(), "__name__", "").endswith("cupy_standin"),
                                reason="reads the CuPy stand-in's counters")

# ----------------------------------------------------------------------------- a tiny regression, run by both
rng = np.random.default_rng(0)
W0, B0 = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
STEPS = 10
X = rng.standard_normal((STEPS, 5, 4)).astype(np.float32)
Y = rng.standard_normal((STEPS, 5, 3)).astype(np.float32)
# step -> (parameter 0 = w or 1 = b, index, value) written into its scaled gradient after backward
INJECTED = {2: [(0, (0, 0), math.inf)], 5: [(1, (1,), math.nan)], 6: [(0, (2, 1), -math.inf), (1, (0,), math.inf)],
            9: [(1, (2,), math.nan)]}
SKIPPED = sorted(INJECTED)
SCALER = dict(init_scale=2.0 ** 10, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)
OPTIMIZERS = {"sgd": (SGD, dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
              "adamw": (AdamW, dict(lr=0.05, betas=(0.9, 0.99), weight_decay=0.1)),
              "adam": (Adam, dict(lr=0.05, weight_decay=0.1))}


def run_ours(device, kind, clip, steps=range(STEPS), start=None):
    """(scale, w, b) after each step's update; `start` = (w, b, optimizer state, scaler state) to resume from."""
    cls, options = OPTIMIZERS[kind]
    w0, b0 = (W0, B0) if start is None else start[:2]
    w, b = tg.tensor(w0, requires_grad=True, device=device), tg.tensor(b0, requires_grad=True, device=device)
    opt, scaler = cls([w, b], **options), GradScaler(device, **SCALER)
    if start is not None:
        opt.load_state_dict(start[2])
        scaler.load_state_dict(start[3])
    history = []
    for t in steps:
        opt.zero_grad()
        x, y = tg.tensor(X[t], device=device), tg.tensor(Y[t], device=device)
        loss = ((x @ w + b - y) ** 2).mean()
        scaler.scale(loss).backward()
        for i, index, value in INJECTED.get(t, []):
            (w, b)[i].grad.data[index] = value
        if clip:
            scaler.unscale_(opt)
            clip_grad_norm_([w, b], 0.5)
        scaler.step(opt)
        scaler.update()
        history.append((scaler.get_scale(), w.numpy().copy(), b.numpy().copy()))
    return history, (w, b, opt, scaler)


def run_torch(torch, kind, clip):
    cls = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[kind]
    w, b = torch.tensor(W0, requires_grad=True), torch.tensor(B0, requires_grad=True)
    opt = cls([w, b], foreach=False, **OPTIMIZERS[kind][1])
    scaler = torch.amp.GradScaler("cpu", **SCALER)
    history = []
    for t in range(STEPS):
        opt.zero_grad()
        loss = ((torch.tensor(X[t]) @ w + b - torch.tensor(Y[t])) ** 2).mean()
        scaler.scale(loss).backward()
        for i, index, value in INJECTED.get(t, []):
            (w, b)[i].grad[index] = value
        if clip:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_([w, b], 0.5)
        scaler.step(opt)
        scaler.update()
        history.append((scaler.get_scale(), w.detach().numpy().copy(), b.detach().numpy().copy()))
    return history


def skipped_steps(history, initial=(W0, B0)):
    before = [initial] + [h[1:] for h in history[:-1]]
    return [t for t, (h, (w, b)) in enumerate(zip(history, before)) if np.array_equal(h[1], w) and
            np.array_equal(h[2], b)]


def assert_same_run(ours, theirs, rtol=2e-5, atol=1e-6):
    assert [h[0] for h in ours] == [h[0] for h in theirs]                     # the scales, exactly
    assert skipped_steps(ours) == skipped_steps(theirs) == SKIPPED
    for t, (mine, torch_row) in enumerate(zip(ours, theirs)):
        for got, want in zip(mine[1:], torch_row[1:]):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"step {t}")


# ----------------------------------------------------------------------------- against PyTorch
@pytest.fixture
def torch_if_installed():
    """PyTorch (None where it is not installed) on one thread: these tensors are tiny, and its idle OpenMP
    threads would spin on the cores the emulator's blocks need (each emulated launch ran ~40 times slower)."""
    try:
        import torch
    except ImportError:
        yield None
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(threads)


@pytest.mark.parametrize("kind", ["sgd", "adamw", "adam"])
@pytest.mark.parametrize("clip", [False, True], ids=["step", "unscale_clip_step"])
def test_matches_torch_grad_scaler(device, kind, clip, torch_if_installed):
    torch = pytest.importorskip("torch")
    ours, _ = run_ours(device, kind, clip)
    assert_same_run(ours, run_torch(torch, kind, clip))
    scales = [h[0] for h in ours]
    assert max(scales) > SCALER["init_scale"] and min(scales) < SCALER["init_scale"]   # it grew and backed off


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_resumed_from_state_dicts_continues_exactly(device, kind, tmp_path, torch_if_installed):
    """Saved after step 6's update (a skipped one) and loaded into a fresh optimizer and scaler: the rest of
    the run is the uninterrupted run's, bit for bit, and PyTorch's where it is installed. AdamW's checkpoint
    holds its device step count: 4 steps taken of 7."""
    uninterrupted, _ = run_ours(device, kind, clip=True)
    first, (w, b, opt, scaler) = run_ours(device, kind, clip=True, steps=range(7))
    tg.save({"w": w.detach(), "b": b.detach(), "optimizer": opt.state_dict(), "scaler": scaler.state_dict()},
            tmp_path / "ckpt.safetensors")
    saved = tg.load(tmp_path / "ckpt.safetensors")
    assert saved["scaler"] == {"scale": uninterrupted[6][0], "growth_factor": 2.0, "backoff_factor": 0.5,
                               "growth_interval": 2, "_growth_tracker": 0}
    if kind == "adamw":
        step = saved["optimizer"]["state"][0]["step"]
        assert step.dtype == tg.float32 and step.shape == () and step.item() == 4.0
    rest, _ = run_ours(device, kind, clip=True, steps=range(7, STEPS),
                       start=(saved["w"].numpy(), saved["b"].numpy(), saved["optimizer"], saved["scaler"]))
    for t, (got, want) in enumerate(zip(first + rest, uninterrupted)):
        assert got[0] == want[0] and np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2]), t
    if torch_if_installed is not None:
        assert_same_run(first + rest, run_torch(torch_if_installed, kind, clip=True))


# ----------------------------------------------------------------------------- the rules, by hand
def scaler_with_a_gradient(device, **options):
    p = tg.zeros(3, requires_grad=True, device=device)
    scaler = GradScaler(device, **options)
    scaler.scale(tg.ones((), device=device))                 # makes the scale on `device`
    return p, SGD([p], lr=0.1), scaler


def test_scale_and_tracker_follow_the_rule(device):
    """growth_interval 3: three clean steps grow the scale, an overflow backs off and restarts the count."""
    p, opt, scaler = scaler_with_a_gradient(device, init_scale=8.0, growth_factor=4.0, backoff_factor=0.25,
                                            growth_interval=3)
    overflow = [0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 1]
    want = [(8, 1), (8, 2), (32, 0), (8, 0), (8, 1), (8, 2), (2, 0), (2, 1), (2, 2), (8, 0), (8, 1), (2, 0),
            (0.5, 0)]
    for bad, (scale, tracker) in zip(overflow, want):
        p.grad = tg.tensor([1.0, math.inf if bad else 2.0, 3.0], device=device)
        scaler.step(opt)
        scaler.update()
        assert (scaler.get_scale(), scaler._get_growth_tracker()) == (scale, tracker)


def test_growth_stops_short_of_inf(device):
    """2^127 * 2 is inf in float32: the scale stays, the tracker restarts (PyTorch's rule)."""
    p, opt, scaler = scaler_with_a_gradient(device, init_scale=2.0 ** 126, growth_interval=1)
    for scale in (2.0 ** 127, 2.0 ** 127, 2.0 ** 127):
        p.grad = tg.ones(3, device=device)
        scaler.step(opt)
        scaler.update()
        assert scaler.get_scale() == scale and scaler._get_growth_tracker() == 0


def test_unscale_multiplies_by_the_reciprocal_rounded_from_double(device):
    """scale 3: every gradient times float32(1 / 3.0), the float32 rounding of the double reciprocal, and
    found_inf per device: 1 after a nan anywhere, 0 for a clean optimizer."""
    a, b = tg.zeros(700, requires_grad=True, device=device), tg.zeros(2, 2, requires_grad=True, device=device)
    grads = [np.random.default_rng(1).standard_normal(700).astype(np.float32) * 1000, np.float32([[1, 2], [3, 4]])]
    a.grad, b.grad = tg.tensor(grads[0], device=device), tg.tensor(grads[1], device=device)
    opt, scaler = SGD([a, b], lr=0.1), GradScaler(device, init_scale=3.0)
    scaler.scale(tg.ones((), device=device))
    scaler.unscale_(opt)
    inv_scale = np.float32(1 / np.float64(3.0))
    np.testing.assert_array_equal(a.grad.numpy(), grads[0] * inv_scale)
    np.testing.assert_array_equal(b.grad.numpy(), grads[1] * inv_scale)
    [(flag_device, flag)] = scaler._per_optimizer_states[id(opt)]["found_inf_per_device"].items()
    assert flag_device == a.device and flag.dtype == np.float32 and flag.shape == () and flag.item() == 0.0

    c = tg.zeros(5, requires_grad=True, device=device)
    c.grad = tg.tensor([1.0, 2.0, math.nan, 4.0, 5.0], device=device)
    other = SGD([c], lr=0.1)
    scaler.unscale_(other)
    assert scaler._per_optimizer_states[id(other)]["found_inf_per_device"][c.device].item() == 1.0


def test_scale_is_differentiable_and_keeps_containers(device):
    scaler = GradScaler(device, init_scale=4.0)
    x = tg.tensor([1.0, 2.0], requires_grad=True, device=device)
    loss = (x * x).sum()
    scaled = scaler.scale(loss)
    assert scaled.item() == 20.0 and scaled.dtype == tg.float32
    scaled.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [8.0, 16.0])            # 4 * d(x . x)/dx
    nested = scaler.scale([loss.detach(), (loss.detach(), [loss.detach()])])
    assert type(nested) is list and type(nested[1]) is tuple and type(nested[1][1]) is list
    assert [nested[0].item(), nested[1][0].item(), nested[1][1][0].item()] == [20.0] * 3
    # PyTorch's promotion: a 0-d float16 loss times the float32 0-d scale is float32; a vector stays float16
    assert scaler.scale(tg.ones((), dtype=tg.float16, device=device)).dtype == tg.float32
    assert scaler.scale(tg.ones(3, dtype=tg.float16, device=device)).dtype == tg.float16
    assert scaler._get_scale_async().device == x.device and scaler._get_scale_async().dtype == tg.float32
    with pytest.raises(ValueError, match="Tensor or an iterable"):
        scaler.scale(3.0)


def test_a_skipped_adamw_step_changes_nothing_and_is_not_counted(device):
    """Each skipped step leaves param and both moments bit for bit, and its step count where it was; the
    next steps are those of an AdamW that never saw the skipped ones, bit for bit (same kernel arithmetic,
    bias corrections from the count of steps taken)."""
    rng = np.random.default_rng(5)
    p, twin = (tg.tensor(np.float32([[0.5, -1.0, 2.0], [1.5, 0.0, -0.3]]), requires_grad=True, device=device)
               for _ in range(2))
    opt, twin_opt = AdamW([p], lr=0.1, weight_decay=0.1), AdamW([twin], lr=0.1, weight_decay=0.1)
    scaler = GradScaler(device, init_scale=2.0 ** 12, growth_interval=1000)
    for t, overflow in enumerate([False, True, True, False, False, True, False]):
        g = rng.standard_normal((2, 3)).astype(np.float32)
        scaler.scale(tg.ones((), device=device))
        p.grad = tg.tensor(g * np.float32(scaler.get_scale()), device=device)     # as a scaled backward gives
        if overflow:
            p.grad.data[1, 2] = math.inf
        before = [p.numpy().copy()] + moments(opt, p)
        scaler.step(opt)
        scaler.update()
        if overflow:
            after = [p.numpy()] + moments(opt, p)
            for got, want in zip(after, before):
                np.testing.assert_array_equal(got, want)
        else:
            twin.grad = tg.tensor(g, device=device)
            twin_opt.step()
        np.testing.assert_array_equal(p.numpy(), twin.numpy(), err_msg=f"step {t}")
        step = opt.state[id(p)]["step"]
        assert step.dtype == np.float32 and step.shape == () and float(devices.move(step, "cpu")) == \
            twin_opt.state[id(twin)]["step"]
    assert not np.array_equal(p.numpy(), [[0.5, -1.0, 2.0], [1.5, 0.0, -0.3]])


def moments(opt, p):
    """Copies of p's exp_avg and exp_avg_sq, on the host ([] before its first step)."""
    state = opt.state.get(id(p), {})
    return [np.array(devices.move(state[name], "cpu")) for name in ("exp_avg", "exp_avg_sq") if name in state]


def test_adam_step_count_moves_between_host_and_device(device, tmp_path):
    """Unscaled steps count on the host (a Python int, one launch a step); scaled ones on the device (float32,
    0-d); an unscaled step after them reads the count back once. The optimizer's state_dict keeps either."""
    p = tg.tensor([1.0, -2.0], requires_grad=True, device=device)
    twin = tg.tensor([1.0, -2.0], requires_grad=True, device=device)
    opt, twin_opt, scaler = Adam([p], lr=0.1), Adam([twin], lr=0.1), GradScaler(device, init_scale=2.0)

    def grad(t):
        return np.float32([0.3 * t - 1, 0.5])

    for t, scaled in enumerate([False, True, True, False, True]):
        if scaled:
            scaler.scale(tg.ones((), device=device))
            p.grad = tg.tensor(grad(t) * 2, device=device)
            scaler.step(opt)
            scaler.update(2.0)                                   # a number: the scale stays 2
            assert not np.isscalar(opt.state[id(p)]["step"])
        else:
            p.grad = tg.tensor(grad(t), device=device)
            opt.step()
            assert opt.state[id(p)]["step"] == t + 1 and isinstance(opt.state[id(p)]["step"], int)
        twin.grad = tg.tensor(grad(t), device=device)
        twin_opt.step()
        np.testing.assert_array_equal(p.numpy(), twin.numpy(), err_msg=f"step {t}")
    tg.save({"optimizer": opt.state_dict()}, tmp_path / "opt.safetensors")
    saved = tg.load(tmp_path / "opt.safetensors")["optimizer"]
    assert saved["state"][0]["step"].dtype == tg.float32 and saved["state"][0]["step"].item() == 5.0
    resumed = Adam([tg.tensor(p.numpy(), requires_grad=True, device=device)], lr=0.1)
    resumed.load_state_dict(saved)
    [q] = resumed.param_groups[0]["params"]
    q.grad, twin.grad = tg.tensor(grad(5), device=device), tg.tensor(grad(5), device=device)
    resumed.step()
    twin_opt.step()
    np.testing.assert_array_equal(q.numpy(), twin.numpy())
    assert resumed.state[id(q)]["step"] == 6


def test_sgd_steps_are_skipped_on_the_host(device):
    p = tg.tensor([1.0, 2.0], requires_grad=True, device=device)
    opt, scaler = SGD([p], lr=0.5), GradScaler(device, init_scale=4.0)
    scaler.scale(tg.ones((), device=device))
    p.grad = tg.tensor([math.nan, 4.0], device=device)
    assert scaler.step(opt) is None
    scaler.update()
    np.testing.assert_array_equal(p.numpy(), [1.0, 2.0])
    assert scaler.get_scale() == 2.0
    p.grad = tg.tensor([2.0, 4.0], device=device)                # scaled by 2: unscaled (1, 2)
    scaler.step(opt)
    scaler.update()
    np.testing.assert_array_equal(p.numpy(), [0.5, 1.0])


@pytest.mark.skipif(devices.cuda_device_count() < 2, reason="needs two GPUs (the stand-in has two)")
@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_gradients_on_two_gpus_share_one_verdict(kind):
    """A flag per GPU, added up on the scale's: an overflow on cuda:1 skips the step of cuda:0's parameter
    too, and backs the scale off once."""
    a = tg.tensor([1.0, 2.0], requires_grad=True, device="cuda:0")
    b = tg.tensor([3.0], requires_grad=True, device="cuda:1")
    opt = AdamW([a, b], lr=0.1) if kind == "adamw" else SGD([a, b], lr=0.1)
    scaler = GradScaler("cuda", init_scale=8.0)
    for overflow in (False, True):
        before = a.numpy().copy(), b.numpy().copy()
        opt.zero_grad()
        scaler.scale((a * a).sum() + (b * b).sum().to("cuda:0")).backward()
        if overflow:
            with devices.use("cuda:1"):
                b.grad.data[0] = math.inf
        scaler.step(opt)
        scaler.update()
        assert a.grad.device == "cuda:0" and b.grad.device == "cuda:1"
        moved = not np.array_equal(a.numpy(), before[0]), not np.array_equal(b.numpy(), before[1])
        assert moved == ((False, False) if overflow else (True, True))
    assert scaler.get_scale() == 4.0


# ----------------------------------------------------------------------------- errors and settings
def test_pytorchs_errors(device):
    p = tg.zeros(2, requires_grad=True, device=device)
    opt, scaler = SGD([p], lr=0.1), GradScaler(device)
    with pytest.raises(AssertionError, match="Attempted unscale_ but _scale is None"):
        scaler.unscale_(opt)
    with pytest.raises(AssertionError, match="Attempted step but _scale is None"):
        scaler.step(opt)
    with pytest.raises(AssertionError, match="Attempted update but _scale is None"):
        scaler.update()
    scaler.scale(tg.ones((), device=device))
    with pytest.raises(AssertionError, match="No inf checks were recorded for this optimizer"):
        scaler.step(opt)                                         # no gradient at all
    fresh = GradScaler(device)
    fresh.scale(tg.ones((), device=device))
    with pytest.raises(AssertionError, match="No inf checks were recorded prior to update"):
        fresh.update()
    p.grad = tg.ones(2, device=device)
    scaler = GradScaler(device)
    scaler.scale(tg.ones((), device=device))
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match=r"unscale_\(\) has already been called on this optimizer"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match=r"unscale_\(\) is being called after step\(\)"):
        scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match=r"step\(\) has already been called since the last update\(\)"):
        scaler.step(opt)
    scaler.update()
    with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
        scaler.step(opt, closure=lambda: None)
    half = tg.zeros(2, dtype=tg.float16, requires_grad=True, device=device)
    half.grad = tg.ones(2, dtype=tg.float16, device=device)
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(SGD([half], lr=0.1))
    for wrong in (tg.ones(2, device=device), tg.ones((), requires_grad=True, device=device), "4"):
        with pytest.raises(AssertionError, match="new_scale should be"):
            scaler.update(wrong)
    with pytest.raises(AssertionError, match="growth factor must be > 1.0"):
        GradScaler(device, growth_factor=1.0)
    with pytest.raises(AssertionError, match="backoff factor must be < 1.0"):
        GradScaler(device, backoff_factor=1.0)
    with pytest.raises(RuntimeError, match="The source state dict is empty"):
        scaler.load_state_dict({})
    with pytest.raises(ValueError, match="unknown device"):
        GradScaler("tpu")


def test_update_with_a_new_scale_and_the_settings(device):
    p = tg.zeros(2, requires_grad=True, device=device)
    scaler = GradScaler(device, init_scale=16.0, growth_interval=7)
    assert scaler.get_scale() == 16.0 and scaler.is_enabled()                # before the first scale()
    scaler.scale(tg.ones((), device=device))
    p.grad = tg.ones(2, device=device)
    scaler.step(SGD([p], lr=0.1))
    scaler.update(tg.tensor([0.25], device=device))                        # a 1-element tensor
    assert scaler.get_scale() == 0.25 and scaler._get_growth_tracker() == 0
    scaler.update(3.0)
    assert scaler.get_scale() == 3.0
    scaler.set_growth_factor(3.0)
    scaler.set_backoff_factor(0.125)
    scaler.set_growth_interval(2)
    assert (scaler.get_growth_factor(), scaler.get_backoff_factor(), scaler.get_growth_interval()) == (3.0, 0.125, 2)
    state = scaler.state_dict()
    assert state == {"scale": 3.0, "growth_factor": 3.0, "backoff_factor": 0.125, "growth_interval": 2,
                     "_growth_tracker": 0}
    fresh = GradScaler(device)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    fresh.scale(tg.ones((), device=device))
    assert fresh.get_scale() == 3.0


def test_disabled_passes_everything_through(device):
    p = tg.tensor([1.0, 2.0], requires_grad=True, device=device)
    opt, scaler = SGD([p], lr=0.5), GradScaler(device, enabled=False)
    loss = (p * p).sum()
    assert scaler.scale(loss) is loss and not scaler.is_enabled()
    p.grad = tg.tensor([2.0, math.inf], device=device)
    scaler.unscale_(opt)
    np.testing.assert_array_equal(p.grad.numpy(), [2.0, math.inf])
    scaler.step(opt)                                            # steps, inf or not
    np.testing.assert_array_equal(p.numpy(), [0.0, -math.inf])
    scaler.update()
    assert scaler.get_scale() == 1.0 and scaler.state_dict() == {} and scaler._get_growth_tracker() == 0
    scaler.load_state_dict({})


@pytest.mark.skipif(tg.cuda_available(), reason="there is a cuda device here")
def test_cuda_without_a_gpu_warns_and_disables():
    with pytest.warns(UserWarning, match="CUDA is not available"):
        scaler = GradScaler()
    assert not scaler.is_enabled()


# ----------------------------------------------------------------------------- no host sync, on the stand-in
@on_standin
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")     # the overflow, on purpose
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_a_scaled_training_step_never_waits_for_the_gpu(monkeypatch):
    """training_step's shape with a scaler: scale(loss).backward(), unscale_, clip, step, update. Neither a
    clean step nor one whose scaled loss overflows makes the host wait; the overflowing one is skipped."""
    from tinygrad_gpu import gradient_sums
    from tinygrad_gpu.testing.cupy_standin import counters
    monkeypatch.setattr(gradient_sums, "CHECK_SPARE", False)    # the suite's own check reads pointers on the host
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11, dropout=0.0,
                          bias=False)).to("cuda")
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99))
    scaler = GradScaler("cuda")
    x, y = tg.randint(0, 11, (2, 8), device="cuda"), tg.randint(0, 11, (2, 8), device="cuda")

    def step(loss_factor=1.0):
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        scaler.scale(loss * loss_factor).backward()
        scaler.unscale_(optimizer)
        clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()

    step()                                                   # builds the optimizer's state
    counters.reset()
    step()
    before = [p.data.copy() for p in model.parameters()]
    step(loss_factor=1e38)                                   # 1e38 * 65536 * loss: inf, and inf gradients
    assert counters.host_syncs == 0, counters.sites
    assert "float64" not in counters.allocated_dtypes
    assert all(np.array_equal(p.numpy(), devices.move(b, "cpu")) for p, b in zip(model.parameters(), before))
    assert scaler.get_scale() == 2.0 ** 15
    assert {float(devices.move(optimizer.state[id(p)]["step"], "cpu")) for p in model.parameters()} == {2.0}
