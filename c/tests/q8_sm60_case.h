/* q8_sm60_case.h - one case of the SM60 Q8_0 decode GEMV (c/cuda/q8_sm60.cu, reached through
 * st_cuda_mmv_pre / st_cuda_mmv_swiglu for a matrix marked gemv_sm60 with its packed copy) against a
 * double-precision CPU reference, and its timing. Shared by c/tests/test_cuda_mmv.c and
 * tools/q8_sm60_check.cu (C and C++; header-only, static functions).
 *
 * A case: a random Q8_0 matrix (random quant bytes, fp16 scales of magnitude 2^-8..2^-6 with random
 * signs; fused: a second one, the up matrix) of ne1 rows x ne0, x random in [-1, 1) for ncols
 * columns, quantized to Q8_1 on the device (st_cuda_quantize_q8_1, the bits the GEMV reads), copied
 * back. Reference per (row, column): the sum over blocks of fp16(d_w) * fp16(d_x) * (the exact
 * int32 sum of the 32 quant products), in double; fused: silu(gate) * up in double. Error: per
 * column, max over the compared rows of |gpu - ref| / max |ref| (rows: every stride-th and the
 * last, at most ~6e6 weights x columns compared); the case's error is the largest. Also: the
 * kernel choice (st_cuda_mmv_q8_sm60), no output left unwritten (sentinel), guard words after y.
 * Needs cuda_backend.h, cuda_mmq.h, cuda_mmv.h and common.h (st_f32_to_fp16, st_fp16_to_f32). */
#ifndef STRATA_TESTS_Q8_SM60_CASE_H
#define STRATA_TESTS_Q8_SM60_CASE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The cases' persistent blocks per SM (st_cuda_mat.gemv_sm60); q8_sm60_check's BPS argument. */
static int q8s_case_bps = 4;

#define Q8S_GUARD 64
#define Q8S_SENTINEL 0xA5A5A5A5u

typedef struct {
    double max_rel;   /* the case's error (see above) */
    int taken;        /* st_cuda_mmv_q8_sm60 said the SM60 kernel takes it */
    int unwritten;    /* outputs still holding the sentinel */
    int guard_bad;    /* guard words after y changed */
    int usual_diff;   /* declined calls: outputs whose bits differ from the unmarked matrix's */
    double us;        /* time per call (microseconds), when timed */
    double gbs;       /* weight + activation bytes per call / time, when timed */
    double us_usual;  /* the same call on the unmarked matrices (the usual kernels), when timed */
    strata_status st; /* setup or call failure, else STRATA_OK */
} q8s_result;

static uint64_t q8s_rng(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* A random Q8_0 matrix, rows of ne0 / 32 blocks of 34 bytes. */
static void q8s_fill(uint8_t *w, int64_t ne0, int64_t ne1, uint64_t *s) {
    const size_t n = (size_t)ne1 * (size_t)(ne0 / 32);
    for (size_t b = 0; b < n; b++) {
        uint8_t *p = w + 34 * b;
        for (int i = 0; i < 32; i += 8) {
            const uint64_t v = q8s_rng(s);
            memcpy(p + 2 + i, &v, 8);
        }
        const uint64_t v = q8s_rng(s);
        const float mag = ldexpf(1.0f + (float)(v & 0xFF) / 256.0f, -8 + (int)((v >> 8) % 2));
        const uint16_t h = st_f32_to_fp16((v >> 16) & 1 ? -mag : mag);
        p[0] = (uint8_t)h;
        p[1] = (uint8_t)(h >> 8);
    }
}

/* Row r of W against column c of the Q8_1 activations xq (36-byte blocks), in double. */
static double q8s_ref_dot(const uint8_t *w, int64_t ne0, int64_t r, const uint8_t *xq, int c) {
    const int64_t nb = ne0 / 32;
    double acc = 0.0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = w + 34 * (size_t)(r * nb + b), *xb = xq + 36 * (size_t)(c * nb + b);
        int32_t isum = 0;
        for (int i = 0; i < 32; i++) isum += (int32_t)(int8_t)wb[2 + i] * (int32_t)(int8_t)xb[4 + i];
        const double dw = st_fp16_to_f32((uint16_t)(wb[0] | wb[1] << 8));
        const double dx = st_fp16_to_f32((uint16_t)(xb[0] | xb[1] << 8));
        acc += dw * dx * (double)isum;
    }
    return acc;
}

static double q8s_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Device buffers of a case. */
typedef struct {
    void *w[2], *t[2], *x, *xq, *y, *scratch;
} q8s_dev;

static void q8s_dev_free(q8s_dev *d) {
    for (int i = 0; i < 2; i++) {
        (void)st_cuda_free(d->w[i]);
        (void)st_cuda_free(d->t[i]);
    }
    (void)st_cuda_free(d->x);
    (void)st_cuda_free(d->xq);
    (void)st_cuda_free(d->y);
    (void)st_cuda_free(d->scratch);
}

/* Uploads the matrices (and makes their packed copies), x, and quantizes x on the device. */
static strata_status q8s_setup(q8s_dev *d, st_cuda_mat W[2], uint8_t *const w[2], int nm, int64_t ne0,
                               int64_t ne1, const float *x, int ncols) {
    const size_t rb = (size_t)(ne0 / 32) * 34, ny = (size_t)ncols * (size_t)ne1 + Q8S_GUARD;
    strata_status st = STRATA_OK;
    for (int i = 0; i < nm && st == STRATA_OK; i++) {
        memset(&W[i], 0, sizeof W[i]);
        W[i].type = STRATA_TYPE_Q8_0;
        W[i].ne0 = ne0;
        W[i].ne1 = ne1;
        W[i].row_bytes = rb;
        st = st_cuda_malloc(&d->w[i], rb * (size_t)ne1);
        if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d->w[i], w[i], rb * (size_t)ne1);
        W[i].data = d->w[i];
        if (st == STRATA_OK) st = st_cuda_malloc(&d->t[i], st_cuda_mmq_tiles_bytes(&W[i]));
        if (st == STRATA_OK) st = st_cuda_mmq_tiles_make(&W[i], d->t[i], NULL);
        W[i].tiles = d->t[i];
        W[i].gemv_sm60 = q8s_case_bps;
    }
    if (st == STRATA_OK) st = st_cuda_malloc(&d->x, sizeof(float) * (size_t)ncols * (size_t)ne0);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d->x, x, sizeof(float) * (size_t)ncols * (size_t)ne0);
    if (st == STRATA_OK) st = st_cuda_malloc(&d->xq, st_cuda_mmv_scratch_bytes(ne0, ncols));
    if (st == STRATA_OK) st = st_cuda_malloc(&d->scratch, st_cuda_mmv_scratch_bytes(ne0, ncols));
    if (st == STRATA_OK) st = st_cuda_malloc(&d->y, 4 * ny);
    if (st == STRATA_OK) st = st_cuda_quantize_q8_1((const float *)d->x, d->xq, (int64_t)ncols * ne0, NULL);
    return st;
}

/* One call of the case's entry point. */
static strata_status q8s_call(const q8s_dev *d, const st_cuda_mat W[2], int fused, int ncols) {
    if (fused)
        return st_cuda_mmv_swiglu(&W[0], &W[1], (const float *)d->x, ncols, (float *)d->y, d->scratch, NULL);
    return st_cuda_mmv_pre(&W[0], (const float *)d->x, d->xq, ncols, (float *)d->y, d->scratch, NULL);
}

/* Compares y with the reference over every stride-th row and the last. */
static void q8s_compare(q8s_result *res, const uint32_t *yb, uint8_t *const w[2], int fused, int64_t ne0,
                        int64_t ne1, const uint8_t *xq, int ncols) {
    for (size_t i = 0; i < (size_t)ncols * (size_t)ne1; i++) res->unwritten += yb[i] == Q8S_SENTINEL;
    for (int g = 0; g < Q8S_GUARD; g++) res->guard_bad += yb[(size_t)ncols * (size_t)ne1 + g] != Q8S_SENTINEL;
    const double work = (double)ne0 * (double)ne1 * ncols * (fused ? 2 : 1);
    int64_t stride = (int64_t)ceil(work / 6e6);
    if (stride < 1) stride = 1;
    for (int c = 0; c < ncols; c++) {
        double emax = 0.0, rmax = 0.0;
        for (int64_t r = 0;; r += stride) {
            if (r >= ne1) r = ne1 - 1; /* the last row always */
            double ref = q8s_ref_dot(w[0], ne0, r, xq, c);
            if (fused) ref = ref / (1.0 + exp(-ref)) * q8s_ref_dot(w[1], ne0, r, xq, c);
            float got;
            memcpy(&got, &yb[(size_t)c * (size_t)ne1 + (size_t)r], 4);
            const double e = isfinite(got) ? fabs((double)got - ref) : INFINITY;
            if (e > emax) emax = e;
            if (fabs(ref) > rmax) rmax = fabs(ref);
            if (r == ne1 - 1) break;
        }
        const double rel = emax / (rmax > 0.0 ? rmax : 1.0);
        if (rel > res->max_rel) res->max_rel = rel;
    }
}

/* Seconds per call over iters calls (after one warm-up), 0 on a failure (in *st). */
static double q8s_seconds(const q8s_dev *d, const st_cuda_mat W[2], int fused, int ncols, int iters,
                          strata_status *st) {
    *st = q8s_call(d, W, fused, ncols);
    if (*st == STRATA_OK) *st = st_cuda_synchronize();
    const double t0 = q8s_now();
    for (int i = 0; i < iters && *st == STRATA_OK; i++) *st = q8s_call(d, W, fused, ncols);
    if (*st == STRATA_OK) *st = st_cuda_synchronize();
    return *st == STRATA_OK ? (q8s_now() - t0) / iters : 0.0;
}

/* Times the case, and the usual kernels on the same matrices; bytes moved: the packed weights,
 * the activations and y. */
static void q8s_time(q8s_result *res, const q8s_dev *d, const st_cuda_mat W[2], int fused, int ncols, int iters) {
    if (iters <= 0 || res->st != STRATA_OK) return;
    const double s = q8s_seconds(d, W, fused, ncols, iters, &res->st);
    if (res->st != STRATA_OK) return;
    const double bytes = (fused ? 2.0 : 1.0) * (double)st_cuda_mmq_tiles_bytes(&W[0]) +
                         (double)st_cuda_mmv_scratch_bytes(W[0].ne0, ncols) + 4.0 * (double)ncols * (double)W[0].ne1;
    res->us = 1e6 * s;
    res->gbs = bytes / s / 1e9;
    st_cuda_mat U[2] = {W[0], W[1]};
    U[0].gemv_sm60 = U[1].gemv_sm60 = 0;
    res->us_usual = 1e6 * q8s_seconds(d, U, fused, ncols, iters, &res->st);
}

/* The whole case: fused 0 (st_cuda_mmv_pre) or 1 (st_cuda_mmv_swiglu); iters > 0 also times it. */
static q8s_result q8s_run(int64_t ne0, int64_t ne1, int ncols, int fused, uint64_t seed, int iters) {
    q8s_result res;
    memset(&res, 0, sizeof res);
    const int nm = fused ? 2 : 1;
    const size_t rb = (size_t)(ne0 / 32) * 34, ny = (size_t)ncols * (size_t)ne1 + Q8S_GUARD;
    uint8_t *w[2] = {NULL, NULL};
    for (int i = 0; i < nm; i++) w[i] = (uint8_t *)malloc(rb * (size_t)ne1);
    float *x = (float *)malloc(sizeof(float) * (size_t)ncols * (size_t)ne0);
    uint8_t *xq = (uint8_t *)malloc(st_cuda_mmv_scratch_bytes(ne0, ncols));
    uint32_t *yb = (uint32_t *)malloc(4 * ny);
    q8s_dev d;
    memset(&d, 0, sizeof d);
    st_cuda_mat W[2];
    memset(W, 0, sizeof W);
    res.st = w[0] && (!fused || w[1]) && x && xq && yb ? STRATA_OK : STRATA_ERR_NOMEM;
    if (res.st == STRATA_OK) {
        for (int i = 0; i < nm; i++) q8s_fill(w[i], ne0, ne1, &seed);
        for (size_t i = 0; i < (size_t)ncols * (size_t)ne0; i++)
            x[i] = (float)((double)(q8s_rng(&seed) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
        res.st = q8s_setup(&d, W, w, nm, ne0, ne1, x, ncols);
    }
    if (res.st == STRATA_OK) {
        res.taken = st_cuda_mmv_q8_sm60(&W[0], ncols);
        res.st = st_cuda_memset(d.y, 0xA5, 4 * ny);
    }
    if (res.st == STRATA_OK) res.st = q8s_call(&d, W, fused, ncols);
    if (res.st == STRATA_OK) res.st = st_cuda_synchronize();
    if (res.st == STRATA_OK) res.st = st_cuda_memcpy_d2h(yb, d.y, 4 * ny);
    if (res.st == STRATA_OK) res.st = st_cuda_memcpy_d2h(xq, d.xq, st_cuda_mmv_scratch_bytes(ne0, ncols));
    if (res.st == STRATA_OK) q8s_compare(&res, yb, w, fused, ne0, ne1, xq, ncols);
    if (res.st == STRATA_OK && !res.taken) { /* declined: the usual kernel, so its bits */
        st_cuda_mat U[2] = {W[0], W[1]};
        U[0].gemv_sm60 = U[1].gemv_sm60 = 0;
        uint32_t *yu = (uint32_t *)malloc(4 * ny);
        res.st = yu ? q8s_call(&d, U, fused, ncols) : STRATA_ERR_NOMEM;
        if (res.st == STRATA_OK) res.st = st_cuda_synchronize();
        if (res.st == STRATA_OK) res.st = st_cuda_memcpy_d2h(yu, d.y, 4 * ny);
        for (size_t i = 0; res.st == STRATA_OK && i < (size_t)ncols * (size_t)ne1; i++) res.usual_diff += yu[i] != yb[i];
        free(yu);
    }
    q8s_time(&res, &d, W, fused, ncols, iters);
    q8s_dev_free(&d);
    for (int i = 0; i < 2; i++) free(w[i]);
    free(x);
    free(xq);
    free(yb);
    return res;
}

#endif /* STRATA_TESTS_Q8_SM60_CASE_H */
