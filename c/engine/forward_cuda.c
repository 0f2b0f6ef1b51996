/* forward_cuda.c - the GPU forward pass of a session (backend STRATA_BACKEND_CUDA): every weight
 * uploaded to device memory once at session create, a GPU KV cache, device scratch sized for
 * n_batch tokens, and the per-layer sequence of c/cuda kernels that mirrors forward.c step by step
 * (norm, q/k/v, biases, q/k norm, RoPE, KV store, attention, output projection, residual; router,
 * top-k, grouped experts over a per-expert pointer table, shared expert, dense FFN; final norm and
 * logits). Token embeddings are dequantized on the CPU (exactly as forward.c) and copied up.
 *
 * Every kernel runs on the session's own (blocking) stream, in program order; the synchronous
 * copies (embeddings up, logits down, the routing of the expert cache) run on the legacy default
 * stream, which is ordered with it, so each copy waits for the kernels before it and the kernels
 * after it wait for the copy. The --n-cpu-moe hand-off copies through pinned host rows on the
 * session's stream (three copies down, one wait, the CPU's step, one copy up that the next
 * kernels are ordered after; written after the session's H200 time was spent). Routed experts are resident, or
 * in the GPU expert cache (gpu_cache.c), or computed by the CPU (n_cpu_moe). Single-token steps
 * may be replayed as a CUDA graph (cuda_graphs). Matmuls of ST_CUDA_MMQ_MIN_ROWS rows or more
 * run on the tensor-core tiles (cuda_mmq.h) where the weight type has them; fewer rows (decode,
 * verify windows) take the GEMV in slices of 8 columns. The grouped MoE takes up to moe_tokens
 * tokens per call (8192 / k with tile types, else 1024 / k) and picks its own path.
 *
 * Deterministic: the same tokens give the same bits on every run (each kernel is). In a build
 * without CUDA the entry points return STRATA_ERR_UNSUPPORTED. */
#include "session.h"
#include "quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#ifndef STRATA_HAVE_CUDA

strata_status st_gpu_create(strata_session *s) {
    (void)s;
    return st_error(STRATA_ERR_UNSUPPORTED, "session backend cuda: this library was built without "
                    "CUDA (nvcc not found at build time or CUDA=0)");
}
void st_gpu_free(strata_session *s) { (void)s; }
strata_status st_gpu_forward_batch(strata_session *s, const strata_token *tokens, int64_t T,
                                   float *logits, int all) {
    (void)s; (void)tokens; (void)T; (void)logits; (void)all;
    return st_error(STRATA_ERR_UNSUPPORTED, "session backend cuda: built without CUDA");
}
size_t st_gpu_weight_bytes(const strata_session *s) { (void)s; return 0; }
st_gpu_cache *st_gpu_get_cache(const strata_session *s) { (void)s; return NULL; }
int64_t st_gpu_pinned_bytes(const strata_session *s) { (void)s; return 0; }
int st_gpu_pool_serves(const strata_session *s, int64_t T) { (void)s; (void)T; return 0; }

#else

#include "cuda_backend.h"
#include "pool.h"
#include "cuda_mmq.h"
#include "cuda_mmv.h"
#include "cuda_moe.h"
#include "cuda_ops.h"

#define ST_GPU_COLS 8        /* columns per GEMV call (st_cuda_mmv's limit) */

/* One layer's device weights: matrices as descriptors, norms and biases as f32 pointers (NULL when
 * the model lacks them). */
typedef struct {
    float *attn_norm, *ffn_norm, *q_norm, *k_norm;   /* (n_embd) / (head_dim or projection) */
    float *bq, *bk, *bv, *bo;                         /* (rows) */
    st_cuda_mat wq, wk, wv, wo;                       /* see st_layer */
    st_cuda_mat wqkv;    /* (n_embd, nq + nk + nv): wq, wk, wv as one matrix when they share a
                            type (wq/wk/wv then view its rows), so one GEMV or tile pass computes
                            q, k and v into one row of g->qkv; data NULL otherwise */
    st_cuda_mat router;                               /* (n_embd, n_expert) */
    st_cuda_mat shexp_gate_inp;                       /* (n_embd, 1) qwen2moe */
    st_cuda_mat ffn_gate, ffn_up, ffn_down;           /* dense FFN */
    st_cuda_expert *experts;                          /* device table [n_expert] */
    st_cuda_expert *shexp;                            /* device table [1], NULL if none */
    strata_type exp_type_gu, exp_type_down;           /* routed experts' types */
    strata_type sh_type_gu, sh_type_down;
    st_cuda_kv_layer kv;
} st_gpu_layer;

typedef struct { const void *host; void *dev; } st_gpu_upload;

struct st_gpu {
    st_gpu_layer *layers;                 /* [n_layer] */
    st_cuda_mat output;                   /* (n_embd, n_vocab) */
    float *output_norm;
    st_gpu_upload *ups;                   /* every device allocation of weights */
    int n_ups, cap_ups;
    size_t weight_bytes;
    int64_t upload_total;                 /* the model's tensor bytes, for progress reports */
    strata_progress_fn progress;
    void *progress_data;
    void *kv_mem;                         /* one allocation: every layer's K and V */
    size_t kv_bytes;
    st_cuda_attn_shape shape;
    st_cuda_rope_params rope;
    int64_t moe_tokens;                   /* tokens per grouped-MoE call: 1024 / k, <= n_batch */
    void *stream;                         /* every kernel of the session runs on it */
    void *graph;                          /* the decode step's executable CUDA graph, or NULL */
    int64_t graph_np;                     /* the attention plan length it was captured for */
    int graphs;                           /* capture single-token steps (cuda_graphs) */
    st_gpu_cache *cache;                  /* expert_cache > 0: routed experts in cache slots */
    int prefetch;                         /* gpu_prefetch: predicted next-layer experts prefetched */
    int pipe;                             /* pipe (with ram_budget): the predicted next-layer experts
                                             read into the RAM tier while this layer computes */
    int32_t *stage_rows, *stage_list;     /* stage_experts auto: rows per expert, distinct rows */
    /* cpu_misses: the split of a cache layer's misses between loads and the CPU */
    int split;                            /* enabled */
    int32_t *ids_split;                   /* (T, k) device: the GPU's ids (-1 for the CPU's) */
    float *cpu_part;                      /* (T, n_embd) device: the CPU's share, added */
    int32_t *h_ids_gpu, *h_ids_cpu;       /* (T, k) host */
    st_miss *misses;                      /* [n_expert] this call's missed experts */
    uint8_t *miss_load;                   /* [n_expert] the cost model's choice per miss */
    int32_t *miss_of;                     /* [n_expert] index in misses, -1 */
    float *pf_x, *pf_logits, *pf_wts;     /* (8, n_embd), (8, n_expert), (8, k): the prediction */
    int32_t *pf_ids, *h_pf_ids;           /* (8, k) on the device and on the host */
    uint8_t *h_pf_missed;                 /* (8, k) pipe: predicted experts not in GPU slots */
    st_gpu_cache *stage;                  /* stage_experts: one layer's worth of slots for the
                                             experts of CPU layers in long batches */
    void *pinned;                         /* pin_experts: the RAM-kept experts' pinned copy */
    /* n_cpu_moe: pinned host rows of the hand-off to the CPU's expert step (T = n_batch rows) */
    float *h_xn, *h_wts, *h_proj;         /* (T, n_embd), (T, k), (T, n_embd) */
    int32_t *h_ids;                       /* (T, k) */
    void *h_hand;                         /* the one allocation they share */
    /* cuda_doorbell: decode-sized calls hand the CPU layers to the expert pool (pool.h) through
     * host-mapped memory: a request record per CPU layer and its arrays (ST_POOL_T rows) */
    st_expert_pool *pool;
    st_doorbell_layer *db;                /* [CPU layers] host view of the mapped block */
    uint8_t *db_host, *db_dev;            /* the mapped block's host and device addresses */
    uint32_t *d_step;                     /* device: the step number the kernels publish / await */
    /* cuda_doorbell with an expert cache: the misses of decode-sized calls computed by the pool
     * while the GPU computes the hits (the split made on the device: no routing round trip) */
    int pool_misses;
    const void *pm_tables;                /* device [n_layer][n_expert] slot descriptors (export) */
    const int32_t *pm_where;              /* device [n_layer][n_expert] nonzero: resident */
    int32_t *pm_ids;                      /* device (8, k): the GPU's ids, -1 for the pool's */
    int32_t *pm_hist;                     /* device (n_layer, 8, k): each layer's routing */
    int32_t *h_pm_hist;                   /* pinned host copy, read after the step */
    float *pm_part;                       /* device (8, n_embd): the pool's rows */
    int32_t *d_err;                       /* device: set when the pool did not answer */
    uint32_t *h_step;                     /* pinned staging of the step number */
    int pool_open;                        /* this call announced *h_step to the pool */
    float *h_embd;                        /* (T, n_embd) pinned: a batch's embeddings on their way
                                             up (NULL: s->x, pageable) */
    size_t pinned_bytes;
    /* device scratch, T = n_batch rows */
    float *x, *xn, *q, *k, *v, *att, *proj, *h, *router, *wts, *ones, *shgate, *logits;
    float *qkv;                           /* (T, nq + nk + nv): the fused projection's rows */
    int32_t *ids, *zeros;
    int32_t *pos;                         /* (T) the batch's positions: RoPE, KV store, attention */
    st_cuda_argmax_out *amax;             /* the greedy token of strata_session_decode_greedy */
    int32_t *topk_ids;                    /* strata_session_decode_topk: candidates (device) */
    float *topk_vals;
    void *topk_ws;
    size_t topk_ws_bytes;
    int32_t *hpos;                        /* (T) host copy staged for the upload */
    void *mmv_scratch, *mmq_scratch, *moe_ws, *attn_ws;
    void *xq;                             /* the attention norm's output as Q8_1 rows, batches of
                                             up to ST_GPU_COLS tokens (st_gpu_xq) */
    size_t moe_ws_bytes, attn_ws_bytes;
};

#define TRY(expr) do { strata_status st_ = (expr); if (st_ != STRATA_OK) return st_; } while (0)

static strata_status st_gpu_cache_auto(strata_session *s, int32_t *slots);
static strata_status st_gpu_pin_experts(strata_session *s);
static strata_status st_gpu_measure_costs(strata_session *s, st_gpu_cache *c, int il);

/* ---------------------------------------------------------------------------------------------
 * Upload
 * ------------------------------------------------------------------------------------------- */

static size_t st_tensor_bytes(const st_tensor *t) {
    return t->row_bytes * (size_t)t->ne[1] * (size_t)(t->ne[2] > 0 ? t->ne[2] : 1);
}

/* Device copy of a tensor's bytes (shared when two views have the same data, e.g. tied
 * embeddings). *dev = NULL for a missing tensor. */
static strata_status st_gpu_put(st_gpu *g, const st_tensor *t, void **dev) {
    *dev = NULL;
    if (!t->data) return STRATA_OK;
    for (int i = 0; i < g->n_ups; i++)
        if (g->ups[i].host == t->data) { *dev = g->ups[i].dev; return STRATA_OK; }
    if (g->n_ups == g->cap_ups) {
        int cap = g->cap_ups ? 2 * g->cap_ups : 256;
        st_gpu_upload *u = realloc(g->ups, sizeof *u * (size_t)cap);
        if (!u) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
        g->ups = u;
        g->cap_ups = cap;
    }
    const size_t n = st_tensor_bytes(t);
    void *d = NULL;
    strata_status st = st_cuda_malloc(&d, n);
    if (st != STRATA_OK)
        return st_error(st, "gpu session: %zu bytes for %s: %s", n, t->name ? t->name : "tensor",
                        strata_last_error());
    g->ups[g->n_ups].host = t->data;
    g->ups[g->n_ups].dev = d;
    g->n_ups++;
    g->weight_bytes += n;
    TRY(st_cuda_memcpy_h2d(d, t->data, n));
    if (g->progress) g->progress("upload", (int64_t)g->weight_bytes, g->upload_total, g->progress_data);
    *dev = d;
    return STRATA_OK;
}

/* wq, wk and wv of one type as one device matrix (rows of wq, then wk, then wv); the three
 * descriptors then point into it. Leaves G->wqkv zero when the types or row sizes differ. */
static strata_status st_gpu_put_qkv(st_gpu *g, const st_layer *L, st_gpu_layer *G) {
    memset(&G->wqkv, 0, sizeof G->wqkv);
    const st_tensor *ts[3] = {&L->wq, &L->wk, &L->wv};
    for (int i = 0; i < 3; i++)
        if (!ts[i]->data || ts[i]->type != L->wq.type || ts[i]->row_bytes != L->wq.row_bytes ||
            ts[i]->ne[0] != L->wq.ne[0] || !st_cuda_mmv_supports(ts[i]->type))
            return STRATA_OK;
    size_t n = 0;
    for (int i = 0; i < 3; i++) n += st_tensor_bytes(ts[i]);
    if (g->n_ups == g->cap_ups) {
        int cap = g->cap_ups ? 2 * g->cap_ups : 256;
        st_gpu_upload *u = realloc(g->ups, sizeof *u * (size_t)cap);
        if (!u) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
        g->ups = u;
        g->cap_ups = cap;
    }
    void *d = NULL;
    strata_status st = st_cuda_malloc(&d, n);
    if (st != STRATA_OK)
        return st_error(st, "gpu session: %zu bytes for %s/k/v: %s", n, L->wq.name ? L->wq.name : "wq",
                        strata_last_error());
    g->ups[g->n_ups].host = NULL; /* never shared */
    g->ups[g->n_ups].dev = d;
    g->n_ups++;
    g->weight_bytes += n;
    st_cuda_mat *ms[3] = {&G->wq, &G->wk, &G->wv};
    size_t off = 0;
    int64_t rows = 0;
    for (int i = 0; i < 3; i++) {
        TRY(st_cuda_memcpy_h2d((uint8_t *)d + off, ts[i]->data, st_tensor_bytes(ts[i])));
        ms[i]->type = ts[i]->type;
        ms[i]->data = (uint8_t *)d + off;
        ms[i]->ne0 = ts[i]->ne[0];
        ms[i]->ne1 = ts[i]->ne[1];
        ms[i]->row_bytes = ts[i]->row_bytes;
        off += st_tensor_bytes(ts[i]);
        rows += ts[i]->ne[1];
    }
    G->wqkv = G->wq;
    G->wqkv.ne1 = rows;
    if (g->progress) g->progress("upload", (int64_t)g->weight_bytes, g->upload_total, g->progress_data);
    return STRATA_OK;
}

static strata_status st_gpu_put_f32(st_gpu *g, const st_tensor *t, float **dev) {
    if (t->data && t->type != STRATA_TYPE_F32)
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: %s is %s, expected f32", t->name,
                        strata_type_name(t->type));
    void *d;
    TRY(st_gpu_put(g, t, &d));
    *dev = d;
    return STRATA_OK;
}

/* A 2-D matrix descriptor (expert e of a merged tensor when ne[2] > 1). */
static strata_status st_gpu_put_mat(st_gpu *g, const st_tensor *t, st_cuda_mat *m) {
    memset(m, 0, sizeof *m);
    if (!t->data) return STRATA_OK;
    if (!st_cuda_mmv_supports(t->type))
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: no GPU matmul for %s (%s)", t->name,
                        strata_type_name(t->type));
    void *d;
    TRY(st_gpu_put(g, t, &d));
    m->type = t->type;
    m->data = d;
    m->ne0 = t->ne[0];
    m->ne1 = t->ne[1];
    m->row_bytes = t->row_bytes;
    return STRATA_OK;
}

/* The device table of n experts of the merged tensors gate/up/down (n = 1: a shared expert). */
static strata_status st_gpu_put_experts(st_gpu *g, const st_tensor *gt, const st_tensor *ut,
                                        const st_tensor *dt, int32_t n, st_cuda_expert **table) {
    const st_tensor *ts[3] = {gt, ut, dt};
    for (int i = 0; i < 3; i++)
        if (!st_cuda_moe_supports(ts[i]->type))
            return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: no GPU expert kernel for %s (%s)",
                            ts[i]->name, strata_type_name(ts[i]->type));
    if (gt->type != ut->type)
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: %s (%s) and %s (%s) differ in type",
                        gt->name, strata_type_name(gt->type), ut->name, strata_type_name(ut->type));
    void *d[3];
    for (int i = 0; i < 3; i++) TRY(st_gpu_put(g, ts[i], &d[i]));
    st_cuda_expert *h = calloc((size_t)n, sizeof *h);
    if (!h) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
    for (int32_t e = 0; e < n; e++) {
        st_cuda_mat *ms[3] = {&h[e].gate, &h[e].up, &h[e].down};
        for (int i = 0; i < 3; i++) {
            const size_t per = (size_t)ts[i]->ne[1] * ts[i]->row_bytes;
            ms[i]->type = ts[i]->type;
            ms[i]->data = (const uint8_t *)d[i] + (size_t)e * per;
            ms[i]->ne0 = ts[i]->ne[0];
            ms[i]->ne1 = ts[i]->ne[1];
            ms[i]->row_bytes = ts[i]->row_bytes;
        }
    }
    void *dt_ = NULL;
    strata_status st = st_cuda_malloc(&dt_, sizeof *h * (size_t)n);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(dt_, h, sizeof *h * (size_t)n);
    free(h);
    if (st != STRATA_OK) { st_cuda_free(dt_); return st; }
    *table = dt_;
    return STRATA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Create / free
 * ------------------------------------------------------------------------------------------- */

static strata_status st_gpu_alloc(void **p, size_t bytes) {
    return st_cuda_malloc(p, bytes ? bytes : 16);
}

static strata_status st_gpu_check_shape(const strata_model *m, const st_gpu *g) {
    const st_hparams *hp = &m->hp;
    if (!st_cuda_attn_supports(STRATA_TYPE_F16, &g->shape))
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: attention with %d/%d heads of %d/%d "
                        "is not supported on the GPU (head_dim 64, 128 or 256)", (int)hp->n_head,
                        (int)hp->n_head_kv, (int)hp->head_dim, (int)hp->head_dim_v);
    if (!st_cuda_rope_supports(&g->rope, hp->head_dim))
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: RoPE over %d of %d dimensions is not "
                        "supported on the GPU", (int)hp->n_rot, (int)hp->head_dim);
    if (hp->n_expert > 0 && (hp->n_embd % 32 != 0 || hp->n_ff_exp % 32 != 0 ||
                             (hp->n_ff_shexp > 0 && hp->n_ff_shexp % 32 != 0)))
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: expert widths %d/%d/%d must be "
                        "multiples of 32", (int)hp->n_embd, (int)hp->n_ff_exp, (int)hp->n_ff_shexp);
    return STRATA_OK;
}

/* 1 if layer il's routed experts are computed by the CPU (n_cpu_moe < 0: every layer). */
static int st_gpu_layer_on_cpu(const strata_session *s, int il) {
    return s->n_cpu_moe < 0 || il < s->n_cpu_moe;
}

/* ---- the CPU expert pool behind a doorbell (cuda_doorbell) ------------------------------------- */

#define ST_POOL_T 8 /* rows of a decode-sized call: the doorbell's arrays */

/* The device address of a pointer into the mapped doorbell block. */
static void *st_gpu_db_dev(const st_gpu *g, const void *host) {
    return g->db_dev + ((const uint8_t *)host - g->db_host);
}

/* The mapped block (a record per CPU layer, then each layer's x, out, ids and wts for ST_POOL_T
 * rows, 64-byte aligned), the step and error words, and the pool's threads over the CPU layers'
 * expert views (the pinned copies when pin_experts made them). */
static strata_status st_gpu_pool_create(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    /* a record per CPU layer (the first ones), or per layer when the pool serves a cache's misses */
    const int32_t L = s->expert_cache != 0 || s->n_cpu_moe < 0 || s->n_cpu_moe > hp->n_layer ? hp->n_layer
                                                                                          : s->n_cpu_moe;
    const size_t E = (size_t)hp->n_embd, K = (size_t)hp->n_expert_used, R = ST_POOL_T;
    const size_t rec = st_round_up(sizeof(st_doorbell_layer) * (size_t)L, 64);
    const size_t xb = st_round_up(sizeof(float) * R * E, 64), kb = st_round_up(sizeof(float) * R * K, 64);
    const size_t per = 2 * xb + 2 * kb;
    void *h = NULL, *d = NULL;
    TRY(st_cuda_host_alloc_mapped(&h, &d, rec + per * (size_t)L));
    g->db_host = h;
    g->db_dev = d;
    g->db = (st_doorbell_layer *)h;
    for (int32_t l = 0; l < L; l++) {
        uint8_t *base = (uint8_t *)h + rec + per * (size_t)l;
        st_doorbell_layer *r = &g->db[l];
        atomic_init(&r->req_seq, 0);
        atomic_init(&r->done_seq, 0);
        r->T = 0;
        r->x = (float *)base;
        r->out = (float *)(base + xb);
        r->ids = (int32_t *)(base + 2 * xb);
        r->wts = (float *)(base + 2 * xb + kb);
    }
    TRY(st_gpu_alloc((void **)&g->d_step, sizeof(uint32_t)));
    TRY(st_gpu_alloc((void **)&g->d_err, sizeof(int32_t)));
    TRY(st_cuda_memset(g->d_err, 0, sizeof(int32_t)));
    TRY(st_cuda_host_alloc((void **)&g->h_step, sizeof(uint32_t)));
    return st_pool_create(s->experts, L, hp->n_expert, hp->n_embd, hp->n_ff_exp, hp->n_expert_used,
                          (int32_t)R, g->db, s->n_threads > 0 ? s->n_threads : 1, &g->pool);
}

/* Whether a call of T tokens hands its CPU layers to the pool: a pool, and decode-sized. */
static int st_gpu_pool_call(const strata_session *s, int64_t T) {
    return s->gpu->pool && T <= ST_POOL_T;
}

int st_gpu_pool_serves(const strata_session *s, int64_t T) { return s->gpu && st_gpu_pool_call(s, T); }

/* The buffers of the next layer's expert prediction (gpu_prefetch, pipe): 8 rows. */
static strata_status st_gpu_alloc_prediction(st_gpu *g, const st_hparams *hp) {
    if (g->pf_ids) return STRATA_OK;
    const size_t E = (size_t)hp->n_embd, X = (size_t)hp->n_expert, K = (size_t)hp->n_expert_used;
    TRY(st_gpu_alloc((void **)&g->pf_x, sizeof(float) * 8 * E));
    TRY(st_gpu_alloc((void **)&g->pf_logits, sizeof(float) * 8 * X));
    TRY(st_gpu_alloc((void **)&g->pf_wts, sizeof(float) * 8 * K));
    TRY(st_gpu_alloc((void **)&g->pf_ids, sizeof(int32_t) * 8 * K));
    TRY(st_cuda_host_alloc((void **)&g->h_pf_ids, sizeof(int32_t) * 8 * K));
    g->h_pf_missed = malloc(8 * K);
    if (!g->h_pf_missed) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
    return STRATA_OK;
}

static strata_status st_gpu_mm(st_gpu *g, const st_cuda_mat *W, const float *x, int64_t T, float *y);

/* Enqueues the prediction of layer il + 1's experts for rows t0 .. t0 + tn (tn <= 8) from layer
 * il's residual (layer il + 1's FFN norm and router applied to it, as the CPU session's --pipe
 * does) and the copy of the ids into g->h_pf_ids (pinned): there once the stream has passed it. */
static strata_status st_gpu_predict_next(strata_session *s, int il, int64_t t0, int64_t tn) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    const st_gpu_layer *Nx = &g->layers[il + 1];
    TRY(st_cuda_rmsnorm(g->pf_x, E, g->x + t0 * E, E, Nx->ffn_norm, E, 1, tn, hp->norm_eps, g->stream));
    TRY(st_gpu_mm(g, &Nx->router, g->pf_x, tn, g->pf_logits));
    TRY(st_cuda_moe_route(g->pf_logits, tn, X, K, hp->expert_weights_norm, g->pf_ids, g->pf_wts, NULL,
                          g->stream));
    return st_cuda_memcpy_async(g->h_pf_ids, g->pf_ids, sizeof(int32_t) * (size_t)(tn * K), 0, g->stream);
}

/* pipe (decode-sized calls past the RAM budget): whether layer il predicts layer il + 1's experts. */
static int st_gpu_pipe_layer(const strata_session *s, int il, int64_t tn) {
    return s->gpu->pipe && tn <= 8 && il + 1 < s->model->hp.n_layer;
}

/* pipe: once the stream has passed st_gpu_predict_next's copy (the caller waited for the
 * stream), the RAM tier starts reading layer il + 1's predicted experts that are not in GPU
 * slots while layer il computes; st_ram_tier_table waits for a read still in flight. */
static void st_gpu_pipe_issue(strata_session *s, int il, int64_t tn) {
    st_gpu *g = s->gpu;
    int32_t n = (int32_t)(tn * s->model->hp.n_expert_used);
    if (g->cache && !st_gpu_layer_on_cpu(s, il + 1)) { /* experts already in GPU slots need no read */
        st_gpu_cache_missed(g->cache, il + 1, g->h_pf_ids, n, g->h_pf_missed);
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++)
            if (g->h_pf_missed[i]) g->h_pf_ids[k++] = g->h_pf_ids[i];
        n = k;
    }
    st_ram_tier_prefetch(s, il + 1, 1, g->h_pf_ids, n);
}

static strata_status st_gpu_upload_layers(strata_session *s) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    for (int il = 0; il < hp->n_layer; il++) {
        const st_layer *L = &m->layers[il];
        st_gpu_layer *G = &g->layers[il];
        TRY(st_gpu_put_f32(g, &L->attn_norm, &G->attn_norm));
        TRY(st_gpu_put_f32(g, &L->ffn_norm, &G->ffn_norm));
        TRY(st_gpu_put_f32(g, &L->q_norm, &G->q_norm));
        TRY(st_gpu_put_f32(g, &L->k_norm, &G->k_norm));
        TRY(st_gpu_put_f32(g, &L->bq, &G->bq));
        TRY(st_gpu_put_f32(g, &L->bk, &G->bk));
        TRY(st_gpu_put_f32(g, &L->bv, &G->bv));
        TRY(st_gpu_put_f32(g, &L->bo, &G->bo));
        TRY(st_gpu_put_qkv(g, L, G));
        if (!G->wqkv.data) {
            TRY(st_gpu_put_mat(g, &L->wq, &G->wq));
            TRY(st_gpu_put_mat(g, &L->wk, &G->wk));
            TRY(st_gpu_put_mat(g, &L->wv, &G->wv));
        }
        TRY(st_gpu_put_mat(g, &L->wo, &G->wo));
        if (hp->n_expert > 0) {
            TRY(st_gpu_put_mat(g, &L->ffn_gate_inp, &G->router));
            /* --n-cpu-moe: this layer's routed experts stay in RAM for the CPU (G->experts NULL) */
            if (!st_gpu_layer_on_cpu(s, il) && s->expert_cache == 0)
                TRY(st_gpu_put_experts(g, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps,
                                       hp->n_expert, &G->experts));
            G->exp_type_gu = L->ffn_gate_exps.type;
            G->exp_type_down = L->ffn_down_exps.type;
            if (s->shexp && L->ffn_gate_shexp.data) {
                TRY(st_gpu_put_experts(g, &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_down_shexp,
                                       1, &G->shexp));
                G->sh_type_gu = L->ffn_gate_shexp.type;
                G->sh_type_down = L->ffn_down_shexp.type;
                if (L->ffn_gate_inp_shexp.data) {
                    st_tensor gi = L->ffn_gate_inp_shexp; /* (n_embd): one row */
                    gi.ne[1] = 1;
                    TRY(st_gpu_put_mat(g, &gi, &G->shexp_gate_inp));
                }
            }
        } else {
            TRY(st_gpu_put_mat(g, &L->ffn_gate, &G->ffn_gate));
            TRY(st_gpu_put_mat(g, &L->ffn_up, &G->ffn_up));
            TRY(st_gpu_put_mat(g, &L->ffn_down, &G->ffn_down));
            if (G->ffn_gate.type != G->ffn_up.type)
                return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: layer %d gate and up types differ", il);
        }
    }
    return STRATA_OK;
}

static strata_status st_gpu_alloc_scratch(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const st_scratch_dims d = st_session_dims(s);
    const size_t T = d.T, E = d.E, nq = d.nq, nk = d.nk, nv = d.nv, no = d.no, K = d.K, X = d.X,
                 F = d.F, f = sizeof(float);
    TRY(st_gpu_alloc((void **)&g->x, f * T * E));
    TRY(st_gpu_alloc((void **)&g->xn, f * T * E));
    TRY(st_gpu_alloc((void **)&g->q, f * T * nq));
    TRY(st_gpu_alloc((void **)&g->k, f * T * nk));
    TRY(st_gpu_alloc((void **)&g->v, f * T * nv));
    TRY(st_gpu_alloc((void **)&g->qkv, f * T * (nq + nk + nv)));
    TRY(st_gpu_alloc((void **)&g->att, f * T * no));
    TRY(st_gpu_alloc((void **)&g->proj, f * T * E));
    TRY(st_gpu_alloc((void **)&g->h, f * T * F));
    TRY(st_gpu_alloc((void **)&g->router, f * T * X));
    TRY(st_gpu_alloc((void **)&g->wts, f * T * K));
    TRY(st_gpu_alloc((void **)&g->ids, sizeof(int32_t) * T * K));
    TRY(st_gpu_alloc((void **)&g->ones, f * T));
    TRY(st_gpu_alloc((void **)&g->zeros, sizeof(int32_t) * T));
    TRY(st_gpu_alloc((void **)&g->pos, sizeof(int32_t) * T));
    TRY(st_gpu_alloc((void **)&g->amax, sizeof *g->amax));
    TRY(st_gpu_alloc((void **)&g->topk_ids, sizeof(int32_t) * ST_CUDA_TOPK_MAX));
    TRY(st_gpu_alloc((void **)&g->topk_vals, f * ST_CUDA_TOPK_MAX));
    g->topk_ws_bytes = st_cuda_topk_wsize(hp->n_vocab, ST_CUDA_TOPK_MAX);
    TRY(st_gpu_alloc(&g->topk_ws, g->topk_ws_bytes));
    g->hpos = malloc(sizeof(int32_t) * T);
    if (!g->hpos) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
    TRY(st_gpu_alloc((void **)&g->shgate, f * T));
    TRY(st_gpu_alloc((void **)&g->logits, f * ST_GPU_COLS * (size_t)hp->n_vocab));
    /* constants: ids 0 and weights 1 for the one-expert (shared expert) calls */
    float *ones = malloc(f * T);
    if (!ones) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
    for (size_t t = 0; t < T; t++) ones[t] = 1.0f;
    strata_status st = st_cuda_memcpy_h2d(g->ones, ones, f * T);
    free(ones);
    TRY(st);
    TRY(st_cuda_memset(g->zeros, 0, sizeof(int32_t) * T));

    size_t widest = E > no ? E : no;
    if (F > widest) widest = F;
    TRY(st_gpu_alloc(&g->mmv_scratch, st_cuda_mmv_scratch_bytes((int64_t)widest, ST_GPU_COLS)));
    if (E % 32 == 0) TRY(st_gpu_alloc(&g->xq, st_cuda_mmv_scratch_bytes(E, ST_GPU_COLS)));
    TRY(st_gpu_alloc(&g->mmq_scratch, st_cuda_mmq_scratch_bytes((int64_t)widest, (int64_t)T)));
    g->moe_tokens = 1;
    size_t moe = 0;
    if (hp->n_expert > 0) {
        /* tile types take 8192 pairs per call (a 512-token prompt of a top-8 model in one), the
         * others the GEMV path's 1024 */
        int tiles = 1;
        for (int il = 0; il < hp->n_layer; il++) {
            const st_layer *L = &s->model->layers[il];
            tiles &= st_cuda_moe_type_tiles(L->ffn_gate_exps.type) && st_cuda_moe_type_tiles(L->ffn_down_exps.type);
            if (s->shexp && L->ffn_gate_shexp.data)
                tiles &= st_cuda_moe_type_tiles(L->ffn_gate_shexp.type) &&
                         st_cuda_moe_type_tiles(L->ffn_down_shexp.type);
        }
        g->moe_tokens = (tiles ? 8192 : 1024) / (int64_t)K;
        if (g->moe_tokens > (int64_t)T) g->moe_tokens = (int64_t)T;
        moe = st_cuda_moe_wsize(g->moe_tokens, (int32_t)K, hp->n_embd, hp->n_ff_exp);
        if (hp->n_ff_shexp > 0) {
            size_t sh = st_cuda_moe_wsize(g->moe_tokens, 1, hp->n_embd, hp->n_ff_shexp);
            if (sh > moe) moe = sh;
        }
    }
    g->moe_ws_bytes = moe;
    TRY(st_gpu_alloc(&g->moe_ws, moe));
    /* the most a decode window or any batch up to n_batch splits the positions into */
    g->attn_ws_bytes = st_cuda_attn_wsize(&g->shape, ST_GPU_COLS, s->n_ctx);
    const size_t ws_batch = st_cuda_attn_wsize(&g->shape, (int64_t)s->n_batch, s->n_ctx);
    if (ws_batch > g->attn_ws_bytes) g->attn_ws_bytes = ws_batch;
    TRY(st_gpu_alloc(&g->attn_ws, g->attn_ws_bytes));
    return STRATA_OK;
}

static strata_status st_gpu_alloc_kv(strata_session *s, strata_type kv_type) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const size_t one = st_cuda_kv_bytes(kv_type, &g->shape, s->n_ctx);
    const size_t per = st_round_up(one, 256);
    g->kv_bytes = 2 * per * (size_t)hp->n_layer;
    strata_status st = st_cuda_malloc(&g->kv_mem, g->kv_bytes);
    if (st != STRATA_OK)
        return st_error(st, "gpu session: KV cache of %zu bytes (n_ctx %d): %s", g->kv_bytes,
                        (int)s->n_ctx, strata_last_error());
    for (int il = 0; il < hp->n_layer; il++) {
        st_cuda_kv_layer *kv = &g->layers[il].kv;
        kv->type = kv_type;
        kv->n_ctx = s->n_ctx;
        kv->k = (uint8_t *)g->kv_mem + (size_t)(2 * il) * per;
        kv->v = (uint8_t *)g->kv_mem + (size_t)(2 * il + 1) * per;
    }
    return STRATA_OK;
}

void st_gpu_free(strata_session *s) {
    st_gpu *g = s ? s->gpu : NULL;
    if (!g) return;
    if (g->layers)
        for (int il = 0; il < s->model->hp.n_layer; il++) {
            st_cuda_free(g->layers[il].experts);
            st_cuda_free(g->layers[il].shexp);
        }
    st_pool_free(g->pool); /* its threads stop before the experts or the doorbell go */
    st_cuda_host_free(g->db_host);
    st_cuda_host_free(g->h_step);
    st_cuda_free(g->d_step);
    st_cuda_free(g->pm_ids);
    st_cuda_free(g->pm_hist);
    st_cuda_free(g->pm_part);
    st_cuda_host_free(g->h_pm_hist);
    st_cuda_free(g->d_err);
    st_gpu_cache_free(g->cache);
    st_gpu_cache_free(g->stage);
    st_cuda_host_free(g->pinned);
    st_cuda_host_free(g->h_hand);
    st_cuda_host_free(g->h_embd);
    void *pf[] = {g->pf_x, g->pf_logits, g->pf_wts, g->pf_ids};
    for (size_t i = 0; i < sizeof pf / sizeof pf[0]; i++) st_cuda_free(pf[i]);
    st_cuda_host_free(g->h_pf_ids);
    free(g->h_pf_missed);
    free(g->stage_rows);
    free(g->stage_list);
    st_cuda_free(g->ids_split);
    st_cuda_free(g->cpu_part);
    free(g->h_ids_gpu); free(g->h_ids_cpu); free(g->misses); free(g->miss_load); free(g->miss_of);
    st_cuda_graph_exec_destroy(g->graph);
    st_cuda_stream_destroy(g->stream);
    for (int i = 0; i < g->n_ups; i++) st_cuda_free(g->ups[i].dev);
    void *bufs[] = {g->kv_mem, g->x, g->xn, g->q, g->k, g->v, g->qkv, g->att, g->proj, g->h, g->router,
                    g->wts, g->ones, g->shgate, g->logits, g->ids, g->zeros, g->pos, g->amax, g->mmv_scratch, g->xq, g->mmq_scratch,
                    g->moe_ws, g->attn_ws, g->topk_ids, g->topk_vals, g->topk_ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) st_cuda_free(bufs[i]);
    st_error_clear(); /* freeing after a failed create may fail again; not the caller's error */
    free(g->ups);
    free(g->hpos);
    free(g->layers);
    free(g);
    s->gpu = NULL;
}

strata_status st_gpu_create(strata_session *s) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    int available = 0;
    char why[256];
    TRY(st_cuda_probe(&available, why, sizeof why));
    if (!available) return st_error(STRATA_ERR_UNSUPPORTED, "session backend cuda: %s", why);
    st_gpu *g = calloc(1, sizeof *g);
    if (!g) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
    s->gpu = g;
    g->graphs = s->cuda_graphs;
    TRY(st_cuda_stream_create(&g->stream));
    g->progress = s->progress;
    g->progress_data = s->progress_data;
    g->upload_total = (int64_t)m->info.n_bytes;
    g->layers = calloc((size_t)hp->n_layer, sizeof *g->layers);
    if (!g->layers) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
    g->shape.n_head = hp->n_head;
    g->shape.n_head_kv = hp->n_head_kv;
    g->shape.head_dim = hp->head_dim;
    g->shape.head_dim_v = hp->head_dim_v;
    g->shape.tc = s->attn_tc;
    g->shape.scale = hp->attention_scale != 0.0f && m->arch->granite_scales
                         ? hp->attention_scale : 1.0f / sqrtf((float)hp->head_dim);
    g->rope.neox = s->rope.style == ST_ROPE_NEOX;
    g->rope.n_rot = s->rope.n_rot;
    g->rope.freq_base = s->rope.freq_base;
    g->rope.freq_scale = s->rope.freq_scale;
    g->rope.ext_factor = s->rope.ext_factor;
    g->rope.attn_factor = s->rope.attn_factor;
    g->rope.beta_fast = s->rope.beta_fast;
    g->rope.beta_slow = s->rope.beta_slow;
    g->rope.n_ctx_orig = s->rope.n_ctx_orig;
    TRY(st_gpu_check_shape(m, g));
    if (m->output_norm.type != STRATA_TYPE_F32)
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: output_norm is not f32");
    TRY(st_gpu_put_f32(g, &m->output_norm, &g->output_norm));
    TRY(st_gpu_put_mat(g, &m->output, &g->output));
    TRY(st_gpu_upload_layers(s));
    TRY(st_gpu_alloc_kv(s, s->kv_type));
    TRY(st_gpu_alloc_scratch(s));
    if (s->pin_experts != 0 && hp->n_expert > 0) TRY(st_gpu_pin_experts(s));
    /* the embeddings' pinned staging (a prompt batch's rows go up at the pinned rate); without
     * it they go from s->x */
    if (st_cuda_host_alloc((void **)&g->h_embd, sizeof(float) * (size_t)s->n_batch * (size_t)hp->n_embd) != STRATA_OK) {
        g->h_embd = NULL;
        st_error_clear();
    }
    if (s->n_cpu_moe != 0 && hp->n_expert > 0) { /* pinned hand-off rows: async copies, one wait */
        const size_t T = (size_t)s->n_batch, E = (size_t)hp->n_embd, K = (size_t)hp->n_expert_used;
        const size_t a = st_round_up(T * E * sizeof(float), 256), b = st_round_up(T * K * sizeof(float), 256);
        TRY(st_cuda_host_alloc(&g->h_hand, 2 * a + 2 * b));
        g->h_xn = (float *)g->h_hand;
        g->h_proj = (float *)((uint8_t *)g->h_hand + a);
        g->h_wts = (float *)((uint8_t *)g->h_hand + 2 * a);
        g->h_ids = (int32_t *)((uint8_t *)g->h_hand + 2 * a + b);
    }
    if (s->expert_cache != 0) {
        int32_t slots = s->expert_cache;
        if (slots < 0) TRY(st_gpu_cache_auto(s, &slots));
        TRY(st_gpu_cache_create(s, slots, &g->cache));
        if (s->gpu_prefetch) { /* decode steps: layer l + 1's experts predicted and prefetched */
            TRY(st_gpu_cache_enable_prefetch(g->cache));
            TRY(st_gpu_alloc_prediction(g, hp));
            g->prefetch = 1;
        }
        if (s->cpu_misses) { /* each miss loaded or computed by the CPU, by the cost model */
            const size_t T = (size_t)s->n_batch, E = (size_t)hp->n_embd, X = (size_t)hp->n_expert,
                         K = (size_t)hp->n_expert_used;
            TRY(st_gpu_measure_costs(s, g->cache, 0));
            TRY(st_gpu_alloc((void **)&g->ids_split, sizeof(int32_t) * T * K));
            TRY(st_gpu_alloc((void **)&g->cpu_part, sizeof(float) * T * E));
            g->h_ids_gpu = malloc(sizeof(int32_t) * T * K);
            g->h_ids_cpu = malloc(sizeof(int32_t) * T * K);
            g->misses = malloc(sizeof *g->misses * X);
            g->miss_load = malloc(X);
            g->miss_of = malloc(sizeof(int32_t) * X);
            if (!g->h_ids_gpu || !g->h_ids_cpu || !g->misses || !g->miss_load || !g->miss_of)
                return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
            for (size_t e = 0; e < X; e++) g->miss_of[e] = -1;
            g->split = 1;
        }
    }
    if (s->cuda_doorbell && hp->n_expert > 0) { /* the expert pool: CPU layers, a cache's misses */
        TRY(st_gpu_pool_create(s));
        if (g->cache) {
            const size_t E = (size_t)hp->n_embd, K = (size_t)hp->n_expert_used, R = ST_POOL_T;
            TRY(st_gpu_alloc((void **)&g->pm_ids, sizeof(int32_t) * R * K));
            TRY(st_gpu_alloc((void **)&g->pm_hist, sizeof(int32_t) * (size_t)hp->n_layer * R * K));
            TRY(st_gpu_alloc((void **)&g->pm_part, sizeof(float) * R * E));
            TRY(st_cuda_host_alloc((void **)&g->h_pm_hist, sizeof(int32_t) * (size_t)hp->n_layer * R * K));
            g->pool_misses = 1;
        }
    }
    if (s->pipe && s->ram && !g->pool && hp->n_expert > 0) { /* the RAM tier reads ahead */
        TRY(st_gpu_alloc_prediction(g, hp));
        g->pipe = 1;
    }
    if (s->stage_experts != 0 && hp->n_expert > 0) { /* n_expert slots: no hot set, LRU only */
        TRY(st_gpu_cache_create(s, hp->n_expert, &g->stage));
        if (s->stage_experts < 0) { /* auto: the cost model's figures, measured now */
            int il0 = 0;
            while (il0 < hp->n_layer - 1 && !st_gpu_layer_on_cpu(s, il0)) il0++;
            TRY(st_gpu_measure_costs(s, g->stage, il0));
            g->stage_rows = calloc((size_t)hp->n_expert, sizeof *g->stage_rows);
            g->stage_list = calloc((size_t)hp->n_expert, sizeof *g->stage_list);
            if (!g->stage_rows || !g->stage_list) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
        }
    }
    if (g->progress) g->progress("upload", g->upload_total, g->upload_total, g->progress_data);
    return st_cuda_synchronize();
}

/* MemAvailable of /proc/meminfo in bytes, or -1 where there is none. */
static int64_t st_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

/* pin_experts: the routed experts that stay in RAM (every layer's with an expert cache, the CPU
 * layers' with n_cpu_moe) copied into one pinned host allocation, layer by layer in the merged
 * tensors' layout; the session's expert views then point into the copy, so the CPU's expert step
 * and the cache's PCIe loads read it (the same bytes: the same results). pin_experts -1 (auto, the
 * default) pins only when the copy leaves 4 GiB of the available RAM free, and reads the mapping
 * when the pinned allocation fails; 1 makes either an error. */
static strata_status st_gpu_pin_experts(strata_session *s) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const int32_t X = hp->n_expert;
    size_t total = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        if (!st_gpu_layer_on_cpu(s, il) && s->expert_cache == 0) continue;
        const st_layer *L = &m->layers[il];
        total += st_round_up(st_tensor_bytes(&L->ffn_gate_exps), 256) + st_round_up(st_tensor_bytes(&L->ffn_up_exps), 256) +
                 st_round_up(st_tensor_bytes(&L->ffn_down_exps), 256);
    }
    if (total == 0) return STRATA_OK;
    if (s->pin_experts < 0) {
        const int64_t avail = st_mem_available();
        if (avail < 0 || (int64_t)total + ((int64_t)4 << 30) > avail) return STRATA_OK;
    }
    strata_status st = st_cuda_host_alloc(&g->pinned, total);
    if (st != STRATA_OK && s->pin_experts < 0) {
        g->pinned = NULL;
        return STRATA_OK; /* auto: the mapping serves */
    }
    if (st != STRATA_OK)
        return st_error(st, "pin_experts: %zu MiB of pinned memory for the experts kept in RAM: %s",
                        total >> 20, strata_last_error());
    g->pinned_bytes = total;
    uint8_t *p = g->pinned;
    for (int il = 0; il < hp->n_layer; il++) {
        if (!st_gpu_layer_on_cpu(s, il) && s->expert_cache == 0) continue;
        const st_layer *L = &m->layers[il];
        const st_tensor *ts[3] = {&L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps};
        for (int i = 0; i < 3; i++) {
            const size_t n = st_tensor_bytes(ts[i]);
            memcpy(p, ts[i]->data, n);
            for (int32_t e = 0; e < X; e++) {
                st_expert *x = &s->experts[(size_t)il * (size_t)X + (size_t)e];
                st_tensor *v = i == 0 ? &x->gate : i == 1 ? &x->up : &x->down;
                v->data = p + ((const uint8_t *)v->data - (const uint8_t *)ts[i]->data);
            }
            p += st_round_up(n, 256);
        }
    }
    return STRATA_OK;
}

/* The cost model's figures (s->cost): PCIe measured with layer il's first expert copied into slot
 * 0 of cache c (unused at create), the CPU expert step for 1 and 8 rows on the session's pool. */
static strata_status st_gpu_measure_costs(strata_session *s, st_gpu_cache *c, int il) {
    const st_hparams *hp = &s->model->hp;
    const st_expert *e = &s->experts[(size_t)il * (size_t)hp->n_expert];
    memset(&s->cost, 0, sizeof s->cost);
    s->cost.pcie_frac = s->pcie_frac;
    s->cost.expert_bytes = (double)(e->gate.row_bytes * (size_t)e->gate.ne[1] + e->up.row_bytes * (size_t)e->up.ne[1] +
                                    e->down.row_bytes * (size_t)e->down.ne[1]);
    TRY(st_gpu_cache_measure_pcie(s, c, il, &s->cost.pcie_bytes_per_s, &s->cost.pcie_latency_s));
    if (st_cost_measure_cpu(s->tp, e, &s->cost.cpu_fixed_s, &s->cost.cpu_per_row_s) != 0)
        return st_error(STRATA_ERR_NOMEM, "cost model: out of memory measuring the CPU");
    return STRATA_OK;
}

/* expert_cache -1: the slots that fit in gpu_mem (or the free memory) now that the other weights,
 * the KV cache and scratch are allocated, less a margin of 512 MiB or 2% of the device, at most
 * every routed expert. */
static strata_status st_gpu_cache_auto(strata_session *s, int32_t *slots) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    size_t free_b = 0, total_b = 0;
    TRY(st_cuda_mem_info(&free_b, &total_b));
    int64_t avail = (int64_t)free_b;
    if (s->gpu_mem > 0) {
        const int64_t used = (int64_t)(g->weight_bytes + g->kv_bytes);
        if (s->gpu_mem - used < avail) avail = s->gpu_mem - used;
    }
    const int64_t margin = (int64_t)(total_b / 50) > (512LL << 20) ? (int64_t)(total_b / 50) : (512LL << 20);
    const int64_t slot = (int64_t)st_gpu_cache_slot_bytes(s);
    int64_t n = slot > 0 && avail > margin ? (avail - margin) / slot : 0;
    const int64_t all = (int64_t)hp->n_layer * hp->n_expert;
    if (n > all) n = all;
    if (n < hp->n_expert)
        return st_error(STRATA_ERR_NOMEM, "expert cache auto: %lld MiB of GPU memory left for experts "
                        "hold %lld slots of %lld MiB; one layer's %d experts are needed",
                        (long long)((avail > margin ? avail - margin : 0) >> 20), (long long)n,
                        (long long)(slot >> 20), (int)hp->n_expert);
    *slots = (int32_t)n;
    return STRATA_OK;
}

size_t st_gpu_weight_bytes(const strata_session *s) { return s && s->gpu ? s->gpu->weight_bytes : 0; }
st_gpu_cache *st_gpu_get_cache(const strata_session *s) { return s && s->gpu ? s->gpu->cache : NULL; }
int64_t st_gpu_pinned_bytes(const strata_session *s) { return s && s->gpu ? (int64_t)s->gpu->pinned_bytes : 0; }

/* ---------------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------------- */

/* Profile mode: wait for the GPU, then charge the time since the last mark to phase. */
static strata_status st_gpu_mark(strata_session *s, strata_phase phase) {
    if (!s->profile) return STRATA_OK;
    TRY(st_cuda_synchronize());
    st_prof_mark(s, phase);
    return STRATA_OK;
}

/* Whether the attention norm of a batch of T tokens also writes its rows as Q8_1 into g->xq for
 * the q/k/v GEMV (decode steps and verify windows: one GEMV slice; the same bits as the GEMV
 * quantizing them, one launch fewer per matrix). */
static int st_gpu_xq(const st_gpu *g, int64_t T, int64_t E) {
    return g->xq && T <= ST_GPU_COLS && T < ST_CUDA_MMQ_MIN_ROWS && E % 32 == 0;
}

/* y[t] = W x[t] for T rows: tensor-core tiles for a long batch, else the GEMV in slices of
 * ST_GPU_COLS columns; y row stride W->ne1. xq: x as Q8_1 rows (T <= ST_GPU_COLS) or NULL. */
static strata_status st_gpu_mm_pre(st_gpu *g, const st_cuda_mat *W, const float *x, const void *xq, int64_t T,
                                   float *y) {
    if (xq && T <= ST_GPU_COLS)
        return st_cuda_mmv_pre(W, x, xq, (int)T, y, g->mmv_scratch, g->stream);
    if (T >= ST_CUDA_MMQ_MIN_ROWS && st_cuda_mmq_supports(W->type))
        return st_cuda_mmq(W, x, W->ne0, T, y, W->ne1, g->mmq_scratch, g->stream);
    for (int64_t c = 0; c < T; c += ST_GPU_COLS) {
        const int nc = (int)(T - c < ST_GPU_COLS ? T - c : ST_GPU_COLS);
        TRY(st_cuda_mmv(W, x + c * W->ne0, nc, y + c * W->ne1, g->mmv_scratch, g->stream));
    }
    return STRATA_OK;
}

static strata_status st_gpu_mm(st_gpu *g, const st_cuda_mat *W, const float *x, int64_t T, float *y) {
    return st_gpu_mm_pre(g, W, x, NULL, T, y);
}

/* The attention inputs launch by launch: q/k norms, RoPE, k and v into the cache (rows without a
 * fused q/k/v matrix, OLMoE's whole-projection norms). */
static strata_status st_gpu_attn_inputs(strata_session *s, int il, float *q, int64_t lq, float *k,
                                        int64_t lk, float *v, int64_t lv, int64_t T, int64_t pos0) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[il];
    const int64_t hd = hp->head_dim, nq = (int64_t)hp->n_head * hd, nk = (int64_t)hp->n_head_kv * hd;
    switch (m->arch->qk_norm) {
    case ST_QKNORM_FULL:
        TRY(st_cuda_rmsnorm(q, lq, q, lq, G->q_norm, nq, 1, T, hp->norm_eps, g->stream));
        TRY(st_cuda_rmsnorm(k, lk, k, lk, G->k_norm, nk, 1, T, hp->norm_eps, g->stream));
        break;
    case ST_QKNORM_HEAD:
        TRY(st_cuda_rmsnorm(q, lq, q, lq, G->q_norm, hd, hp->n_head, T, hp->norm_eps, g->stream));
        TRY(st_cuda_rmsnorm(k, lk, k, lk, G->k_norm, hd, hp->n_head_kv, T, hp->norm_eps, g->stream));
        break;
    case ST_QKNORM_NONE:
        break;
    }
    /* positions from g->pos (device): a replayed decode graph sees the step's own */
    if (G->wqkv.data) { /* q's heads then k's in one row: one RoPE launch over both */
        TRY(st_cuda_rope(&g->rope, q, lq, hp->n_head + hp->n_head_kv, hd, T, g->pos, pos0, g->stream));
    } else {
        TRY(st_cuda_rope(&g->rope, q, lq, hp->n_head, hd, T, g->pos, pos0, g->stream));
        TRY(st_cuda_rope(&g->rope, k, lk, hp->n_head_kv, hd, T, g->pos, pos0, g->stream));
    }
    return st_cuda_kv_store(&G->kv, &g->shape, k, lk, v, lv, T, pos0, g->pos, g->stream);
}

static strata_status st_gpu_attn_block(strata_session *s, int il, int64_t T, int64_t pos0) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[il];
    const int64_t E = hp->n_embd, hd = hp->head_dim;
    const int64_t nq = (int64_t)hp->n_head * hd, nk = (int64_t)hp->n_head_kv * hd;
    const int64_t nv = (int64_t)hp->n_head_kv * hp->head_dim_v;
    const int64_t no = (int64_t)hp->n_head * hp->head_dim_v;

    /* the attention norm: layer 0 here, the later ones fused into the previous layer's residual */
    const void *xq = st_gpu_xq(g, T, E) ? g->xq : NULL; /* written with xn, as Q8_1 */
    if (il == 0 && xq)
        TRY(st_cuda_rmsnorm_q8(g->xn, g->x, G->attn_norm, E, T, hp->norm_eps, g->xq, g->stream));
    else if (il == 0)
        TRY(st_cuda_rmsnorm(g->xn, E, g->x, E, G->attn_norm, E, 1, T, hp->norm_eps, g->stream));
    /* q, k, v: rows of one (T, nq + nk + nv) buffer when fused, else three buffers */
    float *q = g->q, *k = g->k, *v = g->v;
    int64_t lq = nq, lk = nk, lv = nv;
    if (G->wqkv.data) {
        TRY(st_gpu_mm_pre(g, &G->wqkv, g->xn, xq, T, g->qkv));
        q = g->qkv;
        k = g->qkv + nq;
        v = g->qkv + nq + nk;
        lq = lk = lv = nq + nk + nv;
    } else {
        TRY(st_gpu_mm_pre(g, &G->wq, g->xn, xq, T, g->q));
        TRY(st_gpu_mm_pre(g, &G->wk, g->xn, xq, T, g->k));
        TRY(st_gpu_mm_pre(g, &G->wv, g->xn, xq, T, g->v));
    }
    if (G->bq) TRY(st_cuda_add_bias(q, lq, G->bq, nq, T, g->stream));
    if (G->bk) TRY(st_cuda_add_bias(k, lk, G->bk, nk, T, g->stream));
    if (G->bv) TRY(st_cuda_add_bias(v, lv, G->bv, nv, T, g->stream));
    TRY(st_gpu_mark(s, STRATA_PHASE_QKV)); /* (the q/k norms below count as attention, as on the CPU) */
    if (G->wqkv.data && m->arch->qk_norm != ST_QKNORM_FULL && hp->head_dim_v == hd) {
        /* one launch: per-head q/k norms, RoPE of q and k, k and v into the cache (the bits of
         * the separate launches below) */
        const int hn = m->arch->qk_norm == ST_QKNORM_HEAD;
        TRY(st_cuda_qkv_prep(&g->rope, g->qkv, lq, hp->n_head, hp->n_head_kv, hd, hn ? G->q_norm : NULL,
                             hn ? G->k_norm : NULL, hp->norm_eps, &G->kv, T, g->pos, pos0, g->stream));
    } else {
        TRY(st_gpu_attn_inputs(s, il, q, lq, k, lk, v, lv, T, pos0));
    }
    TRY(st_cuda_attention(&G->kv, &g->shape, q, lq, T, pos0, g->pos, g->att, no, g->attn_ws,
                          g->attn_ws_bytes, g->stream));
    TRY(st_gpu_mark(s, STRATA_PHASE_ATTN));
    TRY(st_gpu_mm(g, &G->wo, g->att, T, g->proj));
    if (G->bo) TRY(st_cuda_add_bias(g->proj, E, G->bo, E, T, g->stream));
    /* the residual and the FFN's norm in one launch */
    const float rs = m->arch->granite_scales ? hp->residual_scale : 1.0f;
    TRY(st_cuda_add_rmsnorm(g->x, g->proj, rs, g->xn, G->ffn_norm, E, T, hp->norm_eps, g->stream));
    return st_gpu_mark(s, STRATA_PHASE_ATTN_OUT);
}

/* cpu_misses: the missed experts of this call (ids, host, tn x K) split by the cost model into
 * loads and the CPU's share. When the CPU takes some, *split = 1, *gids = the GPU's ids (the CPU's
 * as -1, also uploaded to g->ids_split), g->h_ids_cpu = the CPU's (the rest -1), and the call's
 * normalized rows and weights are down in s->xn / s->wts for the CPU's step. */
static strata_status st_gpu_split_misses(strata_session *s, int il, int64_t t0, int64_t tn,
                                         const int32_t *ids, int *split, const int32_t **gids) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    const int64_t E = hp->n_embd, P = tn * K;
    float *wts = s->wts + t0 * K;
    if (!s->degrade.enabled) /* (DEGRADE_ZERO brought them down already) */
        TRY(st_cuda_memcpy_d2h(wts, g->wts + t0 * K, sizeof(float) * (size_t)P));
    st_gpu_cache_missed(g->cache, il, ids, P, s->missed);
    int nm = 0;
    for (int64_t i = 0; i < P; i++) {
        const int32_t e = ids[i];
        if (e < 0 || e >= X || !s->missed[i]) continue;
        int32_t m = g->miss_of[e];
        if (m < 0) {
            m = g->miss_of[e] = nm++;
            g->misses[m].expert = e;
            g->misses[m].rows = 0;
            g->misses[m].weight = 0.0f;
        }
        g->misses[m].rows++;
        if (wts[i] > g->misses[m].weight) g->misses[m].weight = wts[i];
    }
    *split = 0;
    if (nm > 0) st_cost_decide(&s->cost, g->misses, nm, g->miss_load, NULL);
    int64_t ncpu = 0;
    for (int64_t i = 0; i < P; i++) {
        const int32_t e = ids[i];
        const int cpu = e >= 0 && e < X && g->miss_of[e] >= 0 && !g->miss_load[g->miss_of[e]];
        g->h_ids_gpu[i] = cpu ? -1 : e;
        g->h_ids_cpu[i] = cpu ? e : -1;
        ncpu += cpu;
    }
    for (int m = 0; m < nm; m++) g->miss_of[g->misses[m].expert] = -1;
    if (ncpu == 0) return STRATA_OK;
    *split = 1;
    *gids = g->h_ids_gpu;
    s->slots_cpu[il] += ncpu;
    s->slots_gpu[il] -= ncpu;
    TRY(st_cuda_memcpy_h2d(g->ids_split + t0 * K, g->h_ids_gpu, sizeof(int32_t) * (size_t)P));
    TRY(st_cuda_memcpy_d2h(s->xn + t0 * E, g->xn + t0 * E, sizeof(float) * (size_t)(tn * E)));
    s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)P + sizeof(float) * (size_t)(tn * E + P));
    return STRATA_OK;
}

static strata_status st_gpu_ffn_block(strata_session *s, int il, int64_t T) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[il];
    const int64_t E = hp->n_embd;
    /* g->xn holds the FFN's norm (fused into the attention's residual) */
    if (hp->n_expert == 0) {
        TRY(st_gpu_mark(s, STRATA_PHASE_ROUTER));
        const int64_t F = hp->n_ff;
        if (T >= ST_CUDA_MMQ_MIN_ROWS && st_cuda_moe_type_tiles(G->ffn_gate.type))
            TRY(st_cuda_mmq_swiglu(&G->ffn_gate, &G->ffn_up, g->xn, E, T, g->h, F, g->mmq_scratch,
                                   g->stream));
        else for (int64_t c = 0; c < T; c += ST_GPU_COLS) {
            const int nc = (int)(T - c < ST_GPU_COLS ? T - c : ST_GPU_COLS);
            TRY(st_cuda_mmv_swiglu(&G->ffn_gate, &G->ffn_up, g->xn + c * E, nc, g->h + c * F,
                                   g->mmv_scratch, g->stream));
        }
        TRY(st_gpu_mm(g, &G->ffn_down, g->h, T, g->proj));
        TRY(st_gpu_mark(s, STRATA_PHASE_EXPERTS));
    } else {
        const int32_t X = hp->n_expert, K = hp->n_expert_used;
        TRY(st_gpu_mm(g, &G->router, g->xn, T, g->router));
        if (G->shexp && G->shexp_gate_inp.data) {
            TRY(st_gpu_mm(g, &G->shexp_gate_inp, g->xn, T, g->shgate));
            TRY(st_cuda_sigmoid(g->shgate, g->shgate, T, g->stream));
        }
        for (int64_t t0 = 0; t0 < T; t0 += g->moe_tokens) {
            const int64_t tn = T - t0 < g->moe_tokens ? T - t0 : g->moe_tokens;
            TRY(st_cuda_moe_route(g->router + t0 * X, tn, X, K, hp->expert_weights_norm,
                                  g->ids + t0 * K, g->wts + t0 * K, NULL, g->stream));
            TRY(st_gpu_mark(s, STRATA_PHASE_ROUTER));
            /* a CPU layer's experts are staged to the GPU for a long enough batch */
            int staged = 0;
            int ids_down = 0; /* the routing is in s->ids (host) */
            int handed = 0;   /* a CPU layer's rows, routing and weights are in the pinned h_ rows */
            if (st_gpu_layer_on_cpu(s, il) && g->stage && !st_gpu_pool_call(s, T)) {
                if (s->stage_experts > 0) {
                    staged = tn >= s->stage_experts;
                } else { /* auto: the routing down, then the cost model on this batch */
                    int32_t *ids = s->ids + t0 * K;
                    if (tn * E <= 16384) { /* decode-sized: the CPU's inputs come down with the
                                            * routing, one wait for both (usually the CPU's) */
                        TRY(st_cuda_memcpy_async(g->h_xn + t0 * E, g->xn + t0 * E, sizeof(float) * (size_t)(tn * E),
                                                 0, g->stream));
                        TRY(st_cuda_memcpy_async(g->h_ids + t0 * K, g->ids + t0 * K, sizeof(int32_t) * (size_t)(tn * K),
                                                 0, g->stream));
                        TRY(st_cuda_memcpy_async(g->h_wts + t0 * K, g->wts + t0 * K, sizeof(float) * (size_t)(tn * K),
                                                 0, g->stream));
                        TRY(st_cuda_stream_synchronize(g->stream));
                        memcpy(ids, g->h_ids + t0 * K, sizeof(int32_t) * (size_t)(tn * K));
                        s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(tn * E) +
                                                   (sizeof(int32_t) + sizeof(float)) * (size_t)(tn * K));
                        handed = 1;
                    } else {
                        TRY(st_cuda_memcpy_d2h(ids, g->ids + t0 * K, sizeof(int32_t) * (size_t)(tn * K)));
                        s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)(tn * K));
                    }
                    ids_down = 1;
                    int nd = 0;
                    for (int64_t i = 0; i < tn * K; i++) {
                        const int32_t e = ids[i];
                        if (e < 0 || e >= X) continue;
                        if (g->stage_rows[e]++ == 0) g->stage_list[nd++] = e;
                    }
                    for (int q = 0; q < nd; q++) { /* rows of the distinct experts, then reset */
                        const int32_t e = g->stage_list[q];
                        g->stage_list[q] = g->stage_rows[e];
                        g->stage_rows[e] = 0;
                    }
                    staged = st_cost_stage(&s->cost, g->stage_list, nd, NULL, NULL);
                }
                if (staged) s->stage_batches++;
                else s->cpu_batches++;
            }
            /* prefetch the next layer's experts: decode-sized calls of cache layers */
            const int pf = g->prefetch && tn <= 8 && il + 1 < hp->n_layer && !st_gpu_layer_on_cpu(s, il) &&
                           !st_gpu_layer_on_cpu(s, il + 1);
            int split = 0; /* cpu_misses: some misses of this call are the CPU's */
            const int cpu_layer = st_gpu_layer_on_cpu(s, il) && !staged;
            /* cuda_doorbell with a cache, decode-sized: the pool computes the misses while the
             * GPU computes the hits (slot-rows counted after the step, from its routing) */
            const int pm = !cpu_layer && g->pool_misses && st_gpu_pool_call(s, T);
            if (cpu_layer) s->slots_cpu[il] += tn * K;
            else if (!pm) s->slots_gpu[il] += tn * K;
            const void *table = G->experts;
            if (staged) { /* the routing down; the batch's experts copied into the stage slots */
                int32_t *ids = s->ids + t0 * K;
                if (!ids_down) {
                    TRY(st_cuda_memcpy_d2h(ids, g->ids + t0 * K, sizeof(int32_t) * (size_t)(tn * K)));
                    s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)(tn * K));
                }
                TRY(st_gpu_cache_table(s, g->stage, il, ids, tn, K, 0, g->stream, &table));
            }
            /* pipe: the next layer's prediction rides on this layer's wait for its routing */
            const int pipe = !staged && st_gpu_pipe_layer(s, il, tn) && (cpu_layer || g->cache);
            if (pipe) TRY(st_gpu_predict_next(s, il, t0, tn));
            if (!cpu_layer && !staged && g->cache && !pm) { /* the routing down; misses loaded into slots */
                int32_t *ids = s->ids + t0 * K;
                TRY(st_cuda_memcpy_d2h(ids, g->ids + t0 * K, sizeof(int32_t) * (size_t)(tn * K)));
                s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)(tn * K));
                if (s->degrade.enabled) { /* DEGRADE_ZERO: light missed experts are not loaded */
                    TRY(st_cuda_memcpy_d2h(s->wts + t0 * K, g->wts + t0 * K, sizeof(float) * (size_t)(tn * K)));
                    if (!s->degrade.eval) st_gpu_cache_missed(g->cache, il, ids, tn * K, s->missed);
                    if (st_degrade_apply(&s->degrade, !s->gen_phase, tn, K, ids, s->wts + t0 * K,
                                         s->degrade.eval ? NULL : s->missed, &s->dstats, il) > 0)
                        TRY(st_cuda_memcpy_h2d(g->ids + t0 * K, ids, sizeof(int32_t) * (size_t)(tn * K)));
                }
                const int32_t *gids = ids; /* the experts the GPU computes */
                if (g->split) TRY(st_gpu_split_misses(s, il, t0, tn, ids, &split, &gids));
                TRY(st_gpu_cache_table(s, g->cache, il, gids, tn, K, pf, g->stream, &table));
                if (pf) { /* layer il + 1's router on this residual: its predicted experts start
                           * loading on the copy stream while this layer computes (this layer's
                           * slots stay held until its kernel is enqueued) */
                    TRY(st_gpu_predict_next(s, il, t0, tn));
                    TRY(st_cuda_stream_synchronize(g->stream));
                    TRY(st_gpu_cache_prefetch(s, g->cache, il + 1, g->h_pf_ids, tn * K, g->stream));
                }
                if (pipe) st_gpu_pipe_issue(s, il, tn); /* the next layer's reads start */
            }
            if (cpu_layer && st_gpu_pool_call(s, T)) {
                /* the expert pool (cuda_doorbell): the rows and routing published into the
                 * layer's mapped request, the pool's rows awaited on the device and copied into
                 * g->proj; the host goes on enqueueing (the CPU layers are the first ones: db[il]) */
                st_doorbell_layer *r = &g->db[il];
                TRY(st_cuda_pool_publish(g->xn, g->ids, g->wts, tn, E, K, st_gpu_db_dev(g, r->x),
                                         st_gpu_db_dev(g, r->ids), st_gpu_db_dev(g, r->wts),
                                         st_gpu_db_dev(g, &r->T), st_gpu_db_dev(g, &r->req_seq), g->d_step,
                                         g->stream));
                TRY(st_cuda_pool_wait(st_gpu_db_dev(g, &r->done_seq), g->d_step, st_gpu_db_dev(g, r->out),
                                      tn * E, g->proj, g->d_err, g->stream));
                s->pcie_bytes += (int64_t)(2 * sizeof(float) * (size_t)(tn * E) +
                                           (sizeof(int32_t) + sizeof(float)) * (size_t)(tn * K));
                if (g->stage) s->cpu_batches++; /* as the staging decision counts a CPU batch */
            } else if (cpu_layer) { /* experts in RAM: rows and routing down (pinned, async, one wait),
                              * the CPU's step, the result up (async: the stream's next kernels
                              * wait for it; the next hand-off's wait covers it before h_proj is
                              * written again) */
                s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(tn * E));
                float *hx = g->h_xn + t0 * E, *hw = g->h_wts + t0 * K, *hp_ = g->h_proj + t0 * E;
                int32_t *hi = g->h_ids + t0 * K;
                if (!handed) {
                    s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(tn * E) +
                                               (sizeof(int32_t) + sizeof(float)) * (size_t)(tn * K));
                    TRY(st_cuda_memcpy_async(hx, g->xn + t0 * E, sizeof(float) * (size_t)(tn * E), 0, g->stream));
                    TRY(st_cuda_memcpy_async(hi, g->ids + t0 * K, sizeof(int32_t) * (size_t)(tn * K), 0, g->stream));
                    TRY(st_cuda_memcpy_async(hw, g->wts + t0 * K, sizeof(float) * (size_t)(tn * K), 0, g->stream));
                    TRY(st_cuda_stream_synchronize(g->stream));
                }
                const st_expert *ex = s->experts + (size_t)il * (size_t)X;
                if (s->ram) { /* past the RAM budget: the routed experts from the RAM tier's slots
                               * (read from the file with O_DIRECT when not there) */
                    const strata_status rs = st_ram_tier_table(s, il, tn, hi, K, &ex);
                    if (rs == STRATA_OK && pipe) st_gpu_pipe_issue(s, il, tn); /* reads while the CPU computes */
                    if (rs != STRATA_OK) {
                        st_ram_tier_release(s);
                        return rs;
                    }
                }
                st_moe_ffn(s->tp, ex, X, hx, tn, hi, hw, K, hp_, s->moe_ws);
                if (s->ram) st_ram_tier_release(s);
                TRY(st_cuda_memcpy_async(g->proj + t0 * E, hp_, sizeof(float) * (size_t)(tn * E), 1, g->stream));
            }
            if (pm) { /* the split on the device: the pool gets the missed slots (-1 for the
                       * resident ones), g->pm_ids the resident ones; the routing is kept for the
                       * bookkeeping after the step; the table is the layer's exported one */
                st_doorbell_layer *r = &g->db[il];
                TRY(st_cuda_pool_publish_split(g->xn, g->ids, g->wts, tn, E, K, g->pm_where + (size_t)il * (size_t)X,
                                               X, g->pm_ids, g->pm_hist + (size_t)il * ST_POOL_T * (size_t)K,
                                               st_gpu_db_dev(g, r->x), st_gpu_db_dev(g, r->ids),
                                               st_gpu_db_dev(g, r->wts), st_gpu_db_dev(g, &r->T),
                                               st_gpu_db_dev(g, &r->req_seq), g->d_step, g->stream));
                table = (const st_cuda_expert *)g->pm_tables + (size_t)il * (size_t)X;
                s->pcie_bytes += (int64_t)(2 * sizeof(float) * (size_t)(tn * E) +
                                           (sizeof(int32_t) + sizeof(float)) * (size_t)(tn * K));
            }
            st_cuda_moe_args a;
            memset(&a, 0, sizeof a);
            a.experts = table;
            a.n_expert = X;
            a.type_gate = a.type_up = G->exp_type_gu;
            a.type_down = G->exp_type_down;
            a.n_embd = E;
            a.n_ff = hp->n_ff_exp;
            a.x = g->xn + t0 * E;
            a.T = tn;
            a.ids = pm ? g->pm_ids : split ? g->ids_split + t0 * K : g->ids + t0 * K;
            a.wts = g->wts + t0 * K;
            a.k = K;
            a.out = g->proj + t0 * E;
            a.accumulate = 0;
            a.ws = g->moe_ws;
            a.ws_bytes = g->moe_ws_bytes;
            if (!cpu_layer) TRY(st_cuda_moe_ffn(&a, g->stream));
            if (pm) { /* the pool's rows (computed meanwhile) added to the GPU's */
                st_doorbell_layer *r = &g->db[il];
                TRY(st_cuda_pool_wait(st_gpu_db_dev(g, &r->done_seq), g->d_step, st_gpu_db_dev(g, r->out),
                                      tn * E, g->pm_part, g->d_err, g->stream));
                TRY(st_cuda_add(g->proj, g->proj, g->pm_part, 1.0f, tn * E, g->stream));
            }
            if (pf) st_gpu_cache_release_held(g->cache);
            if (split) { /* the CPU's misses, computed while the GPU computes the rest, then added */
                st_moe_ffn(s->tp, s->experts + (size_t)il * (size_t)X, X, s->xn + t0 * E, tn, g->h_ids_cpu,
                           s->wts + t0 * K, K, s->proj + t0 * E, s->moe_ws);
                TRY(st_cuda_memcpy_h2d(g->cpu_part, s->proj + t0 * E, sizeof(float) * (size_t)(tn * E)));
                s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(tn * E));
                TRY(st_cuda_add(g->proj + t0 * E, g->proj + t0 * E, g->cpu_part, 1.0f, tn * E, g->stream));
            }
            TRY(st_gpu_mark(s, STRATA_PHASE_EXPERTS));
            if (G->shexp) { /* the shared expert: a one-expert table, weight = its gate or 1 */
                a.experts = G->shexp;
                a.n_expert = 1;
                a.type_gate = a.type_up = G->sh_type_gu;
                a.type_down = G->sh_type_down;
                a.n_ff = hp->n_ff_shexp;
                a.ids = g->zeros;
                a.wts = (G->shexp_gate_inp.data ? g->shgate : g->ones) + t0;
                a.k = 1;
                a.accumulate = 1;
                TRY(st_cuda_moe_ffn(&a, g->stream));
            }
        }
    }
    /* the residual, and the next layer's attention norm in the same launch */
    const float rs = m->arch->granite_scales ? hp->residual_scale : 1.0f;
    if (il + 1 < hp->n_layer && st_gpu_xq(g, T, E))
        TRY(st_cuda_add_rmsnorm_q8(g->x, g->proj, rs, g->xn, g->layers[il + 1].attn_norm, E, T, hp->norm_eps,
                                   g->xq, g->stream));
    else if (il + 1 < hp->n_layer)
        TRY(st_cuda_add_rmsnorm(g->x, g->proj, rs, g->xn, g->layers[il + 1].attn_norm, E, T, hp->norm_eps,
                                g->stream));
    else
        TRY(st_cuda_add(g->x, g->x, g->proj, rs, T * E, g->stream));
    return st_gpu_mark(s, STRATA_PHASE_SHARED);
}

/* Logits of rows first .. first+n-1 of the batch into logits ([n][n_vocab], host). */
static strata_status st_gpu_output(strata_session *s, int64_t first, int64_t n, float *logits) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    TRY(st_cuda_rmsnorm(g->xn, E, g->x + first * E, E, g->output_norm, E, 1, n, hp->norm_eps, g->stream));
    const int div = m->arch->granite_scales && hp->logit_scale != 1.0f && hp->logit_scale != 0.0f;
    for (int64_t c = 0; c < n; c += ST_GPU_COLS) {
        const int nc = (int)(n - c < ST_GPU_COLS ? n - c : ST_GPU_COLS);
        TRY(st_cuda_mmv(&g->output, g->xn + c * E, nc, g->logits, g->mmv_scratch, g->stream));
        if (div) TRY(st_cuda_scale(g->logits, g->logits, hp->logit_scale, 1, (int64_t)nc * V, g->stream));
        TRY(st_cuda_memcpy_d2h(logits + c * V, g->logits, sizeof(float) * (size_t)nc * (size_t)V));
        s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)nc * (size_t)V);
    }
    return STRATA_OK;
}

/* Row `row`'s logits into g->logits (device), as st_gpu_output computes them. */
static strata_status st_gpu_row_logits(strata_session *s, int64_t row) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    TRY(st_cuda_rmsnorm(g->xn, E, g->x + row * E, E, g->output_norm, E, 1, 1, hp->norm_eps, g->stream));
    TRY(st_cuda_mmv(&g->output, g->xn, 1, g->logits, g->mmv_scratch, g->stream));
    if (m->arch->granite_scales && hp->logit_scale != 1.0f && hp->logit_scale != 0.0f)
        TRY(st_cuda_scale(g->logits, g->logits, hp->logit_scale, 1, V, g->stream));
    return STRATA_OK;
}

/* The top-k candidates after row `row` (s->topk_*): k ids and logits down instead of the row. */
static strata_status st_gpu_output_topk(strata_session *s, int64_t row) {
    st_gpu *g = s->gpu;
    const int64_t V = s->model->hp.n_vocab;
    const int32_t k = s->topk_k;
    TRY(st_gpu_row_logits(s, row));
    TRY(st_cuda_topk(g->logits, V, k, g->topk_ids, g->topk_vals, g->topk_ws, g->topk_ws_bytes, g->stream));
    TRY(st_cuda_memcpy_d2h(s->topk_ids, g->topk_ids, sizeof(int32_t) * (size_t)k));
    TRY(st_cuda_memcpy_d2h(s->topk_vals, g->topk_vals, sizeof(float) * (size_t)k));
    s->pcie_bytes += (int64_t)k * 8;
    return STRATA_OK;
}

/* The greedy token after row `row` of the batch: its logits stay on the device, their argmax
 * comes down (one token instead of n_vocab floats). */
static strata_status st_gpu_output_argmax(strata_session *s, int64_t row, strata_token *out) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t V = hp->n_vocab;
    TRY(st_gpu_row_logits(s, row));
    TRY(st_cuda_argmax(g->logits, V, g->amax, g->stream));
    st_cuda_argmax_out r;
    TRY(st_cuda_memcpy_d2h(&r, g->amax, sizeof r));
    s->pcie_bytes += (int64_t)sizeof r;
    if (!(r.logit > -INFINITY))
        return st_error(STRATA_ERR_INVALID_ARG, "greedy token: no finite logit among %d", (int)V);
    *out = r.id;
    return STRATA_OK;
}

static strata_status st_gpu_forward_go(strata_session *s, const strata_token *tokens, int64_t T,
                                       float *logits, int all);

/* Experts a decode step of the pool-miss mode may load in place of others for the steps after
 * it (synchronous copies between steps: ~70 us each for a qwen3-30b-a3b Q4_K expert over PCIe
 * 4); loads into EMPTY slots are not limited. */
#define ST_POOL_LOADS_PER_STEP 4

/* After a decode step of the pool-miss mode: its routing comes down (one copy), each cache
 * layer's ids are looked up (LRU, hot set, hit and miss counters), the slot-rows counted as
 * the device split them (resident: GPU), and the missed experts, earliest layers first, loaded
 * for the steps to come: into EMPTY slots, then up to ST_POOL_LOADS_PER_STEP evicting. */
static strata_status st_gpu_pool_misses_after(strata_session *s, int64_t T) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t K = hp->n_expert_used, R = ST_POOL_T;
    TRY(st_cuda_memcpy_d2h(g->h_pm_hist, g->pm_hist, sizeof(int32_t) * (size_t)(hp->n_layer * R * K)));
    s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)(hp->n_layer * T * K));
    int32_t budget = ST_POOL_LOADS_PER_STEP, empty = st_gpu_cache_empty_slots(g->cache);
    for (int il = 0; il < hp->n_layer; il++) {
        if (st_gpu_layer_on_cpu(s, il)) continue;
        int64_t res = 0;
        TRY(st_gpu_cache_after_step(s, g->cache, il, g->h_pm_hist + il * R * K, T * K, &empty, &budget, &res));
        s->slots_gpu[il] += res;
        s->slots_cpu[il] += T * K - res;
    }
    return STRATA_OK;
}

strata_status st_gpu_forward_batch(strata_session *s, const strata_token *tokens, int64_t T,
                                   float *logits, int all) {
    st_gpu *g = s->gpu;
    g->pool_open = 0;
    const strata_status st = st_gpu_forward_go(s, tokens, T, logits, all);
    /* a call that failed after announcing a step to the expert pool: the layers it did not
     * publish are published empty, so the pool is not left waiting for them (st_pool_abandon) */
    if (st != STRATA_OK && g->pool_open) st_pool_abandon(g->pool, *g->h_step);
    g->pool_open = 0;
    return st;
}

static strata_status st_gpu_forward_go(strata_session *s, const strata_token *tokens, int64_t T,
                                       float *logits, int all) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const int64_t pos0 = s->n_past, E = hp->n_embd;
    /* programmatic dependent launch for this thread's launches until the next call: decode-sized
     * calls (one GEMV slice, ST_GPU_COLS tokens) only by default (cuda_pdl 1). Prompt batches ran 1-12% faster without it on the H200
     * (8 of 8 pairs over four runs, docs/PERFORMANCE.md): a kernel signals its dependents as it
     * starts, and the next kernel's blocks then hold SM room while a many-wave grid still runs. */
    st_cuda_set_pdl(s->cuda_pdl == 2 || (s->cuda_pdl == 1 && T <= ST_GPU_COLS));
    st_prof_start(s);
    /* the expert pool serves this call's CPU layers: the step announced, its number up */
    const int pool = st_gpu_pool_call(s, T);
    if (pool && g->pool_misses) /* the cache's residency as the step's kernels will read it */
        TRY(st_gpu_cache_export(s, g->cache, &g->pm_tables, &g->pm_where));
    if (pool) {
        *g->h_step = st_pool_step(g->pool);
        g->pool_open = 1;
        TRY(st_cuda_memcpy_async(g->d_step, g->h_step, sizeof(uint32_t), 1, g->stream));
    }
    /* embeddings on the CPU, as forward.c, then up from pinned memory */
    float *emb = g->h_embd ? g->h_embd : s->x;
    st_embed_tokens(s, tokens, T, emb);
    TRY(st_cuda_memcpy_h2d(g->x, emb, sizeof(float) * (size_t)(T * E)));
    s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(T * E));
    for (int64_t t = 0; t < T; t++) g->hpos[t] = (int32_t)(pos0 + t);
    TRY(st_cuda_memcpy_h2d(g->pos, g->hpos, sizeof(int32_t) * (size_t)T));
    TRY(st_gpu_mark(s, STRATA_PHASE_EMBED));
    /* A single-token step is captured into a CUDA graph once and then replayed as one launch:
     * its kernels read the position from g->pos and everything else they use is fixed, except
     * the attention plan, which changes every ST_ATTN_NP_BUCKET positions (a new capture, kept
     * in place with cudaGraphExecUpdate). Not with profile's syncs or host work between layers:
     * CPU layers only through the expert pool (its publish and wait kernels read the step number
     * from g->d_step, uploaded above) and when asked (cuda_graphs 2: on the H100 host its steps
     * measured 0-40% slower as graphs, erratically), no expert cache. */
    const int graph = g->graphs && T == 1 && !s->profile && (s->n_cpu_moe == 0 || (pool && g->graphs == 2)) &&
                      !g->cache;
    const int64_t gnp = graph ? st_cuda_attn_plan_np(pos0 + 1, s->n_ctx) : 0;
    strata_status st = STRATA_OK;
    if (graph && g->graph && g->graph_np == gnp) {
        TRY(st_cuda_graph_launch(g->graph, g->stream));
        s->graph_launches++;
        if (hp->n_expert > 0) /* what st_gpu_ffn_block counts for a step of one token */
            for (int il = 0; il < hp->n_layer; il++) {
                const int64_t K = hp->n_expert_used;
                if (!st_gpu_layer_on_cpu(s, il)) {
                    s->slots_gpu[il] += K;
                    continue;
                }
                s->slots_cpu[il] += K;
                s->pcie_bytes += (int64_t)(2 * sizeof(float) * (size_t)E + (sizeof(int32_t) + sizeof(float)) * (size_t)K);
                if (g->stage) s->cpu_batches++;
            }
    } else {
        if (graph) TRY(st_cuda_capture_begin(g->stream));
        for (int il = 0; il < hp->n_layer && st == STRATA_OK; il++) {
            st = st_gpu_attn_block(s, il, T, pos0);
            if (st == STRATA_OK) st = st_gpu_ffn_block(s, il, T);
        }
        if (graph) {
            if (st != STRATA_OK) {
                st_cuda_capture_abort(g->stream);
                return st;
            }
            int reused = 0;
            TRY(st_cuda_capture_end_launch(g->stream, &g->graph, &reused));
            g->graph_np = gnp;
            s->graph_launches++;
            s->graph_rebuilds++;
        }
    }
    TRY(st);
    if (logits) TRY(all ? st_gpu_output(s, 0, T, logits) : st_gpu_output(s, T - 1, 1, logits));
    else if (s->want_argmax) TRY(st_gpu_output_argmax(s, T - 1, s->argmax_out));
    else if (s->want_topk) TRY(st_gpu_output_topk(s, T - 1));
    else TRY(st_cuda_synchronize());
    if (pool && g->pool_misses) TRY(st_gpu_pool_misses_after(s, T));
    if (pool) { /* a pool that never answered: the stream went on with zeros, so say so */
        int32_t err = 0;
        TRY(st_cuda_memcpy_d2h(&err, g->d_err, sizeof err));
        if (err) {
            TRY(st_cuda_memset(g->d_err, 0, sizeof err));
            return st_error(STRATA_ERR_BACKEND, "gpu session: the CPU expert pool did not answer a "
                            "layer's request within ~10 s (cuda_doorbell)");
        }
    }
    st_prof_mark(s, STRATA_PHASE_OUTPUT);
    s->n_past += (int32_t)T;
    return STRATA_OK;
}

#endif /* STRATA_HAVE_CUDA */
