/* test_session.c - sessions and the forward pass on the trained tiny OLMoE model
 * (../shared/models/strata-tiny-moe-q8_0.gguf, or $STRATA_SHARED/models/...; skipped when
 * absent): one batch vs token by token vs batches of 3, repeatability, 1 vs 2 threads, greedy
 * continuation of "Dictionary, n." (also through strata_tokenize/detokenize), context-full error, truncate + re-decode, f16 vs f32 KV
 * cache, argument errors, a session outliving strata_model_free, the routing trace, and a
 * prefill/decode timing
 * line. */
#include "test.h"
#include "strata.h"
#include "strata_gguf.h"

#include <math.h>
#include <string.h>
#include <time.h>

static strata_model *model;
static int32_t V;

/* "Dictionary, n." in the model's byte-level BPE (D iction ary , Ġn .), from its merges. */
static const strata_token PROMPT[] = {36, 2679, 597, 12, 294, 14};
#define N_PROMPT 6
#define N_GEN 40
#define N_ALL (N_PROMPT + N_GEN)
static strata_token seq[N_ALL];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int argmax(const float *x, int32_t n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static strata_session *make_session(int32_t n_ctx, int32_t n_batch, strata_type kv, int threads) {
    strata_session_params p = strata_session_default_params();
    p.n_ctx = n_ctx;
    p.n_batch = n_batch;
    p.kv_type = kv;
    p.n_threads = threads;
    strata_session *s = NULL;
    strata_status st = strata_session_create(model, &p, &s);
    CHECK(st == STRATA_OK && s, "session_create: %s", strata_last_error());
    return s;
}

/* Logits of every position of seq, decoded in chunks of `step` tokens per call. */
static float *run_all(int32_t n_batch, int step, strata_type kv, int threads) {
    strata_session *s = make_session(256, n_batch, kv, threads);
    float *lg = malloc(sizeof(float) * (size_t)N_ALL * (size_t)V);
    if (!s) return lg;
    for (int off = 0; off < N_ALL; off += step) {
        int n = N_ALL - off < step ? N_ALL - off : step;
        strata_status st = strata_session_decode(s, seq + off, n, lg + (size_t)off * (size_t)V, 1);
        CHECK(st == STRATA_OK, "decode: %s", strata_last_error());
    }
    CHECK(strata_session_n_past(s) == N_ALL, "n_past %d", strata_session_n_past(s));
    strata_session_free(s);
    return lg;
}

/* Token texts straight from the GGUF vocabulary (byte-level BPE: 'Ġ' is a space, 'Ċ' a newline),
 * so this test does not depend on the tokenizer code. */
static void print_tokens(const char *label, const strata_token *t, int n) {
    const strata_gguf *g = strata_model_gguf(model);
    int64_t ki = strata_gguf_kv_find(g, "tokenizer.ggml.tokens");
    strata_gguf_value arr;
    if (ki < 0 || strata_gguf_kv_value(g, ki, &arr) != STRATA_OK) return;
    fprintf(stderr, "%s: \"", label);
    for (int i = 0; i < n; i++) {
        strata_gguf_value v;
        if (strata_gguf_array_get(g, &arr, (uint64_t)t[i], &v) != STRATA_OK) continue;
        const unsigned char *p = (const unsigned char *)v.v.str.ptr;
        for (uint64_t j = 0; j < v.v.str.len; j++) {
            if (j + 1 < v.v.str.len && p[j] == 0xC4 && p[j + 1] == 0xA0) { fputc(' ', stderr); j++; }
            else if (j + 1 < v.v.str.len && p[j] == 0xC4 && p[j + 1] == 0x8A) { fputs("\\n", stderr); j++; }
            else fputc(p[j], stderr);
        }
    }
    fprintf(stderr, "\"\n");
}

static void test_greedy(void) {
    strata_session *s = make_session(256, 512, STRATA_TYPE_F16, 2);
    if (!s) return;
    float *lg = malloc(sizeof(float) * (size_t)V);
    memcpy(seq, PROMPT, sizeof PROMPT);
    CHECK(strata_session_decode(s, PROMPT, N_PROMPT, lg, 0) == STRATA_OK, "prompt: %s", strata_last_error());
    for (int i = 0; i < N_GEN; i++) {
        seq[N_PROMPT + i] = argmax(lg, V);
        CHECK(strata_session_decode(s, &seq[N_PROMPT + i], 1, lg, 0) == STRATA_OK, "step: %s",
              strata_last_error());
    }
    print_tokens("greedy continuation", seq, N_ALL);
    /* the tokenizer agrees with the merge-derived prompt ids, and detokenizes the text */
    strata_token ids[16];
    int64_t n_ids = 0;
    strata_status st = strata_tokenize(model, "Dictionary, n.", 14, 1, 0, ids, 16, &n_ids);
    CHECK(st == STRATA_OK && n_ids == N_PROMPT && memcmp(ids, PROMPT, sizeof PROMPT) == 0,
          "strata_tokenize(\"Dictionary, n.\"): %s, %lld ids", strata_last_error(), (long long)n_ids);
    char text[1024];
    int64_t len = 0;
    st = strata_detokenize(model, seq, N_ALL, 0, 0, text, sizeof text - 1, &len);
    CHECK(st == STRATA_OK && len > 0 && strncmp(text, "Dictionary, n.", 14) == 0, "detokenize: %s",
          strata_last_error());
    if (st == STRATA_OK) {
        text[len] = 0;
        fprintf(stderr, "detokenized: %s\n", text);
    }
    /* a trained model's greedy text is mostly frequent tokens, not noise: most ids are in the
     * lower half of the (frequency-ordered BPE) vocabulary and it does not collapse to one id */
    int low = 0, distinct = 0;
    for (int i = N_PROMPT; i < N_ALL; i++) {
        low += seq[i] < V / 2;
        int seen = 0;
        for (int j = N_PROMPT; j < i; j++) seen |= seq[j] == seq[i];
        distinct += !seen;
    }
    CHECK(low > N_GEN / 2 && distinct > 8, "greedy text looks degenerate (%d low ids, %d distinct)", low, distinct);
    free(lg);
    strata_session_free(s);
}

/* strata_session_decode_greedy: the argmax of the logits strata_session_decode gives (the same
 * continuation as test_greedy's), one token per step; argument errors. */
static void test_decode_greedy(void) {
    strata_session *s = make_session(256, 512, STRATA_TYPE_F16, 2);
    if (!s) return;
    strata_token next = -1, t;
    CHECK(strata_session_decode_greedy(s, PROMPT, N_PROMPT, &next) == STRATA_OK, "prompt: %s",
          strata_last_error());
    int same = next == seq[N_PROMPT];
    for (int i = 0; i < N_GEN - 1 && same; i++) {
        t = next;
        CHECK(strata_session_decode_greedy(s, &t, 1, &next) == STRATA_OK, "step: %s", strata_last_error());
        same = next == seq[N_PROMPT + i + 1];
    }
    CHECK(same, "decode_greedy leaves the argmax continuation");
    CHECK(strata_session_decode_greedy(s, PROMPT, 1, NULL) == STRATA_ERR_INVALID_ARG, "NULL next");
    CHECK(strata_session_decode_greedy(s, PROMPT, 0, &next) == STRATA_ERR_INVALID_ARG, "n 0");
    CHECK(strata_session_decode_greedy(NULL, PROMPT, 1, &next) == STRATA_ERR_INVALID_ARG, "NULL session");
    strata_session_free(s);
}

/* strata_session_decode_topk: the k best of the logits strata_session_decode gives, in candidate
 * order (checked against a sort of the whole row), for k 1, 40 and 104; argument errors. */
static void test_decode_topk(void) {
    strata_session *a = make_session(256, 512, STRATA_TYPE_F16, 2), *b = make_session(256, 512, STRATA_TYPE_F16, 2);
    float *lg = malloc(sizeof(float) * (size_t)V), vals[104];
    strata_token ids[104];
    int ok = a && b && lg;
    const int ks[3] = {1, 40, 104};
    for (int step = 0; ok && step < 3; step++) {
        const strata_token *in = step == 0 ? PROMPT : seq + N_PROMPT + step - 1;
        const int64_t n = step == 0 ? N_PROMPT : 1;
        ok = strata_session_decode_topk(a, in, n, ks[step], ids, vals) == STRATA_OK &&
             strata_session_decode(b, in, n, lg, 0) == STRATA_OK;
        CHECK(ok, "decode_topk: %s", strata_last_error());
        for (int i = 0; ok && i < ks[step]; i++) { /* ids[i] has exactly i tokens before it */
            int before = 0;
            for (int32_t t = 0; t < V; t++)
                before += lg[t] > lg[ids[i]] || (lg[t] == lg[ids[i]] && t < ids[i]);
            ok = before == i && vals[i] == lg[ids[i]];
        }
        CHECK(ok, "decode_topk k=%d: not the row's %d best in candidate order", ks[step], ks[step]);
    }
    if (a) {
        CHECK(strata_session_decode_topk(a, PROMPT, 1, 0, ids, vals) == STRATA_ERR_INVALID_ARG, "k 0");
        CHECK(strata_session_decode_topk(a, PROMPT, 1, V + 1, ids, vals) == STRATA_ERR_INVALID_ARG, "k > n_vocab");
        CHECK(strata_session_decode_topk(a, PROMPT, 1, 4, NULL, vals) == STRATA_ERR_INVALID_ARG, "NULL ids");
    }
    free(lg);
    strata_session_free(a);
    strata_session_free(b);
}

static double max_rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)a[i]));
    }
    return d / (m > 0 ? m : 1);
}

static void test_batching(void) {
    const size_t n = (size_t)N_ALL * (size_t)V;
    float *one = run_all(512, N_ALL, STRATA_TYPE_F16, 2);      /* one call, one batch */
    float *tok = run_all(512, 1, STRATA_TYPE_F16, 2);          /* token by token */
    float *b3 = run_all(3, N_ALL, STRATA_TYPE_F16, 2);         /* one call, batches of 3 */
    float *c7 = run_all(512, 7, STRATA_TYPE_F16, 2);           /* calls of 7 tokens */
    int same_tok = 1, same_b3 = 1, same_c7 = 1;
    for (int i = 0; i < N_ALL; i++) {
        int a = argmax(one + (size_t)i * V, V);
        same_tok &= a == argmax(tok + (size_t)i * V, V);
        same_b3 &= a == argmax(b3 + (size_t)i * V, V);
        same_c7 &= a == argmax(c7 + (size_t)i * V, V);
    }
    CHECK(same_tok && same_b3 && same_c7, "argmax per position: token-by-token %d, batches of 3 %d, calls of 7 %d",
          same_tok, same_b3, same_c7);
    double d1 = max_rel_diff(one, tok, n), d3 = max_rel_diff(one, b3, n), d7 = max_rel_diff(one, c7, n);
    CHECK(d1 < 1e-3 && d3 < 1e-3 && d7 < 1e-3, "batch vs token-by-token rel diff %g, batches of 3 %g, calls of 7 %g",
          d1, d3, d7);
    /* stronger: every output element is one fixed sequence of operations whatever the batch */
    CHECK(memcmp(one, tok, n * 4) == 0 && memcmp(one, b3, n * 4) == 0, "batched logits bit-identical to token-by-token");
    /* the last row of greedy generation is the argmax chain itself */
    int chain = 1;
    for (int i = N_PROMPT - 1; i < N_ALL - 1; i++) chain &= argmax(one + (size_t)i * V, V) == seq[i + 1];
    CHECK(chain, "all-logits argmax chain reproduces the greedy continuation");

    float *again = run_all(512, N_ALL, STRATA_TYPE_F16, 2);
    CHECK(memcmp(one, again, n * 4) == 0, "two runs bit-identical");
    float *t1 = run_all(512, N_ALL, STRATA_TYPE_F16, 1);
    float *t3 = run_all(512, N_ALL, STRATA_TYPE_F16, 3);
    CHECK(memcmp(one, t1, n * 4) == 0 && memcmp(one, t3, n * 4) == 0, "1 vs 2 vs 3 threads bit-identical");

    float *f32 = run_all(512, N_ALL, STRATA_TYPE_F32, 2);
    int same = 1, considered = 0;
    for (int i = 0; i < N_ALL; i++) {
        const float *r = f32 + (size_t)i * V;
        int a = argmax(r, V);
        float second = -INFINITY;
        for (int j = 0; j < V; j++) if (j != a && r[j] > second) second = r[j];
        if (r[a] - second > 1e-2f) { considered++; same &= a == argmax(one + (size_t)i * V, V); }
    }
    /* f16 rounding of k/v is ~5e-4 relative, but it can flip a near-tie in top-k routing, which
     * moves a position's logits by up to a few percent (measured 2.3% max, 0.6% mean) */
    double dk = max_rel_diff(f32, one, n);
    CHECK(same && considered > N_ALL / 2, "f16 vs f32 KV: same argmax at %d positions with margin", considered);
    CHECK(dk < 5e-2, "f16 vs f32 KV rel diff %g", dk);
    fprintf(stderr, "f16 vs f32 KV cache: max rel logit diff %.3g\n", dk);

    /* truncate, then re-decode the dropped tokens: the same logits */
    strata_session *s = make_session(256, 512, STRATA_TYPE_F16, 2);
    if (s) {
        float *lg = malloc(sizeof(float) * n);
        strata_session_decode(s, seq, N_ALL, NULL, 0);
        CHECK(strata_session_truncate(s, 20) == STRATA_OK && strata_session_n_past(s) == 20, "truncate");
        CHECK(strata_session_decode(s, seq + 20, N_ALL - 20, lg, 1) == STRATA_OK, "re-decode");
        CHECK(memcmp(lg, one + (size_t)20 * V, (size_t)(N_ALL - 20) * V * 4) == 0,
              "truncate + re-decode gives the original logits");
        CHECK(strata_session_truncate(s, N_ALL + 1) == STRATA_ERR_INVALID_ARG, "truncate beyond n_past");
        strata_session_reset(s);
        CHECK(strata_session_n_past(s) == 0, "reset");
        CHECK(strata_session_decode(s, seq, N_ALL, lg, 0) == STRATA_OK, "decode after reset");
        CHECK(memcmp(lg, one + (size_t)(N_ALL - 1) * V, (size_t)V * 4) == 0, "last-token logits after reset");
        free(lg);
        strata_session_free(s);
    }
    /* last-token logits when the call spans several batches */
    s = make_session(256, 5, STRATA_TYPE_F16, 2);
    if (s) {
        float *lg = malloc(sizeof(float) * (size_t)V);
        CHECK(strata_session_decode(s, seq, N_ALL, lg, 0) == STRATA_OK, "decode in batches of 5");
        CHECK(memcmp(lg, one + (size_t)(N_ALL - 1) * V, (size_t)V * 4) == 0,
              "last-token logits over batches of 5 equal the one-batch row");
        free(lg);
        strata_session_free(s);
    }
    free(one); free(tok); free(b3); free(c7); free(again); free(t1); free(t3); free(f32);
}

/* strata_session_params_check: create's verdict without creating; and what only a create found
 * before (a RAM budget too small for one token's experts, a backend not usable here). */
static void test_params_check(void) {
    strata_session_params p = strata_session_default_params();
    CHECK(strata_session_params_check(model, &p) == STRATA_OK, "defaults: %s", strata_last_error());
    CHECK(strata_session_params_check(model, NULL) == STRATA_OK, "NULL params: the defaults");
    CHECK(strata_session_params_check(NULL, &p) == STRATA_ERR_INVALID_ARG, "NULL model");
    p.degrade_eval = 1;
    CHECK(strata_session_params_check(model, &p) == STRATA_ERR_INVALID_ARG &&
              strstr(strata_last_error(), "degrade_eval"), "degrade_eval alone: %s", strata_last_error());
    p = strata_session_default_params();
    p.placement.ram_budget = 1;
    CHECK(strata_session_params_check(model, &p) == STRATA_ERR_INVALID_ARG &&
              strstr(strata_last_error(), "ram_budget 1 bytes holds 0 experts"), "ram_budget 1: %s",
          strata_last_error());
    char msg[512];
    snprintf(msg, sizeof msg, "%s", strata_last_error());
    strata_session *s = NULL;
    CHECK(strata_session_create(model, &p, &s) == STRATA_ERR_INVALID_ARG && !s &&
              strcmp(strata_last_error(), msg) == 0, "create says the same: %s", strata_last_error());
    p.placement.ram_budget = 64 << 20;
    CHECK(strata_session_params_check(model, &p) == STRATA_OK, "ram_budget 64M: %s", strata_last_error());
    p = strata_session_default_params();
    p.backend = STRATA_BACKEND_CUDA;
    strata_backend_info bi;
    strata_backend_query(STRATA_BACKEND_CUDA, &bi);
    strata_status st = strata_session_params_check(model, &p);
    CHECK(bi.available ? st == STRATA_OK : st == STRATA_ERR_UNSUPPORTED && strstr(strata_last_error(), "cuda"),
          "backend cuda (available %d): %s", bi.available, strata_last_error());
}

static void test_errors(void) {
    strata_session *s = make_session(16, 4, STRATA_TYPE_F16, 1);
    if (!s) return;
    CHECK(strata_session_n_ctx(s) == 16, "n_ctx");
    CHECK(strata_session_decode(s, seq, 10, NULL, 0) == STRATA_OK, "10 tokens");
    strata_status st = strata_session_decode(s, seq, 8, NULL, 0);
    CHECK(st == STRATA_ERR_RANGE && strstr(strata_last_error(), "context full") &&
              strstr(strata_last_error(), "n_ctx 16"), "context full: %s", strata_last_error());
    CHECK(strata_session_n_past(s) == 10, "nothing evaluated on a full context");
    CHECK(strata_session_decode(s, seq, 6, NULL, 0) == STRATA_OK && strata_session_n_past(s) == 16, "fill exactly");
    strata_token bad[2] = {1, V};
    strata_session_reset(s);
    st = strata_session_decode(s, bad, 2, NULL, 0);
    CHECK(st == STRATA_ERR_INVALID_ARG && strstr(strata_last_error(), "vocabulary"), "bad token: %s",
          strata_last_error());
    CHECK(strata_session_decode(s, bad, 0, NULL, 0) == STRATA_OK, "n = 0 is a no-op");
    strata_session_free(s);
    strata_session_params p = strata_session_default_params();
    p.kv_type = STRATA_TYPE_Q8_0;
    strata_session *s2 = NULL;
    CHECK(strata_session_create(model, &p, &s2) == STRATA_ERR_INVALID_ARG && !s2, "kv_type q8_0 refused");
    p = strata_session_default_params();
    for (int v = -2; v <= 4; v += 6) { /* attn_tc takes -1 .. 3 */
        p.cuda.attn_tc = v;
        CHECK(strata_session_create(model, &p, &s2) == STRATA_ERR_INVALID_ARG && !s2 &&
                  strstr(strata_last_error(), "attn_tc"), "attn_tc %d refused: %s", v, strata_last_error());
    }
    p.cuda.attn_tc = 0;
    p.placement.cpu_warm = 2;
    CHECK(strata_session_create(model, &p, &s2) == STRATA_ERR_INVALID_ARG && !s2 &&
              strstr(strata_last_error(), "cpu_warm"), "cpu_warm 2 refused: %s", strata_last_error());
    p.placement.cpu_warm = 0;
    for (int v = -1; v <= 2; v += 3) { /* q8_tiles takes 0 or 1 (the default) */
        p.cuda.q8_tiles = v;
        CHECK(strata_session_create(model, &p, &s2) == STRATA_ERR_INVALID_ARG && !s2 &&
                  strstr(strata_last_error(), "q8_tiles"), "q8_tiles %d refused: %s", v, strata_last_error());
    }
    CHECK(strata_session_default_params().cuda.q8_tiles == 1, "q8_tiles on by default");
    p.cuda.q8_tiles = 0;
    for (int v = -1; v <= 2; v += 3) { /* q8_sm60 takes 0 (the default) or 1 */
        p.cuda.q8_sm60 = v;
        CHECK(strata_session_create(model, &p, &s2) == STRATA_ERR_INVALID_ARG && !s2 &&
                  strstr(strata_last_error(), "q8_sm60"), "q8_sm60 %d refused: %s", v, strata_last_error());
    }
    CHECK(strata_session_default_params().cuda.q8_sm60 == 0, "q8_sm60 off by default");
    p.cuda.q8_sm60 = 0;
    for (int v = -2; v <= 2; v += 4) { /* cpu_misses takes -1 (auto, the default), 0 or 1 */
        p.placement.cpu_misses = v;
        CHECK(strata_session_create(model, &p, &s2) == STRATA_ERR_INVALID_ARG && !s2 &&
                  strstr(strata_last_error(), "cpu_misses"), "cpu_misses %d refused: %s", v, strata_last_error());
    }
    CHECK(strata_session_default_params().placement.cpu_misses == -1, "cpu_misses auto by default");
    p.placement.cpu_misses = -1;
    p.cuda.attn_tc = 3;
    CHECK(strata_session_create(model, &p, &s2) == STRATA_OK, "attn_tc 3, cpu_warm 0: %s", strata_last_error());
    strata_session_free(s2);
    s2 = NULL;
    p = strata_session_default_params();
    CHECK(strata_session_create(model, &p, &s2) == STRATA_OK && strata_session_n_ctx(s2) == 1024,
          "n_ctx 0 = n_ctx_train");
    strata_session_free(s2);
    test_params_check();
}

/* Prefill 256 tokens, decode 64 (2 threads): a timing line, not a check. */
static void bench(void) {
    strata_session *s = make_session(1024, 512, STRATA_TYPE_F16, 2);
    if (!s) return;
    strata_token p[256];
    for (int i = 0; i < 256; i++) p[i] = seq[i % N_ALL];
    float *lg = malloc(sizeof(float) * (size_t)V);
    double t0 = now();
    strata_session_decode(s, p, 256, lg, 0);
    double t1 = now();
    for (int i = 0; i < 64; i++) {
        strata_token t = argmax(lg, V);
        strata_session_decode(s, &t, 1, lg, 0);
    }
    double t2 = now();
    fprintf(stderr, "tiny model, 2 threads: prefill 256 tokens %.1f tok/s, decode 64 tokens %.1f tok/s\n",
            256 / (t1 - t0), 64 / (t2 - t1));
    free(lg);
    strata_session_free(s);
}

/* Profile mode times every phase without changing a bit of the output; counters reset. */
static void test_profile(void) {
    strata_token toks[40];
    for (int i = 0; i < 40; i++) toks[i] = (strata_token)(3 + 101 * i % 8000);
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    strata_session_stats st[2];
    for (int prof = 0; prof < 2; prof++) {
        strata_session_params sp = strata_session_default_params();
        sp.n_ctx = 128;
        sp.n_batch = 16;
        sp.profile = prof;
        strata_session *s = NULL;
        CHECK(strata_session_create(model, &sp, &s) == STRATA_OK, "session: %s", strata_last_error());
        if (!s) continue;
        strata_status r = strata_session_decode(s, toks, 36, NULL, 0);
        for (int i = 36; i < 40 && r == STRATA_OK; i++)
            r = strata_session_decode(s, toks + i, 1, prof ? b : a, 0);
        CHECK(r == STRATA_OK, "decode");
        strata_session_get_stats(s, &st[prof]);
        if (prof) {
            strata_session_reset_stats(s);
            strata_session_stats z;
            strata_session_get_stats(s, &z);
            double sum = 0;
            for (int i = 0; i < STRATA_PHASE_COUNT; i++) sum += z.phase_seconds[i];
            CHECK(z.profile == 1 && z.forward_calls == 0 && z.forward_tokens == 0 && sum == 0.0,
                  "reset_stats zeroes the profile");
        }
        strata_session_free(s);
    }
    CHECK(!memcmp(a, b, sizeof(float) * (size_t)V), "profile on: logits bit-identical to off");
    CHECK(st[0].profile == 0 && st[0].forward_calls == 0, "profile off: nothing counted");
    /* 36 tokens in batches of 16: 3 passes, then 4 single-token passes */
    CHECK(st[1].forward_calls == 7 && st[1].forward_tokens == 40, "passes %lld, tokens %lld",
          (long long)st[1].forward_calls, (long long)st[1].forward_tokens);
    int timed = 0;
    for (int i = 0; i < STRATA_PHASE_COUNT; i++) timed += st[1].phase_seconds[i] > 0.0;
    /* the default model has no shared expert: that phase still gets the residual add */
    CHECK(timed == STRATA_PHASE_COUNT, "every phase timed (%d of %d)", timed, STRATA_PHASE_COUNT);
    /* next-layer prediction: 5 of 6 layers scored per token; the trained model's routing carries
     * over between layers far better than chance (4 of 32 experts: 12.5%; measured ~77%) */
    CHECK(st[1].predict_slots == 40LL * 5 * 4, "predicted slots %lld", (long long)st[1].predict_slots);
    CHECK(st[1].predict_hits > st[1].predict_slots / 4 && st[1].predict_hits <= st[1].predict_slots,
          "prediction hits %lld of %lld", (long long)st[1].predict_hits, (long long)st[1].predict_slots);
    CHECK(st[0].predict_slots == 0, "no prediction without profile");
    CHECK(strcmp(strata_phase_name(STRATA_PHASE_EXPERTS), "experts") == 0 &&
          strcmp(strata_phase_name((strata_phase)99), "?") == 0, "phase names");
    free(a);
    free(b);
}

typedef struct { int calls; int64_t done[8], total[8]; int bad_what; } prog_rec;
static void on_progress(const char *what, int64_t done, int64_t total, void *ud) {
    prog_rec *p = ud;
    if (strcmp(what, "prompt") != 0) p->bad_what = 1;
    if (p->calls < 8) { p->done[p->calls] = done; p->total[p->calls] = total; }
    p->calls++;
}

/* The progress callback: one report per batch of a call spanning several, none otherwise. */
static void test_progress(void) {
    prog_rec rec;
    memset(&rec, 0, sizeof rec);
    strata_session_params sp = strata_session_default_params();
    sp.n_ctx = 128;
    sp.n_batch = 16;
    sp.progress = on_progress;
    sp.progress_data = &rec;
    strata_session *s = NULL;
    CHECK(strata_session_create(model, &sp, &s) == STRATA_OK, "session: %s", strata_last_error());
    if (!s) return;
    strata_token toks[40];
    for (int i = 0; i < 40; i++) toks[i] = (strata_token)(7 + 13 * i);
    CHECK(strata_session_decode(s, toks, 40, NULL, 0) == STRATA_OK, "decode 40");
    CHECK(rec.calls == 3 && rec.done[0] == 16 && rec.done[1] == 32 && rec.done[2] == 40 &&
          rec.total[2] == 40 && !rec.bad_what, "progress 16/32/40 of 40 (%d calls)", rec.calls);
    CHECK(strata_session_decode(s, toks, 10, NULL, 0) == STRATA_OK && rec.calls == 3,
          "a single batch reports nothing");
    strata_session_free(s);
}

/* A RAM budget of a few experts: every routed expert read from disk into LRU slots, the same bits
 * as the mapping; counters; budgets too small refused. */
static void test_ram_budget(void) {
    strata_token toks[48];
    for (int i = 0; i < 48; i++) toks[i] = (strata_token)(11 + 97 * i % 8000);
    const size_t nl = 9 * (size_t)V;
    float *ref = malloc(sizeof(float) * nl), *got = malloc(sizeof(float) * nl);
    float *piped = malloc(sizeof(float) * nl);
    strata_session_stats st, stp;
    memset(&st, 0, sizeof st);
    memset(&stp, 0, sizeof stp);
    for (int pass = 0; pass < 3; pass++) {
        strata_session_params sp = strata_session_default_params();
        sp.n_ctx = 128;
        sp.n_batch = 32;
        sp.placement.ram_budget = pass ? 6 * 106496 : 0; /* 6 slots of the default model's 104 KiB experts */
        sp.placement.pipe = pass == 2;                   /* and with the next layer prefetched */
        if (pass == 2) sp.placement.ram_budget = 12 * 106496;
        strata_session *s = NULL;
        CHECK(strata_session_create(model, &sp, &s) == STRATA_OK, "session (ram_budget %lld): %s",
              (long long)sp.placement.ram_budget, strata_last_error());
        if (!s) continue;
        float *lg = pass == 0 ? ref : pass == 1 ? got : piped;
        strata_status r = strata_session_decode(s, toks, 40, lg, 0);
        for (int i = 0; i < 8 && r == STRATA_OK; i++)
            r = strata_session_decode(s, toks + 40 + i, 1, lg + (size_t)(i + 1) * (size_t)V, 0);
        CHECK(r == STRATA_OK, "decode (ram_budget %lld): %s", (long long)sp.placement.ram_budget, strata_last_error());
        if (pass) strata_session_get_stats(s, pass == 1 ? &st : &stp);
        strata_session_free(s);
    }
    CHECK(!memcmp(ref, got, sizeof(float) * nl), "experts from disk slots: bit-identical logits");
    CHECK(!memcmp(ref, piped, sizeof(float) * nl), "pipelined prefetch: bit-identical logits");
    CHECK(stp.prefetch_issued > 0 && stp.prefetch_timely + stp.prefetch_late <= stp.prefetch_issued,
          "prefetches: %lld issued, %lld timely, %lld late", (long long)stp.prefetch_issued,
          (long long)stp.prefetch_timely, (long long)stp.prefetch_late);
    CHECK(stp.prefetch_timely + stp.prefetch_late > 0, "some prefetched experts were used");
    CHECK(st.prefetch_issued == 0, "no prefetch without pipe");
    CHECK(stp.layer_hit_rate_min >= 0 && stp.layer_hit_rate_min <= stp.layer_hit_rate_max &&
          stp.layer_hit_rate_max <= 1 &&
          (stp.expert_cache_hits > 0) == (stp.layer_hit_rate_max > 0), "per-layer hit rates %.2f..%.2f",
          stp.layer_hit_rate_min, stp.layer_hit_rate_max);
    CHECK(st.expert_cache_slots == 6, "6 slots (%d)", (int)st.expert_cache_slots);
    CHECK(st.expert_cache_misses > 0 && st.disk_bytes >= st.expert_cache_misses * 100000,
          "misses %lld filled from disk (%lld bytes)", (long long)st.expert_cache_misses,
          (long long)st.disk_bytes);
    CHECK(st.expert_cache_hits + st.expert_cache_misses > 0, "look-ups counted");
    printf("ram budget of 6 experts: %lld hits, %lld misses, %.1f MiB read from disk\n",
           (long long)st.expert_cache_hits, (long long)st.expert_cache_misses, (double)st.disk_bytes / 1048576.0);
    /* DEGRADE_ZERO with a RAM budget: real misses (not resident, not loaded); tau 0 drops none */
    for (int v = 0; v < 2; v++) {
        strata_session_params dp = strata_session_default_params();
        dp.n_ctx = 128;
        dp.n_batch = 32;
        dp.placement.ram_budget = 6 * 106496;
        dp.degrade_zero = 1;
        dp.degrade_tau = v ? 0.05f : 0.0f;
        strata_session *s = NULL;
        CHECK(strata_session_create(model, &dp, &s) == STRATA_OK, "degrade session: %s", strata_last_error());
        if (!s) continue;
        strata_status r = strata_session_decode(s, toks, 40, piped, 0);
        for (int i = 0; i < 8 && r == STRATA_OK; i++)
            r = strata_session_decode_gen(s, toks + 40 + i, 1, piped + (size_t)(i + 1) * (size_t)V, 0);
        CHECK(r == STRATA_OK, "degrade decode: %s", strata_last_error());
        strata_session_stats ds;
        strata_session_get_stats(s, &ds);
        if (v == 0)
            CHECK(ds.degrade_zeroed == 0 && !memcmp(piped, got, sizeof(float) * nl),
                  "tau 0 with real misses: nothing dropped, bit-identical");
        else
            CHECK(ds.degrade_zeroed > 0 && ds.degrade_slots == 8LL * 6 * 4 &&
                  memcmp(piped + V, got + V, sizeof(float) * (nl - (size_t)V)) != 0 &&
                  !memcmp(piped, got, sizeof(float) * (size_t)V),
                  "tau 0.05: %lld of %lld decode slots dropped, the prompt untouched",
                  (long long)ds.degrade_zeroed, (long long)ds.degrade_slots);
        strata_session_free(s);
    }
    strata_session_params sp = strata_session_default_params();
    sp.n_ctx = 64;
    sp.placement.ram_budget = 3 * 106496; /* fewer than the 4 experts one token needs */
    strata_session *s = NULL;
    CHECK(strata_session_create(model, &sp, &s) == STRATA_ERR_INVALID_ARG && !s, "budget below k experts refused");
    CHECK(strstr(strata_last_error(), "one token needs 4") != NULL, "the message says why: %s", strata_last_error());
    sp.placement.ram_budget = -1;
    CHECK(strata_session_create(model, &sp, &s) == STRATA_ERR_INVALID_ARG && !s, "negative budget refused");
    sp.placement.ram_budget = 1 << 20;
    sp.backend = STRATA_BACKEND_CUDA;
    CHECK(strata_session_create(model, &sp, &s) == STRATA_ERR_INVALID_ARG && !s &&
              strstr(strata_last_error(), "expert_cache") != NULL,
          "ram_budget with an all-resident GPU session refused: %s", strata_last_error());
    sp.placement.expert_cache = 32;
    sp.placement.pin_experts = 1;
    CHECK(strata_session_create(model, &sp, &s) == STRATA_ERR_UNSUPPORTED && !s,
          "ram_budget with pinned copies of every expert refused: %s", strata_last_error());
    sp.placement.pin_experts = -1;
    sp.placement.gpu_prefetch = 1;
    CHECK(strata_session_create(model, &sp, &s) == STRATA_ERR_UNSUPPORTED && !s,
          "ram_budget with GPU prefetch refused: %s", strata_last_error());
    sp.placement.gpu_prefetch = 0;
    sp.placement.expert_cache = 0;
    sp.placement.n_cpu_moe = -1;
    sp.placement.doorbell = 1;
    CHECK(strata_session_create(model, &sp, &s) == STRATA_ERR_UNSUPPORTED && !s &&
              strstr(strata_last_error(), "doorbell") != NULL,
          "ram_budget with the doorbell's expert pool refused: %s", strata_last_error());
    free(ref);
    free(got);
    free(piped);
}

/* A session keeps its model alive: the model freed first, the session still decodes (the same
 * logits as a session of a model that stays loaded) and frees it last (ASan: no use after free). */
static void test_model_outlives_free(const char *path) {
    strata_model_params mp = strata_model_default_params();
    strata_model *m2 = NULL;
    strata_status st = strata_model_load(path, &mp, &m2);
    CHECK(st == STRATA_OK, "load %s: %s", path, strata_last_error());
    if (st != STRATA_OK) return;
    strata_session_params sp = strata_session_default_params();
    sp.n_ctx = 64;
    sp.n_threads = 1;
    strata_session *a = NULL, *b = NULL, *ref = NULL;
    CHECK(strata_session_create(m2, &sp, &a) == STRATA_OK, "create a: %s", strata_last_error());
    CHECK(strata_session_create(m2, &sp, &b) == STRATA_OK, "create b: %s", strata_last_error());
    CHECK(strata_session_create(model, &sp, &ref) == STRATA_OK, "create ref: %s", strata_last_error());
    if (!a || !b || !ref) {
        strata_session_free(a); strata_session_free(b); strata_session_free(ref);
        strata_model_free(m2);
        return;
    }
    float *la = malloc(sizeof(float) * (size_t)V), *lr = malloc(sizeof(float) * (size_t)V);
    CHECK(strata_session_decode(a, PROMPT, N_PROMPT, la, 0) == STRATA_OK, "decode: %s", strata_last_error());
    strata_model_free(m2); /* the caller's reference: a and b hold theirs */
    strata_session_free(b);
    strata_token next = (strata_token)argmax(la, V);
    CHECK(strata_session_decode(a, &next, 1, la, 0) == STRATA_OK, "decode after model_free: %s",
          strata_last_error());
    CHECK(strata_session_decode(ref, PROMPT, N_PROMPT, lr, 0) == STRATA_OK, "ref: %s", strata_last_error());
    CHECK(strata_session_decode(ref, &next, 1, lr, 0) == STRATA_OK, "ref: %s", strata_last_error());
    CHECK(memcmp(la, lr, sizeof(float) * (size_t)V) == 0,
          "logits after strata_model_free differ from a live model's");
    strata_session_free(a); /* the last reference: the model goes now */
    strata_session_free(ref);
    free(la);
    free(lr);
}

/* strata_session_set_route_trace: one call per layer and batch, in layer order, each token's k
 * experts in range, the prediction from layer 1 on; the logits unchanged by the trace. */
typedef struct {
    int calls, bad, preds, last_layer;
    int64_t tokens;
} route_log;

static void route_cb(int32_t layer, int32_t pos0, int64_t n, int32_t k, const int32_t *ids, const float *w,
                     const int32_t *pred, void *ud) {
    route_log *r = ud;
    r->bad += layer != (r->last_layer + 1) % 6 || k != 4 || pos0 < 0;
    for (int64_t i = 0; i < n * k; i++) r->bad += ids[i] < 0 || ids[i] >= 32 || !(w[i] > 0.0f && w[i] <= 1.0f);
    r->bad += (layer == 0) != (pred == NULL);
    if (pred) {
        r->preds++;
        for (int64_t i = 0; i < n * k; i++) r->bad += pred[i] < 0 || pred[i] >= 32;
    }
    r->calls++;
    r->tokens += layer == 0 ? n : 0;
    r->last_layer = layer;
}

static void test_route_trace(void) {
    strata_session *a = make_session(128, 8, STRATA_TYPE_F16, 1), *b = make_session(128, 8, STRATA_TYPE_F16, 1);
    if (!a || !b) { strata_session_free(a); strata_session_free(b); return; }
    route_log r = {0, 0, 0, 5, 0};
    CHECK(strata_session_set_route_trace(a, route_cb, &r) == STRATA_OK, "set: %s", strata_last_error());
    float *la = malloc(sizeof(float) * (size_t)V * N_ALL), *lb = malloc(sizeof(float) * (size_t)V * N_ALL);
    CHECK(strata_session_decode(a, seq, N_ALL, la, 1) == STRATA_OK, "decode a");
    CHECK(strata_session_decode(b, seq, N_ALL, lb, 1) == STRATA_OK, "decode b");
    const int batches = (N_ALL + 7) / 8;
    CHECK(r.calls == 6 * batches && r.tokens == N_ALL && r.preds == 5 * batches && r.bad == 0,
          "route trace: %d calls (want %d), %lld tokens, %d predictions, %d bad", r.calls, 6 * batches,
          (long long)r.tokens, r.preds, r.bad);
    CHECK(memcmp(la, lb, sizeof(float) * (size_t)V * N_ALL) == 0, "the trace changed the logits");
    CHECK(strata_session_set_route_trace(a, NULL, NULL) == STRATA_OK, "stop");
    strata_token t = 5;
    CHECK(strata_session_decode(a, &t, 1, NULL, 0) == STRATA_OK && r.calls == 6 * batches, "no calls once stopped");
    CHECK(strata_session_set_route_trace(NULL, route_cb, &r) == STRATA_ERR_INVALID_ARG, "NULL session");
    free(la);
    free(lb);
    strata_session_free(a);
    strata_session_free(b);
}

int main(void) {
    const char *shared = getenv("STRATA_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/strata-tiny-moe-q8_0.gguf", shared ? shared : "../shared");
    FILE *f = fopen(path, "rb");
    if (!f) {
        SKIP("%s not found (set STRATA_SHARED): session tests need the tiny model", path);
        return test_report();
    }
    fclose(f);
    strata_model_params mp = strata_model_default_params();
    strata_status st = strata_model_load(path, &mp, &model);
    CHECK(st == STRATA_OK, "load %s: %s", path, strata_last_error());
    if (st != STRATA_OK) return test_report();
    strata_model_info info;
    strata_model_get_info(model, &info);
    V = info.n_vocab;
    CHECK(V == 8192, "n_vocab %d", V);
    test_greedy();
    test_decode_greedy();
    test_decode_topk();
    test_batching();
    test_errors();
    test_profile();
    test_progress();
    test_ram_budget();
    test_model_outlives_free(path);
    test_route_trace();
    bench();
    strata_model_free(model);
    return test_report();
}
