/* deltanet.cu - the GPU kernels of qwen3next's gated DeltaNet layers and of its gated attention's
 * two extra steps (cuda_deltanet.h; geometry in deltanet.cuh): the causal conv with SiLU and its
 * state, the gated delta rule with the token loop inside the kernel, the gated RMSNorm, the
 * query/gate split and the sigmoid gate. The conv and the norms keep the CPU's operations
 * (products and sums rounded one by one, the norms' sums of squares in double); the delta rule's
 * dot products may fuse (other arithmetic, the same function). */
#include "deltanet.cuh"

#include <math.h>

/* ---- kernels -------------------------------------------------------------------------------- */

template <int K>
static __global__ void __launch_bounds__(ST_GDN_CONV_THREADS)
st_k_gdn_conv(const float *w, float *state, const float *x, int64_t ldx, float *y, int64_t T, int64_t C,
              float *hist, const int32_t *hrow) {
    st_pdl_enter();
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float win[K], wc[K]; /* win[0..K-2]: the inputs before the token, oldest first */
#pragma unroll
    for (int j = 0; j < K; j++) {
        wc[j] = w[c * K + j];
        win[j] = j < K - 1 ? state[j * C + c] : 0.0f;
    }
    const int hr = hist ? *hrow : -1;
    for (int64_t t = 0; t < T; t++) {
        const float xv = x[t * ldx + c];
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < K - 1; j++) acc = __fadd_rn(acc, __fmul_rn(wc[j], win[j]));
        acc = __fadd_rn(acc, __fmul_rn(wc[K - 1], xv));
        y[t * C + c] = __fdiv_rn(acc, __fadd_rn(1.0f, expf(-acc)));
#pragma unroll
        for (int j = 0; j + 1 < K - 1; j++) win[j] = win[j + 1];
        if (K > 1) win[K > 1 ? K - 2 : 0] = xv;
        if (hr >= 0) hist[(hr + t) * C + c] = xv;
    }
#pragma unroll
    for (int j = 0; j < K - 1; j++) state[j * C + c] = win[j];
}

/* the sum of a double over the warp, every lane the same value (a fixed butterfly) */
static __device__ __forceinline__ double st_gdn_warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int D>
static __global__ void __launch_bounds__(32)
st_k_gdn_rule(const float *y, const float *ba, int64_t ldba, const float *A, const float *dt, float *state,
              float *out, int64_t T, int nk, int nv, float eps, float *hist, const int32_t *hrow) {
    st_pdl_enter();
    constexpr int R = ST_GDN_ROWS(D), P = D / R, NC = 32 / P; /* rows a lane, lanes a column, columns */
    __shared__ float sq[D], sk[D];
    const int h = blockIdx.x, lane = threadIdx.x, part = lane / NC, j = blockIdx.y * NC + lane % NC;
    const int i0 = part * R;
    const bool col = j < D;
    const int per = nv / nk, kh = h / per, hi = h - kh * per;
    const int64_t C = (int64_t)(2 * nk + nv) * D;
    float *Sh = state + (int64_t)h * D * D;
    float S[R];
#pragma unroll
    for (int i = 0; i < R; i++) S[i] = col ? Sh[(i0 + i) * D + j] : 0.0f;
    const float Ah = A[h], dth = dt[h], qscale = 1.0f / sqrtf((float)D);
    const int hr = hist ? *hrow : -1;
    const bool copier = hr >= 0 && h == 0 && blockIdx.y == 0; /* one block copies ba's rows */
    for (int64_t t = 0; t < T; t++) {
        const float *row = y + t * C;
        const float *qr = row + kh * D, *kr = row + (int64_t)nk * D + kh * D;
        double q2 = 0.0, k2 = 0.0;
        for (int i = lane; i < D; i += 32) {
            const double a = qr[i], b = kr[i];
            q2 += a * a;
            k2 += b * b;
        }
        q2 = st_gdn_warp_sum(q2);
        k2 = st_gdn_warp_sum(k2);
        const float qs = 1.0f / sqrtf((float)q2 + eps), ks = 1.0f / sqrtf((float)k2 + eps);
        __syncwarp(); /* the previous token's reads of sq, sk are done */
        for (int i = lane; i < D; i += 32) {
            sq[i] = __fmul_rn(__fmul_rn(qr[i], qs), qscale);
            sk[i] = __fmul_rn(kr[i], ks);
        }
        __syncwarp();
        const float *bar = ba + t * ldba;
        if (copier)
            for (int i = lane; i < 2 * nv; i += 32) hist[(hr + t) * 2 * nv + i] = bar[i];
        const float b = bar[kh * 2 * per + hi], a = __fadd_rn(bar[kh * 2 * per + per + hi], dth);
        const float g = __fmul_rn(Ah, a > 20.0f ? a : log1pf(expf(a)));
        const float beta = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-b))), decay = expf(g);
        const float v = col ? row[(int64_t)2 * nk * D + h * D + j] : 0.0f;
        float dl = 0.0f;
#pragma unroll
        for (int i = 0; i < R; i++) {
            S[i] *= decay;
            dl = fmaf(S[i], sk[i0 + i], dl);
        }
        if (P == 2) dl += __shfl_xor_sync(0xffffffffu, dl, 16); /* a + b on both lanes: the same bits */
        dl = (v - dl) * beta;
        float o = 0.0f;
#pragma unroll
        for (int i = 0; i < R; i++) {
            S[i] = fmaf(sk[i0 + i], dl, S[i]);
            o = fmaf(S[i], sq[i0 + i], o);
        }
        if (P == 2) o += __shfl_xor_sync(0xffffffffu, o, 16);
        if (col && part == 0) out[t * (int64_t)nv * D + h * D + j] = o;
    }
    if (col) {
#pragma unroll
        for (int i = 0; i < R; i++) Sh[(i0 + i) * D + j] = S[i];
    }
}

/* one warp per (token, head) row of d values */
static __global__ void __launch_bounds__(ST_GDN_NORM_THREADS)
st_k_gdn_norm(float *x, const float *z, const float *w, int64_t rows, int64_t d, float eps) {
    st_pdl_enter();
    const int64_t r = (int64_t)blockIdx.x * (ST_GDN_NORM_THREADS / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    float *xr = x + r * d;
    const float *zr = z + r * d;
    double sum = 0.0;
    for (int64_t i = lane; i < d; i += 32) sum += (double)xr[i] * (double)xr[i];
    sum = st_gdn_warp_sum(sum);
    const float scale = 1.0f / sqrtf((float)(sum / (double)d) + eps);
    for (int64_t i = lane; i < d; i += 32) {
        const float v = __fmul_rn(__fmul_rn(xr[i], scale), w[i]), zi = zr[i];
        xr[i] = __fmul_rn(v, __fdiv_rn(zi, __fadd_rn(1.0f, expf(-zi))));
    }
}

static __global__ void __launch_bounds__(256)
st_k_qgate_split(const float *qg, float *q, float *gate, int64_t hd, int64_t total) {
    st_pdl_enter();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t r = i / hd, e = i - r * hd; /* r: (token, head) */
        q[i] = qg[2 * r * hd + e];
        gate[i] = qg[2 * r * hd + hd + e];
    }
}

static __global__ void __launch_bounds__(256)
st_k_mul_sigmoid(float *y, const float *gate, int64_t n) {
    st_pdl_enter();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = __fmul_rn(y[i], __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-gate[i]))));
}

/* ---- entry points --------------------------------------------------------------------------- */

static bool st_gdn_bad(const void *p) { return !p || ((uintptr_t)p & 3); }

extern "C" int st_cuda_gdn_supports(const st_cuda_gdn_shape *s) {
    if (!s || s->nk < 1 || s->nv < 1 || s->nv % s->nk || s->K < 1 || s->K > ST_GDN_KMAX) return 0;
    return s->d == 16 || s->d == 32 || s->d == 64 || s->d == 128;
}

static strata_status st_gdn_check(const char *fn, const st_cuda_gdn_shape *s, int64_t T) {
    if (!st_cuda_gdn_supports(s))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: shape nk %d, nv %d, d %d, K %d (d in 16/32/64/128, K "
                        "1..%d, nv a multiple of nk)", fn, s ? (int)s->nk : 0, s ? (int)s->nv : 0,
                        s ? (int)s->d : 0, s ? (int)s->K : 0, ST_GDN_KMAX);
    if (T < 0) return st_error(STRATA_ERR_INVALID_ARG, "%s: T = %lld", fn, (long long)T);
    return STRATA_OK;
}

extern "C" strata_status st_cuda_gdn_conv(const st_cuda_gdn_shape *s, const float *d_w, float *d_state,
                                          const float *d_x, int64_t ldx, float *d_y, int64_t T, float *d_hist,
                                          const int32_t *d_hrow, void *stream) {
    static const char *fn = "st_cuda_gdn_conv";
    ST_TRY(st_gdn_check(fn, s, T));
    if (T == 0) return STRATA_OK;
    const int64_t C = (int64_t)(2 * s->nk + s->nv) * s->d;
    if (st_gdn_bad(d_w) || (s->K > 1 && st_gdn_bad(d_state)) || st_gdn_bad(d_x) || st_gdn_bad(d_y) || ldx < C ||
        (d_hist && (st_gdn_bad(d_hist) || st_gdn_bad(d_hrow))))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: a NULL or misaligned pointer, or ldx %lld < C %lld", fn,
                        (long long)ldx, (long long)C);
    ST_TRY(st_cuda_require(fn));
    const dim3 grid(st_cuda_grid(C, ST_GDN_CONV_THREADS));
    cudaStream_t cs = (cudaStream_t)stream;
#define ST_GDN_CONV(k) case k: st_launch(st_k_gdn_conv<k>, grid, ST_GDN_CONV_THREADS, 0, cs, d_w, d_state, d_x, \
                                         ldx, d_y, T, C, d_hist, d_hrow); break
    switch (s->K) {
    ST_GDN_CONV(1); ST_GDN_CONV(2); ST_GDN_CONV(3); ST_GDN_CONV(4);
    ST_GDN_CONV(5); ST_GDN_CONV(6); ST_GDN_CONV(7); ST_GDN_CONV(8);
    }
#undef ST_GDN_CONV
    ST_CUDA_CHECK_LAUNCH("st_k_gdn_conv");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_gdn_rule(const st_cuda_gdn_shape *s, const float *d_y, const float *d_ba,
                                          int64_t ldba, const float *d_A, const float *d_dt, float *d_state,
                                          float *d_out, int64_t T, float *d_hist, const int32_t *d_hrow,
                                          void *stream) {
    static const char *fn = "st_cuda_gdn_rule";
    ST_TRY(st_gdn_check(fn, s, T));
    if (T == 0) return STRATA_OK;
    if (st_gdn_bad(d_y) || st_gdn_bad(d_ba) || st_gdn_bad(d_A) || st_gdn_bad(d_dt) || st_gdn_bad(d_state) ||
        st_gdn_bad(d_out) || ldba < 2 * (int64_t)s->nv || (d_hist && (st_gdn_bad(d_hist) || st_gdn_bad(d_hrow))))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: a NULL or misaligned pointer, or ldba %lld < 2 nv", fn,
                        (long long)ldba);
    ST_TRY(st_cuda_require(fn));
    const int nc = 32 / (s->d / ST_GDN_ROWS(s->d)); /* columns per block */
    const dim3 grid((unsigned)s->nv, (unsigned)((s->d + nc - 1) / nc));
    cudaStream_t cs = (cudaStream_t)stream;
#define ST_GDN_RULE(dd) case dd: st_launch(st_k_gdn_rule<dd>, grid, 32, 0, cs, d_y, d_ba, ldba, d_A, d_dt, \
                                           d_state, d_out, T, (int)s->nk, (int)s->nv, s->eps, d_hist, d_hrow); break
    switch (s->d) {
    ST_GDN_RULE(16); ST_GDN_RULE(32); ST_GDN_RULE(64); ST_GDN_RULE(128);
    }
#undef ST_GDN_RULE
    ST_CUDA_CHECK_LAUNCH("st_k_gdn_rule");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_gdn_norm(float *d_x, const float *d_z, const float *d_w, int64_t nv, int64_t d,
                                          int64_t T, float eps, void *stream) {
    static const char *fn = "st_cuda_gdn_norm";
    if (nv < 1 || d < 1 || T < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: nv %lld, d %lld, T %lld", fn, (long long)nv, (long long)d,
                        (long long)T);
    if (T == 0) return STRATA_OK;
    if (st_gdn_bad(d_x) || st_gdn_bad(d_z) || st_gdn_bad(d_w))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: a NULL or misaligned pointer", fn);
    ST_TRY(st_cuda_require(fn));
    const int64_t rows = T * nv;
    st_launch(st_k_gdn_norm, st_cuda_grid(rows, ST_GDN_NORM_THREADS / 32), ST_GDN_NORM_THREADS, 0,
              (cudaStream_t)stream, d_x, d_z, d_w, rows, d, eps);
    ST_CUDA_CHECK_LAUNCH("st_k_gdn_norm");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_qgate_split(const float *d_qg, float *d_q, float *d_gate, int64_t n_head,
                                             int64_t hd, int64_t T, void *stream) {
    static const char *fn = "st_cuda_qgate_split";
    if (n_head < 1 || hd < 1 || T < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: n_head %lld, hd %lld, T %lld", fn, (long long)n_head,
                        (long long)hd, (long long)T);
    if (T == 0) return STRATA_OK;
    if (st_gdn_bad(d_qg) || st_gdn_bad(d_q) || st_gdn_bad(d_gate))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: a NULL or misaligned pointer", fn);
    ST_TRY(st_cuda_require(fn));
    const int64_t total = T * n_head * hd;
    st_launch(st_k_qgate_split, st_cuda_grid(total, 256), 256, 0, (cudaStream_t)stream, d_qg, d_q, d_gate, hd,
              total);
    ST_CUDA_CHECK_LAUNCH("st_k_qgate_split");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_mul_sigmoid(float *d_y, const float *d_gate, int64_t n, void *stream) {
    static const char *fn = "st_cuda_mul_sigmoid";
    if (n < 0) return st_error(STRATA_ERR_INVALID_ARG, "%s: n = %lld", fn, (long long)n);
    if (n == 0) return STRATA_OK;
    if (st_gdn_bad(d_y) || st_gdn_bad(d_gate))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: a NULL or misaligned pointer", fn);
    ST_TRY(st_cuda_require(fn));
    st_launch(st_k_mul_sigmoid, st_cuda_grid(n, 256), 256, 0, (cudaStream_t)stream, d_y, d_gate, n);
    ST_CUDA_CHECK_LAUNCH("st_k_mul_sigmoid");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_copy_d2d(void *d_dst, const void *d_src, size_t bytes, void *stream) {
    if (bytes == 0) return STRATA_OK;
    if (!d_dst || !d_src) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_copy_d2d: NULL pointer");
    ST_CUDA_CHECK(cudaMemcpyAsync(d_dst, d_src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
    return STRATA_OK;
}
