/* dequant.c - block formats -> f32 on the CPU, one function per type, and the table
 * st_dequant_get reads. Each result is bit-for-bit what gguf.quants.dequantize (the gguf Python
 * package, float32 numpy) computes: same products in the same order, no fused multiply-add
 * (this file is built without -mfma; the pragma below stops clang from contracting anyway). */
#include "quant.h"

#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---------------------------------------------------------------------------------------------
 * Plain types
 * ------------------------------------------------------------------------------------------- */

static void dq_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void dq_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = (const uint16_t *)src;
    for (int64_t i = 0; i < n; i++) dst[i] = st_fp16_to_f32(h[i]);
}

static void dq_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = (const uint16_t *)src;
    for (int64_t i = 0; i < n; i++) dst[i] = st_bf16_to_f32(h[i]);
}

/* ---------------------------------------------------------------------------------------------
 * 32-weight blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL
 * Nibble layout: weight j (j < 16) is the low nibble of qs[j], weight j + 16 the high nibble.
 * ------------------------------------------------------------------------------------------- */

/* y = d * (q - 8) */
static void dq_q4_0(const void *src, float *dst, int64_t n) {
    const block_q4_0 *b = (const block_q4_0 *)src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = d * (float)((b[i].qs[j] & 0xF) - 8);
            dst[j + QK4_0 / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

/* y = d * q + m */
static void dq_q4_1(const void *src, float *dst, int64_t n) {
    const block_q4_1 *b = (const block_q4_1 *)src;
    for (int64_t i = 0; i < n / QK4_1; i++, dst += QK4_1) {
        const float d = st_fp16_to_f32(b[i].d), m = st_fp16_to_f32(b[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            dst[j] = d * (float)(b[i].qs[j] & 0xF) + m;
            dst[j + QK4_1 / 2] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

/* 5th bit of weight j is bit j of the little-endian u32 qh. y = d * (q - 16) */
static void dq_q5_0(const void *src, float *dst, int64_t n) {
    const block_q5_0 *b = (const block_q5_0 *)src;
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        const float d = st_fp16_to_f32(b[i].d);
        uint32_t qh;
        memcpy(&qh, b[i].qh, 4);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int lo = (b[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            const int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = d * (float)(lo - 16);
            dst[j + QK5_0 / 2] = d * (float)(hi - 16);
        }
    }
}

/* y = d * q + m */
static void dq_q5_1(const void *src, float *dst, int64_t n) {
    const block_q5_1 *b = (const block_q5_1 *)src;
    for (int64_t i = 0; i < n / QK5_1; i++, dst += QK5_1) {
        const float d = st_fp16_to_f32(b[i].d), m = st_fp16_to_f32(b[i].m);
        uint32_t qh;
        memcpy(&qh, b[i].qh, 4);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int lo = (b[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            const int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = d * (float)lo + m;
            dst[j + QK5_1 / 2] = d * (float)hi + m;
        }
    }
}

static void dq_q8_0(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = (const block_q8_0 *)src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

/* Q8_1: as Q8_0 (s = d * sum(qs) is only used by dot products). */
static void dq_q8_1(const void *src, float *dst, int64_t n) {
    const block_q8_1 *b = (const block_q8_1 *)src;
    for (int64_t i = 0; i < n / QK8_1; i++, dst += QK8_1) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int j = 0; j < QK8_1; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

/* y = d * kvalues[q] */
static void dq_iq4_nl(const void *src, float *dst, int64_t n) {
    const block_iq4_nl *b = (const block_iq4_nl *)src;
    for (int64_t i = 0; i < n / QK4_NL; i++, dst += QK4_NL) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            dst[j] = d * (float)st_kvalues_iq4nl[b[i].qs[j] & 0xF];
            dst[j + QK4_NL / 2] = d * (float)st_kvalues_iq4nl[b[i].qs[j] >> 4];
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * K-quants: 256-weight super-blocks
 * ------------------------------------------------------------------------------------------- */

/* Q2_K: 16 sub-blocks of 16. Weight e = 128c + 32s + l (c < 2, s < 4, l < 32) is bits 2s..2s+1
 * of qs[32c + l]. y = (d * scale) * q - (dmin * min), scale/min per sub-block e / 16. */
static void dq_q2_K(const void *src, float *dst, int64_t n) {
    const block_q2_K *b = (const block_q2_K *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = st_fp16_to_f32(b[i].d), dmin = st_fp16_to_f32(b[i].dmin);
        for (int c = 0; c < 2; c++) {
            for (int s = 0; s < 4; s++) {
                float *y = dst + 128 * c + 32 * s;
                const int sb = 8 * c + 2 * s; /* sub-block of y[0..15]; sb + 1 for y[16..31] */
                for (int h = 0; h < 2; h++) {
                    const uint8_t sc = b[i].scales[sb + h];
                    const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                    for (int l = 16 * h; l < 16 * h + 16; l++)
                        y[l] = dl * (float)((b[i].qs[32 * c + l] >> (2 * s)) & 3) - ml;
                }
            }
        }
    }
}

/* Q3_K: 16 sub-blocks of 16 with 6-bit signed scales (offset 32): scale j has low 4 bits from
 * scales[j % 8] (nibble j / 8) and high 2 bits from scales[8 + j % 4] (bits 2(j/4)..).
 * Weight e = 128c + 32s + l: low 2 bits from qs[32c + l] >> 2s, high bit from hmask[l] bit
 * (4c + s); q = low - (high ? 0 : 4). y = (d * scale) * q. */
static void dq_q3_K(const void *src, float *dst, int64_t n) {
    const block_q3_K *b = (const block_q3_K *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = st_fp16_to_f32(b[i].d);
        float dl[16];
        for (int j = 0; j < 16; j++) {
            const int lo = (b[i].scales[j % 8] >> (4 * (j / 8))) & 0xF;
            const int hi = (b[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3;
            dl[j] = d * (float)((lo | (hi << 4)) - 32);
        }
        for (int c = 0; c < 2; c++) {
            for (int s = 0; s < 4; s++) {
                const int bit = 4 * c + s;
                for (int l = 0; l < 32; l++) {
                    const int e = 128 * c + 32 * s + l;
                    const int q = ((b[i].qs[32 * c + l] >> (2 * s)) & 3) -
                                  (((b[i].hmask[l] >> bit) & 1) ? 0 : 4);
                    dst[e] = dl[e / 16] * (float)q;
                }
            }
        }
    }
}

/* Q4_K: 8 sub-blocks of 32. Weight e = 64c + 32h + l is nibble h of qs[32c + l], sub-block
 * 2c + h. y = (d * scale) * q - (dmin * min). */
static void dq_q4_K(const void *src, float *dst, int64_t n) {
    const block_q4_K *b = (const block_q4_K *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = st_fp16_to_f32(b[i].d), dmin = st_fp16_to_f32(b[i].dmin);
        for (int c = 0; c < 4; c++) {
            for (int h = 0; h < 2; h++) {
                uint8_t sc, m;
                st_get_scale_min_k4(2 * c + h, b[i].scales, &sc, &m);
                const float ds = d * (float)sc, dm = dmin * (float)m;
                float *y = dst + 64 * c + 32 * h;
                for (int l = 0; l < 32; l++)
                    y[l] = ds * (float)((b[i].qs[32 * c + l] >> (4 * h)) & 0xF) - dm;
            }
        }
    }
}

/* Q5_K: as Q4_K plus a 5th bit: weight 32j + l (sub-block j) has bit j of qh[l]. */
static void dq_q5_K(const void *src, float *dst, int64_t n) {
    const block_q5_K *b = (const block_q5_K *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = st_fp16_to_f32(b[i].d), dmin = st_fp16_to_f32(b[i].dmin);
        for (int c = 0; c < 4; c++) {
            for (int h = 0; h < 2; h++) {
                const int j = 2 * c + h;
                uint8_t sc, m;
                st_get_scale_min_k4(j, b[i].scales, &sc, &m);
                const float ds = d * (float)sc, dm = dmin * (float)m;
                float *y = dst + 32 * j;
                for (int l = 0; l < 32; l++) {
                    const int q = ((b[i].qs[32 * c + l] >> (4 * h)) & 0xF) |
                                  (((b[i].qh[l] >> j) & 1) << 4);
                    y[l] = ds * (float)q - dm;
                }
            }
        }
    }
}

/* Q6_K: 16 sub-blocks of 16 with int8 scales. Weight e = 128c + 64h + l (l < 64) has its low
 * nibble in ql[64c + l] >> 4h; weight e = 128c + 32s + l (l < 32) has its high 2 bits in
 * qh[32c + l] >> 2s. q = (low | high << 4) - 32; y = (d * scale) * q. */
static void dq_q6_K(const void *src, float *dst, int64_t n) {
    const block_q6_K *b = (const block_q6_K *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = st_fp16_to_f32(b[i].d);
        float dl[16];
        for (int j = 0; j < 16; j++) dl[j] = d * (float)b[i].scales[j];
        for (int c = 0; c < 2; c++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t ql0 = b[i].ql[64 * c + l], ql1 = b[i].ql[64 * c + 32 + l];
                const uint8_t qh = b[i].qh[32 * c + l];
                const int q0 = ((ql0 & 0xF) | (((qh >> 0) & 3) << 4)) - 32;
                const int q1 = ((ql1 & 0xF) | (((qh >> 2) & 3) << 4)) - 32;
                const int q2 = ((ql0 >> 4) | (((qh >> 4) & 3) << 4)) - 32;
                const int q3 = ((ql1 >> 4) | (((qh >> 6) & 3) << 4)) - 32;
                const int e = 128 * c + l;
                dst[e] = dl[e / 16] * (float)q0;
                dst[e + 32] = dl[(e + 32) / 16] * (float)q1;
                dst[e + 64] = dl[(e + 64) / 16] * (float)q2;
                dst[e + 96] = dl[(e + 96) / 16] * (float)q3;
            }
        }
    }
}

/* Q8_K: y = d * q (d is f32). */
static void dq_q8_K(const void *src, float *dst, int64_t n) {
    const block_q8_K *b = (const block_q8_K *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        for (int j = 0; j < QK_K; j++) dst[j] = b[i].d * (float)b[i].qs[j];
    }
}

/* ---------------------------------------------------------------------------------------------
 * IQ formats, 256-weight super-blocks
 * ------------------------------------------------------------------------------------------- */

/* IQ4_XS: 8 sub-blocks of 32 with 6-bit scales (offset 32): low 4 bits nibble j % 2 of
 * scales_l[j / 2], high 2 bits bits 2j.. of scales_h. In sub-block j, weight 16h + l is nibble h
 * of qs[16j + l]. y = (d * scale) * kvalues[q]. */
static void dq_iq4_xs(const void *src, float *dst, int64_t n) {
    const block_iq4_xs *b = (const block_iq4_xs *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int j = 0; j < QK_K / 32; j++) {
            const int lo = (b[i].scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
            const int hi = (b[i].scales_h >> (2 * j)) & 3;
            const float dl = d * (float)((lo | (hi << 4)) - 32);
            const uint8_t *qs = b[i].qs + 16 * j;
            float *y = dst + 32 * j;
            for (int l = 0; l < 16; l++) {
                y[l] = dl * (float)st_kvalues_iq4nl[qs[l] & 0xF];
                y[l + 16] = dl * (float)st_kvalues_iq4nl[qs[l] >> 4];
            }
        }
    }
}

/* IQ3_XXS: qs[0..63] are grid indices (4 weights each), then 8 little-endian u32 words, one per
 * sub-block of 32: bits 0..27 are four 7-bit sign indices (one per 8 weights, expanded through
 * ksigns), bits 28..31 the scale. db = (d * (0.5 + scale)) * 0.5; y = (db * grid) * sign. */
static void dq_iq3_xxs(const void *src, float *dst, int64_t n) {
    const block_iq3_xxs *b = (const block_iq3_xxs *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = st_fp16_to_f32(b[i].d);
        const uint8_t *qs = b[i].qs;
        const uint8_t *words = b[i].qs + QK_K / 4;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            uint32_t aux;
            memcpy(&aux, words + 4 * ib, 4);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int k = 0; k < 4; k++) {
                const uint8_t signs = st_ksigns_iq2xs[(aux >> (7 * k)) & 127];
                const uint32_t g0 = st_iq3xxs_grid[qs[8 * ib + 2 * k]];
                const uint32_t g1 = st_iq3xxs_grid[qs[8 * ib + 2 * k + 1]];
                float *y = dst + 32 * ib + 8 * k;
                for (int e = 0; e < 8; e++) {
                    const uint32_t g = e < 4 ? g0 : g1;
                    const float mag = (float)((g >> (8 * (e % 4))) & 0xFF);
                    const float sign = (signs & st_kmask_iq2xs[e]) ? -1.0f : 1.0f;
                    y[e] = db * mag * sign;
                }
            }
        }
    }
}

/* IQ3_S: 64 grid indices of 9 bits (low 8 in qs[m], 9th = bit m % 8 of qh[m / 8]), 4 weights
 * each; one sign bit per weight (bit e % 8 of signs[e / 8]); 4-bit scales, nibble j % 2 of
 * scales[j / 2] for sub-block j of 32. db = d * (1 + 2 * scale); y = (db * grid) * sign. */
static void dq_iq3_s(const void *src, float *dst, int64_t n) {
    const block_iq3_s *b = (const block_iq3_s *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int j = 0; j < QK_K / 32; j++) {
            const int sc = (b[i].scales[j / 2] >> (4 * (j % 2))) & 0xF;
            const float db = d * (float)(1 + 2 * sc);
            for (int m = 8 * j; m < 8 * j + 8; m++) {
                const int idx = b[i].qs[m] | (((b[i].qh[m / 8] >> (m % 8)) & 1) << 8);
                const uint32_t g = st_iq3s_grid[idx];
                for (int k = 0; k < 4; k++) {
                    const int e = 4 * m + k;
                    const float mag = (float)((g >> (8 * k)) & 0xFF);
                    const float sign = ((b[i].signs[e / 8] >> (e % 8)) & 1) ? -1.0f : 1.0f;
                    dst[e] = db * mag * sign;
                }
            }
        }
    }
}

/* The 8 magnitudes (or IQ1 values) of a 64-bit grid entry: element k in byte k. */
static inline int grid8(uint64_t g, int k) { return (int)(int8_t)(uint8_t)(g >> (8 * k)); }

/* IQ2_XXS: per sub-block of 32 two little-endian u32 words: the first holds 4 grid indices
 * (bytes, 8 weights each), the second four 7-bit sign indices (ksigns) and a 4-bit scale in bits
 * 28..31. db = (d * (0.5 + scale)) * 0.25; y = (db * grid) * sign. */
static void dq_iq2_xxs(const void *src, float *dst, int64_t n) {
    const block_iq2_xxs *b = (const block_iq2_xxs *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            uint32_t aux[2];
            memcpy(aux, b[i].qs + 4 * ib, 8);
            const float db = d * (0.5f + (float)(aux[1] >> 28)) * 0.25f;
            for (int k = 0; k < 4; k++) {
                const uint64_t g = st_iq2xxs_grid[(aux[0] >> (8 * k)) & 0xFF];
                const uint8_t signs = st_ksigns_iq2xs[(aux[1] >> (7 * k)) & 127];
                for (int e = 0; e < 8; e++)
                    dst[32 * ib + 8 * k + e] = db * (float)grid8(g, e) * ((signs >> e) & 1 ? -1.0f : 1.0f);
            }
        }
    }
}

/* IQ2_XS: qs[m] (8 weights each) = 9-bit grid index | 7-bit sign index << 9; a 4-bit scale per
 * 16 weights (nibble m / 2 % 2 of scales[m / 4]). db = (d * (0.5 + scale)) * 0.25. */
static void dq_iq2_xs(const void *src, float *dst, int64_t n) {
    const block_iq2_xs *b = (const block_iq2_xs *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int m = 0; m < QK_K / 8; m++) {
            const int sc = (b[i].scales[m / 4] >> (4 * ((m / 2) % 2))) & 0xF;
            const float db = d * (0.5f + (float)sc) * 0.25f;
            const uint64_t g = st_iq2xs_grid[b[i].qs[m] & 511];
            const uint8_t signs = st_ksigns_iq2xs[b[i].qs[m] >> 9];
            for (int e = 0; e < 8; e++)
                dst[8 * m + e] = db * (float)grid8(g, e) * ((signs >> e) & 1 ? -1.0f : 1.0f);
        }
    }
}

/* IQ2_S: 32 grid indices of 10 bits (low 8 in qs[m], bits 8-9 = bits 2(m % 4).. of qh[m / 4]),
 * 8 weights each; sign bit e of qs[32 + m] negates weight 8m + e; scales as IQ2_XS. */
static void dq_iq2_s(const void *src, float *dst, int64_t n) {
    const block_iq2_s *b = (const block_iq2_s *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int m = 0; m < QK_K / 8; m++) {
            const int sc = (b[i].scales[m / 4] >> (4 * ((m / 2) % 2))) & 0xF;
            const float db = d * (0.5f + (float)sc) * 0.25f;
            const int idx = b[i].qs[m] | (((b[i].qh[m / 4] >> (2 * (m % 4))) & 3) << 8);
            const uint64_t g = st_iq2s_grid[idx];
            const uint8_t signs = b[i].qs[QK_K / 8 + m];
            for (int e = 0; e < 8; e++)
                dst[8 * m + e] = db * (float)grid8(g, e) * ((signs >> e) & 1 ? -1.0f : 1.0f);
        }
    }
}

/* IQ1_S: per sub-block of 32 a u16 qh: bits 3k..3k+2 are the high bits of grid index k (low 8
 * in qs[4ib + k], 8 weights each), bits 12..14 the scale, bit 15 the delta's sign.
 * dl = d * (2 scale + 1); y = dl * (grid + delta), grid in {-1, 0, 1}. */
static void dq_iq1_s(const void *src, float *dst, int64_t n) {
    const block_iq1_s *b = (const block_iq1_s *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const unsigned qh = b[i].qh[ib];
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = (qh & 0x8000) ? -ST_IQ1S_DELTA : ST_IQ1S_DELTA;
            for (int k = 0; k < 4; k++) {
                const uint64_t g = st_iq1s_grid[b[i].qs[4 * ib + k] | (((qh >> (3 * k)) & 7) << 8)];
                for (int e = 0; e < 8; e++) dst[32 * ib + 8 * k + e] = dl * ((float)grid8(g, e) + delta);
            }
        }
    }
}

/* IQ1_M: grid index m (8 weights) = qs[m] | (nibble m % 2 of qh[m / 2]) & 7 << 8, bit 3 of that
 * nibble the delta's sign; 3-bit scale per 16 weights j: bits 3(j % 4).. of u16 word j / 4.
 * dl = d * (2 scale + 1); y = dl * (grid + delta). */
static void dq_iq1_m(const void *src, float *dst, int64_t n) {
    const block_iq1_m *b = (const block_iq1_m *)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = st_fp16_to_f32(st_iq1m_scale_bits(b[i].scales));
        uint16_t sc[4];
        memcpy(sc, b[i].scales, 8);
        for (int m = 0; m < QK_K / 8; m++) {
            const int j = m / 2;
            const float dl = d * (float)(2 * ((sc[j / 4] >> (3 * (j % 4))) & 7) + 1);
            const int nib = (b[i].qh[m / 2] >> (4 * (m % 2))) & 0xF;
            const float delta = (nib & 8) ? -ST_IQ1M_DELTA : ST_IQ1M_DELTA;
            const uint64_t g = st_iq1s_grid[b[i].qs[m] | ((nib & 7) << 8)];
            for (int e = 0; e < 8; e++) dst[8 * m + e] = dl * ((float)grid8(g, e) + delta);
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * MXFP4: 32-weight blocks, E8M0 exponent and E2M1 codes
 * ------------------------------------------------------------------------------------------- */

/* y = d * kvalues[q]; weight j < 16 the low nibble of qs[j], weight j + 16 its high nibble. */
static void dq_mxfp4(const void *src, float *dst, int64_t n) {
    const block_mxfp4 *b = (const block_mxfp4 *)src;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, dst += QK_MXFP4) {
        const float d = st_e8m0_to_f32_half(b[i].e);
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            dst[j] = d * (float)st_kvalues_mxfp4[b[i].qs[j] & 0xF];
            dst[j + QK_MXFP4 / 2] = d * (float)st_kvalues_mxfp4[b[i].qs[j] >> 4];
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Table
 * ------------------------------------------------------------------------------------------- */

static const st_dequant_fn st_dequant_table[STRATA_TYPE_COUNT] = {
    [STRATA_TYPE_F32] = dq_f32,
    [STRATA_TYPE_F16] = dq_f16,
    [STRATA_TYPE_BF16] = dq_bf16,
    [STRATA_TYPE_Q4_0] = dq_q4_0,
    [STRATA_TYPE_Q4_1] = dq_q4_1,
    [STRATA_TYPE_Q5_0] = dq_q5_0,
    [STRATA_TYPE_Q5_1] = dq_q5_1,
    [STRATA_TYPE_Q8_0] = dq_q8_0,
    [STRATA_TYPE_Q8_1] = dq_q8_1,
    [STRATA_TYPE_Q2_K] = dq_q2_K,
    [STRATA_TYPE_Q3_K] = dq_q3_K,
    [STRATA_TYPE_Q4_K] = dq_q4_K,
    [STRATA_TYPE_Q5_K] = dq_q5_K,
    [STRATA_TYPE_Q6_K] = dq_q6_K,
    [STRATA_TYPE_Q8_K] = dq_q8_K,
    [STRATA_TYPE_IQ4_NL] = dq_iq4_nl,
    [STRATA_TYPE_IQ4_XS] = dq_iq4_xs,
    [STRATA_TYPE_IQ3_XXS] = dq_iq3_xxs,
    [STRATA_TYPE_IQ3_S] = dq_iq3_s,
    [STRATA_TYPE_IQ2_XXS] = dq_iq2_xxs,
    [STRATA_TYPE_IQ2_XS] = dq_iq2_xs,
    [STRATA_TYPE_IQ2_S] = dq_iq2_s,
    [STRATA_TYPE_IQ1_S] = dq_iq1_s,
    [STRATA_TYPE_IQ1_M] = dq_iq1_m,
    [STRATA_TYPE_MXFP4] = dq_mxfp4,
};

st_dequant_fn st_dequant_get(strata_type type) {
    if ((int)type < 0 || (int)type >= STRATA_TYPE_COUNT) return NULL;
    return st_dequant_table[type];
}
