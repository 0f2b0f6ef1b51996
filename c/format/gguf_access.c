/* gguf_access.c - the public read accessors of an opened strata_gguf: header facts, shards,
 * key/value pairs (decoded on access from the validated image), arrays (O(1) element access through
 * the descriptors built at open), typed getters with their conversions, and tensor infos. Nothing
 * here can fail on file content: gguf.c validated it all. */
#include "gguf_internal.h"

/* ==== header and shards ====================================================================== */

uint32_t strata_gguf_version(const strata_gguf *g) { return g ? g->shards[0].version : 0; }
uint32_t strata_gguf_alignment(const strata_gguf *g) { return g ? g->shards[0].alignment : 0; }
uint32_t strata_gguf_shard_count(const strata_gguf *g) { return g ? g->n_shards : 0; }

const char *strata_gguf_shard_path(const strata_gguf *g, uint32_t i) {
    if (!g || i >= g->n_shards) return NULL;
    return g->shards[i].path;
}

const char *strata_gguf_type_name(strata_gguf_type type) {
    static const char *const names[13] = {"uint8", "int8", "uint16", "int16", "uint32", "int32",
                                          "float32", "bool", "string", "array", "uint64", "int64",
                                          "float64"};
    return ((unsigned)type < 13) ? names[type] : "invalid";
}

/* ==== values ================================================================================= */

/* Decodes a value of type t whose bytes start at p (arrays: descriptor a). */
static void st_decode(strata_gguf_type t, const uint8_t *p, const st_gguf_arr *a,
                      strata_gguf_value *out) {
    memset(out, 0, sizeof *out);
    out->type = t;
    switch (t) {
    case STRATA_GGUF_UINT8: out->v.u64 = p[0]; break;
    case STRATA_GGUF_INT8: out->v.i64 = (int8_t)p[0]; break;
    case STRATA_GGUF_UINT16: out->v.u64 = st_le_u16(p); break;
    case STRATA_GGUF_INT16: out->v.i64 = (int16_t)st_le_u16(p); break;
    case STRATA_GGUF_UINT32: out->v.u64 = st_le_u32(p); break;
    case STRATA_GGUF_INT32: out->v.i64 = (int32_t)st_le_u32(p); break;
    case STRATA_GGUF_UINT64: out->v.u64 = st_le_u64(p); break;
    case STRATA_GGUF_INT64: out->v.i64 = (int64_t)st_le_u64(p); break;
    case STRATA_GGUF_BOOL: out->v.u64 = p[0]; break;
    case STRATA_GGUF_FLOAT32: {
        uint32_t b = st_le_u32(p);
        float x;
        memcpy(&x, &b, 4);
        out->v.f64 = x;
        break;
    }
    case STRATA_GGUF_FLOAT64: {
        uint64_t b = st_le_u64(p);
        double x;
        memcpy(&x, &b, 8);
        out->v.f64 = x;
        break;
    }
    case STRATA_GGUF_STRING:
        out->v.str.len = st_le_u64(p);
        out->v.str.ptr = (const char *)p + 8;
        break;
    case STRATA_GGUF_ARRAY:
        out->v.arr.elem_type = a->elem_type;
        out->v.arr.count = a->count;
        out->v.arr.impl = a;
        break;
    }
}

int64_t strata_gguf_kv_count(const strata_gguf *g) { return g ? g->n_kv : 0; }

const char *strata_gguf_kv_key(const strata_gguf *g, int64_t i) {
    if (!g || i < 0 || i >= g->n_kv) return NULL;
    return g->kvs[i]->key;
}

static const char *st_kv_name(const void *ctx, int64_t i) {
    return ((const st_gguf_kv *const *)ctx)[i]->key;
}

int64_t strata_gguf_kv_find(const strata_gguf *g, const char *key) {
    if (!g || !key) return -1;
    return st_name_index_find(&g->kv_index, key, st_kv_name, g->kvs);
}

strata_status strata_gguf_kv_value(const strata_gguf *g, int64_t i, strata_gguf_value *out) {
    if (!g || !out) return st_error(STRATA_ERR_INVALID_ARG, "strata_gguf_kv_value: NULL argument");
    if (i < 0 || i >= g->n_kv)
        return st_error(STRATA_ERR_NOT_FOUND, "gguf: key index %lld out of range (%lld keys)",
                        (long long)i, (long long)g->n_kv);
    const st_gguf_kv *kv = g->kvs[i];
    st_decode(kv->type, kv->val, kv->arr, out);
    return STRATA_OK;
}

static const uint8_t st_elem_size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

strata_status strata_gguf_array_get(const strata_gguf *g, const strata_gguf_value *array,
                                    uint64_t i, strata_gguf_value *out) {
    if (!g || !array || !out)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_gguf_array_get: NULL argument");
    if (array->type != STRATA_GGUF_ARRAY || !array->v.arr.impl)
        return st_error(STRATA_ERR_TYPE, "strata_gguf_array_get: value has type %s, not array",
                        strata_gguf_type_name(array->type));
    const st_gguf_arr *a = array->v.arr.impl;
    if (i >= a->count)
        return st_error(STRATA_ERR_NOT_FOUND, "gguf: array index %llu out of range (%llu "
                        "elements)", (unsigned long long)i, (unsigned long long)a->count);
    switch (a->elem_type) {
    case STRATA_GGUF_STRING: st_decode(a->elem_type, a->str[i], NULL, out); break;
    case STRATA_GGUF_ARRAY: st_decode(a->elem_type, NULL, &a->sub[i], out); break;
    default: st_decode(a->elem_type, a->data + i * st_elem_size[a->elem_type], NULL, out); break;
    }
    return STRATA_OK;
}

/* ==== typed getters ========================================================================== */

static strata_status st_lookup(const strata_gguf *g, const char *key, const char *fn,
                               const st_gguf_kv **kv) {
    if (!g || !key) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL argument", fn);
    int64_t i = strata_gguf_kv_find(g, key);
    if (i < 0) return st_error(STRATA_ERR_NOT_FOUND, "gguf: key '%s' not found", key);
    *kv = g->kvs[i];
    return STRATA_OK;
}

static int st_is_unsigned(strata_gguf_type t) {
    return t == STRATA_GGUF_UINT8 || t == STRATA_GGUF_UINT16 || t == STRATA_GGUF_UINT32 ||
           t == STRATA_GGUF_UINT64;
}
static int st_is_signed(strata_gguf_type t) {
    return t == STRATA_GGUF_INT8 || t == STRATA_GGUF_INT16 || t == STRATA_GGUF_INT32 ||
           t == STRATA_GGUF_INT64;
}

strata_status strata_gguf_get_u64(const strata_gguf *g, const char *key, uint64_t *out) {
    const st_gguf_kv *kv;
    if (!out) return st_error(STRATA_ERR_INVALID_ARG, "strata_gguf_get_u64: NULL argument");
    ST_TRY(st_lookup(g, key, "strata_gguf_get_u64", &kv));
    strata_gguf_value v;
    st_decode(kv->type, kv->val, kv->arr, &v);
    if (st_is_unsigned(v.type)) {
        *out = v.v.u64;
        return STRATA_OK;
    }
    if (st_is_signed(v.type)) {
        if (v.v.i64 < 0)
            return st_error(STRATA_ERR_TYPE, "gguf: key '%s' is %s %lld, which does not fit uint64",
                            key, strata_gguf_type_name(v.type), (long long)v.v.i64);
        *out = (uint64_t)v.v.i64;
        return STRATA_OK;
    }
    return st_error(STRATA_ERR_TYPE, "gguf: key '%s' has type %s, not an integer", key,
                    strata_gguf_type_name(v.type));
}

strata_status strata_gguf_get_i64(const strata_gguf *g, const char *key, int64_t *out) {
    const st_gguf_kv *kv;
    if (!out) return st_error(STRATA_ERR_INVALID_ARG, "strata_gguf_get_i64: NULL argument");
    ST_TRY(st_lookup(g, key, "strata_gguf_get_i64", &kv));
    strata_gguf_value v;
    st_decode(kv->type, kv->val, kv->arr, &v);
    if (st_is_signed(v.type)) {
        *out = v.v.i64;
        return STRATA_OK;
    }
    if (st_is_unsigned(v.type)) {
        if (v.v.u64 > (uint64_t)INT64_MAX)
            return st_error(STRATA_ERR_TYPE, "gguf: key '%s' is uint64 %llu, which does not fit "
                            "int64", key, (unsigned long long)v.v.u64);
        *out = (int64_t)v.v.u64;
        return STRATA_OK;
    }
    return st_error(STRATA_ERR_TYPE, "gguf: key '%s' has type %s, not an integer", key,
                    strata_gguf_type_name(v.type));
}

strata_status strata_gguf_get_f64(const strata_gguf *g, const char *key, double *out) {
    const st_gguf_kv *kv;
    if (!out) return st_error(STRATA_ERR_INVALID_ARG, "strata_gguf_get_f64: NULL argument");
    ST_TRY(st_lookup(g, key, "strata_gguf_get_f64", &kv));
    if (kv->type != STRATA_GGUF_FLOAT32 && kv->type != STRATA_GGUF_FLOAT64)
        return st_error(STRATA_ERR_TYPE, "gguf: key '%s' has type %s, not float32/float64", key,
                        strata_gguf_type_name(kv->type));
    strata_gguf_value v;
    st_decode(kv->type, kv->val, kv->arr, &v);
    *out = v.v.f64;
    return STRATA_OK;
}

strata_status strata_gguf_get_bool(const strata_gguf *g, const char *key, int *out) {
    const st_gguf_kv *kv;
    if (!out) return st_error(STRATA_ERR_INVALID_ARG, "strata_gguf_get_bool: NULL argument");
    ST_TRY(st_lookup(g, key, "strata_gguf_get_bool", &kv));
    if (kv->type != STRATA_GGUF_BOOL)
        return st_error(STRATA_ERR_TYPE, "gguf: key '%s' has type %s, not bool", key,
                        strata_gguf_type_name(kv->type));
    *out = kv->val[0] != 0;
    return STRATA_OK;
}

strata_status strata_gguf_get_str(const strata_gguf *g, const char *key, const char **ptr,
                                  uint64_t *len) {
    const st_gguf_kv *kv;
    if (!ptr || !len) return st_error(STRATA_ERR_INVALID_ARG, "strata_gguf_get_str: NULL argument");
    ST_TRY(st_lookup(g, key, "strata_gguf_get_str", &kv));
    if (kv->type != STRATA_GGUF_STRING)
        return st_error(STRATA_ERR_TYPE, "gguf: key '%s' has type %s, not string", key,
                        strata_gguf_type_name(kv->type));
    *len = st_le_u64(kv->val);
    *ptr = (const char *)kv->val + 8;
    return STRATA_OK;
}

/* ==== tensors ================================================================================ */

int64_t strata_gguf_tensor_count(const strata_gguf *g) { return g ? g->n_tensors : 0; }

strata_status strata_gguf_tensor_info(const strata_gguf *g, int64_t i, strata_tensor_info *out) {
    if (!g || !out)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_gguf_tensor_info: NULL argument");
    if (i < 0 || i >= g->n_tensors)
        return st_error(STRATA_ERR_NOT_FOUND, "gguf: tensor index %lld out of range (%lld "
                        "tensors)", (long long)i, (long long)g->n_tensors);
    *out = g->tensors[i];
    return STRATA_OK;
}

static const char *st_tensor_name(const void *ctx, int64_t i) {
    return ((const strata_tensor_info *)ctx)[i].name;
}

int64_t strata_gguf_tensor_find(const strata_gguf *g, const char *name) {
    if (!g || !name) return -1;
    return st_name_index_find(&g->tensor_index, name, st_tensor_name, g->tensors);
}
