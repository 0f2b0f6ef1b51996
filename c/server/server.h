/* server.h - strata serve: an HTTP/1.1 server with OpenAI's API over one loaded model and its
 * sessions (the slots), for the CLI (c/cli/serve.c). It uses only the public API (strata.h).
 *
 * Endpoints (api.c): GET /health (no key needed), GET /v1/models, GET /metrics (Prometheus
 * text), POST /tokenize, POST /detokenize, POST /v1/completions and /v1/chat/completions (the
 * messages through the model's chat template, template.h), streamed as server-sent events or
 * not.
 * Each slot keeps its session's KV cache: a request goes to the free slot whose cached tokens
 * share the longest prefix with its prompt and reads only the rest (usage.prompt_tokens_details.
 * cached_tokens). Requests wait for a slot in arrival order; past `queue` waiting, 503.
 *
 *   srv_config c = srv_default_config();
 *   c.port = 8080;
 *   int rc = srv_run(&c, model, sessions, n_sessions, &stop_flag);  // returns when stop_flag is set
 */
#ifndef STRATA_SERVER_H
#define STRATA_SERVER_H

#include "http.h"
#include "strata.h"

#include <signal.h>

/* Speculative decoding for the slots (the CLI's drafters and draft policy behind callbacks):
 * before a generation the slot's history so far; each step the next window's drafts (k 0: a plain
 * step); after it what the window gave and its seconds. NULL next: no speculation. */
typedef struct {
    void *data;
    int (*prompt)(void *data, int slot, const strata_token *hist, int64_t n);
    int (*next)(void *data, int slot, const strata_token *hist, int64_t n, int32_t max, int *which,
                const strata_token **draft, int32_t *k);
    void (*observe)(void *data, int slot, int which, int32_t k, const strata_token *win, int32_t n_win,
                    double seconds);
    int32_t draft_max;
} srv_spec;

typedef struct {
    const char *host;                 /* default "127.0.0.1" */
    int port;                         /* default 8080; 0: any free port (the line says which) */
    const char *api_key;              /* NULL: no key asked */
    const char *model_name;           /* the id /v1/models lists (NULL: "strata") */
    srv_limits limits;
    int max_conns;                    /* connections open at once (default 64); past it 503 */
    int queue;                        /* requests waiting for a slot (default 64); past it 503 */
    int32_t max_tokens;               /* a request's max_tokens when it gives none (default 128;
                                         INT32_MAX: until the end of generation or the context) */
    int reasoning;                    /* chat answers of templates with <think> tags: the thinking as
                                         reasoning_content (1, the default), or left in content (0) */
    strata_sampler_params sampling;   /* a request's sampling where it says nothing */
    srv_spec spec;                    /* speculative decoding (a request with logprobs steps plainly) */
} srv_config;

srv_config srv_default_config(void);

/* Serves until *stop becomes non-zero (a signal handler sets it), then waits for the requests
 * in progress. sessions: n_slots sessions of model (not freed here). Messages (the address it
 * listens on, failures) go to stderr. 0 on a clean stop, 1 when it could not listen. */
int srv_run(const srv_config *cfg, const strata_model *model, strata_session **sessions, int n_slots,
            volatile sig_atomic_t *stop);

#endif /* STRATA_SERVER_H */
