/* backend_cpu.c - the CPU backend's table (backend.h): its state for a session (the KV cache in
 * RAM, the next-layer prediction's buffers), the forward pass of a batch (forward_cpu.c) with the
 * greedy token or the candidates of the last row computed from its logits. */
#include "backend.h"
#include "forward_cpu.h"
#include "linear_attn_cpu.h"
#include "profile.h"

#include <math.h>
#include <stdlib.h>

static strata_status cpu_create(strata_session *s) {
    const st_hparams *hp = &s->model->hp;
    strata_status st = st_kv_init(&s->kv, hp, s->n_ctx, s->kv_type);
    if (st != STRATA_OK) return st;
    if ((st = st_rs_init(s)) != STRATA_OK) return st;
    /* the pipe's next-layer prediction */
    return s->plan.pipe ? st_session_pred_buffers(s) : STRATA_OK;
}

static void cpu_free(strata_session *s) {
    st_kv_free(&s->kv);
    st_rs_free(s);
    free(s->argmax_logits);
    s->argmax_logits = NULL;
}

/* The greedy token of a logits row: NaN as -inf, the lowest id on ties (strata_sampler_sample's
 * greedy path without penalties); INVALID_ARG when no logit is finite. */
strata_status st_argmax_row(const float *x, int32_t n, strata_token *out) {
    int32_t best = -1;
    float bv = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        const float v = isnan(x[i]) ? -INFINITY : x[i];
        if (best < 0 || v > bv) { best = i; bv = v; }
    }
    if (!(bv > -INFINITY))
        return st_error(STRATA_ERR_INVALID_ARG, "greedy token: no finite logit among %d", (int)n);
    *out = best;
    return STRATA_OK;
}

/* The k best of x[0..n) in the sampler's candidate order (larger first, ties to the lower id, NaN
 * as -inf), through a heap of k, then sorted. */
static int st_topk_before(float av, int32_t ai, float bv, int32_t bi) { return av > bv || (av == bv && ai < bi); }

static void st_topk_row(const float *x, int32_t n, int32_t k, int32_t *ids, float *vals) {
    int32_t m = 0; /* heap in ids/vals: [0] the worst kept */
    for (int32_t i = 0; i < n; i++) {
        const float v = isnan(x[i]) ? -INFINITY : x[i];
        if (m == k && !st_topk_before(v, i, vals[0], ids[0])) continue;
        int32_t j;
        if (m < k) { /* sift up from the end */
            j = m++;
            while (j > 0) {
                const int32_t up = (j - 1) / 2;
                if (!st_topk_before(vals[up], ids[up], v, i)) break;
                vals[j] = vals[up]; ids[j] = ids[up]; j = up;
            }
        } else { /* replace the root, sift down */
            j = 0;
            for (;;) {
                int32_t w = 2 * j + 1;
                if (w >= m) break;
                if (w + 1 < m && st_topk_before(vals[w], ids[w], vals[w + 1], ids[w + 1])) w++;
                if (!st_topk_before(v, i, vals[w], ids[w])) break;
                vals[j] = vals[w]; ids[j] = ids[w]; j = w;
            }
        }
        vals[j] = v;
        ids[j] = i;
    }
    for (int32_t a = 1; a < m; a++) { /* insertion sort of the k (k is small) */
        const float v = vals[a];
        const int32_t id = ids[a];
        int32_t b = a;
        while (b > 0 && st_topk_before(v, id, vals[b - 1], ids[b - 1])) {
            vals[b] = vals[b - 1]; ids[b] = ids[b - 1]; b--;
        }
        vals[b] = v;
        ids[b] = id;
    }
}

static strata_status cpu_forward(strata_session *s, const strata_token *tokens, int64_t T, float *logits,
                                 int all) {
    const int32_t V = s->model->hp.n_vocab;
    const int select = s->want_argmax || s->want_topk; /* the last row's logits, here */
    if (select && !s->argmax_logits && !(s->argmax_logits = malloc(sizeof(float) * (size_t)V)))
        return st_error(STRATA_ERR_NOMEM, "session: out of memory for a logits row");
    st_forward_batch(s, tokens, T, select ? s->argmax_logits : logits, select ? 0 : all);
    if (s->fwd_error != STRATA_OK) { /* the message is this thread's last error */
        const strata_status st = s->fwd_error;
        s->fwd_error = STRATA_OK;
        return st;
    }
    if (s->want_argmax) return st_argmax_row(s->argmax_logits, V, s->argmax_out);
    if (s->want_topk) st_topk_row(s->argmax_logits, V, s->topk_k, s->topk_ids, s->topk_vals);
    return STRATA_OK;
}

static void cpu_stats(const strata_session *s, strata_session_stats *out) {
    out->kv_bytes = (int64_t)s->kv.bytes; /* the counters are the session's own */
    out->state_alloc_bytes = s->rs ? st_rs_bytes(s) : 0;
}

static void cpu_reset_stats(strata_session *s) { (void)s; }

static strata_status cpu_call_begin(strata_session *s, int64_t n) {
    if (s->rs) st_rs_call_begin(s, n);
    return STRATA_OK;
}

static strata_status cpu_truncate(strata_session *s, int32_t n_keep) {
    return s->rs ? st_rs_truncate(s, n_keep) : STRATA_OK;
}

const st_backend st_backend_cpu = {"cpu", cpu_create, cpu_free, cpu_forward, cpu_stats, cpu_reset_stats,
                                   cpu_call_begin, cpu_truncate, NULL, NULL, NULL};
