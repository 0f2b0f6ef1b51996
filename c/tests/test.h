/* test.h - the tiny test harness every c/tests/test_*.c uses. Each test file is a standalone
 * program: it runs its checks and ends with the line "N passed, N failed[, N skipped]", exiting 1
 * if any check failed. Header-only: include it from exactly one source file per test program. */
#ifndef STRATA_TEST_H
#define STRATA_TEST_H

#include <stdio.h>
#include <stdlib.h>

static int test_passed, test_failed, test_skipped;

/* CHECK(cond, fmt, ...): counts one check; on failure prints where and why. */
#define CHECK(cond, ...) do {                                                  \
        if (cond) { test_passed++; }                                           \
        else {                                                                 \
            test_failed++;                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

/* SKIP(fmt, ...): counts a check that could not run here, with the reason. */
#define SKIP(...) do {                                                         \
        test_skipped++;                                                        \
        fprintf(stderr, "skip %s:%d: ", __FILE__, __LINE__);                   \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
    } while (0)

/* Prints the closing line and gives main's exit status. */
static inline int test_report(void) {
    fflush(stderr);
    if (test_skipped)
        printf("%d passed, %d failed, %d skipped\n", test_passed, test_failed, test_skipped);
    else
        printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

/* The whole main of a GPU test program built without CUDA: one skip, the closing line. */
#define TEST_MAIN_WITHOUT_CUDA()                                               \
    int main(void) {                                                           \
        SKIP("built without CUDA (nvcc not found at build time or CUDA=0)");   \
        return test_report();                                                  \
    }

/* Deterministic xorshift64* generator for test data. */
typedef struct { unsigned long long s; } test_rng;
static inline unsigned long long test_rng_next(test_rng *r) {
    r->s ^= r->s >> 12; r->s ^= r->s << 25; r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ULL;
}
/* Uniform in [-1, 1). */
static inline float test_rng_float(test_rng *r) {
    return (float)((double)(test_rng_next(r) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

#endif /* STRATA_TEST_H */
