"""The fixed cost of each op: our engine against the raw NumPy (CuPy) call, on tiny tensors.

    python benchmarks/ops.py                     # cpu, 4x4 tensors, torch's column when torch imports
    python benchmarks/ops.py --size 512          # larger arrays: where the array work starts to count
    python benchmarks/ops.py --device cuda       # CuPy on the GPU, and torch on the same GPU
    python benchmarks/ops.py --quick             # a rough table in a few seconds

On a 4x4 tensor the arithmetic takes a fraction of a microsecond, so what the table shows
is what the engine adds around it: argument checks, dtype promotion, the Function node,
wrapping the result, and for backward the graph walk.  Columns, in microseconds per call
(best of --repeat timed runs, each run as many calls back to back as fill --min-time):

  raw        the NumPy/CuPy expression that computes the same forward, called directly
  no-grad    ours under tg.no_grad(): the op's Python path, nothing recorded
  record     ours with requires_grad inputs: the forward and its graph node(s)
  fwd+bwd    ours forward, then backward(ones) into leaves whose .grad is reset to None each call
  overhead   no-grad minus raw: what the engine costs per call before any graph is kept
  nodes      Function nodes the op records (a composition such as mean records several)
  torch      the same op in PyTorch eager on the same hardware (no grad, and forward + backward)

On cuda every timed run ends with a device synchronize, so a number is the larger of the CPU
cost of issuing the calls and the GPU time to run them.  The numbers move with whatever
else the machine runs; the header prints the load average.  Without a GPU, --device cuda
says so and exits with status 0.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import timeit
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))      # run from a checkout without installing

import tinygrad_gpu as tg  # noqa: E402
import tinygrad_gpu.nn.functional as F  # noqa: E402
from tinygrad_gpu import device as devices  # noqa: E402
from benchmarks import bench_device  # noqa: E402

GELU_K = float(np.sqrt(2 / np.pi))


# ----------------------------------------------------------------------------- the raw forwards
def raw_softmax(s):
    e = s.xp.exp(s.a - s.a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def raw_log_softmax(s):
    shifted = s.a - s.a.max(-1, keepdims=True)
    return shifted - s.xp.log(s.xp.exp(shifted).sum(-1, keepdims=True))


def raw_layer_norm(s):
    centered = s.a - s.a.mean(-1, keepdims=True)
    return centered / s.xp.sqrt((centered * centered).mean(-1, keepdims=True) + 1e-5) * s.w + s.bias


def raw_cross_entropy(s):
    return -raw_log_softmax(s)[s.xp.arange(len(s.labels)), s.labels].mean()


# Each case: (name, ours(s), raw(s), torch(s)).  `s` holds the inputs a, b (n x n), w, bias (n),
# idx, labels (n integers in [0, n)) as tensors or arrays of that library, plus the library itself.
CASES = [
    ("add", lambda s: s.a + s.b, lambda s: s.a + s.b, lambda s: s.a + s.b),
    ("mul", lambda s: s.a * s.b, lambda s: s.a * s.b, lambda s: s.a * s.b),
    ("div by scalar", lambda s: s.a / 2.0, lambda s: s.a / 2.0, lambda s: s.a / 2.0),
    ("exp", lambda s: s.a.exp(), lambda s: s.xp.exp(s.a), lambda s: s.a.exp()),
    ("tanh", lambda s: s.a.tanh(), lambda s: s.xp.tanh(s.a), lambda s: s.a.tanh()),
    ("relu", lambda s: s.a.relu(), lambda s: s.xp.maximum(s.a, 0), lambda s: s.a.relu()),
    ("gelu tanh", lambda s: F.gelu(s.a, approximate="tanh"),
     lambda s: 0.5 * s.a * (1 + s.xp.tanh(GELU_K * (s.a + 0.044715 * s.a * s.a * s.a))),
     lambda s: s.F.gelu(s.a, approximate="tanh")),
    ("sum", lambda s: s.a.sum(), lambda s: s.a.sum(), lambda s: s.a.sum()),
    ("mean over a dim", lambda s: s.a.mean(1), lambda s: s.a.mean(1), lambda s: s.a.mean(1)),
    ("softmax", lambda s: s.a.softmax(-1), raw_softmax, lambda s: s.a.softmax(-1)),
    ("log_softmax", lambda s: s.a.log_softmax(-1), raw_log_softmax, lambda s: s.a.log_softmax(-1)),
    ("matmul", lambda s: s.a @ s.b, lambda s: s.a @ s.b, lambda s: s.a @ s.b),
    ("reshape", lambda s: s.a.reshape(-1), lambda s: s.a.reshape(-1), lambda s: s.a.reshape(-1)),
    ("transpose", lambda s: s.a.transpose(0, 1), lambda s: s.a.transpose(1, 0), lambda s: s.a.transpose(0, 1)),
    ("getitem slice", lambda s: s.a[1:], lambda s: s.a[1:], lambda s: s.a[1:]),
    ("getitem int array", lambda s: s.a[s.idx], lambda s: s.a[s.idx], lambda s: s.a[s.idx]),
    ("cat", lambda s: tg.cat([s.a, s.b]), lambda s: s.xp.concatenate([s.a, s.b]), lambda s: s.lib.cat([s.a, s.b])),
    ("layer_norm", lambda s: F.layer_norm(s.a, s.a.shape[-1:], s.w, s.bias), raw_layer_norm,
     lambda s: s.F.layer_norm(s.a, s.a.shape[-1:], s.w, s.bias)),
    ("cross_entropy", lambda s: F.cross_entropy(s.a, s.labels), raw_cross_entropy,
     lambda s: s.F.cross_entropy(s.a, s.labels)),
    ("embedding", lambda s: F.embedding(s.idx, s.a), lambda s: s.a[s.idx], lambda s: s.F.embedding(s.idx, s.a)),
]
FLOAT_INPUTS = ("a", "b", "w", "bias")


def input_arrays(n: int) -> dict:
    rng = np.random.default_rng(0)
    floats = {name: rng.standard_normal((n, n) if name in "ab" else (n,)).astype(np.float32)
              for name in FLOAT_INPUTS}
    return dict(floats, idx=rng.integers(0, n, n), labels=rng.integers(0, n, n))


# ----------------------------------------------------------------------------- timing
def best_us(fn, sync, repeat: int, min_time: float, context=contextlib.nullcontext) -> float:
    """Microseconds per call: the best of `repeat` runs of `number` back-to-back calls and one sync.

    The best, not the mean, as timeit recommends: slower runs measure other processes.
    `number` doubles until a run lasts min_time, so the timer's own cost is negligible.
    `context` (no_grad) is entered once per run, so that its own cost stays out of the op's.
    """
    def runner(number):
        def run():
            with context():
                for _ in range(number):
                    fn()
            sync()
        return run
    runner(2)()                     # first calls: CuPy compiles its kernels, caches warm up
    number = 1
    while timeit.Timer(runner(number)).timeit(1) < min_time:
        number *= 2
    return min(timeit.Timer(runner(number)).repeat(repeat, 1)) / number * 1e6


def count_nodes(out) -> int:
    """Function nodes recorded to produce `out` (leaves excluded)."""
    seen, stack = set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or isinstance(node, tg.Tensor) or id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(node.next_nodes)
    return len(seen)


def fwd_bwd(op, s, leaves, grad_out):
    def run():
        for leaf in leaves:
            leaf.grad = None        # as zero_grad(set_to_none=True): every call takes the same path
        op(s).backward(grad_out)
    return run


def measure_ours(op, s, sync, repeat, min_time) -> dict:
    leaves = [getattr(s, name) for name in FLOAT_INPUTS]
    out = op(s)
    grad_out = tg.ones_like(out)
    return dict(no_grad=best_us(lambda: op(s), sync, repeat, min_time, tg.no_grad),
                record=best_us(lambda: op(s), sync, repeat, min_time),
                fwd_bwd=best_us(fwd_bwd(op, s, leaves, grad_out), sync, repeat, min_time),
                nodes=count_nodes(out))


def measure_torch(op, s, torch, sync, repeat, min_time) -> dict:
    leaves = [getattr(s, name) for name in FLOAT_INPUTS]
    grad_out = torch.ones_like(op(s))
    return dict(no_grad=best_us(lambda: op(s), sync, repeat, min_time, torch.no_grad),
                fwd_bwd=best_us(fwd_bwd(op, s, leaves, grad_out), sync, repeat, min_time))


# ----------------------------------------------------------------------------- the table
def fmt(us) -> str:
    if us is None:
        return "-"
    return f"{us:.2f}" if abs(us) < 10 else f"{us:.1f}" if abs(us) < 1000 else f"{us:.0f}"


def ratio(a, b) -> str:
    return "-" if a is None or b is None or b <= 0 else f"{a / b:.1f}x"


def print_table(rows, with_torch: bool) -> None:
    header = ["op", "raw", "no-grad", "record", "fwd+bwd", "overhead", "ng/raw", "rec/raw", "nodes"]
    if with_torch:
        header += ["torch", "torch f+b", "ng/torch", "f+b/torch"]
    widths = [18] + [9] * (len(header) - 1)
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths))))
    for name, raw, ours, theirs in rows:
        if isinstance(ours, str):
            print(f"{name:<18}  failed: {ours}")
            continue
        cells = [fmt(raw), fmt(ours["no_grad"]), fmt(ours["record"]), fmt(ours["fwd_bwd"]),
                 fmt(ours["no_grad"] - raw), ratio(ours["no_grad"], raw), ratio(ours["record"], raw),
                 str(ours["nodes"])]
        if with_torch:
            cells += [fmt(theirs and theirs["no_grad"]), fmt(theirs and theirs["fwd_bwd"]),
                      ratio(ours["no_grad"], theirs and theirs["no_grad"]),
                      ratio(ours["fwd_bwd"], theirs and theirs["fwd_bwd"])]
        print(f"{name:<18}  " + "  ".join(c.rjust(w) for c, w in zip(cells, widths[1:])))


def print_summary(rows) -> None:
    done = [(name, raw, ours) for name, raw, ours, _ in rows if not isinstance(ours, str)]
    if not done:
        return
    overhead = sorted(((ours["no_grad"] - raw, name) for name, raw, ours in done), reverse=True)
    recording = statistics.median(ours["record"] - ours["no_grad"] for _, _, ours in done)
    print(f"\nmedian overhead per op without a graph: {fmt(statistics.median(o for o, _ in overhead))} us; "
          f"recording the graph adds a median {fmt(recording)} us")
    print("largest overheads: " + ", ".join(f"{name} {fmt(o)} us" for o, name in overhead[:5]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu, emu, cuda or cuda:N")
    parser.add_argument("--size", type=int, default=4, help="tensors are size x size (default 4)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per measurement; the best is kept")
    parser.add_argument("--min-time", type=float, default=0.02, help="seconds each timed run lasts at least")
    parser.add_argument("--ops", help="comma-separated op names to time (default: all)")
    parser.add_argument("--no-torch", action="store_true", help="leave out the torch columns")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch's CPU threads (default 1: a 4x4 op gains nothing from threads, and on a busy "
                             "machine each parallel region can wait a scheduler slice, milliseconds, for a worker)")
    parser.add_argument("--quick", action="store_true", help="2 runs of 2 ms each: a rough table in seconds")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.min_time = 2, 0.002
    device = bench_device.resolve(args.device, "benchmarks/ops.py")
    if device is None:
        return 0
    cases = [c for c in CASES if not args.ops or c[0] in args.ops.split(",")]
    torch, torch_device, torch_sync = (None, "--no-torch", None) if args.no_torch else bench_device.load_torch(device)
    xp, sync, arrays = devices.array_module(device), bench_device.synchronizer(device), input_arrays(args.size)
    print(f"benchmarks/ops.py: {device}, {args.size}x{args.size} float32, microseconds per call, best of "
          f"{args.repeat} runs of >= {args.min_time * 1e3:g} ms; {xp.__name__} {xp.__version__}; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    if torch is None:
        print(f"no torch columns: {torch_device}")
    else:
        if torch_device.type == "cpu":
            torch.set_num_threads(args.torch_threads)
        print(f"torch {torch.__version__} on {torch_device} ({torch.get_num_threads()} threads)")
    print()
    rows = []
    with devices.use(device):
        ours_s = SimpleNamespace(**{k: tg.tensor(v, device=device, requires_grad=k in FLOAT_INPUTS)
                                    for k, v in arrays.items()})
        raw_s = SimpleNamespace(xp=xp, **{k: xp.asarray(v) for k, v in arrays.items()})
        torch_s = torch and SimpleNamespace(lib=torch, F=torch.nn.functional, **{
            k: torch.tensor(v, device=torch_device, requires_grad=k in FLOAT_INPUTS) for k, v in arrays.items()})
        for name, ours_op, raw_op, torch_op in cases:
            raw = best_us(lambda: raw_op(raw_s), sync, args.repeat, args.min_time)
            try:
                ours = measure_ours(ours_op, ours_s, sync, args.repeat, args.min_time)
            except Exception as e:          # an engine bug on one op should not hide the rest of the table
                ours = f"{type(e).__name__}: {e}"
            theirs = torch and measure_torch(torch_op, torch_s, torch, torch_sync, args.repeat, args.min_time)
            rows.append((name, raw, ours, theirs))
    print_table(rows, torch is not None)
    print_summary(rows)
    return 1 if any(isinstance(ours, str) for _, _, ours, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
