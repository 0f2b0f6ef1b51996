/* bench_util.h - what the bench programs share: a xorshift64* generator (each program seeds
 * rng_state as it did before this header), a monotonic clock, a comparator of doubles for qsort,
 * and random quantized weight rows with finite scales. Header-only: each bench is one file. */
#ifndef STRATA_BENCH_UTIL_H
#define STRATA_BENCH_UTIL_H

#include "quant.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static inline uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ULL;
}

/* uniform in [-1, 1) */
static inline float rng_float(void) {
    return (float)((double)(rng_next() >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* bytes (whole blocks) of random type-quantized weights whose scales are finite: random bytes,
 * then each block's d (and the K-quants' dmin) set to small fp16 values. For Q4_0, Q8_0, Q4_K,
 * Q5_K and Q6_K; MXFP4 (its E8M0 exponent kept near 2^0) and IQ1_M (its f16 super-scale, spread
 * over the top nibbles of the scale words, kept finite). */
static inline void fill_q_rows(strata_type type, unsigned char *w, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) w[i] = (unsigned char)rng_next();
    const size_t bs = (size_t)strata_type_block_bytes(type);
    for (size_t b = 0; b + bs <= bytes; b += bs) {
        const uint16_t d = st_f32_to_fp16(0.01f * rng_float()), dm = st_f32_to_fp16(0.01f * rng_float());
        if (type == STRATA_TYPE_MXFP4) {
            w[b] = (unsigned char)(120 + (w[b] & 7));
            continue;
        }
        if (type == STRATA_TYPE_IQ1_M) { /* clearing bit 14 of the last word: exponent < 31 */
            w[b + offsetof(block_iq1_m, scales) + 7] &= 0xBF;
            continue;
        }
        if (type == STRATA_TYPE_Q6_K) { /* d closes the block */
            memcpy(w + b + offsetof(block_q6_K, d), &d, 2);
            continue;
        }
        memcpy(w + b, &d, 2);
        if (type != STRATA_TYPE_Q8_0 && type != STRATA_TYPE_Q4_0) memcpy(w + b + 2, &dm, 2);
    }
}

#endif /* STRATA_BENCH_UTIL_H */
