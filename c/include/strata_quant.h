/* strata_quant.h - the public C ABI of Strata's tensor block formats (dequantize, quantize, dot
 * products of one row, as the CPU kernels compute them) and of rewriting a GGUF model in another
 * type. strata.h's conventions apply; the type ids and names are strata.h's.
 *
 *     float x[256];
 *     uint8_t q[144];                                    // strata_row_bytes(STRATA_TYPE_Q4_K, 256)
 *     strata_quantize_row(STRATA_TYPE_Q4_K, x, q, 256);
 *     strata_dequantize_row(STRATA_TYPE_Q4_K, q, x, 256);
 */
#ifndef STRATA_QUANT_H
#define STRATA_QUANT_H

#include "strata.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Block formats
 *
 * Rows are n weights long, n a multiple of the type's block size. All functions are pure and
 * thread-safe.
 *
 * Dot products follow llama.cpp's scheme: the activation row is first quantized to the weight
 * type's activation type (strata_act_type): F32 for F32/F16/BF16 weights, Q8_0 for the 32-weight
 * block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4), Q8_K for the 256-weight K and IQ
 * types (Q2_K..Q6_K, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M).
 * ------------------------------------------------------------------------------------------- */

/* 1 if strata_dequantize_row supports type. */
STRATA_API int strata_type_can_dequantize(strata_type type);
/* 1 if strata_quantize_row supports type (F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K, Q8_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS, MXFP4). */
STRATA_API int strata_type_can_quantize(strata_type type);
/* 1 if strata_vec_dot supports type as weights. */
STRATA_API int strata_type_can_dot(strata_type type);

/* src: n weights in type's layout -> dst: n floats. */
STRATA_API strata_status strata_dequantize_row(strata_type type, const void *src, float *dst,
                                               int64_t n);
/* src: n floats -> dst: strata_row_bytes(type, n) bytes. Q8_0 and Q4_0 are bit-exact with
 * llama.cpp's reference quantizers; Q4_K and Q6_K use a search for scales (llama.cpp's method);
 * Q2_K, Q3_K, Q5_K, MXFP4, IQ4_NL, IQ4_XS, IQ2_S, IQ3_XXS, IQ3_S and IQ1_M are ports of ggml's
 * quantizers without an importance matrix, IQ2_XXS, IQ2_XS and IQ1_S (which ggml refuses to
 * quantize without one) of ggml's with an importance matrix of ones. The first IQ1/IQ2/IQ3 call
 * builds that grid's search tables (once; STRATA_ERR_NOMEM if memory runs out). */
STRATA_API strata_status strata_quantize_row(strata_type type, const float *src, void *dst,
                                             int64_t n);

/* 1 if strata_quantize_row_importance uses an importance matrix for type (IQ1_S, IQ1_M, IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS: ggml's quant_weights paths of these). */
STRATA_API int strata_type_takes_importance(strata_type type);
/* As strata_quantize_row, weighing each weight's error by importance[i] (n values: column i's
 * mean squared input activation, what `strata imatrix` or llama.cpp's imatrix measures) as
 * ggml's quantizers do with quant_weights: the weights become importance[i] * sqrt(sigma2 +
 * x[i]^2). importance NULL, or a type that takes none: strata_quantize_row's bytes. */
STRATA_API strata_status strata_quantize_row_importance(strata_type type, const float *src, void *dst,
                                                        int64_t n, const float *importance);

/* The activation type for weights of type (F32, Q8_0 or Q8_K); STRATA_TYPE_COUNT if the type has
 * no dot product. */
STRATA_API strata_type strata_act_type(strata_type weight_type);
/* *out = dot(row w of n weights of type, activations xq already quantized to
 * strata_act_type(type)). Uses the kernels of strata_cpu_isa_active(). */
STRATA_API strata_status strata_vec_dot(strata_type type, const void *w, const void *xq,
                                        int64_t n, float *out);
/* Convenience: quantizes the f32 activations x to the activation type then calls strata_vec_dot.
 * Allocates a temporary buffer for n > 4096. */
STRATA_API strata_status strata_vec_dot_f32(strata_type type, const void *w, const float *x,
                                            int64_t n, float *out);

/* ---------------------------------------------------------------------------------------------
 * Model files
 *
 * strata_quantize_file rewrites a GGUF model with its weights in another type. Rules:
 *   - 1-D tensors (norms, biases) and non-float tensors that are not weights are copied as is;
 *   - router weights (names containing "ffn_gate_inp") become F32 when they are F32/F16/BF16 and
 *     are copied as is otherwise;
 *   - every other tensor of 2 or more dimensions is dequantized to f32 and quantized to its
 *     target type: type_down for names containing "ffn_down" (dense and expert), type_experts
 *     for other expert tensors (names containing "_exps"), type_dense for the rest, each of them
 *     `type` when negative; where its row length is not a multiple of the target's block size
 *     it falls back to Q8_0 (row length a multiple of 32) or is copied as is;
 *   - a tensor already in a quantized type that would change type needs allow_requantize (else
 *     STRATA_ERR_INVALID_ARG naming the tensor);
 *   - with an importance matrix (params.imatrix: a GGUF imatrix file of llama.cpp's format, made
 *     by `strata imatrix` or llama-imatrix), a tensor converted to a type that takes one
 *     (strata_type_takes_importance) is quantized with its entry's importance, in_sum2 / counts
 *     per column (per expert for 3-D tensors; 1 for an expert that saw no tokens); a tensor
 *     without an entry is quantized without one (counted in stats); an entry whose shape is not
 *     the tensor's is STRATA_ERR_INVALID_ARG naming both. The output gets llama-quantize's keys
 *     quantize.imatrix.file, .entries_count and .chunks_count. Without one the bytes are as
 *     before importance matrices existed.
 * Metadata is copied (split.* keys dropped: the output is one file); general.file_type is set to
 * llama.cpp's value for `type` (ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q8_0 7,
 * MOSTLY_Q2_K 10, MOSTLY_Q3_K_S 11, MOSTLY_Q4_K_S 14, MOSTLY_Q5_K_S 16, MOSTLY_Q6_K 18,
 * IQ2_XXS 19, IQ2_XS 20, IQ3_XXS 23, IQ1_S 24, IQ4_NL 25, IQ3_S 26, IQ2_S 28, IQ4_XS 30,
 * IQ1_M 31, MOSTLY_BF16 32, MXFP4_MOE 38). The output keeps the input's alignment. On
 * failure no output file is left behind.
 * ------------------------------------------------------------------------------------------- */

/* Tensor counts of one strata_quantize_file run. */
typedef struct strata_quantize_stats {
    int64_t n_tensors;       /* tensors written */
    int64_t n_quantized;     /* converted to the target type (or a router to F32) */
    int64_t n_fallback;      /* converted to Q8_0 because the row length did not fit the target */
    int64_t n_kept;          /* copied unchanged (1-D, router, non-float, or row length fits nothing) */
    uint64_t bytes_in;       /* tensor data bytes read */
    uint64_t bytes_out;      /* tensor data bytes written */
    int64_t n_importance;    /* converted with an importance matrix's entry */
    int64_t n_no_importance; /* converted to a type that takes one, but the matrix had no entry */
} strata_quantize_stats;

typedef struct strata_quantize_params {
    strata_type type;             /* target: any type strata_type_can_quantize but Q8_K */
    int n_threads;                /* worker threads (<= 0: the number of online CPUs) */
    int allow_requantize;         /* 1: quantized inputs may be converted to another type */
    strata_quantize_stats *stats; /* optional: filled on success */
    int type_experts;             /* a strata_type for expert tensors but ffn_down_exps, or -1: type */
    int type_dense;               /* ... for the other weights but ffn_down, or -1: type */
    int type_down;                /* ... for ffn_down and ffn_down_exps, or -1: type */
    const char *imatrix;          /* an importance matrix file (GGUF, llama.cpp's format), or NULL */
} strata_quantize_params;

/* Defaults: type Q8_0, n_threads 0, allow_requantize 0, stats NULL, type_experts, type_dense
 * and type_down -1 (all weights `type`), imatrix NULL. */
STRATA_API strata_quantize_params strata_quantize_default_params(void);
/* Reads in_path (all shards of a split model), writes out_path (must be another file). */
STRATA_API strata_status strata_quantize_file(const char *in_path, const char *out_path,
                                              const strata_quantize_params *params);

/* ---------------------------------------------------------------------------------------------
 * Importance matrices
 *
 * llama.cpp's GGUF imatrix format: general.type "imatrix", imatrix.datasets (strings),
 * imatrix.chunk_count and imatrix.chunk_size (u32), and for each weight tensor NAME two f32
 * tensors: NAME.in_sum2 [n_cols, n_mat], the sums over the rows it multiplied of each column's
 * squared input activation, and NAME.counts [1, n_mat], the numbers of rows summed (n_mat: the
 * experts of a 3-D expert tensor, each with only the tokens routed to it; 1 otherwise).
 * ------------------------------------------------------------------------------------------- */

typedef struct strata_imatrix_entry {
    const char *name;       /* the weight tensor's name, e.g. "blk.0.ffn_up_exps.weight" */
    int64_t n_cols;         /* its row length */
    int64_t n_mat;          /* 1, or its experts */
    const float *sums;      /* [n_mat][n_cols] */
    const int64_t *counts;  /* [n_mat] */
} strata_imatrix_entry;

/* Writes n entries (in name order, as llama.cpp) and the metadata to path; on failure no file is
 * left behind. */
STRATA_API strata_status strata_imatrix_write(const char *path, const strata_imatrix_entry *entries,
                                              int64_t n, const char *const *datasets,
                                              int64_t n_datasets, uint32_t chunk_count,
                                              uint32_t chunk_size);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_QUANT_H */
