"""Adam (L2 weight decay folded into the gradient) and AdamW (decoupled weight decay).

Per parameter, with gradient g at step t (counting from 1):

    m = beta1 m + (1 - beta1) g               running mean of gradients
    v = beta2 v + (1 - beta2) g^2             running mean of squared gradients
    p = p - lr * (m / (1 - beta1^t)) / (sqrt(v) / sqrt(1 - beta2^t) + eps)

The divisions by (1 - beta^t) correct the bias of m and v, which start at zero.
Adam adds weight_decay * p to g first; AdamW instead shrinks p by (1 - lr * weight_decay)
before the update, so the decay does not pass through the adaptive scaling.
The arithmetic is one fused kernel per parameter: tinygrad_gpu/kernels/adamw.cu, defined by the
NumPy reference beside it in kernels/adamw.py (the cpu runs kernels/compiled_cpu.py's or fast_cpu.py's version). On emu
and cuda, a group whose parameters are float32, C-contiguous and on one device takes one launch for
all of them instead (kernels/multi_tensor.cu: the same element arithmetic, so the same bits), through
the Optimizer's update_group hook; ``foreach=False`` keeps the launch per parameter (PyTorch's name
for its multi-tensor switch; here None and True both mean "where it applies").

Under a GradScaler (tinygrad_gpu.amp) a step may have to be skipped, when the scaled gradients
overflowed, and the host must not wait to learn whether. scaler.step(opt) sets ``opt.found_inf`` (a
float32 0-d tensor, 0 or not) for one step() call; each parameter's step count t then lives on its
device as a float32 0-d array (PyTorch's fused Adam keeps it so too): one thread adds 1 unless
found_inf is set, and the update kernel, which reads t and computes the bias corrections from it,
changes nothing when it is set. A skipped step is no step, as in PyTorch, where the scaler does
not call optimizer.step() at all. Without a scaler, t stays a Python int and a step is one launch
per parameter (or per group); a device count left by scaled steps is read back once (a sync) when an
unscaled step follows.
"""
from __future__ import annotations

import numpy as np

from .. import device as devices
from .. import kernels
from .optimizer import Optimizer


class Adam(Optimizer):
    decoupled = False
    _step_supports_amp_scaling = True     # GradScaler.step hands over found_inf instead of reading it (PyTorch's flag)
    found_inf = None                      # set by GradScaler.step for the length of one step() call

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, foreach=None):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"{type(self).__name__}: need lr, eps, weight_decay >= 0 and 0 <= betas < 1; got "
                             f"lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}")
        # Not a group setting (PyTorch keeps it in the defaults): so the optimizer's state_dict stays as it was.
        self.foreach = foreach
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @staticmethod
    def _init_state(param, state) -> None:
        """The moments and the step count, made at a parameter's first step."""
        if "step" not in state:
            state["step"] = 0
            # zeros_like, not param * 0: that is nan where param is inf, and for a 0-d parameter a
            # NumPy scalar that the in-place updates of adamw_update could not change
            xp = devices.array_module(param.device)
            state["exp_avg"] = xp.zeros_like(param.data)
            state["exp_avg_sq"] = xp.zeros_like(param.data)

    def update(self, param, grad, state, group):
        self._init_state(param, state)
        beta1, beta2 = group["betas"]
        if self.found_inf is None:
            if not np.isscalar(state["step"]):       # counted on the device by scaled steps: read it once
                state["step"] = int(state["step"])
            state["step"] += 1
            kernels.adamw.adamw_update(param.data, grad, state["exp_avg"], state["exp_avg_sq"], lr=group["lr"],
                                       beta1=beta1, beta2=beta2, eps=group["eps"],
                                       weight_decay=group["weight_decay"], step=state["step"], device=param.device,
                                       decoupled=self.decoupled)
        else:
            if np.isscalar(state["step"]):
                state["step"] = devices.array_module(param.device).full((), state["step"], np.float32)
            kernels.adamw.adamw_update_skippable(param.data, grad, state["exp_avg"], state["exp_avg_sq"],
                                                 state["step"], devices.move(self.found_inf.data, param.device),
                                                 lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"],
                                                 weight_decay=group["weight_decay"], device=param.device,
                                                 decoupled=self.decoupled)

    # ------------------------------------------------------------------ the whole group in one launch
    def _multi_tensor_applies(self, params) -> bool:
        """Can kernels/multi_tensor.cu update these parameters together: float32, C-contiguous, all on one emu or
        cuda device, with float32 C-contiguous moments (as a parameter's first step makes them)?"""
        if self.foreach is False or not params or params[0].device == "cpu":
            return False
        device = params[0].device
        for p in params:
            if p.device != device or p.grad.device != device or p.dtype != np.float32 or not p.data.flags.c_contiguous:
                return False
            state = self.state.get(id(p), {})
            if any(k in state and (state[k].dtype != np.float32 or not state[k].flags.c_contiguous)
                   for k in ("exp_avg", "exp_avg_sq")):
                return False
        return True

    def update_group(self, params, group):
        """All of the group's parameters in one launch (two under a GradScaler) where _multi_tensor_applies;
        otherwise all of them to update(), one launch each."""
        if not self._multi_tensor_applies(params):
            return params
        device = params[0].device
        states = [self.state.setdefault(id(p), {}) for p in params]
        beta1, beta2 = group["betas"]
        hyper = dict(lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"],
                     device=device, decoupled=self.decoupled)
        with devices.use(device):
            for p, state in zip(params, states):
                self._init_state(p, state)
            if self.found_inf is None:
                by_step = {}                 # one launch per step count t (its scalars): one for all, as a rule
                for p, state in zip(params, states):
                    if not np.isscalar(state["step"]):      # counted on the device by scaled steps: read it once
                        state["step"] = int(state["step"])
                    state["step"] += 1
                    by_step.setdefault(state["step"], []).append((p, state))
                for step, members in by_step.items():
                    kernels.multi_tensor.adamw_update(*self._lists(members), step=step, **hyper)
            else:
                xp = devices.array_module(device)
                for state in states:
                    if np.isscalar(state["step"]):
                        state["step"] = xp.full((), state["step"], np.float32)
                kernels.multi_tensor.adamw_update_skippable(*self._lists(zip(params, states)),
                                                            [state["step"] for state in states],
                                                            devices.move(self.found_inf.data, device), **hyper)
        return []

    @staticmethod
    def _lists(members) -> tuple:
        """params, grads, exp_avgs, exp_avg_sqs: the arrays of (param, state) pairs, as multi_tensor takes them."""
        members = list(members)
        return ([p.data for p, _ in members], [p.grad.data for p, _ in members],
                [s["exp_avg"] for _, s in members], [s["exp_avg_sq"] for _, s in members])


class AdamW(Adam):
    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, foreach=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach)


def configure_adamw(params, weight_decay: float, lr: float, betas=(0.9, 0.95), eps: float = 1e-8) -> AdamW:
    """nanoGPT's optimizer for a language model (GPT's and LSTMLanguageModel's configure_optimizers):
    weight decay on matrices and embeddings (2-D and up), none on biases and norms, which only
    shift and scale. Frozen parameters (requires_grad False) are left out, and so is a group left
    empty by them, so the groups are the same ones a checkpoint's optimizer state was saved with."""
    params = [p for p in params if p.requires_grad]
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return AdamW([group for group in groups if group["params"]], lr=lr, betas=betas, eps=eps)
