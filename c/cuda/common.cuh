/* common.cuh - what every CUDA source of Strata shares: the C headers with C linkage, the error
 * check macro that turns a failing CUDA call into st_error(STRATA_ERR_BACKEND, ...), and small
 * device helpers (byte loads, fp16/bf16 bit conversions, launch geometry). */
#ifndef STRATA_CUDA_COMMON_CUH
#define STRATA_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include <stdint.h>

/* The library's C headers. */
extern "C" {
#include "common.h"
#include "blocks.h"
}
#include "cuda_backend.h"

/* ---- error checks --------------------------------------------------------------------------- */

/* ST_CUDA_CHECK(call): returns STRATA_ERR_BACKEND from the enclosing function when call fails,
 * naming the error, the file and line, and the call's text. cudaGetLastError() clears a
 * non-sticky error so the next unrelated call does not see it again. */
#define ST_CUDA_CHECK(call) do {                                                              \
        cudaError_t st__e = (call);                                                           \
        if (st__e != cudaSuccess) {                                                           \
            (void)cudaGetLastError();                                                         \
            return st_error(STRATA_ERR_BACKEND, "CUDA error: %s (%s) at %s:%d in %s",         \
                            cudaGetErrorString(st__e), cudaGetErrorName(st__e), __FILE__,     \
                            __LINE__, #call);                                                 \
        }                                                                                     \
    } while (0)

/* ST_CUDA_CHECK_LAUNCH(name): after a kernel launch, returns the launch's own error (bad
 * configuration, no kernel image for this device) naming the kernel. Errors inside the kernel
 * surface at the next synchronizing call. */
#define ST_CUDA_CHECK_LAUNCH(name) do {                                                       \
        cudaError_t st__e = cudaGetLastError();                                               \
        if (st__e != cudaSuccess)                                                             \
            return st_error(STRATA_ERR_BACKEND, "CUDA error: %s (%s) at %s:%d in launch of %s", \
                            cudaGetErrorString(st__e), cudaGetErrorName(st__e), __FILE__,     \
                            __LINE__, name);                                                  \
    } while (0)

/* STRATA_OK when the probe found a usable device, else STRATA_ERR_UNSUPPORTED with the probe's
 * reason, prefixed by what (the caller's name). Defined in device.cu. */
strata_status st_cuda_require(const char *what);

/* ---- launches: programmatic dependent launch ------------------------------------------------ */

/* On compute 9.0+ every kernel is launched with programmatic stream serialization: the GPU may
 * start it while the kernel before it in the stream is still running, instead of after that
 * kernel has finished and its writes are flushed. Each kernel therefore opens with
 * st_pdl_enter(): griddepcontrol.wait blocks until every kernel it depends on has completed and
 * its memory is visible, then launch_dependents lets the next kernel be scheduled. Before it a
 * kernel may only read what the kernels before it in the stream never write (weights, K/V rows
 * of earlier positions, routing written two kernels back: each kernel's launch follows the
 * completion of the one two back), so the overlap changes no value: same bits either way.
 * Without a programmatic launch (older GPUs, st_cuda_set_pdl(0)) both instructions return at
 * once. A decode step runs ~700 small kernels, so the ~1-2 us each one waits to be launched
 * adds up (docs/PERFORMANCE.md). */
static __device__ __forceinline__ void st_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Whether this thread's launches ask for the overlap: the device is 9.0+ and st_cuda_set_pdl
 * (cuda_backend.h) has not turned it off for this thread. Defined in device.cu. */
int st_cuda_pdl_active(void);

/* kern<<<grid, block, smem, s>>>(args...) with the attribute above when st_cuda_pdl_active().
 * A failed launch is left to ST_CUDA_CHECK_LAUNCH (cudaGetLastError sees it). Every kernel
 * launched through here must call st_pdl_enter() (after at most the reads allowed above). */
template <typename... KArgs, typename... Args>
static inline void st_launch(void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                             const Args &...args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = st_cuda_pdl_active() ? 1 : 0;
    if (cudaLaunchKernelEx(&cfg, kern, args...) != cudaSuccess && cfg.numAttrs) {
        (void)cudaGetLastError(); /* a stream or driver without it: the plain launch decides */
        cfg.numAttrs = 0;
        (void)cudaLaunchKernelEx(&cfg, kern, args...);
    }
}

/* ---- device helpers ------------------------------------------------------------------------- */

/* For kernels whose last block to finish does the call's closing work (the one-token router's
 * top-k, the attention's chunk merge): called by every thread of every block after the block's
 * last global write, counter one zeroed device word per (call, group of n blocks). Each block's
 * writes are fenced before it counts itself (the reduction pattern of the CUDA samples), so the
 * block that gets true sees every other block's; that block sets the counter back to 0 for the
 * next launch. */
static __device__ __forceinline__ bool st_last_block(unsigned *counter, unsigned n) {
    __shared__ int s_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(counter, 1u) == n - 1;
    __syncthreads();
    const bool last = s_last != 0;
    if (last) {
        if (threadIdx.x == 0) *counter = 0u;
        __threadfence();
    }
    return last;
}

/* Read-only byte and 16-bit loads through the non-coherent cache. p16 must be 2-byte aligned. */
static __device__ __forceinline__ uint32_t st_ld_u8(const uint8_t *p) { return __ldg(p); }
static __device__ __forceinline__ uint32_t st_ld_u16(const uint8_t *p) {
    return __ldg((const unsigned short *)p);
}

/* N (a multiple of 4) words at a 4-byte aligned address with the widest loads its alignment
 * allows (16, 8 or 4 bytes). A warp's load instruction costs the L1 one pass per distinct line it
 * touches, and the tiles' lanes each read a different row: 16-bit loads made the weight fetch,
 * not the mma, the int8 tiles' bound (ncu: L1 84% busy, issue 40%). */
template <int N>
static __device__ __forceinline__ void st_ld_words(const uint8_t *p, uint32_t *w) {
    const uintptr_t a = (uintptr_t)p;
    if ((a & 15) == 0) {
#pragma unroll
        for (int i = 0; i < N / 4; i++) {
            const uint4 v = __ldg((const uint4 *)p + i);
            w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
        }
    } else if ((a & 7) == 0) {
#pragma unroll
        for (int i = 0; i < N / 2; i++) {
            const uint2 v = __ldg((const uint2 *)p + i);
            w[2 * i] = v.x; w[2 * i + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; i++) w[i] = __ldg((const unsigned int *)p + i);
    }
}

/* A Q8_0-style block (fp16 scale, then 32 bytes; 34 bytes, 2-byte aligned): the scale bits and
 * the 32 bytes as 8 words, with aligned loads only: at a 4-byte boundary the block is 8 words
 * plus a 16-bit tail, realigned by funnel shifts; at 2 mod 4 its bytes start on a boundary. */
static __device__ __forceinline__ void st_ld_q8blk(const uint8_t *blk, uint32_t *d, uint32_t q[8]) {
    if (((uintptr_t)blk & 3) == 0) {
        uint32_t w[8];
        st_ld_words<8>(blk, w);
        const uint32_t tail = st_ld_u16(blk + 32);
        *d = w[0] & 0xFFFFu;
#pragma unroll
        for (int i = 0; i < 7; i++) q[i] = __funnelshift_r(w[i], w[i + 1], 16);
        q[7] = __funnelshift_r(w[7], tail, 16);
    } else {
        *d = st_ld_u16(blk);
        st_ld_words<8>(blk + 2, q);
    }
}

/* IEEE binary16 bits -> float, exact (subnormals, inf, nan), like st_fp16_to_f32. */
static __device__ __forceinline__ float st_dev_fp16(uint32_t h) {
    return __half2float(__ushort_as_half((unsigned short)h));
}
/* bfloat16 bits -> float, exact. */
static __device__ __forceinline__ float st_dev_bf16(uint32_t h) { return __uint_as_float(h << 16); }

/* Grid for a grid-stride loop over `work` items with `threads` per block: one thread per item
 * (measured on the H200: ~95% of the copy rate for Q8_0 against ~82% with the grid capped at 64
 * blocks per SM, c/cuda/dev/dequant_check.cu), capped only by the grid's x limit; the loop covers
 * anything beyond. */
static inline unsigned st_cuda_grid(int64_t work, int threads) {
    int64_t blocks = (work + threads - 1) / threads;
    const int64_t cap = 0x7fffffff; /* gridDim.x limit */
    if (blocks > cap) blocks = cap;
    if (blocks < 1) blocks = 1;
    return (unsigned)blocks;
}

#endif /* STRATA_CUDA_COMMON_CUH */
