/* test_dot.c - tests of the CPU dot products: the scalar reference against a float64 dot of the
 * dequantized operands, every faster ISA level against the scalar reference, strata_vec_dot_f32
 * against quantize + strata_vec_dot, the ISA selection API (cross-checked with /proc/cpuinfo),
 * and argument errors. */
#include "dot.h"
#include "quant.h"
#include "test.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Weight types and random well-formed rows
 * ------------------------------------------------------------------------------------------- */

/* A dot type and the byte offsets of its fp16 fields within a block (set to finite values; every
 * other byte is random). */
typedef struct {
    strata_type type;
    int nhalf;
    size_t half_off[2];
} dot_type;

static const dot_type dot_types[] = {
    {STRATA_TYPE_F32, 0, {0, 0}},
    {STRATA_TYPE_F16, 0, {0, 0}},
    {STRATA_TYPE_BF16, 0, {0, 0}},
    {STRATA_TYPE_Q4_0, 1, {offsetof(block_q4_0, d), 0}},
    {STRATA_TYPE_Q4_1, 2, {offsetof(block_q4_1, d), offsetof(block_q4_1, m)}},
    {STRATA_TYPE_Q5_0, 1, {offsetof(block_q5_0, d), 0}},
    {STRATA_TYPE_Q5_1, 2, {offsetof(block_q5_1, d), offsetof(block_q5_1, m)}},
    {STRATA_TYPE_Q8_0, 1, {offsetof(block_q8_0, d), 0}},
    {STRATA_TYPE_IQ4_NL, 1, {offsetof(block_iq4_nl, d), 0}},
    {STRATA_TYPE_Q2_K, 2, {offsetof(block_q2_K, d), offsetof(block_q2_K, dmin)}},
    {STRATA_TYPE_Q3_K, 1, {offsetof(block_q3_K, d), 0}},
    {STRATA_TYPE_Q4_K, 2, {offsetof(block_q4_K, d), offsetof(block_q4_K, dmin)}},
    {STRATA_TYPE_Q5_K, 2, {offsetof(block_q5_K, d), offsetof(block_q5_K, dmin)}},
    {STRATA_TYPE_Q6_K, 1, {offsetof(block_q6_K, d), 0}},
    {STRATA_TYPE_IQ4_XS, 1, {offsetof(block_iq4_xs, d), 0}},
    {STRATA_TYPE_IQ3_XXS, 1, {offsetof(block_iq3_xxs, d), 0}},
    {STRATA_TYPE_IQ3_S, 1, {offsetof(block_iq3_s, d), 0}},
    {STRATA_TYPE_IQ2_XXS, 1, {offsetof(block_iq2_xxs, d), 0}},
    {STRATA_TYPE_IQ2_XS, 1, {offsetof(block_iq2_xs, d), 0}},
    {STRATA_TYPE_IQ2_S, 1, {offsetof(block_iq2_s, d), 0}},
    {STRATA_TYPE_IQ1_S, 1, {offsetof(block_iq1_s, d), 0}},
    {STRATA_TYPE_IQ1_M, 0, {0, 0}}, /* f16 scale in the scales' top nibbles: scale_fixup */
    {STRATA_TYPE_MXFP4, 0, {0, 0}}, /* E8M0 exponent byte: scale_fixup */
};

/* The scales no fp16 field holds: IQ1_M's f16 spread over the top nibbles of its four u16 scale
 * words, MXFP4's exponent byte (kept to 2^(e-127) in [2^-9, 2^9], or 2^64 when extreme). */
static void scale_fixup(strata_type t, unsigned char *blk, float s, int extreme, test_rng *rng) {
    if (t == STRATA_TYPE_IQ1_M) {
        block_iq1_m *b = (block_iq1_m *)blk;
        const uint16_t h = st_f32_to_fp16(s);
        for (int k = 0; k < 4; k++) {
            uint16_t w;
            memcpy(&w, b->scales + 2 * k, 2);
            w = (uint16_t)((w & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12));
            memcpy(b->scales + 2 * k, &w, 2);
        }
    } else if (t == STRATA_TYPE_MXFP4) {
        ((block_mxfp4 *)blk)->e = (uint8_t)(extreme ? 191 : 118 + (int)(test_rng_next(rng) % 19));
    }
}

static void put_u16(unsigned char *p, uint16_t v) { memcpy(p, &v, 2); }

/* Fills a row of n weights: random bytes with finite fp16 scales, or random values for the
 * float types. fill_byte >= 0 puts that byte everywhere instead (saturation cases);
 * FILL_EXTREME keeps random bytes but sets every scale to the largest finite fp16. */
#define FILL_EXTREME (-2)
static void random_row(const dot_type *dt, int64_t n, test_rng *rng, unsigned char *row,
                       int fill_byte) {
    int64_t bytes = strata_row_bytes(dt->type, n);
    if (dt->type == STRATA_TYPE_F32 || dt->type == STRATA_TYPE_F16 || dt->type == STRATA_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float v = fill_byte >= 0 ? 1.0f : test_rng_float(rng);
            if (dt->type == STRATA_TYPE_F32) memcpy(row + 4 * i, &v, 4);
            else if (dt->type == STRATA_TYPE_F16) put_u16(row + 2 * i, st_f32_to_fp16(v));
            else put_u16(row + 2 * i, st_f32_to_bf16(v));
        }
        return;
    }
    for (int64_t i = 0; i < bytes; i++)
        row[i] = fill_byte >= 0 ? (unsigned char)fill_byte : (unsigned char)test_rng_next(rng);
    int64_t bb = strata_type_block_bytes(dt->type);
    for (int64_t b = 0; b < bytes / bb; b++) {
        const float s = fill_byte == FILL_EXTREME ? 65504.0f : fill_byte >= 0 ? 0.01f : 0.1f * test_rng_float(rng);
        for (int h = 0; h < dt->nhalf; h++) put_u16(row + b * bb + dt->half_off[h], st_f32_to_fp16(s));
        scale_fixup(dt->type, row + b * bb, s, fill_byte == FILL_EXTREME, rng);
    }
}

/* Quantizes x to the activation type of t (or copies f32) into act; dequantizes it back to xd. */
static void make_act(strata_type t, const float *x, int64_t n, void *act, float *xd) {
    strata_type at = strata_act_type(t);
    if (at == STRATA_TYPE_F32) {
        memcpy(act, x, (size_t)n * 4);
        memcpy(xd, x, (size_t)n * 4);
    } else if (at == STRATA_TYPE_Q8_0) {
        block_q8_0 *q = act;
        st_quantize_row_q8_0(x, q, n);
        for (int64_t i = 0; i < n; i++) xd[i] = st_fp16_to_f32(q[i / 32].d) * q[i / 32].qs[i % 32];
    } else {
        block_q8_K *q = act;
        st_quantize_row_q8_K(x, q, n);
        for (int64_t i = 0; i < n; i++) xd[i] = q[i / 256].d * q[i / 256].qs[i % 256];
    }
}

/* ---------------------------------------------------------------------------------------------
 * (a) scalar vs float64, (b) fast levels vs scalar, (c) vec_dot_f32 vs quantize + vec_dot
 * ------------------------------------------------------------------------------------------- */

#define MAX_N 8192

static _Alignas(64) unsigned char g_row[MAX_N * 4];
static _Alignas(64) unsigned char g_act[MAX_N * sizeof(float)]; /* f32 is the largest activation type */
static float g_x[MAX_N], g_xd[MAX_N], g_wd[MAX_N];

/* One row/activation pair: runs checks (a), (b), (c). */
static void check_case(const dot_type *dt, int64_t n, test_rng *rng, int fill_byte,
                       const char *what) {
    const char *tn = strata_type_name(dt->type);
    random_row(dt, n, rng, g_row, fill_byte);
    for (int64_t i = 0; i < n; i++) {
        if (fill_byte >= 0 || fill_byte == FILL_EXTREME) g_x[i] = (i % 3 == 2) ? -1.0f : 1.0f; /* +-127 */
        else g_x[i] = test_rng_float(rng) * (i % 5 == 0 ? 4.0f : 1.0f);
    }
    make_act(dt->type, g_x, n, g_act, g_xd);

    st_dequant_fn deq = st_dequant_get(dt->type);
    CHECK(deq != NULL, "%s: no dequantize function to build the reference", tn);
    if (!deq) return;
    deq(g_row, g_wd, n);
    double ref = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; i++) {
        ref += (double)g_wd[i] * (double)g_xd[i];
        mag += fabs((double)g_wd[i] * (double)g_xd[i]);
    }
    CHECK(isfinite(ref) && isfinite(mag), "%s %s n=%lld: reference not finite", tn, what, (long long)n);
    double tiny = 1e-30;

    /* (a) */
    st_vec_dot_fn scalar = st_vec_dot_at(dt->type, STRATA_ISA_SCALAR);
    CHECK(scalar != NULL, "%s: no scalar kernel", tn);
    if (!scalar) return;
    float s = NAN;
    scalar(n, &s, g_row, g_act);
    CHECK(fabs((double)s - ref) <= 1e-6 * mag + tiny,
          "%s %s n=%lld: scalar %.9g vs float64 %.9g (sum|wx| %.6g, rel err %.3g)", tn, what,
          (long long)n, s, ref, mag, fabs((double)s - ref) / (mag + tiny));

    /* (b) */
    strata_cpu_isa best = strata_cpu_isa_supported();
    for (int lvl = STRATA_ISA_AVX2; lvl <= STRATA_ISA_AVX512; lvl++) {
        if (lvl > (int)best) continue; /* reported once by the caller */
        st_vec_dot_fn fast = st_vec_dot_at(dt->type, (strata_cpu_isa)lvl);
        if (lvl == STRATA_ISA_AVX2)
            CHECK(fast != NULL, "%s: no avx2 kernel", tn);
        if (!fast) continue;
        float f = NAN;
        fast(n, &f, g_row, g_act);
        if (st_vec_dot_exact_blocks(dt->type)) /* one arithmetic at every level: the scalar kernel's bits */
            CHECK(memcmp(&f, &s, sizeof f) == 0, "%s %s n=%lld: %s %.9g not the scalar kernel's bits %.9g", tn, what,
                  (long long)n, strata_cpu_isa_name((strata_cpu_isa)lvl), f, s);
        CHECK(fabs((double)f - (double)s) <= 1e-4 * mag + tiny,
              "%s %s n=%lld: %s %.9g vs scalar %.9g (sum|wx| %.6g, rel err %.3g)", tn, what,
              (long long)n, strata_cpu_isa_name((strata_cpu_isa)lvl), f, s, mag,
              fabs((double)f - (double)s) / (mag + tiny));
    }

    /* (c) at the active (best) level */
    float via_q = NAN, via_f32 = NAN;
    strata_status st1 = strata_vec_dot(dt->type, g_row, g_act, n, &via_q);
    strata_status st2 = strata_vec_dot_f32(dt->type, g_row, g_x, n, &via_f32);
    CHECK(st1 == STRATA_OK && st2 == STRATA_OK, "%s n=%lld: status %d/%d: %s", tn, (long long)n,
          st1, st2, strata_last_error());
    CHECK(memcmp(&via_q, &via_f32, sizeof(float)) == 0,
          "%s %s n=%lld: vec_dot_f32 %.9g vs quantize + vec_dot %.9g", tn, what, (long long)n,
          via_f32, via_q);
}

static void test_kernels(void) {
    test_rng rng = {0x9e3779b97f4a7c15ULL};
    if ((int)strata_cpu_isa_supported() < STRATA_ISA_AVX512)
        SKIP("AVX-512 kernels not tested: this CPU lacks avx512 f/bw/vl/dq/vnni");
    if ((int)strata_cpu_isa_supported() < STRATA_ISA_AVX2)
        SKIP("AVX2 kernels not tested: this CPU lacks avx2/fma/f16c");
    for (size_t t = 0; t < ST_ARRAY_LEN(dot_types); t++) {
        const dot_type *dt = &dot_types[t];
        int64_t bs = strata_type_block_size(dt->type);
        const int64_t lens[] = {bs, 2 * bs, 7 * bs, 2048, 4096, 8192};
        for (size_t l = 0; l < ST_ARRAY_LEN(lens); l++)
            for (int rep = 0; rep < 3; rep++) check_case(dt, lens[l], &rng, -1, "random");
        /* saturation: every quant byte 0xff or 0x80 (largest magnitudes), activations +-127 */
        check_case(dt, 2 * bs, &rng, 0xff, "bytes 0xff");
        check_case(dt, 2 * bs, &rng, 0x80, "bytes 0x80");
        check_case(dt, 8 * bs > 64 ? 8 * bs : 64, &rng, 0x77, "bytes 0x77");
        check_case(dt, 4 * bs, &rng, 0x00, "all-zero blocks");
        if (dt->nhalf > 0 || dt->type == STRATA_TYPE_IQ1_M || dt->type == STRATA_TYPE_MXFP4)
            check_case(dt, 4 * bs, &rng, FILL_EXTREME, "largest scales");
    }
}

/* ---------------------------------------------------------------------------------------------
 * (d) ISA selection and CPU features
 * ------------------------------------------------------------------------------------------- */

/* 1 if /proc/cpuinfo's first "flags" line lists flag, 0 if not, -1 if unreadable. */
static int cpuinfo_has(const char *flag) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return -1;
    static char line[8192];
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0) continue;
        found = 0;
        size_t fl = strlen(flag);
        for (char *p = strstr(line, flag); p; p = strstr(p + 1, flag))
            if (p[-1] == ' ' && (p[fl] == ' ' || p[fl] == '\n' || p[fl] == '\0')) found = 1;
        break;
    }
    fclose(f);
    return found;
}

static void test_isa(void) {
    const st_cpu_features *f = st_cpu_get_features();
    CHECK(f == st_cpu_get_features(), "features probed once");
    const struct { const char *flag; int have; } flags[] = {
        {"avx2", f->avx2}, {"fma", f->fma}, {"f16c", f->f16c}, {"avx512f", f->avx512f},
        {"avx512bw", f->avx512bw}, {"avx512vl", f->avx512vl}, {"avx512dq", f->avx512dq},
        {"avx512_vnni", f->avx512vnni}, {"avx512_bf16", f->avx512bf16},
        {"amx_tile", f->amx_tile}, {"amx_int8", f->amx_int8}, {"amx_bf16", f->amx_bf16},
    };
    if (cpuinfo_has("fpu") < 0) {
        SKIP("/proc/cpuinfo unreadable: features not cross-checked");
    } else {
        for (size_t i = 0; i < ST_ARRAY_LEN(flags); i++)
            CHECK(flags[i].have == cpuinfo_has(flags[i].flag), "feature %s: cpuid %d, /proc/cpuinfo %d",
                  flags[i].flag, flags[i].have, cpuinfo_has(flags[i].flag));
    }

    strata_cpu_isa best = strata_cpu_isa_supported();
    int want = (f->avx2 && f->fma && f->f16c)
                   ? ((f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni)
                          ? STRATA_ISA_AVX512 : STRATA_ISA_AVX2)
                   : STRATA_ISA_SCALAR;
    CHECK((int)best == want, "supported %d, features say %d", (int)best, want);
    CHECK(strata_cpu_isa_active() == best, "default active level is the best (%d vs %d)",
          (int)strata_cpu_isa_active(), (int)best);

    for (int lvl = 0; lvl <= (int)best; lvl++) {
        CHECK(strata_cpu_isa_set((strata_cpu_isa)lvl) == STRATA_OK, "set %d: %s", lvl, strata_last_error());
        CHECK((int)strata_cpu_isa_active() == lvl, "active %d after set %d", (int)strata_cpu_isa_active(), lvl);
        /* the resolved kernel: that level's own, or a lower one */
        st_vec_dot_fn got = st_vec_dot_get(STRATA_TYPE_Q4_K);
        st_vec_dot_fn own = st_vec_dot_at(STRATA_TYPE_Q4_K, (strata_cpu_isa)lvl);
        CHECK(got != NULL && (own == NULL || got == own), "level %d: resolved q4_K kernel", lvl);
    }
    if ((int)best < STRATA_ISA_AVX512) {
        strata_cpu_isa before = strata_cpu_isa_active();
        strata_status st = strata_cpu_isa_set(STRATA_ISA_AVX512);
        CHECK(st == STRATA_ERR_UNSUPPORTED, "set avx512 on a CPU without it: %d", st);
        CHECK(strstr(strata_last_error(), "avx512") != NULL, "message names the level: '%s'", strata_last_error());
        CHECK(strata_cpu_isa_active() == before, "failed set leaves the level alone");
        CHECK(st_vec_dot_at(STRATA_TYPE_Q8_0, STRATA_ISA_AVX512) == NULL, "no avx512 table here");
    } else {
        SKIP("this CPU has every ISA level: UNSUPPORTED not exercised");
    }
    CHECK(strata_cpu_isa_set((strata_cpu_isa)7) == STRATA_ERR_INVALID_ARG, "set of a non-level");
    /* st_vec_dot_exact_blocks: the five types, not the others */
    CHECK(st_vec_dot_exact_blocks(STRATA_TYPE_Q4_K) && st_vec_dot_exact_blocks(STRATA_TYPE_Q6_K) &&
              st_vec_dot_exact_blocks(STRATA_TYPE_Q8_0) && st_vec_dot_exact_blocks(STRATA_TYPE_Q4_0) &&
              !st_vec_dot_exact_blocks(STRATA_TYPE_Q3_K) && !st_vec_dot_exact_blocks(STRATA_TYPE_IQ4_XS),
          "exact-block-sum kernels: the five types");
    CHECK(strata_cpu_isa_set(STRATA_ISA_BEST) == STRATA_OK && strata_cpu_isa_active() == best,
          "set BEST gives the supported level");

    CHECK(strcmp(strata_cpu_isa_name(STRATA_ISA_SCALAR), "scalar") == 0, "name scalar");
    CHECK(strcmp(strata_cpu_isa_name(STRATA_ISA_AVX2), "avx2") == 0, "name avx2");
    CHECK(strcmp(strata_cpu_isa_name(STRATA_ISA_AVX512), f->avx512vnni ? "avx512-vnni" : "avx512") == 0,
          "name avx512: %s", strata_cpu_isa_name(STRATA_ISA_AVX512));
    CHECK(strcmp(strata_cpu_isa_name((strata_cpu_isa)42), "unknown") == 0, "name of a non-level");
}

/* ---------------------------------------------------------------------------------------------
 * (e) argument errors and type queries
 * ------------------------------------------------------------------------------------------- */

static void test_args(void) {
    block_q8_0 w[2], x[2];
    memset(w, 0, sizeof w);
    memset(x, 0, sizeof x);
    float out = 0, xf[64] = {0};
    CHECK(strata_vec_dot(STRATA_TYPE_Q8_0, NULL, x, 32, &out) == STRATA_ERR_INVALID_ARG, "NULL w");
    CHECK(strstr(strata_last_error(), "weights") != NULL, "message: %s", strata_last_error());
    CHECK(strata_vec_dot(STRATA_TYPE_Q8_0, w, NULL, 32, &out) == STRATA_ERR_INVALID_ARG, "NULL x");
    CHECK(strata_vec_dot(STRATA_TYPE_Q8_0, w, x, 32, NULL) == STRATA_ERR_INVALID_ARG, "NULL out");
    CHECK(strata_vec_dot_f32(STRATA_TYPE_Q8_0, w, NULL, 32, &out) == STRATA_ERR_INVALID_ARG, "f32 NULL x");
    CHECK(strata_vec_dot(STRATA_TYPE_Q8_0, w, x, 33, &out) == STRATA_ERR_INVALID_ARG, "n not a multiple");
    CHECK(strstr(strata_last_error(), "33") != NULL, "message names n: %s", strata_last_error());
    CHECK(strata_vec_dot_f32(STRATA_TYPE_Q8_0, w, xf, 16, &out) == STRATA_ERR_INVALID_ARG, "f32 n not a multiple");
    CHECK(strata_vec_dot(STRATA_TYPE_Q8_0, w, x, -32, &out) == STRATA_ERR_INVALID_ARG, "n < 0");
    CHECK(strata_vec_dot(STRATA_TYPE_Q4_K, w, x, 32, &out) == STRATA_ERR_INVALID_ARG, "q4_K n=32");
    out = 5;
    CHECK(strata_vec_dot(STRATA_TYPE_Q8_0, w, x, 0, &out) == STRATA_OK && out == 0.0f, "n = 0 gives 0");
    CHECK(strata_vec_dot(STRATA_TYPE_Q8_0, w, x, 64, &out) == STRATA_OK && out == 0.0f, "zero blocks");

    const strata_type no_dot[] = {STRATA_TYPE_Q8_1, STRATA_TYPE_Q8_K, STRATA_TYPE_TQ1_0,
                                  STRATA_TYPE_TQ2_0, STRATA_TYPE_I8, STRATA_TYPE_F64};
    for (size_t i = 0; i < ST_ARRAY_LEN(no_dot); i++) {
        strata_type t = no_dot[i];
        CHECK(!strata_type_can_dot(t), "%s has no dot", strata_type_name(t));
        CHECK(strata_act_type(t) == STRATA_TYPE_COUNT, "%s act type", strata_type_name(t));
        int64_t bs = strata_type_block_size(t);
        strata_status st = strata_vec_dot(t, w, x, bs, &out);
        CHECK(st == STRATA_ERR_UNSUPPORTED, "%s: status %d", strata_type_name(t), st);
        CHECK(strstr(strata_last_error(), strata_type_name(t)) != NULL, "message names %s: %s",
              strata_type_name(t), strata_last_error());
        CHECK(strata_vec_dot_f32(t, w, xf, bs, &out) == STRATA_ERR_UNSUPPORTED, "%s f32", strata_type_name(t));
    }
    CHECK(strata_vec_dot((strata_type)4, w, x, 32, &out) == STRATA_ERR_INVALID_ARG, "id 4 is no type");
    CHECK(strata_vec_dot((strata_type)-1, w, x, 32, &out) == STRATA_ERR_INVALID_ARG, "id -1");
    CHECK(strata_vec_dot(STRATA_TYPE_COUNT, w, x, 32, &out) == STRATA_ERR_INVALID_ARG, "id COUNT");
    CHECK(!strata_type_can_dot((strata_type)4) && !strata_type_can_dot(STRATA_TYPE_COUNT), "can_dot of non-types");

    for (size_t t = 0; t < ST_ARRAY_LEN(dot_types); t++) {
        strata_type ty = dot_types[t].type;
        int64_t bs = strata_type_block_size(ty);
        strata_type at = strata_act_type(ty);
        CHECK(strata_type_can_dot(ty), "%s can dot", strata_type_name(ty));
        strata_type want = bs == 1 ? STRATA_TYPE_F32 : bs == 32 ? STRATA_TYPE_Q8_0 : STRATA_TYPE_Q8_K;
        CHECK(at == want, "%s: act type %s", strata_type_name(ty), strata_type_name(at));
    }
    CHECK(st_vec_dot_at(STRATA_TYPE_Q8_K, STRATA_ISA_SCALAR) == NULL, "no kernel for q8_K");
    CHECK(st_vec_dot_at(STRATA_TYPE_Q8_0, (strata_cpu_isa)5) == NULL, "no kernel at a non-level");
}

/* (d) the several-row kernels: bit-identical to the single-row kernel of the same level for every
 * row count, row length and activation stride (the prefill and grouped-expert paths rely on it). */
static void test_multi_rows_here(int *found, strata_cpu_isa isa);
static void test_multi_rows(void) {
    int found = 0;
    /* at every level the CPU has (the AVX2 and AVX-512 levels each have their own) */
    static const strata_cpu_isa lv[] = {STRATA_ISA_SCALAR, STRATA_ISA_AVX2, STRATA_ISA_AVX512};
    for (size_t k = 0; k < ST_ARRAY_LEN(lv); k++) {
        if ((int)lv[k] > (int)strata_cpu_isa_supported() || strata_cpu_isa_set(lv[k]) != STRATA_OK) continue;
        test_multi_rows_here(&found, lv[k]);
    }
    CHECK(strata_cpu_isa_set(STRATA_ISA_BEST) == STRATA_OK, "back to the best level");
    if (!found) SKIP("no several-row kernels at this CPU's ISA levels (AVX2 and AVX-512 have them)");
}

/* The types whose AVX2 kernels have a several-row form: offered wherever the AVX2 single-row
 * kernel is the one in use (the AVX2 level; the AVX-512 level resolves IQ2 / IQ1_S down to it). */
static int has_avx2_dotn(strata_type t) {
    return t == STRATA_TYPE_Q4_0 || t == STRATA_TYPE_Q4_K || t == STRATA_TYPE_Q5_K || t == STRATA_TYPE_Q6_K ||
           t == STRATA_TYPE_IQ2_XXS || t == STRATA_TYPE_IQ2_XS || t == STRATA_TYPE_IQ2_S || t == STRATA_TYPE_IQ1_S ||
           t == STRATA_TYPE_IQ1_M || t == STRATA_TYPE_MXFP4;
}

/* The same for the AVX-512 kernels: offered wherever the AVX-512 single-row kernel is in use. */
static int has_avx512_dotn(strata_type t) {
    return t == STRATA_TYPE_Q4_0 || t == STRATA_TYPE_Q4_K || t == STRATA_TYPE_Q5_K || t == STRATA_TYPE_Q6_K ||
           t == STRATA_TYPE_IQ1_M || t == STRATA_TYPE_MXFP4;
}

static void test_multi_rows_here(int *found, strata_cpu_isa isa) {
    const char *level = strata_cpu_isa_name(isa);
    test_rng rng = {777};
    static _Alignas(64) unsigned char acts[ST_DOT_MAX_COLS][MAX_N * 2];
    for (size_t ti = 0; ti < ST_ARRAY_LEN(dot_types); ti++) {
        const dot_type *dt = &dot_types[ti];
        st_vec_dot_n_fn dn = st_vec_dot_n_get(dt->type);
        if ((has_avx2_dotn(dt->type) && st_vec_dot_get(dt->type) == st_vec_dot_at(dt->type, STRATA_ISA_AVX2)) ||
            (has_avx512_dotn(dt->type) && st_vec_dot_get(dt->type) == st_vec_dot_at(dt->type, STRATA_ISA_AVX512)))
            CHECK(dn != NULL, "%s (%s): a several-row kernel", strata_type_name(dt->type), level);
        if (!dn) continue;
        (*found)++;
        st_vec_dot_fn d1 = st_vec_dot_get(dt->type);
        int same = 1;
        for (int rep = 0; rep < 40; rep++) {
            const int64_t n = strata_type_block_size(dt->type) * (1 + (int64_t)(test_rng_next(&rng) % 24));
            random_row(dt, n, &rng, g_row, -1);
            const size_t ab = (size_t)strata_row_bytes(strata_act_type(dt->type), n);
            for (int c = 0; c < ST_DOT_MAX_COLS; c++) {
                for (int64_t i = 0; i < n; i++) g_x[i] = 4.0f * test_rng_float(&rng);
                make_act(dt->type, g_x, n, acts[c], g_xd);
            }
            /* activation rows xs apart: contiguous (xs == ab) or an odd number of 4-byte words
             * between them (the blocks' float / f16 fields stay aligned, as every caller's are) */
            const size_t xs = ab + (rep % 2 ? 4 * (1 + 2 * (test_rng_next(&rng) % 7)) : 0);
            static _Alignas(64) unsigned char packed[ST_DOT_MAX_COLS * MAX_N * 2];
            for (int c = 0; c < ST_DOT_MAX_COLS; c++) memcpy(packed + (size_t)c * xs, acts[c], ab);
            for (int nc = 1; nc <= ST_DOT_MAX_COLS; nc++) {
                float got[ST_DOT_MAX_COLS], want;
                dn(n, got, g_row, packed, xs, nc);
                for (int c = 0; c < nc; c++) {
                    d1(n, &want, g_row, acts[c]);
                    same &= memcmp(&want, &got[c], sizeof want) == 0;
                }
            }
        }
        CHECK(same, "%s (%s): several-row kernel bit-identical to the single-row one", strata_type_name(dt->type),
              level);
    }
}

/* (e) Q8_0 against prepared activation rows (the prompt matmul's path on AVX-512): bit-identical
 * to the single-row kernel for every row length (whole and partial 16-block steps, a lone last
 * block), row count and stride; the rows' last bytes end a buffer so a read past them would
 * be caught under ASan. */
static void test_q8_0_prepared(void) {
    st_q8_0_prep_fn prep;
    st_q8_0_dotp_fn dotp;
    if (!st_q8_0_prepared_get(&prep, &dotp)) {
        SKIP("no prepared-row Q8_0 kernel at this CPU's ISA level (AVX-512 VNNI has it)");
        return;
    }
    const dot_type *dt = NULL;
    for (size_t ti = 0; ti < ST_ARRAY_LEN(dot_types); ti++)
        if (dot_types[ti].type == STRATA_TYPE_Q8_0) dt = &dot_types[ti];
    if (!dt) return;
    st_vec_dot_fn d1 = st_vec_dot_get(STRATA_TYPE_Q8_0);
    test_rng rng = {4242};
    static _Alignas(64) unsigned char acts[ST_DOT_MAX_COLS][MAX_N * 2];
    int same = 1, cases = 0;
    for (int rep = 0; rep < 60; rep++) {
        const int64_t n = 32 * (1 + (int64_t)(test_rng_next(&rng) % 70)); /* 1..70 blocks */
        random_row(dt, n, &rng, g_row, -1);
        const size_t xs = (size_t)n + (size_t)(test_rng_next(&rng) % 3) * 64, ds = st_q8_0_dxp_len(n) + 16 * (rep % 2);
        uint8_t *xu = malloc(xs * ST_DOT_MAX_COLS);
        float *dxp = malloc(sizeof(float) * ds * ST_DOT_MAX_COLS);
        if (!xu || !dxp) { free(xu); free(dxp); CHECK(0, "out of memory"); return; }
        for (int c = 0; c < ST_DOT_MAX_COLS; c++) {
            for (int64_t i = 0; i < n; i++) g_x[i] = 4.0f * test_rng_float(&rng);
            make_act(STRATA_TYPE_Q8_0, g_x, n, acts[c], g_xd);
            prep(acts[c], n, xu + (size_t)c * xs, dxp + (size_t)c * ds);
        }
        for (int nc = 1; nc <= ST_DOT_MAX_COLS; nc++) {
            /* the last nc rows, so the last row's bytes end the buffer when xs == n */
            const int c0 = ST_DOT_MAX_COLS - nc;
            float got[ST_DOT_MAX_COLS], want;
            dotp(n, got, g_row, xu + (size_t)c0 * xs, xs, dxp + (size_t)c0 * ds, ds, nc);
            for (int c = 0; c < nc; c++) {
                d1(n, &want, g_row, acts[c0 + c]);
                same &= memcmp(&want, &got[c], sizeof want) == 0;
                cases++;
            }
        }
        free(xu);
        free(dxp);
    }
    CHECK(same, "q8_0 prepared rows bit-identical to the single-row kernel (%d cases)", cases);
}

/* (f) the float rows kernels (the CPU attention's scores): each row bit-identical to the single
 * row kernel, for lengths with and without a tail, strided rows. */
static void test_float_rows(void) {
    const strata_type types[] = {STRATA_TYPE_F32, STRATA_TYPE_F16, STRATA_TYPE_BF16};
    test_rng rng = {9090};
    int found = 0;
    for (size_t ti = 0; ti < ST_ARRAY_LEN(types); ti++) {
        st_vec_dot_rows_fn dr = st_vec_dot_rows_get(types[ti]);
        if (!dr) continue;
        found++;
        st_vec_dot_fn d1 = st_vec_dot_get(types[ti]);
        const size_t es = types[ti] == STRATA_TYPE_F32 ? 4 : 2;
        int same = 1;
        for (int rep = 0; rep < 30; rep++) {
            const int64_t n = 1 + (int64_t)(test_rng_next(&rng) % 300), rows = 1 + (int64_t)(test_rng_next(&rng) % 40);
            const size_t stride = (size_t)n + test_rng_next(&rng) % 50; /* elements */
            unsigned char *w = malloc(stride * (size_t)rows * es);
            float *x = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)rows);
            if (!w || !x || !got) { free(w); free(x); free(got); CHECK(0, "out of memory"); return; }
            for (size_t i = 0; i < stride * (size_t)rows; i++) {
                const float v = test_rng_float(&rng);
                if (es == 4) memcpy(w + 4 * i, &v, 4);
                else {
                    const uint16_t h = types[ti] == STRATA_TYPE_F16 ? st_f32_to_fp16(v) : st_f32_to_bf16(v);
                    memcpy(w + 2 * i, &h, 2);
                }
            }
            for (int64_t i = 0; i < n; i++) x[i] = test_rng_float(&rng);
            dr(n, got, w, stride, rows, x);
            for (int64_t r = 0; r < rows; r++) {
                float want;
                d1(n, &want, w + (size_t)r * stride * es, x);
                same &= memcmp(&want, &got[r], sizeof want) == 0;
            }
            free(w); free(x); free(got);
        }
        CHECK(same, "%s: rows kernel bit-identical to the single-row one", strata_type_name(types[ti]));
    }
    if (!found) SKIP("no rows kernels at this CPU's ISA level (AVX-512 has them)");
}

int main(void) {
    test_isa();
    test_multi_rows();
    test_q8_0_prepared();
    test_float_rows();
    test_args();
    test_kernels();
    /* again at the scalar level: the public path through the fallback table */
    if (strata_cpu_isa_set(STRATA_ISA_SCALAR) == STRATA_OK) {
        test_rng rng = {12345};
        for (size_t t = 0; t < ST_ARRAY_LEN(dot_types); t++)
            check_case(&dot_types[t], 7 * strata_type_block_size(dot_types[t].type), &rng, -1, "scalar level");
        strata_cpu_isa_set(STRATA_ISA_BEST);
    }
    return test_report();
}
