/* mmq.cu - the prefill matrix family (cuda_mmq.h): the tensor-core tile kernel described in
 * mmq.cuh, its dense entry points (st_cuda_mmq, st_cuda_mmq_swiglu) and the grouped-expert path
 * of st_cuda_moe_ffn for large batches (plan on the device, gate/up tiles, down tiles).
 * Dispatch: st_mmq_launch over the weight type is the one switch. */
#include "mmq.cuh"
#include "cuda_mmq.h"
#include "mma.cuh"
#include "det_expf.h"

#include <type_traits>

/* 1 (the default): grouped calls with expert biases or gpt-oss's activation take the tiles
 * (mmq.cuh); 0 (-DSTRATA_MMQ_OAI=0): they keep the GEMV path, as before the tiles took them. */
#ifndef STRATA_MMQ_OAI
#define STRATA_MMQ_OAI 1
#endif


/* ---- one 32-weight chunk of a row: quants and scales ------------------------------------------ */

/* A decoded chunk as the tiles take it: 32 values q (exact in f16) with weight k = sc[k / 16] *
 * q[k] + mn, so that a chunk's dot with q8 activations (scale dx, quants qx, sums sx[2] of its
 * two halves) is dx * (sc[0] (q . qx)[0:16] + sc[1] (q . qx)[16:32] + mn (sx[0] + sx[1])): the
 * GEMV's dp4a formula, with the integer parts computed exactly by f16 mma (products of integers
 * below 2^11, sums below 2^24 in f32). */
struct st_mq_chunk {
    uint32_t h[16];   /* the 32 q as half2 pairs (k, k + 1) */
    float sc[2], mn;
};


/* W::fetch / W::finish where the type has them (moe.cuh: Q8_0, Q4_K), else fetch = W::load with
 * its result kept in the raw words and finish = unpacking them (the decode then happens at fetch
 * time: correct, only less overlapped). */
template <class W, class = void> struct st_has_fetch { static constexpr bool value = false; };
template <class W> struct st_has_fetch<W, decltype((void)&W::fetch)> { static constexpr bool value = true; };

template <class W>
static __device__ __forceinline__ void st_w_fetch(const uint8_t *row, int64_t c, st_wraw &r) {
    if constexpr (st_has_fetch<W>::value) {
        W::fetch(row, c, r);
    } else {
        st_w32 w;
        W::load(row, c, w);
#pragma unroll
        for (int i = 0; i < 8; i++) r.q[i] = (uint32_t)w.q[i];
        r.s[0] = __float_as_uint(w.s0);
        r.s[1] = __float_as_uint(w.s1);
        r.s[2] = __float_as_uint(w.m);
        r.s[3] = 0u;
    }
}

template <class W>
static __device__ __forceinline__ void st_w_finish(const st_wraw &r, int64_t c, st_w32 &w) {
    if constexpr (st_has_fetch<W>::value) {
        W::finish(r, c, w);
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) w.q[i] = (int)r.q[i];
        w.s0 = __uint_as_float(r.s[0]);
        w.s1 = __uint_as_float(r.s[1]);
        w.m = __uint_as_float(r.s[2]);
    }
}

/* Types with a dp4a decoder (moe.cuh): q = the signed bytes, sc = s0 / s1, mn = m. chunk() is
 * fetch + finish in one; the int8 kernel calls them a step apart (its stage holds the words). */
template <class W>
struct st_mq_w32 {
    static constexpr bool SPLIT = W::SPLIT, INT8 = true;
    using stage_t = st_wraw;
    using W_t = W;
    static __device__ __forceinline__ void to_chunk(const st_w32 &w, st_mq_chunk &o) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int v = w.q[i];
            o.h[2 * i] = st_h2((float)(int8_t)v, (float)(int8_t)(v >> 8));
            o.h[2 * i + 1] = st_h2((float)(int8_t)(v >> 16), (float)(int8_t)(v >> 24));
        }
        o.sc[0] = w.s0;
        o.sc[1] = W::SPLIT ? w.s1 : w.s0;
        o.mn = W::HAS_M ? w.m : 0.0f;
    }
    static __device__ __forceinline__ void chunk(const uint8_t *row, int64_t c, st_mq_chunk &o) {
        st_w32 w;
        W::load(row, c, w);
        to_chunk(w, o);
    }
    static __device__ __forceinline__ void fetch(const uint8_t *row, int64_t c, st_wraw &r) {
        st_w_fetch<W>(row, c, r);
    }
    static __device__ __forceinline__ void finish(const st_wraw &r, int64_t c, st_mq_chunk &o) {
        st_w32 w;
        st_w_finish<W>(r, c, w);
        to_chunk(w, o);
    }
};

/* The other types through their dequant.cuh decoders: q = the weight itself (rounded to f16 in
 * the tile: relative 2^-11, the one inexact step of the tiles), sc = 1, mn = 0. */
template <class D>
struct st_mq_fb {
    static constexpr bool SPLIT = false, INT8 = false; /* not integers: no int8 tiles */
    using stage_t = st_mq_chunk; /* decoded at fetch time */
    static __device__ __forceinline__ void chunk(const uint8_t *row, int64_t c, st_mq_chunk &o) {
        float v[32];
        st_fb_chunk<D>(row, c, v);
#pragma unroll
        for (int j = 0; j < 16; j++) o.h[j] = st_h2(v[2 * j], v[2 * j + 1]);
        o.sc[0] = o.sc[1] = 1.0f;
        o.mn = 0.0f;
    }
    static __device__ __forceinline__ void fetch(const uint8_t *row, int64_t c, st_mq_chunk &r) { chunk(row, c, r); }
    static __device__ __forceinline__ void finish(const st_mq_chunk &r, int64_t c, st_mq_chunk &o) {
        (void)c;
        o = r;
    }
};

/* ---- activations: f32 rows -> q8 quants, scales and half sums ---------------------------------- */

/* Each block of 32 values quantized as the GEMV's q8_1 (and the CPU's q8_0): d = amax / 127,
 * q = round(x / d); the tiles take q as f16 (exact), d as fp16(d) (the value the GEMV's dot
 * uses) and the sums of q over each 16. One warp per block, lane = value. Rows of K (a multiple
 * of 32) floats ldx apart -> rows of K quants, K / 32 scales and K / 16 sums, contiguous. */
static __global__ void __launch_bounds__(256)
st_k_mq_act(const float *__restrict__ x, int64_t ldx, int64_t rows, int64_t K, st_mq_act_rows o) {
    st_pdl_enter();
    const int64_t nb = K / 32, w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = (int)(threadIdx.x & 31);
    if (w >= rows * nb) return; /* whole warps */
    const int64_t r = w / nb, b = w - r * nb;
    const float v = x[r * ldx + 32 * b + lane];
    float amax = fabsf(v);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float d = amax / 127.0f;
    const float q = amax == 0.0f ? 0.0f : roundf(v / d);
    float sq = q;
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, off); /* per half */
    o.q[r * K + 32 * b + lane] = __float2half_rn(q);
    o.q8[r * K + 32 * b + lane] = (int8_t)(int)q;
    if (lane == 0) o.d[r * nb + b] = __half2float(__float2half_rn(d));
    if ((lane & 15) == 0) o.s[r * 2 * nb + 2 * b + (lane >> 4)] = sq;
}

/* The same values four to a thread (8 threads a block, a warp 4 blocks): one 16-byte load and
 * one 4-byte store of quants per thread, the block's amax over 8 lanes and each 16's sum over 4
 * (max and integer sums: the same bits in any order). F16: also the f16 quants, which only the
 * f16 tiles read (the int8 tiles take q8). Rows 16-byte aligned (x, ldx % 4 == 0). */
template <bool F16>
static __global__ void __launch_bounds__(256)
st_k_mq_act4(const float *__restrict__ x, int64_t ldx, int64_t rows, int64_t K, st_mq_act_rows o) {
    st_pdl_enter();
    const int64_t nb = K / 32, g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, w = g >> 3;
    const int l8 = (int)(threadIdx.x & 7);
    if (w >= rows * nb) return; /* whole groups of 8 lanes; the shuffles stay inside a group */
    const unsigned gm = 0xFFu << (threadIdx.x & 24);
    const int64_t r = w / nb, b = w - r * nb;
    const float4 v = __ldg((const float4 *)(x + r * ldx + 32 * b) + l8);
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int off = 4; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(gm, amax, off));
    const float d = amax / 127.0f;
    const float q0 = amax == 0.0f ? 0.0f : roundf(v.x / d), q1 = amax == 0.0f ? 0.0f : roundf(v.y / d);
    const float q2 = amax == 0.0f ? 0.0f : roundf(v.z / d), q3 = amax == 0.0f ? 0.0f : roundf(v.w / d);
    float sq = (q0 + q1) + (q2 + q3);
#pragma unroll
    for (int off = 2; off > 0; off >>= 1) sq += __shfl_xor_sync(gm, sq, off); /* per 16 */
    const int64_t e = r * K + 32 * b + 4 * l8;
    *(uint32_t *)(o.q8 + e) = (uint32_t)(uint8_t)(int8_t)(int)q0 | (uint32_t)(uint8_t)(int8_t)(int)q1 << 8 |
                              (uint32_t)(uint8_t)(int8_t)(int)q2 << 16 | (uint32_t)(uint8_t)(int8_t)(int)q3 << 24;
    if (F16) {
        const __half2 h01 = __floats2half2_rn(q0, q1), h23 = __floats2half2_rn(q2, q3);
        *(uint2 *)(o.q + e) = make_uint2(*(const uint32_t *)&h01, *(const uint32_t *)&h23);
    }
    if (l8 == 0) o.d[r * nb + b] = __half2float(__float2half_rn(d));
    if ((l8 & 3) == 0) o.s[r * 2 * nb + 2 * b + (l8 >> 2)] = sq;
}

/* The four arrays of rows x K activations carved from one buffer (256-byte sections). */
static size_t st_mq_act_bytes(int64_t rows, int64_t K) {
    return st_round_up((size_t)rows * (size_t)K * sizeof(__half), 256) +
           st_round_up((size_t)rows * (size_t)(K / 32) * sizeof(float), 256) +
           st_round_up((size_t)rows * (size_t)(K / 16) * sizeof(float), 256) +
           st_round_up((size_t)rows * (size_t)K, 256);
}

static st_mq_act_rows st_mq_act_carve(void *base, int64_t rows, int64_t K) {
    st_mq_act_rows o;
    uint8_t *p = (uint8_t *)base;
    o.q = (__half *)p;
    p += st_round_up((size_t)rows * (size_t)K * sizeof(__half), 256);
    o.d = (float *)p;
    p += st_round_up((size_t)rows * (size_t)(K / 32) * sizeof(float), 256);
    o.s = (float *)p;
    p += st_round_up((size_t)rows * (size_t)(K / 16) * sizeof(float), 256);
    o.q8 = (int8_t *)p;
    o.K = K;
    return o;
}

/* f16: the f16 quants are wanted too (a call that may take the f16 tiles, st_mq_act_f16) */
static strata_status st_mq_act(const float *x, int64_t ldx, int64_t rows, int64_t K,
                               const st_mq_act_rows &o, cudaStream_t s, bool f16 = true) {
    if (((uintptr_t)x & 15) == 0 && ldx % 4 == 0) {
        const unsigned grid = st_cuda_grid(rows * (K / 32) * 8, 256);
        if (f16) st_launch(st_k_mq_act4<true>, grid, 256, 0, s, x, ldx, rows, K, o);
        else st_launch(st_k_mq_act4<false>, grid, 256, 0, s, x, ldx, rows, K, o);
        ST_CUDA_CHECK_LAUNCH("st_k_mq_act4");
        return STRATA_OK;
    }
    st_launch(st_k_mq_act, st_cuda_grid(rows * (K / 32) * 32, 256), 256, 0, s, x, ldx, rows, K, o);
    ST_CUDA_CHECK_LAUNCH("st_k_mq_act");
    return STRATA_OK;
}

/* A chunk's 32 halves (16 half2 words) to a 16-byte aligned shared address. */
static __device__ __forceinline__ void st_mq_store32(__half *dst, const uint32_t h[16]) {
    uint4 *d = (uint4 *)dst;
#pragma unroll
    for (int j = 0; j < 4; j++) d[j] = make_uint4(h[4 * j], h[4 * j + 1], h[4 * j + 2], h[4 * j + 3]);
}

/* ---- the tile kernel ------------------------------------------------------------------------- */

/* gpt-oss's outputs (biases, clamped SwiGLU) out of line: the plain SwiGLU tiles keep their
 * registers. */
static __device__ __noinline__ float st_mmq_glu_oai(const float *b0, const float *b1, size_t i, int oai,
                                                     float g, float u) {
    if (b0) g = __fadd_rn(g, __ldg(b0 + i));
    if (b1) u = __fadd_rn(u, __ldg(b1 + i));
    return oai ? st_det_swiglu_oai(g, u) : g / (1.0f + expf(-g)) * u;
}

/* A GLU output from its gate and up sums g, u: output r of expert e, with the call's biases and
 * activation as the GEMV path's st_moe_row_out (moe.cu); with neither, silu(g) * u as always. */
static __device__ __forceinline__ float st_mmq_glu_out(const st_mmq_args &a, int e, int64_t r, float g, float u) {
    if (a.b0 || a.b1 || a.oai) return st_mmq_glu_oai(a.b0, a.b1, (size_t)e * (size_t)a.N + (size_t)r, a.oai, g, u);
    return g / (1.0f + expf(-g)) * u;
}

/* The expert of a grouped tile whose call has biases (their rows), else 0. */
static __device__ __forceinline__ int st_mmq_tile_expert(const st_mmq_args &a) {
    return a.tiles && (a.b0 || a.b1) ? a.tiles[blockIdx.y].e : 0;
}

/* A plain output y of weight row r of expert e, with the down bias where the call has one. */
static __device__ __forceinline__ float st_mmq_plain_out(const st_mmq_args &a, int e, int64_t r, float y) {
    return a.b0 ? __fadd_rn(y, __ldg(a.b0 + (size_t)e * (size_t)a.N + (size_t)r)) : y;
}

/* Per-row scales of one step (64 weights = 2 chunks = 4 sixteens) in shared memory. */
struct st_mq_wscale {
    float sc[ST_MMQ_BN][4], mn[ST_MMQ_BN][4];
};

/* MODE: ST_MMQ_PLAIN (y = W x), ST_MMQ_GLU_FUSED (silu(Wg x) * (Wu x): a second matrix, 64
 * outputs per tile, two accumulator sets: 194 registers, 2 blocks per SM) or ST_MMQ_GLU_PAIRED
 * (the same function with the plain kernel's registers: tile rows 0-31 are gate rows, 32-63 the
 * up rows of the same 32 outputs; the epilogue pairs them). Every output's sums are the same
 * operations in the same order in both GLU modes, so they agree bit for bit. */
template <class C, int MODE>
static __global__ void __launch_bounds__(ST_MMQ_THREADS, MODE == ST_MMQ_GLU_FUSED ? 2 : 3)
st_k_mmq(const st_mmq_args a) {
    st_pdl_enter();
    constexpr bool GLU = MODE == ST_MMQ_GLU_FUSED, PAIR = MODE == ST_MMQ_GLU_PAIRED;
    constexpr int LDS = ST_MMQ_LDS, LDC = ST_MMQ_LDC;
    /* Xs, Ws (and Us) during the steps; Cs over Xs and Ws in the epilogue */
    constexpr int TILE_B = ST_MMQ_BM * LDS * (int)sizeof(__half);
    static_assert(ST_MMQ_BM * LDC * (int)sizeof(float) <= 2 * TILE_B, "Cs fits over Xs and Ws");
    __shared__ __align__(128) unsigned char st_mq_smem[(GLU ? 3 : 2) * TILE_B];
    __half *Xs = (__half *)st_mq_smem;                        /* activation quants [row][k] */
    __half *Ws = (__half *)(st_mq_smem + TILE_B);             /* weight quants [row][k] (gate) */
    __half *Us = (__half *)(st_mq_smem + (GLU ? 2 : 1) * TILE_B); /* up (GLU) */
    float *Cs = (float *)st_mq_smem;                          /* results [act row][weight row] */
    __shared__ float Xd[ST_MMQ_BM][2], Xsum[ST_MMQ_BM][4];    /* activation scales, half sums */
    __shared__ st_mq_wscale Wsc[GLU ? 2 : 1];

    int64_t start;
    int count;
    const uint8_t *w0, *w1 = NULL;
    size_t rb0, rb1 = 0;
    if (a.tiles) {
        if ((int)blockIdx.y >= *a.n_tiles) return;
        const st_mmq_tile t = a.tiles[blockIdx.y];
        start = t.start;
        count = t.count;
        const st_cuda_expert *ex = a.table + t.e;
        const st_cuda_mat *m0 = a.which == 2 ? &ex->down : &ex->gate;
        w0 = (const uint8_t *)m0->data;
        rb0 = m0->row_bytes;
        if (GLU || PAIR) {
            w1 = (const uint8_t *)ex->up.data;
            rb1 = ex->up.row_bytes;
        }
    } else {
        start = (int64_t)blockIdx.y * ST_MMQ_BM;
        count = (int)min((int64_t)ST_MMQ_BM, a.T - start);
        w0 = a.w0;
        rb0 = a.rb0;
        w1 = a.w1;
        rb1 = a.rb1;
    }
    /* PAIR: outputs oc0 .. oc0 + 31 (gate rows in tile rows 0-31, up rows in 32-63) */
    const int64_t r0 = (int64_t)blockIdx.x * ST_MMQ_BN, oc0 = (int64_t)blockIdx.x * (ST_MMQ_BN / 2);
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int lr = tid >> 1, hf = tid & 1; /* this thread loads row lr, chunk hf of each step */
    const int64_t nch = a.K / 32;

    int64_t src = -1; /* this thread's activation row */
    if (lr < count) src = a.x_order ? (int64_t)(a.x_order[start + lr] / a.k_div) : start + lr;
    const uint8_t *wrow0 = NULL, *wrow1 = NULL;
    if (PAIR) {
        const int64_t r = oc0 + (lr & 31);
        if (r < a.N) wrow0 = lr < 32 ? w0 + (size_t)r * rb0 : w1 + (size_t)r * rb1;
    } else if (r0 + lr < a.N) {
        wrow0 = w0 + (size_t)(r0 + lr) * rb0;
        if (GLU) wrow1 = w1 + (size_t)(r0 + lr) * rb1;
    }

    const int wm = warp >> 1, wn = warp & 1; /* this warp's 32 x 32 quarter */
    const int g = lane >> 2, tq = lane & 3;  /* mma fragment coordinates */
    float acc[2][4][4], accu[GLU ? 2 : 1][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                acc[mi][ni][e] = 0.0f;
                if (GLU) accu[mi][ni][e] = 0.0f;
            }

    __half *xd = Xs + lr * LDS + hf * 32, *wd = Ws + lr * LDS + hf * 32;
    __half *ud = Us + (GLU ? lr * LDS + hf * 32 : 0);
    for (int64_t c0 = 0; c0 < nch; c0 += 2) {
        const int64_t c = c0 + hf;
        const bool in = c < nch;
        /* activations: quants, scale, half sums (zero outside the rows and the chunks) */
        {
            const uint4 z = make_uint4(0u, 0u, 0u, 0u);
            const bool ok = src >= 0 && in;
            const uint4 *p = (const uint4 *)(a.act.q + (ok ? src * a.K + 32 * c : 0));
#pragma unroll
            for (int j = 0; j < 4; j++) ((uint4 *)xd)[j] = ok ? __ldg(p + j) : z;
            Xd[lr][hf] = ok ? __ldg(a.act.d + src * nch + c) : 0.0f;
            Xsum[lr][2 * hf] = ok ? __ldg(a.act.s + src * 2 * nch + 2 * c) : 0.0f;
            Xsum[lr][2 * hf + 1] = ok ? __ldg(a.act.s + src * 2 * nch + 2 * c + 1) : 0.0f;
        }
        /* weights: quants and per-16 scales (a chunk outside is zero with zero scales) */
        {
            st_mq_chunk ch;
            if (wrow0 && in) {
                C::chunk(wrow0, c, ch);
            } else {
#pragma unroll
                for (int j = 0; j < 16; j++) ch.h[j] = 0u;
                ch.sc[0] = ch.sc[1] = ch.mn = 0.0f;
            }
            st_mq_store32(wd, ch.h);
            Wsc[0].sc[lr][2 * hf] = ch.sc[0];
            Wsc[0].sc[lr][2 * hf + 1] = ch.sc[1];
            Wsc[0].mn[lr][2 * hf] = Wsc[0].mn[lr][2 * hf + 1] = ch.mn;
            if (GLU) {
                if (wrow1 && in) {
                    C::chunk(wrow1, c, ch);
                } else {
#pragma unroll
                    for (int j = 0; j < 16; j++) ch.h[j] = 0u;
                    ch.sc[0] = ch.sc[1] = ch.mn = 0.0f;
                }
                st_mq_store32(ud, ch.h);
                Wsc[GLU ? 1 : 0].sc[lr][2 * hf] = ch.sc[0];
                Wsc[GLU ? 1 : 0].sc[lr][2 * hf + 1] = ch.sc[1];
                Wsc[GLU ? 1 : 0].mn[lr][2 * hf] = Wsc[GLU ? 1 : 0].mn[lr][2 * hf + 1] = ch.mn;
            }
        }
        __syncthreads();
        /* slices of 16 (types whose two chunk halves have their own scales) or 32 (one scale
         * per chunk: the two 16-deep products are summed first, still exact integers, and scaled
         * once, as the GEMV's dp4a dot does) */
        constexpr int SL = C::SPLIT ? 1 : 2;
#pragma unroll 1
        for (int ks0 = 0; ks0 < 4; ks0 += SL) { /* not unrolled: registers */
            uint32_t af[SL][2][4];
#pragma unroll
            for (int j = 0; j < SL; j++)
#pragma unroll
                for (int mi = 0; mi < 2; mi++)
                    st_ldsm_x4(af[j][mi], Xs + (wm * 32 + mi * 16 + (lane & 15)) * LDS + (ks0 + j) * 16 +
                                              (lane >> 4) * 8);
            float dx[2][2], sx[2][2]; /* [mi][row g / g + 8] */
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = wm * 32 + mi * 16 + g + 8 * h;
                    dx[mi][h] = Xd[r][ks0 >> 1];
                    sx[mi][h] = SL == 2 ? Xsum[r][ks0] + Xsum[r][ks0 + 1] : Xsum[r][ks0];
                }
#pragma unroll
            for (int mat = 0; mat < (GLU ? 2 : 1); mat++) {
                const __half *Bs = mat == 0 ? Ws : Us;
#pragma unroll
                for (int np = 0; np < 2; np++) { /* pairs of n8 tiles */
                    uint32_t bf[SL][4];
#pragma unroll
                    for (int j = 0; j < SL; j++)
                        st_ldsm_x4(bf[j], Bs + (wn * 32 + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS +
                                              (ks0 + j) * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
                    for (int nn = 0; nn < 2; nn++) {
                        const int ni = np * 2 + nn;
                        const int n = wn * 32 + ni * 8 + 2 * tq;
                        const float sw0 = Wsc[mat].sc[n][ks0], sw1 = Wsc[mat].sc[n + 1][ks0];
                        const float mw0 = Wsc[mat].mn[n][ks0], mw1 = Wsc[mat].mn[n + 1][ks0];
#pragma unroll
                        for (int mi = 0; mi < 2; mi++) {
                            float cc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                            for (int j = 0; j < SL; j++) st_mma16816(cc, af[j][mi], bf[j][2 * nn], bf[j][2 * nn + 1]);
                            float *A = mat == 0 ? acc[mi][ni] : accu[GLU ? mi : 0][ni];
                            A[0] = fmaf(dx[mi][0], fmaf(sw0, cc[0], mw0 * sx[mi][0]), A[0]);
                            A[1] = fmaf(dx[mi][0], fmaf(sw1, cc[1], mw1 * sx[mi][0]), A[1]);
                            A[2] = fmaf(dx[mi][1], fmaf(sw0, cc[2], mw0 * sx[mi][1]), A[2]);
                            A[3] = fmaf(dx[mi][1], fmaf(sw1, cc[3], mw1 * sx[mi][1]), A[3]);
                        }
                    }
                }
            }
        }
        __syncthreads();
    }

    /* epilogue: (silu(gate) * up), staged through shared memory, written within bounds */
    const int ex_id = st_mmq_tile_expert(a); /* (read here: no register held over the steps) */
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = acc[mi][ni][e];
                const int r = wm * 32 + mi * 16 + g + 8 * (e >> 1), n = wn * 32 + ni * 8 + 2 * tq + (e & 1);
                if (GLU) /* (columns past N are never written: no bias read there) */
                    v = r0 + n < a.N ? st_mmq_glu_out(a, ex_id, r0 + n, v, accu[GLU ? mi : 0][ni][e]) : 0.0f;
                Cs[r * LDC + n] = v;
            }
    __syncthreads();
    if (PAIR) { /* output col of row i: silu(gate) * up from tile columns col and 32 + col */
        constexpr int HB = ST_MMQ_BN / 2;
        const int ncol = (int)min((int64_t)HB, a.N - oc0);
        for (int idx = tid; idx < ST_MMQ_BM * HB; idx += ST_MMQ_THREADS) {
            const int i = idx / HB, col = idx - i * HB;
            if (i < count && col < ncol) {
                const int64_t orow = a.y_order ? (int64_t)a.y_order[start + i] : start + i;
                a.y[orow * a.ldy + oc0 + col] = st_mmq_glu_out(a, ex_id, oc0 + col, Cs[i * LDC + col],
                                                               Cs[i * LDC + HB + col]);
            }
        }
        return;
    }
    /* GLU: Cs holds the finished outputs (the gate and up biases went in above, and b0 is the
     * gate's bias, not an output's); plain: y plus the down bias */
    const int ncol = (int)min((int64_t)ST_MMQ_BN, a.N - r0);
    for (int idx = tid; idx < ST_MMQ_BM * ST_MMQ_BN; idx += ST_MMQ_THREADS) {
        const int i = idx / ST_MMQ_BN, col = idx - i * ST_MMQ_BN;
        if (i < count && col < ncol) {
            const int64_t orow = a.y_order ? (int64_t)a.y_order[start + i] : start + i;
            const float v = Cs[i * LDC + col];
            a.y[orow * a.ldy + r0 + col] = GLU ? v : st_mmq_plain_out(a, ex_id, r0 + col, v);
        }
    }
}

/* ---- the int8 tile kernel --------------------------------------------------------------------- */

#define ST_MMQ_LDB (ST_MMQ_BK + 16) /* bytes per int8 shared row (16 of padding: ldmatrix rows hit
                                     * distinct 16-byte bank groups) */

/* The int8 tiles' weight scales of a step, slice-major ([slice of 16][weight row]), so that a
 * lane's two adjacent outputs n, n + 1 read theirs with one 8-byte load. */
struct st_mq_wscale8 {
    float sc[4][ST_MMQ_BN], mn[4][ST_MMQ_BN];
};

/* One thread's share of a step for the int8 tiles: 32 activation quants as bytes, their scale and
 * half sums, the raw words of its weight chunk. */
struct st_mq_stage8 {
    uint4 xq[2];
    float xd, xs0, xs1;
    st_wraw w;
    bool x_ok, w_in;
};

/* Q4_K's two chunks of a step share their 32 bytes of nibbles (low: the even chunk, high: the
 * odd one), which both lanes of a row loaded whole; in the int8 tiles each lane loads half
 * (16 bytes) and stores both chunks' quants of its half: a third fewer weight loads, the same
 * shared bytes and scales. */
#ifndef ST_MMQ_Q4K_PAIRS
#define ST_MMQ_Q4K_PAIRS 1 /* 0: both lanes load the whole 48 bytes (the A/B build) */
#endif
template <class C, class = void> struct st_mq_q4k_pairs { static constexpr bool value = false; };
template <class C>
struct st_mq_q4k_pairs<C, typename std::enable_if<C::INT8>::type> {
    static constexpr bool value = ST_MMQ_Q4K_PAIRS && std::is_same<typename C::W_t, st_w_q4_K>::value;
};

template <class C>
static __device__ __forceinline__ void st_mq_fetch8(const st_mmq_args &a, int64_t src, const uint8_t *wrow,
                                                    int64_t c, int64_t nch, st_mq_stage8 &o) {
    const bool in = c < nch, ok = src >= 0 && in;
    const int64_t r = ok ? src : 0, cc = ok ? c : 0;
    const uint4 *p = (const uint4 *)(a.act.q8 + r * a.K + 32 * cc);
    o.xq[0] = __ldg(p);
    o.xq[1] = __ldg(p + 1);
    o.xd = __ldg(a.act.d + r * nch + cc);
    const float2 sx = __ldg((const float2 *)(a.act.s + r * 2 * nch + 2 * cc)); /* 8-byte aligned */
    o.xs0 = sx.x;
    o.xs1 = sx.y;
    o.x_ok = ok;
    o.w_in = wrow && in;
    if (!o.w_in) return;
    if constexpr (st_mq_q4k_pairs<C>::value) { /* the header and this lane's half of the pair's nibbles */
        const uint8_t *blk = wrow + (c >> 3) * (int64_t)sizeof(block_q4_K);
        const uint8_t *qs = blk + 16 + 32 * ((c & 7) >> 1) + 16 * (c & 1);
        if (((uintptr_t)blk & 3) == 0) {
            st_ld_words<4>(blk, o.w.s);
            st_ld_words<4>(qs, o.w.q);
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                o.w.s[i] = st_ld_u32_a2(blk + 4 * i);
                o.w.q[i] = st_ld_u32_a2(qs + 4 * i);
            }
        }
    } else {
        C::fetch(wrow, c, o.w);
    }
}

/* The step's share into buffer (Xs, Ws: bytes, Xd, Xsum, Wsc): the quants as bytes, the scales
 * st_mq_w32::to_chunk gives the f16 tiles, value for value. The activation half and the weight
 * half apart: the tile copy's weights come by cp.async instead. */
static __device__ __forceinline__ void st_mq_put8_x(const st_mq_stage8 &o, int8_t *Xs, float (*Xd)[2],
                                                    float (*Xsum)[4], int lr, int hf) {
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    uint4 *xd = (uint4 *)(Xs + lr * ST_MMQ_LDB + hf * 32);
    xd[0] = o.x_ok ? o.xq[0] : z;
    xd[1] = o.x_ok ? o.xq[1] : z;
    Xd[lr][hf] = o.x_ok ? o.xd : 0.0f;
    Xsum[lr][2 * hf] = o.x_ok ? o.xs0 : 0.0f;
    Xsum[lr][2 * hf + 1] = o.x_ok ? o.xs1 : 0.0f;
}

template <class C>
static __device__ __forceinline__ void st_mq_put8(const st_mq_stage8 &o, int64_t c, int8_t *Xs, int8_t *Ws,
                                                  float (*Xd)[2], float (*Xsum)[4], st_mq_wscale8 &Wsc,
                                                  int lr, int hf) {
    using W = typename C::W_t;
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    st_mq_put8_x(o, Xs, Xd, Xsum, lr, hf);
    uint4 *wd = (uint4 *)(Ws + lr * ST_MMQ_LDB + hf * 32);
    float sc0 = 0.0f, sc1 = 0.0f, mn = 0.0f;
    if constexpr (st_mq_q4k_pairs<C>::value) { /* bytes 16 hf .. of the even chunk and of the odd one */
        uint4 *lo = (uint4 *)(Ws + lr * ST_MMQ_LDB + hf * 16), *hi = (uint4 *)(Ws + lr * ST_MMQ_LDB + 32 + hf * 16);
        if (o.w_in) {
            const uint32_t m4 = 0x0F0F0F0Fu;
            *lo = make_uint4(o.w.q[0] & m4, o.w.q[1] & m4, o.w.q[2] & m4, o.w.q[3] & m4);
            *hi = make_uint4((o.w.q[0] >> 4) & m4, (o.w.q[1] >> 4) & m4, (o.w.q[2] >> 4) & m4, (o.w.q[3] >> 4) & m4);
            W::scales(o.w, (int)(c & 7), sc0, mn);
            sc1 = sc0;
        } else {
            *lo = *hi = z;
        }
    } else if (o.w_in) {
        st_w32 w;
        st_w_finish<W>(o.w, c, w);
        wd[0] = make_uint4((uint32_t)w.q[0], (uint32_t)w.q[1], (uint32_t)w.q[2], (uint32_t)w.q[3]);
        wd[1] = make_uint4((uint32_t)w.q[4], (uint32_t)w.q[5], (uint32_t)w.q[6], (uint32_t)w.q[7]);
        sc0 = w.s0;
        sc1 = W::SPLIT ? w.s1 : w.s0;
        mn = W::HAS_M ? w.m : 0.0f;
    } else {
        wd[0] = wd[1] = z;
    }
    Wsc.sc[2 * hf][lr] = sc0;
    Wsc.sc[2 * hf + 1][lr] = sc1;
    Wsc.mn[2 * hf][lr] = Wsc.mn[2 * hf + 1][lr] = mn;
}

/* ---- the Q8_0 tile copy (cuda_mmq.h) ---------------------------------------------------------- */

/* Rows of the copy's scale array: ne1 rounded up to 8, so that 8 rows' scales are 16 bytes. */
static __host__ __device__ __forceinline__ int64_t st_q8t_np(int64_t ne1) { return (ne1 + 7) / 8 * 8; }

/* One thread per (block c, row r) of the padded scale array, block-major so the scale stores
 * coalesce: the block's 32 quants to row r's bytes, its scale to d[c][r] (0 for padding rows). */
static __global__ void __launch_bounds__(256)
st_k_q8t_make(const uint8_t *__restrict__ w, size_t rb, int64_t N, int64_t K, uint8_t *__restrict__ qs,
              uint16_t *__restrict__ d) {
    const int64_t nch = K / 32, np = st_q8t_np(N), total = nch * np, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t c = i / np, r = i - c * np;
        if (r >= N) {
            d[i] = 0;
            continue;
        }
        const uint8_t *blk = w + (size_t)r * rb + (size_t)c * 34; /* 2-byte aligned */
        d[i] = *(const uint16_t *)blk;
        uint32_t q[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            q[j] = (uint32_t)*(const uint16_t *)(blk + 2 + 4 * j) | (uint32_t)*(const uint16_t *)(blk + 4 + 4 * j) << 16;
        uint4 *o = (uint4 *)(qs + (size_t)r * (size_t)K + 32 * (size_t)c);
        o[0] = make_uint4(q[0], q[1], q[2], q[3]);
        o[1] = make_uint4(q[4], q[5], q[6], q[7]);
    }
}

extern "C" size_t st_cuda_mmq_tiles_bytes(const st_cuda_mat *W) {
    if (!W || W->type != STRATA_TYPE_Q8_0 || W->ne0 < 32 || W->ne0 % 32 || W->ne1 < 1) return 0;
    return (size_t)W->ne1 * (size_t)W->ne0 + (size_t)(W->ne0 / 32) * (size_t)st_q8t_np(W->ne1) * 2;
}

extern "C" strata_status st_cuda_mmq_tiles_make(const st_cuda_mat *W, void *dst, void *stream) {
    const size_t n = st_cuda_mmq_tiles_bytes(W);
    if (!n) return st_error(STRATA_ERR_UNSUPPORTED, "st_cuda_mmq_tiles_make: only Q8_0 matrices with "
                            "rows of a multiple of 32 weights have a tile copy");
    if (!W->data || !dst || ((uintptr_t)dst & 15) || ((uintptr_t)W->data & 1) || (W->row_bytes & 1) ||
        W->row_bytes < (size_t)W->ne0 / 32 * 34)
        return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_mmq_tiles_make: NULL or misaligned data or "
                        "destination, or row_bytes %zu", W->row_bytes);
    ST_TRY(st_cuda_require("st_cuda_mmq_tiles_make"));
    uint8_t *qs = (uint8_t *)dst;
    uint16_t *d = (uint16_t *)(qs + (size_t)W->ne1 * (size_t)W->ne0);
    st_k_q8t_make<<<st_cuda_grid((W->ne0 / 32) * st_q8t_np(W->ne1), 256), 256, 0, (cudaStream_t)stream>>>(
        (const uint8_t *)W->data, W->row_bytes, W->ne1, W->ne0, qs, d);
    ST_CUDA_CHECK_LAUNCH("st_k_q8t_make");
    return STRATA_OK;
}

/* A step's weights from the tile copy into buffer Ws / Wd by cp.async: 64 rows x 4 pieces of 16
 * bytes (two per thread) and 2 blocks x 8 groups of 8 rows' scales (threads 0..15); rows past N
 * and blocks past the row's end are zero-filled (an all-zero chunk: the GGUF path's w_in false). */
struct st_q8t_rows {
    const uint8_t *q[2]; /* the quant rows of this thread's two pieces, NULL outside the matrix */
    const uint16_t *d;   /* this thread's scale group (threads 0..15), NULL outside */
};

static __device__ __forceinline__ void st_q8t_issue(const st_q8t_rows &t, int64_t c0, int64_t nch, int64_t np,
                                                    int8_t *Ws, uint16_t (*Wd)[ST_MMQ_BN], int tid,
                                                    const void *any) {
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int j = tid + k * ST_MMQ_THREADS, i = j >> 2, p = j & 3;
        const int64_t c = c0 + (p >> 1);
        const bool ok = t.q[k] && c < nch;
        st_cp_async16(Ws + i * ST_MMQ_LDB + p * 16, ok ? (const void *)(t.q[k] + 32 * c + 16 * (p & 1)) : any, ok);
    }
    if (tid < 16) {
        const int h = tid >> 3, gi = tid & 7;
        const int64_t c = c0 + h;
        const bool ok = t.d && c < nch;
        st_cp_async16(&Wd[h][8 * gi], ok ? (const void *)(t.d + c * np) : any, ok);
    }
    st_cp_async_commit();
}

/* st_k_mmq's function for the plain and paired-GLU modes, with the steps overlapped and the
 * quants as bytes: two shared buffers; each thread issues its loads for step s + 1 before the
 * warps multiply step s out of one buffer and stores them into the other after, one barrier per
 * step; mma.sync on signed bytes (m16n8k32; m16n8k16 for the types with a scale per 16 weights):
 * half the shared bytes and
 * ldmatrix traffic, no f16 conversion of the weights, one mma per 32-deep slice. A slice's integer
 * dot is exact either way (the f16 tiles sum integer products below 2^24 in f32), so every
 * output gets the f16 tiles' values and then their scaling, operation for operation: the same
 * bits (test_cuda_mmv, test_cuda_moe). For the types with a dp4a decoder (Q4_0, Q8_0, Q4_K, Q5_K,
 * Q6_K); the default for them (st_cuda_mmq_set_int8). The same structure with f16 shared tiles
 * (no int8 mma) measured slower than st_k_mmq and was removed (docs/PERFORMANCE.md). */
template <class C, int MODE, bool RP = false>
static __global__ void __launch_bounds__(ST_MMQ_THREADS, 4) st_k_mmq_i8(const st_mmq_args a) {
    st_pdl_enter();
    static_assert(MODE != ST_MMQ_GLU_FUSED, "the fused GLU tiles have no int8 form");
    static_assert(!RP || (!C::SPLIT && !C::W_t::HAS_M), "the tile copy is Q8_0's: one scale a block");
    constexpr bool PAIR = MODE == ST_MMQ_GLU_PAIRED;
    constexpr int LDB = ST_MMQ_LDB, LDC = ST_MMQ_LDC;
    constexpr int TILE_B = ST_MMQ_BM * LDB;
    static_assert(ST_MMQ_BM * LDC * (int)sizeof(float) <= 4 * TILE_B, "Cs fits over the buffers");
    __shared__ __align__(128) int8_t st_mq_smem8[4 * TILE_B]; /* Xs[0], Ws[0], Xs[1], Ws[1] */
    __shared__ float Xd[2][ST_MMQ_BM][2], Xsum[2][ST_MMQ_BM][4];
    __shared__ __align__(16) st_mq_wscale8 Wsc[RP ? 1 : 2];
    __shared__ __align__(16) uint16_t Wd[2][2][RP ? ST_MMQ_BN : 8]; /* RP: [buffer][block][row] f16 */
    float *Cs = (float *)st_mq_smem8;

    int64_t start;
    int count;
    const uint8_t *w0, *w1 = NULL;
    size_t rb0, rb1 = 0;
    if (a.tiles) {
        if ((int)blockIdx.y >= *a.n_tiles) return;
        const st_mmq_tile t = a.tiles[blockIdx.y];
        start = t.start;
        count = t.count;
        const st_cuda_expert *ex = a.table + t.e;
        const st_cuda_mat *m0 = a.which == 2 ? &ex->down : &ex->gate;
        w0 = (const uint8_t *)m0->data;
        rb0 = m0->row_bytes;
        if (PAIR) {
            w1 = (const uint8_t *)ex->up.data;
            rb1 = ex->up.row_bytes;
        }
    } else {
        start = (int64_t)blockIdx.y * ST_MMQ_BM;
        count = (int)min((int64_t)ST_MMQ_BM, a.T - start);
        w0 = a.w0;
        rb0 = a.rb0;
        w1 = a.w1;
        rb1 = a.rb1;
    }
    const int64_t r0 = (int64_t)blockIdx.x * ST_MMQ_BN, oc0 = (int64_t)blockIdx.x * (ST_MMQ_BN / 2);
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int lr = tid >> 1, hf = tid & 1;
    const int64_t nch = a.K / 32;
    int64_t src = -1;
    if (lr < count) src = a.x_order ? (int64_t)(a.x_order[start + lr] / a.k_div) : start + lr;
    const uint8_t *wrow = NULL;
    st_q8t_rows tr = {{NULL, NULL}, NULL};
    const int64_t srows = st_q8t_np(a.N); /* RP: rows of the copy's scale array */
    if (RP) { /* the matrix row of tile row i (of 64), -1 past N */
        auto mrow = [&](int i, const uint8_t *&base) -> int64_t {
            const int64_t r = PAIR ? oc0 + (i & 31) : r0 + i;
            base = PAIR && i >= 32 ? a.q1 : a.q0;
            return r < a.N ? r : -1;
        };
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const uint8_t *base;
            const int64_t r = mrow((tid + k * ST_MMQ_THREADS) >> 2, base);
            if (r >= 0) tr.q[k] = base + (size_t)r * (size_t)a.K;
        }
        if (tid < 16) {
            const uint8_t *base;
            const int64_t r = mrow(8 * (tid & 7), base);
            if (r >= 0) tr.d = (const uint16_t *)(base + (size_t)a.N * (size_t)a.K) + r;
        }
    } else if (PAIR) {
        const int64_t r = oc0 + (lr & 31);
        if (r < a.N) wrow = lr < 32 ? w0 + (size_t)r * rb0 : w1 + (size_t)r * rb1;
    } else if (r0 + lr < a.N) {
        wrow = w0 + (size_t)(r0 + lr) * rb0;
    }

    const int wm = warp >> 1, wn = warp & 1;
    const int g = lane >> 2, tq = lane & 3;
    float acc[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.0f;

    {
        if constexpr (RP) st_q8t_issue(tr, 0, nch, srows, st_mq_smem8 + TILE_B, Wd[0], tid, a.q0);
        st_mq_stage8 s0;
        st_mq_fetch8<C>(a, src, wrow, hf, nch, s0);
        if (RP) {
            st_mq_put8_x(s0, st_mq_smem8, Xd[0], Xsum[0], lr, hf);
            st_cp_async_wait<0>();
        } else {
            st_mq_put8<C>(s0, hf, st_mq_smem8, st_mq_smem8 + TILE_B, Xd[0], Xsum[0], Wsc[0], lr, hf);
        }
    }
    __syncthreads();
    int b = 0;
    for (int64_t c0 = 0; c0 < nch; c0 += 2, b ^= 1) {
        const bool more = c0 + 2 < nch;
        st_mq_stage8 nx;
        /* the tile copy's next weights straight into the other buffer (free since the barrier) */
        if constexpr (RP)
            if (more) st_q8t_issue(tr, c0 + 2, nch, srows, st_mq_smem8 + (2 * (b ^ 1) + 1) * TILE_B, Wd[b ^ 1], tid, a.q0);
        if (more) st_mq_fetch8<C>(a, src, wrow, c0 + 2 + hf, nch, nx);
        const int8_t *Xs = st_mq_smem8 + 2 * b * TILE_B;
        const int8_t *Ws = st_mq_smem8 + (2 * b + 1) * TILE_B;
        constexpr int SL = C::SPLIT ? 1 : 2; /* the f16 tiles' slice: 16 or 32 weights deep */
#pragma unroll 1
        for (int ks0 = 0; ks0 < 4; ks0 += SL) {
            const int kb = ks0 * 16; /* the slice's first byte */
            uint32_t af[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const int8_t *pa = Xs + (wm * 32 + mi * 16 + (lane & 15)) * LDB + kb;
                if (SL == 2) st_ldsm_x4(af[mi], (const __half *)(pa + (lane >> 4) * 16));
                else st_ldsm_x2(af[mi], pa);
            }
            float dx[2][2], sx[2][2];
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = wm * 32 + mi * 16 + g + 8 * h;
                    dx[mi][h] = Xd[b][r][ks0 >> 1];
                    sx[mi][h] = SL == 2 ? Xsum[b][r][ks0] + Xsum[b][r][ks0 + 1] : Xsum[b][r][ks0];
                }
#pragma unroll
            for (int np = 0; np < 2; np++) {
                uint32_t bf[4];
                if (SL == 2)
                    st_ldsm_x4(bf, (const __half *)(Ws + (wn * 32 + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDB +
                                                    kb + ((lane >> 3) & 1) * 16));
                else
                    st_ldsm_x2(bf, Ws + (wn * 32 + np * 16 + (lane & 15)) * LDB + kb);
#pragma unroll
                for (int nn = 0; nn < 2; nn++) {
                    const int ni = np * 2 + nn;
                    const int n = wn * 32 + ni * 8 + 2 * tq;
                    float2 sw; /* n even */
                    if constexpr (RP) sw = __half22float2(*(const __half2 *)&Wd[b][ks0 >> 1][n]); /* exact */
                    else sw = *(const float2 *)&Wsc[b].sc[ks0][n];
                    const float2 mw = C::W_t::HAS_M ? *(const float2 *)&Wsc[RP ? 0 : b].mn[ks0][n] : make_float2(0.0f, 0.0f);
                    const float sw0 = sw.x, sw1 = sw.y, mw0 = mw.x, mw1 = mw.y;
#pragma unroll
                    for (int mi = 0; mi < 2; mi++) {
                        int ci[4]; /* biased sums: st_i2f_biased gives the exact floats */
                        if (SL == 2) st_mma_i8_k32(ci, af[mi], bf[2 * nn], bf[2 * nn + 1], ST_I2F_BIAS);
                        else st_mma_i8_k16(ci, af[mi], bf[nn], ST_I2F_BIAS);
                        const float cc[4] = {st_i2f_biased(ci[0]), st_i2f_biased(ci[1]), st_i2f_biased(ci[2]),
                                             st_i2f_biased(ci[3])};
                        float *A = acc[mi][ni];
                        if constexpr (C::W_t::HAS_M) {
                            A[0] = fmaf(dx[mi][0], fmaf(sw0, cc[0], mw0 * sx[mi][0]), A[0]);
                            A[1] = fmaf(dx[mi][0], fmaf(sw1, cc[1], mw1 * sx[mi][0]), A[1]);
                            A[2] = fmaf(dx[mi][1], fmaf(sw0, cc[2], mw0 * sx[mi][1]), A[2]);
                            A[3] = fmaf(dx[mi][1], fmaf(sw1, cc[3], mw1 * sx[mi][1]), A[3]);
                        } else { /* mw = 0: sw * cc (+ 0 would only flip a zero's sign, which a
                                  * sum starting at +0 never keeps: the same bits) */
                            A[0] = fmaf(dx[mi][0], sw0 * cc[0], A[0]);
                            A[1] = fmaf(dx[mi][0], sw1 * cc[1], A[1]);
                            A[2] = fmaf(dx[mi][1], sw0 * cc[2], A[2]);
                            A[3] = fmaf(dx[mi][1], sw1 * cc[3], A[3]);
                        }
                    }
                }
            }
        }
        if (more && RP) {
            st_mq_put8_x(nx, st_mq_smem8 + 2 * (b ^ 1) * TILE_B, Xd[b ^ 1], Xsum[b ^ 1], lr, hf);
            st_cp_async_wait<0>();
        } else if (more) {
            st_mq_put8<C>(nx, c0 + 2 + hf, st_mq_smem8 + 2 * (b ^ 1) * TILE_B, st_mq_smem8 + (2 * (b ^ 1) + 1) * TILE_B,
                          Xd[b ^ 1], Xsum[b ^ 1], Wsc[RP ? 0 : b ^ 1], lr, hf);
        }
        __syncthreads();
    }

#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = wm * 32 + mi * 16 + g + 8 * (e >> 1), n = wn * 32 + ni * 8 + 2 * tq + (e & 1);
                Cs[r * LDC + n] = acc[mi][ni][e];
            }
    __syncthreads();
    const int ex_id = st_mmq_tile_expert(a); /* (read here: no register held over the steps) */
    if (PAIR) {
        constexpr int HB = ST_MMQ_BN / 2;
        const int ncol = (int)min((int64_t)HB, a.N - oc0);
        for (int idx = tid; idx < ST_MMQ_BM * HB; idx += ST_MMQ_THREADS) {
            const int i = idx / HB, col = idx - i * HB;
            if (i < count && col < ncol) {
                const int64_t orow = a.y_order ? (int64_t)a.y_order[start + i] : start + i;
                a.y[orow * a.ldy + oc0 + col] = st_mmq_glu_out(a, ex_id, oc0 + col, Cs[i * LDC + col],
                                                               Cs[i * LDC + HB + col]);
            }
        }
        return;
    }
    const int ncol = (int)min((int64_t)ST_MMQ_BN, a.N - r0);
    for (int idx = tid; idx < ST_MMQ_BM * ST_MMQ_BN; idx += ST_MMQ_THREADS) {
        const int i = idx / ST_MMQ_BN, col = idx - i * ST_MMQ_BN;
        if (i < count && col < ncol) {
            const int64_t orow = a.y_order ? (int64_t)a.y_order[start + i] : start + i;
            a.y[orow * a.ldy + r0 + col] = st_mmq_plain_out(a, ex_id, r0 + col, Cs[i * LDC + col]);
        }
    }
}

/* ---- float weights: f32 tiles on the FMA units ----------------------------------------------- */

/* F32, F16 and BF16 weights keep f32 arithmetic (the GEMV's accuracy): a TB x TB tile, 256
 * threads of (TB / 16)^2 outputs each, steps of 64 weights through shared memory, every output
 * summed over k in order with fmaf (deterministic, and the tile size changes no bit). Each
 * thread loads its share of step s + 1 into registers before the block multiplies step s, so a
 * step's global latency hides behind the one before. Calls too small to fill the GPU with 64-wide
 * tiles (the router, (n_expert, n_embd): 16 tiles at pp512) split k into S parts of 64-wide tiles
 * (grid.z; each part's sums in order into the scratch) and add the parts in order after
 * (st_k_mmf_sum): 4 x 4 outputs a thread and short walks, where 16-wide tiles of one output a
 * thread walked all of k with two shared loads per FMA (2.4 TFLOP/s). Deterministic; the split
 * sums are not the one-part bits. For the small float matrices of quantized models and for float
 * models. */
#define ST_MMF_BK 64
#define ST_MMF_MAX_SPLIT 16

struct st_mmf_args {
    const uint8_t *w;
    size_t rb;
    int64_t N, K;
    const float *x;
    int64_t ldx, T;
    float *y;
    int64_t ldy;
    int64_t k_len;  /* split: weights per part (a multiple of ST_MMF_BK), part z = blockIdx.z */
    float *part;    /* split: part z's outputs at part + (z * T + t) * N + r; NULL: into y */
};

template <class P, int TB>
static __global__ void __launch_bounds__(256) st_k_mmf(const st_mmf_args a) {
    st_pdl_enter();
    constexpr int R = TB / 16;                  /* outputs per thread along each side */
    constexpr int L = TB * ST_MMF_BK / 256;     /* loads per thread and step, of x and of w */
    __shared__ float Xs[ST_MMF_BK][TB + 4]; /* [k][activation row] */
    __shared__ float Ws[ST_MMF_BK][TB + 4]; /* [k][weight row] */
    const int tid = (int)threadIdx.x, ty = tid >> 4, tx = tid & 15;
    const int64_t t0 = (int64_t)blockIdx.y * TB, r0 = (int64_t)blockIdx.x * TB;
    const int64_t kb = a.part ? (int64_t)blockIdx.z * a.k_len : 0;
    const int64_t ke = a.part && kb + a.k_len < a.K ? kb + a.k_len : a.K; /* this block's k: [kb, ke) */
    /* load q of a step: element e = tid + 256 q, row e / BK, k e % BK (a warp reads along k) */
    float xr[L], wr[L];
    auto fetch = [&](int64_t k0) {
#pragma unroll
        for (int q = 0; q < L; q++) {
            const int e = tid + 256 * q, row = e / ST_MMF_BK, kk = e % ST_MMF_BK;
            const int64_t k = k0 + kk;
            const bool xin = t0 + row < a.T && k < ke, win = r0 + row < a.N && k < ke;
            xr[q] = xin ? a.x[(t0 + row) * a.ldx + k] : 0.0f;
            wr[q] = win ? P::one(a.w + (size_t)(r0 + row) * a.rb + (size_t)k * P::BYTES) : 0.0f;
        }
    };
    float acc[R][R];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int j = 0; j < R; j++) acc[i][j] = 0.0f;
    fetch(kb);
    for (int64_t k0 = kb; k0 < ke; k0 += ST_MMF_BK) {
#pragma unroll
        for (int q = 0; q < L; q++) {
            const int e = tid + 256 * q, row = e / ST_MMF_BK, kk = e % ST_MMF_BK;
            Xs[kk][row] = xr[q];
            Ws[kk][row] = wr[q];
        }
        __syncthreads();
        if (k0 + ST_MMF_BK < ke) fetch(k0 + ST_MMF_BK);
#pragma unroll 16
        for (int kk = 0; kk < ST_MMF_BK; kk++) {
            float xv[R], wv[R];
#pragma unroll
            for (int i = 0; i < R; i++) {
                xv[i] = Xs[kk][ty * R + i];
                wv[i] = Ws[kk][tx * R + i];
            }
#pragma unroll
            for (int i = 0; i < R; i++)
#pragma unroll
                for (int j = 0; j < R; j++) acc[i][j] = fmaf(xv[i], wv[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int j = 0; j < R; j++) {
            const int64_t t = t0 + ty * R + i, r = r0 + tx * R + j;
            if (t < a.T && r < a.N) {
                if (a.part) a.part[((int64_t)blockIdx.z * a.T + t) * a.N + r] = acc[i][j];
                else a.y[t * a.ldy + r] = acc[i][j];
            }
        }
}

/* ---- dispatch -------------------------------------------------------------------------------- */

/* Whether the plain and paired tiles of the types with integer quants take the int8 kernel (the
 * default: measured on the H200, qwen3 pp512 5,896 -> 6,247 tok/s) or the one-buffer f16 tiles
 * (st_cuda_mmq_set_int8(0), for the tests that compare their bits). */
static int st_mmq_i8 = 1;

extern "C" void st_cuda_mmq_set_int8(int on) { st_mmq_i8 = on != 0; }

/* Whether a call with weights of this type in this mode may take the f16 tiles (which read the
 * f16 quants of st_mq_act); the int8 kernel reads only the bytes. */
static bool st_mq_act_f16(strata_type type, int mode) {
    return !(st_mmq_i8 && st_cuda_moe_type_dp4a(type) && mode != ST_MMQ_GLU_FUSED);
}

/* grid.x: N / ST_MMQ_BN tiles of outputs, N / (ST_MMQ_BN / 2) for the paired GLU */
template <class C, int MODE>
static strata_status st_mmq_go(const st_mmq_args &a, dim3 grid, cudaStream_t s) {
    if constexpr (MODE != ST_MMQ_GLU_FUSED && C::INT8) {
        if (st_mmq_i8) {
            st_launch(st_k_mmq_i8<C, MODE>, grid, ST_MMQ_THREADS, 0, s, a);
            ST_CUDA_CHECK_LAUNCH("st_k_mmq_i8");
            return STRATA_OK;
        }
    }
    st_launch(st_k_mmq<C, MODE>, grid, ST_MMQ_THREADS, 0, s, a);
    ST_CUDA_CHECK_LAUNCH(MODE == ST_MMQ_PLAIN ? "st_k_mmq" : "st_k_mmq (glu)");
    return STRATA_OK;
}

/* Which GLU tiles the SwiGLU calls take (st_cuda_mmq_set_glu_mode). */
static int st_mmq_glu_mode = ST_MMQ_GLU_PAIRED;

extern "C" void st_cuda_mmq_set_glu_mode(int mode) {
    st_mmq_glu_mode = mode == ST_MMQ_GLU_FUSED ? ST_MMQ_GLU_FUSED : ST_MMQ_GLU_PAIRED;
}

/* The grid of a call with N outputs (weight rows) and nrow row tiles. */
static dim3 st_mmq_grid(int mode, int64_t N, int64_t nrow) {
    const int64_t per = mode == ST_MMQ_GLU_PAIRED ? ST_MMQ_BN / 2 : ST_MMQ_BN;
    return dim3((unsigned)((N + per - 1) / per), (unsigned)nrow);
}

/* The one switch over quantized weight types. */
template <int MODE>
static strata_status st_mmq_launch(strata_type type, const st_mmq_args &a, dim3 grid, cudaStream_t s) {
    switch (type) {
    case STRATA_TYPE_Q4_0: return st_mmq_go<st_mq_w32<st_w_q4_0>, MODE>(a, grid, s);
    case STRATA_TYPE_Q8_0: return st_mmq_go<st_mq_w32<st_w_q8_0>, MODE>(a, grid, s);
    case STRATA_TYPE_Q4_K: return st_mmq_go<st_mq_w32<st_w_q4_K>, MODE>(a, grid, s);
    case STRATA_TYPE_Q5_K: return st_mmq_go<st_mq_w32<st_w_q5_K>, MODE>(a, grid, s);
    case STRATA_TYPE_Q6_K: return st_mmq_go<st_mq_w32<st_w_q6_K>, MODE>(a, grid, s);
    case STRATA_TYPE_Q4_1: return st_mmq_go<st_mq_fb<st_dq_q4_1>, MODE>(a, grid, s);
    case STRATA_TYPE_Q5_0: return st_mmq_go<st_mq_fb<st_dq_q5_0>, MODE>(a, grid, s);
    case STRATA_TYPE_Q5_1: return st_mmq_go<st_mq_fb<st_dq_q5_1>, MODE>(a, grid, s);
    case STRATA_TYPE_IQ4_NL: return st_mmq_go<st_mq_fb<st_dq_iq4_nl>, MODE>(a, grid, s);
    case STRATA_TYPE_Q2_K: return st_mmq_go<st_mq_fb<st_dq_q2_K>, MODE>(a, grid, s);
    case STRATA_TYPE_Q3_K: return st_mmq_go<st_mq_fb<st_dq_q3_K>, MODE>(a, grid, s);
    case STRATA_TYPE_IQ4_XS: return st_mmq_go<st_mq_w32<st_w_mmv<st_mmv_iq4_xs>>, MODE>(a, grid, s);
    case STRATA_TYPE_IQ3_XXS: return st_mmq_go<st_mq_w32<st_w_mmv<st_mmv_iq3_xxs>>, MODE>(a, grid, s);
    case STRATA_TYPE_IQ3_S: return st_mmq_go<st_mq_w32<st_w_mmv<st_mmv_iq3_s>>, MODE>(a, grid, s);
    case STRATA_TYPE_IQ2_XXS: return st_mmq_go<st_mq_w32<st_w_mmv<st_mmv_iq2_xxs>>, MODE>(a, grid, s);
    case STRATA_TYPE_IQ2_XS: return st_mmq_go<st_mq_w32<st_w_mmv<st_mmv_iq2_xs>>, MODE>(a, grid, s);
    case STRATA_TYPE_IQ2_S: return st_mmq_go<st_mq_w32<st_w_mmv<st_mmv_iq2_s>>, MODE>(a, grid, s);
    case STRATA_TYPE_IQ1_S: return st_mmq_go<st_mq_w32<st_w_mmv<st_mmv_iq1_s>>, MODE>(a, grid, s);
    case STRATA_TYPE_IQ1_M: return st_mmq_go<st_mq_w32<st_w_mmv<st_mmv_iq1_m>>, MODE>(a, grid, s);
    case STRATA_TYPE_MXFP4: return st_mmq_go<st_mq_w32<st_w_mmv<st_mmv_mxfp4>>, MODE>(a, grid, s);
    default: break;
    }
    return st_error(STRATA_ERR_UNSUPPORTED, "st_k_mmq: type %s has no tile kernel", strata_type_name(type));
}

/* y[t * ldy + r] = part 0 + part 1 + ... + part S-1 of output (t, r), in that order. */
static __global__ void __launch_bounds__(256)
st_k_mmf_sum(const float *__restrict__ part, int S, int64_t T, int64_t N, float *__restrict__ y, int64_t ldy) {
    st_pdl_enter();
    const int64_t total = T * N, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        float v = part[i];
        for (int z = 1; z < S; z++) v = __fadd_rn(v, part[(int64_t)z * total + i]);
        const int64_t t = i / N;
        y[t * ldy + (i - t * N)] = v;
    }
}

/* scratch: NULL, or room for S x T x N floats with S x N <= K (st_cuda_mmq_scratch_bytes). */
template <class P>
static strata_status st_mmf_go(st_mmf_args a, void *scratch, cudaStream_t s) {
    /* 64-wide tiles when they fill the GPU; else split along k into parts of 64-wide tiles (at
     * least two steps each, S x N <= K for the scratch), else 16-wide tiles */
    const int64_t blocks64 = ((a.N + 63) / 64) * ((a.T + 63) / 64), slots = 2 * 132;
    int64_t S = blocks64 < slots ? (slots + blocks64 - 1) / blocks64 : 1;
    if (S > ST_MMF_MAX_SPLIT) S = ST_MMF_MAX_SPLIT;
    if (S > a.K / (2 * ST_MMF_BK)) S = a.K / (2 * ST_MMF_BK);
    if (S > a.K / a.N) S = a.K / a.N;
    if (blocks64 < slots && S >= 2 && scratch) {
        a.k_len = ((a.K + S - 1) / S + ST_MMF_BK - 1) / ST_MMF_BK * ST_MMF_BK;
        S = (a.K + a.k_len - 1) / a.k_len;
        a.part = (float *)scratch;
        st_launch(st_k_mmf<P, 64>, dim3((unsigned)((a.N + 63) / 64), (unsigned)((a.T + 63) / 64), (unsigned)S), 256,
                  0, s, a);
        ST_CUDA_CHECK_LAUNCH("st_k_mmf (split)");
        st_launch(st_k_mmf_sum, st_cuda_grid(a.T * a.N, 256), 256, 0, s, (const float *)a.part, (int)S, a.T, a.N,
                  a.y, a.ldy);
        ST_CUDA_CHECK_LAUNCH("st_k_mmf_sum");
        return STRATA_OK;
    }
    if (blocks64 >= slots) {
        st_launch(st_k_mmf<P, 64>, dim3((unsigned)((a.N + 63) / 64), (unsigned)((a.T + 63) / 64)), 256, 0, s, a);
    } else {
        st_launch(st_k_mmf<P, 16>, dim3((unsigned)((a.N + 15) / 16), (unsigned)((a.T + 15) / 16)), 256, 0, s, a);
    }
    ST_CUDA_CHECK_LAUNCH("st_k_mmf");
    return STRATA_OK;
}

static int st_mmq_is_float(strata_type type) {
    return type == STRATA_TYPE_F32 || type == STRATA_TYPE_F16 || type == STRATA_TYPE_BF16;
}

extern "C" int st_cuda_moe_type_tiles(strata_type type) {
    switch (type) {
    case STRATA_TYPE_Q4_0: case STRATA_TYPE_Q8_0: case STRATA_TYPE_Q4_K: case STRATA_TYPE_Q5_K:
    case STRATA_TYPE_Q6_K: case STRATA_TYPE_Q4_1: case STRATA_TYPE_Q5_0: case STRATA_TYPE_Q5_1:
    case STRATA_TYPE_IQ4_NL: case STRATA_TYPE_Q2_K: case STRATA_TYPE_Q3_K:
    case STRATA_TYPE_IQ4_XS: case STRATA_TYPE_IQ3_XXS: case STRATA_TYPE_IQ3_S:
    case STRATA_TYPE_IQ2_XXS: case STRATA_TYPE_IQ2_XS: case STRATA_TYPE_IQ2_S:
    case STRATA_TYPE_IQ1_S: case STRATA_TYPE_IQ1_M: case STRATA_TYPE_MXFP4:
        return 1;
    default:
        return 0;
    }
}

extern "C" int st_cuda_moe_tiles_oai(void) {
    return STRATA_MMQ_OAI ? 1 : 0;
}

extern "C" int st_cuda_mmq_supports(strata_type type) {
    return st_cuda_moe_type_tiles(type) || st_mmq_is_float(type);
}

/* ---- dense entry points ---------------------------------------------------------------------- */

/* The activations' rounded copy, or for float weights the k split's parts (S x T x N floats
 * with S x N <= ne0: at most T x ne0). */
extern "C" size_t st_cuda_mmq_scratch_bytes(int64_t ne0, int64_t T) {
    if (ne0 < 1 || T < 1) return 0;
    const size_t act = st_mq_act_bytes(T, (ne0 + 31) / 32 * 32), parts = sizeof(float) * (size_t)T * (size_t)ne0;
    return act > parts ? act : parts;
}

static strata_status st_mmq_check_mat(const char *fn, const st_cuda_mat *W) {
    if (!W || !W->data) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL matrix", fn);
    if (!st_cuda_mmq_supports(W->type))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: type %s has no tile kernel", fn,
                        strata_type_name(W->type));
    if (st_mmq_is_float(W->type)) {
        const size_t el = W->type == STRATA_TYPE_F32 ? 4 : 2;
        if (W->ne0 < 1 || W->ne1 < 1 || W->row_bytes < el * (size_t)W->ne0 || W->row_bytes % el ||
            ((uintptr_t)W->data % el))
            return st_error(STRATA_ERR_INVALID_ARG, "%s: %s matrix %lld x %lld, row_bytes %zu", fn,
                            strata_type_name(W->type), (long long)W->ne1, (long long)W->ne0, W->row_bytes);
        return STRATA_OK;
    }
    const int64_t qk = strata_type_block_size(W->type);
    const size_t odd = W->type == STRATA_TYPE_MXFP4 ? 0 : 1; /* MXFP4 (17-byte blocks): byte loads */
    if (W->ne0 < 32 || W->ne0 % 32 || qk < 1 || W->ne0 % qk || W->ne1 < 1 ||
        W->row_bytes < (size_t)strata_row_bytes(W->type, W->ne0) || (W->row_bytes & odd) ||
        ((uintptr_t)W->data & odd))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: %s matrix %lld x %lld, row_bytes %zu (ne0 a "
                        "multiple of 32 and of the block size, even row bytes and address but "
                        "for MXFP4)", fn,
                        strata_type_name(W->type), (long long)W->ne1, (long long)W->ne0, W->row_bytes);
    return STRATA_OK;
}

static strata_status st_mmq_dense(const char *fn, const st_cuda_mat *Wg, const st_cuda_mat *Wu,
                                  const float *d_x, int64_t ldx, int64_t T, float *d_y,
                                  int64_t ldy, void *d_scratch, void *stream) {
    ST_TRY(st_mmq_check_mat(fn, Wg));
    const int flt = st_mmq_is_float(Wg->type);
    if (Wu) {
        ST_TRY(st_mmq_check_mat(fn, Wu));
        if (Wu->type != Wg->type || Wu->ne0 != Wg->ne0 || Wu->ne1 != Wg->ne1 || flt)
            return st_error(STRATA_ERR_INVALID_ARG, "%s: gate and up differ in type or shape, or are "
                            "float (SwiGLU tiles take quantized types)", fn);
    }
    if (T < 1 || T > (int64_t)65535 * ST_MMQ_BM || ldx < Wg->ne0 || ldy < Wg->ne1 || !d_x || !d_y ||
        ((uintptr_t)d_x & 3) || ((uintptr_t)d_y & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld, ldx %lld, ldy %lld (T >= 1, ldx >= ne0, "
                        "ldy >= ne1, 4-byte aligned x and y)", fn, (long long)T, (long long)ldx,
                        (long long)ldy);
    if (!flt && (!d_scratch || ((uintptr_t)d_scratch & 15)))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: scratch NULL or not 16-byte aligned", fn);
    ST_TRY(st_cuda_require(fn));
    cudaStream_t s = (cudaStream_t)stream;
    if (flt) {
        st_mmf_args f;
        memset(&f, 0, sizeof f);
        f.w = (const uint8_t *)Wg->data;
        f.rb = Wg->row_bytes;
        f.N = Wg->ne1;
        f.K = Wg->ne0;
        f.x = d_x;
        f.ldx = ldx;
        f.T = T;
        f.y = d_y;
        f.ldy = ldy;
        if (Wg->type == STRATA_TYPE_F32) return st_mmf_go<st_dq_f32>(f, d_scratch, s);
        if (Wg->type == STRATA_TYPE_F16) return st_mmf_go<st_dq_f16>(f, d_scratch, s);
        return st_mmf_go<st_dq_bf16>(f, d_scratch, s);
    }
    const st_mq_act_rows act = st_mq_act_carve(d_scratch, T, Wg->ne0);
    ST_TRY(st_mq_act(d_x, ldx, T, Wg->ne0, act, s, st_mq_act_f16(Wg->type, Wu ? st_mmq_glu_mode : ST_MMQ_PLAIN)));
    st_mmq_args a;
    memset(&a, 0, sizeof a);
    a.w0 = (const uint8_t *)Wg->data;
    a.rb0 = Wg->row_bytes;
    if (Wu) {
        a.w1 = (const uint8_t *)Wu->data;
        a.rb1 = Wu->row_bytes;
    }
    a.N = Wg->ne1;
    a.K = Wg->ne0;
    a.act = act;
    a.k_div = 1;
    a.T = T;
    a.y = d_y;
    a.ldy = ldy;
    const int64_t nrow = (T + ST_MMQ_BM - 1) / ST_MMQ_BM;
    const int mode = Wu ? st_mmq_glu_mode : ST_MMQ_PLAIN;
    if (Wg->tiles && (!Wu || Wu->tiles) && st_mmq_i8 && mode != ST_MMQ_GLU_FUSED && st_cuda_mmq_tiles_bytes(Wg) &&
        ((uintptr_t)Wg->tiles & 15) == 0 && (!Wu || ((uintptr_t)Wu->tiles & 15) == 0)) {
        a.q0 = (const uint8_t *)Wg->tiles; /* Q8_0 with its tile copy: the weights by cp.async */
        a.q1 = Wu ? (const uint8_t *)Wu->tiles : NULL;
        using C = st_mq_w32<st_w_q8_0>;
        if (mode == ST_MMQ_PLAIN) st_launch(st_k_mmq_i8<C, ST_MMQ_PLAIN, true>, st_mmq_grid(mode, a.N, nrow), ST_MMQ_THREADS, 0, s, a);
        else st_launch(st_k_mmq_i8<C, ST_MMQ_GLU_PAIRED, true>, st_mmq_grid(mode, a.N, nrow), ST_MMQ_THREADS, 0, s, a);
        ST_CUDA_CHECK_LAUNCH("st_k_mmq_i8 (tile copy)");
        return STRATA_OK;
    }
    if (!Wu) return st_mmq_launch<ST_MMQ_PLAIN>(Wg->type, a, st_mmq_grid(ST_MMQ_PLAIN, a.N, nrow), s);
    const dim3 grid = st_mmq_grid(mode, a.N, nrow);
    return mode == ST_MMQ_GLU_FUSED ? st_mmq_launch<ST_MMQ_GLU_FUSED>(Wg->type, a, grid, s)
                                    : st_mmq_launch<ST_MMQ_GLU_PAIRED>(Wg->type, a, grid, s);
}

extern "C" strata_status st_cuda_mmq(const st_cuda_mat *W, const float *d_x, int64_t ldx, int64_t T,
                                     float *d_y, int64_t ldy, void *d_scratch, void *stream) {
    return st_mmq_dense("st_cuda_mmq", W, NULL, d_x, ldx, T, d_y, ldy, d_scratch, stream);
}

extern "C" strata_status st_cuda_mmq_swiglu(const st_cuda_mat *Wg, const st_cuda_mat *Wu,
                                            const float *d_x, int64_t ldx, int64_t T, float *d_y,
                                            int64_t ldy, void *d_scratch, void *stream) {
    if (!Wu) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_mmq_swiglu: NULL up matrix");
    return st_mmq_dense("st_cuda_mmq_swiglu", Wg, Wu, d_x, ldx, T, d_y, ldy, d_scratch, stream);
}

/* ---- grouped experts ------------------------------------------------------------------------- */

/* One block: pairs (t * k + s) with valid ids sorted by (expert, pair) into order, and the tile
 * list (expert, first sorted index, count <= 64) in expert order. Each warp ranks the pairs of
 * its experts with ballots over the id list, so the order is fixed. Pairs with ids outside
 * [0, X) are left out (they contribute 0). Shared memory: 3 X ints. */
static __global__ void __launch_bounds__(1024)
st_k_mmq_plan(const int32_t *__restrict__ ids, int P, int X, int32_t *__restrict__ order,
              st_mmq_tile *__restrict__ tiles, int32_t *__restrict__ n_tiles) {
    st_pdl_enter();
    extern __shared__ int st_mmq_plan_smem[];
    int *cnt = st_mmq_plan_smem, *off = cnt + X, *toff = off + X;
    for (int e = (int)threadIdx.x; e < X; e += (int)blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int p = (int)threadIdx.x; p < P; p += (int)blockDim.x) {
        const int e = __ldg(ids + p);
        if (e >= 0 && e < X) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int o = 0, to = 0;
        for (int e = 0; e < X; e++) {
            off[e] = o;
            toff[e] = to;
            o += cnt[e];
            to += (cnt[e] + ST_MMQ_BM - 1) / ST_MMQ_BM;
        }
        *n_tiles = to;
    }
    __syncthreads();
    const int lane = (int)(threadIdx.x & 31), nw = (int)(blockDim.x >> 5);
    for (int e = (int)(threadIdx.x >> 5); e < X; e += nw) {
        const int n = cnt[e];
        if (n == 0) continue;
        int base = off[e];
        for (int p0 = 0; p0 < P; p0 += 32) {
            const int p = p0 + lane;
            const bool m = p < P && __ldg(ids + p) == e;
            const unsigned b = __ballot_sync(0xffffffffu, m);
            if (m) order[base + __popc(b & ((1u << lane) - 1u))] = p;
            base += __popc(b);
        }
        for (int i = lane; i * ST_MMQ_BM < n; i += 32) {
            st_mmq_tile t;
            t.e = e;
            t.start = off[e] + i * ST_MMQ_BM;
            t.count = min(ST_MMQ_BM, n - i * ST_MMQ_BM);
            t.pad = 0;
            tiles[toff[e] + i] = t;
        }
    }
}

struct st_mmq_ws {
    int32_t *n_tiles;
    st_mmq_tile *tiles;   /* [P + P / 64 + 1] at most */
    int32_t *order;       /* [P] */
    st_mq_act_rows xa;    /* [T] rows of n_embd, quantized */
    float *h;             /* [P][n_ff], sorted rows */
    st_mq_act_rows ha;    /* [P] rows of n_ff: h quantized */
    float *y;             /* [P][n_embd], pair rows */
    size_t bytes;
};

static st_mmq_ws st_mmq_ws_layout(uint8_t *base, int64_t T, int32_t k, int64_t n_embd, int64_t n_ff) {
    const size_t P = (size_t)T * (size_t)k;
    st_mmq_ws w;
    size_t o = 0;
    w.n_tiles = (int32_t *)(base + o);       o += st_round_up(sizeof(int32_t), 256);
    w.tiles = (st_mmq_tile *)(base + o);     o += st_round_up((P + P / ST_MMQ_BM + 1) * sizeof(st_mmq_tile), 256);
    w.order = (int32_t *)(base + o);         o += st_round_up(P * sizeof(int32_t), 256);
    w.xa = st_mq_act_carve(base + o, T, n_embd);  o += st_mq_act_bytes(T, n_embd);
    w.h = (float *)(base + o);               o += st_round_up(P * (size_t)n_ff * sizeof(float), 256);
    w.ha = st_mq_act_carve(base + o, (int64_t)P, n_ff);  o += st_mq_act_bytes((int64_t)P, n_ff);
    w.y = (float *)(base + o);               o += st_round_up(P * (size_t)n_embd * sizeof(float), 256);
    w.bytes = o;
    return w;
}

size_t st_moe_mmq_wsize(int64_t T, int32_t k, int64_t n_embd, int64_t n_ff) {
    return st_mmq_ws_layout(NULL, T, k, n_embd, n_ff).bytes;
}

int st_moe_mmq_wanted(const st_cuda_moe_args *a) {
    if (!STRATA_MMQ_OAI && (a->b_gate || a->b_up || a->b_down || a->act != 0)) return 0; /* (gated) */
    if (a->act != 0 && a->act != 1) return 0;
    if (!st_cuda_moe_type_tiles(a->type_gate) || !st_cuda_moe_type_tiles(a->type_down)) return 0;
    if (a->n_expert > 4096) return 0;
    const int64_t P = a->T * (int64_t)a->k;
    return P > 1024 || (a->T >= ST_CUDA_MMQ_MIN_ROWS && P >= 4 * (int64_t)a->n_expert);
}

strata_status st_moe_mmq_ffn(const st_cuda_moe_args *a, cudaStream_t s, const float **y_pairs) {
    const int P = (int)(a->T * a->k);
    const st_mmq_ws w = st_mmq_ws_layout((uint8_t *)a->ws, a->T, a->k, a->n_embd, a->n_ff);
    const int64_t max_tiles = (int64_t)P / ST_MMQ_BM + (P < a->n_expert ? P : a->n_expert) + 1;
    st_launch(st_k_mmq_plan, 1, 1024, (size_t)(3 * a->n_expert) * sizeof(int), s, 
        a->ids, P, a->n_expert, w.order, w.tiles, w.n_tiles);
    ST_CUDA_CHECK_LAUNCH("st_k_mmq_plan");

    ST_TRY(st_mq_act(a->x, a->n_embd, a->T, a->n_embd, w.xa, s, st_mq_act_f16(a->type_gate, st_mmq_glu_mode)));
    st_mmq_args g;
    memset(&g, 0, sizeof g);
    g.table = a->experts;
    g.which = 0;
    g.N = a->n_ff;
    g.K = a->n_embd;
    g.act = w.xa;
    g.x_order = w.order;
    g.k_div = a->k;
    g.tiles = w.tiles;
    g.n_tiles = w.n_tiles;
    g.y = w.h;
    g.ldy = a->n_ff;
    g.b0 = a->b_gate;
    g.b1 = a->b_up;
    g.oai = a->act == 1;
    const int mode = st_mmq_glu_mode;
    const dim3 ggrid = st_mmq_grid(mode, a->n_ff, max_tiles);
    ST_TRY(mode == ST_MMQ_GLU_FUSED ? st_mmq_launch<ST_MMQ_GLU_FUSED>(a->type_gate, g, ggrid, s)
                                    : st_mmq_launch<ST_MMQ_GLU_PAIRED>(a->type_gate, g, ggrid, s));

    ST_TRY(st_mq_act(w.h, a->n_ff, P, a->n_ff, w.ha, s, st_mq_act_f16(a->type_down, ST_MMQ_PLAIN)));
    st_mmq_args d = g;
    d.which = 2;
    d.N = a->n_embd;
    d.K = a->n_ff;
    d.act = w.ha;
    d.x_order = NULL;
    d.k_div = 1;
    d.y_order = w.order;
    d.y = w.y;
    d.ldy = a->n_embd;
    d.b0 = a->b_down;
    d.b1 = NULL;
    d.oai = 0;
    ST_TRY(st_mmq_launch<ST_MMQ_PLAIN>(a->type_down, d, st_mmq_grid(ST_MMQ_PLAIN, a->n_embd, max_tiles), s));
    *y_pairs = w.y;
    return STRATA_OK;
}
