/* mla_attn.cu - causal attention over the latent cache (cuda_mla.h; the function and the
 * kernels' geometry in mla.cuh): st_k_mla_attn (the block walk of prompts, one chunk a block in
 * the split of decode-sized calls), st_k_mla_combine (the split's fold of the chunks' partials),
 * the shape checks, the workspace size and the dispatch. Every row's bits depend on its own
 * inputs only: prompt batches, split calls and token-by-token calls give the same bits. */
#include "mla.cuh"

#include <math.h>
#include <stdint.h>

static_assert(ST_MLA_CHUNK == 64, "the softmax takes a chunk as two positions a lane");
static_assert(ST_MLA_THREADS == 4 * ST_MLA_CHUNK, "the scores take a position and a quarter of the rows a thread");
static_assert(2 * ST_MLA_THREADS >= ST_MLA_MAX_LORA, "P * V takes two value dimensions a thread");

/* ---- warp reductions (butterfly: every lane ends with the same bits) ------------------------- */

static __device__ __forceinline__ float st_mla_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
static __device__ __forceinline__ float st_mla_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Merges a chunk's state (m, l, a0 a1) into the row's running state (M, L, A0 A1): both rescaled
 * to the larger max, then added (no contraction: __fmul_rn / __fadd_rn). The combine pass does
 * the same operations on the same values (its factors from the prefix max). */
static __device__ __forceinline__ void st_mla_merge(float &M, float &L, float &A0, float &A1, float m, float l,
                                                    float a0, float a1) {
    const float Mn = fmaxf(M, m);
    const float ea = expf(M - Mn), eb = expf(m - Mn);
    L = __fadd_rn(__fmul_rn(L, ea), __fmul_rn(l, eb));
    A0 = __fadd_rn(__fmul_rn(A0, ea), __fmul_rn(a0, eb));
    A1 = __fadd_rn(__fmul_rn(A1, ea), __fmul_rn(a1, eb));
    M = Mn; /* the state is now relative to the larger max (a third chunk rescales from it) */
}

/* The last position row r attends to (-1: not a row of the call). */
static __device__ __forceinline__ int64_t st_mla_lim(const st_mla_args &a, int r, int64_t pos0) {
    return r < a.T * a.n_head ? pos0 + r / a.n_head : -1;
}

/* Positions c0 .. c0 + nv - 1 of the cache to the tile Ks (rows of KS elements, as stored). */
template <bool F16>
static __device__ __forceinline__ void st_mla_load_tile(const st_mla_args &a, int64_t c0, int nv, void *Ks) {
    const int es = F16 ? 2 : 4;
    const uint8_t *src = (const uint8_t *)a.k + (size_t)c0 * (size_t)a.D * es;
    uint8_t *dst = (uint8_t *)Ks;
    const size_t rb = (size_t)a.D * es, kb = (size_t)a.KS * es;
    if (a.vec16) {
        const int nw = (int)(rb / 16);
        for (int i = (int)threadIdx.x; i < nv * nw; i += ST_MLA_THREADS) {
            const int p = i / nw, w = i - p * nw;
            const uint4 v = __ldg((const uint4 *)(src + (size_t)p * rb) + w);
            uint8_t *o = dst + (size_t)p * kb + (size_t)w * 16;
            if (F16) { /* the f16 rows are 8-byte aligned */
                ((uint2 *)o)[0] = make_uint2(v.x, v.y);
                ((uint2 *)o)[1] = make_uint2(v.z, v.w);
            } else {
                *(uint4 *)o = v;
            }
        }
    } else {
        const int nw = (int)(rb / 4);
        for (int i = (int)threadIdx.x; i < nv * nw; i += ST_MLA_THREADS) {
            const int p = i / nw, w = i - p * nw;
            ((uint32_t *)(dst + (size_t)p * kb))[w] = __ldg((const uint32_t *)(src + (size_t)p * rb) + w);
        }
    }
}

/* Four cache values d .. d + 3 of tile row kp as f32. */
template <bool F16>
static __device__ __forceinline__ float4 st_mla_k4(const void *kp, int d) {
    if (F16) {
        const uint2 u = *(const uint2 *)((const __half *)kp + d);
        const float2 lo = __half22float2(*(const __half2 *)&u.x), hi = __half22float2(*(const __half2 *)&u.y);
        return make_float4(lo.x, lo.y, hi.x, hi.y);
    }
    return *(const float4 *)((const float *)kp + d);
}

/* Value dimensions i, i + 1 of tile row kp as f32. */
template <bool F16>
static __device__ __forceinline__ float2 st_mla_v2(const void *kp, int i) {
    if (F16) return __half22float2(*((const __half2 *)kp + i / 2));
    return *(const float2 *)((const float *)kp + i);
}

/* Scores: thread (position p = tid % 64, row quarter g = tid / 64) scores rows g*RB/4 .. of the
 * chunk's position p (p < nv) into Ps[p][row]. */
template <int RB, bool F16>
static __device__ __forceinline__ void st_mla_stage_scores(const st_mla_args &a, const float *Qs, const void *Ks,
                                                           float *Ps, int nv) {
    constexpr int RPT = RB / 4;
    const int p = (int)threadIdx.x & (ST_MLA_CHUNK - 1), g = (int)threadIdx.x / ST_MLA_CHUNK;
    if (p >= nv) return;
    const void *kp = F16 ? (const void *)((const __half *)Ks + (size_t)p * a.KS)
                         : (const void *)((const float *)Ks + (size_t)p * a.KS);
    float acc[RPT][4];
#pragma unroll
    for (int j = 0; j < RPT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll 2
    for (int d = 0; d < a.Dp; d += 4) {
        const float4 k = st_mla_k4<F16>(kp, d);
#pragma unroll
        for (int j = 0; j < RPT; j++) {
            const float4 q = *(const float4 *)(Qs + (size_t)(g * RPT + j) * a.Dp + d);
            acc[j][0] = fmaf(q.x, k.x, acc[j][0]);
            acc[j][1] = fmaf(q.y, k.y, acc[j][1]);
            acc[j][2] = fmaf(q.z, k.z, acc[j][2]);
            acc[j][3] = fmaf(q.w, k.w, acc[j][3]);
        }
    }
#pragma unroll
    for (int j = 0; j < RPT; j++) {
        const float s = __fadd_rn(__fadd_rn(acc[j][0], acc[j][1]), __fadd_rn(acc[j][2], acc[j][3]));
        Ps[p * RB + g * RPT + j] = __fmul_rn(s, a.scale);
    }
}

/* Softmax of the chunk: warp w takes rows w, w + 8, ...; lane l positions l and l + 32. The
 * scores in Ps become probabilities (0 past the row's last position); the chunk's max and sum to
 * Ms, Ls. */
template <int RB>
static __device__ __forceinline__ void st_mla_stage_softmax(const st_mla_args &a, int r_first, int64_t pos0,
                                                            int64_t c0, float *Ps, float *Ms, float *Ls) {
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    for (int j = warp; j < RB; j += ST_MLA_THREADS / 32) {
        const int64_t lim = st_mla_lim(a, r_first + j, pos0);
        const bool v0 = c0 + lane <= lim, v1 = c0 + lane + 32 <= lim;
        const float s0 = v0 ? Ps[lane * RB + j] : -INFINITY, s1 = v1 ? Ps[(lane + 32) * RB + j] : -INFINITY;
        float m = st_mla_warp_max(fmaxf(s0, s1));
        if (lim < c0) m = 0.0f; /* no position here: the row skips the chunk */
        const float p0 = v0 ? expf(s0 - m) : 0.0f, p1 = v1 ? expf(s1 - m) : 0.0f;
        const float l = st_mla_warp_sum(__fadd_rn(p0, p1));
        Ps[lane * RB + j] = p0;
        Ps[(lane + 32) * RB + j] = p1;
        if (lane == 0) {
            Ms[j] = m;
            Ls[j] = l;
        }
    }
}

/* P * V for value dimensions i0, i0 + 1 (i0 + 1 may be past R: computed, never stored): acc[j] =
 * sum over the row's positions p < nvr[j], ascending. Positions below nvmin are every row's. */
template <int RB, bool F16>
static __device__ __forceinline__ void st_mla_stage_pv(const st_mla_args &a, const float *Ps, const void *Ks,
                                                       int i0, int nvmin, const int (&nvr)[RB],
                                                       float (&acc)[RB][2]) {
#pragma unroll
    for (int j = 0; j < RB; j++) acc[j][0] = acc[j][1] = 0.0f;
    int nv = nvmin;
#pragma unroll
    for (int j = 0; j < RB; j++) nv = max(nv, nvr[j]);
    for (int p = 0; p < nv; p++) {
        const void *kp = F16 ? (const void *)((const __half *)Ks + (size_t)p * a.KS)
                             : (const void *)((const float *)Ks + (size_t)p * a.KS);
        const float2 v = st_mla_v2<F16>(kp, i0);
        float pr[RB];
#pragma unroll
        for (int j4 = 0; j4 < RB / 4; j4++) {
            const float4 q = *(const float4 *)(Ps + p * RB + 4 * j4);
            pr[4 * j4] = q.x; pr[4 * j4 + 1] = q.y; pr[4 * j4 + 2] = q.z; pr[4 * j4 + 3] = q.w;
        }
        if (p < nvmin) {
#pragma unroll
            for (int j = 0; j < RB; j++) {
                acc[j][0] = fmaf(pr[j], v.x, acc[j][0]);
                acc[j][1] = fmaf(pr[j], v.y, acc[j][1]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < RB; j++)
                if (p < nvr[j]) {
                    acc[j][0] = fmaf(pr[j], v.x, acc[j][0]);
                    acc[j][1] = fmaf(pr[j], v.y, acc[j][1]);
                }
        }
    }
}

/* The block's query rows to Qs (zero past D and past the call's rows), the tile's columns D .. Dp
 * zeroed (the scores read them against Q's zeros). */
template <int RB, bool F16>
static __device__ __forceinline__ void st_mla_load_q(const st_mla_args &a, int r_first, float *Qs, void *Ks) {
    const int rows = a.T * a.n_head;
    for (int i = (int)threadIdx.x; i < RB * a.Dp; i += ST_MLA_THREADS) {
        const int lr = i / a.Dp, d = i - lr * a.Dp, r = r_first + lr;
        float v = 0.0f;
        if (r < rows && d < a.D) {
            const int t = r / a.n_head, h = r - t * a.n_head;
            v = a.q[(int64_t)t * a.ldq + (int64_t)h * a.D + d];
        }
        Qs[i] = v;
    }
    const int pad = a.Dp - a.D;
    for (int i = (int)threadIdx.x; i < ST_MLA_CHUNK * pad; i += ST_MLA_THREADS) {
        const int p = i / pad, d = a.D + (i - p * pad);
        if (F16)
            ((__half *)Ks)[(size_t)p * a.KS + d] = __float2half_rn(0.0f);
        else
            ((float *)Ks)[(size_t)p * a.KS + d] = 0.0f;
    }
}

template <int RB, bool F16>
static __global__ void __launch_bounds__(ST_MLA_THREADS, 1)
st_k_mla_attn(const st_mla_args a) {
    extern __shared__ float4 st_mla_smem4[];
    float *Qs = (float *)st_mla_smem4;             /* [RB][Dp] */
    float *Ps = Qs + RB * a.Dp;                    /* [CHUNK][RB] */
    float *Ms = Ps + ST_MLA_CHUNK * RB, *Ls = Ms + RB;
    void *Ks = (void *)(Ls + RB);                  /* [CHUNK][KS] */
    st_pdl_enter();
    const int rows = a.T * a.n_head, r_first = (int)blockIdx.x * RB;
    const int r_last = min(rows, r_first + RB) - 1;
    const int64_t pos0 = a.pos_dev ? (int64_t)*a.pos_dev : a.pos0;
    const int64_t lim_first = pos0 + r_first / a.n_head, lim_max = pos0 + r_last / a.n_head;
    const int c_begin = a.split ? (int)blockIdx.y : 0;
    const int c_end = a.split ? c_begin + 1 : (int)(lim_max / ST_MLA_CHUNK) + 1;
    if ((int64_t)c_begin * ST_MLA_CHUNK > lim_max) return; /* a split chunk past every row */
    st_mla_load_q<RB, F16>(a, r_first, Qs, Ks);

    const int i0 = 2 * (int)threadIdx.x;
    float M[RB], L[RB], A[RB][2], acc[RB][2];
#pragma unroll
    for (int j = 0; j < RB; j++) M[j] = L[j] = A[j][0] = A[j][1] = 0.0f;
    for (int c = c_begin; c < c_end; c++) {
        const int64_t c0 = (int64_t)c * ST_MLA_CHUNK;
        const int nv = (int)min((int64_t)ST_MLA_CHUNK, lim_max - c0 + 1);
        const int nvmin = (int)max((int64_t)0, min((int64_t)nv, lim_first - c0 + 1));
        int nvr[RB];
#pragma unroll
        for (int j = 0; j < RB; j++)
            nvr[j] = (int)max((int64_t)0, min((int64_t)nv, st_mla_lim(a, r_first + j, pos0) - c0 + 1));
        __syncthreads(); /* the previous chunk's readers are done (and Qs is written) */
        st_mla_load_tile<F16>(a, c0, nv, Ks);
        __syncthreads();
        st_mla_stage_scores<RB, F16>(a, Qs, Ks, Ps, nv);
        __syncthreads();
        st_mla_stage_softmax<RB>(a, r_first, pos0, c0, Ps, Ms, Ls);
        __syncthreads();
        if (i0 >= a.R) continue;
        st_mla_stage_pv<RB, F16>(a, Ps, Ks, i0, nvmin, nvr, acc);
#pragma unroll
        for (int j = 0; j < RB; j++) {
            if (nvr[j] == 0) continue; /* the row has no position in this chunk */
            const float m = Ms[j], l = Ls[j];
            if (a.split) {
                float *pp = a.part + ((size_t)(r_first + j) * (size_t)a.n_chunks + (size_t)c) * (size_t)(a.R + 2);
                if (i0 == 0) { pp[0] = m; pp[1] = l; }
                pp[2 + i0] = acc[j][0];
                if (i0 + 1 < a.R) pp[3 + i0] = acc[j][1];
            } else if (c == 0) {
                M[j] = m;
                L[j] = l;
                A[j][0] = acc[j][0];
                A[j][1] = acc[j][1];
            } else {
                st_mla_merge(M[j], L[j], A[j][0], A[j][1], m, l, acc[j][0], acc[j][1]);
            }
        }
    }
    if (a.split || i0 >= a.R) return;
#pragma unroll
    for (int j = 0; j < RB; j++) {
        const int r = r_first + j;
        if (r >= rows) continue;
        const int t = r / a.n_head, h = r - t * a.n_head;
        float *o = a.out + (int64_t)t * a.ldo + (int64_t)h * a.R;
        o[i0] = __fdiv_rn(A[j][0], L[j]);
        if (i0 + 1 < a.R) o[i0 + 1] = __fdiv_rn(A[j][1], L[j]);
    }
}

/* The split's fold: a block a row, its chunks 0 .. lim / CHUNK in order, 256 at a time: their
 * maxima's prefix max (exact in any order) gives each chunk's two factors of st_mla_merge, then
 * thread i folds value dimensions 2i, 2i + 1 (the first chunk taken as it is) and divides. */
static __global__ void __launch_bounds__(ST_MLA_THREADS)
st_k_mla_combine(const st_mla_args a) {
    __shared__ float EA[ST_MLA_THREADS], EB[ST_MLA_THREADS], LC[ST_MLA_THREADS], WM[ST_MLA_THREADS / 32];
    st_pdl_enter();
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5, r = (int)blockIdx.x;
    const int64_t pos0 = a.pos_dev ? (int64_t)*a.pos_dev : a.pos0;
    const int t = r / a.n_head, h = r - t * a.n_head;
    const int nc = (int)((pos0 + t) / ST_MLA_CHUNK) + 1;
    const size_t ps = (size_t)(a.R + 2);
    const float *p = a.part + (size_t)r * (size_t)a.n_chunks * ps;
    const int i0 = 2 * tid;
    float M = -INFINITY, L = 0.0f, A0 = 0.0f, A1 = 0.0f;
    for (int base = 0; base < nc; base += ST_MLA_THREADS) {
        const int c = base + tid;
        const float m = c < nc ? p[(size_t)c * ps] : -INFINITY;
        float v = m; /* inclusive prefix max within the warp */
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float u = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v = fmaxf(v, u);
        }
        if (lane == 31) WM[warp] = v;
        __syncthreads();
        float carry = M; /* the max of every chunk before this warp's first */
        for (int w = 0; w < warp; w++) carry = fmaxf(carry, WM[w]);
        v = fmaxf(v, carry);
        float prev = __shfl_up_sync(0xffffffffu, v, 1);
        if (lane == 0) prev = carry;
        if (c < nc) {
            EA[tid] = expf(prev - v);
            EB[tid] = expf(m - v);
            LC[tid] = p[(size_t)c * ps + 1];
        }
        for (int w = 0; w < ST_MLA_THREADS / 32; w++) M = fmaxf(M, WM[w]);
        __syncthreads();
        const int n = min(ST_MLA_THREADS, nc - base);
        if (i0 < a.R) {
            const float *pa = p + (size_t)base * ps + 2 + i0;
            const bool two = i0 + 1 < a.R;
            int k = 0;
            if (base == 0) { /* chunk 0 as it is */
                L = LC[0];
                A0 = pa[0];
                A1 = two ? pa[1] : 0.0f;
                k = 1;
            }
#pragma unroll 4
            for (; k < n; k++) {
                const float ea = EA[k], eb = EB[k];
                const float a0 = pa[(size_t)k * ps], a1 = two ? pa[(size_t)k * ps + 1] : 0.0f;
                L = __fadd_rn(__fmul_rn(L, ea), __fmul_rn(LC[k], eb));
                A0 = __fadd_rn(__fmul_rn(A0, ea), __fmul_rn(a0, eb));
                A1 = __fadd_rn(__fmul_rn(A1, ea), __fmul_rn(a1, eb));
            }
        }
        __syncthreads(); /* the factors are read before the next 256 overwrite them */
    }
    if (i0 >= a.R) return;
    float *o = a.out + (int64_t)t * a.ldo + (int64_t)h * a.R;
    o[i0] = __fdiv_rn(A0, L);
    if (i0 + 1 < a.R) o[i0 + 1] = __fdiv_rn(A1, L);
}

template <int RB, bool F16>
static strata_status st_mla_launch(const st_mla_args &a, cudaStream_t s) {
    auto kern = st_k_mla_attn<RB, F16>;
    const size_t smem = st_mla_smem_bytes(a.D, RB, F16);
    if (smem > 48 * 1024)
        ST_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const unsigned n_rg = (unsigned)(((int64_t)a.T * a.n_head + RB - 1) / RB);
    st_launch(kern, dim3(n_rg, a.split ? (unsigned)a.n_chunks : 1u), ST_MLA_THREADS, smem, s, a);
    ST_CUDA_CHECK_LAUNCH("st_k_mla_attn");
    if (a.split) {
        st_launch(st_k_mla_combine, dim3((unsigned)(a.T * a.n_head)), ST_MLA_THREADS, 0, s, a);
        ST_CUDA_CHECK_LAUNCH("st_k_mla_combine");
    }
    return STRATA_OK;
}

extern "C" int st_cuda_mla_supports(strata_type kv_type, const st_cuda_mla_shape *s) {
    if (kv_type != STRATA_TYPE_F16 && kv_type != STRATA_TYPE_F32) return 0;
    if (!st_mla_shape_ok(s)) return 0;
    return st_mla_smem_bytes(s->kv_lora + s->n_rot, ST_MLA_RB, kv_type == STRATA_TYPE_F16) <= st_cuda_smem_limit();
}

/* Bytes of the split's partials for a call of `rows` rows over n_chunks chunks. */
static size_t st_mla_part_bytes(const st_cuda_mla_shape *s, int64_t rows, int64_t n_chunks) {
    return (size_t)rows * (size_t)n_chunks * (size_t)(s->kv_lora + 2) * sizeof(float);
}

extern "C" size_t st_cuda_mla_wsize(const st_cuda_mla_shape *s, int64_t T, int64_t n_ctx) {
    if (!st_mla_shape_ok(s) || T < 1 || n_ctx < 1) return 0;
    int64_t t = ST_MLA_SPLIT_ROWS / s->n_head;
    if (t > T) t = T;
    if (t < 1) return 0;
    return st_mla_part_bytes(s, t * s->n_head, (n_ctx + ST_MLA_CHUNK - 1) / ST_MLA_CHUNK);
}

/* The arguments' checks of st_cuda_mla_attention_ex (STRATA_OK when the call can run). */
static strata_status st_mla_check(const st_cuda_kv_layer *kv, const st_cuda_mla_shape *s, const float *d_q,
                                  int64_t ldq, int64_t T, int64_t pos0, const int32_t *d_pos, float *d_out,
                                  int64_t ldo, void *d_ws) {
    static const char *fn = "st_cuda_mla_attention";
    if (!st_cuda_mla_supports(kv->type, s))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: cache %s with %d heads over %d + %d (kv_lora <= %d, "
                        "an even row, %zu bytes of shared memory a block)", fn, strata_type_name(kv->type),
                        (int)s->n_head, (int)s->kv_lora, (int)s->n_rot, ST_MLA_MAX_LORA,
                        st_mla_smem_bytes(s->kv_lora + s->n_rot, ST_MLA_RB, kv->type == STRATA_TYPE_F16));
    const int64_t D = s->kv_lora + s->n_rot, H = s->n_head;
    if (pos0 + T > kv->n_ctx)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: positions %lld..%lld outside the cache of %lld", fn,
                        (long long)pos0, (long long)(pos0 + T - 1), (long long)kv->n_ctx);
    if (T * H > INT32_MAX / 2 || ldq < H * D || ldo < H * s->kv_lora)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld, ldq %lld (>= %lld), ldo %lld (>= %lld)", fn,
                        (long long)T, (long long)ldq, (long long)(H * D), (long long)ldo, (long long)(H * s->kv_lora));
    const uintptr_t ea = kv->type == STRATA_TYPE_F16 ? 3 : 7; /* 2-element loads */
    if (!d_q || !d_out || !kv->k || ((uintptr_t)kv->k & ea) || ((uintptr_t)d_q & 3) || ((uintptr_t)d_out & 3) ||
        ((uintptr_t)d_pos & 3) || ((uintptr_t)d_ws & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL or misaligned pointer", fn);
    return st_cuda_require(fn);
}

strata_status st_cuda_mla_attention_ex(const st_cuda_kv_layer *kv, const st_cuda_mla_shape *s, const float *d_q,
                                       int64_t ldq, int64_t T, int64_t pos0, const int32_t *d_pos, float *d_out,
                                       int64_t ldo, void *d_ws, size_t ws_bytes, void *stream, int force,
                                       int *split_out) {
    if (split_out) *split_out = 0;
    if (!kv || !s || T < 0 || pos0 < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_mla_attention: NULL argument or negative size");
    if (T == 0) return STRATA_OK;
    ST_TRY(st_mla_check(kv, s, d_q, ldq, T, pos0, d_pos, d_out, ldo, d_ws));
    const int64_t D = s->kv_lora + s->n_rot, H = s->n_head;
    const int64_t np = st_cuda_attn_plan_np(pos0 + T, kv->n_ctx);
    const int64_t n_chunks = (np + ST_MLA_CHUNK - 1) / ST_MLA_CHUNK, rows = T * H;
    const bool fits = d_ws && n_chunks <= 65535 && st_mla_part_bytes(s, rows, n_chunks) <= ws_bytes;
    const bool split = fits && (force == 1 || (force < 0 && rows <= ST_MLA_SPLIT_ROWS && n_chunks >= 2));
    const bool f16 = kv->type == STRATA_TYPE_F16;
    st_mla_args a;
    a.k = kv->k;
    a.q = d_q;
    a.ldq = ldq;
    a.out = d_out;
    a.ldo = ldo;
    a.part = (float *)d_ws;
    a.n_head = (int)H;
    a.R = s->kv_lora;
    a.D = (int)D;
    a.Dp = (int)((D + 3) / 4 * 4);
    a.KS = st_mla_kstride((int)D);
    a.T = (int)T;
    a.pos0 = pos0;
    a.pos_dev = d_pos;
    a.scale = s->scale;
    a.n_chunks = (int)n_chunks;
    a.split = split ? 1 : 0;
    a.vec16 = ((size_t)D * (f16 ? 2u : 4u)) % 16 == 0 && ((uintptr_t)kv->k & 15) == 0;
    if (split_out) *split_out = a.split;
    const cudaStream_t st = (cudaStream_t)stream;
    const bool narrow = split && rows <= 64;
    if (f16) return narrow ? st_mla_launch<ST_MLA_RB_NARROW, true>(a, st) : st_mla_launch<ST_MLA_RB, true>(a, st);
    return narrow ? st_mla_launch<ST_MLA_RB_NARROW, false>(a, st) : st_mla_launch<ST_MLA_RB, false>(a, st);
}

extern "C" strata_status st_cuda_mla_attention(const st_cuda_kv_layer *kv, const st_cuda_mla_shape *s,
                                               const float *d_q, int64_t ldq, int64_t T, int64_t pos0,
                                               const int32_t *d_pos, float *d_out, int64_t ldo, void *d_ws,
                                               size_t ws_bytes, void *stream) {
    return st_cuda_mla_attention_ex(kv, s, d_q, ldq, T, pos0, d_pos, d_out, ldo, d_ws, ws_bytes, stream, -1, NULL);
}
