// adamw.cu -- one Adam/AdamW step for one parameter tensor, in place.
//
// With g the gradient, p the parameter (fp32 master weights), m and v the two moment
// estimates and t the step number (1, 2, ...), PyTorch's update, in its order:
//     Adam only:   g = g + weight_decay * p                 (L2 penalty inside the gradient, when not 0)
//     AdamW only:  p = p * (1 - lr * weight_decay)          (decoupled weight decay)
//     m = m + (1 - beta1) * (g - m)                          (= beta1 m + (1 - beta1) g)
//     v = beta2 * v + (1 - beta2) * g * g
//     p = p - (lr / (1 - beta1^t)) * (m / (sqrt(v) / sqrt(1 - beta2^t) + eps))
// The launcher computes the per-step scalars on the host in double precision and passes
// them in, so one kernel serves both optimizers with no branch:
//     step_size = lr / (1 - beta1^t),  bias_correction2_sqrt = sqrt(1 - beta2^t),
//     decay = 1 - lr * weight_decay (AdamW) or 1 (Adam),  l2 = weight_decay (Adam) or 0 (AdamW),
//     and 1 - beta1, 1 - beta2 (rounding 1 - 0.9 once beats subtracting from 0.9f, itself rounded).
// Reference: adamw.py (NumPy); launcher: the same file.
//
// Who does what: elementwise, with a grid-stride loop (thread i of the grid handles elements
// i, i + threads in the grid, ...).  Each element is read once and written once: the kernel
// is bound by memory bandwidth (4 arrays read, 3 written), which is why fusing the whole step
// into one pass beats a sequence of array operations that each stream all the data.
//
// Why it is numerically safe: v >= 0 always (a sum of squares), so sqrt(v) is real; eps
// keeps the denominator away from 0; the bias corrections are computed in double on the host
// (1 - 0.999^t loses digits in float for small t).
//
// The skippable step, for loss scaling (tinygrad_gpu.amp.GradScaler): when a scaled backward
// overflowed, the step must not happen, and neither may the host wait to find out. The scaler
// leaves found_inf on the device (0, or not 0 after an inf or nan in a gradient), and the step
// count t lives there too, a float32 as in PyTorch's fused Adam (exact up to 2^24 steps):
//     adamw_count_step (one thread):  t = t + 1 unless found_inf          (a skipped step is no step)
//     adamw_update_skippable:         nothing at all when found_inf; else the update above at step t,
//                                     step_size and bias_correction2_sqrt computed from t in double,
//                                     as the host computes them for adamw_update
// Thread 0 of each block computes those two (two pow() in double are slow on GPUs with little
// double-precision hardware) and shares them; every thread reads found_inf first, so a skipped step
// returns in every thread before the barrier. Both entry points update an element with
// adamw_element, so a step computes the same bits whichever entry point ran it.
// adamw_element, which multi_tensor.cu shares:
#include "adamw.h"

extern "C" __global__ void adamw_update(float* __restrict__ param, const float* __restrict__ grad,
                                       float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq, long long n,
                                       float step_size, float one_minus_beta1, float beta2, float one_minus_beta2,
                                       float bias_correction2_sqrt, float eps, float decay, float l2) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x)
        adamw_element(param, grad, exp_avg, exp_avg_sq, i, step_size, one_minus_beta1, beta2, one_minus_beta2,
                      bias_correction2_sqrt, eps, decay, l2);
}

extern "C" __global__ void adamw_count_step(float* __restrict__ step, const float* __restrict__ found_inf) {
    if (*found_inf == 0.0f) *step += 1.0f;
}

// lr, beta1 and beta2 come as doubles, for the bias corrections; their float32 forms are rounded here,
// once, as the launcher of adamw_update rounds them.
extern "C" __global__ void adamw_update_skippable(float* __restrict__ param, const float* __restrict__ grad,
                                                  float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq,
                                                  long long n, const float* __restrict__ step,
                                                  const float* __restrict__ found_inf, double lr, double beta1,
                                                  double beta2, float eps, float decay, float l2) {
    if (*found_inf != 0.0f) return;                        // the same in every thread: param and moments stay
    __shared__ float step_size, bias_correction2_sqrt;
    if (threadIdx.x == 0) {
        double t = *step;
        step_size = (float)(lr / (1.0 - pow(beta1, t)));
        bias_correction2_sqrt = (float)sqrt(1.0 - pow(beta2, t));
    }
    __syncthreads();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x)
        adamw_element(param, grad, exp_avg, exp_avg_sq, i, step_size, (float)(1.0 - beta1), (float)beta2,
                      (float)(1.0 - beta2), bias_correction2_sqrt, eps, decay, l2);
}
