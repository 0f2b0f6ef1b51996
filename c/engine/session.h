/* session.h - the internal state of a strata_session (session.c) that the forward passes
 * (cpu/forward_cpu.c, cuda/forward_cuda.c) work on: resolved parameters, thread pool, KV cache, the per-layer
 * expert weight tables, scratch buffers sized for n_batch tokens at create time, the placement
 * tiers (ram_tier.c, gpu_cache.c) and the counters behind strata_session_get_stats. */
#ifndef STRATA_SESSION_H
#define STRATA_SESSION_H

#include "costmodel.h"
#include "degrade.h"
#include "kv.h"
#include "model.h"
#include "ops.h"
#include "threadpool.h"

typedef struct st_gpu st_gpu; /* forward_cuda.c */
typedef struct st_ram_tier st_ram_tier; /* ram_tier.c */
typedef struct st_gpu_cache st_gpu_cache; /* gpu_cache.c */

struct strata_session {
    const strata_model *model;
    strata_backend_kind backend; /* CPU, or CUDA: every layer on the GPU (s->gpu) */
    st_gpu *gpu;
    strata_type kv_type;
    st_degrade_params degrade;  /* DEGRADE_ZERO (degrade.h) */
    st_degrade_stats dstats;
    int gen_phase;              /* 1 inside strata_session_decode_gen: drops are allowed */
    int profile;                /* time the phases (strata_session_params.profile) */
    int cuda_graphs;            /* GPU: replay decode steps as CUDA graphs */
    int cuda_pdl;               /* GPU: programmatic dependent launch (st_cuda_set_pdl) */
    int attn_tc;                /* GPU: tensor-core attention for prompt batches (1: single f16;
                                   2 and -1, the default: split f16 operands; 3: split
                                   probabilities; 0: never) */
    int q8_tiles;               /* GPU: Q8_0 dense matrices also in the prompt tiles' layout */
    int32_t threads_pinned;     /* cpu_pin: workers bound to a CPU */
    int32_t n_cpu_moe;          /* GPU: routed experts of the first N layers on the CPU (-1: all) */
    int32_t stage_experts;      /* GPU: batches of this many tokens stage CPU layers' experts (0: off,
                                   -1: the cost model decides per batch) */
    st_cost_params cost;        /* stage_experts -1: the measured figures */
    int64_t stage_batches, cpu_batches;
    int pin_experts;            /* GPU: experts kept in RAM are copied into pinned memory (1; -1:
                                   when they fit in the available RAM with room to spare) */
    int gpu_prefetch;           /* GPU: next-layer experts prefetched into cache slots */
    int cpu_warm;               /* GPU with n_cpu_moe, host hand-off: the next CPU layer's predicted
                                   experts read into the CPU's caches while the GPU computes */
    int cuda_doorbell;          /* GPU with n_cpu_moe: decode-sized calls feed the CPU layers'
                                   experts to the expert pool through host-mapped memory */
    int cpu_misses;             /* GPU cache: misses loaded or computed by the CPU (cost model) */
    int cpu_misses_auto;        /* cpu_misses -1 with n_cpu_moe: the CPU layers' split where exact */
    float pcie_frac;            /* < 0: the cost model; 0..1: the share of misses loaded */
    strata_token *argmax_out;   /* strata_session_decode_greedy: where the greedy token goes */
    int want_argmax;            /* this batch is the call's last: compute the greedy token */
    float *argmax_logits;       /* CPU sessions: the last row's logits for the greedy token */
    int32_t topk_k;             /* strata_session_decode_topk: how many candidates, and where */
    int32_t *topk_ids;
    float *topk_vals;
    int want_topk;              /* this batch is the call's last: compute the candidates */
    int32_t expert_cache;       /* GPU: routed experts in a cache of this many slots (0: resident,
                                   -1: as many as fit in gpu_mem or free memory) */
    int64_t gpu_mem;            /* GPU: bytes the session may use (0: the free memory) */
    int64_t *slots_gpu, *slots_cpu; /* [n_layer] routed slot-rows served by GPU memory / the CPU */
    st_ram_tier *ram;           /* sessions with a RAM budget: routed experts in RAM slots (CUDA: pinned) */
    int pipe;                   /* the RAM tier prefetches the next layer's predicted experts */
    uint8_t *missed;            /* [T][k] RAM tier: slots whose expert is not resident */
    strata_status fwd_error;    /* the first failure inside a forward pass (a disk read), else OK */
    int64_t pcie_bytes;
    int64_t graph_launches, graph_rebuilds;
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

/* Evaluates T (1..n_batch) tokens at positions n_past .. n_past+T-1 and advances n_past.
 * logits: NULL, or T x n_vocab (all 1) or n_vocab floats (all 0: the last token's). Tokens and
 * room are checked by the caller. */
void st_forward_batch(strata_session *s, const strata_token *tokens, int64_t T, float *logits, int all);

/* The checks strata_session_create runs before it allocates (session_params.c): the model has
 * weights, every option is in range, the options combine, n_ctx resolves. */
strata_status st_session_params_check(const strata_model *model, const strata_session_params *p);

/* The token embeddings of T tokens into out (T x n_embd), as both forward paths take them: each
 * row dequantized (and scaled where the architecture says), prompt batches on the session's
 * threads (forward_cpu.c). */
void st_embed_tokens(strata_session *s, const strata_token *tokens, int64_t T, float *out);

/* The RAM tier (ram_tier.c): create sizes the slots from budget bytes (and lowers n_batch so a
 * layer call's distinct experts fit); table makes every expert of ids resident, holds their slots
 * and points *table at views of them; release lets the slots go; counters for the stats. */
strata_status st_ram_tier_create(strata_session *s, int64_t budget, int pipe);
/* Bytes of one RAM slot: the largest expert's three matrices, each 64-byte aligned, rounded up
 * for O_DIRECT. */
size_t st_ram_tier_slot_bytes(const strata_model *m);
void st_ram_tier_free(strata_session *s);
strata_status st_ram_tier_table(strata_session *s, int il, int64_t T, const int32_t *ids,
                                int32_t K, const st_expert **table);
void st_ram_tier_release(strata_session *s);
void st_ram_tier_reset_counters(strata_session *s);
void st_ram_tier_counters(const strata_session *s, int64_t *hits, int64_t *misses, int64_t *disk_bytes,
                          int64_t *pf_issued, int64_t *pf_timely, int64_t *pf_late);
/* Pipelined mode: starts reading layer il's predicted experts (ids [T][K]) into free slots. */
void st_ram_tier_prefetch(strata_session *s, int il, int64_t T, const int32_t *ids, int32_t K);
int32_t st_ram_tier_slots(const strata_session *s);
/* Smallest and largest per-layer hit rate of the RAM tier (0 when it has none). */
void st_ram_tier_layer_hits(const strata_session *s, double *min, double *max);
/* missed[i] = 1 when expert ids[i] of layer il is neither resident nor in a completed load (what
 * DEGRADE_ZERO may drop instead of reading it from disk). */
void st_ram_tier_missed(const strata_session *s, int il, int64_t T, const int32_t *ids, int32_t K,
                        uint8_t *missed);

/* The GPU expert cache (gpu_cache.c; CUDA builds): create allocates n_slots device slots; table
 * demand-loads the experts of ids ([n][K], host) of layer il and gives the device pointer table;
 * missed marks ids whose expert is not resident; counters for the stats. */
strata_status st_gpu_cache_create(strata_session *s, int32_t n_slots, st_gpu_cache **out);
size_t st_gpu_cache_slot_bytes(const strata_session *s);   /* the largest routed expert, aligned */
void st_gpu_cache_free(st_gpu_cache *c);
strata_status st_gpu_cache_table(strata_session *s, st_gpu_cache *c, int il, const int32_t *ids,
                                 int64_t n, int32_t K, int keep_held, void *stream, const void **d_table);
/* keep_held: the table's slots stay held (not evictable) until this call, made once the kernel
 * reading them is enqueued (so a prefetch issued in between cannot take them). */
void st_gpu_cache_release_held(st_gpu_cache *c);
/* Demand loads of later table calls as copies enqueued on `stream` (the compute stream the table
 * is used on) instead of synchronous ones, and the table uploaded the same way: the host goes on
 * (e.g. to compute the CPU's share) while they run. Stream order keeps a slot from being
 * overwritten before the kernels queued earlier have read it. Not with prefetch or a RAM tier
 * (their slots' states assume synchronous copies). */
strata_status st_gpu_cache_async_loads(st_gpu_cache *c, void *stream);
/* The PCIe figures of the cost model, measured with layer il's first expert copied into slot 0
 * (which must not be in use): bytes per second of an expert's copies, seconds of a small copy. */
strata_status st_gpu_cache_measure_pcie(strata_session *s, st_gpu_cache *c, int il, double *bytes_per_s,
                                        double *latency_s);
/* Prefetch (gpu_prefetch): a copy stream and an event per slot. st_gpu_cache_prefetch claims free
 * slots for the experts of ids[n] (layer il) that have none and copies them on the copy stream
 * after the compute stream's work so far; a later table call makes its stream wait for the copies
 * it needs (counted late) or finds them done (timely). */
strata_status st_gpu_cache_enable_prefetch(st_gpu_cache *c);
strata_status st_gpu_cache_prefetch(strata_session *s, st_gpu_cache *c, int il, const int32_t *ids,
                                    int64_t n, void *stream);
void st_gpu_cache_prefetch_counters(const st_gpu_cache *c, int64_t *issued, int64_t *timely, int64_t *late);
void st_gpu_cache_missed(const st_gpu_cache *c, int il, const int32_t *ids, int64_t n, uint8_t *missed);
/* Misses computed by the expert pool (cuda_doorbell with expert_cache): the residency of every
 * layer as the device reads it inside a step with no host round trip: *d_where ([n_layer]
 * [n_expert] int32, nonzero: READY in a slot) and *d_tables ([n_layer][n_expert] st_cuda_expert,
 * the slots' descriptors); after the first call only the layers whose residency changed go up
 * again (synchronous copies: call it before the step's kernels are enqueued). */
strata_status st_gpu_cache_export(strata_session *s, st_gpu_cache *c, const void **d_tables,
                                  const int32_t **d_where);
/* After such a step: layer il's routed ids (n, host) are looked up (the LRU clock, the hot set's
 * counts, the hit and miss counters), and its missed experts loaded into slots (synchronous
 * copies) for the steps to come: into EMPTY slots while *empty lasts, then in place of LRU
 * experts while *budget lasts (both decremented); *resident (may be NULL) gets how many of the n
 * ids were resident during the step. st_gpu_cache_empty_slots: the EMPTY slots now. */
int32_t st_gpu_cache_empty_slots(const st_gpu_cache *c);
strata_status st_gpu_cache_after_step(strata_session *s, st_gpu_cache *c, int il, const int32_t *ids, int64_t n,
                                      int32_t *empty, int32_t *budget, int64_t *resident);
/* Zeroes the counters (strata_session_reset_stats). */
void st_gpu_cache_reset_counters(st_gpu_cache *c);
void st_gpu_cache_counters(const st_gpu_cache *c, int32_t *slots, int64_t *hits, int64_t *misses,
                           int64_t *bytes, double *layer_min, double *layer_max);
/* The GPU session's expert cache, or NULL (forward_cuda.c). */
st_gpu_cache *st_gpu_get_cache(const strata_session *s);
/* Bytes of the pinned copy of the experts kept in RAM (pin_experts), 0 without one. */
int64_t st_gpu_pinned_bytes(const strata_session *s);
/* q8_tiles: the bytes of the Q8_0 tile copies made and the matrices left without one (no GPU
 * memory to spare), both 0 without a GPU session. */
void st_gpu_tiles_stats(const strata_session *s, int64_t *bytes, int32_t *skipped);
/* The CPU layers' decode split (cpu_misses): 0 none, 1 in the CPU's arithmetic (the same bits
 * whatever the share), 2 in the GPU's own (the bits follow the share). */
int st_gpu_split_mode(const strata_session *s);
/* 1 when a GPU call of T tokens hands its CPU layers to the expert pool (cuda_doorbell): the
 * session's own workers then have no expert work in it. */
int st_gpu_pool_serves(const strata_session *s, int64_t T);

/* Profile mode: st_prof_start marks the start of a pass; st_prof_mark(s, phase) adds the time
 * since the last mark to phase. Both are no-ops with profile off. (session.c) */
double st_prof_clock(void);  /* monotonic seconds */
void st_prof_start(strata_session *s);
void st_prof_mark(strata_session *s, strata_phase phase);

/* The GPU path (forward_cuda.c): uploads the weights and allocates the GPU KV cache and scratch
 * (s->gpu; on failure s->gpu may be partly built: st_gpu_free releases it); the same forward as
 * st_forward_batch with the CUDA kernels; the bytes of weights resident on the GPU. Without
 * CUDA in the build, create and forward return STRATA_ERR_UNSUPPORTED. */
strata_status st_gpu_create(strata_session *s);
void st_gpu_free(strata_session *s);
/* The greedy token of a logits row: NaN as -inf, the lowest id on ties (strata_sampler_sample's
 * greedy path without penalties); INVALID_ARG when no logit is finite. */
strata_status st_argmax_row(const float *x, int32_t n, strata_token *out);
strata_status st_gpu_forward_batch(strata_session *s, const strata_token *tokens, int64_t T,
                                   float *logits, int all);
size_t st_gpu_weight_bytes(const strata_session *s);

#endif /* STRATA_SESSION_H */
