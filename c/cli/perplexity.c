/* perplexity.c - `strata perplexity -m MODEL -f TEXT [-c 512] [--stride N] [--kl-base FILE |
 * --kl FILE]`: perplexity the way llama-perplexity measures it, and a top-K KL comparison of two
 * runs on the same text.
 *
 * The text is tokenized whole (no BOS); chunk i covers tokens [i*stride, i*stride + n_ctx) (stride
 * defaults to n_ctx); each chunk starts from an empty cache, its first token replaced by BOS when
 * the vocabulary adds one, and only its second half is scored: the logits at positions
 * j = n_ctx/2 .. n_ctx-2 against token j+1 (llama-perplexity's `first = n_ctx/2`). PPL = exp(mean
 * NLL); its error is PPL * sqrt(var(NLL) / (N - 1)), llama.cpp's estimate.
 *
 * --kl-base FILE writes the top-K logprob rows of every scored position (the --logpos JSONL format
 * with "source": "perplexity"); --kl FILE re-runs and compares: per position the top-K KL(base ||
 * this run) over the base's top-K ids (cli_kl_topk: this run's logprobs are exact, the rest of
 * the vocabulary is one bucket), then mean, median, 99.9th percentile, max and same-top-1 %. */
#include "logprobs.h"
#include "session_setup.h"
#include "stats_print.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Arguments
 * ------------------------------------------------------------------------------------------- */

static void ppl_usage(FILE *f) {
    fprintf(f, "usage: strata perplexity -m MODEL.gguf -f TEXT [-c N] [--stride N] [-b N] [-t N]\n"
               "                         [--kv-type f16|f32] [--kl-base FILE | --kl FILE]\n"
               "                         [--logpos-top K]\n\n"
               "Perplexity over chunks of -c tokens (default 512), scoring the second half of each\n"
               "chunk like llama-perplexity; --kl-base saves the top-K logprobs of the scored\n"
               "positions, --kl compares this run with such a file (mean, median, 99.9%% KL, same\n"
               "top-1 %%).\n");
}

/* The command line into o, -c and --stride settled. 0 to go on, -1 after --help (exit 0), else
 * the exit status. */
static int parse_args(int argc, char **argv, cli_opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { ppl_usage(stdout); return -1; }
        int rc = cli_opts_parse(o, argc, argv, &i);
        if (rc == 1) continue;
        if (rc) return rc;
        if (a[0] == '-' && a[1]) return cli_usage_error("unknown option '%s'", a);
        return cli_usage_error("unexpected argument '%s'", a);
    }
    if (!o->model) return cli_usage_error("perplexity needs -m MODEL.gguf");
    if (!o->prompt_file) return cli_usage_error("perplexity needs -f TEXT_FILE");
    if (o->kl && o->kl_base) return cli_usage_error("give --kl-base or --kl, not both");
    int n_ctx = o->n_ctx ? o->n_ctx : 512;
    if (n_ctx < 4) return cli_usage_error("-c %d is too small for perplexity (>= 4)", n_ctx);
    if (!o->stride) o->stride = n_ctx;
    o->n_ctx = n_ctx;
    if (o->n_batch > n_ctx) o->n_batch = n_ctx;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The run
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    cli_opts *o;
    int n_ctx, stride, first; /* chunk length, step, first scored position in a chunk */
    strata_model *model;
    strata_session *sess;
    int32_t V;
    strata_token *toks;       /* the whole text */
    int64_t n_tok, n_chunks, n_scored;
    strata_token *chunk;      /* [n_ctx] */
    float *logits;            /* [n_batch * V] */
    int add_bos;
    cli_logpos_dump base;     /* --kl */
    double *kls;              /* --kl: KL at each scored position */
    FILE *kl_out;             /* --kl-base */
    cli_topk topk;            /* --kl-base's rows */
    /* running totals */
    double nll, nll2;
    int64_t count, same_top1, bi; /* bi: the next base row */
} ppl_run;

/* --kl: the base has this model's vocabulary and this run's positions; --kl-base: its header. */
static int open_kl_files(ppl_run *p) {
    const cli_opts *o = p->o;
    if (o->kl) {
        if (p->base.n_vocab != p->V)
            return cli_fail("--kl base has n_vocab %d, this model %d", (int)p->base.n_vocab, (int)p->V);
        if (p->base.n != p->n_scored)
            return cli_fail("--kl base has %lld positions, this run scores %lld (same text, -c and "
                            "--stride?)", (long long)p->base.n, (long long)p->n_scored);
        if (!(p->kls = malloc((size_t)p->n_scored * sizeof *p->kls))) return cli_fail("out of memory");
    }
    if (o->kl_base) {
        if (!(p->kl_out = fopen(o->kl_base, "w")))
            return cli_fail("cannot write '%s': %s", o->kl_base, strerror(errno));
        int rc = cli_topk_init(&p->topk, p->V, o->logpos_top);
        if (rc) return rc;
        char extra[128];
        snprintf(extra, sizeof extra, ", \"source\": \"perplexity\", \"n_ctx\": %d, \"stride\": %d",
                 p->n_ctx, p->stride);
        cli_logpos_header(p->kl_out, o->model, p->V, p->topk.k, extra);
    }
    return 0;
}

/* The model, the text's tokens and chunks, the session, the buffers and the --kl files; then the
 * line that says what will be scored. */
static int ppl_prepare(ppl_run *p, const char *text, size_t text_len) {
    cli_opts *o = p->o;
    double load_s = 0;
    int rc = cli_load_model(o, &p->model, &load_s);
    if (rc) return rc;
    strata_model_info mi;
    strata_model_get_info(p->model, &mi);
    p->V = mi.n_vocab;
    if ((rc = cli_tokenize(p->model, text, text_len, 0, 0, &p->toks, &p->n_tok))) return rc;
    p->n_chunks = p->n_tok >= p->n_ctx ? (p->n_tok - p->n_ctx) / p->stride + 1 : 0;
    if (p->n_chunks == 0)
        return cli_fail("'%s' has %lld tokens; perplexity needs at least -c %d", o->prompt_file,
                        (long long)p->n_tok, p->n_ctx);
    if ((rc = cli_new_session(o, p->model, &p->sess))) return rc;
    p->add_bos = cli_model_adds_bos(p->model);
    p->first = p->n_ctx / 2;
    p->n_scored = p->n_chunks * (int64_t)(p->n_ctx - 1 - p->first);
    p->chunk = malloc((size_t)p->n_ctx * sizeof *p->chunk);
    p->logits = malloc((size_t)o->n_batch * (size_t)p->V * sizeof *p->logits);
    if (!p->chunk || !p->logits) return cli_fail("out of memory for %d x %d logits", o->n_batch, p->V);
    if ((rc = open_kl_files(p))) return rc;
    fprintf(stderr, "perplexity: %lld tokens, %lld chunks of %d (stride %d), scoring positions "
            "%d..%d of each; model loaded in %.3f s\n", (long long)p->n_tok, (long long)p->n_chunks,
            p->n_ctx, p->stride, p->first, p->n_ctx - 2, load_s);
    return 0;
}

/* --kl: this row against the base's row bi (the same position), over the base's top-K ids. */
static int compare_with_base(ppl_run *p, const float *row, double lse, int32_t arg, int64_t pos) {
    const cli_logpos_dump *base = &p->base;
    const int64_t bi = p->bi;
    if (base->pos[bi] != pos)
        return cli_fail("--kl base line %lld is position %lld, this run %lld", (long long)bi + 2,
                        (long long)base->pos[bi], (long long)pos);
    double lpb[1024], *lpb_p = base->k <= 1024 ? lpb : malloc((size_t)base->k * sizeof(double));
    if (!lpb_p) return cli_fail("out of memory");
    const int32_t *ids = base->ids + bi * base->k;
    int ok = 1;
    for (int q = 0; q < base->k; q++) {
        if (ids[q] < 0 || ids[q] >= p->V) ok = 0;
        else lpb_p[q] = (double)row[ids[q]] - lse;
    }
    if (ok) p->kls[bi] = cli_kl_topk(base->lp + bi * base->k, lpb_p, base->k);
    if (lpb_p != lpb) free(lpb_p);
    if (!ok) return cli_fail("--kl base line %lld: token id out of range", (long long)bi + 2);
    p->same_top1 += ids[0] == arg;
    p->bi++;
    return 0;
}

/* One scored position: row holds the logits at position pos of the text, next its next token. */
static int score_position(ppl_run *p, const float *row, int64_t pos, strata_token next) {
    const int32_t V = p->V;
    double mx = -INFINITY, sum = 0;
    int32_t arg = 0;
    for (int32_t v = 0; v < V; v++) if (row[v] > mx) { mx = row[v]; arg = v; }
    for (int32_t v = 0; v < V; v++) sum += exp((double)row[v] - mx);
    double lse = mx + log(sum);
    double l = lse - (double)row[next];
    p->nll += l;
    p->nll2 += l * l;
    p->count++;
    if (p->kl_out) {
        cli_topk_row(&p->topk, row);
        cli_logpos_line(p->kl_out, pos, next, &p->topk);
    }
    return p->kls ? compare_with_base(p, row, lse, arg, pos) : 0;
}

/* Chunk c from an empty cache: read in batches, the second half scored. */
static int ppl_chunk(ppl_run *p, int64_t c) {
    const cli_opts *o = p->o;
    const int n_ctx = p->n_ctx, first = p->first;
    int64_t start = c * p->stride;
    memcpy(p->chunk, p->toks + start, (size_t)n_ctx * sizeof *p->chunk);
    if (p->add_bos) p->chunk[0] = strata_token_bos(p->model);
    strata_session_reset(p->sess);
    for (int b = 0, nb = 0; b < n_ctx; b += nb) {
        nb = n_ctx - b < o->n_batch ? n_ctx - b : o->n_batch;
        /* with DEGRADE_ZERO the scored positions are read as decode steps (one token each,
         * teacher-forced), where the approximation applies; the context before them is a
         * prompt */
        const int gen = o->degrade_zero && b >= first;
        if (o->degrade_zero && b < first && b + nb > first) nb = first - b;
        if (gen) nb = 1;
        strata_status dst = gen ? strata_session_decode_gen(p->sess, p->chunk + b, nb, p->logits, 1)
                                : strata_session_decode(p->sess, p->chunk + b, nb, p->logits, 1);
        if (dst != STRATA_OK) return cli_fail("chunk %lld: decode: %s", (long long)c, strata_last_error());
        for (int jj = 0; jj < nb; jj++) {
            int j = b + jj;
            if (j < first || j >= n_ctx - 1) continue;
            const float *row = p->logits + (size_t)jj * (size_t)p->V;
            const int rc = score_position(p, row, start + j, p->toks[start + j + 1]);
            if (rc) return rc;
        }
    }
    printf("[%lld]%.4f,", (long long)c + 1, exp(p->nll / (double)p->count));
    fflush(stdout);
    return 0;
}

/* Every chunk, then the estimate on stdout, the rate on stderr, the KL summary and DEGRADE_ZERO's
 * tally. */
static int ppl_all(ppl_run *p) {
    double t0 = cli_now();
    for (int64_t c = 0; c < p->n_chunks; c++) {
        const int rc = ppl_chunk(p, c);
        if (rc) return rc;
    }
    const int64_t count = p->count;
    double mean = p->nll / (double)count, var = p->nll2 / (double)count - mean * mean;
    double ppl = exp(mean);
    double err = count > 1 && var > 0 ? ppl * sqrt(var / (double)(count - 1)) : 0.0;
    double dt = cli_now() - t0;
    printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    fprintf(stderr, "perplexity: %lld positions scored in %.2f s (%.1f tokens/s evaluated)\n",
            (long long)count, dt, dt > 0 ? (double)(p->n_chunks * p->n_ctx) / dt : 0.0);
    if (p->kls) cli_print_kl_summary(p->o->kl, p->kls, p->bi, p->same_top1);
    cli_print_degrade_stats(p->sess);
    return 0;
}

int cli_cmd_perplexity(int argc, char **argv) {
    cli_opts o;
    cli_opts_init(&o);
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    size_t text_len = 0;
    char *text = cli_read_file(o.prompt_file, &text_len);
    if (!text) return CLI_EXIT_USAGE;
    ppl_run p;
    memset(&p, 0, sizeof p);
    p.o = &o;
    p.n_ctx = o.n_ctx;
    p.stride = o.stride;
    if (o.kl && (rc = cli_logpos_read(o.kl, &p.base))) { free(text); return rc; }

    rc = ppl_prepare(&p, text, text_len);
    if (!rc) rc = ppl_all(&p);
    if (p.kl_out && fclose(p.kl_out) != 0 && !rc) rc = cli_fail("cannot write '%s': %s", o.kl_base, strerror(errno));
    cli_topk_free(&p.topk);
    cli_logpos_dump_free(&p.base);
    free(p.kls);
    free(p.logits);
    free(p.chunk);
    free(p.toks);
    strata_session_free(p.sess);
    strata_model_free(p.model);
    free(text);
    return rc;
}
