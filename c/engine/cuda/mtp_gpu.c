/* mtp_gpu.c - an MTP drafter's layer on the GPU (the CUDA backend's mtp_attach, mtp_rows and
 * mtp_detach, backend.h). Attach puts the model's nextn layer up as g->layers[n_layer] with every
 * routed expert resident whatever the trunk's placement, its own KV rows, eh_proj, its norms and
 * its head (or the trunk's), and from then on each trunk call keeps its final-normed hidden rows
 * on the device (st_gpu_mtp_keep): a draft sends the tokens' embeddings up and one token down.
 * The drafter's bookkeeping (the rows of a common prefix kept, chained drafts) stays in
 * mtp_cpu.c, which calls rows; the layer's arithmetic is the trunk's GPU blocks' (forward_cuda.c,
 * moe_block.c, deltanet_gpu.c), so the drafts are the CPU layer's in the GPU's arithmetic. Where
 * the layer does not fit the GPU's room, or the session is a layer split, attach says why and the
 * drafter runs the layer on the CPU from hidden rows copied down (mtp_cpu.c). */
#include "gpu_pass.h"
#include "forward_cuda.h"
#include "moe_block.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef STRATA_HAVE_CUDA

strata_status st_gpu_mtp_attach(strata_session *s) {
    (void)s;
    return st_error(STRATA_ERR_UNSUPPORTED, "the MTP layer on the GPU: built without CUDA");
}
strata_status st_gpu_mtp_rows(strata_session *s, const strata_token *tok, int64_t T, int64_t pos0, int chained,
                              strata_token *next, float *logits) {
    (void)s; (void)tok; (void)T; (void)pos0; (void)chained; (void)next; (void)logits;
    return st_error(STRATA_ERR_UNSUPPORTED, "the MTP layer on the GPU: built without CUDA");
}
void st_gpu_mtp_detach(strata_session *s) { (void)s; }

#else

struct st_gpu_mtp {
    int n_ups;             /* g->n_ups before the layer's uploads: the entries after it are its own */
    size_t weight_bytes;   /* g->weight_bytes before them */
    st_cuda_mat eh_proj;   /* (2 n_embd, n_embd): [enorm(embedding), hnorm(hidden)] -> the layer's input */
    float *enorm, *hnorm;  /* (n_embd) */
    float *head_norm;      /* (n_embd) the layer's own, or the trunk's output norm (not owned) */
    st_cuda_mat head;      /* (n_embd, n_vocab) the layer's own, or the trunk's output (not owned) */
    void *kv_mem;          /* the layer's cache rows (K and V, or the latent rows), n_ctx positions */
    float *hbuf;           /* (n_ctx + 1, n_embd): row 0 zeros, row p + 1 position p's final-normed
                              hidden state (st_gpu_mtp_keep) */
    float *cat;            /* (n_batch, 2 n_embd) the joined normalized inputs */
    float *hprev;          /* (n_embd) the last row's head-normed output: a chained row's hidden state */
    int64_t h_from;        /* positions below it were decoded before attach: their rows stay zero */
};

/* What attach allocates: the layer's tensors in the file but its own embedding (read on the
 * host), its cache, the hidden rows and the scratch. */
static int64_t st_gpu_mtp_bytes(const strata_session *s) {
    const strata_model *m = s->model;
    const int64_t E = m->hp.n_embd;
    char pre[32];
    snprintf(pre, sizeof pre, "blk.%d.", (int)m->hp.n_layer);
    int64_t n = 0;
    for (int64_t i = 0; i < strata_gguf_tensor_count(m->gguf); i++) {
        strata_tensor_info t;
        if (strata_gguf_tensor_info(m->gguf, i, &t) != STRATA_OK) continue;
        if (strncmp(t.name, pre, strlen(pre)) == 0 && !strstr(t.name, "nextn.embed_tokens")) n += (int64_t)t.n_bytes;
    }
    n += (int64_t)st_gpu_kv_layer_bytes(s) * (m->arch->mla ? 1 : 2);
    n += (int64_t)sizeof(float) * ((s->n_ctx + 1) * E + (int64_t)s->n_batch * 2 * E + E);
    return n;
}

/* The layer, its projections and norms up; its cache, hidden rows and scratch allocated. */
static strata_status st_gpu_mtp_build(strata_session *s, st_gpu_mtp *M) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const int il = hp->n_layer;
    const st_layer *L = &m->layers[il];
    const int64_t E = hp->n_embd;
    TRY(st_gpu_upload_layer(s, il, 1));
    TRY(st_gpu_put_mat(g, &L->nextn_eh_proj, &M->eh_proj));
    TRY(st_gpu_put_f32(g, &L->nextn_enorm, &M->enorm));
    TRY(st_gpu_put_f32(g, &L->nextn_hnorm, &M->hnorm));
    if (L->nextn_head_norm.data) TRY(st_gpu_put_f32(g, &L->nextn_head_norm, &M->head_norm));
    else M->head_norm = g->output_norm;
    if (L->nextn_head.data) TRY(st_gpu_put_mat(g, &L->nextn_head, &M->head));
    else M->head = g->output;
    const size_t per = st_gpu_kv_layer_bytes(s);
    const int mla = m->arch->mla;
    TRY(st_gpu_alloc(&M->kv_mem, (mla ? 1 : 2) * per));
    st_cuda_kv_layer *kv = &g->layers[il].kv;
    kv->type = s->kv_type;
    kv->n_ctx = s->n_ctx;
    kv->k = M->kv_mem;
    kv->v = mla ? NULL : (uint8_t *)M->kv_mem + per;
    const size_t hb = sizeof(float) * (size_t)((s->n_ctx + 1) * E);
    TRY(st_gpu_alloc((void **)&M->hbuf, hb));
    TRY(st_cuda_memset(M->hbuf, 0, hb));
    TRY(st_gpu_alloc((void **)&M->cat, sizeof(float) * (size_t)s->n_batch * 2 * (size_t)E));
    TRY(st_gpu_alloc((void **)&M->hprev, sizeof(float) * (size_t)E));
    return st_cuda_synchronize();
}

strata_status st_gpu_mtp_attach(strata_session *s) {
    const strata_model *m = s->model;
    st_gpu *g = s->gpu;
    if (!g || m->n_mtp == 0)
        return st_error(STRATA_ERR_UNSUPPORTED, "the MTP layer on the GPU: no GPU session or no MTP layer");
    if (g->mtp) return st_error(STRATA_ERR_INVALID_ARG, "the MTP layer on the GPU: attached already");
    if (g->stages)
        return st_error(STRATA_ERR_UNSUPPORTED, "the MTP layer on the GPU: not built for a layer split");
    int64_t avail = 0, margin = 0;
    TRY(st_gpu_room(s, &avail, &margin));
    const int64_t need = st_gpu_mtp_bytes(s);
    if (need > avail - margin)
        return st_error(STRATA_ERR_UNSUPPORTED, "the MTP layer on the GPU needs %.1f MiB, %.1f MiB are free "
                        "beyond the %.0f MiB margin", (double)need / 1048576.0,
                        (double)(avail > margin ? avail - margin : 0) / 1048576.0, (double)margin / 1048576.0);
    st_gpu_mtp *M = calloc(1, sizeof *M);
    if (!M) return st_error(STRATA_ERR_NOMEM, "the MTP layer on the GPU: out of memory");
    M->n_ups = g->n_ups;
    M->weight_bytes = g->weight_bytes;
    M->h_from = s->n_past;
    g->mtp = M;
    const strata_status st = st_gpu_mtp_build(s, M);
    if (st != STRATA_OK) {
        char err[512]; /* (the frees may overwrite it) */
        snprintf(err, sizeof err, "%s", strata_last_error());
        st_gpu_mtp_detach(s);
        return st_error(st, "%s", err);
    }
    return STRATA_OK;
}

void st_gpu_mtp_detach(strata_session *s) {
    st_gpu *g = s ? s->gpu : NULL;
    st_gpu_mtp *M = g ? g->mtp : NULL;
    if (!M) return;
    st_gpu_layer *G = &g->layers[s->model->hp.n_layer];
    st_cuda_free(G->experts);
    st_cuda_free(G->shexp);
    memset(G, 0, sizeof *G);
    for (int i = M->n_ups; i < g->n_ups; i++) st_cuda_free(g->ups[i].dev);
    g->n_ups = M->n_ups;
    g->weight_bytes = M->weight_bytes;
    void *bufs[] = {M->kv_mem, M->hbuf, M->cat, M->hprev};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) st_cuda_free(bufs[i]);
    free(M);
    g->mtp = NULL;
}

strata_status st_gpu_mtp_keep(strata_session *s, int64_t pos0, int64_t T) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const st_gpu_mtp *M = g->mtp;
    const int64_t E = hp->n_embd, first = pos0 > M->h_from ? pos0 : M->h_from;
    if (first >= pos0 + T) return STRATA_OK;
    return st_cuda_rmsnorm(M->hbuf + (first + 1) * E, E, g->x + (first - pos0) * E, E, g->output_norm, E, 1,
                           pos0 + T - first, hp->norm_eps, g->stream);
}

/* The joined inputs of T rows at positions pos0..: [enorm(embedding of tok), hnorm(the hidden
 * state of the position before, or hprev for a chained row)], as mtp_cpu.c's st_mtp_inputs. */
static strata_status st_gpu_mtp_inputs(strata_session *s, const strata_token *tok, int64_t T, int64_t pos0,
                                       int chained) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_gpu *g = s->gpu;
    const st_gpu_mtp *M = g->mtp;
    const st_layer *L = &m->layers[hp->n_layer];
    const int64_t E = hp->n_embd;
    const st_tensor *te = L->nextn_embed.data ? &L->nextn_embed : &m->tok_embd;
    const st_dequant_fn deq = st_dequant_get(te->type);
    float *emb = g->h_embd ? g->h_embd : s->x;
    for (int64_t t = 0; t < T; t++) deq(st_tensor_row(te, 0, tok[t]), emb + t * E, E); /* (checked: mtp_cpu.c) */
    TRY(st_cuda_memcpy_h2d(g->x, emb, sizeof(float) * (size_t)(T * E)));
    s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(T * E));
    TRY(st_cuda_rmsnorm(M->cat, 2 * E, g->x, E, M->enorm, E, 1, T, hp->norm_eps, g->stream));
    const float *h = chained ? M->hprev : M->hbuf + pos0 * E; /* (row pos0: position pos0 - 1's) */
    return st_cuda_rmsnorm(M->cat + E, 2 * E, h, E, M->hnorm, E, 1, T, hp->norm_eps, g->stream);
}

strata_status st_gpu_mtp_rows(strata_session *s, const strata_token *tok, int64_t T, int64_t pos0, int chained,
                              strata_token *next, float *logits) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    st_gpu_mtp *M = g ? g->mtp : NULL;
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    if (!M) return st_error(STRATA_ERR_INVALID_ARG, "MTP rows: no MTP layer on the GPU");
    if (!tok || !next || T < 1 || T > s->n_batch || pos0 < 0 || pos0 + T > s->n_ctx || (chained && T != 1))
        return st_error(STRATA_ERR_INVALID_ARG, "MTP rows: %lld rows at %lld (n_batch %d, n_ctx %d, chained %d)",
                        (long long)T, (long long)pos0, (int)s->n_batch, (int)s->n_ctx, chained);
    st_cuda_set_pdl(0);
    TRY(st_gpu_mtp_inputs(s, tok, T, pos0, chained));
    TRY(st_gpu_mm(g, &M->eh_proj, M->cat, T, g->x));
    for (int64_t t = 0; t < T; t++) g->hpos[t] = (int32_t)(pos0 + t);
    g->hpos[T] = -1; /* (no recurrent state's history row: the layer is full attention) */
    TRY(st_cuda_memcpy_h2d(g->pos, g->hpos, sizeof(int32_t) * (size_t)(T + 1)));
    TRY(st_gpu_mtp_layer(s, T, pos0));
    TRY(st_cuda_rmsnorm(M->hprev, E, g->x + (T - 1) * E, E, M->head_norm, E, 1, 1, hp->norm_eps, g->stream));
    TRY(st_cuda_mmv(&M->head, M->hprev, 1, g->logits, g->mmv_scratch, g->stream));
    if (logits) TRY(st_cuda_memcpy_d2h(logits, g->logits, sizeof(float) * (size_t)V));
    TRY(st_cuda_argmax(g->logits, V, g->amax, g->stream));
    st_cuda_argmax_out r;
    TRY(st_cuda_memcpy_d2h(&r, g->amax, sizeof r));
    s->pcie_bytes += (int64_t)sizeof r + (logits ? (int64_t)(sizeof(float) * (size_t)V) : 0);
    if (!(r.logit > -INFINITY)) return st_error(STRATA_ERR_INVALID_ARG, "MTP draft: no finite logit among %d", (int)V);
    *next = r.id;
    return STRATA_OK;
}

#endif /* STRATA_HAVE_CUDA */
