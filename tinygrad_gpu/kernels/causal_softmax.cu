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
#include "block_reduce.h"

extern "C" __global__ void causal_softmax_forward(const float* __restrict__ scores, float* __restrict__ probs,
                                                  int L, int S, float scale) {
    const long long row = blockIdx.x;
    const int visible = min((int)(row % L) + 1, S);     // columns 0 .. visible-1
    const float* z = scores + row * S;
    float m = negative_infinity();
    for (int j = threadIdx.x; j < visible; j += blockDim.x) m = fmaxf(m, scale * z[j]);
    m = block_max(m);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < visible; j += blockDim.x) sum += __expf(scale * z[j] - m);
    const float inv = 1.0f / block_sum(sum);
    float* p = probs + row * S;
    for (int j = threadIdx.x; j < S; j += blockDim.x) p[j] = j < visible ? __expf(scale * z[j] - m) * inv : 0.0f;
}

extern "C" __global__ void causal_softmax_backward(const float* __restrict__ probs, const float* __restrict__ dprobs,
                                                   float* __restrict__ dscores, int L, int S, float scale) {
    const long long row = blockIdx.x;
    const int visible = min((int)(row % L) + 1, S);
    const float* y = probs + row * S;
    const float* dy = dprobs + row * S;
    float dot = 0.0f;
    for (int j = threadIdx.x; j < visible; j += blockDim.x) dot += y[j] * dy[j];
    dot = block_sum(dot);
    float* dz = dscores + row * S;
    for (int j = threadIdx.x; j < S; j += blockDim.x) dz[j] = j < visible ? scale * y[j] * (dy[j] - dot) : 0.0f;
}
