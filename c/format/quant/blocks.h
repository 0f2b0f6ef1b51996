/* blocks.h - byte layouts of the quantized block formats, as GGUF files store them (ggml's
 * layouts). Half-precision fields are raw IEEE binary16 bits (uint16_t). QK = weights per block.
 * Every struct's size is checked against the type table at compile time below. */
#ifndef STRATA_BLOCKS_H
#define STRATA_BLOCKS_H

#include <stdint.h>

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12
#define QK4_NL 32

typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;                 /* 18 */
typedef struct { uint16_t d; uint16_t m; uint8_t qs[QK4_1 / 2]; } block_q4_1;     /* 20 */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;  /* 22 */
typedef struct { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1; /* 24 */
typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;                     /* 34 */
typedef struct { uint16_t d; uint16_t s; int8_t qs[QK8_1]; } block_q8_1;         /* 36: s = d*sum(qs) */

/* K-quants: super-blocks of 256 weights in sub-blocks of 16 or 32. */
typedef struct {
    uint8_t scales[QK_K / 16];  /* low 4 bits: scale, high 4 bits: min, per 16 weights */
    uint8_t qs[QK_K / 4];       /* 2-bit quants */
    uint16_t d;                 /* super-block scale for the scales */
    uint16_t dmin;              /* super-block scale for the mins */
} block_q2_K;                                                                     /* 84 */
typedef struct {
    uint8_t hmask[QK_K / 8];    /* high bit of each 3-bit quant */
    uint8_t qs[QK_K / 4];       /* low 2 bits */
    uint8_t scales[12];         /* 16 6-bit scales, packed */
    uint16_t d;
} block_q3_K;                                                                     /* 110 */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE]; /* 8 6-bit scales and 8 6-bit mins, packed */
    uint8_t qs[QK_K / 2];         /* 4-bit quants */
} block_q4_K;                                                                     /* 144 */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];         /* 5th bit */
    uint8_t qs[QK_K / 2];         /* low 4 bits */
} block_q5_K;                                                                     /* 176 */
typedef struct {
    uint8_t ql[QK_K / 2];         /* low 4 bits */
    uint8_t qh[QK_K / 4];         /* high 2 bits */
    int8_t scales[QK_K / 16];     /* 8-bit scales per 16 weights */
    uint16_t d;
} block_q6_K;                                                                     /* 210 */
typedef struct {
    float d;                      /* activation scale (f32, not f16) */
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];     /* sum of qs per 16 weights */
} block_q8_K;                                                                     /* 292 */

/* Non-linear (IQ) formats. */
typedef struct { uint16_t d; uint8_t qs[QK4_NL / 2]; } block_iq4_nl;             /* 18 */
typedef struct {
    uint16_t d;
    uint16_t scales_h;            /* high 2 bits of 8 6-bit scales */
    uint8_t scales_l[QK_K / 64];  /* low 4 bits */
    uint8_t qs[QK_K / 2];
} block_iq4_xs;                                                                   /* 136 */
typedef struct {
    uint16_t d;
    uint8_t qs[3 * QK_K / 8];     /* 64 grid indices, then 8 x 32-bit sign/scale words */
} block_iq3_xxs;                                                                  /* 98 */
typedef struct {
    uint16_t d;
    uint8_t qs[QK_K / 4];         /* low 8 bits of 64 grid indices */
    uint8_t qh[QK_K / 32];        /* 9th bit of the indices */
    uint8_t signs[QK_K / 8];
    uint8_t scales[QK_K / 64];    /* 4-bit scales */
} block_iq3_s;                                                                    /* 110 */

typedef struct {
    uint16_t d;
    uint16_t qs[QK_K / 8];        /* per 32 weights: 4 grid indices (bytes), then 4 x 7 sign bits + a 4-bit scale */
} block_iq2_xxs;                                                                  /* 66 */
typedef struct {
    uint16_t d;
    uint16_t qs[QK_K / 8];        /* per 8 weights: 9-bit grid index | 7 sign bits << 9 */
    uint8_t scales[QK_K / 32];    /* two 4-bit scales per 32 weights */
} block_iq2_xs;                                                                   /* 74 */
typedef struct {
    uint16_t d;
    uint8_t qs[QK_K / 4];         /* low 8 bits of 32 grid indices, then 32 bytes of signs */
    uint8_t qh[QK_K / 32];        /* bits 8-9 of the indices, 2 per index */
    uint8_t scales[QK_K / 32];    /* two 4-bit scales per 32 weights */
} block_iq2_s;                                                                    /* 82 */
typedef struct {
    uint16_t d;
    uint8_t qs[QK_K / 8];         /* low 8 bits of 32 grid indices */
    uint16_t qh[QK_K / 32];       /* per 32 weights: 4 x 3 high index bits, 3-bit scale, delta sign */
} block_iq1_s;                                                                    /* 50 */
typedef struct {
    uint8_t qs[QK_K / 8];         /* low 8 bits of 32 grid indices */
    uint8_t qh[QK_K / 16];        /* per 8 weights: 3 high index bits + delta sign (a nibble) */
    uint8_t scales[QK_K / 32];    /* 3-bit scales; the f16 super-scale spread over their top nibbles */
} block_iq1_m;                                                                    /* 56 */
#define QK_MXFP4 32
typedef struct {
    uint8_t e;                    /* E8M0 shared exponent */
    uint8_t qs[QK_MXFP4 / 2];     /* E2M1 codes: low nibbles weights 0-15, high nibbles 16-31 */
} block_mxfp4;                                                                    /* 17 */

#ifdef __cplusplus /* the CUDA sources include this header as C++ */
#define ST_STATIC_ASSERT_SIZE(T, n) static_assert(sizeof(T) == (n), #T " has the wrong size")
#else
#define ST_STATIC_ASSERT_SIZE(T, n) _Static_assert(sizeof(T) == (n), #T " has the wrong size")
#endif
ST_STATIC_ASSERT_SIZE(block_q4_0, 18);
ST_STATIC_ASSERT_SIZE(block_q4_1, 20);
ST_STATIC_ASSERT_SIZE(block_q5_0, 22);
ST_STATIC_ASSERT_SIZE(block_q5_1, 24);
ST_STATIC_ASSERT_SIZE(block_q8_0, 34);
ST_STATIC_ASSERT_SIZE(block_q8_1, 36);
ST_STATIC_ASSERT_SIZE(block_q2_K, 84);
ST_STATIC_ASSERT_SIZE(block_q3_K, 110);
ST_STATIC_ASSERT_SIZE(block_q4_K, 144);
ST_STATIC_ASSERT_SIZE(block_q5_K, 176);
ST_STATIC_ASSERT_SIZE(block_q6_K, 210);
ST_STATIC_ASSERT_SIZE(block_q8_K, 292);
ST_STATIC_ASSERT_SIZE(block_iq4_nl, 18);
ST_STATIC_ASSERT_SIZE(block_iq4_xs, 136);
ST_STATIC_ASSERT_SIZE(block_iq3_xxs, 98);
ST_STATIC_ASSERT_SIZE(block_iq3_s, 110);
ST_STATIC_ASSERT_SIZE(block_iq2_xxs, 66);
ST_STATIC_ASSERT_SIZE(block_iq2_xs, 74);
ST_STATIC_ASSERT_SIZE(block_iq2_s, 82);
ST_STATIC_ASSERT_SIZE(block_iq1_s, 50);
ST_STATIC_ASSERT_SIZE(block_iq1_m, 56);
ST_STATIC_ASSERT_SIZE(block_mxfp4, 17);

#endif /* STRATA_BLOCKS_H */
