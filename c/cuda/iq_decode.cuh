/* iq_decode.cuh - the dp4a decoders of the codebook formats (IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ1_S, IQ1_M) and of MXFP4, in the interface of mmv.cuh's decoders (QK, BYTES, KIND,
 * decode(blk, sub, w): sub-block sub of 32 weights as eight int8x4 words plus scales), so that
 * the decode GEMV (mmv.cu), the grouped expert kernels (moe.cu, through moe.cuh's st_w_mmv) and
 * the prompt tiles (mmq.cu, the same adapter) share them. Pure device functions: c/cuda/dev/
 * mmv_emu.cpp runs them on the CPU.
 *
 * The codebooks come from iq_grids.cuh through a table source TAB: st_iq_tab_ldg reads the
 * device arrays through the read-only cache; st_iq_tab_smem reads copies that the kernel staged
 * in shared memory (st_iq_tab_smem::stage, called by every thread of the block before any
 * decode; STRATA_IQ_STAGE_TABLES). Both give the same integers, so the same bits.
 *
 * Exact integer forms (the sums the dp4a combine takes stay exact):
 *   IQ2_XXS / IQ2_XS / IQ2_S  w = d * (0.5 + s) / 4 * g = (d / 8) * (2s + 1) * g
 *   IQ1_S / IQ1_M             w = d * (2s + 1) * (g + delta), delta = +-1/8, g in {-1, 0, 1}
 *                               = (d / 8) * (2s + 1) * (8g +- 1)   (bytes -9 .. 9)
 *   MXFP4                     w = 2^(e - 128) * k, k = kvalues_mxfp4 (twice the E2M1 value)
 * so IQ2_XXS, IQ1_S, MXFP4 and the IQ3s are PLAIN; IQ2_XS, IQ2_S and IQ1_M (a scale per 16
 * weights) are HALVES with sc = 2s + 1. Layouts: c/format/quant/blocks.h. */
#ifndef STRATA_CUDA_IQ_DECODE_CUH
#define STRATA_CUDA_IQ_DECODE_CUH

#include "mmv.cuh"
#include "iq_grids.cuh"

#ifndef ST_IQ_SHARED
#define ST_IQ_SHARED __shared__
#endif

/* ---- signs ----------------------------------------------------------------------------------- */

/* 0xFF in byte k where bit k of s (4 bits) is set. */
static __device__ __forceinline__ uint32_t st_iq_mask4(uint32_t s) {
    return ((s & 1u) | ((s & 2u) << 7) | ((s & 4u) << 14) | ((s & 8u) << 21)) * 0xFFu;
}

/* The magnitude bytes of g negated where m has 0xFF: (g ^ 0xFF) + 1 = -g per byte, and the +1
 * never carries into the next byte because no codebook byte is 0 (so g ^ 0xFF is never 0xFF). */
static __device__ __forceinline__ int st_iq_signed4(uint32_t g, uint32_t m) {
    return (int)((g ^ m) + (m & 0x01010101u));
}

/* The 8 sign bits of a 7-bit pattern: bit 7 makes the count even (ksigns_iq2xs, computed). */
static __device__ __forceinline__ uint32_t st_iq_ksigns(uint32_t s7) {
    return s7 | ((uint32_t)(__popc(s7) & 1) << 7);
}

/* Four 4-bit indices (bytes of idx, 0..15) into a 16-entry int8 table packed as four words: lo0,
 * lo1 entries 0..7, hi0, hi1 entries 8..15; __byte_perm picks by the low 3 bits, bit 3 the half. */
static __device__ __forceinline__ int st_iq_lut16(uint32_t idx, uint32_t lo0, uint32_t lo1, uint32_t hi0,
                                                  uint32_t hi1) {
    const uint32_t sel = (idx & 0x7u) | ((idx >> 4) & 0x70u) | ((idx >> 8) & 0x700u) |
                         ((idx >> 12) & 0x7000u);
    const uint32_t lo = __byte_perm(lo0, lo1, sel), hi = __byte_perm(hi0, hi1, sel);
    const uint32_t m = ((idx >> 3) & 0x01010101u) * 0xFFu;
    return (int)((hi & m) | (lo & ~m));
}

/* ---- table sources --------------------------------------------------------------------------- */

/* The device arrays through the read-only cache; sign masks computed. */
struct st_iq_tab_ldg {
    static constexpr bool STAGED = false;
    static __device__ __forceinline__ void stage() {}
    static __device__ __forceinline__ uint32_t g3xxs(uint32_t i) { return __ldg(&st_dev_iq3xxs_grid[i]); }
    static __device__ __forceinline__ uint32_t g3s(uint32_t i) { return __ldg(&st_dev_iq3s_grid[i]); }
    /* byte masks of the 8 sign bits s: lo for bits 0..3, hi for 4..7 */
    static __device__ __forceinline__ void masks8(uint32_t s, uint32_t &lo, uint32_t &hi) {
        lo = st_iq_mask4(s & 0xFu);
        hi = st_iq_mask4(s >> 4);
    }
};

/* Shared-memory copies (static shared memory of the kernels that decode through this source):
 * the IQ3_XXS grid (1 KB), the IQ3_S grid (2 KB) and the byte masks of every sign byte (2 KB). */
#define ST_IQ_STAGE_BYTES ((256 + 512 + 2 * 256) * 4) /* the three arrays below */
ST_IQ_SHARED static uint32_t st_sm_iq3xxs_grid[256];
ST_IQ_SHARED static uint32_t st_sm_iq3s_grid[512];
ST_IQ_SHARED static uint32_t st_sm_sign_masks[256][2];

struct st_iq_tab_smem {
    static constexpr bool STAGED = true;
    /* every thread of the block, before any decode (one barrier) */
    static __device__ __forceinline__ void stage() {
        for (int i = (int)threadIdx.x; i < 512; i += (int)blockDim.x) {
            st_sm_iq3s_grid[i] = __ldg(&st_dev_iq3s_grid[i]);
            if (i < 256) {
                st_sm_iq3xxs_grid[i] = __ldg(&st_dev_iq3xxs_grid[i]);
                st_sm_sign_masks[i][0] = st_iq_mask4((uint32_t)i & 0xFu);
                st_sm_sign_masks[i][1] = st_iq_mask4((uint32_t)i >> 4);
            }
        }
        __syncthreads();
    }
    static __device__ __forceinline__ uint32_t g3xxs(uint32_t i) { return st_sm_iq3xxs_grid[i]; }
    static __device__ __forceinline__ uint32_t g3s(uint32_t i) { return st_sm_iq3s_grid[i]; }
    static __device__ __forceinline__ void masks8(uint32_t s, uint32_t &lo, uint32_t &hi) {
        lo = st_sm_sign_masks[s][0];
        hi = st_sm_sign_masks[s][1];
    }
};

/* ---- IQ3 --------------------------------------------------------------------------------------- */

/* IQ3_XXS (98 bytes: d, 64 grid indices at 2, 8 u32 words at 66). Sub-block ib: word aux; bits
 * 7k..7k+6 the sign pattern of weights 8k..8k+7 (st_iq_ksigns), bits 28..31 the scale:
 * dw = d * (0.5 + scale) * 0.5. Weights 8k..8k+3 are grid[qs[8ib + 2k]], 8k+4..8k+7
 * grid[qs[8ib + 2k + 1]]. */
template <class TAB>
struct st_iq3_xxs_dec {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq3_xxs), KIND = ST_MMV_PLAIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int ib, st_mmv_w &w) {
        const uint32_t aux = st_mmv_ld32(b + 66 + 4 * ib);
        const uint8_t *qs = b + 2 + 8 * ib;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t mlo, mhi;
            TAB::masks8(st_iq_ksigns((aux >> (7 * k)) & 127u), mlo, mhi);
            const uint32_t ix = st_mmv_ld16(qs + 2 * k);
            w.v[2 * k] = st_iq_signed4(TAB::g3xxs(ix & 0xFF), mlo);
            w.v[2 * k + 1] = st_iq_signed4(TAB::g3xxs(ix >> 8), mhi);
        }
        w.dw = st_mmv_f16(b) * (0.5f + (float)(aux >> 28)) * 0.5f;
    }
};

/* IQ3_S (110 bytes: d, qs[64] at 2, qh[8] at 66, signs[32] at 74, scales[4] at 106). Sub-block
 * j, group t (0..7): index qs[8j + t] | bit t of qh[j] << 8 into the 512-entry grid; the sign
 * bits of its 4 weights: nibble t % 2 of signs[4j + t / 2]; dw = d * (1 + 2 * scale), scale
 * nibble j % 2 of scales[j / 2]. */
template <class TAB>
struct st_iq3_s_dec {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq3_s), KIND = ST_MMV_PLAIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int j, st_mmv_w &w) {
        const uint32_t qh = st_mmv_ld8(b + 66 + j);
        const uint32_t sg = st_mmv_ld32(b + 74 + 4 * j); /* sign of weight 4t + k: bit 4t + k */
#pragma unroll
        for (int u = 0; u < 4; u++) {
            uint32_t mlo, mhi;
            TAB::masks8((sg >> (8 * u)) & 0xFFu, mlo, mhi);
            const uint32_t ix = st_mmv_ld16(b + 2 + 8 * j + 2 * u);
            const uint32_t i0 = (ix & 0xFFu) | (((qh >> (2 * u)) & 1u) << 8);
            const uint32_t i1 = (ix >> 8) | (((qh >> (2 * u + 1)) & 1u) << 8);
            w.v[2 * u] = st_iq_signed4(TAB::g3s(i0), mlo);
            w.v[2 * u + 1] = st_iq_signed4(TAB::g3s(i1), mhi);
        }
        const uint32_t sc = (st_mmv_ld8(b + 106 + (j >> 1)) >> (4 * (j & 1))) & 0xFu;
        w.dw = st_mmv_f16(b) * (float)(1 + 2 * (int)sc);
    }
};

typedef st_iq3_xxs_dec<st_iq_tab_ldg> st_mmv_iq3_xxs;
typedef st_iq3_s_dec<st_iq_tab_ldg> st_mmv_iq3_s;

/* ---- IQ2 --------------------------------------------------------------------------------------- */

/* Eight signed magnitudes of a u64 grid entry g (element k in byte k) into w.v[o], w.v[o + 1],
 * signs: the 8 sign bits. */
static __device__ __forceinline__ void st_iq_grid8(uint64_t g, uint32_t signs, st_mmv_w &w, int o) {
    uint32_t mlo, mhi;
    st_iq_tab_ldg::masks8(signs, mlo, mhi);
    w.v[o] = st_iq_signed4((uint32_t)g, mlo);
    w.v[o + 1] = st_iq_signed4((uint32_t)(g >> 32), mhi);
}

/* IQ2_XXS (66 bytes: d, then 8 bytes per sub-block ib at 2 + 8ib: 4 grid indices, then a word
 * aux whose bits 7l..7l+6 are the sign pattern of group l and bits 28..31 the scale). Group l
 * (weights 8l..8l+7) is grid[index l]. dw = d * (2 scale + 1) / 8. */
struct st_mmv_iq2_xxs {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq2_xxs), KIND = ST_MMV_PLAIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int ib, st_mmv_w &w) {
        const uint32_t idx = st_mmv_ld32(b + 2 + 8 * ib), aux = st_mmv_ld32(b + 6 + 8 * ib);
#pragma unroll
        for (int l = 0; l < 4; l++)
            st_iq_grid8(__ldg(&st_dev_iq2xxs_grid[(idx >> (8 * l)) & 0xFFu]),
                        st_iq_ksigns((aux >> (7 * l)) & 127u), w, 2 * l);
        w.dw = st_mmv_f16(b) * (float)(2 * (int)(aux >> 28) + 1) * 0.125f;
    }
};

/* IQ2_XS (74 bytes: d, qs (u16)[32] at 2, scales[8] at 66). Group l of sub-block ib: u16
 * q = qs[4ib + l], grid[q & 511], sign pattern q >> 9; scale nibble l / 2 of scales[ib]. */
struct st_mmv_iq2_xs {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq2_xs), KIND = ST_MMV_HALVES;
    static __device__ __forceinline__ void decode(const uint8_t *b, int ib, st_mmv_w &w) {
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t q = st_mmv_ld16(b + 2 + 8 * ib + 2 * l);
            st_iq_grid8(__ldg(&st_dev_iq2xs_grid[q & 511u]), st_iq_ksigns(q >> 9), w, 2 * l);
        }
        const uint32_t sc = st_mmv_ld8(b + 66 + ib);
        w.sc0 = 2 * (int)(sc & 0xFu) + 1;
        w.sc1 = 2 * (int)(sc >> 4) + 1;
        w.dw = st_mmv_f16(b) * 0.125f;
    }
};

/* IQ2_S (82 bytes: d, qs[64] at 2 (32 index bytes, then 32 sign bytes), qh[8] at 66, scales[8] at
 * 74). Group l of sub-block ib: index qs[4ib + l] | bits 2l..2l+1 of qh[ib] << 8 into the
 * 1024-entry grid, signs qs[32 + 4ib + l]; scales as IQ2_XS. */
struct st_mmv_iq2_s {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq2_s), KIND = ST_MMV_HALVES;
    static __device__ __forceinline__ void decode(const uint8_t *b, int ib, st_mmv_w &w) {
        const uint32_t idx = st_mmv_ld32(b + 2 + 4 * ib), sg = st_mmv_ld32(b + 34 + 4 * ib);
        const uint32_t qh = st_mmv_ld8(b + 66 + ib);
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t i = ((idx >> (8 * l)) & 0xFFu) | (((qh >> (2 * l)) & 3u) << 8);
            st_iq_grid8(__ldg(&st_dev_iq2s_grid[i]), (sg >> (8 * l)) & 0xFFu, w, 2 * l);
        }
        const uint32_t sc = st_mmv_ld8(b + 74 + ib);
        w.sc0 = 2 * (int)(sc & 0xFu) + 1;
        w.sc1 = 2 * (int)(sc >> 4) + 1;
        w.dw = st_mmv_f16(b) * 0.125f;
    }
};

/* ---- IQ1 --------------------------------------------------------------------------------------- */

/* A u64 IQ1 grid entry (bytes -1, 0, 1) as 8g + 1 (neg = 0) or 8g - 1 (neg = 1) in w.v[o],
 * w.v[o + 1]: g + 1 (0..2, by __vsub4 of 0xFF) times 8 has no carries, then minus 7 or 9. */
static __device__ __forceinline__ void st_iq1_grid8(uint64_t g, bool neg, st_mmv_w &w, int o) {
    const uint32_t off = neg ? 0x09090909u : 0x07070707u;
    w.v[o] = (int)__vsub4(__vsub4((uint32_t)g, 0xFFFFFFFFu) << 3, off);
    w.v[o + 1] = (int)__vsub4(__vsub4((uint32_t)(g >> 32), 0xFFFFFFFFu) << 3, off);
}

/* IQ1_S (50 bytes: d, qs[32] at 2, qh (u16)[8] at 34). Sub-block ib: h = qh[ib]; group l
 * index qs[4ib + l] | bits 3l..3l+2 of h << 8 into the 2048-entry grid; scale bits 12..14,
 * delta sign bit 15. */
struct st_mmv_iq1_s {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq1_s), KIND = ST_MMV_PLAIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int ib, st_mmv_w &w) {
        const uint32_t h = st_mmv_ld16(b + 34 + 2 * ib), idx = st_mmv_ld32(b + 2 + 4 * ib);
        const bool neg = (h & 0x8000u) != 0;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t i = ((idx >> (8 * l)) & 0xFFu) | (((h >> (3 * l)) & 7u) << 8);
            st_iq1_grid8(__ldg(&st_dev_iq1s_grid[i]), neg, w, 2 * l);
        }
        w.dw = st_mmv_f16(b) * (float)(2 * (int)((h >> 12) & 7u) + 1) * 0.125f;
    }
};

/* IQ1_M (56 bytes: qs[32], qh[16] at 32, scales (u16)[4] at 48). d: the fp16 whose nibbles are
 * the top nibbles of the four scale words. Sub-block ib: group l index qs[4ib + l] | 3 bits of
 * qh[2ib + l / 2] (bits 0..2 for even l, 4..6 for odd) << 8, delta sign bit 3 / 7 of the same
 * byte; 3-bit scales at bits 6(ib % 2) and 6(ib % 2) + 3 of scales[ib / 2] (weights 0..15,
 * 16..31). */
struct st_mmv_iq1_m {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_iq1_m), KIND = ST_MMV_HALVES;
    static __device__ __forceinline__ void decode(const uint8_t *b, int ib, st_mmv_w &w) {
        const uint32_t idx = st_mmv_ld32(b + 4 * ib), qh = st_mmv_ld16(b + 32 + 2 * ib);
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t nib = (qh >> (4 * l)) & 0xFu; /* byte l / 2, nibble l % 2 */
            const uint32_t i = ((idx >> (8 * l)) & 0xFFu) | ((nib & 7u) << 8);
            st_iq1_grid8(__ldg(&st_dev_iq1s_grid[i]), (nib & 8u) != 0, w, 2 * l);
        }
        const uint32_t s0 = st_mmv_ld16(b + 48), s1 = st_mmv_ld16(b + 50), s2 = st_mmv_ld16(b + 52),
                       s3 = st_mmv_ld16(b + 54);
        const uint32_t dh = (s0 >> 12) | ((s1 >> 8) & 0xF0u) | ((s2 >> 4) & 0xF00u) | (s3 & 0xF000u);
        const uint32_t sw = st_mmv_ld16(b + 48 + 2 * (ib >> 1)) >> (6 * (ib & 1));
        w.sc0 = 2 * (int)(sw & 7u) + 1;
        w.sc1 = 2 * (int)((sw >> 3) & 7u) + 1;
        w.dw = st_dev_fp16(dh) * 0.125f;
    }
};

/* ---- MXFP4 ------------------------------------------------------------------------------------- */

/* 2^(e - 128): the E8M0 scale halved (the levels are twice the E2M1 values), as ggml's
 * GGML_E8M0_TO_FP32_HALF (subnormal for e < 2). */
static __device__ __forceinline__ float st_iq_e8m0_half(uint32_t e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* MXFP4 (17 bytes: e, qs[16]; blocks at any byte address, so byte loads). Weight l < 16: low
 * nibble of qs[l], weight 16 + l: high nibble; level kvalues_mxfp4[code]
 * (0 1 2 3 4 6 8 12 | 0 -1 -2 -3 -4 -6 -8 -12). */
struct st_mmv_mxfp4 {
    static constexpr int QK = QK_MXFP4, BYTES = (int)sizeof(block_mxfp4), KIND = ST_MMV_PLAIN;
    static __device__ __forceinline__ void decode(const uint8_t *b, int, st_mmv_w &w) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint8_t *p = b + 1 + 4 * i;
            const uint32_t q = st_mmv_ld8(p) | (st_mmv_ld8(p + 1) << 8) | (st_mmv_ld8(p + 2) << 16) |
                               (st_mmv_ld8(p + 3) << 24);
            w.v[i] = st_iq_lut16(q & 0x0F0F0F0Fu, 0x03020100u, 0x0c080604u, 0xfdfeff00u, 0xf4f8fafcu);
            w.v[i + 4] = st_iq_lut16((q >> 4) & 0x0F0F0F0Fu, 0x03020100u, 0x0c080604u, 0xfdfeff00u,
                                     0xf4f8fafcu);
        }
        w.dw = st_iq_e8m0_half(st_mmv_ld8(b));
    }
};

#endif /* STRATA_CUDA_IQ_DECODE_CUH */
