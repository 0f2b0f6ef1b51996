/* linear_attn_cpu.h - qwen3next on the CPU (linear_attn_cpu.c): the session's recurrent state of
 * its gated DeltaNet layers (each layer's conv kernel state and, per value head, the chunked delta
 * rule's open chunk: its start state and rows, and the previous chunk's), the rollback window that
 * lets strata_session_truncate undo the last decode call's positions, the DeltaNet layer and the
 * gated full-attention layer (the trunk's, and the MTP layer's on scratch of its own). */
#ifndef STRATA_LINEAR_ATTN_CPU_H
#define STRATA_LINEAR_ATTN_CPU_H

#include "session.h"

/* Allocates s->rs for a model with recurrent layers (no-op otherwise). */
strata_status st_rs_init(strata_session *s);
void st_rs_free(strata_session *s);
/* The bytes s->rs keeps whatever the call (not its n_batch scratch): both chunk buffers' start
 * states and rows, the conv state, and the rollback window's conv snapshot and inputs. */
int64_t st_rs_bytes(const strata_session *s);

/* Before a decode call of n tokens at position s->n_past: zeroes the state at position 0 and
 * opens (or extends) the rollback window. */
void st_rs_call_begin(strata_session *s, int64_t n);

/* Restores the recurrent state as it was after position n_keep - 1, for n_keep inside the
 * rollback window (or 0); any other n_keep is refused with an error naming the window. */
strata_status st_rs_truncate(strata_session *s, int32_t n_keep);

/* A gated DeltaNet layer il on the residual s->x (T rows at positions pos0..). */
void st_cpu_linear_attn_block(strata_session *s, int il, int64_t T, int64_t pos0);

/* A qwen3next full-attention layer L on the residual s->x (T rows at positions pos0..), its cache
 * rows in kv: per head [query, output gate] from attn_q, q/k norms, partial NEOX rope, attention,
 * the output scaled by sigmoid(gate), then attn_output. Its own scratch, T rows at least: qg
 * [T][2 * n_head * head_dim] (attn_q's rows) and gate [T][n_head * head_dim]; the trunk's layers
 * pass the recurrent state's (st_cpu_gated_attn_layer), the MTP layer its drafter's (mtp_cpu.c:
 * a CUDA session has no s->rs). */
void st_cpu_gated_attn_block(strata_session *s, const st_layer *L, const st_kv_layer *kv, float *qg, float *gate,
                             int64_t T, int64_t pos0);
/* Trunk layer il's gated full attention (st_cpu_gated_attn_block on the recurrent state's scratch). */
void st_cpu_gated_attn_layer(strata_session *s, int il, int64_t T, int64_t pos0);

#endif /* STRATA_LINEAR_ATTN_CPU_H */
