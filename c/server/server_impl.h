/* server_impl.h - what server.c (the listener, connections, slots, metrics) and api.c (the
 * endpoints) share inside the server. */
#ifndef STRATA_SERVER_IMPL_H
#define STRATA_SERVER_IMPL_H

#include "server.h"

#include <pthread.h>
#include <stdint.h>

/* One slot: a session and the tokens its KV cache holds. */
typedef struct {
    strata_session *session;
    strata_token *tokens;             /* [n_ctx] the cached tokens, positions 0 .. n_tokens-1 */
    int32_t n_tokens;
    int busy;
    strata_session_stats stats;       /* the session's stats after its last request (metrics) */
    strata_spec_stats spec;           /* and its verify windows' */
} srv_slot;

/* Counters for /metrics (under mu). */
typedef struct {
    int64_t requests, errors;
    int64_t prompt_tokens, cached_tokens, generated_tokens;
    double prompt_s, generate_s;
    int processing, queued;
} srv_metrics;

typedef struct {
    const srv_config *cfg;            /* &own: the caller's config copied, its strings too, so that
                                         a connection outliving srv_run reads nothing of the caller's */
    srv_config own;
    const strata_model *model;
    const char *name;                 /* the model's id in the API */
    strata_model_info info;
    srv_slot *slots;
    int n_slots;
    pthread_mutex_t mu;               /* slots' busy flags, the queue, metrics */
    pthread_cond_t cv;
    uint64_t next_ticket, serving;    /* the queue: tickets served in arrival order */
    srv_metrics m;
    int open_conns;
    int refusing;                     /* connections past max_conns being answered 503 */
    int *fds;                         /* [2 x max_conns] the open connections' sockets (-1: free),
                                         shut at the stop so that idle ones end */
    int stopping;                     /* set at the stop: no request is taken after it */
    int handling;                     /* requests being answered */
    int64_t created;                  /* start time (unix seconds), for ids and /v1/models */
    uint64_t ids;                     /* the next response id */
} srv_ctx;

#define SRV_MAX_STOPS 16
#define SRV_MAX_N 8

/* A completion request's options (api.c reads them from its JSON). */
typedef struct {
    strata_sampler_params sp;
    int32_t max_tokens;
    int stream, include_usage;
    int chat;                         /* /v1/chat/completions: the chat formats */
    int think;                        /* chat: reasoning in <think> tags split out (1; 2: the prompt
                                         opened one; | SRV_THINK_SEED: <seed:think>), 0 none */
    int harmony;                      /* chat, gpt-oss's harmony channels (harmony.c): analysis as
                                         reasoning (1) or, reasoning off, as content (2); 0 not */
    int tools;                        /* chat with tools: the template's SRV_TOOLS_* format (text.h) */
    struct yyjson_doc *tools_doc;     /* and the request's tools (a copy), tool_list its array: */
    struct yyjson_val *tool_list;     /* the XML formats' argument types */
    int logprobs, top_logprobs;       /* each token's logprob, and the n most likely (<= 20) */
    int echo;                         /* completions: the prompt's text before the answer's */
    int n_choices;                    /* "n": choices generated one after another (1 .. SRV_MAX_N) */
    char *prompt_text;                /* echo: that text */
    size_t prompt_len;
    char *stops[SRV_MAX_STOPS];
    int n_stops;
    strata_token *prompt;
    int64_t n_prompt;
} srv_gen;

/* Runs a completion request in a slot and answers it, whole or streamed (generate.c); returns
 * 1 when the connection may carry another. */
int srv_generate(srv_ctx *c, int fd, const srv_gen *g, int keep_alive);

/* Answers one request (api.c; 503 once stopping); returns 1 when the connection may carry
 * another. */
int srv_handle(srv_ctx *c, int fd, srv_req *r);

/* A free slot for prompt (n tokens), the one whose cached tokens share the longest prefix,
 * waiting in arrival order; NULL when the queue is full or the server is stopping (503). */
srv_slot *srv_slot_acquire(srv_ctx *c, const strata_token *prompt, int32_t n);
void srv_slot_release(srv_ctx *c, srv_slot *s);

#endif /* STRATA_SERVER_IMPL_H */
