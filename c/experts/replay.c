/* replay.c - a recorded routing replayed in place of the router's (replay.h): the file read and
 * checked, and each call's rows filled from it. */
#include "replay.h"
#include "common.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_REPLAY_MAX_BYTES ((int64_t)1 << 31) /* 2 GiB of text */

static int st_replay_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* The next integer of the NUL-terminated text at *p (leading whitespace skipped) into *v, within
 * [lo, hi]; 0 when there is none or it is out of range. */
static int st_replay_int(const char **p, long long lo, long long hi, long long *v) {
    const char *c = *p;
    while (st_replay_space(*c)) c++;
    if (!*c) return 0;
    char *end = NULL;
    errno = 0;
    const long long x = strtoll(c, &end, 10);
    if (end == c || errno == ERANGE || x < lo || x > hi) return 0;
    if (*end && !st_replay_space(*end)) return 0;
    *v = x;
    *p = end;
    return 1;
}

/* The whole file, NUL-terminated (malloc'd), or NULL with the reason recorded in *st. */
static char *st_replay_read(const char *path, strata_status *st) {
    FILE *f = fopen(path, "rb");
    *st = STRATA_ERR_IO;
    if (!f) {
        st_error(STRATA_ERR_IO, "route replay %s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n < 0 || n >= ST_REPLAY_MAX_BYTES || fseek(f, 0, SEEK_SET) != 0) {
        st_error(STRATA_ERR_IO, "route replay %s: cannot size it (or it is over 2 GiB)", path);
    } else if (!(buf = malloc((size_t)n + 1))) {
        *st = st_error(STRATA_ERR_NOMEM, "route replay %s: out of memory for %ld bytes", path, n);
    } else if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        st_error(STRATA_ERR_IO, "route replay %s: short read", path);
        free(buf);
        buf = NULL;
    } else {
        buf[n] = '\0';
        if (memchr(buf, '\0', (size_t)n)) {
            *st = st_error(STRATA_ERR_FORMAT, "route replay %s: a NUL byte in the text", path);
            free(buf);
            buf = NULL;
        } else {
            *st = STRATA_OK;
        }
    }
    fclose(f);
    return buf;
}

strata_status st_replay_load(const char *path, int32_t model_experts, int32_t model_k, st_replay **out) {
    *out = NULL;
    if (!path) return st_error(STRATA_ERR_INVALID_ARG, "route replay: no path");
    strata_status st = STRATA_OK;
    char *text = st_replay_read(path, &st);
    if (!text) return st;
    static const char magic[] = "strata-route-replay";
    const int magic_ok = strncmp(text, magic, sizeof magic - 1) == 0;
    const char *p = text + (magic_ok ? sizeof magic - 1 : 0);
    long long ver = 0, L = 0, X = 0, K = 0, S = 0;
    if (!magic_ok || !st_replay_int(&p, 1, 1, &ver) || !st_replay_int(&p, 1, 4096, &L) ||
        !st_replay_int(&p, 1, 65536, &X) || !st_replay_int(&p, 1, 64, &K) || !st_replay_int(&p, 1, 100000000, &S))
        st = st_error(STRATA_ERR_FORMAT, "route replay %s: not a route replay file (its first line is "
                      "\"strata-route-replay 1 N_LAYER N_EXPERT K N_STEPS\"; bench/routing_stats.py "
                      "--replay-out writes one)", path);
    else if (K != model_k || X > model_experts)
        st = st_error(STRATA_ERR_INVALID_ARG, "route replay %s: the trace routes top-%lld of %lld experts; the "
                      "model top-%d of %d (k must match, the trace's experts must be the model's)", path, K, X,
                      (int)model_k, (int)model_experts);
    else if ((unsigned long long)S * (unsigned long long)L * (unsigned long long)K > (1ULL << 31))
        st = st_error(STRATA_ERR_FORMAT, "route replay %s: %lld steps of %lld layers x %lld is too many", path,
                      S, L, K);
    st_replay *r = st == STRATA_OK ? calloc(1, sizeof *r) : NULL;
    const int64_t n = S * L * K;
    if (st == STRATA_OK && (!r || !(r->ids = malloc(sizeof(int32_t) * (size_t)n))))
        st = st_error(STRATA_ERR_NOMEM, "route replay %s: out of memory for %lld ids", path, (long long)n);
    for (int64_t i = 0; i < n && st == STRATA_OK; i++) {
        long long v = 0;
        if (!st_replay_int(&p, -1, X - 1, &v))
            st = st_error(STRATA_ERR_FORMAT, "route replay %s: id %lld of %lld missing or outside -1..%lld", path,
                          (long long)i, (long long)n, X - 1);
        else
            r->ids[i] = (int32_t)v;
    }
    while (st == STRATA_OK && st_replay_space(*p)) p++;
    if (st == STRATA_OK && *p)
        st = st_error(STRATA_ERR_FORMAT, "route replay %s: more than the %lld ids its header says", path,
                      (long long)n);
    free(text);
    if (st != STRATA_OK) {
        st_replay_free(r);
        return st;
    }
    r->n_layer = (int32_t)L;
    r->n_expert = (int32_t)X;
    r->k = (int32_t)K;
    r->n_steps = S;
    *out = r;
    return STRATA_OK;
}

void st_replay_free(st_replay *r) {
    if (!r) return;
    free(r->ids);
    free(r);
}

void st_replay_rows(const st_replay *r, int il, int64_t pos0, int64_t T, int32_t *ids, float *wts) {
    const int32_t K = r->k;
    const int32_t *layer = r->ids + (size_t)(il % r->n_layer) * (size_t)K;
    for (int64_t t = 0; t < T; t++) {
        const int32_t *src = layer + (size_t)((pos0 + t) % r->n_steps) * (size_t)r->n_layer * (size_t)K;
        int32_t valid = 0;
        for (int32_t j = 0; j < K; j++) valid += src[j] >= 0;
        for (int32_t j = 0; j < K; j++) {
            ids[t * K + j] = src[j];
            wts[t * K + j] = src[j] >= 0 ? 1.0f / (float)(valid ? valid : 1) : 0.0f;
        }
    }
}
