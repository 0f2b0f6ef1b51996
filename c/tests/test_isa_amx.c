/* test_isa_amx.c - the AMX tile kernels (dot_amx.c) against the AVX-512 single-row kernels:
 * every output bit-identical, for Q4_0, Q4_K, Q5_K, Q6_K and Q8_0, weight-row counts 1..16, activation-row counts
 * across the 16-row tiles and the 64-row groups, row lengths across the 16-super-block chunks,
 * with sentinels around the written outputs; then the CPU matmul and the grouped-expert step
 * (ops.c, ops_moe.c) with the tiles against token-by-token calls, and the AMX switch
 * (strata_cpu_amx_set/active/supported).
 *
 * Two copies of the kernel run: one built with ST_AMX_EMULATE (the tile instructions as plain C,
 * so the unpacking, the tile layout and the arithmetic are checked on any AVX-512 CPU, CI
 * included) and, where the CPU and OS have AMX, the real one through the dispatcher. Without
 * AVX-512 both are skipped; without AMX the real one is. */
#include "test.h"

#include "dot.h"
#include "ops.h"
#include "quant.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* the emulated copy of dot_amx.c (c/tests build rule) */
void st_dot_register_amx_emulated(st_vec_dot_tile_fn *table);

#define MAX_SB 20                  /* longest row: 20 super-blocks (two chunks) */
#define MAX_N (MAX_SB * QK_K)
#define MAX_COLS 140

static test_rng g_rng = {0x9e3779b97f4a7c15ULL}; /* the data of every check below */
static uint64_t rng_next(void) { return test_rng_next(&g_rng); }
static float rng_float(void) { return test_rng_float(&g_rng); }

/* Random rows of a tile type: random bytes, finite fp16 d (Q4_K / Q5_K blocks open with d, dmin;
 * Q8_0 / Q4_0 with d; Q6_K's d closes the block). */
static void random_rows(strata_type type, int64_t n, int rows, unsigned char *w) {
    const size_t rb = (size_t)strata_row_bytes(type, n), bs = (size_t)strata_type_block_bytes(type);
    for (size_t i = 0; i < rb * (size_t)rows; i++) w[i] = (unsigned char)rng_next();
    for (size_t b = 0; b < rb * (size_t)rows; b += bs) {
        const uint16_t d = st_f32_to_fp16(0.01f * rng_float()), dm = st_f32_to_fp16(0.01f * rng_float());
        if (type == STRATA_TYPE_Q6_K) { /* d closes the block */
            memcpy(w + b + offsetof(block_q6_K, d), &d, 2);
            continue;
        }
        memcpy(w + b, &d, 2);
        if (type != STRATA_TYPE_Q8_0 && type != STRATA_TYPE_Q4_0) memcpy(w + b + 2, &dm, 2);
    }
}

/* n floats as the activation type of weight type wt. */
static void quantize_act(strata_type wt, const float *x, int64_t n, void *out) { /* q8_0 or q8_K */
    if (strata_act_type(wt) == STRATA_TYPE_Q8_0) st_quantize_row_q8_0(x, (block_q8_0 *)out, n);
    else st_quantize_row_q8_K(x, (block_q8_K *)out, n);
}

static _Alignas(64) unsigned char g_w[16 * MAX_SB * 8 * sizeof(block_q8_0)]; /* the largest row of 256 weights: Q8_0 272 bytes */
static _Alignas(64) unsigned char g_x[MAX_COLS * MAX_SB * sizeof(block_q8_K)];
static float g_f[MAX_N];
static float g_out[MAX_COLS * 20 + 64];

/* One kernel against the single-row kernel on every shape; returns the number of mismatches. */
static int check_kernel(const char *who, strata_type type, st_vec_dot_tile_fn tile) {
    static const int64_t sbs[] = {1, 3, 8, 16, 17, 20}; /* 256-weight units (Q8_0: 8 blocks each) */
    static const int nrs[] = {1, 5, 15, 16};
    static const int64_t ncs[] = {1, 2, 15, 16, 17, 64, 65, 140};
    const st_vec_dot_fn one = st_vec_dot_at(type, STRATA_ISA_AVX512);
    int bad = 0, stray = 0, cases = 0;
    for (size_t a = 0; a < ST_ARRAY_LEN(sbs); a++) {
        const int64_t n = sbs[a] * QK_K;
        const size_t rb = (size_t)strata_row_bytes(type, n), xb = (size_t)strata_row_bytes(strata_act_type(type), n);
        random_rows(type, n, 16, g_w);
        for (int c = 0; c < MAX_COLS; c++) {
            const float scale = c % 7 == 3 ? 100.0f : 1.0f; /* some rows with large values */
            for (int64_t i = 0; i < n; i++) g_f[i] = scale * rng_float();
            quantize_act(type, g_f, n, g_x + (size_t)c * xb);
        }
        for (size_t b = 0; b < ST_ARRAY_LEN(nrs); b++)
            for (size_t k = 0; k < ST_ARRAY_LEN(ncs); k++) {
                const int nr = nrs[b];
                const int64_t nc = ncs[k];
                const size_t ldo = 20; /* outputs 20 apart: lanes nr..19 are sentinels */
                for (size_t i = 0; i < ST_ARRAY_LEN(g_out); i++) g_out[i] = -7.25f;
                tile(n, g_out, ldo, g_w, rb, nr, g_x, xb, nc);
                for (int64_t c = 0; c < nc; c++)
                    for (int r = 0; r < (int)ldo; r++) {
                        const float got = g_out[(size_t)c * ldo + (size_t)r];
                        if (r >= nr) { stray += got != -7.25f; continue; }
                        float want;
                        one(n, &want, g_w + (size_t)r * rb, g_x + (size_t)c * xb);
                        if (memcmp(&want, &got, sizeof want) != 0) {
                            if (bad < 5)
                                fprintf(stderr, "  %s %s n=%lld nr=%d nc=%lld: [%lld][%d] %.9g != %.9g\n", who,
                                        strata_type_name(type), (long long)n, nr, (long long)nc, (long long)c, r,
                                        (double)got, (double)want);
                            bad++;
                        }
                    }
                for (size_t i = (size_t)nc * ldo; i < ST_ARRAY_LEN(g_out); i++) stray += g_out[i] != -7.25f;
                cases++;
            }
    }
    CHECK(bad == 0, "%s %s: %d of the outputs of %d shapes differ from the AVX-512 single-row kernel", who,
          strata_type_name(type), bad, cases);
    CHECK(stray == 0, "%s %s: %d writes outside the outputs", who, strata_type_name(type), stray);
    return bad;
}

/* The matmul and the expert step with the dispatcher's tiles against token-by-token calls, for
 * T tokens of weight type ty. */
static void check_ops(strata_type ty, int64_t T) {
    const int64_t n_embd = 512, n_ff = 768;
    const int32_t n_exp = 4, k = 2;
    const size_t rb_e = (size_t)strata_row_bytes(ty, n_embd), rb_f = (size_t)strata_row_bytes(ty, n_ff);
    unsigned char *gate = malloc(rb_e * (size_t)(n_ff * n_exp)), *up = malloc(rb_e * (size_t)(n_ff * n_exp));
    unsigned char *down = malloc(rb_f * (size_t)(n_embd * n_exp));
    float *x = malloc(sizeof(float) * (size_t)(T * n_embd)), *y_all = malloc(sizeof(float) * (size_t)(T * n_ff));
    float *y_one = malloc(sizeof(float) * (size_t)(T * n_ff));
    float *o_all = malloc(sizeof(float) * (size_t)(T * n_embd)), *o_one = malloc(sizeof(float) * (size_t)(T * n_embd));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(T * k));
    float *wts = malloc(sizeof(float) * (size_t)(T * k));
    size_t wsz = st_matmul_wsize(n_embd, T), msz = st_moe_wsize(T, k, n_exp, n_embd, n_ff);
    void *ws = malloc(wsz > msz ? wsz : msz);
    st_threadpool *tp = NULL;
    if (!gate || !up || !down || !x || !y_all || !y_one || !o_all || !o_one || !ids || !wts || !ws ||
        st_threadpool_create(3, &tp) != STRATA_OK) {
        CHECK(0, "allocations");
        goto done;
    }
    for (int e = 0; e < n_exp; e++) {
        random_rows(ty, n_embd, (int)n_ff, gate + rb_e * (size_t)(n_ff * e));
        random_rows(ty, n_embd, (int)n_ff, up + rb_e * (size_t)(n_ff * e));
        random_rows(ty, n_ff, (int)n_embd, down + rb_f * (size_t)(n_embd * e));
    }
    for (int64_t i = 0; i < T * n_embd; i++) x[i] = rng_float();
    for (int64_t t = 0; t < T; t++) { /* expert 0 for most tokens (a tile's worth), 3 for a few */
        ids[t * k] = t % 9 == 0 ? 3 : 0;
        ids[t * k + 1] = 1 + (int32_t)(t % 2);
        wts[t * k] = 0.75f, wts[t * k + 1] = 0.25f;
    }
    st_tensor wt;
    memset(&wt, 0, sizeof wt);
    wt.type = ty, wt.ne[0] = n_embd, wt.ne[1] = n_ff, wt.row_bytes = rb_e, wt.data = gate;
    st_matmul(tp, &wt, x, T, y_all, ws);
    for (int64_t t = 0; t < T; t++) st_matmul(tp, &wt, x + t * n_embd, 1, y_one + t * n_ff, ws);
    CHECK(!memcmp(y_all, y_one, sizeof(float) * (size_t)(T * n_ff)), "%s matmul of %lld tokens bit-identical to one at a time",
          strata_type_name(ty), (long long)T);
    st_expert ex[4] = {0};
    memset(ex, 0, sizeof ex);
    for (int e = 0; e < n_exp; e++) {
        st_tensor g = wt;
        g.data = gate + rb_e * (size_t)(n_ff * e);
        ex[e].gate = g;
        g.data = up + rb_e * (size_t)(n_ff * e);
        ex[e].up = g;
        st_tensor d = g;
        d.ne[0] = n_ff, d.ne[1] = n_embd, d.row_bytes = rb_f, d.data = down + rb_f * (size_t)(n_embd * e);
        ex[e].down = d;
    }
    st_moe_ffn(tp, ex, n_exp, x, T, ids, wts, k, o_all, ws);
    for (int64_t t = 0; t < T; t++)
        st_moe_ffn(tp, ex, n_exp, x + t * n_embd, 1, ids + t * k, wts + t * k, k, o_one + t * n_embd, ws);
    CHECK(!memcmp(o_all, o_one, sizeof(float) * (size_t)(T * n_embd)),
          "%s expert step of %lld tokens bit-identical to one at a time", strata_type_name(ty), (long long)T);
done:
    if (tp) st_threadpool_free(tp);
    free(gate), free(up), free(down), free(x), free(y_all), free(y_one), free(o_all), free(o_one);
    free(ids), free(wts), free(ws);
}

int main(void) {
    const int avx512 = strata_cpu_isa_supported() >= STRATA_ISA_AVX512;
    if (!avx512) {
        CHECK(st_vec_dot_tile_get(STRATA_TYPE_Q4_K) == NULL, "no tile kernel without AVX-512");
        SKIP("no AVX-512 here: the tile kernels (emulated and real) are not exercised");
        return test_report();
    }
    /* the emulated tiles: every shape */
    st_vec_dot_tile_fn emu[STRATA_TYPE_COUNT];
    memset(emu, 0, sizeof emu);
    st_dot_register_amx_emulated(emu);
    check_kernel("emulated", STRATA_TYPE_Q4_K, emu[STRATA_TYPE_Q4_K]);
    check_kernel("emulated", STRATA_TYPE_Q5_K, emu[STRATA_TYPE_Q5_K]);
    check_kernel("emulated", STRATA_TYPE_Q8_0, emu[STRATA_TYPE_Q8_0]);
    check_kernel("emulated", STRATA_TYPE_Q6_K, emu[STRATA_TYPE_Q6_K]);
    check_kernel("emulated", STRATA_TYPE_Q4_0, emu[STRATA_TYPE_Q4_0]);
    CHECK(emu[STRATA_TYPE_Q5_0] == NULL && emu[STRATA_TYPE_Q3_K] == NULL, "tiles only for Q4_0, Q4_K, Q5_K, Q6_K and Q8_0");

    /* the switch */
    if (!strata_cpu_amx_supported()) {
        CHECK(strata_cpu_amx_set(1) == STRATA_ERR_UNSUPPORTED, "enabling AMX where there is none is refused");
        CHECK(!strata_cpu_amx_active() && st_vec_dot_tile_get(STRATA_TYPE_Q4_K) == NULL, "no AMX: no tile kernel");
        CHECK(strata_cpu_amx_set(0) == STRATA_OK, "disabling is always allowed");
        SKIP("this CPU or OS has no AMX: the real tile kernels are not exercised");
        check_ops(STRATA_TYPE_Q4_K, 40); /* still: the several-row paths against one at a time */
        check_ops(STRATA_TYPE_Q8_0, 5);
        return test_report();
    }
    CHECK(strata_cpu_amx_active(), "AMX active by default");
    st_vec_dot_tile_fn q4 = st_vec_dot_tile_get(STRATA_TYPE_Q4_K), q5 = st_vec_dot_tile_get(STRATA_TYPE_Q5_K);
    st_vec_dot_tile_fn q8 = st_vec_dot_tile_get(STRATA_TYPE_Q8_0), q6 = st_vec_dot_tile_get(STRATA_TYPE_Q6_K);
    st_vec_dot_tile_fn q40 = st_vec_dot_tile_get(STRATA_TYPE_Q4_0);
    CHECK(q4 && q5 && q8 && q6 && q40 && !st_vec_dot_tile_get(STRATA_TYPE_Q5_0),
          "tile kernels handed out for Q4_0, Q4_K, Q5_K, Q6_K and Q8_0 only");
    if (q4) check_kernel("AMX", STRATA_TYPE_Q4_K, q4);
    if (q5) check_kernel("AMX", STRATA_TYPE_Q5_K, q5);
    if (q8) check_kernel("AMX", STRATA_TYPE_Q8_0, q8);
    if (q6) check_kernel("AMX", STRATA_TYPE_Q6_K, q6);
    if (q40) check_kernel("AMX", STRATA_TYPE_Q4_0, q40);
    check_ops(STRATA_TYPE_Q4_K, 40); /* tiles for the experts with 8+ pairs */
    check_ops(STRATA_TYPE_Q8_0, 5);  /* tiles from 4 rows (no several-row kernel) */
    check_ops(STRATA_TYPE_Q8_0, 40);
    check_ops(STRATA_TYPE_Q6_K, 40);
    check_ops(STRATA_TYPE_Q4_0, 5);
    CHECK(strata_cpu_amx_set(0) == STRATA_OK && !strata_cpu_amx_active() && !st_vec_dot_tile_get(STRATA_TYPE_Q4_K),
          "AMX off: no tile kernel");
    CHECK(strata_cpu_amx_set(1) == STRATA_OK && strata_cpu_isa_set(STRATA_ISA_AVX2) == STRATA_OK &&
              !strata_cpu_amx_active() && !st_vec_dot_tile_get(STRATA_TYPE_Q4_K),
          "the AVX2 level: no tile kernel (the tiles give the AVX-512 level's bits)");
    strata_cpu_isa_set(STRATA_ISA_BEST);
    return test_report();
}
