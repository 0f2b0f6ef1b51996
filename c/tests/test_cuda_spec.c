/* test_cuda_spec.c - verify windows on the GPU (issue 31), on the trained default model
 * (models/strata-tiny-moe-q8_0.gguf), for every expert placement of a CUDA session:
 *   - a window's rows are the bits of one-token decode steps: the same tokens as one-token
 *     strata_session_decode_gen calls and as windows of 8, 5, 3, 1 and 7 tokens, every row's
 *     logits compared byte for byte. --expert-cache --cpu-misses too where its split is exact
 *     (stats cache_split 1: calls of up to 8 tokens compute every slot in the CPU's arithmetic,
 *     hits and misses alike; its prompt is then fed in calls of up to 8 tokens and its right
 *     drafts are 7, so that every call is one of those); where it is not (cache_split 2) its bits
 *     follow the cache's residency (hits in the GPU's arithmetic, the CPU's share of the misses
 *     in the CPU's, the share chosen per call: docs/EXPERTS.md), and every row must have the
 *     one-token step's argmax and a KL of at most 1e-4 from it;
 *   - a window rolled back (strata_session_truncate) leaves the KV cache as if its rejected rows
 *     never ran: the rows after it are the plain steps' bits;
 *   - strata_session_speculate with right drafts (windows of 8), with wrong drafts and with the
 *     model as its own draft model gives plain greedy's tokens, every right draft accepted;
 *   - the self-draft (the session drafting with its GPU experts only: a cache's misses and the CPU
 *     layers' experts dropped): plain greedy's tokens, some drafts accepted, where an expert cache
 *     or CPU layers beside GPU ones make it possible (with the pool too); refused all resident and
 *     with every layer's experts on the CPU.
 * Without a usable GPU it skips (the CPU side is test_speculate.c's). */
#include "strata.h"
#include "test.h"
#include "test_tiny.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_PROMPT 12
#define N_STEPS 24 /* teacher-forced steps after the prompt; also the greedy run's length */

static const char *TEXT =
    "Dictionary, n. A malevolent literary device for cramping the growth of a language and making "
    "it hard and inelastic. This dictionary, however, is a most useful work. Lexicon, n. A book "
    "of words of a language, arranged in alphabetical order, with their meanings.";

typedef struct {
    const char *name;
    int graphs, n_cpu_moe, expert_cache, cpu_misses, stage;
    int close;  /* bits follow the residency unless the cache's split is exact (stats cache_split
                 * 1); where they do (g_close), rows compared by argmax and KL (rows_match) */
    int doorbell;   /* the expert pool computes the CPU layers of calls of up to 8 tokens */
} placement;

static const placement PLACEMENTS[] = {
    {"all resident", 0, 0, 0, 0, 0, 0, 0},
    {"all resident, CUDA graphs", 1, 0, 0, 0, 0, 0, 0},
    {"--cpu-moe", 0, -1, 0, 0, 0, 0, 0},
    {"--n-cpu-moe 3", 0, 3, 0, 0, 0, 0, 0},
    {"--n-cpu-moe 3 --doorbell", 0, 3, 0, 0, 0, 0, 1},
    {"--cpu-moe --stage-experts 1", 0, -1, 0, 0, 1, 0, 0},
    {"--expert-cache 48", 0, 0, 48, 0, 0, 0, 0},
    {"--expert-cache 48 --cpu-misses", 0, 0, 48, 1, 0, 1, 0},
};

static const strata_model *model;
static int32_t V;
static int g_close;   /* the placement's bits follow the residency (pl->close, no exact split) */
static strata_token toks[512]; /* the text: the prompt, then the teacher-forced steps */

static strata_session *new_session(const placement *pl) {
    strata_session_params sp = strata_session_default_params();
    sp.backend = STRATA_BACKEND_CUDA;
    sp.n_ctx = 256;
    sp.n_batch = 64;
    sp.n_threads = 2;
    sp.cuda.graphs = pl->graphs;
    sp.placement.n_cpu_moe = pl->n_cpu_moe;
    sp.placement.expert_cache = pl->expert_cache;
    sp.placement.cpu_misses = pl->cpu_misses;
    sp.placement.stage_experts = pl->stage;
    sp.placement.doorbell = pl->doorbell;
    strata_session *s = NULL;
    CHECK(strata_session_create(model, &sp, &s) == STRATA_OK, "%s: session: %s", pl->name, strata_last_error());
    /* pl->close: the prompt in calls of up to 8 tokens, which the exact split takes (a longer
     * call's bits would follow the residency its share chose, and so differ between sessions) */
    const int64_t step = pl->close ? 8 : N_PROMPT;
    for (int64_t at = 0; s && at < N_PROMPT; at += step) {
        const int64_t nt = N_PROMPT - at < step ? N_PROMPT - at : step;
        CHECK(strata_session_decode(s, toks + at, nt, NULL, 0) == STRATA_OK, "%s: prompt: %s", pl->name,
              strata_last_error());
    }
    return s;
}

/* Whether the placement's bits follow the cache's residency in this build and on this host: its
 * cache split not exact (stats cache_split 2). */
static int follows_residency(const placement *pl) {
    if (!pl->close) return 0;
    strata_session *s = new_session(pl);
    strata_session_stats st;
    memset(&st, 0, sizeof st);
    if (s) CHECK(strata_session_get_stats(s, &st) == STRATA_OK, "%s: stats", pl->name);
    strata_session_free(s);
    printf("%s: cache split mode %d (%s)\n", pl->name, (int)st.cache_split,
           st.cache_split == 1 ? "the CPU's arithmetic: bits compared" : "bits follow the residency");
    CHECK(st.cache_split != 0, "%s: no cache split", pl->name);
    return st.cache_split != 1;
}

/* n rows of logits a and b ([n][V]) match: byte for byte, or with g_close each row's argmax
 * equal and its KL(softmax a || softmax b) at most 1e-4 (*kl_max gets the largest). */
static int rows_match(const float *a, const float *b, int n, double *kl_max) {
    *kl_max = 0;
    if (!memcmp(a, b, sizeof(float) * (size_t)V * (size_t)n)) return 1;
    if (!g_close) return 0;
    for (int r = 0; r < n; r++) {
        const float *x = a + (size_t)r * (size_t)V, *y = b + (size_t)r * (size_t)V;
        int ax = 0, ay = 0;
        double mx = x[0], my = y[0], zx = 0, zy = 0, kl = 0;
        for (int32_t i = 1; i < V; i++) {
            if (x[i] > x[ax]) ax = i;
            if (y[i] > y[ay]) ay = i;
        }
        mx = x[ax];
        my = y[ay];
        for (int32_t i = 0; i < V; i++) {
            zx += exp((double)x[i] - mx);
            zy += exp((double)y[i] - my);
        }
        for (int32_t i = 0; i < V; i++) {
            const double lpx = (double)x[i] - mx - log(zx), lpy = (double)y[i] - my - log(zy);
            kl += exp(lpx) * (lpx - lpy);
        }
        if (kl > *kl_max) *kl_max = kl;
        if (ax != ay || !(kl <= 1e-4)) return 0;
    }
    return 1;
}

/* The steps' logits [N_STEPS][V] fed as windows of the given sizes (summing to N_STEPS; a size of
 * 1 is a one-token step). */
static float *window_rows(const placement *pl, const int *sizes, int n_sizes) {
    strata_session *s = new_session(pl);
    float *rows = malloc(sizeof(float) * (size_t)V * N_STEPS);
    int at = 0;
    for (int i = 0; s && i < n_sizes; i++) {
        const strata_status st = strata_session_decode_gen(s, toks + N_PROMPT + at, sizes[i],
                                                           rows + (size_t)at * (size_t)V, 1);
        CHECK(st == STRATA_OK, "%s: window of %d: %s", pl->name, sizes[i], strata_last_error());
        at += sizes[i];
    }
    strata_session_free(s);
    if (!s || at != N_STEPS) { free(rows); return NULL; }
    return rows;
}

/* A window of 8 rolled back to its first 3 rows, then 5 one-token steps: rows 3..7 must be the
 * plain steps' (the rejected rows left nothing in the KV cache). */
static void check_rollback(const placement *pl, const float *plain) {
    strata_session *s = new_session(pl);
    if (!s) return;
    float *rows = malloc(sizeof(float) * (size_t)V * 8);
    const strata_token junk[8] = {5, 6, 7, 8, 9, 10, 11, 12};
    strata_token win[8];
    memcpy(win, toks + N_PROMPT, 3 * sizeof *win);
    memcpy(win + 3, junk, 5 * sizeof *win); /* rows 3..7 rejected */
    strata_status st = strata_session_decode_gen(s, win, 8, rows, 1);
    if (st == STRATA_OK) st = strata_session_truncate(s, N_PROMPT + 3);
    for (int i = 3; i < 8 && st == STRATA_OK; i++)
        st = strata_session_decode_gen(s, toks + N_PROMPT + i, 1, rows + (size_t)i * (size_t)V, 0);
    double kl = 0;
    CHECK(st == STRATA_OK && rows_match(rows, plain, 8, &kl),
          "%s: after a window rolled back, the plain steps' %s (%s, KL up to %.3g)", pl->name,
          g_close ? "tokens" : "bits", st == STRATA_OK ? "rows differ" : strata_last_error(), kl);
    free(rows);
    strata_session_free(s);
}

static strata_sampler *greedy_sampler(void) {
    strata_sampler_params sp = strata_sampler_default_params();
    sp.temperature = 0.0f;
    strata_sampler *smp = NULL;
    strata_sampler_create(&sp, V, &smp);
    return smp;
}

/* Plain greedy (one token a step) into ref[0..N_STEPS), or through verify windows: drafts right
 * (ref's next tokens, up to 8; 7 for pl->close, windows of up to 8 tokens), wrong, or from the
 * model as its own draft model. */
enum { GREEDY_PLAIN, GREEDY_RIGHT, GREEDY_WRONG, GREEDY_SELF_MODEL, GREEDY_SELF_DRAFT };

static void greedy_run(const placement *pl, int mode, const strata_token *ref, strata_token *out,
                       strata_spec_stats *ss) {
    strata_session *s = new_session(pl);
    strata_sampler *smp = greedy_sampler();
    strata_drafter *d = NULL;
    memset(ss, 0, sizeof *ss);
    if (mode == GREEDY_SELF_MODEL) {
        strata_session_params dp = strata_session_default_params();
        dp.backend = STRATA_BACKEND_CUDA;
        dp.n_ctx = 256;
        dp.n_threads = 2;
        CHECK(strata_drafter_model_create(model, model, &dp, &d) == STRATA_OK, "%s: draft model: %s", pl->name,
              strata_last_error());
    }
    if (mode == GREEDY_SELF_DRAFT && s)
        CHECK(strata_drafter_self_create(s, &d) == STRATA_OK, "%s: self-drafter: %s", pl->name, strata_last_error());
    float *lg = malloc(sizeof(float) * (size_t)V);
    strata_token hist[N_PROMPT + N_STEPS + 16], last;
    memcpy(hist, toks, N_PROMPT * sizeof *hist);
    int64_t nh = N_PROMPT;
    int n = 0;
    /* the prompt's last logits: decode it again on a truncated cache */
    strata_status st = s ? strata_session_truncate(s, N_PROMPT - 1) : STRATA_ERR_INVALID_ARG;
    if (st == STRATA_OK) st = strata_session_decode(s, toks + N_PROMPT - 1, 1, lg, 0);
    if (st == STRATA_OK) st = strata_sampler_sample(smp, lg, &last);
    if (st == STRATA_OK) out[n++] = last;
    while (st == STRATA_OK && n < N_STEPS) {
        strata_token draft[STRATA_DRAFT_MAX], got[STRATA_DRAFT_MAX + 1];
        int32_t nd = 0, ng = 0;
        hist[nh++] = last;
        if (mode == GREEDY_PLAIN) {
            st = strata_session_decode_gen(s, &last, 1, lg, 0);
            if (st == STRATA_OK) st = strata_sampler_sample(smp, lg, &last);
            out[n++] = last;
            continue;
        }
        const int right = pl->close ? 7 : 8;
        if (mode == GREEDY_RIGHT) for (; nd < right && n + nd < N_STEPS; nd++) draft[nd] = ref[n + nd];
        if (mode == GREEDY_WRONG) for (; nd < 4; nd++) draft[nd] = (strata_token)((ref[n] + 3 * nd + 1) % V);
        if (d) st = strata_drafter_propose(d, hist, nh, 5, draft, &nd);
        if (st == STRATA_OK) st = strata_session_speculate(s, smp, last, draft, nd, got, &ng);
        for (int i = 0; st == STRATA_OK && i < ng && n < N_STEPS; i++) out[n++] = got[i];
        for (int i = 0; i + 1 < ng; i++) hist[nh++] = got[i];
        if (ng > 0) last = got[ng - 1];
    }
    CHECK(st == STRATA_OK, "%s: greedy run %d: %s", pl->name, mode, strata_last_error());
    if (s) strata_session_get_spec_stats(s, ss);
    free(lg);
    strata_drafter_free(d);
    strata_sampler_free(smp);
    strata_session_free(s);
}

static void check_greedy(const placement *pl) {
    strata_token ref[N_STEPS], got[N_STEPS];
    strata_spec_stats ss;
    memset(ref, 0, sizeof ref);
    greedy_run(pl, GREEDY_PLAIN, ref, ref, &ss);
    const char *what[] = {"", "right drafts, windows of 8", "wrong drafts", "the model as its own draft model",
                          "the self-draft"};
    const int self_ok = pl->expert_cache > 0 || pl->n_cpu_moe > 0; /* some experts on the GPU, some not */
    if (!self_ok) {
        strata_session *s = new_session(pl);
        strata_drafter *d = NULL;
        CHECK(s && strata_drafter_self_create(s, &d) == STRATA_ERR_UNSUPPORTED && !d, "%s: self-draft refused (%s)",
              pl->name, strata_last_error());
        strata_session_free(s);
    }
    for (int mode = GREEDY_RIGHT; mode <= (self_ok ? GREEDY_SELF_DRAFT : GREEDY_SELF_MODEL); mode++) {
        memset(got, 0xff, sizeof got);
        greedy_run(pl, mode, ref, got, &ss);
        CHECK(!memcmp(ref, got, sizeof ref), "%s, %s: plain greedy's tokens", pl->name, what[mode]);
        if (mode == GREEDY_SELF_DRAFT) {
            printf("%s, the self-draft: %lld of %lld drafts accepted in %lld windows\n", pl->name,
                   (long long)ss.accepted, (long long)ss.drafted, (long long)ss.windows);
            CHECK(ss.drafted > 0 && ss.accepted > 0, "%s, the self-draft: drafts accepted", pl->name);
        } else if (mode != GREEDY_WRONG)
            CHECK(ss.drafted > 0 && ss.accepted == ss.drafted, "%s, %s: every draft accepted (%lld of %lld)",
                  pl->name, what[mode], (long long)ss.accepted, (long long)ss.drafted);
        else
            CHECK(ss.accepted == 0 && ss.windows > 0, "%s, %s: none accepted (%lld)", pl->name, what[mode],
                  (long long)ss.accepted);
    }
}

int main(void) {
    strata_backend_info bi;
    CHECK(strata_backend_query(STRATA_BACKEND_CUDA, &bi) == STRATA_OK, "backend query");
    if (!bi.available) {
        SKIP("GPU verify windows: CUDA unavailable: %s", bi.detail);
        return test_report();
    }
    strata_model *m = NULL;
    if (!test_tiny_load(2, &m)) return test_report();
    model = m;
    strata_model_info mi;
    strata_model_get_info(m, &mi);
    V = mi.n_vocab;
    int64_t n = 0;
    CHECK(strata_tokenize(m, TEXT, (int64_t)strlen(TEXT), 1, 0, toks, 512, &n) == STRATA_OK &&
              n >= N_PROMPT + N_STEPS, "tokenize: %lld tokens", (long long)n);
    printf("GPU: %s\n", bi.detail);
    const int ones[N_STEPS] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const int mixed[] = {8, 5, 3, 1, 7};
    const int twos[] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
    for (size_t p = 0; p < sizeof PLACEMENTS / sizeof PLACEMENTS[0]; p++) {
        const placement *pl = &PLACEMENTS[p];
        g_close = follows_residency(pl);
        float *plain = window_rows(pl, ones, N_STEPS);
        float *win = window_rows(pl, mixed, 5);
        float *win2 = window_rows(pl, twos, 12);
        double kl = 0, kl2 = 0;
        const int same = plain && win && rows_match(plain, win, N_STEPS, &kl);
        const int same2 = plain && win2 && rows_match(plain, win2, N_STEPS, &kl2);
        const char *eq = g_close ? "match (argmax, KL <= 1e-4)" : "equal to";
        printf("%s: windows of 8, 5, 3, 1, 7: %s; windows of 2: %s the one-token steps' bits (KL up to %.3g, %.3g)\n",
               pl->name, same ? eq : "DIFFER from", same2 ? eq : "DIFFER from", kl, kl2);
        CHECK(same, "%s: windows of 8, 5, 3, 1, 7 give the one-token steps' %s", pl->name, g_close ? "rows" : "bits");
        CHECK(same2, "%s: windows of 2 give the one-token steps' %s", pl->name, g_close ? "rows" : "bits");
        if (plain) check_rollback(pl, plain);
        check_greedy(pl);
        free(plain);
        free(win);
        free(win2);
    }
    strata_model_free(m);
    return test_report();
}
