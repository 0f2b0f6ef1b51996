/* forward_cuda.c - the GPU forward pass of a session (backend STRATA_BACKEND_CUDA; its weights,
 * scratch, KV cache and placement are set up by forward_cuda_setup.c, the state they share is
 * forward_cuda.h): the per-layer sequence of c/cuda kernels that mirrors forward.c step by step
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
#include "forward_cuda.h"

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
void st_gpu_tiles_stats(const strata_session *s, int64_t *bytes, int32_t *skipped) {
    (void)s;
    *bytes = 0;
    *skipped = 0;
}
int st_gpu_pool_serves(const strata_session *s, int64_t T) { (void)s; (void)T; return 0; }
int st_gpu_split_mode(const strata_session *s) { (void)s; return 0; }

#else

/* ---------------------------------------------------------------------------------------------
 * The next layer's expert prediction (gpu_prefetch, pipe)
 * ------------------------------------------------------------------------------------------- */

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

/* cpu_warm: whether layer il's hand-down (rows of a call of tn tokens) also predicts layer
 * il + 1, a CPU layer too, for the CPU threads to warm. */
static int st_gpu_warm_layer(const strata_session *s, int il, int64_t tn) {
    return s->gpu->warm_on && tn <= 8 && il + 1 < s->model->hp.n_layer && st_gpu_layer_on_cpu(s, il + 1);
}

/* A CPU layer's hand-down: rows t0 .. t0 + tn of xn, their routing ids and weights into the
 * pinned h_ rows (asynchronous copies, or none when the decode step's router wrote them there:
 * g->hand_ready), then the wait for them. warm: behind the copies the GPU
 * predicts layer il + 1's experts (their ids reach h_pf_ids while the CPU computes this layer;
 * ev_pred marks them), and only the copies are waited for. */
static strata_status st_gpu_hand_down(strata_session *s, int il, int64_t t0, int64_t tn, int warm) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd, K = hp->n_expert_used;
    if (!g->hand_ready) { /* else the router wrote them into the mapped rows */
        TRY(st_cuda_memcpy_async(g->h_xn + t0 * E, g->xn + t0 * E, sizeof(float) * (size_t)(tn * E), 0, g->stream));
        TRY(st_cuda_memcpy_async(g->h_ids + t0 * K, g->ids + t0 * K, sizeof(int32_t) * (size_t)(tn * K), 0,
                                 g->stream));
        TRY(st_cuda_memcpy_async(g->h_wts + t0 * K, g->wts + t0 * K, sizeof(float) * (size_t)(tn * K), 0,
                                 g->stream));
    }
    g->hand_ready = 0;
    s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(tn * E) + (sizeof(int32_t) + sizeof(float)) * (size_t)(tn * K));
    if (warm) {
        TRY(st_cuda_event_record(g->ev_hand, g->stream));
        TRY(st_gpu_predict_next(s, il, t0, tn));
        TRY(st_cuda_event_record(g->ev_pred, g->stream));
        s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)(tn * K));
    }
    const double t = st_prof_clock();
    const strata_status st = warm ? st_cuda_event_synchronize(g->ev_hand) : st_cuda_stream_synchronize(g->stream);
    s->hand_wait_s += st_prof_clock() - t;
    s->hand_offs++;
    return st;
}

/* cpu_warm: the routing of a CPU layer is here: the warm of its predicted experts stops (its
 * bytes counted) and the prediction is scored against the routing ids[0 .. n). */
static void st_gpu_warm_end(strata_session *s, const int32_t *ids, int64_t n) {
    st_gpu *g = s->gpu;
    if (!g->warm_on) return;
    s->warm_bytes += st_moe_warm_stop(s->tp, &g->warm);
    if (!g->warm_n || !ids) return;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < g->warm_n; j++)
            if (g->warm_ids[j] == ids[i]) { s->pred_hits++; break; }
    s->pred_slots += n;
    g->warm_n = 0;
}

/* cpu_warm: once the CPU has computed layer il, its threads start reading layer il + 1's
 * predicted experts (the ids came down behind the hand-down) while the GPU goes on. */
static strata_status st_gpu_warm_begin(strata_session *s, int il, int64_t tn) {
    st_gpu *g = s->gpu;
    const int32_t X = s->model->hp.n_expert, K = s->model->hp.n_expert_used;
    TRY(st_cuda_event_synchronize(g->ev_pred)); /* long done: the CPU's step took longer */
    const int64_t n = tn * K;
    memcpy(g->warm_ids, g->h_pf_ids, sizeof(int32_t) * (size_t)n);
    g->warm_n = n;
    st_moe_warm_start(s->tp, &g->warm, s->experts + (size_t)(il + 1) * (size_t)X, X, g->warm_ids, n);
    return STRATA_OK;
}

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
    /* decode-sized calls: the attention also writes its rows as Q8_1 for the output GEMV where
     * its kernel finishes them itself (one launch fewer, no combine pass) */
    int att_q8 = 0;
    if (g->att_q8 && T <= ST_GPU_COLS && T < ST_CUDA_MMQ_MIN_ROWS)
        TRY(st_cuda_attention_q8(&G->kv, &g->shape, q, lq, T, pos0, g->pos, g->att, no, g->attn_ws,
                                 g->attn_ws_bytes, g->att_q8, g->sync + ST_GPU_SYNC_ATTN,
                                 ST_GPU_SYNC_MOE - ST_GPU_SYNC_ATTN, &att_q8, g->stream));
    else
        TRY(st_cuda_attention(&G->kv, &g->shape, q, lq, T, pos0, g->pos, g->att, no, g->attn_ws,
                              g->attn_ws_bytes, g->stream));
    TRY(st_gpu_mark(s, STRATA_PHASE_ATTN));
    TRY(st_gpu_mm_pre(g, &G->wo, g->att, att_q8 ? g->att_q8 : NULL, T, g->proj));
    if (G->bo) TRY(st_cuda_add_bias(g->proj, E, G->bo, E, T, g->stream));
    /* the residual and the FFN's norm in one launch */
    const float rs = m->arch->granite_scales ? hp->residual_scale : 1.0f;
    TRY(st_cuda_add_rmsnorm(g->x, g->proj, rs, g->xn, G->ffn_norm, E, T, hp->norm_eps, g->stream));
    return st_gpu_mark(s, STRATA_PHASE_ATTN_OUT);
}

/* The grouped expert kernel's arguments for rows t0 .. t0+tn-1 of layer il's routed experts:
 * the expert table (device) and the routed ids to compute (-1: another side's), weighted by the
 * routing's weights, written into g->proj (not accumulated). */
static st_cuda_moe_args st_gpu_routed_args(const strata_session *s, int il, int64_t t0, int64_t tn,
                                           const void *table, const int32_t *ids) {
    const st_hparams *hp = &s->model->hp;
    const st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[il];
    const int64_t E = hp->n_embd, K = hp->n_expert_used;
    st_cuda_moe_args a;
    memset(&a, 0, sizeof a);
    a.experts = table;
    a.n_expert = hp->n_expert;
    a.type_gate = a.type_up = G->exp_type_gu;
    a.type_down = G->exp_type_down;
    a.n_embd = E;
    a.n_ff = hp->n_ff_exp;
    a.x = g->xn + t0 * E;
    a.xq = tn == 1 && g->xq_ready ? g->moe_xq : NULL; /* from the one-token router */
    a.T = tn;
    a.ids = ids;
    a.wts = g->wts + t0 * K;
    a.k = (int32_t)K;
    a.out = g->proj + t0 * E;
    a.accumulate = 0;
    a.ws = g->moe_ws;
    a.ws_bytes = g->moe_ws_bytes;
    a.sync = g->sync + ST_GPU_SYNC_MOE; /* one-token calls: h quantized in the gate/up kernel */
    a.n_sync = ST_GPU_SYNC - ST_GPU_SYNC_MOE;
    return a;
}

/* cpu_misses: the distinct experts of the P routed slots ids (host; those with missed[i] set, or
 * every valid one when missed is NULL) listed in g->misses with their rows and heaviest weight,
 * g->miss_of[e] their index (the caller resets it to -1). Returns how many. */
static int st_gpu_list_misses(st_gpu *g, const int32_t *ids, const float *wts, int64_t P, int32_t X,
                              const uint8_t *missed) {
    int nm = 0;
    for (int64_t i = 0; i < P; i++) {
        const int32_t e = ids[i];
        if (e < 0 || e >= X || (missed && !missed[i])) continue;
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
    return nm;
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
    const int nm = st_gpu_list_misses(g, ids, wts, P, X, s->missed);
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

/* cpu_misses with CPU layers (n_cpu_moe), decode-sized calls: every routed expert of the layer is
 * a miss. The cost model (or pcie_frac) picks the experts to copy over PCIe into the stage slots.
 * ids, wts: the call's routing on the host (tn x K). *n_gpu, *n_cpu: the slot-rows each side
 * takes (*n_gpu 0: the CPU computes the layer as without the split); g->h_ids_cpu then has the
 * CPU's ids (-1 for the GPU's), g->h_ids_gpu the GPU's (-1 for the CPU's). */
static void st_gpu_split_decide(strata_session *s, const int32_t *ids, const float *wts, int64_t tn,
                                int64_t *n_gpu, int64_t *n_cpu) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    const int64_t P = tn * K;
    *n_gpu = *n_cpu = 0;
    const int nm = st_gpu_list_misses(g, ids, wts, P, X, NULL);
    const int nl = nm > 0 ? st_cost_decide(&s->cost, g->misses, nm, g->miss_load, NULL) : 0;
    int64_t ng = 0, nc = 0;
    for (int64_t i = 0; i < P; i++) {
        const int32_t e = ids[i];
        const int gpu = e >= 0 && e < X && g->miss_load[g->miss_of[e]];
        g->h_ids_gpu[i] = gpu ? e : -1;
        g->h_ids_cpu[i] = gpu ? -1 : e;
        ng += gpu;
        nc += !gpu && e >= 0 && e < X;
    }
    for (int m = 0; m < nm; m++) g->miss_of[g->misses[m].expert] = -1;
    if (nl == 0 || ng == 0) return;
    *n_gpu = ng;
    *n_cpu = nc;
}

/* The GPU's share of a split CPU layer (st_gpu_split_decide): its experts' copies enqueued on the
 * compute stream (st_gpu_cache_async_loads), then its kernel, while the pool computes the CPU's
 * share: into g->proj (the caller adds the CPU's sum), or with exact its rows per slot in the
 * CPU's arithmetic into g->rows_gpu (the caller combines both sides' rows). */
static strata_status st_gpu_split_enqueue(strata_session *s, int il, int64_t t0, int64_t tn, int exact) {
    st_gpu *g = s->gpu;
    const int32_t K = s->model->hp.n_expert_used;
    const int64_t P = tn * K;
    const void *table = NULL;
    TRY(st_gpu_cache_table(s, g->stage, il, g->h_ids_gpu, tn, K, 0, g->stream, &table));
    /* the GPU's ids go up from the pinned ring beside the hand-off rows (the next layer's
     * routing wait covers this copy before they are written again) */
    int32_t *hg = g->h_split_ids + t0 * K;
    memcpy(hg, g->h_ids_gpu, sizeof(int32_t) * (size_t)P);
    TRY(st_cuda_memcpy_async(g->ids_split + t0 * K, hg, sizeof(int32_t) * (size_t)P, 1, g->stream));
    s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)P);
    st_cuda_moe_args a = st_gpu_routed_args(s, il, t0, tn, table, g->ids_split + t0 * K);
    if (exact) {
        a.ws = g->exact_ws;
        a.ws_bytes = g->exact_ws_bytes;
        return st_cuda_moe_exact_rows(&a, g->rows_gpu, g->stream);
    }
    return st_cuda_moe_ffn(&a, g->stream);
}

static strata_status st_gpu_ffn_block(strata_session *s, int il, int64_t T) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[il];
    const int64_t E = hp->n_embd;
    const float *proj = g->proj; /* the FFN's output rows: g->proj, or a decode step's CPU row */
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
        /* a decode step: router GEMV, routing and the experts' q8_1 row of xn in one launch */
        const int r1 = T == 1 && g->moe_xq && st_cuda_moe_router1_supports(&G->router, X, K);
        /* a CPU layer's decode step: the router also writes xn, ids and weights into the mapped
         * hand-down rows */
        g->hand_ready = r1 && g->d_xn && st_gpu_layer_on_cpu(s, il) && !st_gpu_pool_call(s, T);
        if (r1)
            TRY(st_cuda_moe_router1(&G->router, g->xn, X, K, hp->expert_weights_norm, g->router, g->ids, g->wts,
                                    g->hand_ready ? &g->hand_db : NULL, g->moe_xq, g->hand_ready ? g->d_xn : NULL,
                                    g->sync + ST_GPU_SYNC_ROUTER, g->stream));
        else
            TRY(st_gpu_mm(g, &G->router, g->xn, T, g->router));
        g->xq_ready = r1;
        if (G->shexp && G->shexp_gate_inp.data) {
            TRY(st_gpu_mm(g, &G->shexp_gate_inp, g->xn, T, g->shgate));
            TRY(st_cuda_sigmoid(g->shgate, g->shgate, T, g->stream));
        }
        for (int64_t t0 = 0; t0 < T; t0 += g->moe_tokens) {
            const int64_t tn = T - t0 < g->moe_tokens ? T - t0 : g->moe_tokens;
            if (!r1)
                TRY(st_cuda_moe_route(g->router + t0 * X, tn, X, K, hp->expert_weights_norm,
                                      g->ids + t0 * K, g->wts + t0 * K, NULL, g->stream));
            TRY(st_gpu_mark(s, STRATA_PHASE_ROUTER));
            /* a CPU layer's experts are staged to the GPU for a long enough batch */
            int staged = 0;
            int ids_down = 0; /* the routing is in s->ids (host) */
            int handed = 0;   /* a CPU layer's rows, routing and weights are in the pinned h_ rows */
            int warm = 0;     /* cpu_warm: the hand-down predicted layer il + 1 */
            if (st_gpu_layer_on_cpu(s, il) && g->stage && s->stage_experts != 0 && !st_gpu_pool_call(s, T)) {
                if (s->stage_experts > 0) {
                    staged = tn >= s->stage_experts;
                } else { /* auto: the routing down, then the cost model on this batch */
                    int32_t *ids = s->ids + t0 * K;
                    if (tn * E <= 16384) { /* decode-sized: the CPU's inputs come down with the
                                            * routing, one wait for both (usually the CPU's) */
                        warm = st_gpu_warm_layer(s, il, tn);
                        TRY(st_gpu_hand_down(s, il, t0, tn, warm));
                        memcpy(ids, g->h_ids + t0 * K, sizeof(int32_t) * (size_t)(tn * K));
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
                st_gpu_warm_end(s, NULL, 0); /* the GPU computes this CPU layer: no warm wanted */
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
                    warm = st_gpu_warm_layer(s, il, tn);
                    TRY(st_gpu_hand_down(s, il, t0, tn, warm));
                }
                st_gpu_warm_end(s, hi, tn * K); /* this layer's routing is here */
                const st_expert *ex = s->experts + (size_t)il * (size_t)X;
                if (s->ram) { /* past the RAM budget: the routed experts from the RAM tier's slots
                               * (read from the file with O_DIRECT when not there) */
                    const strata_status rst = st_ram_tier_table(s, il, tn, hi, K, &ex);
                    if (rst == STRATA_OK && pipe) st_gpu_pipe_issue(s, il, tn); /* reads while the CPU computes */
                    if (rst != STRATA_OK) {
                        st_ram_tier_release(s);
                        return rst;
                    }
                }
                /* cpu_misses: a share of the experts over PCIe to the GPU, the rest here */
                int64_t ng = 0, nc = 0;
                if (g->cpu_split && tn <= ST_POOL_T) st_gpu_split_decide(s, hi, hw, tn, &ng, &nc);
                /* the CPU's step starts on the pool's workers; the host enqueues the GPU's share
                 * (copies and kernel) meanwhile, then joins the step. exact: both sides give rows
                 * per slot in the CPU's arithmetic, summed on the GPU in slot order, so the result
                 * is the CPU's alone whatever the share */
                const int cpu_step = !ng || nc, exact = ng && g->split_exact;
                const double t_step = st_prof_clock();
                if (cpu_step) st_moe_ffn_begin(s->tp, ex, X, hx, tn, ng ? g->h_ids_cpu : hi, hw, K, hp_, s->moe_ws);
                const strata_status est = ng ? st_gpu_split_enqueue(s, il, t0, tn, exact) : STRATA_OK;
                if (cpu_step && exact) st_moe_ffn_end_rows(s->tp, s->moe_ws, g->h_rows);
                else if (cpu_step) st_moe_ffn_end(s->tp, s->moe_ws);
                s->cpu_step_s += st_prof_clock() - t_step;
                if (s->ram) st_ram_tier_release(s);
                if (est != STRATA_OK) return est;
                if (ng) { /* the GPU took a share: its slot-rows counted there, both sides joined */
                    s->slots_cpu[il] -= ng;
                    s->slots_gpu[il] += ng;
                    if (exact) { /* both sides' rows summed in slot order; the CPU's read from the
                                  * mapped memory, or copied up first */
                        const float *cr = g->rows_gpu; /* (no CPU rows: not read) */
                        if (nc) {
                            cr = g->d_rows;
                            if (!cr) {
                                TRY(st_cuda_memcpy_async(g->rows_cpu, g->h_rows, sizeof(float) * (size_t)(tn * K * E),
                                                         1, g->stream));
                                cr = g->rows_cpu;
                            }
                            s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(nc * E));
                        }
                        TRY(st_cuda_moe_combine_rows(g->ids + t0 * K, g->ids_split + t0 * K, g->rows_gpu, cr,
                                                     g->wts + t0 * K, tn, K, E, X, g->proj + t0 * E, g->stream));
                    } else if (nc) { /* the GPU's sum is in g->proj: the CPU's added, read from the
                                      * mapped rows or copied up first */
                        const float *cp = g->d_proj ? g->d_proj + t0 * E : g->cpu_part;
                        if (!g->d_proj)
                            TRY(st_cuda_memcpy_async(g->cpu_part, hp_, sizeof(float) * (size_t)(tn * E), 1,
                                                     g->stream));
                        TRY(st_cuda_add(g->proj + t0 * E, g->proj + t0 * E, cp, 1.0f, tn * E, g->stream));
                    }
                } else if (g->d_proj && T == 1 && !G->shexp) { /* the residual reads the mapped row */
                    proj = g->d_proj;
                } else {
                    TRY(st_cuda_memcpy_async(g->proj + t0 * E, hp_, sizeof(float) * (size_t)(tn * E), 1, g->stream));
                }
                if (warm) TRY(st_gpu_warm_begin(s, il, tn)); /* while the GPU goes on */
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
            st_cuda_moe_args a = st_gpu_routed_args(s, il, t0, tn, table,
                                                    pm ? g->pm_ids : split ? g->ids_split + t0 * K : g->ids + t0 * K);
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
        g->xq_ready = 0;
    }
    /* the residual, and the next layer's attention norm in the same launch */
    const float rs = m->arch->granite_scales ? hp->residual_scale : 1.0f;
    if (il + 1 < hp->n_layer && st_gpu_xq(g, T, E))
        TRY(st_cuda_add_rmsnorm_q8(g->x, proj, rs, g->xn, g->layers[il + 1].attn_norm, E, T, hp->norm_eps,
                                   g->xq, g->stream));
    else if (il + 1 < hp->n_layer)
        TRY(st_cuda_add_rmsnorm(g->x, proj, rs, g->xn, g->layers[il + 1].attn_norm, E, T, hp->norm_eps,
                                g->stream));
    else
        TRY(st_cuda_add(g->x, g->x, proj, rs, T * E, g->stream));
    return st_gpu_mark(s, STRATA_PHASE_SHARED);
}

/* The counters a captured decode step adds at each replay: sign -1 before the capture (the
 * counters so far, negated), 1 after it (the difference: what the step's host code counted). */
static strata_status st_gpu_graph_counts(strata_session *s, int sign) {
    st_gpu *g = s->gpu;
    const int L = s->model->hp.n_layer;
    if (!g->graph_slots_gpu) {
        g->graph_slots_gpu = calloc((size_t)L, sizeof *g->graph_slots_gpu);
        g->graph_slots_cpu = calloc((size_t)L, sizeof *g->graph_slots_cpu);
        if (!g->graph_slots_gpu || !g->graph_slots_cpu) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
    }
    for (int il = 0; il < L; il++) {
        g->graph_slots_gpu[il] = (sign < 0 ? 0 : g->graph_slots_gpu[il]) + sign * s->slots_gpu[il];
        g->graph_slots_cpu[il] = (sign < 0 ? 0 : g->graph_slots_cpu[il]) + sign * s->slots_cpu[il];
    }
    g->graph_pcie_bytes = (sign < 0 ? 0 : g->graph_pcie_bytes) + sign * s->pcie_bytes;
    g->graph_cpu_batches = (sign < 0 ? 0 : g->graph_cpu_batches) + sign * s->cpu_batches;
    return STRATA_OK;
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
    st_gpu_warm_end(s, NULL, 0); /* a warm the pass left running (a failed call) */
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
        for (int il = 0; il < hp->n_layer; il++) { /* what the captured step's blocks counted */
            s->slots_gpu[il] += g->graph_slots_gpu[il];
            s->slots_cpu[il] += g->graph_slots_cpu[il];
        }
        s->pcie_bytes += g->graph_pcie_bytes;
        s->cpu_batches += g->graph_cpu_batches;
    } else {
        if (graph) { /* the counters before, so the capture's own counts can be taken */
            TRY(st_gpu_graph_counts(s, -1));
            TRY(st_cuda_capture_begin(g->stream));
        }
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
            TRY(st_gpu_graph_counts(s, 1));
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
