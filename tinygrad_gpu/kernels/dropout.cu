// dropout.cu -- dropout in one pass: y = x * keep, the mask drawn inside the kernel, never stored.
//
//     u[i]    = the Philox uniform at counter offset + i under seed   (philox.h; philox_uniform's value)
//     keep[i] = u[i] >= p ? scale : 0
//     y[i]    = x[i] * keep[i]
// Reference: dropout.py (NumPy); launcher: the same file.
//
// One kernel serves both directions.  The forward multiplies x by keep; the backward multiplies
// the output's gradient dy by the very same keep (d(x * keep)/dx = keep), which it regenerates from
// the same (seed, offset) instead of reading a saved mask: a mask of n values would cost n writes,
// n reads and an allocation, where the 10 Philox rounds are a few dozen integer instructions that
// hide behind the memory traffic of x and y.
//
// Who does what: elementwise, with a grid-stride loop, as in gelu.cu.  Thread i of the grid handles
// elements i, i + (threads in the grid), ...; element i reads counter offset + i, so the numbers do
// not depend on the grid, and they are exactly those of a philox_uniform draw of n at (seed, offset):
// the mask is the one `random(shape) >= p` gives on the GPU's stream (nn.functional._dropout_keep).
//
// The arithmetic is that of the unfused x * _dropout_keep(...), so that a training run gives the
// same numbers fused or not: p is compared as a float32 (what NumPy and CuPy compare a float32 array
// with), scale is 1 / (1 - p) rounded to the data's dtype by the launcher (the dtype the unfused mask
// holds), and x * keep is multiplied even where keep is 0, so an inf or NaN in x still gives NaN
// there, as the unfused product does.
//
// 16-bit types (half_precision.h): dropout_multiply_f16 / _bf16 take x and y in __half or
// __nv_bfloat16.  x becomes a float as it is loaded, the product is computed in float32 (exact: two
// 16-bit significands multiply into at most 22 bits) and rounded once into y, as the unfused 16-bit
// product is.
//
// y may be x itself (an in-place multiply): each element is read and then written by the same
// thread, and no other thread touches it, so the pointers are not declared __restrict__.
//
// The residual add of a transformer, out = residual + dropout(branch), is the same loop with one
// more load (dropout_add, _f16, _bf16: a float32 residual stream, a branch in float32 or 16 bits,
// a float32 out).  The unfused pair rounds x * keep to the branch's dtype, then adds it to the
// float32 residual (a 16-bit value is exact in float32); so does the kernel.  Its backward is a
// dropout of the float32 gradient that stores the branch's dtype (dropout_multiply_to_f16 / _bf16):
// the unfused backward casts the gradient to the branch's dtype, then multiplies and rounds again;
// the kernel rounds twice too, in one launch.

#include "half_precision.h"
#include "philox.h"

// v rounded to T and back: what storing v in a T and loading it again gives (v itself for float).
template <typename T>
__device__ __forceinline__ float rounded_to(float v) {
    T stored;
    store_float(&stored, v);
    return load_float(&stored);
}

// y[i] = x[i] * keep[i], or residual[i] + x[i] * keep[i] when residual is not null.  Each rounding of
// the unfused ops is kept: x is first rounded to y's dtype (the unfused backward casts the gradient to
// the branch's dtype before its dropout; a no-op when TX is TY), and x * keep is rounded to x's dtype
// before it is added to the residual (the unfused dropout stores it in the branch's dtype).
template <typename TX, typename TY>
__device__ void dropout_multiply_all(const TX* x, const float* residual, TY* y, long long n, float p, float scale,
                                     unsigned long long seed, unsigned long long offset) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        const float keep = philox_uniform_at(offset + (unsigned long long)i, seed) >= p ? scale : 0.0f;
        float value = rounded_to<TY>(load_float(x + i)) * keep;
        if (residual)
            value = residual[i] + rounded_to<TX>(value);
        store_float(y + i, value);
    }
}

extern "C" __global__ void dropout_multiply(const float* x, float* y, long long n, float p, float scale,
                                            unsigned long long seed, unsigned long long offset) {
    dropout_multiply_all(x, (const float*)nullptr, y, n, p, scale, seed, offset);
}

extern "C" __global__ void dropout_add(const float* x, const float* residual, float* y, long long n, float p,
                                       float scale, unsigned long long seed, unsigned long long offset) {
    dropout_multiply_all(x, residual, y, n, p, scale, seed, offset);
}

#if TG_HALF_PRECISION
extern "C" __global__ void dropout_multiply_f16(const __half* x, __half* y, long long n, float p, float scale,
                                                unsigned long long seed, unsigned long long offset) {
    dropout_multiply_all(x, (const float*)nullptr, y, n, p, scale, seed, offset);
}

extern "C" __global__ void dropout_multiply_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, long long n, float p,
                                                 float scale, unsigned long long seed, unsigned long long offset) {
    dropout_multiply_all(x, (const float*)nullptr, y, n, p, scale, seed, offset);
}

extern "C" __global__ void dropout_multiply_to_f16(const float* x, __half* y, long long n, float p, float scale,
                                                   unsigned long long seed, unsigned long long offset) {
    dropout_multiply_all(x, (const float*)nullptr, y, n, p, scale, seed, offset);
}

extern "C" __global__ void dropout_multiply_to_bf16(const float* x, __nv_bfloat16* y, long long n, float p,
                                                    float scale, unsigned long long seed, unsigned long long offset) {
    dropout_multiply_all(x, (const float*)nullptr, y, n, p, scale, seed, offset);
}

extern "C" __global__ void dropout_add_f16(const __half* x, const float* residual, float* y, long long n, float p,
                                           float scale, unsigned long long seed, unsigned long long offset) {
    dropout_multiply_all(x, residual, y, n, p, scale, seed, offset);
}

extern "C" __global__ void dropout_add_bf16(const __nv_bfloat16* x, const float* residual, float* y, long long n,
                                            float p, float scale, unsigned long long seed, unsigned long long offset) {
    dropout_multiply_all(x, residual, y, n, p, scale, seed, offset);
}
#endif
