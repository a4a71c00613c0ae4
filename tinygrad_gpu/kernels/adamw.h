// adamw.h -- one element of an Adam/AdamW step: the arithmetic of adamw.cu's opening comment,
// shared by adamw.cu (one parameter per launch) and multi_tensor.cu (all the parameters of a group
// in one launch), so that a step computes the same bits whichever kernel ran it.
//
// Element i of param, grad, exp_avg and exp_avg_sq; the per-step scalars as adamw.cu describes them
// (step_size = lr / (1 - beta1^t), bias_correction2_sqrt = sqrt(1 - beta2^t), decay, l2, and
// 1 - beta1, 1 - beta2 rounded once).
#pragma once

__device__ __forceinline__ void adamw_element(float* __restrict__ param, const float* __restrict__ grad,
                                              float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq, long long i,
                                              float step_size, float one_minus_beta1, float beta2,
                                              float one_minus_beta2, float bias_correction2_sqrt, float eps,
                                              float decay, float l2) {
    float p = param[i];
    float g = l2 != 0.0f ? grad[i] + l2 * p : grad[i];    // not 0 * p: that is nan where p is inf
    p *= decay;
    float m = exp_avg[i] + one_minus_beta1 * (g - exp_avg[i]);
    float v = beta2 * exp_avg_sq[i] + one_minus_beta2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = p - step_size * (m / (sqrtf(v) / bias_correction2_sqrt + eps));
}
