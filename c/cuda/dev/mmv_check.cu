/* mmv_check.cu - standalone check-and-time program for the decode GEMV (c/cuda/mmv.cu), in the
 * manner of llm.c's dev/cuda: for every weight type, the real shapes of Qwen3-30B-A3B, OLMoE and
 * Mixtral and ncols 1, 2, 4, 8, it checks st_cuda_mmv against the CPU library (sampled rows,
 * NMSE vs strata_vec_dot_f32) and times it with CUDA events, reporting the bytes a call must move
 * (weights + x + y) over the median time as GB/s and as a fraction of the H200's ~4.1 TB/s and of
 * a device-to-device copy measured on the spot. The fused SwiGLU entry and the Q8_1 quantizer
 * alone are timed too.
 *
 * The weights are replicated over >= 1 GiB of device memory and successive calls rotate through
 * the copies, so small matrices (a Qwen3 expert is < 1 MB) are read from HBM, not from the 50 MB
 * L2. Times include the Q8_1 quantization of x (a second, tiny launch) for quantized types.
 *
 * Build (from the repository root, after `make` has built build/libstrata.a with CUDA):
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Ic/include -Ic/core -Ic/format/quant -Ic/cuda \
 *        c/cuda/dev/mmv_check.cu build/libstrata.a -o /tmp/mmv_check -lpthread -ldl -lrt
 * Run:  /tmp/mmv_check [type-name ...]     (default: every supported type)
 * Prints one line per (type, shape, ncols): time, GB/s, % of 4.1 TB/s, % of copy, NMSE. */
#include "dev_common.cuh"

extern "C" {
#include "strata.h"
#include "strata_quant.h"
#include "common.h" /* st_f32_to_fp16, st_f32_to_bf16 */
#include "cuda_backend.h"
#include "cuda_mmv.h"
}

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>


static const double H200_HBM = 4.1e12; /* bytes/s, datasheet-ish */
static const size_t ROTATE_BYTES = (size_t)1 << 30;

static uint64_t rng_s = 0x853C49E6748FEA9BULL;
static uint64_t rng() { rng_s ^= rng_s >> 12; rng_s ^= rng_s << 25; rng_s ^= rng_s >> 27; return rng_s * 2685821657736338717ULL; }
static float rngf() { return (float)((double)(rng() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0); }

static const int *fp16_fields(strata_type type) {
    static const int d0[] = {0, -1}, dm[] = {0, 2, -1}, q2k[] = {80, 82, -1}, q3k[] = {108, -1},
                     q6k[] = {208, -1}, none[] = {-1};
    switch (type) {
    case STRATA_TYPE_Q4_1: case STRATA_TYPE_Q5_1: case STRATA_TYPE_Q4_K: case STRATA_TYPE_Q5_K: return dm;
    case STRATA_TYPE_Q2_K: return q2k;
    case STRATA_TYPE_Q3_K: return q3k;
    case STRATA_TYPE_Q6_K: return q6k;
    case STRATA_TYPE_F32: case STRATA_TYPE_F16: case STRATA_TYPE_BF16: return none;
    case STRATA_TYPE_IQ1_M: case STRATA_TYPE_MXFP4: return none; /* fill_matrix sets their scales */
    default: return d0;
    }
}

/* Random well-formed matrix (as c/tests/test_cuda_mmv.c makes them). */
static void fill_matrix(strata_type type, std::vector<uint8_t> &buf, int64_t ne0, int64_t ne1, size_t rb) {
    buf.resize(rb * (size_t)ne1);
    for (size_t i = 0; i + 8 <= buf.size(); i += 8) { uint64_t v = rng(); memcpy(&buf[i], &v, 8); }
    const int64_t bb = strata_type_block_bytes(type), nb = ne0 / strata_type_block_size(type);
    for (int64_t r = 0; r < ne1; r++) {
        uint8_t *p = &buf[(size_t)r * rb];
        if (type == STRATA_TYPE_F32) {
            for (int64_t i = 0; i < ne0; i++) { float f = rngf(); memcpy(p + 4 * i, &f, 4); }
        } else if (type == STRATA_TYPE_F16 || type == STRATA_TYPE_BF16) {
            for (int64_t i = 0; i < ne0; i++) {
                const uint16_t h = type == STRATA_TYPE_F16 ? st_f32_to_fp16(rngf()) : st_f32_to_bf16(rngf());
                memcpy(p + 2 * i, &h, 2);
            }
        } else {
            for (int64_t b = 0; b < nb; b++) {
                for (const int *f = fp16_fields(type); *f >= 0; f++) {
                    float m = ldexpf(1.0f + 3.0f * (0.5f + 0.5f * rngf()), -8);
                    if (rng() & 1) m = -m;
                    const uint16_t h = st_f32_to_fp16(m);
                    memcpy(p + b * bb + *f, &h, 2);
                }
                uint8_t *blk = p + b * bb;
                if (type == STRATA_TYPE_IQ1_M) { /* d: the top nibbles of the scale words at 48 */
                    const uint16_t h = st_f32_to_fp16(ldexpf(1.0f + rngf() * 0.5f, -8));
                    for (int k = 0; k < 4; k++) blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
                }
                if (type == STRATA_TYPE_MXFP4) blk[0] = (uint8_t)(120 + rng() % 8);
            }
        }
    }
}

struct shape { const char *name; int64_t ne0, ne1; };
static const shape shapes[] = {
    {"qwen3 exp gate/up", 2048, 768},  {"qwen3 exp down", 768, 2048}, {"qwen3 attn_q", 2048, 4096},
    {"olmoe exp gate/up", 2048, 1024}, {"olmoe exp down", 1024, 2048},
    {"mixtral ffn gate", 4096, 14336}, {"mixtral ffn down", 14336, 4096},
};


/* Checks and times one (type, shape) for ncols 1, 2, 4, 8 (and the fused variant when fused). */
static void run_case(strata_type type, const shape &sh, double copy_bps, bool fused) {
    const int64_t ne0 = sh.ne0, ne1 = sh.ne1;
    const size_t rb = (size_t)strata_row_bytes(type, ne0), wbytes = rb * (size_t)ne1;
    const size_t stride = (wbytes + 255) / 256 * 256;
    int copies = (int)std::max<size_t>(2, ROTATE_BYTES / stride);
    if (fused && copies % 2) copies++; /* gate/up pairs */
    std::vector<uint8_t> w, w2;
    fill_matrix(type, w, ne0, ne1, rb);
    if (fused) fill_matrix(type, w2, ne0, ne1, rb);
    uint8_t *dw;
    CK(cudaMalloc(&dw, stride * copies));
    CK(cudaMemcpy(dw, w.data(), wbytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw + stride, fused ? w2.data() : w.data(), wbytes, cudaMemcpyHostToDevice));
    for (int k = 2; k < copies; k++) /* copy k = copy k % 2 */
        CK(cudaMemcpy(dw + stride * k, dw + stride * (k & 1), wbytes, cudaMemcpyDeviceToDevice));
    std::vector<float> x(8 * ne0);
    for (auto &v : x) v = rngf();
    float *dx, *dy;
    void *ds;
    CK(cudaMalloc(&dx, x.size() * 4));
    CK(cudaMalloc(&dy, 8 * ne1 * 4));
    CK(cudaMalloc(&ds, st_cuda_mmv_scratch_bytes(ne0, 8)));
    CK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    static const int ncs[] = {1, 2, 4, 8};
    for (int nc : ncs) {
        auto mat = [&](int k) {
            st_cuda_mat m = {type, dw + stride * k, ne0, ne1, rb, NULL, 0};
            return m;
        };
        auto call = [&](int k) {
            const st_cuda_mat a = mat(k);
            if (fused) {
                const st_cuda_mat b = mat(k + 1);
                SK(st_cuda_mmv_swiglu(&a, &b, dx, nc, dy, ds, NULL));
            } else {
                SK(st_cuda_mmv(&a, dx, nc, dy, ds, NULL));
            }
        };
        /* check on copy 0 (copy 1 = up for fused), sampled rows */
        call(0);
        CK(cudaDeviceSynchronize());
        std::vector<float> y((size_t)nc * ne1);
        CK(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost));
        double se = 0, sr = 0;
        int nan = 0;
        const int64_t step = std::max<int64_t>(1, ne1 / 61);
        for (int64_t r = 0; r < ne1; r += step) {
            for (int c = 0; c < nc; c++) {
                float g, u = 0;
                SK(strata_vec_dot_f32(type, &w[(size_t)r * rb], &x[(size_t)c * ne0], ne0, &g));
                if (fused) {
                    SK(strata_vec_dot_f32(type, &w2[(size_t)r * rb], &x[(size_t)c * ne0], ne0, &u));
                    g = g / (1.0f + expf(-g)) * u;
                }
                const double v = y[(size_t)c * ne1 + r];
                nan += std::isnan(v);
                se += (v - g) * (v - g);
                sr += (double)g * g;
            }
        }
        const double nmse = sr > 0 ? se / sr : se;
        /* time: warm up, then 5 repeats of a pass over the copies */
        const int step_k = fused ? 2 : 1;
        const int iters = std::max(20, copies / step_k);
        for (int i = 0; i < 3; i++) call((i * step_k) % copies);
        std::vector<double> t;
        for (int rep = 0; rep < 5; rep++) {
            CK(cudaEventRecord(e0));
            for (int i = 0; i < iters; i++) call((i * step_k) % copies);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            t.push_back(ms * 1e-3 / iters);
        }
        CK(cudaGetLastError());
        const double sec = dev_median(t);
        const double bytes = (double)wbytes * (fused ? 2 : 1) + 4.0 * nc * ne0 + 4.0 * nc * ne1;
        const double bps = bytes / sec;
        const double bound = strata_type_block_size(type) == 1 ? 1e-7 : 5e-4;
        printf("%-7s %-18s %5lld x %5lld ncols=%d%s  %8.2f us  %7.1f GB/s  %5.1f%% of 4.1TB/s  "
               "%5.1f%% of copy  nmse %.2e %s\n", strata_type_name(type), sh.name, (long long)ne1,
               (long long)ne0, nc, fused ? " swiglu" : "", sec * 1e6, bps * 1e-9,
               100.0 * bps / H200_HBM, 100.0 * bps / copy_bps, nmse,
               (nmse <= bound && nan == 0) ? "ok" : "FAIL");
        fflush(stdout);
    }
    CK(cudaFree(dw));
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    CK(cudaFree(ds));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
}

static void time_quantize(void) {
    const int64_t n = 8 * 4096;
    float *dx;
    void *dq;
    CK(cudaMalloc(&dx, n * 4));
    CK(cudaMalloc(&dq, n / 32 * 36));
    std::vector<float> x(n);
    for (auto &v : x) v = rngf();
    CK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 10; i++) SK(st_cuda_quantize_q8_1(dx, dq, n, NULL));
    std::vector<double> t;
    for (int rep = 0; rep < 5; rep++) {
        CK(cudaEventRecord(e0));
        for (int i = 0; i < 200; i++) SK(st_cuda_quantize_q8_1(dx, dq, n, NULL));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms * 1e-3 / 200);
    }
    printf("q8_1 quantize of 8 x 4096 floats: %.2f us per call (launch-bound)\n", dev_median(t) * 1e6);
    CK(cudaFree(dx));
    CK(cudaFree(dq));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
}

int main(int argc, char **argv) {
    int avail = 0;
    char detail[256];
    SK(st_cuda_probe(&avail, detail, sizeof detail));
    if (!avail) {
        printf("mmv_check: no GPU: %s\n", detail);
        return 0;
    }
    printf("device: %s\n", detail);
    const double copy_bps = dev_copy_rate();
    printf("device-to-device copy: %.1f GB/s (read + write)\n", copy_bps * 1e-9);
    time_quantize();

    std::vector<strata_type> types;
    for (int i = 1; i < argc; i++) {
        strata_type t;
        if (strata_type_from_name(argv[i], &t) != STRATA_OK || !st_cuda_mmv_supports(t)) {
            fprintf(stderr, "unknown or unsupported type '%s'\n", argv[i]);
            return 2;
        }
        types.push_back(t);
    }
    if (types.empty())
        for (int t = 0; t < STRATA_TYPE_COUNT; t++)
            if (st_cuda_mmv_supports((strata_type)t)) types.push_back((strata_type)t);
    for (strata_type t : types) {
        for (const shape &sh : shapes) run_case(t, sh, copy_bps, false);
        run_case(t, shapes[0], copy_bps, true); /* qwen3 expert gate+up */
        run_case(t, shapes[5], copy_bps, true); /* mixtral gate+up */
    }
    return 0;
}
