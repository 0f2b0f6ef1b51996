/* sample.cu - sampling on the GPU (cuda_ops.h): the greedy token of a logits row, so that a
 * greedy decode step copies one token down instead of n_vocab floats. One block: each thread
 * scans a strided share keeping (value, index), then warp and block reductions; NaN counts as
 * -inf and ties go to the lowest index, as strata_sampler_sample's greedy path. */
#include "common.cuh"

extern "C" {
#include "cuda_ops.h"
}

#include <limits.h>
#include <math.h>

#define ST_ARGMAX_THREADS 1024

/* a better than b: larger value, ties to the lower index */
static __device__ __forceinline__ bool st_am_better(float av, int ai, float bv, int bi) {
    return av > bv || (av == bv && ai < bi);
}

static __global__ void __launch_bounds__(ST_ARGMAX_THREADS)
st_k_argmax(const float *__restrict__ x, int n, st_cuda_argmax_out *out) {
    __shared__ float sv[32];
    __shared__ int si[32];
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = (int)threadIdx.x; i < n; i += ST_ARGMAX_THREADS) {
        float v = x[i];
        if (isnan(v)) v = -INFINITY;
        if (st_am_better(v, i, bv, bi)) { bv = v; bi = i; }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        if (st_am_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
    }
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        bv = sv[lane];
        bi = si[lane];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
            if (st_am_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
        }
        if (lane == 0) {
            out->id = bi == INT_MAX ? 0 : bi;
            out->logit = bv;
        }
    }
}

extern "C" strata_status st_cuda_argmax(const float *d_x, int64_t n, st_cuda_argmax_out *d_out,
                                        void *stream) {
    static const char *fn = "st_cuda_argmax";
    if (!d_x || !d_out || n < 1 || n > INT_MAX || ((uintptr_t)d_x & 3) || ((uintptr_t)d_out & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: n %lld, x and out non-NULL and 4-byte aligned", fn,
                        (long long)n);
    ST_TRY(st_cuda_require(fn));
    st_k_argmax<<<1, ST_ARGMAX_THREADS, 0, (cudaStream_t)stream>>>(d_x, (int)n, d_out);
    ST_CUDA_CHECK_LAUNCH("st_k_argmax");
    return STRATA_OK;
}
