"""examples/train_charlm.py under `mpiexec -n 2 python -m mpi4py`: data-parallel training end to end.

Two ranks with batch B must train as one process with batch 2B (DistributedDataParallel averages the
gradients, evaluation is shared), gradient accumulation must match the whole batch, the figures must
count every rank's tokens, --resume must continue a two-rank run bit for bit, mistakes must end every
rank with one-line errors, and a killed rank or a Ctrl-C must end the whole job.

The single-process references run in this process (train() on the same flags), which saves an
interpreter start per comparison. This process must never import mpi4py.MPI: the library would then
take it for a rank that mpiexec started (tinygrad_gpu.distributed.launched_by_mpiexec).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tinygrad_gpu as tg
from tinygrad_gpu.train import build_model, parse_args, train
from tinygrad_gpu.train.checkpointing import tokenizer_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "train_charlm.py")
# The venv's bin holds the mpich wheel's mpiexec even when the venv is not activated.
MPIEXEC = shutil.which("mpiexec") or shutil.which("mpiexec", path=os.path.dirname(sys.executable))


def _mpi4py_importable():
    try:
        import mpi4py  # noqa: F401  (the package only: mpi4py.MPI would start MPI in this process)
    except ImportError:
        return False
    return True


pytestmark = pytest.mark.skipif(MPIEXEC is None or not _mpi4py_importable(),
                                reason="needs mpiexec and mpi4py (the [dist] extra: pip install 'tinygrad_gpu[dist]')")

BLOCK = 16
# --device cpu: on a machine with a GPU the default would be cuda with nccl, one GPU per rank.
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", str(BLOCK), "--eval-iters", "2",
        "--num-samples", "0", "--warmup-iters", "5", "--lr", "3e-3", "--no-progress", "--device", "cpu"]
CURVE = ["--max-iters", "30", "--eval-interval", "10", *TINY]
TEXT = "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs! " * 60
# Two ranks add their halves of a batch in another order than one process adds the whole: the losses
# agree to ~1e-6. One process with half the batch (what a rank would train and measure without the
# averaging and the shared evaluation) lands 1e-2 or more away.
TOLERANCE = 1e-5
# The timing fields differ from run to run; everything else in a row is determined by the training.
TIMING = ("tokens_per_sec", "elapsed_s", "tflops_per_sec", "mfu")


# ----------------------------------------------------------------------------- helpers
def _env():
    env = {k: v for k, v in os.environ.items() if k != "TINYGRAD_GPU_DEVICE"}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")      # 2 ranks on 2 shared cores
    return env


def _command(ranks, args):
    return [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", SCRIPT, *args]


def _launch(args, ranks=2, timeout=120):
    """Run the program under mpiexec to its end; on a timeout, kill the whole job (its own session) and fail."""
    process = subprocess.Popen(_command(ranks, args), cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"the job was still running after {timeout} s\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _start(args, log):
    """Start a job in the background, its stdout and stderr in the file `log` (read while it runs)."""
    with open(log, "w") as out:
        return subprocess.Popen(_command(2, args), cwd=ROOT, env=_env(), stdout=out, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)


def _end(process):
    """Leave nothing of a background job behind, whatever the test found. (Hydra's proxy, in a session of
    its own, ends the ranks once mpiexec is gone.)"""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _wait_for(pattern, log, process, timeout=60):
    """The first match of `pattern` in the job's output, polled for up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(log) as f:
            found = re.search(pattern, f.read())
        if found:
            return found
        if process.poll() is not None:
            pytest.fail(f"the job ended (exit {process.returncode}) before printing {pattern!r}:\n{open(log).read()}")
        time.sleep(0.05)
    pytest.fail(f"no {pattern!r} after {timeout} s:\n{open(log).read()}")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _in_process(args):
    """One process training on `args` (train(), as the program would, without mpiexec)."""
    return train(parse_args(args), log=lambda *a, **k: None)


def _metrics(out_dir):
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _without_timing(rows):
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def _assert_same_curve(rows, reference):
    """The same evaluations and learning rates, and losses equal up to the rounding of the sums."""
    assert [r["iter"] for r in rows] == [r["iter"] for r in reference]
    assert [r["lr"] for r in rows] == [r["lr"] for r in reference]
    for row, expected in zip(rows, reference):
        for key in ("train_loss", "val_loss"):
            assert row[key] == pytest.approx(expected[key], abs=TOLERANCE), (row["iter"], key)


def _assert_one_error_line(result, message):
    """Exit code 2 and one line `error: ...` for the whole job: the ranks agree on the mistake (each finds it),
    rank 0 says it, all end together; no traceback, and nothing from MPI (no MPI_Abort was needed)."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert result.stdout == "", result.stdout       # the error comes before anything is printed


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(TEXT)
    return str(path)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory, corpus):
    """A 2-rank run with batch 8: (its folder, its stdout). The folder's parent holds nothing else."""
    out = str(tmp_path_factory.mktemp("two_ranks") / "out")
    result = _launch(["--data", corpus, "--out-dir", out, "--batch-size", "8", *CURVE])
    assert result.returncode == 0, result.stderr
    return out, result.stdout


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, corpus):
    """The same run in one process with batch 16: the folder of the reference curve."""
    out = str(tmp_path_factory.mktemp("one_process") / "out")
    _in_process(["--data", corpus, "--out-dir", out, "--batch-size", "16", *CURVE])
    return out


# ----------------------------------------------------------------------------- training as one process
def test_two_ranks_with_batch_b_train_as_one_process_with_batch_2b(two_ranks, one_process):
    out, stdout = two_ranks
    rows, reference = _metrics(out), _metrics(one_process)
    _assert_same_curve(rows, reference)
    assert [r["iter"] for r in rows] == [0, 10, 20, 30]
    assert {r["world_size"] for r in rows} == {2} and {r["world_size"] for r in reference} == {1}
    # Rank 0 alone writes: one metrics file (rank 1 wrote none, not even beside it), one voice on stdout.
    parent = os.path.dirname(out)
    written = [os.path.join(d, f) for d, _, files in os.walk(parent) for f in files]
    assert [f for f in written if "metrics" in os.path.basename(f)] == [os.path.join(out, "metrics.jsonl")]
    lines = stdout.splitlines()
    assert sum(line.startswith("final: ") for line in lines) == 1, stdout
    assert sum(line.startswith("2 processes over mpi: rank 0 pid ") for line in lines) == 1, stdout
    assert [line.split(":")[0] for line in lines if line.startswith("iter ")] == \
        ["iter 0", "iter 10", "iter 20", "iter 30"], stdout
    saved = tg.load(os.path.join(out, "ckpt.safetensors"))
    assert saved["world_size"] == 2 and saved["iter"] == 30
    streams = saved["rng"]["ranks"]                      # each rank's dropout stream, and they differ
    assert len(streams) == 2 and streams[0]["model"] != streams[1]["model"]
    assert streams[0]["model"] == saved["rng"]["model"]  # rank 0's is the one a single process would keep


def test_the_tolerance_tells_averaged_gradients_from_one_ranks_half(tmp_path, corpus, one_process):
    """Training and measuring on half the batch, as a rank would without averaging and shared evaluation,
    is what the bound must exclude."""
    out = str(tmp_path / "half")
    _in_process(["--data", corpus, "--out-dir", out, "--batch-size", "8", *CURVE])
    half, reference = _metrics(out), _metrics(one_process)
    assert max(abs(a["train_loss"] - b["train_loss"]) for a, b in zip(half, reference)) > 100 * TOLERANCE


def test_accumulating_two_micro_batches_of_b_is_one_batch_of_2b(tmp_path, corpus, one_process):
    out = str(tmp_path / "accumulated")
    _in_process(["--data", corpus, "--out-dir", out, "--batch-size", "8", "--gradient-accumulation-steps", "2",
                 *CURVE])
    _assert_same_curve(_metrics(out), _metrics(one_process))


def test_two_ranks_accumulating_four_micro_batches_of_b_are_one_batch_of_4b(tmp_path, corpus, one_process):
    out = str(tmp_path / "out")
    result = _launch(["--data", corpus, "--out-dir", out, "--batch-size", "4", "--gradient-accumulation-steps", "4",
                      *CURVE])
    assert result.returncode == 0, result.stderr
    assert "each step: 4 micro-batches of 4 windows (2 per process), 256 tokens" in result.stdout, result.stdout
    rows = _metrics(out)
    _assert_same_curve(rows, _metrics(one_process))
    assert [r["flops"] for r in rows] == [r["flops"] for r in _metrics(one_process)]


def _records(tmp_path):
    """Prompt/completion records whose completions differ in length, so that micro-batches count different numbers of
    targets (the loss is on the completions only)."""
    path = tmp_path / "records.jsonl"
    words = TEXT.split()
    path.write_text("".join(json.dumps({"prompt": f"{words[i]}:", "completion": " ".join(words[i:i + 1 + i % 3])})
                            + "\n" for i in range(60)))
    return str(path)


@pytest.mark.parametrize("how", ["two ranks", "accumulation"])
def test_records_counting_different_targets_per_micro_batch_train_as_one_batch(tmp_path, how):
    """Each micro-batch's loss weighs its counted targets over the step's (ranks.step_batches): two ranks, or two
    micro-batches in one process, take one process's step with the whole batch."""
    flags = ["--data", _records(tmp_path), *CURVE]
    _in_process([*flags, "--out-dir", str(tmp_path / "whole"), "--batch-size", "8"])
    if how == "two ranks":
        result = _launch([*flags, "--out-dir", str(tmp_path / "split"), "--batch-size", "4"])
        assert result.returncode == 0, result.stderr
    else:
        _in_process([*flags, "--out-dir", str(tmp_path / "split"), "--batch-size", "4",
                     "--gradient-accumulation-steps", "2"])
    _assert_same_curve(_metrics(str(tmp_path / "split")), _metrics(str(tmp_path / "whole")))


def test_the_figures_count_every_ranks_tokens(two_ranks, one_process):
    """flops = iter x tokens per step x FLOPs per token, where a step's tokens are all ranks' (2 x 8 x 16)."""
    out, stdout = two_ranks
    rows = _metrics(out)
    assert [r["flops"] for r in rows] == [r["flops"] for r in _metrics(one_process)]
    saved = tg.load(os.path.join(out, "ckpt.safetensors"))
    flops_per_token = build_model(saved["model_settings"], tokenizer_of(saved).vocab_size).flops_per_token()
    tokens_per_step = 2 * 8 * BLOCK
    assert [r["flops"] for r in rows] == [r["iter"] * tokens_per_step * flops_per_token for r in rows]
    # The speed is in the same tokens: TFLOP/s = tokens/s x FLOPs per token (both rounded in the row).
    for row in rows[1:]:
        assert row["tflops_per_sec"] == pytest.approx(row["tokens_per_sec"] * flops_per_token / 1e12, rel=1e-3)
    assert f"trained {30 * tokens_per_step / 1e3:.1f}k tokens" in stdout, stdout


# ----------------------------------------------------------------------------- resume
def test_a_resumed_two_rank_run_is_bitwise_the_uninterrupted_one(tmp_path, corpus):
    # Dropout draws from each rank's own stream, which the checkpoint must carry; the decay is fixed at
    # 30 so that the run stopped at 15 follows the same learning-rate schedule.
    common = ["--data", corpus, "--batch-size", "8", "--dropout", "0.1", "--lr-decay-iters", "30", *TINY,
              "--eval-interval", "5"]
    whole, parts = str(tmp_path / "whole"), str(tmp_path / "parts")
    assert _launch([*common, "--out-dir", whole, "--max-iters", "30"]).returncode == 0
    assert _launch([*common, "--out-dir", parts, "--max-iters", "15"]).returncode == 0
    resumed = _launch([*common, "--out-dir", parts, "--max-iters", "30", "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count("resuming from iteration 15 of 30") == 1, resumed.stdout
    a = tg.load(os.path.join(whole, "ckpt.safetensors"))
    b = tg.load(os.path.join(parts, "ckpt.safetensors"))
    assert a["iter"] == b["iter"] == 30 and a["model"].keys() == b["model"].keys()
    for name in a["model"]:
        np.testing.assert_array_equal(b["model"][name].numpy(), a["model"][name].numpy(), err_msg=name)
    assert _without_timing(_metrics(parts)) == _without_timing(_metrics(whole))


def test_zero_1_trains_as_ddp_does_and_resumes_bitwise(tmp_path, corpus, two_ranks):
    """--zero-stage 1: each rank keeps half of AdamW's state, and the run's curve is DDP's (the same losses up to the
    order of the gradients' sums); its checkpoint holds the whole state, and --resume under two ranks continues it
    bit for bit, with dropout and checkpointed blocks."""
    out = str(tmp_path / "zero")
    result = _launch(["--data", corpus, "--out-dir", out, "--batch-size", "8", "--zero-stage", "1", *CURVE])
    assert result.returncode == 0, result.stderr
    assert "AdamW's state sharded among them (ZeRO-1)" in result.stdout, result.stdout
    _assert_same_curve(_metrics(out), _metrics(two_ranks[0]))
    common = ["--data", corpus, "--batch-size", "8", "--dropout", "0.1", "--lr-decay-iters", "30", *TINY,
              "--eval-interval", "5", "--zero-stage", "1", "--gradient-checkpointing"]
    whole, parts = str(tmp_path / "whole"), str(tmp_path / "parts")
    assert _launch([*common, "--out-dir", whole, "--max-iters", "30"]).returncode == 0
    assert _launch([*common, "--out-dir", parts, "--max-iters", "15"]).returncode == 0
    saved = tg.load(os.path.join(parts, "ckpt.safetensors"))
    model_size = sum(t.numel() for t in saved["model"].values()) - saved["model"]["transformer.wte.weight"].numel()
    moments = sum(t.numel() for entry in saved["optimizer"]["state"].values() for t in entry.values()
                  if isinstance(t, tg.Tensor))
    assert moments == 2 * model_size            # consolidated: AdamW's two moments of every parameter (wte is tied)
    resumed = _launch([*common, "--out-dir", parts, "--max-iters", "30", "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    a = tg.load(os.path.join(whole, "ckpt.safetensors"))
    b = tg.load(os.path.join(parts, "ckpt.safetensors"))
    for name in a["model"]:
        np.testing.assert_array_equal(b["model"][name].numpy(), a["model"][name].numpy(), err_msg=name)
    assert _without_timing(_metrics(parts)) == _without_timing(_metrics(whole))
    refused = _launch(["--data", corpus, "--out-dir", str(tmp_path / "half"), "--zero-stage", "1", "--dtype",
                       "float16", *CURVE])
    _assert_one_error_line(refused, "--zero-stage 1 cannot run with float16's GradScaler")


# ----------------------------------------------------------------------------- one-line errors
def test_resuming_a_two_rank_run_in_one_process_is_refused(tmp_path, corpus, two_ranks):
    out = str(tmp_path / "copy")
    shutil.copytree(two_ranks[0], out)                  # the shared run stays as it was
    before = open(os.path.join(out, "ckpt.safetensors"), "rb").read()
    result = subprocess.run([sys.executable, SCRIPT, "--data", corpus, "--out-dir", out, "--resume",
                             "--max-iters", "40", "--no-progress", "--device", "cpu"],
                            cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "saved by 2 process(es) and this one has 1" in result.stderr and "mpiexec -n 2" in result.stderr
    assert open(os.path.join(out, "ckpt.safetensors"), "rb").read() == before


def test_resuming_a_one_process_run_on_two_ranks_is_refused(tmp_path, corpus, one_process):
    out = str(tmp_path / "copy")
    shutil.copytree(one_process, out)
    result = _launch(["--data", corpus, "--out-dir", out, "--resume", "--max-iters", "40", "--no-progress",
                      "--device", "cpu"])
    _assert_one_error_line(result, "saved by 1 process(es) and this one has 2")
    assert "one process, without mpiexec" in result.stderr
    assert [r["iter"] for r in _metrics(out)] == [0, 10, 20, 30]


def test_accumulation_steps_that_the_ranks_cannot_share_equally_are_refused(tmp_path, corpus):
    out = str(tmp_path / "out")
    result = _launch(["--data", corpus, "--out-dir", out, "--batch-size", "8", "--gradient-accumulation-steps", "3",
                      *CURVE])
    _assert_one_error_line(result, "--gradient-accumulation-steps 3 is not a multiple of the 2 processes")
    assert not os.path.exists(out)


@pytest.mark.skipif(tg.cuda_available(), reason="this machine has a GPU, which nccl can use")
def test_nccl_without_a_gpu_is_one_error_line_for_the_job(tmp_path, corpus):
    """Both ranks find it before their group exists, and agree over MPI's world before they part."""
    result = _launch(["--data", corpus, "--out-dir", str(tmp_path / "out"), "--backend", "nccl", *CURVE])
    _assert_one_error_line(result, "--backend nccl needs an NVIDIA GPU")


# ----------------------------------------------------------------------------- a killed rank, Ctrl-C
def test_killing_one_rank_ends_the_whole_job(tmp_path, corpus):
    log = str(tmp_path / "log.txt")
    process = _start(["--data", corpus, "--out-dir", str(tmp_path / "out"), "--batch-size", "8",
                      "--max-iters", "100000", "--eval-interval", "50", *TINY], log)
    rank0 = None
    try:
        found = _wait_for(r"rank 0 pid (\d+) on .*, rank 1 pid (\d+) on ", log, process)
        rank0, rank1 = int(found.group(1)), int(found.group(2))
        os.kill(rank1, signal.SIGKILL)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"mpiexec still running 30 s after rank 1 was killed:\n{open(log).read()}")
        assert process.returncode != 0
        # Rank 0, which would otherwise wait for rank 1 in its next collective forever, is gone too.
        deadline = time.monotonic() + 10
        while _alive(rank0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(rank0), "rank 0 outlived the job"
    finally:
        _end(process)
        if rank0 is not None and _alive(rank0):      # the failure above: leave no rank running
            os.kill(rank0, signal.SIGKILL)


@pytest.mark.parametrize("target", ["mpiexec", "rank 1"])
def test_ctrl_c_stops_every_rank_at_one_step_and_the_run_resumes_there(tmp_path, corpus, target):
    """Ctrl-C goes to mpiexec, which passes it on to every rank, each at its own moment; in the extreme
    case it reaches one rank only (SIGINT to rank 1's pid). Either way all ranks must stop at one step:
    one that stopped alone would wait in a collective for the others forever."""
    out, log = str(tmp_path / "out"), str(tmp_path / "log.txt")
    common = ["--data", corpus, "--out-dir", out, "--batch-size", "8", "--eval-interval", "10", *TINY]
    process = _start([*common, "--max-iters", "100000"], log)
    try:
        rank1 = int(_wait_for(r"rank 1 pid (\d+) on ", log, process).group(1))
        _wait_for(r"(?m)^iter 0: ", log, process)       # both ranks are in the loop, where Ctrl-C is a request
        if target == "mpiexec":
            process.send_signal(signal.SIGINT)
        else:
            os.kill(rank1, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job did not stop within 60 s of Ctrl-C:\n{open(log).read()}")
    finally:
        _end(process)
    output = open(log).read()
    assert process.returncode == 130, output            # every rank ends with Ctrl-C's code, and MPI says nothing
    assert "Abort" not in output and "BAD TERMINATION" not in output, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    stops = re.findall(r"interrupted: checkpoint saved at iteration (\d+); continue with --resume", output)
    assert len(stops) == 1, output                      # rank 0 alone speaks, once
    stopped = int(stops[0])
    saved = tg.load(os.path.join(out, "ckpt.safetensors"))
    assert saved["iter"] == stopped and saved["world_size"] == 2
    assert len(saved["rng"]["ranks"]) == 2

    end = stopped + 5
    resumed = _launch([*common, "--max-iters", str(end), "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count(f"resuming from iteration {stopped} of {end}") == 1, resumed.stdout
    assert tg.load(os.path.join(out, "ckpt.safetensors"))["iter"] == end
    iters = [r["iter"] for r in _metrics(out)]
    assert iters == [i for i in range(0, stopped + 1, 10)] + [i for i in range(stopped + 1, end + 1) if i % 10 == 0 or
                                                             i == end], iters
