/* attn.cu - the GPU KV cache store and causal GQA attention (cuda_ops.h): the FMA kernels, the
 * combine pass, the plan and the dispatch; the kernel shape and the plan are described in
 * attn.cuh, the tensor-core kernels live in attn_tc.cu.
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
    /* a sliding window: the block's first row sees nothing before lo, so the walk starts at the
     * tile that holds lo (tiles stay aligned to c0) */
    int64_t cs = c0;
    if (a.window > 0) {
        const int64_t lo = pos0 + r_first / G - a.window + 1;
        if (lo > c0) cs = c0 + (lo - c0) / ST_ATTN_TILE * ST_ATTN_TILE;
    }
    /* A decode-sized call (one row group): the chunk's K and V rows before pos0 (written by
     * earlier steps; the kernels this one waits for store pos0 on) start towards L2 before
     * griddepcontrol.wait, as in st_k_attn_dtc. */
    if (ST_ATTN_DTC_EARLY && gridDim.x == 1) {
        const char *Kb = (const char *)a.k + (size_t)hk * (size_t)a.n_ctx * HD * ES;
        const char *Vb = (const char *)a.v + (size_t)hk * (size_t)a.n_ctx * HD * ES;
        const int64_t q1 = min(c1, pos0);
        constexpr int LPP = HD * ES / 128; /* 128-byte lines a position */
        for (int64_t i = threadIdx.x; cs < q1 && i < (q1 - cs) * LPP; i += ST_ATTN_THREADS) {
            const size_t off = (size_t)cs * HD * ES + (size_t)i * 128;
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

    for (int64_t pb = cs; pb < c1; pb += TL) {
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
            const bool valid = p < c1 && p <= lim[j] && (a.window <= 0 || p > lim[j] - a.window);
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
            /* every row sees its own position, so l > 0 */
            float o[ND];
            if (a.sinks) {
                const float sk = a.sinks[h];
#pragma unroll
                for (int dd = 0; dd < ND; dd++) o[dd] = st_attn_sink_div(acc[j][dd], m[j], l[j], sk);
            } else {
#pragma unroll
                for (int dd = 0; dd < ND; dd++) o[dd] = __fdiv_rn(acc[j][dd], l[j]);
            }
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
        const float sk = a.sinks ? a.sinks[h] : -INFINITY;
        if (a.sinks) M = fmaxf(M, sk); /* the sink joins the maximum and, below, the sum */
        float L = 0.0f, o[ND];
#pragma unroll
        for (int dd = 0; dd < ND; dd++) o[dd] = 0.0f;
        for (int c0 = 0; c0 < a.n_chunks; c0 += 32) {
            const int cl = c0 + lane;
            float wl = 0.0f, ll = 0.0f; /* chunk cl's weight (0: empty; M is finite: some chunk
                                         * holds the row's own position) and sum */
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
        if (a.sinks) L += expf(sk - M);
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
                  int64_t ldo, block_q8_1 *q8, const float *__restrict__ sinks) {
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
    if (sinks) M = fmaxf(M, sinks[h]); /* the sink joins the maximum and, below, the sum */
    for (int c = tid; c < n_chunks; c += ST_ATTN_COMBINE_THREADS) {
        const float m = Ws[c];
        Ws[c] = m == -INFINITY ? 0.0f : expf(m - M); /* M is finite: a chunk holds the row's position */
    }
    __syncthreads();
    if (warp == 0) {
        float L = 0.0f;
        for (int c = lane; c < n_chunks; c += 32) L = fmaf(Lc[c], Ws[c], L);
        L = st_warp_sum_f(L);
        if (sinks) L += expf(sinks[h] - M);
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
    if (rpw_force == 0 && pl.rpw == 4 && st_attn_smem_bytes(s->head_dim, 4) > st_cuda_smem_limit())
        pl.rpw = 1; /* head_dim 256 on a device under 100 KiB a block (sm_86 / sm_89) */
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
    if (s->head_dim != 64 && s->head_dim != 128 && s->head_dim != 256) return 0;
    return st_attn_smem_bytes(s->head_dim, 1) <= st_cuda_smem_limit(); /* the FMA kernel, 1 row a warp */
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
        for (int64_t t = st_cdiv(ST_ATTN_TC_MIN_ROWS, G); t <= T; t++) {
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
    const size_t lim = st_cuda_smem_limit(); /* a free plan passes over kernels the device cannot hold */
    if (s->window > 0 || s->sinks) return ST_ATTN_K_FMA; /* the one kernel that takes them */
    if (mma_ok && R <= ST_ATTN_DTC_ROWS &&
        (rpw_force == 32 || (free_plan && s->tc != 0 && np >= ST_ATTN_DTC_MIN_NP && st_attn_dtc_smem(s->head_dim) <= lim)))
        return ST_ATTN_K_DTC;
    if (R <= ST_ATTN_DEC_ROWS &&
        (rpw_force == -1 || (free_plan && np >= ST_ATTN_DEC_MIN_NP && st_attn_dec_smem(s->head_dim) <= lim)))
        return ST_ATTN_K_DEC;
    if (mma_ok && (rpw_force == 16 || (free_plan && R >= ST_ATTN_TC_MIN_ROWS && s->tc != 0 &&
                                       st_attn_tc_smem(s->head_dim) <= lim)))
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
    if (!isfinite(s->scale) || s->window < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: scale %g, window %d", fn, (double)s->scale,
                        (int)s->window);
    if ((s->window > 0 || s->sinks) && (rpw_force > 4 || rpw_force < 0))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: a sliding window or sinks take the FMA kernel "
                        "st_k_attn only (forced kernel %d)", fn, rpw_force);
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
    const size_t need = tc ? st_attn_tc_smem(s->head_dim) : pl.smem;
    if (need > st_cuda_smem_limit())
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: head_dim %d needs %zu bytes of shared memory a block, "
                        "this GPU allows %zu (docs/OLDER_GPUS.md)", fn, (int)s->head_dim, need,
                        st_cuda_smem_limit());
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
    a.window = s->window;
    a.sinks = s->sinks;
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
        const st_attn_tc_prec prec = s->tc == 1 ? ST_ATTN_TC_SINGLE /* auto (-1) and 2: both split */
                                     : s->tc == 3 ? ST_ATTN_TC_SPLIT_P : ST_ATTN_TC_SPLIT_QP;
        ST_TRY(st_attn_tc_run(a, s->head_dim, s->n_head_kv, prec, st));
    } else if (dtc) { /* single f16 operands only when asked (tc 1) */
        const st_attn_tc_prec prec = s->tc == 1 ? ST_ATTN_TC_SINGLE : ST_ATTN_TC_SPLIT_QP;
        ST_TRY(st_attn_dtc_run(a, s->head_dim, s->n_head_kv, prec, st));
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
            (const float *)d_ws, pl.n_chunks, s->head_dim, s->n_head, d_out, ldo, cq8, s->sinks);
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
