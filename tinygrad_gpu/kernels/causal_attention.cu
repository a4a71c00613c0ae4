// causal_attention.cu -- causal self-attention, forward and backward, tile by tile: the T x T
// scores never reach memory (the idea of FlashAttention, Dao et al. 2022, written plainly).
//
// For one (batch b, head h): q, k, v are (L, E) with L == S (every query position is also a key
// position), query i sees keys j <= i, and with keep_ij the dropout's decision (below):
//     s_ij   = scale * q_i . k_j                               (j <= i; the future is masked out)
//     lse_i  = log sum_{j <= i} exp(s_ij)                      (the row's log-sum-exp)
//     p_ij   = exp(s_ij - lse_i)                               (the softmax; 0 for j > i)
//     w_ij   = p_ij * keep_ij * keep_scale                     (the weights after dropout)
//     out_i  = sum_j w_ij v_j
// The forward writes out and lse, nothing else.  The backward, from dout, recomputes p from q, k
// and lse (two products instead of reading a T x T matrix):
//     D_i    = dout_i . out_i           ( = sum_j w_ij (dout_i . v_j) = sum_j p_ij dp_ij )
//     dp_ij  = keep_ij * keep_scale * (dout_i . v_j)
//     ds_ij  = p_ij (dp_ij - D_i)                              (the softmax's backward)
//     dq_i   = scale * sum_j ds_ij k_j
//     dk_j   = scale * sum_i ds_ij q_i
//     dv_j   = sum_i w_ij dout_i
// Reference: causal_attention.py (NumPy, the same formulas on whole matrices); launcher: the same.
//
// Dropout, drawn here and never stored: keep_ij = 1 iff the Philox uniform (philox.h) at counter
//     offset + ((b H + h) L + i) S + j
// is >= p (compared as float32), which is exactly the mask `random(shape) >= p` of a GPU stream's
// draw of B*H*L*S uniforms at (seed, offset): nn.functional._dropout_keep's, element for element.
// The backward regenerates the same decisions from the same (seed, offset).  keep_scale is
// 1 / (1 - p) as the launcher rounds it (to the data's dtype, as the unfused mask holds it).
// p = 0 draws nothing.
//
// Layout: q, k, v, out and dout are read through element strides (batch, head, time; the last
// dimension contiguous), so q, k, v may be views of one (B, T, 3, H, E) projection with no copy,
// and out may be laid out as (B, T, H, E), whose heads merge back into (B, T, C) as a view.  dq,
// dk and dv are written through strides of their own too: given q's, k's and v's, the three
// gradients land in one buffer laid out like the projection, which the backward of the reshape
// and permute that cut q, k, v out of it passes on as views (no zero-filled buffer, no slice
// sums, no copies); given contiguous ones, they are three (B, H, L, E) arrays.  lse is
// contiguous: (B, H, L).
//
// Who does what.  Tiles of TILE = 32 positions; a block has 128 threads, 4 per position
// ("lanes"): thread t serves position t / 4 of the block's tile, and of each vector of E values it
// holds the dimensions d = lane, lane + 4, lane + 8, ...  (lane = t % 4) in registers.  A dot
// product is each lane's partial sum over its dimensions, added across the 4 lanes by two
// butterfly shuffles (row_sum), after which all 4 lanes hold the same value (as in block_reduce.h:
// a + b == b + a exactly).  So the 4 lanes of a position compute identical softmax statistics and
// never disagree.
//   causal_attention_forward       grid (B*H, ceil(L / TILE)): a block owns a tile of queries and
//                                  walks the key tiles 0 .. its diagonal, each staged (k and v,
//                                  as floats) in shared memory.
//   causal_attention_backward_dq   the same grid and walk: dq_i for its queries.
//   causal_attention_backward_dkdv grid (B*H, ceil(L / TILE)): a block owns a tile of keys and
//                                  walks the query tiles from its diagonal to L - 1, each staged
//                                  (q and dout, and each query's lse and D) in shared memory.
// Each output element is written by one thread, once: no atomics, and the same numbers on every
// run.  The backward is two kernels because dq sums over keys and dk, dv over queries: one kernel
// would have to add into dq from many blocks.  D_i is computed where it is needed (by the dq
// kernel for its queries and by the dkdv kernel for each query tile it visits) instead of in a
// launch of its own: E products per query, beside the E per (query, key) pair of the scores.
// Shared memory: two tiles of 32 x 128 floats, 32 KiB (head size at most HEAD_MAX = 128).
//
// The online softmax (forward).  A query row keeps a running maximum m, a running sum l of
// exp(s_ij - m) and an unnormalised output acc = sum_j w_ij-before-normalising v_j, all over the
// keys seen so far.  For each new tile of scores, with tile maximum m_t:
//     m'  = max(m, m_t),   alpha = exp(m - m')               (how much the old terms shrink)
//     l   = alpha l + sum_j exp(s_ij - m')
//     acc = alpha acc + sum_j exp(s_ij - m') keep_ij keep_scale v_j
// and at the end out_i = acc / l, lse_i = m + log l.  The normalisation uses the softmax's sum
// before dropout, as softmax-then-dropout does.
//
// Why it is numerically safe: every exp() argument is <= 0 (each score minus a maximum at least as
// large), so nothing overflows; the first key tile holds key 0, which every query sees, so after
// it m is finite and l >= 1 (the maximum's own term is exp(0)), and alpha = exp(-inf - m') = 0 the
// one time m is still -infinity.  A tile that a query sees none of (all its scores -inf) leaves
// m unchanged, alpha = 1 and adds exp(-inf) = 0.  The backward's exp(s_ij - lse_i) <= 1 for the same
// reason.  Positions past L in the last tile compute on a copy of position L - 1 (so every lane
// reaches every shuffle and barrier) and write nothing.
//
// 16-bit types (half_precision.h): causal_attention_forward_f16 / _bf16 and the backward's read q,
// k, v, out, dout and write out, dq, dk, dv in __half or __nv_bfloat16; everything in between, and
// lse, is float32, and each output is rounded once as it is stored.
// block_reduce.h for negative_infinity() (its block sums are not used here).
#include "block_reduce.h"
#include "half_precision.h"
#include "philox.h"

#define TILE 32                       // positions per tile: queries per block, keys per step
#define LANES 4                       // threads per position
#define HEAD_MAX 128                  // the largest head size E
#define SLOTS (HEAD_MAX / LANES)      // dimensions per lane: d = lane + LANES * slot
#define THREADS (TILE * LANES)        // 128 threads per block

// Where the rows of one tensor live: element (b, h, t, d) is at base[b * batch + h * head + t * time + d].
struct Strides {
    long long batch, head, time;
};

template <typename P>     // P: T or const T
__device__ __forceinline__ P* row_of(P* base, Strides s, int b, int h, int t) {
    return base + b * s.batch + h * s.head + t * s.time;
}

// The sum of v over the 4 lanes of a position; every lane gets the same total.
__device__ __forceinline__ float row_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}

// This lane's dimensions of one row of E values, as floats (0 past E).
template <typename T>
__device__ __forceinline__ void load_row(const T* row, int E, int lane, float out[SLOTS]) {
#pragma unroll
    for (int c = 0; c < SLOTS; ++c) {
        const int d = lane + LANES * c;
        out[c] = d < E ? load_float(row + d) : 0.0f;
    }
}

// This lane's part of (its registers) . (a row of a shared tile), summed across the 4 lanes.
__device__ __forceinline__ float dot_with(const float mine[SLOTS], const float* tile_row, int E, int lane) {
    float partial = 0.0f;
#pragma unroll
    for (int c = 0; c < SLOTS; ++c) {
        const int d = lane + LANES * c;
        if (d < E) partial += mine[c] * tile_row[d];
    }
    return row_sum(partial);
}

// The dropout's decisions for TILE elements whose counters are first + n * step (n = 0 .. TILE-1), as
// bits: bit n is set iff element n is kept.  Each lane draws a quarter of them; an OR across the 4
// lanes gives every lane all 32.  With p = 0 every element is kept and nothing is drawn.
__device__ __forceinline__ unsigned int keep_bits(unsigned long long first, unsigned long long step, int lane, float p,
                                                  unsigned long long seed) {
    if (p <= 0.0f) return 0xffffffffu;       // the same p in every thread: no lane skips a shuffle alone
    unsigned int bits = 0u;
    for (int n = lane; n < TILE; n += LANES)
        if (philox_uniform_at(first + n * step, seed) >= p) bits |= 1u << n;
    bits |= __shfl_xor_sync(0xffffffffu, bits, 1);
    bits |= __shfl_xor_sync(0xffffffffu, bits, 2);
    return bits;
}

// Rows first .. first + TILE - 1 of a (.., E) tensor into a shared tile as floats; 0 past `last`.
// Every thread of the block takes part (a strided loop over the tile's TILE * E values).
template <typename T>
__device__ void stage_tile(float tile[TILE][HEAD_MAX], const T* base, Strides s, int b, int h, int first, int last,
                           int E) {
    for (int x = threadIdx.x; x < TILE * E; x += blockDim.x) {
        const int n = x / E, d = x % E;
        tile[n][d] = first + n <= last ? load_float(row_of(base, s, b, h, first + n) + d) : 0.0f;
    }
}

// ----------------------------------------------------------------------------- forward
template <typename T>
__device__ void attention_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                  T* __restrict__ out, float* __restrict__ lse, int H, int L, int E, Strides qs,
                                  Strides ks, Strides vs, Strides os, float scale, float p, float keep_scale,
                                  unsigned long long seed, unsigned long long offset) {
    __shared__ float k_tile[TILE][HEAD_MAX];
    __shared__ float v_tile[TILE][HEAD_MAX];
    const int bh = blockIdx.x, b = bh / H, h = bh % H;
    const int lane = threadIdx.x % LANES, first_query = blockIdx.y * TILE;
    const int i = first_query + threadIdx.x / LANES;          // this thread's query
    const int i_read = min(i, L - 1);                         // past L: a copy of the last row, not written
    const int last_key = min(first_query + TILE, L) - 1;      // the last key any query of the block sees

    float q_mine[SLOTS], acc[SLOTS];
    load_row(row_of(q, qs, b, h, i_read), E, lane, q_mine);
#pragma unroll
    for (int c = 0; c < SLOTS; ++c) acc[c] = 0.0f;
    float m = negative_infinity(), l = 0.0f;
    const unsigned long long row_counter = offset + ((unsigned long long)bh * L + i_read) * (unsigned long long)L;

    for (int j0 = 0; j0 <= last_key; j0 += TILE) {
        __syncthreads();                                      // the previous tile is no longer read
        stage_tile(k_tile, k, ks, b, h, j0, L - 1, E);
        stage_tile(v_tile, v, vs, b, h, j0, L - 1, E);
        __syncthreads();
        float s[TILE], tile_max = negative_infinity();     // unrolled loops keep s[] in registers
#pragma unroll
        for (int n = 0; n < TILE; ++n) {
            const float dot = dot_with(q_mine, k_tile[n], E, lane);
            s[n] = j0 + n <= i && j0 + n < L ? scale * dot : negative_infinity();
            tile_max = fmaxf(tile_max, s[n]);
        }
        const unsigned int kept = keep_bits(row_counter + j0, 1, lane, p, seed);
        const float m_new = fmaxf(m, tile_max);
        const float alpha = __expf(m - m_new);
        float tile_sum = 0.0f;
#pragma unroll
        for (int c = 0; c < SLOTS; ++c) acc[c] *= alpha;
#pragma unroll
        for (int n = 0; n < TILE; ++n) {
            const float e = __expf(s[n] - m_new);             // 0 where masked
            tile_sum += e;
            const float w = (kept >> n & 1u) ? e * keep_scale : 0.0f;
            if (w != 0.0f) {
#pragma unroll
                for (int c = 0; c < SLOTS; ++c) acc[c] += w * v_tile[n][lane + LANES * c];   // 0 past E
            }
        }
        l = alpha * l + tile_sum;
        m = m_new;
    }
    if (i < L) {
        T* o = row_of(out, os, b, h, i);
        const float inv = 1.0f / l;
#pragma unroll
        for (int c = 0; c < SLOTS; ++c) {
            const int d = lane + LANES * c;
            if (d < E) store_float(o + d, acc[c] * inv);
        }
        if (lane == 0) lse[(long long)bh * L + i] = m + logf(l);
    }
}

// ----------------------------------------------------------------------------- backward: dq
template <typename T>
__device__ void attention_backward_dq(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                      const T* __restrict__ out, const T* __restrict__ dout,
                                      const float* __restrict__ lse, T* __restrict__ dq, int H, int L, int E,
                                      Strides qs, Strides ks, Strides vs, Strides os, Strides dos, Strides dqs, float scale,
                                      float p, float keep_scale, unsigned long long seed, unsigned long long offset) {
    __shared__ float k_tile[TILE][HEAD_MAX];
    __shared__ float v_tile[TILE][HEAD_MAX];
    const int bh = blockIdx.x, b = bh / H, h = bh % H;
    const int lane = threadIdx.x % LANES, first_query = blockIdx.y * TILE;
    const int i = first_query + threadIdx.x / LANES;
    const int i_read = min(i, L - 1);
    const int last_key = min(first_query + TILE, L) - 1;

    float q_mine[SLOTS], dout_mine[SLOTS], out_mine[SLOTS], dq_mine[SLOTS];
    load_row(row_of(q, qs, b, h, i_read), E, lane, q_mine);
    load_row(row_of(dout, dos, b, h, i_read), E, lane, dout_mine);
    load_row(row_of(out, os, b, h, i_read), E, lane, out_mine);
    float partial = 0.0f;
#pragma unroll
    for (int c = 0; c < SLOTS; ++c) {
        partial += dout_mine[c] * out_mine[c];
        dq_mine[c] = 0.0f;
    }
    const float D = row_sum(partial);
    const float lse_i = lse[(long long)bh * L + i_read];
    const unsigned long long row_counter = offset + ((unsigned long long)bh * L + i_read) * (unsigned long long)L;

    for (int j0 = 0; j0 <= last_key; j0 += TILE) {
        __syncthreads();
        stage_tile(k_tile, k, ks, b, h, j0, L - 1, E);
        stage_tile(v_tile, v, vs, b, h, j0, L - 1, E);
        __syncthreads();
        const unsigned int kept = keep_bits(row_counter + j0, 1, lane, p, seed);
        for (int n = 0; n < TILE; ++n) {
            const float qk = dot_with(q_mine, k_tile[n], E, lane);
            const float dw = dot_with(dout_mine, v_tile[n], E, lane);   // dout_i . v_j
            const bool visible = j0 + n <= i && j0 + n < L;
            const float prob = visible ? __expf(scale * qk - lse_i) : 0.0f;
            const float dp = (kept >> n & 1u) ? dw * keep_scale : 0.0f;
            const float ds = prob * (dp - D);
#pragma unroll
            for (int c = 0; c < SLOTS; ++c) dq_mine[c] += ds * k_tile[n][lane + LANES * c];
        }
    }
    if (i < L) {
        T* row = row_of(dq, dqs, b, h, i);
#pragma unroll
        for (int c = 0; c < SLOTS; ++c) {
            const int d = lane + LANES * c;
            if (d < E) store_float(row + d, scale * dq_mine[c]);
        }
    }
}

// ----------------------------------------------------------------------------- backward: dk, dv
template <typename T>
__device__ void attention_backward_dkdv(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                        const T* __restrict__ out, const T* __restrict__ dout,
                                        const float* __restrict__ lse, T* __restrict__ dk, T* __restrict__ dv,
                                        int H, int L, int E, Strides qs, Strides ks, Strides vs, Strides os,
                                        Strides dos, Strides dks, Strides dvs, float scale, float p, float keep_scale,
                                        unsigned long long seed, unsigned long long offset) {
    __shared__ float q_tile[TILE][HEAD_MAX];
    __shared__ float dout_tile[TILE][HEAD_MAX];
    __shared__ float lse_tile[TILE];
    __shared__ float D_tile[TILE];
    const int bh = blockIdx.x, b = bh / H, h = bh % H;
    const int lane = threadIdx.x % LANES, first_key = blockIdx.y * TILE, position = threadIdx.x / LANES;
    const int j = first_key + position;                       // this thread's key
    const int j_read = min(j, L - 1);

    float k_mine[SLOTS], v_mine[SLOTS], dk_mine[SLOTS], dv_mine[SLOTS];
    load_row(row_of(k, ks, b, h, j_read), E, lane, k_mine);
    load_row(row_of(v, vs, b, h, j_read), E, lane, v_mine);
#pragma unroll
    for (int c = 0; c < SLOTS; ++c) dk_mine[c] = dv_mine[c] = 0.0f;
    // Key j's counter for query i is offset + (bh L + i) L + j: a step of L from one query to the next.
    const unsigned long long key_counter = offset + (unsigned long long)bh * L * (unsigned long long)L + j_read;

    for (int i0 = first_key; i0 < L; i0 += TILE) {           // the queries that see this block's keys: i >= j
        __syncthreads();
        stage_tile(q_tile, q, qs, b, h, i0, L - 1, E);
        stage_tile(dout_tile, dout, dos, b, h, i0, L - 1, E);
        {   // each position's thread row computes lse and D for query i0 + position of this tile
            const int i = min(i0 + position, L - 1);
            float dout_row[SLOTS], out_row[SLOTS];
            load_row(row_of(dout, dos, b, h, i), E, lane, dout_row);
            load_row(row_of(out, os, b, h, i), E, lane, out_row);
            float partial = 0.0f;
#pragma unroll
            for (int c = 0; c < SLOTS; ++c) partial += dout_row[c] * out_row[c];
            const float D = row_sum(partial);
            if (lane == 0) {
                D_tile[position] = D;
                lse_tile[position] = lse[(long long)bh * L + i];
            }
        }
        __syncthreads();
        const unsigned int kept = keep_bits(key_counter + (unsigned long long)i0 * L, L, lane, p, seed);
        for (int n = 0; n < TILE; ++n) {
            const float qk = dot_with(k_mine, q_tile[n], E, lane);
            const float dw = dot_with(v_mine, dout_tile[n], E, lane);   // dout_i . v_j
            const bool visible = j <= i0 + n && i0 + n < L;
            const float prob = visible ? __expf(scale * qk - lse_tile[n]) : 0.0f;
            const bool keep = kept >> n & 1u;
            const float w = keep ? prob * keep_scale : 0.0f;
            const float ds = prob * ((keep ? dw * keep_scale : 0.0f) - D_tile[n]);
#pragma unroll
            for (int c = 0; c < SLOTS; ++c) {
                dv_mine[c] += w * dout_tile[n][lane + LANES * c];
                dk_mine[c] += ds * q_tile[n][lane + LANES * c];
            }
        }
    }
    if (j < L) {
        T* dk_row = row_of(dk, dks, b, h, j);
        T* dv_row = row_of(dv, dvs, b, h, j);
#pragma unroll
        for (int c = 0; c < SLOTS; ++c) {
            const int d = lane + LANES * c;
            if (d < E) {
                store_float(dk_row + d, scale * dk_mine[c]);
                store_float(dv_row + d, dv_mine[c]);
            }
        }
    }
}

// ----------------------------------------------------------------------------- entry points
// One set per storage type (float; __half and __nv_bfloat16 under TG_HALF_PRECISION).  Strides are
// element counts, three per tensor: batch, head, time; the inputs' first, then the outputs'.
extern "C" __global__ void causal_attention_forward(
        const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v, float* __restrict__ out,
        float* __restrict__ lse, int H, int L, int E, long long q_b, long long q_h, long long q_t, long long k_b,
        long long k_h, long long k_t, long long v_b, long long v_h, long long v_t, long long o_b, long long o_h,
        long long o_t, float scale, float p, float keep_scale, unsigned long long seed, unsigned long long offset) {
    attention_forward(q, k, v, out, lse, H, L, E, Strides{q_b, q_h, q_t}, Strides{k_b, k_h, k_t},
                      Strides{v_b, v_h, v_t}, Strides{o_b, o_h, o_t}, scale, p, keep_scale, seed, offset);
}

extern "C" __global__ void causal_attention_backward_dq(
        const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
        const float* __restrict__ out, const float* __restrict__ dout, const float* __restrict__ lse,
        float* __restrict__ dq, int H, int L, int E, long long q_b, long long q_h, long long q_t, long long k_b,
        long long k_h, long long k_t, long long v_b, long long v_h, long long v_t, long long o_b, long long o_h,
        long long o_t, long long do_b, long long do_h, long long do_t, long long dq_b, long long dq_h,
        long long dq_t, float scale, float p, float keep_scale, unsigned long long seed, unsigned long long offset) {
    attention_backward_dq(q, k, v, out, dout, lse, dq, H, L, E, Strides{q_b, q_h, q_t}, Strides{k_b, k_h, k_t},
                          Strides{v_b, v_h, v_t}, Strides{o_b, o_h, o_t}, Strides{do_b, do_h, do_t},
                          Strides{dq_b, dq_h, dq_t}, scale, p, keep_scale, seed, offset);
}

extern "C" __global__ void causal_attention_backward_dkdv(
        const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
        const float* __restrict__ out, const float* __restrict__ dout, const float* __restrict__ lse,
        float* __restrict__ dk, float* __restrict__ dv, int H, int L, int E, long long q_b, long long q_h,
        long long q_t, long long k_b, long long k_h, long long k_t, long long v_b, long long v_h, long long v_t,
        long long o_b, long long o_h, long long o_t, long long do_b, long long do_h, long long do_t, long long dk_b,
        long long dk_h, long long dk_t, long long dv_b, long long dv_h, long long dv_t, float scale, float p,
        float keep_scale, unsigned long long seed, unsigned long long offset) {
    attention_backward_dkdv(q, k, v, out, dout, lse, dk, dv, H, L, E, Strides{q_b, q_h, q_t}, Strides{k_b, k_h, k_t},
                            Strides{v_b, v_h, v_t}, Strides{o_b, o_h, o_t}, Strides{do_b, do_h, do_t},
                            Strides{dk_b, dk_h, dk_t}, Strides{dv_b, dv_h, dv_t}, scale, p, keep_scale, seed, offset);
}

#if TG_HALF_PRECISION
extern "C" __global__ void causal_attention_forward_f16(
        const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v, __half* __restrict__ out,
        float* __restrict__ lse, int H, int L, int E, long long q_b, long long q_h, long long q_t, long long k_b,
        long long k_h, long long k_t, long long v_b, long long v_h, long long v_t, long long o_b, long long o_h,
        long long o_t, float scale, float p, float keep_scale, unsigned long long seed, unsigned long long offset) {
    attention_forward(q, k, v, out, lse, H, L, E, Strides{q_b, q_h, q_t}, Strides{k_b, k_h, k_t},
                      Strides{v_b, v_h, v_t}, Strides{o_b, o_h, o_t}, scale, p, keep_scale, seed, offset);
}

extern "C" __global__ void causal_attention_backward_dq_f16(
        const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
        const __half* __restrict__ out, const __half* __restrict__ dout, const float* __restrict__ lse,
        __half* __restrict__ dq, int H, int L, int E, long long q_b, long long q_h, long long q_t, long long k_b,
        long long k_h, long long k_t, long long v_b, long long v_h, long long v_t, long long o_b, long long o_h,
        long long o_t, long long do_b, long long do_h, long long do_t, long long dq_b, long long dq_h,
        long long dq_t, float scale, float p, float keep_scale, unsigned long long seed, unsigned long long offset) {
    attention_backward_dq(q, k, v, out, dout, lse, dq, H, L, E, Strides{q_b, q_h, q_t}, Strides{k_b, k_h, k_t},
                          Strides{v_b, v_h, v_t}, Strides{o_b, o_h, o_t}, Strides{do_b, do_h, do_t},
                          Strides{dq_b, dq_h, dq_t}, scale, p, keep_scale, seed, offset);
}

extern "C" __global__ void causal_attention_backward_dkdv_f16(
        const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
        const __half* __restrict__ out, const __half* __restrict__ dout, const float* __restrict__ lse,
        __half* __restrict__ dk, __half* __restrict__ dv, int H, int L, int E, long long q_b, long long q_h,
        long long q_t, long long k_b, long long k_h, long long k_t, long long v_b, long long v_h, long long v_t,
        long long o_b, long long o_h, long long o_t, long long do_b, long long do_h, long long do_t, long long dk_b,
        long long dk_h, long long dk_t, long long dv_b, long long dv_h, long long dv_t, float scale, float p,
        float keep_scale, unsigned long long seed, unsigned long long offset) {
    attention_backward_dkdv(q, k, v, out, dout, lse, dk, dv, H, L, E, Strides{q_b, q_h, q_t}, Strides{k_b, k_h, k_t},
                            Strides{v_b, v_h, v_t}, Strides{o_b, o_h, o_t}, Strides{do_b, do_h, do_t},
                            Strides{dk_b, dk_h, dk_t}, Strides{dv_b, dv_h, dv_t}, scale, p, keep_scale, seed, offset);
}

extern "C" __global__ void causal_attention_forward_bf16(
        const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ out,
        float* __restrict__ lse, int H, int L, int E, long long q_b, long long q_h, long long q_t, long long k_b,
        long long k_h, long long k_t, long long v_b, long long v_h, long long v_t, long long o_b, long long o_h,
        long long o_t, float scale, float p, float keep_scale, unsigned long long seed, unsigned long long offset) {
    attention_forward(q, k, v, out, lse, H, L, E, Strides{q_b, q_h, q_t}, Strides{k_b, k_h, k_t},
                      Strides{v_b, v_h, v_t}, Strides{o_b, o_h, o_t}, scale, p, keep_scale, seed, offset);
}

extern "C" __global__ void causal_attention_backward_dq_bf16(
        const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
        const __nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ dout, const float* __restrict__ lse,
        __nv_bfloat16* __restrict__ dq, int H, int L, int E, long long q_b, long long q_h, long long q_t, long long k_b,
        long long k_h, long long k_t, long long v_b, long long v_h, long long v_t, long long o_b, long long o_h,
        long long o_t, long long do_b, long long do_h, long long do_t, long long dq_b, long long dq_h,
        long long dq_t, float scale, float p, float keep_scale, unsigned long long seed, unsigned long long offset) {
    attention_backward_dq(q, k, v, out, dout, lse, dq, H, L, E, Strides{q_b, q_h, q_t}, Strides{k_b, k_h, k_t},
                          Strides{v_b, v_h, v_t}, Strides{o_b, o_h, o_t}, Strides{do_b, do_h, do_t},
                          Strides{dq_b, dq_h, dq_t}, scale, p, keep_scale, seed, offset);
}

extern "C" __global__ void causal_attention_backward_dkdv_bf16(
        const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
        const __nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ dout, const float* __restrict__ lse,
        __nv_bfloat16* __restrict__ dk, __nv_bfloat16* __restrict__ dv, int H, int L, int E, long long q_b, long long q_h,
        long long q_t, long long k_b, long long k_h, long long k_t, long long v_b, long long v_h, long long v_t,
        long long o_b, long long o_h, long long o_t, long long do_b, long long do_h, long long do_t, long long dk_b,
        long long dk_h, long long dk_t, long long dv_b, long long dv_h, long long dv_t, float scale, float p,
        float keep_scale, unsigned long long seed, unsigned long long offset) {
    attention_backward_dkdv(q, k, v, out, dout, lse, dk, dv, H, L, E, Strides{q_b, q_h, q_t}, Strides{k_b, k_h, k_t},
                            Strides{v_b, v_h, v_t}, Strides{o_b, o_h, o_t}, Strides{do_b, do_h, do_t},
                            Strides{dk_b, dk_h, dk_t}, Strides{dv_b, dv_h, dv_t}, scale, p, keep_scale, seed, offset);
}
#endif
