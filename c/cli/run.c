/* run.c - `strata [run] -m MODEL -p PROMPT -n N ...`: text generation on the public API. Owns the
 * generation loop (prompt evaluation with optional teacher-forced logprob dump, sampling,
 * streaming UTF-8-safe output, stop strings, end-of-generation and context-full handling), the
 * interactive chat loop (its conversation and templates are chat.c's), and the embedded
 * default model run by `strata` without arguments. The end-of-run footer is stats_print.c's. */
#include "session_setup.h"
#include "stats_print.h"
#include "logprobs.h"
#include "drafts.h"
#include "oracle.h"
#include "verify_profile.h"
#include "chat.h"

#include <signal.h>

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set by SIGUSR1: print the [PROF] line at the next generated token. */
static volatile sig_atomic_t g_prof_requested = 0;
static void on_sigusr1(int sig) { (void)sig; g_prof_requested = 1; }

/* ---------------------------------------------------------------------------------------------
 * Streaming output: UTF-8 boundaries and stop strings
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    char *buf;           /* text generated in this turn */
    size_t len, cap;
    size_t emitted;      /* bytes of buf already written */
    const cli_opts *o;
    FILE *out;
} stream;

static int stream_append(stream *s, const char *p, size_t n) {
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + n + 1) cap *= 2;
        char *b = realloc(s->buf, cap);
        if (!b) return -1;
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = '\0';
    return 0;
}

static size_t utf8_seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0) return 2;
    if ((c & 0xf0) == 0xe0) return 3;
    if ((c & 0xf8) == 0xf0) return 4;
    return 1; /* continuation or invalid lead: stands alone */
}

static void stream_write(stream *s, size_t upto) {
    if (upto > s->emitted) {
        fwrite(s->buf + s->emitted, 1, upto - s->emitted, s->out);
        fflush(s->out);
        s->emitted = upto;
    }
}

/* Writes what can no longer change; returns 1 if a stop string appeared (output cut before it). */
static int stream_flush_safe(stream *s) {
    const cli_opts *o = s->o;
    /* a stop string can only start at or after `emitted` (see the hold-back below) */
    size_t cut = s->len + 1;
    for (int k = 0; k < o->n_stops; k++) {
        const char *hit = strstr(s->buf + s->emitted, o->stops[k]);
        if (hit && (size_t)(hit - s->buf) < cut) cut = (size_t)(hit - s->buf);
    }
    if (cut <= s->len) {
        stream_write(s, cut);
        s->len = cut;
        s->buf[cut] = '\0';
        return 1;
    }
    /* hold back the longest suffix that is a proper prefix of a stop string */
    size_t hold = 0;
    for (int k = 0; k < o->n_stops; k++) {
        size_t sl = strlen(o->stops[k]);
        for (size_t h = sl - 1; h > hold; h--) {
            if (h <= s->len - s->emitted && memcmp(s->buf + s->len - h, o->stops[k], h) == 0) {
                hold = h;
                break;
            }
        }
    }
    size_t safe = s->len - hold;
    if (hold) {
        while (safe > s->emitted && ((unsigned char)s->buf[safe] & 0xc0) == 0x80) safe--;
    } else {
        /* do not split an incomplete multi-byte sequence at the end */
        size_t j = s->len;
        for (int back = 0; back < 4 && j > s->emitted; back++) {
            j--;
            unsigned char c = (unsigned char)s->buf[j];
            if ((c & 0xc0) != 0x80) {
                if (j + utf8_seq_len(c) > s->len) safe = j;
                break;
            }
        }
    }
    stream_write(s, safe);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Generation
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const cli_opts *o;
    strata_model *model;
    strata_session *sess;
    strata_sampler *smp;
    int32_t n_vocab;
    float *logits;          /* [n_batch * n_vocab] */
    FILE *logpos;           /* NULL: no dump */
    cli_topk topk;
    int64_t logpos_base;    /* position of the next dumped row */
    cli_run_stats st;       /* over the whole run */
    cli_drafts drafts;      /* --spec: the drafters (none: plain steps) and --spec auto's policies */
    cli_oracle oracle;      /* --spec oracle (and auto with --oracle-rate): its continuation */
    cli_verify_profile *vp; /* --verify-profile: NULL when off */
    strata_token *hist;     /* --spec and chat: the tokens in the KV cache, in order, and room for one more */
    int64_t n_hist;
} runner;

enum { STOP_LIMIT, STOP_EOG, STOP_STRING, STOP_CTX };

/* Evaluates the prompt tokens, dumping logprob rows when asked; the last row stays in
 * r->logits. A prompt of up to --short-read tokens goes through the decode path instead, as verify
 * windows of --draft-max + 1 tokens (strata_session_decode_gen). */
static int eval_prompt(runner *r, const strata_token *toks, int64_t n, int64_t n_after) {
    const cli_opts *o = r->o;
    const int windows = o->short_read > 0 && n <= o->short_read;
    int64_t chunk = windows ? o->draft_max + 1 : o->n_batch;
    if (chunk > o->n_batch) chunk = o->n_batch;
    if (!r->logpos && !windows) {
        if (strata_session_decode(r->sess, toks, n, r->logits, 0) != STRATA_OK)
            return cli_fail("decode of %lld prompt tokens: %s", (long long)n, strata_last_error());
        return 0;
    }
    const int all = r->logpos != NULL;
    for (int64_t b = 0; b < n; b += chunk) {
        int64_t nb = n - b < chunk ? n - b : chunk;
        const strata_status st = windows ? strata_session_decode_gen(r->sess, toks + b, nb, r->logits, all)
                                         : strata_session_decode(r->sess, toks + b, nb, r->logits, all);
        if (st != STRATA_OK)
            return cli_fail("decode of prompt tokens %lld..%lld: %s", (long long)b,
                            (long long)(b + nb - 1), strata_last_error());
        for (int64_t j = 0; all && j < nb; j++) {
            cli_topk_row(&r->topk, r->logits + (size_t)j * (size_t)r->n_vocab);
            int64_t next = b + j + 1 < n ? toks[b + j + 1] : n_after;
            cli_logpos_line(r->logpos, r->logpos_base++, next, &r->topk);
        }
        if (all && b + nb == n && nb > 1) /* keep the last row first for sampling */
            memmove(r->logits, r->logits + (size_t)(nb - 1) * (size_t)r->n_vocab,
                    (size_t)r->n_vocab * sizeof(float));
    }
    if (all) fflush(r->logpos);
    return 0;
}

/* How each step hands the next token's choice to the sampler. */
typedef struct {
    /* plain greedy (temperature 0, no penalties): each step asks the session for its greedy
     * token (on the GPU: one token comes down instead of the logits); the first comes from the
     * prompt's logits as always */
    int fast_greedy;
    strata_token next;    /* fast_greedy: the session's greedy token after the last step, or -1 */
    /* sampling with top-k (the default chain): each step brings down only the candidates the
     * sampler needs (on the GPU: top_k + repeat_last_n pairs instead of n_vocab logits, selected
     * there); the same tokens (strata_sampler_sample_top) */
    int32_t need;         /* candidates a step brings down; 0: the whole logits row */
    strata_token *cids;   /* [need] */
    float *cvals;         /* [need] */
    int have_cand;        /* the candidates of the last step are in cids / cvals */
} step_io;

static int step_io_init(step_io *io, const runner *r) {
    const strata_sampler_params *sp = &r->o->sp;
    memset(io, 0, sizeof *io);
    io->next = -1;
    io->fast_greedy = !(sp->temperature > 0.0f) && sp->repeat_penalty == 1.0f &&
                      sp->presence_penalty == 0.0f && sp->frequency_penalty == 0.0f;
    io->need = io->fast_greedy ? 0 : strata_sampler_top_needed(r->smp);
    io->cids = io->need ? malloc(sizeof *io->cids * (size_t)io->need) : NULL;
    io->cvals = io->need ? malloc(sizeof *io->cvals * (size_t)io->need) : NULL;
    if (io->need && (!io->cids || !io->cvals)) {
        free(io->cids);
        free(io->cvals);
        return cli_fail("out of memory");
    }
    return 0;
}

static void step_io_free(step_io *io) {
    free(io->cids);
    free(io->cvals);
}

/* The next token: the session's greedy one, or the sampler's from the candidates or the logits. */
static strata_status step_sample(runner *r, const step_io *io, strata_token *tok) {
    *tok = io->next;
    if (*tok >= 0) return STRATA_OK;
    return io->have_cand ? strata_sampler_sample_top(r->smp, io->cids, io->cvals, io->need, tok)
                         : strata_sampler_sample(r->smp, r->logits, tok);
}

/* Reads tok into the cache and brings down what the next choice needs. */
static strata_status step_decode(runner *r, step_io *io, strata_token tok) {
    const strata_status st = io->fast_greedy ? strata_session_decode_greedy(r->sess, &tok, 1, &io->next)
                             : io->need ? strata_session_decode_topk(r->sess, &tok, 1, io->need, io->cids, io->cvals)
                                        : strata_session_decode_gen(r->sess, &tok, 1, r->logits, 0);
    io->have_cand = io->need > 0;
    return st;
}

/* What a generation loop leaves: the stop reason, the tokens generated, the last sampled token
 * not yet in the cache (or -1). */
typedef struct {
    int why;
    int64_t n_gen;
    strata_token pending;
} gen_end;

/* Streams tok, a generated token that is not an end of generation. *stop is 1 when generation
 * ends with it (a stop string, or n_predict reached): it is end->pending. Returns 0, or the status
 * after a failure. */
static int emit_token(runner *r, stream *s, strata_token tok, int n_predict, gen_end *end, int *stop) {
    char piece[256];
    end->n_gen++;
    int64_t plen = 0;
    strata_status st = strata_token_to_piece(r->model, tok, 0, piece, sizeof piece, &plen);
    if (st == STRATA_OK && stream_append(s, piece, (size_t)plen) != 0) st = STRATA_ERR_NOMEM;
    if (st != STRATA_OK) return cli_fail("token %d: %s", (int)tok, strata_last_error());
    if (stream_flush_safe(s)) end->why = STOP_STRING;
    else if (!(n_predict >= 0 && end->n_gen >= n_predict)) return 0;
    end->pending = tok;
    *stop = 1;
    return 0;
}

static void prof_line_now(runner *r, const gen_end *end, double t1) {
    g_prof_requested = 0;
    fputc('\n', stderr);
    cli_print_prof_line(r->sess, cli_session_on_gpu(r->o), cli_rate((double)r->st.n_prompt, r->st.prompt_s),
                        cli_rate((double)end->n_gen, cli_now() - t1));
}

/* Samples, streams and decodes up to n_predict tokens after the prompt's logits; t0 and t1 are
 * when the prompt started and ended. Returns 0, or the status after a failure (nothing more of
 * the stream is written). */
static int gen_loop(runner *r, stream *s, int n_predict, double t0, double t1, gen_end *end) {
    const cli_opts *o = r->o;
    const int32_t n_ctx = strata_session_n_ctx(r->sess);
    step_io io;
    int rc = step_io_init(&io, r);
    if (rc) return rc;
    for (int first = 1;; first = 0) {
        if (n_predict >= 0 && end->n_gen >= n_predict) break;
        if (g_prof_requested) prof_line_now(r, end, t1); /* kill -USR1: the [PROF] line now */
        strata_token tok;
        if (step_sample(r, &io, &tok) != STRATA_OK) { rc = cli_fail("sampling: %s", strata_last_error()); break; }
        if (first) r->st.ttft_s += cli_now() - t0;
        if (!o->ignore_eos && strata_token_is_eog(r->model, tok)) {
            end->pending = tok;
            end->why = STOP_EOG;
            break;
        }
        strata_sampler_accept(r->smp, tok);
        int stop = 0;
        if ((rc = emit_token(r, s, tok, n_predict, end, &stop)) || stop) break;
        if (strata_session_n_past(r->sess) >= n_ctx) {
            end->why = STOP_CTX;
            r->st.ctx_full = 1;
            break;
        }
        if (step_decode(r, &io, tok) != STRATA_OK) {
            rc = cli_fail("decode at position %d: %s", (int)strata_session_n_past(r->sess),
                          strata_last_error());
            break;
        }
        if (r->hist) r->hist[r->n_hist++] = tok;
    }
    step_io_free(&io);
    return rc;
}

/* The tokens after `last` (not yet in the cache): a verify window of what a drafter proposes (the
 * one --spec auto's policies expect fastest, or every proposal of --draft-min or more), or a plain
 * step when that is none. win[0..*n_win) gets them, accepted into the sampler. */
static int spec_advance(runner *r, step_io *io, strata_token last, int32_t max, strata_token *win,
                        int32_t *n_win) {
    const cli_opts *o = r->o;
    const strata_token *draft = NULL;
    int which = 0;
    int32_t k = 0;
    double draft_s = 0.0;
    r->hist[r->n_hist] = last;
    int rc = cli_drafts_next(&r->drafts, r->hist, r->n_hist + 1, max, &which, &draft, &k, &draft_s);
    if (rc) return rc;
    const int32_t n_past = strata_session_n_past(r->sess);
    const double t0 = cli_now();
    if (r->vp) cli_vp_begin(r->vp, r->sess);
    if (k == 0) {
        strata_token t;
        if (step_decode(r, io, last) != STRATA_OK)
            return cli_fail("decode at position %d: %s", (int)n_past, strata_last_error());
        if (step_sample(r, io, &t) != STRATA_OK) return cli_fail("sampling: %s", strata_last_error());
        if (o->ignore_eos || !strata_token_is_eog(r->model, t)) strata_sampler_accept(r->smp, t);
        win[0] = t;
        *n_win = 1;
    } else if (strata_session_speculate(r->sess, r->smp, last, draft, k, win, n_win) != STRATA_OK) {
        return cli_fail("verify window at position %d: %s", (int)n_past, strata_last_error());
    }
    const double dt = cli_now() - t0;
    if (r->vp) cli_vp_end(r->vp, r->sess, k, *n_win, draft_s);
    cli_drafts_observe(&r->drafts, which, k, win, *n_win, dt);
    return 0;
}

/* gen_loop with verify windows (--spec): the drafter proposes what follows r->hist and the token
 * not yet in the cache, spec_advance verifies it or steps. A window's tokens past a stop are
 * rolled back out of the cache, so it ends as gen_loop's would. */
static int spec_loop(runner *r, stream *s, int n_predict, double t0, double t1, gen_end *end) {
    const cli_opts *o = r->o;
    const int32_t n_ctx = strata_session_n_ctx(r->sess);
    strata_token win[STRATA_DRAFT_MAX + 1];
    int32_t n_win = 1; /* win[0..n_win-1) are in the cache, win[n_win-1] is not */
    if (strata_sampler_sample(r->smp, r->logits, &win[0]) != STRATA_OK)
        return cli_fail("sampling: %s", strata_last_error());
    r->st.ttft_s += cli_now() - t0;
    if (o->ignore_eos || !strata_token_is_eog(r->model, win[0])) strata_sampler_accept(r->smp, win[0]);
    step_io io;
    int rc = step_io_init(&io, r);
    while (!rc) {
        if (g_prof_requested) prof_line_now(r, end, t1);
        int32_t i = 0;
        int stop = 0;
        for (; i < n_win && !stop && !rc; i++) {
            if (!o->ignore_eos && strata_token_is_eog(r->model, win[i])) {
                end->pending = win[i];
                end->why = STOP_EOG;
                stop = 1;
            } else {
                rc = emit_token(r, s, win[i], n_predict, end, &stop);
            }
        }
        if (rc) break;
        /* win[0..i-1) stay in the cache; a stop at win[i-1] makes it the pending token */
        for (int32_t k = 0; k + 1 < i; k++) r->hist[r->n_hist++] = win[k];
        if (stop) {
            if (i < n_win && strata_session_truncate(r->sess, (int32_t)r->n_hist) != STRATA_OK)
                rc = cli_fail("rolling back the window: %s", strata_last_error());
            break;
        }
        const int32_t n_past = strata_session_n_past(r->sess);
        if (n_past >= n_ctx) {
            end->why = STOP_CTX;
            r->st.ctx_full = 1;
            break;
        }
        const strata_token last = win[n_win - 1];
        int64_t max = o->draft_max, room = (int64_t)n_ctx - n_past - 1;
        if (room < max) max = room;
        if (n_predict >= 0 && n_predict - end->n_gen - 1 < max) max = n_predict - end->n_gen - 1;
        rc = spec_advance(r, &io, last, (int32_t)max, win, &n_win);
        if (!rc) r->hist[r->n_hist++] = last;
    }
    step_io_free(&io);
    return rc;
}

/* Reads toks then generates up to n_predict tokens, streaming to stdout. keep_all: every
 * sampled token ends up in the KV cache (chat). *why gets a STOP_* value. */
static int generate(runner *r, const strata_token *toks, int64_t n, int n_predict, int keep_all,
                    int *why, char **answer) {
    int32_t n_ctx = strata_session_n_ctx(r->sess);
    int32_t n_past = strata_session_n_past(r->sess);
    *why = STOP_LIMIT;
    if (n_past + n > n_ctx) {
        if (n_past == 0)
            return cli_fail("the prompt has %lld tokens but the context holds %d (use a larger "
                            "-c, up to the model's n_ctx_train)", (long long)n, (int)n_ctx);
        fprintf(stderr, "\nstrata: context full: %d of %d tokens used, this message needs %lld "
                "more; stopping\n", (int)n_past, (int)n_ctx, (long long)n);
        r->st.ctx_full = 1;
        *why = STOP_CTX;
        return 0;
    }
    for (int64_t i = 0; i < n; i++) strata_sampler_accept(r->smp, toks[i]);
    const int spec = r->drafts.n > 0;
    if (r->hist) {
        memcpy(r->hist + r->n_hist, toks, (size_t)n * sizeof *toks);
        r->n_hist += n;
    }
    double t0 = cli_now();
    int rc = eval_prompt(r, toks, n, -1);
    if (rc) return rc;
    if (spec && (rc = cli_drafts_prompt(&r->drafts, r->hist, r->n_hist))) return rc; /* a draft model reads it too */
    double t1 = cli_now();
    r->st.prompt_s += t1 - t0;
    r->st.n_prompt += n;

    stream s = {NULL, 0, 0, 0, r->o, stdout};
    gen_end end = {STOP_LIMIT, 0, -1};
    rc = spec ? spec_loop(r, &s, n_predict, t0, t1, &end) : gen_loop(r, &s, n_predict, t0, t1, &end);
    if (!rc) stream_write(&s, s.len);
    if (answer && !rc) *answer = s.buf;
    else free(s.buf);
    if (rc) return rc;
    *why = end.why;
    if (keep_all && end.pending >= 0 && strata_session_n_past(r->sess) < n_ctx) {
        if (strata_session_decode_gen(r->sess, &end.pending, 1, r->logits, 0) != STRATA_OK)
            return cli_fail("decode at position %d: %s", (int)strata_session_n_past(r->sess),
                            strata_last_error());
        if (r->hist) r->hist[r->n_hist++] = end.pending;
    }
    if (*why == STOP_CTX)
        fprintf(stderr, "\nstrata: context full (%d tokens, -c); stopped after %lld generated "
                "tokens\n", (int)n_ctx, (long long)end.n_gen);
    r->st.gen_s += cli_now() - t1;
    r->st.n_gen += end.n_gen;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Chat
 * ------------------------------------------------------------------------------------------- */

/* Reads a chat turn's tokens after the first keep of the cache (the rest rolled back; where the
 * session cannot roll back that far, everything is read again). */
static int chat_read(runner *r, cli_chat *c, int64_t keep, const strata_token *toks, int64_t n, int *why) {
    const int64_t n_past = strata_session_n_past(r->sess);
    strata_token *all = NULL;
    if (keep < n_past && strata_session_truncate(r->sess, (int32_t)keep) != STRATA_OK) {
        if (!(all = malloc(sizeof *all * (size_t)(keep + n)))) return cli_fail("out of memory");
        memcpy(all, r->hist, sizeof *all * (size_t)keep);
        memcpy(all + keep, toks, sizeof *all * (size_t)n);
        strata_session_reset(r->sess);
        toks = all;
        n += keep;
        keep = 0;
    }
    r->n_hist = keep;
    char *answer = NULL;
    int rc = generate(r, toks, n, r->o->n_predict, 1, why, &answer);
    free(all);
    const int64_t from = keep + n;
    if (!rc && *why != STOP_CTX)
        rc = cli_chat_answer(c, answer ? answer : "", r->hist + from, r->n_hist - from, *why == STOP_EOG);
    free(answer);
    return rc;
}

static int chat_loop(runner *r) {
    const cli_opts *o = r->o;
    cli_chat *c = NULL;
    int rc = cli_chat_open(o, r->model, &c);
    if (rc) return rc;
    char *line = NULL;
    size_t lcap = 0;
    const int32_t n_ctx = strata_session_n_ctx(r->sess);
    for (;;) {
        fputs("\n> ", stderr);
        fflush(stderr);
        ssize_t got = getline(&line, &lcap, stdin);
        if (got <= 0) break;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = '\0';
        if (got == 0) break;
        strata_token *toks = NULL;
        int64_t n = 0, keep = 0;
        rc = cli_chat_user(c, line, r->hist, r->n_hist, &keep, &toks, &n);
        if (rc == CLI_CHAT_DROPPED) { rc = 0; continue; }
        if (rc) break;
        if (keep + n > n_ctx) { /* dropped before anything is read: the cache and the turn stay as they were */
            fprintf(stderr, "strata: this message is too long: %lld tokens, and the context (-c %d) has "
                    "%d left; it was dropped, the conversation goes on\n", (long long)n, (int)n_ctx,
                    (int)(n_ctx - keep));
            free(toks);
            cli_chat_drop(c);
            continue;
        }
        int why;
        rc = chat_read(r, c, keep, toks, n, &why);
        free(toks);
        if (rc || why == STOP_CTX) break;
    }
    free(line);
    cli_chat_free(c);
    fputc('\n', stdout);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------------------------- */

static void run_usage(FILE *f) {
    fprintf(f, "usage: strata [run] -m MODEL.gguf [-p PROMPT | -f FILE] [-n N] [options]\n"
               "       strata      (no arguments: the embedded default model on a sample prompt)\n\n"
               "Generates text: the prompt, then the continuation streamed to stdout; timing and\n"
               "peak memory on stderr at the end.\n\nOptions:\n");
    cli_opts_usage(f);
}

static int run_with(cli_opts *o) {
    signal(SIGUSR1, on_sigusr1); /* `kill -USR1 PID` prints the [PROF] line during generation */
    if (!o->model) return cli_usage_error("no model: give -m MODEL.gguf");
    if (o->prompt && o->prompt_file) return cli_usage_error("give -p or -f, not both");
    if (o->interactive && o->logpos) return cli_usage_error("--logpos does not apply to --chat");
    if (o->seed_random && !o->quiet)
        fprintf(stderr, "strata: --seed -1: seed %llu (--seed %llu repeats this run)\n",
                (unsigned long long)o->sp.seed, (unsigned long long)o->sp.seed);
    if (!o->logpos) {
        const char *env = getenv("STRATA_LOGPOS");
        if (env && env[0] && !o->interactive) o->logpos = env;
    }
    char *file_text = NULL;
    size_t prompt_len = 0;
    const char *prompt = o->prompt ? o->prompt : "";
    if (o->prompt_file) {
        if (!(file_text = cli_read_file(o->prompt_file, &prompt_len))) return CLI_EXIT_USAGE;
        prompt = file_text;
    } else {
        prompt_len = strlen(prompt);
    }

    runner r;
    memset(&r, 0, sizeof r);
    r.o = o;
    int rc = cli_load_model(o, &r.model, &r.st.load_s);
    if (rc) { free(file_text); return rc; }
    strata_model_info mi;
    strata_model_get_info(r.model, &mi);
    r.n_vocab = mi.n_vocab;
    strata_token *toks = NULL;
    int64_t n = 0;
    if ((rc = cli_new_session(o, r.model, &r.sess))) goto done;
    if (strata_sampler_create(&o->sp, r.n_vocab, &r.smp) != STRATA_OK) {
        rc = cli_fail("sampler: %s", strata_last_error());
        goto done;
    }
    if ((rc = cli_drafts_open(o, r.model, r.sess, &r.drafts))) goto done;
    r.drafts.oracle = &r.oracle;
    if (o->verify_profile && r.drafts.n > 0 && !(r.vp = calloc(1, sizeof *r.vp))) {
        rc = cli_fail("out of memory");
        goto done;
    }
    if (o->verify_profile && !r.vp && !o->quiet)
        fprintf(stderr, "strata: --verify-profile: no verify windows without --spec; phases only\n");
    if ((r.drafts.n > 0 || o->interactive) && !(r.hist = malloc(sizeof *r.hist * ((size_t)strata_session_n_ctx(r.sess) + 1)))) {
        rc = cli_fail("out of memory");
        goto done;
    }
    size_t rows = o->logpos && !o->interactive ? (size_t)o->n_batch : 1; /* all_logits only for dumps */
    r.logits = malloc(rows * (size_t)r.n_vocab * sizeof(float));
    if (!r.logits) { rc = cli_fail("out of memory for %zu x %d logits", rows, r.n_vocab); goto done; }

    if (o->interactive) {
        rc = chat_loop(&r);
    } else {
        if ((rc = cli_tokenize(r.model, prompt, prompt_len, !o->no_bos, 1, &toks, &n))) goto done;
        if (n == 0) {
            strata_token bos = strata_token_bos(r.model);
            if (bos < 0) { rc = cli_fail("the prompt is empty and the model has no BOS token"); goto done; }
            toks[0] = bos;
            n = 1;
        }
        if (n > strata_session_n_ctx(r.sess)) {
            rc = cli_fail("the prompt has %lld tokens but the context holds %d (use a larger -c, "
                          "up to the model's n_ctx_train)", (long long)n,
                          (int)strata_session_n_ctx(r.sess));
            goto done;
        }
        if (o->logpos) {
            if (!(r.logpos = fopen(o->logpos, "w"))) {
                rc = cli_fail("cannot write '%s': %s", o->logpos, strerror(errno));
                goto done;
            }
            if ((rc = cli_topk_init(&r.topk, r.n_vocab, o->logpos_top))) goto done;
            cli_logpos_header(r.logpos, o->model, r.n_vocab, r.topk.k, ", \"source\": \"prompt\"");
        }
        if (!o->no_echo) {
            fwrite(prompt, 1, prompt_len, stdout);
            fflush(stdout);
        }
        if (cli_oracle_wanted(o) && (rc = cli_oracle_compute(&r.oracle, o, r.model, r.sess, toks, n, o->n_predict)))
            goto done;
        int why;
        rc = generate(&r, toks, n, o->n_predict, 0, &why, NULL);
        if (!rc) fputc('\n', stdout);
    }
    r.st.drafts = &r.drafts;
    r.st.vp = r.vp;
    if (!rc) rc = cli_print_run_stats(o, r.model, r.sess, &r.st);
done:
    if (r.logpos && fclose(r.logpos) != 0 && !rc) rc = cli_fail("cannot write '%s': %s", o->logpos, strerror(errno));
    cli_topk_free(&r.topk);
    free(toks);
    free(r.logits);
    strata_sampler_free(r.smp);
    cli_drafts_close(&r.drafts);
    cli_oracle_free(&r.oracle);
    free(r.vp);
    free(r.hist);
    strata_session_free(r.sess);
    strata_model_free(r.model);
    free(file_text);
    return rc;
}

int cli_cmd_run(int argc, char **argv) {
    cli_opts o;
    cli_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            run_usage(stdout);
            return 0;
        }
        int rc = cli_opts_parse(&o, argc, argv, &i);
        if (rc == 1) continue;
        if (rc) return rc;
        if (a[0] == '-' && a[1]) return cli_usage_error("unknown option '%s'", a);
        return cli_usage_error("unexpected argument '%s' (the prompt goes after -p)", a);
    }
    if (o.stride || o.kl || o.kl_base)
        return cli_usage_error("--stride/--kl/--kl-base belong to 'strata perplexity'");
    return run_with(&o);
}

/* The embedded default model: <dir of the executable>/models/FILE, then ./models/FILE. */
#define CLI_DEFAULT_MODEL "strata-tiny-moe-q8_0.gguf"
#define CLI_DEFAULT_PROMPT "Dictionary, n."

int cli_cmd_default(void) {
    static char path[PATH_MAX + 64];
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    int found = 0;
    if (n > 0) {
        exe[n] = '\0';
        snprintf(path, sizeof path, "%s/models/%s", dirname(exe), CLI_DEFAULT_MODEL);
        found = access(path, R_OK) == 0;
    }
    if (!found) {
        snprintf(path, sizeof path, "models/%s", CLI_DEFAULT_MODEL);
        found = access(path, R_OK) == 0;
    }
    if (!found) {
        fprintf(stderr, "strata: the embedded default model models/%s was not found next to the "
                "executable or in the current directory; run a model with -m FILE "
                "(see strata --help)\n", CLI_DEFAULT_MODEL);
        return CLI_EXIT_USAGE;
    }
    fprintf(stderr, "strata: no arguments: running the embedded default model %s\n"
            "strata: (strata --help lists the commands; strata run --help the options)\n", path);
    cli_opts o;
    cli_opts_init(&o);
    o.model = path;
    o.prompt = CLI_DEFAULT_PROMPT;
    o.n_predict = 64;
    o.sp.temperature = 0.7f;
    o.sp.top_p = 0.9f;
    o.sp.repeat_penalty = 1.1f;
    return run_with(&o);
}
