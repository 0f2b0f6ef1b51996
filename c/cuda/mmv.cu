/* mmv.cu - the decode GEMV: y = W x for 1..8 activation columns, and the fused gate/up/SwiGLU
 * variant (entry points: cuda_mmv.h; device pieces and the scheme: mmv.cuh).
 *
 * Launch shape: one warp per output row, ST_MMV_WARPS rows per CTA, grid = ceil(ne1 / warps);
 * each warp reads its row's weights once for all columns. One kernel per (type, ncols = 1..8):
 * 184 kernels, the longest nvcc object of the library (the device code also accepts ncols < NC,
 * skipping columns, should the count ever need trimming).
 * The fused variant has the warp do the gate row and the up row, then silu(g) * u. Float weights
 * with fewer than ST_MMV_SPLIT_ROWS rows (the router) take a block of 8 warps per row instead. */
#include "iq_decode.cuh"
#include "mma.cuh"
#include "q8_sm60.cuh"
#include "cuda_mmv.h"

extern "C" {
#include "quant.h"
}

#include <string.h>
#include <type_traits>

#define ST_MMV_WARPS 4

/* ---- kernels -------------------------------------------------------------------------------- */

/* Writes the reduced results of this warp's row; w1 set: out = silu(a) * b. */
template <int NC>
static __device__ __forceinline__ void st_mmv_store(float a[NC], float b[NC], bool fused,
                                                    int ncols, int lane, int row, int nrows,
                                                    float *__restrict__ y) {
#pragma unroll
    for (int c = 0; c < NC; c++) {
        if (c < ncols) {
            const float s = st_mmv_warp_sum(a[c]);
            float out = s;
            if (fused) out = st_mmv_silu(s) * st_mmv_warp_sum(b[c]);
            if (lane == c) y[(int64_t)c * nrows + row] = out;
        }
    }
}

/* Quantized weights. w1 == NULL: y = W0 x; else y = silu(W0 x) * (W1 x). */
template <class T, int NC>
static __global__ void __launch_bounds__(ST_MMV_WARPS * 32)
st_k_mmv_q(const uint8_t *__restrict__ w0, size_t rb0, const uint8_t *__restrict__ w1, size_t rb1,
           int nrows, int nsub, const block_q8_1 *__restrict__ xq, int ncols, float *__restrict__ y) {
    st_pdl_enter();
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * ST_MMV_WARPS + (threadIdx.x >> 5);
    if (row >= nrows) return; /* whole warps; no block-level barrier below */
    float a[NC], b[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) a[c] = b[c] = 0.0f;
    st_mmv_row_q<T, NC>(w0 + (size_t)row * rb0, nsub, xq, ncols, lane, a);
    if (w1) st_mmv_row_q<T, NC>(w1 + (size_t)row * rb1, nsub, xq, ncols, lane, b);
    st_mmv_store<NC>(a, b, w1 != nullptr, ncols, lane, row, nrows, y);
}

/* ---- Q8_0 rows through shared memory ---------------------------------------------------------
 * Q8_0's 34-byte blocks are 2-byte aligned, so st_k_mmv_q reads them with 16-bit loads, each warp
 * instruction spanning ~9 cache lines for 64 useful bytes; the activation's 36-byte blocks the
 * same way. That is L1-bound (7 us for the qwen3 QKV's 11 MB, ~1.6 TB/s). Here each warp copies
 * its row with coalesced 16-byte cp.async copies into shared memory (the whole row when it has at most
 * 128 blocks, else 64-block pieces), the block copies the activation columns likewise, and the
 * lanes decode from shared memory: the same sub-blocks per lane in the same order, the same
 * arithmetic as st_k_mmv_q (the same bits; test_cuda_mmv compares the two). The first piece is
 * read before griddepcontrol.wait: dense weights are never written by the kernels this one
 * waits for, so their fetch overlaps the previous kernel (the residual norm before the QKV).
 * Needs rows 16-byte aligned (row_bytes % 16 == 0) and the smem below 48 KiB; else st_k_mmv_q. */
#define ST_MMV8_WARPS 8
#define ST_MMV8_WHOLE 128 /* rows of up to this many blocks are staged whole */
#define ST_MMV8_PIECE 64  /* longer rows: pieces of this many blocks */
#ifndef ST_MMV_Q8_SMEM
#define ST_MMV_Q8_SMEM 1 /* 0 at build time: every Q8_0 GEMV through st_k_mmv_q (A/B) */
#endif

static __host__ __device__ __forceinline__ int st_mmv8_piece(int nsub) { return nsub <= ST_MMV8_WHOLE ? nsub : ST_MMV8_PIECE; }
/* uint4 words of one warp's piece buffer: the piece rounded up, plus one for the decode's
 * read of the word after a block */
static __host__ __device__ __forceinline__ int st_mmv8_piece_u4(int piece) { return (piece * 34 + 15) / 16 + 1; }

/* Starts the copy of blocks [p0, p0 + np) of a row (16-byte aligned, row_bytes % 16 == 0 so the
 * rounded-up copy stays inside the row) into s: cp.async, no registers held, one group. */
static __device__ __forceinline__ void st_mmv8_stage(const uint8_t *__restrict__ row, int p0, int np,
                                                     uint4 *s, int lane) {
    const uint4 *g = (const uint4 *)(row + (size_t)p0 * 34);
    const int n16 = (np * 34 + 15) / 16;
    for (int i = lane; i < n16; i += 32) st_cp_async16(s + i, g + i, true);
    st_cp_async_commit();
}

template <int NC>
static __global__ void __launch_bounds__(ST_MMV8_WARPS * 32)
st_k_mmv_q8_0s(const uint8_t *__restrict__ w, size_t rb, int nrows, int nsub,
               const block_q8_1 *__restrict__ xq, int ncols, float *__restrict__ y) {
    extern __shared__ uint4 s_dyn[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row = blockIdx.x * ST_MMV8_WARPS + warp;
    const bool live = row < nrows; /* a dead warp still joins the block's barrier */
    const int piece = st_mmv8_piece(nsub), pu4 = st_mmv8_piece_u4(piece);
    uint4 *s_w = s_dyn + warp * pu4;
    const uint32_t *s_w32 = (const uint32_t *)s_w;
    uint32_t *s_x = (uint32_t *)(s_dyn + ST_MMV8_WARPS * pu4);
    const uint8_t *wr = w + (size_t)(live ? row : 0) * rb;
    if (live) st_mmv8_stage(wr, 0, piece < nsub ? piece : nsub, s_w, lane);
    st_pdl_enter();
    /* the activation columns: ncols * nsub blocks of 9 words (column c's at c * nsub) */
    const uint32_t *xg = (const uint32_t *)xq;
    const int nxw = ncols * nsub * 9;
    for (int i = (int)threadIdx.x; i < nxw; i += ST_MMV8_WARPS * 32) s_x[i] = __ldg(xg + i);
    st_cp_async_wait<0>();
    __syncthreads();
    if (!live) return;
    float a[NC], b[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) a[c] = b[c] = 0.0f;
    for (int p0 = 0; p0 < nsub; p0 += piece) {
        const int np = nsub - p0 < piece ? nsub - p0 : piece;
        if (p0 > 0) {
            __syncwarp();
            st_mmv8_stage(wr, p0, np, s_w, lane);
            st_cp_async_wait<0>();
            __syncwarp();
        }
#pragma unroll 2
        for (int q = lane; q < np; q += 32) {
            const int byte = 34 * q;
            st_mmv_w wv;
            const uint32_t dword = s_w32[byte >> 2];
            wv.dw = st_dev_fp16((byte & 2) ? dword >> 16 : dword & 0xFFFFu);
            const int wi = (byte + 2) >> 2, sh = ((byte + 2) & 3) * 8; /* 0 or 16 */
            uint32_t W[9];
#pragma unroll
            for (int k = 0; k < 8; k++) W[k] = s_w32[wi + k];
            W[8] = sh ? s_w32[wi + 8] : 0u;
#pragma unroll
            for (int k = 0; k < 8; k++) wv.v[k] = (int)__funnelshift_r(W[k], W[k + 1], sh);
            const int p = p0 + q;
#pragma unroll
            for (int c = 0; c < NC; c++) {
                if (c < ncols) {
                    const uint32_t *xs = s_x + (size_t)(c * nsub + p) * 9;
                    const uint32_t ds = xs[0];
                    const float xd = st_dev_fp16(ds & 0xFFFFu);
                    int lo = 0, hi = 0;
#pragma unroll
                    for (int i = 0; i < 4; i++) lo = __dp4a(wv.v[i], (int)xs[1 + i], lo);
#pragma unroll
                    for (int i = 4; i < 8; i++) hi = __dp4a(wv.v[i], (int)xs[1 + i], hi);
                    a[c] += wv.dw * xd * (float)(lo + hi); /* as st_mmv_combine's PLAIN */
                }
            }
        }
    }
    st_mmv_store<NC>(a, b, false, ncols, lane, row, nrows, y);
}

/* Float weights against f32 x (nvec: see st_mmv_row_f). */
template <class F, int NC>
static __global__ void __launch_bounds__(ST_MMV_WARPS * 32)
st_k_mmv_f(const uint8_t *__restrict__ w0, size_t rb0, const uint8_t *__restrict__ w1, size_t rb1,
           int nrows, int ne0, int nvec, const float *__restrict__ x, int ncols,
           float *__restrict__ y) {
    st_pdl_enter();
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * ST_MMV_WARPS + (threadIdx.x >> 5);
    if (row >= nrows) return;
    float a[NC], b[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) a[c] = b[c] = 0.0f;
    st_mmv_row_f<F, NC>(w0 + (size_t)row * rb0, ne0, nvec, x, ncols, lane, a);
    if (w1) st_mmv_row_f<F, NC>(w1 + (size_t)row * rb1, ne0, nvec, x, ncols, lane, b);
    st_mmv_store<NC>(a, b, w1 != nullptr, ncols, lane, row, nrows, y);
}

/* Float weights, few rows (the router): a block per row, st_mmv_f_split_row (mmv.cuh). */
template <class F, int NC>
static __global__ void __launch_bounds__(ST_MMV_SPLIT * 32)
st_k_mmv_f_split(const uint8_t *__restrict__ w0, size_t rb0, const uint8_t *__restrict__ w1, size_t rb1,
                 int nrows, int ne0, int nvec, const float *__restrict__ x, int ncols,
                 float *__restrict__ y) {
    st_mmv_f_split_row<F, NC>(w0, rb0, w1, rb1, nrows, ne0, nvec, x, ncols, y);
}

/* ---- launch --------------------------------------------------------------------------------- */

/* Everything a launch needs, checked by st_mmv_check. */
struct st_mmv_args {
    strata_type type;
    const uint8_t *w0, *w1; /* w1: up matrix of the fused variant, else NULL */
    size_t rb0, rb1;
    int ne0, ne1, ncols;
    const float *x;
    float *y;
    block_q8_1 *xq;
    int xq_ready; /* xq already holds x as Q8_1 (st_cuda_mmv_pre) */
    cudaStream_t stream;
    const uint8_t *t0, *t1; /* the matrices' packed copies (st_cuda_mat.tiles) when sm60 */
    int sm60;               /* Q8_0 matrices marked gemv_sm60 with their copies: q8_sm60.cuh's
                               persistent blocks per SM (the first matrix's), else 0 */
};

/* Whether this call takes the SM60 Q8_0 kernel. */
static bool st_mmv_sm60(const st_mmv_args &a) {
    return a.type == STRATA_TYPE_Q8_0 && a.sm60 && st_q8s_smem(a.ne0, a.ncols) != 0;
}

/* The Q8_0 shared-memory kernel's dynamic smem for this call, 0 when it does not apply. */
static size_t st_mmv8_smem(const st_mmv_args &a) {
    if (!ST_MMV_Q8_SMEM || a.type != STRATA_TYPE_Q8_0 || a.w1 || a.rb0 % 16 != 0 || ((uintptr_t)a.w0 & 15))
        return 0;
    const int nsub = a.ne0 / 32;
    const size_t smem = (size_t)ST_MMV8_WARPS * st_mmv8_piece_u4(st_mmv8_piece(nsub)) * 16 +
                        (size_t)a.ncols * nsub * sizeof(block_q8_1);
    return smem <= 48 * 1024 ? smem : 0;
}

template <class T, int NC>
static strata_status st_mmv_launch_q_nc(const st_mmv_args &a) {
    const size_t smem = std::is_same<T, st_mmv_q8_0>::value ? st_mmv8_smem(a) : 0;
    if (smem) {
        const unsigned grid = (unsigned)((a.ne1 + ST_MMV8_WARPS - 1) / ST_MMV8_WARPS);
        st_launch(st_k_mmv_q8_0s<NC>, grid, ST_MMV8_WARPS * 32, smem, a.stream, a.w0, a.rb0, a.ne1,
                  a.ne0 / 32, (const block_q8_1 *)a.xq, a.ncols, a.y);
        ST_CUDA_CHECK_LAUNCH("st_k_mmv_q8_0s");
        return STRATA_OK;
    }
    const unsigned grid = (unsigned)((a.ne1 + ST_MMV_WARPS - 1) / ST_MMV_WARPS);
    st_launch(st_k_mmv_q<T, NC>, grid, ST_MMV_WARPS * 32, 0, a.stream, a.w0, a.rb0, a.w1, a.rb1, a.ne1,
                                                                a.ne0 / 32, a.xq, a.ncols, a.y);
    ST_CUDA_CHECK_LAUNCH("st_k_mmv_q");
    return STRATA_OK;
}

template <class T>
static strata_status st_mmv_launch_q(const st_mmv_args &a) {
    if (!a.xq_ready) ST_TRY(st_quantize_q8_1_launch(a.x, a.xq, (int64_t)a.ncols * a.ne0, a.stream));
    if (std::is_same<T, st_mmv_q8_0>::value && st_mmv_sm60(a)) { /* opt-in, not the same bits */
        const st_q8s_call c = {a.t0, a.t1, a.ne0, a.ne1, a.ncols, a.sm60, a.xq, a.y, a.stream};
        return st_q8s_launch(c);
    }
    switch (a.ncols) {
    case 1: return st_mmv_launch_q_nc<T, 1>(a);
    case 2: return st_mmv_launch_q_nc<T, 2>(a);
    case 3: return st_mmv_launch_q_nc<T, 3>(a);
    case 4: return st_mmv_launch_q_nc<T, 4>(a);
    case 5: return st_mmv_launch_q_nc<T, 5>(a);
    case 6: return st_mmv_launch_q_nc<T, 6>(a);
    case 7: return st_mmv_launch_q_nc<T, 7>(a);
    default: return st_mmv_launch_q_nc<T, 8>(a);
    }
}

/* Rows below this take st_k_mmv_f_split (a block per row) */
#define ST_MMV_SPLIT_ROWS 1024

template <class F, int NC>
static strata_status st_mmv_launch_f_nc(const st_mmv_args &a, int nvec) {
    if (a.ne1 < ST_MMV_SPLIT_ROWS) {
        st_launch(st_k_mmv_f_split<F, NC>, (unsigned)a.ne1, ST_MMV_SPLIT * 32, 0, a.stream, a.w0, a.rb0, a.w1,
                  a.rb1, a.ne1, a.ne0, nvec, a.x, a.ncols, a.y);
        ST_CUDA_CHECK_LAUNCH("st_k_mmv_f_split");
        return STRATA_OK;
    }
    const unsigned grid = (unsigned)((a.ne1 + ST_MMV_WARPS - 1) / ST_MMV_WARPS);
    st_launch(st_k_mmv_f<F, NC>, grid, ST_MMV_WARPS * 32, 0, a.stream, a.w0, a.rb0, a.w1, a.rb1, a.ne1,
                                                                a.ne0, nvec, a.x, a.ncols, a.y);
    ST_CUDA_CHECK_LAUNCH("st_k_mmv_f");
    return STRATA_OK;
}

template <class F>
static strata_status st_mmv_launch_f(const st_mmv_args &a) {
    /* 16-byte chunks when every row of every matrix and of x starts 16-byte aligned. */
    const bool vec = a.ne0 % F::V == 0 && a.rb0 % 16 == 0 && ((uintptr_t)a.w0 & 15) == 0 &&
                     (!a.w1 || (a.rb1 % 16 == 0 && ((uintptr_t)a.w1 & 15) == 0)) &&
                     ((uintptr_t)a.x & 15) == 0;
    const int nvec = vec ? a.ne0 / F::V : 0;
    switch (a.ncols) {
    case 1: return st_mmv_launch_f_nc<F, 1>(a, nvec);
    case 2: return st_mmv_launch_f_nc<F, 2>(a, nvec);
    case 3: return st_mmv_launch_f_nc<F, 3>(a, nvec);
    case 4: return st_mmv_launch_f_nc<F, 4>(a, nvec);
    case 5: return st_mmv_launch_f_nc<F, 5>(a, nvec);
    case 6: return st_mmv_launch_f_nc<F, 6>(a, nvec);
    case 7: return st_mmv_launch_f_nc<F, 7>(a, nvec);
    default: return st_mmv_launch_f_nc<F, 8>(a, nvec);
    }
}

/* The one dispatch point over weight types. */
static strata_status st_mmv_dispatch(const st_mmv_args &a) {
    switch (a.type) {
    case STRATA_TYPE_F32: return st_mmv_launch_f<st_mmv_f32>(a);
    case STRATA_TYPE_F16: return st_mmv_launch_f<st_mmv_f16w>(a);
    case STRATA_TYPE_BF16: return st_mmv_launch_f<st_mmv_bf16w>(a);
    case STRATA_TYPE_Q4_0: return st_mmv_launch_q<st_mmv_q4_0>(a);
    case STRATA_TYPE_Q4_1: return st_mmv_launch_q<st_mmv_q4_1>(a);
    case STRATA_TYPE_Q5_0: return st_mmv_launch_q<st_mmv_q5_0>(a);
    case STRATA_TYPE_Q5_1: return st_mmv_launch_q<st_mmv_q5_1>(a);
    case STRATA_TYPE_Q8_0: return st_mmv_launch_q<st_mmv_q8_0>(a);
    case STRATA_TYPE_IQ4_NL: return st_mmv_launch_q<st_mmv_iq4_nl>(a);
    case STRATA_TYPE_Q2_K: return st_mmv_launch_q<st_mmv_q2_K>(a);
    case STRATA_TYPE_Q3_K: return st_mmv_launch_q<st_mmv_q3_K>(a);
    case STRATA_TYPE_Q4_K: return st_mmv_launch_q<st_mmv_q4_K>(a);
    case STRATA_TYPE_Q5_K: return st_mmv_launch_q<st_mmv_q5_K>(a);
    case STRATA_TYPE_Q6_K: return st_mmv_launch_q<st_mmv_q6_K>(a);
    case STRATA_TYPE_IQ4_XS: return st_mmv_launch_q<st_mmv_iq4_xs>(a);
    case STRATA_TYPE_IQ3_XXS: return st_mmv_launch_q<st_mmv_iq3_xxs>(a);
    case STRATA_TYPE_IQ3_S: return st_mmv_launch_q<st_mmv_iq3_s>(a);
    case STRATA_TYPE_IQ2_XXS: return st_mmv_launch_q<st_mmv_iq2_xxs>(a);
    case STRATA_TYPE_IQ2_XS: return st_mmv_launch_q<st_mmv_iq2_xs>(a);
    case STRATA_TYPE_IQ2_S: return st_mmv_launch_q<st_mmv_iq2_s>(a);
    case STRATA_TYPE_IQ1_S: return st_mmv_launch_q<st_mmv_iq1_s>(a);
    case STRATA_TYPE_IQ1_M: return st_mmv_launch_q<st_mmv_iq1_m>(a);
    case STRATA_TYPE_MXFP4: return st_mmv_launch_q<st_mmv_mxfp4>(a);
    default:
        return st_error(STRATA_ERR_UNSUPPORTED, "st_cuda_mmv: no GPU GEMV for weight type %s",
                        strata_type_name(a.type));
    }
}

/* ---- entry points --------------------------------------------------------------------------- */

static int st_mmv_is_float(strata_type t) {
    return t == STRATA_TYPE_F32 || t == STRATA_TYPE_F16 || t == STRATA_TYPE_BF16;
}

extern "C" int st_cuda_mmv_supports(strata_type type) {
    switch (type) {
    case STRATA_TYPE_F32: case STRATA_TYPE_F16: case STRATA_TYPE_BF16:
    case STRATA_TYPE_Q4_0: case STRATA_TYPE_Q4_1: case STRATA_TYPE_Q5_0: case STRATA_TYPE_Q5_1:
    case STRATA_TYPE_Q8_0: case STRATA_TYPE_IQ4_NL:
    case STRATA_TYPE_Q2_K: case STRATA_TYPE_Q3_K: case STRATA_TYPE_Q4_K: case STRATA_TYPE_Q5_K:
    case STRATA_TYPE_Q6_K: case STRATA_TYPE_IQ4_XS: case STRATA_TYPE_IQ3_XXS: case STRATA_TYPE_IQ3_S:
    case STRATA_TYPE_IQ2_XXS: case STRATA_TYPE_IQ2_XS: case STRATA_TYPE_IQ2_S:
    case STRATA_TYPE_IQ1_S: case STRATA_TYPE_IQ1_M: case STRATA_TYPE_MXFP4:
        return 1;
    default:
        return 0;
    }
}

extern "C" int st_cuda_mmv_q8_smem(const st_cuda_mat *W, int ncols) {
    if (!W || ncols < 1 || ncols > 8 || W->ne0 <= 0 || W->ne0 % 32 || W->ne0 > INT32_MAX) return 0;
    st_mmv_args a = {};
    a.type = W->type;
    a.w0 = (const uint8_t *)W->data;
    a.rb0 = W->row_bytes;
    a.ne0 = (int)W->ne0;
    a.ncols = ncols;
    return st_mmv8_smem(a) != 0;
}

/* The SM60 fields of a call: both matrices marked, with 16-byte aligned copies. */
static void st_mmv_set_sm60(st_mmv_args &a, const st_cuda_mat *W0, const st_cuda_mat *W1) {
    const auto ok = [](const st_cuda_mat *W) {
        return W->gemv_sm60 && W->tiles && ((uintptr_t)W->tiles & 15) == 0;
    };
    a.sm60 = W0->type == STRATA_TYPE_Q8_0 && ok(W0) && (!W1 || ok(W1)) ? W0->gemv_sm60 : 0;
    a.t0 = a.sm60 ? (const uint8_t *)W0->tiles : NULL;
    a.t1 = a.sm60 && W1 ? (const uint8_t *)W1->tiles : NULL;
}

extern "C" int st_cuda_mmv_q8_sm60(const st_cuda_mat *W, int ncols) {
    if (!W || ncols < 1 || ncols > 8 || W->ne0 <= 0 || W->ne0 % 32 || W->ne0 > INT32_MAX) return 0;
    st_mmv_args a = {};
    a.type = W->type;
    a.ne0 = (int)W->ne0;
    a.ncols = ncols;
    st_mmv_set_sm60(a, W, NULL);
    return st_mmv_sm60(a);
}

extern "C" size_t st_cuda_mmv_scratch_bytes(int64_t ne0, int ncols) {
    if (ne0 <= 0 || ncols < 1 || ncols > 8) return 0;
    return (size_t)ncols * (size_t)((ne0 + QK8_1 - 1) / QK8_1) * sizeof(block_q8_1);
}

/* Whether [a, a + na) and [b, b + nb) (bytes) overlap. */
static bool st_mmv_overlap(const void *a, size_t na, const void *b, size_t nb) {
    const uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return pa < pb + nb && pb < pa + na;
}

/* Checks one matrix. */
static strata_status st_mmv_check_mat(const char *fn, const char *name, const st_cuda_mat *W) {
    if (!W) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL %s", fn, name);
    if (!st_cuda_mmv_supports(W->type))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: no GPU GEMV for weight type %s (%d)", fn,
                        strata_type_name(W->type), (int)W->type);
    if (!W->data) return st_error(STRATA_ERR_INVALID_ARG, "%s: %s has NULL data", fn, name);
    const int64_t bs = strata_type_block_size(W->type);
    if (W->ne0 <= 0 || W->ne0 > INT32_MAX || W->ne0 % bs != 0)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "%s: %s ne0 = %lld is not a positive multiple of %s's block size %lld "
                        "(below 2^31)", fn, name, (long long)W->ne0, strata_type_name(W->type),
                        (long long)bs);
    if (W->ne1 <= 0 || W->ne1 > INT32_MAX)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: %s ne1 = %lld out of range", fn, name,
                        (long long)W->ne1);
    const int64_t need = strata_row_bytes(W->type, W->ne0);
    const size_t align = W->type == STRATA_TYPE_F32 ? 4 : W->type == STRATA_TYPE_MXFP4 ? 1 : 2;
    if (need <= 0 || W->row_bytes < (size_t)need || W->row_bytes % align != 0)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "%s: %s row_bytes = %zu (a row of %lld %s needs %lld, multiple of %zu)",
                        fn, name, W->row_bytes, (long long)W->ne0, strata_type_name(W->type),
                        (long long)need, align);
    if ((uintptr_t)W->data % align != 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: %s data not %zu-byte aligned", fn, name, align);
    return STRATA_OK;
}

static strata_status st_mmv_prepare(const char *fn, const st_cuda_mat *W0, const st_cuda_mat *W1,
                                    const float *x, int ncols, float *y, void *scratch,
                                    void *stream, st_mmv_args &a) {
    ST_TRY(st_mmv_check_mat(fn, W1 ? "Wg" : "W", W0));
    if (W1) {
        ST_TRY(st_mmv_check_mat(fn, "Wu", W1));
        if (W1->type != W0->type || W1->ne0 != W0->ne0 || W1->ne1 != W0->ne1)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "%s: Wg (%s, %lld x %lld) and Wu (%s, %lld x %lld) differ", fn,
                            strata_type_name(W0->type), (long long)W0->ne1, (long long)W0->ne0,
                            strata_type_name(W1->type), (long long)W1->ne1, (long long)W1->ne0);
    }
    if (ncols < 1 || ncols > 8)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: ncols = %d (1..8)", fn, ncols);
    if (!x || !y) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL %s", fn, !x ? "x" : "y");
    if (((uintptr_t)x & 3) || ((uintptr_t)y & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: %s not 4-byte aligned", fn,
                        ((uintptr_t)x & 3) ? "x" : "y");
    const size_t xbytes = (size_t)ncols * (size_t)W0->ne0 * sizeof(float);
    const size_t ybytes = (size_t)ncols * (size_t)W0->ne1 * sizeof(float);
    if (st_mmv_overlap(x, xbytes, y, ybytes))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: y overlaps x", fn);
    const bool quant = !st_mmv_is_float(W0->type);
    if (quant) {
        if (!scratch) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL scratch", fn);
        if ((uintptr_t)scratch & 15)
            return st_error(STRATA_ERR_INVALID_ARG, "%s: scratch not 16-byte aligned", fn);
        if (st_mmv_overlap(scratch, st_cuda_mmv_scratch_bytes(W0->ne0, ncols), y, ybytes) ||
            st_mmv_overlap(scratch, st_cuda_mmv_scratch_bytes(W0->ne0, ncols), x, xbytes))
            return st_error(STRATA_ERR_INVALID_ARG, "%s: scratch overlaps x or y", fn);
    }
    ST_TRY(st_cuda_require(fn));
    a.type = W0->type;
    a.w0 = (const uint8_t *)W0->data;
    a.rb0 = W0->row_bytes;
    a.w1 = W1 ? (const uint8_t *)W1->data : NULL;
    a.rb1 = W1 ? W1->row_bytes : 0;
    a.ne0 = (int)W0->ne0;
    a.ne1 = (int)W0->ne1;
    a.ncols = ncols;
    a.x = x;
    a.y = y;
    a.xq = quant ? (block_q8_1 *)scratch : NULL;
    a.stream = (cudaStream_t)stream;
    st_mmv_set_sm60(a, W0, W1);
    return STRATA_OK;
}

extern "C" strata_status st_cuda_mmv(const st_cuda_mat *W, const float *d_x, int ncols, float *d_y,
                                     void *d_scratch, void *stream) {
    st_mmv_args a = {};
    ST_TRY(st_mmv_prepare("st_cuda_mmv", W, NULL, d_x, ncols, d_y, d_scratch, stream, a));
    return st_mmv_dispatch(a);
}

extern "C" strata_status st_cuda_mmv_pre(const st_cuda_mat *W, const float *d_x, const void *d_xq,
                                         int ncols, float *d_y, void *d_scratch, void *stream) {
    st_mmv_args a = {};
    ST_TRY(st_mmv_prepare("st_cuda_mmv_pre", W, NULL, d_x, ncols, d_y, d_scratch, stream, a));
    if (a.xq && d_xq) { /* a type that reads Q8_1: read the caller's */
        if ((uintptr_t)d_xq & 3) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_mmv_pre: xq not 4-byte aligned");
        a.xq = (block_q8_1 *)d_xq;
        a.xq_ready = 1;
    }
    return st_mmv_dispatch(a);
}

extern "C" strata_status st_cuda_mmv_swiglu(const st_cuda_mat *Wg, const st_cuda_mat *Wu,
                                            const float *d_x, int ncols, float *d_y,
                                            void *d_scratch, void *stream) {
    st_mmv_args a = {};
    if (!Wg || !Wu)
        return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_mmv_swiglu: NULL %s", !Wg ? "Wg" : "Wu");
    ST_TRY(st_mmv_prepare("st_cuda_mmv_swiglu", Wg, Wu, d_x, ncols, d_y, d_scratch, stream, a));
    return st_mmv_dispatch(a);
}

extern "C" int st_cuda_mmv_tables_check(void) {
#define ST_SAME(T, n, data, lib)                                                                   \
    do {                                                                                           \
        static const T h[n] = {data};                                                              \
        if (memcmp(h, lib, sizeof h) != 0) return 0;                                               \
    } while (0)
    ST_SAME(uint32_t, 256, ST_IQ3XXS_GRID_DATA, st_iq3xxs_grid);
    ST_SAME(uint32_t, 512, ST_IQ3S_GRID_DATA, st_iq3s_grid);
    ST_SAME(uint64_t, 256, ST_IQ2XXS_GRID_DATA, st_iq2xxs_grid);
    ST_SAME(uint64_t, 512, ST_IQ2XS_GRID_DATA, st_iq2xs_grid);
    ST_SAME(uint64_t, 1024, ST_IQ2S_GRID_DATA, st_iq2s_grid);
    ST_SAME(uint64_t, 2048, ST_IQ1S_GRID_DATA, st_iq1s_grid);
    ST_SAME(uint8_t, 128, ST_KSIGNS_IQ2XS_DATA, st_ksigns_iq2xs);
    ST_SAME(int8_t, 16, ST_KVALUES_MXFP4_DATA, st_kvalues_mxfp4);
#undef ST_SAME
    return 1;
}
