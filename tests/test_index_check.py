"""kernels/index_check.cu against its reference on emu, and deferred_checks.check_range, which runs it on a GPU."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_gpu as tg
import tinygrad_gpu.nn.functional as F
from tinygrad_gpu import deferred_checks
from tinygrad_gpu import device as devices
from tinygrad_gpu.kernels import index_check


@given(st.integers(0, 700), st.integers(1, 90), st.sampled_from([np.int64, np.int32]),
       st.sampled_from([None, -100, 3]), st.integers(0, 2**31 - 1))
def test_the_flag_is_the_references(n, high, dtype, ignore, seed):
    """Ids around the range's edges (n of them, not a multiple of a block); a set flag stays set."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(-2, high + 2, n).astype(dtype)
    if ignore is not None and n:
        ids[rng.integers(0, n, 3)] = ignore
    for start in (0, 1):
        found, want = np.full((), start, np.uint32), np.full((), start, np.uint32)
        index_check.index_check(ids, high, ignore, found, "emu")
        index_check.reference_index_check(ids, high, ignore, want)
        assert found == want


def test_bad_ids_are_found_however_they_are_bad():
    for ids, found in (([0, 4], 0), ([0, 5], 1), ([-1, 0], 1), ([-100, 2], 0), ([2**40, 0], 1)):
        flag = np.zeros((), np.uint32)
        index_check.index_check(np.array(ids, np.int64), 5, -100, flag, "emu")
        assert flag == found, ids


def test_the_flag_must_be_a_0d_uint32_array():
    with pytest.raises(ValueError, match="index_check: found must be a 0-d uint32 array"):
        index_check.index_check(np.zeros(3, np.int64), 5, None, np.zeros(1, np.uint32), "emu")


def test_check_range_on_the_host_raises_at_once_naming_the_first_bad_id():
    with pytest.raises(IndexError, match="embedding: index 7 is out of range"):
        F.embedding(tg.tensor([1, 7, 9], device="cpu"), tg.ones(5, 2, device="cpu"))
    with pytest.raises(IndexError, match="target -3 is out of range"):
        F.cross_entropy(tg.zeros(3, 4, device="cpu"), tg.tensor([-100, -3, 1], device="cpu"))
    F.cross_entropy(tg.zeros(2, 4, device="cpu"), tg.tensor([-100, 3], device="cpu"))   # the ignored one is fine


@pytest.mark.skipif(not devices.is_cuda(devices.default_device()), reason="the cuda pass: a flag on the GPU")
def test_on_a_gpu_one_launch_checks_and_the_flag_is_read_later():
    from tinygrad_gpu.testing.cupy_standin import counters
    if not hasattr(counters, "launches"):
        pytest.skip("counts launches on the stand-in")
    ids = tg.tensor([0, 1, 2], device="cuda")
    before = counters.launches
    deferred_checks.check_range("cuda:0", ids.data, 3, IndexError, "test: out of range")
    assert counters.launches - before == 2             # the flag, made once until it is read, and the kernel
    before = counters.launches
    deferred_checks.check_range("cuda:0", ids.data, 2, IndexError, "test: out of range")
    assert counters.launches - before == 1
    with pytest.raises(IndexError, match="test: out of range"):
        deferred_checks.raise_pending()
    deferred_checks.raise_pending()                    # read once: clean again


@pytest.mark.skipif(not devices.is_cuda(devices.default_device()), reason="the cuda pass: a flag on the GPU")
def test_a_bad_id_found_by_the_plain_check_survives_a_kernel_check_of_the_same_kind():
    """ids the kernel does not take (int16) go through the comparison; a bad one found so must still be raised
    after a later call of the same check runs the kernel on good ids."""
    deferred_checks.check_range("cuda:0", tg.tensor([0, 9], device="cuda").data.astype(np.int16), 3, IndexError,
                                "test: out of range")
    deferred_checks.check_range("cuda:0", tg.tensor([0, 1], device="cuda").data, 3, IndexError, "test: out of range")
    with pytest.raises(IndexError, match="test: out of range"):
        deferred_checks.raise_pending()
