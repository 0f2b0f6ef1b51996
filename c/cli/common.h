/* common.h - what the model-running subcommands (run.c, perplexity.c, bench.c) share besides
 * session_setup.h: the stats lines, and the teacher-forced logprob dump (top-K log-softmax rows,
 * JSONL) with the top-K KL estimate that tools/kl.py also uses. Uses only the public API
 * (strata.h). */
#ifndef STRATA_CLI_COMMON_H
#define STRATA_CLI_COMMON_H

#include "session_setup.h"
#include "stats_print.h"

#include <stdint.h>
#include <stdio.h>

/* ---- teacher-forced logprob dumps ------------------------------------------------------------
 * JSONL: a header line {"strata_logpos": 1, "model": ..., "n_vocab": V, "top_k": K, ...} then one
 * line per position {"pos": i, "token": NEXT_ID or null, "top": [[id, logprob], ...]} with the
 * K most probable ids in descending order, log-softmax computed in double. */

typedef struct {
    int32_t n_vocab;
    int k;
    int32_t *ids;     /* [k] */
    double *lp;       /* [k] */
    double lse;       /* log-sum-exp of the last row */
} cli_topk;

int cli_topk_init(cli_topk *t, int32_t n_vocab, int k);
void cli_topk_free(cli_topk *t);
/* Fills t->ids/lp with the top k of log_softmax(logits) (descending; lower id first on ties). */
void cli_topk_row(cli_topk *t, const float *logits);
/* Writes the header line; extra is NULL or more JSON members (", \"a\": 1"). */
void cli_logpos_header(FILE *f, const char *model, int32_t n_vocab, int k, const char *extra);
/* Writes one position line from t's current row; next < 0 writes "token": null. */
void cli_logpos_line(FILE *f, int64_t pos, int64_t next, const cli_topk *t);

/* Top-K KL(A||B) estimate over A's top-K support: with a_i the probabilities of A's K ids, b_i
 * B's for the same ids, and the rest buckets ra = 1 - sum a_i, rb = 1 - sum b_i:
 *     KL = sum_i a_i (log a_i - log b_i) + ra log(ra / rb)
 * i.e. the exact KL of the two distributions coarsened to (A's K ids, everything else): never
 * negative, a lower bound of the full KL, and exact when A's support fits in its top K. */
double cli_kl_topk(const double *lp_a, const double *lp_b, int k);

#endif /* STRATA_CLI_COMMON_H */
