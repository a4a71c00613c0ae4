"""Time a GPT training step: our engine beside PyTorch eager and a hand-written NumPy GPT.

    python benchmarks/step.py                          # the CPU recipe on the CPU, all of them
    python benchmarks/step.py --config all             # and nanoGPT's GPU config (slow on a CPU)
    python benchmarks/step.py --device cuda --config gpu
    python benchmarks/step.py --only ours --profile    # plus cProfile's top 25 of our step
    python benchmarks/step.py --n-layer 1 --n-embd 32 --block-size 16 --batch-size 2 --steps 2   # tiny

A step is what training does: forward, cross-entropy, backward, clip_grad_norm_(1.0), AdamW
(lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on 2-D parameters), on one fixed random batch.
Our engine runs as "ours" (the cpu device's default path for its fused ops: numba's compiled
kernels when numba is installed, else NumPy's fast versions; its products MKL's where the `mkl` extra is
installed, else NumPy's BLAS) and, on the CPU, as "ours-numpy" and "ours-reference" (the other paths,
forced by TINYGRAD_GPU_CPU_KERNELS) and "ours-numpy-blas" (NumPy's BLAS where MKL is installed, forced by
TINYGRAD_GPU_CPU_BLAS). All start from the same
weights (our GPT built with --seed, handed over as a safetensors file written by tg.save). Each
runs in its own process, so that its peak memory is its own and one cannot warm the other's
caches: peak RSS on the CPU, the allocator's peak device memory on CUDA. Before timing, the NumPy
worker checks its loss and every gradient against our engine's on the same batch and stops with
an error if they differ by more than 1e-4 (relative to each tensor's largest magnitude). The
table shows the median step time with the 10th and 90th percentiles, tokens per second, peak
memory, minor page faults per step (on the CPU), the loss at the first and the last step (they
should agree), and the ratios of each of ours to numpy and torch (above 1: ours is slower or
bigger). On the CPU they take turns, three rounds by default (--rounds), and each row pools its
rounds' steps: a machine's speed drifts by several percent within a minute, and turns spread the
drift evenly.

Timings are wall-clock: other processes on the machine make them noisy (the load average
is printed), so compare only figures from one run. PyTorch is optional: without it its row
says "skipped: torch not importable". The NumPy model runs on the CPU only.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))      # run from a checkout without installing
sys.path.append(str(HERE))                # numpy_gpt, torch_gpt (last: shadows nothing)

CONFIGS = {
    "cpu": dict(label="CPU recipe", n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12, vocab_size=65),
    "gpu": dict(label="nanoGPT shakespeare_char GPU config", n_layer=6, n_head=6, n_embd=384, block_size=256,
                batch_size=64, vocab_size=65),
}
IMPLEMENTATIONS = ("ours", "ours-numpy", "ours-reference", "ours-numpy-blas", "torch", "numpy")
# ours on the cpu runs its fused ops one of three ways (kernels/cpu_paths.py): "ours" takes the default
# (numba's compiled kernels when numba is installed, else NumPy's fast versions), the others force one.
# Its products are MKL's where the `mkl` extra is installed (kernels/mkl_products.py); "ours-numpy-blas" is
# ours with NumPy's BLAS instead (skipped where MKL is absent: then that is "ours" itself).
SETTINGS_OF = {"ours-numpy": {"TINYGRAD_GPU_CPU_KERNELS": "numpy"},
               "ours-reference": {"TINYGRAD_GPU_CPU_KERNELS": "reference"},
               "ours-numpy-blas": {"TINYGRAD_GPU_CPU_BLAS": "numpy"}}
LR, BETAS, WEIGHT_DECAY, MAX_NORM = 1e-3, (0.9, 0.99), 0.1, 1.0
GRAD_TOL = 1e-4
MODEL_KEYS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")


# ============================================================================= measuring, in a worker
def host_memory_mb(field: str = "VmHWM") -> float:
    """Peak (VmHWM) or current (VmRSS) resident memory of this process, in MB. Not ru_maxrss on Linux:
    the kernel carries ru_maxrss over an exec, so a worker would report the parent's peak when that
    is higher (and subprocess starts workers by vfork + exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2 ** 20 if sys.platform == "darwin" else peak / 1024      # bytes on macOS, KB elsewhere


def timed_steps(step, sync, loss_value, warmup: int, steps: int) -> dict:
    """Run warmup + steps training steps; time each of the last `steps` from start to finished work."""
    times, losses, faults = [], [], 0
    for i in range(warmup + steps):
        if i == warmup:
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        loss = step()
        sync()                          # a GPU works asynchronously: wait for it before reading the clock
        elapsed = time.perf_counter() - start
        losses.append(loss_value(loss))
        if i >= warmup:
            times.append(elapsed * 1e3)
        if elapsed > 2.0:               # slow configurations: show that something happens
            print(f"step {i + 1}/{warmup + steps}{' (warm-up)' if i < warmup else ''}: {elapsed:.1f} s", flush=True)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / max(steps, 1)
    return dict(times_ms=times, loss_first=losses[0], loss_last=losses[-1], faults_per_step=faults)


def load_setup(path: str) -> dict:
    import tinygrad_gpu as tg
    setup = tg.load(path)
    setup["weights"] = {name: t.numpy() for name, t in setup["weights"].items()}
    setup["x"], setup["y"] = setup["x"].numpy(), setup["y"].numpy()
    return setup


def worker_ours(args, setup) -> dict:
    import tinygrad_gpu as tg
    from tinygrad_gpu.nn import GPT, GPTConfig
    from tinygrad_gpu.optim import clip_grad_norm_
    from tinygrad_gpu.train import optimizer_params
    base_mb = host_memory_mb("VmRSS")
    cfg = setup["config"]
    tg.set_default_device("cpu")          # built and loaded here, then moved: no random init on a GPU
    model = GPT(GPTConfig(**{k: cfg[k] for k in MODEL_KEYS}, dropout=0.0, bias=False))
    model.load_state_dict({k: tg.tensor(v) for k, v in setup["weights"].items()})
    model.to(args.device)
    x, y = tg.tensor(setup["x"], device=args.device), tg.tensor(setup["y"], device=args.device)
    del setup
    optimizer = model.configure_optimizers(WEIGHT_DECAY, LR, BETAS)
    params = optimizer_params(optimizer)
    pool = used = None
    if args.device.startswith("cuda"):
        import cupy
        pool, used = cupy.get_default_memory_pool(), [0]

    def step():
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        if pool is not None:            # CuPy's pool keeps no peak: sample it where activations peak
            used[0] = max(used[0], pool.used_bytes())
        loss.backward()
        clip_grad_norm_(params, MAX_NORM)
        optimizer.step()
        return loss

    sync = (lambda: cupy.cuda.runtime.deviceSynchronize()) if pool is not None else (lambda: None)
    result = timed_steps(step, sync, lambda loss: loss.item(), args.warmup, args.steps)
    if pool is not None:
        # the pool returns nothing to the driver, so what it holds now is the most it ever held
        result.update(peak_mb=pool.total_bytes() / 2 ** 20,
                      note=f"CuPy pool held {pool.total_bytes() / 2 ** 20:.1f} MB; in use after forward "
                           f"{used[0] / 2 ** 20:.1f} MB")
    else:
        from tinygrad_gpu.kernels import cpu_paths, mkl_products
        blas = "MKL" if mkl_products.library() is not None else "NumPy's BLAS"
        result.update(peak_mb=host_memory_mb(), base_mb=base_mb,
                      note=f"fused ops: the {cpu_paths.cpu_path()} path; products: {blas}")
    if args.profile:
        count = max(1, min(5, args.steps))
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(count):
            step()
            sync()
        profile.disable()
        print(f"cProfile over {count} more step(s) of ours, top 25 by tottime:")
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(25)
        print_op_times(step, sync, max(3, min(20, args.steps)))
    return result


def print_op_times(step, sync, steps: int) -> None:
    """Milliseconds per step inside each op's forward and backward (every Function's methods wrapped
    with a clock, then restored), largest first; what is left of the step is the engine's Python."""
    from tinygrad_gpu.tensor import Function
    totals, originals = {}, []

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    def clocked(method, key):
        def run(*args, **options):
            start = time.perf_counter()
            try:
                return method(*args, **options)
            finally:
                totals[key] = totals.get(key, 0.0) + time.perf_counter() - start
        return run
    for cls in set(subclasses(Function)):
        for name in ("forward", "backward"):
            if name in cls.__dict__:
                originals.append((cls, name, cls.__dict__[name]))
                setattr(cls, name, clocked(cls.__dict__[name], f"{cls.__name__}.{name}"))
    try:
        start = time.perf_counter()
        for _ in range(steps):
            step()
            sync()
        total = (time.perf_counter() - start) * 1e3 / steps
    finally:
        for cls, name, method in originals:
            setattr(cls, name, method)
    print(f"time inside each op over {steps} more steps of ours (ms per step; a backward that calls ops "
          f"counts their time too), step {total:.1f} ms:")
    for key, seconds in sorted(totals.items(), key=lambda item: -item[1])[:20]:
        print(f"  {seconds * 1e3 / steps:7.2f}  {key}")


def worker_torch(args, setup) -> dict:
    try:
        import torch
    except ImportError:
        return dict(skipped="torch not importable")
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        return dict(skipped="torch sees no CUDA device")
    from torch_gpt import TorchGPT
    if args.threads:
        torch.set_num_threads(args.threads)
    base_mb = host_memory_mb("VmRSS")
    cfg = setup["config"]
    model = TorchGPT(types.SimpleNamespace(**{k: cfg[k] for k in MODEL_KEYS}, bias=False))
    model.load_state_dict({k: torch.from_numpy(v) for k, v in setup["weights"].items()}, strict=True)
    model.to(args.device)
    x, y = (torch.from_numpy(setup[k]).to(args.device) for k in ("x", "y"))
    del setup
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    optimizer = model.configure_optimizers(WEIGHT_DECAY, LR, BETAS)

    def step():
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        return loss

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    result = timed_steps(step, sync, lambda loss: loss.item(), args.warmup, args.steps)
    if cuda:
        result.update(peak_mb=torch.cuda.max_memory_reserved() / 2 ** 20,
                      note=f"torch reserved {torch.cuda.max_memory_reserved() / 2 ** 20:.1f} MB at most, allocated "
                           f"{torch.cuda.max_memory_allocated() / 2 ** 20:.1f} MB at most")
    else:
        result.update(peak_mb=host_memory_mb(), base_mb=base_mb, note=f"torch {torch.__version__}, "
                      f"{torch.get_num_threads()} threads")
    return result


def check_gradients(loss, grads: dict, ref_loss, ref_grads: dict, tol: float = GRAD_TOL):
    """(ok, worst relative difference, one line saying so) for a loss and named gradients against
    our engine's; each difference is relative to the largest magnitude of the reference tensor."""
    def rel(a, b):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        return float(np.abs(a - b).max() / max(float(np.abs(b).max()), 1e-30))
    loss_rel = rel(loss, ref_loss)
    diffs = {name: rel(grads[name], ref) if name in grads else math.inf for name, ref in ref_grads.items()}
    worst_name = max(diffs, key=diffs.get)
    worst = max(loss_rel, diffs[worst_name])
    bad = [name for name, d in diffs.items() if not d <= tol] + (["loss"] if not loss_rel <= tol else [])
    line = (f"gradient check against our engine: loss {loss:.6f} vs {ref_loss:.6f} (rel diff {loss_rel:.2e}), "
            f"{len(diffs)} gradients, worst max rel diff {diffs[worst_name]:.2e} ({worst_name}): "
            + ("ok" if not bad else f"FAILED (tolerance {tol:g}): {', '.join(bad)}"))
    return not bad, worst, line


def worker_numpy(args, setup) -> dict:
    import numpy_gpt
    import tinygrad_gpu as tg
    if not args.device == "cpu":
        return dict(skipped="the NumPy model runs on the CPU only")
    base_mb = host_memory_mb("VmRSS")
    model = numpy_gpt.NumpyGPT(setup["weights"], n_head=setup["config"]["n_head"])
    x, y = setup["x"], setup["y"]
    del setup
    reference = tg.load(args.reference)
    loss = model.forward(x, y)
    model.backward()
    ok, worst, line = check_gradients(loss, model.grads, reference["loss"],
                                      {name: t.numpy() for name, t in reference["grads"].items()})
    del reference
    print(line, flush=True)
    if not ok:
        return dict(failed="its gradients differ from our engine's (the check above); nothing timed")
    optimizer = numpy_gpt.AdamW(model, lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)

    def step():
        loss = model.forward(x, y)
        model.backward()                 # overwrites every gradient: no zero_grad needed
        numpy_gpt.clip_grad_norm_(model.unique_grads(), MAX_NORM)
        optimizer.step()
        return loss

    result = timed_steps(step, lambda: None, float, args.warmup, args.steps)
    result.update(peak_mb=host_memory_mb(), base_mb=base_mb, grad_check_worst_rel=worst)
    return result


WORKERS = {**{name: worker_ours for name in ("ours", *SETTINGS_OF)}, "torch": worker_torch, "numpy": worker_numpy}


def worker_main(args) -> int:
    # "base MB" in the table: resident memory after the worker's imports and the setup file are in,
    # before its model exists (torch's own libraries are most of torch's)
    result = WORKERS[args.worker](args, load_setup(args.setup))
    print("RESULT " + json.dumps(result), flush=True)
    return 1 if "failed" in result else 0


# ============================================================================= driving the workers
def prepare(cfg: dict, seed: int, folder: str, need_reference: bool):
    """Write the initial weights and the batch (and, for the NumPy check, our loss and gradients on
    them); return (setup path, reference path or None, parameter count)."""
    import tinygrad_gpu as tg
    from tinygrad_gpu.nn import GPT, GPTConfig
    tg.manual_seed(seed)
    # on the CPU whatever the default device: cpu and cuda draw different random streams, and the
    # reference gradients are the CPU path's
    previous = tg.default_device()
    tg.set_default_device("cpu")
    try:
        model = GPT(GPTConfig(**{k: cfg[k] for k in MODEL_KEYS}, dropout=0.0, bias=False))
    finally:
        tg.set_default_device(previous)
    rng = np.random.default_rng(seed)
    shape = (cfg["batch_size"], cfg["block_size"])
    x, y = rng.integers(0, cfg["vocab_size"], shape), rng.integers(0, cfg["vocab_size"], shape)
    setup_path = os.path.join(folder, "setup.safetensors")
    tg.save({"config": {k: cfg[k] for k in MODEL_KEYS + ("batch_size",)}, "weights": model.state_dict(),
             "x": x, "y": y}, setup_path)
    reference_path = None
    if need_reference:
        print("computing our engine's loss and gradients on the batch, for the NumPy model's check", flush=True)
        _, loss = model(tg.tensor(x, device="cpu"), tg.tensor(y, device="cpu"))
        loss.backward()
        reference_path = os.path.join(folder, "reference.safetensors")
        tg.save({"loss": loss.item(),
                 "grads": {name: p.grad for name, p in model.named_parameters(remove_duplicate=False)}},
                reference_path)
    return setup_path, reference_path, model.num_parameters()


def run_worker(name: str, argv: list, env: dict) -> dict:
    """Run one implementation in a fresh interpreter; relay its output; return its result."""
    if name in SETTINGS_OF:
        from tinygrad_gpu.kernels import mkl_products
        if "cpu" not in argv[argv.index("--device") + 1]:
            return dict(name=name, skipped="a CPU path: the cpu device only")
        if name == "ours-numpy-blas" and mkl_products.library_path() is None:
            return dict(name=name, skipped="MKL is not installed: ours multiplies with NumPy's BLAS already")
        env = dict(env, **SETTINGS_OF[name])
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", name] + argv
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    result = None
    for line in process.stdout:
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
        else:
            print(f"  [{name}] {line}", end="", flush=True)
    status = process.wait()
    if result is None or (status != 0 and "failed" not in result):
        return dict(name=name, failed=f"worker exited with status {status}")
    return dict(result, name=name)


def pool_rounds(results: list) -> dict:
    """One implementation's rounds as one row: every timed step together, the highest peak, and each
    round's median (for the per-round ratios). A round that failed or was skipped stands for all."""
    for result in results:
        if "times_ms" not in result:
            return result
    row = dict(results[0])
    row.update(times_ms=[t for r in results for t in r["times_ms"]], peak_mb=max(r["peak_mb"] for r in results),
               faults_per_step=float(np.mean([r["faults_per_step"] for r in results])),
               round_ms=[float(np.median(r["times_ms"])) for r in results])
    return row


def summarise(row: dict, tokens_per_step: int) -> dict:
    if "times_ms" in row:
        times = np.asarray(row["times_ms"])
        row.update(median_ms=float(np.median(times)), p10_ms=float(np.percentile(times, 10)),
                   p90_ms=float(np.percentile(times, 90)))
        row["tokens_per_s"] = tokens_per_step / (row["median_ms"] / 1e3)
    return row


def print_table(rows: list) -> None:
    head = (f"{'implementation':<16}{'ms/step':>10}{'p10':>9}{'p90':>9}{'tokens/s':>10}{'peak MB':>9}"
            f"{'base MB':>9}{'faults/step':>12}   loss first -> last")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "median_ms" not in r:
            print(f"{r['name']:<16}" + (f"skipped: {r['skipped']}" if "skipped" in r else f"FAILED: {r['failed']}"))
            continue
        base = f"{r['base_mb']:9.1f}" if "base_mb" in r else f"{'-':>9}"
        faults = f"{r['faults_per_step']:12,.0f}" if "base_mb" in r else f"{'-':>12}"
        print(f"{r['name']:<16}{r['median_ms']:10.1f}{r['p10_ms']:9.1f}{r['p90_ms']:9.1f}{r['tokens_per_s']:10,.0f}"
              f"{r['peak_mb']:9.1f}{base}{faults}   {r['loss_first']:.4f} -> {r['loss_last']:.4f}")
    for r in rows:
        if r.get("note"):
            print(f"  {r['name']}: {r['note']}")
    timed = {r["name"]: r for r in rows if "median_ms" in r}
    ratios = []
    for ours in (name for name in timed if name.startswith("ours")):
        for other in ("numpy", "torch"):
            if other in timed:
                ratios.append(f"time {ours}/{other} {timed[ours]['median_ms'] / timed[other]['median_ms']:.2f}x")
    if "ours" in timed and "torch" in timed:
        ours, torch = timed["ours"], timed["torch"]
        ratios.append(f"peak memory ours/torch {ours['peak_mb'] / torch['peak_mb']:.2f}x")
        if "base_mb" in ours and "base_mb" in torch:     # without the libraries' own memory
            above = (ours["peak_mb"] - ours["base_mb"]) / max(torch["peak_mb"] - torch["base_mb"], 1e-9)
            ratios.append(f"peak above base ours/torch {above:.2f}x")
    if ratios:
        print("ratios (above 1: ours is slower or bigger): " + ", ".join(ratios))
    if "ours" in timed and len(timed["ours"]["round_ms"]) > 1:
        ours_ms = timed["ours"]["round_ms"]
        by_round = [f"ours/{other} " + " ".join(f"{a / b:.2f}" for a, b in zip(ours_ms, timed[other]["round_ms"]))
                    for other in ("numpy", "torch") if other in timed]
        if by_round:
            print("time ratios round by round: " + "; ".join(by_round))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="\n\n".join(__doc__.split("\n\n")[:2]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    parser.add_argument("--config", default="cpu", choices=["cpu", "gpu", "all"])
    parser.add_argument("--steps", type=int, help="timed steps (default 30; 3 for the GPU config on a CPU)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (default 3 on the CPU, 5 on CUDA; "
                                                   "1 for the GPU config on a CPU)")
    parser.add_argument("--only", default=",".join(IMPLEMENTATIONS), help="comma-separated, of " +
                        ",".join(IMPLEMENTATIONS))
    parser.add_argument("--rounds", type=int,
                        help="run the implementations in turn this many times and pool their steps (default 3 "
                             "on the CPU, 1 for the GPU config on a CPU and on CUDA): a machine's speed drifts "
                             "by several percent within a minute, and taking turns gives each the same share")
    parser.add_argument("--profile", action="store_true", help="cProfile a few more steps of ours; top 25 by tottime")
    parser.add_argument("--seed", type=int, default=1337, help="for the initial weights and the batch")
    parser.add_argument("--threads", type=int, help="BLAS/OpenMP threads for every worker (and torch's)")
    parser.add_argument("--tuned-malloc", action="store_true",
                        help="workers run with glibc's mmap off and trimming rare (fewer page faults)")
    parser.add_argument("--json", help="also write the results to this file")
    for key in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "vocab_size"):
        parser.add_argument("--" + key.replace("_", "-"), type=int, help="override the configuration's value")
    parser.add_argument("--worker", choices=IMPLEMENTATIONS, help=argparse.SUPPRESS)
    parser.add_argument("--setup", help=argparse.SUPPRESS)
    parser.add_argument("--reference", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def worker_env(args) -> dict:
    env = dict(os.environ)
    if args.threads:
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
            env[name] = str(args.threads)
    if args.tuned_malloc:
        # large blocks from the heap instead of fresh mmaps, and the heap kept: the pages stay mapped
        env["GLIBC_TUNABLES"] = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296"
    return env


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker_main(args)
    from tinygrad_gpu import device as devices
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    if not names or any(n not in IMPLEMENTATIONS for n in names):
        print(f"error: --only takes a comma-separated subset of {','.join(IMPLEMENTATIONS)}", file=sys.stderr)
        return 2
    names = list(dict.fromkeys(names))
    if (args.steps is not None and args.steps < 1) or (args.warmup is not None and args.warmup < 0) \
            or (args.rounds is not None and args.rounds < 1):
        print("error: --steps and --rounds must be at least 1, and --warmup at least 0", file=sys.stderr)
        return 2
    try:
        device = devices.canonical(args.device)
    except (RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if device == "emu":
        print("error: the emulator is for correctness, not speed: use --device cpu or cuda", file=sys.stderr)
        return 2
    on_cpu = device == "cpu"
    failed, report = False, []
    for key in (["cpu", "gpu"] if args.config == "all" else [args.config]):
        cfg = dict(CONFIGS[key])
        overrides = {k: getattr(args, k) for k in cfg if getattr(args, k, None) is not None}
        cfg.update(overrides, label=cfg["label"] + (" with overrides" if overrides else ""))
        steps = args.steps or (3 if key == "gpu" and on_cpu else 30)
        warmup = args.warmup if args.warmup is not None else (5 if not on_cpu else 1 if key == "gpu" else 3)
        rounds = args.rounds or (3 if on_cpu and key == "cpu" else 1)
        load_before = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="tg-step-") as folder:
            setup, reference, n_params = prepare(cfg, args.seed, folder, "numpy" in names and on_cpu)
            print(f"\n{cfg['label']}: {cfg['n_layer']} layers, {cfg['n_head']} heads, n_embd {cfg['n_embd']}, "
                  f"block {cfg['block_size']}, batch {cfg['batch_size']}, vocab {cfg['vocab_size']}, no bias, "
                  f"dropout 0; {n_params / 1e6:.2f}M parameters; device {device}; {steps} timed steps after "
                  f"{warmup} warm-up" + (f", in {rounds} rounds taken in turn" if rounds > 1 else "")
                  + ("; tuned malloc" if args.tuned_malloc else ""), flush=True)
            argv_common = ["--setup", setup, "--device", device, "--steps", str(steps), "--warmup", str(warmup)]
            argv_common += ["--reference", reference] if reference else []
            argv_common += ["--threads", str(args.threads)] if args.threads else []
            runs = {name: [] for name in names}
            for round_index in range(rounds):
                for name in names:
                    extra = ["--profile"] if args.profile and name.startswith("ours") and round_index == 0 else []
                    runs[name].append(run_worker(name, argv_common + extra, worker_env(args)))
            rows = [summarise(pool_rounds(runs[name]), cfg["batch_size"] * cfg["block_size"]) for name in names]
        print()
        print_table(rows)
        load_after = os.getloadavg()[0]
        print(f"load average (1 min) {load_before:.2f} before, {load_after:.2f} after, on {os.cpu_count()} CPUs: "
              "other processes make these timings noisy; compare figures from one run only")
        failed |= any("failed" in r for r in rows)
        report.append(dict(config=key, device=device, settings=cfg, steps=steps, warmup=warmup, rounds=rounds,
                           parameters=n_params, load_before=load_before, load_after=load_after, rows=rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
