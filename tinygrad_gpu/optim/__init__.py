"""Optimizers and learning-rate schedules with torch.optim's names and update rules."""
from . import lr_scheduler
from .adam import Adam, AdamW, configure_adamw
from .clip import clip_grad_norm_
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "configure_adamw", "clip_grad_norm_", "lr_scheduler"]
