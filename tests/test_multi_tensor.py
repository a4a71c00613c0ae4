"""kernels/multi_tensor.cu: each kernel against its reference, and clip_grad_norm_ and Adam/AdamW through it.

The kernels run on emu (the normal pass) or cuda (the cuda pass: the stand-in runs them by the emulator;
a GPU for real). The lists are awkward on purpose: odd sizes, empty tensors, a 0-d one, and more tensors
than one table holds (multi_tensor.MAX_TENSORS), so that a launch is repeated. What the optimizers and
clip_grad_norm_ compute through them is compared with their per-tensor paths (foreach=False):
AdamW's results are the same bits (one element function, adamw.h, and the same scalars); the norm, and
so the clipped gradients, agree to float32 rounding (the sums run in another order).
"""
import numpy as np
import pytest

import tinygrad_gpu as tg
from conftest import CUDA_PASS, gpu, requires_gpu
from tinygrad_gpu import device as devices
from tinygrad_gpu.kernels import adamw, multi_tensor

DEVICES = ["cuda"] if CUDA_PASS else ["emu", pytest.param("cuda", marks=[gpu, requires_gpu])]
on_standin = pytest.mark.skipif(not (tg.cuda_available() and devices.cupy().__name__.endswith("cupy_standin")),
                                reason="reads the CuPy stand-in's counters")
# 0-d, empty, a warp and a bit, bigger than a chunk, ...; 3 * 27 + 1 tensors: two tables
SIZES = [(), (0,), (33,), (5000,), (7, 3), (0, 4), (4096,), (1,), (129, 5)] * 9 + [(3,)]


@pytest.fixture(params=DEVICES)
def device(request):
    return devices.canonical(request.param)


@pytest.fixture(params=["cpu", *DEVICES])
def clip_device(request):
    """clip_grad_norm_ takes the multi-tensor launchers on the cpu too (the sum of squares compiled there)."""
    return devices.canonical(request.param)


def arrays(device, shapes, rng, scale=1.0, positive=False):
    made = [np.asarray(scale * rng.standard_normal(s), np.float32) for s in shapes]
    made = [np.asarray(np.abs(a)) if positive else a for a in made]     # abs of a 0-d array is a scalar
    xp = devices.array_module(device)
    with devices.use(device):
        return [xp.asarray(a) if xp is not np else a for a in made]


def host(a):
    return devices.move(a, "cpu")


def test_the_sizes_need_two_tables():
    assert multi_tensor.MAX_TENSORS < len(SIZES) <= 2 * multi_tensor.MAX_TENSORS
    assert len(multi_tensor.tables([np.zeros(1, np.float32)] * len(SIZES))) == 2


# ----------------------------------------------------------------------------- the kernels
def test_norm_and_coefficient(device):
    grads = arrays(device, SIZES, np.random.default_rng(0))
    norm, coefficient = multi_tensor.norm_and_clip_coefficient(grads, 1.5, device)
    wanted = np.sqrt(sum(np.sum(host(g).astype(np.float64) ** 2) for g in grads))
    np.testing.assert_allclose(host(norm), wanted, rtol=2e-6)
    reference = multi_tensor.reference_sum_of_squares([host(g) for g in grads])
    np.testing.assert_allclose(host(norm), np.sqrt(reference), rtol=2e-6)
    assert host(coefficient) == multi_tensor.reference_clip_coefficient(host(norm), 1.5)
    work = multi_tensor._workspace(device)            # left all 0 for the next call
    assert not host(work.partials).any() and host(work.ticket) == 0 and host(work.total) == 0
    again, _ = multi_tensor.norm_and_clip_coefficient(grads, 1.5, device)
    assert host(again) == host(norm)                  # a fixed order of sums: the same bits every time


def test_a_small_norm_is_not_scaled_and_no_gradients_give_0(device):
    grads = arrays(device, [(3,), (2, 2)], np.random.default_rng(1), scale=1e-3)
    norm, coefficient = multi_tensor.norm_and_clip_coefficient(grads, 1.0, device)
    assert host(coefficient) == 1.0 and 0 < host(norm) < 1e-2
    norm, coefficient = multi_tensor.norm_and_clip_coefficient(arrays(device, [(0,)], np.random.default_rng(1)),
                                                               1.0, device)
    assert host(norm) == 0 and host(coefficient) == 1.0


@pytest.mark.parametrize("value, norm, coefficient", [(np.nan, np.nan, np.nan), (np.inf, np.inf, 0.0),
                                                      (1e20, np.inf, 0.0)],     # a square past float32's range
                         ids=["nan", "inf", "overflow"])
def test_non_finite_gradients(device, value, norm, coefficient):
    grads = arrays(device, SIZES, np.random.default_rng(2))
    with devices.use(device):
        grads[66][5] = value                          # in the second table (a (5000,) one)
    got_norm, got_coefficient = multi_tensor.norm_and_clip_coefficient(grads, 1.0, device)
    np.testing.assert_array_equal(host(got_norm), np.float32(norm))
    np.testing.assert_array_equal(host(got_coefficient), np.float32(coefficient))
    work = multi_tensor._workspace(device)
    assert not host(work.partials).any() and host(work.total) == 0


def test_scale(device):
    grads = arrays(device, SIZES, np.random.default_rng(3))
    want = [host(g) for g in grads]
    with devices.use(device):
        coefficient = devices.array_module(device).full((), 0.3, np.float32)
    multi_tensor.scale_(grads, coefficient, device)
    multi_tensor.reference_scale_(want, np.float32(0.3))
    for got, wanted in zip(grads, want):
        np.testing.assert_array_equal(host(got), wanted)


def adam_lists(device, seed, shapes=SIZES):
    rng = np.random.default_rng(seed)
    return (arrays(device, shapes, rng), arrays(device, shapes, rng), arrays(device, shapes, rng, 0.1),
            arrays(device, shapes, rng, 0.01, positive=True))


def copies(lists):
    return tuple([x.copy() for x in arrays] for arrays in lists)


@pytest.mark.parametrize("decoupled", [True, False], ids=["AdamW", "Adam"])
def test_adamw_update_is_the_per_tensor_kernel_bit_for_bit(device, decoupled):
    mine = adam_lists(device, 4)
    theirs = copies(mine)
    settings = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1, device=device, decoupled=decoupled)
    multi_tensor.adamw_update(*mine, step=3, **settings)
    for param, grad, m, v in zip(*theirs):
        adamw.adamw_update(param, grad, m, v, step=3, **settings)
    for got, want in zip(mine, theirs):
        for a, b in zip(got, want):
            np.testing.assert_array_equal(host(a), host(b))


@pytest.mark.parametrize("found_inf", [0.0, 1.0], ids=["a step", "skipped"])
def test_skippable_update_is_the_per_tensor_kernel_bit_for_bit(device, found_inf):
    mine = adam_lists(device, 5)
    theirs = copies(mine)
    original = copies(mine)
    xp = devices.array_module(device)
    with devices.use(device):
        # each parameter its own count, as when one got its first gradient later
        steps = [xp.full((), 4.0 + k % 3, np.float32) for k in range(len(SIZES))]
        their_steps = [s.copy() for s in steps]
        flag = xp.full((), found_inf, np.float32)
    settings = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, device=device)
    multi_tensor.adamw_update_skippable(*mine, steps, flag, **settings)
    for param, grad, m, v, step in zip(*theirs, their_steps):
        adamw.adamw_update_skippable(param, grad, m, v, step, flag, **settings)
    for got, want, before in zip(mine, theirs, original):
        for a, b, c in zip(got, want, before):
            np.testing.assert_array_equal(host(a), host(b))
            if found_inf:
                np.testing.assert_array_equal(host(a), host(c))
    assert [float(host(s)) for s in steps] == [float(host(s)) for s in their_steps]
    assert float(host(steps[1])) == 5.0 + (found_inf == 0)


def test_bad_lists_are_refused_naming_the_op(device):
    params, grads, m, v = adam_lists(device, 6, [(3,), (4,)])
    settings = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1, step=1, device=device)
    with pytest.raises(ValueError, match=r"adamw_update: tensor 1 has params \(4,\), grads \(4,\), exp_avgs \(3,\)"):
        multi_tensor.adamw_update(params, grads, m[:1] + m[:1], v, **settings)
    with pytest.raises(ValueError, match="adamw_update: the lists must be as long"):
        multi_tensor.adamw_update(params, grads[:1], m, v, **settings)
    with pytest.raises(ValueError, match=r"norm_and_clip_coefficient: grads\[0\] must be a C-contiguous float32 "
                                         r"array .* got float64"):
        multi_tensor.norm_and_clip_coefficient([params[0].astype(np.float64)], 1.0, device)


# ----------------------------------------------------------------------------- clip_grad_norm_ and the optimizers
def make_params(device, seed=0, shapes=SIZES):
    rng = np.random.default_rng(seed)
    return [tg.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True, device=device) for s in shapes]


def give_grads(params, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    for p in params:
        p.grad = tg.tensor((scale * rng.standard_normal(p.shape)).astype(np.float32), device=p.device)


@pytest.mark.parametrize("scale", [0.001, 1.0], ids=["not clipped", "clipped"])     # norms 0.3 and 297
def test_clip_grad_norm_agrees_with_the_per_tensor_path(clip_device, scale):
    fast, plain = make_params(clip_device), make_params(clip_device)
    give_grads(fast, 7, scale)
    give_grads(plain, 7, scale)
    norm = tg.optim.clip_grad_norm_(fast, 1.0)
    plain_norm = tg.optim.clip_grad_norm_(plain, 1.0, foreach=False)
    assert norm.shape == () and norm.dtype == tg.float32 and norm.device == fast[0].device
    np.testing.assert_allclose(norm.item(), plain_norm.item(), rtol=2e-6)      # float32 sums in other orders
    for a, b in zip(fast, plain):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=4e-6, atol=1e-12)
    if scale < 1:
        for a, b in zip(fast, plain):
            np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())        # both scale by exactly 1


def test_a_parameter_given_twice_to_clip_takes_the_plain_way(clip_device, monkeypatch):
    """Its gradient would be scaled by two blocks at once on a GPU (a race): the per-tensor path runs, which
    counts it twice in the norm and scales it twice, as for any list."""
    fast, plain = make_params(clip_device, shapes=[(5,), (3, 2)]), make_params(clip_device, shapes=[(5,), (3, 2)])
    give_grads(fast, 9, 10.0)
    give_grads(plain, 9, 10.0)
    monkeypatch.setattr(multi_tensor, "scale_", None)                     # not called: it would raise
    norm = tg.optim.clip_grad_norm_([fast[0], fast[1], fast[0]], 1.0)
    plain_norm = tg.optim.clip_grad_norm_([plain[0], plain[1], plain[0]], 1.0, foreach=False)
    np.testing.assert_array_equal(norm.numpy(), plain_norm.numpy())
    for a, b in zip(fast, plain):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_clip_grad_norm_of_non_finite_gradients_as_the_per_tensor_path(clip_device, value):
    fast, plain = make_params(clip_device, shapes=[(5,), (3, 2)]), make_params(clip_device, shapes=[(5,), (3, 2)])
    for params in (fast, plain):
        give_grads(params, 8)
        params[1].grad = tg.tensor(np.array([[1, 2], [value, 3], [4, 5]], np.float32), device=clip_device)
    norm, plain_norm = tg.optim.clip_grad_norm_(fast, 1.0), tg.optim.clip_grad_norm_(plain, 1.0, foreach=False)
    np.testing.assert_array_equal(norm.numpy(), plain_norm.numpy())
    for a, b in zip(fast, plain):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())         # all nan: nan * g, and inf * 0
    with pytest.raises(RuntimeError, match="total norm of the gradients is"):
        tg.optim.clip_grad_norm_(fast, 1.0, error_if_nonfinite=True)


def test_error_if_nonfinite_leaves_the_gradients_alone(clip_device):
    params = make_params(clip_device, shapes=[(4,)])
    params[0].grad = tg.tensor(np.array([1, np.inf, 2, 3], np.float32), device=clip_device)
    with pytest.raises(RuntimeError, match="total norm of the gradients is inf"):
        tg.optim.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(params[0].grad.numpy(), [1, np.inf, 2, 3])


def test_float64_gradients_and_other_norms_keep_the_per_tensor_path(clip_device):
    params = [tg.tensor(np.arange(4.0), requires_grad=True, device=clip_device)]
    params[0].grad = tg.tensor(np.full(4, 3.0), device=clip_device)                  # float64
    assert tg.optim.clip_grad_norm_(params, 1.0).item() == pytest.approx(6.0)
    assert params[0].grad.dtype == tg.float64
    np.testing.assert_allclose(params[0].grad.numpy(), 0.5, rtol=1e-6)
    params = make_params(clip_device, shapes=[(4,)])
    params[0].grad = tg.tensor(np.array([1, -5, 2, 3], np.float32), device=clip_device)
    assert tg.optim.clip_grad_norm_(params, 1.0, norm_type=float("inf")).item() == pytest.approx(5.0)


def group_steps(device, foreach, seed=9):
    """Three AdamW steps over two groups; one parameter first gets a gradient at the second step (its state is
    made then, its step count lags: a second launch for its count), and a checkpoint round trip in between."""
    params = make_params(device)
    opt = tg.optim.AdamW([{"params": params[:50], "weight_decay": 0.1}, {"params": params[50:], "weight_decay": 0}],
                         lr=1e-2, betas=(0.9, 0.95), foreach=foreach)
    for step in range(3):
        give_grads(params, seed + step)
        if step == 0:
            params[2].grad = None
        opt.step()
        if step == 1:                  # save and load the state, as a resumed run does
            saved = opt.state_dict()
            opt = tg.optim.AdamW([{"params": params[:50], "weight_decay": 0.1},
                                  {"params": params[50:], "weight_decay": 0}], lr=1e-2, foreach=foreach)
            opt.load_state_dict(saved)
    return params, opt


def test_adamw_through_the_group_kernel_is_the_per_tensor_path_bit_for_bit(device):
    fast, fast_opt = group_steps(device, None)
    plain, plain_opt = group_steps(device, False)
    for a, b in zip(fast, plain):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert fast_opt.state[id(fast[2])]["step"] == 2 and fast_opt.state[id(fast[0])]["step"] == 3
    for a, b in zip(fast, plain):
        for key in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(host(fast_opt.state[id(a)][key]), host(plain_opt.state[id(b)][key]))


@pytest.mark.parametrize("found_inf", [0.0, 1.0], ids=["a step", "skipped"])
def test_a_scaled_step_through_the_group_kernel_is_the_per_tensor_path_bit_for_bit(device, found_inf):
    results = []
    for foreach in (None, False):
        params = make_params(device, shapes=SIZES[:20])
        opt = tg.optim.Adam(params, lr=1e-2, weight_decay=0.05, foreach=foreach)
        give_grads(params, 10)
        opt.step()                                                # a plain step: t = 1 on the host
        give_grads(params, 11)
        opt.found_inf = tg.tensor(found_inf, device=device)       # as GradScaler.step hands it over
        opt.step()
        del opt.found_inf
        results.append(([p.numpy() for p in params], [float(host(opt.state[id(p)]["step"])) for p in params]))
    (fast, fast_steps), (plain, plain_steps) = results
    for a, b in zip(fast, plain):
        np.testing.assert_array_equal(a, b)
    assert fast_steps == plain_steps == [2.0 - found_inf] * 20


def test_mixed_dtypes_in_a_group_take_the_per_tensor_path(device):
    params = make_params(device, shapes=[(3,), (2,)])
    params.append(tg.tensor(np.ones(2), requires_grad=True, device=device))      # float64
    opt = tg.optim.AdamW(params, lr=0.1)
    give_grads(params[:2], 12)
    params[2].grad = tg.tensor(np.ones(2), device=device)
    assert opt.update_group(params, opt.param_groups[0]) == params               # all left to update()
    opt.step()
    assert params[2].numpy()[0] < 1 and params[2].dtype == tg.float64


# ----------------------------------------------------------------------------- casts
@pytest.mark.parametrize("half", [np.float16, tg.bfloat16], ids=["float16", "bfloat16"])
def test_cast_there_and_back_is_astype_bit_for_bit(device, half):
    given = arrays(device, SIZES, np.random.default_rng(30), scale=300.0)      # float16 overflows in places
    halves = multi_tensor.cast(given, half, device)
    backs = multi_tensor.cast(halves, np.float32, device)
    for a, h, b in zip(given, halves, backs):
        want = host(a).astype(half)
        assert h.shape == b.shape == a.shape and h.dtype == half and b.dtype == np.float32
        np.testing.assert_array_equal(host(h).view(np.uint16), want.view(np.uint16))
        np.testing.assert_array_equal(host(b), want.astype(np.float32))
    if device != "cpu":                                    # views of one new array, end to end
        bases = {id(h.base) for h in halves if h.size}
        assert len(bases) == 1 and sum(h.size for h in halves) == next(h.base for h in halves if h.size).size


def test_cast_refuses_what_it_does_not_cast(device):
    xp = devices.array_module(device)
    with devices.use(device):
        f32, f64 = xp.ones(3, np.float32), xp.ones(3, np.float64)
    with pytest.raises(ValueError, match="casts float32 to float16 or bfloat16 or back, not float64 to float16"):
        multi_tensor.cast([f64], np.float16, device)
    with pytest.raises(ValueError, match="must share one dtype"):
        multi_tensor.cast([f32, f32.astype(np.float16)], tg.bfloat16, device)
    assert multi_tensor.cast([], np.float16, device) == []


# ----------------------------------------------------------------------------- launches (the stand-in counts them)
@on_standin
def test_a_clip_and_a_step_are_a_few_launches():
    from tinygrad_gpu.testing.cupy_standin import counters
    params = make_params("cuda", shapes=[(3, 5), (7,), (40, 3), (2,)])
    opt = tg.optim.AdamW([{"params": params[:2], "weight_decay": 0.1}, {"params": params[2:], "weight_decay": 0}])
    give_grads(params, 13)
    opt.step()                                    # makes the state (allocations not counted below)
    give_grads(params, 14)
    counters.reset()
    tg.optim.clip_grad_norm_(params, 1.0)
    assert (counters.launches, counters.raw_launches, counters.allocations, counters.host_syncs) == (2, 2, 1, 0)
    counters.reset()
    opt.step()
    assert (counters.launches, counters.raw_launches, counters.allocations, counters.host_syncs) == (2, 2, 0, 0)
    counters.reset()
    opt.found_inf = tg.tensor(0.0, device="cuda")
    opt.step()                                    # the counts move to the device (4 allocations), then 2 + 2
    del opt.found_inf
    assert (counters.raw_launches, counters.host_syncs) == (4, 0)
