/* hparams.c - reads a model's hyperparameters from its GGUF metadata: the <arch>.* keys as
 * llama.cpp names them, with llama.cpp's defaults (head_count_kv = head_count, key_length =
 * embedding_length / head_count, rope.dimension_count = key_length, rope.freq_base 10000, rope
 * scaling "linear" with factor 1, yarn beta_fast 32 / beta_slow 1), the per-architecture width of
 * a routed expert (expert_feed_forward_length, else feed_forward_length for olmoe / Mixtral /
 * granitemoe, feed_forward_length / expert_used_count for qwen2moe / qwen3moe), the granite
 * multipliers, deepseek2's latent-attention widths and the leading dense layers and routing keys
 * of deepseek2 and glm4moe.
 * Every failure names the key. */
#include "hparams.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ==== key access ============================================================================= */

typedef struct {
    const strata_gguf *g;
    const char *arch;   /* general.architecture */
    st_gating gating_default;
    char key[192];      /* last key built */
} st_hp_ctx;

static const char *st_hp_key(st_hp_ctx *c, const char *suffix) {
    snprintf(c->key, sizeof c->key, "%s.%s", c->arch, suffix);
    return c->key;
}

/* An unsigned integer key that may also be a per-layer array (every element must be equal, the
 * only layout Strata runs). *found = 0 and *out untouched when the key is absent. */
static strata_status st_hp_u32(st_hp_ctx *c, const char *suffix, int required, int32_t *out,
                               int *found) {
    const char *key = st_hp_key(c, suffix);
    if (found) *found = 0;
    int64_t i = strata_gguf_kv_find(c->g, key);
    if (i < 0) {
        if (required) return st_error(STRATA_ERR_NOT_FOUND, "missing required key '%s'", key);
        return STRATA_OK;
    }
    strata_gguf_value v;
    ST_TRY(strata_gguf_kv_value(c->g, i, &v));
    uint64_t x = 0;
    if (v.type == STRATA_GGUF_ARRAY) {
        if (v.v.arr.count == 0)
            return st_error(STRATA_ERR_FORMAT, "key '%s': empty array", key);
        for (uint64_t k = 0; k < v.v.arr.count; k++) {
            strata_gguf_value e;
            ST_TRY(strata_gguf_array_get(c->g, &v, k, &e));
            uint64_t y;
            if (e.type == STRATA_GGUF_UINT8 || e.type == STRATA_GGUF_UINT16 ||
                e.type == STRATA_GGUF_UINT32 || e.type == STRATA_GGUF_UINT64) {
                y = e.v.u64;
            } else if (e.type == STRATA_GGUF_INT8 || e.type == STRATA_GGUF_INT16 ||
                       e.type == STRATA_GGUF_INT32 || e.type == STRATA_GGUF_INT64) {
                if (e.v.i64 < 0)
                    return st_error(STRATA_ERR_FORMAT, "key '%s'[%llu]: negative value %lld", key,
                                    (unsigned long long)k, (long long)e.v.i64);
                y = (uint64_t)e.v.i64;
            } else {
                return st_error(STRATA_ERR_TYPE, "key '%s': array of %s, expected integers", key,
                                strata_gguf_type_name(e.type));
            }
            if (k == 0) x = y;
            else if (y != x)
                return st_error(STRATA_ERR_UNSUPPORTED,
                                "key '%s': per-layer values differ (layer 0: %llu, layer %llu: "
                                "%llu); only uniform layers are supported",
                                key, (unsigned long long)x, (unsigned long long)k,
                                (unsigned long long)y);
        }
    } else {
        strata_status st = strata_gguf_get_u64(c->g, key, &x);
        if (st != STRATA_OK)
            return st_error(st, "key '%s': expected an unsigned integer, found %s", key,
                            strata_gguf_type_name(v.type));
    }
    if (x > (uint64_t)INT32_MAX)
        return st_error(STRATA_ERR_FORMAT, "key '%s': value %llu is too large", key,
                        (unsigned long long)x);
    *out = (int32_t)x;
    if (found) *found = 1;
    return STRATA_OK;
}

static strata_status st_hp_f32(st_hp_ctx *c, const char *suffix, int required, float *out,
                               int *found) {
    const char *key = st_hp_key(c, suffix);
    if (found) *found = 0;
    if (strata_gguf_kv_find(c->g, key) < 0) {
        if (required) return st_error(STRATA_ERR_NOT_FOUND, "missing required key '%s'", key);
        return STRATA_OK;
    }
    double x;
    strata_status st = strata_gguf_get_f64(c->g, key, &x);
    if (st != STRATA_OK) return st_error(st, "key '%s': expected a float", key);
    if (!isfinite(x)) return st_error(STRATA_ERR_FORMAT, "key '%s': not a finite number", key);
    *out = (float)x;
    if (found) *found = 1;
    return STRATA_OK;
}

static strata_status st_hp_bool(st_hp_ctx *c, const char *suffix, int *out, int *found) {
    const char *key = st_hp_key(c, suffix);
    *found = 0;
    if (strata_gguf_kv_find(c->g, key) < 0) return STRATA_OK;
    strata_status st = strata_gguf_get_bool(c->g, key, out);
    if (st != STRATA_OK) return st_error(st, "key '%s': expected a bool", key);
    *found = 1;
    return STRATA_OK;
}

/* ==== rope scaling =========================================================================== */

static strata_status st_hp_rope(st_hp_ctx *c, st_hparams *hp) {
    const char *key = st_hp_key(c, "rope.scaling.type");
    char type[32] = "linear"; /* llama.cpp's default */
    if (strata_gguf_kv_find(c->g, key) >= 0) {
        const char *p;
        uint64_t n;
        strata_status st = strata_gguf_get_str(c->g, key, &p, &n);
        if (st != STRATA_OK) return st_error(st, "key '%s': expected a string", key);
        if (n >= sizeof type)
            return st_error(STRATA_ERR_UNSUPPORTED, "key '%s': unknown rope scaling type", key);
        memcpy(type, p, n);
        type[n] = 0;
    }
    float factor = 0.0f;
    int found = 0;
    ST_TRY(st_hp_f32(c, "rope.scaling.factor", 0, &factor, &found));
    if (!found) ST_TRY(st_hp_f32(c, "rope.scale_linear", 0, &factor, &found)); /* older name */
    if (factor < 0.0f)
        return st_error(STRATA_ERR_FORMAT, "key '%s.rope.scaling.factor': negative (%g)",
                        c->arch, (double)factor);
    float scale = factor == 0.0f ? 1.0f : 1.0f / factor;

    hp->rope_freq_scale = 1.0f;
    hp->yarn_orig_ctx = hp->n_ctx_train;
    hp->yarn_ext_factor = 0.0f;
    hp->yarn_attn_factor = 1.0f;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    ST_TRY(st_hp_u32(c, "rope.scaling.original_context_length", 0, &hp->yarn_orig_ctx, NULL));
    ST_TRY(st_hp_f32(c, "rope.scaling.attn_factor", 0, &hp->yarn_attn_factor, NULL));

    if (strcmp(type, "none") == 0) {
        hp->rope_scaling = ST_ROPE_SCALING_NONE;
    } else if (strcmp(type, "linear") == 0) {
        hp->rope_scaling = scale == 1.0f ? ST_ROPE_SCALING_NONE : ST_ROPE_SCALING_LINEAR;
        hp->rope_freq_scale = scale;
    } else if (strcmp(type, "yarn") == 0) {
        hp->rope_scaling = ST_ROPE_SCALING_YARN;
        hp->rope_freq_scale = scale;
        hp->yarn_ext_factor = 1.0f; /* llama.cpp: ext_factor < 0 (unset) -> 1 for yarn */
        ST_TRY(st_hp_f32(c, "rope.scaling.yarn_ext_factor", 0, &hp->yarn_ext_factor, NULL));
        ST_TRY(st_hp_f32(c, "rope.scaling.yarn_attn_factor", 0, &hp->yarn_attn_factor, NULL));
        ST_TRY(st_hp_f32(c, "rope.scaling.yarn_beta_fast", 0, &hp->yarn_beta_fast, NULL));
        ST_TRY(st_hp_f32(c, "rope.scaling.yarn_beta_slow", 0, &hp->yarn_beta_slow, NULL));
    } else {
        return st_error(STRATA_ERR_UNSUPPORTED,
                        "key '%s': rope scaling type '%s' is not supported (none, linear, yarn)",
                        key, type);
    }
    if (hp->yarn_orig_ctx <= 0)
        return st_error(STRATA_ERR_FORMAT, "key '%s.rope.scaling.original_context_length' is 0",
                        c->arch);
    return STRATA_OK;
}

/* ==== deepseek2 / glm4moe: scored routing, leading dense layers, latent attention ============= */

static strata_status st_hp_positive(st_hp_ctx *c, const char *suffix, int32_t v);

/* expert_weights_scale (deepseek2, glm4moe, gpt-oss): the routed weights' factor; llama.cpp
 * reads an absent key or 0 as none (1). */
static strata_status st_hp_weights_scale(st_hp_ctx *c, st_hparams *hp) {
    float scale = 0.0f;
    ST_TRY(st_hp_f32(c, "expert_weights_scale", 0, &scale, NULL));
    hp->expert_weights_scale = scale == 0.0f ? 1.0f : scale;
    return STRATA_OK;
}

/* The routing keys: gating function, weight scale, expert groups. */
static strata_status st_hp_routing(st_hp_ctx *c, st_hparams *hp) {
    int32_t gating = 0, groups = 0, used = 0;
    int have_groups = 0;
    ST_TRY(st_hp_u32(c, "expert_gating_func", 0, &gating, NULL));
    if (gating == 0) gating = c->gating_default; /* llama.cpp: none -> the architecture's (softmax for
                                                  * older DeepSeek-V2 files, sigmoid for GLM) */
    if (gating != ST_GATING_SOFTMAX && gating != ST_GATING_SIGMOID)
        return st_error(STRATA_ERR_UNSUPPORTED, "key '%s.expert_gating_func' = %d: only 1 "
                        "(softmax) and 2 (sigmoid) are supported", c->arch, (int)gating);
    hp->gating = (st_gating)gating;
    ST_TRY(st_hp_weights_scale(c, hp));
    ST_TRY(st_hp_u32(c, "expert_group_count", 0, &groups, &have_groups));
    ST_TRY(st_hp_u32(c, "expert_group_used_count", 0, &used, NULL));
    if (groups > 1) {
        if (hp->n_expert % groups != 0 || used < 1 || used > groups)
            return st_error(STRATA_ERR_FORMAT, "keys '%s.expert_group_count' (%d) / "
                            "'expert_group_used_count' (%d): the groups must divide %d experts "
                            "and 1 <= used <= groups", c->arch, (int)groups, (int)used,
                            (int)hp->n_expert);
        if (hp->n_expert / groups < 2 || (int64_t)used * (hp->n_expert / groups) < hp->n_expert_used)
            return st_error(STRATA_ERR_FORMAT, "keys '%s.expert_group_count' (%d) / "
                            "'expert_group_used_count' (%d): too few experts to choose %d",
                            c->arch, (int)groups, (int)used, (int)hp->n_expert_used);
        hp->n_expert_groups = groups;
        hp->n_group_used = used;
    }
    return STRATA_OK;
}

/* YaRN for latent attention, as llama.cpp's deepseek2 graph: the rope's own magnitude is cancelled
 * (the yarn_log_multiplier branch of llama_context) and the score scale carries mscale^2, with
 * mscale = attn_factor * (1 + 0.1 * log_mul * ln(factor)). */
static strata_status st_hp_mla_scale(st_hp_ctx *c, st_hparams *hp) {
    float log_mul = 0.0f;
    ST_TRY(st_hp_f32(c, "rope.scaling.yarn_log_multiplier", 0, &log_mul, NULL));
    log_mul /= 0.1f; /* the converter writes 0.1 * mscale_all_dim */
    const float rope_attn = hp->yarn_attn_factor;
    float mscale = rope_attn;
    if (hp->rope_scaling == ST_ROPE_SCALING_YARN && hp->yarn_ext_factor != 0.0f) {
        const float factor = 1.0f / hp->rope_freq_scale;
        if (log_mul != 0.0f && factor > 1.0f)
            hp->yarn_attn_factor = rope_attn / (1.0f + 0.1f * logf(factor));
        mscale = rope_attn * (1.0f + 0.1f * log_mul * logf(factor));
    }
    hp->kq_scale = mscale * mscale / sqrtf((float)hp->head_dim_mla);
    return STRATA_OK;
}

/* The DeepSeek-style MoE keys (deepseek2, glm4moe): leading dense layers, the shared experts'
 * count and the routing keys. */
static strata_status st_hp_scored(st_hp_ctx *c, st_hparams *hp, int have_ff, int32_t ff) {
    ST_TRY(st_hp_u32(c, "leading_dense_block_count", 0, &hp->n_layer_dense_lead, NULL));
    if (hp->n_layer_dense_lead > hp->n_layer)
        return st_error(STRATA_ERR_FORMAT, "key '%s.leading_dense_block_count' (%d) exceeds the "
                        "%d layers", c->arch, (int)hp->n_layer_dense_lead, (int)hp->n_layer);
    if (hp->n_layer_dense_lead > 0) {
        if (!have_ff || ff <= 0)
            return st_error(STRATA_ERR_NOT_FOUND, "missing required key '%s.feed_forward_length' "
                            "(the %d leading dense layers' width)", c->arch, (int)hp->n_layer_dense_lead);
        hp->n_ff = ff;
    }
    ST_TRY(st_hp_u32(c, "expert_shared_count", 0, &hp->n_expert_shared, NULL));
    if (hp->n_expert_shared > 64)
        return st_error(STRATA_ERR_FORMAT, "key '%s.expert_shared_count': %d is implausible",
                        c->arch, (int)hp->n_expert_shared);
    hp->n_ff_shexp = hp->n_ff_exp * hp->n_expert_shared;
    return st_hp_routing(c, hp);
}

/* The keys only deepseek2 has: the latent's widths (llama.cpp's MLA layout: key_length =
 * kv_lora + rope, value_length = kv_lora, the trained widths in *_mla). */
static strata_status st_hp_mla(st_hp_ctx *c, st_hparams *hp) {
    int have_km = 0, have_vm = 0;
    ST_TRY(st_hp_u32(c, "attention.kv_lora_rank", 1, &hp->n_lora_kv, NULL));
    ST_TRY(st_hp_u32(c, "attention.q_lora_rank", 0, &hp->n_lora_q, NULL));
    ST_TRY(st_hp_u32(c, "attention.key_length_mla", 0, &hp->head_dim_mla, &have_km));
    ST_TRY(st_hp_u32(c, "attention.value_length_mla", 0, &hp->head_dim_v_mla, &have_vm));
    if (!have_km && !have_vm) { /* before llama.cpp's split: the trained sizes, n_head KV heads */
        if (hp->n_head_kv != hp->n_head)
            return st_error(STRATA_ERR_FORMAT, "deepseek2 file without '%s.attention.key_length_mla'"
                            " (attn_kv_b layout) with head_count_kv %d != head_count %d", c->arch,
                            (int)hp->n_head_kv, (int)hp->n_head);
        hp->mla_kv_b = 1;
        hp->head_dim_mla = hp->head_dim;
        hp->head_dim_v_mla = hp->head_dim_v;
        hp->head_dim = hp->n_lora_kv + hp->n_rot;
        hp->head_dim_v = hp->n_lora_kv;
        hp->n_head_kv = 1;
    } else if (!have_km || !have_vm) {
        return st_error(STRATA_ERR_FORMAT, "deepseek2 file with only one of '%s.attention."
                        "key_length_mla' / 'value_length_mla'", c->arch);
    }
    ST_TRY(st_hp_positive(c, "attention.kv_lora_rank", hp->n_lora_kv));
    if (hp->n_head_kv != 1 || hp->head_dim != hp->n_lora_kv + hp->n_rot ||
        hp->head_dim_v != hp->n_lora_kv || hp->head_dim_mla <= hp->n_rot || hp->head_dim_v_mla <= 0 ||
        hp->head_dim_mla > 4096 || hp->head_dim_v_mla > 4096 || hp->n_lora_q > (1 << 16))
        return st_error(STRATA_ERR_FORMAT, "deepseek2 attention widths do not fit the latent layout: "
                        "head_count_kv %d (1), key_length %d (kv_lora_rank %d + rope %d), "
                        "value_length %d (kv_lora_rank), key_length_mla %d (> rope), "
                        "value_length_mla %d", (int)hp->n_head_kv, (int)hp->head_dim,
                        (int)hp->n_lora_kv, (int)hp->n_rot, (int)hp->head_dim_v,
                        (int)hp->head_dim_mla, (int)hp->head_dim_v_mla);
    return st_hp_mla_scale(c, hp);
}

/* ==== gpt-oss: sliding windows, its routing and experts ====================================== */

static strata_status st_hp_gptoss(st_hp_ctx *c, st_hparams *hp) {
    ST_TRY(st_hp_u32(c, "attention.sliding_window", 1, &hp->n_swa, NULL));
    hp->swa_period = 2; /* llama.cpp's default for gpt-oss: even layers slide */
    ST_TRY(st_hp_u32(c, "attention.sliding_window_pattern", 0, &hp->swa_period, NULL));
    if (hp->n_swa < 1 || hp->swa_period < 1)
        return st_error(STRATA_ERR_FORMAT, "keys '%s.attention.sliding_window' (%d) / "
                        "'sliding_window_pattern' (%d) must be > 0", c->arch, (int)hp->n_swa,
                        (int)hp->swa_period);
    float base_swa = hp->rope_freq_base;
    ST_TRY(st_hp_f32(c, "rope.freq_base_swa", 0, &base_swa, NULL));
    if (base_swa != hp->rope_freq_base)
        return st_error(STRATA_ERR_UNSUPPORTED, "key '%s.rope.freq_base_swa' (%g) differs from "
                        "rope.freq_base (%g): not supported", c->arch, (double)base_swa,
                        (double)hp->rope_freq_base);
    hp->gating = ST_GATING_SOFTMAX_WEIGHT;
    hp->expert_act_oai = 1;
    hp->yarn_no_trunc = 1; /* as transformers computes gpt-oss's YaRN (truncate false) */
    ST_TRY(st_hp_weights_scale(c, hp));
    return STRATA_OK;
}

/* ==== qwen3next: the gated DeltaNet layers ================================================== */

static strata_status st_hp_ssm(st_hp_ctx *c, st_hparams *hp) {
    ST_TRY(st_hp_u32(c, "ssm.conv_kernel", 1, &hp->ssm_d_conv, NULL));
    ST_TRY(st_hp_u32(c, "ssm.inner_size", 1, &hp->ssm_d_inner, NULL));
    ST_TRY(st_hp_u32(c, "ssm.state_size", 1, &hp->ssm_d_state, NULL));
    ST_TRY(st_hp_u32(c, "ssm.time_step_rank", 1, &hp->ssm_dt_rank, NULL));
    ST_TRY(st_hp_u32(c, "ssm.group_count", 1, &hp->ssm_n_group, NULL));
    if (strata_gguf_kv_find(c->g, st_hp_key(c, "attention.recurrent_layers")) >= 0)
        return st_error(STRATA_ERR_UNSUPPORTED, "key '%s.attention.recurrent_layers': an explicit "
                        "recurrent-layer list is not supported (full_attention_interval is)", c->arch);
    hp->full_attn_interval = 4; /* llama.cpp's default */
    ST_TRY(st_hp_u32(c, "full_attention_interval", 0, &hp->full_attn_interval, NULL));
    const int32_t nk = hp->ssm_n_group, nv = hp->ssm_dt_rank, d = hp->ssm_d_state;
    if (hp->ssm_d_conv < 1 || hp->ssm_d_conv > 64 || nk < 1 || nv < 1 || nv % nk != 0 || d < 1 ||
        d > 1024 || (int64_t)nv * d != hp->ssm_d_inner || hp->full_attn_interval < 1)
        return st_error(STRATA_ERR_FORMAT, "keys '%s.ssm.*': conv_kernel %d (1..64), group_count %d "
                        "dividing time_step_rank %d, inner_size %d = time_step_rank x state_size %d, "
                        "full_attention_interval %d (>= 1)", c->arch, (int)hp->ssm_d_conv, (int)nk,
                        (int)nv, (int)hp->ssm_d_inner, (int)d, (int)hp->full_attn_interval);
    if (hp->head_dim != hp->head_dim_v)
        return st_error(STRATA_ERR_FORMAT, "qwen3next: key_length %d != value_length %d",
                        (int)hp->head_dim, (int)hp->head_dim_v);
    return STRATA_OK;
}

/* ==== the whole set ========================================================================== */

static strata_status st_hp_positive(st_hp_ctx *c, const char *suffix, int32_t v) {
    if (v <= 0) return st_error(STRATA_ERR_FORMAT, "key '%s.%s' must be > 0 (is %d)", c->arch,
                                suffix, (int)v);
    return STRATA_OK;
}

/* The model's shape: context, width, layers (less the MTP layers) and query heads. */
static strata_status st_hp_shape(st_hp_ctx *c, const st_arch *arch, st_hparams *hp) {
    ST_TRY(st_hp_u32(c, "context_length", 1, &hp->n_ctx_train, NULL));
    ST_TRY(st_hp_u32(c, "embedding_length", 1, &hp->n_embd, NULL));
    ST_TRY(st_hp_u32(c, "block_count", 1, &hp->n_layer, NULL));
    ST_TRY(st_hp_u32(c, "attention.head_count", 1, &hp->n_head, NULL));
    ST_TRY(st_hp_positive(c, "context_length", hp->n_ctx_train));
    ST_TRY(st_hp_positive(c, "embedding_length", hp->n_embd));
    ST_TRY(st_hp_positive(c, "block_count", hp->n_layer));
    ST_TRY(st_hp_positive(c, "attention.head_count", hp->n_head));
    if (hp->n_layer > 4096)
        return st_error(STRATA_ERR_FORMAT, "key '%s.block_count': %d layers is implausible",
                        c->arch, (int)hp->n_layer);
    /* MTP layers follow the trunk's and block_count counts them (llama.cpp's n_layer_all) */
    ST_TRY(st_hp_u32(c, "nextn_predict_layers", 0, &hp->n_nextn, NULL));
    if (hp->n_nextn > 0 && !arch->scored && arch->id != ST_ARCH_QWEN3NEXT)
        return st_error(STRATA_ERR_UNSUPPORTED, "key '%s.nextn_predict_layers' = %d: MTP layers of "
                        "architecture '%s' are not supported", c->arch, (int)hp->n_nextn, c->arch);
    if (hp->n_nextn >= hp->n_layer)
        return st_error(STRATA_ERR_FORMAT, "key '%s.nextn_predict_layers' (%d) leaves no layer of "
                        "the %d in '%s.block_count'", c->arch, (int)hp->n_nextn, (int)hp->n_layer, c->arch);
    hp->n_layer -= hp->n_nextn;
    return STRATA_OK;
}

/* The attention heads: KV heads, key and value widths, rotated dimensions. */
static strata_status st_hp_heads(st_hp_ctx *c, const st_arch *arch, st_hparams *hp) {
    hp->n_head_kv = hp->n_head;
    ST_TRY(st_hp_u32(c, "attention.head_count_kv", 0, &hp->n_head_kv, NULL));
    ST_TRY(st_hp_positive(c, "attention.head_count_kv", hp->n_head_kv));
    if (hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv != 0)
        return st_error(STRATA_ERR_FORMAT,
                        "key '%s.attention.head_count_kv' (%d) must divide "
                        "'%s.attention.head_count' (%d)",
                        c->arch, (int)hp->n_head_kv, c->arch, (int)hp->n_head);

    int have_k = 0, have_v = 0;
    ST_TRY(st_hp_u32(c, "attention.key_length", 0, &hp->head_dim, &have_k));
    ST_TRY(st_hp_u32(c, "attention.value_length", 0, &hp->head_dim_v, &have_v));
    if ((!have_k || !have_v) && hp->n_embd % hp->n_head != 0)
        return st_error(STRATA_ERR_FORMAT,
                        "key '%s.attention.head_count' (%d) does not divide "
                        "'%s.embedding_length' (%d) and '%s.attention.%s_length' is absent",
                        c->arch, (int)hp->n_head, c->arch, (int)hp->n_embd, c->arch,
                        have_k ? "value" : "key");
    if (!have_k) hp->head_dim = hp->n_embd / hp->n_head;
    if (!have_v) hp->head_dim_v = hp->n_embd / hp->n_head;
    ST_TRY(st_hp_positive(c, "attention.key_length", hp->head_dim));
    ST_TRY(st_hp_positive(c, "attention.value_length", hp->head_dim_v));
    if ((int64_t)hp->n_head * hp->head_dim > (1 << 20) ||
        (int64_t)hp->n_head * hp->head_dim_v > (1 << 20) || hp->n_embd > (1 << 20))
        return st_error(STRATA_ERR_FORMAT, "key '%s.embedding_length' / head sizes implausibly "
                        "large", c->arch);

    hp->n_rot = hp->head_dim;
    ST_TRY(st_hp_u32(c, "rope.dimension_count", 0, &hp->n_rot, NULL));
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return st_error(STRATA_ERR_FORMAT,
                        "key '%s.rope.dimension_count' (%d) must be even and in 2..%d", c->arch,
                        (int)hp->n_rot, (int)hp->head_dim);
    if (arch->id == ST_ARCH_LLAMA && hp->n_rot != hp->head_dim)
        return st_error(STRATA_ERR_FORMAT,
                        "key '%s.rope.dimension_count' (%d) must equal the head size %d", c->arch,
                        (int)hp->n_rot, (int)hp->head_dim);
    return STRATA_OK;
}

/* The norm's epsilon, the rope's base and its scaling. */
static strata_status st_hp_norm_rope(st_hp_ctx *c, st_hparams *hp) {
    ST_TRY(st_hp_f32(c, "attention.layer_norm_rms_epsilon", 1, &hp->norm_eps, NULL));
    if (!(hp->norm_eps >= 0.0f))
        return st_error(STRATA_ERR_FORMAT, "key '%s.attention.layer_norm_rms_epsilon' < 0",
                        c->arch);

    hp->rope_freq_base = 10000.0f;
    ST_TRY(st_hp_f32(c, "rope.freq_base", 0, &hp->rope_freq_base, NULL));
    if (!(hp->rope_freq_base > 0.0f))
        return st_error(STRATA_ERR_FORMAT, "key '%s.rope.freq_base' must be > 0", c->arch);
    return st_hp_rope(c, hp);
}

/* The feed-forward keys as read: the widths and whether each is present. */
typedef struct {
    int32_t ff, ff_exp, ff_shexp;
    int have_ff, have_exp, have_shexp;
} st_hp_ffn_keys;

/* The expert counts, checked against the architecture (dense, MoE or either). */
static strata_status st_hp_experts(st_hp_ctx *c, const st_arch *arch, st_hparams *hp) {
    int moe_arch = arch->id == ST_ARCH_OLMOE || arch->id == ST_ARCH_QWEN2MOE ||
                   arch->id == ST_ARCH_QWEN3MOE || arch->id == ST_ARCH_GRANITEMOE ||
                   arch->id == ST_ARCH_DEEPSEEK2 || arch->id == ST_ARCH_GLM4MOE ||
                   arch->id == ST_ARCH_GPTOSS || arch->id == ST_ARCH_QWEN3NEXT;
    int dense_arch = arch->id == ST_ARCH_QWEN2 || arch->id == ST_ARCH_QWEN3;
    if (hp->n_expert > 4096)
        return st_error(STRATA_ERR_FORMAT, "key '%s.expert_count': %d experts is implausible",
                        c->arch, (int)hp->n_expert);
    if (moe_arch && hp->n_expert == 0)
        return st_error(STRATA_ERR_NOT_FOUND,
                        "architecture '%s' needs experts: key '%s.expert_count' missing or 0",
                        c->arch, c->arch);
    if (dense_arch && hp->n_expert != 0)
        return st_error(STRATA_ERR_FORMAT,
                        "architecture '%s' is dense but '%s.expert_count' is %d", c->arch, c->arch,
                        (int)hp->n_expert);
    if (hp->n_expert_used > hp->n_expert)
        return st_error(STRATA_ERR_FORMAT,
                        "key '%s.expert_used_count' (%d) exceeds '%s.expert_count' (%d)", c->arch,
                        (int)hp->n_expert_used, c->arch, (int)hp->n_expert);
    if (hp->n_expert > 0 && hp->n_expert_used == 0)
        return st_error(STRATA_ERR_NOT_FOUND,
                        "key '%s.expert_used_count' missing or 0 with %d experts", c->arch,
                        (int)hp->n_expert);
    return STRATA_OK;
}

/* The FFN widths: the dense layers', else a routed expert's and the shared expert's. */
static strata_status st_hp_ffn_widths(st_hp_ctx *c, const st_arch *arch, st_hparams *hp,
                                      const st_hp_ffn_keys *f) {
    if (hp->n_expert == 0) {
        if (!f->have_ff)
            return st_error(STRATA_ERR_NOT_FOUND, "missing required key '%s.feed_forward_length'",
                            c->arch);
        ST_TRY(st_hp_positive(c, "feed_forward_length", f->ff));
        hp->n_ff = f->ff;
        return STRATA_OK;
    }
    hp->n_ff = 0; /* no dense FFN layers */
    if (f->have_exp) {
        hp->n_ff_exp = f->ff_exp;
    } else if (!f->have_ff) {
        return st_error(STRATA_ERR_NOT_FOUND,
                        "missing required key '%s.expert_feed_forward_length' (or "
                        "'%s.feed_forward_length')", c->arch, c->arch);
    } else if (arch->id == ST_ARCH_QWEN2MOE || arch->id == ST_ARCH_QWEN3MOE ||
               arch->id == ST_ARCH_QWEN3NEXT) {
        hp->n_ff_exp = f->ff / hp->n_expert_used; /* llama.cpp's fallback */
    } else {
        hp->n_ff_exp = f->ff; /* olmoe, Mixtral, granitemoe: the FFN width is the expert's */
    }
    ST_TRY(st_hp_positive(c, "expert_feed_forward_length", hp->n_ff_exp));
    if (arch->id == ST_ARCH_QWEN2MOE || arch->id == ST_ARCH_QWEN3NEXT) {
        hp->n_ff_shexp = f->have_shexp ? f->ff_shexp : f->ff;
        ST_TRY(st_hp_positive(c, "expert_shared_feed_forward_length", hp->n_ff_shexp));
    } else if (arch->id == ST_ARCH_GRANITEMOE) {
        hp->n_ff_shexp = f->have_shexp ? f->ff_shexp : 0; /* 0: no shared expert */
    }
    return STRATA_OK;
}

/* The feed-forward: dense or routed experts, their routing and the architecture's own keys. */
static strata_status st_hp_ffn(st_hp_ctx *c, const st_arch *arch, st_hparams *hp) {
    st_hp_ffn_keys f = {0};
    ST_TRY(st_hp_u32(c, "expert_count", 0, &hp->n_expert, NULL));
    ST_TRY(st_hp_u32(c, "expert_used_count", 0, &hp->n_expert_used, NULL));
    ST_TRY(st_hp_u32(c, "feed_forward_length", 0, &f.ff, &f.have_ff));
    ST_TRY(st_hp_u32(c, "expert_feed_forward_length", 0, &f.ff_exp, &f.have_exp));
    ST_TRY(st_hp_u32(c, "expert_shared_feed_forward_length", 0, &f.ff_shexp, &f.have_shexp));
    ST_TRY(st_hp_experts(c, arch, hp));
    ST_TRY(st_hp_ffn_widths(c, arch, hp, &f));

    int norm = 0, have_norm = 0;
    ST_TRY(st_hp_bool(c, "expert_weights_norm", &norm, &have_norm));
    hp->expert_weights_norm = have_norm ? (norm != 0) : arch->norm_topk_default;
    hp->expert_weights_scale = 1.0f;
    hp->gating = ST_GATING_SOFTMAX;
    hp->n_expert_groups = 1;
    hp->n_group_used = 1;
    if (arch->scored) ST_TRY(st_hp_scored(c, hp, f.have_ff, f.ff));
    if (arch->id == ST_ARCH_GPTOSS) ST_TRY(st_hp_gptoss(c, hp));
    if (arch->mla) ST_TRY(st_hp_mla(c, hp));
    if (arch->id == ST_ARCH_QWEN3NEXT) ST_TRY(st_hp_ssm(c, hp));
    return STRATA_OK;
}

/* The granite multipliers (llama.cpp: embedding_scale, residual_scale, logit_scale,
 * attention.scale; logits are divided by logit_scale; attention.scale 0 = 1/sqrt(hd)). */
static strata_status st_hp_granite(st_hp_ctx *c, const st_arch *arch, st_hparams *hp) {
    hp->embedding_scale = 1.0f;
    hp->residual_scale = 1.0f;
    hp->attention_scale = 0.0f;
    hp->logit_scale = 1.0f;
    if (arch->granite_scales) {
        ST_TRY(st_hp_f32(c, "embedding_scale", 0, &hp->embedding_scale, NULL));
        ST_TRY(st_hp_f32(c, "residual_scale", 0, &hp->residual_scale, NULL));
        ST_TRY(st_hp_f32(c, "attention.scale", 0, &hp->attention_scale, NULL));
        ST_TRY(st_hp_f32(c, "logit_scale", 0, &hp->logit_scale, NULL));
        if (hp->logit_scale == 0.0f) hp->logit_scale = 1.0f; /* llama.cpp skips a 0 scale */
        if (hp->residual_scale == 0.0f) hp->residual_scale = 1.0f;
        if (hp->embedding_scale == 0.0f) hp->embedding_scale = 1.0f;
    }
    return STRATA_OK;
}

strata_status st_hparams_load(const strata_gguf *g, const st_arch *arch, st_hparams *hp) {
    st_hp_ctx c = {.g = g, .arch = arch->name, .gating_default = arch->gating_default};
    memset(hp, 0, sizeof *hp);
    ST_TRY(st_hp_shape(&c, arch, hp));
    ST_TRY(st_hp_heads(&c, arch, hp));
    ST_TRY(st_hp_norm_rope(&c, hp));
    ST_TRY(st_hp_ffn(&c, arch, hp));
    return st_hp_granite(&c, arch, hp);
}
