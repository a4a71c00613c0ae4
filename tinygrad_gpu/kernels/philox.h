// philox.h -- Philox4x32-10, the counter-based generator behind philox.cu and the kernels that draw
// their own random numbers (dropout.cu; attention's dropout).
//
//     key     (k0, k1)         = (lo32(seed), hi32(seed))
//     counter (c0, c1, c2, c3) = (lo32(c), hi32(c), 0, 0)
//     10 rounds, each with the key as it stands, which then moves on for the next round:
//         (hi0, lo0) = M0 * c0,  (hi1, lo1) = M1 * c2        (64-bit products, split in halves)
//         (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0,  lo1,  hi0 ^ c3 ^ k1,  lo0)
//         (k0, k1) += (W0, W1)                               (mod 2^32)
// and the four words after the rounds are the output.  Source: Salmon, Moraes, Dror, Shaw,
// "Parallel random numbers: as easy as 1, 2, 3" (SC11), as coded in Random123's philox.h
// (_philox4xWround, _philox4xWbumpkey, philox4x32_R); its kat_vectors check philox.py.
//
// The stream's whole state is (seed, offset): the value for element i of a draw is a pure
// function of (seed, offset + i).  So any kernel that reads counter offset + i for its element i
// draws exactly what philox_uniform would have written at index i for the same (seed, offset):
// a fused kernel can draw its own numbers and still match the stream's draw bit for bit.
//
// Why it is exact: the rounds are integer arithmetic (the 32x32-bit product as one 64-bit
// product, with no __umulhi, so the emulator's g++ build runs the same code).  Keeping the top
// 24 bits of a word makes a uniform exactly a float32, never rounded up to 1.0.
#pragma once

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u   // golden ratio
#define PHILOX_W1 0xBB67AE85u   // sqrt(3) - 1
#define TWO_POW_MINUS_24 (1.0f / 16777216.0f)

// The four output words for counter value c under `seed`.
__device__ __forceinline__ void philox4x32_10(unsigned long long c, unsigned long long seed, unsigned int x[4]) {
    unsigned int c0 = (unsigned int)c, c1 = (unsigned int)(c >> 32), c2 = 0, c3 = 0;
    unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
    for (int r = 0; r < 10; ++r) {
        if (r > 0) { k0 += PHILOX_W0; k1 += PHILOX_W1; }
        unsigned long long p0 = (unsigned long long)PHILOX_M0 * c0, p1 = (unsigned long long)PHILOX_M1 * c2;
        unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
        c1 = (unsigned int)p1;
        c3 = (unsigned int)p0;
        c0 = n0;
        c2 = n2;
    }
    x[0] = c0; x[1] = c1; x[2] = c2; x[3] = c3;
}

// A word as a uniform float32 in [0, 1): its top 24 bits times 2^-24 (exact).
__device__ __forceinline__ float philox_word_to_uniform(unsigned int word) {
    return (float)(word >> 8) * TWO_POW_MINUS_24;
}

// The uniform float32 in [0, 1) for counter value c under `seed`: philox_uniform's value at index
// i for c = offset + i.  Word 0 only, as philox_uniform uses.
__device__ __forceinline__ float philox_uniform_at(unsigned long long c, unsigned long long seed) {
    unsigned int x[4];
    philox4x32_10(c, seed, x);
    return philox_word_to_uniform(x[0]);
}
