"""The README's shell commands, run one after another in a fresh folder, as a new user would type them: each
must exit 0. Training runs are made short (SHORTER: --max-iters 8 and small evaluations, as the README says);
a command this machine cannot run is left out for a stated reason (NOT_HERE: it installs, downloads, needs a GPU,
several machines or GPT-2's own folder, or is a benchmark, whose own tests run it small). A command that matches
no reason runs, so a new command in the README is tried by default.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import CUDA_PASS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
MPIEXEC = shutil.which("mpiexec") or shutil.which("mpiexec", path=os.path.dirname(sys.executable))

SMALL_RUN = ["--max-iters", "8", "--eval-interval", "4", "--eval-iters", "2", "--num-samples", "1",
             "--sample-tokens", "20"]
FEW_TOKENS = ["--max-new-tokens", "20"]
SHORTER = {"train_charlm.py": SMALL_RUN, "finetune_charlm.py": SMALL_RUN, "finetune_gpt2.py": SMALL_RUN,
           "sample.py": FEW_TOKENS, "describe_products.py": FEW_TOKENS, "evaluate_descriptions.py": FEW_TOKENS}
NOT_HERE = [
    (r"^pip install", "installs: the tests run where the package is installed"),
    (r"^pytest|^TINYGRAD_GPU_CUPY=\S+ TINYGRAD_GPU_DEVICE=\S+ pytest", "the test suite itself"),
    (r"--data shakespeare", "downloads tiny-shakespeare"),
    (r"--device cuda|gpu_check\.sh", "needs an NVIDIA GPU"),
    (r"hosts\.txt|^[\w.-]+:\d+$", "several machines"),
    (r"--init-from gpt2\b|out-shop(?![\w-])",
     "needs GPT-2's own folder (nothing is downloaded; the README makes a small one, whose commands run)"),
    (r"^(python|bash) benchmarks/", "a benchmark (minutes; tests/test_benchmark_*.py run each small)"),
]


def readme_commands() -> list:
    """Every command of the README's ```bash blocks, in order: comments dropped, `a && b` as two commands."""
    with open(README) as f:
        blocks = re.findall(r"^```bash\n(.*?)^```", f.read(), flags=re.S | re.M)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            line = re.sub(r"(^|\s+)#.*$", "", line).strip()
            commands += [part.strip() for part in line.split("&&") if line]
    return commands


def why_not_here(command: str):
    """The reason this machine cannot run `command`, or None."""
    if command.startswith("mpiexec") and MPIEXEC is None:
        return "needs mpiexec (the [dist] extra)"
    return next((why for pattern, why in NOT_HERE if re.search(pattern, command)), None)


def _argv(command: str) -> list:
    """The command as this test runs it: this Python and the venv's mpiexec, and a short run (SHORTER)."""
    argv = [sys.executable if word == "python" else MPIEXEC if word == "mpiexec" else word
            for word in shlex.split(command)]
    script = next((os.path.basename(word) for word in argv if word.endswith(".py")), None)
    return argv + SHORTER.get(script, [])


def test_the_readme_lists_commands_of_each_kind():
    commands = readme_commands()
    assert any(c == "python examples/train_charlm.py" for c in commands), commands   # the set-up run
    assert all(any(re.search(pattern, c) for c in commands) for pattern, _ in NOT_HERE), "a reason matches nothing"


@pytest.mark.skipif(CUDA_PASS, reason="the README's commands run once, in the first pass")
def test_the_readme_commands_run_in_order_in_a_fresh_folder(tmp_path):
    for name in ("examples", "tinygrad_gpu"):          # a folder laid out like a clone, whose runs are its own
        os.symlink(os.path.join(ROOT, name), tmp_path / name)
    env = {k: v for k, v in os.environ.items() if k != "TINYGRAD_GPU_DEVICE"}
    ran = []
    for command in readme_commands():
        if why_not_here(command):
            continue
        result = subprocess.run(_argv(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{command}\nexit code {result.returncode}\n{result.stderr[-3000:]}"
        ran.append(command)
    # the set-up run, the examples' two runs, sampling, fine-tuning, a checkpointed run; the shop's flow on a small
    # GPT-2 made here (make, pretrain, fine-tune fully and with LoRA, describe, evaluate); token files (two
    # prepared, one run); three runs on two ranks where mpiexec is
    assert len(ran) == 6 + 6 + 3 + (3 if MPIEXEC else 0), ran
    assert {"out-charlm", "out-text", "out-lstm", "out-finetune"} <= set(os.listdir(tmp_path)), os.listdir(tmp_path)
