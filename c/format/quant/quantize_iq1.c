/* quantize_iq1.c - f32 -> IQ1_S and IQ1_M (ternary grid points plus a shift of +-1/8). Ported
 * from llama.cpp's ggml/src/ggml-quants.c (quantize_row_iq1_s_impl / quantize_row_iq1_m_impl,
 * MIT) with the same arithmetic. IQ1_M without an importance matrix takes ggml's NULL path
 * (weights x^2); IQ1_S has none in ggml (it refuses), so here it runs ggml's code with an
 * importance matrix of ones (weights sqrt(sigma2 + x^2)). With one (qw: the row's n importance
 * values) both weigh qw * sqrt(sigma2 + x^2), as ggml's. */
#include "quant.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* A weight and its position, sorted by value (ggml's float pairs with the index's bits in the
 * odd slots: same size, same order). */
typedef struct { float v; int i; } iq1_pair;

static int pair_cmp(const void *a, const void *b) {
    const float l = ((const iq1_pair *)a)->v, r = ((const iq1_pair *)b)->v;
    return l < r ? -1 : l > r ? 1 : 0;
}

/* The grid point among u's neighbours nearest (weights w) to x at scale, its values xg[level];
 * a full-grid scan if none is finite. Levels into L. ggml's iq1_find_best_neighbour2. */
static int best_neighbour2(const st_iq_grid *g, int u, const float *x, const float *w, float scale,
                           const float *xg, int8_t *L) {
    const uint16_t *nb = g->neighbours - g->map[u] - 1;
    float best = FLT_MAX;
    int gi = -1;
    for (int j = 1; j <= nb[0]; ++j) {
        const int8_t *pg = g->grid + 8 * nb[j];
        float d2 = 0;
        for (int i = 0; i < 8; ++i) {
            const float diff = scale * xg[(pg[i] - 1) / 2] - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best) { best = d2; gi = nb[j]; }
    }
    for (int k = 0; gi < 0 && k < g->n_grid; ++k) { /* ggml's fallback (it reads x[k] there) */
        const int8_t *pg = g->grid + 8 * k;
        float d2 = 0;
        for (int i = 0; i < 8; ++i) {
            const float diff = scale * xg[(pg[i] - 1) / 2] - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best) { best = d2; gi = k; }
    }
    if (gi < 0) gi = nb[1];
    const int8_t *pg = g->grid + 8 * gi;
    for (int i = 0; i < 8; ++i) L[i] = (int8_t)((pg[i] - 1) / 2);
    return gi;
}

/* Grid indices of the n/8 groups of L (levels 0..2) into index, off-grid groups replaced by
 * their best neighbour at scale with values xx[k] for group k. Returns 1 if all were on it. */
static int iq1_lookup(const st_iq_grid *g, int n, const float *xb, const float *w, float scale,
                      const float *const *xx, int8_t *L, uint16_t *index) {
    int all = 1;
    for (int k = 0; k < n / 8; ++k) {
        int u = 0;
        for (int j = 0; j < 8; ++j) u |= L[8 * k + j] << (2 * j);
        int gi = g->map[u];
        if (gi < 0) {
            all = 0;
            gi = best_neighbour2(g, u, xb + 8 * k, w + 8 * k, scale, xx[k], L + 8 * k);
        }
        index[k] = (uint16_t)gi;
    }
    return all;
}

/* Least-squares scale of the chosen grid points (values xx[k][level]) against xb; keeps
 * `scale` unless both sums are positive. */
static float iq1_refit(const st_iq_grid *g, int n, const float *xb, const float *w,
                       const float *const *xx, const uint16_t *index, float scale) {
    float sumqx = 0, sumq2 = 0;
    for (int k = 0; k < n / 8; ++k) {
        const int8_t *pg = g->grid + 8 * index[k];
        for (int j = 0; j < 8; ++j) {
            const float q = xx[k][(pg[j] - 1) / 2];
            sumqx += w[8 * k + j] * q * xb[8 * k + j];
            sumq2 += w[8 * k + j] * q * q;
        }
    }
    return sumqx > 0 && sumq2 > 0 ? sumqx / sumq2 : scale;
}

/* Sorts xb (n values) into p. */
static void sort_pairs(const float *xb, int n, iq1_pair *p) {
    for (int j = 0; j < n; ++j) p[j] = (iq1_pair){xb[j], j};
    qsort(p, (size_t)n, sizeof *p, pair_cmp);
}

/* ---------------------------------------------------------------------------------------------
 * IQ1_S
 * ------------------------------------------------------------------------------------------- */

static const float x_p[3] = {-1 + ST_IQ1S_DELTA, ST_IQ1S_DELTA, 1 + ST_IQ1S_DELTA};
static const float x_m[3] = {-1 - ST_IQ1S_DELTA, -ST_IQ1S_DELTA, 1 - ST_IQ1S_DELTA};

/* One sub-block of 32: the exhaustive split of the sorted values into levels -1, 0, 1 (with
 * shift +delta or -delta) of best weighted fit, then the grid. Returns the scale; *shift = +-1;
 * index[4] the grid indices. A zero sub-block: scale 0, shift 1, index untouched. */
static float iq1s_subblock(const st_iq_grid *g, const float *xb, const float *w, int *shift,
                           uint16_t *index) {
    enum { BS = 32 };
    float max = fabsf(xb[0]), sumx[BS + 1], sumw[BS + 1];
    for (int i = 1; i < BS; ++i) max = max > fabsf(xb[i]) ? max : fabsf(xb[i]);
    *shift = 1;
    if (max < 1e-12f) return 0;
    iq1_pair p[BS];
    sort_pairs(xb, BS, p);
    sumx[0] = sumw[0] = 0;
    for (int j = 0; j < BS; ++j) {
        sumx[j + 1] = sumx[j] + w[p[j].i] * xb[p[j].i];
        sumw[j + 1] = sumw[j] + w[p[j].i];
    }
    float best_score = -FLT_MAX, scale = max;
    int b1 = -1, b2 = -1, best_shift = 0;
    for (int i1 = 0; i1 <= BS; ++i1) {
        for (int i2 = i1; i2 <= BS; ++i2) {
            for (int s = 0; s < 2; ++s) {
                const float *xs = s == 0 ? x_p : x_m;
                const float sumqx = (sumx[i1] - sumx[0]) * xs[0] + (sumx[i2] - sumx[i1]) * xs[1] +
                                    (sumx[BS] - sumx[i2]) * xs[2];
                const float sumq2 = (sumw[i1] - sumw[0]) * xs[0] * xs[0] +
                                    (sumw[i2] - sumw[i1]) * xs[1] * xs[1] +
                                    (sumw[BS] - sumw[i2]) * xs[2] * xs[2];
                if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
                    scale = sumqx / sumq2; best_score = scale * sumqx;
                    b1 = i1; b2 = i2; best_shift = s == 0 ? 1 : -1;
                }
            }
        }
    }
    if (b1 < 0 || b2 < 0 || best_shift == 0) return 0;
    int8_t L[BS];
    for (int j = 0; j < BS; ++j) L[p[j].i] = (int8_t)(j < b1 ? 0 : j < b2 ? 1 : 2);
    if (scale < 0) {
        for (int j = 0; j < BS; ++j) L[j] = (int8_t)(2 - L[j]);
        scale = -scale; best_shift = -best_shift;
    }
    const float *xx = best_shift == 1 ? x_p : x_m;
    const float *const xs[4] = {xx, xx, xx, xx};
    if (!iq1_lookup(g, BS, xb, w, scale, xs, L, index)) scale = iq1_refit(g, BS, xb, w, xs, index, scale);
    *shift = best_shift;
    return scale;
}

/* Per 256: 8 sub-blocks of 32, each 4 x 11-bit grid indices, a 3-bit scale and the shift's
 * sign in qh; d = max_scale / 15 * 1.125 (ggml's factor). */
void st_quant_iq1_s(const float *src, void *dst, int64_t n, const float *qw) {
    const st_iq_grid *g = st_iq_grid_get(ST_IQ_GRID_IQ1S);
    block_iq1_s *y = dst;
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const float *xbl = src + QK_K * ibl;
        float sumx2 = 0;
        for (int i = 0; i < QK_K; ++i) sumx2 += xbl[i] * xbl[i];
        const float sigma2 = 2 * sumx2 / QK_K;
        float scales[QK_K / 32], w[32], max_scale = 0;
        int shifts[QK_K / 32];
        memset(&y[ibl], 0, sizeof y[ibl]);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float *xb = xbl + 32 * ib;
            const float *q = qw ? qw + QK_K * ibl + 32 * ib : NULL;
            for (int i = 0; i < 32; ++i) w[i] = (q ? q[i] : 1.0f) * sqrtf(sigma2 + xb[i] * xb[i]);
            uint16_t index[4] = {0, 0, 0, 0}; /* a zero sub-block writes zeros */
            scales[ib] = iq1s_subblock(g, xb, w, &shifts[ib], index);
            uint16_t h = 0;
            for (int k = 0; k < 4; ++k) {
                y[ibl].qs[4 * ib + k] = (uint8_t)(index[k] & 255);
                h |= (uint16_t)((index[k] >> 8) << (3 * k));
            }
            y[ibl].qh[ib] = h;
            max_scale = scales[ib] > max_scale ? scales[ib] : max_scale;
        }
        if (!max_scale) continue;
        const float d = max_scale / 15, id = 1 / d;
        y[ibl].d = st_f32_to_fp16(d * 1.125f);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            int l = clampi(st_nearest_int(0.5f * (id * scales[ib] - 1)), 0, 7);
            if (shifts[ib] == -1) l |= 8;
            y[ibl].qh[ib] |= (uint16_t)(l << 12);
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * IQ1_M
 * ------------------------------------------------------------------------------------------- */

/* Adds element i (value xv, weight wv, level values p = x_p[c], m = x_m[c]) to the four shift
 * combinations (first half, second half) = 0 (+,+), 1 (+,-), 2 (-,+), 3 (-,-). */
static inline void iq1m_add(float *sqx, float *sq2, float wv, float xv, float p, float m,
                            int first_half) {
    const int a = first_half ? 1 : 2, b = first_half ? 2 : 1;
    sqx[0] += wv * p * xv; sqx[a] += wv * p * xv; sqx[b] += wv * m * xv; sqx[3] += wv * m * xv;
    sq2[0] += wv * p * p;  sq2[a] += wv * p * p;  sq2[b] += wv * m * m;  sq2[3] += wv * m * m;
}

/* The shift combination k's values for group 0 or 1 of a sub-block. */
static const float *iq1m_values(int k, int group) {
    return group == 0 ? (k < 2 ? x_p : x_m) : (k % 2 == 0 ? x_p : x_m);
}

/* One sub-block of 16: as IQ1_S's, but each half of 8 has its own shift sign. Returns the
 * scale; *best_k the combination; index[2]. A zero sub-block: scale 0, *best_k 0. */
static float iq1m_subblock(const st_iq_grid *g, const float *xb, const float *w, int *best_k_out,
                           uint16_t *index) {
    enum { BS = 16 };
    float max = fabsf(xb[0]);
    for (int i = 1; i < BS; ++i) max = max > fabsf(xb[i]) ? max : fabsf(xb[i]);
    *best_k_out = 0;
    if (max < 1e-7f) return 0;
    iq1_pair p[BS];
    sort_pairs(xb, BS, p);
    float best_score = -FLT_MAX, scale = max;
    int b1 = -1, b2 = -1, best_k = -1;
    for (int i1 = 0; i1 <= BS; ++i1) {
        for (int i2 = i1; i2 <= BS; ++i2) {
            float sqx[4] = {0, 0, 0, 0}, sq2[4] = {0, 0, 0, 0};
            for (int j = 0; j < BS; ++j) {
                const int i = p[j].i, c = j < i1 ? 0 : j < i2 ? 1 : 2;
                iq1m_add(sqx, sq2, w[i], xb[i], x_p[c], x_m[c], i < BS / 2);
            }
            for (int k = 0; k < 4; ++k) {
                if (sq2[k] > 0 && sqx[k] * sqx[k] > best_score * sq2[k]) {
                    scale = sqx[k] / sq2[k]; best_score = scale * sqx[k];
                    b1 = i1; b2 = i2; best_k = k;
                }
            }
        }
    }
    if (b1 < 0 || b2 < 0 || best_k < 0) return 0;
    int8_t L[BS];
    for (int j = 0; j < BS; ++j) L[p[j].i] = (int8_t)(j < b1 ? 0 : j < b2 ? 1 : 2);
    if (scale < 0) {
        for (int j = 0; j < BS; ++j) L[j] = (int8_t)(2 - L[j]);
        scale = -scale;
        best_k = 3 - best_k;
    }
    const float *const xs[2] = {iq1m_values(best_k, 0), iq1m_values(best_k, 1)};
    if (!iq1_lookup(g, BS, xb, w, scale, xs, L, index)) scale = iq1_refit(g, BS, xb, w, xs, index, scale);
    *best_k_out = best_k;
    return scale;
}

/* Weights of one sub-block of 16: qw * sqrt(sigma2 + x^2), or x^2 without an importance matrix
 * (ggml's NULL path). */
static void iq1m_weights(const float *xb, const float *qw, float sigma2, float *w) {
    if (qw)
        for (int i = 0; i < 16; ++i) w[i] = qw[i] * sqrtf(sigma2 + xb[i] * xb[i]);
    else
        for (int i = 0; i < 16; ++i) w[i] = xb[i] * xb[i];
}

/* The super-block scale: the least-squares d of every weight against its quantized value at the
 * sub-block scales 2l + 1 (ggml's final pass), times 1.1125 (ggml's factor). */
static float iq1m_super_scale(const st_iq_grid *g, const float *xbl, const float *qw, float sigma2,
                              const block_iq1_m *y, const int *ls, const int *shifts, float d) {
    float sumqx = 0, sumq2 = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
        const float *xb = xbl + 16 * ib;
        float w[16];
        iq1m_weights(xb, qw ? qw + 16 * ib : NULL, sigma2, w);
        for (int k = 0; k < 2; ++k) {
            const float *xx = iq1m_values(shifts[ib], k);
            const int gi = y->qs[2 * ib + k] + ((y->qh[ib] << (8 - 4 * k)) & 0x700);
            const int8_t *pg = g->grid + 8 * gi;
            for (int j = 0; j < 8; ++j) {
                const float wv = w[8 * k + j];
                const float q = xx[(pg[j] - 1) / 2] * (2 * ls[ib] + 1);
                sumqx += wv * q * xb[8 * k + j];
                sumq2 += wv * q * q;
            }
        }
    }
    return sumq2 > 0 ? sumqx / sumq2 : d;
}

/* Per 256: 16 sub-blocks of 16, each 2 x 11-bit grid indices with a shift sign per 8, a 3-bit
 * scale; the f16 super-scale spread over the scales' top nibbles. Weights iq1m_weights'. */
void st_quant_iq1_m(const float *src, void *dst, int64_t n, const float *qw) {
    static const uint8_t masks[4] = {0x00, 0x80, 0x08, 0x88};
    const st_iq_grid *g = st_iq_grid_get(ST_IQ_GRID_IQ1S);
    block_iq1_m *y = dst;
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const float *xbl = src + QK_K * ibl;
        float scales[QK_K / 16], w[16], max_scale = 0, sumx2 = 0;
        int shifts[QK_K / 16], ls[QK_K / 16];
        memset(&y[ibl], 0, sizeof y[ibl]);
        if (qw)
            for (int i = 0; i < QK_K; ++i) sumx2 += xbl[i] * xbl[i];
        const float sigma2 = 2 * sumx2 / QK_K;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float *xb = xbl + 16 * ib;
            iq1m_weights(xb, qw ? qw + QK_K * ibl + 16 * ib : NULL, sigma2, w);
            uint16_t index[2] = {0, 0}; /* a zero sub-block writes zeros */
            scales[ib] = iq1m_subblock(g, xb, w, &shifts[ib], index);
            y[ibl].qs[2 * ib] = (uint8_t)(index[0] & 255);
            y[ibl].qs[2 * ib + 1] = (uint8_t)(index[1] & 255);
            y[ibl].qh[ib] = (uint8_t)((index[0] >> 8) | ((index[1] >> 8) << 4));
            max_scale = scales[ib] > max_scale ? scales[ib] : max_scale;
        }
        if (!max_scale) continue;
        uint16_t sc[4] = {0, 0, 0, 0};
        const float d = max_scale / 15, id = 1 / d;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            ls[ib] = clampi(st_nearest_int(0.5f * (id * scales[ib] - 1)), 0, 7);
            sc[ib / 4] |= (uint16_t)(ls[ib] << (3 * (ib % 4)));
            y[ibl].qh[ib] |= masks[shifts[ib]];
        }
        const uint16_t s = st_f32_to_fp16(iq1m_super_scale(g, xbl, qw ? qw + QK_K * ibl : NULL, sigma2, &y[ibl], ls, shifts, d) * 1.1125f);
        sc[0] |= (uint16_t)((s & 0x000f) << 12);
        sc[1] |= (uint16_t)((s & 0x00f0) << 8);
        sc[2] |= (uint16_t)((s & 0x0f00) << 4);
        sc[3] |= (uint16_t)(s & 0xf000);
        memcpy(y[ibl].scales, sc, sizeof sc);
    }
}
