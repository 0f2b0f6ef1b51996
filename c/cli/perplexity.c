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
 * Command
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

int cli_cmd_perplexity(int argc, char **argv) {
    cli_opts o;
    cli_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { ppl_usage(stdout); return 0; }
        int rc = cli_opts_parse(&o, argc, argv, &i);
        if (rc == 1) continue;
        if (rc) return rc;
        if (a[0] == '-' && a[1]) return cli_usage_error("unknown option '%s'", a);
        return cli_usage_error("unexpected argument '%s'", a);
    }
    if (!o.model) return cli_usage_error("perplexity needs -m MODEL.gguf");
    if (!o.prompt_file) return cli_usage_error("perplexity needs -f TEXT_FILE");
    if (o.kl && o.kl_base) return cli_usage_error("give --kl-base or --kl, not both");
    int n_ctx = o.n_ctx ? o.n_ctx : 512;
    if (n_ctx < 4) return cli_usage_error("-c %d is too small for perplexity (>= 4)", n_ctx);
    int stride = o.stride ? o.stride : n_ctx;
    o.n_ctx = n_ctx;
    if (o.n_batch > n_ctx) o.n_batch = n_ctx;

    size_t text_len = 0;
    char *text = cli_read_file(o.prompt_file, &text_len);
    if (!text) return CLI_EXIT_USAGE;
    cli_logpos_dump base;
    memset(&base, 0, sizeof base);
    int rc = 0;
    if (o.kl && (rc = cli_logpos_read(o.kl, &base))) { free(text); return rc; }

    strata_model *model = NULL;
    strata_session *sess = NULL;
    strata_token *toks = NULL, *chunk = NULL;
    float *logits = NULL;
    double *kls = NULL;
    FILE *kl_out = NULL;
    cli_topk topk;
    memset(&topk, 0, sizeof topk);
    double load_s = 0;
    if ((rc = cli_load_model(&o, &model, &load_s))) goto done;
    strata_model_info mi;
    strata_model_get_info(model, &mi);
    int32_t V = mi.n_vocab;
    int64_t n_tok = 0;
    if ((rc = cli_tokenize(model, text, text_len, 0, 0, &toks, &n_tok))) goto done;
    int64_t n_chunks = n_tok >= n_ctx ? (n_tok - n_ctx) / stride + 1 : 0;
    if (n_chunks == 0) {
        rc = cli_fail("'%s' has %lld tokens; perplexity needs at least -c %d", o.prompt_file,
                      (long long)n_tok, n_ctx);
        goto done;
    }
    if ((rc = cli_new_session(&o, model, &sess))) goto done;
    int add_bos = cli_model_adds_bos(model);
    int first = n_ctx / 2;
    int64_t n_scored = n_chunks * (int64_t)(n_ctx - 1 - first);
    chunk = malloc((size_t)n_ctx * sizeof *chunk);
    logits = malloc((size_t)o.n_batch * (size_t)V * sizeof *logits);
    if (!chunk || !logits) { rc = cli_fail("out of memory for %d x %d logits", o.n_batch, V); goto done; }
    if (o.kl) {
        if (base.n_vocab != V) {
            rc = cli_fail("--kl base has n_vocab %d, this model %d", (int)base.n_vocab, (int)V);
            goto done;
        }
        if (base.n != n_scored) {
            rc = cli_fail("--kl base has %lld positions, this run scores %lld (same text, -c and "
                          "--stride?)", (long long)base.n, (long long)n_scored);
            goto done;
        }
        if (!(kls = malloc((size_t)n_scored * sizeof *kls))) { rc = cli_fail("out of memory"); goto done; }
    }
    if (o.kl_base) {
        if (!(kl_out = fopen(o.kl_base, "w"))) {
            rc = cli_fail("cannot write '%s': %s", o.kl_base, strerror(errno));
            goto done;
        }
        if ((rc = cli_topk_init(&topk, V, o.logpos_top))) goto done;
        char extra[128];
        snprintf(extra, sizeof extra, ", \"source\": \"perplexity\", \"n_ctx\": %d, \"stride\": %d",
                 n_ctx, stride);
        cli_logpos_header(kl_out, o.model, V, topk.k, extra);
    }
    fprintf(stderr, "perplexity: %lld tokens, %lld chunks of %d (stride %d), scoring positions "
            "%d..%d of each; model loaded in %.3f s\n", (long long)n_tok, (long long)n_chunks,
            n_ctx, stride, first, n_ctx - 2, load_s);

    double nll = 0, nll2 = 0, t0 = cli_now();
    int64_t count = 0, same_top1 = 0, bi = 0;
    for (int64_t c = 0; c < n_chunks; c++) {
        int64_t start = c * stride;
        memcpy(chunk, toks + start, (size_t)n_ctx * sizeof *chunk);
        if (add_bos) chunk[0] = strata_token_bos(model);
        strata_session_reset(sess);
        for (int b = 0, nb = 0; b < n_ctx; b += nb) {
            nb = n_ctx - b < o.n_batch ? n_ctx - b : o.n_batch;
            /* with DEGRADE_ZERO the scored positions are read as decode steps (one token each,
             * teacher-forced), where the approximation applies; the context before them is a
             * prompt */
            const int gen = o.degrade_zero && b >= first;
            if (o.degrade_zero && b < first && b + nb > first) nb = first - b;
            if (gen) nb = 1;
            strata_status dst = gen ? strata_session_decode_gen(sess, chunk + b, nb, logits, 1)
                                    : strata_session_decode(sess, chunk + b, nb, logits, 1);
            if (dst != STRATA_OK) {
                rc = cli_fail("chunk %lld: decode: %s", (long long)c, strata_last_error());
                goto done;
            }
            for (int jj = 0; jj < nb; jj++) {
                int j = b + jj;
                if (j < first || j >= n_ctx - 1) continue;
                const float *row = logits + (size_t)jj * (size_t)V;
                double mx = -INFINITY, sum = 0;
                int32_t arg = 0;
                for (int32_t v = 0; v < V; v++) if (row[v] > mx) { mx = row[v]; arg = v; }
                for (int32_t v = 0; v < V; v++) sum += exp((double)row[v] - mx);
                double lse = mx + log(sum);
                strata_token next = toks[start + j + 1];
                double l = lse - (double)row[next];
                nll += l;
                nll2 += l * l;
                count++;
                if (kl_out) {
                    cli_topk_row(&topk, row);
                    cli_logpos_line(kl_out, start + j, next, &topk);
                }
                if (kls) {
                    if (base.pos[bi] != start + j) {
                        rc = cli_fail("--kl base line %lld is position %lld, this run %lld",
                                      (long long)bi + 2, (long long)base.pos[bi],
                                      (long long)(start + j));
                        goto done;
                    }
                    double lpb[1024], *lpb_p = base.k <= 1024 ? lpb : malloc((size_t)base.k * sizeof(double));
                    if (!lpb_p) { rc = cli_fail("out of memory"); goto done; }
                    const int32_t *ids = base.ids + bi * base.k;
                    int ok = 1;
                    for (int q = 0; q < base.k; q++) {
                        if (ids[q] < 0 || ids[q] >= V) ok = 0;
                        else lpb_p[q] = (double)row[ids[q]] - lse;
                    }
                    if (ok) kls[bi] = cli_kl_topk(base.lp + bi * base.k, lpb_p, base.k);
                    if (lpb_p != lpb) free(lpb_p);
                    if (!ok) { rc = cli_fail("--kl base line %lld: token id out of range", (long long)bi + 2); goto done; }
                    same_top1 += ids[0] == arg;
                    bi++;
                }
            }
        }
        printf("[%lld]%.4f,", (long long)c + 1, exp(nll / (double)count));
        fflush(stdout);
    }
    double mean = nll / (double)count, var = nll2 / (double)count - mean * mean;
    double ppl = exp(mean);
    double err = count > 1 && var > 0 ? ppl * sqrt(var / (double)(count - 1)) : 0.0;
    double dt = cli_now() - t0;
    printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    fprintf(stderr, "perplexity: %lld positions scored in %.2f s (%.1f tokens/s evaluated)\n",
            (long long)count, dt, dt > 0 ? (double)(n_chunks * n_ctx) / dt : 0.0);
    if (kls) cli_print_kl_summary(o.kl, kls, bi, same_top1);
    cli_print_degrade_stats(sess);

done:
    if (kl_out && fclose(kl_out) != 0 && !rc) rc = cli_fail("cannot write '%s': %s", o.kl_base, strerror(errno));
    cli_topk_free(&topk);
    cli_logpos_dump_free(&base);
    free(kls);
    free(logits);
    free(chunk);
    free(toks);
    strata_session_free(sess);
    strata_model_free(model);
    free(text);
    return rc;
}
