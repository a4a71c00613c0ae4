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

#define GELU_K 0.7978845608028654f   // sqrt(2 / pi)
#define GELU_C 0.044715f

extern "C" __global__ void gelu_forward(const float* __restrict__ x, float* __restrict__ y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        float v = x[i];
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        y[i] = 0.5f * v * (1.0f + t);
    }
}

extern "C" __global__ void gelu_backward(const float* __restrict__ x, const float* __restrict__ dy,
                                         float* __restrict__ dx, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        float v = x[i];
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        float sech2 = 1.0f - t * t;
        float slope = 0.5f * (1.0f + t);
        if (sech2 != 0.0f) slope += 0.5f * v * sech2 * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
        dx[i] = dy[i] * slope;
    }
}
