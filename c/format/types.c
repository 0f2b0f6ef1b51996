/* types.c - the table of tensor types: names, block sizes and bytes per block, for every type id
 * a GGUF file may hold (including those Strata cannot compute with yet). */
#include "common.h"

#include <strings.h>

typedef struct {
    const char *name;
    int64_t block_size;  /* weights per block; 0: id is not a type */
    int64_t block_bytes;
} st_type_traits;

static const st_type_traits st_types[STRATA_TYPE_COUNT] = {
    [STRATA_TYPE_F32] = {"f32", 1, 4},
    [STRATA_TYPE_F16] = {"f16", 1, 2},
    [STRATA_TYPE_Q4_0] = {"q4_0", 32, 18},
    [STRATA_TYPE_Q4_1] = {"q4_1", 32, 20},
    [STRATA_TYPE_Q5_0] = {"q5_0", 32, 22},
    [STRATA_TYPE_Q5_1] = {"q5_1", 32, 24},
    [STRATA_TYPE_Q8_0] = {"q8_0", 32, 34},
    [STRATA_TYPE_Q8_1] = {"q8_1", 32, 36},
    [STRATA_TYPE_Q2_K] = {"q2_K", 256, 84},
    [STRATA_TYPE_Q3_K] = {"q3_K", 256, 110},
    [STRATA_TYPE_Q4_K] = {"q4_K", 256, 144},
    [STRATA_TYPE_Q5_K] = {"q5_K", 256, 176},
    [STRATA_TYPE_Q6_K] = {"q6_K", 256, 210},
    [STRATA_TYPE_Q8_K] = {"q8_K", 256, 292},
    [STRATA_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66},
    [STRATA_TYPE_IQ2_XS] = {"iq2_xs", 256, 74},
    [STRATA_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98},
    [STRATA_TYPE_IQ1_S] = {"iq1_s", 256, 50},
    [STRATA_TYPE_IQ4_NL] = {"iq4_nl", 32, 18},
    [STRATA_TYPE_IQ3_S] = {"iq3_s", 256, 110},
    [STRATA_TYPE_IQ2_S] = {"iq2_s", 256, 82},
    [STRATA_TYPE_IQ4_XS] = {"iq4_xs", 256, 136},
    [STRATA_TYPE_I8] = {"i8", 1, 1},
    [STRATA_TYPE_I16] = {"i16", 1, 2},
    [STRATA_TYPE_I32] = {"i32", 1, 4},
    [STRATA_TYPE_I64] = {"i64", 1, 8},
    [STRATA_TYPE_F64] = {"f64", 1, 8},
    [STRATA_TYPE_IQ1_M] = {"iq1_m", 256, 56},
    [STRATA_TYPE_BF16] = {"bf16", 1, 2},
    [STRATA_TYPE_TQ1_0] = {"tq1_0", 256, 54},
    [STRATA_TYPE_TQ2_0] = {"tq2_0", 256, 66},
    [STRATA_TYPE_MXFP4] = {"mxfp4", 32, 17},
};

int strata_type_is_known(int id) {
    return id >= 0 && id < STRATA_TYPE_COUNT && st_types[id].block_size > 0;
}

const char *strata_type_name(strata_type type) {
    return strata_type_is_known((int)type) ? st_types[type].name : "unknown";
}

strata_status strata_type_from_name(const char *name, strata_type *out) {
    if (!name || !out) return st_error(STRATA_ERR_INVALID_ARG, "strata_type_from_name: NULL argument");
    for (int i = 0; i < STRATA_TYPE_COUNT; i++) {
        if (st_types[i].block_size > 0 && strcasecmp(st_types[i].name, name) == 0) {
            *out = (strata_type)i;
            return STRATA_OK;
        }
    }
    return st_error(STRATA_ERR_NOT_FOUND, "unknown tensor type name '%s'", name);
}

int64_t strata_type_block_size(strata_type type) {
    return strata_type_is_known((int)type) ? st_types[type].block_size : 0;
}

int64_t strata_type_block_bytes(strata_type type) {
    return strata_type_is_known((int)type) ? st_types[type].block_bytes : 0;
}

int64_t strata_row_bytes(strata_type type, int64_t n) {
    if (!strata_type_is_known((int)type) || n < 0) return -1;
    int64_t bs = st_types[type].block_size;
    if (n % bs != 0) return -1;
    int64_t bytes;
    if (st_mul_overflow_i64(n / bs, st_types[type].block_bytes, &bytes)) return -1;
    return bytes;
}
