/* q8_sm60.cuh - the SM60 Q8_0 decode GEMV (q8_sm60 / STRATA_Q8_SM60=1, opt-in): y = W x for
 * 1..8 Q8_1 activation columns over a Q8_0 matrix's packed planes, written for GPUs whose integer
 * dot product is slow or missing (Pascal GP100, compute 6.0, has no __dp4a). Kernel and launch in
 * q8_sm60.cu; the one caller is st_mmv_launch_q (mmv.cu) for matrices a session marked
 * (st_cuda_mat.gemv_sm60). Design from the Pascal GP100 write-up (docs/OLDER_GPUS.md).
 *
 * Weights: the prompt tiles' Q8_0 copy (cuda_mmq.h, st_cuda_mmq_tiles_make): quants as ne1 rows of
 * ne0 bytes (16-byte aligned: ne0 % 32 == 0), then the f16 scales block-major,
 * d[ne0 / 32][ne1 rounded up to 8].
 * Scheme: LPR lanes per row (32 for rows of 2048+ weights, 16 from 1024, else 8), each lane a
 * 16-byte piece (half a block) at a time through the read-only cache, lane l taking pieces
 * l, l + LPR, ...; each block first copies the call's activation columns once into shared memory
 * as an int8 plane xq[c][ne0] plus float scales xd[c][ne0 / 32], so every activation read is a
 * 16-byte shared load; a piece's 16 products are summed exactly in int32 (st_q8s_dp4a), scaled by
 * d_w * d_x in f32; the row's lanes then add by shuffles (no barrier per row). Blocks are
 * persistent (STRATA_Q8_SM60_BPS per SM, default 4) and walk the row groups.
 * Not the exact kernels' bits: the pieces' f32 sums come in another order than st_k_mmv_q's (the
 * integer parts are the same), within ~1e-6 relative of the double sum of the exact int32 block
 * products times the scales (tools/q8_sm60_check.cu). Calls whose shared memory exceeds 48 KiB
 * (rows above 5,440 weights with 8 columns, 6,144 with 7) are declined and take the usual kernel. */
#ifndef STRATA_CUDA_Q8_SM60_CUH
#define STRATA_CUDA_Q8_SM60_CUH

#include "common.cuh"
#include "quantize.cuh"

/* The integer dot product of 4 signed bytes a and b, plus c: __dp4a where the device has it (6.1+)
 * unless STRATA_NO_DP4A=1 (a build flag, so a GPU that has it can test the other form); else 4
 * integer multiply-adds of the sign-extended bytes (the same int32 result). */
static __device__ __forceinline__ int st_q8s_dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610 && !(defined(STRATA_NO_DP4A) && STRATA_NO_DP4A)
    return __dp4a(a, b, c);
#else /* mad.lo by asm: written in C, nvcc turns the four products back into dp4a where it has one */
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int ai = (int)(int8_t)(a >> (8 * i)), bi = (int)(int8_t)(b >> (8 * i));
        asm("mad.lo.s32 %0, %1, %2, %0;" : "+r"(c) : "r"(ai), "r"(bi));
    }
    return c;
#endif
}

/* One call: packed weights (t1: the up matrix of a fused SwiGLU, else NULL), Q8_1 columns xq
 * (ncols rows of ne0 / 32 blocks), y[c * ne1 + r]. */
struct st_q8s_call {
    const uint8_t *t0, *t1;
    int ne0, ne1, ncols;
    int bps; /* persistent blocks per SM (1..32; else STRATA_Q8_SM60_BPS) */
    const block_q8_1 *xq;
    float *y;
    cudaStream_t stream;
};

/* Dynamic shared memory of a call, 0 when it is declined (over 48 KiB, or ne0 not a positive
 * multiple of 32, ncols outside 1..8). */
size_t st_q8s_smem(int ne0, int ncols);

/* Launches the kernel (st_q8s_smem(c.ne0, c.ncols) must be non-zero). */
strata_status st_q8s_launch(const st_q8s_call &c);

#endif /* STRATA_CUDA_Q8_SM60_CUH */
