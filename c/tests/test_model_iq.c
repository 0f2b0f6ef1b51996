/* test_model_iq.c - models whose FFN weights (routed experts, shared experts, dense FFNs) are the
 * 2- and 1-bit IQ types and MXFP4, mixed per layer and with K-quants, load and run on the CPU
 * backend: each model's logits against those of its reference, the same model with those
 * tensors written as f32 (their dequantized values, model_build.h's ffn_deq). The two differ
 * only by the activation quantization the quantized dot products use (q8_K / q8_0), so the
 * logits must agree to within its rounding; the prompt batch (grouped experts, several-row
 * kernels) must agree with token-by-token decoding, and a RAM-tier session (ram_budget: experts
 * read into slots) must give the mapped session's bits. Every ISA level the CPU has is run. */
#include "model_build.h"
#include "strata.h"
#include "strata_quant.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_TOK 12

static const strata_token toks[N_TOK] = {1, 7, 3, 42, 5, 11, 0, 19, 23, 2, 31, 8};

/* All N_TOK positions' logits of m (n_vocab floats each): one prompt call (tok_by_tok 0) or one
 * call per token; ram_budget > 0 reads the routed experts through the RAM tier. NULL on failure. */
static float *run(const strata_model *m, int V, int tok_by_tok, int64_t ram_budget) {
    strata_session_params sp = strata_session_default_params();
    sp.n_ctx = 64;
    sp.kv_type = STRATA_TYPE_F32;
    sp.n_threads = 2;
    sp.placement.ram_budget = ram_budget;
    strata_session *s = NULL;
    float *lg = malloc(sizeof(float) * (size_t)N_TOK * (size_t)V);
    strata_status st = strata_session_create(m, &sp, &s);
    CHECK(st == STRATA_OK, "session: %s", strata_last_error());
    for (int i = 0; st == STRATA_OK && i < N_TOK; i += tok_by_tok ? 1 : N_TOK)
        st = strata_session_decode(s, toks + i, tok_by_tok ? 1 : N_TOK, lg + (size_t)i * (size_t)V, 1);
    CHECK(st == STRATA_OK, "decode: %s", strata_last_error());
    strata_session_free(s);
    if (st != STRATA_OK) { free(lg); return NULL; }
    return lg;
}

static strata_model *load(const spec *s, const char *path) {
    strata_model *m = NULL;
    if (!write_model(s, path)) { CHECK(0, "could not write %s", path); return NULL; }
    const strata_status st = strata_model_load(path, NULL, &m);
    CHECK(st == STRATA_OK, "load %s: %s", path, strata_last_error());
    return m;
}

/* Largest |a - b| over n, relative to the largest |b|. */
static double max_rel(const float *a, const float *b, size_t n) {
    double d = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        mag = fmax(mag, fabs((double)b[i]));
    }
    return mag > 0 ? d / mag : d;
}

static void check_case(const char *what, spec s) {
    char qpath[64], fpath[64];
    snprintf(qpath, sizeof qpath, "/tmp/strata_iq_q_%d.gguf", (int)getpid());
    snprintf(fpath, sizeof fpath, "/tmp/strata_iq_f_%d.gguf", (int)getpid());
    strata_model *mq = load(&s, qpath);
    s.ffn_deq = 1;
    strata_model *mf = load(&s, fpath);
    if (!mq || !mf) goto done;
    const int V = s.n_vocab;
    const size_t n = (size_t)N_TOK * (size_t)V;
    float *ref = run(mf, V, 0, 0);
    const strata_cpu_isa best = strata_cpu_isa_supported();
    for (int lvl = 0; ref && lvl <= (int)best; lvl++) {
        CHECK(strata_cpu_isa_set((strata_cpu_isa)lvl) == STRATA_OK, "isa %d", lvl);
        const char *isa = strata_cpu_isa_name((strata_cpu_isa)lvl);
        float *batch = run(mq, V, 0, 0), *steps = run(mq, V, 1, 0);
        if (batch && steps) {
            /* the q8 activations' rounding moves the logits by ~1e-4 of the largest; a last-layer
             * FFN of other values (random f32) by 4e-3 .. 2e-2 */
            const double e = max_rel(batch, ref, n);
            CHECK(e < 1e-3, "%s %s: quantized vs f32 reference logits differ by %.4g (max, relative)", what, isa, e);
            const double e2 = max_rel(steps, batch, n);
            CHECK(e2 < 1e-4, "%s %s: token by token vs one batch differ by %.4g", what, isa, e2);
            printf("  %-28s %-12s vs f32 reference %.2e, steps vs batch %.2e\n", what, isa, e, e2);
        }
        if (lvl == (int)best && s.n_expert) { /* the RAM tier: experts read into 6 slots a layer */
            const int64_t ram = 6 * 3 * strata_row_bytes(STRATA_TYPE_Q4_K, s.n_embd) * s.n_ff_exp;
            float *tier = run(mq, V, 0, ram);
            CHECK(tier && batch && memcmp(tier, batch, n * sizeof(float)) == 0,
                  "%s: ram_budget session differs from the mapped one", what);
            free(tier);
        }
        free(batch);
        free(steps);
    }
    strata_cpu_isa_set(STRATA_ISA_BEST);
    free(ref);
done:
    strata_model_free(mq);
    strata_model_free(mf);
    unlink(qpath);
    unlink(fpath);
}

static void set_types(spec *s, strata_type g0, strata_type u0, strata_type d0, strata_type g1,
                      strata_type u1, strata_type d1) {
    const strata_type t[2][3] = {{g0, u0, d0}, {g1, u1, d1}};
    memcpy(s->ffn_type, t, sizeof t);
}

int main(void) {
    /* routed experts: gate/up IQ2_XXS with down Q4_K, then IQ2_XS / IQ2_S / IQ1_M */
    spec s = base_spec("olmoe");
    s.n_embd = 256;
    s.n_ff_exp = 256;
    set_types(&s, STRATA_TYPE_IQ2_XXS, STRATA_TYPE_IQ2_XXS, STRATA_TYPE_Q4_K, STRATA_TYPE_IQ2_XS,
              STRATA_TYPE_IQ2_S, STRATA_TYPE_IQ1_M);
    check_case("olmoe experts iq2/q4_K/iq1_m", s);
    /* routed and shared experts: IQ1_S, IQ1_M, MXFP4 */
    s = base_spec("qwen2moe");
    s.n_embd = 256;
    s.n_ff_exp = 256;
    s.n_ff_shexp = 256;
    set_types(&s, STRATA_TYPE_IQ1_S, STRATA_TYPE_IQ1_M, STRATA_TYPE_MXFP4, STRATA_TYPE_MXFP4,
              STRATA_TYPE_MXFP4, STRATA_TYPE_IQ2_S);
    check_case("qwen2moe experts iq1/mxfp4", s);
    /* a dense FFN */
    s = base_spec("llama");
    s.n_embd = 256;
    s.n_ff = 256;
    set_types(&s, STRATA_TYPE_IQ2_S, STRATA_TYPE_IQ1_S, STRATA_TYPE_IQ2_XXS, STRATA_TYPE_MXFP4,
              STRATA_TYPE_IQ1_M, STRATA_TYPE_IQ2_XS);
    check_case("llama dense iq2/iq1/mxfp4", s);
    return test_report();
}
