/* test_cuda_mmv.c - the GPU decode GEMV (c/cuda/mmv.cu) and the Q8_1 activation quantizer
 * (c/cuda/quantize.cu) against the CPU library.
 *
 * What is asserted:
 *   - q8_1: GPU blocks equal a host reference of the same formula bit for bit (d = amax / 127,
 *     q = roundf(x / d), s = fp16(d * sum q)), incl. an all-zero block; guard bytes after.
 *   - st_cuda_mmv, every supported type: random well-formed weight blocks (random quant bytes,
 *     fp16 scales of magnitude 2^-8..2^-6 with random signs), random x in [-1, 1). For each
 *     checked row r and column c the references are the CPU's strata_vec_dot (x quantized to the
 *     type's activation type, Q8_0 / Q8_K / F32) and a double-precision dot of the dequantized
 *     row with the f32 x ("exact"). NMSE = sum (gpu - ref)^2 / sum ref^2 over the case:
 *       quantized types: NMSE vs CPU <= 5e-4 and vs exact <= 5e-4 (the GPU's Q8_1 activation
 *         rounding alone gives ~1e-5; a wrong index or scale gives >= 1e-2);
 *       F32 / F16 / BF16: NMSE vs exact <= 1e-7 and vs CPU <= 1e-7 (fp32 products of exact
 *         weights and fp32 sums: expected ~1e-13, so 1e-7 is met with a wide margin).
 *     Plus: no NaN in any output, every output written (the buffer is poisoned with a sentinel
 *     first; all rows are checked for this even where only sampled rows are compared), sentinel
 *     words after y and after the scratch unchanged.
 *   - shapes: odd sizes (ne0 = 37 blocks of 32 or 5 of 256, 1001 for float types; ne1 = 333, not
 *     a multiple of the 4 rows per CTA) with ncols 1..8; the real shapes of Qwen3-30B-A3B,
 *     OLMoE-1B-7B and Mixtral with ncols 1 and 8; a padded row stride with x not 16-byte aligned.
 *     Large cases compare a strided sample of rows (always incl. the last) to bound CPU time.
 *   - st_cuda_mmv_swiglu: silu(Wg x) * (Wu x) vs the same built from CPU dots, same bounds.
 *   - argument errors, supports(), scratch size, IQ3 grid tables (these need no GPU).
 *   - the SM60 Q8_0 GEMV (q8_sm60, opt-in; q8_sm60_case.h): matrices marked gemv_sm60 with their
 *     packed copy, the real dense shapes (attention, output head) of Qwen3-30B-A3B, OLMoE,
 *     Mixtral, Qwen1.5-MoE and Granite-3.0-MoE plus rows under 1024 and 2048 wide (the quarter- and
 *     half-warp forms), 1..8 columns, the fused SwiGLU: max |err| / max |ref| per column < 1e-5
 *     against the double sum of exact int32 block sums times the scales; every output written,
 *     guards intact. A call over 48 KiB of shared memory (6144 wide, 8 columns) is declined and
 *     gives the usual kernel's bits. Without STRATA_NO_DP4A the dot is __dp4a on this GPU.
 * One line per case: type, shape, ncols, NMSE vs CPU and exact, max |err|, rows compared. */
#include "strata.h"
#include "strata_quant.h"
#include "block_fields.h"
#include "test.h"

#ifdef STRATA_HAVE_CUDA
#include "cuda_backend.h"
#include "cuda_mmq.h"
#include "cuda_mmv.h"
#include "cuda_moe.h"
#include "common.h" /* st_f32_to_fp16, st_f32_to_bf16 */

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define GUARD 64               /* sentinel words after each output */
#define SENTINEL 0xA5A5A5A5u   /* a finite float (-2.9e-16) no kernel writes by chance */
#define REF_BUDGET 6000000.0   /* weights x columns compared per case (bounds CPU time) */

static const strata_type gpu_types[] = {
    STRATA_TYPE_F32,  STRATA_TYPE_F16,  STRATA_TYPE_BF16,   STRATA_TYPE_Q4_0,  STRATA_TYPE_Q4_1,
    STRATA_TYPE_Q5_0, STRATA_TYPE_Q5_1, STRATA_TYPE_Q8_0,   STRATA_TYPE_IQ4_NL, STRATA_TYPE_Q2_K,
    STRATA_TYPE_Q3_K, STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_K,   STRATA_TYPE_Q6_K,  STRATA_TYPE_IQ4_XS,
    STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ3_S, STRATA_TYPE_IQ2_XXS, STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ2_S,
    STRATA_TYPE_IQ1_S, STRATA_TYPE_IQ1_M, STRATA_TYPE_MXFP4,
};
#define N_GPU_TYPES (sizeof gpu_types / sizeof gpu_types[0])

static int is_float_type(strata_type t) {
    return t == STRATA_TYPE_F32 || t == STRATA_TYPE_F16 || t == STRATA_TYPE_BF16;
}

/* ---- random data ---------------------------------------------------------------------------- */

static void fill_bytes(uint8_t *p, size_t n, test_rng *r) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const unsigned long long v = test_rng_next(r);
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++) p[i] = (uint8_t)test_rng_next(r);
}

/* A random fp16 scale: magnitude in [2^-8, 2^-6), random sign. */
static uint16_t rand_scale(test_rng *r) {
    const float m = ldexpf(1.0f + 3.0f * (0.5f + 0.5f * test_rng_float(r)), -8);
    return st_f32_to_fp16((test_rng_next(r) & 1) ? -m : m);
}

/* ne1 rows of ne0 weights, row stride rb bytes (padding bytes random too). */
static void fill_matrix(strata_type type, uint8_t *buf, int64_t ne0, int64_t ne1, size_t rb,
                        test_rng *r) {
    fill_bytes(buf, rb * (size_t)ne1, r);
    for (int64_t row = 0; row < ne1; row++) {
        uint8_t *p = buf + (size_t)row * rb;
        if (type == STRATA_TYPE_F32) {
            for (int64_t i = 0; i < ne0; i++) {
                const float f = test_rng_float(r);
                memcpy(p + 4 * i, &f, 4);
            }
        } else if (type == STRATA_TYPE_F16 || type == STRATA_TYPE_BF16) {
            for (int64_t i = 0; i < ne0; i++) {
                const float f = test_rng_float(r);
                put16(p + 2 * i, type == STRATA_TYPE_F16 ? st_f32_to_fp16(f) : st_f32_to_bf16(f));
            }
        } else {
            const int64_t bb = strata_type_block_bytes(type), nb = ne0 / strata_type_block_size(type);
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *blk = p + b * bb;
                for (const int *f = fp16_fields(type); *f >= 0; f++) put16(blk + *f, rand_scale(r));
                if (type == STRATA_TYPE_IQ1_M) { /* d: the top nibbles of the scale words at 48 */
                    const uint16_t h = rand_scale(r);
                    for (int k = 0; k < 4; k++) blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
                }
                if (type == STRATA_TYPE_MXFP4) blk[0] = (uint8_t)(120 + test_rng_next(r) % 8); /* 2^-8 .. 2^-1 */
            }
        }
    }
}

/* ---- helpers -------------------------------------------------------------------------------- */

static float silu(float g) { return g / (1.0f + expf(-g)); }

/* Rows compared: every stride-th and the last. */
static int64_t ref_stride(int64_t ne0, int64_t ne1, int ncols, int fused) {
    const double work = (double)ne0 * (double)ne1 * ncols * (fused ? 2 : 1);
    int64_t s = (int64_t)ceil(work / REF_BUDGET);
    return s < 1 ? 1 : s;
}

/* Device buffers reused across cases (grown as needed). */
typedef struct {
    void *w0, *w1, *x, *y, *scratch, *y2, *scratch2;
    size_t w0_cap, w1_cap, x_cap, y_cap, scratch_cap, y2_cap, scratch2_cap;
} dev_bufs;


static strata_status ensure(void **p, size_t *cap, size_t bytes) {
    if (*cap >= bytes) return STRATA_OK;
    (void)st_cuda_free(*p);
    *p = NULL;
    *cap = 0;
    strata_status st = st_cuda_malloc(p, bytes);
    if (st == STRATA_OK) *cap = bytes;
    return st;
}

/* The tiles against the GEMV on the same inputs: d_y2 = the GEMV in slices of 8 columns; returns
 * their NMSE (-1 on error). The tiles compute the GEMV's function for the dp4a types. */
static double tiles_vs_gemv(dev_bufs *db, const st_cuda_mat *W0, const st_cuda_mat *W1,
                            const float *dx, int ncols, const uint32_t *got) {
    const int64_t ne0 = W0->ne0, ne1 = W0->ne1, ny = (int64_t)ncols * ne1;
    strata_status st = ensure(&db->y2, &db->y2_cap, (size_t)ny * 4);
    if (st == STRATA_OK) st = ensure(&db->scratch2, &db->scratch2_cap, st_cuda_mmv_scratch_bytes(ne0, 8));
    for (int c = 0; c < ncols && st == STRATA_OK; c += 8) {
        const int nc = ncols - c < 8 ? ncols - c : 8;
        float *y = (float *)db->y2 + (int64_t)c * ne1;
        st = W1 ? st_cuda_mmv_swiglu(W0, W1, dx + (int64_t)c * ne0, nc, y, db->scratch2, NULL)
                : st_cuda_mmv(W0, dx + (int64_t)c * ne0, nc, y, db->scratch2, NULL);
    }
    float *g2 = malloc((size_t)ny * 4);
    if (st == STRATA_OK && g2) st = st_cuda_memcpy_d2h(g2, db->y2, (size_t)ny * 4);
    double se = 0, sr = 0;
    for (int64_t i = 0; st == STRATA_OK && g2 && i < ny; i++) {
        float a;
        memcpy(&a, &got[i], 4);
        se += ((double)a - g2[i]) * ((double)a - g2[i]);
        sr += (double)g2[i] * g2[i];
    }
    free(g2);
    CHECK(st == STRATA_OK, "GEMV for the tiles comparison: %s", strata_last_error());
    return st == STRATA_OK ? (sr > 0 ? se / sr : se) : -1.0;
}

/* ---- one GEMV case -------------------------------------------------------------------------- */

/* W (and for fused Wu) of ne1 x ne0 of type, row stride = exact row bytes + pad, x at float
 * offset xoff inside its device buffer; the weights are made and uploaded once, then the GEMV
 * runs and is checked for each column count in ncs[0..n_nc). */
static void check_case(dev_bufs *db, strata_type type, const char *label, int64_t ne0, int64_t ne1,
                       const int *ncs, int n_nc, size_t pad, int xoff, int fused, test_rng *r) {
    const char *tn = strata_type_name(type);
    const size_t rb = (size_t)strata_row_bytes(type, ne0) + pad;
    const size_t wbytes = rb * (size_t)ne1;
    int maxc = 8; /* more columns than 8: the tensor-core tiles (st_cuda_mmq), same checks */
    for (int k = 0; k < n_nc; k++) maxc = ncs[k] > maxc ? ncs[k] : maxc;
    const int64_t ny_max = (int64_t)maxc * ne1;
    size_t sbytes_max = st_cuda_mmv_scratch_bytes(ne0, 8);
    if (st_cuda_mmq_scratch_bytes(ne0, maxc) > sbytes_max) sbytes_max = st_cuda_mmq_scratch_bytes(ne0, maxc);
    const strata_type act = strata_act_type(type);
    const size_t xq_bytes = (size_t)strata_row_bytes(act, ne0);

    uint8_t *w0 = malloc(wbytes), *w1 = fused ? malloc(wbytes) : NULL;
    float *x = malloc((size_t)(maxc * ne0) * sizeof(float));
    uint8_t *xq = malloc(xq_bytes * (size_t)maxc);
    uint32_t *got = malloc((size_t)(ny_max + GUARD) * 4);
    uint8_t *sguard = malloc(GUARD * 4);
    float *deq0 = malloc((size_t)ne0 * sizeof(float)), *deq1 = malloc((size_t)ne0 * sizeof(float));
    if (!w0 || (fused && !w1) || !x || !xq || !got || !sguard || !deq0 || !deq1) {
        CHECK(0, "%s %s: host allocation", tn, label);
        goto done;
    }
    fill_matrix(type, w0, ne0, ne1, rb, r);
    if (fused) fill_matrix(type, w1, ne0, ne1, rb, r);
    for (int64_t i = 0; i < maxc * ne0; i++) x[i] = test_rng_float(r);
    strata_status st = STRATA_OK;
    for (int c = 0; c < maxc && st == STRATA_OK; c++)
        st = strata_quantize_row(act, x + c * ne0, xq + (size_t)c * xq_bytes, ne0);
    CHECK(st == STRATA_OK, "%s %s: CPU quantize of x: %s", tn, label, strata_last_error());
    if (st != STRATA_OK) goto done;

    st = ensure(&db->w0, &db->w0_cap, wbytes);
    if (st == STRATA_OK && fused) st = ensure(&db->w1, &db->w1_cap, wbytes);
    if (st == STRATA_OK) st = ensure(&db->x, &db->x_cap, (size_t)(maxc * ne0 + 4) * sizeof(float));
    if (st == STRATA_OK) st = ensure(&db->y, &db->y_cap, (size_t)(ny_max + GUARD) * 4);
    if (st == STRATA_OK) st = ensure(&db->scratch, &db->scratch_cap, sbytes_max + GUARD * 4);
    float *dx = (float *)db->x + xoff;
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(db->w0, w0, wbytes);
    if (st == STRATA_OK && fused) st = st_cuda_memcpy_h2d(db->w1, w1, wbytes);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(dx, x, (size_t)(maxc * ne0) * sizeof(float));
    CHECK(st == STRATA_OK, "%s %s: upload: %s", tn, label, strata_last_error());
    if (st != STRATA_OK) goto done;

    for (int k = 0; k < n_nc; k++) {
        const int ncols = ncs[k];
        const int64_t ny = (int64_t)ncols * ne1;
        const int tiles = ncols > 8;
        const size_t sbytes = tiles ? st_cuda_mmq_scratch_bytes(ne0, ncols) : st_cuda_mmv_scratch_bytes(ne0, ncols);
        char what[160];
        snprintf(what, sizeof what, "%-7s %-18s ne0=%5lld ne1=%5lld ncols=%d%s%s%s%s", tn, label,
                 (long long)ne0, (long long)ne1, ncols, pad ? " padded" : "",
                 xoff ? " x+1" : "", fused ? " swiglu" : "", tiles ? " (mmq)" : "");

        st = st_cuda_memset(db->y, 0xA5, (size_t)(ny + GUARD) * 4);
        if (st == STRATA_OK) st = st_cuda_memset(db->scratch, 0xA5, sbytes + GUARD * 4);
        if (st == STRATA_OK) {
            const st_cuda_mat W0 = {type, db->w0, ne0, ne1, rb, NULL, 0}, W1 = {type, db->w1, ne0, ne1, rb, NULL, 0};
            if (tiles)
                st = fused ? st_cuda_mmq_swiglu(&W0, &W1, dx, ne0, ncols, (float *)db->y, ne1, db->scratch, NULL)
                           : st_cuda_mmq(&W0, dx, ne0, ncols, (float *)db->y, ne1, db->scratch, NULL);
            else
                st = fused ? st_cuda_mmv_swiglu(&W0, &W1, dx, ncols, (float *)db->y, db->scratch, NULL)
                           : st_cuda_mmv(&W0, dx, ncols, (float *)db->y, db->scratch, NULL);
        }
        if (st == STRATA_OK) st = st_cuda_synchronize();
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(got, db->y, (size_t)(ny + GUARD) * 4);
        if (st == STRATA_OK)
            st = st_cuda_memcpy_d2h(sguard, (uint8_t *)db->scratch + sbytes, GUARD * 4);
        CHECK(st == STRATA_OK, "%s: %s", what, strata_last_error());
        if (st != STRATA_OK) goto done;
        /* the other tile kernels give the default's bits: the fused GLU tiles (SwiGLU) and the
         * one-buffer f16 tiles instead of the int8 kernel (every tile case; the types decoded to
         * f16 take the f16 tiles either way) */
        for (int var = fused ? 0 : 1; tiles && var < 2; var++) {
            uint32_t *got2 = malloc((size_t)ny * 4);
            const st_cuda_mat W0 = {type, db->w0, ne0, ne1, rb, NULL, 0}, W1 = {type, db->w1, ne0, ne1, rb, NULL, 0};
            if (var == 0) st_cuda_mmq_set_glu_mode(1);
            else st_cuda_mmq_set_int8(0);
            st = !got2 ? STRATA_ERR_NOMEM
                 : fused ? st_cuda_mmq_swiglu(&W0, &W1, dx, ne0, ncols, (float *)db->y, ne1, db->scratch, NULL)
                         : st_cuda_mmq(&W0, dx, ne0, ncols, (float *)db->y, ne1, db->scratch, NULL);
            st_cuda_mmq_set_glu_mode(2);
            st_cuda_mmq_set_int8(1);
            if (st == STRATA_OK) st = st_cuda_synchronize();
            if (st == STRATA_OK) st = st_cuda_memcpy_d2h(got2, db->y, (size_t)ny * 4);
            CHECK(st == STRATA_OK && !memcmp(got, got2, (size_t)ny * 4), "%s: the %s differ from the default "
                  "tiles (%s)", what, var == 0 ? "fused GLU tiles" : "f16 tiles",
                  st == STRATA_OK ? "bits" : strata_last_error());
            free(got2);
            if (st != STRATA_OK) goto done;
        }

        /* Q8_0 with its tile copy (the weights into shared memory by cp.async): the same bits;
         * the copy is made from the blocks on the device and checked against them on the host */
        if (tiles && st_cuda_mmq_tiles_bytes(&(st_cuda_mat){type, db->w0, ne0, ne1, rb, NULL, 0})) {
            const st_cuda_mat W0 = {type, db->w0, ne0, ne1, rb, NULL, 0}, W1 = {type, db->w1, ne0, ne1, rb, NULL, 0};
            const size_t tb = st_cuda_mmq_tiles_bytes(&W0);
            void *t0 = NULL, *t1 = NULL;
            uint32_t *got2 = malloc((size_t)ny * 4);
            uint8_t *th = malloc(tb);
            st = got2 && th ? st_cuda_malloc(&t0, tb) : STRATA_ERR_NOMEM;
            if (st == STRATA_OK && fused) st = st_cuda_malloc(&t1, tb);
            if (st == STRATA_OK) st = st_cuda_mmq_tiles_make(&W0, t0, NULL);
            if (st == STRATA_OK && fused) st = st_cuda_mmq_tiles_make(&W1, t1, NULL);
            if (st == STRATA_OK) st = st_cuda_memcpy_d2h(th, t0, tb);
            int64_t lay_bad = 0;
            const int64_t np = (ne1 + 7) / 8 * 8;
            for (int64_t rr = 0; st == STRATA_OK && rr < np; rr++)
                for (int64_t c = 0; c < ne0 / 32; c++) {
                    const uint8_t *ds = th + (size_t)ne1 * ne0 + 2 * (size_t)(c * np + rr);
                    if (rr >= ne1) { lay_bad += ds[0] != 0 || ds[1] != 0; continue; }
                    const uint8_t *blk = w0 + (size_t)rr * rb + 34 * (size_t)c;
                    lay_bad += memcmp(ds, blk, 2) != 0 || memcmp(th + (size_t)rr * ne0 + 32 * c, blk + 2, 32) != 0;
                }
            CHECK(st != STRATA_OK || lay_bad == 0, "%s: the tile copy's layout: %lld blocks differ", what, (long long)lay_bad);
            const st_cuda_mat T0 = {type, db->w0, ne0, ne1, rb, t0, 0}, T1 = {type, db->w1, ne0, ne1, rb, t1, 0};
            if (st == STRATA_OK) st = st_cuda_memset(db->y, 0xA5, (size_t)(ny + GUARD) * 4);
            if (st == STRATA_OK)
                st = fused ? st_cuda_mmq_swiglu(&T0, &T1, dx, ne0, ncols, (float *)db->y, ne1, db->scratch, NULL)
                           : st_cuda_mmq(&T0, dx, ne0, ncols, (float *)db->y, ne1, db->scratch, NULL);
            if (st == STRATA_OK) st = st_cuda_synchronize();
            if (st == STRATA_OK) st = st_cuda_memcpy_d2h(got2, db->y, (size_t)ny * 4);
            uint32_t yg[GUARD];
            if (st == STRATA_OK) st = st_cuda_memcpy_d2h(yg, (float *)db->y + ny, sizeof yg);
            int64_t ygb = 0;
            for (int i = 0; st == STRATA_OK && i < GUARD; i++) ygb += yg[i] != SENTINEL;
            CHECK(st == STRATA_OK && !memcmp(got, got2, (size_t)ny * 4) && ygb == 0, "%s: the tile copy's tiles "
                  "differ from the default tiles (%s)", what, st == STRATA_OK ? (ygb ? "guard" : "bits") : strata_last_error());
            (void)st_cuda_free(t0);
            (void)st_cuda_free(t1);
            free(got2);
            free(th);
            if (st != STRATA_OK) goto done;
        }

        /* st_cuda_mmv_pre with x quantized beforehand (as the attention norm's Q8_1 rows): the
         * same bits (float types ignore xq) */
        if (!tiles && !fused) {
            void *dq = NULL;
            uint32_t *got3 = malloc((size_t)ny * 4);
            const st_cuda_mat W0 = {type, db->w0, ne0, ne1, rb, NULL, 0};
            st = got3 ? st_cuda_malloc(&dq, st_cuda_mmv_scratch_bytes(ne0, ncols)) : STRATA_ERR_NOMEM;
            if (st == STRATA_OK && ne0 % 32 == 0) st = st_cuda_quantize_q8_1(dx, dq, (int64_t)ncols * ne0, NULL);
            if (st == STRATA_OK)
                st = st_cuda_mmv_pre(&W0, dx, ne0 % 32 == 0 ? dq : NULL, ncols, (float *)db->y, db->scratch, NULL);
            if (st == STRATA_OK) st = st_cuda_synchronize();
            if (st == STRATA_OK) st = st_cuda_memcpy_d2h(got3, db->y, (size_t)ny * 4);
            CHECK(st == STRATA_OK && !memcmp(got, got3, (size_t)ny * 4), "%s: st_cuda_mmv_pre differs from "
                  "st_cuda_mmv (%s)", what, st == STRATA_OK ? "bits" : strata_last_error());
            st_cuda_free(dq);
            free(got3);
            if (st != STRATA_OK) goto done;
        }

        /* every output written, no NaN, guards intact */
        int64_t unwritten = 0, nans = 0, guard_bad = 0, sguard_bad = 0;
        for (int64_t i = 0; i < ny; i++) {
            float g;
            memcpy(&g, &got[i], 4);
            unwritten += got[i] == SENTINEL;
            nans += isnan(g) != 0;
        }
        for (int64_t i = ny; i < ny + GUARD; i++) guard_bad += got[i] != SENTINEL;
        for (int i = 0; i < GUARD * 4; i++) sguard_bad += sguard[i] != 0xA5;

        /* references on rows 0, stride, 2 stride, ... and the last */
        const int64_t stride = ref_stride(ne0, ne1, ncols, fused);
        double se_cpu = 0, sr_cpu = 0, se_ex = 0, sr_ex = 0, max_err = 0, max_ref = 0;
        int64_t rows = 0;
        for (int64_t row = 0; st == STRATA_OK;) {
            const uint8_t *r0 = w0 + (size_t)row * rb, *r1 = fused ? w1 + (size_t)row * rb : NULL;
            st = strata_dequantize_row(type, r0, deq0, ne0);
            if (st == STRATA_OK && fused) st = strata_dequantize_row(type, r1, deq1, ne0);
            for (int c = 0; c < ncols && st == STRATA_OK; c++) {
                const float *xc = x + c * ne0;
                const void *xqc = xq + (size_t)c * xq_bytes;
                float cpu0 = 0, cpu1 = 0;
                st = strata_vec_dot(type, r0, xqc, ne0, &cpu0);
                if (st == STRATA_OK && fused) st = strata_vec_dot(type, r1, xqc, ne0, &cpu1);
                double e0 = 0, e1 = 0;
                for (int64_t i = 0; i < ne0; i++) e0 += (double)deq0[i] * xc[i];
                if (fused)
                    for (int64_t i = 0; i < ne0; i++) e1 += (double)deq1[i] * xc[i];
                const double ref_cpu = fused ? (double)silu(cpu0) * cpu1 : cpu0;
                const double ref_ex = fused ? (e0 / (1.0 + exp(-e0))) * e1 : e0;
                float g;
                memcpy(&g, &got[(int64_t)c * ne1 + row], 4);
                se_cpu += (g - ref_cpu) * (g - ref_cpu);
                sr_cpu += ref_cpu * ref_cpu;
                se_ex += (g - ref_ex) * (g - ref_ex);
                sr_ex += ref_ex * ref_ex;
                const double err = isnan(g) ? INFINITY : fabs(g - ref_cpu);
                if (err > max_err) max_err = err;
                if (fabs(ref_cpu) > max_ref) max_ref = fabs(ref_cpu);
            }
            rows++;
            if (row == ne1 - 1) break;
            row = row + stride < ne1 ? row + stride : ne1 - 1;
        }
        CHECK(st == STRATA_OK, "%s: CPU reference: %s", what, strata_last_error());
        const double nmse_cpu = sr_cpu > 0 ? se_cpu / sr_cpu : (se_cpu > 0 ? INFINITY : 0);
        const double nmse_ex = sr_ex > 0 ? se_ex / sr_ex : (se_ex > 0 ? INFINITY : 0);
        const double bound = is_float_type(type) ? 1e-7 : 5e-4;
        /* tiles: the GEMV's function. dp4a types: integer dots and the same scales, 1e-10
         * (measured <= 1.1e-13), except Q4_K/Q5_K, whose GEMV takes the min term from q8_1's
         * fp16-rounded d * sum(q), 1e-8 (measured <= 2e-9); the other quantized types: the tiles
         * hold f16-rounded weights, 1e-6 (measured <= 9e-8); float types: f32 in another order,
         * 1e-10 (measured <= 7.1e-13) */
        double nmse_tg = 0;
        const int mins = type == STRATA_TYPE_Q4_K || type == STRATA_TYPE_Q5_K;
        const double bound_tg = mins ? 1e-8 : st_cuda_moe_type_dp4a(type) || is_float_type(type) ? 1e-10 : 1e-6;
        if (tiles) {
            const st_cuda_mat W0 = {type, db->w0, ne0, ne1, rb, NULL, 0}, W1 = {type, db->w1, ne0, ne1, rb, NULL, 0};
            nmse_tg = tiles_vs_gemv(db, &W0, fused ? &W1 : NULL, dx, ncols, got);
            printf("%s  tiles vs GEMV: NMSE %.2e (bound %.0e)\n", what, nmse_tg, bound_tg);
            CHECK(nmse_tg >= 0 && nmse_tg <= bound_tg, "%s: tiles vs GEMV NMSE %.3e > %.0e", what,
                  nmse_tg, bound_tg);
        }
        const int ok = nmse_cpu <= bound && nmse_ex <= bound && unwritten == 0 && nans == 0 &&
                       guard_bad == 0 && sguard_bad == 0 && nmse_tg >= 0 && nmse_tg <= bound_tg;
        printf("%s  nmse_cpu=%.2e nmse_exact=%.2e max_err=%.2e (max|ref| %.2e) rows=%lld"
               " unwritten=%lld nan=%lld guards=%s  %s\n", what, nmse_cpu, nmse_ex, max_err,
               max_ref, (long long)rows, (long long)unwritten, (long long)nans,
               guard_bad || sguard_bad ? "BAD" : "ok", ok ? "pass" : "FAIL");
        CHECK(nmse_cpu <= bound, "%s: NMSE vs CPU %.3e > %.0e", what, nmse_cpu, bound);
        CHECK(nmse_ex <= bound, "%s: NMSE vs exact %.3e > %.0e", what, nmse_ex, bound);
        CHECK(unwritten == 0, "%s: %lld of %lld outputs not written", what, (long long)unwritten,
              (long long)ny);
        CHECK(nans == 0, "%s: %lld NaN outputs", what, (long long)nans);
        CHECK(guard_bad == 0, "%s: %lld guard words after y overwritten", what, (long long)guard_bad);
        CHECK(sguard_bad == 0, "%s: %lld guard bytes after the scratch overwritten", what,
              (long long)sguard_bad);
    }
done:
    free(w0);
    free(w1);
    free(x);
    free(xq);
    free(got);
    free(sguard);
    free(deq0);
    free(deq1);
}

/* ---- q8_1 quantization ---------------------------------------------------------------------- */

static void check_quantize(int64_t n, test_rng *r) {
    const int64_t nb = n / 32;
    float *x = malloc((size_t)n * sizeof(float));
    uint8_t *ref = malloc((size_t)nb * 36), *got = malloc((size_t)nb * 36 + GUARD);
    void *dx = NULL, *dq = NULL;
    if (!x || !ref || !got) { CHECK(0, "host allocation"); goto done; }
    for (int64_t i = 0; i < n; i++) x[i] = test_rng_float(r) * (float)(1 + (i / 32) % 7);
    for (int i = 0; i < 32 && n >= 64; i++) x[32 + i] = 0.0f; /* block 1: all zero, d = 0 */
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + 32 * b;
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f;
        int sum = 0;
        uint8_t *o = ref + 36 * b;
        for (int j = 0; j < 32; j++) {
            const int q = amax == 0.0f ? 0 : (int)roundf(xb[j] / d);
            sum += q;
            o[4 + j] = (uint8_t)(int8_t)q;
        }
        put16(o, st_f32_to_fp16(d));
        put16(o + 2, st_f32_to_fp16(d * (float)sum));
    }
    strata_status st = st_cuda_malloc(&dx, (size_t)n * sizeof(float));
    if (st == STRATA_OK) st = st_cuda_malloc(&dq, (size_t)nb * 36 + GUARD);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(dx, x, (size_t)n * sizeof(float));
    if (st == STRATA_OK) st = st_cuda_memset(dq, 0xA5, (size_t)nb * 36 + GUARD);
    if (st == STRATA_OK) st = st_cuda_quantize_q8_1(dx, dq, n, NULL);
    if (st == STRATA_OK) st = st_cuda_synchronize();
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(got, dq, (size_t)nb * 36 + GUARD);
    CHECK(st == STRATA_OK, "q8_1 n=%lld: %s", (long long)n, strata_last_error());
    if (st != STRATA_OK) goto done;
    int64_t bad = 0, first = -1, gbad = 0;
    for (int64_t i = 0; i < nb * 36; i++)
        if (got[i] != ref[i] && bad++ == 0) first = i;
    for (int i = 0; i < GUARD; i++) gbad += got[nb * 36 + i] != 0xA5;
    printf("q8_1    n=%lld blocks=%lld: %lld bytes differ%s, guard %s  %s\n", (long long)n,
           (long long)nb, (long long)bad, bad ? "" : " (bit-exact)", gbad ? "OVERWRITTEN" : "ok",
           bad || gbad ? "FAIL" : "pass");
    CHECK(bad == 0, "q8_1 n=%lld: %lld bytes differ, first at byte %lld (block %lld, byte %lld): "
          "gpu 0x%02x cpu 0x%02x", (long long)n, (long long)bad, (long long)first,
          (long long)(first / 36), (long long)(first % 36), first >= 0 ? got[first] : 0,
          first >= 0 ? ref[first] : 0);
    CHECK(gbad == 0, "q8_1 n=%lld: %lld guard bytes overwritten", (long long)n, (long long)gbad);
done:
    (void)st_cuda_free(dx);
    (void)st_cuda_free(dq);
    free(x);
    free(ref);
    free(got);
}

/* ---- arguments (no device needed) ----------------------------------------------------------- */

static void test_arguments(int available) {
    for (size_t i = 0; i < N_GPU_TYPES; i++) {
        CHECK(st_cuda_mmv_supports(gpu_types[i]), "%s unsupported", strata_type_name(gpu_types[i]));
        CHECK(strata_type_can_dot(gpu_types[i]), "GPU type %s has no CPU dot (the reference)",
              strata_type_name(gpu_types[i]));
    }
    CHECK(!st_cuda_mmv_supports(STRATA_TYPE_Q8_1) && !st_cuda_mmv_supports(STRATA_TYPE_Q8_K) &&
          !st_cuda_mmv_supports((strata_type)4) && !st_cuda_mmv_supports((strata_type)-1) &&
          !st_cuda_mmv_supports(STRATA_TYPE_COUNT), "unexpected types supported");
    CHECK(st_cuda_mmv_scratch_bytes(4096, 8) == 8u * 128u * 36u, "scratch(4096, 8) = %zu",
          st_cuda_mmv_scratch_bytes(4096, 8));
    CHECK(st_cuda_mmv_scratch_bytes(33, 1) == 72u, "scratch(33, 1)");
    {   /* which kernel a Q8_0 GEMV takes (no device needed): the shared-memory one only for
         * 16-byte row strides at 16-byte aligned data, while its shared memory fits 48 KiB */
        const void *al = (const void *)(uintptr_t)0x10000, *mis = (const void *)(uintptr_t)0x10002;
        const st_cuda_mat q = {STRATA_TYPE_Q8_0, al, 2048, 64, 2176, NULL, 0}, pad = {STRATA_TYPE_Q8_0, al, 2048, 64, 2178, NULL, 0};
        const st_cuda_mat off = {STRATA_TYPE_Q8_0, mis, 2048, 64, 2176, NULL, 0}, k4 = {STRATA_TYPE_Q4_K, al, 2048, 64, 1152, NULL, 0};
        const st_cuda_mat big = {STRATA_TYPE_Q8_0, al, 14336, 8, 15232, NULL, 0};
        CHECK(st_cuda_mmv_q8_smem(&q, 1) && st_cuda_mmv_q8_smem(&q, 8) && !st_cuda_mmv_q8_smem(&pad, 1) &&
              !st_cuda_mmv_q8_smem(&off, 1) && !st_cuda_mmv_q8_smem(&k4, 1) && !st_cuda_mmv_q8_smem(&q, 9) &&
              !st_cuda_mmv_q8_smem(NULL, 1), "Q8_0 shared-memory kernel choice");
        /* 14,336-wide rows: 64-block pieces (17,664 bytes) + the activation (16,128 bytes a
         * column): one column fits, eight do not */
        CHECK(st_cuda_mmv_q8_smem(&big, 1) && !st_cuda_mmv_q8_smem(&big, 8), "Q8_0 shared-memory limit");
    }
    /* the tile kernels: quantized types only; checks before any launch */
    CHECK(st_cuda_mmq_supports(STRATA_TYPE_Q4_K) && st_cuda_mmq_supports(STRATA_TYPE_Q8_0) &&
          st_cuda_mmq_supports(STRATA_TYPE_Q6_K) && st_cuda_mmq_supports(STRATA_TYPE_F32) &&
          st_cuda_mmq_supports(STRATA_TYPE_IQ4_XS) && st_cuda_mmq_supports(STRATA_TYPE_IQ1_M) &&
          st_cuda_mmq_supports(STRATA_TYPE_MXFP4) && !st_cuda_mmq_supports(STRATA_TYPE_Q8_K) &&
          !st_cuda_mmq_supports(STRATA_TYPE_COUNT),
          "mmq supports()");
    {
        const st_cuda_mat Wq = {STRATA_TYPE_Q8_0, (const void *)(uintptr_t)0x10000, 256, 64, 272, NULL, 0};
        const st_cuda_mat Wi = {STRATA_TYPE_Q8_K, (const void *)(uintptr_t)0x10000, 256, 64, 292, NULL, 0};
        const st_cuda_mat Wf = {STRATA_TYPE_F32, (const void *)(uintptr_t)0x10000, 256, 64, 1024, NULL, 0};
        float *fx = (float *)(uintptr_t)0x20000, *fy = (float *)(uintptr_t)0x40000;
        void *scr = (void *)(uintptr_t)0x80000;
        strata_status e = st_cuda_mmq(&Wi, fx, 256, 64, fy, 64, scr, NULL);
        CHECK(e == STRATA_ERR_UNSUPPORTED, "mmq Q8_K: %s", strata_status_name(e));
        e = st_cuda_mmq(&Wq, fx, 256, 64, fy, 64, NULL, NULL);
        CHECK(e == STRATA_ERR_INVALID_ARG, "mmq without scratch: %s", strata_status_name(e));
        e = st_cuda_mmq(&Wq, fx, 256, 0, fy, 64, scr, NULL);
        CHECK(e == STRATA_ERR_INVALID_ARG, "mmq T = 0: %s", strata_status_name(e));
        e = st_cuda_mmq(&Wq, fx, 200, 64, fy, 64, scr, NULL);
        CHECK(e == STRATA_ERR_INVALID_ARG, "mmq ldx < ne0: %s", strata_status_name(e));
        e = st_cuda_mmq_swiglu(&Wq, NULL, fx, 256, 64, fy, 64, scr, NULL);
        CHECK(e == STRATA_ERR_INVALID_ARG, "mmq swiglu without up: %s", strata_status_name(e));
        e = st_cuda_mmq_swiglu(&Wf, &Wf, fx, 256, 64, fy, 64, scr, NULL);
        CHECK(e == STRATA_ERR_INVALID_ARG, "mmq swiglu of float weights: %s", strata_status_name(e));
        CHECK(st_cuda_mmq_scratch_bytes(2048, 512) >= 2048u * 512u * 2u + 512u * 64u * 4u + 512u * 128u * 4u,
              "mmq scratch bytes: quants, scales and sums");
    }
    CHECK(st_cuda_mmv_scratch_bytes(0, 1) == 0 && st_cuda_mmv_scratch_bytes(32, 9) == 0 &&
          st_cuda_mmv_scratch_bytes(32, 0) == 0, "scratch of invalid sizes");
    CHECK(st_cuda_mmv_tables_check() == 1, "IQ3 grids in c/cuda/iq_grids.cuh differ from iq_tables.c");

    /* Fake device addresses: every call below is refused before anything is touched. */
    const void *dw = (const void *)(uintptr_t)0x100000;
    float *dx = (float *)(uintptr_t)0x200000, *dy = (float *)(uintptr_t)0x300000;
    void *ds = (void *)(uintptr_t)0x400000;
    const st_cuda_mat q4 = {STRATA_TYPE_Q4_0, dw, 256, 16, 8 * 18, NULL, 0};
    strata_status st = st_cuda_mmv(NULL, dx, 1, dy, ds, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "NULL W: %s", strata_status_name(st));
    st = st_cuda_mmv(&q4, dx, 0, dy, ds, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "ncols 0: %s", strata_status_name(st));
    st = st_cuda_mmv(&q4, dx, 9, dy, ds, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG && strstr(strata_last_error(), "ncols"), "ncols 9: %s '%s'",
          strata_status_name(st), strata_last_error());
    st = st_cuda_mmv(&q4, dx, 1, dy, NULL, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG && strstr(strata_last_error(), "scratch"), "NULL scratch: %s",
          strata_status_name(st));
    st = st_cuda_mmv(&q4, dx, 1, dy, (uint8_t *)ds + 4, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "scratch not 16-aligned: %s", strata_status_name(st));
    st = st_cuda_mmv(&q4, dx, 1, NULL, ds, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "NULL y: %s", strata_status_name(st));
    st = st_cuda_mmv(&q4, dx, 2, dx + 100, ds, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG && strstr(strata_last_error(), "overlap"), "y overlaps x: %s",
          strata_status_name(st));
    st_cuda_mat m = q4;
    m.ne0 = 48;
    st = st_cuda_mmv(&m, dx, 1, dy, ds, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "ne0 48 for Q4_0: %s", strata_status_name(st));
    m = q4;
    m.row_bytes = 8 * 18 - 2;
    st = st_cuda_mmv(&m, dx, 1, dy, ds, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG && strstr(strata_last_error(), "row_bytes"),
          "short row_bytes: %s", strata_status_name(st));
    m = q4;
    m.data = (const uint8_t *)dw + 1;
    st = st_cuda_mmv(&m, dx, 1, dy, ds, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "odd data: %s", strata_status_name(st));
    m = q4;
    m.ne1 = 0;
    st = st_cuda_mmv(&m, dx, 1, dy, ds, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "ne1 0: %s", strata_status_name(st));
    m = q4;
    m.type = STRATA_TYPE_Q8_K;
    st = st_cuda_mmv(&m, dx, 1, dy, ds, NULL);
    CHECK(st == STRATA_ERR_UNSUPPORTED, "Q8_K weights: %s", strata_status_name(st));
    const st_cuda_mat k = {STRATA_TYPE_Q4_K, dw, 512, 16, 2 * 144, NULL, 0};
    m = k;
    m.ne0 = 288;
    st = st_cuda_mmv(&m, dx, 1, dy, ds, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "ne0 288 for Q4_K: %s", strata_status_name(st));
    const st_cuda_mat f32 = {STRATA_TYPE_F32, dw, 100, 16, 402, NULL, 0};
    st = st_cuda_mmv(&f32, dx, 1, dy, NULL, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "F32 row_bytes 402: %s", strata_status_name(st));
    m = k;
    m.ne1 = 17;
    st = st_cuda_mmv_swiglu(&k, &m, dx, 1, dy, ds, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "swiglu shapes differ: %s", strata_status_name(st));
    st = st_cuda_mmv_swiglu(&k, NULL, dx, 1, dy, ds, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "swiglu NULL Wu: %s", strata_status_name(st));
    st = st_cuda_quantize_q8_1(dx, ds, 31, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "quantize n 31: %s", strata_status_name(st));
    st = st_cuda_quantize_q8_1(dx, (uint8_t *)ds + 2, 32, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "quantize q misaligned: %s", strata_status_name(st));
    if (!available) {
        /* valid arguments: refused with the probe's reason */
        st = st_cuda_mmv(&q4, dx, 1, dy, ds, NULL);
        CHECK(st == STRATA_ERR_UNSUPPORTED && strstr(strata_last_error(), "CUDA unavailable"),
              "no device: %s '%s'", strata_status_name(st), strata_last_error());
        const st_cuda_mat f16 = {STRATA_TYPE_F16, dw, 100, 16, 200, NULL, 0};
        st = st_cuda_mmv(&f16, dx, 1, dy, NULL, NULL);
        CHECK(st == STRATA_ERR_UNSUPPORTED, "no device (F16, no scratch): %s", strata_status_name(st));
        st = st_cuda_quantize_q8_1(dx, ds, 64, NULL);
        CHECK(st == STRATA_ERR_UNSUPPORTED, "no device (quantize): %s", strata_status_name(st));
    }
}

/* ---- Q8_0 through shared memory against the 16-bit-load kernel -------------------------------- */

/* st_cuda_mmv takes Q8_0 rows through shared memory when row_bytes % 16 == 0 and the general
 * kernel otherwise (a 2-byte pad here): the same sub-blocks in the same order, so the same bits,
 * for 1..8 columns, whole rows and (ne0 > 4096) pieces, and rows that leave warps idle. */
static void check_q8_0_paths(int64_t ne0, int64_t ne1, test_rng *r) {
    const strata_type type = STRATA_TYPE_Q8_0;
    const size_t rb = (size_t)strata_row_bytes(type, ne0), rbp = rb + 2;
    uint8_t *w = malloc(rb * (size_t)ne1), *wp = malloc(rbp * (size_t)ne1);
    float *x = malloc(sizeof(float) * (size_t)(8 * ne0));
    uint32_t *y1 = malloc(4 * (size_t)(8 * ne1 + GUARD)), *y2 = malloc(4 * (size_t)(8 * ne1 + GUARD));
    void *dw = NULL, *dwp = NULL, *dx = NULL, *dy1 = NULL, *dy2 = NULL, *ds = NULL;
    const size_t sb = st_cuda_mmv_scratch_bytes(ne0, 8);
    strata_status st = (w && wp && x && y1 && y2) ? STRATA_OK : STRATA_ERR_NOMEM;
    if (st == STRATA_OK) {
        fill_matrix(type, w, ne0, ne1, rb, r);
        for (int64_t i = 0; i < ne1; i++) {
            memcpy(wp + (size_t)i * rbp, w + (size_t)i * rb, rb);
            memset(wp + (size_t)i * rbp + rb, 0x5A, 2);
        }
        for (int64_t i = 0; i < 8 * ne0; i++) x[i] = test_rng_float(r);
        st = st_cuda_malloc(&dw, rb * (size_t)ne1);
    }
    if (st == STRATA_OK) st = st_cuda_malloc(&dwp, rbp * (size_t)ne1);
    if (st == STRATA_OK) st = st_cuda_malloc(&dx, sizeof(float) * (size_t)(8 * ne0));
    if (st == STRATA_OK) st = st_cuda_malloc(&dy1, 4 * (size_t)(8 * ne1 + GUARD));
    if (st == STRATA_OK) st = st_cuda_malloc(&dy2, 4 * (size_t)(8 * ne1 + GUARD));
    if (st == STRATA_OK) st = st_cuda_malloc(&ds, sb);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(dw, w, rb * (size_t)ne1);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(dwp, wp, rbp * (size_t)ne1);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(dx, x, sizeof(float) * (size_t)(8 * ne0));
    CHECK(st == STRATA_OK, "q8_0 paths ne0=%lld: setup: %s", (long long)ne0, strata_last_error());
    int n_fast = 0; /* column counts that took the shared-memory kernel */
    for (int nc = 1; nc <= 8 && st == STRATA_OK; nc++) {
        const st_cuda_mat W = {type, dw, ne0, ne1, rb, NULL, 0}, Wp = {type, dwp, ne0, ne1, rbp, NULL, 0};
        const size_t ny = (size_t)nc * (size_t)ne1;
        /* the comparison means something only if the two calls take different kernels: the
         * aligned rows the shared-memory one (always for one column), the padded rows never */
        const int fast = st_cuda_mmv_q8_smem(&W, nc);
        n_fast += fast;
        CHECK(!st_cuda_mmv_q8_smem(&Wp, nc) && (nc > 1 || fast),
              "q8_0 ne0=%lld ncols=%d: kernel choice (aligned %d, padded %d)", (long long)ne0, nc, fast,
              st_cuda_mmv_q8_smem(&Wp, nc));
        st = st_cuda_memset(dy1, 0xA5, 4 * (ny + GUARD));
        if (st == STRATA_OK) st = st_cuda_memset(dy2, 0xA5, 4 * (ny + GUARD));
        if (st == STRATA_OK) st = st_cuda_mmv(&W, dx, nc, dy1, ds, NULL);
        if (st == STRATA_OK) st = st_cuda_mmv(&Wp, dx, nc, dy2, ds, NULL);
        if (st == STRATA_OK) st = st_cuda_synchronize();
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(y1, dy1, 4 * (ny + GUARD));
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(y2, dy2, 4 * (ny + GUARD));
        CHECK(st == STRATA_OK, "q8_0 paths ne0=%lld ncols=%d: %s", (long long)ne0, nc, strata_last_error());
        if (st != STRATA_OK) break;
        int guard = 0;
        for (int g = 0; g < GUARD; g++) guard += y1[ny + g] != 0xA5A5A5A5u;
        const int same = memcmp(y1, y2, 4 * ny) == 0;
        CHECK(same && !guard, "q8_0 ne0=%lld ne1=%lld ncols=%d: shared-memory rows %s the 16-bit loads, "
              "guard words changed %d", (long long)ne0, (long long)ne1, nc, same ? "==" : "!=", guard);
        if (nc == 1 || nc == 8)
            printf("q8_0 ne0=%-5lld ne1=%-5lld ncols=%d: %s kernel %s 16-bit-load kernel, guards %s\n",
                   (long long)ne0, (long long)ne1, nc, fast ? "shared-memory" : "(general)", same ? "==" : "!=",
                   guard ? "BAD" : "ok");
    }
    printf("q8_0 ne0=%-5lld: %d of 8 column counts on the shared-memory kernel\n", (long long)ne0, n_fast);
    st_cuda_free(dw); st_cuda_free(dwp); st_cuda_free(dx); st_cuda_free(dy1); st_cuda_free(dy2);
    st_cuda_free(ds);
    free(w); free(wp); free(x); free(y1); free(y2);
}

/* ---- the SM60 Q8_0 GEMV (q8_sm60) ------------------------------------------------------------- */

#include "q8_sm60_case.h"

/* The dense Q8_0 shapes (rows wide x rows) of the supported architectures the SM60 kernel serves. */
typedef struct { const char *name; int64_t ne0, ne1; } sm60_shape;
static const sm60_shape sm60_shapes[] = {
    {"qwen3-30b-a3b attn_q", 2048, 4096}, {"qwen3-30b-a3b attn_k/v", 2048, 512},
    {"qwen3-30b-a3b attn_o", 4096, 2048}, {"qwen3-30b-a3b output", 2048, 151936},
    {"olmoe attn_qkv/o", 2048, 2048},     {"mixtral attn_q/o", 4096, 4096},
    {"mixtral attn_k/v", 4096, 1024},     {"granite-moe-1b attn_q", 1024, 1024},
    {"granite-moe-3b attn_q", 1536, 1536}, {"quarter warp 640", 640, 333},
    {"quarter warp 32", 32, 77},          {"6144 wide", 6144, 96},
};

/* The kernel choice (no GPU needed): only marked Q8_0 matrices with an aligned copy, within 48 KiB. */
static void check_q8_sm60_choice(void) {
    st_cuda_mat W = {STRATA_TYPE_Q8_0, (const void *)(uintptr_t)0x10000, 2048, 64, 2176, NULL, 0};
    CHECK(!st_cuda_mmv_q8_sm60(&W, 1), "q8_sm60: an unmarked matrix takes the usual kernel");
    W.gemv_sm60 = 1;
    CHECK(!st_cuda_mmv_q8_sm60(&W, 1), "q8_sm60: a marked matrix without its copy takes the usual kernel");
    W.tiles = (const void *)(uintptr_t)0x20008;
    CHECK(!st_cuda_mmv_q8_sm60(&W, 1), "q8_sm60: a misaligned copy is refused");
    W.tiles = (const void *)(uintptr_t)0x20000;
    CHECK(st_cuda_mmv_q8_sm60(&W, 1) && st_cuda_mmv_q8_sm60(&W, 8), "q8_sm60: 2048 wide, 1 and 8 columns taken");
    CHECK(!st_cuda_mmv_q8_sm60(&W, 0) && !st_cuda_mmv_q8_sm60(&W, 9), "q8_sm60: ncols outside 1..8");
    W.ne0 = 6144;
    CHECK(st_cuda_mmv_q8_sm60(&W, 7) && !st_cuda_mmv_q8_sm60(&W, 8), "q8_sm60: 6144 wide declined at 8 columns");
    W.type = STRATA_TYPE_Q4_0;
    CHECK(!st_cuda_mmv_q8_sm60(&W, 1), "q8_sm60: Q8_0 only");
}

static void check_q8_sm60(void) {
    for (size_t k = 0; k < sizeof sm60_shapes / sizeof sm60_shapes[0]; k++) {
        const sm60_shape *sh = &sm60_shapes[k];
        for (int nc = 1; nc <= 8; nc++) {
            if (sh->ne1 > 100000 && nc != 1 && nc != 8) continue; /* the head: 1 and 8 columns */
            const q8s_result r = q8s_run(sh->ne0, sh->ne1, nc, 0, 0x9E3779B97F4A7C15ULL + k * 8 + (uint64_t)nc, 0);
            const int declined = sh->ne0 * nc * 9 / 8 > 48 * 1024;
            CHECK(r.st == STRATA_OK, "q8_sm60 %s ncols=%d: %s", sh->name, nc, strata_last_error());
            CHECK(r.taken == !declined, "q8_sm60 %s ncols=%d: taken %d, expected %d", sh->name, nc, r.taken,
                  !declined);
            CHECK(r.taken || r.usual_diff == 0, "q8_sm60 %s ncols=%d: declined, yet %d outputs differ from "
                  "the usual kernel's", sh->name, nc, r.usual_diff);
            CHECK(r.max_rel < 1e-5 && !r.unwritten && !r.guard_bad,
                  "q8_sm60 %s ncols=%d: max rel err %.3g, %d unwritten, %d guards changed", sh->name, nc,
                  r.max_rel, r.unwritten, r.guard_bad);
            if (nc == 1 || nc == 8)
                printf("q8_sm60 %-24s %6lld x %-6lld ncols=%d: %s, max rel err %.3g\n", sh->name,
                       (long long)sh->ne0, (long long)sh->ne1, nc, r.taken ? "SM60 kernel" : "declined", r.max_rel);
        }
    }
    static const int fused_nc[] = {1, 3, 8};
    for (int i = 0; i < 3; i++) { /* a dense FFN's gate/up (st_cuda_mmv_swiglu) */
        const q8s_result r = q8s_run(2048, 1408, fused_nc[i], 1, 0x51ED27A1ULL + (uint64_t)i, 0);
        CHECK(r.st == STRATA_OK && r.taken && r.max_rel < 1e-5 && !r.unwritten && !r.guard_bad,
              "q8_sm60 swiglu ncols=%d: %s, taken %d, max rel err %.3g, %d unwritten, %d guards",
              fused_nc[i], strata_status_name(r.st), r.taken, r.max_rel, r.unwritten, r.guard_bad);
        printf("q8_sm60 swiglu 2048 x 1408 ncols=%d: max rel err %.3g\n", fused_nc[i], r.max_rel);
    }
}

/* ---- main ----------------------------------------------------------------------------------- */

typedef struct { const char *name; int64_t ne0, ne1; } shape;

static const shape real_shapes[] = {
    {"qwen3 attn_q", 2048, 4096},       {"qwen3 exp gate/up", 2048, 768},
    {"qwen3 exp down", 768, 2048},      {"olmoe exp gate/up", 2048, 1024},
    {"olmoe exp down", 1024, 2048},     {"mixtral ffn gate", 4096, 14336},
    {"mixtral ffn down", 14336, 4096},
};

int main(void) {
    int available = 0;
    char reason[256];
    strata_status st = st_cuda_probe(&available, reason, sizeof reason);
    CHECK(st == STRATA_OK, "probe: %s", strata_last_error());
    test_arguments(available);
    check_q8_sm60_choice();
    if (!available) {
        CHECK(reason[0] != '\0', "unavailable without a reason");
        SKIP("GPU checks: CUDA unavailable: %s", reason);
        return test_report();
    }
    printf("device: %s\n", reason);
    test_rng r = {0x243F6A8885A308D3ULL};

    check_quantize(32, &r);
    check_quantize(8 * 4096, &r);
    check_quantize(8 * 14336 + 32 * 3, &r);

    check_q8_0_paths(2048, 333, &r);  /* whole rows, the last block's warps partly idle */
    check_q8_0_paths(4096, 64, &r);   /* 128 blocks a row */
    check_q8_0_paths(14336, 40, &r);  /* pieces of 64 blocks */
    check_q8_0_paths(256, 17, &r);    /* 8 blocks a row: most lanes idle */
    check_q8_sm60();

    dev_bufs db = {0};
    static const int all_nc[] = {1, 2, 3, 4, 5, 6, 7, 8}, nc_1_8[] = {1, 8}, nc_3[] = {3},
                     nc_1_4[] = {1, 4}, nc_7[] = {7};
    for (size_t t = 0; t < N_GPU_TYPES; t++) {
        const strata_type type = gpu_types[t];
        if (!strata_type_can_dot(type)) continue; /* failed in test_arguments */
        const clock_t c0 = clock();
        const int64_t qk = strata_type_block_size(type);
        const int64_t odd0 = qk == 1 ? 1001 : qk == 32 ? 32 * 37 : 256 * 5;
        check_case(&db, type, "odd", odd0, 333, all_nc, 8, 0, 0, 0, &r);
        for (size_t s = 0; s < sizeof real_shapes / sizeof real_shapes[0]; s++)
            check_case(&db, type, real_shapes[s].name, real_shapes[s].ne0, real_shapes[s].ne1,
                       nc_1_8, 2, 0, 0, 0, &r);
        /* padded row stride (2-byte multiple; for F32 4, which also disables 16-byte loads) and
         * x not 16-byte aligned */
        check_case(&db, type, "padded", 2048, 101, nc_3, 1, type == STRATA_TYPE_F32 ? 4 : 6, 1, 0, &r);
        check_case(&db, type, "qwen3 exp gate/up", 2048, 768, nc_1_4, 2, 0, 0, 1, &r);
        check_case(&db, type, "olmoe exp gate/up", 2048, 1024, nc_1_8, 2, 0, 0, 1, &r);
        check_case(&db, type, "odd", odd0, 333, nc_7, 1, 0, 0, 1, &r);
        if (st_cuda_mmq_supports(type)) { /* prompt batches on the tensor-core tiles */
            static const int nc_mmq[] = {9, 33, 64, 200}, nc_mmq2[] = {40, 129};
            const int64_t odd1 = qk == 1 ? 1001 : qk == 32 ? 32 * 37 : 256 * 5; /* K not a multiple of 64 */
            check_case(&db, type, "odd", odd1, 333, nc_mmq, 4, 0, 0, 0, &r);
            check_case(&db, type, "qwen3 attn_q", 2048, 4096, nc_mmq2, 2, 0, 0, 0, &r);
            check_case(&db, type, "qwen3 exp down", 768, 2048, nc_mmq2, 2, 0, 0, 0, &r);
            check_case(&db, type, "padded", 2048, 101, nc_mmq2, 1, type == STRATA_TYPE_F32 ? 4 : 6, 0, 0, &r);
            if (st_cuda_moe_type_tiles(type)) {
                check_case(&db, type, "qwen3 exp gate/up", 2048, 768, nc_mmq2, 2, 0, 0, 1, &r);
                check_case(&db, type, "odd", odd1, 333, nc_mmq2, 1, 0, 0, 1, &r);
            }
        }
        printf("%-7s done (%.2f s)\n", strata_type_name(type), (double)(clock() - c0) / CLOCKS_PER_SEC);
    }
    (void)st_cuda_free(db.w0);
    (void)st_cuda_free(db.w1);
    (void)st_cuda_free(db.x);
    (void)st_cuda_free(db.y);
    (void)st_cuda_free(db.scratch);
    (void)st_cuda_free(db.y2);
    (void)st_cuda_free(db.scratch2);
    return test_report();
}

#else /* !STRATA_HAVE_CUDA */

TEST_MAIN_WITHOUT_CUDA()

#endif
