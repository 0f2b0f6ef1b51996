/* forward_cpu.c - the CPU forward pass of one batch of tokens through the model: embeddings, per
 * layer attention (norm, q/k/v with biases, q/k norm, RoPE, KV store, causal GQA attention,
 * output projection, residual) and FFN (dense, or MoE routing + grouped experts + shared
 * expert), final norm and logits; deepseek2's latent attention (absorbed form) in place of the
 * attention block. Per-architecture behaviour comes from the st_arch traits and the
 * hyperparameters (granite multipliers are 1 elsewhere). */
#include "session.h"
#include "forward_cpu.h"
#include "replay.h"
#include "linear_attn_cpu.h"
#include "profile.h"
#include "ram_tier.h"
#include "quant.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Activation trace (strata_session_set_act_trace): one branch per matrix when off
 * ------------------------------------------------------------------------------------------- */

/* 2-D weight w is about to multiply x's T rows. */
static inline void st_act(const strata_session *s, const st_tensor *w, const float *x, int64_t T) {
    if (s->act_fn && w->data && w->name) s->act_fn(w->name, -1, x, w->ne[0], T, NULL, s->act_data);
}

/* The FFN step st_moe_ffn just ran on s->moe_ws with x's rows and n_expert experts of table:
 * gate's and up's input rows (the tokens of each expert's pairs) and down's (the pairs' hidden
 * rows). per_expert: the tensors are 3-D expert tensors (the expert ids are reported), else 2-D. */
static void st_act_ffn(const strata_session *s, const st_expert *table, int32_t n_expert,
                       const float *x, int per_expert) {
    const int64_t *offs;
    const int32_t *tok;
    const float *h;
    int64_t n_ff;
    if (!s->act_fn || st_moe_ffn_groups(s->moe_ws, &offs, &tok, &h, &n_ff) == 0) return;
    for (int32_t e = 0; e < n_expert; e++) {
        const int64_t n = offs[e + 1] - offs[e];
        const st_expert *x_e = &table[e];
        if (n == 0 || !x_e->gate.name || !x_e->down.name) continue;
        const int32_t id = per_expert ? e : -1;
        s->act_fn(x_e->gate.name, id, x, x_e->gate.ne[0], n, tok + offs[e], s->act_data);
        if (x_e->up.name) s->act_fn(x_e->up.name, id, x, x_e->up.ne[0], n, tok + offs[e], s->act_data);
        s->act_fn(x_e->down.name, id, h + offs[e] * n_ff, n_ff, n, NULL, s->act_data);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Blocks
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const strata_model *m;
    const strata_token *tokens;
    float *out;
} st_embed_job;

static void st_embed_rows(void *ctx, int64_t b, int64_t e, int thread_id) {
    (void)thread_id;
    const st_embed_job *j = (const st_embed_job *)ctx;
    const strata_model *m = j->m;
    const st_tensor *te = &m->tok_embd;
    const int64_t E = m->hp.n_embd;
    const st_dequant_fn deq = st_dequant_get(te->type);
    for (int64_t t = b; t < e; t++) {
        deq(st_tensor_row(te, 0, j->tokens[t]), j->out + t * E, E);
        if (m->arch->granite_scales && m->hp.embedding_scale != 1.0f)
            for (int64_t i = 0; i < E; i++) j->out[t * E + i] *= m->hp.embedding_scale;
    }
}

void st_embed_tokens(strata_session *s, const strata_token *tokens, int64_t T, float *out) {
    st_embed_job j = {s->model, tokens, out};
    /* prompt batches: rows over the session's threads, each row one thread's (the same values) */
    if (T >= 8) st_threadpool_run(s->tp, T, st_threadpool_chunk(s->tp, T, 1, 1), st_embed_rows, &j);
    else st_embed_rows(&j, 0, T, 0);
}

void st_cpu_attn_block(strata_session *s, const st_layer *L, const st_kv_layer *kv, int64_t T, int64_t pos0) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, hd = hp->head_dim, hdv = hp->head_dim_v;
    const int64_t nq = (int64_t)hp->n_head * hd, nk = (int64_t)hp->n_head_kv * hd;
    const int64_t nv = (int64_t)hp->n_head_kv * hdv;

    st_norm_rows(s->xn, s->x, &L->attn_norm, T, E, hp->norm_eps);
    if (s->act_fn) {
        st_act(s, &L->wq, s->xn, T);
        st_act(s, &L->wk, s->xn, T);
        st_act(s, &L->wv, s->xn, T);
    }
    st_mm mm[3] = {{&L->wq, s->q, nq}, {&L->wk, s->k, nk}, {&L->wv, s->v, nv}};
    st_matmul_multi(s->tp, mm, 3, s->xn, T, s->mm_ws);
    if (L->bq.data) st_add_bias(s->q, (const float *)L->bq.data, T, nq);
    if (L->bk.data) st_add_bias(s->k, (const float *)L->bk.data, T, nk);
    if (L->bv.data) st_add_bias(s->v, (const float *)L->bv.data, T, nv);
    st_prof_mark(s, STRATA_PHASE_QKV); /* (the q/k norms below count as attention: one loop) */

    for (int64_t t = 0; t < T; t++) {
        float *q = s->q + t * nq, *k = s->k + t * nk;
        switch (m->arch->qk_norm) {
        case ST_QKNORM_FULL: /* OLMoE: over the whole projection, before splitting into heads */
            st_rmsnorm(q, q, (const float *)L->q_norm.data, nq, hp->norm_eps);
            st_rmsnorm(k, k, (const float *)L->k_norm.data, nk, hp->norm_eps);
            break;
        case ST_QKNORM_HEAD: /* Qwen3: per head, shared (head_dim) weights (glm4moe: if present) */
            if (!L->q_norm.data) break;
            for (int64_t h = 0; h < hp->n_head; h++)
                st_rmsnorm(q + h * hd, q + h * hd, (const float *)L->q_norm.data, hd, hp->norm_eps);
            for (int64_t h = 0; h < hp->n_head_kv; h++)
                st_rmsnorm(k + h * hd, k + h * hd, (const float *)L->k_norm.data, hd, hp->norm_eps);
            break;
        case ST_QKNORM_NONE:
            break;
        }
        const float *cs = s->rope_cs + t * hp->n_rot;
        st_rope_apply(&s->rope, cs, q, hp->n_head, hd);
        st_rope_apply(&s->rope, cs, k, hp->n_head_kv, hd);
    }

    const int il = (int)(L - m->layers); /* (trunk or MTP layer) */
    const st_attn_shape sh = {
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
        .head_dim_v = hp->head_dim_v,
        .scale = hp->attention_scale != 0.0f && m->arch->granite_scales ? hp->attention_scale
                                                                         : 1.0f / sqrtf((float)hd),
        .window = st_layer_swa(hp, il) ? hp->n_swa : 0,
        .sinks = (const float *)L->attn_sinks.data};
    st_kv_store(kv, &sh, s->k, s->v, T, pos0);
    st_attention(s->tp, kv, &sh, s->q, T, pos0, s->att, s->att_scratch);
    st_prof_mark(s, STRATA_PHASE_ATTN);

    st_act(s, &L->wo, s->att, T);
    st_matmul(s->tp, &L->wo, s->att, T, s->proj, s->mm_ws);
    if (L->bo.data) st_add_bias(s->proj, (const float *)L->bo.data, T, E);
    st_residual(m, s->x, s->proj, T * E);
    st_prof_mark(s, STRATA_PHASE_ATTN_OUT);
}

/* Copies n values at offset off of each of T rows of stride floats into dst [T][n] (gather) or
 * back (scatter): one head's slice of a [T][heads * width] buffer. */
static void st_head_gather(float *dst, const float *src, int64_t T, int64_t stride, int64_t off, int64_t n) {
    for (int64_t t = 0; t < T; t++) memcpy(dst + t * n, src + t * stride + off, sizeof(float) * (size_t)n);
}

static void st_head_scatter(float *dst, const float *src, int64_t T, int64_t stride, int64_t off, int64_t n) {
    for (int64_t t = 0; t < T; t++) memcpy(dst + t * stride + off, src + t * n, sizeof(float) * (size_t)n);
}

/* deepseek2's multi-head latent attention in the absorbed form (llama.cpp's MLA graph): the
 * cache row of a token is [rmsnorm(latent) (R), roped key part (nr)]; each head's query becomes
 * [wk_b[h] . q_nope (R), roped q part (nr)], attention over the rows is one KV head of width
 * R + nr whose values are the rows' latents, and wv_b[h] turns a head's latent output into its
 * values before the output projection. */
void st_cpu_mla_block(strata_session *s, const st_layer *L, const st_kv_layer *kv, int64_t T, int64_t pos0) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, H = hp->n_head, R = hp->n_lora_kv, nr = hp->n_rot;
    const int64_t hk = hp->head_dim_mla, nope = hk - nr, hv = hp->head_dim_v_mla, D = R + nr;

    st_norm_rows(s->xn, s->x, &L->attn_norm, T, E, hp->norm_eps);
    if (L->wq_a.data) { /* q through its low rank, normalized between */
        st_mm mm[2] = {{&L->wq_a, s->att, hp->n_lora_q}, {&L->wkv_a, s->k, D}};
        st_matmul_multi(s->tp, mm, 2, s->xn, T, s->mm_ws);
        st_norm_rows(s->att, s->att, &L->q_a_norm, T, hp->n_lora_q, hp->norm_eps);
        st_matmul(s->tp, &L->wq_b, s->att, T, s->mla_q, s->mm_ws);
    } else {
        st_mm mm[2] = {{&L->wq, s->mla_q, H * hk}, {&L->wkv_a, s->k, D}};
        st_matmul_multi(s->tp, mm, 2, s->xn, T, s->mm_ws);
    }
    st_prof_mark(s, STRATA_PHASE_QKV);
    for (int64_t t = 0; t < T; t++) {
        float *row = s->k + t * D;
        const float *cs = s->rope_cs + t * nr;
        st_rmsnorm(row, row, (const float *)L->kv_a_norm.data, R, hp->norm_eps);
        st_rope_apply(&s->rope, cs, row + R, 1, nr);
        st_rope_apply(&s->rope, cs, s->mla_q + t * H * hk + nope, H, hk);
    }
    for (int64_t h = 0; h < H; h++) { /* absorbed queries: [wk_b[h] . q_nope, q_pe] */
        const st_tensor wk = st_tensor_expert(&L->wk_b, h);
        st_head_gather(s->mla_in, s->mla_q, T, H * hk, h * hk, nope);
        st_matmul(s->tp, &wk, s->mla_in, T, s->mla_out, s->mm_ws);
        st_head_scatter(s->q, s->mla_out, T, H * D, h * D, R);
        for (int64_t t = 0; t < T; t++)
            memcpy(s->q + t * H * D + h * D + R, s->mla_q + t * H * hk + h * hk + nope, sizeof(float) * (size_t)nr);
    }
    const st_attn_shape sh = {.n_head = (int32_t)H, .n_head_kv = 1, .head_dim = (int32_t)D,
                              .head_dim_v = (int32_t)R, .scale = hp->kq_scale, .v_in_k = 1};
    st_kv_store(kv, &sh, s->k, NULL, T, pos0);
    st_attention(s->tp, kv, &sh, s->q, T, pos0, s->att, s->att_scratch);
    st_prof_mark(s, STRATA_PHASE_ATTN);

    for (int64_t h = 0; h < H; h++) { /* each head's latent output to its values */
        const st_tensor wv = st_tensor_expert(&L->wv_b, h);
        st_head_gather(s->mla_in, s->att, T, H * R, h * R, R);
        st_matmul(s->tp, &wv, s->mla_in, T, s->mla_out, s->mm_ws);
        st_head_scatter(s->mla_v, s->mla_out, T, H * hv, h * hv, hv);
    }
    st_matmul(s->tp, &L->wo, s->mla_v, T, s->proj, s->mm_ws);
    st_residual(m, s->x, s->proj, T * E);
    st_prof_mark(s, STRATA_PHASE_ATTN_OUT);
}

/* The top-k routing of T rows of router logits as the model's file describes it (ops.h). */
void st_cpu_route_rows(const strata_model *m, const st_layer *L, const float *logits, int64_t T,
                       int32_t *ids, float *wts) {
    const st_hparams *hp = &m->hp;
    const st_route_cfg c = {hp->n_expert, hp->n_expert_used, hp->gating, hp->expert_weights_norm,
                            hp->expert_weights_scale, hp->n_expert_groups, hp->n_group_used,
                            (const float *)L->exp_probs_b.data};
    for (int64_t t = 0; t < T; t++)
        st_route_scored(&c, logits + t * hp->n_expert, ids + t * hp->n_expert_used,
                        wts + t * hp->n_expert_used);
}

/* Profile mode: how well layer il+1's experts are predicted at layer il's router, by applying
 * layer il+1's FFN norm and router to the residual stream as it is now (what a prefetcher can do
 * that early). The prediction is scored when layer il+1 routes; it is not timed as a phase. */
static void st_predict_next(strata_session *s, int il, int64_t T) {
    const st_hparams *hp = &s->model->hp;
    if (il + 1 >= hp->n_layer) { s->pred_layer = -1; return; }
    const st_layer *N = &s->model->layers[il + 1];
    const int64_t E = hp->n_embd;
    const double t0 = st_prof_clock();
    st_norm_rows(s->pred_xn, s->x, &N->ffn_norm, T, E, hp->norm_eps);
    st_matmul(s->tp, &N->ffn_gate_inp, s->pred_xn, T, s->pred_logits, s->mm_ws);
    if (N->ffn_gate_inp_b.data) st_add_bias(s->pred_logits, (const float *)N->ffn_gate_inp_b.data, T, hp->n_expert);
    st_cpu_route_rows(s->model, N, s->pred_logits, T, s->pred_ids, s->pred_wts);
    s->pred_layer = il + 1;
    s->prof_t += st_prof_clock() - t0; /* not charged to any phase */
}

static void st_score_prediction(strata_session *s, int il, int64_t T, int32_t K) {
    if (s->pred_layer != il) return;
    for (int64_t t = 0; t < T; t++)
        for (int32_t a = 0; a < K; a++)
            for (int32_t b = 0; b < K; b++) s->pred_hits += s->pred_ids[t * K + a] == s->ids[t * K + b];
    s->pred_slots += T * K;
}

/* The trunk's steps between a layer's routing and its experts: the route trace, profile mode's
 * scoring and prediction, the tail skip, DEGRADE_ZERO and the RAM tier. The table of experts to
 * compute (the session's, or the RAM tier's slots), NULL when nothing is computed (a disk read
 * failed: the error in s->fwd_error, s->proj zeroed). */
static const st_expert *st_moe_trunk(strata_session *s, int il, int64_t T) {
    const st_hparams *hp = &s->model->hp;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    if (s->profile) st_score_prediction(s, il, T, K);
    if (s->route_fn) /* the routing as the router chose it, and what the previous layer predicted */
        s->route_fn(il, s->n_past, T, K, s->ids, s->wts, s->pred_layer == il ? s->pred_ids : NULL,
                    s->route_data);
    if (s->tail_skip > 0.0f) s->tail_skipped += st_route_tail_skip(T, K, s->ids, s->wts, s->tail_skip);
    /* DEGRADE_ZERO: with a RAM budget, an expert that is neither resident nor in a completed
     * load has missed (a light one is dropped instead of read from disk); without one every
     * routed expert is resident and only the evaluation mode drops anything */
    if (s->self_draft && s->ram) { /* a self-draft step: the RAM-resident experts only */
        st_ram_tier_missed(s->ram, il, T, s->ids, K, s->missed);
        st_degrade_drop_missed(T * K, s->ids, s->missed);
    } else if (s->degrade.enabled) {
        const uint8_t *missed = NULL;
        if (s->ram && !s->degrade.eval) {
            st_ram_tier_missed(s->ram, il, T, s->ids, K, s->missed);
            missed = s->missed;
        }
        st_degrade_apply(&s->degrade, !s->gen_phase, T, K, s->ids, s->wts, missed, &s->dstats, il);
    }
    st_prof_mark(s, STRATA_PHASE_ROUTER);
    s->slots_cpu[il] += T * K; /* a CPU session computes every routed slot itself */
    const st_expert *table = s->experts + (size_t)il * (size_t)X;
    if (s->ram) { /* RAM budget: the routed experts come from RAM slots, filled from disk */
        strata_status st = s->fwd_error ? s->fwd_error : st_ram_tier_table(s->ram, il, T, s->ids, K, &table);
        if (st != STRATA_OK) { /* the decode call returns the error; nothing is computed */
            if (s->fwd_error == STRATA_OK) s->fwd_error = st;
            st_ram_tier_release(s->ram);
            memset(s->proj, 0, sizeof(float) * (size_t)(T * hp->n_embd));
            return NULL;
        }
    }
    if (s->profile || s->plan.pipe || s->route_fn) { /* predict the next layer's experts (a route trace
                                                      * carries them); the pipe starts reading them */
        st_predict_next(s, il, T);
        if (s->plan.pipe && s->pred_layer == il + 1) st_ram_tier_prefetch(s->ram, il + 1, T, s->pred_ids, K);
    }
    return table;
}

/* The routed-expert step of layer L: router logits, softmax + top-k per token, grouped experts
 * into s->proj. A trunk layer (il < n_layer) takes the trunk's steps (st_moe_trunk) between
 * routing and experts; an MTP layer computes its routed experts from `experts` as routed. */
static void st_moe_block(strata_session *s, const st_layer *L, int il, const st_expert *experts, int64_t T) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    const int trunk = il < hp->n_layer;
    st_act(s, &L->ffn_gate_inp, s->xn, T);
    st_matmul(s->tp, &L->ffn_gate_inp, s->xn, T, s->router, s->mm_ws);
    if (L->ffn_gate_inp_b.data) st_add_bias(s->router, (const float *)L->ffn_gate_inp_b.data, T, X);
    st_cpu_route_rows(m, L, s->router, T, s->ids, s->wts);
    if (trunk && s->replay) st_replay_rows(s->replay, il, s->n_past, T, s->ids, s->wts); /* (benchmarks) */
    const st_expert *table = trunk ? st_moe_trunk(s, il, T) : experts;
    if (!table) return;
    if (!trunk) st_prof_mark(s, STRATA_PHASE_ROUTER);
    st_moe_ffn(s->tp, table, X, s->xn, T, s->ids, s->wts, K, s->proj, s->moe_ws);
    st_act_ffn(s, table, X, s->xn, 1);
    if (trunk && s->ram) st_ram_tier_release(s->ram);
    st_prof_mark(s, STRATA_PHASE_EXPERTS);
}

void st_cpu_ffn_block(strata_session *s, const st_layer *L, int il, const st_cpu_ffn_w *w, int64_t T) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    st_norm_rows(s->xn, s->x, &L->ffn_norm, T, E, hp->norm_eps);
    if (!L->ffn_gate_inp.data) { /* dense models, deepseek2's leading dense layers */
        st_prof_mark(s, STRATA_PHASE_ROUTER);
        st_moe_ffn(s->tp, w->dense, 1, s->xn, T, s->zeros, s->ones, 1, s->proj, s->moe_ws);
        st_act_ffn(s, w->dense, 1, s->xn, 0);
        st_prof_mark(s, STRATA_PHASE_EXPERTS);
    } else {
        st_moe_block(s, L, il, w->experts, T);
        if (w->shexp && w->shexp->gate.data) {
            const float *g = s->ones;
            if (L->ffn_gate_inp_shexp.data) { /* qwen2moe: sigmoid(gate . x) */
                st_act(s, &L->ffn_gate_inp_shexp, s->xn, T);
                st_matmul(s->tp, &L->ffn_gate_inp_shexp, s->xn, T, s->shgate, s->mm_ws);
                for (int64_t t = 0; t < T; t++) s->shgate[t] = st_sigmoid(s->shgate[t]);
                g = s->shgate;
            }
            st_moe_ffn(s->tp, w->shexp, 1, s->xn, T, s->zeros, g, 1, s->proj2, s->moe_ws);
            st_act_ffn(s, w->shexp, 1, s->xn, 0);
            for (int64_t i = 0; i < T * E; i++) s->proj[i] += s->proj2[i];
        }
    }
    st_residual(m, s->x, s->proj, T * E);
    st_prof_mark(s, STRATA_PHASE_SHARED);
}

/* The FFN of trunk layer il with the session's expert tables. */
static void st_ffn_block(strata_session *s, int il, int64_t T) {
    const size_t X = (size_t)s->model->hp.n_expert;
    const st_cpu_ffn_w w = {s->dense ? s->dense + il : NULL, s->experts ? s->experts + (size_t)il * X : NULL,
                            s->shexp ? s->shexp + il : NULL};
    st_cpu_ffn_block(s, &s->model->layers[il], il, &w, T);
}

static void st_output(strata_session *s, int64_t first, int64_t T, float *logits) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    st_norm_rows(s->xn, s->x + first * E, &m->output_norm, T, E, hp->norm_eps);
    st_act(s, &m->output, s->xn, T);
    st_mm mm = {&m->output, logits, V};
    st_matmul_multi(s->tp, &mm, 1, s->xn, T, s->mm_ws);
    if (m->arch->granite_scales && hp->logit_scale != 1.0f && hp->logit_scale != 0.0f)
        for (int64_t i = 0; i < T * V; i++) logits[i] /= hp->logit_scale;
}

/* ---------------------------------------------------------------------------------------------
 * Batch
 * ------------------------------------------------------------------------------------------- */

void st_forward_batch(strata_session *s, const strata_token *tokens, int64_t T, float *logits, int all) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    const int64_t pos0 = s->n_past;
    st_prof_start(s);
    st_embed_tokens(s, tokens, T, s->x);
    for (int64_t t = 0; t < T; t++) st_rope_cache(&s->rope, pos0 + t, s->rope_cs + t * hp->n_rot);
    st_prof_mark(s, STRATA_PHASE_EMBED);
    for (int il = 0; il < hp->n_layer; il++) {
        if (m->arch->mla) st_cpu_mla_block(s, &m->layers[il], &s->kv.layers[il], T, pos0);
        else if (st_layer_recurrent(hp, il)) st_cpu_linear_attn_block(s, il, T, pos0);
        else if (m->arch->id == ST_ARCH_QWEN3NEXT) st_cpu_gated_attn_layer(s, il, T, pos0);
        else st_cpu_attn_block(s, &m->layers[il], &s->kv.layers[il], T, pos0);
        st_ffn_block(s, il, T);
    }
    if (s->mtp_h) /* an MTP drafter reads every position's final-normed hidden state */
        st_norm_rows(s->mtp_h + pos0 * hp->n_embd, s->x, &m->output_norm, T, hp->n_embd, hp->norm_eps);
    if (logits) {
        if (all) st_output(s, 0, T, logits);
        else st_output(s, T - 1, 1, logits);
        st_prof_mark(s, STRATA_PHASE_OUTPUT);
    }
    s->n_past += (int32_t)T;
}
