/* cuda_ops.h - the C interface of the GPU per-token ops and attention: RMSNorm over rows (also the
 * per-head q/k norm and the whole-projection norm), the small elementwise ops of the forward pass
 * (residual add with a scale, bias add, SwiGLU, scale), RoPE (normal and NEOX, partial n_rot,
 * linear and YaRN scaling), the GPU KV cache store and causal GQA attention over it (split-K
 * "flash-decoding" with a combine pass; the same tiled kernel serves prefill).
 *
 * Files: c/cuda/norm.cu (RMSNorm + elementwise), c/cuda/rope.cu, c/cuda/attn.cu. Plain C
 * declarations, defined with C linkage in the .cu files; only in builds with STRATA_HAVE_CUDA.
 *
 * Common rules. Pointers named d_* are device pointers, f32 unless said otherwise, 4-byte aligned.
 * Row strides (ld*) are in floats. Every entry checks its arguments first (STRATA_ERR_INVALID_ARG,
 * no device needed), then that CUDA is usable (STRATA_ERR_UNSUPPORTED with the probe's reason),
 * then enqueues its kernels on stream (a cudaStream_t; NULL = the default stream) and returns
 * without waiting. A failing launch gives STRATA_ERR_BACKEND naming the kernel, file and line.
 * Nothing prints. Empty work (n == 0 or T == 0) is a no-op returning STRATA_OK. All kernels are
 * deterministic: the same inputs and launch shape give the same bits on every run.
 *
 * Equality with the CPU ops (c/compute/cpu/ops.c): RMSNorm, add, bias, scale and RoPE perform the
 * same f32 operations one by one (no FMA contraction) and differ from the CPU only where a double
 * reduction order or a double cos/sin lands on the other side of a float rounding (rare, 1 ulp);
 * SwiGLU differs by expf's last bits; attention sums in a different order (f32). */
#ifndef STRATA_CUDA_OPS_H
#define STRATA_CUDA_OPS_H

#include "strata.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- RMSNorm (norm.cu) ---------------------------------------------------------------------- */

/* 1 if st_cuda_rmsnorm handles rows of n floats (any n >= 1 up to 2^31-1). */
int st_cuda_rmsnorm_supports(int64_t n);

/* T tokens x n_sub rows of n floats: row (t, h) is d_x + t*ldx + h*n, its result goes to
 * d_y + t*ldy + h*n: y = x * 1/sqrt(mean(x^2) + eps) * w (d_w: n floats, NULL = no weight), the
 * sum of squares in double as st_rmsnorm. Whole rows: n_sub = 1, ld = n. Per-head q/k norm of a
 * [T][n_head*hd] buffer (or of the q part of a fused qkv buffer): n = hd, n_sub = n_head,
 * ld = the buffer's row stride. d_y may equal d_x (in place, same strides). Needs
 * ldx, ldy >= n_sub * n. */
strata_status st_cuda_rmsnorm(float *d_y, int64_t ldy, const float *d_x, int64_t ldx,
                              const float *d_w, int64_t n, int64_t n_sub, int64_t T, float eps,
                              void *stream);
/* st_cuda_rmsnorm of T whole rows (n_sub 1, ld n) that also writes each result row as Q8_1
 * blocks at d_q (T * n / 32 blocks, row t from block t * n / 32; n % 32 == 0, 4-byte aligned):
 * the bits st_cuda_quantize_q8_1 gives for y, in the same launch, so the GEMV that reads y next
 * can take them (st_cuda_mmv_pre) instead of quantizing y itself. */
strata_status st_cuda_rmsnorm_q8(float *d_y, const float *d_x, const float *d_w, int64_t n, int64_t T,
                                 float eps, void *d_q, void *stream);

/* ---- elementwise (norm.cu) ------------------------------------------------------------------ */

/* d_y[i] = d_x[i] + d_b[i] * scale for i < n (scale 1: exactly x + b). d_y may equal d_x or d_b. */
strata_status st_cuda_add(float *d_y, const float *d_x, const float *d_b, float scale, int64_t n,
                          void *stream);
/* d_y[t*ldy + i] += d_bias[i] for t < T, i < n (ldy >= n). */
/* The residual add and the next RMSNorm in one launch: x[t] += scale * b[t], then y[t] =
 * rmsnorm(x[t]) * w, for T rows of n floats (contiguous), with the bits of st_cuda_add followed by
 * st_cuda_rmsnorm (n_sub 1). y must not overlap x or b; w non-NULL. */
strata_status st_cuda_add_rmsnorm(float *d_x, const float *d_b, float scale, float *d_y,
                                  const float *d_w, int64_t n, int64_t T, float eps, void *stream);
/* The same, also writing y as Q8_1 rows at d_q, as st_cuda_rmsnorm_q8. */
strata_status st_cuda_add_rmsnorm_q8(float *d_x, const float *d_b, float scale, float *d_y,
                                     const float *d_w, int64_t n, int64_t T, float eps, void *d_q,
                                     void *stream);
strata_status st_cuda_add_bias(float *d_y, int64_t ldy, const float *d_bias, int64_t n, int64_t T,
                               void *stream);
/* SwiGLU on two buffers: d_h[t*ldh + i] = silu(g) * u, g = d_g[t*ldg + i], u = d_u[t*ldu + i],
 * silu(g) = g / (1 + expf(-g)), for t < T, i < n. d_h may equal d_g or d_u (same stride). */
strata_status st_cuda_swiglu(float *d_h, int64_t ldh, const float *d_g, int64_t ldg,
                             const float *d_u, int64_t ldu, int64_t n, int64_t T, void *stream);
/* d_y[i] = d_x[i] * s (divide = 0) or d_x[i] / s (divide = 1, as the CPU's logit scale). */
strata_status st_cuda_scale(float *d_y, const float *d_x, float s, int divide, int64_t n,
                            void *stream);

/* d_y[i] = 1 / (1 + expf(-d_x[i])) (the qwen2moe shared-expert gate). d_y may equal d_x. */
strata_status st_cuda_sigmoid(float *d_y, const float *d_x, int64_t n, void *stream);

/* ---- RoPE (rope.cu) ------------------------------------------------------------------------- */

#define ST_CUDA_ROPE_MAX_ROT 256   /* largest n_rot the kernel takes */

/* The fields of the CPU's st_rope_params (ops.h), same meaning; neox: 0 = ST_ROPE_NORM (pairs
 * 2i, 2i+1), 1 = ST_ROPE_NEOX (pairs i, i + n_rot/2). */
typedef struct st_cuda_rope_params {
    int neox;
    int32_t n_rot;           /* even, 2 .. min(head_dim, ST_CUDA_ROPE_MAX_ROT) */
    float freq_base;
    float freq_scale;        /* 1 / linear scaling factor */
    float ext_factor;        /* YaRN ramp mix (0: plain linear) */
    float attn_factor;
    float beta_fast, beta_slow;
    int32_t n_ctx_orig;
    int no_trunc;            /* YaRN correction dims unrounded (gpt-oss) */
} st_cuda_rope_params;

/* 1 if the kernel takes these parameters for heads of head_dim floats. */
int st_cuda_rope_supports(const st_cuda_rope_params *p, int64_t head_dim);

/* Rotates in place the first n_rot values of each of n_head heads of T tokens: head h of token t
 * is d_x + t*ldx + h*head_dim (ldx >= n_head*head_dim). Token t is at position d_pos[t] (device
 * int32[T]) or, with d_pos NULL, at pos0 + t. The angles are computed as st_rope_cache does (the
 * frequency table and the YaRN ramp on the host in double, theta and cos/sin in double on the
 * device), the rotation in f32 as st_rope_apply. */
strata_status st_cuda_rope(const st_cuda_rope_params *p, float *d_x, int64_t ldx, int64_t n_head,
                           int64_t head_dim, int64_t T, const int32_t *d_pos, int64_t pos0,
                           void *stream);

/* ---- sampling (sample.cu) -------------------------------------------------------------------- */

/* The greedy token of a row: written by the device. */
typedef struct st_cuda_argmax_out {
    int32_t id;      /* the argmax (NaN as -inf, ties to the lowest index; 0 if all are NaN/-inf) */
    float logit;     /* its value (-inf: no finite value in the row) */
} st_cuda_argmax_out;

/* Enqueues the argmax of n floats at d_x into *d_out (device, 4-byte aligned). */
strata_status st_cuda_argmax(const float *d_x, int64_t n, st_cuda_argmax_out *d_out, void *stream);

/* The k largest of n floats at d_x in strata_sampler's candidate order (larger first, ties to the
 * lower index, NaN as -inf): their indices into d_ids[k] and values into d_vals[k] (device), for
 * 1 <= k <= min(n, ST_CUDA_TOPK_MAX). d_ws: st_cuda_topk_wsize(n, k) bytes, 16-byte aligned (may
 * be NULL when n <= 2048). Deterministic: a sort network. */
#define ST_CUDA_TOPK_MAX 1024
size_t st_cuda_topk_wsize(int64_t n, int32_t k);
strata_status st_cuda_topk(const float *d_x, int64_t n, int32_t k, int32_t *d_ids, float *d_vals, void *d_ws,
                           size_t ws_bytes, void *stream);

/* ---- KV cache and attention (attn.cu) ------------------------------------------------------- */

/* One layer's GPU KV cache. Layout (the GPU's own, not the CPU's st_kv_layer): head-major and
 * NOT transposed, K [n_head_kv][n_ctx][head_dim] and V [n_head_kv][n_ctx][head_dim_v], so one
 * KV head's run of positions is one contiguous block for both. k and v: device, 16-byte aligned. */
typedef struct st_cuda_kv_layer {
    strata_type type;        /* STRATA_TYPE_F16 (default) or STRATA_TYPE_F32 */
    void *k;
    void *v;
    int64_t n_ctx;
} st_cuda_kv_layer;

/* As the CPU's st_attn_shape, plus the kernel choice for long batches. */
typedef struct st_cuda_attn_shape {
    int32_t n_head, n_head_kv, head_dim, head_dim_v;
    float scale;             /* score multiplier, usually 1/sqrt(head_dim) */
    int32_t tc;              /* 1: batches of 64 or more query rows per KV head over an f16 cache
                                with head_dim 64 or 128 take the tensor-core flash-attention
                                kernel, and calls of at most 16 rows per KV head over 4096+
                                positions the tensor-core decode kernel (queries and
                                probabilities rounded to f16, f32 softmax and sums); 2: the same with queries and probabilities split into two
                                f16 parts each (near-f32 products, twice the mma work; -1, session
                                option attn_tc's default, is the same); 3: the prefill kernel
                                with single f16 queries and split probabilities (3/4 of 2's mma
                                work; the decode kernel as 2); 0: the FMA kernel. On the
                                H200 the single-f16 kernel took pp512 at depth 16K 3.1x the FMA
                                kernel's speed, split 2.9x, and doubled the tiny model's KL against
                                the CPU (1.75e-4 against 6.1e-5), split not (6.1e-5). */
    int32_t window;          /* > 0: a query at position p sees positions p-window+1..p only */
    const float *sinks;      /* device [n_head] or NULL: each head's sink logit, a softmax term
                                with no value (gpt-oss). window or sinks set: the FMA kernel
                                st_k_attn serves every call (the decode and tensor-core kernels
                                take neither) */
} st_cuda_attn_shape;

/* 1 if the attention kernels take this cache type and shape: type F16 or F32, head_dim ==
 * head_dim_v in {64, 128, 256}, n_head a multiple of n_head_kv, and the smallest kernel's shared
 * memory within device 0's per-block limit (st_cuda_smem_limit: head_dim 256 needs 73 KiB, which
 * compute 7.5 lacks; docs/OLDER_GPUS.md). */
int st_cuda_attn_supports(strata_type kv_type, const st_cuda_attn_shape *s);

/* Bytes of one of K or V of a layer: n_head_kv * n_ctx * head_dim elements (0 on bad input). */
size_t st_cuda_kv_bytes(strata_type kv_type, const st_cuda_attn_shape *s, int64_t n_ctx);

/* Stores T tokens' k (token t at d_k + t*ldk, [n_head_kv][head_dim]) and v (d_v + t*ldv) at
 * positions pos0 .. pos0+T-1 (pos0 + T <= n_ctx), converted to the cache type (f16: round to
 * nearest even, as st_f32_to_fp16). With d_pos (device int32) non-NULL the kernel reads the first
 * position from d_pos[0] instead, so that a captured CUDA graph can be replayed at the next
 * position; the caller keeps d_pos[0] + T <= n_ctx (pos0 is still checked). */
strata_status st_cuda_kv_store(const st_cuda_kv_layer *kv, const st_cuda_attn_shape *s,
                               const float *d_k, int64_t ldk, const float *d_v, int64_t ldv,
                               int64_t T, int64_t pos0, const int32_t *d_pos, void *stream);

/* A fused q/k/v row's attention inputs in one launch (rope.cu): rows of T tokens ld floats apart,
 * each n_head q heads, then n_head_kv k heads, then n_head_kv v heads of head_dim floats. Gives
 * the bits of st_cuda_rmsnorm per head on q (weights d_q_norm, [head_dim]) and on k (d_k_norm;
 * either NULL: no norm), st_cuda_rope over the q and k heads (positions d_pos[t] or pos0 + t),
 * and st_cuda_kv_store of k and v (at d_pos[0] + t or pos0 + t), one after the other: q and k
 * are rewritten in place, v only read. head_dim_v must equal head_dim. */
strata_status st_cuda_qkv_prep(const st_cuda_rope_params *p, float *d_qkv, int64_t ld, int64_t n_head,
                               int64_t n_head_kv, int64_t head_dim, const float *d_q_norm,
                               const float *d_k_norm, float eps, const st_cuda_kv_layer *kv, int64_t T,
                               const int32_t *d_pos, int64_t pos0, void *stream);

/* Workspace bytes st_cuda_attention uses at most for T query tokens over a cache of n_ctx
 * positions (the split-K partials; 0 when one pass suffices), and with s->tc set, for the
 * tensor-core kernel at any batch of up to T tokens. */
size_t st_cuda_attn_wsize(const st_cuda_attn_shape *s, int64_t T, int64_t n_ctx);

/* Launch plans are made for the attended length rounded up to ST_ATTN_NP_BUCKET positions (at
 * most n_ctx): st_cuda_attn_plan_np(pos0 + T, n_ctx). Two calls with the same rounded length have
 * the same launch geometry (and the same summation order). */
#define ST_ATTN_NP_BUCKET 256
int64_t st_cuda_attn_plan_np(int64_t np, int64_t n_ctx);

/* Causal attention as st_attention: token t (position pos0 + t) attends to cache positions
 * [0, pos0 + t]; query head h reads KV head h / (n_head / n_head_kv). d_q: token t's heads at
 * d_q + t*ldq ([n_head][head_dim]); result to d_out + t*ldo ([n_head][head_dim_v]). Scores and
 * softmax in f32. The positions are split into chunks (flash-decoding) when that fills the GPU
 * better: partials go to d_ws (st_cuda_attn_wsize bytes, 16-byte aligned) and a combine pass
 * merges them in a fixed order; with a smaller (or NULL) workspace fewer chunks are used, down to
 * one pass that needs none. T may be anything >= 1 (decode and verify windows 1..8, prefill up to
 * 512 and beyond); d_out must not overlap d_q or the cache. d_pos as st_cuda_kv_store: the kernel
 * reads pos0 from d_pos[0] (the plan is still made from pos0). */
strata_status st_cuda_attention(const st_cuda_kv_layer *kv, const st_cuda_attn_shape *s,
                                const float *d_q, int64_t ldq, int64_t T, int64_t pos0,
                                const int32_t *d_pos, float *d_out, int64_t ldo, void *d_ws, size_t ws_bytes,
                                void *stream);

/* st_cuda_attention that also writes the output as Q8_1 rows (st_cuda_quantize_q8_1's bits,
 * layout of st_cuda_mmv_pre's d_xq; ldo must be n_head * head_dim) where the kernel finishes its
 * rows itself: the FMA kernel (decode below 4,096 positions), in one pass or, with d_sync (n_sync
 * device words, 0 before the call and left 0; one set per stream of concurrent calls), by the
 * last chunk of each row group instead of the combine pass; the decode kernels at depth
 * (st_k_attn_dtc, st_k_attn_dec) through their combine pass. *q8_done = 1 when d_q8 was written;
 * 0: it was not (the caller quantizes d_out). d_out is written either way. */
strata_status st_cuda_attention_q8(const st_cuda_kv_layer *kv, const st_cuda_attn_shape *s,
                                   const float *d_q, int64_t ldq, int64_t T, int64_t pos0,
                                   const int32_t *d_pos, float *d_out, int64_t ldo, void *d_ws,
                                   size_t ws_bytes, void *d_q8, uint32_t *d_sync, size_t n_sync,
                                   int *q8_done, void *stream);

/* Which kernel st_cuda_attention runs for T tokens at pos0 over a cache of n_ctx positions (with
 * enough workspace): "st_k_attn_dtc" (decode on the tensor cores), "st_k_attn_tc" (prompt batches
 * on the tensor cores), "st_k_attn_dec" or "st_k_attn" (FMA units); NULL on unsupported or
 * out-of-range input. Host logic only: needs no device. Thread-safe. */
const char *st_cuda_attn_kernel_name(strata_type kv_type, const st_cuda_attn_shape *s, int64_t T,
                                     int64_t pos0, int64_t n_ctx);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_CUDA_OPS_H */
