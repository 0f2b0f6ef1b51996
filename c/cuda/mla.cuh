/* mla.cuh - the latent-attention kernels' geometry and one call's arguments, shared by mla.cu,
 * mla_attn.cu and the check-and-time program c/cuda/dev/mla_check.cu (which forces the split or
 * the block walk to compare them).
 *
 * The function (what fixes the bits): positions go in chunks of ST_MLA_CHUNK at absolute
 * boundaries. For a row (one (token, head) pair, rows ordered t * n_head + h) and a chunk: each
 * score is one thread's dot product (four partial sums over d mod 4, d ascending, added
 * (0 + 1) + (2 + 3)) times the scale; the chunk's max m over the row's positions; p = exp(s - m);
 * the sum l by the warp's butterfly over (p[lane] + p[lane + 32]); each value dimension's sum of
 * p * V over the chunk's positions in ascending order (fma from 0). The chunks of a row are then
 * folded left to right (st_mla_merge: the first taken as it is), and the result divided by the
 * sum. Which block or thread computes what never enters.
 *
 * Attention kernel (st_k_mla_attn<RB>): a block of 8 warps serves RB query rows and either every
 * chunk of its rows in order, folding in registers (the block walk: prompts), or one chunk
 * (blockIdx.y: the split of decode-sized calls), whose state goes to the partials that
 * st_k_mla_combine folds in the same order. Per chunk: the chunk's cache rows to shared memory
 * as stored (f16 or f32), scores (thread = position x RB/4 rows), the softmax (warp = row), then
 * P * V (thread = two value dimensions x RB rows). Narrow split calls take RB = 4 (more blocks
 * over the SMs), the rest RB = 16. */
#ifndef STRATA_CUDA_MLA_CUH
#define STRATA_CUDA_MLA_CUH

#include "common.cuh"
#include "cuda_mla.h"

#include <math.h>

#define ST_MLA_THREADS 256    /* 8 warps */
#define ST_MLA_RB 16          /* query rows per block: prompts and wide split calls */
#define ST_MLA_RB_NARROW 4    /* query rows per block of split calls of at most 64 rows */
#define ST_MLA_SPLIT_ROWS 128 /* the split serves calls of at most this many rows (T * n_head) */

/* One attention call's arguments. */
struct st_mla_args {
    const void *k;            /* the latent cache, [n_ctx][D] */
    const float *q;
    int64_t ldq;
    float *out;
    int64_t ldo;
    float *part;              /* split: [rows][n_chunks][R + 2] (max, sum, acc) */
    int n_head, R, D, Dp, KS, T; /* Dp: D rounded up to 4; KS: the cache tile's row stride */
    int64_t pos0;
    const int32_t *pos_dev;   /* non-NULL: pos0 is *pos_dev */
    float scale;
    int n_chunks;             /* chunks of the plan (the partials' stride) */
    int split;                /* 1: one chunk a block (blockIdx.y), partials to part */
    int vec16;                /* the cache rows can be read 16 bytes at a time */
};

/* The cache tile's row stride in elements: D rounded up to 4, plus 4 where that is an even number
 * of quads (an odd number of 8-byte (f16) or 16-byte (f32) words: conflict-free reads). */
static inline int st_mla_kstride(int D) {
    const int Dp = (D + 3) / 4 * 4;
    return (Dp / 4) % 2 == 0 ? Dp + 4 : Dp;
}

/* Dynamic shared memory of the attention kernel: Q rows [RB][Dp] f32, probabilities [CHUNK][RB],
 * max and sum [RB] each, the cache tile [CHUNK][KS] as stored. */
static inline size_t st_mla_smem_bytes(int D, int rb, int f16) {
    const size_t Dp = (size_t)((D + 3) / 4 * 4);
    return sizeof(float) * ((size_t)rb * Dp + (size_t)ST_MLA_CHUNK * rb + 2 * (size_t)rb) +
           (f16 ? 2u : 4u) * (size_t)ST_MLA_CHUNK * (size_t)st_mla_kstride(D);
}

/* The shape checks every latent-attention entry point shares. */
static inline bool st_mla_shape_ok(const st_cuda_mla_shape *s) {
    return s && s->n_head >= 1 && s->n_head <= 65535 && s->kv_lora >= 1 && s->kv_lora <= ST_MLA_MAX_LORA &&
           s->n_rot >= 0 && s->n_rot <= 1024 && (s->kv_lora + s->n_rot) % 2 == 0 && isfinite(s->scale);
}

/* st_cuda_mla_attention with the split forced: force 0 never (the block walk), 1 whenever the
 * workspace holds the partials, -1 the library's choice; *split_out (may be NULL) says which ran. */
strata_status st_cuda_mla_attention_ex(const st_cuda_kv_layer *kv, const st_cuda_mla_shape *s, const float *d_q,
                                       int64_t ldq, int64_t T, int64_t pos0, const int32_t *d_pos, float *d_out,
                                       int64_t ldo, void *d_ws, size_t ws_bytes, void *stream, int force,
                                       int *split_out);

#endif /* STRATA_CUDA_MLA_CUH */
