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
 * so 16-bit loads are safe; MXFP4's 17-byte blocks are read byte by byte. */
#ifndef STRATA_CUDA_DEQUANT_CUH
#define STRATA_CUDA_DEQUANT_CUH

#include "common.cuh"
#include "iq_grids.cuh"

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

/* ---- IQ formats and MXFP4 (codebooks: iq_grids.cuh) --------------------------------------- */
/* In ggml's order of operations: y = (db * magnitude) * sign, db a product of f32 factors. */

static __device__ __forceinline__ float st_dq_neg(float v, uint32_t neg) { return neg ? -v : v; }
/* The 8 sign bits of a 7-bit pattern (ksigns_iq2xs: bit 7 makes the count even). */
static __device__ __forceinline__ uint32_t st_dq_ksigns(uint32_t s7) {
    return s7 | ((uint32_t)(__popc(s7) & 1) << 7);
}

/* IQ4_XS: d, scales_h, scales_l[4], qs[128]. Weight e = 32j + 16h + l: nibble h of qs[16j + l];
 * 6-bit scale (offset 32). w = (d * scale) * level. */
struct st_dq_iq4_xs {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq4_xs);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const int e = 4 * j, sb = e >> 5, h = (e >> 4) & 1, l = e & 15;
        const int lo = (int)((st_ld_u8(blk + 4 + (sb >> 1)) >> (4 * (sb & 1))) & 0xF);
        const int hi = (int)((st_ld_u16(blk + 2) >> (2 * sb)) & 3);
        const float dl = __fmul_rn(st_dev_fp16(st_ld_u16(blk)), (float)((lo | (hi << 4)) - 32));
        const uint32_t w = st_ld_u32_a2(blk + 8 + 16 * sb + l);
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = __fmul_rn(dl, (float)st_iq4nl_level((int)((w >> (8 * k + 4 * h)) & 0xF)));
    }
};

/* IQ3_XXS: weights 8k + 4h .. + 3 of sub-block ib: grid[qs[8ib + 2k + h]], signs from the 7-bit
 * pattern k of word ib (at 66); db = (d * (0.5 + scale)) * 0.5. */
struct st_dq_iq3_xxs {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq3_xxs);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const int e = 4 * j, ib = e >> 5, k8 = (e >> 3) & 3, h = (e >> 2) & 1;
        const uint32_t aux = st_ld_u32_a2(blk + 66 + 4 * ib);
        const float db = __fmul_rn(__fmul_rn(st_dev_fp16(st_ld_u16(blk)), 0.5f + (float)(aux >> 28)), 0.5f);
        const uint32_t sg = st_dq_ksigns((aux >> (7 * k8)) & 127u) >> (4 * h);
        const uint32_t g = __ldg(&st_dev_iq3xxs_grid[st_ld_u8(blk + 2 + 8 * ib + 2 * k8 + h)]);
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = st_dq_neg(__fmul_rn(db, (float)((g >> (8 * k)) & 0xFF)), (sg >> k) & 1);
    }
};

/* IQ3_S: group m of 4 weights: index qs[m] | bit m % 8 of qh[m / 8] << 8, sign of weight 4m + k
 * bit 4(m % 2) + k of signs[m / 2]; db = d * (1 + 2 * scale) (nibble of scales[m / 16]). */
struct st_dq_iq3_s {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq3_s);
    static __device__ __forceinline__ void group(const uint8_t *blk, int m, float v[4]) {
        const int sb = m >> 3;
        const int sc = (int)((st_ld_u8(blk + 106 + (sb >> 1)) >> (4 * (sb & 1))) & 0xF);
        const float db = __fmul_rn(st_dev_fp16(st_ld_u16(blk)), (float)(1 + 2 * sc));
        const uint32_t idx = st_ld_u8(blk + 2 + m) | (((st_ld_u8(blk + 66 + sb) >> (m & 7)) & 1u) << 8);
        const uint32_t g = __ldg(&st_dev_iq3s_grid[idx]);
        const uint32_t sg = st_ld_u8(blk + 74 + (m >> 1)) >> (4 * (m & 1));
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = st_dq_neg(__fmul_rn(db, (float)((g >> (8 * k)) & 0xFF)), (sg >> k) & 1);
    }
};

/* The four magnitudes 4h..4h+3 of a u64 IQ2 grid entry scaled by db, negated by bits 4h.. of sg. */
static __device__ __forceinline__ void st_dq_iq2_4(uint64_t g, int h, uint32_t sg, float db, float v[4]) {
    const uint32_t w = (uint32_t)(g >> (32 * h));
    sg >>= 4 * h;
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = st_dq_neg(__fmul_rn(db, (float)((w >> (8 * k)) & 0xFF)), (sg >> k) & 1);
}
/* (d * (0.5 + s)) * 0.25 */
static __device__ __forceinline__ float st_dq_iq2_db(const uint8_t *blk, uint32_t s) {
    return __fmul_rn(__fmul_rn(st_dev_fp16(st_ld_u16(blk)), 0.5f + (float)s), 0.25f);
}

/* IQ2_XXS: sub-block ib at 2 + 8ib: 4 index bytes, then a word (4 x 7 sign bits, scale at 28). */
struct st_dq_iq2_xxs {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq2_xxs);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const int e = 4 * j, ib = e >> 5, l = (e >> 3) & 3, h = (e >> 2) & 1;
        const uint32_t aux = st_ld_u32_a2(blk + 6 + 8 * ib);
        const uint64_t g = __ldg(&st_dev_iq2xxs_grid[st_ld_u8(blk + 2 + 8 * ib + l)]);
        st_dq_iq2_4(g, h, st_dq_ksigns((aux >> (7 * l)) & 127u), st_dq_iq2_db(blk, aux >> 28), v);
    }
};

/* IQ2_XS: u16 qs[4ib + l] = 9-bit index | 7 sign bits << 9; scales[ib] (at 66) nibble l / 2. */
struct st_dq_iq2_xs {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq2_xs);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const int e = 4 * j, ib = e >> 5, l = (e >> 3) & 3, h = (e >> 2) & 1;
        const uint32_t q = st_ld_u16(blk + 2 + 8 * ib + 2 * l);
        const uint32_t s = (st_ld_u8(blk + 66 + ib) >> (4 * (l >> 1))) & 0xF;
        st_dq_iq2_4(__ldg(&st_dev_iq2xs_grid[q & 511u]), h, st_dq_ksigns(q >> 9), st_dq_iq2_db(blk, s), v);
    }
};

/* IQ2_S: index qs[4ib + l] | bits 2l..2l+1 of qh[ib] (at 66) << 8; signs qs[32 + 4ib + l];
 * scales[ib] at 74. */
struct st_dq_iq2_s {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq2_s);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const int e = 4 * j, ib = e >> 5, l = (e >> 3) & 3, h = (e >> 2) & 1;
        const uint32_t idx = st_ld_u8(blk + 2 + 4 * ib + l) | (((st_ld_u8(blk + 66 + ib) >> (2 * l)) & 3u) << 8);
        const uint32_t s = (st_ld_u8(blk + 74 + ib) >> (4 * (l >> 1))) & 0xF;
        st_dq_iq2_4(__ldg(&st_dev_iq2s_grid[idx]), h, st_ld_u8(blk + 34 + 4 * ib + l), st_dq_iq2_db(blk, s), v);
    }
};

/* Four IQ1 values (bytes 4h.. of grid entry g, in {-1, 0, 1}): dl * (g + delta). */
static __device__ __forceinline__ void st_dq_iq1_4(uint64_t g, int h, float dl, bool neg, float v[4]) {
    const uint32_t w = (uint32_t)(g >> (32 * h));
    const float delta = neg ? -0.125f : 0.125f; /* ST_IQ1S_DELTA */
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = __fmul_rn(dl, __fadd_rn((float)(int8_t)(w >> (8 * k)), delta));
}

/* IQ1_S: d, qs[32] at 2, qh (u16)[8] at 34: 4 x 3 high index bits, scale bits 12..14, delta
 * sign bit 15. dl = d * (2 scale + 1). */
struct st_dq_iq1_s {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq1_s);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const int e = 4 * j, ib = e >> 5, l = (e >> 3) & 3, h = (e >> 2) & 1;
        const uint32_t qh = st_ld_u16(blk + 34 + 2 * ib);
        const float dl = __fmul_rn(st_dev_fp16(st_ld_u16(blk)), (float)(2 * (int)((qh >> 12) & 7) + 1));
        const uint32_t idx = st_ld_u8(blk + 2 + 4 * ib + l) | (((qh >> (3 * l)) & 7u) << 8);
        st_dq_iq1_4(__ldg(&st_dev_iq1s_grid[idx]), h, dl, (qh & 0x8000u) != 0, v);
    }
};

/* IQ1_M: qs[32], qh[16] at 32 (a nibble per 8 weights: 3 index bits, delta sign bit 3), scales
 * (u16)[4] at 48 (3-bit scales per 16 weights; d = the fp16 of their four top nibbles). */
struct st_dq_iq1_m {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq1_m);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const int e = 4 * j, ib = e >> 5, l = (e >> 3) & 3, h = (e >> 2) & 1;
        const uint32_t s0 = st_ld_u16(blk + 48), s1 = st_ld_u16(blk + 50), s2 = st_ld_u16(blk + 52),
                       s3 = st_ld_u16(blk + 54);
        const float d = st_dev_fp16((s0 >> 12) | ((s1 >> 8) & 0xF0u) | ((s2 >> 4) & 0xF00u) | (s3 & 0xF000u));
        const uint32_t sw = st_ld_u16(blk + 48 + 2 * (ib >> 1)) >> (6 * (ib & 1) + 3 * (l >> 1));
        const float dl = __fmul_rn(d, (float)(2 * (int)(sw & 7) + 1));
        const uint32_t nib = (st_ld_u8(blk + 32 + 2 * ib + (l >> 1)) >> (4 * (l & 1))) & 0xF;
        const uint32_t idx = st_ld_u8(blk + 4 * ib + l) | ((nib & 7u) << 8);
        st_dq_iq1_4(__ldg(&st_dev_iq1s_grid[idx]), h, dl, (nib & 8u) != 0, v);
    }
};

/* MXFP4: e (E8M0), qs[16] (weights l and 16 + l: low and high nibble of qs[l]); 17-byte blocks,
 * byte loads only. w = level * 2^(e - 128) (levels: twice the E2M1 values). */
struct st_dq_mxfp4 {
    static constexpr int QK = QK_MXFP4, BYTES = (int)sizeof(block_mxfp4);
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
        const uint32_t e8 = st_ld_u8(blk);
        const float d = __uint_as_float(e8 < 2 ? 0x00200000u << e8 : (e8 - 1) << 23);
        const int e = 4 * j, sh = e < 16 ? 0 : 4, l = e & 15;
#pragma unroll
        for (int k = 0; k < 4; k++)
            v[k] = __fmul_rn((float)st_dev_kvalues_mxfp4[(st_ld_u8(blk + 1 + l + k) >> sh) & 0xF], d);
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
