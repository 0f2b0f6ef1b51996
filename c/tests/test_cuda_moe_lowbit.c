/* test_cuda_moe_lowbit.c - the GPU MoE step's mixed low-bit and gpt-oss cases against the CPU
 * (c/cuda/moe.cu, moe_router.cu, cuda_moe.h; the helpers shared with test_cuda_moe.c are
 * cuda_moe_cases.h's):
 *   mixed: a low-bit type for gate/up and another for down (IQ1..IQ4_XS, MXFP4) at the
 *           qwen3-30b-a3b shape (32 experts, 12 materialized, top-8): decode, a group, the tiles,
 *           judged as test_cuda_moe's expert cases (st_moe_ffn, the exact FFN, repeatability);
 *   staged IQ3 codebooks (STRATA_IQ_STAGE_TABLES): the bits of the read-only-cache kernels;
 *   gpt-oss (test_oai): softmax over the k chosen logits against st_route_scored, the one-token
 *           router with the router's bias, experts with biases and the clamped SwiGLU (on the
 *           tiles too for prompt batches unless built with -DSTRATA_MMQ_OAI=0: st_cuda_moe_tiles_oai).
 * One line per case, as test_cuda_moe's. TEST_CUDA_MOE_OAI_ONLY set in the environment: test_oai
 * alone; TEST_CUDA_MOE_TYPES set: nothing (a skip: these cases are not one type's; the per-type
 * cases are test_cuda_moe's).
 * Skips, saying why, in builds without CUDA or where no GPU is usable. */
#include "strata.h"
#include "strata_quant.h"
#include "test.h"

#ifdef STRATA_HAVE_CUDA
#include "cuda_moe_cases.h"


/* ---- mixed low-bit types and staged IQ3 codebooks -------------------------------------------- */

/* STRATA_IQ_STAGE_TABLES: the grouped kernels with the IQ3 codebooks staged in shared memory give
 * the bits of the read-only-cache ones (one-token calls: gate/up and the fused down; more tokens:
 * the group kernels). */
static void check_iq_stage(const expert_set *s, int64_t T, int32_t k, test_rng *r) {
    const int64_t n = T * s->n_embd, P = T * k;
    float *x = malloc(sizeof(float) * (size_t)n), *a = malloc(sizeof(float) * (size_t)(n + GUARD));
    float *b = malloc(sizeof(float) * (size_t)(n + GUARD)), *logits = malloc(sizeof(float) * (size_t)(T * s->n_expert));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)P);
    float *wts = malloc(sizeof(float) * (size_t)P);
    if (!x || !a || !b || !logits || !ids || !wts) {
        CHECK(0, "host allocation");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) x[i] = test_rng_float(r);
    for (int64_t i = 0; i < T * s->n_expert; i++) logits[i] = 3.0f * test_rng_float(r);
    for (int64_t t = 0; t < T; t++)
        st_route_topk(logits + t * s->n_expert, s->n_expert, k, 1, ids + t * k, wts + t * k);
    int same_a = 0, same_b = 0;
    st_cuda_moe_set_iq_stage(0);
    const int ok_a = gpu_ffn(s, x, T, ids, wts, k, 0, NULL, a, &same_a);
    st_cuda_moe_set_iq_stage(1);
    const int ok_b = gpu_ffn(s, x, T, ids, wts, k, 0, NULL, b, &same_b);
    st_cuda_moe_set_iq_stage(0);
    const int same = ok_a && ok_b && memcmp(a, b, sizeof(float) * (size_t)n) == 0;
    printf("iq_stage_tables %s/%s T=%lld k=%d: staged %s\n", strata_type_name(s->tg), strata_type_name(s->td),
           (long long)T, (int)k, same ? "bitwise the same" : "DIFFERENT");
    CHECK(same, "%s/%s T=%lld: staged IQ3 tables change the output (runs %d %d)", strata_type_name(s->tg),
          strata_type_name(s->td), (long long)T, ok_a, ok_b);
done:
    free(x); free(a); free(b); free(logits); free(ids); free(wts);
}

/* mixed low-bit types per matrix at the qwen3-30b-a3b shape: decode, groups, tiles; then the
 * staged IQ3 codebooks (bits unchanged) */
static void mixed_cases(test_rng *r) {
    expert_set s;
    static const strata_type mixed[][2] = {
        {STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ3_S}, {STRATA_TYPE_IQ1_M, STRATA_TYPE_MXFP4},
        {STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ4_XS}, {STRATA_TYPE_IQ2_S, STRATA_TYPE_IQ1_S},
        {STRATA_TYPE_IQ2_XXS, STRATA_TYPE_IQ3_XXS},
    };
    for (size_t i = 0; i < sizeof mixed / sizeof mixed[0]; i++) {
        const strata_type tg = mixed[i][0], td = mixed[i][1];
        if (!strata_type_can_dot(tg) || !strata_type_can_dot(td) || !strata_type_can_dequantize(tg) ||
            !strata_type_can_dequantize(td)) {
            CHECK(0, "%s/%s experts: no CPU path to compare with", strata_type_name(tg), strata_type_name(td));
            continue;
        }
        if (expert_set_make(&s, 2048, 768, 32, 12, tg, td, r)) {
            check_ffn("mixed", &s, 1, 8, 1, 0, r);
            check_ffn("mixed", &s, 8, 8, 1, 0, r);
            check_ffn("mixed", &s, 80, 8, 1, 0, r); /* tiles */
            if (tg == STRATA_TYPE_IQ3_XXS || td == STRATA_TYPE_IQ3_S || td == STRATA_TYPE_IQ3_XXS) {
                check_iq_stage(&s, 1, 8, r);
                check_iq_stage(&s, 8, 8, r);
            }
        }
        expert_set_free(&s);
    }
}

/* ---- gpt-oss --------------------------------------------------------------------------------- */

/* gpt-oss's experts: random biases of gate, up (before the activation) and down on both sides,
 * the clamped SwiGLU when oai. Returns 0 on an allocation or upload failure. */
static int expert_set_oai(expert_set *s, int oai, test_rng *r) {
    const size_t nf = (size_t)s->n_expert * (size_t)s->n_ff, ne = (size_t)s->n_expert * (size_t)s->n_embd;
    s->h_bg = malloc(sizeof(float) * nf);
    s->h_bu = malloc(sizeof(float) * nf);
    s->h_bd = malloc(sizeof(float) * ne);
    if (!s->h_bg || !s->h_bu || !s->h_bd) return 0;
    for (size_t i = 0; i < nf; i++) s->h_bg[i] = 1.5f * test_rng_float(r);
    for (size_t i = 0; i < nf; i++) s->h_bu[i] = 1.5f * test_rng_float(r);
    for (size_t i = 0; i < ne; i++) s->h_bd[i] = 0.5f * test_rng_float(r);
    strata_status st = st_cuda_malloc(&s->d_bg, sizeof(float) * nf);
    if (st == STRATA_OK) st = st_cuda_malloc(&s->d_bu, sizeof(float) * nf);
    if (st == STRATA_OK) st = st_cuda_malloc(&s->d_bd, sizeof(float) * ne);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(s->d_bg, s->h_bg, sizeof(float) * nf);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(s->d_bu, s->h_bu, sizeof(float) * nf);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(s->d_bd, s->h_bd, sizeof(float) * ne);
    s->oai = oai;
    for (int32_t e = 0; e < s->n_expert; e++) {
        st_expert *c = &s->cpu[e];
        c->b_gate = s->h_bg + (size_t)e * (size_t)s->n_ff;
        c->b_up = s->h_bu + (size_t)e * (size_t)s->n_ff;
        c->b_down = s->h_bd + (size_t)e * (size_t)s->n_embd;
        c->act = oai ? ST_ACT_SWIGLU_OAI : ST_ACT_SWIGLU;
    }
    CHECK(st == STRATA_OK, "expert biases upload: %s", strata_last_error());
    return st == STRATA_OK;
}

/* gpt-oss: routing by softmax over the top-k logits (ST_GATING_SOFTMAX_WEIGHT) against
 * st_route_scored, the one-token router's bits with it; experts with gate/up/down biases and the
 * clamped SwiGLU against st_moe_ffn (and the exact FFN) at gpt-oss-20b's shape in MXFP4 (2880 x
 * 2880, 32 experts, top-4: decode, verify, a prompt chunk), F32 (tight bound), Q8_0 and Q5_0 at
 * batches the tiles take (int8 and f16 tiles; the GEMV path in -DSTRATA_MMQ_OAI=0 builds),
 * biases with plain SwiGLU, and bad ids. Builds with the tiles (the default) also run a prompt
 * chunk of over 1024 pairs (which only the tiles take). */
static void test_oai(test_rng *r) {
    printf("gpt-oss experts' prompt batches: %s\n", st_cuda_moe_tiles_oai() ? "the tiles (STRATA_MMQ_OAI, the default)"
                                                                           : "the GEMV path");
    check_route_scored(1, 32, 4, 2, 0, 1.0f, 1, 1, 0, 0, r);
    check_route_scored(8, 32, 4, 2, 0, 1.0f, 1, 1, 0, 1, r);
    check_route_scored(5, 128, 4, 2, 0, 1.0f, 1, 1, 0, 0, r);
    check_router1_scored(2880, 32, 4, 1, 1, 1, r);
    check_router1_scored(2880, 128, 4, 1, 1, 1, r);
    expert_set s;
    memset(&s, 0, sizeof s);
    if (expert_set_make(&s, 2880, 2880, 32, 8, STRATA_TYPE_MXFP4, STRATA_TYPE_MXFP4, r) && expert_set_oai(&s, 1, r)) {
        check_ffn("gpt-oss", &s, 1, 4, 0, 0, r);
        check_ffn("gpt-oss", &s, 3, 4, 0, 0, r);
        check_ffn("gpt-oss", &s, 8, 4, 0, 1, r);
        check_ffn("gpt-oss", &s, 64, 4, 0, 0, r);
        if (st_cuda_moe_tiles_oai()) check_ffn("gpt-oss", &s, 272, 4, 0, 1, r); /* 1088 pairs */
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 96, 224, 6, 6, STRATA_TYPE_F32, STRATA_TYPE_F32, r) && expert_set_oai(&s, 1, r)) {
        check_ffn("oai f32", &s, 1, 3, 0, 0, r);
        check_ffn("oai f32", &s, 8, 3, 0, 1, r);
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 512, 256, 6, 6, STRATA_TYPE_Q8_0, STRATA_TYPE_Q8_0, r) && expert_set_oai(&s, 1, r)) {
        check_ffn("oai q8_0", &s, 1, 3, 0, 0, r);
        check_ffn("oai q8_0", &s, 40, 3, 0, 0, r); /* a batch the tiles take (unless STRATA_MMQ_OAI=0) */
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 512, 256, 6, 6, STRATA_TYPE_Q5_0, STRATA_TYPE_Q5_0, r) && expert_set_oai(&s, 1, r)) {
        check_ffn("oai q5_0", &s, 3, 3, 0, 0, r);
        check_ffn("oai q5_0", &s, 40, 3, 0, 1, r); /* the f16 tiles (unless STRATA_MMQ_OAI=0) */
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 512, 256, 6, 6, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, r) && expert_set_oai(&s, 0, r)) {
        check_ffn("bias swiglu", &s, 1, 3, 1, 0, r);
        check_ffn("bias swiglu", &s, 5, 3, 1, 0, r);
        check_ffn("bias swiglu", &s, 40, 3, 1, 0, r); /* the tiles with biases alone (unless STRATA_MMQ_OAI=0) */
    }
    expert_set_free(&s);
}

int main(void) {
    if (getenv("TEST_CUDA_MOE_TYPES")) { /* test_cuda_moe's per-type cases alone: none of these */
        SKIP("TEST_CUDA_MOE_TYPES set: the mixed and gpt-oss cases are not one type's");
        return test_report();
    }
    int available = 0;
    char reason[256];
    strata_status st = st_cuda_probe(&available, reason, sizeof reason);
    CHECK(st == STRATA_OK, "probe: %s", strata_last_error());
    if (!available) {
        SKIP("GPU checks: CUDA unavailable: %s", reason);
        return test_report();
    }
    printf("device: %s\n", reason);
    if (!cases_pool_create()) return test_report();

    test_rng r = {0x9E3779B97F4A7C15ULL};
    if (!getenv("TEST_CUDA_MOE_OAI_ONLY")) mixed_cases(&r); /* set: the gpt-oss cases alone (a quick device A/B) */
    test_oai(&r);
    st_threadpool_free(g_tp);
    return test_report();
}

#else /* !STRATA_HAVE_CUDA */

TEST_MAIN_WITHOUT_CUDA()

#endif
