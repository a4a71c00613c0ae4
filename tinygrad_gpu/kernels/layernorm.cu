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
//
// 16-bit types (half_precision.h): the entry points ending _f16 / _bf16 take x, weight, bias,
// dout and write out, dx, dweight and dbias in __half or __nv_bfloat16 (all of one type).
// Every value becomes a float as it is loaded; the sums, mean, variance, rstd, xhat and the
// column sums of the parameters' gradients are float32, exactly as for float32 data, and mean
// and rstd are saved as float32 (the backward needs their digits: a bfloat16 mean of
// x = 1000 + noise would be off by up to 2, more than the noise).  Each output value is
// rounded once, to nearest even, as it is stored.
#include "block_reduce.h"
#include "half_precision.h"

template <typename T>
__device__ void layernorm_forward_row(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
                                      T* __restrict__ out, float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                      int n, float eps) {
    const long long row = blockIdx.x;
    const T* xr = x + row * n;
    float sum = 0.0f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) sum += load_float(xr + c);
    const float mean = block_sum(sum) / n;
    float squares = 0.0f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        float d = load_float(xr + c) - mean;
        squares += d * d;
    }
    const float rstd = rsqrtf(block_sum(squares) / n + eps);
    T* o = out + row * n;
    for (int c = threadIdx.x; c < n; c += blockDim.x)
        store_float(o + c, (load_float(xr + c) - mean) * rstd * load_float(weight + c) + load_float(bias + c));
    if (threadIdx.x == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

template <typename T>
__device__ void layernorm_backward_row(const T* __restrict__ x, const T* __restrict__ weight,
                                       const float* __restrict__ mean, const float* __restrict__ rstd,
                                       const T* __restrict__ dout, T* __restrict__ dx, int n) {
    const long long row = blockIdx.x;
    const T* xr = x + row * n;
    const T* dr = dout + row * n;
    const float m = mean[row], r = rstd[row];
    float sum_g = 0.0f, sum_g_xhat = 0.0f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        float g = load_float(dr + c) * load_float(weight + c);
        sum_g += g;
        sum_g_xhat += g * (load_float(xr + c) - m) * r;
    }
    const float mean_g = block_sum(sum_g) / n;
    const float mean_g_xhat = block_sum(sum_g_xhat) / n;
    T* dxr = dx + row * n;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        float xhat = (load_float(xr + c) - m) * r;
        store_float(dxr + c, r * (load_float(dr + c) * load_float(weight + c) - mean_g - xhat * mean_g_xhat));
    }
}

template <typename T>
__device__ void layernorm_backward_params_columns(const T* __restrict__ x, const float* __restrict__ mean,
                                                  const float* __restrict__ rstd, const T* __restrict__ dout,
                                                  T* __restrict__ dweight, T* __restrict__ dbias, int n_rows, int n) {
    __shared__ float partial_w[8][33], partial_b[8][33];   // 33: a pad that avoids shared-memory bank conflicts
    const int col = blockIdx.x * 32 + threadIdx.x;
    float dw = 0.0f, db = 0.0f;
    if (col < n) {
        for (int row = threadIdx.y; row < n_rows; row += 8) {
            const long long at = (long long)row * n + col;
            const float d = load_float(dout + at);
            dw += d * (load_float(x + at) - mean[row]) * rstd[row];
            db += d;
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
        store_float(dweight + col, dw);
        store_float(dbias + col, db);
    }
}

extern "C" __global__ void layernorm_forward(const float* __restrict__ x, const float* __restrict__ weight,
                                             const float* __restrict__ bias, float* __restrict__ out,
                                             float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                             int n, float eps) {
    layernorm_forward_row(x, weight, bias, out, mean_out, rstd_out, n, eps);
}

extern "C" __global__ void layernorm_backward(const float* __restrict__ x, const float* __restrict__ weight,
                                              const float* __restrict__ mean, const float* __restrict__ rstd,
                                              const float* __restrict__ dout, float* __restrict__ dx, int n) {
    layernorm_backward_row(x, weight, mean, rstd, dout, dx, n);
}

// Launch with blockDim = (32, 8) and gridDim.x = ceil(n / 32), in every dtype.
extern "C" __global__ void layernorm_backward_params(const float* __restrict__ x, const float* __restrict__ mean,
                                                     const float* __restrict__ rstd, const float* __restrict__ dout,
                                                     float* __restrict__ dweight, float* __restrict__ dbias,
                                                     int n_rows, int n) {
    layernorm_backward_params_columns(x, mean, rstd, dout, dweight, dbias, n_rows, n);
}

#if TG_HALF_PRECISION
extern "C" __global__ void layernorm_forward_f16(const __half* __restrict__ x, const __half* __restrict__ weight,
                                                 const __half* __restrict__ bias, __half* __restrict__ out,
                                                 float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                                 int n, float eps) {
    layernorm_forward_row(x, weight, bias, out, mean_out, rstd_out, n, eps);
}

extern "C" __global__ void layernorm_forward_bf16(const __nv_bfloat16* __restrict__ x,
                                                  const __nv_bfloat16* __restrict__ weight,
                                                  const __nv_bfloat16* __restrict__ bias,
                                                  __nv_bfloat16* __restrict__ out, float* __restrict__ mean_out,
                                                  float* __restrict__ rstd_out, int n, float eps) {
    layernorm_forward_row(x, weight, bias, out, mean_out, rstd_out, n, eps);
}

extern "C" __global__ void layernorm_backward_f16(const __half* __restrict__ x, const __half* __restrict__ weight,
                                                  const float* __restrict__ mean, const float* __restrict__ rstd,
                                                  const __half* __restrict__ dout, __half* __restrict__ dx, int n) {
    layernorm_backward_row(x, weight, mean, rstd, dout, dx, n);
}

extern "C" __global__ void layernorm_backward_bf16(const __nv_bfloat16* __restrict__ x,
                                                   const __nv_bfloat16* __restrict__ weight,
                                                   const float* __restrict__ mean, const float* __restrict__ rstd,
                                                   const __nv_bfloat16* __restrict__ dout,
                                                   __nv_bfloat16* __restrict__ dx, int n) {
    layernorm_backward_row(x, weight, mean, rstd, dout, dx, n);
}

extern "C" __global__ void layernorm_backward_params_f16(const __half* __restrict__ x, const float* __restrict__ mean,
                                                         const float* __restrict__ rstd,
                                                         const __half* __restrict__ dout,
                                                         __half* __restrict__ dweight, __half* __restrict__ dbias,
                                                         int n_rows, int n) {
    layernorm_backward_params_columns(x, mean, rstd, dout, dweight, dbias, n_rows, n);
}

extern "C" __global__ void layernorm_backward_params_bf16(const __nv_bfloat16* __restrict__ x,
                                                          const float* __restrict__ mean,
                                                          const float* __restrict__ rstd,
                                                          const __nv_bfloat16* __restrict__ dout,
                                                          __nv_bfloat16* __restrict__ dweight,
                                                          __nv_bfloat16* __restrict__ dbias, int n_rows, int n) {
    layernorm_backward_params_columns(x, mean, rstd, dout, dweight, dbias, n_rows, n);
}
#endif
