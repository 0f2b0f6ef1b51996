/* logprobs.c - teacher-forced logprob dumps (logprobs.h): the top-K rows of log_softmax(logits)
 * computed in double, the JSONL lines run --logpos and perplexity --kl-base write, reading such
 * a file back for perplexity --kl, the top-K KL estimate between two rows and the summary of a
 * KL comparison. */
#include "logprobs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Top-K rows and writing a dump
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

/* ---------------------------------------------------------------------------------------------
 * Reading a dump
 * ------------------------------------------------------------------------------------------- */

void cli_logpos_dump_free(cli_logpos_dump *b) {
    free(b->pos);
    free(b->ids);
    free(b->lp);
    b->pos = NULL;
    b->ids = NULL;
    b->lp = NULL;
}

static int json_int(const char *line, const char *key, long long *out) {
    const char *p = strstr(line, key);
    if (!p) return -1;
    p += strlen(key);
    while (*p == ' ' || *p == ':') p++;
    char *end;
    *out = strtoll(p, &end, 10);
    return end == p ? -1 : 0;
}

/* Parses "[[id, lp], ...]" at p into k pairs; returns 0 on success. */
static int parse_top(const char *p, int k, int32_t *ids, double *lp) {
    while (*p == ' ') p++;
    if (*p++ != '[') return -1;
    for (int j = 0; j < k; j++) {
        while (*p == ' ' || *p == ',') p++;
        if (*p++ != '[') return -1;
        char *end;
        long id = strtol(p, &end, 10);
        if (end == p) return -1;
        p = end;
        while (*p == ' ' || *p == ',') p++;
        double v = strtod(p, &end);
        if (end == p) return -1;
        p = end;
        while (*p == ' ') p++;
        if (*p++ != ']') return -1;
        ids[j] = (int32_t)id;
        lp[j] = v;
    }
    return 0;
}

int cli_logpos_read(const char *path, cli_logpos_dump *b) {
    memset(b, 0, sizeof *b);
    FILE *f = fopen(path, "r");
    if (!f) return cli_usage_error("cannot open --kl base '%s'", path);
    char *line = NULL;
    size_t cap = 0;
    long long v;
    int rc = 0;
    int64_t lineno = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        if (lineno == 1) {
            if (!strstr(line, "\"strata_logpos\"") || json_int(line, "\"n_vocab\"", &v) || v <= 0) {
                rc = cli_fail("'%s' is not a strata logpos dump (header line)", path);
                break;
            }
            b->n_vocab = (int32_t)v;
            if (json_int(line, "\"top_k\"", &v) || v <= 0 || v > 1000000) {
                rc = cli_fail("'%s': header has no valid top_k", path);
                break;
            }
            b->k = (int)v;
            continue;
        }
        if (b->n == b->cap) {
            int64_t nc = b->cap ? b->cap * 2 : 1024;
            int64_t *np = realloc(b->pos, (size_t)nc * sizeof *np);
            if (np) b->pos = np;
            int32_t *ni = realloc(b->ids, (size_t)nc * (size_t)b->k * sizeof *ni);
            if (ni) b->ids = ni;
            double *nl = realloc(b->lp, (size_t)nc * (size_t)b->k * sizeof *nl);
            if (nl) b->lp = nl;
            if (!np || !ni || !nl) { rc = cli_fail("out of memory reading '%s'", path); break; }
            b->cap = nc;
        }
        const char *top = strstr(line, "\"top\":");
        if (json_int(line, "\"pos\"", &v) || !top ||
            parse_top(top + 6, b->k, b->ids + b->n * b->k, b->lp + b->n * b->k)) {
            rc = cli_fail("'%s' line %lld: not a position line with %d top entries", path,
                          (long long)lineno, b->k);
            break;
        }
        b->pos[b->n++] = v;
    }
    free(line);
    fclose(f);
    if (!rc && lineno == 0) rc = cli_fail("'%s' is empty", path);
    if (rc) cli_logpos_dump_free(b);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The KL summary
 * ------------------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void cli_print_kl_summary(const char *base_path, double *kl, int64_t n, int64_t same_top1) {
    double sum = 0, sum2 = 0;
    for (int64_t i = 0; i < n; i++) { sum += kl[i]; sum2 += kl[i] * kl[i]; }
    double mean = sum / (double)n;
    double var = n > 1 ? (sum2 / (double)n - mean * mean) * (double)n / (double)(n - 1) : 0.0;
    double err = n > 1 && var > 0 ? sqrt(var / (double)n) : 0.0;
    qsort(kl, (size_t)n, sizeof *kl, cmp_double);
    double median = n % 2 ? kl[n / 2] : 0.5 * (kl[n / 2 - 1] + kl[n / 2]);
    int64_t r999 = (int64_t)ceil(0.999 * (double)n) - 1;
    if (r999 < 0) r999 = 0;
    printf("KL divergence vs %s (top-K estimate over the base's top ids, %lld positions):\n",
           base_path, (long long)n);
    printf("  mean %.6f +/- %.6f | median %.6f | 99.9%% %.6f | max %.6f\n", mean, err, median,
           kl[r999], kl[n - 1]);
    printf("  same top-1: %.3f %% (%lld of %lld)\n", 100.0 * (double)same_top1 / (double)n,
           (long long)same_top1, (long long)n);
}
