/* session.c - the public session API (strata_session_*): create/free (thread pool, expert weight
 * tables, scratch sized for n_batch, the RAM tier, then the backend's state: backend.h), reset and
 * truncate, decode (input checks, batches for the backend's forward pass, progress reports) and
 * its greedy / top-k forms. The parameters' defaults and checks are session_params.c's, the
 * statistics session_stats.c's, phase timing profile.c's. */
#include "session.h"
#include "ram_tier.h"
#include "replay.h"

#include <inttypes.h>
#include <stdlib.h>

/* ---------------------------------------------------------------------------------------------
 * Create / free
 * ------------------------------------------------------------------------------------------- */

static void *st_alloc(size_t n, int *fail) {
    void *p = malloc(n ? n : 1);
    if (!p) *fail = 1;
    return p;
}

static size_t st_max_sz(size_t a, size_t b) { return a > b ? a : b; }

strata_status st_rs_window_check(const strata_session *s, int win_open, int32_t win_pos, int32_t win_len,
                                 int32_t n_keep) {
    if (win_open && n_keep >= win_pos && n_keep <= win_pos + win_len) return STRATA_OK;
    return st_error(STRATA_ERR_UNSUPPORTED, "strata_session_truncate: qwen3next's recurrent "
                    "(DeltaNet) state rolls back only inside the last decode window (positions "
                    "%d..%d, at most %d); n_keep %d of n_past %d is outside it: reset the "
                    "session and decode again", win_open ? (int)win_pos : (int)s->n_past,
                    win_open ? (int)(win_pos + win_len) : (int)s->n_past, ST_RS_WINDOW, (int)n_keep,
                    (int)s->n_past);
}

strata_status st_session_pred_buffers(strata_session *s) {
    if (s->model->hp.n_expert <= 0 || (s->pred_xn && s->pred_logits && s->pred_wts && s->pred_ids))
        return STRATA_OK;
    const st_scratch_dims d = st_session_dims(s);
    int fail = 0;
    if (!s->pred_xn) s->pred_xn = st_alloc(sizeof(float) * d.T * d.E, &fail);
    if (!s->pred_logits) s->pred_logits = st_alloc(sizeof(float) * d.T * d.X, &fail);
    if (!s->pred_wts) s->pred_wts = st_alloc(sizeof(float) * d.T * d.K, &fail);
    if (!s->pred_ids) s->pred_ids = st_alloc(sizeof(int32_t) * d.T * d.K, &fail);
    return fail ? st_error(STRATA_ERR_NOMEM, "session: out of memory for the next-layer prediction's buffers")
                : STRATA_OK;
}

/* gpt-oss: expert e's bias rows and its clamped SwiGLU (other architectures: none, SwiGLU). */
static void st_expert_biases(st_expert *x, const st_layer *L, const st_hparams *hp, int32_t e) {
    x->act = hp->expert_act_oai ? ST_ACT_SWIGLU_OAI : ST_ACT_SWIGLU;
    if (L->ffn_gate_exps_b.data) x->b_gate = (const float *)L->ffn_gate_exps_b.data + (size_t)e * (size_t)hp->n_ff_exp;
    if (L->ffn_up_exps_b.data) x->b_up = (const float *)L->ffn_up_exps_b.data + (size_t)e * (size_t)hp->n_ff_exp;
    if (L->ffn_down_exps_b.data) x->b_down = (const float *)L->ffn_down_exps_b.data + (size_t)e * (size_t)hp->n_embd;
}

/* The FFN weight tables: one st_expert per routed expert (zero-copy slices of the merged
 * tensors), the dense FFN and the shared expert as single-expert tables. */
static strata_status st_build_tables(strata_session *s) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    const size_t nl = (size_t)hp->n_layer;
    if (hp->n_expert > 0) {
        s->experts = calloc(nl * (size_t)hp->n_expert, sizeof *s->experts);
        if (!s->experts) return st_error(STRATA_ERR_NOMEM, "session: out of memory for expert tables");
        for (size_t il = 0; il < nl; il++) {
            const st_layer *L = &m->layers[il];
            if (!L->ffn_gate_exps.data) continue; /* a leading dense layer: its entries stay empty */
            for (int32_t e = 0; e < hp->n_expert; e++) {
                st_expert *x = &s->experts[il * (size_t)hp->n_expert + (size_t)e];
                x->gate = st_tensor_expert(&L->ffn_gate_exps, e);
                x->up = st_tensor_expert(&L->ffn_up_exps, e);
                x->down = st_tensor_expert(&L->ffn_down_exps, e);
                st_expert_biases(x, L, hp, e);
            }
        }
        if (hp->n_ff_shexp > 0) {
            s->shexp = calloc(nl, sizeof *s->shexp);
            if (!s->shexp) return st_error(STRATA_ERR_NOMEM, "session: out of memory for expert tables");
            for (size_t il = 0; il < nl; il++) {
                const st_layer *L = &m->layers[il];
                s->shexp[il].gate = L->ffn_gate_shexp;
                s->shexp[il].up = L->ffn_up_shexp;
                s->shexp[il].down = L->ffn_down_shexp;
            }
        }
    }
    if (hp->n_expert == 0 || hp->n_layer_dense_lead > 0) { /* dense models, leading dense layers */
        s->dense = calloc(nl, sizeof *s->dense);
        if (!s->dense) return st_error(STRATA_ERR_NOMEM, "session: out of memory for FFN tables");
        for (size_t il = 0; il < nl; il++) {
            const st_layer *L = &m->layers[il];
            s->dense[il].gate = L->ffn_gate;
            s->dense[il].up = L->ffn_up;
            s->dense[il].down = L->ffn_down;
        }
    }
    return STRATA_OK;
}

/* The RAM tier of a session with a RAM budget (its slots page-locked for a CUDA session); the
 * batch shrinks to what the slots hold. */
static strata_status st_session_ram_tier(strata_session *s) {
    if (s->plan.ram_budget <= 0) return STRATA_OK;
    const st_ram_tier_params rp = {s->model, s->experts, s->plan.ram_budget, s->plan.pipe, s->plan.gpu};
    return st_ram_tier_create(&rp, &s->ram, &s->n_batch);
}

static strata_status st_alloc_scratch(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    const st_scratch_dims d = st_session_dims(s);
    const size_t T = d.T, E = d.E, nq = d.nq, nk = d.nk, nv = d.nv, no = d.no, K = d.K;
    int fail = 0;
    s->x = st_alloc(sizeof(float) * T * E, &fail);
    s->xn = st_alloc(sizeof(float) * T * E, &fail);
    s->q = st_alloc(sizeof(float) * T * nq, &fail);
    s->k = st_alloc(sizeof(float) * T * nk, &fail);
    s->v = st_alloc(sizeof(float) * T * nv, &fail);
    s->att = st_alloc(sizeof(float) * T * no, &fail);
    s->proj = st_alloc(sizeof(float) * T * E, &fail);
    s->proj2 = st_alloc(sizeof(float) * T * E, &fail);
    s->router = st_alloc(sizeof(float) * T * d.X, &fail);
    s->ids = st_alloc(sizeof(int32_t) * T * K, &fail);
    s->wts = st_alloc(sizeof(float) * T * K, &fail);
    s->zeros = st_alloc(sizeof(int32_t) * T, &fail);
    s->ones = st_alloc(sizeof(float) * T, &fail);
    s->shgate = st_alloc(sizeof(float) * T, &fail);
    s->rope_cs = st_alloc(sizeof(float) * T * (size_t)(hp->n_rot > 0 ? hp->n_rot : 1), &fail);
    s->att_scratch = st_alloc(sizeof(float) * (size_t)s->n_threads * (size_t)s->n_ctx, &fail);
    if (hp->n_lora_kv > 0) { /* latent attention */
        const size_t H = (size_t)hp->n_head, R = (size_t)hp->n_lora_kv, hv = (size_t)hp->head_dim_v_mla;
        const size_t nope = (size_t)(hp->head_dim_mla - hp->n_rot);
        s->mla_q = st_alloc(sizeof(float) * T * H * (size_t)hp->head_dim_mla, &fail);
        s->mla_in = st_alloc(sizeof(float) * T * st_max_sz(nope, R), &fail);
        s->mla_out = st_alloc(sizeof(float) * T * st_max_sz(R, hv), &fail);
        s->mla_v = st_alloc(sizeof(float) * T * H * hv, &fail);
    }
    size_t mm_n = st_max_sz(st_max_sz(E, no), (size_t)hp->n_lora_q); /* MLA's q_b input too */
    if (s->model->n_mtp > 0) mm_n = st_max_sz(mm_n, 2 * E);          /* an MTP layer's eh_proj */
    mm_n = st_max_sz(mm_n, (size_t)hp->ssm_d_inner);                  /* qwen3next's ssm_out */
    s->mm_ws = st_alloc(st_matmul_wsize((int64_t)mm_n, (int64_t)T), &fail);
    s->pred_layer = -1;
    if (s->ram || s->plan.expert_cache != 0) s->missed = st_alloc(T * K, &fail);
    /* profile mode's next-layer prediction (a route trace and the CPU pipe ask for them later) */
    if (s->profile && st_session_pred_buffers(s) != STRATA_OK) fail = 1;
    size_t moe = 0;
    if (hp->n_expert > 0)
        moe = st_moe_wsize((int64_t)T, hp->n_expert_used, hp->n_expert, hp->n_embd, hp->n_ff_exp);
    if (hp->n_ff_shexp > 0)
        moe = st_max_sz(moe, st_moe_wsize((int64_t)T, 1, 1, hp->n_embd, hp->n_ff_shexp));
    if (hp->n_expert == 0 || hp->n_layer_dense_lead > 0)
        moe = st_max_sz(moe, st_moe_wsize((int64_t)T, 1, 1, hp->n_embd, hp->n_ff));
    s->moe_ws = st_alloc(moe, &fail);
    if (fail)
        return st_error(STRATA_ERR_NOMEM, "session: out of memory for scratch buffers (n_batch %d)",
                        s->n_batch);
    for (size_t t = 0; t < T; t++) {
        s->zeros[t] = 0;
        s->ones[t] = 1.0f;
    }
    return STRATA_OK;
}

void strata_session_free(strata_session *s) {
    if (!s) return;
    if (s->be) s->be->free(s);
    st_ram_tier_free(s->ram);
    st_degrade_stats_free(&s->dstats);
    st_replay_free(s->replay);
    free(s->slots_gpu);
    free(s->slots_cpu);
    st_threadpool_free(s->tp);
    free(s->experts); free(s->dense); free(s->shexp);
    free(s->x); free(s->xn); free(s->q); free(s->k); free(s->v); free(s->att);
    free(s->proj); free(s->proj2); free(s->router); free(s->ids); free(s->wts);
    free(s->mla_q); free(s->mla_in); free(s->mla_out); free(s->mla_v);
    free(s->zeros); free(s->ones); free(s->shgate); free(s->rope_cs); free(s->att_scratch);
    free(s->mm_ws); free(s->moe_ws);
    free(s->pred_xn); free(s->pred_logits); free(s->pred_wts); free(s->pred_ids); free(s->missed);
    free(s->spec_logits);
    st_model_release(s->model);
    free(s);
}

strata_status strata_session_create(const strata_model *model, const strata_session_params *params,
                                    strata_session **out) {
    if (!out) return st_error(STRATA_ERR_INVALID_ARG, "strata_session_create: out is NULL");
    *out = NULL;
    strata_session_params p = params ? *params : strata_session_default_params();
    strata_status st = st_session_params_check(model, &p);
    int32_t fit = -1; /* gpu_mem alone: the static split that fits */
    if (st == STRATA_OK) st = st_session_fit_gpu_mem(model, &p, &fit);
    if (st != STRATA_OK) return st;
    const st_hparams *hp = &model->hp;

    strata_session *s = calloc(1, sizeof *s);
    if (!s) return st_error(STRATA_ERR_NOMEM, "session: out of memory");
    s->model = model;
    st_model_retain(model); /* strata_session_free drops it */
    s->backend = p.backend;
    s->kv_type = p.kv_type;
    s->degrade.enabled = p.degrade_zero;
    s->degrade.tau = p.degrade_tau;
    s->degrade.eval = p.degrade_eval;
    s->tail_skip = p.route_tail_skip;
    s->profile = p.profile != 0;
    s->cuda_graphs = p.cuda.graphs <= 0 ? 0 : p.cuda.graphs >= 2 ? 2 : 1;
    s->cuda_pdl = p.cuda.pdl <= 0 ? 0 : p.cuda.pdl >= 2 ? 2 : 1;
    s->attn_tc = p.cuda.attn_tc;
    s->q8_tiles = p.cuda.q8_tiles;
    s->iq_stage_tables = p.cuda.iq_stage_tables;
    s->q8_sm60 = p.cuda.q8_sm60;
    s->q8_sm60_bps = p.cuda.q8_sm60_bps > 0 ? p.cuda.q8_sm60_bps : 4;
    st_plan_resolve(&p, &s->plan);
    s->split = p.split;
    s->fit_cpu_layers = fit;
    s->progress = p.progress;
    s->progress_data = p.progress_data;
    s->slots_gpu = calloc((size_t)hp->n_layer, sizeof *s->slots_gpu);
    s->slots_cpu = calloc((size_t)hp->n_layer, sizeof *s->slots_cpu);
    if (!s->slots_gpu || !s->slots_cpu || st_degrade_stats_init(&s->dstats, hp->n_layer) != 0) {
        strata_session_free(s);
        return st_error(STRATA_ERR_NOMEM, "session: out of memory");
    }
    s->n_ctx = p.n_ctx > 0 ? p.n_ctx : hp->n_ctx_train;
    s->n_batch = p.n_batch > 0 ? p.n_batch : 512;
    if (s->n_batch > s->n_ctx) s->n_batch = s->n_ctx;
    s->n_threads = p.n_threads > 0 ? p.n_threads : model->n_threads > 0 ? model->n_threads : 1;
    s->rope = st_rope_params_from(hp, model->arch->rope);

    /* the common state, then the backend's (its KV cache: in RAM or on the device) */
    if ((st = st_threadpool_create(s->n_threads, &s->tp)) != STRATA_OK ||
        (p.cpu_pin && (s->threads_pinned = st_threadpool_pin(s->tp)) < 0) ||
        (st = st_build_tables(s)) != STRATA_OK ||
        (st = st_session_ram_tier(s)) != STRATA_OK ||
        (st = st_alloc_scratch(s)) != STRATA_OK ||
        (st = (s->be = st_backend_of(s->backend))->create(s)) != STRATA_OK) {
        strata_session_free(s);
        return st;
    }
    *out = s;
    return STRATA_OK;
}

strata_status strata_session_set_route_trace(strata_session *s, strata_route_fn fn, void *user_data) {
    if (!s) return st_error(STRATA_ERR_INVALID_ARG, "strata_session_set_route_trace: session is NULL");
    if (fn && s->backend != STRATA_BACKEND_CPU)
        return st_error(STRATA_ERR_UNSUPPORTED, "route traces run on CPU sessions (the routing is the "
                        "model's: a CPU session's trace serves every backend)");
    if (fn) { /* the next-layer prediction the trace carries */
        const strata_status st = st_session_pred_buffers(s);
        if (st != STRATA_OK) return st;
    }
    s->route_fn = fn;
    s->route_data = user_data;
    return STRATA_OK;
}

strata_status strata_session_set_route_replay(strata_session *s, const char *path) {
    if (!s) return st_error(STRATA_ERR_INVALID_ARG, "strata_session_set_route_replay: session is NULL");
    const st_hparams *hp = &s->model->hp;
    st_replay *r = NULL;
    if (path) {
        if (hp->n_expert == 0)
            return st_error(STRATA_ERR_UNSUPPORTED, "route replay: the model routes no experts");
        const strata_status st = st_replay_load(path, hp->n_expert, hp->n_expert_used, &r);
        if (st != STRATA_OK) return st;
    }
    st_replay_free(s->replay);
    s->replay = r;
    return STRATA_OK;
}

strata_status strata_session_set_act_trace(strata_session *s, strata_act_fn fn, void *user_data) {
    if (!s) return st_error(STRATA_ERR_INVALID_ARG, "strata_session_set_act_trace: session is NULL");
    if (fn && s->backend != STRATA_BACKEND_CPU)
        return st_error(STRATA_ERR_UNSUPPORTED, "activation traces run on CPU sessions");
    s->act_fn = fn;
    s->act_data = user_data;
    return STRATA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * State
 * ------------------------------------------------------------------------------------------- */

void strata_session_reset(strata_session *s) {
    if (s) s->n_past = 0;
}

strata_status strata_session_truncate(strata_session *s, int32_t n_keep) {
    if (!s) return st_error(STRATA_ERR_INVALID_ARG, "strata_session_truncate: session is NULL");
    if (n_keep < 0 || n_keep > s->n_past)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_session_truncate: n_keep %d outside [0, n_past %d]",
                        (int)n_keep, (int)s->n_past);
    if (s->be->truncate) { /* recurrent state cannot be cut like the cache: it is restored */
        const strata_status st = s->be->truncate(s, n_keep);
        if (st != STRATA_OK) return st;
    }
    s->n_past = n_keep; /* later positions are overwritten before attention reads them */
    return STRATA_OK;
}

int32_t strata_session_n_past(const strata_session *s) { return s ? s->n_past : 0; }
int32_t strata_session_n_ctx(const strata_session *s) { return s ? s->n_ctx : 0; }

/* ---------------------------------------------------------------------------------------------
 * Decode
 * ------------------------------------------------------------------------------------------- */

strata_status strata_session_decode_gen(strata_session *s, const strata_token *tokens, int64_t n,
                                        float *logits, int all_logits) {
    if (!s) return st_error(STRATA_ERR_INVALID_ARG, "strata_session_decode_gen: session is NULL");
    /* drops are allowed in decode steps and windows of at most ST_DEGRADE_MAX_ROWS tokens: the
     * call's length decides, not the batches n_batch cuts it into */
    s->gen_phase = n <= ST_DEGRADE_MAX_ROWS;
    strata_status st = strata_session_decode(s, tokens, n, logits, all_logits);
    s->gen_phase = 0;
    return st;
}

strata_status strata_session_decode_greedy(strata_session *s, const strata_token *tokens, int64_t n,
                                           strata_token *next) {
    if (!s || !next)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_session_decode_greedy: %s is NULL",
                        !s ? "session" : "next");
    if (n < 1) return st_error(STRATA_ERR_INVALID_ARG, "strata_session_decode_greedy: n %" PRId64 " < 1", n);
    s->argmax_out = next; /* the backend computes it from the call's last row */
    strata_status st = strata_session_decode_gen(s, tokens, n, NULL, 0);
    s->argmax_out = NULL;
    s->want_argmax = 0;
    return st;
}

strata_status strata_session_decode_topk(strata_session *s, const strata_token *tokens, int64_t n, int32_t k,
                                         strata_token *ids, float *logits) {
    if (!s || !ids || !logits)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_session_decode_topk: NULL argument");
    const int32_t V = s->model->hp.n_vocab;
    if (n < 1 || k < 1 || k > V || k > STRATA_TOPK_MAX)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_session_decode_topk: n %" PRId64 ", k %d (1 <= k "
                        "<= min(n_vocab %d, %d))", n, (int)k, (int)V, STRATA_TOPK_MAX);
    s->topk_k = k; /* the backend selects them from the call's last row */
    s->topk_ids = ids;
    s->topk_vals = logits;
    strata_status st = strata_session_decode_gen(s, tokens, n, NULL, 0);
    s->topk_k = 0;
    s->want_topk = 0;
    return st;
}

strata_status strata_session_decode(strata_session *s, const strata_token *tokens, int64_t n,
                                    float *logits, int all_logits) {
    if (!s) return st_error(STRATA_ERR_INVALID_ARG, "strata_session_decode: session is NULL");
    if (n < 0) return st_error(STRATA_ERR_INVALID_ARG, "strata_session_decode: n %" PRId64 " < 0", n);
    if (n == 0) return STRATA_OK;
    if (!tokens) return st_error(STRATA_ERR_INVALID_ARG, "strata_session_decode: tokens is NULL");
    if ((int64_t)s->n_past + n > (int64_t)s->n_ctx)
        return st_error(STRATA_ERR_RANGE, "context full: n_past %d + %" PRId64 " tokens > n_ctx %d",
                        (int)s->n_past, n, (int)s->n_ctx);
    const int32_t n_vocab = s->model->hp.n_vocab;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "strata_session_decode: token %" PRId64 " has id %d outside the vocabulary "
                            "[0, %d)", i, (int)tokens[i], (int)n_vocab);
    if (s->be->call_begin) {
        const strata_status st = s->be->call_begin(s, n);
        if (st != STRATA_OK) return st;
    }
    for (int64_t off = 0; off < n; off += s->n_batch) {
        const int64_t T = n - off < s->n_batch ? n - off : s->n_batch;
        float *lg = NULL;
        if (logits && all_logits) lg = logits + off * (int64_t)n_vocab;
        else if (logits && off + T == n) lg = logits;
        if (s->profile) { s->prof_calls++; s->prof_tokens += T; }
        s->want_argmax = s->argmax_out && off + T == n;
        s->want_topk = s->topk_k > 0 && off + T == n;
        const strata_status st = s->be->forward(s, tokens + off, T, lg, all_logits);
        if (st != STRATA_OK) return st;
        if (s->progress && n > s->n_batch) s->progress("prompt", off + T, n, s->progress_data);
    }
    return STRATA_OK;
}
