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
extern "C" __global__ void adamw_update(float* __restrict__ param, const float* __restrict__ grad,
                                       float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq, long long n,
                                       float step_size, float one_minus_beta1, float beta2, float one_minus_beta2,
                                       float bias_correction2_sqrt, float eps, float decay, float l2) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        float p = param[i];
        float g = l2 != 0.0f ? grad[i] + l2 * p : grad[i];    // not 0 * p: that is nan where p is inf
        p *= decay;
        float m = exp_avg[i] + one_minus_beta1 * (g - exp_avg[i]);
        float v = beta2 * exp_avg_sq[i] + one_minus_beta2 * g * g;
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
        param[i] = p - step_size * (m / (sqrtf(v) / bias_correction2_sqrt + eps));
    }
}
