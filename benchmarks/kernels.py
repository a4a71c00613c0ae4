"""Time each fused kernel against the plain CuPy composition it replaces.

    python benchmarks/kernels.py                   # on a machine with an NVIDIA GPU and CuPy
    python benchmarks/kernels.py --device emu --small --repeat 1    # the same table on the emulator

The composition is the kernel's NumPy reference run on CuPy arrays: the sequence of array
operations (max, subtract, exp, sum, ...) that the one kernel replaces. Some rows compare with the plain
version that stays beside a kernel instead: the tiled causal attention against the array library's
products and our causal softmax (the scores in memory; on a GPU the faster of the two is the one to keep),
AdamW over all of a GPT's parameters in one launch against one launch per parameter, and ("layernorm fwd vs
naive") layer norm's forward, one block per row, against the first rung of its ladder in layernorm.cu, one
thread per row (the "composed" columns are then the naive kernel's, and the speed-up is naive / block).
Both get the same inputs at the sizes of a small GPT training step; the table shows the median time and the
achieved memory bandwidth, counting the bytes a perfect implementation must move (every
input read once, every output written once; the composition's temporaries cost it extra,
which is the point of fusing).  These kernels are memory-bound: compare the GB/s with the
GPU's peak (about 2,000 GB/s for an A100, 3,350 for an H100, 4,800 for an H200).  The
kernels with 16-bit entry points get a second row in bfloat16 ("bf16"), whose composition
computes in float32 as the reference does, and whose data is half the bytes.
Without a GPU the script says so and exits with status 0.
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

from tinygrad_gpu import device as devices  # noqa: E402
from tinygrad_gpu import dtypes  # noqa: E402
from tinygrad_gpu.kernels import (adamw, causal_attention, causal_softmax, cross_entropy,  # noqa: E402
                                  embedding_backward, gelu, layernorm, multi_tensor)
from tinygrad_gpu.ops.linalg import product  # noqa: E402


# The kernels with 16-bit entry points run in float32 and in bfloat16: (dtype, row name's tag, bytes per data
# element). Per-row statistics (lse, mean, rstd) and the losses stay float32 in both.
PRECISIONS = ((np.float32, "", 4), (dtypes.bfloat16, " bf16", 2))


def cases(xp, device, small):
    """(name, shape, bytes moved, our kernel, the composition) for each kernel, at GPT-like sizes."""
    rng = np.random.default_rng(0)

    def normal(*shape, scale=1.0, dtype=np.float32):
        return xp.asarray((scale * rng.standard_normal(shape)).astype(np.float32).astype(dtype))
    rows = 64 if small else 64 * 256                    # batch x block of nanoGPT's shakespeare_char
    out = []
    for vocab in ([65, 257] if small else [65, 50257]):
        n = rows if vocab < 1000 else rows // 4         # 4,096 rows of GPT-2's vocabulary: 0.8 GB of float32 logits
        for dtype, tag, e in PRECISIONS:
            x, t, g = normal(n, vocab, scale=3.0, dtype=dtype), xp.asarray(rng.integers(0, vocab, n)), normal(n)
            _, lse = cross_entropy.forward(x, t, -100, 0.1, device)
            out += [("cross_entropy fwd" + tag, (n, vocab), e * n * vocab + 16 * n,
                     lambda x=x, t=t: cross_entropy.forward(x, t, -100, 0.1, device),
                     lambda x=x, t=t: cross_entropy.reference_forward(x, t, -100, 0.1)),
                    ("cross_entropy bwd" + tag, (n, vocab), 2 * e * n * vocab + 16 * n,
                     lambda x=x, t=t, lse=lse, g=g: cross_entropy.backward(x, t, lse, g, -100, 0.1, device),
                     lambda x=x, t=t, lse=lse, g=g: cross_entropy.reference_backward(x, t, lse, g, -100, 0.1))]
    for width in ([48, 130] if small else [384, 768]):
        for dtype, tag, e in PRECISIONS:
            x, w, b, dy = (normal(*shape, dtype=dtype) for shape in ((rows, width), (width,), (width,), (rows, width)))
            _, mean, rstd = layernorm.forward(x, w, b, 1e-5, device)
            out += [("layernorm fwd" + tag, (rows, width), 2 * e * rows * width + 8 * rows,
                     lambda x=x, w=w, b=b: layernorm.forward(x, w, b, 1e-5, device),
                     lambda x=x, w=w, b=b: layernorm.reference_forward(x, w, b, 1e-5)),
                    ("layernorm bwd" + tag, (rows, width), 4 * e * rows * width + 8 * rows,
                     lambda x=x, w=w, m=mean, r=rstd, dy=dy: layernorm.backward(x, w, m, r, dy, True, device),
                     lambda x=x, w=w, m=mean, r=rstd, dy=dy: layernorm.reference_backward(x, w, m, r, dy, True))]
    n = rows * (4 * 48 if small else 4 * 384)           # the MLP's hidden activations
    for dtype, tag, e in PRECISIONS:
        x, dy = normal(n, scale=2.0, dtype=dtype), normal(n, dtype=dtype)
        out += [("gelu fwd" + tag, (n,), 2 * e * n,
                 lambda x=x: gelu.forward(x, device), lambda x=x: gelu.reference_forward(x)),
                ("gelu bwd" + tag, (n,), 3 * e * n,
                 lambda x=x, dy=dy: gelu.backward(x, dy, device), lambda x=x, dy=dy: gelu.reference_backward(x, dy))]
    n = 100_000 if small else 10_650_000                # shakespeare_char's GPT
    p, grad, m, v = normal(n), normal(n), normal(n) * 0, normal(n) * 0
    p2, m2, v2 = p.copy(), m.copy(), v.copy()
    scalars = adamw.step_scalars(1e-3, 0.9, 0.99, 0.1, 10, True)
    out += [("adamw", (n,), 28 * n,
             lambda: adamw.adamw_update(p, grad, m, v, 1e-3, 0.9, 0.99, 1e-8, 0.1, 10, device),
             lambda: adamw.reference_update(p2, grad, m2, v2, scalars["step_size"], 0.9, 0.99,
                                            scalars["bias_correction2_sqrt"], 1e-8, scalars["decay"], scalars["l2"]))]
    for vocab, dim in ([(65, 48)] if small else [(65, 384), (50257, 768)]):
        ids, dout = xp.asarray(rng.integers(0, vocab, rows)), normal(rows, dim)
        out += [(f"embedding bwd (vocab {vocab})", (rows, dim), 8 * rows * dim + 8 * rows + 4 * vocab * dim,
                 lambda ids=ids, d=dout, n=vocab: embedding_backward.embedding_backward(ids, d, n, device),
                 lambda ids=ids, d=dout, n=vocab: embedding_backward.reference_embedding_backward(ids, d, n))]
    shape = (2, 2, 33, 33) if small else (64, 6, 256, 256)
    for dtype, tag, e in PRECISIONS:
        s, dp = normal(*shape, dtype=dtype), normal(*shape, dtype=dtype)
        probs = causal_softmax.forward(s, 0.125, device)
        out += [("causal softmax fwd" + tag, shape, 2 * e * math.prod(shape),
                 lambda s=s: causal_softmax.forward(s, 0.125, device),
                 lambda s=s: causal_softmax.reference_forward(s, 0.125)),
                ("causal softmax bwd" + tag, shape, 3 * e * math.prod(shape),
                 lambda p=probs, dp=dp: causal_softmax.backward(p, dp, 0.125, device),
                 lambda p=probs, dp=dp: causal_softmax.reference_backward(p, dp, 0.125))]
    out += ladder_cases(normal, device, small)
    out += attention_cases(normal, device, small)
    out += multi_tensor_cases(normal, device, small)
    return out


def ladder_cases(normal, device, small):
    """Layer norm's forward, the block kernel every caller runs (one block per row, block reductions) against the
    ladder's first rung (one thread per row, plain loops: layernorm.cu says why it is slow), the same inputs and
    the same bytes."""
    rows = 64 if small else 64 * 256
    out = []
    for width in ([48, 130] if small else [384, 768]):
        for dtype, tag, e in PRECISIONS:
            x, w, b = (normal(*shape, dtype=dtype) for shape in ((rows, width), (width,), (width,)))
            out += [("layernorm fwd vs naive" + tag, (rows, width), 2 * e * rows * width + 8 * rows,
                     lambda x=x, w=w, b=b: layernorm.forward(x, w, b, 1e-5, device, version="block"),
                     lambda x=x, w=w, b=b: layernorm.forward(x, w, b, 1e-5, device, version="naive"))]
    return out


def attention_cases(normal, device, small):
    """The tiled causal attention against the plain version it stands beside (the array library's products
    and our causal softmax kernel, with the T x T scores in memory): the issue's choice, made on a GPU."""
    B, H, T, E = (2, 2, 33, 16) if small else (64, 6, 256, 64)
    out = []
    for dtype, tag, e in PRECISIONS:
        q, k, v, dy = (normal(B, H, T, E, dtype=dtype) for _ in range(4))
        y, lse = causal_attention.forward(q, k, v, 0.125, device)
        probs = causal_softmax.forward(product(q, k.swapaxes(-1, -2)), 0.125, device)

        def plain_forward(q=q, k=k, v=v):
            return product(causal_softmax.forward(product(q, k.swapaxes(-1, -2)), 0.125, device), v)

        def plain_backward(q=q, k=k, v=v, dy=dy, probs=probs):
            ds = causal_softmax.backward(probs, product(dy, v.swapaxes(-1, -2)), 0.125, device)
            return product(ds, k), product(ds.swapaxes(-1, -2), q), product(probs.swapaxes(-1, -2), dy)
        qkv = 3 * e * B * H * T * E
        out += [("causal attention fwd" + tag, (B, H, T, E), qkv + e * B * H * T * E + 4 * B * H * T,
                 lambda q=q, k=k, v=v: causal_attention.forward(q, k, v, 0.125, device), plain_forward),
                ("causal attention bwd" + tag, (B, H, T, E), 2 * qkv + 2 * e * B * H * T * E + 4 * B * H * T,
                 lambda q=q, k=k, v=v, y=y, lse=lse, dy=dy: causal_attention.backward(q, k, v, y, lse, dy, 0.125,
                                                                                      device),
                 plain_backward)]
    return out


def multi_tensor_cases(normal, device, small):
    """AdamW over a GPT's 39 parameters in one launch against one launch per parameter (adamw.cu)."""
    C = 48 if small else 384
    shapes = [(65, C), (256, C)] + [(C,), (3 * C, C), (C, C), (C,), (4 * C, C), (C, 4 * C)] * 6 + [(C,)]
    params, grads = [normal(*s) for s in shapes], [normal(*s) for s in shapes]
    moments = [[normal(*s) * 0 for s in shapes] for _ in range(2)]
    n = sum(math.prod(s) for s in shapes)

    def per_tensor():
        for p, g, m, v in zip(params, grads, *moments):
            adamw.adamw_update(p, g, m, v, 1e-3, 0.9, 0.99, 1e-8, 0.1, 10, device)
    return [(f"adamw, {len(shapes)} tensors at once", (n,), 28 * n,
             lambda: multi_tensor.adamw_update(params, grads, *moments, 1e-3, 0.9, 0.99, 1e-8, 0.1, 10, device),
             per_tensor)]


def median_seconds(fn, device, repeat):
    if devices.is_cuda(device):
        from cupyx.profiler import benchmark
        result = benchmark(fn, n_repeat=repeat, n_warmup=3)
        return float(np.median(result.gpu_times))          # GPU time, measured with CUDA events
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or emu (the emulator: use --small)")
    parser.add_argument("--repeat", type=int, default=30, help="timed runs per kernel (median reported)")
    parser.add_argument("--small", action="store_true", help="small shapes (for the emulator or a quick look)")
    args = parser.parse_args(argv)
    try:
        device = devices.canonical(args.device)
    except RuntimeError as e:
        print(f"benchmarks/kernels.py needs an NVIDIA GPU: {e}\nNothing to time here; run it on a GPU machine "
              "(pip install -e '.[gpu]'), or try --device emu --small to see the table on the emulator.")
        return 0
    xp = devices.array_module(device)
    rows = []
    with devices.use(device):
        for name, shape, nbytes, ours, composition in cases(xp, device, args.small):
            ours_s = median_seconds(ours, device, args.repeat)
            composed_s = median_seconds(composition, device, args.repeat)
            rows.append((name, "x".join(map(str, shape)), ours_s, nbytes / ours_s / 1e9, composed_s,
                         nbytes / composed_s / 1e9, composed_s / ours_s))
    header = ("kernel", "shape", "ours ms", "GB/s", "composed ms", "GB/s", "speed-up")
    library = "CuPy" if devices.is_cuda(device) else "NumPy"
    print(f"{device}: each kernel vs the {library} composition it replaces (median of {args.repeat} runs)\n")
    print(f"{header[0]:<28} {header[1]:>15} {header[2]:>10} {header[3]:>8} {header[4]:>12} {header[5]:>8} "
          f"{header[6]:>9}")
    for name, shape, ours_s, ours_bw, composed_s, composed_bw, speedup in rows:
        print(f"{name:<28} {shape:>15} {ours_s * 1e3:>10.3f} {ours_bw:>8.1f} {composed_s * 1e3:>12.3f} "
              f"{composed_bw:>8.1f} {speedup:>8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
