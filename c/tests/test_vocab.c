/* test_vocab.c - the tokenizer against llama.cpp's test vectors and handmade vocabularies.
 *
 *   - every input of ../shared/vocab/ggml-vocab-{gpt-2,qwen2,llama-bpe,llama-spm}.gguf.inp must
 *     give exactly the ids of the .out file (tokenized as llama.cpp's test-tokenizer-0 does:
 *     add_special = false, parse_special = false) and detokenize back to the same bytes;
 *   - the public API on vocabulary-only models: buffer rules, special tokens, BOS/EOS, EOG;
 *   - edge cases: empty text, only spaces, invalid UTF-8, 100 KB of text;
 *   - a handmade SentencePiece vocabulary (merge order by score, byte fallback) and handmade BPE
 *     files with bad metadata (unknown pre-tokenizer, missing merges).
 * The shared vectors are located through $STRATA_SHARED, else ../shared; absent: skipped. */
#include "test.h"
#include "gguf_build.h"
#include "strata.h"
#include "strata_gguf.h"
#include "vocab_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = 0; *len = (size_t)n; }
    return buf;
}

static const char *shared_dir(void) {
    const char *s = getenv("STRATA_SHARED");
    return s && *s ? s : "../shared";
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static st_tokens tok(const st_vocab *v, const char *s, size_t n, int add_special, int parse_special) {
    st_tokens t = {0};
    strata_status st = st_vocab_tokenize(v, s, n, add_special, parse_special, &t);
    CHECK(st == STRATA_OK, "tokenize: %s", strata_last_error());
    return t;
}

/* Concatenated pieces (special = 1), with the SentencePiece leading space removed if asked. */
static char *detok(const st_vocab *v, const st_tokens *t, int strip, size_t *len) {
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++) n += v->piece_len[t->v[i]];
    char *s = malloc(n + 1);
    size_t o = 0;
    for (size_t i = 0; i < t->n; i++) {
        memcpy(s + o, v->piece[t->v[i]], v->piece_len[t->v[i]]);
        o += v->piece_len[t->v[i]];
    }
    s[o] = 0;
    if (strip && o && s[0] == ' ') { memmove(s, s + 1, o); o--; }
    *len = o;
    return s;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "%s\n", n > 40 ? " ..." : "");
}

static st_vocab *load_vocab_file(const char *path) {
    strata_gguf *g = NULL;
    strata_gguf_params gp = strata_gguf_default_params();
    if (strata_gguf_open(path, &gp, &g) != STRATA_OK) return NULL;
    st_vocab *v = NULL;
    strata_status st = st_vocab_load(g, &v);
    CHECK(st == STRATA_OK, "st_vocab_load(%s): %s", path, strata_last_error());
    strata_gguf_free(g);
    return v;
}

/* ---------------------------------------------------------------------------------------------
 * llama.cpp's vectors
 * ------------------------------------------------------------------------------------------- */

static void test_vectors(const char *name) {
    char path[1024], pin[1100], pout[1100];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", shared_dir(), name);
    snprintf(pin, sizeof pin, "%s.inp", path);
    snprintf(pout, sizeof pout, "%s.out", path);
    size_t nin, nout;
    char *inp = read_file(pin, &nin), *out = read_file(pout, &nout);
    FILE *f = fopen(path, "rb");
    if (!inp || !out || !f) {
        SKIP("%s: vocabulary or vectors not found (set STRATA_SHARED to the shared folder)", path);
        free(inp);
        free(out);
        if (f) fclose(f);
        return;
    }
    fclose(f);
    st_vocab *v = load_vocab_file(path);
    if (!v) { free(inp); free(out); return; }
    const int spm = v->type == ST_VOCAB_SPM;

    /* inputs: separated by "\n__ggml_vocab_test__\n"; outputs: one line each */
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t seplen = sizeof sep - 1;
    size_t ip = 0, op = 0;
    int n_cases = 0, n_bad = 0, n_rt_bad = 0;
    while (ip < nin) {
        const char *next = strstr(inp + ip, sep);
        size_t ilen = next ? (size_t)(next - (inp + ip)) : nin - ip;
        const char *text = inp + ip;
        ip = next ? (size_t)(next - inp) + seplen : nin;
        /* expected ids */
        int32_t want[4096];
        size_t nw = 0;
        const char *line = out + op;
        const char *eol = memchr(line, '\n', nout - op);
        size_t llen = eol ? (size_t)(eol - line) : nout - op;
        op += llen + (eol ? 1 : 0);
        char *lbuf = malloc(llen + 1);
        memcpy(lbuf, line, llen);
        lbuf[llen] = 0;
        for (char *p = lbuf; *p;) {
            char *e;
            long x = strtol(p, &e, 10);
            if (e == p) { p++; continue; }
            if (nw < 4096) want[nw++] = (int32_t)x;
            p = e;
        }
        free(lbuf);

        st_tokens t = tok(v, text, ilen, 0, 0);
        int ok = t.n == nw && (nw == 0 || memcmp(t.v, want, nw * sizeof *want) == 0);
        n_cases++;
        if (!ok) {
            n_bad++;
            fprintf(stderr, "%s: case %d '%.*s'\n", name, n_cases, (int)(ilen > 80 ? 80 : ilen),
                    text);
            print_ids("want", want, nw);
            print_ids("got ", t.v, t.n);
        }
        size_t dl;
        char *d = detok(v, &t, spm, &dl);
        if (dl != ilen || memcmp(d, text, ilen) != 0) {
            n_rt_bad++;
            fprintf(stderr, "%s: case %d round trip: '%.*s' -> '%s'\n", name, n_cases,
                    (int)(ilen > 80 ? 80 : ilen), text, d);
        }
        free(d);
        free(t.v);
    }
    CHECK(n_cases > 10, "%s: only %d test strings read", name, n_cases);
    CHECK(n_bad == 0, "%s: %d of %d test strings tokenized differently", name, n_bad, n_cases);
    CHECK(n_rt_bad == 0, "%s: %d of %d test strings did not round-trip", name, n_rt_bad, n_cases);
    CHECK(op == nout, "%s: .out has more lines than .inp has strings", name);
    fprintf(stderr, "%s: %d strings checked\n", name, n_cases);
    st_vocab_free(v);
    free(inp);
    free(out);
}

/* ---------------------------------------------------------------------------------------------
 * Public API on vocabulary-only models
 * ------------------------------------------------------------------------------------------- */

static strata_model *load_model(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", shared_dir(), name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fclose(f);
    strata_model_params mp = strata_model_default_params();
    mp.vocab_only = 1;
    strata_model *m = NULL;
    strata_status st = strata_model_load(path, &mp, &m);
    CHECK(st == STRATA_OK, "strata_model_load(%s, vocab_only): %s", path, strata_last_error());
    return st == STRATA_OK ? m : NULL;
}

static void test_api(void) {
    strata_model *gpt2 = load_model("gpt-2"), *qwen = load_model("qwen2");
    strata_model *l3 = load_model("llama-bpe"), *spm = load_model("llama-spm");
    if (!gpt2 || !qwen || !l3 || !spm) {
        SKIP("public API: vocabularies not found under %s/vocab", shared_dir());
        strata_model_free(gpt2); strata_model_free(qwen); strata_model_free(l3); strata_model_free(spm);
        return;
    }
    strata_token ids[64];
    int64_t n = -1;

    /* buffer rule: *n_out is what the text needs, RANGE if it exceeds cap */
    const char *hw = "Hello world";
    CHECK(strata_tokenize(gpt2, hw, 11, 0, 0, ids, 64, &n) == STRATA_OK && n == 2 &&
          ids[0] == 15496 && ids[1] == 995, "gpt-2 'Hello world' n=%lld", (long long)n);
    CHECK(strata_tokenize(gpt2, hw, 11, 0, 0, ids, 1, &n) == STRATA_ERR_RANGE && n == 2,
          "cap 1: RANGE with n_out 2 (n=%lld)", (long long)n);
    CHECK(strata_tokenize(gpt2, hw, 11, 0, 0, NULL, 0, &n) == STRATA_ERR_RANGE && n == 2,
          "cap 0: count only");
    CHECK(strata_tokenize(gpt2, "", 0, 1, 1, NULL, 0, &n) == STRATA_OK && n == 0, "empty text");
    CHECK(strata_tokenize(NULL, hw, 11, 0, 0, ids, 64, &n) == STRATA_ERR_INVALID_ARG, "NULL model");
    CHECK(strata_tokenize(gpt2, hw, -1, 0, 0, ids, 64, &n) == STRATA_ERR_INVALID_ARG, "len < 0");

    /* pieces */
    char buf[64];
    int64_t len = -1;
    CHECK(strata_token_to_piece(gpt2, 995, 0, buf, sizeof buf, &len) == STRATA_OK && len == 6 &&
          memcmp(buf, " world", 6) == 0, "piece of 995");
    CHECK(strata_token_to_piece(gpt2, 995, 0, buf, 3, &len) == STRATA_ERR_RANGE && len == 6,
          "piece RANGE");
    CHECK(strata_token_to_piece(gpt2, 50257, 0, buf, sizeof buf, &len) == STRATA_ERR_INVALID_ARG,
          "token out of range");
    CHECK(strata_detokenize(gpt2, ids, 2, 0, 0, buf, sizeof buf, &len) == STRATA_OK && len == 11 &&
          memcmp(buf, hw, 11) == 0, "detokenize gpt-2");
    CHECK(strata_detokenize(gpt2, ids, 2, 0, 0, buf, 4, &len) == STRATA_ERR_RANGE && len == 11,
          "detokenize RANGE");
    CHECK(strcmp(strata_token_text(gpt2, 995), "\xc4\xa0world") == 0, "token text 995");
    CHECK(strata_token_text(gpt2, -1) == NULL && strata_token_text(gpt2, 50257) == NULL,
          "token text out of range");

    /* BOS / EOS / add_special / EOG */
    CHECK(strata_token_bos(gpt2) == 50256 && strata_token_eos(gpt2) == 50256, "gpt-2 bos/eos");
    CHECK(strata_tokenize(gpt2, hw, 11, 1, 0, ids, 64, &n) == STRATA_OK && n == 2,
          "gpt-2 adds no BOS (n=%lld)", (long long)n);
    CHECK(strata_token_is_eog(gpt2, 50256) && !strata_token_is_eog(gpt2, 995), "gpt-2 eog");
    CHECK(strata_tokenize(l3, hw, 11, 1, 0, ids, 64, &n) == STRATA_OK && n == 3 && ids[0] == 128000,
          "llama-bpe adds BOS 128000 (n=%lld, ids[0]=%d)", (long long)n, ids[0]);
    CHECK(strata_token_is_eog(l3, 128001) && strata_token_is_eog(l3, 128009) &&
          strata_token_is_control(l3, 128009), "llama-bpe <|end_of_text|>, <|eot_id|> eog");
    CHECK(strata_tokenize(spm, hw, 11, 1, 0, ids, 64, &n) == STRATA_OK && n == 3 && ids[0] == 1 &&
          ids[1] == 15043 && ids[2] == 3186, "llama-spm: BOS + ' Hello world'");
    CHECK(strata_detokenize(spm, ids, 3, 0, 1, buf, sizeof buf, &len) == STRATA_OK && len == 12 &&
          memcmp(buf, " Hello world", 12) == 0, "spm detok after BOS keeps the space (len %lld)",
          (long long)len);
    CHECK(strata_detokenize(spm, ids + 1, 2, 0, 1, buf, sizeof buf, &len) == STRATA_OK &&
          len == 11 && memcmp(buf, hw, 11) == 0, "spm detok strips the prefix space");
    CHECK(strata_detokenize(spm, ids, 3, 1, 0, buf, sizeof buf, &len) == STRATA_OK && len == 15 &&
          memcmp(buf, "<s> Hello world", 15) == 0, "spm detok special=1 shows <s>");
    CHECK(strata_token_is_eog(spm, 2) && !strata_token_is_eog(spm, 1), "spm eog </s>");

    /* special tokens: parse_special splits them out, otherwise they are text */
    const char *chat = "<|im_start|>user\nhi<|im_end|>";
    int32_t im_start = 151644, im_end = 151645;
    CHECK(strata_tokenize(qwen, chat, (int64_t)strlen(chat), 0, 1, ids, 64, &n) == STRATA_OK &&
          n >= 4 && ids[0] == im_start && ids[n - 1] == im_end, "qwen2 parse_special");
    int64_t n_plain = 0;
    CHECK(strata_tokenize(qwen, chat, (int64_t)strlen(chat), 0, 0, ids, 64, &n_plain) == STRATA_OK &&
          n_plain > n && ids[0] != im_start, "qwen2 without parse_special: text");
    CHECK(strata_token_is_eog(qwen, im_end) && strata_token_is_eog(qwen, 151643) &&
          strata_token_is_control(qwen, im_start) && !strata_token_is_eog(qwen, im_start),
          "qwen2 eog set");
    CHECK(strata_token_to_piece(qwen, im_end, 0, buf, sizeof buf, &len) == STRATA_OK && len == 0,
          "control piece empty without special");
    CHECK(strata_token_to_piece(qwen, im_end, 1, buf, sizeof buf, &len) == STRATA_OK && len == 10 &&
          memcmp(buf, "<|im_end|>", 10) == 0, "control piece with special");
    CHECK(strata_model_chat_template(gpt2) == NULL, "gpt-2 vocab has no chat template");

    strata_model_free(gpt2);
    strata_model_free(qwen);
    strata_model_free(l3);
    strata_model_free(spm);
}

/* ---------------------------------------------------------------------------------------------
 * Edge cases
 * ------------------------------------------------------------------------------------------- */

static void test_edges(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", shared_dir(), name);
    FILE *f = fopen(path, "rb");
    if (!f) { SKIP("%s not found", path); return; }
    fclose(f);
    st_vocab *v = load_vocab_file(path);
    if (!v) return;
    const int spm = v->type == ST_VOCAB_SPM;
    size_t dl;

    st_tokens t = tok(v, "", 0, 0, 0);
    CHECK(t.n == 0, "%s: empty text gives no tokens", name);
    free(t.v);
    t = tok(v, "", 0, 1, 0);
    CHECK(t.n == (size_t)(v->add_bos ? 1 : 0), "%s: empty text with add_special", name);
    free(t.v);

    const char *spaces = "      ";
    t = tok(v, spaces, 6, 0, 0);
    char *d = detok(v, &t, spm, &dl);
    CHECK(t.n > 0 && dl == 6 && memcmp(d, spaces, 6) == 0, "%s: only spaces round trip", name);
    free(d);
    free(t.v);

    /* invalid UTF-8: stray continuation, truncated sequence, 0xFF, a lone lead at the end */
    const char bad[] = "a\x80 b\xe2\x82 \xff\xfe x\xc3";
    t = tok(v, bad, sizeof bad - 1, 0, 0);
    d = detok(v, &t, spm, &dl);
    CHECK(dl == sizeof bad - 1 && memcmp(d, bad, dl) == 0, "%s: invalid UTF-8 round trip", name);
    free(d);
    free(t.v);

    /* 100 KB of mixed text in reasonable time */
    static const char unit[] = "The quick brown fox, 12345 \xf0\x9f\xa6\x99 jumps over \xe4\xbd\xa0\xe5\xa5\xbd! "
                               "d\xc3\xa9j\xc3\xa0 vu\n\t  I'm HERE'S   \r\n";
    size_t ul = sizeof unit - 1, total = 100 * 1024;
    char *big = malloc(total);
    for (size_t i = 0; i < total; i++) big[i] = unit[i % ul];
    total -= total % ul; /* whole units, so the text is valid UTF-8 */
    double t0 = now_s();
    t = tok(v, big, total, 0, 0);
    double dt = now_s() - t0;
    d = detok(v, &t, spm, &dl);
    CHECK(dl == total && memcmp(d, big, total) == 0, "%s: 100 KB round trip", name);
    CHECK(dt < 5.0, "%s: 100 KB took %.2f s", name, dt);
    fprintf(stderr, "%s: 100 KB -> %zu tokens in %.3f s\n", name, t.n, dt);
    free(d);
    free(t.v);
    /* one 100 KB word (a single pre-tokenizer piece) */
    memset(big, 'a', total);
    t0 = now_s();
    t = tok(v, big, total, 0, 0);
    dt = now_s() - t0;
    CHECK(t.n > 0 && dt < 5.0, "%s: 100 KB single word took %.2f s", name, dt);
    free(t.v);
    free(big);
    st_vocab_free(v);
}

/* ---------------------------------------------------------------------------------------------
 * Handmade vocabularies
 * ------------------------------------------------------------------------------------------- */

typedef struct { const char *text; float score; int type; } hm_tok;

/* A vocabulary-only GGUF: model, tokens, scores, types, optional pre and merges. */
static void build_vocab(gb_buf *b, const char *model, const char *pre, const hm_tok *toks, int n,
                        const char *const *merges, int n_merges, int with_scores) {
    int n_kv = 3 + (with_scores ? 1 : 0) + (pre ? 1 : 0) + (merges ? 1 : 0);
    gb_header(b, 3, 0, (uint64_t)n_kv);
    gb_kv_str(b, "tokenizer.ggml.model", model);
    if (pre) gb_kv_str(b, "tokenizer.ggml.pre", pre);
    gb_kv(b, "tokenizer.ggml.tokens", 9);
    gb_arr(b, 8, (uint64_t)n);
    for (int i = 0; i < n; i++) gb_str(b, toks[i].text);
    if (with_scores) {
        gb_kv(b, "tokenizer.ggml.scores", 9);
        gb_arr(b, 6, (uint64_t)n);
        for (int i = 0; i < n; i++) gb_f32(b, toks[i].score);
    }
    gb_kv(b, "tokenizer.ggml.token_type", 9);
    gb_arr(b, 5, (uint64_t)n);
    for (int i = 0; i < n; i++) gb_u32(b, (uint32_t)toks[i].type);
    if (merges) {
        gb_kv(b, "tokenizer.ggml.merges", 9);
        gb_arr(b, 8, (uint64_t)n_merges);
        for (int i = 0; i < n_merges; i++) gb_str(b, merges[i]);
    }
}

static strata_status load_mem(const gb_buf *b, st_vocab **v) {
    strata_gguf *g = NULL;
    strata_gguf_params gp = strata_gguf_default_params();
    strata_status st = strata_gguf_open_memory(b->p, b->len, 0, &gp, &g);
    CHECK(st == STRATA_OK, "open handmade gguf: %s", strata_last_error());
    if (st) return st;
    st = st_vocab_load(g, v);
    strata_gguf_free(g);
    return st;
}

#define U2581 "\xe2\x96\x81"

static void test_handmade_spm(void) {
    hm_tok toks[300];
    int n = 0;
    toks[n++] = (hm_tok){"<unk>", 0, 2};
    toks[n++] = (hm_tok){"<s>", 0, 3};
    toks[n++] = (hm_tok){"</s>", 0, 3};
    static char hex[256][7];
    for (int b = 0; b < 256; b++) {
        snprintf(hex[b], 7, "<0x%02X>", b);
        toks[n++] = (hm_tok){hex[b], 0, 6};
    }
    const int t_sp = n;           toks[n++] = (hm_tok){U2581, -1, 1};
    const int t_a = n;            toks[n++] = (hm_tok){"a", -2, 1};
    const int t_b = n;            toks[n++] = (hm_tok){"b", -2, 1};
    const int t_c = n;            toks[n++] = (hm_tok){"c", -2, 1};
    const int t_ab = n;           toks[n++] = (hm_tok){"ab", -5, 1};
    const int t_bc = n;           toks[n++] = (hm_tok){"bc", -3, 1};
    const int t_spa = n;          toks[n++] = (hm_tok){U2581 "a", -4, 1};
    const int t_spab = n;         toks[n++] = (hm_tok){U2581 "ab", -6, 1};
    gb_buf b = {0};
    build_vocab(&b, "llama", NULL, toks, n, NULL, 0, 1);
    st_vocab *v = NULL;
    if (load_mem(&b, &v)) { gb_free(&b); return; }
    CHECK(v->add_bos == 1 && v->add_space_prefix == 1 && v->bos == 1 && v->eos == 2 && v->unk == 0,
          "SPM defaults");

    /* " abc": symbols ▁ a b c; best pair by score: "bc" (-3) > "▁a" (-4) > "ab" (-5):
     * bc merges first, then ▁a; "▁abc" is no token -> [▁a, bc] */
    st_tokens t = tok(v, "abc", 3, 0, 0);
    CHECK(t.n == 2 && t.v[0] == t_spa && t.v[1] == t_bc, "SPM 'abc' -> [▁a bc] (n=%zu)", t.n);
    free(t.v);
    /* "ab": ▁a (-4) beats ab (-5); then ▁a+b = ▁ab */
    t = tok(v, "ab", 2, 1, 0);
    CHECK(t.n == 2 && t.v[0] == 1 && t.v[1] == t_spab, "SPM BOS + 'ab' -> [<s> ▁ab]");
    free(t.v);
    /* ties: "cc" has no pair token; byte fallback for an unknown character */
    t = tok(v, "\xc3\xa9", 2, 0, 0);
    CHECK(t.n == 3 && t.v[0] == t_sp && t.v[1] == 3 + 0xC3 && t.v[2] == 3 + 0xA9,
          "SPM byte fallback for e-acute (n=%zu)", t.n);
    size_t dl;
    char *d = detok(v, &t, 1, &dl);
    CHECK(dl == 2 && memcmp(d, "\xc3\xa9", 2) == 0, "SPM byte fallback round trip");
    free(d);
    free(t.v);
    /* a space run: each space is a ▁ symbol */
    t = tok(v, "a  b", 4, 0, 0);
    CHECK(t.n == 4 && t.v[0] == t_spa && t.v[1] == t_sp && t.v[2] == t_sp && t.v[3] == t_b,
          "SPM 'a  b' (n=%zu)", t.n);
    free(t.v);
    /* special tokens: parsed only with parse_special; the text after one gets a space prefix */
    t = tok(v, "a</s>a", 6, 0, 1);
    CHECK(t.n == 3 && t.v[0] == t_spa && t.v[1] == 2 && t.v[2] == t_spa, "SPM parse_special");
    free(t.v);
    (void)t_a; (void)t_c; (void)t_ab;
    st_vocab_free(v);
    gb_free(&b);

    /* no byte tokens: an unknown character becomes <unk> */
    hm_tok small[] = {{"<unk>", 0, 2}, {"<s>", 0, 3}, {"</s>", 0, 3}, {U2581, -1, 1}, {"x", -1, 1}};
    build_vocab(&b, "llama", NULL, small, 5, NULL, 0, 1);
    if (load_mem(&b, &v) == STRATA_OK) {
        t = tok(v, "x\xc3\xa9", 3, 0, 0);
        CHECK(t.n == 4 && t.v[0] == 3 && t.v[1] == 4 && t.v[2] == 0 && t.v[3] == 0,
              "SPM without byte tokens: unk per byte (n=%zu)", t.n);
        free(t.v);
        st_vocab_free(v);
    }
    gb_free(&b);
}

static void test_handmade_bpe(void) {
    /* GPT-2 byte chars for a few bytes: 'a' 'b' 'c' are themselves, space is U+0120 */
    hm_tok toks[] = {{"a", 0, 1}, {"b", 0, 1}, {"c", 0, 1}, {"\xc4\xa0", 0, 1},
                     {"ab", 0, 1}, {"bc", 0, 1}, {"\xc4\xa0" "a", 0, 1}, {"<|endoftext|>", 0, 3}};
    const char *merges[] = {"b c", "a b", "\xc4\xa0 a"};
    gb_buf b = {0};
    st_vocab *v = NULL;

    build_vocab(&b, "gpt2", "gpt-2", toks, 8, merges, 3, 0);
    strata_status st = load_mem(&b, &v);
    CHECK(st == STRATA_OK, "handmade BPE loads: %s", strata_last_error());
    if (!st) {
        /* "abc": ranks: "b c" 0 < "a b" 1 -> a + bc */
        st_tokens t = tok(v, "abc", 3, 0, 0);
        CHECK(t.n == 2 && t.v[0] == 0 && t.v[1] == 5, "BPE 'abc' -> [a bc]");
        free(t.v);
        t = tok(v, " ab", 3, 0, 0);
        /* " ab" is one piece: "Ġ a" rank 2, "a b" rank 1 -> Ġ + ab */
        CHECK(t.n == 2 && t.v[0] == 3 && t.v[1] == 4, "BPE ' ab' -> [Ġ ab]");
        free(t.v);
        /* "x" is in no token: dropped (llama.cpp's per-byte fallback finds nothing) */
        t = tok(v, "axb", 3, 0, 0);
        CHECK(t.n == 2 && t.v[0] == 0 && t.v[1] == 1, "BPE unknown byte dropped (n=%zu)", t.n);
        free(t.v);
        CHECK(v->eog[7] && (v->attr[7] & ST_TOK_CONTROL), "<|endoftext|> is eog");
        CHECK(v->bos == -1 && v->eos == -1, "BPE default ids 11 are out of range: none");
        st_vocab_free(v);
    }
    gb_free(&b);

    build_vocab(&b, "gpt2", "no-such-pre", toks, 8, merges, 3, 0);
    st = load_mem(&b, &v);
    CHECK(st == STRATA_ERR_UNSUPPORTED && strstr(strata_last_error(), "no-such-pre"),
          "unknown pre is an error naming it: %s", strata_last_error());
    gb_free(&b);

    build_vocab(&b, "gpt2", "gpt-2", toks, 8, NULL, 0, 0);
    st = load_mem(&b, &v);
    CHECK(st == STRATA_ERR_NOT_FOUND && strstr(strata_last_error(), "tokenizer.ggml.merges"),
          "missing merges: %s", strata_last_error());
    gb_free(&b);

    build_vocab(&b, "bert", NULL, toks, 8, NULL, 0, 0);
    st = load_mem(&b, &v);
    CHECK(st == STRATA_ERR_UNSUPPORTED && strstr(strata_last_error(), "bert"),
          "unsupported model named: %s", strata_last_error());
    gb_free(&b);

    hm_tok dup[] = {{"a", 0, 1}, {"a", 0, 1}};
    build_vocab(&b, "llama", NULL, dup, 2, NULL, 0, 0);
    st = load_mem(&b, &v);
    CHECK(st == STRATA_ERR_FORMAT && strstr(strata_last_error(), "duplicate"),
          "duplicate token: %s", strata_last_error());
    gb_free(&b);
}

/* End of generation as llama.cpp's load marks it: for gpt-oss's harmony tokens <|return|>,
 * <|call|> and <|endoftext|> end generation, <|end|> does not (it closes a message inside an
 * answer) and becomes user-defined with <|start|>, <|channel|>, <|message|>, <|constrain|>;
 * without <|return|> and <|call|> (phi-3 style) <|end|> ends generation. */
static void test_handmade_eog(void) {
    hm_tok toks[] = {{"a", 0, 1}, {"b", 0, 1}, {"<|endoftext|>", 0, 3}, {"<|start|>", 0, 3},
                     {"<|end|>", 0, 3}, {"<|message|>", 0, 3}, {"<|channel|>", 0, 3},
                     {"<|return|>", 0, 3}, {"<|call|>", 0, 3}, {"<|constrain|>", 0, 3}};
    const char *merges[] = {"a b"};
    enum { T_EOT = 2, T_START, T_END, T_MSG, T_CHAN, T_RET, T_CALL, T_CONS, N_TOK };
    gb_buf b = {0};
    st_vocab *v = NULL;
    build_vocab(&b, "gpt2", "gpt-4o", toks, N_TOK, merges, 1, 0);
    if (load_mem(&b, &v) == STRATA_OK) {
        int want[N_TOK] = {0};
        want[T_EOT] = want[T_RET] = want[T_CALL] = 1;
        for (int i = 0; i < N_TOK; i++)
            CHECK(v->eog[i] == want[i], "harmony: '%s' eog %d, expected %d", toks[i].text, v->eog[i], want[i]);
        const int user[] = {T_START, T_END, T_MSG, T_CHAN, T_CONS};
        for (size_t i = 0; i < ST_ARRAY_LEN(user); i++)
            CHECK(v->attr[user[i]] == ST_TOK_USER_DEFINED, "harmony: '%s' is user-defined",
                  toks[user[i]].text);
        /* user-defined tokens are split out even without parse_special; control ones are not */
        st_tokens t = tok(v, "<|start|>ab<|return|>", 21, 0, 0);
        CHECK(t.n >= 2 && t.v[0] == T_START && t.v[1] != T_RET, "harmony: <|start|> parsed (n=%zu)", t.n);
        free(t.v);
        st_vocab_free(v);
    }
    gb_free(&b);
    /* no <|return|> / <|call|>: <|end|> ends generation */
    hm_tok phi[] = {{"a", 0, 1}, {"b", 0, 1}, {"<|endoftext|>", 0, 3}, {"<|end|>", 0, 3}};
    build_vocab(&b, "gpt2", "gpt-2", phi, 4, merges, 1, 0);
    if (load_mem(&b, &v) == STRATA_OK) {
        CHECK(v->eog[2] && v->eog[3] && (v->attr[3] & ST_TOK_CONTROL), "phi-3: <|end|> is eog");
        st_vocab_free(v);
    }
    gb_free(&b);
}

int main(void) {
    test_vectors("gpt-2");
    test_vectors("qwen2");
    test_vectors("llama-bpe");
    test_vectors("llama-spm");
    test_api();
    test_edges("gpt-2");
    test_edges("llama-bpe");
    test_edges("llama-spm");
    test_handmade_spm();
    test_handmade_bpe();
    test_handmade_eog();
    return test_report();
}
