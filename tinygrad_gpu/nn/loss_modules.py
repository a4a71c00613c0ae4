"""Losses as Modules, with torch.nn's names: ``criterion = nn.CrossEntropyLoss(); loss = criterion(logits, y)``.

Each holds its options and calls the function of the same loss in ``nn.functional``, so the two can never
disagree. ``weight`` may come first, as in torch; the other options are keyword-only: torch's next positional
arguments are the long-removed ``size_average`` and ``reduce``, and a loss that took them as something else
would silently compute another loss; here such a call is a TypeError. Class and element weights are buffers,
as in torch (they appear in state_dict and follow ``.to(device)``).
"""
from __future__ import annotations

from . import functional as F
from .module import Module


class _Loss(Module):
    def __init__(self, reduction: str):
        super().__init__()
        F._check_reduction(type(self).__name__, reduction)     # at construction, not at the first batch
        self.reduction = reduction


class MSELoss(_Loss):
    """Mean squared error: (input - target)^2, reduced."""

    def __init__(self, *, reduction: str = "mean"):
        super().__init__(reduction)

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error: |input - target|, reduced."""

    def __init__(self, *, reduction: str = "mean"):
        super().__init__(reduction)

    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy of logits against class indices or class probabilities (F.cross_entropy)."""

    def __init__(self, weight=None, *, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__(reduction)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"CrossEntropyLoss: label_smoothing must be in [0, 1], got {label_smoothing}")
        self.register_buffer("weight", weight)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_Loss):
    """Negative log-likelihood of class indices, given log-probabilities (a LogSoftmax's output)."""

    def __init__(self, weight=None, *, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class BCELoss(_Loss):
    """Binary cross-entropy of probabilities in [0, 1] (a Sigmoid's output; BCEWithLogitsLoss is the stabler
    choice from logits)."""

    def __init__(self, weight=None, *, reduction: str = "mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy from logits, finite for any logit; pos_weight scales the positive term per class."""

    def __init__(self, weight=None, *, reduction: str = "mean", pos_weight=None):
        super().__init__(reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, weight=self.weight, reduction=self.reduction,
                                                  pos_weight=self.pos_weight)
