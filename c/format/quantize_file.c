/* quantize_file.c - strata_quantize_file: rewrites a GGUF model with its weights converted to
 * another block type (the rules are in strata.h, section "Model files"). Plans every tensor
 * first (so rule violations fail before any byte is written), then streams the output through
 * the GGUF writer, converting one tensor at a time with rows split over worker threads; with an
 * importance matrix each tensor's importance is read at planning (imatrix.c). */
#include "common.h"
#include "gguf_writer.h"
#include "imatrix.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * Target types and llama.cpp's general.file_type values
 * ------------------------------------------------------------------------------------------- */

/* Every type strata_quantize_row writes except Q8_K (an activation format, not a file's). */
static int is_target_type(strata_type t) {
    return strata_type_is_known((int)t) && strata_type_can_quantize(t) && t != STRATA_TYPE_Q8_K;
}

/* llama.cpp's llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q8_0 7, MOSTLY_Q2_K 10,
 * and for a type whose family has size variants the variant with nothing promoted (the closest
 * to "all weights of that type"): MOSTLY_Q3_K_S 11, MOSTLY_Q4_K_S 14, MOSTLY_Q5_K_S 16; then
 * MOSTLY_Q6_K 18, IQ2_XXS 19, IQ2_XS 20, IQ3_XXS 23, IQ1_S 24, IQ4_NL 25, IQ3_S 26, IQ2_S 28,
 * IQ4_XS 30, IQ1_M 31, BF16 32, MXFP4_MOE 38. */
static uint32_t file_type_of(strata_type t) {
    switch (t) {
    case STRATA_TYPE_F32: return 0;
    case STRATA_TYPE_F16: return 1;
    case STRATA_TYPE_Q4_0: return 2;
    case STRATA_TYPE_Q8_0: return 7;
    case STRATA_TYPE_Q2_K: return 10;
    case STRATA_TYPE_Q3_K: return 11;
    case STRATA_TYPE_Q4_K: return 14;
    case STRATA_TYPE_Q5_K: return 16;
    case STRATA_TYPE_Q6_K: return 18;
    case STRATA_TYPE_IQ2_XXS: return 19;
    case STRATA_TYPE_IQ2_XS: return 20;
    case STRATA_TYPE_IQ3_XXS: return 23;
    case STRATA_TYPE_IQ1_S: return 24;
    case STRATA_TYPE_IQ4_NL: return 25;
    case STRATA_TYPE_IQ3_S: return 26;
    case STRATA_TYPE_IQ2_S: return 28;
    case STRATA_TYPE_IQ4_XS: return 30;
    case STRATA_TYPE_IQ1_M: return 31;
    case STRATA_TYPE_BF16: return 32;
    case STRATA_TYPE_MXFP4: return 38;
    default: return 0;
    }
}

/* The target of weight `name` under the mix: ffn_down (dense or experts) -> type_down, other
 * expert tensors (ffn_*_exps) -> type_experts, everything else -> type_dense; each defaulting
 * (when negative) to type. */
static strata_type target_of(const char *name, const strata_quantize_params *p) {
    int t = p->type_dense;
    if (strstr(name, "ffn_down") != NULL) t = p->type_down;
    else if (strstr(name, "_exps") != NULL) t = p->type_experts;
    return t < 0 ? p->type : (strata_type)t;
}

static int is_float_type(strata_type t) {
    return t == STRATA_TYPE_F32 || t == STRATA_TYPE_F16 || t == STRATA_TYPE_BF16;
}

/* Block-quantized types (block size > 1); plain integer and f64 tensors are not weights. */
static int is_block_type(strata_type t) { return strata_type_block_size(t) > 1; }

/* ---------------------------------------------------------------------------------------------
 * Planning
 * ------------------------------------------------------------------------------------------- */

enum { ST_Q_KEEP = 0, ST_Q_CONVERT = 1, ST_Q_FALLBACK = 2 };

typedef struct {
    strata_tensor_info info;
    strata_type out_type;
    int action;
    float *importance;   /* [n_mat][ne[0]] for a type that takes it, from the imatrix; or NULL */
} st_qplan;

static strata_status plan_tensor(const strata_tensor_info *t, const strata_quantize_params *p,
                                 st_qplan *out) {
    out->info = *t;
    out->out_type = t->type;
    out->action = ST_Q_KEEP;
    if (t->n_dims < 2 || t->n_elements == 0) return STRATA_OK; /* norms, biases; empty */
    strata_type want;
    if (strstr(t->name, "ffn_gate_inp") != NULL) { /* router: exact routing needs f32 */
        if (!is_float_type(t->type)) return STRATA_OK;
        want = STRATA_TYPE_F32;
    } else {
        if (!is_float_type(t->type) && !is_block_type(t->type)) return STRATA_OK; /* i8.., f64 */
        want = target_of(t->name, p);
    }
    int action = ST_Q_CONVERT;
    if (t->ne[0] % strata_type_block_size(want) != 0) {
        if (t->ne[0] % 32 != 0) return STRATA_OK; /* fits no block type: keep */
        want = STRATA_TYPE_Q8_0;
        action = ST_Q_FALLBACK;
    }
    if (want == t->type) return STRATA_OK;
    if (!is_float_type(t->type) && !p->allow_requantize)
        return st_error(STRATA_ERR_INVALID_ARG, "quantize: tensor '%s' is already %s; converting it "
                        "to %s needs allow_requantize", t->name, strata_type_name(t->type),
                        strata_type_name(want));
    if (!strata_type_can_dequantize(t->type))
        return st_error(STRATA_ERR_UNSUPPORTED, "quantize: tensor '%s': type %s cannot be "
                        "dequantized", t->name, strata_type_name(t->type));
    if (!strata_type_can_quantize(want))
        return st_error(STRATA_ERR_UNSUPPORTED, "quantize: tensor '%s': this build cannot quantize "
                        "to %s", t->name, strata_type_name(want));
    out->out_type = want;
    out->action = action;
    return STRATA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Conversion: rows split over threads
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const st_qplan *plan;
    uint8_t *dst;
    int64_t row0, row1;
    strata_status status;
    char message[512];
} st_qjob;

/* Row r's importance: its matrix's (rows per matrix ne[1]), or NULL. */
static const float *row_importance(const st_qplan *pl, int64_t r) {
    if (!pl->importance) return NULL;
    return pl->importance + (pl->info.n_dims >= 3 ? r / pl->info.ne[1] : 0) * pl->info.ne[0];
}

static strata_status convert_rows(const st_qplan *pl, uint8_t *dst, int64_t row0, int64_t row1) {
    const int64_t n = pl->info.ne[0];
    const int64_t in_row = strata_row_bytes(pl->info.type, n);
    const int64_t out_row = strata_row_bytes(pl->out_type, n);
    float *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp) return st_error(STRATA_ERR_NOMEM, "quantize: out of memory for a row of %lld floats",
                              (long long)n);
    strata_status st = STRATA_OK;
    const uint8_t *src = pl->info.data;
    for (int64_t r = row0; r < row1 && st == STRATA_OK; r++) {
        st = strata_dequantize_row(pl->info.type, src + r * in_row, tmp, n);
        if (st == STRATA_OK)
            st = strata_quantize_row_importance(pl->out_type, tmp, dst + r * out_row, n,
                                                row_importance(pl, r));
        if (st != STRATA_OK)
            st = st_error(st, "quantize: tensor '%s' row %lld: %s", pl->info.name, (long long)r,
                          strata_last_error());
    }
    free(tmp);
    return st;
}

static void *convert_worker(void *arg) {
    st_qjob *job = arg;
    job->status = convert_rows(job->plan, job->dst, job->row0, job->row1);
    if (job->status != STRATA_OK) snprintf(job->message, sizeof job->message, "%s", strata_last_error());
    return NULL;
}

typedef struct {
    const st_qplan *plans;
    int n_threads;
} st_qctx;

static strata_status fill_tensor(void *vctx, int64_t index, void *dst, uint64_t n_bytes) {
    st_qctx *ctx = vctx;
    const st_qplan *pl = &ctx->plans[index];
    if (pl->action == ST_Q_KEEP) { /* (kept tensors are added with their data; not reached) */
        memcpy(dst, pl->info.data, (size_t)n_bytes);
        return STRATA_OK;
    }
    const int64_t rows = pl->info.n_elements / pl->info.ne[0];
    int nt = ctx->n_threads;
    if ((int64_t)nt > rows) nt = (int)rows;
    if (pl->info.n_elements < 65536 || nt < 1) nt = 1;
    if (nt == 1) return convert_rows(pl, dst, 0, rows);

    st_qjob jobs[256];
    pthread_t th[256];
    int started[256] = {0};
    for (int i = 0; i < nt; i++)
        jobs[i] = (st_qjob){pl, dst, rows * i / nt, rows * (i + 1) / nt, STRATA_OK, ""};
    for (int i = 1; i < nt; i++)
        started[i] = pthread_create(&th[i], NULL, convert_worker, &jobs[i]) == 0;
    convert_worker(&jobs[0]);
    for (int i = 1; i < nt; i++) { /* a thread that could not start: its rows are done here */
        if (started[i]) pthread_join(th[i], NULL);
        else convert_worker(&jobs[i]);
    }
    for (int i = 0; i < nt; i++)
        if (jobs[i].status != STRATA_OK) return st_error(jobs[i].status, "%s", jobs[i].message);
    return STRATA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------------------------- */

strata_quantize_params strata_quantize_default_params(void) {
    strata_quantize_params p;
    memset(&p, 0, sizeof p);
    p.type = STRATA_TYPE_Q8_0;
    p.type_experts = p.type_dense = p.type_down = -1;
    return p;
}

static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static strata_status copy_metadata(const strata_gguf *in, st_gguf_writer *w, strata_type type) {
    const int64_t n_kv = strata_gguf_kv_count(in);
    for (int64_t i = 0; i < n_kv; i++) {
        const char *key = strata_gguf_kv_key(in, i);
        if (!key) return st_error(STRATA_ERR_INTERNAL, "quantize: key %lld missing", (long long)i);
        if (strncmp(key, "split.", 6) == 0) continue; /* the output is one file */
        strata_gguf_value v;
        ST_TRY(strata_gguf_kv_value(in, i, &v));
        ST_TRY(st_gguf_writer_set_value(w, key, in, &v));
    }
    return st_gguf_writer_set_u32(w, "general.file_type", file_type_of(type));
}

/* llama-quantize's record of the importance matrix used: its file, entries and chunks. */
static strata_status imatrix_metadata(const strata_gguf *im, const char *path, st_gguf_writer *w,
                                      int64_t n_used) {
    ST_TRY(st_gguf_writer_set_str(w, "quantize.imatrix.file", path));
    ST_TRY(st_gguf_writer_set_i32(w, "quantize.imatrix.entries_count", (int32_t)n_used));
    uint64_t chunks = 0;
    if (strata_gguf_kv_find(im, "imatrix.chunk_count") >= 0)
        ST_TRY(strata_gguf_get_u64(im, "imatrix.chunk_count", &chunks));
    return st_gguf_writer_set_i32(w, "quantize.imatrix.chunks_count", (int32_t)chunks);
}

static strata_status quantize_open(const strata_gguf *in, const strata_gguf *im, const char *out_path,
                                   const strata_quantize_params *p, st_qctx *ctx,
                                   st_qplan *plans, int64_t n_tensors, st_gguf_writer **wout,
                                   strata_quantize_stats *stats_out) {
    strata_quantize_stats stats;
    memset(&stats, 0, sizeof stats);
    for (int64_t i = 0; i < n_tensors; i++) {
        strata_tensor_info t;
        ST_TRY(strata_gguf_tensor_info(in, i, &t));
        ST_TRY(plan_tensor(&t, p, &plans[i]));
        st_qplan *pl = &plans[i];
        if (im && pl->action != ST_Q_KEEP && strata_type_takes_importance(pl->out_type)) {
            ST_TRY(st_imatrix_importance(im, t.name, t.ne, t.n_dims, &pl->importance));
            if (pl->importance) stats.n_importance++;
            else stats.n_no_importance++;
        }
    }
    st_gguf_writer *w;
    ST_TRY(st_gguf_writer_create(out_path, strata_gguf_alignment(in), &w));
    *wout = w;
    ST_TRY(copy_metadata(in, w, p->type));
    if (im) ST_TRY(imatrix_metadata(im, p->imatrix, w, stats.n_importance));
    for (int64_t i = 0; i < n_tensors; i++) {
        const st_qplan *pl = &plans[i];
        const strata_tensor_info *t = &pl->info;
        if (pl->action == ST_Q_KEEP) {
            ST_TRY(st_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data));
            stats.n_kept++;
        } else {
            ST_TRY(st_gguf_writer_add_tensor_fill(w, t->name, pl->out_type, t->n_dims, t->ne,
                                                  fill_tensor, ctx));
            if (pl->action == ST_Q_CONVERT) stats.n_quantized++;
            else stats.n_fallback++;
        }
        stats.bytes_in += t->n_bytes;
        stats.bytes_out += (uint64_t)strata_row_bytes(pl->out_type, t->ne[0]) *
                           (uint64_t)(t->n_elements / (t->ne[0] ? t->ne[0] : 1));
    }
    stats.n_tensors = n_tensors;
    *stats_out = stats;
    return STRATA_OK;
}

/* Opens an importance matrix file; one whose general.type is set and is not "imatrix" is refused. */
static strata_status open_imatrix(const char *path, strata_gguf **out) {
    strata_gguf_params gp = strata_gguf_default_params();
    strata_status st = strata_gguf_open(path, &gp, out);
    if (st != STRATA_OK) return st_error(st, "quantize: imatrix '%s': %s", path, strata_last_error());
    const char *type;
    uint64_t len;
    if (strata_gguf_kv_find(*out, "general.type") >= 0 &&
        strata_gguf_get_str(*out, "general.type", &type, &len) == STRATA_OK &&
        !(len == 7 && memcmp(type, "imatrix", 7) == 0))
        return st_error(STRATA_ERR_INVALID_ARG, "quantize: '%s' is not an importance matrix "
                        "(general.type '%.*s')", path, (int)len, type);
    return STRATA_OK;
}

strata_status strata_quantize_file(const char *in_path, const char *out_path,
                                   const strata_quantize_params *params) {
    if (!in_path || !out_path || !params)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_quantize_file: NULL argument");
    strata_quantize_params p = *params;
    static const char *const field[4] = {"type", "type_experts", "type_dense", "type_down"};
    const int given[4] = {(int)p.type, p.type_experts, p.type_dense, p.type_down};
    for (int i = 0; i < 4; i++) {
        if ((i > 0 && given[i] < 0) || is_target_type((strata_type)given[i])) continue;
        return st_error(STRATA_ERR_INVALID_ARG, "quantize: %s %s is not a target type (f32, f16, "
                        "bf16, q8_0, q4_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq1_s, iq1_m, iq2_xxs, "
                        "iq2_xs, iq2_s, iq3_xxs, iq3_s, iq4_nl, iq4_xs, mxfp4)", field[i],
                        strata_type_name((strata_type)given[i]));
    }
    if (p.n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        p.n_threads = n > 0 ? (int)n : 1;
    }
    if (p.n_threads > 256) p.n_threads = 256;

    strata_gguf *in = NULL;
    strata_gguf_params gp = strata_gguf_default_params();
    ST_TRY(strata_gguf_open(in_path, &gp, &in));
    for (uint32_t s = 0; s < strata_gguf_shard_count(in); s++) {
        if (same_file(strata_gguf_shard_path(in, s), out_path)) {
            strata_gguf_free(in);
            return st_error(STRATA_ERR_INVALID_ARG, "quantize: output '%s' is the input file",
                            out_path);
        }
    }
    const int64_t n_tensors = strata_gguf_tensor_count(in);
    st_qplan *plans = calloc(n_tensors > 0 ? (size_t)n_tensors : 1, sizeof *plans);
    if (!plans) {
        strata_gguf_free(in);
        return st_error(STRATA_ERR_NOMEM, "quantize: out of memory for %lld tensors", (long long)n_tensors);
    }
    st_gguf_writer *w = NULL;
    st_qctx ctx = {plans, p.n_threads};
    strata_quantize_stats stats;
    strata_gguf *im = NULL;
    strata_status st = p.imatrix ? open_imatrix(p.imatrix, &im) : STRATA_OK;
    if (st == STRATA_OK) st = quantize_open(in, im, out_path, &p, &ctx, plans, n_tensors, &w, &stats);
    if (st == STRATA_OK) st = st_gguf_writer_finish(w);
    if (st == STRATA_OK && p.stats) *p.stats = stats;
    st_gguf_writer_free(w); /* removes a partial file */
    for (int64_t i = 0; i < n_tensors; i++) free(plans[i].importance);
    free(plans);
    strata_gguf_free(im);
    strata_gguf_free(in);
    if (st == STRATA_OK) st_error_clear();
    return st;
}
