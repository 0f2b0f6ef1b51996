/* ops.h - the CPU compute operations of the forward pass: matmul (quantized activations + the
 * dot kernels), RMSNorm, RoPE (normal, NEOX, linear and YaRN scaling), softmax, SiLU/SwiGLU,
 * causal attention with GQA over a KV cache, and the MoE expert step (ops_moe.c).
 *
 * Every op is deterministic: each output element is computed by exactly one thread with a fixed
 * order of operations, so results do not depend on the thread count. Buffers are row-major
 * [tokens][features]; counts are int64_t. No argument checks here (the callers validate). */
#ifndef STRATA_OPS_H
#define STRATA_OPS_H

#include "common.h"
#include "model.h"
#include "threadpool.h"
#include "det_expf.h"

#include <math.h>

/* ---- elementwise and per-row ops (one row, caller's thread) ----------------------------------- */

/* y = x * 1/sqrt(mean(x^2) + eps) * w (w NULL: no weight). Sum of squares in double, as ggml's
 * rms_norm does. y may alias x. */
void st_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);
/* In-place softmax over n values; max-subtracted, sum in double. */
void st_softmax(float *x, int64_t n);
/* silu with st_det_expf: the bits the GPU's CPU-exact expert kernels (moe_exact.cu) reproduce */
static inline float st_silu(float x) { return st_det_silu(x); }
static inline float st_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* h[i] = silu(g[i]) * u[i] */
void st_swiglu(float *h, const float *g, const float *u, int64_t n);
/* y = rmsnorm(x) * w for T rows of n (a layer block's input norm). */
static inline void st_norm_rows(float *y, const float *x, const st_tensor *w, int64_t T, int64_t n, float eps) {
    for (int64_t t = 0; t < T; t++) st_rmsnorm(y + t * n, x + t * n, (const float *)w->data, n, eps);
}
/* x += branch * residual_scale (granite's; 1 elsewhere) over n values. */
static inline void st_residual(const strata_model *m, float *x, const float *branch, int64_t n) {
    const float rs = m->arch->granite_scales ? m->hp.residual_scale : 1.0f;
    if (rs != 1.0f)
        for (int64_t i = 0; i < n; i++) x[i] += branch[i] * rs;
    else
        for (int64_t i = 0; i < n; i++) x[i] += branch[i];
}
/* y[i] += b[i] for each of T rows of n */
void st_add_bias(float *y, const float *b, int64_t T, int64_t n);

/* ---- RoPE -------------------------------------------------------------------------------------- */

typedef struct {
    st_rope_style style;     /* NORM: pairs (2i, 2i+1); NEOX: pairs (i, i + n_rot/2) */
    int32_t n_rot;           /* rotated dimensions per head (even, <= head_dim); the rest pass */
    float freq_base;         /* theta base */
    float freq_scale;        /* 1 / scaling factor (linear and yarn) */
    float ext_factor;        /* yarn ramp mix (0: plain linear interpolation) */
    float attn_factor;       /* magnitude scale (yarn mscale base) */
    float beta_fast, beta_slow;
    int32_t n_ctx_orig;      /* yarn original context */
    int no_trunc;            /* yarn correction dims unrounded (st_hparams.yarn_no_trunc) */
} st_rope_params;

/* From the model's hyperparameters. */
st_rope_params st_rope_params_from(const st_hparams *hp, st_rope_style style);
/* cs[2i] = cos(theta_i) * mscale, cs[2i+1] = sin(theta_i) * mscale for i < n_rot/2 at pos
 * (llama.cpp's rope_yarn; plain RoPE when freq_scale 1 and ext_factor 0). */
void st_rope_cache(const st_rope_params *p, int64_t pos, float *cs);
/* Rotates the first n_rot values of each of n_head heads of head_dim floats in x. */
void st_rope_apply(const st_rope_params *p, const float *cs, float *x, int64_t n_head, int64_t head_dim);

/* ---- matmul ------------------------------------------------------------------------------------ */

/* Bytes of T activation rows of n floats quantized for weights of type wtype. */
size_t st_act_bytes(strata_type wtype, int64_t n, int64_t T);
/* Quantizes T rows of n floats (row stride n) to strata_act_type(wtype), row stride
 * strata_row_bytes(act, n); F32 activations are copied. Parallel over rows. */
void st_quantize_acts(st_threadpool *tp, strata_type wtype, const float *x, int64_t T, int64_t n,
                      void *xq);

/* One matrix of a (multi-)matmul: y[t][r] = dot(W row r, x[t]), y row stride ldy (>= rows). */
typedef struct {
    const st_tensor *w;      /* 2-D view (ne[0] = n, ne[1] = rows) */
    float *y;                /* [T][ldy] */
    int64_t ldy;
} st_mm;

/* Workspace bytes st_matmul_multi needs for T rows of n inputs (all act types covered). */
size_t st_matmul_wsize(int64_t n, int64_t T);
/* Every mats[i] applied to the same x ([T][n] floats): x is quantized once per distinct
 * activation type, then all rows of all matrices are shared out in one parallel region (rows
 * outer, tokens inner, so each weight row is read once per block of tokens). ws: st_matmul_wsize
 * bytes. */
void st_matmul_multi(st_threadpool *tp, const st_mm *mats, int n_mats, const float *x, int64_t T,
                     void *ws);
/* Single matrix convenience; y row stride = rows. */
void st_matmul(st_threadpool *tp, const st_tensor *w, const float *x, int64_t T, float *y, void *ws);

/* ---- attention --------------------------------------------------------------------------------- */

/* One layer's KV cache: K rows [n_ctx][n_head_kv][head_dim]; V transposed
 * [n_head_kv][head_dim_v][n_ctx] (so the weighted sum over positions is a dot product). */
typedef struct {
    strata_type type;        /* STRATA_TYPE_F16 or STRATA_TYPE_F32 */
    void *k;
    void *vt;
    int64_t n_ctx;
} st_kv_layer;

typedef struct {
    int32_t n_head, n_head_kv, head_dim, head_dim_v;
    float scale;             /* score multiplier (1/sqrt(head_dim) or granite's) */
    int v_in_k;              /* latent attention: the values are the first head_dim_v of each
                                cached key row (one KV head; kv->vt unused) */
    int32_t window;          /* > 0: a query at position p sees positions p-window+1..p only */
    const float *sinks;      /* [n_head] or NULL: each head's sink logit, a softmax term with no
                                value (gpt-oss) */
} st_attn_shape;

/* Stores T tokens' k ([T][n_head_kv*head_dim]) and v ([T][n_head_kv*head_dim_v]) at positions
 * pos0 .. pos0+T-1 (v unused, may be NULL, when s->v_in_k). */
void st_kv_store(const st_kv_layer *kv, const st_attn_shape *s, const float *k, const float *v,
                 int64_t T, int64_t pos0);
/* Causal attention: token t (position pos0+t) attends to cache positions [0, pos0+t]. q
 * [T][n_head*head_dim] -> out [T][n_head*head_dim_v]. Query head h reads KV head
 * h / (n_head/n_head_kv). scratch: n_threads * n_ctx floats. */
void st_attention(st_threadpool *tp, const st_kv_layer *kv, const st_attn_shape *s, const float *q,
                  int64_t T, int64_t pos0, float *out, float *scratch);

/* ---- MoE expert step (ops_moe.c) -------------------------------------------------------------- */

/* One expert's weights: 2-D views, gate/up (n_embd, n_ff), down (n_ff, n_embd). The per-layer
 * table of these is what later placement code swaps (RAM, disk, GPU). */
typedef enum {
    ST_ACT_SWIGLU,           /* silu(gate) * up */
    ST_ACT_SWIGLU_OAI        /* gpt-oss: g = min(gate, 7), u = clamp(up, -7, 7),
                                g * sigmoid(1.702 g) * (u + 1) */
} st_expert_act;

typedef struct {
    st_tensor gate, up, down;
    const float *b_gate, *b_up; /* [n_ff] biases added before the activation, or NULL */
    const float *b_down;        /* [n_embd] bias of down's output, or NULL */
    st_expert_act act;
} st_expert;

/* Routing: softmax over n_expert router logits, top-k (ties: lower index first), optional
 * renormalization of the k weights to sum 1. ids/wts: [k], in descending weight order. */
void st_route_topk(const float *logits, int32_t n_expert, int32_t k, int norm, int32_t *ids,
                   float *wts);

/* The routing of a layer as its file describes it: softmax or sigmoid scores (or gpt-oss's
 * softmax over the k chosen logits), a selection bias
 * added for the choice only (DeepSeek-V3's exp_probs_b), group-limited top-k (the n_group_used
 * groups with the best sum of their top two), the chosen scores as weights, optionally
 * renormalized, then multiplied by scale (llama.cpp's build_moe_ffn). Softmax without bias or
 * groups is st_route_topk, bit for bit. ids in descending selection order (ties: lower index). */
#define ST_ROUTE_MAX_EXPERT 4096
typedef struct {
    int32_t n_expert, k;
    st_gating gating;
    int norm;                /* renormalize the k weights to sum 1 */
    float scale;             /* 1: none */
    int32_t n_groups, n_group_used; /* n_groups <= 1: no groups */
    const float *bias;       /* [n_expert] or NULL */
} st_route_cfg;
void st_route_scored(const st_route_cfg *c, const float *logits, int32_t *ids, float *wts);

/* Workspace bytes of st_moe_ffn for T tokens, k slots, n_expert experts, widths n_embd / n_ff. */
size_t st_moe_wsize(int64_t T, int32_t k, int32_t n_expert, int64_t n_embd, int64_t n_ff);
/* out[t] = sum over slots s = 0..k-1 (in that order) of wts[t][s] * FFN_{ids[t][s]}(x[t]); a slot
 * whose id is outside [0, n_expert) (a dropped slot, DEGRADE_ZERO) adds nothing,
 * FFN_e(x) = down_e(silu(gate_e x) * up_e x). Tokens are grouped per expert so each weight row is
 * read once per layer call; all experts' rows are shared out in one parallel region per stage.
 * x, out: [T][n_embd] (out is overwritten; may not alias x). ws: st_moe_wsize bytes. */
void st_moe_ffn(st_threadpool *tp, const st_expert *experts, int32_t n_expert, const float *x,
                int64_t T, const int32_t *ids, const float *wts, int32_t k, float *out, void *ws);
/* st_moe_ffn in two halves, for a caller with other work meanwhile (a GPU session enqueueing
 * its share of a CPU layer): _begin groups and quantizes, and for a one-dispatch step (below)
 * posts it to the pool's workers and returns; _end joins the caller to what is left (or runs
 * the stages) and writes out. Between them x, ids, wts, out and ws stay untouched and the pool
 * takes no other job. The same bits as st_moe_ffn, which is the two back to back. */
void st_moe_ffn_begin(st_threadpool *tp, const st_expert *experts, int32_t n_expert, const float *x,
                      int64_t T, const int32_t *ids, const float *wts, int32_t k, float *out, void *ws);
void st_moe_ffn_end(st_threadpool *tp, void *ws);
/* _end without the weighted sum: rows[(t * k + s) * n_embd ..] = FFN_{ids[t][s]}(x[t]) for each
 * slot with an id in [0, n_expert) (other slots' rows are not written; out is not written), the
 * rows st_moe_ffn sums. A GPU session adds them to the GPU's in slot order (the --cpu-misses
 * split with the CPU-exact kernels: st_cuda_moe_combine_rows computes st_moe_ffn's sum). */
void st_moe_ffn_end_rows(st_threadpool *tp, void *ws, float *rows);
/* After a step has ended (st_moe_ffn, _end or _end_rows; until ws's next step): its (token, slot)
 * pairs grouped by expert, for an activation trace. Expert e's pairs are offs[e] .. offs[e+1]-1:
 * pair i is token pair_tok[i]'s, and h + i * n_ff is its hidden row (the down projection's
 * input, f32). Returns the number of pairs, 0 (nothing set) when the step computed none. */
int64_t st_moe_ffn_groups(const void *ws, const int64_t **offs, const int32_t **pair_tok,
                          const float **h, int64_t *n_ff);
/* One token's step (T == 1) runs gate/up, h's quantization and down in one parallel region, down
 * chunks starting as their experts' h rows are ready (the default, on); 0: three stages with a
 * barrier between each, as batches run. The same bits either way. Process-wide, for tests and
 * bench/micro/bench_moe_step; not thread-safe against a running step. */
void st_moe_set_one_dispatch(int on);

/* Warming experts into the CPU's caches ahead of their step: the pool's workers read the gate
 * and up rows, then the down rows, of the listed experts (16 KiB pieces) in the background
 * (st_threadpool_post) until done or stopped. A GPU session with its experts on the CPU starts
 * it for the next layer's predicted experts when it hands a layer's result back, so DRAM works
 * through the GPU's part of the next layer instead of idling; the step then finds part of its
 * weights in L2/L3. Changes no result. Fields are the job's own (atomics through builtins). */
#define ST_MOE_WARM_MAX 64 /* distinct experts a warm lists */
typedef struct {
    const uint8_t *base[3 * ST_MOE_WARM_MAX]; /* regions: each expert's gate, up, then downs */
    size_t len[3 * ST_MOE_WARM_MAX];
    int64_t first[3 * ST_MOE_WARM_MAX + 1]; /* first piece of each region; first[n_regions]: all */
    int n_regions;
    int running;   /* started and not yet stopped (the caller's) */
    int stop;      /* set by st_moe_warm_stop; pieces not yet begun are skipped */
    int64_t bytes; /* bytes read by pieces that ran */
    uint64_t sink; /* what the reads summed (kept so they are not optimized away) */
} st_moe_warm;
/* Starts warming experts ids[0..n) (ids outside [0, n_expert) and repeats skipped; at most
 * ST_MOE_WARM_MAX distinct) of a layer's table; a warm still running on w is stopped first. tp
 * without workers: nothing runs. w must stay valid until st_moe_warm_stop. */
void st_moe_warm_start(st_threadpool *tp, st_moe_warm *w, const st_expert *experts, int32_t n_expert,
                       const int32_t *ids, int64_t n);
/* Stops the warm (pieces in progress finish, the rest are dropped at once: st_threadpool_cancel)
 * and waits for the workers; returns the bytes it read (0 when none was running). */
int64_t st_moe_warm_stop(st_threadpool *tp, st_moe_warm *w);

#endif /* STRATA_OPS_H */
