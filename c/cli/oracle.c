/* oracle.c - the oracle drafter (oracle.h): the plain run that computes the model's continuation,
 * and drafts from it with a chosen share of them made wrong. */
#include "oracle.h"

#include <stdio.h>
#include <stdlib.h>

int cli_oracle_wanted(const cli_opts *o) {
    return o->spec == CLI_SPEC_ORACLE || (o->spec == CLI_SPEC_AUTO && o->oracle_rate >= 0.0f);
}

/* The plain run: the sampler sees the prompt, then samples and decodes one token a step. */
static int oracle_run(cli_oracle *orc, const cli_opts *o, const strata_model *m, strata_session *sess,
                      strata_sampler *smp, float *logits, int64_t cap) {
    const int64_t n_prompt = orc->n_seq;
    const int32_t n_ctx = strata_session_n_ctx(sess);
    if (strata_session_decode(sess, orc->seq, n_prompt, logits, 0) != STRATA_OK)
        return cli_fail("--spec oracle: reading the prompt: %s", cli_lib_error());
    while (orc->n_seq < cap) {
        strata_token t;
        if (strata_sampler_sample(smp, logits, &t) != STRATA_OK)
            return cli_fail("--spec oracle: sampling: %s", cli_lib_error());
        orc->seq[orc->n_seq++] = t;
        if (!o->ignore_eos && strata_token_is_eog(m, t)) break;
        strata_sampler_accept(smp, t);
        if (orc->n_seq >= cap || strata_session_n_past(sess) >= n_ctx) break;
        if (strata_session_decode_gen(sess, &t, 1, logits, 0) != STRATA_OK)
            return cli_fail("--spec oracle: decode at position %d: %s", (int)strata_session_n_past(sess),
                            cli_lib_error());
    }
    return 0;
}

int cli_oracle_compute(cli_oracle *orc, const cli_opts *o, const strata_model *m, strata_session *sess,
                       const strata_token *toks, int64_t n, int n_predict) {
    strata_model_info mi;
    strata_model_get_info(m, &mi);
    const int64_t n_ctx = strata_session_n_ctx(sess);
    const int64_t cap = n_predict < 0 || n + n_predict > n_ctx + 1 ? n_ctx + 1 : n + n_predict;
    orc->n_vocab = mi.n_vocab;
    orc->rate = o->oracle_rate >= 0.0f ? o->oracle_rate : 1.0;
    orc->seed = o->sp.seed;
    orc->n_seq = n;
    orc->seq = malloc(sizeof *orc->seq * (size_t)cap);
    float *logits = malloc(sizeof(float) * (size_t)mi.n_vocab);
    strata_sampler *smp = NULL;
    int rc = 0;
    if (!orc->seq || !logits) rc = cli_fail("out of memory for the oracle's continuation");
    else if (strata_sampler_create(&o->sp, mi.n_vocab, &smp) != STRATA_OK)
        rc = cli_fail("--spec oracle: sampler: %s", cli_lib_error());
    if (!rc) {
        for (int64_t i = 0; i < n; i++) {
            orc->seq[i] = toks[i];
            strata_sampler_accept(smp, toks[i]);
        }
        strata_session_reset(sess);
        rc = oracle_run(orc, o, m, sess, smp, logits, cap);
        strata_session_reset(sess);
        strata_session_reset_stats(sess);
    }
    if (!rc && !o->quiet)
        fprintf(stderr, "strata: speculative decoding: the oracle (benchmarks only): drafts from the model's "
                "own continuation of %lld tokens, computed first, each right with probability %.2f, up to "
                "%d a window%s\n", (long long)(orc->n_seq - n), orc->rate, o->draft_max,
                o->spec == CLI_SPEC_AUTO ? ", the draft policy choosing (--spec auto)" : "");
    strata_sampler_free(smp);
    free(logits);
    return rc;
}

/* A uniform draw in [0, 1) and a second word, from the seed and a position (splitmix64). */
static double oracle_draw(uint64_t seed, int64_t pos, uint64_t *word) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (uint64_t)(pos + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    *word = z & 0xffffffffULL;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

void cli_oracle_propose(const cli_oracle *orc, const strata_token *history, int64_t n_history, int32_t max,
                        strata_token *out, int32_t *n_out) {
    *n_out = 0;
    if (n_history < 1 || n_history > orc->n_seq || history[n_history - 1] != orc->seq[n_history - 1]) return;
    for (int32_t i = 0; i < max && n_history + i < orc->n_seq; i++) {
        const int64_t pos = n_history + i;
        uint64_t w;
        strata_token t = orc->seq[pos];
        if (oracle_draw(orc->seed, pos, &w) >= orc->rate && orc->n_vocab > 1)
            t = (strata_token)((t + 1 + (int64_t)(w % (uint64_t)(orc->n_vocab - 1))) % orc->n_vocab);
        out[(*n_out)++] = t;
    }
}

void cli_oracle_free(cli_oracle *orc) {
    free(orc->seq);
    orc->seq = NULL;
    orc->n_seq = 0;
}
