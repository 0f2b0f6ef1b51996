/* fuzz_http.c - libFuzzer harness of the server's request reader (c/server/http.c): the input is
 * written into one end of a socket pair, which is then shut for writing, and srv_read_request
 * reads requests from the other end until the stream ends or a request is refused, touching
 * every byte of each request's method, path, key and body, so ASan sees what the reader hands
 * out. Small limits (1 KiB of headers, 4 KiB of body) put the limit paths in reach.
 *
 *   make fuzz                                   clang -fsanitize=fuzzer,address,undefined
 *   ./build/fuzz_http DIR -runs=1000000 -max_len=8192
 *
 * Built with -DSTRATA_FUZZ_STANDALONE (any C compiler, no libFuzzer), main() runs the harness
 * once over each file named on the command line. See docs/FUZZING.md. */
#include "http.h"
#include "fuzz_common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536) return 0; /* within a socket pair's buffer: the write never blocks */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
    const int big = 1 << 18;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    size_t off = 0;
    while (off < size) {
        const ssize_t k = write(sv[0], data + off, size - off);
        if (k <= 0) break;
        off += (size_t)k;
    }
    shutdown(sv[0], SHUT_WR);
    const srv_limits lim = {1024, 4096, 5, 5};
    srv_req r;
    memset(&r, 0, sizeof r);
    for (int n = 0; n < 64; n++) {
        const int st = srv_read_request(sv[1], &lim, &r);
        if (st != 0) break;
        fz_touch(r.method, strlen(r.method));
        fz_touch(r.path, strlen(r.path));
        fz_touch(r.auth, strlen(r.auth));
        if (r.body) fz_touch(r.body, r.body_len + 1); /* its NUL too */
    }
    srv_req_free_all(&r);
    close(sv[0]);
    close(sv[1]);
    return 0;
}

#if defined(STRATA_FUZZ_STANDALONE)
int main(int argc, char **argv) { return fz_replay("fuzz_http", 65536, argc, argv); }
#endif
