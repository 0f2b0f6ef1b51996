/* attn.cu - the GPU KV cache store and causal GQA attention (cuda_ops.h); the kernel shape and
 * the plan are described in attn.cuh.
 *
 * Four kernels. On an f16 cache with head_dim 64 or 128 (shape.tc not 0), calls of at most 16
 * rows per KV head (decode steps, short verify windows) over ST_ATTN_DTC_MIN_NP positions or
 * more take st_k_attn_dtc (flash-decoding on the tensor cores, K/V tiles staged by cp.async) and
 * batches of 64+ rows per KV head take st_k_attn_tc (flash attention on the tensor cores); both
 * split the queries and probabilities into two f16 parts unless shape.tc is 1. Otherwise, on the
 * FMA units: st_k_attn_dec for at most 8 rows per KV head over 4096 positions or more (each K and
 * V element read once for all of the head's rows, chunks of 256 or more), st_k_attn for the rest
 * (prefill: rpw 4, one chunk per row group when the row groups alone fill the GPU) and any plan
 * a check program forces. Split calls merge their chunks in the combine pass, except st_k_attn
 * called through st_cuda_attention_q8 with counters: there the last chunk's block of each row
 * group merges them and also writes the rows as Q8_1 (a decode step's output GEMV input); the
 * decode kernels' combine pass writes those rows too when asked.
 * Dispatch: st_attn_go picks the kernel; st_attn_dispatch / st_attn_dec_dispatch switch over
 * (head_dim, cache type, rpw). */
#include "attn.cuh"
#include "mma.cuh"
#include "norm.cuh"
#include "quantize.cuh"

#include <limits.h>
#include <stdint.h>
#include <math.h>

static int64_t st_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The decode kernels start reading K/V rows before pos0 (the ones the kernels they wait for never
 * write) ahead of griddepcontrol.wait. -DST_ATTN_DTC_EARLY=0: every read after the wait (A/B). */
#ifndef ST_ATTN_DTC_EARLY
#define ST_ATTN_DTC_EARLY 1
#endif
static __device__ __forceinline__ void st_attn_prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* Bytes of split-K partials per chunk of a call of T tokens: (acc[head_dim], max, sum) a row. */
static size_t st_attn_part_bytes(const st_cuda_attn_shape *s, int64_t T) {
    return (size_t)T * (size_t)s->n_head * (size_t)(s->head_dim + 2) * sizeof(float);
}

/* The split of np positions every plan makes: n chunks wanted, cut to chunks of at least
 * min_chunk positions, to ST_ATTN_MAX_CHUNKS and to what ws_cap holds of per_chunk-byte partials
 * (one pass below two), each chunk a multiple of tile positions. Returns the chunk length; the
 * chunk count is cdiv(np, chunk). */
static int64_t st_attn_split(int64_t n, int64_t np, int64_t min_chunk, int64_t tile, size_t per_chunk,
                             size_t ws_cap) {
    if (n > st_cdiv(np, min_chunk)) n = st_cdiv(np, min_chunk);
    if (n > ST_ATTN_MAX_CHUNKS) n = ST_ATTN_MAX_CHUNKS;
    if (n < 1) n = 1;
    if (n > 1 && (size_t)n * per_chunk > ws_cap) n = (int64_t)(ws_cap / per_chunk);
    if (n < 2) n = 1;
    const int64_t chunk = st_cdiv(st_cdiv(np, n), tile) * tile;
    return chunk < tile ? tile : chunk;
}

/* ---- KV store ------------------------------------------------------------------------------- */

/* dst [n_kv][n_ctx][dim] at positions pos0.. (d_pos[0].. when d_pos) <- src rows (token t at src + t*ld, [n_kv][dim]). */
template <bool F16>
static __global__ void __launch_bounds__(256)
st_k_kv_store(void *dst, int64_t n_ctx, const float *__restrict__ src, int64_t ld, int64_t n_kv,
              int64_t dim, int64_t T, int64_t pos0, const int32_t *__restrict__ d_pos) {
    st_pdl_enter();
    if (d_pos) pos0 = d_pos[0]; /* a graph replays this launch at later positions */
    const int64_t per_tok = n_kv * dim, total = T * per_tok;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t t = i / per_tok, rem = i - t * per_tok, hk = rem / dim, d = rem - hk * dim;
        const float v = src[t * ld + rem];
        const int64_t o = (hk * n_ctx + pos0 + t) * dim + d;
        if (F16)
            ((__half *)dst)[o] = __float2half_rn(v);
        else
            ((float *)dst)[o] = v;
    }
}

/* ---- attention ------------------------------------------------------------------------------ */

static size_t st_attn_smem_bytes(int hd, int rpw) {
    /* Qs [8*rpw][hd] + Kt [hd][32] + Vs [32][hd] + Ps [8][rpw][32] floats */
    return sizeof(float) * ((size_t)8 * rpw * hd + 2 * (size_t)hd * ST_ATTN_TILE + (size_t)8 * rpw * ST_ATTN_TILE);
}

struct st_attn_args {
    const void *k, *v;
    int64_t n_ctx;
    const float *q;
    int64_t ldq;
    float *out;
    int64_t ldo;
    float *part;
    int n_head, group, T;
    int64_t pos0;
    const int32_t *pos_dev;   /* non-NULL: pos0 is *pos_dev (a replayed graph's position) */
    float scale;
    int chunk, n_chunks;
    unsigned *sync;           /* st_k_attn, n_chunks > 1: [n_kv][n_rg] zeroed counters; the last
                               * chunk's block of a row group merges the partials (no combine) */
    block_q8_1 *q8;           /* st_k_attn with sync or one chunk: out also as Q8_1 rows (ldo =
                               * n_head * HD) */
};

/* Row (t, h) of the output, lane holding dimensions lane + 32 dd, and its Q8_1 blocks when a.q8
 * is set (block dd of the head is the 32 values of the warp's dd-th register). */
template <int HD>
static __device__ __forceinline__ void st_attn_store_row(const st_attn_args &a, int t, int h, const float (&o)[HD / 32],
                                                         int lane) {
    float *dst = a.out + (int64_t)t * a.ldo + (int64_t)h * HD;
#pragma unroll
    for (int dd = 0; dd < HD / 32; dd++) {
        dst[lane + 32 * dd] = o[dd];
        if (a.q8) st_q8_1_warp_put(o[dd], a.q8 + ((int64_t)t * a.n_head + h) * (HD / 32) + dd, lane);
    }
}

template <int HD, int RPW, bool F16>
static __global__ void __launch_bounds__(ST_ATTN_THREADS)
st_k_attn(const st_attn_args a) {
    constexpr int RPB = 8 * RPW;              /* rows per block */
    constexpr int ND = HD / 32;               /* output dimensions per lane */
    constexpr int EPV = F16 ? 8 : 4;          /* cache elements per 16-byte load */
    constexpr int VPR = HD / EPV;             /* 16-byte loads per cache row */
    constexpr int ES = F16 ? 2 : 4;           /* bytes per cache element */
    constexpr int TL = ST_ATTN_TILE;
    static_assert(HD % 32 == 0 && VPR >= 1, "head_dim");

    extern __shared__ float4 st_attn_smem4[];
    float *Qs = (float *)st_attn_smem4;       /* [RPB][HD] */
    float *Kt = Qs + RPB * HD;                /* [HD][TL] */
    float *Vs = Kt + HD * TL;                 /* [TL][HD] */
    float *Ps = Vs + TL * HD;                 /* [8][RPW][TL] */

    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int rg = (int)blockIdx.x, c = (int)blockIdx.y, hk = (int)blockIdx.z;
    const int G = a.group, R = a.T * G;
    const int r_first = rg * RPB;
    const int r_end = min(R, r_first + RPB);  /* > r_first by construction of the grid */
    const int64_t pos0 = a.pos_dev ? (int64_t)*a.pos_dev : a.pos0;
    const int64_t lim_max = pos0 + (r_end - 1) / G;
    const int64_t c0 = (int64_t)c * a.chunk;
    const int64_t c1 = min(c0 + (int64_t)a.chunk, lim_max + 1); /* this block's positions [c0, c1) */
    /* A decode-sized call (one row group): the chunk's K and V rows before pos0 (written by
     * earlier steps; the kernels this one waits for store pos0 on) start towards L2 before
     * griddepcontrol.wait, as in st_k_attn_dtc. */
    if (ST_ATTN_DTC_EARLY && gridDim.x == 1) {
        const char *Kb = (const char *)a.k + (size_t)hk * (size_t)a.n_ctx * HD * ES;
        const char *Vb = (const char *)a.v + (size_t)hk * (size_t)a.n_ctx * HD * ES;
        const int64_t q1 = min(c1, pos0);
        constexpr int LPP = HD * ES / 128; /* 128-byte lines a position */
        for (int64_t i = threadIdx.x; c0 < q1 && i < (q1 - c0) * LPP; i += ST_ATTN_THREADS) {
            const size_t off = (size_t)c0 * HD * ES + (size_t)i * 128;
            st_attn_prefetch_l2(Kb + off);
            st_attn_prefetch_l2(Vb + off);
        }
    }
    st_pdl_enter();

    /* Query rows of the group; rows past R are zero. */
    for (int idx = (int)threadIdx.x; idx < RPB * HD; idx += ST_ATTN_THREADS) {
        const int lr = idx / HD, d = idx - lr * HD, r = r_first + lr;
        float qv = 0.0f;
        if (r < R) {
            const int t = r / G, h = hk * G + (r - t * G);
            qv = a.q[(int64_t)t * a.ldq + (int64_t)h * HD + d];
        }
        Qs[idx] = qv;
    }

    int64_t lim[RPW];
    float m[RPW], l[RPW], acc[RPW][ND];
#pragma unroll
    for (int j = 0; j < RPW; j++) {
        const int r = r_first + warp * RPW + j;
        lim[j] = r < R ? pos0 + r / G : -1; /* -1: no position passes */
        m[j] = -INFINITY;
        l[j] = 0.0f;
#pragma unroll
        for (int dd = 0; dd < ND; dd++) acc[j][dd] = 0.0f;
    }
    const bool warp_live = r_first + warp * RPW < R; /* rows are contiguous: the first decides */

    const char *Kb = (const char *)a.k + (size_t)hk * (size_t)a.n_ctx * HD * ES;
    const char *Vb = (const char *)a.v + (size_t)hk * (size_t)a.n_ctx * HD * ES;
    float *Pw = Ps + warp * RPW * TL;

    for (int64_t pb = c0; pb < c1; pb += TL) {
        __syncthreads(); /* the previous tile is consumed (first pass: Qs is written) */
        /* K, transposed: lane = position, so the shared stores are conflict-free. */
        for (int idx = (int)threadIdx.x; idx < TL * VPR; idx += ST_ATTN_THREADS) {
            const int pp = idx & (TL - 1), vi = idx / TL;
            const int64_t p = pb + pp;
            float f[EPV];
            if (p < c1) {
                const char *src = Kb + ((size_t)p * HD + (size_t)vi * EPV) * ES;
                if (F16) st_ld16_f16(src, f); else st_ld16_f32(src, f);
            } else {
#pragma unroll
                for (int e = 0; e < EPV; e++) f[e] = 0.0f;
            }
#pragma unroll
            for (int e = 0; e < EPV; e++) Kt[(vi * EPV + e) * TL + pp] = f[e];
        }
        /* V, row-major: consecutive lanes take consecutive 16 bytes of a row. Positions past the
         * block's end are zero so that 0 * (stale cache) cannot make a NaN. */
        for (int idx = (int)threadIdx.x; idx < TL * VPR; idx += ST_ATTN_THREADS) {
            const int pp = idx / VPR, vi = idx - pp * VPR;
            const int64_t p = pb + pp;
            float f[EPV];
            if (p < c1) {
                const char *src = Vb + ((size_t)p * HD + (size_t)vi * EPV) * ES;
                if (F16) st_ld16_f16(src, f); else st_ld16_f32(src, f);
            } else {
#pragma unroll
                for (int e = 0; e < EPV; e++) f[e] = 0.0f;
            }
            float4 *dst = (float4 *)(Vs + pp * HD + vi * EPV);
#pragma unroll
            for (int e = 0; e < EPV / 4; e++) dst[e] = make_float4(f[4 * e], f[4 * e + 1], f[4 * e + 2], f[4 * e + 3]);
        }
        __syncthreads();
        if (!warp_live) continue;

        /* Scores of this warp's rows against position pb + lane. */
        float sc[RPW];
#pragma unroll
        for (int j = 0; j < RPW; j++) sc[j] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < HD; d += 4) {
            const float k0 = Kt[(d + 0) * TL + lane], k1 = Kt[(d + 1) * TL + lane];
            const float k2 = Kt[(d + 2) * TL + lane], k3 = Kt[(d + 3) * TL + lane];
#pragma unroll
            for (int j = 0; j < RPW; j++) {
                const float4 qv = *(const float4 *)(Qs + (warp * RPW + j) * HD + d);
                sc[j] = fmaf(qv.x, k0, sc[j]);
                sc[j] = fmaf(qv.y, k1, sc[j]);
                sc[j] = fmaf(qv.z, k2, sc[j]);
                sc[j] = fmaf(qv.w, k3, sc[j]);
            }
        }
        const int64_t p = pb + lane;
#pragma unroll
        for (int j = 0; j < RPW; j++) {
            const bool valid = p < c1 && p <= lim[j];
            const float s = valid ? sc[j] * a.scale : -INFINITY;
            const float mn = fmaxf(m[j], st_warp_max_f(s)); /* warp-uniform */
            float corr = 1.0f, pv = 0.0f;
            if (mn != -INFINITY) {
                corr = expf(m[j] - mn); /* 0 when m[j] is still -inf */
                pv = valid ? expf(s - mn) : 0.0f;
            }
            l[j] = fmaf(l[j], corr, st_warp_sum_f(pv));
            m[j] = mn;
            Pw[j * TL + lane] = pv;
#pragma unroll
            for (int dd = 0; dd < ND; dd++) acc[j][dd] *= corr;
        }
        __syncwarp();
        /* acc += P * V over the tile's positions. */
#pragma unroll 4
        for (int pp = 0; pp < TL; pp++) {
            float vv[ND];
#pragma unroll
            for (int dd = 0; dd < ND; dd++) vv[dd] = Vs[pp * HD + lane + 32 * dd];
#pragma unroll
            for (int j = 0; j < RPW; j++) {
                const float pj = Pw[j * TL + pp];
#pragma unroll
                for (int dd = 0; dd < ND; dd++) acc[j][dd] = fmaf(pj, vv[dd], acc[j][dd]);
            }
        }
        __syncwarp(); /* Pw is rewritten by the next tile */
    }

#pragma unroll
    for (int j = 0; j < RPW; j++) {
        const int r = r_first + warp * RPW + j;
        if (!warp_live || r >= R) continue;
        const int t = r / G, h = hk * G + (r - t * G);
        if (a.n_chunks == 1) {
            /* every row sees position 0, so l > 0 */
            float o[ND];
#pragma unroll
            for (int dd = 0; dd < ND; dd++) o[dd] = __fdiv_rn(acc[j][dd], l[j]);
            st_attn_store_row<HD>(a, t, h, o, lane);
        } else {
            float *pr = a.part + ((size_t)((int64_t)t * a.n_head + h) * (size_t)a.n_chunks + (size_t)c) * (HD + 2);
#pragma unroll
            for (int dd = 0; dd < ND; dd++) pr[lane + 32 * dd] = acc[j][dd];
            if (lane == 0) {
                pr[HD] = m[j];
                pr[HD + 1] = l[j];
            }
        }
    }
    if (a.n_chunks == 1 || !a.sync) return; /* (uniform) */
    /* the row group's last chunk to finish merges the partials of its rows: the combine pass's
     * function (weights exp(m_c - M), 0 for empty chunks; sums in chunk order), in this block */
    if (!st_last_block(a.sync + (size_t)hk * gridDim.x + rg, (unsigned)a.n_chunks) || !warp_live) return;
#pragma unroll
    for (int j = 0; j < RPW; j++) {
        const int r = r_first + warp * RPW + j;
        if (r >= R) continue;
        const int t = r / G, h = hk * G + (r - t * G);
        const float *pr = a.part + (size_t)((int64_t)t * a.n_head + h) * (size_t)a.n_chunks * (HD + 2);
        /* the chunks' maxima and sums a lane each (32 at a time), so that their loads and the
         * rows' below are all in flight together; the sums keep chunk order */
        float M = -INFINITY;
        for (int cc = lane; cc < a.n_chunks; cc += 32) M = fmaxf(M, __ldcg(pr + (size_t)cc * (HD + 2) + HD));
        M = st_warp_max_f(M);
        float L = 0.0f, o[ND];
#pragma unroll
        for (int dd = 0; dd < ND; dd++) o[dd] = 0.0f;
        for (int c0 = 0; c0 < a.n_chunks; c0 += 32) {
            const int cl = c0 + lane;
            float wl = 0.0f, ll = 0.0f; /* chunk cl's weight (0: empty, M is finite: chunk 0 holds
                                         * position 0) and sum */
            if (cl < a.n_chunks) {
                const float mc = __ldcg(pr + (size_t)cl * (HD + 2) + HD);
                ll = __ldcg(pr + (size_t)cl * (HD + 2) + HD + 1);
                wl = mc == -INFINITY ? 0.0f : expf(mc - M);
            }
            const int nc = a.n_chunks - c0 < 32 ? a.n_chunks - c0 : 32;
#pragma unroll 4
            for (int q = 0; q < nc; q++) {
                const float w = __shfl_sync(0xffffffffu, wl, q), lc = __shfl_sync(0xffffffffu, ll, q);
                const float *pc = pr + (size_t)(c0 + q) * (HD + 2);
                float v[ND];
#pragma unroll
                for (int dd = 0; dd < ND; dd++) v[dd] = __ldcg(pc + lane + 32 * dd);
                if (w == 0.0f) continue; /* an empty chunk (or a weight of 0: adds nothing) */
                L = fmaf(lc, w, L);
#pragma unroll
                for (int dd = 0; dd < ND; dd++) o[dd] = fmaf(v[dd], w, o[dd]);
            }
        }
#pragma unroll
        for (int dd = 0; dd < ND; dd++) o[dd] = __fdiv_rn(o[dd], L);
        st_attn_store_row<HD>(a, t, h, o, lane);
    }
}

/* ---- decode: at most 8 rows per KV head ---------------------------------------------------- */

#define ST_ATTN_DEC_ROWS 8   /* rows (token, query head) per KV head: T * G <= 8 */
#define ST_ATTN_DEC_CHUNK 256 /* fewest positions per chunk (8 warps x 32) */
#define ST_ATTN_DEC_VG 8      /* V rows loaded together (st_k_attn_dec; 4 for head_dim 256) */

/* ND consecutive K/V elements (lane's share of a row: ND * lane ..) as floats, one load. */
template <int ND, bool F16>
static __device__ __forceinline__ void st_ld_dims(const char *p, float *o) {
    if constexpr (F16) {
        if constexpr (ND == 8) {
            st_ld16_f16(p, o);
        } else if constexpr (ND == 4) {
            const uint2 u = __ldg((const uint2 *)p);
            const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
            o[0] = a.x; o[1] = a.y; o[2] = b.x; o[3] = b.y;
        } else {
            static_assert(ND == 2, "head_dim 64, 128 or 256");
            const uint32_t u = __ldg((const unsigned int *)p);
            const float2 a = __half22float2(*(const __half2 *)&u);
            o[0] = a.x; o[1] = a.y;
        }
    } else {
        if constexpr (ND == 8) {
            st_ld16_f32(p, o);
            st_ld16_f32(p + 16, o + 4);
        } else if constexpr (ND == 4) {
            st_ld16_f32(p, o);
        } else {
            static_assert(ND == 2, "head_dim 64, 128 or 256");
            const float2 u = __ldg((const float2 *)p);
            o[0] = u.x; o[1] = u.y;
        }
    }
}
/* The decode kernel serves attended lengths (rounded as the plan) from this many positions on;
 * shorter ones keep st_k_attn, whose 8 warps share a chunk's tiles (more blocks in flight when a
 * few hundred positions are all there is). Measured on the H200, qwen3-30b-a3b decode: depth 0
 * 208 tok/s with st_k_attn against 186 with the decode kernel at every length; depth 16384 148
 * with the decode kernel against 132. */
#ifndef ST_ATTN_DEC_MIN_NP /* -DST_ATTN_DEC_MIN_NP=0: the decode kernel at every length (A/B) */
#define ST_ATTN_DEC_MIN_NP 4096
#endif

/* A block serves one KV head and one chunk of positions for all of that head's rows (a decode
 * step's G query heads, or a short verify window). Its 8 warps take the chunk's tiles of 32
 * positions in turn (warp w: tiles w, w + 8, ...). Scores: lane = position, the lane reads its
 * own K row once (16-byte loads) and dots it with every row's query (shared memory, broadcast).
 * Online softmax per row and warp; P * V: lane = HD / 32 consecutive dimensions, each V row
 * read once, coalesced, 8 rows in flight, the probabilities broadcast from their lane. The 8 warps' states are merged in shared memory
 * in warp order; one chunk writes the output, several write (acc, max, sum) partials for
 * st_k_attn_combine. Each K and V element is read once, against R reads in st_k_attn. */
template <int HD, bool F16>
static __global__ void __launch_bounds__(ST_ATTN_THREADS, 2)
st_k_attn_dec(const st_attn_args a) {
    st_pdl_enter();
    constexpr int R = ST_ATTN_DEC_ROWS, ND = HD / 32, EPV = F16 ? 8 : 4, VPR = HD / EPV;
    constexpr int ES = F16 ? 2 : 4, TL = ST_ATTN_TILE, VG = ND >= 8 ? 4 : ST_ATTN_DEC_VG;
    extern __shared__ float4 st_attn_dec_smem4[];
    float *Qs = (float *)st_attn_dec_smem4;   /* [R][HD] */
    float *Ms = Qs + R * HD;                  /* [8 warps][R] */
    float *Ls = Ms + 8 * R;                   /* [8][R] */
    float *As = Ls + 8 * R;                   /* [8][R][HD] */
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int c = (int)blockIdx.x, hk = (int)blockIdx.y;
    const int G = a.group, RR = a.T * G;      /* live rows, <= R */
    const int64_t pos0 = a.pos_dev ? (int64_t)*a.pos_dev : a.pos0;
    const int64_t c0 = (int64_t)c * a.chunk;
    const int64_t c1 = min(c0 + (int64_t)a.chunk, pos0 + a.T); /* this block's positions [c0, c1) */

    for (int idx = (int)threadIdx.x; idx < R * HD; idx += ST_ATTN_THREADS) {
        const int r = idx / HD, d = idx - r * HD;
        float qv = 0.0f;
        if (r < RR) {
            const int t = r / G, h = hk * G + (r - t * G);
            qv = a.q[(int64_t)t * a.ldq + (int64_t)h * HD + d];
        }
        Qs[idx] = qv;
    }
    __syncthreads();

    int rt[R]; /* row r's token: it sees positions up to pos0 + rt[r] (dead rows: none) */
    float m[R], l[R], acc[R][ND];
#pragma unroll
    for (int r = 0; r < R; r++) {
        rt[r] = r < RR ? r / G : -(1 << 30);
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int dd = 0; dd < ND; dd++) acc[r][dd] = 0.0f;
    }
    const char *Kb = (const char *)a.k + (size_t)hk * (size_t)a.n_ctx * HD * ES;
    const char *Vb = (const char *)a.v + (size_t)hk * (size_t)a.n_ctx * HD * ES;

    for (int64_t pb = c0 + (int64_t)warp * TL; pb < c1; pb += 8 * TL) {
        const int64_t p = pb + lane;
        float sc[R];
#pragma unroll
        for (int r = 0; r < R; r++) sc[r] = 0.0f;
        if (p < c1) {
            const char *kr = Kb + (size_t)p * HD * ES;
#pragma unroll 4
            for (int vi = 0; vi < VPR; vi++) {
                float f[EPV];
                if (F16) st_ld16_f16(kr + (size_t)vi * 16, f); else st_ld16_f32(kr + (size_t)vi * 16, f);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float4 *qp = (const float4 *)(Qs + r * HD + vi * EPV);
#pragma unroll
                    for (int e4 = 0; e4 < EPV / 4; e4++) {
                        const float4 qv = qp[e4];
                        sc[r] = fmaf(qv.x, f[4 * e4], sc[r]);
                        sc[r] = fmaf(qv.y, f[4 * e4 + 1], sc[r]);
                        sc[r] = fmaf(qv.z, f[4 * e4 + 2], sc[r]);
                        sc[r] = fmaf(qv.w, f[4 * e4 + 3], sc[r]);
                    }
                }
            }
        }
        float pv[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const bool valid = p < c1 && p - pos0 <= (int64_t)rt[r];
            const float s = valid ? sc[r] * a.scale : -INFINITY;
            const float mn = fmaxf(m[r], st_warp_max_f(s)); /* warp-uniform */
            float corr = 1.0f;
            pv[r] = 0.0f;
            if (mn != -INFINITY) {
                corr = expf(m[r] - mn); /* 0 when m[r] is still -inf */
                pv[r] = valid ? expf(s - mn) : 0.0f;
            }
            l[r] = fmaf(l[r], corr, st_warp_sum_f(pv[r]));
            m[r] = mn;
#pragma unroll
            for (int dd = 0; dd < ND; dd++) acc[r][dd] *= corr;
        }
        /* P * V in groups of VG positions whose V rows are all loaded first (one
         * load per lane and row: dimensions ND * lane ..): a tile costs 32 / VG memory round
         * trips, not 32. Positions past the chunk's end load zeros with probability 0, which
         * adds +0 to every sum: the same bits as skipping them. */
        const int n = (int)min((int64_t)TL, c1 - pb);
        const char *vt = Vb + (size_t)pb * HD * ES + (size_t)lane * ND * ES;
        for (int j0 = 0; j0 < n; j0 += VG) {
            float vv[VG][ND];
#pragma unroll
            for (int jj = 0; jj < VG; jj++) {
                if (j0 + jj < n) st_ld_dims<ND, F16>(vt + (size_t)(j0 + jj) * HD * ES, vv[jj]);
                else {
#pragma unroll
                    for (int dd = 0; dd < ND; dd++) vv[jj][dd] = 0.0f;
                }
            }
#pragma unroll
            for (int jj = 0; jj < VG; jj++) {
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float pj = __shfl_sync(0xffffffffu, pv[r], j0 + jj);
#pragma unroll
                    for (int dd = 0; dd < ND; dd++) acc[r][dd] = fmaf(pj, vv[jj][dd], acc[r][dd]);
                }
            }
        }
    }

    /* merge the warps in order */
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (lane == 0) {
            Ms[warp * R + r] = m[r];
            Ls[warp * R + r] = l[r];
        }
#pragma unroll
        for (int dd = 0; dd < ND; dd++) As[(warp * R + r) * HD + ND * lane + dd] = acc[r][dd];
    }
    __syncthreads();
    for (int idx = (int)threadIdx.x; idx < RR * HD; idx += ST_ATTN_THREADS) {
        const int r = idx / HD, d = idx - r * HD;
        float M = -INFINITY;
        for (int w = 0; w < 8; w++) M = fmaxf(M, Ms[w * R + r]);
        float L = 0.0f, O = 0.0f;
        if (M != -INFINITY)
            for (int w = 0; w < 8; w++) {
                const float mw = Ms[w * R + r];
                if (mw == -INFINITY) continue;
                const float e = expf(mw - M);
                L = fmaf(Ls[w * R + r], e, L);
                O = fmaf(As[(w * R + r) * HD + d], e, O);
            }
        const int t = r / G, h = hk * G + (r - t * G);
        if (a.n_chunks == 1) {
            a.out[(int64_t)t * a.ldo + (int64_t)h * HD + d] = __fdiv_rn(O, L); /* position 0 is seen */
        } else {
            float *pr = a.part + ((size_t)((int64_t)t * a.n_head + h) * (size_t)a.n_chunks + (size_t)c) * (HD + 2);
            pr[d] = O;
            if (d == 0) {
                pr[HD] = M;
                pr[HD + 1] = L;
            }
        }
    }
}

static size_t st_attn_dec_smem(int hd) {
    return sizeof(float) * ((size_t)ST_ATTN_DEC_ROWS * hd * 9 + 16 * ST_ATTN_DEC_ROWS);
}

template <int HD, bool F16>
static strata_status st_attn_dec_launch(const st_attn_args &a, int n_kv, cudaStream_t s) {
    auto kern = st_k_attn_dec<HD, F16>;
    const size_t smem = st_attn_dec_smem(HD);
    if (smem > 48 * 1024)
        ST_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    st_launch(kern, dim3((unsigned)a.n_chunks, (unsigned)n_kv), ST_ATTN_THREADS, smem, s, a);
    ST_CUDA_CHECK_LAUNCH("st_k_attn_dec");
    return STRATA_OK;
}

static strata_status st_attn_dec_dispatch(int hd, bool f16, const st_attn_args &a, int n_kv, cudaStream_t s) {
    switch (hd) {
    case 64: return f16 ? st_attn_dec_launch<64, true>(a, n_kv, s) : st_attn_dec_launch<64, false>(a, n_kv, s);
    case 128: return f16 ? st_attn_dec_launch<128, true>(a, n_kv, s) : st_attn_dec_launch<128, false>(a, n_kv, s);
    case 256: return f16 ? st_attn_dec_launch<256, true>(a, n_kv, s) : st_attn_dec_launch<256, false>(a, n_kv, s);
    default: break;
    }
    return st_error(STRATA_ERR_INTERNAL, "st_attn_dec_dispatch: head_dim %d passed the check", hd);
}

/* ---- prefill on the tensor cores (flash attention) --------------------------------------------- */

#define ST_ATTN_TC_BM 64  /* query rows per block: 16 per warp */
#define ST_ATTN_TC_BN 64  /* positions per K/V tile */
#define ST_ATTN_TC_MIN_CHUNK 1024 /* fewest positions per chunk when the blocks alone leave SMs idle */

static size_t st_attn_tc_smem(int hd) { /* two stages of K and V tiles */
    return (size_t)4 * ST_ATTN_TC_BN * (size_t)(hd + 8) * sizeof(__half);
}

/* Copies positions pb..pb+BN-1 of K and V (zeros past last) into a stage: cp.async, 16 bytes a
 * copy, 8 + 8 per thread at head_dim 128. Position 0 stands in as the (unread) source of a
 * zero fill. */
template <int HD>
static __device__ __forceinline__ void st_attn_tc_fetch(__half *Ks, __half *Vs, const __half *Kb,
                                                        const __half *Vb, int64_t pb, int64_t last) {
    constexpr int CH = HD / 8, LDS = HD + 8;
#pragma unroll
    for (int idx = (int)threadIdx.x; idx < ST_ATTN_TC_BN * CH; idx += 128) {
        const int pp = idx / CH, ch = idx - pp * CH;
        const int64_t p = pb + pp;
        const bool ok = p <= last;
        const size_t off = (size_t)(ok ? p : 0) * HD + (size_t)ch * 8;
        st_cp_async16(Ks + pp * LDS + ch * 8, Kb + off, ok);
        st_cp_async16(Vs + pp * LDS + ch * 8, Vb + off, ok);
    }
}

/* ---- pieces shared by the tensor-core kernels (st_k_attn_tc, st_k_attn_dtc) ------------------ */

/* Query rows r_first .. r_first + n - 1 of KV head hk (row r: token r / G, query head
 * hk * G + r % G; rows from R on are zero), scaled by qscale, into Qh [n][LDS] as f16 and, SPLIT,
 * the remainders into Ql; by a block of 128 threads. */
template <int HD, bool SPLIT>
static __device__ __forceinline__ void st_attn_stage_q(const st_attn_args &a, int hk, int G, int R, int r_first,
                                                       int n, float qscale, __half *Qh, __half *Ql, int LDS) {
    for (int idx = (int)threadIdx.x; idx < n * HD; idx += 128) { /* the kernels' 128 threads */
        const int lr = idx / HD, d = idx - lr * HD, r = r_first + lr;
        float qv = 0.0f;
        if (r < R) {
            const int t = r / G, h = hk * G + (r - t * G);
            qv = a.q[(int64_t)t * a.ldq + (int64_t)h * HD + d] * qscale;
        }
        const __half qh = __float2half_rn(qv);
        Qh[lr * LDS + d] = qh;
        if (SPLIT) Ql[lr * LDS + d] = __float2half_rn(qv - __half2float(qh));
    }
}

/* The A fragments of staged query rows row0 .. row0 + 15 (hi, and lo when SPLIT). */
template <int KS, bool SPLIT>
static __device__ __forceinline__ void st_attn_q_frags(uint32_t (&qf)[KS][4], uint32_t (&ql)[SPLIT ? KS : 1][4],
                                                       const __half *Qh, const __half *Ql, int row0, int lane,
                                                       int LDS) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        st_ldsm_x4(qf[ks], Qh + (row0 + (lane & 15)) * LDS + ks * 16 + (lane >> 4) * 8);
        if (SPLIT) st_ldsm_x4(ql[ks], Ql + (row0 + (lane & 15)) * LDS + ks * 16 + (lane >> 4) * 8);
    }
}

/* The causal mask of NT n8 score blocks at positions pb + 8 nt + 2 tq + e: -inf past e0 (the
 * lane's first row's last position) and past e1 (its second row's). */
template <int NT>
static __device__ __forceinline__ void st_attn_mask(float (&sc)[NT][4], int64_t pb, int tq, int64_t e0, int64_t e1) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int64_t p = pb + nt * 8 + 2 * tq + e;
            if (p > e0) sc[nt][e] = -INFINITY;
            if (p > e1) sc[nt][2 + e] = -INFINITY;
        }
}

/* One online-softmax step (base 2) of a warp's 16 rows over NT n8 score blocks: the running
 * maxima m (a quad's four lanes agree by shuffles), the scores become probabilities, the sums l
 * rescaled and added to; c0 / c1 get the factors the accumulators must be rescaled by. */
template <int NT>
static __device__ __forceinline__ void st_attn_softmax_step(float (&sc)[NT][4], float &m0, float &m1, float &l0,
                                                            float &l1, float &c0, float &c1) {
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        mx0 = fmaxf(mx0, fmaxf(sc[nt][0], sc[nt][1]));
        mx1 = fmaxf(mx1, fmaxf(sc[nt][2], sc[nt][3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    c0 = mx0 == -INFINITY ? 1.0f : exp2f(m0 - mx0); /* 0 while m0 is -inf */
    c1 = mx1 == -INFINITY ? 1.0f : exp2f(m1 - mx1);
    const float b0 = mx0 == -INFINITY ? 0.0f : mx0, b1 = mx1 == -INFINITY ? 0.0f : mx1;
    float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float p0 = exp2f(sc[nt][e] - b0); /* -inf - b: 0 */
            const float p1 = exp2f(sc[nt][2 + e] - b1);
            sc[nt][e] = p0;
            sc[nt][2 + e] = p1;
            rs0 += p0;
            rs1 += p1;
        }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
        rs0 += __shfl_xor_sync(0xffffffffu, rs0, off);
        rs1 += __shfl_xor_sync(0xffffffffu, rs1, off);
    }
    l0 = fmaf(l0, c0, rs0);
    l1 = fmaf(l1, c1, rs1);
    m0 = mx0;
    m1 = mx1;
}

/* Probabilities of 16 positions (score blocks s0, s1: the C layout is the A fragment layout) as
 * the f16 A fragment pa and, SPLIT, the remainders' fragment pl. */
template <bool SPLIT>
static __device__ __forceinline__ void st_attn_p_frags(const float (&s0)[4], const float (&s1)[4], uint32_t (&pa)[4],
                                                       uint32_t (&pl)[4]) {
    pa[0] = st_h2(s0[0], s0[1]);
    pa[1] = st_h2(s0[2], s0[3]);
    pa[2] = st_h2(s1[0], s1[1]);
    pa[3] = st_h2(s1[2], s1[3]);
    pl[0] = pl[1] = pl[2] = pl[3] = 0u;
    if (SPLIT) {
#pragma unroll
        for (int i = 0; i < 4; i++) { /* pa[i] holds s(i/2)[2(i%2)], [2(i%2) + 1] */
            const float *sv = i < 2 ? s0 : s1;
            const float2 h = __half22float2(*(const __half2 *)&pa[i]);
            pl[i] = st_h2(sv[2 * (i & 1)] - h.x, sv[2 * (i & 1) + 1] - h.y);
        }
    }
}

/* Flash attention for long batches (prefill) over an f16 cache, head_dim 64 or 128. A block of
 * 4 warps serves 64 query rows of one KV head (rows as in st_k_attn: token-major, the G query
 * heads of the KV head), each warp 16 of them; it walks the positions of its chunk up to its
 * last row's in tiles of 64, K and V through shared memory in two stages: the next tile's
 * cp.async copies are in flight while the warps compute on this one. Per tile a warp computes
 * its 16 x 64 scores with mma.sync m16n8k16 (queries rounded to f16 once, scaled by scale *
 * log2 e), masks the causal limit (only in tiles that reach past the block's first row's
 * limit), updates its rows' running max and sum (online softmax in base 2, f32), and adds P * V
 * with P rounded to f16 (ldmatrix.trans for V). Tiles in a fixed order, so deterministic.
 * n_chunks == 1: every output row written once, normalized. n_chunks > 1 (blockIdx.y = chunk):
 * unnormalized partials with their max (natural log units, as st_k_attn writes them) and sum,
 * merged in chunk order by st_k_attn_combine. SPLIT (attn_tc 2): each query and each
 * probability is carried as two f16 numbers, hi = f16(x) and lo = f16(x - hi), and multiplied
 * twice (hi and lo against the same f16 K or V fragment, f32 accumulation): products within
 * ~2^-22 of f32 for twice the mma work; K and V are f16 in the cache, so exact either way. */
template <int HD, bool SPLIT>
static __global__ void __launch_bounds__(128)
st_k_attn_tc(const st_attn_args a) {
    st_pdl_enter();
    constexpr int BM = ST_ATTN_TC_BM, BN = ST_ATTN_TC_BN, LDS = HD + 8;
    constexpr int KS = HD / 16, NT = BN / 8, DT = HD / 8;
    extern __shared__ __align__(128) unsigned char st_attn_tc_sm[];
    __half *const S0 = (__half *)st_attn_tc_sm; /* stage s: K at S0 + 2s * BN * LDS, V after it */
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int g = lane >> 2, tq = lane & 3;
    const int rg = (int)blockIdx.x, c = (int)blockIdx.y, hk = (int)blockIdx.z;
    const int G = a.group, R = a.T * G;
    const int64_t pos0 = a.pos_dev ? (int64_t)*a.pos_dev : a.pos0;
    const int r_first = rg * BM;
    const float qscale = a.scale * 1.4426950408889634f; /* log2(e): exp2 below */
    const __half *Kb = (const __half *)a.k + (size_t)hk * (size_t)a.n_ctx * HD;
    const __half *Vb = (const __half *)a.v + (size_t)hk * (size_t)a.n_ctx * HD;

    /* this chunk's positions: [p_begin, p_end], the end clipped to the block's last row's */
    const int64_t last = pos0 + (min(R, r_first + BM) - 1) / G;
    const int64_t p_begin = (int64_t)c * a.chunk;
    const int64_t p_end = min(last, p_begin + a.chunk - 1);
    const int n_tiles = p_end >= p_begin ? (int)((p_end - p_begin) / BN + 1) : 0;
    if (n_tiles > 0) st_attn_tc_fetch<HD>(S0, S0 + BN * LDS, Kb, Vb, p_begin, p_end);
    st_cp_async_commit();

    /* this warp's 16 query rows as f16 A fragments, staged through stage 1 (K: hi, V: lo) */
    __half *const Qh = S0 + 2 * BN * LDS, *const Ql = S0 + 3 * BN * LDS;
    st_attn_stage_q<HD, SPLIT>(a, hk, G, R, r_first, BM, qscale, Qh, Ql, LDS);
    __syncthreads();
    uint32_t qf[KS][4], ql[SPLIT ? KS : 1][4];
    st_attn_q_frags<KS, SPLIT>(qf, ql, Qh, Ql, warp * 16, lane, LDS);
    __syncthreads(); /* stage 1 is the next tile's */

    const int r0 = r_first + warp * 16 + g, r1 = r0 + 8;
    const int64_t lim0 = r0 < R ? pos0 + r0 / G : -1, lim1 = r1 < R ? pos0 + r1 / G : -1;
    const int64_t lim_first = pos0 + r_first / G; /* the least limit of the block's rows */
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float o[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;

    for (int it = 0; it < n_tiles; it++) {
        const int64_t pb = p_begin + (int64_t)it * BN;
        if (it + 1 < n_tiles) {
            __half *Kn = S0 + 2 * ((it + 1) & 1) * BN * LDS;
            st_attn_tc_fetch<HD>(Kn, Kn + BN * LDS, Kb, Vb, pb + BN, p_end);
        }
        st_cp_async_commit();
        st_cp_async_wait<1>(); /* this tile's copies (the group before the one just closed) */
        __syncthreads();
        const __half *Ks = S0 + 2 * (it & 1) * BN * LDS, *Vs = Ks + BN * LDS;
        /* scores of this warp's 16 rows against the tile's 64 positions */
        float sc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t bf[4];
                st_ldsm_x4(bf, Ks + (np * 16 + ((lane >> 4) << 3) + (lane & 7)) * LDS + ks * 16 +
                                        ((lane >> 3) & 1) * 8);
                st_mma16816(sc[2 * np], qf[ks], bf[0], bf[1]);
                st_mma16816(sc[2 * np + 1], qf[ks], bf[2], bf[3]);
                if (SPLIT) {
                    st_mma16816(sc[2 * np], ql[ks], bf[0], bf[1]);
                    st_mma16816(sc[2 * np + 1], ql[ks], bf[2], bf[3]);
                }
            }
        /* causal mask (tiles past the least limit only; the zero-filled positions past p_end
         * are past every row's limit or the chunk's end), running max, probabilities (base 2) */
        if (pb + BN - 1 > lim_first || pb + BN - 1 > p_end)
            st_attn_mask<NT>(sc, pb, tq, min(lim0, p_end), min(lim1, p_end));
        float c0, c1;
        st_attn_softmax_step<NT>(sc, m0, m1, l0, l1, c0, c1);
#pragma unroll
        for (int dt = 0; dt < DT; dt++) {
            o[dt][0] *= c0; o[dt][1] *= c0;
            o[dt][2] *= c1; o[dt][3] *= c1;
        }
        /* O += P V: P's accumulator layout is the A fragment layout, 16 positions at a time */
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t pa[4], pl[4];
            st_attn_p_frags<SPLIT>(sc[2 * kk], sc[2 * kk + 1], pa, pl);
#pragma unroll
            for (int dp = 0; dp < DT / 2; dp++) {
                uint32_t bf[4];
                st_ldsm_x4_t(bf, Vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS +
                                          dp * 16 + (lane >> 4) * 8);
                st_mma16816(o[2 * dp], pa, bf[0], bf[1]);
                st_mma16816(o[2 * dp + 1], pa, bf[2], bf[3]);
                if (SPLIT) {
                    st_mma16816(o[2 * dp], pl, bf[0], bf[1]);
                    st_mma16816(o[2 * dp + 1], pl, bf[2], bf[3]);
                }
            }
        }
        __syncthreads(); /* this stage is refilled by the next iteration's copies */
    }
    st_cp_async_wait<0>();
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int r = hr ? r1 : r0;
        if (r >= R) continue;
        const float lsum = hr ? l1 : l0;
        const int t = r / G, h = hk * G + (r - t * G);
        if (a.n_chunks == 1) { /* every live row saw position 0, so l > 0 */
            float *out = a.out + (int64_t)t * a.ldo + (int64_t)h * HD;
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                out[dt * 8 + 2 * tq] = __fdiv_rn(o[dt][2 * hr], lsum);
                out[dt * 8 + 2 * tq + 1] = __fdiv_rn(o[dt][2 * hr + 1], lsum);
            }
        } else { /* a chunk wholly past this row's limit leaves m -inf, l 0, o 0 */
            float *pr = a.part + ((size_t)((int64_t)t * a.n_head + h) * (size_t)a.n_chunks + (size_t)c) * (HD + 2);
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                pr[dt * 8 + 2 * tq] = o[dt][2 * hr];
                pr[dt * 8 + 2 * tq + 1] = o[dt][2 * hr + 1];
            }
            if (tq == 0) {
                const float mb = hr ? m1 : m0;
                pr[HD] = mb == -INFINITY ? -INFINITY : mb * 0.6931471805599453f; /* ln 2 */
                pr[HD + 1] = lsum;
            }
        }
    }
}

/* Chunks for the tensor-core kernel: one pass when the row blocks fill the SMs, else enough
 * chunks of at least ST_ATTN_TC_MIN_CHUNK positions for about 2 blocks an SM, within ws_cap. */
static int st_attn_tc_chunks(int64_t blocks, int64_t np, int64_t T, const st_cuda_attn_shape *s,
                             size_t ws_cap, int sm_count, int64_t *chunk_out) {
    const int64_t n = blocks >= sm_count ? 1 : st_cdiv(2 * (int64_t)sm_count, blocks);
    *chunk_out = st_attn_split(n, np, ST_ATTN_TC_MIN_CHUNK, ST_ATTN_TC_BN, st_attn_part_bytes(s, T), ws_cap);
    return (int)st_cdiv(np, *chunk_out);
}

template <int HD>
static strata_status st_attn_tc_launch(const st_attn_args &a, int n_kv, int split, cudaStream_t s) {
    const int R = a.T * a.group;
    const dim3 grid((unsigned)((R + ST_ATTN_TC_BM - 1) / ST_ATTN_TC_BM), (unsigned)a.n_chunks, (unsigned)n_kv);
    const size_t smem = st_attn_tc_smem(HD);
    auto kern = split ? st_k_attn_tc<HD, true> : st_k_attn_tc<HD, false>;
    if (smem > 48 * 1024)
        ST_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    st_launch(kern, grid, 128, smem, s, a);
    ST_CUDA_CHECK_LAUNCH("st_k_attn_tc");
    return STRATA_OK;
}

/* ---- decode on the tensor cores: at most 16 rows per KV head ----------------------------------- */

#define ST_ATTN_DTC_ROWS 16      /* rows (token, query head) per KV head: T * G <= 16, one m16 tile */
#define ST_ATTN_DTC_STAGES 3     /* K/V tiles of 64 positions in shared memory: 2 in flight */
#define ST_ATTN_DTC_MIN_CHUNK 256 /* fewest positions per chunk (4 tiles) */
/* The decode kernel on the tensor cores serves attended lengths (rounded as the plan) from this
 * many positions on; shorter ones keep the FMA kernels (chosen as before it existed). attn_check
 * on an H100, one token: qwen3 at 1,024 / 2,048 positions 20.4 / 20.4 us against the general FMA
 * kernel's 16.3 / 15.9, at 4,096 20.9 against 25.7 (olmoe: equal, equal, 26.3 against 30.3). */
#ifndef ST_ATTN_DTC_MIN_NP /* -DST_ATTN_DTC_MIN_NP=<huge>: never (A/B) */
#define ST_ATTN_DTC_MIN_NP 4096
#endif
static_assert(ST_ATTN_TC_BN == 64, "st_k_attn_dtc shares st_attn_tc_fetch's 64-position, 128-thread tiles");

static size_t st_attn_dtc_smem(int hd) { /* the stages; the warps' merge reuses them */
    return (size_t)ST_ATTN_DTC_STAGES * 2 * ST_ATTN_TC_BN * (size_t)(hd + 8) * sizeof(__half);
}

/* Flash-decoding on the tensor cores for calls of at most 16 rows per KV head (a decode step's G
 * query heads, short verify windows) over an f16 cache, head_dim 64 or 128. A block of 4 warps
 * serves one KV head and one chunk of positions; the chunk's K and V go through shared memory in
 * tiles of 64 positions by cp.async, 3 stages (two tiles in flight while the warps work on one:
 * st_k_attn_dec's loads waited on each 32-position tile, ~1 TB/s at depth 16K). Warp w takes
 * positions 16w .. 16w + 15 of every tile: its 16 rows (queries split hi + lo f16 as in
 * st_k_attn_tc, rows past T * G zero) against 16 positions with mma m16n8k16, the causal mask,
 * its own running max and sum (base 2), and P (hi + lo) times the 16 V rows. The warps' states
 * are merged in warp order in shared memory, then the block writes the normalized output (one
 * chunk) or (acc, max in natural-log units, sum) partials for st_k_attn_combine. Fixed order
 * throughout: deterministic. SPLIT false: single f16 operands (shape.tc 1). */
template <int HD, bool SPLIT>
static __global__ void __launch_bounds__(128, 2)
st_k_attn_dtc(const st_attn_args a) {
    constexpr int BN = ST_ATTN_TC_BN, LDS = HD + 8, KS = HD / 16, DT = HD / 8, NS = ST_ATTN_DTC_STAGES;
    extern __shared__ __align__(128) unsigned char st_attn_dtc_sm[];
    __half *const S0 = (__half *)st_attn_dtc_sm; /* stage s: K at S0 + 2s * BN * LDS, V after it */
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int g = lane >> 2, tq = lane & 3;
    const int c = (int)blockIdx.x, hk = (int)blockIdx.y;
    const int G = a.group, RR = a.T * G; /* live rows, <= 16 */
    const int64_t pos0 = a.pos_dev ? (int64_t)*a.pos_dev : a.pos0;
    const float qscale = a.scale * 1.4426950408889634f; /* log2(e): exp2 below */
    const __half *Kb = (const __half *)a.k + (size_t)hk * (size_t)a.n_ctx * HD;
    const __half *Vb = (const __half *)a.v + (size_t)hk * (size_t)a.n_ctx * HD;

    /* this chunk's positions [p_begin, p_end], the end clipped to the last row's limit */
    const int64_t p_begin = (int64_t)c * a.chunk;
    const int64_t p_end = min(pos0 + (RR - 1) / G, p_begin + a.chunk - 1);
    const int n_tiles = p_end >= p_begin ? (int)((p_end - p_begin) / BN + 1) : 0;
    /* Only positions pos0 on are written by the kernels this one waits for (the K/V store of
     * this step's rows; pos_dev was copied before the step): a chunk whose first NS - 1 tiles end
     * before pos0 starts their copies, and sends its later tiles' rows before pos0 towards L2,
     * before griddepcontrol.wait, overlapping the kernels before it (the q/k/v GEMV's tail,
     * RoPE and the store). The copies are the same either way: the same bits. */
    const bool early = ST_ATTN_DTC_EARLY && p_begin + (int64_t)(NS - 1) * BN <= pos0;
    if (early) {
#pragma unroll
        for (int s = 0; s < NS - 1; s++) {
            if (s < n_tiles) st_attn_tc_fetch<HD>(S0 + 2 * s * BN * LDS, S0 + (2 * s + 1) * BN * LDS, Kb, Vb,
                                                  p_begin + (int64_t)s * BN, p_end);
            st_cp_async_commit();
        }
        /* rows p_begin + (NS - 1) BN .. min(p_end, pos0 - 1): 128-byte lines of K and V */
        const int64_t q0 = p_begin + (int64_t)(NS - 1) * BN, q1 = min(p_end, pos0 - 1);
        constexpr int LPP = HD * 2 / 128; /* lines a position */
        for (int64_t i = threadIdx.x; q0 <= q1 && i < (q1 - q0 + 1) * LPP; i += 128) {
            const size_t off = (size_t)q0 * HD + (size_t)i * 64; /* 64 halves a line */
            st_attn_prefetch_l2(Kb + off);
            st_attn_prefetch_l2(Vb + off);
        }
    }
    st_pdl_enter();
    if (!early) {
#pragma unroll
        for (int s = 0; s < NS - 1; s++) {
            if (s < n_tiles) st_attn_tc_fetch<HD>(S0 + 2 * s * BN * LDS, S0 + (2 * s + 1) * BN * LDS, Kb, Vb,
                                                  p_begin + (int64_t)s * BN, p_end);
            st_cp_async_commit();
        }
    }

    /* the 16 query rows as f16 A fragments (every warp the same), staged through the last stage */
    __half *const Qh = S0 + 2 * (NS - 1) * BN * LDS, *const Ql = Qh + 16 * LDS;
    st_attn_stage_q<HD, SPLIT>(a, hk, G, RR, 0, 16, qscale, Qh, Ql, LDS);
    __syncthreads();
    uint32_t qf[KS][4], ql[SPLIT ? KS : 1][4];
    st_attn_q_frags<KS, SPLIT>(qf, ql, Qh, Ql, 0, lane, LDS);
    __syncthreads(); /* the last stage is the loop's */

    const int r0 = g, r1 = g + 8; /* this lane's rows in the C fragments */
    const int64_t e0 = r0 < RR ? min(pos0 + r0 / G, p_end) : -1; /* last position each row sees */
    const int64_t e1 = r1 < RR ? min(pos0 + r1 / G, p_end) : -1;
    const int64_t e_least = min(pos0, p_end); /* no live row stops before it */
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float o[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;

    for (int it = 0; it < n_tiles; it++) {
        st_cp_async_wait<NS - 2>(); /* this tile's copies (groups of later tiles may be pending) */
        __syncthreads();            /* ... everyone's; and every warp is done with tile it - 1 */
        if (it + NS - 1 < n_tiles) { /* into tile it - 1's stage */
            __half *Kn = S0 + 2 * ((it + NS - 1) % NS) * BN * LDS;
            st_attn_tc_fetch<HD>(Kn, Kn + BN * LDS, Kb, Vb, p_begin + (int64_t)(it + NS - 1) * BN, p_end);
        }
        st_cp_async_commit();
        const __half *Ks = S0 + 2 * (it % NS) * BN * LDS + warp * 16 * LDS, *Vs = Ks + BN * LDS;
        const int64_t pb = p_begin + (int64_t)it * BN + warp * 16; /* this warp's 16 positions */
        /* scores: 16 rows x 16 positions (two n8 blocks) */
        float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            uint32_t bf[4];
            st_ldsm_x4(bf, Ks + (((lane >> 4) << 3) + (lane & 7)) * LDS + ks * 16 + ((lane >> 3) & 1) * 8);
            st_mma16816(sc[0], qf[ks], bf[0], bf[1]);
            st_mma16816(sc[1], qf[ks], bf[2], bf[3]);
            if (SPLIT) {
                st_mma16816(sc[0], ql[ks], bf[0], bf[1]);
                st_mma16816(sc[1], ql[ks], bf[2], bf[3]);
            }
        }
        /* causal mask and the chunk's end (zero-filled positions past p_end), only where some
         * position passes a row's last; dead rows (q = 0) score 0 and are never written */
        if (pb + 15 > e_least) st_attn_mask<2>(sc, pb, tq, e0, e1);
        float c0, c1;
        st_attn_softmax_step<2>(sc, m0, m1, l0, l1, c0, c1);
        /* O = O * corr + P V: the scores' C layout is P's A fragment layout */
        uint32_t pa[4], pl[4];
        st_attn_p_frags<SPLIT>(sc[0], sc[1], pa, pl);
#pragma unroll
        for (int dp = 0; dp < DT / 2; dp++) {
            o[2 * dp][0] *= c0; o[2 * dp][1] *= c0; o[2 * dp][2] *= c1; o[2 * dp][3] *= c1;
            o[2 * dp + 1][0] *= c0; o[2 * dp + 1][1] *= c0; o[2 * dp + 1][2] *= c1; o[2 * dp + 1][3] *= c1;
            uint32_t bf[4];
            st_ldsm_x4_t(bf, Vs + ((lane & 7) + ((lane >> 3) & 1) * 8) * LDS + dp * 16 + (lane >> 4) * 8);
            st_mma16816(o[2 * dp], pa, bf[0], bf[1]);
            st_mma16816(o[2 * dp + 1], pa, bf[2], bf[3]);
            if (SPLIT) {
                st_mma16816(o[2 * dp], pl, bf[0], bf[1]);
                st_mma16816(o[2 * dp + 1], pl, bf[2], bf[3]);
            }
        }
    }
    st_cp_async_wait<0>();
    __syncthreads(); /* the stages become the merge area */

    /* merge the 4 warps in order: Ms/Ls [warp][16] (base 2), Os [warp][16][HD] */
    float *const Ms = (float *)st_attn_dtc_sm, *const Ls = Ms + 4 * 16, *const Os = Ls + 4 * 16;
    if (tq == 0) {
        Ms[warp * 16 + r0] = m0; Ms[warp * 16 + r1] = m1;
        Ls[warp * 16 + r0] = l0; Ls[warp * 16 + r1] = l1;
    }
#pragma unroll
    for (int dt = 0; dt < DT; dt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            Os[(warp * 16 + r0) * HD + dt * 8 + 2 * tq + e] = o[dt][e];
            Os[(warp * 16 + r1) * HD + dt * 8 + 2 * tq + e] = o[dt][2 + e];
        }
    __syncthreads();
    for (int idx = (int)threadIdx.x; idx < RR * HD; idx += 128) {
        const int r = idx / HD, d = idx - r * HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, Ms[w * 16 + r]);
        float L = 0.0f, O = 0.0f;
        if (M != -INFINITY)
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const float mw = Ms[w * 16 + r];
                if (mw == -INFINITY) continue; /* a warp whose positions all passed this row's */
                const float e = exp2f(mw - M);
                L = fmaf(Ls[w * 16 + r], e, L);
                O = fmaf(Os[(w * 16 + r) * HD + d], e, O);
            }
        const int t = r / G, h = hk * G + (r - t * G);
        if (a.n_chunks == 1) {
            a.out[(int64_t)t * a.ldo + (int64_t)h * HD + d] = __fdiv_rn(O, L); /* position 0 is seen */
        } else { /* a chunk wholly past this row's last position leaves M -inf, L 0, O 0 */
            float *pr = a.part + ((size_t)((int64_t)t * a.n_head + h) * (size_t)a.n_chunks + (size_t)c) * (HD + 2);
            pr[d] = O;
            if (d == 0) {
                pr[HD] = M == -INFINITY ? -INFINITY : M * 0.6931471805599453f; /* ln 2 */
                pr[HD + 1] = L;
            }
        }
    }
}

template <int HD>
static strata_status st_attn_dtc_launch(const st_attn_args &a, int n_kv, int split, cudaStream_t s) {
    const size_t smem = st_attn_dtc_smem(HD);
    auto kern = split ? st_k_attn_dtc<HD, true> : st_k_attn_dtc<HD, false>;
    if (smem > 48 * 1024)
        ST_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    st_launch(kern, dim3((unsigned)a.n_chunks, (unsigned)n_kv), 128, smem, s, a);
    ST_CUDA_CHECK_LAUNCH("st_k_attn_dtc");
    return STRATA_OK;
}

/* Block (row, slice) merges the n_chunks partials of one (token, head) row for 32 of its hd
 * dimensions (hd / 32 slices: 128 blocks for qwen3's 32 rows at head_dim 128, so the pass spreads
 * over the SMs; one block per row, reading the chunks 4 deep, took 12.6 us of a decode step's
 * attention at depth 16K on 32 SMs). Each block first puts the chunks' maxima and sums in shared
 * memory (a thread per chunk), then the weights exp(m_c - M) (0 for a chunk wholly past the row's
 * last position, m_c = -inf) and L = sum of l_c * w_c (warp 0: lanes over chunks, then a fixed
 * shuffle tree; every slice computes the same L). Lane d of warp w sums chunks w, w + 16, ... of
 * dimension d (a warp's loads one 128-byte line a chunk, all independent), and the warps add by a
 * fixed tree in shared memory. The slice is one Q8_1 block: with q8 set, warp 0 also writes the
 * row's block as st_cuda_quantize_q8_1 would (the output GEMV's input; the caller's quantize
 * launch goes). Fixed order throughout: deterministic. */
#define ST_ATTN_COMBINE_WARPS 16
#define ST_ATTN_COMBINE_THREADS (32 * ST_ATTN_COMBINE_WARPS)
#ifndef ST_ATTN_COMBINE_Q8 /* -DST_ATTN_COMBINE_Q8=0: the combine leaves the Q8_1 rows to the caller (A/B) */
#define ST_ATTN_COMBINE_Q8 1
#endif
static __global__ void __launch_bounds__(ST_ATTN_COMBINE_THREADS)
st_k_attn_combine(const float *__restrict__ part, int n_chunks, int hd, int n_head, float *out,
                  int64_t ldo, block_q8_1 *q8) {
    st_pdl_enter();
    constexpr int NW = ST_ATTN_COMBINE_WARPS;
    __shared__ float Ws[ST_ATTN_MAX_CHUNKS], Lc[ST_ATTN_MAX_CHUNKS];
    __shared__ float Red[NW][32];
    __shared__ float Wmax[NW], Lsum;
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t row = blockIdx.x, t = row / n_head, h = row - t * n_head;
    const int stride = hd + 2;
    const float *pr = part + (size_t)row * (size_t)n_chunks * (size_t)stride;

    float mx = -INFINITY;
    for (int c = tid; c < n_chunks; c += ST_ATTN_COMBINE_THREADS) {
        const float m = pr[(size_t)c * stride + hd];
        Ws[c] = m;
        Lc[c] = pr[(size_t)c * stride + hd + 1];
        mx = fmaxf(mx, m);
    }
    mx = st_warp_max_f(mx);
    if (lane == 0) Wmax[warp] = mx;
    __syncthreads();
    float M = Wmax[0];
#pragma unroll
    for (int w = 1; w < NW; w++) M = fmaxf(M, Wmax[w]);
    for (int c = tid; c < n_chunks; c += ST_ATTN_COMBINE_THREADS) {
        const float m = Ws[c];
        Ws[c] = m == -INFINITY ? 0.0f : expf(m - M); /* M is finite: chunk 0 holds position 0 */
    }
    __syncthreads();
    if (warp == 0) {
        float L = 0.0f;
        for (int c = lane; c < n_chunks; c += 32) L = fmaf(Lc[c], Ws[c], L);
        L = st_warp_sum_f(L);
        if (lane == 0) Lsum = L;
    }
    const int d = (int)blockIdx.y * 32 + lane;
    float acc = 0.0f;
#pragma unroll 4
    for (int c = warp; c < n_chunks; c += NW) {
        const float w = Ws[c];
        const float v = w != 0.0f ? pr[(size_t)c * stride + d] : 0.0f;
        acc = fmaf(v, w, acc);
    }
    Red[warp][lane] = acc;
    __syncthreads();
#pragma unroll
    for (int half = NW / 2; half >= 1; half >>= 1) { /* warps w and w + half, a fixed tree */
        if (warp < half) Red[warp][lane] += Red[warp + half][lane];
        __syncthreads();
    }
    if (warp == 0) {
        const float o = __fdiv_rn(Red[0][lane], Lsum);
        out[t * ldo + h * hd + d] = o;
        if (q8) st_q8_1_warp_put(o, q8 + row * (hd / 32) + blockIdx.y, lane);
    }
}

/* ---- plan ----------------------------------------------------------------------------------- */

st_attn_plan st_attn_make_plan(const st_cuda_attn_shape *s, int64_t T, int64_t np, int sm_count,
                               size_t ws_cap, int target_blocks, int rpw_force) {
    st_attn_plan pl;
    const int64_t G = s->n_head / s->n_head_kv, R = T * G;
    pl.rpw = rpw_force == 1 || rpw_force == 4 ? rpw_force : (R >= 32 ? 4 : 1);
    pl.n_rg = (int)st_cdiv(R, 8 * pl.rpw);
    pl.smem = st_attn_smem_bytes(s->head_dim, pl.rpw);
    if (sm_count < 1) sm_count = 132;
    const int64_t base = (int64_t)pl.n_rg * s->n_head_kv;
    const int64_t target = target_blocks > 0 ? target_blocks : 4 * (int64_t)sm_count;
    const int64_t n = (target_blocks <= 0 && base >= 2 * (int64_t)sm_count) ? 1 : st_cdiv(target, base);
    const size_t per_chunk = st_attn_part_bytes(s, T);
    const int64_t chunk = st_attn_split(n, np, ST_ATTN_MIN_CHUNK, ST_ATTN_TILE, per_chunk, ws_cap);
    /* positions never exceed INT_MAX here (n_ctx is checked), so chunk fits an int */
    pl.chunk = (int)chunk;
    pl.n_chunks = (int)st_cdiv(np, chunk);
    if (pl.n_chunks < 1) pl.n_chunks = 1;
    pl.ws_bytes = pl.n_chunks > 1 ? (size_t)pl.n_chunks * per_chunk : 0;
    return pl;
}

static int st_attn_sm_count(void) {
    int ok = 0;
    if (st_cuda_probe(&ok, NULL, 0) != STRATA_OK || !ok) return 132;
    st_cuda_device_info info;
    if (st_cuda_device_info_get(&info) != STRATA_OK || info.sm_count < 1) return 132;
    return info.sm_count;
}

/* ---- dispatch ------------------------------------------------------------------------------- */

template <int HD, int RPW, bool F16>
static strata_status st_attn_launch(const st_attn_args &a, const st_attn_plan &pl, int n_kv,
                                    cudaStream_t s) {
    auto kern = st_k_attn<HD, RPW, F16>;
    if (pl.smem > 48 * 1024)
        ST_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pl.smem));
    const dim3 grid((unsigned)pl.n_rg, (unsigned)pl.n_chunks, (unsigned)n_kv);
    st_launch(kern, grid, ST_ATTN_THREADS, pl.smem, s, a);
    ST_CUDA_CHECK_LAUNCH("st_k_attn");
    return STRATA_OK;
}

template <int HD>
static strata_status st_attn_dispatch_hd(bool f16, const st_attn_args &a, const st_attn_plan &pl,
                                         int n_kv, cudaStream_t s) {
    if (f16)
        return pl.rpw == 4 ? st_attn_launch<HD, 4, true>(a, pl, n_kv, s) : st_attn_launch<HD, 1, true>(a, pl, n_kv, s);
    return pl.rpw == 4 ? st_attn_launch<HD, 4, false>(a, pl, n_kv, s) : st_attn_launch<HD, 1, false>(a, pl, n_kv, s);
}

/* The one dispatch point: head_dim x cache type x rows per warp. */
static strata_status st_attn_dispatch(int hd, bool f16, const st_attn_args &a, const st_attn_plan &pl,
                                      int n_kv, cudaStream_t s) {
    switch (hd) {
    case 64: return st_attn_dispatch_hd<64>(f16, a, pl, n_kv, s);
    case 128: return st_attn_dispatch_hd<128>(f16, a, pl, n_kv, s);
    case 256: return st_attn_dispatch_hd<256>(f16, a, pl, n_kv, s);
    default: break;
    }
    return st_error(STRATA_ERR_INTERNAL, "st_attn_dispatch: head_dim %d passed the check", hd);
}

/* ---- entry points --------------------------------------------------------------------------- */

static bool st_shape_ok(const st_cuda_attn_shape *s) {
    return s && s->n_head > 0 && s->n_head_kv > 0 && s->n_head_kv <= 65535 &&
           s->n_head % s->n_head_kv == 0 && s->head_dim > 0 && s->head_dim_v > 0;
}

extern "C" int st_cuda_attn_supports(strata_type kv_type, const st_cuda_attn_shape *s) {
    if (kv_type != STRATA_TYPE_F16 && kv_type != STRATA_TYPE_F32) return 0;
    if (!st_shape_ok(s) || s->head_dim != s->head_dim_v) return 0;
    return s->head_dim == 64 || s->head_dim == 128 || s->head_dim == 256;
}

extern "C" size_t st_cuda_kv_bytes(strata_type kv_type, const st_cuda_attn_shape *s, int64_t n_ctx) {
    if ((kv_type != STRATA_TYPE_F16 && kv_type != STRATA_TYPE_F32) || !st_shape_ok(s) || n_ctx < 0)
        return 0;
    const size_t el = kv_type == STRATA_TYPE_F16 ? 2 : 4;
    const int hd = s->head_dim > s->head_dim_v ? s->head_dim : s->head_dim_v;
    return (size_t)s->n_head_kv * (size_t)n_ctx * (size_t)hd * el;
}

extern "C" strata_status st_cuda_kv_store(const st_cuda_kv_layer *kv, const st_cuda_attn_shape *s,
                                          const float *d_k, int64_t ldk, const float *d_v,
                                          int64_t ldv, int64_t T, int64_t pos0,
                                          const int32_t *d_pos, void *stream) {
    static const char *fn = "st_cuda_kv_store";
    if (!kv || !st_shape_ok(s))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL cache or bad shape", fn);
    if (kv->type != STRATA_TYPE_F16 && kv->type != STRATA_TYPE_F32)
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: cache type %s (F16 or F32 only)", fn,
                        strata_type_name(kv->type));
    if (T < 0 || pos0 < 0 || pos0 + T > kv->n_ctx)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: positions %lld..%lld outside the cache of %lld", fn,
                        (long long)pos0, (long long)(pos0 + T - 1), (long long)kv->n_ctx);
    if (T == 0) return STRATA_OK;
    const int64_t nk = (int64_t)s->n_head_kv * s->head_dim, nv = (int64_t)s->n_head_kv * s->head_dim_v;
    if (ldk < nk || ldv < nv)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: ldk %lld / ldv %lld below %lld / %lld", fn,
                        (long long)ldk, (long long)ldv, (long long)nk, (long long)nv);
    const uintptr_t ea = kv->type == STRATA_TYPE_F16 ? 1 : 3;
    if (!d_k || !d_v || ((uintptr_t)d_k & 3) || ((uintptr_t)d_v & 3) || !kv->k || !kv->v ||
        ((uintptr_t)kv->k & ea) || ((uintptr_t)kv->v & ea))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL or misaligned pointer", fn);
    ST_TRY(st_cuda_require(fn));
    cudaStream_t st = (cudaStream_t)stream;
    const unsigned gk = st_cuda_grid(T * nk, 256), gv = st_cuda_grid(T * nv, 256);
    if (kv->type == STRATA_TYPE_F16) {
        st_launch(st_k_kv_store<true>, gk, 256, 0, st, kv->k, kv->n_ctx, d_k, ldk, s->n_head_kv, s->head_dim, T, pos0, d_pos);
        ST_CUDA_CHECK_LAUNCH("st_k_kv_store (k)");
        st_launch(st_k_kv_store<true>, gv, 256, 0, st, kv->v, kv->n_ctx, d_v, ldv, s->n_head_kv, s->head_dim_v, T, pos0, d_pos);
    } else {
        st_launch(st_k_kv_store<false>, gk, 256, 0, st, kv->k, kv->n_ctx, d_k, ldk, s->n_head_kv, s->head_dim, T, pos0, d_pos);
        ST_CUDA_CHECK_LAUNCH("st_k_kv_store (k)");
        st_launch(st_k_kv_store<false>, gv, 256, 0, st, kv->v, kv->n_ctx, d_v, ldv, s->n_head_kv, s->head_dim_v, T, pos0, d_pos);
    }
    ST_CUDA_CHECK_LAUNCH("st_k_kv_store (v)");
    return STRATA_OK;
}

extern "C" int64_t st_cuda_attn_plan_np(int64_t np, int64_t n_ctx) {
    const int64_t b = (np + ST_ATTN_NP_BUCKET - 1) / ST_ATTN_NP_BUCKET * ST_ATTN_NP_BUCKET;
    return b < n_ctx ? b : (np > n_ctx ? np : n_ctx);
}

extern "C" size_t st_cuda_attn_wsize(const st_cuda_attn_shape *s, int64_t T, int64_t n_ctx) {
    if (!st_shape_ok(s) || T < 1 || n_ctx < 1) return 0;
    /* The chunk count of st_attn_make_plan before the chunk length is rounded up to whole tiles
     * (which only lowers it) and with np = n_ctx (it grows with np): the most any call uses. */
    const int sm = st_attn_sm_count();
    const int64_t G = s->n_head / s->n_head_kv, R = T * G;
    const int rpw = R >= 32 ? 4 : 1;
    const int64_t base = st_cdiv(R, 8 * rpw) * s->n_head_kv;
    int64_t n = base >= 2 * (int64_t)sm ? 1 : st_cdiv(4 * (int64_t)sm, base);
    if (n > st_cdiv(n_ctx, ST_ATTN_MIN_CHUNK)) n = st_cdiv(n_ctx, ST_ATTN_MIN_CHUNK);
    if (n > ST_ATTN_MAX_CHUNKS) n = ST_ATTN_MAX_CHUNKS;
    const size_t per_tok = st_attn_part_bytes(s, 1);
    size_t need = n < 2 ? 0 : (size_t)n * (size_t)T * per_tok;
    /* the tensor-core kernel at any batch of up to T tokens (its chunks grow as batches shrink) */
    if (s->tc != 0 && (s->head_dim == 64 || s->head_dim == 128))
        for (int64_t t = st_cdiv(ST_ATTN_TC_BM, G); t <= T; t++) {
            int64_t chunk;
            const int64_t blocks = st_cdiv(t * G, ST_ATTN_TC_BM) * s->n_head_kv;
            const int nc = st_attn_tc_chunks(blocks, n_ctx, t, s, SIZE_MAX, sm, &chunk);
            const size_t b = nc > 1 ? (size_t)nc * (size_t)t * per_tok : 0;
            if (b > need) need = b;
        }
    return need;
}

/* The kernel a call takes (np: the plan's rounded length). Few rows per KV head (decode, short
 * verify windows): a decode kernel; 64+ over an f16 cache: the tensor-core flash attention;
 * shape.tc 0 keeps the FMA units; a check program's forced plan (attn.cuh) overrides. */
static st_attn_kernel st_attn_pick(strata_type kv_type, const st_cuda_attn_shape *s, int64_t T, int64_t np,
                                   int target_blocks, int rpw_force) {
    const int64_t R = T * (s->n_head / s->n_head_kv);
    const bool mma_ok = kv_type == STRATA_TYPE_F16 && (s->head_dim == 64 || s->head_dim == 128);
    const bool free_plan = rpw_force == 0 && target_blocks <= 0;
    if (mma_ok && R <= ST_ATTN_DTC_ROWS &&
        (rpw_force == 32 || (free_plan && s->tc != 0 && np >= ST_ATTN_DTC_MIN_NP)))
        return ST_ATTN_K_DTC;
    if (R <= ST_ATTN_DEC_ROWS && (rpw_force == -1 || (free_plan && np >= ST_ATTN_DEC_MIN_NP)))
        return ST_ATTN_K_DEC;
    if (mma_ok && (rpw_force == 16 || (free_plan && R >= ST_ATTN_TC_BM && s->tc != 0)))
        return ST_ATTN_K_TC;
    return ST_ATTN_K_FMA;
}

extern "C" const char *st_cuda_attn_kernel_name(strata_type kv_type, const st_cuda_attn_shape *s, int64_t T,
                                                int64_t pos0, int64_t n_ctx) {
    if (!s || !st_cuda_attn_supports(kv_type, s) || T < 1 || pos0 < 0 || pos0 + T > n_ctx) return NULL;
    static const char *const names[] = {"st_k_attn", "st_k_attn_dec", "st_k_attn_dtc", "st_k_attn_tc"};
    return names[st_attn_pick(kv_type, s, T, st_cuda_attn_plan_np(pos0 + T, n_ctx), 0, 0)];
}

/* st_cuda_attention_ex, and with q8 (st_cuda_attention_q8) the Q8_1 rows where the kernel can
 * write them (*q8_done = 1). */
static strata_status st_attn_go(const st_cuda_kv_layer *kv, const st_cuda_attn_shape *s, const float *d_q,
                                int64_t ldq, int64_t T, int64_t pos0, const int32_t *d_pos, float *d_out,
                                int64_t ldo, void *d_ws, size_t ws_bytes, void *stream, int target_blocks,
                                int rpw_force, st_attn_plan *plan_out, void *d_q8, uint32_t *d_sync,
                                size_t n_sync, int *q8_done) {
    static const char *fn = "st_cuda_attention";
    if (!kv || !s) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL cache or shape", fn);
    if (!st_cuda_attn_supports(kv->type, s))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: cache %s, heads %d/%d, head_dim %d/%d (F16/F32, "
                        "head_dim == head_dim_v in 64, 128, 256, n_head a multiple of n_head_kv)", fn,
                        strata_type_name(kv->type), (int)s->n_head, (int)s->n_head_kv,
                        (int)s->head_dim, (int)s->head_dim_v);
    if (T < 0 || pos0 < 0 || pos0 + T > kv->n_ctx || kv->n_ctx > INT_MAX)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld at pos0 %lld with a cache of %lld", fn,
                        (long long)T, (long long)pos0, (long long)kv->n_ctx);
    if (T == 0) return STRATA_OK;
    const int64_t G = s->n_head / s->n_head_kv;
    if (T > (1 << 20) || T * G > INT_MAX / 2)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T = %lld too large", fn, (long long)T);
    const int64_t nq = (int64_t)s->n_head * s->head_dim;
    if (ldq < nq || ldo < nq)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: ldq %lld / ldo %lld below n_head * head_dim %lld",
                        fn, (long long)ldq, (long long)ldo, (long long)nq);
    if (!d_q || !d_out || ((uintptr_t)d_q & 3) || ((uintptr_t)d_out & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: q or out NULL or not 4-byte aligned", fn);
    if (!kv->k || !kv->v || ((uintptr_t)kv->k & 15) || ((uintptr_t)kv->v & 15))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: cache k %p / v %p NULL or not 16-byte aligned",
                        fn, kv->k, kv->v);
    if (!isfinite(s->scale))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: scale %g", fn, (double)s->scale);
    if (!d_ws || ((uintptr_t)d_ws & 15)) ws_bytes = 0; /* no usable workspace: one pass */
    ST_TRY(st_cuda_require(fn));

    /* the plan is made for np rounded up to a bucket: a decode step's launch geometry then stays
     * the same for ST_ATTN_NP_BUCKET positions (a CUDA graph replays it with d_pos), and the
     * chunks past the last position are empty (the combine skips them) */
    const int64_t np = st_cuda_attn_plan_np(pos0 + T, kv->n_ctx);
    const st_attn_kernel kind = st_attn_pick(kv->type, s, T, np, target_blocks, rpw_force);
    const bool dtc = kind == ST_ATTN_K_DTC, dec = kind == ST_ATTN_K_DEC, tc = kind == ST_ATTN_K_TC;
    st_attn_plan pl = st_attn_make_plan(s, T, np, st_attn_sm_count(), ws_bytes, target_blocks, rpw_force);
    if (dtc) { /* chunks of at least 256 positions, about 2 blocks per SM (target_blocks: forced) */
        const size_t per_chunk = st_attn_part_bytes(s, T);
        const int64_t target = target_blocks > 0 ? target_blocks : 2 * (int64_t)st_attn_sm_count();
        const int64_t chunk = st_attn_split(st_cdiv(target, s->n_head_kv), np, ST_ATTN_DTC_MIN_CHUNK,
                                            ST_ATTN_TC_BN, per_chunk, ws_bytes);
        pl.rpw = 32; /* marks the tensor-core decode kernel */
        pl.n_rg = 1;
        pl.chunk = (int)chunk;
        pl.n_chunks = (int)st_cdiv(np, chunk);
        pl.smem = st_attn_dtc_smem(s->head_dim);
        pl.ws_bytes = pl.n_chunks > 1 ? (size_t)pl.n_chunks * per_chunk : 0;
    }
    if (dec) { /* chunks of at least 256 positions, about 4 blocks per SM */
        const size_t per_chunk = st_attn_part_bytes(s, T);
        const int64_t chunk = st_attn_split(st_cdiv(4 * (int64_t)st_attn_sm_count(), s->n_head_kv), np,
                                            ST_ATTN_DEC_CHUNK, ST_ATTN_TILE, per_chunk, ws_bytes);
        pl.rpw = 0; /* marks the decode kernel */
        pl.n_rg = 1;
        pl.chunk = (int)chunk;
        pl.n_chunks = (int)st_cdiv(np, chunk);
        pl.smem = st_attn_dec_smem(s->head_dim);
        pl.ws_bytes = pl.n_chunks > 1 ? (size_t)pl.n_chunks * per_chunk : 0;
    }
    if (plan_out) *plan_out = pl;
    st_attn_args a;
    a.k = kv->k;
    a.v = kv->v;
    a.n_ctx = kv->n_ctx;
    a.q = d_q;
    a.ldq = ldq;
    a.out = d_out;
    a.ldo = ldo;
    a.part = (float *)d_ws;
    a.n_head = s->n_head;
    a.group = (int)G;
    a.T = (int)T;
    a.pos0 = pos0;
    a.pos_dev = d_pos;
    a.scale = s->scale;
    a.chunk = pl.chunk;
    a.n_chunks = pl.n_chunks;
    a.sync = NULL;
    a.q8 = NULL;
    /* the FMA kernel finishes its rows itself when asked for Q8_1 rows: in one pass, or through
     * the counters (one per row group and KV head) instead of the combine pass */
    const bool fma = !tc && !dtc && !dec;
    const bool own = fma && d_q8 && ldo == (int64_t)s->n_head * s->head_dim && s->head_dim % 32 == 0 &&
                     (pl.n_chunks == 1 || (d_sync && (size_t)pl.n_rg * (size_t)s->n_head_kv <= n_sync));
    if (own) {
        a.q8 = (block_q8_1 *)d_q8;
        a.sync = pl.n_chunks > 1 ? (unsigned *)d_sync : NULL;
    }
    if (q8_done) *q8_done = own;
    cudaStream_t st = (cudaStream_t)stream;
    if (tc) {
        int64_t chunk = np;
        const int64_t blocks = st_cdiv(T * G, ST_ATTN_TC_BM) * s->n_head_kv;
        pl.n_chunks = st_attn_tc_chunks(blocks, np, T, s, ws_bytes, st_attn_sm_count(), &chunk);
        pl.chunk = (int)chunk;
        pl.rpw = 16; /* marks the tensor-core kernel */
        pl.n_rg = (int)st_cdiv(T * G, ST_ATTN_TC_BM);
        pl.smem = st_attn_tc_smem(s->head_dim);
        pl.ws_bytes = pl.n_chunks > 1 ? (size_t)pl.n_chunks * st_attn_part_bytes(s, T) : 0;
        if (plan_out) *plan_out = pl;
        a.chunk = pl.chunk;
        a.n_chunks = pl.n_chunks;
        const int split = s->tc == 2 || s->tc < 0; /* auto (-1) is split */
        ST_TRY(s->head_dim == 64 ? st_attn_tc_launch<64>(a, s->n_head_kv, split, st)
                                 : st_attn_tc_launch<128>(a, s->n_head_kv, split, st));
    } else if (dtc) {
        const int split = s->tc != 1; /* single f16 operands only when asked (tc 1) */
        ST_TRY(s->head_dim == 64 ? st_attn_dtc_launch<64>(a, s->n_head_kv, split, st)
                                 : st_attn_dtc_launch<128>(a, s->n_head_kv, split, st));
    } else if (dec)
        ST_TRY(st_attn_dec_dispatch(s->head_dim, kv->type == STRATA_TYPE_F16, a, s->n_head_kv, st));
    else
        ST_TRY(st_attn_dispatch(s->head_dim, kv->type == STRATA_TYPE_F16, a, pl, s->n_head_kv, st));
    if (pl.n_chunks > 1 && !a.sync) {
        /* the decode kernels' combine writes the Q8_1 rows too (row t * n_head + h: ldo must be
         * the packed n_head * head_dim, as the quantize launch it replaces reads the output) */
        block_q8_1 *cq8 = NULL;
        if (ST_ATTN_COMBINE_Q8 && (dtc || dec) && d_q8 && ldo == (int64_t)s->n_head * s->head_dim &&
            s->head_dim % 32 == 0) {
            cq8 = (block_q8_1 *)d_q8;
            if (q8_done) *q8_done = 1;
        }
        const dim3 grid((unsigned)(T * s->n_head), (unsigned)(s->head_dim / 32));
        st_launch(st_k_attn_combine, grid, ST_ATTN_COMBINE_THREADS, 0, st,
            (const float *)d_ws, pl.n_chunks, s->head_dim, s->n_head, d_out, ldo, cq8);
        ST_CUDA_CHECK_LAUNCH("st_k_attn_combine");
    }
    return STRATA_OK;
}

strata_status st_cuda_attention_ex(const st_cuda_kv_layer *kv, const st_cuda_attn_shape *s,
                                   const float *d_q, int64_t ldq, int64_t T, int64_t pos0,
                                   const int32_t *d_pos, float *d_out, int64_t ldo, void *d_ws, size_t ws_bytes,
                                   void *stream, int target_blocks, int rpw_force, st_attn_plan *plan_out) {
    return st_attn_go(kv, s, d_q, ldq, T, pos0, d_pos, d_out, ldo, d_ws, ws_bytes, stream, target_blocks,
                      rpw_force, plan_out, NULL, NULL, 0, NULL);
}

extern "C" strata_status st_cuda_attention(const st_cuda_kv_layer *kv, const st_cuda_attn_shape *s,
                                           const float *d_q, int64_t ldq, int64_t T, int64_t pos0,
                                           const int32_t *d_pos, float *d_out, int64_t ldo,
                                           void *d_ws, size_t ws_bytes, void *stream) {
    return st_attn_go(kv, s, d_q, ldq, T, pos0, d_pos, d_out, ldo, d_ws, ws_bytes, stream, 0, 0, NULL, NULL,
                      NULL, 0, NULL);
}

extern "C" strata_status st_cuda_attention_q8(const st_cuda_kv_layer *kv, const st_cuda_attn_shape *s,
                                              const float *d_q, int64_t ldq, int64_t T, int64_t pos0,
                                              const int32_t *d_pos, float *d_out, int64_t ldo, void *d_ws,
                                              size_t ws_bytes, void *d_q8, uint32_t *d_sync, size_t n_sync,
                                              int *q8_done, void *stream) {
    if (q8_done) *q8_done = 0;
    if (!d_q8 || !q8_done || ((uintptr_t)d_q8 & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_attention_q8: NULL or unaligned q8, or no q8_done");
    return st_attn_go(kv, s, d_q, ldq, T, pos0, d_pos, d_out, ldo, d_ws, ws_bytes, stream, 0, 0, NULL, d_q8,
                      d_sync, n_sync, q8_done);
}
