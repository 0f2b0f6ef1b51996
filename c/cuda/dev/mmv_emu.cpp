/* mmv_emu.cpp - runs the GEMV's device-side decoders and row loops (c/cuda/mmv.cuh,
 * iq_decode.cuh), the grouped kernels' dp4a adapter (moe.cuh's st_w_mmv) and the dequantize
 * decoders (dequant.cuh) on the CPU, with the few CUDA intrinsics they use (__ldg, __vsub4,
 * __dp4a, __byte_perm, __popc, ...) emulated, and compares each type's result with a
 * double-precision dot of the reference dequantized rows: the library's strata_dequantize_row,
 * except for IQ2_XXS / IQ2_XS / IQ2_S / IQ1_S / IQ1_M / MXFP4, whose reference is the scalar
 * port of ggml's dequantizers below (ref_dequant; quant.h's tables). The dequantize decoders must
 * match the reference bit for bit; the IQ3 decoders with the codebooks staged in "shared memory"
 * (st_iq_tab_smem) must give the bits of the read-only-cache ones.
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
#define ST_IQ_SHARED /* the staged tables as plain arrays */
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
struct uint2 { uint32_t x, y; };
static struct { unsigned x; } threadIdx = {0}, blockDim = {1}; /* one thread stages a whole table */
static inline void __syncthreads() {}
static struct { unsigned x, y; } blockIdx = {0, 0};
#define __shared__ static
static inline void st_pdl_enter() {}
struct __half { uint16_t x; };
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
static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
static inline uint32_t __funnelshift_r(uint32_t lo, uint32_t hi, uint32_t sh) {
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh & 31));
}
static inline uint32_t st_ld_u8(const uint8_t *p) { return *p; }
static inline uint32_t st_ld_u16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
template <int N> static inline void st_ld_words(const uint8_t *p, uint32_t *w) { memcpy(w, p, 4 * N); }
static inline void st_ld_q8blk(const uint8_t *blk, uint32_t *d, uint32_t q[8]) {
    *d = st_ld_u16(blk);
    memcpy(q, blk + 2, 32);
}
static inline float __shfl_xor_sync(unsigned, float v, int) { return v; }
static inline __half __float2half_rn(float f) { return __half{st_f32_to_fp16(f)}; }
static inline uint16_t __half_as_ushort(__half h) { return h.x; }
static inline float st_dev_fp16(uint32_t h) { return st_fp16_to_f32((uint16_t)h); }
static inline float st_dev_bf16(uint32_t h) { return st_bf16_to_f32((uint16_t)h); }

#include "moe.cuh" /* dequant.cuh, iq_decode.cuh, mmv.cuh */
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

/* ---- reference dequantizers of the types whose CPU dequantizer is not in this branch --------- */
/* Scalar ports of ggml's dequantize_row_iq2_xxs / iq2_xs / iq2_s / iq1_s / iq1_m / mxfp4
 * (ggml/src/ggml-quants.c, MIT), on quant.h's tables: y = (db * grid) * sign. */

static float h2f(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return st_fp16_to_f32(h); }
static uint8_t gbyte(uint64_t g, int j) { return (uint8_t)(g >> (8 * j)); }

static void ref_iq2(strata_type t, const uint8_t *b, float *y) {
    const float d = h2f(b);
    for (int ib = 0; ib < 8; ib++) {
        for (int l = 0; l < 4; l++) {
            uint64_t g; uint8_t signs; float db;
            if (t == STRATA_TYPE_IQ2_XXS) {
                uint32_t aux[2]; memcpy(aux, b + 2 + 8 * ib, 8);
                db = d * (0.5f + (float)(aux[1] >> 28)) * 0.25f;
                g = st_iq2xxs_grid[(aux[0] >> (8 * l)) & 0xFF];
                signs = st_ksigns_iq2xs[(aux[1] >> (7 * l)) & 127];
            } else if (t == STRATA_TYPE_IQ2_XS) {
                uint16_t q; memcpy(&q, b + 2 + 8 * ib + 2 * l, 2);
                const uint8_t sc = b[66 + ib];
                db = d * (0.5f + (float)(l < 2 ? sc & 0xF : sc >> 4)) * 0.25f;
                g = st_iq2xs_grid[q & 511];
                signs = st_ksigns_iq2xs[q >> 9];
            } else { /* IQ2_S */
                const uint8_t sc = b[74 + ib];
                db = d * (0.5f + (float)(l < 2 ? sc & 0xF : sc >> 4)) * 0.25f;
                g = st_iq2s_grid[b[2 + 4 * ib + l] | ((b[66 + ib] << (8 - 2 * l)) & 0x300)];
                signs = b[34 + 4 * ib + l];
            }
            for (int j = 0; j < 8; j++) y[32 * ib + 8 * l + j] = db * (float)gbyte(g, j) * (signs & st_kmask_iq2xs[j] ? -1.f : 1.f);
        }
    }
}

static void ref_iq1(strata_type t, const uint8_t *b, float *y) {
    for (int ib = 0; ib < 8; ib++) {
        for (int l = 0; l < 4; l++) {
            float dl, delta; int idx;
            if (t == STRATA_TYPE_IQ1_S) {
                uint16_t qh; memcpy(&qh, b + 34 + 2 * ib, 2);
                dl = h2f(b) * (float)(2 * ((qh >> 12) & 7) + 1);
                delta = qh & 0x8000 ? -ST_IQ1S_DELTA : ST_IQ1S_DELTA;
                idx = b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
            } else { /* IQ1_M */
                uint16_t sc[4]; memcpy(sc, b + 48, 8);
                const uint16_t dh = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
                const int s = (sc[ib / 2] >> (6 * (ib % 2) + 3 * (l / 2))) & 7;
                dl = st_fp16_to_f32(dh) * (float)(2 * s + 1);
                const uint8_t qh = b[32 + 2 * ib + l / 2];
                idx = b[4 * ib + l] | (l % 2 ? (qh << 4) & 0x700 : (qh << 8) & 0x700);
                delta = qh & (l % 2 ? 0x80 : 0x08) ? -ST_IQ1M_DELTA : ST_IQ1M_DELTA;
            }
            for (int j = 0; j < 8; j++) y[32 * ib + 8 * l + j] = dl * ((float)(int8_t)gbyte(st_iq1s_grid[idx], j) + delta);
        }
    }
}

static void ref_mxfp4(const uint8_t *b, float *y) {
    const uint32_t e = b[0], bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;
    float d; memcpy(&d, &bits, 4);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)st_kvalues_mxfp4[b[1 + j] & 0xF] * d;
        y[j + 16] = (float)st_kvalues_mxfp4[b[1 + j] >> 4] * d;
    }
}

static bool is_new(strata_type t) {
    return t == STRATA_TYPE_IQ2_XXS || t == STRATA_TYPE_IQ2_XS || t == STRATA_TYPE_IQ2_S ||
           t == STRATA_TYPE_IQ1_S || t == STRATA_TYPE_IQ1_M || t == STRATA_TYPE_MXFP4;
}

/* One row of n weights of type t dequantized by the reference. */
static void ref_dequant(strata_type t, const uint8_t *src, float *dst, int64_t n) {
    if (!is_new(t)) { strata_dequantize_row(t, src, dst, n); return; }
    const int64_t qk = strata_type_block_size(t), bb = strata_type_block_bytes(t);
    for (int64_t i = 0; i < n / qk; i++) {
        if (t == STRATA_TYPE_MXFP4) ref_mxfp4(src + i * bb, dst + i * qk);
        else if (t == STRATA_TYPE_IQ1_S || t == STRATA_TYPE_IQ1_M) ref_iq1(t, src + i * bb, dst + i * qk);
        else ref_iq2(t, src + i * bb, dst + i * qk);
    }
}

/* ---- random rows ------------------------------------------------------------------------------ */

static const int *fields(strata_type t) {
    static const int d0[] = {0,-1}, dm[] = {0,2,-1}, q2k[] = {80,82,-1}, q3k[] = {108,-1}, q6k[] = {208,-1}, none[] = {-1};
    switch (t) {
    case STRATA_TYPE_Q4_1: case STRATA_TYPE_Q5_1: case STRATA_TYPE_Q4_K: case STRATA_TYPE_Q5_K: return dm;
    case STRATA_TYPE_Q2_K: return q2k; case STRATA_TYPE_Q3_K: return q3k; case STRATA_TYPE_Q6_K: return q6k;
    case STRATA_TYPE_F32: case STRATA_TYPE_F16: case STRATA_TYPE_BF16: return none;
    case STRATA_TYPE_IQ1_M: case STRATA_TYPE_MXFP4: return none; /* scales set by sane_scales */
    default: return d0;
    }
}

/* Random bytes with sane scales: the fp16 fields of fields(), IQ1_M's spread fp16, MXFP4's E8M0. */
static std::vector<uint8_t> random_rows(strata_type type, int ne0, int nrows, size_t rb) {
    std::vector<uint8_t> w(rb * nrows + 16);
    for (auto &b : w) b = (uint8_t)rnd();
    const int64_t bb = strata_type_block_bytes(type), nb = ne0 / strata_type_block_size(type);
    for (int r = 0; r < nrows; r++) for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = &w[r * rb + b * bb];
        float m = ldexpf(1.0f + 3.0f*(0.5f+0.5f*rf()), -8); if (rnd() & 1) m = -m;
        const uint16_t h = st_f32_to_fp16(m);
        for (const int *f = fields(type); *f >= 0; f++) memcpy(blk + *f, &h, 2);
        if (type == STRATA_TYPE_IQ1_M)
            for (int k = 0; k < 4; k++) blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
        if (type == STRATA_TYPE_MXFP4) blk[0] = (uint8_t)(118 + rnd() % 16);
    }
    return w;
}

/* NMSE of the warp's row loop (decoder T) against the reference dot; with y_out, also the
 * per-(row, column) results. */
template <class T, int NC>
static double run_q(strata_type type, int ne0, int nrows, int ncols, std::vector<float> *y_out = nullptr) {
    const size_t rb = strata_row_bytes(type, ne0);
    rs = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(type * 7919 + ne0 + 31 * ncols);
    std::vector<uint8_t> w = random_rows(type, ne0, nrows, rb);
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
        if (y_out) for (int c = 0; c < ncols; c++) y_out->push_back(acc_all[c]);
        ref_dequant(type, &w[r * rb], deq.data(), ne0);
        for (int c = 0; c < ncols; c++) {
            double e = 0; for (int i = 0; i < ne0; i++) e += (double)deq[i] * x[(size_t)c*ne0 + i];
            se += (acc_all[c] - e) * (acc_all[c] - e); sr += e * e;
        }
    }
    return se / sr;
}

/* The grouped kernels' form: st_w_mmv<T>::load per chunk and st_w32_dot, one column. */
template <class W>
static double run_w(strata_type type, int ne0, int nrows) {
    const size_t rb = strata_row_bytes(type, ne0);
    rs = 0x51ED270B7A4F1C3DULL ^ (uint64_t)(type * 131 + ne0);
    std::vector<uint8_t> w = random_rows(type, ne0, nrows, rb);
    std::vector<float> x(ne0); for (auto &v : x) v = rf();
    std::vector<block_q8_1> xq(ne0 / 32); q8_1_host(x.data(), xq.data(), ne0);
    std::vector<float> deq(ne0);
    double se = 0, sr = 0;
    for (int r = 0; r < nrows; r++) {
        float acc = 0;
        for (int c = 0; c < ne0 / 32; c++) {
            st_w32 d;
            W::load(&w[r * rb], c, d);
            int a[8]; memcpy(a, xq[c].qs, 32);
            acc += st_fp16_to_f32(xq[c].d) * st_w32_dot<W>(d, a);
        }
        ref_dequant(type, &w[r * rb], deq.data(), ne0);
        double e = 0; for (int i = 0; i < ne0; i++) e += (double)deq[i] * x[i];
        se += (acc - e) * (acc - e); sr += e * e;
    }
    return se / sr;
}

/* The dequantize decoder D over random blocks: the number of outputs whose bits differ from the
 * reference. */
template <class D>
static long run_dq(strata_type type, int ne0, int nrows) {
    const size_t rb = strata_row_bytes(type, ne0);
    rs = 0x2545F4914F6CDD1DULL ^ (uint64_t)(type * 17 + ne0);
    std::vector<uint8_t> w = random_rows(type, ne0, nrows, rb);
    std::vector<float> ref(ne0), got(ne0);
    long bad = 0;
    for (int r = 0; r < nrows; r++) {
        ref_dequant(type, &w[r * rb], ref.data(), ne0);
        for (int64_t b = 0; b < ne0 / D::QK; b++)
            for (int j = 0; j < D::QK / 4; j++) D::group(&w[r * rb + b * D::BYTES], j, &got[b * D::QK + 4 * j]);
        for (int i = 0; i < ne0; i++) bad += memcmp(&ref[i], &got[i], 4) != 0;
    }
    return bad;
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

/* GEMV decoder T, grouped-kernel adapter, and (when given) dequantize decoder D of one type. */
#define Q(T, type) do { for (int ne0 : {256*3, 256*5, 2048}) { double a = run_q<T, 3>(type, ne0, 40, 3); double b = run_q<T, 8>(type, ne0, 20, 5); \
    const int ok = a < 1e-4 && b < 1e-4; bad += !ok; \
    printf("%-8s ne0=%5d nmse(nc3)=%.2e nmse(nc5 of 8)=%.2e %s\n", strata_type_name(type), ne0, a, b, ok ? "ok" : "BAD"); } } while (0)
#define W(T, type) do { const double a = run_w<st_w_mmv<T>>(type, 2048, 24); const int ok = a < 1e-4; bad += !ok; \
    printf("%-8s st_w_mmv (grouped kernels, tiles) nmse=%.2e %s\n", strata_type_name(type), a, ok ? "ok" : "BAD"); } while (0)
#define DQ(D, type) do { const long n = run_dq<D>(type, 256 * 4, 16); bad += n != 0; \
    printf("%-8s dequant.cuh: %ld of %d values differ from the reference %s\n", strata_type_name(type), n, 256 * 4 * 16, n ? "BAD" : "ok"); } while (0)

/* The IQ3 decoders with staged tables give the read-only-cache decoders' bits. */
template <class A, class B>
static int same_bits(strata_type type) {
    std::vector<float> ya, yb;
    run_q<A, 8>(type, 2048, 16, 7, &ya);
    run_q<B, 8>(type, 2048, 16, 7, &yb);
    const int ok = ya.size() == yb.size() && memcmp(ya.data(), yb.data(), ya.size() * 4) == 0;
    printf("%-8s staged tables: %zu outputs %s\n", strata_type_name(type), ya.size(), ok ? "bitwise the same: ok" : "DIFFER: BAD");
    return !ok;
}

int main() {
    int bad = 0;
    st_iq_tab_smem::stage(); /* the kernels' copy, once: the staged decoders below read it */
    /* the MXFP4 levels packed in st_mmv_mxfp4 are the table's */
    for (uint32_t i = 0; i < 16; i++) {
        const int v = st_iq_lut16(i * 0x01010101u, 0x03020100u, 0x0c080604u, 0xfdfeff00u, 0xf4f8fafcu);
        if ((int8_t)v != st_kvalues_mxfp4[i]) { printf("mxfp4 level %u: %d, table %d BAD\n", i, (int8_t)v, st_kvalues_mxfp4[i]); bad++; }
    }
    Q(st_mmv_q4_0, STRATA_TYPE_Q4_0); Q(st_mmv_q4_1, STRATA_TYPE_Q4_1); Q(st_mmv_q5_0, STRATA_TYPE_Q5_0);
    Q(st_mmv_q5_1, STRATA_TYPE_Q5_1); Q(st_mmv_q8_0, STRATA_TYPE_Q8_0); Q(st_mmv_iq4_nl, STRATA_TYPE_IQ4_NL);
    Q(st_mmv_q2_K, STRATA_TYPE_Q2_K); Q(st_mmv_q3_K, STRATA_TYPE_Q3_K); Q(st_mmv_q4_K, STRATA_TYPE_Q4_K);
    Q(st_mmv_q5_K, STRATA_TYPE_Q5_K); Q(st_mmv_q6_K, STRATA_TYPE_Q6_K); Q(st_mmv_iq4_xs, STRATA_TYPE_IQ4_XS);
    Q(st_mmv_iq3_xxs, STRATA_TYPE_IQ3_XXS); Q(st_mmv_iq3_s, STRATA_TYPE_IQ3_S);
    Q(st_mmv_iq2_xxs, STRATA_TYPE_IQ2_XXS); Q(st_mmv_iq2_xs, STRATA_TYPE_IQ2_XS); Q(st_mmv_iq2_s, STRATA_TYPE_IQ2_S);
    Q(st_mmv_iq1_s, STRATA_TYPE_IQ1_S); Q(st_mmv_iq1_m, STRATA_TYPE_IQ1_M); Q(st_mmv_mxfp4, STRATA_TYPE_MXFP4);
    Q(st_iq3_xxs_dec<st_iq_tab_smem>, STRATA_TYPE_IQ3_XXS); Q(st_iq3_s_dec<st_iq_tab_smem>, STRATA_TYPE_IQ3_S);
    bad += same_bits<st_iq3_xxs_dec<st_iq_tab_smem>, st_mmv_iq3_xxs>(STRATA_TYPE_IQ3_XXS);
    bad += same_bits<st_iq3_s_dec<st_iq_tab_smem>, st_mmv_iq3_s>(STRATA_TYPE_IQ3_S);
    W(st_mmv_iq4_nl, STRATA_TYPE_IQ4_NL); W(st_mmv_q3_K, STRATA_TYPE_Q3_K); W(st_mmv_iq4_xs, STRATA_TYPE_IQ4_XS);
    W(st_mmv_q5_0, STRATA_TYPE_Q5_0); W(st_mmv_q4_1, STRATA_TYPE_Q4_1); W(st_mmv_q5_1, STRATA_TYPE_Q5_1);
    W(st_mmv_iq3_xxs, STRATA_TYPE_IQ3_XXS); W(st_mmv_iq3_s, STRATA_TYPE_IQ3_S);
    W(st_iq3_xxs_dec<st_iq_tab_smem>, STRATA_TYPE_IQ3_XXS); W(st_iq3_s_dec<st_iq_tab_smem>, STRATA_TYPE_IQ3_S);
    W(st_mmv_iq2_xxs, STRATA_TYPE_IQ2_XXS); W(st_mmv_iq2_xs, STRATA_TYPE_IQ2_XS); W(st_mmv_iq2_s, STRATA_TYPE_IQ2_S);
    W(st_mmv_iq1_s, STRATA_TYPE_IQ1_S); W(st_mmv_iq1_m, STRATA_TYPE_IQ1_M); W(st_mmv_mxfp4, STRATA_TYPE_MXFP4);
    DQ(st_dq_q4_0, STRATA_TYPE_Q4_0); DQ(st_dq_iq4_nl, STRATA_TYPE_IQ4_NL); DQ(st_dq_q3_K, STRATA_TYPE_Q3_K); DQ(st_dq_q2_K, STRATA_TYPE_Q2_K);
    DQ(st_dq_iq4_xs, STRATA_TYPE_IQ4_XS); DQ(st_dq_iq3_xxs, STRATA_TYPE_IQ3_XXS); DQ(st_dq_iq3_s, STRATA_TYPE_IQ3_S);
    DQ(st_dq_iq2_xxs, STRATA_TYPE_IQ2_XXS); DQ(st_dq_iq2_xs, STRATA_TYPE_IQ2_XS); DQ(st_dq_iq2_s, STRATA_TYPE_IQ2_S);
    DQ(st_dq_iq1_s, STRATA_TYPE_IQ1_S); DQ(st_dq_iq1_m, STRATA_TYPE_IQ1_M); DQ(st_dq_mxfp4, STRATA_TYPE_MXFP4);
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
