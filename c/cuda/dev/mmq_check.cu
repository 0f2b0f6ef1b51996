/* mmq_check.cu - standalone check-and-time program for the prefill tiles (c/cuda/mmq.cu), in the
 * manner of llm.c's dev/cuda. For real prompt shapes it quantizes random weights on the host,
 * runs st_cuda_mmq (or the grouped experts through st_cuda_moe_ffn) and the decode GEMV in slices
 * of 8 columns on the same inputs, reports the NMSE between the two (the GEMV's q8_1 activations
 * against the tiles' f16: ~1e-5 expected) and times both with CUDA events (median of 20 calls
 * after a warm-up): milliseconds, TFLOP/s (2 x rows x columns x weights) and the speed-up. The
 * gpt-oss expert rows (biases, clamped SwiGLU: the tiles take them unless built with
 * -DSTRATA_MMQ_OAI=0) are checked too: NMSE <= 5e-4, sentinels kept (PASS / FAIL lines, exit status 1 on a
 * FAIL).
 *
 * Build (from the repository root, after `make` has built build/libstrata.a with CUDA):
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Ic/include -Ic/core -Ic/format -Ic/format/quant \
 *        -Ic/compute/cpu -Ic/cuda -Ic/model -Ic/engine -DSTRATA_HAVE_CUDA=1 \
 *        c/cuda/dev/mmq_check.cu build/libstrata.a -lpthread -ldl -lrt -o /tmp/mmq_check
 * Run:  /tmp/mmq_check [SUBSTRING]   (one line per case; only the cases whose name holds
 *                                     SUBSTRING, e.g. under ncu) */
#include "dev_common.cuh"

extern "C" {
#include "strata.h"
#include "strata_quant.h"
#include "cuda_backend.h"
#include "cuda_mmq.h"
#include "cuda_mmv.h"
#include "cuda_moe.h"
}

#include <math.h>
#include <string.h>

static unsigned long long g_rng = 0x9E3779B97F4A7C15ULL;
static float rndf() {
    g_rng ^= g_rng >> 12; g_rng ^= g_rng << 25; g_rng ^= g_rng >> 27;
    return (float)((double)((g_rng * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

/* rows x n weights of type, quantized from uniform [-a, a), a = 1 / sqrt(n), on the device */
static void *make_weights(strata_type type, int64_t n, int64_t rows, size_t *rb) {
    *rb = (size_t)strata_row_bytes(type, n);
    std::vector<uint8_t> h(*rb * (size_t)rows);
    std::vector<float> f((size_t)n);
    const float a = 1.0f / sqrtf((float)n);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) f[(size_t)i] = a * rndf();
        SK(strata_quantize_row(type, f.data(), h.data() + (size_t)r * *rb, n));
    }
    void *d;
    CK(cudaMalloc(&d, h.size()));
    CK(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice));
    return d;
}

static float *dev_floats(int64_t n) {
    std::vector<float> h((size_t)n);
    for (auto &v : h) v = rndf();
    float *d;
    CK(cudaMalloc(&d, sizeof(float) * (size_t)n));
    CK(cudaMemcpy(d, h.data(), sizeof(float) * (size_t)n, cudaMemcpyHostToDevice));
    return d;
}

template <class F> static double time_ms(F f) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    f();
    CK(cudaDeviceSynchronize());
    std::vector<double> t;
    for (int i = 0; i < 20; i++) {
        CK(cudaEventRecord(e0));
        f();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return dev_median(t);
}

static double nmse(const float *d_a, const float *d_b, int64_t n) {
    std::vector<float> a((size_t)n), b((size_t)n);
    CK(cudaMemcpy(a.data(), d_a, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), d_b, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost));
    double se = 0, sr = 0;
    for (size_t i = 0; i < (size_t)n; i++) {
        se += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        sr += (double)b[i] * b[i];
    }
    return sr > 0 ? se / sr : se;
}

/* One dense matmul (fused gate/up when glu). */
static void dense(const char *name, strata_type type, int64_t K, int64_t N, int64_t T, bool glu) {
    size_t rb;
    void *w0 = make_weights(type, K, N, &rb), *w1 = glu ? make_weights(type, K, N, &rb) : NULL;
    const st_cuda_mat W0 = {type, w0, K, N, rb, NULL, 0}, W1 = {type, w1, K, N, rb, NULL, 0};
    float *x = dev_floats(T * K), *y0, *y1;
    CK(cudaMalloc(&y0, sizeof(float) * (size_t)(T * N)));
    CK(cudaMalloc(&y1, sizeof(float) * (size_t)(T * N)));
    void *scr;
    CK(cudaMalloc(&scr, st_cuda_mmv_scratch_bytes(K, 8)));
    void *mscr;
    CK(cudaMalloc(&mscr, st_cuda_mmq_scratch_bytes(K, T)));
    auto tiles = [&] {
        SK(glu ? st_cuda_mmq_swiglu(&W0, &W1, x, K, T, y0, N, mscr, NULL)
               : st_cuda_mmq(&W0, x, K, T, y0, N, mscr, NULL));
    };
    auto gemv = [&] {
        for (int64_t c = 0; c < T; c += 8) {
            const int nc = (int)(T - c < 8 ? T - c : 8);
            SK(glu ? st_cuda_mmv_swiglu(&W0, &W1, x + c * K, nc, y1 + c * N, scr, NULL)
                   : st_cuda_mmv(&W0, x + c * K, nc, y1 + c * N, scr, NULL));
        }
    };
    const double mg = time_ms(gemv);
    const double flop = 2.0 * (double)T * (double)N * (double)K * (glu ? 2 : 1);
    /* variants: GLU fused (SwiGLU only), the default (int8 where the type has integer quants),
     * the one-buffer f16 tiles */
    for (int v = glu ? 0 : 1; v <= 2; v++) {
        st_cuda_mmq_set_glu_mode(v == 0 ? 1 : 2);
        st_cuda_mmq_set_int8(v != 2);
        const double mt = time_ms(tiles);
        printf("%-22s %-5s K=%-5lld N=%-5lld T=%-4lld tiles %7.3f ms %6.1f TFLOP/s | gemv %7.3f ms | x%5.1f | "
               "NMSE tiles vs gemv %.2e%s\n", name, strata_type_name(type), (long long)K, (long long)N,
               (long long)T, mt, flop / mt * 1e-9, mg, mg / mt, nmse(y0, y1, T * N),
               v == 0 ? " (GLU fused)" : v == 2 ? " (f16 tiles)" : "");
    }
    st_cuda_mmq_set_glu_mode(2);
    st_cuda_mmq_set_int8(1);
    if (const size_t tb = st_cuda_mmq_tiles_bytes(&W0)) { /* Q8_0: the tile copy (same bits) */
        void *t0 = NULL, *t1 = NULL;
        CK(cudaMalloc(&t0, tb));
        SK(st_cuda_mmq_tiles_make(&W0, t0, NULL));
        if (glu) { CK(cudaMalloc(&t1, tb)); SK(st_cuda_mmq_tiles_make(&W1, t1, NULL)); }
        const st_cuda_mat T0 = {type, w0, K, N, rb, t0, 0}, T1 = {type, w1, K, N, rb, t1, 0};
        float *y2;
        CK(cudaMalloc(&y2, sizeof(float) * (size_t)(T * N)));
        tiles();
        auto tc = [&] {
            SK(glu ? st_cuda_mmq_swiglu(&T0, &T1, x, K, T, y2, N, mscr, NULL) : st_cuda_mmq(&T0, x, K, T, y2, N, mscr, NULL));
        };
        const double mt = time_ms(tc);
        std::vector<float> h0((size_t)(T * N)), h2((size_t)(T * N));
        CK(cudaMemcpy(h0.data(), y0, sizeof(float) * h0.size(), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h2.data(), y2, sizeof(float) * h2.size(), cudaMemcpyDeviceToHost));
        printf("%-22s %-5s K=%-5lld N=%-5lld T=%-4lld tiles %7.3f ms %6.1f TFLOP/s | gemv %7.3f ms | x%5.1f | "
               "NMSE tiles vs gemv %.2e (tile copy: %s bits)\n", name, strata_type_name(type), (long long)K,
               (long long)N, (long long)T, mt, flop / mt * 1e-9, mg, mg / mt, nmse(y2, y1, T * N),
               memcmp(h0.data(), h2.data(), sizeof(float) * h0.size()) ? "OTHER" : "the same");
        CK(cudaFree(t0)); if (t1) CK(cudaFree(t1)); CK(cudaFree(y2));
    }
    CK(cudaFree(w0)); if (w1) CK(cudaFree(w1));
    CK(cudaFree(x)); CK(cudaFree(y0)); CK(cudaFree(y1)); CK(cudaFree(scr)); CK(cudaFree(mscr));
}

/* The routed experts of one layer for a prompt of T tokens: the tile path in one call against the
 * GEMV path in 8-token calls. oai: gpt-oss's experts (random gate/up/down biases, the clamped
 * SwiGLU), taken by the tiles unless built with -DSTRATA_MMQ_OAI=0 (then the row says so and is
 * skipped); those rows are checked (dev_verdict): NMSE <= 5e-4 against the GEMV path (itself
 * checked against the CPU by test_cuda_moe) and the sentinels after the output untouched. */
static void experts(const char *name, strata_type tg, strata_type td, int64_t E, int64_t F,
                    int32_t X, int32_t k, int64_t T, int32_t hot = 0, bool oai = false) {
    if (oai && !st_cuda_moe_tiles_oai()) {
        printf("%-22s skipped: this build keeps biased experts off the tiles (-DSTRATA_MMQ_OAI=0)\n", name);
        return;
    }
    size_t rbg, rbd;
    void *g = make_weights(tg, E, F * X, &rbg), *u = make_weights(tg, E, F * X, &rbg);
    void *d = make_weights(td, F, E * X, &rbd);
    std::vector<st_cuda_expert> tab((size_t)X);
    for (int32_t e = 0; e < X; e++) {
        st_cuda_expert &t = tab[(size_t)e];
        t.gate = {tg, (uint8_t *)g + (size_t)e * F * rbg, E, F, rbg};
        t.up = {tg, (uint8_t *)u + (size_t)e * F * rbg, E, F, rbg};
        t.down = {td, (uint8_t *)d + (size_t)e * E * rbd, F, E, rbd};
    }
    st_cuda_expert *dtab;
    CK(cudaMalloc(&dtab, sizeof(st_cuda_expert) * (size_t)X));
    CK(cudaMemcpy(dtab, tab.data(), sizeof(st_cuda_expert) * (size_t)X, cudaMemcpyHostToDevice));
    /* random distinct top-k per token, weights 1/k (among the first hot experts when hot > 0:
     * the skewed routing of the random-weight benchmark files) */
    const int32_t pool = hot > 0 ? hot : X;
    std::vector<int32_t> ids((size_t)(T * k));
    std::vector<float> wts((size_t)(T * k), 1.0f / (float)k);
    for (int64_t t = 0; t < T; t++)
        for (int32_t s = 0; s < k; s++) {
            int32_t e;
            bool dup;
            do {
                e = (int32_t)((rndf() * 0.5f + 0.5f) * pool) % pool;
                dup = false;
                for (int32_t q = 0; q < s; q++) dup |= ids[(size_t)(t * k + q)] == e;
            } while (dup);
            ids[(size_t)(t * k + s)] = e;
        }
    int32_t *dids;
    float *dw;
    CK(cudaMalloc(&dids, sizeof(int32_t) * ids.size()));
    CK(cudaMalloc(&dw, sizeof(float) * wts.size()));
    CK(cudaMemcpy(dids, ids.data(), sizeof(int32_t) * ids.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw, wts.data(), sizeof(float) * wts.size(), cudaMemcpyHostToDevice));
    float *x = dev_floats(T * E), *y0, *y1;
    y0 = dev_alloc((size_t)(T * E), NULL); /* sentinels after it */
    CK(cudaMalloc(&y1, sizeof(float) * (size_t)(T * E)));
    float *bg = NULL, *bu = NULL, *bd = NULL; /* oai: biases uniform in [-1, 1) */
    if (oai) {
        bg = dev_floats((int64_t)X * F);
        bu = dev_floats((int64_t)X * F);
        bd = dev_floats((int64_t)X * E);
    }
    const int64_t slice = 1024 / k;
    const size_t wsz = std::max(st_cuda_moe_wsize(T, k, E, F), st_cuda_moe_wsize(slice, k, E, F));
    void *ws;
    CK(cudaMalloc(&ws, wsz));
    st_cuda_moe_args a;
    memset(&a, 0, sizeof a);
    a.experts = dtab; a.n_expert = X; a.type_gate = a.type_up = tg; a.type_down = td;
    a.n_embd = E; a.n_ff = F; a.k = k; a.ws = ws; a.ws_bytes = wsz;
    a.b_gate = bg; a.b_up = bu; a.b_down = bd; a.act = oai ? 1 : 0;
    auto tiles = [&] {
        st_cuda_moe_args b = a;
        b.x = x; b.T = T; b.ids = dids; b.wts = dw; b.out = y0;
        SK(st_cuda_moe_ffn(&b, NULL));
    };
    auto gemv = [&] { /* slices small enough for the GEMV path (T < 32 or few pairs per expert) */
        for (int64_t t0 = 0; t0 < T; t0 += 8) {
            st_cuda_moe_args b = a;
            b.T = T - t0 < 8 ? T - t0 : 8;
            b.x = x + t0 * E; b.ids = dids + t0 * k; b.wts = dw + t0 * k; b.out = y1 + t0 * E;
            SK(st_cuda_moe_ffn(&b, NULL));
        }
    };
    const double mg = time_ms(gemv);
    const double flop = 2.0 * (double)(T * k) * 3.0 * (double)E * (double)F;
    for (int v = 0; v <= 2; v++) { /* GLU fused, the default (paired, int8), f16 tiles */
        st_cuda_mmq_set_glu_mode(v == 0 ? 1 : 2);
        st_cuda_mmq_set_int8(v != 2);
        const double mt = time_ms(tiles);
        const double e = nmse(y0, y1, T * E);
        printf("%-22s %s/%s E=%lld F=%lld X=%d k=%d T=%lld tiles %7.3f ms %6.1f TFLOP/s | gemv (8-token "
               "calls) %7.3f ms | x%5.1f | NMSE %.2e (%s)\n", name, strata_type_name(tg),
               strata_type_name(td), (long long)E, (long long)F, X, k, (long long)T, mt, flop / mt * 1e-9,
               mg, mg / mt, e, v == 0 ? "GLU fused" : v == 1 ? "default" : "f16 tiles");
        if (oai) {
            char what[160];
            snprintf(what, sizeof what, "%s (%s): NMSE %.2e <= 5e-4 against the GEMV path, sentinels kept", name,
                     v == 0 ? "GLU fused" : v == 1 ? "default" : "f16 tiles", e);
            dev_verdict(e <= 5e-4 && dev_sentinels_ok(y0, (size_t)(T * E)), what);
        }
    }
    if (oai) { CK(cudaFree(bg)); CK(cudaFree(bu)); CK(cudaFree(bd)); }
    st_cuda_mmq_set_glu_mode(2);
    st_cuda_mmq_set_int8(1);
    CK(cudaFree(g)); CK(cudaFree(u)); CK(cudaFree(d)); CK(cudaFree(dtab)); CK(cudaFree(dids));
    CK(cudaFree(dw)); CK(cudaFree(x)); CK(cudaFree(y0)); CK(cudaFree(y1)); CK(cudaFree(ws));
}

static const char *g_only = NULL; /* argv[1]: run only the cases whose name contains it */
static bool wanted(const char *name) { return !g_only || strstr(name, g_only); }

int main(int argc, char **argv) {
    if (argc > 1) g_only = argv[1];
    setvbuf(stdout, NULL, _IOLBF, 0); /* each row out as it is timed, even if a timeout stops us */
    int ok = 0;
    char why[256];
    SK(st_cuda_probe(&ok, why, sizeof why));
    if (!ok) {
        printf("mmq_check: no GPU: %s\n", why);
        return 0;
    }
    printf("%s\n", why);
    if (wanted("qwen3 attn_q")) dense("qwen3 attn_q", STRATA_TYPE_Q8_0, 2048, 4096, 512, false);
    if (wanted("qwen3 attn_k")) dense("qwen3 attn_k", STRATA_TYPE_Q8_0, 2048, 512, 512, false);
    if (wanted("qwen3 attn_qkv")) dense("qwen3 attn_qkv", STRATA_TYPE_Q8_0, 2048, 5120, 512, false);
    if (wanted("q8_0 ffn gate/up")) dense("q8_0 ffn gate/up", STRATA_TYPE_Q8_0, 4096, 14336, 512, true);
    if (wanted("qwen3 attn_out")) dense("qwen3 attn_out", STRATA_TYPE_Q8_0, 4096, 2048, 512, false);
    if (wanted("qwen3 router")) dense("qwen3 router", STRATA_TYPE_Q8_0, 2048, 128, 512, false);
    if (wanted("qwen3 router (f32)")) dense("qwen3 router (f32)", STRATA_TYPE_F32, 2048, 128, 512, false);
    if (wanted("llama ffn down")) dense("llama ffn down", STRATA_TYPE_Q6_K, 14336, 4096, 512, false);
    /* the SwiGLU rows time both GLU tile modes (st_cuda_mmq_set_glu_mode) on the same weights */
    if (wanted("llama ffn gate/up")) dense("llama ffn gate/up", STRATA_TYPE_Q4_K, 4096, 14336, 512, true);
    if (wanted("qwen3-30b-a3b experts")) experts("qwen3-30b-a3b experts", STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, 2048, 768, 128, 8, 512);
    if (wanted("qwen3 experts, 16 hot")) experts("qwen3 experts, 16 hot", STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, 2048, 768, 128, 8, 512, 16);
    if (wanted("olmoe-1b-7b experts")) experts("olmoe-1b-7b experts", STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, 2048, 1024, 64, 8, 512);
    /* gpt-oss-20b: MXFP4 tiles dense, and its experts with biases and the clamped SwiGLU */
    if (wanted("mxfp4 gate/up")) dense("mxfp4 gate/up", STRATA_TYPE_MXFP4, 2880, 2880, 512, true);
    if (wanted("mxfp4 down")) dense("mxfp4 down", STRATA_TYPE_MXFP4, 2880, 2880, 512, false);
    if (wanted("gpt-oss-20b experts")) experts("gpt-oss-20b experts", STRATA_TYPE_MXFP4, STRATA_TYPE_MXFP4, 2880, 2880, 32, 4, 512, 0, true);
    return dev_failed;
}
