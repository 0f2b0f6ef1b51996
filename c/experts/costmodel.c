/* costmodel.c - load-or-compute decisions for missed experts (costmodel.h): list scheduling on the
 * PCIe copy engine and the CPU pool, and the CPU cost measurement. */
#include "costmodel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Heaviest first: weight, then rows, then lower id (a total order: the same input, the same plan). */
static int st_miss_cmp(const void *a, const void *b) {
    const st_miss *x = a, *y = b;
    if (x->weight != y->weight) return x->weight > y->weight ? -1 : 1;
    if (x->rows != y->rows) return x->rows > y->rows ? -1 : 1;
    return (x->expert > y->expert) - (x->expert < y->expert);
}

typedef struct { st_miss m; int idx; } st_miss_at;

/* One expert's copy over PCIe: the per-copy latency and its bytes at the measured rate. */
static double st_cost_copy_s(const st_cost_params *p) {
    return p->pcie_latency_s + (p->pcie_bytes_per_s > 0 ? p->expert_bytes / p->pcie_bytes_per_s : INFINITY);
}

static int st_miss_at_cmp(const void *a, const void *b) {
    const st_miss_at *x = a, *y = b;
    int c = st_miss_cmp(&x->m, &y->m);
    return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

int st_cost_decide(const st_cost_params *p, const st_miss *misses, int n, uint8_t *load,
                   double *makespan) {
    if (makespan) *makespan = 0;
    if (n <= 0) return 0;
    st_miss_at *order = malloc(sizeof *order * (size_t)n);
    if (!order) { /* no memory: compute everything on the CPU (always possible) */
        memset(load, 0, (size_t)n);
        return 0;
    }
    for (int i = 0; i < n; i++) { order[i].m = misses[i]; order[i].idx = i; }
    qsort(order, (size_t)n, sizeof *order, st_miss_at_cmp);
    const double copy_s = st_cost_copy_s(p);
    double pcie_end = 0, cpu_end = 0;
    int loaded = 0, computed = 0;
    const int forced = p->pcie_frac >= 0 ? (int)lround(p->pcie_frac * n) : -1;
    const int stepped = p->cpu_expert_s > 0; /* the CPU's share as one step (costmodel.h) */
    for (int k = 0; k < n; k++) {
        const st_miss *m = &order[k].m;
        const double cpu_s = stepped ? (computed ? 0.0 : p->cpu_step_s) + p->cpu_expert_s +
                                           (double)(m->rows > 1 ? m->rows - 1 : 0) * p->cpu_per_row_s
                                     : p->cpu_fixed_s + (double)m->rows * p->cpu_per_row_s;
        int to_gpu;
        if (forced >= 0) to_gpu = k < forced;
        else to_gpu = pcie_end + copy_s + p->gpu_s <= cpu_end + cpu_s; /* ties: load */
        if (to_gpu) { pcie_end += copy_s; loaded++; }
        else { cpu_end += cpu_s; computed++; }
        load[order[k].idx] = (uint8_t)to_gpu;
    }
    if (makespan) *makespan = fmax(loaded ? pcie_end + p->gpu_s : 0.0, cpu_end);
    free(order);
    return loaded;
}

void st_cost_split_counts(const st_cost_params *p, int32_t n, int32_t cap, int32_t *out) {
    st_miss *ms = cap < 0 && n > 1 ? malloc(sizeof *ms * (size_t)(n - 1)) : NULL;
    uint8_t *ld = ms ? malloc((size_t)(n - 1)) : NULL;
    for (int32_t i = 0; ms && i < n - 1; i++) ms[i] = (st_miss){.expert = i, .rows = 1, .weight = 1.0f};
    for (int32_t m = 0; m < n; m++) {
        if (cap >= 0) {
            out[m] = m < cap ? m : cap;
            continue;
        }
        out[m] = 0;
        if (m == 0 || !ms || !ld) continue;
        out[m] = st_cost_decide(p, ms, m, ld, NULL); /* (the first m of the same misses) */
    }
    free(ms);
    free(ld);
}

int st_cost_stage(const st_cost_params *p, const int32_t *rows, int n, double *t_copy, double *t_cpu) {
    const double copy_s = st_cost_copy_s(p);
    double cpu = 0;
    if (p->cpu_expert_s > 0) { /* the layer's experts as one step on the pool (st_cost_params) */
        if (n > 0) cpu = p->cpu_step_s;
        for (int i = 0; i < n; i++) cpu += p->cpu_expert_s + (double)(rows[i] - 1) * p->cpu_per_row_s;
    } else {
        for (int i = 0; i < n; i++) cpu += p->cpu_fixed_s + (double)rows[i] * p->cpu_per_row_s;
    }
    const double copy = n > 0 ? (double)n * copy_s + p->gpu_s : 0.0;
    if (t_copy) *t_copy = copy;
    if (t_cpu) *t_cpu = cpu;
    return n > 0 && ST_STAGE_MARGIN * copy < cpu;
}

double st_cost_plan_rate(const st_cost_params *p, int32_t k, int32_t n_cpu_layers, int split) {
    enum { KMAX = 64 };
    if (!(p->cpu_expert_s > 0) || n_cpu_layers < 1 || k < 1 || k > KMAX) return 0.0;
    double t_layer = p->cpu_step_s + (double)k * p->cpu_expert_s;
    if (split) { /* the split's own prediction for one token: k one-row misses */
        st_miss m[KMAX];
        uint8_t load[KMAX];
        for (int32_t i = 0; i < k; i++) m[i] = (st_miss){i, 1, 1.0f};
        double span = 0.0;
        st_cost_decide(p, m, k, load, &span);
        if (span > 0.0) t_layer = span;
    }
    return t_layer > 0.0 ? 1.0 / ((double)n_cpu_layers * t_layer) : 0.0;
}

static double st_cost_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The measurements' pieces: activations (any fixed values), one expert step timed, and the line
 * t(n) = fixed + n * slope through t(1) = t1 and t(n) = tn (neither below 0). */
static void st_cost_fill_x(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
}

static double st_cost_time_ffn(st_threadpool *tp, const st_expert *experts, int32_t n_expert,
                               const float *x, int64_t T, const int32_t *ids, const float *wts, int32_t k,
                               float *out, void *ws) {
    const double t0 = st_cost_now();
    st_moe_ffn(tp, experts, n_expert, x, T, ids, wts, k, out, ws);
    return st_cost_now() - t0;
}

static void st_cost_line(double t1, double tn, int64_t n, double *fixed, double *slope) {
    *slope = fmax((tn - t1) / (double)(n - 1), 0.0);
    *fixed = fmax(t1 - *slope, 0.0);
}

int st_cost_measure_cpu(st_threadpool *tp, const st_expert *e, double *cpu_fixed_s,
                        double *cpu_per_row_s) {
    const int64_t n_embd = e->gate.ne[0], n_ff = e->gate.ne[1], R = 8;
    float *x = malloc(sizeof(float) * (size_t)(R * n_embd));
    float *out = malloc(sizeof(float) * (size_t)(R * n_embd));
    void *ws = malloc(st_moe_wsize(R, 1, 1, n_embd, n_ff));
    int32_t ids[8] = {0};
    float wts[8];
    if (!x || !out || !ws) { free(x); free(out); free(ws); return -1; }
    st_cost_fill_x(x, R * n_embd);
    for (int r = 0; r < R; r++) wts[r] = 1.0f;
    double best[2] = {INFINITY, INFINITY};
    const int64_t rows[2] = {1, R};
    for (int rep = 0; rep < 9; rep++) /* best of 9: other start-up work inflates single runs */
        for (int v = 0; v < 2; v++)
            best[v] = fmin(best[v], st_cost_time_ffn(tp, e, 1, x, rows[v], ids, wts, 1, out, ws));
    st_cost_line(best[0], best[1], R, cpu_fixed_s, cpu_per_row_s);
    free(x); free(out); free(ws);
    return 0;
}

int st_cost_measure_cpu_step(st_threadpool *tp, const st_expert *experts, int32_t n_expert,
                             double *cpu_step_s, double *cpu_expert_s) {
    if (n_expert < 1) { *cpu_step_s = *cpu_expert_s = 0; return 0; }
    const int64_t n_embd = experts[0].gate.ne[0], n_ff = experts[0].gate.ne[1];
    const int32_t K = n_expert < 8 ? n_expert : 8;
    float *x = malloc(sizeof(float) * (size_t)n_embd);
    float *out = malloc(sizeof(float) * (size_t)n_embd);
    void *ws = malloc(st_moe_wsize(1, K, n_expert, n_embd, n_ff));
    if (!x || !out || !ws) { free(x); free(out); free(ws); return -1; }
    st_cost_fill_x(x, n_embd);
    int32_t ids[8];
    float wts[8];
    for (int k = 0; k < 8; k++) wts[k] = 0.125f;
    double best[2] = {INFINITY, INFINITY};
    /* pass 0 reads the experts untimed (a mapping's page faults are not the step's cost), pass 1
     * times the same sequence: 9 x 9 experts, by then out of the caches when the layer's experts
     * outgrow them (qwen3: 190 MB), and a step's worth of cache when they do not */
    for (int pass = 0; pass < 2; pass++) {
        int32_t next = 0; /* the next expert not yet read (wrapping once the layer runs out) */
        for (int rep = 0; rep < 9; rep++) /* best of 9, as st_cost_measure_cpu */
            for (int v = 0; v < 2; v++) {
                const int32_t k = v ? K : 1;
                for (int j = 0; j < k; j++) ids[j] = (next + j) % n_expert;
                next = (next + k) % n_expert;
                const double dt = st_cost_time_ffn(tp, experts, n_expert, x, 1, ids, wts, k, out, ws);
                if (pass == 1) best[v] = fmin(best[v], dt);
            }
    }
    double per_expert = best[0];
    *cpu_step_s = 0;
    if (K > 1) st_cost_line(best[0], best[1], K, cpu_step_s, &per_expert);
    *cpu_expert_s = per_expert > 0 ? per_expert : 1e-9; /* > 0: marks the figures measured */
    free(x); free(out); free(ws);
    return 0;
}
