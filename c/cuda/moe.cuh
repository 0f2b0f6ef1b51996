/* moe.cuh - device pieces of the grouped MoE step (moe.cu): the q8_1 activation block, the
 * dp4a weight decoders (one 32-weight chunk of a row into packed int8 plus scales), the plan of
 * (token, slot) pairs grouped by expert.
 *
 * A dp4a decoder W has QK (weights per block), BYTES (bytes per block), SPLIT (the two halves of
 * a chunk have different scales), HAS_M (a per-chunk offset) and
 *     load(row, c, w): chunk c (weights 32c .. 32c+31) of the row starting at row.
 * It fills w.q[0..7] with the 32 quants as signed bytes (q[i] = weights 4i..4i+3, byte 0 first)
 * and the scales, so that weight 4i+b = s * q + m with s = s0 for i < 4, s1 for i >= 4 (s0 when
 * !SPLIT) and m = w.m (0 when !HAS_M). The dot with a q8_1 block (da, a[0..7]) is then
 *     da * (s0 * dp(q[0..3], a[0..3]) + s1 * dp(q[4..7], a[4..7]) + m * sum(a)),
 * the integer parts exact (dp4a). Weight bytes are read with 16-bit loads (blocks of 18, 34, 210
 * bytes are only 2-byte aligned). The tiles' fetch of Q8_0 and Q4_K uses aligned words, 16 bytes
 * where the address allows (st_ld_words, st_ld_q8blk): each of their lanes reads a different row,
 * where the GEMV's lanes read consecutive blocks of one row (its 16-bit loads measured faster
 * there: one path for every lane). */
#ifndef STRATA_CUDA_MOE_CUH
#define STRATA_CUDA_MOE_CUH

#include "dequant.cuh"
#include "iq_decode.cuh"

/* ---- plan ------------------------------------------------------------------------------------ */

#define ST_MOE_MAXG 8   /* (token, slot) pairs per group: the columns of one expert GEMV */

/* One group: up to ST_MOE_MAXG pairs (index t * k + s) routed to one expert, ascending. */
struct st_moe_group {
    int32_t expert;
    int32_t n;
    int32_t pair[ST_MOE_MAXG];
};

/* ---- chunk of 32 weights --------------------------------------------------------------------- */

struct st_w32 {
    int q[8];
    float s0, s1, m;
};

/* A chunk's raw words as fetched from global memory, for types that split load into fetch (the
 * loads) and finish (the arithmetic, W::load's to the bit): the prompt tiles' pipelined kernel
 * (mmq.cu) issues the next step's fetch before a step's mma slices and finishes after them. */
struct st_wraw {
    uint32_t q[8], s[4];
};

/* Byte k (0..11) of s[1..3] (a K-quant's packed scales), without indexing the register array. */
static __device__ __forceinline__ uint32_t st_k4_byte(const st_wraw &r, int k) {
    const uint32_t w = k < 4 ? r.s[1] : k < 8 ? r.s[2] : r.s[3];
    return (w >> (8 * (k & 3))) & 0xFFu;
}

/* Dot of a decoded chunk with the 8 words a[] of a q8_1 block, before the factor da. */
template <class W>
static __device__ __forceinline__ float st_w32_dot(const st_w32 &w, const int a[8]) {
    float v;
    if (W::SPLIT) {
        int lo = 0, hi = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) lo = __dp4a(w.q[i], a[i], lo);
#pragma unroll
        for (int i = 4; i < 8; i++) hi = __dp4a(w.q[i], a[i], hi);
        v = w.s0 * (float)lo + w.s1 * (float)hi;
    } else {
        int acc = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) acc = __dp4a(w.q[i], a[i], acc);
        v = w.s0 * (float)acc;
    }
    if (W::HAS_M) {
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) s = __dp4a(0x01010101, a[i], s);
        v += w.m * (float)s;
    }
    return v;
}

/* Q8_0: d, 32 x int8; chunk = block. */
struct st_w_q8_0 {
    static constexpr int QK = 32, BYTES = (int)sizeof(block_q8_0);
    static constexpr bool SPLIT = false, HAS_M = false;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t c, st_w32 &w) {
        const uint8_t *blk = row + c * BYTES;
        w.s0 = w.s1 = st_dev_fp16(st_ld_u16(blk));
        w.m = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) w.q[i] = (int)st_ld_u32_a2(blk + 2 + 4 * i);
    }
    static __device__ __forceinline__ void fetch(const uint8_t *row, int64_t c, st_wraw &r) {
        st_ld_q8blk(row + c * BYTES, &r.s[0], r.q);
    }
    static __device__ __forceinline__ void finish(const st_wraw &r, int64_t c, st_w32 &w) {
        (void)c;
        w.s0 = w.s1 = st_dev_fp16(r.s[0]);
        w.m = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) w.q[i] = (int)r.q[i];
    }
};

/* Q4_0: d, 16 bytes of nibbles (weights 0..15 low, 16..31 high); q - 8 made signed bytewise. */
struct st_w_q4_0 {
    static constexpr int QK = 32, BYTES = (int)sizeof(block_q4_0);
    static constexpr bool SPLIT = false, HAS_M = false;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t c, st_w32 &w) {
        const uint8_t *blk = row + c * BYTES;
        w.s0 = w.s1 = st_dev_fp16(st_ld_u16(blk));
        w.m = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t v = st_ld_u32_a2(blk + 2 + 4 * i);
            w.q[i] = (int)__vsub4(v & 0x0F0F0F0Fu, 0x08080808u);
            w.q[i + 4] = (int)__vsub4((v >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        }
    }
};

/* Q4_K: d, dmin, scales[12], qs[128]. Sub-block j (= chunk within the super-block) has its 32
 * quants in nibble j & 1 of qs[32 (j / 2) + l]. w = d*sc * q - dmin*m. */
struct st_w_q4_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q4_K);
    static constexpr bool SPLIT = false, HAS_M = true;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t c, st_w32 &w) {
        const uint8_t *blk = row + (c >> 3) * BYTES;
        const int j = (int)(c & 7);
        const float d = st_dev_fp16(st_ld_u16(blk)), dmin = st_dev_fp16(st_ld_u16(blk + 2));
        int sc, mn;
        st_dev_scale_min_k4(blk + 4, j, &sc, &mn);
        w.s0 = w.s1 = d * (float)sc;
        w.m = -(dmin * (float)mn);
        const uint8_t *qs = blk + 16 + 32 * (j >> 1);
        const int sh = 4 * (j & 1);
#pragma unroll
        for (int i = 0; i < 8; i++) w.q[i] = (int)((st_ld_u32_a2(qs + 4 * i) >> sh) & 0x0F0F0F0Fu);
    }
    /* s[0]: d | dmin << 16; s[1..3]: the 12 scale bytes; q: the 32 bytes of nibbles */
    static __device__ __forceinline__ void fetch(const uint8_t *row, int64_t c, st_wraw &r) {
        const uint8_t *blk = row + (c >> 3) * BYTES;
        const int j = (int)(c & 7);
        if (((uintptr_t)blk & 3) == 0) { /* always, for rows at 4-byte boundaries (144-byte blocks) */
            st_ld_words<4>(blk, r.s);
            st_ld_words<8>(blk + 16 + 32 * (j >> 1), r.q);
            return;
        }
#pragma unroll
        for (int i = 0; i < 4; i++) r.s[i] = st_ld_u32_a2(blk + 4 * i);
        const uint8_t *qs = blk + 16 + 32 * (j >> 1);
#pragma unroll
        for (int i = 0; i < 8; i++) r.q[i] = st_ld_u32_a2(qs + 4 * i);
    }
    /* sub-block j's scale d * sc and offset -(dmin * m) from the fetched header words s[0..3] */
    static __device__ __forceinline__ void scales(const st_wraw &r, int j, float &s, float &m) {
        const float d = st_dev_fp16(r.s[0] & 0xFFFFu), dmin = st_dev_fp16(r.s[0] >> 16);
        int sc, mn; /* as st_dev_scale_min_k4 */
        if (j < 4) {
            sc = (int)(st_k4_byte(r, j) & 63);
            mn = (int)(st_k4_byte(r, j + 4) & 63);
        } else {
            const uint32_t a = st_k4_byte(r, j + 4);
            sc = (int)((a & 0xF) | ((st_k4_byte(r, j - 4) >> 6) << 4));
            mn = (int)((a >> 4) | ((st_k4_byte(r, j) >> 6) << 4));
        }
        s = d * (float)sc;
        m = -(dmin * (float)mn);
    }
    static __device__ __forceinline__ void finish(const st_wraw &r, int64_t c, st_w32 &w) {
        const int j = (int)(c & 7);
        scales(r, j, w.s0, w.m);
        w.s1 = w.s0;
        const int sh = 4 * (j & 1);
#pragma unroll
        for (int i = 0; i < 8; i++) w.q[i] = (int)((r.q[i] >> sh) & 0x0F0F0F0Fu);
    }
};

/* Q5_K: as Q4_K plus qh[32] at 16 (qs at 48): fifth bit of weight l of sub-block j is bit j of
 * qh[l]. */
struct st_w_q5_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q5_K);
    static constexpr bool SPLIT = false, HAS_M = true;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t c, st_w32 &w) {
        const uint8_t *blk = row + (c >> 3) * BYTES;
        const int j = (int)(c & 7);
        const float d = st_dev_fp16(st_ld_u16(blk)), dmin = st_dev_fp16(st_ld_u16(blk + 2));
        int sc, mn;
        st_dev_scale_min_k4(blk + 4, j, &sc, &mn);
        w.s0 = w.s1 = d * (float)sc;
        w.m = -(dmin * (float)mn);
        const uint8_t *qs = blk + 48 + 32 * (j >> 1);
        const int sh = 4 * (j & 1);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t lo = (st_ld_u32_a2(qs + 4 * i) >> sh) & 0x0F0F0F0Fu;
            const uint32_t hi = (st_ld_u32_a2(blk + 16 + 4 * i) >> j) & 0x01010101u;
            w.q[i] = (int)(lo | (hi << 4));
        }
    }
};

/* Q6_K: ql[128], qh[64], scales[16] (int8), d. Chunk jj (0..7) of the super-block: half
 * h = jj / 4, quarter s = jj % 4; low nibble (s >> 1) of ql[64h + 32(s & 1) + l], high two bits
 * (qh[32h + l] >> 2s) & 3, q - 32. Weights l < 16 use scales[2jj], l >= 16 scales[2jj + 1]. */
struct st_w_q6_K {
    static constexpr int QK = QK_K, BYTES = (int)sizeof(block_q6_K);
    static constexpr bool SPLIT = true, HAS_M = false;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t c, st_w32 &w) {
        const uint8_t *blk = row + (c >> 3) * BYTES;
        const int jj = (int)(c & 7), h = jj >> 2, s = jj & 3;
        const float d = st_dev_fp16(st_ld_u16(blk + 208));
        w.s0 = d * (float)(int8_t)st_ld_u8(blk + 192 + 2 * jj);
        w.s1 = d * (float)(int8_t)st_ld_u8(blk + 192 + 2 * jj + 1);
        w.m = 0.0f;
        const uint8_t *ql = blk + 64 * h + 32 * (s & 1);
        const uint8_t *qh = blk + 128 + 32 * h;
        const int shl = 4 * (s >> 1), shh = 2 * s;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t lo = (st_ld_u32_a2(ql + 4 * i) >> shl) & 0x0F0F0F0Fu;
            const uint32_t hi = ((st_ld_u32_a2(qh + 4 * i) >> shh) & 0x03030303u) << 4;
            w.q[i] = (int)__vsub4(lo | hi, 0x20202020u);
        }
    }
};

/* A decoder of mmv.cuh / iq_decode.cuh (KIND PLAIN, HALVES or MIN) as a dp4a decoder: chunk c
 * is sub-block c % (QK / 32) of block c / (QK / 32); s0 = dw (PLAIN, MIN) or dw * sc0, s1 = dw *
 * sc1 (HALVES); m = mw (MIN: one offset a chunk, as Q4_1 / Q5_1). The IQ codebook formats and
 * MXFP4 reach the grouped kernels and the tiles this way, and (STRATA_MOE_DP4A_EXT, moe.cu)
 * Q3_K, Q5_0, Q4_1, Q5_1 and IQ4_NL the grouped kernels. (Q2_K's mins a 16 weights do not fit.) */
template <class T>
struct st_w_mmv {
    static_assert(T::KIND == ST_MMV_PLAIN || T::KIND == ST_MMV_HALVES || T::KIND == ST_MMV_MIN,
                  "one offset a chunk at most in this form");
    static constexpr int QK = T::QK, BYTES = T::BYTES;
    static constexpr bool SPLIT = T::KIND == ST_MMV_HALVES, HAS_M = T::KIND == ST_MMV_MIN;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t c, st_w32 &w) {
        constexpr int S = QK / 32;
        st_mmv_w d;
        T::decode(row + (c / S) * BYTES, (int)(c % S), d);
#pragma unroll
        for (int i = 0; i < 8; i++) w.q[i] = d.v[i];
        if (SPLIT) {
            w.s0 = d.dw * (float)d.sc0;
            w.s1 = d.dw * (float)d.sc1;
        } else {
            w.s0 = w.s1 = d.dw;
        }
        w.m = HAS_M ? d.mw : 0.0f;
    }
};

/* Decoders whose codebooks a kernel stages in shared memory first (iq_decode.cuh's
 * st_iq_tab_smem): st_w_stage<W>() is that copy and its barrier, to be reached by every thread
 * of the block before any decode; nothing for the others. */
template <class W> struct st_w_staged { static constexpr bool value = false; };
template <class TAB> struct st_w_staged<st_w_mmv<st_iq3_xxs_dec<TAB>>> { static constexpr bool value = TAB::STAGED; };
template <class TAB> struct st_w_staged<st_w_mmv<st_iq3_s_dec<TAB>>> { static constexpr bool value = TAB::STAGED; };
template <class W>
static __device__ __forceinline__ void st_w_stage() {
    if constexpr (st_w_staged<W>::value) st_iq_tab_smem::stage();
}

/* ---- fallback decoders: 32 weights as floats via dequant.cuh -------------------------------- */

/* Plain types as "blocks" of 32 elements, with the group() interface of dequant.cuh. */
template <class P>
struct st_fb_plain {
    static constexpr int QK = 32, BYTES = 32 * P::BYTES;
    static __device__ __forceinline__ void group(const uint8_t *blk, int j, float v[4]) {
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = P::one(blk + (4 * j + k) * P::BYTES);
    }
};

/* Chunk c of a row of decoder D (dequant.cuh interface) as 32 floats. */
template <class D>
static __device__ __forceinline__ void st_fb_chunk(const uint8_t *row, int64_t c, float v[32]) {
    constexpr int CPB = D::QK / 32; /* chunks per block */
    const uint8_t *blk = row + (c / CPB) * D::BYTES;
    const int g0 = (int)(c % CPB) * 8;
#pragma unroll
    for (int i = 0; i < 8; i++) D::group(blk, g0 + i, v + 4 * i);
}

#endif /* STRATA_CUDA_MOE_CUH */
