"""Random numbers: one generator per device, all reseeded by ``tg.manual_seed``.

NumPy's PCG64 generator serves ``cpu`` and ``emu``. Each GPU has a ``PhiloxStream``: our own
counter-based kernel (kernels/philox.cu), whose whole state is two integers, the seed and
how many values it has drawn (the offset). That is what lets a checkpoint hold a GPU's
stream and a resumed run draw the very masks it would have drawn. The same seed gives the
same numbers on the same device; ``cpu`` and ``cuda`` draw different streams.
"""
from __future__ import annotations

import numpy as np

from . import device as devices

_seed = int(np.random.SeedSequence().entropy % (2**63))
_generators = {}


def manual_seed(seed: int) -> None:
    """Make every later random op reproducible."""
    global _seed
    _seed = int(seed)
    _generators.clear()


def initial_seed() -> int:
    return _seed


class PhiloxStream:
    """A GPU's random stream, with the methods of NumPy's Generator that the library uses.

    Draw k of n values reads Philox at counters offset .. offset + n - 1 and moves the offset
    on by n, so no two draws share a counter. Float64 and integer draws combine two float32
    draws into 48 random bits (float64 normals: Box-Muller on two of those).
    """

    def __init__(self, device: str, seed: int, offset: int = 0):
        self.device, self.seed, self.offset = device, int(seed) % 2**64, int(offset)

    def _draw(self, kind: str, n: int):
        from .kernels import philox
        values = getattr(philox, kind)(self.device, n, self.seed, self.offset)
        self.offset += n
        return values

    def _bits48(self, shape):
        n = _count(shape)
        high, low = self._draw("uniform", n), self._draw("uniform", n)
        return ((high * 2**24).astype(np.int64) << 24 | (low * 2**24).astype(np.int64)).reshape(shape)

    def random(self, shape, dtype=np.float32):
        with devices.use(self.device):
            if np.dtype(dtype) == np.float64:
                return self._bits48(shape) * 2.0**-48
            return self._draw("uniform", _count(shape)).reshape(shape).astype(dtype, copy=False)

    def standard_normal(self, shape, dtype=np.float32):
        with devices.use(self.device):
            if np.dtype(dtype) == np.float64:             # Box-Muller in float64, on 48-bit uniforms
                xp = devices.array_module(self.device)
                u1, u2 = (self._bits48(shape) + 1) * 2.0**-48, self._bits48(shape) * 2.0**-48
                return xp.sqrt(-2 * xp.log(u1)) * xp.cos(2 * np.pi * u2)
            return self._draw("normal", _count(shape)).reshape(shape).astype(dtype, copy=False)

    def uniform(self, low, high, shape, dtype=np.float32):
        with devices.use(self.device):
            return low + (high - low) * self.random(shape, dtype)

    def integers(self, low, high, size):
        """48 random bits modulo the range's width: a value is favoured by at most width / 2**48, under
        1e-5 for the widths allowed here."""
        if high <= low:
            raise ValueError(f"randint on {self.device}: low >= high ({low} >= {high})")
        if high - low > 2**32:
            raise ValueError(f"randint on {self.device}: the range [{low}, {high}) is wider than 2**32 values, "
                             "more than the GPU stream draws evenly; draw on the cpu and move the result")
        with devices.use(self.device):
            return low + self._bits48(size) % (high - low)

    def permutation(self, n: int):
        """0 .. n-1 in random order: sort random 48-bit keys (with distinct keys all n! orders are equally
        likely; a tie among n keys has odds about n^2 / 2^49)."""
        with devices.use(self.device):
            return devices.array_module(self.device).argsort(self._bits48((n,)))

    def reserve(self, n: int) -> tuple:
        """(seed, offset) for a kernel that draws n values itself (dropout inside a fused kernel): it reads
        the counters offset .. offset + n - 1, as a draw of n would, and the stream moves on past them."""
        seed, offset = self.seed, self.offset
        self.offset += int(n)
        return seed, offset

    @property
    def state(self) -> dict:
        return {"seed": self.seed, "offset": self.offset}


def _count(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def generator(device: str):
    """The generator that draws random numbers for `device` (created on first use)."""
    key = "cpu" if not devices.is_cuda(device) else devices.canonical(device)    # 'cuda' is 'cuda:0's stream
    if key not in _generators:
        _generators[key] = PhiloxStream(key, _seed) if devices.is_cuda(device) else np.random.default_rng(_seed)
    return _generators[key]


def philox_counters(device: str, n: int) -> tuple:
    """(seed, offset): n Philox counters for a kernel on `device` that draws its own random numbers
    (kernels/philox.cu's formulas). A GPU's stream reserves the next n, so a fused kernel draws what the
    stream's own draw of n uniforms would have drawn. Elsewhere (emu), a fresh 64-bit seed from the
    device's NumPy generator and offset 0: reproducible under manual_seed, though not the cpu's numbers."""
    stream = generator(device)
    if isinstance(stream, PhiloxStream):
        return stream.reserve(n)
    return int(stream.integers(0, 2**63, dtype=np.int64)), 0


def get_rng_state() -> dict:
    """The CPU generator's state, a plain dict that can be stored in checkpoint metadata."""
    return generator("cpu").bit_generator.state


def set_rng_state(state: dict) -> None:
    generator("cpu").bit_generator.state = state


def get_cuda_rng_state_all() -> dict:
    """Each GPU stream's state ({'cuda:0': {'seed': s, 'offset': n}}), for those that have drawn."""
    return {key: g.state for key, g in _generators.items() if key != "cpu"}


def set_cuda_rng_state_all(states: dict) -> None:
    for key, state in states.items():
        key = devices.canonical(key)
        _generators[key] = PhiloxStream(key, state["seed"], state["offset"])


def get_all_rng_states() -> dict:
    """The state of every generator that exists now, by device key ('cpu', 'cuda:0', ...): with
    set_all_rng_states, what replays the same draws (tg.utils.checkpoint's recomputation)."""
    return {**({"cpu": get_rng_state()} if "cpu" in _generators else {}), **get_cuda_rng_state_all()}


def set_all_rng_states(states: dict) -> None:
    """The generators as get_all_rng_states found them; one that did not exist then is made afresh from the seed
    at its next draw, as it would have been."""
    for key in [key for key in _generators if key not in states]:
        del _generators[key]
    if "cpu" in states:
        set_rng_state(states["cpu"])
    set_cuda_rng_state_all({key: state for key, state in states.items() if key != "cpu"})
