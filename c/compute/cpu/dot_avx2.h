/* dot_avx2.h - inline AVX2 helpers shared by the files compiled with at least the AVX2 flags
 * (dot_avx2.c; dot_avx512.c and dot_amx.c through dot_avx512.h, whose flags include AVX2): small
 * unaligned loads, the exact lane sums of eight int32 vectors, and the Q8_0 / Q4_0 accumulators'
 * sum tree in registers. Include only from such files. */
#ifndef STRATA_DOT_AVX2_H
#define STRATA_DOT_AVX2_H

#include "dot.h"

#include <immintrin.h>
#include <string.h>

static inline int st_load_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static inline uint32_t st_load_u32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Eight vectors of 8 int32 -> lane q = the sum of p[q]'s lanes (exact). */
static inline __m256i st_hsum8_i32(const __m256i p[8]) {
    const __m256i t0 = _mm256_hadd_epi32(p[0], p[1]), t1 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i t2 = _mm256_hadd_epi32(p[4], p[5]), t3 = _mm256_hadd_epi32(p[6], p[7]);
    const __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* st_dot_sum16_tree (dot.h) of accumulators 0-7 in a0's lanes and 8-15 in a1's, in registers:
 * + 8 apart (a0 + a1), + 4 (the two 128-bit halves), + 2, + 1: the same operands in order. */
static inline float st_sum16_tree8(__m256 a0, __m256 a1) {
    const __m256 t = _mm256_add_ps(a0, a1);
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    u = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
}

#endif /* STRATA_DOT_AVX2_H */
