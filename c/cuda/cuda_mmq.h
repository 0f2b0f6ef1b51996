/* cuda_mmq.h - the C interface of the prefill matrix family (c/cuda/mmq.cu): Y = X W^T for many
 * activation rows on the tensor cores, for prompt batches, where the decode GEMV (cuda_mmv.h)
 * would read each weight matrix once per 8 rows. Weights stay in their GGUF blocks in device
 * memory; each thread block decodes a 64-row by 64-weight tile to f16 in shared memory, rounds
 * the f32 activations as the GEMV's q8_1 does (blocks of 32, d = amax / 127) and stores them as
 * f16, and multiplies with f16 mma (f32 accumulation). The same tiles serve the grouped experts
 * of a prompt batch (st_cuda_moe_ffn takes this path for large batches).
 *
 * Accuracy: the activation rounding is the GEMV's (and the CPU's q8_0), so the tiles and the GEMV
 * differ only by the f16 rounding of the decoded weights and of q * d (relative 2^-11 each):
 * NMSE ~1e-7 between them, ~1e-5 against the exact product (the q8 rounding, as the GEMV). Float
 * weight types (F32, F16, BF16) are not taken: their products stay in f32 in the GEMV.
 *
 * Deterministic: every output element is one fixed sequence of mma steps; two runs give the same
 * bits, and so do two calls whose batches share a row (a row's result does not depend on the
 * other rows of its tile). Enqueues on stream (cudaStream_t; NULL = default) without waiting; no
 * host state is read by the kernels, so the calls may be captured into CUDA graphs. Exists only
 * in builds with STRATA_HAVE_CUDA. */
#ifndef STRATA_CUDA_MMQ_H
#define STRATA_CUDA_MMQ_H

#include "cuda_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if st_cuda_mmq takes weights of type: the tensor-core tiles for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S,
 * IQ1_M, MXFP4 (st_cuda_moe_type_tiles; the IQ types and MXFP4 decoded by the GEMV's decoders);
 * f32 tiles on the FMA units for F32, F16, BF16 (f32 products and sums in order, as exact as the
 * GEMV: the router of quantized models, float models). Else 0. st_cuda_mmq_swiglu takes the
 * quantized types only. (gpt-oss's biased experts reach the grouped tiles too, unless built with
 * -DSTRATA_MMQ_OAI=0: cuda_moe.h, st_cuda_moe_tiles_oai.) */
int st_cuda_mmq_supports(strata_type type);

/* Bytes of scratch st_cuda_mmq needs for T rows of ne0 activations (their rounded copy; for
 * float weights the partial sums of a call split along ne0), the same for every type; 0 on bad
 * sizes. */
size_t st_cuda_mmq_scratch_bytes(int64_t ne0, int64_t T);

/* The fewest rows for which the session uses st_cuda_mmq instead of the GEMV (below it, the
 * GEMV's slices of 8 read the weights few enough times). */
#define ST_CUDA_MMQ_MIN_ROWS 32

/* y[t * ldy + r] = dot(row r of W, x[t * ldx ...]) for t < T, r < W->ne1. T >= 1; for quantized
 * types W->ne0 a multiple of 32 and of the block size; ldx >= ne0, ldy >= ne1, x and y 4-byte
 * aligned; y must not overlap x or the scratch (st_cuda_mmq_scratch_bytes(ne0, T) bytes, 16-byte
 * aligned; optional for float types: without it a call too small to fill the GPU is not split
 * along ne0, which is slower and gives other bits). Errors: INVALID_ARG, UNSUPPORTED (type, no
 * GPU), BACKEND (launch). */
strata_status st_cuda_mmq(const st_cuda_mat *W, const float *d_x, int64_t ldx, int64_t T,
                          float *d_y, int64_t ldy, void *d_scratch, void *stream);

/* Fused gate/up/SwiGLU over T rows: y[t * ldy + r] = silu(Wg_r . x_t) * (Wu_r . x_t). Wg and Wu
 * of one type and shape; same requirements as st_cuda_mmq. */
strata_status st_cuda_mmq_swiglu(const st_cuda_mat *Wg, const st_cuda_mat *Wu, const float *d_x,
                                 int64_t ldx, int64_t T, float *d_y, int64_t ldy, void *d_scratch,
                                 void *stream);

/* The Q8_0 tile copy: a second device copy of a Q8_0 matrix that st_cuda_mmq and
 * st_cuda_mmq_swiglu read instead of the GGUF blocks when W->tiles points at it (the int8 tiles,
 * plain and paired; the same bits as without it). Layout: the quants as ne1 rows of ne0 bytes,
 * then the scales' f16 bits block-major, [ne0 / 32][ne1 rounded up to 8] (padding 0), so that a
 * tile's 64 rows x 64 weights are four 16-byte pieces a row and its scales 16-byte pieces, copied
 * into shared memory by cp.async without passing through registers (the GGUF blocks' 34-byte
 * stride leaves each lane decoding its own row, ~9 loads a chunk). The same size as the blocks.
 * st_cuda_mmq_tiles_bytes: the copy's bytes, 0 when W has none (not Q8_0, ne0 not a multiple of
 * 32). st_cuda_mmq_tiles_make: writes it at dst (16-byte aligned, tiles_bytes(W) bytes), enqueued
 * on stream; W->data is read, W is not changed (the caller sets W->tiles = dst). Errors:
 * INVALID_ARG, UNSUPPORTED, BACKEND. */
size_t st_cuda_mmq_tiles_bytes(const st_cuda_mat *W);
strata_status st_cuda_mmq_tiles_make(const st_cuda_mat *W, void *dst, void *stream);

/* The SwiGLU tiles (st_cuda_mmq_swiglu and the grouped experts' gate/up): 2 (the default) pairs 32
 * gate rows with their 32 up rows in one plain tile, 1 keeps 64 of each in one tile with two
 * accumulator sets (fewer blocks per SM). The same bits either way. Process-wide, for the tests and
 * the check-and-time programs; not thread-safe against running calls. */
void st_cuda_mmq_set_glu_mode(int mode);

/* 1 (the default): for weight types with integer quants (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) the plain
 * and paired tiles take the int8 kernel (bytes in shared memory, mma.sync on signed bytes, the next
 * step's loads in flight); 0: the one-buffer f16 tiles. The same bits either way. Process-wide,
 * for the tests and the check-and-time programs; not thread-safe against running calls. */
void st_cuda_mmq_set_int8(int on);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_CUDA_MMQ_H */
