// gelu.cu -- GELU with the tanh approximation (GPT-2's), forward and backward.
//
//     u = k * (x + 0.044715 x^3),  k = sqrt(2 / pi),  t = tanh(u)
//     gelu(x)  = 0.5 x (1 + t)
//     gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2)
// Reference: gelu.py (NumPy); launcher: the same file.
//
// Who does what: elementwise, with a grid-stride loop.  Thread i of the whole grid handles
// elements i, i + (threads in the grid), ...  The launcher caps the number of blocks, and
// the loop covers any n, including n larger than the grid.
//
// Why it is numerically safe: tanhf saturates to +-1 for large |u| instead of overflowing
// (a formula with exp(2u) would give inf / inf).  For huge |x| (> about 1e13) x^3 overflows
// to inf, t = +-1 exactly and 1 - t^2 = 0; the derivative's second term would be
// 0 * inf = NaN, so it is skipped when 1 - t^2 is exactly 0 (its true value is negligible).
//
// 16-bit types (half_precision.h): gelu_forward_f16 / _bf16 and gelu_backward_f16 / _bf16 take
// x, dy and the output in __half or __nv_bfloat16.  x and dy become floats as they are loaded,
// t, the slope and the product are computed in float32 exactly as for float32 data, and y or dx
// is rounded once, to nearest even, into the 16-bit output.
//
// dx may be dy itself (the launcher computes in the incoming gradient when nobody else holds it):
// element i is read and then written by one thread and no other, so those two pointers are not
// declared __restrict__.

#include "half_precision.h"

#define GELU_K 0.7978845608028654f   // sqrt(2 / pi)
#define GELU_C 0.044715f

template <typename T>
__device__ void gelu_forward_all(const T* __restrict__ x, T* __restrict__ y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        float v = load_float(x + i);
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        store_float(y + i, 0.5f * v * (1.0f + t));
    }
}

template <typename T>
__device__ void gelu_backward_all(const T* __restrict__ x, const T* dy, T* dx, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        float v = load_float(x + i);
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        float sech2 = 1.0f - t * t;
        float slope = 0.5f * (1.0f + t);
        if (sech2 != 0.0f) slope += 0.5f * v * sech2 * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
        store_float(dx + i, load_float(dy + i) * slope);
    }
}

extern "C" __global__ void gelu_forward(const float* __restrict__ x, float* __restrict__ y, long long n) {
    gelu_forward_all(x, y, n);
}

extern "C" __global__ void gelu_backward(const float* __restrict__ x, const float* dy, float* dx, long long n) {
    gelu_backward_all(x, dy, dx, n);
}

#if TG_HALF_PRECISION
extern "C" __global__ void gelu_forward_f16(const __half* __restrict__ x, __half* __restrict__ y, long long n) {
    gelu_forward_all(x, y, n);
}

extern "C" __global__ void gelu_forward_bf16(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                             long long n) {
    gelu_forward_all(x, y, n);
}

extern "C" __global__ void gelu_backward_f16(const __half* __restrict__ x, const __half* dy, __half* dx,
                                             long long n) {
    gelu_backward_all(x, dy, dx, n);
}

extern "C" __global__ void gelu_backward_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* dy,
                                              __nv_bfloat16* dx, long long n) {
    gelu_backward_all(x, dy, dx, n);
}
#endif
