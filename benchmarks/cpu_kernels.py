"""Which library to compile our CPU kernels with: numba and numexpr beside NumPy and PyTorch, on GELU and layer norm.

    python benchmarks/cpu_kernels.py              # the CPU recipe's shapes and the GPU config's
    python benchmarks/cpu_kernels.py --small      # tiny shapes, few repeats (the test's)

Each candidate computes, in float32, what kernels/gelu.py's and kernels/layernorm.py's references define: GELU
(tanh) forward over the MLP's activation (rows, 4 C), and layer norm forward over (rows, C):

* numpy: kernels/fast_cpu.py, the cpu device's path without numba (one thread, in chunks that stay in cache);
* numba: one parallel loop over rows (prange) with the formula inside, as each .cu kernel has one block per
  row; "numba reordered" the same, with LLVM free to reassociate sums and fuse multiply-adds (numba's fastmath
  flags "reassoc" and "contract", not the whole of fastmath=True, which assumes there is no inf or nan): so a
  row's sum is vectorized;
* "numba rational tanh": GELU (reordered) with tanh(u) as u P(u^2) / Q(u^2) for |u| <= 9 (degrees 5 and 3, fit here
  by least squares; 1 beyond): only multiplications, additions and a division, which LLVM vectorizes;
* numexpr: the elementwise formula, on all cores; numexpr reduces on one thread, so the layer norm's row
  means are NumPy's;
* torch: PyTorch's eager ops, the speed to reach (if it is installed).

Every candidate is checked against the reference before it is timed (the largest difference is printed). The
table shows the median of --repeat calls and the ratio to numpy (below 1: faster than today's path); for
numba also the first call, which compiles. The last lines say how many threads numba and numexpr use, and
whether numba can vectorize tanh and exp here: with llvmlite's pip wheel it cannot (no SVML), so a tanh in a
loop runs one element at a time. A library that is not installed says so in its rows.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))      # run from a checkout without installing

from tinygrad_gpu.kernels import fast_cpu, gelu, layernorm  # noqa: E402

EPS = 1e-5
# (config, rows, C): the CPU recipe (batch 12 x block 64, 128 wide) and nanoGPT's GPU config (64 x 256, 384 wide)
SHAPES = [("recipe", 12 * 64, 128), ("gpu config", 64 * 256, 384)]
SMALL = [("small", 64, 16)]
REORDERED = {"reassoc", "contract"}     # numba's fastmath flags that let a sum be vectorized (see above)
TANH_LIMIT = 9.0                        # float32's tanh is 1 to the last bit from about 9 on


def _numba_kernels(fastmath):
    """GELU and layer norm forward as numba kernels: a parallel loop over rows, the .cu kernel's formula inside."""
    from numba import njit, prange
    k, c = np.float32(gelu.K), np.float32(gelu.C)
    half, one = np.float32(0.5), np.float32(1)

    @njit(parallel=True, fastmath=fastmath)
    def gelu_rows(x, out):
        for row in prange(x.shape[0]):
            for j in range(x.shape[1]):
                v = x[row, j]
                out[row, j] = half * v * (one + math.tanh(k * (v + c * v * v * v)))

    @njit(parallel=True, fastmath=fastmath)
    def layernorm_rows(x, weight, bias, eps, out):
        n = x.shape[1]
        for row in prange(x.shape[0]):
            total = np.float32(0)
            for j in range(n):
                total += x[row, j]
            mean = total / n
            spread = np.float32(0)
            for j in range(n):                      # the variance around the mean, as layernorm.cu computes it
                d = x[row, j] - mean
                spread += d * d
            rstd = one / math.sqrt(spread / n + eps)
            for j in range(n):
                out[row, j] = (x[row, j] - mean) * rstd * weight[j] + bias[j]

    p, q = (tuple(np.float32(a) for a in coefficients) for coefficients in rational_tanh())
    limit = np.float32(TANH_LIMIT)

    @njit(parallel=True, fastmath=fastmath)
    def gelu_rows_rational(x, out):
        for row in prange(x.shape[0]):
            for j in range(x.shape[1]):
                v = x[row, j]
                u = min(max(k * (v + c * v * v * v), -limit), limit)
                s = u * u
                top = u * (p[0] + s * (p[1] + s * (p[2] + s * (p[3] + s * (p[4] + s * p[5])))))
                tanh = min(max(top / (q[0] + s * (q[1] + s * (q[2] + s * q[3]))), -one), one)
                out[row, j] = half * v * (one + tanh)

    return gelu_rows, layernorm_rows, gelu_rows_rational


def rational_tanh(degrees=(5, 3)) -> tuple:
    """(P, Q) with Q[0] = 1: tanh(u) ~ u P(u^2) / Q(u^2) on (0, TANH_LIMIT], fit by least squares on the
    linearised error u P - tanh(u) Q, reweighted by 1 / (tanh(u) Q) a few times (each pass makes the
    linear problem's error closer to the relative error of the fraction)."""
    u = np.linspace(0, TANH_LIMIT, 20001)[1:]
    s, t = u * u, np.tanh(u)
    columns = np.concatenate([u[:, None] * s[:, None] ** np.arange(degrees[0] + 1),
                              -t[:, None] * s[:, None] ** np.arange(1, degrees[1] + 1)], axis=1)
    weight = 1 / t
    for _ in range(6):
        solution = np.linalg.lstsq(columns * weight[:, None], t * weight, rcond=None)[0]
        p, q = solution[:degrees[0] + 1], np.concatenate([[1.0], solution[degrees[0] + 1:]])
        weight = 1 / (t * np.abs(np.polyval(q[::-1], s)))
    return p, q


def candidates(x_gelu, x, weight, bias):
    """{(op, library): (call, or a reason it cannot run)} for one shape."""
    out_gelu, out = np.empty_like(x_gelu), np.empty_like(x)
    found = {("gelu", "numpy"): lambda: fast_cpu.gelu_forward(x_gelu, gelu.K, gelu.C),
             ("layer norm", "numpy"): lambda: fast_cpu.layernorm_forward(x, weight, bias, EPS)[0]}
    try:
        for fastmath, name in ((False, "numba"), (REORDERED, "numba reordered")):
            gelu_rows, layernorm_rows, gelu_rows_rational = _numba_kernels(fastmath)
            found["gelu", name] = lambda f=gelu_rows: (f(x_gelu, out_gelu), out_gelu)[1]
            found["layer norm", name] = lambda f=layernorm_rows: (f(x, weight, bias, np.float32(EPS), out), out)[1]
        found["gelu", "numba rational tanh"] = lambda: (gelu_rows_rational(x_gelu, out_gelu), out_gelu)[1]
    except ImportError:
        found["gelu", "numba"] = found["layer norm", "numba"] = "not installed"
    try:
        import numexpr
        constants = {"k": np.float32(gelu.K), "c": np.float32(gelu.C)}

        def layernorm_numexpr():
            centered = numexpr.evaluate("x - m", {"x": x, "m": x.mean(1, keepdims=True)})
            rstd = 1 / np.sqrt(numexpr.evaluate("d * d", {"d": centered}).mean(1, keepdims=True) + np.float32(EPS))
            return numexpr.evaluate("d * r * w + b", {"d": centered, "r": rstd, "w": weight, "b": bias}, out=out)
        found["gelu", "numexpr"] = lambda: numexpr.evaluate("0.5 * x * (1 + tanh(k * (x + c * x * x * x)))",
                                                            {"x": x_gelu, **constants}, out=out_gelu)
        found["layer norm", "numexpr"] = layernorm_numexpr
    except ImportError:
        found["gelu", "numexpr"] = found["layer norm", "numexpr"] = "not installed"
    try:
        import torch
        tx, tx_gelu, tw, tb = (torch.from_numpy(a) for a in (x, x_gelu, weight, bias))
        found["gelu", "torch"] = lambda: torch.nn.functional.gelu(tx_gelu, approximate="tanh").numpy()
        found["layer norm", "torch"] = lambda: torch.nn.functional.layer_norm(tx, (x.shape[1],), tw, tb, EPS).numpy()
    except ImportError:
        found["gelu", "torch"] = found["layer norm", "torch"] = "not installed"
    return found


def timed(call, repeat: int) -> tuple:
    """(seconds of the first call, median seconds of `repeat` more, the first call's result)."""
    start = time.perf_counter()
    result = call()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times), result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="tiny shapes (a test of the script)")
    parser.add_argument("--repeat", type=int, default=None, help="timed calls per row (default 20, 2 with --small)")
    args = parser.parse_args(argv)
    repeat = args.repeat or (2 if args.small else 20)
    rng = np.random.default_rng(0)
    print(f"{'shape':<36} {'library':<20} {'median ms':>10} {'vs numpy':>9} {'first call ms':>14} {'max |diff|':>11}")
    for config, rows, width in SMALL if args.small else SHAPES:
        x_gelu = rng.standard_normal((rows, 4 * width)).astype(np.float32)
        x = (rng.standard_normal((rows, width)) * 2 + 5).astype(np.float32)
        weight, bias = rng.standard_normal(width).astype(np.float32), rng.standard_normal(width).astype(np.float32)
        want = {"gelu": gelu.reference_forward(x_gelu), "layer norm": layernorm.reference_forward(x, weight, bias, EPS)[0]}
        found = candidates(x_gelu, x, weight, bias)
        for op in ("gelu", "layer norm"):
            shape = f"{config} {op} ({rows}, {x_gelu.shape[1] if op == 'gelu' else width})"
            base = None
            for library in ("numpy", "numba", "numba reordered", "numba rational tanh", "numexpr", "torch"):
                call = found.get((op, library))
                if call is None:
                    continue
                if isinstance(call, str):
                    print(f"{shape:<36} {library:<20} {call:>10}")
                    continue
                first, median, result = timed(call, repeat)
                base = median if library == "numpy" else base
                difference = float(np.abs(np.asarray(result, np.float64) - want[op]).max())
                print(f"{shape:<36} {library:<20} {median * 1e3:>10.3f} {median / base:>8.2f}x "
                      f"{first * 1e3:>14.1f} {difference:>11.2e}")
    try:
        import numba
        print(f"numba {numba.__version__}: {numba.config.NUMBA_NUM_THREADS} threads; vectorized tanh and exp (SVML): "
              f"{'yes' if numba.config.USING_SVML else 'no'}")
    except ImportError:
        print("numba: not installed")
    try:
        import numexpr
        print(f"numexpr {numexpr.__version__}: {numexpr.get_num_threads()} threads")
    except ImportError:
        print("numexpr: not installed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
