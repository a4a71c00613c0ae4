"""The cuda path's own faults, each found by running on the CuPy stand-in, each pinned here.

These run wherever ``cuda`` exists: in CI's second pass through the stand-in
(TINYGRAD_GPU_CUPY=standin) and on a real GPU. The ones that read the stand-in's counters
(host syncs, allocations, kernel lookups) run on the stand-in only.
"""
import numpy as np
import pytest

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from tinygrad_gpu import device as devices
from tinygrad_gpu import random
from tinygrad_gpu.nn import GPT, GPTConfig
from tinygrad_gpu.train.loop import training_step

pytestmark = pytest.mark.skipif(not tg.cuda_available(), reason="no cuda device (a GPU, or TINYGRAD_GPU_CUPY=standin)")
on_standin = pytest.mark.skipif(not getattr(devices.cupy(), "__name__", "").endswith("cupy_standin"),
                                reason="reads the CuPy stand-in's counters")


def tiny_gpt(device="cuda", dropout=0.0):
    return GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11, dropout=dropout,
                         bias=False)).to(device)


def test_randperm_draws_a_permutation_on_the_gpu():
    """CuPy's Generator has no permutation: tg.randperm on cuda raised AttributeError."""
    tg.manual_seed(3)
    p = tg.randperm(50, device="cuda")
    assert p.device == "cuda:0" and p.dtype == tg.int64
    assert sorted(p.tolist()) == list(range(50))
    tg.manual_seed(3)
    assert tg.randperm(50, device="cuda").tolist() == p.tolist()


def test_erf_keeps_float16():
    """CuPy's erf gives float64 for float16 input."""
    x = tg.tensor([0.5, -1.0], dtype=tg.float16, device="cuda")
    assert x.erf().dtype == tg.float16


@pytest.mark.parametrize("make", [
    lambda: tg.ones(3, 2, device="cuda")[tg.tensor([0, 3], device="cuda")],
    lambda: tg.ones(3, 2, device="cuda")[[0, -4]],
    lambda: F.embedding(tg.tensor([0, 5], device="cuda"), tg.ones(5, 2, device="cuda")),
    lambda: F.cross_entropy(tg.zeros(2, 5, device="cuda"), tg.tensor([1, 7], device="cuda")),
], ids=["tensor index", "list index", "embedding", "cross_entropy target"])
def test_an_index_out_of_range_raises_at_the_next_read(make):
    """CuPy wraps an out-of-range index around instead of raising: the errors never fired on cuda."""
    out = make()
    with pytest.raises(IndexError, match="out of range"):
        out.numpy()
    out.numpy()                                    # reported once; the next read is clean


def test_tensors_made_for_the_second_gpu_stay_there():
    """Arrays for cuda:1 were made, and ops were run, on the current GPU (0)."""
    if devices.cuda_device_count() < 2:
        pytest.skip("one GPU")
    model = tiny_gpt("cuda:1", dropout=0.1)
    x = tg.randint(0, 11, (2, 8), device="cuda:1")
    loss, norm = training_step(model, model.configure_optimizers(0.1, 1e-3), [(x, x)], 1.0)
    assert loss.device == norm.device == "cuda:1"
    assert all(p.data.device.id == 1 and p.grad.data.device.id == 1 for p in model.parameters())
    assert tg.randn(3, device="cuda:1").data.device.id == 1
    assert (tg.ones(3, device="cuda:1") * 2).data.device.id == 1        # a Python number joins on cuda:1
    w = tg.ones(4, 3, device="cuda:1", requires_grad=True)
    (w[1:] * 2).sum().backward()                                         # a slice's gradient, made full-size
    assert w.grad.data.device.id == 1 and w.grad.tolist()[0] == [0.0] * 3
    tg.nn.init.normal_(w.detach())
    assert model.generate(x[:, :2], 3).data.device.id == 1
    assert tg.randn(3, dtype=tg.float64, device="cuda:1").data.device.id == 1
    assert tg.tensor([1.0, 2.0], device="cuda:1").to("cuda:0").data.device.id == 0


def test_the_gpu_random_stream_resumes_exactly():
    """The GPU's generator was not checkpointed: a resumed run drew other dropout masks."""
    tg.manual_seed(7)
    tg.rand(5, device="cuda")
    saved = random.get_cuda_rng_state_all()
    first = F.dropout(tg.ones(1000, device="cuda"), 0.5).numpy()
    tg.manual_seed(123)                            # anything in between
    tg.rand(17, device="cuda")
    random.set_cuda_rng_state_all(saved)
    np.testing.assert_array_equal(F.dropout(tg.ones(1000, device="cuda"), 0.5).numpy(), first)


def test_allow_tf32_is_pytorchs_switch_set_through_cupy():
    linalg = devices.cupy()._core._routines_linalg
    assert tg.backends.cuda.matmul.allow_tf32 is False
    try:
        tg.backends.cuda.matmul.allow_tf32 = True
        assert linalg.get_compute_type(np.float32) == linalg.COMPUTE_TYPE_TF32
    finally:
        tg.backends.cuda.matmul.allow_tf32 = False
    assert linalg.get_compute_type(np.float32) == linalg.COMPUTE_TYPE_DEFAULT


@on_standin
def test_a_training_step_never_waits_for_the_gpu_and_allocates_no_float64(monkeypatch):
    """It synced about 7 times a step (.item() in the embedding checks, the targets' any(), float() in
    clip_grad_norm_), clip made float64 copies of every gradient, and each launch asked CuPy for the
    kernel function again."""
    from tinygrad_gpu import gradient_sums
    from tinygrad_gpu.testing.cupy_standin import counters
    monkeypatch.setattr(gradient_sums, "CHECK_SPARE", False)    # the suite's own check reads pointers on the host
    model = tiny_gpt(dropout=0.1)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99))
    x, y = tg.randint(0, 11, (2, 8), device="cuda"), tg.randint(0, 11, (2, 8), device="cuda")
    training_step(model, optimizer, [(x, y)], 1.0)     # the first step builds the optimizer's state
    counters.reset()
    training_step(model, optimizer, [(x, y)], 1.0)
    assert counters.host_syncs == 0, counters.sites
    assert counters.raw_launches > 0 and counters.function_lookups == 0
    assert "float64" not in counters.allocated_dtypes


@on_standin
def test_sampling_makes_no_float64_arrays():
    from tinygrad_gpu.testing.cupy_standin import counters
    model = tiny_gpt()
    counters.reset()
    model.generate(tg.zeros(2, 1, dtype=tg.int64, device="cuda"), 4, top_k=5)
    assert "float64" not in counters.allocated_dtypes


@on_standin
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_mixed_precision_step_never_waits_for_the_gpu(monkeypatch, dtype):
    """--dtype bfloat16 (autocast) and float16 (autocast and a GradScaler) make no host sync either, float16
    not even in a step whose gradients overflow: the scaler finds the inf, AdamW skips its update and
    the scale halves, all decided on the device."""
    from tinygrad_gpu import gradient_sums
    from tinygrad_gpu.testing.cupy_standin import counters
    from tinygrad_gpu.train.precision import Precision
    monkeypatch.setattr(gradient_sums, "CHECK_SPARE", False)
    monkeypatch.setenv("TINYGRAD_GPU_STANDIN_KERNELS", "reference")
    model = tiny_gpt(dropout=0.1)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99))
    precision = Precision.for_run(dtype, "cuda:0")
    assert (precision.scaler is not None) == (dtype == "float16")
    x, y = tg.randint(0, 11, (2, 8), device="cuda"), tg.randint(0, 11, (2, 8), device="cuda")
    training_step(model, optimizer, [(x, y)], 1.0, precision)          # builds AdamW's state
    overflow = dtype == "float16"
    if overflow:
        model.lm_head.weight.register_post_accumulate_grad_hook(lambda p: p.grad.data.fill(float("inf")))
    before = [p.numpy() for p in model.parameters()]
    scale = precision.scaler.get_scale() if overflow else None
    counters.reset()
    loss, _ = training_step(model, optimizer, [(x, y)], 1.0, precision)
    assert counters.host_syncs == 0, counters.sites
    assert loss.dtype == tg.float32 and np.isfinite(loss.item())
    after = [p.numpy() for p in model.parameters()]
    if overflow:                         # skipped: every weight as it was, and the scale backed off
        assert all(np.array_equal(a, b) for a, b in zip(before, after))
        assert precision.scaler.get_scale() == scale / 2
    else:
        assert not all(np.array_equal(a, b) for a, b in zip(before, after))


@on_standin
def test_the_default_dtype_follows_the_gpus_compute_capability(monkeypatch):
    from tinygrad_gpu.train.config import ConfigError
    from tinygrad_gpu.train.precision import choose
    assert choose(None, "cuda") == "bfloat16" and choose("float32", "cuda") == "float32"    # 8.0: bfloat16
    monkeypatch.setenv("TINYGRAD_GPU_STANDIN_CAPABILITY", "7.0")                          # a V100: float16
    assert choose(None, "cuda") == "float16"
    with pytest.raises(ConfigError, match="no bfloat16 tensor cores"):
        choose("bfloat16", "cuda")
