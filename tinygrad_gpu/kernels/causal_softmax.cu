// causal_softmax.cu -- the softmax of causal attention: scale, mask the future, normalise.
//
// scores has shape (..., L, S), stored as rows of S values; row r is query position
// i = r % L.  Query i may look at key positions j <= i (PyTorch's is_causal=True, aligned
// to the top left).  With z_j = scale * score_j:
//     probs_j = exp(z_j - max) / sum_{k <= i} exp(z_k - max)   for j <= i,   0 for j > i
// Backward, from y = probs and dy = dprobs:
//     dscores_j = scale * y_j * (dy_j - sum_k y_k dy_k)        (0 where masked)
// Reference: causal_softmax.py (NumPy); launcher: the same file.
//
// Who does what: one block per row (blockIdx.x = row); thread k handles columns
// k, k + blockDim.x, ...  Forward: a block maximum, then a block sum of the exponentials
// (two reductions, block_reduce.h), then each thread writes its columns.  Backward: one block
// sum (the dot product y . dy), then each thread writes its columns.  Masked columns are
// never read: the loops stop at the diagonal, and the output there is written as 0.
//
// Why it is numerically safe: subtracting the row maximum makes every exp() argument <= 0,
// so nothing overflows, and the maximum's own term is exp(0) = 1, so the sum is >= 1 and
// the division is safe.  Every row has at least one visible column (j = 0), so no row is
// all -inf, the case that gives NaN in a masked softmax.
//
// 16-bit types (half_precision.h): causal_softmax_forward_f16 / _bf16 read scores and write
// probs in __half or __nv_bfloat16, causal_softmax_backward_f16 / _bf16 read probs and dprobs
// and write dscores in them.  Every value becomes a float as it is loaded; the scaling, the
// maximum, the exponentials, the sums and the dot product are float32, exactly as for float32
// data, and each output is rounded once, to nearest even, as it is stored.  (Probabilities
// stored in 16 bits no longer sum to exactly 1; the backward uses them as they are stored.)
#include "block_reduce.h"
#include "half_precision.h"

template <typename T>
__device__ void causal_softmax_forward_row(const T* __restrict__ scores, T* __restrict__ probs, int L, int S,
                                           float scale) {
    const long long row = blockIdx.x;
    const int visible = min((int)(row % L) + 1, S);     // columns 0 .. visible-1
    const T* z = scores + row * S;
    float m = negative_infinity();
    for (int j = threadIdx.x; j < visible; j += blockDim.x) m = fmaxf(m, scale * load_float(z + j));
    m = block_max(m);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < visible; j += blockDim.x) sum += __expf(scale * load_float(z + j) - m);
    const float inv = 1.0f / block_sum(sum);
    T* p = probs + row * S;
    for (int j = threadIdx.x; j < S; j += blockDim.x)
        store_float(p + j, j < visible ? __expf(scale * load_float(z + j) - m) * inv : 0.0f);
}

template <typename T>
__device__ void causal_softmax_backward_row(const T* __restrict__ probs, const T* __restrict__ dprobs,
                                            T* __restrict__ dscores, int L, int S, float scale) {
    const long long row = blockIdx.x;
    const int visible = min((int)(row % L) + 1, S);
    const T* y = probs + row * S;
    const T* dy = dprobs + row * S;
    float dot = 0.0f;
    for (int j = threadIdx.x; j < visible; j += blockDim.x) dot += load_float(y + j) * load_float(dy + j);
    dot = block_sum(dot);
    T* dz = dscores + row * S;
    for (int j = threadIdx.x; j < S; j += blockDim.x)
        store_float(dz + j, j < visible ? scale * load_float(y + j) * (load_float(dy + j) - dot) : 0.0f);
}

extern "C" __global__ void causal_softmax_forward(const float* __restrict__ scores, float* __restrict__ probs,
                                                  int L, int S, float scale) {
    causal_softmax_forward_row(scores, probs, L, S, scale);
}

extern "C" __global__ void causal_softmax_backward(const float* __restrict__ probs, const float* __restrict__ dprobs,
                                                   float* __restrict__ dscores, int L, int S, float scale) {
    causal_softmax_backward_row(probs, dprobs, dscores, L, S, scale);
}

#if TG_HALF_PRECISION
extern "C" __global__ void causal_softmax_forward_f16(const __half* __restrict__ scores, __half* __restrict__ probs,
                                                      int L, int S, float scale) {
    causal_softmax_forward_row(scores, probs, L, S, scale);
}

extern "C" __global__ void causal_softmax_forward_bf16(const __nv_bfloat16* __restrict__ scores,
                                                       __nv_bfloat16* __restrict__ probs, int L, int S, float scale) {
    causal_softmax_forward_row(scores, probs, L, S, scale);
}

extern "C" __global__ void causal_softmax_backward_f16(const __half* __restrict__ probs,
                                                       const __half* __restrict__ dprobs,
                                                       __half* __restrict__ dscores, int L, int S, float scale) {
    causal_softmax_backward_row(probs, dprobs, dscores, L, S, scale);
}

extern "C" __global__ void causal_softmax_backward_bf16(const __nv_bfloat16* __restrict__ probs,
                                                        const __nv_bfloat16* __restrict__ dprobs,
                                                        __nv_bfloat16* __restrict__ dscores, int L, int S,
                                                        float scale) {
    causal_softmax_backward_row(probs, dprobs, dscores, L, S, scale);
}
#endif
