// layernorm.cu -- layer norm over the last dimension, forward and backward.
//
// For one row x of n values, weight w and bias b:
//     mean = sum(x) / n,   var = sum((x - mean)^2) / n,   rstd = 1 / sqrt(var + eps)
//     xhat = (x - mean) * rstd,   out = xhat * w + b
// The forward saves mean and rstd per row; the backward uses them, with g = dout * w:
//     dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//     dweight = sum over rows of dout * xhat,   dbias = sum over rows of dout
// Reference: layernorm.py (NumPy); launcher: the same file.
//
// Who does what
//   layernorm_forward, layernorm_backward: one block per row (blockIdx.x = row); thread k
//   handles elements k, k + blockDim.x, ... of the row (coalesced loads).  The row sums are
//   block reductions (block_reduce.h).
//   layernorm_backward_params: sums run *down the columns*, across rows, so a different
//   layout: a block of 32 x 8 threads owns 32 neighbouring columns; threadIdx.x picks the
//   column, threadIdx.y = 0..7 takes every 8th row.  The 8 partial sums of each column
//   meet in shared memory and thread y = 0 adds them up in a fixed order.  No atomics,
//   so the result is the same bit for bit on every run.
//
// Why it is numerically safe: the variance is computed in a second pass as the mean of
// (x - mean)^2, never as mean(x^2) - mean^2, which cancels catastrophically when |mean| is
// large compared to the spread (e.g. x = 1000 + noise).  eps keeps rsqrt finite for a
// constant row.  The second pass reads the row again from memory (or cache): a
// bandwidth cost we pay for accuracy.
#include "block_reduce.h"

extern "C" __global__ void layernorm_forward(const float* __restrict__ x, const float* __restrict__ weight,
                                             const float* __restrict__ bias, float* __restrict__ out,
                                             float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                             int n, float eps) {
    const long long row = blockIdx.x;
    const float* xr = x + row * n;
    float sum = 0.0f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) sum += xr[c];
    const float mean = block_sum(sum) / n;
    float squares = 0.0f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        float d = xr[c] - mean;
        squares += d * d;
    }
    const float rstd = rsqrtf(block_sum(squares) / n + eps);
    float* o = out + row * n;
    for (int c = threadIdx.x; c < n; c += blockDim.x) o[c] = (xr[c] - mean) * rstd * weight[c] + bias[c];
    if (threadIdx.x == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

extern "C" __global__ void layernorm_backward(const float* __restrict__ x, const float* __restrict__ weight,
                                              const float* __restrict__ mean, const float* __restrict__ rstd,
                                              const float* __restrict__ dout, float* __restrict__ dx, int n) {
    const long long row = blockIdx.x;
    const float* xr = x + row * n;
    const float* dr = dout + row * n;
    const float m = mean[row], r = rstd[row];
    float sum_g = 0.0f, sum_g_xhat = 0.0f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        float g = dr[c] * weight[c];
        sum_g += g;
        sum_g_xhat += g * (xr[c] - m) * r;
    }
    const float mean_g = block_sum(sum_g) / n;
    const float mean_g_xhat = block_sum(sum_g_xhat) / n;
    float* dxr = dx + row * n;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        float xhat = (xr[c] - m) * r;
        dxr[c] = r * (dr[c] * weight[c] - mean_g - xhat * mean_g_xhat);
    }
}

// Launch with blockDim = (32, 8) and gridDim.x = ceil(n / 32).
extern "C" __global__ void layernorm_backward_params(const float* __restrict__ x, const float* __restrict__ mean,
                                                     const float* __restrict__ rstd, const float* __restrict__ dout,
                                                     float* __restrict__ dweight, float* __restrict__ dbias,
                                                     int n_rows, int n) {
    __shared__ float partial_w[8][33], partial_b[8][33];   // 33: a pad that avoids shared-memory bank conflicts
    const int col = blockIdx.x * 32 + threadIdx.x;
    float dw = 0.0f, db = 0.0f;
    if (col < n) {
        for (int row = threadIdx.y; row < n_rows; row += 8) {
            const long long at = (long long)row * n + col;
            dw += dout[at] * (x[at] - mean[row]) * rstd[row];
            db += dout[at];
        }
    }
    partial_w[threadIdx.y][threadIdx.x] = dw;
    partial_b[threadIdx.y][threadIdx.x] = db;
    __syncthreads();                                       // every thread reaches it, inside the grid or not
    if (threadIdx.y == 0 && col < n) {
        for (int k = 1; k < 8; ++k) {
            dw += partial_w[k][threadIdx.x];
            db += partial_b[k][threadIdx.x];
        }
        dweight[col] = dw;
        dbias[col] = db;
    }
}
