/* generate.c - one completion in a slot (server_impl.h): the prompt read past the slot's cached
 * prefix, tokens sampled until end of generation, max_tokens, a stop string, the context's end
 * or the client leaving; the text streamed as server-sent events (held back where it could be
 * the start of a stop string or of a UTF-8 character) or answered whole, with OpenAI's usage. */
#include "server_impl.h"

#include "text.h"
#include "yyjson.h"

#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define SRV_TOP_MAX 20

/* logprobs: a generated token's log-probability under the model and the most likely ones. */
typedef struct {
    strata_token tok;
    float lp;
    size_t end;                /* where its text ends in the answer (bytes) */
    int ntop;
    strata_token top[SRV_TOP_MAX];
    float top_lp[SRV_TOP_MAX];
} srv_lp;

/* The generated text so far and how much of it was sent. */
typedef struct {
    char *text;
    size_t len, cap, sent;
    const char *finish;        /* "stop", "length", or NULL while running */
    int32_t n_gen;
    int gone;                  /* the client left */
    srv_lp *lp;                /* logprobs: one a generated token */
    size_t nlp, caplp;
    size_t sent_r;             /* streamed reasoning bytes (chat with think tags) */
    size_t lp_sent;            /* logprobs entries streamed */
    size_t base;               /* echo: the prompt's text first, this many bytes */
    int index;                 /* the choice's index (n > 1) */
} srv_out;

/* A new logprobs entry at o's end (NULL: no memory). */
static srv_lp *srv_lp_new(srv_out *o) {
    if (o->nlp == o->caplp) {
        const size_t cap = o->caplp ? o->caplp * 2 : 64;
        srv_lp *p = realloc(o->lp, sizeof *p * cap);
        if (!p) return NULL;
        o->lp = p;
        o->caplp = cap;
    }
    return &o->lp[o->nlp++];
}

/* logprobs of token t from the step's logits: log-softmax, and the n most likely. */
static int srv_logprob(srv_out *o, const float *logits, int32_t V, strata_token t, int n) {
    srv_lp *e = srv_lp_new(o);
    if (!e) return -1;
    float m = logits[0];
    for (int32_t v = 1; v < V; v++) m = logits[v] > m ? logits[v] : m;
    double sum = 0;
    for (int32_t v = 0; v < V; v++) sum += exp((double)(logits[v] - m));
    const float lse = m + (float)log(sum);
    e->tok = t;
    e->lp = logits[t] - lse;
    e->ntop = 0;
    for (int32_t v = 0; v < V && n > 0; v++) { /* insertion into the n best, larger first */
        int at = e->ntop < n ? e->ntop : n - 1;
        if (e->ntop == n && logits[v] <= e->top_lp[n - 1] + lse) continue;
        while (at > 0 && e->top_lp[at - 1] < logits[v] - lse) {
            e->top[at] = e->top[at - 1];
            e->top_lp[at] = e->top_lp[at - 1];
            at--;
        }
        e->top[at] = v;
        e->top_lp[at] = logits[v] - lse;
        if (e->ntop < n) e->ntop++;
    }
    return 0;
}

static int srv_out_add(srv_out *o, const char *p, size_t n) {
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        while (cap < o->len + n + 1) cap *= 2;
        char *t = realloc(o->text, cap);
        if (!t) return -1;
        o->text = t;
        o->cap = cap;
    }
    memcpy(o->text + o->len, p, n);
    o->len += n;
    o->text[o->len] = '\0';
    return 0;
}

/* 1 when the peer closed its side (a client that left mid-generation). */
static int srv_peer_gone(int fd) {
    struct pollfd pf = {fd, POLLIN | POLLRDHUP, 0};
    if (poll(&pf, 1, 0) <= 0) return 0;
    if (pf.revents & (POLLHUP | POLLRDHUP | POLLERR)) return 1;
    char b;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* The bytes at text's end that could begin a stop string (held back from the stream). */
static size_t srv_stop_hold(const srv_gen *g, const char *s, size_t n) {
    size_t hold = 0;
    for (int k = 0; k < g->n_stops; k++) {
        const size_t ls = strlen(g->stops[k]);
        for (size_t h = ls - 1 < n ? ls - 1 : n; h > hold; h--)
            if (memcmp(s + n - h, g->stops[k], h) == 0) { hold = h; break; }
    }
    return hold;
}

/* Cuts the text at the first stop string found in its last `fresh` bytes (and the stops' length
 * before them); 1 when one was found. */
static int srv_cut_stop(const srv_gen *g, srv_out *o, size_t fresh) {
    size_t maxl = 0;
    for (int k = 0; k < g->n_stops; k++) maxl = strlen(g->stops[k]) > maxl ? strlen(g->stops[k]) : maxl;
    size_t from = o->len > fresh + maxl ? o->len - fresh - maxl : 0;
    if (from < o->base) from = o->base; /* (never inside an echoed prompt) */
    size_t cut = o->len + 1;
    for (int k = 0; k < g->n_stops; k++) {
        const char *hit = strstr(o->text + from, g->stops[k]);
        if (hit && (size_t)(hit - o->text) < cut) cut = (size_t)(hit - o->text);
    }
    if (cut > o->len) return 0;
    o->len = cut;
    o->text[cut] = '\0';
    return 1;
}

/* A response's head: id, object (text_completion or the chat's), created, model. */
static yyjson_mut_val *srv_head(yyjson_mut_doc *d, const srv_ctx *c, const char *id, const char *object) {
    yyjson_mut_val *root = yyjson_mut_obj(d);
    yyjson_mut_doc_set_root(d, root);
    yyjson_mut_obj_add_strcpy(d, root, "id", id);
    yyjson_mut_obj_add_str(d, root, "object", object);
    yyjson_mut_obj_add_int(d, root, "created", c->created);
    yyjson_mut_obj_add_strcpy(d, root, "model", c->name);
    return root;
}

/* One streamed chunk: text_completion's {"text"}, or chat.completion.chunk's {"delta": {...}}
 * (the role in the first one); finish NULL: null. */
static yyjson_mut_val *srv_logprobs(const srv_ctx *c, yyjson_mut_doc *d, const srv_gen *g, const srv_out *o,
                                    size_t a, size_t b);

/* (o: with logprobs, the entries of the tokens whose text ends by abs_end go with the chunk) */
static int srv_chunk(int fd, const srv_ctx *c, const srv_gen *g, const char *id, const char *text, size_t len,
                     const char *finish, int first, int reasoning, srv_out *o, size_t abs_end) {
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *root = srv_head(d, c, id, g->chat ? "chat.completion.chunk" : "text_completion");
    yyjson_mut_val *choices = yyjson_mut_arr(d), *ch = yyjson_mut_obj(d);
    yyjson_mut_obj_add_int(d, ch, "index", o ? o->index : 0);
    if (g->chat) {
        yyjson_mut_val *delta = yyjson_mut_obj(d);
        if (first) yyjson_mut_obj_add_str(d, delta, "role", "assistant");
        if (len || (first && !finish)) srv_add_text(d, delta, reasoning ? "reasoning_content" : "content", text, len);
        yyjson_mut_obj_add_val(d, ch, "delta", delta);
    } else {
        srv_add_text(d, ch, "text", text, len);
    }
    size_t k = o ? o->lp_sent : 0;
    while (o && g->logprobs && k < o->nlp && o->lp[k].end <= abs_end) k++;
    if (o && k > o->lp_sent) {
        yyjson_mut_obj_add_val(d, ch, "logprobs", srv_logprobs(c, d, g, o, o->lp_sent, k));
        o->lp_sent = k;
    } else {
        yyjson_mut_obj_add_null(d, ch, "logprobs");
    }
    if (finish) yyjson_mut_obj_add_str(d, ch, "finish_reason", finish);
    else yyjson_mut_obj_add_null(d, ch, "finish_reason");
    yyjson_mut_arr_append(choices, ch);
    yyjson_mut_obj_add_val(d, root, "choices", choices);
    size_t n = 0;
    char *s = yyjson_mut_write(d, 0, &n);
    yyjson_mut_doc_free(d);
    const int rc = s ? srv_sse_event(fd, s, n) : -1;
    free(s);
    return rc;
}

/* OpenAI's usage object into obj. */
static void srv_usage(yyjson_mut_doc *d, yyjson_mut_val *obj, int64_t n_prompt, int32_t n_gen, int32_t cached) {
    yyjson_mut_val *u = yyjson_mut_obj(d), *det = yyjson_mut_obj(d);
    yyjson_mut_obj_add_int(d, u, "prompt_tokens", n_prompt);
    yyjson_mut_obj_add_int(d, u, "completion_tokens", n_gen);
    yyjson_mut_obj_add_int(d, u, "total_tokens", n_prompt + n_gen);
    yyjson_mut_obj_add_int(d, det, "cached_tokens", cached);
    yyjson_mut_obj_add_val(d, u, "prompt_tokens_details", det);
    yyjson_mut_obj_add_val(d, obj, "usage", u);
}

/* Reads the prompt into the slot past the longest cached prefix (at least its last token is
 * read, for its logits); *cached: the tokens reused. */
static strata_status srv_read_prompt(srv_slot *s, const srv_gen *g, float *logits, int32_t *cached) {
    const int32_t n = (int32_t)g->n_prompt;
    int32_t k = 0;
    while (k < n && k < s->n_tokens && s->tokens[k] == g->prompt[k]) k++;
    if (k == n) k--;
    strata_status st = strata_session_truncate(s->session, k);
    if (st == STRATA_ERR_UNSUPPORTED) { /* a recurrent state (qwen3next) rolls back only within
                                           its last window: read the whole prompt again */
        strata_session_reset(s->session);
        k = 0;
        st = STRATA_OK;
    }
    s->n_tokens = k;
    if (st == STRATA_OK) st = strata_session_decode(s->session, g->prompt + k, n - k, logits, 0);
    if (st != STRATA_OK) { /* what the cache holds is no longer known: start over next time */
        strata_session_reset(s->session);
        s->n_tokens = 0;
        return st;
    }
    memcpy(s->tokens + k, g->prompt + k, sizeof(strata_token) * (size_t)(n - k));
    s->n_tokens = n;
    *cached = k;
    return STRATA_OK;
}

/* Where a harmony answer's text goes (gpt-oss): streamed as chunks, or, buf set, gathered
 * into buf[0] (content) and buf[1] (reasoning). */
typedef struct {
    int fd;
    const srv_ctx *c;
    const srv_gen *g;
    srv_out *o;                /* (streamed: its sent text and logprobs advance) */
    const char *id;
    const char *text;          /* the answer */
    srv_out *buf;
} srv_harmony_out;

static void srv_harmony_emit(void *u, int reasoning, size_t a, size_t b) {
    srv_harmony_out *h = u;
    if (h->buf) {
        srv_out_add(&h->buf[reasoning], h->text + a, b - a); /* (out of memory: the part left out) */
        return;
    }
    if (h->o->gone) return;
    if (srv_chunk(h->fd, h->c, h->g, h->id, h->text + a, b - a, NULL, 0, reasoning, h->o, b) != 0) h->o->gone = 1;
}

/* Streams what is safe to send: the text but for a possible stop string's start and a partial
 * UTF-8 character. */
/* Streams a reasoning or content part's new bytes (sent: how much of it went out). */
static void srv_stream_part(int fd, const srv_ctx *c, const srv_gen *g, srv_out *o, const char *id,
                            const char *p, size_t n, size_t *sent, int reasoning) {
    n = srv_utf8_whole(p, n);
    if (n <= *sent || o->gone) return;
    if (srv_chunk(fd, c, g, id, p + *sent, n - *sent, NULL, 0, reasoning, o, (size_t)(p - o->text) + n) != 0)
        o->gone = 1;
    *sent = n;
}

static void srv_stream_some(int fd, const srv_ctx *c, const srv_gen *g, srv_out *o, const char *id) {
    size_t upto = o->len - srv_stop_hold(g, o->text, o->len);
    upto = srv_utf8_whole(o->text, upto);
    if (g->harmony) {
        srv_harmony_out h = {fd, c, g, o, id, o->text, NULL};
        srv_harmony_walk(o->text, upto, 0, g->harmony == 2, g->tools == SRV_TOOLS_HARMONY, &o->sent, srv_harmony_emit, &h);
        return;
    }
    if (!g->think && !g->tools) {
        if (upto <= o->sent) return;
        if (srv_chunk(fd, c, g, id, o->text + o->sent, upto - o->sent, NULL, 0, 0, o, upto) != 0) o->gone = 1;
        o->sent = upto;
        return;
    }
    size_t r0, r1, c0;
    if (!srv_think_split(o->text, upto, g->think, 0, &r0, &r1, &c0)) return;
    if (r1 > r0) srv_stream_part(fd, c, g, o, id, o->text + r0, r1 - r0, &o->sent_r, 1);
    if (c0 != SIZE_MAX && upto > c0) {
        size_t n = upto - c0; /* with tools: from where the calls start on, held for the end */
        if (g->tools) {
            n = srv_tool_start(g->tools, o->text + c0, n, 0);
            const size_t skip = srv_tool_skip(g->tools, o->text + c0, n); /* (framing, not content) */
            c0 += skip;
            n -= skip;
            /* blanks held: calls may follow them, and the whole answer's content drops them then */
            while (n > 0 && (o->text[c0 + n - 1] == '\n' || o->text[c0 + n - 1] == ' ')) n--;
        }
        srv_stream_part(fd, c, g, o, id, o->text + c0, n, &o->sent, 0);
    }
}

/* One token a step or a window gave: its text (and its logprobs entry's end), the stops, the
 * stream, max_tokens. 1 when generation ends, 0 when it goes on, -1 out of memory. */
static int srv_emit(srv_ctx *c, int fd, const srv_gen *g, srv_out *o, strata_token t, const char *id) {
    if (strata_token_is_eog(c->model, t)) { o->finish = "stop"; return 1; }
    char piece[256];
    int64_t pl = 0;
    /* (control tokens as text where a tool format needs them: Mistral's [TOOL_CALLS], Llama's
       <|python_tag|>, GLM's <arg_key>, Kimi's <|tool_call_begin|>, gpt-oss's <|channel|>; and
       Seed-OSS's <seed:think>) */
    const int special = g->harmony || (g->think & SRV_THINK_SEED) ||
                        (g->tools != SRV_TOOLS_NONE && g->tools != SRV_TOOLS_HERMES && g->tools != SRV_TOOLS_QWEN_XML);
    if (strata_token_to_piece(c->model, t, special, piece, sizeof piece, &pl) != STRATA_OK) pl = 0;
    if (srv_out_add(o, piece, (size_t)pl) != 0) return -1;
    if (g->logprobs && o->nlp) o->lp[o->nlp - 1].end = o->len;
    o->n_gen++;
    if (g->n_stops && srv_cut_stop(g, o, (size_t)pl)) { o->finish = "stop"; return 1; }
    if (g->stream) srv_stream_some(fd, c, g, o, id);
    else if (srv_peer_gone(fd)) o->gone = 1;
    if (o->n_gen >= g->max_tokens) { o->finish = "length"; return 1; }
    return o->gone;
}

/* The sampling loop from the prompt's logits: tokens until a stop; the slot's tokens follow. */
static strata_status srv_sample_loop(srv_ctx *c, int fd, const srv_gen *g, srv_slot *s, float *logits, srv_out *o,
                                     const char *id) {
    strata_sampler *smp = NULL;
    strata_status st = strata_sampler_create(&g->sp, c->info.n_vocab, &smp);
    if (st != STRATA_OK) return st;
    const int64_t from = g->n_prompt > g->sp.repeat_last_n ? g->n_prompt - g->sp.repeat_last_n : 0;
    for (int64_t i = from; i < g->n_prompt; i++) strata_sampler_accept(smp, g->prompt[i]);
    const int32_t n_ctx = strata_session_n_ctx(s->session);
    while (!o->finish && !o->gone) {
        if (o->n_gen >= g->max_tokens || s->n_tokens >= n_ctx) { o->finish = "length"; break; }
        strata_token t;
        if ((st = strata_sampler_sample(smp, logits, &t)) != STRATA_OK) break;
        strata_sampler_accept(smp, t);
        if (g->logprobs && !strata_token_is_eog(c->model, t) &&
            srv_logprob(o, logits, c->info.n_vocab, t, g->top_logprobs) != 0) {
            st = STRATA_ERR_NOMEM;
            break;
        }
        const int e = srv_emit(c, fd, g, o, t, id);
        if (e < 0) st = STRATA_ERR_NOMEM;
        if (e) break;
        if ((st = strata_session_decode_gen(s->session, &t, 1, logits, 0)) != STRATA_OK) break;
        s->tokens[s->n_tokens++] = t;
    }
    strata_sampler_free(smp);
    return st;
}

/* A token's text (the bytes of its piece). */
static size_t srv_piece(const srv_ctx *c, strata_token t, char *buf, size_t size) {
    int64_t n = 0;
    if (strata_token_to_piece(c->model, t, 0, buf, (int64_t)size, &n) != STRATA_OK) n = 0;
    return (size_t)n;
}

#define SRV_LP_ROWS 64

/* echo with logprobs: the prompt read whole (no cached prefix) with every position's logits, in
 * pieces of SRV_LP_ROWS rows, its tokens' entries into o (token i's from row i - 1; the first
 * token's logprob NAN, written null), each ending where its piece ends in the echoed text; the
 * last row left in logits for the first sampled token. */
static strata_status srv_read_prompt_lp(const srv_ctx *c, srv_slot *s, const srv_gen *g, float *logits,
                                        srv_out *o) {
    const int32_t n = (int32_t)g->n_prompt, V = c->info.n_vocab;
    float *rows = malloc(sizeof(float) * (size_t)V * SRV_LP_ROWS);
    if (!rows) return STRATA_ERR_NOMEM;
    strata_session_reset(s->session);
    s->n_tokens = 0;
    strata_status st = STRATA_OK;
    size_t end = 0;
    char pc[256];
    for (int32_t a = 0; a < n && st == STRATA_OK; a += SRV_LP_ROWS) {
        const int32_t m = n - a < SRV_LP_ROWS ? n - a : SRV_LP_ROWS;
        st = strata_session_decode(s->session, g->prompt + a, m, rows, 1);
        for (int32_t j = 0; j < m && st == STRATA_OK; j++) {
            srv_lp *e = a + j == 0 ? srv_lp_new(o) : NULL;
            if (e) *e = (srv_lp){.tok = g->prompt[0], .lp = NAN};
            else if (a + j > 0 && srv_logprob(o, logits, V, g->prompt[a + j], g->top_logprobs) == 0) e = &o->lp[o->nlp - 1];
            if (!e) st = STRATA_ERR_NOMEM;
            else {
                end += srv_piece(c, g->prompt[a + j], pc, sizeof pc);
                e->end = end < g->prompt_len ? end : g->prompt_len;
            }
            memcpy(logits, rows + (size_t)j * (size_t)V, sizeof(float) * (size_t)V);
        }
    }
    free(rows);
    if (st != STRATA_OK) {
        strata_session_reset(s->session);
        return st;
    }
    memcpy(s->tokens, g->prompt, sizeof(strata_token) * (size_t)n);
    s->n_tokens = n;
    return STRATA_OK;
}

/* One entry of a chat answer's logprobs.content: token, logprob, bytes. */
static yyjson_mut_val *srv_lp_entry(const srv_ctx *c, yyjson_mut_doc *d, strata_token t, float lp) {
    char pc[256];
    const size_t n = srv_piece(c, t, pc, sizeof pc);
    yyjson_mut_val *e = yyjson_mut_obj(d), *bytes = yyjson_mut_arr(d);
    srv_add_text(d, e, "token", pc, n);
    yyjson_mut_obj_add_real(d, e, "logprob", lp);
    for (size_t i = 0; i < n; i++) yyjson_mut_arr_add_int(d, bytes, (unsigned char)pc[i]);
    yyjson_mut_obj_add_val(d, e, "bytes", bytes);
    return e;
}

/* The logprobs object: chat's {"content": [...]} or the completion's tokens / token_logprobs /
 * top_logprobs / text_offset. */
static yyjson_mut_val *srv_logprobs(const srv_ctx *c, yyjson_mut_doc *d, const srv_gen *g, const srv_out *o,
                                    size_t a, size_t b) {
    yyjson_mut_val *lp = yyjson_mut_obj(d);
    yyjson_mut_val *content = yyjson_mut_arr(d), *toks = yyjson_mut_arr(d), *vals = yyjson_mut_arr(d);
    yyjson_mut_val *tops = yyjson_mut_arr(d), *offs = yyjson_mut_arr(d);
    char pc[256];
    for (size_t i = a; i < b; i++) {
        const srv_lp *e = &o->lp[i];
        if (g->chat) {
            yyjson_mut_val *x = srv_lp_entry(c, d, e->tok, e->lp), *alts = yyjson_mut_arr(d);
            for (int k = 0; k < e->ntop; k++) yyjson_mut_arr_append(alts, srv_lp_entry(c, d, e->top[k], e->top_lp[k]));
            yyjson_mut_obj_add_val(d, x, "top_logprobs", alts);
            yyjson_mut_arr_append(content, x);
            continue;
        }
        const size_t n = srv_piece(c, e->tok, pc, sizeof pc);
        yyjson_mut_val *tk = yyjson_mut_obj(d), *alt = yyjson_mut_obj(d);
        srv_add_text(d, tk, "t", pc, n);
        yyjson_mut_arr_append(toks, yyjson_mut_obj_get(tk, "t"));
        if (isnan(e->lp)) { /* echo: the prompt's first token, which nothing predicts */
            yyjson_mut_arr_add_null(d, vals);
            yyjson_mut_arr_add_null(d, tops);
            yyjson_mut_arr_add_uint(d, offs, e->end >= n ? e->end - n : 0);
            continue;
        }
        yyjson_mut_arr_add_real(d, vals, e->lp);
        for (int k = 0; k < e->ntop; k++) {
            const size_t m = srv_piece(c, e->top[k], pc, sizeof pc);
            yyjson_mut_val *tmp = yyjson_mut_obj(d);
            srv_add_text(d, tmp, "t", pc, m);
            yyjson_mut_obj_add(alt, yyjson_mut_obj_get(tmp, "t"), yyjson_mut_real(d, e->top_lp[k]));
        }
        yyjson_mut_arr_append(tops, alt);
        yyjson_mut_arr_add_uint(d, offs, e->end >= n ? e->end - n : 0);
    }
    if (g->chat) {
        yyjson_mut_obj_add_val(d, lp, "content", content);
    } else {
        yyjson_mut_obj_add_val(d, lp, "tokens", toks);
        yyjson_mut_obj_add_val(d, lp, "token_logprobs", vals);
        yyjson_mut_obj_add_val(d, lp, "top_logprobs", tops);
        yyjson_mut_obj_add_val(d, lp, "text_offset", offs);
    }
    return lp;
}


/* The sampling loop through verify windows (cfg->spec): the first token from the prompt's
 * logits, then each step the drafters' window (or a plain step) via strata_session_speculate; the
 * slot's tokens follow the session's, the newest token outside it until the next window. */
static strata_status srv_spec_loop(srv_ctx *c, int fd, const srv_gen *g, srv_slot *s, const float *logits,
                                   srv_out *o, const char *id) {
    const srv_spec *sp = &c->cfg->spec;
    const int slot = (int)(s - c->slots);
    strata_sampler *smp = NULL;
    strata_status st = strata_sampler_create(&g->sp, c->info.n_vocab, &smp);
    if (st != STRATA_OK) return st;
    const int64_t from = g->n_prompt > g->sp.repeat_last_n ? g->n_prompt - g->sp.repeat_last_n : 0;
    for (int64_t i = from; i < g->n_prompt; i++) strata_sampler_accept(smp, g->prompt[i]);
    const int32_t n_ctx = strata_session_n_ctx(s->session);
    strata_token last = 0;
    if (g->max_tokens <= 0) o->finish = "length";
    else if ((st = strata_sampler_sample(smp, logits, &last)) == STRATA_OK) strata_sampler_accept(smp, last);
    if (st == STRATA_OK && !o->finish && sp->prompt && sp->prompt(sp->data, slot, s->tokens, s->n_tokens) != 0)
        st = STRATA_ERR_INTERNAL;
    int done = st != STRATA_OK || o->finish || srv_emit(c, fd, g, o, last, id) != 0; /* (-1: as a stop) */
    strata_token win[STRATA_DRAFT_MAX + 1];
    while (!done) {
        if (s->n_tokens + 1 >= n_ctx) { o->finish = "length"; break; }
        s->tokens[s->n_tokens] = last; /* the history: the cache's tokens and the newest */
        int32_t max = sp->draft_max, left = g->max_tokens - o->n_gen - 1, room = n_ctx - s->n_tokens - 2;
        max = max < left ? max : left;
        max = max < room ? max : room;
        int which = 0;
        int32_t k = 0, n_win = 0;
        const strata_token *draft = NULL;
        if (max > 0 && sp->next(sp->data, slot, s->tokens, s->n_tokens + 1, max, &which, &draft, &k) != 0) {
            st = STRATA_ERR_INTERNAL;
            break;
        }
        const double t0 = srv_now();
        if ((st = strata_session_speculate(s->session, smp, last, draft, k, win, &n_win)) != STRATA_OK) break;
        if (sp->observe) sp->observe(sp->data, slot, which, k, win, n_win, srv_now() - t0);
        s->n_tokens += n_win; /* last and the accepted drafts are in the cache now */
        for (int32_t i = 0; i + 1 < n_win; i++) s->tokens[s->n_tokens - n_win + 1 + i] = win[i];
        s->tokens[s->n_tokens - n_win] = last;
        for (int32_t i = 0; i < n_win && !done; i++) done = srv_emit(c, fd, g, o, win[i], id) != 0;
        last = win[n_win - 1];
    }
    strata_sampler_free(smp);
    return st;
}

/* A harmony answer's whole message (gpt-oss): content, reasoning_content, tool_calls. */
static yyjson_mut_val *srv_harmony_message(yyjson_mut_doc *d, const srv_gen *g, const srv_out *o,
                                           const char **finish) {
    yyjson_mut_val *m = yyjson_mut_obj(d);
    yyjson_mut_obj_add_str(d, m, "role", "assistant");
    srv_out buf[2];
    memset(buf, 0, sizeof buf);
    const char *t = o->text ? o->text : "";
    srv_harmony_out h = {-1, NULL, g, NULL, NULL, t, buf};
    size_t pos = 0;
    srv_harmony_walk(t, o->len, 1, g->harmony == 2, g->tools == SRV_TOOLS_HARMONY, &pos, srv_harmony_emit, &h);
    int k = 0;
    if (g->tools == SRV_TOOLS_HARMONY && srv_harmony_calls(d, m, "tool_calls", t, o->len, &k) == 0) *finish = "tool_calls";
    if (k && buf[0].len == 0) yyjson_mut_obj_add_null(d, m, "content");
    else srv_add_text(d, m, "content", buf[0].text ? buf[0].text : "", buf[0].len);
    if (buf[1].len) srv_add_text(d, m, "reasoning_content", buf[1].text, buf[1].len);
    free(buf[0].text);
    free(buf[1].text);
    return m;
}

/* One choice of the whole answer. */
static yyjson_mut_val *srv_choice(const srv_ctx *c, yyjson_mut_doc *d, const srv_gen *g, const srv_out *o) {
    yyjson_mut_val *ch = yyjson_mut_obj(d);
    const char *finish = o->finish ? o->finish : "stop";
    yyjson_mut_obj_add_int(d, ch, "index", o->index);
    if (g->chat && g->harmony) {
        yyjson_mut_obj_add_val(d, ch, "message", srv_harmony_message(d, g, o, &finish));
    } else if (g->chat) {
        yyjson_mut_val *m = yyjson_mut_obj(d);
        yyjson_mut_obj_add_str(d, m, "role", "assistant");
        const char *t = o->text ? o->text : "";
        size_t r0, r1, c0;
        srv_think_split(t, o->len, g->think, 1, &r0, &r1, &c0);
        if (c0 == SIZE_MAX) c0 = o->len; /* (thinking to the end: no content) */
        size_t cn = o->len - c0;
        const size_t skip = g->tools ? srv_tool_skip(g->tools, t + c0, cn) : 0; /* (framing, not content) */
        int k = 0;
        if (g->tools && srv_tool_calls(g->tools, d, m, "tool_calls", t + c0, cn, g->tool_list, &k) == 0) {
            cn = srv_tool_start(g->tools, t + c0, cn, 1);
            while (cn > skip && (t[c0 + cn - 1] == '\n' || t[c0 + cn - 1] == ' ')) cn--;
            finish = "tool_calls";
        }
        if (k && cn == skip) yyjson_mut_obj_add_null(d, m, "content");
        else srv_add_text(d, m, "content", t + c0 + skip, cn - skip);
        if (r1 > r0) srv_add_text(d, m, "reasoning_content", t + r0, r1 - r0);
        yyjson_mut_obj_add_val(d, ch, "message", m);
    } else {
        srv_add_text(d, ch, "text", o->text ? o->text : "", o->len);
    }
    if (g->logprobs) yyjson_mut_obj_add_val(d, ch, "logprobs", srv_logprobs(c, d, g, o, 0, o->nlp));
    else yyjson_mut_obj_add_null(d, ch, "logprobs");
    yyjson_mut_obj_add_str(d, ch, "finish_reason", finish);
    return ch;
}

/* The whole answer (not streamed): the choices o[0 .. n_out-1], usage over them all. */
static int srv_answer(srv_ctx *c, int fd, const srv_gen *g, const srv_out *o, int n_out, const char *id,
                      int32_t cached, int ka) {
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *root = srv_head(d, c, id, g->chat ? "chat.completion" : "text_completion");
    yyjson_mut_val *choices = yyjson_mut_arr(d);
    int32_t n_gen = 0;
    for (int i = 0; i < n_out; i++) {
        yyjson_mut_arr_append(choices, srv_choice(c, d, g, &o[i]));
        n_gen += o[i].n_gen;
    }
    yyjson_mut_obj_add_val(d, root, "choices", choices);
    srv_usage(d, root, g->n_prompt, n_gen, cached);
    size_t n = 0;
    char *s = yyjson_mut_write(d, 0, &n);
    yyjson_mut_doc_free(d);
    const int rc = s ? srv_send(fd, 200, "application/json", s, n, NULL, ka) : srv_send_error(fd, 500, "out of memory", 0);
    free(s);
    return rc == 0 && ka;
}

/* One chunk whose delta is the tool calls arr (of d; each given its index). */
static void srv_calls_delta(int fd, const srv_ctx *c, const srv_out *o, const char *id, yyjson_mut_doc *d,
                            yyjson_mut_val *arr) {
    yyjson_mut_val *root = srv_head(d, c, id, "chat.completion.chunk");
    yyjson_mut_val *choices = yyjson_mut_arr(d), *ch = yyjson_mut_obj(d), *delta = yyjson_mut_obj(d);
    size_t i, max;
    yyjson_mut_val *call;
    yyjson_mut_arr_foreach(arr, i, max, call) yyjson_mut_obj_add_int(d, call, "index", (int64_t)i);
    yyjson_mut_obj_add_int(d, ch, "index", o->index);
    yyjson_mut_obj_add_val(d, delta, "tool_calls", arr);
    yyjson_mut_obj_add_val(d, ch, "delta", delta);
    yyjson_mut_obj_add_null(d, ch, "finish_reason");
    yyjson_mut_arr_append(choices, ch);
    yyjson_mut_obj_add_val(d, root, "choices", choices);
    size_t len = 0;
    char *s = yyjson_mut_write(d, 0, &len);
    if (s) srv_sse_event(fd, s, len);
    free(s);
}

/* The end of a chat stream with tools: the content before the calls start, then the calls
 * in one delta (each with its index), or, when they do not parse, the rest as content. 1 when
 * calls went out. */
static int srv_stream_tool_calls(int fd, const srv_ctx *c, const srv_gen *g, srv_out *o, const char *id, size_t c0) {
    const char *t = o->text + c0;
    const size_t n = o->len - c0, ts = srv_tool_start(g->tools, t, n, 1);
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *holder = yyjson_mut_obj(d);
    int k = 0;
    const int ok = ts < n && srv_tool_calls(g->tools, d, holder, "tool_calls", t, n, g->tool_list, &k) == 0;
    size_t upto = ok ? ts : n;
    const size_t skip = srv_tool_skip(g->tools, t, upto); /* (as srv_stream_some) */
    while (ok && upto > skip && (t[upto - 1] == '\n' || t[upto - 1] == ' ')) upto--; /* (as srv_choice) */
    if (upto > skip + o->sent)
        srv_chunk(fd, c, g, id, t + skip + o->sent, upto - skip - o->sent, NULL, 0, 0, o, SIZE_MAX);
    if (ok) srv_calls_delta(fd, c, o, id, d, yyjson_mut_obj_get(holder, "tool_calls"));
    yyjson_mut_doc_free(d);
    return ok;
}

/* A harmony stream's end (gpt-oss): the held-back text, then its calls in one delta; 1 when
 * calls went out. */
static int srv_stream_harmony_end(int fd, const srv_ctx *c, const srv_gen *g, srv_out *o, const char *id) {
    srv_harmony_out h = {fd, c, g, o, id, o->text ? o->text : "", NULL};
    srv_harmony_walk(h.text, o->len, 1, g->harmony == 2, g->tools == SRV_TOOLS_HARMONY, &o->sent, srv_harmony_emit,
                     &h);
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *holder = yyjson_mut_obj(d);
    int k = 0;
    const int ok = o->text && g->tools == SRV_TOOLS_HARMONY &&
                   srv_harmony_calls(d, holder, "tool_calls", o->text, o->len, &k) == 0;
    if (ok && !o->gone) srv_calls_delta(fd, c, o, id, d, yyjson_mut_obj_get(holder, "tool_calls"));
    yyjson_mut_doc_free(d);
    return ok;
}

/* A streamed choice's end: its held-back text, then its finish reason. */
static void srv_stream_choice_end(srv_ctx *c, int fd, const srv_gen *g, srv_out *o, const char *id) {
    if (o->gone) return;
    if (g->harmony) {
        const int calls = srv_stream_harmony_end(fd, c, g, o, id);
        srv_chunk(fd, c, g, id, "", 0, calls ? "tool_calls" : o->finish ? o->finish : "stop", 0, 0, o, SIZE_MAX);
        return;
    }
    size_t r0 = 0, r1 = 0, c0 = 0; /* the held-back text, then the finish reason on its own */
    srv_think_split(o->text ? o->text : "", o->len, g->think, 1, &r0, &r1, &c0);
    if (r1 > r0 + o->sent_r)
        srv_chunk(fd, c, g, id, o->text + r0 + o->sent_r, r1 - r0 - o->sent_r, NULL, 0, 1, o, r1);
    int calls = 0;
    if (c0 != SIZE_MAX && g->tools) calls = srv_stream_tool_calls(fd, c, g, o, id, c0);
    else if (c0 != SIZE_MAX && o->len > c0 + o->sent)
        srv_chunk(fd, c, g, id, o->text + c0 + o->sent, o->len - c0 - o->sent, NULL, 0, 0, o, SIZE_MAX);
    srv_chunk(fd, c, g, id, "", 0, calls ? "tool_calls" : o->finish ? o->finish : "stop", 0, 0, o, SIZE_MAX);
}

/* The stream's end after its choices' (o[0 .. n_out-1]): usage over them all when asked, [DONE]. */
static void srv_stream_end(srv_ctx *c, int fd, const srv_gen *g, const srv_out *o, int n_out, const char *id,
                           int32_t cached) {
    if (n_out == 0 || o[n_out - 1].gone) return;
    int32_t n_gen = 0;
    for (int i = 0; i < n_out; i++) n_gen += o[i].n_gen;
    if (g->include_usage) {
        yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
        yyjson_mut_val *root = srv_head(d, c, id, g->chat ? "chat.completion.chunk" : "text_completion");
        yyjson_mut_obj_add_val(d, root, "choices", yyjson_mut_arr(d));
        srv_usage(d, root, g->n_prompt, n_gen, cached);
        size_t n = 0;
        char *s = yyjson_mut_write(d, 0, &n);
        yyjson_mut_doc_free(d);
        if (s) srv_sse_event(fd, s, n);
        free(s);
    }
    srv_sse_event(fd, "[DONE]", 6);
}

/* One choice (o->index) in the slot: the prompt read past the cached prefix (after the first
 * choice all but its last token are cached), the sampling seeded seed + index, the tokens sampled
 * and streamed, the choice's end streamed. *prompt_s: the prompt's reading time added. */
static strata_status srv_one_choice(srv_ctx *c, int fd, const srv_gen *g, srv_slot *s, float *logits, srv_out *o,
                                    const srv_out *first, const char *id, int32_t *cached, double *prompt_s) {
    srv_gen gi = *g;
    gi.sp.seed = g->sp.seed + (uint64_t)o->index;
    const double t0 = srv_now();
    const int plp = g->echo && g->logprobs; /* the prompt's logprobs: read once, copied to later choices */
    strata_status st = plp && !first ? srv_read_prompt_lp(c, s, g, logits, o) : srv_read_prompt(s, &gi, logits, cached);
    for (int64_t i = 0; plp && first && st == STRATA_OK && i < g->n_prompt; i++) {
        srv_lp *e = srv_lp_new(o);
        if (e) *e = first->lp[i];
        else st = STRATA_ERR_NOMEM;
    }
    *prompt_s += srv_now() - t0;
    if (st == STRATA_OK && g->echo && g->prompt_text) { /* echo: the answer starts with the prompt */
        if (srv_out_add(o, g->prompt_text, g->prompt_len) != 0) st = STRATA_ERR_NOMEM;
        o->base = o->len;
    }
    if (st == STRATA_OK && g->stream && o->index == 0 && srv_sse_begin(fd) != 0) o->gone = 1;
    if (st == STRATA_OK && g->stream && g->chat && !o->gone && srv_chunk(fd, c, g, id, "", 0, NULL, 1, 0, o, 0) != 0)
        o->gone = 1; /* the chat stream's first delta: the role */
    if (st == STRATA_OK)
        st = c->cfg->spec.next && !g->logprobs ? srv_spec_loop(c, fd, &gi, s, logits, o, id)
                                               : srv_sample_loop(c, fd, &gi, s, logits, o, id);
    if (st == STRATA_OK && g->stream) srv_stream_choice_end(c, fd, g, o, id);
    return st;
}

int srv_generate(srv_ctx *c, int fd, const srv_gen *g, int ka) {
    const int32_t n_ctx = strata_session_n_ctx(c->slots[0].session);
    char msg[256];
    if (g->n_prompt >= n_ctx) {
        snprintf(msg, sizeof msg, "the prompt has %lld tokens; the context holds %d (with room for one more)",
                 (long long)g->n_prompt, (int)n_ctx);
        return srv_send_error(fd, 400, msg, ka) == 0 && ka;
    }
    const int n_out = g->n_choices > 1 ? g->n_choices : 1;
    float *logits = malloc(sizeof(float) * (size_t)c->info.n_vocab);
    srv_out *o = calloc((size_t)n_out, sizeof *o);
    if (!logits || !o) {
        free(logits);
        free(o);
        return srv_send_error(fd, 500, "out of memory", 0), 0;
    }
    srv_slot *s = srv_slot_acquire(c, g->prompt, (int32_t)g->n_prompt);
    if (!s) {
        free(logits);
        free(o);
        return srv_send_error(fd, 503, "the server is busy (its queue is full) or stopping: try again", ka) == 0 && ka;
    }
    char id[48];
    pthread_mutex_lock(&c->mu);
    snprintf(id, sizeof id, "%s-%llx%llx", g->chat ? "chatcmpl" : "cmpl", (unsigned long long)c->created,
             (unsigned long long)c->ids++);
    pthread_mutex_unlock(&c->mu);
    const double t0 = srv_now();
    double prompt_s = 0;
    int32_t cached = 0, later = 0;
    strata_status st = STRATA_OK;
    int gone = 0, sent = 0;
    int32_t n_gen = 0;
    for (int i = 0; i < n_out && st == STRATA_OK && !gone; i++) {
        o[i].index = i;
        st = srv_one_choice(c, fd, g, s, logits, &o[i], i ? &o[0] : NULL, id, i == 0 ? &cached : &later, &prompt_s);
        gone = o[i].gone;
        sent |= o[i].sent > 0;
        n_gen += o[i].n_gen;
    }
    const double t2 = srv_now();
    srv_slot_release(c, s);
    pthread_mutex_lock(&c->mu);
    c->m.prompt_tokens += g->n_prompt - cached;
    c->m.cached_tokens += cached;
    c->m.generated_tokens += n_gen;
    c->m.prompt_s += prompt_s;
    c->m.generate_s += t2 - t0 - prompt_s;
    c->m.errors += st != STRATA_OK;
    pthread_mutex_unlock(&c->mu);
    free(logits);
    int rc = 0;
    if (st != STRATA_OK && !(g->stream && sent)) {
        snprintf(msg, sizeof msg, "generation failed: %s", strata_last_error());
        srv_send_error(fd, 500, msg, 0);
    } else if (g->stream) {
        if (!gone) srv_stream_end(c, fd, g, o, n_out, id, cached);
    } else if (!gone) {
        rc = srv_answer(c, fd, g, o, n_out, id, cached, ka);
    }
    for (int i = 0; i < n_out; i++) {
        free(o[i].text);
        free(o[i].lp);
    }
    free(o);
    return rc;
}
