// half_precision.h -- float16 and bfloat16 in memory, float32 in arithmetic, for our kernels.
//
// A kernel that takes 16-bit data is written once, as a template over its storage type T
// (float, __half or __nv_bfloat16), and touches that data only through these two functions:
//     load_float(p)      *p as a float (exact: every 16-bit value is a float32 value)
//     store_float(p, v)  *p = v, rounded once to T, to nearest with ties to even
// so that everything between a load and a store (products, sums, exp, the saved statistics) is
// float32 arithmetic, the same for every T; only the stored results differ, by their rounding.
// Each .cu file has one extern "C" entry point per storage type: the float32 one under its
// plain name, and NAME_f16 and NAME_bf16 (runtime.entry_point picks one by the arrays' dtype).
// A kernel that also reads float32 and writes 16 bits, or reads 16 bits into float32, names the
// 16-bit side: NAME_to_f16 / NAME_to_bf16 and NAME_from_f16 / NAME_from_bf16 (dropout.cu,
// layernorm.cu, multi_tensor.cu).
//
// The 16-bit types and their conversions come from NVIDIA's cuda_fp16.h and cuda_bf16.h, which
// CuPy finds in a CUDA toolkit or in the nvidia-cuda-runtime-cu12 wheel, and which a GPU machine
// may lack.  So they, and every 16-bit entry point, are compiled only when TG_HALF_PRECISION is
// set: on a GPU, runtime.py builds each file twice, without the macro for the float32 kernels
// (which then need no header at all) and with -DTG_HALF_PRECISION=1 for the first 16-bit launch.
// The emulator always sets it: cuda_emu.h defines the two types and their conversions itself.
#pragma once

#if TG_HALF_PRECISION && defined(__CUDACC__)   // NVRTC (and nvcc); not the emulator's g++
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif

__device__ __forceinline__ float load_float(const float* p) { return *p; }
__device__ __forceinline__ void store_float(float* p, float v) { *p = v; }

#if TG_HALF_PRECISION
__device__ __forceinline__ float load_float(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float load_float(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store_float(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store_float(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
#endif
