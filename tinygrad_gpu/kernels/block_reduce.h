// block_reduce.h -- sums and maxima across a warp and across a block, shared by our kernels.
//
// Warp level: a "butterfly".  At step `offset` (16, 8, 4, 2, 1) every lane adds the value of
// the lane whose index differs in that one bit (__shfl_xor_sync).  After five steps every
// lane holds the total of all 32 lanes, and the same total: a + b == b + a exactly in IEEE
// arithmetic, so the two lanes of each pair compute identical sums.
//
// Block level: lane 0 of each warp writes its warp's total to shared memory; after a
// __syncthreads every thread adds those (at most 32) totals itself, in the same order, so
// all threads get the same result without another round of communication.  A second
// __syncthreads keeps the scratch space from being overwritten by the next call before
// everybody has read it.
//
// Requirements: a 1-D block whose size is a multiple of 32 (our launchers choose that), and
// every thread of the block calls these functions (they contain barriers).
#pragma once

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

__device__ float block_sum(float v) {
    __shared__ float warp_totals[32];
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < (int)blockDim.x / 32; ++w) total += warp_totals[w];
    __syncthreads();
    return total;
}

__device__ float block_max(float v) {
    __shared__ float warp_maxima[32];
    v = warp_max(v);
    if (threadIdx.x % 32 == 0) warp_maxima[threadIdx.x / 32] = v;
    __syncthreads();
    float m = warp_maxima[0];
    for (int w = 1; w < (int)blockDim.x / 32; ++w) m = fmaxf(m, warp_maxima[w]);
    __syncthreads();
    return m;
}

// -infinity without math.h (NVRTC compiles these files with no headers at all).
__device__ __forceinline__ float negative_infinity() { return __int_as_float(0xff800000); }
