/* vocab.c - the vocabulary: reads tokenizer.ggml.* from GGUF metadata the way llama.cpp's
 * llama_vocab::impl::load does (tokenizer type, pre-tokenizer, tokens, scores, token types,
 * merges, special ids and flags, the end-of-generation set, special-token attributes), builds the
 * lookup tables (text -> id, merge -> rank, byte -> token, token -> piece), and runs the
 * whole-text tokenization step (special tokens split out first, BOS/EOS) before handing raw text
 * to the BPE (vocab_bpe.c) or SentencePiece (vocab_spm.c) tokenizer. */
#include "vocab_impl.h"
#include "unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* =============================================================================================
 * Small helpers
 * =========================================================================================== */

int st_tokens_push(st_tokens *t, int32_t id) {
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        int32_t *nv = realloc(t->v, nc * sizeof *nv);
        if (!nv) return -1;
        t->v = nv;
        t->cap = nc;
    }
    t->v[t->n++] = id;
    return 0;
}

static uint64_t st_fnv1a(const void *p, size_t n, uint64_t h) {
    const uint8_t *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}
#define ST_FNV_INIT 14695981039346656037ull

static size_t st_pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

int32_t st_vocab_find(const st_vocab *v, const char *s, size_t n) {
    size_t i = (size_t)st_fnv1a(s, n, ST_FNV_INIT) & v->hash_mask;
    for (;;) {
        int32_t id = v->hash[i];
        if (id < 0) return -1;
        if (v->text_len[id] == n && memcmp(v->text[id], s, n) == 0) return id;
        i = (i + 1) & v->hash_mask;
    }
}

static uint64_t st_merge_hash(const char *l, size_t nl, const char *r, size_t nr) {
    uint64_t h = st_fnv1a(l, nl, ST_FNV_INIT);
    h = st_fnv1a(" ", 1, h);
    return st_fnv1a(r, nr, h);
}

int32_t st_vocab_merge_rank(const st_vocab *v, const char *l, size_t nl, const char *r,
                            size_t nr) {
    if (!v->merge_hash) return -1;
    size_t i = (size_t)st_merge_hash(l, nl, r, nr) & v->merge_mask;
    for (;;) {
        int32_t m = v->merge_hash[i];
        if (m < 0) return -1;
        const char *s = v->merge_pool + v->merge_off[m];
        if (v->merge_split[m] == nl && v->merge_len[m] == nl + 1 + nr && memcmp(s, l, nl) == 0 &&
            memcmp(s + nl + 1, r, nr) == 0)
            return m;
        i = (i + 1) & v->merge_mask;
    }
}

/* =============================================================================================
 * Metadata access
 * =========================================================================================== */

/* The array value of key with elements of type elem (or elem2); NOT_FOUND if absent. */
static strata_status st_get_array(const strata_gguf *g, const char *key, strata_gguf_type elem,
                                  strata_gguf_type elem2, strata_gguf_value *out) {
    int64_t i = strata_gguf_kv_find(g, key);
    if (i < 0) return STRATA_ERR_NOT_FOUND;
    ST_TRY(strata_gguf_kv_value(g, i, out));
    if (out->type != STRATA_GGUF_ARRAY ||
        (out->v.arr.elem_type != elem && out->v.arr.elem_type != elem2))
        return st_error(STRATA_ERR_TYPE, "%s: expected an array of %s, found %s%s%s", key,
                        strata_gguf_type_name(elem), strata_gguf_type_name(out->type),
                        out->type == STRATA_GGUF_ARRAY ? " of " : "",
                        out->type == STRATA_GGUF_ARRAY ? strata_gguf_type_name(out->v.arr.elem_type)
                                                       : "");
    return STRATA_OK;
}

/* Optional boolean key: leaves *out unchanged when absent. */
static strata_status st_get_flag(const strata_gguf *g, const char *key, int *out) {
    if (strata_gguf_kv_find(g, key) < 0) return STRATA_OK;
    int b;
    strata_status st = strata_gguf_get_bool(g, key, &b);
    if (st) return st_error(st, "%s: expected a bool", key);
    *out = b ? 1 : 0;
    return STRATA_OK;
}

/* Optional token id key: set when present and inside the vocabulary (llama.cpp keeps the default
 * for an out-of-range id). */
static strata_status st_get_id(const strata_gguf *g, const char *key, int32_t n, int32_t *out) {
    if (strata_gguf_kv_find(g, key) < 0) return STRATA_OK;
    uint64_t id;
    strata_status st = strata_gguf_get_u64(g, key, &id);
    if (st) return st_error(st, "%s: expected an unsigned integer token id", key);
    if (id < (uint64_t)n) *out = (int32_t)id;
    return STRATA_OK;
}

static strata_status st_dup_str(const char *p, uint64_t n, char **out) {
    char *s = malloc((size_t)n + 1);
    if (!s) return st_error(STRATA_ERR_NOMEM, "vocabulary: out of memory");
    memcpy(s, p, (size_t)n);
    s[n] = 0;
    *out = s;
    return STRATA_OK;
}

/* =============================================================================================
 * Loading: tokens and merges
 * =========================================================================================== */

static strata_status st_load_tokens(st_vocab *v, const strata_gguf *g) {
    strata_gguf_value arr, e;
    strata_status st = st_get_array(g, "tokenizer.ggml.tokens", STRATA_GGUF_STRING,
                                    STRATA_GGUF_STRING, &arr);
    if (st == STRATA_ERR_NOT_FOUND)
        return st_error(st, "tokenizer.ggml.tokens: key not found (the vocabulary's token list)");
    if (st) return st;
    if (arr.v.arr.count == 0 || arr.v.arr.count > (uint64_t)INT32_MAX / 2)
        return st_error(STRATA_ERR_FORMAT, "tokenizer.ggml.tokens: %llu tokens",
                        (unsigned long long)arr.v.arr.count);
    int32_t n = (int32_t)arr.v.arr.count;
    v->n_tokens = n;
    v->text = calloc((size_t)n, sizeof *v->text);
    v->text_len = calloc((size_t)n, sizeof *v->text_len);
    v->score = calloc((size_t)n, sizeof *v->score);
    v->attr = calloc((size_t)n, sizeof *v->attr);
    v->eog = calloc((size_t)n, 1);
    if (!v->text || !v->text_len || !v->score || !v->attr || !v->eog)
        return st_error(STRATA_ERR_NOMEM, "vocabulary: out of memory for %d tokens", n);

    /* pool: every text NUL-terminated; empty tokens become "[EMPTY_i]" as in llama.cpp */
    size_t pool = 0;
    for (int32_t i = 0; i < n; i++) {
        ST_TRY(strata_gguf_array_get(g, &arr, (uint64_t)i, &e));
        pool += (e.v.str.len ? (size_t)e.v.str.len : 20) + 1;
    }
    v->text_pool = malloc(pool);
    if (!v->text_pool) return st_error(STRATA_ERR_NOMEM, "vocabulary: out of memory");
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        ST_TRY(strata_gguf_array_get(g, &arr, (uint64_t)i, &e));
        char *dst = v->text_pool + off;
        size_t len;
        if (e.v.str.len) {
            len = (size_t)e.v.str.len;
            memcpy(dst, e.v.str.ptr, len);
        } else {
            len = (size_t)snprintf(dst, 21, "[EMPTY_%d]", (int)i);
        }
        dst[len] = 0;
        v->text[i] = dst;
        v->text_len[i] = (uint32_t)len;
        off += len + 1;
    }

    /* text -> id */
    size_t cap = st_pow2_at_least((size_t)n * 2);
    v->hash = malloc(cap * sizeof *v->hash);
    if (!v->hash) return st_error(STRATA_ERR_NOMEM, "vocabulary: out of memory");
    memset(v->hash, 0xff, cap * sizeof *v->hash);
    v->hash_mask = cap - 1;
    for (int32_t i = 0; i < n; i++) {
        size_t h = (size_t)st_fnv1a(v->text[i], v->text_len[i], ST_FNV_INIT) & v->hash_mask;
        while (v->hash[h] >= 0) {
            int32_t o = v->hash[h];
            if (v->text_len[o] == v->text_len[i] && memcmp(v->text[o], v->text[i], v->text_len[i]) == 0)
                return st_error(STRATA_ERR_FORMAT,
                                "tokenizer.ggml.tokens: duplicate token '%s' has ids %d and %d",
                                v->text[i], (int)o, (int)i);
            h = (h + 1) & v->hash_mask;
        }
        v->hash[h] = i;
    }

    /* scores (float32 or int32), optional */
    st = st_get_array(g, "tokenizer.ggml.scores", STRATA_GGUF_FLOAT32, STRATA_GGUF_INT32, &arr);
    if (st && st != STRATA_ERR_NOT_FOUND) return st;
    if (!st) {
        if (arr.v.arr.count < (uint64_t)n)
            return st_error(STRATA_ERR_FORMAT, "tokenizer.ggml.scores: %llu scores for %d tokens",
                            (unsigned long long)arr.v.arr.count, (int)n);
        for (int32_t i = 0; i < n; i++) {
            ST_TRY(strata_gguf_array_get(g, &arr, (uint64_t)i, &e));
            v->score[i] = e.type == STRATA_GGUF_FLOAT32 ? (float)e.v.f64 : (float)e.v.i64;
        }
    }

    /* token types, optional (default normal) */
    st = st_get_array(g, "tokenizer.ggml.token_type", STRATA_GGUF_INT32, STRATA_GGUF_INT32, &arr);
    if (st && st != STRATA_ERR_NOT_FOUND) return st;
    int have_types = !st;
    if (have_types && arr.v.arr.count < (uint64_t)n)
        return st_error(STRATA_ERR_FORMAT, "tokenizer.ggml.token_type: %llu types for %d tokens",
                        (unsigned long long)arr.v.arr.count, (int)n);
    for (int32_t i = 0; i < n; i++) {
        int64_t t = 1;
        if (have_types) {
            ST_TRY(strata_gguf_array_get(g, &arr, (uint64_t)i, &e));
            t = e.v.i64;
        }
        switch (t) {
            case 1: v->attr[i] = ST_TOK_NORMAL; break;
            case 2: v->attr[i] = ST_TOK_UNKNOWN; break;
            case 3: v->attr[i] = ST_TOK_CONTROL; break;
            case 4: v->attr[i] = ST_TOK_USER_DEFINED; break;
            case 5: v->attr[i] = ST_TOK_UNUSED; break;
            case 6: v->attr[i] = ST_TOK_BYTE; break;
            default: v->attr[i] = ST_TOK_UNDEFINED; break;
        }
    }
    return STRATA_OK;
}

static strata_status st_load_merges(st_vocab *v, const strata_gguf *g) {
    strata_gguf_value arr, e;
    strata_status st = st_get_array(g, "tokenizer.ggml.merges", STRATA_GGUF_STRING,
                                    STRATA_GGUF_STRING, &arr);
    if (st == STRATA_ERR_NOT_FOUND)
        return st_error(st, "tokenizer.ggml.merges: key not found (a gpt2 vocabulary needs its "
                            "BPE merges)");
    if (st) return st;
    if (arr.v.arr.count > (uint64_t)INT32_MAX / 4)
        return st_error(STRATA_ERR_FORMAT, "tokenizer.ggml.merges: %llu merges",
                        (unsigned long long)arr.v.arr.count);
    int32_t n = (int32_t)arr.v.arr.count;
    size_t pool = 0;
    for (int32_t i = 0; i < n; i++) {
        ST_TRY(strata_gguf_array_get(g, &arr, (uint64_t)i, &e));
        pool += (size_t)e.v.str.len + 1;
        if (pool > UINT32_MAX) return st_error(STRATA_ERR_FORMAT, "tokenizer.ggml.merges: too large");
    }
    v->merge_pool = malloc(pool ? pool : 1);
    v->merge_off = malloc(((size_t)n + 1) * sizeof *v->merge_off);
    v->merge_split = malloc(((size_t)n + 1) * sizeof *v->merge_split);
    v->merge_len = malloc(((size_t)n + 1) * sizeof *v->merge_len);
    size_t cap = st_pow2_at_least((size_t)n * 2);
    v->merge_hash = malloc(cap * sizeof *v->merge_hash);
    if (!v->merge_pool || !v->merge_off || !v->merge_split || !v->merge_len || !v->merge_hash)
        return st_error(STRATA_ERR_NOMEM, "vocabulary: out of memory for %d merges", (int)n);
    memset(v->merge_hash, 0xff, cap * sizeof *v->merge_hash);
    v->merge_mask = cap - 1;
    v->n_merges = n;
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        ST_TRY(strata_gguf_array_get(g, &arr, (uint64_t)i, &e));
        size_t len = (size_t)e.v.str.len;
        char *s = v->merge_pool + off;
        memcpy(s, e.v.str.ptr, len);
        s[len] = 0;
        v->merge_off[i] = (uint32_t)off;
        v->merge_len[i] = (uint32_t)len;
        off += len + 1;
        /* llama.cpp splits at the first space after the first byte; no space: ("", "") */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp) {
            v->merge_split[i] = UINT32_MAX; /* never matches a lookup */
            continue;
        }
        size_t nl = (size_t)(sp - s);
        v->merge_split[i] = (uint32_t)nl;
        /* the first of equal pairs keeps its rank (std::unordered_map::emplace) */
        if (st_vocab_merge_rank(v, s, nl, sp + 1, len - nl - 1) >= 0) continue;
        size_t h = (size_t)st_merge_hash(s, nl, sp + 1, len - nl - 1) & v->merge_mask;
        while (v->merge_hash[h] >= 0) h = (h + 1) & v->merge_mask;
        v->merge_hash[h] = i;
    }
    return STRATA_OK;
}

/* =============================================================================================
 * Loading: special tokens, end of generation, attributes (llama.cpp's text-based detection)
 * =========================================================================================== */

/* If *id is unset, the lowest id whose text is in list becomes it (and a control token). */
static void st_detect(st_vocab *v, int32_t *id, const char *const *list) {
    if (*id >= 0) return;
    for (const char *const *t = list; *t; t++) {
        int32_t k = st_vocab_find(v, *t, strlen(*t));
        if (k >= 0 && (*id < 0 || k < *id)) *id = k;
    }
    if (*id >= 0) v->attr[*id] |= ST_TOK_CONTROL;
}

static const char *const eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>", NULL};
static const char *const eom_texts[] = {"<|eom_id|>", NULL};
static const char *const fim_pre_texts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
    "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const fim_suf_texts[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
    "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const fim_mid_texts[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
    "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const fim_pad_texts[] = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const fim_rep_texts[] = {
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
static const char *const fim_sep_texts[] = {"<|file_sep|>", NULL};

/* Texts llama.cpp marks as end of generation. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[", NULL};

static int32_t st_find_str(const st_vocab *v, const char *s) { return st_vocab_find(v, s, strlen(s)); }

static void st_mark_special(st_vocab *v) {
    const int32_t n = v->n_tokens;
    st_detect(v, &v->eot, eot_texts);
    st_detect(v, &v->eom, eom_texts);
    st_detect(v, &v->fim_pre, fim_pre_texts);
    st_detect(v, &v->fim_suf, fim_suf_texts);
    st_detect(v, &v->fim_mid, fim_mid_texts);
    st_detect(v, &v->fim_pad, fim_pad_texts);
    st_detect(v, &v->fim_rep, fim_rep_texts);
    st_detect(v, &v->fim_sep, fim_sep_texts);

    /* control tokens named "...unused..." are unused */
    for (int32_t i = 0; i < n; i++)
        if ((v->attr[i] & ST_TOK_CONTROL) && strstr(v->text[i], "unused"))
            v->attr[i] |= ST_TOK_UNUSED;

    /* the end-of-generation set */
    if (v->fim_pad >= 0) v->eog[v->fim_pad] = 1;
    if (v->fim_rep >= 0) v->eog[v->fim_rep] = 1;
    if (v->fim_sep >= 0) v->eog[v->fim_sep] = 1;
    for (const char *const *t = eog_texts; *t; t++) {
        int32_t k = st_find_str(v, *t);
        if (k < 0) continue;
        v->eog[k] = 1;
        v->attr[k] |= ST_TOK_CONTROL;
    }
    /* gpt-oss: these are always rendered */
    static const char *const user_texts[] = {"<|channel|>", "<|message|>", "<|start|>",
                                             "<|constrain|>", NULL};
    for (const char *const *t = user_texts; *t; t++) {
        int32_t k = st_find_str(v, *t);
        if (k >= 0) v->attr[k] = ST_TOK_USER_DEFINED;
    }
    if (v->eos >= 0) v->eog[v->eos] = 1;
    if (v->eot >= 0) v->eog[v->eot] = 1;
    if (v->eom >= 0) v->eog[v->eom] = 1;

    /* harmony / solar-open: "<|end|>" is not an end of generation there */
    int32_t ret = st_find_str(v, "<|return|>"), call = st_find_str(v, "<|call|>");
    int32_t calls = st_find_str(v, "<|calls|>"), flush = st_find_str(v, "<|flush|>");
    int32_t end = st_find_str(v, "<|end|>");
    int has_ret = ret >= 0 && v->eog[ret];
    int has_call = (call >= 0 && v->eog[call]) || (calls >= 0 && v->eog[calls]);
    int has_flush = flush >= 0 && v->eog[flush];
    if (end >= 0 && v->eog[end] && ((has_ret && has_call) || (has_call && has_flush))) {
        v->eog[end] = 0;
        v->attr[end] = ST_TOK_USER_DEFINED;
    }
    /* gemma4 / paddleocr: "</s>" is not an end of generation when "<|tool_response>" is */
    int32_t tr = st_find_str(v, "<|tool_response>"), s = st_find_str(v, "</s>");
    if (tr >= 0 && v->eog[tr] && s >= 0 && v->eog[s]) {
        v->eog[s] = 0;
        v->attr[s] = ST_TOK_NORMAL;
    }
}

/* Special tokens (control, user-defined, unknown), longest text first, ties by id. */
static strata_status st_build_special(st_vocab *v) {
    int32_t cnt = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (v->attr[i] & (ST_TOK_CONTROL | ST_TOK_USER_DEFINED | ST_TOK_UNKNOWN)) cnt++;
    v->special = malloc(((size_t)cnt + 1) * sizeof *v->special);
    if (!v->special) return st_error(STRATA_ERR_NOMEM, "vocabulary: out of memory");
    v->n_special = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (v->attr[i] & (ST_TOK_CONTROL | ST_TOK_USER_DEFINED | ST_TOK_UNKNOWN))
            v->special[v->n_special++] = i;
    /* insertion sort by length, stable (counts are small) */
    for (int32_t i = 1; i < v->n_special; i++) {
        int32_t x = v->special[i], j = i - 1;
        while (j >= 0 && v->text_len[v->special[j]] < v->text_len[x]) {
            v->special[j + 1] = v->special[j];
            j--;
        }
        v->special[j + 1] = x;
    }
    return STRATA_OK;
}

/* =============================================================================================
 * Loading: token -> piece cache and byte tokens
 * =========================================================================================== */

static int st_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte of a "<0xXX>" token, or -1. */
static int st_byte_of(const st_vocab *v, int32_t id) {
    const char *t = v->text[id];
    if (v->text_len[id] < 5 || t[0] != '<' || t[1] != '0' || t[2] != 'x') return -1;
    int hi = st_hex(t[3]), lo = st_hex(t[4]);
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
}

/* The piece of token id with special = 1 (llama.cpp's token_to_piece) into dst (room for
 * 4 * text length + 8); returns its length. */
static size_t st_make_piece(const st_vocab *v, int32_t id, char *dst) {
    const uint32_t a = v->attr[id];
    const char *t = v->text[id];
    const size_t n = v->text_len[id];
    if (a & (ST_TOK_UNKNOWN | ST_TOK_CONTROL | ST_TOK_USER_DEFINED)) {
        memcpy(dst, t, n);
        return n;
    }
    if (a & ST_TOK_NORMAL) {
        size_t o = 0;
        if (v->type == ST_VOCAB_SPM) { /* U+2581 -> space */
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
                    dst[o++] = ' ';
                    i += 3;
                } else {
                    dst[o++] = t[i++];
                }
            }
            return o;
        }
        /* BPE: each code point back through the byte decoder (unmapped ones stay as text) */
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int bad;
            size_t k = st_utf8_decode((const uint8_t *)t + i, n - i, &cp, &bad);
            int b = bad ? -1 : st_bpe_cp_byte(cp);
            if (b >= 0) dst[o++] = (char)b;
            else { memcpy(dst + o, t + i, k); o += k; }
            i += k;
        }
        return o;
    }
    if (a & ST_TOK_BYTE) {
        int b = st_byte_of(v, id);
        if (b >= 0) { dst[0] = (char)b; return 1; }
        return 0;
    }
    return 0; /* unused / undefined tokens have no text */
}

static strata_status st_build_pieces(st_vocab *v) {
    const int32_t n = v->n_tokens;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) total += v->text_len[i] + 1;
    v->piece_pool = malloc(total + 8);
    v->piece = calloc((size_t)n, sizeof *v->piece);
    v->piece_len = calloc((size_t)n, sizeof *v->piece_len);
    if (!v->piece_pool || !v->piece || !v->piece_len)
        return st_error(STRATA_ERR_NOMEM, "vocabulary: out of memory for the piece cache");
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        /* a piece is never longer than its text */
        size_t k = st_make_piece(v, i, v->piece_pool + off);
        v->piece_pool[off + k] = 0;
        v->piece_len[i] = (uint32_t)k;
        off += k + 1;
    }
    off = 0;
    for (int32_t i = 0; i < n; i++) { /* pointers after the pool is final */
        v->piece[i] = v->piece_pool + off;
        off += (size_t)v->piece_len[i] + 1;
    }

    for (int b = 0; b < 256; b++) {
        int32_t id = -1;
        if (v->type == ST_VOCAB_BPE) {
            uint8_t u[4];
            int k = st_utf8_encode(st_bpe_byte_cp((uint8_t)b), u);
            id = st_vocab_find(v, (const char *)u, (size_t)k);
        } else {
            char hex[7];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            id = st_vocab_find(v, hex, 6);
            if (id < 0) {
                char c = (char)b;
                id = st_vocab_find(v, &c, 1);
            }
        }
        v->byte_token[b] = id;
    }
    return STRATA_OK;
}

/* =============================================================================================
 * Loading: the whole vocabulary
 * =========================================================================================== */

void st_vocab_free(st_vocab *v) {
    if (!v) return;
    free(v->text);
    free(v->text_len);
    free(v->score);
    free(v->attr);
    free(v->eog);
    free(v->piece);
    free(v->piece_len);
    free(v->text_pool);
    free(v->piece_pool);
    free(v->hash);
    free(v->merge_pool);
    free(v->merge_off);
    free(v->merge_split);
    free(v->merge_len);
    free(v->merge_hash);
    free(v->special);
    st_pretok_free(v->pretok);
    free(v->pre_name);
    free(v->chat_template);
    free(v);
}

int32_t st_vocab_n_tokens(const st_vocab *v) { return v ? v->n_tokens : 0; }

static strata_status st_vocab_load_into(st_vocab *v, const strata_gguf *g) {
    const char *model;
    uint64_t model_len;
    strata_status st = strata_gguf_get_str(g, "tokenizer.ggml.model", &model, &model_len);
    if (st == STRATA_ERR_NOT_FOUND)
        return st_error(st, "tokenizer.ggml.model: key not found (the file has no vocabulary)");
    if (st) return st_error(st, "tokenizer.ggml.model: expected a string");
    if (model_len == 5 && memcmp(model, "llama", 5) == 0) {
        v->type = ST_VOCAB_SPM;
    } else if (model_len == 4 && memcmp(model, "gpt2", 4) == 0) {
        v->type = ST_VOCAB_BPE;
    } else {
        return st_error(STRATA_ERR_UNSUPPORTED,
                        "tokenizer.ggml.model '%.*s' is not supported (supported: 'llama' "
                        "SentencePiece, 'gpt2' byte-level BPE)",
                        (int)(model_len > 64 ? 64 : model_len), model);
    }

    /* type defaults (llama.cpp) */
    v->bos = v->eos = v->eot = v->eom = v->unk = v->sep = v->pad = v->mask = -1;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = -1;
    if (v->type == ST_VOCAB_SPM) {
        v->bos = 1;
        v->eos = 2;
        v->unk = 0;
        v->add_space_prefix = 1;
        v->add_bos = 1;
        v->add_eos = 0;
    } else {
        v->bos = 11;
        v->eos = 11;
        const char *pre = "default";
        uint64_t pre_len = 7;
        st = strata_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pre_len);
        if (st == STRATA_ERR_NOT_FOUND) {
            pre = "default"; /* llama.cpp: missing pre-tokenizer type -> 'default' */
            pre_len = 7;
        } else if (st) {
            return st_error(st, "tokenizer.ggml.pre: expected a string");
        }
        ST_TRY(st_dup_str(pre, pre_len, &v->pre_name));
        v->pre = st_pretok_find(pre, (size_t)pre_len);
        if (!v->pre)
            return st_error(STRATA_ERR_UNSUPPORTED,
                            "unknown pre-tokenizer type tokenizer.ggml.pre = '%s'", v->pre_name);
        v->ignore_merges = (v->pre->flags & ST_PRE_IGNORE_MERGES) != 0;
        v->add_bos = (v->pre->flags & ST_PRE_ADD_BOS) != 0;
        if (v->pre->flags & ST_PRE_NO_BOS) v->bos = -1;
        ST_TRY(st_pretok_create(v->pre->set, &v->pretok));
        ST_TRY(st_load_merges(v, g));
    }
    ST_TRY(st_get_flag(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix));

    ST_TRY(st_load_tokens(v, g));
    const int32_t n = v->n_tokens;
    int32_t *defaults[] = {&v->bos, &v->eos, &v->unk};
    for (size_t i = 0; i < ST_ARRAY_LEN(defaults); i++)
        if (*defaults[i] >= n) *defaults[i] = -1;

    static const struct { const char *key; size_t off; } ids[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(st_vocab, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(st_vocab, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(st_vocab, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(st_vocab, eom)},
        {"tokenizer.ggml.unknown_token_id", offsetof(st_vocab, unk)},
        {"tokenizer.ggml.seperator_token_id", offsetof(st_vocab, sep)},
        {"tokenizer.ggml.padding_token_id", offsetof(st_vocab, pad)},
        {"tokenizer.ggml.mask_token_id", offsetof(st_vocab, mask)},
        {"tokenizer.ggml.fim_pre_token_id", offsetof(st_vocab, fim_pre)},
        {"tokenizer.ggml.fim_suf_token_id", offsetof(st_vocab, fim_suf)},
        {"tokenizer.ggml.fim_mid_token_id", offsetof(st_vocab, fim_mid)},
        {"tokenizer.ggml.fim_pad_token_id", offsetof(st_vocab, fim_pad)},
        {"tokenizer.ggml.fim_rep_token_id", offsetof(st_vocab, fim_rep)},
        {"tokenizer.ggml.fim_sep_token_id", offsetof(st_vocab, fim_sep)},
        {"tokenizer.ggml.prefix_token_id", offsetof(st_vocab, fim_pre)},
        {"tokenizer.ggml.suffix_token_id", offsetof(st_vocab, fim_suf)},
        {"tokenizer.ggml.middle_token_id", offsetof(st_vocab, fim_mid)},
    };
    for (size_t i = 0; i < ST_ARRAY_LEN(ids); i++)
        ST_TRY(st_get_id(g, ids[i].key, n, (int32_t *)((char *)v + ids[i].off)));

    ST_TRY(st_get_flag(g, "tokenizer.ggml.add_bos_token", &v->add_bos));
    ST_TRY(st_get_flag(g, "tokenizer.ggml.add_eos_token", &v->add_eos));
    if (v->add_bos && v->bos < 0)
        return st_error(STRATA_ERR_FORMAT, "tokenizer.ggml.add_bos_token is true, but "
                                           "tokenizer.ggml.bos_token_id is not set");
    if (v->add_eos && v->eos < 0)
        return st_error(STRATA_ERR_FORMAT, "tokenizer.ggml.add_eos_token is true, but "
                                           "tokenizer.ggml.eos_token_id is not set");

    st_mark_special(v);
    ST_TRY(st_build_special(v));
    ST_TRY(st_build_pieces(v));

    const char *tmpl;
    uint64_t tmpl_len;
    st = strata_gguf_get_str(g, "tokenizer.chat_template", &tmpl, &tmpl_len);
    if (!st) ST_TRY(st_dup_str(tmpl, tmpl_len, &v->chat_template));
    else if (st != STRATA_ERR_NOT_FOUND)
        return st_error(st, "tokenizer.chat_template: expected a string");
    st_error_clear();
    return STRATA_OK;
}

strata_status st_vocab_load(const strata_gguf *g, st_vocab **out) {
    if (!g || !out) return st_error(STRATA_ERR_INVALID_ARG, "st_vocab_load: NULL argument");
    *out = NULL;
    st_vocab *v = calloc(1, sizeof *v);
    if (!v) return st_error(STRATA_ERR_NOMEM, "vocabulary: out of memory");
    strata_status st = st_vocab_load_into(v, g);
    if (st) {
        st_vocab_free(v);
        return st;
    }
    *out = v;
    return STRATA_OK;
}

/* =============================================================================================
 * Tokenize: special-token partition, then the tokenizer per raw fragment
 * =========================================================================================== */

typedef struct {
    int32_t token;   /* >= 0: a special token; -1: raw text */
    size_t off, len; /* raw text */
} st_frag;

typedef struct {
    st_frag *v;
    size_t n, cap;
} st_frags;

static int st_frags_push(st_frags *f, int32_t token, size_t off, size_t len) {
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 16;
        st_frag *nv = realloc(f->v, nc * sizeof *nv);
        if (!nv) return -1;
        f->v = nv;
        f->cap = nc;
    }
    f->v[f->n].token = token;
    f->v[f->n].off = off;
    f->v[f->n].len = len;
    f->n++;
    return 0;
}

/* llama.cpp's tokenizer_st_partition: each special token in turn (longest first) cuts every raw
 * fragment at each of its occurrences. */
static int st_partition(const st_vocab *v, const char *text, size_t len, int parse_special,
                        st_frags *cur) {
    st_frags nxt = {0};
    if (st_frags_push(cur, -1, 0, len)) return -1;
    for (int32_t s = 0; s < v->n_special; s++) {
        int32_t id = v->special[s];
        if (!parse_special && (v->attr[id] & (ST_TOK_CONTROL | ST_TOK_UNKNOWN))) continue;
        const char *t = v->text[id];
        size_t tl = v->text_len[id];
        int any = 0;
        for (size_t i = 0; i < cur->n && !any; i++)
            if (cur->v[i].token < 0 && cur->v[i].len >= tl &&
                memmem(text + cur->v[i].off, cur->v[i].len, t, tl))
                any = 1;
        if (!any) continue;
        nxt.n = 0;
        for (size_t i = 0; i < cur->n; i++) {
            st_frag f = cur->v[i];
            if (f.token >= 0) {
                if (st_frags_push(&nxt, f.token, 0, 0)) goto nomem;
                continue;
            }
            size_t pos = f.off, endp = f.off + f.len;
            for (;;) {
                const char *m = endp - pos >= tl ? memmem(text + pos, endp - pos, t, tl) : NULL;
                if (!m) break;
                size_t at = (size_t)(m - text);
                if (at > pos && st_frags_push(&nxt, -1, pos, at - pos)) goto nomem;
                if (st_frags_push(&nxt, id, 0, 0)) goto nomem;
                pos = at + tl;
            }
            if (pos < endp && st_frags_push(&nxt, -1, pos, endp - pos)) goto nomem;
        }
        st_frags tmp = *cur;
        *cur = nxt;
        nxt = tmp;
    }
    free(nxt.v);
    return 0;
nomem:
    free(nxt.v);
    return -1;
}

strata_status st_vocab_tokenize(const st_vocab *v, const char *text, size_t len, int add_special,
                                int parse_special, st_tokens *out) {
    st_frags fr = {0};
    char *buf = NULL;
    strata_status st = STRATA_OK;
    if (len > 0 && st_partition(v, text, len, parse_special, &fr)) goto nomem;

    if (add_special && v->add_bos && st_tokens_push(out, v->bos)) goto nomem;
    int prev_special = 1; /* SPM: a space prefix goes before the first raw fragment */
    for (size_t i = 0; i < fr.n && !st; i++) {
        const st_frag *f = &fr.v[i];
        if (f->token >= 0) {
            if (st_tokens_push(out, f->token)) goto nomem;
            prev_special = 1;
            continue;
        }
        if (v->type == ST_VOCAB_BPE) {
            st = st_bpe_tokenize(v, text + f->off, f->len, out);
            continue;
        }
        /* SentencePiece: optional leading space, then spaces escaped to U+2581 */
        size_t spaces = (v->add_space_prefix && prev_special) ? 1 : 0;
        for (size_t k = 0; k < f->len; k++) spaces += text[f->off + k] == ' ';
        char *nb = realloc(buf, f->len + 2 * spaces + 1);
        if (!nb) goto nomem;
        buf = nb;
        size_t o = 0;
        if (v->add_space_prefix && prev_special) { memcpy(buf, "\xe2\x96\x81", 3); o = 3; }
        for (size_t k = 0; k < f->len; k++) {
            char c = text[f->off + k];
            if (c == ' ') { memcpy(buf + o, "\xe2\x96\x81", 3); o += 3; }
            else buf[o++] = c;
        }
        st = st_spm_tokenize(v, buf, o, out);
        prev_special = 0;
    }
    if (!st && add_special && v->add_eos && st_tokens_push(out, v->eos)) goto nomem;
    free(fr.v);
    free(buf);
    return st;
nomem:
    free(fr.v);
    free(buf);
    return st_error(STRATA_ERR_NOMEM, "tokenize: out of memory for %zu bytes of text", len);
}

/* ---- merge queue ------------------------------------------------------------------------------ */

static int st_bigram_before(const st_bigram *a, const st_bigram *b) {
    return a->priority > b->priority || (a->priority == b->priority && a->left < b->left);
}

int st_bigram_heap_push(st_bigram_heap *h, st_bigram x) {
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        st_bigram *nv = realloc(h->v, nc * sizeof *nv);
        if (!nv) return -1;
        h->v = nv;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) { /* sift up */
        size_t p = (i - 1) / 2;
        if (!st_bigram_before(&x, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = x;
    return 0;
}

st_bigram st_bigram_heap_pop(st_bigram_heap *h) {
    st_bigram top = h->v[0];
    st_bigram x = h->v[--h->n];
    size_t i = 0;
    for (;;) { /* sift the last element down from the root */
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const st_bigram *best = &x;
        if (l < h->n && st_bigram_before(&h->v[l], best)) { m = l; best = &h->v[l]; }
        if (r < h->n && st_bigram_before(&h->v[r], best)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = x;
    return top;
}
