/* drafter.c - the drafters of speculative decoding (strata.h, "Speculative decoding"):
 *   - n-gram (prompt lookup): the tokens that followed the latest earlier occurrence of the
 *     history's last n tokens, in the history first, then in the histories it was given before;
 *   - draft model: greedy tokens of a smaller model with the target's vocabulary, in a session of
 *     its own kept in step with the history (rolled back to the longest common prefix each call);
 *   - self: greedy tokens of the target session itself with only the experts its fast tier holds
 *     (every missed routed expert dropped), the steps rolled back before the window;
 *   - MTP: the model's nextn layer on the target's final hidden states (mtp_cpu.c; on the CPU,
 *     for CUDA sessions too).
 * A drafter is a tagged union behind one opaque handle; strata_drafter_propose dispatches. */
#include "model.h"
#include "mtp.h"
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY_ST(expr) do { strata_status st_ = (expr); if (st_ != STRATA_OK) return st_; } while (0)

typedef enum { ST_DRAFT_NGRAM, ST_DRAFT_MODEL, ST_DRAFT_SELF, ST_DRAFT_MTP } st_draft_kind;

struct strata_drafter {
    st_draft_kind kind;
    /* n-gram */
    int32_t ngram_min, ngram_max;
    strata_token *corpus;       /* the histories given before, end to end (a -1 between them) */
    int64_t n_corpus, cap_corpus;
    int64_t corpus_from;        /* the history of the previous call starts here in corpus */
    /* draft model */
    const strata_model *model;  /* held (st_model_retain) */
    strata_session *session;
    strata_token *seen;         /* the tokens in the draft session's KV cache, in order */
    int64_t n_seen, cap_seen;
    /* self */
    strata_session *target;     /* the caller's session (not owned) */
    /* MTP */
    st_mtp *mtp;                /* attached to target (mtp_cpu.c) */
    char desc[384];             /* strata_drafter_describe's line */
};

/* ---------------------------------------------------------------------------------------------
 * n-gram
 * ------------------------------------------------------------------------------------------- */

strata_status strata_drafter_ngram_create(int32_t ngram_min, int32_t ngram_max, strata_drafter **out) {
    if (!out) return st_error(STRATA_ERR_INVALID_ARG, "strata_drafter_ngram_create: out is NULL");
    *out = NULL;
    if (ngram_min < 1 || ngram_max < ngram_min || ngram_max > 8)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_drafter_ngram_create: ngram_min %d, ngram_max %d "
                        "(1 <= min <= max <= 8)", (int)ngram_min, (int)ngram_max);
    strata_drafter *d = calloc(1, sizeof *d);
    if (!d) return st_error(STRATA_ERR_NOMEM, "drafter: out of memory");
    d->kind = ST_DRAFT_NGRAM;
    d->ngram_min = ngram_min;
    d->ngram_max = ngram_max;
    d->corpus_from = -1;
    *out = d;
    return STRATA_OK;
}

static int st_grow(strata_token **p, int64_t *cap, int64_t need) {
    if (need <= *cap) return 0;
    int64_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    strata_token *q = realloc(*p, (size_t)c * sizeof *q);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* The latest start i < end - n in seq[0..len) (skipping the suffix itself when seq is the history,
 * end = len) of the n tokens key, with at least one token after it; -1 if none. */
static int64_t st_find_latest(const strata_token *seq, int64_t len, int64_t end, const strata_token *key,
                              int32_t n) {
    for (int64_t i = (end < len ? end : len) - n - 1; i >= 0; i--) {
        if (seq[i] != key[0]) continue;
        int32_t j = 1;
        while (j < n && seq[i + j] == key[j]) j++;
        if (j == n && i + n < len) return i;
    }
    return -1;
}

/* Copies up to max tokens after position at + n of seq (stopping at a separator). */
static int32_t st_take(const strata_token *seq, int64_t len, int64_t from, int32_t max, strata_token *out) {
    int32_t k = 0;
    while (k < max && from + k < len && seq[from + k] >= 0) {
        out[k] = seq[from + k];
        k++;
    }
    return k;
}

/* 1 if history h continues the one the previous call left in the corpus (the same generation,
 * longer now). */
static int st_ngram_continues(const strata_drafter *d, const strata_token *h, int64_t n) {
    const int64_t prev = d->n_corpus - d->corpus_from;
    return d->corpus_from >= 0 && n >= prev &&
           memcmp(d->corpus + d->corpus_from, h, sizeof *h * (size_t)prev) == 0;
}

/* Keeps the history in the corpus: it replaces the previous call's copy when it continues it, else
 * it is appended after a separator. */
static void st_ngram_learn(strata_drafter *d, const strata_token *h, int64_t n, int continues) {
    if (continues) {
        d->n_corpus = d->corpus_from; /* rewritten below, grown */
    } else if (d->n_corpus > 0) {
        if (st_grow(&d->corpus, &d->cap_corpus, d->n_corpus + 1) != 0) return;
        d->corpus[d->n_corpus++] = -1;
    }
    if (st_grow(&d->corpus, &d->cap_corpus, d->n_corpus + n) != 0) { d->corpus_from = -1; return; }
    d->corpus_from = d->n_corpus;
    memcpy(d->corpus + d->n_corpus, h, sizeof *h * (size_t)n);
    d->n_corpus += n;
}

static int32_t st_ngram_propose(strata_drafter *d, const strata_token *h, int64_t nh, int32_t max,
                                strata_token *out) {
    const int continues = st_ngram_continues(d, h, nh);
    const int64_t earlier = continues ? d->corpus_from : d->n_corpus; /* other histories: corpus[0, earlier) */
    int32_t got = 0;
    for (int32_t n = d->ngram_max; n >= d->ngram_min && got == 0; n--) {
        if (nh < n) continue;
        const strata_token *key = h + nh - n;
        int64_t at = st_find_latest(h, nh, nh, key, n); /* in the history itself */
        if (at >= 0) {
            got = st_take(h, nh, at + n, max, out);
        } else if (earlier > 0) {
            at = st_find_latest(d->corpus, earlier, earlier, key, n);
            if (at >= 0) got = st_take(d->corpus, earlier, at + n, max, out);
        }
    }
    st_ngram_learn(d, h, nh, continues);
    return got;
}

/* ---------------------------------------------------------------------------------------------
 * Draft model
 * ------------------------------------------------------------------------------------------- */

/* The same vocabulary: size, every token's text, BOS and EOS. */
static strata_status st_same_vocab(const strata_model *a, const strata_model *b) {
    if (a->hp.n_vocab != b->hp.n_vocab)
        return st_error(STRATA_ERR_INVALID_ARG, "draft model: %d tokens, the target has %d",
                        (int)b->hp.n_vocab, (int)a->hp.n_vocab);
    if (strata_token_bos(a) != strata_token_bos(b) || strata_token_eos(a) != strata_token_eos(b))
        return st_error(STRATA_ERR_INVALID_ARG, "draft model: BOS/EOS %d/%d, the target's %d/%d",
                        (int)strata_token_bos(b), (int)strata_token_eos(b), (int)strata_token_bos(a),
                        (int)strata_token_eos(a));
    for (int32_t t = 0; t < a->hp.n_vocab; t++) {
        const char *x = strata_token_text(a, t), *y = strata_token_text(b, t);
        if ((x == NULL) != (y == NULL) || (x && strcmp(x, y) != 0))
            return st_error(STRATA_ERR_INVALID_ARG, "draft model: token %d is '%s', the target's is '%s'",
                            (int)t, y ? y : "(none)", x ? x : "(none)");
    }
    return STRATA_OK;
}

strata_status strata_drafter_model_create(const strata_model *target, const strata_model *draft,
                                          const strata_session_params *params, strata_drafter **out) {
    if (!out) return st_error(STRATA_ERR_INVALID_ARG, "strata_drafter_model_create: out is NULL");
    *out = NULL;
    if (!target || !draft) return st_error(STRATA_ERR_INVALID_ARG, "strata_drafter_model_create: NULL model");
    strata_status st = st_same_vocab(target, draft);
    if (st != STRATA_OK) return st;
    strata_drafter *d = calloc(1, sizeof *d);
    if (!d) return st_error(STRATA_ERR_NOMEM, "drafter: out of memory");
    d->kind = ST_DRAFT_MODEL;
    st = strata_session_create(draft, params, &d->session);
    if (st != STRATA_OK) {
        free(d);
        return st;
    }
    st_model_retain(draft);
    d->model = draft;
    *out = d;
    return STRATA_OK;
}

/* Brings the draft session to history h (the longest common prefix kept, the rest evaluated), then
 * drafts up to max greedy tokens, which stay in its cache (the next call's prefix check rolls back
 * those the target rejected). */
static strata_status st_model_propose(strata_drafter *d, const strata_token *h, int64_t nh, int32_t max,
                                      strata_token *out, int32_t *n_out) {
    int64_t keep = 0;
    while (keep < d->n_seen && keep < nh && d->seen[keep] == h[keep]) keep++;
    if (keep == nh && keep > 0) keep--; /* the last token is evaluated again, for its logits */
    const int32_t room = strata_session_n_ctx(d->session) - (int32_t)nh - 1;
    if (room < 1 || nh < 1) return STRATA_OK; /* no room to draft: propose nothing */
    if (max > room) max = room;
    TRY_ST(strata_session_truncate(d->session, (int32_t)keep));
    if (st_grow(&d->seen, &d->cap_seen, nh + max) != 0) return st_error(STRATA_ERR_NOMEM, "drafter: out of memory");
    memcpy(d->seen, h, sizeof *h * (size_t)nh);
    d->n_seen = nh;
    strata_token next;
    TRY_ST(strata_session_decode_greedy(d->session, h + keep, nh - keep, &next));
    int32_t k = 0;
    while (k < max) {
        out[k++] = next;
        d->seen[d->n_seen++] = next;
        if (k == max || strata_token_is_eog(d->model, next)) break;
        TRY_ST(strata_session_decode_greedy(d->session, &next, 1, &next));
    }
    d->n_seen--; /* the last draft was not evaluated: it is not in the cache */
    *n_out = k;
    return STRATA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Self-draft
 * ------------------------------------------------------------------------------------------- */

strata_status strata_drafter_self_create(strata_session *target, strata_drafter **out) {
    if (!target || !out) return st_error(STRATA_ERR_INVALID_ARG, "strata_drafter_self_create: NULL argument");
    *out = NULL;
    const st_placement_plan *pl = &target->plan;
    if (target->backend == STRATA_BACKEND_CUDA) {
        /* it drafts with the GPU's experts alone: a cache's misses and the CPU layers' experts
         * dropped (moe_block.c) */
        const int all_cpu = pl->n_cpu_moe < 0 || pl->n_cpu_moe >= target->model->hp.n_layer;
        if (pl->expert_cache == 0 && pl->n_cpu_moe == 0)
            return st_error(STRATA_ERR_UNSUPPORTED, "the self-draft needs experts off the GPU on a CUDA "
                            "session (expert_cache or n_cpu_moe): with every expert resident it would be "
                            "the model itself");
        if (pl->expert_cache == 0 && all_cpu)
            return st_error(STRATA_ERR_UNSUPPORTED, "the self-draft drafts with the GPU's experts, and with "
                            "every layer's on the CPU (n_cpu_moe -1) there are none: keep some layers on the "
                            "GPU (n_cpu_moe N) or add expert_cache");
    } else if (!target->ram) {
        return st_error(STRATA_ERR_UNSUPPORTED, "the self-draft needs experts outside the fast tier: "
                        "ram_budget on a CPU session, or expert_cache on a CUDA session");
    }
    strata_drafter *d = calloc(1, sizeof *d);
    if (!d) return st_error(STRATA_ERR_NOMEM, "strata_drafter_self_create: out of memory");
    d->kind = ST_DRAFT_SELF;
    d->target = target;
    *out = d;
    return STRATA_OK;
}

/* Greedy decode steps of the target from h's last token with self_draft set, then rolled back. */
static strata_status st_self_propose(strata_drafter *d, const strata_token *h, int64_t nh, int32_t max,
                                     strata_token *out, int32_t *n_out) {
    strata_session *s = d->target;
    const int32_t n_past = s->n_past;
    if (nh < 1 || (int64_t)n_past != nh - 1)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_drafter_propose: a self-draft's history is its session's "
                        "tokens and the newest one (n_past %d, history %lld)", (int)n_past, (long long)nh);
    if (max > s->n_ctx - n_past) max = s->n_ctx - n_past;
    strata_token next = h[nh - 1];
    strata_status st = STRATA_OK;
    int32_t k = 0;
    s->self_draft = 1;
    while (k < max) {
        if ((st = strata_session_decode_greedy(s, &next, 1, &next)) != STRATA_OK) break;
        out[k++] = next;
        if (strata_token_is_eog(s->model, next)) break;
    }
    s->self_draft = 0;
    const strata_status tr = strata_session_truncate(s, n_past);
    *n_out = st == STRATA_OK && tr == STRATA_OK ? k : 0;
    return st != STRATA_OK ? st : tr;
}

/* ---------------------------------------------------------------------------------------------
 * MTP heads
 * ------------------------------------------------------------------------------------------- */

strata_status strata_drafter_mtp_create(strata_session *target, strata_drafter **out) {
    if (!target || !out) return st_error(STRATA_ERR_INVALID_ARG, "strata_drafter_mtp_create: NULL argument");
    *out = NULL;
    const st_hparams *hp = &target->model->hp;
    const char *arch = target->model->arch ? target->model->arch->name : "?";
    if (hp->n_nextn <= 0)
        return st_error(STRATA_ERR_UNSUPPORTED, "the model has no MTP heads (no %s.nextn_predict_layers): "
                        "draft with ngram, a draft model or self", arch);
    if (target->model->n_mtp == 0)
        return st_error(STRATA_ERR_UNSUPPORTED, "the model declares %d MTP layer%s (%s.nextn_predict_layers) "
                        "but its file carries none of their tensors (the converter dropped them): draft "
                        "with ngram, a draft model or self", (int)hp->n_nextn, hp->n_nextn == 1 ? "" : "s", arch);
    if (target->mtp_on)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_drafter_mtp_create: the session has an MTP drafter already");
    strata_drafter *d = calloc(1, sizeof *d);
    if (!d) return st_error(STRATA_ERR_NOMEM, "strata_drafter_mtp_create: out of memory");
    d->kind = ST_DRAFT_MTP;
    d->target = target;
    const strata_status st = st_mtp_create(target, &d->mtp);
    if (st != STRATA_OK) {
        strata_drafter_free(d);
        return st;
    }
    snprintf(d->desc, sizeof d->desc, "MTP drafts: the model's MTP layer %s", st_mtp_where(d->mtp));
    *out = d;
    return STRATA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * The handle
 * ------------------------------------------------------------------------------------------- */

const char *strata_drafter_describe(const strata_drafter *d) {
    if (!d) return "";
    if (d->kind == ST_DRAFT_MTP) return d->desc;
    return d->kind == ST_DRAFT_NGRAM ? "n-gram drafts (prompt lookup)"
           : d->kind == ST_DRAFT_SELF ? "self-drafts (the model with only its fast tier's experts)"
                                      : "drafts from a draft model";
}

void strata_drafter_free(strata_drafter *d) {
    if (!d) return;
    free(d->corpus);
    strata_session_free(d->session);
    free(d->seen);
    if (d->model) st_model_release(d->model);
    st_mtp_free(d->mtp);
    free(d);
}

strata_status strata_drafter_propose(strata_drafter *d, const strata_token *history, int64_t n_history,
                                     int32_t max, strata_token *out, int32_t *n_out) {
    if (!d || !n_out || (n_history > 0 && !history) || (max > 0 && !out))
        return st_error(STRATA_ERR_INVALID_ARG, "strata_drafter_propose: NULL argument");
    *n_out = 0;
    if (n_history < 0 || max < 0 || max > STRATA_DRAFT_MAX)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_drafter_propose: n_history %lld, max %d (0..%d)",
                        (long long)n_history, (int)max, STRATA_DRAFT_MAX);
    if (max == 0) /* only learn the history: a draft model reads it now, not at its first window */
        return d->kind == ST_DRAFT_MODEL && n_history > 0 ? st_model_propose(d, history, n_history, 0, out, n_out)
                                                          : STRATA_OK;
    if (d->kind == ST_DRAFT_NGRAM) {
        *n_out = st_ngram_propose(d, history, n_history, max, out);
        return STRATA_OK;
    }
    if (d->kind == ST_DRAFT_SELF) return st_self_propose(d, history, n_history, max, out, n_out);
    if (d->kind == ST_DRAFT_MTP) return st_mtp_propose(d->mtp, history, n_history, max, out, n_out);
    return st_model_propose(d, history, n_history, max, out, n_out);
}
