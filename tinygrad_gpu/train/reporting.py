"""What a run shows and keeps: the progress bar (or plain lines), OUT_DIR/metrics.jsonl, the loss plot."""
from __future__ import annotations

import json
import os
import sys
import time

METRICS_NAME = "metrics.jsonl"


class Report:
    """One run's reporting. Each evaluation becomes a row of metrics.jsonl and a printed line;
    each step moves the progress bar, which shows the loss and speed every 10 iterations."""

    def __init__(self, config, iter_num: int, tokens_per_step: int):
        self.path = os.path.join(config.out_dir, METRICS_NAME)
        if config.resume:       # the rows written after the checkpoint are about to be redone
            self.metrics = _read_metrics(self.path, iter_num)
            _write_lines(self.path, self.metrics)
        else:
            self.metrics = []
            if os.path.exists(self.path):
                os.remove(self.path)
        self.evaluated = {row["iter"] for row in self.metrics}
        self.tokens_per_step, self.max_iters = tokens_per_step, config.max_iters
        self.progress = _progress_bar(config, iter_num)
        self.start = time.time() - (self.metrics[-1]["elapsed_s"] if self.metrics else 0.0)
        self.interval_start, self.interval_steps = time.time(), 0
        self.shown_at, self.shown_iter = time.time(), iter_num

    def measure(self, iter_num: int, losses: dict, lr: float) -> dict:
        """The metrics row of an evaluation; the speed is over the steps since the last one."""
        elapsed = time.time() - self.interval_start
        return {"iter": iter_num, "train_loss": round(losses["train"], 6), "val_loss": round(losses["val"], 6),
                "lr": lr, "tokens_per_sec": round(self.interval_steps * self.tokens_per_step / max(elapsed, 1e-9), 1),
                "elapsed_s": round(time.time() - self.start, 2)}

    def record(self, row: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        self.metrics.append(row)
        self.evaluated.add(row["iter"])
        self.write(f"iter {row['iter']}: train loss {row['train_loss']:.4f}, val loss {row['val_loss']:.4f}, "
                   f"{row['tokens_per_sec']:.0f} tokens/s")
        self.interval_start, self.interval_steps = time.time(), 0

    def step(self, iter_num: int, loss) -> None:
        """A training step is done; `iter_num` counts it."""
        self.interval_steps += 1
        if iter_num % 10 == 0 or iter_num == self.max_iters:      # .item() waits for the GPU: not every step
            speed = (iter_num - self.shown_iter) * self.tokens_per_step / max(time.time() - self.shown_at, 1e-9)
            self.progress.set_postfix(loss=f"{loss.item():.4f}", tok_per_s=f"{speed:.0f}")
            self.shown_at, self.shown_iter = time.time(), iter_num
        self.progress.update(1)

    def write(self, line: str) -> None:
        self.progress.write(line)

    def elapsed(self) -> float:
        """Seconds of training, those of the runs this one resumes included."""
        return round(time.time() - self.start, 2)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        self.progress.close()
        _plot(self.metrics, os.path.join(os.path.dirname(self.path), "loss.png"))


def _read_metrics(path: str, up_to_iter: int) -> list:
    """The metric lines of a run, without those after `up_to_iter` (written after the checkpoint)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [row for row in rows if row["iter"] <= up_to_iter]


def _write_lines(path: str, rows: list) -> None:
    temporary = path + ".tmp"
    with open(temporary, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    os.replace(temporary, path)


class _NoProgress:
    def update(self, n): pass
    def set_postfix(self, **kw): pass
    def close(self): pass

    @staticmethod
    def write(line):
        print(line, flush=True)


def _progress_bar(config, initial: int):
    """tqdm's bar (loss, tokens/s, ETA) when wanted and installed; plain lines otherwise. Wanted, unless
    --progress or --no-progress says otherwise, when someone watches: when stderr is a terminal (a
    bar written to a file is hundreds of lines of carriage returns)."""
    wanted = config.progress if config.progress is not None else sys.stderr.isatty()
    if not wanted:
        return _NoProgress()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoProgress()
    return tqdm(total=config.max_iters, initial=initial, unit="it", dynamic_ncols=True)


def _plot(metrics: list, path: str) -> None:
    """A loss curve as PNG, when matplotlib is installed (it is optional)."""
    if len(metrics) < 2:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    figure, axes = plt.subplots(figsize=(6, 4))
    iters = [row["iter"] for row in metrics]
    axes.plot(iters, [row["train_loss"] for row in metrics], label="train")
    axes.plot(iters, [row["val_loss"] for row in metrics], label="val")
    axes.set_xlabel("iteration")
    axes.set_ylabel("cross-entropy loss")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
