/* sample.cu - sampling on the GPU (cuda_ops.h): the greedy token of a logits row, so that a
 * greedy decode step copies one token down instead of n_vocab floats, and the top-k candidates
 * (a sort network over chunks) that a sampled step copies down instead of the row. One block: each thread
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
    st_pdl_enter();
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
    st_launch(st_k_argmax, 1, ST_ARGMAX_THREADS, 0, (cudaStream_t)stream, d_x, (int)n, d_out);
    ST_CUDA_CHECK_LAUNCH("st_k_argmax");
    return STRATA_OK;
}

/* ---- top-k candidates ------------------------------------------------------------------------- */

/* Passes of a bitonic sort over chunks of ST_TOPK_CHUNK (value, id) pairs in shared memory, in
 * strata_sampler's candidate order (larger value first, ties to the lower id; NaN as -inf): each
 * block sorts its chunk and keeps the first k, so each pass divides the count by ST_TOPK_CHUNK / k
 * until one block's chunk holds them all. Padding is (-inf, INT_MAX): after every real pair. */
#define ST_TOPK_CHUNK 2048
#define ST_TOPK_THREADS 1024

static __global__ void __launch_bounds__(ST_TOPK_THREADS)
st_k_topk_pass(const float *__restrict__ vin, const int32_t *__restrict__ iin, int64_t n, int k,
               float *__restrict__ vout, int32_t *__restrict__ iout) {
    st_pdl_enter();
    __shared__ float sv[ST_TOPK_CHUNK];
    __shared__ int32_t si[ST_TOPK_CHUNK];
    const int64_t base = (int64_t)blockIdx.x * ST_TOPK_CHUNK;
    for (int j = threadIdx.x; j < ST_TOPK_CHUNK; j += blockDim.x) {
        const int64_t g = base + j;
        float v = -INFINITY;
        int32_t id = INT_MAX;
        if (g < n) {
            v = vin[g];
            if (isnan(v)) v = -INFINITY;
            id = iin ? iin[g] : (int32_t)g;
        }
        sv[j] = v;
        si[j] = id;
    }
    __syncthreads();
    for (int size = 2; size <= ST_TOPK_CHUNK; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int t = threadIdx.x; t < ST_TOPK_CHUNK / 2; t += blockDim.x) {
                const int pos = 2 * stride * (t / stride) + (t % stride), other = pos + stride;
                const bool first = (pos & size) == 0; /* this run in candidate order, else reversed */
                const bool later = st_am_better(sv[other], si[other], sv[pos], si[pos]);
                if (later == first) {
                    const float v = sv[pos];
                    const int32_t id = si[pos];
                    sv[pos] = sv[other];
                    si[pos] = si[other];
                    sv[other] = v;
                    si[other] = id;
                }
            }
            __syncthreads();
        }
    }
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        vout[(int64_t)blockIdx.x * k + j] = sv[j];
        iout[(int64_t)blockIdx.x * k + j] = si[j];
    }
}

extern "C" size_t st_cuda_topk_wsize(int64_t n, int32_t k) {
    if (n < 1 || k < 1) return 0;
    const int64_t blocks = (n + ST_TOPK_CHUNK - 1) / ST_TOPK_CHUNK;
    return 2 * (size_t)blocks * (size_t)k * (sizeof(float) + sizeof(int32_t)) + 256;
}

extern "C" strata_status st_cuda_topk(const float *d_x, int64_t n, int32_t k, int32_t *d_ids, float *d_vals,
                                      void *d_ws, size_t ws_bytes, void *stream) {
    static const char *fn = "st_cuda_topk";
    if (!d_x || !d_ids || !d_vals || n < 1 || n > INT_MAX || k < 1 || k > ST_CUDA_TOPK_MAX || k > n)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: n %lld, k %d (1 <= k <= min(n, %d)), NULL output", fn,
                        (long long)n, (int)k, ST_CUDA_TOPK_MAX);
    if (((uintptr_t)d_x & 3) || ((uintptr_t)d_ids & 3) || ((uintptr_t)d_vals & 3) || ((uintptr_t)d_ws & 15) ||
        (n > ST_TOPK_CHUNK && (!d_ws || ws_bytes < st_cuda_topk_wsize(n, k))))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: misaligned pointer or workspace of %zu bytes (need %zu)",
                        fn, ws_bytes, st_cuda_topk_wsize(n, k));
    ST_TRY(st_cuda_require(fn));
    cudaStream_t s = (cudaStream_t)stream;
    /* ping-pong halves of the workspace: values then ids */
    const int64_t cap = (n + ST_TOPK_CHUNK - 1) / ST_TOPK_CHUNK * (int64_t)k;
    float *v[2] = {NULL, NULL};
    int32_t *id[2] = {NULL, NULL};
    if (d_ws) {
        uint8_t *p = (uint8_t *)d_ws;
        for (int h = 0; h < 2; h++) {
            v[h] = (float *)p;
            p += (size_t)cap * sizeof(float);
            id[h] = (int32_t *)p;
            p += (size_t)cap * sizeof(int32_t);
        }
    }
    const float *vin = d_x;
    const int32_t *iin = NULL;
    int64_t cur = n;
    int h = 0;
    while (cur > ST_TOPK_CHUNK) {
        const int64_t blocks = (cur + ST_TOPK_CHUNK - 1) / ST_TOPK_CHUNK;
        st_launch(st_k_topk_pass, (unsigned)blocks, ST_TOPK_THREADS, 0, s, vin, iin, cur, k, v[h], id[h]);
        ST_CUDA_CHECK_LAUNCH("st_k_topk_pass");
        vin = v[h];
        iin = id[h];
        cur = blocks * k;
        h ^= 1;
    }
    st_launch(st_k_topk_pass, 1, ST_TOPK_THREADS, 0, s, vin, iin, cur, k, d_vals, d_ids);
    ST_CUDA_CHECK_LAUNCH("st_k_topk_pass");
    return STRATA_OK;
}
