/* gguf_writer.h - internal GGUF v3 writer: collects metadata and tensor descriptions, then writes
 * header, key/value pairs, tensor infos, padding and aligned tensor data in one pass. Used by
 * strata_quantize_file and by tests that need GGUF files. Not part of the public ABI.
 *
 * Usage:
 *   st_gguf_writer *w;  st_gguf_writer_create(path, 32, &w);
 *   st_gguf_writer_set_u32(w, "general.file_type", 7);  ... set_str, set_array ...
 *   st_gguf_writer_add_tensor(w, "blk.0.ffn_up.weight", STRATA_TYPE_Q8_0, 2, ne, data);
 *   st = st_gguf_writer_finish(w);   (writes the file; removes it on failure)
 *   st_gguf_writer_free(w);          (removes the file if finish did not succeed)
 * Setting a key that is already present replaces its value in place (file order kept). */
#ifndef STRATA_GGUF_WRITER_H
#define STRATA_GGUF_WRITER_H

#include "common.h"

typedef struct st_gguf_writer st_gguf_writer;

/* Fills dst (n_bytes bytes) with the data of tensor index (0-based, order of add_tensor). */
typedef strata_status (*st_gguf_tensor_fill_fn)(void *ctx, int64_t index, void *dst,
                                                uint64_t n_bytes);

/* alignment: a power of two (32 is GGUF's default; any other value is recorded as
 * general.alignment). The file is created at finish, not here. */
strata_status st_gguf_writer_create(const char *path, uint32_t alignment, st_gguf_writer **out);
/* Removes the output file unless finish succeeded. NULL is a no-op. */
void st_gguf_writer_free(st_gguf_writer *w);

/* ---- metadata ---- */
/* Deep copy of a value read from an open file (arrays, nested arrays and strings included). */
strata_status st_gguf_writer_set_value(st_gguf_writer *w, const char *key, const strata_gguf *src,
                                       const strata_gguf_value *value);
strata_status st_gguf_writer_set_u8(st_gguf_writer *w, const char *key, uint8_t v);
strata_status st_gguf_writer_set_i8(st_gguf_writer *w, const char *key, int8_t v);
strata_status st_gguf_writer_set_u16(st_gguf_writer *w, const char *key, uint16_t v);
strata_status st_gguf_writer_set_i16(st_gguf_writer *w, const char *key, int16_t v);
strata_status st_gguf_writer_set_u32(st_gguf_writer *w, const char *key, uint32_t v);
strata_status st_gguf_writer_set_i32(st_gguf_writer *w, const char *key, int32_t v);
strata_status st_gguf_writer_set_u64(st_gguf_writer *w, const char *key, uint64_t v);
strata_status st_gguf_writer_set_i64(st_gguf_writer *w, const char *key, int64_t v);
strata_status st_gguf_writer_set_f32(st_gguf_writer *w, const char *key, float v);
strata_status st_gguf_writer_set_f64(st_gguf_writer *w, const char *key, double v);
strata_status st_gguf_writer_set_bool(st_gguf_writer *w, const char *key, int v);
/* NUL-terminated string. */
strata_status st_gguf_writer_set_str(st_gguf_writer *w, const char *key, const char *v);
/* Array of count fixed-size elements (any scalar type but STRING and ARRAY), in host (little
 * endian) layout; BOOL elements are one byte each. */
strata_status st_gguf_writer_set_array(st_gguf_writer *w, const char *key, strata_gguf_type elem,
                                       const void *data, uint64_t count);
/* Array of count NUL-terminated strings. */
strata_status st_gguf_writer_set_str_array(st_gguf_writer *w, const char *key,
                                           const char *const *strs, uint64_t count);
/* Removes key if present (STRATA_OK either way). */
strata_status st_gguf_writer_remove(st_gguf_writer *w, const char *key);
int64_t st_gguf_writer_kv_count(const st_gguf_writer *w);

/* ---- tensors ---- */
/* data: strata_row_bytes(type, ne[0]) * ne[1] * ... bytes, borrowed until finish returns. */
strata_status st_gguf_writer_add_tensor(st_gguf_writer *w, const char *name, strata_type type,
                                        uint32_t n_dims, const int64_t *ne, const void *data);
/* The data comes from fill(ctx, index, dst, n_bytes) called during finish, one tensor at a time. */
strata_status st_gguf_writer_add_tensor_fill(st_gguf_writer *w, const char *name,
                                             strata_type type, uint32_t n_dims, const int64_t *ne,
                                             st_gguf_tensor_fill_fn fill, void *ctx);

/* Writes the file. Calls at most once. */
strata_status st_gguf_writer_finish(st_gguf_writer *w);

#endif /* STRATA_GGUF_WRITER_H */
