/* mla.cu - the GPU kernels of multi-head latent attention (cuda_mla.h): the per-head absorption
 * matmul (st_k_mla_absorb), the latent cache store, the attention over the latent cache
 * (st_k_mla_attn, geometry in mla.cuh) and its combine pass (st_k_mla_combine), with their
 * argument checks and dispatch. Every output row depends on its own inputs only (no T, no other
 * rows, no plan in its arithmetic): prompt batches and token-by-token calls give the same bits. */
#include "mla.cuh"
#include "dequant.cuh"

#include <math.h>
#include <stdint.h>

/* ---- warp reductions (butterfly: every lane ends with the same bits) ------------------------- */

static __device__ __forceinline__ float st_mla_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
static __device__ __forceinline__ float st_mla_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- absorption matmul ----------------------------------------------------------------------- */

#define ST_MLA_AB_ROWS 32   /* output rows (of one head) per block: 4 a warp */
#define ST_MLA_AB_TT 8      /* tokens per block */

/* Weights i0 .. i0+3 of a row (i0 a multiple of 4), dequantized as the CPU does. */
template <int TYPE>
static __device__ __forceinline__ void st_mla_w4(const uint8_t *row, int i0, float w[4]) {
    if (TYPE == STRATA_TYPE_Q8_0) {
        st_dq_q8_0::group(row + (size_t)(i0 / QK8_0) * sizeof(block_q8_0), (i0 % QK8_0) / 4, w);
    } else if (TYPE == STRATA_TYPE_F32) {
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = st_dq_f32::one(row + (size_t)(i0 + k) * 4);
    } else if (TYPE == STRATA_TYPE_F16) {
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = st_dq_f16::one(row + (size_t)(i0 + k) * 2);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = st_dq_bf16::one(row + (size_t)(i0 + k) * 2);
    }
}

/* Block (row tile, head h, token tile): each warp takes 4 output rows j in turn; lane l sums
 * weights 4l..4l+3, then +128, ... of row j times x[t][h] for each token t of the tile (f32 fma,
 * in that order), then the warp's butterfly adds the lanes. */
template <int TYPE>
static __global__ void __launch_bounds__(256)
st_k_mla_absorb(const uint8_t *__restrict__ W, size_t row_bytes, int cols, int rows, const float *__restrict__ x,
                int64_t ldx, int64_t xhs, float *__restrict__ y, int64_t ldy, int64_t yhs, int64_t T) {
    st_pdl_enter();
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int h = (int)blockIdx.y;
    const int64_t t0 = (int64_t)blockIdx.z * ST_MLA_AB_TT;
    const int nt = (int)min((int64_t)ST_MLA_AB_TT, T - t0);
    const float *xh = x + t0 * ldx + (int64_t)h * xhs;
    for (int jj = 0; jj < ST_MLA_AB_ROWS / 8; jj++) {
        const int j = (int)blockIdx.x * ST_MLA_AB_ROWS + warp * (ST_MLA_AB_ROWS / 8) + jj;
        if (j >= rows) break;
        const uint8_t *row = W + ((size_t)h * (size_t)rows + (size_t)j) * row_bytes;
        float acc[ST_MLA_AB_TT];
#pragma unroll
        for (int tt = 0; tt < ST_MLA_AB_TT; tt++) acc[tt] = 0.0f;
        for (int i0 = 4 * lane; i0 < cols; i0 += 128) {
            float w[4];
            st_mla_w4<TYPE>(row, i0, w);
#pragma unroll
            for (int tt = 0; tt < ST_MLA_AB_TT; tt++) {
                if (tt < nt) {
                    const float *xp = xh + tt * ldx + i0;
#pragma unroll
                    for (int k = 0; k < 4; k++) acc[tt] = fmaf(w[k], __ldg(xp + k), acc[tt]);
                }
            }
        }
#pragma unroll
        for (int tt = 0; tt < ST_MLA_AB_TT; tt++) {
            const float v = st_mla_warp_sum(acc[tt]);
            if (lane == tt && tt < nt) y[(t0 + tt) * ldy + (int64_t)h * yhs + j] = v;
        }
    }
}

extern "C" int st_cuda_mla_absorb_supports(strata_type type, int64_t cols) {
    if (cols < 4 || cols > 65536) return 0;
    switch (type) {
    case STRATA_TYPE_F32: case STRATA_TYPE_F16: case STRATA_TYPE_BF16: return cols % 4 == 0;
    case STRATA_TYPE_Q8_0: return cols % QK8_0 == 0;
    default: return 0;
    }
}

extern "C" strata_status st_cuda_mla_absorb(const st_cuda_mla_w *W, const float *d_x, int64_t ldx, int64_t xhs,
                                            float *d_y, int64_t ldy, int64_t yhs, int64_t T, void *stream) {
    static const char *fn = "st_cuda_mla_absorb";
    if (!W || T < 0) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL weight or negative T", fn);
    if (T == 0) return STRATA_OK;
    if (!st_cuda_mla_absorb_supports(W->type, W->cols))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: %s rows of %lld weights (F32/F16/BF16: a multiple of "
                        "4, Q8_0: of 32)", fn, strata_type_name(W->type), (long long)W->cols);
    if (W->rows < 1 || W->rows > (1 << 24) || W->n_head < 1 || W->n_head > 65535 ||
        (int64_t)W->row_bytes < (int64_t)strata_row_bytes(W->type, W->cols) || (W->row_bytes & 1) ||
        (W->type == STRATA_TYPE_F32 && (W->row_bytes & 3)))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: rows %lld, heads %lld, row_bytes %zu", fn,
                        (long long)W->rows, (long long)W->n_head, W->row_bytes);
    if (xhs < W->cols || ldx < W->n_head * xhs || yhs < W->rows || ldy < W->n_head * yhs)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: strides x %lld/%lld, y %lld/%lld too small for %lld "
                        "heads of %lld -> %lld", fn, (long long)ldx, (long long)xhs, (long long)ldy,
                        (long long)yhs, (long long)W->n_head, (long long)W->cols, (long long)W->rows);
    if (!W->data || !d_x || !d_y || ((uintptr_t)W->data & 1) || ((uintptr_t)d_x & 3) || ((uintptr_t)d_y & 3) ||
        (W->type == STRATA_TYPE_F32 && ((uintptr_t)W->data & 3)))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL or misaligned pointer", fn);
    if ((T + ST_MLA_AB_TT - 1) / ST_MLA_AB_TT > 65535)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T = %lld tokens in one call", fn, (long long)T);
    ST_TRY(st_cuda_require(fn));
    const dim3 grid((unsigned)((W->rows + ST_MLA_AB_ROWS - 1) / ST_MLA_AB_ROWS), (unsigned)W->n_head,
                    (unsigned)((T + ST_MLA_AB_TT - 1) / ST_MLA_AB_TT));
    const cudaStream_t s = (cudaStream_t)stream;
    const uint8_t *w = (const uint8_t *)W->data;
    const int cols = (int)W->cols, rows = (int)W->rows;
    switch (W->type) {
    case STRATA_TYPE_F32:
        st_launch(st_k_mla_absorb<STRATA_TYPE_F32>, grid, 256, 0, s, w, W->row_bytes, cols, rows, d_x, ldx, xhs,
                  d_y, ldy, yhs, T);
        break;
    case STRATA_TYPE_F16:
        st_launch(st_k_mla_absorb<STRATA_TYPE_F16>, grid, 256, 0, s, w, W->row_bytes, cols, rows, d_x, ldx, xhs,
                  d_y, ldy, yhs, T);
        break;
    case STRATA_TYPE_BF16:
        st_launch(st_k_mla_absorb<STRATA_TYPE_BF16>, grid, 256, 0, s, w, W->row_bytes, cols, rows, d_x, ldx, xhs,
                  d_y, ldy, yhs, T);
        break;
    default:
        st_launch(st_k_mla_absorb<STRATA_TYPE_Q8_0>, grid, 256, 0, s, w, W->row_bytes, cols, rows, d_x, ldx, xhs,
                  d_y, ldy, yhs, T);
        break;
    }
    ST_CUDA_CHECK_LAUNCH("st_k_mla_absorb");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_mla_copy_rows(float *d_dst, int64_t ldd, const float *d_src, int64_t lds, int64_t n,
                                               int64_t rows, void *stream) {
    static const char *fn = "st_cuda_mla_copy_rows";
    if (n < 0 || rows < 0 || ldd < n || lds < n)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: n %lld, rows %lld, strides %lld/%lld", fn, (long long)n,
                        (long long)rows, (long long)ldd, (long long)lds);
    if (n == 0 || rows == 0) return STRATA_OK;
    if (!d_dst || !d_src) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL pointer", fn);
    ST_TRY(st_cuda_require(fn));
    ST_CUDA_CHECK(cudaMemcpy2DAsync(d_dst, (size_t)ldd * sizeof(float), d_src, (size_t)lds * sizeof(float),
                                    (size_t)n * sizeof(float), (size_t)rows, cudaMemcpyDeviceToDevice,
                                    (cudaStream_t)stream));
    return STRATA_OK;
}

/* ---- latent cache store ---------------------------------------------------------------------- */

template <bool F16>
static __global__ void __launch_bounds__(256)
st_k_mla_store(void *dst, const float *__restrict__ src, int64_t ld, int64_t D, int64_t T, int64_t pos0,
               const int32_t *__restrict__ d_pos) {
    st_pdl_enter();
    if (d_pos) pos0 = d_pos[0];
    const int64_t total = T * D, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t t = i / D, d = i - t * D;
        const float v = src[t * ld + d];
        const int64_t o = (pos0 + t) * D + d;
        if (F16)
            ((__half *)dst)[o] = __float2half_rn(v);
        else
            ((float *)dst)[o] = v;
    }
}

static bool st_mla_shape_ok(const st_cuda_mla_shape *s) {
    return s && s->n_head >= 1 && s->n_head <= 65535 && s->kv_lora >= 1 && s->kv_lora <= ST_MLA_MAX_LORA &&
           s->n_rot >= 0 && s->n_rot <= 1024 && (s->kv_lora + s->n_rot) % 2 == 0 && isfinite(s->scale);
}

extern "C" int st_cuda_mla_supports(strata_type kv_type, const st_cuda_mla_shape *s) {
    if (kv_type != STRATA_TYPE_F16 && kv_type != STRATA_TYPE_F32) return 0;
    if (!st_mla_shape_ok(s)) return 0;
    return st_mla_smem_bytes(s->kv_lora + s->n_rot) <= st_cuda_smem_limit();
}

extern "C" size_t st_cuda_mla_kv_bytes(strata_type kv_type, const st_cuda_mla_shape *s, int64_t n_ctx) {
    if ((kv_type != STRATA_TYPE_F16 && kv_type != STRATA_TYPE_F32) || !st_mla_shape_ok(s) || n_ctx < 0) return 0;
    return (size_t)n_ctx * (size_t)(s->kv_lora + s->n_rot) * (kv_type == STRATA_TYPE_F16 ? 2u : 4u);
}

extern "C" strata_status st_cuda_mla_store(const st_cuda_kv_layer *kv, const st_cuda_mla_shape *s, const float *d_k,
                                           int64_t ldk, int64_t T, int64_t pos0, const int32_t *d_pos,
                                           void *stream) {
    static const char *fn = "st_cuda_mla_store";
    if (!kv || !st_mla_shape_ok(s) || T < 0 || pos0 < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL cache, bad shape or negative size", fn);
    if (T == 0) return STRATA_OK;
    if (kv->type != STRATA_TYPE_F16 && kv->type != STRATA_TYPE_F32)
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: cache type %s (F16 or F32 only)", fn, strata_type_name(kv->type));
    const int64_t D = s->kv_lora + s->n_rot;
    if (pos0 + T > kv->n_ctx)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: positions %lld..%lld outside the cache of %lld", fn,
                        (long long)pos0, (long long)(pos0 + T - 1), (long long)kv->n_ctx);
    if (ldk < D || !d_k || !kv->k || ((uintptr_t)d_k & 3) || ((uintptr_t)d_pos & 3) || ((uintptr_t)kv->k & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: ldk %lld < %lld, or a NULL or misaligned pointer", fn,
                        (long long)ldk, (long long)D);
    ST_TRY(st_cuda_require(fn));
    const unsigned grid = st_cuda_grid(T * D, 256);
    if (kv->type == STRATA_TYPE_F16)
        st_launch(st_k_mla_store<true>, grid, 256, 0, (cudaStream_t)stream, kv->k, d_k, ldk, D, T, pos0, d_pos);
    else
        st_launch(st_k_mla_store<false>, grid, 256, 0, (cudaStream_t)stream, kv->k, d_k, ldk, D, T, pos0, d_pos);
    ST_CUDA_CHECK_LAUNCH("st_k_mla_store");
    return STRATA_OK;
}

/* ---- attention ------------------------------------------------------------------------------- */

/* Merges a chunk's state (m, l, a) into the row's running state (M, L, A), as the combine pass
 * does: both rescaled to the larger max, then added (no contraction: __fmul_rn / __fadd_rn). */
template <int ND>
static __device__ __forceinline__ void st_mla_merge(float &M, float &L, float (&A)[ND], float m, float l,
                                                    const float (&a)[ND]) {
    const float Mn = fmaxf(M, m);
    const float ea = expf(M - Mn), eb = expf(m - Mn);
    L = __fadd_rn(__fmul_rn(L, ea), __fmul_rn(l, eb));
#pragma unroll
    for (int k = 0; k < ND; k++) A[k] = __fadd_rn(__fmul_rn(A[k], ea), __fmul_rn(a[k], eb));
    M = Mn; /* the state is now relative to the larger max (a third chunk rescales from it) */
}

/* One tile's online-softmax step for one row (the warp's): nv positions valid (lanes < nv),
 * sc this lane's raw dot product; the probabilities go through Pw (the row's 32 floats of shared
 * memory) into acc, position by position. Kt: the tile, transposed. */
template <int ND>
static __device__ __forceinline__ void st_mla_row_step(float sc, int nv, float scale, float &m, float &l,
                                                       float (&acc)[ND], float *Pw, const float *Kt, int R,
                                                       int lane) {
    const float s = lane < nv ? __fmul_rn(sc, scale) : -INFINITY;
    const float mn = fmaxf(m, st_mla_warp_max(s));
    const float corr = expf(m - mn);
    const float p = lane < nv ? expf(s - mn) : 0.0f;
    l = __fadd_rn(__fmul_rn(l, corr), st_mla_warp_sum(p));
    m = mn;
    Pw[lane] = p;
    __syncwarp();
#pragma unroll
    for (int k = 0; k < ND; k++) {
        const int d = lane + 32 * k;
        float a = __fmul_rn(acc[k], corr);
        if (d < R)
            for (int pp = 0; pp < nv; pp++) a = fmaf(Pw[pp], Kt[d * ST_MLA_KS + pp], a);
        acc[k] = a;
    }
    __syncwarp();
}

/* The tile of positions [p0, p0 + n) to shared memory as f32, transposed (Kt[d][p]). */
template <bool F16>
static __device__ __forceinline__ void st_mla_load_tile(const void *K, int64_t p0, int n, int D, float *Kt) {
    const int half = D / 2;
    for (int i = (int)threadIdx.x; i < n * half; i += ST_MLA_THREADS) {
        const int p = i / half, d = 2 * (i - p * half);
        const size_t o = (size_t)(p0 + p) * (size_t)D + (size_t)d;
        float2 v;
        if (F16)
            v = __half22float2(__ldg((const __half2 *)((const __half *)K + o)));
        else
            v = __ldg((const float2 *)((const float *)K + o));
        Kt[d * ST_MLA_KS + p] = v.x;
        Kt[(d + 1) * ST_MLA_KS + p] = v.y;
    }
}

/* This lane's dot products of rows a and b (Qs rows, Dp floats, zero past D) with position lane
 * of the tile: four partial sums over d mod 4, added (0 + 1) + (2 + 3). */
static __device__ __forceinline__ void st_mla_scores(const float *Qa, const float *Qb, const float *Kt, int Dp,
                                                     int lane, float &sa, float &sb) {
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f}, b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int d = 0; d < Dp; d += 4) {
        const float4 qa = *(const float4 *)(Qa + d), qb = *(const float4 *)(Qb + d);
        const float k0 = Kt[d * ST_MLA_KS + lane], k1 = Kt[(d + 1) * ST_MLA_KS + lane];
        const float k2 = Kt[(d + 2) * ST_MLA_KS + lane], k3 = Kt[(d + 3) * ST_MLA_KS + lane];
        a[0] = fmaf(qa.x, k0, a[0]); a[1] = fmaf(qa.y, k1, a[1]);
        a[2] = fmaf(qa.z, k2, a[2]); a[3] = fmaf(qa.w, k3, a[3]);
        b[0] = fmaf(qb.x, k0, b[0]); b[1] = fmaf(qb.y, k1, b[1]);
        b[2] = fmaf(qb.z, k2, b[2]); b[3] = fmaf(qb.w, k3, b[3]);
    }
    sa = __fadd_rn(__fadd_rn(a[0], a[1]), __fadd_rn(a[2], a[3]));
    sb = __fadd_rn(__fadd_rn(b[0], b[1]), __fadd_rn(b[2], b[3]));
}

/* The block's query rows to shared memory (zero past D and past the call's rows), and the padding
 * rows of the tile (d >= D) zeroed once. */
static __device__ __forceinline__ void st_mla_load_q(const st_mla_args &a, int r_first, int rows, float *Qs,
                                                     float *Kt) {
    for (int i = (int)threadIdx.x; i < ST_MLA_RB * a.Dp; i += ST_MLA_THREADS) {
        const int lr = i / a.Dp, d = i - lr * a.Dp, r = r_first + lr;
        float v = 0.0f;
        if (r < rows && d < a.D) {
            const int t = r / a.n_head, h = r - t * a.n_head;
            v = a.q[(int64_t)t * a.ldq + (int64_t)h * a.D + d];
        }
        Qs[i] = v;
    }
    for (int i = (int)threadIdx.x; i < (a.Dp - a.D) * ST_MLA_KS; i += ST_MLA_THREADS) Kt[a.D * ST_MLA_KS + i] = 0.0f;
}

template <int ND, bool F16>
static __global__ void __launch_bounds__(ST_MLA_THREADS)
st_k_mla_attn(const st_mla_args a) {
    extern __shared__ float4 st_mla_smem4[];
    float *Qs = (float *)st_mla_smem4;            /* [RB][Dp] */
    float *Kt = Qs + ST_MLA_RB * a.Dp;            /* [Dp][KS] */
    float *Ps = Kt + a.Dp * ST_MLA_KS;            /* [RB][TL] */
    st_pdl_enter();
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int rows = a.T * a.n_head, r_first = (int)blockIdx.x * ST_MLA_RB;
    const int r_last = min(rows, r_first + ST_MLA_RB) - 1;
    const int64_t pos0 = a.pos_dev ? (int64_t)*a.pos_dev : a.pos0;
    const int64_t lim_max = pos0 + r_last / a.n_head;
    const int c_begin = a.split ? (int)blockIdx.y : 0;
    const int c_end = a.split ? c_begin + 1 : (int)(lim_max / ST_MLA_CHUNK) + 1;
    if ((int64_t)c_begin * ST_MLA_CHUNK > lim_max) return; /* a split chunk past every row */
    st_mla_load_q(a, r_first, rows, Qs, Kt);

    int64_t lim[2];
    float M[2], L[2], A[2][ND], m[2], l[2], acc[2][ND];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int r = r_first + warp + 8 * j;
        lim[j] = r < rows ? pos0 + r / a.n_head : -1;
        M[j] = -INFINITY;
        L[j] = 0.0f;
#pragma unroll
        for (int k = 0; k < ND; k++) A[j][k] = 0.0f;
    }
    for (int c = c_begin; c < c_end; c++) {
        const int64_t c0 = (int64_t)c * ST_MLA_CHUNK, c1 = min(c0 + ST_MLA_CHUNK, lim_max + 1);
#pragma unroll
        for (int j = 0; j < 2; j++) {
            m[j] = -INFINITY;
            l[j] = 0.0f;
#pragma unroll
            for (int k = 0; k < ND; k++) acc[j][k] = 0.0f;
        }
        for (int64_t p0 = c0; p0 < c1; p0 += ST_MLA_TL) {
            __syncthreads(); /* the previous tile's readers are done (and Qs is written) */
            st_mla_load_tile<F16>(a.k, p0, (int)min((int64_t)ST_MLA_TL, c1 - p0), a.D, Kt);
            __syncthreads();
            if (lim[0] < p0 && lim[1] < p0) continue; /* both of the warp's rows end before the tile */
            float sc[2];
            st_mla_scores(Qs + warp * a.Dp, Qs + (warp + 8) * a.Dp, Kt, a.Dp, lane, sc[0], sc[1]);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                if (lim[j] < p0) continue;
                const int nv = (int)min((int64_t)ST_MLA_TL, lim[j] - p0 + 1);
                st_mla_row_step<ND>(sc[j], nv, a.scale, m[j], l[j], acc[j], Ps + (warp + 8 * j) * ST_MLA_TL, Kt,
                                    a.R, lane);
            }
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            if (lim[j] < c0) continue; /* the row has no position in this chunk */
            if (a.split) {
                const int r = r_first + warp + 8 * j;
                float *pp = a.part + ((size_t)r * (size_t)a.n_chunks + (size_t)c) * (size_t)(a.R + 2);
                if (lane == 0) { pp[0] = m[j]; pp[1] = l[j]; }
#pragma unroll
                for (int k = 0; k < ND; k++)
                    if (lane + 32 * k < a.R) pp[2 + lane + 32 * k] = acc[j][k];
            } else if (c == 0) {
                M[j] = m[j];
                L[j] = l[j];
#pragma unroll
                for (int k = 0; k < ND; k++) A[j][k] = acc[j][k];
            } else {
                st_mla_merge<ND>(M[j], L[j], A[j], m[j], l[j], acc[j]);
            }
        }
    }
    if (a.split) return;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        if (lim[j] < 0) continue;
        const int r = r_first + warp + 8 * j, t = r / a.n_head, h = r - t * a.n_head;
        float *o = a.out + (int64_t)t * a.ldo + (int64_t)h * a.R;
#pragma unroll
        for (int k = 0; k < ND; k++)
            if (lane + 32 * k < a.R) o[lane + 32 * k] = __fdiv_rn(A[j][k], L[j]);
    }
}

/* The split's merge: one warp a row, its chunks 0 .. lim / CHUNK in order (st_mla_merge, the
 * first taken as it is), then divided by the sum. */
template <int ND>
static __global__ void __launch_bounds__(128)
st_k_mla_combine(const st_mla_args a) {
    st_pdl_enter();
    const int lane = (int)(threadIdx.x & 31);
    const int r = (int)blockIdx.x * 4 + (int)(threadIdx.x >> 5);
    if (r >= a.T * a.n_head) return;
    const int64_t pos0 = a.pos_dev ? (int64_t)*a.pos_dev : a.pos0;
    const int t = r / a.n_head, h = r - t * a.n_head;
    const int nc = (int)((pos0 + t) / ST_MLA_CHUNK) + 1;
    const float *p = a.part + (size_t)r * (size_t)a.n_chunks * (size_t)(a.R + 2);
    float M = p[0], L = p[1], A[ND];
#pragma unroll
    for (int k = 0; k < ND; k++) A[k] = lane + 32 * k < a.R ? p[2 + lane + 32 * k] : 0.0f;
    for (int c = 1; c < nc; c++) {
        const float *pc = p + (size_t)c * (size_t)(a.R + 2);
        float ac[ND];
#pragma unroll
        for (int k = 0; k < ND; k++) ac[k] = lane + 32 * k < a.R ? pc[2 + lane + 32 * k] : 0.0f;
        st_mla_merge<ND>(M, L, A, pc[0], pc[1], ac);
    }
    float *o = a.out + (int64_t)t * a.ldo + (int64_t)h * a.R;
#pragma unroll
    for (int k = 0; k < ND; k++)
        if (lane + 32 * k < a.R) o[lane + 32 * k] = __fdiv_rn(A[k], L);
}

template <int ND, bool F16>
static strata_status st_mla_launch(const st_mla_args &a, unsigned n_rg, cudaStream_t s) {
    auto kern = st_k_mla_attn<ND, F16>;
    const size_t smem = st_mla_smem_bytes(a.D);
    if (smem > 48 * 1024)
        ST_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    st_launch(kern, dim3(n_rg, a.split ? (unsigned)a.n_chunks : 1u), ST_MLA_THREADS, smem, s, a);
    ST_CUDA_CHECK_LAUNCH("st_k_mla_attn");
    if (a.split) {
        const unsigned nb = (unsigned)(((int64_t)a.T * a.n_head + 3) / 4);
        st_launch(st_k_mla_combine<ND>, dim3(nb), 128, 0, s, a);
        ST_CUDA_CHECK_LAUNCH("st_k_mla_combine");
    }
    return STRATA_OK;
}

template <bool F16>
static strata_status st_mla_dispatch(const st_mla_args &a, unsigned n_rg, cudaStream_t s) {
    if (a.R <= 32) return st_mla_launch<1, F16>(a, n_rg, s);
    if (a.R <= 64) return st_mla_launch<2, F16>(a, n_rg, s);
    if (a.R <= 128) return st_mla_launch<4, F16>(a, n_rg, s);
    if (a.R <= 256) return st_mla_launch<8, F16>(a, n_rg, s);
    return st_mla_launch<16, F16>(a, n_rg, s);
}

/* Bytes of the split's partials for a call of `rows` rows over n_chunks chunks. */
static size_t st_mla_part_bytes(const st_cuda_mla_shape *s, int64_t rows, int64_t n_chunks) {
    return (size_t)rows * (size_t)n_chunks * (size_t)(s->kv_lora + 2) * sizeof(float);
}

extern "C" size_t st_cuda_mla_wsize(const st_cuda_mla_shape *s, int64_t T, int64_t n_ctx) {
    if (!st_mla_shape_ok(s) || T < 1 || n_ctx < 1) return 0;
    int64_t t = ST_MLA_SPLIT_ROWS / s->n_head;
    if (t > T) t = T;
    if (t < 1) return 0;
    return st_mla_part_bytes(s, t * s->n_head, (n_ctx + ST_MLA_CHUNK - 1) / ST_MLA_CHUNK);
}

strata_status st_cuda_mla_attention_ex(const st_cuda_kv_layer *kv, const st_cuda_mla_shape *s,
                                                  const float *d_q, int64_t ldq, int64_t T, int64_t pos0,
                                                  const int32_t *d_pos, float *d_out, int64_t ldo, void *d_ws,
                                                  size_t ws_bytes, void *stream, int force, int *split_out) {
    static const char *fn = "st_cuda_mla_attention";
    if (split_out) *split_out = 0;
    if (!kv || !s || T < 0 || pos0 < 0) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL argument or negative size", fn);
    if (T == 0) return STRATA_OK;
    if (!st_cuda_mla_supports(kv->type, s))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: cache %s with %d heads over %d + %d (kv_lora <= %d, "
                        "an even row, %zu bytes of shared memory a block)", fn, strata_type_name(kv->type),
                        (int)s->n_head, (int)s->kv_lora, (int)s->n_rot, ST_MLA_MAX_LORA,
                        st_mla_smem_bytes(s->kv_lora + s->n_rot));
    const int64_t D = s->kv_lora + s->n_rot, H = s->n_head;
    if (pos0 + T > kv->n_ctx)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: positions %lld..%lld outside the cache of %lld", fn,
                        (long long)pos0, (long long)(pos0 + T - 1), (long long)kv->n_ctx);
    if (T * H > INT32_MAX / 2 || ldq < H * D || ldo < H * s->kv_lora)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld, ldq %lld (>= %lld), ldo %lld (>= %lld)", fn,
                        (long long)T, (long long)ldq, (long long)(H * D), (long long)ldo, (long long)(H * s->kv_lora));
    const uintptr_t ea = kv->type == STRATA_TYPE_F16 ? 3 : 7; /* 2-element loads */
    if (!d_q || !d_out || !kv->k || ((uintptr_t)kv->k & ea) || ((uintptr_t)d_q & 3) || ((uintptr_t)d_out & 3) ||
        ((uintptr_t)d_pos & 3) || ((uintptr_t)d_ws & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL or misaligned pointer", fn);
    ST_TRY(st_cuda_require(fn));
    const int64_t np = st_cuda_attn_plan_np(pos0 + T, kv->n_ctx);
    const int64_t n_chunks = (np + ST_MLA_CHUNK - 1) / ST_MLA_CHUNK, rows = T * H;
    const bool fits = d_ws && n_chunks <= 65535 && st_mla_part_bytes(s, rows, n_chunks) <= ws_bytes;
    const bool split = fits && (force == 1 || (force < 0 && rows <= ST_MLA_SPLIT_ROWS && n_chunks >= 2));
    st_mla_args a;
    a.k = kv->k;
    a.q = d_q;
    a.ldq = ldq;
    a.out = d_out;
    a.ldo = ldo;
    a.part = (float *)d_ws;
    a.n_head = (int)H;
    a.R = s->kv_lora;
    a.D = (int)D;
    a.Dp = (int)((D + 3) / 4 * 4);
    a.T = (int)T;
    a.pos0 = pos0;
    a.pos_dev = d_pos;
    a.scale = s->scale;
    a.n_chunks = (int)n_chunks;
    a.split = split ? 1 : 0;
    if (split_out) *split_out = a.split;
    const unsigned n_rg = (unsigned)((rows + ST_MLA_RB - 1) / ST_MLA_RB);
    const cudaStream_t st = (cudaStream_t)stream;
    return kv->type == STRATA_TYPE_F16 ? st_mla_dispatch<true>(a, n_rg, st) : st_mla_dispatch<false>(a, n_rg, st);
}

extern "C" strata_status st_cuda_mla_attention(const st_cuda_kv_layer *kv, const st_cuda_mla_shape *s,
                                               const float *d_q, int64_t ldq, int64_t T, int64_t pos0,
                                               const int32_t *d_pos, float *d_out, int64_t ldo, void *d_ws,
                                               size_t ws_bytes, void *stream) {
    return st_cuda_mla_attention_ex(kv, s, d_q, ldq, T, pos0, d_pos, d_out, ldo, d_ws, ws_bytes, stream, -1, NULL);
}
