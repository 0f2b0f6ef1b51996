/* dot_avx512.h - inline AVX-512 helpers shared by the files compiled with the AVX-512 flags
 * (dot_avx512.c, dot_avx512_iq.c, dot_amx.c): half-vector constants, nibble unpacking, the K-quant
 * 6-bit scales, the q8_K loads and the IQ grid-sign helpers.
 * Include only from such files: every function here needs AVX-512 F/BW/VL and F16C. */
#ifndef STRATA_DOT_AVX512_H
#define STRATA_DOT_AVX512_H

#include "dot.h"
#include "dot_avx2.h"
#include "quant.h"

#include <immintrin.h>
#include <string.h>

/* fp16 bits -> float (F16C; exact for every finite value). */
static inline float st_h2f(uint16_t h) { return _cvtsh_ss(h); }

/* Lower 256 bits from a, upper 256 bits from b. */
static inline __m512i st_halves_si512(__m512i a, __m512i b) {
    return _mm512_mask_blend_epi64(0xF0, a, b);
}
static inline __m512i st_halves_epi8(int a, int b) {
    return st_halves_si512(_mm512_set1_epi8((char)a), _mm512_set1_epi8((char)b));
}
static inline __m512i st_halves_epi16(int a, int b) {
    return st_halves_si512(_mm512_set1_epi16((short)a), _mm512_set1_epi16((short)b));
}
static inline __m512i st_halves_epi32(int a, int b) {
    return _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(a), _mm512_set1_epi32(b));
}
static inline __m512 st_halves_ps(float a, float b) {
    return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

/* 32 bytes at a (lower half) and 32 bytes at b (upper half; zeros when b is NULL). */
static inline __m512i st_load_2x256(const void *a, const void *b) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)a);
    const __m256i hi = b ? _mm256_loadu_si256((const __m256i *)b) : _mm256_setzero_si256();
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Two 16-byte nibble arrays (q1 may be NULL: zeros) -> 64 bytes 0..15, in weight order
 * [lo(q0) | hi(q0) | lo(q1) | hi(q1)], 16 bytes each: weight j of a 32-block is the low nibble
 * of q[j] for j < 16 and the high nibble of q[j - 16] otherwise. */
static inline __m512i st_nibbles_2x128(const uint8_t *q0, const uint8_t *q1) {
    const __m128i a = _mm_loadu_si128((const __m128i *)q0);
    const __m128i b = q1 ? _mm_loadu_si128((const __m128i *)q1) : _mm_setzero_si128();
    /* 128-bit lanes [a, a, b, b] */
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(a)),
                                         _mm256_broadcastsi128_si256(b), 1);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i lo = _mm512_and_si512(v, m4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    /* 128-bit lanes 1 and 3 (64-bit elements 2,3,6,7) take the high nibbles */
    return _mm512_mask_blend_epi64(0xCC, lo, hi);
}

/* 32 bytes at q -> [lo nibbles of q | hi nibbles of q] (64 values 0..15). */
static inline __m512i st_nibbles_256(const uint8_t *q) {
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)q));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    return st_halves_si512(_mm512_and_si512(v, m4), _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
}

/* 32 bytes at q broadcast to both halves. */
static inline __m512i st_bcast_256(const uint8_t *q) {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)q));
}


/* Bit selectors [1 << 2t | 1 << (2t+1)] (bytes): the high-bit plane of 32-weight groups 2t, 2t+1. */
static inline __m512i st_bitsel(int t) { return st_halves_epi8(1 << (2 * t), 1 << (2 * t + 1)); }

/* Q4_K / Q5_K 6-bit scales and mins of the 8 sub-blocks, unpacked 4 at a time from the 12 bytes
 * (a = bytes 0..3, b = 4..7, c = 8..11): sub-blocks 0..3 are the low 6 bits of a (scales) and b
 * (mins); 4..7 take their low 4 bits from c's nibbles and their high 2 from the top of a / b. */
static inline void st_k4_scales(const uint8_t *q, uint64_t *sc8, uint64_t *mn8) {
    const uint32_t a = st_load_u32(q), b = st_load_u32(q + 4), c = st_load_u32(q + 8);
    const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | (((a >> 6) & 0x03030303u) << 4);
    const uint32_t mn_hi = ((c >> 4) & 0x0F0F0F0Fu) | (((b >> 6) & 0x03030303u) << 4);
    *sc8 = (a & 0x3F3F3F3Fu) | ((uint64_t)sc_hi << 32);
    *mn8 = (b & 0x3F3F3F3Fu) | ((uint64_t)mn_hi << 32);
}

/* Shift counts [4s | 4s+2] (16-bit lanes): the 2-bit fields 2s and 2s+1 of a byte, for the two
 * 32-weight halves of step t (s = t & 1) in Q2_K/Q3_K quants and Q6_K high bits. */
static inline __m512i st_shift_2bit(int s) { return st_halves_epi16(4 * s, 4 * s + 2); }

/* Q6_K super-block b's weights 64t .. 64t + 63 as u = q + 32 (0..63), in order (sh: the shift
 * counts st_shift_2bit(0), (1)). */
static inline __m512i st_q6_K_u(const block_q6_K *b, int t, const __m512i sh[2]) {
    const int h = t >> 1, s = t & 1;
    const __m512i ql = _mm512_loadu_si512((const void *)(b->ql + 64 * h));
    const __m512i lo = _mm512_and_si512(s ? _mm512_srli_epi16(ql, 4) : ql, _mm512_set1_epi8(0x0F));
    const __m512i qh = st_bcast_256(b->qh + 32 * h);
    const __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(qh, sh[s]), _mm512_set1_epi8(0x03));
    return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
}

/* ---------------------------------------------------------------------------------------------
 * Shared by the q8_K-activation kernels of dot_avx512.c and dot_avx512_iq.c
 * ------------------------------------------------------------------------------------------- */

/* 8 int32 (from a 256-bit madd) -> 512 bits with zeros above, as floats. */
static inline __m512 st_cvt256_ps(__m256i v) {
    return _mm512_cvtepi32_ps(_mm512_zextsi256_si512(v));
}

static inline __m512i st_q8_K_x(const block_q8_K *y, int t) {
    return _mm512_loadu_si512((const void *)(y->qs + 64 * t));
}
static inline __m256i st_q8_K_bsums(const block_q8_K *y) {
    return _mm256_loadu_si256((const __m256i *)y->bsums);
}

static inline __m512i st_idx32_g32(int t) { return st_halves_epi32(2 * t, 2 * t + 1); }

/* Grid magnitudes g (0..62) with sign mask k -> u = 64 + (k ? -g : g), unsigned 2..126. */
static inline __m512i st_signed_grid_u8(__m512i g, __mmask64 k) {
    const __m512i c64 = _mm512_set1_epi8(64);
    return _mm512_mask_sub_epi8(_mm512_add_epi8(g, c64), k, c64, g);
}

/* The 4 sign bytes of an IQ3_XXS word (bits 0..27: four 7-bit fields), in bytes 0..3: each is
 * the field plus an 8th bit making the byte's parity even (the ksigns_iq2xs table, computed). */
static inline uint64_t st_iq3xxs_signs(uint32_t w0, uint32_t w1) {
    const uint64_t s = (uint64_t)((w0 & 0x7Fu) | ((w0 << 1) & 0x7F00u) | ((w0 << 2) & 0x7F0000u) |
                                  ((w0 << 3) & 0x7F000000u)) |
                       (uint64_t)((w1 & 0x7Fu) | ((w1 << 1) & 0x7F00u) | ((w1 << 2) & 0x7F0000u) |
                                  ((w1 << 3) & 0x7F000000u)) << 32;
    uint64_t p = s ^ (s >> 4); /* bit 0 of each byte ends as the byte's parity */
    p ^= p >> 2;
    p ^= p >> 1;
    return s | ((p & 0x0101010101010101ull) << 7);
}

#endif /* STRATA_DOT_AVX512_H */
