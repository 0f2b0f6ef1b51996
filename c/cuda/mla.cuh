/* mla.cuh - the latent-attention kernels' geometry and one call's arguments, shared by mla.cu and
 * the check-and-time program c/cuda/dev/mla_check.cu (which forces the split or the block walk to
 * compare them).
 *
 * Attention kernel (st_k_mla_attn): a block of 8 warps serves ST_MLA_RB query rows (a row is one
 * (token, head) pair, rows ordered t * n_head + h) and either every chunk of its rows in order
 * (the block walk: prompt batches) or one chunk (the split: decode-sized calls, partials merged by
 * st_k_mla_combine). Each tile of ST_MLA_TL positions goes to shared memory as f32, transposed
 * ([d][position], stride ST_MLA_KS so both the score and the value reads are free of bank
 * conflicts); thread (warp w, lane l) scores rows w and w + 8 against position l (four partial sums
 * over d, added in a fixed order), each warp then updates its two rows' online softmax and
 * accumulates P * V (lane = value dimensions l, l + 32, ...). A row's chunk state (max, sum, acc)
 * is merged into its running state with st_mla_merge, chunk by chunk in index order, by the block
 * itself or by the combine pass: the same operations, so the same bits. */
#ifndef STRATA_CUDA_MLA_CUH
#define STRATA_CUDA_MLA_CUH

#include "common.cuh"
#include "cuda_mla.h"

#define ST_MLA_THREADS 256   /* 8 warps */
#define ST_MLA_RB 16         /* query rows per block: 2 a warp */
#define ST_MLA_TL 32         /* positions per tile (= lanes) */
#define ST_MLA_KS 33         /* the transposed tile's row stride (floats) */
#define ST_MLA_SPLIT_ROWS 256 /* the split serves calls of at most this many rows (T * n_head) */

/* One attention call's arguments. */
struct st_mla_args {
    const void *k;            /* the latent cache, [n_ctx][D] */
    const float *q;
    int64_t ldq;
    float *out;
    int64_t ldo;
    float *part;              /* split: [rows][n_chunks][R + 2] (max, sum, acc) */
    int n_head, R, D, Dp, T;  /* Dp: D rounded up to 4 */
    int64_t pos0;
    const int32_t *pos_dev;   /* non-NULL: pos0 is *pos_dev */
    float scale;
    int n_chunks;             /* chunks of the plan (the partials' stride) */
    int split;                /* 1: one chunk a block (blockIdx.y), partials to part */
};

/* Dynamic shared memory of the attention kernel for rows of D values. */
static inline size_t st_mla_smem_bytes(int D) {
    const size_t Dp = (size_t)((D + 3) / 4 * 4);
    return sizeof(float) * ((size_t)ST_MLA_RB * Dp + Dp * ST_MLA_KS + (size_t)ST_MLA_RB * ST_MLA_TL);
}

/* st_cuda_mla_attention with the split forced: force 0 never (the block walk), 1 whenever the
 * workspace holds the partials, -1 the library's choice; *split_out (may be NULL) says which ran. */
strata_status st_cuda_mla_attention_ex(const st_cuda_kv_layer *kv, const st_cuda_mla_shape *s, const float *d_q,
                                       int64_t ldq, int64_t T, int64_t pos0, const int32_t *d_pos, float *d_out,
                                       int64_t ldo, void *d_ws, size_t ws_bytes, void *stream, int force,
                                       int *split_out);

#endif /* STRATA_CUDA_MLA_CUH */
