/* block_fields.h - where the fp16 scales sit in a quantized block, for tests that fill blocks with
 * random bytes and then give every scale a value of their choosing (test_cuda_dequant,
 * test_cuda_mmv, cuda_moe_cases.h). Header-only, static inline functions. */
#ifndef STRATA_TESTS_BLOCK_FIELDS_H
#define STRATA_TESTS_BLOCK_FIELDS_H

#include <stdint.h>

#include "strata.h"

/* v little-endian at p. */
static inline void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

/* Byte offsets of the fp16 scale fields of one block of type (-1 ends the list). */
static inline const int *fp16_fields(strata_type type) {
    static const int d0[] = {0, -1}, dm[] = {0, 2, -1}, q2k[] = {80, 82, -1}, q3k[] = {108, -1},
                     q6k[] = {208, -1}, none[] = {-1};
    switch (type) {
    case STRATA_TYPE_Q4_0: case STRATA_TYPE_Q5_0: case STRATA_TYPE_Q8_0: case STRATA_TYPE_IQ4_NL:
    case STRATA_TYPE_IQ4_XS: case STRATA_TYPE_IQ3_XXS: case STRATA_TYPE_IQ3_S: case STRATA_TYPE_IQ2_XXS:
    case STRATA_TYPE_IQ2_XS: case STRATA_TYPE_IQ2_S: case STRATA_TYPE_IQ1_S:
        return d0;
    case STRATA_TYPE_Q4_1: case STRATA_TYPE_Q5_1: case STRATA_TYPE_Q8_1:
    case STRATA_TYPE_Q4_K: case STRATA_TYPE_Q5_K:
        return dm;
    case STRATA_TYPE_Q2_K: return q2k;
    case STRATA_TYPE_Q3_K: return q3k;
    case STRATA_TYPE_Q6_K: return q6k;
    default: return none;
    }
}

#endif
