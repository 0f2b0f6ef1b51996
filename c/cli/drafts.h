/* drafts.h - the drafters of a run's verify windows (--spec) and the choice among them each step
 * (drafts.c). --spec ngram, draft, self, mtp and oracle use one drafter, every proposal of at
 * least --draft-min tokens verified. --spec auto uses every drafter the run can have: prompt
 * lookup, the draft model when --draft-model is given, the self-draft where the session has a
 * fast tier of experts (or the oracle alone with --oracle-rate), each with a draft policy of its
 * own (strata.h: its acceptance estimate; the window costs, the same for all, learnt by every
 * policy from every step), and each step takes the window of the drafter whose policy expects the
 * most tokens a second, or a plain step when none pays. Counts per drafter for the footer.
 *
 *     cli_drafts d;
 *     cli_drafts_open(o, model, sess, &d);             // NULL-free even for --spec none (d.n == 0)
 *     d.oracle = &oracle;                              // when cli_oracle_wanted(o)
 *     cli_drafts_next(&d, hist, n, max, &which, &draft, &k, &draft_s);
 *     ... k > 0: strata_session_speculate(sess, smp, last, draft, k, win, &n_win); else a plain step
 *     cli_drafts_observe(&d, which, k, win, n_win, seconds);
 *     cli_drafts_close(&d); */
#ifndef STRATA_CLI_DRAFTS_H
#define STRATA_CLI_DRAFTS_H

#include "options.h"
#include "oracle.h"

#include <stdio.h>

enum { CLI_DRAFTS_MAX = 3 };

typedef struct {
    const char *name;             /* "prompt lookup", "draft model", "self-draft", "mtp", "oracle" */
    strata_drafter *drafter;      /* NULL: the oracle (cli_drafts.oracle) */
    strata_spec_policy *policy;   /* --spec auto: its own; NULL otherwise */
    int cheap;                    /* proposals cost nothing: made every step (prompt lookup, oracle) */
    int reads_prompt;             /* a draft model: reads the prompt with the target, and catches up
                                     on the tokens since its last proposal before it drafts */
    int64_t read;                 /* the history it has read (reads_prompt) */
    double catchup_s;             /* seconds a token of that catching up takes (running mean) */
    double tok_s;                 /* seconds a drafted token takes (running mean; costly drafters) */
    int64_t windows, drafted, accepted; /* its windows; drafts up to the first rejected, accepted */
    strata_token draft[STRATA_DRAFT_MAX];
    int32_t nd;                   /* this step's proposal: draft[0..nd) */
} cli_draft_src;

typedef struct {
    cli_draft_src src[CLI_DRAFTS_MAX];
    int n;                        /* drafters; 0: --spec none */
    int policy;                   /* --spec auto */
    int32_t draft_min;            /* --draft-min (without the policy) */
    const cli_oracle *oracle;     /* the oracle source's continuation (set by run.c) */
} cli_drafts;

/* The drafters o asks for, each said in one stderr line unless --quiet: none for --spec none; the
 * oracle (its continuation computed later by run.c); else created on target / sess (a draft
 * model loaded with the options' model parameters into a session of its own with sess's n_ctx
 * and backend and the options' n_batch, kv_type and threads). --spec auto leaves out the
 * self-draft where the session has no fast tier. Prints failures; 0 or an exit status. */
int cli_drafts_open(const cli_opts *o, const strata_model *target, strata_session *sess, cli_drafts *d);
void cli_drafts_close(cli_drafts *d);
/* A draft model reads the prompt (history[0..n)) with the target, not at its first window. */
int cli_drafts_prompt(cli_drafts *d, const strata_token *history, int64_t n);
/* The next step after history[0..n_history) (its last token not yet in the cache), windows of at
 * most max drafts: *k > 0 drafts at *draft from drafter *which, or *k == 0 a plain step. *draft_s
 * gets the seconds drafting took. Prints failures; 0 or an exit status. */
int cli_drafts_next(cli_drafts *d, const strata_token *history, int64_t n_history, int32_t max, int *which,
                    const strata_token **draft, int32_t *k, double *draft_s);
/* After that step: the tokens it gave (win[0..n_win)) and its seconds, for the counts and the
 * policies (the chosen drafter's acceptance, every policy's costs, the unverified proposals of
 * the others). */
void cli_drafts_observe(cli_drafts *d, int which, int32_t k, const strata_token *win, int32_t n_win,
                        double seconds);

/* The footer's lines (stderr) and --stats-json's keys: per drafter, and the policy's figures. */
void cli_drafts_print(const cli_drafts *d);
void cli_drafts_json(FILE *f, const cli_drafts *d);

#endif /* STRATA_CLI_DRAFTS_H */
