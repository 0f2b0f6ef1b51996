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

/* ---- device helpers ------------------------------------------------------------------------- */

/* Read-only byte and 16-bit loads through the non-coherent cache. p16 must be 2-byte aligned. */
static __device__ __forceinline__ uint32_t st_ld_u8(const uint8_t *p) { return __ldg(p); }
static __device__ __forceinline__ uint32_t st_ld_u16(const uint8_t *p) {
    return __ldg((const unsigned short *)p);
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
