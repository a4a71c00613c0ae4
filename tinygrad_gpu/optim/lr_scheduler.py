"""Learning-rate schedules. A scheduler sets every group's lr from the step count each time
``step()`` is called (after ``optimizer.step()``), as in torch.optim.lr_scheduler."""
from __future__ import annotations

import math


def warmup_cosine(step: int, max_lr: float, warmup_iters: int, decay_iters: int, min_lr: float) -> float:
    """Linear warmup from ~0 to max_lr over warmup_iters steps, then a cosine down to min_lr at
    decay_iters, then min_lr. Warmup keeps the first steps small while Adam's moment estimates
    are still noisy; the slow decay lets training settle into a minimum."""
    if step < warmup_iters:
        return max_lr * (step + 1) / (warmup_iters + 1)
    if step >= decay_iters:
        return min_lr
    progress = (step - warmup_iters) / max(decay_iters - warmup_iters, 1)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (max_lr - min_lr)


class LRScheduler:
    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.base_lrs = [group.setdefault("initial_lr", group["lr"]) for group in optimizer.param_groups]
        self.last_epoch = 0
        self._apply()

    def lr_at(self, step: int, base_lr: float) -> float:
        raise NotImplementedError

    def _apply(self):
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = self.lr_at(self.last_epoch, base)

    def step(self) -> None:
        self.last_epoch += 1
        self._apply()

    def get_last_lr(self) -> list:
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        return {"last_epoch": self.last_epoch, "base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state: dict) -> None:
        self.last_epoch, self.base_lrs = int(state["last_epoch"]), list(state["base_lrs"])
        self._apply()


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(step)."""

    def __init__(self, optimizer, lr_lambda):
        self.lr_lambda = lr_lambda
        super().__init__(optimizer)

    def lr_at(self, step, base_lr):
        return base_lr * self.lr_lambda(step)


class WarmupCosineLR(LRScheduler):
    """`warmup_cosine` for every group: the group's own lr is its peak, and min_lr is scaled by
    the same factor for each group (min_lr is the floor of the first group)."""

    def __init__(self, optimizer, warmup_iters: int, decay_iters: int, min_lr: float):
        self.warmup_iters, self.decay_iters, self.min_lr = warmup_iters, decay_iters, min_lr
        super().__init__(optimizer)

    def lr_at(self, step, base_lr):
        floor = self.min_lr * base_lr / self.base_lrs[0] if self.base_lrs[0] else 0.0
        return warmup_cosine(step, base_lr, self.warmup_iters, self.decay_iters, floor)


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (step // step_size): the lr drops by the factor gamma every step_size steps."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1):
        if not isinstance(step_size, int) or isinstance(step_size, bool) or step_size <= 0:
            raise ValueError(f"StepLR: step_size must be a positive int (steps between drops), got {step_size!r}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def lr_at(self, step, base_lr):
        return base_lr * self.gamma ** (step // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """Half a cosine from base_lr down to eta_min over T_max steps:
    lr = eta_min + (base_lr - eta_min) (1 + cos(pi step / T_max)) / 2.
    As in torch it does not stop at T_max: past it the cosine climbs back to base_lr at 2 T_max, and so on
    (torch computes it step by step from the previous lr; this is the closed form, equal to rounding)."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0):
        if not T_max > 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be a positive number of steps, got {T_max!r}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer)

    def lr_at(self, step, base_lr):
        return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * step / self.T_max)) / 2
