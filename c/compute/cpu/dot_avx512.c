/* dot_avx512.c - AVX-512 dot-product kernels (weights x activations) for the CPU backend.
 *
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c (the Makefile
 * keys on "_avx512" in the file name). The kernels use AVX-512 F/BW/VL and VNNI (vpdpbusd,
 * vpdpwssd) plus F16C, so the dispatcher (dot.c) registers this table only when the CPU reports
 * AVX2, FMA, F16C and AVX-512 F, BW, VL, DQ and VNNI all present (st_cpu_get_features()); nothing
 * here is ever entered on a CPU without them.
 *
 * Kernels (weights -> activation type):
 *   F32, F16, BF16                                        -> f32
 *   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL                  -> block_q8_0 (Q4_1/Q5_1 min term:
 *                                                            m * d_x * sum(q_x) per block)
 *   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ3_XXS, IQ3_S  -> block_q8_K (bsums give min/offset terms)
 * and, in dot_avx512_iq.c (registered from here), IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M -> block_q8_K
 * and MXFP4 -> block_q8_0.
 *
 * Integer scheme. Both byte multiplies take unsigned bytes first and signed bytes second:
 *   vpdpbusd  _mm512_dpbusd_epi32(acc, u8, s8): acc += sum of 4 adjacent u*s, exact (no saturation);
 *   vpmaddubsw _mm512_maddubs_epi16(u8, s8): 16-bit sums of 2 adjacent u*s, SATURATING - used only
 *             where u <= 63, so |2 * u * s| <= 16128 cannot saturate;
 *   vpdpwssd  _mm512_dpwssd_epi32(acc, s16, s16): acc += sum of 2 adjacent products, exact.
 * Weights are brought to an unsigned form u = q + OFF (OFF = 8, 16, 32, 64, 128 ... per type, 0
 * for the unsigned K-quant fields) while the activations x stay signed; the offset comes back out
 * as OFF * sum(x) (from vpdpbusd(OFF bytes, x) for q8_0 activations, from bsums for q8_K). This is
 * exact for every byte value, x = -128 included, so every integer block sum equals the scalar
 * reference's; only the float accumulation order differs.
 *
 * Lane layout: a 512-bit vector holds 64 weights, i.e. two 32-weight (sub-)blocks; vpdpbusd's 16
 * int32 lanes then hold lanes 0..7 = first 32 weights, 8..15 = second 32 (4 weights per lane), and
 * vpmaddubsw's 32 int16 lanes hold 2 weights each. Scales are applied per lane.
 *
 * Sections: helpers; float types; q8_0-activation types; q8_K-activation types; registration.
 */
#include "dot_avx512.h"

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

/* Index vectors for _mm512_permutexvar_epi16 over a vector of per-group int16 scales, for the
 * t-th 64 weights (32 int16 lanes, 2 weights each):
 *   groups of 32 weights: lanes 0..15 -> scale 2t, lanes 16..31 -> scale 2t+1;
 *   groups of 16 weights: lanes 8k..8k+7 -> scale 4t+k (k = 0..3). */
static const int16_t st_idx_g16_base[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
static inline __m512i st_idx_g32(int t) { return st_halves_epi16(2 * t, 2 * t + 1); }
static inline __m512i st_idx_g16(int t) {
    return _mm512_add_epi16(_mm512_loadu_si512((const void *)st_idx_g16_base),
                            _mm512_set1_epi16((short)(4 * t)));
}

/* ---------------------------------------------------------------------------------------------
 * Float activations: F32, F16, BF16 (n is any length; the tail uses masked loads, which do not
 * touch masked-off memory)
 * ------------------------------------------------------------------------------------------- */

static inline __mmask16 st_tail_mask(int64_t r) {
    return r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << r) - 1u);
}

/* 16 bf16 -> 16 f32: zero-extend to 32 bits and move into the high half. */
static inline __m512 st_bf16x16_to_ps(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* LOADW(p) gives 16 weights as floats; LOADW_MASK(m, p) the first lanes of m (zeros elsewhere).
 * name_one is the arithmetic; name (one row) and name_rows (rows w_stride elements apart, the
 * attention's scores against its K rows: no call a row) run it, so both give the same bits. */
#define ST_DEFINE_FLOAT_KERNEL(name, WT, LOADW, LOADW_MASK)                                    \
    static inline __attribute__((always_inline)) float name##_one(int64_t n, const WT *a, const float *x) { \
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();                         \
        __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();                         \
        int64_t i = 0;                                                                         \
        for (; i + 64 <= n; i += 64) {                                                         \
            acc0 = _mm512_fmadd_ps(LOADW(a + i), _mm512_loadu_ps(x + i), acc0);                \
            acc1 = _mm512_fmadd_ps(LOADW(a + i + 16), _mm512_loadu_ps(x + i + 16), acc1);      \
            acc2 = _mm512_fmadd_ps(LOADW(a + i + 32), _mm512_loadu_ps(x + i + 32), acc2);      \
            acc3 = _mm512_fmadd_ps(LOADW(a + i + 48), _mm512_loadu_ps(x + i + 48), acc3);      \
        }                                                                                      \
        for (; i < n; i += 16) {                                                               \
            const __mmask16 m = st_tail_mask(n - i);                                           \
            acc0 = _mm512_fmadd_ps(LOADW_MASK(m, a + i), _mm512_maskz_loadu_ps(m, x + i), acc0); \
        }                                                                                      \
        return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1),                   \
                                                  _mm512_add_ps(acc2, acc3)));                 \
    }                                                                                          \
    static void name(int64_t n, float *out, const void *w, const void *xq) {                   \
        *out = name##_one(n, (const WT *)w, (const float *)xq);                                \
    }                                                                                          \
    static void name##_rows(int64_t n, float *out, const void *w, size_t w_stride, int64_t rows, \
                            const float *x) {                                                  \
        const WT *a = (const WT *)w;                                                           \
        for (int64_t r = 0; r < rows; r++) out[r] = name##_one(n, a + (size_t)r * w_stride, x); \
    }

#define ST_LOAD_F32(p) _mm512_loadu_ps(p)
#define ST_LOAD_F32_MASK(m, p) _mm512_maskz_loadu_ps((m), (p))
#define ST_LOAD_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define ST_LOAD_F16_MASK(m, p) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((m), (p)))
#define ST_LOAD_BF16(p) st_bf16x16_to_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define ST_LOAD_BF16_MASK(m, p) st_bf16x16_to_ps(_mm256_maskz_loadu_epi16((m), (p)))

ST_DEFINE_FLOAT_KERNEL(st_dot_f32_avx512, float, ST_LOAD_F32, ST_LOAD_F32_MASK)
ST_DEFINE_FLOAT_KERNEL(st_dot_f16_avx512, uint16_t, ST_LOAD_F16, ST_LOAD_F16_MASK)
ST_DEFINE_FLOAT_KERNEL(st_dot_bf16_avx512, uint16_t, ST_LOAD_BF16, ST_LOAD_BF16_MASK)

/* ---------------------------------------------------------------------------------------------
 * 32-weight blocks with q8_0 activations: Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_1, Q5_1
 *
 * A "pair" step handles blocks i and i+1 (lanes 0..7: block i, 8..15: block i+1) and adds its
 * float contribution to acc; an odd last block runs with zeros in the upper half (its activations
 * are zero and its scale is 0). The driver runs two pairs per iteration into two accumulators.
 * ------------------------------------------------------------------------------------------- */

/* Activations of blocks i and (has2 ? i+1 : none). */
static inline __m512i st_q8_0_x(const block_q8_0 *y, int64_t i, int has2) {
    return st_load_2x256(y[i].qs, has2 ? y[i + 1].qs : NULL);
}

/* Per-lane d_w * d_x of blocks i (lower) and i+1 (upper, 0 when absent). */
#define ST_PAIR_SCALE(b, y, i, has2)                                                          \
    st_halves_ps(st_h2f((b)[i].d) * st_h2f((y)[i].d),                                         \
                 (has2) ? st_h2f((b)[(i) + 1].d) * st_h2f((y)[(i) + 1].d) : 0.0f)

/* sum(u*x) - OFF*sum(x) per lane, with u = q + OFF unsigned: the exact sum(q*x). */
static inline __m512i st_dot_offset(__m512i u, __m512i x, __m512i off) {
    const __m512i z = _mm512_setzero_si512();
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(z, u, x), _mm512_dpbusd_epi32(z, off, x));
}

/* The 5th bits of two blocks' qh words as a byte mask: bit j of block i's qh is weight j. */
static inline __mmask64 st_q5_mask(const uint8_t *qh0, const uint8_t *qh1) {
    const uint64_t lo = st_load_u32(qh0);
    const uint64_t hi = qh1 ? st_load_u32(qh1) : 0;
    return _cvtu64_mask64(lo | (hi << 32));
}

/* The IQ4_NL values + 128 (offset binary) in every 128-bit lane, for _mm512_shuffle_epi8. */
static inline __m512i st_iq4nl_table_u8(void) {
    const __m128i t = _mm_xor_si128(_mm_loadu_si128((const __m128i *)st_kvalues_iq4nl),
                                    _mm_set1_epi8((char)0x80));
    return _mm512_broadcast_i32x4(t);
}

static inline __m512 st_pair_q8_0(const block_q8_0 *b, const block_q8_0 *y, int64_t i, int has2,
                                  __m512 acc) {
    const __m512i off = _mm512_set1_epi8((char)0x80);
    /* q + 128 as unsigned = q ^ 0x80 */
    const __m512i u = _mm512_xor_si512(st_load_2x256(b[i].qs, has2 ? b[i + 1].qs : NULL), off);
    const __m512i p = st_dot_offset(u, st_q8_0_x(y, i, has2), off);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), ST_PAIR_SCALE(b, y, i, has2), acc);
}

static inline __m512 st_pair_q4_0(const block_q4_0 *b, const block_q8_0 *y, int64_t i, int has2,
                                  __m512 acc) {
    const __m512i u = st_nibbles_2x128(b[i].qs, has2 ? b[i + 1].qs : NULL); /* q + 8 */
    const __m512i p = st_dot_offset(u, st_q8_0_x(y, i, has2), _mm512_set1_epi8(8));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), ST_PAIR_SCALE(b, y, i, has2), acc);
}

static inline __m512 st_pair_q5_0(const block_q5_0 *b, const block_q8_0 *y, int64_t i, int has2,
                                  __m512 acc) {
    const __m512i off = _mm512_set1_epi8(16);
    __m512i u = st_nibbles_2x128(b[i].qs, has2 ? b[i + 1].qs : NULL);
    u = _mm512_mask_add_epi8(u, st_q5_mask(b[i].qh, has2 ? b[i + 1].qh : NULL), u, off); /* q+16 */
    const __m512i p = st_dot_offset(u, st_q8_0_x(y, i, has2), off);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), ST_PAIR_SCALE(b, y, i, has2), acc);
}

static inline __m512 st_pair_iq4_nl(const block_iq4_nl *b, const block_q8_0 *y, int64_t i,
                                    int has2, __m512 acc) {
    const __m512i idx = st_nibbles_2x128(b[i].qs, has2 ? b[i + 1].qs : NULL);
    const __m512i u = _mm512_shuffle_epi8(st_iq4nl_table_u8(), idx); /* kvalues[idx] + 128 */
    const __m512i p = st_dot_offset(u, st_q8_0_x(y, i, has2), _mm512_set1_epi8((char)0x80));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), ST_PAIR_SCALE(b, y, i, has2), acc);
}

/* Q4_1 / Q5_1: w = d*q + m, so dot = d*d_x*sum(q*x) + m*d_x*sum(x) per block. */
static inline __m512 st_pair_min_term(__m512i u, const block_q8_0 *y, int64_t i, int has2,
                                      uint16_t d0, uint16_t m0, uint16_t d1, uint16_t m1,
                                      __m512 acc) {
    const __m512i z = _mm512_setzero_si512();
    const __m512i x = st_q8_0_x(y, i, has2);
    const __m512i p = _mm512_dpbusd_epi32(z, u, x);
    const __m512i sx = _mm512_dpbusd_epi32(z, _mm512_set1_epi8(1), x);
    const float dx0 = st_h2f(y[i].d), dx1 = has2 ? st_h2f(y[i + 1].d) : 0.0f;
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), st_halves_ps(st_h2f(d0) * dx0, st_h2f(d1) * dx1), acc);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sx), st_halves_ps(st_h2f(m0) * dx0, st_h2f(m1) * dx1), acc);
}

static inline __m512 st_pair_q4_1(const block_q4_1 *b, const block_q8_0 *y, int64_t i, int has2,
                                  __m512 acc) {
    const __m512i u = st_nibbles_2x128(b[i].qs, has2 ? b[i + 1].qs : NULL);
    return st_pair_min_term(u, y, i, has2, b[i].d, b[i].m, has2 ? b[i + 1].d : 0,
                            has2 ? b[i + 1].m : 0, acc);
}

static inline __m512 st_pair_q5_1(const block_q5_1 *b, const block_q8_0 *y, int64_t i, int has2,
                                  __m512 acc) {
    __m512i u = st_nibbles_2x128(b[i].qs, has2 ? b[i + 1].qs : NULL);
    u = _mm512_mask_add_epi8(u, st_q5_mask(b[i].qh, has2 ? b[i + 1].qh : NULL), u,
                             _mm512_set1_epi8(16));
    return st_pair_min_term(u, y, i, has2, b[i].d, b[i].m, has2 ? b[i + 1].d : 0,
                            has2 ? b[i + 1].m : 0, acc);
}

#define ST_DEFINE_PAIR_KERNEL(name, WT, QK, PAIR)                                             \
    static void name(int64_t n, float *out, const void *w, const void *xq) {                 \
        const WT *b = (const WT *)w;                                                          \
        const block_q8_0 *y = (const block_q8_0 *)xq;                                         \
        const int64_t nb = n / (QK);                                                          \
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();                        \
        int64_t i = 0;                                                                        \
        for (; i + 4 <= nb; i += 4) {                                                         \
            acc0 = PAIR(b, y, i, 1, acc0);                                                    \
            acc1 = PAIR(b, y, i + 2, 1, acc1);                                                \
        }                                                                                     \
        for (; i < nb; i += 2) acc0 = PAIR(b, y, i, i + 1 < nb, acc0);                        \
        *out = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));                               \
    }

/* Q8_0 arithmetic (the AMX tiles, dot_amx.c, compute the same): each block's exact integer sum
 * S_b, then acc_k = fma(S_b, d_w * d_x, acc_k) in 16 accumulators k = b mod 16 (blocks in
 * order), and the result summed as st_q8_0_final says. Sixteen blocks a step: eight pairs of
 * lane sums reduced in one shuffle tree into one vector, lane 4L + j holding block 4j + L (the
 * gathered scales follow the same order); a short last step runs with zero blocks (S 0,
 * scale 0: those accumulators unchanged). */

/* Blocks i and i + 1 (has2) of row b against y: their 16 lane partials. */
static inline __m512i st_q8_0_pairsum(const block_q8_0 *b, const block_q8_0 *y, int64_t i, int has2) {
    const __m512i off = _mm512_set1_epi8((char)0x80);
    const __m512i u = _mm512_xor_si512(st_load_2x256(b[i].qs, has2 ? b[i + 1].qs : NULL), off);
    return st_dot_offset(u, st_q8_0_x(y, i, has2), off);
}

/* Pairs p[0..7] (blocks 2q, 2q + 1) -> 16 exact block sums, lane 4L + j = block 4j + L. */
static inline __m512i st_q8_0_isums16(const __m512i p[8]) {
    __m512i q[4]; /* 128-bit lanes: the 4 partials of blocks 4r .. 4r + 3 */
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        q[r] = _mm512_add_epi32(_mm512_shuffle_i64x2(p[2 * r], p[2 * r + 1], 0x88),
                                _mm512_shuffle_i64x2(p[2 * r], p[2 * r + 1], 0xDD));
    /* lane L: [blocks L, 4 + L, ...] partial pairs, then the full sums */
    const __m512i va = _mm512_add_epi32(_mm512_unpacklo_epi32(q[0], q[1]), _mm512_unpackhi_epi32(q[0], q[1]));
    const __m512i vb = _mm512_add_epi32(_mm512_unpacklo_epi32(q[2], q[3]), _mm512_unpackhi_epi32(q[2], q[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(va, vb), _mm512_unpackhi_epi64(va, vb));
}

/* The same as floats (exact: the sums are far below 2^24). */
static inline __m512 st_q8_0_sums16(const __m512i p[8]) { return _mm512_cvtepi32_ps(st_q8_0_isums16(p)); }

/* The fp16 scales of blocks i .. i + 15 of a row of bs-byte blocks that each open with their d,
 * as floats, block i + 4j + L in lane 4L + j; the blocks from i + left on are not read (0). */
static inline __m512 st_blk_d16(const void *row, size_t bs, int64_t i, int64_t left) {
    /* in registers: sixteen 2-byte stores and a wide load stall on the store forwarding */
    const uint8_t *p = (const uint8_t *)row + (size_t)i * bs;
    const int full = left >= 16;
#define ST_D16(k) (full || (k) < left ? st_load_u16(p + (size_t)(k) * bs) : 0)
    __m128i a = _mm_cvtsi32_si128(ST_D16(0)), c = _mm_cvtsi32_si128(ST_D16(2));
    a = _mm_insert_epi16(a, ST_D16(4), 1);  c = _mm_insert_epi16(c, ST_D16(6), 1);
    a = _mm_insert_epi16(a, ST_D16(8), 2);  c = _mm_insert_epi16(c, ST_D16(10), 2);
    a = _mm_insert_epi16(a, ST_D16(12), 3); c = _mm_insert_epi16(c, ST_D16(14), 3);
    a = _mm_insert_epi16(a, ST_D16(1), 4);  c = _mm_insert_epi16(c, ST_D16(3), 4);
    a = _mm_insert_epi16(a, ST_D16(5), 5);  c = _mm_insert_epi16(c, ST_D16(7), 5);
    a = _mm_insert_epi16(a, ST_D16(9), 6);  c = _mm_insert_epi16(c, ST_D16(11), 6);
    a = _mm_insert_epi16(a, ST_D16(13), 7); c = _mm_insert_epi16(c, ST_D16(15), 7);
#undef ST_D16
    return _mm512_cvtph_ps(_mm256_set_m128i(c, a));
}

/* d_w * d_x of blocks i + (4j + L) in lane 4L + j, for the first `left` of them (others 0);
 * w: the weight row, wbs: its block size in bytes. */
static inline __m512 st_q8_0_scales16(const void *w, size_t wbs, const block_q8_0 *y, int64_t i, int64_t left) {
    return _mm512_mul_ps(st_blk_d16(w, wbs, i, left), st_blk_d16(y, sizeof(block_q8_0), i, left));
}

/* The result from the 16 accumulators (acc_k in lane 4 * (k % 4) + k / 4), in k order through
 * st_dot_sum16_tree (dot.h). */
static inline float st_q8_0_final(__m512 acc) {
    /* accumulator k = 4j + L sits in lane 4L + j: the tree's steps 8 and 4 apart pair lanes j, j + 2
     * then j, j + 1 inside each 128-bit lane L (as s_k + s_{k+8}, then + s_{k+4}), steps 2 and 1
     * pair the 128-bit lanes L, L + 2 then L, L + 1: the same operands in the same order */
    __m512 v = _mm512_add_ps(acc, _mm512_permute_ps(acc, 0xEE));          /* j + (j + 2) */
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x55));                     /* + (j + 1) */
    const __m128 l0 = _mm512_castps512_ps128(v), l1 = _mm512_extractf32x4_ps(v, 1);
    const __m128 l2 = _mm512_extractf32x4_ps(v, 2), l3 = _mm512_extractf32x4_ps(v, 3);
    return _mm_cvtss_f32(_mm_add_ss(_mm_add_ss(l0, l2), _mm_add_ss(l1, l3)));
}

/* Blocks i and i + 1 (has2) of a Q4_0 row against y: their 16 lane partials (q = nibble - 8). */
static inline __m512i st_q4_0_pairsum(const block_q4_0 *b, const block_q8_0 *y, int64_t i, int has2) {
    const __m512i u = st_nibbles_2x128(b[i].qs, has2 ? b[i + 1].qs : NULL); /* q + 8 */
    return st_dot_offset(u, st_q8_0_x(y, i, has2), _mm512_set1_epi8(8));
}

/* One block's 8 lane partials of sum(q * x), exact for every input (the offset form): qs the
 * block's quants (Q8_0: 32 bytes; q4: Q4_0's 16 bytes of nibbles, q + 8), x the activations. */
static inline __m256i st_short_isum(const uint8_t *qs, const int8_t *x8, __m256i off, int q4) {
    const __m256i z = _mm256_setzero_si256(), x = _mm256_loadu_si256((const __m256i *)x8);
    __m256i u;
    if (q4) {
        const __m128i t = _mm_loadu_si128((const __m128i *)qs);
        u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
    } else {
        u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)qs), off);
    }
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(z, u, x), _mm256_dpbusd_epi32(z, off, x));
}

/* Rows of fewer than 16 blocks (one short 16-block step, half empty or more: the small models'
 * rows) in 256-bit steps of 8 blocks, as the AVX2 kernel lays them out: block b's exact sum S_b
 * (the offset form, exact for every input) into accumulator b (lanes 0-7 of a0, 8-15 of a1),
 * acc_b = fma(S_b, d_w d_x, 0), then st_dot_sum16_tree's steps in registers: the same bits as the
 * 16-block steps. q4: Q4_0 weights (nibbles + 8), else Q8_0; wb: the weight block's bytes. */
static inline float st_sum16_short(int64_t n, const void *w, size_t wb, const block_q8_0 *y, const int q4) {
    const int64_t nb = n / 32;
    const __m256i z = _mm256_setzero_si256(), off = _mm256_set1_epi8(q4 ? 8 : (char)0x80);
    __m256 a[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < nb; i += 8) {
        __m256i p[8];
        __m128i dw = _mm_setzero_si128(), dx = _mm_setzero_si128(); /* the fp16 scales, in registers */
        /* block i + Q: its lane partials into p[Q], its scales into lane Q of dw, dx (Q a constant:
         * the insert's selector) */
#define ST_SHORT_BLOCK(Q)                                                                          \
    if (i + (Q) < nb) {                                                                            \
        const uint8_t *blk = (const uint8_t *)w + (size_t)(i + (Q)) * wb;                          \
        p[Q] = st_short_isum(blk + 2, y[i + (Q)].qs, off, q4);                                     \
        dw = _mm_insert_epi16(dw, st_load_u16(blk), (Q));                                          \
        dx = _mm_insert_epi16(dx, y[i + (Q)].d, (Q));                                              \
    } else                                                                                         \
        p[Q] = z;
        ST_SHORT_BLOCK(0) ST_SHORT_BLOCK(1) ST_SHORT_BLOCK(2) ST_SHORT_BLOCK(3)
        ST_SHORT_BLOCK(4) ST_SHORT_BLOCK(5) ST_SHORT_BLOCK(6) ST_SHORT_BLOCK(7)
#undef ST_SHORT_BLOCK
        const __m256i S = st_hsum8_i32(p); /* the eight blocks' sums in lanes 0-7 (exact) */
        const __m256 sc = _mm256_mul_ps(_mm256_cvtph_ps(dw), _mm256_cvtph_ps(dx));
        a[i / 8] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), sc, a[i / 8]);
    }
    return st_sum16_tree8(a[0], a[1]);
}

/* A kernel of 32-weight blocks on exact block sums (Q8_0, Q4_0): 16 blocks a step. */
#define ST_DEFINE_SUM16_KERNEL(name, WT, PAIRSUM, SHORT)                                       \
    static void name(int64_t n, float *out, const void *w, const void *xq) {                 \
        const WT *b = (const WT *)w;                                                          \
        const block_q8_0 *y = (const block_q8_0 *)xq;                                         \
        const int64_t nb = n / 32;                                                            \
        if (nb < 16) { /* one short step: in steps of 8 blocks (st_sum16_short) */             \
            *out = st_sum16_short(n, w, sizeof(WT), y, SHORT);                                \
            return;                                                                           \
        }                                                                                     \
        __m512 acc = _mm512_setzero_ps();                                                     \
        for (int64_t i = 0; i < nb; i += 16) {                                                \
            const int64_t left = nb - i;                                                      \
            __m512i p[8];                                                                     \
            if (left >= 16) {                                                                 \
                _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) p[q] = PAIRSUM(b, y, i + 2 * q, 1); \
                acc = _mm512_fmadd_ps(st_q8_0_sums16(p), st_q8_0_scales16(b, sizeof(WT), y, i, 16), acc); \
            } else { /* 1..15 blocks: the missing ones count as S 0 with scale 0 */            \
                for (int q = 0; q < 8; q++)                                                   \
                    p[q] = 2 * q < left ? PAIRSUM(b, y, i + 2 * q, 2 * q + 1 < left) : _mm512_setzero_si512(); \
                acc = _mm512_fmadd_ps(st_q8_0_sums16(p), st_q8_0_scales16(b, sizeof(WT), y, i, left), acc); \
            }                                                                                 \
        }                                                                                     \
        *out = st_q8_0_final(acc);                                                            \
    }

ST_DEFINE_SUM16_KERNEL(st_dot_q8_0_avx512, block_q8_0, st_q8_0_pairsum, 0)
ST_DEFINE_SUM16_KERNEL(st_dot_q4_0_avx512, block_q4_0, st_q4_0_pairsum, 1)

/* The weight bytes of blocks i and i + 1 (has2) as st_q4_0_pairsum takes them: the nibbles
 * (q + 8). */
static inline __m512i st_q4_0_wpair(const block_q4_0 *b, int64_t i, int has2) {
    return st_nibbles_2x128(b[i].qs, has2 ? b[i + 1].qs : NULL);
}

/* The same kernel for NC activation rows ys bytes apart (st_vec_dot_n_fn): each step's weight
 * pairs unpacked and its weight scales converted once, then every row's block sums, scales and
 * accumulators exactly as the single-row kernel computes them (the same bits). Q4_0 only: for
 * Q8_0 (no unpacking to share) it measured slower than the single-row kernel row by row (23.3
 * against 24.0 GMAC/s, development box, bench_tiles; Q4_0 22.4 against 20.3). A step: 16 blocks
 * from block i, left of them to the row's end. */
static inline void st_dot_q4_0_cols_step(const block_q4_0 *b, const uint8_t *y0, size_t ys, const int NC,
                                         int64_t i, int64_t left, __m512 *acc) {
    const __m512i off = _mm512_set1_epi8(8);
    const int full = left >= 16;
    __m512i u[8];
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++)
        u[q] = full || 2 * q < left ? st_q4_0_wpair(b, i + 2 * q, full || 2 * q + 1 < left) : _mm512_setzero_si512();
    const __m512 dwv = st_blk_d16(b, sizeof(block_q4_0), i, left);
    for (int c = 0; c < NC; c++) {
        const block_q8_0 *y = (const block_q8_0 *)(y0 + (size_t)c * ys);
        __m512i p[8];
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++)
            p[q] = full || 2 * q < left ? st_dot_offset(u[q], st_q8_0_x(y, i + 2 * q, full || 2 * q + 1 < left), off)
                                        : _mm512_setzero_si512();
        const __m512 sc = _mm512_mul_ps(dwv, st_blk_d16(y, sizeof(block_q8_0), i, left));
        acc[c] = _mm512_fmadd_ps(st_q8_0_sums16(p), sc, acc[c]);
    }
}

static inline void st_dot_q4_0_cols(int64_t n, float *out, const block_q4_0 *b, const uint8_t *y0, size_t ys,
                                    const int NC) {
    const int64_t nb = n / 32;
    __m512 acc[ST_DOT_MAX_COLS];
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= nb; i += 16) st_dot_q4_0_cols_step(b, y0, ys, NC, i, 16, acc);
    if (i < nb) st_dot_q4_0_cols_step(b, y0, ys, NC, i, nb - i, acc);
    for (int c = 0; c < NC; c++) out[c] = st_q8_0_final(acc[c]);
}

/* Q8_0 against prepared activation rows (dot.h, st_q8_0_prep_fn): per row, the quants + 128 as
 * bytes (xu) and the blocks' scales as floats in the lane order above (dxp, zero past the row).
 * A block's exact sum is then sum((x + 128) w) - 128 sum(w): one vpdpbusd a pair for each row
 * (unsigned activations, signed weights) and the weight term once for all rows; the scales are
 * one load. The same integers, scales and accumulation as st_dot_q8_0_avx512: the same bits. */
static void st_q8_0_prep_avx512(const void *xq, int64_t n, uint8_t *xu, float *dxp) {
    const block_q8_0 *y = (const block_q8_0 *)xq;
    const int64_t nb = n / 32;
    const __m256i off = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b++)
        _mm256_storeu_si256((__m256i *)(xu + 32 * b),
                            _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)y[b].qs), off));
    for (int64_t i = 0; i < nb; i += 16) _mm512_storeu_ps(dxp + i, st_blk_d16(y, sizeof(block_q8_0), i, nb - i));
}

static inline void st_dotp_q8_0_cols(int64_t n, float *out, const block_q8_0 *b, const uint8_t *xu, size_t xs,
                                     const float *dxp, size_t ds, const int NC) {
    const __m512i c128 = _mm512_set1_epi8((char)0x80), z = _mm512_setzero_si512();
    const int64_t nb = n / 32;
    __m512 acc[ST_DOT_MAX_COLS];
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i += 16) {
        const int64_t left = nb - i;
        __m512i wv[8], cp[8];
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) {
            wv[q] = 2 * q < left ? st_load_2x256(b[i + 2 * q].qs, 2 * q + 1 < left ? b[i + 2 * q + 1].qs : NULL) : z;
            cp[q] = _mm512_dpbusd_epi32(z, c128, wv[q]); /* 128 sum(w) */
        }
        const __m512i corr = st_q8_0_isums16(cp);
        const __m512 dwv = st_blk_d16(b, sizeof(block_q8_0), i, left);
        for (int c = 0; c < NC; c++) {
            const uint8_t *xr = xu + (size_t)c * xs + 32 * i;
            __m512i p[8];
#pragma GCC unroll 8
            for (int q = 0; q < 8; q++) {
                /* a lone last block: its half only (the row's bytes end there) */
                const __m512i xv = 2 * q + 1 < left ? _mm512_loadu_si512((const void *)(xr + 64 * q))
                                 : 2 * q < left   ? _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xr + 64 * q)
                                                  : z;
                p[q] = _mm512_dpbusd_epi32(z, xv, wv[q]);
            }
            const __m512 s = _mm512_cvtepi32_ps(_mm512_sub_epi32(st_q8_0_isums16(p), corr));
            const __m512 sc = _mm512_mul_ps(dwv, _mm512_loadu_ps(dxp + (size_t)c * ds + i));
            acc[c] = _mm512_fmadd_ps(s, sc, acc[c]);
        }
    }
    for (int c = 0; c < NC; c++) out[c] = st_q8_0_final(acc[c]);
}

ST_DEFINE_PAIR_KERNEL(st_dot_q5_0_avx512, block_q5_0, QK5_0, st_pair_q5_0)
ST_DEFINE_PAIR_KERNEL(st_dot_iq4_nl_avx512, block_iq4_nl, QK4_NL, st_pair_iq4_nl)
ST_DEFINE_PAIR_KERNEL(st_dot_q4_1_avx512, block_q4_1, QK4_1, st_pair_q4_1)
ST_DEFINE_PAIR_KERNEL(st_dot_q5_1_avx512, block_q5_1, QK5_1, st_pair_q5_1)

/* ---------------------------------------------------------------------------------------------
 * 256-weight super-blocks with q8_K activations
 *
 * Each super-block runs in 4 steps t of 64 weights (activations y->qs[64t .. 64t+63]); int32
 * lanes accumulate scale * sum(u*x) exactly, then one float FMA per super-block applies d * d_x
 * (acc). The min and offset terms are exact int32 dot products of per-group factors with bsums
 * (vpmaddwd), scaled into a second float accumulator (accm) that is subtracted at the end.
 * ------------------------------------------------------------------------------------------- */



/* Q4_K / Q5_K arithmetic (the AMX tiles, dot_amx.c, compute the same, so every path gives the
 * same bits): per super-block the exact integers S = sum_j sc_j * dot(u_j, x_j) and
 * M = sum_j m_j * sum(x_j), then acc = fma(S, d_x * d, acc) and accm = fma(M, d_x * dmin, accm)
 * in super-block order, and the result acc - accm. */

/* One K-quant super-block of weights (Q4_K, Q5_K, Q6_K; u: its 4 steps of 64 unpacked values,
 * sct: their scales per int16 lane, mn16: the mins, or Q6_K's scales, per 16 weights) against
 * activation block y: the 16 int32 lanes whose sum is S and the 8 whose sum is M (Q6_K: O). */
static inline void st_ksb_sums(const __m512i u[4], const __m512i sct[4], __m256i mn16,
                                 const block_q8_K *y, __m512i *isum, __m256i *mprod) {
    __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) /* u <= 63 (Q6_K; 31 for Q5_K): vpmaddubsw cannot saturate */
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(u[t], st_q8_K_x(y, t)), sct[t]);
    *isum = acc;
    *mprod = _mm256_madd_epi16(st_q8_K_bsums(y), mn16);
}

/* The lane sums of two (isum, mprod) pairs a and b as floats [S_a, M_a, S_b, M_b] (exact
 * integers, rounded once to float). */
static inline __m128 st_ksb_reduce2(__m512i isa, __m512i isb, __m256i ma, __m256i mb) {
    /* [a lanes 0-3 + 8-11, a 4-7 + 12-15, b ..., b ...] */
    const __m512i x = _mm512_add_epi32(_mm512_shuffle_i64x2(isa, isb, 0x44), _mm512_shuffle_i64x2(isa, isb, 0xEE));
    const __m512i y = _mm512_inserti64x4(_mm512_castsi256_si512(ma), mb, 1);
    /* 128-bit lanes: 4 partial sums each of S_a, S_b, M_a, M_b */
    __m512i z = _mm512_add_epi32(_mm512_shuffle_i64x2(x, y, 0x88), _mm512_shuffle_i64x2(x, y, 0xDD));
    z = _mm512_add_epi32(z, _mm512_shuffle_epi32(z, (_MM_PERM_ENUM)0x4E));
    z = _mm512_add_epi32(z, _mm512_shuffle_epi32(z, (_MM_PERM_ENUM)0xB1));
    const __m512i pick = _mm512_setr_epi32(0, 8, 4, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps128(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(pick, z)));
}

/* [d_x * d, d_x * dmin] of one super-block (d, dmin: the block's first two fp16 fields). */
static inline __m128 st_q45_K_dd(const void *blk, const block_q8_K *y) {
    return _mm_mul_ps(_mm_set1_ps(y->d), _mm_cvtph_ps(_mm_cvtsi32_si128((int)st_load_u32(blk))));
}

/* Unpacks super-block i of a Q4_K (b5 NULL) or Q5_K (b4 NULL) row: 4 steps of 64 values, their
 * per-lane scales and the mins per 16 weights. */
static inline void st_q45_K_unpack(const block_q4_K *b4, const block_q5_K *b5, int64_t i,
                                   const __m512i bits[4], __m512i u[4], __m512i sct[4], __m256i *mn16) {
    const __m512i sixteen = _mm512_set1_epi8(16);
    const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const uint8_t *scales = b5 ? b5[i].scales : b4[i].scales;
    const uint8_t *qs = b5 ? b5[i].qs : b4[i].qs;
    uint64_t sc8, mn8;
    st_k4_scales(scales, &sc8, &mn8);
    const __m512i scv = _mm512_zextsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc8)));
    *mn16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_cvtsi64_si128((long long)mn8), dup));
    const __m512i qh = b5 ? st_bcast_256(b5[i].qh) : _mm512_setzero_si512(); /* bit g of qh[l]: weight 32g + l */
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) {
        /* sub-blocks 2t (low nibbles of qs[32t..]) and 2t+1 (high nibbles) */
        u[t] = st_nibbles_256(qs + 32 * t);
        if (b5) u[t] = _mm512_mask_add_epi8(u[t], _mm512_test_epi8_mask(qh, bits[t]), u[t], sixteen);
        sct[t] = _mm512_permutexvar_epi16(st_idx_g32(t), scv);
    }
}

/* Shared body of Q4_K and Q5_K: qh is NULL for Q4_K. Super-blocks in pairs (one reduction for
 * both); the odd last one alone. */
static inline __attribute__((always_inline)) void st_dot_q45_K(int64_t n, float *out, const block_q4_K *b4, const block_q5_K *b5,
                                const block_q8_K *y) {
    const int64_t nb = n / QK_K;
    const size_t bs = b5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const uint8_t *base = b5 ? (const uint8_t *)b5 : (const uint8_t *)b4;
    __m512i bits[4];
    for (int t = 0; t < 4; t++) bits[t] = st_bitsel(t);
    __m128 acc = _mm_setzero_ps(); /* [acc, accm, -, -] */
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        __m512i u[4], sct[4], isa, isb;
        __m256i mn16, ma, mb;
        st_q45_K_unpack(b4, b5, i, bits, u, sct, &mn16);
        st_ksb_sums(u, sct, mn16, y + i, &isa, &ma);
        st_q45_K_unpack(b4, b5, i + 1, bits, u, sct, &mn16);
        st_ksb_sums(u, sct, mn16, y + i + 1, &isb, &mb);
        const __m128 s = st_ksb_reduce2(isa, isb, ma, mb);
        acc = _mm_fmadd_ps(s, st_q45_K_dd(base + (size_t)i * bs, y + i), acc);
        acc = _mm_fmadd_ps(_mm_movehl_ps(s, s), st_q45_K_dd(base + (size_t)(i + 1) * bs, y + i + 1), acc);
    }
    if (i < nb) {
        __m512i u[4], sct[4], isa;
        __m256i mn16, ma;
        st_q45_K_unpack(b4, b5, i, bits, u, sct, &mn16);
        st_ksb_sums(u, sct, mn16, y + i, &isa, &ma);
        const __m128 s = st_ksb_reduce2(isa, _mm512_setzero_si512(), ma, _mm256_setzero_si256());
        acc = _mm_fmadd_ps(s, st_q45_K_dd(base + (size_t)i * bs, y + i), acc);
    }
    *out = _mm_cvtss_f32(acc) - _mm_cvtss_f32(_mm_movehdup_ps(acc));
}

/* The same for NC activation rows (y + c * ys bytes, c < NC) against one weight row: each
 * super-block is unpacked once for all rows, whose sums are reduced two rows at a time. */
static inline __attribute__((always_inline)) void st_dot_q45_K_cols(int64_t n, float *out, const block_q4_K *b4,
                                     const block_q5_K *b5, const uint8_t *y0, size_t ys, const int NC) {
    const int64_t nb = n / QK_K;
    const size_t bs = b5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const uint8_t *base = b5 ? (const uint8_t *)b5 : (const uint8_t *)b4;
    __m512i bits[4];
    for (int t = 0; t < 4; t++) bits[t] = st_bitsel(t);
    __m128 acc[(ST_DOT_MAX_COLS + 1) / 2]; /* [acc, accm] of rows 2p and 2p+1 */
    for (int p = 0; p < (NC + 1) / 2; p++) acc[p] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m512i u[4], sct[4];
        __m256i mn16;
        st_q45_K_unpack(b4, b5, i, bits, u, sct, &mn16);
        const __m128 dw = _mm_cvtph_ps(_mm_cvtsi32_si128((int)st_load_u32(base + (size_t)i * bs)));
        for (int p = 0; p < (NC + 1) / 2; p++) {
            const block_q8_K *ya = (const block_q8_K *)(y0 + (size_t)(2 * p) * ys) + i;
            __m512i isa, isb = _mm512_setzero_si512();
            __m256i ma, mb = _mm256_setzero_si256();
            __m128 dd = _mm_mul_ps(_mm_set1_ps(ya->d), dw);
            st_ksb_sums(u, sct, mn16, ya, &isa, &ma);
            if (2 * p + 1 < NC) {
                const block_q8_K *yb = (const block_q8_K *)(y0 + (size_t)(2 * p + 1) * ys) + i;
                st_ksb_sums(u, sct, mn16, yb, &isb, &mb);
                dd = _mm_movelh_ps(dd, _mm_mul_ps(_mm_set1_ps(yb->d), dw));
            }
            acc[p] = _mm_fmadd_ps(st_ksb_reduce2(isa, isb, ma, mb), dd, acc[p]);
        }
    }
    for (int c = 0; c < NC; c++) {
        const __m128 a = c & 1 ? _mm_movehl_ps(acc[c / 2], acc[c / 2]) : acc[c / 2];
        out[c] = _mm_cvtss_f32(a) - _mm_cvtss_f32(_mm_movehdup_ps(a));
    }
}

/* Dispatch on the column count so each NC is its own unrolled copy. */
static void st_dotn_q4_K_avx512(int64_t n, float *out, const void *w, const void *xq, size_t ys, int nc) {
    ST_DOT_COLS_CALL(nc, st_dot_q45_K_cols, n, out, (const block_q4_K *)w, NULL, (const uint8_t *)xq, ys)
}

static void st_dotn_q5_K_avx512(int64_t n, float *out, const void *w, const void *xq, size_t ys, int nc) {
    ST_DOT_COLS_CALL(nc, st_dot_q45_K_cols, n, out, NULL, (const block_q5_K *)w, (const uint8_t *)xq, ys)
}

static void st_dotn_q4_0_avx512(int64_t n, float *out, const void *w, const void *xq, size_t ys, int nc) {
    ST_DOT_COLS_CALL(nc, st_dot_q4_0_cols, n, out, (const block_q4_0 *)w, (const uint8_t *)xq, ys)
}

static void st_dotp_q8_0_avx512(int64_t n, float *out, const void *w, const uint8_t *xu, size_t xs,
                                const float *dxp, size_t ds, int nc) {
    ST_DOT_COLS_CALL(nc, st_dotp_q8_0_cols, n, out, (const block_q8_0 *)w, xu, xs, dxp, ds)
}

static void st_dot_q4_K_avx512(int64_t n, float *out, const void *w, const void *xq) {
    st_dot_q45_K(n, out, (const block_q4_K *)w, NULL, (const block_q8_K *)xq);
}

static void st_dot_q5_K_avx512(int64_t n, float *out, const void *w, const void *xq) {
    st_dot_q45_K(n, out, NULL, (const block_q5_K *)w, (const block_q8_K *)xq);
}

/* Q6_K: weight 128h + r (r < 128): low 4 bits = nibble r/64 of ql[64h + r%64], high 2 bits =
 * bits 2(r/32).. of qh[32h + r%32]; q = u - 32 with u = low | high << 4; int8 scale per 16.
 * Arithmetic (shared with the AMX tiles, dot_amx.c): per super-block the exact integers
 * S = sum_g sc_g * dot(u_g, x_g) and O = sum_g sc_g * sum(x_g), then acc = fma(S, d_x * d, acc),
 * accm = fma(O, 32 * (d_x * d), accm), out = acc - accm; super-blocks (or activation rows) in
 * pairs through st_ksb_reduce2. */

/* Super-block b unpacked: u[t] = weights 64t .. 64t + 63 (u <= 63), sct[t] their int16 scales per
 * lane, sc16 the 16 scales. */
static inline void st_q6_K_unpack(const block_q6_K *b, const __m512i idx[4], const __m512i sh[2],
                                  __m512i u[4], __m512i sct[4], __m256i *sc16) {
    *sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    const __m512i scv = _mm512_zextsi256_si512(*sc16);
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) {
        u[t] = st_q6_K_u(b, t, sh);
        sct[t] = _mm512_permutexvar_epi16(idx[t], scv);
    }
}

/* [d_x * d, 32 * (d_x * d)] of one super-block. */
static inline __m128 st_q6_K_dd(const block_q6_K *b, const block_q8_K *y) {
    const float dd = y->d * st_h2f(b->d);
    return _mm_setr_ps(dd, 32.0f * dd, 0.0f, 0.0f);
}

static void st_dot_q6_K_avx512(int64_t n, float *out, const void *w, const void *xq) {
    const block_q6_K *b = (const block_q6_K *)w;
    const block_q8_K *y = (const block_q8_K *)xq;
    const int64_t nb = n / QK_K;
    __m512i idx[4], sh[2];
    for (int t = 0; t < 4; t++) idx[t] = st_idx_g16(t);
    for (int s = 0; s < 2; s++) sh[s] = st_shift_2bit(s);
    __m128 acc = _mm_setzero_ps(); /* [acc, accm, -, -] */
    for (int64_t i = 0; i < nb; i += 2) {
        const int has2 = i + 1 < nb;
        __m512i u[4], sct[4], isa, isb = _mm512_setzero_si512();
        __m256i sc16, oa, ob = _mm256_setzero_si256();
        st_q6_K_unpack(b + i, idx, sh, u, sct, &sc16);
        st_ksb_sums(u, sct, sc16, y + i, &isa, &oa);
        if (has2) {
            st_q6_K_unpack(b + i + 1, idx, sh, u, sct, &sc16);
            st_ksb_sums(u, sct, sc16, y + i + 1, &isb, &ob);
        }
        const __m128 s = st_ksb_reduce2(isa, isb, oa, ob);
        acc = _mm_fmadd_ps(s, st_q6_K_dd(b + i, y + i), acc);
        if (has2) acc = _mm_fmadd_ps(_mm_movehl_ps(s, s), st_q6_K_dd(b + i + 1, y + i + 1), acc);
    }
    *out = _mm_cvtss_f32(acc) - _mm_cvtss_f32(_mm_movehdup_ps(acc));
}

/* Q6_K for NC activation rows, bit-identical per row to st_dot_q6_K_avx512. */
static inline void st_dot_q6_K_cols(int64_t n, float *out, const block_q6_K *b, const uint8_t *y0,
                                    size_t ys, const int NC) {
    const int64_t nb = n / QK_K;
    __m512i idx[4], sh[2];
    for (int t = 0; t < 4; t++) idx[t] = st_idx_g16(t);
    for (int s = 0; s < 2; s++) sh[s] = st_shift_2bit(s);
    __m128 acc[(ST_DOT_MAX_COLS + 1) / 2];
    for (int p = 0; p < (NC + 1) / 2; p++) acc[p] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m512i u[4], sct[4];
        __m256i sc16;
        st_q6_K_unpack(b + i, idx, sh, u, sct, &sc16);
        for (int p = 0; p < (NC + 1) / 2; p++) {
            const block_q8_K *ya = (const block_q8_K *)(y0 + (size_t)(2 * p) * ys) + i;
            __m512i isa, isb = _mm512_setzero_si512();
            __m256i oa, ob = _mm256_setzero_si256();
            __m128 dd = st_q6_K_dd(b + i, ya);
            st_ksb_sums(u, sct, sc16, ya, &isa, &oa);
            if (2 * p + 1 < NC) {
                const block_q8_K *yb = (const block_q8_K *)(y0 + (size_t)(2 * p + 1) * ys) + i;
                st_ksb_sums(u, sct, sc16, yb, &isb, &ob);
                dd = _mm_movelh_ps(dd, st_q6_K_dd(b + i, yb));
            }
            acc[p] = _mm_fmadd_ps(st_ksb_reduce2(isa, isb, oa, ob), dd, acc[p]);
        }
    }
    for (int c = 0; c < NC; c++) {
        const __m128 a = c & 1 ? _mm_movehl_ps(acc[c / 2], acc[c / 2]) : acc[c / 2];
        out[c] = _mm_cvtss_f32(a) - _mm_cvtss_f32(_mm_movehdup_ps(a));
    }
}

static void st_dotn_q6_K_avx512(int64_t n, float *out, const void *w, const void *xq, size_t ys, int nc) {
    ST_DOT_COLS_CALL(nc, st_dot_q6_K_cols, n, out, (const block_q6_K *)w, (const uint8_t *)xq, ys)
}

/* Q2_K: weight 128h + 32k + l = bits 2k.. of qs[32h + l]; per 16 weights a 4-bit scale (low
 * nibble) and a 4-bit min (high nibble): w = d*sc*q - dmin*m. */
static void st_dot_q2_K_avx512(int64_t n, float *out, const void *w, const void *xq) {
    const block_q2_K *b = (const block_q2_K *)w;
    const block_q8_K *y = (const block_q8_K *)xq;
    const int64_t nb = n / QK_K;
    const __m512i z = _mm512_setzero_si512(), m2 = _mm512_set1_epi8(0x03);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m512i idx[4], sh[2];
    for (int t = 0; t < 4; t++) idx[t] = st_idx_g16(t);
    for (int s = 0; s < 2; s++) sh[s] = st_shift_2bit(s);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++, b++, y++) {
        const __m128i raw = _mm_loadu_si128((const __m128i *)b->scales);
        const __m512i scv = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(raw, m4)));
        const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
        const __m256i mprod = _mm256_madd_epi16(st_q8_K_bsums(y), mn16);
        __m512i isum = z;
        for (int t = 0; t < 4; t++) {
            const __m512i qv = st_bcast_256(b->qs + 32 * (t >> 1));
            const __m512i u = _mm512_and_si512(_mm512_srlv_epi16(qv, sh[t & 1]), m2);
            const __m512i m = _mm512_maddubs_epi16(u, st_q8_K_x(y, t));
            isum = _mm512_dpwssd_epi32(isum, m, _mm512_permutexvar_epi16(idx[t], scv));
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(y->d * st_h2f(b->d)), acc);
        accm = _mm512_fmadd_ps(st_cvt256_ps(mprod), _mm512_set1_ps(y->d * st_h2f(b->dmin)), accm);
    }
    *out = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(accm);
}

/* The 16 Q3_K scales (6 bits, minus 32) as int8, from 12 bytes s: scale g has low 4 bits
 * s[g] & 15 (g < 8) or s[g-8] >> 4 (g >= 8), and high 2 bits (s[8 + g%4] >> 2(g/4)) & 3. Reads
 * exactly the 12 bytes. */
static inline __m128i st_q3_K_scales(const uint8_t *s) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i l8 = _mm_loadl_epi64((const __m128i *)s);
    const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(l8, m4), _mm_and_si128(_mm_srli_epi16(l8, 4), m4));
    /* bytes g = s[8 + g%4], 32-bit lane g/4 shifted right by 2(g/4) */
    const __m128i h = _mm_srlv_epi32(_mm_set1_epi32((int)st_load_u32(s + 8)), _mm_setr_epi32(0, 2, 4, 6));
    const __m128i hi = _mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi8(0x03)), 4);
    return _mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32));
}

/* Q3_K: low 2 bits as Q2_K; bit g of hmask[l] set means no -4 for weight 32g + l, i.e.
 * q = u - 4 with u = low | hbit << 2; 16 6-bit scales minus 32, packed in 12 bytes. */
static void st_dot_q3_K_avx512(int64_t n, float *out, const void *w, const void *xq) {
    const block_q3_K *b = (const block_q3_K *)w;
    const block_q8_K *y = (const block_q8_K *)xq;
    const int64_t nb = n / QK_K;
    const __m512i z = _mm512_setzero_si512(), m2 = _mm512_set1_epi8(0x03), four = _mm512_set1_epi8(4);
    __m512i idx[4], sh[2], bits[4];
    for (int t = 0; t < 4; t++) { idx[t] = st_idx_g16(t); bits[t] = st_bitsel(t); }
    for (int s = 0; s < 2; s++) sh[s] = st_shift_2bit(s);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++, b++, y++) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(st_q3_K_scales(b->scales));
        const __m512i scv = _mm512_zextsi256_si512(sc16);
        const __m256i oprod = _mm256_madd_epi16(st_q8_K_bsums(y), sc16);
        const __m512i hm = st_bcast_256(b->hmask);
        __m512i isum = z;
        for (int t = 0; t < 4; t++) {
            const __m512i qv = st_bcast_256(b->qs + 32 * (t >> 1));
            __m512i u = _mm512_and_si512(_mm512_srlv_epi16(qv, sh[t & 1]), m2);
            u = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(hm, bits[t]), u, four); /* q + 4 */
            const __m512i m = _mm512_maddubs_epi16(u, st_q8_K_x(y, t));
            isum = _mm512_dpwssd_epi32(isum, m, _mm512_permutexvar_epi16(idx[t], scv));
        }
        const float dd = y->d * st_h2f(b->d);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dd), acc);
        accm = _mm512_fmadd_ps(st_cvt256_ps(oprod), _mm512_set1_ps(4.0f * dd), accm);
    }
    *out = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(accm);
}

/* The IQ types below have u up to 241 (IQ4_XS) or 126 (IQ3, 64 +- grid), too large for
 * vpmaddubsw, so they use vpdpbusd and scale the int32 lanes with vpmulld: ls holds the 8
 * per-32-weight scales as int32; the offset term OFF * sum_ib ls_ib * sum(x of ib) runs on bsums
 * with the scales duplicated per 16 weights (ls16). */
static inline void st_iq_scales(__m256i ls, const block_q8_K *y, __m512i *scv, __m256i *oprod) {
    /* int16 lanes 2ib and 2ib+1 both = ls[ib] (|ls| < 2^15) */
    const __m256i ls16 = _mm256_or_si256(_mm256_and_si256(ls, _mm256_set1_epi32(0xFFFF)),
                                         _mm256_slli_epi32(ls, 16));
    *scv = _mm512_zextsi256_si512(ls);
    *oprod = _mm256_madd_epi16(st_q8_K_bsums(y), ls16);
}

/* The 8 nibbles of a little-endian 32-bit word, nibble ib in int32 lane ib. */
static inline __m256i st_nibbles32(uint32_t v) {
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)v),
                                              _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                            _mm256_set1_epi32(0x0F));
}

/* IQ4_XS: 8 sub-blocks of 32 IQ4_NL values, each with a 6-bit scale minus 32. */
static void st_dot_iq4_xs_avx512(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq4_xs *b = (const block_iq4_xs *)w;
    const block_q8_K *y = (const block_q8_K *)xq;
    const int64_t nb = n / QK_K;
    const __m512i z = _mm512_setzero_si512(), table = st_iq4nl_table_u8();
    __m512i idx[4];
    for (int t = 0; t < 4; t++) idx[t] = st_idx32_g32(t);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++, b++, y++) {
        /* scale ib: low 4 bits = nibble ib of scales_l, high 2 = bits 2ib.. of scales_h */
        const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b->scales_h),
                                                              _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                            _mm256_set1_epi32(3));
        const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(st_nibbles32(st_load_u32(b->scales_l)),
                                                            _mm256_slli_epi32(hi, 4)),
                                            _mm256_set1_epi32(32));
        __m512i scv;
        __m256i oprod;
        st_iq_scales(ls, y, &scv, &oprod);
        __m512i isum = z;
        for (int t = 0; t < 4; t++) {
            /* sub-blocks 2t and 2t+1: qs[32t .. 32t+15] and qs[32t+16 .. 32t+31] */
            const __m512i nib = st_nibbles_2x128(b->qs + 32 * t, b->qs + 32 * t + 16);
            const __m512i u = _mm512_shuffle_epi8(table, nib); /* value + 128 */
            const __m512i p = _mm512_dpbusd_epi32(z, u, st_q8_K_x(y, t));
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(p, _mm512_permutexvar_epi32(idx[t], scv)));
        }
        const float dd = y->d * st_h2f(b->d);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dd), acc);
        accm = _mm512_fmadd_ps(st_cvt256_ps(oprod), _mm512_set1_ps(128.0f * dd), accm);
    }
    *out = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(accm);
}

/* IQ3_XXS: per 32 weights (sub-block ib): 8 grid indices qs[8ib..8ib+7] (4 weights each) and a
 * 32-bit word at qs[64 + 4ib]: 4 x 7-bit sign indices (8 weights each) and a 4-bit scale s in
 * the top bits; w = d * (2s+1)/4 * grid * sign. */
static void st_dot_iq3_xxs_avx512(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq3_xxs *b = (const block_iq3_xxs *)w;
    const block_q8_K *y = (const block_q8_K *)xq;
    const int64_t nb = n / QK_K;
    const __m512i z = _mm512_setzero_si512();
    __m512i idx[4];
    for (int t = 0; t < 4; t++) idx[t] = st_idx32_g32(t);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++, b++, y++) {
        uint32_t word[8];
        memcpy(word, b->qs + QK_K / 4, sizeof word);
        /* ls = 2 * (word >> 28) + 1 */
        const __m256i wv = _mm256_loadu_si256((const __m256i *)(b->qs + QK_K / 4));
        const __m256i ls = _mm256_add_epi32(_mm256_slli_epi32(_mm256_srli_epi32(wv, 28), 1),
                                            _mm256_set1_epi32(1));
        __m512i scv;
        __m256i oprod;
        st_iq_scales(ls, y, &scv, &oprod);
        __m512i isum = z;
        for (int t = 0; t < 4; t++) {
            /* grid indices of sub-blocks 2t, 2t+1; their sign words 2t, 2t+1 */
            const __m512i gi = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 16 * t)));
            const __m512i g = _mm512_i32gather_epi32(gi, (const void *)st_iq3xxs_grid, 4);
            const __mmask64 k = _cvtu64_mask64(st_iq3xxs_signs(word[2 * t], word[2 * t + 1]));
            const __m512i p = _mm512_dpbusd_epi32(z, st_signed_grid_u8(g, k), st_q8_K_x(y, t));
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(p, _mm512_permutexvar_epi32(idx[t], scv)));
        }
        const float dd = 0.25f * y->d * st_h2f(b->d);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dd), acc);
        accm = _mm512_fmadd_ps(st_cvt256_ps(oprod), _mm512_set1_ps(64.0f * dd), accm);
    }
    *out = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(accm);
}

/* IQ3_S: 64 9-bit grid indices (low 8 bits qs[k], 9th bit = bit k%8 of qh[k/8]); sign bit i of
 * the 256-bit signs field negates weight i; 4-bit scale s per 32 weights: w = d*(2s+1)*grid*sign. */
static void st_dot_iq3_s_avx512(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq3_s *b = (const block_iq3_s *)w;
    const block_q8_K *y = (const block_q8_K *)xq;
    const int64_t nb = n / QK_K;
    const __m512i z = _mm512_setzero_si512(), c256 = _mm512_set1_epi32(256);
    __m512i idx[4];
    for (int t = 0; t < 4; t++) idx[t] = st_idx32_g32(t);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++, b++, y++) {
        /* ls = 2 * (nibble ib of scales) + 1 */
        const __m256i ls = _mm256_add_epi32(_mm256_slli_epi32(st_nibbles32(st_load_u32(b->scales)), 1),
                                            _mm256_set1_epi32(1));
        __m512i scv;
        __m256i oprod;
        st_iq_scales(ls, y, &scv, &oprod);
        __m512i isum = z;
        for (int t = 0; t < 4; t++) {
            /* indices 16t .. 16t+15; their 9th bits are qh[2t] (first 8) and qh[2t+1] */
            __m512i gi = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 16 * t)));
            const __mmask16 kh = (__mmask16)(b->qh[2 * t] | (b->qh[2 * t + 1] << 8));
            gi = _mm512_mask_add_epi32(gi, kh, gi, c256);
            const __m512i g = _mm512_i32gather_epi32(gi, (const void *)st_iq3s_grid, 4);
            uint64_t sg;
            memcpy(&sg, b->signs + 8 * t, 8);
            const __m512i p = _mm512_dpbusd_epi32(z, st_signed_grid_u8(g, _cvtu64_mask64(sg)),
                                                  st_q8_K_x(y, t));
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(p, _mm512_permutexvar_epi32(idx[t], scv)));
        }
        const float dd = y->d * st_h2f(b->d);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dd), acc);
        accm = _mm512_fmadd_ps(st_cvt256_ps(oprod), _mm512_set1_ps(64.0f * dd), accm);
    }
    *out = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(accm);
}

/* ---------------------------------------------------------------------------------------------
 * Registration
 * ------------------------------------------------------------------------------------------- */

void st_dot_rows_register_avx512(st_vec_dot_rows_fn *table) {
    table[STRATA_TYPE_F32] = st_dot_f32_avx512_rows;
    table[STRATA_TYPE_F16] = st_dot_f16_avx512_rows;
    table[STRATA_TYPE_BF16] = st_dot_bf16_avx512_rows;
}

void st_q8_0_prepared_avx512(st_q8_0_prep_fn *prep, st_q8_0_dotp_fn *dot) {
    *prep = st_q8_0_prep_avx512;
    *dot = st_dotp_q8_0_avx512;
}

void st_dotn_register_avx512(st_vec_dot_n_fn *table) {
    table[STRATA_TYPE_Q4_0] = st_dotn_q4_0_avx512;
    table[STRATA_TYPE_Q4_K] = st_dotn_q4_K_avx512;
    table[STRATA_TYPE_Q5_K] = st_dotn_q5_K_avx512;
    table[STRATA_TYPE_Q6_K] = st_dotn_q6_K_avx512;
    st_dotn_register_avx512_iq(table);
}

void st_dot_register_avx512(st_vec_dot_fn *table) {
    table[STRATA_TYPE_F32] = st_dot_f32_avx512;
    table[STRATA_TYPE_F16] = st_dot_f16_avx512;
    table[STRATA_TYPE_BF16] = st_dot_bf16_avx512;
    table[STRATA_TYPE_Q8_0] = st_dot_q8_0_avx512;
    table[STRATA_TYPE_Q4_0] = st_dot_q4_0_avx512;
    table[STRATA_TYPE_Q4_1] = st_dot_q4_1_avx512;
    table[STRATA_TYPE_Q5_0] = st_dot_q5_0_avx512;
    table[STRATA_TYPE_Q5_1] = st_dot_q5_1_avx512;
    table[STRATA_TYPE_IQ4_NL] = st_dot_iq4_nl_avx512;
    table[STRATA_TYPE_Q2_K] = st_dot_q2_K_avx512;
    table[STRATA_TYPE_Q3_K] = st_dot_q3_K_avx512;
    table[STRATA_TYPE_Q4_K] = st_dot_q4_K_avx512;
    table[STRATA_TYPE_Q5_K] = st_dot_q5_K_avx512;
    table[STRATA_TYPE_Q6_K] = st_dot_q6_K_avx512;
    table[STRATA_TYPE_IQ4_XS] = st_dot_iq4_xs_avx512;
    table[STRATA_TYPE_IQ3_XXS] = st_dot_iq3_xxs_avx512;
    table[STRATA_TYPE_IQ3_S] = st_dot_iq3_s_avx512;
    st_dot_register_avx512_iq(table);
}
