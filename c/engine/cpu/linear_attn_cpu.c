/* linear_attn_cpu.c - qwen3next's token mixers on the CPU (linear_attn_cpu.h), as llama.cpp's
 * qwen3next graph and transformers' Qwen3NextGatedDeltaNet compute them:
 *
 *   DeltaNet layer: qkv = attn_qkv . x, z = attn_gate . x, [beta, alpha] per key head from
 *   ssm_ba . x; beta = sigmoid(b), g = ssm_a * softplus(alpha + ssm_dt); the causal depthwise
 *   conv (ssm_conv1d, its last d_conv - 1 inputs kept as state) and silu over qkv; q and k heads
 *   L2-normed (q also scaled by 1/sqrt(d)), each key head serving n_v / n_k value heads; the gated
 *   delta rule per value head in its chunked form, for prompts and decode alike; rmsnorm(out) *
 *   ssm_norm * silu(z); ssm_out.
 *
 * The chunked form: chunks of ST_GDN_CHUNK positions at absolute positions (0, 64, 128, ...).
 * Per layer the session keeps, for the open chunk, each value head's state at the chunk's first
 * position and the rows appended so far (keys per key head, corrected values u and cumulative g
 * per value head); a call's rows are appended to it (st_gdn_chunk_rows) and a chunk that fills
 * closes into the next chunk's start state. A row's arithmetic depends on that state and the rows
 * before it only, so a prompt gives the same bits in one call, in any split and token by token;
 * decode is a one-row append. Chunk n lives in buffer n % 2: the previous chunk stays intact
 * while the next is open.
 *
 * Rollback: speculative decoding truncates inside the window it just verified. Chunk state needs
 * no undoing (a truncation to n_keep reopens n_keep's chunk with its first n_keep % 64 rows, the
 * previous buffer when the window crossed a chunk start); the conv state is rebuilt from the
 * window's first position's state and the window's conv inputs. A window is at most
 * STRATA_DRAFT_MAX + 1 (< ST_GDN_CHUNK) positions, so it spans at most one chunk start: a decode
 * call that fits extends the open one, else one starts at the call (a longer call leaves none). */
#include "linear_attn_cpu.h"
#include "forward_cpu.h"
#include "ops_ssm.h"
#include "profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ST_RS_CH ST_GDN_CHUNK

struct st_rs {
    int32_t n_rec;             /* recurrent layers */
    int32_t *slot;             /* [n_layer] its index among them, -1 for attention layers */
    int64_t C, K, nk, nv, d;   /* conv channels, conv width, key heads, value heads, head size */
    float *conv;               /* [n_rec][K-1][C] */
    float *S[2];               /* [n_rec][nv][d][d]: the start state of chunks of even / odd number */
    float *ck[2];              /* [n_rec][nk][d][64]: the chunk's keys, key dim major */
    float *cu[2];              /* [n_rec][nv][64][d]: its corrected values */
    float *cG[2];              /* [n_rec][nv][64]: its cumulative g */
    float *snap_conv;          /* the conv state at the window's first position */
    float *hist_qkv;           /* [n_rec][W][C]: the window's conv inputs */
    int32_t win_pos, win_len;  /* the window: positions win_pos .. win_pos + win_len - 1 */
    int win_open;
    int64_t rows;              /* scratch rows: n_batch */
    float *qkv, *z, *ba, *gb, *y, *core, *qg, *gate; /* scratch */
};

_Static_assert(ST_RS_WINDOW < ST_RS_CH, "a rollback window spans at most one chunk start");

static size_t st_rs_conv_n(const st_rs *r) { return (size_t)(r->K - 1) * (size_t)r->C; }
static size_t st_rs_ssm_n(const st_rs *r) { return (size_t)r->nv * (size_t)r->d * (size_t)r->d; }
static size_t st_rs_ck_n(const st_rs *r) { return (size_t)r->nk * ST_RS_CH * (size_t)r->d; }
static size_t st_rs_cu_n(const st_rs *r) { return (size_t)r->nv * ST_RS_CH * (size_t)r->d; }
static size_t st_rs_cg_n(const st_rs *r) { return (size_t)r->nv * ST_RS_CH; }

static strata_status st_rs_alloc(st_rs *r, const st_hparams *hp) {
    const size_t L = (size_t)r->n_rec, W = ST_RS_WINDOW, R = (size_t)r->rows;
    const size_t di = (size_t)hp->ssm_d_inner, nq = (size_t)hp->n_head * (size_t)hp->head_dim;
    int ok = 1;
    for (int b = 0; b < 2; b++) {
        r->S[b] = calloc(L * st_rs_ssm_n(r) + 1, sizeof(float));
        r->ck[b] = calloc(L * st_rs_ck_n(r) + 1, sizeof(float));
        r->cu[b] = calloc(L * st_rs_cu_n(r) + 1, sizeof(float));
        r->cG[b] = calloc(L * st_rs_cg_n(r) + 1, sizeof(float));
        ok &= r->S[b] && r->ck[b] && r->cu[b] && r->cG[b];
    }
    r->conv = calloc(L * st_rs_conv_n(r) + 1, sizeof(float));
    r->snap_conv = calloc(L * st_rs_conv_n(r) + 1, sizeof(float));
    r->hist_qkv = calloc(L * W * (size_t)r->C + 1, sizeof(float));
    r->qkv = malloc(sizeof(float) * R * (size_t)r->C);
    r->y = malloc(sizeof(float) * R * (size_t)r->C);
    r->z = malloc(sizeof(float) * R * di);
    r->core = malloc(sizeof(float) * R * di);
    r->ba = malloc(sizeof(float) * R * 2 * (size_t)r->nv);
    r->gb = malloc(sizeof(float) * R * 2 * (size_t)r->nv);
    r->qg = malloc(sizeof(float) * R * 2 * nq);
    r->gate = malloc(sizeof(float) * R * nq);
    if (!ok || !r->conv || !r->snap_conv || !r->hist_qkv || !r->qkv || !r->y || !r->z || !r->core ||
        !r->ba || !r->gb || !r->qg || !r->gate)
        return st_error(STRATA_ERR_NOMEM, "session: out of memory for the recurrent state (%d layers)",
                        (int)r->n_rec);
    return STRATA_OK;
}

strata_status st_rs_init(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    if (hp->full_attn_interval <= 0) return STRATA_OK;
    st_rs *r = calloc(1, sizeof *r);
    if (!r) return st_error(STRATA_ERR_NOMEM, "session: out of memory for the recurrent state");
    s->rs = r;
    r->slot = malloc(sizeof(int32_t) * (size_t)hp->n_layer);
    if (!r->slot) return st_error(STRATA_ERR_NOMEM, "session: out of memory for the recurrent state");
    for (int il = 0; il < hp->n_layer; il++) r->slot[il] = st_layer_recurrent(hp, il) ? r->n_rec++ : -1;
    r->nk = hp->ssm_n_group, r->nv = hp->ssm_dt_rank, r->d = hp->ssm_d_state, r->K = hp->ssm_d_conv;
    r->C = 2 * r->nk * r->d + hp->ssm_d_inner;
    r->rows = s->n_batch;
    return st_rs_alloc(r, hp);
}

int64_t st_rs_bytes(const strata_session *s) {
    const st_rs *r = s->rs;
    const size_t L = (size_t)r->n_rec;
    const size_t chunk = st_rs_ssm_n(r) + st_rs_ck_n(r) + st_rs_cu_n(r) + st_rs_cg_n(r);
    return (int64_t)(sizeof(float) * L * (2 * chunk + 2 * st_rs_conv_n(r) + ST_RS_WINDOW * (size_t)r->C));
}

void st_rs_free(strata_session *s) {
    st_rs *r = s->rs;
    if (!r) return;
    for (int b = 0; b < 2; b++) { free(r->S[b]); free(r->ck[b]); free(r->cu[b]); free(r->cG[b]); }
    free(r->slot); free(r->conv); free(r->snap_conv); free(r->hist_qkv); free(r->qkv); free(r->y);
    free(r->z); free(r->core); free(r->ba); free(r->gb); free(r->qg); free(r->gate);
    free(r);
    s->rs = NULL;
}

void st_rs_call_begin(strata_session *s, int64_t n) {
    st_rs *r = s->rs;
    const int32_t pos = s->n_past;
    const size_t L = (size_t)r->n_rec;
    if (pos == 0) { /* a fresh sequence (reset, truncate to 0): the zero state */
        memset(r->conv, 0, sizeof(float) * L * st_rs_conv_n(r));
        memset(r->S[0], 0, sizeof(float) * L * st_rs_ssm_n(r));
        r->win_open = 0;
    }
    if (r->win_open && pos >= r->win_pos && pos <= r->win_pos + r->win_len &&
        pos + n - r->win_pos <= ST_RS_WINDOW) { /* the call extends the open window */
        r->win_len = (int32_t)(pos + n - r->win_pos);
        return;
    }
    r->win_open = n <= ST_RS_WINDOW;
    if (!r->win_open) return;
    memcpy(r->snap_conv, r->conv, sizeof(float) * L * st_rs_conv_n(r));
    r->win_pos = pos;
    r->win_len = (int32_t)n;
}

strata_status st_rs_truncate(strata_session *s, int32_t n_keep) {
    st_rs *r = s->rs;
    if (n_keep == 0 || n_keep == s->n_past) return STRATA_OK;
    const strata_status wst = st_rs_window_check(s, r->win_open, r->win_pos, r->win_len, n_keep);
    if (wst != STRATA_OK) return wst;
    /* the conv state at n_keep: the last K-1 of [the window's first state's rows, its inputs] */
    const size_t W = ST_RS_WINDOW, C = (size_t)r->C, Km1 = (size_t)(r->K - 1);
    const size_t n = (size_t)(n_keep - r->win_pos);
    for (size_t l = 0; l < (size_t)r->n_rec; l++)
        for (size_t j = 0; j < Km1; j++) {
            const size_t at = n + j; /* in the concatenation */
            const float *src = at < Km1 ? r->snap_conv + (l * Km1 + at) * C
                                        : r->hist_qkv + (l * W + at - Km1) * C;
            memcpy(r->conv + (l * Km1 + j) * C, src, sizeof(float) * C);
        }
    r->win_len = (int32_t)n;
    return STRATA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * The chunked delta rule
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const st_rs *r;
    int slot;
    const float *y, *gb;       /* [n][C] conv outputs (q, k normed), [n][2*nv] (g, beta) */
    float *out;                /* [n][nv*d] */
    int64_t pos, n;            /* the rows' first position; n rows, all in pos's chunk */
} st_gdn_job;

/* One value head's view of the chunk of position pos in layer slot. */
static st_gdn_chunk st_rs_chunk(const st_rs *r, int slot, int64_t h, int64_t pos) {
    const int b = (int)((pos / ST_RS_CH) & 1);
    const int64_t d = r->d, kh = h / (r->nv / r->nk);
    st_gdn_chunk c = {
        .S = r->S[b] + (size_t)slot * st_rs_ssm_n(r) + (size_t)(h * d * d),
        .k = r->ck[b] + (size_t)slot * st_rs_ck_n(r) + (size_t)(kh * d * ST_RS_CH),
        .u = r->cu[b] + (size_t)slot * st_rs_cu_n(r) + (size_t)(h * ST_RS_CH * d),
        .G = r->cG[b] + (size_t)slot * st_rs_cg_n(r) + (size_t)(h * ST_RS_CH),
        .dk = d, .dv = d};
    return c;
}

/* Value heads [begin, end): the job's rows appended, the chunk closed when they fill it. */
static void st_gdn_heads(void *ctx, int64_t begin, int64_t end, int thread_id) {
    (void)thread_id;
    const st_gdn_job *j = ctx;
    const st_rs *r = j->r;
    const int64_t d = r->d, C = r->C, nv = r->nv, i0 = j->pos % ST_RS_CH;
    for (int64_t h = begin; h < end; h++) {
        const st_gdn_chunk c = st_rs_chunk(r, j->slot, h, j->pos);
        const int64_t kh = h / (nv / r->nk);
        st_gdn_chunk_rows(&c, i0, j->n, j->y + kh * d, C, j->y + 2 * r->nk * d + h * d, C, j->gb + h,
                          j->gb + nv + h, 2 * nv, j->out + h * d, nv * d);
        if (i0 + j->n == ST_RS_CH) {
            const st_gdn_chunk next = st_rs_chunk(r, j->slot, h, j->pos + ST_RS_CH);
            st_gdn_chunk_close(&c, ST_RS_CH, (float *)next.S);
        }
    }
}

/* The layer's state through T tokens of conv input qkv [T][C] and (g, beta) gb [T][2*nv] at
 * positions pos0..: the conv (its state advanced), q/k normalization, the chunked delta rule,
 * a chunk at a time; outputs into out [T][nv*d]. */
static void st_rs_advance(st_rs *r, st_threadpool *tp, int slot, const st_layer *L, const float *qkv,
                          const float *gb, int64_t T, int64_t pos0, float *out, float eps) {
    const int64_t C = r->C, d = r->d, nk = r->nk;
    float *conv = r->conv + (size_t)slot * st_rs_conv_n(r);
    const float qscale = 1.0f / sqrtf((float)d);
    for (int64_t t = 0; t < T; t++) {
        float *y = r->y + t * C;
        st_ssm_conv_step((const float *)L->ssm_conv1d.data, conv, qkv + t * C, y, C, r->K);
        for (int64_t h = 0; h < 2 * nk; h++) st_l2norm(y + h * d, d, eps);
        for (int64_t i = 0; i < nk * d; i++) y[i] *= qscale;
    }
    for (int64_t t = 0; t < T;) {
        const int64_t pos = pos0 + t, i0 = pos % ST_RS_CH;
        const int64_t n = T - t < ST_RS_CH - i0 ? T - t : ST_RS_CH - i0;
        const int b = (int)((pos / ST_RS_CH) & 1);
        float *ck = r->ck[b] + (size_t)slot * st_rs_ck_n(r);
        for (int64_t i = 0; i < n; i++) { /* the keys first: a key head serves several value heads */
            const float *k = r->y + (t + i) * C + nk * d;
            for (int64_t e = 0; e < nk * d; e++) ck[e * ST_RS_CH + i0 + i] = k[e];
        }
        st_gdn_job j = {r, slot, r->y + t * C, gb + t * 2 * r->nv, out + t * r->nv * d, pos, n};
        if (tp && r->nv > 1) st_threadpool_run(tp, r->nv, 1, st_gdn_heads, &j);
        else st_gdn_heads(&j, 0, r->nv, 0);
        t += n;
    }
}

/* ---------------------------------------------------------------------------------------------
 * The layers
 * ------------------------------------------------------------------------------------------- */

/* (g, beta) of T rows of ssm_ba outputs: per key head, its value heads' b then a. */
static void st_rs_gates(const st_rs *r, const st_layer *L, const float *ba, int64_t T, float *gb) {
    const int64_t nv = r->nv, per = nv / r->nk;
    const float *A = (const float *)L->ssm_a.data, *dt = (const float *)L->ssm_dt.data;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < nv; h++) {
            const int64_t kh = h / per, i = h % per;
            const float b = ba[t * 2 * nv + kh * 2 * per + i], a = ba[t * 2 * nv + kh * 2 * per + per + i];
            gb[t * 2 * nv + h] = A[h] * st_softplus(a + dt[h]);
            gb[t * 2 * nv + nv + h] = st_sigmoid(b);
        }
}

void st_cpu_linear_attn_block(strata_session *s, int il, int64_t T, int64_t pos0) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    const st_layer *L = &m->layers[il];
    st_rs *r = s->rs;
    const int64_t E = hp->n_embd, C = r->C, di = hp->ssm_d_inner, d = r->d;
    const int slot = r->slot[il];

    st_norm_rows(s->xn, s->x, &L->attn_norm, T, E, hp->norm_eps);
    st_mm mm[3] = {{&L->ssm_qkv, r->qkv, C}, {&L->ssm_gate, r->z, di}, {&L->ssm_ba, r->ba, 2 * r->nv}};
    st_matmul_multi(s->tp, mm, 3, s->xn, T, s->mm_ws);
    st_rs_gates(r, L, r->ba, T, r->gb);
    st_prof_mark(s, STRATA_PHASE_QKV);
    if (r->win_open && pos0 >= r->win_pos && pos0 + T <= r->win_pos + ST_RS_WINDOW) { /* rollback */
        const size_t W = ST_RS_WINDOW, off = (size_t)(pos0 - r->win_pos);
        memcpy(r->hist_qkv + ((size_t)slot * W + off) * (size_t)C, r->qkv, sizeof(float) * (size_t)(T * C));
    }
    st_rs_advance(r, s->tp, slot, L, r->qkv, r->gb, T, pos0, r->core, hp->norm_eps);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < r->nv; h++) {
            float *o = r->core + t * di + h * d;
            st_rmsnorm_gated(o, o, (const float *)L->ssm_norm.data, r->z + t * di + h * d, d, hp->norm_eps);
        }
    st_prof_mark(s, STRATA_PHASE_ATTN);
    st_matmul(s->tp, &L->ssm_out, r->core, T, s->proj, s->mm_ws);
    st_residual(m, s->x, s->proj, T * E);
    st_prof_mark(s, STRATA_PHASE_ATTN_OUT);
}

void st_cpu_gated_attn_block(strata_session *s, const st_layer *L, const st_kv_layer *kv, float *qg, float *gate,
                             int64_t T, int64_t pos0) {
    const strata_model *m = s->model;
    const st_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, hd = hp->head_dim, H = hp->n_head, Hk = hp->n_head_kv;
    const int64_t nq = H * hd, nk = Hk * hd, nv = Hk * hp->head_dim_v;

    st_norm_rows(s->xn, s->x, &L->attn_norm, T, E, hp->norm_eps);
    st_mm mm[3] = {{&L->wq, qg, 2 * nq}, {&L->wk, s->k, nk}, {&L->wv, s->v, nv}};
    st_matmul_multi(s->tp, mm, 3, s->xn, T, s->mm_ws);
    st_prof_mark(s, STRATA_PHASE_QKV);
    for (int64_t t = 0; t < T; t++) {
        float *q = s->q + t * nq, *k = s->k + t * nk;
        for (int64_t h = 0; h < H; h++) { /* each head's [query, gate] */
            const float *src = qg + t * 2 * nq + h * 2 * hd;
            st_rmsnorm(q + h * hd, src, (const float *)L->q_norm.data, hd, hp->norm_eps);
            memcpy(gate + t * nq + h * hd, src + hd, sizeof(float) * (size_t)hd);
        }
        for (int64_t h = 0; h < Hk; h++)
            st_rmsnorm(k + h * hd, k + h * hd, (const float *)L->k_norm.data, hd, hp->norm_eps);
        const float *cs = s->rope_cs + t * hp->n_rot;
        st_rope_apply(&s->rope, cs, q, H, hd);
        st_rope_apply(&s->rope, cs, k, Hk, hd);
    }
    const st_attn_shape sh = {.n_head = (int32_t)H, .n_head_kv = (int32_t)Hk, .head_dim = (int32_t)hd,
                              .head_dim_v = hp->head_dim_v, .scale = 1.0f / sqrtf((float)hd)};
    st_kv_store(kv, &sh, s->k, s->v, T, pos0);
    st_attention(s->tp, kv, &sh, s->q, T, pos0, s->att, s->att_scratch);
    for (int64_t i = 0; i < T * nq; i++) s->att[i] *= st_sigmoid(gate[i]);
    st_prof_mark(s, STRATA_PHASE_ATTN);
    st_matmul(s->tp, &L->wo, s->att, T, s->proj, s->mm_ws);
    st_residual(m, s->x, s->proj, T * E);
    st_prof_mark(s, STRATA_PHASE_ATTN_OUT);
}

void st_cpu_gated_attn_layer(strata_session *s, int il, int64_t T, int64_t pos0) {
    st_rs *r = s->rs;
    st_cpu_gated_attn_block(s, &s->model->layers[il], &s->kv.layers[il], r->qg, r->gate, T, pos0);
}
