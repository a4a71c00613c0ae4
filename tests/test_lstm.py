"""nn.LSTM against a NumPy implementation of PyTorch's equations (gate order i, f, g, o; weights
(4H, in)), gradient checks in float64, PyTorch's parameter names, and a tiny LSTM language model
that must overfit one batch."""
import math
import time

import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu import nn
import tinygrad_gpu.nn.functional as F

from checks import overfit


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_lstm(x, params, num_layers, h0, c0):
    """x: (L, B, in); params: name -> array in PyTorch's layout; h0, c0: (num_layers, B, H).
    Returns output (L, B, H) and (h_n, c_n), each (num_layers, B, H)."""
    h_n, c_n = [], []
    for layer in range(num_layers):
        w_ih, w_hh = params[f"weight_ih_l{layer}"], params[f"weight_hh_l{layer}"]
        b = params.get(f"bias_ih_l{layer}", 0) + params.get(f"bias_hh_l{layer}", 0)
        h, c = h0[layer], c0[layer]
        outputs = []
        for t in range(x.shape[0]):
            gates = x[t] @ w_ih.T + h @ w_hh.T + b
            i, f, g, o = np.split(gates, 4, axis=-1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            outputs.append(h)
        x = np.stack(outputs)
        h_n.append(h)
        c_n.append(c)
    return x, (np.stack(h_n), np.stack(c_n))


def params_of(lstm):
    return {name: p.numpy() for name, p in lstm.named_parameters()}


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_matches_numpy_reference(num_layers, batch_first, with_state):
    L, B, I, H = 5, 3, 4, 6
    lstm = nn.LSTM(I, H, num_layers=num_layers, batch_first=batch_first).to(tg.float64)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((L, B, I))
    h0, c0 = (rng.standard_normal((num_layers, B, H)) if with_state else np.zeros((num_layers, B, H))
              for _ in range(2))
    expected, (h_n, c_n) = np_lstm(x, params_of(lstm), num_layers, h0, c0)
    x_in = x.transpose(1, 0, 2) if batch_first else x
    hx = (tg.tensor(h0, dtype=tg.float64), tg.tensor(c0, dtype=tg.float64)) if with_state else None
    out, (h, c) = lstm(tg.tensor(x_in, dtype=tg.float64), hx)
    assert out.shape == ((B, L, H) if batch_first else (L, B, H))
    assert h.shape == c.shape == (num_layers, B, H)
    np.testing.assert_allclose(out.numpy(), expected.transpose(1, 0, 2) if batch_first else expected,
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h.numpy(), h_n, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(c.numpy(), c_n, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.numpy()[-1] if not batch_first else out.numpy()[:, -1], h_n[-1], rtol=1e-12)


@pytest.mark.parametrize("with_state", [False, True])
def test_unbatched_input(with_state):
    L, I, H, layers = 4, 3, 5, 2
    lstm = nn.LSTM(I, H, num_layers=layers, bias=False).to(tg.float64)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((L, I))
    h0, c0 = (rng.standard_normal((layers, H)) if with_state else np.zeros((layers, H)) for _ in range(2))
    expected, (h_n, c_n) = np_lstm(x[:, None], params_of(lstm), layers, h0[:, None], c0[:, None])
    hx = (tg.tensor(h0, dtype=tg.float64), tg.tensor(c0, dtype=tg.float64)) if with_state else None
    out, (h, c) = lstm(tg.tensor(x, dtype=tg.float64), hx)
    assert out.shape == (L, H) and h.shape == c.shape == (layers, H)
    np.testing.assert_allclose(out.numpy(), expected[:, 0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h.numpy(), h_n[:, 0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(c.numpy(), c_n[:, 0], rtol=1e-10, atol=1e-12)


def test_float32_matches_reference_and_state_carries_over():
    """Running a sequence in two halves, passing (h, c) along, equals running it at once."""
    lstm = nn.LSTM(3, 4, num_layers=2, batch_first=True)
    x = tg.randn(2, 6, 3)
    whole, (h, c) = lstm(x)
    first, state = lstm(x[:, :3])
    second, (h2, c2) = lstm(x[:, 3:], state)
    np.testing.assert_allclose(tg.cat([first, second], 1).numpy(), whole.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h2.numpy(), h.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c2.numpy(), c.numpy(), rtol=1e-5, atol=1e-6)
    assert whole.dtype == tg.float32
    expected, _ = np_lstm(x.numpy().astype(np.float64).transpose(1, 0, 2),
                          {k: v.astype(np.float64) for k, v in params_of(lstm).items()}, 2,
                          np.zeros((2, 2, 4)), np.zeros((2, 2, 4)))
    np.testing.assert_allclose(whole.numpy(), expected.transpose(1, 0, 2), rtol=1e-4, atol=1e-6)


def test_gradcheck_inputs_state_and_weights():
    lstm = nn.LSTM(3, 2, num_layers=2).to(tg.float64)
    rng = np.random.default_rng(2)
    x = tg.tensor(rng.standard_normal((3, 2, 3)), dtype=tg.float64, requires_grad=True)
    h0 = tg.tensor(rng.standard_normal((2, 2, 2)), dtype=tg.float64, requires_grad=True)
    c0 = tg.tensor(rng.standard_normal((2, 2, 2)), dtype=tg.float64, requires_grad=True)

    def run(x, h0, c0, *weights):
        out, (h, c) = lstm(x, (h0, c0))
        return out, h, c

    tg.gradcheck(run, [x, h0, c0, lstm.weight_ih_l0, lstm.weight_hh_l1, lstm.bias_hh_l0])


def test_gradcheck_batch_first_unbatched():
    lstm = nn.LSTM(2, 3, batch_first=True).to(tg.float64)
    x = tg.tensor(np.random.default_rng(3).standard_normal((4, 2)), dtype=tg.float64, requires_grad=True)
    tg.gradcheck(lambda x, w, b: lstm(x)[0], [x, lstm.weight_hh_l0, lstm.bias_ih_l0])


def test_parameter_names_shapes_and_init():
    lstm = nn.LSTM(3, 5, num_layers=2)
    assert [(n, p.shape) for n, p in lstm.named_parameters()] == [
        ("weight_ih_l0", (20, 3)), ("weight_hh_l0", (20, 5)), ("bias_ih_l0", (20,)), ("bias_hh_l0", (20,)),
        ("weight_ih_l1", (20, 5)), ("weight_hh_l1", (20, 5)), ("bias_ih_l1", (20,)), ("bias_hh_l1", (20,))]
    assert list(lstm.state_dict()) == [n for n, _ in lstm.named_parameters()]
    assert [n for n, _ in nn.LSTM(3, 5, bias=False).named_parameters()] == ["weight_ih_l0", "weight_hh_l0"]
    bound = 1 / math.sqrt(5)                       # PyTorch: U(-1/sqrt(H), 1/sqrt(H)) for every parameter
    magnitudes = np.abs(np.concatenate([p.numpy().reshape(-1) for p in lstm.parameters()]))
    assert magnitudes.max() <= bound and magnitudes.max() > 0.95 * bound     # the whole range is used


def test_wrong_input_size_is_a_clear_error():
    lstm = nn.LSTM(3, 4)
    with pytest.raises(ValueError, match=r"3.*\(5, 2, 4\)"):
        lstm(tg.randn(5, 2, 4))
    with pytest.raises(ValueError, match="LSTM"):
        lstm(tg.randn(5, 2, 3, 1))


def test_dropout_between_layers_only_in_training():
    lstm = nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    x = tg.randn(5, 2, 3)
    lstm.eval()
    expected, _ = np_lstm(x.numpy().astype(np.float64), {k: v.astype(np.float64) for k, v in params_of(lstm).items()},
                          2, np.zeros((2, 2, 4)), np.zeros((2, 2, 4)))
    np.testing.assert_allclose(lstm(x)[0].numpy(), expected, rtol=1e-4, atol=1e-6)
    lstm.train()
    assert not np.allclose(lstm(x)[0].numpy(), expected, rtol=1e-4, atol=1e-6)


class CharLSTM(nn.Module):
    def __init__(self, vocab, embd, hidden):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embd)
        self.lstm = nn.LSTM(embd, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids):
        out, _ = self.lstm(self.embedding(ids))
        return self.head(out)


def test_tiny_lstm_language_model_overfits_one_batch():
    vocab, B, T = 12, 4, 10
    model = CharLSTM(vocab, 16, 48)
    data = np.random.default_rng(0).integers(0, vocab, (B, T + 1))
    data[:, 0] = np.arange(B)          # distinct first tokens: otherwise two rows could share a context
    x, y = tg.tensor(data[:, :-1]), tg.tensor(data[:, 1:])     # with different next tokens (loss > 0)
    optimizer = tg.optim.Adam(model.parameters(), lr=0.03)
    start = time.perf_counter()
    losses = overfit(lambda: F.cross_entropy(model(x).reshape(B * T, vocab), y.reshape(-1)), optimizer)
    seconds = time.perf_counter() - start
    print(f"LSTM overfit: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {len(losses)} steps, {seconds:.2f} s")
    assert abs(losses[0] - math.log(vocab)) < 0.3
    assert losses[-1] < 0.05, f"final loss {losses[-1]} after {len(losses)} steps"


def test_language_model_configures_adamw_as_gpt_does():
    model = nn.LSTMLanguageModel(vocab_size=12, n_embd=8, n_layer=2)
    model.embedding.weight.requires_grad_(False)
    decay, no_decay = model.configure_optimizers(weight_decay=0.1, learning_rate=3e-3, betas=(0.9, 0.99)).param_groups
    trained = [p for p in model.parameters() if p.requires_grad]
    assert [id(p) for p in decay["params"]] == [id(p) for p in trained if p.ndim == 2]     # W_ih, W_hh, head
    assert [id(p) for p in no_decay["params"]] == [id(p) for p in trained if p.ndim == 1]  # the biases
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0 and decay["betas"] == (0.9, 0.99)
