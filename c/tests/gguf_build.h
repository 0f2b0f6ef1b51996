/* gguf_build.h - a tiny in-memory GGUF byte builder for the tests and the fuzz seed generator:
 * append little-endian scalars, strings, key/value headers, tensor infos and padding, so each test
 * writes its file byte by byte, hostile ones included. Header-only; independent of the reader.
 * Allocation failure aborts (tests only). */
#ifndef STRATA_GGUF_BUILD_H
#define STRATA_GGUF_BUILD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gb_buf {
    uint8_t *p;
    size_t len, cap;
} gb_buf;

static inline void gb_free(gb_buf *b) { free(b->p); b->p = NULL; b->len = b->cap = 0; }

static inline void gb_bytes(gb_buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) { fprintf(stderr, "gguf_build: out of memory\n"); abort(); }
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
}

static inline void gb_uint(gb_buf *b, uint64_t v, int nbytes) { /* little-endian */
    uint8_t t[8];
    for (int i = 0; i < nbytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    gb_bytes(b, t, (size_t)nbytes);
}
static inline void gb_u8(gb_buf *b, uint8_t v) { gb_uint(b, v, 1); }
static inline void gb_u16(gb_buf *b, uint16_t v) { gb_uint(b, v, 2); }
static inline void gb_u32(gb_buf *b, uint32_t v) { gb_uint(b, v, 4); }
static inline void gb_u64(gb_buf *b, uint64_t v) { gb_uint(b, v, 8); }
static inline void gb_f32(gb_buf *b, float f) { uint32_t u; memcpy(&u, &f, 4); gb_u32(b, u); }
static inline void gb_f64(gb_buf *b, double f) { uint64_t u; memcpy(&u, &f, 8); gb_u64(b, u); }
static inline void gb_zeros(gb_buf *b, size_t n) { for (size_t i = 0; i < n; i++) gb_u8(b, 0); }

/* Overwrites n bytes at offset off with v, little-endian. */
static inline void gb_patch(gb_buf *b, size_t off, uint64_t v, int nbytes) {
    for (int i = 0; i < nbytes; i++) b->p[off + (size_t)i] = (uint8_t)(v >> (8 * i));
}

/* GGUF string: u64 length + bytes. */
static inline void gb_strn(gb_buf *b, const char *s, size_t n) { gb_u64(b, n); gb_bytes(b, s, n); }
static inline void gb_str(gb_buf *b, const char *s) { gb_strn(b, s, strlen(s)); }

/* "GGUF", version, n_tensors, n_kv. */
static inline void gb_header(gb_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

/* Key + value type; the caller appends the value. */
static inline void gb_kv(gb_buf *b, const char *key, uint32_t type) { gb_str(b, key); gb_u32(b, type); }

/* Common complete pairs (value type ids as in strata_gguf_type). */
static inline void gb_kv_u32(gb_buf *b, const char *k, uint32_t v) { gb_kv(b, k, 4); gb_u32(b, v); }
static inline void gb_kv_u64(gb_buf *b, const char *k, uint64_t v) { gb_kv(b, k, 10); gb_u64(b, v); }
static inline void gb_kv_u16(gb_buf *b, const char *k, uint16_t v) { gb_kv(b, k, 2); gb_u16(b, v); }
static inline void gb_kv_i32(gb_buf *b, const char *k, int32_t v) { gb_kv(b, k, 5); gb_u32(b, (uint32_t)v); }
static inline void gb_kv_f32(gb_buf *b, const char *k, float v) { gb_kv(b, k, 6); gb_f32(b, v); }
static inline void gb_kv_str(gb_buf *b, const char *k, const char *v) { gb_kv(b, k, 8); gb_str(b, v); }
/* Array header: element type + count; the caller appends the elements. */
static inline void gb_arr(gb_buf *b, uint32_t elem_type, uint64_t count) { gb_u32(b, elem_type); gb_u64(b, count); }

/* Tensor info: name, n_dims, ne[0..n_dims), type, offset. */
static inline void gb_tensor(gb_buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                             uint32_t type, uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

/* Zero bytes up to the next multiple of align. */
static inline void gb_pad(gb_buf *b, size_t align) {
    while (b->len % align) gb_u8(b, 0);
}

/* Writes the buffer to path; 0 on success. */
static inline int gb_write_file(const gb_buf *b, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = b->len ? fwrite(b->p, 1, b->len, f) : 0;
    return (fclose(f) == 0 && w == b->len) ? 0 : -1;
}

#endif /* STRATA_GGUF_BUILD_H */
