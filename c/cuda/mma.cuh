/* mma.cuh - the tensor-core building blocks the prompt tiles (mmq.cu) and the flash attention
 * (attn.cu) share: ldmatrix loads of 8x8 f16 blocks from shared memory (plain and transposed),
 * mma.sync m16n8k16 with f16 inputs and f32 accumulators, packing two floats into the f16 pair
 * a fragment register holds, cp.async copies into shared memory. Fragment layouts as in the
 * PTX ISA: for a lane, g = lane / 4, t = lane % 4; A rows g and g + 8, columns 2t, 2t + 1 (and
 * + 8); B column g, rows 2t, 2t + 1 (and + 8); C rows g and g + 8, columns 2t, 2t + 1.
 *
 * Older GPUs (docs/OLDER_GPUS.md): ldmatrix needs sm_75, which every CUDA_ARCH the build takes
 * has. The m16n8k16 / m16n8k32 mma shapes and cp.async need sm_80; on sm_75 they are built from
 * the shapes Turing has (two f16 m16n8k8; int8 m8n8k16, four or two of them: exact integer sums,
 * the same bits) and cp.async is a plain 16-byte load and store (its groups complete at once).
 * ST_MMA_SM80 says which form a device pass compiles. */
#ifndef STRATA_CUDA_MMA_CUH
#define STRATA_CUDA_MMA_CUH

#include "common.cuh"

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define ST_MMA_SM80 1
#else
#define ST_MMA_SM80 0
#endif

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
#if ST_MMA_SM80
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else /* sm_75: k 0-7 (a[0], a[1], b0), then k 8-15 (a[2], a[3], b1); f32 sums in another order */
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5}, {%6}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b0));
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5}, {%6}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[2]), "r"(a[3]), "r"(b1));
#endif
}

/* Two 8x8 b16 blocks (lanes 0-15 give the row addresses): for int8 tiles, 16 rows x 16 bytes. */
static __device__ __forceinline__ void st_ldsm_x2(uint32_t r[2], const void *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}

#if !ST_MMA_SM80
/* sm_75's int8 shape: c[0..1] += a (8x16, row) * b (16x8, col); lane: A row g, bytes 4t..4t+3;
 * B column g, bytes 4t..4t+3; C row g, columns 2t, 2t + 1. Exact int32 sums. */
static __device__ __forceinline__ void st_mma_i8_m8n8k16(int c[2], uint32_t a, uint32_t b) {
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
                 : "+r"(c[0]), "+r"(c[1]) : "r"(a), "r"(b));
}
#endif

/* c = c0 + a (16x32, row) * b (32x8, col), signed bytes, exact int32 sums. The fragments hold 4
 * bytes per register: A rows g / g + 8, bytes 4t..4t+3 (and + 16); B column g, bytes 4t..4t+3
 * (and + 16). ldmatrix of 16-byte rows gives exactly these layouts. c0 = ST_I2F_BIAS makes each
 * sum the bits of a float (st_i2f_biased). */
static __device__ __forceinline__ void st_mma_i8_k32(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1,
                                                     int c0 = 0) {
#if ST_MMA_SM80
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c0));
#else /* sm_75: rows g (a[0], a[2]) and g + 8 (a[1], a[3]), each bytes 0-15 then 16-31 */
    c[0] = c[1] = c[2] = c[3] = c0;
    st_mma_i8_m8n8k16(c + 0, a[0], b0);
    st_mma_i8_m8n8k16(c + 0, a[2], b1);
    st_mma_i8_m8n8k16(c + 2, a[1], b0);
    st_mma_i8_m8n8k16(c + 2, a[3], b1);
#endif
}

/* The same 16 bytes deep: A rows g / g + 8, bytes 4t..4t+3; B column g, bytes 4t..4t+3. */
static __device__ __forceinline__ void st_mma_i8_k16(int c[4], const uint32_t a[2], uint32_t b0, int c0 = 0) {
#if ST_MMA_SM80
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
                 "{%4, %5}, {%6}, {%7, %7, %7, %7};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b0), "r"(c0));
#else /* sm_75: rows g (a[0]) and g + 8 (a[1]) */
    c[0] = c[1] = c[2] = c[3] = c0;
    st_mma_i8_m8n8k16(c + 0, a[0], b0);
    st_mma_i8_m8n8k16(c + 2, a[1], b0);
#endif
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
#if ST_MMA_SM80
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
#else /* sm_75: through registers, done when it returns (L2 only, as .cg) */
    *(uint4 *)dst = valid ? __ldcg((const uint4 *)src) : make_uint4(0u, 0u, 0u, 0u);
#endif
}
static __device__ __forceinline__ void st_cp_async_commit() {
#if ST_MMA_SM80
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
static __device__ __forceinline__ void st_cp_async_wait() {
#if ST_MMA_SM80
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* Two floats as the f16 pair (x low, y high) of one fragment register. */
static __device__ __forceinline__ uint32_t st_h2(float x, float y) {
    const __half2 h = __floats2half2_rn(x, y);
    return *(const uint32_t *)&h;
}

#endif /* STRATA_CUDA_MMA_CUH */
