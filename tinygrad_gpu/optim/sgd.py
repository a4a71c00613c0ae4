"""Stochastic gradient descent with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD)."""
from __future__ import annotations

from .. import device as devices
from .optimizer import Optimizer


class SGD(Optimizer):
    """For each parameter p with gradient g:

        g = g + weight_decay * p
        buf = g on the first step, else momentum * buf + (1 - dampening) * g
        g = g + momentum * buf if nesterov else buf        (when momentum != 0)
        p = p - lr * g
    """

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: lr, momentum and weight_decay must be >= 0, got {lr}, {momentum}, {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening = 0")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov))

    def update(self, param, grad, state, group):
        if group["weight_decay"]:
            grad = grad + group["weight_decay"] * param.data
        momentum = group["momentum"]
        if momentum:
            if "momentum_buffer" not in state:
                # xp.array, not grad.copy(): for a 0-d parameter NumPy arithmetic gives a scalar,
                # and the in-place updates below would then silently not reach the stored buffer
                state["momentum_buffer"] = devices.array_module(param.device).array(grad, dtype=param.dtype)
            else:
                buf = state["momentum_buffer"]
                buf *= momentum
                buf += (1 - group["dampening"]) * grad
            buf = state["momentum_buffer"]
            grad = grad + momentum * buf if group["nesterov"] else buf
        param.data -= group["lr"] * grad
