/* dot_avx2.c - AVX2 + FMA + F16C dot-product kernels for every weight type with a dot product.
 * Compiled with -mavx2 -mfma -mf16c (the Makefile keys on "_avx2" in the name) and entered only
 * after dot.c has checked the CPU, so nothing here runs on a CPU without those extensions.
 *
 * Quantized types: integer products with vpmaddubsw (unsigned 8-bit x signed 8-bit -> pairs of
 * 16-bit sums) and vpmaddwd (16-bit x 16-bit scales -> 32-bit), one float FMA per block. Signed
 * weights use the sign trick |w| x (sign(w) * y). Bounds that keep vpmaddubsw from saturating:
 * activations are in [-127, 127] (q8_0/q8_K quantizers), so a pair is at most 2*128*127 = 32512.
 *
 * Offsets: the biased formats (Q3_K's -4, Q6_K's -32) are computed with unsigned quants and the
 * bias removed through the activation block sums (bsums): sum sc*(q - c)*y = sum sc*q*y - c*sum
 * sc_g*bsum_g. Q2_K/Q4_K/Q5_K mins use the bsums the same way. Q4_1/Q5_1 mins use the q8_0 block
 * sum of quants (see dot_scalar.c).
 *
 * Q4_0, Q8_0, Q4_K, Q5_K and Q6_K follow the exact-block-sum arithmetic of dot_avx512.c (each
 * (super-)block's integer sums reduced exactly, eight at a time, then the same float steps in the
 * same order), so they give the AVX-512 kernels' bits: the CPU's results for those types do not
 * depend on the ISA level, and the GPU's CPU-exact kernels (c/cuda/moe_exact.cu) match them.
 * Their kernels take 1..4 activation rows (NC), the single-row entries being NC = 1, so the
 * several-row entries (st_vec_dot_n_fn) give the same bits by construction. */
#include "dot.h"
#include "dot_avx2.h"
#include "quant.h"

#include <immintrin.h>
#include <math.h>

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

#define H2F(h) _cvtsh_ss(h)

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hsum_ps128(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* 16 bytes of nibbles -> 32 bytes: low nibbles of bytes 0..15, then their high nibbles. */
static inline __m256i nibbles32(const uint8_t *qs) {
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* 32 bits -> 32 bytes: byte i is 0xFF where bit i is set, else 0. */
static inline __m256i bits_to_mask32(uint32_t bits) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                           0x0101010101010101LL, 0x0000000000000000LL);
    const __m256i bit = _mm256_set1_epi64x((long long)0x7fbfdfeff7fbfdfeULL); /* byte j: ~(1<<j) */
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf); /* byte i: byte i/8 */
    return _mm256_cmpeq_epi8(_mm256_or_si256(v, bit), _mm256_set1_epi64x(-1));
}

/* Signed x signed: 8 int32, each the sum of 4 products x_i*y_i (y must not be -128). */
static inline __m256i dot_i8(__m256i x, __m256i y) {
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* Same, but the 16 pair sums are weighted by the 16-bit scales in s before widening. */
static inline __m256i dot_i8_scaled(__m256i x, __m256i y, __m256i s) {
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, s);
}

/* Unsigned x signed: 8 int32 sums of 4 products. */
static inline __m256i dot_u8(__m256i u, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

/* 16 int8 scales -> for 32-weight group t (covering scales 2t and 2t+1): 16-bit scale 2t in the
 * low 128-bit lane (weights 0..15) and scale 2t+1 in the high lane (weights 16..31). */
static inline __m256i group_scales(__m128i scales8, int t) {
    const long long lo = 0x0101010101010101LL * (2 * t), hi = 0x0101010101010101LL * (2 * t + 1);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales8, _mm_set_epi64x(hi, lo)));
}

/* ---------------------------------------------------------------------------------------------
 * Float weights (f32 activations)
 * ------------------------------------------------------------------------------------------- */

static void dot_f32(int64_t n, float *out, const void *w, const void *xq) {
    const float *a = w, *x = xq;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(x + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(x + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(x + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), s0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) sum += a[i] * x[i];
    *out = sum;
}

static inline __m256 load_f16x8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static void dot_f16(int64_t n, float *out, const void *w, const void *xq) {
    const uint16_t *a = w;
    const float *x = xq;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(load_f16x8(a + i), _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(load_f16x8(a + i + 8), _mm256_loadu_ps(x + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_f16x8(a + i + 16), _mm256_loadu_ps(x + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_f16x8(a + i + 24), _mm256_loadu_ps(x + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load_f16x8(a + i), _mm256_loadu_ps(x + i), s0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) sum += H2F(a[i]) * x[i];
    *out = sum;
}

static inline __m256 load_bf16x8(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static void dot_bf16(int64_t n, float *out, const void *w, const void *xq) {
    const uint16_t *a = w;
    const float *x = xq;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(load_bf16x8(a + i), _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(load_bf16x8(a + i + 8), _mm256_loadu_ps(x + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_bf16x8(a + i + 16), _mm256_loadu_ps(x + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_bf16x8(a + i + 24), _mm256_loadu_ps(x + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load_bf16x8(a + i), _mm256_loadu_ps(x + i), s0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) sum += st_bf16_to_f32(a[i]) * x[i];
    *out = sum;
}

/* ---------------------------------------------------------------------------------------------
 * 32-weight blocks (q8_0 activations); two blocks per step with two accumulators
 * ------------------------------------------------------------------------------------------- */

static inline __m256 blk_scale(uint16_t dw, uint16_t dx) { return _mm256_set1_ps(H2F(dw) * H2F(dx)); }

static inline __m256i q4_0_quants(const block_q4_0 *b) {
    return _mm256_sub_epi8(nibbles32(b->qs), _mm256_set1_epi8(8));
}

/* The 8 fp16 at p, p + stride, ..., p + 7 stride (bytes) -> 8 floats. */
static inline __m256 h8_strided(const uint8_t *p, size_t stride) {
    __m128i h = _mm_cvtsi32_si128(st_load_u16(p));
    h = _mm_insert_epi16(h, st_load_u16(p + stride), 1);
    h = _mm_insert_epi16(h, st_load_u16(p + 2 * stride), 2);
    h = _mm_insert_epi16(h, st_load_u16(p + 3 * stride), 3);
    h = _mm_insert_epi16(h, st_load_u16(p + 4 * stride), 4);
    h = _mm_insert_epi16(h, st_load_u16(p + 5 * stride), 5);
    h = _mm_insert_epi16(h, st_load_u16(p + 6 * stride), 6);
    h = _mm_insert_epi16(h, st_load_u16(p + 7 * stride), 7);
    return _mm256_cvtph_ps(h);
}

/* Block b's signed quants (Q4_0 when q4, else Q8_0) and its fp16 scale. */
static inline __m256i s16_quants(const void *w, int64_t b, const int q4) {
    return q4 ? q4_0_quants((const block_q4_0 *)w + b) : load32(((const block_q8_0 *)w + b)->qs);
}
static inline uint16_t s16_d(const void *w, int64_t b, const int q4) {
    return q4 ? ((const block_q4_0 *)w)[b].d : ((const block_q8_0 *)w)[b].d;
}

/* Q8_0 / Q4_0 (q4 set) as dot_avx512.c, for NC = 1..4 activation rows ys bytes apart (the
 * single-row kernels are NC = 1): block b's exact sum S_b into accumulator b mod 16,
 * acc_k = fma(S_b, d_w * d_x, acc_k) in block order (eight blocks a step: accumulators 0-7, then
 * 8-15), then acc_k + acc_{k+8}, + 4 apart, + 2, + 1. A short last step's missing blocks count as
 * S 0 with scale 0 (the accumulators unchanged). A step's weight quants and scales are unpacked
 * once for all rows. */
static inline __attribute__((always_inline)) void dot_sum16(int64_t n, float *out, const void *w, const int q4,
                                                            const uint8_t *xq, size_t ys, const int NC) {
    const size_t wb = q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
    const int64_t nb = n / 32;
    __m256 acc[ST_DOT_MAX_COLS][2];
    for (int c = 0; c < NC; c++) acc[c][0] = acc[c][1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        __m256i wq[8];
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) wq[q] = s16_quants(w, i + q, q4);
        const __m256 dw = h8_strided((const uint8_t *)w + (size_t)i * wb, wb);
        const int h = (int)((i / 8) & 1);
        for (int c = 0; c < NC; c++) {
            const block_q8_0 *x = (const block_q8_0 *)(xq + (size_t)c * ys) + i;
            __m256i p[8];
#pragma GCC unroll 8
            for (int q = 0; q < 8; q++) p[q] = dot_i8(wq[q], load32(x[q].qs));
            /* d_w d_x of the eight blocks, each product rounded as a scalar one */
            const __m256 sc = _mm256_mul_ps(dw, h8_strided((const uint8_t *)x, sizeof(block_q8_0)));
            acc[c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(st_hsum8_i32(p)), sc, acc[c][h]);
        }
    }
    for (int c = 0; c < NC; c++) {
        if (i < nb) { /* the last 1..7 blocks */
            const block_q8_0 *x = (const block_q8_0 *)(xq + (size_t)c * ys);
            __m256i p[8];
            float sc[8];
            for (int q = 0; q < 8; q++) {
                p[q] = i + q < nb ? dot_i8(s16_quants(w, i + q, q4), load32(x[i + q].qs)) : _mm256_setzero_si256();
                sc[q] = i + q < nb ? H2F(s16_d(w, i + q, q4)) * H2F(x[i + q].d) : 0.0f;
            }
            const int h = (int)((i / 8) & 1);
            acc[c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(st_hsum8_i32(p)), _mm256_loadu_ps(sc), acc[c][h]);
        }
        out[c] = st_sum16_tree8(acc[c][0], acc[c][1]);
    }
}

static void dot_q8_0(int64_t n, float *out, const void *w, const void *xq) {
    dot_sum16(n, out, w, 0, xq, 0, 1);
}

static void dot_q4_0(int64_t n, float *out, const void *w, const void *xq) {
    dot_sum16(n, out, w, 1, xq, 0, 1);
}

/* Min term of Q4_1/Q5_1: m * dx * sum(y), accumulated per lane. */
static inline __m256 min_term(uint16_t m, uint16_t dx, __m256i y, __m256 acc) {
    __m256i sy = dot_u8(_mm256_set1_epi8(1), y);
    return _mm256_fmadd_ps(_mm256_set1_ps(H2F(m) * H2F(dx)), _mm256_cvtepi32_ps(sy), acc);
}

static void dot_q4_1(int64_t n, float *out, const void *w, const void *xq) {
    const block_q4_1 *b = w;
    const block_q8_0 *x = xq;
    const int64_t nb = n / QK4_1;
    __m256 acc = _mm256_setzero_ps(), accm = acc;
    for (int64_t i = 0; i < nb; i++) {
        __m256i y = load32(x[i].qs);
        __m256i p = dot_u8(nibbles32(b[i].qs), y);
        acc = _mm256_fmadd_ps(blk_scale(b[i].d, x[i].d), _mm256_cvtepi32_ps(p), acc);
        accm = min_term(b[i].m, x[i].d, y, accm);
    }
    *out = hsum_ps(_mm256_add_ps(acc, accm));
}

static void dot_q5_0(int64_t n, float *out, const void *w, const void *xq) {
    const block_q5_0 *b = w;
    const block_q8_0 *x = xq;
    const int64_t nb = n / QK5_0;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        /* a clear 5th bit makes the byte nibble | 0xF0 = nibble - 16; a set one leaves nibble */
        __m256i hi = _mm256_andnot_si256(bits_to_mask32(st_load_u32(b[i].qh)), _mm256_set1_epi8((char)0xF0));
        __m256i q = _mm256_or_si256(nibbles32(b[i].qs), hi);
        __m256i p = dot_i8(q, load32(x[i].qs));
        acc = _mm256_fmadd_ps(blk_scale(b[i].d, x[i].d), _mm256_cvtepi32_ps(p), acc);
    }
    *out = hsum_ps(acc);
}

static void dot_q5_1(int64_t n, float *out, const void *w, const void *xq) {
    const block_q5_1 *b = w;
    const block_q8_0 *x = xq;
    const int64_t nb = n / QK5_1;
    __m256 acc = _mm256_setzero_ps(), accm = acc;
    for (int64_t i = 0; i < nb; i++) {
        __m256i hi = _mm256_and_si256(bits_to_mask32(st_load_u32(b[i].qh)), _mm256_set1_epi8(0x10));
        __m256i q = _mm256_or_si256(nibbles32(b[i].qs), hi); /* 0..31 */
        __m256i y = load32(x[i].qs);
        __m256i p = dot_u8(q, y);
        acc = _mm256_fmadd_ps(blk_scale(b[i].d, x[i].d), _mm256_cvtepi32_ps(p), acc);
        accm = min_term(b[i].m, x[i].d, y, accm);
    }
    *out = hsum_ps(_mm256_add_ps(acc, accm));
}

static inline __m256i iq4nl_table(void) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)st_kvalues_iq4nl));
}

static void dot_iq4_nl(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq4_nl *b = w;
    const block_q8_0 *x = xq;
    const int64_t nb = n / QK4_NL;
    const __m256i table = iq4nl_table();
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256i q0 = _mm256_shuffle_epi8(table, nibbles32(b[i].qs));
        __m256i q1 = _mm256_shuffle_epi8(table, nibbles32(b[i + 1].qs));
        __m256i p0 = dot_i8(q0, load32(x[i].qs));
        __m256i p1 = dot_i8(q1, load32(x[i + 1].qs));
        acc0 = _mm256_fmadd_ps(blk_scale(b[i].d, x[i].d), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(blk_scale(b[i + 1].d, x[i + 1].d), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; i++) {
        __m256i q0 = _mm256_shuffle_epi8(table, nibbles32(b[i].qs));
        __m256i p0 = dot_i8(q0, load32(x[i].qs));
        acc0 = _mm256_fmadd_ps(blk_scale(b[i].d, x[i].d), _mm256_cvtepi32_ps(p0), acc0);
    }
    *out = hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* ---------------------------------------------------------------------------------------------
 * K-quants (q8_K activations)
 * ------------------------------------------------------------------------------------------- */

/* 8 int32 whose sum is sum_g scales16[g] * bsums[g] over the 16 groups of 16 weights. */
static inline __m256i bsums_dot(const int16_t *bsums, __m256i scales16) {
    return _mm256_madd_epi16(load32(bsums), scales16);
}

static void dot_q2_K(int64_t n, float *out, const void *w, const void *xq) {
    const block_q2_K *b = w;
    const block_q8_K *x = xq;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = x[i].d * H2F(b[i].d);
        const float dmin = -x[i].d * H2F(b[i].dmin);
        const __m128i sm = _mm_loadu_si128((const __m128i *)b[i].scales);
        const __m128i sc8 = _mm_and_si128(sm, _mm_set1_epi8(0x0F));
        const __m128i mn8 = _mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0x0F));
        __m256i mins = bsums_dot(x[i].bsums, _mm256_cvtepu8_epi16(mn8));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(mins), acc);

        const int8_t *y = x[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) { /* 128 weights: 32 bytes of 2-bit quants at 4 shifts */
            const __m256i qb = load32(b[i].qs + 32 * h);
            for (int j = 0; j < 4; j++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * j), m3);
                __m256i p = _mm256_maddubs_epi16(q, load32(y + 128 * h + 32 * j));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, group_scales(sc8, 4 * h + j)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = hsum_ps(acc);
}

/* The 16 Q3_K scales, unbiased to [-32, 31], as 16 int8. */
static inline __m128i q3_K_scales(const uint8_t *s) {
    const uint32_t a0 = st_load_u32(s), a1 = st_load_u32(s + 4), a2 = st_load_u32(s + 8);
    const uint32_t k4 = 0x0f0f0f0fu, k2 = 0x03030303u;
    const uint32_t s0 = (a0 & k4) | ((a2 & k2) << 4);               /* scales 0..3 */
    const uint32_t s1 = (a1 & k4) | (((a2 >> 2) & k2) << 4);        /* 4..7 */
    const uint32_t s2 = ((a0 >> 4) & k4) | (((a2 >> 4) & k2) << 4); /* 8..11 */
    const uint32_t s3 = ((a1 >> 4) & k4) | (((a2 >> 6) & k2) << 4); /* 12..15 */
    return _mm_sub_epi8(_mm_set_epi32((int)s3, (int)s2, (int)s1, (int)s0), _mm_set1_epi8(32));
}

static void dot_q3_K(int64_t n, float *out, const void *w, const void *xq) {
    const block_q3_K *b = w;
    const block_q8_K *x = xq;
    const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = x[i].d * H2F(b[i].d);
        const __m128i sc8 = q3_K_scales(b[i].scales);
        /* quants as q' = low | hbit << 2 in 0..7; q = q' - 4, removed via 4 * sum sc_g*bsum_g */
        __m256i off = bsums_dot(x[i].bsums, _mm256_cvtepi8_epi16(sc8));
        const int8_t *y = x[i].qs;
        __m256i hm = load32(b[i].hmask);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i qb = load32(b[i].qs + 32 * h);
            for (int j = 0; j < 4; j++) {
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * j), m3);
                __m256i hb = _mm256_slli_epi16(_mm256_and_si256(hm, m1), 2);
                hm = _mm256_srli_epi16(hm, 1); /* next group's bit to bit 0 (bits 1..7 are ours) */
                __m256i p = _mm256_maddubs_epi16(_mm256_or_si256(lo, hb), load32(y + 128 * h + 32 * j));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, group_scales(sc8, 4 * h + j)));
            }
        }
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 2));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = hsum_ps(acc);
}

/* Q4_K/Q5_K 12-byte scales -> 4 words: bytes 0..7 the 8 6-bit scales, bytes 8..15 the 8 mins. */
static inline __m128i k4_scales_mins(const uint8_t *s) {
    const uint32_t a0 = st_load_u32(s), a1 = st_load_u32(s + 4), a2 = st_load_u32(s + 8);
    const uint32_t k6 = 0x3f3f3f3fu, k4 = 0x0f0f0f0fu, k2 = 0x03030303u;
    const uint32_t sc_lo = a0 & k6;                                  /* scales 0..3 */
    const uint32_t sc_hi = (a2 & k4) | (((a0 >> 6) & k2) << 4);      /* scales 4..7 */
    const uint32_t mn_lo = a1 & k6;                                  /* mins 0..3 */
    const uint32_t mn_hi = ((a2 >> 4) & k4) | (((a1 >> 6) & k2) << 4); /* mins 4..7 */
    return _mm_set_epi32((int)mn_hi, (int)mn_lo, (int)sc_hi, (int)sc_lo);
}

/* Shared by Q4_K and Q5_K: 8 int32 summing to sum_j m_j * (bsums[2j] + bsums[2j+1]). */
static inline __m128i k4_min_dot(const int16_t *bsums, __m128i scmn) {
    const __m128i mins16 = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(scmn, scmn));
    const __m256i bs = load32(bsums);
    const __m128i pair = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    return _mm_madd_epi16(mins16, pair);
}

/* 16-bit scale j broadcast to all lanes of both halves. */
static inline __m256i bcast_scale16(__m256i scales16, int j) {
    return _mm256_shuffle_epi8(scales16, _mm256_set1_epi16((short)(0x0100 + 0x0202 * j)));
}

/* The K-quants' float steps, a super-block at a time: s's 8 lanes sum to the exact S, m's 4 to
 * the exact M (Q6_K: O); both reduced exactly (integer adds), each rounded once to float, and
 * acc = fma(S, dd, acc), accm = fma(M, ddm, accm) run together in lanes 0 and 1 of a (lanes 2 and
 * 3 carry S and M times 0). ddv = [dd, ddm, 0, 0]. The row's result is a[0] - a[1]. */
static inline __m128 ks_step(__m256i s, __m128i m, __m128 ddv, __m128 a) {
    const __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    __m128i h = _mm_hadd_epi32(t, m); /* [s01, s23, m01, m23] (each over both halves) */
    h = _mm_hadd_epi32(h, h);         /* [S, M, S, M] */
    return _mm_fmadd_ps(_mm_cvtepi32_ps(h), ddv, a);
}

/* [x_d * d, x_d * dmin, 0, 0] from the two fp16 at p (d, then dmin), each product as the scalar
 * kernels round it. */
static inline __m128 ks_factors(float xd, const uint16_t *p) {
    const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)st_load_u32(p)));
    return _mm_mul_ps(_mm_setr_ps(xd, xd, 0.0f, 0.0f), dm);
}

static inline float ks_result(__m128 a) {
    return _mm_cvtss_f32(a) - _mm_cvtss_f32(_mm_shuffle_ps(a, a, 1));
}

/* Q4_K / Q5_K (b5 set) as dot_avx512.c, for NC = 1..4 activation rows ys bytes apart (the
 * single-row kernels are NC = 1): per super-block the exact S = sum_j sc_j dot(u_j, x_j) and
 * M = sum_j m_j (bsums[2j] + bsums[2j+1]), then ks_step; the super-block's quants and scales are
 * unpacked once for all rows. */
static inline __attribute__((always_inline)) void dot_q45_K(int64_t n, float *out, const block_q4_K *b4,
                                                                 const block_q5_K *b5, const uint8_t *xq, size_t ys,
                                                                 const int NC) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(1);
    const int64_t nb = n / QK_K;
    __m128 a[ST_DOT_MAX_COLS];
    for (int c = 0; c < NC; c++) a[c] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *scales = b5 ? b5[i].scales : b4[i].scales, *qs = b5 ? b5[i].qs : b4[i].qs;
        const uint16_t *dm16 = b5 ? &b5[i].d : &b4[i].d; /* d, then dmin */
        const __m128i scmn = k4_scales_mins(scales);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scmn));
        __m256i hb = b5 ? load32(b5[i].qh) : _mm256_setzero_si256();
        __m256i sumi[ST_DOT_MAX_COLS];
        for (int c = 0; c < NC; c++) sumi[c] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i qb = load32(qs + 32 * j);
            __m256i lo = _mm256_and_si256(qb, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            if (b5) {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, m1), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), m1), 4));
                hb = _mm256_srli_epi16(hb, 2);
            }
            const __m256i s0 = bcast_scale16(sc16, 2 * j), s1 = bcast_scale16(sc16, 2 * j + 1);
            for (int c = 0; c < NC; c++) {
                const int8_t *y = ((const block_q8_K *)(xq + (size_t)c * ys))[i].qs;
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(y + 64 * j)), s0);
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(y + 64 * j + 32)), s1);
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(p0, p1));
            }
        }
        for (int c = 0; c < NC; c++) {
            const block_q8_K *x = (const block_q8_K *)(xq + (size_t)c * ys) + i;
            a[c] = ks_step(sumi[c], k4_min_dot(x->bsums, scmn), ks_factors(x->d, dm16), a[c]);
        }
    }
    for (int c = 0; c < NC; c++) out[c] = ks_result(a[c]);
}

/* Q6_K as dot_avx512.c, for NC = 1..4 activation rows: unsigned quants u = q + 32; per
 * super-block the exact S = sum_g sc_g dot(u_g, x_g) and O = sum_g sc_g bsum_g, then ks_step
 * with the factors d_x d and 32 (d_x d). */
static inline __attribute__((always_inline)) void dot_q6_K_rows(int64_t n, float *out, const block_q6_K *b,
                                                                const uint8_t *xq, size_t ys, const int NC) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    const int64_t nb = n / QK_K;
    __m128 a[ST_DOT_MAX_COLS];
    for (int c = 0; c < NC; c++) a[c] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const float dw = H2F(b[i].d);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)b[i].scales);
        __m256i sumi[ST_DOT_MAX_COLS];
        for (int c = 0; c < NC; c++) sumi[c] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i la = load32(b[i].ql + 64 * h), lb = load32(b[i].ql + 64 * h + 32);
            const __m256i qh = load32(b[i].qh + 32 * h);
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(la, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4)),
                _mm256_or_si256(_mm256_and_si256(lb, m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(la, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lb, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4))};
            for (int c = 0; c < NC; c++) {
                const int8_t *y = ((const block_q8_K *)(xq + (size_t)c * ys))[i].qs + 128 * h;
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[0], load32(y)), group_scales(sc8, 4 * h + 0));
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[1], load32(y + 32)), group_scales(sc8, 4 * h + 1));
                __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[2], load32(y + 64)), group_scales(sc8, 4 * h + 2));
                __m256i p3 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[3], load32(y + 96)), group_scales(sc8, 4 * h + 3));
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3)));
            }
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        for (int c = 0; c < NC; c++) {
            const block_q8_K *x = (const block_q8_K *)(xq + (size_t)c * ys) + i;
            const float dd = x->d * dw;
            const __m256i o = bsums_dot(x->bsums, sc16);
            a[c] = ks_step(sumi[c], _mm_add_epi32(_mm256_castsi256_si128(o), _mm256_extracti128_si256(o, 1)),
                           _mm_setr_ps(dd, 32.0f * dd, 0.0f, 0.0f), a[c]);
        }
    }
    for (int c = 0; c < NC; c++) out[c] = ks_result(a[c]);
}

static void dot_q4_K(int64_t n, float *out, const void *w, const void *xq) {
    dot_q45_K(n, out, w, NULL, xq, 0, 1);
}

static void dot_q5_K(int64_t n, float *out, const void *w, const void *xq) {
    dot_q45_K(n, out, NULL, w, xq, 0, 1);
}

static void dot_q6_K(int64_t n, float *out, const void *w, const void *xq) {
    dot_q6_K_rows(n, out, w, xq, 0, 1);
}

/* ---------------------------------------------------------------------------------------------
 * Several activation rows against one weight row (st_vec_dot_n_fn): the kernels above with NC =
 * nc, so each row gets the single-row kernel's bits (test_dot checks every row count).
 * ------------------------------------------------------------------------------------------- */

static void dotn_q4_K(int64_t n, float *out, const void *w, const void *xq, size_t ys, int nc) {
    ST_DOT_COLS_CALL(nc, dot_q45_K, n, out, (const block_q4_K *)w, NULL, (const uint8_t *)xq, ys)
}

static void dotn_q5_K(int64_t n, float *out, const void *w, const void *xq, size_t ys, int nc) {
    ST_DOT_COLS_CALL(nc, dot_q45_K, n, out, NULL, (const block_q5_K *)w, (const uint8_t *)xq, ys)
}

static void dotn_q6_K(int64_t n, float *out, const void *w, const void *xq, size_t ys, int nc) {
    ST_DOT_COLS_CALL(nc, dot_q6_K_rows, n, out, (const block_q6_K *)w, (const uint8_t *)xq, ys)
}

static void dotn_q4_0(int64_t n, float *out, const void *w, const void *xq, size_t ys, int nc) {
    ST_DOT_COLS_CALL(nc, dot_sum16, n, out, w, 1, (const uint8_t *)xq, ys)
}

void st_dotn_register_avx2(st_vec_dot_n_fn *table) {
    table[STRATA_TYPE_Q4_0] = dotn_q4_0;
    table[STRATA_TYPE_Q4_K] = dotn_q4_K;
    table[STRATA_TYPE_Q5_K] = dotn_q5_K;
    table[STRATA_TYPE_Q6_K] = dotn_q6_K;
    st_dotn_register_avx2_iq(table);
}

/* ---------------------------------------------------------------------------------------------
 * IQ types (q8_K activations)
 * ------------------------------------------------------------------------------------------- */

static void dot_iq4_xs(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq4_xs *b = w;
    const block_q8_K *x = xq;
    const __m256i table = iq4nl_table();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = x[i].d * H2F(b[i].d);
        const int8_t *y = x[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            int ls = (((b[i].scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b[i].scales_h >> (2 * j)) & 3) << 4)) - 32;
            __m256i q = _mm256_shuffle_epi8(table, nibbles32(b[i].qs + 16 * j));
            sumi = _mm256_add_epi32(sumi, dot_i8_scaled(q, load32(y + 32 * j), _mm256_set1_epi16((short)ls)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = hsum_ps(acc);
}

/* Applies 32 sign bits (bit k set: negate y_k) to 32 activations. */
static inline __m256i apply_signs(__m256i y, uint32_t signs) {
    __m256i s = _mm256_or_si256(bits_to_mask32(signs), _mm256_set1_epi8(1)); /* -1 or +1 */
    return _mm256_sign_epi8(y, s);
}

static void dot_iq3_xxs(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq3_xxs *b = w;
    const block_q8_K *x = xq;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = 0.25f * x[i].d * H2F(b[i].d);
        const uint8_t *idx = b[i].qs;
        const uint8_t *aux = b[i].qs + QK_K / 4;
        const int8_t *y = x[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const uint8_t *g = idx + 8 * j;
            __m256i mag = _mm256_set_epi32((int)st_iq3xxs_grid[g[7]], (int)st_iq3xxs_grid[g[6]],
                                           (int)st_iq3xxs_grid[g[5]], (int)st_iq3xxs_grid[g[4]],
                                           (int)st_iq3xxs_grid[g[3]], (int)st_iq3xxs_grid[g[2]],
                                           (int)st_iq3xxs_grid[g[1]], (int)st_iq3xxs_grid[g[0]]);
            const uint32_t a = st_load_u32(aux + 4 * j);
            const uint32_t signs = (uint32_t)st_ksigns_iq2xs[a & 127] |
                                   (uint32_t)st_ksigns_iq2xs[(a >> 7) & 127] << 8 |
                                   (uint32_t)st_ksigns_iq2xs[(a >> 14) & 127] << 16 |
                                   (uint32_t)st_ksigns_iq2xs[(a >> 21) & 127] << 24;
            __m256i p = _mm256_maddubs_epi16(mag, apply_signs(load32(y + 32 * j), signs));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16((short)(2 * (a >> 28) + 1))));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = hsum_ps(acc);
}

static void dot_iq3_s(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq3_s *b = w;
    const block_q8_K *x = xq;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = x[i].d * H2F(b[i].d);
        const int8_t *y = x[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = b[i].qs + 8 * j;
            const unsigned h = b[i].qh[j]; /* bit t: 9th bit of index t */
#define IQ3S_G(t) (int)st_iq3s_grid[q[t] | ((h << (8 - (t))) & 0x100)]
            __m256i mag = _mm256_set_epi32(IQ3S_G(7), IQ3S_G(6), IQ3S_G(5), IQ3S_G(4), IQ3S_G(3),
                                           IQ3S_G(2), IQ3S_G(1), IQ3S_G(0));
#undef IQ3S_G
            const int ls = 1 + 2 * ((b[i].scales[j / 2] >> (4 * (j % 2))) & 0xF);
            __m256i p = _mm256_maddubs_epi16(mag, apply_signs(load32(y + 32 * j), st_load_u32(b[i].signs + 4 * j)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16((short)ls)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = hsum_ps(acc);
}

/* ---------------------------------------------------------------------------------------------
 * Registration
 * ------------------------------------------------------------------------------------------- */

void st_dot_register_avx2(st_vec_dot_fn *table) {
    table[STRATA_TYPE_F32] = dot_f32;
    table[STRATA_TYPE_F16] = dot_f16;
    table[STRATA_TYPE_BF16] = dot_bf16;
    table[STRATA_TYPE_Q4_0] = dot_q4_0;
    table[STRATA_TYPE_Q4_1] = dot_q4_1;
    table[STRATA_TYPE_Q5_0] = dot_q5_0;
    table[STRATA_TYPE_Q5_1] = dot_q5_1;
    table[STRATA_TYPE_Q8_0] = dot_q8_0;
    table[STRATA_TYPE_IQ4_NL] = dot_iq4_nl;
    table[STRATA_TYPE_Q2_K] = dot_q2_K;
    table[STRATA_TYPE_Q3_K] = dot_q3_K;
    table[STRATA_TYPE_Q4_K] = dot_q4_K;
    table[STRATA_TYPE_Q5_K] = dot_q5_K;
    table[STRATA_TYPE_Q6_K] = dot_q6_K;
    table[STRATA_TYPE_IQ4_XS] = dot_iq4_xs;
    table[STRATA_TYPE_IQ3_XXS] = dot_iq3_xxs;
    table[STRATA_TYPE_IQ3_S] = dot_iq3_s;
    st_dot_register_avx2_iq(table);
}
