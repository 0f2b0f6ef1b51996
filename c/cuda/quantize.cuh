/* quantize.cuh - activation quantization to Q8_1 on the GPU (the integer dot products' input) and
 * the device-side reader of a Q8_1 block.
 *
 * Q8_1 (block_q8_1 in c/format/quant/blocks.h, 36 bytes per 32 values): d = amax / 127 (fp16),
 * q[j] = round(x[j] / d) (roundf: halves away from zero; q = 0 when amax = 0),
 * s = d * sum(q) (fp16, rounded from the f32 product of the f32 d and the exact integer sum).
 * Limits of the format: s overflows fp16 (becomes inf) when |d * sum(q)| > 65504, i.e. blocks
 * whose values are large (amax above ~2000) and mostly of one sign; d itself overflows only for
 * amax above ~8.3e6. Types that use s (Q4_1, Q5_1, Q4_K, Q5_K) then give inf/nan.
 *
 * Layout of quantized activations: row c of an (ncols, ne0) f32 matrix (ne0 a multiple of 32)
 * becomes ne0 / 32 consecutive blocks starting at block c * (ne0 / 32): the flat array of
 * ncols * ne0 floats maps to the flat array of blocks, block i holding floats 32i..32i+31. */
#ifndef STRATA_CUDA_QUANTIZE_CUH
#define STRATA_CUDA_QUANTIZE_CUH

#include "common.cuh"

/* Enqueues the quantization of n floats (n a multiple of 32, n > 0) at x into n / 32 blocks at
 * q (4-byte aligned). No argument checks; returns the launch error if any. */
strata_status st_quantize_q8_1_launch(const float *x, block_q8_1 *q, int64_t n, cudaStream_t s);

/* Called by all 32 lanes of a warp; a block's 32 values are held V a lane (V = 1 or 4) by 32 / V
 * neighbouring lanes, lane l of them (l = lane % (32 / V)) holding values V l .. V l + V - 1.
 * Stores the block's quants and (d, s) word at b from the lanes with `store` set, with the
 * arithmetic described above (st_k_quantize_q8_1 and the norms that emit Q8_1 rows share it, so
 * their blocks are the same bits whatever V). */
template <int V>
static __device__ __forceinline__ void st_q8_1_put(const float v[V], block_q8_1 *b, int l, bool store) {
    static_assert(V == 1 || V == 4, "1 or 4 values a lane");
    float amax = fabsf(v[0]);
#pragma unroll
    for (int e = 1; e < V; e++) amax = fmaxf(amax, fabsf(v[e]));
#pragma unroll
    for (int o = 16 / V; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f;
    int qi[V], sum = 0;
#pragma unroll
    for (int e = 0; e < V; e++) {
        qi[e] = amax == 0.0f ? 0 : (int)roundf(v[e] / d);
        sum += qi[e];
    }
#pragma unroll
    for (int o = 16 / V; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (!store) return;
    if (V == 1) {
        b->qs[l] = (int8_t)qi[0];
    } else {
        uint32_t pk = 0;
#pragma unroll
        for (int e = 0; e < V; e++) pk |= (uint32_t)(qi[e] & 0xFF) << (8 * e);
        *(uint32_t *)(b->qs + V * l) = pk;
    }
    if (l == 0) {
        const uint32_t hd = __half_as_ushort(__float2half_rn(d));
        const uint32_t hs = __half_as_ushort(__float2half_rn(d * (float)sum));
        *(uint32_t *)b = hd | (hs << 16);
    }
}

/* A value a lane, lane j holding value j of the block. */
static __device__ __forceinline__ void st_q8_1_warp_put(float v, block_q8_1 *b, int lane) {
    st_q8_1_put<1>(&v, b, lane, true);
}

/* One Q8_1 block as the dot products use it: the 32 quants as 8 words (word i = values
 * 4i..4i+3, value 4i+k in byte k), d and s as floats. b must be 4-byte aligned. */
struct st_q8_1_vals {
    int u[8];
    float d, s;
};

static __device__ __forceinline__ void st_q8_1_load(const block_q8_1 *b, st_q8_1_vals &v) {
    const uint32_t ds = __ldg((const unsigned int *)b);
    const int *q = (const int *)b->qs;
#pragma unroll
    for (int i = 0; i < 8; i++) v.u[i] = __ldg(q + i);
    v.d = st_dev_fp16(ds & 0xFFFFu);
    v.s = st_dev_fp16(ds >> 16);
}

#endif /* STRATA_CUDA_QUANTIZE_CUH */
