"""BatchNorm1d: each channel normalised by statistics over the batch (and the length), as torch.nn.BatchNorm1d.

In training the mean and the biased variance of the current batch normalise it, and are ops on the input,
so the gradient flows through them too (the engine differentiates the composition: mean, var, rsqrt). Each
training step also moves the running estimates a step towards the batch's:
    running = (1 - momentum) * running + momentum * batch statistic,
with the unbiased variance (n / (n - 1) times the biased one) for running_var, as torch does; momentum=None
averages all batches so far equally (momentum 1 / num_batches_tracked). In eval mode the running estimates
normalise instead, so one sample's output does not depend on the others in its batch.

The buffers carry torch's names (running_mean, running_var, num_batches_tracked), so state dicts move
between the two either way.
"""
from __future__ import annotations

from .. import creation, dtypes
from .. import device as devices
from ..tensor import no_grad
from .module import Module, Parameter


class BatchNorm1d(Module):
    """Normalises (N, C) or (N, C, L) inputs per channel C; affine=True adds a learned scale and shift (and
    bias=False drops the shift); track_running_stats=False keeps no running estimates and uses the batch's
    statistics in eval mode too."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = Parameter(creation.ones(num_features, device=device, dtype=dtype)) if affine else None
        self.bias = Parameter(creation.zeros(num_features, device=device, dtype=dtype)) if affine and bias else None
        if track_running_stats:
            self.register_buffer("running_mean", creation.zeros(num_features, device=device, dtype=dtype))
            self.register_buffer("running_var", creation.ones(num_features, device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked", creation.zeros((), device=device, dtype=dtypes.int64))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            for buffer, value in ((self.running_mean, 0), (self.running_var, 1), (self.num_batches_tracked, 0)):
                buffer.data[...] = value

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.weight is not None:
            self.weight.data[...] = 1
        if self.bias is not None:
            self.bias.data[...] = 0

    def _check(self, input) -> None:
        if input.ndim not in (2, 3):
            raise ValueError(f"BatchNorm1d: expected a 2-D (N, C) or 3-D (N, C, L) input, got shape {input.shape}; "
                             "for images use channels-first (N, C, L) with L = H * W")
        if input.shape[1] != self.num_features:
            raise ValueError(f"BatchNorm1d: input of shape {input.shape} has {input.shape[1]} channels in dim 1, "
                             f"but the layer was built for num_features={self.num_features}")

    def forward(self, input):
        self._check(input)
        dims = (0,) if input.ndim == 2 else (0, 2)
        shape = (1, self.num_features) + (1,) * (input.ndim - 2)    # per channel, broadcast over the rest
        use_batch_statistics = self.training or self.running_mean is None
        if use_batch_statistics:
            count = input.numel() // self.num_features
            if count <= 1:
                raise ValueError(f"BatchNorm1d: expected more than 1 value per channel when training, got input of "
                                 f"shape {input.shape}; use a batch of 2 or more, or call .eval()")
            mean, var = input.mean(dims), input.var(dims, correction=0)
            if self.training and self.running_mean is not None:
                self._update_running_statistics(mean, var, count)
        else:
            mean, var = self.running_mean, self.running_var
        out = (input - mean.reshape(shape)) * (var.reshape(shape) + self.eps).rsqrt()
        if self.weight is not None:
            out = out * self.weight.reshape(shape)
        if self.bias is not None:
            out = out + self.bias.reshape(shape)
        return out

    def _update_running_statistics(self, mean, var, count: int) -> None:
        """One step of the running estimates, written into the buffers' arrays (load_state_dict and .to() see
        the same arrays); recorded in no graph."""
        tracked = self.num_batches_tracked
        with devices.use(tracked.device):
            tracked.data += 1
        # momentum=None reads the count on the host (a wait for the device there, as in torch)
        factor = self.momentum if self.momentum is not None else 1.0 / int(tracked.item())
        with no_grad():
            new_mean = self.running_mean * (1 - factor) + mean.detach() * factor
            new_var = self.running_var * (1 - factor) + var.detach() * (factor * count / (count - 1))
        for buffer, value in ((self.running_mean, new_mean), (self.running_var, new_var)):
            with devices.use(buffer.device):
                buffer.data[...] = value.data.astype(buffer.dtype, copy=False)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")
