/* ops.c - the dense CPU ops of ops.h: RMSNorm, softmax, SwiGLU, bias, RoPE (normal/NEOX,
 * linear/YaRN), activation quantization, the (multi-)matmul over the dot kernels, KV stores and
 * causal GQA attention. The MoE expert step is in ops_moe.c. */
#include "ops.h"
#include "dot.h"
#include "quant.h"

#include <math.h>
#include <stdlib.h>

/* ---------------------------------------------------------------------------------------------
 * Elementwise
 * ------------------------------------------------------------------------------------------- */

void st_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * (double)x[i];
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
}

void st_softmax(float *x, int64_t n) {
    /* four partial maxima (the same maximum) and four double partial sums added in a fixed
     * order at the end: no serial chain of double adds over the attended positions */
    float m4[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) m4[k] = x[i + k] > m4[k] ? x[i + k] : m4[k];
    for (; i < n; i++) m4[0] = x[i] > m4[0] ? x[i] : m4[0];
    float mx = m4[0];
    for (int k = 1; k < 4; k++) mx = m4[k] > mx ? m4[k] : mx;
    for (i = 0; i < n; i++) x[i] = expf(x[i] - mx);
    double s4[4] = {0.0, 0.0, 0.0, 0.0};
    for (i = 0; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) s4[k] += x[i + k];
    for (; i < n; i++) s4[0] += x[i];
    const float inv = (float)(1.0 / ((s4[0] + s4[1]) + (s4[2] + s4[3])));
    for (i = 0; i < n; i++) x[i] *= inv;
}

void st_swiglu(float *h, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) h[i] = st_silu(g[i]) * u[i];
}

void st_add_bias(float *y, const float *b, int64_t T, int64_t n) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < n; i++) y[t * n + i] += b[i];
}

/* ---------------------------------------------------------------------------------------------
 * RoPE
 * ------------------------------------------------------------------------------------------- */

st_rope_params st_rope_params_from(const st_hparams *hp, st_rope_style style) {
    st_rope_params p;
    p.style = style;
    p.n_rot = hp->n_rot;
    p.freq_base = hp->rope_freq_base;
    p.freq_scale = hp->rope_freq_scale > 0 ? hp->rope_freq_scale : 1.0f;
    p.ext_factor = hp->rope_scaling == ST_ROPE_SCALING_YARN ? hp->yarn_ext_factor : 0.0f;
    p.attn_factor = hp->yarn_attn_factor > 0 ? hp->yarn_attn_factor : 1.0f;
    p.beta_fast = hp->yarn_beta_fast;
    p.beta_slow = hp->yarn_beta_slow;
    p.n_ctx_orig = hp->yarn_orig_ctx > 0 ? hp->yarn_orig_ctx : hp->n_ctx_train;
    p.no_trunc = hp->yarn_no_trunc;
    return p;
}

/* Dimension at which the rotation of beta turns per original context happens (YaRN). */
static double st_yarn_corr_dim(double n_dims, double n_ctx_orig, double beta, double base) {
    return n_dims * log(n_ctx_orig / (beta * 2.0 * M_PI)) / (2.0 * log(base));
}

void st_rope_cache(const st_rope_params *p, int64_t pos, float *cs) {
    const int64_t half = p->n_rot / 2;
    double lo = 0.0, hi = 0.0;
    double mscale = p->attn_factor;
    if (p->ext_factor != 0.0f) {
        lo = st_yarn_corr_dim(p->n_rot, p->n_ctx_orig, p->beta_fast, p->freq_base);
        hi = st_yarn_corr_dim(p->n_rot, p->n_ctx_orig, p->beta_slow, p->freq_base);
        if (!p->no_trunc) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        if (lo < 0) lo = 0;
        if (hi > p->n_rot - 1) hi = p->n_rot - 1;
        mscale *= 1.0 + 0.1 * log(1.0 / p->freq_scale);
    }
    for (int64_t i = 0; i < half; i++) {
        /* theta_extrap = pos * base^(-2i/n_rot), in double */
        const double extrap = (double)pos * pow((double)p->freq_base, -2.0 * (double)i / (double)p->n_rot);
        const double interp = p->freq_scale * extrap;
        double theta = interp;
        if (p->ext_factor != 0.0f) {
            double y = ((double)i - lo) / fmax(0.001, hi - lo);
            double ramp = 1.0 - fmin(1.0, fmax(0.0, y));
            double mix = ramp * p->ext_factor;
            theta = interp * (1.0 - mix) + extrap * mix;
        }
        cs[2 * i] = (float)(cos(theta) * mscale);
        cs[2 * i + 1] = (float)(sin(theta) * mscale);
    }
}

void st_rope_apply(const st_rope_params *p, const float *cs, float *x, int64_t n_head, int64_t head_dim) {
    const int64_t half = p->n_rot / 2;
    for (int64_t h = 0; h < n_head; h++) {
        float *v = x + h * head_dim;
        for (int64_t i = 0; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const int64_t a = p->style == ST_ROPE_NEOX ? i : 2 * i;
            const int64_t b = p->style == ST_ROPE_NEOX ? i + half : 2 * i + 1;
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Activation quantization
 * ------------------------------------------------------------------------------------------- */

size_t st_act_bytes(strata_type wtype, int64_t n, int64_t T) {
    strata_type act = strata_act_type(wtype);
    int64_t rb = act == STRATA_TYPE_COUNT ? n * 4 : strata_row_bytes(act, n);
    return (size_t)(rb < 0 ? n * 4 : rb) * (size_t)T;
}

typedef struct {
    strata_type act;
    const float *x;
    int64_t n;
    size_t rb;
    uint8_t *xq;
} st_qa_job;

static void st_qa_task(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    const st_qa_job *j = ctx;
    for (int64_t t = b; t < e; t++) {
        const float *src = j->x + t * j->n;
        uint8_t *dst = j->xq + (size_t)t * j->rb;
        if (j->act == STRATA_TYPE_Q8_0) st_quantize_row_q8_0(src, (block_q8_0 *)dst, j->n);
        else if (j->act == STRATA_TYPE_Q8_K) st_quantize_row_q8_K(src, (block_q8_K *)dst, j->n);
        else memcpy(dst, src, (size_t)j->n * sizeof(float));
    }
}

void st_quantize_acts(st_threadpool *tp, strata_type wtype, const float *x, int64_t T, int64_t n,
                      void *xq) {
    st_qa_job j = {strata_act_type(wtype), x, n, st_act_bytes(wtype, n, 1), xq};
    /* each row costs ~n operations: only share out when there is enough of it */
    int64_t chunk = T * n < 65536 ? T : st_threadpool_chunk(tp, T, 2, 1);
    st_threadpool_run(tp, T, chunk, st_qa_task, &j);
}

/* ---------------------------------------------------------------------------------------------
 * Matmul
 * ------------------------------------------------------------------------------------------- */

#define ST_MM_MAX 8           /* matrices per multi-matmul */
#define ST_MM_TOK_BLOCK 32    /* tokens per block: a block's activations stay in L1/L2 */

/* The three activation layouts: F32, Q8_0, Q8_K; each gets its own region of the workspace. */
static int st_act_slot(strata_type act) {
    return act == STRATA_TYPE_Q8_0 ? 1 : act == STRATA_TYPE_Q8_K ? 2 : 0;
}

size_t st_matmul_wsize(int64_t n, int64_t T) {
    /* f32 copy is never needed (x is used directly); q8_0 and q8_K are each < 4 bytes/value */
    size_t q80 = st_act_bytes(STRATA_TYPE_Q8_0, n % 32 ? 32 * (n / 32 + 1) : n, T);
    size_t q8k = st_act_bytes(STRATA_TYPE_Q4_K, n % 256 ? 256 * (n / 256 + 1) : n, T);
    return q80 + q8k + st_q8_0_prep_bytes(n) * (size_t)T + 192; /* + the prepared Q8_0 rows */
}

typedef struct {
    const st_mm *mats;
    int n_mats;
    int64_t first[ST_MM_MAX + 1];    /* first global row of each matrix */
    const uint8_t *xq[ST_MM_MAX];    /* activations for each matrix */
    size_t xq_rb[ST_MM_MAX];         /* their row stride */
    st_vec_dot_fn dot[ST_MM_MAX];
    st_vec_dot_n_fn dotn[ST_MM_MAX];   /* several tokens per weight row, or NULL */
    st_vec_dot_tile_fn tile[ST_MM_MAX]; /* 16 weight rows x all tokens (AMX), or NULL */
    st_q8_0_dotp_fn dotp[ST_MM_MAX];   /* Q8_0 against the prepared rows below, or NULL */
    uint8_t *prepared;                 /* [T] prepared Q8_0 rows of x (dot.h's buffer layout) */
    int64_t T;
} st_mm_job;

/* Prepares the Q8_0 activation rows [b, e) (dot.h's st_q8_0_prep_fn). */
typedef struct {
    st_q8_0_prep_fn prep;
    const uint8_t *xq;
    size_t xq_rb;
    int64_t n;
    uint8_t *buf;
} st_mm_prep_job;

static void st_mm_prep_task(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    const st_mm_prep_job *p = ctx;
    st_q8_0_prep_rows(p->prep, p->xq, p->xq_rb, NULL, p->n, p->buf, b, e);
}

static void st_mm_task(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    const st_mm_job *j = ctx;
    int m = 0;
    while (m < j->n_mats && j->first[m + 1] <= b) m++;
    while (b < e) {
        const int64_t end = e < j->first[m + 1] ? e : j->first[m + 1];
        const st_mm *mm = &j->mats[m];
        const st_tensor *w = mm->w;
        const int64_t n = w->ne[0];
        const int64_t r0 = b - j->first[m], r1 = end - j->first[m];
        const st_vec_dot_fn dot = j->dot[m];
        const st_vec_dot_n_fn dotn = j->dotn[m];
        const st_q8_0_dotp_fn dotp = j->dotp[m];
        if (j->tile[m]) { /* blocks of 16 rows, every token: the same bits */
            for (int64_t r = r0; r < r1; r += ST_TILE_ROWS) {
                const int nr = (int)(r1 - r < ST_TILE_ROWS ? r1 - r : ST_TILE_ROWS);
                j->tile[m](n, mm->y + r, (size_t)mm->ldy, w->data + (size_t)r * w->row_bytes, w->row_bytes,
                           nr, j->xq[m], j->xq_rb[m], j->T);
            }
            b = end;
            m++;
            continue;
        }
        for (int64_t t0 = 0; t0 < j->T; t0 += ST_MM_TOK_BLOCK) {
            const int64_t t1 = t0 + ST_MM_TOK_BLOCK < j->T ? t0 + ST_MM_TOK_BLOCK : j->T;
            for (int64_t r = r0; r < r1; r++) {
                const void *row = w->data + (size_t)r * w->row_bytes;
                int64_t t = t0;
                if (dotp) /* Q8_0, prepared rows: ST_DOT_MAX_COLS tokens a pass, the same bits */
                    for (; t < t1; t += ST_DOT_MAX_COLS) {
                        const int nc = (int)(t1 - t < ST_DOT_MAX_COLS ? t1 - t : ST_DOT_MAX_COLS);
                        float o[ST_DOT_MAX_COLS];
                        const size_t pb = st_q8_0_prep_bytes(n);
                        dotp(n, o, row, st_q8_0_prep_xu(j->prepared, n, t), pb, st_q8_0_prep_dxp(j->prepared, n, t),
                             pb / sizeof(float), nc);
                        for (int c = 0; c < nc; c++) mm->y[(t + c) * mm->ldy + r] = o[c];
                    }
                if (dotn) /* ST_DOT_MAX_COLS tokens per pass over the row: the same bits */
                    for (; t + 1 < t1; t += ST_DOT_MAX_COLS) {
                        const int nc = (int)(t1 - t < ST_DOT_MAX_COLS ? t1 - t : ST_DOT_MAX_COLS);
                        float o[ST_DOT_MAX_COLS];
                        dotn(n, o, row, j->xq[m] + (size_t)t * j->xq_rb[m], j->xq_rb[m], nc);
                        for (int c = 0; c < nc; c++) mm->y[(t + c) * mm->ldy + r] = o[c];
                    }
                for (; t < t1; t++)
                    dot(n, &mm->y[t * mm->ldy + r], row, j->xq[m] + (size_t)t * j->xq_rb[m]);
            }
        }
        b = end;
        m++;
    }
}

void st_matmul_multi(st_threadpool *tp, const st_mm *mats, int n_mats, const float *x, int64_t T,
                     void *ws) {
    st_mm_job j;
    memset(&j, 0, sizeof j);
    j.mats = mats;
    j.n_mats = n_mats;
    j.T = T;
    const int64_t n = mats[0].w->ne[0];
    const uint8_t *slot_ptr[3] = {(const uint8_t *)x, NULL, NULL};
    size_t q80_bytes = st_act_bytes(STRATA_TYPE_Q8_0, n, T);
    uint8_t *slot_buf[3] = {NULL, (uint8_t *)ws, (uint8_t *)ws + ((q80_bytes + 63) & ~(size_t)63)};
    int any_tile = 0;
    for (int m = 0; m < n_mats; m++) {
        strata_type wt = mats[m].w->type;
        strata_type act = strata_act_type(wt);
        int s = st_act_slot(act);
        if (!slot_ptr[s]) {
            st_quantize_acts(tp, wt, x, T, n, slot_buf[s]);
            slot_ptr[s] = slot_buf[s];
        }
        j.xq[m] = slot_ptr[s];
        j.xq_rb[m] = st_act_bytes(wt, n, 1);
        j.dot[m] = st_vec_dot_get(wt);
        j.dotn[m] = st_vec_dot_n_get(wt);
        j.tile[m] = T >= st_tile_min_cols(wt) ? st_vec_dot_tile_get(wt) : NULL;
        any_tile |= j.tile[m] != NULL;
        j.first[m + 1] = j.first[m] + mats[m].w->ne[1];
    }
    /* Q8_0 matrices of a batch that the tiles do not take: their activation rows prepared once
     * (quants + 128, scales in lane order) for the prepared-row kernel */
    st_q8_0_prep_fn prep;
    st_q8_0_dotp_fn dotp;
    if (T >= 2 && st_q8_0_prepared_get(&prep, &dotp)) {
        int want = 0;
        for (int m = 0; m < n_mats; m++)
            if (mats[m].w->type == STRATA_TYPE_Q8_0 && !j.tile[m]) j.dotp[m] = dotp, want = 1;
        if (want) {
            const size_t q8k_bytes = st_act_bytes(STRATA_TYPE_Q4_K, n % 256 ? 256 * (n / 256 + 1) : n, T);
            uint8_t *base = slot_buf[2] + ((q8k_bytes + 63) & ~(size_t)63);
            st_mm_prep_job p = {prep, slot_ptr[1], st_act_bytes(STRATA_TYPE_Q8_0, n, 1), n, base};
            st_threadpool_run(tp, T, T * n < 65536 ? T : st_threadpool_chunk(tp, T, 2, 1), st_mm_prep_task, &p);
            j.prepared = base;
        }
    }
    const int64_t rows = j.first[n_mats];
    size_t bytes = 0;
    for (int m = 0; m < n_mats; m++) bytes += (size_t)mats[m].w->ne[1] * mats[m].w->row_bytes;
    /* enough chunks for balance; at least 4 rows so a chunk amortizes its bookkeeping; tiny
     * products (a router, a gate vector) stay on the caller: waking workers would cost more */
    int64_t chunk = bytes * (size_t)T < 48 * 1024 ? rows : st_threadpool_chunk(tp, rows, 8, T > 8 ? 1 : 4);
    if (any_tile) chunk = (chunk + ST_TILE_ROWS - 1) / ST_TILE_ROWS * ST_TILE_ROWS; /* whole tiles */
    st_threadpool_run(tp, rows, chunk, st_mm_task, &j);
}

void st_matmul(st_threadpool *tp, const st_tensor *w, const float *x, int64_t T, float *y, void *ws) {
    st_mm m = {w, y, w->ne[1]};
    st_matmul_multi(tp, &m, 1, x, T, ws);
}

/* ---------------------------------------------------------------------------------------------
 * KV cache and attention
 * ------------------------------------------------------------------------------------------- */

void st_kv_store(const st_kv_layer *kv, const st_attn_shape *s, const float *k, const float *v,
                 int64_t T, int64_t pos0) {
    const int64_t nk = (int64_t)s->n_head_kv * s->head_dim, nv = (int64_t)s->n_head_kv * s->head_dim_v;
    for (int64_t t = 0; t < T; t++) {
        const int64_t p = pos0 + t;
        const float *kt = k + t * nk;
        if (s->v_in_k) { /* the latent row is both */
            if (kv->type == STRATA_TYPE_F32) {
                memcpy((float *)kv->k + p * nk, kt, (size_t)nk * sizeof(float));
            } else {
                uint16_t *K = (uint16_t *)kv->k + p * nk;
                for (int64_t i = 0; i < nk; i++) K[i] = st_f32_to_fp16(kt[i]);
            }
            continue;
        }
        const float *vt = v + t * nv;
        if (kv->type == STRATA_TYPE_F32) {
            memcpy((float *)kv->k + p * nk, kt, (size_t)nk * sizeof(float));
            float *V = kv->vt;
            for (int64_t i = 0; i < nv; i++) V[i * kv->n_ctx + p] = vt[i];
        } else {
            uint16_t *K = (uint16_t *)kv->k + p * nk;
            for (int64_t i = 0; i < nk; i++) K[i] = st_f32_to_fp16(kt[i]);
            uint16_t *V = kv->vt;
            for (int64_t i = 0; i < nv; i++) V[i * kv->n_ctx + p] = st_f32_to_fp16(vt[i]);
        }
    }
}

typedef struct {
    const st_kv_layer *kv;
    const st_attn_shape *s;
    const float *q;
    int64_t pos0;
    float *out;
    float *scratch;
    st_vec_dot_fn dot;
    st_vec_dot_rows_fn dotr; /* the scores in one call (the same bits as dot a row), or NULL */
    size_t el;            /* bytes per cache element */
} st_attn_job;

/* st_softmax with one more term in the denominator, e^sink, that takes no value (gpt-oss's
 * attention sinks; ggml's soft_max with sinks: the maximum includes the sink). */
static void st_softmax_sink(float *x, int64_t n, float sink) {
    float mx = sink;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = expf(sink - mx);
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

/* Latent attention's values: o[d] = sum over p < np of w[p] * K[p][d] (d < hdv), K rows of
 * stride elements (f32 when el is 4, else f16), accumulated position by position. */
static void st_attn_v_from_k(float *o, const uint8_t *K, size_t stride, size_t el, int64_t np,
                             int64_t hdv, const float *w) {
    for (int64_t d = 0; d < hdv; d++) o[d] = 0.0f;
    for (int64_t p = 0; p < np; p++) {
        const float wp = w[p];
        if (el == 4) {
            const float *r = (const float *)K + (size_t)p * stride;
            for (int64_t d = 0; d < hdv; d++) o[d] += wp * r[d];
        } else {
            const uint16_t *r = (const uint16_t *)K + (size_t)p * stride;
            for (int64_t d = 0; d < hdv; d++) o[d] += wp * st_fp16_to_f32(r[d]);
        }
    }
}

static void st_attn_task(void *ctx, int64_t b, int64_t e, int tid) {
    const st_attn_job *j = ctx;
    const st_attn_shape *s = j->s;
    const int64_t hd = s->head_dim, hdv = s->head_dim_v;
    const int64_t group = s->n_head / s->n_head_kv;
    const int64_t nk = (int64_t)s->n_head_kv * hd;
    float *sc = j->scratch + (size_t)tid * (size_t)j->kv->n_ctx;
    const uint8_t *K = j->kv->k, *V = j->kv->vt;
    for (int64_t item = b; item < e; item++) {
        const int64_t t = item / s->n_head, h = item % s->n_head, hk = h / group;
        const int64_t end = j->pos0 + t + 1;    /* positions [p0, end) attended */
        const int64_t p0 = s->window > 0 && end > s->window ? end - s->window : 0;
        const int64_t np = end - p0;
        const float *q = j->q + (t * s->n_head + h) * hd;
        const uint8_t *K0 = K + (size_t)p0 * (size_t)nk * j->el;
        if (j->dotr) {
            j->dotr(hd, sc, K0 + (size_t)(hk * hd) * j->el, (size_t)nk, np, q);
            for (int64_t p = 0; p < np; p++) sc[p] *= s->scale;
        } else {
            for (int64_t p = 0; p < np; p++) {
                float d;
                j->dot(hd, &d, K0 + ((size_t)p * (size_t)nk + (size_t)(hk * hd)) * j->el, q);
                sc[p] = d * s->scale;
            }
        }
        if (s->sinks) st_softmax_sink(sc, np, s->sinks[h]);
        else st_softmax(sc, np);
        float *o = j->out + (t * s->n_head + h) * hdv;
        if (s->v_in_k) { /* o = sum_p sc[p] * K[p][0:hdv], positions in order */
            st_attn_v_from_k(o, K0 + (size_t)(hk * hd) * j->el, (size_t)nk, j->el, np, hdv, sc);
            continue;
        }
        /* [hdv][n_ctx], from position p0 */
        const uint8_t *Vh = V + ((size_t)(hk * hdv) * (size_t)j->kv->n_ctx + (size_t)p0) * j->el;
        if (j->dotr) /* every output dimension in one call: the same bits */
            j->dotr(np, o, Vh, (size_t)j->kv->n_ctx, hdv, sc);
        else
            for (int64_t d = 0; d < hdv; d++) j->dot(np, &o[d], Vh + (size_t)d * (size_t)j->kv->n_ctx * j->el, sc);
    }
}

void st_attention(st_threadpool *tp, const st_kv_layer *kv, const st_attn_shape *s, const float *q,
                  int64_t T, int64_t pos0, float *out, float *scratch) {
    st_attn_job j = {kv, s, q, pos0, out, scratch, st_vec_dot_get(kv->type), st_vec_dot_rows_get(kv->type),
                     kv->type == STRATA_TYPE_F32 ? 4 : 2};
    const int64_t items = T * s->n_head;
    /* short contexts are cheap per item: keep them on fewer chunks */
    int64_t chunk = (pos0 + T) * s->head_dim < 4096 ? st_threadpool_chunk(tp, items, 1, 1)
                                                    : st_threadpool_chunk(tp, items, 4, 1);
    st_threadpool_run(tp, items, chunk, st_attn_task, &j);
}
