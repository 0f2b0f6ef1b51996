/* test_cuda_moe.c - the GPU MoE step (c/cuda/moe.cu, moe_router.cu, cuda_moe.h) against the CPU:
 *   router: st_cuda_moe_route vs st_route_topk on random logits (and logits with many ties):
 *           ids identical, weights within 1e-6, doorbell (host-mapped) equal to the device copy,
 *           guard words after the outputs untouched; st_cuda_moe_route_cfg vs st_route_scored
 *           (sigmoid, selection bias, groups, scale: DeepSeek-V2/V3 and Kimi-K2 shapes) likewise,
 *           and the one-token router with a scored rule equal to the GEMV + route;
 *   experts: st_cuda_moe_ffn vs st_moe_ffn on random well-formed weights through a per-expert
 *           pointer table (entries alias a few materialized experts): NMSE <= 5e-4 (quantized;
 *           <= 1e-7 for F32/F16/BF16), no NaN, guard words untouched, every output written, two
 *           runs bit-identical; every supported type on small odd shapes, T = 1..8 columns (and
 *           groups of more than 8 pairs), the shapes of Qwen3-30B-A3B, OLMoE-1B-7B and Mixtral,
 *           out-of-range ids, and the shared expert (one-expert table, sigmoid gate, accumulate);
 *   CPU-exact rows: st_cuda_moe_exact_rows bit-identical to st_moe_ffn_end_rows and
 *           st_cuda_moe_combine_rows of a split bit-identical to st_moe_ffn (AVX-512 hosts).
 * The mixed low-bit types per matrix, the staged IQ3 codebooks and gpt-oss's routing and experts
 * are test_cuda_moe_lowbit.c's; the helpers both use are cuda_moe_cases.h's.
 * One line per case: name, shape, types, T, NMSE, max error, pass/FAIL. TEST_CUDA_MOE_OAI_ONLY set
 * in the environment: the argument checks alone (the gpt-oss cases: test_cuda_moe_lowbit);
 * TEST_CUDA_MOE_TYPES=q3_K,q5_0,...: the argument checks and those types' small-shape and tile
 * cases alone.
 * Skips, saying why, in builds without CUDA or where no GPU is usable. */
#include <ctype.h>

#include "strata.h"
#include "strata_quant.h"
#include "test.h"

#ifdef STRATA_HAVE_CUDA
#include "cuda_moe_cases.h"
#include "dot.h"
#include "quant.h"


/* ---- router ---------------------------------------------------------------------------------- */

static void check_route(int64_t T, int32_t n_expert, int32_t k, int norm, int ties, test_rng *r) {
    const int64_t nl = T * n_expert, no = T * k;
    float *logits = malloc(sizeof(float) * (size_t)nl);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)no), *gids = malloc(sizeof(int32_t) * (size_t)(no + GUARD));
    float *wts = malloc(sizeof(float) * (size_t)no), *gwts = malloc(sizeof(float) * (size_t)(no + GUARD));
    void *d_l = NULL, *d_ids = NULL, *d_wts = NULL;
    st_cuda_doorbell db;
    memset(&db, 0, sizeof db);
    for (int64_t i = 0; i < nl; i++)
        logits[i] = ties ? (float)(int)(test_rng_next(r) % 5) - 2.0f : 4.0f * test_rng_float(r);
    for (int64_t t = 0; t < T; t++)
        st_route_topk(logits + t * n_expert, n_expert, k, norm, ids + t * k, wts + t * k);

    strata_status st = st_cuda_malloc(&d_l, sizeof(float) * (size_t)nl);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_ids, sizeof(int32_t) * (size_t)(no + GUARD));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_wts, sizeof(float) * (size_t)(no + GUARD));
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_l, logits, sizeof(float) * (size_t)nl);
    if (st == STRATA_OK) st = st_cuda_memset(d_ids, 0xA5, sizeof(int32_t) * (size_t)(no + GUARD));
    if (st == STRATA_OK) st = st_cuda_memset(d_wts, 0xA5, sizeof(float) * (size_t)(no + GUARD));
    if (st == STRATA_OK) st = st_cuda_doorbell_alloc(&db, T, k);
    if (st == STRATA_OK)
        st = st_cuda_moe_route(d_l, T, n_expert, k, norm, d_ids, d_wts, &db, NULL);
    if (st == STRATA_OK) st = st_cuda_synchronize();
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(gids, d_ids, sizeof(int32_t) * (size_t)(no + GUARD));
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(gwts, d_wts, sizeof(float) * (size_t)(no + GUARD));
    CHECK(st == STRATA_OK, "route T=%lld E=%d k=%d: %s", (long long)T, n_expert, k, strata_last_error());
    if (st == STRATA_OK) {
        int64_t id_bad = 0, db_bad = 0, guard_bad = 0, nans = 0;
        double max_w = 0.0;
        for (int64_t i = 0; i < no; i++) {
            id_bad += gids[i] != ids[i];
            if (isnan(gwts[i])) nans++;
            else if (fabs((double)gwts[i] - wts[i]) > max_w) max_w = fabs((double)gwts[i] - wts[i]);
            db_bad += db.h_ids[i] != gids[i] || memcmp(&db.h_wts[i], &gwts[i], 4) != 0;
        }
        for (int64_t i = no; i < no + GUARD; i++) {
            uint32_t u;
            memcpy(&u, &gwts[i], 4);
            guard_bad += (uint32_t)gids[i] != SENTINEL || u != SENTINEL;
        }
        const int ok = id_bad == 0 && max_w <= 1e-6 && db_bad == 0 && guard_bad == 0 && nans == 0;
        printf("route  T=%-3lld n_expert=%-4d k=%d norm=%d ties=%d  ids differ %lld, max |dw| %.2e, "
               "doorbell differs %lld, guard %lld, NaN %lld  %s\n", (long long)T, n_expert, k, norm,
               ties, (long long)id_bad, max_w, (long long)db_bad, (long long)guard_bad,
               (long long)nans, ok ? "pass" : "FAIL");
        CHECK(id_bad == 0, "route T=%lld E=%d k=%d: %lld ids differ", (long long)T, n_expert, k, (long long)id_bad);
        CHECK(max_w <= 1e-6 && nans == 0, "route: max weight error %.3g, %lld NaN", max_w, (long long)nans);
        CHECK(db_bad == 0, "route: doorbell differs from the device output in %lld", (long long)db_bad);
        CHECK(guard_bad == 0, "route: %lld guard words overwritten", (long long)guard_bad);
    }
    (void)st_cuda_doorbell_free(&db);
    (void)st_cuda_free(d_l);
    (void)st_cuda_free(d_ids);
    (void)st_cuda_free(d_wts);
    free(logits); free(ids); free(gids); free(wts); free(gwts);
}

/* st_cuda_moe_router1 against st_cuda_mmv (the f32 router) + st_cuda_moe_route on the same
 * device: logits, ids and weights bit-identical, the doorbell equal, x's host-mapped mirror equal
 * to x, the counter back at 0, three calls in a row (the counter reused). */
static void check_router1(int64_t n_embd, int32_t n_expert, int32_t k, int norm, test_rng *r) {
    const size_t nw = (size_t)(n_embd * n_expert);
    float *w = malloc(sizeof(float) * nw), *x = malloc(sizeof(float) * (size_t)n_embd);
    float *l0 = malloc(sizeof(float) * (size_t)n_expert), *l1 = malloc(sizeof(float) * (size_t)n_expert);
    int32_t i0[64], i1[64];
    float w0[64], w1[64];
    void *d_w = NULL, *d_x = NULL, *d_l0 = NULL, *d_l1 = NULL, *d_i0 = NULL, *d_i1 = NULL, *d_w0 = NULL,
         *d_w1 = NULL, *d_xq = NULL, *d_sync = NULL, *d_scr = NULL;
    st_cuda_doorbell db;
    memset(&db, 0, sizeof db);
    float *h_xm = NULL; /* x's mirror, host-mapped */
    void *d_xm = NULL;
    for (size_t i = 0; i < nw; i++) w[i] = 0.05f * test_rng_float(r);
    for (int64_t i = 0; i < n_embd; i++) x[i] = test_rng_float(r);
    strata_status st = st_cuda_malloc(&d_w, sizeof(float) * nw);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_x, sizeof(float) * (size_t)n_embd);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_l0, sizeof(float) * (size_t)n_expert);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_l1, sizeof(float) * (size_t)n_expert);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_i0, sizeof(int32_t) * 64);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_i1, sizeof(int32_t) * 64);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_w0, sizeof(float) * 64);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_w1, sizeof(float) * 64);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_xq, (size_t)(n_embd / 32) * 36);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_scr, st_cuda_mmv_scratch_bytes(n_embd, 1));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_sync, sizeof(uint32_t));
    if (st == STRATA_OK) st = st_cuda_memset(d_sync, 0, sizeof(uint32_t));
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_w, w, sizeof(float) * nw);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_x, x, sizeof(float) * (size_t)n_embd);
    if (st == STRATA_OK) st = st_cuda_doorbell_alloc(&db, 1, k);
    if (st == STRATA_OK) st = st_cuda_host_alloc_mapped((void **)&h_xm, &d_xm, sizeof(float) * (size_t)n_embd);
    const st_cuda_mat W = {STRATA_TYPE_F32, d_w, n_embd, n_expert, sizeof(float) * (size_t)n_embd, NULL, 0};
    CHECK(st_cuda_moe_router1_supports(&W, n_expert, k), "router1: %lld x %d not supported", (long long)n_embd,
          n_expert);
    if (st == STRATA_OK) st = st_cuda_mmv(&W, (const float *)d_x, 1, (float *)d_l0, d_scr, NULL);
    if (st == STRATA_OK)
        st = st_cuda_moe_route((const float *)d_l0, 1, n_expert, k, norm, (int32_t *)d_i0, (float *)d_w0, NULL, NULL);
    int64_t bad = 0;
    uint32_t sync = 1;
    for (int rep = 0; rep < 3 && st == STRATA_OK; rep++) {
        st = st_cuda_memset(d_l1, 0xA5, sizeof(float) * (size_t)n_expert);
        memset(h_xm, 0xA5, sizeof(float) * (size_t)n_embd);
        if (st == STRATA_OK)
            st = st_cuda_moe_router1(&W, (const float *)d_x, n_expert, k, norm, (float *)d_l1, (int32_t *)d_i1,
                                     (float *)d_w1, &db, d_xq, (float *)d_xm, (uint32_t *)d_sync, NULL);
        if (st == STRATA_OK) st = st_cuda_synchronize();
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(l0, d_l0, sizeof(float) * (size_t)n_expert);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(l1, d_l1, sizeof(float) * (size_t)n_expert);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(i0, d_i0, sizeof(int32_t) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(i1, d_i1, sizeof(int32_t) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(w0, d_w0, sizeof(float) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(w1, d_w1, sizeof(float) * (size_t)k);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(&sync, d_sync, sizeof sync);
        if (st != STRATA_OK) break;
        bad += memcmp(l0, l1, sizeof(float) * (size_t)n_expert) != 0;
        bad += memcmp(i0, i1, sizeof(int32_t) * (size_t)k) != 0 || memcmp(w0, w1, sizeof(float) * (size_t)k) != 0;
        bad += memcmp(db.h_ids, i1, sizeof(int32_t) * (size_t)k) != 0 || memcmp(db.h_wts, w1, sizeof(float) * (size_t)k) != 0;
        bad += sync != 0;
        bad += memcmp(h_xm, x, sizeof(float) * (size_t)n_embd) != 0;
    }
    CHECK(st == STRATA_OK, "router1 %lld x %d: %s", (long long)n_embd, n_expert, strata_last_error());
    printf("router1 n_embd=%-5lld n_expert=%-4d k=%d norm=%d  mismatches %lld (logits, routing, doorbell, "
           "counter, x's mirror over 3 calls)  %s\n", (long long)n_embd, n_expert, k, norm, (long long)bad,
           bad == 0 && st == STRATA_OK ? "pass" : "FAIL");
    CHECK(bad == 0, "router1 %lld x %d k %d: %lld mismatches against st_cuda_mmv + st_cuda_moe_route",
          (long long)n_embd, n_expert, k, (long long)bad);
    (void)st_cuda_doorbell_free(&db);
    if (h_xm) (void)st_cuda_host_free(h_xm);
    void *frees[] = {d_w, d_x, d_l0, d_l1, d_i0, d_i1, d_w0, d_w1, d_xq, d_sync, d_scr};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) (void)st_cuda_free(frees[i]);
    free(w); free(x); free(l0); free(l1);
}

/* ---- CPU-exact rows (moe_exact.cu) ----------------------------------------------------------- */

/* On a mismatch: which stage of the exact kernels parted from the CPU, read from the workspace
 * (its layout: x's activation rows, then h, then h's rows; cuda_moe.h's wsize): x quantized,
 * h = silu(gate) * up of the first GPU pair, h quantized. */
static void exact_diagnose(const expert_set *s, const float *x, int64_t T, int32_t k, const int32_t *ig,
                           const void *d_ws) {
    const int64_t E = s->n_embd, F = s->n_ff, P = T * k;
    const int kx = strata_act_type(s->tg) == STRATA_TYPE_Q8_K, kh = strata_act_type(s->td) == STRATA_TYPE_Q8_K;
    const size_t rx = (size_t)strata_row_bytes(strata_act_type(s->tg), E);
    const size_t rh = (size_t)strata_row_bytes(strata_act_type(s->td), F);
    const size_t wx = (size_t)(E / 256) * sizeof(block_q8_K) > (size_t)(E / 32) * sizeof(block_q8_0)
                          ? (size_t)(E / 256) * sizeof(block_q8_K) : (size_t)(E / 32) * sizeof(block_q8_0);
    const size_t oh = ((size_t)T * wx + 255) & ~(size_t)255, ohq = oh + (((size_t)P * (size_t)F * 4 + 255) & ~(size_t)255);
    const size_t wsz = st_cuda_moe_exact_wsize(T, k, E, F);
    uint8_t *ws = malloc(wsz), *cx = malloc(rx), *ch = malloc(rh);
    float *h = malloc(sizeof(float) * (size_t)F);
    if (!ws || !cx || !ch || !h || st_cuda_memcpy_d2h(ws, d_ws, wsz) != STRATA_OK) goto out;
    int64_t p = 0;
    while (p < P && !(ig[p] >= 0 && ig[p] < s->n_expert)) p++;
    if (p == P) goto out;
    const int64_t t = p / k;
    if (kx) st_quantize_row_q8_K(x + t * E, (block_q8_K *)cx, E);
    else st_quantize_row_q8_0(x + t * E, (block_q8_0 *)cx, E);
    printf("  diagnose pair %lld: x's activation row %s\n", (long long)p,
           memcmp(cx, ws + (size_t)t * rx, rx) ? "DIFFERS" : "equal");
    for (size_t i = 0; i < rx; i++)
        if (cx[i] != ws[(size_t)t * rx + i]) {
            printf("  diagnose: first differing byte %zu of %zu: gpu %02x cpu %02x; bytes 0..40 gpu", i, rx,
                   ws[(size_t)t * rx + i], cx[i]);
            for (size_t j = 0; j < 40 && j < rx; j++) printf(" %02x", ws[(size_t)t * rx + j]);
            printf(" cpu");
            for (size_t j = 0; j < 40 && j < rx; j++) printf(" %02x", cx[j]);
            printf(" x[32..35] %.9g %.9g %.9g %.9g\n", (double)x[t * E + 32], (double)x[t * E + 33],
                   (double)x[t * E + 34], (double)x[t * E + 35]);
            break;
        }
    const st_expert *X = &s->cpu[ig[p]];
    int64_t hb = 0;
    for (int64_t r = 0; r < F; r++) {
        float g, u;
        st_vec_dot_get(s->tg)(E, &g, st_tensor_row(&X->gate, 0, r), cx);
        st_vec_dot_get(s->tg)(E, &u, st_tensor_row(&X->up, 0, r), cx);
        h[r] = st_silu(g) * u;
        float gh;
        memcpy(&gh, ws + oh + ((size_t)p * (size_t)F + (size_t)r) * 4, 4);
        if (memcmp(&gh, &h[r], 4) && hb++ == 0)
            printf("  diagnose: h[%lld] gpu %.9g cpu %.9g (g %.9g u %.9g)\n", (long long)r, (double)gh, (double)h[r],
                   (double)g, (double)u);
    }
    if (kh) st_quantize_row_q8_K(h, (block_q8_K *)ch, F);
    else st_quantize_row_q8_0(h, (block_q8_0 *)ch, F);
    printf("  diagnose: h %lld of %lld differ; h's activation row %s\n", (long long)hb, (long long)F,
           memcmp(ch, ws + ohq + (size_t)p * rh, rh) ? "DIFFERS" : "equal");
out:
    free(ws); free(cx); free(ch); free(h);
}

/* st_cuda_moe_exact_rows against st_moe_ffn_end_rows, bit for bit, and st_cuda_moe_combine_rows
 * of a split (slots to the GPU where (t * k + s) % split == 0; split 1: all, 0: none) against
 * st_moe_ffn's sum. x has blocks of 0 and of equal magnitudes of both signs (the quantizers'
 * first-of-equals rule), and bad_ids drops two slots. Rows the GPU does not own stay poisoned. */
static void check_exact(const char *name, const expert_set *s, int64_t T, int32_t k, int split, int bad_ids,
                        test_rng *r) {
    if (!st_vec_dot_exact_blocks(s->tg) || !st_vec_dot_exact_blocks(s->td)) {
        SKIP("exact rows %s %s/%s: the CPU's kernels here are not the exact-block-sum ones", name,
             strata_type_name(s->tg), strata_type_name(s->td));
        return;
    }
    const int64_t E = s->n_embd, P = T * k, n = T * E;
    float *x = malloc(sizeof(float) * (size_t)n), *logits = malloc(sizeof(float) * (size_t)(T * s->n_expert));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)P), *ig = malloc(sizeof(int32_t) * (size_t)P),
            *ic = malloc(sizeof(int32_t) * (size_t)P);
    float *wts = malloc(sizeof(float) * (size_t)P);
    float *ref_rows = malloc(sizeof(float) * (size_t)(P * E)), *cpu_rows = malloc(sizeof(float) * (size_t)(P * E));
    float *got_rows = malloc(sizeof(float) * (size_t)(P * E + GUARD));
    float *ref = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)(n + GUARD));
    void *ws = malloc(st_moe_wsize(T, k, s->n_expert, E, s->n_ff));
    for (int64_t i = 0; i < n; i++) x[i] = test_rng_float(r);
    for (int64_t i = 0; i < 32 && i < E; i++) x[i] = 0.0f;          /* a zero Q8_0 block */
    if (E >= 512) for (int64_t i = 256; i < 512; i++) x[i] = 0.0f;  /* a zero Q8_K block */
    x[E - 7] = 2.5f;                                                /* equal magnitudes, */
    x[E - 3] = -2.5f;                                               /* the first positive */
    if (T > 1) { x[E + 40] = -1.75f; x[E + 41] = 1.75f; }           /* the first negative */
    for (int64_t i = 0; i < T * s->n_expert; i++) logits[i] = 3.0f * test_rng_float(r);
    for (int64_t t = 0; t < T; t++)
        st_route_topk(logits + t * s->n_expert, s->n_expert, k, 1, ids + t * k, wts + t * k);
    if (bad_ids && k >= 2) { ids[1] = -1; ids[(T - 1) * k] = s->n_expert; }
    for (int64_t q = 0; q < P; q++) {
        const int gpu = split > 0 && q % split == 0;
        ig[q] = gpu ? ids[q] : -1;
        ic[q] = gpu ? -1 : ids[q];
    }
    /* the CPU: every slot's rows (the reference), the CPU share's rows, the sum */
    for (int64_t i = 0; i < P * E; i++) ref_rows[i] = cpu_rows[i] = -7.0f;
    st_moe_ffn_begin(g_tp, s->cpu, s->n_expert, x, T, ids, wts, k, ref, ws);
    st_moe_ffn_end_rows(g_tp, ws, ref_rows);
    st_moe_ffn_begin(g_tp, s->cpu, s->n_expert, x, T, ic, wts, k, ref, ws);
    st_moe_ffn_end_rows(g_tp, ws, cpu_rows);
    st_moe_ffn(g_tp, s->cpu, s->n_expert, x, T, ids, wts, k, ref, ws);
    /* the GPU's share, then the combine */
    const size_t wsz = st_cuda_moe_exact_wsize(T, k, E, s->n_ff);
    void *d_x = NULL, *d_ids = NULL, *d_ig = NULL, *d_w = NULL, *d_rows = NULL, *d_crows = NULL, *d_out = NULL,
         *d_ws = NULL;
    strata_status st = st_cuda_malloc(&d_x, sizeof(float) * (size_t)n);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_ids, sizeof(int32_t) * (size_t)P);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_ig, sizeof(int32_t) * (size_t)P);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_w, sizeof(float) * (size_t)P);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_rows, sizeof(float) * (size_t)(P * E + GUARD));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_crows, sizeof(float) * (size_t)(P * E));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_out, sizeof(float) * (size_t)(n + GUARD));
    if (st == STRATA_OK) st = st_cuda_malloc(&d_ws, wsz);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_x, x, sizeof(float) * (size_t)n);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_ids, ids, sizeof(int32_t) * (size_t)P);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_ig, ig, sizeof(int32_t) * (size_t)P);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_w, wts, sizeof(float) * (size_t)P);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_crows, cpu_rows, sizeof(float) * (size_t)(P * E));
    if (st == STRATA_OK) st = st_cuda_memset(d_rows, 0xA5, sizeof(float) * (size_t)(P * E + GUARD));
    if (st == STRATA_OK) st = st_cuda_memset(d_out, 0xA5, sizeof(float) * (size_t)(n + GUARD));
    if (st == STRATA_OK) st = st_cuda_memset(d_ws, 0xFF, wsz);
    st_cuda_moe_args a = ffn_args(s, d_x, T, d_ig, d_w, k, d_out, 0, d_ws, wsz);
    if (st == STRATA_OK) st = st_cuda_moe_exact_rows(&a, (float *)d_rows, NULL);
    if (st == STRATA_OK)
        st = st_cuda_moe_combine_rows((const int32_t *)d_ids, (const int32_t *)d_ig, (const float *)d_rows,
                                      (const float *)d_crows, (const float *)d_w, T, k, E, s->n_expert,
                                      (float *)d_out, NULL);
    if (st == STRATA_OK) st = st_cuda_synchronize();
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(got_rows, d_rows, sizeof(float) * (size_t)(P * E + GUARD));
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(got, d_out, sizeof(float) * (size_t)(n + GUARD));
    CHECK(st == STRATA_OK, "exact rows %s: %s", name, strata_last_error());
    if (st == STRATA_OK) {
        int64_t rows_bad = 0, poison_bad = 0, gpu_rows = 0, first_bad = -1;
        for (int64_t q = 0; q < P; q++) {
            const int mine = ig[q] >= 0 && ig[q] < s->n_expert;
            gpu_rows += mine;
            for (int64_t i = 0; i < E; i++) {
                uint32_t u;
                memcpy(&u, &got_rows[q * E + i], 4);
                if (mine && memcmp(&got_rows[q * E + i], &ref_rows[q * E + i], 4) != 0) {
                    if (first_bad < 0) first_bad = q * E + i;
                    rows_bad++;
                }
                if (!mine) poison_bad += u != SENTINEL;
            }
        }
        for (int64_t i = P * E; i < P * E + GUARD; i++) {
            uint32_t u;
            memcpy(&u, &got_rows[i], 4);
            poison_bad += u != SENTINEL;
        }
        int64_t out_bad = 0;
        for (int64_t i = 0; i < n; i++) out_bad += memcmp(&got[i], &ref[i], 4) != 0;
        for (int64_t i = n; i < n + GUARD; i++) {
            uint32_t u;
            memcpy(&u, &got[i], 4);
            poison_bad += u != SENTINEL;
        }
        printf("%-14s exact rows %s/%s n_embd=%lld n_ff=%lld T=%lld k=%d split %d: %lld GPU rows, %lld values "
               "differ%s, combine %lld of %lld differ, %lld stray writes  %s\n", name, strata_type_name(s->tg),
               strata_type_name(s->td), (long long)E, (long long)s->n_ff, (long long)T, k, split,
               (long long)gpu_rows, (long long)rows_bad, rows_bad ? " (first: see below)" : "", (long long)out_bad,
               (long long)n, (long long)poison_bad, rows_bad || out_bad || poison_bad ? "FAIL" : "pass");
        if (first_bad >= 0) {
            printf("  first difference at %lld: gpu %.9g cpu %.9g\n", (long long)first_bad,
                   (double)got_rows[first_bad], (double)ref_rows[first_bad]);
            exact_diagnose(s, x, T, k, ig, d_ws);
        }
        CHECK(rows_bad == 0, "exact rows %s %s/%s T=%lld: %lld values differ from the CPU's", name,
              strata_type_name(s->tg), strata_type_name(s->td), (long long)T, (long long)rows_bad);
        CHECK(out_bad == 0, "combine rows %s %s/%s T=%lld split %d: %lld of %lld differ from st_moe_ffn", name,
              strata_type_name(s->tg), strata_type_name(s->td), (long long)T, split, (long long)out_bad,
              (long long)n);
        CHECK(poison_bad == 0, "exact rows %s: %lld stray writes", name, (long long)poison_bad);
    }
    void *fr[] = {d_x, d_ids, d_ig, d_w, d_rows, d_crows, d_out, d_ws};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) (void)st_cuda_free(fr[i]);
    free(x); free(logits); free(ids); free(ig); free(ic); free(wts); free(ref_rows); free(cpu_rows);
    free(got_rows); free(ref); free(got); free(ws);
}

/* Routed experts of r_set plus a shared expert (sh_set, one-expert table) with a sigmoid gate,
 * accumulated into the routed output: as forward_cpu.c's st_ffn_block. */
static void check_shared(const expert_set *rs, const expert_set *sh, int64_t T, int32_t k, test_rng *r) {
    const clock_t c0 = clock();
    const int64_t n = T * rs->n_embd, P = T * k;
    float *x = malloc(sizeof(float) * (size_t)n), *ref = malloc(sizeof(float) * (size_t)n);
    float *ref2 = malloc(sizeof(float) * (size_t)n), *routed = malloc(sizeof(float) * (size_t)(n + GUARD));
    float *got = malloc(sizeof(float) * (size_t)(n + GUARD));
    float *logits = malloc(sizeof(float) * (size_t)(T * rs->n_expert));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)P), *zeros = calloc((size_t)T, sizeof(int32_t));
    float *wts = malloc(sizeof(float) * (size_t)P), *gate = malloc(sizeof(float) * (size_t)T);
    for (int64_t i = 0; i < n; i++) x[i] = test_rng_float(r);
    for (int64_t i = 0; i < T * rs->n_expert; i++) logits[i] = 3.0f * test_rng_float(r);
    for (int64_t t = 0; t < T; t++) {
        st_route_topk(logits + t * rs->n_expert, rs->n_expert, k, 0, ids + t * k, wts + t * k);
        gate[t] = st_sigmoid(2.0f * test_rng_float(r));
    }
    cpu_ffn(rs, x, T, ids, wts, k, ref);
    cpu_ffn(sh, x, T, zeros, gate, 1, ref2);
    for (int64_t i = 0; i < n; i++) ref[i] += ref2[i];
    int same1 = 0, same2 = 0;
    if (gpu_ffn(rs, x, T, ids, wts, k, 0, NULL, routed, &same1) &&
        gpu_ffn(sh, x, T, zeros, gate, 1, 1, routed, got, &same2))
        report("shared+routed", sh, T, 1, compare(got, ref, n), same1 && same2,
               tol_for(sh->tg, sh->td), (double)(clock() - c0) / CLOCKS_PER_SEC,
               (exact_nmse){-1, -1});
    free(x); free(ref); free(ref2); free(routed); free(got); free(logits); free(ids); free(zeros);
    free(wts); free(gate);
}

/* ---- argument errors (no device needed) ------------------------------------------------------ */

static void test_arguments(void) {
    CHECK(st_cuda_moe_supports(STRATA_TYPE_Q4_K) && st_cuda_moe_supports(STRATA_TYPE_Q6_K) &&
          st_cuda_moe_supports(STRATA_TYPE_Q8_0) && st_cuda_moe_type_dp4a(STRATA_TYPE_Q4_K) &&
          st_cuda_moe_type_dp4a(STRATA_TYPE_Q6_K) && st_cuda_moe_type_dp4a(STRATA_TYPE_Q8_0) &&
          st_cuda_moe_type_dp4a(STRATA_TYPE_Q5_K) && st_cuda_moe_type_dp4a(STRATA_TYPE_Q4_0),
          "required dp4a types missing");
    static const strata_type iq[] = {STRATA_TYPE_IQ4_XS, STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ3_S, STRATA_TYPE_IQ2_XXS,
                                     STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ2_S, STRATA_TYPE_IQ1_S, STRATA_TYPE_IQ1_M,
                                     STRATA_TYPE_MXFP4};
    for (size_t i = 0; i < sizeof iq / sizeof iq[0]; i++)
        CHECK(st_cuda_moe_supports(iq[i]) && st_cuda_moe_type_dp4a(iq[i]) && st_cuda_moe_type_tiles(iq[i]),
              "%s: no dp4a expert kernel or tiles", strata_type_name(iq[i]));
    /* the grouped GEMVs' q8_1 types: every dp4a type, some fallback types unless a build turns
     * them off (STRATA_MOE_DP4A_EXT=0), never Q2_K or the float types */
    for (int t = 0; t < STRATA_TYPE_COUNT; t++)
        CHECK(!st_cuda_moe_type_dp4a((strata_type)t) || st_cuda_moe_type_gemv_q8((strata_type)t),
              "%s: a dp4a type off the q8 GEMVs", strata_type_name((strata_type)t));
    CHECK(!st_cuda_moe_type_gemv_q8(STRATA_TYPE_Q2_K) && !st_cuda_moe_type_gemv_q8(STRATA_TYPE_F32) &&
          !st_cuda_moe_type_gemv_q8(STRATA_TYPE_F16) && !st_cuda_moe_type_gemv_q8(STRATA_TYPE_BF16),
          "Q2_K and the float types are the f32 fallback's");
    /* STRATA_IQ_STAGE_TABLES' default, by a faked compute capability: 6.0 only */
    CHECK(st_cuda_iq_stage_default(6, 0) && !st_cuda_iq_stage_default(6, 1) && !st_cuda_iq_stage_default(7, 0) &&
          !st_cuda_iq_stage_default(8, 6) && !st_cuda_iq_stage_default(9, 0) && !st_cuda_iq_stage_default(5, 0),
          "iq_stage_tables default");
    CHECK(!st_cuda_moe_supports((strata_type)4) && !st_cuda_moe_supports(STRATA_TYPE_COUNT),
          "unknown types must be unsupported");
    CHECK(st_cuda_moe_ffn(NULL, NULL) == STRATA_ERR_INVALID_ARG, "NULL args");
    st_cuda_moe_args a;
    memset(&a, 0, sizeof a);
    a.experts = (const st_cuda_expert *)(uintptr_t)0x1000;
    a.x = (const float *)(uintptr_t)0x2000;
    a.ids = (const int32_t *)(uintptr_t)0x3000;
    a.wts = (const float *)(uintptr_t)0x4000;
    a.out = (float *)(uintptr_t)0x5000;
    a.ws = (void *)(uintptr_t)0x6000;
    a.ws_bytes = (size_t)1 << 40;
    a.n_expert = 8; a.k = 2; a.T = 1; a.n_embd = 256; a.n_ff = 512;
    a.type_gate = STRATA_TYPE_Q4_K; a.type_up = STRATA_TYPE_Q8_0; a.type_down = STRATA_TYPE_Q6_K;
    strata_status st = st_cuda_moe_ffn(&a, NULL);
    CHECK(st == STRATA_ERR_UNSUPPORTED, "gate/up of different types: %s", strata_status_name(st));
    a.type_up = STRATA_TYPE_Q4_K;
    a.n_embd = 288;
    st = st_cuda_moe_ffn(&a, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "n_embd 288 for Q4_K: %s", strata_status_name(st));
    a.n_embd = 256;
    a.type_gate = a.type_up = a.type_down = STRATA_TYPE_F16; /* no tile kernel */
    a.T = 600;
    st = st_cuda_moe_ffn(&a, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "T * k > 1024 without tiles: %s", strata_status_name(st));
    a.type_gate = a.type_up = a.type_down = STRATA_TYPE_Q4_K;
    a.T = 1;
    a.act = 2;
    st = st_cuda_moe_ffn(&a, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "act 2: %s", strata_status_name(st));
    if (!st_cuda_moe_tiles_oai()) { /* biased / gpt-oss experts keep the GEMV path: over 1024 pairs is refused */
        a.act = 1;
        a.T = 600;
        st = st_cuda_moe_ffn(&a, NULL);
        CHECK(st == STRATA_ERR_INVALID_ARG, "gpt-oss's act over 1024 pairs: %s", strata_status_name(st));
        a.act = 0;
    }
    a.T = ST_CUDA_MOE_MAX_PAIRS / 2 + 1;
    st = st_cuda_moe_ffn(&a, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "T * k > ST_CUDA_MOE_MAX_PAIRS: %s", strata_status_name(st));
    a.T = 1;
    a.ws_bytes = 16;
    st = st_cuda_moe_ffn(&a, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "small workspace: %s", strata_status_name(st));
    CHECK(st_cuda_moe_wsize(8, 8, 2048, 768) > 64 * 768 * sizeof(float), "workspace size");
    int32_t *di = (int32_t *)(uintptr_t)0x1000;
    float *dw = (float *)(uintptr_t)0x2000;
    st = st_cuda_moe_route((const float *)(uintptr_t)0x3000, 1, 8, 9, 0, di, dw, NULL, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "k > n_expert: %s", strata_status_name(st));
    st = st_cuda_moe_route((const float *)(uintptr_t)0x3000, 1, 8, 2, 0, NULL, NULL, NULL, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "no output: %s", strata_status_name(st));
    CHECK(st_cuda_doorbell_free(NULL) == STRATA_OK, "doorbell free NULL");
    { /* scored rules: refusals before any device work */
        st_cuda_route_cfg c;
        memset(&c, 0, sizeof c);
        c.n_expert = 256; c.k = 8; c.sigmoid = 1; c.norm = 1; c.scale = 1.0f; c.n_groups = 8; c.n_group_used = 4;
        CHECK(!st_cuda_route_plain(&c), "sigmoid is not the plain rule");
        c.n_groups = 7;
        st = st_cuda_moe_route_cfg(&c, (const float *)(uintptr_t)0x3000, 1, di, dw, NULL, NULL);
        CHECK(st == STRATA_ERR_INVALID_ARG, "7 groups of 256 experts: %s", strata_status_name(st));
        c.n_groups = 64; c.n_group_used = 1; /* 4 experts for k 8 */
        st = st_cuda_moe_route_cfg(&c, (const float *)(uintptr_t)0x3000, 1, di, dw, NULL, NULL);
        CHECK(st == STRATA_ERR_INVALID_ARG, "groups holding fewer than k: %s", strata_status_name(st));
        c.n_groups = 1; c.n_expert = 4096;
        st = st_cuda_moe_route_cfg(&c, (const float *)(uintptr_t)0x3000, 1, di, dw, NULL, NULL);
        CHECK(st == STRATA_ERR_INVALID_ARG, "a scored rule over 4096 experts: %s", strata_status_name(st));
        c.sigmoid = 0; c.norm = 0;
        CHECK(st_cuda_route_plain(&c), "softmax, no bias, no groups, scale 1: the plain rule");
        c.n_expert = 32; c.k = 4; c.softmax_weight = 1;
        CHECK(!st_cuda_route_plain(&c), "softmax over the k is not the plain rule");
        c.sigmoid = 1;
        st = st_cuda_moe_route_cfg(&c, (const float *)(uintptr_t)0x3000, 1, di, dw, NULL, NULL);
        CHECK(st == STRATA_ERR_INVALID_ARG, "sigmoid and softmax_weight: %s", strata_status_name(st));
        c.sigmoid = 0;
        c.d_logit_bias = dw;
        st = st_cuda_moe_route_cfg(&c, (const float *)(uintptr_t)0x3000, 1, di, dw, NULL, NULL);
        CHECK(st == STRATA_ERR_INVALID_ARG, "a logit bias in st_cuda_moe_route_cfg: %s", strata_status_name(st));
    }
    /* the CPU-exact rows: the types they take, and refusals before any device work */
    CHECK(st_cuda_moe_exact_supports(STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K) &&
              st_cuda_moe_exact_supports(STRATA_TYPE_Q8_0, STRATA_TYPE_Q4_0) &&
              !st_cuda_moe_exact_supports(STRATA_TYPE_Q3_K, STRATA_TYPE_Q4_K) &&
              !st_cuda_moe_exact_supports(STRATA_TYPE_Q4_K, STRATA_TYPE_F16),
          "exact rows: supported types");
    CHECK(st_cuda_moe_exact_rows(NULL, NULL, NULL) == STRATA_ERR_INVALID_ARG, "exact rows: NULL args");
    {
        st_cuda_moe_args xa;
        memset(&xa, 0, sizeof xa);
        float dummy[4];
        xa.experts = (const st_cuda_expert *)dummy; xa.x = dummy; xa.ids = (const int32_t *)dummy; xa.ws = dummy;
        xa.n_expert = 8; xa.T = 1; xa.k = 2; xa.n_embd = 256; xa.n_ff = 256;
        xa.type_gate = xa.type_up = STRATA_TYPE_Q3_K; xa.type_down = STRATA_TYPE_Q4_K;
        CHECK(st_cuda_moe_exact_rows(&xa, dummy, NULL) == STRATA_ERR_UNSUPPORTED, "exact rows: Q3_K refused");
        xa.type_gate = xa.type_up = STRATA_TYPE_Q4_K;
        xa.b_down = dummy;
        CHECK(st_cuda_moe_exact_rows(&xa, dummy, NULL) == STRATA_ERR_UNSUPPORTED, "exact rows: biases refused");
        xa.b_down = NULL;
        xa.n_embd = 288;
        CHECK(st_cuda_moe_exact_rows(&xa, dummy, NULL) == STRATA_ERR_INVALID_ARG, "exact rows: 288 not whole Q4_K blocks");
        xa.n_embd = 256;
        xa.ws_bytes = 16;
        CHECK(st_cuda_moe_exact_rows(&xa, dummy, NULL) == STRATA_ERR_INVALID_ARG, "exact rows: small workspace");
        xa.T = 40000;
        CHECK(st_cuda_moe_exact_rows(&xa, dummy, NULL) == STRATA_ERR_INVALID_ARG, "exact rows: too many pairs");
        CHECK(st_cuda_moe_combine_rows(NULL, NULL, NULL, NULL, NULL, 1, 2, 8, 8, NULL, NULL) == STRATA_ERR_INVALID_ARG,
              "combine rows: NULL args");
    }
}

/* a name in TEST_CUDA_MOE_TYPES's comma list, any case (every type when the list is NULL) */
static int type_listed(const char *list, strata_type t) {
    if (!list) return 1;
    const char *name = strata_type_name(t);
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        size_t k = 0;
        while (len == n && k < n && tolower((unsigned char)p[k]) == tolower((unsigned char)name[k])) k++;
        if (len == n && k == n) return 1;
        p += len + (e != NULL);
    }
    return 0;
}

/* every tile type (of the list) at odd sizes: T >= 32 takes the tensor-core tiles */
static void tile_cases(const strata_type *types, size_t n, const char *only, test_rng *r) {
    expert_set s;
    for (size_t i = 0; i < n; i++) {
        const strata_type t = types[i];
        if (!st_cuda_moe_type_tiles(t) || !type_listed(only, t)) continue;
        const int kq = strata_type_block_size(t) == 256;
        if (!expert_set_make(&s, kq ? 512 : 96, kq ? 768 : 224, 6, 6, t, t, r)) { expert_set_free(&s); continue; }
        check_ffn("tiles", &s, 40, 3, 1, 0, r);
        check_ffn("tiles", &s, 77, 3, 0, 1, r);
        expert_set_free(&s);
    }
}

int main(void) {
    test_arguments();

    int available = 0;
    char reason[256];
    strata_status st = st_cuda_probe(&available, reason, sizeof reason);
    CHECK(st == STRATA_OK, "probe: %s", strata_last_error());
    if (!available) {
        CHECK(reason[0] != '\0', "unavailable without a reason");
        st_cuda_doorbell db;
        st = st_cuda_doorbell_alloc(&db, 8, 8);
        CHECK(st == STRATA_ERR_UNSUPPORTED && strstr(strata_last_error(), reason) != NULL,
              "no device: doorbell %s '%s'", strata_status_name(st), strata_last_error());
        SKIP("GPU checks: CUDA unavailable: %s", reason);
        return test_report();
    }
    printf("device: %s\n", reason);
    if (!cases_pool_create()) return test_report();

    test_rng r = {0x9E3779B97F4A7C15ULL};
    if (getenv("TEST_CUDA_MOE_OAI_ONLY")) { /* set: the argument checks alone (the gpt-oss cases:
                                             * test_cuda_moe_lowbit, a quick device A/B) */
        st_threadpool_free(g_tp);
        return test_report();
    }

    /* router */
    check_route(1, 128, 8, 1, 0, &r);
    check_route(8, 128, 8, 0, 0, &r);
    check_route(8, 128, 8, 1, 1, &r);   /* many ties */
    check_route(5, 64, 8, 0, 0, &r);
    check_route(8, 8, 2, 1, 0, &r);
    check_route(37, 60, 4, 1, 0, &r);
    check_route(3, 256, 8, 1, 1, &r);
    check_route(2, 1000, 16, 0, 0, &r);
    { /* scored rules (st_route_scored): a stream of their own, the cases below keep their data */
        test_rng r2 = {0x94D049BB133111EBULL};
        check_route_scored(8, 128, 8, 0, 1, 2.0f, 1, 1, 0, 0, &r2);   /* softmax x scale: by logit */
        check_route_scored(8, 160, 6, 0, 0, 16.0f, 8, 3, 0, 0, &r2);  /* DeepSeek-V2: softmax, 8 groups, 3 */
        check_route_scored(8, 64, 6, 0, 1, 1.0f, 1, 1, 1, 0, &r2);    /* softmax + bias */
        check_route_scored(8, 256, 8, 1, 1, 2.5f, 8, 4, 1, 0, &r2);   /* DeepSeek-V3 */
        check_route_scored(1, 256, 8, 1, 1, 2.5f, 8, 4, 1, 0, &r2);
        check_route_scored(8, 256, 8, 1, 1, 2.5f, 8, 4, 1, 1, &r2);   /* ties */
        check_route_scored(5, 384, 8, 1, 1, 2.827f, 1, 1, 1, 0, &r2); /* Kimi-K2: one group */
        check_route_scored(3, 16, 4, 1, 1, 2.5f, 4, 2, 1, 0, &r2);    /* the tiny DeepseekV3 */
        check_route_scored(3, 16, 4, 1, 0, 1.0f, 4, 2, 0, 1, &r2);    /* sigmoid alone, ties */
        check_route_scored(4, 64, 8, 1, 1, 1.0f, 8, 1, 1, 0, &r2);    /* one group of 8 used: k = its size */
        check_route_scored(37, 1000, 16, 1, 1, 1.0f, 1, 1, 1, 0, &r2); /* beyond a block of threads */
        check_router1_scored(2048, 256, 8, 8, 4, 0, &r2);
        check_router1_scored(1024, 64, 6, 1, 1, 0, &r2);
    }
    { /* (a stream of its own: the expert cases below keep their data) */
        test_rng r1 = {0xD1B54A32D192ED03ULL};
        check_router1(2048, 128, 8, 1, &r1);
        check_router1(2048, 64, 8, 0, &r1);
        check_router1(96, 8, 2, 1, &r1);
        check_router1(4096, 256, 8, 1, &r1);
        check_router1(1312, 60, 4, 0, &r1);
    }

    expert_set s;
    /* TEST_CUDA_MOE_TYPES=Q3_K,Q5_0,...: the per-type cases of those types alone (a device A/B of
     * moe.cu's build switches) */
    const char *only = getenv("TEST_CUDA_MOE_TYPES");
    /* every supported type on small odd shapes (row chunks fewer than and not a multiple of 32) */
    static const strata_type types[] = {
        STRATA_TYPE_Q4_0, STRATA_TYPE_Q8_0, STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_K, STRATA_TYPE_Q6_K,
        STRATA_TYPE_F32, STRATA_TYPE_F16, STRATA_TYPE_BF16, STRATA_TYPE_Q4_1, STRATA_TYPE_Q5_0,
        STRATA_TYPE_Q5_1, STRATA_TYPE_IQ4_NL, STRATA_TYPE_Q2_K, STRATA_TYPE_Q3_K, STRATA_TYPE_IQ4_XS,
        STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ3_S, STRATA_TYPE_IQ2_XXS, STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ2_S,
        STRATA_TYPE_IQ1_S, STRATA_TYPE_IQ1_M, STRATA_TYPE_MXFP4,
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const strata_type t = types[i];
        if (!type_listed(only, t)) continue;
        if (!strata_type_can_dot(t) || !strata_type_can_dequantize(t)) {
            CHECK(0, "%s experts: no CPU path to compare with", strata_type_name(t));
            continue;
        }
        const int kq = strata_type_block_size(t) == 256;
        const int64_t sizes[2][2] = {{kq ? 512 : 96, kq ? 768 : 224}, {kq ? 2304 : 1312, kq ? 1280 : 800}};
        for (int z = 0; z < 2; z++) {
            if (!expert_set_make(&s, sizes[z][0], sizes[z][1], 6, 6, t, t, &r)) { expert_set_free(&s); continue; }
            check_ffn("small", &s, 1, 3, 0, 0, &r);
            check_ffn("small", &s, 3, 3, 1, 0, &r);
            check_ffn("small", &s, 8, 3, 1, z, &r);
            expert_set_free(&s);
        }
    }
    if (only) { /* the per-type tile cases next, then nothing else */
        tile_cases(types, sizeof types / sizeof types[0], only, &r);
        st_threadpool_free(g_tp);
        return test_report();
    }
    /* 1..8 columns, groups larger than 8 pairs, bad ids */
    if (expert_set_make(&s, 768, 512, 5, 5, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, &r)) {
        for (int64_t T = 1; T <= 8; T++) check_ffn("columns", &s, T, 2, 1, 0, &r);
        check_ffn("bad ids", &s, 4, 3, 1, 1, &r);
        check_ffn("bad ids", &s, 1, 3, 1, 1, &r);
    }
    expert_set_free(&s);
    /* CPU-exact rows: each type alone and the qwen3 mix, splits of every kind, T = 1..8 */
    for (size_t i = 0; i < 5; i++) { /* Q4_0, Q8_0, Q4_K, Q5_K, Q6_K */
        const strata_type t = types[i];
        const int kq = strata_type_block_size(t) == 256;
        if (!expert_set_make(&s, kq ? 768 : 224, kq ? 512 : 96, 6, 6, t, t, &r)) { expert_set_free(&s); continue; }
        check_exact("exact", &s, 1, 3, 2, 0, &r);
        check_exact("exact", &s, 3, 3, 1, 1, &r);
        check_exact("exact", &s, 8, 3, 3, 0, &r);
        check_exact("exact", &s, 2, 3, 0, 0, &r);
        expert_set_free(&s);
    }
    if (expert_set_make(&s, 2048, 768, 128, 16, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, &r)) {
        for (int64_t T = 1; T <= 8; T++) check_exact("qwen3 exact", &s, T, 8, 1 + (int)(T % 3), T == 4, &r);
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 2048, 1024, 64, 16, STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, &r)) {
        check_exact("olmoe exact", &s, 1, 8, 3, 0, &r);
        check_exact("olmoe exact", &s, 1, 8, 1, 0, &r);
    }
    expert_set_free(&s);
    /* prompt batches: the tensor-core tile path (T >= 32 and T * k >= 4 n_expert, or > 1024
     * pairs) for every tile type, odd sizes, bad ids, more pairs than the GEMV path takes */
    tile_cases(types, sizeof types / sizeof types[0], NULL, &r);
    if (expert_set_make(&s, 768, 512, 5, 5, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, &r)) {
        check_ffn("tiles", &s, 300, 4, 1, 0, &r);  /* 1200 pairs */
        check_ffn("tiles", &s, 64, 2, 1, 0, &r);
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 512, 256, 3, 3, STRATA_TYPE_Q8_0, STRATA_TYPE_Q8_0, &r)) {
        check_ffn("big groups", &s, 16, 2, 1, 0, &r);
        check_ffn("big groups", &s, 33, 3, 0, 0, &r);
    }
    expert_set_free(&s);

    /* Qwen3-30B-A3B: 2048, 768, 128 experts top-8 (16 materialized) */
    if (expert_set_make(&s, 2048, 768, 128, 16, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, &r)) {
        static const int64_t Ts[] = {1, 2, 3, 5, 8};
        for (size_t i = 0; i < 5; i++) check_ffn("qwen3-30b-a3b", &s, Ts[i], 8, 1, 0, &r);
        check_ffn("qwen3-30b-a3b", &s, 80, 8, 1, 0, &r); /* tiles */
    }
    expert_set_free(&s);
    if (expert_set_make(&s, 2048, 768, 128, 16, STRATA_TYPE_Q8_0, STRATA_TYPE_Q8_0, &r)) {
        check_ffn("qwen3-30b-a3b", &s, 1, 8, 1, 0, &r);
        check_ffn("qwen3-30b-a3b", &s, 8, 8, 1, 0, &r);
    }
    expert_set_free(&s);
    /* OLMoE-1B-7B: 2048, 1024, 64 experts top-8 (no renormalization) */
    if (expert_set_make(&s, 2048, 1024, 64, 16, STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, &r)) {
        check_ffn("olmoe-1b-7b", &s, 1, 8, 0, 0, &r);
        check_ffn("olmoe-1b-7b", &s, 8, 8, 0, 0, &r);
        check_ffn("olmoe-1b-7b", &s, 48, 8, 0, 0, &r); /* tiles */
    }
    expert_set_free(&s);
    /* Mixtral: 4096, 14336, 8 experts top-2 (2 materialized) */
    if (expert_set_make(&s, 4096, 14336, 8, 2, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, &r)) {
        check_ffn("mixtral", &s, 1, 2, 1, 0, &r);
        check_ffn("mixtral", &s, 8, 2, 1, 0, &r);
    }
    expert_set_free(&s);
    /* shared expert with a sigmoid gate on top of routed experts (qwen2moe-like) */
    expert_set sh;
    memset(&sh, 0, sizeof sh);
    if (expert_set_make(&s, 2048, 768, 64, 8, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, &r) &&
        expert_set_make(&sh, 2048, 2816, 1, 1, STRATA_TYPE_Q8_0, STRATA_TYPE_Q6_K, &r)) {
        check_shared(&s, &sh, 1, 8, &r);
        check_shared(&s, &sh, 8, 8, &r);
        check_shared(&s, &sh, 64, 8, &r); /* tiles for both */
    }
    expert_set_free(&s);
    expert_set_free(&sh);
    st_threadpool_free(g_tp);
    return test_report();
}

#else /* !STRATA_HAVE_CUDA */

TEST_MAIN_WITHOUT_CUDA()

#endif
