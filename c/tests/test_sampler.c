/* test_sampler.c - the public sampler against values worked out independently here: greedy is
 * the argmax (lowest id on ties) and top-k=1 agrees with it, the same seed gives the same draws,
 * top-p / min-p keep exactly the expected sets on constructed logits, penalties change the logits
 * by the exact amounts (checked through greedy picks at known margins and through draw
 * frequencies), and 20000 draws at temperature 1 follow the softmax of 4 logits within 2%. */
#include "sampler.h"
#include "strata.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static strata_sampler_params plain(void) {
    strata_sampler_params p = strata_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

static strata_sampler *make(const strata_sampler_params *p, int n_vocab) {
    strata_sampler *s = NULL;
    strata_status st = strata_sampler_create(p, n_vocab, &s);
    CHECK(st == STRATA_OK && s, "create: %s", strata_last_error());
    return s;
}

/* Counts draws of each token over n samples (no accept). */
static void histogram(strata_sampler *s, const float *logits, int n_vocab, int n, int *hist) {
    memset(hist, 0, sizeof(int) * (size_t)n_vocab);
    for (int i = 0; i < n; i++) {
        strata_token t = -1;
        if (strata_sampler_sample(s, logits, &t) != STRATA_OK || t < 0 || t >= n_vocab) {
            CHECK(0, "sample failed: %s", strata_last_error());
            return;
        }
        hist[t]++;
    }
}

static void test_defaults_and_errors(void) {
    strata_sampler_params p = strata_sampler_default_params();
    CHECK(fabsf(p.temperature - 0.8f) < 1e-6f && p.top_k == 40 && fabsf(p.top_p - 0.95f) < 1e-6f &&
          fabsf(p.min_p - 0.05f) < 1e-6f && p.repeat_penalty == 1.0f && p.repeat_last_n == 64 &&
          p.seed == 0x5eed, "defaults");
    strata_sampler *s = NULL;
    CHECK(strata_sampler_create(&p, 0, &s) == STRATA_ERR_INVALID_ARG && !s, "n_vocab 0");
    CHECK(strstr(strata_last_error(), "n_vocab") != NULL, "message names n_vocab: %s",
          strata_last_error());
    p.repeat_penalty = 0.0f;
    CHECK(strata_sampler_create(&p, 4, &s) == STRATA_ERR_INVALID_ARG, "repeat_penalty 0");
    CHECK(strstr(strata_last_error(), "repeat_penalty") != NULL, "message: %s", strata_last_error());
    p = strata_sampler_default_params();
    p.repeat_last_n = -1;
    CHECK(strata_sampler_create(&p, 4, &s) == STRATA_ERR_INVALID_ARG, "repeat_last_n -1");
    CHECK(strata_sampler_create(NULL, 4, NULL) == STRATA_ERR_INVALID_ARG, "out NULL");
    s = make(NULL, 4);
    strata_token t;
    float nanl[4] = {NAN, NAN, -INFINITY, NAN};
    CHECK(strata_sampler_sample(s, nanl, &t) == STRATA_ERR_INVALID_ARG, "no finite logit");
    CHECK(strata_sampler_sample(s, NULL, &t) == STRATA_ERR_INVALID_ARG, "NULL logits");
    strata_sampler_free(s);
    strata_sampler_free(NULL);
    strata_sampler_reset(NULL);
    strata_sampler_accept(NULL, 1);
}

static void test_greedy(void) {
    test_rng r = {12345};
    enum { V = 1000 };
    static float l[V];
    strata_sampler_params g = plain();
    g.temperature = 0.0f;
    strata_sampler_params k1 = strata_sampler_default_params();
    k1.top_k = 1;
    k1.seed = 99;
    strata_sampler *sg = make(&g, V), *sk = make(&k1, V);
    for (int trial = 0; trial < 50; trial++) {
        for (int i = 0; i < V; i++) l[i] = test_rng_float(&r) * 10.0f;
        int best = 0;
        for (int i = 1; i < V; i++) if (l[i] > l[best]) best = i;
        strata_token a = -1, b = -1;
        CHECK(strata_sampler_sample(sg, l, &a) == STRATA_OK && a == best, "greedy %d vs %d", a, best);
        CHECK(strata_sampler_sample(sk, l, &b) == STRATA_OK && b == best, "top-k 1 %d vs %d", b, best);
    }
    /* ties: lowest id */
    for (int i = 0; i < V; i++) l[i] = 0.0f;
    l[700] = 3.0f; l[300] = 3.0f; l[900] = 3.0f;
    strata_token a = -1, b = -1;
    strata_sampler_sample(sg, l, &a);
    strata_sampler_sample(sk, l, &b);
    CHECK(a == 300 && b == 300, "ties go to the lowest id: %d %d", a, b);
    /* the greedy fast path (no penalty active) and the full one (a penalty with history) agree on
     * NaN as -inf, +inf winning, and no finite logit refused */
    {
        float odd[6] = {NAN, -INFINITY, 2.0f, NAN, 2.0f, 1.0f};
        strata_sampler *gs = make(&g, 6);
        CHECK(strata_sampler_sample(gs, odd, &a) == STRATA_OK && a == 2, "greedy, NaNs: %d", a);
        odd[5] = INFINITY;
        CHECK(strata_sampler_sample(gs, odd, &a) == STRATA_OK && a == 5, "greedy, +inf wins: %d", a);
        float none[3] = {NAN, -INFINITY, NAN};
        strata_sampler_free(gs);
        gs = make(&g, 3);
        CHECK(strata_sampler_sample(gs, none, &a) == STRATA_ERR_INVALID_ARG, "greedy, no finite logit refused");
        strata_sampler_free(gs);
        strata_sampler_params gp = g;
        gp.repeat_penalty = 4.0f; /* history {2}: logit 2 becomes 0.5, so 4 (2.0) wins */
        gs = make(&gp, 6);
        strata_sampler_accept(gs, 2);
        odd[5] = 1.0f;
        CHECK(strata_sampler_sample(gs, odd, &a) == STRATA_OK && a == 4, "greedy with a penalty: %d", a);
        strata_sampler_free(gs);
    }
    /* negative temperature is greedy too */
    g.temperature = -1.0f;
    strata_sampler *sn = make(&g, V);
    strata_sampler_sample(sn, l, &a);
    CHECK(a == 300, "temperature < 0 greedy: %d", a);
    strata_sampler_free(sn);
    strata_sampler_free(sg);
    strata_sampler_free(sk);
}

static void test_seed(void) {
    enum { V = 64, N = 200 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)(i % 7) * 0.3f;
    strata_sampler_params p = strata_sampler_default_params();
    p.temperature = 1.5f;
    p.min_p = 0.0f;
    p.seed = 42;
    strata_sampler *a = make(&p, V), *b = make(&p, V);
    p.seed = 43;
    strata_sampler *c = make(&p, V);
    strata_token ta[N], tb[N], tc[N];
    int diff = 0;
    for (int i = 0; i < N; i++) {
        strata_sampler_sample(a, l, &ta[i]);
        strata_sampler_sample(b, l, &tb[i]);
        strata_sampler_sample(c, l, &tc[i]);
        diff += ta[i] != tc[i];
    }
    CHECK(memcmp(ta, tb, sizeof ta) == 0, "same seed, same tokens");
    CHECK(diff > N / 2, "another seed gives other tokens (%d of %d differ)", diff, N);
    strata_sampler_reset(a);
    int same = 1;
    for (int i = 0; i < N; i++) {
        strata_token t;
        strata_sampler_sample(a, l, &t);
        same &= t == ta[i];
    }
    CHECK(same, "reset reseeds: the same sequence again");
    strata_sampler_free(a);
    strata_sampler_free(b);
    strata_sampler_free(c);
}

/* Softmax of 4 logits vs 20000 draws. */
static void test_distribution(void) {
    enum { V = 4, N = 20000 };
    const float l[V] = {1.0f, 2.0f, 0.5f, -1.0f};
    double e[V], sum = 0;
    for (int i = 0; i < V; i++) sum += e[i] = exp(l[i]);
    strata_sampler_params p = plain();
    p.seed = 7;
    strata_sampler *s = make(&p, V);
    int h[V];
    histogram(s, l, V, N, h);
    for (int i = 0; i < V; i++) {
        double f = (double)h[i] / N, q = e[i] / sum;
        CHECK(fabs(f - q) < 0.02, "token %d: frequency %.4f vs softmax %.4f", i, f, q);
    }
    strata_sampler_free(s);
    /* temperature 2 flattens: softmax of l/2 */
    p.temperature = 2.0f;
    s = make(&p, V);
    histogram(s, l, V, N, h);
    sum = 0;
    for (int i = 0; i < V; i++) sum += e[i] = exp(l[i] / 2.0);
    for (int i = 0; i < V; i++) {
        double f = (double)h[i] / N, q = e[i] / sum;
        CHECK(fabs(f - q) < 0.02, "T=2 token %d: frequency %.4f vs %.4f", i, f, q);
    }
    strata_sampler_free(s);
}

/* The kept set: tokens drawn at least once in many draws at a high temperature. */
static int kept_set(const strata_sampler_params *p, const float *l, int V, int *kept) {
    strata_sampler *s = make(p, V);
    int h[64];
    histogram(s, l, V, 20000, h);
    strata_sampler_free(s);
    int n = 0;
    for (int i = 0; i < V; i++) { kept[i] = h[i] > 0; n += kept[i]; }
    return n;
}

static void test_filters(void) {
    enum { V = 8 };
    /* probabilities 0.4 0.2 0.15 0.1 0.08 0.05 0.02 (id 6) and 0 (id 7, -inf) at T=1 */
    const double pr[V] = {0.4, 0.2, 0.15, 0.1, 0.08, 0.05, 0.02, 0.0};
    float l[V];
    for (int i = 0; i < V; i++) l[i] = pr[i] > 0 ? (float)log(pr[i]) : -INFINITY;
    int kept[V];
    strata_sampler_params p = plain();
    p.temperature = 5.0f; /* flat, so every kept token is drawn */

    p.top_p = 0.7f; /* 0.4 + 0.2 = 0.6 < 0.7 <= 0.75: keep 3 */
    int n = kept_set(&p, l, V, kept);
    CHECK(n == 3 && kept[0] && kept[1] && kept[2], "top-p 0.7 keeps {0,1,2}: %d", n);
    p.top_p = 0.1f; /* below the first: keep 1 */
    n = kept_set(&p, l, V, kept);
    CHECK(n == 1 && kept[0], "top-p 0.1 keeps the top token: %d", n);
    p.top_p = 0.999f;
    n = kept_set(&p, l, V, kept);
    CHECK(n == 7 && !kept[7], "top-p 0.999 keeps all finite: %d", n);
    p.top_p = 1.0f;

    p.min_p = 0.3f; /* >= 0.12: {0.4, 0.2, 0.15} */
    n = kept_set(&p, l, V, kept);
    CHECK(n == 3 && kept[0] && kept[1] && kept[2], "min-p 0.3 keeps 3: %d", n);
    p.min_p = 0.19f; /* >= 0.076: 5 tokens */
    n = kept_set(&p, l, V, kept);
    CHECK(n == 5 && kept[4] && !kept[5], "min-p 0.2 keeps 5: %d", n);
    p.min_p = 0.0f;

    p.top_k = 4;
    n = kept_set(&p, l, V, kept);
    CHECK(n == 4 && kept[0] && kept[1] && kept[2] && kept[3], "top-k 4: %d", n);
    /* top-k then top-p on the renormalized... no: top-p sees the softmax of the kept k */
    p.top_k = 2; /* kept 0.4/0.6=0.667, 0.333; top-p 0.5 keeps 1 */
    p.top_p = 0.5f;
    n = kept_set(&p, l, V, kept);
    CHECK(n == 1 && kept[0], "top-k 2 then top-p 0.5 keeps 1: %d", n);
    p.top_p = 0.7f; /* 0.667 < 0.7: keep both */
    n = kept_set(&p, l, V, kept);
    CHECK(n == 2 && kept[0] && kept[1], "top-k 2 then top-p 0.7 keeps 2: %d", n);

    /* top-k with many ties on a large vocabulary picks the lowest ids */
    enum { W = 5000 };
    static float big[W];
    for (int i = 0; i < W; i++) big[i] = (float)(i % 3);
    strata_sampler_params q = plain();
    q.top_k = 10;
    q.temperature = 100.0f;
    strata_sampler *s = make(&q, W);
    int ok = 1;
    for (int i = 0; i < 2000; i++) {
        strata_token t;
        strata_sampler_sample(s, big, &t);
        ok &= (t % 3 == 2) && t < 30;
    }
    CHECK(ok, "top-k 10 of tied logits keeps ids 2, 5, ..., 29");
    strata_sampler_free(s);
}

static void test_penalties(void) {
    enum { V = 6 };
    /* repetition penalty 2: token 0 at 3.0 -> 1.5, token 1 at -1.0 -> -2.0 */
    strata_sampler_params p = plain();
    p.temperature = 0.0f;
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 4;
    float l[V] = {3.0f, -1.0f, 1.6f, -1.9f, -5.0f, -5.0f};
    strata_sampler *s = make(&p, V);
    strata_token t;
    strata_sampler_sample(s, l, &t);
    CHECK(t == 0, "no history: argmax 0 (%d)", t);
    strata_sampler_accept(s, 0);
    strata_sampler_accept(s, 0); /* distinct tokens: penalized once */
    strata_sampler_sample(s, l, &t);
    CHECK(t == 2, "3.0/2 = 1.5 < 1.6 (%d)", t);
    strata_sampler_free(s);
    float l2[V] = {1.4f, -1.0f, -1.9f, -5.0f, -5.0f, -5.0f};
    l2[0] = -3.0f; /* everything negative: token 1 at -1.0 -> -2.0 falls below token 2 */
    s = make(&p, V);
    strata_sampler_accept(s, 1);
    strata_sampler_sample(s, l2, &t);
    CHECK(t == 2, "-1.0*2 = -2.0 < -1.9 (%d)", t);
    /* the window: after 4 more tokens, token 1 leaves it */
    for (int i = 0; i < 4; i++) strata_sampler_accept(s, 5);
    strata_sampler_sample(s, l2, &t);
    CHECK(t == 1, "token 1 left the 4-token window (%d)", t);
    strata_sampler_reset(s);
    strata_sampler_accept(s, 1);
    strata_sampler_reset(s);
    strata_sampler_sample(s, l2, &t);
    CHECK(t == 1, "reset clears the history (%d)", t);
    strata_sampler_free(s);

    /* frequency 0.5 and presence 0.25: token 0 seen 3 times: 2.0 - 1.5 - 0.25 = 0.25 */
    p = plain();
    p.temperature = 0.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    p.repeat_last_n = 16;
    float l3[V] = {2.0f, 0.26f, 0.24f, 0.0f, 0.0f, 0.0f};
    s = make(&p, V);
    for (int i = 0; i < 3; i++) strata_sampler_accept(s, 0);
    strata_sampler_sample(s, l3, &t);
    CHECK(t == 1, "2.0 - 3*0.5 - 0.25 = 0.25 lies between 0.24 and 0.26 (%d)", t);
    l3[1] = 0.2f;
    strata_sampler_sample(s, l3, &t);
    CHECK(t == 0, "0.25 > 0.24 (%d)", t);
    strata_sampler_free(s);

    /* exact values through the distribution: both penalties shift logit 0 by -1 -> the draws of
     * {0, 1} with logits {1, 0} after penalty become 50/50 */
    p = plain();
    p.presence_penalty = 0.4f;
    p.frequency_penalty = 0.3f; /* 2 occurrences: 0.6 + 0.4 = 1.0 */
    p.seed = 3;
    float l4[2] = {1.0f, 0.0f};
    s = make(&p, 2);
    strata_sampler_accept(s, 0);
    strata_sampler_accept(s, 0);
    int h[2];
    histogram(s, l4, 2, 20000, h);
    CHECK(fabs(h[0] / 20000.0 - 0.5) < 0.02, "penalized to equal logits: %.4f", h[0] / 20000.0);
    strata_sampler_free(s);
    /* the input logits are never modified */
    CHECK(l4[0] == 1.0f && l4[1] == 0.0f, "logits untouched");
}

/* The one-pass top-k path against the full chain (st_sampler_force_full) on the same inputs and
 * seeds: the same token at every step, through ties (logits on a coarse grid), NaN and +-inf,
 * penalties of both signs over the accepted history, and top_k from 1 to n_vocab - 1; and the
 * same errors where no logit is finite or every one is -inf after the penalties. */
static void test_topk_path(void) {
    test_rng r = {0x7e57ab1eULL};
    const int V = 3001;
    float *l = malloc(sizeof(float) * V);
    const int ks[] = {1, 2, 5, 40, 100, V - 1};
    int steps = 0, same = 0;
    for (int cfg = 0; cfg < 24; cfg++) {
        strata_sampler_params p = strata_sampler_default_params();
        p.top_k = ks[cfg % 6];
        p.seed = 1000u + (uint64_t)cfg;
        p.temperature = cfg % 3 == 0 ? 0.5f : 1.3f;
        p.top_p = cfg % 4 == 0 ? 1.0f : 0.9f;
        p.min_p = cfg % 5 == 0 ? 0.0f : 0.02f;
        if (cfg % 2) { p.repeat_penalty = 1.3f; p.frequency_penalty = 0.2f; p.presence_penalty = cfg % 4 == 1 ? -0.5f : 0.4f; }
        p.repeat_last_n = cfg % 2 ? 16 : 64;
        strata_sampler *a = make(&p, V), *b = make(&p, V);
        if (!a || !b) { strata_sampler_free(a); strata_sampler_free(b); continue; }
        st_sampler_force_full(b, 1);
        for (int step = 0; step < 60; step++) {
            for (int i = 0; i < V; i++) {
                const float u = test_rng_float(&r);
                l[i] = roundf(u * 8.0f) * 0.5f; /* a coarse grid: many ties */
            }
            if (step % 7 == 3) l[(step * 31) % V] = NAN;
            if (step % 11 == 5) l[(step * 17) % V] = INFINITY;
            if (step % 5 == 1) for (int i = 0; i < V; i += 3) l[i] = -INFINITY;
            strata_token ta = -1, tb = -2;
            const strata_status sa = strata_sampler_sample(a, l, &ta), sb = strata_sampler_sample(b, l, &tb);
            steps++;
            same += sa == sb && (sa != STRATA_OK || ta == tb);
            if (sa == STRATA_OK) { strata_sampler_accept(a, ta); strata_sampler_accept(b, tb); }
        }
        /* no finite logit; then every logit -inf */
        for (int i = 0; i < V; i++) l[i] = i % 2 ? NAN : INFINITY;
        strata_token ta, tb;
        same += strata_sampler_sample(a, l, &ta) == STRATA_ERR_INVALID_ARG &&
                strata_sampler_sample(b, l, &tb) == STRATA_ERR_INVALID_ARG;
        for (int i = 0; i < V; i++) l[i] = i == 0 ? 1.0f : -INFINITY;
        same += strata_sampler_sample(a, l, &ta) == STRATA_OK && strata_sampler_sample(b, l, &tb) == STRATA_OK && ta == 0 && tb == 0;
        steps += 2;
        strata_sampler_free(a);
        strata_sampler_free(b);
    }
    printf("top-k path vs full chain: %d of %d steps agree\n", same, steps);
    CHECK(same == steps, "the top-k path differs from the full chain in %d of %d steps", steps - same, steps);
    free(l);
}

typedef struct { float v; int32_t id; } pair_t;
static int pair_cmp(const void *a, const void *b) { /* candidate order, NaN as -inf */
    const pair_t *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* strata_sampler_sample_top on the top_needed best of each row against strata_sampler_sample on
 * the row: the same tokens and errors over ties, NaN, +-inf and lowering penalties; 0 needed
 * where candidates cannot decide. */
static void test_sample_top(void) {
    test_rng r = {0x5a3b1e70ULL};
    const int V = 2003;
    float *l = malloc(sizeof(float) * V), *cv = malloc(sizeof(float) * V);
    strata_token *ci = malloc(sizeof(strata_token) * V);
    pair_t *pr = malloc(sizeof(pair_t) * V);
    int steps = 0, same = 0;
    for (int cfg = 0; cfg < 12; cfg++) {
        strata_sampler_params p = strata_sampler_default_params();
        p.top_k = cfg % 3 == 0 ? 1 : cfg % 3 == 1 ? 40 : 300;
        p.seed = 77u + (uint64_t)cfg;
        p.temperature = cfg % 2 ? 0.7f : 1.5f;
        p.min_p = cfg % 4 == 0 ? 0.0f : 0.05f;
        if (cfg % 2) { p.repeat_penalty = 1.2f; p.frequency_penalty = 0.1f; p.presence_penalty = 0.3f; }
        p.repeat_last_n = 32;
        strata_sampler *a = make(&p, V), *b = make(&p, V);
        if (!a || !b) { strata_sampler_free(a); strata_sampler_free(b); continue; }
        const int32_t need = strata_sampler_top_needed(a);
        CHECK(need == p.top_k + 32, "top_needed %d for top_k %d", (int)need, p.top_k);
        for (int step = 0; step < 50; step++) {
            for (int i = 0; i < V; i++) l[i] = roundf(test_rng_float(&r) * 6.0f) * 0.5f;
            if (step % 6 == 2) l[(step * 13) % V] = NAN;
            if (step % 9 == 4) l[(step * 7) % V] = INFINITY;
            for (int i = 0; i < V; i++) { pr[i].v = isnan(l[i]) ? -INFINITY : l[i]; pr[i].id = i; }
            qsort(pr, (size_t)V, sizeof *pr, pair_cmp);
            for (int i = 0; i < need; i++) { ci[i] = pr[i].id; cv[i] = l[pr[i].id]; }
            strata_token ta = -1, tb = -2;
            const strata_status sa = strata_sampler_sample_top(a, ci, cv, need, &ta);
            const strata_status sb = strata_sampler_sample(b, l, &tb);
            steps++;
            same += sa == sb && (sa != STRATA_OK || ta == tb);
            if (sa == STRATA_OK) { strata_sampler_accept(a, ta); strata_sampler_accept(b, tb); }
        }
        strata_token t;
        CHECK(strata_sampler_sample_top(a, ci, cv, need - 1, &t) == STRATA_ERR_INVALID_ARG, "too few candidates");
        strata_sampler_free(a);
        strata_sampler_free(b);
    }
    printf("sample_top vs sample over the row: %d of %d steps agree\n", same, steps);
    CHECK(same == steps, "sample_top differs from sample in %d of %d steps", steps - same, steps);
    /* parameters that candidates cannot serve */
    strata_sampler_params q = strata_sampler_default_params();
    int zero = 0;
    for (int c = 0; c < 5; c++) {
        strata_sampler_params x = q;
        if (c == 0) x.top_k = 0;
        if (c == 1) x.temperature = 0.0f;
        if (c == 2) x.repeat_penalty = 0.9f;
        if (c == 3) x.presence_penalty = -0.1f;
        if (c == 4) x.top_k = V;
        strata_sampler *z = make(&x, V);
        zero += z && strata_sampler_top_needed(z) == 0;
        strata_sampler_free(z);
    }
    CHECK(zero == 5, "top_needed is 0 where candidates cannot decide (%d of 5)", zero);
    free(l); free(cv); free(ci); free(pr);
}

int main(void) {
    test_topk_path();
    test_sample_top();
    test_defaults_and_errors();
    test_greedy();
    test_seed();
    test_distribution();
    test_filters();
    test_penalties();
    return test_report();
}
