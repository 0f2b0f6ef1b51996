/* dot.c - run-time dispatch of the CPU dot-product kernels and the public dot API
 * (strata_vec_dot, strata_vec_dot_f32, strata_act_type, strata_type_can_dot).
 *
 * One kernel table per ISA level is filled once (pthread_once): scalar always; AVX2 when the CPU
 * has AVX2 + FMA + F16C; AVX-512 when it has AVX-512 F, BW, VL, DQ and VNNI. A second, resolved
 * table per level holds for each type the kernel of the highest level at or below it that has
 * one (or the level below's where it is faster: st_prefer_lower), so strata_vec_dot costs one table
 * load. */
#include "dot.h"
#include "quant.h"

#include <pthread.h>
#include <stdlib.h>

/* ---------------------------------------------------------------------------------------------
 * Kernel tables
 * ------------------------------------------------------------------------------------------- */

#define ST_ISA_LEVELS 3 /* scalar, avx2, avx512 */

static st_vec_dot_fn st_tables[ST_ISA_LEVELS][STRATA_TYPE_COUNT];   /* exactly this level */
static st_vec_dot_fn st_resolved[ST_ISA_LEVELS][STRATA_TYPE_COUNT]; /* this level or below */
static st_vec_dot_n_fn st_tables_n[ST_ISA_LEVELS][STRATA_TYPE_COUNT]; /* several rows, this level */
static st_vec_dot_tile_fn st_tables_tile[STRATA_TYPE_COUNT];        /* AMX, for the AVX-512 level */
static st_vec_dot_rows_fn st_tables_rows[STRATA_TYPE_COUNT];        /* float rows, AVX-512 level */
static st_q8_0_prep_fn st_q80_prep;  /* prepared-row Q8_0 kernels, for the AVX-512 level */
static st_q8_0_dotp_fn st_q80_dotp;
static int st_amx_enabled = 1;     /* strata_cpu_amx_set */
static pthread_once_t st_tables_once = PTHREAD_ONCE_INIT;

/* 1 when level lvl's kernel of type t is slower than the level below's (bench_dot, one thread:
 * docs/PERFORMANCE.md), so the level resolves t to the one below; the kernel stays in its table
 * for st_vec_dot_at (the tests, bench_dot). These types' levels differ in the last bits anyway. */
static int st_prefer_lower(int lvl, int t) {
    return lvl == STRATA_ISA_AVX512 && st_tables[STRATA_ISA_AVX2][t] &&
           (t == STRATA_TYPE_IQ2_XXS || t == STRATA_TYPE_IQ2_XS || t == STRATA_TYPE_IQ2_S || t == STRATA_TYPE_IQ1_S);
}

static void st_tables_init(void) {
    const st_cpu_features *f = st_cpu_get_features();
    st_dot_register_scalar(st_tables[STRATA_ISA_SCALAR]);
#if defined(__x86_64__) || defined(__i386__)
    if (f->avx2 && f->fma && f->f16c) {
        st_dot_register_avx2(st_tables[STRATA_ISA_AVX2]);
        st_dotn_register_avx2(st_tables_n[STRATA_ISA_AVX2]);
    }
    if (f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq &&
        f->avx512vnni) {
        st_dot_register_avx512(st_tables[STRATA_ISA_AVX512]);
        st_dotn_register_avx512(st_tables_n[STRATA_ISA_AVX512]);
        st_q8_0_prepared_avx512(&st_q80_prep, &st_q80_dotp);
        st_dot_rows_register_avx512(st_tables_rows);
        if (f->amx_tile && f->amx_int8 && st_amx_request()) st_dot_register_amx(st_tables_tile);
    }
#else
    (void)f;
#endif
    for (int lvl = 0; lvl < ST_ISA_LEVELS; lvl++)
        for (int t = 0; t < STRATA_TYPE_COUNT; t++)
            st_resolved[lvl][t] = st_tables[lvl][t] && !st_prefer_lower(lvl, t) ? st_tables[lvl][t]
                                  : lvl > 0                                   ? st_resolved[lvl - 1][t]
                                                                              : NULL;
}

static int st_isa_level(strata_cpu_isa isa) {
    switch (isa) {
    case STRATA_ISA_SCALAR: return 0;
    case STRATA_ISA_AVX2: return 1;
    case STRATA_ISA_AVX512: return 2;
    case STRATA_ISA_BEST: return (int)strata_cpu_isa_supported();
    }
    return -1;
}

st_vec_dot_fn st_vec_dot_at(strata_type type, strata_cpu_isa isa) {
    pthread_once(&st_tables_once, st_tables_init);
    int lvl = st_isa_level(isa);
    if (lvl < 0 || (int)type < 0 || (int)type >= STRATA_TYPE_COUNT) return NULL;
    return st_tables[lvl][type];
}

st_vec_dot_n_fn st_vec_dot_n_at(strata_type type, strata_cpu_isa isa) {
    pthread_once(&st_tables_once, st_tables_init);
    int lvl = st_isa_level(isa);
    if (lvl < 0 || (int)type < 0 || (int)type >= STRATA_TYPE_COUNT) return NULL;
    return st_tables_n[lvl][type];
}

st_vec_dot_fn st_vec_dot_get(strata_type type) {
    pthread_once(&st_tables_once, st_tables_init);
    if ((int)type < 0 || (int)type >= STRATA_TYPE_COUNT) return NULL;
    return st_resolved[(int)strata_cpu_isa_active()][type];
}

st_vec_dot_n_fn st_vec_dot_n_get(strata_type type) {
    pthread_once(&st_tables_once, st_tables_init);
    if ((int)type < 0 || (int)type >= STRATA_TYPE_COUNT) return NULL;
    const int lvl = (int)strata_cpu_isa_active();
    if (lvl < 0 || lvl >= ST_ISA_LEVELS || !st_resolved[lvl][type]) return NULL;
    /* the several-row kernel of the level whose single-row kernel is in use (that level's own, or
     * a lower one's where the level resolves the type down): then the bits agree */
    for (int l = lvl; l >= 0; l--)
        if (st_resolved[lvl][type] == st_tables[l][type]) return st_tables_n[l][type];
    return NULL;
}

st_vec_dot_rows_fn st_vec_dot_rows_get(strata_type type) {
    pthread_once(&st_tables_once, st_tables_init);
    if ((int)type < 0 || (int)type >= STRATA_TYPE_COUNT || strata_cpu_isa_active() != STRATA_ISA_AVX512 ||
        st_resolved[STRATA_ISA_AVX512][type] != st_tables[STRATA_ISA_AVX512][type])
        return NULL;
    return st_tables_rows[type];
}

int st_vec_dot_exact_blocks(strata_type type) {
    /* every level's kernel for these (scalar, AVX2, AVX-512) follows it: test_dot compares bits */
    return type == STRATA_TYPE_Q4_0 || type == STRATA_TYPE_Q8_0 || type == STRATA_TYPE_Q4_K ||
           type == STRATA_TYPE_Q5_K || type == STRATA_TYPE_Q6_K;
}

int st_q8_0_prepared_get(st_q8_0_prep_fn *prep, st_q8_0_dotp_fn *dot) {
    pthread_once(&st_tables_once, st_tables_init);
    const strata_type t = STRATA_TYPE_Q8_0;
    if (!st_q80_dotp || strata_cpu_isa_active() != STRATA_ISA_AVX512 ||
        st_resolved[STRATA_ISA_AVX512][t] != st_tables[STRATA_ISA_AVX512][t])
        return 0;
    *prep = st_q80_prep;
    *dot = st_q80_dotp;
    return 1;
}

st_vec_dot_tile_fn st_vec_dot_tile_get(strata_type type) {
    pthread_once(&st_tables_once, st_tables_init);
    if ((int)type < 0 || (int)type >= STRATA_TYPE_COUNT) return NULL;
    if (!__atomic_load_n(&st_amx_enabled, __ATOMIC_ACQUIRE) || strata_cpu_isa_active() != STRATA_ISA_AVX512 ||
        st_resolved[STRATA_ISA_AVX512][type] != st_tables[STRATA_ISA_AVX512][type])
        return NULL;
    return st_tables_tile[type];
}

/* ---------------------------------------------------------------------------------------------
 * Public API
 * ------------------------------------------------------------------------------------------- */

int strata_cpu_amx_supported(void) {
    pthread_once(&st_tables_once, st_tables_init);
    for (int t = 0; t < STRATA_TYPE_COUNT; t++)
        if (st_tables_tile[t]) return 1;
    return 0;
}

strata_status strata_cpu_amx_set(int enable) {
    if (enable && !strata_cpu_amx_supported())
        return st_error(STRATA_ERR_UNSUPPORTED, "strata_cpu_amx_set: this CPU (or OS) offers no AMX tiles");
    __atomic_store_n(&st_amx_enabled, enable ? 1 : 0, __ATOMIC_RELEASE);
    return STRATA_OK;
}

int strata_cpu_amx_active(void) {
    return strata_cpu_amx_supported() && __atomic_load_n(&st_amx_enabled, __ATOMIC_ACQUIRE) &&
           strata_cpu_isa_active() == STRATA_ISA_AVX512;
}

strata_type strata_act_type(strata_type weight_type) {
    switch (weight_type) {
    case STRATA_TYPE_F32:
    case STRATA_TYPE_F16:
    case STRATA_TYPE_BF16:
        return STRATA_TYPE_F32;
    case STRATA_TYPE_Q4_0:
    case STRATA_TYPE_Q4_1:
    case STRATA_TYPE_Q5_0:
    case STRATA_TYPE_Q5_1:
    case STRATA_TYPE_Q8_0:
    case STRATA_TYPE_IQ4_NL:
    case STRATA_TYPE_MXFP4:
        return STRATA_TYPE_Q8_0;
    case STRATA_TYPE_Q2_K:
    case STRATA_TYPE_Q3_K:
    case STRATA_TYPE_Q4_K:
    case STRATA_TYPE_Q5_K:
    case STRATA_TYPE_Q6_K:
    case STRATA_TYPE_IQ4_XS:
    case STRATA_TYPE_IQ3_XXS:
    case STRATA_TYPE_IQ3_S:
    case STRATA_TYPE_IQ2_XXS:
    case STRATA_TYPE_IQ2_XS:
    case STRATA_TYPE_IQ2_S:
    case STRATA_TYPE_IQ1_S:
    case STRATA_TYPE_IQ1_M:
        return STRATA_TYPE_Q8_K;
    default:
        return STRATA_TYPE_COUNT;
    }
}

int strata_type_can_dot(strata_type type) { return strata_act_type(type) != STRATA_TYPE_COUNT; }

/* Checks shared by both entry points; on success *fn is the kernel to call. */
static strata_status st_dot_check(const char *who, strata_type type, const void *w,
                                  const void *x, int64_t n, const float *out, st_vec_dot_fn *fn) {
    if (!w || !x || !out)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL %s", who,
                        !w ? "weights" : !x ? "activations" : "out");
    if (!strata_type_is_known((int)type))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: %d is not a tensor type id", who, (int)type);
    if (!strata_type_can_dot(type))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: no dot product for weight type %s", who,
                        strata_type_name(type));
    int64_t bs = strata_type_block_size(type);
    if (n < 0 || n % bs != 0)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "%s: n = %lld is not a non-negative multiple of the %s block size %lld",
                        who, (long long)n, strata_type_name(type), (long long)bs);
    *fn = st_vec_dot_get(type);
    if (!*fn)
        return st_error(STRATA_ERR_INTERNAL, "%s: no kernel registered for %s", who,
                        strata_type_name(type));
    return STRATA_OK;
}

strata_status strata_vec_dot(strata_type type, const void *w, const void *xq, int64_t n,
                             float *out) {
    st_vec_dot_fn fn;
    ST_TRY(st_dot_check("strata_vec_dot", type, w, xq, n, out, &fn));
    if (n == 0) {
        *out = 0.0f;
        return STRATA_OK;
    }
    fn(n, out, w, xq);
    return STRATA_OK;
}

/* Activation bytes for up to 4096 weights: the larger of q8_0 (34 per 32) and q8_K (292 per 256). */
#define ST_DOT_STACK_N 4096
#define ST_DOT_STACK_BYTES (ST_DOT_STACK_N / QK_K * sizeof(block_q8_K))
_Static_assert(ST_DOT_STACK_N / QK8_0 * sizeof(block_q8_0) <= ST_DOT_STACK_BYTES,
               "stack activation buffer too small for q8_0");

strata_status strata_vec_dot_f32(strata_type type, const void *w, const float *x, int64_t n,
                                 float *out) {
    st_vec_dot_fn fn;
    ST_TRY(st_dot_check("strata_vec_dot_f32", type, w, x, n, out, &fn));
    if (n == 0) {
        *out = 0.0f;
        return STRATA_OK;
    }
    strata_type act = strata_act_type(type);
    if (act == STRATA_TYPE_F32) {
        fn(n, out, w, x);
        return STRATA_OK;
    }
    int64_t bytes = strata_row_bytes(act, n);
    if (bytes < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_vec_dot_f32: n = %lld overflows", (long long)n);
    _Alignas(64) unsigned char stack[ST_DOT_STACK_BYTES];
    void *buf = stack;
    if ((uint64_t)bytes > sizeof stack) {
        buf = malloc((size_t)bytes);
        if (!buf)
            return st_error(STRATA_ERR_NOMEM,
                            "strata_vec_dot_f32: cannot allocate %lld bytes of %s activations",
                            (long long)bytes, strata_type_name(act));
    }
    if (act == STRATA_TYPE_Q8_0)
        st_quantize_row_q8_0(x, (block_q8_0 *)buf, n);
    else
        st_quantize_row_q8_K(x, (block_q8_K *)buf, n);
    fn(n, out, w, buf);
    if (buf != stack) free(buf);
    return STRATA_OK;
}
