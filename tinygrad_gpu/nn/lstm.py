"""LSTM with PyTorch's parameter names, gate order and return values.

At each time step t and layer l, with x_t the layer's input and (h, c) its state:

    gates = x_t W_ih^T + b_ih + h W_hh^T + b_hh          (4 * hidden features)
    i, f, g, o = sigmoid(.), sigmoid(.), tanh(.), sigmoid(.)   in that order
    c = f * c + i * g
    h = o * tanh(c)

The input projection x_t W_ih^T does not depend on the state, so it is computed for all
time steps in one matrix product before the loop; only h W_hh^T runs step by step.
"""
from __future__ import annotations

from .. import creation
from ..ops.movement import stack
from ..optim import configure_adamw
from . import functional as F
from . import init, sampling
from .layers import Embedding, Linear
from .module import Module, Parameter


class LSTM(Module):
    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, dropout
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else hidden_size
            shapes = {f"weight_ih_l{layer}": (4 * hidden_size, layer_input),
                      f"weight_hh_l{layer}": (4 * hidden_size, hidden_size)}
            if bias:
                shapes.update({f"bias_ih_l{layer}": (4 * hidden_size,), f"bias_hh_l{layer}": (4 * hidden_size,)})
            for name, shape in shapes.items():
                setattr(self, name, Parameter(creation.empty(shape, device=device, dtype=dtype)))
        for p in self.parameters():
            init.fan_in_uniform_(p, hidden_size)

    def forward(self, input, hx=None):
        """input: (L, B, input_size), or (B, L, input_size) with batch_first, or unbatched (L, input_size).

        Returns output (every time step's h of the last layer, same layout as the input) and
        (h_n, c_n), each (num_layers, B, hidden_size) (or (num_layers, hidden_size) unbatched).
        """
        unbatched = input.ndim == 2
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            raise ValueError(f"LSTM: expected input of shape (L, B, {self.input_size}) (or batch first, or "
                             f"unbatched (L, {self.input_size})), got {input.shape}")
        x = input.unsqueeze(1) if unbatched else input.transpose(0, 1) if self.batch_first else input
        seq_len, batch = x.shape[0], x.shape[1]
        if hx is None:
            zeros = creation.zeros(self.num_layers, batch, self.hidden_size, dtype=x.dtype, device=x.device)
            h0, c0 = zeros, zeros
        else:
            h0, c0 = (t.unsqueeze(1) for t in hx) if unbatched else hx
        final_h, final_c = [], []
        for layer in range(self.num_layers):
            w_ih, w_hh = getattr(self, f"weight_ih_l{layer}"), getattr(self, f"weight_hh_l{layer}")
            b_ih = getattr(self, f"bias_ih_l{layer}") if self.bias else None
            b_hh = getattr(self, f"bias_hh_l{layer}") if self.bias else None
            input_gates = F.linear(x, w_ih, b_ih)           # all time steps at once: (L, B, 4H)
            h, c = h0[layer], c0[layer]
            outputs = []
            for t in range(seq_len):
                gates = input_gates[t] + F.linear(h, w_hh, b_hh)
                i, f, g, o = gates.chunk(4, dim=-1)
                c = f.sigmoid() * c + i.sigmoid() * g.tanh()
                h = o.sigmoid() * c.tanh()
                outputs.append(h)
            x = stack(outputs, 0)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout)
            final_h.append(h)
            final_c.append(c)
        h_n, c_n = stack(final_h, 0), stack(final_c, 0)
        if unbatched:
            return x.squeeze(1), (h_n.squeeze(1), c_n.squeeze(1))
        return (x.transpose(0, 1) if self.batch_first else x), (h_n, c_n)

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, batch_first={self.batch_first}"


class LSTMLanguageModel(Module):
    """A character-level language model: Embedding -> LSTM -> Linear over the vocabulary.
    Same interface as GPT: forward(idx, targets) -> (logits, loss), and generate()."""

    def __init__(self, vocab_size: int, n_embd: int, n_layer: int = 1, dropout: float = 0.0,
                 block_size: int = 256):
        super().__init__()
        self.block_size = block_size
        self.embedding = Embedding(vocab_size, n_embd)
        self.lstm = LSTM(n_embd, n_embd, num_layers=n_layer, batch_first=True, dropout=dropout)
        self.head = Linear(n_embd, vocab_size)

    def forward(self, idx, targets=None):
        hidden, _ = self.lstm(self.embedding(idx))
        logits = self.head(hidden)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)

    def flops_per_token(self, context: int = None) -> float:
        """Training FLOPs per token (forward + backward): 6 per parameter that each token's activations
        meet, 2 in the forward product (a multiply and an add) and 4 in the backward one (the gradients of
        the input and of the weight). Counted: the LSTM's weights and biases and the output layer. Left
        out: the embedding, a table lookup with no products, and the gates' sigmoids, tanhs and products
        with the cell state, a few FLOPs per hidden unit against the matrices' thousands. (A token costs the
        same whatever the `context`: the recurrence carries it.)"""
        return 6 * (self.num_parameters() - self.embedding.weight.numel())

    def configure_optimizers(self, weight_decay: float, learning_rate: float, betas=(0.9, 0.95), eps=1e-8):
        """GPT's optimizer set-up (optim.configure_adamw): decay on matrices, not biases; frozen left out."""
        return configure_adamw(self.parameters(), weight_decay, learning_rate, betas, eps)

    def generate(self, idx, max_new_tokens: int, temperature: float = 1.0, top_k: int = None):
        return sampling.generate(self, idx, max_new_tokens, temperature, top_k, self.block_size)
