/* forward_cpu.h - the CPU forward pass (forward_cpu.c): one batch of tokens through the model,
 * the token embeddings both backends take from it, and the blocks the MTP drafter reuses. */
#ifndef STRATA_FORWARD_CPU_H
#define STRATA_FORWARD_CPU_H

#include "session.h"

/* The token embeddings of T tokens into out (T x n_embd), as both forward paths take them: each
 * row dequantized (and scaled where the architecture says), prompt batches on the session's
 * threads (forward_cpu.c). */
void st_embed_tokens(strata_session *s, const strata_token *tokens, int64_t T, float *out);

/* Evaluates T (1..n_batch) tokens at positions n_past .. n_past+T-1 and advances n_past.
 * logits: NULL, or T x n_vocab (all 1) or n_vocab floats (all 0: the last token's). Tokens and
 * room are checked by the caller; a failure (a disk read) is left in s->fwd_error. */
void st_forward_batch(strata_session *s, const strata_token *tokens, int64_t T, float *logits, int all);

/* The attention block of layer L (norm, q/k/v, biases, q/k norms, RoPE, cache, attention,
 * output projection, residual) on s->x, its cache rows in kv; the rope angles in s->rope_cs. */
void st_cpu_attn_block(strata_session *s, const st_layer *L, const st_kv_layer *kv, int64_t T, int64_t pos0);
/* deepseek2's latent attention of layer L on the residual s->x (T rows at positions pos0..),
 * its cache rows in kv; the rope angles of the positions in s->rope_cs. The trunk's layers and
 * the MTP layer (mtp_cpu.c) share it. */
void st_cpu_mla_block(strata_session *s, const st_layer *L, const st_kv_layer *kv, int64_t T, int64_t pos0);
/* The FFN weights of a layer as expert tables: the dense FFN as one expert (layers without a
 * router), the routed experts [n_expert] and the shared expert (NULL, or gate.data NULL: none). */
typedef struct {
    const st_expert *dense, *experts, *shexp;
} st_cpu_ffn_w;
/* The FFN block of layer L on the residual s->x (T rows): ffn_norm into s->xn, the dense FFN or
 * the routed experts (router, top-k) plus the shared expert, the residual added. il < n_layer: a
 * trunk layer, which takes the session's per-layer steps between routing and experts (route
 * trace, profile, tail skip, DEGRADE_ZERO, RAM tier); il >= n_layer: an MTP layer (mtp_cpu.c),
 * its experts computed as routed. The trunk's layers and the MTP layer share it. */
void st_cpu_ffn_block(strata_session *s, const st_layer *L, int il, const st_cpu_ffn_w *w, int64_t T);
/* The greedy token of a logits row: NaN as -inf, the lowest id on ties; INVALID_ARG when no
 * logit is finite (backend_cpu.c; the MTP drafter's drafts too). */
strata_status st_argmax_row(const float *x, int32_t n, strata_token *out);
/* The top-k routing of T rows of router logits as the model's file describes it (ops.h). */
void st_cpu_route_rows(const strata_model *m, const st_layer *L, const float *logits, int64_t T,
                       int32_t *ids, float *wts);

#endif /* STRATA_FORWARD_CPU_H */
