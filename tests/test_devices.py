"""The same computation on every device gives the same values and gradients as on cpu."""
import numpy as np

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F


def _small_transformer_step(device):
    """Forward and backward through the ops a GPT block uses; returns loss and gradients."""
    rng = np.random.default_rng(0)
    params = {name: tg.tensor(rng.standard_normal(shape) * 0.2, device=device, requires_grad=True)
              for name, shape in [("emb", (11, 8)), ("qkv", (24, 8)), ("ln_w", (8,)), ("ln_b", (8,)),
                                  ("fc", (16, 8)), ("proj", (8, 16))]}
    tokens = tg.tensor(rng.integers(0, 11, (2, 5)), device=device)
    targets = tg.tensor(rng.integers(0, 11, (2, 5)), device=device)
    x = F.embedding(tokens, params["emb"])
    h = F.layer_norm(x, (8,), params["ln_w"], params["ln_b"])
    q, k, v = F.linear(h, params["qkv"]).split(8, dim=-1)
    heads = [t.reshape(2, 5, 2, 4).transpose(1, 2) for t in (q, k, v)]
    x = x + F.scaled_dot_product_attention(*heads, is_causal=True).transpose(1, 2).reshape(2, 5, 8)
    x = x + F.linear(F.gelu(F.linear(x, params["fc"]), approximate="tanh"), params["proj"])
    logits = x @ params["emb"].T
    loss = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), label_smoothing=0.1)
    loss.backward()
    return loss.item(), {name: p.grad.numpy() for name, p in params.items()}


def test_every_device_matches_cpu(device):
    expected_loss, expected_grads = _small_transformer_step("cpu")
    loss, grads = _small_transformer_step(device)
    assert abs(loss - expected_loss) < 1e-5
    for name, grad in grads.items():
        np.testing.assert_allclose(grad, expected_grads[name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert all(np.isfinite(g).all() and np.abs(g).sum() > 0 for g in grads.values())
