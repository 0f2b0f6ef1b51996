/* test_speculate.c - speculative decoding (issue 31): the n-gram drafter's proposals; the sampler's
 * verify rule keeps the sampler's distribution (a chi-square check on a small vocabulary) and
 * draws what strata_sampler_sample draws for the same seed;
 * greedy output through verify windows is plain greedy's, whatever the drafts (right, wrong,
 * prompt lookup, the model as its own draft model, windows up to 8); a window's rejected rows
 * leave the KV cache as if they never ran; a draft model with another vocabulary is refused; the
 * draft policy's choices on made-up cost tables, its probes, and its measured table. */
#include "test.h"
#include "strata.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static strata_model *model;
static int32_t V;

/* ---------------------------------------------------------------------------------------------
 * The n-gram drafter
 * ------------------------------------------------------------------------------------------- */

static void test_ngram(void) {
    strata_drafter *d = NULL;
    CHECK(strata_drafter_ngram_create(0, 3, &d) == STRATA_ERR_INVALID_ARG && !d, "ngram_min 0 refused");
    CHECK(strata_drafter_ngram_create(3, 2, &d) == STRATA_ERR_INVALID_ARG, "min > max refused");
    CHECK(strata_drafter_ngram_create(2, 3, &d) == STRATA_OK && d, "create");
    if (!d) return;
    const strata_token h[] = {5, 6, 7, 8, 9, 1, 2, 5, 6, 7};
    strata_token out[8];
    int32_t n = -1;
    CHECK(strata_drafter_propose(d, h, 10, 4, out, &n) == STRATA_OK && n == 4 && out[0] == 8 && out[1] == 9 &&
              out[2] == 1 && out[3] == 2, "the tokens after the earlier 5 6 7: %d proposed", (int)n);
    const strata_token h2[] = {9, 9, 4, 4};
    CHECK(strata_drafter_propose(d, h2, 4, 4, out, &n) == STRATA_OK && n == 0, "nothing to find: none");
    const strata_token h3[] = {3, 3, 1, 2};
    CHECK(strata_drafter_propose(d, h3, 4, 3, out, &n) == STRATA_OK && n == 3 && out[0] == 5 &&
              out[1] == 6 && out[2] == 7, "found in an earlier history (1 2 -> 5 6 7): %d", (int)n);
    CHECK(strata_drafter_propose(d, h, 10, STRATA_DRAFT_MAX + 1, out, &n) == STRATA_ERR_INVALID_ARG,
          "max past STRATA_DRAFT_MAX refused");
    strata_drafter_free(d);
}

/* ---------------------------------------------------------------------------------------------
 * The verify rule keeps the distribution
 * ------------------------------------------------------------------------------------------- */

static void test_verify_distribution(void) {
    enum { NV = 8, DRAWS = 200000 };
    const float logits[NV] = {1.0f, 0.5f, 2.0f, -1.0f, 0.0f, 1.5f, -0.5f, 0.2f};
    strata_sampler_params sp = strata_sampler_default_params();
    sp.temperature = 0.9f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = 12345;
    strata_sampler *s = NULL;
    CHECK(strata_sampler_create(&sp, NV, &s) == STRATA_OK, "sampler");
    if (!s) return;
    double p[NV], mx = -1e9, sum = 0;
    for (int i = 0; i < NV; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < NV; i++) sum += p[i] = exp((logits[i] - mx) / 0.9);
    for (int i = 0; i < NV; i++) p[i] /= sum;
    const strata_token drafts[3] = {2, 3, 7}; /* likely, unlikely, middling */
    for (int k = 0; k < 3; k++) {
        long count[NV] = {0}, acc = 0;
        for (int it = 0; it < DRAWS; it++) {
            strata_token t;
            int a = 0;
            strata_sampler_verify(s, logits, drafts[k], &t, &a);
            count[t]++;
            acc += a;
            if (a && t != drafts[k]) acc = -1000000000L;
        }
        double chi2 = 0;
        for (int i = 0; i < NV; i++) {
            const double e = p[i] * DRAWS;
            chi2 += (count[i] - e) * (count[i] - e) / e;
        }
        /* 7 degrees of freedom: P(chi2 > 24.3) = 0.001 */
        CHECK(chi2 < 24.3, "draft %d: the tokens' distribution is the sampler's (chi2 %.1f)", (int)drafts[k], chi2);
        CHECK(fabs((double)acc / DRAWS - p[drafts[k]]) < 0.01, "draft %d accepted %.4f of the time, p %.4f",
              (int)drafts[k], (double)acc / DRAWS, p[drafts[k]]);
    }
    strata_sampler_free(s);
    strata_sampler *s2 = NULL; /* the same seed: verify's tokens are sample's, whatever the drafts */
    CHECK(strata_sampler_create(&sp, NV, &s) == STRATA_OK && strata_sampler_create(&sp, NV, &s2) == STRATA_OK,
          "two samplers");
    int same = 1;
    for (int it = 0; s && s2 && it < 1000; it++) {
        strata_token t1, t2;
        int a = 0;
        strata_sampler_verify(s, logits, (strata_token)(it % NV), &t1, &a);
        strata_sampler_sample(s2, logits, &t2);
        same &= t1 == t2 && a == (t1 == (strata_token)(it % NV));
    }
    CHECK(same, "verify draws sample's tokens for the same seed");
    strata_sampler_free(s);
    strata_sampler_free(s2);
    sp.temperature = 0.0f; /* greedy: accepted exactly when it is the argmax */
    CHECK(strata_sampler_create(&sp, NV, &s) == STRATA_OK, "greedy sampler");
    strata_token t;
    int a = -1;
    CHECK(strata_sampler_verify(s, logits, 2, &t, &a) == STRATA_OK && t == 2 && a == 1, "greedy: the argmax accepted");
    CHECK(strata_sampler_verify(s, logits, 5, &t, &a) == STRATA_OK && t == 2 && a == 0, "greedy: another refused");
    CHECK(strata_sampler_verify(s, logits, NV, &t, &a) == STRATA_ERR_INVALID_ARG, "draft outside the vocabulary");
    strata_sampler_free(s);
}

/* ---------------------------------------------------------------------------------------------
 * Greedy through windows
 * ------------------------------------------------------------------------------------------- */

enum { N_PROMPT = 6, N_GEN = 48 };
static const strata_token PROMPT[N_PROMPT] = {36, 2679, 597, 12, 294, 14}; /* "Dictionary, n." */

static int64_t g_ram = 0; /* ram_budget of the next sessions (0: none) */

static strata_session *new_session(int n_batch) {
    strata_session_params p = strata_session_default_params();
    p.placement.ram_budget = g_ram;
    p.n_ctx = 256;
    p.n_batch = n_batch;
    p.n_threads = 2;
    strata_session *s = NULL;
    CHECK(strata_session_create(model, &p, &s) == STRATA_OK, "session: %s", strata_last_error());
    return s;
}

static strata_sampler *greedy_sampler(void) {
    strata_sampler_params sp = strata_sampler_default_params();
    sp.temperature = 0.0f;
    strata_sampler *smp = NULL;
    strata_sampler_create(&sp, V, &smp);
    return smp;
}

/* Plain greedy: the prompt, then one token a step. */
static void plain_greedy(strata_token *out) {
    strata_session *s = new_session(512);
    strata_token t;
    strata_session_decode_greedy(s, PROMPT, N_PROMPT, &t);
    for (int i = 0; i < N_GEN; i++) {
        out[i] = t;
        if (i + 1 < N_GEN) strata_session_decode_greedy(s, &t, 1, &t);
    }
    strata_session_free(s);
}

typedef enum { DRAFT_RIGHT, DRAFT_WRONG, DRAFT_NGRAM, DRAFT_MODEL, DRAFT_SELF } draft_mode;

/* Greedy through verify windows with drafts of the given mode, up to max a window; returns the
 * windows run and the drafted / accepted counts in *drafted, *accepted. */
static int spec_greedy(draft_mode mode, int32_t max, const strata_token *ref, strata_token *out, int64_t *drafted,
                       int64_t *accepted) {
    strata_session *s = new_session(max + 1 > 4 ? 4 : 512); /* small batches too: the window is one call */
    strata_sampler *smp = greedy_sampler();
    strata_drafter *d = NULL;
    if (mode == DRAFT_NGRAM) strata_drafter_ngram_create(1, 3, &d);
    if (mode == DRAFT_SELF)
        CHECK(strata_drafter_self_create(s, &d) == STRATA_OK, "self-drafter: %s", strata_last_error());
    if (mode == DRAFT_MODEL) {
        strata_session_params dp = strata_session_default_params();
        dp.n_ctx = 256;
        dp.n_threads = 2;
        CHECK(strata_drafter_model_create(model, model, &dp, &d) == STRATA_OK, "draft model: %s", strata_last_error());
        int32_t n0 = -1; /* max 0: the draft model reads the prompt now, proposes nothing */
        CHECK(d && strata_drafter_propose(d, PROMPT, N_PROMPT, 0, NULL, &n0) == STRATA_OK && n0 == 0,
              "draft model: the prompt read with max 0 (%d)", (int)n0);
    }
    strata_token hist[N_PROMPT + N_GEN + STRATA_DRAFT_MAX + 1];
    memcpy(hist, PROMPT, sizeof PROMPT);
    int64_t nh = N_PROMPT;
    strata_token last;
    float *lg = malloc(sizeof(float) * (size_t)V);
    strata_session_decode(s, PROMPT, N_PROMPT, lg, 0);
    strata_sampler_sample(smp, lg, &last);
    free(lg);
    int n = 0, windows = 0;
    out[n++] = last;
    while (n < N_GEN) {
        strata_token draft[STRATA_DRAFT_MAX], got[STRATA_DRAFT_MAX + 1];
        int32_t nd = 0, ng = 0;
        hist[nh++] = last;
        if (mode == DRAFT_RIGHT) for (nd = 0; nd < max && n + nd < N_GEN; nd++) draft[nd] = ref[n + nd];
        if (mode == DRAFT_WRONG) for (nd = 0; nd < max; nd++) draft[nd] = (strata_token)((ref[n] + 7 * nd + 1) % V);
        if (d) strata_drafter_propose(d, hist, nh, max, draft, &nd);
        if (strata_session_speculate(s, smp, last, draft, nd, got, &ng) != STRATA_OK || ng < 1) {
            CHECK(0, "speculate: %s", strata_last_error());
            break;
        }
        windows++;
        for (int i = 0; i < ng && n < N_GEN; i++) out[n++] = got[i];
        for (int i = 0; i + 1 < ng; i++) hist[nh++] = got[i];
        last = got[ng - 1];
    }
    strata_spec_stats st;
    strata_session_get_spec_stats(s, &st);
    *drafted = st.drafted;
    *accepted = st.accepted;
    strata_drafter_free(d);
    strata_sampler_free(smp);
    strata_session_free(s);
    return windows;
}

static void test_greedy_identity(void) {
    strata_token ref[N_GEN], got[N_GEN];
    plain_greedy(ref);
    const struct { draft_mode mode; int32_t max; const char *name; } cases[] = {
        {DRAFT_RIGHT, 8, "right drafts, windows of 8"}, {DRAFT_RIGHT, 3, "right drafts, windows of 3"},
        {DRAFT_WRONG, 4, "wrong drafts"}, {DRAFT_NGRAM, 8, "prompt lookup"},
        {DRAFT_MODEL, 5, "the model as its own draft model"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t drafted = 0, accepted = 0;
        const int w = spec_greedy(cases[c].mode, cases[c].max, ref, got, &drafted, &accepted);
        CHECK(memcmp(ref, got, sizeof ref) == 0, "%s: plain greedy's text", cases[c].name);
        printf("%s: %d windows, %lld of %lld drafts accepted\n", cases[c].name, w, (long long)accepted,
               (long long)drafted);
        if (cases[c].mode == DRAFT_RIGHT || cases[c].mode == DRAFT_MODEL)
            CHECK(accepted == drafted && drafted > 0, "%s: every draft accepted (%lld of %lld)", cases[c].name,
                  (long long)accepted, (long long)drafted);
        if (cases[c].mode == DRAFT_WRONG) CHECK(accepted == 0, "%s: none accepted", cases[c].name);
    }
}

/* After a window with rejected rows, the next step's logits are those of a session that only ever
 * saw the accepted tokens. */
static void test_rollback(void) {
    strata_token ref[N_GEN];
    plain_greedy(ref);
    strata_session *a = new_session(512), *b = new_session(512);
    strata_sampler *smp = greedy_sampler();
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    strata_session_decode(a, PROMPT, N_PROMPT, NULL, 0);
    strata_session_decode(b, PROMPT, N_PROMPT, NULL, 0);
    /* drafts: 3 right, then 4 wrong: the window keeps ref[0..3] and gives ref[4] */
    strata_token draft[7] = {ref[1], ref[2], ref[3], (strata_token)((ref[4] + 1) % V), 11, 12, 13}, out[8];
    int32_t n = 0;
    CHECK(strata_session_speculate(a, smp, ref[0], draft, 7, out, &n) == STRATA_OK && n == 4 && out[3] == ref[4],
          "3 of 7 drafts accepted, then the model's token (%d tokens)", (int)n);
    CHECK(strata_session_n_past(a) == N_PROMPT + 4, "n_past %d: the rejected rows rolled back", strata_session_n_past(a));
    strata_spec_stats ss;
    CHECK(strata_session_get_spec_stats(a, &ss) == STRATA_OK && ss.windows == 1 && ss.drafted == 4 &&
              ss.accepted == 3 && ss.emitted == 4,
          "stats: the 4 drafts verification reached, 3 accepted (%lld, %lld)", (long long)ss.drafted,
          (long long)ss.accepted);
    strata_session_decode(b, ref, 4, NULL, 0);
    strata_session_decode(a, &ref[4], 1, la, 0);
    strata_session_decode(b, &ref[4], 1, lb, 0);
    CHECK(memcmp(la, lb, sizeof(float) * (size_t)V) == 0, "the next step's logits are the plain session's");
    CHECK(strata_session_speculate(a, smp, ref[5], draft, STRATA_DRAFT_MAX + 1, out, &n) == STRATA_ERR_INVALID_ARG,
          "n_draft past STRATA_DRAFT_MAX refused");
    free(la);
    free(lb);
    strata_sampler_free(smp);
    strata_session_free(a);
    strata_session_free(b);
}

/* ---------------------------------------------------------------------------------------------
 * The draft policy
 * ------------------------------------------------------------------------------------------- */

/* Feeds n unverified proposals, a share `rate` of them matched (evenly spread). */
static void feed(strata_spec_policy *p, int n, double rate) {
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += rate;
        const int m = acc >= 1.0;
        if (m) acc -= 1.0;
        strata_spec_policy_observe_unverified(p, m);
    }
}

/* The cost table learnt from observed steps: a plain step first; before any window a prior slope;
 * a length seen is known, the lengths between interpolated, past the longest extrapolated a
 * little optimistically, so windows are tried where they may pay and dropped where they do not. */
static void test_policy_learning(strata_spec_policy *p) {
    strata_spec_policy_stats st;
    feed(p, 200, 0.9);
    CHECK(strata_spec_policy_choose(p, 8, 0.0) == 0, "a plain step first, whatever the acceptance");
    strata_spec_policy_observe(p, 0, 0, 1.0);
    const int k0 = strata_spec_policy_choose(p, 8, 0.0);
    CHECK(k0 >= 2, "at 0.9 with only the prior slope, a window is tried (%d drafts)", k0);
    /* windows as costly as k + 1 plain steps: far above the estimate, so the first sample is
     * suspect (one-time costs) and the length is tried once more; the second confirms it and the
     * policy stops */
    strata_spec_policy_observe(p, k0, k0, (double)(k0 + 1));
    CHECK(strata_spec_policy_choose(p, 8, 0.0) == k0, "a first sample far above the estimate: tried again");
    strata_spec_policy_observe(p, k0, k0, (double)(k0 + 1));
    int later = 0;
    for (int i = 0; i < 8; i++) later |= strata_spec_policy_choose(p, 8, 0.0) != 0;
    strata_spec_policy_get_stats(p, &st);
    CHECK(!later && fabs(st.window_s[k0] - (k0 + 1)) < 1e-9, "a compute-bound window seen twice: plain steps "
          "(window_s[%d] %.3f)", k0, st.window_s[k0]);
    CHECK(fabs(st.window_s[1] - (1.0 + (double)k0 / k0)) < 1e-9, "lengths below interpolated (%.3f)", st.window_s[1]);
    strata_spec_policy_free(p);
    /* the GPU curve learnt from windows: long windows at 0.9 */
    const double gpu[9] = {1.0, 1.56, 1.9, 2.26, 2.6, 2.9, 3.2, 3.5, 3.8};
    strata_spec_policy_create(8, &p);
    feed(p, 200, 0.9);
    strata_spec_policy_observe(p, 0, 0, 1.0);
    int k = 0, tried[9] = {0};
    for (int i = 0; i < 40; i++) {
        k = strata_spec_policy_choose(p, 8, 0.0);
        if (k > 0) strata_spec_policy_observe(p, k, k, gpu[k]);
        else strata_spec_policy_observe(p, 0, 0, 1.0);
        tried[k] = 1;
    }
    int n_tried = 0;
    for (int i = 1; i <= 8; i++) n_tried += tried[i];
    CHECK(k >= 4 && n_tried <= 5, "the GPU curve learnt by windows: %d drafts after trying %d lengths", k, n_tried);
    strata_spec_policy_free(p);
    /* the same curve where each length's first window costs twice as much (a GPU loading that
     * length's kernels at first launch): the suspect first samples are retried, and the policy
     * still ends on long windows instead of ruling them out after one slow sample */
    strata_spec_policy_create(8, &p);
    feed(p, 200, 0.9);
    strata_spec_policy_observe(p, 0, 0, 1.0);
    int first[9] = {0};
    for (int i = 0; i < 60; i++) {
        k = strata_spec_policy_choose(p, 8, 0.0);
        if (k > 0) strata_spec_policy_observe(p, k, k, first[k]++ ? gpu[k] : 2.0 * gpu[k]);
        else strata_spec_policy_observe(p, 0, 0, 1.0);
    }
    CHECK(k >= 4, "first windows twice as slow: still %d drafts at the end", k);
    strata_spec_policy_free(p);
}

/* One policy per drafter (the CLI's --spec auto): observe_cost teaches a window's cost and
 * nothing else, rate gives the expected tokens a second the choice compares across drafters. */
static void test_policy_cost_and_rate(void) {
    strata_spec_policy *p = NULL, *q = NULL;
    strata_spec_policy_create(4, &p);
    strata_spec_policy_create(4, &q);
    if (!p || !q) { CHECK(0, "create"); strata_spec_policy_free(p); strata_spec_policy_free(q); return; }
    CHECK(strata_spec_policy_rate(p, 0, 0.0) == 0.0, "no plain step observed: rate 0");
    const double costs[5] = {1.0, 1.2, 1.4, 1.6, 1.8};
    strata_spec_policy_set_costs(p, 1.0, costs);
    strata_spec_policy_set_costs(q, 1.0, costs);
    feed(p, 200, 0.9);
    feed(q, 200, 0.2);
    strata_spec_policy_stats a, b;
    strata_spec_policy_get_stats(q, &a);
    CHECK(fabs(strata_spec_policy_rate(p, 0, 0.0) - 1.0) < 1e-12, "plain: one token a plain step");
    const double rp = strata_spec_policy_rate(p, 4, 0.0), rq = strata_spec_policy_rate(q, 4, 0.0);
    CHECK(rp > 2.0 && rq < 1.0 && rp > rq, "rate of 4 drafts at 0.9 %.3f > at 0.2 %.3f", rp, rq);
    CHECK(strata_spec_policy_rate(p, 4, 0.5) < rp, "costly drafts lower the rate");
    CHECK(strata_spec_policy_rate(p, 5, 0.0) == 0.0 && strata_spec_policy_rate(p, -1, 0.0) == 0.0 &&
          strata_spec_policy_rate(NULL, 1, 0.0) == 0.0, "k outside 0..draft_max, or no policy: 0");
    for (int i = 0; i < 40; i++) strata_spec_policy_observe_cost(q, 2, 3.0);
    strata_spec_policy_observe_cost(q, 0, 1.0);
    strata_spec_policy_observe_cost(q, 9, 1.0); /* out of range: ignored */
    strata_spec_policy_get_stats(q, &b);
    CHECK(fabs(b.window_s[2] - 3.0) < 1e-3 && b.acceptance == a.acceptance && b.windows == a.windows &&
              b.plain_steps == a.plain_steps,
          "observe_cost: window_s[2] %.4f, acceptance and counts unchanged", b.window_s[2]);
    strata_spec_policy_free(p);
    strata_spec_policy_free(q);
}

static void test_policy(void) {
    strata_spec_policy *p = NULL;
    CHECK(strata_spec_policy_create(0, &p) == STRATA_ERR_INVALID_ARG && !p, "draft_max 0 refused");
    CHECK(strata_spec_policy_create(STRATA_DRAFT_MAX + 1, &p) == STRATA_ERR_INVALID_ARG && !p, "draft_max 17 refused");
    CHECK(strata_spec_policy_create(8, &p) == STRATA_OK && p, "create: %s", strata_last_error());
    if (!p) return;
    test_policy_learning(p); /* frees p */
    strata_spec_policy_stats st;
    strata_spec_policy_create(8, &p);
    /* the H100 qwen3 curve (a pass of 2 / 4 / 8 tokens: 1.56 / 2.26 / 3.50 one-token passes) */
    const double gpu[9] = {1.0, 1.56, 1.9, 2.26, 2.6, 2.9, 3.2, 3.5, 3.8};
    CHECK(strata_spec_policy_set_costs(p, 1.0, gpu) == STRATA_OK, "set_costs");
    feed(p, 400, 0.9);
    strata_spec_policy_get_stats(p, &st);
    CHECK(fabs(st.acceptance - 0.9) < 0.06, "acceptance estimate %.3f for 0.9 (shrunk to 0.5 a little)", st.acceptance);
    int k = strata_spec_policy_choose(p, 8, 0.0);
    CHECK(k >= 5, "a long window at 0.9 on the GPU curve (%d drafts)", k);
    CHECK(strata_spec_policy_choose(p, 2, 0.0) == 2, "no more drafts than available");
    CHECK(strata_spec_policy_choose(p, 8, 0.5) == 0, "drafts that cost half a step each do not pay");
    feed(p, 400, 0.3);
    CHECK(strata_spec_policy_choose(p, 8, 0.0) == 0, "plain steps at 0.3");
    strata_spec_policy_get_stats(p, &st);
    CHECK(st.break_even > 0.4 && st.break_even < 0.7, "break-even acceptance %.2f on the GPU curve", st.break_even);

    /* a compute-bound curve (a window of k drafts costs k + 1 steps): plain unless all accepted */
    double cpu[9];
    for (int i = 0; i < 9; i++) cpu[i] = 1.0 * (i + 1);
    strata_spec_policy_set_costs(p, 1.0, cpu);
    feed(p, 400, 0.95);
    CHECK(strata_spec_policy_choose(p, 8, 0.0) == 0, "compute-bound windows never pay below 1");
    /* where no window would pay even with every draft accepted at half the windows' cost (drafts
     * costing a step each on this curve), no probe ever; with free drafts, probes go on */
    int probed = 0;
    for (int i = 0; i < 200; i++) {
        probed |= strata_spec_policy_choose(p, 8, 1.0) != 0;
        strata_spec_policy_observe(p, 0, 0, 1.0);
    }
    CHECK(!probed, "drafts costing a step each, compute-bound windows: no probe in 200 plain steps");
    CHECK(strata_spec_policy_choose(p, 8, 0.0) == 2, "free drafts: a probe (windows may have been measured high)");
    strata_spec_policy_free(p);
    strata_spec_policy_create(8, &p);
    strata_spec_policy_set_costs(p, 1.0, gpu);
    feed(p, 400, 0.2);
    CHECK(strata_spec_policy_choose(p, 8, 0.0) == 0, "plain steps at 0.2 on the GPU curve");
    /* with nothing learnt for 32 plain steps, a 2-draft probe (it counts when observed), then 64 */
    for (int i = 0; i < 32; i++) {
        CHECK(strata_spec_policy_choose(p, 8, 0.0) == 0, "plain step %d", i);
        strata_spec_policy_observe(p, 0, 0, 1.0);
    }
    CHECK(strata_spec_policy_choose(p, 8, 0.0) == 2, "a probe after 32 plain steps without news");
    strata_spec_policy_observe(p, 2, 0, 2.0);
    int early = 0; /* the next probe waits twice as long */
    for (int i = 0; i < 64; i++) {
        early |= strata_spec_policy_choose(p, 8, 0.0) != 0;
        strata_spec_policy_observe(p, 0, 0, 1.0);
    }
    CHECK(!early && strata_spec_policy_choose(p, 8, 0.0) == 2, "the second probe after 64 plain steps");
    strata_spec_policy_observe(p, 2, 0, 2.0);
    CHECK(strata_spec_policy_choose(p, 8, 0.0) == 0, "no probe right after news");
    /* observed times move the table */
    for (int i = 0; i < 60; i++) strata_spec_policy_observe(p, 3, 3, 0.5);
    strata_spec_policy_get_stats(p, &st);
    CHECK(fabs(st.window_s[3] - 0.5) < 1e-3 && st.windows == 62 && st.probes == 2 && st.plain_steps == 96,
          "window_s[3] %.4f, %lld windows, %lld probes", st.window_s[3], (long long)st.windows, (long long)st.probes);
    strata_spec_policy_free(p);
    test_policy_cost_and_rate();
}

/* The self-draft on a CPU session with a RAM budget (the RAM tier's slots are its fast tier, a
 * miss is dropped instead of read from disk): plain greedy's text, some drafts accepted and some
 * not; refused where every expert is resident; a history that is not the session's refused. */
static void test_self_draft(void) {
    strata_token ref[N_GEN], got[N_GEN];
    g_ram = 4 << 20; /* a fraction of the 6 x 32 experts */
    plain_greedy(ref);
    int64_t drafted = 0, accepted = 0;
    const int w = spec_greedy(DRAFT_SELF, 6, ref, got, &drafted, &accepted);
    CHECK(memcmp(ref, got, sizeof ref) == 0, "self-draft: plain greedy's text");
    printf("self-draft (RAM budget 4 MiB): %d windows, %lld of %lld drafts accepted\n", w, (long long)accepted,
           (long long)drafted);
    CHECK(drafted > 0 && accepted > 0 && accepted < drafted, "self-draft: some drafts accepted, not all (%lld of %lld)",
          (long long)accepted, (long long)drafted);
    strata_session *s = new_session(512);
    strata_drafter *d = NULL;
    strata_token out[4];
    int32_t n = 0;
    strata_session_decode(s, PROMPT, N_PROMPT, NULL, 0);
    CHECK(strata_drafter_self_create(s, &d) == STRATA_OK, "self-drafter: %s", strata_last_error());
    CHECK(strata_drafter_propose(d, PROMPT, N_PROMPT, 4, out, &n) == STRATA_ERR_INVALID_ARG && n == 0,
          "a history without the newest token refused");
    CHECK(strata_drafter_propose(d, ref, 3, 4, out, &n) == STRATA_ERR_INVALID_ARG, "another history refused");
    strata_token h[N_PROMPT + 1];
    memcpy(h, PROMPT, sizeof PROMPT);
    h[N_PROMPT] = ref[0];
    CHECK(strata_drafter_propose(d, h, N_PROMPT + 1, 4, out, &n) == STRATA_OK && n == 4 &&
              strata_session_n_past(s) == N_PROMPT, "4 drafts, the steps rolled back (n_past %d)", strata_session_n_past(s));
    strata_drafter_free(d);
    strata_session_free(s);
    g_ram = 0;
    s = new_session(512);
    d = NULL;
    CHECK(strata_drafter_self_create(s, &d) == STRATA_ERR_UNSUPPORTED && !d &&
              strstr(strata_last_error(), "ram_budget"), "every expert resident: refused (%s)", strata_last_error());
    CHECK(strata_drafter_mtp_create(s, &d) == STRATA_ERR_UNSUPPORTED && !d &&
              strstr(strata_last_error(), "no MTP heads"), "no MTP heads: refused (%s)", strata_last_error());
    strata_session_free(s);
}

static void test_vocab_mismatch(void) {
    const char *shared = getenv("STRATA_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-gpt-2.gguf", shared ? shared : "../shared");
    strata_model_params mp = strata_model_default_params();
    mp.vocab_only = 1;
    strata_model *other = NULL;
    if (strata_model_load(path, &mp, &other) != STRATA_OK) {
        SKIP("%s not loadable (set STRATA_SHARED)", path);
        return;
    }
    strata_drafter *d = NULL;
    CHECK(strata_drafter_model_create(model, other, NULL, &d) == STRATA_ERR_INVALID_ARG && !d &&
              strstr(strata_last_error(), "tokens"), "another vocabulary refused: %s", strata_last_error());
    strata_model_free(other);
}

int main(void) {
    test_ngram();
    test_verify_distribution();
    const char *path = "models/strata-tiny-moe-q8_0.gguf";
    strata_model_params mp = strata_model_default_params();
    mp.n_threads = 2;
    if (strata_model_load(path, &mp, &model) != STRATA_OK) {
        SKIP("%s not loadable (run from the repository root): %s", path, strata_last_error());
        return test_report();
    }
    strata_model_info mi;
    strata_model_get_info(model, &mi);
    V = mi.n_vocab;
    test_greedy_identity();
    test_rollback();
    test_vocab_mismatch();
    test_self_draft();
    test_policy();
    strata_model_free(model);
    return test_report();
}
