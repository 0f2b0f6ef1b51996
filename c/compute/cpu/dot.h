/* dot.h - internal interface of the CPU dot-product kernels. One function per weight type and
 * instruction-set level; each level's file fills a table, and the dispatcher (dot.c) picks the
 * best level the CPU has, falling back to a lower level per type where a level has no kernel. */
#ifndef STRATA_DOT_H
#define STRATA_DOT_H

#include "common.h"

/* *out = dot(w, xq) over n weights; w in the weight type's layout, xq in its activation type's
 * (strata_act_type). n is a multiple of the block size; no argument checks here. */
typedef void (*st_vec_dot_fn)(int64_t n, float *out, const void *w, const void *xq);

/* Several activation rows against one weight row: out[c] = dot(w, xq + c * xq_stride) for
 * c < nc (1..ST_DOT_MAX_COLS), each bit-identical to the type's single-row kernel of the same ISA
 * level. The weight row is unpacked once for all nc rows (prefill, grouped experts). */
#define ST_DOT_MAX_COLS 4
typedef void (*st_vec_dot_n_fn)(int64_t n, float *out, const void *w, const void *xq,
                                size_t xq_stride, int nc);
/* The several-row kernels' entry: fn(args..., NC) with nc (1..ST_DOT_MAX_COLS) as a constant, so
 * that a kernel written for a compile-time row count is instantiated once per count. */
#define ST_DOT_COLS_CALL(nc, fn, ...)                                                              \
    switch (nc) {                                                                                  \
    case 1: fn(__VA_ARGS__, 1); break;                                                             \
    case 2: fn(__VA_ARGS__, 2); break;                                                             \
    case 3: fn(__VA_ARGS__, 3); break;                                                             \
    default: fn(__VA_ARGS__, 4); break;                                                            \
    }

/* Up to ST_TILE_ROWS weight rows (w + r * ws, r < nr) against nc activation rows (xq + c * xs):
 * out[c * ldo + r] = dot(row r, activation c), each bit-identical to the AVX-512 single-row
 * kernel of the type (the AMX tiles, dot_amx.c). */
#define ST_TILE_ROWS 16
/* The fewest activation rows per weight row worth a tile call (bench_tiles, one thread, H100 host:
 * where the tiles overtake the several-row kernel, or the single-row one for Q8_0, which has no
 * several-row kernel): Q8_0 from 4 (1.8x there; Q4_0, whose several-row kernel is ~10% faster
 * than its single-row one, likewise), Q4_K / Q5_K from 8 (1.1-1.2x),
 * Q6_K from 16 (1.4x; 0.87x at 8). Fewer go to the other kernels. */
#define ST_TILE_MIN_COLS 8
typedef void (*st_vec_dot_tile_fn)(int64_t n, float *out, size_t ldo, const void *w, size_t ws,
                                   int nr, const void *xq, size_t xs, int64_t nc);

/* Many float-type rows (w + r * w_stride elements, r < rows) against one f32 vector:
 * out[r] = dot(row r, x), each bit-identical to the type's single-row kernel of the same level
 * (the CPU attention's scores, one call for all positions). */
typedef void (*st_vec_dot_rows_fn)(int64_t n, float *out, const void *w, size_t w_stride, int64_t rows,
                                   const float *x);

/* Q8_0 weights against activation rows prepared once per matmul: prep turns one Q8_0 activation
 * row of n values into xu (n bytes: the quants + 128) and dxp (st_q8_0_dxp_len(n) floats: the
 * blocks' scales in the order the AVX-512 kernel takes them, 0 past the row); dot then computes
 * out[c] = dot(w, row c) for c < nc (1..ST_DOT_MAX_COLS; rows xu_stride bytes and dxp_stride
 * floats apart), bit-identical to the AVX-512 single-row Q8_0 kernel (the same exact block sums,
 * their weight terms computed once for all rows). */
typedef void (*st_q8_0_prep_fn)(const void *xq, int64_t n, uint8_t *xu, float *dxp);
typedef void (*st_q8_0_dotp_fn)(int64_t n, float *out, const void *w, const uint8_t *xu, size_t xu_stride,
                                const float *dxp, size_t dxp_stride, int nc);
static inline size_t st_q8_0_dxp_len(int64_t n) { return (size_t)(16 * ((n / 32 + 15) / 16)); }
/* The callers' buffer of prepared rows: row i at i * st_q8_0_prep_bytes(n), its xu (padded to 64
 * bytes) then its dxp; pass st_q8_0_prep_bytes(n) and st_q8_0_prep_bytes(n) / 4 as the strides. */
static inline size_t st_q8_0_xu_bytes(int64_t n) { return ((size_t)n + 63) / 64 * 64; }
static inline size_t st_q8_0_prep_bytes(int64_t n) { return st_q8_0_xu_bytes(n) + sizeof(float) * st_q8_0_dxp_len(n); }
static inline uint8_t *st_q8_0_prep_xu(uint8_t *buf, int64_t n, int64_t i) {
    return buf + (size_t)i * st_q8_0_prep_bytes(n);
}
static inline float *st_q8_0_prep_dxp(uint8_t *buf, int64_t n, int64_t i) {
    return (float *)(st_q8_0_prep_xu(buf, n, i) + st_q8_0_xu_bytes(n));
}
/* Prepares rows [b, e) of buf: row i from the Q8_0 row at src + (idx ? idx[i] : i) * src_stride. */
static inline void st_q8_0_prep_rows(st_q8_0_prep_fn prep, const uint8_t *src, size_t src_stride,
                                     const int32_t *idx, int64_t n, uint8_t *buf, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++)
        prep(src + (size_t)(idx ? idx[i] : i) * src_stride, n, st_q8_0_prep_xu(buf, n, i), st_q8_0_prep_dxp(buf, n, i));
}

/* Each fills the entries it implements of table[STRATA_TYPE_COUNT] and leaves the rest alone. */
void st_dot_register_scalar(st_vec_dot_fn *table);
void st_dot_register_avx2(st_vec_dot_fn *table);
void st_dot_register_avx2_iq(st_vec_dot_fn *table);   /* IQ2, IQ1, MXFP4 (dot_avx2_iq.c) */
void st_dot_register_avx512_iq(st_vec_dot_fn *table); /* IQ2, IQ1, MXFP4 (dot_avx512_iq.c) */
void st_dot_register_avx512(st_vec_dot_fn *table);
void st_dotn_register_avx2(st_vec_dot_n_fn *table);
void st_dotn_register_avx2_iq(st_vec_dot_n_fn *table); /* IQ2, IQ1, MXFP4 (dot_avx2_iq.c) */
void st_dotn_register_avx512(st_vec_dot_n_fn *table);
void st_dotn_register_avx512_iq(st_vec_dot_n_fn *table); /* IQ1_M, MXFP4 (dot_avx512_iq.c) */
void st_q8_0_prepared_avx512(st_q8_0_prep_fn *prep, st_q8_0_dotp_fn *dot);
void st_dot_rows_register_avx512(st_vec_dot_rows_fn *table);
void st_dot_register_amx(st_vec_dot_tile_fn *table);
/* Asks the OS for the AMX tile state (Linux: arch_prctl); 1 when granted. */
int st_amx_request(void);

/* The kernel for type at exactly this ISA level (NULL if that level has none), for tests and
 * benchmarks that compare levels. */
st_vec_dot_fn st_vec_dot_at(strata_type type, strata_cpu_isa isa);
/* The several-row kernel for type at exactly this ISA level (NULL if that level has none; it gives
 * the bits of st_vec_dot_at(type, isa)), for tests and benchmarks that compare levels. */
st_vec_dot_n_fn st_vec_dot_n_at(strata_type type, strata_cpu_isa isa);
/* The kernel strata_vec_dot uses now (best available level at or below the active one). */
st_vec_dot_fn st_vec_dot_get(strata_type type);

/* The several-row kernel matching st_vec_dot_get(type) (same ISA level, so the same bits), or NULL
 * when that level has none for type (callers then loop the single-row kernel). */
st_vec_dot_n_fn st_vec_dot_n_get(strata_type type);

/* The rows kernel matching st_vec_dot_get(type) (F32, F16, BF16 at the AVX-512 level), or NULL
 * (callers loop the single-row kernel). */
st_vec_dot_rows_fn st_vec_dot_rows_get(strata_type type);

/* The prepared-row Q8_0 kernels above: 1 and both set when the Q8_0 kernel in use is the AVX-512
 * one (whose bits they give), else 0. */
int st_q8_0_prepared_get(st_q8_0_prep_fn *prep, st_q8_0_dotp_fn *dot);

/* The exact-block-sum arithmetic's last step for Q8_0 / Q4_0 (every ISA level; the GPU's
 * moe_exact.cu too): the 16 accumulators s_k (blocks b mod 16) summed as s_k + s_{k+8}, then
 * + 4 apart, + 2, + 1. s is overwritten; returns the sum. */
static inline float st_dot_sum16_tree(float s[16]) {
    for (int w = 8; w >= 1; w /= 2)
        for (int k = 0; k < w; k++) s[k] = s[k] + s[k + w];
    return s[0];
}

/* 1 when st_vec_dot_get(type) follows the exact-block-sum arithmetic of dot_avx512.c, the
 * arithmetic c/cuda/moe_exact.cu computes on the GPU bit for bit: Q4_0, Q8_0, Q4_K, Q5_K and
 * Q6_K, whose kernels at every ISA level (scalar, AVX2, AVX-512, the several-row kernels and the
 * AMX tiles) give the same bits. 0 for other types (their levels differ in the last bits). */
int st_vec_dot_exact_blocks(strata_type type);

/* The tile kernel for type (AMX), or NULL: none for the type, no AMX, AMX turned off
 * (strata_cpu_amx_set) or an active ISA level other than AVX-512 (whose bits the tiles give). */
st_vec_dot_tile_fn st_vec_dot_tile_get(strata_type type);
/* The fewest activation rows a tile call of type gets (see ST_TILE_MIN_COLS). */
static inline int st_tile_min_cols(strata_type type) {
    return type == STRATA_TYPE_Q8_0 || type == STRATA_TYPE_Q4_0 ? 4 : type == STRATA_TYPE_Q6_K ? 16 : ST_TILE_MIN_COLS;
}

/* CPU features, probed once (cpuid + OS support). */
typedef struct {
    int avx2, fma, f16c;
    int avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    int amx_tile, amx_int8, amx_bf16;
} st_cpu_features;
const st_cpu_features *st_cpu_get_features(void);

#endif /* STRATA_DOT_H */
