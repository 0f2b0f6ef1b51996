/* bench_tiles.c - the CPU kernels for several activation rows per weight row (prompt batches,
 * grouped experts): the several-row AVX-512 kernel (st_vec_dot_n_get: 4 rows per pass over a
 * weight row; for Q8_0 the prepared-row kernel, the activation rows prepared inside the timed call,
 * or without it the single-row kernel per activation row) against the AMX
 * tiles (st_vec_dot_tile_get: 16 weight rows x all activation rows), on one thread, for an expert-shaped matrix (default 768 rows of 2048 Q4_K weights: qwen3's
 * gate) and activation-row counts 1..256. Both give the same bits (checked here on every run).
 * Prints a table of billions of multiply-adds per second and the ratio; writes JSON.
 *
 *   bench_tiles [--rows N] [--n N] [--type q4_K|q5_K|q6_K|q8_0|q4_0|mxfp4|iq1_m]
 *               [--isa scalar|avx2|avx512] [--single] [--time S] [--json PATH]
 *
 * --isa: that level's own kernels (st_vec_dot_at, st_vec_dot_n_at), even where the dispatch
 * resolves the type to a lower level's (AVX2 has several-row kernels for Q4_0, the K-quants, the
 * IQ2 / IQ1 types and MXFP4, no tiles); without it, the kernels the dispatch hands out;
 * --single: the single-row kernel once per activation row instead of the several-row one. Without
 * AMX (or below the AVX-512 level) only the first kernel is timed. Built by `make bench`. */
#include "bench_util.h"
#include "dot.h"
#include "quant.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>


typedef struct {
    int64_t n, rows, nc;
    const unsigned char *w;
    size_t rb;
    const unsigned char *x;
    size_t xb;
    float *out;
    st_q8_0_prep_fn prep; /* Q8_0: the prepared-row kernel (dot.h), or NULL */
    st_q8_0_dotp_fn dotp;
    unsigned char *pbuf;  /* nc prepared rows of st_q8_0_prep_bytes(n) */
} job;

/* Q8_0 as a prompt matmul runs it: the activation rows prepared once, then 4 at a time. */
static void run_dotp(const job *j) {
    const size_t pb = st_q8_0_prep_bytes(j->n);
    st_q8_0_prep_rows(j->prep, j->x, j->xb, NULL, j->n, j->pbuf, 0, j->nc);
    for (int64_t r = 0; r < j->rows; r++)
        for (int64_t c = 0; c < j->nc; c += ST_DOT_MAX_COLS) {
            const int nc = (int)(j->nc - c < ST_DOT_MAX_COLS ? j->nc - c : ST_DOT_MAX_COLS);
            float o[ST_DOT_MAX_COLS];
            j->dotp(j->n, o, j->w + (size_t)r * j->rb, st_q8_0_prep_xu(j->pbuf, j->n, c), pb,
                    st_q8_0_prep_dxp(j->pbuf, j->n, c), pb / sizeof(float), nc);
            for (int k = 0; k < nc; k++) j->out[(c + k) * j->rows + r] = o[k];
        }
}

static void run_dotn(const job *j, st_vec_dot_n_fn dn, st_vec_dot_fn d1) {
    for (int64_t r = 0; r < j->rows; r++) {
        int64_t c = 0;
        float o[ST_DOT_MAX_COLS];
        for (; dn && c + 1 < j->nc; c += ST_DOT_MAX_COLS) {
            const int nc = (int)(j->nc - c < ST_DOT_MAX_COLS ? j->nc - c : ST_DOT_MAX_COLS);
            dn(j->n, o, j->w + (size_t)r * j->rb, j->x + (size_t)c * j->xb, j->xb, nc);
            for (int k = 0; k < nc; k++) j->out[(c + k) * j->rows + r] = o[k];
        }
        for (; c < j->nc; c++) d1(j->n, &j->out[c * j->rows + r], j->w + (size_t)r * j->rb, j->x + (size_t)c * j->xb);
    }
}

static void run_tile(const job *j, st_vec_dot_tile_fn t) {
    for (int64_t r = 0; r < j->rows; r += ST_TILE_ROWS) {
        const int nr = (int)(j->rows - r < ST_TILE_ROWS ? j->rows - r : ST_TILE_ROWS);
        t(j->n, j->out + r, (size_t)j->rows, j->w + (size_t)r * j->rb, j->rb, nr, j->x, j->xb, j->nc);
    }
}

/* Seconds per call (best of enough calls to fill target_s). */
static double time_it(const job *j, st_vec_dot_n_fn dn, st_vec_dot_fn d1, st_vec_dot_tile_fn t, double target_s) {
    double best = 1e30, spent = 0;
    int calls = 0;
    while (spent < target_s || calls < 3) {
        const double t0 = now_s();
        if (t) run_tile(j, t);
        else if (j->dotp) run_dotp(j);
        else run_dotn(j, dn, d1);
        const double dt = now_s() - t0;
        best = dt < best ? dt : best;
        spent += dt;
        calls++;
    }
    return best;
}

int main(int argc, char **argv) {
    rng_state = 0x2545f4914f6cdd1dULL;
    int64_t rows = 768, n = 2048;
    double target_s = 0.3;
    strata_type type = STRATA_TYPE_Q4_K;
    int single = 0, level = -1;
    const char *json_path = "bench/results/bench_tiles.json";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--rows") && v) rows = atoll(v), i++;
        else if (!strcmp(a, "--n") && v) n = atoll(v), i++;
        else if (!strcmp(a, "--time") && v) target_s = atof(v), i++;
        else if (!strcmp(a, "--json") && v) json_path = v, i++;
        else if (!strcmp(a, "--single")) single = 1;
        else if (!strcmp(a, "--isa") && v) {
            const strata_cpu_isa l = !strcasecmp(v, "scalar") ? STRATA_ISA_SCALAR
                                     : !strcasecmp(v, "avx2") ? STRATA_ISA_AVX2
                                     : !strcasecmp(v, "avx512") ? STRATA_ISA_AVX512
                                                                : (strata_cpu_isa)-1;
            if ((int)l < 0) {
                fprintf(stderr, "bench_tiles: --isa scalar, avx2 or avx512, not '%s'\n", v);
                return 2;
            }
            if (strata_cpu_isa_set(l) != STRATA_OK) {
                fprintf(stderr, "bench_tiles: %s\n", strata_last_error());
                return 2;
            }
            level = (int)l;
            i++;
        }
        else if (!strcmp(a, "--type") && v) {
            type = !strcasecmp(v, "q5_K")   ? STRATA_TYPE_Q5_K
                   : !strcasecmp(v, "q6_K") ? STRATA_TYPE_Q6_K
                   : !strcasecmp(v, "q8_0") ? STRATA_TYPE_Q8_0
                   : !strcasecmp(v, "q4_0") ? STRATA_TYPE_Q4_0
                   : !strcasecmp(v, "mxfp4") ? STRATA_TYPE_MXFP4
                   : !strcasecmp(v, "iq1_m") ? STRATA_TYPE_IQ1_M
                                            : STRATA_TYPE_Q4_K;
            i++;
        } else {
            fprintf(stderr, "usage: %s [--rows N] [--n N] [--type q4_K|q5_K|q6_K|q8_0|q4_0|mxfp4|iq1_m] [--isa scalar|avx2|avx512] "
                            "[--single] [--time S] [--json PATH]\n", argv[0]);
            return 2;
        }
    }
    const int64_t bsz = strata_type_block_size(type); /* 32 for Q8_0, Q4_0, MXFP4; 256 for the others */
    if (rows < 1 || n < bsz || n % bsz) { /* whole blocks of the weights (and so of the activations) */
        fprintf(stderr, "bench_tiles: --rows >= 1, --n a multiple of %lld\n", (long long)bsz);
        return 2;
    }
    /* NULL for Q8_0: prepared rows, or the single-row kernel */
    const st_vec_dot_n_fn dn = single     ? NULL
                               : level >= 0 ? st_vec_dot_n_at(type, (strata_cpu_isa)level)
                                            : st_vec_dot_n_get(type);
    st_q8_0_prep_fn prep = NULL;
    st_q8_0_dotp_fn dotp = NULL;
    if (type == STRATA_TYPE_Q8_0 && (single || !st_q8_0_prepared_get(&prep, &dotp))) prep = NULL, dotp = NULL;
    const st_vec_dot_fn d1 = level >= 0 ? st_vec_dot_at(type, (strata_cpu_isa)level) : st_vec_dot_get(type);
    /* the tiles give the AVX-512 single-row kernel's bits: only against that */
    const st_vec_dot_tile_fn tile = d1 == st_vec_dot_get(type) ? st_vec_dot_tile_get(type) : NULL;
    if (!d1) {
        fprintf(stderr, "bench_tiles: no kernel for %s\n", strata_type_name(type));
        return 1;
    }
    static const int64_t ncs[] = {1, 4, 8, 16, 32, 64, 128, 256};
    const int64_t max_nc = 256;
    const strata_type at = strata_act_type(type);
    const size_t rb = (size_t)strata_row_bytes(type, n), xb = (size_t)strata_row_bytes(at, n);
    unsigned char *w = malloc(rb * (size_t)rows), *x = malloc(xb * (size_t)max_nc);
    float *f = malloc(sizeof(float) * (size_t)n), *o1 = malloc(sizeof(float) * (size_t)(rows * max_nc)),
          *o2 = malloc(sizeof(float) * (size_t)(rows * max_nc));
    unsigned char *pbuf = malloc(st_q8_0_prep_bytes(n) * (size_t)max_nc);
    if (!w || !x || !f || !o1 || !o2 || !pbuf) {
        fprintf(stderr, "bench_tiles: out of memory\n");
        return 1;
    }
    fill_q_rows(type, w, rb * (size_t)rows);
    for (int64_t c = 0; c < max_nc; c++) {
        for (int64_t i = 0; i < n; i++) f[i] = rng_float();
        if (at == STRATA_TYPE_Q8_0) st_quantize_row_q8_0(f, (block_q8_0 *)(x + (size_t)c * xb), n);
        else st_quantize_row_q8_K(f, (block_q8_K *)(x + (size_t)c * xb), n);
    }
    printf("# bench_tiles: %s, %lld rows of %lld weights (%.2f MB), one thread, %s level, AMX %s\n\n",
           strata_type_name(type), (long long)rows, (long long)n, (double)(rb * (size_t)rows) / 1e6,
           strata_cpu_isa_name(strata_cpu_isa_active()), tile ? "on" : "not available");
    printf("| activation rows | %s GMAC/s | AMX tiles GMAC/s | tiles / several-row | same bits |\n|---:|---:|---:|---:|---|\n",
           dn ? "several-row" : dotp ? "prepared-row" : "single-row");
    FILE *jf = fopen(json_path, "w");
    if (jf) fprintf(jf, "{\"type\": \"%s\", \"rows\": %lld, \"n\": %lld, \"amx\": %d, \"results\": [", strata_type_name(type),
                    (long long)rows, (long long)n, tile != NULL);
    for (size_t k = 0; k < sizeof ncs / sizeof ncs[0]; k++) {
        job j = {n, rows, ncs[k], w, rb, x, xb, o1, prep, dotp, pbuf};
        const double macs = (double)rows * (double)n * (double)ncs[k];
        const double ta = time_it(&j, dn, d1, NULL, target_s);
        double tb = 0;
        int same = -1;
        if (tile) {
            job j2 = j;
            j2.out = o2;
            tb = time_it(&j2, dn, d1, tile, target_s);
            same = !memcmp(o1, o2, sizeof(float) * (size_t)(rows * ncs[k]));
        }
        if (tile)
            printf("| %lld | %.1f | %.1f | %.2fx | %s |\n", (long long)ncs[k], macs / ta / 1e9, macs / tb / 1e9, ta / tb,
                   same ? "yes" : "NO");
        else
            printf("| %lld | %.1f | - | - | - |\n", (long long)ncs[k], macs / ta / 1e9);
        if (jf)
            fprintf(jf, "%s{\"activation_rows\": %lld, \"several_row_gmacs\": %.3f, \"tiles_gmacs\": %.3f, \"same_bits\": %d}",
                    k ? ", " : "", (long long)ncs[k], macs / ta / 1e9, tile ? macs / tb / 1e9 : 0.0, same);
    }
    if (jf) {
        fprintf(jf, "]}\n");
        fclose(jf);
        printf("\nwrote %s\n", json_path);
    }
    free(w), free(x), free(f), free(o1), free(o2), free(pbuf);
    return 0;
}
