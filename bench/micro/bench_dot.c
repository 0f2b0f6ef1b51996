/* bench_dot.c - micro-benchmark of the CPU dot-product kernels: for each weight type and ISA
 * level, the rate (GB/s of weight bytes) at which a matrix much larger than the last-level cache
 * streams through the dot product with one activation vector (a matrix-vector product), on one
 * thread and on all online CPUs. Prints a markdown table; writes JSON.
 *
 *   bench_dot [--mib N] [--row N] [--time S] [--threads N] [--json PATH] [--types t1,t2,...]
 *
 * Defaults: 64 MiB of rows of 4096 weights, 0.25 s per measurement, all CPUs, JSON to
 * bench/results/bench_dot.json. Built and run by `make bench`; links libstrata.a for the
 * per-level kernels (st_vec_dot_at). */
#include "bench_util.h"
#include "dot.h"
#include "quant.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * Types and well-formed random matrices
 * ------------------------------------------------------------------------------------------- */

/* Weight type and the offsets of its fp16 fields within a block (kept finite: NaN/inf scales
 * are not what real files hold and could change timings). */
typedef struct {
    strata_type type;
    int nhalf;
    int half_off[2];
} bench_type;

static const bench_type bench_types[] = {
    {STRATA_TYPE_F32, 0, {0, 0}},   {STRATA_TYPE_F16, 0, {0, 0}},    {STRATA_TYPE_BF16, 0, {0, 0}},
    {STRATA_TYPE_Q8_0, 1, {0, 0}},  {STRATA_TYPE_Q4_0, 1, {0, 0}},   {STRATA_TYPE_Q4_1, 2, {0, 2}},
    {STRATA_TYPE_Q5_0, 1, {0, 0}},  {STRATA_TYPE_Q5_1, 2, {0, 2}},   {STRATA_TYPE_IQ4_NL, 1, {0, 0}},
    {STRATA_TYPE_Q2_K, 2, {80, 82}}, {STRATA_TYPE_Q3_K, 1, {108, 0}}, {STRATA_TYPE_Q4_K, 2, {0, 2}},
    {STRATA_TYPE_Q5_K, 2, {0, 2}},  {STRATA_TYPE_Q6_K, 1, {208, 0}}, {STRATA_TYPE_IQ4_XS, 1, {0, 0}},
    {STRATA_TYPE_IQ3_XXS, 1, {0, 0}}, {STRATA_TYPE_IQ3_S, 1, {0, 0}}, {STRATA_TYPE_IQ2_XXS, 1, {0, 0}},
    {STRATA_TYPE_IQ2_XS, 1, {0, 0}}, {STRATA_TYPE_IQ2_S, 1, {0, 0}},  {STRATA_TYPE_IQ1_S, 1, {0, 0}},
    {STRATA_TYPE_IQ1_M, 0, {0, 0}},  {STRATA_TYPE_MXFP4, 0, {0, 0}},
};


static void fill_matrix(const bench_type *bt, unsigned char *m, size_t bytes) {
    if (bt->type == STRATA_TYPE_F32 || bt->type == STRATA_TYPE_F16 || bt->type == STRATA_TYPE_BF16) {
        size_t es = bt->type == STRATA_TYPE_F32 ? 4 : 2;
        for (size_t i = 0; i + es <= bytes; i += es) {
            float v = rng_float();
            uint16_t h = bt->type == STRATA_TYPE_F16 ? st_f32_to_fp16(v) : st_f32_to_bf16(v);
            if (es == 4) memcpy(m + i, &v, 4);
            else memcpy(m + i, &h, 2);
        }
        return;
    }
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        uint64_t r = rng_next();
        memcpy(m + i, &r, 8);
    }
    size_t bb = (size_t)strata_type_block_bytes(bt->type);
    for (size_t b = 0; b + bb <= bytes; b += bb)
        for (int h = 0; h < bt->nhalf; h++) {
            uint16_t s = st_f32_to_fp16(0.05f * rng_float());
            memcpy(m + b + bt->half_off[h], &s, 2);
        }
    /* scales with no fixed f16 field: IQ1_M's f16 is spread over the top nibbles of its four
     * 16-bit scale words (clearing bit 14 of the last keeps it finite); MXFP4's E8M0 exponent
     * kept near 2^0 (0xFF is NaN) */
    for (size_t b = 0; b + bb <= bytes; b += bb) {
        if (bt->type == STRATA_TYPE_IQ1_M) m[b + offsetof(block_iq1_m, scales) + 7] &= 0xBF;
        if (bt->type == STRATA_TYPE_MXFP4) m[b] = (unsigned char)(120 + (m[b] & 7));
    }
}

/* ---------------------------------------------------------------------------------------------
 * Timing
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    st_vec_dot_fn fn;
    const unsigned char *mat;
    const void *act;
    int64_t row_n, row_bytes, row_begin, row_end, reps;
    float *out;
} bench_job;

static void *bench_worker(void *arg) {
    const bench_job *j = arg;
    for (int64_t r = 0; r < j->reps; r++)
        for (int64_t i = j->row_begin; i < j->row_end; i++)
            j->fn(j->row_n, &j->out[i], j->mat + i * j->row_bytes, j->act);
    return NULL;
}


/* Seconds for reps passes over all rows, split into nthreads contiguous row ranges. */
static double run_passes(bench_job base, int64_t nrows, int nthreads, int64_t reps) {
    pthread_t tid[256];
    bench_job jobs[256];
    double t0 = now_s();
    for (int t = 0; t < nthreads; t++) {
        jobs[t] = base;
        jobs[t].reps = reps;
        jobs[t].row_begin = nrows * t / nthreads;
        jobs[t].row_end = nrows * (t + 1) / nthreads;
        if (t > 0 && pthread_create(&tid[t], NULL, bench_worker, &jobs[t]) != 0) {
            fprintf(stderr, "bench_dot: pthread_create failed\n");
            exit(1);
        }
    }
    bench_worker(&jobs[0]);
    for (int t = 1; t < nthreads; t++) pthread_join(tid[t], NULL);
    return now_s() - t0;
}

/* GB/s of weight bytes: one calibration pass, then enough passes to fill target_s. */
static double measure(bench_job base, int64_t nrows, int nthreads, double target_s) {
    double one = run_passes(base, nrows, nthreads, 1);
    int64_t reps = one > 0 ? (int64_t)(target_s / one) : 1;
    if (reps < 1) return (double)(nrows * base.row_bytes) / one / 1e9;
    double t = run_passes(base, nrows, nthreads, reps);
    return (double)(reps * nrows * base.row_bytes) / t / 1e9;
}

/* ---------------------------------------------------------------------------------------------
 * Main
 * ------------------------------------------------------------------------------------------- */

static void cpu_model(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *p = strchr(line, ':');
        if (!p) break;
        p++;
        while (*p == ' ') p++;
        p[strcspn(p, "\n")] = 0;
        snprintf(buf, cap, "%s", p);
        break;
    }
    fclose(f);
}

static int type_selected(const char *list, strata_type t) {
    if (!list) return 1;
    const char *name = strata_type_name(t);
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        size_t l = strcspn(p, ",");
        if (l == len && strncasecmp(p, name, len) == 0) return 1;
        p += l;
        if (*p == ',') p++;
    }
    return 0;
}

#define MAX_RESULTS 256
typedef struct { strata_type type; int isa, threads; double gbps, gw; } bench_result;

int main(int argc, char **argv) {
    rng_state = 0x243f6a8885a308d3ULL;
    double mib = 64, target_s = 0.25;
    int64_t row_n = 4096;
    int nthreads_all = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *json_path = NULL, *types = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--mib") && v) mib = atof(v), i++;
        else if (!strcmp(a, "--row") && v) row_n = atoll(v), i++;
        else if (!strcmp(a, "--time") && v) target_s = atof(v), i++;
        else if (!strcmp(a, "--threads") && v) nthreads_all = atoi(v), i++;
        else if (!strcmp(a, "--json") && v) json_path = v, i++;
        else if (!strcmp(a, "--types") && v) types = v, i++;
        else {
            fprintf(stderr, "usage: %s [--mib N] [--row N] [--time S] [--threads N] [--json PATH] [--types t1,t2]\n", argv[0]);
            return 2;
        }
    }
    if (nthreads_all < 1) nthreads_all = 1;
    if (nthreads_all > 256) nthreads_all = 256;
    if (row_n <= 0 || row_n % 256 != 0) {
        fprintf(stderr, "bench_dot: --row must be a positive multiple of 256\n");
        return 2;
    }

    char model[256];
    cpu_model(model, sizeof model);
    strata_cpu_isa best = strata_cpu_isa_supported();
    printf("# bench_dot: %s, %d threads, %.0f MiB of rows of %lld weights, best ISA %s\n\n", model,
           nthreads_all, mib, (long long)row_n, strata_cpu_isa_name(best));

    /* activations: random f32, quantized once per activation type */
    float *x = malloc((size_t)row_n * sizeof(float));
    block_q8_0 *x80 = malloc((size_t)(row_n / QK8_0) * sizeof(block_q8_0));
    block_q8_K *x8k = malloc((size_t)(row_n / QK_K) * sizeof(block_q8_K));
    if (!x || !x80 || !x8k) { fprintf(stderr, "bench_dot: out of memory\n"); return 1; }
    for (int64_t i = 0; i < row_n; i++) x[i] = rng_float();
    st_quantize_row_q8_0(x, x80, row_n);
    st_quantize_row_q8_K(x, x8k, row_n);

    int thread_counts[2] = {1, nthreads_all};
    int n_tc = nthreads_all > 1 ? 2 : 1;
    printf("| type | bits/weight |");
    for (int lvl = 0; lvl <= (int)best; lvl++)
        for (int tc = 0; tc < n_tc; tc++)
            printf(" %s %dT |", strata_cpu_isa_name((strata_cpu_isa)lvl), thread_counts[tc]);
    printf("\n|---|---|");
    for (int lvl = 0; lvl <= (int)best; lvl++)
        for (int tc = 0; tc < n_tc; tc++) printf("---|");
    printf("\n");

    bench_result res[MAX_RESULTS];
    int nres = 0;
    double t_start = now_s();
    for (size_t k = 0; k < sizeof bench_types / sizeof bench_types[0]; k++) {
        const bench_type *bt = &bench_types[k];
        if (!type_selected(types, bt->type)) continue;
        int64_t row_bytes = strata_row_bytes(bt->type, row_n);
        int64_t nrows = (int64_t)(mib * 1048576.0) / row_bytes;
        if (nrows < 1) nrows = 1;
        size_t bytes = (size_t)(nrows * row_bytes);
        unsigned char *mat = aligned_alloc(64, (bytes + 63) / 64 * 64);
        float *outv = malloc((size_t)nrows * sizeof(float));
        if (!mat || !outv) { fprintf(stderr, "bench_dot: out of memory\n"); return 1; }
        fill_matrix(bt, mat, bytes);
        strata_type at = strata_act_type(bt->type);
        const void *act = at == STRATA_TYPE_F32 ? (const void *)x : at == STRATA_TYPE_Q8_0 ? (const void *)x80 : (const void *)x8k;

        printf("| %s | %.4g |", strata_type_name(bt->type), 8.0 * (double)row_bytes / (double)row_n);
        for (int lvl = 0; lvl <= (int)best; lvl++) {
            st_vec_dot_fn fn = st_vec_dot_at(bt->type, (strata_cpu_isa)lvl);
            for (int tc = 0; tc < n_tc; tc++) {
                if (!fn) { printf(" - |"); continue; }
                bench_job job = {fn, mat, act, row_n, row_bytes, 0, 0, 1, outv};
                double gbps = measure(job, nrows, thread_counts[tc], target_s);
                printf(" %.2f |", gbps);
                fflush(stdout);
                if (nres < MAX_RESULTS)
                    res[nres++] = (bench_result){bt->type, lvl, thread_counts[tc], gbps,
                                                 gbps * (double)row_n / (double)row_bytes};
            }
        }
        printf("\n");
        free(mat);
        free(outv);
    }
    printf("\n(GB/s of weight bytes streamed through the dot product; %.1f s total)\n", now_s() - t_start);

    /* JSON */
    char default_path[] = "bench/results/bench_dot.json";
    if (!json_path) {
        mkdir("bench/results", 0777); /* exists already: fine */
        json_path = default_path;
    }
    FILE *jf = fopen(json_path, "w");
    if (!jf) {
        fprintf(stderr, "bench_dot: cannot write %s: %s\n", json_path, strerror(errno));
        return 1;
    }
    fprintf(jf, "{\n  \"cpu\": \"%s\",\n  \"threads_all\": %d,\n  \"matrix_mib\": %.0f,\n  \"row_weights\": %lld,\n",
            model, nthreads_all, mib, (long long)row_n);
    fprintf(jf, "  \"best_isa\": \"%s\",\n  \"unit\": \"GB/s of weight bytes\",\n  \"results\": [\n",
            strata_cpu_isa_name(best));
    for (int i = 0; i < nres; i++)
        fprintf(jf, "    {\"type\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"gbps\": %.3f, \"gweights_per_s\": %.3f}%s\n",
                strata_type_name(res[i].type), strata_cpu_isa_name((strata_cpu_isa)res[i].isa),
                res[i].threads, res[i].gbps, res[i].gw, i + 1 < nres ? "," : "");
    fprintf(jf, "  ]\n}\n");
    fclose(jf);
    printf("wrote %s\n", json_path);
    free(x);
    free(x80);
    free(x8k);
    return 0;
}
