/* attn.cuh - the attention kernels' geometry, the 16-byte cache loads, and the launch plan
 * (how many row groups and position chunks), shared by attn.cu and the standalone check-and-time
 * program c/cuda/dev/attn_check.cu, which may force a plan to compare variants.
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

#endif /* STRATA_CUDA_ATTN_CUH */
