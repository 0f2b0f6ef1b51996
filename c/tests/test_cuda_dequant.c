/* test_cuda_dequant.c - the GPU dequantize kernels against the CPU's strata_dequantize_row, bit
 * for bit, on random well-formed blocks of every type st_cuda_dequant_supports, with sizes that
 * are not multiples of a launch block; plus guard words after (and before) the device output and
 * the argument errors. Skips, saying why, in builds without CUDA or where no GPU is usable. */
#include "strata.h"
#include "strata_quant.h"
#include "block_fields.h"
#include "test.h"

#ifdef STRATA_HAVE_CUDA
#include "cuda_backend.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define GUARD 64                 /* floats of sentinel after the output */
#define SENTINEL 0xA5A5A5A5u     /* a finite float no kernel writes by chance */

static const strata_type all_types[] = {
    STRATA_TYPE_F32,  STRATA_TYPE_F16,  STRATA_TYPE_BF16, STRATA_TYPE_Q4_0,   STRATA_TYPE_Q4_1,
    STRATA_TYPE_Q5_0, STRATA_TYPE_Q5_1, STRATA_TYPE_Q8_0, STRATA_TYPE_Q8_1,   STRATA_TYPE_IQ4_NL,
    STRATA_TYPE_Q2_K, STRATA_TYPE_Q3_K, STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_K,   STRATA_TYPE_Q6_K,
    STRATA_TYPE_Q8_K, STRATA_TYPE_IQ4_XS, STRATA_TYPE_IQ3_S, STRATA_TYPE_MXFP4, STRATA_TYPE_IQ3_XXS,
    STRATA_TYPE_IQ2_XXS, STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ2_S, STRATA_TYPE_IQ1_S, STRATA_TYPE_IQ1_M,
};

/* ---- random well-formed blocks -------------------------------------------------------------- */

/* A random finite, non-zero fp16 (normals and subnormals alike). */
static uint16_t rand_fp16(test_rng *r) {
    uint16_t h = (uint16_t)test_rng_next(r);
    if (((h >> 10) & 0x1f) == 0x1f) h ^= 0x4000; /* inf/nan -> a finite exponent */
    if ((h & 0x7fff) == 0) h |= 0x3c00;
    return h;
}

/* n_blocks random blocks of type: random bytes, then every scale made a finite non-zero value
 * (plain types: every element finite). */
static void fill_blocks(strata_type type, uint8_t *buf, int64_t n_blocks, test_rng *r) {
    const int64_t bb = strata_type_block_bytes(type);
    for (int64_t i = 0; i < n_blocks * bb; i++) buf[i] = (uint8_t)test_rng_next(r);
    for (int64_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = buf + b * bb;
        switch (type) {
        case STRATA_TYPE_F16: put16(blk, rand_fp16(r)); break;
        case STRATA_TYPE_BF16: {
            uint16_t h = (uint16_t)test_rng_next(r);
            if (((h >> 7) & 0xff) == 0xff) h ^= 0x4000;
            put16(blk, h);
            break;
        }
        case STRATA_TYPE_F32: {
            float f = test_rng_float(r) * 1000.0f;
            memcpy(blk, &f, 4);
            break;
        }
        case STRATA_TYPE_Q8_K: {
            float d = test_rng_float(r) * 0.01f;
            if (d == 0.0f) d = 0.5f;
            memcpy(blk, &d, 4);
            break;
        }
        case STRATA_TYPE_IQ1_M: { /* the fp16 d in the top nibbles of the 4 scale words at 48 */
            const uint16_t h = rand_fp16(r);
            for (int k = 0; k < 4; k++) blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
            break;
        }
        default: /* (MXFP4: any E8M0 byte is a finite scale) */
            for (const int *f = fp16_fields(type); *f >= 0; f++) put16(blk + *f, rand_fp16(r));
        }
    }
}

/* ---- one comparison ------------------------------------------------------------------------- */

/* Dequantizes n_blocks random blocks on the GPU into a device buffer with guard words around it
 * (the output starts at float offset `shift` of the buffer: 0 for 16-byte aligned, 1 for the
 * unaligned store path) and compares with the CPU. */
static void check_type_size(strata_type type, int64_t n_blocks, int shift, test_rng *r) {
    const char *tn = strata_type_name(type);
    const int64_t qk = strata_type_block_size(type), bb = strata_type_block_bytes(type);
    const int64_t n = n_blocks * qk, src_bytes = n_blocks * bb, total = shift + n + GUARD;
    uint8_t *src = malloc((size_t)src_bytes);
    float *ref = malloc((size_t)n * sizeof(float));
    uint32_t *got = malloc((size_t)total * sizeof(uint32_t));
    void *d_src = NULL, *d_dst = NULL;
    if (!src || !ref || !got) { CHECK(0, "host allocation of %lld floats", (long long)n); goto done; }
    fill_blocks(type, src, n_blocks, r);

    strata_status st = strata_dequantize_row(type, src, ref, n);
    CHECK(st == STRATA_OK, "%s: CPU dequantize: %s", tn, strata_last_error());

    st = st_cuda_malloc(&d_src, (size_t)src_bytes);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_dst, (size_t)total * sizeof(float));
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_src, src, (size_t)src_bytes);
    if (st == STRATA_OK) st = st_cuda_memset(d_dst, 0xA5, (size_t)total * sizeof(float));
    if (st == STRATA_OK) st = st_cuda_dequantize(type, d_src, (float *)d_dst + shift, n, NULL);
    if (st == STRATA_OK) st = st_cuda_synchronize();
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(got, d_dst, (size_t)total * sizeof(float));
    CHECK(st == STRATA_OK, "%s n=%lld shift=%d: %s", tn, (long long)n, shift, strata_last_error());
    if (st != STRATA_OK) goto done;

    int64_t bad = 0, first_bad = 0, nans = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t want;
        memcpy(&want, &ref[i], 4);
        float g;
        memcpy(&g, &got[shift + i], 4);
        if (isnan(g)) nans++;
        if (got[shift + i] != want && bad++ == 0) first_bad = i;
    }
    uint32_t want0;
    memcpy(&want0, &ref[first_bad], 4);
    float g0;
    memcpy(&g0, &got[shift + first_bad], 4);
    CHECK(bad == 0, "%s n=%lld shift=%d: %lld mismatches, first at %lld: gpu %.9g (0x%08x) "
          "cpu %.9g (0x%08x)", tn, (long long)n, shift, (long long)bad, (long long)first_bad,
          (double)g0, got[shift + first_bad], (double)ref[first_bad], want0);
    CHECK(nans == 0, "%s n=%lld: %lld NaN outputs", tn, (long long)n, (long long)nans);
    int guard_bad = 0;
    for (int64_t i = 0; i < shift; i++) guard_bad += got[i] != SENTINEL;
    for (int64_t i = shift + n; i < total; i++) guard_bad += got[i] != SENTINEL;
    CHECK(guard_bad == 0, "%s n=%lld shift=%d: %d guard words overwritten", tn, (long long)n,
          shift, guard_bad);
done:
    (void)st_cuda_free(d_src);
    (void)st_cuda_free(d_dst);
    free(src);
    free(ref);
    free(got);
}

/* The host convenience entry gives the same floats. */
static void check_host_entry(strata_type type, int64_t n_blocks, test_rng *r) {
    const int64_t qk = strata_type_block_size(type), bb = strata_type_block_bytes(type);
    const int64_t n = n_blocks * qk;
    uint8_t *src = malloc((size_t)(n_blocks * bb));
    float *ref = malloc((size_t)n * sizeof(float)), *got = malloc((size_t)n * sizeof(float));
    if (!src || !ref || !got) { CHECK(0, "host allocation"); goto done; }
    fill_blocks(type, src, n_blocks, r);
    CHECK(strata_dequantize_row(type, src, ref, n) == STRATA_OK, "CPU: %s", strata_last_error());
    strata_status st = st_cuda_dequantize_host(type, src, n, got);
    CHECK(st == STRATA_OK, "%s host entry: %s", strata_type_name(type), strata_last_error());
    CHECK(st == STRATA_OK && memcmp(ref, got, (size_t)n * sizeof(float)) == 0,
          "%s host entry differs from the CPU", strata_type_name(type));
done:
    free(src);
    free(ref);
    free(got);
}

/* ---- argument errors (no device needed) ----------------------------------------------------- */

static void test_arguments(void) {
    /* Every GPU type is one the CPU can dequantize (that is the reference). */
    int n_supported = 0;
    for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++) {
        const strata_type t = all_types[i];
        if (!st_cuda_dequant_supports(t)) continue;
        n_supported++;
        CHECK(strata_type_can_dequantize(t), "GPU dequantizes %s but the CPU (the reference) does not",
              strata_type_name(t));
    }
    CHECK(n_supported >= 4, "only %d GPU types", n_supported);
    CHECK(st_cuda_dequant_supports(STRATA_TYPE_Q8_0) && st_cuda_dequant_supports(STRATA_TYPE_Q4_0) &&
          st_cuda_dequant_supports(STRATA_TYPE_F16) && st_cuda_dequant_supports(STRATA_TYPE_BF16),
          "a required type is missing");
    CHECK(!st_cuda_dequant_supports((strata_type)4) && !st_cuda_dequant_supports((strata_type)-1) &&
          !st_cuda_dequant_supports(STRATA_TYPE_COUNT), "unknown ids must be unsupported");

    uint8_t blk[64] = {0};
    float out[64];
    strata_status st = st_cuda_dequantize_host(STRATA_TYPE_Q8_0, blk, 31, out);
    CHECK(st == STRATA_ERR_INVALID_ARG, "n=31 for Q8_0: %s", strata_status_name(st));
    CHECK(strstr(strata_last_error(), "block size") != NULL, "message '%s'", strata_last_error());
    st = st_cuda_dequantize_host(STRATA_TYPE_Q8_0, blk, -32, out);
    CHECK(st == STRATA_ERR_INVALID_ARG, "n=-32: %s", strata_status_name(st));
    st = st_cuda_dequantize_host(STRATA_TYPE_Q8_0, NULL, 32, out);
    CHECK(st == STRATA_ERR_INVALID_ARG, "NULL src: %s", strata_status_name(st));
    st = st_cuda_dequantize_host((strata_type)4, blk, 32, out);
    CHECK(st == STRATA_ERR_UNSUPPORTED, "type 4: %s", strata_status_name(st));
    st = st_cuda_dequantize_host(STRATA_TYPE_Q8_0, blk, 0, out);
    CHECK(st == STRATA_OK, "n=0 is a no-op: %s", strata_last_error());
    /* Misaligned device pointers are refused before anything touches them. */
    st = st_cuda_dequantize(STRATA_TYPE_Q8_0, (const void *)(uintptr_t)0x1001, (float *)(uintptr_t)0x2000, 32, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "odd src: %s", strata_status_name(st));
    st = st_cuda_dequantize(STRATA_TYPE_Q8_0, (const void *)(uintptr_t)0x1000, (float *)(uintptr_t)0x2002, 32, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "dst not 4-aligned: %s", strata_status_name(st));
    st = st_cuda_dequantize(STRATA_TYPE_F32, (const void *)(uintptr_t)0x1002, (float *)(uintptr_t)0x2000, 4, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "f32 src not 4-aligned: %s", strata_status_name(st));
}

int main(void) {
    test_arguments();

    int available = 0;
    char reason[256];
    strata_status st = st_cuda_probe(&available, reason, sizeof reason);
    CHECK(st == STRATA_OK, "probe: %s", strata_last_error());
    if (!available) {
        CHECK(reason[0] != '\0', "unavailable without a reason");
        /* Without a device the entries refuse with the probe's reason. */
        uint8_t blk[34] = {0};
        float out[32];
        st = st_cuda_dequantize_host(STRATA_TYPE_Q8_0, blk, 32, out);
        CHECK(st == STRATA_ERR_UNSUPPORTED && strstr(strata_last_error(), reason) != NULL,
              "no device: %s '%s'", strata_status_name(st), strata_last_error());
        SKIP("GPU checks: CUDA unavailable: %s", reason);
        return test_report();
    }
    printf("device: %s\n", reason);

    test_rng r = {0x9E3779B97F4A7C15ULL};
    static const int64_t sizes[] = {1, 3, 1000, 100003}; /* blocks */
    for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++) {
        const strata_type t = all_types[i];
        if (!st_cuda_dequant_supports(t)) continue;
        if (!strata_type_can_dequantize(t)) continue; /* failed in the list check above */
        const clock_t c0 = clock();
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) check_type_size(t, sizes[k], 0, &r);
        check_type_size(t, 1000, 1, &r); /* output not 16-byte aligned: scalar stores */
        check_host_entry(t, 77, &r);
        printf("%-7s checked (%.2f s)\n", strata_type_name(t), (double)(clock() - c0) / CLOCKS_PER_SEC);
    }
    return test_report();
}

#else /* !STRATA_HAVE_CUDA */

TEST_MAIN_WITHOUT_CUDA()

#endif
