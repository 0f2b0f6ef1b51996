/* forward_cuda_setup.c - a GPU session's set-up and teardown (backend STRATA_BACKEND_CUDA): every
 * weight uploaded to device memory once (matrices as descriptors, q/k/v fused where their types
 * match, experts resident unless placed elsewhere; latent attention's weights), device scratch sized for
 * n_batch tokens, the GPU KV cache (the latent rows alone for latent attention), and the expert placement's parts: the pinned copy of RAM-kept experts, the GPU
 * expert cache (its size when auto; a layer split's stages: one each, for its own layers), the hand-off rows and the expert pool of the CPU layers,
 * the prediction buffers of gpu_prefetch and pipe, the cost model's measured figures. The
 * forward pass itself is forward_cuda.c and moe_block.c; they share forward_cuda.h. */
#include "forward_cuda.h"
#include "layer_split.h"
#include "deltanet_gpu.h"
#include "dot.h"

#ifdef STRATA_HAVE_CUDA

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

static strata_status st_gpu_cache_auto_slots(strata_session *s, int32_t share, int32_t *slots);
static strata_status st_gpu_pin_experts(strata_session *s);
static strata_status st_gpu_measure_costs(strata_session *s, st_gpu_tier *c, int il, int step);
static strata_status st_gpu_alloc_split(strata_session *s);
static int st_gpu_exact_ok(const strata_session *s, int on_cpu);
static strata_status st_gpu_alloc_exact(strata_session *s);
static strata_status st_gpu_setup_pool_pcie(strata_session *s);

/* ---------------------------------------------------------------------------------------------
 * Upload
 * ------------------------------------------------------------------------------------------- */

/* Room for one more entry in the upload list. */
static strata_status st_gpu_ups_reserve(st_gpu *g) {
    if (g->n_ups < g->cap_ups) return STRATA_OK;
    const int cap = g->cap_ups ? 2 * g->cap_ups : 256;
    st_gpu_upload *u = realloc(g->ups, sizeof *u * (size_t)cap);
    if (!u) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
    g->ups = u;
    g->cap_ups = cap;
    return STRATA_OK;
}

/* Device copy of a tensor's bytes (shared when two views have the same data, e.g. tied
 * embeddings). *dev = NULL for a missing tensor. */
static strata_status st_gpu_put(st_gpu *g, const st_tensor *t, void **dev) {
    *dev = NULL;
    if (!t->data) return STRATA_OK;
    for (int i = 0; i < g->n_ups; i++)
        if (g->ups[i].host == t->data) { *dev = g->ups[i].dev; return STRATA_OK; }
    TRY(st_gpu_ups_reserve(g));
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

/* Matrices ts[0..n) (n <= 3) of one type and row as one device matrix *cat (the rows of each in
 * turn); their descriptors ms[i] then point into it. Leaves *cat zero (and ms untouched) when the
 * types or rows differ or the GEMV has no kernel for them. */
static strata_status st_gpu_put_cat(st_gpu *g, const st_tensor *const *ts, st_cuda_mat *const *ms, int n,
                                    st_cuda_mat *cat) {
    memset(cat, 0, sizeof *cat);
    for (int i = 0; i < n; i++)
        if (!ts[i]->data || ts[i]->type != ts[0]->type || ts[i]->row_bytes != ts[0]->row_bytes ||
            ts[i]->ne[0] != ts[0]->ne[0] || !st_cuda_mmv_supports(ts[i]->type))
            return STRATA_OK;
    size_t nb = 0;
    for (int i = 0; i < n; i++) nb += st_tensor_bytes(ts[i]);
    TRY(st_gpu_ups_reserve(g));
    void *d = NULL;
    strata_status st = st_cuda_malloc(&d, nb);
    if (st != STRATA_OK)
        return st_error(st, "gpu session: %zu bytes for %s and the matrices after it: %s", nb,
                        ts[0]->name ? ts[0]->name : "a projection", strata_last_error());
    g->ups[g->n_ups].host = NULL; /* never shared */
    g->ups[g->n_ups].dev = d;
    g->n_ups++;
    g->weight_bytes += nb;
    size_t off = 0;
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        TRY(st_cuda_memcpy_h2d((uint8_t *)d + off, ts[i]->data, st_tensor_bytes(ts[i])));
        memset(ms[i], 0, sizeof *ms[i]);
        ms[i]->type = ts[i]->type;
        ms[i]->data = (uint8_t *)d + off;
        ms[i]->ne0 = ts[i]->ne[0];
        ms[i]->ne1 = ts[i]->ne[1];
        ms[i]->row_bytes = ts[i]->row_bytes;
        off += st_tensor_bytes(ts[i]);
        rows += ts[i]->ne[1];
    }
    *cat = *ms[0];
    cat->ne1 = rows;
    if (g->progress) g->progress("upload", (int64_t)g->weight_bytes, g->upload_total, g->progress_data);
    return STRATA_OK;
}

/* wq, wk and wv of one type as one device matrix (rows of wq, then wk, then wv); the three
 * descriptors then point into it. Leaves G->wqkv zero when the types or row sizes differ. */
static strata_status st_gpu_put_qkv(st_gpu *g, const st_layer *L, st_gpu_layer *G) {
    const st_tensor *ts[3] = {&L->wq, &L->wk, &L->wv};
    st_cuda_mat *ms[3] = {&G->wq, &G->wk, &G->wv};
    return st_gpu_put_cat(g, ts, ms, 3, &G->wqkv);
}

strata_status st_gpu_put_f32(st_gpu *g, const st_tensor *t, float **dev) {
    if (t->data && t->type != STRATA_TYPE_F32)
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: %s is %s, expected f32", t->name,
                        strata_type_name(t->type));
    void *d;
    TRY(st_gpu_put(g, t, &d));
    *dev = d;
    return STRATA_OK;
}

/* A 2-D matrix descriptor (expert e of a merged tensor when ne[2] > 1). */
strata_status st_gpu_put_mat(st_gpu *g, const st_tensor *t, st_cuda_mat *m) {
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

/* A per-head absorption weight (cols, rows, n_head) up as it is (st_cuda_mla_absorb reads the
 * heads in place). */
static strata_status st_gpu_put_mla_w(st_gpu *g, const st_tensor *t, st_cuda_mla_w *w) {
    memset(w, 0, sizeof *w);
    if (!st_cuda_mla_absorb_supports(t->type, t->ne[0]))
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: no GPU absorption matmul for %s (%s, rows of "
                        "%lld)", t->name, strata_type_name(t->type), (long long)t->ne[0]);
    void *d;
    TRY(st_gpu_put(g, t, &d));
    w->type = t->type;
    w->data = d;
    w->cols = t->ne[0];
    w->rows = t->ne[1];
    w->n_head = t->ne[2] > 0 ? t->ne[2] : 1;
    w->row_bytes = t->row_bytes;
    return STRATA_OK;
}

/* Latent attention's weights (deepseek2): q (through its low rank and its norm, or wq), the
 * latent's projection and norm, the absorption weights. q's first matrix and wkv_a as one
 * (G->wqkv_a) where a decode step's one GEMV over both gives the bits of the two: a quantized
 * type (the GEMV then takes a warp a row, whatever the row count; float types take another
 * kernel below 1024 rows), wkv_a's rows at a 256-byte offset (the prompt's own matmul of each
 * reads them in place) and a joined row within room floats (g->qkv's row, where it goes). */
static strata_status st_gpu_put_mla(st_gpu *g, const st_layer *L, st_gpu_layer *G, int64_t room) {
    const st_tensor *qt = L->wq_a.data ? &L->wq_a : &L->wq;
    st_cuda_mat *qm = L->wq_a.data ? &G->wq_a : &G->wq;
    memset(&G->wqkv_a, 0, sizeof G->wqkv_a);
    const int fl = qt->type == STRATA_TYPE_F32 || qt->type == STRATA_TYPE_F16 || qt->type == STRATA_TYPE_BF16;
    if (qt->data && !fl && st_tensor_bytes(qt) % 256 == 0 && qt->ne[1] + L->wkv_a.ne[1] <= room) {
        const st_tensor *ts[2] = {qt, &L->wkv_a};
        st_cuda_mat *ms[2] = {qm, &G->wkv_a};
        TRY(st_gpu_put_cat(g, ts, ms, 2, &G->wqkv_a));
    }
    if (!G->wqkv_a.data) {
        TRY(st_gpu_put_mat(g, qt, qm));
        TRY(st_gpu_put_mat(g, &L->wkv_a, &G->wkv_a));
    }
    if (L->wq_a.data) TRY(st_gpu_put_mat(g, &L->wq, &G->wq)); /* (none in such files) */
    else memset(&G->wq_a, 0, sizeof G->wq_a);
    TRY(st_gpu_put_mat(g, &L->wq_b, &G->wq_b));
    TRY(st_gpu_put_f32(g, &L->q_a_norm, &G->q_a_norm));
    TRY(st_gpu_put_f32(g, &L->kv_a_norm, &G->kv_a_norm));
    TRY(st_gpu_put_mla_w(g, &L->wk_b, &G->wk_b));
    return st_gpu_put_mla_w(g, &L->wv_b, &G->wv_b);
}

/* GPU memory the session may still allocate: the device's free memory, within gpu_mem less the
 * weights, the KV cache and any expert slots (cache and staging) when gpu_mem is set; and the
 * margin it keeps free beyond that: 2% of the card, at least 512 MiB (the driver's and the
 * kernels' own needs). The expert cache's auto size and the tile copies both go by them. */
strata_status st_gpu_room(strata_session *s, int64_t *avail, int64_t *margin) {
    st_gpu *g = s->gpu;
    const st_gpu_tier_ctx ctx = st_gpu_tier_ctx_of(s);
    size_t free_b = 0, total_b = 0;
    TRY(st_cuda_mem_info(&free_b, &total_b));
    *avail = (int64_t)free_b;
    *margin = (int64_t)(total_b / 50) > (512LL << 20) ? (int64_t)(total_b / 50) : (512LL << 20);
    if (s->plan.gpu_mem > 0) {
        int64_t used = (int64_t)(g->weight_bytes + g->kv_bytes);
        st_gpu_tier *cs[3] = {g->cache, g->stage, g->ahead};
        for (int i = 0; i < 3; i++) {
            int32_t slots = 0;
            int64_t h, mi, b;
            double lo, hi;
            if (!cs[i]) continue;
            st_gpu_tier_counters(cs[i], &slots, &h, &mi, &b, &lo, &hi);
            used += (int64_t)slots * (int64_t)st_gpu_tier_slot_bytes(&ctx);
        }
        if (s->plan.gpu_mem - used < *avail) *avail = s->plan.gpu_mem - used;
    }
    return STRATA_OK;
}

/* The prompt tiles' copies of matrices ms[0..n) (cuda_mmq.h: Q8_0 only; others are passed
 * over), made on the device from their blocks, all or none: only when the GPU's free memory
 * (and gpu_mem) leaves st_gpu_margin after them; else they are counted in g->tiles_skipped and
 * their prompt batches read the blocks (the same bits, slower). */
static strata_status st_gpu_put_tiles(strata_session *s, st_cuda_mat *const *ms, int n) {
    st_gpu *g = s->gpu;
    size_t sz[3] = {0, 0, 0}, want = 0;
    int k = 0;
    for (int i = 0; i < n && i < 3; i++) {
        sz[i] = ms[i]->data ? st_cuda_mmq_tiles_bytes(ms[i]) : 0;
        want += sz[i];
        k += sz[i] > 0;
    }
    if (!want) return STRATA_OK;
    int64_t avail, margin;
    TRY(st_gpu_room(s, &avail, &margin));
    if (avail - margin < (int64_t)want) {
        g->tiles_skipped += k;
        return STRATA_OK;
    }
    for (int i = 0; i < n && i < 3; i++) {
        if (!sz[i]) continue;
        TRY(st_gpu_ups_reserve(g));
        void *d = NULL;
        strata_status st = st_cuda_malloc(&d, sz[i]);
        if (st != STRATA_OK)
            return st_error(st, "gpu session: %zu bytes for a prompt tile copy (q8_tiles 0 does without): %s",
                            sz[i], strata_last_error());
        g->ups[g->n_ups].host = NULL; /* never shared */
        g->ups[g->n_ups].dev = d;
        g->n_ups++;
        g->weight_bytes += sz[i];
        g->tiles_bytes += sz[i];
        TRY(st_cuda_mmq_tiles_make(ms[i], d, g->stream));
        ms[i]->tiles = d;
        if (s->q8_sm60) { /* the decode GEMV reads the copy too (q8_sm60.cuh) */
            ms[i]->gemv_sm60 = s->q8_sm60_bps;
            g->sm60_mats++;
        }
    }
    return STRATA_OK;
}

/* q8_tiles: the tile copies, made after every other allocation of the session (weights, KV
 * cache, scratch, an expert cache and its staging), so that they only take memory nothing else
 * claimed: a model that fits without them still fits, and the expert cache keeps its size.
 * Layer by layer: q/k/v (fused, or each), the output projection, a dense FFN's gate and up
 * (together: the SwiGLU tiles take the copy only with both) and down. q8_sm60 makes them with
 * q8_tiles 0 too (its GEMV reads them) and the output head's last (only that GEMV reads it). */
static strata_status st_gpu_put_all_tiles(strata_session *s) {
    st_gpu *g = s->gpu;
    for (int il = 0; (s->q8_tiles || s->q8_sm60) && il < s->model->hp.n_layer; il++) {
        st_gpu_layer *G = &g->layers[il];
        if (G->wqkv.data) {
            st_cuda_mat *q[1] = {&G->wqkv};
            TRY(st_gpu_put_tiles(s, q, 1));
        } else {
            st_cuda_mat *q[3] = {&G->wq, &G->wk, &G->wv};
            for (int i = 0; i < 3; i++) TRY(st_gpu_put_tiles(s, &q[i], 1));
        }
        st_cuda_mat *o[1] = {&G->wo}, *gu[2] = {&G->ffn_gate, &G->ffn_up}, *dn[1] = {&G->ffn_down};
        TRY(st_gpu_put_tiles(s, o, 1));
        TRY(st_gpu_put_tiles(s, gu, 2));
        TRY(st_gpu_put_tiles(s, dn, 1));
    }
    if (s->q8_sm60) {
        st_cuda_mat *h[1] = {&g->output};
        TRY(st_gpu_put_tiles(s, h, 1));
    }
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

strata_status st_gpu_alloc(void **p, size_t bytes) {
    return st_cuda_malloc(p, bytes ? bytes : 16);
}

/* Latent attention's kernels take the model's widths (st_gpu_check_shape). */
static strata_status st_gpu_check_mla(const strata_model *m, const st_gpu *g, strata_type kv_type) {
    const st_hparams *hp = &m->hp;
    if (!st_cuda_mla_supports(kv_type, &g->mla))
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: latent attention with %d heads over %d + %d "
                        "(%s cache) is not supported on this GPU (kv_lora_rank <= %d, an even row, shared "
                        "memory within %zu KiB a block)", (int)hp->n_head, (int)hp->n_lora_kv, (int)hp->n_rot,
                        strata_type_name(kv_type), ST_MLA_MAX_LORA, st_cuda_smem_limit() / 1024);
    if (!st_cuda_rope_supports(&g->rope, hp->n_rot))
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: RoPE over %d dimensions is not supported on "
                        "the GPU", (int)hp->n_rot);
    return STRATA_OK;
}

static strata_status st_gpu_check_shape(const strata_model *m, const st_gpu *g, strata_type kv_type) {
    const st_hparams *hp = &m->hp;
    if (m->arch->mla) {
        TRY(st_gpu_check_mla(m, g, kv_type));
    } else if (!st_cuda_attn_supports(STRATA_TYPE_F16, &g->shape))
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: attention with %d/%d heads of %d/%d "
                        "is not supported on this GPU (head_dim 64, 128 or 256; 256 needs 73 KiB of "
                        "shared memory a block, this GPU allows %zu KiB: docs/OLDER_GPUS.md)",
                        (int)hp->n_head, (int)hp->n_head_kv, (int)hp->head_dim, (int)hp->head_dim_v,
                        st_cuda_smem_limit() / 1024);
    if (!m->arch->mla && !st_cuda_rope_supports(&g->rope, hp->head_dim))
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: RoPE over %d of %d dimensions is not "
                        "supported on the GPU", (int)hp->n_rot, (int)hp->head_dim);
    if (hp->n_expert > 0 && (hp->n_embd % 32 != 0 || hp->n_ff_exp % 32 != 0 ||
                             (hp->n_ff_shexp > 0 && hp->n_ff_shexp % 32 != 0)))
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: expert widths %d/%d/%d must be "
                        "multiples of 32", (int)hp->n_embd, (int)hp->n_ff_exp, (int)hp->n_ff_shexp);
    return STRATA_OK;
}

/* ---- the CPU expert pool behind a doorbell (cuda_doorbell) ------------------------------------- */

/* Whether layer l's record gets per-slot rows (pm_exact: a cache layer with experts). */
static int st_gpu_pool_rows_layer(const strata_session *s, int32_t l) {
    return s->gpu->pm_exact && !st_plan_layer_on_cpu(&s->plan, l) && st_layer_has_experts(&s->model->layers[l]);
}

/* The mapped block (a record per CPU layer, then each layer's x, out, ids and wts for ST_POOL_T
 * rows, 64-byte aligned, with defer_cpu's split out_light, and with pm_exact each cache layer's
 * per-slot rows), the step and error words, and the pool's threads over the CPU layers' expert
 * views (the pinned copies when pin_experts made them). defer_cpu: each record's split weight,
 * and the device rows of the late join. pm_exact (set here): with an expert cache whose layers'
 * types take the CPU-exact kernels, the pool answers the cache's misses per slot (pool.h). */
static strata_status st_gpu_pool_create(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    /* a record per CPU layer (the first ones), or per layer when the pool serves a cache's misses */
    const int32_t L = s->plan.expert_cache != 0 || s->plan.n_cpu_moe < 0 || s->plan.n_cpu_moe > hp->n_layer ? hp->n_layer
                                                                                          : s->plan.n_cpu_moe;
    const size_t E = (size_t)hp->n_embd, K = (size_t)hp->n_expert_used, R = ST_POOL_T;
    const size_t rec = st_round_up(sizeof(st_doorbell_layer) * (size_t)L, 64);
    const size_t xb = st_round_up(sizeof(float) * R * E, 64), kb = st_round_up(sizeof(float) * R * K, 64);
    const size_t rb = st_round_up(sizeof(float) * R * K * E, 64);
    const int split = s->plan.defer_cpu != 0 && s->plan.defer_below < 1.0f; /* heavy rows first */
    const size_t per = (split ? 3 : 2) * xb + 2 * kb;
    g->pm_exact = g->cache && hp->n_expert > 0 && st_gpu_exact_ok(s, 0);
    size_t n_rows = 0;
    for (int32_t l = 0; l < L; l++) n_rows += (size_t)st_gpu_pool_rows_layer(s, l);
    void *h = NULL, *d = NULL;
    TRY(st_cuda_host_alloc_mapped(&h, &d, rec + per * (size_t)L + rb * n_rows));
    g->db_host = h;
    g->db_dev = d;
    g->db = (st_doorbell_layer *)h;
    uint8_t *rows = (uint8_t *)h + rec + per * (size_t)L;
    for (int32_t l = 0; l < L; l++) {
        uint8_t *base = (uint8_t *)h + rec + per * (size_t)l;
        st_doorbell_layer *r = &g->db[l];
        r->rows = NULL;
        if (st_gpu_pool_rows_layer(s, l)) {
            r->rows = (float *)rows;
            rows += rb;
        }
        atomic_init(&r->req_seq, 0);
        atomic_init(&r->done_seq, 0);
        atomic_init(&r->part_seq, 0);
        r->T = 0;
        /* the split only in the CPU layers' records: a cache layer's misses join in one part
         * (st_gpu_pool_misses_join reads out alone) */
        const int split_l = split && st_plan_layer_on_cpu(&s->plan, l);
        r->below = split_l ? s->plan.defer_below : 0.0f;
        r->out_light = split_l ? (float *)(base + 2 * xb + 2 * kb) : NULL;
        r->x = (float *)base;
        r->out = (float *)(base + xb);
        r->ids = (int32_t *)(base + 2 * xb);
        r->wts = (float *)(base + 2 * xb + kb);
    }
    TRY(st_gpu_alloc((void **)&g->d_step, sizeof(uint32_t)));
    TRY(st_gpu_alloc((void **)&g->d_err, sizeof(int32_t)));
    TRY(st_cuda_memset(g->d_err, 0, sizeof(int32_t)));
    TRY(st_cuda_host_alloc((void **)&g->h_step, sizeof(uint32_t)));
    g->defer = s->plan.defer_cpu; /* (defer_pending: -1 from st_gpu_build, reset per call) */
    if (g->defer) TRY(st_gpu_alloc((void **)&g->defer_part, sizeof(float) * R * E));
    return st_pool_create(s->experts, L, hp->n_expert, hp->n_embd, hp->n_ff_exp, hp->n_expert_used,
                          (int32_t)R, g->db, s->n_threads > 0 ? s->n_threads : 1, &g->pool);
}

int st_gpu_pool_serves(const strata_session *s, int64_t T) { return s->gpu && st_gpu_pool_call(s, T); }

/* The buffers of the next layer's expert prediction (gpu_prefetch, pipe): 8 rows. */
strata_status st_gpu_alloc_prediction(st_gpu *g, const st_hparams *hp) {
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

/* A MoE layer's FFN: the router, its selection bias (exp_probs_b, deepseek2), the routed experts
 * (unless they stay in RAM: a CPU layer, or the expert cache's; all_experts: always up), the
 * shared expert and its gate. */
static strata_status st_gpu_upload_moe(strata_session *s, int il, int all_experts) {
    const st_hparams *hp = &s->model->hp;
    const st_layer *L = &s->model->layers[il];
    st_gpu *g = s->gpu;
    st_gpu_layer *G = &g->layers[il];
    TRY(st_gpu_put_mat(g, &L->ffn_gate_inp, &G->router));
    TRY(st_gpu_put_f32(g, &L->exp_probs_b, &G->exp_probs_b));
    TRY(st_gpu_put_f32(g, &L->ffn_gate_inp_b, &G->router_b));
    TRY(st_gpu_put_f32(g, &L->ffn_gate_exps_b, &G->b_gate_exps));
    TRY(st_gpu_put_f32(g, &L->ffn_up_exps_b, &G->b_up_exps));
    TRY(st_gpu_put_f32(g, &L->ffn_down_exps_b, &G->b_down_exps));
    /* --n-cpu-moe: this layer's routed experts stay in RAM for the CPU (G->experts NULL) */
    if (all_experts || (!st_plan_layer_on_cpu(&s->plan, il) && s->plan.expert_cache == 0))
        TRY(st_gpu_put_experts(g, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, hp->n_expert,
                               &G->experts));
    G->exp_type_gu = L->ffn_gate_exps.type;
    G->exp_type_down = L->ffn_down_exps.type;
    if (s->shexp && L->ffn_gate_shexp.data) { /* gated (qwen2moe) or not (deepseek2: gate 1) */
        TRY(st_gpu_put_experts(g, &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_down_shexp, 1, &G->shexp));
        G->sh_type_gu = L->ffn_gate_shexp.type;
        G->sh_type_down = L->ffn_down_shexp.type;
        if (L->ffn_gate_inp_shexp.data) {
            st_tensor gi = L->ffn_gate_inp_shexp; /* (n_embd): one row */
            gi.ne[1] = 1;
            TRY(st_gpu_put_mat(g, &gi, &G->shexp_gate_inp));
        }
    }
    return STRATA_OK;
}

/* A dense FFN: dense models' layers, deepseek2's leading dense layers (n_ff wide). */
static strata_status st_gpu_upload_dense_ffn(st_gpu *g, const st_layer *L, st_gpu_layer *G, int il) {
    TRY(st_gpu_put_mat(g, &L->ffn_gate, &G->ffn_gate));
    TRY(st_gpu_put_mat(g, &L->ffn_up, &G->ffn_up));
    TRY(st_gpu_put_mat(g, &L->ffn_down, &G->ffn_down));
    if (G->ffn_gate.type != G->ffn_up.type)
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: layer %d gate and up types differ", il);
    return STRATA_OK;
}

strata_status st_gpu_upload_layer(strata_session *s, int il, int all_experts) {
    const strata_model *m = s->model;
    st_gpu *g = s->gpu;
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
    TRY(st_gpu_put_f32(g, &L->attn_sinks, &G->attn_sinks));
    if (m->arch->id != ST_ARCH_QWEN3NEXT) TRY(st_gpu_put_qkv(g, L, G)); /* (its wq holds the gates) */
    if (!G->wqkv.data && !m->arch->mla) { /* (latent attention's q: st_gpu_put_mla) */
        TRY(st_gpu_put_mat(g, &L->wq, &G->wq));
        TRY(st_gpu_put_mat(g, &L->wk, &G->wk));
        TRY(st_gpu_put_mat(g, &L->wv, &G->wv));
    }
    TRY(st_gpu_put_mat(g, &L->wo, &G->wo));
    if (m->arch->mla) {
        const st_scratch_dims d = st_session_dims(s);
        TRY(st_gpu_put_mla(g, L, G, (int64_t)(d.nq + d.nk + d.nv)));
    }
    if (st_layer_has_experts(L)) return st_gpu_upload_moe(s, il, all_experts);
    return st_gpu_upload_dense_ffn(g, L, G, il);
}

static strata_status st_gpu_upload_layers(strata_session *s) {
    const strata_model *m = s->model;
    st_gpu *g = s->gpu;
    if (g->l1 < m->hp.n_layer) /* a stage's last join takes the next stage's first attention norm */
        TRY(st_gpu_put_f32(g, &m->layers[g->l1].attn_norm, &g->layers[g->l1].attn_norm));
    for (int il = g->l0; il < g->l1; il++) TRY(st_gpu_upload_layer(s, il, 0));
    return STRATA_OK;
}

/* Latent attention's own rows (st_gpu's mla_*; g->q, g->k and g->att are wide enough as the
 * session's dims give them: n_head * (kv_lora + n_rot), kv_lora + n_rot, n_head * kv_lora), and
 * the GEMV's widest input among its matrices (wq_b's n_lora_q, wo's n_head * head_dim_v_mla). */
static strata_status st_gpu_alloc_mla(strata_session *s, size_t T, size_t *widest) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const size_t f = sizeof(float), H = (size_t)hp->n_head, hv = (size_t)hp->head_dim_v_mla;
    const size_t nlq = hp->n_lora_q > 0 ? (size_t)hp->n_lora_q : 1;
    TRY(st_gpu_alloc((void **)&g->mla_q, f * T * H * (size_t)hp->head_dim_mla));
    TRY(st_gpu_alloc((void **)&g->mla_qa, f * T * nlq));
    TRY(st_gpu_alloc((void **)&g->mla_v, f * T * H * hv));
    if ((H * hv) % 32 == 0) TRY(st_gpu_alloc(&g->mla_vq, st_cuda_mmv_scratch_bytes((int64_t)(H * hv), ST_GPU_COLS)));
    if (nlq > *widest) *widest = nlq;
    if (H * hv > *widest) *widest = H * hv;
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
    TRY(st_gpu_alloc((void **)&g->pos, sizeof(int32_t) * (T + 1))); /* + qwen3next's history row */
    TRY(st_gpu_alloc((void **)&g->amax, sizeof *g->amax));
    TRY(st_gpu_alloc((void **)&g->topk_ids, sizeof(int32_t) * ST_CUDA_TOPK_MAX));
    TRY(st_gpu_alloc((void **)&g->topk_vals, f * ST_CUDA_TOPK_MAX));
    g->topk_ws_bytes = st_cuda_topk_wsize(hp->n_vocab, ST_CUDA_TOPK_MAX);
    TRY(st_gpu_alloc(&g->topk_ws, g->topk_ws_bytes));
    g->hpos = malloc(sizeof(int32_t) * (T + 1));
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
    if (s->model->n_mtp > 0 && 2 * E > widest) widest = 2 * E; /* an MTP layer's eh_proj */
    if (s->model->arch->mla) TRY(st_gpu_alloc_mla(s, T, &widest));
    TRY(st_gpu_alloc(&g->mmv_scratch, st_cuda_mmv_scratch_bytes((int64_t)widest, ST_GPU_COLS)));
    if (E % 32 == 0) TRY(st_gpu_alloc(&g->xq, st_cuda_mmv_scratch_bytes(E, ST_GPU_COLS)));
    if (E % 32 == 0) TRY(st_gpu_alloc(&g->moe_xq, st_cuda_mmv_scratch_bytes(E, 1)));
    const int64_t n_att = (int64_t)hp->n_head * hp->head_dim_v;
    if (n_att % 32 == 0) TRY(st_gpu_alloc(&g->att_q8, st_cuda_mmv_scratch_bytes(n_att, ST_GPU_COLS)));
    TRY(st_gpu_alloc((void **)&g->sync, sizeof(uint32_t) * ST_GPU_SYNC));
    TRY(st_cuda_memset(g->sync, 0, sizeof(uint32_t) * ST_GPU_SYNC));
    TRY(st_gpu_alloc(&g->mmq_scratch, st_cuda_mmq_scratch_bytes((int64_t)widest, (int64_t)T)));
    g->moe_tokens = 1;
    size_t moe = 0;
    if (hp->n_expert > 0) {
        /* tile types take 8192 pairs per call (a 512-token prompt of a top-8 model in one), the
         * others the GEMV path's 1024 */
        /* biased experts (gpt-oss) take the GEMV path only in -DSTRATA_MMQ_OAI=0 builds */
        int tiles = !hp->expert_act_oai || st_cuda_moe_tiles_oai();
        for (int il = 0; il < hp->n_layer + (s->model->n_mtp > 0); il++) { /* (an MTP layer's too) */
            const st_layer *L = &s->model->layers[il];
            if (!st_layer_has_experts(L)) continue; /* a leading dense layer: no grouped calls */
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
    if (s->model->arch->mla) {
        g->attn_ws_bytes = st_cuda_mla_wsize(&g->mla, (int64_t)s->n_batch, s->n_ctx);
    } else {
        g->attn_ws_bytes = st_cuda_attn_wsize(&g->shape, ST_GPU_COLS, s->n_ctx);
        const size_t ws_batch = st_cuda_attn_wsize(&g->shape, (int64_t)s->n_batch, s->n_ctx);
        if (ws_batch > g->attn_ws_bytes) g->attn_ws_bytes = ws_batch;
    }
    TRY(st_gpu_alloc(&g->attn_ws, g->attn_ws_bytes));
    return STRATA_OK;
}

size_t st_gpu_kv_layer_bytes(const strata_session *s) {
    const st_gpu *g = s->gpu;
    const size_t one = s->model->arch->mla ? st_cuda_mla_kv_bytes(s->kv_type, &g->mla, s->n_ctx)
                                           : st_cuda_kv_bytes(s->kv_type, &g->shape, s->n_ctx);
    return st_round_up(one, 256);
}

static strata_status st_gpu_alloc_kv(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int mla = s->model->arch->mla; /* the latent rows alone: no V */
    const strata_type kv_type = s->kv_type;
    const size_t per = st_gpu_kv_layer_bytes(s);
    int32_t n_att = 0; /* layers with a cache: qwen3next's recurrent layers keep a state instead */
    for (int il = g->l0; il < g->l1; il++) n_att += !st_layer_recurrent(hp, il); /* (a stage's own) */
    g->kv_bytes = (mla ? 1 : 2) * per * (size_t)n_att;
    strata_status st = st_cuda_malloc(&g->kv_mem, g->kv_bytes);
    if (st != STRATA_OK)
        return st_error(st, "gpu session: KV cache of %zu bytes (n_ctx %d): %s", g->kv_bytes,
                        (int)s->n_ctx, strata_last_error());
    for (int il = g->l0, a = 0; il < g->l1; il++) {
        st_cuda_kv_layer *kv = &g->layers[il].kv;
        kv->type = kv_type;
        kv->n_ctx = s->n_ctx;
        if (st_layer_recurrent(hp, il)) continue; /* k, v NULL: never read */
        kv->k = (uint8_t *)g->kv_mem + (size_t)((mla ? 1 : 2) * a) * per;
        kv->v = mla ? NULL : (uint8_t *)g->kv_mem + (size_t)(2 * a + 1) * per;
        a++;
    }
    return STRATA_OK;
}

static void st_gpu_free_one(strata_session *s) {
    st_gpu *g = s ? s->gpu : NULL;
    if (!g) return;
    char err[512]; /* the last error (a failed create's reason) outlives the frees */
    snprintf(err, sizeof err, "%s", strata_last_error());
    st_gpu_mtp_detach(s); /* (a drafter the caller did not free first) */
    if (g->layers)
        for (int il = 0; il < s->model->hp.n_layer; il++) {
            st_cuda_free(g->layers[il].experts);
            st_cuda_free(g->layers[il].shexp);
        }
    st_moe_warm_stop(s->tp, &g->warm); /* its reads end before the experts' pinned copy goes */
    st_pool_free(g->pool); /* its threads stop before the experts or the doorbell go */
    st_cuda_host_free(g->db_host);
    st_cuda_host_free(g->h_step);
    st_cuda_free(g->d_step);
    st_cuda_free(g->pm_ids);
    st_cuda_free(g->pm_hist);
    st_cuda_free(g->d_zc_of_m);
    st_cuda_free(g->pm_part);
    st_cuda_host_free(g->h_pm_hist);
    st_cuda_free(g->d_err);
    st_gpu_tier_free(g->cache);
    st_gpu_tier_free(g->stage);
    st_gpu_tier_free(g->ahead);
    free(g->ahead_ids);
    st_cuda_host_free(g->pinned);
    st_cuda_host_free(g->h_hand);
    st_cuda_host_free(g->h_embd);
    st_cuda_host_free(g->h_replay_ids);
    st_cuda_host_free(g->h_replay_wts);
    void *pf[] = {g->pf_x, g->pf_logits, g->pf_wts, g->pf_ids};
    for (size_t i = 0; i < sizeof pf / sizeof pf[0]; i++) st_cuda_free(pf[i]);
    st_cuda_host_free(g->h_pf_ids);
    st_cuda_event_destroy(g->ev_hand);
    st_cuda_event_destroy(g->ev_pred);
    free(g->h_pf_missed);
    free(g->stage_rows);
    free(g->stage_list);
    st_cuda_free(g->ids_split);
    st_cuda_free(g->cpu_part);
    st_cuda_free(g->defer_part);
    st_cuda_free(g->d_tail);
    st_cuda_host_free(g->h_split_ids);
    st_cuda_free(g->rows_gpu);
    st_cuda_free(g->rows_cpu);
    st_cuda_free(g->exact_ws);
    st_cuda_host_free(g->h_rows);
    free(g->graph_slots_gpu); free(g->graph_slots_cpu);
    free(g->h_ids_gpu); free(g->h_ids_cpu); free(g->misses); free(g->miss_load); free(g->miss_of);
    st_gpu_rs_free(g);
    st_cuda_graph_exec_destroy(g->graph);
    st_cuda_stream_destroy(g->stream);
    for (int i = 0; i < g->n_ups; i++) st_cuda_free(g->ups[i].dev);
    void *bufs[] = {g->kv_mem, g->x, g->xn, g->q, g->k, g->v, g->qkv, g->att, g->proj, g->h, g->router,
                    g->wts, g->ones, g->shgate, g->logits, g->ids, g->zeros, g->pos, g->amax, g->mmv_scratch, g->xq, g->moe_xq, g->att_q8, g->sync, g->mmq_scratch,
                    g->moe_ws, g->attn_ws, g->topk_ids, g->topk_vals, g->topk_ws, g->mla_q, g->mla_qa, g->mla_v, g->mla_vq};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) st_cuda_free(bufs[i]);
    st_error(STRATA_OK, "%s", err); /* freeing after a failed create may fail again; not the caller's error */
    free(g->ups);
    free(g->hpos);
    free(g->layers);
    free(g);
    s->gpu = NULL;
}

/* Every stage of a split (the last first, each on its device), then stage 0 or the one state. */
void st_gpu_free(strata_session *s) {
    st_gpu *g0 = s ? s->gpu : NULL;
    st_gpu_stages *S = g0 ? g0->stages : NULL;
    for (int i = st_gpu_stages_n(S) - 1; S && i >= 1; i--) {
        if (st_gpu_stage_enter(s, S, i) != STRATA_OK) st_error_clear();
        st_gpu_free_one(s);
        st_gpu_stages_put(S, i, NULL); /* (freed: no pointer left to it) */
    }
    if (S) {
        s->gpu = g0;
        if (g0->device >= 0 && st_cuda_set_device(g0->device) != STRATA_OK) st_error_clear();
        st_gpu_stages_release(S);
        g0->stages = NULL;
    }
    st_gpu_free_one(s);
}

/* The attention's shape and the RoPE parameters of the kernels, from the model and session. */
static void st_gpu_set_shape(strata_session *s) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
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
    g->rope.no_trunc = s->rope.no_trunc;
    if (m->arch->mla) {
        g->mla.n_head = hp->n_head;
        g->mla.kv_lora = hp->n_lora_kv;
        g->mla.n_rot = hp->n_rot;
        g->mla.scale = hp->kq_scale;
    }
}

/* Every weight up: the output norm and matrix, then each layer's (upload order: st_gpu_put). */
static strata_status st_gpu_upload_weights(strata_session *s) {
    const strata_model *m = s->model;
    st_gpu *g = s->gpu;
    if (m->output_norm.type != STRATA_TYPE_F32)
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: output_norm is not f32");
    if (g->l1 == m->hp.n_layer) { /* (a split's last stage) */
        TRY(st_gpu_put_f32(g, &m->output_norm, &g->output_norm));
        TRY(st_gpu_put_mat(g, &m->output, &g->output));
    }
    return st_gpu_upload_layers(s);
}

/* Pinned host memory: the RAM-kept experts' copy (pin_experts), the embeddings' staging (a prompt
 * batch's rows go up at the pinned rate; without it they go from s->x), and with n_cpu_moe the
 * hand-off rows (async copies, one wait; host-mapped where possible). */
static strata_status st_gpu_alloc_pinned(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    if (s->plan.pin_experts != 0 && hp->n_expert > 0) TRY(st_gpu_pin_experts(s));
    if (st_cuda_host_alloc((void **)&g->h_embd, sizeof(float) * (size_t)s->n_batch * (size_t)hp->n_embd) != STRATA_OK) {
        g->h_embd = NULL;
        st_error_clear();
    }
    if (st_gpu_has_cpu_layers(s) && hp->n_expert > 0) { /* pinned hand-off rows: async copies, one wait */
        const size_t T = (size_t)s->n_batch, E = (size_t)hp->n_embd, K = (size_t)hp->n_expert_used;
        const size_t a = st_round_up(T * E * sizeof(float), 256), b = st_round_up(T * K * sizeof(float), 256);
        void *d = NULL;
        if (st_cuda_host_alloc_mapped(&g->h_hand, &d, 2 * a + 2 * b) != STRATA_OK) {
            st_error_clear(); /* not mappable: plain pinned rows and copies */
            d = NULL;
            TRY(st_cuda_host_alloc(&g->h_hand, 2 * a + 2 * b));
        }
        g->h_xn = (float *)g->h_hand;
        g->h_proj = (float *)((uint8_t *)g->h_hand + a);
        g->h_wts = (float *)((uint8_t *)g->h_hand + 2 * a);
        g->h_ids = (int32_t *)((uint8_t *)g->h_hand + 2 * a + b);
        if (d) {
            g->d_xn = (float *)d;
            g->d_proj = (float *)((uint8_t *)d + a);
            g->hand_db = (st_cuda_doorbell){g->h_ids, g->h_wts, (int32_t *)((uint8_t *)d + 2 * a + b),
                                            (float *)((uint8_t *)d + 2 * a), (int64_t)T, (int32_t)K};
        }
    }
    return STRATA_OK;
}

/* expert_cache: the GPU expert cache's slots (auto: what fits; a split's stage: its own count, or
 * auto within its share of the device), with gpu_prefetch the prediction buffers, with cpu_misses
 * the cost model's figures and the split's buffers (with cache_exact the exact rows' too). */
static strata_status st_gpu_setup_cache(strata_session *s, int32_t slots, int32_t share) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    if (slots < 0) TRY(st_gpu_cache_auto_slots(s, share, &slots));
    const st_gpu_tier_ctx ctx = st_gpu_tier_ctx_of(s);
    TRY(st_gpu_tier_create(&ctx, slots, &g->cache));
    st_gpu_tier_set_admit(g->cache, s->plan.cache_admit);
    if (s->plan.gpu_prefetch) { /* decode steps: layer l + 1's experts predicted and prefetched */
        TRY(st_gpu_tier_enable_prefetch(g->cache));
        TRY(st_gpu_alloc_prediction(g, hp));
        g->prefetch = 1;
    }
    if (s->plan.cpu_misses) { /* each miss loaded or computed by the CPU, by the cost model */
        /* (a split's stage: its own first layer with experts, pinned for its device) */
        TRY(st_gpu_measure_costs(s, g->cache, st_model_first_moe_layer(s->model, g->l0), 1));
        TRY(st_gpu_alloc_split(s));
        /* the loads enqueued, so the CPU's share runs while they copy */
        TRY(st_gpu_tier_async_loads(g->cache, g->stream));
        g->split = 1;
        /* decode-sized calls in the CPU's arithmetic for every slot, hits and misses alike, where
         * every cache layer's types allow (else the hits in the GPU's: the bits follow residency) */
        if (hp->n_expert > 0 && st_gpu_exact_ok(s, 0)) {
            TRY(st_gpu_alloc_exact(s));
            g->cache_exact = 1;
        }
    }
    return STRATA_OK;
}

/* cuda_doorbell: the expert pool of the CPU layers, and with an expert cache the buffers of the
 * pool-miss mode (the pool computes the cache's misses; pm_exact: the exact rows' buffers for the
 * hits, the pool's rows combined with them in slot order, no pm_part). */
static strata_status st_gpu_setup_pool(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    TRY(st_gpu_pool_create(s));
    if (g->cache) {
        const size_t E = (size_t)hp->n_embd, K = (size_t)hp->n_expert_used, R = ST_POOL_T;
        TRY(st_gpu_alloc((void **)&g->pm_ids, sizeof(int32_t) * R * K));
        TRY(st_gpu_alloc((void **)&g->pm_hist, sizeof(int32_t) * (size_t)hp->n_layer * R * K));
        if (g->pm_exact) TRY(st_gpu_alloc_exact(s));
        else TRY(st_gpu_alloc((void **)&g->pm_part, sizeof(float) * R * E));
        TRY(st_cuda_host_alloc((void **)&g->h_pm_hist, sizeof(int32_t) * (size_t)hp->n_layer * R * K));
        g->pool_misses = 1;
        if (s->plan.pool_pcie != 0) TRY(st_gpu_setup_pool_pcie(s));
    }
    return STRATA_OK;
}

/* pool_pcie: the GPU's own share of the pool's misses, read in place from the pinned copy (the
 * tier's tables give a missed expert its pinned descriptors): for each count M of a call's
 * distinct missed experts, how many the GPU takes (pool_pcie N: at most N; -1: the cost model's
 * split of M one-row misses, from the PCIe and CPU rates measured here), uploaded once. */
static strata_status st_gpu_setup_pool_pcie(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    if (!g->pinned)
        return st_error(STRATA_ERR_UNSUPPORTED, "pool_pcie: the routed experts have no pinned copy to read "
                        "(pin_experts auto leaves 4 GiB of RAM free and found too little; pin_experts 1 "
                        "insists)");
    const int n = ST_POOL_T * hp->n_expert_used + 1;
    int32_t *h = malloc(sizeof(int32_t) * (size_t)n);
    strata_status st = h ? STRATA_OK : st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
    if (st == STRATA_OK && s->plan.pool_pcie < 0) /* (a split's stage: its own first layer) */
        st = st_gpu_measure_costs(s, g->cache, st_model_first_moe_layer(s->model, g->l0), 1);
    if (st == STRATA_OK) st_cost_split_counts(&s->cost, n, s->plan.pool_pcie > 0 ? s->plan.pool_pcie : -1, h);
    if (st == STRATA_OK) st = st_gpu_alloc((void **)&g->d_zc_of_m, sizeof(int32_t) * (size_t)n);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(g->d_zc_of_m, h, sizeof(int32_t) * (size_t)n);
    if (st == STRATA_OK) st_gpu_tier_set_zero_copy(g->cache, 1);
    free(h);
    return st;
}

/* The next layer's prediction for the CPU's side: pipe (the RAM tier reads ahead) or cpu_warm
 * (set only with n_cpu_moe: host hand-offs, not the pool's, not pipe's reads, warm the next CPU
 * layer). */
static strata_status st_gpu_setup_ahead(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    if (s->plan.pipe && s->ram && !g->pool && hp->n_expert > 0) { /* the RAM tier reads ahead */
        TRY(st_gpu_alloc_prediction(g, hp));
        g->pipe = 1;
    }
    if (s->plan.cpu_warm && st_gpu_has_cpu_layers(s) && hp->n_expert > 0 && !g->pool && !g->pipe && s->n_threads != 1 &&
        hp->n_expert_used <= ST_MOE_WARM_MAX) {
        TRY(st_gpu_alloc_prediction(g, hp));
        TRY(st_cuda_event_create(&g->ev_hand));
        TRY(st_cuda_event_create(&g->ev_pred));
        g->warm_on = 1;
    }
    return STRATA_OK;
}

/* The stage slots (stage_experts, or cpu_misses with CPU layers): decode-sized calls send a share
 * of their experts to the GPU through them (an expert cache's misses are split in
 * st_gpu_setup_cache instead); auto (-1) only where the GPU's share computes the CPU's bits
 * (moe_exact.cu), so that the result does not depend on the share the start-up timings pick.
 * stage_split: prompt-sized batches split through them too (the split's buffers, no exact rows). */
static strata_status st_gpu_setup_stage(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    if (!st_gpu_has_cpu_layers(s)) return STRATA_OK; /* (a split's stage past the CPU layers) */
    const int exact = hp->n_expert > 0 && s->plan.n_cpu_moe != 0 && st_gpu_exact_ok(s, 1);
    const int cpu_split = (s->plan.cpu_misses || (s->plan.cpu_misses_auto && exact)) && !g->cache && s->plan.n_cpu_moe != 0 &&
                          !g->pool && hp->n_expert > 0;
    if (!((s->plan.stage_experts != 0 || cpu_split) && hp->n_expert > 0)) return STRATA_OK;
    const st_gpu_tier_ctx ctx = st_gpu_tier_ctx_of(s);
    TRY(st_gpu_tier_create(&ctx, hp->n_expert, &g->stage)); /* n_expert slots: one layer's worth */
    if (s->plan.stage_ahead) { /* two layers' worth, prefetched on a copy stream (staged batches) */
        TRY(st_gpu_tier_create(&ctx, 2 * hp->n_expert, &g->ahead));
        TRY(st_gpu_tier_enable_prefetch(g->ahead));
        g->ahead_ids = malloc(sizeof *g->ahead_ids * (size_t)hp->n_expert);
        if (!g->ahead_ids) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
        for (int32_t e = 0; e < hp->n_expert; e++) g->ahead_ids[e] = e;
    }
    const int stage_split = s->plan.stage_split;
    if (s->plan.stage_experts < 0 || cpu_split || stage_split) { /* the cost model's figures, measured now */
        /* the first CPU layer with experts (a split's stage: from its own first layer, whose
         * experts are pinned for its device) */
        int il0 = st_model_first_moe_layer(s->model, g->l0);
        while (il0 < hp->n_layer - 1 && !st_plan_layer_on_cpu(&s->plan, il0)) il0++;
        TRY(st_gpu_measure_costs(s, g->stage, il0, 1)); /* the step figures price batches too */
    }
    if (cpu_split || stage_split) {
        const size_t T = (size_t)s->n_batch, K = (size_t)hp->n_expert_used;
        TRY(st_gpu_alloc_split(s));
        TRY(st_cuda_host_alloc((void **)&g->h_split_ids, sizeof(int32_t) * T * K));
        TRY(st_gpu_tier_async_loads(g->stage, g->stream));
        g->cpu_split = cpu_split;
        g->stage_split = stage_split;
        if (cpu_split && exact) {
            TRY(st_gpu_alloc_exact(s));
            g->split_exact = 1;
        }
    }
    if (s->plan.stage_experts < 0) { /* auto: the staging decision's per-batch counts */
        g->stage_rows = calloc((size_t)hp->n_expert, sizeof *g->stage_rows);
        g->stage_list = calloc((size_t)hp->n_expert, sizeof *g->stage_list);
        if (!g->stage_rows || !g->stage_list) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
    }
    return STRATA_OK;
}

static strata_status st_gpu_build(strata_session *s, int32_t l0, int32_t l1, int device, int32_t cache,
                                  int32_t share);

/* A layer split (layer_split.h, stages.c): the stages resolved (auto: by the devices' free
 * memory now), then one GPU state per stage built on its device, stage 0's holding the others.
 * qwen3next's recurrent state is rolled back per session, not per stage: refused for now. */
static strata_status st_gpu_create_split(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    const st_placement_plan *pl = &s->plan;
    /* every stage runs its layers' experts resident (the unsplit kernels), in an expert cache of
     * its own on its device (expert_cache: st_split_caches gives each stage its slots), or with
     * n_cpu_moe the first layers' on the CPU (each stage that holds some: its own hand-off rows,
     * stage slots and decode split, over the session's threads); the expert pool behind the
     * doorbell and the RAM tier are one per session, not per stage, and are not built for a split */
    if (pl->doorbell || pl->ram_gpu || s->tail_skip > 0.0f || s->degrade.enabled)
        return st_error(STRATA_ERR_UNSUPPORTED, "layer_split: this session's placement (doorbell %d, "
                        "ram_budget %lld) is not built for a split yet (a split keeps its layers' experts "
                        "resident, in a cache per stage, or with n_cpu_moe the first layers' on the CPU; "
                        "docs/MULTI_GPU.md)", pl->doorbell, (long long)pl->ram_budget);
    for (int il = 0; il < hp->n_layer; il++)
        if (st_layer_recurrent(hp, il))
            return st_error(STRATA_ERR_UNSUPPORTED, "layer_split with recurrent layers (qwen3next): not built "
                            "yet (docs/MULTI_GPU.md)");
    int n_dev = 0;
    TRY(st_cuda_device_count(&n_dev));
    int64_t free_b[64] = {0};
    for (int d = 0; s->split.auto_layers && d < n_dev && d < 64; d++) {
        size_t f = 0, t = 0;
        TRY(st_cuda_device_mem_info(d, &f, &t));
        free_b[d] = (int64_t)f;
    }
    st_layer_split sp;
    st_split_resolve(&s->split, hp->n_layer, n_dev, free_b, &sp);
    int32_t moe[STRATA_MAX_STAGES], cache[STRATA_MAX_STAGES], share[STRATA_MAX_STAGES];
    for (int i = 0; i < sp.n_stages; i++)
        moe[i] = st_model_moe_layers(s->model, sp.first[i + 1]) - st_model_moe_layers(s->model, sp.first[i]);
    TRY(st_split_caches(&s->split, pl->expert_cache, hp->n_expert, &sp, moe, cache, share));
    TRY(st_cuda_set_device(sp.device[0]));
    TRY(st_gpu_build(s, sp.first[0], sp.first[1], sp.device[0], cache[0], share[0]));
    st_gpu *g0 = s->gpu;
    TRY(st_gpu_stages_new(g0, sp.n_stages));
    strata_status st = STRATA_OK;
    for (int i = 1; i < sp.n_stages && st == STRATA_OK; i++) {
        st = st_cuda_set_device(sp.device[i]);
        s->gpu = NULL;
        if (st == STRATA_OK) st = st_gpu_build(s, sp.first[i], sp.first[i + 1], sp.device[i], cache[i], share[i]);
        st_gpu_stages_put(g0->stages, i, s->gpu); /* (partly built on failure: freed with the rest) */
    }
    s->gpu = g0;
    if (st == STRATA_OK) st = st_gpu_stages_link(g0->stages);
    if (st == STRATA_OK) st = st_cuda_set_device(sp.device[0]);
    return st;
}

/* The session's GPU state, in an order the memory decisions depend on: the weights, the KV cache
 * and scratch, the pinned host memory, the expert placement's parts (cache, pool, the prediction
 * of pipe and cpu_warm, stage slots), and last the prompt tiles' copies in what is left. */
strata_status st_gpu_create(strata_session *s) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    int available = 0;
    char why[256];
    TRY(st_cuda_probe(&available, why, sizeof why));
    if (!available) return st_error(STRATA_ERR_UNSUPPORTED, "session backend cuda: %s", why);
    if (s->iq_stage_tables < 0) { /* auto: by the device's compute capability */
        st_cuda_device_info di;
        TRY(st_cuda_device_info_get(&di));
        s->iq_stage_tables = st_cuda_iq_stage_default(di.cc_major, di.cc_minor);
    }
    st_cuda_moe_set_iq_stage(s->iq_stage_tables);
    if (st_split_asked(&s->split)) return st_gpu_create_split(s);
    return st_gpu_build(s, 0, hp->n_layer, -1, s->plan.expert_cache, 1);
}

/* One GPU state for layers l0 .. l1 - 1 on the current device (device: a stage's, -1 none), in
 * s->gpu (partly built on failure: st_gpu_free releases it); cache: its expert cache's slots (-1
 * auto, within 1/share of the room; 0 none: the session's expert_cache without a split). */
static strata_status st_gpu_build(strata_session *s, int32_t l0, int32_t l1, int device, int32_t cache,
                                  int32_t share) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = calloc(1, sizeof *g);
    if (!g) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
    s->gpu = g;
    g->l0 = l0;
    g->l1 = l1;
    g->device = device;
    g->defer_pending = -1; /* none due (calloc's 0 would name layer 0) */
    g->graphs = s->cuda_graphs;
    TRY(st_cuda_stream_create(&g->stream));
    g->progress = s->progress;
    g->progress_data = s->progress_data;
    g->upload_total = (int64_t)m->info.n_bytes;
    g->layers = calloc((size_t)hp->n_layer + 1, sizeof *g->layers); /* (+ an MTP drafter's) */
    if (!g->layers) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
    st_gpu_set_shape(s);
    TRY(st_gpu_check_shape(m, g, s->kv_type));
    TRY(st_gpu_upload_weights(s));
    TRY(st_gpu_rs_create(s)); /* qwen3next's DeltaNet layers */
    TRY(st_gpu_alloc_kv(s));
    TRY(st_gpu_alloc_scratch(s));
    TRY(st_gpu_alloc_pinned(s));
    if (cache != 0) TRY(st_gpu_setup_cache(s, cache, share));
    if (s->plan.doorbell && hp->n_expert > 0) TRY(st_gpu_setup_pool(s)); /* CPU layers, a cache's misses */
    TRY(st_gpu_setup_ahead(s));
    TRY(st_gpu_setup_stage(s));
    if (s->tail_skip > 0.0f) { /* route_tail_skip's count of dropped slots */
        TRY(st_gpu_alloc((void **)&g->d_tail, sizeof *g->d_tail));
        TRY(st_cuda_memset(g->d_tail, 0, sizeof *g->d_tail));
    }
    TRY(st_gpu_put_all_tiles(s));
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
 * layers' with n_cpu_moe; a split's stage: those of its own layers, pinned while its device is
 * current, so that its copies into its stage slots read memory pinned for it) copied into one
 * pinned host allocation, layer by layer in the merged
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
    for (int il = g->l0; il < g->l1; il++) { /* (a split's stage: its own layers) */
        if ((!st_plan_layer_on_cpu(&s->plan, il) && s->plan.expert_cache == 0) ||
            !st_layer_has_experts(&m->layers[il]))
            continue;
        for (int32_t e = 0; e < X; e++) {
            const st_expert *x = &s->experts[(size_t)il * (size_t)X + (size_t)e];
            const st_tensor *v[3] = {&x->gate, &x->up, &x->down};
            for (int i = 0; i < 3; i++) total += st_round_up(st_tensor_bytes(v[i]), 256);
        }
    }
    if (total == 0) return STRATA_OK;
    if (s->plan.pin_experts < 0) {
        const int64_t avail = st_mem_available();
        if (avail < 0 || (int64_t)total + ((int64_t)4 << 30) > avail) return STRATA_OK;
    }
    strata_status st = st_cuda_host_alloc(&g->pinned, total);
    if (st != STRATA_OK && s->plan.pin_experts < 0) {
        g->pinned = NULL;
        return STRATA_OK; /* auto: the mapping serves */
    }
    if (st != STRATA_OK)
        return st_error(st, "pin_experts: %zu MiB of pinned memory for the experts kept in RAM: %s",
                        total >> 20, strata_last_error());
    g->pinned_bytes = total;
    /* expert by expert, each one's gate, up and down laid out as in a GPU cache slot (256-byte
     * aligned, st_slot_expert), so that a load into a slot is one copy (st_gpu_tier_copy_in):
     * one copy of an expert runs faster than three of its parts (CEILINGS.md) */
    uint8_t *p = g->pinned;
    for (int il = g->l0; il < g->l1; il++) {
        if ((!st_plan_layer_on_cpu(&s->plan, il) && s->plan.expert_cache == 0) ||
            !st_layer_has_experts(&m->layers[il]))
            continue;
        for (int32_t e = 0; e < X; e++) {
            st_expert *x = &s->experts[(size_t)il * (size_t)X + (size_t)e];
            st_tensor *v[3] = {&x->gate, &x->up, &x->down};
            for (int i = 0; i < 3; i++) {
                const size_t n = st_tensor_bytes(v[i]);
                memcpy(p, v[i]->data, n);
                v[i]->data = p;
                p += st_round_up(n, 256);
            }
        }
    }
    return STRATA_OK;
}

/* cpu_misses: the split's buffers (device ids and CPU rows, host ids, the per-call miss list). */
static strata_status st_gpu_alloc_split(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const size_t T = (size_t)s->n_batch, E = (size_t)hp->n_embd, X = (size_t)hp->n_expert,
                 K = (size_t)hp->n_expert_used;
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
    return STRATA_OK;
}

/* Whether the experts of every layer placed on the CPU (on_cpu 1: the split of the CPU layers) or
 * on the GPU (on_cpu 0: the expert cache's split of its misses) can be split with the GPU's share
 * in the CPU's arithmetic: gate and up of one type, types the CPU-exact kernels take, and the
 * CPU's kernels for them the exact-block-sum ones (dot.h; the AVX-512 level). */
static int st_gpu_exact_ok(const strata_session *s, int on_cpu) {
    const st_hparams *hp = &s->model->hp;
    if (hp->expert_act_oai) return 0; /* gpt-oss's biased experts: the exact rows take no biases */
    for (int il = 0; il < hp->n_layer; il++) {
        if (!st_plan_layer_on_cpu(&s->plan, il) != !on_cpu || !st_layer_has_experts(&s->model->layers[il]))
            continue;
        const st_expert *e = &s->experts[(size_t)il * (size_t)hp->n_expert];
        if (e->gate.type != e->up.type || !st_cuda_moe_exact_supports(e->gate.type, e->down.type) ||
            !st_vec_dot_exact_blocks(e->gate.type) || !st_vec_dot_exact_blocks(e->down.type))
            return 0;
    }
    return 1;
}

/* The exact split's buffers (split_exact or cache_exact): the GPU's rows (device), the CPU's rows
 * (host-mapped where possible, else pinned with a device copy), the kernels' workspace;
 * decode-sized calls (ST_POOL_T rows). Made once. */
static strata_status st_gpu_alloc_exact(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    if (g->rows_gpu) return STRATA_OK;
    const size_t R = ST_POOL_T, E = (size_t)hp->n_embd, K = (size_t)hp->n_expert_used;
    const size_t rows = sizeof(float) * R * K * E;
    TRY(st_gpu_alloc((void **)&g->rows_gpu, rows));
    void *d = NULL;
    if (st_cuda_host_alloc_mapped((void **)&g->h_rows, &d, rows) != STRATA_OK) {
        st_error_clear();
        d = NULL;
        TRY(st_cuda_host_alloc((void **)&g->h_rows, rows));
        TRY(st_gpu_alloc((void **)&g->rows_cpu, rows));
    }
    g->d_rows = (float *)d;
    g->exact_ws_bytes = st_cuda_moe_exact_wsize((int64_t)R, (int32_t)K, hp->n_embd, hp->n_ff_exp);
    TRY(st_gpu_alloc(&g->exact_ws, g->exact_ws_bytes));
    return STRATA_OK;
}

/* The cost model's figures (s->cost): PCIe measured with layer il's first expert copied into slot
 * 0 of cache c (unused at create), the CPU expert step for 1 and 8 rows on the session's pool,
 * and with step (a split) the step over 1 and 8 of the layer's experts (the split's CPU share). */
static strata_status st_gpu_measure_costs(strata_session *s, st_gpu_tier *c, int il, int step) {
    const st_hparams *hp = &s->model->hp;
    const st_expert *e = &s->experts[(size_t)il * (size_t)hp->n_expert];
    memset(&s->cost, 0, sizeof s->cost);
    s->cost.pcie_frac = s->plan.pcie_frac;
    s->cost.expert_bytes = (double)(st_tensor_bytes(&e->gate) + st_tensor_bytes(&e->up) + st_tensor_bytes(&e->down));
    TRY(st_gpu_tier_measure_pcie(c, il, &s->cost.pcie_bytes_per_s, &s->cost.pcie_latency_s));
    /* the workers held spinning as in the forward passes the figures serve (session.c), so that
     * a worker's wake-up from sleep is not measured as the CPU's cost of an expert */
    st_threadpool_hold(s->tp, 1);
    int r = st_cost_measure_cpu(s->tp, e, &s->cost.cpu_fixed_s, &s->cost.cpu_per_row_s);
    if (r == 0 && step)
        r = st_cost_measure_cpu_step(s->tp, e, hp->n_expert, &s->cost.cpu_step_s, &s->cost.cpu_expert_s);
    st_threadpool_hold(s->tp, 0);
    if (r != 0) return st_error(STRATA_ERR_NOMEM, "cost model: out of memory measuring the CPU");
    return STRATA_OK;
}

/* expert_cache -1: the slots that fit in gpu_mem (or the free memory) now that the other weights,
 * the KV cache and scratch are allocated, less a margin of 512 MiB or 2% of the device, at most
 * every routed expert (a split's stage: its own layers', in 1/share of that room: the auto stages
 * still to be built on its device take the rest, their weights out of their part). */
static strata_status st_gpu_cache_auto_slots(strata_session *s, int32_t share, int32_t *slots) {
    const st_hparams *hp = &s->model->hp;
    const st_gpu *g = s->gpu;
    int64_t avail, margin; /* made before any expert slots: the weights and the KV cache count */
    TRY(st_gpu_room(s, &avail, &margin));
    const st_gpu_tier_ctx ctx = st_gpu_tier_ctx_of(s);
    const int64_t slot = (int64_t)st_gpu_tier_slot_bytes(&ctx);
    int64_t n = slot > 0 && avail > margin ? (avail - margin) / share / slot : 0;
    const int64_t all = (int64_t)(st_model_moe_layers(s->model, g->l1) - st_model_moe_layers(s->model, g->l0)) *
                        hp->n_expert;
    if (n > all) n = all;
    if (n < hp->n_expert)
        return st_error(STRATA_ERR_NOMEM, "expert cache auto: %lld MiB of GPU memory left for experts "
                        "hold %lld slots of %lld MiB; one layer's %d experts are needed",
                        (long long)((avail > margin ? avail - margin : 0) >> 20), (long long)n,
                        (long long)(slot >> 20), (int)hp->n_expert);
    *slots = (int32_t)n;
    return STRATA_OK;
}

/* A split's figures are its stages' sums (stage 0 holds the others). */
static const st_gpu *st_gpu_stage_of(const strata_session *s, int i) {
    const st_gpu *g = s ? s->gpu : NULL;
    return !g ? NULL : !g->stages ? (i == 0 ? g : NULL) : i < st_gpu_stages_n(g->stages) ? st_gpu_stages_get(g->stages, i) : NULL;
}

size_t st_gpu_weight_bytes(const strata_session *s) {
    size_t n = 0;
    for (int i = 0; st_gpu_stage_of(s, i); i++) n += st_gpu_stage_of(s, i)->weight_bytes;
    return n;
}
st_gpu_tier *st_gpu_get_cache(const strata_session *s, int i) {
    const st_gpu *g = st_gpu_stage_of(s, i);
    return g ? g->cache : NULL;
}
int64_t st_gpu_pinned_bytes(const strata_session *s) {
    int64_t n = 0;
    for (int i = 0; st_gpu_stage_of(s, i); i++) n += (int64_t)st_gpu_stage_of(s, i)->pinned_bytes;
    return n;
}
int64_t st_gpu_tail_skipped(const strata_session *s, int reset) {
    const st_gpu *g = s ? s->gpu : NULL;
    unsigned long long n = 0;
    if (!g || !g->d_tail || st_cuda_memcpy_d2h(&n, g->d_tail, sizeof n) != STRATA_OK) return 0;
    if (reset) (void)st_cuda_memset(g->d_tail, 0, sizeof n);
    return (int64_t)n;
}
int st_gpu_split_mode(const strata_session *s) {
    const st_gpu *g = s ? s->gpu : NULL;
    return g && g->cpu_split ? (g->split_exact ? 1 : 2) : 0;
}
int st_gpu_cache_split_mode(const strata_session *s) {
    const st_gpu *g = s ? s->gpu : NULL;
    for (int i = 1; g && !g->cache && st_gpu_stage_of(s, i); i++) g = st_gpu_stage_of(s, i); /* (a split's) */
    if (g && g->pool_misses) return g->pm_exact ? 1 : 2; /* the pool's split of the misses */
    return g && g->split ? (g->cache_exact ? 1 : 2) : 0;
}
double st_gpu_plan_rate(const strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    const st_gpu *g = s->gpu;
    if (!g || s->plan.n_cpu_moe == 0 || hp->n_expert <= 0) return 0.0;
    const int32_t n_cpu = s->plan.n_cpu_moe < 0 || s->plan.n_cpu_moe > hp->n_layer ? hp->n_layer : s->plan.n_cpu_moe;
    /* the CPU layers that have experts (n_cpu_moe counts the leading dense layers too) */
    return st_cost_plan_rate(&s->cost, hp->n_expert_used, st_model_moe_layers(s->model, n_cpu), g->cpu_split);
}
void st_gpu_mem_stats(const strata_session *s, int64_t *kv_bytes, int64_t *state_bytes) {
    *kv_bytes = *state_bytes = 0;
    for (int i = 0; st_gpu_stage_of(s, i); i++) {
        *kv_bytes += (int64_t)st_gpu_stage_of(s, i)->kv_bytes;
        *state_bytes += (int64_t)st_gpu_stage_of(s, i)->rs_bytes;
    }
}
void st_gpu_tiles_stats(const strata_session *s, int64_t *bytes, int32_t *skipped, int32_t *sm60) {
    *bytes = 0;
    *skipped = *sm60 = 0;
    for (int i = 0; st_gpu_stage_of(s, i); i++) { /* each stage made its own layers' copies */
        *bytes += (int64_t)st_gpu_stage_of(s, i)->tiles_bytes;
        *skipped += st_gpu_stage_of(s, i)->tiles_skipped;
        *sm60 += st_gpu_stage_of(s, i)->sm60_mats;
    }
}

#endif /* STRATA_HAVE_CUDA */
