/* imatrix.c - importance matrices in llama.cpp's GGUF imatrix format (tools/imatrix): writing one
 * (strata_imatrix_write: general.type "imatrix", imatrix.datasets, imatrix.chunk_count,
 * imatrix.chunk_size, and per weight tensor NAME the f32 tensors NAME.in_sum2 [n_cols, n_mat],
 * the sums of squared input activations per column, and NAME.counts [1, n_mat], the rows
 * summed) and reading a tensor's importance from one for strata_quantize_file (in_sum2 / counts
 * per column and matrix, 1 where a matrix saw no rows: llama-quantize's rule). */
#include "imatrix.h"
#include "gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------------------------- */

static int entry_cmp(const void *a, const void *b) {
    return strcmp(((const strata_imatrix_entry *)a)->name, ((const strata_imatrix_entry *)b)->name);
}

/* The entries' data in the file's f32 layout: sums, then counts, per entry (name order). */
typedef struct {
    const strata_imatrix_entry *e; /* sorted */
} st_im_ctx;

static strata_status fill_entry(void *vctx, int64_t index, void *dst, uint64_t n_bytes) {
    const st_im_ctx *ctx = vctx;
    const strata_imatrix_entry *e = &ctx->e[index / 2];
    float *out = dst;
    if (index % 2 == 0) {
        memcpy(out, e->sums, (size_t)n_bytes);
    } else {
        for (int64_t m = 0; m < e->n_mat; m++) out[m] = (float)e->counts[m];
    }
    return STRATA_OK;
}

static strata_status check_entry(const strata_imatrix_entry *e, int64_t i) {
    if (!e->name || !e->sums || !e->counts)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_imatrix_write: entry %lld has a NULL name, "
                        "sums or counts", (long long)i);
    if (e->n_cols <= 0 || e->n_mat <= 0)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_imatrix_write: entry '%s' has %lld columns "
                        "and %lld matrices", e->name, (long long)e->n_cols, (long long)e->n_mat);
    if (strlen(e->name) + sizeof ".in_sum2" > 64)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_imatrix_write: name '%s' is too long for a "
                        "GGUF tensor name", e->name);
    return STRATA_OK;
}

static strata_status write_entries(st_gguf_writer *w, st_im_ctx *ctx, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const strata_imatrix_entry *e = &ctx->e[i];
        char name[80];
        const int64_t ne_s[2] = {e->n_cols, e->n_mat}, ne_c[2] = {1, e->n_mat};
        snprintf(name, sizeof name, "%s.in_sum2", e->name);
        ST_TRY(st_gguf_writer_add_tensor_fill(w, name, STRATA_TYPE_F32, 2, ne_s, fill_entry, ctx));
        snprintf(name, sizeof name, "%s.counts", e->name);
        ST_TRY(st_gguf_writer_add_tensor_fill(w, name, STRATA_TYPE_F32, 2, ne_c, fill_entry, ctx));
    }
    return STRATA_OK;
}

strata_status strata_imatrix_write(const char *path, const strata_imatrix_entry *entries, int64_t n,
                                   const char *const *datasets, int64_t n_datasets,
                                   uint32_t chunk_count, uint32_t chunk_size) {
    if (!path || (n > 0 && !entries) || n < 0 || n_datasets < 0 || (n_datasets > 0 && !datasets))
        return st_error(STRATA_ERR_INVALID_ARG, "strata_imatrix_write: NULL or negative argument");
    for (int64_t i = 0; i < n; i++) ST_TRY(check_entry(&entries[i], i));
    strata_imatrix_entry *sorted = malloc(sizeof *sorted * (size_t)(n > 0 ? n : 1));
    if (!sorted) return st_error(STRATA_ERR_NOMEM, "strata_imatrix_write: out of memory");
    if (n > 0) memcpy(sorted, entries, sizeof *sorted * (size_t)n);
    qsort(sorted, (size_t)n, sizeof *sorted, entry_cmp); /* llama.cpp's order: by name */
    st_im_ctx ctx = {sorted};
    st_gguf_writer *w = NULL;
    strata_status st = st_gguf_writer_create(path, 32, &w);
    if (st == STRATA_OK) st = st_gguf_writer_set_str(w, "general.type", "imatrix");
    if (st == STRATA_OK)
        st = st_gguf_writer_set_str_array(w, "imatrix.datasets", datasets, (uint64_t)n_datasets);
    if (st == STRATA_OK) st = st_gguf_writer_set_u32(w, "imatrix.chunk_count", chunk_count);
    if (st == STRATA_OK) st = st_gguf_writer_set_u32(w, "imatrix.chunk_size", chunk_size);
    if (st == STRATA_OK) st = write_entries(w, &ctx, n);
    if (st == STRATA_OK) st = st_gguf_writer_finish(w);
    st_gguf_writer_free(w);
    free(sorted);
    if (st == STRATA_OK) st_error_clear();
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * Reading one tensor's importance
 * ------------------------------------------------------------------------------------------- */

/* Tensor `name` + suffix of im as f32 data; NULL (no error) if absent. */
static strata_status find_f32(const strata_gguf *im, const char *name, const char *suffix,
                              strata_tensor_info *out, int *found) {
    char key[160];
    snprintf(key, sizeof key, "%s%s", name, suffix);
    *found = 0;
    const int64_t i = strata_gguf_tensor_find(im, key);
    if (i < 0) return STRATA_OK;
    ST_TRY(strata_gguf_tensor_info(im, i, out));
    if (out->type != STRATA_TYPE_F32)
        return st_error(STRATA_ERR_INVALID_ARG, "imatrix: tensor '%s' is %s, not f32", key,
                        strata_type_name(out->type));
    *found = 1;
    return STRATA_OK;
}

strata_status st_imatrix_importance(const strata_gguf *im, const char *name, const int64_t *ne,
                                    uint32_t n_dims, float **out) {
    *out = NULL;
    strata_tensor_info s, c;
    int has_s, has_c;
    ST_TRY(find_f32(im, name, ".in_sum2", &s, &has_s));
    ST_TRY(find_f32(im, name, ".counts", &c, &has_c));
    if (!has_s && !has_c) return STRATA_OK;
    if (!has_s || !has_c)
        return st_error(STRATA_ERR_INVALID_ARG, "imatrix: '%s' has %s but no %s", name,
                        has_s ? "in_sum2" : "counts", has_s ? "counts" : "in_sum2");
    const int64_t n_cols = ne[0], n_mat = n_dims >= 3 ? ne[2] : 1;
    const int64_t s_mat = s.n_elements / (s.ne[0] ? s.ne[0] : 1);
    if (s.ne[0] != n_cols || s_mat != n_mat || c.n_elements != n_mat)
        return st_error(STRATA_ERR_INVALID_ARG, "imatrix: '%s' has sums of %lld columns x %lld "
                        "matrices and %lld counts, but the tensor has rows of %lld and %lld "
                        "matrices: the importance matrix is another model's", name,
                        (long long)s.ne[0], (long long)s_mat, (long long)c.n_elements,
                        (long long)n_cols, (long long)n_mat);
    float *imp = malloc(sizeof *imp * (size_t)(n_cols * n_mat));
    if (!imp) return st_error(STRATA_ERR_NOMEM, "imatrix: out of memory for '%s'", name);
    const float *sums = s.data, *counts = c.data;
    for (int64_t m = 0; m < n_mat; m++) {
        const float cnt = counts[m];
        for (int64_t i = 0; i < n_cols; i++)
            imp[m * n_cols + i] = cnt > 0.0f ? sums[m * n_cols + i] / cnt : 1.0f;
    }
    *out = imp;
    return STRATA_OK;
}
