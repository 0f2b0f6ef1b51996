/* attn_check.cu - standalone check-and-time program for the GPU attention (c/cuda/attn.cu), in
 * the manner of llm.c's dev/cuda: decode attention over a 16K-position f16 cache for the real
 * shapes (Qwen3-30B-A3B 32/4 x 128, OLMoE 16/16 x 128, Mixtral 32/8 x 128), T = 1, 4, 8 query
 * tokens, with several split-K plans (blocks aimed at: the library default, 1, 2 and 8 per SM; one
 * pass without split), each checked against a double-precision CPU reference on sampled rows and
 * timed with CUDA events (median of 50, rotating over 4 layers' caches so L2 does not hold the
 * cache). Reported as GB/s of KV bytes read (positions x kv heads x head_dim x 2 x 2 bytes) next
 * to a device-to-device copy measured on the spot (the H200 copies at ~4.1-4.3 TB/s). Then the
 * prefill path (T = 64 at depth 16384, T = 512 at depth 0 and 16384) as TFLOP/s (4 x T x n_head
 * x mean positions x hd), the FMA kernel's plans against the tensor-core kernel (rpw_force 16:
 * "tensor" single f16 operands with the workspace for split-K chunks, "tensor-1p" the same in
 * one pass, "tc-split" hi + lo f16 operands, the session's default). For decode-sized calls
 * (at most 16 rows per KV head) the tensor-core decode kernel (rpw_force 32: "dtc" its own plan,
 * "dtc-1/SM" and "dtc-4/SM" forced block counts, "dtc-1p" one pass, "dtc-f16" single f16
 * operands) against the FMA decode kernel ("fma-dec", rpw_force -1) and the FMA plans
 * ("fma": the library's choice with shape.tc 0). "default" is the session's (shape.tc -1).
 *
 * Build (from the repository root, after `make` has built build/libstrata.a with CUDA):
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Ic/include -Ic/core -Ic/format -Ic/format/quant \
 *        -Ic/compute/cpu -Ic/cuda -Ic/model -Ic/engine -DSTRATA_HAVE_CUDA=1 \
 *        c/cuda/dev/attn_check.cu build/libstrata.a -o /tmp/attn_check -lpthread -ldl -lm
 * Run:  /tmp/attn_check [context, default 16384] [decode: only the calls of T <= 8 | prefill:
 *       only the calls of T >= 64 and the tensor-core prefill plans, for build-time A/Bs
 *       (bench/device/device_attn_ab.sh)] */
#include "attn.cuh"
#include "dev_common.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>


static uint64_t rs = 0x9E3779B97F4A7C15ULL;
static float frand(void) { /* [-1, 1), never exactly 0 */
    rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
    float v = (float)((double)((rs * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
    return v != 0.0f ? v : 0.5f;
}

struct Shape { const char *name; int n_head, n_kv, hd; };

static const int LAYERS = 4;

struct Layer {
    st_cuda_kv_layer kv;
    std::vector<uint16_t> hk, hv; /* host copies (f16 bits) of layer 0 for the reference */
};

/* Double-precision attention of row (t, h) against the host cache (GPU layout). */
static void ref_row(const Shape &s, const Layer &L, int64_t n_ctx, const float *q, int64_t t,
                    int h, int64_t pos0, double *out) {
    const int G = s.n_head / s.n_kv, hk = h / G, hd = s.hd;
    const int64_t np = pos0 + t + 1;
    std::vector<double> sc(np);
    double mx = -INFINITY;
    for (int64_t p = 0; p < np; p++) {
        double d = 0;
        for (int i = 0; i < hd; i++)
            d += (double)q[(t * s.n_head + h) * hd + i] * st_fp16_to_f32(L.hk[((size_t)hk * n_ctx + p) * hd + i]);
        sc[p] = d / sqrt((double)hd);
        mx = std::max(mx, sc[p]);
    }
    double sum = 0;
    for (int64_t p = 0; p < np; p++) { sc[p] = exp(sc[p] - mx); sum += sc[p]; }
    for (int i = 0; i < hd; i++) {
        double o = 0;
        for (int64_t p = 0; p < np; p++) o += sc[p] * st_fp16_to_f32(L.hv[((size_t)hk * n_ctx + p) * hd + i]);
        out[i] = o / sum;
    }
}


int main(int argc, char **argv) {
    const int64_t ctx = argc > 1 ? atoll(argv[1]) : 16384;
    const bool decode_only = argc > 2 && strcmp(argv[2], "decode") == 0;
    const bool prefill_only = argc > 2 && strcmp(argv[2], "prefill") == 0;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

    const double copy_gbs = dev_copy_rate() / 1e9;
    printf("device-to-device copy: %.0f GB/s (read + write)\n\n", copy_gbs);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    const Shape shapes[] = {{"qwen3-30b-a3b", 32, 4, 128}, {"olmoe-1b-7b", 16, 16, 128}, {"mixtral", 32, 8, 128}};
    printf("%-14s %4s %6s %-10s %7s %6s %9s %8s %7s %10s\n", "shape", "T", "ctx", "plan", "chunks",
           "rpw", "us", "GB/s", "of-copy", "nmse");
    for (const Shape &s : shapes) {
        const int64_t n_ctx = ctx + 512;
        st_cuda_attn_shape gs = {s.n_head, s.n_kv, s.hd, s.hd, 1.0f / sqrtf((float)s.hd)};
        const int64_t nk = (int64_t)s.n_kv * s.hd, nq = (int64_t)s.n_head * s.hd;
        /* random k, v for all layers, stored through the library */
        std::vector<float> hkv((size_t)(n_ctx * nk));
        float *dsrc;
        CK(cudaMalloc(&dsrc, hkv.size() * 4 * 2));
        Layer L[LAYERS];
        for (int l = 0; l < LAYERS; l++) {
            const size_t kb = st_cuda_kv_bytes(STRATA_TYPE_F16, &gs, n_ctx);
            L[l].kv.type = STRATA_TYPE_F16;
            L[l].kv.n_ctx = n_ctx;
            CK(cudaMalloc(&L[l].kv.k, kb));
            CK(cudaMalloc(&L[l].kv.v, kb));
            for (int kvi = 0; kvi < 2; kvi++) {
                for (auto &x : hkv) x = frand();
                CK(cudaMemcpy(dsrc + kvi * hkv.size(), hkv.data(), hkv.size() * 4, cudaMemcpyHostToDevice));
            }
            SK(st_cuda_kv_store(&L[l].kv, &gs, dsrc, nk, dsrc + hkv.size(), nk, n_ctx, 0, NULL, NULL));
            if (l == 0) {
                L[0].hk.resize(kb / 2);
                L[0].hv.resize(kb / 2);
                CK(cudaMemcpy(L[0].hk.data(), L[0].kv.k, kb, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(L[0].hv.data(), L[0].kv.v, kb, cudaMemcpyDeviceToHost));
            }
        }
        CK(cudaFree(dsrc));
        /* (T, positions attended by the last token) */
        const int64_t cases[][2] = {{1, ctx}, {4, ctx}, {8, ctx}, {64, ctx + 64}, {512, 512}, {512, ctx + 512}};
        for (const auto &cs : cases) {
            const int64_t T = cs[0], np = cs[1], pos0 = np - T;
            if ((decode_only && T > 8) || (prefill_only && T < 64)) continue;
            std::vector<float> q((size_t)(T * nq));
            for (auto &x : q) x = 2.0f * frand();
            float *dq, *dout;
            void *dws;
            const size_t wsb = st_cuda_attn_wsize(&gs, T, n_ctx) + ((size_t)64 << 20);
            CK(cudaMalloc(&dq, q.size() * 4));
            CK(cudaMalloc(&dout, q.size() * 4));
            CK(cudaMalloc(&dws, wsb));
            CK(cudaMemcpy(dq, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
            const int sm = prop.multiProcessorCount;
            struct { const char *name; int target; size_t ws; int rpw; int tc; } plans[] = {
                {"default", 0, wsb, 0, -1}, {"fma", 0, wsb, 0, 0}, {"1/SM", sm, wsb, 0, 0},
                {"2/SM", 2 * sm, wsb, 0, 0}, {"8/SM", 8 * sm, wsb, 0, 0}, {"one-pass", 0, 0, 0, 0},
                {"fma-dec", 0, wsb, -1, 0}, {"dtc", 0, wsb, 32, 2}, {"dtc-1/SM", sm, wsb, 32, 2},
                {"dtc-4/SM", 4 * sm, wsb, 32, 2}, {"dtc-1p", 0, 0, 32, 2}, {"dtc-f16", 0, wsb, 32, 1},
                {"tensor", 0, wsb, 16, 1}, {"tensor-1p", 0, 0, 16, 1}, {"tc-split", 0, wsb, 16, 2}};
            const int64_t rows = T * (s.n_head / s.n_kv);
            for (auto &pl : plans) {
                /* the tensor-core prefill kernel: 64+ rows per KV head, head_dim 64/128; the
                 * decode kernels: at most 16 (tensor cores) or 8 (FMA) */
                if (pl.rpw == 16 && (rows < 64 || s.hd > 128)) continue;
                if (pl.rpw == 32 && (rows > 16 || s.hd > 128)) continue;
                if (pl.rpw == -1 && rows > 8) continue;
                if (prefill_only && pl.rpw != 16 && pl.tc != -1) continue;
                gs.tc = pl.tc;
                st_attn_plan got_plan;
                SK(st_cuda_attention_ex(&L[0].kv, &gs, dq, nq, T, pos0, NULL, dout, nq, dws, pl.ws, NULL,
                                        pl.target, pl.rpw, &got_plan));
                CK(cudaDeviceSynchronize());
                std::vector<float> out(q.size());
                CK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
                /* reference on sampled rows: first and last token, first and last head */
                double num = 0, den = 0;
                std::vector<double> r(s.hd);
                const int64_t tt[2] = {0, T - 1};
                const int hh[2] = {0, s.n_head - 1};
                for (int a = 0; a < 2; a++)
                    for (int b = 0; b < 2; b++) {
                        ref_row(s, L[0], n_ctx, q.data(), tt[a], hh[b], pos0, r.data());
                        for (int i = 0; i < s.hd; i++) {
                            const double e = out[(tt[a] * s.n_head + hh[b]) * s.hd + i] - r[i];
                            num += e * e;
                            den += r[i] * r[i];
                        }
                    }
                std::vector<float> ts;
                for (int it = 0; it < 55; it++) {
                    const Layer &Lx = L[it % LAYERS];
                    CK(cudaEventRecord(e0));
                    SK(st_cuda_attention_ex(&Lx.kv, &gs, dq, nq, T, pos0, NULL, dout, nq, dws, pl.ws, NULL,
                                            pl.target, pl.rpw, NULL));
                    CK(cudaEventRecord(e1));
                    CK(cudaEventSynchronize(e1));
                    float ms;
                    CK(cudaEventElapsedTime(&ms, e0, e1));
                    if (it >= 5) ts.push_back(ms);
                }
                const double us = dev_median(ts) * 1e3;
                const double kv_bytes = (double)np * s.n_kv * s.hd * 2 * 2;
                const double gbs = kv_bytes / (us * 1e-6) / 1e9;
                printf("%-14s %4lld %6lld %-10s %7d %6d %9.1f %8.0f %6.1f%% %10.2e", s.name, (long long)T,
                       (long long)np, pl.name, got_plan.n_chunks, got_plan.rpw, us, gbs,
                       100.0 * gbs / copy_gbs, den > 0 ? num / den : num);
                if (T > 8) {
                    const double mean_np = pos0 + (T + 1) / 2.0;
                    printf("  %.2f TFLOP/s", 4.0 * T * s.n_head * mean_np * s.hd / (us * 1e-6) / 1e12);
                }
                printf("\n");
            }
            CK(cudaFree(dq));
            CK(cudaFree(dout));
            CK(cudaFree(dws));
        }
        for (int l = 0; l < LAYERS; l++) {
            CK(cudaFree(L[l].kv.k));
            CK(cudaFree(L[l].kv.v));
        }
    }
    return 0;
}
