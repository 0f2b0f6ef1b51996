/* oracle.h - the oracle drafter of --spec oracle and --oracle-rate (benchmarks only): it drafts
 * the model's own continuation, computed first with a plain run of the same prompt and sampling,
 * each drafted token right with probability --oracle-rate, so a run measures what windows give at
 * a chosen acceptance (oracle.c). */
#ifndef STRATA_CLI_ORACLE_H
#define STRATA_CLI_ORACLE_H

#include "options.h"

typedef struct {
    strata_token *seq; /* [n_seq] the prompt, then the model's continuation */
    int64_t n_seq;
    double rate;       /* the chance that a drafted token is the right one */
    uint64_t seed;     /* which drafts are made wrong: a function of it and the position */
    int32_t n_vocab;
} cli_oracle;

/* 1 if o asks for the oracle: --spec oracle, or --spec auto with --oracle-rate. */
int cli_oracle_wanted(const cli_opts *o);

/* The continuation of toks[0..n) that a plain run with o's sampling gives (up to n_predict tokens,
 * -1: to the context's end; it stops at an end-of-generation token unless --ignore-eos), computed
 * on sess, which is reset before and after (its stats too). Prints failures; 0 or an exit status. */
int cli_oracle_compute(cli_oracle *orc, const cli_opts *o, const strata_model *m, strata_session *sess,
                       const strata_token *toks, int64_t n, int n_predict);

/* Up to max drafts after history[0..n_history) (its last token not yet in the cache): the
 * continuation's next tokens, each replaced by a wrong one with probability 1 - rate; none where
 * the history has left the continuation (a different sampler state) or past its end. */
void cli_oracle_propose(const cli_oracle *orc, const strata_token *history, int64_t n_history, int32_t max,
                        strata_token *out, int32_t *n_out);

void cli_oracle_free(cli_oracle *orc);

#endif /* STRATA_CLI_ORACLE_H */
