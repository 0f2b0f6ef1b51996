/* det_expf.h - st_det_expf: e^x with the same bits on the CPU and on the GPU. libm's expf and
 * CUDA's expf are both accurate to an ulp or two but not equal to each other, so an expert that
 * the CPU computes in one run and the GPU in another (the --cpu-misses split) would differ in its
 * SiLU. This one is built from single rounded multiplies and adds only: C compiled with
 * -ffp-contract=off (the Makefile's CFLAGS; no fused multiply-adds) and CUDA with each step
 * rounded on its own (__fmul_rn / __fadd_rn, which nvcc never contracts) compute it step for step.
 *
 * Method: n = round(x log2 e) by the 1.5 * 2^23 trick, r = x - n ln2 in two steps (ln2's high
 * part has 16 bits, so n * hi is exact), e^r by its Taylor polynomial of degree 7 in Estrin's
 * grouping (|r| <= 0.35: truncation below 6e-9 relative), then times 2^n as two exact powers of
 * two; x clamped first and the limits selected at the end (no branches).
 * Error: within 2 ulp of e^x (test_ops compares against expf over the float range). x > 88.72
 * gives +inf, x < -87.33 (results below FLT_MIN) gives 0, NaN gives NaN. */
#ifndef STRATA_DET_EXPF_H
#define STRATA_DET_EXPF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define ST_DET_FN static __host__ __device__ __forceinline__
#else
#define ST_DET_FN static inline
#endif

#if defined(__CUDA_ARCH__)
#define ST_DET_MUL(a, b) __fmul_rn((a), (b))
#define ST_DET_ADD(a, b) __fadd_rn((a), (b))
#else
#define ST_DET_MUL(a, b) ((a) * (b))
#define ST_DET_ADD(a, b) ((a) + (b))
#endif

ST_DET_FN float st_det_pow2i(int32_t n) { /* 2^n for -126 <= n <= 127 */
    const uint32_t bits = (uint32_t)(n + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

ST_DET_FN float st_det_expf(float x) {
    const float lo = -87.33654f, hi = 88.72283f;
    float xc = x < lo ? lo : x; /* selects, no branches: loops of it can vectorize */
    xc = xc > hi ? hi : xc;
    const float magic = 12582912.0f; /* 1.5 * 2^23: t's low mantissa bits hold round(x log2 e) */
    const float t = ST_DET_ADD(ST_DET_MUL(xc, 1.44269502f), magic);
    const float nf = ST_DET_ADD(t, -magic);
    int32_t tb;
    memcpy(&tb, &t, sizeof tb);
    const int32_t n = tb - 0x4B400000; /* the bits of magic */
    float r = ST_DET_ADD(xc, ST_DET_MUL(nf, -0.693145751953125f));
    r = ST_DET_ADD(r, ST_DET_MUL(nf, -1.42860677e-06f));
    /* e^r = (1 + r) + r^2 (1/2 + r/6) + r^4 ((1/24 + r/120) + r^2 (1/720 + r/5040)): Estrin's
     * grouping, a dependency chain of 6 steps instead of Horner's 16 */
    const float r2 = ST_DET_MUL(r, r), r4 = ST_DET_MUL(r2, r2);
    const float a = ST_DET_ADD(1.0f, r);
    const float b = ST_DET_ADD(0.5f, ST_DET_MUL(r, 1.66666667e-01f));
    const float c = ST_DET_ADD(4.16666667e-02f, ST_DET_MUL(r, 8.33333333e-03f));
    const float d = ST_DET_ADD(1.38888889e-03f, ST_DET_MUL(r, 1.98412698e-04f));
    const float p = ST_DET_ADD(ST_DET_ADD(a, ST_DET_MUL(r2, b)), ST_DET_MUL(r4, ST_DET_ADD(c, ST_DET_MUL(r2, d))));
    const int32_t h = n / 2; /* n in [-126, 128]: two factors, each a normal power of two */
    const float e = ST_DET_MUL(ST_DET_MUL(p, st_det_pow2i(h)), st_det_pow2i(n - h));
    return x > hi ? INFINITY : x < lo ? 0.0f : e; /* NaN: e is NaN */
}

/* silu(x) = x / (1 + e^-x), the SwiGLU of both paths' expert steps. */
ST_DET_FN float st_det_silu(float x) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(x, __fadd_rn(1.0f, st_det_expf(-x)));
#else
    return x / (1.0f + st_det_expf(-x));
#endif
}

/* gpt-oss's clamped SwiGLU of an expert's gate and up values (biases added): g = min(g, 7),
 * u = clamp(u, -7, 7), g * sigmoid(1.702 g) * (u + 1) (llama.cpp's swiglu_oai), step by step. */
ST_DET_FN float st_det_swiglu_oai(float g, float u) {
    g = g < 7.0f ? g : 7.0f;
    u = u < -7.0f ? -7.0f : (u > 7.0f ? 7.0f : u);
#if defined(__CUDA_ARCH__)
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, st_det_expf(__fmul_rn(-1.702f, g)))), __fadd_rn(u, 1.0f));
#else
    return g / (1.0f + st_det_expf(-1.702f * g)) * (u + 1.0f);
#endif
}

#endif /* STRATA_DET_EXPF_H */
