/* quant_api.c - the public block-format entry points: strata_dequantize_row,
 * strata_quantize_row, strata_quantize_row_importance and the capability queries. They check arguments, then call the per-type
 * functions of dequant.c and quantize.c (st_dequant_get / st_quant_get). */
#include "quant.h"

int strata_type_can_dequantize(strata_type type) {
    return st_dequant_get(type) != NULL;
}

int strata_type_can_quantize(strata_type type) {
    return st_quant_get(type) != NULL;
}

int strata_type_takes_importance(strata_type type) {
    return st_quant_w_get(type) != NULL;
}

/* Checks shared by both directions: known type, non-negative n, whole blocks. */
static strata_status st_check_row(const char *fn, strata_type type, const void *src,
                                  const void *dst, int64_t n) {
    if (!src || !dst)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: %s is NULL", fn, !src ? "src" : "dst");
    if (n < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: n = %lld is negative", fn, (long long)n);
    if (!strata_type_is_known((int)type))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: type %d (%s) is not a tensor type", fn, (int)type,
                        strata_type_name(type));
    const int64_t bs = strata_type_block_size(type);
    if (n % bs != 0)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "%s: n = %lld is not a multiple of the %s block size %lld", fn,
                        (long long)n, strata_type_name(type), (long long)bs);
    return STRATA_OK;
}

strata_status strata_dequantize_row(strata_type type, const void *src, float *dst, int64_t n) {
    ST_TRY(st_check_row("strata_dequantize_row", type, src, dst, n));
    const st_dequant_fn fn = st_dequant_get(type);
    if (!fn)
        return st_error(STRATA_ERR_UNSUPPORTED, "strata_dequantize_row: dequantizing type %s is not supported",
                        strata_type_name(type));
    if (n > 0) {
        ST_TRY(st_quant_prepare(type));
        fn(src, dst, n);
    }
    return STRATA_OK;
}

strata_status strata_quantize_row(strata_type type, const float *src, void *dst, int64_t n) {
    ST_TRY(st_check_row("strata_quantize_row", type, src, dst, n));
    const st_quant_fn fn = st_quant_get(type);
    if (!fn)
        return st_error(STRATA_ERR_UNSUPPORTED, "strata_quantize_row: quantizing to type %s is not supported",
                        strata_type_name(type));
    if (n > 0) {
        ST_TRY(st_quant_prepare(type));
        fn(src, dst, n);
    }
    return STRATA_OK;
}

strata_status strata_quantize_row_importance(strata_type type, const float *src, void *dst, int64_t n,
                                             const float *importance) {
    if (!importance) return strata_quantize_row(type, src, dst, n);
    ST_TRY(st_check_row("strata_quantize_row_importance", type, src, dst, n));
    const st_quant_w_fn fn = st_quant_w_get(type);
    if (!fn) return strata_quantize_row(type, src, dst, n); /* (the type takes none) */
    if (n > 0) {
        ST_TRY(st_quant_prepare(type));
        fn(src, dst, n, importance);
    }
    return STRATA_OK;
}
