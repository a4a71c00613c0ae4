"""The cpu's three paths for the fused ops (kernels/cpu_paths.py: TINYGRAD_GPU_CPU_KERNELS=reference|numpy|compiled)
give one GPT training step the same numbers, and "reference" really runs the references.

tests/test_cpu_kernels.py checks each fast function against its reference on drawn shapes and values; this file
checks the switch end to end: a small GPT (2 layers, dropout 0.1) takes one step -- forward, cross-entropy,
backward, AdamW -- once per path, from the same seed, and the loss, every gradient and every updated parameter
agree. Under "reference" every public function of fast_cpu.py and compiled_cpu.py raises, so a launcher that
bypassed the switch would fail here, and each fused op's reference_* must have run, forward and backward.

The variable is read at every launch, so monkeypatch.setenv switches paths inside this one process. Each path's
step runs once per module (a fixture); numba keeps its compiled kernels on disk (compiled_cpu.py), so only the
first run on a machine pays for compiling them.
"""
import inspect

import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu.kernels import (adamw, causal_softmax, cpu_paths, cross_entropy, embedding_backward, fast_cpu, gelu,
                                  layernorm)
from tinygrad_gpu.nn import GPT, GPTConfig

needs_numba = pytest.mark.skipif(not cpu_paths.numba_installed(), reason="numba is not installed (the compiled path)")

EPS32 = float(np.finfo(np.float32).eps)
LR, ADAM_EPS, WEIGHT_DECAY = 1e-2, 1e-8, 0.1
# The reference_* of every fused op a GPT step runs on the cpu. (Dropout has no fused form on the cpu: x times a
# mask drawn by NumPy's generator, the same on every path. Attention there is the array library's products around
# causal_softmax; causal_attention.reference_* defines the tiled kernels of emu and cuda.)
REFERENCES = {gelu: ("reference_forward", "reference_backward"),
              layernorm: ("reference_forward", "reference_backward"),
              causal_softmax: ("reference_forward", "reference_backward"),
              cross_entropy: ("reference_forward", "reference_backward"),
              embedding_backward: ("reference_embedding_backward",),
              adamw: ("reference_update",)}


def fast_modules():
    modules = [fast_cpu]
    if cpu_paths.numba_installed():
        from tinygrad_gpu.kernels import compiled_cpu
        modules.append(compiled_cpu)
    return modules


def forbid_fast_paths(monkeypatch):
    """Every public function of fast_cpu and compiled_cpu raises when called."""
    for module in fast_modules():
        for name, function in vars(module).items():
            if inspect.isfunction(function) and function.__module__ == module.__name__ and not name.startswith("_"):
                def refuse(*args, _name=f"{module.__name__}.{name}", **kwargs):
                    raise AssertionError(f"{_name} ran under {cpu_paths.CPU_KERNELS}=reference")
                monkeypatch.setattr(module, name, refuse)


def count_references(monkeypatch) -> list:
    """The names of the reference_* functions of REFERENCES as they are called (the launchers look them up in
    their module at each call, so the wrapper is what runs)."""
    called = []
    for module, names in REFERENCES.items():
        for name in names:
            original = getattr(module, name)
            monkeypatch.setattr(module, name, lambda *a, _o=original, _n=f"{module.__name__}.{name}", **k:
                                called.append(_n) or _o(*a, **k))
    return called


def training_step(path: str) -> dict:
    """One step of a small GPT on the cpu with TINYGRAD_GPU_CPU_KERNELS=path: the loss, the gradients, the
    parameters before and after AdamW's update (by name), and the references called."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv(cpu_paths.CPU_KERNELS, path)
        if path == "reference":
            forbid_fast_paths(monkeypatch)
        called = count_references(monkeypatch)
        tg.manual_seed(0)            # the same weights and the same dropout masks on every path
        model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=37, dropout=0.1))
        model.train()
        optimizer = model.configure_optimizers(WEIGHT_DECAY, LR, (0.9, 0.95), ADAM_EPS)
        rng = np.random.default_rng(0)
        idx, targets = (tg.tensor(rng.integers(0, 37, (3, 16)), device="cpu") for _ in range(2))
        _, loss = model(idx, targets)
        loss.backward()
        params = dict(model.named_parameters())
        step = dict(path=path, loss=loss.item(), called=called,
                    grads={n: p.grad.numpy().copy() for n, p in params.items()},
                    before={n: p.numpy().copy() for n, p in params.items()})
        optimizer.step()
        step["after"] = {n: p.numpy().copy() for n, p in params.items()}
        return step


@pytest.fixture(scope="module")
def reference_step():
    return training_step("reference")


@pytest.fixture(scope="module", params=["numpy", pytest.param("compiled", marks=needs_numba)])
def fast_step(request):
    return training_step(request.param)


def test_the_reference_path_runs_every_fused_op_s_reference_and_no_fast_function(reference_step):
    """(forbid_fast_paths made any call of fast_cpu or compiled_cpu fail the step itself.)"""
    wanted = {f"{module.__name__}.{name}" for module, names in REFERENCES.items() for name in names}
    assert set(reference_step["called"]) == wanted


def test_the_fast_paths_run_their_own_functions(fast_step):
    """The converse: on numpy's path and the compiled one no reference runs, but cross-entropy's on numpy's
    (its numpy path is its reference: a pass or two over the logits, cheap beside the product that made them)."""
    own = {f"{cross_entropy.__name__}.{name}" for name in REFERENCES[cross_entropy]}
    assert set(fast_step["called"]) == (own if fast_step["path"] == "numpy" else set())


def test_one_gpt_step_agrees_on_every_path(reference_step, fast_step):
    """The loss, every gradient and every updated parameter of the numpy and compiled paths against the reference.

    All three compute in float32 the same formulas, and differ only in rounding: sums in another order (in chunks,
    in vector lanes), fused multiply-adds, and the compiled path's own exp and tanh (within 2 and 8 ulps,
    tests/test_cpu_kernels.py). The matrix products are the same NumPy calls on every path.
    """
    ref, got = reference_step, fast_step
    # The loss: a mean of 48 row losses, each a log-sum-exp minus a logit; a few ulps of their rounding survive the
    # mean. 8 ulps (measured: at most 0.6).
    np.testing.assert_allclose(got["loss"], ref["loss"], rtol=8 * EPS32, atol=0)
    for name, want in ref["grads"].items():
        # A gradient element is a sum over the batch of products through the layers above it, each op of which
        # may round differently by an ulp or a few of the values it handles; measured relative to the tensor's
        # largest element: at most 6 ulps of it over seeds 0 to 5. Allowed: 128 ulps of it (1.5e-5 relative),
        # a thousand times less than a wrong formula, a missed mask or a dropped term would give.
        grad_tolerance = 128 * EPS32 * np.abs(want).max()
        difference = np.abs(got["grads"][name] - want)
        assert difference.max() <= grad_tolerance, f"{got['path']}: {name}'s gradient is {difference.max():.3g} " \
                                                   f"off (allowed {grad_tolerance:.3g})"
        # AdamW's first step moves each weight by lr g / (|g| + eps) (m-hat = g and sqrt(v-hat) = |g| at t = 1),
        # after the decay. That ratio's slope in g is eps / (|g| + eps)^2, so gradients within grad_tolerance of
        # each other move a weight by amounts at most lr * grad_tolerance * eps / (|g| - grad_tolerance + eps)^2
        # apart (never more than 2 lr): nothing where |g| is large, up to 2 lr where g is rounding noise (the
        # keys' biases, whose exact gradient is 0: a softmax ignores what all its scores share). Plus the
        # rounding of the update and of the weight: 8 ulps of |p| + lr. (Measured: at most 0.32 of this bound.)
        g, p = np.abs(want), np.abs(ref["before"][name])
        spread = grad_tolerance * ADAM_EPS / (np.maximum(g - grad_tolerance, 0) + ADAM_EPS) ** 2
        allowed = LR * np.minimum(2.0, spread) + 8 * EPS32 * (p + LR)
        moved = np.abs(got["after"][name] - ref["after"][name])
        assert (moved <= allowed).all(), f"{got['path']}: {name} after the step is {moved.max():.3g} off"
        assert not np.array_equal(ref["after"][name], ref["before"][name]) or not want.any()   # the step happened


def test_a_gelu_switched_to_the_reference_between_forward_and_backward_recomputes_its_slope(monkeypatch):
    """A forward on a fast path keeps gelu'(x) for its backward (kernels/gelu.py); a backward that finds the switch
    at reference since then runs reference_backward instead of multiplying by the kept slope on a fast path."""
    x = tg.tensor(np.linspace(-5, 5, 41, dtype=np.float32), requires_grad=True)
    monkeypatch.setenv(cpu_paths.CPU_KERNELS, "numpy")
    y = tg.nn.functional.gelu(x, approximate="tanh")
    assert y.grad_fn.slope is not None                   # fast_cpu kept it
    monkeypatch.setenv(cpu_paths.CPU_KERNELS, "reference")
    forbid_fast_paths(monkeypatch)
    dy = np.linspace(-1, 1, 41, dtype=np.float32)
    y.backward(tg.tensor(dy))
    np.testing.assert_array_equal(x.grad.numpy(), gelu.reference_backward(x.numpy(), dy))
