/* dequant.cuh - device-side decoders of the block formats, shared by the dequantize kernels
 * (dequant.cu) and, later, by the matrix kernels that decode weights on the fly.
 *
 * A decoder is a struct with the block geometry and one function, group(blk, j, v): the four
 * consecutive weights 4j..4j+3 of the block at blk, as floats. Every value is computed exactly as
 * the CPU dequantizer computes it: fp16 -> f32 exact, then f32 products (and sums, for the types
 * with a minimum) rounded one operation at a time (__fmul_rn/__fadd_rn forbid FMA contraction),
 * so the GPU output equals strata_dequantize_row bit for bit.
 *
 * Block pointers are 2-byte aligned (all these block sizes are even and tensor data is aligned),
 * so 16-bit loads are safe. */
#ifndef STRATA_CUDA_DEQUANT_CUH
#define STRATA_CUDA_DEQUANT_CUH

#include "common.cuh"

#include <stddef.h>

/* ---- helpers -------------------------------------------------------------------------------- */

/* Four bytes at a 2-byte aligned address, little-endian, as one word. */
static __device__ __forceinline__ uint32_t st_ld_u32_a2(const uint8_t *p) {
    return st_ld_u16(p) | (st_ld_u16(p + 2) << 16);
}

/* The four 4-bit quants of group j (0..7) of a 32-weight block whose 16 bytes of nibbles start at
 * qs: weights 0..15 are the low nibbles of qs[0..15], weights 16..31 the high nibbles. */
static __device__ __forceinline__ void st_nibbles4(const uint8_t *qs, int j, int q[4]) {
    const uint32_t w = st_ld_u32_a2(qs + 4 * (j & 3));
    const int sh = j < 4 ? 0 : 4;
#pragma unroll
    for (int k = 0; k < 4; k++) q[k] = (int)((w >> (8 * k + sh)) & 0xF);
}

/* ---- 32-weight block formats ---------------------------------------------------------------- */

/* Q8_0: d (fp16), 32 x int8. w = d * q. */
struct st_dq_q8_0 {
    static constexpr int QK = QK8_0, BYTES = (int)sizeof(block_q8_0);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const float d = st_dev_fp16(st_ld_u16(blk));
        const uint32_t w = st_ld_u32_a2(blk + 2 + 4 * j);
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = __fmul_rn((float)(int8_t)(w >> (8 * k)), d);
    }
};

/* Q4_0: d, 32 x 4-bit. w = (q - 8) * d. */
struct st_dq_q4_0 {
    static constexpr int QK = QK4_0, BYTES = (int)sizeof(block_q4_0);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const float d = st_dev_fp16(st_ld_u16(blk));
        int q[4];
        st_nibbles4(blk + 2, j, q);
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = __fmul_rn((float)(q[k] - 8), d);
    }
};

/* Q4_1: d, m, 32 x 4-bit. w = q * d + m. */
struct st_dq_q4_1 {
    static constexpr int QK = QK4_1, BYTES = (int)sizeof(block_q4_1);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const float d = st_dev_fp16(st_ld_u16(blk));
        const float m = st_dev_fp16(st_ld_u16(blk + 2));
        int q[4];
        st_nibbles4(blk + 4, j, q);
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = __fadd_rn(__fmul_rn((float)q[k], d), m);
    }
};

/* The 5-bit quants of group j: nibble as in Q4_0, fifth bit of weight e is bit e of qh. */
static __device__ __forceinline__ void st_q5_quants4(const uint8_t *qh, const uint8_t *qs, int j,
                                                     int q[4]) {
    const uint32_t h = st_ld_u32_a2(qh);
    st_nibbles4(qs, j, q);
#pragma unroll
    for (int k = 0; k < 4; k++) q[k] |= (int)(((h >> (4 * j + k)) & 1u) << 4);
}

/* Q5_0: d, qh (32 high bits), 32 x 4-bit. w = (q - 16) * d. */
struct st_dq_q5_0 {
    static constexpr int QK = QK5_0, BYTES = (int)sizeof(block_q5_0);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const float d = st_dev_fp16(st_ld_u16(blk));
        int q[4];
        st_q5_quants4(blk + 2, blk + 6, j, q);
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = __fmul_rn((float)(q[k] - 16), d);
    }
};

/* Q5_1: d, m, qh, 32 x 4-bit. w = q * d + m. */
struct st_dq_q5_1 {
    static constexpr int QK = QK5_1, BYTES = (int)sizeof(block_q5_1);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const float d = st_dev_fp16(st_ld_u16(blk));
        const float m = st_dev_fp16(st_ld_u16(blk + 2));
        int q[4];
        st_q5_quants4(blk + 4, blk + 8, j, q);
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = __fadd_rn(__fmul_rn((float)q[k], d), m);
    }
};

/* The 16 levels of IQ4_NL (-127 -104 -83 -65 -49 -35 -22 -10 1 13 25 38 53 69 89 113), packed
 * four int8 to a word and picked with byte permutes, so the lookup stays in registers. */
static __device__ __forceinline__ int st_iq4nl_level(int q) {
    const uint32_t lo = __byte_perm(0xbfad9881u, 0xf6eaddcfu, (unsigned)(q & 7));
    const uint32_t hi = __byte_perm(0x26190d01u, 0x71594535u, (unsigned)(q & 7));
    return (int)(int8_t)((q & 8) ? hi : lo);
}

/* IQ4_NL: d, 32 x 4-bit indices into a fixed non-linear table. w = d * table[q]. */
struct st_dq_iq4_nl {
    static constexpr int QK = QK4_NL, BYTES = (int)sizeof(block_iq4_nl);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const float d = st_dev_fp16(st_ld_u16(blk));
        int q[4];
        st_nibbles4(blk + 2, j, q);
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = __fmul_rn(d, (float)st_iq4nl_level(q[k]));
    }
};

/* Q8_1: d, s (unused here), 32 x int8. w = q * d. */
struct st_dq_q8_1 {
    static constexpr int QK = QK8_1, BYTES = (int)sizeof(block_q8_1);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const float d = st_dev_fp16(st_ld_u16(blk));
        const uint32_t w = st_ld_u32_a2(blk + 4 + 4 * j);
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = __fmul_rn((float)(int8_t)(w >> (8 * k)), d);
    }
};

/* ---- K-quants: 256-weight super-blocks ------------------------------------------------------ */
/* Group j (0..63) is weights e = 4j..4j+3: always inside one sub-block of 16, with consecutive l.
 * Byte offsets below are those of blocks.h's structs (checked at the end of this file). */

/* 6-bit scale and min of sub-block j (0..7) of Q4_K/Q5_K from the 12 packed bytes at q. */
static __device__ __forceinline__ void st_dev_scale_min_k4(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = (int)(st_ld_u8(q + j) & 63);
        *m = (int)(st_ld_u8(q + j + 4) & 63);
    } else {
        const uint32_t a = st_ld_u8(q + j + 4);
        *sc = (int)((a & 0xF) | ((st_ld_u8(q + j - 4) >> 6) << 4));
        *m = (int)((a >> 4) | ((st_ld_u8(q + j) >> 6) << 4));
    }
}

/* Q2_K: scales[16] (4-bit scale | 4-bit min << 4), qs[64], d, dmin. Weight e = 128c + 32s + l:
 * q = (qs[32c + l] >> 2s) & 3, sub-block e / 16. w = (d * scale) * q - (dmin * min). */
struct st_dq_q2_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q2_K);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const int e = 4 * j, c = e >> 7, s = (e >> 5) & 3, l = e & 31;
        const float d = st_dev_fp16(st_ld_u16(blk + 80)), dmin = st_dev_fp16(st_ld_u16(blk + 82));
        const uint32_t sc = st_ld_u8(blk + (e >> 4));
        const float dl = __fmul_rn(d, (float)(sc & 0xF)), ml = __fmul_rn(dmin, (float)(sc >> 4));
        const uint32_t w = st_ld_u32_a2(blk + 16 + 32 * c + l);
#pragma unroll
        for (int k = 0; k < 4; k++)
            v[k] = __fsub_rn(__fmul_rn(dl, (float)((w >> (8 * k + 2 * s)) & 3)), ml);
    }
};

/* Q3_K: hmask[32], qs[64], scales[12] (16 6-bit signed scales, offset 32), d. Weight
 * e = 128c + 32s + l: low 2 bits (qs[32c + l] >> 2s) & 3, minus 4 unless bit 4c + s of hmask[l]
 * is set. w = (d * scale) * q. */
struct st_dq_q3_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q3_K);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const int e = 4 * j, c = e >> 7, s = (e >> 5) & 3, l = e & 31, sb = e >> 4;
        const float d = st_dev_fp16(st_ld_u16(blk + 108));
        const int lo = (int)((st_ld_u8(blk + 96 + (sb & 7)) >> (4 * (sb >> 3))) & 0xF);
        const int hi = (int)((st_ld_u8(blk + 96 + 8 + (sb & 3)) >> (2 * (sb >> 2))) & 3);
        const float dl = __fmul_rn(d, (float)((lo | (hi << 4)) - 32));
        const uint32_t w = st_ld_u32_a2(blk + 32 + 32 * c + l);
        const uint32_t h = st_ld_u32_a2(blk + l);
        const int bit = 4 * c + s;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int q = (int)((w >> (8 * k + 2 * s)) & 3) - (((h >> (8 * k + bit)) & 1) ? 0 : 4);
            v[k] = __fmul_rn(dl, (float)q);
        }
    }
};

/* Q4_K: d, dmin, scales[12] (8 6-bit scales and mins), qs[128]. Weight e = 64c + 32h + l is
 * nibble h of qs[32c + l], sub-block e / 32. w = (d * scale) * q - (dmin * min). */
struct st_dq_q4_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q4_K);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const int e = 4 * j, c = e >> 6, h = (e >> 5) & 1, l = e & 31;
        const float d = st_dev_fp16(st_ld_u16(blk)), dmin = st_dev_fp16(st_ld_u16(blk + 2));
        int sc, m;
        st_dev_scale_min_k4(blk + 4, e >> 5, &sc, &m);
        const float ds = __fmul_rn(d, (float)sc), dm = __fmul_rn(dmin, (float)m);
        const uint32_t w = st_ld_u32_a2(blk + 16 + 32 * c + l);
#pragma unroll
        for (int k = 0; k < 4; k++)
            v[k] = __fsub_rn(__fmul_rn(ds, (float)((w >> (8 * k + 4 * h)) & 0xF)), dm);
    }
};

/* Q5_K: as Q4_K plus qh[32]: weight 32sb + l has fifth bit (qh[l] >> sb) & 1. */
struct st_dq_q5_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q5_K);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const int e = 4 * j, sb = e >> 5, c = sb >> 1, h = sb & 1, l = e & 31;
        const float d = st_dev_fp16(st_ld_u16(blk)), dmin = st_dev_fp16(st_ld_u16(blk + 2));
        int sc, m;
        st_dev_scale_min_k4(blk + 4, sb, &sc, &m);
        const float ds = __fmul_rn(d, (float)sc), dm = __fmul_rn(dmin, (float)m);
        const uint32_t hb = st_ld_u32_a2(blk + 16 + l);
        const uint32_t w = st_ld_u32_a2(blk + 48 + 32 * c + l);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int q = (int)(((w >> (8 * k + 4 * h)) & 0xF) | (((hb >> (8 * k + sb)) & 1) << 4));
            v[k] = __fsub_rn(__fmul_rn(ds, (float)q), dm);
        }
    }
};

/* Q6_K: ql[128], qh[64], int8 scales[16], d. Weight e = 128c + 32s + l: low nibble of
 * ql[64c + 32(s & 1) + l] >> 4(s >> 1), high 2 bits of qh[32c + l] >> 2s, q = that - 32.
 * w = (d * scale[e / 16]) * q. */
struct st_dq_q6_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q6_K);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const int e = 4 * j, c = e >> 7, s = (e >> 5) & 3, l = e & 31;
        const float d = st_dev_fp16(st_ld_u16(blk + 208));
        const float dl = __fmul_rn(d, (float)(int8_t)st_ld_u8(blk + 192 + (e >> 4)));
        const uint32_t w = st_ld_u32_a2(blk + 64 * c + 32 * (s & 1) + l);
        const uint32_t h = st_ld_u32_a2(blk + 128 + 32 * c + l);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int q = (int)(((w >> (8 * k + 4 * (s >> 1))) & 0xF) |
                                (((h >> (8 * k + 2 * s)) & 3) << 4)) - 32;
            v[k] = __fmul_rn(dl, (float)q);
        }
    }
};

/* Q8_K: d (f32, read as two 16-bit halves so 2-byte alignment suffices), qs[256], bsums.
 * w = d * q. */
struct st_dq_q8_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q8_K);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const float d = __uint_as_float(st_ld_u32_a2(blk));
        const uint32_t w = st_ld_u32_a2(blk + 4 + 4 * j);
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = __fmul_rn(d, (float)(int8_t)(w >> (8 * k)));
    }
};

/* ---- plain formats (one weight per "block") ------------------------------------------------- */

struct st_dq_f16 {
    static constexpr int BYTES = 2;
    static __device__ __forceinline__ float one(const uint8_t *p) { return st_dev_fp16(st_ld_u16(p)); }
};
struct st_dq_bf16 {
    static constexpr int BYTES = 2;
    static __device__ __forceinline__ float one(const uint8_t *p) { return st_dev_bf16(st_ld_u16(p)); }
};
struct st_dq_f32 {
    static constexpr int BYTES = 4;
    static __device__ __forceinline__ float one(const uint8_t *p) { return __ldg((const float *)p); }
};

/* ---- layout checks: the byte offsets the decoders use ------------------------------------- */

static_assert(offsetof(block_q8_1, qs) == 4, "q8_1");
static_assert(offsetof(block_q2_K, qs) == 16 && offsetof(block_q2_K, d) == 80 &&
              offsetof(block_q2_K, dmin) == 82, "q2_K");
static_assert(offsetof(block_q3_K, qs) == 32 && offsetof(block_q3_K, scales) == 96 &&
              offsetof(block_q3_K, d) == 108, "q3_K");
static_assert(offsetof(block_q4_K, scales) == 4 && offsetof(block_q4_K, qs) == 16, "q4_K");
static_assert(offsetof(block_q5_K, qh) == 16 && offsetof(block_q5_K, qs) == 48, "q5_K");
static_assert(offsetof(block_q6_K, qh) == 128 && offsetof(block_q6_K, scales) == 192 &&
              offsetof(block_q6_K, d) == 208, "q6_K");
static_assert(offsetof(block_q8_K, qs) == 4, "q8_K");
static_assert(offsetof(block_q4_1, qs) == 4 && offsetof(block_q5_0, qs) == 6 &&
              offsetof(block_q5_1, qh) == 4 && offsetof(block_q5_1, qs) == 8, "32-weight blocks");

#endif /* STRATA_CUDA_DEQUANT_CUH */
