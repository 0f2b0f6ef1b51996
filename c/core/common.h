/* common.h - internal helpers shared by every library source: error reporting, checked size
 * arithmetic, half-precision conversions. Not part of the public ABI. */
#ifndef STRATA_COMMON_H
#define STRATA_COMMON_H

#include "strata.h"
#include "strata_gguf.h"
#include "strata_quant.h"

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#if defined(__GNUC__)
#define ST_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define ST_LIKELY(x) __builtin_expect(!!(x), 1)
#define ST_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define ST_PRINTF(a, b)
#define ST_LIKELY(x) (x)
#define ST_UNLIKELY(x) (x)
#endif

#define ST_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors --------------------------------------------------------------------------------- */

/* Records a message for strata_last_error() on this thread and returns status, so callers write
 * `return st_error(STRATA_ERR_FORMAT, "tensor '%s': ...", name);`. */
strata_status st_error(strata_status status, const char *fmt, ...) ST_PRINTF(2, 3);
/* Clears this thread's message (used by calls that succeed after an internal failure). */
void st_error_clear(void);

/* Propagates a failing status. */
#define ST_TRY(expr) do { strata_status st__s = (expr); if (st__s != STRATA_OK) return st__s; } while (0)

/* ---- checked arithmetic (1 on overflow) ----------------------------------------------------- */

/* n rounded up to a multiple of a (a power of two): workspace sections, aligned slot strides. */
static inline size_t st_round_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

static inline int st_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}
static inline int st_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline int st_mul_overflow_i64(int64_t a, int64_t b, int64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}

/* ---- half precision ------------------------------------------------------------------------- */

/* IEEE binary16 -> float, exact (subnormals, inf, nan). */
static inline float st_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do { man <<= 1; e++; } while ((man & 0x400u) == 0);
            man &= 0x3ffu;
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + (127 - 15)) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* float -> IEEE binary16, round to nearest even (as numpy and F16C do). */
static inline uint16_t st_f32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan (keep nan quiet) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign; /* < 2^-25 rounds to 0 */
        uint32_t e = ax >> 23;
        uint32_t man = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u); /* round to nearest even on bit 13 */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float st_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* float -> bfloat16, round to nearest even; nan stays nan (as ggml and torch do). */
static inline uint16_t st_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64);
    return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

#endif /* STRATA_COMMON_H */
