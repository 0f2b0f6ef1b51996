/* forward_cuda.h - the GPU session's private state (struct st_gpu, its per-layer weights), shared
 * by forward_cuda.c (the forward pass: the layer loop, attention, output, graphs), moe_block.c
 * (the MoE block: router, each chunk's expert placement, shared expert) and forward_cuda_setup.c
 * (upload, scratch, the KV cache, the placement set-up, free). Not a public header: only those
 * files include it (moe_block.c and forward_cuda.c through moe_block.h), in CUDA builds. */
#ifndef STRATA_FORWARD_CUDA_H
#define STRATA_FORWARD_CUDA_H

#include "session.h"
#include "forward_cpu.h"
#include "gpu_tier.h"
#include "gpu_pass.h"
#include "profile.h"
#include "ram_tier.h"
#include "quant.h"

#ifdef STRATA_HAVE_CUDA

#include "cuda_backend.h"
#include "pool.h"
#include "cuda_mmq.h"
#include "cuda_mmv.h"
#include "cuda_moe.h"
#include "cuda_ops.h"
#include "cuda_mla.h"

#define ST_GPU_COLS 8        /* columns per GEMV call (st_cuda_mmv's limit) */
#define ST_GPU_SYNC 4352     /* st_gpu.sync counters, by the kernels of a decode step: */
#define ST_GPU_SYNC_ROUTER 0 /*   the one-token router */
#define ST_GPU_SYNC_ATTN 1   /*   the attention's row groups (up to ST_GPU_SYNC_MOE) */
#define ST_GPU_SYNC_MOE 256  /*   the one-token expert FFN's 32-row groups of h (the rest) */

/* One layer's device weights: matrices as descriptors, norms and biases as f32 pointers (NULL when
 * the model lacks them). */
typedef struct {
    float *attn_norm, *ffn_norm, *q_norm, *k_norm;   /* (n_embd) / (head_dim or projection) */
    float *bq, *bk, *bv, *bo;                         /* (rows) */
    float *attn_sinks;                                /* (n_head) gpt-oss's sink logits */
    st_cuda_mat wq, wk, wv, wo;                       /* see st_layer */
    st_cuda_mat wqkv;    /* (n_embd, nq + nk + nv): wq, wk, wv as one matrix when they share a
                            type (wq/wk/wv then view its rows), so one GEMV or tile pass computes
                            q, k and v into one row of g->qkv; data NULL otherwise */
    st_cuda_mat router;                               /* (n_embd, n_expert); data NULL: a dense
                                                         layer (st_layer_has_experts) */
    float *exp_probs_b;                               /* (n_expert) selection bias, deepseek2 */
    float *router_b;                                  /* (n_expert) the router's bias, gpt-oss */
    float *b_gate_exps, *b_up_exps, *b_down_exps;     /* (n_ff_exp / n_embd, n_expert) gpt-oss's
                                                         expert biases (every MoE layer's, CPU
                                                         layers' too: a split's GPU share) */
    st_cuda_mat shexp_gate_inp;                       /* (n_embd, 1) qwen2moe */
    st_cuda_mat ffn_gate, ffn_up, ffn_down;           /* dense FFN */
    st_cuda_expert *experts;                          /* device table [n_expert] */
    st_cuda_expert *shexp;                            /* device table [1], NULL if none */
    strata_type exp_type_gu, exp_type_down;           /* routed experts' types */
    strata_type sh_type_gu, sh_type_down;
    /* multi-head latent attention (deepseek2; see st_layer): kv holds the latent rows, no V */
    st_cuda_mat wq_a, wq_b, wkv_a;
    st_cuda_mat wqkv_a;  /* (n_embd, nq_in + kv_lora + n_rot): wq_a (or wq, without the low rank)
                            and wkv_a as one matrix when they share a type that the GEMV takes a
                            warp a row (they then view its rows): a decode step's two GEMVs of xn
                            in one (st_gpu_mla_cat); data NULL otherwise */
    float *q_a_norm, *kv_a_norm;
    st_cuda_mla_w wk_b, wv_b;                         /* per-head absorption weights */
    st_cuda_kv_layer kv;
} st_gpu_layer;

typedef struct { const void *host; void *dev; } st_gpu_upload;

typedef struct st_gpu_rs st_gpu_rs; /* deltanet_gpu.c: qwen3next's recurrent state */

typedef struct st_gpu_stages st_gpu_stages; /* stages.c: a layer split's stages */

typedef struct st_gpu_mtp st_gpu_mtp; /* mtp_gpu.c: an MTP drafter's layer on the device */

struct st_gpu {
    st_gpu_layer *layers;                 /* [n_layer + 1]; a stage fills its own (l0 .. l1 - 1)
                                             and layer l1's attn_norm (its last join's norm);
                                             entry n_layer: an attached MTP drafter's layer */
    int32_t l0, l1;                       /* the layers this state runs: 0 .. n_layer without a
                                             split, a stage's range with one */
    int device;                           /* a stage's CUDA device; -1: the current one (no split) */
    st_gpu_stages *stages;                /* stage 0 of a split: every stage (stages.c); NULL */
    st_cuda_mat output;                   /* (n_embd, n_vocab) */
    float *output_norm;
    st_gpu_upload *ups;                   /* every device allocation of weights */
    int n_ups, cap_ups;
    size_t weight_bytes;
    size_t tiles_bytes;                   /* of which the prompt tiles' Q8_0 copies (q8_tiles) */
    int32_t tiles_skipped;                /* Q8_0 matrices left without one: no memory to spare */
    int32_t sm60_mats;                    /* q8_sm60: matrices whose decode GEMV reads their copy */
    int64_t upload_total;                 /* the model's tensor bytes, for progress reports */
    strata_progress_fn progress;
    void *progress_data;
    void *kv_mem;                         /* one allocation: every layer's K and V */
    size_t kv_bytes;
    st_cuda_attn_shape shape;
    st_cuda_mla_shape mla;                /* latent attention's shape (arch->mla) */
    st_cuda_rope_params rope;
    int64_t moe_tokens;                   /* tokens per grouped-MoE call: 1024 / k, <= n_batch */
    void *stream;                         /* every kernel of the session runs on it */
    void *graph;                          /* the decode step's executable CUDA graph, or NULL */
    int64_t graph_np;                     /* the attention plan length it was captured for */
    /* what the captured step's host code counted (added again at each replay) */
    int64_t *graph_slots_gpu, *graph_slots_cpu; /* [n_layer] */
    int64_t graph_pcie_bytes, graph_cpu_batches, graph_defer_calls;
    int graphs;                           /* capture single-token steps (cuda_graphs) */
    st_gpu_tier *cache;                  /* expert_cache > 0: routed experts in cache slots */
    int prefetch;                         /* gpu_prefetch: predicted next-layer experts prefetched */
    int pipe;                             /* pipe (with ram_budget): the predicted next-layer experts
                                             read into the RAM tier while this layer computes */
    int32_t *stage_rows, *stage_list;     /* stage_experts auto: rows per expert, distinct rows */
    /* cpu_misses: the split of a cache layer's misses (split), or of a CPU layer's experts in
     * decode-sized calls (cpu_split: into the stage slots), between loads and the CPU */
    int split;                            /* enabled, cache layers */
    int cpu_split;                        /* enabled, CPU layers */
    int stage_split;                      /* stage_split: a CPU layer's unstaged prompt-sized
                                             batches split the same way (the GPU's arithmetic) */
    int32_t *h_split_ids;                 /* (T, k) pinned: cpu_split's GPU ids on their way up */
    int32_t *ids_split;                   /* (T, k) device: the GPU's ids (-1 for the CPU's) */
    float *cpu_part;                      /* (T, n_embd) device: the CPU's share, added */
    int32_t *h_ids_gpu, *h_ids_cpu;       /* (T, k) host */
    /* cpu_split in the CPU's arithmetic (split_exact: every CPU layer's types, AVX-512 kernels),
     * or the cache's split in decode-sized calls (cache_exact: every cache layer's types): each
     * side's rows per slot, combined on the GPU in slot order (moe_exact.cu), the buffers below */
    int split_exact;
    int cache_exact;
    float *rows_gpu;                      /* (8, k, n_embd) device: the GPU's share's rows */
    float *h_rows, *d_rows;               /* (8, k, n_embd) pinned: the CPU's; its device address */
    float *rows_cpu;                      /* (8, k, n_embd) device copy where h_rows is not mapped */
    void *exact_ws;                       /* st_cuda_moe_exact_wsize bytes */
    size_t exact_ws_bytes;
    st_miss *misses;                      /* [n_expert] this call's missed experts */
    uint8_t *miss_load;                   /* [n_expert] the cost model's choice per miss */
    int32_t *miss_of;                     /* [n_expert] index in misses, -1 */
    float *pf_x, *pf_logits, *pf_wts;     /* (8, n_embd), (8, n_expert), (8, k): the prediction */
    int32_t *pf_ids, *h_pf_ids;           /* (8, k) on the device and on the host */
    uint8_t *h_pf_missed;                 /* (8, k) pipe: predicted experts not in GPU slots */
    /* cpu_warm: a CPU layer's hand-down carries the next CPU layer's prediction; the pool's
     * workers read those experts into the CPU's caches until that layer's routing arrives */
    int warm_on;
    st_moe_warm warm;
    void *ev_hand, *ev_pred;              /* the hand-down's copies done; the prediction's ids down */
    int32_t warm_ids[8 * ST_MOE_WARM_MAX]; /* the warm's predicted ids (scored at its layer) */
    int64_t warm_n;                       /* how many, 0: none pending */
    st_gpu_tier *stage;                  /* stage_experts: one layer's worth of slots for the
                                             experts of CPU layers in long batches */
    st_gpu_tier *ahead;                   /* stage_ahead: two layers' worth for the staged
                                             batches, the next CPU layer's copied on its copy
                                             stream while one computes (NULL: off) */
    int32_t *ahead_ids;                   /* [n_expert] 0..n_expert-1: every expert of a layer */
    void *pinned;                         /* pin_experts: the RAM-kept experts' pinned copy */
    /* n_cpu_moe: pinned host rows of the hand-off to the CPU's expert step (T = n_batch rows) */
    float *h_xn, *h_wts, *h_proj;         /* (T, n_embd), (T, k), (T, n_embd) */
    int32_t *h_ids;                       /* (T, k) */
    void *h_hand;                         /* the one allocation they share (host-mapped) */
    /* the same rows' device addresses (NULL when the memory could not be mapped): a decode
     * step's router writes x, ids and weights straight into them (no copies down) and the
     * residual reads the CPU's result from d_proj (no copy up) */
    float *d_xn, *d_proj;
    st_cuda_doorbell hand_db;             /* h_ids / h_wts and their device addresses */
    int hand_ready;                       /* this layer's router wrote the hand-down rows */
    /* cuda_doorbell: decode-sized calls hand the CPU layers to the expert pool (pool.h) through
     * host-mapped memory: a request record per CPU layer and its arrays (ST_POOL_T rows) */
    st_expert_pool *pool;
    st_doorbell_layer *db;                /* [CPU layers] host view of the mapped block */
    /* defer_cpu (the pool's CPU layers, issue 32): a deferred layer's late rows (the pool's
     * out_light, or with every row deferred its out) join before the next layer's FFN */
    int defer;                            /* 0 off, 1 defer, 2 check */
    unsigned long long *d_tail;           /* route_tail_skip: slots dropped (device counter) */
    int defer_pending;                    /* the layer whose late rows are due, -1 none */
    const float *defer_src;               /* its mapped rows (host view) */
    float *defer_part;                    /* (8, n_embd) device: the late rows, copied */
    uint8_t *db_host, *db_dev;            /* the mapped block's host and device addresses */
    uint32_t *d_step;                     /* device: the step number the kernels publish / await */
    /* cuda_doorbell with an expert cache: the misses of decode-sized calls computed by the pool
     * while the GPU computes the hits (the split made on the device: no routing round trip);
     * pm_exact (every cache layer's types take the CPU-exact kernels): the hits' rows by those
     * kernels into rows_gpu, the pool's per slot into the cache layers' mapped db rows, summed
     * in slot order (the CPU's bits whatever the residency); else the pool's sum in pm_part */
    int pool_misses;
    int pm_exact;
    int32_t pm_first;                     /* the layer whose misses the step's loads serve first
                                             (one later each step: every layer's residency moves) */
    const void *pm_tables;                /* device [n_layer][n_expert] slot descriptors (export) */
    const int32_t *pm_where;              /* device [n_layer][n_expert] nonzero: resident */
    int32_t *pm_ids;                      /* device (8, k): the GPU's ids, -1 for the pool's */
    int32_t *pm_hist;                     /* device (n_layer, 8, k): each layer's routing */
    int32_t *h_pm_hist;                   /* pinned host copy, read after the step */
    float *pm_part;                       /* device (8, n_embd): the pool's sum (not pm_exact) */
    int32_t *d_zc_of_m;                   /* pool_pcie: device (8 k + 1): of M missed experts, how
                                             many the GPU reads from the pinned copy; NULL: none */
    int32_t *d_err;                       /* device: set when the pool did not answer */
    uint32_t *h_step;                     /* pinned staging of the step number */
    int pool_open;                        /* this call announced *h_step to the pool */
    float *h_embd;                        /* (T, n_embd) pinned: a batch's embeddings on their way
                                             up (NULL: s->x, pageable) */
    size_t pinned_bytes;
    /* device scratch, T = n_batch rows */
    float *x, *xn, *q, *k, *v, *att, *proj, *h, *router, *wts, *ones, *shgate, *logits;
    float *qkv;                           /* (T, nq + nk + nv): the fused projection's rows */
    /* latent attention only (else NULL): q as trained (T, n_head * head_dim_mla), the q low
     * rank's rows (T, n_lora_q), the heads' values (T, n_head * head_dim_v_mla); g->q then holds
     * the absorbed queries (T, n_head * (kv_lora + n_rot)), g->k the cache rows, g->att the
     * heads' latent outputs (T, n_head * kv_lora) */
    float *mla_q, *mla_qa, *mla_v;
    void *mla_vq;                         /* mla_v as Q8_1 rows for the output GEMV, decode-sized
                                             calls (st_cuda_mla_absorb_q8); NULL: not taken */
    int32_t *ids, *zeros;
    int32_t *pos;                         /* (T) the batch's positions: RoPE, KV store, attention */
    st_cuda_argmax_out *amax;             /* the greedy token of strata_session_decode_greedy */
    int32_t *topk_ids;                    /* strata_session_decode_topk: candidates (device) */
    float *topk_vals;
    void *topk_ws;
    size_t topk_ws_bytes;
    int32_t *hpos;                        /* (T) host copy staged for the upload */
    void *mmv_scratch, *mmq_scratch, *moe_ws, *attn_ws;
    void *xq;                             /* the attention norm's output as Q8_1 rows, batches of
                                             up to ST_GPU_COLS tokens (st_gpu_xq) */
    void *moe_xq;                         /* a decode step's FFN norm as the experts' q8_1 row,
                                             from the one-token router (st_cuda_moe_router1) */
    void *att_q8;                         /* the attention output as Q8_1 rows for the output
                                             GEMV, decode-sized calls (st_cuda_attention_q8) */
    int xq_ready;                         /* moe_xq holds this layer's row (the router wrote it) */
    uint32_t *sync;                       /* [ST_GPU_SYNC] device counters of the kernels whose
                                             last block finishes the call; 0 between calls */
    size_t moe_ws_bytes, attn_ws_bytes;
    st_gpu_rs *rs;                        /* qwen3next: the DeltaNet layers' state, else NULL */
    st_gpu_mtp *mtp;                      /* an attached MTP drafter's layer (mtp_gpu.c), else NULL */
    int32_t *h_replay_ids;                /* route replay: pinned [n_layer][n_batch k] rows, made at */
    float *h_replay_wts;                  /*   its first call (moe_block.c), else NULL */
    size_t rs_bytes;                      /* of it, what every call keeps (not the scratch) */
};

#define TRY(expr) do { strata_status st_ = (expr); if (st_ != STRATA_OK) return st_; } while (0)

#define ST_POOL_T 8 /* rows of a decode-sized call: the doorbell's arrays */

/* What the GPU tier (expert cache, stage slots) may know of the session: the model's shape, the
 * experts' host views, the RAM tier, the PCIe counter. */
static inline st_gpu_tier_ctx st_gpu_tier_ctx_of(strata_session *s) {
    const st_gpu_tier_ctx c = {&s->model->hp, s->experts, s->ram, &s->pcie_bytes};
    return c;
}


/* The device address of a pointer into the mapped doorbell block. */
static inline void *st_gpu_db_dev(const st_gpu *g, const void *host) {
    return g->db_dev + ((const uint8_t *)host - g->db_host);
}

/* Whether a call of T tokens hands its CPU layers to the pool: a pool, decode-sized, and not a
 * self-draft step (which drops the CPU layers' experts; its cache layers take the cache's path). */
static inline int st_gpu_pool_call(const strata_session *s, int64_t T) {
    return s->gpu->pool && T <= ST_POOL_T && !s->self_draft; /* (a self-draft step: not the pool's) */
}

/* Whether s->gpu runs CPU layers (n_cpu_moe: the first ones): the one-GPU session whenever there
 * are any, a split's stage when its first layer is one. */
static inline int st_gpu_has_cpu_layers(const strata_session *s) {
    return s->plan.n_cpu_moe != 0 && st_plan_layer_on_cpu(&s->plan, s->gpu->l0);
}

/* stages.c: a layer split (docs/MULTI_GPU.md). s->gpu is the stage being run; between calls,
 * stage 0, which owns the others through g->stages. */
strata_status st_gpu_stages_new(st_gpu *g0, int n);      /* g0->stages, stage 0 in place */
void st_gpu_stages_put(st_gpu_stages *S, int i, st_gpu *g); /* stage i's state (owned) */
strata_status st_gpu_stages_link(st_gpu_stages *S);      /* peer access, events, pinned rows */
int st_gpu_stages_n(const st_gpu_stages *S);
st_gpu *st_gpu_stages_get(const st_gpu_stages *S, int i);
strata_status st_gpu_stage_enter(strata_session *s, const st_gpu_stages *S, int i); /* s->gpu, device */
/* The hidden state of a call of T rows (x, and the next layer's norm xn and its Q8_1 rows xq)
 * from stage i - 1 to stage i, ordered after the one's kernels and before the other's. */
strata_status st_gpu_stage_handoff(strata_session *s, st_gpu_stages *S, int i, int64_t T);
void st_gpu_stages_release(st_gpu_stages *S);           /* events and pinned rows, not the stages */

/* forward_cuda_setup.c */
strata_status st_gpu_alloc(void **p, size_t bytes); /* device memory (16 bytes for 0) */
strata_status st_gpu_alloc_prediction(st_gpu *g, const st_hparams *hp);
/* a tensor up as a matrix descriptor / as f32 values (NULL data: zero / NULL) */
strata_status st_gpu_put_mat(st_gpu *g, const st_tensor *t, st_cuda_mat *m);
strata_status st_gpu_put_f32(st_gpu *g, const st_tensor *t, float **dev);
/* Layer il's weights up into g->layers[il]: as the placement puts them, or (all_experts) every
 * routed expert resident whatever the placement (the MTP layer's). */
strata_status st_gpu_upload_layer(strata_session *s, int il, int all_experts);
/* One layer's KV cache in the session's KV type over n_ctx positions (K, or the latent rows), in
 * bytes rounded to 256: twice that a layer without latent attention (K and V). */
size_t st_gpu_kv_layer_bytes(const strata_session *s);
/* The GPU memory the session may still allocate, and the margin it keeps free beyond it. */
strata_status st_gpu_room(strata_session *s, int64_t *avail, int64_t *margin);

/* forward_cuda.c: the MTP layer (g->layers[n_layer]) on the T rows of g->x at positions pos0..
 * (g->pos): its attention norm (a trunk layer's comes with the previous layer's join), the layer,
 * its FFN's rows added into g->x. */
strata_status st_gpu_mtp_layer(strata_session *s, int64_t T, int64_t pos0);
/* mtp_gpu.c: a trunk call's T final hidden rows (g->x after the last layer) kept for the MTP
 * layer, at positions pos0 and on (what attach made is freed by st_gpu_mtp_detach, gpu_pass.h). */
strata_status st_gpu_mtp_keep(strata_session *s, int64_t pos0, int64_t T);

#endif /* STRATA_HAVE_CUDA */
#endif /* STRATA_FORWARD_CUDA_H */
