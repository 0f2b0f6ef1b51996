/* model.h - the loaded model as the rest of the library sees it: architecture traits,
 * hyperparameters, weight views into the file mapping (experts addressable one by one), and the
 * vocabulary. Filled once by strata_model_load (model.c) and immutable afterwards.
 *
 * Weight shapes follow GGUF/ggml order: ne[0] is the contiguous row length (the input dimension of
 * a matmul), ne[1] the number of rows (output dimension), ne[2] the expert index for merged expert
 * tensors. Shape comments below are written (ne[0], ne[1], ne[2]). */
#ifndef STRATA_MODEL_H
#define STRATA_MODEL_H

#include "common.h"

#include <stdatomic.h>
#include <stdint.h>

typedef struct st_vocab st_vocab; /* tokenizer (vocab.h) */

/* ---- architecture traits -------------------------------------------------------------------- */

typedef enum {
    ST_ARCH_LLAMA,       /* dense llama and Mixtral-style llama with experts */
    ST_ARCH_QWEN2,
    ST_ARCH_QWEN3,
    ST_ARCH_QWEN2MOE,
    ST_ARCH_QWEN3MOE,
    ST_ARCH_OLMOE,
    ST_ARCH_GRANITEMOE,
    ST_ARCH_DEEPSEEK2,   /* DeepSeek-V2/V3/R1, Kimi-K2: multi-head latent attention */
    ST_ARCH_GLM4MOE,     /* GLM-4.5/4.6 */
    ST_ARCH_GPTOSS,      /* gpt-oss-20b/120b */
    ST_ARCH_QWEN3NEXT,   /* Qwen3-Next: gated DeltaNet layers between gated attention layers */
    ST_ARCH_COUNT
} st_arch_id;

typedef enum {
    ST_ROPE_NORM,  /* rotate adjacent pairs (x[2i], x[2i+1]): llama, granite */
    ST_ROPE_NEOX   /* rotate halves (x[i], x[i + d/2]): qwen*, olmoe */
} st_rope_style;

typedef enum {
    ST_QKNORM_NONE,
    ST_QKNORM_FULL,  /* RMSNorm over the whole q (n_head*hd) / k (n_head_kv*hd) projection: OLMoE */
    ST_QKNORM_HEAD   /* RMSNorm over each head's hd values, weights (hd): Qwen3 */
} st_qknorm;

/* How router logits become expert scores (<arch>.expert_gating_func, llama.cpp's numbering). */
typedef enum { ST_GATING_SOFTMAX = 1, ST_GATING_SIGMOID = 2,
               ST_GATING_SOFTMAX_WEIGHT = 3 /* gpt-oss: top-k of the logits, softmax over the k */
} st_gating;

typedef struct {
    const char *name;        /* general.architecture */
    st_arch_id id;
    st_rope_style rope;
    st_qknorm qk_norm;
    int norm_topk_default;   /* renormalize top-k weights when <arch>.expert_weights_norm is absent */
    int shexp_gated;         /* shared expert output scaled by sigmoid(ffn_gate_inp_shexp . x) */
    int granite_scales;      /* embedding/residual/attention/logit multipliers */
    int mla;                 /* multi-head latent attention (deepseek2): see st_layer's MLA part */
    int scored;              /* DeepSeek-style MoE keys: gating function, selection bias, groups,
                                weight scale, leading dense layers, shared expert count, MTP layers */
    st_gating gating_default; /* scored: when <arch>.expert_gating_func is absent */
} st_arch;

/* The trait table entry for name, or NULL. */
const st_arch *st_arch_find(const char *name);

/* ---- hyperparameters ------------------------------------------------------------------------ */

typedef enum { ST_ROPE_SCALING_NONE, ST_ROPE_SCALING_LINEAR, ST_ROPE_SCALING_YARN } st_rope_scaling;


typedef struct {
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;        /* key length per head (attention.key_length, else n_embd/n_head) */
    int32_t head_dim_v;      /* value length per head */
    int32_t n_rot;           /* rope.dimension_count (default head_dim) */
    int32_t n_ff;            /* dense FFN width, 0 if none */
    int32_t n_expert;        /* 0 for dense models */
    int32_t n_expert_used;
    int32_t n_ff_exp;
    int32_t n_ff_shexp;
    float norm_eps;          /* attention.layer_norm_rms_epsilon */
    float rope_freq_base;
    float rope_freq_scale;   /* 1 / rope.scaling.factor for linear and yarn */
    st_rope_scaling rope_scaling;
    int32_t yarn_orig_ctx;   /* rope.scaling.original_context_length */
    float yarn_ext_factor;   /* llama.cpp's default rule: 1 for yarn, else 0 */
    float yarn_attn_factor;  /* rope.scaling.attn_factor, default 1 */
    float yarn_beta_fast;    /* 32 */
    float yarn_beta_slow;    /* 1 */
    int yarn_no_trunc;       /* the YaRN correction dims not rounded to whole dims (gpt-oss's
                                config: truncate false; llama.cpp always rounds) */
    int expert_weights_norm; /* renormalize the top-k routing weights */
    float expert_weights_scale; /* routed weights multiplied by it (1: none) */
    st_gating gating;        /* softmax or sigmoid scores */
    int32_t n_expert_groups; /* group-limited top-k: experts in n_expert_groups groups, only the
                                n_group_used best (sum of each group's top two) compete; 1: off */
    int32_t n_group_used;
    int32_t n_layer_dense_lead; /* the first layers have a dense FFN (n_ff) instead of experts */
    int32_t n_expert_shared; /* shared experts, merged into one FFN of n_ff_shexp */
    /* multi-head latent attention (arch->mla): the cache holds per token one row of head_dim =
     * kv_lora + n_rot values (the normalized latent, then the roped key part), read as the keys
     * of one KV head and, its first head_dim_v = kv_lora values, as the values */
    int32_t n_lora_q;        /* q low-rank width (0: a full attn_q) */
    int32_t n_lora_kv;       /* the latent's width */
    int32_t head_dim_mla;    /* per-head q/k width as trained: qk_nope + n_rot */
    int32_t head_dim_v_mla;  /* per-head value width as trained */
    int mla_kv_b;            /* 1: a file from before llama.cpp's split (one attn_kv_b per layer,
                                the trained head sizes in key/value_length): the loader splits it */
    float kq_scale;          /* MLA: the attention score scale (YaRN mscale^2 / sqrt(head_dim_mla)) */
    /* gpt-oss */
    int32_t n_swa;           /* attention.sliding_window: a sliding layer's query sees its last
                                n_swa positions (itself included); 0: none */
    int32_t swa_period;      /* layer il slides when il % swa_period < swa_period - 1 */
    int expert_act_oai;      /* experts' activation: gpt-oss's clamped SwiGLU with biases */
    int32_t n_nextn;         /* nextn_predict_layers: MTP layers the file declares after the
                                n_layer trunk layers (block_count = n_layer + n_nextn) */
    /* qwen3next's gated DeltaNet (linear attention) layers: llama.cpp's ssm.* keys */
    int32_t ssm_d_conv;      /* ssm.conv_kernel: the causal conv's width */
    int32_t ssm_d_state;     /* ssm.state_size: the key (and value) head size */
    int32_t ssm_n_group;     /* ssm.group_count: key heads */
    int32_t ssm_dt_rank;     /* ssm.time_step_rank: value heads */
    int32_t ssm_d_inner;     /* ssm.inner_size: value heads x head size */
    int32_t full_attn_interval; /* full_attention_interval: layer il attends when (il+1) % it == 0
                                   (0: every layer attends) */
    /* granite multipliers (1 where the architecture has none; attention_scale 0 = 1/sqrt(hd)) */
    float embedding_scale;
    float residual_scale;
    float attention_scale;
    float logit_scale;
} st_hparams;

/* Whether layer il attends through a sliding window (gpt-oss: llama.cpp's swa pattern). */
static inline int st_layer_swa(const st_hparams *hp, int il) {
    return hp->n_swa > 0 && il % hp->swa_period < hp->swa_period - 1;
}

/* Whether layer il is a recurrent (gated DeltaNet) layer: llama.cpp's is_recr for qwen3next (its
 * MTP layers, il >= n_layer, are gated full attention whatever the interval says). */
static inline int st_layer_recurrent(const st_hparams *hp, int il) {
    return hp->full_attn_interval > 0 && il < hp->n_layer && (il + 1) % hp->full_attn_interval != 0;
}

/* What a session's context costs, from the shapes (kv_shape.c). st_kv_bytes_per_token: the bytes
 * one position adds to the KV cache in kv_type (f16 or f32; 0 for another type): every layer but
 * the recurrent ones (sliding-window layers too: the cache keeps every position for them), K of
 * n_head_kv x head_dim and V of n_head_kv x head_dim_v, or with latent attention one row of
 * head_dim (kv_lora + n_rot) and no V; the MTP drafter's own cache is not counted.
 * st_recurrent_state_bytes: the state proper of the recurrent layers (f32: per layer each value
 * head's d x d delta-rule state and the conv's last d_conv - 1 inputs), 0 without them. */
uint64_t st_kv_bytes_per_token(const st_hparams *hp, strata_type kv_type);
uint64_t st_recurrent_state_bytes(const st_hparams *hp);

/* ---- weights -------------------------------------------------------------------------------- */

/* A view of one weight tensor in the mapping; data == NULL when the model lacks it. */
typedef struct {
    strata_type type;
    const uint8_t *data;
    int64_t ne[3];           /* (row length, rows, experts); unused dims 1 */
    size_t row_bytes;        /* bytes of one row of ne[0] weights */
    const char *name;        /* tensor name in the file */
} st_tensor;

/* Bytes of a tensor's data: row_bytes x rows x experts. */
static inline size_t st_tensor_bytes(const st_tensor *t) {
    return t->row_bytes * (size_t)t->ne[1] * (size_t)(t->ne[2] > 0 ? t->ne[2] : 1);
}

/* Row r of expert e (e = 0 for 2-D tensors). */
static inline const void *st_tensor_row(const st_tensor *t, int64_t e, int64_t r) {
    return t->data + ((size_t)e * (size_t)t->ne[1] + (size_t)r) * t->row_bytes;
}

/* The 2-D slice of expert e of a merged expert tensor: a zero-copy view, the unit that later
 * moves between disk, RAM and GPU. */
static inline st_tensor st_tensor_expert(const st_tensor *t, int64_t e) {
    st_tensor s = *t;
    s.data = t->data + (size_t)e * (size_t)t->ne[1] * t->row_bytes;
    s.ne[2] = 1;
    return s;
}

typedef struct {
    st_tensor attn_norm;       /* (n_embd) */
    st_tensor wq;              /* (n_embd, n_head*head_dim) */
    st_tensor wk;              /* (n_embd, n_head_kv*head_dim) */
    st_tensor wv;              /* (n_embd, n_head_kv*head_dim_v) */
    st_tensor wo;              /* (n_head*head_dim_v, n_embd) */
    st_tensor bq, bk, bv, bo;  /* optional biases (qwen2, qwen2moe): (rows) */
    st_tensor q_norm;          /* (head_dim) per head, or (n_head*head_dim) whole: see st_qknorm */
    st_tensor k_norm;          /* (head_dim) or (n_head_kv*head_dim) */
    st_tensor ffn_norm;        /* (n_embd) */
    /* dense FFN (dense models) */
    st_tensor ffn_gate;        /* (n_embd, n_ff) */
    st_tensor ffn_up;          /* (n_embd, n_ff) */
    st_tensor ffn_down;        /* (n_ff, n_embd) */
    /* routed experts */
    st_tensor ffn_gate_inp;    /* router: (n_embd, n_expert) */
    st_tensor ffn_gate_exps;   /* (n_embd, n_ff_exp, n_expert) */
    st_tensor ffn_up_exps;     /* (n_embd, n_ff_exp, n_expert) */
    st_tensor ffn_down_exps;   /* (n_ff_exp, n_embd, n_expert) */
    /* multi-head latent attention (deepseek2; wq above when there is no q low-rank) */
    st_tensor wq_a;            /* (n_embd, n_lora_q) */
    st_tensor q_a_norm;        /* (n_lora_q) */
    st_tensor wq_b;            /* (n_lora_q, n_head*head_dim_mla) */
    st_tensor wkv_a;           /* (n_embd, n_lora_kv + n_rot): the latent, then the shared key rope part */
    st_tensor kv_a_norm;       /* (n_lora_kv) */
    st_tensor wk_b;            /* (qk_nope, n_lora_kv, n_head): absorbs q_nope into latent space */
    st_tensor wv_b;            /* (n_lora_kv, head_dim_v_mla, n_head): latent output to values */
    st_tensor exp_probs_b;     /* (n_expert): expert selection bias (not in the weights) */
    void *mla_split;           /* owned: wk_b's and wv_b's data when split from attn_kv_b, else NULL */
    /* gpt-oss */
    st_tensor attn_sinks;      /* (n_head): each head's sink logit in its softmax */
    st_tensor ffn_gate_inp_b;  /* (n_expert): the router's bias */
    st_tensor ffn_gate_exps_b; /* (n_ff_exp, n_expert) */
    st_tensor ffn_up_exps_b;   /* (n_ff_exp, n_expert) */
    st_tensor ffn_down_exps_b; /* (n_embd, n_expert) */
    /* qwen3next's gated DeltaNet layers (their wq is (n_embd, 2*n_head*head_dim) elsewhere:
     * each head's query then its output gate) */
    st_tensor ssm_qkv;         /* attn_qkv: (n_embd, conv_dim) the conv's channels: q, k, v heads */
    st_tensor ssm_gate;        /* attn_gate: (n_embd, d_inner) z, the output norm's gate */
    st_tensor ssm_ba;          /* (n_embd, 2*n_v): per key head, its value heads' beta then alpha */
    st_tensor ssm_conv1d;      /* (d_conv, conv_dim) */
    st_tensor ssm_dt;          /* (n_v) the alpha bias */
    st_tensor ssm_a;           /* (n_v) -exp(A_log) */
    st_tensor ssm_norm;        /* (head size) the gated RMSNorm's weight */
    st_tensor ssm_out;         /* (d_inner, n_embd) */
    /* an MTP layer's own parts (layers n_layer.. n_layer + n_mtp - 1 only): the next token's
     * normalized embedding and the normalized trunk output, joined, projected, then the layer */
    st_tensor nextn_eh_proj;   /* (2*n_embd, n_embd) */
    st_tensor nextn_enorm;     /* (n_embd) */
    st_tensor nextn_hnorm;     /* (n_embd) */
    st_tensor nextn_embed;     /* (n_embd, n_vocab), optional: else token_embd */
    st_tensor nextn_head;      /* (n_embd, n_vocab), optional: else output */
    st_tensor nextn_head_norm; /* (n_embd), optional: else output_norm */
    /* shared expert (qwen2moe, deepseek2; granitemoe optionally) */
    st_tensor ffn_gate_inp_shexp; /* (n_embd) : sigmoid gate, qwen2moe only */
    st_tensor ffn_gate_shexp;  /* (n_embd, n_ff_shexp) */
    st_tensor ffn_up_shexp;    /* (n_embd, n_ff_shexp) */
    st_tensor ffn_down_shexp;  /* (n_ff_shexp, n_embd) */
} st_layer;

/* Whether a layer routes to experts: MoE layers; not dense models' layers nor the leading dense
 * layers of deepseek2 (il < n_layer_dense_lead), which have ffn_gate/up/down instead. */
static inline int st_layer_has_experts(const st_layer *L) {
    return L->ffn_gate_exps.data != NULL;
}

struct strata_model {
    strata_gguf *gguf;         /* owned */
    const st_arch *arch;       /* NULL for vocab_only models of unknown architecture */
    st_hparams hp;
    st_tensor tok_embd;        /* (n_embd, n_vocab) */
    st_tensor output_norm;     /* (n_embd) */
    st_tensor output;          /* (n_embd, n_vocab); == tok_embd when the embeddings are tied */
    st_layer *layers;          /* [n_layer + n_mtp]: the trunk, then the MTP layers */
    int32_t n_mtp;             /* MTP layers bound: hp.n_nextn, or 0 when the file declares them
                                  but carries none of their tensors (a trunk-only conversion) */
    st_vocab *vocab;           /* owned */
    int vocab_only;
    int n_threads;             /* resolved (> 0) */
    strata_model_info info;    /* what strata_model_get_info returns */
    atomic_int refs;           /* the caller's reference plus one per live session */
};

/* How many of the layers below n have experts (n_cpu_moe and the fit count layer indices as
 * llama.cpp's --n-cpu-moe does: the leading dense layers among them have none). */
static inline int32_t st_model_moe_layers(const strata_model *m, int32_t n) {
    int32_t c = 0;
    for (int32_t il = 0; il < n && il < m->hp.n_layer; il++) c += st_layer_has_experts(&m->layers[il]);
    return c;
}

/* The first layer at or after il with experts (n_layer - 1 when none is). */
static inline int32_t st_model_first_moe_layer(const strata_model *m, int32_t il) {
    while (il < m->hp.n_layer - 1 && !st_layer_has_experts(&m->layers[il])) il++;
    return il;
}

/* A session keeps its model alive: it takes a reference when created and drops it when freed;
 * the model's memory goes with the last reference (strata_model_free drops the caller's). */
void st_model_retain(const strata_model *model);
void st_model_release(const strata_model *model);

#endif /* STRATA_MODEL_H */
