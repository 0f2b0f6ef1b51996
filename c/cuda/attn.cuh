/* attn.cuh - the attention kernels' geometry, the 16-byte cache loads, the launch plan (how many
 * row groups and position chunks) and one call's arguments, shared by attn.cu (the FMA kernels,
 * the plan, the dispatch and the combine pass), attn_tc.cu (the tensor-core kernels) and the
 * standalone check-and-time program c/cuda/dev/attn_check.cu, which may force a plan to compare
 * variants.
 *
 * Kernel shape (attn.cu): a block of 8 warps serves one KV head, one chunk of positions and one
 * group of 8*RPW query rows of that KV head (a row is one (token, query head) pair; the G query
 * heads of a KV head and the T tokens all share its K/V reads). It walks its chunk in tiles of 32
 * positions: K and V of the tile go to shared memory as f32 (K transposed, [d][position]), each
 * warp scores its RPW rows against the 32 positions (lane = position), updates its running max
 * and sum (online softmax, f32), and accumulates P*V (lane = dimension d, d + 32, ...). With one
 * chunk the block writes the normalized output; with several it writes (acc, max, sum) partials
 * and st_k_attn_combine merges the chunks in index order. */
#ifndef STRATA_CUDA_ATTN_CUH
#define STRATA_CUDA_ATTN_CUH

#include "common.cuh"
#include "cuda_ops.h"

#define ST_ATTN_THREADS 256       /* 8 warps */
#define ST_ATTN_TILE 32           /* positions per tile (= lanes) */
#ifndef ST_ATTN_MIN_CHUNK
#define ST_ATTN_MIN_CHUNK 32      /* fewest positions per chunk when splitting (a build-time A/B) */
#endif
#define ST_ATTN_MAX_CHUNKS 1024

/* 8 cache elements (f16) or 4 (f32) from a 16-byte aligned address, as floats. */
static __device__ __forceinline__ void st_ld16_f16(const void *p, float f[8]) {
    const uint4 u = __ldg((const uint4 *)p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float2 v = __half22float2(*(const __half2 *)&w[k]);
        f[2 * k] = v.x;
        f[2 * k + 1] = v.y;
    }
}
static __device__ __forceinline__ void st_ld16_f32(const void *p, float f[4]) {
    const float4 u = __ldg((const float4 *)p);
    f[0] = u.x; f[1] = u.y; f[2] = u.z; f[3] = u.w;
}

/* The kernel families of one call (st_cuda_attn_kernel_name's order). */
typedef enum { ST_ATTN_K_FMA, ST_ATTN_K_DEC, ST_ATTN_K_DTC, ST_ATTN_K_TC } st_attn_kernel;

/* How one call is laid out. */
struct st_attn_plan {
    int rpw;          /* query rows per warp: 1 (few rows: decode) or 4 (many rows: prefill) */
    int n_rg;         /* row groups of 8 * rpw rows per KV head */
    int chunk;        /* positions per chunk, a multiple of ST_ATTN_TILE */
    int n_chunks;     /* 1: one pass, no workspace */
    size_t smem;      /* dynamic shared memory bytes per block */
    size_t ws_bytes;  /* partials needed (0 when n_chunks == 1) */
};

/* The plan for T query tokens whose last attends np positions, on a GPU of sm_count SMs, with
 * ws_cap bytes of workspace available. target_blocks > 0 overrides the block count aimed at
 * (default 4 per SM); rpw_force 1 or 4 overrides the rows per warp. */
st_attn_plan st_attn_make_plan(const st_cuda_attn_shape *s, int64_t T, int64_t np, int sm_count,
                               size_t ws_cap, int target_blocks, int rpw_force);

/* st_cuda_attention with a forced plan (target_blocks / rpw_force as above; 0 = default;
 * rpw_force 16: the tensor-core prefill kernel, st_k_attn_tc, for an f16 cache, head_dim 64/128;
 * 32: the tensor-core decode kernel, st_k_attn_dtc (same caches, at most 16 rows per KV head;
 * target_blocks then sets its block count); -1: the FMA decode kernel, st_k_attn_dec (at most 8
 * rows per KV head)). */
strata_status st_cuda_attention_ex(const st_cuda_kv_layer *kv, const st_cuda_attn_shape *s,
                                   const float *d_q, int64_t ldq, int64_t T, int64_t pos0,
                                   const int32_t *d_pos, float *d_out, int64_t ldo, void *d_ws, size_t ws_bytes,
                                   void *stream, int target_blocks, int rpw_force,
                                   st_attn_plan *plan_out);

/* ---- shared by attn.cu (FMA kernels, plan, dispatch, combine) and attn_tc.cu (tensor cores) ---- */

static inline int64_t st_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The decode kernels start reading K/V rows before pos0 (the ones the kernels they wait for never
 * write) ahead of griddepcontrol.wait. -DST_ATTN_DTC_EARLY=0: every read after the wait (A/B). */
#ifndef ST_ATTN_DTC_EARLY
#define ST_ATTN_DTC_EARLY 1
#endif
static __device__ __forceinline__ void st_attn_prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* Bytes of split-K partials per chunk of a call of T tokens: (acc[head_dim], max, sum) a row. */
static inline size_t st_attn_part_bytes(const st_cuda_attn_shape *s, int64_t T) {
    return (size_t)T * (size_t)s->n_head * (size_t)(s->head_dim + 2) * sizeof(float);
}

/* The split of np positions every plan makes: n chunks wanted, cut to chunks of at least
 * min_chunk positions, to ST_ATTN_MAX_CHUNKS and to what ws_cap holds of per_chunk-byte partials
 * (one pass below two), each chunk a multiple of tile positions. Returns the chunk length; the
 * chunk count is cdiv(np, chunk). */
static inline int64_t st_attn_split(int64_t n, int64_t np, int64_t min_chunk, int64_t tile, size_t per_chunk,
                                    size_t ws_cap) {
    if (n > st_cdiv(np, min_chunk)) n = st_cdiv(np, min_chunk);
    if (n > ST_ATTN_MAX_CHUNKS) n = ST_ATTN_MAX_CHUNKS;
    if (n < 1) n = 1;
    if (n > 1 && (size_t)n * per_chunk > ws_cap) n = (int64_t)(ws_cap / per_chunk);
    if (n < 2) n = 1;
    const int64_t chunk = st_cdiv(st_cdiv(np, n), tile) * tile;
    return chunk < tile ? tile : chunk;
}

/* One call's arguments, as every kernel family takes them. */
struct st_attn_args {
    const void *k, *v;
    int64_t n_ctx;
    const float *q;
    int64_t ldq;
    float *out;
    int64_t ldo;
    float *part;
    int n_head, group, T;
    int64_t pos0;
    const int32_t *pos_dev;   /* non-NULL: pos0 is *pos_dev (a replayed graph's position) */
    float scale;
    int chunk, n_chunks;
    unsigned *sync;           /* st_k_attn, n_chunks > 1: [n_kv][n_rg] zeroed counters; the last
                               * chunk's block of a row group merges the partials (no combine) */
    block_q8_1 *q8;           /* st_k_attn with sync or one chunk: out also as Q8_1 rows (ldo =
                               * n_head * HD) */
    int window;               /* st_k_attn only: > 0, a row at position p sees p-window+1..p */
    const float *sinks;       /* st_k_attn and the combine only: [n_head] sink logits or NULL */
};

/* A row's output from its accumulator, running maximum m and sum l, with a sink logit: the
 * softmax's denominator gains exp(sink - M), M = max(m, sink) (ggml's soft_max with sinks). */
static __device__ __forceinline__ float st_attn_sink_div(float acc, float m, float l, float sink) {
    const float M = fmaxf(m, sink), cm = expf(m - M);
    return __fdiv_rn(acc * cm, fmaf(l, cm, expf(sink - M)));
}

/* The tensor-core kernels' geometry (attn_tc.cu). */
#ifndef ST_ATTN_TC_BM /* -DST_ATTN_TC_BM=128: blocks of 8 warps (a build-time A/B) */
#define ST_ATTN_TC_BM 64  /* query rows per prefill block: 16 per warp, so BM / 16 warps */
#endif
#define ST_ATTN_TC_MIN_ROWS 64 /* fewest rows (token, query head) per KV head for the prefill kernel */
#define ST_ATTN_TC_BN 64  /* positions per K/V tile */
#ifndef ST_ATTN_TC_BNP /* -DST_ATTN_TC_BNP=32: the prefill kernel's tiles only (a build-time A/B) */
#define ST_ATTN_TC_BNP ST_ATTN_TC_BN
#endif
#ifndef ST_ATTN_TC_QL_SMEM /* 1: the split queries' lo fragments read from shared memory each tile */
#define ST_ATTN_TC_QL_SMEM 0 /* instead of held in 32 registers (for more blocks an SM; an A/B) */
#endif
#define ST_ATTN_TC_MIN_CHUNK 1024 /* fewest positions per chunk when the blocks alone leave SMs idle */
#define ST_ATTN_DTC_ROWS 16      /* rows (token, query head) per KV head: T * G <= 16, one m16 tile */
#define ST_ATTN_DTC_STAGES 3     /* K/V tiles of 64 positions in shared memory: 2 in flight */
#define ST_ATTN_DTC_MIN_CHUNK 256 /* fewest positions per chunk (4 tiles) */
/* The decode kernel on the tensor cores serves attended lengths (rounded as the plan) from this
 * many positions on; shorter ones keep the FMA kernels (chosen as before it existed). attn_check
 * on an H100, one token: qwen3 at 1,024 / 2,048 positions 20.4 / 20.4 us against the general FMA
 * kernel's 16.3 / 15.9, at 4,096 20.9 against 25.7 (olmoe: equal, equal, 26.3 against 30.3). */
#ifndef ST_ATTN_DTC_MIN_NP /* -DST_ATTN_DTC_MIN_NP=<huge>: never (A/B) */
#define ST_ATTN_DTC_MIN_NP 4096
#endif

/* The f16 operands of the tensor-core kernels: single (shape.tc 1), queries and probabilities
 * each as two f16 parts (shape.tc 2 and auto), or the probabilities only (shape.tc 3, prefill). */
typedef enum { ST_ATTN_TC_SINGLE = 0, ST_ATTN_TC_SPLIT_QP = 1, ST_ATTN_TC_SPLIT_P = 2 } st_attn_tc_prec;

/* attn_tc.cu's host side: dynamic shared memory a block, the prefill kernel's chunks (one pass
 * when the row blocks fill the SMs; else chunks of ST_ATTN_TC_MIN_CHUNK+ for ~2 blocks an SM,
 * within ws_cap), and the launches (head_dim 64 or 128; the decode kernel takes SINGLE or
 * SPLIT_QP). */
size_t st_attn_tc_smem(int hd);
size_t st_attn_dtc_smem(int hd);
int st_attn_tc_chunks(int64_t blocks, int64_t np, int64_t T, const st_cuda_attn_shape *s, size_t ws_cap,
                      int sm_count, int64_t *chunk_out);
strata_status st_attn_tc_run(const st_attn_args &a, int hd, int n_kv, st_attn_tc_prec prec, cudaStream_t s);
strata_status st_attn_dtc_run(const st_attn_args &a, int hd, int n_kv, st_attn_tc_prec prec, cudaStream_t s);

#endif /* STRATA_CUDA_ATTN_CUH */
