"""GradScaler: loss scaling for float16 training, with torch.amp.GradScaler's names and rules.

float16 has 5 exponent bits: gradients smaller than about 6e-8 become 0 and are lost. Multiplying
the loss by a large scale S multiplies every gradient by S (the chain rule is linear in the loss),
which lifts them into float16's range; before the optimizer uses them they are divided by S again
(in float32: the parameters and their gradients are float32 master copies). S too large makes some
gradient overflow to inf, or nan: that step is skipped and S shrinks by backoff_factor; after
growth_interval clean steps in a row it grows by growth_factor, so S stays near the largest value
that does not overflow. The loop, PyTorch's:

    scaler = tg.amp.GradScaler("cuda")
    with tg.autocast("cuda"):
        _, loss = model(x, y)
    scaler.scale(loss).backward()          # gradients of S * loss
    scaler.unscale_(optimizer)             # optional: divides by S now, so that clipping sees true gradients
    clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)                 # unscales if not done yet; skips the step after an overflow
    scaler.update()                        # backs off or grows S

What differs from PyTorch is where the decisions are made: **the host never waits for the GPU.**
The scale (float32) and the growth tracker (int32) are 0-d arrays on the device of the tensors
scaled; unscale_ multiplies each gradient by 1 / S and finds inf and nan on the device
(kernels/grad_scaler.cu), into a float32 flag found_inf per device; update() computes the new scale
there too. PyTorch's step() reads found_inf on the host (``.item()``, a sync) for ordinary
optimizers. Here Adam and AdamW (``_step_supports_amp_scaling = True``) take the flag instead
(``optimizer.found_inf`` for the length of one ``step()``, PyTorch's name) and their kernel skips on
the device (kernels/adamw.cu); the step count of a skipped step does not advance, so the bias
corrections are the ones PyTorch's, whose skipped step never reaches the optimizer, gives. Other
optimizers (SGD) get PyTorch's behaviour: step() reads found_inf on the host, a sync, and skips
``optimizer.step()`` when it is set.

Where this differs from torch.amp.GradScaler, on purpose:

* Adam's and AdamW's steps are skipped on the device rather than by the host (above). Their
  ``state["step"]`` is then a float32 0-d array on the parameter's device, as in PyTorch's fused Adam.
* For those optimizers PyTorch hands the scale to the fused kernel, which unscales the gradients inside
  its update (and leaves ``.grad`` scaled); here step() calls unscale_ first, so ``.grad`` ends unscaled
  with every optimizer. The update sees the same numbers: for power-of-two scales, multiplying by 1 / S
  and dividing by S are both exact.
* A step() with no gradients at all raises "No inf checks were recorded for this optimizer" for every
  optimizer (PyTorch's fused optimizers let it through, and update() raises instead).
* found_inf is tested for "not 0" everywhere; PyTorch's fused Adam subtracts the sum of the per-device
  flags from its step count, which is 2 when two devices overflowed.
* ``device`` takes this library's names ('cuda', 'cuda:N', 'cpu', 'emu'); a tensor passed to
  ``update(new_scale)`` must be on a device of the same kind. ``update`` accepts an int as well as a
  float. The growth and backoff getters work on a disabled scaler too (PyTorch's raise AttributeError).
  There is no pickling (the project never pickles): state_dict() and load_state_dict() save a scaler.
"""
from __future__ import annotations

import warnings
from collections import abc, defaultdict
from enum import Enum

import numpy as np

from .. import device as devices
from .. import dtypes, kernels
from ..tensor import Tensor
from .autocast_mode import device_type


class OptState(Enum):
    """Where one optimizer is in the current iteration, between two update() calls."""
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _refresh_per_optimizer_state() -> dict:
    return {"stage": OptState.READY, "found_inf_per_device": {}}


class GradScaler:
    """``GradScaler(device="cuda", init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5,
    growth_interval=2000, enabled=True)``; the module docstring explains the loop and the differences
    from PyTorch. With enabled=False every method passes through: scale() returns its outputs, step()
    calls optimizer.step(), the others do nothing. Asked for 'cuda' where there is none, the scaler
    warns and disables itself, as PyTorch's does.
    """

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        name = str(device).strip().lower()
        self._enabled = enabled
        if devices.is_cuda(name) and enabled and not devices.cuda_available():
            warnings.warn(f"GradScaler is enabled, but CUDA is not available ({devices.cuda_problem()}). "
                          "Disabling.", stacklevel=2)
            self._enabled = False
        self._device = device_type(devices.canonical(name) if self._enabled else name)
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
        self._init_scale = init_scale
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._init_growth_tracker = 0
        # Made on the device of the first tensor scale() gets: that is where the gradients will be.
        self._scale = None              # Tensor, float32, 0-d
        self._growth_tracker = None     # Tensor, int32, 0-d: clean steps in a row
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)      # id(optimizer) -> state

    def _check_scale_growth_tracker(self, funcname: str):
        """The scale and the tracker, which the first scale() makes (together): PyTorch's error before it."""
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  This may indicate your script did not "
                                 "use scaler.scale(loss or outputs) earlier in the iteration.")
        return self._scale, self._growth_tracker

    def _lazy_init_scale_growth_tracker(self, device: str) -> None:
        xp = devices.array_module(device)
        with devices.use(device):
            self._scale = Tensor._wrap(xp.full((), self._init_scale, np.float32), device)
            self._growth_tracker = Tensor._wrap(xp.full((), self._init_growth_tracker, np.int32), device)

    # ------------------------------------------------------------------ the loop
    def scale(self, outputs):
        """outputs times the scale: a Tensor, or (nested) lists and tuples of them, which come back as the
        same containers (other iterables as an iterator, as in PyTorch). Differentiable: backward() of the
        result gives scaled gradients. A 0-d float16 loss times the float32 0-d scale is float32, as in PyTorch."""
        if not self._enabled:
            return outputs
        on_device = {}                  # the scale, once per device the outputs live on

        def apply_scale(value):
            if isinstance(value, Tensor):
                if self._scale is None:
                    self._lazy_init_scale_growth_tracker(value.device)
                if value.device not in on_device:
                    with devices.use(value.device):
                        on_device[value.device] = Tensor._wrap(devices.move(self._scale.data, value.device),
                                                               value.device)
                return value * on_device[value.device]
            if isinstance(value, abc.Iterable):
                scaled = map(apply_scale, value)
                return type(value)(scaled) if isinstance(value, (list, tuple)) else scaled
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")
        return apply_scale(outputs)

    def _unscale_grads_(self, optimizer) -> dict:
        """Unscale every gradient of `optimizer` in place; {device: found_inf} for the devices they live on."""
        scales, found_infs = {}, {}
        for group in optimizer.param_groups:
            for param in group["params"]:
                grad = param.grad
                if grad is None:
                    continue
                if grad.dtype == dtypes.float16:
                    raise ValueError("Attempting to unscale FP16 gradients.")
                device = grad.device
                with devices.use(device):
                    if device not in found_infs:
                        scales[device] = devices.move(self._scale.data, device)
                        found_infs[device] = devices.array_module(device).zeros((), np.float32)
                    kernels.grad_scaler.non_finite_check_and_unscale_(grad.data, found_infs[device], scales[device],
                                                                      device)
        return {device: Tensor._wrap(flag, device) for device, flag in found_infs.items()}

    def unscale_(self, optimizer) -> None:
        """Divide the optimizer's gradients by the scale, in place, and note on the device whether any held an
        inf or a nan. Optional: step() does it when it was not done; call it first to clip or inspect the true
        gradients. Once per optimizer between two update() calls, after all gradients are accumulated. No sync."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        elif optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        optimizer_state["found_inf_per_device"] = self._unscale_grads_(optimizer)
        optimizer_state["stage"] = OptState.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """unscale_(optimizer) unless done, then optimizer.step(*args, **kwargs) unless a gradient overflowed;
        returns what optimizer.step returned (None when skipped on the host).

        An optimizer with ``_step_supports_amp_scaling`` (Adam, AdamW) always steps, with the flag in
        ``optimizer.found_inf``, and skips on the device: no sync. Any other reads the flag on the host
        (``.item()``, a sync: the host waits for the backward to finish) and is not called after an overflow.
        """
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if optimizer_state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        found_infs = list(optimizer_state["found_inf_per_device"].values())
        if not found_infs:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            optimizer.found_inf = self._sum_on_scale_device(found_infs)
            try:
                retval = optimizer.step(*args, **kwargs)
            finally:
                del optimizer.found_inf
        else:
            retval = None if sum(flag.item() for flag in found_infs) else optimizer.step(*args, **kwargs)
        optimizer_state["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale=None) -> None:
        """Back off after an overflow in any optimizer's gradients this iteration, else count a clean step and
        grow every growth_interval of them; all on the device. new_scale (a number, or a 1-element tensor that
        does not require grad) sets the scale instead. Call it once per iteration, after every step()."""
        if not self._enabled:
            return
        scale, growth_tracker = self._check_scale_growth_tracker("update")
        if new_scale is not None:
            if isinstance(new_scale, (int, float)):
                with devices.use(scale.device):
                    scale.data.fill(new_scale)
            else:
                reason = "new_scale should be a float or a 1-element tensor with requires_grad=False."
                if not isinstance(new_scale, Tensor) or device_type(new_scale.device) != self._device:
                    raise AssertionError(reason)
                if new_scale.numel() != 1 or new_scale.requires_grad:
                    raise AssertionError(reason)
                with devices.use(scale.device):
                    scale.data[...] = devices.move(new_scale.data.reshape(()), scale.device)
        else:
            found_infs = [flag for state in self._per_optimizer_states.values()
                          for flag in state["found_inf_per_device"].values()]
            if not found_infs:
                raise AssertionError("No inf checks were recorded prior to update.")
            with devices.use(scale.device):
                kernels.grad_scaler.update_scale_(scale.data, growth_tracker.data,
                                                  self._sum_on_scale_device(found_infs).data, self._growth_factor,
                                                  self._backoff_factor, self._growth_interval, scale.device)
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def _sum_on_scale_device(self, found_infs: list) -> Tensor:
        """The flags of several devices (or optimizers) as one, on the scale's device: not 0 if any is not 0.
        One flag, the common case, is passed on as it is."""
        device = self._scale.device
        with devices.use(device):
            total = devices.move(found_infs[0].data, device)
            for flag in found_infs[1:]:
                total = total + devices.move(flag.data, device)
        return Tensor._wrap(total, device)

    # ------------------------------------------------------------------ settings and state
    def _get_scale_async(self):
        """The scale as a 0-d Tensor on its device (None before the first scale()), read without a sync."""
        return self._scale

    def get_scale(self) -> float:
        """The current scale as a Python float (1.0 when disabled). Reads the device: a sync."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else self._scale.item()

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = new_interval

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else self._growth_tracker.item()

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict:
        """PyTorch's five entries, as Python numbers (a sync, at checkpoint time); {} when disabled.
        Save it after update(), at the end of an iteration."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Take a state_dict()'s values (nothing when disabled); the scale and tracker keep their device."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._scale is not None:
            with devices.use(self._scale.device):
                self._scale.data.fill(self._init_scale)
                self._growth_tracker.data.fill(self._init_growth_tracker)
