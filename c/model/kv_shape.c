/* kv_shape.c - what a session's context costs in memory, from the model's shapes alone (model.h):
 * the bytes one position adds to the KV cache and the fixed recurrent state of qwen3next's DeltaNet
 * layers. The CPU and GPU backends report these figures beside their own allocations
 * (strata_session_stats), the CLI prints them, `strata bench` prices the cache's reads by them. */
#include "model.h"

uint64_t st_kv_bytes_per_token(const st_hparams *hp, strata_type kv_type) {
    if (kv_type != STRATA_TYPE_F16 && kv_type != STRATA_TYPE_F32) return 0;
    const uint64_t el = kv_type == STRATA_TYPE_F32 ? 4 : 2;
    /* latent attention (MLA): one row of head_dim = kv_lora + n_rot per position, the values read
     * from its first kv_lora; else K and V of every KV head */
    const uint64_t row = hp->n_lora_kv > 0 ? (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim
                                           : (uint64_t)hp->n_head_kv * ((uint64_t)hp->head_dim + (uint64_t)hp->head_dim_v);
    uint64_t n_att = 0; /* sliding-window layers count: the cache keeps every position for them */
    for (int32_t il = 0; il < hp->n_layer; il++) n_att += !st_layer_recurrent(hp, il);
    return n_att * row * el;
}

uint64_t st_recurrent_state_bytes(const st_hparams *hp) {
    uint64_t n_rec = 0;
    for (int32_t il = 0; il < hp->n_layer; il++) n_rec += (uint64_t)st_layer_recurrent(hp, il);
    if (!n_rec) return 0;
    const uint64_t d = (uint64_t)hp->ssm_d_state;
    const uint64_t conv_ch = 2 * (uint64_t)hp->ssm_n_group * d + (uint64_t)hp->ssm_d_inner;
    const uint64_t ssm = (uint64_t)hp->ssm_dt_rank * d * d;                        /* per value head d x d */
    const uint64_t conv = (uint64_t)(hp->ssm_d_conv > 0 ? hp->ssm_d_conv - 1 : 0) * conv_ch; /* last inputs */
    return n_rec * (ssm + conv) * sizeof(float);
}

int64_t strata_model_kv_bytes_per_token(const strata_model *model, strata_type kv_type) {
    if (!model || model->vocab_only || (kv_type != STRATA_TYPE_F16 && kv_type != STRATA_TYPE_F32)) return -1;
    return (int64_t)st_kv_bytes_per_token(&model->hp, kv_type);
}

int64_t strata_model_state_bytes(const strata_model *model) {
    if (!model || model->vocab_only) return -1;
    return (int64_t)st_recurrent_state_bytes(&model->hp);
}
