/* quantize.cu - f32 activations -> Q8_1 blocks on the GPU (format and layout: quantize.cuh).
 *
 * One thread per value, one warp per block of 32: the warp reduces amax and the integer sum with
 * shuffles, each lane stores its quant byte (32 contiguous bytes per warp), lane 0 the (d, s)
 * word. Grid-stride loop; since n and the grid's thread count are multiples of 32, a warp is
 * always wholly inside or wholly outside [0, n), so the full-mask shuffles are safe. */
#include "quantize.cuh"
#include "cuda_mmv.h"

static const int ST_Q8_1_THREADS = 256; /* a multiple of 32 (see above) */

static __global__ void __launch_bounds__(256)
st_k_quantize_q8_1(const float *__restrict__ x, block_q8_1 *__restrict__ q, int64_t n) {
    st_pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        st_q8_1_warp_put(x[i], q + (i >> 5), lane);
}

strata_status st_quantize_q8_1_launch(const float *x, block_q8_1 *q, int64_t n, cudaStream_t s) {
    const unsigned grid = st_cuda_grid(n, ST_Q8_1_THREADS);
    st_launch(st_k_quantize_q8_1, grid, ST_Q8_1_THREADS, 0, s, x, q, n);
    ST_CUDA_CHECK_LAUNCH("st_k_quantize_q8_1");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_quantize_q8_1(const float *d_x, void *d_q, int64_t n,
                                               void *stream) {
    if (!d_x || !d_q)
        return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_quantize_q8_1: NULL %s", !d_x ? "x" : "q");
    if (n <= 0 || n % QK8_1 != 0)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "st_cuda_quantize_q8_1: n = %lld is not a positive multiple of 32",
                        (long long)n);
    if (((uintptr_t)d_x & 3) || ((uintptr_t)d_q & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_quantize_q8_1: %s not 4-byte aligned",
                        ((uintptr_t)d_x & 3) ? "x" : "q");
    ST_TRY(st_cuda_require("st_cuda_quantize_q8_1"));
    return st_quantize_q8_1_launch(d_x, (block_q8_1 *)d_q, n, (cudaStream_t)stream);
}
