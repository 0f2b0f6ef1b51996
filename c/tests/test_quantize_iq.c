/* test_quantize_iq.c - the low-bit weight quantizers (quantize_k.c, quantize_iq.c,
 * quantize_iq1.c) and the IQ grid search structures (quantize_iq_grid.c): the grids' maps
 * agree with the tables they were built from, every neighbour list is sorted by distance and
 * points at real grid entries; first use from several threads at once gives the same bytes as a
 * single thread; zero and tiny rows stay finite; and the types Strata already dequantizes round
 * trip within an error bound. The oracle against gguf's dequantizers (the layouts) is
 * python/tests/test_quantize_iq.py. */
#include "quant.h"
#include "test.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define N_ROW 1024
#define N_THREADS 4

static const strata_type types[] = {
    STRATA_TYPE_Q2_K, STRATA_TYPE_Q3_K, STRATA_TYPE_Q5_K, STRATA_TYPE_MXFP4, STRATA_TYPE_IQ4_NL,
    STRATA_TYPE_IQ4_XS, STRATA_TYPE_IQ2_XXS, STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ2_S,
    STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ3_S, STRATA_TYPE_IQ1_S, STRATA_TYPE_IQ1_M,
};
#define N_TYPES (sizeof types / sizeof types[0])

static float row[N_ROW];

static void fill_row(void) {
    test_rng r = {12345};
    for (int i = 0; i < N_ROW; i++) {
        /* sum of uniforms: roughly gaussian, with a few large values */
        float s = 0;
        for (int k = 0; k < 4; k++) s += test_rng_float(&r);
        row[i] = s * (i % 97 == 0 ? 4.0f : 1.0f);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Grids
 * ------------------------------------------------------------------------------------------- */

static void test_grids(void) {
    for (int w = 0; w < ST_IQ_GRID_COUNT; w++) {
        const st_iq_grid *g = st_iq_grid_get(w);
        CHECK(g != NULL, "grid %d built", w);
        if (!g) continue;
        const int map_size = 1 << (g->bits * g->n_elem), lmask = (1 << g->bits) - 1;
        int n_on = 0, bad_map = 0, bad_list = 0, n_lists = 0;
        for (int u = 0; u < map_size; u++) {
            const int32_t m = g->map[u];
            if (m >= 0) { /* the point's levels are u's */
                n_on++;
                for (int e = 0; e < g->n_elem; e++)
                    bad_map += g->grid[m * g->n_elem + e] != 2 * ((u >> (g->bits * e)) & lmask) + 1;
                continue;
            }
            int queryable = 1;
            for (int e = 0; e < g->n_elem; e++)
                queryable &= ((u >> (g->bits * e)) & lmask) <= (g->bits == 2 ? 2 : 7);
            if (!queryable) continue;
            n_lists++;
            const uint16_t *nb = g->neighbours - m - 1;
            int prev_d = -1, prev_j = -1;
            bad_list += nb[0] == 0;
            for (int j = 1; j <= nb[0]; j++) {
                if (nb[j] >= g->n_grid) { bad_list++; break; }
                int d2 = 0;
                for (int e = 0; e < g->n_elem; e++) {
                    const int d = g->grid[nb[j] * g->n_elem + e] - (2 * ((u >> (g->bits * e)) & lmask) + 1);
                    d2 += d * d;
                }
                bad_list += d2 < prev_d || (d2 == prev_d && nb[j] <= prev_j);
                prev_d = d2;
                prev_j = nb[j];
            }
        }
        CHECK(n_on == g->n_grid, "grid %d: %d points on the map, want %d", w, n_on, g->n_grid);
        CHECK(bad_map == 0, "grid %d: %d map entries disagree with the table", w, bad_map);
        CHECK(bad_list == 0 && n_lists > 0, "grid %d: %d bad neighbour lists of %d", w, bad_list, n_lists);
        CHECK(st_iq_grid_get(w) == g, "grid %d: built once", w);
    }
    CHECK(st_iq_grid_get(-1) == NULL && st_iq_grid_get(ST_IQ_GRID_COUNT) == NULL, "bad grid ids");
}

/* ---------------------------------------------------------------------------------------------
 * Threads: the first use of every grid races
 * ------------------------------------------------------------------------------------------- */

typedef struct { uint8_t *out[N_TYPES]; int ok; } th_job;

static void *quantize_all(void *arg) {
    th_job *job = arg;
    job->ok = 1;
    for (size_t t = 0; t < N_TYPES; t++)
        job->ok &= strata_quantize_row(types[t], row, job->out[t], N_ROW) == STRATA_OK;
    return NULL;
}

static void test_threads(th_job *jobs) {
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) pthread_create(&th[i], NULL, quantize_all, &jobs[i]);
    for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
    for (size_t t = 0; t < N_TYPES; t++) {
        const size_t nb = (size_t)strata_row_bytes(types[t], N_ROW);
        int same = 1;
        for (int i = 1; i < N_THREADS; i++) same &= memcmp(jobs[0].out[t], jobs[i].out[t], nb) == 0;
        CHECK(jobs[0].ok && same, "%s: threads agree", strata_type_name(types[t]));
    }
}

/* ---------------------------------------------------------------------------------------------
 * Round trips (the types dequant.c has) and degenerate rows
 * ------------------------------------------------------------------------------------------- */

static void test_round_trips(th_job *job) {
    /* relative RMS error bounds, looser than the gaussian rows' in test_quantize_iq.py */
    static const struct { strata_type t; float bound; } rt[] = {
        {STRATA_TYPE_Q2_K, 0.40f}, {STRATA_TYPE_Q3_K, 0.22f}, {STRATA_TYPE_Q5_K, 0.06f},
        {STRATA_TYPE_IQ4_NL, 0.11f}, {STRATA_TYPE_IQ4_XS, 0.11f}, {STRATA_TYPE_IQ3_XXS, 0.30f},
        {STRATA_TYPE_IQ3_S, 0.25f},
    };
    float back[N_ROW];
    double sx2 = 0;
    for (int i = 0; i < N_ROW; i++) sx2 += (double)row[i] * row[i];
    for (size_t k = 0; k < ST_ARRAY_LEN(rt); k++) {
        size_t t = 0;
        while (types[t] != rt[k].t) t++;
        if (!strata_type_can_dequantize(rt[k].t)) continue;
        CHECK(strata_dequantize_row(rt[k].t, job->out[t], back, N_ROW) == STRATA_OK, "dequantize");
        double se = 0;
        for (int i = 0; i < N_ROW; i++) se += ((double)back[i] - row[i]) * ((double)back[i] - row[i]);
        const double rel = sqrt(se / sx2);
        CHECK(rel < rt[k].bound, "%s: relative rms %.4f >= %.2f", strata_type_name(rt[k].t), rel,
              (double)rt[k].bound);
    }
}

static void test_degenerate(void) {
    static float zero[N_ROW], tiny[N_ROW];
    for (int i = 0; i < N_ROW; i++) tiny[i] = (i % 3 ? 1e-30f : -1e-30f) * (float)(i % 7);
    uint8_t out[N_ROW * 2];
    float back[N_ROW];
    for (size_t t = 0; t < N_TYPES; t++) {
        const float *src[2] = {zero, tiny};
        for (int s = 0; s < 2; s++) {
            CHECK(strata_quantize_row(types[t], src[s], out, N_ROW) == STRATA_OK, "quantize");
            if (!strata_type_can_dequantize(types[t])) continue;
            strata_dequantize_row(types[t], out, back, N_ROW);
            int finite = 1;
            for (int i = 0; i < N_ROW; i++) finite &= isfinite(back[i]) && fabsf(back[i]) < 1e-20f;
            CHECK(finite, "%s: %s row dequantizes to ~0", strata_type_name(types[t]), s ? "tiny" : "zero");
        }
    }
}

int main(void) {
    fill_row();
    th_job jobs[N_THREADS];
    for (int i = 0; i < N_THREADS; i++)
        for (size_t t = 0; t < N_TYPES; t++)
            jobs[i].out[t] = malloc((size_t)strata_row_bytes(types[t], N_ROW));
    test_threads(jobs); /* first: the grids are built here, from several threads */
    test_grids();
    test_round_trips(&jobs[0]);
    test_degenerate();
    for (int i = 0; i < N_THREADS; i++)
        for (size_t t = 0; t < N_TYPES; t++) free(jobs[i].out[t]);
    return test_report();
}
