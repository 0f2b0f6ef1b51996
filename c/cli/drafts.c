/* drafts.c - the drafters of a run's verify windows and the choice among them (drafts.h): their
 * creation from the options, each step's proposal (every drafter's under --spec auto, the
 * window of the one expected fastest), what each step teaches the policies, the footer. */
#include "drafts.h"

#include "cli.h"
#include "session_setup.h"

#include <string.h>

/* One more drafter; its policy under --spec auto. */
static int drafts_add(cli_drafts *d, const char *name, strata_drafter *dr, int cheap, int32_t draft_max) {
    cli_draft_src *s = &d->src[d->n];
    memset(s, 0, sizeof *s);
    s->name = name;
    s->reads_prompt = strcmp(name, "draft model") == 0;
    s->drafter = dr;
    s->cheap = cheap;
    d->n++;
    if (d->policy && strata_spec_policy_create(draft_max, &s->policy) != STRATA_OK)
        return cli_fail("draft policy: %s", strata_last_error());
    return 0;
}

/* --draft-model's drafter: the file loaded with the options' model parameters, its session with
 * sess's n_ctx and backend. */
static int drafts_model(const cli_opts *o, const strata_model *target, strata_session *sess, strata_drafter **out) {
    cli_opts dopt = *o;
    dopt.model = o->draft_model;
    strata_model *dm = NULL;
    int rc = cli_load_model(&dopt, &dm, NULL);
    if (rc) return rc;
    strata_session_params sp = strata_session_default_params();
    sp.n_ctx = strata_session_n_ctx(sess);
    sp.n_batch = o->n_batch;
    sp.kv_type = o->kv_type;
    sp.n_threads = o->n_threads;
    sp.backend = cli_session_on_gpu(o) ? STRATA_BACKEND_CUDA : STRATA_BACKEND_CPU;
    const strata_status st = strata_drafter_model_create(target, dm, &sp, out);
    strata_model_free(dm); /* the drafter holds its own reference */
    if (st != STRATA_OK) return cli_fail("--draft-model '%s': %s", o->draft_model, cli_lib_error());
    return 0;
}

/* The option combinations that are refused before anything is made. */
static int drafts_check(const cli_opts *o) {
    if (o->oracle_rate >= 0.0f && o->spec != CLI_SPEC_ORACLE && o->spec != CLI_SPEC_AUTO)
        return cli_usage_error("--oracle-rate drafts with --spec oracle or auto");
    if (cli_oracle_wanted(o)) {
        if (o->draft_model) return cli_usage_error("--draft-model and the oracle (--spec oracle, --oracle-rate) exclude each other");
        if (o->interactive) return cli_usage_error("the oracle (--spec oracle, --oracle-rate) drafts for -p/-f runs, not --chat");
    }
    if (o->draft_model && (o->spec == CLI_SPEC_MTP || o->spec == CLI_SPEC_SELF || o->spec == CLI_SPEC_NGRAM))
        return cli_usage_error("--draft-model drafts with --spec draft or auto, not %s",
                               o->spec == CLI_SPEC_MTP ? "mtp" : o->spec == CLI_SPEC_SELF ? "self" : "ngram");
    if (o->spec == CLI_SPEC_DRAFT && !o->draft_model) return cli_usage_error("--spec draft needs --draft-model FILE");
    return 0;
}

/* --spec auto's drafters: prompt lookup, the draft model when given, the self-draft where the
 * session allows one (left out otherwise: the start-up line names the drafters used). */
static int drafts_open_auto(const cli_opts *o, const strata_model *target, strata_session *sess, cli_drafts *d) {
    strata_drafter *dr = NULL;
    if (strata_drafter_ngram_create(2, 4, &dr) != STRATA_OK) return cli_fail("--spec auto: %s", cli_lib_error());
    int rc = drafts_add(d, "prompt lookup", dr, 1, o->draft_max);
    if (!rc && o->draft_model && !(rc = drafts_model(o, target, sess, &dr)))
        rc = drafts_add(d, "draft model", dr, 0, o->draft_max);
    if (!rc && strata_drafter_self_create(sess, &dr) == STRATA_OK) rc = drafts_add(d, "self-draft", dr, 0, o->draft_max);
    if (rc || o->quiet) return rc;
    fprintf(stderr, "strata: speculative decoding: the draft policy choosing each step among ");
    for (int i = 0; i < d->n; i++)
        fprintf(stderr, "%s%s", d->src[i].name,
                d->src[i].reads_prompt ? (cli_session_on_gpu(o) ? " (cuda), " : " (cpu), ") : ", ");
    fprintf(stderr, "and a plain step, up to %d drafts a window (--spec auto)\n", o->draft_max);
    return 0;
}

int cli_drafts_open(const cli_opts *o, const strata_model *target, strata_session *sess, cli_drafts *d) {
    memset(d, 0, sizeof *d);
    d->draft_min = o->draft_min;
    int rc = drafts_check(o);
    if (rc || o->spec == CLI_SPEC_NONE) return rc;
    d->policy = o->spec == CLI_SPEC_AUTO;
    if (cli_oracle_wanted(o)) /* run.c computes its continuation once the prompt is read */
        return drafts_add(d, "oracle", NULL, 1, o->draft_max);
    if (o->spec == CLI_SPEC_AUTO) return drafts_open_auto(o, target, sess, d);
    strata_drafter *dr = NULL;
    if (o->spec == CLI_SPEC_MTP) {
        if (strata_drafter_mtp_create(sess, &dr) != STRATA_OK) return cli_fail("--spec mtp: %s", cli_lib_error());
        if (!o->quiet)
            fprintf(stderr, "strata: speculative decoding: %s, up to %d a window\n", strata_drafter_describe(dr),
                    o->draft_max);
        return drafts_add(d, "mtp", dr, 0, o->draft_max);
    }
    if (o->spec == CLI_SPEC_SELF) {
        if (strata_drafter_self_create(sess, &dr) != STRATA_OK) return cli_fail("--spec self: %s", cli_lib_error());
        if (!o->quiet)
            fprintf(stderr, "strata: speculative decoding: self-drafts (the model with only the experts in its "
                    "fast tier: misses and CPU layers' experts dropped), up to %d a window\n", o->draft_max);
        return drafts_add(d, "self-draft", dr, 0, o->draft_max);
    }
    if (o->spec == CLI_SPEC_NGRAM) {
        if (strata_drafter_ngram_create(2, 4, &dr) != STRATA_OK) return cli_fail("--spec ngram: %s", cli_lib_error());
        if (!o->quiet)
            fprintf(stderr, "strata: speculative decoding: n-gram drafts (2..4 tokens matched), up to %d "
                    "a window\n", o->draft_max);
        return drafts_add(d, "prompt lookup", dr, 1, o->draft_max);
    }
    if ((rc = drafts_model(o, target, sess, &dr))) return rc;
    if (!o->quiet)
        fprintf(stderr, "strata: speculative decoding: drafts from %s (%s), up to %d a window\n", o->draft_model,
                cli_session_on_gpu(o) ? "cuda" : "cpu", o->draft_max);
    return drafts_add(d, "draft model", dr, 0, o->draft_max);
}

void cli_drafts_close(cli_drafts *d) {
    for (int i = 0; i < d->n; i++) {
        strata_drafter_free(d->src[i].drafter);
        strata_spec_policy_free(d->src[i].policy);
    }
    memset(d, 0, sizeof *d);
}

/* A draft model reads history[0..n) (its proposal of nothing), the seconds a token learnt. */
static int drafts_catch_up(cli_draft_src *s, const strata_token *history, int64_t n) {
    const int64_t pending = n - s->read;
    int32_t nd = 0;
    const double t0 = cli_now();
    if (strata_drafter_propose(s->drafter, history, n, 0, NULL, &nd) != STRATA_OK)
        return cli_fail("the draft model reading the text: %s", strata_last_error());
    if (pending > 0) {
        const double per = (cli_now() - t0) / (double)pending;
        s->catchup_s = s->catchup_s > 0 ? s->catchup_s + 0.25 * (per - s->catchup_s) : per;
    }
    s->read = n;
    return 0;
}

int cli_drafts_prompt(cli_drafts *d, const strata_token *history, int64_t n) {
    for (int i = 0; i < d->n; i++) {
        int rc = d->src[i].reads_prompt ? drafts_catch_up(&d->src[i], history, n) : 0;
        if (rc) return rc;
    }
    return 0;
}

/* Source s's proposal of up to want drafts into s->draft; a costly drafter's seconds a token
 * learnt. Adds the seconds to *draft_s. */
static int drafts_propose(const cli_drafts *d, cli_draft_src *s, const strata_token *history, int64_t n,
                          int32_t want, double *draft_s) {
    s->nd = 0;
    if (s->reads_prompt && n - s->read > 1) { /* the catching up timed apart from the drafting */
        const double t1 = cli_now();
        int rc = drafts_catch_up(s, history, n);
        *draft_s += cli_now() - t1;
        if (rc) return rc;
    }
    const double t0 = cli_now();
    if (!s->drafter) cli_oracle_propose(d->oracle, history, n, want, s->draft, &s->nd);
    else if (strata_drafter_propose(s->drafter, history, n, want, s->draft, &s->nd) != STRATA_OK)
        return cli_fail("drafting (%s): %s", s->name, strata_last_error());
    const double dt = cli_now() - t0;
    *draft_s += dt;
    if (!s->cheap && s->nd > 0) {
        const double per = dt / s->nd;
        s->tok_s = s->tok_s > 0 ? s->tok_s + 0.25 * (per - s->tok_s) : per;
    }
    if (s->reads_prompt) s->read = n;
    return 0;
}

/* A probe (a window not expected to pay) may cost at most this share of the plain steps since the
 * drafter's last proposal in catching up: a draft model far behind is not worth the news. */
#define DRAFTS_PROBE_CATCHUP 0.02

/* A draft model's choice of k drafts (rate: the policy's expected tokens a second) with its catching
 * up on pending tokens counted: the rate it then expects, or 0 when the choice is a probe whose
 * catching up costs more than DRAFTS_PROBE_CATCHUP of a plain step a token. */
static double drafts_rate_behind(const cli_draft_src *s, int32_t k, double rate, int64_t pending) {
    const double plain_rate = strata_spec_policy_rate(s->policy, 0, 0.0); /* 1 / plain_s */
    if (!s->reads_prompt || pending <= 0 || !(rate > 0) || !(plain_rate > 0)) return rate;
    /* the catching up as more seconds a drafted token: the policy's own rate then counts it */
    const double behind = strata_spec_policy_rate(s->policy, k, s->tok_s + (double)pending * s->catchup_s / k);
    const int probe = behind <= 1.02 * plain_rate;
    return probe && s->catchup_s * plain_rate > DRAFTS_PROBE_CATCHUP ? 0.0 : behind;
}

int cli_drafts_next(cli_drafts *d, const strata_token *history, int64_t n_history, int32_t max, int *which,
                    const strata_token **draft, int32_t *k, double *draft_s) {
    *which = 0;
    *k = 0;
    *draft = NULL;
    *draft_s = 0.0;
    for (int i = 0; i < d->n; i++) d->src[i].nd = 0;
    if (d->n == 0 || max <= 0) return 0;
    if (!d->policy) { /* one drafter, every proposal of --draft-min or more verified */
        cli_draft_src *s = &d->src[0];
        int rc = drafts_propose(d, s, history, n_history, max, draft_s);
        if (rc) return rc;
        *k = s->nd >= d->draft_min ? s->nd : 0;
        *draft = s->draft;
        return 0;
    }
    /* each policy's choice (cheap drafters on their proposal, costly ones before drafting), the
     * window of the highest expected rate */
    int best = -1;
    int32_t best_k = 0;
    double best_rate = 0.0;
    for (int i = 0; i < d->n; i++) {
        cli_draft_src *s = &d->src[i];
        int32_t ki;
        if (s->cheap) {
            int rc = drafts_propose(d, s, history, n_history, max, draft_s);
            if (rc) return rc;
            ki = strata_spec_policy_choose(s->policy, s->nd, 0.0);
        } else {
            ki = strata_spec_policy_choose(s->policy, max, s->tok_s);
        }
        double rate = ki > 0 ? strata_spec_policy_rate(s->policy, ki, s->cheap ? 0.0 : s->tok_s) : 0.0;
        if (ki > 0 && !s->cheap) rate = drafts_rate_behind(s, ki, rate, n_history - s->read);
        if (ki > 0 && rate > 0 && (best < 0 || rate > best_rate)) {
            best = i;
            best_k = ki;
            best_rate = rate;
        }
    }
    if (best < 0) return 0;
    cli_draft_src *s = &d->src[best];
    if (!s->cheap) {
        int rc = drafts_propose(d, s, history, n_history, best_k, draft_s);
        if (rc) return rc;
        best_k = s->nd;
    }
    *which = best;
    *k = best_k;
    *draft = s->draft;
    return 0;
}

void cli_drafts_observe(cli_drafts *d, int which, int32_t k, const strata_token *win, int32_t n_win,
                        double seconds) {
    if (d->n == 0) return;
    int32_t j = 0; /* the chosen window's accepted drafts */
    if (k > 0) {
        cli_draft_src *s = &d->src[which];
        while (j < k && j < n_win && win[j] == s->draft[j]) j++;
        s->windows++;
        s->drafted += j + (j < k);
        s->accepted += j;
    }
    if (!d->policy) return;
    for (int i = 0; i < d->n; i++) {
        cli_draft_src *s = &d->src[i];
        if (k > 0 && i == which) {
            strata_spec_policy_observe(s->policy, k, j, seconds);
            continue;
        }
        if (k == 0) strata_spec_policy_observe(s->policy, 0, 0, seconds);
        else strata_spec_policy_observe_cost(s->policy, k, seconds);
        if (s->nd > 0 && n_win > 0) strata_spec_policy_observe_unverified(s->policy, s->draft[0] == win[0]);
    }
}

/* --spec auto: the first drafter's policy figures (the costs are every policy's; its acceptance
 * stands for the run's), and the windows and probes of all. 0 without a policy. */
static int drafts_policy_totals(const cli_drafts *d, strata_spec_policy_stats *ps, int64_t *windows,
                                int64_t *probes) {
    if (!d->policy || strata_spec_policy_get_stats(d->src[0].policy, ps) != STRATA_OK) return 0;
    *windows = *probes = 0;
    for (int i = 0; i < d->n; i++) {
        strata_spec_policy_stats q;
        if (strata_spec_policy_get_stats(d->src[i].policy, &q) != STRATA_OK) continue;
        *windows += q.windows;
        *probes += q.probes;
    }
    return 1;
}

void cli_drafts_print(const cli_drafts *d) {
    if (d->n == 0) return;
    if (d->n > 1 || d->policy) {
        fprintf(stderr, "strata: drafters:");
        for (int i = 0; i < d->n; i++) {
            const cli_draft_src *s = &d->src[i];
            fprintf(stderr, "%s %s %lld windows, %lld of %lld drafts accepted (%.1f%%)", i ? ";" : "", s->name,
                    (long long)s->windows, (long long)s->accepted, (long long)s->drafted,
                    s->drafted ? 100.0 * (double)s->accepted / (double)s->drafted : 0.0);
            strata_spec_policy_stats ps;
            if (s->policy && strata_spec_policy_get_stats(s->policy, &ps) == STRATA_OK)
                fprintf(stderr, ", estimate %.1f%%", 100.0 * ps.acceptance);
            if (!s->cheap && s->tok_s > 0) fprintf(stderr, ", %.3f ms a draft", 1e3 * s->tok_s);
        }
        fputc('\n', stderr);
    }
    strata_spec_policy_stats ps;
    int64_t windows, probes;
    if (!drafts_policy_totals(d, &ps, &windows, &probes)) return;
    fprintf(stderr, "strata: draft policy: %lld windows (%lld probes), %lld plain steps; acceptance now "
            "%.1f%%, windows pay from ", (long long)windows, (long long)probes, (long long)ps.plain_steps,
            100.0 * ps.acceptance);
    if (ps.break_even >= 0) fprintf(stderr, "%.0f%%", 100.0 * ps.break_even);
    else fprintf(stderr, "never");
    fprintf(stderr, "; ms: plain step %.3f, windows of 1..%d drafts", 1e3 * ps.plain_s, (int)ps.draft_max);
    for (int k = 1; k <= ps.draft_max; k++) fprintf(stderr, " %.3f", 1e3 * ps.window_s[k]);
    fputc('\n', stderr);
}

void cli_drafts_json(FILE *f, const cli_drafts *d) {
    if (d->n == 0) return;
    fprintf(f, ", \"drafters\": [");
    for (int i = 0; i < d->n; i++) {
        const cli_draft_src *s = &d->src[i];
        fprintf(f, "%s{\"name\": \"%s\", \"windows\": %lld, \"drafted\": %lld, \"accepted\": %lld, "
                "\"draft_ms\": %.4f", i ? ", " : "", s->name, (long long)s->windows, (long long)s->drafted,
                (long long)s->accepted, 1e3 * s->tok_s);
        strata_spec_policy_stats ps;
        if (s->policy && strata_spec_policy_get_stats(s->policy, &ps) == STRATA_OK)
            fprintf(f, ", \"acceptance_estimate\": %.4f, \"probes\": %lld", ps.acceptance, (long long)ps.probes);
        fputc('}', f);
    }
    fputc(']', f);
    strata_spec_policy_stats ps;
    int64_t windows, probes;
    if (!drafts_policy_totals(d, &ps, &windows, &probes)) return;
    fprintf(f, ", \"policy_windows\": %lld, \"policy_probes\": %lld, \"policy_plain_steps\": %lld, "
            "\"policy_acceptance\": %.4f, \"policy_break_even\": %.2f, \"policy_choice\": %d, "
            "\"policy_plain_ms\": %.4f, \"policy_window_ms\": [", (long long)windows, (long long)probes,
            (long long)ps.plain_steps, ps.acceptance, ps.break_even, (int)ps.choice, 1e3 * ps.plain_s);
    for (int k = 0; k <= ps.draft_max; k++) fprintf(f, "%s%.4f", k ? ", " : "", 1e3 * ps.window_s[k]);
    fputc(']', f);
}
