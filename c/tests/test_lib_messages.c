/* test_lib_messages.c - the library's error messages name its parameters (expert_cache,
 * n_cpu_moe, allow_requantize, ...), never a CLI flag: the library serves Python and other
 * callers, and the CLI writes its own flag after each parameter it finds (c/cli/flags.c). Each
 * option check of strata_session_create, a CUDA session on this machine (and there, an expert
 * cache too small, whose reason must outlive the freeing of the half-made session), and a refused
 * requantize, on the tiny model (../shared/models/strata-tiny-moe-q8_0.gguf, or
 * $STRATA_SHARED/models/...; skipped when absent). */
#include "test.h"
#include "strata.h"
#include "strata_quant.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static strata_model *model;

/* A message names none of the CLI's flags: no "--name" and no "(-c)"-style short flag. */
static int names_no_flag(const char *msg) {
    for (const char *p = msg; *p; p++) {
        if (p[0] == '-' && p[1] == '-' && p[2] >= 'a' && p[2] <= 'z') return 0;
        if ((p == msg || p[-1] == ' ' || p[-1] == '(') && p[0] == '-' && p[1] >= 'a' && p[1] <= 'z' &&
            (p[2] == ' ' || p[2] == ')' || p[2] == ',' || p[2] == '\0'))
            return 0;
    }
    return 1;
}

typedef void (*setup_fn)(strata_session_params *p);

static void s_n_ctx(strata_session_params *p) { p->n_ctx = -1; }
static void s_kv_type(strata_session_params *p) { p->kv_type = STRATA_TYPE_Q8_0; }
static void s_degrade_zero(strata_session_params *p) { p->degrade_zero = 2; }
static void s_degrade_tau(strata_session_params *p) { p->degrade_tau = 2.0f; }
static void s_degrade_eval(strata_session_params *p) { p->degrade_eval = 1; }
static void s_ram_budget(strata_session_params *p) { p->placement.ram_budget = -1; }
static void s_cpu_misses(strata_session_params *p) { p->placement.cpu_misses = 5; }
static void s_pcie_frac(strata_session_params *p) { p->placement.pcie_frac = 2.0f; }
static void s_stage_experts(strata_session_params *p) { p->placement.stage_experts = -5; }
static void s_attn_tc(strata_session_params *p) { p->cuda.attn_tc = 9; }
static void s_q8_tiles(strata_session_params *p) { p->cuda.q8_tiles = 3; }
static void s_q8_sm60(strata_session_params *p) { p->cuda.q8_sm60 = 3; }
static void s_cpu_warm(strata_session_params *p) { p->placement.cpu_warm = 3; }
static void s_pin_experts(strata_session_params *p) { p->placement.pin_experts = 3; }
static void s_ram_gpu(strata_session_params *p) {
    p->backend = STRATA_BACKEND_CUDA;
    p->placement.ram_budget = 1 << 20;
}
static void s_doorbell_cache(strata_session_params *p) {
    p->backend = STRATA_BACKEND_CUDA;
    p->placement.doorbell = 1;
    p->placement.expert_cache = 32;
    p->placement.gpu_prefetch = 1;
}
static void s_doorbell_cpu_moe(strata_session_params *p) {
    p->backend = STRATA_BACKEND_CUDA;
    p->placement.doorbell = 1;
    p->placement.n_cpu_moe = -1;
    p->placement.cpu_misses = 1;
}
static void s_ram_doorbell(strata_session_params *p) {
    s_ram_gpu(p);
    p->placement.n_cpu_moe = -1;
    p->placement.doorbell = 1;
}
static void s_ram_pin(strata_session_params *p) {
    s_ram_gpu(p);
    p->placement.expert_cache = 32;
    p->placement.pin_experts = 1;
}
static void s_eval_gpu(strata_session_params *p) {
    p->backend = STRATA_BACKEND_CUDA;
    p->degrade_zero = 1;
    p->degrade_eval = 1;
}
static void s_ram_small(strata_session_params *p) { p->placement.ram_budget = 1024; }
static void s_cuda(strata_session_params *p) { p->backend = STRATA_BACKEND_CUDA; }

static void test_session_checks(void) {
    static const struct {
        setup_fn setup;
        const char *names[2]; /* parameters the message must name */
    } cases[] = {
        {s_n_ctx, {"n_ctx"}}, {s_kv_type, {"kv_type"}}, {s_degrade_zero, {"degrade_zero"}},
        {s_degrade_tau, {"degrade_tau"}}, {s_degrade_eval, {"degrade_eval", "degrade_zero"}},
        {s_ram_budget, {"ram_budget"}}, {s_cpu_misses, {"cpu_misses"}}, {s_pcie_frac, {"pcie_frac"}},
        {s_stage_experts, {"stage_experts"}}, {s_attn_tc, {"attn_tc"}}, {s_q8_tiles, {"q8_tiles"}},
        {s_q8_sm60, {"q8_sm60"}},        {s_cpu_warm, {"cpu_warm"}}, {s_pin_experts, {"pin_experts"}},
        {s_ram_gpu, {"expert_cache", "n_cpu_moe"}}, {s_doorbell_cache, {"doorbell", "expert_cache"}},
        {s_doorbell_cpu_moe, {"doorbell", "cpu_misses"}}, {s_ram_doorbell, {"ram_budget", "doorbell"}},
        {s_ram_pin, {"ram_budget", "pin_experts"}}, {s_eval_gpu, {"degrade_eval"}}, {s_ram_small, {NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        strata_session_params p = strata_session_default_params();
        p.n_ctx = 64;
        cases[i].setup(&p);
        strata_session *s = NULL;
        const strata_status st = strata_session_create(model, &p, &s);
        const char *msg = strata_last_error();
        CHECK(st != STRATA_OK && !s, "case %zu refused", i);
        strata_session_free(s);
        CHECK(names_no_flag(msg), "case %zu: the message names a CLI flag: %s", i, msg);
        for (int k = 0; k < 2 && cases[i].names[k]; k++)
            CHECK(strstr(msg, cases[i].names[k]) != NULL, "case %zu: no '%s' in: %s", i, cases[i].names[k], msg);
    }
    /* a CUDA session on this machine: made, or refused with a message that names no flag */
    strata_session_params p = strata_session_default_params();
    p.n_ctx = 64;
    s_cuda(&p);
    strata_session *s = NULL;
    if (strata_session_create(model, &p, &s) != STRATA_OK) {
        CHECK(strata_last_error()[0] && names_no_flag(strata_last_error()), "CUDA session: %s",
              strata_last_error());
        SKIP("no CUDA session here: an expert cache refused on the GPU is not checked");
        return;
    }
    strata_session_free(s);
    /* refused after part of the GPU session was made: the freeing keeps the reason */
    p.placement.expert_cache = 1;
    const strata_status st = strata_session_create(model, &p, &s);
    CHECK(st != STRATA_OK && !s && strstr(strata_last_error(), "expert_cache") != NULL,
          "an expert cache of 1 slot refused with its reason: '%s'", strata_last_error());
}

static void test_requantize(const char *path) {
    char out[64];
    snprintf(out, sizeof out, "/tmp/strata_test_msg_%d.gguf", (int)getpid());
    strata_quantize_params q = strata_quantize_default_params();
    q.type = STRATA_TYPE_Q4_0;
    q.n_threads = 1;
    const strata_status st = strata_quantize_file(path, out, &q);
    const char *msg = strata_last_error();
    CHECK(st != STRATA_OK, "requantizing Q8_0 to Q4_0 without allow_requantize refused");
    CHECK(strstr(msg, "allow_requantize") != NULL && names_no_flag(msg), "the message: %s", msg);
    remove(out);
}

static void test_names_no_flag(void) {
    CHECK(!names_no_flag("needs expert_cache (--expert-cache)"), "--flag found");
    CHECK(!names_no_flag("use a larger -c"), "-c found");
    CHECK(!names_no_flag("n_ctx (-c) is 0"), "(-c) found");
    CHECK(names_no_flag("every logit is -inf; n_past 3 - 1"), "-inf and minus are no flags");
}

int main(void) {
    test_names_no_flag();
    const char *shared = getenv("STRATA_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/strata-tiny-moe-q8_0.gguf", shared ? shared : "../shared");
    FILE *f = fopen(path, "rb");
    if (!f) {
        SKIP("%s not found (set STRATA_SHARED): the message tests need the tiny model", path);
        return test_report();
    }
    fclose(f);
    strata_model_params mp = strata_model_default_params();
    mp.n_threads = 1;
    strata_status st = strata_model_load(path, &mp, &model);
    CHECK(st == STRATA_OK, "load %s: %s", path, strata_last_error());
    if (st != STRATA_OK) return test_report();
    test_session_checks();
    test_requantize(path);
    strata_model_free(model);
    return test_report();
}
