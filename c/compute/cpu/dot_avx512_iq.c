/* dot_avx512_iq.c - AVX-512 dot-product kernels of the 2- and 1-bit IQ types (IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ1_S, IQ1_M; q8_K activations) and of MXFP4 (q8_0 activations). Compiled with the
 * AVX-512 flags (the Makefile keys on "_avx512" in the name); registered by
 * st_dot_register_avx512 (dot_avx512.c), so entered only on a CPU with every extension that
 * level needs. Grid decoding after ggml's x86 kernels (ggml/src/ggml-cpu/arch/x86/quants.c, MIT).
 *
 * Integer scheme as dot_avx512.c's IQ3 kernels: each step t takes 64 weights (two 32-weight
 * sub-blocks; eight 8-byte grid entries gathered by vpgatherdq), brought to unsigned bytes
 * u = OFF + w (IQ2: OFF 64, |w| <= 43; IQ1: w = 8 * (grid + delta) = 8 grid +- 1, OFF 16),
 * vpmaddubsw(u, x) (u <= 107: no saturation), vpmaddwd by the 16-weight scales, and the offset
 * OFF * sum_g ls_g * bsum_g (vpmaddwd on the bsums) subtracted through a second float
 * accumulator. Exact for every activation byte, -128 included. IQ1_M and MXFP4 also have a
 * several-row form (st_dotn_register_avx512_iq, called by st_dotn_register_avx512). */
#include "dot_avx512.h"

/* Per-16-weight scales of one super-block (int32 ls[16], each < 2^15): *sc16 holds them as int16
 * lanes 0..15; oprod: 8 int32 whose sum is sum_g ls_g * bsum_g. */
static inline void st_iq16_scales(const int32_t ls[16], const block_q8_K *y, __m512i *sc16, __m256i *oprod) {
    const __m256i l16 = _mm512_cvtepi32_epi16(_mm512_loadu_si512((const void *)ls));
    *sc16 = _mm512_zextsi256_si512(l16);
    *oprod = _mm256_madd_epi16(st_q8_K_bsums(y), l16);
}

/* The int16 lane scales of the 4 steps (lane l of step t: weights 64t + 2l, +1, group
 * 4t + l / 8) from the 16 scales in sc16's lanes 0..15. */
static inline void st_iq16_sct(__m512i sc16, __m512i sct[4]) {
    const __m512i lane = _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                                                            15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3);
    for (int t = 0; t < 4; t++)
        sct[t] = _mm512_permutexvar_epi16(_mm512_add_epi16(lane, _mm512_set1_epi16((short)(4 * t))), sc16);
}

/* One super-block's sums: 16 int32 lanes adding up to sum_g ls_g * sum(u * x over group g), from
 * the 4 steps' u vectors and lane scales (st_iq16_sct). vpmaddubsw cannot saturate: u <= 107,
 * |x| <= 128, so a pair's sum is at most 2 * 107 * 128 = 27392. */
static inline __m512i st_iq16_isum_sct(const __m512i u[4], const __m512i sct[4], const block_q8_K *y) {
    __m512i isum = _mm512_setzero_si512();
    for (int t = 0; t < 4; t++)
        isum = _mm512_add_epi32(isum, _mm512_madd_epi16(_mm512_maddubs_epi16(u[t], st_q8_K_x(y, t)), sct[t]));
    return isum;
}

static inline __m512i st_iq16_isum(const __m512i u[4], __m512i sc16, const block_q8_K *y) {
    __m512i sct[4];
    st_iq16_sct(sc16, sct);
    return st_iq16_isum_sct(u, sct, y);
}

/* Eight grid entries (8 bytes each) at the int32 indices gi. */
static inline __m512i st_grid8(const uint64_t *grid, __m256i gi) {
    return _mm512_i32gather_epi64(gi, (const void *)grid, 8);
}

/* The common tail: acc += isum * dd, accm += oprod * off * dd. */
static inline void st_iq_accum(__m512i isum, __m256i oprod, float dd, float off, __m512 *acc, __m512 *accm) {
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dd), *acc);
    *accm = _mm512_fmadd_ps(st_cvt256_ps(oprod), _mm512_set1_ps(off * dd), *accm);
}

/* IQ2_XXS: per sub-block two u32: 4 grid-index bytes, then 4 x 7 sign bits and the scale (the
 * IQ3_XXS sign-word layout); w = d * (2s + 1) / 8 * grid * sign. */
static void st_dot_iq2_xxs_avx512(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq2_xxs *b = (const block_iq2_xxs *)w;
    const block_q8_K *y = (const block_q8_K *)xq;
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, b++, y++) {
        uint32_t a[16];
        memcpy(a, b->qs, sizeof a);
        int32_t ls[16];
        for (int j = 0; j < 8; j++) ls[2 * j] = ls[2 * j + 1] = (int32_t)(2 * (a[2 * j + 1] >> 28) + 1);
        __m512i u[4];
        for (int t = 0; t < 4; t++) {
            const __m256i gi = _mm256_cvtepu8_epi32(_mm_setr_epi32((int)a[4 * t], (int)a[4 * t + 2], 0, 0));
            u[t] = st_signed_grid_u8(st_grid8(st_iq2xxs_grid, gi), _cvtu64_mask64(st_iq3xxs_signs(a[4 * t + 1], a[4 * t + 3])));
        }
        __m512i sc16;
        __m256i oprod;
        st_iq16_scales(ls, y, &sc16, &oprod);
        st_iq_accum(st_iq16_isum(u, sc16, y), oprod, 0.125f * y->d * st_h2f(b->d), 64.0f, &acc, &accm);
    }
    *out = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(accm);
}

/* The 4-bit scales of IQ2_XS / IQ2_S, two per byte, as 2s + 1. */
static inline void st_iq2_ls16(const uint8_t *scales, int32_t ls[16]) {
    for (int j = 0; j < 8; j++) {
        ls[2 * j] = 2 * (scales[j] & 15) + 1;
        ls[2 * j + 1] = 2 * (scales[j] >> 4) + 1;
    }
}

/* IQ2_XS: per 8 weights a u16: 9-bit grid index | 7-bit sign index (ksigns) << 9. */
static void st_dot_iq2_xs_avx512(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq2_xs *b = (const block_iq2_xs *)w;
    const block_q8_K *y = (const block_q8_K *)xq;
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, b++, y++) {
        int32_t ls[16];
        st_iq2_ls16(b->scales, ls);
        __m512i u[4];
        for (int t = 0; t < 4; t++) {
            const uint16_t *q = b->qs + 8 * t;
            const __m256i qv = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)q));
            uint64_t sg = 0;
            for (int k = 0; k < 8; k++) sg |= (uint64_t)st_ksigns_iq2xs[q[k] >> 9] << (8 * k);
            const __m512i g = st_grid8(st_iq2xs_grid, _mm256_and_si256(qv, _mm256_set1_epi32(511)));
            u[t] = st_signed_grid_u8(g, _cvtu64_mask64(sg));
        }
        __m512i sc16;
        __m256i oprod;
        st_iq16_scales(ls, y, &sc16, &oprod);
        st_iq_accum(st_iq16_isum(u, sc16, y), oprod, 0.125f * y->d * st_h2f(b->d), 64.0f, &acc, &accm);
    }
    *out = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(accm);
}

/* IQ2_S: 10-bit grid indices (bits 8-9 two per qh byte), one sign bit per weight. */
static void st_dot_iq2_s_avx512(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq2_s *b = (const block_iq2_s *)w;
    const block_q8_K *y = (const block_q8_K *)xq;
    const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, b++, y++) {
        int32_t ls[16];
        st_iq2_ls16(b->scales, ls);
        __m512i u[4];
        for (int t = 0; t < 4; t++) {
            /* entries 8t + k: low 8 bits qs[8t + k], bits 8-9 = bits 2k.. of qh[2t] | qh[2t+1] << 8 */
            const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * t)));
            const __m256i hv = _mm256_set1_epi32(b->qh[2 * t] | b->qh[2 * t + 1] << 8);
            const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(hv, sh), _mm256_set1_epi32(3));
            const __m256i gi = _mm256_or_si256(lo, _mm256_slli_epi32(hi, 8));
            uint64_t sg;
            memcpy(&sg, b->qs + QK_K / 8 + 8 * t, 8);
            u[t] = st_signed_grid_u8(st_grid8(st_iq2s_grid, gi), _cvtu64_mask64(sg));
        }
        __m512i sc16;
        __m256i oprod;
        st_iq16_scales(ls, y, &sc16, &oprod);
        st_iq_accum(st_iq16_isum(u, sc16, y), oprod, 0.125f * y->d * st_h2f(b->d), 64.0f, &acc, &accm);
    }
    *out = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(accm);
}

/* IQ1 grid entries (bytes -1, 0, 1) and per-8-weight bytes c = 16 +- 1 -> u = 8 grid + c (7..25). */
static inline __m512i st_iq1_u(__m512i g, __m512i c) {
    const __m512i g2 = _mm512_add_epi8(g, g), g4 = _mm512_add_epi8(g2, g2);
    return _mm512_add_epi8(_mm512_add_epi8(g4, g4), c);
}

/* IQ1_S: per sub-block a u16 qh: 4 x 3 high index bits, a 3-bit scale, the delta's sign. */
static void st_dot_iq1_s_avx512(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq1_s *b = (const block_iq1_s *)w;
    const block_q8_K *y = (const block_q8_K *)xq;
    const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, b++, y++) {
        int32_t ls[16];
        for (int j = 0; j < 8; j++) ls[2 * j] = ls[2 * j + 1] = 2 * ((b->qh[j] >> 12) & 7) + 1;
        __m512i u[4];
        for (int t = 0; t < 4; t++) {
            const unsigned h0 = b->qh[2 * t], h1 = b->qh[2 * t + 1];
            const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * t)));
            const __m256i hv = _mm256_setr_epi32((int)h0, (int)h0, (int)h0, (int)h0, (int)h1, (int)h1, (int)h1, (int)h1);
            const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(hv, sh), _mm256_set1_epi32(7));
            const __m512i g = st_grid8(st_iq1s_grid, _mm256_or_si256(lo, _mm256_slli_epi32(hi, 8)));
            u[t] = st_iq1_u(g, st_halves_epi8(h0 & 0x8000 ? 15 : 17, h1 & 0x8000 ? 15 : 17));
        }
        __m512i sc16;
        __m256i oprod;
        st_iq16_scales(ls, y, &sc16, &oprod);
        st_iq_accum(st_iq16_isum(u, sc16, y), oprod, 0.125f * y->d * st_h2f(b->d), 16.0f, &acc, &accm);
    }
    *out = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(accm);
}

/* IQ1_M: per 8 weights a nibble (3 high index bits, the delta's sign); 3-bit scales per 16
 * weights, 4 per u16 word whose top nibbles hold the f16 super-scale. Super-block b decoded:
 * u[t] for its 4 steps, l16 its 16 scales as int16. */
static inline void st_iq1_m_unpack(const block_iq1_m *b, __m512i u[4], __m256i *l16) {
    const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    uint16_t s[4];
    memcpy(s, b->scales, 8);
    int32_t ls[16];
    for (int j = 0; j < 16; j++) ls[j] = 2 * ((s[j / 4] >> (3 * (j % 4))) & 7) + 1;
    for (int t = 0; t < 4; t++) {
        const uint32_t hh = st_load_u32(b->qh + 4 * t); /* nibble k: entry 8t + k */
        const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * t)));
        const __m256i nib = _mm256_srlv_epi32(_mm256_set1_epi32((int)hh), sh);
        const __m256i gi = _mm256_or_si256(lo, _mm256_slli_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(7)), 8));
        /* c = 17 - 2 * (delta bit) per 8 weights: each int32 lane widened to 8 equal bytes */
        const __m256i dbit = _mm256_and_si256(_mm256_srli_epi32(nib, 3), _mm256_set1_epi32(1));
        const __m512i c64 = _mm512_mullo_epi64(_mm512_cvtepu32_epi64(_mm256_sub_epi32(_mm256_set1_epi32(17),
                                                                                     _mm256_add_epi32(dbit, dbit))),
                                               _mm512_set1_epi64(0x0101010101010101LL));
        u[t] = st_iq1_u(st_grid8(st_iq1s_grid, gi), c64);
    }
    *l16 = _mm512_cvtepi32_epi16(_mm512_loadu_si512((const void *)ls));
}

/* ---------------------------------------------------------------------------------------------
 * IQ1_M and MXFP4 written for NC activation rows ys bytes apart (row c at xq + c * ys): NC = 1
 * is the single-row kernel (st_vec_dot_fn), NC = 1..ST_DOT_MAX_COLS the several-row one
 * (st_vec_dot_n_fn). The weights are decoded once for all rows; every row keeps its own
 * accumulators and the single-row operation order, so each row gets the single-row kernel's
 * bits (test_dot and test_isa_avx512 check every row count).
 * ------------------------------------------------------------------------------------------- */

#define ST_IQ_INLINE static inline __attribute__((always_inline))

/* Activation row c's blocks. */
#define ST_IQ_ROW(T, c) ((const T *)((const uint8_t *)xq + (size_t)(c) * ys))

ST_IQ_INLINE void st_iq1_m_rows(int64_t n, float *out, const void *w, const void *xq, size_t ys, const int NC) {
    const block_iq1_m *b = (const block_iq1_m *)w;
    __m512 acc[ST_DOT_MAX_COLS], accm[ST_DOT_MAX_COLS];
    for (int c = 0; c < NC; c++) acc[c] = accm[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m512i u[4], sct[4];
        __m256i l16;
        st_iq1_m_unpack(b + i, u, &l16);
        st_iq16_sct(_mm512_zextsi256_si512(l16), sct);
        const float dw = st_h2f(st_iq1m_scale_bits(b[i].scales));
        for (int c = 0; c < NC; c++) {
            const block_q8_K *y = ST_IQ_ROW(block_q8_K, c) + i;
            st_iq_accum(st_iq16_isum_sct(u, sct, y), _mm256_madd_epi16(st_q8_K_bsums(y), l16), 0.125f * y->d * dw,
                        16.0f, &acc[c], &accm[c]);
        }
    }
    for (int c = 0; c < NC; c++) out[c] = _mm512_reduce_add_ps(acc[c]) - _mm512_reduce_add_ps(accm[c]);
}

/* MXFP4: two 32-weight blocks a step; u = kvalue + 16 (4..28) by table, vpdpbusd against the two
 * q8_0 blocks, minus 16 * sum(x) (vpdpbusd of 16s), one float scale per half. */
ST_IQ_INLINE void st_mxfp4_rows(int64_t n, float *out, const void *w, const void *xq, size_t ys, const int NC) {
    const block_mxfp4 *b = (const block_mxfp4 *)w;
    const int64_t nb = n / QK_MXFP4;
    const __m512i z = _mm512_setzero_si512(), c16 = _mm512_set1_epi8(16);
    const __m128i t8 = _mm_add_epi8(_mm_loadu_si128((const __m128i *)st_kvalues_mxfp4), _mm_set1_epi8(16));
    const __m512i table = _mm512_broadcast_i32x4(t8);
    const __m512i half = st_halves_epi32(0, 1); /* lanes 0-7 take element 0, 8-15 element 1 */
    __m512 acc[ST_DOT_MAX_COLS];
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i += 2) {
        const int has2 = i + 1 < nb;
        const __m512i u = _mm512_shuffle_epi8(table, st_nibbles_2x128(b[i].qs, has2 ? b[i + 1].qs : NULL));
        /* [e0, e1] (e1 0 without a second block), then per row [e0 d_x0, e1 d_x1] (0 there) */
        const __m128 ew = _mm_setr_ps(st_e8m0_to_f32_half(b[i].e), has2 ? st_e8m0_to_f32_half(b[i + 1].e) : 0.0f, 0, 0);
        for (int c = 0; c < NC; c++) {
            const block_q8_0 *y = ST_IQ_ROW(block_q8_0, c) + i;
            const __m512i x = st_load_2x256(y[0].qs, has2 ? y[1].qs : NULL);
            const __m512i p = _mm512_sub_epi32(_mm512_dpbusd_epi32(z, u, x), _mm512_dpbusd_epi32(z, c16, x));
            const uint32_t dx = (uint32_t)y[0].d | (has2 ? (uint32_t)y[1].d << 16 : 0u); /* two f16 scales */
            const __m128 dd = _mm_mul_ps(ew, _mm_cvtph_ps(_mm_cvtsi32_si128((int)dx)));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(half, _mm512_castps128_ps512(dd)), acc[c]);
        }
    }
    for (int c = 0; c < NC; c++) out[c] = _mm512_reduce_add_ps(acc[c]);
}

/* The single-row (NC = 1) and several-row (NC = nc, ST_DOT_COLS_CALL) entries of K's rows. */
#define ST_IQ_ENTRIES(K)                                                                           \
    static void st_dot_##K##_avx512(int64_t n, float *out, const void *w, const void *xq) {        \
        st_##K##_rows(n, out, w, xq, 0, 1);                                                        \
    }                                                                                              \
    static void st_dotn_##K##_avx512(int64_t n, float *out, const void *w, const void *xq, size_t ys, int nc) { \
        ST_DOT_COLS_CALL(nc, st_##K##_rows, n, out, w, xq, ys)                                     \
    }

ST_IQ_ENTRIES(iq1_m)
ST_IQ_ENTRIES(mxfp4)

void st_dot_register_avx512_iq(st_vec_dot_fn *table) {
    table[STRATA_TYPE_IQ2_XXS] = st_dot_iq2_xxs_avx512;
    table[STRATA_TYPE_IQ2_XS] = st_dot_iq2_xs_avx512;
    table[STRATA_TYPE_IQ2_S] = st_dot_iq2_s_avx512;
    table[STRATA_TYPE_IQ1_S] = st_dot_iq1_s_avx512;
    table[STRATA_TYPE_IQ1_M] = st_dot_iq1_m_avx512;
    table[STRATA_TYPE_MXFP4] = st_dot_mxfp4_avx512;
}

void st_dotn_register_avx512_iq(st_vec_dot_n_fn *table) {
    table[STRATA_TYPE_IQ1_M] = st_dotn_iq1_m_avx512;
    table[STRATA_TYPE_MXFP4] = st_dotn_mxfp4_avx512;
}
