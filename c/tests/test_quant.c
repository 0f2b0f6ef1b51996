/* test_quant.c - tests of the CPU block formats (c/format/quant/): dequantization of every
 * supported type against blocks packed here from chosen levels and scales (the test's own
 * scatter-direction packing, plus a few fully hand-worked blocks), the IQ tables' structure,
 * quantize round trips and error bounds, F16/BF16 rounding cases, the Q8_0/Q8_K activation
 * quantizers on known inputs, and the argument checks of the public wrappers.
 * The bit-exact oracle against the gguf Python package is python/tests/test_quant_oracle.py. */
#include "quant.h"
#include "test.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

static test_rng rng = {0x9e3779b97f4a7c15ULL};

static int rnd(int n) { return (int)(test_rng_next(&rng) % (unsigned long long)n); }
/* A random fp16 in [lo, hi) (rounded), as its bits. */
static uint16_t rnd_half(float lo, float hi) {
    float u = 0.5f * (test_rng_float(&rng) + 1.0f);
    return st_f32_to_fp16(lo + (hi - lo) * u);
}
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Dequantizes through the public API and compares with want[] bit for bit; reports the first
 * difference. */
static void check_dequant(strata_type t, const void *blk, const float *want, int n) {
    float got[QK_K * 2];
    strata_status st = strata_dequantize_row(t, blk, got, n);
    CHECK(st == STRATA_OK, "%s: dequantize failed: %s", strata_type_name(t), strata_last_error());
    int bad = -1;
    for (int i = 0; i < n && bad < 0; i++)
        if (f2u(got[i]) != f2u(want[i])) bad = i;
    CHECK(bad < 0, "%s: element %d: got %.9g want %.9g", strata_type_name(t), bad,
          bad >= 0 ? got[bad] : 0.0, bad >= 0 ? want[bad] : 0.0);
}

/* ---------------------------------------------------------------------------------------------
 * (1a) Hand-worked blocks with known values
 * ------------------------------------------------------------------------------------------- */

static void test_known_blocks(void) {
    /* Q4_0, d = 1.0: qs[0] = 0xF0 -> y[0] = 0 - 8, y[16] = 15 - 8; qs[1] = 0x98 -> 0, 1. */
    block_q4_0 q40;
    memset(&q40, 0x88, sizeof q40); /* every weight q = 8 -> 0 */
    q40.d = 0x3C00;
    q40.qs[0] = 0xF0;
    q40.qs[1] = 0x98;
    float y[QK_K];
    CHECK(strata_dequantize_row(STRATA_TYPE_Q4_0, &q40, y, 32) == STRATA_OK, "q4_0");
    CHECK(y[0] == -8.0f && y[16] == 7.0f && y[1] == 0.0f && y[17] == 1.0f && y[5] == 0.0f,
          "q4_0 known: %g %g %g %g", y[0], y[16], y[1], y[17]);

    /* Q8_0, d = 0.5 (0x3800): q = -128, 127 -> -64, 63.5. */
    block_q8_0 q80;
    memset(&q80, 0, sizeof q80);
    q80.d = 0x3800;
    q80.qs[0] = -128;
    q80.qs[31] = 127;
    CHECK(strata_dequantize_row(STRATA_TYPE_Q8_0, &q80, y, 32) == STRATA_OK, "q8_0");
    CHECK(y[0] == -64.0f && y[31] == 63.5f && y[1] == 0.0f, "q8_0 known: %g %g", y[0], y[31]);

    /* Q5_0, d = 2: qh bit 0 set and qs[0] low nibble 15 -> q = 31 -> 2 * 15 = 30;
     * weight 16 has qh bit 16 clear and high nibble 0 -> q = 0 -> -32. */
    block_q5_0 q50;
    memset(&q50, 0, sizeof q50);
    q50.d = 0x4000;
    q50.qh[0] = 0x01;
    q50.qs[0] = 0x0F;
    CHECK(strata_dequantize_row(STRATA_TYPE_Q5_0, &q50, y, 32) == STRATA_OK, "q5_0");
    CHECK(y[0] == 30.0f && y[16] == -32.0f, "q5_0 known: %g %g", y[0], y[16]);

    /* Q4_K: d = 1, dmin = 1; sub-block 0: scale byte 0 = 3, min byte 4 = 2; weight 0 nibble 5
     * -> 3 * 5 - 2 = 13. Sub-block 4 (weights 128..159): scale = (scales[8] & 15) |
     * (scales[0] >> 6) << 4 = 1 | 2 << 4 = 33, min = (scales[8] >> 4) | (scales[4] >> 6) << 4 =
     * 0; weight 128 = low nibble of qs[64] = 2 -> 66. */
    block_q4_K q4k;
    memset(&q4k, 0, sizeof q4k);
    q4k.d = 0x3C00;
    q4k.dmin = 0x3C00;
    q4k.scales[0] = 3 | (2 << 6);
    q4k.scales[4] = 2;
    q4k.scales[8] = 1;
    q4k.qs[0] = 5;
    q4k.qs[64] = 2;
    CHECK(strata_dequantize_row(STRATA_TYPE_Q4_K, &q4k, y, QK_K) == STRATA_OK, "q4_K");
    CHECK(y[0] == 13.0f && y[1] == -2.0f && y[128] == 66.0f && y[129] == 0.0f,
          "q4_K known: %g %g %g %g", y[0], y[1], y[128], y[129]);

    /* Q6_K: d = 0.25, scales[0] = -4 -> step -1; weight 0: ql[0] low 0xF, qh[0] bits 0-1 = 3
     * -> q = 63 - 32 = 31 -> -31. Weight 96: ql[32] high nibble, qh[0] bits 6-7. */
    block_q6_K q6k;
    memset(&q6k, 0, sizeof q6k);
    q6k.d = 0x3400;
    for (int j = 0; j < 16; j++) q6k.scales[j] = 4;
    q6k.scales[0] = -4;
    q6k.ql[0] = 0x0F;
    q6k.qh[0] = 0x03 | (0x02 << 6);
    q6k.ql[32] = 0x10;
    CHECK(strata_dequantize_row(STRATA_TYPE_Q6_K, &q6k, y, QK_K) == STRATA_OK, "q6_K");
    /* weight 96: q = 1 | 2 << 4 = 33 -> 1, sub-block 6 step 1 -> 1 */
    CHECK(y[0] == -31.0f && y[1] == 32.0f && y[96] == 1.0f, "q6_K known: %g %g %g", y[0], y[1], y[96]);

    /* IQ4_NL, d = 1: nibbles 0 and 15 -> -127 and 113. */
    block_iq4_nl nl;
    memset(&nl, 0, sizeof nl);
    nl.d = 0x3C00;
    nl.qs[3] = 0xF0;
    CHECK(strata_dequantize_row(STRATA_TYPE_IQ4_NL, &nl, y, 32) == STRATA_OK, "iq4_nl");
    CHECK(y[3] == -127.0f && y[19] == 113.0f && y[0] == -127.0f, "iq4_nl known: %g %g", y[3], y[19]);

    /* IQ3_XXS, d = 2: grid index 1 = (20, 4, 4, 4); scale nibble 1 -> db = 2 * 1.5 * 0.5 = 1.5;
     * sign index 1 -> ksigns 0x81: weights 0 and 7 negative. */
    block_iq3_xxs x3;
    memset(&x3, 0, sizeof x3);
    x3.d = 0x4000;
    x3.qs[0] = 1;
    const uint32_t w0 = (1u << 28) | 1u;
    memcpy(x3.qs + QK_K / 4, &w0, 4);
    CHECK(strata_dequantize_row(STRATA_TYPE_IQ3_XXS, &x3, y, QK_K) == STRATA_OK, "iq3_xxs");
    CHECK(y[0] == -30.0f && y[1] == 6.0f && y[4] == 6.0f && y[7] == -6.0f,
          "iq3_xxs known: %g %g %g %g", y[0], y[1], y[4], y[7]);

    /* Tables: kvalues are the IQ4_NL levels, ksigns has even parity, kmask is bit i, grids
     * start as in the format's definition. */
    CHECK(st_kvalues_iq4nl[0] == -127 && st_kvalues_iq4nl[8] == 1 && st_kvalues_iq4nl[15] == 113, "kvalues");
    int parity_ok = 1;
    for (int i = 0; i < 128; i++) {
        const int s = st_ksigns_iq2xs[i];
        if ((s & 127) != i || (__builtin_popcount((unsigned)s) & 1)) parity_ok = 0;
    }
    CHECK(parity_ok, "ksigns: 7 bits + even parity bit");
    for (int i = 0; i < 8; i++) CHECK(st_kmask_iq2xs[i] == (1u << i), "kmask[%d]", i);
    CHECK(st_iq3xxs_grid[0] == 0x04040404u && st_iq3xxs_grid[1] == 0x04040414u, "iq3xxs grid head");
    CHECK(st_iq3s_grid[0] == 0x01010101u && st_iq3s_grid[1] == 0x01010103u, "iq3s grid head");
    int bytes_ok = 1;
    for (int i = 0; i < 256; i++)
        for (int k = 0; k < 4; k++) {
            const int v = (st_iq3xxs_grid[i] >> (8 * k)) & 0xFF;
            if (!((v >= 4 && v <= 0x34 && (v - 4) % 8 == 0) || v == 0x3e)) bytes_ok = 0;
        }
    for (int i = 0; i < 512; i++)
        for (int k = 0; k < 4; k++) {
            const int v = (st_iq3s_grid[i] >> (8 * k)) & 0xFF;
            if (v < 1 || v > 15 || v % 2 == 0) bytes_ok = 0;
        }
    CHECK(bytes_ok, "grid bytes are the formats' magnitude levels");
}

/* ---------------------------------------------------------------------------------------------
 * (1b) Random blocks packed here from levels; expected value from the format's formula
 * ------------------------------------------------------------------------------------------- */

/* Set bits of a byte array: value v (width bits) at bit position pos. */
static void put_bits(uint8_t *p, int pos, int width, unsigned v) {
    for (int b = 0; b < width; b++)
        if ((v >> b) & 1) p[(pos + b) / 8] |= (uint8_t)(1u << ((pos + b) % 8));
}

static void test_packed_32(void) {
    for (int iter = 0; iter < 50; iter++) {
        uint8_t blk[2 * 36];
        float want[64];
        int q[64];
        /* Q4_0 / Q4_1 / IQ4_NL: 2 blocks each */
        for (int t = 0; t < 3; t++) {
            const strata_type type = t == 0 ? STRATA_TYPE_Q4_0 : t == 1 ? STRATA_TYPE_Q4_1 : STRATA_TYPE_IQ4_NL;
            const int bb = (int)strata_type_block_bytes(type);
            memset(blk, 0, sizeof blk);
            for (int b = 0; b < 2; b++) {
                uint8_t *p = blk + b * bb;
                const uint16_t dh = rnd_half(1e-3f, 1.0f), mh = rnd_half(-1.0f, 1.0f);
                memcpy(p, &dh, 2);
                if (t == 1) memcpy(p + 2, &mh, 2);
                uint8_t *qs = p + (t == 1 ? 4 : 2);
                const float d = st_fp16_to_f32(dh), m = st_fp16_to_f32(mh);
                for (int j = 0; j < 32; j++) {
                    q[j] = rnd(16);
                    put_bits(qs, (j % 16) * 8 + (j / 16) * 4, 4, (unsigned)q[j]);
                    want[32 * b + j] = t == 0 ? d * (float)(q[j] - 8)
                                     : t == 1 ? d * (float)q[j] + m
                                              : d * (float)st_kvalues_iq4nl[q[j]];
                }
            }
            check_dequant(type, blk, want, 64);
        }
        /* Q5_0 / Q5_1 */
        for (int t = 0; t < 2; t++) {
            const strata_type type = t == 0 ? STRATA_TYPE_Q5_0 : STRATA_TYPE_Q5_1;
            const int bb = (int)strata_type_block_bytes(type);
            memset(blk, 0, sizeof blk);
            for (int b = 0; b < 2; b++) {
                uint8_t *p = blk + b * bb;
                const uint16_t dh = rnd_half(1e-3f, 1.0f), mh = rnd_half(-1.0f, 1.0f);
                memcpy(p, &dh, 2);
                if (t == 1) memcpy(p + 2, &mh, 2);
                uint8_t *qh = p + (t == 1 ? 4 : 2), *qs = qh + 4;
                const float d = st_fp16_to_f32(dh), m = st_fp16_to_f32(mh);
                for (int j = 0; j < 32; j++) {
                    q[j] = rnd(32);
                    put_bits(qs, (j % 16) * 8 + (j / 16) * 4, 4, (unsigned)q[j] & 15);
                    put_bits(qh, j, 1, (unsigned)q[j] >> 4);
                    want[32 * b + j] = t == 0 ? d * (float)(q[j] - 16) : d * (float)q[j] + m;
                }
            }
            check_dequant(type, blk, want, 64);
        }
        /* Q8_0 / Q8_1 */
        for (int t = 0; t < 2; t++) {
            const strata_type type = t == 0 ? STRATA_TYPE_Q8_0 : STRATA_TYPE_Q8_1;
            const int bb = (int)strata_type_block_bytes(type);
            memset(blk, 0, sizeof blk);
            for (int b = 0; b < 2; b++) {
                uint8_t *p = blk + b * bb;
                const uint16_t dh = rnd_half(1e-3f, 1.0f);
                memcpy(p, &dh, 2);
                int8_t *qs = (int8_t *)(p + (t == 1 ? 4 : 2));
                for (int j = 0; j < 32; j++) {
                    qs[j] = (int8_t)(rnd(256) - 128);
                    want[32 * b + j] = st_fp16_to_f32(dh) * (float)qs[j];
                }
            }
            check_dequant(type, blk, want, 64);
        }
    }
}

/* Packs one random super-block of type t into blk and writes the expected 256 values. */
static void pack_superblock(strata_type t, uint8_t *blk, float *want) {
    memset(blk, 0, 292);
    const uint16_t dh = rnd_half(1e-3f, 1.0f), mh = rnd_half(1e-3f, 1.0f);
    const float d = st_fp16_to_f32(dh), dmin = st_fp16_to_f32(mh);
    int q[QK_K];
    switch (t) {
    case STRATA_TYPE_Q2_K: { /* scales[16] | qs[64] | d | dmin */
        int sc[16], mn[16];
        for (int j = 0; j < 16; j++) { sc[j] = rnd(16); mn[j] = rnd(16); blk[j] = (uint8_t)(sc[j] | mn[j] << 4); }
        memcpy(blk + 80, &dh, 2);
        memcpy(blk + 82, &mh, 2);
        for (int e = 0; e < QK_K; e++) {
            q[e] = rnd(4);
            /* weight e: byte 32 * (e / 128) + e % 32, bits 2 * ((e / 32) % 4) */
            put_bits(blk + 16, 8 * (32 * (e / 128) + e % 32) + 2 * ((e / 32) % 4), 2, (unsigned)q[e]);
            want[e] = (d * (float)sc[e / 16]) * (float)q[e] - dmin * (float)mn[e / 16];
        }
        break;
    }
    case STRATA_TYPE_Q3_K: { /* hmask[32] | qs[64] | scales[12] | d */
        int sc[16];
        for (int j = 0; j < 16; j++) {
            sc[j] = rnd(64);
            /* low nibbles: scales 0..7 in the low halves of bytes 0..7, 8..15 in the high halves;
             * high 2-bit pairs: byte 8 + j % 4, bit pair j / 4 */
            put_bits(blk + 96, 8 * (j % 8) + 4 * (j / 8), 4, (unsigned)sc[j] & 15);
            put_bits(blk + 96, 8 * (8 + j % 4) + 2 * (j / 4), 2, (unsigned)sc[j] >> 4);
        }
        memcpy(blk + 108, &dh, 2);
        for (int e = 0; e < QK_K; e++) {
            q[e] = rnd(8) - 4; /* -4..3: high bit set means no -4 offset */
            const unsigned u = (unsigned)(q[e] + 4);
            put_bits(blk + 32, 8 * (32 * (e / 128) + e % 32) + 2 * ((e / 32) % 4), 2, u & 3);
            put_bits(blk, 8 * (e % 32) + e / 32, 1, u >> 2);
            want[e] = (d * (float)(sc[e / 16] - 32)) * (float)q[e];
        }
        break;
    }
    case STRATA_TYPE_Q4_K:
    case STRATA_TYPE_Q5_K: { /* d | dmin | scales[12] | (qh[32]) | qs[128] */
        const int five = t == STRATA_TYPE_Q5_K;
        int sc[8], mn[8];
        memcpy(blk, &dh, 2);
        memcpy(blk + 2, &mh, 2);
        uint8_t *s = blk + 4;
        for (int j = 0; j < 8; j++) {
            sc[j] = rnd(64); mn[j] = rnd(64);
            if (j < 4) {
                put_bits(s, 8 * j, 6, (unsigned)sc[j]);
                put_bits(s, 8 * (j + 4), 6, (unsigned)mn[j]);
            } else {
                put_bits(s, 8 * (j + 4), 4, (unsigned)sc[j] & 15);
                put_bits(s, 8 * (j + 4) + 4, 4, (unsigned)mn[j] & 15);
                put_bits(s, 8 * (j - 4) + 6, 2, (unsigned)sc[j] >> 4);
                put_bits(s, 8 * j + 6, 2, (unsigned)mn[j] >> 4);
            }
        }
        uint8_t *qh = blk + 16, *qs = blk + 16 + (five ? 32 : 0);
        for (int e = 0; e < QK_K; e++) {
            q[e] = rnd(five ? 32 : 16);
            /* weight e: byte 32 * (e / 64) + e % 32, nibble (e / 32) % 2; 5th bit: qh[e % 32]
             * bit e / 32 */
            put_bits(qs, 8 * (32 * (e / 64) + e % 32) + 4 * ((e / 32) % 2), 4, (unsigned)q[e] & 15);
            if (five) put_bits(qh, 8 * (e % 32) + e / 32, 1, (unsigned)q[e] >> 4);
            want[e] = (d * (float)sc[e / 32]) * (float)q[e] - dmin * (float)mn[e / 32];
        }
        break;
    }
    case STRATA_TYPE_Q6_K: { /* ql[128] | qh[64] | scales[16] | d */
        int8_t *sc = (int8_t *)(blk + 192);
        for (int j = 0; j < 16; j++) sc[j] = (int8_t)(rnd(256) - 128);
        memcpy(blk + 208, &dh, 2);
        for (int e = 0; e < QK_K; e++) {
            q[e] = rnd(64);
            const int c = e / 128, r = e % 128;
            /* low nibble: ql[64c + r % 64], nibble r / 64; high 2 bits: qh[32c + r % 32],
             * pair r / 32 */
            put_bits(blk, 8 * (64 * c + r % 64) + 4 * (r / 64), 4, (unsigned)q[e] & 15);
            put_bits(blk + 128, 8 * (32 * c + r % 32) + 2 * (r / 32), 2, (unsigned)q[e] >> 4);
            want[e] = (d * (float)sc[e / 16]) * (float)(q[e] - 32);
        }
        break;
    }
    case STRATA_TYPE_Q8_K: { /* f32 d | qs[256] | bsums */
        const float df = d * (test_rng_float(&rng) < 0 ? -1.0f : 1.0f);
        memcpy(blk, &df, 4);
        for (int e = 0; e < QK_K; e++) {
            q[e] = rnd(256) - 128;
            blk[4 + e] = (uint8_t)(int8_t)q[e];
            want[e] = df * (float)q[e];
        }
        break;
    }
    case STRATA_TYPE_IQ4_XS: { /* d | scales_h u16 | scales_l[4] | qs[128] */
        int sc[8];
        memcpy(blk, &dh, 2);
        for (int j = 0; j < 8; j++) {
            sc[j] = rnd(64);
            put_bits(blk + 2, 2 * j, 2, (unsigned)sc[j] >> 4);
            put_bits(blk + 4, 4 * j, 4, (unsigned)sc[j] & 15);
        }
        for (int e = 0; e < QK_K; e++) {
            q[e] = rnd(16);
            /* sub-block e / 32: weight r = e % 32 is nibble r / 16 of qs[16 (e / 32) + r % 16] */
            put_bits(blk + 8, 8 * (16 * (e / 32) + e % 16) + 4 * ((e % 32) / 16), 4, (unsigned)q[e]);
            want[e] = (d * (float)(sc[e / 32] - 32)) * (float)st_kvalues_iq4nl[q[e]];
        }
        break;
    }
    case STRATA_TYPE_IQ3_XXS: { /* d | grid indices[64] | 8 x u32 (4 x 7 sign bits, scale) */
        memcpy(blk, &dh, 2);
        for (int g = 0; g < 64; g++) blk[2 + g] = (uint8_t)rnd(256);
        for (int ib = 0; ib < 8; ib++) {
            const int sc = rnd(16);
            uint32_t word = (uint32_t)sc << 28;
            int s7[4];
            for (int k = 0; k < 4; k++) { s7[k] = rnd(128); word |= (uint32_t)s7[k] << (7 * k); }
            memcpy(blk + 66 + 4 * ib, &word, 4);
            const float db = d * (0.5f + (float)sc) * 0.5f;
            for (int k = 0; k < 4; k++) {
                /* the 8th sign is the parity of the 7 stored ones */
                const int signs = s7[k] | ((__builtin_popcount((unsigned)s7[k]) & 1) << 7);
                for (int e = 0; e < 8; e++) {
                    const int idx = blk[2 + 8 * ib + 2 * k + e / 4];
                    const float mag = (float)((st_iq3xxs_grid[idx] >> (8 * (e % 4))) & 255);
                    want[32 * ib + 8 * k + e] = db * mag * (((signs >> e) & 1) ? -1.0f : 1.0f);
                }
            }
        }
        break;
    }
    case STRATA_TYPE_IQ3_S: { /* d | qs[64] | qh[8] | signs[32] | scales[4] */
        memcpy(blk, &dh, 2);
        int idx[64], sc[8];
        for (int g = 0; g < 64; g++) {
            idx[g] = rnd(512);
            blk[2 + g] = (uint8_t)(idx[g] & 255);
            put_bits(blk + 66, g, 1, (unsigned)idx[g] >> 8);
        }
        for (int j = 0; j < 8; j++) { sc[j] = rnd(16); put_bits(blk + 106, 4 * j, 4, (unsigned)sc[j]); }
        for (int e = 0; e < QK_K; e++) {
            const int neg = rnd(2);
            put_bits(blk + 74, e, 1, (unsigned)neg);
            const float mag = (float)((st_iq3s_grid[idx[e / 4]] >> (8 * (e % 4))) & 255);
            want[e] = (d * (float)(1 + 2 * sc[e / 32])) * mag * (neg ? -1.0f : 1.0f);
        }
        break;
    }
    default:
        break;
    }
}

static void test_packed_256(void) {
    static const strata_type types[] = {
        STRATA_TYPE_Q2_K, STRATA_TYPE_Q3_K, STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_K, STRATA_TYPE_Q6_K,
        STRATA_TYPE_Q8_K, STRATA_TYPE_IQ4_XS, STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ3_S,
    };
    for (size_t ti = 0; ti < ST_ARRAY_LEN(types); ti++) {
        const strata_type t = types[ti];
        const int bb = (int)strata_type_block_bytes(t);
        for (int iter = 0; iter < 20; iter++) {
            uint8_t tmp[292], blk[2 * 292];
            float want[2 * QK_K];
            for (int b = 0; b < 2; b++) {
                pack_superblock(t, tmp, want + b * QK_K);
                memcpy(blk + b * bb, tmp, (size_t)bb);
            }
            check_dequant(t, blk, want, 2 * QK_K);
        }
    }
}

/* Plain types: every fp16 code against an independent decoding (ldexp in double), bf16 codes,
 * f32 copy. */
static void test_plain_dequant(void) {
    static float out[65536];
    static uint16_t codes[65536];
    for (int i = 0; i < 65536; i++) codes[i] = (uint16_t)i;
    CHECK(strata_dequantize_row(STRATA_TYPE_F16, codes, out, 65536) == STRATA_OK, "f16");
    int bad = -1;
    for (int i = 0; i < 65536 && bad < 0; i++) {
        const int sign = i >> 15, e = (i >> 10) & 31, m = i & 1023;
        double v;
        if (e == 0) v = ldexp((double)m, -24);
        else if (e == 31) v = m ? NAN : INFINITY;
        else v = ldexp((double)(1024 + m), e - 25);
        if (sign) v = -v;
        if (isnan(v) ? !isnan(out[i]) : (double)out[i] != v || !signbit(out[i]) != !signbit(v)) bad = i;
    }
    CHECK(bad < 0, "f16 code 0x%04x decodes to %g", bad, bad >= 0 ? out[bad] : 0.0);
    CHECK(strata_dequantize_row(STRATA_TYPE_BF16, codes, out, 65536) == STRATA_OK, "bf16");
    bad = -1;
    for (int i = 0; i < 65536 && bad < 0; i++)
        if (f2u(out[i]) != (uint32_t)i << 16) bad = i;
    CHECK(bad < 0, "bf16 code 0x%04x", bad);
    const float f[3] = {1.5f, -0.0f, 3e38f};
    float g[3];
    CHECK(strata_dequantize_row(STRATA_TYPE_F32, f, g, 3) == STRATA_OK && memcmp(f, g, sizeof f) == 0, "f32");
}

/* ---------------------------------------------------------------------------------------------
 * (2) Quantize round trips
 * ------------------------------------------------------------------------------------------- */

/* quantize(dequantize(quantize(x))) reproduces quantize(x) byte for byte. */
static void test_idempotent(strata_type t) {
    enum { N = 32 * 64 };
    static float x[N], y[N];
    static uint8_t a[N * 2], b[N * 2];
    for (int i = 0; i < N; i++) x[i] = test_rng_float(&rng) * (i % 64 < 32 ? 1.0f : 37.0f);
    for (int i = 0; i < 32; i++) x[5 * 32 + i] = 0.0f; /* an all-zero block */
    const int64_t nb = strata_row_bytes(t, N);
    CHECK(strata_quantize_row(t, x, a, N) == STRATA_OK, "%s quantize", strata_type_name(t));
    CHECK(strata_dequantize_row(t, a, y, N) == STRATA_OK, "%s dequantize", strata_type_name(t));
    CHECK(strata_quantize_row(t, y, b, N) == STRATA_OK, "%s requantize", strata_type_name(t));
    CHECK(memcmp(a, b, (size_t)nb) == 0, "%s: requantizing the dequantized row changes bytes",
          strata_type_name(t));
}

/* llama.cpp's test-quantize-fns measure: x_i = 0.1 + 2 cos(i + offset), error =
 * sqrt(sum (dequant(quant(x)) - x)^2) / n. Measured here (n = 4096, offsets 0 and 0.5):
 *   q4_K 0.000982 / 0.000977, q6_K 0.000261 / 0.000260 (limit 0.002); for comparison
 *   q8_0 0.000074, q8_K 0.000075, q4_0 0.001121. */
static double roundtrip_error(strata_type t, float offset) {
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t q[N * 2];
    for (int i = 0; i < N; i++) x[i] = 0.1f + 2.0f * cosf((float)i + offset);
    if (strata_quantize_row(t, x, q, N) != STRATA_OK || strata_dequantize_row(t, q, y, N) != STRATA_OK)
        return 1e9;
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
    return sqrt(sum) / N;
}

static void test_roundtrip_error(void) {
    const struct { strata_type t; double limit; } cases[] = {
        {STRATA_TYPE_Q4_K, 0.002}, {STRATA_TYPE_Q6_K, 0.002},
        {STRATA_TYPE_Q8_0, 0.002}, {STRATA_TYPE_Q4_0, 0.002}, {STRATA_TYPE_Q8_K, 0.002},
    };
    for (size_t c = 0; c < ST_ARRAY_LEN(cases); c++)
        for (int o = 0; o < 2; o++) {
            const double err = roundtrip_error(cases[c].t, 0.5f * (float)o);
            CHECK(err < cases[c].limit, "%s round-trip error %.6f >= %.4f",
                  strata_type_name(cases[c].t), err, cases[c].limit);
            if (getenv("STRATA_TEST_VERBOSE"))
                printf("%s offset %d: error %.6f\n", strata_type_name(cases[c].t), o, err);
        }
    /* The search must do better than the plain grid: Q6_K error well under Q8_0's tolerance, and
     * random gaussian-ish data per weight error bounded by half a step. */
    enum { N = 512 };
    float x[N], y[N];
    uint8_t q[N];
    for (int i = 0; i < N; i++) x[i] = test_rng_float(&rng) + 0.3f * test_rng_float(&rng);
    CHECK(strata_quantize_row(STRATA_TYPE_Q6_K, x, q, N) == STRATA_OK, "q6_K");
    CHECK(strata_dequantize_row(STRATA_TYPE_Q6_K, q, y, N) == STRATA_OK, "q6_K");
    double worst = 0.0;
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs((double)y[i] - x[i]));
    CHECK(worst < 1.3 / 31.0 * 0.6, "q6_K worst error %.5f", worst);
    CHECK(strata_quantize_row(STRATA_TYPE_Q4_K, x, q, N) == STRATA_OK, "q4_K");
    CHECK(strata_dequantize_row(STRATA_TYPE_Q4_K, q, y, N) == STRATA_OK, "q4_K");
    worst = 0.0;
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs((double)y[i] - x[i]));
    CHECK(worst < 2.6 / 15.0 * 0.75, "q4_K worst error %.5f", worst);
    /* All-zero rows stay zero. */
    float z[QK_K] = {0};
    for (int k = 0; k < 2; k++) {
        const strata_type t = k ? STRATA_TYPE_Q6_K : STRATA_TYPE_Q4_K;
        CHECK(strata_quantize_row(t, z, q, QK_K) == STRATA_OK, "zeros");
        CHECK(strata_dequantize_row(t, q, y, QK_K) == STRATA_OK, "zeros");
        int nz = 0;
        for (int i = 0; i < QK_K; i++) nz += y[i] != 0.0f;
        CHECK(nz == 0, "%s: zero row dequantizes to %d non-zeros", strata_type_name(t), nz);
    }
}

static uint16_t to_f16(float f) {
    uint16_t h;
    CHECK(strata_quantize_row(STRATA_TYPE_F16, &f, &h, 1) == STRATA_OK, "f16 quantize");
    return h;
}
static uint16_t to_bf16(float f) {
    uint16_t h;
    CHECK(strata_quantize_row(STRATA_TYPE_BF16, &f, &h, 1) == STRATA_OK, "bf16 quantize");
    return h;
}

static void test_half_rounding(void) {
    const struct { float x; uint16_t h; } f16[] = {
        {1.0f, 0x3C00}, {-2.0f, 0xC000}, {0.0f, 0x0000}, {-0.0f, 0x8000},
        {1.0f + 0x1p-11f, 0x3C00},        /* tie -> even (down) */
        {1.0f + 3 * 0x1p-11f, 0x3C02},    /* tie -> even (up) */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3C01}, /* just above the tie */
        {65504.0f, 0x7BFF}, {65519.0f, 0x7BFF}, {65520.0f, 0x7C00}, {1e6f, 0x7C00},
        {0x1p-14f, 0x0400},               /* smallest normal */
        {0x1p-24f, 0x0001},               /* smallest subnormal */
        {0x1p-25f, 0x0000},               /* tie between 0 and 2^-24 -> 0 */
        {0x1.8p-24f, 0x0002},             /* tie between 1 and 2 ulps -> 2 */
        {0x1.000002p-25f, 0x0001},        /* just above half an ulp */
        {0x1p-26f, 0x0000}, {-0x1p-24f, 0x8001},
        {1023 * 0x1p-24f, 0x03FF},        /* largest subnormal */
        {INFINITY, 0x7C00}, {-INFINITY, 0xFC00},
    };
    for (size_t i = 0; i < ST_ARRAY_LEN(f16); i++) {
        const uint16_t h = to_f16(f16[i].x);
        CHECK(h == f16[i].h, "f16(%a) = 0x%04x, want 0x%04x", f16[i].x, h, f16[i].h);
    }
    const uint16_t hn = to_f16(NAN);
    CHECK((hn & 0x7C00) == 0x7C00 && (hn & 0x03FF) != 0, "f16(nan) = 0x%04x is not nan", hn);
    const struct { float x; uint16_t h; } bf[] = {
        {1.0f, 0x3F80}, {-1.0f, 0xBF80}, {-0.0f, 0x8000},
        {1.0f + 0x1p-8f, 0x3F80},         /* tie -> even (down) */
        {1.0f + 3 * 0x1p-8f, 0x3F82},     /* tie -> even (up) */
        {1.0f + 0x1p-8f + 0x1p-20f, 0x3F81},
        {0x1p-133f, 0x0001},              /* f32 subnormal keeps its top bits */
        {3.4028235e38f, 0x7F80},          /* FLT_MAX rounds up to inf */
        {INFINITY, 0x7F80}, {-INFINITY, 0xFF80},
    };
    for (size_t i = 0; i < ST_ARRAY_LEN(bf); i++) {
        const uint16_t h = to_bf16(bf[i].x);
        CHECK(h == bf[i].h, "bf16(%a) = 0x%04x, want 0x%04x", bf[i].x, h, bf[i].h);
    }
    /* A nan whose payload sits only in the low 16 bits must stay nan (quiet bit forced). */
    const uint32_t snan = 0x7F800001u;
    float fn;
    memcpy(&fn, &snan, 4);
    const uint16_t bn = to_bf16(fn);
    CHECK((bn & 0x7F80) == 0x7F80 && (bn & 0x7F) != 0, "bf16(snan) = 0x%04x is not nan", bn);
    /* Round trips are exact for every finite code. */
    static float fh[65536], fb[65536];
    static uint16_t h2[65536], b2[65536];
    for (int i = 0; i < 65536; i++) {
        fh[i] = st_fp16_to_f32((uint16_t)i);
        fb[i] = st_bf16_to_f32((uint16_t)i);
    }
    CHECK(strata_quantize_row(STRATA_TYPE_F16, fh, h2, 65536) == STRATA_OK, "f16 row");
    CHECK(strata_quantize_row(STRATA_TYPE_BF16, fb, b2, 65536) == STRATA_OK, "bf16 row");
    int bad = 0;
    for (int i = 0; i < 65536; i++) {
        if ((i & 0x7C00) != 0x7C00 && h2[i] != i) bad++;
        if ((i & 0x7F80) != 0x7F80 && b2[i] != i) bad++;
    }
    CHECK(bad == 0, "%d half/bfloat codes do not survive f32 and back", bad);
}

/* ---------------------------------------------------------------------------------------------
 * (3) Activation quantizers
 * ------------------------------------------------------------------------------------------- */

static void test_q8_0_act(void) {
    /* amax 127 -> d = 1, id = 1: roundf, halves away from zero. */
    float x[64] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.49f, -126.5f, 3.5f};
    const int8_t want[8] = {127, 3, -3, 1, -1, 1, -127, 4};
    /* second block: x = j - 16, amax 16, id = 127/16 */
    for (int j = 0; j < 32; j++) x[32 + j] = (float)(j - 16);
    block_q8_0 y[2];
    st_quantize_row_q8_0(x, y, 64);
    CHECK(y[0].d == 0x3C00, "q8_0 d = 0x%04x", y[0].d);
    for (int j = 0; j < 8; j++) CHECK(y[0].qs[j] == want[j], "q8_0 q[%d] = %d want %d", j, y[0].qs[j], want[j]);
    CHECK(y[0].qs[20] == 0, "q8_0 zero");
    CHECK(y[1].d == st_f32_to_fp16(16.0f / 127.0f), "q8_0 d");
    /* j - 16 = 1 -> 7.9375 -> 8; 2 -> 15.875 -> 16; -16 -> -127; 15 -> 119.0625 -> 119 */
    CHECK(y[1].qs[17] == 8 && y[1].qs[18] == 16 && y[1].qs[0] == -127 && y[1].qs[31] == 119,
          "q8_0 block 2: %d %d %d %d", y[1].qs[17], y[1].qs[18], y[1].qs[0], y[1].qs[31]);
    /* zero block -> d = 0, q = 0 */
    float zx[32] = {0};
    st_quantize_row_q8_0(zx, y, 32);
    int nz = y[0].d != 0;
    for (int j = 0; j < 32; j++) nz |= y[0].qs[j] != 0;
    CHECK(!nz, "q8_0 zero block");
    /* the public Q8_0 weight quantizer is the same function */
    uint8_t raw[68];
    CHECK(strata_quantize_row(STRATA_TYPE_Q8_0, x, raw, 64) == STRATA_OK, "q8_0 public");
    st_quantize_row_q8_0(x, y, 64);
    CHECK(memcmp(raw, y, 68) == 0, "q8_0 public == activation quantizer");
}

static void test_q8_K_act(void) {
    static float x[3 * QK_K];
    static block_q8_K y[3];
    /* block 0: signed max -127 -> iscale = 1, d = 1; nearest with ties to even */
    memset(x, 0, sizeof x);
    const float v0[] = {-127.0f, 2.5f, 3.5f, -0.5f, 126.6f, -2.5f, 0.49f, 127.0f};
    const int8_t q0[] = {-127, 2, 4, 0, 127, -2, 0, 127};
    memcpy(x, v0, sizeof v0);
    /* block 1: first of equal magnitudes wins: max = +4 -> iscale = -31.75, d = -1/31.75 */
    x[QK_K + 0] = 4.0f;
    x[QK_K + 1] = -4.0f;
    x[QK_K + 2] = 1.0f;
    /* block 2: all zero */
    st_quantize_row_q8_K(x, y, 3 * QK_K);
    CHECK(y[0].d == 1.0f, "q8_K d = %g", y[0].d);
    for (size_t j = 0; j < ST_ARRAY_LEN(q0); j++) CHECK(y[0].qs[j] == q0[j], "q8_K q[%zu] = %d want %d", j, y[0].qs[j], q0[j]);
    CHECK(y[0].bsums[0] == -127 + 2 + 4 + 0 + 127 - 2 + 0 + 127 && y[0].bsums[1] == 0, "q8_K bsums %d", y[0].bsums[0]);
    CHECK(y[1].d == 1.0f / (-127.0f / 4.0f), "q8_K d = %g", y[1].d);
    CHECK(y[1].qs[0] == -127 && y[1].qs[1] == 127 && y[1].qs[2] == -32, "q8_K tie: %d %d %d",
          y[1].qs[0], y[1].qs[1], y[1].qs[2]); /* 1 * -31.75 -> -32 */
    int nz = y[2].d != 0.0f;
    for (int j = 0; j < QK_K; j++) nz |= y[2].qs[j] != 0;
    for (int j = 0; j < 16; j++) nz |= y[2].bsums[j] != 0;
    CHECK(!nz, "q8_K zero block");
    /* random rows: bsums are the sums, |d q - x| <= |d| / 2, the max maps to -127 */
    for (int i = 0; i < 3 * QK_K; i++) x[i] = test_rng_float(&rng) * (float)(1 + i / QK_K * 50);
    st_quantize_row_q8_K(x, y, 3 * QK_K);
    int sums_ok = 1, err_ok = 1;
    for (int b = 0; b < 3; b++) {
        for (int k = 0; k < 16; k++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += y[b].qs[16 * k + j];
            sums_ok &= s == y[b].bsums[k];
        }
        for (int j = 0; j < QK_K; j++)
            err_ok &= fabsf(y[b].d * (float)y[b].qs[j] - x[b * QK_K + j]) <= fabsf(y[b].d) * 0.5001f;
    }
    CHECK(sums_ok, "q8_K bsums are the per-16 sums");
    CHECK(err_ok, "q8_K error within half a step");
}

/* ---------------------------------------------------------------------------------------------
 * (4) Argument checks
 * ------------------------------------------------------------------------------------------- */

static void test_args(void) {
    float f[64] = {0};
    uint8_t b[256];
    CHECK(strata_dequantize_row(STRATA_TYPE_Q8_0, NULL, f, 32) == STRATA_ERR_INVALID_ARG, "NULL src");
    CHECK(strstr(strata_last_error(), "src") != NULL, "message names src: %s", strata_last_error());
    CHECK(strata_dequantize_row(STRATA_TYPE_Q8_0, b, NULL, 32) == STRATA_ERR_INVALID_ARG, "NULL dst");
    CHECK(strata_quantize_row(STRATA_TYPE_Q8_0, NULL, b, 32) == STRATA_ERR_INVALID_ARG, "NULL src");
    CHECK(strata_quantize_row(STRATA_TYPE_Q8_0, f, NULL, 32) == STRATA_ERR_INVALID_ARG, "NULL dst");
    CHECK(strata_dequantize_row(STRATA_TYPE_Q8_0, b, f, -32) == STRATA_ERR_INVALID_ARG, "n < 0");
    CHECK(strstr(strata_last_error(), "negative") != NULL, "message: %s", strata_last_error());
    CHECK(strata_quantize_row(STRATA_TYPE_Q4_0, f, b, 33) == STRATA_ERR_INVALID_ARG, "n not a multiple of 32");
    CHECK(strstr(strata_last_error(), "q4_0") && strstr(strata_last_error(), "32"), "message: %s", strata_last_error());
    CHECK(strata_dequantize_row(STRATA_TYPE_Q4_K, b, f, 32) == STRATA_ERR_INVALID_ARG, "n not a multiple of 256");
    CHECK(strata_dequantize_row(STRATA_TYPE_TQ1_0, b, f, 256) == STRATA_ERR_UNSUPPORTED, "tq1_0");
    CHECK(strstr(strata_last_error(), "tq1_0") != NULL, "message names the type: %s", strata_last_error());
    CHECK(strata_quantize_row(STRATA_TYPE_Q4_1, f, b, 0) == STRATA_ERR_UNSUPPORTED, "q4_1 quantize");
    CHECK(strstr(strata_last_error(), "q4_1") != NULL, "message names the type: %s", strata_last_error());
    CHECK(strata_dequantize_row((strata_type)4, b, f, 32) == STRATA_ERR_UNSUPPORTED, "id 4");
    CHECK(strata_quantize_row((strata_type)-1, f, b, 32) == STRATA_ERR_UNSUPPORTED, "id -1");
    CHECK(strata_dequantize_row((strata_type)1000, b, f, 32) == STRATA_ERR_UNSUPPORTED, "id 1000");
    CHECK(strata_dequantize_row(STRATA_TYPE_Q4_K, b, f, 0) == STRATA_OK, "n = 0");

    static const strata_type deq[] = {
        STRATA_TYPE_F32, STRATA_TYPE_F16, STRATA_TYPE_BF16, STRATA_TYPE_Q4_0, STRATA_TYPE_Q4_1,
        STRATA_TYPE_Q5_0, STRATA_TYPE_Q5_1, STRATA_TYPE_Q8_0, STRATA_TYPE_Q8_1, STRATA_TYPE_Q2_K,
        STRATA_TYPE_Q3_K, STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_K, STRATA_TYPE_Q6_K, STRATA_TYPE_Q8_K,
        STRATA_TYPE_IQ4_NL, STRATA_TYPE_IQ4_XS, STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ3_S,
        STRATA_TYPE_IQ2_XXS, STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ2_S, STRATA_TYPE_IQ1_S,
        STRATA_TYPE_IQ1_M, STRATA_TYPE_MXFP4,
    };
    static const strata_type qnt[] = {
        STRATA_TYPE_F32, STRATA_TYPE_F16, STRATA_TYPE_BF16, STRATA_TYPE_Q8_0, STRATA_TYPE_Q4_0,
        STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, STRATA_TYPE_Q8_K, STRATA_TYPE_Q2_K, STRATA_TYPE_Q3_K,
        STRATA_TYPE_Q5_K, STRATA_TYPE_MXFP4, STRATA_TYPE_IQ4_NL, STRATA_TYPE_IQ4_XS,
        STRATA_TYPE_IQ2_XXS, STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ2_S, STRATA_TYPE_IQ3_XXS,
        STRATA_TYPE_IQ3_S, STRATA_TYPE_IQ1_S, STRATA_TYPE_IQ1_M,
    };
    int n_deq = 0, n_q = 0;
    for (int t = -2; t < STRATA_TYPE_COUNT + 2; t++) {
        n_deq += strata_type_can_dequantize((strata_type)t);
        n_q += strata_type_can_quantize((strata_type)t);
    }
    for (size_t i = 0; i < ST_ARRAY_LEN(deq); i++)
        CHECK(strata_type_can_dequantize(deq[i]), "can_dequantize(%s)", strata_type_name(deq[i]));
    for (size_t i = 0; i < ST_ARRAY_LEN(qnt); i++)
        CHECK(strata_type_can_quantize(qnt[i]), "can_quantize(%s)", strata_type_name(qnt[i]));
    CHECK(n_deq == (int)ST_ARRAY_LEN(deq), "%d types dequantize, want %zu", n_deq, ST_ARRAY_LEN(deq));
    CHECK(n_q == (int)ST_ARRAY_LEN(qnt), "%d types quantize, want %zu", n_q, ST_ARRAY_LEN(qnt));
}

int main(void) {
    test_known_blocks();
    test_packed_32();
    test_packed_256();
    test_plain_dequant();
    test_idempotent(STRATA_TYPE_Q8_0);
    test_idempotent(STRATA_TYPE_Q4_0);
    test_roundtrip_error();
    test_half_rounding();
    test_q8_0_act();
    test_q8_K_act();
    test_args();
    return test_report();
}
