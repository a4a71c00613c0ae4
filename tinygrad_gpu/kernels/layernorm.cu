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
//   layernorm_forward_naive: the first rung of a ladder (the plainest correct kernel first, the faster
//   one beside it): one thread per row.  Slow on purpose; the launcher runs it only
//   when asked (forward's version="naive"), for reading and for benchmarks/kernels.py.  See its comment.
//   layernorm_forward, layernorm_backward: one block per row (blockIdx.x = row); thread k
//   handles elements k, k + blockDim.x, ... of the row (coalesced loads).  The row sums are
//   block reductions (block_reduce.h).
//   layernorm_backward_params: sums run *down the columns*, across rows, so a different
//   layout: a block of 32 x 8 threads owns 32 neighbouring columns; threadIdx.x picks the
//   column, threadIdx.y = 0..7 takes every 8th row.  The 8 partial sums of each column
//   meet in shared memory and thread y = 0 adds them up in a fixed order.  No atomics,
//   so the result is the same bit for bit on every run.  It writes every column of dweight
//   and dbias once (it does not add to them), so they need no zeroing before the launch.
//   These two are the plain backward: two launches, and the second reads x and dout again.
//
//   layernorm_backward_fused: the same dx, dweight and dbias in ONE launch (a GPT step has 13
//   layer norms: 13 launches saved, and one full read of x and dout each).  Block b owns the rows
//   b * rows_per_block .. (b + 1) * rows_per_block - 1 (the last block fewer).  Its 8 warps take
//   a row each at a time (warp w: rows w, w + 8, ... of the group); lane l of a warp owns columns
//   l, l + 32, ... (at most LN_FUSED_MAX_PER_LANE of them, so n <= 1024), and the row sums are
//   warp sums (no barrier per row).  While it writes dx, each lane adds its columns' dout * xhat
//   and dout into registers: the warp's share of the group's column sums.  Then:
//     1. the 8 warps' sums meet in shared memory, and warp 0 adds them in warp order and stores
//        the group's column sums in the workspace: partials[b * n + c] for dweight,
//        partials[(gridDim.x + b) * n + c] for dbias (written, not added to: no zeroing needed);
//     2. every thread fences (its stores are visible to the whole GPU before what follows), the
//        block meets at a barrier, and thread 0 takes a ticket (atomicAdd on a counter);
//     3. the block that draws the last ticket knows that every group's sums are in memory.  It
//        adds them, thread t taking columns t, t + blockDim.x, ..., each column over the groups
//        b = 0, 1, ..., gridDim.x - 1 in that order, stores dweight and dbias, and sets the
//        counter back to 0 for the next launch.
//   Why it is deterministic: every sum has a fixed order that depends on the launch shape and
//   nothing else -- within a row, the warp butterfly; within a group, each warp's rows in order,
//   then the warps in order; across groups, b = 0, 1, ... .  Which block finishes last only
//   decides who does the last additions, not their order, so the result is the same bits on
//   every run.  (Not the plain pair's bits: its sums run in another order; both are float32
//   sums of the same terms.)  The workspace (2 * gridDim.x * n floats) and the counter are
//   kept per device by the launcher; the counter is 0 between launches.  Launch with
//   blockDim.x = 32 * LN_FUSED_WARPS; launches on one stream (ours) run one after another, so
//   they may share the workspace.  The launcher takes this kernel when the parameters' gradients
//   are wanted and it fits (enough rows for a group, n <= 1024); else the pair above.
//
// In place: dx may be dout itself (the launcher passes dout as dx when nobody else holds it) or dx_add,
// in layernorm_backward and layernorm_backward_fused: every element of the row is read by the first
// loop, before the row sums' barrier, and element c is then read and written by the one thread that
// owns it, and by nobody else; so those three pointers are not declared __restrict__.  Not so with the
// plain pair's second kernel, which reads dout again after the first has written dx: there dout
// stays dout.
//
// Optional pointers: bias may be null (a layer norm without a shift: out = xhat * w, with
// nothing added), and so may dweight or dbias (a gradient nobody wants is not stored).  A
// null pointer saves the launcher a buffer of zeros and the launch that fills it.  dx_add may
// be null too; when it is not, the backward stores dx + dx_add: the gradient that the rest of
// the graph has already sent to x (the residual stream's, in a transformer: x feeds both this
// layer norm and the residual add), summed on the way out instead of by another launch.
//
// Why it is numerically safe: the variance is computed in a second pass as the mean of
// (x - mean)^2, never as mean(x^2) - mean^2, which cancels catastrophically when |mean| is
// large compared to the spread (e.g. x = 1000 + noise).  eps keeps rsqrt finite for a
// constant row.  The second pass reads the row again from memory (or cache): a
// bandwidth cost we pay for accuracy.
//
// 16-bit types (half_precision.h): the entry points ending _f16 / _bf16 take x, weight, bias,
// dout and write out, dx, dweight and dbias in __half or __nv_bfloat16 (all of one type).
// (Or mixed: *_to_f16 / _to_bf16 read float32 and write a 16-bit out; *_from_f16 / _from_bf16 read a
// 16-bit dout and float32 everything else -- see the end of this file.)
// Every value becomes a float as it is loaded; the sums, mean, variance, rstd, xhat and the
// column sums of the parameters' gradients (the fused kernel's workspace too) are float32,
// exactly as for float32 data, and mean and rstd are saved as float32 (the backward needs
// their digits: a bfloat16 mean of x = 1000 + noise would be off by up to 2, more than the noise).  Each output value is
// rounded once, to nearest even, as it is stored.
#include "block_reduce.h"
#include "half_precision.h"

// The naive forward: thread t of the grid (blockIdx.x * blockDim.x + threadIdx.x) owns row t and walks it
// alone, a loop for the mean, a second for the variance, a third for the output.  The same formula and the
// same float32 arithmetic as the block version below, so the same results up to float32 rounding (its
// sums run left to right, the block version's in strided partial sums and a tree: not the same bits).
// Why it is slow:
//   - one thread does a whole row: three passes of n loads, one after another, where the block version
//     shares each pass among up to 1024 threads and adds their partial sums in a tree of log2 steps;
//   - its loads are not coalesced: at each step of a loop the 32 threads of a warp read 32 different
//     rows, n values apart, so one warp-wide load touches 32 separate 32-byte sectors (each holding the
//     thread's next few values too, which the L1 cache may or may not still hold at the next steps),
//     where 32 neighbouring threads reading 32 neighbouring floats make one 128-byte request;
//   - few threads in flight: one per row, so a GPT step's 16384 rows make 16384 threads, about 4 warps
//     for each of an H200's 132 SMs, which could hold 64; while those few wait for memory, nothing else
//     can run, and the memory latency is not hidden.
// What the block version (layernorm_forward_row) changes: a block of threads per row, thread k taking
// elements k, k + blockDim.x, ... (a warp's loads are neighbours: coalesced); the row sums are block
// reductions (warp shuffles, then shared memory); and rows * blockDim.x threads in flight (16384 rows of
// 768, 192 threads each: 3 million), enough warps to keep the memory system busy.
template <typename T>
__device__ void layernorm_forward_naive_row(const T* __restrict__ x, const T* __restrict__ weight,
                                            const T* __restrict__ bias, T* __restrict__ out,
                                            float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                            int n_rows, int n, float eps) {
    const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n_rows) return;                         // the last block's spare threads
    const T* xr = x + row * n;
    float sum = 0.0f;
    for (int c = 0; c < n; ++c) sum += load_float(xr + c);
    const float mean = sum / n;
    float squares = 0.0f;
    for (int c = 0; c < n; ++c) {
        const float d = load_float(xr + c) - mean;
        squares += d * d;
    }
    const float rstd = rsqrtf(squares / n + eps);
    T* o = out + row * n;
    for (int c = 0; c < n; ++c) {
        const float y = (load_float(xr + c) - mean) * rstd * load_float(weight + c);
        store_float(o + c, bias ? y + load_float(bias + c) : y);
    }
    mean_out[row] = mean;
    rstd_out[row] = rstd;
}

// The block version: one block per row, the row's sums by block reductions.
template <typename T, typename TO>
__device__ void layernorm_forward_row(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
                                      TO* __restrict__ out, float* __restrict__ mean_out, float* __restrict__ rstd_out,
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
    TO* o = out + row * n;
    // One loop per case, each a single expression, so that the compiler may fuse the last product
    // with the bias's add (an FMA) just as before bias became optional.  The branch is the same for
    // the whole grid: no divergence.
    if (bias) {
        for (int c = threadIdx.x; c < n; c += blockDim.x)
            store_float(o + c, (load_float(xr + c) - mean) * rstd * load_float(weight + c) + load_float(bias + c));
    } else {
        for (int c = threadIdx.x; c < n; c += blockDim.x)
            store_float(o + c, (load_float(xr + c) - mean) * rstd * load_float(weight + c));
    }
    if (threadIdx.x == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

template <typename T, typename TD>
__device__ void layernorm_backward_row(const T* __restrict__ x, const T* __restrict__ weight,
                                       const float* __restrict__ mean, const float* __restrict__ rstd,
                                       const TD* dout, const T* dx_add, T* dx,
                                       int n) {
    const long long row = blockIdx.x;
    const T* xr = x + row * n;
    const TD* dr = dout + row * n;
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
    const T* addr = dx_add == nullptr ? nullptr : dx_add + row * n;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        float xhat = (load_float(xr + c) - m) * r;
        float value = r * (load_float(dr + c) * load_float(weight + c) - mean_g - xhat * mean_g_xhat);
        store_float(dxr + c, addr == nullptr ? value : value + load_float(addr + c));
    }
}

template <typename T, typename TD>
__device__ void layernorm_backward_params_columns(const T* __restrict__ x, const float* __restrict__ mean,
                                                  const float* __restrict__ rstd, const TD* __restrict__ dout,
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
        if (dweight) store_float(dweight + col, dw);
        if (dbias) store_float(dbias + col, db);
    }
}

#define LN_FUSED_WARPS 8            // warps per block of layernorm_backward_fused (blockDim.x = 256)
#define LN_FUSED_MAX_PER_LANE 32    // columns a lane owns at most: the fused kernel takes n <= 32 * 32 = 1024

template <typename T, typename TD>
__device__ void layernorm_backward_fused_rows(const T* __restrict__ x, const T* __restrict__ weight,
                                              const float* __restrict__ mean, const float* __restrict__ rstd,
                                              const TD* dout, const T* dx_add,
                                              T* dx, T* __restrict__ dweight, T* __restrict__ dbias,
                                              float* __restrict__ partials, unsigned* __restrict__ ticket,
                                              int n_rows, int n, int rows_per_block) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const long long first = (long long)blockIdx.x * rows_per_block;
    const long long end = first + rows_per_block < n_rows ? first + rows_per_block : n_rows;
    // This lane's share of the group's column sums, column lane + 32 k in slot k.  The loops over k are
    // unrolled with constant bounds, so the arrays stay in registers; `break` ends them at the row's end.
    float dw[LN_FUSED_MAX_PER_LANE], db[LN_FUSED_MAX_PER_LANE];
#pragma unroll
    for (int k = 0; k < LN_FUSED_MAX_PER_LANE; ++k) dw[k] = db[k] = 0.0f;

    for (long long row = first + warp; row < end; row += LN_FUSED_WARPS) {
        const T* xr = x + row * n;
        const TD* dr = dout + row * n;
        const float m = mean[row], r = rstd[row];
        float sum_g = 0.0f, sum_g_xhat = 0.0f;
#pragma unroll
        for (int k = 0; k < LN_FUSED_MAX_PER_LANE; ++k) {
            const int c = lane + 32 * k;
            if (c >= n) break;
            float g = load_float(dr + c) * load_float(weight + c);
            sum_g += g;
            sum_g_xhat += g * (load_float(xr + c) - m) * r;
        }
        const float mean_g = warp_sum(sum_g) / n;              // the whole warp works on this row: no barrier
        const float mean_g_xhat = warp_sum(sum_g_xhat) / n;
        T* dxr = dx + row * n;
        const T* addr = dx_add == nullptr ? nullptr : dx_add + row * n;
#pragma unroll
        for (int k = 0; k < LN_FUSED_MAX_PER_LANE; ++k) {
            const int c = lane + 32 * k;
            if (c >= n) break;
            const float d = load_float(dr + c);
            const float xhat = (load_float(xr + c) - m) * r;
            const float value = r * (d * load_float(weight + c) - mean_g - xhat * mean_g_xhat);
            store_float(dxr + c, addr == nullptr ? value : value + load_float(addr + c));
            dw[k] += d * xhat;
            db[k] += d;
        }
    }

    // 1. The group's column sums, 32 columns at a time: the warps' shares in shared memory, added by warp 0
    // in warp order.  The bound on k is the same for the whole block, so every thread meets the barriers.
    __shared__ float share_w[LN_FUSED_WARPS][32], share_b[LN_FUSED_WARPS][32];
    float* group_w = partials + (long long)blockIdx.x * n;
    float* group_b = partials + ((long long)gridDim.x + blockIdx.x) * n;
#pragma unroll
    for (int k = 0; k < LN_FUSED_MAX_PER_LANE; ++k) {
        if (32 * k >= n) break;
        share_w[warp][lane] = dw[k];
        share_b[warp][lane] = db[k];
        __syncthreads();
        const int c = lane + 32 * k;
        if (warp == 0 && c < n) {
            float w = share_w[0][lane], b = share_b[0][lane];
            for (int v = 1; v < LN_FUSED_WARPS; ++v) {
                w += share_w[v][lane];
                b += share_b[v][lane];
            }
            group_w[c] = w;
            group_b[c] = b;
        }
        __syncthreads();                                       // read before the next k overwrites them
    }

    // 2. The ticket.  Each thread fences its own stores (warp 0 made them), the barrier gathers the block,
    // and only then does thread 0 take its ticket: whoever draws the last one sees every group's sums.
    __shared__ bool is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!is_last) return;                                      // the same in every thread of the block

    // 3. The last block: dweight and dbias, each column over the groups in order b = 0, 1, ...
    __threadfence();
    const volatile float* seen = partials;                     // read from memory, not from a cache of this block
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        float w = 0.0f, b = 0.0f;
        for (unsigned g = 0; g < gridDim.x; ++g) {
            w += seen[(long long)g * n + c];
            b += seen[((long long)gridDim.x + g) * n + c];
        }
        if (dweight) store_float(dweight + c, w);
        if (dbias) store_float(dbias + c, b);
    }
    if (threadIdx.x == 0) *ticket = 0;                         // ready for the next launch
}

extern "C" __global__ void layernorm_forward(const float* __restrict__ x, const float* __restrict__ weight,
                                             const float* __restrict__ bias, float* __restrict__ out,
                                             float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                             int n, float eps) {
    layernorm_forward_row(x, weight, bias, out, mean_out, rstd_out, n, eps);
}

// Launch with gridDim.x * blockDim.x >= n_rows (one thread per row), in every dtype.
extern "C" __global__ void layernorm_forward_naive(const float* __restrict__ x, const float* __restrict__ weight,
                                                   const float* __restrict__ bias, float* __restrict__ out,
                                                   float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                                   int n_rows, int n, float eps) {
    layernorm_forward_naive_row(x, weight, bias, out, mean_out, rstd_out, n_rows, n, eps);
}

extern "C" __global__ void layernorm_backward(const float* __restrict__ x, const float* __restrict__ weight,
                                              const float* __restrict__ mean, const float* __restrict__ rstd,
                                              const float* dout, const float* dx_add,
                                              float* dx, int n) {
    layernorm_backward_row(x, weight, mean, rstd, dout, dx_add, dx, n);
}

// Launch with blockDim = (32, 8) and gridDim.x = ceil(n / 32), in every dtype.
extern "C" __global__ void layernorm_backward_params(const float* __restrict__ x, const float* __restrict__ mean,
                                                     const float* __restrict__ rstd, const float* __restrict__ dout,
                                                     float* __restrict__ dweight, float* __restrict__ dbias,
                                                     int n_rows, int n) {
    layernorm_backward_params_columns(x, mean, rstd, dout, dweight, dbias, n_rows, n);
}

// Launch with blockDim.x = 32 * LN_FUSED_WARPS, gridDim.x = ceil(n_rows / rows_per_block), n <= 1024, and a
// workspace of 2 * gridDim.x * n floats; *ticket must be 0 (the kernel leaves it 0).
extern "C" __global__ void layernorm_backward_fused(const float* __restrict__ x, const float* __restrict__ weight,
                                                    const float* __restrict__ mean, const float* __restrict__ rstd,
                                                    const float* dout, const float* dx_add,
                                                    float* dx, float* __restrict__ dweight,
                                                    float* __restrict__ dbias, float* __restrict__ partials,
                                                    unsigned* __restrict__ ticket, int n_rows, int n,
                                                    int rows_per_block) {
    layernorm_backward_fused_rows(x, weight, mean, rstd, dout, dx_add, dx, dweight, dbias, partials, ticket, n_rows,
                                  n, rows_per_block);
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

extern "C" __global__ void layernorm_forward_naive_f16(const __half* __restrict__ x, const __half* __restrict__ weight,
                                                       const __half* __restrict__ bias, __half* __restrict__ out,
                                                       float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                                       int n_rows, int n, float eps) {
    layernorm_forward_naive_row(x, weight, bias, out, mean_out, rstd_out, n_rows, n, eps);
}

extern "C" __global__ void layernorm_forward_naive_bf16(const __nv_bfloat16* __restrict__ x,
                                                        const __nv_bfloat16* __restrict__ weight,
                                                        const __nv_bfloat16* __restrict__ bias,
                                                        __nv_bfloat16* __restrict__ out, float* __restrict__ mean_out,
                                                        float* __restrict__ rstd_out, int n_rows, int n, float eps) {
    layernorm_forward_naive_row(x, weight, bias, out, mean_out, rstd_out, n_rows, n, eps);
}

extern "C" __global__ void layernorm_backward_f16(const __half* __restrict__ x, const __half* __restrict__ weight,
                                                  const float* __restrict__ mean, const float* __restrict__ rstd,
                                                  const __half* dout, const __half* dx_add,
                                                  __half* dx, int n) {
    layernorm_backward_row(x, weight, mean, rstd, dout, dx_add, dx, n);
}

extern "C" __global__ void layernorm_backward_bf16(const __nv_bfloat16* __restrict__ x,
                                                   const __nv_bfloat16* __restrict__ weight,
                                                   const float* __restrict__ mean, const float* __restrict__ rstd,
                                                   const __nv_bfloat16* dout,
                                                   const __nv_bfloat16* dx_add,
                                                   __nv_bfloat16* dx, int n) {
    layernorm_backward_row(x, weight, mean, rstd, dout, dx_add, dx, n);
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

extern "C" __global__ void layernorm_backward_fused_f16(const __half* __restrict__ x, const __half* __restrict__ weight,
                                                        const float* __restrict__ mean, const float* __restrict__ rstd,
                                                        const __half* dout,
                                                        const __half* dx_add, __half* dx,
                                                        __half* __restrict__ dweight, __half* __restrict__ dbias,
                                                        float* __restrict__ partials, unsigned* __restrict__ ticket,
                                                        int n_rows, int n, int rows_per_block) {
    layernorm_backward_fused_rows(x, weight, mean, rstd, dout, dx_add, dx, dweight, dbias, partials, ticket, n_rows,
                                  n, rows_per_block);
}

extern "C" __global__ void layernorm_backward_fused_bf16(const __nv_bfloat16* __restrict__ x,
                                                         const __nv_bfloat16* __restrict__ weight,
                                                         const float* __restrict__ mean,
                                                         const float* __restrict__ rstd,
                                                         const __nv_bfloat16* dout,
                                                         const __nv_bfloat16* dx_add,
                                                         __nv_bfloat16* dx,
                                                         __nv_bfloat16* __restrict__ dweight,
                                                         __nv_bfloat16* __restrict__ dbias,
                                                         float* __restrict__ partials, unsigned* __restrict__ ticket,
                                                         int n_rows, int n, int rows_per_block) {
    layernorm_backward_fused_rows(x, weight, mean, rstd, dout, dx_add, dx, dweight, dbias, partials, ticket, n_rows,
                                  n, rows_per_block);
}

// Mixed dtypes, for autocast (nn.LayerNorm's output_for_products): x, weight and bias float32, out in 16 bits
// (the cast the product that reads it would make, written at once); and back, dout in 16 bits with
// everything else float32.
extern "C" __global__ void layernorm_forward_to_f16(const float* __restrict__ x, const float* __restrict__ weight,
                                                    const float* __restrict__ bias, __half* __restrict__ out,
                                                    float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                                    int n, float eps) {
    layernorm_forward_row(x, weight, bias, out, mean_out, rstd_out, n, eps);
}

extern "C" __global__ void layernorm_forward_to_bf16(const float* __restrict__ x, const float* __restrict__ weight,
                                                     const float* __restrict__ bias, __nv_bfloat16* __restrict__ out,
                                                     float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                                     int n, float eps) {
    layernorm_forward_row(x, weight, bias, out, mean_out, rstd_out, n, eps);
}

extern "C" __global__ void layernorm_backward_from_f16(const float* __restrict__ x, const float* __restrict__ weight,
                                                       const float* __restrict__ mean, const float* __restrict__ rstd,
                                                       const __half* dout, const float* dx_add, float* dx, int n) {
    layernorm_backward_row(x, weight, mean, rstd, dout, dx_add, dx, n);
}

extern "C" __global__ void layernorm_backward_from_bf16(const float* __restrict__ x, const float* __restrict__ weight,
                                                        const float* __restrict__ mean, const float* __restrict__ rstd,
                                                        const __nv_bfloat16* dout, const float* dx_add, float* dx,
                                                        int n) {
    layernorm_backward_row(x, weight, mean, rstd, dout, dx_add, dx, n);
}

extern "C" __global__ void layernorm_backward_params_from_f16(const float* __restrict__ x,
                                                              const float* __restrict__ mean,
                                                              const float* __restrict__ rstd,
                                                              const __half* __restrict__ dout,
                                                              float* __restrict__ dweight, float* __restrict__ dbias,
                                                              int n_rows, int n) {
    layernorm_backward_params_columns(x, mean, rstd, dout, dweight, dbias, n_rows, n);
}

extern "C" __global__ void layernorm_backward_params_from_bf16(const float* __restrict__ x,
                                                               const float* __restrict__ mean,
                                                               const float* __restrict__ rstd,
                                                               const __nv_bfloat16* __restrict__ dout,
                                                               float* __restrict__ dweight, float* __restrict__ dbias,
                                                               int n_rows, int n) {
    layernorm_backward_params_columns(x, mean, rstd, dout, dweight, dbias, n_rows, n);
}

extern "C" __global__ void layernorm_backward_fused_from_f16(const float* __restrict__ x,
                                                             const float* __restrict__ weight,
                                                             const float* __restrict__ mean,
                                                             const float* __restrict__ rstd, const __half* dout,
                                                             const float* dx_add, float* dx,
                                                             float* __restrict__ dweight, float* __restrict__ dbias,
                                                             float* __restrict__ partials,
                                                             unsigned* __restrict__ ticket, int n_rows, int n,
                                                             int rows_per_block) {
    layernorm_backward_fused_rows(x, weight, mean, rstd, dout, dx_add, dx, dweight, dbias, partials, ticket, n_rows,
                                  n, rows_per_block);
}

extern "C" __global__ void layernorm_backward_fused_from_bf16(const float* __restrict__ x,
                                                              const float* __restrict__ weight,
                                                              const float* __restrict__ mean,
                                                              const float* __restrict__ rstd,
                                                              const __nv_bfloat16* dout, const float* dx_add,
                                                              float* dx, float* __restrict__ dweight,
                                                              float* __restrict__ dbias, float* __restrict__ partials,
                                                              unsigned* __restrict__ ticket, int n_rows, int n,
                                                              int rows_per_block) {
    layernorm_backward_fused_rows(x, weight, mean, rstd, dout, dx_add, dx, dweight, dbias, partials, ticket, n_rows,
                                  n, rows_per_block);
}
#endif
