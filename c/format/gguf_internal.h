/* gguf_internal.h - internal structures of the GGUF reader shared by gguf.c (parsing and
 * validation of one file image), gguf_split.c (opening files and split models, merging shards) and
 * gguf_access.c (the public accessors). Not part of the public ABI. */
#ifndef STRATA_GGUF_INTERNAL_H
#define STRATA_GGUF_INTERNAL_H

#include "common.h"
#include "cursor.h"

#define ST_GGUF_MAX_DEPTH 8                   /* deepest array nesting accepted */
#define ST_GGUF_MAX_KEY_LEN (1u << 20)        /* keys: 1 MiB */
/* Tensor names: the GGUF specification's 64 bytes, counted as ggml does (GGML_MAX_NAME, with the
 * terminating NUL): at most 63 bytes of name, what llama.cpp loads and the writer writes. */
#define ST_GGUF_MAX_TENSOR_NAME 64u
#define ST_GGUF_DEFAULT_ALIGNMENT 32u
#define ST_GGUF_DEFAULT_MAX_ALIGNMENT (1u << 20)

/* Descriptor of one array value (top-level or nested), built at open so that element i is found
 * in O(1): fixed-size elements at data + i * size, strings through str[i], arrays as sub[i]. */
typedef struct st_gguf_arr {
    strata_gguf_type elem_type;
    uint64_t count;
    const uint8_t *data;            /* first element in the image */
    const uint8_t *const *str;      /* STRING elements: str[i] -> its u64 length field */
    const struct st_gguf_arr *sub;  /* ARRAY elements: sub[0..count) */
} st_gguf_arr;

typedef struct st_gguf_kv {
    const char *key;                /* NUL-terminated copy (no embedded NUL: rejected at open) */
    uint64_t key_len;
    uint64_t key_offset;            /* offset of the key's length field in its file */
    strata_gguf_type type;
    const uint8_t *val;             /* value bytes in the image (after the u32 type) */
    const st_gguf_arr *arr;         /* ARRAY values only */
} st_gguf_kv;

/* How a file image is held. */
typedef enum { ST_IMG_BORROWED = 0, ST_IMG_MALLOC = 1, ST_IMG_MMAP = 2 } st_img_kind;

/* One validated GGUF image (a single file or one shard of a split model). */
typedef struct st_gguf_file {
    char *path;                     /* "<memory>" for in-memory images */
    const uint8_t *data;
    uint64_t size;
    st_img_kind kind;

    uint32_t version;
    uint32_t alignment;
    uint64_t data_start;            /* offset of the tensor-data section */

    int64_t n_kv;
    st_gguf_kv *kvs;                /* [n_kv] */
    int64_t n_tensors;
    strata_tensor_info *tensors;    /* [n_tensors]; shard fields are 0 until merged */

    char *names;                    /* arena holding every key and tensor name copy */
    st_gguf_arr *arrs;              /* pool of every array descriptor */
    const uint8_t **strs;           /* pool of every string-element pointer */
} st_gguf_file;

/* Open-addressing hash index of NUL-terminated names -> int64 positions. */
typedef struct st_name_index {
    int64_t *slots;                 /* -1 empty, else position */
    uint64_t mask;                  /* slots - 1 (power of two) */
} st_name_index;

struct strata_gguf {
    uint32_t n_shards;
    st_gguf_file *shards;           /* [n_shards] */
    int64_t n_kv;
    const st_gguf_kv **kvs;         /* [n_kv] -> entries of the shards' kvs */
    int64_t n_tensors;
    strata_tensor_info *tensors;    /* [n_tensors], shard fields set */
    st_name_index kv_index, tensor_index;
};

/* ---- gguf.c --------------------------------------------------------------------------------- */

/* Parses and validates the image f->data[0..size) (f->path, data, size, kind already set) and
 * fills the rest of *f. On failure returns the status with the message set; st_gguf_file_release
 * must still be called. */
strata_status st_gguf_file_parse(st_gguf_file *f, const strata_gguf_params *params);
/* Frees what st_gguf_file_parse allocated (not the image nor the path: gguf_split.c owns them). */
void st_gguf_file_release(st_gguf_file *f);
/* Message suffix naming the file: " (file 'PATH')" or "" for memory images. */
void st_gguf_file_suffix(const st_gguf_file *f, char *buf, size_t cap);

/* Hash index helpers (gguf.c). st_name_index_build returns NOMEM or FORMAT on a duplicate: then
 * *dup_a / *dup_b are the two positions with equal names. */
uint64_t st_name_hash(const char *s);
/* Empty index with room for n names (slots stay below half full). */
strata_status st_name_index_init(st_name_index *ix, int64_t n);
/* Inserts position pos (its name is name_of(ctx, pos)) unless the name is present: then returns
 * the position already there and inserts nothing; -1 when inserted. Room must remain. */
int64_t st_name_index_insert(st_name_index *ix, int64_t pos,
                             const char *(*name_of)(const void *, int64_t), const void *ctx);
strata_status st_name_index_build(st_name_index *ix, int64_t n, const char *(*name_of)(const void *,
                                  int64_t), const void *ctx, int64_t *dup_a, int64_t *dup_b);
int64_t st_name_index_find(const st_name_index *ix, const char *name,
                           const char *(*name_of)(const void *, int64_t), const void *ctx);
void st_name_index_free(st_name_index *ix);

/* Looks up an unsigned integer kv of a file (any integer type, non-negative); 1 if found and
 * integral, 0 if absent, -1 if present with another type or a negative value. */
int st_gguf_file_get_uint(const st_gguf_file *f, const char *key, uint64_t *out, int64_t *index);

/* Writes a printable copy of s[0..len) (at most cap-1 bytes, non-printables as '?'). */
void st_gguf_printable(char *dst, size_t cap, const char *s, uint64_t len);

#endif /* STRATA_GGUF_INTERNAL_H */
