"""What a run shows and keeps: the progress bar (or plain lines), OUT_DIR/metrics.jsonl, the loss plot,
and what the run cost: its FLOPs, MFU (model FLOPs utilisation) and, given a price per hour, dollars.

The cumulative figures derive from the iteration (FLOPs: tokens trained x FLOPs per token) and the
elapsed time (cost), both of which a resumed run takes from the rows it keeps, so they stay right
across resumes."""
from __future__ import annotations

import json
import os
import sys
import time

from . import energy

METRICS_NAME = "metrics.jsonl"


class Report:
    """One run's reporting. Each evaluation becomes a row of metrics.jsonl and a printed line;
    each step moves the progress bar, which shows the loss, speed and MFU every 10 iterations.
    `peak_flops` is the devices' (compute.peak_flops), None where unknown: then no MFU.
    `tokens_per_step` counts every process's tokens. Under mpiexec only rank 0's report (`main`)
    shows and writes anything; the others keep the same rows, to agree on what is left to do."""

    def __init__(self, config, iter_num: int, tokens_per_step: int, flops_per_token: int, peak_flops: float = None,
                 world_size: int = 1, main: bool = True, dtype: str = "float32", meter=None, changes: dict = None):
        """`changes`: what a resumed run was allowed to change (resuming.py), kept in its next row."""
        self.path, self.main, self.world_size = os.path.join(config.out_dir, METRICS_NAME), main, world_size
        self.dtype, self.meter, self.grid = dtype, meter, getattr(config, "grid_gco2_per_kwh", None)
        if config.resume:       # the rows written after the checkpoint are about to be redone
            self.metrics = _read_metrics(self.path, iter_num)
            if main:
                _write_lines(self.path, self.metrics)
        else:
            self.metrics = []
            if main and os.path.exists(self.path):
                os.remove(self.path)
        self.evaluated = {row["iter"] for row in self.metrics}
        self.tokens_per_step, self.max_iters = tokens_per_step, config.max_iters
        self.flops_per_token, self.peak_flops, self.price_per_hour = flops_per_token, peak_flops, config.price_per_hour
        self.progress = _progress_bar(config, iter_num) if main else _Silent()
        self.start = time.time() - (self.metrics[-1]["elapsed_s"] if self.metrics else 0.0)
        # The energy of the runs this one resumes, to which this run's meter adds (energy.py)
        self.energy_before = (self.metrics[-1].get("energy_kwh") or 0.0) if self.metrics else 0.0
        self.shown_at, self.shown_iter = time.time(), iter_num
        self.changes = changes or {}

    def measure(self, iter_num: int, losses: dict, lr: float) -> dict:
        """The metrics row of an evaluation. Its speed, FLOP/s, MFU and cost are the run's so far (run_totals),
        as the line a run ends with shows them: the same figures, computed once."""
        elapsed = self.elapsed()
        so_far = run_totals(iter_num * self.tokens_per_step, self.flops_per_token, elapsed, self.peak_flops,
                            self.price_per_hour)
        row = {"iter": iter_num, "train_loss": round(losses["train"], 6), "val_loss": round(losses["val"], 6),
               "lr": lr, "tokens_per_sec": so_far["tokens_per_sec"], "world_size": self.world_size,
               "dtype": self.dtype, "elapsed_s": elapsed, "flops": so_far["flops"],
               "tflops_per_sec": so_far["tflops_per_sec"], "mfu": so_far["mfu"]}
        cost = {key: so_far[key] for key in ("cost", "cost_per_million_tokens") if key in so_far}
        changed, self.changes = ({"changed": self.changes} if self.changes else {}), {}
        return {**row, **self._energy(), **cost, **changed}

    def energy_kwh(self):
        """The energy of the whole run so far (resumed runs included), or None where nothing measures it."""
        joules = None if self.meter is None else self.meter.joules()
        return None if joules is None else round(self.energy_before + energy.kwh(joules), 9)

    def _energy(self) -> dict:
        used = self.energy_kwh()
        return {} if used is None else {"energy_kwh": used, "energy_source": self.meter.source}

    def totals(self, iter_num: int) -> dict:
        """The whole run's figures, those of the runs it resumes included (run_totals). A run that ends with an
        evaluation ends with that row's figures: its seconds, so the same speed, MFU and cost."""
        last = self.metrics[-1] if self.metrics else None
        elapsed = last["elapsed_s"] if last is not None and last["iter"] == iter_num else self.elapsed()
        return run_totals(iter_num * self.tokens_per_step, self.flops_per_token, elapsed, self.peak_flops,
                          self.price_per_hour, self.energy_kwh(), self.meter is not None and self.meter.estimated,
                          self.grid)

    def record(self, row: dict) -> None:
        if self.main:
            with open(self.path, "a") as f:
                f.write(json.dumps(row) + "\n")
        self.metrics.append(row)
        self.evaluated.add(row["iter"])
        self.write(f"iter {row['iter']}: train loss {row['train_loss']:.4f}, val loss {row['val_loss']:.4f}, "
                   f"{row['tokens_per_sec']:.0f} tokens/s over the run")

    def step(self, iter_num: int, loss) -> None:
        """A training step is done; `iter_num` counts it."""
        if self.main and (iter_num % 10 == 0 or iter_num == self.max_iters):  # .item() waits for the GPU
            speed = (iter_num - self.shown_iter) * self.tokens_per_step / max(time.time() - self.shown_at, 1e-9)
            shown = dict(loss=f"{loss.item():.4f}", tok_per_s=f"{speed:.0f}")
            if self.peak_flops is not None:
                shown["mfu"] = f"{speed * self.flops_per_token / self.peak_flops:.1%}"
            self.progress.set_postfix(**shown)
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

    def close_progress(self) -> None:
        """Take the progress bar off the terminal (closing it again later does nothing)."""
        self.progress.close()

    def close(self) -> None:
        self.close_progress()
        if self.main:
            _plot(self.metrics, os.path.join(os.path.dirname(self.path), "loss.png"))


def run_totals(tokens: int, flops_per_token: float, elapsed_s: float, peak_flops: float = None,
               price_per_hour: float = None, energy_kwh: float = None, energy_estimated: bool = False,
               grid_gco2_per_kwh: float = None) -> dict:
    """A run's figures, for cost_line and each metrics row: tokens and FLOPs trained, seconds, and over those
    seconds (evaluations included: the time the machine was paid for, as the cost is) the tokens per second,
    TFLOP/s and MFU; the cost, and the energy (None where nothing measured or estimated it) with its CO2 at
    the grid's intensity."""
    flops = tokens * flops_per_token
    per_second = 1 / max(elapsed_s, 1e-9)
    mfu = None if peak_flops is None else _significant(flops * per_second / peak_flops)
    totals = {"tokens": tokens, "flops": flops, "elapsed_s": elapsed_s, "tokens_per_sec": round(tokens * per_second, 1),
              "tflops_per_sec": _significant(flops * per_second / 1e12), "mfu": mfu,
              **_cost(tokens, elapsed_s, price_per_hour)}
    if energy_kwh is not None:
        totals.update(energy_kwh=energy_kwh, energy_estimated=energy_estimated)
        if grid_gco2_per_kwh is not None:
            totals.update(co2_g=_significant(energy_kwh * grid_gco2_per_kwh), grid_gco2_per_kwh=grid_gco2_per_kwh)
    return totals


def _cost(tokens: int, elapsed_s: float, price_per_hour: float = None) -> dict:
    """The dollars spent after `elapsed_s` seconds, and per million tokens trained (None before the
    first); nothing without a price."""
    if price_per_hour is None:
        return {}
    cost = elapsed_s / 3600 * price_per_hour
    per_million = _significant(cost / tokens * 1e6) if tokens else None
    return {"cost": _significant(cost), "cost_per_million_tokens": per_million}


def cost_line(totals: dict, price_per_hour: float = None) -> str:
    """The run in one line: `trained 2.0M tokens at 16.1k tokens/s, 4.1 PFLOP, 31% MFU, 2.1 min, $0.07 at $2.00/h`
    (the MFU where the device's peak is known, the cost where the price is)."""
    parts = [f"trained {_prefixed(totals['tokens'])} tokens at {_prefixed(totals['tokens_per_sec'])} tokens/s",
             f"{_prefixed(totals['flops'], ' ')}FLOP"]
    if totals["mfu"] is not None:
        percent = 100 * totals["mfu"]
        parts.append(f"{percent:.0f}% MFU" if percent >= 10 else f"{percent:.2g}% MFU")
    parts.append(time_and_cost(totals["elapsed_s"], price_per_hour))
    if totals.get("energy_kwh") is not None:
        parts.append(f"{totals['energy_kwh']:.3g} kWh" + (" (estimated)" if totals["energy_estimated"] else ""))
        if "co2_g" in totals:
            parts.append(f"{totals['co2_g']:.3g} g CO2 at {totals['grid_gco2_per_kwh']:g} g/kWh")
    return ", ".join(parts)


def time_and_cost(seconds: float, price_per_hour: float = None) -> str:
    """`2.1 min, $0.07 at $2.00/h`: how long a job took and, with the machine's price, what it cost (in cents,
    or for a tiny job two significant digits)."""
    took = f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.1f} min" if seconds < 3600 else \
        f"{seconds / 3600:.1f} h"
    if price_per_hour is None:
        return took
    cost = seconds / 3600 * price_per_hour
    return took + (f", ${cost:.2f}" if cost >= 0.01 else f", ${cost:.2g}") + f" at ${price_per_hour:.2f}/h"


def _significant(number: float) -> float:
    """Six significant digits: a CPU run's TFLOP/s and a short run's cost are small numbers that a fixed
    number of decimal places would erase."""
    return float(f"{number:.6g}")


def _prefixed(number: float, space: str = "") -> str:
    """1234567 -> '1.2M': one decimal and an SI prefix (k, M, G, T, P, E); small numbers as they are."""
    for prefix, size in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if number >= size:
            return f"{number / size:.1f}{space}{prefix}"
    return f"{number:.0f}{space}"


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


class _Silent:
    """The progress of a rank other than 0: nothing shown."""
    def update(self, n): pass
    def set_postfix(self, **kw): pass
    def close(self): pass
    def write(self, line): pass


class _NoProgress(_Silent):
    """Plain lines instead of a bar."""
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
