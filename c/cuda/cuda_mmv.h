/* cuda_mmv.h - the C interface of the decode GEMV family: activation quantization to Q8_1 and
 * y = W x for 1..8 activation columns (decode steps and speculative verify windows), plus the
 * fused gate/up/SwiGLU product of a dense FFN or an expert. Defined in c/cuda/mmv.cu and
 * c/cuda/quantize.cu; exists only in builds with STRATA_HAVE_CUDA.
 *
 * All device pointers; every entry enqueues on stream (a cudaStream_t, NULL = the default
 * stream) and returns without waiting. Arguments are checked before anything is enqueued
 * (STRATA_ERR_INVALID_ARG, or STRATA_ERR_UNSUPPORTED for a weight type without a kernel); then
 * STRATA_ERR_UNSUPPORTED with the probe's reason when no GPU is usable, STRATA_ERR_BACKEND (call,
 * file, line) when a launch fails. Nothing is printed. The kernels read no memory but their
 * inputs and write only y and the scratch, so they may be captured into CUDA graphs. */
#ifndef STRATA_CUDA_MMV_H
#define STRATA_CUDA_MMV_H

#include "cuda_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if st_cuda_mmv handles weights of type: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S. Else 0 (also for unknown ids). */
int st_cuda_mmv_supports(strata_type type);

/* Bytes of scratch st_cuda_mmv needs for ncols activation rows of ne0 values: the Q8_1 copy,
 * ncols * ceil(ne0 / 32) * 36 bytes (float weight types use none, but this is the same number for
 * every type so a caller can size one buffer). 0 for ne0 <= 0 or ncols outside 1..8. */
size_t st_cuda_mmv_scratch_bytes(int64_t ne0, int ncols);

/* Whether st_cuda_mmv(W, ..., ncols, ...) takes the Q8_0 shared-memory kernel (st_k_mmv_q8_0s:
 * Q8_0 rows with row_bytes % 16 == 0 at a 16-byte aligned address, its shared memory within
 * 48 KiB) rather than the general one; for tests and benchmarks. Thread-safe. */
int st_cuda_mmv_q8_smem(const st_cuda_mat *W, int ncols);

/* Whether st_cuda_mmv(W, ..., ncols, ...) takes the SM60 Q8_0 kernel (q8_sm60.cuh): W is Q8_0 with
 * W->gemv_sm60 set (its persistent blocks per SM) and W->tiles (st_cuda_mmq_tiles_make's copy) 16-byte aligned, and the call's
 * shared memory (ncols * ne0 * 1.125 bytes) within 48 KiB; else the usual kernels. The SM60 kernel's
 * results are not the usual kernels' bits (another f32 summation order). Thread-safe. */
int st_cuda_mmv_q8_sm60(const st_cuda_mat *W, int ncols);

/* y[c * W->ne1 + r] = dot(row r of W, x[c * W->ne0 ...]) for c < ncols, r < W->ne1.
 * d_x: ncols rows of W->ne0 floats, row-major; d_y: ncols rows of W->ne1 floats (must not
 * overlap x or scratch). Quantized weights: x is first quantized to Q8_1 into d_scratch
 * (st_cuda_mmv_scratch_bytes(W->ne0, ncols) bytes, 16-byte aligned), then integer dot products
 * (dp4a) run on it; the results therefore differ from the CPU's strata_vec_dot (Q8_0 / Q8_K
 * activations) by the activation rounding, ~1e-5 relative mean square. F32 / F16 / BF16 weights:
 * x is used as f32 (fp32 products and sums), d_scratch is unused and may be NULL.
 * Requirements (INVALID_ARG otherwise): ncols 1..8; W->ne0 > 0 a multiple of the type's block
 * size; W->ne1 > 0; W->row_bytes >= strata_row_bytes(type, ne0), even (a multiple of 4 for F32);
 * W->data 2-byte aligned (4 for F32); d_x and d_y 4-byte aligned. Rows of F32 (F16/BF16) weights
 * take 16-byte loads when ne0 is a multiple of 4 (8), row_bytes a multiple of 16 and data, x
 * 16-byte aligned; otherwise element loads (same results). */
strata_status st_cuda_mmv(const st_cuda_mat *W, const float *d_x, int ncols, float *d_y,
                          void *d_scratch, void *stream);

/* st_cuda_mmv with x already quantized: for weight types that read Q8_1 activations, d_xq (when
 * not NULL) holds x as ncols rows of W->ne0 / 32 Q8_1 blocks (st_cuda_rmsnorm_q8's layout, the
 * bits st_cuda_quantize_q8_1 gives) and is read instead of quantizing x into d_scratch; float
 * weight types read d_x as st_cuda_mmv does. Same results as st_cuda_mmv. */
strata_status st_cuda_mmv_pre(const st_cuda_mat *W, const float *d_x, const void *d_xq, int ncols,
                              float *d_y, void *d_scratch, void *stream);

/* Fused gate/up/SwiGLU: y[c * ne1 + r] = silu(dot(Wg row r, x_c)) * dot(Wu row r, x_c), with
 * silu(g) = g / (1 + exp(-g)). Wg and Wu: same type, ne0 and ne1 (row_bytes may differ); x is
 * quantized once. Same requirements and scratch as st_cuda_mmv. */
strata_status st_cuda_mmv_swiglu(const st_cuda_mat *Wg, const st_cuda_mat *Wu, const float *d_x,
                                 int ncols, float *d_y, void *d_scratch, void *stream);

/* Quantizes n floats (n > 0, a multiple of 32) at d_x into n / 32 block_q8_1 at d_q (4-byte
 * aligned; the layout described in c/cuda/quantize.cuh). */
strata_status st_cuda_quantize_q8_1(const float *d_x, void *d_q, int64_t n, void *stream);

/* 1 if the grids and tables compiled into the kernels (c/cuda/iq_grids.cuh) equal the library's tables
 * (c/format/quant/iq_tables.c) entry by entry, else 0. Host-only; needs no GPU. */
int st_cuda_mmv_tables_check(void);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_CUDA_MMV_H */
