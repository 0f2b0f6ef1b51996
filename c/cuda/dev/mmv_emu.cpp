/* mmv_emu.cpp - runs the GEMV's device-side decoders and row loops (c/cuda/mmv.cuh) on the CPU,
 * with the few CUDA intrinsics they use (__ldg, __vsub4, __dp4a, __byte_perm, __popc) emulated,
 * and compares each type's result with a double-precision dot of the library's dequantized rows.
 * Checks the index math of every weight decoder on a machine without a GPU; one warp is emulated
 * by running the 32 lanes one after another. Expected: NMSE ~1e-5 for the quantized types (the
 * Q8_1 activation rounding), ~1e-14 for F32/F16/BF16; "BAD" marks anything above 1e-4 (1e-10 for the float types).
 *
 * Build and run (from the repository root, after `make`; no nvcc needed):
 *   g++ -std=c++17 -O1 -Wno-unknown-pragmas -Ic/include -Ic/core -Ic/format/quant -Ic/cuda \
 *       c/cuda/dev/mmv_emu.cpp build/libstrata.a -lm -lpthread -o /tmp/mmv_emu && /tmp/mmv_emu
 *
 * The include guard of c/cuda/common.cuh is defined first, so mmv.cuh picks up the host
 * definitions below instead of the CUDA headers. */
#define STRATA_CUDA_COMMON_CUH
#include <stdint.h>
#include <string.h>
#include <math.h>
extern "C" {
#include "common.h"
#include "blocks.h"
}
#define __device__
#define __forceinline__ inline
#define __global__
typedef void *cudaStream_t;
struct float4 { float x, y, z, w; };
struct uint4 { uint32_t x, y, z, w; };
template <class T> static inline T __ldg(const T *p) { T v; memcpy(&v, p, sizeof v); return v; }
static inline uint32_t __vsub4(uint32_t a, uint32_t b) {
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) r |= (((a >> 8 * k) - (b >> 8 * k)) & 0xFFu) << 8 * k;
    return r;
}
static inline int __dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> 8 * k) * (int)(int8_t)(b >> 8 * k);
    return c;
}
static inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
    uint64_t in = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++) r |= (uint32_t)((in >> (8 * ((s >> 4 * n) & 7))) & 0xFF) << 8 * n;
    return r;
}
static inline int __popc(uint32_t v) { return __builtin_popcount(v); }
static inline float __shfl_xor_sync(unsigned, float v, int) { return v; }
static inline float st_dev_fp16(uint32_t h) { return st_fp16_to_f32((uint16_t)h); }
static inline float st_dev_bf16(uint32_t h) { return st_bf16_to_f32((uint16_t)h); }

#include "mmv.cuh"
extern "C" {
#include "quant.h"
}
#include <stdio.h>
#include <stdlib.h>
#include <vector>

static uint64_t rs = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd() { rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27; return rs * 2685821657736338717ULL; }
static float rf() { return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1); }

static void q8_1_host(const float *x, block_q8_1 *q, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0; for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32*b+j]));
        float d = amax / 127.0f; int sum = 0;
        for (int j = 0; j < 32; j++) { int qi = amax == 0 ? 0 : (int)roundf(x[32*b+j]/d); q[b].qs[j] = (int8_t)qi; sum += qi; }
        q[b].d = st_f32_to_fp16(d); q[b].s = st_f32_to_fp16(d * (float)sum);
    }
}

static const int *fields(strata_type t) {
    static const int d0[] = {0,-1}, dm[] = {0,2,-1}, q2k[] = {80,82,-1}, q3k[] = {108,-1}, q6k[] = {208,-1}, none[] = {-1};
    switch (t) {
    case STRATA_TYPE_Q4_1: case STRATA_TYPE_Q5_1: case STRATA_TYPE_Q4_K: case STRATA_TYPE_Q5_K: return dm;
    case STRATA_TYPE_Q2_K: return q2k; case STRATA_TYPE_Q3_K: return q3k; case STRATA_TYPE_Q6_K: return q6k;
    case STRATA_TYPE_F32: case STRATA_TYPE_F16: case STRATA_TYPE_BF16: return none;
    default: return d0;
    }
}

template <class T, int NC>
static double run_q(strata_type type, int ne0, int nrows, int ncols) {
    const size_t rb = strata_row_bytes(type, ne0);
    std::vector<uint8_t> w(rb * nrows);
    for (auto &b : w) b = (uint8_t)rnd();
    const int64_t bb = strata_type_block_bytes(type), nb = ne0 / strata_type_block_size(type);
    for (int r = 0; r < nrows; r++) for (int64_t b = 0; b < nb; b++) for (const int *f = fields(type); *f >= 0; f++) {
        float m = ldexpf(1.0f + 3.0f*(0.5f+0.5f*rf()), -8); if (rnd() & 1) m = -m;
        uint16_t h = st_f32_to_fp16(m); memcpy(&w[r*rb + b*bb + *f], &h, 2);
    }
    std::vector<float> x((size_t)ncols * ne0); for (auto &v : x) v = rf();
    std::vector<block_q8_1> xq((size_t)ncols * ne0 / 32); q8_1_host(x.data(), xq.data(), (int64_t)ncols * ne0);
    std::vector<float> deq(ne0);
    double se = 0, sr = 0;
    for (int r = 0; r < nrows; r++) {
        float acc_all[NC] = {0};
        for (int lane = 0; lane < 32; lane++) {
            float acc[NC] = {0};
            st_mmv_row_q<T, NC>(&w[r * rb], ne0 / 32, xq.data(), ncols, lane, acc);
            for (int c = 0; c < NC; c++) acc_all[c] += acc[c];
        }
        strata_dequantize_row(type, &w[r * rb], deq.data(), ne0);
        for (int c = 0; c < ncols; c++) {
            double e = 0; for (int i = 0; i < ne0; i++) e += (double)deq[i] * x[(size_t)c*ne0 + i];
            se += (acc_all[c] - e) * (acc_all[c] - e); sr += e * e;
        }
    }
    return se / sr;
}

template <class F, int NC>
static double run_f(strata_type type, int ne0, int nrows, int ncols, bool vec) {
    const size_t rb = strata_row_bytes(type, ne0);
    std::vector<uint8_t> w(rb * nrows + 16);
    for (int r = 0; r < nrows; r++) for (int i = 0; i < ne0; i++) {
        float f = rf();
        if (type == STRATA_TYPE_F32) memcpy(&w[r*rb + 4*i], &f, 4);
        else { uint16_t h = type == STRATA_TYPE_F16 ? st_f32_to_fp16(f) : st_f32_to_bf16(f); memcpy(&w[r*rb+2*i], &h, 2); }
    }
    std::vector<float> x((size_t)ncols * ne0); for (auto &v : x) v = rf();
    std::vector<float> deq(ne0);
    const int nvec = vec ? ne0 / F::V : 0;
    double se = 0, sr = 0;
    for (int r = 0; r < nrows; r++) {
        float acc_all[NC] = {0};
        for (int lane = 0; lane < 32; lane++) {
            float acc[NC] = {0};
            st_mmv_row_f<F, NC>(&w[r * rb], ne0, nvec, x.data(), ncols, lane, acc);
            for (int c = 0; c < NC; c++) acc_all[c] += acc[c];
        }
        strata_dequantize_row(type, &w[r * rb], deq.data(), ne0);
        for (int c = 0; c < ncols; c++) {
            double e = 0; for (int i = 0; i < ne0; i++) e += (double)deq[i] * x[(size_t)c*ne0 + i];
            se += (acc_all[c] - e) * (acc_all[c] - e); sr += e * e;
        }
    }
    return se / sr;
}

#define Q(T, type) do { for (int ne0 : {256*3, 256*5, 2048}) { double a = run_q<T, 3>(type, ne0, 40, 3); double b = run_q<T, 8>(type, ne0, 20, 5); \
    const int ok = a < 1e-4 && b < 1e-4; bad += !ok; \
    printf("%-8s ne0=%5d nmse(nc3)=%.2e nmse(nc5 of 8)=%.2e %s\n", strata_type_name(type), ne0, a, b, ok ? "ok" : "BAD"); } } while (0)

int main() {
    int bad = 0;
    Q(st_mmv_q4_0, STRATA_TYPE_Q4_0); Q(st_mmv_q4_1, STRATA_TYPE_Q4_1); Q(st_mmv_q5_0, STRATA_TYPE_Q5_0);
    Q(st_mmv_q5_1, STRATA_TYPE_Q5_1); Q(st_mmv_q8_0, STRATA_TYPE_Q8_0); Q(st_mmv_iq4_nl, STRATA_TYPE_IQ4_NL);
    Q(st_mmv_q2_K, STRATA_TYPE_Q2_K); Q(st_mmv_q3_K, STRATA_TYPE_Q3_K); Q(st_mmv_q4_K, STRATA_TYPE_Q4_K);
    Q(st_mmv_q5_K, STRATA_TYPE_Q5_K); Q(st_mmv_q6_K, STRATA_TYPE_Q6_K); Q(st_mmv_iq4_xs, STRATA_TYPE_IQ4_XS);
    Q(st_mmv_iq3_xxs, STRATA_TYPE_IQ3_XXS); Q(st_mmv_iq3_s, STRATA_TYPE_IQ3_S);
    for (int ne0 : {1001, 2048, 1024 + 8}) for (int vec = 0; vec < 2; vec++) {
        if (vec && ne0 % 8) continue;
        const double f[3] = {run_f<st_mmv_f32, 4>(STRATA_TYPE_F32, ne0, 20, 3, vec),
                             run_f<st_mmv_f16w, 8>(STRATA_TYPE_F16, ne0, 20, 8, vec),
                             run_f<st_mmv_bf16w, 2>(STRATA_TYPE_BF16, ne0, 20, 1, vec)};
        const char *names[3] = {"f32", "f16", "bf16"};
        for (int k = 0; k < 3; k++) {
            const int ok = f[k] < 1e-10;
            bad += !ok;
            printf("%-8s ne0=%5d vec=%d nmse=%.2e %s\n", names[k], ne0, vec, f[k], ok ? "ok" : "BAD");
        }
    }
    printf("%s\n", bad ? "SOME BAD" : "all ok");
    return bad ? 1 : 0;
}
