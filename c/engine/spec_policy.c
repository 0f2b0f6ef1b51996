/* spec_policy.c - the draft policy of speculative decoding (strata.h, "The draft policy"): a
 * per-token acceptance estimate, the seconds a window of each length and a plain step take on this
 * session (learnt from the steps and windows the caller observes: a length not seen yet is
 * estimated from those seen), and the choice of the draft count with the most expected tokens a
 * second, 0 when a plain step is expected to be faster. The decision is plain arithmetic on those
 * numbers (st_policy_best), so it is tested on made-up cost tables as well as learnt ones. */
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
#define PROBE_OPTIMISM 0.5 /* window costs scaled by this when asking whether a probe could pay */
/* A window length not observed yet: past the longest observed, the last observed slope (before
 * any window, PRIOR_SLOPE plain steps a draft) times EXTRAP_SLOPE, so that longer windows look a
 * little cheaper than the trend and get tried once; between two observed, the line between them. */
#define PRIOR_SLOPE 0.25
#define EXTRAP_SLOPE 0.75
/* A length's first window costing more than this times the table's estimate for it may have paid
 * one-time costs (a GPU's kernels loaded at first launch, a busy host): the choice keeps the
 * estimate until a second window of that length replaces the first sample. */
#define RETRY_ABOVE 1.3

struct strata_spec_policy {
    int32_t draft_max;
    double acc, trials;                       /* decayed accepted drafts and drafts reached */
    double window_s[STRATA_DRAFT_MAX + 1];    /* [k]: a window of k drafts (k + 1 rows), seen or estimated */
    int seen[STRATA_DRAFT_MAX + 1];           /* [k]: window_s[k] observed ([0]: plain_s) */
    double plain_s;                           /* a plain one-token step */
    double pre[STRATA_DRAFT_MAX + 1];         /* [k]: the estimate before a suspect first sample */
    int retry[STRATA_DRAFT_MAX + 1];          /* [k]: that first sample awaits a second (RETRY_ABOVE) */
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

/* The seconds a window of k drafts is taken to cost: the table's, or while a suspect first sample
 * awaits its second, the estimate from before it. */
static double window_cost(const strata_spec_policy *p, int32_t k) {
    return p->retry[k] ? p->pre[k] : p->window_s[k];
}

/* The draft count (0..n_avail) with the most expected tokens a second; a window must beat a plain
 * step by WIN_MARGIN. */
static int32_t st_policy_best(const strata_spec_policy *p, int32_t n_avail, double draft_token_s) {
    const double a = acceptance(p), plain_rate = 1.0 / p->plain_s;
    int32_t best = 0;
    double best_rate = plain_rate * WIN_MARGIN;
    for (int32_t k = 1; k <= n_avail && k <= p->draft_max; k++) {
        const double rate = expected_tokens(a, k) / (window_cost(p, k) + (double)k * draft_token_s);
        if (rate > best_rate) {
            best = k;
            best_rate = rate;
        }
    }
    return best;
}

/* 1 if some window would pay were every draft accepted and the windows half as costly as seen
 * (a few noisy passes must not rule them out): only then is news of the acceptance worth a probe.
 * A drafter whose drafts cost a target step each (a draft model catching up) never probes. */
static int st_could_pay(const strata_spec_policy *p, int32_t n_avail, double draft_token_s) {
    strata_spec_policy q = *p;
    q.acc = q.trials = 1e12;
    for (int32_t k = 1; k <= q.draft_max; k++) {
        q.window_s[k] *= PROBE_OPTIMISM;
        q.pre[k] *= PROBE_OPTIMISM;
    }
    return st_policy_best(&q, n_avail, draft_token_s) > 0;
}

/* window_s[k] for every k not observed: the line between the nearest observed lengths around it
 * (the plain step is length 0), or past the longest observed the slope of its last segment
 * (PRIOR_SLOPE with none) times EXTRAP_SLOPE. Needs the plain step observed. */
static void estimate_costs(strata_spec_policy *p) {
    p->window_s[0] = p->plain_s;
    int32_t lo = 0, lo2 = -1;
    for (int32_t k = 1; k <= p->draft_max; k++) {
        if (p->seen[k]) {
            for (int32_t i = lo + 1; i < k; i++)
                p->window_s[i] = p->window_s[lo] + (p->window_s[k] - p->window_s[lo]) * (i - lo) / (k - lo);
            lo2 = lo;
            lo = k;
        }
    }
    const double slope = lo2 < 0 ? PRIOR_SLOPE * p->plain_s : (p->window_s[lo] - p->window_s[lo2]) / (lo - lo2);
    for (int32_t k = lo + 1; k <= p->draft_max; k++) p->window_s[k] = p->window_s[lo] + EXTRAP_SLOPE * slope * (k - lo);
}

strata_status strata_spec_policy_create(int32_t draft_max, strata_spec_policy **out) {
    if (!out) return st_error(STRATA_ERR_INVALID_ARG, "strata_spec_policy_create: NULL argument");
    *out = NULL;
    if (draft_max < 1 || draft_max > STRATA_DRAFT_MAX)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_spec_policy_create: draft_max %d outside 1..%d",
                        (int)draft_max, STRATA_DRAFT_MAX);
    strata_spec_policy *p = calloc(1, sizeof *p);
    if (!p) return st_error(STRATA_ERR_NOMEM, "strata_spec_policy_create: out of memory");
    p->draft_max = draft_max;
    p->probe_after = PROBE_AFTER;
    *out = p;
    return STRATA_OK;
}

void strata_spec_policy_free(strata_spec_policy *p) { free(p); }

int32_t strata_spec_policy_choose(strata_spec_policy *p, int32_t n_avail, double draft_token_s) {
    if (!p || n_avail <= 0 || !p->seen[0]) return 0; /* a plain step first: its cost anchors the table */
    if (!(draft_token_s >= 0.0)) draft_token_s = 0.0;
    const int32_t best = st_policy_best(p, n_avail, draft_token_s);
    p->probing = best == 0 && p->since_news >= p->probe_after && st_could_pay(p, n_avail, draft_token_s);
    if (p->probing) return n_avail < PROBE_DRAFTS ? n_avail : PROBE_DRAFTS;
    if (best > 0) p->probe_after = PROBE_AFTER;
    return best;
}

static void learn(strata_spec_policy *p, double accepted, double trials) {
    p->acc = p->acc * DECAY + accepted;
    p->trials = p->trials * DECAY + trials;
    p->since_news = 0;
}

/* The running mean of a window of n_draft drafts' seconds (0: the plain step), the estimates of
 * the lengths not seen redone. */
static void learn_cost(strata_spec_policy *p, int32_t n_draft, double seconds) {
    if (!(seconds > 0.0 && isfinite(seconds))) return;
    if (n_draft == 0) {
        p->plain_s = p->seen[0]++ ? p->plain_s + COST_ALPHA * (seconds - p->plain_s) : seconds;
        estimate_costs(p);
        return;
    }
    const int32_t k = n_draft;
    if (p->retry[k]) { /* the second sample of a length whose first was suspect replaces it */
        p->retry[k] = 0;
        p->window_s[k] = seconds;
    } else if (p->seen[k]) {
        p->window_s[k] += COST_ALPHA * (seconds - p->window_s[k]);
    } else {
        if (p->seen[0] && seconds > RETRY_ABOVE * p->window_s[k]) { /* more than the table expected */
            p->retry[k] = 1;
            p->pre[k] = p->window_s[k];
        }
        p->window_s[k] = seconds;
    }
    p->seen[k]++;
    if (p->seen[0]) estimate_costs(p);
}

void strata_spec_policy_observe(strata_spec_policy *p, int32_t n_draft, int32_t n_accepted, double seconds) {
    if (!p || n_draft < 0 || n_draft > p->draft_max) return;
    if (n_draft == 0) {
        p->plain_steps++;
        p->since_news++;
        learn_cost(p, 0, seconds);
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
    learn_cost(p, n_draft, seconds);
}

void strata_spec_policy_observe_cost(strata_spec_policy *p, int32_t n_draft, double seconds) {
    if (p && n_draft >= 0 && n_draft <= p->draft_max) learn_cost(p, n_draft, seconds);
}

double strata_spec_policy_rate(const strata_spec_policy *p, int32_t k, double draft_token_s) {
    if (!p || k < 0 || k > p->draft_max || !p->seen[0]) return 0.0;
    if (!(draft_token_s >= 0.0)) draft_token_s = 0.0;
    if (k == 0) return 1.0 / p->plain_s;
    return expected_tokens(acceptance(p), k) / (window_cost(p, k) + (double)k * draft_token_s);
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
    for (int32_t k = 0; k <= p->draft_max; k++) {
        p->seen[k] = 1;
        p->retry[k] = 0;
    }
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
