/* mmv.cuh - device-side pieces of the decode GEMV (c/cuda/mmv.cu), kept in a header so the
 * grouped-expert kernels can reuse them unchanged: per-type decoders of 32 weights into int8
 * words for dp4a, the per-column combine with a Q8_1 activation block, and the per-warp row loops
 * for quantized and float weights.
 *
 * Scheme (llama.cpp's mmvq idea, written afresh): a row of ne0 weights is cut into ne0 / 32
 * "sub-blocks" of 32 weights, sub-block p meeting activation block p of each column. Lane l of
 * the warp that owns a row takes sub-blocks l, l + 32, ...; it decodes the 32 weights once into
 * eight words v[0..7] (word i = weights 4i..4i+3 of the sub-block, weight 4i+k in byte k, as
 * signed int8, same order as the activation words) plus the sub-block's scales, then for each
 * column does 8 dp4a against the column's Q8_1 quants and adds the scaled result to its f32
 * accumulator. The warp's 32 partial sums are reduced by the caller.
 *
 * What a sub-block contributes, by kind (d_x, s_x: the Q8_1 block's d and s = d_x * sum(u)):
 *   PLAIN   dw * d_x * sum_i v.u                      (Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS, IQ3_*,
 *                                                      IQ2_XXS, IQ1_S, MXFP4)
 *   MIN     dw * d_x * sum_i v.u + mw * s_x           (Q4_1, Q5_1, Q4_K, Q5_K: w = a*q + b)
 *   HALVES  dw * d_x * (sc0 * sum_lo + sc1 * sum_hi)  (Q3_K, Q6_K, IQ2_XS, IQ2_S, IQ1_M: scales
 *                                                      per 16 weights)
 *   Q2K     d_x * (dw * (sc0 sum_lo + sc1 sum_hi) - mw * (m0 U_lo + m1 U_hi))
 *           where sum_lo is over words 0..3 (weights 0..15), U = integer sums of the activation
 *           quants (mins per 16 weights, so s_x does not serve).
 * Offsets like Q4_0's -8 are applied to the bytes (__vsub4) so the integer sum is exact.
 *
 * Weight loads are 16-bit (blocks are only 2-byte aligned in general: 18, 22, 34, 110, 210
 * bytes), through the read-only cache. Q8_0 rows with 16-byte aligned strides (the dense
 * projections of every model we bench) go through shared memory instead: st_k_mmv_q8_0s.
 * The IQ2 / IQ3 / IQ1 / MXFP4 decoders (codebooks, signs) are in iq_decode.cuh. */
#ifndef STRATA_CUDA_MMV_CUH
#define STRATA_CUDA_MMV_CUH

#include "quantize.cuh"

/* ---- helpers -------------------------------------------------------------------------------- */

static __device__ __forceinline__ uint32_t st_mmv_ld16(const uint8_t *p) {
    return __ldg((const unsigned short *)p);
}
/* Four bytes at a 2-byte aligned address, little-endian. */
static __device__ __forceinline__ uint32_t st_mmv_ld32(const uint8_t *p) {
    return st_mmv_ld16(p) | (st_mmv_ld16(p + 2) << 16);
}
static __device__ __forceinline__ uint32_t st_mmv_ld8(const uint8_t *p) { return __ldg(p); }
static __device__ __forceinline__ float st_mmv_f16(const uint8_t *p) {
    return st_dev_fp16(st_mmv_ld16(p));
}

/* Bits 0..3 of b moved to bit 4 of bytes 0..3 (the fifth bit of four 5-bit quants). */
static __device__ __forceinline__ uint32_t st_mmv_bit4(uint32_t b) {
    return ((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25);
}

/* Four IQ4_NL levels for the four indices (0..15) in the bytes of idx, as int8 bytes. The 16
 * levels -127 -104 -83 -65 -49 -35 -22 -10 | 1 13 25 38 53 69 89 113 are packed four to a word;
 * __byte_perm picks by the low 3 bits of each index from each half, bit 3 chooses the half. */
static __device__ __forceinline__ int st_mmv_iq4nl4(uint32_t idx) {
    const uint32_t sel = (idx & 0x7u) | ((idx >> 4) & 0x70u) | ((idx >> 8) & 0x700u) |
                         ((idx >> 12) & 0x7000u);
    const uint32_t lo = __byte_perm(0xbfad9881u, 0xf6eaddcfu, sel);
    const uint32_t hi = __byte_perm(0x26190d01u, 0x71594535u, sel);
    const uint32_t m = ((idx >> 3) & 0x01010101u) * 0xFFu; /* 0xFF in bytes whose index >= 8 */
    return (int)((hi & m) | (lo & ~m));
}

/* ---- weight decoders ------------------------------------------------------------------------ */

enum { ST_MMV_PLAIN = 0, ST_MMV_MIN = 1, ST_MMV_HALVES = 2, ST_MMV_Q2K = 3 };

/* One decoded sub-block of 32 weights (fields unused by a kind stay unset). */
struct st_mmv_w {
    int v[8];
    float dw, mw;
    int sc0, sc1, m0, m1;
};

/* Each decoder: QK (weights per block), BYTES (block size), KIND, and decode(blk, sub, w) for
 * sub-block sub (0 .. QK/32 - 1) of the block at blk. Layouts and formulas: blocks.h and
 * c/format/quant/dequant.c. */

struct st_mmv_q4_0 {
    static constexpr int QK = QK4_0, BYTES = (int)sizeof(block_q4_0), KIND = ST_MMV_PLAIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int, st_mmv_w &w) {
        w.dw = st_mmv_f16(b);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t q = st_mmv_ld32(b + 2 + 4 * i);
            w.v[i] = (int)__vsub4(q & 0x0F0F0F0Fu, 0x08080808u);
            w.v[i + 4] = (int)__vsub4((q >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        }
    }
};

struct st_mmv_q4_1 {
    static constexpr int QK = QK4_1, BYTES = (int)sizeof(block_q4_1), KIND = ST_MMV_MIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int, st_mmv_w &w) {
        w.dw = st_mmv_f16(b);
        w.mw = st_mmv_f16(b + 2);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t q = st_mmv_ld32(b + 4 + 4 * i);
            w.v[i] = (int)(q & 0x0F0F0F0Fu);
            w.v[i + 4] = (int)((q >> 4) & 0x0F0F0F0Fu);
        }
    }
};

/* Q5_0 / Q5_1: fifth bit of weight e is bit e of the u32 qh. */
static __device__ __forceinline__ void st_mmv_q5_words(const uint8_t *qh_p, const uint8_t *qs,
                                                       uint32_t off, st_mmv_w &w) {
    const uint32_t qh = st_mmv_ld32(qh_p);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t q = st_mmv_ld32(qs + 4 * i);
        const uint32_t lo = (q & 0x0F0F0F0Fu) | st_mmv_bit4((qh >> (4 * i)) & 0xFu);
        const uint32_t hi = ((q >> 4) & 0x0F0F0F0Fu) | st_mmv_bit4((qh >> (16 + 4 * i)) & 0xFu);
        w.v[i] = (int)__vsub4(lo, off);
        w.v[i + 4] = (int)__vsub4(hi, off);
    }
}

struct st_mmv_q5_0 {
    static constexpr int QK = QK5_0, BYTES = (int)sizeof(block_q5_0), KIND = ST_MMV_PLAIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int, st_mmv_w &w) {
        w.dw = st_mmv_f16(b);
        st_mmv_q5_words(b + 2, b + 6, 0x10101010u, w);
    }
};

struct st_mmv_q5_1 {
    static constexpr int QK = QK5_1, BYTES = (int)sizeof(block_q5_1), KIND = ST_MMV_MIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int, st_mmv_w &w) {
        w.dw = st_mmv_f16(b);
        w.mw = st_mmv_f16(b + 2);
        st_mmv_q5_words(b + 4, b + 8, 0u, w);
    }
};

struct st_mmv_q8_0 {
    static constexpr int QK = QK8_0, BYTES = (int)sizeof(block_q8_0), KIND = ST_MMV_PLAIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int, st_mmv_w &w) {
        w.dw = st_mmv_f16(b);
#pragma unroll
        for (int i = 0; i < 8; i++) w.v[i] = (int)st_mmv_ld32(b + 2 + 4 * i);
    }
};

struct st_mmv_iq4_nl {
    static constexpr int QK = QK4_NL, BYTES = (int)sizeof(block_iq4_nl), KIND = ST_MMV_PLAIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int, st_mmv_w &w) {
        w.dw = st_mmv_f16(b);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t q = st_mmv_ld32(b + 2 + 4 * i);
            w.v[i] = st_mmv_iq4nl4(q & 0x0F0F0F0Fu);
            w.v[i + 4] = st_mmv_iq4nl4((q >> 4) & 0x0F0F0F0Fu);
        }
    }
};

/* Q2_K (84 bytes: scales[16], qs[64] at 16, d at 80, dmin at 82). Sub-block p = 4c + s holds
 * weights 32p + l = 128c + 32s + l: bits 2s of qs[32c + l]; scale/min bytes 2p (l < 16) and 2p+1. */
struct st_mmv_q2_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q2_K), KIND = ST_MMV_Q2K;
    static __device__ __forceinline__ void decode(const uint8_t *b, int p, st_mmv_w &w) {
        const int c = p >> 2, s = p & 3;
        const uint8_t *qs = b + 16 + 32 * c;
#pragma unroll
        for (int i = 0; i < 8; i++) w.v[i] = (int)((st_mmv_ld32(qs + 4 * i) >> (2 * s)) & 0x03030303u);
        const uint32_t sc = st_mmv_ld16(b + 2 * p); /* bytes 2p, 2p+1 */
        w.sc0 = (int)(sc & 0xF);
        w.m0 = (int)((sc >> 4) & 0xF);
        w.sc1 = (int)((sc >> 8) & 0xF);
        w.m1 = (int)((sc >> 12) & 0xF);
        w.dw = st_mmv_f16(b + 80);
        w.mw = st_mmv_f16(b + 82);
    }
};

/* Q3_K (110 bytes: hmask[32], qs[64] at 32, scales[12] at 96, d at 108). Sub-block p = 4c + s:
 * low bits as Q2_K, high bit = bit p of hmask[l]; q = low - (high ? 0 : 4). 6-bit scale j
 * (offset 32): low 4 bits nibble j / 8 of scales[j % 8], high 2 bits bits 2(j / 4) of
 * scales[8 + j % 4]. */
static __device__ __forceinline__ int st_mmv_q3k_scale(const uint8_t *sc, int j) {
    const uint32_t lo = (st_mmv_ld8(sc + (j & 7)) >> (4 * (j >> 3))) & 0xFu;
    const uint32_t hi = (st_mmv_ld8(sc + 8 + (j & 3)) >> (2 * (j >> 2))) & 3u;
    return (int)(lo | (hi << 4)) - 32;
}

struct st_mmv_q3_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q3_K), KIND = ST_MMV_HALVES;
    static __device__ __forceinline__ void decode(const uint8_t *b, int p, st_mmv_w &w) {
        const int c = p >> 2, s = p & 3;
        const uint8_t *qs = b + 32 + 32 * c;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t lo = (st_mmv_ld32(qs + 4 * i) >> (2 * s)) & 0x03030303u;
            const uint32_t nohi = (~(st_mmv_ld32(b + 4 * i) >> p)) & 0x01010101u;
            w.v[i] = (int)__vsub4(lo, nohi << 2);
        }
        w.sc0 = st_mmv_q3k_scale(b + 96, 2 * p);
        w.sc1 = st_mmv_q3k_scale(b + 96, 2 * p + 1);
        w.dw = st_mmv_f16(b + 108);
    }
};

/* Q4_K / Q5_K 6-bit scale and min of sub-block j (as st_get_scale_min_k4). */
static __device__ __forceinline__ void st_mmv_scale_min_k4(const uint8_t *q, int j, int &sc, int &m) {
    if (j < 4) {
        sc = (int)(st_mmv_ld8(q + j) & 63u);
        m = (int)(st_mmv_ld8(q + j + 4) & 63u);
    } else {
        const uint32_t a = st_mmv_ld8(q + j + 4);
        sc = (int)((a & 0xFu) | ((st_mmv_ld8(q + j - 4) >> 6) << 4));
        m = (int)((a >> 4) | ((st_mmv_ld8(q + j) >> 6) << 4));
    }
}

/* Q4_K (144 bytes: d, dmin, scales[12] at 4, qs[128] at 16). Sub-block p = 2c + h: nibble h of
 * qs[32c + l]. w = (d * sc) * q - dmin * m. */
struct st_mmv_q4_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q4_K), KIND = ST_MMV_MIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int p, st_mmv_w &w) {
        const int c = p >> 1, h = p & 1;
        const uint8_t *qs = b + 16 + 32 * c;
#pragma unroll
        for (int i = 0; i < 8; i++) w.v[i] = (int)((st_mmv_ld32(qs + 4 * i) >> (4 * h)) & 0x0F0F0F0Fu);
        int sc, m;
        st_mmv_scale_min_k4(b + 4, p, sc, m);
        w.dw = st_mmv_f16(b) * (float)sc;
        w.mw = -(st_mmv_f16(b + 2) * (float)m);
    }
};

/* Q5_K (176 bytes: d, dmin, scales[12] at 4, qh[32] at 16, qs[128] at 48): as Q4_K plus bit p
 * of qh[l] as the fifth bit. */
struct st_mmv_q5_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q5_K), KIND = ST_MMV_MIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int p, st_mmv_w &w) {
        const int c = p >> 1, h = p & 1;
        const uint8_t *qs = b + 48 + 32 * c;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t lo = (st_mmv_ld32(qs + 4 * i) >> (4 * h)) & 0x0F0F0F0Fu;
            const uint32_t hi = ((st_mmv_ld32(b + 16 + 4 * i) >> p) & 0x01010101u) << 4;
            w.v[i] = (int)(lo | hi);
        }
        int sc, m;
        st_mmv_scale_min_k4(b + 4, p, sc, m);
        w.dw = st_mmv_f16(b) * (float)sc;
        w.mw = -(st_mmv_f16(b + 2) * (float)m);
    }
};

/* Q6_K (210 bytes: ql[128], qh[64] at 128, int8 scales[16] at 192, d at 208). Sub-block
 * p = 4c + s holds weights 128c + 32s + l: low nibble (s / 2) of ql[64c + 32(s % 2) + l], high
 * 2 bits at 2s of qh[32c + l]; q = (low | high << 4) - 32; scales 2p and 2p + 1. */
struct st_mmv_q6_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q6_K), KIND = ST_MMV_HALVES;
    static __device__ __forceinline__ void decode(const uint8_t *b, int p, st_mmv_w &w) {
        const int c = p >> 2, s = p & 3;
        const uint8_t *ql = b + 64 * c + 32 * (s & 1), *qh = b + 128 + 32 * c;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t lo = (st_mmv_ld32(ql + 4 * i) >> (4 * (s >> 1))) & 0x0F0F0F0Fu;
            const uint32_t hi = ((st_mmv_ld32(qh + 4 * i) >> (2 * s)) & 0x03030303u) << 4;
            w.v[i] = (int)__vsub4(lo | hi, 0x20202020u);
        }
        const uint32_t sc = st_mmv_ld16(b + 192 + 2 * p);
        w.sc0 = (int)(int8_t)(sc & 0xFF);
        w.sc1 = (int)(int8_t)(sc >> 8);
        w.dw = st_mmv_f16(b + 208);
    }
};

/* IQ4_XS (136 bytes: d, scales_h (u16) at 2, scales_l[4] at 4, qs[128] at 8). Sub-block j:
 * weight 16h + l is nibble h of qs[16j + l]; scale (6 bits, offset 32) low nibble j % 2 of
 * scales_l[j / 2], high bits 2j of scales_h. */
struct st_mmv_iq4_xs {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq4_xs), KIND = ST_MMV_PLAIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int j, st_mmv_w &w) {
        const uint8_t *qs = b + 8 + 16 * j;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t q = st_mmv_ld32(qs + 4 * i);
            w.v[i] = st_mmv_iq4nl4(q & 0x0F0F0F0Fu);
            w.v[i + 4] = st_mmv_iq4nl4((q >> 4) & 0x0F0F0F0Fu);
        }
        const uint32_t lo = (st_mmv_ld8(b + 4 + (j >> 1)) >> (4 * (j & 1))) & 0xFu;
        const uint32_t hi = (st_mmv_ld16(b + 2) >> (2 * j)) & 3u;
        w.dw = st_mmv_f16(b) * (float)((int)(lo | (hi << 4)) - 32);
    }
};

/* ---- combine and row loops ------------------------------------------------------------------ */

/* acc[c] += contribution of the decoded sub-block w against activation block xb[c * xstride],
 * for c < min(NC, ncols). */
template <int KIND, int NC>
static __device__ __forceinline__ void st_mmv_combine(const st_mmv_w &w, const block_q8_1 *xb,
                                                      int xstride, int ncols, float acc[NC]) {
#pragma unroll
    for (int c = 0; c < NC; c++) {
        if (c < ncols) {
            st_q8_1_vals x;
            st_q8_1_load(xb + (int64_t)c * xstride, x);
            int lo = 0, hi = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) lo = __dp4a(w.v[i], x.u[i], lo);
#pragma unroll
            for (int i = 4; i < 8; i++) hi = __dp4a(w.v[i], x.u[i], hi);
            if (KIND == ST_MMV_PLAIN) {
                acc[c] += w.dw * x.d * (float)(lo + hi);
            } else if (KIND == ST_MMV_MIN) {
                acc[c] += w.dw * x.d * (float)(lo + hi) + w.mw * x.s;
            } else if (KIND == ST_MMV_HALVES) {
                acc[c] += w.dw * x.d * (float)(w.sc0 * lo + w.sc1 * hi);
            } else { /* ST_MMV_Q2K */
                int ulo = 0, uhi = 0;
#pragma unroll
                for (int i = 0; i < 4; i++) ulo = __dp4a(0x01010101, x.u[i], ulo);
#pragma unroll
                for (int i = 4; i < 8; i++) uhi = __dp4a(0x01010101, x.u[i], uhi);
                acc[c] += x.d * (w.dw * (float)(w.sc0 * lo + w.sc1 * hi) -
                                 w.mw * (float)(w.m0 * ulo + w.m1 * uhi));
            }
        }
    }
}

/* This lane's share of one row of quantized weights (nsub = ne0 / 32 sub-blocks) against ncols
 * Q8_1 activation rows (column c's blocks start at xq + c * nsub). */
template <class T, int NC>
static __device__ __forceinline__ void st_mmv_row_q(const uint8_t *__restrict__ row, int nsub,
                                                    const block_q8_1 *__restrict__ xq, int ncols,
                                                    int lane, float acc[NC]) {
    constexpr int SUBS = T::QK / 32;
#pragma unroll 2 /* the next sub-block's loads in flight with this one's (same sums, same order) */
    for (int p = lane; p < nsub; p += 32) {
        const int blk = p / SUBS, sub = p % SUBS;
        st_mmv_w w;
        T::decode(row + (int64_t)blk * T::BYTES, sub, w);
        st_mmv_combine<T::KIND, NC>(w, xq + p, nsub, ncols, acc);
    }
}

/* Float weights: V elements per 16-byte chunk; chunk(row, ci, v) loads chunk ci (16-byte
 * aligned), one(row, i) element i. */
struct st_mmv_f32 {
    static constexpr int V = 4;
    static __device__ __forceinline__ float one(const uint8_t *row, int i) {
        return __ldg((const float *)row + i);
    }
    static __device__ __forceinline__ void chunk(const uint8_t *row, int ci, float v[4]) {
        const float4 f = __ldg((const float4 *)row + ci);
        v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
    }
};

template <bool BF>
struct st_mmv_half {
    static constexpr int V = 8;
    static __device__ __forceinline__ float cvt(uint32_t h) {
        return BF ? st_dev_bf16(h) : st_dev_fp16(h);
    }
    static __device__ __forceinline__ float one(const uint8_t *row, int i) {
        return cvt(__ldg((const unsigned short *)row + i));
    }
    static __device__ __forceinline__ void chunk(const uint8_t *row, int ci, float v[8]) {
        const uint4 q = __ldg((const uint4 *)row + ci);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[2 * k] = cvt(w[k] & 0xFFFFu);
            v[2 * k + 1] = cvt(w[k] >> 16);
        }
    }
};
typedef st_mmv_half<false> st_mmv_f16w;
typedef st_mmv_half<true> st_mmv_bf16w;

/* This lane's share (every STRIDE-th chunk from chunk `lane`) of one row of ne0 float weights
 * against ncols f32 rows of x (row c at x + c * ne0). nvec > 0: the first nvec * V elements go by 16-byte chunks (row and x rows
 * 16-byte aligned), the rest one by one; nvec = 0: all one by one. fp32 FMA accumulation. */
/* One chunk ci (F::V weights in w) against the ncols f32 rows of x: fp32 FMAs in element order.
 * x is read for every column (a missing one reads the last: in bounds) so that the loads do not
 * wait behind a branch; only the sums are conditional. */
template <class F, int NC>
static __device__ __forceinline__ void st_mmv_chunk_fma(const float w[F::V], const float *__restrict__ x,
                                                        int ne0, int ci, int ncols, float acc[NC]) {
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const int cx = c < ncols ? c : ncols - 1;
        const float4 *xp = (const float4 *)(x + (int64_t)cx * ne0) + ci * (F::V / 4);
#pragma unroll
        for (int k = 0; k < F::V / 4; k++) {
            const float4 xv = __ldg(xp + k);
            if (c == 0 || c < ncols) { /* ncols >= 1 (st_mmv_check) */
                acc[c] = fmaf(w[4 * k], xv.x, acc[c]);
                acc[c] = fmaf(w[4 * k + 1], xv.y, acc[c]);
                acc[c] = fmaf(w[4 * k + 2], xv.z, acc[c]);
                acc[c] = fmaf(w[4 * k + 3], xv.w, acc[c]);
            }
        }
    }
}

/* The elements past the nvec chunks, one by one (this lane's: every STRIDE-th from lane). */
template <class F, int NC, int STRIDE>
static __device__ __forceinline__ void st_mmv_row_f_tail(const uint8_t *__restrict__ row, int ne0, int nvec,
                                                         const float *__restrict__ x, int ncols, int lane,
                                                         float acc[NC]) {
    for (int i = nvec * F::V + lane; i < ne0; i += STRIDE) {
        const float wv = F::one(row, i);
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (c < ncols) acc[c] = fmaf(wv, __ldg(x + (int64_t)c * ne0 + i), acc[c]);
    }
}

template <class F, int NC, int STRIDE = 32>
static __device__ __forceinline__ void st_mmv_row_f(const uint8_t *__restrict__ row, int ne0,
                                                    int nvec, const float *__restrict__ x,
                                                    int ncols, int lane, float acc[NC]) {
    /* unrolled so that several chunks' loads are in flight at once (a 2048-wide f32 row is 16
     * chunks per lane: one dependent round trip each made the router GEMV 9 us); the sums keep
     * their order */
#pragma unroll 4
    for (int ci = lane; ci < nvec; ci += STRIDE) {
        float w[F::V];
        F::chunk(row, ci, w);
        st_mmv_chunk_fma<F, NC>(w, x, ne0, ci, ncols, acc);
    }
    st_mmv_row_f_tail<F, NC, STRIDE>(row, ne0, nvec, x, ncols, lane, acc);
}

static __device__ __forceinline__ float st_mmv_silu(float g) { return g / (1.0f + expf(-g)); }

/* Sum over the warp; every lane gets the total. */
static __device__ __forceinline__ float st_mmv_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Float weights, few rows (the router: 128 x 2048 f32 would be 32 blocks of st_k_mmv_f, each
 * lane 16 dependent chunks): ST_MMV_SPLIT warps share a row, each every 8th chunk of it; the
 * warps' sums are added in warp order. Deterministic; not the bits of st_k_mmv_f (another order).
 * The body of st_k_mmv_f_split (mmv.cu) and of the MoE's one-token router (moe_router.cu): row =
 * blockIdx.x, blockDim.x = ST_MMV_SPLIT * 32; opens with st_pdl_enter. */
#define ST_MMV_SPLIT 8
#ifndef ST_MMV_SPLIT_PF
#define ST_MMV_SPLIT_PF 4 /* chunks a thread fetched before the wait (n_embd up to 4096 f32); 0: none (A/B) */
#endif
template <class F, int NC>
static __device__ __forceinline__ void
st_mmv_f_split_row(const uint8_t *__restrict__ w0, size_t rb0, const uint8_t *__restrict__ w1, size_t rb1,
                   int nrows, int ne0, int nvec, const float *__restrict__ x, int ncols,
                   float *__restrict__ y) {
    __shared__ float red[2][ST_MMV_SPLIT][NC];
    constexpr int TH = ST_MMV_SPLIT * 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row = blockIdx.x;
    const uint8_t *wr = w0 + (size_t)row * rb0;
    float a[NC], b[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) a[c] = b[c] = 0.0f;
    /* A row of up to ST_MMV_SPLIT_PF chunks a thread (the router's 2048 f32: 2) is loaded before
     * griddepcontrol.wait: the weights are not written by the kernels this one waits for, so
     * their fetch overlaps the residual norm before it. The sums as st_mmv_row_f's (the same chunk
     * and tail helpers, in the same order), same bits. */
    constexpr int PF = ST_MMV_SPLIT_PF > 0 ? ST_MMV_SPLIT_PF : 1;
    if (ST_MMV_SPLIT_PF > 0 && !w1 && nvec > 0 && nvec <= PF * TH) {
        float wv[PF][F::V];
#pragma unroll
        for (int k = 0; k < PF; k++)
            if ((int)threadIdx.x + TH * k < nvec) F::chunk(wr, (int)threadIdx.x + TH * k, wv[k]);
        st_pdl_enter();
#pragma unroll
        for (int k = 0; k < PF; k++) {
            const int ci = (int)threadIdx.x + TH * k;
            if (ci >= nvec) break;
            st_mmv_chunk_fma<F, NC>(wv[k], x, ne0, ci, ncols, a);
        }
        st_mmv_row_f_tail<F, NC, TH>(wr, ne0, nvec, x, ncols, (int)threadIdx.x, a);
    } else {
        st_pdl_enter();
        st_mmv_row_f<F, NC, TH>(wr, ne0, nvec, x, ncols, (int)threadIdx.x, a);
        if (w1) st_mmv_row_f<F, NC, TH>(w1 + (size_t)row * rb1, ne0, nvec, x, ncols, (int)threadIdx.x, b);
    }
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const float sa = st_mmv_warp_sum(a[c]), sb = w1 ? st_mmv_warp_sum(b[c]) : 0.0f;
        if (lane == 0) {
            red[0][warp][c] = sa;
            red[1][warp][c] = sb;
        }
    }
    __syncthreads();
    if ((int)threadIdx.x < ncols) {
        const int c = (int)threadIdx.x;
        float sa = 0.0f, sb = 0.0f;
        for (int k = 0; k < ST_MMV_SPLIT; k++) {
            sa += red[0][k][c];
            sb += red[1][k][c];
        }
        y[(int64_t)c * nrows + row] = w1 ? st_mmv_silu(sa) * sb : sa;
    }
}

#endif /* STRATA_CUDA_MMV_CUH */
