// grad_scaler.cu -- loss scaling for float16 training (tinygrad_gpu.amp.GradScaler), on the device.
//
// float16 flushes gradients below about 6e-8 to 0. Multiplying the loss by a scale S (2^16 to
// start) multiplies every gradient by S and lifts them clear of that; before the optimizer steps,
// they are divided back. An S too large overflows somewhere (inf, or nan from inf - inf): that
// step is skipped and S shrinks; after growth_interval clean steps in a row S grows again.
// PyTorch's two ops, _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_, one
// gradient tensor at a time:
//
//   amp_non_finite_check_and_unscale (in place):
//       found_inf = 1 if any g is inf or nan, looked at before unscaling (else found_inf is left as
//                   it is, so one flag collects the verdict over all the gradients of a device)
//       g = g * inv_scale,  inv_scale = float(1 / double(scale))
//   amp_update_scale (one thread):
//       found_inf != 0:  scale = float(double(scale) * backoff_factor),  growth_tracker = 0
//       otherwise:       growth_tracker + 1 clean steps in a row; when that reaches growth_interval,
//                        growth_tracker = 0 and scale = float(double(scale) * growth_factor), unless
//                        that is inf (the scale is then kept); else growth_tracker = growth_tracker + 1
// Reference: grad_scaler.py (NumPy); launchers: the same file.
//
// Who does what: the unscale is elementwise with a grid-stride loop (thread i of the grid handles
// elements i, i + threads in the grid, ...). Each thread reads scale from device memory and forms
// inv_scale itself (one division a thread), so the host never reads the scale and launches no
// kernel to invert it. A thread that meets a non-finite value stores 1 into found_inf; many threads
// may, all storing the same value, so whichever store lands last is right and no atomic is needed
// (PyTorch's kernel does the same). The scale update is three numbers: one thread, so that
// the host never reads found_inf to decide between growth and backoff.
//
// Why it is numerically safe: the reciprocal is computed in double and rounded once, as PyTorch
// does (float division is not always correctly rounded under fast-math options); for the power-of-two
// scales that growth and backoff by 2 keep, inv_scale is exact and so is every product g * inv_scale
// (barring float32's subnormals), so unscaling adds no rounding. The check looks at g before the
// multiplication, where an overflow of the scaled backward shows. The scale is multiplied in double and
// rounded once, and growth that would overflow float32 to inf is refused.
extern "C" __global__ void amp_non_finite_check_and_unscale(float* __restrict__ grad, long long n,
                                                            float* __restrict__ found_inf,
                                                            const float* __restrict__ scale) {
    float inv_scale = (float)(1.0 / (double)*scale);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        float g = grad[i];
        if (!isfinite(g)) *found_inf = 1.0f;
        grad[i] = g * inv_scale;
    }
}

extern "C" __global__ void amp_update_scale(float* __restrict__ scale, int* __restrict__ growth_tracker,
                                            const float* __restrict__ found_inf, double growth_factor,
                                            double backoff_factor, int growth_interval) {
    if (*found_inf != 0.0f) {
        *scale = (float)((double)*scale * backoff_factor);
        *growth_tracker = 0;
        return;
    }
    int successful = *growth_tracker + 1;          // this step was clean: one more in a row
    if (successful == growth_interval) {
        float grown = (float)((double)*scale * growth_factor);
        if (isfinite(grown)) *scale = grown;
        *growth_tracker = 0;
    } else {
        *growth_tracker = successful;
    }
}
