/* stream.c - the O_DIRECT expert reader (stream.h): ranges split into aligned chunks, read by the
 * threads of a st_threadpool (one bounce buffer each), with the buffered fallback. */
#include "stream.h"
#include "common.h"
#include "threadpool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct st_reader {
    char *path;
    int fd;
    int direct;
    uint64_t size;
    size_t chunk;
    int n_threads;
    st_threadpool *tp;
    uint8_t **bounce;          /* [n_threads] chunk + ST_READER_ALIGN bytes, aligned */
    uint64_t bytes_read;
    double seconds;
};

/* One piece of one range: file bytes [off, off + len) into dst. */
typedef struct {
    uint64_t off;
    size_t len;
    uint8_t *dst;
} st_piece;

typedef struct {
    st_reader *r;
    const st_piece *pieces;
    int *err;                  /* [n] errno of a failed piece (EIO for a short read), else 0 */
    uint64_t *bytes;           /* [n] bytes read from the file for the piece */
} st_read_job;

static uint64_t st_align_down(uint64_t x) { return x & ~(uint64_t)(ST_READER_ALIGN - 1); }
static uint64_t st_align_up(uint64_t x) { return (x + ST_READER_ALIGN - 1) & ~(uint64_t)(ST_READER_ALIGN - 1); }

/* pread until n bytes or end of file; returns bytes read or -1 (errno set). */
static ssize_t st_pread_full(int fd, void *buf, size_t n, uint64_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (uint8_t *)buf + got, n - got, (off_t)(off + got));
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (k == 0) break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

static void st_read_piece(void *ctx, int64_t b, int64_t e, int tid) {
    st_read_job *j = ctx;
    st_reader *r = j->r;
    for (int64_t i = b; i < e; i++) {
        const st_piece *p = &j->pieces[i];
        const uint64_t a0 = st_align_down(p->off), a1 = st_align_up(p->off + p->len);
        const int aligned = a0 == p->off && a1 == p->off + p->len &&
                            ((uintptr_t)p->dst & (ST_READER_ALIGN - 1)) == 0;
        uint8_t *buf = aligned || !r->direct ? p->dst : r->bounce[tid];
        const uint64_t from = aligned || !r->direct ? p->off : a0;
        const size_t want = aligned || !r->direct ? p->len : (size_t)(a1 - a0);
        ssize_t k = st_pread_full(r->fd, buf, want, from);
        if (k < 0) { j->err[i] = errno ? errno : EIO; continue; }
        j->bytes[i] = (uint64_t)k;
        /* the bytes the piece needs must all be there (an aligned read may stop at end of file) */
        if ((uint64_t)k < (p->off + p->len) - from) { j->err[i] = EIO; continue; }
        if (buf != p->dst) memcpy(p->dst, buf + (p->off - a0), p->len);
    }
}

static int st_open_file(const char *path, int direct) {
    int flags = O_RDONLY | O_CLOEXEC;
#ifdef O_DIRECT
    if (direct) flags |= O_DIRECT;
#else
    (void)direct;
#endif
    return open(path, flags);
}

strata_status st_reader_open(const char *path, int direct, int queue_depth, size_t chunk_bytes,
                             st_reader **out) {
    if (!out || !path) return st_error(STRATA_ERR_INVALID_ARG, "st_reader_open: NULL argument");
    *out = NULL;
    if (queue_depth < 1 || queue_depth > 64)
        return st_error(STRATA_ERR_INVALID_ARG, "expert reader: queue depth %d outside 1..64", queue_depth);
    if (chunk_bytes == 0) chunk_bytes = (size_t)4 << 20;
    if (chunk_bytes % ST_READER_ALIGN != 0 || chunk_bytes > ((size_t)1 << 30))
        return st_error(STRATA_ERR_INVALID_ARG, "expert reader: chunk of %zu bytes (a multiple of %u, "
                        "at most 1 GiB)", chunk_bytes, ST_READER_ALIGN);
    st_reader *r = calloc(1, sizeof *r);
    if (!r) return st_error(STRATA_ERR_NOMEM, "expert reader: out of memory");
    r->fd = -1;
    r->chunk = chunk_bytes;
    r->n_threads = queue_depth;
    r->path = strdup(path);
    r->direct = direct != 0;
    if (r->path) {
        r->fd = st_open_file(path, r->direct);
        if (r->fd < 0 && r->direct && errno == EINVAL) { /* the filesystem refuses O_DIRECT */
            r->direct = 0;
            r->fd = st_open_file(path, 0);
        }
    }
    struct stat sb;
    if (!r->path || r->fd < 0 || fstat(r->fd, &sb) != 0) {
        strata_status st = !r->path ? st_error(STRATA_ERR_NOMEM, "expert reader: out of memory")
                                    : st_error(STRATA_ERR_IO, "expert reader: cannot open '%s': %s",
                                               path, strerror(errno));
        st_reader_close(r);
        return st;
    }
    r->size = (uint64_t)sb.st_size;
    r->bounce = calloc((size_t)queue_depth, sizeof *r->bounce);
    strata_status st = r->bounce ? st_threadpool_create(queue_depth, &r->tp)
                                 : st_error(STRATA_ERR_NOMEM, "expert reader: out of memory");
    for (int i = 0; st == STRATA_OK && i < queue_depth; i++)
        if (posix_memalign((void **)&r->bounce[i], ST_READER_ALIGN, chunk_bytes + ST_READER_ALIGN) != 0)
            st = st_error(STRATA_ERR_NOMEM, "expert reader: out of memory for %d buffers of %zu bytes",
                          queue_depth, chunk_bytes);
    if (st != STRATA_OK) {
        st_reader_close(r);
        return st;
    }
    *out = r;
    return STRATA_OK;
}

void st_reader_close(st_reader *r) {
    if (!r) return;
    st_threadpool_free(r->tp);
    if (r->bounce)
        for (int i = 0; i < r->n_threads; i++) free(r->bounce[i]);
    free(r->bounce);
    if (r->fd >= 0) close(r->fd);
    free(r->path);
    free(r);
}

int st_reader_direct(const st_reader *r) { return r ? r->direct : 0; }
uint64_t st_reader_file_bytes(const st_reader *r) { return r ? r->size : 0; }

void st_reader_totals(const st_reader *r, uint64_t *bytes, double *seconds) {
    if (bytes) *bytes = r ? r->bytes_read : 0;
    if (seconds) *seconds = r ? r->seconds : 0;
}

static double st_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Splits the ranges into pieces whose aligned file span is at most one chunk. */
static int64_t st_plan(const st_reader *r, const st_read_range *ranges, int n, st_piece *out) {
    int64_t np = 0;
    for (int i = 0; i < n; i++) {
        uint64_t p = ranges[i].offset;
        const uint64_t end = ranges[i].offset + ranges[i].bytes;
        while (p < end) {
            uint64_t stop = st_align_down(p) + r->chunk;
            if (stop > end) stop = end;
            if (out) {
                out[np].off = p;
                out[np].len = (size_t)(stop - p);
                out[np].dst = (uint8_t *)ranges[i].dst + (p - ranges[i].offset);
            }
            np++;
            p = stop;
        }
    }
    return np;
}

strata_status st_reader_read(st_reader *r, const st_read_range *ranges, int n) {
    if (!r || (n > 0 && !ranges) || n < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "st_reader_read: bad arguments");
    for (int i = 0; i < n; i++) {
        const st_read_range *q = &ranges[i];
        if (q->bytes > 0 && !q->dst)
            return st_error(STRATA_ERR_INVALID_ARG, "st_reader_read: range %d has no destination", i);
        if (q->offset > r->size || q->bytes > r->size - q->offset)
            return st_error(STRATA_ERR_RANGE, "expert reader: '%s' bytes %llu..%llu are past its end "
                            "(%llu bytes)", r->path, (unsigned long long)q->offset,
                            (unsigned long long)(q->offset + q->bytes), (unsigned long long)r->size);
    }
    const int64_t np = st_plan(r, ranges, n, NULL);
    if (np == 0) return STRATA_OK;
    st_piece *pieces = malloc(sizeof *pieces * (size_t)np);
    int *err = calloc((size_t)np, sizeof *err);
    uint64_t *bytes = calloc((size_t)np, sizeof *bytes);
    strata_status st = STRATA_OK;
    if (!pieces || !err || !bytes) {
        st = st_error(STRATA_ERR_NOMEM, "expert reader: out of memory for %lld pieces", (long long)np);
        goto done;
    }
    st_plan(r, ranges, n, pieces);
    const double t0 = st_now();
    st_read_job j = {r, pieces, err, bytes};
    st_threadpool_run(r->tp, np, 1, st_read_piece, &j);
    int64_t bad = -1;
    for (int64_t i = 0; i < np && bad < 0; i++)
        if (err[i]) bad = i;
    if (bad >= 0 && err[bad] == EINVAL && r->direct) {
        /* O_DIRECT accepted at open but refused for reads: reopen buffered and retry once */
        int fd = st_open_file(r->path, 0);
        if (fd >= 0) {
            close(r->fd);
            r->fd = fd;
            r->direct = 0;
            memset(err, 0, sizeof *err * (size_t)np);
            memset(bytes, 0, sizeof *bytes * (size_t)np);
            st_threadpool_run(r->tp, np, 1, st_read_piece, &j);
            bad = -1;
            for (int64_t i = 0; i < np && bad < 0; i++)
                if (err[i]) bad = i;
        }
    }
    r->seconds += st_now() - t0;
    for (int64_t i = 0; i < np; i++) r->bytes_read += bytes[i];
    if (bad >= 0)
        st = st_error(STRATA_ERR_IO, "expert reader: '%s' at offset %llu (%zu bytes): %s", r->path,
                      (unsigned long long)pieces[bad].off, pieces[bad].len,
                      err[bad] == EIO ? "short read or I/O error" : strerror(err[bad]));
done:
    free(pieces);
    free(err);
    free(bytes);
    return st;
}
