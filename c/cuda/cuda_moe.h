/* cuda_moe.h - the grouped MoE step on the GPU (c/cuda/moe.cu; the router in moe_router.cu):
 * router (softmax, top-k, optional renormalization; or st_route_scored's rule: sigmoid, selection bias, groups, scale) with the
 * ids/weights mirrored into a host-mapped "doorbell" buffer, and the grouped expert FFN over a
 * per-expert pointer table (gate/up -> SwiGLU -> down, weighted combine in fixed slot order). Plain C; exists only in builds with STRATA_HAVE_CUDA.
 *
 * Equal to the CPU path: st_cuda_moe_route gives the ids of st_route_topk (ops_moe.c) and its
 * weights within ~1e-6; st_cuda_moe_ffn approximates st_moe_ffn (activations quantized to q8_1
 * here, to q8_0/q8_K on the CPU: NMSE ~1e-5). Every result is deterministic (each output element
 * is computed by one warp in a fixed order): two runs give the same bits.
 *
 * All entries enqueue on stream (a cudaStream_t; NULL = the default stream) and do not wait. */
#ifndef STRATA_CUDA_MOE_H
#define STRATA_CUDA_MOE_H

#include "strata.h"
#include "cuda_tensor.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One expert's three matrices, as device descriptors: gate and up (ne0 = n_embd, ne1 = n_ff),
 * down (ne0 = n_ff, ne1 = n_embd). The data pointers may point anywhere in device memory (later:
 * cache slots) and must be 4-byte aligned; row_bytes a multiple of 2. The kernels read data and
 * row_bytes from the table; the types and shapes come from st_cuda_moe_args (every expert of one
 * table has the same types and shapes; the type/ne fields of the entries are not read). */
typedef struct st_cuda_expert {
    st_cuda_mat gate, up, down;
} st_cuda_expert;

/* ---- supports -------------------------------------------------------------------------------- */

/* 1 if type can be an expert matrix type: the dp4a kernels on q8_1 activations (Q4_0, Q8_0,
 * Q4_K, Q5_K, Q6_K; st_cuda_moe_type_dp4a() = 1) or the fallback that decodes weights to f32 on
 * the fly against f32 activations (F32, F16, BF16, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K). */
int st_cuda_moe_supports(strata_type type);
int st_cuda_moe_type_dp4a(strata_type type);
/* 1 if the grouped GEMVs (decode-sized calls) read q8_1 activations for type: the dp4a types,
 * and Q3_K, Q5_0, Q4_1, Q5_1, IQ4_NL unless a build sets STRATA_MOE_DP4A_EXT=0 (moe.cu); 0: the
 * f32 fallback. The prompt tiles do not depend on it. */
int st_cuda_moe_type_gemv_q8(strata_type type);
/* 1 if type has the tensor-core tile path of prompt batches (see ST_CUDA_MOE_MAX_PAIRS): Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, the IQ3 / IQ2 / IQ1
 * types, MXFP4. Defined in mmq.cu. */
int st_cuda_moe_type_tiles(strata_type type);
/* 1 if calls with expert biases or act 1 (gpt-oss) take the tile path too (the default); 0 in
 * builds with -DSTRATA_MMQ_OAI=0 in NVCC_EXTRA, where such calls keep the GEMV path (T * k <=
 * 1024). Defined in mmq.cu. */
int st_cuda_moe_tiles_oai(void);

/* ---- doorbell: host-mapped pinned ids/weights ---------------------------------------------- */

/* A pinned, host-mapped buffer of max_tokens x k routing results: the router writes it from the
 * device; the host reads h_ids/h_wts after the stream (or an event) completed. d_ids/d_wts are the
 * device-side addresses of the same memory. */
typedef struct st_cuda_doorbell {
    int32_t *h_ids;  float *h_wts;   /* host pointers */
    int32_t *d_ids;  float *d_wts;   /* device pointers of the same memory */
    int64_t max_tokens;
    int32_t k;
} st_cuda_doorbell;

/* cudaHostAlloc(mapped) of max_tokens * k ids and weights; contents start at 0. */
strata_status st_cuda_doorbell_alloc(st_cuda_doorbell *db, int64_t max_tokens, int32_t k);
/* Frees and zeroes *db; a zeroed or NULL db is a no-op. */
strata_status st_cuda_doorbell_free(st_cuda_doorbell *db);

/* ---- the CPU expert pool's doorbell (c/experts/pool.h) in host-mapped memory ------------------ */

/* A CPU layer's request from the device: the T rows of d_x (n_embd apart) and their routing
 * (d_ids/d_wts, T x k) into the layer's mapped doorbell arrays (m_*: device addresses of mapped
 * host memory, st_cuda_host_alloc_mapped), then *m_T = T and *m_req = *d_step, each made
 * visible to the host before the next. Ordered after the stream's earlier work. */
strata_status st_cuda_pool_publish(const float *d_x, const int32_t *d_ids, const float *d_wts,
                                   int64_t T, int64_t n_embd, int32_t k, float *m_x, int32_t *m_ids,
                                   float *m_wts, int32_t *m_T, uint32_t *m_req,
                                   const uint32_t *d_step, void *stream);
/* The same for a layer whose experts are partly in GPU slots: d_where (device, [n_expert],
 * nonzero: resident) splits the routing: the pool gets -1 for the resident experts, d_ids_gpu
 * (device, T x k) the resident ones and -1 for the others (the GPU's grouped kernel skips -1),
 * d_hist (device, T x k, may be NULL) a copy of d_ids. d_zc_of_m (device, [T k + 1], may be
 * NULL): of M distinct missed experts, the first d_zc_of_m[M] in slot order (at most
 * ST_POOL_ZC_MAX) go to the GPU too (its table then reads them from host memory: pool_pcie),
 * their d_hist entries or-ed with ST_POOL_ZC_FLAG. */
#define ST_POOL_ZC_MAX 128
#define ST_POOL_ZC_FLAG 0x40000000
strata_status st_cuda_pool_publish_split(const float *d_x, const int32_t *d_ids, const float *d_wts,
                                         int64_t T, int64_t n_embd, int32_t k, const int32_t *d_where,
                                         int32_t n_expert, int32_t *d_ids_gpu, int32_t *d_hist,
                                         const int32_t *d_zc_of_m, float *m_x, int32_t *m_ids, float *m_wts,
                                         int32_t *m_T, uint32_t *m_req, const uint32_t *d_step, void *stream);
/* Waits on the device until *m_done == *d_step (the pool answered this step's request), then
 * copies the n floats of m_out (the pool's rows) to d_out. n 0: the wait alone (m_out and d_out
 * may be NULL): the stream's later kernels may read the pool's mapped rows themselves (the
 * wait's system-scope acquire orders them after the pool's writes). A pool silent for ~10 s
 * sets *d_err to code (the first one stuck: which flag, ST_POOL_WAIT_*) and writes zeros
 * instead of hanging the stream (n 0: nothing; what reads the mapped rows reads stale ones);
 * the caller checks d_err. */
#define ST_POOL_WAIT_DONE 1 /* a layer's done flag (its rows, on time) */
#define ST_POOL_WAIT_PART 2 /* a deferred layer's partial flag (its heavy rows) */
#define ST_POOL_WAIT_LATE 3 /* a deferred layer's done flag, before the next layer's FFN */
strata_status st_cuda_pool_wait(const uint32_t *m_done, const uint32_t *d_step, const float *m_out,
                                int64_t n, float *d_out, int32_t *d_err, int32_t code, void *stream);

/* ---- router ----------------------------------------------------------------------------------- */

/* d_logits: device [T][n_expert] f32 router logits. For each token: softmax over all experts
 * (max-subtracted, sum in double), top-k by logit (ties: lower index first), weights = softmax
 * probabilities of the chosen experts, renormalized to sum 1 when norm != 0 - as st_route_topk.
 * Writes d_ids/d_wts (device [T][k], may be NULL when db is given) and, when db != NULL, the
 * same values into db (T <= db->max_tokens, k == db->k). 1 <= k <= n_expert <= 4096; T >= 0
 * (T == 0 is a no-op). NaN logits give unspecified (but in-range) ids. */
strata_status st_cuda_moe_route(const float *d_logits, int64_t T, int32_t n_expert, int32_t k,
                                int norm, int32_t *d_ids, float *d_wts, st_cuda_doorbell *db,
                                void *stream);

/* A layer's routing rule as st_route_scored (ops.h) describes it: softmax or sigmoid scores, a
 * selection bias (device [n_expert], DeepSeek-V3's exp_probs_b; NULL: none) added for the choice
 * only, group-limited top-k (n_groups > 1: the n_group_used groups with the best sum of their
 * top two selection scores compete), the chosen scores as weights, renormalized (sum clamped at
 * 2^-14) and multiplied by scale. */
typedef struct st_cuda_route_cfg {
    int32_t n_expert, k;
    int sigmoid;              /* 0: softmax (ST_GATING_SOFTMAX), 1: sigmoid */
    int norm;
    float scale;              /* 1: none */
    int32_t n_groups, n_group_used; /* n_groups <= 1: no groups */
    const float *d_bias;
    int softmax_weight;       /* 1 (with sigmoid 0): gpt-oss's ST_GATING_SOFTMAX_WEIGHT, the top-k
                                 of the logits (plus d_bias), their weights a softmax over the k */
    const float *d_logit_bias; /* device [n_expert] or NULL: the router's own bias (gpt-oss),
                                  added to the logits st_cuda_moe_router1_cfg computes (and
                                  writes); st_cuda_moe_route_cfg refuses it (add it to the logits
                                  first: st_cuda_add_bias) */
} st_cuda_route_cfg;

/* 1 for st_route_topk's rule (softmax, no bias, no groups, scale 1): st_cuda_moe_route's kernel
 * (with d_logit_bias in st_cuda_moe_router1_cfg: the bias first, then that rule). */
int st_cuda_route_plain(const st_cuda_route_cfg *c);

/* st_cuda_moe_route for any rule: the plain one through st_cuda_moe_route (its bits), the others
 * by a kernel of st_route_scored's rule: the same ids as the CPU for the same logits (ties to the
 * lower index; sigmoid as 1 / (1 + expf(-x)), whose device expf may differ from the host's in
 * the last bit, so a selection within an ulp of a tie may part), weights within float rounding.
 * Scored rules: n_expert <= 2048, n_groups <= 64 dividing n_expert, n_group_used groups holding
 * at least k experts. */
strata_status st_cuda_moe_route_cfg(const st_cuda_route_cfg *c, const float *d_logits, int64_t T,
                                    int32_t *d_ids, float *d_wts, st_cuda_doorbell *db, void *stream);

/* The route tail skip (st_route_tail_skip's rule, degrade.h) on the device: in each of T rows of k
 * slots the lightest are set to -1 while their weights sum to at most p, never the heaviest; the
 * count of dropped slots is added to *d_count (device). k <= 64. */
strata_status st_cuda_route_tail_skip(int32_t *d_ids, const float *d_wts, int64_t T, int32_t k, float p,
                                      unsigned long long *d_count, void *stream);

/* One token's router in one launch (a decode step): logits = W x (W: F32, n_expert rows; the
 * bits of st_cuda_mmv), the routing of st_cuda_moe_route from them (d_ids/d_wts and/or db), and
 * when d_xq is set, x as n_embd / 32 q8_1 blocks the way st_cuda_moe_ffn quantizes it (pass it as
 * st_cuda_moe_args.xq: the FFN then runs without its plan); when d_xm is set, a copy of x's
 * n_embd floats (e.g. host-mapped memory: a CPU layer's hand-down). d_sync: one device word, 0 before the
 * call and left 0 by it (the last of the n_expert blocks routes); one per stream of concurrent
 * calls. Needs st_cuda_moe_router1_supports (n_expert <= 256, W->ne0 a multiple of 32). */
int st_cuda_moe_router1_supports(const st_cuda_mat *W, int32_t n_expert, int32_t k);
strata_status st_cuda_moe_router1(const st_cuda_mat *W, const float *d_x, int32_t n_expert, int32_t k,
                                  int norm, float *d_logits, int32_t *d_ids, float *d_wts,
                                  st_cuda_doorbell *db, void *d_xq, float *d_xm, uint32_t *d_sync, void *stream);
/* The same with any routing rule (st_cuda_moe_route_cfg's; the plain one gives
 * st_cuda_moe_router1's bits). */
strata_status st_cuda_moe_router1_cfg(const st_cuda_mat *W, const float *d_x, const st_cuda_route_cfg *c,
                                      float *d_logits, int32_t *d_ids, float *d_wts, st_cuda_doorbell *db,
                                      void *d_xq, float *d_xm, uint32_t *d_sync, void *stream);

/* ---- grouped expert FFN ---------------------------------------------------------------------- */

typedef struct st_cuda_moe_args {
    const st_cuda_expert *experts; /* device: [n_expert] */
    int32_t n_expert;
    strata_type type_gate, type_up, type_down; /* type_gate must equal type_up */
    int64_t n_embd, n_ff;          /* both multiples of 32 and of the types' block sizes */
    const float *x;                /* device [T][n_embd] */
    const void *xq;                /* NULL, or for T == 1: x's q8_1 rows from st_cuda_moe_router1
                                    * (no plan then: gate/up types and down types with dp4a
                                    * kernels, k <= 16, take down and combine in one launch) */
    int64_t T;                     /* tokens, 1..; T * k <= ST_CUDA_MOE_MAX_PAIRS (see below) */
    const int32_t *ids;            /* device [T][k]; ids outside [0, n_expert) contribute 0 */
    const float *wts;              /* device [T][k] */
    int32_t k;
    float *out;                    /* device [T][n_embd]; must not alias x */
    int accumulate;                /* 0: out = sum_k w * FFN; 1: out += sum_k w * FFN */
    void *ws;                      /* device workspace of st_cuda_moe_wsize bytes, 256-aligned */
    size_t ws_bytes;
    uint32_t *sync;                /* NULL, or n_sync device words, 0 before the call and left 0
                                    * (one set per stream of concurrent calls): with
                                    * st_cuda_moe_set_gu_q8(1), a call with xq then also
                                    * quantizes h inside the gate/up kernel (one launch fewer)
                                    * when n_sync >= k * n_ff / 32 */
    int64_t n_sync;
    /* gpt-oss: per-expert biases (indexed by the ids, as experts) and the activation; the GEMV
     * path only (T * k <= 1024) unless st_cuda_moe_tiles_oai(), and not st_cuda_moe_exact_rows */
    const float *b_gate, *b_up;    /* device [n_expert][n_ff] or NULL: added before the activation */
    const float *b_down;           /* device [n_expert][n_embd] or NULL: added to each expert's
                                    * output row before its weight (the CPU's combine) */
    int act;                       /* 0: SwiGLU; 1: gpt-oss's clamped SwiGLU (st_det_swiglu_oai) */
} st_cuda_moe_args;

/* Most (token, slot) pairs of one st_cuda_moe_ffn call. Up to 1024 pairs any supported type runs
 * on the GEMV path; beyond that, and wherever a batch has many pairs per expert (T >= 32 and
 * T * k >= 4 n_expert), types with a tensor-core tile kernel for gate/up and down
 * (st_cuda_moe_type_tiles) take the tile path: 64 x 64 f16 tiles per expert (cuda_mmq.h).
 * Other types beyond 1024 pairs are INVALID_ARG. */
#define ST_CUDA_MOE_MAX_PAIRS 65536

/* Workspace bytes of st_cuda_moe_ffn. */
size_t st_cuda_moe_wsize(int64_t T, int32_t k, int64_t n_embd, int64_t n_ff);

/* out[t] (=|+=) sum over slots s = 0..k-1, in that order, of wts[t][s] * FFN_{ids[t][s]}(x[t]),
 * FFN_e(x) = down_e(silu(gate_e x) * up_e x) (with biases and act: down_e(act(gate_e x + bg_e,
 * up_e x + bu_e)) + bd_e). (token, slot) pairs are grouped by expert on the
 * device (GEMV path: up to 8 per group, so each expert's rows are read once for up to 8 tokens;
 * tile path: 64 per tile). A shared
 * expert is the same call with a one-expert table, ids all 0, k = 1, wts = its per-token gate
 * (sigmoid(gate_inp_shexp . x) or 1) and accumulate = 1. Errors: INVALID_ARG (shapes, NULLs, ws
 * too small), UNSUPPORTED (types), BACKEND (launches). */
strata_status st_cuda_moe_ffn(const st_cuda_moe_args *a, void *stream);

/* ---- the CPU's arithmetic: CPU-exact expert rows (moe_exact.cu) ------------------------------ */

/* 1 if st_cuda_moe_exact_rows takes these types (gate/up, down): Q4_0, Q8_0, Q4_K, Q5_K, Q6_K.
 * Its rows equal the CPU's only where the CPU's kernels for them are the exact-block-sum ones
 * (dot.h's st_vec_dot_exact_blocks: the AVX-512 level). */
int st_cuda_moe_exact_supports(strata_type gate_up, strata_type down);
/* Workspace bytes of st_cuda_moe_exact_rows. */
size_t st_cuda_moe_exact_wsize(int64_t T, int32_t k, int64_t n_embd, int64_t n_ff);
/* rows[(t * k + s) * n_embd ..] (device) = FFN_{ids[t][s]}(x[t]) for each slot whose id is in
 * [0, n_expert) (other rows are not written), in the CPU's arithmetic: bit-identical to the rows
 * of st_moe_ffn_end_rows (ops.h) for the same x, weights and ids. Reads a's experts, n_expert,
 * types, widths (n_embd a multiple of 256 for K-quant gate/up, of 32 otherwise; n_ff likewise
 * for down), x, T, ids, k and ws / ws_bytes (st_cuda_moe_exact_wsize); not wts, out, xq, sync.
 * For decode-sized calls (a warp per output row and pair). */
strata_status st_cuda_moe_exact_rows(const st_cuda_moe_args *a, float *rows, void *stream);
/* out[t][i] = sum over slots s = 0..k-1 with ids[t][s] in [0, n_expert), in that order, of
 * wts[t][s] * row[(t * k + s) * n_embd + i], row = rows_a where ids_a[t][s] is in range, else
 * rows_b (either may be host-mapped memory): the first product, then each product and sum
 * rounded on its own, as st_moe_ffn's combine on the CPU (0 where no slot is valid). All device
 * pointers, [T][k] ids and weights; out must not alias the rows. */
strata_status st_cuda_moe_combine_rows(const int32_t *ids, const int32_t *ids_a, const float *rows_a,
                                       const float *rows_b, const float *wts, int64_t T, int32_t k,
                                       int64_t n_embd, int32_t n_expert, float *out, void *stream);

/* Whether one-token calls with counters quantize h inside the gate/up kernel (see .sync): off
 * by default (-DST_MOE_GU_Q8=1 at build time: on) until measured faster. Process-wide; for tests
 * and A/B runs, not while calls are being enqueued. */
void st_cuda_moe_set_gu_q8(int on);

/* STRATA_IQ_STAGE_TABLES: whether the grouped expert kernels copy the IQ3_XXS / IQ3_S codebooks
 * and the sign masks into shared memory first and decode from there (1) or read them through the
 * read-only cache (0, the start). The same bits either way. Process-wide, set by a CUDA session at
 * create; not while calls are being enqueued. */
void st_cuda_moe_set_iq_stage(int on);
/* The default for a device of compute capability major.minor: on for 6.0 only (its read-only
 * cache serves the lanes' scattered codebook reads worst). A pure function (tests fake the
 * capability). */
int st_cuda_iq_stage_default(int cc_major, int cc_minor);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_CUDA_MOE_H */
