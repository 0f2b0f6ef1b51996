/* gguf.c - parsing and validation of one GGUF image (v2/v3): header, key/value pairs (with nested
 * arrays), tensor infos, alignment, tensor-data bounds and overlaps, duplicate keys and names.
 * After st_gguf_file_parse succeeds nothing in the image can make an accessor fail or read out of
 * bounds. Also the name hash index shared with gguf_split.c.
 *
 * Two passes: pass 1 walks the whole image with a bounds-checked cursor, validating everything and
 * counting what must be allocated (name bytes, array descriptors, string-element pointers); every
 * count is bounded by the image size before anything is allocated from it. Pass 2 copies the names
 * and re-walks only the array values to build their O(1) element indexes. */
#include "gguf_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* ==== small helpers ========================================================================== */

/* Bytes of one scalar of each value type; 0 for STRING and ARRAY (variable). */
static const uint8_t st_gguf_scalar_size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static int st_gguf_type_valid(uint32_t t) { return t <= STRATA_GGUF_FLOAT64; }

/* Smallest encoding of one element of type t (string: its u64 length; array: type + count). */
static uint64_t st_gguf_min_size(uint32_t t) {
    if (t == STRATA_GGUF_STRING) return 8;
    if (t == STRATA_GGUF_ARRAY) return 12;
    return st_gguf_scalar_size[t];
}

void st_gguf_printable(char *dst, size_t cap, const char *s, uint64_t len) {
    size_t n = 0;
    if (cap == 0) return;
    for (uint64_t i = 0; i < len && n + 1 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        dst[n++] = (ch >= 0x20 && ch < 0x7f && ch != '\'') ? (char)ch : '?';
    }
    if (len > cap - 1 && cap > 4) memcpy(dst + cap - 4, "...", 3), n = cap - 1;
    dst[n] = '\0';
}

void st_gguf_file_suffix(const st_gguf_file *f, char *buf, size_t cap) {
    if (f->kind == ST_IMG_BORROWED || !f->path || strcmp(f->path, "<memory>") == 0 ||
        f->path[0] == '\0')
        buf[0] = '\0';
    else
        snprintf(buf, cap, " (file '%s')", f->path);
}

/* ==== name hash index ======================================================================== */

uint64_t st_name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

strata_status st_name_index_init(st_name_index *ix, int64_t n) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap <<= 1;
    ix->slots = malloc(cap * sizeof *ix->slots);
    ix->mask = cap - 1;
    if (!ix->slots)
        return st_error(STRATA_ERR_NOMEM, "gguf: out of memory for a name index of %lld entries",
                        (long long)n);
    for (uint64_t i = 0; i < cap; i++) ix->slots[i] = -1;
    return STRATA_OK;
}

int64_t st_name_index_insert(st_name_index *ix, int64_t pos,
                             const char *(*name_of)(const void *, int64_t), const void *ctx) {
    const char *name = name_of(ctx, pos);
    uint64_t h = st_name_hash(name) & ix->mask;
    while (ix->slots[h] >= 0) {
        if (strcmp(name_of(ctx, ix->slots[h]), name) == 0) return ix->slots[h];
        h = (h + 1) & ix->mask;
    }
    ix->slots[h] = pos;
    return -1;
}

strata_status st_name_index_build(st_name_index *ix, int64_t n,
                                  const char *(*name_of)(const void *, int64_t), const void *ctx,
                                  int64_t *dup_a, int64_t *dup_b) {
    ST_TRY(st_name_index_init(ix, n));
    for (int64_t i = 0; i < n; i++) {
        int64_t prev = st_name_index_insert(ix, i, name_of, ctx);
        if (prev >= 0) {
            *dup_a = prev;
            *dup_b = i;
            return STRATA_ERR_FORMAT; /* the caller writes the message */
        }
    }
    return STRATA_OK;
}

int64_t st_name_index_find(const st_name_index *ix, const char *name,
                           const char *(*name_of)(const void *, int64_t), const void *ctx) {
    if (!ix->slots || !name) return -1;
    uint64_t h = st_name_hash(name) & ix->mask;
    while (ix->slots[h] >= 0) {
        if (strcmp(name_of(ctx, ix->slots[h]), name) == 0) return ix->slots[h];
        h = (h + 1) & ix->mask;
    }
    return -1;
}

void st_name_index_free(st_name_index *ix) {
    free(ix->slots);
    ix->slots = NULL;
    ix->mask = 0;
}

static const char *st_file_kv_name(const void *ctx, int64_t i) {
    return ((const st_gguf_kv *)ctx)[i].key;
}
static const char *st_file_tensor_name(const void *ctx, int64_t i) {
    return ((const strata_tensor_info *)ctx)[i].name;
}

/* ==== parser state =========================================================================== */

typedef struct st_tensor_aux {   /* per-tensor facts kept for messages and name copies */
    uint64_t name_off, name_len; /* the name's length field and byte count */
    uint64_t off_field;          /* file offset of the tensor's data-offset field */
} st_tensor_aux;

typedef struct st_parser {
    st_gguf_file *f;
    st_cursor cur;
    char sfx[320];               /* " (file 'PATH')" or "" */
    char what[128];              /* printable current key or tensor name */
    int64_t item;                /* index of the current key or tensor */
    /* pass-1 counts */
    uint64_t n_arrs, n_strs, name_bytes;
    /* pass-2 fill cursors */
    st_gguf_arr *arr_next, *arr_end;
    const uint8_t **str_next, **str_end;
    st_tensor_aux *aux;
} st_parser;

#define P_FMT(P, st, fmt, ...) st_error((st), "gguf: " fmt "%s", __VA_ARGS__, (P)->sfx)
#define OFF(x) ((unsigned long long)(x))

/* ==== pass 1: values ========================================================================= */

/* "value" or "array element I of a level-L array", formatted only when a message needs it. */
static const char *p_where(char *buf, int depth, uint64_t elem) {
    if (elem == UINT64_MAX) return "value";
    snprintf(buf, 64, "array element %llu of a level-%d array", OFF(elem), depth - 1);
    return buf;
}

/* Validates one value of type t (already checked to be 0..12) at the cursor and skips it.
 * depth: nesting level of t if it is an array (1 for a top-level array). elem: the element index
 * inside the enclosing array, or UINT64_MAX for a top-level value (messages only). */
static strata_status p_value(st_parser *P, uint32_t t, int depth, uint64_t elem) {
    st_cursor *c = &P->cur;
    char wbuf[64];
#define where p_where(wbuf, depth, elem)

    if (t != STRATA_GGUF_STRING && t != STRATA_GGUF_ARRAY) {
        uint64_t sz = st_gguf_scalar_size[t];
        if (!st_cur_has(c, sz))
            return st_cur_truncated(c, sz, P->sfx, "key %lld '%s' %s", (long long)P->item, P->what,
                                    where);
        if (t == STRATA_GGUF_BOOL && c->base[c->pos] > 1)
            return P_FMT(P, STRATA_ERR_FORMAT, "key %lld '%s' %s: bool at offset %llu is %u (must "
                         "be 0 or 1)", (long long)P->item, P->what, where, OFF(c->pos),
                         c->base[c->pos]);
        c->pos += sz;
        return STRATA_OK;
    }
    if (t == STRATA_GGUF_STRING) {
        uint64_t len, at = c->pos;
        if (!st_cur_u64(c, &len))
            return st_cur_truncated(c, 8, P->sfx, "key %lld '%s' %s string length",
                                    (long long)P->item, P->what, where);
        if (len > st_cur_left(c))
            return P_FMT(P, STRATA_ERR_FORMAT, "key %lld '%s' %s: string length %llu at offset "
                         "%llu exceeds the %llu bytes left", (long long)P->item, P->what, where,
                         OFF(len), OFF(at), OFF(st_cur_left(c)));
        c->pos += len;
        return STRATA_OK;
    }

    /* ARRAY: u32 element type, u64 count, elements */
    uint32_t et;
    uint64_t n, at = c->pos;
    if (!st_cur_u32(c, &et))
        return st_cur_truncated(c, 4, P->sfx, "key %lld '%s' %s array element type",
                                (long long)P->item, P->what, where);
    if (!st_gguf_type_valid(et))
        return P_FMT(P, STRATA_ERR_FORMAT, "key %lld '%s' %s: array element type at offset %llu "
                     "is %u, not a valid GGUF value type (0..12)", (long long)P->item, P->what,
                     where, OFF(at), et);
    if (et == STRATA_GGUF_ARRAY && depth + 1 > ST_GGUF_MAX_DEPTH)
        return P_FMT(P, STRATA_ERR_FORMAT, "key %lld '%s' %s: array nesting at offset %llu is "
                     "deeper than %d levels", (long long)P->item, P->what, where, OFF(at),
                     ST_GGUF_MAX_DEPTH);
    at = c->pos;
    if (!st_cur_u64(c, &n))
        return st_cur_truncated(c, 8, P->sfx, "key %lld '%s' %s array count", (long long)P->item,
                                P->what, where);
    uint64_t minsz = st_gguf_min_size(et);
    if (n > st_cur_left(c) / minsz)
        return P_FMT(P, STRATA_ERR_FORMAT, "key %lld '%s' %s: array count %llu at offset %llu "
                     "needs at least %llu bytes each but only %llu bytes are left",
                     (long long)P->item, P->what, where, OFF(n), OFF(at), OFF(minsz),
                     OFF(st_cur_left(c)));
    if (et == STRATA_GGUF_BOOL) {
        for (uint64_t i = 0; i < n; i++)
            ST_TRY(p_value(P, et, depth + 1, i));
    } else if (et == STRATA_GGUF_STRING || et == STRATA_GGUF_ARRAY) {
        for (uint64_t i = 0; i < n; i++)
            ST_TRY(p_value(P, et, depth + 1, i));
        if (et == STRATA_GGUF_STRING) P->n_strs += n;
        else P->n_arrs += n;
    } else {
        c->pos += n * minsz; /* fits: n <= left / minsz */
    }
    return STRATA_OK;
#undef where
}

/* ==== pass 1: key/value pairs ================================================================ */

static strata_status p_alignment(st_parser *P, const st_gguf_kv *kv, uint64_t val_off,
                                 const strata_gguf_params *params) {
    st_gguf_file *f = P->f;
    if (kv->type != STRATA_GGUF_UINT32)
        return P_FMT(P, STRATA_ERR_FORMAT, "general.alignment at offset %llu has type %s; it must "
                     "be uint32", OFF(val_off), strata_gguf_type_name(kv->type));
    uint32_t a = st_le_u32(kv->val);
    if (a == 0 || (a & (a - 1)) != 0)
        return P_FMT(P, STRATA_ERR_FORMAT, "general.alignment at offset %llu is %u; it must be a "
                     "power of two", OFF(val_off), a);
    if (a > params->max_alignment)
        return P_FMT(P, STRATA_ERR_FORMAT, "general.alignment at offset %llu is %u, above the "
                     "limit of %u (strata_gguf_params.max_alignment)", OFF(val_off), a,
                     params->max_alignment);
    f->alignment = a;
    return STRATA_OK;
}

/* Reads a length-prefixed name (key or tensor name) at the cursor: *p, *len. */
static strata_status p_name(st_parser *P, const char *kind, const uint8_t **p, uint64_t *len) {
    st_cursor *c = &P->cur;
    uint64_t at = c->pos;
    if (!st_cur_u64(c, len))
        return st_cur_truncated(c, 8, P->sfx, "%s %lld name length", kind, (long long)P->item);
    if (*len == 0)
        return P_FMT(P, STRATA_ERR_FORMAT, "%s %lld name at offset %llu is empty", kind,
                     (long long)P->item, OFF(at));
    if (*len > ST_GGUF_MAX_KEY_LEN)
        return P_FMT(P, STRATA_ERR_FORMAT, "%s %lld name length %llu at offset %llu exceeds the "
                     "limit of %u bytes", kind, (long long)P->item, OFF(*len), OFF(at),
                     ST_GGUF_MAX_KEY_LEN);
    if (*len > st_cur_left(c))
        return P_FMT(P, STRATA_ERR_FORMAT, "%s %lld name length %llu at offset %llu exceeds the "
                     "%llu bytes left", kind, (long long)P->item, OFF(*len), OFF(at),
                     OFF(st_cur_left(c)));
    st_cur_bytes(c, *len, p);
    if (memchr(*p, 0, *len))
        return P_FMT(P, STRATA_ERR_FORMAT, "%s %lld name at offset %llu contains a NUL byte", kind,
                     (long long)P->item, OFF(at));
    st_gguf_printable(P->what, sizeof P->what, (const char *)*p, *len);
    P->name_bytes += *len + 1;
    return STRATA_OK;
}

static strata_status p_kvs(st_parser *P, const strata_gguf_params *params) {
    st_gguf_file *f = P->f;
    st_cursor *c = &P->cur;
    for (int64_t i = 0; i < f->n_kv; i++) {
        st_gguf_kv *kv = &f->kvs[i];
        const uint8_t *kp;
        uint32_t t;
        P->item = i;
        kv->key_offset = c->pos;
        ST_TRY(p_name(P, "key", &kp, &kv->key_len));
        kv->key = (const char *)kp; /* replaced by the arena copy in pass 2 */
        uint64_t at = c->pos;
        if (!st_cur_u32(c, &t))
            return st_cur_truncated(c, 4, P->sfx, "key %lld '%s' value type", (long long)i,
                                    P->what);
        if (!st_gguf_type_valid(t))
            return P_FMT(P, STRATA_ERR_FORMAT, "key %lld '%s' value type at offset %llu is %u, "
                         "not a valid GGUF value type (0..12)", (long long)i, P->what, OFF(at), t);
        kv->type = (strata_gguf_type)t;
        kv->val = c->base + c->pos;
        uint64_t val_off = c->pos;
        ST_TRY(p_value(P, t, 1, UINT64_MAX));
        if (t == STRATA_GGUF_ARRAY) P->n_arrs++;
        if (kv->key_len == 17 && memcmp(kp, "general.alignment", 17) == 0)
            ST_TRY(p_alignment(P, kv, val_off, params));
    }
    return STRATA_OK;
}

/* ==== pass 1: tensor infos =================================================================== */

static strata_status p_tensors(st_parser *P) {
    st_gguf_file *f = P->f;
    st_cursor *c = &P->cur;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        strata_tensor_info *ti = &f->tensors[i];
        st_tensor_aux *ax = &P->aux[i];
        const uint8_t *np;
        uint32_t nd, type;
        uint64_t at;
        P->item = i;
        ax->name_off = c->pos;
        ST_TRY(p_name(P, "tensor", &np, &ax->name_len));
        if (ax->name_len >= ST_GGUF_MAX_TENSOR_NAME)
            return P_FMT(P, STRATA_ERR_FORMAT, "tensor %lld name '%s' at offset %llu is %llu bytes: "
                         "GGUF limits tensor names to %u bytes with the terminating NUL (at most "
                         "%u), as llama.cpp does", (long long)i, P->what, OFF(ax->name_off),
                         OFF(ax->name_len), ST_GGUF_MAX_TENSOR_NAME, ST_GGUF_MAX_TENSOR_NAME - 1);
        ti->name = (const char *)np; /* replaced by the arena copy in pass 2 */

        at = c->pos;
        if (!st_cur_u32(c, &nd))
            return st_cur_truncated(c, 4, P->sfx, "tensor %lld '%s' n_dims", (long long)i, P->what);
        if (nd < 1 || nd > 4)
            return P_FMT(P, STRATA_ERR_FORMAT, "tensor %lld '%s' n_dims at offset %llu is %u (must "
                         "be 1..4)", (long long)i, P->what, OFF(at), nd);
        ti->n_dims = nd;
        int64_t nel = 1;
        uint64_t ne_off = c->pos;
        for (uint32_t d = 0; d < 4; d++) ti->ne[d] = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t v;
            at = c->pos;
            if (!st_cur_u64(c, &v))
                return st_cur_truncated(c, 8, P->sfx, "tensor %lld '%s' ne[%u]", (long long)i,
                                        P->what, d);
            if (v == 0 || v > (uint64_t)INT64_MAX)
                return P_FMT(P, STRATA_ERR_FORMAT, "tensor %lld '%s' ne[%u] at offset %llu is %llu "
                             "(dimensions must be 1..INT64_MAX)", (long long)i, P->what, d,
                             OFF(at), OFF(v));
            if (st_mul_overflow_i64(nel, (int64_t)v, &nel))
                return P_FMT(P, STRATA_ERR_FORMAT, "tensor %lld '%s' ne[%u] at offset %llu: the "
                             "element count overflows int64", (long long)i, P->what, d, OFF(at));
            ti->ne[d] = (int64_t)v;
        }
        ti->n_elements = nel;

        at = c->pos;
        if (!st_cur_u32(c, &type))
            return st_cur_truncated(c, 4, P->sfx, "tensor %lld '%s' type", (long long)i, P->what);
        if (!strata_type_is_known((int)type))
            return P_FMT(P, STRATA_ERR_FORMAT, "tensor %lld '%s' type at offset %llu is %u, not a "
                         "known tensor type", (long long)i, P->what, OFF(at), type);
        ti->type = (strata_type)type;
        int64_t bs = strata_type_block_size(ti->type);
        if (ti->ne[0] % bs != 0)
            return P_FMT(P, STRATA_ERR_FORMAT, "tensor %lld '%s' ne[0] = %lld (at offset %llu) is "
                         "not a multiple of the %s block size %lld", (long long)i, P->what,
                         (long long)ti->ne[0], OFF(ne_off), strata_type_name(ti->type),
                         (long long)bs);
        int64_t bytes = strata_row_bytes(ti->type, ti->ne[0]);
        if (bytes < 0 || st_mul_overflow_i64(bytes, ti->ne[1], &bytes) ||
            st_mul_overflow_i64(bytes, ti->ne[2], &bytes) ||
            st_mul_overflow_i64(bytes, ti->ne[3], &bytes))
            return P_FMT(P, STRATA_ERR_FORMAT, "tensor %lld '%s' (dims at offset %llu): the byte "
                         "size overflows int64", (long long)i, P->what, OFF(ne_off));
        ti->n_bytes = (uint64_t)bytes;

        ax->off_field = c->pos;
        if (!st_cur_u64(c, &ti->offset))
            return st_cur_truncated(c, 8, P->sfx, "tensor %lld '%s' data offset", (long long)i,
                                    P->what);
        if (ti->offset % f->alignment != 0)
            return P_FMT(P, STRATA_ERR_FORMAT, "tensor %lld '%s' data offset %llu (field at offset "
                         "%llu) is not a multiple of the alignment %u", (long long)i, P->what,
                         OFF(ti->offset), OFF(ax->off_field), f->alignment);
    }
    return STRATA_OK;
}

/* ==== pass 1: data section bounds and overlaps =============================================== */

typedef struct { uint64_t off; int64_t i; } st_off_idx;

static int st_cmp_off(const void *a, const void *b) {
    const st_off_idx *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

static strata_status p_data(st_parser *P) {
    st_gguf_file *f = P->f;
    uint64_t end = P->cur.pos, a = f->alignment;
    uint64_t start = end + (a - end % a) % a; /* end <= size < 2^63: no overflow */
    if (f->n_tensors == 0) {
        f->data_start = start < f->size ? start : f->size;
        return STRATA_OK;
    }
    if (start > f->size)
        return P_FMT(P, STRATA_ERR_FORMAT, "tensor data section starts at offset %llu (tensor "
                     "infos end at %llu, aligned to %u), past the end of the file (%llu bytes)",
                     OFF(start), OFF(end), f->alignment, OFF(f->size));
    f->data_start = start;
    uint64_t data_len = f->size - start;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const strata_tensor_info *ti = &f->tensors[i];
        char nm[128];
        st_gguf_printable(nm, sizeof nm, ti->name, P->aux[i].name_len);
        if (ti->offset >= data_len)
            return P_FMT(P, STRATA_ERR_FORMAT, "tensor %lld '%s' data offset %llu (field at offset "
                         "%llu) starts past the end of the file: the data section at offset %llu "
                         "holds %llu bytes", (long long)i, nm, OFF(ti->offset),
                         OFF(P->aux[i].off_field), OFF(start), OFF(data_len));
        if (ti->n_bytes > data_len - ti->offset)
            return P_FMT(P, STRATA_ERR_FORMAT, "tensor %lld '%s' data at file offset %llu (+%llu "
                         "bytes) extends past the end of the file (%llu bytes)", (long long)i, nm,
                         OFF(start + ti->offset), OFF(ti->n_bytes), OFF(f->size));
    }
    st_off_idx *s = malloc((size_t)f->n_tensors * sizeof *s);
    if (!s) return P_FMT(P, STRATA_ERR_NOMEM, "out of memory sorting %lld tensors",
                         (long long)f->n_tensors);
    for (int64_t i = 0; i < f->n_tensors; i++) s[i] = (st_off_idx){f->tensors[i].offset, i};
    qsort(s, (size_t)f->n_tensors, sizeof *s, st_cmp_off);
    strata_status st = STRATA_OK;
    for (int64_t k = 0; k + 1 < f->n_tensors; k++) {
        const strata_tensor_info *x = &f->tensors[s[k].i], *y = &f->tensors[s[k + 1].i];
        if (x->offset + x->n_bytes > y->offset) {
            char nx[96], ny[96];
            st_gguf_printable(nx, sizeof nx, x->name, P->aux[s[k].i].name_len);
            st_gguf_printable(ny, sizeof ny, y->name, P->aux[s[k + 1].i].name_len);
            st = P_FMT(P, STRATA_ERR_FORMAT, "tensor %lld '%s' (data offset %llu, %llu bytes) and "
                       "tensor %lld '%s' (data offset %llu) overlap", (long long)s[k].i, nx,
                       OFF(x->offset), OFF(x->n_bytes), (long long)s[k + 1].i, ny,
                       OFF(y->offset));
            break;
        }
    }
    free(s);
    return st;
}

/* ==== pass 2: names and array indexes ======================================================== */

static strata_status f_array(st_parser *P, st_gguf_arr *a) {
    st_cursor *c = &P->cur;
    uint32_t et;
    uint64_t n;
    if (!st_cur_u32(c, &et) || !st_cur_u64(c, &n)) goto bug;
    a->elem_type = (strata_gguf_type)et;
    a->count = n;
    a->data = c->base + c->pos;
    a->str = NULL;
    a->sub = NULL;
    if (et == STRATA_GGUF_STRING) {
        if ((uint64_t)(P->str_end - P->str_next) < n) goto bug;
        const uint8_t **idx = P->str_next;
        P->str_next += n;
        a->str = idx;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t len;
            idx[i] = c->base + c->pos;
            if (!st_cur_u64(c, &len) || !st_cur_skip(c, len)) goto bug;
        }
    } else if (et == STRATA_GGUF_ARRAY) {
        if ((uint64_t)(P->arr_end - P->arr_next) < n) goto bug;
        st_gguf_arr *sub = P->arr_next;
        P->arr_next += n;
        a->sub = sub;
        for (uint64_t i = 0; i < n; i++) ST_TRY(f_array(P, &sub[i]));
    } else {
        if (!st_cur_skip(c, n * st_gguf_scalar_size[et])) goto bug;
    }
    return STRATA_OK;
bug:
    return P_FMT(P, STRATA_ERR_INTERNAL, "array index pass disagrees with validation at offset "
                 "%llu", OFF(c->pos));
}

static strata_status p_index(st_parser *P) {
    st_gguf_file *f = P->f;
    /* names: one arena, NUL-terminated copies */
    f->names = malloc(P->name_bytes ? P->name_bytes : 1);
    if (!f->names) return P_FMT(P, STRATA_ERR_NOMEM, "out of memory for %llu bytes of names",
                                OFF(P->name_bytes));
    char *w = f->names;
    for (int64_t i = 0; i < f->n_kv; i++) {
        memcpy(w, f->kvs[i].key, f->kvs[i].key_len);
        w[f->kvs[i].key_len] = '\0';
        f->kvs[i].key = w;
        w += f->kvs[i].key_len + 1;
    }
    for (int64_t i = 0; i < f->n_tensors; i++) {
        memcpy(w, f->tensors[i].name, P->aux[i].name_len);
        w[P->aux[i].name_len] = '\0';
        f->tensors[i].name = w;
        w += P->aux[i].name_len + 1;
    }
    /* arrays (pools never NULL, even when empty: pointer arithmetic on them stays defined) */
    f->arrs = calloc(P->n_arrs ? P->n_arrs : 1, sizeof *f->arrs);
    if (!f->arrs) return P_FMT(P, STRATA_ERR_NOMEM, "out of memory for %llu array descriptors",
                               OFF(P->n_arrs));
    f->strs = malloc((P->n_strs ? P->n_strs : 1) * sizeof *f->strs);
    if (!f->strs) return P_FMT(P, STRATA_ERR_NOMEM, "out of memory indexing %llu strings",
                               OFF(P->n_strs));
    P->arr_next = f->arrs;
    P->arr_end = f->arrs + P->n_arrs;
    P->str_next = f->strs;
    P->str_end = f->strs + P->n_strs;
    for (int64_t i = 0; i < f->n_kv; i++) {
        st_gguf_kv *kv = &f->kvs[i];
        if (kv->type != STRATA_GGUF_ARRAY) continue;
        if (P->arr_next == P->arr_end)
            return P_FMT(P, STRATA_ERR_INTERNAL, "array count mismatch at key %lld", (long long)i);
        st_gguf_arr *a = P->arr_next++;
        P->cur.pos = (uint64_t)(kv->val - f->data);
        ST_TRY(f_array(P, a));
        kv->arr = a;
    }
    return STRATA_OK;
}

/* ==== duplicates and split metadata ========================================================== */

static strata_status p_duplicates(st_parser *P) {
    st_gguf_file *f = P->f;
    st_name_index ix = {0};
    int64_t a = -1, b = -1;
    strata_status st = st_name_index_build(&ix, f->n_kv, st_file_kv_name, f->kvs, &a, &b);
    st_name_index_free(&ix);
    if (st == STRATA_ERR_FORMAT) {
        char nm[128];
        st_gguf_printable(nm, sizeof nm, f->kvs[a].key, f->kvs[a].key_len);
        return P_FMT(P, st, "duplicate key '%s': key %lld at offset %llu repeats key %lld at "
                     "offset %llu", nm, (long long)b, OFF(f->kvs[b].key_offset), (long long)a,
                     OFF(f->kvs[a].key_offset));
    }
    ST_TRY(st);
    st = st_name_index_build(&ix, f->n_tensors, st_file_tensor_name, f->tensors, &a, &b);
    st_name_index_free(&ix);
    if (st == STRATA_ERR_FORMAT) {
        char nm[128];
        st_gguf_printable(nm, sizeof nm, f->tensors[a].name, P->aux[a].name_len);
        return P_FMT(P, st, "duplicate tensor name '%s': tensor %lld (info at offset %llu) repeats "
                     "tensor %lld (info at offset %llu)", nm, (long long)b,
                     OFF(P->aux[b].name_off), (long long)a, OFF(P->aux[a].name_off));
    }
    return st;
}

int st_gguf_file_get_uint(const st_gguf_file *f, const char *key, uint64_t *out, int64_t *index) {
    for (int64_t i = 0; i < f->n_kv; i++) {
        const st_gguf_kv *kv = &f->kvs[i];
        if (strcmp(kv->key, key) != 0) continue;
        if (index) *index = i;
        const uint8_t *p = kv->val;
        switch (kv->type) {
        case STRATA_GGUF_UINT8: *out = p[0]; return 1;
        case STRATA_GGUF_UINT16: *out = st_le_u16(p); return 1;
        case STRATA_GGUF_UINT32: *out = st_le_u32(p); return 1;
        case STRATA_GGUF_UINT64: *out = st_le_u64(p); return 1;
        case STRATA_GGUF_INT8: if ((int8_t)p[0] < 0) return -1; *out = p[0]; return 1;
        case STRATA_GGUF_INT16: if ((int16_t)st_le_u16(p) < 0) return -1;
            *out = st_le_u16(p); return 1;
        case STRATA_GGUF_INT32: if ((int32_t)st_le_u32(p) < 0) return -1;
            *out = st_le_u32(p); return 1;
        case STRATA_GGUF_INT64: if ((int64_t)st_le_u64(p) < 0) return -1;
            *out = st_le_u64(p); return 1;
        default: return -1;
        }
    }
    return 0;
}

/* The split.* keys of one image, checked for consistency on their own (a lone shard is valid
 * alone; gguf_split.c checks the shards against each other). */
static strata_status p_split_meta(st_parser *P) {
    st_gguf_file *f = P->f;
    uint64_t count = 0, no = 0, tc = 0;
    int64_t ic = -1, ino = -1, itc = -1;
    int hc = st_gguf_file_get_uint(f, "split.count", &count, &ic);
    int hn = st_gguf_file_get_uint(f, "split.no", &no, &ino);
    int ht = st_gguf_file_get_uint(f, "split.tensors.count", &tc, &itc);
    if (hc < 0)
        return P_FMT(P, STRATA_ERR_FORMAT, "split.count (key %lld at offset %llu) must be a "
                     "non-negative integer", (long long)ic, OFF(f->kvs[ic].key_offset));
    if (hn < 0)
        return P_FMT(P, STRATA_ERR_FORMAT, "split.no (key %lld at offset %llu) must be a "
                     "non-negative integer", (long long)ino, OFF(f->kvs[ino].key_offset));
    if (ht < 0)
        return P_FMT(P, STRATA_ERR_FORMAT, "split.tensors.count (key %lld at offset %llu) must be "
                     "a non-negative integer", (long long)itc, OFF(f->kvs[itc].key_offset));
    if (hc > 0 && count == 0)
        return P_FMT(P, STRATA_ERR_FORMAT, "split.count (key %lld at offset %llu) is 0",
                     (long long)ic, OFF(f->kvs[ic].key_offset));
    if (hc > 0 && hn > 0 && no >= count)
        return P_FMT(P, STRATA_ERR_FORMAT, "split.no (key %lld at offset %llu) is %llu but "
                     "split.count is %llu", (long long)ino, OFF(f->kvs[ino].key_offset), OFF(no),
                     OFF(count));
    if (hc > 0 && count == 1 && ht > 0 && tc != (uint64_t)f->n_tensors)
        return P_FMT(P, STRATA_ERR_FORMAT, "split.tensors.count (key %lld at offset %llu) is %llu "
                     "but the file holds %lld tensors", (long long)itc,
                     OFF(f->kvs[itc].key_offset), OFF(tc), (long long)f->n_tensors);
    return STRATA_OK;
}

/* ==== header and driver ====================================================================== */

static strata_status p_header(st_parser *P) {
    st_gguf_file *f = P->f;
    st_cursor *c = &P->cur;
    const uint8_t *magic;
    uint32_t v;
    uint64_t nt, nkv;
    if (f->size == 0) return P_FMT(P, STRATA_ERR_FORMAT, "empty file (0 bytes)%s", "");
    if (!st_cur_bytes(c, 4, &magic)) return st_cur_truncated(c, 4, P->sfx, "magic");
    if (memcmp(magic, "GGUF", 4) != 0)
        return P_FMT(P, STRATA_ERR_FORMAT, "bad magic at offset 0: expected 'GGUF' (47 47 55 46), "
                     "found %02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
    if (!st_cur_u32(c, &v)) return st_cur_truncated(c, 4, P->sfx, "version");
    if (v != 2 && v != 3) {
        uint32_t sw = __builtin_bswap32(v);
        if (sw >= 1 && sw <= 3)
            return P_FMT(P, STRATA_ERR_FORMAT, "version at offset 4 reads 0x%08x: a big-endian "
                         "GGUF file (version %u), which is not supported", v, sw);
        if (v == 1)
            return P_FMT(P, STRATA_ERR_FORMAT, "version at offset 4 is 1: GGUF v1 is not "
                         "supported (need 2 or 3)%s", "");
        return P_FMT(P, STRATA_ERR_FORMAT, "version at offset 4 is %u: unsupported (need 2 or 3)",
                     v);
    }
    f->version = v;
    if (!st_cur_u64(c, &nt)) return st_cur_truncated(c, 8, P->sfx, "n_tensors");
    if (!st_cur_u64(c, &nkv)) return st_cur_truncated(c, 8, P->sfx, "n_kv");
    uint64_t left = st_cur_left(c);
    if (nkv > left / 12)
        return P_FMT(P, STRATA_ERR_FORMAT, "n_kv at offset 16 is %llu, but the %llu bytes left "
                     "hold at most %llu key/value pairs (12 bytes each)", OFF(nkv), OFF(left),
                     OFF(left / 12));
    if (nt > left / 24 || nt * 24 > left - nkv * 12)
        return P_FMT(P, STRATA_ERR_FORMAT, "n_tensors at offset 8 is %llu, but the %llu bytes left "
                     "after %llu key/value pairs hold at most %llu tensor infos (24 bytes each)",
                     OFF(nt), OFF(left), OFF(nkv), OFF((left - nkv * 12) / 24));
    f->n_kv = (int64_t)nkv;
    f->n_tensors = (int64_t)nt;
    return STRATA_OK;
}

strata_status st_gguf_file_parse(st_gguf_file *f, const strata_gguf_params *params) {
    st_parser P;
    memset(&P, 0, sizeof P);
    P.f = f;
    P.cur = st_cursor_make(f->data, f->size);
    st_gguf_file_suffix(f, P.sfx, sizeof P.sfx);
    f->alignment = ST_GGUF_DEFAULT_ALIGNMENT;

    ST_TRY(p_header(&P));
    /* counts are bounded by the image size (p_header), so these allocations are too */
    f->kvs = calloc(f->n_kv ? (size_t)f->n_kv : 1, sizeof *f->kvs);
    f->tensors = calloc(f->n_tensors ? (size_t)f->n_tensors : 1, sizeof *f->tensors);
    P.aux = calloc(f->n_tensors ? (size_t)f->n_tensors : 1, sizeof *P.aux);
    strata_status st;
    if (!f->kvs || !f->tensors || !P.aux) {
        st = P_FMT(&P, STRATA_ERR_NOMEM, "out of memory for %lld key/value pairs and %lld tensors",
                   (long long)f->n_kv, (long long)f->n_tensors);
        goto done;
    }
    if ((st = p_kvs(&P, params)) != STRATA_OK) goto done;
    uint64_t left = st_cur_left(&P.cur);
    if ((uint64_t)f->n_tensors > left / 24) {
        st = P_FMT(&P, STRATA_ERR_FORMAT, "n_tensors at offset 8 is %lld, but the %llu bytes left "
                   "after the key/value pairs (offset %llu) hold at most %llu tensor infos",
                   (long long)f->n_tensors, OFF(left), OFF(P.cur.pos), OFF(left / 24));
        goto done;
    }
    if ((st = p_tensors(&P)) != STRATA_OK) goto done;
    if ((st = p_data(&P)) != STRATA_OK) goto done;
    if ((st = p_index(&P)) != STRATA_OK) goto done;
    if ((st = p_duplicates(&P)) != STRATA_OK) goto done;
    st = p_split_meta(&P);
done:
    free(P.aux);
    return st;
}

void st_gguf_file_release(st_gguf_file *f) {
    if (!f) return;
    free(f->kvs);
    free(f->tensors);
    free(f->names);
    free(f->arrs);
    free(f->strs);
    f->kvs = NULL;
    f->tensors = NULL;
    f->names = NULL;
    f->arrs = NULL;
    f->strs = NULL;
    /* the image itself is released by gguf_split.c, which knows how it was obtained */
}
