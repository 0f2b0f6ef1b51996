/* ops_moe.c - the MoE expert step of ops.h: top-k routing and the grouped expert FFN
 * (gate/up -> SwiGLU -> down over a per-expert weight table, weighted sum in slot order). */
#include "ops.h"
#include "dot.h"
#include "quant.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>

/* ---------------------------------------------------------------------------------------------
 * Routing
 * ------------------------------------------------------------------------------------------- */

/* The softmax over all n logits as both routers compute it: max-subtracted, the sum in double;
 * expert e's probability is st_softmax_prob(logits[e], mx, sum). */
static double st_softmax_sum(const float *logits, int32_t n, float *mx_out) {
    float mx = -INFINITY;
    for (int32_t e = 0; e < n; e++) mx = logits[e] > mx ? logits[e] : mx;
    double sum = 0.0;
    for (int32_t e = 0; e < n; e++) sum += expf(logits[e] - mx);
    *mx_out = mx;
    return sum;
}

static inline float st_softmax_prob(float logit, float mx, double sum) {
    return (float)(expf(logit - mx) / sum);
}

void st_route_topk(const float *logits, int32_t n_expert, int32_t k, int norm, int32_t *ids,
                   float *wts) {
    float mx;
    const double sum = st_softmax_sum(logits, n_expert, &mx);
    /* top-k by repeated selection: strictly greater wins, so ties go to the lower index */
    for (int32_t s = 0; s < k; s++) {
        int32_t best = -1;
        for (int32_t e = 0; e < n_expert; e++) {
            int taken = 0;
            for (int32_t p = 0; p < s; p++) taken |= ids[p] == e;
            if (taken) continue;
            if (best < 0 || logits[e] > logits[best]) best = e;
        }
        ids[s] = best;
        wts[s] = st_softmax_prob(logits[best], mx, sum);
    }
    if (norm) {
        float tot = 0.0f;
        for (int32_t s = 0; s < k; s++) tot += wts[s];
        for (int32_t s = 0; s < k; s++) wts[s] /= tot;
    }
}

/* Scores of the chosen experts for st_route_scored's groups: the sum of each group's best two
 * selection scores; only the n_used best groups (ties: lower index) keep their experts, the rest
 * are set to -inf. */
static void st_route_groups(const st_route_cfg *c, float *sel) {
    const int32_t G = c->n_groups, per = c->n_expert / G;
    float gs[ST_ROUTE_MAX_EXPERT];
    uint8_t keep[ST_ROUTE_MAX_EXPERT];
    for (int32_t g = 0; g < G; g++) {
        float a = -INFINITY, b = -INFINITY; /* best, second */
        for (int32_t i = 0; i < per; i++) {
            const float v = sel[g * per + i];
            if (v > a) { b = a; a = v; }
            else if (v > b) b = v;
        }
        gs[g] = a + b;
        keep[g] = 0;
    }
    for (int32_t s = 0; s < c->n_group_used; s++) {
        int32_t best = -1;
        for (int32_t g = 0; g < G; g++)
            if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
        keep[best] = 1;
    }
    for (int32_t g = 0; g < G; g++)
        if (!keep[g])
            for (int32_t i = 0; i < per; i++) sel[g * per + i] = -INFINITY;
}

void st_route_scored(const st_route_cfg *c, const float *logits, int32_t *ids, float *wts) {
    const int32_t X = c->n_expert, k = c->k;
    if (c->gating == ST_GATING_SOFTMAX && !c->bias && c->n_groups <= 1) {
        st_route_topk(logits, X, k, c->norm, ids, wts); /* the plain path, bit for bit */
    } else {
        float probs[ST_ROUTE_MAX_EXPERT], sel[ST_ROUTE_MAX_EXPERT];
        if (c->gating == ST_GATING_SIGMOID) {
            for (int32_t e = 0; e < X; e++) probs[e] = 1.0f / (1.0f + expf(-logits[e]));
        } else if (c->gating == ST_GATING_SOFTMAX_WEIGHT) { /* the logits choose; softmax below */
            for (int32_t e = 0; e < X; e++) probs[e] = logits[e];
        } else { /* st_route_topk's probabilities; the selection adds the bias or groups */
            float mx;
            const double sum = st_softmax_sum(logits, X, &mx);
            for (int32_t e = 0; e < X; e++) probs[e] = st_softmax_prob(logits[e], mx, sum);
        }
        for (int32_t e = 0; e < X; e++) sel[e] = probs[e] + (c->bias ? c->bias[e] : 0.0f);
        if (c->n_groups > 1) st_route_groups(c, sel);
        for (int32_t s = 0; s < k; s++) { /* strictly greater wins: ties go to the lower index */
            int32_t best = -1;
            for (int32_t e = 0; e < X; e++) {
                if (sel[e] == -INFINITY) continue;
                if (best < 0 || sel[e] > sel[best]) best = e;
            }
            ids[s] = best;
            wts[s] = probs[best];
            sel[best] = -INFINITY;
        }
        if (c->gating == ST_GATING_SOFTMAX_WEIGHT) { /* softmax over the k chosen logits */
            float mx = wts[0], tot = 0.0f;
            for (int32_t s = 1; s < k; s++) mx = wts[s] > mx ? wts[s] : mx;
            for (int32_t s = 0; s < k; s++) tot += wts[s] = expf(wts[s] - mx);
            for (int32_t s = 0; s < k; s++) wts[s] /= tot;
        }
        if (c->norm) { /* llama.cpp clamps the sum below at 2^-14 */
            float tot = 0.0f;
            for (int32_t s = 0; s < k; s++) tot += wts[s];
            if (tot < 6.103515625e-5f) tot = 6.103515625e-5f;
            for (int32_t s = 0; s < k; s++) wts[s] /= tot;
        }
    }
    if (c->scale != 1.0f)
        for (int32_t s = 0; s < k; s++) wts[s] *= c->scale;
}

/* ---------------------------------------------------------------------------------------------
 * Grouped expert FFN
 * ------------------------------------------------------------------------------------------- */

static size_t st_moe_state_bytes(void);

size_t st_moe_wsize(int64_t T, int32_t k, int32_t n_expert, int64_t n_embd, int64_t n_ff) {
    const size_t P = (size_t)T * (size_t)k;
    size_t sz = st_moe_state_bytes();                                       /* the call's state */
    sz += st_round_up(sizeof(int64_t) * ((size_t)n_expert * 2 + 2), 64);   /* counts, offsets */
    sz += st_round_up(sizeof(int32_t) * ((size_t)n_expert + 1), 64);       /* active experts */
    sz += 2 * st_round_up(sizeof(int32_t) * P, 64);                       /* pair_tok, pair_of */
    sz += 2 * st_round_up(sizeof(float) * (size_t)T * (size_t)n_embd, 64); /* xq gate, xq up (<= f32) */
    sz += st_round_up(sizeof(float) * P * (size_t)n_ff, 64);              /* h */
    sz += st_round_up(sizeof(float) * P * (size_t)n_ff, 64);              /* hq (<= f32) */
    sz += st_round_up(sizeof(float) * P * (size_t)n_embd, 64);            /* y */
    sz += st_round_up(P * (size_t)strata_row_bytes(STRATA_TYPE_Q8_K, (n_embd + 255) / 256 * 256), 64); /* xg */
    sz += st_round_up(P * st_q8_0_prep_bytes(n_embd), 64); /* x's prepared Q8_0 rows, pair order */
    sz += st_round_up(P * st_q8_0_prep_bytes(n_ff), 64);   /* h's */
    return sz;
}

typedef struct {
    const st_expert *experts;
    const int32_t *active;     /* [n_active] expert ids with tokens, ascending */
    const int64_t *offs;       /* [n_expert + 1] first pair of each expert */
    const int32_t *pair_tok;   /* [P] token of each pair (grouped by expert) */
    const int32_t *pair_of;    /* [T*k] pair index of (token, slot) */
    const int32_t *ids;        /* [T*k] the slots' experts */
    const float *wts;          /* [T*k] */
    int32_t k;
    int64_t n_embd, n_ff;
    const uint8_t *xq_g, *xq_u; size_t rb_g, rb_u;
    uint8_t *xg;               /* [P][rb_g] x's activation rows in pair order (several-row kernels) */
    float *h;                  /* [P][n_ff] */
    uint8_t *hq; size_t rb_h;  /* [P][rb_h] */
    float *y;                  /* [P][n_embd] */
    float *out;                /* [T][n_embd] */
    strata_type down_type;
    st_vec_dot_fn dot_g, dot_u, dot_d;
    st_vec_dot_n_fn dotn_gu, dotn_d;   /* several pairs per weight row (same bits), or NULL */
    st_vec_dot_tile_fn tile_gu, tile_d; /* 16 weight rows x an expert's pairs (AMX), or NULL */
    int64_t tile_min_gu, tile_min_d;    /* the fewest pairs an expert hands to them */
    /* Q8_0 weights against prepared activation rows (dot.h's buffer layout), or NULL: x's rows
     * in pair order (px), h's rows (ph) */
    st_q8_0_prep_fn prep;
    st_q8_0_dotp_fn dotp_gu, dotp_d;
    uint8_t *px, *ph;
} st_moe_job;

/* One hidden value of expert x's row r from its gate and up dot products: biases, then the
 * expert's activation (ops.h's st_expert_act; llama.cpp's swiglu_oai for gpt-oss). */
static inline float st_moe_act(const st_expert *x, int64_t r, float g, float u) {
    if (x->b_gate) g += x->b_gate[r];
    if (x->b_up) u += x->b_up[r];
    if (x->act == ST_ACT_SWIGLU_OAI) return st_det_swiglu_oai(g, u); /* (the GPU's bits too) */
    return st_silu(g) * u;
}

/* Pairs per tile call of gate/up (the up results' buffer on the stack). */
#define ST_MOE_TILE_GROUP 64

/* A row chunk rounded up to whole tiles when a tile kernel is in use. */
static int64_t st_tile_chunk(int64_t chunk, st_vec_dot_tile_fn tile) {
    return tile ? (chunk + ST_TILE_ROWS - 1) / ST_TILE_ROWS * ST_TILE_ROWS : chunk;
}

/* Stage 0 (with several-row kernels): each pair's activation row copied into pair order. */
static void st_moe_gather(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    const st_moe_job *j = ctx;
    for (int64_t i = b; i < e; i++)
        memcpy(j->xg + (size_t)i * j->rb_g, j->xq_g + (size_t)j->pair_tok[i] * j->rb_g, j->rb_g);
}

/* Stage 1: rows of gate/up of every active expert; global row = active index * n_ff + row. */
static void st_moe_gate_up(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    const st_moe_job *j = ctx;
    /* (active index, row) of b, then stepped: no 64-bit division per row (a decode step's
     * 6,144 gate/up and 16,384 down rows on qwen3 made two per row) */
    int64_t a = b / j->n_ff, r = b - a * j->n_ff;
    for (int64_t g = b; g < e;) {
        const int32_t ex = j->active[a];
        const st_expert *x = &j->experts[ex];
        const void *wg = st_tensor_row(&x->gate, 0, r), *wu = st_tensor_row(&x->up, 0, r);
        int64_t i = j->offs[ex], step = 1;
        if (j->tile_gu && j->offs[ex + 1] - i >= j->tile_min_gu) {
            /* 16 rows at once; the up rows through a small buffer, in groups of pairs */
            const int64_t lim = j->n_ff - r < e - g ? j->n_ff - r : e - g;
            const int nr = (int)(lim < ST_TILE_ROWS ? lim : ST_TILE_ROWS);
            for (; i < j->offs[ex + 1]; i += ST_MOE_TILE_GROUP) {
                const int64_t np = j->offs[ex + 1] - i < ST_MOE_TILE_GROUP ? j->offs[ex + 1] - i : ST_MOE_TILE_GROUP;
                float vu[ST_MOE_TILE_GROUP][ST_TILE_ROWS];
                const uint8_t *xr = j->xg + (size_t)i * j->rb_g;
                float *hg = j->h + i * j->n_ff + r;
                j->tile_gu(j->n_embd, hg, (size_t)j->n_ff, wg, x->gate.row_bytes, nr, xr, j->rb_g, np);
                j->tile_gu(j->n_embd, vu[0], ST_TILE_ROWS, wu, x->up.row_bytes, nr, xr, j->rb_g, np);
                for (int64_t c = 0; c < np; c++)
                    for (int k = 0; k < nr; k++) hg[c * j->n_ff + k] = st_moe_act(x, r + k, hg[c * j->n_ff + k], vu[c][k]);
            }
            step = nr;
        }
        if (j->dotp_gu) /* Q8_0 gate and up against the pairs' prepared rows: the same bits */
            for (; i < j->offs[ex + 1]; i += ST_DOT_MAX_COLS) {
                const int64_t left = j->offs[ex + 1] - i;
                const int nc = (int)(left < ST_DOT_MAX_COLS ? left : ST_DOT_MAX_COLS);
                float vg[ST_DOT_MAX_COLS], vu[ST_DOT_MAX_COLS];
                const uint8_t *xu = st_q8_0_prep_xu(j->px, j->n_embd, i);
                const float *dx = st_q8_0_prep_dxp(j->px, j->n_embd, i);
                const size_t pb = st_q8_0_prep_bytes(j->n_embd);
                j->dotp_gu(j->n_embd, vg, wg, xu, pb, dx, pb / sizeof(float), nc);
                j->dotp_gu(j->n_embd, vu, wu, xu, pb, dx, pb / sizeof(float), nc);
                for (int c = 0; c < nc; c++) j->h[(i + c) * j->n_ff + r] = st_moe_act(x, r, vg[c], vu[c]);
            }
        if (j->dotn_gu) /* gate and up share the activation type: up to 4 pairs per row pass */
            for (; i + 1 < j->offs[ex + 1]; i += ST_DOT_MAX_COLS) {
                const int64_t left = j->offs[ex + 1] - i;
                const int nc = (int)(left < ST_DOT_MAX_COLS ? left : ST_DOT_MAX_COLS);
                float vg[ST_DOT_MAX_COLS], vu[ST_DOT_MAX_COLS];
                const uint8_t *xr = j->xg + (size_t)i * j->rb_g;
                j->dotn_gu(j->n_embd, vg, wg, xr, j->rb_g, nc);
                j->dotn_gu(j->n_embd, vu, wu, xr, j->rb_g, nc);
                for (int c = 0; c < nc; c++) j->h[(i + c) * j->n_ff + r] = st_moe_act(x, r, vg[c], vu[c]);
            }
        for (; i < j->offs[ex + 1]; i++) {
            const int64_t t = j->pair_tok[i];
            float vg, vu;
            j->dot_g(j->n_embd, &vg, wg, j->xq_g + (size_t)t * j->rb_g);
            j->dot_u(j->n_embd, &vu, wu, j->xq_u + (size_t)t * j->rb_u);
            j->h[i * j->n_ff + r] = st_moe_act(x, r, vg, vu);
        }
        g += step;
        r += step;
        if (r == j->n_ff) { /* the next expert's first row */
            r = 0;
            a++;
        }
    }
}

/* Stage 2: quantize each pair's hidden row for the down projection. */
static void st_moe_quant_h(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    const st_moe_job *j = ctx;
    for (int64_t i = b; i < e; i++) {
        const float *src = j->h + i * j->n_ff;
        uint8_t *dst = j->hq + (size_t)i * j->rb_h;
        strata_type act = strata_act_type(j->down_type);
        if (act == STRATA_TYPE_Q8_0) st_quantize_row_q8_0(src, (block_q8_0 *)dst, j->n_ff);
        else if (act == STRATA_TYPE_Q8_K) st_quantize_row_q8_K(src, (block_q8_K *)dst, j->n_ff);
        else memcpy(dst, src, (size_t)j->n_ff * sizeof(float));
    }
}

/* Stage 3: rows of down of every active expert; global row = active index * n_embd + row. */
static void st_moe_down(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    const st_moe_job *j = ctx;
    int64_t a = b / j->n_embd, r = b - a * j->n_embd; /* as st_moe_gate_up */
    for (int64_t g = b; g < e;) {
        const int32_t ex = j->active[a];
        const st_tensor *down = &j->experts[ex].down;
        const void *wd = st_tensor_row(down, 0, r);
        int64_t i = j->offs[ex], step = 1;
        if (j->tile_d && j->offs[ex + 1] - i >= j->tile_min_d) { /* 16 rows, all the pairs */
            const int64_t lim = j->n_embd - r < e - g ? j->n_embd - r : e - g;
            const int nr = (int)(lim < ST_TILE_ROWS ? lim : ST_TILE_ROWS);
            j->tile_d(j->n_ff, j->y + i * j->n_embd + r, (size_t)j->n_embd, wd, down->row_bytes, nr,
                      j->hq + (size_t)i * j->rb_h, j->rb_h, j->offs[ex + 1] - i);
            i = j->offs[ex + 1];
            step = nr;
        }
        if (j->dotp_d) /* Q8_0 down against the pairs' prepared h rows: the same bits */
            for (; i < j->offs[ex + 1]; i += ST_DOT_MAX_COLS) {
                const int64_t left = j->offs[ex + 1] - i;
                const int nc = (int)(left < ST_DOT_MAX_COLS ? left : ST_DOT_MAX_COLS);
                float o[ST_DOT_MAX_COLS];
                const size_t pb = st_q8_0_prep_bytes(j->n_ff);
                j->dotp_d(j->n_ff, o, wd, st_q8_0_prep_xu(j->ph, j->n_ff, i), pb, st_q8_0_prep_dxp(j->ph, j->n_ff, i),
                          pb / sizeof(float), nc);
                for (int c = 0; c < nc; c++) j->y[(i + c) * j->n_embd + r] = o[c];
            }
        if (j->dotn_d)
            for (; i + 1 < j->offs[ex + 1]; i += ST_DOT_MAX_COLS) {
                const int64_t left = j->offs[ex + 1] - i;
                const int nc = (int)(left < ST_DOT_MAX_COLS ? left : ST_DOT_MAX_COLS);
                float o[ST_DOT_MAX_COLS];
                j->dotn_d(j->n_ff, o, wd, j->hq + (size_t)i * j->rb_h, j->rb_h, nc);
                for (int c = 0; c < nc; c++) j->y[(i + c) * j->n_embd + r] = o[c];
            }
        for (; i < j->offs[ex + 1]; i++)
            j->dot_d(j->n_ff, &j->y[i * j->n_embd + r], wd, j->hq + (size_t)i * j->rb_h);
        g += step;
        r += step;
        if (r == j->n_embd) {
            r = 0;
            a++;
        }
    }
}

/* Stages 0b and 2b (Q8_0 weights, several tokens): x's rows in pair order and h's rows prepared
 * for the prepared-row kernel (dot.h). */
static void st_moe_prep_x(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    const st_moe_job *j = ctx;
    st_q8_0_prep_rows(j->prep, j->xq_g, j->rb_g, j->pair_tok, j->n_embd, j->px, b, e);
}

static void st_moe_prep_h(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    const st_moe_job *j = ctx;
    st_q8_0_prep_rows(j->prep, j->hq, j->rb_h, NULL, j->n_ff, j->ph, b, e);
}

/* ---- one token in one dispatch ---------------------------------------------------------------
 * A decode step's expert step (T == 1) as one parallel region instead of gate/up, a barrier,
 * h's quantization on one thread, down, a barrier: the items are gate/up's row chunks, then
 * down's, claimed in that order (the pool hands items out in increasing order). The thread that
 * finishes an expert's last gate/up rows quantizes its h row and marks the expert ready; a down
 * chunk waits (spinning) for the experts it covers. Every gate/up chunk is claimed before any
 * down chunk, by a thread that is computing it, so a wait always ends. The rows are computed by
 * the same functions with the same chunks as the staged path: the same bits. */

#define ST_MOE_ONE_MAXK 64 /* most slots (active experts) a one-dispatch step tracks */

typedef struct {
    const st_moe_job *j;
    int64_t n_active;
    int64_t chunk_gu, chunk_d, n_gu, n_d; /* chunk sizes (rows) and counts of the two stages */
    int64_t rows_gu, rows_d;
    _Atomic int64_t done[ST_MOE_ONE_MAXK]; /* gate/up rows finished, per active expert */
    _Atomic int ready[ST_MOE_ONE_MAXK];    /* h quantized, per active expert */
} st_moe_one;

static int st_moe_one_on = 1;
void st_moe_set_one_dispatch(int on) { st_moe_one_on = on != 0; }

/* A call between st_moe_ffn_begin and st_moe_ffn_end, kept at the start of the workspace. The
 * row counts and chunks of both stages are o's (o's counters serve only ST_MOE_ONE). */
typedef struct {
    st_moe_job j;
    st_moe_one o;
    int mode;                  /* ST_MOE_NONE / _ONE (one dispatch, posted to the pool) / _STAGES */
    int64_t T, n_pairs;
} st_moe_state;

enum { ST_MOE_NONE, ST_MOE_ONE, ST_MOE_STAGES };

static void st_moe_quant_expert(const st_moe_job *j, int64_t a) {
    const int32_t ex = j->active[a];
    st_moe_quant_h((void *)j, j->offs[ex], j->offs[ex + 1], 0);
}

static void st_moe_one_task(void *ctx, int64_t b, int64_t e, int tid) {
    st_moe_one *o = ctx;
    const st_moe_job *j = o->j;
    for (int64_t it = b; it < e; it++) {
        if (it < o->n_gu) { /* gate/up rows [r0, r1) */
            const int64_t r0 = it * o->chunk_gu, r1 = r0 + o->chunk_gu < o->rows_gu ? r0 + o->chunk_gu : o->rows_gu;
            st_moe_gate_up((void *)j, r0, r1, tid);
            for (int64_t g = r0; g < r1;) { /* count them in per expert; the last one quantizes */
                const int64_t a = g / j->n_ff, end = (a + 1) * j->n_ff < r1 ? (a + 1) * j->n_ff : r1;
                if (atomic_fetch_add_explicit(&o->done[a], end - g, memory_order_acq_rel) + (end - g) == j->n_ff) {
                    st_moe_quant_expert(j, a);
                    atomic_store_explicit(&o->ready[a], 1, memory_order_release);
                }
                g = end;
            }
        } else { /* down rows [r0, r1), once their experts' h rows are ready */
            const int64_t r0 = (it - o->n_gu) * o->chunk_d;
            const int64_t r1 = r0 + o->chunk_d < o->rows_d ? r0 + o->chunk_d : o->rows_d;
            for (int64_t a = r0 / j->n_embd; a <= (r1 - 1) / j->n_embd; a++)
                for (int spin = 0; !atomic_load_explicit(&o->ready[a], memory_order_acquire); spin++) {
                    if (spin >= 256 && spin % 64 == 0) sched_yield();
                    else ST_PAUSE();
                }
            st_moe_down((void *)j, r0, r1, tid);
        }
    }
}

/* Stage 4: weighted sum per token in slot order 0..k-1. */
static void st_moe_combine(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    const st_moe_job *j = ctx;
    for (int64_t t = b; t < e; t++) {
        float *o = j->out + t * j->n_embd;
        int first = 1;
        for (int32_t s = 0; s < j->k; s++) {
            const int32_t pi = j->pair_of[t * j->k + s];
            if (pi < 0) continue; /* a dropped slot (id outside the table) adds nothing */
            const float w = j->wts[t * j->k + s];
            const float *y = j->y + (int64_t)pi * j->n_embd;
            const float *bd = j->experts[j->ids[t * j->k + s]].b_down;
            if (bd) /* (gpt-oss) the expert's down bias, weighted with its row */
                for (int64_t i = 0; i < j->n_embd; i++) o[i] = (first ? 0.0f : o[i]) + w * (y[i] + bd[i]);
            else if (first)
                for (int64_t i = 0; i < j->n_embd; i++) o[i] = w * y[i];
            else
                for (int64_t i = 0; i < j->n_embd; i++) o[i] += w * y[i];
            first = 0;
        }
        if (first) memset(o, 0, sizeof(float) * (size_t)j->n_embd);
    }
}

static size_t st_moe_state_bytes(void) { return st_round_up(sizeof(st_moe_state), 64); }

/* The workspace's arrays after the state, as st_moe_wsize lays them out. */
typedef struct {
    int64_t *counts, *offs;
    int32_t *active, *pair_tok, *pair_of;
    uint8_t *xq_g, *xq_u;
    float *h;
    uint8_t *hq;
    float *y;
    uint8_t *xg, *px, *ph;
} st_moe_bufs;

/* Carves the workspace ws into the arrays of a step of T tokens, P = T*k slots. */
static void st_moe_carve(void *ws, int32_t n_expert, int64_t T, size_t P, int64_t n_embd,
                         int64_t n_ff, st_moe_bufs *b) {
    uint8_t *p = (uint8_t *)ws + st_moe_state_bytes();
    b->counts = (int64_t *)p;
    b->offs = b->counts + n_expert;
    p += st_round_up(sizeof(int64_t) * ((size_t)n_expert * 2 + 2), 64);
    b->active = (int32_t *)p;
    p += st_round_up(sizeof(int32_t) * ((size_t)n_expert + 1), 64);
    b->pair_tok = (int32_t *)p;
    p += st_round_up(sizeof(int32_t) * P, 64);
    b->pair_of = (int32_t *)p;
    p += st_round_up(sizeof(int32_t) * P, 64);
    b->xq_g = p;
    p += st_round_up(sizeof(float) * (size_t)T * (size_t)n_embd, 64);
    b->xq_u = p;
    p += st_round_up(sizeof(float) * (size_t)T * (size_t)n_embd, 64);
    b->h = (float *)p;
    p += st_round_up(sizeof(float) * P * (size_t)n_ff, 64);
    b->hq = p;
    p += st_round_up(sizeof(float) * P * (size_t)n_ff, 64);
    b->y = (float *)p;
    p += st_round_up(sizeof(float) * P * (size_t)n_embd, 64);
    b->xg = p;
    p += st_round_up(P * (size_t)strata_row_bytes(STRATA_TYPE_Q8_K, (n_embd + 255) / 256 * 256), 64);
    b->px = p;
    p += st_round_up(P * st_q8_0_prep_bytes(n_embd), 64);
    b->ph = p;
}

/* Groups the (token, slot) pairs by expert: a counting sort, stable in (token, slot) order;
 * returns the number of active experts. */
static int32_t st_moe_group(const int32_t *ids, size_t P, int32_t k, int32_t n_expert,
                            const st_moe_bufs *b) {
    int64_t *counts = b->counts, *offs = b->offs;
    memset(counts, 0, sizeof(int64_t) * (size_t)n_expert);
    for (size_t i = 0; i < P; i++)
        if (ids[i] >= 0 && ids[i] < n_expert) counts[ids[i]]++;
    int32_t n_active = 0;
    offs[0] = 0;
    for (int32_t e = 0; e < n_expert; e++) {
        offs[e + 1] = offs[e] + counts[e];
        if (counts[e]) b->active[n_active++] = e;
        counts[e] = offs[e]; /* reused as the fill cursor */
    }
    for (size_t i = 0; i < P; i++) {
        if (ids[i] < 0 || ids[i] >= n_expert) { b->pair_of[i] = -1; continue; }
        int64_t at = counts[ids[i]]++;
        b->pair_tok[at] = (int32_t)(i / (size_t)k);
        b->pair_of[i] = (int32_t)at;
    }
    return n_active;
}

/* Quantizes x's activation rows and picks the job's kernels for e0's weight types. */
static void st_moe_job_kernels(st_threadpool *tp, st_moe_job *j, const st_expert *e0,
                               const float *x, int64_t T, const st_moe_bufs *b) {
    const int64_t n_embd = j->n_embd, n_ff = j->n_ff;
    /* activation rows of x, once per activation type (the table's experts share types) */
    const strata_type tg = e0->gate.type, tu = e0->up.type, td = e0->down.type;
    st_quantize_acts(tp, tg, x, T, n_embd, b->xq_g);
    j->xq_g = b->xq_g;
    j->rb_g = st_act_bytes(tg, n_embd, 1);
    if (strata_act_type(tu) == strata_act_type(tg)) {
        j->xq_u = b->xq_g;
    } else {
        st_quantize_acts(tp, tu, x, T, n_embd, b->xq_u);
        j->xq_u = b->xq_u;
    }
    j->rb_u = st_act_bytes(tu, n_embd, 1);
    j->down_type = td;
    j->rb_h = st_act_bytes(td, n_ff, 1);
    j->dot_g = st_vec_dot_get(tg);
    j->dot_u = st_vec_dot_get(tu);
    j->dot_d = st_vec_dot_get(td);
    /* several-row kernels: gate and up of one type (one gathered activation copy), down */
    j->dotn_gu = tg == tu && T > 1 ? st_vec_dot_n_get(tg) : NULL;
    j->dotn_d = T > 1 ? st_vec_dot_n_get(td) : NULL;
    /* AMX tiles where an expert has enough pairs (checked per expert); whole tiles per chunk */
    j->tile_gu = tg == tu && T > 1 ? st_vec_dot_tile_get(tg) : NULL;
    j->tile_d = T > 1 ? st_vec_dot_tile_get(td) : NULL;
    j->tile_min_gu = st_tile_min_cols(tg);
    j->tile_min_d = st_tile_min_cols(td);
    j->xg = b->xg;
    /* Q8_0 experts of a batch: x's and h's rows prepared for the prepared-row kernel (the tiles
     * still take the experts with enough pairs) */
    st_q8_0_dotp_fn dotp = NULL;
    if (T > 1 && st_q8_0_prepared_get(&j->prep, &dotp)) {
        j->dotp_gu = tg == STRATA_TYPE_Q8_0 && tu == STRATA_TYPE_Q8_0 ? dotp : NULL;
        j->dotp_d = td == STRATA_TYPE_Q8_0 ? dotp : NULL;
        j->px = b->px;
        j->ph = b->ph;
    }
}

/* Sizes both stages' chunks and picks the mode; one dispatch posts its items to the pool now. */
static void st_moe_plan(st_threadpool *tp, st_moe_state *S, int32_t n_active, int64_t T) {
    const st_moe_job *j = &S->j;
    st_moe_one *o = &S->o;
    o->j = &S->j;
    o->n_active = n_active;
    o->rows_gu = (int64_t)n_active * j->n_ff;
    o->rows_d = (int64_t)n_active * j->n_embd;
    o->chunk_gu = st_tile_chunk(st_threadpool_chunk(tp, o->rows_gu, 8, 2), j->tile_gu);
    o->chunk_d = st_tile_chunk(st_threadpool_chunk(tp, o->rows_d, 8, 2), j->tile_d);
    o->n_gu = (o->rows_gu + o->chunk_gu - 1) / o->chunk_gu;
    o->n_d = (o->rows_d + o->chunk_d - 1) / o->chunk_d;
    S->mode = ST_MOE_STAGES;
    if (st_moe_one_on && T == 1 && n_active <= ST_MOE_ONE_MAXK && st_threadpool_n_threads(tp) > 1) {
        for (int i = 0; i < n_active; i++) {
            atomic_init(&o->done[i], 0);
            atomic_init(&o->ready[i], 0);
        }
        S->mode = ST_MOE_ONE;
        /* the workers start now; the caller joins in st_moe_ffn_end */
        st_threadpool_post(tp, o->n_gu + o->n_d, 1, st_moe_one_task, o);
    }
}

void st_moe_ffn_begin(st_threadpool *tp, const st_expert *experts, int32_t n_expert, const float *x,
                      int64_t T, const int32_t *ids, const float *wts, int32_t k, float *out, void *ws) {
    st_moe_state *S = ws;
    S->mode = ST_MOE_NONE;
    S->n_pairs = 0;
    const size_t P = (size_t)T * (size_t)k;
    size_t first_valid = 0;
    while (first_valid < P && (ids[first_valid] < 0 || ids[first_valid] >= n_expert)) first_valid++;
    if (first_valid == P) { /* every slot dropped: nothing to compute */
        memset(out, 0, sizeof(float) * (size_t)T * (size_t)experts[0].down.ne[1]);
        return;
    }
    const st_expert *e0 = &experts[ids[first_valid]];
    const int64_t n_embd = e0->gate.ne[0], n_ff = e0->gate.ne[1];
    st_moe_bufs b;
    st_moe_carve(ws, n_expert, T, P, n_embd, n_ff, &b);
    const int32_t n_active = st_moe_group(ids, P, k, n_expert, &b);

    st_moe_job j;
    memset(&j, 0, sizeof j);
    S->T = T;
    j.experts = experts;
    j.active = b.active;
    j.offs = b.offs;
    j.pair_tok = b.pair_tok;
    j.pair_of = b.pair_of;
    j.wts = wts;
    j.ids = ids;
    j.k = k;
    j.n_embd = n_embd;
    j.n_ff = n_ff;
    j.h = b.h;
    j.hq = b.hq;
    j.y = b.y;
    j.out = out;
    st_moe_job_kernels(tp, &j, e0, x, T, &b);
    /* the grouped pairs: P less the dropped slots (pair_tok holds only these) */
    const int64_t n_pairs = b.offs[n_expert];
    const int64_t chunk_p = n_pairs * n_embd < 65536 ? n_pairs : st_threadpool_chunk(tp, n_pairs, 2, 1);
    if (j.dotp_gu) st_threadpool_run(tp, n_pairs, chunk_p, st_moe_prep_x, &j);
    if (j.dotn_gu || j.tile_gu) /* both read x's rows in pair order */
        st_threadpool_run(tp, n_pairs, n_pairs * (int64_t)j.rb_g < 65536 ? n_pairs
                          : st_threadpool_chunk(tp, n_pairs, 2, 1), st_moe_gather, &j);

    S->j = j;
    S->n_pairs = n_pairs;
    st_moe_plan(tp, S, n_active, T);
}

/* Stage 4 for st_moe_ffn_end_rows: each valid slot's row copied out in slot order. */
static void st_moe_slot_rows(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    const st_moe_job *j = ctx;
    for (int64_t i = b; i < e; i++) {
        const int32_t pi = j->pair_of[i];
        if (pi >= 0)
            memcpy(j->out + i * j->n_embd, j->y + (int64_t)pi * j->n_embd, sizeof(float) * (size_t)j->n_embd);
    }
}

/* The experts' rows of a begun step (gate/up, h, down), before the sum. */
static void st_moe_ffn_finish(st_threadpool *tp, st_moe_state *S) {
    st_moe_job *j = &S->j;
    const st_moe_one *o = &S->o;
    if (S->mode == ST_MOE_ONE) {
        st_threadpool_wait(tp);
    } else {
        st_threadpool_run(tp, o->rows_gu, o->chunk_gu, st_moe_gate_up, j);
        const int64_t n_pairs = S->n_pairs, n_ff = j->n_ff;
        const int64_t chunk_h = n_pairs * n_ff < 65536 ? n_pairs : st_threadpool_chunk(tp, n_pairs, 2, 1);
        st_threadpool_run(tp, n_pairs, chunk_h, st_moe_quant_h, j); /* the grouped pairs' rows */
        if (j->dotp_d) st_threadpool_run(tp, n_pairs, chunk_h, st_moe_prep_h, j);
        st_threadpool_run(tp, o->rows_d, o->chunk_d, st_moe_down, j);
    }
}

void st_moe_ffn_end(st_threadpool *tp, void *ws) {
    st_moe_state *S = ws;
    if (S->mode == ST_MOE_NONE) return;
    st_moe_ffn_finish(tp, S);
    const st_moe_job *j = &S->j;
    const int64_t T = S->T;
    st_threadpool_run(tp, T, T * j->n_embd * j->k < 65536 ? T : st_threadpool_chunk(tp, T, 2, 1),
                      st_moe_combine, (void *)j);
    S->mode = ST_MOE_NONE;
}

void st_moe_ffn_end_rows(st_threadpool *tp, void *ws, float *rows) {
    st_moe_state *S = ws;
    if (S->mode == ST_MOE_NONE) return;
    st_moe_ffn_finish(tp, S);
    st_moe_job *j = &S->j;
    j->out = rows; /* st_moe_slot_rows writes slot rows there */
    const int64_t P = S->T * j->k;
    st_threadpool_run(tp, P, P * j->n_embd < 65536 ? P : st_threadpool_chunk(tp, P, 2, 1), st_moe_slot_rows, j);
    S->mode = ST_MOE_NONE;
}

void st_moe_ffn(st_threadpool *tp, const st_expert *experts, int32_t n_expert, const float *x,
                int64_t T, const int32_t *ids, const float *wts, int32_t k, float *out, void *ws) {
    st_moe_ffn_begin(tp, experts, n_expert, x, T, ids, wts, k, out, ws);
    st_moe_ffn_end(tp, ws);
}

int64_t st_moe_ffn_groups(const void *ws, const int64_t **offs, const int32_t **pair_tok,
                          const float **h, int64_t *n_ff) {
    const st_moe_state *S = ws;
    if (S->n_pairs <= 0) return 0;
    *offs = S->j.offs;
    *pair_tok = S->j.pair_tok;
    *h = S->j.h;
    *n_ff = S->j.n_ff;
    return S->n_pairs;
}

/* ---------------------------------------------------------------------------------------------
 * Warming the next layer's experts (ops.h)
 * ------------------------------------------------------------------------------------------- */

#define ST_MOE_WARM_PIECE ((size_t)16 << 10) /* ~3 us a thread from DRAM: a stop waits no longer */

static void st_moe_warm_task(void *ctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    st_moe_warm *w = ctx;
    int r = 0;
    for (int64_t i = b; i < e; i++) {
        if (__atomic_load_n(&w->stop, __ATOMIC_RELAXED)) return;
        while (w->first[r + 1] <= i) r++;
        const size_t off = (size_t)(i - w->first[r]) * ST_MOE_WARM_PIECE;
        const size_t n = w->len[r] - off < ST_MOE_WARM_PIECE ? w->len[r] - off : ST_MOE_WARM_PIECE;
        const volatile uint8_t *p = w->base[r] + off;
        uint64_t acc = 0;
        for (size_t q = 0; q < n; q += 64) acc += p[q]; /* one read a cache line */
        __atomic_fetch_add(&w->sink, acc, __ATOMIC_RELAXED);
        __atomic_fetch_add(&w->bytes, (int64_t)n, __ATOMIC_RELAXED);
    }
}

/* Appends tensor m's bytes as the warm's next region. */
static void st_moe_warm_add(st_moe_warm *w, const st_tensor *m) {
    const size_t len = (size_t)m->ne[1] * m->row_bytes;
    if (!m->data || !len) return;
    const int r = w->n_regions++;
    w->base[r] = m->data;
    w->len[r] = len;
    w->first[r + 1] = w->first[r] + (int64_t)((len + ST_MOE_WARM_PIECE - 1) / ST_MOE_WARM_PIECE);
}

void st_moe_warm_start(st_threadpool *tp, st_moe_warm *w, const st_expert *experts, int32_t n_expert,
                       const int32_t *ids, int64_t n) {
    st_moe_warm_stop(tp, w);
    int32_t list[ST_MOE_WARM_MAX];
    int nl = 0;
    for (int64_t i = 0; i < n && nl < ST_MOE_WARM_MAX; i++) {
        const int32_t e = ids[i];
        int dup = e < 0 || e >= n_expert;
        for (int q = 0; q < nl && !dup; q++) dup = list[q] == e;
        if (!dup) list[nl++] = e;
    }
    w->n_regions = 0;
    w->first[0] = 0;
    for (int q = 0; q < nl; q++) { /* gate and up of every expert first, as the step reads them */
        st_moe_warm_add(w, &experts[list[q]].gate);
        st_moe_warm_add(w, &experts[list[q]].up);
    }
    for (int q = 0; q < nl; q++) st_moe_warm_add(w, &experts[list[q]].down);
    w->stop = 0;
    w->bytes = 0;
    w->running = w->n_regions > 0 && st_threadpool_n_threads(tp) > 1;
    if (w->running) st_threadpool_post(tp, w->first[w->n_regions], 1, st_moe_warm_task, w);
}

int64_t st_moe_warm_stop(st_threadpool *tp, st_moe_warm *w) {
    if (!w->running) return 0;
    __atomic_store_n(&w->stop, 1, __ATOMIC_RELAXED); /* the pieces under way end at once */
    st_threadpool_cancel(tp);                          /* the rest are never taken */
    w->running = 0;
    return __atomic_load_n(&w->bytes, __ATOMIC_RELAXED);
}
