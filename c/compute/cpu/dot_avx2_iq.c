/* dot_avx2_iq.c - AVX2 dot-product kernels of the 2- and 1-bit IQ types (IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ1_S, IQ1_M; q8_K activations) and of MXFP4 (q8_0 activations). Compiled with the AVX2 flags
 * (the Makefile keys on "_avx2" in the name); registered by st_dot_register_avx2 (dot_avx2.c), so
 * entered only on a CPU with AVX2 + FMA + F16C. SIMD scheme after ggml's x86 kernels
 * (ggml/src/ggml-cpu/arch/x86/quants.c, MIT). Each kernel also has a several-row form
 * (st_dotn_register_avx2_iq, called by st_dotn_register_avx2).
 *
 * Each 32-weight sub-block: the four 8-byte grid entries are gathered into one vector, the signs
 * applied to the activations (vpsignb), vpmaddubsw of unsigned magnitudes x signed activations
 * (magnitudes <= 43 for IQ2, <= 9 for IQ1: no saturation), vpmaddwd by the 16-bit scales.
 * IQ1 weights are summed as 8 * (grid + delta) = 8 grid +- 1, exact integers; the 1/8 goes into
 * the block's float scale. */
#include "dot.h"
#include "dot_avx2.h"
#include "quant.h"

#include <immintrin.h>

#define H2F(h) _cvtsh_ss(h)

static inline __m256i iq_load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

static inline float iq_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 32 sign bits -> 32 bytes: -1 where bit i is set, else +1. */
static inline __m256i iq_signs32(uint32_t bits) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                           0x0101010101010101LL, 0x0000000000000000LL);
    const __m256i bit = _mm256_set1_epi64x((long long)0x7fbfdfeff7fbfdfeULL); /* byte j: ~(1<<j) */
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    const __m256i m = _mm256_cmpeq_epi8(_mm256_or_si256(v, bit), _mm256_set1_epi64x(-1));
    return _mm256_or_si256(m, _mm256_set1_epi8(1));
}

/* Four 8-byte grid entries, a first. */
static inline __m256i iq_grid4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    return _mm256_set_epi64x((long long)d, (long long)c, (long long)b, (long long)a);
}

/* Scale lo for weights 0..15, hi for 16..31, as 16-bit lanes. */
static inline __m256i iq_scales2(int lo, int hi) {
    return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo));
}


/* The 4 ksigns bytes of four 7-bit fields (field k at bit 7k of a, or the top 7 bits of v[k]). */
static inline uint32_t iq_ksigns4(uint32_t a) {
    return (uint32_t)st_ksigns_iq2xs[a & 127] | (uint32_t)st_ksigns_iq2xs[(a >> 7) & 127] << 8 |
           (uint32_t)st_ksigns_iq2xs[(a >> 14) & 127] << 16 | (uint32_t)st_ksigns_iq2xs[(a >> 21) & 127] << 24;
}


/* ---------------------------------------------------------------------------------------------
 * The kernels, written for NC activation rows ys bytes apart (row c at xq + c * ys); NC = 1 is
 * the single-row kernel (st_vec_dot_fn), NC = 1..ST_DOT_MAX_COLS the several-row one
 * (st_vec_dot_n_fn). Each sub-block's grid magnitudes, signs and scales are decoded once for all
 * rows; every row keeps its own accumulators and the single-row operation order, so each row gets
 * the single-row kernel's bits (test_dot checks every row count).
 * ------------------------------------------------------------------------------------------- */

#define IQ_INLINE static inline __attribute__((always_inline))

/* Activation row c's blocks. */
#define IQ_ROW(T, c) ((const T *)((const uint8_t *)xq + (size_t)(c) * ys))

IQ_INLINE void iq_zero_rows(__m256 *acc, int nc) {
    for (int c = 0; c < nc; c++) acc[c] = _mm256_setzero_ps();
}

IQ_INLINE void iq_out_rows(float *out, const __m256 *acc, int nc) {
    for (int c = 0; c < nc; c++) out[c] = iq_hsum(acc[c]);
}

/* acc[c] += 0.125 * d_x(row c, block i) * dw * sumi[c] (q8_K rows). */
IQ_INLINE void iq_acc_rows(__m256 *acc, const __m256i *sumi, const void *xq, size_t ys, int nc, int64_t i,
                           float dw) {
    for (int c = 0; c < nc; c++)
        acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(0.125f * IQ_ROW(block_q8_K, c)[i].d * dw), _mm256_cvtepi32_ps(sumi[c]),
                                 acc[c]);
}

/* sumi[c] += sum over sub-block j's 32 weights of sc * mag * (sign * y_c) (mag unsigned, signs
 * +-1 bytes), as 8 int32. */
IQ_INLINE void iq2_sub_rows(__m256i *sumi, __m256i mag, __m256i signs, __m256i sc, const void *xq, size_t ys,
                            int nc, int64_t i, int j) {
    for (int c = 0; c < nc; c++) {
        const __m256i y = _mm256_sign_epi8(iq_load32(IQ_ROW(block_q8_K, c)[i].qs + 32 * j), signs);
        sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(_mm256_maddubs_epi16(mag, y), sc));
    }
}

/* IQ1 weights times 8: 8 * grid (bytes -1, 0, 1) + delta bytes (+-1), -9..9; then their sum
 * against each row's y scaled by sc (sign trick: |w| x sign(w) y). */
IQ_INLINE void iq1_sub_rows(__m256i *sumi, __m256i g, __m256i delta, __m256i sc, const void *xq, size_t ys,
                            int nc, int64_t i, int j) {
    const __m256i w8 = _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), g), delta);
    const __m256i aw = _mm256_sign_epi8(w8, w8);
    for (int c = 0; c < nc; c++) {
        const __m256i y = _mm256_sign_epi8(iq_load32(IQ_ROW(block_q8_K, c)[i].qs + 32 * j), w8);
        sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, y), sc));
    }
}

IQ_INLINE void iq2_xxs_rows(int64_t n, float *out, const void *w, const void *xq, size_t ys, const int nc) {
    const block_iq2_xxs *b = w;
    __m256 acc[ST_DOT_MAX_COLS];
    iq_zero_rows(acc, nc);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *qs = (const uint8_t *)b[i].qs;
        __m256i sumi[ST_DOT_MAX_COLS];
        for (int c = 0; c < nc; c++) sumi[c] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const uint32_t a0 = st_load_u32(qs + 8 * j), a1 = st_load_u32(qs + 8 * j + 4);
            const __m256i mag = iq_grid4(st_iq2xxs_grid[a0 & 255], st_iq2xxs_grid[(a0 >> 8) & 255],
                                         st_iq2xxs_grid[(a0 >> 16) & 255], st_iq2xxs_grid[a0 >> 24]);
            const __m256i sc = _mm256_set1_epi16((short)(2 * (a1 >> 28) + 1));
            iq2_sub_rows(sumi, mag, iq_signs32(iq_ksigns4(a1)), sc, xq, ys, nc, i, j);
        }
        iq_acc_rows(acc, sumi, xq, ys, nc, i, H2F(b[i].d));
    }
    iq_out_rows(out, acc, nc);
}

IQ_INLINE void iq2_xs_rows(int64_t n, float *out, const void *w, const void *xq, size_t ys, const int nc) {
    const block_iq2_xs *b = w;
    __m256 acc[ST_DOT_MAX_COLS];
    iq_zero_rows(acc, nc);
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi[ST_DOT_MAX_COLS];
        for (int c = 0; c < nc; c++) sumi[c] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const uint16_t *q = b[i].qs + 4 * j; /* 9-bit grid index | 7-bit sign index << 9 */
            const __m256i mag = iq_grid4(st_iq2xs_grid[q[0] & 511], st_iq2xs_grid[q[1] & 511],
                                         st_iq2xs_grid[q[2] & 511], st_iq2xs_grid[q[3] & 511]);
            const uint32_t signs = (uint32_t)st_ksigns_iq2xs[q[0] >> 9] | (uint32_t)st_ksigns_iq2xs[q[1] >> 9] << 8 |
                                   (uint32_t)st_ksigns_iq2xs[q[2] >> 9] << 16 | (uint32_t)st_ksigns_iq2xs[q[3] >> 9] << 24;
            const __m256i sc = iq_scales2(2 * (b[i].scales[j] & 15) + 1, 2 * (b[i].scales[j] >> 4) + 1);
            iq2_sub_rows(sumi, mag, iq_signs32(signs), sc, xq, ys, nc, i, j);
        }
        iq_acc_rows(acc, sumi, xq, ys, nc, i, H2F(b[i].d));
    }
    iq_out_rows(out, acc, nc);
}

IQ_INLINE void iq2_s_rows(int64_t n, float *out, const void *w, const void *xq, size_t ys, const int nc) {
    const block_iq2_s *b = w;
    __m256 acc[ST_DOT_MAX_COLS];
    iq_zero_rows(acc, nc);
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi[ST_DOT_MAX_COLS];
        for (int c = 0; c < nc; c++) sumi[c] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = b[i].qs + 4 * j;
            const unsigned h = b[i].qh[j]; /* bits 2k..2k+1: bits 8-9 of index k */
            const __m256i mag = iq_grid4(st_iq2s_grid[q[0] | ((h << 8) & 0x300)], st_iq2s_grid[q[1] | ((h << 6) & 0x300)],
                                         st_iq2s_grid[q[2] | ((h << 4) & 0x300)], st_iq2s_grid[q[3] | ((h << 2) & 0x300)]);
            const __m256i sc = iq_scales2(2 * (b[i].scales[j] & 15) + 1, 2 * (b[i].scales[j] >> 4) + 1);
            const uint32_t signs = st_load_u32(b[i].qs + QK_K / 8 + 4 * j);
            iq2_sub_rows(sumi, mag, iq_signs32(signs), sc, xq, ys, nc, i, j);
        }
        iq_acc_rows(acc, sumi, xq, ys, nc, i, H2F(b[i].d));
    }
    iq_out_rows(out, acc, nc);
}

IQ_INLINE void iq1_s_rows(int64_t n, float *out, const void *w, const void *xq, size_t ys, const int nc) {
    const block_iq1_s *b = w;
    __m256 acc[ST_DOT_MAX_COLS];
    iq_zero_rows(acc, nc);
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi[ST_DOT_MAX_COLS];
        for (int c = 0; c < nc; c++) sumi[c] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = b[i].qs + 4 * j;
            const unsigned h = b[i].qh[j];
            const __m256i g = iq_grid4(st_iq1s_grid[q[0] | ((h << 8) & 0x700)], st_iq1s_grid[q[1] | ((h << 5) & 0x700)],
                                       st_iq1s_grid[q[2] | ((h << 2) & 0x700)], st_iq1s_grid[q[3] | ((h >> 1) & 0x700)]);
            const __m256i delta = _mm256_set1_epi8((h & 0x8000) ? -1 : 1);
            const __m256i sc = _mm256_set1_epi16((short)(2 * ((h >> 12) & 7) + 1));
            iq1_sub_rows(sumi, g, delta, sc, xq, ys, nc, i, j);
        }
        iq_acc_rows(acc, sumi, xq, ys, nc, i, H2F(b[i].d));
    }
    iq_out_rows(out, acc, nc);
}

IQ_INLINE void iq1_m_rows(int64_t n, float *out, const void *w, const void *xq, size_t ys, const int nc) {
    const block_iq1_m *b = w;
    __m256 acc[ST_DOT_MAX_COLS];
    iq_zero_rows(acc, nc);
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint16_t s[4];
        memcpy(s, b[i].scales, 8);
        const uint16_t d16 = st_iq1m_scale_bits(b[i].scales);
        /* the 16 3-bit scales, 12 bits a word */
        const uint64_t sc3 = (uint64_t)(s[0] & 0xFFF) | (uint64_t)(s[1] & 0xFFF) << 12 |
                             (uint64_t)(s[2] & 0xFFF) << 24 | (uint64_t)(s[3] & 0xFFF) << 36;
        __m256i sumi[ST_DOT_MAX_COLS];
        for (int c = 0; c < nc; c++) sumi[c] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = b[i].qs + 4 * j;
            const unsigned h = b[i].qh[2 * j] | (unsigned)b[i].qh[2 * j + 1] << 8; /* nibble k: entry k */
            const __m256i g = iq_grid4(st_iq1s_grid[q[0] | ((h << 8) & 0x700)], st_iq1s_grid[q[1] | ((h << 4) & 0x700)],
                                       st_iq1s_grid[q[2] | (h & 0x700)], st_iq1s_grid[q[3] | ((h >> 4) & 0x700)]);
#define IQ1M_D(k) ((h >> (4 * (k) + 3)) & 1 ? -1LL : 0x0101010101010101LL)
            const __m256i delta = _mm256_set_epi64x(IQ1M_D(3), IQ1M_D(2), IQ1M_D(1), IQ1M_D(0));
#undef IQ1M_D
            const __m256i sc = iq_scales2(2 * (int)((sc3 >> (6 * j)) & 7) + 1, 2 * (int)((sc3 >> (6 * j + 3)) & 7) + 1);
            iq1_sub_rows(sumi, g, delta, sc, xq, ys, nc, i, j);
        }
        iq_acc_rows(acc, sumi, xq, ys, nc, i, H2F(d16));
    }
    iq_out_rows(out, acc, nc);
}

/* MXFP4: the doubled E2M1 values by table (vpshufb), signed x signed by the sign trick. */
IQ_INLINE void mxfp4_rows(int64_t n, float *out, const void *w, const void *xq, size_t ys, const int nc) {
    const block_mxfp4 *b = w;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)st_kvalues_mxfp4));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[ST_DOT_MAX_COLS];
    iq_zero_rows(acc, nc);
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        const __m128i t = _mm_loadu_si128((const __m128i *)b[i].qs);
        const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), m4);
        const __m256i q = _mm256_shuffle_epi8(table, nib);
        const __m256i aq = _mm256_sign_epi8(q, q);
        const float e = st_e8m0_to_f32_half(b[i].e);
        for (int c = 0; c < nc; c++) {
            const block_q8_0 *x = IQ_ROW(block_q8_0, c) + i;
            const __m256i p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(iq_load32(x->qs), q));
            const __m256i s = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(e * H2F(x->d)), _mm256_cvtepi32_ps(s), acc[c]);
        }
    }
    iq_out_rows(out, acc, nc);
}

/* The single-row (NC = 1) and several-row (NC = nc, ST_DOT_COLS_CALL) entries of K##_rows. */
#define IQ_ENTRIES(K)                                                                              \
    static void dot_##K(int64_t n, float *out, const void *w, const void *xq) {                    \
        K##_rows(n, out, w, xq, 0, 1);                                                             \
    }                                                                                              \
    static void dotn_##K(int64_t n, float *out, const void *w, const void *xq, size_t ys, int nc) { \
        ST_DOT_COLS_CALL(nc, K##_rows, n, out, w, xq, ys)                                          \
    }

IQ_ENTRIES(iq2_xxs)
IQ_ENTRIES(iq2_xs)
IQ_ENTRIES(iq2_s)
IQ_ENTRIES(iq1_s)
IQ_ENTRIES(iq1_m)
IQ_ENTRIES(mxfp4)

void st_dot_register_avx2_iq(st_vec_dot_fn *table) {
    table[STRATA_TYPE_IQ2_XXS] = dot_iq2_xxs;
    table[STRATA_TYPE_IQ2_XS] = dot_iq2_xs;
    table[STRATA_TYPE_IQ2_S] = dot_iq2_s;
    table[STRATA_TYPE_IQ1_S] = dot_iq1_s;
    table[STRATA_TYPE_IQ1_M] = dot_iq1_m;
    table[STRATA_TYPE_MXFP4] = dot_mxfp4;
}

void st_dotn_register_avx2_iq(st_vec_dot_n_fn *table) {
    table[STRATA_TYPE_IQ2_XXS] = dotn_iq2_xxs;
    table[STRATA_TYPE_IQ2_XS] = dotn_iq2_xs;
    table[STRATA_TYPE_IQ2_S] = dotn_iq2_s;
    table[STRATA_TYPE_IQ1_S] = dotn_iq1_s;
    table[STRATA_TYPE_IQ1_M] = dotn_iq1_m;
    table[STRATA_TYPE_MXFP4] = dotn_mxfp4;
}
