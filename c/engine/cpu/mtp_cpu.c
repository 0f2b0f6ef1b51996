/* mtp_cpu.c - the MTP drafter (strata_drafter_mtp_create): the model's nextn layer (deepseek2,
 * glm4moe, qwen3next) run as llama.cpp's draft-mtp runs it: on the session's device where its
 * backend puts the layer there (a CUDA session: mtp_gpu.c, which keeps the hidden states on the
 * device and computes the rows this file asks for), else on the CPU here, for a CPU session or a
 * CUDA session that copies its hidden states down into s->mtp_h. The MTP row of
 * position p joins the normalized embedding of token p with the normalized final hidden state of
 * position p-1 (zeros for p = 0), projects them (eh_proj), runs the layer (its attention over its
 * own cache of MTP rows: latent, plain, or qwen3next's gated full attention through the trunk's
 * own block on scratch of the drafter's, so no CPU recurrent state (s->rs) is needed; routed and
 * shared experts or a dense FFN) and gives the logits of token p+1 through the head norm and
 * head. Drafting: the row of the history's newest token gives the first draft; each further
 * draft takes the previous row's normalized output as its hidden state. The rows of real tokens
 * stay cached (a common prefix is not computed again); the chained rows are dropped. */
#include "mtp.h"
#include "forward_cpu.h"
#include "linear_attn_cpu.h"
#include "quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct st_mtp {
    strata_session *s;        /* the target, not owned (its common CPU scratch and thread pool,
                                 those of every backend's session, serve the layer) */
    int dev;                  /* the layer runs on the session's device (s->be->mtp_rows); the
                                 CPU fields below then stay empty but tok */
    char where[320];          /* where the layer runs, and why not on the device when it could */
    const st_layer *L;        /* the MTP layer (model->layers[n_layer]) */
    st_kv_layer kv;           /* its cache (f32): one latent row per position (latent attention),
                                 else K rows and V transposed as the trunk's (kv.h) */
    st_expert *experts;       /* [n_expert] its routed experts */
    st_expert shexp;          /* its shared expert (gate.data NULL: none) */
    st_expert dense;          /* its dense FFN (an MTP layer without a router) */
    float *cat;               /* [n_batch][2 * n_embd] the joined normalized inputs */
    float *qg, *gate;         /* qwen3next's gated attention: [n_batch][2 * n_head * head_dim]
                                 attn_q's rows, [n_batch][n_head * head_dim] the gates (else NULL) */
    float *zero;              /* [n_embd] the hidden state before position 0 */
    float *hprev;             /* [n_embd] the last row's normalized output */
    float *logits;            /* [n_vocab] the last row's */
    strata_token *tok;        /* [n_ctx] the tokens whose rows are in kv */
    int64_t n;                /* rows of kv that hold real tokens */
    int64_t h_from;           /* positions below it were decoded before the drafter existed:
                                 their hidden states are unknown (zeros) */
};

/* The layer on the session's device when its backend can put it there: 1 done, 0 not (d->where
 * says why), or an error other than "unsupported". */
static strata_status st_mtp_try_device(st_mtp *d, int *on) {
    strata_session *s = d->s;
    *on = 0;
    if (!s->be->mtp_attach) {
        snprintf(d->where, sizeof d->where, "on the CPU");
        return STRATA_OK;
    }
    if (s->mtp_on_cpu) {
        snprintf(d->where, sizeof d->where, "on the CPU (asked for)");
        return STRATA_OK;
    }
    const strata_status st = s->be->mtp_attach(s);
    if (st == STRATA_OK) {
        snprintf(d->where, sizeof d->where, "on the GPU (%s)", s->be->name);
        *on = d->dev = 1;
        return STRATA_OK;
    }
    if (st != STRATA_ERR_UNSUPPORTED) return st;
    snprintf(d->where, sizeof d->where, "on the CPU (%s)", strata_last_error());
    st_error_clear();
    return STRATA_OK;
}

strata_status st_mtp_create(strata_session *s, st_mtp **out) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    const size_t E = (size_t)hp->n_embd, C = (size_t)s->n_ctx;
    *out = NULL;
    st_mtp *d = calloc(1, sizeof *d);
    if (!d) return st_error(STRATA_ERR_NOMEM, "MTP drafter: out of memory");
    *out = d;
    d->s = s;
    d->L = &m->layers[hp->n_layer];
    d->h_from = s->n_past;
    d->tok = calloc(C, sizeof *d->tok);
    if (!d->tok) return st_error(STRATA_ERR_NOMEM, "MTP drafter: out of memory (n_ctx %d)", (int)s->n_ctx);
    int on = 0;
    ST_TRY(st_mtp_try_device(d, &on));
    s->mtp_on = 1;
    if (on) return STRATA_OK;
    d->kv.type = STRATA_TYPE_F32;
    d->kv.n_ctx = s->n_ctx;
    const size_t nk = (size_t)hp->n_head_kv * (size_t)hp->head_dim, nv = (size_t)hp->n_head_kv * (size_t)hp->head_dim_v;
    d->kv.k = calloc(C * nk, sizeof(float));
    if (!m->arch->mla && d->kv.k && !(d->kv.vt = calloc(C * nv, sizeof(float))))
        return st_error(STRATA_ERR_NOMEM, "MTP drafter: out of memory for its cache (n_ctx %d)", (int)s->n_ctx);
    d->experts = calloc((size_t)hp->n_expert, sizeof *d->experts);
    d->cat = calloc((size_t)s->n_batch * 2 * E, sizeof(float));
    d->zero = calloc(E, sizeof(float));
    d->hprev = calloc(E, sizeof(float));
    d->logits = calloc((size_t)hp->n_vocab, sizeof(float));
    s->mtp_h = calloc(C * E, sizeof(float));
    if (m->arch->id == ST_ARCH_QWEN3NEXT) {
        const size_t nq = (size_t)hp->n_head * (size_t)hp->head_dim;
        d->qg = malloc(sizeof(float) * (size_t)s->n_batch * 2 * nq);
        d->gate = malloc(sizeof(float) * (size_t)s->n_batch * nq);
        if (!d->qg || !d->gate)
            return st_error(STRATA_ERR_NOMEM, "MTP drafter: out of memory for its attention scratch (n_batch %d)",
                            (int)s->n_batch);
    }
    if (!d->kv.k || !d->experts || !d->cat || !d->zero || !d->hprev || !d->logits || !s->mtp_h)
        return st_error(STRATA_ERR_NOMEM, "MTP drafter: out of memory for its cache (n_ctx %d)", (int)s->n_ctx);
    for (int32_t e = 0; e < hp->n_expert; e++) {
        d->experts[e].gate = st_tensor_expert(&d->L->ffn_gate_exps, e);
        d->experts[e].up = st_tensor_expert(&d->L->ffn_up_exps, e);
        d->experts[e].down = st_tensor_expert(&d->L->ffn_down_exps, e);
    }
    d->shexp.gate = d->L->ffn_gate_shexp;
    d->shexp.up = d->L->ffn_up_shexp;
    d->shexp.down = d->L->ffn_down_shexp;
    d->dense.gate = d->L->ffn_gate;
    d->dense.up = d->L->ffn_up;
    d->dense.down = d->L->ffn_down;
    return STRATA_OK;
}

const char *st_mtp_where(const st_mtp *d) { return d->where; }

void st_mtp_free(st_mtp *d) {
    if (!d) return;
    if (d->dev) d->s->be->mtp_detach(d->s);
    if (d->s && d->s->mtp_on) {
        free(d->s->mtp_h);
        d->s->mtp_h = NULL;
        d->s->mtp_on = 0;
    }
    free(d->kv.k);
    free(d->kv.vt);
    free(d->experts);
    free(d->cat);
    free(d->qg);
    free(d->gate);
    free(d->zero);
    free(d->hprev);
    free(d->logits);
    free(d->tok);
    free(d);
}

/* The joined inputs of T rows at positions pos0..: [enorm(embed(tok)), hnorm(h of pos - 1)];
 * hlast, when given, is the single row's hidden state (a chained draft). */
static void st_mtp_inputs(st_mtp *d, const strata_token *tok, int64_t T, int64_t pos0, const float *hlast) {
    strata_session *s = d->s;
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    const st_layer *L = d->L;
    const int64_t E = hp->n_embd;
    const st_tensor *te = L->nextn_embed.data ? &L->nextn_embed : &m->tok_embd;
    const st_dequant_fn deq = st_dequant_get(te->type);
    for (int64_t t = 0; t < T; t++) {
        float *c = d->cat + t * 2 * E;
        const int64_t p = pos0 + t;
        deq(st_tensor_row(te, 0, tok[t]), s->xn, E);
        st_rmsnorm(c, s->xn, (const float *)L->nextn_enorm.data, E, hp->norm_eps);
        const float *h = hlast ? hlast : (p == 0 || p - 1 < d->h_from ? d->zero : s->mtp_h + (p - 1) * E);
        st_rmsnorm(c + E, h, (const float *)L->nextn_hnorm.data, E, hp->norm_eps);
    }
}

/* T MTP rows at positions pos0.. (their cache rows written); the last row's normalized output
 * into d->hprev and its logits into d->logits. */
static void st_mtp_rows(st_mtp *d, const strata_token *tok, int64_t T, int64_t pos0, const float *hlast) {
    strata_session *s = d->s;
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    const st_layer *L = d->L;
    const int64_t E = hp->n_embd;
    st_mtp_inputs(d, tok, T, pos0, hlast);
    st_matmul(s->tp, &L->nextn_eh_proj, d->cat, T, s->x, s->mm_ws);
    for (int64_t t = 0; t < T; t++) st_rope_cache(&s->rope, pos0 + t, s->rope_cs + t * hp->n_rot);
    if (m->arch->mla) st_cpu_mla_block(s, L, &d->kv, T, pos0);
    else if (m->arch->id == ST_ARCH_QWEN3NEXT) st_cpu_gated_attn_block(s, L, &d->kv, d->qg, d->gate, T, pos0);
    else st_cpu_attn_block(s, L, &d->kv, T, pos0);
    const st_cpu_ffn_w w = {&d->dense, d->experts, &d->shexp};
    st_cpu_ffn_block(s, L, hp->n_layer, &w, T);
    const st_tensor *hn = L->nextn_head_norm.data ? &L->nextn_head_norm : &m->output_norm;
    const st_tensor *head = L->nextn_head.data ? &L->nextn_head : &m->output;
    st_rmsnorm(d->hprev, s->x + (T - 1) * E, (const float *)hn->data, E, hp->norm_eps);
    st_matmul(s->tp, head, d->hprev, 1, d->logits, s->mm_ws);
}

/* T rows (chained: the single row from the previous row's output) on the device or here, and the
 * greedy token after the last. */
static strata_status st_mtp_rows_next(st_mtp *d, const strata_token *tok, int64_t T, int64_t pos0, int chained,
                                      strata_token *next) {
    strata_session *s = d->s;
    if (d->dev) return s->be->mtp_rows(s, tok, T, pos0, chained, next, NULL);
    st_mtp_rows(d, tok, T, pos0, chained ? d->hprev : NULL);
    return st_argmax_row(d->logits, s->model->hp.n_vocab, next);
}

strata_status st_mtp_propose(st_mtp *d, const strata_token *h, int64_t nh, int32_t max, strata_token *out,
                             int32_t *n_out) {
    strata_session *s = d->s;
    *n_out = 0;
    if (nh < 1 || (int64_t)s->n_past != nh - 1)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_drafter_propose: an MTP drafter's history is its session's "
                        "tokens and the newest one (n_past %d, history %lld)", (int)s->n_past, (long long)nh);
    if ((int64_t)max > (int64_t)s->n_ctx - nh + 1) max = (int32_t)((int64_t)s->n_ctx - nh + 1);
    if (max < 1) return STRATA_OK;
    int64_t keep = 0; /* the rows of a common prefix stay; the newest is computed again for its logits */
    while (keep < d->n && keep < nh - 1 && d->tok[keep] == h[keep]) keep++;
    for (int64_t p = keep; p < nh; p++) /* (the rows to compute read these tokens' embeddings) */
        if (h[p] < 0 || h[p] >= s->model->hp.n_vocab)
            return st_error(STRATA_ERR_INVALID_ARG, "strata_drafter_propose: history token %lld is %d, outside "
                            "the vocabulary [0, %d)", (long long)p, (int)h[p], (int)s->model->hp.n_vocab);
    strata_token next = 0;
    d->n = 0; /* (until the rows below are all computed) */
    for (int64_t p = keep; p < nh;) {
        const int64_t T = nh - p < s->n_batch ? nh - p : s->n_batch;
        ST_TRY(st_mtp_rows_next(d, h + p, T, p, 0, &next));
        p += T;
    }
    memcpy(d->tok, h, sizeof *h * (size_t)nh);
    d->n = nh;
    int32_t k = 0;
    while (k < max) {
        out[k++] = next;
        if (k == max || strata_token_is_eog(s->model, next)) break;
        ST_TRY(st_mtp_rows_next(d, &next, 1, nh - 1 + k, 1, &next)); /* a chained row: not kept (d->n) */
    }
    *n_out = k;
    return STRATA_OK;
}
