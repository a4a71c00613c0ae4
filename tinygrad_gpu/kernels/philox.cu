// philox.cu -- counter-based random numbers: Philox4x32-10, uniform and normal float32.
//
//     key     (k0, k1)         = (lo32(seed), hi32(seed))
//     counter (c0, c1, c2, c3) = (lo32(c), hi32(c), 0, 0),   c = offset + i  (mod 2^64)
//     10 rounds, each with the key as it stands, which then moves on for the next round:
//         (hi0, lo0) = M0 * c0,  (hi1, lo1) = M1 * c2        (64-bit products, split in halves)
//         (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0,  lo1,  hi0 ^ c3 ^ k1,  lo0)
//         (k0, k1) += (W0, W1)                               (mod 2^32)
//     uniform[i] = (x0 >> 8) * 2^-24                                   in [0, 1)
//     normal[i]  = sqrt(-2 ln u1) * cos(2 pi u2),  u1 = ((x0 >> 8) + 1) * 2^-24 in (0, 1],
//                                                  u2 = (x1 >> 8) * 2^-24       in [0, 1)
// with (x0, x1, x2, x3) the output of the rounds (x2, x3 unused).  Source: Salmon, Moraes, Dror,
// Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC11), as coded in Random123's philox.h
// (_philox4xWround, _philox4xWbumpkey, philox4x32_R); its kat_vectors check philox.py.
// The rounds are philox.h's (philox4x32_10), which dropout.cu includes too.
// Reference: philox.py (NumPy); launcher: the same file.
//
// The stream's whole state is (seed, offset): element i of a draw is a pure function of
// (seed, offset + i), so a draw of n values advances the offset by n, and two draws at offset
// and offset + n give exactly what one draw of 2n at offset gives.
//
// Who does what: elementwise, with a grid-stride loop, as in gelu.cu.  No thread depends on
// another, so any grid gives the same numbers.
//
// Why it is numerically safe: the rounds are exact integer arithmetic (the 32x32-bit product
// as one 64-bit product, with no __umulhi, so the emulator's g++ build runs the same code).
// Keeping the top 24 bits makes every value exactly a float32, never rounded up to 1.0;
// u1 >= 2^-24, so the log is finite and |normal| <= sqrt(2 * 24 ln 2) ~ 5.77.

// The rounds themselves live in philox.h, shared with the kernels that draw their own numbers.
#include "philox.h"

#define TWO_PI 6.2831853071795865f

extern "C" __global__ void philox_uniform(float* __restrict__ out, long long n, unsigned long long seed,
                                          unsigned long long offset) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        out[i] = philox_uniform_at(offset + (unsigned long long)i, seed);
    }
}

extern "C" __global__ void philox_normal(float* __restrict__ out, long long n, unsigned long long seed,
                                         unsigned long long offset) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        unsigned int x[4];
        philox4x32_10(offset + (unsigned long long)i, seed, x);
        float u1 = (float)((x[0] >> 8) + 1u) * TWO_POW_MINUS_24;
        float u2 = (float)(x[1] >> 8) * TWO_POW_MINUS_24;
        out[i] = sqrtf(-2.0f * logf(u1)) * cosf(TWO_PI * u2);
    }
}
