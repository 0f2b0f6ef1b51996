/* cuda_mla.h - the C interface of the GPU kernels of multi-head latent attention (deepseek2's
 * absorbed form, as c/engine/cpu/forward_cpu.c st_mla_block computes it): the per-head absorption
 * matmul (wk_b turning q_nope into latent space, wv_b turning a head's latent output into its
 * values), the latent cache store and causal attention over the latent cache (one KV head of
 * width D = kv_lora + n_rot whose values are the first kv_lora of each row).
 *
 * File: c/cuda/mla.cu, mla_attn.cu (kernel geometry in mla.cuh). Plain C declarations with C linkage; only in
 * builds with STRATA_HAVE_CUDA. The common rules of cuda_ops.h hold: d_* are device pointers (f32
 * unless said otherwise, 4-byte aligned), strides in floats, arguments checked first
 * (STRATA_ERR_INVALID_ARG), then the device (STRATA_ERR_UNSUPPORTED), kernels enqueued on stream
 * without waiting, STRATA_ERR_BACKEND naming a failed launch, T == 0 a no-op.
 *
 * Batch invariance: every output row of these kernels depends only on its own inputs (its token's
 * x or q rows, the cache rows up to its position), never on T, on the other rows of the call or on
 * how the call is planned: a prompt run at once and the same tokens one by one give the same bits
 * (the CPU contract, within this backend). The attention splits positions into chunks of
 * ST_MLA_CHUNK at fixed absolute boundaries, takes each chunk's softmax state (max, sum, P * V)
 * in one pass and folds the chunks of a row one after the other in index order, whether a block
 * walks them itself or a combine pass folds the partials of blocks that took one chunk each (the
 * split of decode-sized calls: every chunk of every row group a block, filling the SMs). The
 * absorption is one fma chain per output in ascending order, for any T. */
#ifndef STRATA_CUDA_MLA_H
#define STRATA_CUDA_MLA_H

#include "strata.h"
#include "cuda_ops.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- per-head absorption matmul ----------------------------------------------------------- */

/* A 3-D weight (cols, rows, n_head) as the GGUF stores attn_k_b / attn_v_b: head h's row j is
 * cols weights at data + (h * rows + j) * row_bytes. type F32, F16, BF16 or Q8_0. */
typedef struct st_cuda_mla_w {
    strata_type type;
    const void *data;        /* device */
    int64_t cols, rows, n_head;
    size_t row_bytes;        /* >= strata_row_bytes(type, cols); a multiple of 2 (4 for F32) */
} st_cuda_mla_w;

/* 1 if st_cuda_mla_absorb takes this type and row length: F32/F16/BF16 with cols % 4 == 0,
 * Q8_0 with cols % 32 == 0; cols <= 65536. */
int st_cuda_mla_absorb_supports(strata_type type, int64_t cols);

/* y[t][h][0:rows] = W[h] . x[t][h][0:cols] for t < T, h < n_head: x[t][h] at d_x + t*ldx + h*xhs,
 * y[t][h] at d_y + t*ldy + h*yhs, all heads and tokens in one launch. Weights dequantized exactly
 * as the CPU does, each output one f32 fma chain over i ascending (the same bits for every T).
 * y must not overlap x. E.g. the absorbed queries: x = the (T, H*head_dim_mla) q rows (xhs
 * head_dim_mla), y = the (T, H*(kv_lora + n_rot)) attention query rows (yhs kv_lora + n_rot). */
strata_status st_cuda_mla_absorb(const st_cuda_mla_w *W, const float *d_x, int64_t ldx, int64_t xhs,
                                 float *d_y, int64_t ldy, int64_t yhs, int64_t T, void *stream);

/* st_cuda_mla_absorb for T <= 8 tokens into dense rows (y[t] at d_y + t * n_head * rows, head h
 * at h * rows; rows % 32 == 0) that also writes each row as Q8_1 into d_yq: token t's
 * n_head * rows / 32 blocks from block t * n_head * rows / 32 (st_cuda_mmv_pre's layout), the bits
 * st_cuda_quantize_q8_1 gives of y. E.g. wv_b's values for the output GEMV: one launch fewer. */
strata_status st_cuda_mla_absorb_q8(const st_cuda_mla_w *W, const float *d_x, int64_t ldx, int64_t xhs,
                                    float *d_y, int64_t T, void *d_yq, void *stream);

/* d_dst[r*ldd + i] = d_src[r*lds + i] for r < rows, i < n (a strided row copy: the roped q part
 * of each head into its attention query row). */
strata_status st_cuda_mla_copy_rows(float *d_dst, int64_t ldd, const float *d_src, int64_t lds, int64_t n,
                                    int64_t rows, void *stream);

/* ---- latent cache and attention ------------------------------------------------------------ */

#define ST_MLA_CHUNK 64      /* positions per chunk (fixed: the bits do not depend on the plan) */
#define ST_MLA_MAX_LORA 512  /* largest kv_lora the attention kernel takes */

/* The latent attention of one layer: n_head query heads over one cache row of
 * kv_lora + n_rot values per position (the values: its first kv_lora). */
typedef struct st_cuda_mla_shape {
    int32_t n_head, kv_lora, n_rot;
    float scale;             /* score multiplier (hp.kq_scale) */
} st_cuda_mla_shape;

/* 1 if the kernels take this cache type (F16, F32) and shape: kv_lora 1..ST_MLA_MAX_LORA,
 * kv_lora + n_rot even, n_head >= 1, and the kernel's shared memory within device 0's per-block
 * limit (at DeepSeek-V3's 512 + 64: about 113 KiB for f16 caches, 186 KiB for f32;
 * st_cuda_smem_limit). Needs the device probed
 * for the limit; without a device it checks the shape alone. */
int st_cuda_mla_supports(strata_type kv_type, const st_cuda_mla_shape *s);

/* Bytes of one layer's latent cache: n_ctx rows of kv_lora + n_rot elements (0 on bad input).
 * The layer's st_cuda_kv_layer has k = that memory ([n_ctx][kv_lora + n_rot]) and v = NULL. */
size_t st_cuda_mla_kv_bytes(strata_type kv_type, const st_cuda_mla_shape *s, int64_t n_ctx);

/* Stores T rows (token t at d_k + t*ldk, kv_lora + n_rot floats: the normalized latent, then the
 * roped key part) at positions pos0.. (d_pos[0].. when d_pos is non-NULL, as st_cuda_kv_store),
 * converted to the cache type (f16: round to nearest even). */
strata_status st_cuda_mla_store(const st_cuda_kv_layer *kv, const st_cuda_mla_shape *s, const float *d_k,
                                int64_t ldk, int64_t T, int64_t pos0, const int32_t *d_pos, void *stream);

/* 1 if st_cuda_mla_prep takes this RoPE and shape: n_rot >= 2 with st_cuda_rope_supports(rope,
 * n_rot) (rope->n_rot <= n_rot), kv_lora above 256 (the latent's norm is a block's row). */
int st_cuda_mla_prep_supports(const st_cuda_rope_params *rope, const st_cuda_mla_shape *s);

/* A layer's attention inputs of T tokens in one launch, the bits of the launches it replaces:
 *  - the latent rows, token t's kv_lora + n_rot floats at d_kv + t*ldkv: the latent normalized in
 *    place (st_cuda_rmsnorm over kv_lora with d_kv_norm, eps), the key part roped in place
 *    (st_cuda_rope, one head of n_rot), then the row stored at position d_pos[0] + t (pos0 + t) as
 *    st_cuda_mla_store stores it;
 *  - the queries' roped parts, head h's n_rot floats at d_qpe + t*ldqp + h*qhs, copied behind the
 *    latent part of its query row (d_q + t*ldq + h*(kv_lora + n_rot) + kv_lora) and roped there
 *    (st_cuda_mla_copy_rows, then st_cuda_rope over the n_head heads of kv_lora + n_rot).
 * RoPE positions d_pos[t] (pos0 + t). d_q's latent parts are not touched (the absorption writes
 * them). UNSUPPORTED where st_cuda_mla_prep_supports says no. */
strata_status st_cuda_mla_prep(const st_cuda_rope_params *rope, const st_cuda_kv_layer *kv, const st_cuda_mla_shape *s,
                               float *d_kv, int64_t ldkv, const float *d_kv_norm, float eps, const float *d_qpe,
                               int64_t ldqp, int64_t qhs, float *d_q, int64_t ldq, int64_t T, int64_t pos0,
                               const int32_t *d_pos, void *stream);

/* Workspace bytes st_cuda_mla_attention can use for calls of up to T tokens over n_ctx positions
 * (the split-K partials of decode-sized calls; 0 when no call of that size splits). */
size_t st_cuda_mla_wsize(const st_cuda_mla_shape *s, int64_t T, int64_t n_ctx);

/* Causal latent attention: row (t, h), q at d_q + t*ldq + h*(kv_lora + n_rot), attends to cache
 * positions [0, pos0 + t]; softmax(scale * q . K[p]) weighted sum of K[p][0:kv_lora] into
 * d_out + t*ldo + h*kv_lora. Scores, softmax and sums in f32. Decode-sized calls split the
 * positions over blocks (partials in d_ws, merged by a combine pass) when d_ws holds them; else
 * each block walks its rows' chunks itself: the same bits either way. d_pos: pos0 is read from
 * d_pos[0] on the device (a replayed graph); the plan is made from pos0 rounded up as
 * st_cuda_attn_plan_np. d_out must not overlap d_q, the cache or d_ws. */
strata_status st_cuda_mla_attention(const st_cuda_kv_layer *kv, const st_cuda_mla_shape *s, const float *d_q,
                                    int64_t ldq, int64_t T, int64_t pos0, const int32_t *d_pos, float *d_out,
                                    int64_t ldo, void *d_ws, size_t ws_bytes, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_CUDA_MLA_H */
