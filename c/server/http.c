/* http.c - reading one HTTP/1.1 request within the limits (llhttp parses), and writing responses,
 * errors in OpenAI's format and server-sent events (http.h). */
#include "http.h"

#include "llhttp.h"
#include "yyjson.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

typedef struct {
    srv_req *r;
    const srv_limits *lim;
    int last_was_value;     /* the previous header callback was a value (a new field starts) */
    int headers_done;
    int status;             /* a limit's status, set by a callback that stops the parser */
    int64_t head_bytes;     /* the target's, the header names' and values' bytes (and 4 a header) */
} srv_parse;

/* Counts n more bytes of the request's head; HPE_USER (431) past the limit. */
static int srv_head(srv_parse *x, size_t n) {
    x->head_bytes += (int64_t)n;
    if (x->head_bytes <= x->lim->max_header) return 0;
    x->status = 431;
    return HPE_USER;
}

double srv_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- llhttp callbacks ----------------------------------------------------------------------- */

static int on_url(llhttp_t *p, const char *at, size_t n) {
    srv_parse *x = p->data;
    srv_req *r = x->r;
    if (srv_head(x, n)) return HPE_USER;
    if (r->url_len + n >= sizeof r->path) {
        x->status = 414;
        return HPE_USER;
    }
    memcpy(r->path + r->url_len, at, n);
    r->url_len += n;
    r->path[r->url_len] = '\0';
    return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t n) {
    srv_parse *x = p->data;
    srv_req *r = x->r;
    if (srv_head(x, n + (x->last_was_value ? 4 : 0))) return HPE_USER;
    if (x->last_was_value) { /* a new header */
        r->hfield_len = 0;
        r->in_auth = 0;
        x->last_was_value = 0;
    }
    const size_t room = sizeof r->hfield - 1 - r->hfield_len;
    const size_t k = n < room ? n : room; /* a long name is no header this server reads */
    memcpy(r->hfield + r->hfield_len, at, k);
    r->hfield_len += k;
    r->hfield[r->hfield_len] = '\0';
    return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t n) {
    srv_parse *x = p->data;
    srv_req *r = x->r;
    if (srv_head(x, n)) return HPE_USER;
    if (!x->last_was_value) {
        x->last_was_value = 1;
        r->in_auth = strcasecmp(r->hfield, "authorization") == 0;
        if (r->in_auth) r->auth[0] = '\0';
    }
    if (r->in_auth) {
        const size_t have = strlen(r->auth);
        if (have + n >= sizeof r->auth) { /* no key is that long: an empty one fails the check */
            r->auth[0] = '\0';
            r->in_auth = 0;
        } else {
            memcpy(r->auth + have, at, n);
            r->auth[have + n] = '\0';
        }
    }
    return 0;
}

static int on_headers_complete(llhttp_t *p) {
    srv_parse *x = p->data;
    srv_req *r = x->r;
    x->headers_done = 1;
    snprintf(r->method, sizeof r->method, "%s", llhttp_method_name((llhttp_method_t)p->method));
    r->keep_alive = llhttp_should_keep_alive(p);
    if ((p->flags & F_CONTENT_LENGTH) && p->content_length > (uint64_t)x->lim->max_body) {
        x->status = 413;
        return HPE_USER;
    }
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
    srv_parse *x = p->data;
    srv_req *r = x->r;
    if ((int64_t)(r->body_len + n) > x->lim->max_body) {
        x->status = 413;
        return HPE_USER;
    }
    char *b = realloc(r->body, r->body_len + n + 1);
    if (!b) {
        x->status = 500;
        return HPE_USER;
    }
    r->body = b;
    memcpy(r->body + r->body_len, at, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return 0;
}

static int on_message_complete(llhttp_t *p) {
    (void)p;
    return HPE_PAUSED; /* one request a call; what follows stays for the next */
}

/* ---- reading -------------------------------------------------------------------------------- */

/* Feeds n bytes; 1 when the request is complete (the rest kept in r->buf), 0 for more, or an
 * HTTP status. header_bytes counts what was fed before the headers ended. */
static int srv_feed(llhttp_t *p, srv_parse *x, const char *data, size_t n, int64_t *header_bytes) {
    srv_req *r = x->r;
    const llhttp_errno_t e = llhttp_execute(p, data, n);
    if (!x->headers_done) {
        *header_bytes += (int64_t)n;
        if (*header_bytes > x->lim->max_header) return 431;
    }
    if (e == HPE_PAUSED) {
        const char *pos = llhttp_get_error_pos(p);
        const size_t used = pos && pos >= data && pos <= data + n ? (size_t)(pos - data) : n;
        const size_t rest = n - used;
        char *keep = rest ? malloc(rest) : NULL;
        if (rest && !keep) return 500;
        if (rest) memcpy(keep, data + used, rest);
        free(r->buf);
        r->buf = keep;
        r->buf_len = rest;
        return 1;
    }
    if (e != HPE_OK) return x->status ? x->status : 400;
    return 0;
}

int srv_read_request(int fd, const srv_limits *lim, srv_req *r) {
    srv_req_free(r);
    r->method[0] = r->path[0] = r->auth[0] = r->hfield[0] = '\0';
    r->url_len = r->hfield_len = 0;
    r->in_auth = r->keep_alive = r->too_long = 0;
    llhttp_settings_t set;
    llhttp_settings_init(&set);
    set.on_url = on_url;
    set.on_header_field = on_header_field;
    set.on_header_value = on_header_value;
    set.on_headers_complete = on_headers_complete;
    set.on_body = on_body;
    set.on_message_complete = on_message_complete;
    llhttp_t p;
    llhttp_init(&p, HTTP_REQUEST, &set);
    srv_parse x = {r, lim, 1, 0, 0, 0};
    p.data = &x;
    int64_t header_bytes = 0;
    int got = 0, st = 0;
    if (r->buf_len) { /* a pipelined request's first bytes */
        char *b = r->buf;
        const size_t n = r->buf_len;
        r->buf = NULL;
        r->buf_len = 0;
        got = 1;
        st = srv_feed(&p, &x, b, n, &header_bytes);
        free(b);
    }
    const double t0 = srv_now();
    char chunk[16384];
    while (st == 0) {
        /* before the first byte the idle limit, after it the request's */
        const double limit = got ? lim->request_timeout_s : lim->idle_timeout_s;
        const int left_ms = (int)((t0 + limit - srv_now()) * 1000.0);
        if (left_ms <= 0) return got ? 408 : SRV_CLOSED;
        struct pollfd pf = {fd, POLLIN, 0};
        const int pr = poll(&pf, 1, left_ms);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) return got ? 408 : SRV_CLOSED;
        const ssize_t k = recv(fd, chunk, sizeof chunk, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return got ? 400 : SRV_CLOSED;
        got = 1;
        st = srv_feed(&p, &x, chunk, (size_t)k, &header_bytes);
    }
    if (st != 1) return st;
    char *q = strchr(r->path, '?');
    if (q) *q = '\0';
    return 0;
}

void srv_req_free(srv_req *r) {
    free(r->body);
    r->body = NULL;
    r->body_len = 0;
}

void srv_req_free_all(srv_req *r) {
    srv_req_free(r);
    free(r->buf);
    r->buf = NULL;
    r->buf_len = 0;
}

/* ---- writing -------------------------------------------------------------------------------- */

static int srv_write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        const ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

const char *srv_status_text(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

int srv_send(int fd, int status, const char *type, const char *body, size_t len, const char *extra,
             int keep_alive) {
    char head[1024];
    const int h = snprintf(head, sizeof head,
                           "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: %s\r\n%s\r\n",
                           status, srv_status_text(status), type, len, keep_alive ? "keep-alive" : "close",
                           extra ? extra : "");
    if (h < 0 || (size_t)h >= sizeof head) return -1;
    if (srv_write_all(fd, head, (size_t)h) != 0) return -1;
    return len ? srv_write_all(fd, body, len) : 0;
}

int srv_send_error(int fd, int status, const char *message, int keep_alive) {
    const char *type = status == 401 ? "authentication_error" : status >= 500 ? "server_error"
                                                                              : "invalid_request_error";
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    char *out = NULL;
    size_t len = 0;
    if (d) {
        yyjson_mut_val *root = yyjson_mut_obj(d), *e = yyjson_mut_obj(d);
        yyjson_mut_doc_set_root(d, root);
        yyjson_mut_obj_add_strcpy(d, e, "message", message);
        yyjson_mut_obj_add_strcpy(d, e, "type", type);
        yyjson_mut_obj_add_null(d, e, "param");
        yyjson_mut_obj_add_int(d, e, "code", status);
        yyjson_mut_obj_add_val(d, root, "error", e);
        out = yyjson_mut_write(d, 0, &len);
        yyjson_mut_doc_free(d);
    }
    const char *extra = status == 401 ? "WWW-Authenticate: Bearer\r\n" : status == 503 ? "Retry-After: 1\r\n" : NULL;
    const int rc = out ? srv_send(fd, status, "application/json", out, len, extra, keep_alive)
                       : srv_send(fd, 500, "text/plain", "out of memory", 13, NULL, 0);
    free(out);
    return rc;
}

int srv_sse_begin(int fd) {
    static const char h[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                            "Connection: close\r\n\r\n";
    return srv_write_all(fd, h, sizeof h - 1);
}

int srv_sse_event(int fd, const char *data, size_t len) {
    if (srv_write_all(fd, "data: ", 6) != 0 || srv_write_all(fd, data, len) != 0) return -1;
    return srv_write_all(fd, "\n\n", 2);
}
