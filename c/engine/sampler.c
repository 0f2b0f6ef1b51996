/* sampler.c - the public sampler (strata.h, "Sampling"): picks the next token from a row of
 * logits through a fixed chain, with a seeded generator of its own so that the same seed and the
 * same inputs give the same tokens on every machine.
 *
 * The chain, in order (each stage sees what the previous one kept):
 *   1. penalties over the distinct tokens of the last repeat_last_n accepted tokens, each seen
 *      `count` times: repetition (logit > 0 ? logit / p : logit * p, llama.cpp's rule), then
 *      frequency and presence (logit -= count * frequency + (count > 0) * presence);
 *   2. temperature <= 0: greedy, the argmax of the penalized logits (lowest id on ties); stop;
 *   3. top-k: keep the k largest logits (ties broken toward the lower id);
 *   4. top-p: keep the smallest prefix of the sorted tokens whose softmax mass reaches top_p
 *      (at least one token);
 *   5. min-p: keep tokens whose probability is at least min_p times the largest one;
 *   6. temperature: divide the kept logits by it;
 *   7. draw from the softmax of what is left (double precision) with xoshiro256**.
 * top-p and min-p see the untempered probabilities, as in llama.cpp's default order (penalties,
 * top-k, typical, top-p, min-p, temperature, dist; Strata has no typical sampling). */
#include "common.h"
#include "sampler.h"

#include <math.h>
#include <stdlib.h>

/* ---------------------------------------------------------------------------------------------
 * Generator: xoshiro256** seeded through splitmix64
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    uint64_t s[4];
} st_rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void rng_seed(st_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(st_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(st_rng *r) {
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---------------------------------------------------------------------------------------------
 * State
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    int32_t id;
    float logit;
} st_cand;

struct strata_sampler {
    strata_sampler_params p;
    int32_t n_vocab;
    st_rng rng;
    int32_t *hist;        /* [repeat_last_n] ring of accepted tokens */
    int32_t hist_len;     /* tokens in the ring (<= repeat_last_n) */
    int32_t hist_head;    /* next write index */
    int32_t *counts;      /* [n_vocab] occurrences in the window; zero between calls */
    st_cand *cand;        /* [n_vocab] candidates of one call */
    double *prob;         /* [n_vocab] probabilities of the kept candidates */
    st_cand *pen;         /* [repeat_last_n] the history's penalized logits (top-k path) */
    int force_full;       /* st_sampler_force_full: every call takes the full path (tests) */
};

strata_sampler_params strata_sampler_default_params(void) {
    strata_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.repeat_last_n = 64;
    p.seed = 0x5eed;
    return p;
}

strata_status strata_sampler_create(const strata_sampler_params *params, int32_t n_vocab,
                                    strata_sampler **out) {
    if (!out) return st_error(STRATA_ERR_INVALID_ARG, "strata_sampler_create: out is NULL");
    *out = NULL;
    if (n_vocab <= 0)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_sampler_create: n_vocab %d must be > 0",
                        (int)n_vocab);
    strata_sampler_params p = params ? *params : strata_sampler_default_params();
    if (isnan(p.temperature) || isnan(p.top_p) || isnan(p.min_p) || isnan(p.presence_penalty) ||
        isnan(p.frequency_penalty))
        return st_error(STRATA_ERR_INVALID_ARG, "strata_sampler_create: a parameter is NaN");
    if (!(p.repeat_penalty > 0.0f) || isinf(p.repeat_penalty))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "strata_sampler_create: repeat_penalty %g must be a positive number",
                        (double)p.repeat_penalty);
    if (p.repeat_last_n < 0)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "strata_sampler_create: repeat_last_n %d must be >= 0",
                        (int)p.repeat_last_n);
    strata_sampler *s = calloc(1, sizeof *s);
    if (!s) return st_error(STRATA_ERR_NOMEM, "strata_sampler_create: out of memory");
    s->p = p;
    s->n_vocab = n_vocab;
    s->hist = calloc((size_t)(p.repeat_last_n > 0 ? p.repeat_last_n : 1), sizeof *s->hist);
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->prob = malloc((size_t)n_vocab * sizeof *s->prob);
    s->pen = malloc((size_t)(p.repeat_last_n > 0 ? p.repeat_last_n : 1) * sizeof *s->pen);
    if (!s->hist || !s->counts || !s->cand || !s->prob || !s->pen) {
        strata_sampler_free(s);
        return st_error(STRATA_ERR_NOMEM, "strata_sampler_create: out of memory for %d tokens",
                        (int)n_vocab);
    }
    rng_seed(&s->rng, p.seed);
    *out = s;
    return STRATA_OK;
}

void strata_sampler_free(strata_sampler *s) {
    if (!s) return;
    free(s->hist);
    free(s->counts);
    free(s->cand);
    free(s->prob);
    free(s->pen);
    free(s);
}

void strata_sampler_reset(strata_sampler *s) {
    if (!s) return;
    s->hist_len = 0;
    s->hist_head = 0;
    rng_seed(&s->rng, s->p.seed);
}

void strata_sampler_accept(strata_sampler *s, strata_token token) {
    if (!s || s->p.repeat_last_n <= 0 || token < 0 || token >= s->n_vocab) return;
    s->hist[s->hist_head] = token;
    s->hist_head = (s->hist_head + 1) % s->p.repeat_last_n;
    if (s->hist_len < s->p.repeat_last_n) s->hist_len++;
}

/* ---------------------------------------------------------------------------------------------
 * Chain stages
 * ------------------------------------------------------------------------------------------- */

/* Descending logit, then ascending id: a total order, so results never depend on qsort. */
static int cand_cmp(const void *a, const void *b) {
    const st_cand *x = a, *y = b;
    if (x->logit > y->logit) return -1;
    if (x->logit < y->logit) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

static inline int cand_before(const st_cand *x, const st_cand *y) { return cand_cmp(x, y) < 0; }

/* Moves the k first candidates in cand_cmp order to c[0..k) (unordered): quickselect. */
static void select_top(st_cand *c, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        st_cand pivot = c[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (cand_before(&c[i], &pivot)) i++;
            while (cand_before(&pivot, &c[j])) j--;
            if (i <= j) {
                st_cand t = c[i]; c[i] = c[j]; c[j] = t;
                i++; j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

static void apply_penalties(strata_sampler *s) {
    const strata_sampler_params *p = &s->p;
    if (s->hist_len == 0) return;
    if (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f)
        return;
    for (int32_t i = 0; i < s->hist_len; i++) s->counts[s->hist[i]]++;
    for (int32_t i = 0; i < s->hist_len; i++) {
        int32_t t = s->hist[i];
        int32_t c = s->counts[t];
        if (c == 0) continue; /* already applied for this distinct token */
        float l = s->cand[t].logit;
        if (p->repeat_penalty != 1.0f) l = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
        l -= (float)c * p->frequency_penalty + (c > 0 ? p->presence_penalty : 0.0f);
        s->cand[t].logit = l;
        s->counts[t] = 0;
    }
}

/* Softmax of c[0..n) (sorted, c[0] the largest) into s->prob; returns nothing. */
static void softmax_sorted(strata_sampler *s, int64_t n, double inv_temp) {
    double mx = (double)s->cand[0].logit, sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = exp(((double)s->cand[i].logit - mx) * inv_temp);
        s->prob[i] = e;
        sum += e;
    }
    for (int64_t i = 0; i < n; i++) s->prob[i] /= sum;
}

/* ---------------------------------------------------------------------------------------------
 * Sample
 * ------------------------------------------------------------------------------------------- */

/* Stages 4-7 on the n kept candidates, sorted in cand_cmp order in s->cand[0..n). */
static strata_status finish_sorted(strata_sampler *s, int64_t n, strata_token *out) {
    const strata_sampler_params *p = &s->p;
    /* top-p */
    if (p->top_p < 1.0f) {
        softmax_sorted(s, n, 1.0);
        double cum = 0.0;
        int64_t keep = n;
        for (int64_t i = 0; i < n; i++) {
            cum += s->prob[i];
            if (cum >= (double)p->top_p) { keep = i + 1; break; }
        }
        n = keep < 1 ? 1 : keep;
    }

    /* min-p: p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p) */
    if (p->min_p > 0.0f) {
        double thr = (double)s->cand[0].logit + log((double)p->min_p);
        int64_t keep = 1;
        while (keep < n && (double)s->cand[keep].logit >= thr) keep++;
        n = keep;
    }

    /* temperature and the draw */
    softmax_sorted(s, n, 1.0 / (double)p->temperature);
    double u = rng_uniform(&s->rng), cum = 0.0;
    int64_t pick = n - 1;
    for (int64_t i = 0; i < n; i++) {
        cum += s->prob[i];
        if (u < cum) { pick = i; break; }
    }
    *out = s->cand[pick].id;
    return STRATA_OK;
}

/* The whole chain over every token: greedy, top_k 0 (or >= the vocabulary), and the reference the
 * top-k path is tested against. */
/* Greedy without an active penalty: the argmax of the row itself (NaN as -inf, ties to the lowest
 * id), what sample_full's greedy branch finds, without building the candidates (a verify window
 * samples every row: on a 50K vocabulary the copy cost more than the search). */
static strata_status sample_argmax(const strata_sampler *s, const float *logits, strata_token *out) {
    int64_t best = -1;
    float bl = -INFINITY;
    int any_finite = 0;
    for (int64_t i = 0; i < s->n_vocab; i++) {
        float l = logits[i];
        if (isnan(l)) l = -INFINITY;
        if (isfinite(l)) any_finite = 1;
        if (best < 0 || l > bl) {
            best = i;
            bl = l;
        }
    }
    if (!any_finite)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "strata_sampler_sample: no finite logit among %lld", (long long)s->n_vocab);
    *out = (strata_token)best;
    return STRATA_OK;
}

static strata_status sample_full(strata_sampler *s, const float *logits, strata_token *out) {
    const strata_sampler_params *p = &s->p;
    if (!(p->temperature > 0.0f) && (s->hist_len == 0 || (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f &&
                                                           p->frequency_penalty == 0.0f)))
        return sample_argmax(s, logits, out);
    int64_t n = s->n_vocab;
    int any_finite = 0;
    for (int64_t i = 0; i < n; i++) {
        float l = logits[i];
        if (isnan(l)) l = -INFINITY;
        if (isfinite(l)) any_finite = 1;
        s->cand[i].id = (int32_t)i;
        s->cand[i].logit = l;
    }
    if (!any_finite)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "strata_sampler_sample: no finite logit among %lld", (long long)n);
    apply_penalties(s);

    if (!(p->temperature > 0.0f)) { /* greedy */
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            if (s->cand[i].logit > s->cand[best].logit) best = i;
        *out = s->cand[best].id;
        return STRATA_OK;
    }

    /* drop -inf candidates (masked or penalized away) so they never count */
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (s->cand[i].logit > -INFINITY) s->cand[m++] = s->cand[i];
    n = m;
    if (n == 0)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_sampler_sample: every logit is -inf "
                        "after the penalties");

    /* top-k, then the kept candidates sorted */
    if (p->top_k > 0 && p->top_k < n) {
        select_top(s->cand, n, p->top_k);
        n = p->top_k;
    }
    qsort(s->cand, (size_t)n, sizeof *s->cand, cand_cmp);
    return finish_sorted(s, n, out);
}

/* Heap of the k best candidates seen (h[0] the worst in cand_cmp order, each parent worse than its
 * children): sift c down from the root, or up from the end. */
static void heap_sift_down(st_cand *h, int64_t n, int64_t i, st_cand c) {
    for (;;) {
        int64_t w = 2 * i + 1;
        if (w >= n) break;
        if (w + 1 < n && cand_before(&h[w], &h[w + 1])) w++; /* the worse child */
        if (!cand_before(&c, &h[w])) break;                  /* c is worse than both */
        h[i] = h[w];
        i = w;
    }
    h[i] = c;
}

static void heap_sift_up(st_cand *h, int64_t i, st_cand c) {
    while (i > 0) {
        const int64_t up = (i - 1) / 2;
        if (!cand_before(&h[up], &c)) break; /* the parent is already the worse */
        h[i] = h[up];
        i = up;
    }
    h[i] = c;
}

/* Stages 1-3 in one pass for 0 < top_k < n_vocab at temperature > 0: the history's penalized
 * logits first (apply_penalties' arithmetic, marked in counts as -(index + 1)), then every token's
 * (penalized) logit against a heap of the top_k best, in cand_cmp order. The kept set and its
 * order are the full path's, so every token drawn is too (test_sampler compares them); about 20
 * times faster on a 152K vocabulary, where the full path's selection dominates. */
static strata_status sample_topk(strata_sampler *s, const float *logits, strata_token *out) {
    const strata_sampler_params *p = &s->p;
    const int64_t V = s->n_vocab, K = p->top_k;
    const int pen = s->hist_len > 0 &&
                    !(p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f);
    int32_t np = 0;
    if (pen) {
        for (int32_t i = 0; i < s->hist_len; i++) s->counts[s->hist[i]]++;
        for (int32_t i = 0; i < s->hist_len; i++) {
            const int32_t t = s->hist[i], c = s->counts[t];
            if (c <= 0) continue; /* already penalized */
            float l = logits[t];
            if (isnan(l)) l = -INFINITY;
            if (p->repeat_penalty != 1.0f) l = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
            l -= (float)c * p->frequency_penalty + (c > 0 ? p->presence_penalty : 0.0f);
            s->pen[np].id = t;
            s->pen[np].logit = l;
            s->counts[t] = -(++np);
        }
    }
    /* thr: the worst kept logit once the heap is full; a NaN (as -inf) or a logit below it is out
     * at one comparison, which is nearly every token */
    st_cand *h = s->cand;
    int64_t nk = 0;
    int any_finite = 0;
    float thr = -INFINITY;
    for (int64_t i = 0; i < V; i++) {
        float l = logits[i];
        any_finite |= fabsf(l) < INFINITY; /* false for NaN and +-inf */
        if (pen && s->counts[i] < 0) l = s->pen[-s->counts[i] - 1].logit;
        if (!(l >= thr) || !(l > -INFINITY)) continue;
        const st_cand c = {(int32_t)i, l};
        if (nk < K) {
            heap_sift_up(h, nk++, c);
            if (nk == K) thr = h[0].logit;
        } else if (cand_before(&c, &h[0])) {
            heap_sift_down(h, nk, 0, c);
            thr = h[0].logit;
        }
    }
    for (int32_t i = 0; i < np; i++) s->counts[s->pen[i].id] = 0;
    if (!any_finite)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "strata_sampler_sample: no finite logit among %lld", (long long)V);
    if (nk == 0) /* no logit above -inf */
        return st_error(STRATA_ERR_INVALID_ARG, "strata_sampler_sample: every logit is -inf "
                        "after the penalties");
    qsort(h, (size_t)nk, sizeof *h, cand_cmp);
    return finish_sorted(s, nk, out);
}

void st_sampler_force_full(strata_sampler *s, int on) {
    if (s) s->force_full = on != 0;
}

strata_status strata_sampler_sample(strata_sampler *s, const float *logits, strata_token *out) {
    if (!s || !logits || !out)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_sampler_sample: NULL argument");
    const strata_sampler_params *p = &s->p;
    if (!s->force_full && p->temperature > 0.0f && p->top_k > 0 && p->top_k < s->n_vocab)
        return sample_topk(s, logits, out);
    return sample_full(s, logits, out);
}

strata_status strata_sampler_verify(strata_sampler *s, const float *logits, strata_token draft,
                                    strata_token *out, int *accepted) {
    if (!s || !logits || !out || !accepted)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_sampler_verify: NULL argument");
    if (draft < 0 || draft >= s->n_vocab)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_sampler_verify: draft %d outside the vocabulary",
                        (int)draft);
    /* the draft is accepted when the sampler's own draw is it: the chance p(draft), as the
     * rejection rule gives for a drafter sure of its token, and a rejected row's token is the
     * draw, distributed as p without the draft; the draw is strata_sampler_sample's, one random
     * number a row, so windows give the text one-token steps give for a seed */
    const strata_status st = strata_sampler_sample(s, logits, out);
    *accepted = st == STRATA_OK && *out == draft;
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * From candidates (strata_session_decode_topk)
 *
 * Why top_k + repeat_last_n candidates suffice: penalties only lower logits here, and only those
 * of the at most repeat_last_n history tokens, so at least top_k candidates keep their logits,
 * each at or before (candidate order) every token outside the candidates, penalized or not: the
 * full chain's top-k set lies among the candidates, and stages 4-7 see only that set.
 * ------------------------------------------------------------------------------------------- */

int32_t strata_sampler_top_needed(const strata_sampler *s) {
    if (!s) return 0;
    const strata_sampler_params *p = &s->p;
    if (!(p->temperature > 0.0f) || p->top_k <= 0 || p->top_k >= s->n_vocab) return 0;
    if (p->repeat_penalty < 1.0f || p->frequency_penalty < 0.0f || p->presence_penalty < 0.0f) return 0;
    const int64_t need = (int64_t)p->top_k + (p->repeat_last_n > 0 ? p->repeat_last_n : 0);
    return (int32_t)(need < s->n_vocab ? need : s->n_vocab);
}

strata_status strata_sampler_sample_top(strata_sampler *s, const strata_token *ids, const float *logits,
                                        int32_t n, strata_token *out) {
    if (!s || !ids || !logits || !out)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_sampler_sample_top: NULL argument");
    const strata_sampler_params *p = &s->p;
    const int32_t need = strata_sampler_top_needed(s);
    if (need == 0 || n < need || n > s->n_vocab)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_sampler_sample_top: %d candidates, need %d (0: these "
                        "parameters need the whole row)", (int)n, (int)need);
    int any_finite = 0, all_pinf = 1;
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return st_error(STRATA_ERR_INVALID_ARG, "strata_sampler_sample_top: id %d outside the vocabulary",
                            (int)ids[i]);
        float l = logits[i];
        if (isnan(l)) l = -INFINITY;
        any_finite |= isfinite(l) != 0;
        all_pinf &= l == INFINITY;
        s->cand[i].id = ids[i];
        s->cand[i].logit = l;
    }
    if (!any_finite && all_pinf)
        return st_error(STRATA_ERR_UNSUPPORTED, "strata_sampler_sample_top: every candidate is +inf; sample "
                        "the whole row");
    if (!any_finite) /* a -inf or NaN among the best: nothing outside is finite either */
        return st_error(STRATA_ERR_INVALID_ARG,
                        "strata_sampler_sample: no finite logit among %lld", (long long)s->n_vocab);
    /* penalties on the candidates that are in the history (apply_penalties' arithmetic) */
    if (s->hist_len > 0 && !(p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f))
        for (int32_t i = 0; i < n; i++) {
            int32_t c = 0;
            for (int32_t h = 0; h < s->hist_len; h++) c += s->hist[h] == s->cand[i].id;
            if (c == 0) continue;
            float l = s->cand[i].logit;
            if (p->repeat_penalty != 1.0f) l = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
            l -= (float)c * p->frequency_penalty + (c > 0 ? p->presence_penalty : 0.0f);
            s->cand[i].logit = l;
        }
    int64_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (s->cand[i].logit > -INFINITY) s->cand[m++] = s->cand[i];
    if (m == 0)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_sampler_sample: every logit is -inf "
                        "after the penalties");
    qsort(s->cand, (size_t)m, sizeof *s->cand, cand_cmp);
    if (p->top_k < m) m = p->top_k;
    return finish_sorted(s, m, out);
}
