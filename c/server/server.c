/* server.c - strata serve's listener (server.h): the socket, a thread a connection (at most
 * max_conns; past it 503), the requests of a connection read and answered in turn (api.c); the
 * slots are slots.c's. */
#include "server_impl.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

srv_config srv_default_config(void) {
    srv_config c;
    memset(&c, 0, sizeof c);
    c.host = "127.0.0.1";
    c.port = 8080;
    c.model_name = NULL; /* the CLI names it after the file */
    c.limits.max_header = 64 << 10;
    c.limits.max_body = 64 << 20;
    c.limits.request_timeout_s = 30;
    c.limits.idle_timeout_s = 60;
    c.max_conns = 64;
    c.queue = 64;
    c.max_tokens = 128;
    c.reasoning = 1;
    c.sampling = strata_sampler_default_params();
    return c;
}

/* ---- connections ---------------------------------------------------------------------------- */

typedef struct {
    srv_ctx *c;
    int fd;
    int idx;         /* its entry in c->fds */
    int refuse;      /* past max_conns: the request read (briefly), answered 503, closed */
} srv_conn_arg;

/* A connection's end: its entry and count given back (the stop may then free c), then the socket
 * closed (nothing of c touched after the unlock). */
static void srv_conn_done(const srv_conn_arg *a) {
    srv_ctx *c = a->c;
    pthread_mutex_lock(&c->mu);
    c->fds[a->idx] = -1;
    if (a->refuse) c->refusing--;
    else c->open_conns--;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    close(a->fd);
}

/* A connection past max_conns: its request is read (within 2 s) so that the client, still
 * sending, gets the 503 instead of a broken pipe. */
static void srv_refuse(srv_ctx *c, int fd) {
    const srv_limits lim = {c->cfg->limits.max_header, c->cfg->limits.max_body, 2, 2};
    srv_req r;
    memset(&r, 0, sizeof r);
    if (srv_read_request(fd, &lim, &r) != SRV_CLOSED)
        srv_send_error(fd, 503, "too many connections: try again later", 0);
    srv_req_free_all(&r);
}

static void *srv_conn(void *arg) {
    srv_conn_arg a = *(srv_conn_arg *)arg;
    free(arg);
    srv_req r;
    memset(&r, 0, sizeof r);
    if (a.refuse) {
        srv_refuse(a.c, a.fd);
        srv_conn_done(&a);
        return NULL;
    }
    for (;;) {
        const int st = srv_read_request(a.fd, &a.c->cfg->limits, &r);
        if (st == SRV_CLOSED) break;
        if (st != 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "%s", st == 431 ? "the request's headers are larger than the server's limit"
                                            : st == 413 ? "the request's body is larger than the server's limit"
                                            : st == 408 ? "the request did not arrive in time"
                                            : st == 414 ? "the request's target is too long"
                                                        : "malformed HTTP request");
            srv_send_error(a.fd, st, msg, 0);
            break;
        }
        if (!srv_handle(a.c, a.fd, &r)) break;
    }
    srv_req_free_all(&r);
    srv_conn_done(&a);
    return NULL;
}

/* A new connection: its thread; past max_conns a thread that answers 503 (at most max_conns of
 * those; past them the connection is closed unanswered). */
static void srv_accepted(srv_ctx *c, int fd) {
    pthread_mutex_lock(&c->mu);
    const int refuse = c->open_conns >= c->cfg->max_conns;
    const int drop = refuse && c->refusing >= c->cfg->max_conns;
    if (!refuse) c->open_conns++;
    else if (!drop) c->refusing++;
    int idx = 0; /* (the counts keep one of the 2 x max_conns entries free) */
    while (!drop && c->fds[idx] >= 0) idx++;
    if (!drop) c->fds[idx] = fd;
    pthread_mutex_unlock(&c->mu);
    if (drop) {
        close(fd);
        return;
    }
    srv_conn_arg *a = malloc(sizeof *a);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (!a || (a->c = c, a->fd = fd, a->idx = idx, a->refuse = refuse, pthread_create(&t, &at, srv_conn, a) != 0)) {
        srv_send_error(fd, 503, "the server could not take the connection", 0);
        const srv_conn_arg b = {c, fd, idx, refuse};
        srv_conn_done(&b);
        free(a);
    }
    pthread_attr_destroy(&at);
}

/* ---- the listener --------------------------------------------------------------------------- */

static int srv_listen(const srv_config *cfg, int *port_out) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    const int gai = getaddrinfo(cfg->host, port, &hints, &res);
    if (gai != 0) {
        fprintf(stderr, "strata: serve: cannot resolve --host %s: %s\n", cfg->host, gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) continue;
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
            fprintf(stderr, "strata: serve: cannot listen on %s:%d: %s\n", cfg->host, cfg->port, strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) return -1;
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    *port_out = cfg->port;
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0) {
        char h[NI_MAXHOST], p[NI_MAXSERV];
        if (getnameinfo((struct sockaddr *)&sa, sl, h, sizeof h, p, sizeof p, NI_NUMERICHOST | NI_NUMERICSERV) == 0)
            *port_out = atoi(p);
    }
    return fd;
}

int srv_run(const srv_config *cfg, const strata_model *model, strata_session **sessions, int n_slots,
            volatile sig_atomic_t *stop) {
    /* on the heap: a connection still idle at the stop may wake after this returns (its thread
     * then only closes its socket); the context is freed only when none is left */
    srv_ctx *c = calloc(1, sizeof *c);
    if (!c) { fprintf(stderr, "strata: serve: out of memory\n"); return 1; }
    c->own = *cfg;
    c->own.host = strdup(cfg->host ? cfg->host : "127.0.0.1");
    c->own.api_key = cfg->api_key ? strdup(cfg->api_key) : NULL;
    c->own.model_name = cfg->model_name ? strdup(cfg->model_name) : NULL;
    c->cfg = cfg = &c->own;
    c->model = model;
    c->name = cfg->model_name ? cfg->model_name : "strata";
    strata_model_get_info(model, &c->info);
    c->n_slots = n_slots;
    c->slots = calloc((size_t)n_slots, sizeof *c->slots);
    c->created = (int64_t)time(NULL);
    for (int i = 0; c->slots && i < n_slots; i++) {
        c->slots[i].session = sessions[i];
        c->slots[i].tokens = malloc(sizeof(strata_token) * (size_t)strata_session_n_ctx(sessions[i]));
        if (!c->slots[i].tokens) { fprintf(stderr, "strata: serve: out of memory\n"); return 1; }
    }
    c->fds = malloc(sizeof *c->fds * (size_t)(2 * cfg->max_conns));
    if (!c->slots || !c->fds) { fprintf(stderr, "strata: serve: out of memory\n"); return 1; }
    for (int i = 0; i < 2 * cfg->max_conns; i++) c->fds[i] = -1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    int port = 0;
    const int lfd = srv_listen(cfg, &port);
    if (lfd < 0) return 1;
    const int open = strcmp(cfg->host, "127.0.0.1") != 0 && strcmp(cfg->host, "localhost") != 0 &&
                     strcmp(cfg->host, "::1") != 0;
    fprintf(stderr, "strata: serve: listening on http://%s:%d (%d slot%s%s)\n", cfg->host, port, n_slots,
            n_slots == 1 ? "" : "s", cfg->api_key ? ", API key required" : "");
    if (open)
        fprintf(stderr, "strata: serve: --host %s: reachable from the network%s\n", cfg->host,
                cfg->api_key ? "" : ", and no --api-key is set");
    while (!*stop) {
        struct pollfd pf = {lfd, POLLIN, 0};
        if (poll(&pf, 1, 200) <= 0) continue;
        const int fd = accept(lfd, NULL, NULL);
        if (fd >= 0) srv_accepted(c, fd);
    }
    close(lfd);
    pthread_mutex_lock(&c->mu); /* the requests in progress finish (their connections close after) */
    c->stopping = 1;
    while (c->handling > 0) { /* the requests being answered finish */
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_sec += 1;
        pthread_cond_timedwait(&c->cv, &c->mu, &t);
    }
    for (int i = 0; i < 2 * cfg->max_conns; i++) /* idle connections woken: their reads end */
        if (c->fds[i] >= 0) shutdown(c->fds[i], SHUT_RDWR);
    for (int k = 0; k < 50 && c->open_conns + c->refusing > 0; k++) { /* 5 s at most */
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 100000000;
        if (t.tv_nsec >= 1000000000) { t.tv_sec++; t.tv_nsec -= 1000000000; }
        pthread_cond_timedwait(&c->cv, &c->mu, &t);
    }
    const int left = c->open_conns + c->refusing;
    pthread_mutex_unlock(&c->mu);
    fprintf(stderr, "strata: serve: stopped after %lld requests\n", (long long)c->m.requests);
    if (left == 0) {
        for (int i = 0; i < n_slots; i++) free(c->slots[i].tokens);
        free(c->slots);
        free((char *)c->own.host);
        free((char *)c->own.api_key);
        free((char *)c->own.model_name);
        free(c->fds);
        free(c);
    }
    return 0;
}
