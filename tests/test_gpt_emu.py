"""The issue's end-to-end check: a few AdamW steps of a tiny GPT on emu, where the fused ops run
our CUDA kernels, give the losses and weights of the same steps on cpu (the NumPy references)."""
import numpy as np

import tinygrad_gpu as tg
from tinygrad_gpu.kernels import runtime
from tinygrad_gpu.nn import GPT, GPTConfig

VOCAB = 65


def train(device, steps=4):
    tg.manual_seed(0)
    model = GPT(GPTConfig(block_size=16, vocab_size=VOCAB, n_layer=2, n_head=2, n_embd=32)).to(device)
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=3e-3)
    batch = np.random.default_rng(0).integers(0, VOCAB, (4, 17))
    x, y = (tg.tensor(a, device=device) for a in (batch[:, :-1], batch[:, 1:]))
    losses = []
    for _ in range(steps):
        _, loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, {name: t.numpy() for name, t in model.state_dict().items()}


def test_tiny_gpt_trains_the_same_on_emu_and_cpu(monkeypatch):
    cpu_losses, cpu_weights = train("cpu")
    launched, launch = set(), runtime.launch

    def recording_launch(device, filename, kernel, *args, **options):
        launched.add(kernel)
        launch(device, filename, kernel, *args, **options)
    monkeypatch.setattr(runtime, "launch", recording_launch)
    emu_losses, emu_weights = train("emu")
    assert {"cross_entropy_forward", "cross_entropy_backward", "layernorm_forward", "layernorm_backward_fused",
            "gelu_forward", "gelu_backward", "causal_attention_forward",
            "causal_attention_backward_dq", "causal_attention_backward_dkdv", "embedding_backward"} <= launched
    np.testing.assert_allclose(emu_losses, cpu_losses, rtol=1e-5)
    assert cpu_losses[-1] < cpu_losses[0] - 0.1                 # it learns the batch
    for name, weight in cpu_weights.items():
        np.testing.assert_allclose(emu_weights[name], weight, rtol=1e-4, atol=1e-5, err_msg=name)
