/* backend.h - the internal boundary between a session (session.c) and the compute backend that
 * runs its forward passes. The CPU pass (cpu/backend_cpu.c) and the CUDA pass
 * (cuda/backend_cuda.c) each fill one table; session.c picks the table once, at create, and
 * never branches on the backend again. A new backend is a folder under c/engine/ with its own
 * table, listed in backend.c. */
#ifndef STRATA_BACKEND_H
#define STRATA_BACKEND_H

#include "strata.h"

struct strata_session;

typedef struct st_backend {
    const char *name;
    /* Builds the backend's state for a session whose common state (threads, weight tables,
     * scratch, RAM tier) is ready. On failure the state may be partly built: free releases it. */
    strata_status (*create)(struct strata_session *s);
    void (*free)(struct strata_session *s);
    /* Evaluates T (1..n_batch) tokens at positions n_past..n_past+T-1, advances n_past. logits:
     * NULL, or T x n_vocab (all 1) or n_vocab floats (all 0: the last token's). When the session
     * asks for them (s->want_argmax, s->want_topk: the batch is a call's last), the greedy token
     * or the candidates of the last row go to s->argmax_out / s->topk_ids, s->topk_vals. */
    strata_status (*forward)(struct strata_session *s, const strata_token *tokens, int64_t T,
                             float *logits, int all);
    /* The backend's part of strata_session_get_stats / reset_stats (the session fills the rest). */
    void (*stats)(const struct strata_session *s, strata_session_stats *out);
    void (*reset_stats)(struct strata_session *s);
    /* State that cannot be cut like the KV cache (qwen3next's recurrent layers; no-ops without
     * them): before a decode call of n tokens at n_past (the rollback window), and
     * strata_session_truncate's restore (an error outside the window). */
    strata_status (*call_begin)(struct strata_session *s, int64_t n);
    strata_status (*truncate)(struct strata_session *s, int32_t n_keep);
    /* An MTP drafter's layer (mtp_cpu.c) on the backend's device, or NULL (it runs on the CPU):
     * attach puts the layer there and keeps every position's hidden state from then on
     * (STRATA_ERR_UNSUPPORTED, saying why, where it cannot: the drafter then runs it on the CPU);
     * rows runs T (<= n_batch) MTP rows at positions pos0.. for tokens tok (in the vocabulary:
     * the caller checks; chained: the single row's hidden state is the previous row's output,
     * else the trunk's of the position before) and gives the greedy token after the last row in
     * *next (logits: NULL, or the last row's n_vocab logits down too); detach frees what attach
     * made. */
    strata_status (*mtp_attach)(struct strata_session *s);
    strata_status (*mtp_rows)(struct strata_session *s, const strata_token *tok, int64_t T, int64_t pos0,
                              int chained, strata_token *next, float *logits);
    void (*mtp_detach)(struct strata_session *s);
} st_backend;

/* The table of a backend kind (CPU for anything but CUDA: the parameters are checked before). */
const st_backend *st_backend_of(strata_backend_kind kind);

#endif /* STRATA_BACKEND_H */
