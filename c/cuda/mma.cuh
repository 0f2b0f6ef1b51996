/* mma.cuh - the tensor-core building blocks the prompt tiles (mmq.cu) and the flash attention
 * (attn.cu) share: ldmatrix loads of 8x8 f16 blocks from shared memory (plain and transposed),
 * mma.sync m16n8k16 with f16 inputs and f32 accumulators, packing two floats into the f16 pair
 * a fragment register holds, cp.async copies into shared memory. Fragment layouts as in the
 * PTX ISA: for a lane, g = lane / 4, t = lane % 4; A rows g and g + 8, columns 2t, 2t + 1 (and
 * + 8); B column g, rows 2t, 2t + 1 (and + 8); C rows g and g + 8, columns 2t, 2t + 1. */
#ifndef STRATA_CUDA_MMA_CUH
#define STRATA_CUDA_MMA_CUH

#include "common.cuh"

/* Four 8x8 f16 blocks; lane i gives the address of row i % 8 of block i / 8. */
static __device__ __forceinline__ void st_ldsm_x4(uint32_t r[4], const __half *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* The same, each block transposed (B fragments from a row-major [k][n] tile). */
static __device__ __forceinline__ void st_ldsm_x4_t(uint32_t r[4], const __half *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* c += a (16x16, row) * b (16x8, col); f16 in, f32 accumulate */
static __device__ __forceinline__ void st_mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two 8x8 b16 blocks (lanes 0-15 give the row addresses): for int8 tiles, 16 rows x 16 bytes. */
static __device__ __forceinline__ void st_ldsm_x2(uint32_t r[2], const void *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}

/* c = c0 + a (16x32, row) * b (32x8, col), signed bytes, exact int32 sums. The fragments hold 4
 * bytes per register: A rows g / g + 8, bytes 4t..4t+3 (and + 16); B column g, bytes 4t..4t+3
 * (and + 16). ldmatrix of 16-byte rows gives exactly these layouts. c0 = ST_I2F_BIAS makes each
 * sum the bits of a float (st_i2f_biased). */
static __device__ __forceinline__ void st_mma_i8_k32(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1,
                                                     int c0 = 0) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c0));
}

/* The same 16 bytes deep: A rows g / g + 8, bytes 4t..4t+3; B column g, bytes 4t..4t+3. */
static __device__ __forceinline__ void st_mma_i8_k16(int c[4], const uint32_t a[2], uint32_t b0, int c0 = 0) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
                 "{%4, %5}, {%6}, {%7, %7, %7, %7};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b0), "r"(c0));
}

/* Integer mma sums to floats without I2F (an eighth of the FP32 rate on sm_90; four per mma made
 * the conversion, not the mma, the int8 tiles' bound): 0x4B400000 is 1.5 * 2^23, where floats are
 * 1 apart, so the bits ST_I2F_BIAS + i read as a float are exactly 12582912 + i for |i| < 2^22
 * (a 32-deep dot of bytes is below 32 * 128 * 128 = 2^19); one FADD takes the offset off. */
#define ST_I2F_BIAS 0x4B400000
static __device__ __forceinline__ float st_i2f_biased(int biased) {
    return __int_as_float(biased) - 12582912.0f;
}

/* cp.async: 16 bytes global -> shared without passing through registers (sm_80+), so a block
 * can have the next tile in flight while it computes on this one. valid == false fills the 16
 * bytes with zeros (src-size 0; src must still be a mapped address). Groups: commit closes the
 * copies issued since the last commit; wait<N> returns when at most N groups are pending. */
static __device__ __forceinline__ void st_cp_async16(void *dst, const void *src, bool valid) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
static __device__ __forceinline__ void st_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
static __device__ __forceinline__ void st_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/* Two floats as the f16 pair (x low, y high) of one fragment register. */
static __device__ __forceinline__ uint32_t st_h2(float x, float y) {
    const __half2 h = __floats2half2_rn(x, y);
    return *(const uint32_t *)&h;
}

#endif /* STRATA_CUDA_MMA_CUH */
