/* mla.cu - the GPU kernels of multi-head latent attention (cuda_mla.h) other than the attention
 * itself (mla_attn.cu): the per-head absorption matmul (st_k_mla_absorb_n for up to 8 tokens,
 * optionally writing its rows as Q8_1 too, st_k_mla_absorb_t tiled for more: one fma chain per
 * output either way, both staging weights in shared memory), the strided row copy, the latent
 * cache store and its size, and st_k_mla_prep (a layer's attention inputs in one launch: the
 * latent row's norm, the RoPE of its key part and of the queries' roped parts, the cache store),
 * with their argument checks and dispatch. Every output row depends on its own inputs only (no T,
 * no other rows, no plan in its arithmetic): prompt batches and token-by-token calls give the
 * same bits. */
#include "mla.cuh"
#include "dequant.cuh"
#include "norm_row.cuh"
#include "rope.cuh"

#include <math.h>
#include <stdint.h>

/* ---- absorption matmul ----------------------------------------------------------------------- */

/* The function: y = one fma chain from 0 over the row's weights in ascending order,
 * fmaf(w[i], x[i], acc), w dequantized as the CPU does. The narrow kernel (32 rows x up to 8
 * tokens a block) and the tiled one (64 tokens x 64 rows a block) both run exactly that chain. */
#define ST_MLA_AB_NT 128    /* narrow kernel: threads per block (32 rows x 4 token lanes) */
#define ST_MLA_AB_NR 32     /* narrow kernel: output rows per block */
#define ST_MLA_AB_NK 64     /* narrow kernel: weights per row and step */
#define ST_MLA_AB_TT 8      /* narrow kernel: tokens per block; wider calls take the tiled kernel */
#define ST_MLA_AB_TILE 64   /* tiled kernel: tokens and rows per block */
#define ST_MLA_AB_KT 32     /* tiled kernel: weights per row and step */

/* Weights i0 .. i0+3 of a row (i0 a multiple of 4), dequantized as the CPU does; VEC: one 16-byte
 * (F32) or 8-byte (F16, BF16) load, the row and the base aligned for it. */
template <int TYPE, bool VEC>
static __device__ __forceinline__ void st_mla_w4(const uint8_t *row, int i0, float w[4]) {
    if (TYPE == STRATA_TYPE_Q8_0) {
        st_dq_q8_0::group(row + (size_t)(i0 / QK8_0) * sizeof(block_q8_0), (i0 % QK8_0) / 4, w);
    } else if (TYPE == STRATA_TYPE_F32) {
        if (VEC) {
            const float4 v = __ldg((const float4 *)(row + (size_t)i0 * 4));
            w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++) w[k] = st_dq_f32::one(row + (size_t)(i0 + k) * 4);
        }
    } else if (VEC) {
        const uint2 u = __ldg((const uint2 *)(row + (size_t)i0 * 2));
        const uint16_t h[4] = {(uint16_t)(u.x & 0xFFFFu), (uint16_t)(u.x >> 16), (uint16_t)(u.y & 0xFFFFu),
                               (uint16_t)(u.y >> 16)};
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = TYPE == STRATA_TYPE_F16 ? st_dev_fp16(h[k]) : st_dev_bf16(h[k]);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[k] = TYPE == STRATA_TYPE_F16 ? st_dq_f16::one(row + (size_t)(i0 + k) * 2)
                                           : st_dq_bf16::one(row + (size_t)(i0 + k) * 2);
    }
}

/* Narrow: block (32 output rows of head h, token tile of up to 8) of 128 threads. Per step the
 * block stages 64 weights of each of its rows (16 threads read a row's 64 contiguously) and 64 x
 * values of each token in shared memory, then thread (row r, token lane l) advances the chains of
 * tokens l and l + 4 by those 64 weights in order: the coalesced staging keeps many loads in
 * flight where a thread walking its own row would wait for each. yq (dense rows, rows % 32 == 0):
 * warp l's 32 outputs of token l (and l + 4) are one Q8_1 block of the token's row, quantized by
 * the warp as st_cuda_quantize_q8_1 does (st_q8_1_warp_put: the same bits). */
template <int TYPE, bool VEC>
static __global__ void __launch_bounds__(ST_MLA_AB_NT)
st_k_mla_absorb_n(const uint8_t *__restrict__ W, size_t row_bytes, int cols, int rows, const float *__restrict__ x,
                  int64_t ldx, int64_t xhs, float *__restrict__ y, int64_t ldy, int64_t yhs, int64_t T,
                  block_q8_1 *__restrict__ yq) {
    __shared__ float Ws[ST_MLA_AB_NK][ST_MLA_AB_NR + 1], Xs[ST_MLA_AB_TT][ST_MLA_AB_NK];
    st_pdl_enter();
    const int tid = (int)threadIdx.x, h = (int)blockIdx.y, j0 = (int)blockIdx.x * ST_MLA_AB_NR;
    const int r = tid % ST_MLA_AB_NR, l = tid / ST_MLA_AB_NR; /* l in 0..3: tokens l, l + 4 */
    const int64_t t0 = (int64_t)blockIdx.z * ST_MLA_AB_TT;
    const int nt = (int)min((int64_t)ST_MLA_AB_TT, T - t0);
    const float *xh = x + t0 * ldx + (int64_t)h * xhs;
    float acc[2] = {0.0f, 0.0f};
    for (int k0 = 0; k0 < cols; k0 += ST_MLA_AB_NK) {
        const int kn = min(ST_MLA_AB_NK, cols - k0);
        __syncthreads(); /* the previous step's readers are done */
#pragma unroll
        for (int i = 0; i < ST_MLA_AB_NR * ST_MLA_AB_NK / 4 / ST_MLA_AB_NT; i++) { /* rows x quads */
            const int idx = tid + ST_MLA_AB_NT * i, q = idx % (ST_MLA_AB_NK / 4), jr = idx / (ST_MLA_AB_NK / 4);
            float w[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (j0 + jr < rows && 4 * q < kn)
                st_mla_w4<TYPE, VEC>(W + ((size_t)h * (size_t)rows + (size_t)(j0 + jr)) * row_bytes, k0 + 4 * q, w);
#pragma unroll
            for (int k = 0; k < 4; k++) Ws[4 * q + k][jr] = w[k];
        }
#pragma unroll
        for (int i = 0; i < ST_MLA_AB_TT * ST_MLA_AB_NK / ST_MLA_AB_NT; i++) { /* tokens x values */
            const int idx = tid + ST_MLA_AB_NT * i, kk = idx % ST_MLA_AB_NK, t = idx / ST_MLA_AB_NK;
            Xs[t][kk] = t < nt && kk < kn ? __ldg(xh + t * ldx + k0 + kk) : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < kn; kk++) {
            const float w = Ws[kk][r];
            acc[0] = fmaf(w, Xs[l][kk], acc[0]);
            acc[1] = fmaf(w, Xs[l + 4][kk], acc[1]);
        }
    }
    const int j = j0 + r;
    if (j >= rows) return; /* (with yq whole warps) */
    if (l < nt) y[(t0 + l) * ldy + (int64_t)h * yhs + j] = acc[0];
    if (l + 4 < nt) y[(t0 + l + 4) * ldy + (int64_t)h * yhs + j] = acc[1];
    if (!yq) return;
    const int64_t hb = ((int64_t)h * yhs + j0) / 32; /* the warp's block within a token's row */
    if (l < nt) st_q8_1_warp_put(acc[0], yq + (t0 + l) * (ldy / 32) + hb, r);
    if (l + 4 < nt) st_q8_1_warp_put(acc[1], yq + (t0 + l + 4) * (ldy / 32) + hb, r);
}

/* Tiled: block (row tile j0, head h, token tile t0) of 16 x 16 threads, thread (ty, tx) tokens
 * 4ty .. 4ty+3 x rows 4tx .. 4tx+3; per step 32 weights of each row and 32 x values of each token
 * to shared memory (k-major), then every chain advances by those 32 in order. */
template <int TYPE, bool VEC>
static __global__ void __launch_bounds__(256)
st_k_mla_absorb_t(const uint8_t *__restrict__ W, size_t row_bytes, int cols, int rows, const float *__restrict__ x,
                  int64_t ldx, int64_t xhs, float *__restrict__ y, int64_t ldy, int64_t yhs, int64_t T) {
    __shared__ float4 Xs4[ST_MLA_AB_KT][ST_MLA_AB_TILE / 4], Ws4[ST_MLA_AB_KT][ST_MLA_AB_TILE / 4];
    float(*Xs)[ST_MLA_AB_TILE] = (float(*)[ST_MLA_AB_TILE])Xs4;
    float(*Ws)[ST_MLA_AB_TILE] = (float(*)[ST_MLA_AB_TILE])Ws4;
    st_pdl_enter();
    const int tid = (int)threadIdx.x, ty = tid / 16, tx = tid % 16, h = (int)blockIdx.y;
    const int j0 = (int)blockIdx.x * ST_MLA_AB_TILE;
    const int64_t t0 = (int64_t)blockIdx.z * ST_MLA_AB_TILE;
    const float *xh = x + (int64_t)h * xhs;
    float acc[4][4];
#pragma unroll
    for (int a = 0; a < 4; a++) acc[a][0] = acc[a][1] = acc[a][2] = acc[a][3] = 0.0f;
    for (int k0 = 0; k0 < cols; k0 += ST_MLA_AB_KT) {
        const int kn = min(ST_MLA_AB_KT, cols - k0);
        __syncthreads(); /* the previous step's readers are done */
#pragma unroll
        for (int i = 0; i < 2; i++) { /* 64 rows x 8 quads of weights */
            const int idx = tid + 256 * i, j = idx % ST_MLA_AB_TILE, kq = idx / ST_MLA_AB_TILE;
            float w[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (j0 + j < rows && 4 * kq < kn)
                st_mla_w4<TYPE, VEC>(W + ((size_t)h * (size_t)rows + (size_t)(j0 + j)) * row_bytes, k0 + 4 * kq, w);
#pragma unroll
            for (int k = 0; k < 4; k++) Ws[4 * kq + k][j] = w[k];
        }
#pragma unroll
        for (int i = 0; i < 8; i++) { /* 64 tokens x 32 values */
            const int idx = tid + 256 * i, t = idx % ST_MLA_AB_TILE, kk = idx / ST_MLA_AB_TILE;
            Xs[kk][t] = t0 + t < T && kk < kn ? __ldg(xh + (t0 + t) * ldx + k0 + kk) : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < kn; kk++) {
            const float4 xv = Xs4[kk][ty], wv = Ws4[kk][tx];
            const float xa[4] = {xv.x, xv.y, xv.z, xv.w}, wa[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) acc[a][b] = fmaf(wa[b], xa[a], acc[a][b]);
        }
    }
#pragma unroll
    for (int a = 0; a < 4; a++) {
        const int64_t t = t0 + 4 * ty + a;
        if (t >= T) continue;
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const int j = j0 + 4 * tx + b;
            if (j < rows) y[t * ldy + (int64_t)h * yhs + j] = acc[a][b];
        }
    }
}

/* Launches the narrow or the tiled kernel for one weight type (yq: the narrow one, T <= 8). */
template <int TYPE, bool VEC>
static void st_mla_absorb_go(const st_cuda_mla_w *W, const float *d_x, int64_t ldx, int64_t xhs, float *d_y,
                             int64_t ldy, int64_t yhs, int64_t T, block_q8_1 *yq, cudaStream_t s) {
    const uint8_t *w = (const uint8_t *)W->data;
    const int cols = (int)W->cols, rows = (int)W->rows;
    if (T <= ST_MLA_AB_TT) {
        const dim3 grid((unsigned)((rows + ST_MLA_AB_NR - 1) / ST_MLA_AB_NR), (unsigned)W->n_head, 1u);
        st_launch(st_k_mla_absorb_n<TYPE, VEC>, grid, ST_MLA_AB_NT, 0, s, w, W->row_bytes, cols, rows, d_x, ldx,
                  xhs, d_y, ldy, yhs, T, yq);
    } else {
        const dim3 grid((unsigned)((rows + ST_MLA_AB_TILE - 1) / ST_MLA_AB_TILE), (unsigned)W->n_head,
                        (unsigned)((T + ST_MLA_AB_TILE - 1) / ST_MLA_AB_TILE));
        st_launch(st_k_mla_absorb_t<TYPE, VEC>, grid, 256, 0, s, w, W->row_bytes, cols, rows, d_x, ldx, xhs, d_y,
                  ldy, yhs, T);
    }
}

template <int TYPE>
static void st_mla_absorb_type(const st_cuda_mla_w *W, const float *d_x, int64_t ldx, int64_t xhs, float *d_y,
                               int64_t ldy, int64_t yhs, int64_t T, block_q8_1 *yq, cudaStream_t s) {
    const size_t va = TYPE == STRATA_TYPE_F32 ? 16 : 8;
    const bool vec = TYPE != STRATA_TYPE_Q8_0 && W->row_bytes % va == 0 && (uintptr_t)W->data % va == 0;
    if (vec)
        st_mla_absorb_go<TYPE, true>(W, d_x, ldx, xhs, d_y, ldy, yhs, T, yq, s);
    else
        st_mla_absorb_go<TYPE, false>(W, d_x, ldx, xhs, d_y, ldy, yhs, T, yq, s);
}

extern "C" int st_cuda_mla_absorb_supports(strata_type type, int64_t cols) {
    if (cols < 4 || cols > 65536) return 0;
    switch (type) {
    case STRATA_TYPE_F32: case STRATA_TYPE_F16: case STRATA_TYPE_BF16: return cols % 4 == 0;
    case STRATA_TYPE_Q8_0: return cols % QK8_0 == 0;
    default: return 0;
    }
}

/* st_cuda_mla_absorb and st_cuda_mla_absorb_q8: the checks, then the one dispatch over types. */
static strata_status st_mla_absorb_call(const char *fn, const st_cuda_mla_w *W, const float *d_x, int64_t ldx,
                                        int64_t xhs, float *d_y, int64_t ldy, int64_t yhs, int64_t T,
                                        block_q8_1 *yq, void *stream) {
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
    if ((T + ST_MLA_AB_TILE - 1) / ST_MLA_AB_TILE > 65535)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T = %lld tokens in one call", fn, (long long)T);
    ST_TRY(st_cuda_require(fn));
    const cudaStream_t s = (cudaStream_t)stream;
    switch (W->type) {
    case STRATA_TYPE_F32: st_mla_absorb_type<STRATA_TYPE_F32>(W, d_x, ldx, xhs, d_y, ldy, yhs, T, yq, s); break;
    case STRATA_TYPE_F16: st_mla_absorb_type<STRATA_TYPE_F16>(W, d_x, ldx, xhs, d_y, ldy, yhs, T, yq, s); break;
    case STRATA_TYPE_BF16: st_mla_absorb_type<STRATA_TYPE_BF16>(W, d_x, ldx, xhs, d_y, ldy, yhs, T, yq, s); break;
    default: st_mla_absorb_type<STRATA_TYPE_Q8_0>(W, d_x, ldx, xhs, d_y, ldy, yhs, T, yq, s); break;
    }
    ST_CUDA_CHECK_LAUNCH("st_k_mla_absorb_n/t");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_mla_absorb(const st_cuda_mla_w *W, const float *d_x, int64_t ldx, int64_t xhs,
                                            float *d_y, int64_t ldy, int64_t yhs, int64_t T, void *stream) {
    return st_mla_absorb_call("st_cuda_mla_absorb", W, d_x, ldx, xhs, d_y, ldy, yhs, T, NULL, stream);
}

extern "C" strata_status st_cuda_mla_absorb_q8(const st_cuda_mla_w *W, const float *d_x, int64_t ldx, int64_t xhs,
                                               float *d_y, int64_t T, void *d_yq, void *stream) {
    static const char *fn = "st_cuda_mla_absorb_q8";
    if (!W || T < 0 || T > ST_MLA_AB_TT || W->rows % 32 != 0 || !d_yq || ((uintptr_t)d_yq & 3))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld (at most %d), rows %lld (a multiple of 32), "
                        "a NULL or misaligned q", fn, (long long)T, ST_MLA_AB_TT, W ? (long long)W->rows : 0LL);
    return st_mla_absorb_call(fn, W, d_x, ldx, xhs, d_y, W->n_head * W->rows, W->rows, T, (block_q8_1 *)d_yq,
                              stream);
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


/* ---- a layer's attention inputs in one launch --------------------------------------------------- */

/* Block t (256 threads) of T: the RoPE factors of position pos[t] (pos0 + t) for the block (the
 * same st_rope_cs values st_k_rope computes for every head), then the queries' roped parts (head
 * h's n_rot values from qpe copied into its query row behind the latent part, the pairs rotated
 * on the way as st_k_rope rotates them in place after the copy) and the key part of the latent row
 * roped in place; the latent normalized in place by st_norm_row_quads (st_k_rmsnorm<256>'s row);
 * then the whole row into the cache at pos[0] + t (pos0 + t) as st_k_mla_store converts it.
 * __syncthreads orders the block's global writes between the stages. */
template <bool F16>
static __global__ void __launch_bounds__(256)
st_k_mla_prep(const __grid_constant__ st_rope_table tb, float *kv, int64_t ldkv, const float *__restrict__ kn,
              float eps, int R, int nr, void *cache, const float *__restrict__ qpe, int64_t ldqp, int64_t qhs,
              float *q, int64_t ldq, int H, const int32_t *__restrict__ pos, int64_t pos0) {
    __shared__ double red[8];
    __shared__ float cc[ST_CUDA_ROPE_MAX_ROT / 2], ss[ST_CUDA_ROPE_MAX_ROT / 2];
    st_pdl_enter();
    const int64_t t = blockIdx.x;
    const int tid = (int)threadIdx.x, half = tb.half, D = R + nr, raw = nr - 2 * half;
    const int64_t p = pos ? (int64_t)__ldg(pos + t) : pos0 + t;
    for (int i = tid; i < half; i += 256) st_rope_cs(tb, p, i, &cc[i], &ss[i]);
    __syncthreads();
    float *x = kv + t * ldkv;
    const float *qs = qpe + t * ldqp;
    float *qd = q + t * ldq + R;
    for (int k = tid; k < H * half; k += 256) {
        const int h = k / half, i = k - h * half;
        st_rope_pair_to(qs + (int64_t)h * qhs, qd + (int64_t)h * D, i, half, tb.neox, cc[i], ss[i]);
    }
    for (int k = tid; k < H * raw; k += 256) { /* past n_rot of the rope: copied as they are */
        const int h = k / raw, e = 2 * half + (k - h * raw);
        qd[(int64_t)h * D + e] = qs[(int64_t)h * qhs + e];
    }
    for (int i = tid; i < half; i += 256) st_rope_pair(x + R, i, half, tb.neox, cc[i], ss[i]);
    st_norm_row_quads(x, nullptr, 0.0f, nullptr, x, kn, R, eps, nullptr, red);
    __syncthreads();
    const int64_t o = ((pos ? (int64_t)__ldg(pos) : pos0) + t) * D;
    for (int d = tid; d < D; d += 256) {
        const float v = x[d];
        if (F16)
            ((__half *)cache)[o + d] = __float2half_rn(v);
        else
            ((float *)cache)[o + d] = v;
    }
}

extern "C" int st_cuda_mla_prep_supports(const st_cuda_rope_params *rope, const st_cuda_mla_shape *s) {
    return rope && st_mla_shape_ok(s) && s->n_rot >= 2 && s->kv_lora > 256 && st_cuda_rope_supports(rope, s->n_rot);
}

extern "C" strata_status st_cuda_mla_prep(const st_cuda_rope_params *rope, const st_cuda_kv_layer *kv,
                                          const st_cuda_mla_shape *s, float *d_kv, int64_t ldkv,
                                          const float *d_kv_norm, float eps, const float *d_qpe, int64_t ldqp,
                                          int64_t qhs, float *d_q, int64_t ldq, int64_t T, int64_t pos0,
                                          const int32_t *d_pos, void *stream) {
    static const char *fn = "st_cuda_mla_prep";
    if (!rope || !kv || !st_mla_shape_ok(s) || T < 0 || pos0 < 0 || T > INT32_MAX)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL argument, bad shape or size", fn);
    if (T == 0) return STRATA_OK;
    if (kv->type != STRATA_TYPE_F16 && kv->type != STRATA_TYPE_F32)
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: cache type %s (F16 or F32 only)", fn, strata_type_name(kv->type));
    if (!st_cuda_mla_prep_supports(rope, s))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: RoPE n_rot %d over a key part of %d, kv_lora %d (above 256: "
                        "a block's norm)", fn, (int)rope->n_rot, (int)s->n_rot, (int)s->kv_lora);
    const int64_t D = s->kv_lora + s->n_rot, H = s->n_head;
    if (pos0 + T > kv->n_ctx)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: positions %lld..%lld outside the cache of %lld", fn,
                        (long long)pos0, (long long)(pos0 + T - 1), (long long)kv->n_ctx);
    if (ldkv < D || qhs < s->n_rot || ldqp < H * qhs || ldq < H * D || !(eps >= 0.0f))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: strides kv %lld, q part %lld/%lld, q %lld, eps %g", fn,
                        (long long)ldkv, (long long)ldqp, (long long)qhs, (long long)ldq, (double)eps);
    const uintptr_t ea = kv->type == STRATA_TYPE_F16 ? 1 : 3;
    if (!d_kv || !d_kv_norm || !d_qpe || !d_q || !kv->k || ((uintptr_t)d_kv & 3) || ((uintptr_t)d_kv_norm & 3) ||
        ((uintptr_t)d_qpe & 3) || ((uintptr_t)d_q & 3) || ((uintptr_t)d_pos & 3) || ((uintptr_t)kv->k & ea))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL or misaligned pointer", fn);
    ST_TRY(st_cuda_require(fn));
    st_rope_table tb;
    st_rope_table_fill(rope, &tb);
    const cudaStream_t st = (cudaStream_t)stream;
    if (kv->type == STRATA_TYPE_F16)
        st_launch(st_k_mla_prep<true>, (unsigned)T, 256, 0, st, tb, d_kv, ldkv, d_kv_norm, eps, (int)s->kv_lora,
                  (int)s->n_rot, kv->k, d_qpe, ldqp, qhs, d_q, ldq, (int)H, d_pos, pos0);
    else
        st_launch(st_k_mla_prep<false>, (unsigned)T, 256, 0, st, tb, d_kv, ldkv, d_kv_norm, eps, (int)s->kv_lora,
                  (int)s->n_rot, kv->k, d_qpe, ldqp, qhs, d_q, ldq, (int)H, d_pos, pos0);
    ST_CUDA_CHECK_LAUNCH("st_k_mla_prep");
    return STRATA_OK;
}
