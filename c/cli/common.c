/* common.c - shared pieces of the model-running subcommands (see common.h): the top-K logprob
 * dump and KL estimate, and the stats lines. */
#include "common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Top-K logprob rows
 * ------------------------------------------------------------------------------------------- */

int cli_topk_init(cli_topk *t, int32_t n_vocab, int k) {
    memset(t, 0, sizeof *t);
    if (k > n_vocab) k = n_vocab;
    t->n_vocab = n_vocab;
    t->k = k;
    t->ids = malloc((size_t)k * sizeof *t->ids);
    t->lp = malloc((size_t)k * sizeof *t->lp);
    if (!t->ids || !t->lp) {
        cli_topk_free(t);
        return cli_fail("out of memory for top-%d rows", k);
    }
    return 0;
}

void cli_topk_free(cli_topk *t) {
    free(t->ids);
    free(t->lp);
    t->ids = NULL;
    t->lp = NULL;
}

void cli_topk_row(cli_topk *t, const float *logits) {
    int32_t V = t->n_vocab;
    int k = t->k, n = 0;
    double mx = -INFINITY;
    for (int32_t i = 0; i < V; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    t->lse = mx + log(sum);
    /* insertion into a descending list of k; strict '>' keeps the lower id first on ties */
    for (int32_t i = 0; i < V; i++) {
        double l = logits[i];
        if (n == k && !(l > t->lp[k - 1])) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && l > t->lp[j - 1]) {
            t->lp[j] = t->lp[j - 1];
            t->ids[j] = t->ids[j - 1];
            j--;
        }
        t->lp[j] = l;
        t->ids[j] = i;
    }
    for (int j = 0; j < n; j++) t->lp[j] -= t->lse;
}

void cli_logpos_header(FILE *f, const char *model, int32_t n_vocab, int k, const char *extra) {
    fputs("{\"strata_logpos\": 1, \"model\": ", f);
    cli_json_string(f, model ? model : "");
    fprintf(f, ", \"n_vocab\": %d, \"top_k\": %d%s}\n", (int)n_vocab, k, extra ? extra : "");
}

void cli_logpos_line(FILE *f, int64_t pos, int64_t next, const cli_topk *t) {
    fprintf(f, "{\"pos\": %lld, \"token\": ", (long long)pos);
    if (next < 0) fputs("null", f);
    else fprintf(f, "%lld", (long long)next);
    fputs(", \"top\": [", f);
    for (int j = 0; j < t->k; j++)
        fprintf(f, "%s[%d, %.9g]", j ? ", " : "", (int)t->ids[j], t->lp[j]);
    fputs("]}\n", f);
}

double cli_kl_topk(const double *lp_a, const double *lp_b, int k) {
    double kl = 0.0, sa = 0.0, sb = 0.0;
    for (int i = 0; i < k; i++) {
        double a = exp(lp_a[i]), b = exp(lp_b[i]);
        sa += a;
        sb += b;
        if (a > 0.0) kl += a * (lp_a[i] - lp_b[i]);
    }
    double ra = 1.0 - sa, rb = 1.0 - sb;
    if (ra > 1e-12) kl += ra * (log(ra) - log(rb > 1e-300 ? rb : 1e-300));
    return kl < 0.0 ? 0.0 : kl;
}
