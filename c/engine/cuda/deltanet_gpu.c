/* deltanet_gpu.c - qwen3next on the GPU (backend STRATA_BACKEND_CUDA; the CPU's
 * c/engine/cpu/linear_attn_cpu.c step by step, kernels c/cuda/deltanet.cu): the session's device
 * recurrent state of its gated DeltaNet layers (each layer's conv kernel state and per value head
 * delta-rule state), the rollback window, the DeltaNet layer and the gated full-attention layer.
 *
 * Rollback, as the CPU's: a decode call of at most ST_RS_WINDOW positions opens (or extends)
 * a window; its first position's state is copied aside on the device, and every later batch's
 * conv inputs and ssm_ba rows are kept (the conv and delta-rule kernels copy them, at the row the
 * batch's upload puts after its positions in g->pos: the decode graphs replay it too). A
 * truncation inside the window restores the copy and runs the kept rows through the same two
 * kernels, whose per-token arithmetic does not depend on the batching: the state a decode ending
 * at n_keep leaves, bit for bit. */
#include "deltanet_gpu.h"

#ifndef STRATA_HAVE_CUDA

strata_status st_gpu_rs_call_begin(strata_session *s, int64_t n) { (void)s; (void)n; return STRATA_OK; }
strata_status st_gpu_rs_truncate(strata_session *s, int32_t n_keep) { (void)s; (void)n_keep; return STRATA_OK; }

#else

#include "moe_block.h"
#include "cuda_deltanet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


typedef struct {
    st_cuda_mat qkv, gate, ba, out;      /* attn_qkv, attn_gate, ssm_ba, ssm_out */
    float *conv_w, *a, *dt, *norm;       /* ssm_conv1d, ssm_a, ssm_dt, ssm_norm */
} st_gpu_rs_layer;

struct st_gpu_rs {
    int32_t n_rec;
    int32_t *slot;                       /* [n_layer] index among the recurrent layers, -1 */
    st_gpu_rs_layer *L;                  /* [n_layer] */
    st_cuda_gdn_shape sh;
    int64_t C;                           /* conv channels */
    float *conv, *ssm;                   /* device [n_rec][K-1][C], [n_rec][nv][d][d] */
    float *snap_conv, *snap_ssm;         /* the same at the window's first position */
    float *hist_qkv, *hist_ba;           /* [n_rec][W][C], [n_rec][W][2*nv] */
    int32_t win_pos, win_len;
    int win_open;
    int32_t *no_row;                     /* device -1: no history (the replay) */
    /* scratch, n_batch rows (W for the replay) */
    float *qkv, *z, *ba, *y, *core, *qg, *gate;
};

static size_t st_grs_conv_n(const st_gpu_rs *r) { return (size_t)(r->sh.K - 1) * (size_t)r->C; }
static size_t st_grs_ssm_n(const st_gpu_rs *r) { return (size_t)r->sh.nv * (size_t)r->sh.d * (size_t)r->sh.d; }

/* The weights of recurrent layer il up (the matrices through the session's upload list). */
static strata_status st_gpu_rs_upload(strata_session *s, int il) {
    const st_layer *L = &s->model->layers[il];
    st_gpu *g = s->gpu;
    st_gpu_rs_layer *R = &g->rs->L[il];
    TRY(st_gpu_put_mat(g, &L->ssm_qkv, &R->qkv));
    TRY(st_gpu_put_mat(g, &L->ssm_gate, &R->gate));
    TRY(st_gpu_put_mat(g, &L->ssm_ba, &R->ba));
    TRY(st_gpu_put_mat(g, &L->ssm_out, &R->out));
    TRY(st_gpu_put_f32(g, &L->ssm_conv1d, &R->conv_w));
    TRY(st_gpu_put_f32(g, &L->ssm_a, &R->a));
    TRY(st_gpu_put_f32(g, &L->ssm_dt, &R->dt));
    return st_gpu_put_f32(g, &L->ssm_norm, &R->norm);
}

strata_status st_gpu_rs_create(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    if (hp->full_attn_interval <= 0) return STRATA_OK;
    st_gpu_rs *r = calloc(1, sizeof *r);
    if (!r) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory for the recurrent state");
    g->rs = r;
    r->slot = malloc(sizeof(int32_t) * (size_t)hp->n_layer);
    r->L = calloc((size_t)hp->n_layer, sizeof *r->L);
    if (!r->slot || !r->L) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory for the recurrent state");
    for (int il = 0; il < hp->n_layer; il++) r->slot[il] = st_layer_recurrent(hp, il) ? r->n_rec++ : -1;
    r->sh.nk = hp->ssm_n_group, r->sh.nv = hp->ssm_dt_rank, r->sh.d = hp->ssm_d_state, r->sh.K = hp->ssm_d_conv;
    r->sh.eps = hp->norm_eps;
    if (!st_cuda_gdn_supports(&r->sh))
        return st_error(STRATA_ERR_UNSUPPORTED, "gpu session: qwen3next's DeltaNet shape (%d key heads, %d value "
                        "heads of %d, conv %d) is not one the GPU kernels take (head size 16, 32, 64 or 128, "
                        "conv width <= 8)", (int)r->sh.nk, (int)r->sh.nv, (int)r->sh.d, (int)r->sh.K);
    r->C = 2 * (int64_t)r->sh.nk * r->sh.d + hp->ssm_d_inner;
    for (int il = 0; il < hp->n_layer; il++)
        if (r->slot[il] >= 0) TRY(st_gpu_rs_upload(s, il));
    const size_t L = (size_t)r->n_rec, W = ST_RS_WINDOW, f = sizeof(float);
    const size_t T = (size_t)(s->n_batch > (int32_t)W ? s->n_batch : (int32_t)W);
    const size_t di = (size_t)hp->ssm_d_inner, nv = (size_t)r->sh.nv, nq = (size_t)hp->n_head * hp->head_dim;
    /* the state and its window snapshot, the window's conv and beta/alpha inputs */
    g->rs_bytes = f * L * (2 * st_grs_conv_n(r) + 2 * st_grs_ssm_n(r) + W * (size_t)r->C + W * 2 * nv);
    TRY(st_gpu_alloc((void **)&r->conv, f * L * st_grs_conv_n(r)));
    TRY(st_gpu_alloc((void **)&r->ssm, f * L * st_grs_ssm_n(r)));
    TRY(st_gpu_alloc((void **)&r->snap_conv, f * L * st_grs_conv_n(r)));
    TRY(st_gpu_alloc((void **)&r->snap_ssm, f * L * st_grs_ssm_n(r)));
    TRY(st_gpu_alloc((void **)&r->hist_qkv, f * L * W * (size_t)r->C));
    TRY(st_gpu_alloc((void **)&r->hist_ba, f * L * W * 2 * nv));
    TRY(st_gpu_alloc((void **)&r->no_row, sizeof(int32_t)));
    TRY(st_cuda_memset(r->no_row, 0xFF, sizeof(int32_t)));
    TRY(st_gpu_alloc((void **)&r->qkv, f * T * (size_t)r->C));
    TRY(st_gpu_alloc((void **)&r->y, f * T * (size_t)r->C));
    TRY(st_gpu_alloc((void **)&r->z, f * T * di));
    TRY(st_gpu_alloc((void **)&r->core, f * T * di));
    TRY(st_gpu_alloc((void **)&r->ba, f * T * 2 * nv));
    TRY(st_gpu_alloc((void **)&r->qg, f * T * 2 * nq));
    TRY(st_gpu_alloc((void **)&r->gate, f * T * nq));
    return STRATA_OK;
}

void st_gpu_rs_free(st_gpu *g) {
    st_gpu_rs *r = g->rs;
    if (!r) return;
    void *bufs[] = {r->conv, r->ssm, r->snap_conv, r->snap_ssm, r->hist_qkv, r->hist_ba, r->no_row, r->qkv,
                    r->y, r->z, r->core, r->ba, r->qg, r->gate};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) st_cuda_free(bufs[i]);
    free(r->slot);
    free(r->L);
    free(r);
    g->rs = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The window
 * ------------------------------------------------------------------------------------------- */

strata_status st_gpu_rs_call_begin(strata_session *s, int64_t n) {
    st_gpu_rs *r = s->gpu ? s->gpu->rs : NULL;
    if (!r) return STRATA_OK;
    st_gpu *g = s->gpu;
    const int32_t pos = s->n_past;
    const size_t L = (size_t)r->n_rec, f = sizeof(float);
    if (pos == 0) { /* a fresh sequence: the zero state */
        TRY(st_cuda_memset_async(r->conv, 0, f * L * st_grs_conv_n(r), g->stream));
        TRY(st_cuda_memset_async(r->ssm, 0, f * L * st_grs_ssm_n(r), g->stream));
        r->win_open = 0;
    }
    if (r->win_open && pos >= r->win_pos && pos <= r->win_pos + r->win_len &&
        pos + n - r->win_pos <= ST_RS_WINDOW) { /* the call extends the open window */
        r->win_len = (int32_t)(pos + n - r->win_pos);
        return STRATA_OK;
    }
    r->win_open = n <= ST_RS_WINDOW;
    if (!r->win_open) return STRATA_OK;
    TRY(st_cuda_copy_d2d(r->snap_conv, r->conv, f * L * st_grs_conv_n(r), g->stream));
    TRY(st_cuda_copy_d2d(r->snap_ssm, r->ssm, f * L * st_grs_ssm_n(r), g->stream));
    r->win_pos = pos;
    r->win_len = (int32_t)n;
    return STRATA_OK;
}

int32_t st_gpu_rs_hist_row(const strata_session *s, int64_t T, int64_t pos0) {
    const st_gpu_rs *r = s->gpu ? s->gpu->rs : NULL;
    if (!r || !r->win_open || pos0 < r->win_pos || pos0 + T > r->win_pos + ST_RS_WINDOW) return -1;
    return (int32_t)(pos0 - r->win_pos);
}

/* Layer il's conv and delta rule over T rows of conv inputs x and ssm_ba rows ba (history row
 * *d_hrow, or none with r->no_row), outputs into r->core. */
static strata_status st_gpu_rs_advance(st_gpu *g, int il, const float *x, const float *ba, int64_t T,
                                       const int32_t *d_hrow) {
    st_gpu_rs *r = g->rs;
    const st_gpu_rs_layer *R = &r->L[il];
    const size_t slot = (size_t)r->slot[il], W = ST_RS_WINDOW, nv = (size_t)r->sh.nv;
    float *conv = r->conv + slot * st_grs_conv_n(r), *ssm = r->ssm + slot * st_grs_ssm_n(r);
    TRY(st_cuda_gdn_conv(&r->sh, R->conv_w, conv, x, r->C, r->y, T, r->hist_qkv + slot * W * (size_t)r->C,
                         d_hrow, g->stream));
    return st_cuda_gdn_rule(&r->sh, r->y, ba, 2 * (int64_t)nv, R->a, R->dt, ssm, r->core, T,
                            r->hist_ba + slot * W * 2 * nv, d_hrow, g->stream);
}

strata_status st_gpu_rs_truncate(strata_session *s, int32_t n_keep) {
    st_gpu_rs *r = s->gpu ? s->gpu->rs : NULL;
    if (!r || n_keep == 0 || n_keep == s->n_past) return STRATA_OK;
    st_gpu *g = s->gpu;
    TRY(st_rs_window_check(s, r->win_open, r->win_pos, r->win_len, n_keep));
    const size_t L = (size_t)r->n_rec, W = ST_RS_WINDOW, f = sizeof(float);
    TRY(st_cuda_copy_d2d(r->conv, r->snap_conv, f * L * st_grs_conv_n(r), g->stream));
    TRY(st_cuda_copy_d2d(r->ssm, r->snap_ssm, f * L * st_grs_ssm_n(r), g->stream));
    const int64_t n = n_keep - r->win_pos;
    for (int il = 0; il < s->model->hp.n_layer && n > 0; il++) {
        const size_t slot = (size_t)r->slot[il];
        if (r->slot[il] < 0) continue;
        TRY(st_gpu_rs_advance(g, il, r->hist_qkv + slot * W * (size_t)r->C,
                              r->hist_ba + slot * W * 2 * (size_t)r->sh.nv, n, r->no_row));
    }
    r->win_len = (int32_t)n;
    return st_cuda_stream_synchronize(g->stream);
}

/* ---------------------------------------------------------------------------------------------
 * The layers
 * ------------------------------------------------------------------------------------------- */

/* Layer 0's attention norm (the later layers' comes with the previous layer's residual). */
static strata_status st_gpu_rs_norm0(strata_session *s, int il, int64_t T) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    if (il != 0) return STRATA_OK;
    return st_cuda_rmsnorm(g->xn, hp->n_embd, g->x, hp->n_embd, g->layers[0].attn_norm, hp->n_embd, 1, T,
                           hp->norm_eps, g->stream);
}

strata_status st_gpu_linear_attn_block(strata_session *s, int il, int64_t T, int64_t pos0) {
    (void)pos0;
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    st_gpu_rs *r = g->rs;
    const st_gpu_rs_layer *R = &r->L[il];
    const int64_t E = hp->n_embd;
    TRY(st_gpu_rs_norm0(s, il, T));
    TRY(st_gpu_mm(g, &R->qkv, g->xn, T, r->qkv));
    TRY(st_gpu_mm(g, &R->gate, g->xn, T, r->z));
    TRY(st_gpu_mm(g, &R->ba, g->xn, T, r->ba));
    TRY(st_gpu_mark(s, STRATA_PHASE_QKV));
    TRY(st_gpu_rs_advance(g, il, r->qkv, r->ba, T, g->pos + T)); /* the history row after the positions */
    TRY(st_cuda_gdn_norm(r->core, r->z, R->norm, r->sh.nv, r->sh.d, T, hp->norm_eps, g->stream));
    TRY(st_gpu_mark(s, STRATA_PHASE_ATTN));
    TRY(st_gpu_mm(g, &R->out, r->core, T, g->proj));
    TRY(st_cuda_add_rmsnorm(g->x, g->proj, 1.0f, g->xn, g->layers[il].ffn_norm, E, T, hp->norm_eps, g->stream));
    return st_gpu_mark(s, STRATA_PHASE_ATTN_OUT);
}

strata_status st_gpu_gated_attn_block(strata_session *s, int il, int64_t T, int64_t pos0) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    st_gpu_rs *r = g->rs;
    const st_gpu_layer *G = &g->layers[il];
    const int64_t E = hp->n_embd, hd = hp->head_dim, H = hp->n_head, Hk = hp->n_head_kv;
    const int64_t nq = H * hd, nk = Hk * hd, nv = Hk * hp->head_dim_v, no = H * hp->head_dim_v;
    TRY(st_gpu_rs_norm0(s, il, T));
    TRY(st_gpu_mm(g, &G->wq, g->xn, T, r->qg));
    TRY(st_gpu_mm(g, &G->wk, g->xn, T, g->k));
    TRY(st_gpu_mm(g, &G->wv, g->xn, T, g->v));
    TRY(st_gpu_mark(s, STRATA_PHASE_QKV));
    TRY(st_cuda_qgate_split(r->qg, g->q, r->gate, H, hd, T, g->stream));
    TRY(st_cuda_rmsnorm(g->q, nq, g->q, nq, G->q_norm, hd, H, T, hp->norm_eps, g->stream));
    TRY(st_cuda_rmsnorm(g->k, nk, g->k, nk, G->k_norm, hd, Hk, T, hp->norm_eps, g->stream));
    TRY(st_cuda_rope(&g->rope, g->q, nq, H, hd, T, g->pos, pos0, g->stream));
    TRY(st_cuda_rope(&g->rope, g->k, nk, Hk, hd, T, g->pos, pos0, g->stream));
    TRY(st_cuda_kv_store(&G->kv, &g->shape, g->k, nk, g->v, nv, T, pos0, g->pos, g->stream));
    TRY(st_cuda_attention(&G->kv, &g->shape, g->q, nq, T, pos0, g->pos, g->att, no, g->attn_ws, g->attn_ws_bytes,
                          g->stream));
    TRY(st_cuda_mul_sigmoid(g->att, r->gate, T * no, g->stream));
    TRY(st_gpu_mark(s, STRATA_PHASE_ATTN));
    TRY(st_gpu_mm(g, &G->wo, g->att, T, g->proj));
    TRY(st_cuda_add_rmsnorm(g->x, g->proj, 1.0f, g->xn, G->ffn_norm, E, T, hp->norm_eps, g->stream));
    return st_gpu_mark(s, STRATA_PHASE_ATTN_OUT);
}

#endif /* STRATA_HAVE_CUDA */
