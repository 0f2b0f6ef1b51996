/* moe_check.cu - standalone check-and-time program for the grouped MoE step (c/cuda/moe.cu), in
 * the manner of llm.c's dev/cuda. For each model shape it materializes every expert of one layer
 * on the GPU (random well-formed blocks; a Qwen3-30B-A3B layer is ~340 MB of Q4_K, beyond the
 * 50 MB L2, so each call reads HBM), checks one call against the CPU's st_moe_ffn (NMSE), then
 * times st_cuda_moe_ffn (plan + quantize + gate/up + quantize + down + combine) with CUDA events
 * over 200 calls that rotate through 16 random routings, and reports the bytes of the selected
 * experts' weights read per call over the median time, as GB/s and as a fraction of the card's
 * device-to-device copy rate (dev_copy_rate, measured first). Also times the router (st_cuda_moe_route) alone, and for decode-sized cases the
 * CPU-exact rows and their combine (moe_exact.cu: bit-identical to st_moe_ffn, and their time);
 * then the scored router (st_cuda_moe_route_cfg) of DeepSeek-V2/V3 and Kimi-K2 against
 * st_route_scored, and its time.
 *
 * Build (from the repository root, after `make` has built build/libstrata.a with CUDA):
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Ic/include -Ic/core -Ic/format -Ic/format/quant \
 *        -Ic/compute/cpu -Ic/cuda -Ic/model -Ic/engine -DSTRATA_HAVE_CUDA=1 \
 *        c/cuda/dev/moe_check.cu build/libstrata.a -lpthread -ldl -o /tmp/moe_check
 * Run:  /tmp/moe_check            (prints one line per case; with a name, only the cases of
 *                                   that model: /tmp/moe_check glm-4.5-air)
 * For T = 1 a second line times the call as a decode step makes it (x's q8_1 row given, as the
 * router leaves it). The path in brackets: [q8 gemv] the dp4a GEMVs, [f32 ...] st_k_moe_mv_f32
 * (STRATA_MOE_DP4A_EXT, default 1, NVCC_EXTRA=-DSTRATA_MOE_DP4A_EXT=0 for the fallback, moves
 * Q3_K / Q5_0 / Q4_1 / Q5_1 / IQ4_NL). Cases with an IQ3 type time the call again with the IQ3
 * codebooks staged in shared memory (st_cuda_moe_set_iq_stage, STRATA_IQ_STAGE_TABLES) and compare
 * its bits; `moe_check iq3` runs the IQ3-only cases. */
#include "dev_common.cuh"

#include <atomic>
/* model.h (through ops.h) declares a C11 atomic_int that C++ lacks before C++23; this program
 * never touches it */
using atomic_int = std::atomic<int>;

extern "C" {
#include "strata.h"
#include "strata_quant.h"
#include "common.h"
#include "ops.h"
#include "threadpool.h"
#include "cuda_backend.h"
#include "cuda_moe.h"
#include "cuda_mmv.h"
}

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>


static double g_copy = 1.0; /* the card's device-to-device copy rate, bytes / s */

static unsigned long long g_rng = 0x2545F4914F6CDD1DULL;
static unsigned long long rnd() {
    g_rng ^= g_rng >> 12; g_rng ^= g_rng << 25; g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717ULL;
}
static float rndf() { return (float)((double)(rnd() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0); }

/* Random blocks with every fp16 scale set to mag * (0.75 .. 1). */
static void fill(strata_type t, uint8_t *p, int64_t n_blocks, float mag) {
    const int64_t bb = strata_type_block_bytes(t);
    for (int64_t i = 0; i < n_blocks * bb; i += 8) {
        unsigned long long v = rnd();
        memcpy(p + i, &v, (size_t)std::min<int64_t>(8, n_blocks * bb - i));
    }
    int offs[2] = {0, -1};
    if (t == STRATA_TYPE_IQ1_M || t == STRATA_TYPE_MXFP4) offs[0] = -1; /* their scales below */
    if (t == STRATA_TYPE_Q6_K) offs[0] = 208;
    if (t == STRATA_TYPE_Q4_K || t == STRATA_TYPE_Q5_K) offs[1] = 2;
    for (int64_t b = 0; b < n_blocks; b++)
        for (int k = 0; k < 2; k++)
            if (offs[k] >= 0) {
                const uint16_t h = st_f32_to_fp16(mag * (0.875f + 0.125f * rndf()));
                p[b * bb + offs[k]] = (uint8_t)h;
                p[b * bb + offs[k] + 1] = (uint8_t)(h >> 8);
            }
    for (int64_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = p + b * bb;
        if (t == STRATA_TYPE_IQ1_M) { /* d: the top nibbles of the scale words at 48 */
            const uint16_t h = st_f32_to_fp16(mag * (0.875f + 0.125f * rndf()));
            for (int k = 0; k < 4; k++) blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
        }
        if (t == STRATA_TYPE_MXFP4) { /* E8M0 near mag */
            const int e = 128 + (int)floorf(log2f(mag));
            blk[0] = (uint8_t)(e < 2 ? 2 : e > 250 ? 250 : e);
        }
    }
}

/* mag so that a row of n weights against uniform inputs gives O(1) */
static float mag_for(strata_type t, int64_t n) {
    const int64_t qk = strata_type_block_size(t), nb = 4096 / qk;
    std::vector<uint8_t> b((size_t)(nb * strata_type_block_bytes(t)));
    std::vector<float> v((size_t)(nb * qk));
    fill(t, b.data(), nb, 1.0f);
    SK(strata_dequantize_row(t, b.data(), v.data(), nb * qk));
    double ss = 0;
    for (float f : v) ss += (double)f * f;
    return (float)(1.0 / (sqrt(ss / (double)v.size()) * sqrt((double)n / 3.0)));
}

struct Case {
    const char *name;
    int64_t n_embd, n_ff;
    int32_t n_expert, k;
    strata_type tg, td;
    int64_t T;
};

/* The median over 10 batches of 20 calls (call(i), i = 0..199 across the batches) of the time a
 * call takes on the default stream, in ms. */
template <class F>
static double median_ms(cudaEvent_t e0, cudaEvent_t e1, F call) {
    std::vector<float> ms;
    for (int batch = 0; batch < 10; batch++) {
        CK(cudaEventRecord(e0));
        for (int i = 0; i < 20; i++) call(batch * 20 + i);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t / 20);
    }
    return dev_median(ms);
}

static void run_case(const Case &c, st_threadpool *tp) {
    if (!strata_type_can_dot(c.tg) || !strata_type_can_dot(c.td)) {
        printf("%s %s/%s: skipped (no CPU dot in this build to compare with)\n", c.name,
               strata_type_name(c.tg), strata_type_name(c.td));
        return;
    }
    const int64_t E = c.n_embd, F = c.n_ff, T = c.T;
    const int32_t X = c.n_expert, K = c.k;
    const size_t rbg = (size_t)strata_row_bytes(c.tg, E), rbd = (size_t)strata_row_bytes(c.td, F);
    const size_t bg = rbg * (size_t)F, bd = rbd * (size_t)E; /* bytes per matrix */
    std::vector<uint8_t> hg(bg * X), hu(bg * X), hd(bd * X);
    const float mg = mag_for(c.tg, E), md = mag_for(c.td, F);
    fill(c.tg, hg.data(), (int64_t)(hg.size() / strata_type_block_bytes(c.tg)), mg);
    fill(c.tg, hu.data(), (int64_t)(hu.size() / strata_type_block_bytes(c.tg)), mg);
    fill(c.td, hd.data(), (int64_t)(hd.size() / strata_type_block_bytes(c.td)), md);
    uint8_t *dg, *du, *dd;
    CK(cudaMalloc(&dg, hg.size())); CK(cudaMalloc(&du, hu.size())); CK(cudaMalloc(&dd, hd.size()));
    CK(cudaMemcpy(dg, hg.data(), hg.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(du, hu.data(), hu.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dd, hd.data(), hd.size(), cudaMemcpyHostToDevice));
    std::vector<st_expert> cpu((size_t)X);
    std::vector<st_cuda_expert> gpu((size_t)X);
    for (int32_t e = 0; e < X; e++) {
        st_expert &h = cpu[(size_t)e];
        memset(&h, 0, sizeof h);
        h.gate.type = h.up.type = c.tg; h.down.type = c.td;
        h.gate.data = hg.data() + e * bg; h.up.data = hu.data() + e * bg; h.down.data = hd.data() + e * bd;
        h.gate.ne[0] = h.up.ne[0] = E; h.gate.ne[1] = h.up.ne[1] = F; h.down.ne[0] = F; h.down.ne[1] = E;
        h.gate.ne[2] = h.up.ne[2] = h.down.ne[2] = 1;
        h.gate.row_bytes = h.up.row_bytes = rbg; h.down.row_bytes = rbd;
        st_cuda_expert &g = gpu[(size_t)e];
        memset(&g, 0, sizeof g);
        g.gate.type = g.up.type = c.tg; g.down.type = c.td;
        g.gate.data = dg + e * bg; g.up.data = du + e * bg; g.down.data = dd + e * bd;
        g.gate.ne0 = g.up.ne0 = E; g.gate.ne1 = g.up.ne1 = F; g.down.ne0 = F; g.down.ne1 = E;
        g.gate.row_bytes = g.up.row_bytes = rbg; g.down.row_bytes = rbd;
    }
    st_cuda_expert *dtab;
    CK(cudaMalloc(&dtab, sizeof(st_cuda_expert) * X));
    CK(cudaMemcpy(dtab, gpu.data(), sizeof(st_cuda_expert) * X, cudaMemcpyHostToDevice));

    /* R routings (ids from random logits through the CPU router) */
    const int R = 16;
    std::vector<float> x((size_t)(T * E)), logits((size_t)X);
    for (float &f : x) f = rndf();
    std::vector<int32_t> ids((size_t)(R * T * K));
    std::vector<float> wts((size_t)(R * T * K));
    std::vector<double> active_bytes(R);
    for (int r = 0; r < R; r++) {
        std::vector<int> used((size_t)X, 0);
        for (int64_t t = 0; t < T; t++) {
            for (float &f : logits) f = 3.0f * rndf();
            st_route_topk(logits.data(), X, K, 1, &ids[(size_t)((r * T + t) * K)], &wts[(size_t)((r * T + t) * K)]);
            for (int s = 0; s < K; s++) used[(size_t)ids[(size_t)((r * T + t) * K + s)]] = 1;
        }
        double b = 0;
        for (int e = 0; e < X; e++) b += used[(size_t)e] ? (double)(2 * bg + bd) : 0.0;
        active_bytes[(size_t)r] = b;
    }
    float *dx, *dw, *dout;
    int32_t *dids;
    CK(cudaMalloc(&dx, sizeof(float) * x.size()));
    CK(cudaMalloc(&dids, sizeof(int32_t) * ids.size()));
    CK(cudaMalloc(&dw, sizeof(float) * wts.size()));
    CK(cudaMalloc(&dout, sizeof(float) * T * E));
    CK(cudaMemcpy(dx, x.data(), sizeof(float) * x.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dids, ids.data(), sizeof(int32_t) * ids.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw, wts.data(), sizeof(float) * wts.size(), cudaMemcpyHostToDevice));
    const size_t wsz = st_cuda_moe_wsize(T, K, E, F);
    void *dws;
    CK(cudaMalloc(&dws, wsz));
    st_cuda_moe_args a;
    memset(&a, 0, sizeof a);
    a.experts = dtab; a.n_expert = X; a.type_gate = a.type_up = c.tg; a.type_down = c.td;
    a.n_embd = E; a.n_ff = F; a.x = dx; a.T = T; a.k = K; a.out = dout; a.ws = dws; a.ws_bytes = wsz;

    /* check routing 0 against the CPU */
    a.ids = dids; a.wts = dw;
    SK(st_cuda_moe_ffn(&a, NULL));
    std::vector<float> got((size_t)(T * E)), ref((size_t)(T * E));
    CK(cudaMemcpy(got.data(), dout, sizeof(float) * got.size(), cudaMemcpyDeviceToHost));
    std::vector<uint8_t> cws(st_moe_wsize(T, K, X, E, F));
    st_moe_ffn(tp, cpu.data(), X, x.data(), T, ids.data(), wts.data(), K, ref.data(), cws.data());
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); i++) {
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }

    /* time: warm up, then 200 calls in 10 batches of 20, rotating routings */
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int i = 0; i < 20; i++) {
        a.ids = dids + (i % R) * T * K; a.wts = dw + (i % R) * T * K;
        SK(st_cuda_moe_ffn(&a, NULL));
    }
    double bytes = 0;
    for (int r = 0; r < R; r++) bytes += active_bytes[(size_t)r];
    bytes /= R;
    const double med = median_ms(e0, e1, [&](int i) {
        a.ids = dids + (i % R) * T * K; a.wts = dw + (i % R) * T * K;
        SK(st_cuda_moe_ffn(&a, NULL));
    });
    const char *path = T * K > 1024 || (T > 8 && st_cuda_moe_type_tiles(c.tg) && st_cuda_moe_type_tiles(c.td))
                           ? "" /* (the tiles may take it) */
                           : st_cuda_moe_type_gemv_q8(c.tg) && st_cuda_moe_type_gemv_q8(c.td) ? " [q8 gemv]"
                           : st_cuda_moe_type_gemv_q8(c.tg) ? " [q8 gate/up, f32 down]"
                           : st_cuda_moe_type_gemv_q8(c.td) ? " [f32 gate/up, q8 down]" : " [f32 gemv]";
    printf("%-14s %s/%s T=%lld E=%d k=%d%s  NMSE %.2e  %.1f us/call  %.1f MB/call  %.0f GB/s  (%.0f%% of copy)\n",
           c.name, strata_type_name(c.tg), strata_type_name(c.td), (long long)T, X, K, path, num / den,
           med * 1e3, bytes / 1e6, bytes / (med * 1e-3) / 1e9, 100.0 * bytes / (med * 1e-3) / g_copy);

    /* the IQ3 codebooks staged in shared memory (STRATA_IQ_STAGE_TABLES, on by default for
     * compute capability 6.0 only): the same bits, and the time a call with them */
    const int iq3 = c.tg == STRATA_TYPE_IQ3_XXS || c.tg == STRATA_TYPE_IQ3_S || c.td == STRATA_TYPE_IQ3_XXS ||
                    c.td == STRATA_TYPE_IQ3_S;
    if (iq3) {
        std::vector<float> staged((size_t)(T * E));
        a.ids = dids; a.wts = dw;
        st_cuda_moe_set_iq_stage(1);
        SK(st_cuda_moe_ffn(&a, NULL));
        CK(cudaMemcpy(staged.data(), dout, sizeof(float) * staged.size(), cudaMemcpyDeviceToHost));
        const double smed = median_ms(e0, e1, [&](int i) {
            a.ids = dids + (i % R) * T * K; a.wts = dw + (i % R) * T * K;
            SK(st_cuda_moe_ffn(&a, NULL));
        });
        st_cuda_moe_set_iq_stage(0);
        const double omed = median_ms(e0, e1, [&](int i) { /* off again: the pair interleaved */
            a.ids = dids + (i % R) * T * K; a.wts = dw + (i % R) * T * K;
            SK(st_cuda_moe_ffn(&a, NULL));
        });
        const int same = memcmp(staged.data(), got.data(), sizeof(float) * staged.size()) == 0;
        printf("%-14s IQ3 tables staged: %.1f us/call, read-only cache: %.1f / %.1f us/call (%.2fx), %s\n", c.name,
               smed * 1e3, med * 1e3, omed * 1e3, 0.5 * (med + omed) / smed, same ? "bitwise the same" : "DIFFERENT bits");
    }

    /* a decode step as the engine calls it: x's q8_1 row from the router (st_cuda_moe_router1;
     * here st_cuda_quantize_q8_1, outside the timing), so no plan and, for q8 types on both
     * sides, the fused down + combine (st_k_moe_down1) */
    if (T == 1) {
        void *dxq;
        CK(cudaMalloc(&dxq, (size_t)(E / 32) * 36));
        SK(st_cuda_quantize_q8_1(dx, dxq, E, NULL));
        a.xq = dxq; a.ids = dids; a.wts = dw;
        SK(st_cuda_moe_ffn(&a, NULL));
        CK(cudaMemcpy(got.data(), dout, sizeof(float) * got.size(), cudaMemcpyDeviceToHost));
        double nx = 0;
        for (size_t i = 0; i < got.size(); i++) nx += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        const double dmed = median_ms(e0, e1, [&](int i) {
            a.ids = dids + (i % R) * T * K; a.wts = dw + (i % R) * T * K;
            SK(st_cuda_moe_ffn(&a, NULL));
        });
        printf("%-14s decode (router's q8_1 row)  NMSE %.2e  %.1f us/call  %.0f GB/s  (%.0f%% of copy)\n",
               c.name, nx / den, dmed * 1e3, bytes / (dmed * 1e-3) / 1e9, 100.0 * bytes / (dmed * 1e-3) / g_copy);
        a.xq = NULL;
        CK(cudaFree(dxq));
    }

    /* the CPU-exact rows (moe_exact.cu) and their combine for the same calls: the CPU's bits
     * (routing 0 against st_moe_ffn's ref) and the time, every slot on the GPU */
    if (st_cuda_moe_exact_supports(c.tg, c.td) && T * K <= 64) {
        const size_t xw = st_cuda_moe_exact_wsize(T, K, E, F);
        void *xws;
        float *rows;
        CK(cudaMalloc(&xws, xw));
        CK(cudaMalloc(&rows, sizeof(float) * (size_t)(T * K * E)));
        st_cuda_moe_args xa = a;
        xa.ws = xws; xa.ws_bytes = xw;
        xa.ids = dids; xa.wts = dw;
        SK(st_cuda_moe_exact_rows(&xa, rows, NULL));
        SK(st_cuda_moe_combine_rows(dids, dids, rows, rows, dw, T, K, E, X, dout, NULL));
        CK(cudaMemcpy(got.data(), dout, sizeof(float) * got.size(), cudaMemcpyDeviceToHost));
        const int same = memcmp(got.data(), ref.data(), sizeof(float) * got.size()) == 0;
        const double xmed = median_ms(e0, e1, [&](int i) {
            const int64_t o = (i % R) * T * K;
            xa.ids = dids + o; xa.wts = dw + o;
            SK(st_cuda_moe_exact_rows(&xa, rows, NULL));
            SK(st_cuda_moe_combine_rows(dids + o, dids + o, rows, rows, dw + o, T, K, E, X, dout, NULL));
        });
        printf("%-14s exact rows + combine: %.1f us/call (%.0f GB/s), %s the CPU's bits\n", c.name, xmed * 1e3,
               bytes / (xmed * 1e-3) / 1e9, same ? "equal to" : "NOT");
        CK(cudaFree(xws)); CK(cudaFree(rows));
    }

    /* router alone: T tokens over X experts */
    float *dl;
    std::vector<float> lg((size_t)(T * X));
    for (float &f : lg) f = rndf();
    CK(cudaMalloc(&dl, sizeof(float) * lg.size()));
    CK(cudaMemcpy(dl, lg.data(), sizeof(float) * lg.size(), cudaMemcpyHostToDevice));
    st_cuda_doorbell db;
    SK(st_cuda_doorbell_alloc(&db, T, K));
    for (int i = 0; i < 10; i++) SK(st_cuda_moe_route(dl, T, X, K, 1, dids, dw, &db, NULL));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 100; i++) SK(st_cuda_moe_route(dl, T, X, K, 1, dids, dw, &db, NULL));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float tr;
    CK(cudaEventElapsedTime(&tr, e0, e1));
    printf("%-14s router T=%lld E=%d k=%d: %.1f us/call (doorbell ids[0] = %d)\n", c.name,
           (long long)T, X, K, tr * 10.0, db.h_ids[0]);
    SK(st_cuda_doorbell_free(&db));
    CK(cudaFree(dl));
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
    CK(cudaFree(dg)); CK(cudaFree(du)); CK(cudaFree(dd)); CK(cudaFree(dtab));
    CK(cudaFree(dx)); CK(cudaFree(dids)); CK(cudaFree(dw)); CK(cudaFree(dout)); CK(cudaFree(dws));
}

/* The scored router (st_cuda_moe_route_cfg) of one rule against st_route_scored (ops.h) over T
 * tokens of random logits: ids differing, the largest weight difference, and its time a call. */
static void run_route_scored(const char *name, int64_t T, int32_t X, int32_t K, int sigmoid, int norm, float scale,
                             int32_t G, int32_t Gu) {
    std::vector<float> lg((size_t)(T * X)), bias((size_t)X), wts((size_t)(T * K)), gw((size_t)(T * K));
    std::vector<int32_t> ids((size_t)(T * K)), gi((size_t)(T * K));
    for (float &f : lg) f = 4.0f * rndf();
    for (float &f : bias) f = 0.1f * rndf();
    const st_route_cfg cc = {X, K, sigmoid ? ST_GATING_SIGMOID : ST_GATING_SOFTMAX, norm, scale, G, Gu,
                             sigmoid ? bias.data() : NULL};
    for (int64_t t = 0; t < T; t++) st_route_scored(&cc, lg.data() + t * X, ids.data() + t * K, wts.data() + t * K);
    float *dl, *db;
    int32_t *di;
    float *dw;
    CK(cudaMalloc(&dl, sizeof(float) * lg.size()));
    CK(cudaMalloc(&db, sizeof(float) * bias.size()));
    CK(cudaMalloc(&di, sizeof(int32_t) * ids.size()));
    CK(cudaMalloc(&dw, sizeof(float) * wts.size()));
    CK(cudaMemcpy(dl, lg.data(), sizeof(float) * lg.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, bias.data(), sizeof(float) * bias.size(), cudaMemcpyHostToDevice));
    st_cuda_route_cfg c;
    memset(&c, 0, sizeof c);
    c.n_expert = X; c.k = K; c.sigmoid = sigmoid; c.norm = norm; c.scale = scale;
    c.n_groups = G; c.n_group_used = Gu; c.d_bias = sigmoid ? db : NULL;
    SK(st_cuda_moe_route_cfg(&c, dl, T, di, dw, NULL, NULL));
    CK(cudaMemcpy(gi.data(), di, sizeof(int32_t) * gi.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gw.data(), dw, sizeof(float) * gw.size(), cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    double mw = 0.0;
    for (size_t i = 0; i < ids.size(); i++) {
        bad += gi[i] != ids[i];
        mw = std::max(mw, fabs((double)gw[i] - wts[i]));
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int i = 0; i < 10; i++) SK(st_cuda_moe_route_cfg(&c, dl, T, di, dw, NULL, NULL));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 100; i++) SK(st_cuda_moe_route_cfg(&c, dl, T, di, dw, NULL, NULL));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float tr;
    CK(cudaEventElapsedTime(&tr, e0, e1));
    printf("%-14s scored router T=%lld E=%d k=%d %s groups %d/%d: ids differ %lld, max |dw| %.2e (%s), "
           "%.1f us/call\n", name, (long long)T, X, K, sigmoid ? "sigmoid+bias" : "softmax", G, Gu, (long long)bad,
           mw, bad == 0 && mw <= 1e-6 * std::max(1.0, (double)scale) ? "equal to st_route_scored" : "NOT equal",
           tr * 10.0);
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
    CK(cudaFree(dl)); CK(cudaFree(db)); CK(cudaFree(di)); CK(cudaFree(dw));
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    int ok = 0;
    char why[256];
    SK(st_cuda_probe(&ok, why, sizeof why));
    if (!ok) { printf("no GPU: %s\n", why); return 0; }
    g_copy = dev_copy_rate();
    printf("device: %s, copy rate %.0f GB/s\n", why, g_copy / 1e9);
    st_threadpool *tp;
    SK(st_threadpool_create(16, &tp));
    const Case cases[] = {
        {"qwen3-30b-a3b", 2048, 768, 128, 8, STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, 1},
        {"qwen3-30b-a3b", 2048, 768, 128, 8, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, 1},
        {"qwen3-30b-a3b", 2048, 768, 128, 8, STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, 8},
        {"qwen3-30b-a3b", 2048, 768, 128, 8, STRATA_TYPE_Q8_0, STRATA_TYPE_Q8_0, 1},
        {"olmoe-1b-7b", 2048, 1024, 64, 8, STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, 1},
        {"olmoe-1b-7b", 2048, 1024, 64, 8, STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, 8},
        {"mixtral", 4096, 14336, 8, 2, STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, 1},
        {"mixtral", 4096, 14336, 8, 2, STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, 8},
        /* the codebook formats and MXFP4, mixed per matrix */
        {"qwen3-30b-a3b", 2048, 768, 128, 8, STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ3_S, 1},
        {"qwen3-30b-a3b", 2048, 768, 128, 8, STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ3_S, 8},
        {"qwen3-30b-a3b", 2048, 768, 128, 8, STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ4_XS, 1},
        {"qwen3-30b-a3b", 2048, 768, 128, 8, STRATA_TYPE_IQ1_M, STRATA_TYPE_MXFP4, 1},
        {"qwen3-30b-a3b", 2048, 768, 128, 8, STRATA_TYPE_IQ2_XXS, STRATA_TYPE_IQ1_S, 8},
        {"qwen3-30b-a3b", 2048, 768, 128, 8, STRATA_TYPE_IQ2_S, STRATA_TYPE_IQ3_XXS, 1},
        /* IQ3 on both sides (the staged tables' cases: `moe_check iq3`) */
        {"iq3", 2048, 768, 128, 8, STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ3_XXS, 1},
        {"iq3", 2048, 768, 128, 8, STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ3_XXS, 8},
        {"iq3", 2048, 768, 128, 8, STRATA_TYPE_IQ3_S, STRATA_TYPE_IQ3_S, 1},
        {"iq3", 2048, 768, 128, 8, STRATA_TYPE_IQ3_S, STRATA_TYPE_IQ3_S, 8},
        /* narrow experts in the K-quant mixes (Q3_K_M / Q4_K_M): a down row of 1408 is no
         * multiple of 256, so the quantizer gives it Q5_0. The f32 fallback against the q8
         * kernels: the default build gives the latter ([q8 gemv]), NVCC_EXTRA=-DSTRATA_MOE_DP4A_EXT=0 the
         * former. */
        {"glm-4.5-air", 4096, 1408, 128, 8, STRATA_TYPE_Q3_K, STRATA_TYPE_Q5_0, 1},
        {"glm-4.5-air", 4096, 1408, 128, 8, STRATA_TYPE_Q3_K, STRATA_TYPE_Q5_0, 8},
        {"glm-4.5-air", 4096, 1408, 128, 8, STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_0, 1},
        {"glm-4.5-air", 4096, 1408, 128, 8, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K, 1}, /* all dp4a: the bar */
        {"air-shexp", 4096, 1408, 1, 1, STRATA_TYPE_Q3_K, STRATA_TYPE_Q5_0, 1},
        {"air-shexp", 4096, 1408, 1, 1, STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_0, 1},
        {"qwen3-next", 2048, 512, 512, 10, STRATA_TYPE_Q3_K, STRATA_TYPE_Q4_K, 1},
        {"qwen3-next", 2048, 512, 512, 10, STRATA_TYPE_Q3_K, STRATA_TYPE_Q3_K, 1},
        {"qwen3-next", 2048, 512, 512, 10, STRATA_TYPE_Q4_K, STRATA_TYPE_Q4_K, 1},
        {"deepseek-v2-lite", 2048, 1408, 64, 6, STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_0, 1},
        {"deepseek-v2-lite", 2048, 1408, 64, 6, STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_0, 8},
        {"v2-lite-shexp", 2048, 2816, 1, 1, STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_0, 1},
    };
    for (const Case &c : cases)
        if (!only || strcmp(only, c.name) == 0) run_case(c, tp);
    for (int64_t T : {1, 8, 512}) {
        if (only) break;
        run_route_scored("deepseek-v3", T, 256, 8, 1, 1, 2.5f, 8, 4);
        run_route_scored("kimi-k2", T, 384, 8, 1, 1, 2.827f, 1, 1);
        run_route_scored("deepseek-v2", T, 160, 6, 0, 0, 16.0f, 8, 3);
    }
    st_threadpool_free(tp);
    return 0;
}
