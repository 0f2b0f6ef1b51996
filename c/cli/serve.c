/* serve.c - `strata serve`: the HTTP server (c/server/server.h) over a model and --parallel
 * sessions made from the same options as `strata run` (placement, sampling defaults, context);
 * the server's own options (address, API key, limits); SIGINT / SIGTERM stop it. */
#include "cli.h"
#include "drafts.h"
#include "options.h"
#include "server.h"
#include "session_setup.h"

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t g_stop;

static void on_stop(int sig) {
    (void)sig;
    g_stop = 1;
}

typedef struct {
    srv_config cfg;
    int parallel;
    const char *key_file;
} serve_opts;

static void usage(void) {
    printf("usage: strata serve -m MODEL.gguf [--host 127.0.0.1] [--port 8080] [options]\n\n"
           "An HTTP server with OpenAI's API: POST /v1/completions (streamed or not), GET /v1/models,\n"
           "POST /tokenize, /detokenize, GET /health, /metrics (docs/SERVER.md). Each of --parallel\n"
           "slots keeps its KV cache: a request reads only what its prompt does not share with a slot.\n\n"
           "  --host H            address to listen on (default 127.0.0.1; 0.0.0.0: every interface)\n"
           "  --port N            (default 8080; 0: any free port, printed)\n"
           "  --api-key KEY       require 'Authorization: Bearer KEY' (not for /health)\n"
           "  --api-key-file F    the key from a file (its first line)\n"
           "  --parallel N        slots, each a session of -c tokens (default 1)\n"
           "  --queue N           requests waiting for a slot before 503 (default 64)\n"
           "  --max-conns N       connections open at once before 503 (default 64)\n"
           "  --max-header SIZE   request line and headers (default 64K)\n"
           "  --max-body SIZE     request body (default 64M)\n"
           "  --timeout S         seconds a request may take to arrive (default 30)\n"
           "  --idle-timeout S    seconds a kept-alive connection may idle (default 60)\n"
           "  --alias NAME        the model's id in the API (default: the file's name)\n"
           "  --reasoning-format F  auto (default): a chat template's <think> part of an answer goes\n"
           "                      to reasoning_content; none: left in content\n"
           "  -n N                a request's max_tokens when it gives none (default: until the end\n"
           "                      of generation or of the context, as llama-server)\n"
           "  and every option of strata run (placement, --temp and the sampling defaults, -c, -t).\n");
}

static int int_opt(const char *a, const char *v, long lo, long hi, int *out) {
    char *end;
    const long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi)
        return cli_usage_error("bad value '%s' for %s (%ld..%ld)", v, a, lo, hi);
    *out = (int)x;
    return 0;
}

/* One of serve's own options at argv[*i]: 1 taken, 0 not serve's, else the exit status. */
static int parse_serve_opt(serve_opts *s, int argc, char **argv, int *i) {
    static const char *const names[] = {"--host", "--port", "--api-key", "--api-key-file", "--parallel", "--queue",
                                        "--max-conns", "--max-header", "--max-body", "--timeout", "--idle-timeout",
                                        "--alias", "--reasoning-format", NULL};
    const char *a = argv[*i];
    int k = 0;
    while (names[k] && strcmp(a, names[k]) != 0) k++;
    if (!names[k]) return 0;
    if (*i + 1 >= argc) return cli_usage_error("option '%s' needs a value", a);
    const char *v = argv[++*i];
    int64_t size = 0;
    int rc = 0;
    switch (k) {
    case 0: s->cfg.host = v; break;
    case 1: rc = int_opt(a, v, 0, 65535, &s->cfg.port); break;
    case 2: s->cfg.api_key = v; break;
    case 3: s->key_file = v; break;
    case 4: rc = int_opt(a, v, 1, 64, &s->parallel); break;
    case 5: rc = int_opt(a, v, 0, 1 << 20, &s->cfg.queue); break;
    case 6: rc = int_opt(a, v, 1, 1 << 16, &s->cfg.max_conns); break;
    case 7:
    case 8:
        rc = cli_parse_size(a, v, &size);
        if (!rc && size < 1024) rc = cli_usage_error("bad value '%s' for %s (at least 1K)", v, a);
        if (!rc) *(k == 7 ? &s->cfg.limits.max_header : &s->cfg.limits.max_body) = size;
        break;
    case 9: rc = int_opt(a, v, 1, 86400, &s->cfg.limits.request_timeout_s); break;
    case 10: rc = int_opt(a, v, 1, 86400, &s->cfg.limits.idle_timeout_s); break;
    case 11: s->cfg.model_name = v; break;
    default:
        if (strcmp(v, "auto") && strcmp(v, "none")) rc = cli_usage_error("bad value '%s' for %s (auto or none)", v, a);
        s->cfg.reasoning = strcmp(v, "none") != 0;
        break;
    }
    return rc ? rc : 1;
}

/* The key of --api-key-file: its first line, without trailing spaces. */
static int read_key_file(serve_opts *s, char **owned) {
    size_t len = 0;
    char *k = cli_read_file(s->key_file, &len);
    if (!k) return CLI_EXIT_USAGE;
    k[strcspn(k, "\r\n")] = '\0';
    for (size_t n = strlen(k); n > 0 && (k[n - 1] == ' ' || k[n - 1] == '\t'); n--) k[n - 1] = '\0';
    if (!k[0]) {
        free(k);
        return cli_usage_error("--api-key-file %s: no key on its first line", s->key_file);
    }
    s->cfg.api_key = *owned = k;
    return 0;
}

static int parse_args(int argc, char **argv, cli_opts *o, serve_opts *s) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { usage(); return -1; }
        int rc = parse_serve_opt(s, argc, argv, &i);
        if (rc == 1) continue;
        if (rc) return rc;
        rc = cli_opts_parse(o, argc, argv, &i);
        if (rc == 1) continue;
        if (rc) return rc;
        return cli_usage_error("unknown option '%s' for serve", a);
    }
    if (!o->model) return cli_usage_error("no model (-m FILE)");
    if (s->cfg.api_key && !s->cfg.api_key[0]) return cli_usage_error("--api-key: an empty key");
    return 0;
}

/* --spec for the slots: a cli_drafts each (the run command's drafters and policy) behind the
 * server's callbacks; each is used only by the request holding its slot. */
static cli_drafts g_drafts[64];

static int spec_prompt(void *data, int slot, const strata_token *hist, int64_t n) {
    (void)data;
    return cli_drafts_prompt(&g_drafts[slot], hist, n);
}

static int spec_next(void *data, int slot, const strata_token *hist, int64_t n, int32_t max, int *which,
                     const strata_token **draft, int32_t *k) {
    (void)data;
    double draft_s = 0;
    return cli_drafts_next(&g_drafts[slot], hist, n, max, which, draft, k, &draft_s);
}

static void spec_observe(void *data, int slot, int which, int32_t k, const strata_token *win, int32_t n_win,
                         double seconds) {
    (void)data;
    cli_drafts_observe(&g_drafts[slot], which, k, win, n_win, seconds);
}

/* The file's name without its folders and .gguf: the model's default id. */
static const char *model_id(const char *path, char *buf, size_t size) {
    const char *b = strrchr(path, '/');
    snprintf(buf, size, "%s", b ? b + 1 : path);
    const size_t n = strlen(buf);
    if (n > 5 && strcmp(buf + n - 5, ".gguf") == 0) buf[n - 5] = '\0';
    return buf;
}

int cli_cmd_serve(int argc, char **argv) {
    cli_opts o;
    cli_opts_init(&o);
    serve_opts s;
    memset(&s, 0, sizeof s);
    s.cfg = srv_default_config();
    s.parallel = 1;
    int rc = parse_args(argc, argv, &o, &s);
    if (rc) return rc < 0 ? 0 : rc;
    char *key = NULL;
    if (s.key_file && (rc = read_key_file(&s, &key)) != 0) return rc;
    char idbuf[256];
    if (!s.cfg.model_name) s.cfg.model_name = model_id(o.model, idbuf, sizeof idbuf);
    s.cfg.sampling = o.sp;
    /* max_tokens a request leaves out: -n when given, else no limit but the context's */
    int n_given = 0;
    for (int i = 1; i < argc; i++)
        n_given |= !strcmp(argv[i], "-n") || !strcmp(argv[i], "--n-predict") || !strncmp(argv[i], "--n-predict=", 12);
    s.cfg.max_tokens = n_given && o.n_predict > 0 ? o.n_predict : INT32_MAX;
    strata_model *model = NULL;
    double load_s = 0;
    strata_session *sessions[64] = {NULL};
    if ((rc = cli_load_model(&o, &model, &load_s)) != 0) { free(key); return rc; }
    if (o.spec == CLI_SPEC_ORACLE) rc = cli_usage_error("--spec oracle is for benchmarks (strata run), not serve");
    const int quiet = o.quiet;
    for (int i = 0; i < s.parallel && rc == 0; i++) {
        rc = cli_new_session(&o, model, &sessions[i]);
        if (rc == 0) rc = cli_drafts_open(&o, model, sessions[i], &g_drafts[i]);
        o.quiet = 1; /* the start-up lines once */
    }
    o.quiet = quiet;
    if (rc == 0 && o.spec != CLI_SPEC_NONE) {
        s.cfg.spec = (srv_spec){NULL, spec_prompt, spec_next, spec_observe, o.draft_max};
    }
    if (rc == 0) {
        signal(SIGPIPE, SIG_IGN);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        rc = srv_run(&s.cfg, model, sessions, s.parallel, &g_stop) ? CLI_EXIT_FAIL : 0;
    }
    for (int i = 0; i < s.parallel; i++) {
        cli_drafts_close(&g_drafts[i]); /* (before its session: a self-draft is the session's) */
        strata_session_free(sessions[i]);
    }
    strata_model_free(model);
    free(key);
    return rc;
}
