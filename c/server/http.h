/* http.h - one HTTP/1.1 request read from a socket and the responses written to it, for the
 * server (server.h). Parsing is llhttp's (third_party/llhttp); this file owns the limits (header
 * bytes, body bytes, the time a request may take to arrive, idle keep-alive time) and the
 * answers in OpenAI's error format. Writes go whole or report the peer gone (MSG_NOSIGNAL).
 *
 *   srv_req r;
 *   int st = srv_read_request(fd, &lim, &r);   // 0: a request; else an HTTP status to answer,
 *   ...                                        // or SRV_CLOSED (the peer left: say nothing)
 *   srv_req_free(&r);
 */
#ifndef STRATA_SERVER_HTTP_H
#define STRATA_SERVER_HTTP_H

#include <stddef.h>
#include <stdint.h>

#define SRV_CLOSED (-1) /* the connection ended before a request began (or idled out) */

typedef struct {
    int64_t max_header;      /* bytes of the request line and headers (default 64 KiB) */
    int64_t max_body;        /* bytes of the body (default 64 MiB) */
    int request_timeout_s;   /* a request must arrive whole within this (default 30) */
    int idle_timeout_s;      /* a kept-alive connection may wait this long for the next (default 60) */
} srv_limits;

typedef struct {
    char method[16];         /* "GET", "POST", ... */
    char path[512];          /* the target without its query string */
    char *body;              /* NUL-terminated (body_len bytes before the NUL); NULL: none */
    size_t body_len;
    char auth[512];          /* the Authorization header's value ("" when absent or too long) */
    int keep_alive;          /* the client may send another request on this connection */
    /* parser state (http.c) */
    char *buf;               /* bytes read past this request (pipelined), kept for the next */
    size_t buf_len;
    char hfield[64];         /* the header being read */
    size_t hfield_len;
    int in_auth;
    size_t url_len;
    int too_long;            /* a field past its buffer, or the body past max_body */
} srv_req;

/* Reads one request from fd within lim. 0: r holds it; SRV_CLOSED: nothing to answer; else the
 * HTTP status to answer with (400 malformed, 408 too slow, 413 body too large, 431 headers too
 * large), the connection to be closed after. r's leftover bytes carry over to the next call. */
int srv_read_request(int fd, const srv_limits *lim, srv_req *r);
/* Frees the body (keeps the leftover bytes for the next request); srv_req_free_all at close. */
void srv_req_free(srv_req *r);
void srv_req_free_all(srv_req *r);

/* A whole response: status, content type, body; extra (may be NULL) more header lines ending in
 * "\r\n". 0 sent, -1 the peer is gone. */
int srv_send(int fd, int status, const char *type, const char *body, size_t len, const char *extra,
             int keep_alive);
/* An error in OpenAI's format: {"error": {"message", "type", "param": null, "code"}}. */
int srv_send_error(int fd, int status, const char *message, int keep_alive);
/* Server-sent events: the headers of a stream, then each event ("data: ...\n\n"). */
int srv_sse_begin(int fd);
int srv_sse_event(int fd, const char *data, size_t len);
/* Monotonic seconds (the server's one clock). */
double srv_now(void);
/* The reason phrase of status. */
const char *srv_status_text(int status);

#endif /* STRATA_SERVER_HTTP_H */
