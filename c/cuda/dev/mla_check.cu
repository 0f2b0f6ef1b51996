/* mla_check.cu - standalone check-and-time program for the latent-attention kernels
 * (c/cuda/mla.cu) at DeepSeek-V3's shapes (128 heads, kv_lora 512, rope 64, qk_nope 128, v 128)
 * and a tiny one, in the manner of attn_check.cu:
 *
 *  - the absorption matmul, wk_b (128 -> 512 per head) and wv_b (512 -> 128), weights f32, f16,
 *    bf16 and q8_0, T = 1, 8, 512: NMSE against a double product of the dequantized weights
 *    (<= 1e-10: the kernel dequantizes exactly) and against the f32 weights before quantization
 *    (<= 5e-4 for the quantized types, ~1e-7-ish for f32), sentinels after the output, then timed
 *    (median of 20, CUDA events) as GB/s of weight bytes read;
 *  - the attention over an f16 latent cache of 1 .. 8192 positions, T = 1 and 8 (decode, split
 *    and block walk both run and must agree bit for bit) and T = 512 prompts, and DeepSeek-V2-Lite's
 *    16 heads (decode at 64, 576 and 4096 positions, a 512-token prompt; its absorptions too): NMSE against a double
 *    reference on sampled rows (<= 1e-6), sentinels, then timed as GB/s of cache bytes read
 *    (positions x 576 x 2) and TFLOP/s (2 x rows x positions x (576 + 512)).
 *  - the fused launches of the session's decode step against the launches they replace, bit for
 *    bit, then both timed: st_cuda_mla_prep (latent norm, key and query RoPE, cache store) against
 *    st_cuda_rmsnorm + st_cuda_rope + st_cuda_mla_copy_rows + st_cuda_rope + st_cuda_mla_store
 *    (Lite and V3 heads, T = 1, 8, 512), st_cuda_mla_absorb_q8 against st_cuda_mla_absorb +
 *    st_cuda_quantize_q8_1 (wv_b at Lite's and V3's heads, T = 1 and 8).
 * Every check prints PASS or FAIL; the exit status is 1 if any failed.
 *
 * Build and run (make's target, after the CUDA build of the library):
 *   make CUDA=1 mla-check            (or: make CUDA=1 build/mla_check && build/mla_check [max_ctx])
 */
#include "mla.cuh"
#include "cuda_mmv.h"
#include "dev_common.cuh"

extern "C" {
#include "strata_quant.h"
}

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static uint64_t rs = 0x9E3779B97F4A7C15ULL;
static float frand(void) { /* [-1, 1), never exactly 0 */
    rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
    float v = (float)((double)((rs * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
    return v != 0.0f ? v : 0.5f;
}

/* ---- absorption ------------------------------------------------------------------------------- */

/* An absorption's inputs: H matrices of rows x cols (wf: 0.05 U(-1, 1)) quantized to type (w) and
 * copied up, then x's T * H rows of cols (U(-1, 1)). The device weights' owner: cudaFree(W.data). */
static st_cuda_mla_w absorb_inputs(strata_type type, int cols, int rows, int H, int T, std::vector<float> &wf,
                                   std::vector<uint8_t> &w, std::vector<float> &x) {
    const size_t rb = (size_t)strata_row_bytes(type, cols), wbytes = rb * (size_t)rows * H;
    wf.resize((size_t)rows * H * cols);
    x.resize((size_t)T * H * cols);
    w.resize(wbytes);
    for (auto &v : wf) v = 0.05f * frand();
    for (auto &v : x) v = frand();
    for (size_t r = 0; r < (size_t)rows * H; r++) SK(strata_quantize_row(type, &wf[r * cols], &w[r * rb], cols));
    void *dw;
    CK(cudaMalloc(&dw, wbytes));
    CK(cudaMemcpy(dw, w.data(), wbytes, cudaMemcpyHostToDevice));
    return {type, dw, cols, rows, H, rb};
}

static void absorb_check(strata_type type, int cols, int rows, int H, int T, const char *name) {
    std::vector<float> wf, x, deq(cols);
    std::vector<uint8_t> w;
    const st_cuda_mla_w W = absorb_inputs(type, cols, rows, H, T, wf, w, x);
    const size_t rb = W.row_bytes, wbytes = w.size();
    float *dx = dev_alloc(x.size(), x.data()), *dy = dev_alloc((size_t)T * H * rows, NULL);
    SK(st_cuda_mla_absorb(&W, dx, (int64_t)H * cols, cols, dy, (int64_t)H * rows, rows, T, NULL));
    std::vector<float> y((size_t)T * H * rows);
    CK(cudaMemcpy(y.data(), dy, y.size() * sizeof(float), cudaMemcpyDeviceToHost));
    /* sampled heads: 0, 1, H/2, H-1; every row of them, tokens 0 and T-1 */
    double n1 = 0, n2 = 0, den = 0;
    const int hs[4] = {0, 1 % H, H / 2, H - 1};
    for (int hi = 0; hi < 4; hi++)
        for (int j = 0; j < rows; j++) {
            const int h = hs[hi];
            SK(strata_dequantize_row(type, &w[((size_t)h * rows + j) * rb], deq.data(), cols));
            for (int t : {0, T - 1}) {
                double a = 0, b = 0;
                const float *xt = &x[((size_t)t * H + h) * cols];
                for (int i = 0; i < cols; i++) {
                    a += (double)deq[i] * xt[i];
                    b += (double)wf[((size_t)h * rows + j) * cols + i] * xt[i];
                }
                const double g = y[((size_t)t * H + h) * rows + j];
                n1 += (g - a) * (g - a);
                n2 += (g - b) * (g - b);
                den += b * b;
            }
        }
    const double e1 = n1 / den, e2 = n2 / den;
    const double tol2 = type == STRATA_TYPE_F32 ? 1e-12 : type == STRATA_TYPE_Q8_0 ? 5e-4 : 1e-4;
    const double s = dev_time([&] {
        SK(st_cuda_mla_absorb(&W, dx, (int64_t)H * cols, cols, dy, (int64_t)H * rows, rows, T, NULL));
    });
    char what[256];
    snprintf(what, sizeof what, "absorb %-4s %s T=%-3d: NMSE %.2e vs dequantized (<= 1e-10), %.2e vs f32 (<= %.0e)"
             "; %.1f us, %.0f GB/s of weights", strata_type_name(type), name, T, e1, e2, tol2, s * 1e6, wbytes / s * 1e-9);
    dev_verdict(e1 <= 1e-10 && e2 <= tol2 && dev_sentinels_ok(dy, y.size()), what);
    CK(cudaFree((void *)W.data)); CK(cudaFree(dx)); CK(cudaFree(dy));
}

/* ---- attention -------------------------------------------------------------------------------- */

/* Double reference of row (t, h): positions 0 .. pos0 + t of the host f16 cache. */
static void ref_row(const std::vector<uint16_t> &kc, int D, int R, float scale, const float *q, int64_t np,
                    double *out) {
    std::vector<double> sc(np);
    double mx = -INFINITY, sum = 0;
    for (int64_t p = 0; p < np; p++) {
        double d = 0;
        for (int i = 0; i < D; i++) d += (double)q[i] * st_fp16_to_f32(kc[(size_t)p * D + i]);
        sc[p] = d * scale;
        mx = fmax(mx, sc[p]);
    }
    for (int64_t p = 0; p < np; p++) { sc[p] = exp(sc[p] - mx); sum += sc[p]; }
    for (int i = 0; i < R; i++) {
        double o = 0;
        for (int64_t p = 0; p < np; p++) o += sc[p] * st_fp16_to_f32(kc[(size_t)p * D + i]);
        out[i] = o / sum;
    }
}

static void attn_check(int H, int R, int nr, int64_t T, int64_t pos0, const char *name) {
    const int D = R + nr;
    const int64_t n_ctx = pos0 + T, rows = T * H;
    const float scale = 1.0f / sqrtf(192.0f);
    const st_cuda_mla_shape s = {H, R, nr, scale};
    std::vector<float> k((size_t)n_ctx * D), q((size_t)rows * D);
    for (auto &v : k) v = frand();
    for (auto &v : q) v = frand();
    std::vector<uint16_t> kc(k.size());
    for (size_t i = 0; i < k.size(); i++) kc[i] = st_f32_to_fp16(k[i]);
    void *dk;
    CK(cudaMalloc(&dk, kc.size() * 2));
    CK(cudaMemcpy(dk, kc.data(), kc.size() * 2, cudaMemcpyHostToDevice));
    const st_cuda_kv_layer kv = {STRATA_TYPE_F16, dk, NULL, n_ctx};
    float *dq = dev_alloc(q.size(), q.data()), *d1 = dev_alloc((size_t)rows * R, NULL);
    float *d2 = dev_alloc((size_t)rows * R, NULL);
    const size_t wsb = st_cuda_mla_wsize(&s, T, n_ctx);
    void *ws = NULL;
    if (wsb) CK(cudaMalloc(&ws, wsb));
    int split1 = 0, split2 = 0;
    SK(st_cuda_mla_attention_ex(&kv, &s, dq, (int64_t)H * D, T, pos0, NULL, d1, (int64_t)H * R, ws, wsb, NULL, -1, &split1));
    SK(st_cuda_mla_attention_ex(&kv, &s, dq, (int64_t)H * D, T, pos0, NULL, d2, (int64_t)H * R, NULL, 0, NULL, 0, &split2));
    std::vector<float> o1((size_t)rows * R), o2(o1.size());
    CK(cudaMemcpy(o1.data(), d1, o1.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(o2.data(), d2, o2.size() * 4, cudaMemcpyDeviceToHost));
    const bool same = memcmp(o1.data(), o2.data(), o1.size() * 4) == 0;
    double num = 0, den = 0;
    std::vector<double> ref(R);
    const int64_t ts[2] = {0, T - 1};
    const int hs[3] = {0, H / 2, H - 1};
    for (int ti = 0; ti < (T > 1 ? 2 : 1); ti++)
        for (int h : hs) {
            const int64_t t = ts[ti];
            ref_row(kc, D, R, scale, &q[((size_t)t * H + h) * D], pos0 + t + 1, ref.data());
            for (int i = 0; i < R; i++) {
                const double g = o1[((size_t)t * H + h) * R + i];
                num += (g - ref[i]) * (g - ref[i]);
                den += ref[i] * ref[i];
            }
        }
    const double e = num / den;
    const double t1 = dev_time([&] { SK(st_cuda_mla_attention_ex(&kv, &s, dq, (int64_t)H * D, T, pos0, NULL, d1, (int64_t)H * R, ws, wsb, NULL, -1, NULL)); });
    const double t2 = dev_time([&] { SK(st_cuda_mla_attention_ex(&kv, &s, dq, (int64_t)H * D, T, pos0, NULL, d2, (int64_t)H * R, NULL, 0, NULL, 0, NULL)); });
    const double bytes = (double)n_ctx * D * 2, mean_np = pos0 + (T + 1) / 2.0;
    const double flop = 2.0 * rows * mean_np * (D + R);
    char what[320];
    snprintf(what, sizeof what, "attn %s T=%lld ctx=%lld: NMSE %.2e (<= 1e-6), %s %.1f us (%.0f GB/s, %.1f TFLOP/s), "
             "walk %.1f us (%.1f TFLOP/s), bits %s", name, (long long)T, (long long)n_ctx, e,
             split1 ? "split" : "walk(auto)", t1 * 1e6, bytes / t1 * 1e-9, flop / t1 * 1e-12, t2 * 1e6,
             flop / t2 * 1e-12, same ? "equal" : "DIFFER");
    dev_verdict(e <= 1e-6 && same && split2 == 0 && dev_sentinels_ok(d1, o1.size()) &&
                dev_sentinels_ok(d2, o2.size()), what);
    CK(cudaFree(dk)); CK(cudaFree(dq)); CK(cudaFree(d1)); CK(cudaFree(d2));
    if (ws) CK(cudaFree(ws));
}

/* ---- the fused launches ------------------------------------------------------------------------ */

/* st_cuda_mla_absorb_q8 against st_cuda_mla_absorb + st_cuda_quantize_q8_1 (f16 weights). */
static void absorb_q8_check(int cols, int rows, int H, int T, const char *name) {
    const size_t ny = (size_t)T * H * rows, qb = ny / 32 * 36;
    std::vector<float> wf, x, y1(ny), y2(ny);
    std::vector<uint8_t> w, q1(qb), q2(qb);
    const st_cuda_mla_w W = absorb_inputs(STRATA_TYPE_F16, cols, rows, H, T, wf, w, x);
    float *dx = dev_alloc(x.size(), x.data()), *d1 = dev_alloc(ny, NULL), *d2 = dev_alloc(ny, NULL);
    float *dq1 = dev_alloc(qb / 4, NULL), *dq2 = dev_alloc(qb / 4, NULL);
    auto unfused = [&] {
        SK(st_cuda_mla_absorb(&W, dx, (int64_t)H * cols, cols, d1, (int64_t)H * rows, rows, T, NULL));
        SK(st_cuda_quantize_q8_1(d1, dq1, (int64_t)ny, NULL));
    };
    auto fused = [&] { SK(st_cuda_mla_absorb_q8(&W, dx, (int64_t)H * cols, cols, d2, T, dq2, NULL)); };
    unfused();
    fused();
    CK(cudaMemcpy(y1.data(), d1, ny * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y2.data(), d2, ny * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(q1.data(), dq1, qb, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(q2.data(), dq2, qb, cudaMemcpyDeviceToHost));
    const bool same = memcmp(y1.data(), y2.data(), ny * 4) == 0 && memcmp(q1.data(), q2.data(), qb) == 0;
    const double t1 = dev_time(unfused), t2 = dev_time(fused);
    char what[256];
    snprintf(what, sizeof what, "absorb_q8 %s T=%d: bits %s the absorption + quantization; %.1f us for the two "
             "launches, %.1f us fused", name, T, same ? "equal to" : "DIFFER from", t1 * 1e6, t2 * 1e6);
    dev_verdict(same && dev_sentinels_ok(d2, ny) && dev_sentinels_ok(dq2, qb / 4), what);
    CK(cudaFree((void *)W.data)); CK(cudaFree(dx)); CK(cudaFree(d1)); CK(cudaFree(d2)); CK(cudaFree(dq1));
    CK(cudaFree(dq2));
}

/* st_cuda_mla_prep against the five launches it replaces: the latent rows, the query rows and the
 * f16 cache bit for bit (positions from the device), then both timed. */
static void prep_check(int H, int T, int64_t pos0, const char *name) {
    const int R = 512, nr = 64, nope = 128, D = R + nr, hk = nope + nr;
    const int64_t n_ctx = pos0 + T, ldq = (int64_t)H * D, lq = (int64_t)H * hk;
    const st_cuda_rope_params rp = {0, nr, 10000.0f, 0.025f, 1.0f, 1.0f, 32.0f, 1.0f, 4096, 0}; /* YaRN */
    const st_cuda_mla_shape s = {H, R, nr, 0.1f};
    std::vector<float> q((size_t)T * lq), kv((size_t)T * D), wn(R), o1((size_t)T * ldq), o2(o1.size());
    std::vector<float> k1(kv.size()), k2(kv.size());
    std::vector<uint16_t> c1((size_t)n_ctx * D), c2(c1.size());
    std::vector<int32_t> pos(T);
    for (auto &v : q) v = frand();
    for (auto &v : kv) v = 2.0f * frand();
    for (auto &v : wn) v = frand();
    for (int t = 0; t < T; t++) pos[t] = (int32_t)(pos0 + t);
    float *dq = dev_alloc(q.size(), q.data()), *dw = dev_alloc(wn.size(), wn.data());
    float *dk1 = dev_alloc(kv.size(), kv.data()), *dk2 = dev_alloc(kv.size(), kv.data());
    float *do1 = dev_alloc(o1.size(), NULL), *do2 = dev_alloc(o2.size(), NULL);
    float *dk0 = dev_alloc(kv.size(), kv.data()); /* the rows before (each timed run starts from them) */
    void *dc1, *dc2;
    int32_t *dpos;
    CK(cudaMalloc(&dc1, c1.size() * 2));
    CK(cudaMalloc(&dc2, c2.size() * 2));
    CK(cudaMemset(dc1, 0, c1.size() * 2));
    CK(cudaMemset(dc2, 0, c2.size() * 2));
    CK(cudaMemset(do1, 0, o1.size() * 4));
    CK(cudaMemset(do2, 0, o2.size() * 4));
    CK(cudaMalloc(&dpos, sizeof(int32_t) * T));
    CK(cudaMemcpy(dpos, pos.data(), sizeof(int32_t) * T, cudaMemcpyHostToDevice));
    const st_cuda_kv_layer kv1 = {STRATA_TYPE_F16, dc1, NULL, n_ctx}, kv2 = {STRATA_TYPE_F16, dc2, NULL, n_ctx};
    auto unfused = [&] {
        SK(st_cuda_rmsnorm(dk1, D, dk1, D, dw, R, 1, T, 1e-6f, NULL));
        SK(st_cuda_rope(&rp, dk1 + R, D, 1, nr, T, dpos, pos0, NULL));
        SK(st_cuda_mla_copy_rows(do1 + R, D, dq + nope, hk, nr, (int64_t)T * H, NULL));
        SK(st_cuda_rope(&rp, do1 + R, ldq, H, D, T, dpos, pos0, NULL));
        SK(st_cuda_mla_store(&kv1, &s, dk1, D, T, pos0, dpos, NULL));
    };
    auto fused = [&] {
        SK(st_cuda_mla_prep(&rp, &kv2, &s, dk2, D, dw, 1e-6f, dq + nope, lq, hk, do2, ldq, T, pos0, dpos, NULL));
    };
    unfused();
    fused();
    CK(cudaMemcpy(k1.data(), dk1, k1.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(k2.data(), dk2, k2.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(o1.data(), do1, o1.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(o2.data(), do2, o2.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c1.data(), dc1, c1.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c2.data(), dc2, c2.size() * 2, cudaMemcpyDeviceToHost));
    const bool same = memcmp(k1.data(), k2.data(), k1.size() * 4) == 0 &&
                      memcmp(o1.data(), o2.data(), o1.size() * 4) == 0 &&
                      memcmp(c1.data(), c2.data(), c1.size() * 2) == 0;
    /* timed from the same rows each run (the norm is in place): the copy back is in both */
    const double t1 = dev_time([&] { CK(cudaMemcpyAsync(dk1, dk0, kv.size() * 4, cudaMemcpyDeviceToDevice)); unfused(); });
    const double t2 = dev_time([&] { CK(cudaMemcpyAsync(dk2, dk0, kv.size() * 4, cudaMemcpyDeviceToDevice)); fused(); });
    char what[256];
    snprintf(what, sizeof what, "prep %s H=%d T=%d pos0=%lld: bits %s the five launches; %.1f us for them, %.1f us "
             "fused (each with a row copy)", name, H, T, (long long)pos0, same ? "equal to" : "DIFFER from", t1 * 1e6,
             t2 * 1e6);
    dev_verdict(same && dev_sentinels_ok(dk2, kv.size()) && dev_sentinels_ok(do2, o2.size()), what);
    CK(cudaFree(dq)); CK(cudaFree(dw)); CK(cudaFree(dk0)); CK(cudaFree(dk1)); CK(cudaFree(dk2));
    CK(cudaFree(do1)); CK(cudaFree(do2)); CK(cudaFree(dc1)); CK(cudaFree(dc2)); CK(cudaFree(dpos));
}

int main(int argc, char **argv) {
    const int64_t max_ctx = argc > 1 ? atoll(argv[1]) : 8192;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        printf("skip: no CUDA device\n");
        return 0;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; device-to-device copy %.0f GB/s\n", prop.name, prop.multiProcessorCount,
           dev_copy_rate() * 1e-9);
    const strata_type types[4] = {STRATA_TYPE_F32, STRATA_TYPE_F16, STRATA_TYPE_BF16, STRATA_TYPE_Q8_0};
    for (strata_type ty : types)
        for (int T : {1, 8, 512}) {
            absorb_check(ty, 128, 512, 128, T, "wk_b 128->512 x128");
            absorb_check(ty, 512, 128, 128, T, "wv_b 512->128 x128");
        }
    absorb_check(STRATA_TYPE_F16, 32, 48, 4, 5, "tiny 32->48 x4");
    for (int T : {1, 512}) { /* DeepSeek-V2-Lite: 16 heads */
        absorb_check(STRATA_TYPE_F16, 128, 512, 16, T, "lite wk_b 128->512 x16");
        absorb_check(STRATA_TYPE_F16, 512, 128, 16, T, "lite wv_b 512->128 x16");
    }
    for (int64_t ctx : {1, 64, 512, 1024, 4096, 8192}) {
        if (ctx > max_ctx) break;
        attn_check(128, 512, 64, 1, ctx - 1, "v3");
        if (ctx >= 8) attn_check(128, 512, 64, 8, ctx - 8, "v3");
    }
    attn_check(128, 512, 64, 512, 0, "v3 prompt");
    if (max_ctx >= 4096) attn_check(128, 512, 64, 512, 2048, "v3 prompt");
    for (int64_t ctx : {64, 576, 4096}) /* DeepSeek-V2-Lite decode (tg64 after pp512 ends near 576) */
        if (ctx <= max_ctx) attn_check(16, 512, 64, 1, ctx - 1, "lite");
    attn_check(16, 512, 64, 512, 0, "lite prompt");
    attn_check(4, 32, 16, 1, 299, "tiny");
    attn_check(4, 32, 16, 37, 100, "tiny");
    for (int T : {1, 8}) {
        absorb_q8_check(512, 128, 16, T, "lite wv_b 512->128 x16");
        absorb_q8_check(512, 128, 128, T, "v3 wv_b 512->128 x128");
    }
    for (int T : {1, 8, 512}) {
        prep_check(16, T, 575, "lite");
        prep_check(128, T, 1000, "v3");
    }
    printf("%s\n", dev_failed ? "mla_check: FAILED" : "mla_check: all passed");
    return dev_failed;
}
