/* norm_row.cuh - the RMSNorm of one row by a whole 256-thread block (st_norm_row_quads: the
 * block-row kernels of norm.cu) and its helpers, shared with kernels that fuse a long-row norm in
 * (mla.cu's st_k_mla_prep: the latent row's norm). The same function whatever kernel calls it:
 * the same slices, reduction tree and scaling, so the same bits as st_cuda_rmsnorm's rows of more
 * than 256 values. Needs blockDim.x == 256 and a shared double[8]. */
#ifndef STRATA_CUDA_NORM_ROW_CUH
#define STRATA_CUDA_NORM_ROW_CUH

#include "norm.cuh"
#include "quantize.cuh"

/* Rows of up to ST_NORM_REG * TPR values are held in registers: each thread issues all the loads of
 * its slice before it uses the first (a decode step's norm is one block per row, and the loop
 * below waited out one global-memory round trip per element of the slice: 7.4 us per 2048-float
 * add + norm on the H200, ncu). The squares are summed in the loop's order: the same bits. */
#define ST_NORM_REG 16

/* The block's reduction of the per-thread double sums, in a fixed tree order. */
template <int TPR>
static __device__ __forceinline__ double st_norm_reduce(double sum, double *red) {
    sum = st_warp_sum_d(sum);
    if (TPR > 32) {
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = sum;
        __syncthreads();
        sum = 0.0;
#pragma unroll
        for (int k = 0; k < TPR / 32; k++) sum = __dadd_rn(sum, red[k]);
        __syncthreads(); /* red is reused by the next row */
    }
    return sum;
}

/* ---- block rows: four consecutive values a thread ------------------------------------------
 * A row of more than 256 values (one 256-thread block) is read in quads: thread t owns values
 * 1024 k + 4 t + e (e < 4), summing their squares in (k, e) order, then the block reduction. With
 * Q8_1 output the 32 values of a block sit in 8 neighbouring lanes (st_q8_1_put<4>: 3 shuffles
 * per reduction and one 4-byte store a lane, where a value a lane took 5 and a byte: 6.6 us per 2048-float add +
 * norm on the H200, ncu, most of it in the quantization). 16-byte loads and stores when the row
 * pointers allow, else 4-byte ones: the same values and order, the same bits. */
#define ST_NORM_QUADS (ST_NORM_REG / 4) /* quads a thread holds in registers (n <= 4096) */

/* Loads values 4 qd .. 4 qd + 3 of a row (zeros past n); vec: 16-byte loads. */
static __device__ __forceinline__ void st_quad_ld(const float *r, int64_t qd, int64_t n, bool vec, float v[4]) {
    const int64_t i = 4 * qd;
    if (vec && i + 3 < n) {
        const float4 f = *(const float4 *)(r + i);
        v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
    } else {
#pragma unroll
        for (int e = 0; e < 4; e++) v[e] = i + e < n ? r[i + e] : 0.0f;
    }
}
static __device__ __forceinline__ void st_quad_st(float *r, int64_t qd, int64_t n, bool vec, const float v[4]) {
    const int64_t i = 4 * qd;
    if (vec && i + 3 < n) {
        *(float4 *)(r + i) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (i + e < n) r[i + e] = v[e];
    }
}

/* Values 4 qd .. 4 qd + 3 of xr, plus scale * br's when br is set (as st_k_add). */
static __device__ __forceinline__ void st_quad_ld_add(const float *xr, const float *br, float scale, int64_t qd,
                                                      int64_t n, bool vec, float v[4]) {
    st_quad_ld(xr, qd, n, vec, v);
    if (br) {
        float bv[4];
        st_quad_ld(br, qd, n, vec, bv);
#pragma unroll
        for (int e = 0; e < 4; e++) v[e] = __fadd_rn(v[e], __fmul_rn(bv[e], scale));
    }
}

/* One row by the whole block (256 threads): xs = xr + scale * br when br (written back to xw
 * when set), y = rmsnorm(xs) * w (w may be NULL), q: the row's Q8_1 blocks (n % 32 == 0). */
static __device__ __forceinline__ void st_norm_row_quads(const float *xr, const float *br, float scale, float *xw,
                                                         float *yr, const float *__restrict__ w, int64_t n,
                                                         float eps, block_q8_1 *q, double *red) {
    const int t = (int)threadIdx.x;
    const bool vec = ((((uintptr_t)xr | (uintptr_t)yr | (uintptr_t)(br ? br : xr) | (uintptr_t)(xw ? xw : xr) |
                        (uintptr_t)(w ? w : xr)) & 15) == 0);
    const int64_t nq = (n + 3) / 4;
    double sum = 0.0;
    if (n <= 1024 * ST_NORM_QUADS) {
        float xv[ST_NORM_QUADS][4];
#pragma unroll
        for (int k = 0; k < ST_NORM_QUADS; k++) st_quad_ld_add(xr, br, scale, t + 256 * k, n, vec, xv[k]);
#pragma unroll
        for (int k = 0; k < ST_NORM_QUADS; k++) {
            const int64_t qd = t + 256 * k;
            if (qd < nq) {
                if (xw) st_quad_st(xw, qd, n, vec, xv[k]);
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (4 * qd + e < n) sum = __dadd_rn(sum, __dmul_rn((double)xv[k][e], (double)xv[k][e]));
            }
        }
        sum = st_norm_reduce<256>(sum, red);
        const float sc = st_rms_scale(sum, n, eps);
#pragma unroll
        for (int k = 0; k < ST_NORM_QUADS; k++) {
            const int64_t qd = t + 256 * k;
            if (1024 * k >= n) break; /* uniform per block */
            float wv[4] = {1.0f, 1.0f, 1.0f, 1.0f}, y[4];
            if (w) st_quad_ld(w, qd, n, vec, wv);
#pragma unroll
            for (int e = 0; e < 4; e++)
                y[e] = w ? __fmul_rn(__fmul_rn(xv[k][e], sc), wv[e]) : __fmul_rn(xv[k][e], sc);
            if (qd < nq) st_quad_st(yr, qd, n, vec, y);
            /* n % 32 == 0 with q: a block's 8 lanes are all in or all out */
            if (q) st_q8_1_put<4>(y, q + (qd >> 3), t & 7, qd < nq);
        }
    } else { /* longer rows: two passes over memory, the same order */
        for (int64_t qd = t; qd < nq; qd += 256) {
            float v[4];
            st_quad_ld_add(xr, br, scale, qd, n, vec, v);
            if (xw) st_quad_st(xw, qd, n, vec, v);
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (4 * qd + e < n) sum = __dadd_rn(sum, __dmul_rn((double)v[e], (double)v[e]));
        }
        sum = st_norm_reduce<256>(sum, red); /* (also orders the writes to xw before the reads) */
        const float sc = st_rms_scale(sum, n, eps);
        const float *xs = xw ? xw : xr; /* the sum as written */
        for (int64_t q0 = 0; q0 < nq; q0 += 256) { /* whole warps per round for the shuffles */
            const int64_t qd = q0 + t;
            float v[4], wv[4] = {1.0f, 1.0f, 1.0f, 1.0f}, y[4];
            st_quad_ld(xs, qd, n, vec, v);
            if (w) st_quad_ld(w, qd, n, vec, wv);
#pragma unroll
            for (int e = 0; e < 4; e++) y[e] = w ? __fmul_rn(__fmul_rn(v[e], sc), wv[e]) : __fmul_rn(v[e], sc);
            if (qd < nq) st_quad_st(yr, qd, n, vec, y);
            if (q) st_q8_1_put<4>(y, q + (qd >> 3), t & 7, qd < nq);
        }
    }
}

#endif /* STRATA_CUDA_NORM_ROW_CUH */
