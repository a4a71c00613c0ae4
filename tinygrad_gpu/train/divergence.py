"""Stopping a run whose loss or gradient norm stops being a number, before it saves anything.

A learning rate that is too high makes the weights grow until a product overflows: the loss
becomes inf, then nan, and every later step keeps it so. The loop hands each step's loss and
gradient norm to a DivergenceWatch, which looks at them only where the loop reads numbers
anyway: every few steps, and before a checkpoint is written. (Reading a number from a GPU makes
the host wait for it; once a step is too many.) The first inf or nan ends the run with
TrainingDiverged, and the last checkpoint, written before it, is kept as it was.

The steps' warnings (NumPy's "overflow encountered in square", say) are held until the run ends:
a run that diverges drops them, since they only foretell its one-line error (weights that grow
overflow a layer norm's variance steps before the loss itself is inf); any other run shows them
as it ends, each place's once (as Python shows them), so a warning from an op you add is not
hidden. Those of a step that fails are shown at once. Python's warning filters apply as a warning
is raised (-W error raises it then).
"""
from __future__ import annotations

import contextlib
import math
import warnings

from ..ops.movement import stack


class TrainingDiverged(RuntimeError):
    """A run whose loss or gradient norm became inf or nan; reported in one line, without a traceback."""


class DivergenceWatch:
    def __init__(self, config):
        self.config = config
        self.pending = []             # (iteration, loss, gradient norm or None) not looked at yet
        self.last_finite = None       # (iteration, loss)
        self.saved_at = None          # the iteration of the last checkpoint this run wrote
        self.held_warnings = {}       # (message, category, file, line) -> the first warning from that place

    @contextlib.contextmanager
    def holding_warnings(self):
        """Run a step or an evaluation with its warnings held until the run ends (``with watch:``); those of a
        step that raises are shown at once, they may say why."""
        failed = True
        try:
            with warnings.catch_warnings(record=True) as caught:
                yield
            failed = False
        finally:
            for w in caught:
                self.held_warnings.setdefault((str(w.message), w.category, w.filename, w.lineno), w)
            if failed:
                self.show_held_warnings()

    def show_held_warnings(self) -> None:
        held, self.held_warnings = self.held_warnings, {}
        for w in held.values():
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)

    def __enter__(self):
        return self

    def __exit__(self, *error) -> None:
        """The run's end: its held warnings (none after a divergence: _finite dropped them)."""
        self.show_held_warnings()

    def note(self, iteration: int, loss, grad_norm=None) -> None:
        """The loss of the step from `iteration` to the next, and its gradient norm before clipping."""
        self.pending.append((iteration, loss, grad_norm))

    def check(self) -> None:
        """Raise TrainingDiverged at the first inf or nan noted since the last check."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        # All of them in one read: one wait for the GPU, not one per number.
        tensors = [t.reshape(()).double() for _, loss, norm in pending for t in (loss, norm) if t is not None]
        values = iter(stack(tensors).tolist())
        for iteration, loss, grad_norm in pending:
            loss = next(values)
            self._finite(iteration, "the loss", loss)
            if grad_norm is not None:
                self._finite(iteration, "the gradient norm", next(values))
            self.last_finite = (iteration, loss)

    def check_losses(self, iteration: int, losses: dict) -> None:
        """An evaluation's losses, before they are recorded and the checkpoint written."""
        for split, value in losses.items():
            self._finite(iteration, f"the {split} loss", value)

    def _finite(self, iteration: int, what: str, value: float) -> None:
        if math.isfinite(value):
            return
        self.held_warnings = {}         # the overflows that led here: the error below says it better
        last = "no finite loss was measured" if self.last_finite is None else \
            f"the last finite loss was {self.last_finite[1]:.4f}, at iteration {self.last_finite[0]}"
        kept = ("no checkpoint of this run was saved" if self.saved_at is None else
                f"the checkpoint of iteration {self.saved_at} in {self.config.out_dir} is kept")
        clip = f"--grad-clip (now {self.config.grad_clip})" if self.config.grad_clip else "a --grad-clip such as 1.0"
        raise TrainingDiverged(f"{what} became {value} at iteration {iteration} ({last}); the run stopped and "
                               f"{kept}. Try a lower --lr (now {self.config.lr}) or {clip}")
