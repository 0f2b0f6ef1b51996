/* logprobs.h - teacher-forced logprob dumps and the top-K KL estimate (logprobs.c): the rows
 * run --logpos and perplexity --kl-base write, the reader perplexity --kl compares against, and
 * the KL summary it prints. tools/kl.py reads and compares the same files. */
#ifndef STRATA_CLI_LOGPROBS_H
#define STRATA_CLI_LOGPROBS_H

#include "cli.h"

#include <stdint.h>
#include <stdio.h>

/* ---- writing a dump ----------------------------------------------------------------------------
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

/* ---- reading a dump (perplexity --kl) -------------------------------------------------------- */

/* The position lines of a dump: n rows of k (id, logprob) pairs each. */
typedef struct {
    int32_t n_vocab;
    int k;
    int64_t n, cap;
    int64_t *pos;      /* [n] */
    int32_t *ids;      /* [n * k] */
    double *lp;        /* [n * k] */
} cli_logpos_dump;

/* Reads a dump written by --logpos or --kl-base. A file that cannot be opened is a usage error
 * (CLI_EXIT_USAGE), bad content CLI_EXIT_FAIL, each after its message; 0 when read. */
int cli_logpos_read(const char *path, cli_logpos_dump *d);
void cli_logpos_dump_free(cli_logpos_dump *d);

/* The KL summary on stdout for n positions compared with base_path: mean +/- its error, median,
 * 99.9th percentile, max (kl is sorted in place) and the share with the same top-1 id. */
void cli_print_kl_summary(const char *base_path, double *kl, int64_t n, int64_t same_top1);

#endif /* STRATA_CLI_LOGPROBS_H */
