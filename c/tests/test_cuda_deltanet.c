/* test_cuda_deltanet.c - qwen3next's GPU session (c/engine/cuda/deltanet_gpu.c, kernels
 * c/cuda/deltanet.cu) against its CPU session on a random qwen3next model built here
 * (model_build.h: 2 gated DeltaNet layers, 2 gated attention layers, MoE with a gated shared
 * expert, partial rope, head_dim 64 for the GPU attention):
 *   - teacher-forced logits of 48 tokens: mean KL(cpu || gpu) <= 1e-4, the same top-1 at every
 *     position, and the same 24 greedy tokens, for every expert placement (all resident,
 *     n_cpu_moe over every layer, an expert cache of n_expert slots) and with CUDA graphs;
 *   - on the GPU, bit for bit, the decode-sized batchings (every call under
 *     ST_CUDA_MMQ_MIN_ROWS rows, the matmuls on the GEMV): n_batch 7, calls of 5 and token by
 *     token; the prompt in one batch (48 rows: the matmuls on the prompt tiles, other f32
 *     summation orders, as for every architecture) the same bits run to run and within the
 *     parity bound of token by token (mean KL <= 1e-4, the same top-1 at every position);
 *   - rollback: a verify window truncated inside it and decoded on gives the bits of a session
 *     that never saw the dropped tokens (batched windows and graph-replayed single steps), a
 *     truncation outside the window is refused with n_past kept, and reset starts over.
 * Without a usable GPU only the CPU side runs (the model builds and decodes, the batching and
 * rollback checks hold on the CPU session) and a CUDA session is refused for want of a GPU, not
 * for the architecture. */
#include "logits_cmp.h"
#include "model_build.h"
#include "strata.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_TOK 48
#define N_GEN 24

static int g_cpu_moe, g_cache, g_graphs;
static strata_backend_kind g_be = STRATA_BACKEND_CUDA; /* of test_batching, test_rollback */

static strata_session *new_session(const strata_model *m, strata_backend_kind be, int n_batch) {
    strata_session_params sp = strata_session_default_params();
    sp.backend = be;
    sp.n_batch = n_batch;
    sp.n_ctx = 256;
    sp.n_threads = 2;
    sp.kv_type = STRATA_TYPE_F32;
    if (be == STRATA_BACKEND_CUDA) {
        sp.placement.n_cpu_moe = g_cpu_moe;
        sp.placement.expert_cache = g_cache;
        sp.cuda.graphs = g_graphs;
    }
    strata_session *s = NULL;
    const strata_status st = strata_session_create(m, &sp, &s);
    CHECK(st == STRATA_OK, "session (%s, n_batch %d): %s", be == STRATA_BACKEND_CUDA ? "cuda" : "cpu", n_batch,
          strata_last_error());
    return st == STRATA_OK ? s : NULL;
}

/* Every position's logits of toks[0..n) ([n][V]) in calls of `call` tokens; NULL on failure. */
static float *all_logits(const strata_model *m, strata_backend_kind be, int n_batch, int call,
                         const strata_token *toks, int64_t n, int32_t V) {
    strata_session *s = new_session(m, be, n_batch);
    if (!s) return NULL;
    float *lg = malloc(sizeof(float) * (size_t)n * (size_t)V);
    strata_status st = STRATA_OK;
    for (int64_t off = 0; off < n && st == STRATA_OK; off += call) {
        const int64_t k = n - off < call ? n - off : call;
        st = strata_session_decode(s, toks + off, k, lg + off * V, 1);
    }
    CHECK(st == STRATA_OK, "decode %lld tokens: %s", (long long)n, strata_last_error());
    strata_session_free(s);
    if (st != STRATA_OK) { free(lg); return NULL; }
    return lg;
}

/* n greedy tokens after prompt p, one decode_greedy call per step. */
static int greedy(const strata_model *m, strata_backend_kind be, const strata_token *p, int64_t np, int n,
                  strata_token *out) {
    strata_session *s = new_session(m, be, 16);
    if (!s) return 0;
    strata_status st = strata_session_decode_greedy(s, p, np, &out[0]);
    for (int i = 1; i < n && st == STRATA_OK; i++) st = strata_session_decode_greedy(s, &out[i - 1], 1, &out[i]);
    CHECK(st == STRATA_OK, "greedy: %s", strata_last_error());
    strata_session_free(s);
    return st == STRATA_OK;
}

/* CPU against GPU in the current placement: KL, top-1, greedy tokens. */
static void test_parity(const strata_model *m, const strata_token *toks, int32_t V, const char *what) {
    float *cpu = all_logits(m, STRATA_BACKEND_CPU, 16, 16, toks, N_TOK, V);
    float *gpu = all_logits(m, STRATA_BACKEND_CUDA, 16, 16, toks, N_TOK, V);
    if (cpu && gpu) {
        double kl = 0, klmax = 0;
        int top = 0, nan = 0;
        for (int t = 0; t < N_TOK; t++) {
            const double k = kl_row(cpu + t * V, gpu + t * V, V);
            kl += k;
            klmax = fmax(klmax, k);
            top += argmax(cpu + t * V, V) == argmax(gpu + t * V, V);
            for (int32_t i = 0; i < V; i++) nan += isnan(gpu[t * V + i]);
        }
        kl /= N_TOK;
        printf("%-14s mean KL %.3g, max %.3g, top-1 %d/%d\n", what, kl, klmax, top, N_TOK);
        CHECK(nan == 0 && kl <= 1e-4, "%s: mean KL(cpu || gpu) %.3g > 1e-4 (NaN %d)", what, kl, nan);
        CHECK(top == N_TOK, "%s: top-1 differs at %d positions", what, N_TOK - top);
    }
    free(cpu); free(gpu);
    strata_token a[N_GEN], b[N_GEN];
    if (greedy(m, STRATA_BACKEND_CPU, toks, 8, N_GEN, a) && greedy(m, STRATA_BACKEND_CUDA, toks, 8, N_GEN, b))
        CHECK(memcmp(a, b, sizeof a) == 0, "%s: greedy tokens differ", what);
}

/* Bit for bit across batchings. The GPU: the batchings whose calls all stay under
 * ST_CUDA_MMQ_MIN_ROWS (32) rows take the GEMV for every matmul and give one set of bits; the
 * prompt in one call (48 rows) takes the prompt tiles (cuda_mmq.h: the float tiles sum in k
 * order, the GEMV in lane slices), which no architecture's session gives the GEMV's bits for:
 * the same bits run to run, within the parity bound of token by token. The CPU: all the same. */
static void test_batching(const strata_model *m, const strata_token *toks, int32_t V) {
    const size_t bytes = sizeof(float) * N_TOK * (size_t)V;
    const int gpu = g_be == STRATA_BACKEND_CUDA;
    float *one = all_logits(m, g_be, 64, 64, toks, N_TOK, V);
    float *seven = all_logits(m, g_be, 7, 64, toks, N_TOK, V);
    float *calls = all_logits(m, g_be, 64, 5, toks, N_TOK, V);
    float *each = all_logits(m, g_be, 64, 1, toks, N_TOK, V);
    float *again = all_logits(m, g_be, 64, 64, toks, N_TOK, V);
    if (one && seven && calls && each && again) {
        CHECK(memcmp(one, again, bytes) == 0, "%s: two runs differ", gpu ? "gpu" : "cpu");
        CHECK(memcmp(each, seven, bytes) == 0, "%s: token by token != n_batch 7", gpu ? "gpu" : "cpu");
        CHECK(memcmp(each, calls, bytes) == 0, "%s: token by token != calls of 5", gpu ? "gpu" : "cpu");
        if (!gpu) {
            CHECK(memcmp(one, each, bytes) == 0, "cpu: one batch != token by token");
        } else {
            double kl = 0;
            int top = 0;
            for (int t = 0; t < N_TOK; t++) {
                kl += kl_row(each + t * V, one + t * V, V);
                top += argmax(each + t * V, V) == argmax(one + t * V, V);
            }
            kl /= N_TOK;
            printf("one batch (prompt tiles) vs token by token: mean KL %.3g, top-1 %d/%d, bits %s\n", kl, top,
                   N_TOK, memcmp(one, each, bytes) ? "differ" : "equal");
            CHECK(kl <= 1e-4, "gpu: one batch vs token by token: mean KL %.3g > 1e-4", kl);
            CHECK(top == N_TOK, "gpu: one batch vs token by token: top-1 differs at %d positions", N_TOK - top);
        }
    }
    free(one); free(seven); free(calls); free(each); free(again);
}

/* Rollback: windows of `win` tokens per call (1: single steps, graph-replayed with g_graphs). */
static void test_rollback(const strata_model *m, const strata_token *toks, int32_t V, int win) {
    const int np = 20, nw = 6, keep = 2;
    strata_session *a = new_session(m, g_be, 16), *b = new_session(m, g_be, 16);
    float *la = malloc(sizeof(float) * 8 * (size_t)V), *lb = malloc(sizeof(float) * 8 * (size_t)V);
    if (!a || !b || !la || !lb) goto done;
    strata_token drop[6], redo[4];
    for (int i = 0; i < nw; i++) drop[i] = (strata_token)((i * 11 + 5) % V);
    for (int i = 0; i < 4; i++) redo[i] = (strata_token)((i * 13 + 2) % V);
    CHECK(strata_session_decode(a, toks, np, NULL, 0) == STRATA_OK, "prompt: %s", strata_last_error());
    for (int off = 0; off < nw; off += win)
        CHECK(strata_session_decode(a, drop + off, win < nw - off ? win : nw - off, la, 1) == STRATA_OK,
              "window: %s", strata_last_error());
    /* outside the window: refused, n_past kept */
    CHECK(strata_session_truncate(a, np - 3) == STRATA_ERR_UNSUPPORTED, "truncate before the window refused");
    CHECK(strata_session_n_past(a) == np + nw, "n_past kept after the refusal");
    CHECK(strata_session_truncate(a, np + keep) == STRATA_OK, "truncate: %s", strata_last_error());
    CHECK(strata_session_decode(a, redo, 4, la, 1) == STRATA_OK, "redo: %s", strata_last_error());
    /* b: the same tokens without the dropped ones */
    strata_token seq[26];
    memcpy(seq, toks, sizeof(strata_token) * np);
    memcpy(seq + np, drop, sizeof(strata_token) * keep);
    CHECK(strata_session_decode(b, seq, np + keep, NULL, 0) == STRATA_OK, "b prompt: %s", strata_last_error());
    CHECK(strata_session_decode(b, redo, 4, lb, 1) == STRATA_OK, "b: %s", strata_last_error());
    CHECK(memcmp(la, lb, sizeof(float) * 4 * (size_t)V) == 0, "rollback (windows of %d): logits after the "
          "truncation differ from a session without the dropped tokens", win);
    /* reset: position 0 again, the bits of a fresh session */
    strata_session_reset(a);
    strata_session_reset(b);
    CHECK(strata_session_decode(a, toks, np, la, 0) == STRATA_OK, "after reset: %s", strata_last_error());
    CHECK(strata_session_decode(b, toks, np, lb, 0) == STRATA_OK, "b after reset: %s", strata_last_error());
    CHECK(memcmp(la, lb, sizeof(float) * (size_t)V) == 0, "reset: logits differ");
done:
    strata_session_free(a); strata_session_free(b);
    free(la); free(lb);
}

int main(void) {
    spec s = base_spec("qwen3next");
    char path[64];
    snprintf(path, sizeof path, "/tmp/strata_cuda_deltanet_%d.gguf", (int)getpid());
    strata_model *m = NULL;
    if (!write_model(&s, path) || strata_model_load(path, NULL, &m) != STRATA_OK) {
        CHECK(0, "could not build the qwen3next model: %s", strata_last_error());
        unlink(path);
        return test_report();
    }
    unlink(path);
    const int32_t V = s.n_vocab;
    strata_token toks[N_TOK];
    for (int i = 0; i < N_TOK; i++) toks[i] = (strata_token)((i * 7 + 3) % V);
    strata_backend_info bi;
    CHECK(strata_backend_query(STRATA_BACKEND_CUDA, &bi) == STRATA_OK, "backend query");
    if (!bi.available) {
        float *cpu = all_logits(m, STRATA_BACKEND_CPU, 16, 16, toks, N_TOK, V);
        CHECK(cpu != NULL, "the CPU session decodes the model");
        free(cpu);
        g_be = STRATA_BACKEND_CPU; /* the checks themselves, on the CPU's contract */
        test_batching(m, toks, V);
        test_rollback(m, toks, V, 6);
        test_rollback(m, toks, V, 1);
        strata_session_params sp = strata_session_default_params();
        sp.backend = STRATA_BACKEND_CUDA;
        strata_session *sess = NULL;
        const strata_status st = strata_session_create(m, &sp, &sess);
        CHECK(st == STRATA_ERR_UNSUPPORTED && !sess, "CUDA session without a GPU: %s", strata_status_name(st));
        CHECK(strstr(strata_last_error(), "qwen3next") == NULL, "refused for want of a GPU, not the "
              "architecture: '%s'", strata_last_error());
        strata_model_free(m);
        SKIP("GPU checks: CUDA unavailable: %s", bi.detail);
        return test_report();
    }
    printf("GPU: %s\n", bi.detail);
    test_parity(m, toks, V, "resident");
    test_batching(m, toks, V);
    test_rollback(m, toks, V, 6);
    test_rollback(m, toks, V, 1);
    g_graphs = 1;
    test_parity(m, toks, V, "graphs");
    test_rollback(m, toks, V, 1);
    test_rollback(m, toks, V, 3);
    g_graphs = 0;
    g_cpu_moe = -1;
    test_parity(m, toks, V, "n_cpu_moe all");
    test_rollback(m, toks, V, 1);
    g_cpu_moe = 0;
    g_cache = s.n_expert;
    test_parity(m, toks, V, "expert cache");
    test_rollback(m, toks, V, 1);
    g_cache = 0;
    strata_model_free(m);
    return test_report();
}
