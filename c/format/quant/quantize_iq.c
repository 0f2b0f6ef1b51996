/* quantize_iq.c - f32 -> the lattice formats IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S. Ported
 * from llama.cpp's ggml/src/ggml-quants.c (quantize_row_iq2_xxs_impl & co., MIT) with the same
 * arithmetic, so the bytes match ggml's quantizers. qw is the row's importance (n values, an
 * importance matrix's mean squared activations per column) or NULL: without one ggml takes
 * IQ2_S, IQ3_XXS and IQ3_S's NULL paths; IQ2_XXS and IQ2_XS have none in ggml (it refuses), so
 * here they run ggml's code with an importance matrix of ones. The grids' search structures
 * come from quantize_iq_grid.c. */
#include "quant.h"

#include <float.h>
#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---------------------------------------------------------------------------------------------
 * Shared search (one sub-block of n weights in groups of g = the grid's n_elem)
 * ------------------------------------------------------------------------------------------- */

/* After the scale trials, which groups are looked up again with the final scale. */
enum { REDO_ALL = 0, REDO_OFF_GRID = 1, REDO_ALL_IF_OFF_GRID = 2 };

typedef struct {
    int n;            /* sub-block size (16 or 32) */
    int kmaxq;        /* levels 0..kmaxq-1 */
    int nstep;        /* trials is = -nstep..nstep: id = (2 kmaxq - 1 + is * step) / max */
    float step;
    int use_qp;       /* IQ2_XXS: trials around make_qp_quants' scale instead of max */
    int redo;         /* REDO_* */
    int init_on_grid; /* what the groups count as before any trial succeeds (ggml's choice) */
    float eps;        /* a sub-block with max below (or 0) is zero */
    int parity;       /* 7 sign bits per 8 (even count of negatives forced) instead of 8 */
} iq_fit;

/* ggml's make_qp_quants: levels 0..nmax of x under weights w; returns the scale. L is uint8_t
 * as in ggml (a negative level, from IQ2_XXS's sign-parity flip, wraps the same way). */
static float make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *w) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
    if (max < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; ++i) L[i] = (uint8_t)st_nearest_int(iscale * x[i]);
    float scale = 1 / iscale, best_mse = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * L[i];
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / max, scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            int l = st_nearest_int(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            const float diff = x[i] - scale_is * l;
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) { best_mse = mse; iscale = iscale_is; }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = st_nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * l;
        suml2 += w[i] * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float slx = sumlx - w[i] * x[i] * L[i], sl2 = suml2 - w[i] * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = st_nearest_int(x[i] * sl2 / slx);
                new_l = new_l < nmax ? new_l : nmax;
                if (new_l != L[i]) {
                    slx += w[i] * x[i] * new_l;
                    sl2 += w[i] * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l; sumlx = slx; suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* The grid point nearest (weights w) to scale * point and x among u's neighbours; its levels
 * into L. ggml's iq2_find_best_neighbour / iq3_find_best_neighbour. */
static int best_neighbour(const st_iq_grid *g, int u, const float *x, const float *w, float scale,
                          int8_t *L) {
    const uint16_t *nb = g->neighbours - g->map[u] - 1;
    float best_d2 = FLT_MAX;
    int best = nb[1];
    for (int j = 1; j <= nb[0]; ++j) {
        const int8_t *pg = g->grid + nb[j] * g->n_elem;
        float d2 = 0;
        for (int i = 0; i < g->n_elem; ++i) {
            const float diff = scale * pg[i] - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) { best_d2 = d2; best = nb[j]; }
    }
    const int8_t *pg = g->grid + best * g->n_elem;
    for (int i = 0; i < g->n_elem; ++i) L[i] = (int8_t)((pg[i] - 1) / 2);
    return best;
}

/* Levels of group x (g values) at inverse scale id; off the grid, the best neighbour at
 * `scale` replaces them. Returns 1 if they were on the grid. */
static int group_levels(const iq_fit *f, const st_iq_grid *g, const float *x, const float *waux,
                        float id, float scale, int8_t *L) {
    int u = 0;
    for (int i = 0; i < g->n_elem; ++i) {
        L[i] = (int8_t)clampi(st_nearest_int(0.5f * (id * x[i] - 1)), 0, f->kmaxq - 1);
        u |= L[i] << (g->bits * i);
    }
    if (g->map[u] >= 0) return 1;
    best_neighbour(g, u, x, waux, scale, L);
    return 0;
}

/* Weighted least-squares scale of levels L (values 2l+1) against xval: sums into *sqx, *sq2. */
static void lsq_sums(int n, const float *xval, const float *w, const int8_t *L, float *sqx,
                     float *sq2) {
    float sumqx = 0, sumq2 = 0;
    for (int i = 0; i < n; ++i) {
        const float q = 2 * L[i] + 1;
        sumqx += w[i] * xval[i] * q;
        sumq2 += w[i] * q * q;
    }
    *sqx = sumqx;
    *sq2 = sumq2;
}

/* Signs of xb into signs[n/8] and |xb| into xval; with parity, the least important element of
 * an odd group keeps its sign flipped in xval so every group has an even count (7 bits kept). */
static void split_signs(const iq_fit *f, const float *xb, const float *w, float *xval,
                        uint8_t *signs) {
    for (int k = 0; k < f->n / 8; ++k) {
        int nflip = 0;
        uint8_t s = 0;
        for (int i = 0; i < 8; ++i) {
            if (xb[8 * k + i] >= 0) xval[8 * k + i] = xb[8 * k + i];
            else { xval[8 * k + i] = -xb[8 * k + i]; ++nflip; s |= (uint8_t)(1 << i); }
        }
        if (f->parity && nflip % 2) {
            int imin = 0;
            float min = w[8 * k] * xb[8 * k] * xb[8 * k];
            for (int i = 1; i < 8; ++i) {
                const float ax = w[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                if (ax < min) { min = ax; imin = i; }
            }
            xval[8 * k + imin] = -xval[8 * k + imin];
            s ^= (uint8_t)(1 << imin);
        }
        signs[k] = f->parity ? (uint8_t)(s & 127) : s;
    }
}

/* The scale trials; the best levels into L, which groups were on the grid into on_grid.
 * Returns the scale (ggml's loop over `is`). */
static float scale_trials(const iq_fit *f, const st_iq_grid *g, const float *xval,
                          const float *w, const float *waux, float max, float scale, int8_t *L,
                          uint8_t *on_grid) {
    const int ng = f->n / g->n_elem;
    int8_t Laux[32];
    uint8_t on_aux[8];
    float best = 0;
    for (int k = 0; k < ng; ++k) on_grid[k] = (uint8_t)f->init_on_grid;
    for (int is = -f->nstep; is <= f->nstep; ++is) {
        const float id = (2 * f->kmaxq - 1 + is * f->step) / max, this_scale = 1 / id;
        for (int k = 0; k < ng; ++k)
            on_aux[k] = (uint8_t)group_levels(f, g, xval + g->n_elem * k, waux + g->n_elem * k, id,
                                              this_scale, Laux + g->n_elem * k);
        float sumqx, sumq2;
        lsq_sums(f->n, xval, w, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, (size_t)f->n);
            memcpy(on_grid, on_aux, (size_t)ng);
        }
    }
    return scale;
}

/* One sub-block: levels L (grid points, groups of g) and signs of xb under weights w, returns
 * the scale (>= 0). A zero sub-block gives scale 0, levels 0 and signs 0. */
static float iq_fit_subblock(const iq_fit *f, const st_iq_grid *g, const float *xb,
                             const float *w, int8_t *L, uint8_t *signs) {
    const int ng = f->n / g->n_elem;
    float xval[32], waux[32];
    uint8_t on_grid[8];
    for (int i = 0; i < f->n; ++i) waux[i] = sqrtf(w[i]);
    split_signs(f, xb, w, xval, signs);
    memset(L, 0, (size_t)f->n);
    float max = xval[0];
    for (int i = 1; i < f->n; ++i) max = max > xval[i] ? max : xval[i];
    float scale = max / (2 * f->kmaxq - 1);
    int zero = max < f->eps || max == 0;
    if (!zero && f->use_qp) {
        uint8_t Lqp[32];
        scale = make_qp_quants(f->n, f->kmaxq + 1, xval, Lqp, w);
        max = scale * f->kmaxq; /* the trials run around this effective max */
        zero = max <= 0;
    }
    if (zero) {
        memset(L, 0, (size_t)f->n);
        memset(signs, 0, (size_t)f->n / 8);
        return 0;
    }
    scale = scale_trials(f, g, xval, w, waux, max, scale, L, on_grid);
    int n_off = 0;
    for (int k = 0; k < ng; ++k) n_off += !on_grid[k];
    if (scale > 0 && (f->redo == REDO_ALL || n_off > 0)) {
        const float id = 1 / scale;
        for (int k = 0; k < ng; ++k) {
            if (f->redo == REDO_OFF_GRID && on_grid[k]) continue;
            group_levels(f, g, xval + g->n_elem * k, waux + g->n_elem * k, id, scale,
                         L + g->n_elem * k);
        }
        float sumqx, sumq2;
        lsq_sums(f->n, xval, w, L, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    if (scale < 0) { /* not expected; the format stores unsigned scales, so flip the signs */
        scale = -scale;
        for (int k = 0; k < f->n / 8; ++k) signs[k] = (uint8_t)(f->parity ? ~signs[k] & 127 : ~signs[k]);
    }
    return scale;
}

/* Grid index of group k of L (on the grid by construction). */
static int grid_index(const st_iq_grid *g, const int8_t *L) {
    int u = 0;
    for (int i = 0; i < g->n_elem; ++i) u |= L[i] << (g->bits * i);
    const int32_t m = g->map[u];
    return m >= 0 ? m : 0;
}

/* 4-bit sub-block scale index: the scale s ~ d * (2l + 1). */
static inline int scale_nibble(float id, float s) {
    return clampi(st_nearest_int(0.5f * (id * s - 1)), 0, 15);
}

static float sum_squares(const float *x, int n) {
    float s = 0;
    for (int i = 0; i < n; ++i) s += x[i] * x[i];
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * IQ2_XXS, IQ2_XS, IQ2_S
 * ------------------------------------------------------------------------------------------- */

/* Per 256: 8 sub-blocks of 32, each 4 grid points of 8 + 4 x 7 sign bits + a 4-bit scale,
 * d = max_scale / 31. Weights qw * sqrt(sigma2 + x^2), qw ones without an importance matrix. */
void st_quant_iq2_xxs(const float *src, void *dst, int64_t n, const float *qw) {
    static const iq_fit f = {32, 3, 6, 0.1f, 1, REDO_ALL, 1, 1e-15f, 1};
    const st_iq_grid *g = st_iq_grid_get(ST_IQ_GRID_IQ2XXS);
    block_iq2_xxs *y = dst;
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const float *xbl = src + QK_K * ibl;
        const float sigma2 = sum_squares(xbl, QK_K) / QK_K;
        uint32_t q2[QK_K / 16] = {0};
        float scales[QK_K / 32], w[32], max_scale = 0;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float *xb = xbl + 32 * ib;
            int8_t L[32];
            uint8_t signs[4];
            const float *q = qw ? qw + QK_K * ibl + 32 * ib : NULL;
            for (int i = 0; i < 32; ++i) w[i] = (q ? q[i] : 1.0f) * sqrtf(sigma2 + xb[i] * xb[i]);
            scales[ib] = iq_fit_subblock(&f, g, xb, w, L, signs);
            for (int k = 0; k < 4; ++k) {
                q2[2 * ib] |= (uint32_t)grid_index(g, L + 8 * k) << (8 * k);
                q2[2 * ib + 1] |= (uint32_t)signs[k] << (7 * k);
            }
            max_scale = scales[ib] > max_scale ? scales[ib] : max_scale;
        }
        y[ibl].d = st_f32_to_fp16(0.f);
        if (!max_scale) {
            memset(y[ibl].qs, 0, sizeof y[ibl].qs);
            continue;
        }
        const float d = max_scale / 31;
        y[ibl].d = st_f32_to_fp16(d);
        for (int ib = 0; ib < QK_K / 32; ++ib)
            q2[2 * ib + 1] |= (uint32_t)scale_nibble(1 / d, scales[ib]) << 28;
        memcpy(y[ibl].qs, q2, sizeof y[ibl].qs);
    }
}

/* Per 256: 16 sub-blocks of 16, each 2 x (9-bit grid index | 7 sign bits << 9) + a 4-bit
 * scale. Weights qw * sqrt(sigma2 + x^2), qw ones without an importance matrix. */
void st_quant_iq2_xs(const float *src, void *dst, int64_t n, const float *qw) {
    static const iq_fit f = {16, 3, 9, 0.1f, 0, REDO_OFF_GRID, 1, 1e-15f, 1};
    const st_iq_grid *g = st_iq_grid_get(ST_IQ_GRID_IQ2XS);
    block_iq2_xs *y = dst;
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const float *xbl = src + QK_K * ibl;
        const float sigma2 = sum_squares(xbl, QK_K) / QK_K;
        float scales[QK_K / 16], w[16], max_scale = 0;
        memset(&y[ibl], 0, sizeof y[ibl]);
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float *xb = xbl + 16 * ib;
            int8_t L[16];
            uint8_t signs[2];
            const float *q = qw ? qw + QK_K * ibl + 16 * ib : NULL;
            for (int i = 0; i < 16; ++i) w[i] = (q ? q[i] : 1.0f) * sqrtf(sigma2 + xb[i] * xb[i]);
            scales[ib] = iq_fit_subblock(&f, g, xb, w, L, signs);
            for (int k = 0; k < 2; ++k)
                y[ibl].qs[2 * ib + k] = (uint16_t)(grid_index(g, L + 8 * k) | (signs[k] << 9));
            max_scale = scales[ib] > max_scale ? scales[ib] : max_scale;
        }
        if (!max_scale) {
            memset(y[ibl].qs, 0, sizeof y[ibl].qs);
            continue;
        }
        const float d = max_scale / 31;
        y[ibl].d = st_f32_to_fp16(d);
        for (int ib = 0; ib < QK_K / 16; ++ib)
            y[ibl].scales[ib / 2] |= (uint8_t)(scale_nibble(1 / d, scales[ib]) << (4 * (ib % 2)));
    }
}

/* Per 256: 16 sub-blocks of 16, each 2 x 10-bit grid indices (low bytes in qs, high bits in
 * qh) + 2 x 8 sign bits + a 4-bit scale; d = max_scale / 31 * 0.9875 (ggml's factor). Weights
 * qw * sqrt(sigma2 + x^2), without an importance matrix ggml's sigma2 / 4 + x^2. */
void st_quant_iq2_s(const float *src, void *dst, int64_t n, const float *qw) {
    static const iq_fit f = {16, 3, 9, 0.1f, 0, REDO_OFF_GRID, 1, 1e-8f, 0};
    const st_iq_grid *g = st_iq_grid_get(ST_IQ_GRID_IQ2S);
    block_iq2_s *y = dst;
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const float *xbl = src + QK_K * ibl;
        const float sigma2 = 2 * sum_squares(xbl, QK_K) / QK_K;
        float scales[QK_K / 16], w[16], max_scale = 0;
        memset(&y[ibl], 0, sizeof y[ibl]);
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float *xb = xbl + 16 * ib;
            int8_t L[16];
            uint8_t signs[2];
            if (qw)
                for (int i = 0; i < 16; ++i) w[i] = qw[QK_K * ibl + 16 * ib + i] * sqrtf(sigma2 + xb[i] * xb[i]);
            else
                for (int i = 0; i < 16; ++i) w[i] = 0.25f * sigma2 + xb[i] * xb[i];
            scales[ib] = iq_fit_subblock(&f, g, xb, w, L, signs); /* zero: writes zeros */
            for (int k = 0; k < 2; ++k) {
                const int i8 = 2 * ib + k, gi = grid_index(g, L + 8 * k);
                y[ibl].qs[i8] = (uint8_t)(gi & 255);
                y[ibl].qh[i8 / 4] |= (uint8_t)((gi >> 8) << (2 * (i8 % 4)));
                y[ibl].qs[QK_K / 8 + i8] = signs[k];
            }
            max_scale = scales[ib] > max_scale ? scales[ib] : max_scale;
        }
        if (!max_scale) continue;
        const float d = max_scale / 31;
        y[ibl].d = st_f32_to_fp16(d * 0.9875f);
        for (int ib = 0; ib < QK_K / 16; ++ib)
            y[ibl].scales[ib / 2] |= (uint8_t)(scale_nibble(1 / d, scales[ib]) << (4 * (ib % 2)));
    }
}

/* ---------------------------------------------------------------------------------------------
 * IQ3_XXS, IQ3_S
 * ------------------------------------------------------------------------------------------- */

/* Per 256: 64 grid indices (4 values each), then per 32 a word of 4 x 7 sign bits and a 4-bit
 * scale; d = max_scale / 31 * 1.0125 (ggml's factor). Weights qw * sqrt(sigma2 + x^2), without an
 * importance matrix x^2 (ggml's NULL path). */
void st_quant_iq3_xxs(const float *src, void *dst, int64_t n, const float *qw) {
    static const iq_fit f = {32, 8, 15, 0.2f, 0, REDO_OFF_GRID, 1, 1e-8f, 1};
    const st_iq_grid *g = st_iq_grid_get(ST_IQ_GRID_IQ3XXS);
    block_iq3_xxs *y = dst;
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const float *xbl = src + QK_K * ibl;
        const float sigma2 = qw ? 2 * sum_squares(xbl, QK_K) / QK_K : 0;
        float scales[QK_K / 32], w[32], max_scale = 0;
        uint32_t sas[QK_K / 32] = {0}; /* scales and signs */
        memset(&y[ibl], 0, sizeof y[ibl]);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float *xb = xbl + 32 * ib;
            int8_t L[32];
            uint8_t signs[4];
            if (qw)
                for (int i = 0; i < 32; ++i) w[i] = qw[QK_K * ibl + 32 * ib + i] * sqrtf(sigma2 + xb[i] * xb[i]);
            else
                for (int i = 0; i < 32; ++i) w[i] = xb[i] * xb[i];
            scales[ib] = iq_fit_subblock(&f, g, xb, w, L, signs); /* zero: writes zeros */
            for (int k = 0; k < 8; ++k) y[ibl].qs[8 * ib + k] = (uint8_t)grid_index(g, L + 4 * k);
            sas[ib] = signs[0] | ((uint32_t)signs[1] << 7) | ((uint32_t)signs[2] << 14) |
                      ((uint32_t)signs[3] << 21);
            max_scale = scales[ib] > max_scale ? scales[ib] : max_scale;
        }
        if (!max_scale) {
            memset(y[ibl].qs, 0, sizeof y[ibl].qs);
            continue;
        }
        const float d = max_scale / 31;
        y[ibl].d = st_f32_to_fp16(d * 1.0125f);
        for (int ib = 0; ib < QK_K / 32; ++ib) sas[ib] |= (uint32_t)scale_nibble(1 / d, scales[ib]) << 28;
        memcpy(y[ibl].qs + QK_K / 4, sas, sizeof sas);
    }
}

/* Per 256: 64 9-bit grid indices (low bytes in qs, 9th bits in qh), 256 sign bits, per 32 a
 * 4-bit scale; d = max_scale / 31 * 1.033 (ggml's factor). Weights qw * sqrt(sigma2 + x^2),
 * without an importance matrix x^2 (ggml's NULL path). */
void st_quant_iq3_s(const float *src, void *dst, int64_t n, const float *qw) {
    static const iq_fit f = {32, 8, 9, 0.2f, 0, REDO_ALL_IF_OFF_GRID, 0, 0.0f, 0};
    const st_iq_grid *g = st_iq_grid_get(ST_IQ_GRID_IQ3S);
    block_iq3_s *y = dst;
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const float *xbl = src + QK_K * ibl;
        const float sigma2 = qw ? 2 * sum_squares(xbl, QK_K) / QK_K : 0;
        float scales[QK_K / 32], w[32], max_scale = 0;
        memset(&y[ibl], 0, sizeof y[ibl]);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float *xb = xbl + 32 * ib;
            int8_t L[32];
            uint8_t signs[4];
            if (qw)
                for (int i = 0; i < 32; ++i) w[i] = qw[QK_K * ibl + 32 * ib + i] * sqrtf(sigma2 + xb[i] * xb[i]);
            else
                for (int i = 0; i < 32; ++i) w[i] = xb[i] * xb[i];
            scales[ib] = iq_fit_subblock(&f, g, xb, w, L, signs);
            for (int k = 0; k < 8; ++k) {
                const int gi = grid_index(g, L + 4 * k);
                y[ibl].qs[8 * ib + k] = (uint8_t)(gi & 255);
                y[ibl].qh[ib] |= (uint8_t)((gi >> 8) << k);
            }
            memcpy(y[ibl].signs + 4 * ib, signs, 4);
            max_scale = scales[ib] > max_scale ? scales[ib] : max_scale;
        }
        if (!max_scale) continue;
        const float d = max_scale / 31;
        y[ibl].d = st_f32_to_fp16(d * 1.033f);
        for (int ib = 0; ib < QK_K / 32; ib += 2)
            y[ibl].scales[ib / 2] = (uint8_t)(scale_nibble(1 / d, scales[ib]) |
                                              (scale_nibble(1 / d, scales[ib + 1]) << 4));
    }
}
