/* kv.c - allocation of the session KV cache (kv.h); latent attention (MLA) keeps keys only,
 * recurrent layers (qwen3next's DeltaNet) none. */
#include "kv.h"

#include <inttypes.h>
#include <stdlib.h>

strata_status st_kv_init(st_kv_cache *kv, const st_hparams *hp, int64_t n_ctx, strata_type type) {
    memset(kv, 0, sizeof *kv);
    if (type != STRATA_TYPE_F16 && type != STRATA_TYPE_F32)
        return st_error(STRATA_ERR_INVALID_ARG, "kv_type %s: the KV cache is f16 or f32",
                        strata_type_name(type));
    const uint64_t el = type == STRATA_TYPE_F32 ? 4 : 2;
    const int latent = hp->n_lora_kv > 0; /* MLA: the values are read from the key rows */
    int32_t n_att = 0; /* layers with a cache: qwen3next's recurrent layers keep a state instead */
    for (int32_t il = 0; il < hp->n_layer; il++) n_att += !st_layer_recurrent(hp, il);
    uint64_t per_k, per_v, kb, vb;
    if (st_mul_overflow_u64((uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim, el, &per_k) ||
        st_mul_overflow_u64(latent ? 0 : (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim_v, el, &per_v) ||
        st_mul_overflow_u64(per_k, (uint64_t)n_ctx, &per_k) ||
        st_mul_overflow_u64(per_v, (uint64_t)n_ctx, &per_v) ||
        st_mul_overflow_u64(per_k, (uint64_t)n_att, &kb) ||
        st_mul_overflow_u64(per_v, (uint64_t)n_att, &vb) || kb > SIZE_MAX / 2 ||
        vb > SIZE_MAX / 2)
        return st_error(STRATA_ERR_NOMEM, "KV cache for n_ctx %" PRId64 " overflows", n_ctx);
    kv->type = type;
    kv->n_layer = hp->n_layer;
    kv->n_ctx = n_ctx;
    kv->layers = calloc((size_t)hp->n_layer, sizeof *kv->layers);
    kv->k_mem = kb ? calloc(1, (size_t)kb) : NULL;
    kv->v_mem = vb ? calloc(1, (size_t)vb) : NULL;
    if (!kv->layers || (kb && !kv->k_mem) || (vb && !kv->v_mem)) {
        st_kv_free(kv);
        return st_error(STRATA_ERR_NOMEM, "KV cache: out of memory for %" PRIu64 " MiB (n_ctx %" PRId64
                        ", %s)", (kb + vb) >> 20, n_ctx, strata_type_name(type));
    }
    kv->bytes = (size_t)(kb + vb);
    for (int32_t il = 0, a = 0; il < hp->n_layer; il++) {
        kv->layers[il].type = type;
        kv->layers[il].n_ctx = n_ctx;
        if (st_layer_recurrent(hp, il)) continue; /* k, vt NULL: never read */
        kv->layers[il].k = (uint8_t *)kv->k_mem + (size_t)a * (size_t)per_k;
        kv->layers[il].vt = vb ? (uint8_t *)kv->v_mem + (size_t)a * (size_t)per_v : NULL;
        a++;
    }
    return STRATA_OK;
}

void st_kv_free(st_kv_cache *kv) {
    if (!kv) return;
    free(kv->layers);
    free(kv->k_mem);
    free(kv->v_mem);
    memset(kv, 0, sizeof *kv);
}
