/* rope.cu - RoPE on the GPU (cuda_ops.h): normal and NEOX pairs, partial n_rot, linear and YaRN
 * scaling, one position per token (a device array or pos0 + t); and st_cuda_qkv_prep, the per-head
 * q/k norms, RoPE and KV-cache store of a fused q/k/v row in one launch.
 *
 * Work split: grid.y = token, one thread per (head, pair) of that token; each thread computes its
 * pair's angle in double (rope.cuh) and rotates the pair in place. The position-independent part
 * (frequencies, YaRN ramp, mscale) is computed once per call on the host with the formulas and C
 * math library of st_rope_cache and passed by value (~3 KB of kernel parameters). */
#include "rope.cuh"
#include "norm.cuh"

#include <math.h>
#include <string.h>

static const int ST_ROPE_THREADS = 128;

static __global__ void __launch_bounds__(128)
st_k_rope(const __grid_constant__ st_rope_table tb, float *x, int64_t ldx, int64_t n_head,
          int64_t head_dim, const int32_t *__restrict__ pos, int64_t pos0) {
    st_pdl_enter();
    const int64_t t = blockIdx.y;
    const int64_t p = pos ? (int64_t)__ldg(pos + t) : pos0 + t;
    const int64_t work = n_head * tb.half;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < work;
         k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t h = k / tb.half;
        const int i = (int)(k - h * tb.half);
        float c, s;
        st_rope_cs(tb, p, i, &c, &s);
        st_rope_pair(x + t * ldx + h * head_dim, i, tb.half, tb.neox, c, s);
    }
}

/* As st_yarn_corr_dim in ops.c. */
static double st_yarn_corr_dim_h(double n_dims, double n_ctx_orig, double beta, double base) {
    return n_dims * log(n_ctx_orig / (beta * 2.0 * M_PI)) / (2.0 * log(base));
}

/* The host half of st_rope_cache (same expressions, same order). */
void st_rope_table_fill(const st_cuda_rope_params *p, st_rope_table *tb) {
    const int half = p->n_rot / 2;
    double lo = 0.0, hi = 0.0;
    double mscale = p->attn_factor;
    if (p->ext_factor != 0.0f) {
        lo = st_yarn_corr_dim_h(p->n_rot, p->n_ctx_orig, p->beta_fast, p->freq_base);
        hi = st_yarn_corr_dim_h(p->n_rot, p->n_ctx_orig, p->beta_slow, p->freq_base);
        if (!p->no_trunc) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        if (lo < 0) lo = 0;
        if (hi > p->n_rot - 1) hi = p->n_rot - 1;
        mscale *= 1.0 + 0.1 * log(1.0 / p->freq_scale);
    }
    memset(tb, 0, sizeof *tb);
    for (int i = 0; i < half; i++) {
        tb->freq[i] = pow((double)p->freq_base, -2.0 * (double)i / (double)p->n_rot);
        double mix = 0.0;
        if (p->ext_factor != 0.0f) {
            double y = ((double)i - lo) / fmax(0.001, hi - lo);
            double ramp = 1.0 - fmin(1.0, fmax(0.0, y));
            mix = ramp * p->ext_factor;
        }
        tb->mix[i] = mix;
        tb->keep[i] = 1.0 - mix;
    }
    tb->freq_scale = p->freq_scale;
    tb->mscale = mscale;
    tb->half = half;
    tb->neox = p->neox ? 1 : 0;
    tb->yarn = p->ext_factor != 0.0f;
}

extern "C" int st_cuda_rope_supports(const st_cuda_rope_params *p, int64_t head_dim) {
    if (!p) return 0;
    if (p->n_rot < 2 || p->n_rot % 2 || p->n_rot > ST_CUDA_ROPE_MAX_ROT || p->n_rot > head_dim) return 0;
    if (!(p->freq_base > 0.0f) || !(p->freq_scale > 0.0f) || !isfinite(p->ext_factor) ||
        !isfinite(p->attn_factor))
        return 0;
    if (p->ext_factor != 0.0f && (!(p->beta_fast > 0.0f) || !(p->beta_slow > 0.0f) || p->n_ctx_orig <= 0))
        return 0;
    return 1;
}

extern "C" strata_status st_cuda_rope(const st_cuda_rope_params *p, float *d_x, int64_t ldx,
                                      int64_t n_head, int64_t head_dim, int64_t T,
                                      const int32_t *d_pos, int64_t pos0, void *stream) {
    static const char *fn = "st_cuda_rope";
    if (!p) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL params", fn);
    if (T < 0 || n_head < 0 || head_dim < 0 || pos0 < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: negative size or position", fn);
    if (T == 0 || n_head == 0) return STRATA_OK;
    if (!st_cuda_rope_supports(p, head_dim))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: n_rot %d with head_dim %lld (even, <= head_dim "
                        "and <= %d), freq_base %g, freq_scale %g, ext_factor %g", fn, (int)p->n_rot,
                        (long long)head_dim, ST_CUDA_ROPE_MAX_ROT, (double)p->freq_base,
                        (double)p->freq_scale, (double)p->ext_factor);
    if (T > 65535)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T = %lld tokens in one call (at most 65535)", fn,
                        (long long)T);
    if (ldx < n_head * head_dim)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: ldx %lld < n_head * head_dim %lld", fn,
                        (long long)ldx, (long long)(n_head * head_dim));
    if (!d_x || ((uintptr_t)d_x & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: x %p is NULL or not 4-byte aligned", fn, (void *)d_x);
    if ((uintptr_t)d_pos & 3)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: pos %p is not 4-byte aligned", fn, (const void *)d_pos);
    ST_TRY(st_cuda_require(fn));
    st_rope_table tb;
    st_rope_table_fill(p, &tb);
    const int64_t work = n_head * tb.half;
    dim3 grid(st_cuda_grid(work, ST_ROPE_THREADS), (unsigned)T);
    st_launch(st_k_rope, grid, ST_ROPE_THREADS, 0, (cudaStream_t)stream, tb, d_x, ldx, n_head, head_dim,
                                                                  d_pos, pos0);
    ST_CUDA_CHECK_LAUNCH("st_k_rope");
    return STRATA_OK;
}

/* ---- the attention inputs of a fused q/k/v row in one launch ---------------------------------- */

/* One warp per (token, head) of the row's n_head q heads, n_kv k heads and n_kv v heads: a q or k
 * head gets st_k_rmsnorm<32>'s per-head norm (when its weights are given; the same slices, tree
 * and scaling) and st_k_rope's pairs; a k or v head is then stored into the cache as
 * st_k_kv_store does (position d_pos[0] + t or pos0 + t, the same rounding). __syncwarp orders
 * the lanes' global writes between the stages. */
template <bool F16>
static __global__ void __launch_bounds__(256)
st_k_qkv_prep(const __grid_constant__ st_rope_table tb, float *qkv, int64_t ld, int n_head, int n_kv, int hd,
              const float *__restrict__ qn, const float *__restrict__ kn, float eps, void *kc, void *vc,
              int64_t n_ctx, int64_t T, const int32_t *__restrict__ pos, int64_t pos0) {
    st_pdl_enter();
    const int heads = n_head + 2 * n_kv;
    const int64_t wid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = (int)(threadIdx.x & 31);
    if (wid >= T * heads) return; /* whole warps */
    const int64_t t = wid / heads;
    const int h = (int)(wid - t * heads);
    float *x = qkv + t * ld + (int64_t)h * hd;
    const bool is_v = h >= n_head + n_kv;
    if (!is_v) {
        const float *w = h < n_head ? qn : kn;
        if (w) {
            double sum = 0.0;
            for (int i = lane; i < hd; i += 32) {
                const double v = (double)x[i];
                sum = __dadd_rn(sum, __dmul_rn(v, v));
            }
            sum = st_warp_sum_d(sum);
            const float sc = st_rms_scale(sum, hd, eps);
            for (int i = lane; i < hd; i += 32) x[i] = __fmul_rn(__fmul_rn(x[i], sc), __ldg(w + i));
            __syncwarp();
        }
        const int64_t p = pos ? (int64_t)__ldg(pos + t) : pos0 + t;
        for (int i = lane; i < tb.half; i += 32) {
            float c, s;
            st_rope_cs(tb, p, i, &c, &s);
            st_rope_pair(x, i, tb.half, tb.neox, c, s);
        }
        __syncwarp();
    }
    if (h >= n_head) {
        const int64_t p0 = pos ? (int64_t)__ldg(pos) : pos0;
        const int hk = is_v ? h - n_head - n_kv : h - n_head;
        const int64_t o = ((int64_t)hk * n_ctx + p0 + t) * hd;
        for (int i = lane; i < hd; i += 32) {
            const float v = x[i];
            if (F16) ((__half *)(is_v ? vc : kc))[o + i] = __float2half_rn(v);
            else ((float *)(is_v ? vc : kc))[o + i] = v;
        }
    }
}

extern "C" strata_status st_cuda_qkv_prep(const st_cuda_rope_params *p, float *d_qkv, int64_t ld,
                                          int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                                          const float *d_q_norm, const float *d_k_norm, float eps,
                                          const st_cuda_kv_layer *kv, int64_t T, const int32_t *d_pos,
                                          int64_t pos0, void *stream) {
    static const char *fn = "st_cuda_qkv_prep";
    if (!p || !kv) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL params or cache", fn);
    if (T < 0 || n_head < 1 || n_head_kv < 1 || head_dim < 2 || pos0 < 0 || n_head > 4096 ||
        n_head_kv > 4096 || head_dim > 4096)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld, %lld / %lld heads of %lld, pos0 %lld", fn,
                        (long long)T, (long long)n_head, (long long)n_head_kv, (long long)head_dim,
                        (long long)pos0);
    if (T == 0) return STRATA_OK;
    if (!st_cuda_rope_supports(p, head_dim))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: RoPE n_rot %d with head_dim %lld", fn, (int)p->n_rot,
                        (long long)head_dim);
    if (kv->type != STRATA_TYPE_F16 && kv->type != STRATA_TYPE_F32)
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: cache type %s (F16 or F32 only)", fn,
                        strata_type_name(kv->type));
    if (pos0 + T > kv->n_ctx) /* as st_cuda_kv_store (the session passes its positions both ways) */
        return st_error(STRATA_ERR_INVALID_ARG, "%s: positions %lld..%lld outside the cache of %lld", fn,
                        (long long)pos0, (long long)(pos0 + T - 1), (long long)kv->n_ctx);
    if (ld < (n_head + 2 * n_head_kv) * head_dim)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: ld %lld below the row's %lld", fn, (long long)ld,
                        (long long)((n_head + 2 * n_head_kv) * head_dim));
    const uintptr_t ea = kv->type == STRATA_TYPE_F16 ? 1 : 3;
    if (!d_qkv || ((uintptr_t)d_qkv & 3) || ((uintptr_t)d_pos & 3) || !kv->k || !kv->v ||
        ((uintptr_t)kv->k & ea) || ((uintptr_t)kv->v & ea) || ((uintptr_t)d_q_norm & 3) ||
        ((uintptr_t)d_k_norm & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL or misaligned pointer", fn);
    ST_TRY(st_cuda_require(fn));
    st_rope_table tb;
    st_rope_table_fill(p, &tb);
    const int64_t warps = T * (n_head + 2 * n_head_kv);
    const unsigned grid = st_cuda_grid(warps * 32, 256);
    cudaStream_t st = (cudaStream_t)stream;
    if (kv->type == STRATA_TYPE_F16)
        st_launch(st_k_qkv_prep<true>, grid, 256, 0, st, tb, d_qkv, ld, (int)n_head, (int)n_head_kv, (int)head_dim,
                                                  d_q_norm, d_k_norm, eps, kv->k, kv->v, kv->n_ctx, T, d_pos, pos0);
    else
        st_launch(st_k_qkv_prep<false>, grid, 256, 0, st, tb, d_qkv, ld, (int)n_head, (int)n_head_kv, (int)head_dim,
                                                   d_q_norm, d_k_norm, eps, kv->k, kv->v, kv->n_ctx, T, d_pos, pos0);
    ST_CUDA_CHECK_LAUNCH("st_k_qkv_prep");
    return STRATA_OK;
}
