/* arch.c - the architecture trait table: for every supported general.architecture, the facts the
 * forward pass branches on (RoPE style, q/k norm scope, default top-k renormalization, gated
 * shared expert, granite multipliers). The values follow llama.cpp's per-architecture choices
 * (llama_model_rope_type, the build_moe_ffn norm_w argument of each graph builder) and the
 * transformers modeling files:
 *
 *   olmoe      NEOX rope; q/k RMSNorm over the whole projection (OlmoeAttention q_norm/k_norm);
 *              norm_topk_prob false.
 *   qwen2moe   NEOX; q/k/v bias; shared expert scaled by sigmoid(shared_expert_gate . x);
 *              norm_topk_prob false.
 *   qwen3moe   NEOX; per-head q/k RMSNorm; norm_topk_prob true.
 *   llama      NORM (adjacent pairs); with experts (Mixtral) the top-k weights are renormalized.
 *   granitemoe NORM; embedding/residual/attention/logit multipliers; renormalized top-k;
 *              optional ungated shared expert.
 *   qwen2      NEOX; q/k/v bias; dense.
 *   qwen3      NEOX; per-head q/k RMSNorm; dense.
 *   deepseek2  NORM on the rope part of each head; multi-head latent attention; leading dense
 *              layers; ungated shared experts; softmax or sigmoid scores with a selection bias
 *              and group-limited top-k (all from the file's keys); expert_weights_norm false.
 *   glm4moe    NEOX on the first rope.dimension_count of each head; q/k/v biases; per-head q/k
 *              RMSNorm where the file has it; the FFN's norm is blk.N.post_attention_norm;
 *              deepseek2's FFN half with sigmoid scores by default.
 *   gpt-oss    NEOX; q/k/v/o biases; attention sinks; sliding-window layers alternating with
 *              full ones; FFN norm in post_attention_norm; the router's bias, top-k of the logits
 *              with a softmax over the k; experts with biases and the clamped SwiGLU.
 *   qwen3next  NEOX on the first rope.dimension_count of each head; per-head q/k RMSNorm; gated
 *              DeltaNet layers with every full_attention_interval-th layer a gated attention
 *              one; FFN norm in post_attention_norm; renormalized top-k; shared expert behind a
 *              sigmoid gate (llama.cpp's qwen3next graph). */
#include "model.h"

#include <string.h>

static const st_arch st_arch_table[] = {
    /* name         id                 rope          qk_norm          topk shexp granite mla scored gating */
    {"llama",      ST_ARCH_LLAMA,      ST_ROPE_NORM, ST_QKNORM_NONE, 1, 0, 0, 0, 0, ST_GATING_SOFTMAX},
    {"qwen2",      ST_ARCH_QWEN2,      ST_ROPE_NEOX, ST_QKNORM_NONE, 0, 0, 0, 0, 0, ST_GATING_SOFTMAX},
    {"qwen3",      ST_ARCH_QWEN3,      ST_ROPE_NEOX, ST_QKNORM_HEAD, 0, 0, 0, 0, 0, ST_GATING_SOFTMAX},
    {"qwen2moe",   ST_ARCH_QWEN2MOE,   ST_ROPE_NEOX, ST_QKNORM_NONE, 0, 1, 0, 0, 0, ST_GATING_SOFTMAX},
    {"qwen3moe",   ST_ARCH_QWEN3MOE,   ST_ROPE_NEOX, ST_QKNORM_HEAD, 1, 0, 0, 0, 0, ST_GATING_SOFTMAX},
    {"olmoe",      ST_ARCH_OLMOE,      ST_ROPE_NEOX, ST_QKNORM_FULL, 0, 0, 0, 0, 0, ST_GATING_SOFTMAX},
    {"granitemoe", ST_ARCH_GRANITEMOE, ST_ROPE_NORM, ST_QKNORM_NONE, 1, 0, 1, 0, 0, ST_GATING_SOFTMAX},
    {"deepseek2",  ST_ARCH_DEEPSEEK2,  ST_ROPE_NORM, ST_QKNORM_NONE, 0, 0, 0, 1, 1, ST_GATING_SOFTMAX},
    {"glm4moe",    ST_ARCH_GLM4MOE,    ST_ROPE_NEOX, ST_QKNORM_HEAD, 0, 0, 0, 0, 1, ST_GATING_SIGMOID},
    {"qwen3next",  ST_ARCH_QWEN3NEXT,  ST_ROPE_NEOX, ST_QKNORM_HEAD, 1, 1, 0, 0, 0, ST_GATING_SOFTMAX},
    {"gpt-oss",    ST_ARCH_GPTOSS,     ST_ROPE_NEOX, ST_QKNORM_NONE, 0, 0, 0, 0, 0, ST_GATING_SOFTMAX_WEIGHT},
};

const st_arch *st_arch_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < ST_ARRAY_LEN(st_arch_table); i++)
        if (strcmp(st_arch_table[i].name, name) == 0) return &st_arch_table[i];
    return NULL;
}
