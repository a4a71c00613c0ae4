"""The cpu device's two fast paths, kernels/compiled_cpu.py (numba) and kernels/fast_cpu.py (NumPy),
against the references they must agree with, and the switch between the three.

The references (reference_* in each kernel's Python file) are the plain formulas of the .cu
files; the fast versions compute the same in place, in chunks, compiled, and with shortcuts. Each
test of an op runs for both paths (the `cpu` fixture; the compiled one is skipped where numba is
not installed) and draws shapes with hypothesis, in float16, float32 and float64, including values
where a shortcut changes course (GELU past |x| = 10 and past x^2 overflowing, softmax scores past
+-60, rows of nearly equal values) and sizes that straddle fast_cpu.CHUNK.
"""
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinygrad_gpu.kernels import (adamw, causal_softmax, cpu_paths, cross_entropy, embedding_backward, fast_cpu,
                                  gelu, layernorm)

DTYPES = st.sampled_from([np.float16, np.float32, np.float64])
needs_numba = pytest.mark.skipif(not cpu_paths.numba_installed(), reason="numba is not installed (the compiled path)")
PATHS = ["numpy", pytest.param("compiled", marks=needs_numba)]


def path_module(path):
    if path == "compiled":
        from tinygrad_gpu.kernels import compiled_cpu
        return compiled_cpu
    return fast_cpu


@pytest.fixture(params=["numpy", pytest.param("compiled", marks=needs_numba),
                        pytest.param("compiled on every core", marks=needs_numba)], scope="module")
def cpu(request):
    """The module of one CPU path: fast_cpu, or compiled_cpu (the same functions) with the builds that the tests'
    small arrays get (the serial ones) or, at any size (PARALLEL_MIN 0), the parallel ones, whose stretches of
    rows, one per core, must be tested too. (module scope: hypothesis refuses function-scoped fixtures)"""
    module = path_module(request.param.split()[0])
    if request.param != "compiled on every core":
        yield module
        return
    threshold, module.PARALLEL_MIN = module.PARALLEL_MIN, 0
    try:
        yield module
    finally:
        module.PARALLEL_MIN = threshold


def eps(dtype):
    return float(np.finfo(dtype).eps)


def assert_close(got, want, tolerance):
    """|got - want| <= tolerance elementwise, in float64 (the same inf or nan in both counts as equal);
    the same dtype and shape."""
    assert got.dtype == want.dtype and got.shape == want.shape
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    same = (got64 == want64) | (np.isnan(got64) & np.isnan(want64))
    fine = same | (np.abs(got64 - want64) <= tolerance)
    worst = np.unravel_index(np.argmin(fine), fine.shape) if fine.size else ()
    assert fine.all(), f"at {worst}: got {got[worst]}, want {want[worst]}"


def extreme(rng, shape, dtype):
    """Normal values of several sizes, with the dtype's extremes, 0, +-10 and nearly-saturating ones mixed in."""
    x = rng.standard_normal(shape) * rng.choice([0.1, 4.0, 30.0], shape)
    specials = np.array([0.0, 10.0, -10.0, 9.99, 1e3, -1e3, 0.5 * float(np.finfo(dtype).max),
                         -0.5 * float(np.finfo(dtype).max)])
    picks = rng.random(x.shape) < 0.1
    x[picks] = rng.choice(specials, int(picks.sum()))
    return x.astype(dtype)


# ----------------------------------------------------------------------------- GELU
@given(st.sampled_from([0, 1, 7, 1000, fast_cpu.CHUNK + 5, 2 * fast_cpu.CHUNK + 1]), DTYPES, st.integers(0, 2**32 - 1))
def test_gelu_forward_and_its_kept_slope_agree_with_the_references(cpu, n, dtype, seed):
    rng = np.random.default_rng(seed)
    x, dy = extreme(rng, n, dtype), rng.standard_normal(n).astype(dtype)
    want_y, want_dx = gelu.reference_forward(x), gelu.reference_backward(x, dy)
    y = cpu.gelu_forward(x, gelu.K, gelu.C)
    y_too, slope = cpu.gelu_forward_and_slope(x, gelu.K, gelu.C)
    np.testing.assert_array_equal(y_too, y)            # training and inference give the same activations
    # 1 + tanh(u) cancels for x < 0: an ulp of error scaled by |x|; the slope's terms reach about 14
    assert_close(y, want_y, 4 * eps(dtype) * (1 + np.abs(x.astype(np.float64))))
    dx = cpu.gelu_backward_from_slope(slope, dy.copy(), dtype)
    assert_close(dx, want_dx, 64 * eps(dtype) * (1 + np.abs(dy.astype(np.float64))))
    assert np.isfinite(y).all() and np.isfinite(dx).all()


def test_gelu_slope_is_the_derivative_on_both_sides_of_the_clip(cpu):
    """The fast slope takes x clipped to +-10; against float64 on |x| from 0 to 1e30."""
    x = np.concatenate([np.linspace(-12, 12, 4801), [-1e30, -1e20, -1e13, -20, 20, 1e13, 1e20, 1e30]])
    for dtype in (np.float32, np.float64):
        _, slope = cpu.gelu_forward_and_slope(x.astype(dtype), gelu.K, gelu.C)
        x64 = x.astype(dtype).astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            t = np.tanh(gelu.K * x64 * (1 + gelu.C * x64 ** 2))
            want = 0.5 * (1 + t) + 0.5 * gelu.K * x64 * (1 + 3 * gelu.C * x64 ** 2) * (1 - t * t)
        want[np.abs(x64) > 1e6] = x64[np.abs(x64) > 1e6] > 0
        np.testing.assert_allclose(slope, want, rtol=0, atol=64 * eps(dtype))


def test_gelu_backward_computes_in_a_spare_gradient_and_leaves_the_slope_alone(cpu):
    x = np.linspace(-3, 3, 50, dtype=np.float32)
    _, slope = cpu.gelu_forward_and_slope(x, gelu.K, gelu.C)
    kept, dy = slope.copy(), np.ones(50, np.float32)
    dx = cpu.gelu_backward_from_slope(slope, dy, np.float32, dout_is_spare=True)
    assert np.shares_memory(dx, dy)
    np.testing.assert_array_equal(slope, kept)
    dy = np.ones(50, np.float32)
    dx = cpu.gelu_backward_from_slope(slope, dy, np.float32)
    assert not np.shares_memory(dx, dy) and (dy == 1).all()


# ----------------------------------------------------------------------------- layer norm
@given(st.integers(1, 40), st.sampled_from([1, 7, 64, 257]), DTYPES, st.booleans(), st.booleans(),
       st.sampled_from(["normal", "offset", "constant"]), st.integers(0, 2**32 - 1))
def test_layernorm_agrees_with_the_reference(cpu, rows, n, dtype, with_bias, spare, values, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, n))
    if values == "offset":                  # a large mean next to a small spread: the variance's trap
        x = 1000 + 0.1 * x
    elif values == "constant":              # rstd = 1 / sqrt(eps)
        x = np.full((rows, n), 3.0)
    x = x.astype(dtype)
    weight, bias = (rng.standard_normal(n).astype(dtype) for _ in range(2))
    bias = bias if with_bias else None
    dout = rng.standard_normal((rows, n)).astype(dtype)
    # float16: the reference keeps mean and rstd in float32, as the kernels do, the fast version rounds them
    want = tuple(a.astype(dtype) for a in layernorm.reference_forward(x, weight, bias, 1e-5))
    got = cpu.layernorm_forward(x, weight, bias, 1e-5)
    tol = 16 * eps(dtype)
    mean, rstd = want[1], want[2]
    # x - mean cancels all but the last digits of values far from 0 (the "offset" rows): the two ways
    # of summing the mean differ by an ulp of |x|, which rstd magnifies in xhat (and so in out and rstd)
    shifted = tol * np.abs(x.astype(np.float64)).max() * np.abs(rstd.astype(np.float64)).max()
    magnified = (np.abs(weight.astype(np.float64)).max(), 0, np.abs(rstd.astype(np.float64)).max())    # out, mean, rstd
    for g, w, magnify in zip(got, want, magnified):
        assert_close(g, w, tol * (1 + np.abs(w.astype(np.float64))) + shifted * magnify)
    want_grads = layernorm.reference_backward(x, weight, mean, rstd, dout)
    dout_before = dout.copy()
    grads = cpu.layernorm_backward(x, weight, mean, rstd, dout, True, dout_is_spare=spare)
    if not spare:
        np.testing.assert_array_equal(dout, dout_before)
    # dx cancels terms of size rstd |dout weight| (a row of nearly equal values keeps only their last digits)
    cancelled = tol * np.abs(rstd.astype(np.float64)).max() * np.abs(dout_before * weight).astype(np.float64).max()
    for g, w in zip(grads, want_grads):
        assert_close(g, w, tol * rows * (1 + np.abs(w.astype(np.float64))) + 2 * cancelled)


@pytest.mark.parametrize("spare", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layernorm_backward_adds_dx_add_as_the_engine_would(cpu, dtype, spare):
    """dx_add (the residual stream's gradient, layernorm.adds_in_kernel): dx + dx_add with dx rounded first, so
    to the bit what the engine's sum of the two gradients gives; dx_add itself is left as it was."""
    rng = np.random.default_rng(11)
    x, dout, dx_add = (rng.standard_normal((9, 70)).astype(dtype) for _ in range(3))
    weight = rng.standard_normal(70).astype(dtype)
    _, mean, rstd = cpu.layernorm_forward(x, weight, None, 1e-5)
    alone, dweight, dbias = cpu.layernorm_backward(x, weight, mean, rstd, dout.copy(), True)
    kept = dx_add.copy()
    summed = cpu.layernorm_backward(x, weight, mean, rstd, dout.copy(), True, dout_is_spare=spare, dx_add=dx_add)
    np.testing.assert_array_equal(summed[0], alone + kept)
    np.testing.assert_array_equal(summed[1], dweight)
    np.testing.assert_array_equal(summed[2], dbias)
    np.testing.assert_array_equal(dx_add, kept)


# ----------------------------------------------------------------------------- causal softmax
def stored(a, by_columns: bool):
    """a itself, or a copy stored by columns: the transposed view of a C-contiguous array, as attention gives
    its scores to the compiled path (causal_softmax.wants_columns), which has kernels of its own for them."""
    return np.ascontiguousarray(a.swapaxes(-1, -2)).swapaxes(-1, -2) if by_columns else a


def is_stored_by_columns(a) -> bool:
    return a.swapaxes(-1, -2).flags.c_contiguous and not a.flags.c_contiguous


@given(st.integers(1, 3), st.integers(1, 70), st.integers(1, 70), DTYPES, st.sampled_from([0.1, 3.0, 50.0, 1e4]),
       st.booleans(), st.booleans(), st.integers(0, 2**32 - 1))
def test_causal_softmax_agrees_with_the_reference(cpu, heads, L, S, dtype, size, spare, by_columns, seed):
    """Scores of every size, stored by rows or by columns: the fast forward skips the row maxima only when every
    scaled score is within +-60, and must give the reference's probabilities both ways, stored as the scores
    were."""
    rng = np.random.default_rng(seed)
    scores = (rng.standard_normal((heads, L, S)) * size).astype(dtype)
    scores.flat[rng.integers(scores.size)] = 2 * size           # one score past 60 in the large cases
    scores = stored(scores, by_columns)
    dprobs = stored(rng.standard_normal((heads, L, S)).astype(dtype), by_columns)
    want = causal_softmax.reference_forward(scores, 0.5)
    before = scores.copy()
    probs = cpu.causal_softmax_forward(scores, 0.5, scores_is_spare=spare)
    if not spare:
        np.testing.assert_array_equal(scores, before)
    assert np.isfinite(probs).all()
    assert_close(probs, want, 8 * eps(dtype))
    assert is_stored_by_columns(probs) == is_stored_by_columns(scores)
    want_d = causal_softmax.reference_backward(want, dprobs, 0.5)
    dprobs_before = dprobs.copy()
    got_d = cpu.causal_softmax_backward(stored(want, by_columns), dprobs, 0.5, dout_is_spare=spare)
    if not spare:
        np.testing.assert_array_equal(dprobs, dprobs_before)
    dprobs = dprobs_before
    assert_close(got_d, want_d, 8 * eps(dtype) * S * np.abs(dprobs.astype(np.float64)).max())


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("size", [1.0, 50.0, 1e4])
@pytest.mark.parametrize("path", [*PATHS, "reference"])
def test_causal_softmax_with_and_without_the_row_max_is_the_float64_softmax(path, dtype, size):
    """The fast forward skips subtracting each row's max when every scaled score is moderate (|z| < 60)
    and needs it past that: both ways, and the reference too, the float64 softmax of the visible keys."""
    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((2, 3, 5, 7)) * size).astype(dtype)
    scores[0, 0, 4, 1] = 2 * size               # one score past 60 after scaling, in the wide cases
    softmax = causal_softmax.reference_forward if path == "reference" else path_module(path).causal_softmax_forward
    probs = softmax(scores, 0.5)
    z = np.where(causal_softmax.future_mask(np, 5, 7), -np.inf, 0.5 * scores.astype(np.float64))
    want = np.exp(z - z.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    assert probs.dtype == dtype and np.isfinite(probs).all()
    np.testing.assert_allclose(probs, want, rtol=0, atol=8 * np.finfo(dtype).eps)


@pytest.mark.parametrize("by_columns", [False, True])
def test_causal_softmax_rows_of_nan_and_inf_are_nan_where_seen_and_0_in_the_future(cpu, by_columns):
    """A nan or +inf score makes its row's visible probabilities nan (as causal_softmax.cu's); -inf is a key
    never chosen. Only what a query sees is compared: the reference's masked places turn nan with the row."""
    scores = np.random.default_rng(0).standard_normal((2, 4, 6)).astype(np.float32)
    scores[0, 1, 0], scores[0, 2, 1], scores[1, 3, 0] = np.nan, np.inf, -np.inf
    scores = stored(scores, by_columns)
    probs = cpu.causal_softmax_forward(scores, 0.5)
    want = causal_softmax.reference_forward(scores, 0.5)
    seen = ~causal_softmax.future_mask(np, 4, 6)
    assert_close(probs[:, seen], want[:, seen], 8 * eps(np.float32))
    assert np.isnan(probs[0, 1, :2]).all() and np.isnan(probs[0, 2, :3]).all() and probs[1, 3, 0] == 0


# ----------------------------------------------------------------------------- cross-entropy
@given(st.integers(1, 40), st.sampled_from([1, 2, 65, 300]), DTYPES, st.sampled_from([0.0, 0.1]),
       st.sampled_from([1.0, 30.0, 1e4]), st.integers(0, 2**32 - 1))
def test_cross_entropy_agrees_with_the_reference(cpu, rows, classes, dtype, smoothing, size, seed):
    """Logits of every size (the exp of the compiled path is its own), ignored rows, and -inf logits. (The numpy
    path runs the reference itself.)"""
    if cpu is fast_cpu:
        pytest.skip("cross-entropy's numpy path is its reference")
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((rows, classes)) * size).astype(dtype)
    if classes > 2:
        logits[0, 1] = -np.inf                            # a class never chosen (not the target below)
    targets = rng.integers(0, classes, rows)
    targets[0], targets[rows // 2] = 0, -100              # an ignored row
    dlosses = rng.standard_normal(rows).astype(cross_entropy.runtime.working_dtype(dtype))
    want_losses, want_lse = cross_entropy.reference_forward(logits, targets, -100, smoothing)
    losses, lse = cpu.cross_entropy_forward(logits, targets, -100, smoothing)
    work_eps = eps(cross_entropy.runtime.working_dtype(dtype))
    scale = 1 + np.abs(logits.astype(np.float64)).max(1, initial=0, where=np.isfinite(logits))
    if smoothing and classes > 2:                         # the mean of a row with -inf is -inf: inf there
        scale[0] = np.inf
    assert_close(lse, want_lse, 4 * work_eps * scale)
    assert_close(losses, want_losses, 8 * work_eps * scale)
    want_d = cross_entropy.reference_backward(logits, targets, want_lse, dlosses, -100, smoothing)
    got_d = cpu.cross_entropy_backward(logits, targets, want_lse, dlosses, -100, smoothing)
    # exp(x - lse) errs by an ulp of x - lse, which is as large as the logits (a loss of 1e4 is exp of it)
    assert_close(got_d, want_d, (8 * eps(dtype) + 4 * work_eps * scale[:, None]) * np.abs(dlosses)[:, None])
    assert (got_d[rows // 2] == 0).all()


@needs_numba
def test_the_compiled_exp_is_within_2_ulps_and_0_below_e_to_the_minus_88():
    from tinygrad_gpu.kernels import compiled_cpu
    c = compiled_cpu._with_exp_constants(np.float32)
    t = np.concatenate([-np.geomspace(1e-30, 87.3, 200001), [0.0, -88.5, -1e4, -np.inf, np.nan]]).astype(np.float32)
    got = t.copy()
    total = compiled_cpu._exp_in_place(got[None], 0, t.size - 1, np.empty(t.size, np.int32), True, c,
                                       np.float32(0))                                               # not the nan
    want = np.exp(t.astype(np.float64))
    normal = slice(0, 200002)
    ulps = np.abs(got[normal] - want[normal]) / np.spacing(want[normal].astype(np.float32))
    assert ulps.max() <= 2, f"{ulps.max():.2f} ulps at t = {t[np.argmax(ulps)]}"
    np.testing.assert_array_equal(got[-4:-1], [0, 0, 0])
    np.testing.assert_allclose(total, want[:-1].sum(), rtol=1e-5)
    shifted = t[:-5] + np.float32(40)                   # the shift is subtracted first: exp(t + 40 - 40)
    compiled_cpu._exp_in_place(shifted[None], 0, shifted.size, np.empty(shifted.size, np.int32), True, c,
                               np.float32(40))
    np.testing.assert_allclose(shifted, np.exp((t[:-5] + np.float32(40)).astype(np.float64) - 40), rtol=4e-6, atol=0)
    nan = t[-1:].copy()
    compiled_cpu._exp_in_place(nan[None], 0, 1, np.empty(1, np.int32), True, c, np.float32(0))
    assert np.isnan(nan[0])


# ----------------------------------------------------------------------------- embedding backward
@given(st.integers(0, 300), st.integers(1, 70), st.integers(1, 40), DTYPES, st.integers(0, 2**32 - 1))
def test_embedding_backward_agrees_with_the_reference(cpu, tokens, n_embeddings, dim, dtype, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, n_embeddings, tokens)                # repeated ids must all add up
    dout = rng.standard_normal((tokens, dim)).astype(dtype)
    want = embedding_backward.reference_embedding_backward(ids, dout, n_embeddings)
    # both add each id's rows in the dtype, in other orders: each addition errs by at most eps times
    # the running sum, which is at most the sum of the rows' magnitudes
    magnitudes = embedding_backward.reference_embedding_backward(ids, np.abs(dout.astype(np.float64)), n_embeddings)
    counts = np.bincount(ids, minlength=n_embeddings)[:, None]
    assert_close(cpu.embedding_backward(ids, dout, n_embeddings), want, 2 * eps(dtype) * counts * magnitudes)


def test_embedding_backward_refuses_an_id_past_the_table(cpu):
    """F.embedding checks the ids first; past that, an id beyond the table is NumPy's IndexError on both paths
    (the compiled loop would write outside the table)."""
    with pytest.raises(IndexError):
        cpu.embedding_backward(np.array([0, 4]), np.ones((2, 2), np.float32), 4)


# ----------------------------------------------------------------------------- AdamW
@given(st.integers(1, 300), DTYPES, st.booleans(), st.integers(0, 2**32 - 1))
def test_adamw_agrees_with_the_reference(cpu, n, dtype, decoupled, seed):
    rng = np.random.default_rng(seed)
    fast = [rng.standard_normal(n).astype(dtype), np.zeros(n, dtype), np.zeros(n, dtype)]
    plain = [a.copy() for a in fast]
    eps_adam = 1e-4 if dtype == np.float16 else 1e-8          # float16 rounds 1e-8 to 0
    for step in range(1, 4):
        size = rng.choice([1e-3, 1.0, 1e3] if dtype != np.float16 else [1e-1, 1.0, 10.0])   # g^2 in range
        grad = (rng.standard_normal(n) * size).astype(dtype)
        s = adamw.step_scalars(1e-2, 0.9, 0.99, 0.1, step, decoupled)
        args = (0.9, 0.99, s["bias_correction2_sqrt"], eps_adam, s["decay"], s["l2"])
        cpu.adamw_update(fast[0], grad, fast[1], fast[2], s["step_size"], *args)
        adamw.reference_update(plain[0], grad, plain[1], plain[2], s["step_size"], *args)
    for got, want in zip(fast, plain):
        assert np.isfinite(got).all()
        assert_close(got, want, 16 * eps(dtype) * (1 + np.abs(want.astype(np.float64))))


# ----------------------------------------------------------------------------- clip's sum of squares
@needs_numba
@pytest.mark.parametrize("every_core", [False, True])
@given(st.lists(st.sampled_from([(), (0,), (1,), (33,), (7, 3), (5000,)]), max_size=12),
       st.sampled_from([1e-3, 1.0, 1e17, 1e19]), st.sampled_from([None, np.nan, np.inf]), st.integers(0, 2**32 - 1))
def test_the_compiled_sum_of_squares_is_the_reference_s(every_core, shapes, size, special, seed):
    """multi_tensor.reference_sum_of_squares, which clip_grad_norm_ takes on the cpu: equal to float32 rounding,
    inf where float32 squares or their sum pass its range (1e19: every square does; 1e17: the sum may), nan
    for a nan, and 0 for no values. every_core: the parallel build (PARALLEL_MIN 0), whose parts add up too."""
    from tinygrad_gpu.kernels import compiled_cpu, multi_tensor
    rng = np.random.default_rng(seed)
    arrays = [(rng.standard_normal(shape) * size).astype(np.float32).reshape(shape) for shape in shapes]
    if special is not None and any(a.size for a in arrays):
        big = max(arrays, key=lambda a: a.size)
        big.flat[rng.integers(big.size)] = special
    threshold = compiled_cpu.PARALLEL_MIN
    compiled_cpu.PARALLEL_MIN = 0 if every_core else threshold
    try:
        got = compiled_cpu.sum_of_squares(arrays)
    finally:
        compiled_cpu.PARALLEL_MIN = threshold
    want = multi_tensor.reference_sum_of_squares(arrays)
    assert got.shape == () and got.dtype == np.float32
    assert_close(got, want, 1e-5 * abs(float(want)) if np.isfinite(want) else 0)


# ----------------------------------------------------------------------------- the switch
CALLS = {"gelu_forward": lambda x: gelu.forward(x, "cpu"),
         "layernorm_forward": lambda x: layernorm.forward(x[0], x[0, 0], None, 1e-5, "cpu"),
         "layernorm_backward": lambda x: layernorm.backward(x[0], x[0, 0], x[0, 0], x[0, 0], x[0], True, "cpu"),
         "causal_softmax_forward": lambda x: causal_softmax.forward(x, 1.0, "cpu"),
         "causal_softmax_backward": lambda x: causal_softmax.backward(x, x, 1.0, "cpu"),
         "embedding_backward": lambda x: embedding_backward.embedding_backward(np.array([0, 1]), x[0, :2], 4, "cpu"),
         "cross_entropy_forward": lambda x: cross_entropy.forward(x[0], np.array([0, 2, 1]), -100, 0.0, "cpu"),
         "cross_entropy_backward": lambda x: cross_entropy.backward(x[0], np.array([0, 2, 1]), x[0, 0], x[0, 0], -100,
                                                                    0.0, "cpu"),
         "adamw_update": lambda x: adamw.adamw_update(x[0, 0].copy(), x[0, 0], x[0, 0] * 0, x[0, 0] * 0, 1e-3, 0.9,
                                                      0.99, 1e-8, 0.1, 1, "cpu")}


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("path", [*PATHS, "reference"])
def test_the_cpu_runs_the_path_the_switch_names(monkeypatch, path, name):
    """TINYGRAD_GPU_CPU_KERNELS=compiled|numpy|reference: the launchers call that module's function, once, and
    no other path's; reference calls neither."""
    monkeypatch.setenv(cpu_paths.CPU_KERNELS, path)
    calls = []
    modules = {"numpy": fast_cpu, "compiled": path_module("compiled") if cpu_paths.numba_installed() else None}
    for module in filter(None, modules.values()):
        original = getattr(module, name, None)
        if original is None:                     # cross-entropy's numpy path is the reference
            continue
        monkeypatch.setattr(module, name,
                            lambda *a, _m=module, _o=original, **k: calls.append(_m.__name__) or _o(*a, **k))
    CALLS[name](np.ones((2, 3, 3), np.float32))
    chosen = [modules[path].__name__] if path in modules and hasattr(modules[path], name) else []
    assert calls == chosen


def test_the_default_path_is_compiled_with_numba_and_numpy_without(monkeypatch):
    monkeypatch.delenv(cpu_paths.CPU_KERNELS, raising=False)
    assert cpu_paths.cpu_path() == ("compiled" if cpu_paths.numba_installed() else "numpy")
    monkeypatch.setattr(cpu_paths, "numba_installed", lambda: False)
    assert cpu_paths.cpu_path() == "numpy"
    monkeypatch.setenv(cpu_paths.CPU_KERNELS, "compiled")
    with pytest.raises(RuntimeError, match="needs numba: pip install numba"):
        cpu_paths.cpu_path()
    monkeypatch.setenv(cpu_paths.CPU_KERNELS, "fast")
    with pytest.raises(ValueError, match="compiled, numpy, reference"):
        gelu.forward(np.ones(3, np.float32), "cpu")


def test_the_switch_is_read_as_os_environ_holds_it_at_each_ask(monkeypatch):
    """cpu_paths reads the variable from the dict behind os.environ (faster than os.environ.get): every change
    made through os.environ shows at the next ask, and an os.environ swapped for a plain dict is read too."""
    monkeypatch.delenv(cpu_paths.CPU_KERNELS, raising=False)
    assert cpu_paths._variable() == ""
    for value in ("numpy", "reference", "caf\u00e9"):
        monkeypatch.setenv(cpu_paths.CPU_KERNELS, value)
        assert cpu_paths._variable() == value == os.environ[cpu_paths.CPU_KERNELS]
    monkeypatch.setattr(os, "environ", {cpu_paths.CPU_KERNELS: "numpy"})
    assert cpu_paths._variable() == "numpy" and cpu_paths.cpu_path() == "numpy"


def test_16_bit_data_and_other_devices_take_no_cpu_path(monkeypatch):
    monkeypatch.setenv(cpu_paths.CPU_KERNELS, "numpy")
    f32, f16 = np.zeros(3, np.float32), np.zeros(3, np.float16)
    assert cpu_paths.cpu_kernels("cpu", f32, np.zeros(3)) is fast_cpu
    assert cpu_paths.cpu_kernels("cpu", f32, None) is fast_cpu
    assert cpu_paths.cpu_kernels("cpu", f32, f16) is None and cpu_paths.cpu_kernels("emu", f32) is None


@needs_numba
def test_the_fraction_for_tanh_is_the_fit_and_within_8_ulps():
    """compiled_cpu's TANH_P and TANH_Q are what benchmarks/cpu_kernels.py's fit gives, and the fraction, in
    float32, is within 8 float32 ulps of float64's tanh on (0, 9] and exactly +-1 beyond."""
    import sys
    from pathlib import Path
    from tinygrad_gpu.kernels import compiled_cpu
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    try:
        from cpu_kernels import rational_tanh
    finally:
        sys.path.pop(0)
    p, q = rational_tanh()
    # the least-squares fit is ill-conditioned: its last digits differ with the machine's BLAS (1e-6 relative seen
    # on an AMD EPYC against the Intel Xeon that fitted them); the ulps below are what must hold
    np.testing.assert_allclose(p, compiled_cpu.TANH_P, rtol=1e-5, atol=0)
    np.testing.assert_allclose(q, compiled_cpu.TANH_Q, rtol=1e-5, atol=0)
    constants = compiled_cpu._gelu_constants(np.float32, gelu.K, gelu.C)
    u = np.concatenate([np.geomspace(1e-6, 1, 2000), np.linspace(1, 9, 4001)]).astype(np.float32)
    got = np.array([compiled_cpu._tanh_rational(v, constants) for v in u], np.float32)
    want = np.tanh(u.astype(np.float64))
    ulps = np.abs(got - want) / np.spacing(want.astype(np.float32))
    assert ulps.max() <= 8, f"{ulps.max():.1f} ulps at u = {u[np.argmax(ulps)]}"
    beyond = np.array([compiled_cpu._tanh_rational(v, constants) for v in np.float32([-1e30, -9.5, 9.5, 1e30])])
    np.testing.assert_array_equal(beyond, [-1, -1, 1, 1])


def test_without_numba_the_cpu_takes_numpy_s_path_and_trains():
    """numba absent (sys.modules refuses it, as an environment without it would): the default path is numpy,
    compiled_cpu is never imported, and a small GPT's steps run and lower the loss."""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import sys
        sys.modules["numba"] = None                  # import numba now fails, and find_spec finds nothing
        import tinygrad_gpu as tg
        from tinygrad_gpu.kernels import cpu_paths
        from tinygrad_gpu.nn import GPT, GPTConfig
        tg.manual_seed(0)
        model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11, dropout=0.0))
        optimizer = model.configure_optimizers(0.1, 1e-2, (0.9, 0.99))
        x = tg.tensor([[i % 11 for i in range(8)]] * 2)
        losses = []
        for _ in range(5):
            optimizer.zero_grad()
            _, loss = model(x, x)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        assert cpu_paths.cpu_path() == "numpy", cpu_paths.cpu_path()
        assert "tinygrad_gpu.kernels.compiled_cpu" not in sys.modules
        assert losses[-1] < losses[0], losses
        print("ok", losses[0], losses[-1])
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != cpu_paths.CPU_KERNELS})
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stdout + done.stderr
