/* moe_router.cu - the MoE router on the GPU (cuda_moe.h): softmax and top-k of each token's
 * logits (st_cuda_moe_route), the scored rules of route_scored.cuh (st_cuda_moe_route_cfg:
 * sigmoid, selection bias, groups, scale, gpt-oss's softmax of the chosen), a decode step's router
 * in one launch (st_cuda_moe_router1*: the logits GEMV of mmv.cuh, x's q8_1 row for the expert
 * FFN with moe_q8.cuh's bits, x's host-mapped mirror and the routing) and the routing tail skip
 * (st_cuda_route_tail_skip, c/core/route_tail.h's rule). Each writes its ids and weights to
 * device buffers and / or the doorbell (moe.cu allocates it) that the expert FFN (moe.cu) and the
 * CPU expert pool read. c/cuda/dev/moe_check.cu checks and times this. */
#include "mmv.cuh"
#include "moe_q8.cuh"

extern "C" {
#include "cuda_moe.h"
}
#include "route_tail.h"

#include <math.h>

/* ---- router ---------------------------------------------------------------------------------- */

#define ST_ROUTE_THREADS 256
#define ST_ROUTE_MAX_EXPERT 4096
#define ST_ROUTE_MAX_K 64

/* a better than b: larger logit, ties to the lower index; index < 0 = none. */
static __device__ __forceinline__ bool st_route_better(float av, int ai, float bv, int bi) {
    return ai >= 0 && (bi < 0 || av > bv || (av == bv && ai < bi));
}

/* An expert's rank key: larger is better. The high word orders the logits as floats do (-0 as
 * +0, NaN below -inf), the low word breaks ties to the lower index. */
static __device__ __forceinline__ unsigned long long st_route_key(float v, int i) {
    uint32_t key = 0; /* NaN */
    if (!isnan(v)) {
        const uint32_t b = v == 0.0f ? 0u : __float_as_uint(v);
        key = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    }
    return ((unsigned long long)key << 32) | (uint32_t)~(uint32_t)i;
}

/* Token t's routing from its n_expert logits at l, by one CTA of ST_ROUTE_THREADS threads;
 * dynamic shared memory: n_expert floats of logits + n_expert int flags. The logits are read
 * through L2 (__ldcg): the one-token router reads there what other blocks of its grid wrote. */
static __device__ __forceinline__ void st_moe_route_row(const float *l, int n_expert, int k, int norm,
                                                        int64_t t, int32_t *ids0, float *wts0,
                                                        int32_t *ids1, float *wts1) {
    extern __shared__ float s_mem[];
    float *s_l = s_mem;
    int *s_taken = (int *)(s_mem + n_expert);
    __shared__ float s_wv[ST_ROUTE_THREADS / 32];
    __shared__ int s_wi[ST_ROUTE_THREADS / 32];
    __shared__ double s_ws[ST_ROUTE_THREADS / 32];
    __shared__ int s_ids[ST_ROUTE_MAX_K];
    __shared__ float s_w[ST_ROUTE_MAX_K];
    __shared__ float s_mx;
    __shared__ double s_sum;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;

    float mx = -INFINITY;
    for (int e = tid; e < n_expert; e += blockDim.x) {
        const float v = __ldcg(l + e);
        s_l[e] = v;
        s_taken[e] = 0;
        mx = v > mx ? v : mx;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, mx, o);
        mx = w > mx ? w : mx;
    }
    if (lane == 0) s_wv[warp] = mx;
    __syncthreads();
    if (tid == 0) {
        float m = -INFINITY;
        for (int w = 0; w < nw; w++) m = s_wv[w] > m ? s_wv[w] : m;
        s_mx = m;
    }
    __syncthreads();
    mx = s_mx;

    /* sum of exp in double, fixed order: per thread, per warp (butterfly), warps in order */
    double sum = 0.0;
    for (int e = tid; e < n_expert; e += blockDim.x) sum += (double)expf(s_l[e] - mx);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) s_ws[warp] = sum;
    __syncthreads();
    if (tid == 0) {
        double s = 0.0;
        for (int w = 0; w < nw; w++) s += s_ws[w];
        s_sum = s;
    }
    __syncthreads();

    /* top-k: each expert's rank is the count of experts better than it (larger logit, ties to
     * the lower index; NaN below everything), and its rank places it: one pass and two
     * barriers where the selection below takes k rounds of two barriers and a butterfly each.
     * "Better" is one unsigned compare of 64-bit keys (st_route_key), and the experts are split
     * into blockDim / n_expert parts counted by different threads (two for 128 experts): the
     * float compares with their NaN and tie cases cost ~10 us a decode layer (ncu). */
    if (n_expert <= (int)blockDim.x) {
        __shared__ unsigned long long s_key[ST_ROUTE_THREADS];
        __shared__ int s_part[ST_ROUTE_THREADS];
        if (tid < n_expert) s_key[tid] = st_route_key(s_l[tid], tid);
        __syncthreads();
        const int parts = (int)blockDim.x / n_expert, part = tid / n_expert, e = tid - part * n_expert;
        const int chunk = (n_expert + parts - 1) / parts;
        if (part < parts) {
            const unsigned long long c = s_key[e];
            const int j1 = min(n_expert, (part + 1) * chunk);
            int rank = 0;
#pragma unroll 8
            for (int j = part * chunk; j < j1; j++) rank += s_key[j] > c;
            s_part[tid] = rank;
        }
        __syncthreads();
        if (tid < n_expert) {
            int rank = 0;
            for (int q = 0; q < parts; q++) rank += s_part[q * n_expert + tid];
            if (rank < k) s_ids[rank] = tid;
        }
        __syncthreads();
    } else /* top-k by repeated selection */
    for (int s = 0; s < k; s++) {
        float bv = 0.0f;
        int bi = -1;
        for (int e = tid; e < n_expert; e += blockDim.x)
            if (!s_taken[e] && (bi < 0 || s_l[e] > bv)) { bv = s_l[e]; bi = e; }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (st_route_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
        }
        if (lane == 0) { s_wv[warp] = bv; s_wi[warp] = bi; }
        __syncthreads();
        if (tid == 0) {
            float v = s_wv[0];
            int i = s_wi[0];
            for (int w = 1; w < nw; w++)
                if (st_route_better(s_wv[w], s_wi[w], v, i)) { v = s_wv[w]; i = s_wi[w]; }
            s_ids[s] = i;
            s_taken[i] = 1;
        }
        __syncthreads();
    }

    /* the chosen probabilities, one thread each; their sum in slot order by one thread */
    if (tid < k) s_w[tid] = (float)((double)expf(s_l[s_ids[tid]] - mx) / s_sum);
    __syncthreads();
    if (tid < k) {
        float tot = 0.0f;
        if (norm)
            for (int s = 0; s < k; s++) tot += s_w[s];
        const float v = norm ? s_w[tid] / tot : s_w[tid];
        const int64_t o = t * k + tid;
        if (ids0) { ids0[o] = s_ids[tid]; wts0[o] = v; }
        if (ids1) { ids1[o] = s_ids[tid]; wts1[o] = v; }
    }
}

#include "route_scored.cuh"

/* One CTA per token. */
static __global__ void __launch_bounds__(ST_ROUTE_THREADS)
st_k_moe_route_scored(const float *__restrict__ logits, const st_route_dev c, int32_t *ids0, float *wts0,
                      int32_t *ids1, float *wts1) {
    st_pdl_enter();
    const int64_t t = blockIdx.x;
    st_moe_route_scored_row(logits + t * c.n_expert, c, t, ids0, wts0, ids1, wts1);
}

/* One CTA per token. */
static __global__ void __launch_bounds__(ST_ROUTE_THREADS)
st_k_moe_route(const float *__restrict__ logits, int n_expert, int k, int norm,
               int32_t *ids0, float *wts0, int32_t *ids1, float *wts1) {
    st_pdl_enter();
    const int64_t t = blockIdx.x;
    st_moe_route_row(logits + t * n_expert, n_expert, k, norm, t, ids0, wts0, ids1, wts1);
}

/* ---- one token's router in one launch ------------------------------------------------------- */

/* A decode step's router: block b computes logit b (st_k_mmv_f_split's body: the bits of
 * st_cuda_mmv), its warps quantize x's q8_1 blocks b * 8 + warp, b * 8 + warp + 8 * grid, ...
 * (st_moe_quant_body: the expert FFN's own quantization, the same bits) into xq when set, the
 * grid copies x into xm when set, and the
 * block that finishes last (a counter at sync, which it sets back to 0) routes the token as
 * st_k_moe_route does. The last block sees every logit: each block's writes are fenced before
 * its increment (the reduction pattern of the CUDA samples). Three launches become one. */
static_assert(ST_MMV_SPLIT * 32 == ST_ROUTE_THREADS, "the router's blocks also route");
template <bool SCORED> /* the rule of st_moe_route_scored_row (c), else st_moe_route_row's */
static __global__ void __launch_bounds__(ST_ROUTE_THREADS)
st_k_moe_router1(const uint8_t *__restrict__ w, size_t rb, int n_expert, int ne0, int nvec,
                 const float *__restrict__ x, float *logits, int k, int norm, int32_t *ids0, float *wts0,
                 int32_t *ids1, float *wts1, block_q8_1 *__restrict__ xq, float *xm, unsigned *sync,
                 const st_route_dev c) {
    st_mmv_f_split_row<st_mmv_f32, 1>(w, rb, nullptr, 0, n_expert, ne0, nvec, x, 1, logits);
    if (xq) st_moe_quant_body(x, ne0, 1, ne0, xq, blockIdx.x, gridDim.x);
    if (xm) /* x's mirror (host-mapped: a CPU layer's hand-down without a copy) */
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ne0; i += gridDim.x * blockDim.x) xm[i] = x[i];
    if (!st_last_block(sync, gridDim.x)) return;
    if (c.logit_bias) { /* the router's bias (gpt-oss), into the logits before the routing reads them */
        for (int e = threadIdx.x; e < n_expert; e += blockDim.x)
            logits[e] = __fadd_rn(__ldcg(logits + e), c.logit_bias[e]);
        __threadfence_block();
        __syncthreads();
    }
    if (SCORED) st_moe_route_scored_row(logits, c, 0, ids0, wts0, ids1, wts1);
    else st_moe_route_row(logits, n_expert, k, norm, 0, ids0, wts0, ids1, wts1);
}

/* ---- entry points ---------------------------------------------------------------------------- */

extern "C" strata_status st_cuda_moe_route(const float *d_logits, int64_t T, int32_t n_expert,
                                           int32_t k, int norm, int32_t *d_ids, float *d_wts,
                                           st_cuda_doorbell *db, void *stream) {
    static const char *fn = "st_cuda_moe_route";
    if (T < 0 || n_expert < 1 || n_expert > ST_ROUTE_MAX_EXPERT || k < 1 || k > n_expert ||
        k > ST_ROUTE_MAX_K)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld, n_expert %d, k %d (need 1 <= k <= "
                        "n_expert <= %d, k <= %d)", fn, (long long)T, (int)n_expert, (int)k,
                        ST_ROUTE_MAX_EXPERT, ST_ROUTE_MAX_K);
    if (!d_logits || (!d_ids && !db) || (!d_ids != !d_wts))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL logits, or no output (ids and wts both "
                        "device buffers or both NULL with a doorbell)", fn);
    if (db && (!db->d_ids || db->k != k || T > db->max_tokens))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: doorbell of %lld x %d for T %lld, k %d", fn,
                        (long long)db->max_tokens, (int)db->k, (long long)T, (int)k);
    ST_TRY(st_cuda_require(fn));
    if (T == 0) return STRATA_OK;
    if (T > 0x7fffffff) return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld too large", fn, (long long)T);
    const size_t smem = (size_t)n_expert * (sizeof(float) + sizeof(int));
    st_launch(st_k_moe_route, (unsigned)T, ST_ROUTE_THREADS, smem, (cudaStream_t)stream, 
        d_logits, n_expert, k, norm, d_ids, d_wts, db ? db->d_ids : NULL, db ? db->d_wts : NULL);
    ST_CUDA_CHECK_LAUNCH("st_k_moe_route");
    return STRATA_OK;
}

extern "C" int st_cuda_route_plain(const st_cuda_route_cfg *c) {
    return !c->sigmoid && !c->softmax_weight && !c->d_bias && c->n_groups <= 1 && c->scale == 1.0f;
}

/* The rule's ranges (n_expert and k as st_cuda_moe_route's; groups that divide the experts and
 * leave k candidates) and its device form. */
static strata_status st_route_cfg_dev(const char *fn, const st_cuda_route_cfg *c, st_route_dev *d) {
    if (!c) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL routing rule", fn);
    const int32_t X = c->n_expert, k = c->k, G = c->n_groups > 1 ? c->n_groups : 1;
    const int plain = st_cuda_route_plain(c);
    if (X < 1 || X > (plain ? ST_ROUTE_MAX_EXPERT : ST_ROUTE_SCORED_MAX_EXPERT) || k < 1 || k > X ||
        k > ST_ROUTE_MAX_K || G > ST_ROUTE_MAX_GROUPS || X % G != 0 ||
        (G > 1 && (c->n_group_used < 1 || c->n_group_used > G || (int64_t)c->n_group_used * (X / G) < k)) ||
        !(c->scale == c->scale) || (c->sigmoid && c->softmax_weight))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: n_expert %d, k %d, groups %d (%d used), scale %g (need 1 <= k "
                        "<= n_expert <= %d, k <= %d, up to %d groups dividing the experts whose used ones hold k; not both "
                        "sigmoid and softmax_weight)",
                        fn, (int)X, (int)k, (int)c->n_groups, (int)c->n_group_used, (double)c->scale,
                        plain ? ST_ROUTE_MAX_EXPERT : ST_ROUTE_SCORED_MAX_EXPERT, ST_ROUTE_MAX_K, ST_ROUTE_MAX_GROUPS);
    d->n_expert = X;
    d->k = k;
    d->norm = c->norm != 0;
    d->sigmoid = c->sigmoid != 0;
    d->n_groups = G;
    d->n_group_used = G > 1 ? c->n_group_used : 1;
    d->by_logit = !c->sigmoid && !c->softmax_weight && !c->d_bias && G == 1;
    d->softmax_weight = c->softmax_weight != 0;
    d->scale = c->scale;
    d->bias = c->d_bias;
    d->logit_bias = c->d_logit_bias;
    return STRATA_OK;
}

/* dynamic shared memory of the scored row: a key and a score an expert */
static size_t st_route_scored_smem(int32_t n_expert) {
    return (size_t)n_expert * (sizeof(unsigned long long) + sizeof(float));
}

extern "C" strata_status st_cuda_moe_route_cfg(const st_cuda_route_cfg *c, const float *d_logits, int64_t T,
                                               int32_t *d_ids, float *d_wts, st_cuda_doorbell *db, void *stream) {
    static const char *fn = "st_cuda_moe_route_cfg";
    st_route_dev d;
    ST_TRY(st_route_cfg_dev(fn, c, &d));
    if (c->d_logit_bias)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: a logit bias is st_cuda_moe_router1_cfg's (add it to the "
                        "logits first)", fn);
    if (st_cuda_route_plain(c)) /* st_route_topk's rule: the plain kernel, its bits */
        return st_cuda_moe_route(d_logits, T, c->n_expert, c->k, c->norm, d_ids, d_wts, db, stream);
    if (T < 0 || T > 0x7fffffff || !d_logits || (!d_ids && !db) || (!d_ids != !d_wts))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld, NULL logits, or no output (ids and wts both device "
                        "buffers or both NULL with a doorbell)", fn, (long long)T);
    if (db && (!db->d_ids || db->k != c->k || T > db->max_tokens))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: doorbell of %lld x %d for T %lld, k %d", fn,
                        (long long)db->max_tokens, (int)db->k, (long long)T, (int)c->k);
    ST_TRY(st_cuda_require(fn));
    if (T == 0) return STRATA_OK;
    st_launch(st_k_moe_route_scored, (unsigned)T, ST_ROUTE_THREADS, st_route_scored_smem(c->n_expert),
              (cudaStream_t)stream, d_logits, d, d_ids, d_wts, db ? db->d_ids : NULL, db ? db->d_wts : NULL);
    ST_CUDA_CHECK_LAUNCH("st_k_moe_route_scored");
    return STRATA_OK;
}

/* One thread a row: st_route_tail_row (c/core/route_tail.h), the CPU's rule. */
static __global__ void st_k_route_tail_skip(int32_t *ids, const float *wts, int T, int k, float p,
                                            unsigned long long *count) {
    st_pdl_enter();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const int n = st_route_tail_row(ids + (size_t)t * k, wts + (size_t)t * k, k, p);
    if (n) atomicAdd(count, (unsigned long long)n);
}

extern "C" strata_status st_cuda_route_tail_skip(int32_t *d_ids, const float *d_wts, int64_t T, int32_t k, float p,
                                                 unsigned long long *d_count, void *stream) {
    static const char *fn = "st_cuda_route_tail_skip";
    if (T < 0 || T > 0x7fffffff || k < 1 || k > 64 || !d_ids || !d_wts || !d_count)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld, k %d (1..64) or a NULL pointer", fn, (long long)T,
                        (int)k);
    ST_TRY(st_cuda_require(fn));
    if (T == 0 || k < 2 || !(p > 0.0f)) return STRATA_OK;
    st_launch(st_k_route_tail_skip, (unsigned)((T + 127) / 128), 128, 0, (cudaStream_t)stream, d_ids, d_wts, (int)T,
              (int)k, p, d_count);
    ST_CUDA_CHECK_LAUNCH("st_k_route_tail_skip");
    return STRATA_OK;
}

extern "C" int st_cuda_moe_router1_supports(const st_cuda_mat *W, int32_t n_expert, int32_t k) {
    return W && W->type == STRATA_TYPE_F32 && W->ne1 == n_expert && n_expert >= 1 &&
           n_expert <= ST_ROUTE_THREADS && k >= 1 && k <= n_expert && k <= ST_ROUTE_MAX_K && W->ne0 >= 32 &&
           W->ne0 % 32 == 0 && W->data && ((uintptr_t)W->data & 3) == 0 && W->row_bytes % 4 == 0 &&
           W->row_bytes >= (size_t)W->ne0 * sizeof(float);
}

extern "C" strata_status st_cuda_moe_router1(const st_cuda_mat *W, const float *d_x, int32_t n_expert, int32_t k,
                                             int norm, float *d_logits, int32_t *d_ids, float *d_wts,
                                             st_cuda_doorbell *db, void *d_xq, float *d_xm, uint32_t *d_sync,
                                             void *stream) {
    st_cuda_route_cfg c;
    memset(&c, 0, sizeof c);
    c.n_expert = n_expert;
    c.k = k;
    c.norm = norm;
    c.scale = 1.0f;
    return st_cuda_moe_router1_cfg(W, d_x, &c, d_logits, d_ids, d_wts, db, d_xq, d_xm, d_sync, stream);
}

extern "C" strata_status st_cuda_moe_router1_cfg(const st_cuda_mat *W, const float *d_x, const st_cuda_route_cfg *c,
                                                 float *d_logits, int32_t *d_ids, float *d_wts, st_cuda_doorbell *db,
                                                 void *d_xq, float *d_xm, uint32_t *d_sync, void *stream) {
    static const char *fn = "st_cuda_moe_router1";
    st_route_dev d;
    ST_TRY(st_route_cfg_dev(fn, c, &d));
    const int32_t n_expert = c->n_expert, k = c->k;
    const int norm = c->norm, scored = !st_cuda_route_plain(c);
    if (!st_cuda_moe_router1_supports(W, n_expert, k))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: router of %s %lld x %lld for n_expert %d, k %d (need "
                        "F32, n_expert rows <= %d, a width of 32s)", fn, W ? strata_type_name(W->type) : "NULL",
                        W ? (long long)W->ne1 : 0LL, W ? (long long)W->ne0 : 0LL, (int)n_expert, (int)k,
                        ST_ROUTE_THREADS);
    if (!d_x || !d_logits || !d_sync || (!d_ids && !db) || (!d_ids != !d_wts) || ((uintptr_t)d_x & 3) ||
        ((uintptr_t)d_xq & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL x, logits or sync, no output, or x / xq not "
                        "4-byte aligned", fn);
    if (db && (!db->d_ids || db->k != k || db->max_tokens < 1))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: doorbell of %lld x %d for k %d", fn,
                        (long long)db->max_tokens, (int)db->k, (int)k);
    ST_TRY(st_cuda_require(fn));
    /* 16-byte chunks when the rows and x allow, as st_cuda_mmv decides */
    const bool vec = W->row_bytes % 16 == 0 && ((uintptr_t)W->data & 15) == 0 && ((uintptr_t)d_x & 15) == 0;
    const int nvec = vec ? (int)(W->ne0 / 4) : 0;
    const size_t smem = scored ? st_route_scored_smem(n_expert) : (size_t)n_expert * (sizeof(float) + sizeof(int));
    if (scored)
        st_launch(st_k_moe_router1<true>, (unsigned)n_expert, ST_ROUTE_THREADS, smem, (cudaStream_t)stream,
                  (const uint8_t *)W->data, W->row_bytes, (int)n_expert, (int)W->ne0, nvec, d_x, d_logits, (int)k,
                  norm, d_ids, d_wts, db ? db->d_ids : NULL, db ? db->d_wts : NULL, (block_q8_1 *)d_xq, d_xm,
                  (unsigned *)d_sync, d);
    else
        st_launch(st_k_moe_router1<false>, (unsigned)n_expert, ST_ROUTE_THREADS, smem, (cudaStream_t)stream,
                  (const uint8_t *)W->data, W->row_bytes, (int)n_expert, (int)W->ne0, nvec, d_x, d_logits, (int)k,
                  norm, d_ids, d_wts, db ? db->d_ids : NULL, db ? db->d_wts : NULL, (block_q8_1 *)d_xq, d_xm,
                  (unsigned *)d_sync, d);
    ST_CUDA_CHECK_LAUNCH("st_k_moe_router1");
    return STRATA_OK;
}
