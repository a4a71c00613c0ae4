// multi_tensor.cu -- one launch for a whole list of tensors: the gradients' global 2-norm and clip
// coefficient, the gradients scaled by it, and an Adam/AdamW step of every parameter of a group.
//
// Why: a launch costs the host some 15 us (DESIGN.md), and nanoGPT's GPT has 39 parameters. One
// launch per tensor (adamw.cu) or three (a norm by array ops) spends ~200 launches a step on
// clipping and AdamW; these kernels spend 3 (4 under a GradScaler).
//
// The table. A launch gets the tensors as a TensorTable passed *by value*: the struct is copied into
// the kernel's parameter memory with the launch, so nothing is uploaded per step, no device memory holds
// it, and the host never waits. A kernel's parameters must fit in 4 KiB (the classic limit), so a
// table holds up to MT_MAX_TENSORS tensors (3088 bytes); the launcher launches again for the next ones.
//     list[j][k]   tensor k's array in list j: 0 param (or the one list of norm and scale), 1 grad,
//                  2 exp_avg, 3 exp_avg_sq, 4 step (a float32 0-d array, the skippable step only)
//     start[k]     where tensor k begins when the tensors are laid end to end, one long vector of
//                  start[count] elements (start[0] = 0); tensor k is start[k] .. start[k + 1] - 1,
//                  with the sizes of list 0 (the arrays of one tensor have one size)
// Who does what: the long vector is cut into chunks of MT_CHUNK elements; block b takes chunks b,
// b + gridDim.x, ... (a grid-stride loop over chunks). In a chunk, for each tensor it overlaps (a big
// matrix spans many chunks; a chunk may hold several small biases), the whole block walks that piece,
// thread i taking its elements i, i + blockDim.x, ... (for_each_piece). A block finds the tensor that
// holds its chunk's first element by walking start[] forward: its chunks come in increasing order.
// Empty tensors own no element and are never visited.
//
//   multi_tensor_norm_clip (in place: the workspace; out: norm, coefficient):
//       total = total + sum of g * g over every element of the table's tensors, in float32
//       last table (last != 0):  norm = sqrt(total),  coefficient = min(max_norm / (norm + 1e-6), 1),
//                                total = 0 (ready for the next call)
//     As clip_grad_norm_ computes them (optim/clip.py), on the device, in one launch per table:
//     each block sums its elements' squares (block_sum), thread 0 writes the block's partial sum and
//     takes a ticket (atomicAdd on a counter); the block that draws the last ticket knows every other
//     partial is written (each block fences before its ticket), adds them in a fixed order (thread t:
//     partials t, t + blockDim.x, ..., then block_sum), zeroes them and the counter for the next
//     launch, and finishes. Nothing depends on which block finishes when, so the result is the same
//     bits on every run. partials (one per block), the counter and total are a workspace that the
//     launcher keeps per device; between two calls all of it is 0.
//   multi_tensor_scale (in place):    x = x * coefficient, coefficient read from the device
//   multi_tensor_adamw_update (in place): adamw.cu's update, adamw_element from adamw.h, with the
//       launcher's per-step scalars (one step t for the whole table)
//   multi_tensor_adamw_count_step (one block): each tensor's step t = t + 1 unless found_inf
//   multi_tensor_adamw_update_skippable (in place): nothing when found_inf; else adamw_element at each
//       tensor's own step t (already counted), step_size and bias_correction2_sqrt computed from t in
//       double by thread 0 per piece, exactly as adamw.cu's adamw_update_skippable does
// The count and the update are two launches: an update block that read t while another block of the
// same launch added 1 to it would race.
//   multi_tensor_cast_to_f16 / _to_bf16 (out: list 1): list 1's tensor k = list 0's (float32) rounded to
//       16 bits, to nearest even; multi_tensor_cast_from_f16 / _from_bf16: a 16-bit list 0 to float32
//       (exact). Autocast's casts of a region's parameters, and of their gradients back, in one launch
//       each way (amp/autocast_mode.py). The table's addresses are float* whatever the data: these
//       kernels read and write them as the 16-bit type their name says (half_precision.h).
// Reference: multi_tensor.py (NumPy); launchers: the same file.
//
// Why it is numerically safe: squares and sums in float32, as the array ops of clip_grad_norm_'s
// plain path: a gradient whose square overflows makes the norm inf (and the coefficient 0), an inf
// gives inf, a nan gives nan; the coefficient is written so that a nan stays nan (fminf(nan, 1)
// would be 1). The sums run in a different order from the plain path's, so the norm agrees with it
// to float32 rounding, not bit for bit. AdamW's arithmetic is adamw_element's, so its results are
// the per-tensor kernel's bits.
#include "block_reduce.h"
#include "adamw.h"
#include "half_precision.h"

#define MT_MAX_TENSORS 64          // per table: (1 + 5) * 8 bytes a tensor, under the 4 KiB of parameters
#define MT_LISTS 5
#define MT_CHUNK 4096              // elements a block takes at a time (16 a thread with 256 threads)
#define MT_STEP 4                  // the list of step counts

struct TensorTable {
    long long start[MT_MAX_TENSORS + 1];
    float* list[MT_LISTS][MT_MAX_TENSORS];
    int count;
};
// multi_tensor.py builds this struct as a NumPy structured dtype: the two must agree byte for byte.
static_assert(sizeof(TensorTable) == 3088, "multi_tensor.py's TABLE dtype assumes 3088 bytes");

// f(k, begin, end) for every piece of this block's chunks: tensor k's elements begin .. end - 1 (its own
// indices). Every thread of the block makes the same calls, so f may hold barriers.
template <typename F>
__device__ __forceinline__ void for_each_piece(const TensorTable& table, F f) {
    long long total = table.start[table.count];
    int k = 0;
    for (long long lo = (long long)blockIdx.x * MT_CHUNK; lo < total; lo += (long long)gridDim.x * MT_CHUNK) {
        long long hi = lo + MT_CHUNK < total ? lo + MT_CHUNK : total;
        while (table.start[k + 1] <= lo) ++k;              // the tensor holding element lo; empty ones pass
        for (int j = k; j < table.count && table.start[j] < hi; ++j) {
            long long begin = lo > table.start[j] ? lo : table.start[j];
            long long end = hi < table.start[j + 1] ? hi : table.start[j + 1];
            if (begin < end) f(j, begin - table.start[j], end - table.start[j]);
        }
    }
}

extern "C" __global__ void multi_tensor_norm_clip(const TensorTable table, float* __restrict__ partials,
                                                  unsigned* __restrict__ ticket, float* __restrict__ total,
                                                  float* __restrict__ norm, float* __restrict__ coefficient,
                                                  float max_norm, int last) {
    float sum = 0.0f;
    for_each_piece(table, [&](int k, long long begin, long long end) {
        const float* g = table.list[0][k];
        for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) sum += g[i] * g[i];
    });
    sum = block_sum(sum);
    __shared__ bool is_last;
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = sum;
        __threadfence();                                   // the partial is visible before the ticket is taken
        is_last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last) return;                                  // the same in every thread of the block
    __threadfence();                                       // and the last block sees every partial
    volatile float* seen = partials;                       // read from memory, not from a cache of this block
    float s = 0.0f;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
        s += seen[b];
        seen[b] = 0.0f;
    }
    s = block_sum(s);
    if (threadIdx.x == 0) {
        s = *total + s;                                    // the tables launched before this one: 0 at the first
        if (last) {
            float n = sqrtf(s);
            float c = max_norm / (n + 1e-6f);
            *norm = n;
            *coefficient = (c < 1.0f || c != c) ? c : 1.0f;    // min(c, 1), keeping a nan
            *total = 0.0f;
        } else {
            *total = s;
        }
        *ticket = 0;
    }
}

extern "C" __global__ void multi_tensor_scale(const TensorTable table, const float* __restrict__ coefficient) {
    float c = *coefficient;
    for_each_piece(table, [&](int k, long long begin, long long end) {
        float* x = table.list[0][k];
        for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) x[i] *= c;
    });
}

extern "C" __global__ void multi_tensor_adamw_update(const TensorTable table, float step_size, float one_minus_beta1,
                                                     float beta2, float one_minus_beta2, float bias_correction2_sqrt,
                                                     float eps, float decay, float l2) {
    for_each_piece(table, [&](int k, long long begin, long long end) {
        for (long long i = begin + threadIdx.x; i < end; i += blockDim.x)
            adamw_element(table.list[0][k], table.list[1][k], table.list[2][k], table.list[3][k], i, step_size,
                          one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps, decay, l2);
    });
}

extern "C" __global__ void multi_tensor_adamw_count_step(const TensorTable table, const float* __restrict__ found_inf) {
    if (*found_inf != 0.0f) return;
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < table.count; k += blockDim.x * gridDim.x)
        *table.list[MT_STEP][k] += 1.0f;
}

// lr, beta1 and beta2 come as doubles, for the bias corrections, as for adamw_update_skippable.
extern "C" __global__ void multi_tensor_adamw_update_skippable(const TensorTable table,
                                                               const float* __restrict__ found_inf, double lr,
                                                               double beta1, double beta2, float eps, float decay,
                                                               float l2) {
    if (*found_inf != 0.0f) return;                        // the same in every thread: nothing changes
    __shared__ float step_size, bias_correction2_sqrt;
    for_each_piece(table, [&](int k, long long begin, long long end) {
        __syncthreads();                                   // everyone is done with the previous piece's two
        if (threadIdx.x == 0) {
            double t = *table.list[MT_STEP][k];
            step_size = (float)(lr / (1.0 - pow(beta1, t)));
            bias_correction2_sqrt = (float)sqrt(1.0 - pow(beta2, t));
        }
        __syncthreads();
        for (long long i = begin + threadIdx.x; i < end; i += blockDim.x)
            adamw_element(table.list[0][k], table.list[1][k], table.list[2][k], table.list[3][k], i, step_size,
                          (float)(1.0 - beta1), (float)beta2, (float)(1.0 - beta2), bias_correction2_sqrt, eps,
                          decay, l2);
    });
}

#if TG_HALF_PRECISION
template <typename TI, typename TO>
__device__ void cast_all(const TensorTable& table) {
    for_each_piece(table, [&](int k, long long begin, long long end) {
        const TI* in = (const TI*)table.list[0][k];
        TO* out = (TO*)table.list[1][k];
        for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) store_float(out + i, load_float(in + i));
    });
}

extern "C" __global__ void multi_tensor_cast_to_f16(const TensorTable table) { cast_all<float, __half>(table); }
extern "C" __global__ void multi_tensor_cast_to_bf16(const TensorTable table) { cast_all<float, __nv_bfloat16>(table); }
extern "C" __global__ void multi_tensor_cast_from_f16(const TensorTable table) { cast_all<__half, float>(table); }
extern "C" __global__ void multi_tensor_cast_from_bf16(const TensorTable table) { cast_all<__nv_bfloat16, float>(table); }
#endif
