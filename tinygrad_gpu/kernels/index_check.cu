// index_check.cu -- is every index in range? The answer stays on the GPU, in one flag.
//
// An embedding's token ids, a loss's class targets: an id outside 0 .. high - 1 must raise, but
// reading the ids on the host would make it wait for the GPU in every step. So the GPU checks them
// and raises a flag (tinygrad_gpu/deferred_checks.py reads it when the host next reads that GPU):
//     found = 1  if some ids[i] is < 0 or >= high, and is not the ignored value (when there is one)
// found is left as it is when every id is fine: it stays 1 from an earlier bad call until it is
// read, so one flag serves every call of one check. That is the composition this kernel fuses,
// `found |= any((ids < 0) | (ids >= high) & (ids != ignore))`, five launches and four arrays, in one
// launch and none.
// Reference: index_check.py (NumPy); launcher: the same file.
//
// Who does what: a grid-stride loop, one id per thread per pass. Threads that find a bad id all
// write the same 1 to the flag; which write lands last does not matter, so no atomics are needed.
// Two entry points: int64 ids (index_check) and int32 ids (index_check_i32).
template <typename Index>
__device__ __forceinline__ void check_ids(const Index* __restrict__ ids, long long n, long long high, long long ignore,
                                          int has_ignore, unsigned int* __restrict__ found) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        const long long id = ids[i];
        if ((id < 0 || id >= high) && !(has_ignore && id == ignore)) *found = 1u;
    }
}

extern "C" __global__ void index_check(const long long* __restrict__ ids, long long n, long long high,
                                       long long ignore, int has_ignore, unsigned int* __restrict__ found) {
    check_ids(ids, n, high, ignore, has_ignore, found);
}

extern "C" __global__ void index_check_i32(const int* __restrict__ ids, long long n, long long high, long long ignore,
                                           int has_ignore, unsigned int* __restrict__ found) {
    check_ids(ids, n, high, ignore, has_ignore, found);
}
