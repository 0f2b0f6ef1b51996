/* cuda_moe_cases.h - what the GPU MoE tests (test_cuda_moe.c, test_cuda_moe_lowbit.c) share:
 * random blocks of every type scaled so that a row dotted with uniform inputs is O(1), the
 * comparisons (NMSE, max error, NaN, unwritten outputs, guard words), the scored routing rules'
 * checks (st_cuda_moe_route_cfg against st_route_scored, the one-token router with a scored rule
 * against the GEMV + route), and the expert cases: a set of materialized experts on host and
 * device, the GPU FFN (three runs and the one-token forms), the CPU's FFN, the exact FFN in double,
 * and check_ffn with its one-line report. Header-only, static functions (each program uses every
 * one); include it from one source file per test program, in CUDA builds only. g_tp, the CPU
 * FFN's pool, is each program's: its main creates it (cases_pool_create). */
#ifndef STRATA_TEST_CUDA_MOE_CASES_H
#define STRATA_TEST_CUDA_MOE_CASES_H

#include "strata.h"
#include "strata_quant.h"
#include "block_fields.h"
#include "test.h"

#include "cuda_backend.h"
#include "cuda_mmq.h"
#include "cuda_moe.h"
#include "cuda_mmv.h"
#include "cuda_ops.h"
#include "ops.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GUARD 64
#define SENTINEL 0xA5A5A5A5u

static st_threadpool *g_tp;

/* g_tp over the host's cores (16 at most) for the CPU references; 0 (a failed check) if not made. */
static int cases_pool_create(void) {
    const long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    const strata_status st = st_threadpool_create(nproc < 1 ? 1 : (nproc > 16 ? 16 : (int)nproc), &g_tp);
    CHECK(st == STRATA_OK, "threadpool: %s", strata_last_error());
    return st == STRATA_OK;
}

/* ---- random data ----------------------------------------------------------------------------- */

static void fill_bytes(uint8_t *p, size_t n, test_rng *r) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const unsigned long long v = test_rng_next(r);
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++) p[i] = (uint8_t)test_rng_next(r);
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

/* ---- router: the scored rules ---------------------------------------------------------------- */

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

/* Says where run `what` differs from the first (paired int8) run: how many of the n floats, the
 * first index and the largest difference (a kernel that disagrees everywhere, or in a few rows). */
static void runs_differ(const char *what, const float *a, const float *b, int64_t n) {
    int64_t cnt = 0, first = -1;
    double mx = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(a + i, b + i, sizeof(float)) == 0) continue;
        if (first < 0) first = i;
        cnt++;
        const double d = fabs((double)a[i] - (double)b[i]);
        if (d > mx || d != d) mx = d;
    }
    printf("  %s differ from the paired int8 run at %lld of %lld floats (first %lld), max |diff| %.3g\n",
           what, (long long)cnt, (long long)n, (long long)first, mx);
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
        if (run >= 1 && st == STRATA_OK) { /* got2 is compared after each later run too */
            const int eq = memcmp(got, got2, sizeof(float) * (size_t)(n + GUARD)) == 0;
            *same = (run == 1 || *same) && eq;
            if (!eq) runs_differ(run == 1 ? "fused GLU tiles" : "f16 tiles", got, got2, n + GUARD);
        }
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
 * quantized experts the bound applies to the nearer of the two oracles when the exact FFN is given:
 * the CPU path carries its own activation rounding (coarser for K-quants), and on a narrow row a
 * GPU kernel that rounds its activations as the CPU does can sit as far from the exact FFN as the
 * CPU itself (Q4_1 at n_embd 96, T = 1: 1.1e-3 and 1.3e-3) while 3e-5 from the CPU. */
typedef struct { double gpu, cpu; } exact_nmse;

static void report(const char *name, const expert_set *s, int64_t T, int32_t k, cmp_result c,
                   int same, double tol, double secs, exact_nmse ex) {
    const int by_exact = ex.gpu >= 0 && ex.gpu < c.nmse;
    const double judged = by_exact ? ex.gpu : c.nmse;
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
          strata_type_name(s->td), (long long)T, judged, tol, by_exact ? "vs exact" : "vs CPU");
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

#endif /* STRATA_TEST_CUDA_MOE_CASES_H */
