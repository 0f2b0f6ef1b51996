/* mmq.cu - the prefill matrix family (cuda_mmq.h): the tensor-core tile kernel described in
 * mmq.cuh, its dense entry points (st_cuda_mmq, st_cuda_mmq_swiglu) and the grouped-expert path
 * of st_cuda_moe_ffn for large batches (plan on the device, gate/up tiles, down tiles).
 * Dispatch: st_mmq_launch over the weight type is the one switch. */
#include "mmq.cuh"
#include "cuda_mmq.h"

#include <mma.h>

using namespace nvcuda;

/* ---- one 32-weight chunk of a row as floats -------------------------------------------------- */

/* Types with a dp4a decoder (moe.cuh): weight 4i + b = s * q + m. */
template <class W>
struct st_mq_w32 {
    static constexpr int QK = W::QK;
    static __device__ __forceinline__ void chunk(const uint8_t *row, int64_t c, float v[32]) {
        st_w32 w;
        W::load(row, c, w);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float s = (!W::SPLIT || i < 4) ? w.s0 : w.s1;
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const float q = (float)(int8_t)(w.q[i] >> (8 * b));
                v[4 * i + b] = W::HAS_M ? fmaf(s, q, w.m) : s * q;
            }
        }
    }
};

/* The other types through their dequant.cuh decoders. */
template <class D>
struct st_mq_fb {
    static constexpr int QK = D::QK;
    static __device__ __forceinline__ void chunk(const uint8_t *row, int64_t c, float v[32]) {
        st_fb_chunk<D>(row, c, v);
    }
};

/* ---- activations: f32 rows -> f16 rows rounded as q8 ------------------------------------------ */

/* Each block of 32 values rounded as the GEMV's q8_1 (and the CPU's q8_0) rounds it: d = amax /
 * 127, q = round(x / d), value q * fp16(d), stored as f16 (exact: |q| <= 127 times an f16). The
 * tiles then carry the same activation rounding as the decode path and the CPU rather than a
 * different one (f16 alone is finer, but its errors do not cancel against theirs: on the default
 * model, mean KL GPU vs CPU 2.5e-4 with this rounding, 6.5e-4 with plain f16). One warp per block,
 * lane = value; rows of K (a multiple of 32) floats ldx apart -> rows of K halves, contiguous. */
static __global__ void __launch_bounds__(256)
st_k_mq_act(const float *__restrict__ x, int64_t ldx, int64_t rows, int64_t K, __half *__restrict__ xa) {
    const int64_t nb = K / 32, w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = (int)(threadIdx.x & 31);
    if (w >= rows * nb) return; /* whole warps */
    const int64_t r = w / nb, b = w - r * nb;
    const float v = x[r * ldx + 32 * b + lane];
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f, dh = __half2float(__float2half_rn(d));
    xa[r * K + 32 * b + lane] = __float2half_rn(amax == 0.0f ? 0.0f : roundf(v / d) * dh);
}

static strata_status st_mq_act(const float *x, int64_t ldx, int64_t rows, int64_t K, __half *xa, cudaStream_t s) {
    st_k_mq_act<<<st_cuda_grid(rows * (K / 32) * 32, 256), 256, 0, s>>>(x, ldx, rows, K, xa);
    ST_CUDA_CHECK_LAUNCH("st_k_mq_act");
    return STRATA_OK;
}

/* 32 floats -> 32 halves at a 16-byte aligned shared address. */
static __device__ __forceinline__ void st_mq_store32(__half *dst, const float v[32]) {
    uint4 *d = (uint4 *)dst;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        __half2 h[4];
#pragma unroll
        for (int q = 0; q < 4; q++) h[q] = __floats2half2_rn(v[8 * j + 2 * q], v[8 * j + 2 * q + 1]);
        uint4 u;
        u.x = *(const uint32_t *)&h[0];
        u.y = *(const uint32_t *)&h[1];
        u.z = *(const uint32_t *)&h[2];
        u.w = *(const uint32_t *)&h[3];
        d[j] = u;
    }
}

/* ---- the tile kernel ------------------------------------------------------------------------- */

template <class C, bool GLU>
static __global__ void __launch_bounds__(ST_MMQ_THREADS) st_k_mmq(const st_mmq_args a) {
    constexpr int LDS = ST_MMQ_LDS, LDC = ST_MMQ_LDC;
    __shared__ __align__(128) __half Xs[ST_MMQ_BM * LDS];     /* activations [row][k] */
    __shared__ __align__(128) __half Ws[ST_MMQ_BN * LDS];     /* weights [row][k] (gate) */
    __shared__ __align__(128) __half Us[GLU ? ST_MMQ_BN * LDS : 8]; /* up */
    __shared__ __align__(128) float Cs[ST_MMQ_BM * LDC];      /* results [act row][weight row] */

    int64_t start;
    int count;
    const uint8_t *w0, *w1 = NULL;
    size_t rb0, rb1 = 0;
    if (a.tiles) {
        if ((int)blockIdx.y >= *a.n_tiles) return;
        const st_mmq_tile t = a.tiles[blockIdx.y];
        start = t.start;
        count = t.count;
        const st_cuda_expert *ex = a.table + t.e;
        const st_cuda_mat *m0 = a.which == 2 ? &ex->down : &ex->gate;
        w0 = (const uint8_t *)m0->data;
        rb0 = m0->row_bytes;
        if (GLU) {
            w1 = (const uint8_t *)ex->up.data;
            rb1 = ex->up.row_bytes;
        }
    } else {
        start = (int64_t)blockIdx.y * ST_MMQ_BM;
        count = (int)min((int64_t)ST_MMQ_BM, a.T - start);
        w0 = a.w0;
        rb0 = a.rb0;
        w1 = a.w1;
        rb1 = a.rb1;
    }
    const int64_t r0 = (int64_t)blockIdx.x * ST_MMQ_BN;
    const int tid = (int)threadIdx.x, warp = tid >> 5;
    const int lr = tid >> 1, hf = tid & 1; /* this thread loads row lr, chunk hf of each step */

    const __half *xrow = NULL;
    if (lr < count) {
        const int64_t src = a.x_order ? (int64_t)(a.x_order[start + lr] / a.k_div) : start + lr;
        xrow = a.xa + src * a.lda;
    }
    const uint8_t *wrow0 = NULL, *wrow1 = NULL;
    if (r0 + lr < a.N) {
        wrow0 = w0 + (size_t)(r0 + lr) * rb0;
        if (GLU) wrow1 = w1 + (size_t)(r0 + lr) * rb1;
    }

    const int wm = warp >> 1, wn = warp & 1; /* this warp's 32 x 32 quarter */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2], accu[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            wmma::fill_fragment(acc[i][j], 0.0f);
            if (GLU) wmma::fill_fragment(accu[i][j], 0.0f);
        }

    const int64_t nch = a.K / 32;
    __half *xd = Xs + lr * LDS + hf * 32, *wd = Ws + lr * LDS + hf * 32, *ud = Us + (GLU ? lr * LDS + hf * 32 : 0);
    for (int64_t c0 = 0; c0 < nch; c0 += 2) {
        const int64_t c = c0 + hf;
        const bool in = c < nch;
        {
            const uint4 z = make_uint4(0u, 0u, 0u, 0u);
            const uint4 *p = (const uint4 *)(xrow + 32 * c);
#pragma unroll
            for (int j = 0; j < 4; j++) ((uint4 *)xd)[j] = xrow && in ? __ldg(p + j) : z;
        }
        float v[32];
        if (wrow0 && in) {
            C::chunk(wrow0, c, v);
        } else {
#pragma unroll
            for (int j = 0; j < 32; j++) v[j] = 0.0f;
        }
        st_mq_store32(wd, v);
        if (GLU) {
            if (wrow1 && in) {
                C::chunk(wrow1, c, v);
            } else {
#pragma unroll
                for (int j = 0; j < 32; j++) v[j] = 0.0f;
            }
            st_mq_store32(ud, v);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < ST_MMQ_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
#pragma unroll
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], Xs + (wm * 32 + 16 * i) * LDS + kk, LDS);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
                wmma::load_matrix_sync(fb, Ws + (wn * 32 + 16 * j) * LDS + kk, LDS);
#pragma unroll
                for (int i = 0; i < 2; i++) wmma::mma_sync(acc[i][j], fa[i], fb, acc[i][j]);
                if (GLU) {
                    wmma::load_matrix_sync(fb, Us + (wn * 32 + 16 * j) * LDS + kk, LDS);
#pragma unroll
                    for (int i = 0; i < 2; i++) wmma::mma_sync(accu[i][j], fa[i], fb, accu[i][j]);
                }
            }
        }
        __syncthreads();
    }

    /* epilogue: (silu(gate) * up), staged through shared memory, written within bounds */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            if (GLU)
                for (int e = 0; e < acc[i][j].num_elements; e++) {
                    const float g = acc[i][j].x[e];
                    acc[i][j].x[e] = g / (1.0f + expf(-g)) * accu[i][j].x[e];
                }
            wmma::store_matrix_sync(Cs + (wm * 32 + 16 * i) * LDC + wn * 32 + 16 * j, acc[i][j], LDC,
                                    wmma::mem_row_major);
        }
    __syncthreads();
    const int ncol = (int)min((int64_t)ST_MMQ_BN, a.N - r0);
    for (int idx = tid; idx < ST_MMQ_BM * ST_MMQ_BN; idx += ST_MMQ_THREADS) {
        const int i = idx / ST_MMQ_BN, col = idx - i * ST_MMQ_BN;
        if (i < count && col < ncol) {
            const int64_t orow = a.y_order ? (int64_t)a.y_order[start + i] : start + i;
            a.y[orow * a.ldy + r0 + col] = Cs[i * LDC + col];
        }
    }
}

/* ---- float weights: f32 tiles on the FMA units ----------------------------------------------- */

/* F32, F16 and BF16 weights keep f32 arithmetic (the GEMV's accuracy): a 64 x 64 tile, 256
 * threads of 4 x 4 outputs each, steps of 16 weights through shared memory, every output summed
 * over k in order with fmaf (deterministic). For the small float matrices of quantized models
 * (the router, (n_embd, n_expert)) and for float models. */
#define ST_MMF_BK 16

struct st_mmf_args {
    const uint8_t *w;
    size_t rb;
    int64_t N, K;
    const float *x;
    int64_t ldx, T;
    float *y;
    int64_t ldy;
};

template <class P>
static __global__ void __launch_bounds__(256) st_k_mmf(const st_mmf_args a) {
    __shared__ float Xs[ST_MMF_BK][64 + 4]; /* [k][activation row] */
    __shared__ float Ws[ST_MMF_BK][64 + 4]; /* [k][weight row] */
    const int tid = (int)threadIdx.x, ty = tid >> 4, tx = tid & 15;
    const int64_t t0 = (int64_t)blockIdx.y * 64, r0 = (int64_t)blockIdx.x * 64;
    const int lrow = tid >> 2, lk = (tid & 3) * 4; /* this thread loads 4 k of row lrow */
    const bool xin = t0 + lrow < a.T, win = r0 + lrow < a.N;
    const float *xr = a.x + (xin ? (t0 + lrow) * a.ldx : 0);
    const uint8_t *wr = a.w + (win ? (size_t)(r0 + lrow) * a.rb : 0);
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < a.K; k0 += ST_MMF_BK) {
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int64_t k = k0 + lk + q;
            Xs[lk + q][lrow] = xin && k < a.K ? xr[k] : 0.0f;
            Ws[lk + q][lrow] = win && k < a.K ? P::one(wr + k * P::BYTES) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < ST_MMF_BK; kk++) {
            float xv[4], wv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                xv[i] = Xs[kk][ty * 4 + i];
                wv[i] = Ws[kk][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(xv[i], wv[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t t = t0 + ty * 4 + i, r = r0 + tx * 4 + j;
            if (t < a.T && r < a.N) a.y[t * a.ldy + r] = acc[i][j];
        }
}

/* ---- dispatch -------------------------------------------------------------------------------- */

template <class C, bool GLU>
static strata_status st_mmq_go(const st_mmq_args &a, dim3 grid, cudaStream_t s) {
    st_k_mmq<C, GLU><<<grid, ST_MMQ_THREADS, 0, s>>>(a);
    ST_CUDA_CHECK_LAUNCH(GLU ? "st_k_mmq (glu)" : "st_k_mmq");
    return STRATA_OK;
}

/* The one switch over quantized weight types. */
template <bool GLU>
static strata_status st_mmq_launch(strata_type type, const st_mmq_args &a, dim3 grid, cudaStream_t s) {
    switch (type) {
    case STRATA_TYPE_Q4_0: return st_mmq_go<st_mq_w32<st_w_q4_0>, GLU>(a, grid, s);
    case STRATA_TYPE_Q8_0: return st_mmq_go<st_mq_w32<st_w_q8_0>, GLU>(a, grid, s);
    case STRATA_TYPE_Q4_K: return st_mmq_go<st_mq_w32<st_w_q4_K>, GLU>(a, grid, s);
    case STRATA_TYPE_Q5_K: return st_mmq_go<st_mq_w32<st_w_q5_K>, GLU>(a, grid, s);
    case STRATA_TYPE_Q6_K: return st_mmq_go<st_mq_w32<st_w_q6_K>, GLU>(a, grid, s);
    case STRATA_TYPE_Q4_1: return st_mmq_go<st_mq_fb<st_dq_q4_1>, GLU>(a, grid, s);
    case STRATA_TYPE_Q5_0: return st_mmq_go<st_mq_fb<st_dq_q5_0>, GLU>(a, grid, s);
    case STRATA_TYPE_Q5_1: return st_mmq_go<st_mq_fb<st_dq_q5_1>, GLU>(a, grid, s);
    case STRATA_TYPE_IQ4_NL: return st_mmq_go<st_mq_fb<st_dq_iq4_nl>, GLU>(a, grid, s);
    case STRATA_TYPE_Q2_K: return st_mmq_go<st_mq_fb<st_dq_q2_K>, GLU>(a, grid, s);
    case STRATA_TYPE_Q3_K: return st_mmq_go<st_mq_fb<st_dq_q3_K>, GLU>(a, grid, s);
    default: break;
    }
    return st_error(STRATA_ERR_UNSUPPORTED, "st_k_mmq: type %s has no tile kernel", strata_type_name(type));
}

template <class P>
static strata_status st_mmf_go(const st_mmf_args &a, cudaStream_t s) {
    const dim3 grid((unsigned)((a.N + 63) / 64), (unsigned)((a.T + 63) / 64));
    st_k_mmf<P><<<grid, 256, 0, s>>>(a);
    ST_CUDA_CHECK_LAUNCH("st_k_mmf");
    return STRATA_OK;
}

static int st_mmq_is_float(strata_type type) {
    return type == STRATA_TYPE_F32 || type == STRATA_TYPE_F16 || type == STRATA_TYPE_BF16;
}

extern "C" int st_cuda_moe_type_tiles(strata_type type) {
    switch (type) {
    case STRATA_TYPE_Q4_0: case STRATA_TYPE_Q8_0: case STRATA_TYPE_Q4_K: case STRATA_TYPE_Q5_K:
    case STRATA_TYPE_Q6_K: case STRATA_TYPE_Q4_1: case STRATA_TYPE_Q5_0: case STRATA_TYPE_Q5_1:
    case STRATA_TYPE_IQ4_NL: case STRATA_TYPE_Q2_K: case STRATA_TYPE_Q3_K:
        return 1;
    default:
        return 0;
    }
}

extern "C" int st_cuda_mmq_supports(strata_type type) {
    return st_cuda_moe_type_tiles(type) || st_mmq_is_float(type);
}

/* ---- dense entry points ---------------------------------------------------------------------- */

static size_t st_mmq_al(size_t n) { return (n + 255) & ~(size_t)255; }

extern "C" size_t st_cuda_mmq_scratch_bytes(int64_t ne0, int64_t T) {
    if (ne0 < 1 || T < 1) return 0;
    return st_mmq_al((size_t)ne0 * (size_t)T * sizeof(__half));
}

static strata_status st_mmq_check_mat(const char *fn, const st_cuda_mat *W) {
    if (!W || !W->data) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL matrix", fn);
    if (!st_cuda_mmq_supports(W->type))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: type %s has no tile kernel", fn,
                        strata_type_name(W->type));
    if (st_mmq_is_float(W->type)) {
        const size_t el = W->type == STRATA_TYPE_F32 ? 4 : 2;
        if (W->ne0 < 1 || W->ne1 < 1 || W->row_bytes < el * (size_t)W->ne0 || W->row_bytes % el ||
            ((uintptr_t)W->data % el))
            return st_error(STRATA_ERR_INVALID_ARG, "%s: %s matrix %lld x %lld, row_bytes %zu", fn,
                            strata_type_name(W->type), (long long)W->ne1, (long long)W->ne0, W->row_bytes);
        return STRATA_OK;
    }
    const int64_t qk = strata_type_block_size(W->type);
    if (W->ne0 < 32 || W->ne0 % 32 || qk < 1 || W->ne0 % qk || W->ne1 < 1 ||
        W->row_bytes < (size_t)strata_row_bytes(W->type, W->ne0) || (W->row_bytes & 1) ||
        ((uintptr_t)W->data & 1))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: %s matrix %lld x %lld, row_bytes %zu (ne0 a "
                        "multiple of 32 and of the block size, even row bytes and address)", fn,
                        strata_type_name(W->type), (long long)W->ne1, (long long)W->ne0, W->row_bytes);
    return STRATA_OK;
}

static strata_status st_mmq_dense(const char *fn, const st_cuda_mat *Wg, const st_cuda_mat *Wu,
                                  const float *d_x, int64_t ldx, int64_t T, float *d_y,
                                  int64_t ldy, void *d_scratch, void *stream) {
    ST_TRY(st_mmq_check_mat(fn, Wg));
    const int flt = st_mmq_is_float(Wg->type);
    if (Wu) {
        ST_TRY(st_mmq_check_mat(fn, Wu));
        if (Wu->type != Wg->type || Wu->ne0 != Wg->ne0 || Wu->ne1 != Wg->ne1 || flt)
            return st_error(STRATA_ERR_INVALID_ARG, "%s: gate and up differ in type or shape, or are "
                            "float (SwiGLU tiles take quantized types)", fn);
    }
    if (T < 1 || T > (int64_t)65535 * ST_MMQ_BM || ldx < Wg->ne0 || ldy < Wg->ne1 || !d_x || !d_y ||
        ((uintptr_t)d_x & 3) || ((uintptr_t)d_y & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld, ldx %lld, ldy %lld (T >= 1, ldx >= ne0, "
                        "ldy >= ne1, 4-byte aligned x and y)", fn, (long long)T, (long long)ldx,
                        (long long)ldy);
    if (!flt && (!d_scratch || ((uintptr_t)d_scratch & 15)))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: scratch NULL or not 16-byte aligned", fn);
    ST_TRY(st_cuda_require(fn));
    cudaStream_t s = (cudaStream_t)stream;
    if (flt) {
        st_mmf_args f;
        f.w = (const uint8_t *)Wg->data;
        f.rb = Wg->row_bytes;
        f.N = Wg->ne1;
        f.K = Wg->ne0;
        f.x = d_x;
        f.ldx = ldx;
        f.T = T;
        f.y = d_y;
        f.ldy = ldy;
        if (Wg->type == STRATA_TYPE_F32) return st_mmf_go<st_dq_f32>(f, s);
        if (Wg->type == STRATA_TYPE_F16) return st_mmf_go<st_dq_f16>(f, s);
        return st_mmf_go<st_dq_bf16>(f, s);
    }
    __half *xa = (__half *)d_scratch;
    ST_TRY(st_mq_act(d_x, ldx, T, Wg->ne0, xa, s));
    st_mmq_args a;
    memset(&a, 0, sizeof a);
    a.w0 = (const uint8_t *)Wg->data;
    a.rb0 = Wg->row_bytes;
    if (Wu) {
        a.w1 = (const uint8_t *)Wu->data;
        a.rb1 = Wu->row_bytes;
    }
    a.N = Wg->ne1;
    a.K = Wg->ne0;
    a.xa = xa;
    a.lda = Wg->ne0;
    a.k_div = 1;
    a.T = T;
    a.y = d_y;
    a.ldy = ldy;
    const dim3 grid((unsigned)((a.N + ST_MMQ_BN - 1) / ST_MMQ_BN), (unsigned)((T + ST_MMQ_BM - 1) / ST_MMQ_BM));
    return Wu ? st_mmq_launch<true>(Wg->type, a, grid, s) : st_mmq_launch<false>(Wg->type, a, grid, s);
}

extern "C" strata_status st_cuda_mmq(const st_cuda_mat *W, const float *d_x, int64_t ldx, int64_t T,
                                     float *d_y, int64_t ldy, void *d_scratch, void *stream) {
    return st_mmq_dense("st_cuda_mmq", W, NULL, d_x, ldx, T, d_y, ldy, d_scratch, stream);
}

extern "C" strata_status st_cuda_mmq_swiglu(const st_cuda_mat *Wg, const st_cuda_mat *Wu,
                                            const float *d_x, int64_t ldx, int64_t T, float *d_y,
                                            int64_t ldy, void *d_scratch, void *stream) {
    if (!Wu) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_mmq_swiglu: NULL up matrix");
    return st_mmq_dense("st_cuda_mmq_swiglu", Wg, Wu, d_x, ldx, T, d_y, ldy, d_scratch, stream);
}

/* ---- grouped experts ------------------------------------------------------------------------- */

/* One block: pairs (t * k + s) with valid ids sorted by (expert, pair) into order, and the tile
 * list (expert, first sorted index, count <= 64) in expert order. Each warp ranks the pairs of
 * its experts with ballots over the id list, so the order is fixed. Pairs with ids outside
 * [0, X) are left out (they contribute 0). Shared memory: 3 X ints. */
static __global__ void __launch_bounds__(1024)
st_k_mmq_plan(const int32_t *__restrict__ ids, int P, int X, int32_t *__restrict__ order,
              st_mmq_tile *__restrict__ tiles, int32_t *__restrict__ n_tiles) {
    extern __shared__ int st_mmq_plan_smem[];
    int *cnt = st_mmq_plan_smem, *off = cnt + X, *toff = off + X;
    for (int e = (int)threadIdx.x; e < X; e += (int)blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int p = (int)threadIdx.x; p < P; p += (int)blockDim.x) {
        const int e = __ldg(ids + p);
        if (e >= 0 && e < X) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int o = 0, to = 0;
        for (int e = 0; e < X; e++) {
            off[e] = o;
            toff[e] = to;
            o += cnt[e];
            to += (cnt[e] + ST_MMQ_BM - 1) / ST_MMQ_BM;
        }
        *n_tiles = to;
    }
    __syncthreads();
    const int lane = (int)(threadIdx.x & 31), nw = (int)(blockDim.x >> 5);
    for (int e = (int)(threadIdx.x >> 5); e < X; e += nw) {
        const int n = cnt[e];
        if (n == 0) continue;
        int base = off[e];
        for (int p0 = 0; p0 < P; p0 += 32) {
            const int p = p0 + lane;
            const bool m = p < P && __ldg(ids + p) == e;
            const unsigned b = __ballot_sync(0xffffffffu, m);
            if (m) order[base + __popc(b & ((1u << lane) - 1u))] = p;
            base += __popc(b);
        }
        for (int i = lane; i * ST_MMQ_BM < n; i += 32) {
            st_mmq_tile t;
            t.e = e;
            t.start = off[e] + i * ST_MMQ_BM;
            t.count = min(ST_MMQ_BM, n - i * ST_MMQ_BM);
            t.pad = 0;
            tiles[toff[e] + i] = t;
        }
    }
}

struct st_mmq_ws {
    int32_t *n_tiles;
    st_mmq_tile *tiles;   /* [P + P / 64 + 1] at most */
    int32_t *order;       /* [P] */
    __half *xa;           /* [T][n_embd] rounded activations */
    float *h;             /* [P][n_ff], sorted rows */
    __half *ha;           /* [P][n_ff] h rounded */
    float *y;             /* [P][n_embd], pair rows */
    size_t bytes;
};

static st_mmq_ws st_mmq_ws_layout(uint8_t *base, int64_t T, int32_t k, int64_t n_embd, int64_t n_ff) {
    const size_t P = (size_t)T * (size_t)k;
    st_mmq_ws w;
    size_t o = 0;
    w.n_tiles = (int32_t *)(base + o);       o += st_mmq_al(sizeof(int32_t));
    w.tiles = (st_mmq_tile *)(base + o);     o += st_mmq_al((P + P / ST_MMQ_BM + 1) * sizeof(st_mmq_tile));
    w.order = (int32_t *)(base + o);         o += st_mmq_al(P * sizeof(int32_t));
    w.xa = (__half *)(base + o);             o += st_mmq_al((size_t)T * (size_t)n_embd * sizeof(__half));
    w.h = (float *)(base + o);               o += st_mmq_al(P * (size_t)n_ff * sizeof(float));
    w.ha = (__half *)(base + o);             o += st_mmq_al(P * (size_t)n_ff * sizeof(__half));
    w.y = (float *)(base + o);               o += st_mmq_al(P * (size_t)n_embd * sizeof(float));
    w.bytes = o;
    return w;
}

size_t st_moe_mmq_wsize(int64_t T, int32_t k, int64_t n_embd, int64_t n_ff) {
    return st_mmq_ws_layout(NULL, T, k, n_embd, n_ff).bytes;
}

int st_moe_mmq_wanted(const st_cuda_moe_args *a) {
    if (!st_cuda_moe_type_tiles(a->type_gate) || !st_cuda_moe_type_tiles(a->type_down)) return 0;
    if (a->n_expert > 4096) return 0;
    const int64_t P = a->T * (int64_t)a->k;
    return P > 1024 || (a->T >= ST_CUDA_MMQ_MIN_ROWS && P >= 4 * (int64_t)a->n_expert);
}

strata_status st_moe_mmq_ffn(const st_cuda_moe_args *a, cudaStream_t s, const float **y_pairs) {
    const int P = (int)(a->T * a->k);
    const st_mmq_ws w = st_mmq_ws_layout((uint8_t *)a->ws, a->T, a->k, a->n_embd, a->n_ff);
    const int64_t max_tiles = (int64_t)P / ST_MMQ_BM + (P < a->n_expert ? P : a->n_expert) + 1;
    st_k_mmq_plan<<<1, 1024, (size_t)(3 * a->n_expert) * sizeof(int), s>>>(
        a->ids, P, a->n_expert, w.order, w.tiles, w.n_tiles);
    ST_CUDA_CHECK_LAUNCH("st_k_mmq_plan");

    ST_TRY(st_mq_act(a->x, a->n_embd, a->T, a->n_embd, w.xa, s));
    st_mmq_args g;
    memset(&g, 0, sizeof g);
    g.table = a->experts;
    g.which = 0;
    g.N = a->n_ff;
    g.K = a->n_embd;
    g.xa = w.xa;
    g.lda = a->n_embd;
    g.x_order = w.order;
    g.k_div = a->k;
    g.tiles = w.tiles;
    g.n_tiles = w.n_tiles;
    g.y = w.h;
    g.ldy = a->n_ff;
    ST_TRY(st_mmq_launch<true>(a->type_gate, g,
                               dim3((unsigned)((a->n_ff + ST_MMQ_BN - 1) / ST_MMQ_BN), (unsigned)max_tiles), s));

    ST_TRY(st_mq_act(w.h, a->n_ff, P, a->n_ff, w.ha, s));
    st_mmq_args d = g;
    d.which = 2;
    d.N = a->n_embd;
    d.K = a->n_ff;
    d.xa = w.ha;
    d.lda = a->n_ff;
    d.x_order = NULL;
    d.k_div = 1;
    d.y_order = w.order;
    d.y = w.y;
    d.ldy = a->n_embd;
    ST_TRY(st_mmq_launch<false>(a->type_down, d,
                                dim3((unsigned)((a->n_embd + ST_MMQ_BN - 1) / ST_MMQ_BN), (unsigned)max_tiles), s));
    *y_pairs = w.y;
    return STRATA_OK;
}
