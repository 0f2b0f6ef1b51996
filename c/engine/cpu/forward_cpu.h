/* forward_cpu.h - the CPU forward pass (forward_cpu.c): one batch of tokens through the model,
 * and the token embeddings both backends take from it. */
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

#endif /* STRATA_FORWARD_CPU_H */
