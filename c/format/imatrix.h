/* imatrix.h - internal reading of llama.cpp's GGUF importance matrices (imatrix.c), for
 * strata_quantize_file. The writer is public (strata_quant.h: strata_imatrix_write). */
#ifndef STRATA_IMATRIX_H
#define STRATA_IMATRIX_H

#include "common.h"

/* The importance of weight tensor `name` (shape ne[0..n_dims-1]) in the open imatrix file im:
 * *out = malloc'd [n_mat][ne[0]] floats, in_sum2 / counts per matrix (1 where a count is 0),
 * n_mat = ne[2] for a 3-D tensor, else 1; *out = NULL (STRATA_OK) when im has no entry for it.
 * STRATA_ERR_INVALID_ARG naming both shapes when the entry's do not match the tensor's. */
strata_status st_imatrix_importance(const strata_gguf *im, const char *name, const int64_t *ne,
                                    uint32_t n_dims, float **out);

#endif /* STRATA_IMATRIX_H */
