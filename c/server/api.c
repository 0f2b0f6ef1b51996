/* api.c - the server's endpoints (server.h): routing and the API key, /health, /v1/models,
 * /metrics, /tokenize, /detokenize and /v1/completions (a request's options read from its JSON,
 * its prompt read into a slot past the cached prefix, tokens sampled until a stop, streamed as
 * server-sent events or answered whole in OpenAI's format). JSON by yyjson (third_party). */
#include "server_impl.h"
#include "text.h"

#include "template.h"
#include "chat_context.h"
#include "yyjson.h"

#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>


/* A JSON document written and sent (200), then freed. */
static int srv_send_json(int fd, yyjson_mut_doc *d, int keep_alive) {
    size_t len = 0;
    char *out = yyjson_mut_write(d, 0, &len);
    yyjson_mut_doc_free(d);
    if (!out) return srv_send_error(fd, 500, "out of memory", 0);
    const int rc = srv_send(fd, 200, "application/json", out, len, NULL, keep_alive);
    free(out);
    return rc;
}

/* Equal in time independent of where they differ (the API key). */
static int srv_key_equal(const char *a, const char *b) {
    const size_t la = strlen(a), lb = strlen(b);
    unsigned char d = (unsigned char)(la != lb);
    for (size_t i = 0; i < lb; i++) d |= (unsigned char)(a[i < la ? i : 0] ^ b[i]);
    return d == 0;
}

/* ---- small endpoints ------------------------------------------------------------------------ */

static int srv_models(srv_ctx *c, int fd, int ka) {
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *root = yyjson_mut_obj(d), *arr = yyjson_mut_arr(d), *m = yyjson_mut_obj(d);
    yyjson_mut_doc_set_root(d, root);
    yyjson_mut_obj_add_str(d, root, "object", "list");
    yyjson_mut_obj_add_strcpy(d, m, "id", c->name);
    yyjson_mut_obj_add_str(d, m, "object", "model");
    yyjson_mut_obj_add_int(d, m, "created", c->created);
    yyjson_mut_obj_add_str(d, m, "owned_by", "strata");
    yyjson_mut_arr_append(arr, m);
    yyjson_mut_obj_add_val(d, root, "data", arr);
    return srv_send_json(fd, d, ka);
}

static int srv_metrics_text(srv_ctx *c, int fd, int ka) {
    char *buf = malloc(8192);
    if (!buf) return srv_send_error(fd, 500, "out of memory", 0);
    pthread_mutex_lock(&c->mu);
    const srv_metrics m = c->m;
    int64_t hits = 0, misses = 0, rows_gpu = 0, rows_cpu = 0, pcie = 0, win = 0, drafted = 0, accepted = 0;
    for (int i = 0; i < c->n_slots; i++) {
        const strata_session_stats *s = &c->slots[i].stats;
        hits += s->expert_cache_hits;
        misses += s->expert_cache_misses;
        rows_gpu += s->expert_slots_gpu;
        rows_cpu += s->expert_slots_cpu;
        pcie += s->pcie_bytes;
        win += c->slots[i].spec.windows;
        drafted += c->slots[i].spec.drafted;
        accepted += c->slots[i].spec.accepted;
    }
    pthread_mutex_unlock(&c->mu);
    const int n = snprintf(buf, 8192,
        "# HELP strata_prompt_tokens_total Prompt tokens read (cached ones not counted).\n"
        "# TYPE strata_prompt_tokens_total counter\nstrata_prompt_tokens_total %lld\n"
        "# TYPE strata_prompt_cached_tokens_total counter\nstrata_prompt_cached_tokens_total %lld\n"
        "# TYPE strata_prompt_seconds_total counter\nstrata_prompt_seconds_total %.6f\n"
        "# TYPE strata_tokens_predicted_total counter\nstrata_tokens_predicted_total %lld\n"
        "# TYPE strata_tokens_predicted_seconds_total counter\nstrata_tokens_predicted_seconds_total %.6f\n"
        "# TYPE strata_requests_total counter\nstrata_requests_total %lld\n"
        "# TYPE strata_request_errors_total counter\nstrata_request_errors_total %lld\n"
        "# TYPE strata_requests_processing gauge\nstrata_requests_processing %d\n"
        "# TYPE strata_requests_queued gauge\nstrata_requests_queued %d\n"
        "# HELP strata_expert_cache_hits_total GPU expert cache look-ups that hit (all slots).\n"
        "# TYPE strata_expert_cache_hits_total counter\nstrata_expert_cache_hits_total %lld\n"
        "# TYPE strata_expert_cache_misses_total counter\nstrata_expert_cache_misses_total %lld\n"
        "# HELP strata_expert_rows_total Routed expert rows computed, by where.\n"
        "# TYPE strata_expert_rows_total counter\nstrata_expert_rows_total{device=\"gpu\"} %lld\n"
        "strata_expert_rows_total{device=\"cpu\"} %lld\n"
        "# TYPE strata_pcie_bytes_total counter\nstrata_pcie_bytes_total %lld\n"
        "# HELP strata_spec_windows_total Verify windows (speculative decoding), drafted and accepted tokens.\n"
        "# TYPE strata_spec_windows_total counter\nstrata_spec_windows_total %lld\n"
        "# TYPE strata_spec_drafted_total counter\nstrata_spec_drafted_total %lld\n"
        "# TYPE strata_spec_accepted_total counter\nstrata_spec_accepted_total %lld\n",
        (long long)m.prompt_tokens, (long long)m.cached_tokens, m.prompt_s, (long long)m.generated_tokens,
        m.generate_s, (long long)m.requests, (long long)m.errors, m.processing, m.queued, (long long)hits,
        (long long)misses, (long long)rows_gpu, (long long)rows_cpu, (long long)pcie, (long long)win,
        (long long)drafted, (long long)accepted);
    const int rc = srv_send(fd, 200, "text/plain; version=0.0.4", buf, n > 0 ? (size_t)n : 0, NULL, ka);
    free(buf);
    return rc;
}

/* The body as a JSON object, or NULL after answering 400. */
static yyjson_doc *srv_body_json(int fd, const srv_req *r, yyjson_val **root) {
    yyjson_read_err err;
    yyjson_doc *doc = r->body ? yyjson_read_opts(r->body, r->body_len, 0, NULL, &err) : NULL;
    *root = doc ? yyjson_doc_get_root(doc) : NULL;
    if (!*root || !yyjson_is_obj(*root)) {
        char msg[256];
        snprintf(msg, sizeof msg, "the body is not a JSON object%s%s", doc || !r->body ? "" : ": ",
                 doc || !r->body ? "" : err.msg);
        srv_send_error(fd, 400, msg, 0);
        yyjson_doc_free(doc);
        return NULL;
    }
    return doc;
}

/* The model's tokens of text (BOS as the vocabulary asks, special tokens parsed); NULL on no
 * memory. */
static strata_token *srv_tokenize(const srv_ctx *c, const char *text, size_t len, int add_special, int64_t *n) {
    *n = 0;
    int64_t need = 0;
    strata_status st = strata_tokenize(c->model, text, (int64_t)len, add_special, 1, NULL, 0, &need);
    if (st != STRATA_OK && st != STRATA_ERR_RANGE) return NULL;
    strata_token *t = malloc(sizeof *t * (size_t)(need + 1));
    if (!t || strata_tokenize(c->model, text, (int64_t)len, add_special, 1, t, need, n) != STRATA_OK) {
        free(t);
        return NULL;
    }
    return t;
}

static int srv_tokenize_ep(srv_ctx *c, int fd, const srv_req *r, int ka) {
    yyjson_val *root;
    yyjson_doc *doc = srv_body_json(fd, r, &root);
    if (!doc) return 0;
    yyjson_val *content = yyjson_obj_get(root, "content");
    yyjson_val *as = yyjson_obj_get(root, "add_special");
    if (!yyjson_is_str(content)) {
        yyjson_doc_free(doc);
        return srv_send_error(fd, 400, "\"content\" must be a string", ka) == 0 && ka;
    }
    int64_t n = 0;
    strata_token *t = srv_tokenize(c, yyjson_get_str(content), yyjson_get_len(content), yyjson_is_true(as), &n);
    yyjson_doc_free(doc);
    if (!t) return srv_send_error(fd, 500, "tokenization failed", 0), 0;
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *o = yyjson_mut_obj(d);
    yyjson_mut_doc_set_root(d, o);
    yyjson_mut_obj_add_val(d, o, "tokens", yyjson_mut_arr_with_sint32(d, t, (size_t)n));
    free(t);
    return srv_send_json(fd, d, ka) == 0 && ka;
}

static int srv_detokenize_ep(srv_ctx *c, int fd, const srv_req *r, int ka) {
    yyjson_val *root;
    yyjson_doc *doc = srv_body_json(fd, r, &root);
    if (!doc) return 0;
    yyjson_val *arr = yyjson_obj_get(root, "tokens");
    const size_t n = yyjson_is_arr(arr) ? yyjson_arr_size(arr) : 0;
    strata_token *t = malloc(sizeof *t * (n + 1));
    int ok = yyjson_is_arr(arr) && t != NULL;
    size_t i = 0, max;
    yyjson_val *v;
    yyjson_arr_foreach(arr, i, max, v) {
        if (!ok) break;
        ok = yyjson_is_int(v) && yyjson_get_sint(v) >= 0 && yyjson_get_sint(v) < c->info.n_vocab;
        if (ok) t[i] = (strata_token)yyjson_get_sint(v);
    }
    yyjson_doc_free(doc);
    int64_t len = 0;
    char *text = NULL;
    if (ok && strata_detokenize(c->model, t, (int64_t)n, 0, 0, NULL, 0, &len) != STRATA_ERR_INTERNAL) {
        text = malloc((size_t)len + 1);
        ok = text && strata_detokenize(c->model, t, (int64_t)n, 0, 0, text, len, &len) == STRATA_OK;
    }
    free(t);
    if (!ok) {
        free(text);
        return srv_send_error(fd, 400, "\"tokens\" must be an array of token ids of this model", ka) == 0 && ka;
    }
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *o = yyjson_mut_obj(d);
    yyjson_mut_doc_set_root(d, o);
    yyjson_mut_obj_add_strncpy(d, o, "content", text, (size_t)len);
    free(text);
    return srv_send_json(fd, d, ka) == 0 && ka;
}

/* ---- completions ---------------------------------------------------------------------------- */

static void srv_gen_free(srv_gen *g) {
    for (int i = 0; i < g->n_stops; i++) free(g->stops[i]);
    free(g->prompt_text);
    free(g->prompt);
    yyjson_doc_free(g->tools_doc);
}

/* A number field in [lo, hi] into *out (absent or null: unchanged); 0, or -1 with msg set. */
static int srv_num(yyjson_val *root, const char *key, double lo, double hi, double *out, char *msg, size_t size) {
    yyjson_val *v = yyjson_obj_get(root, key);
    if (!v || yyjson_is_null(v)) return 0;
    if (!yyjson_is_num(v) || !(yyjson_get_num(v) >= lo && yyjson_get_num(v) <= hi)) {
        snprintf(msg, size, "\"%s\" must be a number in %g..%g", key, lo, hi);
        return -1;
    }
    *out = yyjson_get_num(v);
    return 0;
}

/* The sampling fields (OpenAI's and llama-server's top_k, min_p, repeat_penalty). */
static int srv_parse_sampling(const srv_ctx *c, yyjson_val *root, srv_gen *g, char *msg, size_t size) {
    double temp = g->sp.temperature, top_p = g->sp.top_p, top_k = g->sp.top_k, min_p = g->sp.min_p;
    double pres = g->sp.presence_penalty, freq = g->sp.frequency_penalty, rep = g->sp.repeat_penalty;
    double seed = -1, mt = c->cfg->max_tokens, n = 1;
    if (srv_num(root, "temperature", 0, 2, &temp, msg, size) || srv_num(root, "top_p", 0, 1, &top_p, msg, size) ||
        srv_num(root, "top_k", 0, 1e9, &top_k, msg, size) || srv_num(root, "min_p", 0, 1, &min_p, msg, size) ||
        srv_num(root, "presence_penalty", -2, 2, &pres, msg, size) ||
        srv_num(root, "frequency_penalty", -2, 2, &freq, msg, size) ||
        srv_num(root, "repeat_penalty", 0.01, 100, &rep, msg, size) ||
        srv_num(root, "seed", -9.2e18, 9.2e18, &seed, msg, size) ||
        srv_num(root, "max_tokens", 0, 1e9, &mt, msg, size) || srv_num(root, "n", 1, SRV_MAX_N, &n, msg, size))
        return -1;
    if (srv_num(root, "max_completion_tokens", 0, 1e9, &mt, msg, size)) return -1; /* (the chat API's newer name) */
    yyjson_val *lp = yyjson_obj_get(root, "logprobs"), *top = yyjson_obj_get(root, "top_logprobs");
    if (lp && !yyjson_is_null(lp) && !yyjson_is_false(lp)) {
        const int ok = g->chat ? yyjson_is_true(lp) : yyjson_is_int(lp) && yyjson_get_sint(lp) >= 0 && yyjson_get_sint(lp) <= 20;
        if (!ok) return snprintf(msg, size, g->chat ? "\"logprobs\" must be a boolean" : "\"logprobs\" must be 0..20"), -1;
        double n_top = g->chat ? 0 : (double)yyjson_get_sint(lp);
        if (g->chat && srv_num(root, "top_logprobs", 0, 20, &n_top, msg, size)) return -1;
        g->logprobs = 1;
        g->top_logprobs = (int)n_top;
    } else if (g->chat && top && !yyjson_is_null(top)) {
        return snprintf(msg, size, "\"top_logprobs\" needs \"logprobs\": true"), -1;
    }
    g->sp.temperature = (float)temp;
    g->sp.top_p = (float)top_p;
    g->sp.top_k = (int32_t)top_k;
    g->sp.min_p = (float)min_p;
    g->sp.presence_penalty = (float)pres;
    g->sp.frequency_penalty = (float)freq;
    g->sp.repeat_penalty = (float)rep;
    if (seed >= 0) g->sp.seed = (uint64_t)seed;
    g->max_tokens = (int32_t)mt;
    g->n_choices = (int)n;
    if ((double)g->n_choices != n) return snprintf(msg, size, "\"n\" must be an integer"), -1;
    return 0;
}

/* "stop": a string or an array of up to SRV_MAX_STOPS strings. */
static int srv_parse_stops(yyjson_val *root, srv_gen *g, char *msg, size_t size) {
    yyjson_val *st = yyjson_obj_get(root, "stop");
    if (!st || yyjson_is_null(st)) return 0;
    yyjson_val *one[1] = {st};
    const size_t n = yyjson_is_str(st) ? 1 : yyjson_is_arr(st) ? yyjson_arr_size(st) : (size_t)-1;
    if (n == (size_t)-1 || n > SRV_MAX_STOPS) {
        snprintf(msg, size, "\"stop\" must be a string or an array of at most %d strings", SRV_MAX_STOPS);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        yyjson_val *v = yyjson_is_str(st) ? one[0] : yyjson_arr_get(st, i);
        if (!yyjson_is_str(v)) {
            snprintf(msg, size, "\"stop\" must hold strings");
            return -1;
        }
        if (yyjson_get_len(v) == 0) continue;
        g->stops[g->n_stops] = strndup(yyjson_get_str(v), yyjson_get_len(v));
        if (!g->stops[g->n_stops++]) return snprintf(msg, size, "out of memory"), -1;
    }
    return 0;
}

/* The prompt: a string, an array of one string, or an array of token ids. */
static int srv_parse_prompt(const srv_ctx *c, yyjson_val *root, srv_gen *g, char *msg, size_t size) {
    yyjson_val *p = yyjson_obj_get(root, "prompt");
    if (yyjson_is_arr(p) && yyjson_arr_size(p) == 1 && yyjson_is_str(yyjson_arr_get_first(p)))
        p = yyjson_arr_get_first(p);
    if (yyjson_is_str(p)) {
        g->prompt = srv_tokenize(c, yyjson_get_str(p), yyjson_get_len(p), 1, &g->n_prompt);
        if (!g->prompt) return snprintf(msg, size, "the prompt could not be tokenized"), -1;
    } else if (yyjson_is_arr(p) && yyjson_arr_size(p) > 0) {
        g->n_prompt = (int64_t)yyjson_arr_size(p);
        g->prompt = malloc(sizeof(strata_token) * (size_t)g->n_prompt);
        size_t i, max;
        yyjson_val *v;
        yyjson_arr_foreach(p, i, max, v) {
            if (!g->prompt || !yyjson_is_int(v) || yyjson_get_sint(v) < 0 || yyjson_get_sint(v) >= c->info.n_vocab)
                return snprintf(msg, size, "\"prompt\" as an array must hold one string or token ids of this model"), -1;
            g->prompt[i] = (strata_token)yyjson_get_sint(v);
        }
    } else {
        return snprintf(msg, size, "\"prompt\" must be a string, an array of one string, or token ids"), -1;
    }
    if (g->n_prompt == 0) return snprintf(msg, size, "the prompt is empty"), -1;
    return 0;
}

/* The chat template's context: the request's messages and tools, chat_template_kwargs
 * (enable_thinking and the like), then add_generation_prompt and the model's BOS and EOS texts
 * where the kwargs do not set them (chat_context.h). */
static char *srv_chat_context(const srv_ctx *c, yyjson_val *root) {
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *o = d ? yyjson_mut_obj(d) : NULL;
    if (!o) return yyjson_mut_doc_free(d), NULL;
    yyjson_mut_doc_set_root(d, o);
    yyjson_mut_obj_add_val(d, o, "messages", yyjson_val_mut_copy(d, yyjson_obj_get(root, "messages")));
    yyjson_val *tools = yyjson_obj_get(root, "tools");
    if (yyjson_is_arr(tools) && yyjson_arr_size(tools) > 0) yyjson_mut_obj_add_val(d, o, "tools", yyjson_val_mut_copy(d, tools));
    yyjson_val *kw = yyjson_obj_get(root, "chat_template_kwargs");
    size_t i, max;
    yyjson_val *k, *v;
    if (yyjson_is_obj(kw))
        yyjson_obj_foreach(kw, i, max, k, v) {
            yyjson_mut_obj_remove_keyn(o, yyjson_get_str(k), yyjson_get_len(k));
            yyjson_mut_obj_add(o, yyjson_val_mut_copy(d, k), yyjson_val_mut_copy(d, v));
        }
    char *s = chat_context_defaults(d, o, c->model, 1) == 0 ? yyjson_mut_write(d, 0, NULL) : NULL;
    yyjson_mut_doc_free(d);
    return s;
}

/* A chat request's prompt: its messages through the model's chat template, then tokenized (the
 * template writes BOS where the model wants it). */
static int srv_parse_chat(const srv_ctx *c, yyjson_val *root, srv_gen *g, char *msg, size_t size) {
    yyjson_val *m = yyjson_obj_get(root, "messages");
    if (!yyjson_is_arr(m) || yyjson_arr_size(m) == 0) return snprintf(msg, size, "\"messages\" must be a non-empty array"), -1;
    size_t i, max;
    yyjson_val *x;
    yyjson_arr_foreach(m, i, max, x)
        if (!yyjson_is_obj(x) || !yyjson_is_str(yyjson_obj_get(x, "role")))
            return snprintf(msg, size, "each message must be an object with a \"role\""), -1;
    const char *tmpl = strata_model_chat_template(c->model);
    if (!tmpl) return snprintf(msg, size, "the model has no chat template (tokenizer.chat_template): use /v1/completions"), -1;
    char *ctx = srv_chat_context(c, root), *text = NULL, err[200];
    if (!ctx) return snprintf(msg, size, "out of memory"), -1;
    const int rc = tmpl_render(tmpl, strlen(tmpl), ctx, &text, err, sizeof err);
    free(ctx);
    if (rc != 0) return snprintf(msg, size, "chat template: %s", err), -1;
    /* reasoning: where the template has think tags (and the request does not ask it raw) */
    const char *rf = yyjson_get_str(yyjson_obj_get(root, "reasoning_format"));
    const int reason = c->cfg->reasoning && !(rf && !strcmp(rf, "none"));
    const int seed = strstr(tmpl, "</seed:think>") != NULL; /* Seed-OSS's own tags */
    if (strstr(tmpl, "<|channel|>")) g->harmony = reason ? 1 : 2; /* gpt-oss: channels, not think tags */
    else if (reason && (seed || strstr(tmpl, "</think>"))) {
        const char *open = seed ? "<seed:think>" : "<think>";
        const size_t lo = strlen(open);
        size_t n = strlen(text);
        while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' ')) n--;
        g->think = (n >= lo && !memcmp(text + n - lo, open, lo) ? 2 : 1) | (seed ? SRV_THINK_SEED : 0);
    }
    yyjson_val *tools = yyjson_obj_get(root, "tools");
    g->tools = yyjson_is_arr(tools) && yyjson_arr_size(tools) > 0 ? srv_tool_format(tmpl) : SRV_TOOLS_NONE;
    if (g->tools != SRV_TOOLS_NONE) { /* (the request's document is freed before generation) */
        size_t tl = 0;
        char *ts = yyjson_val_write(tools, 0, &tl);
        g->tools_doc = ts ? yyjson_read(ts, tl, 0) : NULL;
        g->tool_list = yyjson_doc_get_root(g->tools_doc);
        free(ts);
    }
    g->prompt = srv_tokenize(c, text, strlen(text), 0, &g->n_prompt);
    free(text);
    if (!g->prompt) return snprintf(msg, size, "the rendered chat could not be tokenized"), -1;
    if (g->n_prompt == 0) return snprintf(msg, size, "the chat template rendered nothing"), -1;
    return 0;
}

static int srv_parse_gen(const srv_ctx *c, yyjson_val *root, srv_gen *g, char *msg, size_t size) {
    g->sp = c->cfg->sampling;
    yyjson_val *s = yyjson_obj_get(root, "stream");
    if (s && !yyjson_is_null(s) && !yyjson_is_bool(s)) return snprintf(msg, size, "\"stream\" must be a boolean"), -1;
    g->stream = yyjson_is_true(s);
    g->include_usage = yyjson_is_true(yyjson_obj_get(yyjson_obj_get(root, "stream_options"), "include_usage"));
    g->echo = !g->chat && yyjson_is_true(yyjson_obj_get(root, "echo"));
    if (srv_parse_sampling(c, root, g, msg, size) || srv_parse_stops(root, g, msg, size)) return -1;
    if (g->chat) return srv_parse_chat(c, root, g, msg, size);
    if (srv_parse_prompt(c, root, g, msg, size)) return -1;
    if (g->echo) { /* the prompt as text: the string given, or the tokens' text */
        yyjson_val *p = yyjson_obj_get(root, "prompt");
        if (yyjson_is_arr(p) && yyjson_arr_size(p) == 1 && yyjson_is_str(yyjson_arr_get_first(p))) p = yyjson_arr_get_first(p);
        int64_t n = 0;
        if (yyjson_is_str(p)) {
            g->prompt_text = strndup(yyjson_get_str(p), yyjson_get_len(p));
            n = (int64_t)yyjson_get_len(p);
        } else if (strata_detokenize(c->model, g->prompt, g->n_prompt, 0, 0, NULL, 0, &n) != STRATA_ERR_INTERNAL) {
            g->prompt_text = malloc((size_t)n + 1);
            if (g->prompt_text && strata_detokenize(c->model, g->prompt, g->n_prompt, 0, 0, g->prompt_text, n, &n) != STRATA_OK)
                n = 0;
        }
        if (!g->prompt_text) return snprintf(msg, size, "out of memory"), -1;
        g->prompt_len = (size_t)n;
    }
    return 0;
}

static int srv_completions(srv_ctx *c, int fd, const srv_req *r, int ka, int chat) {
    yyjson_val *root;
    yyjson_doc *doc = srv_body_json(fd, r, &root);
    if (!doc) return 0;
    srv_gen g;
    memset(&g, 0, sizeof g);
    g.chat = chat;
    char msg[256] = "";
    const int bad = srv_parse_gen(c, root, &g, msg, sizeof msg);
    yyjson_doc_free(doc);
    int rc;
    if (bad) {
        pthread_mutex_lock(&c->mu);
        c->m.errors++;
        pthread_mutex_unlock(&c->mu);
        rc = srv_send_error(fd, 400, msg, ka) == 0 && ka;
    } else {
        rc = srv_generate(c, fd, &g, ka);
    }
    srv_gen_free(&g);
    return rc;
}

/* ---- routing -------------------------------------------------------------------------------- */

static int srv_route(srv_ctx *c, int fd, srv_req *r);

/* Every request counted in c->handling while it runs, none after the stop (the model and the
 * sessions go when srv_run returns; it waits for those counted). */
int srv_handle(srv_ctx *c, int fd, srv_req *r) {
    pthread_mutex_lock(&c->mu);
    const int stopping = c->stopping;
    if (!stopping) c->handling++;
    pthread_mutex_unlock(&c->mu);
    if (stopping) return srv_send_error(fd, 503, "the server is stopping", 0), 0;
    const int rc = srv_route(c, fd, r);
    pthread_mutex_lock(&c->mu);
    c->handling--;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int srv_route(srv_ctx *c, int fd, srv_req *r) {
    const int ka = r->keep_alive;
    const int get = strcmp(r->method, "GET") == 0, post = strcmp(r->method, "POST") == 0;
    pthread_mutex_lock(&c->mu);
    c->m.requests++;
    pthread_mutex_unlock(&c->mu);
    if (strcmp(r->path, "/health") == 0) {
        if (!get) return srv_send_error(fd, 405, "GET /health", ka) == 0 && ka;
        return srv_send(fd, 200, "application/json", "{\"status\":\"ok\"}", 15, NULL, ka) == 0 && ka;
    }
    if (c->cfg->api_key) {
        const char *a = r->auth;
        const int bearer = strncmp(a, "Bearer ", 7) == 0;
        if (!bearer || !srv_key_equal(a + 7, c->cfg->api_key)) {
            pthread_mutex_lock(&c->mu);
            c->m.errors++;
            pthread_mutex_unlock(&c->mu);
            return srv_send_error(fd, 401, "a valid API key is required (Authorization: Bearer KEY)", ka) == 0 && ka;
        }
    }
    const struct { const char *path; int post; } routes[] = {
        {"/v1/models", 0}, {"/metrics", 0}, {"/tokenize", 1}, {"/detokenize", 1}, {"/v1/completions", 1},
        {"/v1/chat/completions", 1}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(r->path, routes[i].path) != 0) continue;
        if (routes[i].post ? !post : !get) {
            char msg[96];
            snprintf(msg, sizeof msg, "use %s %s", routes[i].post ? "POST" : "GET", routes[i].path);
            return srv_send_error(fd, 405, msg, ka) == 0 && ka;
        }
        switch (i) {
        case 0: return srv_models(c, fd, ka) == 0 && ka;
        case 1: return srv_metrics_text(c, fd, ka) == 0 && ka;
        case 2: return srv_tokenize_ep(c, fd, r, ka);
        case 3: return srv_detokenize_ep(c, fd, r, ka);
        case 4: return srv_completions(c, fd, r, ka, 0);
        default: return srv_completions(c, fd, r, ka, 1);
        }
    }
    return srv_send_error(fd, 404, "no such endpoint", ka) == 0 && ka;
}
