/* spec_policy.c - the draft policy of speculative decoding (strata.h, "The draft policy"): a
 * per-token acceptance estimate, the seconds a window of each length and a plain step take on this
 * session (a few measured at create, the rest interpolated, each then kept up to date from what
 * the caller observes), and the choice of the draft count with the most expected tokens a second,
 * 0 when a plain step is expected to be faster. The decision is plain arithmetic on those numbers (st_policy_best), so
 * it is tested on made-up cost tables as well as measured ones. */
#include "profile.h" /* st_prof_clock */
#include "session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Weight of the prior acceptance, the decay of older evidence per observation, the new sample's
 * share in a cost's running mean, the margin a window must win by, and how many plain steps
 * without news about the acceptance make the next choice a probe (doubling after each probe up to
 * PROBE_MAX, back to PROBE_AFTER once a window pays: probing a costly drafter stays rare). */
#define PRIOR_ACCEPT 0.5
#define PRIOR_WEIGHT 2.0
#define DECAY 0.97
#define COST_ALPHA 0.25
#define WIN_MARGIN 1.02
#define PROBE_AFTER 32
#define PROBE_MAX 1024
#define PROBE_DRAFTS 2

struct strata_spec_policy {
    int32_t draft_max;
    double acc, trials;                       /* decayed accepted drafts and drafts reached */
    double window_s[STRATA_DRAFT_MAX + 1];    /* [k]: a window of k drafts (k + 1 rows) */
    double plain_s;                           /* a plain one-token step */
    int64_t plain_steps, windows, probes;
    int32_t since_news;                       /* plain steps since the last acceptance evidence */
    int32_t probe_after;                      /* since_news that makes a probe */
    int probing;                              /* the last choice was a probe */
};

static double acceptance(const strata_spec_policy *p) {
    return (p->acc + PRIOR_ACCEPT * PRIOR_WEIGHT) / (p->trials + PRIOR_WEIGHT);
}

/* Expected tokens from a window of k drafts at per-token acceptance a: the accepted prefix plus
 * the model's own token, 1 + a + ... + a^k. */
static double expected_tokens(double a, int32_t k) {
    double e = 0.0, t = 1.0;
    for (int32_t i = 0; i <= k; i++, t *= a) e += t;
    return e;
}

/* The draft count (0..n_avail) with the most expected tokens a second; a window must beat a plain
 * step by WIN_MARGIN. */
static int32_t st_policy_best(const strata_spec_policy *p, int32_t n_avail, double draft_token_s) {
    const double a = acceptance(p), plain_rate = 1.0 / p->plain_s;
    int32_t best = 0;
    double best_rate = plain_rate * WIN_MARGIN;
    for (int32_t k = 1; k <= n_avail && k <= p->draft_max; k++) {
        const double rate = expected_tokens(a, k) / (p->window_s[k] + (double)k * draft_token_s);
        if (rate > best_rate) {
            best = k;
            best_rate = rate;
        }
    }
    return best;
}

/* Seconds of a pass of n rows at the end of the cache (rolled back): a window (every row's logits
 * into logits) or, with logits NULL, a plain greedy step. */
static strata_status time_pass(strata_session *s, const strata_token *toks, int32_t n, float *logits,
                               double *out) {
    const int32_t n_past = s->n_past;
    strata_token next;
    const double t0 = st_prof_clock();
    strata_status st = !logits ? strata_session_decode_greedy(s, toks, 1, &next)
                               : strata_session_decode_gen(s, toks, n, logits, 1);
    *out = st_prof_clock() - t0;
    if (st == STRATA_OK) st = strata_session_truncate(s, n_past);
    return st;
}

/* The cost table: a plain step, and windows of 1, 2, 4, 8, 16 drafts up to draft_max (and
 * draft_max itself), one pass each; the lengths between are interpolated linearly. Each window
 * length's entry then follows what the caller observes. */
static strata_status measure_costs(strata_spec_policy *p, strata_session *s, const strata_token *toks,
                                   float *logits) {
    strata_status st = time_pass(s, toks, 1, NULL, &p->plain_s);
    p->window_s[0] = p->plain_s;
    int32_t prev = 0;
    for (int32_t k = 1; st == STRATA_OK && prev < p->draft_max; k *= 2) {
        const int32_t m = k < p->draft_max ? k : p->draft_max;
        st = time_pass(s, toks, m + 1, logits, &p->window_s[m]);
        for (int32_t i = prev + 1; i < m; i++)
            p->window_s[i] = p->window_s[prev] + (p->window_s[m] - p->window_s[prev]) * (i - prev) / (m - prev);
        prev = m;
    }
    return st;
}

strata_status strata_spec_policy_create(strata_session *s, const strata_token *history, int64_t n_history,
                                        int32_t draft_max, strata_spec_policy **out) {
    if (!s || !out || !history)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_spec_policy_create: NULL argument");
    *out = NULL;
    if (draft_max < 1 || draft_max > STRATA_DRAFT_MAX || n_history < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_spec_policy_create: draft_max %d outside 1..%d or "
                        "an empty history", (int)draft_max, STRATA_DRAFT_MAX);
    if ((int64_t)s->n_past + draft_max + 1 > s->n_ctx)
        return st_error(STRATA_ERR_RANGE, "strata_spec_policy_create: the cost table needs %d free "
                        "positions, the context has %d", (int)draft_max + 1, (int)(s->n_ctx - s->n_past));
    strata_spec_policy *p = calloc(1, sizeof *p);
    float *logits = malloc(sizeof(float) * (size_t)s->model->hp.n_vocab * (size_t)(draft_max + 1));
    if (!p || !logits) {
        free(p);
        free(logits);
        return st_error(STRATA_ERR_NOMEM, "strata_spec_policy_create: out of memory");
    }
    p->draft_max = draft_max;
    p->probe_after = PROBE_AFTER;
    strata_token toks[STRATA_DRAFT_MAX + 1]; /* the history's last tokens, cycled */
    for (int32_t i = 0; i <= draft_max; i++) toks[i] = history[n_history - 1 - (i % n_history)];
    const strata_status st = measure_costs(p, s, toks, logits);
    free(logits);
    if (st != STRATA_OK) {
        free(p);
        return st;
    }
    if (!(p->plain_s > 0.0)) p->plain_s = 1e-9;
    *out = p;
    return STRATA_OK;
}

void strata_spec_policy_free(strata_spec_policy *p) { free(p); }

int32_t strata_spec_policy_choose(strata_spec_policy *p, int32_t n_avail, double draft_token_s) {
    if (!p || n_avail <= 0) return 0;
    if (!(draft_token_s >= 0.0)) draft_token_s = 0.0;
    const int32_t best = st_policy_best(p, n_avail, draft_token_s);
    p->probing = best == 0 && p->since_news >= p->probe_after;
    if (p->probing) return n_avail < PROBE_DRAFTS ? n_avail : PROBE_DRAFTS;
    if (best > 0) p->probe_after = PROBE_AFTER;
    return best;
}

static void learn(strata_spec_policy *p, double accepted, double trials) {
    p->acc = p->acc * DECAY + accepted;
    p->trials = p->trials * DECAY + trials;
    p->since_news = 0;
}

void strata_spec_policy_observe(strata_spec_policy *p, int32_t n_draft, int32_t n_accepted, double seconds) {
    if (!p || n_draft < 0 || n_draft > p->draft_max) return;
    const int ok_time = seconds > 0.0 && isfinite(seconds);
    if (n_draft == 0) {
        p->plain_steps++;
        p->since_news++;
        if (ok_time) p->plain_s += COST_ALPHA * (seconds - p->plain_s);
        return;
    }
    p->windows++;
    if (p->probing) {
        p->probes++;
        p->probe_after = p->probe_after * 2 < PROBE_MAX ? p->probe_after * 2 : PROBE_MAX;
    }
    p->probing = 0;
    if (n_accepted < 0) n_accepted = 0;
    if (n_accepted > n_draft) n_accepted = n_draft;
    learn(p, n_accepted, n_accepted + (n_accepted < n_draft));
    if (ok_time) p->window_s[n_draft] += COST_ALPHA * (seconds - p->window_s[n_draft]);
}

void strata_spec_policy_observe_unverified(strata_spec_policy *p, int matched) {
    if (p) learn(p, matched ? 1.0 : 0.0, 1.0);
}

strata_status strata_spec_policy_set_costs(strata_spec_policy *p, double plain_s, const double *window_s) {
    if (!p || !window_s || !(plain_s > 0.0))
        return st_error(STRATA_ERR_INVALID_ARG, "strata_spec_policy_set_costs: NULL or plain_s <= 0");
    for (int32_t k = 0; k <= p->draft_max; k++)
        if (!(window_s[k] > 0.0))
            return st_error(STRATA_ERR_INVALID_ARG, "strata_spec_policy_set_costs: window_s[%d] <= 0", (int)k);
    p->plain_s = plain_s;
    memcpy(p->window_s, window_s, sizeof(double) * (size_t)(p->draft_max + 1));
    return STRATA_OK;
}

strata_status strata_spec_policy_get_stats(const strata_spec_policy *p, strata_spec_policy_stats *out) {
    if (!p || !out) return st_error(STRATA_ERR_INVALID_ARG, "strata_spec_policy_get_stats: NULL argument");
    memset(out, 0, sizeof *out);
    out->plain_steps = p->plain_steps;
    out->windows = p->windows;
    out->probes = p->probes;
    out->acceptance = acceptance(p);
    out->plain_s = p->plain_s;
    out->draft_max = p->draft_max;
    memcpy(out->window_s, p->window_s, sizeof out->window_s);
    out->choice = st_policy_best(p, p->draft_max, 0.0);
    /* the acceptance at which windows start to pay: the lowest a (in steps of 1/100) where the
     * best choice with free drafts is a window */
    strata_spec_policy q = *p;
    out->break_even = -1.0;
    for (int i = 0; i <= 100 && out->break_even < 0; i++) {
        q.acc = i / 100.0 * 1e9;
        q.trials = 1e9;
        if (st_policy_best(&q, q.draft_max, 0.0) > 0) out->break_even = i / 100.0;
    }
    return STRATA_OK;
}
