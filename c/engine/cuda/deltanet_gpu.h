/* deltanet_gpu.h - qwen3next in the GPU session (deltanet_gpu.c): the device recurrent state of
 * the gated DeltaNet layers with its rollback window, the DeltaNet layer and the gated
 * full-attention layer. The window's two entry points exist in every build (the CUDA backend's
 * table names them); the rest only with STRATA_HAVE_CUDA. */
#ifndef STRATA_DELTANET_GPU_H
#define STRATA_DELTANET_GPU_H

#include "session.h"

/* Before a decode call of n tokens at s->n_past: zeroes the state at position 0 and opens (or
 * extends) the rollback window (no-op for models without recurrent layers). */
strata_status st_gpu_rs_call_begin(strata_session *s, int64_t n);

/* The state as it was after position n_keep - 1, for n_keep inside the window (or 0, or
 * n_past); any other n_keep is refused with an error naming the window. */
strata_status st_gpu_rs_truncate(strata_session *s, int32_t n_keep);

#ifdef STRATA_HAVE_CUDA
#include "forward_cuda.h"

/* g->rs for a model with recurrent layers: their weights up, the state, the window, scratch. */
strata_status st_gpu_rs_create(strata_session *s);
void st_gpu_rs_free(st_gpu *g);

/* The row of the window's history a batch of T tokens at pos0 writes its inputs to, -1 none
 * (uploaded after the batch's positions: g->pos[T]). */
int32_t st_gpu_rs_hist_row(const strata_session *s, int64_t T, int64_t pos0);

/* A DeltaNet layer / a gated full-attention layer il on the residual g->x (T rows from pos0),
 * leaving the FFN's norm of the sum in g->xn. */
strata_status st_gpu_linear_attn_block(strata_session *s, int il, int64_t T, int64_t pos0);
strata_status st_gpu_gated_attn_block(strata_session *s, int il, int64_t T, int64_t pos0);
#endif

#endif /* STRATA_DELTANET_GPU_H */
