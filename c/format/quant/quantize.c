/* quantize.c - f32 -> block formats on the CPU: the activation quantizers the dot products use
 * (Q8_0, Q8_K, bit-exact with llama.cpp's reference quantizers), the plain conversions
 * (F32, F16, BF16) and the weight quantizers (Q8_0, Q4_0 bit-exact with the gguf Python package;
 * Q4_K and Q6_K with a search for the best scales), and the table of every type's quantizer
 * (the others live in quantize_k.c, quantize_iq.c and quantize_iq1.c). */
#include "quant.h"

#include <math.h>
#include <string.h>

/* Q4_0's x * id + 8.5 must round twice to match the reference: no fused multiply-add (GCC does
 * not contract in -std=c11 mode; clang needs telling). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---------------------------------------------------------------------------------------------
 * Rounding helpers
 * ------------------------------------------------------------------------------------------- */

/* roundf (half away from zero) to int8, without the libm call: truncate, then step away from
 * zero when the (exact) remainder is at least one half. |x| <= 127 for every finite input; the
 * clamp first only keeps degenerate blocks (a subnormal amax makes 1/d overflow) defined. */
static inline int8_t st_round_i8(float x) {
    x = x > 127.0f ? 127.0f : x;
    x = x < -127.0f ? -127.0f : x;
    if (x != x) return 0;
    int i = (int)x;
    const float f = x - (float)i;
    i += (f >= 0.5f) - (f <= -0.5f);
    return (int8_t)i;
}

/* ---------------------------------------------------------------------------------------------
 * Activation quantizers
 * ------------------------------------------------------------------------------------------- */

/* x: n floats (n % 32 == 0) -> y: n/32 blocks. Per block: d = amax/127, q = roundf(x/d)
 * (half away from zero), d stored as fp16. */
void st_quantize_row_q8_0(const float *x, block_q8_0 *y, int64_t n) {
    const int64_t nb = n / QK8_0;
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + i * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) {
            const float ax = fabsf(xb[j]);
            amax = amax > ax ? amax : ax;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = st_f32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = st_round_i8(xb[j] * id);
    }
}

/* x: n floats (n % 256 == 0) -> y: n/256 blocks. Per block: max = the element of largest
 * magnitude (first one on ties), with its sign; iscale = -127/max; q = nearest(iscale*x) capped
 * at 127; bsums[k] = sum of q[16k..16k+15]; d = 1/iscale as f32. An all-zero block gives d = 0 and
 * zero quants and sums. */
void st_quantize_row_q8_K(const float *x, block_q8_K *y, int64_t n) {
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + i * QK_K;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(xb[j]);
            if (ax > amax) { amax = ax; max = xb[j]; }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = st_nearest_int(iscale * xb[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int k = 0; k < QK_K / 16; k++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += y[i].qs[16 * k + j];
            y[i].bsums[k] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Plain conversions
 * ------------------------------------------------------------------------------------------- */

static void q_f32(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

/* Round to nearest even; overflow gives inf, nan stays nan. */
static void q_f16(const float *src, void *dst, int64_t n) {
    uint16_t *h = (uint16_t *)dst;
    for (int64_t i = 0; i < n; i++) h[i] = st_f32_to_fp16(src[i]);
}

static void q_bf16(const float *src, void *dst, int64_t n) {
    uint16_t *h = (uint16_t *)dst;
    for (int64_t i = 0; i < n; i++) h[i] = st_f32_to_bf16(src[i]);
}

/* ---------------------------------------------------------------------------------------------
 * Q8_0, Q4_0, Q8_K weights
 * ------------------------------------------------------------------------------------------- */

static void q_q8_0(const float *src, void *dst, int64_t n) {
    st_quantize_row_q8_0(src, (block_q8_0 *)dst, n);
}

static void q_q8_K(const float *src, void *dst, int64_t n) {
    st_quantize_row_q8_K(src, (block_q8_K *)dst, n);
}

/* Per 32: max = the element of largest magnitude (first on ties) with its sign; d = max / -8;
 * q = trunc(x/d + 8.5) capped at 15, so the max maps to level 0 and the grid is one step wider on
 * the other side. Weight j in the low nibble of qs[j], weight j + 16 in the high nibble. */
static void q_q4_0(const float *src, void *dst, int64_t n) {
    block_q4_0 *y = (block_q4_0 *)dst;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float *xb = src + i * QK4_0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; j++) {
            const float ax = fabsf(xb[j]);
            if (ax > amax) { amax = ax; max = xb[j]; }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = st_f32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const float v0 = xb[j] * id + 8.5f, v1 = xb[j + QK4_0 / 2] * id + 8.5f;
            /* trunc, capped at 15 (written so inf/nan from degenerate scales stay defined) */
            const int q0 = v0 >= 15.0f ? 15 : v0 > 0.0f ? (int)v0 : 0;
            const int q1 = v1 >= 15.0f ? 15 : v1 > 0.0f ? (int)v1 : 0;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Scale searches (the methods of llama.cpp's make_qkx2_quants and make_qx_quants)
 * ------------------------------------------------------------------------------------------- */

static inline int st_clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Asymmetric fit x ~ scale * L - min_out with L in 0..nmax, minimizing sum w * (err)^2.
 * Starts from the min/max grid, then tries nstep + 1 rescalings iscale = (nmax + rmin +
 * rdelta * k) / (max - min), solving the weighted least-squares scale and offset for each
 * candidate level assignment, and keeps the best. x, w, L, laux: n (even). Returns
 * the scale;
 * *min_out >= 0 is the amount subtracted. */
static float st_fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                              float *min_out, uint8_t *laux, float rmin, float rdelta,
                              int nstep) {
    float lo = x[0], hi = x[0], sum_w = 0.0f, sum_x = 0.0f;
    for (int i = 0; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0.0f) lo = 0.0f;
    if (hi == lo) {
        memset(L, 0, (size_t)n);
        *min_out = -lo;
        return 0.0f;
    }
    float iscale = (float)nmax / (hi - lo);
    float scale = 1.0f / iscale;
    float best_err = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)st_clampi(st_nearest_int(iscale * (x[i] - lo)), 0, nmax);
        const float diff = scale * (float)L[i] + lo - x[i];
        best_err += w[i] * diff * diff;
    }
    /* The sums run in 2 interleaved partial sums (n even) to halve the add latency chain. */
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * (float)k + (float)nmax) / (hi - lo);
        float sl0 = 0, sl1 = 0, sl2_0 = 0, sl2_1 = 0, sxl0 = 0, sxl1 = 0;
        for (int i = 0; i < n; i += 2) {
            const int l0 = st_clampi(st_nearest_int(iscale * (x[i] - lo)), 0, nmax);
            const int l1 = st_clampi(st_nearest_int(iscale * (x[i + 1] - lo)), 0, nmax);
            laux[i] = (uint8_t)l0;
            laux[i + 1] = (uint8_t)l1;
            const float wl0 = w[i] * (float)l0, wl1 = w[i + 1] * (float)l1;
            sl0 += wl0;
            sl1 += wl1;
            sl2_0 += wl0 * (float)l0;
            sl2_1 += wl1 * (float)l1;
            sxl0 += wl0 * x[i];
            sxl1 += wl1 * x[i + 1];
        }
        const float sum_l = sl0 + sl1, sum_l2 = sl2_0 + sl2_1, sum_xl = sxl0 + sxl1;
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (det <= 0.0f) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0.0f) { /* the offset may only lower the grid */
            this_min = 0.0f;
            this_scale = sum_xl / sum_l2;
        }
        float e0 = 0.0f, e1 = 0.0f;
        for (int i = 0; i < n; i += 2) {
            const float d0 = this_scale * (float)laux[i] + this_min - x[i];
            const float d1 = this_scale * (float)laux[i + 1] + this_min - x[i + 1];
            e0 += w[i] * d0 * d0;
            e1 += w[i + 1] * d1 * d1;
        }
        const float err = e0 + e1;
        if (err < best_err) {
            memcpy(L, laux, (size_t)n);
            best_err = err;
            scale = this_scale;
            lo = this_min;
        }
    }
    *min_out = -lo;
    return scale;
}

/* Symmetric fit x ~ scale * (L - nmax) with L - nmax in -nmax..nmax-1, weights x^2 (llama.cpp's
 * rmse_type 1). The signed max maps to -nmax; 18 rescalings (nmax + 0.1k) around it are tried,
 * keeping the one with the largest (sum w x l)^2 / sum w l^2 (least weighted error). L: n levels
 * in 0..2*nmax-1. Returns the scale (may be negative). */
static float st_fit_scale_sym(int n, int nmax, const float *x, uint8_t *L) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -(float)nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = st_clampi(st_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (uint8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)(l * l);
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int k = -9; k <= 9; k++) {
        if (k == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)k) / max;
        sumlx = suml2 = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = st_clampi(st_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)(l * l);
        }
        if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (uint8_t)(nmax + st_clampi(st_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ---------------------------------------------------------------------------------------------
 * Q4_K
 * ------------------------------------------------------------------------------------------- */

/* Per 256: 8 sub-blocks of 32 fitted by st_fit_scale_min (weights rms + |x|); the 8 scales and
 * 8 mins are quantized to 6 bits against d = max_scale/63 and dmin = max_min/63; then every
 * weight is re-quantized against its final (d * sc, dmin * m). */
static void q_q4_K(const float *src, void *dst, int64_t n) {
    block_q4_K *y = (block_q4_K *)dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *xb = src + i * QK_K;
        uint8_t L[QK_K], laux[32];
        float w[32], scales[8], mins[8];
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 8; j++) {
            const float *xs = xb + 32 * j;
            float sum_x2 = 0.0f;
            for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
            const float av_x = sqrtf(sum_x2 / 32.0f);
            for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xs[l]);
            scales[j] = st_fit_scale_min(32, 15, xs, w, L + 32 * j, &mins[j], laux, -1.0f, 0.1f, 20);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
        const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
        memset(y[i].scales, 0, sizeof y[i].scales);
        for (int j = 0; j < 8; j++) {
            const int ls = st_clampi(st_nearest_int(inv_scale * scales[j]), 0, 63);
            const int lm = st_clampi(st_nearest_int(inv_min * mins[j]), 0, 63);
            if (j < 4) { /* 6-bit values in bytes 0..7; their top 2 bits spare */
                y[i].scales[j] = (uint8_t)ls;
                y[i].scales[j + 4] = (uint8_t)lm;
            } else {     /* low 4 bits in bytes 8..11, top 2 bits in the spare bits above */
                y[i].scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
                y[i].scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                y[i].scales[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        y[i].d = st_f32_to_fp16(max_scale / 63.0f);
        y[i].dmin = st_f32_to_fp16(max_min / 63.0f);
        const float d = st_fp16_to_f32(y[i].d), dmin = st_fp16_to_f32(y[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            st_get_scale_min_k4(j, y[i].scales, &sc, &m);
            const float ds = d * (float)sc;
            if (ds == 0.0f) continue;
            const float dm = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                L[32 * j + l] = (uint8_t)st_clampi(st_nearest_int((xb[32 * j + l] + dm) / ds), 0, 15);
        }
        /* weight 64c + l -> low nibble of qs[32c + l], 64c + 32 + l -> high nibble */
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

/* ---------------------------------------------------------------------------------------------
 * Q6_K
 * ------------------------------------------------------------------------------------------- */

/* Per 256: 16 sub-blocks of 16 fitted by st_fit_scale_sym (6-bit, levels -32..31); the scales
 * are quantized to int8 against d = max_scale / -128 (signed max), then every weight is
 * re-quantized against d * scale. */
static void q_q6_K(const float *src, void *dst, int64_t n) {
    block_q6_K *y = (block_q6_K *)dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *xb = src + i * QK_K;
        uint8_t L[QK_K];
        float scales[QK_K / 16];
        float max_scale = 0.0f, max_abs = 0.0f;
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = st_fit_scale_sym(16, 32, xb + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs) { max_abs = fabsf(scales[j]); max_scale = scales[j]; }
        }
        if (max_abs < 1e-15f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.0f / max_scale;
        y[i].d = st_f32_to_fp16(1.0f / iscale);
        for (int j = 0; j < QK_K / 16; j++) {
            const int s = st_nearest_int(iscale * scales[j]);
            y[i].scales[j] = (int8_t)(s < 127 ? s : 127);
        }
        const float d = st_fp16_to_f32(y[i].d);
        for (int j = 0; j < QK_K / 16; j++) {
            const float ds = d * (float)y[i].scales[j];
            if (ds == 0.0f) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)(st_clampi(st_nearest_int(xb[16 * j + l] / ds), -32, 31) + 32);
        }
        /* weight 128c + 32s + l: low nibble in ql[64c + 32(s%2) + l] (nibble s/2), high 2 bits
         * in qh[32c + l] bits 2s.. */
        for (int c = 0; c < 2; c++) {
            const uint8_t *Lc = L + 128 * c;
            for (int l = 0; l < 32; l++) {
                y[i].ql[64 * c + l] = (uint8_t)((Lc[l] & 0xF) | ((Lc[l + 64] & 0xF) << 4));
                y[i].ql[64 * c + 32 + l] = (uint8_t)((Lc[l + 32] & 0xF) | ((Lc[l + 96] & 0xF) << 4));
                y[i].qh[32 * c + l] = (uint8_t)((Lc[l] >> 4) | ((Lc[l + 32] >> 4) << 2) |
                                                ((Lc[l + 64] >> 4) << 4) | ((Lc[l + 96] >> 4) << 6));
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Table
 * ------------------------------------------------------------------------------------------- */

/* The importance-taking quantizers without an importance matrix. */
#define ST_NO_IMATRIX(t) \
    static void q_##t(const float *src, void *dst, int64_t n) { st_quant_##t(src, dst, n, NULL); }
ST_NO_IMATRIX(iq4_nl)
ST_NO_IMATRIX(iq4_xs)
ST_NO_IMATRIX(iq2_xxs)
ST_NO_IMATRIX(iq2_xs)
ST_NO_IMATRIX(iq2_s)
ST_NO_IMATRIX(iq3_xxs)
ST_NO_IMATRIX(iq3_s)
ST_NO_IMATRIX(iq1_s)
ST_NO_IMATRIX(iq1_m)
#undef ST_NO_IMATRIX

static const st_quant_fn st_quant_table[STRATA_TYPE_COUNT] = {
    [STRATA_TYPE_F32] = q_f32,
    [STRATA_TYPE_F16] = q_f16,
    [STRATA_TYPE_BF16] = q_bf16,
    [STRATA_TYPE_Q8_0] = q_q8_0,
    [STRATA_TYPE_Q4_0] = q_q4_0,
    [STRATA_TYPE_Q4_K] = q_q4_K,
    [STRATA_TYPE_Q6_K] = q_q6_K,
    [STRATA_TYPE_Q8_K] = q_q8_K,
    [STRATA_TYPE_Q2_K] = st_quant_q2_K,
    [STRATA_TYPE_Q3_K] = st_quant_q3_K,
    [STRATA_TYPE_Q5_K] = st_quant_q5_K,
    [STRATA_TYPE_MXFP4] = st_quant_mxfp4,
    [STRATA_TYPE_IQ4_NL] = q_iq4_nl,
    [STRATA_TYPE_IQ4_XS] = q_iq4_xs,
    [STRATA_TYPE_IQ2_XXS] = q_iq2_xxs,
    [STRATA_TYPE_IQ2_XS] = q_iq2_xs,
    [STRATA_TYPE_IQ2_S] = q_iq2_s,
    [STRATA_TYPE_IQ3_XXS] = q_iq3_xxs,
    [STRATA_TYPE_IQ3_S] = q_iq3_s,
    [STRATA_TYPE_IQ1_S] = q_iq1_s,
    [STRATA_TYPE_IQ1_M] = q_iq1_m,
};

st_quant_fn st_quant_get(strata_type type) {
    if ((int)type < 0 || (int)type >= STRATA_TYPE_COUNT) return NULL;
    return st_quant_table[type];
}

st_quant_w_fn st_quant_w_get(strata_type type) {
    switch (type) {
    case STRATA_TYPE_IQ4_NL: return st_quant_iq4_nl;
    case STRATA_TYPE_IQ4_XS: return st_quant_iq4_xs;
    case STRATA_TYPE_IQ2_XXS: return st_quant_iq2_xxs;
    case STRATA_TYPE_IQ2_XS: return st_quant_iq2_xs;
    case STRATA_TYPE_IQ2_S: return st_quant_iq2_s;
    case STRATA_TYPE_IQ3_XXS: return st_quant_iq3_xxs;
    case STRATA_TYPE_IQ3_S: return st_quant_iq3_s;
    case STRATA_TYPE_IQ1_S: return st_quant_iq1_s;
    case STRATA_TYPE_IQ1_M: return st_quant_iq1_m;
    default: return NULL;
    }
}

strata_status st_quant_prepare(strata_type type) {
    int grid;
    switch (type) {
    case STRATA_TYPE_IQ2_XXS: grid = ST_IQ_GRID_IQ2XXS; break;
    case STRATA_TYPE_IQ2_XS: grid = ST_IQ_GRID_IQ2XS; break;
    case STRATA_TYPE_IQ2_S: grid = ST_IQ_GRID_IQ2S; break;
    case STRATA_TYPE_IQ1_S: case STRATA_TYPE_IQ1_M: grid = ST_IQ_GRID_IQ1S; break;
    case STRATA_TYPE_IQ3_XXS: grid = ST_IQ_GRID_IQ3XXS; break;
    case STRATA_TYPE_IQ3_S: grid = ST_IQ_GRID_IQ3S; break;
    default: return STRATA_OK;
    }
    if (!st_iq_grid_get(grid))
        return st_error(STRATA_ERR_NOMEM, "quantize: out of memory building the %s grid search",
                        strata_type_name(type));
    return STRATA_OK;
}
