// cross_entropy.cu -- softmax + cross-entropy over the vocabulary, forward and backward.
//
// For one row of logits x (length C, the vocabulary), target class t and label smoothing e:
//     lse  = log(sum_c exp(x_c))                       (log of the softmax denominator)
//     loss = (1 - e) * (lse - x_t) + e * (lse - mean_c x_c)    (the e term only when e != 0)
//     dloss/dx_c = softmax_c - e / C - (1 - e) * [c == t],   softmax_c = exp(x_c - lse)
// A row whose target equals ignore_index has loss 0 and gradient 0.
// Reference: cross_entropy.py (NumPy); launcher: the same file.
//
// Who does what: one block per row (blockIdx.x = row).  Thread k of the block reads
// elements k, k + blockDim.x, k + 2 * blockDim.x, ... of its row, so neighbouring threads
// read neighbouring addresses (coalesced loads), whatever the row length.
//
// Forward, in one pass over the row: each thread keeps a running maximum m and the sum
// s = sum exp(x - m) of what it has seen ("online softmax"); when a larger value arrives,
// the sum is rescaled by exp(old m - new m).  Two such (m, s) pairs combine the same way, so
// the pairs are reduced across the warp with shuffles and across the block through shared
// memory (block_reduce.h explains the pattern).  Then lse = m + log(s).
// Backward, in one pass: every thread recomputes softmax_c = exp(x_c - lse) from the lse the
// forward saved and writes its elements of dlogits; no reduction is needed.
//
// Why it is numerically safe: every exp() gets an argument <= 0 (x - m with m the maximum,
// x - lse with lse >= max), so nothing overflows even for logits of +-1e4, and s >= 1 after
// the maximum has been seen, so log(s) is finite.  -inf logits (masked classes) give
// exp(-inf) = 0; the guard below keeps exp(-inf - (-inf)) = NaN out of rows that start with them.
// With a -inf logit the mean is -inf too, which is why its term is added only when e != 0:
// 0 * inf would make the loss NaN.
//
// 16-bit types (half_precision.h): cross_entropy_forward_f16 / _bf16 and
// cross_entropy_backward_f16 / _bf16 read the logits in __half or __nv_bfloat16, and the
// backward writes dlogits in the same type.  Each logit becomes a float as it is loaded, and
// everything after is float32, exactly as for float32 logits: the online (m, s) pairs, the sum
// for the mean, lse and the softmax.  losses, lse (saved for the backward) and dlosses stay
// float32 for every logits type: a loss is lse - x_t, a small difference of large numbers, that
// the caller then averages over many rows, and lse enters every softmax value of the backward.
// Each dlogits value is rounded once, to nearest even, as it is stored.
#include "block_reduce.h"
#include "half_precision.h"

// Fold value x into the running pair (m, s).
__device__ __forceinline__ void online_add(float& m, float& s, float x) {
    if (x > m) {
        s = s * __expf(m - x) + 1.0f;
        m = x;
    } else if (x > negative_infinity()) {
        s += __expf(x - m);
    }
}

// Merge pair (m2, s2) into (m, s).
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
    float top = fmaxf(m, m2);
    if (top == negative_infinity()) return;            // both empty: nothing seen yet
    s = s * __expf(m - top) + s2 * __expf(m2 - top);
    m = top;
}

template <typename T>
__device__ void cross_entropy_forward_row(const T* __restrict__ logits, const long long* __restrict__ targets,
                                          float* __restrict__ losses, float* __restrict__ lse_out, int n_classes,
                                          long long ignore_index, float smoothing) {
    const T* x = logits + (long long)blockIdx.x * n_classes;
    float m = negative_infinity(), s = 0.0f, total = 0.0f;
    for (int c = threadIdx.x; c < n_classes; c += blockDim.x) {
        float v = load_float(x + c);
        online_add(m, s, v);
        total += v;
    }
    // Warp: butterfly over (m, s).  Block: one pair per warp in shared memory, merged by all.
    for (int offset = 16; offset > 0; offset >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
        float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
        online_merge(m, s, m2, s2);
    }
    __shared__ float warp_m[32], warp_s[32];
    if (threadIdx.x % 32 == 0) {
        warp_m[threadIdx.x / 32] = m;
        warp_s[threadIdx.x / 32] = s;
    }
    __syncthreads();
    m = warp_m[0];
    s = warp_s[0];
    for (int w = 1; w < (int)blockDim.x / 32; ++w) online_merge(m, s, warp_m[w], warp_s[w]);
    if (smoothing != 0.0f) total = block_sum(total);   // the same branch in every thread: safe

    if (threadIdx.x == 0) {
        const long long t = targets[blockIdx.x];
        const float lse = m + __logf(s);
        lse_out[blockIdx.x] = lse;
        if (t == ignore_index) {
            losses[blockIdx.x] = 0.0f;
        } else if (t < 0 || t >= n_classes) {
            losses[blockIdx.x] = __int_as_float(0x7fc00000);   // NaN: Python checks targets first
        } else {
            float loss = lse - load_float(x + t);
            if (smoothing != 0.0f) loss = (1.0f - smoothing) * loss + smoothing * (lse - total / n_classes);
            losses[blockIdx.x] = loss;
        }
    }
}

template <typename T>
__device__ void cross_entropy_backward_row(const T* __restrict__ logits, const long long* __restrict__ targets,
                                           const float* __restrict__ lse, const float* __restrict__ dlosses,
                                           T* __restrict__ dlogits, int n_classes, long long ignore_index,
                                           float smoothing) {
    const long long row = blockIdx.x;
    const T* x = logits + row * n_classes;
    T* dx = dlogits + row * n_classes;
    const long long t = targets[row];
    // Ignored rows (and a zero upstream gradient) give zeros; the whole block takes this branch.
    const float g = t == ignore_index ? 0.0f : dlosses[row];
    const float row_lse = lse[row], uniform = smoothing / n_classes;
    for (int c = threadIdx.x; c < n_classes; c += blockDim.x) {
        float p = __expf(load_float(x + c) - row_lse);
        store_float(dx + c, g * (p - uniform - (c == t ? 1.0f - smoothing : 0.0f)));
    }
}

extern "C" __global__ void cross_entropy_forward(const float* __restrict__ logits, const long long* __restrict__ targets,
                                                 float* __restrict__ losses, float* __restrict__ lse_out,
                                                 int n_classes, long long ignore_index, float smoothing) {
    cross_entropy_forward_row(logits, targets, losses, lse_out, n_classes, ignore_index, smoothing);
}

extern "C" __global__ void cross_entropy_backward(const float* __restrict__ logits, const long long* __restrict__ targets,
                                                  const float* __restrict__ lse, const float* __restrict__ dlosses,
                                                  float* __restrict__ dlogits, int n_classes, long long ignore_index,
                                                  float smoothing) {
    cross_entropy_backward_row(logits, targets, lse, dlosses, dlogits, n_classes, ignore_index, smoothing);
}

#if TG_HALF_PRECISION
extern "C" __global__ void cross_entropy_forward_f16(const __half* __restrict__ logits,
                                                     const long long* __restrict__ targets,
                                                     float* __restrict__ losses, float* __restrict__ lse_out,
                                                     int n_classes, long long ignore_index, float smoothing) {
    cross_entropy_forward_row(logits, targets, losses, lse_out, n_classes, ignore_index, smoothing);
}

extern "C" __global__ void cross_entropy_forward_bf16(const __nv_bfloat16* __restrict__ logits,
                                                      const long long* __restrict__ targets,
                                                      float* __restrict__ losses, float* __restrict__ lse_out,
                                                      int n_classes, long long ignore_index, float smoothing) {
    cross_entropy_forward_row(logits, targets, losses, lse_out, n_classes, ignore_index, smoothing);
}

extern "C" __global__ void cross_entropy_backward_f16(const __half* __restrict__ logits,
                                                      const long long* __restrict__ targets,
                                                      const float* __restrict__ lse, const float* __restrict__ dlosses,
                                                      __half* __restrict__ dlogits, int n_classes,
                                                      long long ignore_index, float smoothing) {
    cross_entropy_backward_row(logits, targets, lse, dlosses, dlogits, n_classes, ignore_index, smoothing);
}

extern "C" __global__ void cross_entropy_backward_bf16(const __nv_bfloat16* __restrict__ logits,
                                                       const long long* __restrict__ targets,
                                                       const float* __restrict__ lse, const float* __restrict__ dlosses,
                                                       __nv_bfloat16* __restrict__ dlogits, int n_classes,
                                                       long long ignore_index, float smoothing) {
    cross_entropy_backward_row(logits, targets, lse, dlosses, dlogits, n_classes, ignore_index, smoothing);
}
#endif
