/* moe_q8.cuh - the q8_1 quantization of activation rows on the device, shared by the grouped
 * MoE step (moe.cu: x before the gate/up GEMV, h before the down GEMV, the fused h rows of the
 * gate/up kernel) and the one-token router (moe_router.cu: x's q8_1 row in the router's launch),
 * so that both write the same bits. One warp per 32-value block, lane = element:
 * d = amax / 127 rounded to fp16 first, q = round(x / d), s = d * sum(q). Device code only (warp
 * shuffles): not for host includers of moe.cuh. */
#ifndef STRATA_CUDA_MOE_Q8_CUH
#define STRATA_CUDA_MOE_Q8_CUH

#include "common.cuh"

/* One q8_1 block from a warp's 32 values (lane = element): this lane's quant and the (d, s)
 * word (the same in every lane). */
static __device__ __forceinline__ int st_moe_q8_lane(float v, uint32_t *ds) {
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const __half dh = __float2half_rn(amax / 127.0f);
    const float d = __half2float(dh);
    int qi = 0;
    if (d > 0.0f) {
        qi = __float2int_rn(v / d);
        qi = qi > 127 ? 127 : (qi < -127 ? -127 : qi);
    }
    int sum = qi;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    *ds = (uint32_t)__half_as_ushort(dh) | ((uint32_t)__half_as_ushort(__float2half_rn(d * (float)sum)) << 16);
    return qi;
}

/* n_rows rows of n floats (row stride ld floats) -> q8_1 rows of n / 32 blocks: the blocks bi,
 * bi + nblk, ... of a grid's warps (st_k_moe_plan_quant runs it in all but its first block). */
static __device__ __forceinline__ void st_moe_quant_body(const float *__restrict__ x, int64_t ld, int64_t n_rows,
                                                         int64_t n, block_q8_1 *__restrict__ q, int64_t bi,
                                                         int64_t nblk) {
    const int lane = threadIdx.x & 31;
    const int64_t nb = n / 32, n_blocks = n_rows * nb;
    const int64_t warps = nblk * (blockDim.x / 32);
    for (int64_t b = bi * (blockDim.x / 32) + threadIdx.x / 32; b < n_blocks; b += warps) {
        const int64_t row = b / nb, col = b - row * nb;
        uint32_t ds;
        const int qi = st_moe_q8_lane(x[row * ld + col * 32 + lane], &ds);
        block_q8_1 *blk = q + b;
        blk->qs[lane] = (int8_t)qi;
        if (lane == 0) *(uint32_t *)blk = ds;
    }
}

#endif /* STRATA_CUDA_MOE_Q8_CUH */
