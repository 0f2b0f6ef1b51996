/* kv.h - the KV cache of a session: per layer, K rows [n_ctx][n_head_kv][head_dim] and V
 * transposed [n_head_kv][head_dim_v][n_ctx], in f16 or f32 (st_kv_layer in ops.h); with latent
 * attention (deepseek2) one row of head_dim per token and no V: the values are in the rows. Positions
 * beyond the session's n_past hold stale values that attention never reads, so truncating is free. */
#ifndef STRATA_KV_H
#define STRATA_KV_H

#include "ops.h"

typedef struct {
    strata_type type;          /* STRATA_TYPE_F16 or STRATA_TYPE_F32 */
    int32_t n_layer;
    int64_t n_ctx;
    st_kv_layer *layers;       /* [n_layer] */
    void *k_mem, *v_mem;       /* the two allocations the layers point into */
    size_t bytes;              /* total of both */
} st_kv_cache;

/* Allocates an n_ctx cache for the model's shape (zero-filled lazily by the OS). */
strata_status st_kv_init(st_kv_cache *kv, const st_hparams *hp, int64_t n_ctx, strata_type type);
void st_kv_free(st_kv_cache *kv);

#endif /* STRATA_KV_H */
