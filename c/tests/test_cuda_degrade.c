/* test_cuda_degrade.c - DEGRADE_ZERO in CUDA sessions (issue 30), on the trained default model
 * (6 layers x 32 experts, top-4): a 12-token prompt, then 40 teacher-forced one-token decode steps
 * (strata_session_decode_gen, where the approximation may act), logits compared with the option
 * off in the same placement:
 *   - an expert cache of 48 slots (misses every step): tau 0 drops nothing (the option off's bits);
 *     tau 0.05 drops some missed slots, never in the prompt (its row is off's, bit for bit), and
 *     stays close (mean KL bound, mostly the same argmax); tau 1 keeps each position's heaviest
 *     slot (rescue: at most 3 of 4 slots of the decode steps dropped); with gpu_prefetch too;
 *   - every expert resident (192 slots, the third pass over the text): nothing misses, so tau 0.5
 *     gives off's bits and drops nothing;
 *   - --cpu-moe without a RAM budget: the CPU layers' experts are placed, not missed: off's bits,
 *     nothing eligible;
 *   - --cpu-moe past a RAM budget of 1 MiB: the RAM tier's misses are gated as in a CPU session
 *     (tau 0.5 drops, tau 0 gives off's bits).
 * Without a usable GPU it skips (the rule itself: test_degrade_zero.c). */
#include "strata.h"
#include "test.h"
#include "test_tiny.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_PROMPT 12
#define STEPS 40

static const char *TEXT =
    "Dictionary, n. A malevolent literary device for cramping the growth of a language and making "
    "it hard and inelastic. This dictionary, however, is a most useful work. Lexicon, n. A book "
    "of words of a language, arranged in alphabetical order, with their meanings. Cat, n. A soft, "
    "indestructible automaton provided by nature to be kicked when things go wrong in the domestic "
    "circle.";

static const strata_model *model;
static int32_t V;
static strata_token toks[512];

typedef struct {
    const char *name;
    int32_t cache, n_cpu_moe, prefetch, passes;
    int64_t ram;
} placement;

/* The logits [STEPS + 1][V] (the prompt's last row, then each step's) of the last of `passes`
 * passes over the text (each after a reset, its stats reset too), with DEGRADE_ZERO on at tau or
 * off (tau < 0). 0 on failure. A light expert missed under DEGRADE_ZERO is dropped, not loaded,
 * so only passes without drops can fill a cache. */
static int run(const placement *pl, float tau, float *lg, strata_session_stats *ss) {
    strata_session_params sp = strata_session_default_params();
    sp.backend = STRATA_BACKEND_CUDA;
    sp.n_ctx = 256;
    sp.n_batch = 64;
    sp.n_threads = 2;
    sp.placement.expert_cache = pl->cache;
    sp.placement.n_cpu_moe = pl->n_cpu_moe;
    sp.placement.gpu_prefetch = pl->prefetch;
    sp.placement.ram_budget = pl->ram;
    sp.degrade_zero = tau >= 0.0f;
    sp.degrade_tau = tau >= 0.0f ? tau : 0.03f;
    strata_session *s = NULL;
    strata_status st = strata_session_create(model, &sp, &s);
    CHECK(st == STRATA_OK, "%s, tau %g: session: %s", pl->name, (double)tau, strata_last_error());
    for (int pass = 0; pass < pl->passes && st == STRATA_OK; pass++) {
        strata_session_reset(s);
        strata_session_reset_stats(s);
        st = strata_session_decode(s, toks, N_PROMPT, lg, 0);
        /* the passes before the last warm the cache: plain decode never drops (DEGRADE_ZERO acts
         * in decode_gen only), so every expert the last pass routes to gets loaded */
        const int last = pass == pl->passes - 1;
        for (int i = 0; i < STEPS && st == STRATA_OK; i++) {
            float *row = lg + (size_t)(i + 1) * (size_t)V;
            st = last ? strata_session_decode_gen(s, &toks[N_PROMPT + i], 1, row, 0)
                      : strata_session_decode(s, &toks[N_PROMPT + i], 1, row, 0);
        }
    }
    if (st == STRATA_OK) st = strata_session_get_stats(s, ss);
    CHECK(st == STRATA_OK, "%s, tau %g: %s", pl->name, (double)tau, strata_last_error());
    strata_session_free(s);
    return st == STRATA_OK;
}

/* KL(softmax a || softmax b) of one row, in double. */
static double kl_row(const float *a, const float *b) {
    double ma = -INFINITY, mb = -INFINITY, sa = 0, sb = 0, kl = 0;
    for (int32_t i = 0; i < V; i++) { ma = fmax(ma, a[i]); mb = fmax(mb, b[i]); }
    for (int32_t i = 0; i < V; i++) { sa += exp(a[i] - ma); sb += exp(b[i] - mb); }
    const double la = log(sa) + ma, lb = log(sb) + mb;
    for (int32_t i = 0; i < V; i++) kl += exp(a[i] - la) * ((a[i] - la) - (b[i] - lb));
    return kl;
}

static int32_t argmax(const float *x) {
    int32_t b = 0;
    for (int32_t i = 1; i < V; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int same_rows(const float *a, const float *b, int rows) {
    return !memcmp(a, b, sizeof(float) * (size_t)V * (size_t)rows);
}

/* The 48-slot cache: tau 0, 0.05 and 1 against off; then with gpu_prefetch. */
static void test_cache(float *off, float *on) {
    const placement pls[2] = {{"48 slots", 48, 0, 0, 1, 0}, {"48 slots, gpu_prefetch", 48, 0, 1, 1, 0}};
    for (int p = 0; p < 2; p++) {
        const placement *pl = &pls[p];
        strata_session_stats s0, s1;
        if (!run(pl, -1.0f, off, &s0)) return;
        if (!pl->prefetch) {
            if (!run(pl, 0.0f, on, &s1)) return;
            CHECK(same_rows(off, on, STEPS + 1) && s1.degrade_zeroed == 0 && s1.degrade_slots == (int64_t)STEPS * 6 * 4,
                  "%s, tau 0: off's bits, nothing zeroed (%lld), every decode slot eligible (%lld)", pl->name,
                  (long long)s1.degrade_zeroed, (long long)s1.degrade_slots);
        }
        if (!run(pl, 0.05f, on, &s1)) return;
        double kl = 0;
        int same_top = 0;
        for (int i = 1; i <= STEPS; i++) {
            kl += kl_row(off + (size_t)i * (size_t)V, on + (size_t)i * (size_t)V);
            same_top += argmax(off + (size_t)i * (size_t)V) == argmax(on + (size_t)i * (size_t)V);
        }
        kl /= STEPS;
        printf("%s, tau 0.05: %lld of %lld decode slots zeroed; mean KL %.3g against off; same argmax %d of %d; "
               "cache hits %lld, misses %lld\n", pl->name, (long long)s1.degrade_zeroed, (long long)s1.degrade_slots,
               kl, same_top, STEPS, (long long)s1.expert_cache_hits, (long long)s1.expert_cache_misses);
        CHECK(same_rows(off, on, 1), "%s, tau 0.05: the prompt's row is off's (prompts never drop)", pl->name);
        CHECK(s1.degrade_zeroed > 0 && s1.degrade_zeroed < s1.degrade_slots,
              "%s, tau 0.05: some missed slots zeroed (%lld of %lld)", pl->name, (long long)s1.degrade_zeroed,
              (long long)s1.degrade_slots);
        CHECK(kl <= 0.02 && same_top >= STEPS * 9 / 10, "%s, tau 0.05: mean KL %.3g, same argmax %d of %d",
              pl->name, kl, same_top, STEPS);
        if (pl->prefetch) continue;
        if (!run(pl, 1.0f, on, &s1)) return;
        printf("%s, tau 1: %lld of %lld decode slots zeroed\n", pl->name, (long long)s1.degrade_zeroed,
               (long long)s1.degrade_slots);
        CHECK(s1.degrade_zeroed > 0 && 4 * s1.degrade_zeroed <= 3 * s1.degrade_slots,
              "%s, tau 1: rescue keeps each position's heaviest slot (%lld of %lld zeroed)", pl->name,
              (long long)s1.degrade_zeroed, (long long)s1.degrade_slots);
    }
}

/* Placements where nothing may be dropped at tau 0.5 (every expert resident; the CPU layers'
 * experts), and the RAM tier past its budget under a GPU session, where misses are gated. */
static void test_placed(float *off, float *on) {
    const placement all = {"192 slots, third pass", 192, 0, 0, 3, 0};
    const placement cpu = {"--cpu-moe", 0, -1, 0, 1, 0};
    const placement ram = {"--cpu-moe, RAM budget 1 MiB", 0, -1, 0, 1, 1 << 20};
    strata_session_stats s0, s1;
    if (run(&all, -1.0f, off, &s0) && run(&all, 0.5f, on, &s1))
        CHECK(same_rows(off, on, STEPS + 1) && s1.degrade_zeroed == 0 && s1.expert_cache_misses == 0,
              "%s, tau 0.5: nothing missed (%lld misses), nothing zeroed (%lld), off's bits", all.name,
              (long long)s1.expert_cache_misses, (long long)s1.degrade_zeroed);
    if (run(&cpu, -1.0f, off, &s0) && run(&cpu, 0.5f, on, &s1))
        CHECK(same_rows(off, on, STEPS + 1) && s1.degrade_zeroed == 0 && s1.degrade_slots == 0,
              "%s, tau 0.5: the CPU layers' experts are placed, not missed: %lld eligible, %lld zeroed, off's bits",
              cpu.name, (long long)s1.degrade_slots, (long long)s1.degrade_zeroed);
    if (!run(&ram, -1.0f, off, &s0)) return;
    if (run(&ram, 0.0f, on, &s1))
        CHECK(same_rows(off, on, STEPS + 1) && s1.degrade_zeroed == 0, "%s, tau 0: off's bits", ram.name);
    if (run(&ram, 0.5f, on, &s1)) {
        printf("%s, tau 0.5: %lld of %lld decode slots zeroed; disk reads %lld bytes (off: %lld)\n", ram.name,
               (long long)s1.degrade_zeroed, (long long)s1.degrade_slots, (long long)s1.disk_bytes,
               (long long)s0.disk_bytes);
        CHECK(s1.degrade_zeroed > 0 && same_rows(off, on, 1) && s1.disk_bytes < s0.disk_bytes,
              "%s, tau 0.5: RAM-tier misses dropped (%lld), the prompt's row off's, fewer disk reads", ram.name,
              (long long)s1.degrade_zeroed);
    }
}

int main(void) {
    strata_backend_info bi;
    CHECK(strata_backend_query(STRATA_BACKEND_CUDA, &bi) == STRATA_OK, "backend query");
    if (!bi.available) {
        SKIP("GPU DEGRADE_ZERO: CUDA unavailable: %s", bi.detail);
        return test_report();
    }
    strata_model *m = NULL;
    if (!test_tiny_load(2, &m)) return test_report();
    model = m;
    strata_model_info mi;
    strata_model_get_info(m, &mi);
    V = mi.n_vocab;
    int64_t n = 0;
    CHECK(strata_tokenize(m, TEXT, (int64_t)strlen(TEXT), 1, 0, toks, 512, &n) == STRATA_OK && n >= N_PROMPT + STEPS,
          "tokenize: %lld tokens", (long long)n);
    CHECK(mi.n_layer == 6 && mi.n_expert == 32 && mi.n_expert_used == 4, "the default model's shape");
    float *off = malloc(sizeof(float) * (size_t)V * (STEPS + 1));
    float *on = malloc(sizeof(float) * (size_t)V * (STEPS + 1));
    if (off && on && n >= N_PROMPT + STEPS) {
        printf("GPU: %s\n", bi.detail);
        test_cache(off, on);
        test_placed(off, on);
    }
    free(off);
    free(on);
    strata_model_free(m);
    return test_report();
}
