/* strata_gguf.h - the public C ABI of Strata's GGUF reader: opening and validating GGUF files
 * (one file or the shards of a split model), their metadata and tensor table. strata.h's
 * conventions apply; a model's file is strata_model_gguf(model).
 *
 *     strata_gguf *g;
 *     if (strata_gguf_open("model.gguf", NULL, &g) != STRATA_OK) { ... strata_last_error() ... }
 *     const char *arch; uint64_t len;
 *     strata_gguf_get_str(g, "general.architecture", &arch, &len);
 *     strata_tensor_info ti;
 *     strata_gguf_tensor_info(g, strata_gguf_tensor_find(g, "token_embd.weight"), &ti);
 *     strata_gguf_free(g);
 */
#ifndef STRATA_GGUF_H
#define STRATA_GGUF_H

#include "strata.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * GGUF files
 *
 * A strata_gguf is an opened, fully validated GGUF model: one file or the shards of a split model
 * (NAME-0000N-of-0000M.gguf, all opened when any shard is named). Validation happens at open time;
 * after a successful open every accessor is bounds-safe. Metadata values and tensor bytes point into
 * the read-only file mapping (zero copy) and live as long as the handle. A strata_gguf is immutable:
 * all accessors are thread-safe.
 * ------------------------------------------------------------------------------------------- */

typedef enum strata_gguf_type {
    STRATA_GGUF_UINT8 = 0,
    STRATA_GGUF_INT8 = 1,
    STRATA_GGUF_UINT16 = 2,
    STRATA_GGUF_INT16 = 3,
    STRATA_GGUF_UINT32 = 4,
    STRATA_GGUF_INT32 = 5,
    STRATA_GGUF_FLOAT32 = 6,
    STRATA_GGUF_BOOL = 7,
    STRATA_GGUF_STRING = 8,
    STRATA_GGUF_ARRAY = 9,
    STRATA_GGUF_UINT64 = 10,
    STRATA_GGUF_INT64 = 11,
    STRATA_GGUF_FLOAT64 = 12
} strata_gguf_type;

typedef struct strata_gguf_params {
    int use_mmap;             /* 1 (default): map files; 0: read them into memory */
    int open_shards;          /* 1 (default): a split file name opens all its shards */
    uint32_t max_alignment;   /* largest general.alignment accepted (default 1 MiB) */
    int mlock;                /* 1: lock the files' pages in RAM once opened (mlock); a refusal
                                 (RLIMIT_MEMLOCK, ulimit -l) is an error. Default 0 */
    int hugepages;            /* 1: ask for transparent huge pages on the images (madvise; files
                                 read into memory get advised anonymous memory first); best
                                 effort where the kernel declines. Default 0 */
} strata_gguf_params;

/* A metadata value. Scalars are in the union; a string is (ptr, len), not NUL-terminated, bytes
 * as stored (UTF-8 by the spec, not checked); an array is a handle read with
 * strata_gguf_array_get. Valid while the strata_gguf lives. */
typedef struct strata_gguf_value {
    strata_gguf_type type;
    union {
        uint64_t u64;      /* UINT8..UINT64 and BOOL, zero-extended */
        int64_t i64;       /* INT8..INT64, sign-extended */
        double f64;        /* FLOAT32, FLOAT64 */
        struct { const char *ptr; uint64_t len; } str;
        struct {
            strata_gguf_type elem_type;
            uint64_t count;
            const void *impl;    /* internal */
        } arr;
    } v;
} strata_gguf_value;

typedef struct strata_tensor_info {
    const char *name;        /* NUL-terminated copy */
    strata_type type;
    uint32_t n_dims;         /* 1..4 */
    int64_t ne[4];           /* ne[0] is the row length (contiguous); unused dims are 1 */
    int64_t n_elements;
    uint64_t offset;         /* from the start of its shard's tensor-data section */
    uint64_t file_offset;    /* from the start of its shard file */
    uint64_t n_bytes;
    uint32_t shard;          /* 0-based shard index */
    const void *data;        /* the bytes, read-only, zero copy */
} strata_tensor_info;

/* Defaults: use_mmap 1, open_shards 1, max_alignment 1 MiB, mlock 0, hugepages 0. */
STRATA_API strata_gguf_params strata_gguf_default_params(void);

/* Opens and validates path. On success *out owns the mapping; free it with strata_gguf_free. */
STRATA_API strata_status strata_gguf_open(const char *path, const strata_gguf_params *params,
                                          strata_gguf **out);
/* Validates a GGUF image held in memory. The bytes are copied unless borrow is 1, in which case
 * they must outlive the handle. Split metadata is checked for consistency but no shards are
 * opened. */
STRATA_API strata_status strata_gguf_open_memory(const void *data, size_t size, int borrow,
                                                 const strata_gguf_params *params,
                                                 strata_gguf **out);
STRATA_API void strata_gguf_free(strata_gguf *gguf);

STRATA_API uint32_t strata_gguf_version(const strata_gguf *gguf);    /* 2 or 3 */
STRATA_API uint32_t strata_gguf_alignment(const strata_gguf *gguf);
STRATA_API uint32_t strata_gguf_shard_count(const strata_gguf *gguf);
/* Path of shard i ("<memory>" for in-memory images); NULL if i is out of range. */
STRATA_API const char *strata_gguf_shard_path(const strata_gguf *gguf, uint32_t i);

/* Metadata: key/value pairs of all shards (shard 0's first; split.* keys of later shards are not
 * repeated). Index order is file order. */
STRATA_API int64_t strata_gguf_kv_count(const strata_gguf *gguf);
/* NUL-terminated key of pair i; NULL if i is out of range. */
STRATA_API const char *strata_gguf_kv_key(const strata_gguf *gguf, int64_t i);
/* Index of key, or -1. */
STRATA_API int64_t strata_gguf_kv_find(const strata_gguf *gguf, const char *key);
STRATA_API strata_status strata_gguf_kv_value(const strata_gguf *gguf, int64_t i,
                                              strata_gguf_value *out);
/* Element i of an array value (which may itself be an array). */
STRATA_API strata_status strata_gguf_array_get(const strata_gguf *gguf,
                                               const strata_gguf_value *array, uint64_t i,
                                               strata_gguf_value *out);
/* Typed lookups by key. Integers of any width convert when the value fits the target type
 * (else STRATA_ERR_TYPE); floats accept FLOAT32/FLOAT64. Missing key: STRATA_ERR_NOT_FOUND. */
STRATA_API strata_status strata_gguf_get_u64(const strata_gguf *gguf, const char *key,
                                             uint64_t *out);
STRATA_API strata_status strata_gguf_get_i64(const strata_gguf *gguf, const char *key,
                                             int64_t *out);
STRATA_API strata_status strata_gguf_get_f64(const strata_gguf *gguf, const char *key,
                                             double *out);
STRATA_API strata_status strata_gguf_get_bool(const strata_gguf *gguf, const char *key, int *out);
/* The string (ptr, len) of a STRING value; not NUL-terminated. */
STRATA_API strata_status strata_gguf_get_str(const strata_gguf *gguf, const char *key,
                                             const char **ptr, uint64_t *len);
/* Name of a value type, e.g. "uint32". Static storage. */
STRATA_API const char *strata_gguf_type_name(strata_gguf_type type);

/* Tensors of all shards, in shard then file order. */
STRATA_API int64_t strata_gguf_tensor_count(const strata_gguf *gguf);
STRATA_API strata_status strata_gguf_tensor_info(const strata_gguf *gguf, int64_t i,
                                                 strata_tensor_info *out);
/* Index of name, or -1. */
STRATA_API int64_t strata_gguf_tensor_find(const strata_gguf *gguf, const char *name);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_GGUF_H */
