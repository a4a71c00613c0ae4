"""Parity with PyTorch, as in llm.c's test: a GPT written here in PyTorch with nanoGPT's architecture
and names gets our model's initial weights; logits, loss and every parameter gradient must agree,
then 10 AdamW steps (clipping, weight decay on matrices only, warmup + cosine) must give the same
losses. Optimizers and the LSTM are compared with torch.optim and torch.nn.LSTM too.

Skipped when torch is not installed (CI does not install it). To run it:
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy pytest hypothesis safetensors
    PYTHONPATH=. /tmp/venv/bin/python -m pytest tests/test_torch_parity.py -q
"""
import math
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import tinygrad_gpu as tg  # noqa: E402
from tinygrad_gpu.nn import GPT, LSTM, GPTConfig  # noqa: E402
from tinygrad_gpu.optim import SGD, Adam, AdamW, clip_grad_norm_  # noqa: E402
from tinygrad_gpu.optim.lr_scheduler import WarmupCosineLR  # noqa: E402

torch.set_num_threads(2)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
from torch_gpt import TorchGPT  # noqa: E402  (nanoGPT in PyTorch, shared with benchmarks/step.py)
from test_optim import nanogpt_get_lr  # noqa: E402  (nanoGPT's schedule, written out once)
from conftest import CUDA_PASS  # noqa: E402


def report(what, ours, theirs):
    """Max absolute and max relative (to the largest magnitude) difference; printed for the record."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    abs_diff = float(np.abs(ours - theirs).max()) if ours.size else 0.0
    rel_diff = abs_diff / max(float(np.abs(theirs).max()) if theirs.size else 0.0, 1e-30)
    print(f"{what}: max abs diff {abs_diff:.3g}, max rel diff {rel_diff:.3g}")
    return abs_diff, rel_diff


# ----------------------------------------------------------------------------- nanoGPT in PyTorch
def twin_gpts(bias, dtype=np.float32):
    config = GPTConfig(block_size=16, vocab_size=65, n_layer=2, n_head=2, n_embd=32, dropout=0.0, bias=bias)
    tg.manual_seed(1337)
    ours = GPT(config)
    if dtype == np.float64:
        ours.to(tg.float64)
    theirs = TorchGPT(config).to(torch.float64 if dtype == np.float64 else torch.float32)
    ours_sd = ours.state_dict()
    assert set(ours_sd) == set(theirs.state_dict())                 # nanoGPT's names, both tied ones
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in ours_sd.items()}, strict=True)
    assert theirs.lm_head.weight is theirs.transformer.wte.weight
    return ours, theirs


def batch(seed=0, B=4, T=16, vocab=65):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, vocab, (B, T))
    y = np.concatenate([x[:, 1:], rng.integers(0, vocab, (B, 1))], axis=1)
    y[0, -3:] = -1                                                   # ignored targets, as nanoGPT allows
    return x, y


def forward_backward(ours, theirs, x, y):
    logits, loss = ours(tg.tensor(x), tg.tensor(y))
    loss.backward()
    t_logits, t_loss = theirs(torch.from_numpy(x), torch.from_numpy(y))
    t_loss.backward()
    return logits, loss, t_logits, t_loss


# rtol on the largest magnitude of each tensor: float32 rounding differs in order of operations
GPT_TOL = {np.float32: 1e-5, np.float64: 1e-11}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_gpt_logits_loss_and_every_gradient_match_pytorch(bias, dtype):
    ours, theirs = twin_gpts(bias, dtype)
    x, y = batch()
    logits, loss, t_logits, t_loss = forward_backward(ours, theirs, x, y)
    tol = GPT_TOL[dtype]
    tag = f"[{'bias' if bias else 'no_bias'} {np.dtype(dtype).name}]"
    assert logits.dtype == dtype and logits.shape == tuple(t_logits.shape)
    assert report(f"logits {tag}", logits.numpy(), t_logits.detach().numpy())[1] < tol
    assert report(f"loss {tag}", loss.item(), t_loss.item())[1] < tol
    assert 3.5 < loss.item() < 5.0                                    # about ln(65) at initialisation

    ours_params = dict(ours.named_parameters(remove_duplicate=False))
    theirs_params = dict(theirs.named_parameters(remove_duplicate=False))
    assert set(ours_params) == set(theirs_params)
    worst = 0.0
    for name, t_param in theirs_params.items():
        grad = ours_params[name].grad
        assert grad is not None, name
        rel = report(f"  grad {name} {tag}", grad.numpy(), t_param.grad.numpy())[1]
        assert rel < tol, name
        worst = max(worst, rel)
    print(f"grads {tag}: worst max rel diff {worst:.3g}")


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_gpt_ten_adamw_steps_match_pytorch(bias):
    """nanoGPT's training step: lr from warmup + cosine, forward, backward, clip 1.0, AdamW with weight
    decay on 2-D parameters only, on one batch repeated (llm.c's test does the same)."""
    ours, theirs = twin_gpts(bias)
    lr, warmup, decay, min_lr = 1e-2, 3, 8, 1e-3
    opt = ours.configure_optimizers(weight_decay=0.1, learning_rate=lr, betas=(0.9, 0.99))
    sched = WarmupCosineLR(opt, warmup_iters=warmup, decay_iters=decay, min_lr=min_lr)
    t_opt = theirs.configure_optimizers(weight_decay=0.1, learning_rate=lr, betas=(0.9, 0.99))
    x, y = batch(seed=1)
    losses, t_losses, norms, t_norms = [], [], [], []
    for it in range(10):
        for group in t_opt.param_groups:
            group["lr"] = nanogpt_get_lr(it, lr, warmup, decay, min_lr)
        assert opt.param_groups[0]["lr"] == pytest.approx(t_opt.param_groups[0]["lr"], rel=1e-12)
        opt.zero_grad(set_to_none=True)
        t_opt.zero_grad(set_to_none=True)
        _, loss, _, t_loss = forward_backward(ours, theirs, x, y)
        norms.append(clip_grad_norm_(ours.parameters(), 1.0).item())
        t_norms.append(torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0).item())
        opt.step()
        t_opt.step()
        sched.step()
        losses.append(loss.item())
        t_losses.append(t_loss.item())
    print("ours  ", " ".join(f"{v:.6f}" for v in losses))
    print("torch ", " ".join(f"{v:.6f}" for v in t_losses))
    tag = "bias" if bias else "no_bias"
    assert report(f"10-step losses [{tag}]", losses, t_losses)[1] < 1e-5
    assert report(f"10-step grad norms before clipping [{tag}]", norms, t_norms)[1] < 1e-4
    assert max(norms) > 1.0                                            # clipping was active at least once
    assert losses[-1] < losses[0] - 0.5                                # and training really moved
    ours_params = dict(ours.named_parameters(remove_duplicate=False))
    C = ours.config.n_embd
    for name, t_param in theirs.named_parameters():
        a, b = ours_params[name].numpy(), t_param.detach().numpy()
        if name.endswith("c_attn.bias"):
            # The key bias's gradient is exactly 0 in exact arithmetic (it shifts every score of a query
            # equally, and softmax ignores that), so both sides see rounding noise that Adam blows up
            # into steps of about lr with arbitrary signs: compare the query and value biases only.
            a, b = np.concatenate([a[:C], a[2 * C:]]), np.concatenate([b[:C], b[2 * C:]])
        # 2e-4: Adam's m / sqrt(v) turns the float32 noise of a near-zero gradient into a step of about lr,
        # and on cuda the fused kernels add in other orders than PyTorch (the tiled attention over tiles,
        # layer norm's column sums by groups of rows, the clip norm by blocks): 1.0e-4 was seen there, 7.5e-5
        # before those kernels. A wrong gradient shows at 1e-2 and more.
        assert report(f"  after 10 steps {name}", a, b)[1] < 2e-4, name


# ----------------------------------------------------------------------------- optimizers step for step
OPTIMIZERS = {
    "sgd_momentum": (SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.9)),
    "sgd_nesterov": (SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "sgd_dampening": (SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.5, dampening=0.5, weight_decay=0.1)),
    "adam": (Adam, torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.95), weight_decay=0.1)),
    "adamw": (AdamW, torch.optim.AdamW, dict(lr=0.01, weight_decay=0.3, eps=1e-6)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_matches_torch_step_for_step(name, dtype):
    ours_cls, torch_cls, kwargs = OPTIMIZERS[name]
    rng = np.random.default_rng(5)
    initial = [rng.standard_normal(s).astype(dtype) for s in [(4, 3), (6,), ()]]
    params = [tg.tensor(a, requires_grad=True) for a in initial]
    t_params = [torch.tensor(a, requires_grad=True) for a in initial]
    opt = ours_cls([{"params": params[:2]}, {"params": params[2:], "lr": kwargs["lr"] * 3}], **kwargs)
    t_opt = torch_cls([{"params": t_params[:2]}, {"params": t_params[2:], "lr": kwargs["lr"] * 3}],
                      foreach=False, **kwargs)
    worst = 0.0
    for step in range(8):
        for p, tp in zip(params, t_params):
            g = np.tanh(tp.detach().numpy()) + rng.standard_normal(tp.shape).astype(dtype)   # depends on p
            p.grad, tp.grad = tg.tensor(g), torch.tensor(g)
        opt.step()
        t_opt.step()
        for p, tp in zip(params, t_params):
            assert p.dtype == dtype
            worst = max(worst, report(f"  step {step}", p.numpy(), tp.detach().numpy())[1])
    print(f"{name} [{np.dtype(dtype).name}]: worst max rel diff over 8 steps {worst:.3g}")
    assert worst < (1e-6 if dtype == np.float32 else 1e-14)
    assert not np.allclose(params[0].numpy(), initial[0], atol=1e-2)


def test_clip_grad_norm_matches_torch():
    rng = np.random.default_rng(9)
    grads = [rng.standard_normal(s) * 3 for s in [(5, 4), (7,), ()]]
    for norm_type in (2.0, 1.0, math.inf):
        params = [tg.zeros(g.shape, dtype=np.float64, requires_grad=True) for g in grads]
        t_params = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in grads]
        for p, tp, g in zip(params, t_params, grads):
            p.grad, tp.grad = tg.tensor(g), torch.tensor(g)
        norm = clip_grad_norm_(params, 2.0, norm_type=norm_type)
        t_norm = torch.nn.utils.clip_grad_norm_(t_params, 2.0, norm_type=norm_type)
        assert report(f"clip norm {norm_type}", norm.item(), t_norm.item())[1] < 1e-14
        for p, tp in zip(params, t_params):
            assert report(f"  clipped grad {norm_type}", p.grad.numpy(), tp.grad.numpy())[1] < 1e-14


# ----------------------------------------------------------------------------- LSTM
@pytest.mark.parametrize("batch_first", [False, True], ids=["seq_first", "batch_first"])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "given_state"])
def test_lstm_matches_torch(batch_first, with_state):
    tg.manual_seed(3)
    ours = LSTM(5, 7, num_layers=2, batch_first=batch_first).to(tg.float64)
    theirs = nn.LSTM(5, 7, num_layers=2, batch_first=batch_first).double()
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in ours.state_dict().items()},
                           strict=True)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 6, 5) if batch_first else (6, 3, 5))
    h0, c0 = rng.standard_normal((2, 3, 7)), rng.standard_normal((2, 3, 7))
    r_out, r_h, r_c = (rng.standard_normal(s) for s in ((3, 6, 7) if batch_first else (6, 3, 7), (2, 3, 7), (2, 3, 7)))

    xs = [tg.tensor(a, requires_grad=True) for a in (x, h0, c0)]
    t_xs = [torch.tensor(a, requires_grad=True) for a in (x, h0, c0)]
    out, (h, c) = ours(xs[0], (xs[1], xs[2]) if with_state else None)
    t_out, (t_h, t_c) = theirs(t_xs[0], (t_xs[1], t_xs[2]) if with_state else None)
    for what, a, b in (("output", out, t_out), ("h_n", h, t_h), ("c_n", c, t_c)):
        assert a.shape == tuple(b.shape)
        assert report(f"lstm {what}", a.numpy(), b.detach().numpy())[1] < 1e-12

    ((out * tg.tensor(r_out)).sum() + (h * tg.tensor(r_h)).sum() + (c * tg.tensor(r_c)).sum()).backward()
    ((t_out * torch.tensor(r_out)).sum() + (t_h * torch.tensor(r_h)).sum() + (t_c * torch.tensor(r_c)).sum()).backward()
    ours_params = dict(ours.named_parameters())
    for name, tp in theirs.named_parameters():
        assert report(f"  lstm grad {name}", ours_params[name].grad.numpy(), tp.grad.numpy())[1] < 1e-11, name
    for what, a, b in zip(("x", "h0", "c0"), xs, t_xs[:3] if with_state else t_xs[:1]):
        assert report(f"  lstm grad {what}", a.grad.numpy(), b.grad.numpy())[1] < 1e-11, what


def test_unbatched_lstm_matches_torch():
    tg.manual_seed(4)
    ours = LSTM(3, 4, bias=False).to(tg.float64)
    theirs = nn.LSTM(3, 4, bias=False).double()
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in ours.state_dict().items()})
    x = np.random.default_rng(2).standard_normal((5, 3))
    out, (h, c) = ours(tg.tensor(x))
    t_out, (t_h, t_c) = theirs(torch.tensor(x))
    assert out.shape == (5, 4) and h.shape == (1, 4)
    for a, b in ((out, t_out), (h, t_h), (c, t_c)):
        assert report("unbatched lstm", a.numpy(), b.detach().numpy())[1] < 1e-12


@pytest.mark.skipif(CUDA_PASS, reason="a benchmark script on the cpu, run in the first pass")
@pytest.mark.parametrize("stream", ["nanogpt", "ours"])
def test_both_engines_train_alike_on_one_random_stream(stream):
    """benchmarks/quality_vs_nanogpt.py: on nanoGPT's replayed stream and on ours, our engine and
    PyTorch print the same evaluations and the same whole-split val loss (a short, small run)."""
    import re
    import subprocess
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks",
                          "quality_vs_nanogpt.py")
    flags = ["--stream", stream, "--max-iters", "8", "--eval-interval", "4", "--eval-iters", "2", "--n-layer", "2",
             "--n-head", "2", "--n-embd", "32", "--block-size", "16", "--batch-size", "4", "--warmup-iters", "2"]
    losses = {}
    for engine in ("ours", "torch"):
        out = subprocess.run([sys.executable, script, "--engine", engine, *flags], capture_output=True, text=True,
                             check=True).stdout
        losses[engine] = [float(v) for v in re.findall(r"loss (\d+\.\d+)", out)]
    assert len(losses["ours"]) == 7                    # 3 evaluations x (train, val), then the whole split
    np.testing.assert_allclose(losses["ours"], losses["torch"], atol=2e-4)
    assert losses["ours"][-2] < losses["ours"][1]      # and it learned something


# rtol on the largest magnitude: 16-bit products round every matrix to 8 (bfloat16) or 11 (float16)
# significant bits, and the two engines round at slightly different places (PyTorch adds a Linear's
# bias before rounding, its CPU attention keeps the scores in float32), so each holds a few roundings'
# error of the other: a few times 2^-9 or 2^-12 (the unit roundoffs)
AUTOCAST_TOL = {"bfloat16": 2e-2, "float16": 3e-3}       # measured worst: 8e-3 and 9e-4


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
def test_gpt_under_autocast_matches_torch_autocast(low):
    """tg.autocast("cpu") against torch.autocast("cpu") on the same GPT: the same dtypes come out (16-bit
    logits, a float32 loss, float32 gradients) and the numbers agree to 16-bit rounding."""
    ours, theirs = twin_gpts(bias=True)
    x, y = batch()
    kind = "cuda" if tg.default_device().startswith("cuda") else "cpu"      # ours, in the cuda pass: on cuda
    with tg.autocast(kind, dtype=getattr(tg, low)):
        logits, loss = ours(tg.tensor(x), tg.tensor(y))
    loss.backward()
    with torch.autocast("cpu", dtype=getattr(torch, low)):
        t_logits, t_loss = theirs(torch.from_numpy(x), torch.from_numpy(y))
    t_loss.backward()
    assert logits.dtype.name == str(t_logits.dtype).split(".")[1] == low
    assert loss.dtype == tg.float32 and t_loss.dtype == torch.float32
    tol = AUTOCAST_TOL[low]
    assert report(f"autocast {low} logits", logits.float().numpy(), t_logits.float().detach().numpy())[1] < tol
    assert report(f"autocast {low} loss", loss.item(), t_loss.item())[1] < tol / 4
    theirs_params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert p.grad.dtype == tg.float32 and theirs_params[name].grad.dtype == torch.float32
        assert report(f"  autocast {low} grad {name}", p.grad.numpy(), theirs_params[name].grad.numpy())[1] < tol, name
