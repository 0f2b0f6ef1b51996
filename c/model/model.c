/* model.c - the model loader: strata_model_load opens a GGUF file, finds the architecture's traits
 * (arch.c), reads the hyperparameters (hparams.c), loads the vocabulary (vocab*.c) and binds every
 * weight as a zero-copy st_tensor view into the file mapping, checking each tensor's shape against
 * the hyperparameters and its type against what the compute kernels take. Tensor names are
 * llama.cpp's (token_embd, output_norm, output, blk.N.attn_q, blk.N.ffn_gate_exps, ...). A tensor
 * the architecture does not use is an error, as in llama.cpp: computing without it would be wrong.
 * Also strata_model_free / get_info / gguf. */
#include "hparams.h"
#include "model.h"
#include "vocab.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ==== parameters ============================================================================= */

strata_model_params strata_model_default_params(void) {
    strata_model_params p;
    memset(&p, 0, sizeof p);
    p.use_mmap = 1;
    p.vocab_only = 0;
    p.n_threads = 0;
    return p;
}

/* ==== tensor binding ========================================================================= */

typedef enum {
    ST_KIND_MATMUL, /* a weight used in dot products: any strata_type_can_dot type */
    ST_KIND_NORM,   /* norm weights and biases: f32 */
    ST_KIND_EMBD    /* the token embedding: rows are looked up (dequantized) and, when the
                     * output is tied, used in dot products */
} st_kind;

typedef struct {
    const strata_gguf *g;
    const char *arch;     /* for messages */
    uint8_t *used;        /* [n_tensors]: bound by some field */
    int64_t n_tensors;
    char name[160];       /* scratch */
} st_binder;

static void st_shape_str(char *buf, size_t cap, const int64_t *ne, int n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "(");
    for (int d = 0; d < n && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, d ? ", " : "", ne[d]);
    if (o < cap) snprintf(buf + o, cap - o, ")");
}

/* Dimensions worth printing: trailing 1s dropped (at least one kept). */
static int st_shape_rank(const int64_t *ne, int n) {
    while (n > 1 && ne[n - 1] == 1) n--;
    return n;
}

static strata_status st_check_type(const char *name, strata_type type, st_kind kind) {
    switch (kind) {
    case ST_KIND_NORM:
        if (type != STRATA_TYPE_F32)
            return st_error(STRATA_ERR_UNSUPPORTED, "tensor '%s': type %s, expected f32", name,
                            strata_type_name(type));
        break;
    case ST_KIND_EMBD:
        if (!strata_type_can_dot(type) || !strata_type_can_dequantize(type))
            return st_error(STRATA_ERR_UNSUPPORTED,
                            "tensor '%s': type %s is not supported for embeddings", name,
                            strata_type_name(type));
        break;
    case ST_KIND_MATMUL:
        if (!strata_type_can_dot(type))
            return st_error(STRATA_ERR_UNSUPPORTED,
                            "tensor '%s': type %s has no dot product (unsupported weight type)",
                            name, strata_type_name(type));
        break;
    }
    return STRATA_OK;
}

/* Fills *t from tensor index i after checking shape (ne0, ne1, ne2) and type. */
static strata_status st_bind_index(st_binder *b, st_tensor *t, int64_t i, st_kind kind,
                                   int64_t ne0, int64_t ne1, int64_t ne2) {
    strata_tensor_info ti;
    ST_TRY(strata_gguf_tensor_info(b->g, i, &ti));
    const int64_t want[4] = {ne0, ne1, ne2, 1};
    if (ti.ne[0] != want[0] || ti.ne[1] != want[1] || ti.ne[2] != want[2] || ti.ne[3] != 1) {
        char got[96], exp[96];
        st_shape_str(got, sizeof got, ti.ne, st_shape_rank(ti.ne, (int)ti.n_dims));
        st_shape_str(exp, sizeof exp, want, st_shape_rank(want, 3));
        return st_error(STRATA_ERR_FORMAT, "tensor '%s': shape %s, expected %s", ti.name, got,
                        exp);
    }
    ST_TRY(st_check_type(ti.name, ti.type, kind));
    int64_t rb = strata_row_bytes(ti.type, ti.ne[0]);
    if (rb <= 0 || (uint64_t)rb * (uint64_t)ne1 * (uint64_t)ne2 != ti.n_bytes)
        return st_error(STRATA_ERR_FORMAT, "tensor '%s': %" PRIu64 " bytes do not match its "
                        "shape and type %s", ti.name, ti.n_bytes, strata_type_name(ti.type));
    t->type = ti.type;
    t->data = (const uint8_t *)ti.data;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->row_bytes = (size_t)rb;
    t->name = ti.name; /* owned by the strata_gguf, lives as long as the model */
    b->used[i] = 1;
    return STRATA_OK;
}

/* Binds tensor `name`; an absent optional tensor leaves *t zeroed (data NULL). */
static strata_status st_bind(st_binder *b, st_tensor *t, const char *name, int required,
                             st_kind kind, int64_t ne0, int64_t ne1, int64_t ne2) {
    memset(t, 0, sizeof *t);
    int64_t i = strata_gguf_tensor_find(b->g, name);
    if (i < 0) {
        if (required)
            return st_error(STRATA_ERR_NOT_FOUND, "missing tensor '%s' (required by '%s')", name,
                            b->arch);
        return STRATA_OK;
    }
    return st_bind_index(b, t, i, kind, ne0, ne1, ne2);
}

/* Binds blk.<il>.<what>.<suffix>. */
static strata_status st_bind_layer(st_binder *b, st_tensor *t, int il, const char *what,
                                   const char *suffix, int required, st_kind kind, int64_t ne0,
                                   int64_t ne1, int64_t ne2) {
    snprintf(b->name, sizeof b->name, "blk.%d.%s.%s", il, what, suffix);
    char name[sizeof b->name];
    memcpy(name, b->name, sizeof name);
    return st_bind(b, t, name, required, kind, ne0, ne1, ne2);
}

/* Merged expert tensor blk.N.<merged>.weight (ne0, ne1, n_expert). Files from older Mixtral
 * converters hold one tensor per expert (blk.N.<split>.E.weight); those are accepted when the
 * experts lie back to back in the mapping with one type, so the merged view is still zero-copy. */
static strata_status st_bind_experts(st_binder *b, st_tensor *t, int il, const char *merged,
                                     const char *split, int64_t ne0, int64_t ne1,
                                     int64_t n_expert) {
    char name[160];
    snprintf(name, sizeof name, "blk.%d.%s.weight", il, merged);
    memset(t, 0, sizeof *t);
    if (strata_gguf_tensor_find(b->g, name) >= 0 || !split)
        return st_bind(b, t, name, 1, ST_KIND_MATMUL, ne0, ne1, n_expert);

    char ename[160];
    snprintf(ename, sizeof ename, "blk.%d.%s.0.weight", il, split);
    if (strata_gguf_tensor_find(b->g, ename) < 0)
        return st_error(STRATA_ERR_NOT_FOUND, "missing tensor '%s' (required by '%s')", name,
                        b->arch);
    st_tensor first = {0};
    for (int64_t e = 0; e < n_expert; e++) {
        snprintf(ename, sizeof ename, "blk.%d.%s.%" PRId64 ".weight", il, split, e);
        int64_t i = strata_gguf_tensor_find(b->g, ename);
        if (i < 0)
            return st_error(STRATA_ERR_NOT_FOUND,
                            "missing tensor '%s' (per-expert layout of '%s')", ename, name);
        st_tensor x;
        ST_TRY(st_bind_index(b, &x, i, ST_KIND_MATMUL, ne0, ne1, 1));
        if (e == 0) {
            first = x;
        } else if (x.type != first.type ||
                   x.data != first.data + (size_t)e * (size_t)ne1 * first.row_bytes) {
            return st_error(STRATA_ERR_UNSUPPORTED,
                            "tensor '%s': per-expert tensors that are not stored back to back "
                            "with one type are not supported; convert the model with experts "
                            "merged into '%s'", ename, name);
        }
    }
    *t = first;
    t->ne[2] = n_expert;
    return STRATA_OK;
}

/* ==== layers ================================================================================= */

/* The FFN half of layer il: its norm, then a dense FFN (dense models, deepseek2's leading dense
 * layers) or the router, the routed experts, the expert selection bias and the shared expert. */
static strata_status st_bind_ffn(st_binder *b, st_layer *L, const st_hparams *hp, const st_arch *a,
                                 int il) {
    const int64_t E = hp->n_embd;
    const char *W = "weight";
    /* glm4moe's and gpt-oss's FFN norm carries llama.cpp's ATTN_POST_NORM name (HF's
     * post_attention_layernorm) */
    const char *norm = a->id == ST_ARCH_GLM4MOE || a->id == ST_ARCH_GPTOSS || a->id == ST_ARCH_QWEN3NEXT
                           ? "post_attention_norm" : "ffn_norm";
    ST_TRY(st_bind_layer(b, &L->ffn_norm, il, norm, W, 1, ST_KIND_NORM, E, 1, 1));
    if (hp->n_expert == 0 || il < hp->n_layer_dense_lead) { /* dense FFN */
        const int64_t F = hp->n_ff;
        ST_TRY(st_bind_layer(b, &L->ffn_gate, il, "ffn_gate", W, 1, ST_KIND_MATMUL, E, F, 1));
        ST_TRY(st_bind_layer(b, &L->ffn_up, il, "ffn_up", W, 1, ST_KIND_MATMUL, E, F, 1));
        ST_TRY(st_bind_layer(b, &L->ffn_down, il, "ffn_down", W, 1, ST_KIND_MATMUL, F, E, 1));
        return STRATA_OK;
    }
    /* routed experts */
    const int64_t X = hp->n_expert, F = hp->n_ff_exp;
    const int split_ok = a->id == ST_ARCH_LLAMA; /* old Mixtral files */
    ST_TRY(st_bind_layer(b, &L->ffn_gate_inp, il, "ffn_gate_inp", W, 1, ST_KIND_MATMUL, E, X, 1));
    ST_TRY(st_bind_experts(b, &L->ffn_gate_exps, il, "ffn_gate_exps", split_ok ? "ffn_gate" : NULL,
                           E, F, X));
    ST_TRY(st_bind_experts(b, &L->ffn_up_exps, il, "ffn_up_exps", split_ok ? "ffn_up" : NULL, E, F,
                           X));
    ST_TRY(st_bind_experts(b, &L->ffn_down_exps, il, "ffn_down_exps",
                           split_ok ? "ffn_down" : NULL, F, E, X));
    if (a->id == ST_ARCH_GPTOSS) { /* the router's and the experts' biases */
        ST_TRY(st_bind_layer(b, &L->ffn_gate_inp_b, il, "ffn_gate_inp", "bias", 1, ST_KIND_NORM, X, 1, 1));
        ST_TRY(st_bind_layer(b, &L->ffn_gate_exps_b, il, "ffn_gate_exps", "bias", 1, ST_KIND_NORM, F, X, 1));
        ST_TRY(st_bind_layer(b, &L->ffn_up_exps_b, il, "ffn_up_exps", "bias", 1, ST_KIND_NORM, F, X, 1));
        ST_TRY(st_bind_layer(b, &L->ffn_down_exps_b, il, "ffn_down_exps", "bias", 1, ST_KIND_NORM, E, X, 1));
    }
    if (a->scored) /* DeepSeek-V3's and GLM's selection bias (absent in V2 files) */
        ST_TRY(st_bind_layer(b, &L->exp_probs_b, il, "exp_probs_b", "bias", 0, ST_KIND_NORM, X, 1, 1));
    /* shared expert */
    if (hp->n_ff_shexp > 0) {
        const int64_t S = hp->n_ff_shexp;
        if (a->shexp_gated) /* (n_embd) or (n_embd, 1) as converters write it */
            ST_TRY(st_bind_layer(b, &L->ffn_gate_inp_shexp, il, "ffn_gate_inp_shexp", W, 1,
                                 ST_KIND_MATMUL, E, 1, 1));
        ST_TRY(st_bind_layer(b, &L->ffn_gate_shexp, il, "ffn_gate_shexp", W, 1, ST_KIND_MATMUL, E, S, 1));
        ST_TRY(st_bind_layer(b, &L->ffn_up_shexp, il, "ffn_up_shexp", W, 1, ST_KIND_MATMUL, E, S, 1));
        ST_TRY(st_bind_layer(b, &L->ffn_down_shexp, il, "ffn_down_shexp", W, 1, ST_KIND_MATMUL, S, E, 1));
    }
    return STRATA_OK;
}

static strata_status st_bind_layer_all(st_binder *b, strata_model *m, int il);

/* The MTP layers after the trunk (llama.cpp's names: blk.N.nextn.*, then a whole layer of the
 * architecture's own; deepseek2, glm4moe, and qwen3next's gated full attention). A file that declares them without their tensors (converters that drop
 * them) loads as the trunk alone. */
static strata_status st_bind_mtp(st_binder *b, strata_model *m) {
    const st_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    char probe[64];
    snprintf(probe, sizeof probe, "blk.%d.nextn.eh_proj.weight", (int)hp->n_layer);
    if (hp->n_nextn == 0 || strata_gguf_tensor_find(b->g, probe) < 0) return STRATA_OK;
    for (int il = hp->n_layer; il < hp->n_layer + hp->n_nextn; il++) {
        st_layer *L = &m->layers[il];
        ST_TRY(st_bind_layer_all(b, m, il));
        ST_TRY(st_bind_layer(b, &L->nextn_eh_proj, il, "nextn.eh_proj", "weight", 1, ST_KIND_MATMUL,
                             2 * E, E, 1));
        ST_TRY(st_bind_layer(b, &L->nextn_enorm, il, "nextn.enorm", "weight", 1, ST_KIND_NORM, E, 1, 1));
        ST_TRY(st_bind_layer(b, &L->nextn_hnorm, il, "nextn.hnorm", "weight", 1, ST_KIND_NORM, E, 1, 1));
        ST_TRY(st_bind_layer(b, &L->nextn_embed, il, "nextn.embed_tokens", "weight", 0, ST_KIND_EMBD,
                             E, V, 1));
        ST_TRY(st_bind_layer(b, &L->nextn_head, il, "nextn.shared_head_head", "weight", 0,
                             ST_KIND_MATMUL, E, V, 1));
        ST_TRY(st_bind_layer(b, &L->nextn_head_norm, il, "nextn.shared_head_norm", "weight", 0,
                             ST_KIND_NORM, E, 1, 1));
    }
    m->n_mtp = hp->n_nextn;
    return STRATA_OK;
}

/* A file from before llama.cpp's MLA split holds per layer one attn_kv_b (kv_lora, n_head *
 * (qk_nope + v_head)): each head's qk_nope key rows, then its v_head value rows. The absorbed
 * form wants them as a new-style conversion writes them: wk_b per head transposed, (qk_nope,
 * kv_lora), and wv_b per head as is, (kv_lora, v_head). wv_b's rows are copied in kv_b's type;
 * wk_b is an element transpose: f32 / f16 / bf16 elements move as they are, block types are
 * dequantized to f32 first (a block cannot be cut by columns). Both live in L->mla_split. */
static strata_status st_split_kv_b(st_layer *L, const st_tensor *kv, int64_t H, int64_t R,
                                   int64_t nope, int64_t hv) {
    const strata_type kt = kv->type == STRATA_TYPE_F32 || kv->type == STRATA_TYPE_F16 ||
                           kv->type == STRATA_TYPE_BF16 ? kv->type : STRATA_TYPE_F32;
    if (kt != kv->type && !strata_type_can_dequantize(kv->type))
        return st_error(STRATA_ERR_UNSUPPORTED, "tensor '%s': type %s cannot be split into "
                        "attn_k_b / attn_v_b (no dequantization)", kv->name,
                        strata_type_name(kv->type));
    const size_t es = kt == STRATA_TYPE_F32 ? 4 : 2;
    const size_t kb_row = (size_t)nope * es, kb_bytes = (size_t)(H * R) * kb_row;
    const size_t vb_off = (kb_bytes + 63) & ~(size_t)63, vb_bytes = (size_t)(H * hv) * kv->row_bytes;
    uint8_t *buf = NULL;
    float *tmp = kt != kv->type ? malloc((size_t)(nope * R) * sizeof *tmp) : NULL;
    if (posix_memalign((void **)&buf, 64, vb_off + vb_bytes) != 0 || (kt != kv->type && !tmp)) {
        free(buf);
        free(tmp);
        return st_error(STRATA_ERR_NOMEM, "out of memory splitting tensor '%s'", kv->name);
    }
    for (int64_t h = 0; h < H; h++) {
        const int64_t r0 = h * (nope + hv); /* the head's first key row in kv_b */
        uint8_t *kb = buf + (size_t)(h * R) * kb_row;
        if (tmp) { /* rows of the head's keys in f32, then transposed */
            for (int64_t c = 0; c < nope; c++)
                (void)strata_dequantize_row(kv->type, st_tensor_row(kv, 0, r0 + c), tmp + c * R, R);
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < nope; c++)
                    memcpy(kb + (size_t)(r * nope + c) * es, &tmp[c * R + r], es);
        } else {
            for (int64_t c = 0; c < nope; c++) {
                const uint8_t *src = st_tensor_row(kv, 0, r0 + c);
                for (int64_t r = 0; r < R; r++)
                    memcpy(kb + (size_t)(r * nope + c) * es, src + (size_t)r * es, es);
            }
        }
        memcpy(buf + vb_off + (size_t)(h * hv) * kv->row_bytes, st_tensor_row(kv, 0, r0 + nope),
               (size_t)hv * kv->row_bytes);
    }
    free(tmp);
    L->mla_split = buf;
    L->wk_b = (st_tensor){.type = kt, .data = buf, .ne = {nope, R, H}, .row_bytes = kb_row,
                          .name = kv->name};
    L->wv_b = (st_tensor){.type = kv->type, .data = buf + vb_off, .ne = {R, hv, H},
                          .row_bytes = kv->row_bytes, .name = kv->name};
    return STRATA_OK;
}

/* deepseek2's latent attention of layer il (llama.cpp's tensor names and shapes): q through a
 * low-rank pair with a norm between (or one attn_q), the shared latent and key rope part, the
 * per-head absorption matrices and the output projection. */
static strata_status st_bind_mla(st_binder *b, st_layer *L, const st_hparams *hp, int il) {
    const int64_t E = hp->n_embd, H = hp->n_head, R = hp->n_lora_kv, Q = hp->n_lora_q;
    const int64_t hk = hp->head_dim_mla, hv = hp->head_dim_v_mla, nope = hk - hp->n_rot;
    const char *W = "weight";
    if (Q > 0) {
        ST_TRY(st_bind_layer(b, &L->wq_a, il, "attn_q_a", W, 1, ST_KIND_MATMUL, E, Q, 1));
        ST_TRY(st_bind_layer(b, &L->q_a_norm, il, "attn_q_a_norm", W, 1, ST_KIND_NORM, Q, 1, 1));
        ST_TRY(st_bind_layer(b, &L->wq_b, il, "attn_q_b", W, 1, ST_KIND_MATMUL, Q, H * hk, 1));
    } else {
        ST_TRY(st_bind_layer(b, &L->wq, il, "attn_q", W, 1, ST_KIND_MATMUL, E, H * hk, 1));
    }
    ST_TRY(st_bind_layer(b, &L->wkv_a, il, "attn_kv_a_mqa", W, 1, ST_KIND_MATMUL, E, R + hp->n_rot, 1));
    ST_TRY(st_bind_layer(b, &L->kv_a_norm, il, "attn_kv_a_norm", W, 1, ST_KIND_NORM, R, 1, 1));
    if (hp->mla_kv_b) { /* the layout before the split */
        st_tensor kv;
        ST_TRY(st_bind_layer(b, &kv, il, "attn_kv_b", W, 1, ST_KIND_MATMUL, R, H * (nope + hv), 1));
        ST_TRY(st_split_kv_b(L, &kv, H, R, nope, hv));
    } else {
        ST_TRY(st_bind_layer(b, &L->wk_b, il, "attn_k_b", W, 1, ST_KIND_MATMUL, nope, R, H));
        ST_TRY(st_bind_layer(b, &L->wv_b, il, "attn_v_b", W, 1, ST_KIND_MATMUL, R, hv, H));
    }
    ST_TRY(st_bind_layer(b, &L->wo, il, "attn_output", W, 1, ST_KIND_MATMUL, H * hv, E, 1));
    return STRATA_OK;
}

/* The attention of layer il (every architecture but deepseek2's latent one): q/k/v/output,
 * their biases (required for qwen2 / qwen2moe, else where present) and the q/k norms (glm4moe's
 * only where the file has them). */
static strata_status st_bind_attn(st_binder *b, st_layer *L, const st_hparams *hp, const st_arch *a, int il) {
    const int64_t E = hp->n_embd, hd = hp->head_dim, hdv = hp->head_dim_v;
    const int64_t nq = (int64_t)hp->n_head * hd, nk = (int64_t)hp->n_head_kv * hd;
    const int64_t nv = (int64_t)hp->n_head_kv * hdv, no = (int64_t)hp->n_head * hdv;
    const int bias_req = a->id == ST_ARCH_QWEN2 || a->id == ST_ARCH_QWEN2MOE || a->id == ST_ARCH_GPTOSS;
    const int norm_req = a->id != ST_ARCH_GLM4MOE;
    const char *W = "weight", *B = "bias";
    const int64_t nq_rows = a->id == ST_ARCH_QWEN3NEXT ? 2 * nq : nq; /* + each head's output gate */
    ST_TRY(st_bind_layer(b, &L->wq, il, "attn_q", W, 1, ST_KIND_MATMUL, E, nq_rows, 1));
    ST_TRY(st_bind_layer(b, &L->wk, il, "attn_k", W, 1, ST_KIND_MATMUL, E, nk, 1));
    ST_TRY(st_bind_layer(b, &L->wv, il, "attn_v", W, 1, ST_KIND_MATMUL, E, nv, 1));
    ST_TRY(st_bind_layer(b, &L->wo, il, "attn_output", W, 1, ST_KIND_MATMUL, no, E, 1));
    ST_TRY(st_bind_layer(b, &L->bq, il, "attn_q", B, bias_req, ST_KIND_NORM, nq, 1, 1));
    ST_TRY(st_bind_layer(b, &L->bk, il, "attn_k", B, bias_req, ST_KIND_NORM, nk, 1, 1));
    ST_TRY(st_bind_layer(b, &L->bv, il, "attn_v", B, bias_req, ST_KIND_NORM, nv, 1, 1));
    ST_TRY(st_bind_layer(b, &L->bo, il, "attn_output", B, a->id == ST_ARCH_GPTOSS, ST_KIND_NORM, E, 1, 1));
    if (a->id == ST_ARCH_GPTOSS)
        ST_TRY(st_bind_layer(b, &L->attn_sinks, il, "attn_sinks", W, 1, ST_KIND_NORM, hp->n_head, 1, 1));
    if (a->qk_norm == ST_QKNORM_FULL) {
        ST_TRY(st_bind_layer(b, &L->q_norm, il, "attn_q_norm", W, 1, ST_KIND_NORM, nq, 1, 1));
        ST_TRY(st_bind_layer(b, &L->k_norm, il, "attn_k_norm", W, 1, ST_KIND_NORM, nk, 1, 1));
    } else if (a->qk_norm == ST_QKNORM_HEAD) {
        ST_TRY(st_bind_layer(b, &L->q_norm, il, "attn_q_norm", W, norm_req, ST_KIND_NORM, hd, 1, 1));
        ST_TRY(st_bind_layer(b, &L->k_norm, il, "attn_k_norm", W, norm_req, ST_KIND_NORM, hd, 1, 1));
        if (!L->q_norm.data != !L->k_norm.data)
            return st_error(STRATA_ERR_FORMAT, "layer %d: attn_q_norm and attn_k_norm come together", il);
    }
    return STRATA_OK;
}

/* A qwen3next gated DeltaNet layer's token mixer (llama.cpp's attn_qkv / attn_gate form; the
 * legacy fused ssm_in is refused). */
static strata_status st_bind_ssm(st_binder *b, st_layer *L, const st_hparams *hp, int il) {
    const int64_t E = hp->n_embd, nv = hp->ssm_dt_rank, di = hp->ssm_d_inner;
    const int64_t conv = 2 * (int64_t)hp->ssm_n_group * hp->ssm_d_state + di;
    const char *W = "weight";
    snprintf(b->name, sizeof b->name, "blk.%d.ssm_in.weight", il);
    if (strata_gguf_tensor_find(b->g, b->name) >= 0)
        return st_error(STRATA_ERR_UNSUPPORTED, "tensor '%s': the legacy fused q/k/v/z projection "
                        "is not supported; convert the model again (attn_qkv + attn_gate)", b->name);
    ST_TRY(st_bind_layer(b, &L->ssm_qkv, il, "attn_qkv", W, 1, ST_KIND_MATMUL, E, conv, 1));
    ST_TRY(st_bind_layer(b, &L->ssm_gate, il, "attn_gate", W, 1, ST_KIND_MATMUL, E, di, 1));
    ST_TRY(st_bind_layer(b, &L->ssm_ba, il, "ssm_ba", W, 1, ST_KIND_MATMUL, E, 2 * nv, 1));
    ST_TRY(st_bind_layer(b, &L->ssm_conv1d, il, "ssm_conv1d", W, 1, ST_KIND_NORM, hp->ssm_d_conv, conv, 1));
    ST_TRY(st_bind_layer(b, &L->ssm_dt, il, "ssm_dt", "bias", 1, ST_KIND_NORM, nv, 1, 1));
    char name[64];
    snprintf(name, sizeof name, "blk.%d.ssm_a", il);
    ST_TRY(st_bind(b, &L->ssm_a, name, 1, ST_KIND_NORM, nv, 1, 1));
    ST_TRY(st_bind_layer(b, &L->ssm_norm, il, "ssm_norm", W, 1, ST_KIND_NORM, hp->ssm_d_state, 1, 1));
    ST_TRY(st_bind_layer(b, &L->ssm_out, il, "ssm_out", W, 1, ST_KIND_MATMUL, di, E, 1));
    return STRATA_OK;
}

/* One layer: its attention norm, attention (latent, recurrent or plain) and FFN. */
static strata_status st_bind_layer_all(st_binder *b, strata_model *m, int il) {
    st_layer *L = &m->layers[il];
    ST_TRY(st_bind_layer(b, &L->attn_norm, il, "attn_norm", "weight", 1, ST_KIND_NORM, m->hp.n_embd, 1, 1));
    if (m->arch->mla) ST_TRY(st_bind_mla(b, L, &m->hp, il));
    else if (st_layer_recurrent(&m->hp, il)) ST_TRY(st_bind_ssm(b, L, &m->hp, il));
    else ST_TRY(st_bind_attn(b, L, &m->hp, m->arch, il));
    return st_bind_ffn(b, L, &m->hp, m->arch, il);
}

static strata_status st_bind_layers(st_binder *b, strata_model *m) {
    for (int il = 0; il < m->hp.n_layer; il++) ST_TRY(st_bind_layer_all(b, m, il));
    return st_bind_mtp(b, m);
}

/* ==== loading ================================================================================ */

/* NUL-terminated heap copy of a string key ("" when absent). */
static strata_status st_dup_key(const strata_gguf *g, const char *key, char **out) {
    const char *p = "";
    uint64_t n = 0;
    if (strata_gguf_kv_find(g, key) >= 0) {
        strata_status st = strata_gguf_get_str(g, key, &p, &n);
        if (st != STRATA_OK) return st_error(st, "key '%s': expected a string", key);
    }
    char *s = malloc((size_t)n + 1);
    if (!s) return st_error(STRATA_ERR_NOMEM, "out of memory copying key '%s'", key);
    memcpy(s, p, (size_t)n);
    s[n] = 0;
    *out = s;
    return STRATA_OK;
}

static int st_online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Token count: the vocabulary's, else <arch>.vocab_size, else the embedding's rows. */
static strata_status st_resolve_vocab_size(strata_model *m, const char *arch) {
    if (m->vocab) {
        m->hp.n_vocab = st_vocab_n_tokens(m->vocab);
        return STRATA_OK;
    }
    char key[160];
    snprintf(key, sizeof key, "%s.vocab_size", arch);
    if (strata_gguf_kv_find(m->gguf, key) >= 0) {
        uint64_t v;
        strata_status st = strata_gguf_get_u64(m->gguf, key, &v);
        if (st != STRATA_OK) return st_error(st, "key '%s': expected an unsigned integer", key);
        if (v == 0 || v > INT32_MAX) return st_error(STRATA_ERR_FORMAT, "key '%s': bad value", key);
        m->hp.n_vocab = (int32_t)v;
        return STRATA_OK;
    }
    int64_t i = strata_gguf_tensor_find(m->gguf, "token_embd.weight");
    if (i < 0)
        return st_error(STRATA_ERR_NOT_FOUND, "missing tensor 'token_embd.weight' (required by "
                        "'%s')", arch);
    strata_tensor_info ti;
    ST_TRY(strata_gguf_tensor_info(m->gguf, i, &ti));
    if (ti.ne[1] <= 0 || ti.ne[1] > INT32_MAX)
        return st_error(STRATA_ERR_FORMAT, "tensor 'token_embd.weight': bad row count");
    m->hp.n_vocab = (int32_t)ti.ne[1];
    return STRATA_OK;
}

static strata_status st_load_weights(strata_model *m, const char *arch) {
    const st_hparams *hp = &m->hp;
    st_binder b = {.g = m->gguf, .arch = arch};
    b.n_tensors = strata_gguf_tensor_count(m->gguf);
    b.used = calloc((size_t)(b.n_tensors > 0 ? b.n_tensors : 1), 1);
    m->layers = calloc((size_t)(hp->n_layer + hp->n_nextn), sizeof *m->layers);
    if (!b.used || !m->layers) {
        free(b.used);
        return st_error(STRATA_ERR_NOMEM, "out of memory for %d layers", (int)hp->n_layer);
    }
    strata_status st = STRATA_OK;
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    if (!st) st = st_bind(&b, &m->tok_embd, "token_embd.weight", 1, ST_KIND_EMBD, E, V, 1);
    if (!st) st = st_bind(&b, &m->output_norm, "output_norm.weight", 1, ST_KIND_NORM, E, 1, 1);
    if (!st) st = st_bind(&b, &m->output, "output.weight", 0, ST_KIND_MATMUL, E, V, 1);
    if (!st && !m->output.data) m->output = m->tok_embd; /* tied embeddings */
    if (!st) st = st_bind_layers(&b, m);

    /* Every tensor must have a place: one we do not know would be silently ignored. */
    for (int64_t i = 0; !st && i < b.n_tensors; i++) {
        if (b.used[i]) continue;
        strata_tensor_info ti;
        st = strata_gguf_tensor_info(m->gguf, i, &ti);
        if (!st)
            st = st_error(STRATA_ERR_UNSUPPORTED,
                          "tensor '%s' is not used by architecture '%s' (with these "
                          "hyperparameters); refusing to run without it", ti.name, arch);
    }
    free(b.used);
    return st;
}

static strata_status st_fill_info(strata_model *m) {
    strata_model_info *in = &m->info;
    const st_hparams *hp = &m->hp;
    int64_t n_params = 0;
    uint64_t n_bytes = 0;
    int64_t nt = strata_gguf_tensor_count(m->gguf);
    for (int64_t i = 0; i < nt; i++) {
        strata_tensor_info ti;
        ST_TRY(strata_gguf_tensor_info(m->gguf, i, &ti));
        n_params += ti.n_elements;
        n_bytes += ti.n_bytes;
    }
    in->vocab_only = m->vocab_only;
    in->n_vocab = hp->n_vocab;
    in->n_params = n_params;
    in->n_bytes = n_bytes;
    if (m->vocab_only) return STRATA_OK;

    in->n_ctx_train = hp->n_ctx_train;
    in->n_embd = hp->n_embd;
    in->n_layer = hp->n_layer;
    in->n_head = hp->n_head;
    in->n_head_kv = hp->n_head_kv;
    in->head_dim = hp->head_dim;
    in->n_ff = hp->n_ff;
    in->n_expert = hp->n_expert;
    in->n_expert_used = hp->n_expert_used;
    in->n_ff_exp = hp->n_ff_exp;
    in->n_ff_shexp = hp->n_ff_shexp;

    /* Active: every weight a token's forward pass reads. The embedding table contributes one row
     * (unless it is also the tied output); routed experts count top-k of n_expert. */
    int64_t active = n_params;
    if (m->output.data != m->tok_embd.data) active -= (hp->n_vocab - 1) * (int64_t)hp->n_embd;
    if (hp->n_expert > 0) {
        int64_t per_layer = 3 * (int64_t)hp->n_embd * hp->n_ff_exp * hp->n_expert;
        int64_t all = per_layer * (hp->n_layer - hp->n_layer_dense_lead);
        active -= all - all / hp->n_expert * hp->n_expert_used;
    }
    in->n_params_active = active;
    return STRATA_OK;
}

/* 1 if the file declares a real vocabulary. */
static int st_has_vocab(const strata_gguf *g) {
    const char *p;
    uint64_t n;
    if (strata_gguf_kv_find(g, "tokenizer.ggml.model") < 0) return 0;
    if (strata_gguf_get_str(g, "tokenizer.ggml.model", &p, &n) != STRATA_OK) return 1; /* vocab load names the bad type */
    return !((n == 4 && memcmp(p, "none", 4) == 0) || (n == 8 && memcmp(p, "no_vocab", 8) == 0));
}

strata_status strata_model_load(const char *path, const strata_model_params *params,
                                strata_model **out) {
    if (!out) return st_error(STRATA_ERR_INVALID_ARG, "strata_model_load: out is NULL");
    *out = NULL;
    if (!path) return st_error(STRATA_ERR_INVALID_ARG, "strata_model_load: path is NULL");
    strata_model_params p = params ? *params : strata_model_default_params();

    strata_model *m = calloc(1, sizeof *m);
    if (!m) return st_error(STRATA_ERR_NOMEM, "out of memory for the model");
    atomic_init(&m->refs, 1);
    strata_gguf_params gp = strata_gguf_default_params();
    gp.use_mmap = p.use_mmap ? 1 : 0;
    gp.mlock = p.mlock ? 1 : 0;
    gp.hugepages = p.hugepages ? 1 : 0;
    strata_status st = strata_gguf_open(path, &gp, &m->gguf);
    char *arch_name = NULL, *name = NULL;
    if (!st) st = st_dup_key(m->gguf, "general.architecture", &arch_name);
    if (!st) st = st_dup_key(m->gguf, "general.name", &name);
    m->info.arch = arch_name;
    m->info.name = name;
    m->vocab_only = p.vocab_only ? 1 : 0;
    m->n_threads = p.n_threads > 0 ? p.n_threads : st_online_cpus();

    if (!st) {
        m->arch = st_arch_find(arch_name);
        if (!m->arch && !m->vocab_only)
            st = st_error(arch_name[0] ? STRATA_ERR_UNSUPPORTED : STRATA_ERR_NOT_FOUND,
                          arch_name[0] ? "unknown architecture '%s' (general.architecture); "
                                         "supported: olmoe, qwen2moe, qwen3moe, llama, "
                                         "granitemoe, qwen2, qwen3, deepseek2, glm4moe, gpt-oss, qwen3next"
                                       : "missing required key 'general.architecture'%s",
                          arch_name);
    }
    if (!st && m->vocab_only) {
        st = st_vocab_load(m->gguf, &m->vocab);
        if (!st) m->hp.n_vocab = st_vocab_n_tokens(m->vocab);
    } else if (!st) {
        st = st_hparams_load(m->gguf, m->arch, &m->hp);
        /* Files without a vocabulary (random test models: no tokenizer.ggml.model, or "none" /
         * "no_vocab" as llama.cpp's converter writes then) run from token ids. */
        if (!st && st_has_vocab(m->gguf)) st = st_vocab_load(m->gguf, &m->vocab);
        if (!st) st = st_resolve_vocab_size(m, arch_name);
        if (!st) st = st_load_weights(m, arch_name);
    }
    if (!st) st = st_fill_info(m);
    if (st) {
        strata_model_free(m);
        return st;
    }
    *out = m;
    return STRATA_OK;
}

static void st_model_destroy(strata_model *model) {
    if (model->vocab) st_vocab_free(model->vocab);
    if (model->layers)
        for (int32_t il = 0; il < model->hp.n_layer + model->hp.n_nextn; il++)
            free(model->layers[il].mla_split);
    free(model->layers);
    free((void *)model->info.arch);
    free((void *)model->info.name);
    strata_gguf_free(model->gguf);
    free(model);
}

/* The handle is const for sessions (the model is immutable); the count is the one mutable field. */
void st_model_retain(const strata_model *model) {
    atomic_fetch_add(&((strata_model *)model)->refs, 1);
}

void st_model_release(const strata_model *model) {
    if (model && atomic_fetch_sub(&((strata_model *)model)->refs, 1) == 1)
        st_model_destroy((strata_model *)model);
}

void strata_model_free(strata_model *model) {
    st_model_release(model);
}

strata_status strata_model_get_info(const strata_model *model, strata_model_info *out) {
    if (!model || !out)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_model_get_info: NULL argument");
    *out = model->info;
    return STRATA_OK;
}

const strata_gguf *strata_model_gguf(const strata_model *model) {
    return model ? model->gguf : NULL;
}
