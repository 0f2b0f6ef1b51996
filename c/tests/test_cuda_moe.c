/* test_cuda_moe.c - the GPU MoE step (c/cuda/moe.cu, moe_router.cu, cuda_moe.h) against the CPU:
 *   router: st_cuda_moe_route vs st_route_topk on random logits (and logits with many ties):
 *           ids identical, weights within 1e-6, doorbell (host-mapped) equal to the device copy,
 *           guard words after the outputs untouched; st_cuda_moe_route_cfg vs st_route_scored
 *           (sigmoid, selection bias, groups, scale: DeepSeek-V2/V3 and Kimi-K2 shapes) likewise,
 *           and the one-token router with a scored rule equal to the GEMV + route;
 *   experts: st_cuda_moe_ffn vs st_moe_ffn on random well-formed weights through a per-expert
 *           pointer table (entries alias a few materialized experts): NMSE <= 5e-4 (quantized;
 *           <= 1e-7 for F32/F16/BF16), no NaN, guard words untouched, every output written, two
 *           runs bit-identical; every supported type on small odd shapes, T = 1..8 columns (and
 *           groups of more than 8 pairs), the shapes of Qwen3-30B-A3B, OLMoE-1B-7B and Mixtral,
 *           out-of-range ids, and the shared expert (one-expert table, sigmoid gate, accumulate);
 *   CPU-exact rows: st_cuda_moe_exact_rows bit-identical to st_moe_ffn_end_rows and
 *           st_cuda_moe_combine_rows of a split bit-identical to st_moe_ffn (AVX-512 hosts);
 *   gpt-oss (test_oai): softmax over the k chosen logits against st_route_scored, the one-token
 *           router with the router's bias, experts with biases and the clamped SwiGLU (on the
 *           tiles too for prompt batches in builds with -DSTRATA_MMQ_OAI=1: st_cuda_moe_tiles_oai).
 * One line per case: name, shape, types, T, NMSE, max error, pass/FAIL. TEST_CUDA_MOE_OAI_ONLY set
 * in the environment: the argument checks and test_oai alone; TEST_CUDA_MOE_TYPES=q3_K,q5_0,...: the
 * argument checks and those types' small-shape and tile cases alone.
 * Skips, saying why, in builds without CUDA or where no GPU is usable. */
#include <ctype.h>

#include "strata.h"
#include "strata_quant.h"
#include "test.h"

#ifdef STRATA_HAVE_CUDA
#include "cuda_backend.h"
#include "cuda_mmq.h"
#include "cuda_moe.h"
#include "cuda_mmv.h"
#include "cuda_ops.h"
#include "dot.h"
#include "ops.h"
#include "quant.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GUARD 64
#define SENTINEL 0xA5A5A5A5u

static st_threadpool *g_tp;

/* ---- random data ----------------------------------------------------------------------------- */

static void fill_bytes(uint8_t *p, size_t n, test_rng *r) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const unsigned long long v = test_rng_next(r);
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++) p[i] = (uint8_t)test_rng_next(r);
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

/* Byte offsets of the fp16 scale fields of one block (-1 ends). */
static const int *fp16_fields(strata_type type) {
    static const int d0[] = {0, -1}, dm[] = {0, 2, -1}, q2k[] = {80, 82, -1}, q3k[] = {108, -1},
                     q6k[] = {208, -1}, none[] = {-1};
    switch (type) {
    case STRATA_TYPE_Q4_0: case STRATA_TYPE_Q5_0: case STRATA_TYPE_Q8_0: case STRATA_TYPE_IQ4_NL:
    case STRATA_TYPE_IQ4_XS: case STRATA_TYPE_IQ3_XXS: case STRATA_TYPE_IQ3_S: case STRATA_TYPE_IQ2_XXS:
    case STRATA_TYPE_IQ2_XS: case STRATA_TYPE_IQ2_S: case STRATA_TYPE_IQ1_S:
        return d0;
    case STRATA_TYPE_Q4_1: case STRATA_TYPE_Q5_1: case STRATA_TYPE_Q4_K: case STRATA_TYPE_Q5_K:
        return dm;
    case STRATA_TYPE_Q2_K: return q2k;
    case STRATA_TYPE_Q3_K: return q3k;
    case STRATA_TYPE_Q6_K: return q6k;
    default: return none;
    }
}

/* n_blocks random blocks: random quants, every scale mag * (0.5 .. 1) (plain types: elements
 * mag * [-1, 1)). Weights are linear in mag. */
static void fill_blocks(strata_type type, uint8_t *buf, int64_t n_blocks, float mag, test_rng *r) {
    const int64_t bb = strata_type_block_bytes(type);
    if (type == STRATA_TYPE_F32 || type == STRATA_TYPE_F16 || type == STRATA_TYPE_BF16) {
        for (int64_t i = 0; i < n_blocks; i++) {
            const float f = mag * test_rng_float(r);
            if (type == STRATA_TYPE_F32) memcpy(buf + 4 * i, &f, 4);
            else if (type == STRATA_TYPE_F16) put16(buf + 2 * i, st_f32_to_fp16(f));
            else { uint32_t u; memcpy(&u, &f, 4); put16(buf + 2 * i, (uint16_t)(u >> 16)); }
        }
        return;
    }
    fill_bytes(buf, (size_t)(n_blocks * bb), r);
    const int *f = fp16_fields(type);
    for (int64_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = buf + b * bb;
        for (int i = 0; f[i] >= 0; i++) {
            const float v = mag * (0.75f + 0.25f * test_rng_float(r));
            put16(blk + f[i], st_f32_to_fp16(v));
        }
        if (type == STRATA_TYPE_IQ1_M) { /* d: the top nibbles of the scale words at 48 */
            const uint16_t h = st_f32_to_fp16(mag * (0.75f + 0.25f * test_rng_float(r)));
            for (int k = 0; k < 4; k++) blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
        }
        if (type == STRATA_TYPE_MXFP4) { /* E8M0: 2^(e - 128) near mag, one step either way */
            const int e = 128 + (int)floorf(log2f(mag)) + (int)(test_rng_next(r) % 3) - 1;
            blk[0] = (uint8_t)(e < 2 ? 2 : e > 250 ? 250 : e);
        }
    }
}

/* Scale for type so that a row of n weights dotted with uniform [-1, 1) inputs is O(1): measures
 * the rms weight of a sample filled with mag 1. */
static float type_mag(strata_type type, int64_t n, test_rng *r) {
    const int64_t qk = strata_type_block_size(type), nb = 4096 / qk;
    uint8_t *buf = malloc((size_t)(nb * strata_type_block_bytes(type)));
    float *v = malloc(sizeof(float) * (size_t)(nb * qk));
    fill_blocks(type, buf, nb, 1.0f, r); /* plain types: nb elements (qk 1) */
    double ss = 0.0;
    if (strata_dequantize_row(type, buf, v, nb * qk) == STRATA_OK)
        for (int64_t i = 0; i < nb * qk; i++) ss += (double)v[i] * v[i];
    free(buf);
    free(v);
    const double rms = sqrt(ss / (double)(nb * qk));
    return rms > 0 ? (float)(1.0 / (rms * sqrt((double)n / 3.0))) : 1.0f;
}

/* ---- comparisons ----------------------------------------------------------------------------- */

typedef struct { double nmse, max_err, ref_rms; int64_t nans, unwritten, guard_bad; } cmp_result;

/* got: n + GUARD words read back; ref: n floats. */
static cmp_result compare(const float *got, const float *ref, int64_t n) {
    cmp_result c = {0, 0, 0, 0, 0, 0};
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &got[i], 4);
        if (u == SENTINEL) c.unwritten++;
        if (isnan(got[i])) { c.nans++; continue; }
        const double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (fabs(d) > c.max_err) c.max_err = fabs(d);
    }
    for (int64_t i = n; i < n + GUARD; i++) {
        uint32_t u;
        memcpy(&u, &got[i], 4);
        c.guard_bad += u != SENTINEL;
    }
    c.nmse = den > 0 ? num / den : (num > 0 ? INFINITY : 0.0);
    c.ref_rms = sqrt(den / (double)(n > 0 ? n : 1));
    return c;
}

/* NMSE of a against ref (n floats, no guard words); NaN counts as infinite error. */
static double compare_plain(const float *a, const float *ref, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = isnan(a[i]) ? INFINITY : (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? num / den : (num > 0 ? INFINITY : 0.0);
}

/* ---- router ---------------------------------------------------------------------------------- */

static void check_route(int64_t T, int32_t n_expert, int32_t k, int norm, int ties, test_rng *r) {
    const int64_t nl = T * n_expert, no = T * k;
    float *logits = malloc(sizeof(float) * (size_t)nl);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)no), *gids = malloc(sizeof(int32_t) * (size_t)(no + GUARD));
    float *wts = malloc(sizeof(float) * (size_t)no), *gwts = malloc(sizeof(float) * (size_t)(no + GUARD));
    void *d_l = NULL, *d_ids = NULL, *d_wts = NULL;
    st_cuda_doorbell db;
    memset(&db, 0, sizeof db);
    for (int64_t i = 0; i < nl; i++)
        logits[i] = ties ? (float)(int)(test_rng_next(r) % 5) - 2.0f : 4.0f * test_rng_float(r);
    for (int64_t t = 0; t < T; t++)
        st_route_topk(logits + t * n_expert, n_expert, k, norm, ids + t * k, wts + t * k);

    strata_status st = st_cuda_malloc(&d_l, sizeof(float) * (size_t)nl);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_ids, sizeof(int32_t) * (size_t)(no + GUARD));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_wts, sizeof(float) * (size_t)(no + GUARD));
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_l, logits, sizeof(float) * (size_t)nl);
    if (st == STRATA_OK) st = st_cuda_memset(d_ids, 0xA5, sizeof(int32_t) * (size_t)(no + GUARD));
    if (st == STRATA_OK) st = st_cuda_memset(d_wts, 0xA5, sizeof(float) * (size_t)(no + GUARD));
    if (st == STRATA_OK) st = st_cuda_doorbell_alloc(&db, T, k);
    if (st == STRATA_OK)
        st = st_cuda_moe_route(d_l, T, n_expert, k, norm, d_ids, d_wts, &db, NULL);
    if (st == STRATA_OK) st = st_cuda_synchronize();
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(gids, d_ids, sizeof(int32_t) * (size_t)(no + GUARD));
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(gwts, d_wts, sizeof(float) * (size_t)(no + GUARD));
    CHECK(st == STRATA_OK, "route T=%lld E=%d k=%d: %s", (long long)T, n_expert, k, strata_last_error());
    if (st == STRATA_OK) {
        int64_t id_bad = 0, db_bad = 0, guard_bad = 0, nans = 0;
        double max_w = 0.0;
        for (int64_t i = 0; i < no; i++) {
            id_bad += gids[i] != ids[i];
            if (isnan(gwts[i])) nans++;
            else if (fabs((double)gwts[i] - wts[i]) > max_w) max_w = fabs((double)gwts[i] - wts[i]);
            db_bad += db.h_ids[i] != gids[i] || memcmp(&db.h_wts[i], &gwts[i], 4) != 0;
        }
        for (int64_t i = no; i < no + GUARD; i++) {
            uint32_t u;
            memcpy(&u, &gwts[i], 4);
            guard_bad += (uint32_t)gids[i] != SENTINEL || u != SENTINEL;
        }
        const int ok = id_bad == 0 && max_w <= 1e-6 && db_bad == 0 && guard_bad == 0 && nans == 0;
        printf("route  T=%-3lld n_expert=%-4d k=%d norm=%d ties=%d  ids differ %lld, max |dw| %.2e, "
               "doorbell differs %lld, guard %lld, NaN %lld  %s\n", (long long)T, n_expert, k, norm,
               ties, (long long)id_bad, max_w, (long long)db_bad, (long long)guard_bad,
               (long long)nans, ok ? "pass" : "FAIL");
        CHECK(id_bad == 0, "route T=%lld E=%d k=%d: %lld ids differ", (long long)T, n_expert, k, (long long)id_bad);
        CHECK(max_w <= 1e-6 && nans == 0, "route: max weight error %.3g, %lld NaN", max_w, (long long)nans);
        CHECK(db_bad == 0, "route: doorbell differs from the device output in %lld", (long long)db_bad);
        CHECK(guard_bad == 0, "route: %lld guard words overwritten", (long long)guard_bad);
    }
    (void)st_cuda_doorbell_free(&db);
    (void)st_cuda_free(d_l);
    (void)st_cuda_free(d_ids);
    (void)st_cuda_free(d_wts);
    free(logits); free(ids); free(gids); free(wts); free(gwts);
}

/* st_cuda_moe_route_cfg against st_route_scored (the CPU's rule) on random logits (ties: integer
 * logits and a bias of quarters): ids identical, weights within 1e-6 times max(1, scale), the
 * doorbell equal to the device output; with groups, every chosen expert in one of n_group_used
 * groups (the rule itself, not only agreement). sigmoid: the scores 1 / (1 + expf(-x)). */
/* sigmoid: 0 softmax, 1 sigmoid, 2 gpt-oss's softmax over the k chosen logits. */
static void check_route_scored(int64_t T, int32_t X, int32_t k, int sigmoid, int norm, float scale, int32_t G,
                               int32_t Gu, int bias, int ties, test_rng *r) {
    const int64_t nl = T * X, no = T * k;
    float *logits = malloc(sizeof(float) * (size_t)nl), *b = malloc(sizeof(float) * (size_t)X);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)no), *gids = malloc(sizeof(int32_t) * (size_t)no);
    float *wts = malloc(sizeof(float) * (size_t)no), *gwts = malloc(sizeof(float) * (size_t)no);
    void *d_l = NULL, *d_ids = NULL, *d_wts = NULL, *d_b = NULL;
    st_cuda_doorbell db;
    memset(&db, 0, sizeof db);
    for (int64_t i = 0; i < nl; i++)
        logits[i] = ties ? (float)(int)(test_rng_next(r) % 5) - 2.0f : 4.0f * test_rng_float(r);
    for (int32_t e = 0; e < X; e++)
        b[e] = ties ? 0.25f * (float)(int)(test_rng_next(r) % 3) : 0.1f * test_rng_float(r);
    const st_route_cfg cc = {X, k, sigmoid == 2 ? ST_GATING_SOFTMAX_WEIGHT : sigmoid ? ST_GATING_SIGMOID : ST_GATING_SOFTMAX,
                             norm, scale, G, Gu, bias ? b : NULL};
    for (int64_t t = 0; t < T; t++) st_route_scored(&cc, logits + t * X, ids + t * k, wts + t * k);
    strata_status st = st_cuda_malloc(&d_l, sizeof(float) * (size_t)nl);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_b, sizeof(float) * (size_t)X);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_ids, sizeof(int32_t) * (size_t)no);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_wts, sizeof(float) * (size_t)no);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_l, logits, sizeof(float) * (size_t)nl);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_b, b, sizeof(float) * (size_t)X);
    if (st == STRATA_OK) st = st_cuda_doorbell_alloc(&db, T, k);
    st_cuda_route_cfg gc;
    memset(&gc, 0, sizeof gc);
    gc.n_expert = X; gc.k = k; gc.sigmoid = sigmoid == 1; gc.softmax_weight = sigmoid == 2; gc.norm = norm;
    gc.scale = scale;
    gc.n_groups = G; gc.n_group_used = Gu; gc.d_bias = bias ? (const float *)d_b : NULL;
    if (st == STRATA_OK) st = st_cuda_moe_route_cfg(&gc, d_l, T, d_ids, d_wts, &db, NULL);
    if (st == STRATA_OK) st = st_cuda_synchronize();
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(gids, d_ids, sizeof(int32_t) * (size_t)no);
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(gwts, d_wts, sizeof(float) * (size_t)no);
    CHECK(st == STRATA_OK, "route_cfg T=%lld E=%d k=%d: %s", (long long)T, X, k, strata_last_error());
    if (st == STRATA_OK) {
        int64_t id_bad = 0, db_bad = 0, nans = 0, grp_bad = 0;
        double max_w = 0.0;
        for (int64_t i = 0; i < no; i++) {
            id_bad += gids[i] != ids[i];
            if (isnan(gwts[i])) nans++;
            else if (fabs((double)gwts[i] - wts[i]) > max_w) max_w = fabs((double)gwts[i] - wts[i]);
            db_bad += db.h_ids[i] != gids[i] || memcmp(&db.h_wts[i], &gwts[i], 4) != 0;
        }
        for (int64_t t = 0; G > 1 && t < T; t++) { /* at most Gu distinct groups among the chosen */
            uint8_t seen[64] = {0};
            int n = 0;
            for (int32_t s = 0; s < k; s++) {
                const int32_t g = gids[t * k + s] >= 0 && gids[t * k + s] < X ? gids[t * k + s] / (X / G) : 0;
                if (!seen[g]) { seen[g] = 1; n++; }
            }
            grp_bad += n > Gu;
        }
        const double tol = 1e-6 * (scale > 1.0f ? scale : 1.0);
        const int ok = id_bad == 0 && max_w <= tol && db_bad == 0 && nans == 0 && grp_bad == 0;
        printf("route_cfg T=%-3lld n_expert=%-4d k=%d %s norm=%d scale=%g groups=%d/%d bias=%d ties=%d  ids differ "
               "%lld, max |dw| %.2e, doorbell differs %lld, rows past %d groups %lld  %s\n", (long long)T, X, k,
               sigmoid == 2 ? "softmax-k" : sigmoid ? "sigmoid" : "softmax", norm, (double)scale, G, Gu, bias, ties, (long long)id_bad, max_w,
               (long long)db_bad, Gu, (long long)grp_bad, ok ? "pass" : "FAIL");
        CHECK(id_bad == 0, "route_cfg E=%d k=%d: %lld ids differ from st_route_scored", X, k, (long long)id_bad);
        CHECK(max_w <= tol && nans == 0, "route_cfg: max weight error %.3g (bound %.3g), %lld NaN", max_w, tol,
              (long long)nans);
        CHECK(db_bad == 0, "route_cfg: doorbell differs from the device output in %lld", (long long)db_bad);
        CHECK(grp_bad == 0, "route_cfg: %lld rows chose experts of more than %d groups", (long long)grp_bad, Gu);
    }
    (void)st_cuda_doorbell_free(&db);
    void *frees[] = {d_l, d_b, d_ids, d_wts};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) (void)st_cuda_free(frees[i]);
    free(logits); free(b); free(ids); free(gids); free(wts); free(gwts);
}

/* st_cuda_moe_router1_cfg with a scored rule against st_cuda_mmv + st_cuda_moe_route_cfg on the
 * same device: logits, ids and weights bit-identical over three calls, the counter back at 0.
 * oai: gpt-oss's rule (softmax over the k chosen logits) with the router's bias as d_logit_bias,
 * against st_cuda_mmv + st_cuda_add_bias + st_cuda_moe_route_cfg. */
static void check_router1_scored(int64_t n_embd, int32_t X, int32_t k, int32_t G, int32_t Gu, int oai, test_rng *r) {
    const size_t nw = (size_t)(n_embd * X);
    float *w = malloc(sizeof(float) * nw), *x = malloc(sizeof(float) * (size_t)n_embd), *b = malloc(sizeof(float) * (size_t)X);
    float *l0 = malloc(sizeof(float) * (size_t)X), *l1 = malloc(sizeof(float) * (size_t)X);
    int32_t i0[64], i1[64];
    float w0[64], w1[64];
    void *d_w = NULL, *d_x = NULL, *d_b = NULL, *d_l0 = NULL, *d_l1 = NULL, *d_i0 = NULL, *d_i1 = NULL, *d_w0 = NULL,
         *d_w1 = NULL, *d_sync = NULL, *d_scr = NULL;
    for (size_t i = 0; i < nw; i++) w[i] = 0.05f * test_rng_float(r);
    for (int64_t i = 0; i < n_embd; i++) x[i] = test_rng_float(r);
    for (int32_t e = 0; e < X; e++) b[e] = 0.1f * test_rng_float(r);
    strata_status st = st_cuda_malloc(&d_w, sizeof(float) * nw);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_x, sizeof(float) * (size_t)n_embd);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_b, sizeof(float) * (size_t)X);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_l0, sizeof(float) * (size_t)X);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_l1, sizeof(float) * (size_t)X);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_i0, sizeof(int32_t) * 64);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_i1, sizeof(int32_t) * 64);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_w0, sizeof(float) * 64);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_w1, sizeof(float) * 64);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_scr, st_cuda_mmv_scratch_bytes(n_embd, 1));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_sync, sizeof(uint32_t));
    if (st == STRATA_OK) st = st_cuda_memset(d_sync, 0, sizeof(uint32_t));
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_w, w, sizeof(float) * nw);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_x, x, sizeof(float) * (size_t)n_embd);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_b, b, sizeof(float) * (size_t)X);
    const st_cuda_mat W = {STRATA_TYPE_F32, d_w, n_embd, X, sizeof(float) * (size_t)n_embd, NULL, 0};
    st_cuda_route_cfg c;
    memset(&c, 0, sizeof c);
    c.n_expert = X; c.k = k; c.sigmoid = 1; c.norm = 1; c.scale = 2.5f; c.n_groups = G; c.n_group_used = Gu;
    c.d_bias = (const float *)d_b;
    if (oai) {
        memset(&c, 0, sizeof c);
        c.n_expert = X; c.k = k; c.softmax_weight = 1; c.scale = 1.0f;
    }
    if (st == STRATA_OK) st = st_cuda_mmv(&W, (const float *)d_x, 1, (float *)d_l0, d_scr, NULL);
    if (st == STRATA_OK && oai) st = st_cuda_add_bias((float *)d_l0, X, (const float *)d_b, X, 1, NULL);
    if (st == STRATA_OK) st = st_cuda_moe_route_cfg(&c, (const float *)d_l0, 1, (int32_t *)d_i0, (float *)d_w0, NULL, NULL);
    if (oai) c.d_logit_bias = (const float *)d_b;
    int64_t bad = 0;
    uint32_t sync = 1;
    for (int rep = 0; rep < 3 && st == STRATA_OK; rep++) {
        st = st_cuda_memset(d_l1, 0xA5, sizeof(float) * (size_t)X);
        if (st == STRATA_OK)
            st = st_cuda_moe_router1_cfg(&W, (const float *)d_x, &c, (float *)d_l1, (int32_t *)d_i1, (float *)d_w1,
                                         NULL, NULL, NULL, (uint32_t *)d_sync, NULL);
        if (st == STRATA_OK) st = st_cuda_synchronize();
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(l0, d_l0, sizeof(float) * (size_t)X);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(l1, d_l1, sizeof(float) * (size_t)X);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(i0, d_i0, sizeof(int32_t) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(i1, d_i1, sizeof(int32_t) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(w0, d_w0, sizeof(float) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(w1, d_w1, sizeof(float) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(&sync, d_sync, sizeof sync);
        if (st != STRATA_OK) break;
        bad += memcmp(l0, l1, sizeof(float) * (size_t)X) != 0;
        bad += memcmp(i0, i1, sizeof(int32_t) * (size_t)k) != 0 || memcmp(w0, w1, sizeof(float) * (size_t)k) != 0;
        bad += sync != 0;
    }
    CHECK(st == STRATA_OK, "router1_cfg %lld x %d: %s", (long long)n_embd, X, strata_last_error());
    printf("router1_cfg n_embd=%-5lld n_expert=%-4d k=%d %s groups=%d/%d  mismatches %lld (logits, "
           "routing, counter over 3 calls)  %s\n", (long long)n_embd, X, k,
           oai ? "softmax-k + logit bias" : "sigmoid+bias x2.5", G, Gu, (long long)bad,
           bad == 0 && st == STRATA_OK ? "pass" : "FAIL");
    CHECK(bad == 0, "router1_cfg %lld x %d k %d: %lld mismatches against st_cuda_mmv + st_cuda_moe_route_cfg",
          (long long)n_embd, X, k, (long long)bad);
    void *frees[] = {d_w, d_x, d_b, d_l0, d_l1, d_i0, d_i1, d_w0, d_w1, d_sync, d_scr};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) (void)st_cuda_free(frees[i]);
    free(w); free(x); free(b); free(l0); free(l1);
}

/* st_cuda_moe_router1 against st_cuda_mmv (the f32 router) + st_cuda_moe_route on the same
 * device: logits, ids and weights bit-identical, the doorbell equal, x's host-mapped mirror equal
 * to x, the counter back at 0, three calls in a row (the counter reused). */
static void check_router1(int64_t n_embd, int32_t n_expert, int32_t k, int norm, test_rng *r) {
    const size_t nw = (size_t)(n_embd * n_expert);
    float *w = malloc(sizeof(float) * nw), *x = malloc(sizeof(float) * (size_t)n_embd);
    float *l0 = malloc(sizeof(float) * (size_t)n_expert), *l1 = malloc(sizeof(float) * (size_t)n_expert);
    int32_t i0[64], i1[64];
    float w0[64], w1[64];
    void *d_w = NULL, *d_x = NULL, *d_l0 = NULL, *d_l1 = NULL, *d_i0 = NULL, *d_i1 = NULL, *d_w0 = NULL,
         *d_w1 = NULL, *d_xq = NULL, *d_sync = NULL, *d_scr = NULL;
    st_cuda_doorbell db;
    memset(&db, 0, sizeof db);
    float *h_xm = NULL; /* x's mirror, host-mapped */
    void *d_xm = NULL;
    for (size_t i = 0; i < nw; i++) w[i] = 0.05f * test_rng_float(r);
    for (int64_t i = 0; i < n_embd; i++) x[i] = test_rng_float(r);
    strata_status st = st_cuda_malloc(&d_w, sizeof(float) * nw);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_x, sizeof(float) * (size_t)n_embd);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_l0, sizeof(float) * (size_t)n_expert);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_l1, sizeof(float) * (size_t)n_expert);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_i0, sizeof(int32_t) * 64);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_i1, sizeof(int32_t) * 64);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_w0, sizeof(float) * 64);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_w1, sizeof(float) * 64);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_xq, (size_t)(n_embd / 32) * 36);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_scr, st_cuda_mmv_scratch_bytes(n_embd, 1));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_sync, sizeof(uint32_t));
    if (st == STRATA_OK) st = st_cuda_memset(d_sync, 0, sizeof(uint32_t));
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_w, w, sizeof(float) * nw);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_x, x, sizeof(float) * (size_t)n_embd);
    if (st == STRATA_OK) st = st_cuda_doorbell_alloc(&db, 1, k);
    if (st == STRATA_OK) st = st_cuda_host_alloc_mapped((void **)&h_xm, &d_xm, sizeof(float) * (size_t)n_embd);
    const st_cuda_mat W = {STRATA_TYPE_F32, d_w, n_embd, n_expert, sizeof(float) * (size_t)n_embd, NULL, 0};
    CHECK(st_cuda_moe_router1_supports(&W, n_expert, k), "router1: %lld x %d not supported", (long long)n_embd,
          n_expert);
    if (st == STRATA_OK) st = st_cuda_mmv(&W, (const float *)d_x, 1, (float *)d_l0, d_scr, NULL);
    if (st == STRATA_OK)
        st = st_cuda_moe_route((const float *)d_l0, 1, n_expert, k, norm, (int32_t *)d_i0, (float *)d_w0, NULL, NULL);
    int64_t bad = 0;
    uint32_t sync = 1;
    for (int rep = 0; rep < 3 && st == STRATA_OK; rep++) {
        st = st_cuda_memset(d_l1, 0xA5, sizeof(float) * (size_t)n_expert);
        memset(h_xm, 0xA5, sizeof(float) * (size_t)n_embd);
        if (st == STRATA_OK)
            st = st_cuda_moe_router1(&W, (const float *)d_x, n_expert, k, norm, (float *)d_l1, (int32_t *)d_i1,
                                     (float *)d_w1, &db, d_xq, (float *)d_xm, (uint32_t *)d_sync, NULL);
        if (st == STRATA_OK) st = st_cuda_synchronize();
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(l0, d_l0, sizeof(float) * (size_t)n_expert);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(l1, d_l1, sizeof(float) * (size_t)n_expert);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(i0, d_i0, sizeof(int32_t) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(i1, d_i1, sizeof(int32_t) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(w0, d_w0, sizeof(float) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(w1, d_w1, sizeof(float) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(&sync, d_sync, sizeof sync);
        if (st != STRATA_OK) break;
        bad += memcmp(l0, l1, sizeof(float) * (size_t)n_expert) != 0;
        bad += memcmp(i0, i1, sizeof(int32_t) * (size_t)k) != 0 || memcmp(w0, w1, sizeof(float) * (size_t)k) != 0;
        bad += memcmp(db.h_ids, i1, sizeof(int32_t) * (size_t)k) != 0 || memcmp(db.h_wts, w1, sizeof(float) * (size_t)k) != 0;
        bad += sync != 0;
        bad += memcmp(h_xm, x, sizeof(float) * (size_t)n_embd) != 0;
    }
    CHECK(st == STRATA_OK, "router1 %lld x %d: %s", (long long)n_embd, n_expert, strata_last_error());
    printf("router1 n_embd=%-5lld n_expert=%-4d k=%d norm=%d  mismatches %lld (logits, routing, doorbell, "
           "counter, x's mirror over 3 calls)  %s\n", (long long)n_embd, n_expert, k, norm, (long long)bad,
           bad == 0 && st == STRATA_OK ? "pass" : "FAIL");
    CHECK(bad == 0, "router1 %lld x %d k %d: %lld mismatches against st_cuda_mmv + st_cuda_moe_route",
          (long long)n_embd, n_expert, k, (long long)bad);
    (void)st_cuda_doorbell_free(&db);
    if (h_xm) (void)st_cuda_host_free(h_xm);
    void *frees[] = {d_w, d_x, d_l0, d_l1, d_i0, d_i1, d_w0, d_w1, d_xq, d_sync, d_scr};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) (void)st_cuda_free(frees[i]);
    free(w); free(x); free(l0); free(l1);
}

/* ---- experts --------------------------------------------------------------------------------- */

/* A set of materialized experts on host and device, and the two tables over n_expert entries
 * (entry e -> materialized e % n_mat). */
typedef struct {
    int64_t n_embd, n_ff;
    int32_t n_expert, n_mat;
    strata_type tg, td;
    size_t rb_g, rb_d, bytes_g, bytes_d; /* per matrix */
    uint8_t *h_g, *h_u, *h_d;            /* [n_mat] matrices each */
    void *d_g, *d_u, *d_d;
    st_expert *cpu;                      /* [n_expert] */
    void *d_table;                       /* device st_cuda_expert [n_expert] */
    /* gpt-oss (expert_set_oai): biases [n_expert][n_ff] / [n_expert][n_embd] and the activation */
    float *h_bg, *h_bu, *h_bd;
    void *d_bg, *d_bu, *d_bd;
    int oai;
} expert_set;

static int expert_set_make(expert_set *s, int64_t n_embd, int64_t n_ff, int32_t n_expert,
                           int32_t n_mat, strata_type tg, strata_type td, test_rng *r) {
    memset(s, 0, sizeof *s);
    s->n_embd = n_embd; s->n_ff = n_ff; s->n_expert = n_expert; s->n_mat = n_mat; s->tg = tg; s->td = td;
    s->rb_g = (size_t)strata_row_bytes(tg, n_embd);
    s->rb_d = (size_t)strata_row_bytes(td, n_ff);
    s->bytes_g = s->rb_g * (size_t)n_ff;
    s->bytes_d = s->rb_d * (size_t)n_embd;
    s->h_g = malloc(s->bytes_g * (size_t)n_mat);
    s->h_u = malloc(s->bytes_g * (size_t)n_mat);
    s->h_d = malloc(s->bytes_d * (size_t)n_mat);
    s->cpu = calloc((size_t)n_expert, sizeof(st_expert));
    if (!s->h_g || !s->h_u || !s->h_d || !s->cpu) return 0;
    const int64_t qg = strata_type_block_size(tg), qd = strata_type_block_size(td);
    const float mg = type_mag(tg, n_embd, r), md = type_mag(td, n_ff, r); /* h rms ~0.6, like x */
    fill_blocks(tg, s->h_g, (int64_t)n_mat * n_ff * (n_embd / qg), mg, r);
    fill_blocks(tg, s->h_u, (int64_t)n_mat * n_ff * (n_embd / qg), mg, r);
    fill_blocks(td, s->h_d, (int64_t)n_mat * n_embd * (n_ff / qd), md, r);
    strata_status st = st_cuda_malloc(&s->d_g, s->bytes_g * (size_t)n_mat);
    if (st == STRATA_OK) st = st_cuda_malloc(&s->d_u, s->bytes_g * (size_t)n_mat);
    if (st == STRATA_OK) st = st_cuda_malloc(&s->d_d, s->bytes_d * (size_t)n_mat);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(s->d_g, s->h_g, s->bytes_g * (size_t)n_mat);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(s->d_u, s->h_u, s->bytes_g * (size_t)n_mat);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(s->d_d, s->h_d, s->bytes_d * (size_t)n_mat);
    st_cuda_expert *tab = calloc((size_t)n_expert, sizeof(st_cuda_expert));
    if (!tab) return 0;
    for (int32_t e = 0; e < n_expert; e++) {
        const size_t m = (size_t)(e % n_mat);
        st_expert *c = &s->cpu[e];
        c->gate.type = c->up.type = tg;
        c->gate.data = s->h_g + m * s->bytes_g;
        c->up.data = s->h_u + m * s->bytes_g;
        c->gate.ne[0] = c->up.ne[0] = n_embd;
        c->gate.ne[1] = c->up.ne[1] = n_ff;
        c->gate.ne[2] = c->up.ne[2] = 1;
        c->gate.row_bytes = c->up.row_bytes = s->rb_g;
        c->down.type = td;
        c->down.data = s->h_d + m * s->bytes_d;
        c->down.ne[0] = n_ff; c->down.ne[1] = n_embd; c->down.ne[2] = 1;
        c->down.row_bytes = s->rb_d;
        c->gate.name = "gate"; c->up.name = "up"; c->down.name = "down";
        st_cuda_expert *g = &tab[e];
        g->gate.type = g->up.type = tg;
        g->gate.data = (const uint8_t *)s->d_g + m * s->bytes_g;
        g->up.data = (const uint8_t *)s->d_u + m * s->bytes_g;
        g->gate.ne0 = g->up.ne0 = n_embd;
        g->gate.ne1 = g->up.ne1 = n_ff;
        g->gate.row_bytes = g->up.row_bytes = s->rb_g;
        g->down.type = td;
        g->down.data = (const uint8_t *)s->d_d + m * s->bytes_d;
        g->down.ne0 = n_ff; g->down.ne1 = n_embd;
        g->down.row_bytes = s->rb_d;
    }
    if (st == STRATA_OK) st = st_cuda_malloc(&s->d_table, sizeof(st_cuda_expert) * (size_t)n_expert);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(s->d_table, tab, sizeof(st_cuda_expert) * (size_t)n_expert);
    free(tab);
    CHECK(st == STRATA_OK, "expert upload: %s", strata_last_error());
    return st == STRATA_OK;
}

/* gpt-oss's experts: random biases of gate, up (before the activation) and down on both sides,
 * the clamped SwiGLU when oai. Returns 0 on an allocation or upload failure. */
static int expert_set_oai(expert_set *s, int oai, test_rng *r) {
    const size_t nf = (size_t)s->n_expert * (size_t)s->n_ff, ne = (size_t)s->n_expert * (size_t)s->n_embd;
    s->h_bg = malloc(sizeof(float) * nf);
    s->h_bu = malloc(sizeof(float) * nf);
    s->h_bd = malloc(sizeof(float) * ne);
    if (!s->h_bg || !s->h_bu || !s->h_bd) return 0;
    for (size_t i = 0; i < nf; i++) s->h_bg[i] = 1.5f * test_rng_float(r);
    for (size_t i = 0; i < nf; i++) s->h_bu[i] = 1.5f * test_rng_float(r);
    for (size_t i = 0; i < ne; i++) s->h_bd[i] = 0.5f * test_rng_float(r);
    strata_status st = st_cuda_malloc(&s->d_bg, sizeof(float) * nf);
    if (st == STRATA_OK) st = st_cuda_malloc(&s->d_bu, sizeof(float) * nf);
    if (st == STRATA_OK) st = st_cuda_malloc(&s->d_bd, sizeof(float) * ne);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(s->d_bg, s->h_bg, sizeof(float) * nf);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(s->d_bu, s->h_bu, sizeof(float) * nf);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(s->d_bd, s->h_bd, sizeof(float) * ne);
    s->oai = oai;
    for (int32_t e = 0; e < s->n_expert; e++) {
        st_expert *c = &s->cpu[e];
        c->b_gate = s->h_bg + (size_t)e * (size_t)s->n_ff;
        c->b_up = s->h_bu + (size_t)e * (size_t)s->n_ff;
        c->b_down = s->h_bd + (size_t)e * (size_t)s->n_embd;
        c->act = oai ? ST_ACT_SWIGLU_OAI : ST_ACT_SWIGLU;
    }
    CHECK(st == STRATA_OK, "expert biases upload: %s", strata_last_error());
    return st == STRATA_OK;
}

static void expert_set_free(expert_set *s) {
    (void)st_cuda_free(s->d_g); (void)st_cuda_free(s->d_u); (void)st_cuda_free(s->d_d);
    (void)st_cuda_free(s->d_table);
    (void)st_cuda_free(s->d_bg); (void)st_cuda_free(s->d_bu); (void)st_cuda_free(s->d_bd);
    free(s->h_bg); free(s->h_bu); free(s->h_bd);
    free(s->h_g); free(s->h_u); free(s->h_d); free(s->cpu);
    memset(s, 0, sizeof *s);
}

/* The arguments of one st_cuda_moe_ffn call over s's device table (xq NULL). */
static st_cuda_moe_args ffn_args(const expert_set *s, void *d_x, int64_t T, void *d_ids, void *d_w, int32_t k,
                                 void *d_out, int accumulate, void *d_ws, size_t wsz) {
    st_cuda_moe_args a;
    memset(&a, 0, sizeof a);
    a.experts = (const st_cuda_expert *)s->d_table;
    a.n_expert = s->n_expert;
    a.type_gate = a.type_up = s->tg;
    a.type_down = s->td;
    a.n_embd = s->n_embd;
    a.n_ff = s->n_ff;
    a.x = (const float *)d_x;
    a.T = T;
    a.ids = (const int32_t *)d_ids;
    a.wts = (const float *)d_w;
    a.k = k;
    a.out = (float *)d_out;
    a.accumulate = accumulate;
    a.ws = d_ws;
    a.ws_bytes = wsz;
    a.b_gate = (const float *)s->d_bg;
    a.b_up = (const float *)s->d_bu;
    a.b_down = (const float *)s->d_bd;
    a.act = s->oai;
    return a;
}

/* Runs the GPU FFN three times (output and workspace poisoned before each; the second with the
 * fused GLU tiles instead of the paired default, the third with the one-buffer f16 tiles instead
 * of the int8 kernel) into got[T*n_embd + GUARD]; with accumulate, out starts as init.
 * Returns 1 when every run succeeded, *same = 1 when all three are bit-identical. */
static int gpu_ffn(const expert_set *s, const float *x, int64_t T, const int32_t *ids,
                   const float *wts, int32_t k, int accumulate, const float *init, float *got,
                   int *same) {
    const int64_t n = T * s->n_embd;
    const size_t wsz = st_cuda_moe_wsize(T, k, s->n_embd, s->n_ff);
    void *d_x = NULL, *d_ids = NULL, *d_w = NULL, *d_out = NULL, *d_ws = NULL;
    float *got2 = malloc(sizeof(float) * (size_t)(n + GUARD));
    strata_status st = got2 ? STRATA_OK : STRATA_ERR_NOMEM;
    if (st == STRATA_OK) st = st_cuda_malloc(&d_x, sizeof(float) * (size_t)n);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_ids, sizeof(int32_t) * (size_t)(T * k));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_w, sizeof(float) * (size_t)(T * k));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_out, sizeof(float) * (size_t)(n + GUARD));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_ws, wsz);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_x, x, sizeof(float) * (size_t)n);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_ids, ids, sizeof(int32_t) * (size_t)(T * k));
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_w, wts, sizeof(float) * (size_t)(T * k));
    for (int run = 0; run < 3 && st == STRATA_OK; run++) {
        float *dst = run == 0 ? got : got2;
        st = st_cuda_memset(d_out, 0xA5, sizeof(float) * (size_t)(n + GUARD));
        if (st == STRATA_OK && accumulate) st = st_cuda_memcpy_h2d(d_out, init, sizeof(float) * (size_t)n);
        /* poison the workspace too: nothing may read what this call did not write */
        if (st == STRATA_OK) st = st_cuda_memset(d_ws, run == 0 ? 0xFF : 0x7F, wsz);
        st_cuda_moe_args a = ffn_args(s, d_x, T, d_ids, d_w, k, d_out, accumulate, d_ws, wsz);
        /* the second run takes the fused GLU tiles, the third the f16 tiles: *same also says the
         * tile kernels agree */
        st_cuda_mmq_set_glu_mode(run == 1 ? 1 : 2);
        st_cuda_mmq_set_int8(run != 2);
        if (st == STRATA_OK) st = st_cuda_moe_ffn(&a, NULL);
        if (st == STRATA_OK) st = st_cuda_synchronize();
        st_cuda_mmq_set_glu_mode(2);
        st_cuda_mmq_set_int8(1);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(dst, d_out, sizeof(float) * (size_t)(n + GUARD));
        if (run == 1 && st == STRATA_OK) /* got2 is compared after each later run too */
            *same = memcmp(got, got2, sizeof(float) * (size_t)(n + GUARD)) == 0;
        if (run == 2 && st == STRATA_OK)
            *same = *same && memcmp(got, got2, sizeof(float) * (size_t)(n + GUARD)) == 0;
    }
    /* one token: x quantized by st_cuda_moe_router1 (a random router) and passed as xq, the
     * call then without its plan and with down + combine in one launch: the same bits */
    if (st == STRATA_OK && T == 1 && s->n_expert <= 256 && s->n_embd % 32 == 0) {
        float *wr = malloc(sizeof(float) * (size_t)(s->n_expert * s->n_embd));
        void *d_wr = NULL, *d_l = NULL, *d_ri = NULL, *d_rw = NULL, *d_xq = NULL, *d_sync = NULL;
        st = wr ? STRATA_OK : STRATA_ERR_NOMEM;
        test_rng rr = {0x1234567ULL + (unsigned long long)s->n_embd};
        for (int64_t i = 0; wr && i < s->n_expert * s->n_embd; i++) wr[i] = 0.05f * test_rng_float(&rr);
        if (st == STRATA_OK) st = st_cuda_malloc(&d_wr, sizeof(float) * (size_t)(s->n_expert * s->n_embd));
        if (st == STRATA_OK) st = st_cuda_malloc(&d_l, sizeof(float) * (size_t)s->n_expert);
        if (st == STRATA_OK) st = st_cuda_malloc(&d_ri, sizeof(int32_t) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_malloc(&d_rw, sizeof(float) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_malloc(&d_xq, (size_t)(s->n_embd / 32) * 36);
        if (st == STRATA_OK) st = st_cuda_malloc(&d_sync, sizeof(uint32_t));
        if (st == STRATA_OK) st = st_cuda_memset(d_sync, 0, sizeof(uint32_t));
        if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_wr, wr, sizeof(float) * (size_t)(s->n_expert * s->n_embd));
        const st_cuda_mat W = {STRATA_TYPE_F32, d_wr, s->n_embd, s->n_expert, sizeof(float) * (size_t)s->n_embd, NULL, 0};
        if (st == STRATA_OK)
            st = st_cuda_moe_router1(&W, (const float *)d_x, s->n_expert, k, 1, (float *)d_l, (int32_t *)d_ri,
                                     (float *)d_rw, NULL, d_xq, NULL, (uint32_t *)d_sync, NULL);
        if (st == STRATA_OK) st = st_cuda_memset(d_out, 0xA5, sizeof(float) * (size_t)(n + GUARD));
        if (st == STRATA_OK && accumulate) st = st_cuda_memcpy_h2d(d_out, init, sizeof(float) * (size_t)n);
        if (st == STRATA_OK) st = st_cuda_memset(d_ws, 0x3F, wsz);
        st_cuda_moe_args a = ffn_args(s, d_x, 1, d_ids, d_w, k, d_out, accumulate, d_ws, wsz);
        a.xq = d_xq;
        if (st == STRATA_OK) st = st_cuda_moe_ffn(&a, NULL);
        if (st == STRATA_OK) st = st_cuda_synchronize();
        float *got3 = malloc(sizeof(float) * (size_t)(n + GUARD));
        if (st == STRATA_OK) st = got3 ? st_cuda_memcpy_d2h(got3, d_out, sizeof(float) * (size_t)(n + GUARD)) : STRATA_ERR_NOMEM;
        const int fused_same = st == STRATA_OK && memcmp(got, got3, sizeof(float) * (size_t)(n + GUARD)) == 0;
        CHECK(fused_same, "one-token call with the router's xq (%s/%s, %lld x %lld, k %d, accumulate %d) "
              "differs from the planned call", strata_type_name(s->tg), strata_type_name(s->td),
              (long long)s->n_embd, (long long)s->n_ff, k, accumulate);
        /* the same with counters (h quantized inside the gate/up kernel), twice in a row (the
         * counters must come back to 0), and with one counter too few (the quantize launch) */
        const int64_t n_cnt = (int64_t)k * (s->n_ff / 32);
        void *d_cnt = NULL;
        if (st == STRATA_OK) st = st_cuda_malloc(&d_cnt, sizeof(uint32_t) * (size_t)(n_cnt + 1));
        if (st == STRATA_OK) st = st_cuda_memset(d_cnt, 0, sizeof(uint32_t) * (size_t)(n_cnt + 1));
        st_cuda_moe_set_gu_q8(1);
        for (int rep = 0; rep < 3 && st == STRATA_OK; rep++) {
            if (st == STRATA_OK) st = st_cuda_memset(d_out, 0xA5, sizeof(float) * (size_t)(n + GUARD));
            if (st == STRATA_OK && accumulate) st = st_cuda_memcpy_h2d(d_out, init, sizeof(float) * (size_t)n);
            if (st == STRATA_OK) st = st_cuda_memset(d_ws, 0x3F, wsz);
            a.sync = (uint32_t *)d_cnt;
            a.n_sync = rep < 2 ? n_cnt : n_cnt - 1;
            if (st == STRATA_OK) st = st_cuda_moe_ffn(&a, NULL);
            if (st == STRATA_OK) st = st_cuda_synchronize();
            if (st == STRATA_OK) st = st_cuda_memcpy_d2h(got3, d_out, sizeof(float) * (size_t)(n + GUARD));
            uint32_t *hc = malloc(sizeof(uint32_t) * (size_t)(n_cnt + 1));
            int cnt_zero = hc != NULL;
            if (st == STRATA_OK && hc) st = st_cuda_memcpy_d2h(hc, d_cnt, sizeof(uint32_t) * (size_t)(n_cnt + 1));
            for (int64_t i = 0; hc && i <= n_cnt; i++) cnt_zero &= hc[i] == 0;
            free(hc);
            CHECK(st == STRATA_OK && memcmp(got, got3, sizeof(float) * (size_t)(n + GUARD)) == 0,
                  "one-token call with counters (%s/%s, %lld x %lld, k %d, accumulate %d, pass %d) differs "
                  "from the planned call", strata_type_name(s->tg), strata_type_name(s->td),
                  (long long)s->n_embd, (long long)s->n_ff, k, accumulate, rep);
            CHECK(cnt_zero, "the gate/up kernel's counters not back at 0 (%s, pass %d)", strata_type_name(s->tg), rep);
        }
        st_cuda_moe_set_gu_q8(0);
        (void)st_cuda_free(d_cnt);
        (void)st_cuda_free(d_wr); (void)st_cuda_free(d_l); (void)st_cuda_free(d_ri); (void)st_cuda_free(d_rw);
        (void)st_cuda_free(d_xq); (void)st_cuda_free(d_sync);
        free(wr);
        free(got3);
    }
    CHECK(st == STRATA_OK, "GPU ffn: %s", strata_last_error());
    *same = st == STRATA_OK && *same && memcmp(got, got2, sizeof(float) * (size_t)(n + GUARD)) == 0;
    (void)st_cuda_free(d_x); (void)st_cuda_free(d_ids); (void)st_cuda_free(d_w);
    (void)st_cuda_free(d_out); (void)st_cuda_free(d_ws);
    free(got2);
    return st == STRATA_OK;
}

static void cpu_ffn(const expert_set *s, const float *x, int64_t T, const int32_t *ids,
                    const float *wts, int32_t k, float *out) {
    void *ws = malloc(st_moe_wsize(T, k, s->n_expert, s->n_embd, s->n_ff));
    st_moe_ffn(g_tp, s->cpu, s->n_expert, x, T, ids, wts, k, out, ws);
    free(ws);
}

/* The exact FFN: dequantized weights (strata_dequantize_row), f32 x, every product and sum in
 * double, no activation rounding. Both the GPU (q8_1 activations) and the CPU (q8_0 / q8_K
 * activations) approximate it; the CPU's q8_K blocks of 256 round more coarsely than q8_1's 32. */
static void exact_ffn(const expert_set *s, const float *x, int64_t T, const int32_t *ids,
                      const float *wts, int32_t k, float *out) {
    const int64_t E = s->n_embd, F = s->n_ff;
    float *row = malloc(sizeof(float) * (size_t)(E > F ? E : F));
    double *h = malloc(sizeof(double) * (size_t)F), *y = malloc(sizeof(double) * (size_t)E);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < E; i++) y[i] = 0.0;
        for (int32_t j = 0; j < k; j++) {
            const int32_t e = ids[t * k + j];
            if (e < 0 || e >= s->n_expert || wts[t * k + j] == 0.0f) continue;
            const st_expert *X = &s->cpu[e];
            for (int64_t f = 0; f < F; f++) {
                double g = X->b_gate ? X->b_gate[f] : 0.0, u = X->b_up ? X->b_up[f] : 0.0;
                strata_dequantize_row(X->gate.type, st_tensor_row(&X->gate, 0, f), row, E);
                for (int64_t i = 0; i < E; i++) g += (double)row[i] * x[t * E + i];
                strata_dequantize_row(X->up.type, st_tensor_row(&X->up, 0, f), row, E);
                for (int64_t i = 0; i < E; i++) u += (double)row[i] * x[t * E + i];
                if (X->act == ST_ACT_SWIGLU_OAI) { /* gpt-oss: clamps, sigmoid(1.702 g), u + 1 */
                    g = g < 7.0 ? g : 7.0;
                    u = u < -7.0 ? -7.0 : (u > 7.0 ? 7.0 : u);
                    h[f] = g / (1.0 + exp(-1.702 * g)) * (u + 1.0);
                } else {
                    h[f] = g / (1.0 + exp(-g)) * u;
                }
            }
            for (int64_t o = 0; o < E; o++) {
                double acc = X->b_down ? X->b_down[o] : 0.0;
                strata_dequantize_row(X->down.type, st_tensor_row(&X->down, 0, o), row, F);
                for (int64_t f = 0; f < F; f++) acc += (double)row[f] * h[f];
                y[o] += (double)wts[t * k + j] * acc;
            }
        }
        for (int64_t i = 0; i < E; i++) out[t * E + i] = (float)y[i];
    }
    free(row); free(h); free(y);
}

static double tol_for(strata_type tg, strata_type td) {
    const int plain_g = tg == STRATA_TYPE_F32 || tg == STRATA_TYPE_F16 || tg == STRATA_TYPE_BF16;
    const int plain_d = td == STRATA_TYPE_F32 || td == STRATA_TYPE_F16 || td == STRATA_TYPE_BF16;
    return plain_g && plain_d ? 1e-7 : 5e-4;
}

/* c: GPU vs the CPU path. ex (optional, nmse < 0 when absent): GPU and CPU vs the exact FFN. For
 * quantized experts the bound applies to the GPU's distance from the exact FFN when it is given
 * (the CPU path carries its own activation rounding, coarser for K-quants); c is then printed. */
typedef struct { double gpu, cpu; } exact_nmse;

static void report(const char *name, const expert_set *s, int64_t T, int32_t k, cmp_result c,
                   int same, double tol, double secs, exact_nmse ex) {
    const double judged = ex.gpu >= 0 ? ex.gpu : c.nmse;
    const int ok = judged <= tol && c.nans == 0 && c.unwritten == 0 && c.guard_bad == 0 && same;
    if (ex.gpu >= 0)
        printf("%-14s exact FFN: NMSE gpu %.2e, cpu %.2e\n", name, ex.gpu, ex.cpu);
    printf("%-14s n_embd=%-5lld n_ff=%-5lld E=%-3d k=%d %s/%s%s T=%-2lld NMSE %.2e (tol %.0e) max err "
           "%.2e (ref rms %.2e) NaN %lld unwritten %lld guard %lld %s  %s (%.2f s)\n", name,
           (long long)s->n_embd, (long long)s->n_ff, s->n_expert, k, strata_type_name(s->tg),
           strata_type_name(s->td), st_cuda_moe_type_gemv_q8(s->tg) && st_cuda_moe_type_gemv_q8(s->td) ?
           "" : "(fallback)", (long long)T, c.nmse, tol, c.max_err, c.ref_rms, (long long)c.nans,
           (long long)c.unwritten, (long long)c.guard_bad, same ? "repeatable" : "RUNS DIFFER",
           ok ? "pass" : "FAIL", secs);
    CHECK(judged <= tol, "%s %s/%s T=%lld: NMSE %.3g > %.0e (%s)", name, strata_type_name(s->tg),
          strata_type_name(s->td), (long long)T, judged, tol, ex.gpu >= 0 ? "vs exact" : "vs CPU");
    CHECK(c.nans == 0 && c.unwritten == 0, "%s T=%lld: %lld NaN, %lld unwritten outputs", name,
          (long long)T, (long long)c.nans, (long long)c.unwritten);
    CHECK(c.guard_bad == 0, "%s T=%lld: %lld guard words overwritten", name, (long long)T, (long long)c.guard_bad);
    CHECK(same, "%s T=%lld: GPU runs (paired int8, fused GLU, f16 tiles) differ", name, (long long)T);
}

/* One routed case: random x and router logits -> CPU ids/weights -> both FFNs. bad_ids: slot 1
 * of token 0 gets id -1 and slot 0 of the last token id n_expert (the CPU sees id 0, weight 0). */
static void check_ffn(const char *name, const expert_set *s, int64_t T, int32_t k, int norm,
                      int bad_ids, test_rng *r) {
    const clock_t c0 = clock();
    const int64_t n = T * s->n_embd, P = T * k;
    float *x = malloc(sizeof(float) * (size_t)n), *ref = malloc(sizeof(float) * (size_t)n);
    float *got = malloc(sizeof(float) * (size_t)(n + GUARD));
    float *logits = malloc(sizeof(float) * (size_t)(T * s->n_expert));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)P), *gids = malloc(sizeof(int32_t) * (size_t)P);
    float *wts = malloc(sizeof(float) * (size_t)P);
    for (int64_t i = 0; i < n; i++) x[i] = test_rng_float(r);
    for (int64_t i = 0; i < T * s->n_expert; i++) logits[i] = 3.0f * test_rng_float(r);
    for (int64_t t = 0; t < T; t++)
        st_route_topk(logits + t * s->n_expert, s->n_expert, k, norm, ids + t * k, wts + t * k);
    memcpy(gids, ids, sizeof(int32_t) * (size_t)P);
    if (bad_ids && k >= 2) {
        gids[1] = -1; ids[1] = 0; wts[1] = 0.0f;
        gids[(T - 1) * k] = s->n_expert; ids[(T - 1) * k] = 0; wts[(T - 1) * k] = 0.0f;
    }
    cpu_ffn(s, x, T, ids, wts, k, ref);
    int same = 0;
    exact_nmse ex = {-1, -1};
    if (gpu_ffn(s, x, T, gids, wts, k, 0, NULL, got, &same)) {
        if (tol_for(s->tg, s->td) > 1e-7 && s->n_embd * s->n_ff <= 4096 * 1536 &&
            (double)P * (double)(s->n_embd * s->n_ff) <= 2e9) { /* bounds the CPU time */
            float *exa = malloc(sizeof(float) * (size_t)(n + GUARD));
            exact_ffn(s, x, T, ids, wts, k, exa);
            ex.cpu = compare_plain(ref, exa, n);
            ex.gpu = compare_plain(got, exa, n);
            free(exa);
        }
        report(name, s, T, k, compare(got, ref, n), same, tol_for(s->tg, s->td),
               (double)(clock() - c0) / CLOCKS_PER_SEC, ex);
    }
    free(x); free(ref); free(got); free(logits); free(ids); free(gids); free(wts);
}

/* ---- CPU-exact rows (moe_exact.cu) ----------------------------------------------------------- */

/* On a mismatch: which stage of the exact kernels parted from the CPU, read from the workspace
 * (its layout: x's activation rows, then h, then h's rows; cuda_moe.h's wsize): x quantized,
 * h = silu(gate) * up of the first GPU pair, h quantized. */
static void exact_diagnose(const expert_set *s, const float *x, int64_t T, int32_t k, const int32_t *ig,
                           const void *d_ws) {
    const int64_t E = s->n_embd, F = s->n_ff, P = T * k;
    const int kx = strata_act_type(s->tg) == STRATA_TYPE_Q8_K, kh = strata_act_type(s->td) == STRATA_TYPE_Q8_K;
    const size_t rx = (size_t)strata_row_bytes(strata_act_type(s->tg), E);
    const size_t rh = (size_t)strata_row_bytes(strata_act_type(s->td), F);
    const size_t wx = (size_t)(E / 256) * sizeof(block_q8_K) > (size_t)(E / 32) * sizeof(block_q8_0)
                          ? (size_t)(E / 256) * sizeof(block_q8_K) : (size_t)(E / 32) * sizeof(block_q8_0);
    const size_t oh = ((size_t)T * wx + 255) & ~(size_t)255, ohq = oh + (((size_t)P * (size_t)F * 4 + 255) & ~(size_t)255);
    const size_t wsz = st_cuda_moe_exact_wsize(T, k, E, F);
    uint8_t *ws = malloc(wsz), *cx = malloc(rx), *ch = malloc(rh);
    float *h = malloc(sizeof(float) * (size_t)F);
    if (!ws || !cx || !ch || !h || st_cuda_memcpy_d2h(ws, d_ws, wsz) != STRATA_OK) goto out;
    int64_t p = 0;
    while (p < P && !(ig[p] >= 0 && ig[p] < s->n_expert)) p++;
    if (p == P) goto out;
    const int64_t t = p / k;
    if (kx) st_quantize_row_q8_K(x + t * E, (block_q8_K *)cx, E);
    else st_quantize_row_q8_0(x + t * E, (block_q8_0 *)cx, E);
    printf("  diagnose pair %lld: x's activation row %s\n", (long long)p,
           memcmp(cx, ws + (size_t)t * rx, rx) ? "DIFFERS" : "equal");
    for (size_t i = 0; i < rx; i++)
        if (cx[i] != ws[(size_t)t * rx + i]) {
            printf("  diagnose: first differing byte %zu of %zu: gpu %02x cpu %02x; bytes 0..40 gpu", i, rx,
                   ws[(size_t)t * rx + i], cx[i]);
            for (size_t j = 0; j < 40 && j < rx; j++) printf(" %02x", ws[(size_t)t * rx + j]);
            printf(" cpu");
            for (size_t j = 0; j < 40 && j < rx; j++) printf(" %02x", cx[j]);
            printf(" x[32..35] %.9g %.9g %.9g %.9g\n", (double)x[t * E + 32], (double)x[t * E + 33],
                   (double)x[t * E + 34], (double)x[t * E + 35]);
            break;
        }
    const st_expert *X = &s->cpu[ig[p]];
    int64_t hb = 0;
    for (int64_t r = 0; r < F; r++) {
        float g, u;
        st_vec_dot_get(s->tg)(E, &g, st_tensor_row(&X->gate, 0, r), cx);
        st_vec_dot_get(s->tg)(E, &u, st_tensor_row(&X->up, 0, r), cx);
        h[r] = st_silu(g) * u;
        float gh;
        memcpy(&gh, ws + oh + ((size_t)p * (size_t)F + (size_t)r) * 4, 4);
        if (memcmp(&gh, &h[r], 4) && hb++ == 0)
            printf("  diagnose: h[%lld] gpu %.9g cpu %.9g (g %.9g u %.9g)\n", (long long)r, (double)gh, (double)h[r],
                   (double)g, (double)u);
    }
    if (kh) st_quantize_row_q8_K(h, (block_q8_K *)ch, F);
    else st_quantize_row_q8_0(h, (block_q8_0 *)ch, F);
    printf("  diagnose: h %lld of %lld differ; h's activation row %s\n", (long long)hb, (long long)F,
           memcmp(ch, ws + ohq + (size_t)p * rh, rh) ? "DIFFERS" : "equal");
out:
    free(ws); free(cx); free(ch); free(h);
}

/* st_cuda_moe_exact_rows against st_moe_ffn_end_rows, bit for bit, and st_cuda_moe_combine_rows
 * of a split (slots to the GPU where (t * k + s) % split == 0; split 1: all, 0: none) against
 * st_moe_ffn's sum. x has blocks of 0 and of equal magnitudes of both signs (the quantizers'
 * first-of-equals rule), and bad_ids drops two slots. Rows the GPU does not own stay poisoned. */
static void check_exact(const char *name, const expert_set *s, int64_t T, int32_t k, int split, int bad_ids,
                        test_rng *r) {
    if (!st_vec_dot_exact_blocks(s->tg) || !st_vec_dot_exact_blocks(s->td)) {
        SKIP("exact rows %s %s/%s: the CPU's kernels here are not the exact-block-sum ones", name,
             strata_type_name(s->tg), strata_type_name(s->td));
        return;
    }
    const int64_t E = s->n_embd, P = T * k, n = T * E;
    float *x = malloc(sizeof(float) * (size_t)n), *logits = malloc(sizeof(float) * (size_t)(T * s->n_expert));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)P), *ig = malloc(sizeof(int32_t) * (size_t)P),
            *ic = malloc(sizeof(int32_t) * (size_t)P);
    float *wts = malloc(sizeof(float) * (size_t)P);
    float *ref_rows = malloc(sizeof(float) * (size_t)(P * E)), *cpu_rows = malloc(sizeof(float) * (size_t)(P * E));
    float *got_rows = malloc(sizeof(float) * (size_t)(P * E + GUARD));
    float *ref = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)(n + GUARD));
    void *ws = malloc(st_moe_wsize(T, k, s->n_expert, E, s->n_ff));
    for (int64_t i = 0; i < n; i++) x[i] = test_rng_float(r);
    for (int64_t i = 0; i < 32 && i < E; i++) x[i] = 0.0f;          /* a zero Q8_0 block */
    if (E >= 512) for (int64_t i = 256; i < 512; i++) x[i] = 0.0f;  /* a zero Q8_K block */
    x[E - 7] = 2.5f;                                                /* equal magnitudes, */
    x[E - 3] = -2.5f;                                               /* the first positive */
    if (T > 1) { x[E + 40] = -1.75f; x[E + 41] = 1.75f; }           /* the first negative */
    for (int64_t i = 0; i < T * s->n_expert; i++) logits[i] = 3.0f * test_rng_float(r);
    for (int64_t t = 0; t < T; t++)
        st_route_topk(logits + t * s->n_expert, s->n_expert, k, 1, ids + t * k, wts + t * k);
    if (bad_ids && k >= 2) { ids[1] = -1; ids[(T - 1) * k] = s->n_expert; }
    for (int64_t q = 0; q < P; q++) {
        const int gpu = split > 0 && q % split == 0;
        ig[q] = gpu ? ids[q] : -1;
        ic[q] = gpu ? -1 : ids[q];
    }
    /* the CPU: every slot's rows (the reference), the CPU share's rows, the sum */
    for (int64_t i = 0; i < P * E; i++) ref_rows[i] = cpu_rows[i] = -7.0f;
    st_moe_ffn_begin(g_tp, s->cpu, s->n_expert, x, T, ids, wts, k, ref, ws);
    st_moe_ffn_end_rows(g_tp, ws, ref_rows);
    st_moe_ffn_begin(g_tp, s->cpu, s->n_expert, x, T, ic, wts, k, ref, ws);
    st_moe_ffn_end_rows(g_tp, ws, cpu_rows);
    st_moe_ffn(g_tp, s->cpu, s->n_expert, x, T, ids, wts, k, ref, ws);
    /* the GPU's share, then the combine */
    const size_t wsz = st_cuda_moe_exact_wsize(T, k, E, s->n_ff);
    void *d_x = NULL, *d_ids = NULL, *d_ig = NULL, *d_w = NULL, *d_rows = NULL, *d_crows = NULL, *d_out = NULL,
         *d_ws = NULL;
    strata_status st = st_cuda_malloc(&d_x, sizeof(float) * (size_t)n);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_ids, sizeof(int32_t) * (size_t)P);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_ig, sizeof(int32_t) * (size_t)P);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_w, sizeof(float) * (size_t)P);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_rows, sizeof(float) * (size_t)(P * E + GUARD));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_crows, sizeof(float) * (size_t)(P * E));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_out, sizeof(float) * (size_t)(n + GUARD));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_ws, wsz);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_x, x, sizeof(float) * (size_t)n);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_ids, ids, sizeof(int32_t) * (size_t)P);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_ig, ig, sizeof(int32_t) * (size_t)P);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_w, wts, sizeof(float) * (size_t)P);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_crows, cpu_rows, sizeof(float) * (size_t)(P * E));
    if (st == STRATA_OK) st = st_cuda_memset(d_rows, 0xA5, sizeof(float) * (size_t)(P * E + GUARD));
    if (st == STRATA_OK) st = st_cuda_memset(d_out, 0xA5, sizeof(float) * (size_t)(n + GUARD));
    if (st == STRATA_OK) st = st_cuda_memset(d_ws, 0xFF, wsz);
    st_cuda_moe_args a = ffn_args(s, d_x, T, d_ig, d_w, k, d_out, 0, d_ws, wsz);
    if (st == STRATA_OK) st = st_cuda_moe_exact_rows(&a, (float *)d_rows, NULL);
    if (st == STRATA_OK)
        st = st_cuda_moe_combine_rows((const int32_t *)d_ids, (const int32_t *)d_ig, (const float *)d_rows,
                                      (const float *)d_crows, (const float *)d_w, T, k, E, s->n_expert,
                                      (float *)d_out, NULL);
    if (st == STRATA_OK) st = st_cuda_synchronize();
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(got_rows, d_rows, sizeof(float) * (size_t)(P * E + GUARD));
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(got, d_out, sizeof(float) * (size_t)(n + GUARD));
    CHECK(st == STRATA_OK, "exact rows %s: %s", name, strata_last_error());
    if (st == STRATA_OK) {
        int64_t rows_bad = 0, poison_bad = 0, gpu_rows = 0, first_bad = -1;
        for (int64_t q = 0; q < P; q++) {
            const int mine = ig[q] >= 0 && ig[q] < s->n_expert;
            gpu_rows += mine;
            for (int64_t i = 0; i < E; i++) {
                uint32_t u;
                memcpy(&u, &got_rows[q * E + i], 4);
                if (mine && memcmp(&got_rows[q * E + i], &ref_rows[q * E + i], 4) != 0) {
                    if (first_bad < 0) first_bad = q * E + i;
                    rows_bad++;
                }
                if (!mine) poison_bad += u != SENTINEL;
            }
        }
        for (int64_t i = P * E; i < P * E + GUARD; i++) {
            uint32_t u;
            memcpy(&u, &got_rows[i], 4);
            poison_bad += u != SENTINEL;
        }
        int64_t out_bad = 0;
        for (int64_t i = 0; i < n; i++) out_bad += memcmp(&got[i], &ref[i], 4) != 0;
        for (int64_t i = n; i < n + GUARD; i++) {
            uint32_t u;
            memcpy(&u, &got[i], 4);
            poison_bad += u != SENTINEL;
        }
        printf("%-14s exact rows %s/%s n_embd=%lld n_ff=%lld T=%lld k=%d split %d: %lld GPU rows, %lld values "
               "differ%s, combine %lld of %lld differ, %lld stray writes  %s\n", name, strata_type_name(s->tg),
               strata_type_name(s->td), (long long)E, (long long)s->n_ff, (long long)T, k, split,
               (long long)gpu_rows, (long long)rows_bad, rows_bad ? " (first: see below)" : "", (long long)out_bad,
               (long long)n, (long long)poison_bad, rows_bad || out_bad || poison_bad ? "FAIL" : "pass");
        if (first_bad >= 0) {
            printf("  first difference at %lld: gpu %.9g cpu %.9g\n", (long long)first_bad,
                   (double)got_rows[first_bad], (double)ref_rows[first_bad]);
            exact_diagnose(s, x, T, k, ig, d_ws);
        }
        CHECK(rows_bad == 0, "exact rows %s %s/%s T=%lld: %lld values differ from the CPU's", name,
              strata_type_name(s->tg), strata_type_name(s->td), (long long)T, (long long)rows_bad);
        CHECK(out_bad == 0, "combine rows %s %s/%s T=%lld split %d: %lld of %lld differ from st_moe_ffn", name,
              strata_type_name(s->tg), strata_type_name(s->td), (long long)T, split, (long long)out_bad,
              (long long)n);
        CHECK(poison_bad == 0, "exact rows %s: %lld stray writes", name, (long long)poison_bad);
    }
    void *fr[] = {d_x, d_ids, d_ig, d_w, d_rows, d_crows, d_out, d_ws};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) (void)st_cuda_free(fr[i]);
    free(x); free(logits); free(ids); free(ig); free(ic); free(wts); free(ref_rows); free(cpu_rows);
    free(got_rows); free(ref); free(got); free(ws);
}

/* Routed experts of r_set plus a shared expert (sh_set, one-expert table) with a sigmoid gate,
 * accumulated into the routed output: as forward_cpu.c's st_ffn_block. */
static void check_shared(const expert_set *rs, const expert_set *sh, int64_t T, int32_t k, test_rng *r) {
    const clock_t c0 = clock();
    const int64_t n = T * rs->n_embd, P = T * k;
    float *x = malloc(sizeof(float) * (size_t)n), *ref = malloc(sizeof(float) * (size_t)n);
    float *ref2 = malloc(sizeof(float) * (size_t)n), *routed = malloc(sizeof(float) * (size_t)(n + GUARD));
    float *got = malloc(sizeof(float) * (size_t)(n + GUARD));
    float *logits = malloc(sizeof(float) * (size_t)(T * rs->n_expert));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)P), *zeros = calloc((size_t)T, sizeof(int32_t));
    float *wts = malloc(sizeof(float) * (size_t)P), *gate = malloc(sizeof(float) * (size_t)T);
    for (int64_t i = 0; i < n; i++) x[i] = test_rng_float(r);
    for (int64_t i = 0; i < T * rs->n_expert; i++) logits[i] = 3.0f * test_rng_float(r);
    for (int64_t t = 0; t < T; t++) {
        st_route_topk(logits + t * rs->n_expert, rs->n_expert, k, 0, ids + t * k, wts + t * k);
        gate[t] = st_sigmoid(2.0f * test_rng_float(r));
    }
    cpu_ffn(rs, x, T, ids, wts, k, ref);
    cpu_ffn(sh, x, T, zeros, gate, 1, ref2);
    for (int64_t i = 0; i < n; i++) ref[i] += ref2[i];
    int same1 = 0, same2 = 0;
    if (gpu_ffn(rs, x, T, ids, wts, k, 0, NULL, routed, &same1) &&
        gpu_ffn(sh, x, T, zeros, gate, 1, 1, routed, got, &same2))
        report("shared+routed", sh, T, 1, compare(got, ref, n), same1 && same2,
               tol_for(sh->tg, sh->td), (double)(clock() - c0) / CLOCKS_PER_SEC,
               (exact_nmse){-1, -1});
    free(x); free(ref); free(ref2); free(routed); free(got); free(logits); free(ids); free(zeros);
    free(wts); free(gate);
}

/* ---- argument errors (no device needed) ------------------------------------------------------ */

/* STRATA_IQ_STAGE_TABLES: the grouped kernels with the IQ3 codebooks staged in shared memory give
 * the bits of the read-only-cache ones (one-token calls: gate/up and the fused down; more tokens:
 * the group kernels). */
static void check_iq_stage(const expert_set *s, int64_t T, int32_t k, test_rng *r) {
    const int64_t n = T * s->n_embd, P = T * k;
    float *x = malloc(sizeof(float) * (size_t)n), *a = malloc(sizeof(float) * (size_t)(n + GUARD));
    float *b = malloc(sizeof(float) * (size_t)(n + GUARD)), *logits = malloc(sizeof(float) * (size_t)(T * s->n_expert));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)P);
    float *wts = malloc(sizeof(float) * (size_t)P);
    if (!x || !a || !b || !logits || !ids || !wts) {
        CHECK(0, "host allocation");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) x[i] = test_rng_float(r);
    for (int64_t i = 0; i < T * s->n_expert; i++) logits[i] = 3.0f * test_rng_float(r);
    for (int64_t t = 0; t < T; t++)
        st_route_topk(logits + t * s->n_expert, s->n_expert, k, 1, ids + t * k, wts + t * k);
    int same_a = 0, same_b = 0;
    st_cuda_moe_set_iq_stage(0);
    const int ok_a = gpu_ffn(s, x, T, ids, wts, k, 0, NULL, a, &same_a);
    st_cuda_moe_set_iq_stage(1);
    const int ok_b = gpu_ffn(s, x, T, ids, wts, k, 0, NULL, b, &same_b);
    st_cuda_moe_set_iq_stage(0);
    const int same = ok_a && ok_b && memcmp(a, b, sizeof(float) * (size_t)n) == 0;
    printf("iq_stage_tables %s/%s T=%lld k=%d: staged %s\n", strata_type_name(s->tg), strata_type_name(s->td),
           (long long)T, (int)k, same ? "bitwise the same" : "DIFFERENT");
    CHECK(same, "%s/%s T=%lld: staged IQ3 tables change the output (runs %d %d)", strata_type_name(s->tg),
          strata_type_name(s->td), (long long)T, ok_a, ok_b);
done:
    free(x); free(a); free(b); free(logits); free(ids); free(wts);
}

static void test_arguments(void) {
    CHECK(st_cuda_moe_supports(STRATA_TYPE_Q4_K) && st_cuda_moe_supports(STRATA_TYPE_Q6_K) &&
          st_cuda_moe_supports(STRATA_TYPE_Q8_0) && st_cuda_moe_type_dp4a(STRATA_TYPE_Q4_K) &&
          st_cuda_moe_type_dp4a(STRATA_TYPE_Q6_K) && st_cuda_moe_type_dp4a(STRATA_TYPE_Q8_0) &&
          st_cuda_moe_type_dp4a(STRATA_TYPE_Q5_K) && st_cuda_moe_type_dp4a(STRATA_TYPE_Q4_0),
          "required dp4a types missing");
    static const strata_type iq[] = {STRATA_TYPE_IQ4_XS, STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ3_S, STRATA_TYPE_IQ2_XXS,
                                     STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ2_S, STRATA_TYPE_IQ1_S, STRATA_TYPE_IQ1_M,
                                     STRATA_TYPE_MXFP4};
    for (size_t i = 0; i < sizeof iq / sizeof iq[0]; i++)
        CHECK(st_cuda_moe_supports(iq[i]) && st_cuda_moe_type_dp4a(iq[i]) && st_cuda_moe_type_tiles(iq[i]),
              "%s: no dp4a expert kernel or tiles", strata_type_name(iq[i]));
    /* the grouped GEMVs' q8_1 types: every dp4a type, some fallback types by a build switch
     * (STRATA_MOE_DP4A_EXT), never Q2_K or the float types */
    for (int t = 0; t < STRATA_TYPE_COUNT; t++)
        CHECK(!st_cuda_moe_type_dp4a((strata_type)t) || st_cuda_moe_type_gemv_q8((strata_type)t),
              "%s: a dp4a type off the q8 GEMVs", strata_type_name((strata_type)t));
    CHECK(!st_cuda_moe_type_gemv_q8(STRATA_TYPE_Q2_K) && !st_cuda_moe_type_gemv_q8(STRATA_TYPE_F32) &&
          !st_cuda_moe_type_gemv_q8(STRATA_TYPE_F16) && !st_cuda_moe_type_gemv_q8(STRATA_TYPE_BF16),
          "Q2_K and the float types are the f32 fallback's");
    /* STRATA_IQ_STAGE_TABLES' default, by a faked compute capability: 6.0 only */
    CHECK(st_cuda_iq_stage_default(6, 0) && !st_cuda_iq_stage_default(6, 1) && !st_cuda_iq_stage_default(7, 0) &&
          !st_cuda_iq_stage_default(8, 6) && !st_cuda_iq_stage_default(9, 0) && !st_cuda_iq_stage_default(5, 0),
          "iq_stage_tables default");
    CHECK(!st_cuda_moe_supports((strata_type)4) && !st_cuda_moe_supports(STRATA_TYPE_COUNT),
          "unknown types must be unsupported");
    CHECK(st_cuda_moe_ffn(NULL, NULL) == STRATA_ERR_INVALID_ARG, "NULL args");
    st_cuda_moe_args a;
    memset(&a, 0, sizeof a);
    a.experts = (const st_cuda_expert *)(uintptr_t)0x1000;
    a.x = (const float *)(uintptr_t)0x2000;
    a.ids = (const int32_t *)(uintptr_t)0x3000;
    a.wts = (const float *)(uintptr_t)0x4000;
    a.out = (float *)(uintptr_t)0x5000;
    a.ws = (void *)(uintptr_t)0x6000;
    a.ws_bytes = (size_t)1 << 40;
    a.n_expert = 8; a.k = 2; a.T = 1; a.n_embd = 256; a.n_ff = 512;
    a.type_gate = STRATA_TYPE_Q4_K; a.type_up = STRATA_TYPE_Q8_0; a.type_down = STRATA_TYPE_Q6_K;
    strata_status st = st_cuda_moe_ffn(&a, NULL);
    CHECK(st == STRATA_ERR_UNSUPPORTED, "gate/up of different types: %s", strata_status_name(st));
    a.type_up = STRATA_TYPE_Q4_K;
    a.n_embd = 288;
    st = st_cuda_moe_ffn(&a, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "n_embd 288 for Q4_K: %s", strata_status_name(st));
    a.n_embd = 256;
    a.type_gate = a.type_up = a.type_down = STRATA_TYPE_F16; /* no tile kernel */
    a.T = 600;
    st = st_cuda_moe_ffn(&a, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "T * k > 1024 without tiles: %s", strata_status_name(st));
    a.type_gate = a.type_up = a.type_down = STRATA_TYPE_Q4_K;
    a.T = 1;
    a.act = 2;
    st = st_cuda_moe_ffn(&a, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "act 2: %s", strata_status_name(st));
    if (!st_cuda_moe_tiles_oai()) { /* biased / gpt-oss experts keep the GEMV path: over 1024 pairs is refused */
        a.act = 1;
        a.T = 600;
        st = st_cuda_moe_ffn(&a, NULL);
        CHECK(st == STRATA_ERR_INVALID_ARG, "gpt-oss's act over 1024 pairs: %s", strata_status_name(st));
        a.act = 0;
    }
    a.T = ST_CUDA_MOE_MAX_PAIRS / 2 + 1;
    st = st_cuda_moe_ffn(&a, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "T * k > ST_CUDA_MOE_MAX_PAIRS: %s", strata_status_name(st));
    a.T = 1;
    a.ws_bytes = 16;
    st = st_cuda_moe_ffn(&a, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "small workspace: %s", strata_status_name(st));
    CHECK(st_cuda_moe_wsize(8, 8, 2048, 768) > 64 * 768 * sizeof(float), "workspace size");
    int32_t *di = (int32_t *)(uintptr_t)0x1000;
    float *dw = (float *)(uintptr_t)0x2000;
    st = st_cuda_moe_route((const float *)(uintptr_t)0x3000, 1, 8, 9, 0, di, dw, NULL, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "k > n_expert: %s", strata_status_name(st));
    st = st_cuda_moe_route((const float *)(uintptr_t)0x3000, 1, 8, 2, 0, NULL, NULL, NULL, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "no output: %s", strata_status_name(st));
    CHECK(st_cuda_doorbell_free(NULL) == STRATA_OK, "doorbell free NULL");
    { /* scored rules: refusals before any device work */
        st_cuda_route_cfg c;
        memset(&c, 0, sizeof c);
        c.n_expert = 256; c.k = 8; c.sigmoid = 1; c.norm = 1; c.scale = 1.0f; c.n_groups = 8; c.n_group_used = 4;
        CHECK(!st_cuda_route_plain(&c), "sigmoid is not the plain rule");
        c.n_groups = 7;
        st = st_cuda_moe_route_cfg(&c, (const float *)(uintptr_t)0x3000, 1, di, dw, NULL, NULL);
        CHECK(st == STRATA_ERR_INVALID_ARG, "7 groups of 256 experts: %s", strata_status_name(st));
        c.n_groups = 64; c.n_group_used = 1; /* 4 experts for k 8 */
        st = st_cuda_moe_route_cfg(&c, (const float *)(uintptr_t)0x3000, 1, di, dw, NULL, NULL);
        CHECK(st == STRATA_ERR_INVALID_ARG, "groups holding fewer than k: %s", strata_status_name(st));
        c.n_groups = 1; c.n_expert = 4096;
        st = st_cuda_moe_route_cfg(&c, (const float *)(uintptr_t)0x3000, 1, di, dw, NULL, NULL);
        CHECK(st == STRATA_ERR_INVALID_ARG, "a scored rule over 4096 experts: %s", strata_status_name(st));
        c.sigmoid = 0; c.norm = 0;
        CHECK(st_cuda_route_plain(&c), "softmax, no bias, no groups, scale 1: the plain rule");
        c.n_expert = 32; c.k = 4; c.softmax_weight = 1;
        CHECK(!st_cuda_route_plain(&c), "softmax over the k is not the plain rule");
        c.sigmoid = 1;
        st = st_cuda_moe_route_cfg(&c, (const float *)(uintptr_t)0x3000, 1, di, dw, NULL, NULL);
        CHECK(st == STRATA_ERR_INVALID_ARG, "sigmoid and softmax_weight: %s", strata_status_name(st));
        c.sigmoid = 0;
        c.d_logit_bias = dw;
        st = st_cuda_moe_route_cfg(&c, (const float *)(uintptr_t)0x3000, 1, di, dw, NULL, NULL);
        CHECK(st == STRATA_ERR_INVALID_ARG, "a logit bias in st_cuda_moe_route_cfg: %s", strata_status_name(st));
    }
    /* the CPU-exact rows: the types they take, and refusals before any device work */
    CHECK(st_cuda_moe_exact_supports(STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K) &&
              st_cuda_moe_exact_supports(STRATA_TYPE_Q8_0, STRATA_TYPE_Q4_0) &&
              !st_cuda_moe_exact_supports(STRATA_TYPE_Q3_K, STRATA_TYPE_Q4_K) &&
              !st_cuda_moe_exact_supports(STRATA_TYPE_Q4_K, STRATA_TYPE_F16),
          "exact rows: supported types");
    CHECK(st_cuda_moe_exact_rows(NULL, NULL, NULL) == STRATA_ERR_INVALID_ARG, "exact rows: NULL args");
    {
        st_cuda_moe_args xa;
        memset(&xa, 0, sizeof xa);
        float dummy[4];
        xa.experts = (const st_cuda_expert *)dummy; xa.x = dummy; xa.ids = (const int32_t *)dummy; xa.ws = dummy;
        xa.n_expert = 8; xa.T = 1; xa.k = 2; xa.n_embd = 256; xa.n_ff = 256;
        xa.type_gate = xa.type_up = STRATA_TYPE_Q3_K; xa.type_down = STRATA_TYPE_Q4_K;
        CHECK(st_cuda_moe_exact_rows(&xa, dummy, NULL) == STRATA_ERR_UNSUPPORTED, "exact rows: Q3_K refused");
        xa.type_gate = xa.type_up = STRATA_TYPE_Q4_K;
        xa.b_down = dummy;
        CHECK(st_cuda_moe_exact_rows(&xa, dummy, NULL) == STRATA_ERR_UNSUPPORTED, "exact rows: biases refused");
        xa.b_down = NULL;
        xa.n_embd = 288;
        CHECK(st_cuda_moe_exact_rows(&xa, dummy, NULL) == STRATA_ERR_INVALID_ARG, "exact rows: 288 not whole Q4_K blocks");
        xa.n_embd = 256;
        xa.ws_bytes = 16;
        CHECK(st_cuda_moe_exact_rows(&xa, dummy, NULL) == STRATA_ERR_INVALID_ARG, "exact rows: small workspace");
        xa.T = 40000;
        CHECK(st_cuda_moe_exact_rows(&xa, dummy, NULL) == STRATA_ERR_INVALID_ARG, "exact rows: too many pairs");
        CHECK(st_cuda_moe_combine_rows(NULL, NULL, NULL, NULL, NULL, 1, 2, 8, 8, NULL, NULL) == STRATA_ERR_INVALID_ARG,
              "combine rows: NULL args");
    }
}

/* gpt-oss: routing by softmax over the top-k logits (ST_GATING_SOFTMAX_WEIGHT) against
 * st_route_scored, the one-token router's bits with it; experts with gate/up/down biases and the
 * clamped SwiGLU against st_moe_ffn (and the exact FFN) at gpt-oss-20b's shape in MXFP4 (2880 x
 * 2880, 32 experts, top-4: decode, verify, a prompt chunk), F32 (tight bound), Q8_0 and Q5_0 at
 * batches the tiles take in STRATA_MMQ_OAI builds (int8 and f16 tiles; the GEMV path otherwise),
 * biases with plain SwiGLU, and bad ids. STRATA_MMQ_OAI builds also run a prompt chunk of over
 * 1024 pairs (which only the tiles take). */
static void test_oai(test_rng *r) {
    printf("gpt-oss experts' prompt batches: %s\n", st_cuda_moe_tiles_oai() ? "the tiles (STRATA_MMQ_OAI build)"
                                                                           : "the GEMV path");
    check_route_scored(1, 32, 4, 2, 0, 1.0f, 1, 1, 0, 0, r);
    check_route_scored(8, 32, 4, 2, 0, 1.0f, 1, 1, 0, 1, r);
    check_route_scored(5, 128, 4, 2, 0, 1.0f, 1, 1, 0, 0, r);
    check_router1_scored(2880, 32, 4, 1, 1, 1, r);
    check_router1_scored(2880, 128, 4, 1, 1, 1, r);
    expert_set s;
    memset(&s, 0, sizeof s);
    if (expert_set_make(&s, 2880, 2880, 32, 8, STRATA_TYPE_MXFP4, STRATA_TYPE_MXFP4, r) && expert_set_oai(&s, 1, r)) {
        check_ffn("gpt-oss", &s, 1, 4, 0, 0, r);
        check_ffn("gpt-oss", &s, 3, 4, 0, 0, r);
        check_ffn("gpt-oss", &s, 8, 4, 0, 1, r);
        check_ffn("gpt-oss", &s, 64, 4, 0, 0, r);
        if (st_cuda_moe_tiles_oai()) check_ffn("gpt-oss", &s, 272, 4, 0, 1, r); /* 1088 pairs */
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 96, 224, 6, 6, STRATA_TYPE_F32, STRATA_TYPE_F32, r) && expert_set_oai(&s, 1, r)) {
        check_ffn("oai f32", &s, 1, 3, 0, 0, r);
        check_ffn("oai f32", &s, 8, 3, 0, 1, r);
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 512, 256, 6, 6, STRATA_TYPE_Q8_0, STRATA_TYPE_Q8_0, r) && expert_set_oai(&s, 1, r)) {
        check_ffn("oai q8_0", &s, 1, 3, 0, 0, r);
        check_ffn("oai q8_0", &s, 40, 3, 0, 0, r); /* a batch the tiles take (in STRATA_MMQ_OAI builds) */
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 512, 256, 6, 6, STRATA_TYPE_Q5_0, STRATA_TYPE_Q5_0, r) && expert_set_oai(&s, 1, r)) {
        check_ffn("oai q5_0", &s, 3, 3, 0, 0, r);
        check_ffn("oai q5_0", &s, 40, 3, 0, 1, r); /* the f16 tiles (in STRATA_MMQ_OAI builds) */
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 512, 256, 6, 6, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, r) && expert_set_oai(&s, 0, r)) {
        check_ffn("bias swiglu", &s, 1, 3, 1, 0, r);
        check_ffn("bias swiglu", &s, 5, 3, 1, 0, r);
        check_ffn("bias swiglu", &s, 40, 3, 1, 0, r); /* the tiles with biases alone (STRATA_MMQ_OAI) */
    }
    expert_set_free(&s);
}

/* a name in TEST_CUDA_MOE_TYPES's comma list, any case (every type when the list is NULL) */
static int type_listed(const char *list, strata_type t) {
    if (!list) return 1;
    const char *name = strata_type_name(t);
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        size_t k = 0;
        while (len == n && k < n && tolower((unsigned char)p[k]) == tolower((unsigned char)name[k])) k++;
        if (len == n && k == n) return 1;
        p += len + (e != NULL);
    }
    return 0;
}

/* every tile type (of the list) at odd sizes: T >= 32 takes the tensor-core tiles */
static void tile_cases(const strata_type *types, size_t n, const char *only, test_rng *r) {
    expert_set s;
    for (size_t i = 0; i < n; i++) {
        const strata_type t = types[i];
        if (!st_cuda_moe_type_tiles(t) || !type_listed(only, t)) continue;
        const int kq = strata_type_block_size(t) == 256;
        if (!expert_set_make(&s, kq ? 512 : 96, kq ? 768 : 224, 6, 6, t, t, r)) { expert_set_free(&s); continue; }
        check_ffn("tiles", &s, 40, 3, 1, 0, r);
        check_ffn("tiles", &s, 77, 3, 0, 1, r);
        expert_set_free(&s);
    }
}

int main(void) {
    test_arguments();

    int available = 0;
    char reason[256];
    strata_status st = st_cuda_probe(&available, reason, sizeof reason);
    CHECK(st == STRATA_OK, "probe: %s", strata_last_error());
    if (!available) {
        CHECK(reason[0] != '\0', "unavailable without a reason");
        st_cuda_doorbell db;
        st = st_cuda_doorbell_alloc(&db, 8, 8);
        CHECK(st == STRATA_ERR_UNSUPPORTED && strstr(strata_last_error(), reason) != NULL,
              "no device: doorbell %s '%s'", strata_status_name(st), strata_last_error());
        SKIP("GPU checks: CUDA unavailable: %s", reason);
        return test_report();
    }
    printf("device: %s\n", reason);
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    st = st_threadpool_create(nproc < 1 ? 1 : (nproc > 16 ? 16 : (int)nproc), &g_tp);
    CHECK(st == STRATA_OK, "threadpool: %s", strata_last_error());
    if (st != STRATA_OK) return test_report();

    test_rng r = {0x9E3779B97F4A7C15ULL};
    if (getenv("TEST_CUDA_MOE_OAI_ONLY")) { /* set: the gpt-oss cases alone (a quick device A/B) */
        test_oai(&r);
        st_threadpool_free(g_tp);
        return test_report();
    }

    /* router */
    check_route(1, 128, 8, 1, 0, &r);
    check_route(8, 128, 8, 0, 0, &r);
    check_route(8, 128, 8, 1, 1, &r);   /* many ties */
    check_route(5, 64, 8, 0, 0, &r);
    check_route(8, 8, 2, 1, 0, &r);
    check_route(37, 60, 4, 1, 0, &r);
    check_route(3, 256, 8, 1, 1, &r);
    check_route(2, 1000, 16, 0, 0, &r);
    { /* scored rules (st_route_scored): a stream of their own, the cases below keep their data */
        test_rng r2 = {0x94D049BB133111EBULL};
        check_route_scored(8, 128, 8, 0, 1, 2.0f, 1, 1, 0, 0, &r2);   /* softmax x scale: by logit */
        check_route_scored(8, 160, 6, 0, 0, 16.0f, 8, 3, 0, 0, &r2);  /* DeepSeek-V2: softmax, 8 groups, 3 */
        check_route_scored(8, 64, 6, 0, 1, 1.0f, 1, 1, 1, 0, &r2);    /* softmax + bias */
        check_route_scored(8, 256, 8, 1, 1, 2.5f, 8, 4, 1, 0, &r2);   /* DeepSeek-V3 */
        check_route_scored(1, 256, 8, 1, 1, 2.5f, 8, 4, 1, 0, &r2);
        check_route_scored(8, 256, 8, 1, 1, 2.5f, 8, 4, 1, 1, &r2);   /* ties */
        check_route_scored(5, 384, 8, 1, 1, 2.827f, 1, 1, 1, 0, &r2); /* Kimi-K2: one group */
        check_route_scored(3, 16, 4, 1, 1, 2.5f, 4, 2, 1, 0, &r2);    /* the tiny DeepseekV3 */
        check_route_scored(3, 16, 4, 1, 0, 1.0f, 4, 2, 0, 1, &r2);    /* sigmoid alone, ties */
        check_route_scored(4, 64, 8, 1, 1, 1.0f, 8, 1, 1, 0, &r2);    /* one group of 8 used: k = its size */
        check_route_scored(37, 1000, 16, 1, 1, 1.0f, 1, 1, 1, 0, &r2); /* beyond a block of threads */
        check_router1_scored(2048, 256, 8, 8, 4, 0, &r2);
        check_router1_scored(1024, 64, 6, 1, 1, 0, &r2);
    }
    { /* (a stream of its own: the expert cases below keep their data) */
        test_rng r1 = {0xD1B54A32D192ED03ULL};
        check_router1(2048, 128, 8, 1, &r1);
        check_router1(2048, 64, 8, 0, &r1);
        check_router1(96, 8, 2, 1, &r1);
        check_router1(4096, 256, 8, 1, &r1);
        check_router1(1312, 60, 4, 0, &r1);
    }

    expert_set s;
    /* TEST_CUDA_MOE_TYPES=Q3_K,Q5_0,...: the per-type cases of those types alone (a device A/B of
     * moe.cu's build switches) */
    const char *only = getenv("TEST_CUDA_MOE_TYPES");
    /* every supported type on small odd shapes (row chunks fewer than and not a multiple of 32) */
    static const strata_type types[] = {
        STRATA_TYPE_Q4_0, STRATA_TYPE_Q8_0, STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_K, STRATA_TYPE_Q6_K,
        STRATA_TYPE_F32, STRATA_TYPE_F16, STRATA_TYPE_BF16, STRATA_TYPE_Q4_1, STRATA_TYPE_Q5_0,
        STRATA_TYPE_Q5_1, STRATA_TYPE_IQ4_NL, STRATA_TYPE_Q2_K, STRATA_TYPE_Q3_K, STRATA_TYPE_IQ4_XS,
        STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ3_S, STRATA_TYPE_IQ2_XXS, STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ2_S,
        STRATA_TYPE_IQ1_S, STRATA_TYPE_IQ1_M, STRATA_TYPE_MXFP4,
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const strata_type t = types[i];
        if (!type_listed(only, t)) continue;
        if (!strata_type_can_dot(t) || !strata_type_can_dequantize(t)) {
            CHECK(0, "%s experts: no CPU path to compare with", strata_type_name(t));
            continue;
        }
        const int kq = strata_type_block_size(t) == 256;
        const int64_t sizes[2][2] = {{kq ? 512 : 96, kq ? 768 : 224}, {kq ? 2304 : 1312, kq ? 1280 : 800}};
        for (int z = 0; z < 2; z++) {
            if (!expert_set_make(&s, sizes[z][0], sizes[z][1], 6, 6, t, t, &r)) { expert_set_free(&s); continue; }
            check_ffn("small", &s, 1, 3, 0, 0, &r);
            check_ffn("small", &s, 3, 3, 1, 0, &r);
            check_ffn("small", &s, 8, 3, 1, z, &r);
            expert_set_free(&s);
        }
    }
    if (only) { /* the per-type tile cases next, then nothing else */
        tile_cases(types, sizeof types / sizeof types[0], only, &r);
        st_threadpool_free(g_tp);
        return test_report();
    }
    /* 1..8 columns, groups larger than 8 pairs, bad ids */
    if (expert_set_make(&s, 768, 512, 5, 5, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, &r)) {
        for (int64_t T = 1; T <= 8; T++) check_ffn("columns", &s, T, 2, 1, 0, &r);
        check_ffn("bad ids", &s, 4, 3, 1, 1, &r);
        check_ffn("bad ids", &s, 1, 3, 1, 1, &r);
    }
    expert_set_free(&s);
    /* CPU-exact rows: each type alone and the qwen3 mix, splits of every kind, T = 1..8 */
    for (size_t i = 0; i < 5; i++) { /* Q4_0, Q8_0, Q4_K, Q5_K, Q6_K */
        const strata_type t = types[i];
        const int kq = strata_type_block_size(t) == 256;
        if (!expert_set_make(&s, kq ? 768 : 224, kq ? 512 : 96, 6, 6, t, t, &r)) { expert_set_free(&s); continue; }
        check_exact("exact", &s, 1, 3, 2, 0, &r);
        check_exact("exact", &s, 3, 3, 1, 1, &r);
        check_exact("exact", &s, 8, 3, 3, 0, &r);
        check_exact("exact", &s, 2, 3, 0, 0, &r);
        expert_set_free(&s);
    }
    if (expert_set_make(&s, 2048, 768, 128, 16, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, &r)) {
        for (int64_t T = 1; T <= 8; T++) check_exact("qwen3 exact", &s, T, 8, 1 + (int)(T % 3), T == 4, &r);
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 2048, 1024, 64, 16, STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, &r)) {
        check_exact("olmoe exact", &s, 1, 8, 3, 0, &r);
        check_exact("olmoe exact", &s, 1, 8, 1, 0, &r);
    }
    expert_set_free(&s);
    /* prompt batches: the tensor-core tile path (T >= 32 and T * k >= 4 n_expert, or > 1024
     * pairs) for every tile type, odd sizes, bad ids, more pairs than the GEMV path takes */
    tile_cases(types, sizeof types / sizeof types[0], NULL, &r);
    if (expert_set_make(&s, 768, 512, 5, 5, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, &r)) {
        check_ffn("tiles", &s, 300, 4, 1, 0, &r);  /* 1200 pairs */
        check_ffn("tiles", &s, 64, 2, 1, 0, &r);
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 512, 256, 3, 3, STRATA_TYPE_Q8_0, STRATA_TYPE_Q8_0, &r)) {
        check_ffn("big groups", &s, 16, 2, 1, 0, &r);
        check_ffn("big groups", &s, 33, 3, 0, 0, &r);
    }
    expert_set_free(&s);

    /* Qwen3-30B-A3B: 2048, 768, 128 experts top-8 (16 materialized) */
    if (expert_set_make(&s, 2048, 768, 128, 16, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, &r)) {
        static const int64_t Ts[] = {1, 2, 3, 5, 8};
        for (size_t i = 0; i < 5; i++) check_ffn("qwen3-30b-a3b", &s, Ts[i], 8, 1, 0, &r);
        check_ffn("qwen3-30b-a3b", &s, 80, 8, 1, 0, &r); /* tiles */
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 2048, 768, 128, 16, STRATA_TYPE_Q8_0, STRATA_TYPE_Q8_0, &r)) {
        check_ffn("qwen3-30b-a3b", &s, 1, 8, 1, 0, &r);
        check_ffn("qwen3-30b-a3b", &s, 8, 8, 1, 0, &r);
    }
    expert_set_free(&s);
    /* OLMoE-1B-7B: 2048, 1024, 64 experts top-8 (no renormalization) */
    if (expert_set_make(&s, 2048, 1024, 64, 16, STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, &r)) {
        check_ffn("olmoe-1b-7b", &s, 1, 8, 0, 0, &r);
        check_ffn("olmoe-1b-7b", &s, 8, 8, 0, 0, &r);
        check_ffn("olmoe-1b-7b", &s, 48, 8, 0, 0, &r); /* tiles */
    }
    expert_set_free(&s);
    /* Mixtral: 4096, 14336, 8 experts top-2 (2 materialized) */
    if (expert_set_make(&s, 4096, 14336, 8, 2, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, &r)) {
        check_ffn("mixtral", &s, 1, 2, 1, 0, &r);
        check_ffn("mixtral", &s, 8, 2, 1, 0, &r);
    }
    expert_set_free(&s);
    /* shared expert with a sigmoid gate on top of routed experts (qwen2moe-like) */
    expert_set sh;
    memset(&sh, 0, sizeof sh);
    if (expert_set_make(&s, 2048, 768, 64, 8, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, &r) &&
        expert_set_make(&sh, 2048, 2816, 1, 1, STRATA_TYPE_Q8_0, STRATA_TYPE_Q6_K, &r)) {
        check_shared(&s, &sh, 1, 8, &r);
        check_shared(&s, &sh, 8, 8, &r);
        check_shared(&s, &sh, 64, 8, &r); /* tiles for both */
    }
    expert_set_free(&s);
    expert_set_free(&sh);

    /* mixed low-bit types per matrix at the qwen3-30b-a3b shape: decode, groups, tiles; then
     * the staged IQ3 codebooks (bits unchanged) */
    static const strata_type mixed[][2] = {
        {STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ3_S}, {STRATA_TYPE_IQ1_M, STRATA_TYPE_MXFP4},
        {STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ4_XS}, {STRATA_TYPE_IQ2_S, STRATA_TYPE_IQ1_S},
        {STRATA_TYPE_IQ2_XXS, STRATA_TYPE_IQ3_XXS},
    };
    for (size_t i = 0; i < sizeof mixed / sizeof mixed[0]; i++) {
        const strata_type tg = mixed[i][0], td = mixed[i][1];
        if (!strata_type_can_dot(tg) || !strata_type_can_dot(td) || !strata_type_can_dequantize(tg) ||
            !strata_type_can_dequantize(td)) {
            CHECK(0, "%s/%s experts: no CPU path to compare with", strata_type_name(tg), strata_type_name(td));
            continue;
        }
        if (expert_set_make(&s, 2048, 768, 32, 12, tg, td, &r)) {
            check_ffn("mixed", &s, 1, 8, 1, 0, &r);
            check_ffn("mixed", &s, 8, 8, 1, 0, &r);
            check_ffn("mixed", &s, 80, 8, 1, 0, &r); /* tiles */
            if (tg == STRATA_TYPE_IQ3_XXS || td == STRATA_TYPE_IQ3_S || td == STRATA_TYPE_IQ3_XXS) {
                check_iq_stage(&s, 1, 8, &r);
                check_iq_stage(&s, 8, 8, &r);
            }
        }
        expert_set_free(&s);
    }

    test_oai(&r);
    st_threadpool_free(g_tp);
    return test_report();
}

#else /* !STRATA_HAVE_CUDA */

int main(void) {
    SKIP("built without CUDA (nvcc not found at build time or CUDA=0)");
    return test_report();
}

#endif
