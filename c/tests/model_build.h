/* model_build.h - random-weight GGUF models of every supported architecture for the tests:
 * a spec (shape, traits, error-case mutations), the writer (c/format/gguf_writer.h, f32 weights,
 * q8_0 attention and typed FFN weights on request, values 0.1 * U(-1, 1) from a fixed seed) and
 * the base spec of each architecture, shaped as its real checkpoints are (scaled down); and, for
 * the hand-assembled deepseek2 files (test_dense_lead.c, test_cuda_mtp.c), f32 tensors of a scale
 * each and the latent-attention (MLA) layer's keys and tensors. Header-only, for c/tests. */
#ifndef STRATA_TEST_MODEL_BUILD_H
#define STRATA_TEST_MODEL_BUILD_H

#include "common.h"
#include "gguf_writer.h"
#include "strata.h"
#include "strata_gguf.h"
#include "strata_quant.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *arch;           /* general.architecture */
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_vocab;
    int n_ff;                   /* dense FFN (n_expert == 0) */
    int n_expert, n_used, n_ff_exp, n_ff_shexp;
    int write_exp_key;          /* write expert_feed_forward_length (else feed_forward_length) */
    int bias;                   /* q/k/v biases */
    int qk;                     /* 0 none, 1 whole projection, 2 per head */
    int tied;                   /* no output.weight */
    int granite;                /* multipliers */
    int shexp_gate;             /* ffn_gate_inp_shexp */
    int split_experts;          /* 1: blk.N.ffn_gate.E.weight back to back; 2: interleaved */
    int yarn;
    int kv_array;               /* head_count_kv as a per-layer array */
    int q8;                     /* attention weights in q8_0 */
    /* qwen3next: gated DeltaNet layers (every layer but each ssm_interval-th), their key heads,
     * value heads, head size and conv width; the others gated attention (attn_q with each head's
     * gate), partial rope (n_rot) */
    int ssm_interval, ssm_nk, ssm_nv, ssm_d, ssm_conv, n_rot;
    /* FFN weight types (dense, routed and shared experts) of even [0] and odd [1] layers: gate,
     * up, down; F32 (0) keeps f32, as does a row length the type's block does not divide.
     * Types without a quantizer get random well-formed blocks (scales of the f32 weights' size). */
    strata_type ffn_type[2][3];
    int ffn_deq;                /* 1: write those FFN tensors as f32, their dequantized values */
    /* mutations for the error cases */
    const char *drop_tensor;
    const char *reshape_tensor; /* ne[1] += 16 */
    const char *retype_tensor;
    strata_type retype;
    const char *drop_key;       /* full key */
    const char *u32_key;        /* full key set to u32_val */
    uint32_t u32_val;
    const char *str_key, *str_val;
    const char *extra_tensor;
    int kv_array_uneven;
} spec;

typedef struct {
    st_gguf_writer *w;
    const spec *s;
    void *bufs[512];
    int n_bufs;
    test_rng rng;
    int ok;
} builder;

/* The type spec s gives FFN tensor `name` (F32 for every other tensor). */
static strata_type ffn_type_of(const spec *s, const char *name, int64_t ne0) {
    int il = -1;
    if (sscanf(name, "blk.%d.", &il) != 1 || strstr(name, "gate_inp") || !strstr(name, ".weight")) return STRATA_TYPE_F32;
    const int k = strstr(name, ".ffn_gate") ? 0 : strstr(name, ".ffn_up") ? 1 : strstr(name, ".ffn_down") ? 2 : -1;
    if (k < 0) return STRATA_TYPE_F32;
    const strata_type t = s->ffn_type[il % 2][k];
    return ne0 % strata_type_block_size(t) == 0 ? t : STRATA_TYPE_F32;
}

/* n weights of a type without a quantizer: random bytes with each block's scale set so the
 * weights are of the f32 weights' size (0.1 U(-1, 1)). */
static void random_blocks(builder *b, strata_type t, int64_t n, uint8_t *dst) {
    const int64_t bb = strata_type_block_bytes(t), nb = n / strata_type_block_size(t);
    for (int64_t i = 0; i < nb * bb; i++) dst[i] = (uint8_t)test_rng_next(&b->rng);
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *blk = dst + i * bb;
        if (t == STRATA_TYPE_MXFP4) {
            blk[0] = 120; /* 2^-7 / 2 * (up to 12) */
        } else if (t == STRATA_TYPE_IQ1_M) { /* the f16 scale in the top nibbles of 4 u16 at 48 */
            const uint16_t h = st_f32_to_fp16(0.006f);
            for (int k = 0; k < 4; k++)
                blk[48 + 2 * k + 1] = (uint8_t)((blk[48 + 2 * k + 1] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
        } else { /* the IQ types: an f16 d first (IQ1_S's dl up to 15 d, IQ2's db * grid up to 170 d) */
            const uint16_t h = st_f32_to_fp16(t == STRATA_TYPE_IQ1_S ? 0.006f : 0.0006f);
            memcpy(blk, &h, 2);
        }
    }
}

static void add_t(builder *b, const char *name, int64_t ne0, int64_t ne1, int64_t ne2) {
    const spec *s = b->s;
    if (s->drop_tensor && strcmp(name, s->drop_tensor) == 0) return;
    if (s->reshape_tensor && strcmp(name, s->reshape_tensor) == 0) ne1 += 16;
    strata_type type = STRATA_TYPE_F32;
    if (s->q8 && strstr(name, ".attn_") && strstr(name, ".weight") && !strstr(name, "norm"))
        type = STRATA_TYPE_Q8_0;
    if (s->retype_tensor && strcmp(name, s->retype_tensor) == 0) type = s->retype;
    const strata_type ft = ffn_type_of(s, name, ne0);
    if (ft != STRATA_TYPE_F32) type = ft;
    int64_t ne[3] = {ne0, ne1, ne2};
    uint32_t nd = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
    int64_t n = ne0 * ne1 * ne2;
    float *f = malloc((size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++) f[i] = test_rng_float(&b->rng) * 0.1f;
    if (strstr(name, ".ssm_a")) /* -exp(A_log): a decay in (0, 1) */
        for (int64_t i = 0; i < n; i++) f[i] = -(0.1f + 10.0f * fabsf(f[i]));
    void *data = f;
    if (type == STRATA_TYPE_Q8_0 || type == STRATA_TYPE_F16 || ft != STRATA_TYPE_F32) {
        data = malloc((size_t)strata_row_bytes(type, ne0) * (size_t)(ne1 * ne2));
        if (strata_type_can_quantize(type)) {
            for (int64_t r = 0; r < ne1 * ne2; r++)
                strata_quantize_row(type, f + r * ne0,
                                    (uint8_t *)data + r * strata_row_bytes(type, ne0), ne0);
        } else {
            random_blocks(b, type, n, data);
        }
        if (ft != STRATA_TYPE_F32 && s->ffn_deq) { /* the reference: those values as f32 */
            strata_dequantize_row(type, data, f, n);
            free(data);
            data = f;
            type = STRATA_TYPE_F32;
        } else {
            free(f);
        }
    }
    b->bufs[b->n_bufs++] = data;
    if (st_gguf_writer_add_tensor(b->w, name, type, nd, ne, data) != STRATA_OK) {
        b->ok = 0;
        fprintf(stderr, "add_tensor %s: %s\n", name, strata_last_error());
    }
}

static void set_u32(builder *b, const char *arch, const char *suffix, uint32_t v) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    st_gguf_writer_set_u32(b->w, key, v);
}
static void set_f32(builder *b, const char *arch, const char *suffix, float v) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    st_gguf_writer_set_f32(b->w, key, v);
}

/* Writes the file of spec s to path; 1 on success. */
static inline int write_model(const spec *s, const char *path) {
    builder b = {.s = s, .rng = {0x1234567ULL + (unsigned long long)s->n_embd}, .ok = 1};
    if (st_gguf_writer_create(path, 32, &b.w) != STRATA_OK) return 0;
    const char *A = s->arch;
    st_gguf_writer_set_str(b.w, "general.architecture", A);
    st_gguf_writer_set_str(b.w, "general.name", "synthetic");
    set_u32(&b, A, "context_length", 256);
    set_u32(&b, A, "embedding_length", (uint32_t)s->n_embd);
    set_u32(&b, A, "block_count", (uint32_t)s->n_layer);
    set_u32(&b, A, "attention.head_count", (uint32_t)s->n_head);
    if (s->kv_array) {
        uint32_t kv[16];
        for (int i = 0; i < s->n_layer; i++)
            kv[i] = (uint32_t)s->n_head_kv * (s->kv_array_uneven && i == 1 ? 2u : 1u);
        char key[160];
        snprintf(key, sizeof key, "%s.attention.head_count_kv", A);
        st_gguf_writer_set_array(b.w, key, STRATA_GGUF_UINT32, kv, (uint64_t)s->n_layer);
    } else {
        set_u32(&b, A, "attention.head_count_kv", (uint32_t)s->n_head_kv);
    }
    if (s->head_dim != s->n_embd / s->n_head) {
        set_u32(&b, A, "attention.key_length", (uint32_t)s->head_dim);
        set_u32(&b, A, "attention.value_length", (uint32_t)s->head_dim);
    }
    set_f32(&b, A, "attention.layer_norm_rms_epsilon", 1e-6f);
    set_f32(&b, A, "rope.freq_base", 500000.0f);
    if (s->yarn) {
        char key[160];
        snprintf(key, sizeof key, "%s.rope.scaling.type", A);
        st_gguf_writer_set_str(b.w, key, "yarn");
        set_f32(&b, A, "rope.scaling.factor", 4.0f);
        set_u32(&b, A, "rope.scaling.original_context_length", 64);
    }
    if (s->n_expert) {
        set_u32(&b, A, "expert_count", (uint32_t)s->n_expert);
        set_u32(&b, A, "expert_used_count", (uint32_t)s->n_used);
        if (s->write_exp_key) {
            set_u32(&b, A, "expert_feed_forward_length", (uint32_t)s->n_ff_exp);
            set_u32(&b, A, "feed_forward_length", 1000); /* dense width, unused */
        } else {
            set_u32(&b, A, "feed_forward_length", (uint32_t)s->n_ff_exp);
        }
        if (s->n_ff_shexp) set_u32(&b, A, "expert_shared_feed_forward_length",
                                   (uint32_t)s->n_ff_shexp);
    } else {
        set_u32(&b, A, "feed_forward_length", (uint32_t)s->n_ff);
    }
    if (s->granite) {
        set_f32(&b, A, "embedding_scale", 12.0f);
        set_f32(&b, A, "residual_scale", 0.22f);
        set_f32(&b, A, "attention.scale", 0.0078125f);
        set_f32(&b, A, "logit_scale", 8.0f);
    }
    if (s->ssm_interval) {
        set_u32(&b, A, "ssm.conv_kernel", (uint32_t)s->ssm_conv);
        set_u32(&b, A, "ssm.inner_size", (uint32_t)(s->ssm_nv * s->ssm_d));
        set_u32(&b, A, "ssm.state_size", (uint32_t)s->ssm_d);
        set_u32(&b, A, "ssm.time_step_rank", (uint32_t)s->ssm_nv);
        set_u32(&b, A, "ssm.group_count", (uint32_t)s->ssm_nk);
        set_u32(&b, A, "full_attention_interval", (uint32_t)s->ssm_interval);
    }
    if (s->n_rot) set_u32(&b, A, "rope.dimension_count", (uint32_t)s->n_rot);
    if (s->drop_key) st_gguf_writer_remove(b.w, s->drop_key);
    if (s->u32_key) st_gguf_writer_set_u32(b.w, s->u32_key, s->u32_val);
    if (s->str_key) st_gguf_writer_set_str(b.w, s->str_key, s->str_val);

    const int64_t E = s->n_embd, V = s->n_vocab, hd = s->head_dim;
    const int64_t nq = s->n_head * hd, nk = s->n_head_kv * hd;
    add_t(&b, "token_embd.weight", E, V, 1);
    add_t(&b, "output_norm.weight", E, 1, 1);
    if (!s->tied) add_t(&b, "output.weight", E, V, 1);
    char n[160];
    for (int il = 0; il < s->n_layer; il++) {
#define T(nm, a, c, d) do { snprintf(n, sizeof n, "blk.%d." nm, il); add_t(&b, n, a, c, d); } while (0)
        T("attn_norm.weight", E, 1, 1);
        if (s->ssm_interval && (il + 1) % s->ssm_interval != 0) { /* a gated DeltaNet layer */
            const int64_t dk = s->ssm_nk * s->ssm_d, di = s->ssm_nv * s->ssm_d;
            T("attn_qkv.weight", E, 2 * dk + di, 1);
            T("attn_gate.weight", E, di, 1);
            T("ssm_ba.weight", E, 2 * s->ssm_nv, 1);
            T("ssm_conv1d.weight", s->ssm_conv, 2 * dk + di, 1);
            T("ssm_dt.bias", s->ssm_nv, 1, 1);
            T("ssm_a", s->ssm_nv, 1, 1);
            T("ssm_norm.weight", s->ssm_d, 1, 1);
            T("ssm_out.weight", di, E, 1);
        } else {
            T("attn_q.weight", E, s->ssm_interval ? 2 * nq : nq, 1);
            T("attn_k.weight", E, nk, 1);
            T("attn_v.weight", E, nk, 1);
            T("attn_output.weight", nq, E, 1);
        }
        if (s->bias) {
            T("attn_q.bias", nq, 1, 1);
            T("attn_k.bias", nk, 1, 1);
            T("attn_v.bias", nk, 1, 1);
        }
        if (s->qk == 1) { T("attn_q_norm.weight", nq, 1, 1); T("attn_k_norm.weight", nk, 1, 1); }
        const int recurrent = s->ssm_interval && (il + 1) % s->ssm_interval != 0;
        if (s->qk == 2 && !recurrent) { T("attn_q_norm.weight", hd, 1, 1); T("attn_k_norm.weight", hd, 1, 1); }
        if (s->ssm_interval) T("post_attention_norm.weight", E, 1, 1);
        else T("ffn_norm.weight", E, 1, 1);
        if (!s->n_expert) {
            T("ffn_gate.weight", E, s->n_ff, 1);
            T("ffn_up.weight", E, s->n_ff, 1);
            T("ffn_down.weight", s->n_ff, E, 1);
        } else {
            const int64_t X = s->n_expert, F = s->n_ff_exp;
            T("ffn_gate_inp.weight", E, X, 1);
            if (s->split_experts == 1) {
                for (int e = 0; e < X; e++) { snprintf(n, sizeof n, "blk.%d.ffn_gate.%d.weight", il, e); add_t(&b, n, E, F, 1); }
                for (int e = 0; e < X; e++) { snprintf(n, sizeof n, "blk.%d.ffn_up.%d.weight", il, e); add_t(&b, n, E, F, 1); }
                for (int e = 0; e < X; e++) { snprintf(n, sizeof n, "blk.%d.ffn_down.%d.weight", il, e); add_t(&b, n, F, E, 1); }
            } else if (s->split_experts == 2) {
                for (int e = 0; e < X; e++) {
                    snprintf(n, sizeof n, "blk.%d.ffn_gate.%d.weight", il, e); add_t(&b, n, E, F, 1);
                    snprintf(n, sizeof n, "blk.%d.ffn_up.%d.weight", il, e); add_t(&b, n, E, F, 1);
                    snprintf(n, sizeof n, "blk.%d.ffn_down.%d.weight", il, e); add_t(&b, n, F, E, 1);
                }
            } else {
                T("ffn_gate_exps.weight", E, F, X);
                T("ffn_up_exps.weight", E, F, X);
                T("ffn_down_exps.weight", F, E, X);
            }
            if (s->n_ff_shexp) {
                if (s->shexp_gate) T("ffn_gate_inp_shexp.weight", E, 1, 1);
                T("ffn_gate_shexp.weight", E, s->n_ff_shexp, 1);
                T("ffn_up_shexp.weight", E, s->n_ff_shexp, 1);
                T("ffn_down_shexp.weight", s->n_ff_shexp, E, 1);
            }
        }
#undef T
    }
    if (s->extra_tensor) add_t(&b, s->extra_tensor, 4, 1, 1);
    strata_status st = b.ok ? st_gguf_writer_finish(b.w) : STRATA_ERR_INTERNAL;
    if (st != STRATA_OK) fprintf(stderr, "write_model(%s): %s\n", A, strata_last_error());
    st_gguf_writer_free(b.w);
    for (int i = 0; i < b.n_bufs; i++) free(b.bufs[i]);
    return st == STRATA_OK;
}

/* The base spec of each architecture, as its real checkpoints are shaped (scaled down). */
static inline spec base_spec(const char *arch) {
    spec s;
    memset(&s, 0, sizeof s);
    s.arch = arch;
    s.n_layer = 2; s.n_embd = 64; s.n_head = 4; s.n_head_kv = 2; s.head_dim = 16; s.n_vocab = 50;
    if (!strcmp(arch, "llama")) { s.n_ff = 96; }
    else if (!strcmp(arch, "qwen2")) { s.n_ff = 96; s.bias = 1; s.tied = 1; }
    else if (!strcmp(arch, "qwen3")) { s.n_ff = 96; s.qk = 2; s.head_dim = 32; s.tied = 1; }
    else if (!strcmp(arch, "olmoe")) { s.n_expert = 8; s.n_used = 2; s.n_ff_exp = 32; s.qk = 1; }
    else if (!strcmp(arch, "qwen2moe")) {
        s.n_expert = 8; s.n_used = 2; s.n_ff_exp = 32; s.write_exp_key = 1; s.bias = 1;
        s.n_ff_shexp = 48; s.shexp_gate = 1;
    } else if (!strcmp(arch, "qwen3moe")) {
        s.n_expert = 8; s.n_used = 2; s.n_ff_exp = 32; s.write_exp_key = 1; s.qk = 2;
        s.yarn = 1;
    } else if (!strcmp(arch, "granitemoe")) {
        s.n_expert = 8; s.n_used = 2; s.n_ff_exp = 32; s.granite = 1; s.tied = 1;
    } else if (!strcmp(arch, "qwen3next")) { /* 2 DeltaNet layers, 2 gated attention layers */
        s.n_layer = 4; s.n_expert = 8; s.n_used = 2; s.n_ff_exp = 32; s.write_exp_key = 1; s.qk = 2;
        s.n_ff_shexp = 64; s.shexp_gate = 1; s.head_dim = 64; s.n_rot = 16; /* GPU: widths % 32 */
        s.ssm_interval = 2; s.ssm_nk = 2; s.ssm_nv = 4; s.ssm_d = 32; s.ssm_conv = 4;
    } else if (!strcmp(arch, "mixtral")) { /* llama with experts */
        s.arch = "llama"; s.n_expert = 8; s.n_used = 2; s.n_ff_exp = 32;
    }
    return s;
}

/* ---- hand-assembled files: f32 tensors of a scale each; deepseek2's MLA layers ---------------- */

typedef struct {
    st_gguf_writer *w;
    test_rng rng;
    float *bufs[256]; /* the tensors' data in the order added, borrowed by the writer until finish */
    int n_bufs;
} f32_file;

/* Opens path for writing with the values drawn from seed; 1 on success. */
static inline int f32_file_create(f32_file *f, const char *path, unsigned long long seed) {
    memset(f, 0, sizeof *f);
    f->rng.s = seed;
    return st_gguf_writer_create(path, 32, &f->w) == STRATA_OK;
}

/* An f32 tensor of base + amp * U(-1, 1); 1 on success. */
static inline int f32_add(f32_file *f, const char *name, int64_t ne0, int64_t ne1, int64_t ne2, float amp,
                          float base) {
    const int64_t ne[3] = {ne0, ne1, ne2}, n = ne0 * ne1 * ne2;
    float *x = f->n_bufs < 256 ? malloc(sizeof(float) * (size_t)n) : NULL;
    if (!x) return 0;
    f->bufs[f->n_bufs++] = x;
    for (int64_t i = 0; i < n; i++) x[i] = base + amp * test_rng_float(&f->rng);
    const uint32_t nd = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
    const strata_status st = st_gguf_writer_add_tensor(f->w, name, STRATA_TYPE_F32, nd, ne, x);
    if (st != STRATA_OK) fprintf(stderr, "add %s: %s\n", name, strata_last_error());
    return st == STRATA_OK;
}

/* Writes the file where ok (what names it in the message of a failure), then frees the writer and
 * the data; 1 on success. */
static inline int f32_file_finish(f32_file *f, int ok, const char *what) {
    const strata_status st = ok ? st_gguf_writer_finish(f->w) : STRATA_ERR_INTERNAL;
    if (st != STRATA_OK) fprintf(stderr, "write %s: %s\n", what, strata_last_error());
    st_gguf_writer_free(f->w);
    f->w = NULL;
    for (int i = 0; i < f->n_bufs; i++) free(f->bufs[i]);
    f->n_bufs = 0;
    return st == STRATA_OK;
}

/* A deepseek2 layer as llama.cpp lays out latent attention: attn_q without a low rank, the cache
 * row kv_lora + n_rot wide (key_length; value_length kv_lora), the trained head widths in *_mla;
 * the first n_dense layers a dense FFN, the others routed experts with a selection bias and one
 * shared expert of the experts' width. */
typedef struct {
    int n_embd, n_head;
    int kv_lora, n_rot;   /* the latent rank, the roped width */
    int qk_nope, v_head;  /* a head's unroped q/k width and v width */
    int n_ff;             /* the dense FFN */
    int n_ff_exp, n_expert, n_dense;
} mla_spec;

/* The latent attention's keys: deepseek2.attention.* and rope.dimension_count. */
static inline void mla_write_attn_keys(st_gguf_writer *w, const mla_spec *s) {
    const struct { const char *k; int v; } kv[] = {
        {"attention.head_count", s->n_head},
        {"attention.head_count_kv", 1},
        {"attention.key_length", s->kv_lora + s->n_rot},
        {"attention.value_length", s->kv_lora},
        {"attention.key_length_mla", s->qk_nope + s->n_rot},
        {"attention.value_length_mla", s->v_head},
        {"attention.kv_lora_rank", s->kv_lora},
        {"rope.dimension_count", s->n_rot},
    };
    char key[128];
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        snprintf(key, sizeof key, "deepseek2.%s", kv[i].k);
        st_gguf_writer_set_u32(w, key, (uint32_t)kv[i].v);
    }
}

/* tensor blk.<il>.nm (the caller's char n[128], f32_file *f, int il) */
#define MLA_T(nm, a, b, c, amp, base) \
    (snprintf(n, sizeof n, "blk.%d." nm, il), f32_add(f, n, a, b, c, amp, base))

/* Layer il's attention: attn_norm, the latent projections, attn_output, then ffn_norm. */
static inline int mla_add_attention(f32_file *f, const mla_spec *s, int il) {
    const int64_t e = s->n_embd, h = s->n_head, r = s->kv_lora, nr = s->n_rot;
    char n[128];
    return MLA_T("attn_norm.weight", e, 1, 1, 0.1f, 1.0f) &&
           MLA_T("attn_q.weight", e, h * (s->qk_nope + nr), 1, 0.2f, 0.0f) &&
           MLA_T("attn_kv_a_mqa.weight", e, r + nr, 1, 0.2f, 0.0f) &&
           MLA_T("attn_kv_a_norm.weight", r, 1, 1, 0.1f, 1.0f) &&
           MLA_T("attn_k_b.weight", s->qk_nope, r, h, 0.2f, 0.0f) &&
           MLA_T("attn_v_b.weight", r, s->v_head, h, 0.2f, 0.0f) &&
           MLA_T("attn_output.weight", h * s->v_head, e, 1, 0.2f, 0.0f) &&
           MLA_T("ffn_norm.weight", e, 1, 1, 0.1f, 1.0f);
}

/* Layer il's FFN: the dense one below n_dense, else the router, its selection bias (exp_probs_b),
 * the routed experts and the shared expert (glm4moe's layers have the same). */
static inline int mla_add_ffn(f32_file *f, const mla_spec *s, int il) {
    const int64_t e = s->n_embd, fe = s->n_ff_exp, x = s->n_expert;
    char n[128];
    if (il < s->n_dense)
        return MLA_T("ffn_gate.weight", e, s->n_ff, 1, 0.2f, 0.0f) &&
               MLA_T("ffn_up.weight", e, s->n_ff, 1, 0.2f, 0.0f) &&
               MLA_T("ffn_down.weight", s->n_ff, e, 1, 0.2f, 0.0f);
    return MLA_T("ffn_gate_inp.weight", e, x, 1, 0.5f, 0.0f) && MLA_T("exp_probs_b.bias", x, 1, 1, 0.05f, 0.0f) &&
           MLA_T("ffn_gate_exps.weight", e, fe, x, 0.2f, 0.0f) && MLA_T("ffn_up_exps.weight", e, fe, x, 0.2f, 0.0f) &&
           MLA_T("ffn_down_exps.weight", fe, e, x, 0.2f, 0.0f) &&
           MLA_T("ffn_gate_shexp.weight", e, fe, 1, 0.2f, 0.0f) && MLA_T("ffn_up_shexp.weight", e, fe, 1, 0.2f, 0.0f) &&
           MLA_T("ffn_down_shexp.weight", fe, e, 1, 0.2f, 0.0f);
}

#undef MLA_T

/* Layer il whole: attention, then FFN. */
static inline int mla_add_layer(f32_file *f, const mla_spec *s, int il) {
    return mla_add_attention(f, s, il) && mla_add_ffn(f, s, il);
}

#endif /* STRATA_TEST_MODEL_BUILD_H */
