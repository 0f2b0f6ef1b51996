/* norm.cu - RMSNorm over rows and the small elementwise ops of the forward pass on the GPU
 * (cuda_ops.h): residual add with a scale, bias add, SwiGLU on two buffers, scale.
 *
 * RMSNorm: one warp per row for rows up to 256 floats (the per-head q/k norms), one 256-thread
 * block per row beyond (n_embd rows, OLMoE's whole-projection norm). Each thread sums the squares
 * of its slice of the row in double (a warp row: every 32nd value; a block row: quads of four
 * consecutive values, st_norm_row_quads), the slices are reduced in a fixed tree order, then
 * every element is scaled exactly as st_rmsnorm does. The elementwise ops are grid-stride loops,
 * one element per thread. Dispatch: st_rmsnorm_launch picks the row width; each elementwise op is
 * one kernel. */
#include "norm_row.cuh"

static const int ST_NORM_THREADS = 256;

/* ---- kernels -------------------------------------------------------------------------------- */

/* TPR threads per row (32 or 256), 256 / TPR rows per block; row r = (t, h), t = r / n_sub. */
template <int TPR>
static __global__ void __launch_bounds__(256)
st_k_rmsnorm(float *y, int64_t ldy, const float *x, int64_t ldx, const float *__restrict__ w,
             int64_t n, int64_t n_sub, int64_t n_rows, float eps, block_q8_1 *q) {
    st_pdl_enter();
    constexpr int RPB = 256 / TPR;
    __shared__ double red[8];
    const int lane = (int)(threadIdx.x % TPR);
    const bool reg = n <= (int64_t)TPR * ST_NORM_REG;
    for (int64_t r0 = (int64_t)blockIdx.x * RPB; r0 < n_rows; r0 += (int64_t)gridDim.x * RPB) {
        const int64_t row = r0 + (int64_t)(threadIdx.x / TPR);
        const bool live = row < n_rows; /* uniform per row group (warp or block) */
        const int64_t t = live ? row / n_sub : 0, h = live ? row - t * n_sub : 0;
        const float *xr = x + t * ldx + h * n;
        float *yr = y + t * ldy + h * n;
        if constexpr (TPR == 256) { /* a block a row: the quads above */
            st_norm_row_quads(xr, nullptr, 0.0f, nullptr, yr, w, n, eps, q ? q + ((row * n) >> 5) : nullptr, red);
            continue;
        }
        /* a warp a row (TPR 32) from here */
        double sum = 0.0;
        float xv[ST_NORM_REG], wv[ST_NORM_REG];
        if (reg) {
#pragma unroll
            for (int k = 0; k < ST_NORM_REG; k++) {
                const int64_t i = lane + (int64_t)k * TPR;
                xv[k] = live && i < n ? xr[i] : 0.0f;
                wv[k] = w && live && i < n ? __ldg(w + i) : 1.0f;
            }
#pragma unroll
            for (int k = 0; k < ST_NORM_REG; k++) {
                const double v = (double)xv[k];
                if (live && lane + (int64_t)k * TPR < n) sum = __dadd_rn(sum, __dmul_rn(v, v));
            }
        } else if (live) {
            for (int64_t i = lane; i < n; i += TPR) {
                const double v = (double)xr[i];
                sum = __dadd_rn(sum, __dmul_rn(v, v));
            }
        }
        sum = st_norm_reduce<TPR>(sum, red);
        if (!live) continue;
        const float sc = st_rms_scale(sum, n, eps);
        if (reg) {
#pragma unroll
            for (int k = 0; k < ST_NORM_REG; k++) {
                const int64_t i = lane + (int64_t)k * TPR;
                if (i >= n) break; /* uniform per warp when n % 32 == 0 (required with q) */
                const float v = w ? __fmul_rn(__fmul_rn(xv[k], sc), wv[k]) : __fmul_rn(xv[k], sc);
                yr[i] = v;
                if (q) st_q8_1_warp_put(v, q + ((row * n + i) >> 5), (int)(threadIdx.x & 31));
            }
        } else {
            for (int64_t i = lane; i < n; i += TPR) {
                const float v = w ? __fmul_rn(__fmul_rn(xr[i], sc), __ldg(w + i)) : __fmul_rn(xr[i], sc);
                yr[i] = v;
                /* n % 32 == 0 with q: whole warps, 32 consecutive values each */
                if (q) st_q8_1_warp_put(v, q + ((row * n + i) >> 5), (int)(threadIdx.x & 31));
            }
        }
    }
}

/* Residual add then RMSNorm of the sum, one pass per row: x[t] += scale * b[t] (as st_k_add) and
 * y[t] = rmsnorm(x[t]) * w (as st_k_rmsnorm, the same slices and reduction order): the bits of
 * the two kernels one after the other, in one launch. Rows of n, contiguous (ld = n). */
template <int TPR>
static __global__ void __launch_bounds__(256)
st_k_add_rmsnorm(float *x, const float *__restrict__ b, float scale, float *y, const float *__restrict__ w,
                 int64_t n, int64_t n_rows, float eps, block_q8_1 *q) {
    st_pdl_enter();
    constexpr int RPB = 256 / TPR;
    __shared__ double red[8];
    const int lane = (int)(threadIdx.x % TPR);
    const bool reg = n <= (int64_t)TPR * ST_NORM_REG;
    for (int64_t r0 = (int64_t)blockIdx.x * RPB; r0 < n_rows; r0 += (int64_t)gridDim.x * RPB) {
        const int64_t row = r0 + (int64_t)(threadIdx.x / TPR);
        const bool live = row < n_rows;
        float *xr = x + (live ? row : 0) * n;
        const float *br = b + (live ? row : 0) * n;
        float *yr = y + (live ? row : 0) * n;
        if constexpr (TPR == 256) {
            st_norm_row_quads(xr, br, scale, xr, yr, w, n, eps, q ? q + ((row * n) >> 5) : nullptr, red);
            continue;
        }
        /* a warp a row (TPR 32) from here */
        double sum = 0.0;
        float xv[ST_NORM_REG], wv[ST_NORM_REG];
        if (reg) {
#pragma unroll
            for (int k = 0; k < ST_NORM_REG; k++) {
                const int64_t i = lane + (int64_t)k * TPR;
                const bool in = live && i < n;
                const float xi = in ? xr[i] : 0.0f, bi = in ? br[i] : 0.0f;
                wv[k] = in ? __ldg(w + i) : 1.0f;
                xv[k] = __fadd_rn(xi, __fmul_rn(bi, scale));
            }
#pragma unroll
            for (int k = 0; k < ST_NORM_REG; k++) {
                const int64_t i = lane + (int64_t)k * TPR;
                if (live && i < n) {
                    xr[i] = xv[k];
                    const double v = (double)xv[k];
                    sum = __dadd_rn(sum, __dmul_rn(v, v));
                }
            }
        } else if (live) {
            for (int64_t i = lane; i < n; i += TPR) {
                const float xi = __fadd_rn(xr[i], __fmul_rn(br[i], scale));
                xr[i] = xi;
                const double v = (double)xi;
                sum = __dadd_rn(sum, __dmul_rn(v, v));
            }
        }
        sum = st_norm_reduce<TPR>(sum, red);
        if (!live) continue;
        const float sc = st_rms_scale(sum, n, eps);
        if (reg) {
#pragma unroll
            for (int k = 0; k < ST_NORM_REG; k++) {
                const int64_t i = lane + (int64_t)k * TPR;
                if (i >= n) break; /* uniform per warp when n % 32 == 0 (required with q) */
                const float v = __fmul_rn(__fmul_rn(xv[k], sc), wv[k]);
                yr[i] = v;
                if (q) st_q8_1_warp_put(v, q + ((row * n + i) >> 5), (int)(threadIdx.x & 31));
            }
        } else {
            for (int64_t i = lane; i < n; i += TPR) {
                const float v = __fmul_rn(__fmul_rn(xr[i], sc), __ldg(w + i));
                yr[i] = v;
                if (q) st_q8_1_warp_put(v, q + ((row * n + i) >> 5), (int)(threadIdx.x & 31));
            }
        }
    }
}

static __global__ void __launch_bounds__(256)
st_k_add(float *y, const float *x, const float *b, float scale, int64_t n) {
    st_pdl_enter();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = __fadd_rn(x[i], __fmul_rn(b[i], scale));
}

static __global__ void __launch_bounds__(256)
st_k_add_bias(float *y, int64_t ldy, const float *__restrict__ bias, int64_t n, int64_t total) {
    st_pdl_enter();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t t = i / n, j = i - t * n;
        y[t * ldy + j] = __fadd_rn(y[t * ldy + j], __ldg(bias + j));
    }
}

static __global__ void __launch_bounds__(256)
st_k_swiglu(float *h, int64_t ldh, const float *g, int64_t ldg, const float *u, int64_t ldu,
            int64_t n, int64_t total) {
    st_pdl_enter();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t t = i / n, j = i - t * n;
        h[t * ldh + j] = st_dev_swiglu(g[t * ldg + j], u[t * ldu + j]);
    }
}

static __global__ void __launch_bounds__(256)
st_k_scale(float *y, const float *x, float s, int divide, int64_t n) {
    st_pdl_enter();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = divide ? __fdiv_rn(x[i], s) : __fmul_rn(x[i], s);
}

/* y = 1 / (1 + expf(-x)), as the CPU's st_sigmoid (expf may differ in the last bit) */
static __global__ void __launch_bounds__(256)
st_k_sigmoid(float *y, const float *x, int64_t n) {
    st_pdl_enter();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x[i])));
}

/* ---- argument checks ------------------------------------------------------------------------ */

static bool st_misaligned(const void *p) { return ((uintptr_t)p & 3) != 0; }

static strata_status st_check_ptrs(const char *fn, const void *a, const char *an, const void *b,
                                   const char *bn, const void *c, const char *cn) {
    const void *ps[3] = {a, b, c};
    const char *ns[3] = {an, bn, cn};
    for (int i = 0; i < 3; i++) {
        if (!ns[i]) continue;
        if (!ps[i]) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL %s", fn, ns[i]);
        if (st_misaligned(ps[i]))
            return st_error(STRATA_ERR_INVALID_ARG, "%s: %s %p is not 4-byte aligned", fn, ns[i], ps[i]);
    }
    return STRATA_OK;
}

/* ---- entry points --------------------------------------------------------------------------- */

extern "C" int st_cuda_rmsnorm_supports(int64_t n) { return n >= 1 && n <= 0x7fffffff; }

static strata_status st_rmsnorm_go(const char *fn, float *d_y, int64_t ldy, const float *d_x, int64_t ldx,
                                   const float *d_w, int64_t n, int64_t n_sub, int64_t T, float eps,
                                   block_q8_1 *d_q, void *stream) {
    if (T < 0 || n_sub < 0 || n < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: negative size (n %lld, n_sub %lld, T %lld)", fn,
                        (long long)n, (long long)n_sub, (long long)T);
    if (T == 0 || n_sub == 0 || n == 0) return STRATA_OK;
    if (!st_cuda_rmsnorm_supports(n))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: row length %lld", fn, (long long)n);
    if (ldx < n_sub * n || ldy < n_sub * n)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: strides ldx %lld / ldy %lld below %lld x %lld",
                        fn, (long long)ldx, (long long)ldy, (long long)n_sub, (long long)n);
    if (!(eps >= 0.0f))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: eps %g", fn, (double)eps);
    ST_TRY(st_check_ptrs(fn, d_y, "y", d_x, "x", d_w, d_w ? "w" : NULL));
    if (d_q && (n % 32 != 0 || ((uintptr_t)d_q & 3)))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: Q8_1 rows need n %% 32 == 0 (n %lld) and a 4-byte "
                        "aligned q", fn, (long long)n);
    ST_TRY(st_cuda_require(fn));
    const int64_t rows = T * n_sub;
    cudaStream_t s = (cudaStream_t)stream;
    /* The one dispatch point: a warp per row for short rows, a block per row for long ones. */
    if (n <= 256) {
        st_launch(st_k_rmsnorm<32>, st_cuda_grid(rows, ST_NORM_THREADS / 32), ST_NORM_THREADS, 0, s,
                  d_y, ldy, d_x, ldx, d_w, n, n_sub, rows, eps, d_q);
    } else {
        st_launch(st_k_rmsnorm<256>, st_cuda_grid(rows, 1), ST_NORM_THREADS, 0, s,
                  d_y, ldy, d_x, ldx, d_w, n, n_sub, rows, eps, d_q);
    }
    ST_CUDA_CHECK_LAUNCH("st_k_rmsnorm");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_rmsnorm(float *d_y, int64_t ldy, const float *d_x, int64_t ldx,
                                         const float *d_w, int64_t n, int64_t n_sub, int64_t T,
                                         float eps, void *stream) {
    return st_rmsnorm_go("st_cuda_rmsnorm", d_y, ldy, d_x, ldx, d_w, n, n_sub, T, eps, NULL, stream);
}

extern "C" strata_status st_cuda_rmsnorm_q8(float *d_y, const float *d_x, const float *d_w, int64_t n,
                                            int64_t T, float eps, void *d_q, void *stream) {
    if (!d_q) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_rmsnorm_q8: NULL q");
    return st_rmsnorm_go("st_cuda_rmsnorm_q8", d_y, n, d_x, n, d_w, n, 1, T, eps, (block_q8_1 *)d_q, stream);
}

static strata_status st_add_rmsnorm_go(const char *fn, float *d_x, const float *d_b, float scale, float *d_y,
                                       const float *d_w, int64_t n, int64_t T, float eps, block_q8_1 *d_q,
                                       void *stream) {
    if (T < 0 || n < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: negative size (n %lld, T %lld)", fn, (long long)n,
                        (long long)T);
    if (T == 0 || n == 0) return STRATA_OK;
    if (!st_cuda_rmsnorm_supports(n))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: row length %lld", fn, (long long)n);
    if (!(eps >= 0.0f) || !d_w)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: eps %g, weight %p", fn, (double)eps, (const void *)d_w);
    ST_TRY(st_check_ptrs(fn, d_x, "x", d_b, "b", d_y, "y"));
    if (d_q && (n % 32 != 0 || ((uintptr_t)d_q & 3)))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: Q8_1 rows need n %% 32 == 0 (n %lld) and a 4-byte "
                        "aligned q", fn, (long long)n);
    ST_TRY(st_cuda_require(fn));
    cudaStream_t s = (cudaStream_t)stream;
    if (n <= 256)
        st_launch(st_k_add_rmsnorm<32>, st_cuda_grid(T, ST_NORM_THREADS / 32), ST_NORM_THREADS, 0, s,
                  d_x, d_b, scale, d_y, d_w, n, T, eps, d_q);
    else
        st_launch(st_k_add_rmsnorm<256>, st_cuda_grid(T, 1), ST_NORM_THREADS, 0, s, d_x, d_b, scale, d_y, d_w,
                  n, T, eps, d_q);
    ST_CUDA_CHECK_LAUNCH("st_k_add_rmsnorm");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_add_rmsnorm(float *d_x, const float *d_b, float scale, float *d_y,
                                             const float *d_w, int64_t n, int64_t T, float eps,
                                             void *stream) {
    return st_add_rmsnorm_go("st_cuda_add_rmsnorm", d_x, d_b, scale, d_y, d_w, n, T, eps, NULL, stream);
}

extern "C" strata_status st_cuda_add_rmsnorm_q8(float *d_x, const float *d_b, float scale, float *d_y,
                                                const float *d_w, int64_t n, int64_t T, float eps,
                                                void *d_q, void *stream) {
    if (!d_q) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_add_rmsnorm_q8: NULL q");
    return st_add_rmsnorm_go("st_cuda_add_rmsnorm_q8", d_x, d_b, scale, d_y, d_w, n, T, eps,
                             (block_q8_1 *)d_q, stream);
}

extern "C" strata_status st_cuda_add(float *d_y, const float *d_x, const float *d_b, float scale,
                                     int64_t n, void *stream) {
    static const char *fn = "st_cuda_add";
    if (n < 0) return st_error(STRATA_ERR_INVALID_ARG, "%s: n = %lld", fn, (long long)n);
    if (n == 0) return STRATA_OK;
    ST_TRY(st_check_ptrs(fn, d_y, "y", d_x, "x", d_b, "b"));
    ST_TRY(st_cuda_require(fn));
    st_launch(st_k_add, st_cuda_grid(n, ST_NORM_THREADS), ST_NORM_THREADS, 0, (cudaStream_t)stream, 
        d_y, d_x, d_b, scale, n);
    ST_CUDA_CHECK_LAUNCH("st_k_add");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_add_bias(float *d_y, int64_t ldy, const float *d_bias, int64_t n,
                                          int64_t T, void *stream) {
    static const char *fn = "st_cuda_add_bias";
    if (n < 0 || T < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: n = %lld, T = %lld", fn, (long long)n, (long long)T);
    if (n == 0 || T == 0) return STRATA_OK;
    if (ldy < n) return st_error(STRATA_ERR_INVALID_ARG, "%s: ldy %lld < n %lld", fn, (long long)ldy, (long long)n);
    ST_TRY(st_check_ptrs(fn, d_y, "y", d_bias, "bias", NULL, NULL));
    ST_TRY(st_cuda_require(fn));
    st_launch(st_k_add_bias, st_cuda_grid(n * T, ST_NORM_THREADS), ST_NORM_THREADS, 0, (cudaStream_t)stream, 
        d_y, ldy, d_bias, n, n * T);
    ST_CUDA_CHECK_LAUNCH("st_k_add_bias");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_swiglu(float *d_h, int64_t ldh, const float *d_g, int64_t ldg,
                                        const float *d_u, int64_t ldu, int64_t n, int64_t T,
                                        void *stream) {
    static const char *fn = "st_cuda_swiglu";
    if (n < 0 || T < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: n = %lld, T = %lld", fn, (long long)n, (long long)T);
    if (n == 0 || T == 0) return STRATA_OK;
    if (ldh < n || ldg < n || ldu < n)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: a row stride is below n = %lld", fn, (long long)n);
    ST_TRY(st_check_ptrs(fn, d_h, "h", d_g, "g", d_u, "u"));
    ST_TRY(st_cuda_require(fn));
    st_launch(st_k_swiglu, st_cuda_grid(n * T, ST_NORM_THREADS), ST_NORM_THREADS, 0, (cudaStream_t)stream, 
        d_h, ldh, d_g, ldg, d_u, ldu, n, n * T);
    ST_CUDA_CHECK_LAUNCH("st_k_swiglu");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_scale(float *d_y, const float *d_x, float s, int divide, int64_t n,
                                       void *stream) {
    static const char *fn = "st_cuda_scale";
    if (n < 0) return st_error(STRATA_ERR_INVALID_ARG, "%s: n = %lld", fn, (long long)n);
    if (n == 0) return STRATA_OK;
    ST_TRY(st_check_ptrs(fn, d_y, "y", d_x, "x", NULL, NULL));
    ST_TRY(st_cuda_require(fn));
    st_launch(st_k_scale, st_cuda_grid(n, ST_NORM_THREADS), ST_NORM_THREADS, 0, (cudaStream_t)stream, 
        d_y, d_x, s, divide ? 1 : 0, n);
    ST_CUDA_CHECK_LAUNCH("st_k_scale");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_sigmoid(float *d_y, const float *d_x, int64_t n, void *stream) {
    static const char *fn = "st_cuda_sigmoid";
    if (n < 0) return st_error(STRATA_ERR_INVALID_ARG, "%s: n = %lld", fn, (long long)n);
    if (n == 0) return STRATA_OK;
    ST_TRY(st_check_ptrs(fn, d_y, "y", d_x, "x", NULL, NULL));
    ST_TRY(st_cuda_require(fn));
    st_launch(st_k_sigmoid, st_cuda_grid(n, ST_NORM_THREADS), ST_NORM_THREADS, 0, (cudaStream_t)stream, 
        d_y, d_x, n);
    ST_CUDA_CHECK_LAUNCH("st_k_sigmoid");
    return STRATA_OK;
}
