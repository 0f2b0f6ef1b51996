/* forward_cuda.c - the GPU forward pass of a session (backend STRATA_BACKEND_CUDA; its weights,
 * scratch, KV cache and placement are set up by forward_cuda_setup.c, the state they share is
 * forward_cuda.h): the layer loop, each layer's attention (norm, q/k/v, biases, q/k norm, RoPE,
 * KV store, attention, output projection, residual; deepseek2's latent attention in its absorbed
 * form over a latent cache), its FFN (a dense one here; the MoE block,
 * router to shared expert in each chunk's expert placement, is moe_block.c) and the join of the
 * FFN's rows into the residual; the final norm and logits; the CUDA graphs of decode steps. The
 * kernels (c/cuda) mirror forward.c step by step. Token embeddings are dequantized on the CPU
 * (exactly as forward.c) and copied up.
 *
 * Every kernel runs on the session's own (blocking) stream, in program order; the synchronous
 * copies (embeddings up, logits down, the routing of the expert cache) run on the legacy default
 * stream, which is ordered with it, so each copy waits for the kernels before it and the kernels
 * after it wait for the copy. The --n-cpu-moe hand-off copies through pinned host rows on the
 * session's stream (three copies down, one wait, the CPU's step, one copy up that the next
 * kernels are ordered after). Routed experts are resident, or in the GPU expert cache
 * (c/experts/gpu_tier.c), or computed by the CPU (n_cpu_moe). Single-token steps may be replayed as a
 * CUDA graph (cuda_graphs). Matmuls of ST_CUDA_MMQ_MIN_ROWS rows or more
 * run on the tensor-core tiles (cuda_mmq.h) where the weight type has them; fewer rows (decode,
 * verify windows) take the GEMV in slices of 8 columns. The grouped MoE takes up to moe_tokens
 * tokens per call (8192 / k with tile types, else 1024 / k) and picks its own path.
 *
 * Deterministic: the same tokens give the same bits on every run (each kernel is). In a build
 * without CUDA the entry points return STRATA_ERR_UNSUPPORTED. */
#include "moe_block.h"
#include "deltanet_gpu.h"

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
st_gpu_tier *st_gpu_get_cache(const strata_session *s, int i) { (void)s; (void)i; return NULL; }
int64_t st_gpu_pinned_bytes(const strata_session *s) { (void)s; return 0; }
void st_gpu_tiles_stats(const strata_session *s, int64_t *bytes, int32_t *skipped, int32_t *sm60) {
    (void)s;
    *bytes = 0;
    *skipped = 0;
    *sm60 = 0;
}
int st_gpu_pool_serves(const strata_session *s, int64_t T) { (void)s; (void)T; return 0; }
void st_gpu_mem_stats(const strata_session *s, int64_t *kv_bytes, int64_t *state_bytes) {
    (void)s;
    *kv_bytes = 0;
    *state_bytes = 0;
}
int st_gpu_split_mode(const strata_session *s) { (void)s; return 0; }
int st_gpu_cache_split_mode(const strata_session *s) { (void)s; return 0; }
int64_t st_gpu_tail_skipped(const strata_session *s, int reset) { (void)s; (void)reset; return 0; }
double st_gpu_plan_rate(const strata_session *s) { (void)s; return 0.0; }

#else

/* ---------------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------------- */

/* Profile mode: wait for the GPU, then charge the time since the last mark to phase. */
strata_status st_gpu_mark(strata_session *s, strata_phase phase) {
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

strata_status st_gpu_mm(st_gpu *g, const st_cuda_mat *W, const float *x, int64_t T, float *y) {
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
    case ST_QKNORM_HEAD: /* (glm4moe's only where the file has them) */
        if (!G->q_norm) break;
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

/* The attention norm of layer il into g->xn (and g->xq, as Q8_1, for the calls st_gpu_xq takes)
 * where no join wrote it: layer 0's and the MTP layer's; the trunk's later layers get theirs
 * fused into the previous layer's residual (st_gpu_join). */
static strata_status st_gpu_attn_norm(strata_session *s, int il, int64_t T) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd;
    const float *w = g->layers[il].attn_norm;
    if (st_gpu_xq(g, T, E)) return st_cuda_rmsnorm_q8(g->xn, g->x, w, E, T, hp->norm_eps, g->xq, g->stream);
    return st_cuda_rmsnorm(g->xn, E, g->x, E, w, E, 1, T, hp->norm_eps, g->stream);
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
    if (il == 0) TRY(st_gpu_attn_norm(s, il, T));
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
        const int hn = m->arch->qk_norm == ST_QKNORM_HEAD && G->q_norm;
        TRY(st_cuda_qkv_prep(&g->rope, g->qkv, lq, hp->n_head, hp->n_head_kv, hd, hn ? G->q_norm : NULL,
                             hn ? G->k_norm : NULL, hp->norm_eps, &G->kv, T, g->pos, pos0, g->stream));
    } else {
        TRY(st_gpu_attn_inputs(s, il, q, lq, k, lk, v, lv, T, pos0));
    }
    /* gpt-oss: this layer's sliding window and sink logits (the CPU's st_attn_shape) */
    st_cuda_attn_shape sh = g->shape;
    sh.window = st_layer_swa(hp, il) ? hp->n_swa : 0;
    sh.sinks = G->attn_sinks;
    /* decode-sized calls: the attention also writes its rows as Q8_1 for the output GEMV where
     * its kernel finishes them itself (one launch fewer, no combine pass) */
    int att_q8 = 0;
    if (g->att_q8 && T <= ST_GPU_COLS && T < ST_CUDA_MMQ_MIN_ROWS)
        TRY(st_cuda_attention_q8(&G->kv, &sh, q, lq, T, pos0, g->pos, g->att, no, g->attn_ws,
                                 g->attn_ws_bytes, g->att_q8, g->sync + ST_GPU_SYNC_ATTN,
                                 ST_GPU_SYNC_MOE - ST_GPU_SYNC_ATTN, &att_q8, g->stream));
    else
        TRY(st_cuda_attention(&G->kv, &sh, q, lq, T, pos0, g->pos, g->att, no, g->attn_ws,
                              g->attn_ws_bytes, g->stream));
    TRY(st_gpu_mark(s, STRATA_PHASE_ATTN));
    TRY(st_gpu_mm_pre(g, &G->wo, g->att, att_q8 ? g->att_q8 : NULL, T, g->proj));
    if (G->bo) TRY(st_cuda_add_bias(g->proj, E, G->bo, E, T, g->stream));
    /* the residual and the FFN's norm in one launch */
    const float rs = m->arch->granite_scales ? hp->residual_scale : 1.0f;
    TRY(st_cuda_add_rmsnorm(g->x, g->proj, rs, g->xn, G->ffn_norm, E, T, hp->norm_eps, g->stream));
    return st_gpu_mark(s, STRATA_PHASE_ATTN_OUT);
}

/* Whether a call of T tokens takes latent attention's one GEMV over q's first matrix and wkv_a
 * (G->wqkv_a): decode-sized calls (one GEMV slice), unless the q matrix takes the SM60 kernel
 * (its own bits; the joined matrix has no copy for it). */
static int st_gpu_mla_cat(const st_gpu_layer *G, int64_t T) {
    const st_cuda_mat *qm = G->wq_a.data ? &G->wq_a : &G->wq;
    return G->wqkv_a.data && !qm->gemv_sm60 && T <= ST_GPU_COLS && T < ST_CUDA_MMQ_MIN_ROWS;
}

/* Whether the GEMV reads W's activations as Q8_1 rows (the quantized types; float ones read f32). */
static int st_gpu_reads_q8(const st_cuda_mat *W) {
    return W->type != STRATA_TYPE_F32 && W->type != STRATA_TYPE_F16 && W->type != STRATA_TYPE_BF16;
}

/* deepseek2's latent attention's projections of xn: q (through its low rank and its norm when there
 * is one) into g->mla_q or the joined rows, and the latent rows. *q, *lq: the q rows (n_head heads
 * of head_dim_mla) and their stride; *kv, *lkv: the latent rows (kv_lora + n_rot) and theirs. A
 * decode step's two GEMVs of xn are one over G->wqkv_a into g->qkv (st_gpu_mla_cat). */
static strata_status st_gpu_mla_proj(strata_session *s, int il, int64_t T, const void *xq, float **q, int64_t *lq,
                                     float **kv, int64_t *lkv) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[il];
    const int64_t H = hp->n_head, hk = hp->head_dim_mla, D = hp->n_lora_kv + hp->n_rot, nlq = hp->n_lora_q;
    const float eps = hp->norm_eps;
    *q = g->mla_q;
    *lq = H * hk;
    *kv = g->k;
    *lkv = D;
    const float *qa = g->mla_qa; /* the q low rank's rows before its norm */
    int64_t lqa = nlq;
    if (st_gpu_mla_cat(G, T)) {
        TRY(st_gpu_mm_pre(g, &G->wqkv_a, g->xn, xq, T, g->qkv));
        *lkv = G->wqkv_a.ne1;
        *kv = g->qkv + (*lkv - D);
        if (G->wq_a.data) {
            qa = g->qkv;
            lqa = *lkv;
        } else {
            *q = g->qkv;
            *lq = *lkv;
        }
    } else if (G->wq_a.data) {
        TRY(st_gpu_mm_pre(g, &G->wq_a, g->xn, xq, T, g->mla_qa));
        TRY(st_gpu_mm_pre(g, &G->wkv_a, g->xn, xq, T, g->k));
    } else {
        TRY(st_gpu_mm_pre(g, &G->wq, g->xn, xq, T, g->mla_q));
        TRY(st_gpu_mm_pre(g, &G->wkv_a, g->xn, xq, T, g->k));
    }
    if (G->wq_a.data) { /* q's low rank normalized (into g->mla_qa), then up */
        TRY(st_cuda_rmsnorm(g->mla_qa, nlq, qa, lqa, G->q_a_norm, nlq, 1, T, eps, g->stream));
        TRY(st_gpu_mm(g, &G->wq_b, g->mla_qa, T, g->mla_q));
    }
    return STRATA_OK;
}

/* deepseek2's latent attention, in st_mla_block's order (forward_cpu.c): q (through its low rank
 * when there is one) and the latent row; the row's latent normalized and its key part roped;
 * each head's query = [wk_b[h] . q_nope, roped q part]; the row into the latent cache; attention
 * over the cache (one KV head, values = the rows' latents); wv_b[h] turns each head's latent
 * output into its values; the output projection, the residual and the FFN's norm. Launches a
 * layer: docs/ARCHITECTURE.md (latent attention). */
static strata_status st_gpu_mla_block(strata_session *s, int il, int64_t T, int64_t pos0) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[il];
    const int64_t E = hp->n_embd, H = hp->n_head, R = hp->n_lora_kv, nr = hp->n_rot;
    const int64_t hk = hp->head_dim_mla, nope = hk - nr, hv = hp->head_dim_v_mla, D = R + nr;
    const float eps = hp->norm_eps;

    const void *xq = st_gpu_xq(g, T, E) ? g->xq : NULL; /* as st_gpu_attn_block */
    if (il == 0) TRY(st_gpu_attn_norm(s, il, T));
    float *q, *kv;
    int64_t lq, lkv;
    TRY(st_gpu_mla_proj(s, il, T, xq, &q, &lq, &kv, &lkv));
    TRY(st_gpu_mark(s, STRATA_PHASE_QKV));
    /* the queries: [wk_b[h] . q_nope, q_pe roped]; the cache rows: rmsnorm(latent), roped key
     * part, stored (positions from g->pos, as the graphs need). One launch for all but the
     * absorption where the shape allows (the bits of the five below); the CPU ropes q_pe before
     * the copy: the same values */
    TRY(st_cuda_mla_absorb(&G->wk_b, q, lq, hk, g->q, H * D, D, T, g->stream));
    if (st_cuda_mla_prep_supports(&g->rope, &g->mla)) {
        TRY(st_cuda_mla_prep(&g->rope, &G->kv, &g->mla, kv, lkv, G->kv_a_norm, eps, q + nope, lq, hk, g->q, H * D,
                             T, pos0, g->pos, g->stream));
    } else {
        TRY(st_cuda_rmsnorm(kv, lkv, kv, lkv, G->kv_a_norm, R, 1, T, eps, g->stream));
        TRY(st_cuda_rope(&g->rope, kv + R, lkv, 1, nr, T, g->pos, pos0, g->stream));
        if (lq == H * hk)
            TRY(st_cuda_mla_copy_rows(g->q + R, D, q + nope, hk, nr, T * H, g->stream));
        else /* the joined rows: a token's heads at stride hk, its row at lq */
            for (int64_t t = 0; t < T; t++)
                TRY(st_cuda_mla_copy_rows(g->q + t * H * D + R, D, q + t * lq + nope, hk, nr, H, g->stream));
        TRY(st_cuda_rope(&g->rope, g->q + R, H * D, H, D, T, g->pos, pos0, g->stream));
        TRY(st_cuda_mla_store(&G->kv, &g->mla, kv, lkv, T, pos0, g->pos, g->stream));
    }
    TRY(st_cuda_mla_attention(&G->kv, &g->mla, g->q, H * D, T, pos0, g->pos, g->att, H * R, g->attn_ws,
                              g->attn_ws_bytes, g->stream));
    TRY(st_gpu_mark(s, STRATA_PHASE_ATTN));
    /* the heads' values; decode-sized calls write them as the output GEMV's Q8_1 rows too (the
     * bits it would quantize, one launch fewer) */
    const int vq = g->mla_vq && T <= ST_GPU_COLS && T < ST_CUDA_MMQ_MIN_ROWS && hv % 32 == 0 && st_gpu_reads_q8(&G->wo);
    if (vq) TRY(st_cuda_mla_absorb_q8(&G->wv_b, g->att, H * R, R, g->mla_v, T, g->mla_vq, g->stream));
    else TRY(st_cuda_mla_absorb(&G->wv_b, g->att, H * R, R, g->mla_v, H * hv, hv, T, g->stream));
    TRY(st_gpu_mm_pre(g, &G->wo, g->mla_v, vq ? g->mla_vq : NULL, T, g->proj));
    TRY(st_cuda_add_rmsnorm(g->x, g->proj, 1.0f, g->xn, G->ffn_norm, E, T, eps, g->stream));
    return st_gpu_mark(s, STRATA_PHASE_ATTN_OUT);
}

/* The FFN of a dense layer (dense models, deepseek2's leading dense layers): gate and up with SwiGLU, then down, into g->proj. */
static strata_status st_gpu_dense_ffn(strata_session *s, int il, int64_t T) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[il];
    const int64_t E = hp->n_embd, F = hp->n_ff;
    TRY(st_gpu_mark(s, STRATA_PHASE_ROUTER));
    if (T >= ST_CUDA_MMQ_MIN_ROWS && st_cuda_moe_type_tiles(G->ffn_gate.type))
        TRY(st_cuda_mmq_swiglu(&G->ffn_gate, &G->ffn_up, g->xn, E, T, g->h, F, g->mmq_scratch, g->stream));
    else for (int64_t c = 0; c < T; c += ST_GPU_COLS) {
        const int nc = (int)(T - c < ST_GPU_COLS ? T - c : ST_GPU_COLS);
        TRY(st_cuda_mmv_swiglu(&G->ffn_gate, &G->ffn_up, g->xn + c * E, nc, g->h + c * F, g->mmv_scratch,
                               g->stream));
    }
    TRY(st_gpu_mm(g, &G->ffn_down, g->h, T, g->proj));
    return st_gpu_mark(s, STRATA_PHASE_EXPERTS);
}

/* The join of a layer's FFN into the residual: its T output rows out added into x, and the
 * attention norm of layer `next` taken of the sum in the same launch (into g->xn, and g->xq for
 * decode-sized calls); next == n_layer (after the last layer): the add alone. */
static strata_status st_gpu_join(strata_session *s, int next, float *x, const float *out, int64_t T) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd;
    const float rs = m->arch->granite_scales ? hp->residual_scale : 1.0f;
    if (next < hp->n_layer && st_gpu_xq(g, T, E))
        TRY(st_cuda_add_rmsnorm_q8(x, out, rs, g->xn, g->layers[next].attn_norm, E, T, hp->norm_eps, g->xq,
                                   g->stream));
    else if (next < hp->n_layer)
        TRY(st_cuda_add_rmsnorm(x, out, rs, g->xn, g->layers[next].attn_norm, E, T, hp->norm_eps, g->stream));
    else
        TRY(st_cuda_add(x, x, out, rs, T * E, g->stream));
    return st_gpu_mark(s, STRATA_PHASE_SHARED);
}

/* defer_cpu: the deferred layer's late rows (the pool's done flag awaited on the device) added
 * into the residual after this layer's attention, and the FFN's norm taken again of the sum. */
static strata_status st_gpu_defer_join(strata_session *s, int64_t T) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const int il = g->defer_pending;
    const int64_t E = hp->n_embd;
    st_doorbell_layer *r = &g->db[il];
    g->defer_pending = -1;
    TRY(st_cuda_pool_wait(st_gpu_db_dev(g, &r->done_seq), g->d_step, st_gpu_db_dev(g, g->defer_src), T * E,
                          g->defer_part, g->d_err, ST_POOL_WAIT_LATE, g->stream));
    s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(T * E));
    const float rs = m->arch->granite_scales ? hp->residual_scale : 1.0f;
    return st_cuda_add_rmsnorm(g->x, g->defer_part, rs, g->xn, g->layers[il + 1].ffn_norm, E, T, hp->norm_eps,
                               g->stream);
}

/* One layer of a call of T tokens: the attention, the FFN (dense, or the MoE block: route, then
 * the experts of each chunk in their placement, moe_block.c; the MTP layer's experts all on the
 * GPU), and the join of its rows into the residual with the next layer's attention norm. */
static strata_status st_gpu_forward_layer(strata_session *s, int il, int64_t T, int64_t pos0) {
    st_gpu *g = s->gpu;
    if (s->model->arch->mla) TRY(st_gpu_mla_block(s, il, T, pos0));
    else if (st_layer_recurrent(&s->model->hp, il)) TRY(st_gpu_linear_attn_block(s, il, T, pos0));
    else if (s->model->arch->id == ST_ARCH_QWEN3NEXT) TRY(st_gpu_gated_attn_block(s, il, T, pos0));
    else TRY(st_gpu_attn_block(s, il, T, pos0));
    if (g->defer_pending >= 0) TRY(st_gpu_defer_join(s, T)); /* the previous layer's late rows */
    const float *out = g->proj; /* the FFN's output rows: g->proj, or a decode step's CPU row */
    if (!st_layer_has_experts(&s->model->layers[il])) {
        TRY(st_gpu_dense_ffn(s, il, T));
    } else if (il >= s->model->hp.n_layer) {
        TRY(st_gpu_moe_resident(s, il, T));
    } else {
        st_moe_call mc;
        TRY(st_gpu_moe_route(s, il, T, &mc));
        TRY(st_gpu_moe_experts(s, &mc));
        out = mc.out;
    }
    return st_gpu_join(s, il + 1, g->x, out, T);
}

strata_status st_gpu_mtp_layer(strata_session *s, int64_t T, int64_t pos0) {
    const int il = s->model->hp.n_layer;
    s->gpu->defer_pending = -1; /* (the trunk's last layer never defers) */
    TRY(st_gpu_attn_norm(s, il, T));
    return st_gpu_forward_layer(s, il, T, pos0);
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
    g->graph_defer_calls = (sign < 0 ? 0 : g->graph_defer_calls) + sign * s->defer_calls;
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

/* An MTP drafter's hidden states when its layer runs on the CPU (s->mtp_h, mtp_cpu.c): the
 * batch's T residual rows after the last layer, normed with output_norm on the device and copied
 * down to positions pos0 and on. Every architecture's layers (qwen3next's DeltaNet and gated
 * attention blocks too) leave their rows in g->x; a replayed graph step's too (the copy is
 * outside the capture). */
static strata_status st_gpu_mtp_rows_down(strata_session *s, int64_t pos0, int64_t T) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd;
    TRY(st_cuda_rmsnorm(g->xn, E, g->x, E, g->output_norm, E, 1, T, hp->norm_eps, g->stream));
    TRY(st_cuda_memcpy_d2h(s->mtp_h + pos0 * E, g->xn, sizeof(float) * (size_t)(T * E)));
    s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(T * E));
    return STRATA_OK;
}

static strata_status st_gpu_forward_go(strata_session *s, const strata_token *tokens, int64_t T,
                                       float *logits, int all);

strata_status st_gpu_forward_batch(strata_session *s, const strata_token *tokens, int64_t T,
                                   float *logits, int all) {
    st_gpu *g = s->gpu;
    g->pool_open = 0;
    strata_status st = st_gpu_forward_go(s, tokens, T, logits, all);
    if (g->stages) { /* a split: every stage's warm stopped, back to stage 0 (the session's state
                      * between calls) */
        for (int i = st_gpu_stages_n(g->stages) - 1; i >= 1; i--) {
            s->gpu = st_gpu_stages_get(g->stages, i);
            st_gpu_warm_end(s, NULL, 0);
        }
        const strata_status back = st_gpu_stage_enter(s, g->stages, 0);
        if (st == STRATA_OK) st = back;
    }
    st_gpu_warm_end(s, NULL, 0); /* a warm the pass left running (a failed call) */
    /* a call that failed after announcing a step to the expert pool: the layers it did not
     * publish are published empty, so the pool is not left waiting for them (st_pool_abandon) */
    if (st != STRATA_OK && g->pool_open) st_pool_abandon(g->pool, *g->h_step);
    g->pool_open = 0;
    return st;
}

/* The layers of s->gpu (all of them, or a split's stage: l0 .. l1 - 1) for a call of T tokens. A
 * single-token step is captured into a CUDA graph once and then replayed as one launch: its
 * kernels read the position from g->pos and everything else they use is fixed, except the
 * attention plan, which changes every ST_ATTN_NP_BUCKET positions (a new capture, kept in place
 * with cudaGraphExecUpdate). Not with profile's syncs, a route replay's host rows or host work
 * between layers: CPU layers only through the expert pool (its publish and wait kernels read the
 * step number from g->d_step) and when asked (cuda_graphs 2: on one host its steps measured
 * slower as graphs, erratically), no expert cache. A split's stages each keep their own graph; with n_cpu_moe
 * those past the CPU layers (st_gpu_has_cpu_layers) capture theirs as without CPU layers. */
static strata_status st_gpu_layers(strata_session *s, int64_t T, int64_t pos0, int pool) {
    st_gpu *g = s->gpu;
    const int graph = g->graphs && T == 1 && !s->profile && !s->replay &&
                      (!st_gpu_has_cpu_layers(s) || (pool && g->graphs == 2)) && !g->cache;
    const int64_t gnp = graph ? st_cuda_attn_plan_np(pos0 + 1, s->n_ctx) : 0;
    strata_status st = STRATA_OK;
    if (graph && g->graph && g->graph_np == gnp) {
        TRY(st_cuda_graph_launch(g->graph, g->stream));
        s->graph_launches++;
        for (int il = g->l0; il < g->l1; il++) { /* what the captured step's blocks counted */
            s->slots_gpu[il] += g->graph_slots_gpu[il];
            s->slots_cpu[il] += g->graph_slots_cpu[il];
        }
        s->pcie_bytes += g->graph_pcie_bytes;
        s->cpu_batches += g->graph_cpu_batches;
        s->defer_calls += g->graph_defer_calls;
        return STRATA_OK;
    }
    if (graph) { /* the counters before, so the capture's own counts can be taken */
        TRY(st_gpu_graph_counts(s, -1));
        TRY(st_cuda_capture_begin(g->stream));
    }
    for (int il = g->l0; il < g->l1 && st == STRATA_OK; il++) st = st_gpu_forward_layer(s, il, T, pos0);
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
    return st;
}

/* A split's stages after stage 0's embeddings: every stage's positions up and its per-call state
 * as st_gpu_forward_go sets stage 0's (no deferred pool rows due), then each stage's layers with
 * the hidden state handed on between them; s->gpu ends at the last stage. */
static strata_status st_gpu_stages_run(strata_session *s, int64_t T, int64_t pos0, int pool) {
    st_gpu_stages *S = s->gpu->stages;
    const int32_t *hpos = s->gpu->hpos;
    for (int i = 1; i < st_gpu_stages_n(S); i++) {
        TRY(st_gpu_stage_enter(s, S, i));
        s->gpu->defer_pending = -1;
        TRY(st_cuda_memcpy_h2d(s->gpu->pos, hpos, sizeof(int32_t) * (size_t)(T + 1)));
    }
    for (int i = 0; i < st_gpu_stages_n(S); i++) {
        if (i > 0) TRY(st_gpu_stage_handoff(s, S, i, T));
        else TRY(st_gpu_stage_enter(s, S, 0));
        TRY(st_gpu_layers(s, T, pos0, pool));
    }
    return STRATA_OK;
}

static strata_status st_gpu_forward_go(strata_session *s, const strata_token *tokens, int64_t T,
                                       float *logits, int all) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const int64_t pos0 = s->n_past, E = hp->n_embd;
    /* programmatic dependent launch for this thread's launches until the next call: decode-sized
     * calls (one GEMV slice, ST_GPU_COLS tokens) only by default (cuda_pdl 1). Prompt batches ran
     * faster without it (docs/PERFORMANCE.md): a kernel signals its dependents as it starts, and
     * the next kernel's blocks then hold SM room while a many-wave grid still runs. */
    st_cuda_set_pdl(s->cuda_pdl == 2 || (s->cuda_pdl == 1 && T <= ST_GPU_COLS));
    st_prof_start(s);
    /* the expert pool serves this call's CPU layers: the step announced, its number up */
    const int pool = st_gpu_pool_call(s, T);
    g->defer_pending = -1; /* (a call that failed may have left one) */
    if (pool) TRY(st_gpu_pool_begin(s));
    /* embeddings on the CPU, as forward.c, then up from pinned memory */
    float *emb = g->h_embd ? g->h_embd : s->x;
    st_embed_tokens(s, tokens, T, emb);
    TRY(st_cuda_memcpy_h2d(g->x, emb, sizeof(float) * (size_t)(T * E)));
    s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(T * E));
    for (int64_t t = 0; t < T; t++) g->hpos[t] = (int32_t)(pos0 + t);
    g->hpos[T] = st_gpu_rs_hist_row(s, T, pos0); /* qwen3next's rollback history: its row, -1 */
    TRY(st_cuda_memcpy_h2d(g->pos, g->hpos, sizeof(int32_t) * (size_t)(T + 1)));
    TRY(st_gpu_mark(s, STRATA_PHASE_EMBED));
    TRY(g->stages ? st_gpu_stages_run(s, T, pos0, pool) : st_gpu_layers(s, T, pos0, pool));
    g = s->gpu; /* (a split's last stage: the output's) */
    if (g->mtp) TRY(st_gpu_mtp_keep(s, pos0, T)); /* the MTP layer's, on the device */
    else if (s->mtp_h) TRY(st_gpu_mtp_rows_down(s, pos0, T)); /* (before the output: g->xn is its scratch too) */
    if (logits) TRY(all ? st_gpu_output(s, 0, T, logits) : st_gpu_output(s, T - 1, 1, logits));
    else if (s->want_argmax) TRY(st_gpu_output_argmax(s, T - 1, s->argmax_out));
    else if (s->want_topk) TRY(st_gpu_output_topk(s, T - 1));
    else TRY(st_cuda_synchronize());
    if (pool) TRY(st_gpu_pool_end(s, T));
    st_prof_mark(s, STRATA_PHASE_OUTPUT);
    s->n_past += (int32_t)T;
    return STRATA_OK;
}

#endif /* STRATA_HAVE_CUDA */
