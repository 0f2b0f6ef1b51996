/* test_http.c - the server's request reader (c/server/http.c, llhttp underneath) on crafted
 * byte streams through a socket pair: a GET, a POST's body, two pipelined requests, a chunked
 * body, keep-alive by version and header, the Authorization header (and one too long to be a
 * key), the query string cut, and each refusal: 400 for garbage, a request cut short and
 * conflicting Content-Length / Transfer-Encoding, 413 for a body past the limit (announced or
 * streamed), 414 for a long target, 431 for long headers, nothing to answer for an empty
 * connection; then the same reader under the fuzz harness's inputs (c/fuzz/fuzz_http.c). */
#include "http.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const srv_limits LIM = {1024, 4096, 2, 2};

/* Reads requests from s (written whole, then shut) until the stream ends; the statuses in st[],
 * the last request kept in *last (the caller frees it). Returns how many calls were made. */
static int read_all(const char *s, size_t n, int *st, int max, srv_req *last) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
    if (write(sv[0], s, n) != (ssize_t)n) return 0;
    shutdown(sv[0], SHUT_WR);
    memset(last, 0, sizeof *last);
    int k = 0;
    while (k < max) {
        st[k] = srv_read_request(sv[1], &LIM, last);
        if (st[k++] != 0) break;
    }
    close(sv[0]);
    close(sv[1]);
    return k;
}

static int one(const char *s, srv_req *r) {
    int st[4] = {SRV_CLOSED, SRV_CLOSED, SRV_CLOSED, SRV_CLOSED};
    read_all(s, strlen(s), st, 1, r);
    return st[0];
}

static void test_accepted(void) {
    srv_req r;
    CHECK(one("GET /health?x=1 HTTP/1.1\r\nHost: a\r\n\r\n", &r) == 0 && !strcmp(r.method, "GET") &&
          !strcmp(r.path, "/health") && r.keep_alive && !r.body, "a GET: method, path without its query, keep-alive");
    srv_req_free_all(&r);
    CHECK(one("GET / HTTP/1.0\r\n\r\n", &r) == 0 && !r.keep_alive, "HTTP/1.0: not kept alive");
    srv_req_free_all(&r);
    CHECK(one("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", &r) == 0 && !r.keep_alive, "Connection: close");
    srv_req_free_all(&r);
    CHECK(one("POST /v1/completions HTTP/1.1\r\nContent-Length: 11\r\nAuthorization: Bearer k1\r\n\r\n{\"a\": true}",
              &r) == 0 && r.body_len == 11 && !strcmp(r.body, "{\"a\": true}") && !strcmp(r.auth, "Bearer k1"),
          "a POST: its body (NUL-terminated) and key");
    srv_req_free_all(&r);
    CHECK(one("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", &r) == 0 &&
          r.body_len == 5 && !strcmp(r.body, "abcde"), "a chunked body");
    srv_req_free_all(&r);
    char longauth[700] = "GET / HTTP/1.1\r\nAuthorization: Bearer ";
    memset(longauth + strlen(longauth), 'k', 600);
    strcpy(longauth + strlen(longauth), "\r\n\r\n");
    CHECK(one(longauth, &r) == 0 && r.auth[0] == '\0', "an Authorization value too long for a key: empty");
    srv_req_free_all(&r);
    /* two pipelined requests in one write: both read, in order */
    const char *two = "POST /a HTTP/1.1\r\nContent-Length: 2\r\n\r\nhiGET /b HTTP/1.1\r\n\r\n";
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    CHECK(write(sv[0], two, strlen(two)) == (ssize_t)strlen(two), "write");
    shutdown(sv[0], SHUT_WR);
    memset(&r, 0, sizeof r);
    const int a = srv_read_request(sv[1], &LIM, &r);
    const int body_ok = a == 0 && !strcmp(r.path, "/a") && r.body && !strcmp(r.body, "hi");
    const int b = srv_read_request(sv[1], &LIM, &r);
    const int second_ok = b == 0 && !strcmp(r.path, "/b") && !r.body;
    const int c = srv_read_request(sv[1], &LIM, &r);
    CHECK(body_ok && second_ok && c == SRV_CLOSED, "two pipelined requests, then the end");
    srv_req_free_all(&r);
    close(sv[0]);
    close(sv[1]);
}

static void test_refused(void) {
    srv_req r;
    CHECK(one("GARBAGE\r\n\r\n", &r) == 400, "garbage: 400");
    srv_req_free_all(&r);
    CHECK(one("GET / HTTP/1.1\r\nHost: a\r\n", &r) == 400, "cut short: 400");
    srv_req_free_all(&r);
    CHECK(one("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", &r) == 400,
          "Content-Length with Transfer-Encoding: 400 (no smuggling)");
    srv_req_free_all(&r);
    CHECK(one("POST / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n", &r) == 413, "an announced body past the limit: 413");
    srv_req_free_all(&r);
    char *chunks = malloc(8000);
    strcpy(chunks, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 5; i++) {
        strcat(chunks, "3e8\r\n");
        const size_t at = strlen(chunks);
        memset(chunks + at, 'x', 1000);
        strcpy(chunks + at + 1000, "\r\n");
    }
    CHECK(one(chunks, &r) == 413, "a streamed body past the limit: 413");
    srv_req_free_all(&r);
    free(chunks);
    char url[1200] = "GET /";
    memset(url + 5, 'u', 1000);
    strcpy(url + 1005, " HTTP/1.1\r\n\r\n");
    const int su = one(url, &r);
    CHECK(su == 414 || su == 431, "a long target: %d (414, or 431 past the header limit)", su);
    srv_req_free_all(&r);
    char hdr[1600] = "GET / HTTP/1.1\r\nX-Big: ";
    memset(hdr + strlen(hdr), 'h', 1200);
    strcpy(hdr + strlen(hdr), "\r\n\r\n");
    CHECK(one(hdr, &r) == 431, "headers past the limit: 431");
    srv_req_free_all(&r);
    CHECK(one("", &r) == SRV_CLOSED, "an empty connection: nothing to answer");
    srv_req_free_all(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void test_fuzz_inputs(void) {
    static const char *const in[] = {
        "GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
        "GET / HTTP/1.1\r\n\x00\x01\x02: \xff\r\n\r\n",
        "\r\n\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        LLVMFuzzerTestOneInput((const uint8_t *)in[i], strlen(in[i]));
    CHECK(1, "the fuzz harness's crafted inputs ran (ASan / UBSan watch them)");
}

int main(void) {
    test_accepted();
    test_refused();
    test_fuzz_inputs();
    return test_report();
}
