// cuda_emu.h -- gives CUDA C its meaning on a CPU, so that our kernels run without a GPU.
//
// tinygrad_gpu/kernels/emulator.py compiles a .cu file with g++ after this header, and
// launches its kernels through ctypes with the same grid and block a GPU would get.
// It is a tool for checking and reading kernels, not a fast path.
//
// How a launch runs
//   * Blocks are independent, so OpenMP hands them to the CPU cores; each core runs one
//     block at a time, from start to finish.
//   * Inside a block every CUDA thread is a *fiber*: a function call with its own small
//     stack that can pause and be resumed later.  One OS thread switches between the
//     fibers of its block; nothing runs truly in parallel inside a block.
//   * A fiber runs until it reaches a barrier (__syncthreads, __syncwarp, a warp shuffle
//     or vote) or returns.  When every fiber of the block is paused, the scheduler
//     releases the barriers whose threads have all arrived and runs the released fibers
//     again.  If nothing can be released, the threads can never meet: the launch stops
//     and Python raises an error that says which threads wait where.  That includes
//     threads that returned while others wait at __syncthreads (undefined in CUDA: it may
//     hang or silently misbehave on a GPU).  A thread that loops forever without reaching
//     a barrier is not detected: nothing else runs on its core until it pauses.
//   * Switching fibers: the first entry uses makecontext/setcontext (it builds the new
//     stack); every later switch is _setjmp/_longjmp, which costs a few nanoseconds where
//     swapcontext costs a system call.  glibc's _FORTIFY_SOURCE checks would abort on a
//     longjmp onto another stack, so the emulator compiles with -U_FORTIFY_SOURCE.
//   * The fixed schedule (thread 0 first, then 1, ...) can hide a race, e.g. thread i
//     reading what thread i-1 wrote without a barrier in between.  A non-zero shuffle
//     seed runs the fibers in a new random order at every barrier round instead.
//
// The CUDA vocabulary, mapped
//   threadIdx           the running fiber's index;  blockIdx, blockDim, gridDim: per core
//   __shared__          thread_local: one copy per core = per running block
//   extern __shared__   (dynamic shared memory) emulator.py rewrites the declaration into a
//                       pointer to a per-core buffer of the launch's shared_mem bytes
//   __shfl_*_sync       each lane writes its value to its warp's slot, all lanes meet at a
//                       warp barrier, read the slot they want, and meet again (so nobody
//                       overwrites a slot before everyone has read it)
//   atomicAdd & co.     GCC __atomic builtins (fibers of one block never switch inside an
//                       atomic; different blocks run on different cores at the same time)
//   __half, __nv_bfloat16  2-byte structs holding the bits, with the conversions to and from
//                       float written out by hand (cuda_fp16.h and cuda_bf16.h are NVIDIA's)
#pragma once

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <cstddef>
#include <type_traits>
#include <utility>

// ----------------------------------------------------------------------------- keywords
#define __global__
#define __host__
#define __device__ static
#define __constant__ static
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __shared__ thread_local   // at block scope thread_local implies static: one per core

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
static const int warpSize = 32;

// ----------------------------------------------------------------------------- device math
// glibc declares __expf and __logf but does not export them: map CUDA's fast intrinsics to
// the ordinary functions (more accurate, which is fine for a reference machine).
#define __expf expf
#define __logf logf
#define __powf powf
#define __sinf sinf
#define __cosf cosf
#define __tanf tanf
#define __fdividef(a, b) ((a) / (b))
#define __fmaf_rn fmaf
#define __fsqrt_rn sqrtf
#define __ldg(p) (*(p))
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __saturatef(float x) { return fminf(fmaxf(x, 0.0f), 1.0f); }
static inline float __int_as_float(int v) { float f; memcpy(&f, &v, 4); return f; }
static inline int __float_as_int(float f) { int v; memcpy(&v, &f, 4); return v; }
static inline float __uint_as_float(unsigned v) { float f; memcpy(&f, &v, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned v; memcpy(&v, &f, 4); return v; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

// ----------------------------------------------------------------------------- 16-bit floats
// What cuda_fp16.h and cuda_bf16.h give a kernel for storing values in 16 bits: the two types,
// and their conversions to and from float (round to nearest, ties to even, as CUDA's _rn ones;
// the short names __float2half and __float2bfloat16 round the same way on a GPU).  Written with
// integer arithmetic on the bits, so that the result does not depend on the host's compiler or
// hardware.  The bit layouts, sign | exponent | fraction, with the exponent's bias:
//     float32   1 | 8 (bias 127) | 23        bits 31 | 30..23 | 22..0
//     float16   1 | 5 (bias 15)  | 10        bits 15 | 14..10 |  9..0
//     bfloat16  1 | 8 (bias 127) |  7        bits 15 | 14..7  |  6..0   (the top half of a float32)
// An exponent field of all ones is infinity (fraction 0) or NaN (fraction != 0); all zeros is
// zero or a subnormal number, fraction * 2^(1 - bias - fraction bits), with no implicit leading 1.
struct __half { uint16_t bits; };
struct __nv_bfloat16 { uint16_t bits; };

static inline float __half2float(__half h) {
    const uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
    uint32_t exponent = (h.bits >> 10) & 0x1fu, fraction = h.bits & 0x3ffu;
    if (exponent == 0x1fu) return __uint_as_float(sign | 0x7f800000u | fraction << 13);   // inf, NaN (payload kept)
    if (exponent != 0) return __uint_as_float(sign | (exponent + 127 - 15) << 23 | fraction << 13);
    if (fraction == 0) return __uint_as_float(sign);                                      // +-0
    // A subnormal, fraction * 2^-24, is a normal float32: shift the fraction up until its leading 1
    // reaches the implicit bit's place (bit 10), lowering the exponent by one for each step.
    int shifts = 0;
    while (!(fraction & 0x400u)) {
        fraction <<= 1;
        ++shifts;
    }
    return __uint_as_float(sign | (uint32_t)(127 - 14 - shifts) << 23 | (fraction & 0x3ffu) << 13);
}

// value / 2^shift rounded to the nearest integer, ties to the even one (0 < shift < 32).
static inline uint32_t emu_shift_right_to_nearest_even(uint32_t value, int shift) {
    const uint32_t kept = value >> shift, dropped = value & ((1u << shift) - 1u), half = 1u << (shift - 1);
    return kept + (dropped > half || (dropped == half && (kept & 1u)));
}

static inline __half __float2half_rn(float f) {
    const uint32_t bits = __float_as_uint(f), sign = (bits >> 16) & 0x8000u, magnitude = bits & 0x7fffffffu;
    uint32_t h;
    if (magnitude > 0x7f800000u) {                 // NaN: keep the fraction's top 10 bits, and stay a NaN
        h = 0x7c00u | (magnitude >> 13 & 0x3ffu);
        if (h == 0x7c00u) h = 0x7e00u;
    } else if (magnitude >= 0x477ff000u) {         // >= 65520, halfway from 65504 (the largest) up: inf
        h = 0x7c00u;
    } else if (magnitude >= 0x38800000u) {         // >= 2^-14: a normal float16.  Rebias the exponent
        // (127 - 15 = 112) and round off 13 fraction bits; a carry out of the fraction moves to the
        // next binade, correctly.
        h = emu_shift_right_to_nearest_even(magnitude - (112u << 23), 13);
    } else {                                       // a float16 subnormal, or 0: count units of 2^-24
        // magnitude = 2^(e - 127) * 1.f = M * 2^(e - 150) with M = 1.f * 2^23, so M * 2^(e - 126) units.
        const int exponent = (int)(magnitude >> 23), shift = 126 - exponent;          // >= 14
        h = shift > 24 ? 0u                        // below 2^-25, half the smallest subnormal: 0
                       : emu_shift_right_to_nearest_even((magnitude & 0x7fffffu) | 0x800000u, shift);
    }
    return __half{(uint16_t)(sign | h)};
}
static inline __half __float2half(float f) { return __float2half_rn(f); }

// bfloat16 is a float32 with the low 16 bits dropped: the same exponent, so no rebias, and
// subnormals and overflow to infinity come out of the one rounding step.
static inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float((uint32_t)b.bits << 16); }

static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    const uint32_t bits = __float_as_uint(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {      // NaN: keep the fraction's top 7 bits, and stay a NaN
        uint32_t b = bits >> 16;
        return __nv_bfloat16{(uint16_t)((b & 0x7fu) ? b : b | 0x40u)};
    }
    return __nv_bfloat16{(uint16_t)emu_shift_right_to_nearest_even(bits, 16)};   // 0x7f7fffff carries into inf
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }

// ----------------------------------------------------------------------------- atomics
// Floating-point atomicAdd has no GCC builtin: compare-and-swap on the bits until no other
// core changed the value between our read and our write.
template <typename F, typename I>
static inline F emu_atomic_add_float(F* address, F value) {
    I* bits = reinterpret_cast<I*>(address);
    I seen = __atomic_load_n(bits, __ATOMIC_RELAXED);
    for (;;) {
        F old_value, new_value;
        memcpy(&old_value, &seen, sizeof(F));
        new_value = old_value + value;
        I wanted;
        memcpy(&wanted, &new_value, sizeof(F));
        if (__atomic_compare_exchange_n(bits, &seen, wanted, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return old_value;
    }
}
static inline float atomicAdd(float* a, float v) { return emu_atomic_add_float<float, uint32_t>(a, v); }
static inline double atomicAdd(double* a, double v) { return emu_atomic_add_float<double, uint64_t>(a, v); }
static inline int atomicAdd(int* a, int v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }
static inline unsigned atomicAdd(unsigned* a, unsigned v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }
static inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
    return __atomic_fetch_add(a, v, __ATOMIC_RELAXED);
}
static inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }
static inline int atomicMax(int* a, int v) {
    int seen = __atomic_load_n(a, __ATOMIC_RELAXED);
    while (seen < v && !__atomic_compare_exchange_n(a, &seen, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return seen;
}
static inline int atomicMin(int* a, int v) {
    int seen = __atomic_load_n(a, __ATOMIC_RELAXED);
    while (seen > v && !__atomic_compare_exchange_n(a, &seen, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return seen;
}
template <typename T> static inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }
template <typename T> static inline T atomicCAS(T* a, T compare, T v) {
    __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return compare;   // the old value, whether or not the swap happened
}
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ----------------------------------------------------------------------------- fibers
#ifndef EMU_STACK_BYTES
#define EMU_STACK_BYTES (64 * 1024)   // per CUDA thread; kernels keep little on the stack
#endif
// Below every stack lie EMU_CANARY_BYTES of a known pattern; a thread that overflows its stack
// overwrites them, and the launch reports it.  (Guard pages would fault instead, but every one
// splits the mapping, and 1024 threads x cores x modules exceed the kernel's limit on mappings.)
#define EMU_CANARY_BYTES 256
#define EMU_CANARY 0xA5

enum EmuState { EMU_RUNNABLE, EMU_AT_SYNCTHREADS, EMU_AT_WARP_BARRIER, EMU_EXITED };
enum EmuResult { EMU_OK, EMU_FAILED, EMU_DEADLOCK };   // what a launch returns to Python

struct EmuFiber {
    jmp_buf context;          // where to resume this fiber (valid once started)
    ucontext_t start;         // how to enter it the first time
    int started;
    uint3 thread_idx;
    int lane, warp;
    int state;                // EmuState
    unsigned mask;            // lanes a warp barrier waits for
    const char* file;         // where it waits, for the deadlock message
    int line;
    const char* what;
};

struct EmuLaunch {
    dim3 grid, block;
    unsigned long long shared_bytes;
    void (*thunk)(void* kernel, void** args);
    void* kernel;
    void** args;
    unsigned long long shuffle_seed;   // 0: fixed order
    const char* name;
    int failed;                        // EmuResult; set by the first block that fails, others skip
    char* error;
    unsigned long long error_size;
};

struct EmuCore {                       // everything one CPU core needs to run blocks
    EmuFiber* fibers;
    int* order;
    int capacity;
    char* stacks;
    size_t stacks_bytes;
    jmp_buf scheduler;
    EmuLaunch* launch;
    uint3 block_idx;
    unsigned long long warp_slots[32][32];
    char* dynamic_shared;
    unsigned long long dynamic_capacity;
    unsigned long long rng;
};

static thread_local EmuCore emu_core;
static thread_local EmuFiber* emu_self;    // the fiber running now on this core

#define threadIdx (emu_self->thread_idx)
#define blockIdx (emu_core.block_idx)
#define blockDim (emu_core.launch->block)
#define gridDim (emu_core.launch->grid)

static inline void* emu_dynamic_shared() { return emu_core.dynamic_shared; }

// Pause the running fiber and return to the scheduler; returns when the scheduler resumes it.
// noinline: the jmp_buf must describe this small frame, not the kernel's.
static __attribute__((noinline)) void emu_pause(EmuFiber* self) {
    if (!_setjmp(self->context)) _longjmp(emu_core.scheduler, 1);
}

static void emu_fiber_main() {
    for (;;) {                         // a fiber is reused for the same thread of every block
        EmuLaunch* launch = emu_core.launch;
        launch->thunk(launch->kernel, launch->args);
        emu_self->state = EMU_EXITED;
        emu_self->what = NULL;
        emu_self->line = 0;
        emu_pause(emu_self);
    }
}

// Run `fiber` until it pauses or exits; the scheduler's own frame is saved in emu_core.scheduler.
static __attribute__((noinline)) void emu_resume(EmuFiber* fiber) {
    emu_self = fiber;
    if (!_setjmp(emu_core.scheduler)) {
        if (fiber->started) _longjmp(fiber->context, 1);
        fiber->started = 1;
        setcontext(&fiber->start);
    }
}

static void emu_wait(int state, unsigned mask, const char* what, const char* file, int line) {
    EmuFiber* self = emu_self;
    self->state = state;
    self->mask = mask;
    self->what = what;
    self->file = file;
    self->line = line;
    // A barrier is where other threads' writes become visible: the compiler must not keep
    // shared or global values in registers across it (the empty asm "clobbers all memory").
    __asm__ __volatile__("" ::: "memory");
    emu_pause(self);
    __asm__ __volatile__("" ::: "memory");
}

#define __syncthreads() emu_wait(EMU_AT_SYNCTHREADS, 0u, "__syncthreads()", __FILE__, __LINE__)
#define __syncwarp(...) emu_syncwarp(__FILE__, __LINE__, ##__VA_ARGS__)   // ## drops the comma (GNU C++)
static inline void emu_syncwarp(const char* file, int line, unsigned mask = 0xffffffffu) {
    emu_wait(EMU_AT_WARP_BARRIER, mask, "__syncwarp()", file, line);
}

// ----------------------------------------------------------------------------- warp exchange
// Every shuffle and vote is: write my value to my slot, meet, read a slot, meet again.
static inline unsigned long long emu_exchange(unsigned mask, unsigned long long mine, int source_lane,
                                              const char* what, const char* file, int line) {
    EmuFiber* self = emu_self;
    unsigned long long* slots = emu_core.warp_slots[self->warp];
    slots[self->lane] = mine;
    emu_wait(EMU_AT_WARP_BARRIER, mask, what, file, line);
    unsigned long long theirs = slots[source_lane];
    emu_wait(EMU_AT_WARP_BARRIER, mask, what, file, line);
    return theirs;
}

template <typename T>
static inline T emu_shuffle(unsigned mask, T value, int source, int width, const char* what, const char* file,
                            int line) {
    static_assert(sizeof(T) <= 8, "the emulator shuffles values of at most 8 bytes");
    const int lane = emu_self->lane;
    const int segment = lane - lane % width;            // shuffles stay inside groups of `width` lanes
    const int lanes_here = (int)(blockDim.x * blockDim.y * blockDim.z) - emu_self->warp * 32;
    if (source < segment || source >= segment + width || source >= lanes_here) source = lane;   // own value
    unsigned long long bits = 0;
    memcpy(&bits, &value, sizeof(T));
    bits = emu_exchange(mask, bits, source, what, file, line);
    T out;
    memcpy(&out, &bits, sizeof(T));
    return out;
}

#define __shfl_sync(...) emu_shfl_idx(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) emu_shfl_xor(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) emu_shfl_down(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) emu_shfl_up(__FILE__, __LINE__, __VA_ARGS__)
template <typename T> static inline T emu_shfl_idx(const char* f, int l, unsigned mask, T v, int src, int w = 32) {
    int lane = emu_self->lane;
    return emu_shuffle(mask, v, lane - lane % w + ((src % w) + w) % w, w, "__shfl_sync", f, l);
}
template <typename T> static inline T emu_shfl_xor(const char* f, int l, unsigned mask, T v, int bits, int w = 32) {
    return emu_shuffle(mask, v, emu_self->lane ^ bits, w, "__shfl_xor_sync", f, l);
}
template <typename T> static inline T emu_shfl_down(const char* f, int l, unsigned mask, T v, unsigned d, int w = 32) {
    return emu_shuffle(mask, v, emu_self->lane + (int)d, w, "__shfl_down_sync", f, l);
}
template <typename T> static inline T emu_shfl_up(const char* f, int l, unsigned mask, T v, unsigned d, int w = 32) {
    return emu_shuffle(mask, v, emu_self->lane - (int)d, w, "__shfl_up_sync", f, l);
}

#define __ballot_sync(mask, predicate) emu_ballot(mask, predicate, "__ballot_sync", __FILE__, __LINE__)
#define __any_sync(mask, predicate) (emu_ballot(mask, predicate, "__any_sync", __FILE__, __LINE__) != 0u)
#define __all_sync(mask, predicate) \
    (emu_ballot(mask, predicate, "__all_sync", __FILE__, __LINE__) == emu_mask_here(mask))
static inline unsigned emu_mask_here(unsigned mask) {   // mask bits of lanes that exist in this warp
    int lanes = (int)(blockDim.x * blockDim.y * blockDim.z) - emu_self->warp * 32;
    return lanes >= 32 ? mask : mask & ((1u << lanes) - 1u);
}
static inline unsigned emu_ballot(unsigned mask, int predicate, const char* what, const char* file, int line) {
    EmuFiber* self = emu_self;
    unsigned long long* slots = emu_core.warp_slots[self->warp];
    slots[self->lane] = predicate != 0;
    emu_wait(EMU_AT_WARP_BARRIER, mask, what, file, line);
    unsigned votes = 0, here = emu_mask_here(mask);
    for (int lane = 0; lane < 32; ++lane)
        if ((here >> lane & 1u) && slots[lane]) votes |= 1u << lane;
    emu_wait(EMU_AT_WARP_BARRIER, mask, what, file, line);
    return votes;
}
static inline unsigned __activemask() {
    unsigned active = 0;
    EmuFiber* warp = emu_self - emu_self->lane;
    for (int lane = 0; lane < 32 && emu_self->warp * 32 + lane < (int)(blockDim.x * blockDim.y * blockDim.z); ++lane)
        if (warp[lane].state != EMU_EXITED) active |= 1u << lane;
    return active;
}

// ----------------------------------------------------------------------------- the scheduler
static unsigned long long emu_random(unsigned long long* state) {   // xorshift64*
    unsigned long long x = *state;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

// Make room for n fibers (and the launch's dynamic shared memory) on this core.
static int emu_prepare_core(EmuLaunch* launch, int n) {
    EmuCore* core = &emu_core;
    core->launch = launch;
    if (n > core->capacity) {
        if (core->stacks) munmap(core->stacks, core->stacks_bytes);
        free(core->fibers);
        free(core->order);
        const size_t slot = EMU_STACK_BYTES + EMU_CANARY_BYTES;
        core->stacks_bytes = slot * (size_t)n;
        core->stacks = (char*)mmap(NULL, core->stacks_bytes, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        core->fibers = (EmuFiber*)calloc((size_t)n, sizeof(EmuFiber));
        core->order = (int*)calloc((size_t)n, sizeof(int));
        if (core->stacks == MAP_FAILED || !core->fibers || !core->order) {
            core->stacks = NULL;
            core->capacity = 0;
            return 1;
        }
        for (int i = 0; i < n; ++i) {
            char* base = core->stacks + slot * (size_t)i;
            memset(base, EMU_CANARY, EMU_CANARY_BYTES);
            EmuFiber* f = &core->fibers[i];
            getcontext(&f->start);
            f->start.uc_stack.ss_sp = base + EMU_CANARY_BYTES;
            f->start.uc_stack.ss_size = EMU_STACK_BYTES;
            f->start.uc_link = NULL;
            makecontext(&f->start, emu_fiber_main, 0);
        }
        core->capacity = n;
    }
    if (launch->shared_bytes > core->dynamic_capacity) {
        free(core->dynamic_shared);
        core->dynamic_shared = (char*)aligned_alloc(64, (launch->shared_bytes + 63) / 64 * 64);
        if (!core->dynamic_shared) { core->dynamic_capacity = 0; return 1; }
        core->dynamic_capacity = launch->shared_bytes;
    }
    return 0;
}

// Did a thread write below its stack?  Returns the first such thread, or -1.
static int emu_overflowed_stack(int n) {
    for (int i = 0; i < n && i < emu_core.capacity; ++i) {
        const unsigned char* canary = (const unsigned char*)emu_core.fibers[i].start.uc_stack.ss_sp - EMU_CANARY_BYTES;
        for (int k = 0; k < EMU_CANARY_BYTES; ++k)
            if (canary[k] != EMU_CANARY) return i;
    }
    return -1;
}
// The lowest address of the running thread's stack (for the emulator's own tests).
static inline char* emu_stack_bottom() { return (char*)emu_self->start.uc_stack.ss_sp; }

// Release every barrier whose threads have all arrived; returns how many fibers were released.
static int emu_release(EmuFiber* fibers, int n, int exited) {
    int at_syncthreads = 0, released = 0;
    for (int i = 0; i < n; ++i) at_syncthreads += fibers[i].state == EMU_AT_SYNCTHREADS;
    if (exited == 0 && at_syncthreads == n) {
        for (int i = 0; i < n; ++i) fibers[i].state = EMU_RUNNABLE;
        return n;
    }
    for (int base = 0; base < n; base += 32) {           // warp barriers: every lane in the mask is there
        int lanes = n - base < 32 ? n - base : 32;
        unsigned present = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u, waiting = 0;
        for (int lane = 0; lane < lanes; ++lane)
            if (fibers[base + lane].state == EMU_AT_WARP_BARRIER) waiting |= 1u << lane;
        for (int lane = 0; lane < lanes; ++lane) {
            EmuFiber* f = &fibers[base + lane];
            if (f->state == EMU_AT_WARP_BARRIER && (f->mask & present & ~waiting) == 0) {
                f->state = EMU_RUNNABLE;
                ++released;
            }
        }
    }
    return released;
}

// The deadlock message: runs of consecutive threads that wait at the same place.
static void emu_describe(EmuFiber* fibers, int n, char* out, size_t size) {
    EmuLaunch* L = emu_core.launch;
    uint3 b = emu_core.block_idx;
    size_t used = (size_t)snprintf(out, size, "kernel '%s', block (%u, %u, %u): its threads can never all meet "
                                   "at a barrier, so the kernel would hang on a GPU.", L->name, b.x, b.y, b.z);
    int groups = 0;
    for (int start = 0; start < n && used < size; ++groups) {
        EmuFiber* f = &fibers[start];
        int end = start + 1;
        while (end < n && fibers[end].state == f->state && fibers[end].line == f->line && fibers[end].what == f->what)
            ++end;
        if (groups == 12) {
            used += (size_t)snprintf(out + used, size - used, "\n  ...");
            break;
        }
        const char* range = end - start == 1 ? "thread" : "threads";
        if (end - start == 1) used += (size_t)snprintf(out + used, size - used, "\n  %s %d ", range, start);
        else used += (size_t)snprintf(out + used, size - used, "\n  %s %d-%d ", range, start, end - 1);
        if (used >= size) break;
        if (f->state == EMU_EXITED)
            used += (size_t)snprintf(out + used, size - used, "returned without reaching it");
        else
            used += (size_t)snprintf(out + used, size - used, "wait at %s (%s:%d)", f->what, f->file, f->line);
        start = end;
    }
}

// Run one block to the end.  Returns 0, or 1 with a message in `error`.
static int emu_run_block(int n, char* error, size_t error_size) {
    EmuCore* core = &emu_core;
    EmuLaunch* L = core->launch;
    const unsigned bx = L->block.x, by = L->block.y;
    for (int i = 0; i < n; ++i) {
        EmuFiber* f = &core->fibers[i];
        f->thread_idx.x = i % bx;
        f->thread_idx.y = (i / bx) % by;
        f->thread_idx.z = i / (bx * by);
        f->lane = i % 32;
        f->warp = i / 32;
        f->state = EMU_RUNNABLE;
        core->order[i] = i;
    }
    for (;;) {
        if (L->shuffle_seed) {                           // a new random order for every round
            for (int i = n - 1; i > 0; --i) {
                int j = (int)(emu_random(&core->rng) % (unsigned long long)(i + 1));
                int t = core->order[i]; core->order[i] = core->order[j]; core->order[j] = t;
            }
        }
        for (int k = 0; k < n; ++k) {
            EmuFiber* f = &core->fibers[core->order[k]];
            if (f->state == EMU_RUNNABLE) emu_resume(f);
        }
        int exited = 0;
        for (int i = 0; i < n; ++i) exited += core->fibers[i].state == EMU_EXITED;
        if (exited == n) return 0;
        if (!emu_release(core->fibers, n, exited)) {
            emu_describe(core->fibers, n, error, error_size);
            for (int i = 0; i < n; ++i) core->fibers[i].started = 0;   // their stacks are abandoned mid-kernel
            return 1;
        }
    }
}

// Record the launch's first failure (its code and message); later ones are dropped.
static void emu_fail(EmuLaunch* L, int code, const char* format, ...) {
    int expected = EMU_OK;
    if (!__atomic_compare_exchange_n(&L->failed, &expected, code, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return;
    va_list args;
    va_start(args, format);
    vsnprintf(L->error, L->error_size, format, args);
    va_end(args);
}

static int emu_run(EmuLaunch* L) {
    const long long blocks = (long long)L->grid.x * L->grid.y * L->grid.z;
    const int n = (int)(L->block.x * L->block.y * L->block.z);
    L->failed = EMU_OK;
#pragma omp parallel
    {
        char message[4096];
        int ready = emu_prepare_core(L, n) == 0;
        if (!ready) emu_fail(L, EMU_FAILED, "kernel '%s': out of memory for %d thread stacks", L->name, n);
#pragma omp for schedule(dynamic, 1)
        for (long long b = 0; b < blocks; ++b) {
            if (!ready || __atomic_load_n(&L->failed, __ATOMIC_RELAXED)) continue;
            emu_core.block_idx.x = (unsigned)(b % L->grid.x);
            emu_core.block_idx.y = (unsigned)((b / L->grid.x) % L->grid.y);
            emu_core.block_idx.z = (unsigned)(b / ((long long)L->grid.x * L->grid.y));
            emu_core.rng = L->shuffle_seed * 0x9E3779B97F4A7C15ULL + (unsigned long long)b + 1;
            if (emu_run_block(n, message, sizeof message)) emu_fail(L, EMU_DEADLOCK, "%s", message);
        }
        int culprit = ready ? emu_overflowed_stack(n) : -1;
        if (culprit >= 0) {
            memset((char*)emu_core.fibers[culprit].start.uc_stack.ss_sp - EMU_CANARY_BYTES, EMU_CANARY,
                   EMU_CANARY_BYTES);
            emu_fail(L, EMU_FAILED, "kernel '%s': thread %d overflowed its %d KB emulator stack (large local "
                     "arrays? compile with -DEMU_STACK_BYTES=...); results are unreliable", L->name, culprit,
                     EMU_STACK_BYTES / 1024);
        }
    }
    return L->failed;
}

// ----------------------------------------------------------------------------- entry points
// emulator.py appends, for every kernel K of the .cu file,
//     extern "C" int emu_launch__K(...)       { return emu_launch(K, ...); }
//     extern "C" const char* emu_signature__K() { return emu_signature(K); }
// Arguments arrive as CUDA's cuLaunchKernel takes them: an array of pointers to the values.
template <typename... A, size_t... I>
static void emu_call(void* kernel, void** args, std::index_sequence<I...>) {
    reinterpret_cast<void (*)(A...)>(kernel)(*static_cast<A*>(args[I])...);
}
template <typename... A>
static void emu_thunk(void* kernel, void** args) { emu_call<A...>(kernel, args, std::index_sequence_for<A...>{}); }

template <typename... A>
static int emu_launch(void (*kernel)(A...), const char* name, const unsigned* grid, const unsigned* block,
                      unsigned long long shared_bytes, void** args, unsigned long long shuffle_seed, char* error,
                      unsigned long long error_size) {
    EmuLaunch L;
    L.grid = dim3(grid[0], grid[1], grid[2]);
    L.block = dim3(block[0], block[1], block[2]);
    L.shared_bytes = shared_bytes;
    L.thunk = &emu_thunk<A...>;
    L.kernel = reinterpret_cast<void*>(kernel);
    L.args = args;
    L.shuffle_seed = shuffle_seed;
    L.name = name;
    L.error = error;
    L.error_size = error_size;
    return emu_run(&L);
}

// A kernel's parameter types as text, e.g. "pf4 pi8 i4 f4" for (float*, long long*, int, float),
// so that Python can check every launch's arguments before the kernel reads garbage. A struct passed
// by value is "s<bytes>" (e.g. "s3088"): Python passes a NumPy structured scalar of that itemsize.
template <typename T> struct EmuTag { using type = T; };
template <typename T>
static void emu_type_code(char* out) {
    using U = typename std::remove_cv<T>::type;
    if constexpr (std::is_pointer<U>::value) {
        using P = typename std::remove_cv<typename std::remove_pointer<U>::type>::type;
        out[0] = 'p';
        if constexpr (std::is_void<P>::value || std::is_pointer<P>::value) { out[1] = 'v'; out[2] = '0'; out[3] = 0; }
        else emu_type_code<P>(out + 1);
    } else if constexpr (std::is_same<U, __half>::value) {
        strcpy(out, "f2");                         // as NumPy's float16 (kind 'f', 2 bytes)
    } else if constexpr (std::is_same<U, __nv_bfloat16>::value) {
        strcpy(out, "bf2");                        // its own code: NumPy's kind for ml_dtypes.bfloat16 is 'V'
    } else if constexpr (std::is_class<U>::value) {
        sprintf(out, "s%zu", sizeof(U));           // a struct by value: only its size can be checked
    } else {
        out[0] = std::is_same<U, bool>::value ? 'b' : std::is_floating_point<U>::value ? 'f'
                 : std::is_signed<U>::value ? 'i' : 'u';
        out[1] = (char)('0' + sizeof(U));
        out[2] = 0;
    }
}
template <typename... A>
static const char* emu_signature(void (*)(A...)) {
    static char text[16 * (sizeof...(A) + 1)];
    char* at = text;
    auto add = [&](auto tag) {
        char code[16] = {0};
        emu_type_code<typename decltype(tag)::type>(code);
        at += sprintf(at, at == text ? "%s" : " %s", code);
    };
    (add(EmuTag<A>{}), ...);
    *at = 0;
    return text;
}
