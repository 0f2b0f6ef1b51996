/* cuda_tensor.h - how a weight matrix resident on the GPU is described to the CUDA kernels.
 * Plain C, shared by every kernel family (c/cuda/cuda_*.h). */
#ifndef STRATA_CUDA_TENSOR_H
#define STRATA_CUDA_TENSOR_H

#include "strata.h"

#include <stddef.h>
#include <stdint.h>

/* A row-major matrix of ne1 rows of ne0 weights each, in the GGUF block layout of type. Row r
 * starts at (const uint8_t *)data + r * row_bytes; row_bytes >= strata_row_bytes(type, ne0)
 * (larger when rows are padded). data is a device pointer. tiles: NULL, or a second device copy
 * of the same weights laid out for the prompt tiles (cuda_mmq.h, st_cuda_mmq_tiles_make: Q8_0
 * only); a descriptor built field by field must set it and gemv_sm60 (or zero the whole struct). */
typedef struct st_cuda_mat {
    strata_type type;
    const void *data;   /* device */
    int64_t ne0;        /* row length (weights per row) */
    int64_t ne1;        /* rows */
    size_t row_bytes;
    const void *tiles;  /* device, optional: the prompt tiles' copy */
    int gemv_sm60;      /* N > 0 (with tiles): the decode GEMV reads tiles with the SM60 Q8_0 kernel,
                           N persistent blocks per SM (q8_sm60.cuh; a session with q8_sm60 sets
                           it); 0 the usual kernels */
} st_cuda_mat;

#endif /* STRATA_CUDA_TENSOR_H */
