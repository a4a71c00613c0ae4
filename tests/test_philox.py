"""philox.cu against its NumPy reference, and the reference against Random123's known answers.

Sizes are drawn so that n is rarely a multiple of the block (256) or of the grid; offsets near
2^32 and 2^64 check the carry into the counter's high word and the wrap-around.
"""
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tinygrad_gpu import device as devices
from tinygrad_gpu.kernels import philox

from conftest import gpu, requires_gpu

KERNEL_DEVICES = ["emu", pytest.param("cuda", marks=[gpu, requires_gpu])]
on_kernel_devices = pytest.mark.parametrize("device", KERNEL_DEVICES)
SIZES = st.one_of(st.integers(0, 300), st.sampled_from([255, 257, 1025, 4097, 256 * 4096 + 3]))
U64 = st.integers(0, 2 ** 64 - 1)

# Random123's examples/kat_vectors, the three "philox4x32 10" lines: counter, key, expected output.
KNOWN_ANSWERS = [
    ((0x00000000,) * 4, (0x00000000,) * 2, (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
]


def back(array):
    return devices.move(array, "cpu")


@pytest.mark.parametrize("counter, key, expected", KNOWN_ANSWERS)
def test_known_answers(counter, key, expected):
    assert philox.philox4x32_10(counter, key) == expected


@given(st.integers(1, 20), U64, st.sampled_from([0, 2 ** 32 - 3, 2 ** 64 - 5]))
def test_reference_bits_are_one_block_per_counter(n, seed, offset):
    """Row i is Philox of counter (lo32(c), hi32(c), 0, 0), c = offset + i mod 2^64, key = the seed's halves."""
    bits = philox.reference_bits(n, seed, offset)
    assert bits.shape == (n, 4) and bits.dtype == np.uint32
    for i in range(n):
        c = (offset + i) % 2 ** 64
        want = philox.philox4x32_10((c & 0xFFFFFFFF, c >> 32, 0, 0), (seed & 0xFFFFFFFF, seed >> 32))
        assert tuple(int(w) for w in bits[i]) == want


@on_kernel_devices
@given(SIZES, U64, U64)
@example(n=300, seed=1, offset=2 ** 32 - 100)         # the counter's low word carries into the high one
@example(n=300, seed=2 ** 64 - 1, offset=2 ** 64 - 7)  # the counter wraps around 2^64
def test_kernels_match_reference(device, n, seed, offset):
    uniform, normal = back(philox.uniform(device, n, seed, offset)), back(philox.normal(device, n, seed, offset))
    assert uniform.shape == normal.shape == (n,) and uniform.dtype == normal.dtype == np.float32
    np.testing.assert_array_equal(uniform, philox.reference_uniform(n, seed, offset))
    # the integer parts are exact; logf, cosf and sqrtf of the kernel and of NumPy differ by a few ulp
    np.testing.assert_allclose(normal, philox.reference_normal(n, seed, offset), rtol=1e-5, atol=4e-6)
    assert ((uniform >= 0) & (uniform < 1)).all() and np.isfinite(normal).all()


@pytest.mark.parametrize("device", ["cpu", *KERNEL_DEVICES])
@pytest.mark.parametrize("draw", [philox.uniform, philox.normal])
def test_two_draws_are_one_draw_split(device, draw):
    """A draw of n moves the offset on by n: (offset, n) then (offset + n, n) is (offset, 2n)."""
    seed, offset, n = 1234, 2 ** 32 - 1000, 1537
    first, second = back(draw(device, n, seed, offset)), back(draw(device, n, seed, offset + n))
    np.testing.assert_array_equal(np.concatenate([first, second]), back(draw(device, 2 * n, seed, offset)))
    assert not np.array_equal(first, second)


def test_seeds_and_offsets_give_different_streams():
    a = philox.reference_uniform(1000, 0, 0)
    assert not np.array_equal(a, philox.reference_uniform(1000, 1, 0))
    assert not np.array_equal(a, philox.reference_uniform(1000, 2 ** 32, 0))   # the seed's high word counts
    np.testing.assert_array_equal(a[1:], philox.reference_uniform(999, 0, 1))


def test_statistics_are_roughly_right():
    """100k draws: mean and spread within about 10 standard errors of the true ones."""
    u, z = philox.reference_uniform(100_000, 42, 0), philox.reference_normal(100_000, 42, 0)
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03
    assert abs((np.abs(z) < 1).mean() - 0.6827) < 0.015           # one sigma holds 68.27%
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 9_000   # no empty or thin tenth


@pytest.mark.skipif(not devices.cuda_available(), reason="needs the cuda device (a GPU or the stand-in)")
def test_cuda_and_cuda0_draw_from_one_stream():
    """Tensors live on 'cuda:0'; a draw asked for on 'cuda' must move the same stream on, not a second one."""
    from tinygrad_gpu import random
    random.manual_seed(1)
    assert random.generator("cuda") is random.generator("cuda:0")
    random.set_cuda_rng_state_all({"cuda": {"seed": 5, "offset": 7}})
    assert random.generator("cuda:0").state == {"seed": 5, "offset": 7}
