/* test_isa_avx512.c - checks the AVX-512 dot-product kernels (dot_avx512.c) against the scalar
 * reference kernels (dot_scalar.c), type by type (dot_avx512_iq.c's IQ2 / IQ1 / MXFP4 included).
 *
 * On a CPU without AVX-512 F/BW/VL/DQ/VNNI it only checks that no AVX-512 kernel is registered
 * (the dispatcher must never hand them out there) and skips the numeric part. Elsewhere, for every
 * type st_vec_dot_at(type, STRATA_ISA_AVX512) returns, it compares with
 * st_vec_dot_at(type, STRATA_ISA_SCALAR) on random well-formed rows (random bytes with the fp16
 * scale fields set to finite values; activations from the q8 quantizers, plus raw random q8 bytes
 * including -128 with consistent bsums), lengths 1, 2, 3, 7 blocks and 4096 weights (and odd
 * lengths for the float types), several seeds. Tolerance: 1e-4 * sum |w_i * x_i| (from the
 * dequantized rows). Rows end right before a PROT_NONE page, so any read past the end crashes.
 * Prints the max relative error per type. The AVX-512 several-row kernels (st_vec_dot_n_at) are
 * checked bit for bit against the AVX-512 single-row kernel, on the same kinds of rows, every row
 * count and two strides, the weight row and the last activation row each ending at a guard page. */
#include "test.h"

#include "dot.h"
#include "quant.h"

#include <math.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * Guarded buffers: `size` bytes that end exactly at a PROT_NONE page
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    void *map;
    size_t map_size;
    uint8_t *p;
} guarded;

static int guarded_alloc(guarded *g, size_t size) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t data_pages = (size + page - 1) / page + 1;
    g->map_size = (data_pages + 1) * page;
    g->map = mmap(NULL, g->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) return -1;
    uint8_t *guard = (uint8_t *)g->map + data_pages * page;
    if (mprotect(guard, page, PROT_NONE) != 0) return -1;
    g->p = guard - size;
    return 0;
}

static void guarded_free(guarded *g) { munmap(g->map, g->map_size); }

/* ---------------------------------------------------------------------------------------------
 * Well-formed random rows
 * ------------------------------------------------------------------------------------------- */

/* A finite fp16 in +-[0.001, 0.1]. */
static uint16_t rand_scale(test_rng *r) {
    float v = 0.001f + 0.099f * (0.5f + 0.5f * test_rng_float(r));
    if (test_rng_next(r) & 1) v = -v;
    return st_f32_to_fp16(v);
}

static void put_u16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* Byte offsets of the fp16 fields of one block (-1 terminated). */
static const int *half_fields(strata_type t) {
    static const int d0[] = {0, -1}, d0m2[] = {0, 2, -1};
    static const int q2k[] = {(int)offsetof(block_q2_K, d), (int)offsetof(block_q2_K, dmin), -1};
    static const int q3k[] = {(int)offsetof(block_q3_K, d), -1};
    static const int q6k[] = {(int)offsetof(block_q6_K, d), -1};
    switch (t) {
    case STRATA_TYPE_Q4_1: case STRATA_TYPE_Q5_1: case STRATA_TYPE_Q4_K: case STRATA_TYPE_Q5_K:
        return d0m2;
    case STRATA_TYPE_Q2_K: return q2k;
    case STRATA_TYPE_Q3_K: return q3k;
    case STRATA_TYPE_Q6_K: return q6k;
    case STRATA_TYPE_IQ1_M: case STRATA_TYPE_MXFP4: return d0 + 1; /* none: see other_scales */
    default: return d0; /* Q4_0 Q5_0 Q8_0 IQ4_NL IQ4_XS IQ3_XXS IQ3_S: d first */
    }
}

/* The scales no fp16 field holds: IQ1_M's f16 in the top nibbles of its four u16 scale words,
 * MXFP4's E8M0 exponent (kept within 2^-10 .. 2^8). */
static void other_scales(test_rng *r, strata_type t, uint8_t *blk) {
    if (t == STRATA_TYPE_IQ1_M) {
        const uint16_t h = rand_scale(r);
        uint8_t *sc = ((block_iq1_m *)blk)->scales;
        for (int k = 0; k < 4; k++) {
            const uint16_t v = (uint16_t)((sc[2 * k] | sc[2 * k + 1] << 8) & 0x0FFF);
            put_u16(sc + 2 * k, (uint16_t)(v | ((h >> (4 * k)) & 0xF) << 12));
        }
    } else if (t == STRATA_TYPE_MXFP4) {
        ((block_mxfp4 *)blk)->e = (uint8_t)(117 + test_rng_next(r) % 19);
    }
}

/* n weights of type t into w (row bytes); wf gets the dequantized values. */
static void make_weights(test_rng *r, strata_type t, int64_t n, uint8_t *w, float *wf) {
    const int64_t bytes = strata_row_bytes(t, n);
    if (t == STRATA_TYPE_F32) {
        for (int64_t i = 0; i < n; i++) { float v = test_rng_float(r); memcpy(w + 4 * i, &v, 4); }
    } else if (t == STRATA_TYPE_F16 || t == STRATA_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float v = 4.0f * test_rng_float(r);
            put_u16(w + 2 * i, t == STRATA_TYPE_F16 ? st_f32_to_fp16(v) : st_f32_to_bf16(v));
        }
    } else {
        for (int64_t i = 0; i < bytes; i++) w[i] = (uint8_t)test_rng_next(r);
        const int64_t bb = strata_type_block_bytes(t), nb = bytes / bb;
        const int *f = half_fields(t);
        for (int64_t b = 0; b < nb; b++) {
            for (int k = 0; f[k] >= 0; k++) put_u16(w + b * bb + f[k], rand_scale(r));
            other_scales(r, t, w + b * bb);
        }
    }
    st_dequant_get(t)(w, wf, n);
}

/* Activations of act type a for n weights: quantized random floats, or (raw) random quant bytes
 * over the whole int8 range with a finite scale and consistent bsums. xf gets their values. */
static void make_acts(test_rng *r, strata_type a, int64_t n, int raw, uint8_t *x, float *xf) {
    if (a == STRATA_TYPE_F32) {
        for (int64_t i = 0; i < n; i++) { xf[i] = test_rng_float(r); memcpy(x + 4 * i, &xf[i], 4); }
        return;
    }
    float *tmp = calloc((size_t)n, sizeof(float)); /* calloc: n > 0 is not known to the compiler */
    for (int64_t i = 0; i < n; i++) tmp[i] = test_rng_float(r) * (1.0f + (float)(i % 7));
    if (a == STRATA_TYPE_Q8_0) {
        block_q8_0 *y = (block_q8_0 *)x;
        st_quantize_row_q8_0(tmp, y, n);
        for (int64_t b = 0; b < n / QK8_0; b++) {
            if (raw) {
                y[b].d = rand_scale(r);
                for (int j = 0; j < QK8_0; j++) y[b].qs[j] = (int8_t)test_rng_next(r);
            }
            for (int j = 0; j < QK8_0; j++) xf[b * QK8_0 + j] = st_fp16_to_f32(y[b].d) * y[b].qs[j];
        }
    } else {
        block_q8_K *y = (block_q8_K *)x;
        st_quantize_row_q8_K(tmp, y, n);
        for (int64_t b = 0; b < n / QK_K; b++) {
            if (raw) {
                y[b].d = 0.01f * (1.0f + test_rng_float(r));
                for (int j = 0; j < QK_K; j++) y[b].qs[j] = (int8_t)test_rng_next(r);
                for (int g = 0; g < QK_K / 16; g++) {
                    int s = 0;
                    for (int j = 0; j < 16; j++) s += y[b].qs[16 * g + j];
                    y[b].bsums[g] = (int16_t)s;
                }
            }
            for (int j = 0; j < QK_K; j++) xf[b * QK_K + j] = y[b].d * y[b].qs[j];
        }
    }
    free(tmp);
}

/* ---------------------------------------------------------------------------------------------
 * Comparison
 * ------------------------------------------------------------------------------------------- */

static const strata_type kTypes[] = {
    STRATA_TYPE_Q4_K, STRATA_TYPE_Q8_0, STRATA_TYPE_Q6_K, STRATA_TYPE_Q5_K, STRATA_TYPE_F16,
    STRATA_TYPE_F32, STRATA_TYPE_BF16, STRATA_TYPE_Q4_0, STRATA_TYPE_IQ4_XS, STRATA_TYPE_IQ4_NL,
    STRATA_TYPE_Q3_K, STRATA_TYPE_Q2_K, STRATA_TYPE_Q5_0, STRATA_TYPE_Q5_1, STRATA_TYPE_Q4_1,
    STRATA_TYPE_IQ3_S, STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ2_XXS, STRATA_TYPE_IQ2_XS,
    STRATA_TYPE_IQ2_S, STRATA_TYPE_IQ1_S, STRATA_TYPE_IQ1_M, STRATA_TYPE_MXFP4,
};

/* Compares the two kernels for one type on one length; returns the max relative error seen. */
static double check_case(strata_type t, st_vec_dot_fn fast, st_vec_dot_fn ref, int64_t n,
                         unsigned long long seed, int raw) {
    const strata_type a = strata_act_type(t);
    const int64_t wbytes = strata_row_bytes(t, n);
    const int64_t xbytes = a == STRATA_TYPE_F32 ? 4 * n : strata_row_bytes(a, n);
    guarded gw, gx;
    if (guarded_alloc(&gw, (size_t)wbytes) || guarded_alloc(&gx, (size_t)xbytes)) {
        CHECK(0, "mmap failed");
        return 0.0;
    }
    float *wf = malloc((size_t)n * sizeof(float)), *xf = malloc((size_t)n * sizeof(float));
    test_rng r = {seed * 0x9E3779B97F4A7C15ULL + (unsigned long long)t * 1000003ULL + (unsigned long long)n};
    make_weights(&r, t, n, gw.p, wf);
    make_acts(&r, a, n, raw, gx.p, xf);

    double mag = 0.0;
    for (int64_t i = 0; i < n; i++) mag += fabs((double)wf[i] * (double)xf[i]);
    float got = NAN, want = NAN;
    fast(n, &got, gw.p, gx.p);
    ref(n, &want, gw.p, gx.p);
    const double err = fabs((double)got - (double)want);
    const double rel = mag > 0 ? err / mag : err;
    CHECK(isfinite(got) && err <= 1e-4 * mag + 1e-30,
          "%s n=%lld seed=%llu raw=%d: avx512 %.9g scalar %.9g (|err| %.3g, 1e-4*sum|wx| %.3g)",
          strata_type_name(t), (long long)n, seed, raw, got, want, err, 1e-4 * mag);
    free(wf);
    free(xf);
    guarded_free(&gw);
    guarded_free(&gx);
    return isfinite(got) ? rel : INFINITY;
}

/* One several-row case: nc activation rows xs bytes apart (the last one ending at the guard page)
 * against one weight row; each result must have the single-row kernel's bits. Returns 1 if so. */
static int check_rows_case(strata_type t, st_vec_dot_n_fn dn, st_vec_dot_fn d1, int64_t n, int nc, size_t pad,
                           unsigned long long seed, int raw) {
    const strata_type a = strata_act_type(t);
    const size_t ab = (size_t)strata_row_bytes(a, n), xs = ab + pad;
    guarded gw, gx;
    if (guarded_alloc(&gw, (size_t)strata_row_bytes(t, n)) || guarded_alloc(&gx, (size_t)(nc - 1) * xs + ab)) {
        CHECK(0, "mmap failed");
        return 0;
    }
    float *wf = malloc((size_t)n * sizeof(float)), *xf = malloc((size_t)n * sizeof(float));
    test_rng r = {seed * 0x9E3779B97F4A7C15ULL + (unsigned long long)t * 7919ULL + (unsigned long long)(n + nc)};
    make_weights(&r, t, n, gw.p, wf);
    for (int c = 0; c < nc; c++) make_acts(&r, a, n, raw, gx.p + (size_t)c * xs, xf);
    float got[ST_DOT_MAX_COLS];
    dn(n, got, gw.p, gx.p, xs, nc);
    int same = 1;
    for (int c = 0; c < nc; c++) {
        float want;
        d1(n, &want, gw.p, gx.p + (size_t)c * xs);
        if (memcmp(&want, &got[c], sizeof want) != 0) {
            same = 0;
            CHECK(0, "%s n=%lld nc=%d row %d pad=%zu seed=%llu raw=%d: several-row %.9g single-row %.9g",
                  strata_type_name(t), (long long)n, nc, c, pad, seed, raw, got[c], want);
        }
    }
    free(wf);
    free(xf);
    guarded_free(&gw);
    guarded_free(&gx);
    return same;
}

/* Every AVX-512 several-row kernel against the AVX-512 single-row kernel of its type. */
static void check_rows_kernels(void) {
    int kernels = 0;
    for (size_t k = 0; k < ST_ARRAY_LEN(kTypes); k++) {
        const strata_type t = kTypes[k];
        const st_vec_dot_n_fn dn = st_vec_dot_n_at(t, STRATA_ISA_AVX512);
        const st_vec_dot_fn d1 = st_vec_dot_at(t, STRATA_ISA_AVX512);
        if (!dn || !d1) continue;
        kernels++;
        const int64_t bs = strata_type_block_size(t), nblk[] = {1, 2, 3, 7, 4096 / bs};
        int cases = 0, same = 0;
        for (size_t li = 0; li < ST_ARRAY_LEN(nblk); li++)
            for (int nc = 1; nc <= ST_DOT_MAX_COLS; nc++)
                for (unsigned long long seed = 1; seed <= 2; seed++)
                    for (int raw = 0; raw <= 1; raw++) {
                        /* contiguous rows, or 12 bytes between them (the scale fields stay aligned) */
                        same += check_rows_case(t, dn, d1, nblk[li] * bs, nc, seed == 2 ? 12 : 0, seed, raw);
                        cases++;
                    }
        printf("%-8s %3d several-row cases, %d bit-identical to the single-row kernel\n", strata_type_name(t), cases,
               same);
    }
    /* MXFP4 and IQ1_M at least (dot_avx512_iq.c); the K-quants and Q4_0 in dot_avx512.c */
    CHECK(st_vec_dot_n_at(STRATA_TYPE_MXFP4, STRATA_ISA_AVX512) && st_vec_dot_n_at(STRATA_TYPE_IQ1_M, STRATA_ISA_AVX512),
          "AVX-512 several-row kernels of MXFP4 and IQ1_M registered (%d several-row kernels)", kernels);
}

int main(void) {
    const st_cpu_features *f = st_cpu_get_features();
    printf("cpu: avx2=%d fma=%d f16c=%d avx512f=%d bw=%d vl=%d dq=%d vnni=%d bf16=%d amx_tile=%d "
           "amx_int8=%d amx_bf16=%d\n", f->avx2, f->fma, f->f16c, f->avx512f, f->avx512bw,
           f->avx512vl, f->avx512dq, f->avx512vnni, f->avx512bf16, f->amx_tile, f->amx_int8,
           f->amx_bf16);
    const int have = f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw && f->avx512vl &&
                     f->avx512dq && f->avx512vnni;

    if (!have) {
        /* The dispatcher must not hand out AVX-512 kernels on this CPU. */
        for (size_t k = 0; k < ST_ARRAY_LEN(kTypes); k++)
            CHECK(st_vec_dot_at(kTypes[k], STRATA_ISA_AVX512) == NULL &&
                      st_vec_dot_n_at(kTypes[k], STRATA_ISA_AVX512) == NULL,
                  "%s: AVX-512 kernel registered on a CPU without AVX-512 F/BW/VL/DQ/VNNI",
                  strata_type_name(kTypes[k]));
        SKIP("CPU lacks AVX-512 F/BW/VL/DQ/VNNI: AVX-512 kernels not run");
        return test_report();
    }

    static const int64_t float_lengths[] = {1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 100, 4096, 4099};
    for (size_t k = 0; k < ST_ARRAY_LEN(kTypes); k++) {
        const strata_type t = kTypes[k];
        const st_vec_dot_fn fast = st_vec_dot_at(t, STRATA_ISA_AVX512);
        const st_vec_dot_fn ref = st_vec_dot_at(t, STRATA_ISA_SCALAR);
        /* dot_avx512.c implements every type in kTypes */
        CHECK(fast != NULL, "%s: no AVX-512 kernel registered", strata_type_name(t));
        CHECK(ref != NULL, "%s: no scalar kernel", strata_type_name(t));
        if (!fast || !ref) continue;
        const int64_t bs = strata_type_block_size(t);
        const int is_float = strata_act_type(t) == STRATA_TYPE_F32;
        double worst = 0.0;
        int cases = 0;
        for (int li = 0; li < (is_float ? (int)ST_ARRAY_LEN(float_lengths) : 5); li++) {
            const int64_t nblk[] = {1, 2, 3, 7};
            const int64_t n = is_float ? float_lengths[li] : li < 4 ? nblk[li] * bs : 4096;
            for (unsigned long long seed = 1; seed <= 4; seed++)
                for (int raw = 0; raw <= (is_float ? 0 : 1); raw++) {
                    double rel = check_case(t, fast, ref, n, seed, raw);
                    if (rel > worst) worst = rel;
                    cases++;
                }
        }
        printf("%-8s %3d cases, max |avx512 - scalar| / sum|w*x| = %.3g\n", strata_type_name(t),
               cases, worst);
    }
    check_rows_kernels();
    return test_report();
}
