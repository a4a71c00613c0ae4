"""Where tinygrad_gpu keeps what it can rebuild: downloaded corpora, the emulator's compiled
kernels, the CPU's measured peak. $TINYGRAD_GPU_CACHE, else $XDG_CACHE_HOME/tinygrad_gpu, else
~/.cache/tinygrad_gpu."""
import os


def cache_dir(*parts: str) -> str:
    root = os.environ.get("TINYGRAD_GPU_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "tinygrad_gpu")
    return os.path.join(root, *parts)
