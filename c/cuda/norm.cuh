/* norm.cuh - device helpers of the per-token row ops (norm.cu) that other kernels may reuse when
 * they fuse a norm or an activation in: warp reductions and the exact-f32 row normalization.
 * The f32 arithmetic uses the explicit round-to-nearest intrinsics so nvcc cannot contract a
 * multiply and an add into an FMA: results then match the CPU's (which has no FMA in ops.c). */
#ifndef STRATA_CUDA_NORM_CUH
#define STRATA_CUDA_NORM_CUH

#include "common.cuh"
#include "cuda_ops.h"

/* Sum over the 32 lanes of a warp (all lanes get it), butterfly order: fixed, so deterministic. */
static __device__ __forceinline__ double st_warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float st_warp_sum_f(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
static __device__ __forceinline__ float st_warp_max_f(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The RMSNorm factor from a row's sum of squares (double), as st_rmsnorm computes it:
 * 1.0f / sqrtf((float)(sum / n) + eps). */
static __device__ __forceinline__ float st_rms_scale(double sumsq, int64_t n, float eps) {
    const float mean = (float)__ddiv_rn(sumsq, (double)n);
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

/* silu(g) * u as st_swiglu: (g / (1 + expf(-g))) * u. */
static __device__ __forceinline__ float st_dev_swiglu(float g, float u) {
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

#endif /* STRATA_CUDA_NORM_CUH */
