/* vocab_api.c - the public tokenizer functions of strata.h (strata_tokenize, strata_token_*,
 * strata_detokenize, strata_model_chat_template): argument checks and the buffer rules, over the
 * model's vocabulary (model->vocab, set by strata_model_load, also for vocab_only models). */
#include "model.h"
#include "vocab_impl.h"

#include <stdlib.h>
#include <string.h>

static strata_status st_need_vocab(const strata_model *model, const char *fn, const st_vocab **v) {
    *v = NULL;
    if (!model) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL model", fn);
    if (!model->vocab)
        return st_error(STRATA_ERR_UNSUPPORTED,
                        "%s: the model has no vocabulary (no tokenizer.ggml.model in the file)", fn);
    *v = model->vocab;
    return STRATA_OK;
}

static int st_is_special_attr(uint32_t a) { return (a & (ST_TOK_CONTROL | ST_TOK_UNKNOWN)) != 0; }

strata_status strata_tokenize(const strata_model *model, const char *text, int64_t len,
                              int add_special, int parse_special, strata_token *out, int64_t cap,
                              int64_t *n_out) {
    const st_vocab *v = NULL;
    ST_TRY(st_need_vocab(model, "strata_tokenize", &v));
    if (!n_out) return st_error(STRATA_ERR_INVALID_ARG, "strata_tokenize: NULL n_out");
    *n_out = 0;
    if (len < 0 || (!text && len > 0) || cap < 0 || (!out && cap > 0))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "strata_tokenize: bad arguments (len %lld, cap %lld, text %s, out %s)",
                        (long long)len, (long long)cap, text ? "set" : "NULL", out ? "set" : "NULL");
    st_tokens t = {0};
    strata_status st = st_vocab_tokenize(v, text ? text : "", (size_t)len, add_special ? 1 : 0,
                                         parse_special ? 1 : 0, &t);
    if (st) {
        free(t.v);
        return st;
    }
    *n_out = (int64_t)t.n;
    size_t k = t.n < (size_t)cap ? t.n : (size_t)cap;
    if (k) memcpy(out, t.v, k * sizeof *out);
    free(t.v);
    if (t.n > (size_t)cap)
        return st_error(STRATA_ERR_RANGE, "strata_tokenize: %zu tokens do not fit in %lld",
                        t.n, (long long)cap);
    return STRATA_OK;
}

/* The piece of token (empty for control/unknown tokens unless special). */
static void st_piece(const st_vocab *v, strata_token token, int special, const char **p,
                     size_t *n) {
    if (!special && st_is_special_attr(v->attr[token])) {
        *p = "";
        *n = 0;
        return;
    }
    *p = v->piece[token];
    *n = v->piece_len[token];
}

strata_status strata_token_to_piece(const strata_model *model, strata_token token, int special,
                                    char *buf, int64_t cap, int64_t *len_out) {
    const st_vocab *v = NULL;
    ST_TRY(st_need_vocab(model, "strata_token_to_piece", &v));
    if (!len_out) return st_error(STRATA_ERR_INVALID_ARG, "strata_token_to_piece: NULL len_out");
    *len_out = 0;
    if (cap < 0 || (!buf && cap > 0))
        return st_error(STRATA_ERR_INVALID_ARG, "strata_token_to_piece: bad buffer (cap %lld)",
                        (long long)cap);
    if (token < 0 || token >= v->n_tokens)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "strata_token_to_piece: token %d outside the vocabulary (0..%d)",
                        (int)token, (int)v->n_tokens - 1);
    const char *p;
    size_t n;
    st_piece(v, token, special, &p, &n);
    *len_out = (int64_t)n;
    size_t k = n < (size_t)cap ? n : (size_t)cap;
    if (k) memcpy(buf, p, k);
    if (n > (size_t)cap)
        return st_error(STRATA_ERR_RANGE, "strata_token_to_piece: %zu bytes do not fit in %lld",
                        n, (long long)cap);
    return STRATA_OK;
}

strata_status strata_detokenize(const strata_model *model, const strata_token *tokens, int64_t n,
                                int special, int strip_leading_space, char *buf, int64_t cap,
                                int64_t *len_out) {
    const st_vocab *v = NULL;
    ST_TRY(st_need_vocab(model, "strata_detokenize", &v));
    if (!len_out) return st_error(STRATA_ERR_INVALID_ARG, "strata_detokenize: NULL len_out");
    *len_out = 0;
    if (n < 0 || (!tokens && n > 0) || cap < 0 || (!buf && cap > 0))
        return st_error(STRATA_ERR_INVALID_ARG, "strata_detokenize: bad arguments (n %lld, cap %lld)",
                        (long long)n, (long long)cap);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= v->n_tokens)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "strata_detokenize: token %d at index %lld outside the vocabulary "
                            "(0..%d)", (int)tokens[i], (long long)i, (int)v->n_tokens - 1);
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *p;
        size_t k;
        st_piece(v, tokens[i], special, &p, &k);
        /* the space SentencePiece put before the text */
        if (i == 0 && strip_leading_space && v->add_space_prefix && k > 0 && p[0] == ' ' &&
            !(v->attr[tokens[0]] & (ST_TOK_CONTROL | ST_TOK_UNKNOWN | ST_TOK_USER_DEFINED))) {
            p++;
            k--;
        }
        if (total < (size_t)cap) {
            size_t room = (size_t)cap - total;
            memcpy(buf + total, p, k < room ? k : room);
        }
        total += k;
    }
    *len_out = (int64_t)total;
    if (total > (size_t)cap)
        return st_error(STRATA_ERR_RANGE, "strata_detokenize: %zu bytes do not fit in %lld",
                        total, (long long)cap);
    return STRATA_OK;
}

const char *strata_token_text(const strata_model *model, strata_token token) {
    if (!model || !model->vocab || token < 0 || token >= model->vocab->n_tokens) return NULL;
    return model->vocab->text[token];
}

strata_token strata_token_bos(const strata_model *model) {
    return model && model->vocab ? model->vocab->bos : -1;
}

strata_token strata_token_eos(const strata_model *model) {
    return model && model->vocab ? model->vocab->eos : -1;
}

int strata_token_is_eog(const strata_model *model, strata_token token) {
    if (!model || !model->vocab || token < 0 || token >= model->vocab->n_tokens) return 0;
    return model->vocab->eog[token] != 0;
}

int strata_token_is_control(const strata_model *model, strata_token token) {
    if (!model || !model->vocab || token < 0 || token >= model->vocab->n_tokens) return 0;
    return (model->vocab->attr[token] & ST_TOK_CONTROL) != 0;
}

const char *strata_model_chat_template(const strata_model *model) {
    return model && model->vocab ? model->vocab->chat_template : NULL;
}
