/* test_expert_stream.c - the O_DIRECT expert reader (c/experts/stream.c): random ranges of a
 * file of random bytes (unaligned offsets, lengths and destinations through the bounce buffers;
 * fully aligned ones straight into the destination; ranges over many chunks; the file's last
 * byte) read back exactly, with O_DIRECT (where the filesystem takes it) and buffered, at queue
 * depths 1 and 4; ranges past the end and bad arguments refused with their status. */
#include "stream.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILE_BYTES ((size_t)9 * 1024 * 1024 + 123)

static void check_reads(const char *path, const uint8_t *data, int direct, int qd, size_t chunk) {
    st_reader *r = NULL;
    strata_status st = st_reader_open(path, direct, qd, chunk, &r);
    CHECK(st == STRATA_OK, "open (direct %d, qd %d): %s", direct, qd, strata_last_error());
    if (!r) return;
    CHECK(st_reader_file_bytes(r) == FILE_BYTES, "file size");
    if (direct) printf("O_DIRECT %s here\n", st_reader_direct(r) ? "accepted" : "refused: buffered fallback");
    test_rng g = {(unsigned long long)(qd * 131 + direct)};
    int ok = 1;
    for (int it = 0; it < 60; it++) {
        st_read_range rg[3];
        uint8_t *bufs[3];
        int n = 1 + (int)(test_rng_next(&g) % 3);
        for (int i = 0; i < n; i++) {
            size_t len, off;
            const int kind = (int)(test_rng_next(&g) % 4);
            if (kind == 0) { /* aligned offset, length and destination: straight in */
                len = ST_READER_ALIGN * (1 + (size_t)(test_rng_next(&g) % 300));
                off = ST_READER_ALIGN * (size_t)(test_rng_next(&g) % ((FILE_BYTES - len) / ST_READER_ALIGN));
            } else if (kind == 1) { /* to the last byte of the file */
                len = 1 + (size_t)(test_rng_next(&g) % 200000);
                off = FILE_BYTES - len;
            } else {
                len = 1 + (size_t)(test_rng_next(&g) % (kind == 2 ? 5000 : 3000000));
                off = (size_t)(test_rng_next(&g) % (FILE_BYTES - len + 1));
            }
            if (posix_memalign((void **)&bufs[i], ST_READER_ALIGN, len + 64) != 0) { n = i; break; }
            const size_t shift = kind == 0 ? 0 : (size_t)(test_rng_next(&g) % 64);
            memset(bufs[i], 0xAB, len + 64);
            rg[i].offset = off;
            rg[i].bytes = len;
            rg[i].dst = bufs[i] + shift;
        }
        st = st_reader_read(r, rg, n);
        ok &= st == STRATA_OK;
        for (int i = 0; i < n; i++) {
            ok &= memcmp(rg[i].dst, data + rg[i].offset, rg[i].bytes) == 0;
            const uint8_t *after = (const uint8_t *)rg[i].dst + rg[i].bytes;
            ok &= after >= bufs[i] + rg[i].bytes + 64 || *after == 0xAB; /* nothing written past */
            free(bufs[i]);
        }
    }
    CHECK(ok, "60 multi-range reads equal the file (direct %d, qd %d, chunk %zu): %s", direct, qd,
          chunk, strata_last_error());
    uint64_t bytes = 0;
    double secs = 0;
    st_reader_totals(r, &bytes, &secs);
    CHECK(bytes > 0 && secs > 0, "totals counted");
    /* past the end, and a NULL destination */
    static uint8_t small[64];
    st_read_range past = {FILE_BYTES - 10, 11, small};
    CHECK(st_reader_read(r, &past, 1) == STRATA_ERR_RANGE, "a range past the end: RANGE");
    st_read_range huge = {UINT64_MAX - 4, 16, past.dst};
    CHECK(st_reader_read(r, &huge, 1) == STRATA_ERR_RANGE, "an overflowing range: RANGE");
    st_read_range none = {0, 16, NULL};
    CHECK(st_reader_read(r, &none, 1) == STRATA_ERR_INVALID_ARG, "no destination: INVALID_ARG");
    CHECK(st_reader_read(r, NULL, 0) == STRATA_OK, "no ranges: nothing to do");
    st_reader_close(r);
}

int main(void) {
    char path[64];
    snprintf(path, sizeof path, "strata_stream_test_%d.bin", (int)getpid());
    uint8_t *data = malloc(FILE_BYTES);
    test_rng g = {99};
    for (size_t i = 0; i < FILE_BYTES; i++) data[i] = (uint8_t)(test_rng_next(&g) >> 29);
    FILE *f = fopen(path, "wb");
    int wrote = f && fwrite(data, 1, FILE_BYTES, f) == FILE_BYTES;
    if (f) fclose(f);
    CHECK(wrote, "write the test file %s", path);
    if (wrote) {
        check_reads(path, data, 1, 1, 0);
        check_reads(path, data, 1, 4, 64 * 1024);
        check_reads(path, data, 0, 4, 64 * 1024);
        check_reads(path, data, 0, 2, 0);
    }
    unlink(path);
    st_reader *r = NULL;
    CHECK(st_reader_open("/nonexistent/strata.gguf", 1, 2, 0, &r) == STRATA_ERR_IO && !r,
          "missing file: IO");
    CHECK(strstr(strata_last_error(), "/nonexistent/strata.gguf") != NULL, "the message names the file");
    CHECK(st_reader_open(path, 1, 0, 0, &r) == STRATA_ERR_INVALID_ARG, "queue depth 0 refused");
    CHECK(st_reader_open(path, 1, 2, 1000, &r) == STRATA_ERR_INVALID_ARG, "unaligned chunk refused");
    free(data);
    return test_report();
}
