/* test_plan.c - the placement plan's memory fit (c/experts/plan.c, c/engine/session_params.c):
 * st_plan_fit_layers on made-up layer sizes (the last layers go up first, the fewest CPU layers
 * that fit, -1 when the fixed part alone does not), then gpu_mem alone on the default model
 * (models/strata-tiny-moe-q8_0.gguf): as gpu_mem grows the CPU layers it leaves go from every
 * layer down to none, one layer at a time; too little memory is refused naming gpu_mem; an expert
 * cache, n_cpu_moe or a CPU session make no fit; strata_placement_fit answers the same. No GPU needed: the fit is arithmetic on the
 * file's tensor sizes. */
#include "plan.h"
#include "session.h"
#include "test.h"
#include "test_tiny.h"

#include <string.h>

static void test_fit_layers(void) {
    const int64_t lb[4] = {100, 100, 100, 100};
    CHECK(st_plan_fit_layers(1000, 50, lb, 4) == 0, "room for all: no CPU layer");
    CHECK(st_plan_fit_layers(450, 50, lb, 4) == 0, "exactly enough: no CPU layer");
    CHECK(st_plan_fit_layers(449, 50, lb, 4) == 1, "one short: the first layer on the CPU");
    CHECK(st_plan_fit_layers(250, 50, lb, 4) == 2, "room for two: the last two on the GPU");
    CHECK(st_plan_fit_layers(50, 50, lb, 4) == 4, "room for none: every layer on the CPU");
    CHECK(st_plan_fit_layers(49, 50, lb, 4) == -1, "the fixed part alone does not fit: -1");
    const int64_t uneven[3] = {10, 500, 20};
    CHECK(st_plan_fit_layers(100, 0, uneven, 3) == 2, "a large layer stops the fill: only the last goes up");
}

/* n_cpu_moe after the fit for gpu_mem bytes (n_layer for -1); -2 when refused; -3 no fit. */
static int fit_for(const strata_model *m, int64_t gpu_mem, strata_status *st_out) {
    strata_session_params p = strata_session_default_params();
    p.backend = STRATA_BACKEND_CUDA;
    p.n_ctx = 256;
    p.placement.gpu_mem = gpu_mem;
    int32_t fit = -1;
    const strata_status st = st_session_fit_gpu_mem(m, &p, &fit);
    if (st_out) *st_out = st;
    if (st != STRATA_OK) return -2;
    if (fit < 0) return -3;
    return p.placement.n_cpu_moe < 0 ? m->hp.n_layer : p.placement.n_cpu_moe;
}

static void test_fit_model(const strata_model *m) {
    const int32_t L = m->hp.n_layer;
    strata_status st;
    CHECK(fit_for(m, 1LL << 40, NULL) == 0, "1 TiB: every layer's experts on the GPU");
    CHECK(fit_for(m, 1LL << 20, &st) == -2 && st == STRATA_ERR_NOMEM && strstr(strata_last_error(), "gpu_mem"),
          "1 MiB refused, naming gpu_mem: %s", strata_last_error());
    strata_session_params cp = strata_session_default_params();
    cp.backend = STRATA_BACKEND_CUDA;
    cp.n_ctx = 256;
    cp.placement.gpu_mem = 1LL << 20;
    CHECK(strata_session_params_check(m, &cp) == STRATA_ERR_NOMEM && strstr(strata_last_error(), "gpu_mem"),
          "strata_session_params_check refuses it as create would: %s", strata_last_error());
    /* from the smallest memory that fits at all, up by 64 KiB: the CPU layers fall from L to 0, one
     * at a time (equal layers), never back up */
    int prev = -2, seen[64] = {0}, steps = 0, monotone = 1;
    for (int64_t mem = 512LL << 20; mem < (512LL << 20) + (256LL << 20) && prev != 0; mem += 64 << 10, steps++) {
        const int n = fit_for(m, mem, NULL);
        if (n == -2) continue;
        if (prev >= 0 && n > prev) monotone = 0;
        if (n >= 0 && n <= L && n < 64) seen[n] = 1;
        prev = n;
    }
    int all = 1;
    for (int32_t n = 0; n <= L && n < 64; n++) all &= seen[n];
    CHECK(monotone && all && prev == 0, "gpu_mem growing: CPU layers %d..0 each met, never rising (%d steps)", (int)L,
          steps);
    /* the public strata_placement_fit: the same choice, whatever the params' backend and placement */
    strata_session_params fp = strata_session_default_params();
    fp.n_ctx = 256;
    fp.placement.gpu_mem = 1LL << 40;
    fp.placement.n_cpu_moe = 3; /* taken as 0 */
    int32_t nl = -7;
    CHECK(strata_placement_fit(m, &fp, &nl) == STRATA_OK && nl == 0, "strata_placement_fit, 1 TiB: 0 (%d)", (int)nl);
    fp.placement.gpu_mem = 0;
    CHECK(strata_placement_fit(m, &fp, &nl) == STRATA_ERR_INVALID_ARG && strstr(strata_last_error(), "gpu_mem"),
          "strata_placement_fit: gpu_mem 0 refused");
    CHECK(strata_placement_fit(NULL, &fp, &nl) == STRATA_ERR_INVALID_ARG &&
              strata_placement_fit(m, &fp, NULL) == STRATA_ERR_INVALID_ARG, "strata_placement_fit: NULL refused");
    /* no fit where gpu_mem does not choose: an expert cache, n_cpu_moe given, a CPU session */
    strata_session_params p = strata_session_default_params();
    p.backend = STRATA_BACKEND_CUDA;
    p.n_ctx = 256;
    p.placement.gpu_mem = 1LL << 20;
    p.placement.expert_cache = -1;
    int32_t fit = 7;
    CHECK(st_session_fit_gpu_mem(m, &p, &fit) == STRATA_OK && fit == -1 && p.placement.n_cpu_moe == 0,
          "expert_cache auto: gpu_mem sizes the cache, no fit");
    p.placement.expert_cache = 0;
    p.placement.n_cpu_moe = 2;
    CHECK(st_session_fit_gpu_mem(m, &p, &fit) == STRATA_OK && fit == -1 && p.placement.n_cpu_moe == 2,
          "n_cpu_moe given: no fit");
    p.placement.n_cpu_moe = 0;
    p.backend = STRATA_BACKEND_CPU;
    CHECK(st_session_fit_gpu_mem(m, &p, &fit) == STRATA_OK && fit == -1, "a CPU session: no fit");
}

int main(void) {
    test_fit_layers();
    strata_model *m = NULL;
    if (!test_tiny_load(0, &m)) return test_report();
    test_fit_model(m);
    strata_model_free(m);
    return test_report();
}
