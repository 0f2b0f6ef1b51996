/* speculate.c - the verify window of speculative decoding (strata_session_speculate): the newest
 * token and the drafted ones evaluated in one forward pass of every row's logits, the drafts
 * verified in order by the sampler (strata_sampler_verify), the sampler's own token after the last
 * accepted one, and the rejected rows rolled back out of the KV cache. */
#include "session.h"

#include <stdlib.h>

strata_status strata_session_speculate(strata_session *s, strata_sampler *smp, strata_token last,
                                       const strata_token *draft, int32_t n_draft, strata_token *out,
                                       int32_t *n_out) {
    if (!s || !smp || !out || !n_out || (n_draft > 0 && !draft))
        return st_error(STRATA_ERR_INVALID_ARG, "strata_session_speculate: NULL argument");
    *n_out = 0;
    if (n_draft < 0 || n_draft > STRATA_DRAFT_MAX)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_session_speculate: n_draft %d outside 0..%d",
                        (int)n_draft, STRATA_DRAFT_MAX);
    const int32_t V = s->model->hp.n_vocab, n = n_draft + 1;
    if (!s->spec_logits && !(s->spec_logits = malloc(sizeof(float) * (size_t)V * (STRATA_DRAFT_MAX + 1))))
        return st_error(STRATA_ERR_NOMEM, "strata_session_speculate: out of memory for the window's rows");
    strata_token window[STRATA_DRAFT_MAX + 1];
    window[0] = last;
    for (int32_t i = 0; i < n_draft; i++) window[i + 1] = draft[i];
    const int32_t n_past0 = s->n_past;
    strata_status st = strata_session_decode_gen(s, window, n, s->spec_logits, 1);
    if (st != STRATA_OK) return st;
    int32_t emitted = 0, n_acc = 0, reached = 0;
    for (int32_t i = 0; i < n; i++) { /* row i: the token after window[0..i] */
        const float *row = s->spec_logits + (size_t)i * (size_t)V;
        strata_token t;
        int accepted = 0;
        reached += i < n_draft;
        st = i < n_draft ? strata_sampler_verify(smp, row, draft[i], &t, &accepted)
                         : strata_sampler_sample(smp, row, &t);
        if (st != STRATA_OK) break;
        strata_sampler_accept(smp, t);
        out[emitted++] = t;
        n_acc += accepted;
        if (!accepted || strata_token_is_eog(s->model, t)) break;
    }
    s->spec.windows++;
    s->spec.drafted += reached; /* drafts past the first rejected one have no verdict */
    s->spec.accepted += n_acc;
    s->spec.emitted += emitted;
    /* keep `last` and the drafts now in out[0..emitted-1); the final token is the next call's */
    const strata_status tr = strata_session_truncate(s, n_past0 + emitted);
    *n_out = emitted;
    return st != STRATA_OK ? st : tr;
}

strata_status strata_session_get_spec_stats(const strata_session *s, strata_spec_stats *out) {
    if (!s || !out) return st_error(STRATA_ERR_INVALID_ARG, "strata_session_get_spec_stats: NULL argument");
    *out = s->spec;
    return STRATA_OK;
}
