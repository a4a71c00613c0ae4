"""The CUDA emulator (tinygrad_gpu/kernels/cuda_emu.h, emulator.py) on small kernels written here.

Each test checks one piece of CUDA semantics (barriers, shuffles, votes, atomics, static and
dynamic shared memory, 2-D/3-D indices, the 16-bit float types and their conversions) or one
promise of the emulator (deadlocks raise, compile errors name file and line, a shuffled order
exposes a planted race, the cache).
"""
import os

import numpy as np
import pytest

from tinygrad_gpu import dtypes
from tinygrad_gpu.kernels import emulator

SOURCE = r"""
// Sum each row of an (rows, n) array: strided loads, a warp butterfly, shared memory, a barrier.
extern "C" __global__ void row_sums(const float* x, float* out, int n) {
    __shared__ float partial[32];
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[(long long)blockIdx.x * n + i];
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < (int)blockDim.x / 32; ++w) total += partial[w];
        out[blockIdx.x] = total;
    }
}

// Every shuffle flavour, one output column each; width 8 splits a warp into 4 groups.
extern "C" __global__ void shuffles(int* out) {
    int lane = threadIdx.x % 32, id = threadIdx.x, value = 100 * id;
    int* row = out + id * 6;
    row[0] = __shfl_sync(0xffffffffu, value, 3);
    row[1] = __shfl_up_sync(0xffffffffu, value, 2);
    row[2] = __shfl_down_sync(0xffffffffu, value, 5);
    row[3] = __shfl_xor_sync(0xffffffffu, value, 1);
    row[4] = __shfl_down_sync(0xffffffffu, value, 1, 8);
    row[5] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0) + (__any_sync(0xffffffffu, lane == 7) ? 1 : 0)
             + (__all_sync(0xffffffffu, lane < 32) ? 2 : 0);
}

// __syncwarp orders writes and reads inside one warp.
extern "C" __global__ void warp_neighbours(int* out) {
    __shared__ int slot[64];
    slot[threadIdx.x] = threadIdx.x * threadIdx.x;
    __syncwarp();
    int lane = threadIdx.x % 32;
    out[threadIdx.x] = slot[threadIdx.x - lane + (lane + 1) % 32];
}

// Many blocks add into the same words at the same time.
extern "C" __global__ void histogram(const int* values, int* counts, float* total, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&counts[values[i]], 1);
        atomicAdd(total, 0.5f);
    }
}

// Dynamic shared memory: reverse each block's slice.
extern "C" __global__ void reverse_blocks(const double* x, double* y) {
    extern __shared__ double buffer[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buffer[threadIdx.x] = x[i];
    __syncthreads();
    y[i] = buffer[blockDim.x - 1 - threadIdx.x];
}

// 3-D blocks in a 2-D grid: every thread writes where it is.
extern "C" __global__ void coordinates(int* out) {
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int b = blockIdx.x + gridDim.x * blockIdx.y;
    int* row = out + 6 * (b * blockDim.x * blockDim.y * blockDim.z + t);
    row[0] = threadIdx.x; row[1] = threadIdx.y; row[2] = threadIdx.z;
    row[3] = blockIdx.x; row[4] = blockIdx.y; row[5] = blockDim.x * 100 + gridDim.x * 10 + gridDim.y;
}

// Thread i reads what thread i-1 wrote, with or without the barrier that makes it legal.
// (`stamp` differs per launch: shared memory keeps old values, which must not look right.)
extern "C" __global__ void neighbour(int* out, int synchronise, int stamp) {
    __shared__ int seen[128];
    seen[threadIdx.x] = stamp + threadIdx.x + 1;
    if (synchronise) __syncthreads();
    out[threadIdx.x] = threadIdx.x ? seen[threadIdx.x - 1] - stamp : 0;
}

// Bugs: a stack overflow (simulated: emu_stack_bottom exists only in the emulator), threads that
// skip a barrier, and lanes that leave before a full-warp shuffle.
extern "C" __global__ void stack_overflow(int* out) {
    if (threadIdx.x == 1) emu_stack_bottom()[-8] = 0;
    out[threadIdx.x] = 1;
}
extern "C" __global__ void barrier_in_branch(float* out) {
    if (threadIdx.x < 40) __syncthreads();
    out[threadIdx.x] = 1.0f;
}
extern "C" __global__ void early_exit_shuffle(float* out) {
    if (threadIdx.x % 32 >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
"""


@pytest.fixture(scope="module")
def module():
    return emulator.compile_source(SOURCE, "test_emulator_kernels.cu")


@pytest.mark.parametrize("rows, n, block", [(1, 1, 32), (7, 1000, 256), (3, 4097, 1024), (50, 33, 64)])
def test_block_reduction(module, rows, n, block):
    x = np.random.default_rng(n).standard_normal((rows, n)).astype(np.float32)
    out = np.zeros(rows, np.float32)
    module.launch("row_sums", (rows,), (block,), [x, out, np.int32(n)])
    np.testing.assert_allclose(out, x.sum(1, dtype=np.float64), rtol=1e-5, atol=1e-4)


def test_shuffles_and_votes(module):
    out = np.zeros((64, 6), np.int32)
    module.launch("shuffles", 1, 64, [out])
    lane = np.arange(64) % 32
    base = np.arange(64) - lane
    value = 100 * np.arange(64)
    np.testing.assert_array_equal(out[:, 0], 100 * (base + 3))
    np.testing.assert_array_equal(out[:, 1], np.where(lane >= 2, value - 200, value))       # up: own value below 2
    np.testing.assert_array_equal(out[:, 2], np.where(lane < 27, value + 500, value))       # down: own value at the top
    np.testing.assert_array_equal(out[:, 3], 100 * (np.arange(64) ^ 1))
    np.testing.assert_array_equal(out[:, 4], np.where(lane % 8 < 7, value + 100, value))    # width 8: stay in the group
    ballot = sum(1 << k for k in range(32) if k % 3 == 0)
    np.testing.assert_array_equal(out[:, 5].astype(np.uint32), np.uint32((ballot + 1 + 2) & 0xFFFFFFFF))


def test_syncwarp(module):
    out = np.zeros(64, np.int32)
    module.launch("warp_neighbours", 1, 64, [out])
    lane = np.arange(64) % 32
    np.testing.assert_array_equal(out, (np.arange(64) - lane + (lane + 1) % 32) ** 2)


def test_atomics_from_many_blocks(module):
    n = 10_000
    values = np.random.default_rng(0).integers(0, 7, n).astype(np.int32)
    counts, total = np.zeros(7, np.int32), np.zeros(1, np.float32)
    module.launch("histogram", (-(-n // 128),), (128,), [values, counts, total, np.int32(n)])
    np.testing.assert_array_equal(counts, np.bincount(values, minlength=7))
    assert total[0] == n / 2


@pytest.mark.parametrize("block", [32, 96, 512])
def test_dynamic_shared_memory(module, block):
    x = np.arange(3 * block, dtype=np.float64)
    y = np.zeros_like(x)
    module.launch("reverse_blocks", 3, block, [x, y], shared_mem=block * 8)
    np.testing.assert_array_equal(y, x.reshape(3, block)[:, ::-1].ravel())


def test_multidimensional_indices(module):
    block, grid = (4, 3, 2), (2, 5)
    out = np.zeros((10, 24, 6), np.int32)
    module.launch("coordinates", grid, block, [out])
    z, y, x = np.meshgrid(range(2), range(3), range(4), indexing="ij")
    for b in range(10):
        np.testing.assert_array_equal(out[b, :, :3], np.stack([x.ravel(), y.ravel(), z.ravel()], 1))
        np.testing.assert_array_equal(out[b, :, 3:5], [[b % 2, b // 2]] * 24)
    assert (out[..., 5] == 4 * 100 + 2 * 10 + 5).all()


def test_a_barrier_some_threads_skip_raises(module):
    with pytest.raises(emulator.KernelDeadlock) as error:
        module.launch("barrier_in_branch", 1, 64, [np.zeros(64, np.float32)])
    message = str(error.value)
    assert "barrier_in_branch" in message and "never all meet" in message
    assert "threads 0-39 wait at __syncthreads() (test_emulator_kernels.cu:" in message
    assert "threads 40-63 returned" in message


def test_lanes_that_leave_before_a_shuffle_raise(module):
    with pytest.raises(emulator.KernelDeadlock, match=r"early_exit_shuffle[\s\S]*__shfl_xor_sync"):
        module.launch("early_exit_shuffle", 1, 64, [np.zeros(64, np.float32)])
    out = np.zeros(3, np.float32)                          # the module still works after an aborted launch
    module.launch("row_sums", 1, 32, [np.ones((1, 5), np.float32), out, np.int32(5)])
    assert out[0] == 5


def test_a_stack_overflow_is_reported(module):
    with pytest.raises(emulator.EmulatorError, match="stack_overflow': thread 1 overflowed its 64 KB"):
        module.launch("stack_overflow", 1, 32, [np.zeros(32, np.int32)])
    module.launch("shuffles", 1, 64, [np.zeros((64, 6), np.int32)])       # and the next launch is clean


def test_shuffled_order_exposes_a_planted_race(module, monkeypatch):
    expected = np.arange(128)                               # thread i should see i (what thread i-1 wrote)
    stamps = iter(range(1000, 10**6, 1000))

    def run(synchronise, shuffle):
        out = np.zeros(128, np.int32)
        module.launch("neighbour", 1, 128, [out, np.int32(synchronise), np.int32(next(stamps))], shuffle=shuffle)
        return out
    # The fixed order runs thread i-1 before thread i, so the missing barrier goes unnoticed ...
    np.testing.assert_array_equal(run(0, 0), expected)
    # ... a shuffled order does not, and with the barrier every order is right.
    assert any(not np.array_equal(run(0, seed), expected) for seed in range(1, 4))
    for seed in range(1, 4):
        np.testing.assert_array_equal(run(1, seed), expected)
    monkeypatch.setenv("TINYGRAD_GPU_EMU_SHUFFLE", "7")    # the same switch from the environment
    assert not np.array_equal(run(0, None), expected)


def test_launch_arguments_are_checked(module):
    x, out = np.zeros((2, 4), np.float32), np.zeros(2, np.float32)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        module.launch("row_sums", 2, 32, [x, out])
    with pytest.raises(TypeError, match="argument 0.*f4.*float64"):
        module.launch("row_sums", 2, 32, [x.astype(np.float64), out, np.int32(4)])
    with pytest.raises(TypeError, match="argument 2.*i4.*i8"):
        module.launch("row_sums", 2, 32, [x, out, np.int64(4)])
    with pytest.raises(TypeError, match="NumPy scalars"):
        module.launch("row_sums", 2, 32, [x, out, 4])
    with pytest.raises(ValueError, match="C-contiguous"):
        module.launch("row_sums", 2, 32, [np.zeros((4, 2), np.float32).T, out, np.int32(4)])
    with pytest.raises(ValueError, match="more than 1024 threads"):
        module.launch("row_sums", 2, (64, 32), [x, out, np.int32(4)])
    with pytest.raises(emulator.EmulatorError, match="no kernel 'missing'"):
        module.launch("missing", 1, 32, [])


def test_compile_error_names_file_and_line():
    source = 'extern "C" __global__ void broken(float* x) {\n    float y = 1.0f;\n    x[0] = y + not_declared;\n}\n'
    with pytest.raises(emulator.KernelCompileError, match=r"broken_kernel\.cu:3:\d+: error: .*not_declared"):
        emulator.compile_source(source, "broken_kernel.cu")


def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(emulator.EmulatorError, match="C\\+\\+ compiler.*apt install g\\+\\+"):
        emulator.compile_source(SOURCE, "test_emulator_kernels.cu")


def test_compiled_libraries_are_cached_by_source(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYGRAD_GPU_CACHE", str(tmp_path))
    source = 'extern "C" __global__ void one(int* x) { x[threadIdx.x] = 1; }\n'
    emulator.compile_source(source, "cached.cu")
    (library,) = (tmp_path / "emu").glob("cached-*.so")
    built = library.stat().st_mtime_ns
    monkeypatch.setattr(emulator, "_modules", {})          # a fresh process: only the disk cache is left
    out = np.zeros(4, np.int32)
    emulator.compile_source(source, "cached.cu").launch("one", 1, 4, [out])
    assert library.stat().st_mtime_ns == built and (out == 1).all()
    emulator.compile_source(source.replace("= 1", "= 2"), "cached.cu")
    assert len(list((tmp_path / "emu").glob("cached-*.so"))) == 2   # another source, another entry
    assert not [p for p in os.listdir(tmp_path / "emu") if "partial" in p]


# ----------------------------------------------------------------------------- 16-bit floats
HALF_SOURCE = r"""
// cuda_emu.h's __half and __nv_bfloat16, converted elementwise; the short names round as the _rn ones.
extern "C" __global__ void half_to_float(const __half* h, float* f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) f[i] = __half2float(h[i]);
}
extern "C" __global__ void float_to_half(const float* f, __half* h, __half* h_short, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        h[i] = __float2half_rn(f[i]);
        h_short[i] = __float2half(f[i]);
    }
}
extern "C" __global__ void bfloat16_to_float(const __nv_bfloat16* b, float* f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) f[i] = __bfloat162float(b[i]);
}
extern "C" __global__ void float_to_bfloat16(const float* f, __nv_bfloat16* b, __nv_bfloat16* b_short, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        b[i] = __float2bfloat16_rn(f[i]);
        b_short[i] = __float2bfloat16(f[i]);
    }
}
extern "C" __global__ void copy_bits(const unsigned short* a, unsigned short* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i];
}
"""
HALF_TYPES = {"half": dtypes.float16, "bfloat16": dtypes.bfloat16}


@pytest.fixture(scope="module")
def half_module():
    return emulator.compile_source(HALF_SOURCE, "test_emulator_half.cu")


def to_float(module, name, values):
    out = np.zeros(values.size, np.float32)
    module.launch(f"{name}_to_float", -(-values.size // 256), 256, [values, out, np.int32(values.size)])
    return out


def from_float(module, name, values):
    rounded, short = np.zeros(values.size, HALF_TYPES[name]), np.zeros(values.size, HALF_TYPES[name])
    module.launch(f"float_to_{name}", -(-values.size // 256), 256, [values, rounded, short, np.int32(values.size)])
    np.testing.assert_array_equal(short.view(np.uint16), rounded.view(np.uint16))
    return rounded


@pytest.mark.parametrize("name", HALF_TYPES)
def test_every_16_bit_pattern_round_trips_through_float(half_module, name):
    """All 65536 values, NaNs with their payloads included: to float exactly as NumPy (ml_dtypes) converts,
    and back to the same bits."""
    bits = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    values = bits.view(HALF_TYPES[name])
    floats = to_float(half_module, name, values)
    want, nan = values.astype(np.float32), np.isnan(values.astype(np.float32))
    np.testing.assert_array_equal(floats.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    assert np.isnan(floats[nan]).all() and (np.signbit(floats) == (bits >= 0x8000)).all()
    np.testing.assert_array_equal(from_float(half_module, name, floats).view(np.uint16), bits)


def rounding_cases(dtype, rng):
    """float32 values that test rounding to `dtype`: random bit patterns (every exponent, NaNs, infinities,
    float32 subnormals), the exact midpoint between every two neighbouring finite 16-bit values (ties: to
    even) and the float32 values either side of it, with both signs. The midpoints above the largest value
    and below the smallest subnormal (0 and it) test overflow to inf and underflow to 0."""
    finite = np.arange(int(np.array(np.inf, dtype).view(np.uint16)), dtype=np.uint32).astype(np.uint16)
    low = finite.view(dtype).astype(np.float64)
    step = np.diff(low, append=2 * low[-1] - low[-2])                 # above the largest: its own spacing
    midpoints = (low + step / 2).astype(np.float32)                   # exact: 12 (or 9) significant bits
    near = [midpoints, np.nextafter(midpoints, np.float32(np.inf)), np.nextafter(midpoints, np.float32(0))]
    random_bits = rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.float32([0.0, np.inf, np.nan, 1e-45, 1e-40, 1e-8, 65504, 65519.996, 65520, 1e5,
                        np.finfo(np.float32).max, 3.3895314e38, 3.3961776e38])
    values = np.concatenate([*near, edges])
    return np.concatenate([values, -values, random_bits])


@pytest.mark.parametrize("name", HALF_TYPES)
def test_float_to_16_bits_rounds_to_nearest_even(half_module, name):
    dtype = HALF_TYPES[name]
    values = rounding_cases(dtype, np.random.default_rng(0))
    with np.errstate(over="ignore", invalid="ignore"):
        want = values.astype(dtype)
    got = from_float(half_module, name, values)
    nan = np.isnan(values)
    np.testing.assert_array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    assert np.isnan(got[nan].astype(np.float32)).all()
    assert np.isinf(got.astype(np.float32)).any() and (got.view(np.uint16) & 0x7fff == 1).any()   # cases reached


def test_the_three_2_byte_array_types_are_told_apart(half_module):
    n, floats = 4, np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="argument 0: expected an array of f2.*got dtype uint16"):
        half_module.launch("half_to_float", 1, 32, [np.zeros(n, np.uint16), floats, np.int32(n)])
    with pytest.raises(TypeError, match="argument 0: expected an array of f2.*got dtype bfloat16"):
        half_module.launch("half_to_float", 1, 32, [np.zeros(n, dtypes.bfloat16), floats, np.int32(n)])
    with pytest.raises(TypeError, match="argument 0: expected an array of bf2.*got dtype float16"):
        half_module.launch("bfloat16_to_float", 1, 32, [np.zeros(n, np.float16), floats, np.int32(n)])
    with pytest.raises(TypeError, match="argument 1: expected an array of u2.*got dtype float16"):
        half_module.launch("copy_bits", 1, 32, [np.zeros(n, np.uint16), np.zeros(n, np.float16), np.int32(n)])
    half_module.launch("copy_bits", 1, 32, [np.arange(n, dtype=np.uint16), np.zeros(n, np.uint16), np.int32(n)])


# ----------------------------------------------------------------------------- structs passed by value
STRUCT_SOURCE = r"""
// A table of arrays as one by-value argument (as kernels/multi_tensor.cu passes its tensor tables):
// out[i] = sum of x[k][i] * weight[k] over the table's count arrays.
struct Table {
    float* x[3];
    float weight[3];
    long long n;                // at 40, after 4 bytes of padding: what align=True reproduces
    int count;
};
extern "C" __global__ void weighted_sum(const Table table, float* out) {
    for (long long i = threadIdx.x; i < table.n; i += blockDim.x) {
        float total = 0.0f;
        for (int k = 0; k < table.count; ++k) total += table.x[k][i] * table.weight[k];
        out[i] = total;
    }
}
"""
TABLE = np.dtype({"names": ["x", "weight", "n", "count"], "formats": [("u8", 3), ("f4", 3), "i8", "i4"]},
                 align=True)


def test_a_struct_passes_by_value():
    module = emulator.compile_source(STRUCT_SOURCE, "test_emulator_struct.cu")
    assert module.signature("weighted_sum") == [f"s{TABLE.itemsize}", "pf4"] and TABLE.itemsize == 56
    x = [np.random.default_rng(k).standard_normal(50).astype(np.float32) for k in range(2)]
    table = np.zeros((), TABLE)
    table["x"][:2] = [a.ctypes.data for a in x]
    table["weight"] = [0.5, -2.0, 99.0]
    table["count"], table["n"] = 2, 50
    out = np.zeros(50, np.float32)
    module.launch("weighted_sum", 1, 32, [table[()], out])
    np.testing.assert_array_equal(out, x[0] * np.float32(0.5) + x[1] * np.float32(-2.0))


def test_a_struct_of_another_size_is_refused():
    module = emulator.compile_source(STRUCT_SOURCE, "test_emulator_struct.cu")
    unaligned = np.dtype({"names": ["x", "weight", "n", "count"], "formats": [("u8", 3), ("f4", 3), "i8", "i4"]})
    with pytest.raises(TypeError, match=r"argument 0: the kernel takes a struct of 56 bytes, got .* of 48 bytes"):
        module.launch("weighted_sum", 1, 32, [np.zeros((), unaligned)[()], np.zeros(50, np.float32)])
    with pytest.raises(TypeError, match=r"argument 0: the kernel takes s56"):
        module.launch("weighted_sum", 1, 32, [np.int64(0), np.zeros(50, np.float32)])
