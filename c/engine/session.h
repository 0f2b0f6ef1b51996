/* session.h - the internal state of a strata_session (session.c) that the backends' forward
 * passes (cpu/, cuda/, behind backend.h) work on: resolved parameters, thread pool, KV cache, the
 * per-layer expert weight tables, scratch buffers sized for n_batch tokens at create time, the
 * placement tiers (c/experts: ram_tier.h, gpu_tier.h) and the counters behind strata_session_get_stats. The
 * functions that act on it are declared with their modules, not here. */
#ifndef STRATA_SESSION_H
#define STRATA_SESSION_H

#include "backend.h"
#include "costmodel.h"
#include "degrade.h"
#include "kv.h"
#include "model.h"
#include "plan.h"
#include "ops.h"
#include "threadpool.h"

typedef struct st_gpu st_gpu; /* forward_cuda.c */
typedef struct st_ram_tier st_ram_tier; /* ram_tier.c */
typedef struct st_gpu_tier st_gpu_tier; /* experts/gpu_tier.c */
typedef struct st_rs st_rs; /* cpu/linear_attn_cpu.c: qwen3next's recurrent state */

struct strata_session {
    const strata_model *model;
    const st_backend *be;       /* the backend's table (backend.h) */
    strata_backend_kind backend; /* CPU, or CUDA: every layer on the GPU (s->gpu) */
    st_gpu *gpu;
    strata_type kv_type;
    st_placement_plan plan;     /* where routed experts live and move (plan.h) */
    strata_split_params split;  /* CUDA: the layer split as asked (checked; the CUDA set-up
                                   resolves it into stages, c/engine/cuda/stages.c) */
    int32_t fit_cpu_layers;     /* gpu_mem alone: the CPU layers the fit chose (-1: no fit) */
    st_degrade_params degrade;  /* DEGRADE_ZERO (degrade.h) */
    st_degrade_stats dstats;
    float tail_skip;              /* route_tail_skip (0 off) */
    int64_t tail_skipped;         /* slots it dropped (a GPU session adds its device count) */
    int gen_phase;              /* 1 inside a strata_session_decode_gen call of at most
                                   ST_DEGRADE_MAX_ROWS tokens: drops are allowed */
    int self_draft;             /* 1 inside a self-draft step (drafter.c): every routed expert that
                                   missed the fast tier is dropped (st_degrade_drop_missed) */
    int profile;                /* time the phases (strata_session_params.profile) */
    int cuda_graphs;            /* GPU: replay decode steps as CUDA graphs */
    int cuda_pdl;               /* GPU: programmatic dependent launch (st_cuda_set_pdl) */
    int attn_tc;                /* GPU: tensor-core attention for prompt batches (1: single f16;
                                   2 and -1, the default: split f16 operands; 3: split
                                   probabilities; 0: never) */
    int q8_tiles;               /* GPU: Q8_0 dense matrices also in the prompt tiles' layout */
    int iq_stage_tables;        /* GPU: staged IQ3 codebooks in the grouped kernels (-1 auto;
                                   resolved at create: 0 or 1) */
    int q8_sm60;                /* GPU: their decode GEMV (and a Q8_0 head's) by the SM60 kernel */
    int q8_sm60_bps;            /* its persistent blocks per SM (1..32) */
    int32_t threads_pinned;     /* cpu_pin: workers bound to a CPU */
    st_cost_params cost;        /* the cost model's figures, measured at create (plan.stage_experts
                                   -1, the splits) */
    int64_t stage_batches, cpu_batches, split_batches;
    int64_t defer_calls;            /* defer_cpu: CPU layers' pool calls deferred (or split, check) */
    strata_token *argmax_out;   /* strata_session_decode_greedy: where the greedy token goes */
    int want_argmax;            /* this batch is the call's last: compute the greedy token */
    float *argmax_logits;       /* CPU sessions: the last row's logits for the greedy token and
                                   the candidates (cpu/backend_cpu.c) */
    int32_t topk_k;             /* strata_session_decode_topk: how many candidates, and where */
    int32_t *topk_ids;
    float *topk_vals;
    int want_topk;              /* this batch is the call's last: compute the candidates */
    int64_t *slots_gpu, *slots_cpu; /* [n_layer] routed slot-rows served by GPU memory / the CPU */
    st_ram_tier *ram;           /* sessions with a RAM budget: routed experts in RAM slots (CUDA: pinned) */
    uint8_t *missed;            /* [T][k] RAM tier: slots whose expert is not resident */
    strata_status fwd_error;    /* the first failure inside a forward pass (a disk read), else OK */
    int64_t pcie_bytes;
    int64_t graph_launches, graph_rebuilds;
    strata_route_fn route_fn;   /* strata_session_set_route_trace: each layer's routing, or NULL */
    struct st_replay *replay;   /* strata_session_set_route_replay's recorded routing, or NULL */
    float *spec_logits;         /* [STRATA_DRAFT_MAX + 1][n_vocab] a verify window's rows */
    strata_spec_stats spec;     /* strata_session_speculate's counters */
    void *route_data;
    strata_act_fn act_fn;       /* strata_session_set_act_trace: matrices' input rows, or NULL */
    void *act_data;
    strata_progress_fn progress;
    void *progress_data;
    double prof_t;              /* start of the phase being timed */
    double prof[STRATA_PHASE_COUNT];
    int64_t prof_calls, prof_tokens;
    /* profile mode: next-layer expert prediction (forward_cpu.c st_predict_next) */
    float *pred_xn, *pred_logits, *pred_wts;   /* [T][n_embd], [T][n_expert], [T][k] */
    int32_t *pred_ids;                         /* [T][k] */
    int pred_layer;                            /* the layer the prediction is for, -1 none */
    int64_t pred_slots, pred_hits;
    int64_t warm_bytes;         /* cpu_warm: expert bytes the CPU threads read ahead */
    int64_t hand_offs;          /* n_cpu_moe host hand-offs: count, wait and CPU-step seconds */
    double hand_wait_s, cpu_step_s;
    int32_t n_ctx;
    int32_t n_batch;
    int n_threads;
    int32_t n_past;
    st_threadpool *tp;
    st_kv_cache kv;
    st_rs *rs;                 /* CPU sessions of qwen3next: the DeltaNet layers' state, else NULL */
    st_rope_params rope;

    /* weight tables of the FFN step: what later placement code swaps per expert */
    st_expert *experts;        /* [n_layer][n_expert] routed experts (NULL for dense models) */
    st_expert *dense;          /* [n_layer] the dense FFN as a single expert (dense models) */
    st_expert *shexp;          /* [n_layer] shared expert (n_ff_shexp > 0) */

    /* scratch, T = n_batch rows */
    float *x;                  /* [T][n_embd] residual stream */
    float *xn;                 /* [T][n_embd] normalized input of a block */
    float *q;                  /* [T][n_head*head_dim] */
    float *k;                  /* [T][n_head_kv*head_dim] */
    float *v;                  /* [T][n_head_kv*head_dim_v] */
    float *att;                /* [T][n_head*head_dim_v] */
    float *proj;               /* [T][n_embd] block output */
    float *proj2;              /* [T][n_embd] shared expert output */
    float *router;             /* [T][n_expert] */
    int32_t *ids;              /* [T][n_expert_used] */
    float *wts;                /* [T][n_expert_used] */
    int32_t *zeros;            /* [T] expert id 0 (dense FFN / shared expert) */
    float *ones;               /* [T] weight 1 */
    float *shgate;             /* [T] shared-expert gate */
    float *rope_cs;            /* [T][n_rot] cos/sin per position of the batch */
    float *att_scratch;        /* [n_threads][n_ctx] */
    /* latent attention (deepseek2) only, else NULL */
    float *mla_q;              /* [T][n_head*head_dim_mla] q as trained (nope, then rope part) */
    float *mla_in, *mla_out;   /* [T][max(qk_nope, n_lora_kv)], [T][max(n_lora_kv, head_dim_v_mla)]:
                                  one head's rows gathered for its absorption matmul */
    float *mla_v;              /* [T][n_head*head_dim_v_mla] the heads' values */
    float *mtp_h;              /* [n_ctx][n_embd] every position's final-normed hidden state, kept
                                  while an MTP drafter whose layer runs on the CPU is attached
                                  (mtp_cpu.c; a CUDA session copies its rows down), else NULL */
    int mtp_on;                /* an MTP drafter is attached (its layer on the CPU or the device) */
    int mtp_on_cpu;            /* its layer on the CPU even where the backend could run it (tests) */
    void *mm_ws;               /* st_matmul_wsize */
    void *moe_ws;              /* st_moe_wsize, max over routed / shared / dense */
};

/* The widths of one token's scratch rows, shared by the CPU and GPU scratch allocations:
 * T = n_batch rows; E = n_embd; nq/nk/nv = the q/k/v projections; no = attention output;
 * K = experts per token, X = experts, F = dense FFN width (each at least 1). */
typedef struct {
    size_t T, E, nq, nk, nv, no, K, X, F;
} st_scratch_dims;

static inline st_scratch_dims st_session_dims(const strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    st_scratch_dims d;
    d.T = (size_t)s->n_batch;
    d.E = (size_t)hp->n_embd;
    d.nq = (size_t)hp->n_head * (size_t)hp->head_dim;
    d.nk = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    d.nv = (size_t)hp->n_head_kv * (size_t)hp->head_dim_v;
    d.no = (size_t)hp->n_head * (size_t)hp->head_dim_v;
    d.K = hp->n_expert_used > 0 ? (size_t)hp->n_expert_used : 1;
    d.X = hp->n_expert > 0 ? (size_t)hp->n_expert : 1;
    d.F = hp->n_ff > 0 ? (size_t)hp->n_ff : 1;
    return d;
}

/* The checks strata_session_create runs before it allocates (session_params.c): the model has
 * weights, every option is in range, the options combine, n_ctx resolves. */
strata_status st_session_params_check(const strata_model *model, const strata_session_params *p);
/* gpu_mem alone in a CUDA session (no expert_cache, no n_cpu_moe): p->placement.n_cpu_moe set to
 * the static split that fits (st_plan_fit_layers), *fit to the CPU layers it chose; -1 (and p
 * untouched) otherwise. */
strata_status st_session_fit_gpu_mem(const strata_model *model, strata_session_params *p, int32_t *fit);
/* The next-layer prediction's buffers (pred_xn, pred_logits, pred_wts, pred_ids; n_batch rows),
 * made once for whichever needs them first: profile mode, a route trace, the RAM tier's pipe.
 * STRATA_OK at once for dense models or when they exist. */
strata_status st_session_pred_buffers(strata_session *s);

/* qwen3next's recurrent (DeltaNet) state, either backend: it rolls back only inside the last
 * decode window, positions win_pos .. win_pos + win_len, at most ST_RS_WINDOW of them (the
 * longest verify window). STRATA_OK when n_keep lies there, else the one refusal both give. */
#define ST_RS_WINDOW (STRATA_DRAFT_MAX + 1)
strata_status st_rs_window_check(const strata_session *s, int win_open, int32_t win_pos, int32_t win_len,
                                 int32_t n_keep);

#endif /* STRATA_SESSION_H */
