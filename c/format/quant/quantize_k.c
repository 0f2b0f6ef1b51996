/* quantize_k.c - f32 -> Q2_K, Q3_K, Q5_K, MXFP4, IQ4_NL and IQ4_XS: the weight formats without
 * a lattice grid. Ported from llama.cpp's ggml/src/ggml-quants.c (MIT) with the same
 * arithmetic: quantize_row_q2_K_ref, _q3_K_ref, _q5_K_ref and _mxfp4_ref (what ggml's
 * quantize_* run without an importance matrix), and quantize_iq4_nl / quantize_iq4_xs with no
 * importance matrix (weights x^2, 7 scale trials each side). */
#include "quant.h"

#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---------------------------------------------------------------------------------------------
 * Scale searches (ggml's make_qkx2_quants and make_q3_quants, unchanged)
 * ------------------------------------------------------------------------------------------- */

/* Asymmetric fit x ~ scale * L - *the_min, L in 0..nmax, minimizing the weighted squared (or,
 * with use_mad, absolute) error over nstep + 1 rescalings. Returns the scale. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                              int use_mad) {
    float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < n; ++i) {
        L[i] = (uint8_t)clampi(st_nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clampi(st_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += weights[i] * l;
            sum_l2 += weights[i] * l * l;
            sum_xl += weights[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D <= 0) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float cur_error = 0;
        for (int i = 0; i < n; ++i) {
            float diff = this_scale * Laux[i] + this_min - x[i];
            diff = use_mad ? fabsf(diff) : diff * diff;
            cur_error += weights[i] * diff;
        }
        if (cur_error < best_error) {
            memcpy(L, Laux, (size_t)n);
            best_error = cur_error;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

/* Symmetric fit x ~ scale * (L - nmax), L - nmax in -nmax..nmax-1, weights x^2, improved level by
 * level (up to 5 rounds). Returns the scale. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clampi(st_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx <= 0) continue;
            float sl2 = suml2 - w * L[i] * L[i];
            const int new_l = clampi(st_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (new_l == L[i]) continue;
            slx += w * x[i] * new_l;
            sl2 += w * new_l * new_l;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)new_l; sumlx = slx; suml2 = sl2;
                ++n_changed;
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ---------------------------------------------------------------------------------------------
 * Q2_K, Q3_K, Q5_K
 * ------------------------------------------------------------------------------------------- */

/* Per 256: 16 sub-blocks of 16 fitted by make_qkx2_quants (2 bits, weights |x|, absolute
 * error); 4-bit scales and mins against d = max_scale/15, dmin = max_min/15; then every weight
 * re-quantized. Weight 128c + 32s + l in bits 2s.. of qs[32c + l]. */
void st_quant_q2_K(const float *src, void *dst, int64_t n) {
    block_q2_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *x = src + QK_K * i;
        uint8_t L[QK_K], Laux[16];
        float weights[16], mins[QK_K / 16], scales[QK_K / 16], max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                         -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        y[i].d = y[i].dmin = st_f32_to_fp16(0.f);
        if (max_scale > 0) {
            const float iscale = 15.f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = (uint8_t)st_nearest_int(iscale * scales[j]);
            y[i].d = st_f32_to_fp16(max_scale / 15.f);
        }
        if (max_min > 0) {
            const float iscale = 15.f / max_min;
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] |= (uint8_t)(st_nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = st_f32_to_fp16(max_min / 15.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = st_fp16_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = st_fp16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (uint8_t)clampi(st_nearest_int((x[16 * j + ii] + dm) / d), 0, 3);
        }
        for (int j = 0; j < QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                               (L[j + l + 96] << 6));
    }
}

/* Per 256: 16 sub-blocks of 16 fitted by make_q3_quants (3 bits, signed); 6-bit signed scales
 * against d = max_scale / -32 (low nibbles in scales[0..7], top 2 bits in scales[8..11]); the
 * weights re-quantized, their high bits in hmask (bit j/32 of hmask[j % 32]). */
void st_quant_q3_K(const float *src, void *dst, int64_t n) {
    block_q3_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *x = src + QK_K * i;
        int8_t L[QK_K];
        float scales[QK_K / 16], max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) { amax = fabsf(scales[j]); max_scale = scales[j]; }
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        y[i].d = st_f32_to_fp16(0.f);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                int l = clampi((int8_t)st_nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
                else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                l >>= 4;
                y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            y[i].d = st_f32_to_fp16(1 / iscale);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            int sc = j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4;
            sc = (sc | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
            const float d = st_fp16_to_f32(y[i].d) * sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (int8_t)(clampi(st_nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
        }
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1 << (j / 32));
                L[j] -= 4;
            }
        }
        for (int j = 0; j < QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                               (L[j + l + 96] << 6));
    }
}

/* Per 256: as Q4_K (8 sub-blocks of 32, 6-bit scales and mins, weights rms + |x|) with 5-bit
 * levels: low nibbles as Q4_K's, the fifth bits of weight 64c + l and 64c + 32 + l in bits 2c
 * and 2c + 1 of qh[l]. */
void st_quant_q5_K(const float *src, void *dst, int64_t n) {
    block_q5_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *x = src + QK_K * i;
        uint8_t L[QK_K], Laux[32];
        float mins[QK_K / 32], scales[QK_K / 32], weights[32], max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 32; ++j) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
            const float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = make_qkx2_quants(32, 31, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                         -0.5f, 0.1f, 15, 0);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        memset(y[i].scales, 0, sizeof y[i].scales);
        for (int j = 0; j < QK_K / 32; ++j) {
            uint8_t ls = (uint8_t)st_nearest_int(inv_scale * scales[j]);
            uint8_t lm = (uint8_t)st_nearest_int(inv_min * mins[j]);
            ls = ls < 63 ? ls : 63;
            lm = lm < 63 ? lm : 63;
            if (j < 4) {
                y[i].scales[j] = ls;
                y[i].scales[j + 4] = lm;
            } else {
                y[i].scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
                y[i].scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                y[i].scales[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        y[i].d = st_f32_to_fp16(max_scale / 63.f);
        y[i].dmin = st_f32_to_fp16(max_min / 63.f);
        for (int j = 0; j < QK_K / 32; ++j) {
            uint8_t sc, m;
            st_get_scale_min_k4(j, y[i].scales, &sc, &m);
            const float d = st_fp16_to_f32(y[i].d) * sc;
            if (!d) continue;
            const float dm = st_fp16_to_f32(y[i].dmin) * m;
            for (int ii = 0; ii < 32; ++ii)
                L[32 * j + ii] = (uint8_t)clampi(st_nearest_int((x[32 * j + ii] + dm) / d), 0, 31);
        }
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < 4; ++c) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[64 * c + j], l2 = L[64 * c + j + 32];
                if (l1 > 15) { l1 -= 16; y[i].qh[j] |= (uint8_t)(1 << (2 * c)); }
                if (l2 > 15) { l2 -= 16; y[i].qh[j] |= (uint8_t)(2 << (2 * c)); }
                y[i].qs[32 * c + j] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * MXFP4
 * ------------------------------------------------------------------------------------------- */

/* Per 32: e = floor(log2(amax)) - 2 + 127 (0 for an all-zero block); every weight the E2M1 code
 * nearest x / 2^(e-127), the first on ties. Weight j low nibble of qs[j], j + 16 the high. */
void st_quant_mxfp4(const float *src, void *dst, int64_t n) {
    block_mxfp4 *y = dst;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        const float *x = src + QK_MXFP4 * i;
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        const uint8_t e = amax > 0.0f ? (uint8_t)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = st_e8m0_to_f32_half(e);
        y[i].e = e;
        for (int j = 0; j < QK_MXFP4; j++) {
            int best = 0;
            float best_err = fabsf(st_kvalues_mxfp4[0] * d - x[j]);
            for (int k = 1; k < 16; k++) {
                const float err = fabsf(st_kvalues_mxfp4[k] * d - x[j]);
                if (err < best_err) { best = k; best_err = err; }
            }
            if (j < QK_MXFP4 / 2) y[i].qs[j] = (uint8_t)best;
            else y[i].qs[j - QK_MXFP4 / 2] |= (uint8_t)(best << 4);
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * IQ4_NL, IQ4_XS (ggml's quantize_row_iq4_nl_impl, no importance matrix)
 * ------------------------------------------------------------------------------------------- */

/* Index of the table value nearest x (table ascending), the lower one on ties. */
static inline int best_index_int8(int n, const int8_t *val, float x) {
    if (x <= val[0]) return 0;
    if (x >= val[n - 1]) return n - 1;
    int ml = 0, mu = n - 1;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < val[mav]) mu = mav; else ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* Scale of one block of 32 against the non-linear values (weights x^2, or with an importance
 * matrix qw * sqrt(sigma2 + x^2)): from the signed max, then 15 trials (itry -7..7) keeping the
 * best weighted fit. Levels into L. */
static float iq4_block_scale(const float *xb, const float *qw, float sigma2, uint8_t *L) {
    const int8_t *values = st_kvalues_iq4nl;
    float weight[32], amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
        weight[j] = qw ? qw[j] * sqrtf(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
        if (fabsf(xb[j]) > amax) { amax = fabsf(xb[j]); max = xb[j]; }
    }
    if (amax < 1e-15f) return 0;
    float d = -max / values[0], id = 1 / d, sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
        const int l = best_index_int8(16, values, id * xb[j]);
        L[j] = (uint8_t)l;
        const float q = values[l];
        sumqx += weight[j] * q * xb[j];
        sumq2 += weight[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -7; itry <= 7; ++itry) {
        id = (itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            const float q = values[best_index_int8(16, values, id * xb[j])];
            sumqx += weight[j] * q * xb[j];
            sumq2 += weight[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) { d = sumqx / sumq2; best = d * sumqx; }
    }
    return d;
}

/* Levels j and j + 16 of each 32 into the low and high nibbles of q4[16i + j]. */
static void iq4_pack(const uint8_t *L, uint8_t *q4, int n) {
    for (int i = 0; i < n / 32; ++i)
        for (int j = 0; j < 16; ++j) q4[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

/* Per 32: the block scale as f16, then the levels re-picked against it. */
void st_quant_iq4_nl(const float *src, void *dst, int64_t n, const float *qw) {
    block_iq4_nl *y = dst;
    for (int64_t ib = 0; ib < n / QK4_NL; ++ib) {
        const float *xb = src + QK4_NL * ib;
        uint8_t L[QK4_NL] = {0};
        float sigma2 = 0; /* ggml's: 2 / 32 of the block's sum of squares */
        if (qw) {
            for (int j = 0; j < QK4_NL; ++j) sigma2 += xb[j] * xb[j];
            sigma2 *= 2.f / QK4_NL;
        }
        const float d = iq4_block_scale(xb, qw ? qw + QK4_NL * ib : NULL, sigma2, L);
        y[ib].d = st_f32_to_fp16(d);
        const float id = d ? 1 / d : 0;
        for (int j = 0; j < QK4_NL; ++j) L[j] = (uint8_t)best_index_int8(16, st_kvalues_iq4nl, id * xb[j]);
        iq4_pack(L, y[ib].qs, QK4_NL);
    }
}

/* Per 256: 8 block scales as 6-bit signed multiples of d = max_scale / -32 (low nibbles in
 * scales_l, top 2 bits in scales_h), the levels re-picked against each. */
void st_quant_iq4_xs(const float *src, void *dst, int64_t n, const float *qw) {
    block_iq4_xs *y = dst;
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const float *x = src + QK_K * ibl;
        uint8_t L[QK_K] = {0};
        float scales[QK_K / 32], max_scale = 0, amax_scale = 0, sigma2 = 0;
        if (qw) {
            for (int j = 0; j < QK_K; ++j) sigma2 += x[j] * x[j];
            sigma2 *= 2.f / QK_K;
        }
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float *q = qw ? qw + QK_K * ibl + 32 * ib : NULL;
            scales[ib] = iq4_block_scale(x + 32 * ib, q, sigma2, L + 32 * ib);
            if (fabsf(scales[ib]) > amax_scale) { amax_scale = fabsf(scales[ib]); max_scale = scales[ib]; }
        }
        memset(y[ibl].scales_l, 0, sizeof y[ibl].scales_l);
        y[ibl].scales_h = 0;
        const float d = -max_scale / 32, id = d ? 1 / d : 0.f;
        y[ibl].d = st_f32_to_fp16(d);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            int l = clampi(st_nearest_int(id * scales[ib]), -32, 31);
            const float dl = d * l, idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; ++j) L[32 * ib + j] = (uint8_t)best_index_int8(16, st_kvalues_iq4nl, idl * x[32 * ib + j]);
            l += 32;
            y[ibl].scales_l[ib / 2] |= (uint8_t)((l & 0xf) << (4 * (ib % 2)));
            y[ibl].scales_h |= (uint16_t)((l >> 4) << (2 * (ib % 8)));
        }
        iq4_pack(L, y[ibl].qs, QK_K);
    }
}
