/* rope.cuh - the RoPE angle table passed to the kernels by value, and the device function that
 * rotates one pair, for reuse by kernels that fuse RoPE in (rope.cu's q/k norm + rope + KV store,
 * mla.cu's latent-row prep).
 *
 * What st_rope_cache computes per pair i < n_rot/2 at position pos (ops.c), split so that the
 * position-independent part is computed on the host by the same C math library as the CPU's:
 *   extrap = pos * freq[i]                     freq[i] = base^(-2i/n_rot)        (host, double)
 *   interp = freq_scale * extrap
 *   theta  = interp * keep[i] + extrap * mix[i]  mix = ramp_i * ext_factor, keep = 1 - mix (host)
 *            (theta = interp when ext_factor == 0)
 *   c = (float)(cos(theta) * mscale), s = (float)(sin(theta) * mscale)
 * then the rotation of st_rope_apply in f32. Every double and float operation is rounded on its
 * own (__dmul_rn/__dadd_rn/__fmul_rn: no FMA contraction), so the GPU follows the CPU step by
 * step; only the device's cos/sin may differ from glibc's in the last double bit. */
#ifndef STRATA_CUDA_ROPE_CUH
#define STRATA_CUDA_ROPE_CUH

#include "common.cuh"
#include "cuda_ops.h"

struct st_rope_table {
    double freq[ST_CUDA_ROPE_MAX_ROT / 2];
    double keep[ST_CUDA_ROPE_MAX_ROT / 2];   /* 1 - mix */
    double mix[ST_CUDA_ROPE_MAX_ROT / 2];
    double freq_scale;
    double mscale;
    int half;                                 /* n_rot / 2 */
    int neox;
    int yarn;                                 /* ext_factor != 0 */
};

/* The table of p (the host half of st_rope_cache: its formulas and C math library), for every
 * kernel that ropes: st_k_rope, st_k_qkv_prep (rope.cu) and mla.cu's st_k_mla_prep. */
void st_rope_table_fill(const st_cuda_rope_params *p, st_rope_table *tb);

/* cos and sin of pair i at pos, times mscale, as floats. */
static __device__ __forceinline__ void st_rope_cs(const st_rope_table &tb, int64_t pos, int i,
                                                  float *c, float *s) {
    const double extrap = __dmul_rn((double)pos, tb.freq[i]);
    const double interp = __dmul_rn(tb.freq_scale, extrap);
    const double theta = tb.yarn ? __dadd_rn(__dmul_rn(interp, tb.keep[i]), __dmul_rn(extrap, tb.mix[i]))
                                 : interp;
    double sn, cn;
    sincos(theta, &sn, &cn);
    *c = (float)__dmul_rn(cn, tb.mscale);
    *s = (float)__dmul_rn(sn, tb.mscale);
}

/* Pair i of one head u (head_dim floats) rotated by (c, s) into the same places of v (u == v: in
 * place; else a copy of the head's pair, roped). */
static __device__ __forceinline__ void st_rope_pair_to(const float *u, float *v, int i, int half, int neox,
                                                       float c, float s) {
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = u[a], x1 = u[b];
    v[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    v[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

/* Rotates pair i of one head v (head_dim floats) by (c, s). */
static __device__ __forceinline__ void st_rope_pair(float *v, int i, int half, int neox, float c,
                                                    float s) {
    st_rope_pair_to(v, v, i, half, neox, c, s);
}

#endif /* STRATA_CUDA_ROPE_CUH */
