/* q8_sm60.cu - the SM60 Q8_0 decode GEMV's kernel and launch (scheme and layouts: q8_sm60.cuh).
 * One kernel per (columns NC = 1..8, lanes per row LPR = 8, 16, 32): 24 kernels. */
#include "q8_sm60.cuh"

#ifndef STRATA_Q8_SM60_BPS
#define STRATA_Q8_SM60_BPS 4 /* persistent blocks per SM */
#endif
#define ST_Q8S_THREADS 256   /* 8 warps a block */

/* Copies the call's activation columns into shared memory: the quants as one int8 plane
 * xq[c * ne0 + k] (16-byte aligned rows), the scales as floats xd[c * nsub + b]. */
static __device__ __forceinline__ void st_q8s_stage_x(const block_q8_1 *__restrict__ xq, int ncols, int nsub,
                                                      uint32_t *s_q, float *s_d) {
    const int nb = ncols * nsub;
    const uint32_t *g = (const uint32_t *)xq; /* 9 words a block: (d, s), then 8 of quants */
    for (int i = (int)threadIdx.x; i < nb * 8; i += ST_Q8S_THREADS) {
        const int b = i >> 3, w = i & 7;
        s_q[i] = __ldg(g + (size_t)b * 9 + 1 + w); /* block b's word w: plane word 8 b + w */
    }
    for (int b = (int)threadIdx.x; b < nb; b += ST_Q8S_THREADS)
        s_d[b] = st_dev_fp16(__ldg(g + (size_t)b * 9) & 0xFFFFu);
}

/* acc[c] += row r's dot with column c over this lane's pieces (16 bytes each, p = l, l + LPR, ...). */
template <int NC, int LPR>
static __device__ __forceinline__ void st_q8s_row(const uint8_t *__restrict__ t, int ne0, int ne1, int r,
                                                  int l, int ncols, const uint4 *s_q4, const float *s_d,
                                                  float acc[NC]) {
    const uint4 *wq = (const uint4 *)(t + (size_t)r * (size_t)ne0);
    const uint16_t *wd = (const uint16_t *)(t + (size_t)ne1 * (size_t)ne0);
    const int npc = ne0 / 16, nsub = ne0 / 32, np8 = (ne1 + 7) / 8 * 8;
    for (int p = l; p < npc; p += LPR) {
        const uint4 w = __ldg(wq + p);
        const float dw = st_dev_fp16(__ldg(wd + (size_t)(p >> 1) * (size_t)np8 + r));
#pragma unroll
        for (int c = 0; c < NC; c++) {
            if (c < ncols) {
                const uint4 x = s_q4[(size_t)c * npc + p];
                int s = st_q8s_dp4a((int)w.x, (int)x.x, 0);
                s = st_q8s_dp4a((int)w.y, (int)x.y, s);
                s = st_q8s_dp4a((int)w.z, (int)x.z, s);
                s = st_q8s_dp4a((int)w.w, (int)x.w, s);
                acc[c] += dw * s_d[c * nsub + (p >> 1)] * (float)s;
            }
        }
    }
}

/* The sum over the LPR lanes of a row group (aligned groups of LPR lanes in the warp). */
template <int LPR>
static __device__ __forceinline__ float st_q8s_sum(float v) {
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, LPR);
    return v;
}

template <int NC, int LPR>
static __global__ void __launch_bounds__(ST_Q8S_THREADS)
st_k_q8_sm60(const uint8_t *__restrict__ t0, const uint8_t *__restrict__ t1, int ne0, int ne1,
             const block_q8_1 *__restrict__ xq, int ncols, float *__restrict__ y) {
    extern __shared__ uint4 s_q8s[];
    constexpr int RPB = ST_Q8S_THREADS / LPR; /* rows a block takes per pass */
    const int nsub = ne0 / 32;
    const uint4 *s_q4 = s_q8s;
    const float *s_d = (const float *)(s_q8s + (size_t)ncols * (ne0 / 16));
    st_pdl_enter(); /* the activations come from the kernel before */
    st_q8s_stage_x(xq, ncols, nsub, (uint32_t *)s_q8s, (float *)s_d);
    __syncthreads(); /* the only barrier: rows below are independent */
    const int l = (int)threadIdx.x % LPR, g = (int)threadIdx.x / LPR;
    for (int r0 = (int)blockIdx.x * RPB; r0 < ne1; r0 += (int)gridDim.x * RPB) { /* block-uniform */
        const int r = r0 + g;
        const bool live = r < ne1; /* a dead group still joins its warp's shuffles */
        float a[NC], b[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) a[c] = b[c] = 0.0f;
        if (live) {
            st_q8s_row<NC, LPR>(t0, ne0, ne1, r, l, ncols, s_q4, s_d, a);
            if (t1) st_q8s_row<NC, LPR>(t1, ne0, ne1, r, l, ncols, s_q4, s_d, b);
        }
#pragma unroll
        for (int c = 0; c < NC; c++) {
            if (c < ncols) {
                float o = st_q8s_sum<LPR>(a[c]);
                if (t1) {
                    const float u = st_q8s_sum<LPR>(b[c]);
                    o = o / (1.0f + expf(-o)) * u; /* silu(gate) * up, as st_mmv_silu */
                }
                if (live && l == c % LPR) y[(size_t)c * ne1 + r] = o;
            }
        }
    }
}

size_t st_q8s_smem(int ne0, int ncols) {
    if (ne0 <= 0 || ne0 % 32 || ncols < 1 || ncols > 8) return 0;
    const size_t smem = (size_t)ncols * (size_t)ne0 + (size_t)ncols * (size_t)(ne0 / 32) * sizeof(float);
    return smem <= 48 * 1024 ? smem : 0;
}

template <int NC, int LPR>
static strata_status st_q8s_go(const st_q8s_call &c, size_t smem) {
    constexpr int RPB = ST_Q8S_THREADS / LPR;
    st_cuda_device_info info;
    const int sms = st_cuda_device_info_get(&info) == STRATA_OK && info.sm_count > 0 ? info.sm_count : 1;
    const int bps = c.bps >= 1 && c.bps <= 32 ? c.bps : STRATA_Q8_SM60_BPS;
    const int64_t groups = (c.ne1 + RPB - 1) / RPB, cap = (int64_t)bps * sms;
    const unsigned grid = (unsigned)(groups < cap ? groups : cap);
    st_launch(st_k_q8_sm60<NC, LPR>, grid, ST_Q8S_THREADS, smem, c.stream, c.t0, c.t1, c.ne0, c.ne1, c.xq,
              c.ncols, c.y);
    ST_CUDA_CHECK_LAUNCH("st_k_q8_sm60");
    return STRATA_OK;
}

template <int NC>
static strata_status st_q8s_lpr(const st_q8s_call &c, size_t smem) {
    if (c.ne0 >= 2048) return st_q8s_go<NC, 32>(c, smem);
    if (c.ne0 >= 1024) return st_q8s_go<NC, 16>(c, smem);
    return st_q8s_go<NC, 8>(c, smem);
}

strata_status st_q8s_launch(const st_q8s_call &c) {
    const size_t smem = st_q8s_smem(c.ne0, c.ncols);
    if (!smem || !c.t0 || ((uintptr_t)c.t0 & 15) || (c.t1 && ((uintptr_t)c.t1 & 15)))
        return st_error(STRATA_ERR_INVALID_ARG, "st_q8s_launch: a call the SM60 GEMV declines");
    switch (c.ncols) {
    case 1: return st_q8s_lpr<1>(c, smem);
    case 2: return st_q8s_lpr<2>(c, smem);
    case 3: return st_q8s_lpr<3>(c, smem);
    case 4: return st_q8s_lpr<4>(c, smem);
    case 5: return st_q8s_lpr<5>(c, smem);
    case 6: return st_q8s_lpr<6>(c, smem);
    case 7: return st_q8s_lpr<7>(c, smem);
    default: return st_q8s_lpr<8>(c, smem);
    }
}
