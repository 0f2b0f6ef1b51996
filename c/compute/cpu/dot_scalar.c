/* dot_scalar.c - the portable reference dot-product kernels, one per weight type. Each block is
 * unpacked to its integer quants, the block's integer sum of products is formed exactly, and only
 * then multiplied by the float scales; blocks accumulate in double. These are the kernels the
 * faster ISA levels are tested against, so they favour obviousness over speed.
 *
 * Activations: f32 for F32/F16/BF16; block_q8_0 (one per 32 weights) for Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0, IQ4_NL; block_q8_K (one per 256 weights) for the K and IQ 256-weight types.
 *
 * Q4_1 and Q5_1 carry a per-block minimum m: w_i = d*q_i + m. With q8_0 activations x_i = dx*y_i,
 *   sum w_i x_i = d*dx * sum(q_i*y_i) + m*dx * sum(y_i),
 * so the min term uses the activation block's own sum of quants (llama.cpp instead pairs these
 * types with q8_1 activations that store that sum; the result is the same).
 *
 * Q4_0, Q8_0, Q4_K, Q5_K and Q6_K instead follow the exact-block-sum arithmetic of every ISA
 * level (dot_avx512.c): the integer sums exactly, then float fma steps in a fixed order, so the
 * CPU gives the same bits for them at every level (and the GPU's CPU-exact kernels match). */
#include "dot.h"
#include "quant.h"

#include <math.h>
#include <string.h>

/* Q8_0 / Q4_0's float steps: block b's exact sum S_b with scale d_w * d_x into accumulator
 * b mod 16 (acc_k = fma(S_b, scale, acc_k), blocks in order), then st_dot_sum16_tree. */
static inline void st_sum16_add(float acc[16], int64_t b, int32_t S, float scale) {
    acc[b % 16] = fmaf((float)S, scale, acc[b % 16]);
}

/* ---------------------------------------------------------------------------------------------
 * Float weights (f32 activations)
 * ------------------------------------------------------------------------------------------- */

static void dot_f32(int64_t n, float *out, const void *w, const void *xq) {
    const float *a = w, *x = xq;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)a[i] * (double)x[i];
    *out = (float)sum;
}

static void dot_f16(int64_t n, float *out, const void *w, const void *xq) {
    const uint16_t *a = w;
    const float *x = xq;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)st_fp16_to_f32(a[i]) * (double)x[i];
    *out = (float)sum;
}

static void dot_bf16(int64_t n, float *out, const void *w, const void *xq) {
    const uint16_t *a = w;
    const float *x = xq;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)st_bf16_to_f32(a[i]) * (double)x[i];
    *out = (float)sum;
}

/* ---------------------------------------------------------------------------------------------
 * 32-weight blocks (q8_0 activations)
 * ------------------------------------------------------------------------------------------- */

/* Sum of q[i]*y[i] and of y[i] over one 32-weight block. */
static int32_t isum32(const int8_t *q, const int8_t *y) {
    int32_t s = 0;
    for (int i = 0; i < 32; i++) s += (int32_t)q[i] * (int32_t)y[i];
    return s;
}
static int32_t ysum32(const int8_t *y) {
    int32_t s = 0;
    for (int i = 0; i < 32; i++) s += y[i];
    return s;
}

/* Weight i of a 32-block packed as nibbles: i < 16 is the low nibble of byte i, else the high
 * nibble of byte i-16. */
static int nibble32(const uint8_t *qs, int i) {
    return i < 16 ? (qs[i] & 0xF) : (qs[i - 16] >> 4);
}

static void dot_q4_0(int64_t n, float *out, const void *w, const void *xq) {
    const block_q4_0 *b = w;
    const block_q8_0 *x = xq;
    float acc[16] = {0};
    for (int64_t ib = 0; ib < n / QK4_0; ib++) {
        int8_t q[32];
        for (int i = 0; i < 32; i++) q[i] = (int8_t)(nibble32(b[ib].qs, i) - 8);
        st_sum16_add(acc, ib, isum32(q, x[ib].qs), st_fp16_to_f32(b[ib].d) * st_fp16_to_f32(x[ib].d));
    }
    *out = st_dot_sum16_tree(acc);
}

static void dot_q4_1(int64_t n, float *out, const void *w, const void *xq) {
    const block_q4_1 *b = w;
    const block_q8_0 *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK4_1; ib++) {
        int8_t q[32];
        for (int i = 0; i < 32; i++) q[i] = (int8_t)nibble32(b[ib].qs, i);
        float dx = st_fp16_to_f32(x[ib].d);
        float d = st_fp16_to_f32(b[ib].d) * dx;
        float m = st_fp16_to_f32(b[ib].m) * dx;
        sum += (double)d * isum32(q, x[ib].qs) + (double)m * ysum32(x[ib].qs);
    }
    *out = (float)sum;
}

/* The 5th bit of weight i: bit i of the little-endian 32-bit qh. */
static int hbit32(const uint8_t *qh, int i) { return (qh[i / 8] >> (i % 8)) & 1; }

static void dot_q5_0(int64_t n, float *out, const void *w, const void *xq) {
    const block_q5_0 *b = w;
    const block_q8_0 *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK5_0; ib++) {
        int8_t q[32];
        for (int i = 0; i < 32; i++)
            q[i] = (int8_t)((nibble32(b[ib].qs, i) | (hbit32(b[ib].qh, i) << 4)) - 16);
        float d = st_fp16_to_f32(b[ib].d) * st_fp16_to_f32(x[ib].d);
        sum += (double)d * isum32(q, x[ib].qs);
    }
    *out = (float)sum;
}

static void dot_q5_1(int64_t n, float *out, const void *w, const void *xq) {
    const block_q5_1 *b = w;
    const block_q8_0 *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK5_1; ib++) {
        int8_t q[32];
        for (int i = 0; i < 32; i++)
            q[i] = (int8_t)(nibble32(b[ib].qs, i) | (hbit32(b[ib].qh, i) << 4));
        float dx = st_fp16_to_f32(x[ib].d);
        float d = st_fp16_to_f32(b[ib].d) * dx;
        float m = st_fp16_to_f32(b[ib].m) * dx;
        sum += (double)d * isum32(q, x[ib].qs) + (double)m * ysum32(x[ib].qs);
    }
    *out = (float)sum;
}

static void dot_q8_0(int64_t n, float *out, const void *w, const void *xq) {
    const block_q8_0 *b = w;
    const block_q8_0 *x = xq;
    float acc[16] = {0};
    for (int64_t ib = 0; ib < n / QK8_0; ib++)
        st_sum16_add(acc, ib, isum32(b[ib].qs, x[ib].qs), st_fp16_to_f32(b[ib].d) * st_fp16_to_f32(x[ib].d));
    *out = st_dot_sum16_tree(acc);
}

static void dot_iq4_nl(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq4_nl *b = w;
    const block_q8_0 *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK4_NL; ib++) {
        int8_t q[32];
        for (int i = 0; i < 32; i++) q[i] = st_kvalues_iq4nl[nibble32(b[ib].qs, i)];
        float d = st_fp16_to_f32(b[ib].d) * st_fp16_to_f32(x[ib].d);
        sum += (double)d * isum32(q, x[ib].qs);
    }
    *out = (float)sum;
}

/* MXFP4: doubled E2M1 kvalues, scale half of 2^(e - 127). */
static void dot_mxfp4(int64_t n, float *out, const void *w, const void *xq) {
    const block_mxfp4 *b = w;
    const block_q8_0 *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK_MXFP4; ib++) {
        int8_t q[32];
        for (int i = 0; i < 32; i++) q[i] = st_kvalues_mxfp4[nibble32(b[ib].qs, i)];
        float d = st_e8m0_to_f32_half(b[ib].e) * st_fp16_to_f32(x[ib].d);
        sum += (double)d * isum32(q, x[ib].qs);
    }
    *out = (float)sum;
}

/* ---------------------------------------------------------------------------------------------
 * 256-weight super-blocks (q8_K activations)
 *
 * Each kernel unpacks the super-block to q[256] (integer quants) and per-sub-block integer
 * scales, then sums exactly per sub-block.
 * ------------------------------------------------------------------------------------------- */

/* Sum of q[i]*y[i] over len weights. */
static int32_t isum(const int8_t *q, const int8_t *y, int len) {
    int32_t s = 0;
    for (int i = 0; i < len; i++) s += (int32_t)q[i] * (int32_t)y[i];
    return s;
}

static void dot_q2_K(int64_t n, float *out, const void *w, const void *xq) {
    const block_q2_K *b = w;
    const block_q8_K *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        /* weight h*128 + j*32 + l: bits 2j..2j+1 of qs[h*32 + l] */
        int8_t q[QK_K];
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++)
                    q[h * 128 + j * 32 + l] = (int8_t)((b[ib].qs[h * 32 + l] >> (2 * j)) & 3);
        int32_t sc_sum = 0, min_sum = 0;
        for (int g = 0; g < 16; g++) { /* 16 groups of 16: 4-bit scale (low), 4-bit min (high) */
            sc_sum += (b[ib].scales[g] & 0xF) * isum(q + 16 * g, x[ib].qs + 16 * g, 16);
            min_sum += (b[ib].scales[g] >> 4) * x[ib].bsums[g];
        }
        float d = st_fp16_to_f32(b[ib].d) * x[ib].d;
        float dmin = st_fp16_to_f32(b[ib].dmin) * x[ib].d;
        sum += (double)d * sc_sum - (double)dmin * min_sum;
    }
    *out = (float)sum;
}

/* The 16 6-bit scales of Q3_K (stored biased by 32). */
static void q3_K_scales(const uint8_t *s, int *sc) {
    for (int i = 0; i < 16; i++) {
        int lo = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
        int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        sc[i] = (lo | (hi << 4)) - 32;
    }
}

static void dot_q3_K(int64_t n, float *out, const void *w, const void *xq) {
    const block_q3_K *b = w;
    const block_q8_K *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        /* weight i = h*128 + j*32 + l: low 2 bits from qs[h*32+l] >> 2j; high bit is bit i/32 of
         * hmask[l]; a clear high bit subtracts 4. */
        int8_t q[QK_K];
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++) {
                    int i = h * 128 + j * 32 + l;
                    int lo = (b[ib].qs[h * 32 + l] >> (2 * j)) & 3;
                    int hi = (b[ib].hmask[l] >> (i / 32)) & 1;
                    q[i] = (int8_t)(lo - (hi ? 0 : 4));
                }
        int sc[16];
        q3_K_scales(b[ib].scales, sc);
        int32_t s = 0;
        for (int g = 0; g < 16; g++) s += sc[g] * isum(q + 16 * g, x[ib].qs + 16 * g, 16);
        float d = st_fp16_to_f32(b[ib].d) * x[ib].d;
        sum += (double)d * s;
    }
    *out = (float)sum;
}

/* Q4_K/Q5_K share a layout: weight c*64 + l (l < 32) is the low nibble of qs[c*32 + l], weight
 * c*64 + 32 + l its high nibble; 8 sub-blocks of 32 with 6-bit scales and mins. */
static void st_unpack_k4_nibbles(const uint8_t *qs, int8_t *q) {
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            q[c * 64 + l] = (int8_t)(qs[c * 32 + l] & 0xF);
            q[c * 64 + 32 + l] = (int8_t)(qs[c * 32 + l] >> 4);
        }
}

/* One super-block of unpacked quants q against activations x, in the exact-block-sum order:
 * S = sum_j sc_j (q_j . x_j) and M = sum_j m_j (bsums[2j] + bsums[2j+1]) exactly, then
 * acc = fma(S, d_x d, acc) and accm = fma(M, d_x dmin, accm); the row's result is acc - accm. */
static void st_k4_block(const int8_t *q, const uint8_t *scales, uint16_t d16, uint16_t dmin16,
                        const block_q8_K *x, float *acc, float *accm) {
    int32_t sc_sum = 0, min_sum = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        st_get_scale_min_k4(j, scales, &sc, &m);
        sc_sum += sc * isum(q + 32 * j, x->qs + 32 * j, 32);
        min_sum += m * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
    }
    *acc = fmaf((float)sc_sum, x->d * st_fp16_to_f32(d16), *acc);
    *accm = fmaf((float)min_sum, x->d * st_fp16_to_f32(dmin16), *accm);
}

static void dot_q4_K(int64_t n, float *out, const void *w, const void *xq) {
    const block_q4_K *b = w;
    const block_q8_K *x = xq;
    float acc = 0.0f, accm = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        int8_t q[QK_K];
        st_unpack_k4_nibbles(b[ib].qs, q);
        st_k4_block(q, b[ib].scales, b[ib].d, b[ib].dmin, &x[ib], &acc, &accm);
    }
    *out = acc - accm;
}

static void dot_q5_K(int64_t n, float *out, const void *w, const void *xq) {
    const block_q5_K *b = w;
    const block_q8_K *x = xq;
    float acc = 0.0f, accm = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        /* as Q4_K, plus a 5th bit: bit i/32 of qh[i % 32] */
        int8_t q[QK_K];
        st_unpack_k4_nibbles(b[ib].qs, q);
        for (int i = 0; i < QK_K; i++) q[i] = (int8_t)(q[i] | (((b[ib].qh[i % 32] >> (i / 32)) & 1) << 4));
        st_k4_block(q, b[ib].scales, b[ib].d, b[ib].dmin, &x[ib], &acc, &accm);
    }
    *out = acc - accm;
}

static void dot_q6_K(int64_t n, float *out, const void *w, const void *xq) {
    const block_q6_K *b = w;
    const block_q8_K *x = xq;
    float acc = 0.0f, accm = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        /* half h: weight h*128 + k*64 + l (l < 64) has low 4 bits (ql[h*64 + l] >> 4k); weight
         * h*128 + s*32 + l (l < 32) has high 2 bits (qh[h*32 + l] >> 2s). Biased by 32. */
        uint8_t lo[QK_K], hi[QK_K];
        for (int h = 0; h < 2; h++) {
            for (int k = 0; k < 2; k++)
                for (int l = 0; l < 64; l++)
                    lo[h * 128 + k * 64 + l] = (b[ib].ql[h * 64 + l] >> (4 * k)) & 0xF;
            for (int s = 0; s < 4; s++)
                for (int l = 0; l < 32; l++)
                    hi[h * 128 + s * 32 + l] = (b[ib].qh[h * 32 + l] >> (2 * s)) & 3;
        }
        /* the exact-block-sum order: unsigned u = q + 32, S = sum_g sc_g (u_g . x_g) and
         * O = sum_g sc_g bsum_g, acc = fma(S, d_x d, acc), accm = fma(O, 32 d_x d, accm) */
        int8_t u[QK_K];
        for (int i = 0; i < QK_K; i++) u[i] = (int8_t)(lo[i] | (hi[i] << 4));
        int32_t S = 0, O = 0;
        for (int g = 0; g < 16; g++) {
            S += b[ib].scales[g] * isum(u + 16 * g, x[ib].qs + 16 * g, 16);
            O += b[ib].scales[g] * x[ib].bsums[g];
        }
        const float dd = x[ib].d * st_fp16_to_f32(b[ib].d);
        acc = fmaf((float)S, dd, acc);
        accm = fmaf((float)O, 32.0f * dd, accm);
    }
    *out = acc - accm;
}

static void dot_iq4_xs(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq4_xs *b = w;
    const block_q8_K *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        int32_t s = 0;
        for (int j = 0; j < 8; j++) { /* 8 sub-blocks of 32, laid out as IQ4_NL blocks */
            int lo = (b[ib].scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
            int hi = (b[ib].scales_h >> (2 * j)) & 3;
            int ls = (lo | (hi << 4)) - 32;
            int8_t q[32];
            for (int i = 0; i < 32; i++) q[i] = st_kvalues_iq4nl[nibble32(b[ib].qs + 16 * j, i)];
            s += ls * isum(q, x[ib].qs + 32 * j, 32);
        }
        float d = st_fp16_to_f32(b[ib].d) * x[ib].d;
        sum += (double)d * s;
    }
    *out = (float)sum;
}

/* Grid entries hold 4 magnitudes, first weight in the low byte. */
static int grid_byte(uint32_t g, int k) { return (int)((g >> (8 * k)) & 0xFF); }

static void dot_iq3_xxs(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq3_xxs *b = w;
    const block_q8_K *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        const uint8_t *idx = b[ib].qs;            /* 64 grid indices, 8 per sub-block */
        const uint8_t *aux = b[ib].qs + QK_K / 4; /* 8 little-endian 32-bit words */
        int32_t s = 0;
        for (int j = 0; j < 8; j++) {
            uint32_t a = (uint32_t)aux[4 * j] | (uint32_t)aux[4 * j + 1] << 8 |
                         (uint32_t)aux[4 * j + 2] << 16 | (uint32_t)aux[4 * j + 3] << 24;
            int8_t q[32];
            for (int g = 0; g < 4; g++) { /* 4 groups of 8 weights, 7 sign bits each (+ parity) */
                uint8_t signs = st_ksigns_iq2xs[(a >> (7 * g)) & 127];
                for (int k = 0; k < 8; k++) {
                    int mag = grid_byte(st_iq3xxs_grid[idx[8 * j + 2 * g + k / 4]], k % 4);
                    q[8 * g + k] = (int8_t)((signs >> k) & 1 ? -mag : mag);
                }
            }
            int ls = 2 * (int)(a >> 28) + 1; /* scale = d * ls / 4 */
            s += ls * isum(q, x[ib].qs + 32 * j, 32);
        }
        float d = st_fp16_to_f32(b[ib].d) * x[ib].d;
        sum += (double)d * 0.25 * s;
    }
    *out = (float)sum;
}

static void dot_iq3_s(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq3_s *b = w;
    const block_q8_K *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        int32_t s = 0;
        for (int j = 0; j < 8; j++) {
            int8_t q[32];
            for (int t = 0; t < 8; t++) { /* 8 grid indices of 9 bits */
                int i = 8 * j + t;
                int gi = b[ib].qs[i] | (((b[ib].qh[i / 8] >> (i % 8)) & 1) << 8);
                for (int k = 0; k < 4; k++) {
                    int wi = 4 * t + k; /* weight within the sub-block; sign bit wi of signs */
                    int mag = grid_byte(st_iq3s_grid[gi], k);
                    int neg = (b[ib].signs[4 * j + wi / 8] >> (wi % 8)) & 1;
                    q[wi] = (int8_t)(neg ? -mag : mag);
                }
            }
            int ls = 1 + 2 * ((b[ib].scales[j / 2] >> (4 * (j % 2))) & 0xF);
            s += ls * isum(q, x[ib].qs + 32 * j, 32);
        }
        float d = st_fp16_to_f32(b[ib].d) * x[ib].d;
        sum += (double)d * s;
    }
    *out = (float)sum;
}

/* IQ2 / IQ1 grid entries hold 8 values, element k in byte k (IQ1's as int8 -1, 0, 1). */
static int grid8_byte(uint64_t g, int k) { return (int)(int8_t)(uint8_t)(g >> (8 * k)); }

/* 8 signed weights from a grid entry and a sign byte (bit k set: weight k negative). */
static void iq_signed8(uint64_t g, unsigned signs, int8_t *q) {
    for (int k = 0; k < 8; k++) {
        const int mag = grid8_byte(g, k);
        q[k] = (int8_t)((signs >> k) & 1 ? -mag : mag);
    }
}

/* IQ2_XXS: weight scale d * (2s + 1) / 8 per 32 weights (see dequant.c for the layout). */
static void dot_iq2_xxs(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq2_xxs *b = w;
    const block_q8_K *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        int32_t s = 0;
        for (int j = 0; j < 8; j++) {
            const uint32_t a0 = (uint32_t)b[ib].qs[4 * j] | (uint32_t)b[ib].qs[4 * j + 1] << 16;
            const uint32_t a1 = (uint32_t)b[ib].qs[4 * j + 2] | (uint32_t)b[ib].qs[4 * j + 3] << 16;
            int8_t q[32];
            for (int g = 0; g < 4; g++)
                iq_signed8(st_iq2xxs_grid[(a0 >> (8 * g)) & 0xFF], st_ksigns_iq2xs[(a1 >> (7 * g)) & 127], q + 8 * g);
            s += (int32_t)(2 * (a1 >> 28) + 1) * isum(q, x[ib].qs + 32 * j, 32);
        }
        sum += (double)(st_fp16_to_f32(b[ib].d) * x[ib].d) * 0.125 * s;
    }
    *out = (float)sum;
}

/* IQ2_XS / IQ2_S: 4-bit scale per 16 weights, weight scale d * (2s + 1) / 8. */
static void dot_iq2_xs(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq2_xs *b = w;
    const block_q8_K *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        int32_t s = 0;
        for (int h = 0; h < 16; h++) { /* 16 weights: grid entries 2h, 2h + 1 */
            int8_t q[16];
            for (int t = 0; t < 2; t++) {
                const uint16_t v = b[ib].qs[2 * h + t];
                iq_signed8(st_iq2xs_grid[v & 511], st_ksigns_iq2xs[v >> 9], q + 8 * t);
            }
            const int ls = 2 * ((b[ib].scales[h / 2] >> (4 * (h % 2))) & 0xF) + 1;
            s += ls * isum(q, x[ib].qs + 16 * h, 16);
        }
        sum += (double)(st_fp16_to_f32(b[ib].d) * x[ib].d) * 0.125 * s;
    }
    *out = (float)sum;
}

static void dot_iq2_s(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq2_s *b = w;
    const block_q8_K *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        int32_t s = 0;
        for (int h = 0; h < 16; h++) {
            int8_t q[16];
            for (int t = 0; t < 2; t++) {
                const int m = 2 * h + t; /* 10-bit index; signs in qs[32 + m] */
                const int gi = b[ib].qs[m] | (((b[ib].qh[m / 4] >> (2 * (m % 4))) & 3) << 8);
                iq_signed8(st_iq2s_grid[gi], b[ib].qs[QK_K / 8 + m], q + 8 * t);
            }
            const int ls = 2 * ((b[ib].scales[h / 2] >> (4 * (h % 2))) & 0xF) + 1;
            s += ls * isum(q, x[ib].qs + 16 * h, 16);
        }
        sum += (double)(st_fp16_to_f32(b[ib].d) * x[ib].d) * 0.125 * s;
    }
    *out = (float)sum;
}

/* IQ1_S: sum_ib ls (grid . x) + delta * sum_ib ls sign_ib sum(x of ib), delta = 1/8. */
static void dot_iq1_s(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq1_s *b = w;
    const block_q8_K *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        int32_t s = 0, sd = 0;
        for (int j = 0; j < 8; j++) {
            const unsigned qh = b[ib].qh[j];
            int8_t q[32];
            for (int g = 0; g < 4; g++)
                iq_signed8(st_iq1s_grid[b[ib].qs[4 * j + g] | (((qh >> (3 * g)) & 7) << 8)], 0, q + 8 * g);
            const int ls = 2 * (int)((qh >> 12) & 7) + 1;
            s += ls * isum(q, x[ib].qs + 32 * j, 32);
            sd += ls * ((qh & 0x8000) ? -1 : 1) * (x[ib].bsums[2 * j] + x[ib].bsums[2 * j + 1]);
        }
        sum += (double)(st_fp16_to_f32(b[ib].d) * x[ib].d) * ((double)s + (double)ST_IQ1S_DELTA * sd);
    }
    *out = (float)sum;
}

/* IQ1_M: 3-bit scale per 16 weights, delta sign per 8; the f16 scale in the scales' top nibbles. */
static void dot_iq1_m(int64_t n, float *out, const void *w, const void *xq) {
    const block_iq1_m *b = w;
    const block_q8_K *x = xq;
    double sum = 0.0;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        uint16_t sc[4];
        memcpy(sc, b[ib].scales, 8);
        const uint16_t d16 = st_iq1m_scale_bits(b[ib].scales);
        int32_t s = 0, sd = 0;
        for (int h = 0; h < 16; h++) {
            int8_t q[16];
            int32_t dsum = 0;
            for (int t = 0; t < 2; t++) {
                const int m = 2 * h + t;
                const int nib = (b[ib].qh[m / 2] >> (4 * (m % 2))) & 0xF;
                iq_signed8(st_iq1s_grid[b[ib].qs[m] | ((nib & 7) << 8)], 0, q + 8 * t);
                int32_t ys = 0;
                for (int k = 0; k < 8; k++) ys += x[ib].qs[8 * m + k];
                dsum += (nib & 8) ? -ys : ys;
            }
            const int ls = 2 * ((sc[h / 4] >> (3 * (h % 4))) & 7) + 1;
            s += ls * isum(q, x[ib].qs + 16 * h, 16);
            sd += ls * dsum;
        }
        sum += (double)(st_fp16_to_f32(d16) * x[ib].d) * ((double)s + (double)ST_IQ1M_DELTA * sd);
    }
    *out = (float)sum;
}

/* ---------------------------------------------------------------------------------------------
 * Registration
 * ------------------------------------------------------------------------------------------- */

void st_dot_register_scalar(st_vec_dot_fn *table) {
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
    table[STRATA_TYPE_IQ2_XXS] = dot_iq2_xxs;
    table[STRATA_TYPE_IQ2_XS] = dot_iq2_xs;
    table[STRATA_TYPE_IQ2_S] = dot_iq2_s;
    table[STRATA_TYPE_IQ1_S] = dot_iq1_s;
    table[STRATA_TYPE_IQ1_M] = dot_iq1_m;
    table[STRATA_TYPE_MXFP4] = dot_mxfp4;
}
