/* cursor.h - a bounds-checked little-endian read cursor over an untrusted byte image (the GGUF
 * reader's only way to touch file bytes during validation), plus the little-endian decoders the
 * accessors use on already-validated bytes.
 *
 * Reads never go past base + size: every st_cur_* read first checks the bytes left and returns 0
 * (leaving pos unchanged) when they do not suffice. Callers turn that 0 into a message naming the
 * field and the offset with st_cur_truncated(). Formatting only happens on failure, so reading a
 * 150k-string vocabulary costs no printf. */
#ifndef STRATA_CURSOR_H
#define STRATA_CURSOR_H

#include "common.h"

#include <stdarg.h>
#include <stdio.h>

typedef struct st_cursor {
    const uint8_t *base;  /* first byte of the image */
    uint64_t size;        /* bytes in the image */
    uint64_t pos;         /* next byte to read, 0..size */
} st_cursor;

static inline st_cursor st_cursor_make(const void *base, uint64_t size) {
    st_cursor c = {(const uint8_t *)base, size, 0};
    return c;
}

/* ---- little-endian decoders (no checks: the bytes must exist) ------------------------------- */

static inline uint16_t st_le_u16(const uint8_t *p) {
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}
static inline uint32_t st_le_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t st_le_u64(const uint8_t *p) {
    return (uint64_t)st_le_u32(p) | (uint64_t)st_le_u32(p + 4) << 32;
}

/* ---- checked reads (1 on success, 0 if fewer than the needed bytes are left) ---------------- */

static inline uint64_t st_cur_left(const st_cursor *c) { return c->size - c->pos; }
static inline int st_cur_has(const st_cursor *c, uint64_t n) { return n <= c->size - c->pos; }

static inline int st_cur_skip(st_cursor *c, uint64_t n) {
    if (!st_cur_has(c, n)) return 0;
    c->pos += n;
    return 1;
}
/* *p = pointer to the next n bytes, then skips them. */
static inline int st_cur_bytes(st_cursor *c, uint64_t n, const uint8_t **p) {
    if (!st_cur_has(c, n)) return 0;
    *p = c->base + c->pos;
    c->pos += n;
    return 1;
}
static inline int st_cur_u8(st_cursor *c, uint8_t *v) {
    if (!st_cur_has(c, 1)) return 0;
    *v = c->base[c->pos++];
    return 1;
}
static inline int st_cur_u16(st_cursor *c, uint16_t *v) {
    if (!st_cur_has(c, 2)) return 0;
    *v = st_le_u16(c->base + c->pos);
    c->pos += 2;
    return 1;
}
static inline int st_cur_u32(st_cursor *c, uint32_t *v) {
    if (!st_cur_has(c, 4)) return 0;
    *v = st_le_u32(c->base + c->pos);
    c->pos += 4;
    return 1;
}
static inline int st_cur_u64(st_cursor *c, uint64_t *v) {
    if (!st_cur_has(c, 8)) return 0;
    *v = st_le_u64(c->base + c->pos);
    c->pos += 8;
    return 1;
}

/* ---- failure messages ----------------------------------------------------------------------- */

/* Records "gguf: truncated file: <field> at offset P needs N bytes, M left<suffix>" and returns
 * STRATA_ERR_FORMAT. field is a printf format naming what was being read, e.g.
 * ("tensor %lld '%s' n_dims", i, name); suffix (may be NULL or "") is appended, e.g. the file. */
static inline strata_status st_cur_truncated(const st_cursor *c, uint64_t need, const char *suffix,
                                             const char *field, ...) ST_PRINTF(4, 5);
static inline strata_status st_cur_truncated(const st_cursor *c, uint64_t need, const char *suffix,
                                             const char *field, ...) {
    char what[256];
    va_list ap;
    va_start(ap, field);
    vsnprintf(what, sizeof what, field, ap);
    va_end(ap);
    return st_error(STRATA_ERR_FORMAT,
                    "gguf: truncated file: %s at offset %llu needs %llu bytes, %llu left%s", what,
                    (unsigned long long)c->pos, (unsigned long long)need,
                    (unsigned long long)st_cur_left(c), suffix ? suffix : "");
}

#endif /* STRATA_CURSOR_H */
