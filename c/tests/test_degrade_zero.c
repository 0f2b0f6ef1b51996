/* test_degrade_zero.c - DEGRADE_ZERO (c/experts/degrade.c): the drop rule's properties on
 * constructed routings (no model): off is the identity, hits are never dropped, the tau gate is per
 * position, an expert shared by two positions is kept where its weight meets tau, rescue keeps each
 * position's heaviest slot, weights are never renormalized (bytes unchanged), windows of more than
 * 4 rows and prompts never drop, the counters match. Then the CPU expert step with dropped slots
 * (bit-identical to the same routing without them), and end to end on the default model: the
 * option on without misses is bit-identical to off, the evaluation mode drops only in decode
 * steps, and its counters. The route tail skip (st_route_tail_skip): its rule on constructed rows,
 * and on the default model a session with it counts its drops, changes the logits, and gives the
 * same bits whether the prompt is read in one batch or in slices. */
#include "degrade.h"
#include "ops.h"
#include "strata.h"
#include "test.h"
#include "test_tiny.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static st_degrade_params P(int enabled, float tau, int eval) {
    st_degrade_params p = {enabled, tau, eval};
    return p;
}

/* ---------------------------------------------------------------------------------------------
 * The rule
 * ------------------------------------------------------------------------------------------- */

static void test_rule(void) {
    /* two positions, k = 4; weights in descending order as the router gives them */
    const int32_t ids0[8] = {3, 7, 5, 1, 5, 2, 9, 4};
    const float wts[8] = {0.60f, 0.25f, 0.02f, 0.01f, 0.50f, 0.30f, 0.15f, 0.05f};
    uint8_t all[8], none[8];
    memset(all, 1, sizeof all);
    memset(none, 0, sizeof none);
    int32_t ids[8];
    float w[8];
    memcpy(w, wts, sizeof w);

    /* off: identity, even with every slot missed */
    memcpy(ids, ids0, sizeof ids);
    st_degrade_params off = P(0, 0.03f, 0);
    CHECK(st_degrade_apply(&off, 0, 2, 4, ids, w, all, NULL, 0) == 0 && !memcmp(ids, ids0, sizeof ids),
          "off changes nothing");
    off.eval = 1;
    CHECK(st_degrade_apply(&off, 0, 2, 4, ids, w, all, NULL, 0) == 0 && !memcmp(ids, ids0, sizeof ids),
          "off with eval changes nothing");

    /* hits never dropped */
    st_degrade_params on = P(1, 0.03f, 0);
    CHECK(st_degrade_apply(&on, 0, 2, 4, ids, w, none, NULL, 0) == 0 && !memcmp(ids, ids0, sizeof ids),
          "hits are never dropped");
    CHECK(st_degrade_apply(&on, 0, 2, 4, ids, w, NULL, NULL, 0) == 0 && !memcmp(ids, ids0, sizeof ids),
          "no miss list: nothing dropped");

    /* tau gate per position: position 0 drops slots 2 and 3 (0.02, 0.01); position 1 nothing */
    int n = st_degrade_apply(&on, 0, 2, 4, ids, w, all, NULL, 0);
    const int32_t want[8] = {3, 7, -1, -1, 5, 2, 9, 4};
    CHECK(n == 2 && !memcmp(ids, want, sizeof ids), "tau 0.03 drops the two light slots of position 0 (%d)", n);
    CHECK(!memcmp(w, wts, sizeof w), "weights untouched (no renormalization)");

    /* only missed slots are candidates */
    memcpy(ids, ids0, sizeof ids);
    uint8_t some[8] = {0, 0, 0, 1, 0, 0, 0, 0};
    n = st_degrade_apply(&on, 0, 2, 4, ids, w, some, NULL, 0);
    CHECK(n == 1 && ids[2] == 5 && ids[3] == -1, "the hit slot 2 (weight 0.02) is kept, missed slot 3 dropped");

    /* S = 2, expert 5 shared: 0.02 at position 0 (below tau), 0.50 at position 1: kept there */
    memcpy(ids, ids0, sizeof ids);
    st_degrade_params t10 = P(1, 0.10f, 0);
    n = st_degrade_apply(&t10, 0, 2, 4, ids, w, all, NULL, 0);
    CHECK(ids[2] == -1 && ids[4] == 5, "shared expert dropped for the position below tau, kept for the one above");
    CHECK(n == 3 && ids[7] == -1 && ids[6] == 9, "tau 0.10: position 1 drops only its 0.05 slot (%d dropped)", n);

    /* rescue: every slot below tau keeps the heaviest */
    memcpy(ids, ids0, sizeof ids);
    st_degrade_params big = P(1, 0.99f, 0);
    n = st_degrade_apply(&big, 0, 2, 4, ids, w, all, NULL, 0);
    const int32_t resc[8] = {3, -1, -1, -1, 5, -1, -1, -1};
    CHECK(n == 6 && !memcmp(ids, resc, sizeof ids), "rescue keeps each position's heaviest slot");
    /* the heaviest is found by weight, not by slot position */
    int32_t ids2[4] = {10, 11, 12, 13};
    const float w2[4] = {0.001f, 0.004f, 0.002f, 0.003f};
    n = st_degrade_apply(&big, 0, 1, 4, ids2, w2, all, NULL, 0);
    CHECK(n == 3 && ids2[1] == 11 && ids2[0] == -1 && ids2[2] == -1 && ids2[3] == -1,
          "rescue keeps slot 1, the heaviest of unordered weights");

    /* eval: every slot counts as missed */
    memcpy(ids, ids0, sizeof ids);
    st_degrade_params ev = P(1, 0.03f, 1);
    n = st_degrade_apply(&ev, 0, 2, 4, ids, w, none, NULL, 0);
    CHECK(n == 2 && !memcmp(ids, want, sizeof ids), "eval counts hits as misses");

    /* windows: S = 4 drops, S = 5 never; prompts never */
    int32_t win[20];
    float ww[20];
    uint8_t m20[20];
    memset(m20, 1, sizeof m20);
    for (int i = 0; i < 20; i++) { win[i] = i; ww[i] = (i % 4 == 0) ? 0.9f : 0.01f; }
    CHECK(st_degrade_apply(&on, 0, 5, 4, win, ww, m20, NULL, 0) == 0, "S = 5 never drops");
    CHECK(st_degrade_apply(&on, 1, 1, 4, win, ww, m20, NULL, 0) == 0, "a prompt never drops");
    for (int i = 0; i < 20; i++) CHECK(win[i] == i, "ids untouched by refused windows");
    CHECK(st_degrade_apply(&on, 0, 4, 4, win, ww, m20, NULL, 0) == 12, "S = 4 drops 3 of 4 slots per row");

    /* counters */
    st_degrade_stats st;
    CHECK(st_degrade_stats_init(&st, 3) == 0, "stats init");
    for (int i = 0; i < 20; i++) win[i] = i;
    st_degrade_apply(&on, 0, 4, 4, win, ww, m20, &st, 2);   /* 16 eligible, 12 dropped */
    st_degrade_apply(&on, 1, 4, 4, win, ww, m20, &st, 1);   /* prompt: not counted */
    st_degrade_apply(&on, 0, 1, 4, win + 16, ww, none, &st, 1); /* 4 eligible, 0 dropped */
    CHECK(st.eligible_total == 20 && st.zeroed_total == 12 && st.eligible[2] == 16 &&
          st.zeroed[2] == 12 && st.eligible[1] == 4 && st.zeroed[1] == 0 && st.eligible[0] == 0,
          "counters: %lld eligible, %lld zeroed", (long long)st.eligible_total, (long long)st.zeroed_total);
    st_degrade_stats_free(&st);
}

/* ---------------------------------------------------------------------------------------------
 * The CPU expert step with dropped slots
 * ------------------------------------------------------------------------------------------- */

static void test_moe_drop(void) {
    const int64_t E = 64, F = 32, X = 4, T = 3;
    const int32_t k = 3;
    float *wg = malloc(sizeof(float) * (size_t)(X * F * E)), *wu = malloc(sizeof(float) * (size_t)(X * F * E));
    float *wd = malloc(sizeof(float) * (size_t)(X * E * F)), *x = malloc(sizeof(float) * (size_t)(T * E));
    test_rng r = {42};
    for (int64_t i = 0; i < X * F * E; i++) { wg[i] = test_rng_float(&r); wu[i] = test_rng_float(&r); wd[i] = test_rng_float(&r); }
    for (int64_t i = 0; i < T * E; i++) x[i] = test_rng_float(&r);
    st_expert ex[4] = {0};
    for (int e = 0; e < X; e++) {
        st_tensor g = {STRATA_TYPE_F32, (const uint8_t *)(wg + e * F * E), {E, F, 1}, sizeof(float) * (size_t)E, "g"};
        st_tensor u = {STRATA_TYPE_F32, (const uint8_t *)(wu + e * F * E), {E, F, 1}, sizeof(float) * (size_t)E, "u"};
        st_tensor d = {STRATA_TYPE_F32, (const uint8_t *)(wd + e * E * F), {F, E, 1}, sizeof(float) * (size_t)F, "d"};
        ex[e].gate = g; ex[e].up = u; ex[e].down = d;
    }
    const int32_t ids[9] = {0, 2, 3, 1, -1, 2, -1, -1, 3};
    const float wts[9] = {0.5f, 0.3f, 0.2f, 0.6f, 0.3f, 0.1f, 0.7f, 0.2f, 0.1f};
    float *out = malloc(sizeof(float) * (size_t)(T * E)), *ref = malloc(sizeof(float) * (size_t)(T * E));
    void *ws = malloc(st_moe_wsize(T, k, (int32_t)X, E, F));
    st_moe_ffn(NULL, ex, (int32_t)X, x, T, ids, wts, k, out, ws);
    /* the same tokens one at a time with only their surviving slots */
    const int32_t keep0[3] = {0, 2, 3}, keep1[2] = {1, 2}, keep2[1] = {3};
    const float kw0[3] = {0.5f, 0.3f, 0.2f}, kw1[2] = {0.6f, 0.1f}, kw2[1] = {0.1f};
    st_moe_ffn(NULL, ex, (int32_t)X, x, 1, keep0, kw0, 3, ref, ws);
    st_moe_ffn(NULL, ex, (int32_t)X, x + E, 1, keep1, kw1, 2, ref + E, ws);
    st_moe_ffn(NULL, ex, (int32_t)X, x + 2 * E, 1, keep2, kw2, 1, ref + 2 * E, ws);
    CHECK(!memcmp(out, ref, sizeof(float) * (size_t)(T * E)),
          "dropped slots add nothing: bit-identical to the routing without them");
    const int32_t none[3] = {-1, -1, -1};
    st_moe_ffn(NULL, ex, (int32_t)X, x, 1, none, wts, 3, out, ws);
    int zero = 1;
    for (int64_t i = 0; i < E; i++) zero &= out[i] == 0.0f;
    CHECK(zero, "every slot dropped: zero output");
    free(wg); free(wu); free(wd); free(x); free(out); free(ref); free(ws);
}

/* ---------------------------------------------------------------------------------------------
 * End to end on the default model
 * ------------------------------------------------------------------------------------------- */

/* Prompt (8 tokens) then 24 decode steps of fixed tokens; logits of every step into lg[25][V]. */
static int run(const strata_model *m, int dz, float tau, int eval, int32_t V, float *lg,
               strata_session_stats *stats) {
    strata_session_params sp = strata_session_default_params();
    sp.n_ctx = 64;
    sp.n_threads = 2;
    sp.degrade_zero = dz;
    sp.degrade_tau = tau;
    sp.degrade_eval = eval;
    strata_session *s = NULL;
    if (strata_session_create(m, &sp, &s) != STRATA_OK) {
        CHECK(0, "session: %s", strata_last_error());
        return 0;
    }
    strata_token toks[32];
    for (int i = 0; i < 32; i++) toks[i] = (strata_token)(100 + 37 * i);
    strata_status st = strata_session_decode(s, toks, 8, lg, 0);
    for (int i = 0; i < 24 && st == STRATA_OK; i++)
        st = strata_session_decode_gen(s, toks + 8 + i, 1, lg + (size_t)(i + 1) * (size_t)V, 0);
    CHECK(st == STRATA_OK, "decode: %s", strata_last_error());
    if (stats) strata_session_get_stats(s, stats);
    strata_session_free(s);
    return st == STRATA_OK;
}

static void test_model(void) {
    const char *path = "models/strata-tiny-moe-q8_0.gguf";
    if (access(path, R_OK) != 0) { SKIP("%s not found (run from the repository root)", path); return; }
    strata_model *m = NULL;
    if (strata_model_load(path, NULL, &m) != STRATA_OK) { CHECK(0, "load: %s", strata_last_error()); return; }
    strata_model_info mi;
    strata_model_get_info(m, &mi);
    const int32_t V = mi.n_vocab;
    const size_t n = 25 * (size_t)V;
    float *off = malloc(sizeof(float) * n), *on = malloc(sizeof(float) * n);
    float *ev0 = malloc(sizeof(float) * n), *ev = malloc(sizeof(float) * n);
    strata_session_stats s_on, s_ev0, s_ev;
    if (run(m, 0, 0.03f, 0, V, off, NULL) && run(m, 1, 0.03f, 0, V, on, &s_on) &&
        run(m, 1, 0.0f, 1, V, ev0, &s_ev0) && run(m, 1, 0.05f, 1, V, ev, &s_ev)) {
        CHECK(!memcmp(off, on, sizeof(float) * n), "DEGRADE_ZERO on, nothing missed: bit-identical to off");
        CHECK(s_on.degrade_zeroed == 0 && s_on.degrade_slots == 24LL * mi.n_layer * mi.n_expert_used,
              "on without misses: %lld of %lld slots zeroed", (long long)s_on.degrade_zeroed,
              (long long)s_on.degrade_slots);
        CHECK(!memcmp(off, ev0, sizeof(float) * n) && s_ev0.degrade_zeroed == 0,
              "eval with tau 0: nothing below tau, bit-identical");
        CHECK(!memcmp(off, ev, sizeof(float) * (size_t)V), "eval: the prompt's logits are untouched");
        CHECK(memcmp(off + V, ev + V, sizeof(float) * (n - (size_t)V)) != 0, "eval tau 0.05: decode changes");
        const double share = (double)s_ev.degrade_zeroed / (double)s_ev.degrade_slots;
        printf("default model, eval tau 0.05: %lld of %lld decode slots zeroed (%.1f%%), per layer "
               "%.1f%%..%.1f%%\n", (long long)s_ev.degrade_zeroed, (long long)s_ev.degrade_slots,
               100 * share, 100 * s_ev.degrade_layer_min, 100 * s_ev.degrade_layer_max);
        CHECK(s_ev.degrade_zeroed > 0 && share < 0.75 && s_ev.degrade_layer_min <= share &&
              share <= s_ev.degrade_layer_max, "eval counters consistent");
        CHECK(s_ev.degrade_zero == 1 && s_ev.degrade_eval == 1 && s_ev.degrade_tau == 0.05f, "stats echo the settings");
    }
    free(off); free(on); free(ev0); free(ev);

    /* the window guard looks at the call, not at the batches n_batch cuts it into: a 6-token
     * window with n_batch 2 drops nothing (before the fix each 2-token batch passed the guard) */
    {
        strata_session_params wp = strata_session_default_params();
        wp.n_ctx = 64;
        wp.n_threads = 2;
        wp.n_batch = 2;
        wp.degrade_zero = 1;
        wp.degrade_tau = 0.05f;
        wp.degrade_eval = 1;
        strata_session *ws = NULL;
        if (strata_session_create(m, &wp, &ws) == STRATA_OK) {
            strata_token t6[14];
            for (int i = 0; i < 14; i++) t6[i] = (strata_token)(100 + 37 * i);
            strata_session_stats st6;
            CHECK(strata_session_decode(ws, t6, 8, NULL, 0) == STRATA_OK &&
                      strata_session_decode_gen(ws, t6 + 8, 6, NULL, 0) == STRATA_OK, "6-token window");
            strata_session_get_stats(ws, &st6);
            CHECK(st6.degrade_slots == 0 && st6.degrade_zeroed == 0,
                  "a 6-token window in batches of 2: %lld slots eligible, %lld dropped (want 0, 0)",
                  (long long)st6.degrade_slots, (long long)st6.degrade_zeroed);
            CHECK(strata_session_decode_gen(ws, t6, 4, NULL, 0) == STRATA_OK, "4-token window");
            strata_session_get_stats(ws, &st6);
            CHECK(st6.degrade_slots == 4LL * mi.n_layer * mi.n_expert_used && st6.degrade_zeroed > 0,
                  "a 4-token window in batches of 2 may drop: %lld eligible, %lld dropped",
                  (long long)st6.degrade_slots, (long long)st6.degrade_zeroed);
            strata_session_free(ws);
        } else {
            CHECK(0, "session: %s", strata_last_error());
        }
    }

    /* bad settings */
    strata_session_params sp = strata_session_default_params();
    strata_session *s = NULL;
    sp.degrade_zero = 1;
    sp.degrade_tau = -0.1f;
    CHECK(strata_session_create(m, &sp, &s) == STRATA_ERR_INVALID_ARG && !s, "tau < 0 refused");
    sp.degrade_tau = NAN;
    CHECK(strata_session_create(m, &sp, &s) == STRATA_ERR_INVALID_ARG && !s, "tau NaN refused");
    sp.degrade_tau = 0.03f;
    sp.degrade_zero = 0;
    sp.degrade_eval = 1;
    CHECK(strata_session_create(m, &sp, &s) == STRATA_ERR_INVALID_ARG && !s, "eval without degrade_zero refused");
    strata_model_free(m);
}

/* The tail skip's rule on rows of 4 slots. */
static void test_tail_rule(void) {
    int32_t ids[12] = {5, 6, 7, 8, 1, 2, 3, 4, 9, 10, -1, 11};
    const float w[12] = {0.50f, 0.05f, 0.30f, 0.15f, 0.25f, 0.25f, 0.25f, 0.25f, 0.9f, 0.04f, 0.03f, 0.03f};
    int32_t a[12];
    memcpy(a, ids, sizeof a);
    CHECK(st_route_tail_skip(3, 4, a, w, 0.0f) == 0 && !memcmp(a, ids, sizeof a), "tail skip 0: the identity");
    memcpy(a, ids, sizeof a);
    const int64_t n = st_route_tail_skip(3, 4, a, w, 0.2f);
    /* row 0: 0.05 then 0.15 (sum 0.2 <= 0.2), not 0.30; row 1: ties, none fits (0.25 > 0.2); row 2:
     * the -1 slot is not counted, 0.03 (slot 3, the later of the ties) then 0.04 (sum 0.07) */
    static const int32_t want[12] = {5, -1, 7, -1, 1, 2, 3, 4, 9, -1, -1, -1};
    CHECK(n == 4 && !memcmp(a, want, sizeof a), "tail skip 0.2: %lld dropped, rows as the rule says", (long long)n);
    int32_t one[4] = {1, 2, 3, 4};
    const float even[4] = {0.1f, 0.1f, 0.1f, 0.1f};
    CHECK(st_route_tail_skip(1, 4, one, even, 0.9f) == 3 && one[0] == 1 && one[3] == -1,
          "tail skip: the heaviest slot (ties: the first) always stays");
}

/* A session with route_tail_skip p reading toks (n) in batches of nb: its logits of every position. */
static int tail_run(strata_model *m, float p, int nb, const strata_token *toks, int n, int32_t V, float *out,
                    strata_session_stats *st) {
    strata_session_params sp = strata_session_default_params();
    sp.n_ctx = 128;
    sp.n_batch = nb;
    sp.n_threads = 2;
    sp.route_tail_skip = p;
    strata_session *s = NULL;
    int ok = strata_session_create(m, &sp, &s) == STRATA_OK;
    for (int i = 0; ok && i < n; i += nb) {
        const int c = n - i < nb ? n - i : nb;
        ok = strata_session_decode(s, toks + i, c, out + (size_t)i * (size_t)V, 1) == STRATA_OK;
    }
    if (ok && st) strata_session_get_stats(s, st);
    strata_session_free(s);
    return ok;
}

static void test_tail_model(void) {
    strata_model *m = NULL;
    if (!test_tiny_load(0, &m)) return;
    strata_model_info mi;
    strata_model_get_info(m, &mi);
    const int32_t V = mi.n_vocab;
    enum { N = 40 };
    strata_token toks[N];
    for (int i = 0; i < N; i++) toks[i] = (strata_token)((i * 131 + 7) % V);
    const size_t n = (size_t)N * (size_t)V;
    float *off = malloc(sizeof(float) * n), *on = malloc(sizeof(float) * n), *on7 = malloc(sizeof(float) * n);
    strata_session_stats s_off, s_on, s_on7;
    if (off && on && on7 && tail_run(m, 0.0f, 64, toks, N, V, off, &s_off) &&
        tail_run(m, 0.2f, 64, toks, N, V, on, &s_on) && tail_run(m, 0.2f, 7, toks, N, V, on7, &s_on7)) {
        const int64_t slots = (int64_t)N * mi.n_layer * mi.n_expert_used;
        printf("default model, route tail skip 0.2: %lld of %lld routed slots skipped\n",
               (long long)s_on.route_tail_skipped, (long long)slots);
        CHECK(s_off.route_tail_skipped == 0 && s_off.route_tail_skip == 0.0f, "tail skip off: nothing counted");
        CHECK(s_on.route_tail_skipped > 0 && s_on.route_tail_skipped < slots && s_on.route_tail_skip == 0.2f,
              "tail skip 0.2: %lld of %lld slots", (long long)s_on.route_tail_skipped, (long long)slots);
        CHECK(memcmp(off, on, sizeof(float) * n) != 0, "tail skip 0.2 changes the logits");
        CHECK(!memcmp(on, on7, sizeof(float) * n) && s_on7.route_tail_skipped == s_on.route_tail_skipped,
              "tail skip 0.2: batches of 7 give the bits of one batch");
    }
    strata_session_params sp = strata_session_default_params();
    strata_session *s = NULL;
    sp.route_tail_skip = 1.0f;
    CHECK(strata_session_create(m, &sp, &s) == STRATA_ERR_INVALID_ARG && !s, "route_tail_skip 1 refused");
    sp.route_tail_skip = NAN;
    CHECK(strata_session_create(m, &sp, &s) == STRATA_ERR_INVALID_ARG && !s, "route_tail_skip NaN refused");
    free(off);
    free(on);
    free(on7);
    strata_model_free(m);
}

int main(void) {
    test_tail_rule();
    test_tail_model();
    test_rule();
    test_moe_drop();
    test_model();
    return test_report();
}
