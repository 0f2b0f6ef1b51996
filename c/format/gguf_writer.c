/* gguf_writer.c - the internal GGUF v3 writer (see gguf_writer.h): key/value pairs are kept
 * serialized in memory, tensor infos as descriptions; finish lays the file out and streams the
 * tensor data, one tensor at a time. A failed finish removes the partial file. */
#include "gguf_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_GGUF_MAGIC "GGUF"
#define ST_GGUF_VERSION 3u
#define ST_GGUF_DEFAULT_ALIGNMENT 32u
#define ST_GGUF_MAX_NAME 64 /* tensor names are shorter than this (ggml's limit) */
#define ST_GGUF_MAX_DEPTH 8 /* nesting of arrays accepted when copying a value */

/* ---------------------------------------------------------------------------------------------
 * Growable byte buffer
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t len, cap;
    int oom;
} st_buf;

static void buf_put(st_buf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void buf_u32(st_buf *b, uint32_t v) { buf_put(b, &v, 4); }
static void buf_u64(st_buf *b, uint64_t v) { buf_put(b, &v, 8); }
static void buf_str(st_buf *b, const char *s, uint64_t len) {
    buf_u64(b, len);
    buf_put(b, s, (size_t)len);
}

/* ---------------------------------------------------------------------------------------------
 * Writer state
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    char *key;
    st_buf val; /* u32 type, then the payload, as in the file */
} st_kv;

typedef struct {
    char name[ST_GGUF_MAX_NAME];
    strata_type type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t n_bytes;
    uint64_t offset;
    const void *data;
    st_gguf_tensor_fill_fn fill;
    void *ctx;
} st_wtensor;

struct st_gguf_writer {
    char *path;
    uint32_t alignment;
    st_kv *kvs;
    int64_t n_kv, cap_kv;
    st_wtensor *tensors;
    int64_t n_tensors, cap_tensors;
    int finished;    /* finish was called */
    int written;     /* finish succeeded */
};

strata_status st_gguf_writer_create(const char *path, uint32_t alignment, st_gguf_writer **out) {
    if (!out) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: NULL out");
    *out = NULL;
    if (!path || !*path) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: empty path");
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: alignment %u is not a power of two",
                        alignment);
    st_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return st_error(STRATA_ERR_NOMEM, "gguf writer: out of memory");
    w->path = strdup(path);
    if (!w->path) {
        free(w);
        return st_error(STRATA_ERR_NOMEM, "gguf writer: out of memory");
    }
    w->alignment = alignment;
    *out = w;
    return STRATA_OK;
}

void st_gguf_writer_free(st_gguf_writer *w) {
    if (!w) return;
    if (w->finished && !w->written) remove(w->path);
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val.p);
    }
    free(w->kvs);
    free(w->tensors);
    free(w->path);
    free(w);
}

int64_t st_gguf_writer_kv_count(const st_gguf_writer *w) { return w ? w->n_kv : 0; }

static int64_t kv_find(const st_gguf_writer *w, const char *key) {
    for (int64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kvs[i].key, key) == 0) return i;
    return -1;
}

/* Stores (key, val), taking ownership of val's bytes; replaces an existing key in place. */
static strata_status kv_store(st_gguf_writer *w, const char *key, st_buf *val) {
    if (val->oom) {
        free(val->p);
        return st_error(STRATA_ERR_NOMEM, "gguf writer: out of memory for key '%s'", key);
    }
    int64_t i = kv_find(w, key);
    if (i >= 0) {
        free(w->kvs[i].val.p);
        w->kvs[i].val = *val;
        return STRATA_OK;
    }
    if (w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        st_kv *kvs = realloc(w->kvs, (size_t)cap * sizeof *kvs);
        if (!kvs) {
            free(val->p);
            return st_error(STRATA_ERR_NOMEM, "gguf writer: out of memory for key '%s'", key);
        }
        w->kvs = kvs;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(val->p);
        return st_error(STRATA_ERR_NOMEM, "gguf writer: out of memory for key '%s'", key);
    }
    w->kvs[w->n_kv].key = k;
    w->kvs[w->n_kv].val = *val;
    w->n_kv++;
    return STRATA_OK;
}

static strata_status check_key(const st_gguf_writer *w, const char *key) {
    if (!w || !key) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: NULL argument");
    if (!*key) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: empty key");
    if (w->finished) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: key '%s' set after finish", key);
    return STRATA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Metadata from C values
 * ------------------------------------------------------------------------------------------- */

static strata_status set_scalar(st_gguf_writer *w, const char *key, strata_gguf_type type,
                                const void *v, size_t size) {
    ST_TRY(check_key(w, key));
    st_buf b = {0};
    buf_u32(&b, (uint32_t)type);
    buf_put(&b, v, size);
    return kv_store(w, key, &b);
}

strata_status st_gguf_writer_set_u8(st_gguf_writer *w, const char *key, uint8_t v) {
    return set_scalar(w, key, STRATA_GGUF_UINT8, &v, 1);
}
strata_status st_gguf_writer_set_i8(st_gguf_writer *w, const char *key, int8_t v) {
    return set_scalar(w, key, STRATA_GGUF_INT8, &v, 1);
}
strata_status st_gguf_writer_set_u16(st_gguf_writer *w, const char *key, uint16_t v) {
    return set_scalar(w, key, STRATA_GGUF_UINT16, &v, 2);
}
strata_status st_gguf_writer_set_i16(st_gguf_writer *w, const char *key, int16_t v) {
    return set_scalar(w, key, STRATA_GGUF_INT16, &v, 2);
}
strata_status st_gguf_writer_set_u32(st_gguf_writer *w, const char *key, uint32_t v) {
    return set_scalar(w, key, STRATA_GGUF_UINT32, &v, 4);
}
strata_status st_gguf_writer_set_i32(st_gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, STRATA_GGUF_INT32, &v, 4);
}
strata_status st_gguf_writer_set_u64(st_gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, STRATA_GGUF_UINT64, &v, 8);
}
strata_status st_gguf_writer_set_i64(st_gguf_writer *w, const char *key, int64_t v) {
    return set_scalar(w, key, STRATA_GGUF_INT64, &v, 8);
}
strata_status st_gguf_writer_set_f32(st_gguf_writer *w, const char *key, float v) {
    return set_scalar(w, key, STRATA_GGUF_FLOAT32, &v, 4);
}
strata_status st_gguf_writer_set_f64(st_gguf_writer *w, const char *key, double v) {
    return set_scalar(w, key, STRATA_GGUF_FLOAT64, &v, 8);
}
strata_status st_gguf_writer_set_bool(st_gguf_writer *w, const char *key, int v) {
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, key, STRATA_GGUF_BOOL, &b, 1);
}

strata_status st_gguf_writer_set_str(st_gguf_writer *w, const char *key, const char *v) {
    ST_TRY(check_key(w, key));
    if (!v) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: NULL string for key '%s'", key);
    st_buf b = {0};
    buf_u32(&b, STRATA_GGUF_STRING);
    buf_str(&b, v, strlen(v));
    return kv_store(w, key, &b);
}

/* Bytes of one element of a fixed-size GGUF type; 0 for STRING, ARRAY and unknown types. */
static size_t elem_size(strata_gguf_type t) {
    switch (t) {
    case STRATA_GGUF_UINT8: case STRATA_GGUF_INT8: case STRATA_GGUF_BOOL: return 1;
    case STRATA_GGUF_UINT16: case STRATA_GGUF_INT16: return 2;
    case STRATA_GGUF_UINT32: case STRATA_GGUF_INT32: case STRATA_GGUF_FLOAT32: return 4;
    case STRATA_GGUF_UINT64: case STRATA_GGUF_INT64: case STRATA_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

strata_status st_gguf_writer_set_array(st_gguf_writer *w, const char *key, strata_gguf_type elem,
                                       const void *data, uint64_t count) {
    ST_TRY(check_key(w, key));
    size_t es = elem_size(elem);
    if (es == 0)
        return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: key '%s': array element type %d is "
                        "not a fixed-size scalar", key, (int)elem);
    uint64_t bytes;
    if (st_mul_overflow_u64(count, es, &bytes) || bytes > SIZE_MAX / 2)
        return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: key '%s': array too large", key);
    if (count && !data) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: key '%s': NULL data", key);
    st_buf b = {0};
    buf_u32(&b, STRATA_GGUF_ARRAY);
    buf_u32(&b, (uint32_t)elem);
    buf_u64(&b, count);
    if (elem == STRATA_GGUF_BOOL) { /* normalize to 0/1 */
        for (uint64_t i = 0; i < count; i++) {
            uint8_t v = ((const uint8_t *)data)[i] ? 1 : 0;
            buf_put(&b, &v, 1);
        }
    } else if (count) {
        buf_put(&b, data, (size_t)bytes);
    }
    return kv_store(w, key, &b);
}

strata_status st_gguf_writer_set_str_array(st_gguf_writer *w, const char *key,
                                           const char *const *strs, uint64_t count) {
    ST_TRY(check_key(w, key));
    if (count && !strs) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: key '%s': NULL strings", key);
    st_buf b = {0};
    buf_u32(&b, STRATA_GGUF_ARRAY);
    buf_u32(&b, STRATA_GGUF_STRING);
    buf_u64(&b, count);
    for (uint64_t i = 0; i < count; i++) {
        if (!strs[i]) {
            free(b.p);
            return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: key '%s': string %llu is NULL",
                            key, (unsigned long long)i);
        }
        buf_str(&b, strs[i], strlen(strs[i]));
    }
    return kv_store(w, key, &b);
}

strata_status st_gguf_writer_remove(st_gguf_writer *w, const char *key) {
    ST_TRY(check_key(w, key));
    int64_t i = kv_find(w, key);
    if (i < 0) return STRATA_OK;
    free(w->kvs[i].key);
    free(w->kvs[i].val.p);
    memmove(&w->kvs[i], &w->kvs[i + 1], (size_t)(w->n_kv - i - 1) * sizeof *w->kvs);
    w->n_kv--;
    return STRATA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Metadata copied from an open file
 * ------------------------------------------------------------------------------------------- */

/* Appends the payload of v (without its type tag) to b. */
static strata_status put_payload(st_buf *b, const strata_gguf *src, const strata_gguf_value *v,
                                 const char *key, int depth) {
    switch (v->type) {
    case STRATA_GGUF_UINT8: case STRATA_GGUF_BOOL: { uint8_t x = (uint8_t)v->v.u64; buf_put(b, &x, 1); break; }
    case STRATA_GGUF_INT8: { int8_t x = (int8_t)v->v.i64; buf_put(b, &x, 1); break; }
    case STRATA_GGUF_UINT16: { uint16_t x = (uint16_t)v->v.u64; buf_put(b, &x, 2); break; }
    case STRATA_GGUF_INT16: { int16_t x = (int16_t)v->v.i64; buf_put(b, &x, 2); break; }
    case STRATA_GGUF_UINT32: { uint32_t x = (uint32_t)v->v.u64; buf_put(b, &x, 4); break; }
    case STRATA_GGUF_INT32: { int32_t x = (int32_t)v->v.i64; buf_put(b, &x, 4); break; }
    case STRATA_GGUF_UINT64: buf_put(b, &v->v.u64, 8); break;
    case STRATA_GGUF_INT64: buf_put(b, &v->v.i64, 8); break;
    case STRATA_GGUF_FLOAT32: { float x = (float)v->v.f64; buf_put(b, &x, 4); break; }
    case STRATA_GGUF_FLOAT64: buf_put(b, &v->v.f64, 8); break;
    case STRATA_GGUF_STRING:
        if (v->v.str.len && !v->v.str.ptr)
            return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string", key);
        buf_str(b, v->v.str.ptr, v->v.str.len);
        break;
    case STRATA_GGUF_ARRAY: {
        if (depth >= ST_GGUF_MAX_DEPTH)
            return st_error(STRATA_ERR_UNSUPPORTED, "gguf writer: key '%s': arrays nested deeper "
                            "than %d", key, ST_GGUF_MAX_DEPTH);
        if (!src)
            return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: key '%s': array value without "
                            "its source file", key);
        buf_u32(b, (uint32_t)v->v.arr.elem_type);
        buf_u64(b, v->v.arr.count);
        for (uint64_t i = 0; i < v->v.arr.count && !b->oom; i++) {
            strata_gguf_value e;
            strata_status st = strata_gguf_array_get(src, v, i, &e);
            if (st != STRATA_OK)
                return st_error(st, "gguf writer: key '%s': element %llu: %s", key,
                                (unsigned long long)i, strata_last_error());
            ST_TRY(put_payload(b, src, &e, key, depth + 1));
        }
        break;
    }
    default:
        return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: key '%s': unknown value type %d",
                        key, (int)v->type);
    }
    return STRATA_OK;
}

strata_status st_gguf_writer_set_value(st_gguf_writer *w, const char *key, const strata_gguf *src,
                                       const strata_gguf_value *value) {
    ST_TRY(check_key(w, key));
    if (!value) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: key '%s': NULL value", key);
    st_buf b = {0};
    buf_u32(&b, (uint32_t)value->type);
    strata_status st = put_payload(&b, src, value, key, 0);
    if (st != STRATA_OK) {
        free(b.p);
        return st;
    }
    return kv_store(w, key, &b);
}

/* ---------------------------------------------------------------------------------------------
 * Tensors
 * ------------------------------------------------------------------------------------------- */

static strata_status add_tensor(st_gguf_writer *w, const char *name, strata_type type,
                                uint32_t n_dims, const int64_t *ne, const void *data,
                                st_gguf_tensor_fill_fn fill, void *ctx) {
    if (!w || !name || !ne) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: NULL argument");
    if (w->finished) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: tensor '%s' added after finish", name);
    size_t nlen = strlen(name);
    if (nlen == 0 || nlen >= ST_GGUF_MAX_NAME)
        return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: tensor name '%s' must be 1..%d bytes",
                        name, ST_GGUF_MAX_NAME - 1);
    if (!strata_type_is_known((int)type))
        return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: tensor '%s': unknown type %d", name, (int)type);
    if (n_dims < 1 || n_dims > 4)
        return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims %u not in 1..4",
                        name, n_dims);
    for (int64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: duplicate tensor name '%s'", name);
    int64_t row = strata_row_bytes(type, ne[0]);
    if (ne[0] < 0 || row < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: tensor '%s': row length %lld does not "
                        "fit type %s (block size %lld)", name, (long long)ne[0],
                        strata_type_name(type), (long long)strata_type_block_size(type));
    uint64_t n_bytes = (uint64_t)row;
    for (uint32_t d = 1; d < n_dims; d++) {
        if (ne[d] < 0 || st_mul_overflow_u64(n_bytes, (uint64_t)ne[d], &n_bytes))
            return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: tensor '%s': bad or overflowing "
                            "dimension %u (%lld)", name, d, (long long)ne[d]);
    }
    if (w->n_tensors == w->cap_tensors) {
        int64_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        st_wtensor *t = realloc(w->tensors, (size_t)cap * sizeof *t);
        if (!t) return st_error(STRATA_ERR_NOMEM, "gguf writer: out of memory for tensor '%s'", name);
        w->tensors = t;
        w->cap_tensors = cap;
    }
    st_wtensor *t = &w->tensors[w->n_tensors++];
    memset(t, 0, sizeof *t);
    memcpy(t->name, name, nlen + 1);
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = d < (int)n_dims ? ne[d] : 1;
    t->n_bytes = n_bytes;
    t->data = data;
    t->fill = fill;
    t->ctx = ctx;
    return STRATA_OK;
}

strata_status st_gguf_writer_add_tensor(st_gguf_writer *w, const char *name, strata_type type,
                                        uint32_t n_dims, const int64_t *ne, const void *data) {
    if (!data && w && name && ne) {
        /* only an empty tensor may come without data; checked after its size is known */
        ST_TRY(add_tensor(w, name, type, n_dims, ne, NULL, NULL, NULL));
        if (w->tensors[w->n_tensors - 1].n_bytes != 0) {
            w->n_tensors--;
            return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: tensor '%s': NULL data", name);
        }
        return STRATA_OK;
    }
    return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL);
}

strata_status st_gguf_writer_add_tensor_fill(st_gguf_writer *w, const char *name,
                                             strata_type type, uint32_t n_dims, const int64_t *ne,
                                             st_gguf_tensor_fill_fn fill, void *ctx) {
    if (!fill) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: tensor '%s': NULL fill function",
                               name ? name : "(null)");
    return add_tensor(w, name, type, n_dims, ne, NULL, fill, ctx);
}

/* ---------------------------------------------------------------------------------------------
 * Writing the file
 * ------------------------------------------------------------------------------------------- */

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

static strata_status write_all(FILE *f, const void *p, size_t n, const char *path, const char *what) {
    if (n && fwrite(p, 1, n, f) != n)
        return st_error(STRATA_ERR_IO, "gguf writer: %s: writing %s failed: %s", path, what,
                        strerror(errno));
    return STRATA_OK;
}

static strata_status write_zeros(FILE *f, uint64_t n, const char *path) {
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        ST_TRY(write_all(f, zeros, k, path, "padding"));
        n -= k;
    }
    return STRATA_OK;
}

/* header + kvs + tensor infos, into one buffer. */
static strata_status build_header(st_gguf_writer *w, st_buf *h) {
    buf_put(h, ST_GGUF_MAGIC, 4);
    buf_u32(h, ST_GGUF_VERSION);
    buf_u64(h, (uint64_t)w->n_tensors);
    buf_u64(h, (uint64_t)w->n_kv);
    for (int64_t i = 0; i < w->n_kv; i++) {
        buf_str(h, w->kvs[i].key, strlen(w->kvs[i].key));
        buf_put(h, w->kvs[i].val.p, w->kvs[i].val.len);
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_tensors; i++) {
        st_wtensor *t = &w->tensors[i];
        off = align_up(off, w->alignment);
        t->offset = off;
        if (st_add_overflow_u64(off, t->n_bytes, &off))
            return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: tensor data exceeds 2^64 bytes");
        buf_str(h, t->name, strlen(t->name));
        buf_u32(h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) buf_u64(h, (uint64_t)t->ne[d]);
        buf_u32(h, (uint32_t)t->type);
        buf_u64(h, t->offset);
    }
    if (h->oom) return st_error(STRATA_ERR_NOMEM, "gguf writer: out of memory for the header");
    return STRATA_OK;
}

static strata_status write_body(st_gguf_writer *w, FILE *f) {
    st_buf h = {0};
    strata_status st = build_header(w, &h);
    if (st == STRATA_OK) st = write_all(f, h.p, h.len, w->path, "the header");
    uint64_t pos = h.len;
    free(h.p);
    ST_TRY(st);
    ST_TRY(write_zeros(f, align_up(pos, w->alignment) - pos, w->path));
    pos = 0; /* from here: offset within the data section */

    void *scratch = NULL;
    uint64_t scratch_cap = 0;
    for (int64_t i = 0; i < w->n_tensors && st == STRATA_OK; i++) {
        st_wtensor *t = &w->tensors[i];
        st = write_zeros(f, t->offset - pos, w->path);
        if (st != STRATA_OK) break;
        const void *src = t->data;
        if (t->fill) {
            if (t->n_bytes > scratch_cap) {
                free(scratch);
                scratch = t->n_bytes <= SIZE_MAX ? malloc((size_t)t->n_bytes) : NULL;
                scratch_cap = scratch ? t->n_bytes : 0;
                if (!scratch) {
                    st = st_error(STRATA_ERR_NOMEM, "gguf writer: out of memory for tensor '%s' "
                                  "(%llu bytes)", t->name, (unsigned long long)t->n_bytes);
                    break;
                }
            }
            st = t->fill(t->ctx, i, scratch, t->n_bytes);
            if (st != STRATA_OK) break;
            src = scratch;
        }
        char what[ST_GGUF_MAX_NAME + 16];
        snprintf(what, sizeof what, "tensor '%s'", t->name);
        st = write_all(f, src, (size_t)t->n_bytes, w->path, what);
        pos = t->offset + t->n_bytes;
    }
    free(scratch);
    ST_TRY(st);
    return write_zeros(f, align_up(pos, w->alignment) - pos, w->path);
}

strata_status st_gguf_writer_finish(st_gguf_writer *w) {
    if (!w) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: NULL writer");
    if (w->finished) return st_error(STRATA_ERR_INVALID_ARG, "gguf writer: finish called twice");
    /* general.alignment must agree with the layout used */
    if (w->alignment != ST_GGUF_DEFAULT_ALIGNMENT || kv_find(w, "general.alignment") >= 0)
        ST_TRY(st_gguf_writer_set_u32(w, "general.alignment", w->alignment));
    w->finished = 1;
    FILE *f = fopen(w->path, "wb");
    if (!f) return st_error(STRATA_ERR_IO, "gguf writer: cannot create '%s': %s", w->path, strerror(errno));
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    strata_status st = write_body(w, f);
    if (fclose(f) != 0 && st == STRATA_OK)
        st = st_error(STRATA_ERR_IO, "gguf writer: %s: closing failed: %s", w->path, strerror(errno));
    if (st != STRATA_OK) {
        remove(w->path);
        return st;
    }
    w->written = 1;
    return STRATA_OK;
}
