/* dot_amx.c - Q4_K / Q5_K / Q6_K weight rows against several q8_K activation rows, and Q8_0 /
 * Q4_0 rows against q8_0 rows, on the AMX tile unit (prompt batches, grouped experts), bit-identical
 * to the AVX-512 single-row kernels. The Q8_0 and Q6_K sections at the end follow the same plan
 * with TDPBSSD (signed weights, one tile product per 32-weight block) and 16-deep tiles (Q6_K's
 * groups).
 *
 * Compiled with the AVX-512 flags plus -mamx-tile -mamx-int8 (the Makefile keys on "_amx" in the
 * file name); dot.c registers it only when cpuid and XCR0 report AMX-TILE and AMX-INT8, the
 * AVX-512 level is there, and Linux granted this process the tile state (st_amx_request).
 *
 * A call covers up to 16 weight rows (m) and any number of activation rows (tokens, n), 16 at a
 * time. TDPBSUD multiplies signed bytes (A: 16 tokens x 32 activations, read in place from the
 * q8_K rows) by unsigned bytes (B: the 32 unpacked weights of one sub-block of each of the 16
 * rows, in the tile unit's 4-byte-interleaved layout B[kk][4m + e] = u_m[4kk + e]), so one tile
 * product gives C_j[n][m], the exact integer dot of sub-block j for every (token, row). The rest
 * is the AVX-512 kernel's arithmetic (dot_avx512.c), in vector lanes over m:
 *   S = sum_j sc_j * C_j,  M = sum_j min_j * (bsum_2j + bsum_2j+1)   (exact int32)
 *   acc = fma(S, d_x * d, acc), accm = fma(M, d_x * dmin, accm)     (super-block order)
 *   out = acc - accm.
 * Every integer is exact and every float step the same operation on the same operands, so the
 * bits equal the single-row kernel's whatever the batch.
 *
 * ST_AMX_EMULATE (tests on machines without AMX) replaces the tile instructions with plain
 * C on arrays; everything else is the same code. */
#include "dot_avx512.h"

#include <stddef.h>
#ifdef ST_AMX_EMULATE /* the test build's copy, linked beside the library's */
#define st_dot_register_amx st_dot_register_amx_emulated
#define st_amx_request st_amx_request_emulated
#endif
#if defined(__linux__) && !defined(ST_AMX_EMULATE)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* ---------------------------------------------------------------------------------------------
 * Tile instructions (or their emulation)
 * ------------------------------------------------------------------------------------------- */

/* The 64-byte tile configuration (palette 1): rows and bytes per row of each tile register. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} st_tilecfg;

/* Tiles: 0 = C (nt x 16 int32), 1 = A (nt x kb bytes), 2 = B (kb / 4 x 64 bytes); kb = 32 (a
 * sub-block or block of 32 weights) or 16 (Q6_K's groups). */
static void st_tilecfg_make(st_tilecfg *c, int nt, int kb) {
    memset(c, 0, sizeof *c);
    c->palette = 1;
    c->rows[0] = (uint8_t)nt, c->colsb[0] = 64;
    c->rows[1] = (uint8_t)nt, c->colsb[1] = (uint16_t)kb;
    c->rows[2] = (uint8_t)(kb / 4), c->colsb[2] = 64;
}

#ifdef ST_AMX_EMULATE
static _Thread_local st_tilecfg st_emu_cfg;
static _Thread_local uint8_t st_emu_tile[8][16][64];
static void st_emu_load(int t, const void *p, size_t stride) {
    for (int r = 0; r < st_emu_cfg.rows[t]; r++)
        memcpy(st_emu_tile[t][r], (const uint8_t *)p + (size_t)r * stride, st_emu_cfg.colsb[t]);
}
static void st_emu_store(int t, void *p, size_t stride) {
    for (int r = 0; r < st_emu_cfg.rows[t]; r++)
        memcpy((uint8_t *)p + (size_t)r * stride, st_emu_tile[t][r], st_emu_cfg.colsb[t]);
}
/* C[m][n] += sum over k of (int8) A[m][k] * B[k / 4][4n + k % 4], B unsigned (dpbsud) or
 * signed (dpbssd) bytes */
static void st_emu_dp(int c, int a, int b, int b_signed) {
    for (int m = 0; m < st_emu_cfg.rows[c]; m++)
        for (int n = 0; n < st_emu_cfg.colsb[c] / 4; n++) {
            int32_t s;
            memcpy(&s, &st_emu_tile[c][m][4 * n], 4);
            for (int k = 0; k < st_emu_cfg.colsb[a]; k++) {
                const uint8_t v = st_emu_tile[b][k / 4][4 * n + k % 4];
                s += (int32_t)(int8_t)st_emu_tile[a][m][k] * (b_signed ? (int32_t)(int8_t)v : (int32_t)v);
            }
            memcpy(&st_emu_tile[c][m][4 * n], &s, 4);
        }
}
#define ST_TILE_CONFIG(cfg) (st_emu_cfg = *(cfg))
#define ST_TILE_RELEASE() ((void)0)
#define ST_TILE_ZERO(t) memset(st_emu_tile[t], 0, sizeof st_emu_tile[t])
#define ST_TILE_LOAD(t, p, stride) st_emu_load(t, p, stride)
#define ST_TILE_STORE(t, p, stride) st_emu_store(t, p, stride)
#define ST_TILE_DPBSUD(c, a, b) st_emu_dp(c, a, b, 0)
#define ST_TILE_DPBSSD(c, a, b) st_emu_dp(c, a, b, 1)
#else
#define ST_TILE_CONFIG(cfg) _tile_loadconfig(cfg)
#define ST_TILE_RELEASE() _tile_release()
#define ST_TILE_ZERO(t) _tile_zero(t)
#define ST_TILE_LOAD(t, p, stride) _tile_loadd(t, p, stride)
#define ST_TILE_STORE(t, p, stride) _tile_stored(t, p, stride)
#define ST_TILE_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#define ST_TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#endif

/* ---------------------------------------------------------------------------------------------
 * Weight rows unpacked for the tiles
 * ------------------------------------------------------------------------------------------- */

#define ST_AMX_SB_CHUNK 16  /* super-blocks unpacked at a time (84 KB on the stack) */
#define ST_AMX_TOK_GROUP 64 /* activation rows whose accumulators live across the chunks */

/* One super-block of 16 weight rows (rows past the call's count are zeros). */
typedef struct {
    uint8_t b[8][512]; /* B tile of sub-block j: [kk][4m + e] = u_m[32j + 4kk + e] */
    __m512i sc[8];     /* int32 lanes m: the 6-bit scale of sub-block j */
    __m512i mn[8];     /* int32 lanes m: (min_j, min_j) as two int16, against a pair of bsums */
    __m512 d, dmin;    /* lanes m: the super-block's fp16 scales as floats */
} st_amx_sb;

/* In place: row k of the result is column k of the 16 x 16 int32 input (rows r[0..15]). */
static inline void st_transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* u[4i + c], 128-bit lane L: column 4L + c of rows 4i..4i+3 */
    for (int i = 0; i < 4; i++) {
        u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int c = 0; c < 4; c++) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);
        const __m512i v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xDD);
        const __m512i w0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
        const __m512i w1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xDD);
        r[c] = _mm512_shuffle_i32x4(v0, w0, 0x88);
        r[8 + c] = _mm512_shuffle_i32x4(v0, w0, 0xDD);
        r[4 + c] = _mm512_shuffle_i32x4(v1, w1, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(v1, w1, 0xDD);
    }
}

/* Byte j of each of the 16 qwords q[0..15] as 16 int32 lanes. */
static inline __m512i st_byte_lanes(__m512i q0, __m512i q1, int j) {
    const __m512i ff = _mm512_set1_epi64(0xFF);
    const __m256i a = _mm512_cvtepi64_epi32(_mm512_and_si512(_mm512_srli_epi64(q0, 8 * j), ff));
    const __m256i b = _mm512_cvtepi64_epi32(_mm512_and_si512(_mm512_srli_epi64(q1, 8 * j), ff));
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

/* bsums 2p and 2p + 1 of activation block y as one int32 (two int16), in every lane. */
static inline __m512i st_bsum_pair(const block_q8_K *y, int p) {
    return _mm512_set1_epi32((int)st_load_u32((const uint8_t *)&y->bsums[2 * p]));
}

/* The steps every kernel below shares. */

/* Loads the tile configuration for nt activation rows of kb bytes when *cur_nt differs. */
static inline void st_amx_config(st_tilecfg *cfg, int *cur_nt, int nt, int kb) {
    if (nt == *cur_nt) return;
    st_tilecfg_make(cfg, nt, kb);
    ST_TILE_CONFIG(cfg);
    *cur_nt = nt;
}

/* ng tile products of unsigned weights: C_g = A (the activation rows at xa + g * kb, row stride
 * xs) x B (the tile at b + g * bstride), stored to cbuf[g] (16 x 16 int32). */
static inline __attribute__((always_inline)) void
st_amx_dots_u(const uint8_t *xa, size_t xs, int kb, const uint8_t *b, size_t bstride, int ng,
              int32_t (*cbuf)[16][16]) {
    for (int g = 0; g < ng; g++) {
        ST_TILE_ZERO(0);
        ST_TILE_LOAD(1, xa + (size_t)g * (size_t)kb, xs);
        ST_TILE_LOAD(2, b + (size_t)g * bstride, 64);
        ST_TILE_DPBSUD(0, 1, 2);
        ST_TILE_STORE(0, cbuf[g], 64);
    }
}

/* sum over g < ng of C_g[r] * sc[g] in int32 lanes over the weight rows (exact). */
static inline __attribute__((always_inline)) __m512i
st_amx_scaled(int32_t (*cbuf)[16][16], int r, const __m512i *sc, int ng) {
    __m512i S = _mm512_mullo_epi32(_mm512_load_si512(cbuf[0][r]), sc[0]);
    for (int g = 1; g < ng; g++)
        S = _mm512_add_epi32(S, _mm512_mullo_epi32(_mm512_load_si512(cbuf[g][r]), sc[g]));
    return S;
}

/* sum over p < 8 of (bsum_2p, bsum_2p+1) . pair[p] in int32 lanes over the weight rows (exact):
 * the K-quants' min or offset term. */
static inline __m512i st_amx_bsum_dot(const block_q8_K *y, const __m512i pair[8]) {
    __m512i M = _mm512_setzero_si512();
    for (int p = 0; p < 8; p++) M = _mm512_dpwssd_epi32(M, st_bsum_pair(y, p), pair[p]);
    return M;
}

/* out rows c0 .. c0 + nt - 1 (the nr weight rows of keep) = acc - accm. */
static inline void st_amx_store_diff(float *out, size_t ldo, int64_t c0, int64_t nt, __mmask16 keep,
                                     const float (*acc)[16], const float (*accm)[16]) {
    for (int64_t r = 0; r < nt; r++)
        _mm512_mask_storeu_ps(out + (size_t)(c0 + r) * ldo, keep,
                              _mm512_sub_ps(_mm512_load_ps(acc[r]), _mm512_load_ps(accm[r])));
}

/* Super-block i of rows w + m * ws (m < nr) of Q4_K (q5 = 0) or Q5_K (q5 = 1) into o. */
static void st_amx_unpack(const uint8_t *w, size_t ws, int nr, int q5, int64_t i, st_amx_sb *o) {
    const size_t bs = q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    _Alignas(64) uint64_t sc8[16], mn8[16];
    _Alignas(32) uint16_t dh[16], dmh[16];
    const uint8_t *blk[16];
    for (int m = 0; m < 16; m++) {
        blk[m] = m < nr ? w + (size_t)m * ws + (size_t)i * bs : NULL;
        sc8[m] = mn8[m] = 0;
        dh[m] = dmh[m] = 0;
        if (!blk[m]) continue;
        const block_q4_K *b4 = (const block_q4_K *)blk[m];
        const block_q5_K *b5 = (const block_q5_K *)blk[m];
        st_k4_scales(q5 ? b5->scales : b4->scales, &sc8[m], &mn8[m]);
        dh[m] = q5 ? b5->d : b4->d;
        dmh[m] = q5 ? b5->dmin : b4->dmin;
    }
    const __m512i sixteen = _mm512_set1_epi8(16);
    for (int t = 0; t < 4; t++) {
        /* row m: [sub-block 2t | sub-block 2t+1] as 16 dwords of 4 weights; transposed, rows
         * 0..7 are B tile 2t and 8..15 B tile 2t+1 */
        __m512i r[16];
        const __m512i bits = st_bitsel(t);
        for (int m = 0; m < 16; m++) {
            if (!blk[m]) { r[m] = _mm512_setzero_si512(); continue; }
            const block_q4_K *b4 = (const block_q4_K *)blk[m];
            const block_q5_K *b5 = (const block_q5_K *)blk[m];
            r[m] = st_nibbles_256((q5 ? b5->qs : b4->qs) + 32 * t);
            if (q5) /* the 5th bits */
                r[m] = _mm512_mask_add_epi8(r[m], _mm512_test_epi8_mask(st_bcast_256(b5->qh), bits), r[m],
                                            sixteen);
        }
        st_transpose16(r);
        for (int k = 0; k < 16; k++) _mm512_store_si512((void *)(o->b[2 * t + k / 8] + 64 * (k % 8)), r[k]);
    }
    const __m512i s0 = _mm512_load_si512(sc8), s1 = _mm512_load_si512(sc8 + 8);
    const __m512i n0 = _mm512_load_si512(mn8), n1 = _mm512_load_si512(mn8 + 8);
    for (int j = 0; j < 8; j++) {
        o->sc[j] = st_byte_lanes(s0, s1, j);
        const __m512i mn = st_byte_lanes(n0, n1, j);
        o->mn[j] = _mm512_or_si512(mn, _mm512_slli_epi32(mn, 16));
    }
    o->d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)dh));
    o->dmin = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)dmh));
}

/* ---------------------------------------------------------------------------------------------
 * The kernel
 * ------------------------------------------------------------------------------------------- */

/* out[c * ldo + r] = dot(w + r * ws, xq + c * xs) for r < nr (1..16), c < nc. */
static void st_amx_q45_K(int64_t n, float *out, size_t ldo, const void *wv, size_t ws, int nr,
                         const void *xq, size_t xs, int64_t nc, int q5) {
    const int64_t nb = n / QK_K;
    const uint8_t *w = wv;
    _Alignas(64) st_amx_sb sb[ST_AMX_SB_CHUNK];
    _Alignas(64) int32_t cbuf[8][16][16];
    _Alignas(64) float acc[ST_AMX_TOK_GROUP][16], accm[ST_AMX_TOK_GROUP][16];
    _Alignas(64) st_tilecfg cfg;
    int cfg_rows = 0;
    const __mmask16 keep = (__mmask16)((1u << nr) - 1u);
    for (int64_t c0 = 0; c0 < nc; c0 += ST_AMX_TOK_GROUP) {
        const int64_t ng = nc - c0 < ST_AMX_TOK_GROUP ? nc - c0 : ST_AMX_TOK_GROUP;
        memset(acc, 0, sizeof(float) * 16 * (size_t)ng);
        memset(accm, 0, sizeof(float) * 16 * (size_t)ng);
        for (int64_t i0 = 0; i0 < nb; i0 += ST_AMX_SB_CHUNK) {
            const int64_t ni = nb - i0 < ST_AMX_SB_CHUNK ? nb - i0 : ST_AMX_SB_CHUNK;
            if (c0 == 0 || nb > ST_AMX_SB_CHUNK) /* one chunk: unpacked once for every group */
                for (int64_t ii = 0; ii < ni; ii++) st_amx_unpack(w, ws, nr, q5, i0 + ii, &sb[ii]);
            for (int64_t t0 = 0; t0 < ng; t0 += 16) {
                const int nt = (int)(ng - t0 < 16 ? ng - t0 : 16);
                st_amx_config(&cfg, &cfg_rows, nt, 32);
                const uint8_t *x0 = (const uint8_t *)xq + (size_t)(c0 + t0) * xs;
                for (int64_t ii = 0; ii < ni; ii++) {
                    const int64_t i = i0 + ii;
                    const st_amx_sb *s = &sb[ii];
                    const uint8_t *xa = x0 + (size_t)i * sizeof(block_q8_K) + offsetof(block_q8_K, qs);
                    st_amx_dots_u(xa, xs, 32, s->b[0], sizeof s->b[0], 8, cbuf);
                    for (int r = 0; r < nt; r++) {
                        const block_q8_K *y = (const block_q8_K *)(x0 + (size_t)r * xs) + i;
                        const __m512i S = st_amx_scaled(cbuf, r, s->sc, 8), M = st_amx_bsum_dot(y, s->mn);
                        const __m512 yd = _mm512_set1_ps(y->d);
                        float *a = acc[t0 + r], *am = accm[t0 + r];
                        const __m512 dd = _mm512_mul_ps(yd, s->d), dm = _mm512_mul_ps(yd, s->dmin);
                        _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), dd, _mm512_load_ps(a)));
                        _mm512_store_ps(am, _mm512_fmadd_ps(_mm512_cvtepi32_ps(M), dm, _mm512_load_ps(am)));
                    }
                }
            }
        }
        st_amx_store_diff(out, ldo, c0, ng, keep, (const float (*)[16])acc, (const float (*)[16])accm);
    }
    ST_TILE_RELEASE();
}

static void st_tile_q4_K_amx(int64_t n, float *out, size_t ldo, const void *w, size_t ws, int nr,
                             const void *xq, size_t xs, int64_t nc) {
    st_amx_q45_K(n, out, ldo, w, ws, nr, xq, xs, nc, 0);
}

static void st_tile_q5_K_amx(int64_t n, float *out, size_t ldo, const void *w, size_t ws, int nr,
                             const void *xq, size_t xs, int64_t nc) {
    st_amx_q45_K(n, out, ldo, w, ws, nr, xq, xs, nc, 1);
}

/* ---------------------------------------------------------------------------------------------
 * Q8_0 and Q4_0: blocks of 32 signed weights with an fp16 scale (dot_avx512.c's order: each block's exact
 * sum S_b, acc_k = fma(S_b, d_w * d_x, acc_k) for k = b mod 16, then the fixed sum tree)
 * ------------------------------------------------------------------------------------------- */

#define ST_AMX_Q8_CHUNK 128 /* blocks unpacked at a time (72 KB on the stack) */

/* One block of 16 weight rows (rows past the call's count are zeros). */
typedef struct {
    uint8_t b[512]; /* B tile: [kk][4m + e] = q_m[4kk + e] (signed bytes) */
    __m512 d;       /* lanes m: the block's scale */
} st_amx_q8b;

/* Blocks i0 .. i0 + nbk - 1 of rows w + m * ws (m < nr) of Q8_0 (q4 = 0) or Q4_0 (q4 = 1: the
 * nibbles minus 8, the same signed bytes the AVX-512 kernel's sums stand for) into o. */
static void st_amx_unpack_q8(const uint8_t *w, size_t ws, int nr, int q4, int64_t i0, int64_t nbk, st_amx_q8b *o) {
    for (int64_t k = 0; k < nbk; k += 2) {
        const int has2 = k + 1 < nbk;
        __m512i r[16];
        _Alignas(32) uint16_t dh[2][16];
        for (int m = 0; m < 16; m++) {
            if (m >= nr) {
                r[m] = _mm512_setzero_si512();
                dh[0][m] = dh[1][m] = 0;
                continue;
            }
            if (q4) {
                const block_q4_0 *blk = (const block_q4_0 *)(w + (size_t)m * ws) + i0 + k;
                r[m] = _mm512_sub_epi8(st_nibbles_2x128(blk[0].qs, has2 ? blk[1].qs : NULL), _mm512_set1_epi8(8));
                dh[0][m] = blk[0].d;
                dh[1][m] = has2 ? blk[1].d : 0;
                continue;
            }
            const block_q8_0 *blk = (const block_q8_0 *)(w + (size_t)m * ws) + i0 + k;
            const __m256i lo = _mm256_loadu_si256((const __m256i *)blk[0].qs);
            const __m256i hi = has2 ? _mm256_loadu_si256((const __m256i *)blk[1].qs) : _mm256_setzero_si256();
            r[m] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            dh[0][m] = blk[0].d;
            dh[1][m] = has2 ? blk[1].d : 0;
        }
        st_transpose16(r); /* rows 0..7: block k's tile, 8..15: block k + 1's */
        for (int q = 0; q < 16; q++)
            if (q < 8 || has2) _mm512_store_si512((void *)(o[k + q / 8].b + 64 * (q % 8)), r[q]);
        o[k].d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)dh[0]));
        if (has2) o[k + 1].d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)dh[1]));
    }
}

static void st_amx_q80(int64_t n, float *out, size_t ldo, const void *wv, size_t ws, int nr,
                       const void *xq, size_t xs, int64_t nc, int q4) {
    const int64_t nb = n / QK8_0;
    const uint8_t *w = wv;
    _Alignas(64) st_amx_q8b wb[ST_AMX_Q8_CHUNK];
    _Alignas(64) int32_t cbuf[16][16];
    _Alignas(64) float acc[16][16][16]; /* [b mod 16][token][row] */
    _Alignas(64) st_tilecfg cfg;
    int cfg_rows = 0;
    const __mmask16 keep = (__mmask16)((1u << nr) - 1u);
    for (int64_t c0 = 0; c0 < nc; c0 += 16) {
        const int nt = (int)(nc - c0 < 16 ? nc - c0 : 16);
        memset(acc, 0, sizeof acc);
        st_amx_config(&cfg, &cfg_rows, nt, 32);
        const uint8_t *x0 = (const uint8_t *)xq + (size_t)c0 * xs;
        for (int64_t i0 = 0; i0 < nb; i0 += ST_AMX_Q8_CHUNK) {
            const int64_t ni = nb - i0 < ST_AMX_Q8_CHUNK ? nb - i0 : ST_AMX_Q8_CHUNK;
            if (c0 == 0 || nb > ST_AMX_Q8_CHUNK) st_amx_unpack_q8(w, ws, nr, q4, i0, ni, wb);
            for (int64_t ii = 0; ii < ni; ii++) {
                const int64_t i = i0 + ii;
                ST_TILE_ZERO(0);
                ST_TILE_LOAD(1, x0 + (size_t)i * sizeof(block_q8_0) + offsetof(block_q8_0, qs), xs);
                ST_TILE_LOAD(2, wb[ii].b, 64);
                ST_TILE_DPBSSD(0, 1, 2);
                ST_TILE_STORE(0, cbuf, 64);
                float (*a)[16] = acc[i % 16];
                for (int r = 0; r < nt; r++) {
                    const block_q8_0 *y = (const block_q8_0 *)(x0 + (size_t)r * xs) + i;
                    const __m512 dd = _mm512_mul_ps(wb[ii].d, _mm512_set1_ps(st_h2f(y->d)));
                    _mm512_store_ps(a[r], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cbuf[r])), dd,
                                                          _mm512_load_ps(a[r])));
                }
            }
        }
        for (int r = 0; r < nt; r++) { /* st_q8_0_final's tree: + 8 apart, 4, 2, 1 */
            __m512 t[16];
            for (int k = 0; k < 16; k++) t[k] = _mm512_load_ps(acc[k][r]);
            for (int wd = 8; wd >= 1; wd /= 2)
                for (int k = 0; k < wd; k++) t[k] = _mm512_add_ps(t[k], t[k + wd]);
            _mm512_mask_storeu_ps(out + (size_t)(c0 + r) * ldo, keep, t[0]);
        }
    }
    ST_TILE_RELEASE();
}

static void st_tile_q8_0_amx(int64_t n, float *out, size_t ldo, const void *w, size_t ws, int nr,
                             const void *xq, size_t xs, int64_t nc) {
    st_amx_q80(n, out, ldo, w, ws, nr, xq, xs, nc, 0);
}

static void st_tile_q4_0_amx(int64_t n, float *out, size_t ldo, const void *w, size_t ws, int nr,
                             const void *xq, size_t xs, int64_t nc) {
    st_amx_q80(n, out, ldo, w, ws, nr, xq, xs, nc, 1);
}

/* ---------------------------------------------------------------------------------------------
 * Q6_K: 16 groups of 16 weights with int8 scales (dot_avx512.c's order: S = sum_g sc_g * dot_g and
 * O = sum_g sc_g * bsum_g exact, acc = fma(S, d_x * d, acc), accm = fma(O, 32 * (d_x * d), accm)),
 * one TDPBSUD of 16-deep tiles per group
 * ------------------------------------------------------------------------------------------- */

/* One super-block of 16 weight rows (rows past the call's count are zeros). */
typedef struct {
    uint8_t b[16][256]; /* B tile of group g: [kk][4m + e] = u_m[16g + 4kk + e] (u = q + 32) */
    __m512i sc[16];     /* int32 lanes m: the scale of group g */
    __m512i scp[8];     /* int32 lanes m: (sc_2p, sc_2p+1) as two int16, against a pair of bsums */
    __m512 d;           /* lanes m: the super-block's scale */
} st_amx_q6b;

static void st_amx_unpack_q6(const uint8_t *w, size_t ws, int nr, int64_t i, st_amx_q6b *o) {
    const __m512i sh[2] = {st_shift_2bit(0), st_shift_2bit(1)};
    _Alignas(32) uint16_t dh[16];
    __m512i r[16];
    for (int m = 0; m < 16; m++) { /* scales: row m's 16 as int32, transposed below */
        const block_q6_K *b = m < nr ? (const block_q6_K *)(w + (size_t)m * ws) + i : NULL;
        r[m] = b ? _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales)) : _mm512_setzero_si512();
        dh[m] = b ? b->d : 0;
    }
    st_transpose16(r);
    for (int g = 0; g < 16; g++) o->sc[g] = r[g];
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    for (int p = 0; p < 8; p++)
        o->scp[p] = _mm512_or_si512(_mm512_and_si512(r[2 * p], lo16), _mm512_slli_epi32(r[2 * p + 1], 16));
    o->d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)dh));
    for (int t = 0; t < 4; t++) {
        /* row m: weights 64t .. 64t + 63 as 16 dwords; transposed, row q is tile 4t + q / 4's row q % 4 */
        for (int m = 0; m < 16; m++)
            r[m] = m < nr ? st_q6_K_u((const block_q6_K *)(w + (size_t)m * ws) + i, t, sh)
                          : _mm512_setzero_si512();
        st_transpose16(r);
        for (int q = 0; q < 16; q++) _mm512_store_si512((void *)(o->b[4 * t + q / 4] + 64 * (q % 4)), r[q]);
    }
}

#define ST_AMX_Q6_CHUNK 16 /* super-blocks unpacked at a time (92 KB on the stack) */

static void st_tile_q6_K_amx(int64_t n, float *out, size_t ldo, const void *wv, size_t ws, int nr,
                             const void *xq, size_t xs, int64_t nc) {
    const int64_t nb = n / QK_K;
    const uint8_t *w = wv;
    _Alignas(64) st_amx_q6b sb[ST_AMX_Q6_CHUNK];
    _Alignas(64) int32_t cbuf[16][16][16];
    _Alignas(64) float acc[16][16], accm[16][16];
    _Alignas(64) st_tilecfg cfg;
    int cfg_rows = 0;
    const __mmask16 keep = (__mmask16)((1u << nr) - 1u);
    const __m512 f32 = _mm512_set1_ps(32.0f);
    for (int64_t c0 = 0; c0 < nc; c0 += 16) {
        const int nt = (int)(nc - c0 < 16 ? nc - c0 : 16);
        memset(acc, 0, sizeof acc);
        memset(accm, 0, sizeof accm);
        st_amx_config(&cfg, &cfg_rows, nt, 16);
        const uint8_t *x0 = (const uint8_t *)xq + (size_t)c0 * xs;
        for (int64_t i0 = 0; i0 < nb; i0 += ST_AMX_Q6_CHUNK) {
            const int64_t ni = nb - i0 < ST_AMX_Q6_CHUNK ? nb - i0 : ST_AMX_Q6_CHUNK;
            if (c0 == 0 || nb > ST_AMX_Q6_CHUNK)
                for (int64_t ii = 0; ii < ni; ii++) st_amx_unpack_q6(w, ws, nr, i0 + ii, &sb[ii]);
            for (int64_t ii = 0; ii < ni; ii++) {
                const int64_t i = i0 + ii;
                const st_amx_q6b *s = &sb[ii];
                const uint8_t *xa = x0 + (size_t)i * sizeof(block_q8_K) + offsetof(block_q8_K, qs);
                st_amx_dots_u(xa, xs, 16, s->b[0], sizeof s->b[0], 16, cbuf);
                for (int r = 0; r < nt; r++) {
                    const block_q8_K *y = (const block_q8_K *)(x0 + (size_t)r * xs) + i;
                    const __m512i S = st_amx_scaled(cbuf, r, s->sc, 16), O = st_amx_bsum_dot(y, s->scp);
                    const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(y->d), s->d);
                    _mm512_store_ps(acc[r], _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), dd, _mm512_load_ps(acc[r])));
                    _mm512_store_ps(accm[r], _mm512_fmadd_ps(_mm512_cvtepi32_ps(O), _mm512_mul_ps(f32, dd),
                                                             _mm512_load_ps(accm[r])));
                }
            }
        }
        st_amx_store_diff(out, ldo, c0, nt, keep, (const float (*)[16])acc, (const float (*)[16])accm);
    }
    ST_TILE_RELEASE();
}

/* ---------------------------------------------------------------------------------------------
 * Registration
 * ------------------------------------------------------------------------------------------- */

int st_amx_request(void) {
#ifdef ST_AMX_EMULATE
    return 1;
#elif defined(__linux__)
    /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): without it the first tile
     * instruction faults; granted once for the whole process */
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return 0;
#endif
}

void st_dot_register_amx(st_vec_dot_tile_fn *table) {
    table[STRATA_TYPE_Q4_K] = st_tile_q4_K_amx;
    table[STRATA_TYPE_Q5_K] = st_tile_q5_K_amx;
    table[STRATA_TYPE_Q8_0] = st_tile_q8_0_amx;
    table[STRATA_TYPE_Q6_K] = st_tile_q6_K_amx;
    table[STRATA_TYPE_Q4_0] = st_tile_q4_0_amx;
}
