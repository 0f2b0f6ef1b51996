/* test_cuda_ops.c - the GPU per-token ops of cuda_ops.h against the CPU ops of ops.h on random
 * inputs (never zeros): RMSNorm (whole rows, per-head q/k norm inside a fused qkv row, OLMoE's
 * whole-projection norm, in place and out of place, with and without weight, lengths that are not
 * multiples of a warp), RoPE (NEOX and normal, partial n_rot, linear and YaRN scaling, positions
 * from a device array or pos0 + t, strided rows), and the elementwise add / bias / SwiGLU / scale.
 * Each case prints its shape, NMSE, max abs error and how many outputs equal the CPU's bit for bit;
 * bounds: NMSE <= 1e-7, no NaN, guard words after every output unchanged (and, for strided
 * outputs, every float between the rows unchanged); add, bias and scale must be bit-exact.
 * Argument errors are checked without a device; the GPU cases skip, saying why, where no GPU is
 * usable. */
#include "strata.h"
#include "test.h"

#ifdef STRATA_HAVE_CUDA
#include "cuda_backend.h"
#include "cuda_mmv.h"
#include "cuda_ops.h"
#include "ops.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define GUARD 64
#define SENTINEL 0xA5A5A5A5u
#define NMSE_F32 1e-7

static test_rng rng = {0xC0FFEE1234567ULL};

static void fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) {
        float v = test_rng_float(&rng) * scale;
        x[i] = v != 0.0f ? v : 0.5f * scale;
    }
}

/* ---- device buffers with guard words -------------------------------------------------------- */

/* A device buffer of n floats + GUARD sentinel words; the first n hold h (or sentinels if NULL). */
static float *dev_buf(const float *h, int64_t n) {
    void *d = NULL;
    if (st_cuda_malloc(&d, (size_t)(n + GUARD) * sizeof(float)) != STRATA_OK) return NULL;
    if (st_cuda_memset(d, 0xA5, (size_t)(n + GUARD) * sizeof(float)) != STRATA_OK ||
        (h && st_cuda_memcpy_h2d(d, h, (size_t)n * sizeof(float)) != STRATA_OK)) {
        st_cuda_free(d);
        return NULL;
    }
    return (float *)d;
}

/* Copies the n floats back into h and returns how many guard words after them changed (-1 on a
 * copy error). Synchronizes first, so errors inside kernels surface here. */
static int dev_fetch(float *h, const float *d, int64_t n) {
    uint32_t *tmp = malloc((size_t)(n + GUARD) * sizeof(float));
    if (!tmp) return -1;
    if (st_cuda_synchronize() != STRATA_OK ||
        st_cuda_memcpy_d2h(tmp, d, (size_t)(n + GUARD) * sizeof(float)) != STRATA_OK) {
        free(tmp);
        return -1;
    }
    memcpy(h, tmp, (size_t)n * sizeof(float));
    int bad = 0;
    for (int64_t i = n; i < n + GUARD; i++) bad += tmp[i] != SENTINEL;
    free(tmp);
    return bad;
}

/* ---- comparison ----------------------------------------------------------------------------- */

typedef struct {
    double nmse, max_err;
    int64_t exact, nans, n;
} cmp_t;

static cmp_t compare(const float *got, const float *ref, int64_t n) {
    cmp_t c = {0, 0, 0, 0, n};
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(got[i])) { c.nans++; continue; }
        const double e = (double)got[i] - (double)ref[i];
        num += e * e;
        den += (double)ref[i] * (double)ref[i];
        if (fabs(e) > c.max_err) c.max_err = fabs(e);
        if (memcmp(&got[i], &ref[i], 4) == 0) c.exact++;
    }
    c.nmse = den > 0 ? num / den : num;
    return c;
}

/* Prints one case and counts its checks. guard_bad: changed guard words (or -1: fetch failed). */
static void report(const char *op, const char *shape, cmp_t c, int guard_bad, int need_exact) {
    const int ok = guard_bad == 0 && c.nans == 0 && c.nmse <= NMSE_F32 && (!need_exact || c.exact == c.n);
    printf("%-8s %-58s n=%-8lld nmse=%.2e max=%.2e exact=%lld/%lld guard=%d %s\n", op, shape,
           (long long)c.n, c.nmse, c.max_err, (long long)c.exact, (long long)c.n, guard_bad,
           ok ? "ok" : "FAIL");
    CHECK(guard_bad == 0, "%s %s: %d guard words changed (-1: fetch failed: %s)", op, shape,
          guard_bad, strata_last_error());
    CHECK(c.nans == 0, "%s %s: %lld NaN", op, shape, (long long)c.nans);
    CHECK(c.nmse <= NMSE_F32, "%s %s: nmse %.3e > %.1e", op, shape, c.nmse, NMSE_F32);
    if (need_exact)
        CHECK(c.exact == c.n, "%s %s: %lld of %lld not bit-exact", op, shape,
              (long long)(c.n - c.exact), (long long)c.n);
}

/* ---- RMSNorm -------------------------------------------------------------------------------- */

/* T tokens, rows of n_sub x n floats starting at float offset off inside rows of ldx floats;
 * in place (ldy ignored) or into a separate buffer of row stride ldy. Every float of the input
 * buffer outside the normalized slices must stay as it was. */
static void rms_case(const char *what, int64_t n, int64_t n_sub, int64_t T, int64_t ldx, int64_t off,
                     int in_place, int64_t ldy, int with_w, float eps) {
    char shape[160];
    snprintf(shape, sizeof shape, "%s n=%lld sub=%lld T=%lld ldx=%lld%s%s eps=%g", what,
             (long long)n, (long long)n_sub, (long long)T, (long long)ldx,
             in_place ? " in-place" : "", with_w ? "" : " no-w", (double)eps);
    const int64_t nx = T * ldx, ny = in_place ? nx : T * ldy;
    float *x = malloc(sizeof(float) * (size_t)nx), *w = malloc(sizeof(float) * (size_t)n);
    float *ref = malloc(sizeof(float) * (size_t)ny), *got = malloc(sizeof(float) * (size_t)ny);
    fill(x, nx, 3.0f);
    fill(w, n, 2.0f);
    if (in_place) memcpy(ref, x, sizeof(float) * (size_t)nx);
    else for (int64_t i = 0; i < ny; i++) { uint32_t s = SENTINEL; memcpy(&ref[i], &s, 4); }
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < n_sub; h++)
            st_rmsnorm((in_place ? ref + t * ldx + off : ref + t * ldy) + h * n, x + t * ldx + off + h * n,
                       with_w ? w : NULL, n, eps);
    float *dx = dev_buf(x, nx), *dw = dev_buf(w, n), *dy = in_place ? dx : dev_buf(NULL, ny);
    CHECK(dx && dw && dy, "%s: device buffers: %s", shape, strata_last_error());
    if (dx && dw && dy) {
        strata_status st = st_cuda_rmsnorm(in_place ? dx + off : dy, in_place ? ldx : ldy, dx + off, ldx,
                                           with_w ? dw : NULL, n, n_sub, T, eps, NULL);
        CHECK(st == STRATA_OK, "%s: %s", shape, strata_last_error());
        int g = dev_fetch(got, dy, ny);
        report("rmsnorm", shape, compare(got, ref, ny), g, 0);
    }
    st_cuda_free(dx);
    st_cuda_free(dw);
    if (!in_place) st_cuda_free(dy);
    free(x); free(w); free(ref); free(got);
}

static void test_rmsnorm(void) {
    static const int64_t lens[] = {2048, 4096, 1000, 7, 257, 256, 1, 33, 8191}; /* 8191: two passes */
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (int64_t T = 1; T <= 8; T += 3)
            rms_case("rows", lens[i], 1, T, lens[i], 0, 0, lens[i], 1, 1e-6f);
    rms_case("rows", 2048, 1, 5, 2048, 0, 1, 0, 0, 1e-5f);
    rms_case("rows", 4096, 1, 512, 4096, 0, 0, 4096, 1, 1e-5f);                 /* prefill */
    /* Qwen3 per-head q and k norm inside fused qkv rows (32 + 4 + 4 heads of 128), in place */
    rms_case("qwen3 q-norm in qkv", 128, 32, 5, 40 * 128, 0, 1, 0, 1, 1e-6f);
    rms_case("qwen3 k-norm in qkv", 128, 4, 5, 40 * 128, 32 * 128, 1, 0, 1, 1e-6f);
    rms_case("qwen3 q-norm prefill", 128, 32, 512, 32 * 128, 0, 1, 0, 1, 1e-6f);
    rms_case("hd64 heads", 64, 16, 3, 16 * 64 + 9, 0, 1, 0, 1, 1e-6f);
    /* OLMoE whole-projection norm (2048 of a 3 x 2048 qkv row) into a compact buffer */
    rms_case("olmoe q-norm", 2048, 1, 4, 3 * 2048, 0, 0, 2048, 1, 1e-5f);
    rms_case("olmoe k-norm", 2048, 1, 4, 3 * 2048, 2048, 0, 2048 + 3, 1, 1e-5f);
}

/* ---- RoPE ----------------------------------------------------------------------------------- */

static void rope_case(const char *what, st_rope_params cp, int64_t hd, int64_t n_head, int64_t T,
                      int64_t ldx, const int32_t *pos_list, int64_t pos0) {
    char shape[200];
    snprintf(shape, sizeof shape, "%s %s rot=%d/%lld h=%lld T=%lld base=%g fs=%g ext=%g af=%g %s",
             what, cp.style == ST_ROPE_NEOX ? "neox" : "norm", (int)cp.n_rot, (long long)hd,
             (long long)n_head, (long long)T, (double)cp.freq_base, (double)cp.freq_scale,
             (double)cp.ext_factor, (double)cp.attn_factor, pos_list ? "pos[]" : "pos0+t");
    const int64_t nx = T * ldx;
    float *x = malloc(sizeof(float) * (size_t)nx), *ref = malloc(sizeof(float) * (size_t)nx);
    float *got = malloc(sizeof(float) * (size_t)nx), *cs = malloc(sizeof(float) * (size_t)cp.n_rot);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T);
    fill(x, nx, 2.0f);
    memcpy(ref, x, sizeof(float) * (size_t)nx);
    for (int64_t t = 0; t < T; t++) {
        pos[t] = pos_list ? pos_list[t] : (int32_t)(pos0 + t);
        st_rope_cache(&cp, pos[t], cs);
        st_rope_apply(&cp, cs, ref + t * ldx, n_head, hd);
    }
    st_cuda_rope_params gp = {cp.style == ST_ROPE_NEOX, cp.n_rot, cp.freq_base, cp.freq_scale,
                              cp.ext_factor, cp.attn_factor, cp.beta_fast, cp.beta_slow, cp.n_ctx_orig, cp.no_trunc};
    CHECK(st_cuda_rope_supports(&gp, hd), "%s: not supported", shape);
    float *dx = dev_buf(x, nx);
    void *dpos = NULL;
    if (pos_list) {
        st_cuda_malloc(&dpos, sizeof(int32_t) * (size_t)T);
        st_cuda_memcpy_h2d(dpos, pos, sizeof(int32_t) * (size_t)T);
    }
    CHECK(dx && (!pos_list || dpos), "%s: device buffers: %s", shape, strata_last_error());
    if (dx && (!pos_list || dpos)) {
        strata_status st = st_cuda_rope(&gp, dx, ldx, n_head, hd, T, (const int32_t *)dpos, pos0, NULL);
        CHECK(st == STRATA_OK, "%s: %s", shape, strata_last_error());
        int g = dev_fetch(got, dx, nx);
        report("rope", shape, compare(got, ref, nx), g, 0);
    }
    st_cuda_free(dx);
    st_cuda_free(dpos);
    free(x); free(ref); free(got); free(cs); free(pos);
}

static st_rope_params rp(st_rope_style style, int n_rot, float base) {
    st_rope_params p = {style, n_rot, base, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, 4096, 0};
    return p;
}

static void test_rope(void) {
    int32_t far[8];
    for (int i = 0; i < 8; i++) far[i] = (int32_t)(test_rng_next(&rng) % 16384);
    int32_t yarn_pos[6] = {16000, 16001, 16002, 0, 8191, 100000};

    rope_case("qwen3 q", rp(ST_ROPE_NEOX, 128, 1e6f), 128, 32, 8, 32 * 128, NULL, 0);
    rope_case("qwen3 k in qkv", rp(ST_ROPE_NEOX, 128, 1e6f), 128, 4, 7, 40 * 128, NULL, 16376);
    rope_case("olmoe", rp(ST_ROPE_NEOX, 128, 1e4f), 128, 16, 8, 16 * 128, far, 0);
    rope_case("mixtral k", rp(ST_ROPE_NORM, 128, 1e6f), 128, 8, 3, 8 * 128, NULL, 4094);
    rope_case("partial", rp(ST_ROPE_NEOX, 64, 1e4f), 128, 8, 4, 8 * 128 + 5, NULL, 100);
    rope_case("partial", rp(ST_ROPE_NORM, 32, 1e4f), 64, 6, 2, 6 * 64, NULL, 31);
    st_rope_params lin = rp(ST_ROPE_NORM, 64, 1e4f);
    lin.freq_scale = 0.25f;
    rope_case("linear", lin, 64, 16, 2, 16 * 64, NULL, 30000);
    st_rope_params yarn = rp(ST_ROPE_NEOX, 128, 1e6f);
    yarn.freq_scale = 0.25f;
    yarn.ext_factor = 1.0f;
    rope_case("yarn", yarn, 128, 32, 6, 40 * 128, yarn_pos, 0);
    st_rope_params yarn2 = rp(ST_ROPE_NORM, 32, 1e4f);
    yarn2.freq_scale = 0.125f;
    yarn2.ext_factor = 0.5f;
    yarn2.attn_factor = 0.8f;
    yarn2.n_ctx_orig = 2048;
    rope_case("yarn", yarn2, 64, 4, 5, 4 * 64, NULL, 5000);
    rope_case("prefill", rp(ST_ROPE_NEOX, 128, 1e6f), 128, 32, 512, 32 * 128, NULL, 0);
    rope_case("hd256", rp(ST_ROPE_NEOX, 256, 1e4f), 256, 2, 3, 2 * 256, NULL, 77);
}

/* ---- elementwise ---------------------------------------------------------------------------- */

static void test_add(int64_t n, float scale, int in_place) {
    char shape[96];
    snprintf(shape, sizeof shape, "x + b * %g%s", (double)scale, in_place ? " in-place" : "");
    float *x = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    float *ref = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
    fill(x, n, 10.0f);
    fill(b, n, 1.0f);
    for (int64_t i = 0; i < n; i++) ref[i] = scale == 1.0f ? x[i] + b[i] : x[i] + b[i] * scale;
    float *dx = dev_buf(x, n), *db = dev_buf(b, n), *dy = in_place ? dx : dev_buf(NULL, n);
    CHECK(dx && db && dy, "add: device buffers");
    if (dx && db && dy) {
        CHECK(st_cuda_add(dy, dx, db, scale, n, NULL) == STRATA_OK, "add: %s", strata_last_error());
        int g = dev_fetch(got, dy, n);
        report("add", shape, compare(got, ref, n), g, 1);
    }
    st_cuda_free(dx); st_cuda_free(db);
    if (!in_place) st_cuda_free(dy);
    free(x); free(b); free(ref); free(got);
}

static void test_bias(int64_t n, int64_t T, int64_t ldy) {
    char shape[96];
    snprintf(shape, sizeof shape, "y[t] += b  T=%lld ld=%lld", (long long)T, (long long)ldy);
    const int64_t ny = T * ldy;
    float *y = malloc(sizeof(float) * (size_t)ny), *b = malloc(sizeof(float) * (size_t)n);
    float *ref = malloc(sizeof(float) * (size_t)ny), *got = malloc(sizeof(float) * (size_t)ny);
    float *row = malloc(sizeof(float) * (size_t)n);
    fill(y, ny, 4.0f);
    fill(b, n, 1.0f);
    memcpy(ref, y, sizeof(float) * (size_t)ny);
    for (int64_t t = 0; t < T; t++) { /* the CPU op takes compact rows */
        memcpy(row, ref + t * ldy, sizeof(float) * (size_t)n);
        st_add_bias(row, b, 1, n);
        memcpy(ref + t * ldy, row, sizeof(float) * (size_t)n);
    }
    float *dy = dev_buf(y, ny), *db = dev_buf(b, n);
    CHECK(dy && db, "bias: device buffers");
    if (dy && db) {
        CHECK(st_cuda_add_bias(dy, ldy, db, n, T, NULL) == STRATA_OK, "bias: %s", strata_last_error());
        int g = dev_fetch(got, dy, ny);
        report("bias", shape, compare(got, ref, ny), g, 1);
    }
    st_cuda_free(dy); st_cuda_free(db);
    free(y); free(b); free(ref); free(got); free(row);
}

/* g and u halves of a fused [T][2n] gate_up buffer (fused = 1) or separate buffers; h separate or
 * in place over g. */
static void test_swiglu(int64_t n, int64_t T, int fused, int in_place) {
    char shape[96];
    snprintf(shape, sizeof shape, "silu(g)*u  T=%lld%s%s", (long long)T, fused ? " fused-gate-up" : "",
             in_place ? " in-place" : "");
    const int64_t ld = fused ? 2 * n : n, ng = T * ld;
    float *g = malloc(sizeof(float) * (size_t)ng), *u = malloc(sizeof(float) * (size_t)(T * n));
    const int64_t nh = in_place ? ng : T * n;
    float *ref = malloc(sizeof(float) * (size_t)nh), *got = malloc(sizeof(float) * (size_t)nh);
    fill(g, ng, 6.0f);
    fill(u, T * n, 2.0f);
    if (in_place) memcpy(ref, g, sizeof(float) * (size_t)ng);
    for (int64_t t = 0; t < T; t++) {
        const float *ut = fused ? g + t * ld + n : u + t * n;
        st_swiglu((in_place ? ref + t * ld : ref + t * n), g + t * ld, ut, n);
    }
    float *dg = dev_buf(g, ng), *du = fused ? NULL : dev_buf(u, T * n);
    float *dh = in_place ? dg : dev_buf(NULL, nh);
    CHECK(dg && (fused || du) && dh, "swiglu: device buffers");
    if (dg && (fused || du) && dh) {
        strata_status st = st_cuda_swiglu(dh, in_place ? ld : n, dg, ld, fused ? dg + n : du,
                                          fused ? ld : n, n, T, NULL);
        CHECK(st == STRATA_OK, "swiglu: %s", strata_last_error());
        int gb = dev_fetch(got, dh, nh);
        report("swiglu", shape, compare(got, ref, nh), gb, 0);
    }
    st_cuda_free(dg); st_cuda_free(du);
    if (!in_place) st_cuda_free(dh);
    free(g); free(u); free(ref); free(got);
}

static void test_scale(int64_t n, float s, int divide) {
    char shape[96];
    snprintf(shape, sizeof shape, "x %s %g", divide ? "/" : "*", (double)s);
    float *x = malloc(sizeof(float) * (size_t)n), *ref = malloc(sizeof(float) * (size_t)n);
    float *got = malloc(sizeof(float) * (size_t)n);
    fill(x, n, 30.0f);
    for (int64_t i = 0; i < n; i++) ref[i] = divide ? x[i] / s : x[i] * s;
    float *dx = dev_buf(x, n), *dy = dev_buf(NULL, n);
    CHECK(dx && dy, "scale: device buffers");
    if (dx && dy) {
        CHECK(st_cuda_scale(dy, dx, s, divide, n, NULL) == STRATA_OK, "scale: %s", strata_last_error());
        int g = dev_fetch(got, dy, n);
        report("scale", shape, compare(got, ref, n), g, 1);
    }
    st_cuda_free(dx); st_cuda_free(dy);
    free(x); free(ref); free(got);
}

static void test_sigmoid(int64_t n) {
    char shape[64];
    snprintf(shape, sizeof shape, "sigmoid n=%lld", (long long)n);
    float *x = malloc(sizeof(float) * (size_t)n), *ref = malloc(sizeof(float) * (size_t)n);
    float *got = malloc(sizeof(float) * (size_t)n);
    fill(x, n, 12.0f);
    for (int64_t i = 0; i < n; i++) ref[i] = st_sigmoid(x[i]);
    float *dx = dev_buf(x, n), *dy = dev_buf(NULL, n);
    CHECK(dx && dy, "sigmoid: device buffers");
    if (dx && dy) {
        CHECK(st_cuda_sigmoid(dy, dx, n, NULL) == STRATA_OK, "sigmoid: %s", strata_last_error());
        int g = dev_fetch(got, dy, n);
        report("sigmoid", shape, compare(got, ref, n), g, 0);
    }
    st_cuda_free(dx); st_cuda_free(dy);
    free(x); free(ref); free(got);
}

/* The fused residual add + RMSNorm: the bits of st_cuda_add then st_cuda_rmsnorm, for both row
 * widths (warp rows up to 256, block rows beyond); guards after x and y intact. */
static void test_add_rmsnorm(int64_t n, int64_t T) {
    const int64_t N = n * T;
    float *x = malloc(sizeof(float) * (size_t)N), *b = malloc(sizeof(float) * (size_t)N);
    float *w = malloc(sizeof(float) * (size_t)n);
    float *x1 = malloc(sizeof(float) * (size_t)N), *y1 = malloc(sizeof(float) * (size_t)N);
    float *x2 = malloc(sizeof(float) * (size_t)N), *y2 = malloc(sizeof(float) * (size_t)N);
    fill(x, N, 3.0f);
    fill(b, N, 1.0f);
    fill(w, n, 1.0f);
    float *dxa = dev_buf(x, N), *dxb = dev_buf(x, N), *db = dev_buf(b, N), *dw = dev_buf(w, n);
    float *dya = dev_buf(NULL, N), *dyb = dev_buf(NULL, N);
    int ok = dxa && dxb && db && dw && dya && dyb;
    if (ok) {
        ok = st_cuda_add(dxa, dxa, db, 0.5f, N, NULL) == STRATA_OK &&
             st_cuda_rmsnorm(dya, n, dxa, n, dw, n, 1, T, 1e-6f, NULL) == STRATA_OK &&
             st_cuda_add_rmsnorm(dxb, db, 0.5f, dyb, dw, n, T, 1e-6f, NULL) == STRATA_OK;
        CHECK(ok, "add_rmsnorm n=%lld: %s", (long long)n, strata_last_error());
    }
    if (ok) {
        const int g1 = dev_fetch(x1, dxa, N), g2 = dev_fetch(x2, dxb, N);
        const int g3 = dev_fetch(y1, dya, N), g4 = dev_fetch(y2, dyb, N);
        const int same = !memcmp(x1, x2, sizeof(float) * (size_t)N) && !memcmp(y1, y2, sizeof(float) * (size_t)N);
        printf("add+rmsnorm n=%-5lld T=%lld: fused %s separate, guards %s\n", (long long)n, (long long)T,
               same ? "==" : "!=", g2 == 0 && g4 == 0 ? "ok" : "BAD");
        CHECK(same, "add_rmsnorm n=%lld: fused differs from add + rmsnorm", (long long)n);
        CHECK(g1 == 0 && g2 == 0 && g3 == 0 && g4 == 0, "add_rmsnorm n=%lld: guard words changed", (long long)n);
    }
    /* the _q8 forms: the same x and y, and as Q8_1 the bits st_cuda_quantize_q8_1 gives for y */
    if (ok && n % 32 == 0) {
        const int64_t nq = N / 32 * 9; /* 36-byte blocks, in floats */
        float *dxc = dev_buf(x, N), *dyc = dev_buf(NULL, N), *dyd = dev_buf(NULL, N);
        float *dqc = dev_buf(NULL, nq), *dqd = dev_buf(NULL, nq), *dqr = dev_buf(NULL, nq);
        float *hq[3], *hy = malloc(sizeof(float) * (size_t)N), *hx = malloc(sizeof(float) * (size_t)N);
        for (int i = 0; i < 3; i++) hq[i] = malloc(sizeof(float) * (size_t)nq);
        int ok2 = dxc && dyc && dyd && dqc && dqd && dqr && hy && hx && hq[0] && hq[1] && hq[2];
        ok2 = ok2 && st_cuda_add_rmsnorm_q8(dxc, db, 0.5f, dyc, dw, n, T, 1e-6f, dqc, NULL) == STRATA_OK &&
              st_cuda_rmsnorm_q8(dyd, dxa, dw, n, T, 1e-6f, dqd, NULL) == STRATA_OK &&
              st_cuda_quantize_q8_1(dya, dqr, N, NULL) == STRATA_OK;
        CHECK(ok2, "rmsnorm_q8 n=%lld: %s", (long long)n, strata_last_error());
        if (ok2) {
            int bad = dev_fetch(hx, dxc, N) + dev_fetch(hy, dyc, N);
            const int same_c = !memcmp(hx, x1, sizeof(float) * (size_t)N) && !memcmp(hy, y1, sizeof(float) * (size_t)N);
            bad += dev_fetch(hy, dyd, N);
            const int same_d = !memcmp(hy, y1, sizeof(float) * (size_t)N);
            bad += dev_fetch(hq[0], dqc, nq) + dev_fetch(hq[1], dqd, nq) + dev_fetch(hq[2], dqr, nq);
            const int q_same = !memcmp(hq[0], hq[2], sizeof(float) * (size_t)nq) &&
                               !memcmp(hq[1], hq[2], sizeof(float) * (size_t)nq);
            printf("rmsnorm_q8 n=%-5lld T=%lld: x, y %s; Q8_1 rows %s st_cuda_quantize_q8_1; guards %s\n",
                   (long long)n, (long long)T, same_c && same_d ? "==" : "!=", q_same ? "==" : "!=",
                   bad ? "BAD" : "ok");
            CHECK(same_c && same_d, "rmsnorm_q8 n=%lld: x or y differ from the plain norms", (long long)n);
            CHECK(q_same, "rmsnorm_q8 n=%lld: Q8_1 rows differ from st_cuda_quantize_q8_1", (long long)n);
            CHECK(bad == 0, "rmsnorm_q8 n=%lld: guard words changed", (long long)n);
        }
        st_cuda_free(dxc); st_cuda_free(dyc); st_cuda_free(dyd); st_cuda_free(dqc); st_cuda_free(dqd);
        st_cuda_free(dqr);
        for (int i = 0; i < 3; i++) free(hq[i]);
        free(hy); free(hx);
    }
    st_cuda_free(dxa); st_cuda_free(dxb); st_cuda_free(db); st_cuda_free(dw); st_cuda_free(dya); st_cuda_free(dyb);
    free(x); free(b); free(w); free(x1); free(y1); free(x2); free(y2);
}

/* st_cuda_topk against a host ranking: each returned id has exactly i values before it in
 * candidate order (NaN as -inf), its value is the row's; rows with ties, NaN and -inf. */
static void test_topk(int64_t n, int32_t k, int ties) {
    float *x = malloc(sizeof(float) * (size_t)n), *vals = malloc(sizeof(float) * (size_t)k);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)k);
    for (int64_t i = 0; i < n; i++) {
        const float u = test_rng_float(&rng) * 10.0f;
        x[i] = ties ? roundf(u) : u;
        if (i % 997 == 5) x[i] = NAN;
        if (i % 1301 == 7) x[i] = -INFINITY;
    }
    float *dx = dev_buf(x, n), *dv = dev_buf(NULL, k), *di = dev_buf(NULL, k);
    const size_t wsb = st_cuda_topk_wsize(n, k);
    void *ws = NULL;
    int ok = dx && dv && di && st_cuda_malloc(&ws, wsb ? wsb : 16) == STRATA_OK;
    ok = ok && st_cuda_topk(dx, n, k, (int32_t *)di, dv, ws, wsb, NULL) == STRATA_OK;
    CHECK(ok, "topk n=%lld k=%d: %s", (long long)n, (int)k, strata_last_error());
    if (ok) {
        const int g1 = dev_fetch(vals, dv, k), g2 = dev_fetch((float *)ids, di, k);
        int good = g1 == 0 && g2 == 0;
        for (int32_t i = 0; good && i < k; i++) {
            const int32_t id = ids[i];
            good = id >= 0 && id < n;
            if (!good) break;
            const float v = isnan(x[id]) ? -INFINITY : x[id];
            int64_t before = 0;
            for (int64_t t = 0; t < n; t++) {
                const float w = isnan(x[t]) ? -INFINITY : x[t];
                before += w > v || (w == v && t < id);
            }
            good = before == i && (vals[i] == v);
        }
        printf("topk n=%-7lld k=%-5d%s: %s\n", (long long)n, (int)k, ties ? " ties" : "", good ? "ok" : "WRONG");
        CHECK(good, "topk n=%lld k=%d: not the row's best in candidate order", (long long)n, (int)k);
    }
    st_cuda_free(dx); st_cuda_free(dv); st_cuda_free(di); st_cuda_free(ws);
    free(x); free(vals); free(ids);
}

/* st_cuda_qkv_prep against the separate launches it replaces (per-head rmsnorm on q and k,
 * rope over q and k, kv_store of k and v): the same bits in the row and in both caches; guards
 * after the row and the caches unchanged. */
static void test_qkv_prep(int64_t n_head, int64_t n_kv, int64_t hd, int64_t T, int norms, int neox,
                          int f16, int dev_pos) {
    const int64_t ld = (n_head + 2 * n_kv) * hd + 8, N = T * ld, n_ctx = 64, pos0 = 5;
    const int64_t cache = n_kv * n_ctx * hd; /* floats; f16 caches use half of it */
    float *x = malloc(sizeof(float) * (size_t)N), *qn = malloc(sizeof(float) * (size_t)hd);
    float *kn = malloc(sizeof(float) * (size_t)hd);
    float *r1 = malloc(sizeof(float) * (size_t)N), *r2 = malloc(sizeof(float) * (size_t)N);
    float *c1 = malloc(sizeof(float) * (size_t)cache * 2), *c2 = malloc(sizeof(float) * (size_t)cache * 2);
    fill(x, N, 2.0f);
    fill(qn, hd, 1.0f);
    fill(kn, hd, 1.0f);
    int32_t pos[16];
    for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)(pos0 + t);
    float *xa = dev_buf(x, N), *xb = dev_buf(x, N), *dq = dev_buf(qn, hd), *dk = dev_buf(kn, hd);
    float *ka = dev_buf(NULL, cache), *va = dev_buf(NULL, cache), *kb = dev_buf(NULL, cache), *vb = dev_buf(NULL, cache);
    float *dp = dev_buf(NULL, 16);
    int ok = xa && xb && dq && dk && ka && va && kb && vb && dp &&
             st_cuda_memcpy_h2d(dp, pos, sizeof(int32_t) * (size_t)T) == STRATA_OK;
    const st_cuda_rope_params rpar = {neox, (int)hd, 1e6f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, 4096, 0};
    const strata_type ct = f16 ? STRATA_TYPE_F16 : STRATA_TYPE_F32;
    const st_cuda_kv_layer kva = {ct, ka, va, n_ctx}, kvb = {ct, kb, vb, n_ctx};
    const st_cuda_attn_shape sh = {(int32_t)n_head, (int32_t)n_kv, (int32_t)hd, (int32_t)hd, 1.0f, 0, 0, NULL};
    const int32_t *d_pos = dev_pos ? (const int32_t *)dp : NULL;
    if (ok) {
        ok = (!norms || (st_cuda_rmsnorm(xa, ld, xa, ld, dq, hd, n_head, T, 1e-6f, NULL) == STRATA_OK &&
                         st_cuda_rmsnorm(xa + n_head * hd, ld, xa + n_head * hd, ld, dk, hd, n_kv, T, 1e-6f,
                                         NULL) == STRATA_OK)) &&
             st_cuda_rope(&rpar, xa, ld, n_head + n_kv, hd, T, d_pos, pos0, NULL) == STRATA_OK &&
             st_cuda_kv_store(&kva, &sh, xa + n_head * hd, ld, xa + (n_head + n_kv) * hd, ld, T, pos0, d_pos,
                              NULL) == STRATA_OK &&
             st_cuda_qkv_prep(&rpar, xb, ld, n_head, n_kv, hd, norms ? dq : NULL, norms ? dk : NULL, 1e-6f, &kvb, T,
                              d_pos, pos0, NULL) == STRATA_OK;
        CHECK(ok, "qkv_prep: %s", strata_last_error());
    }
    if (ok) {
        const int g1 = dev_fetch(r1, xa, N), g2 = dev_fetch(r2, xb, N);
        const int g3 = dev_fetch(c1, ka, cache), g4 = dev_fetch(c2, kb, cache);
        int same = !memcmp(r1, r2, sizeof(float) * (size_t)N) && !memcmp(c1, c2, sizeof(float) * (size_t)cache);
        const int g5 = dev_fetch(c1, va, cache), g6 = dev_fetch(c2, vb, cache);
        same = same && !memcmp(c1, c2, sizeof(float) * (size_t)cache);
        printf("qkv_prep h=%lld/%lld hd=%lld T=%lld%s%s %s%s: fused %s separate, guards %s\n", (long long)n_head,
               (long long)n_kv, (long long)hd, (long long)T, norms ? " norms" : "", neox ? " neox" : "",
               f16 ? "f16" : "f32", dev_pos ? " pos[]" : "", same ? "==" : "!=",
               g2 == 0 && g4 == 0 && g6 == 0 ? "ok" : "BAD");
        CHECK(same, "qkv_prep: fused differs from rmsnorm + rope + kv_store");
        CHECK(g1 == 0 && g2 == 0 && g3 == 0 && g4 == 0 && g5 == 0 && g6 == 0, "qkv_prep: guard words changed");
    }
    st_cuda_free(xa); st_cuda_free(xb); st_cuda_free(dq); st_cuda_free(dk); st_cuda_free(ka);
    st_cuda_free(va); st_cuda_free(kb); st_cuda_free(vb); st_cuda_free(dp);
    free(x); free(qn); free(kn); free(r1); free(r2); free(c1); free(c2);
}

/* The greedy token (sample.cu) against the host rule: NaN as -inf, the lowest index on ties.
 * mode 0: random; 1: the maximum repeated at 3 places; 2: NaNs and -infs around one finite max;
 * 3: every value -inf (logit -inf back). */
static void test_argmax(int64_t n, int mode) {
    float *x = malloc(sizeof(float) * (size_t)n);
    fill(x, n, 20.0f);
    if (mode == 1) x[n / 3] = x[n / 2] = x[n - 1] = 100.0f;
    if (mode == 2)
        for (int64_t i = 0; i < n; i++) x[i] = i % 3 == 0 ? NAN : (i == n / 2 ? 1.0f : -INFINITY);
    if (mode == 3)
        for (int64_t i = 0; i < n; i++) x[i] = -INFINITY;
    int64_t best = -1;
    float bv = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        const float v = isnan(x[i]) ? -INFINITY : x[i];
        if (best < 0 || v > bv) { best = i; bv = v; }
    }
    float *dx = dev_buf(x, n);
    st_cuda_argmax_out *dout = NULL, got = {-1, 0.0f};
    strata_status st = dx ? st_cuda_malloc((void **)&dout, sizeof *dout) : STRATA_ERR_NOMEM;
    if (st == STRATA_OK) st = st_cuda_argmax(dx, n, dout, NULL);
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(&got, dout, sizeof got);
    CHECK(st == STRATA_OK, "argmax n=%lld: %s", (long long)n, strata_last_error());
    const int ok = got.id == (int32_t)best && (got.logit == bv || (isinf(bv) && isinf(got.logit)));
    printf("argmax n=%-7lld mode %d: gpu %d (%g), host %lld (%g)  %s\n", (long long)n, mode,
           (int)got.id, (double)got.logit, (long long)best, (double)bv, ok ? "ok" : "FAIL");
    CHECK(ok, "argmax n=%lld mode %d: gpu %d, host %lld", (long long)n, mode, (int)got.id, (long long)best);
    st_cuda_free(dx); st_cuda_free(dout);
    free(x);
}

/* ---- argument errors (no device needed) ----------------------------------------------------- */

static void test_arguments(void) {
    float *fake = (float *)(uintptr_t)0x10000, *odd = (float *)(uintptr_t)0x10002;
    strata_status st = st_cuda_rmsnorm(fake, 100, fake, 99, NULL, 100, 1, 1, 1e-6f, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "rmsnorm ldx < n: %s", strata_status_name(st));
    st = st_cuda_rmsnorm(fake, 256, fake, 255, NULL, 128, 2, 1, 1e-6f, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "rmsnorm ldx < n_sub * n: %s", strata_status_name(st));
    st = st_cuda_rmsnorm(NULL, 8, fake, 8, NULL, 8, 1, 1, 1e-6f, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "rmsnorm NULL y: %s", strata_status_name(st));
    st = st_cuda_rmsnorm(fake, 8, odd, 8, NULL, 8, 1, 1, 1e-6f, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "rmsnorm misaligned x: %s", strata_status_name(st));
    st = st_cuda_rmsnorm(fake, 8, fake, 8, NULL, 8, 1, 0, 1e-6f, NULL);
    CHECK(st == STRATA_OK, "rmsnorm T = 0 is a no-op: %s", strata_last_error());
    CHECK(st_cuda_rmsnorm_supports(2048) && !st_cuda_rmsnorm_supports(0), "rmsnorm supports");
    st = st_cuda_add(fake, fake, NULL, 1.0f, 4, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "add NULL b: %s", strata_status_name(st));
    st = st_cuda_add_bias(fake, 3, fake, 4, 2, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "bias ldy < n: %s", strata_status_name(st));
    st = st_cuda_swiglu(fake, 4, fake, 4, fake, 3, 4, 1, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "swiglu ldu < n: %s", strata_status_name(st));
    st = st_cuda_scale(fake, fake, 2.0f, 0, -1, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "scale n < 0: %s", strata_status_name(st));
    st = st_cuda_argmax(fake, 0, (st_cuda_argmax_out *)fake, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "argmax n 0: %s", strata_status_name(st));
    st = st_cuda_argmax(NULL, 8, (st_cuda_argmax_out *)fake, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "argmax NULL x: %s", strata_status_name(st));

    st_cuda_rope_params p = {1, 128, 1e6f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, 4096, 0};
    CHECK(st_cuda_rope_supports(&p, 128), "rope 128/128");
    CHECK(!st_cuda_rope_supports(&p, 64), "rope n_rot > head_dim must be refused");
    p.n_rot = 127;
    CHECK(!st_cuda_rope_supports(&p, 128), "odd n_rot");
    st = st_cuda_rope(&p, fake, 128, 1, 128, 1, NULL, 0, NULL);
    CHECK(st == STRATA_ERR_UNSUPPORTED, "rope odd n_rot: %s", strata_status_name(st));
    p.n_rot = 512;
    CHECK(!st_cuda_rope_supports(&p, 512), "n_rot above the table");
    p.n_rot = 64;
    st = st_cuda_rope(&p, fake, 100, 1, 128, 1, NULL, 0, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "rope ldx < head_dim: %s", strata_status_name(st));
    st = st_cuda_rope(&p, odd, 128, 1, 128, 1, NULL, 0, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "rope misaligned x: %s", strata_status_name(st));
    st = st_cuda_rope(NULL, fake, 128, 1, 128, 1, NULL, 0, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "rope NULL params: %s", strata_status_name(st));
}

int main(void) {
    test_arguments();

    int available = 0;
    char reason[256];
    strata_status st = st_cuda_probe(&available, reason, sizeof reason);
    CHECK(st == STRATA_OK, "probe: %s", strata_last_error());
    if (!available) {
        CHECK(reason[0] != '\0', "unavailable without a reason");
        float *fake = (float *)(uintptr_t)0x10000;
        st = st_cuda_rmsnorm(fake, 8, fake, 8, NULL, 8, 1, 1, 1e-6f, NULL);
        CHECK(st == STRATA_ERR_UNSUPPORTED && strstr(strata_last_error(), reason) != NULL,
              "no device: %s '%s'", strata_status_name(st), strata_last_error());
        st_cuda_rope_params p = {1, 128, 1e6f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, 4096, 0};
        st = st_cuda_rope(&p, fake, 128, 1, 128, 1, NULL, 0, NULL);
        CHECK(st == STRATA_ERR_UNSUPPORTED, "no device (rope): %s", strata_status_name(st));
        st = st_cuda_scale(fake, fake, 2.0f, 0, 4, NULL);
        CHECK(st == STRATA_ERR_UNSUPPORTED, "no device (scale): %s", strata_status_name(st));
        SKIP("GPU checks: CUDA unavailable: %s", reason);
        return test_report();
    }
    printf("device: %s\n", reason);

    test_rmsnorm();
    test_rope();
    test_add(100003, 1.0f, 0);
    test_add(4096 * 8, 0.22f, 1);
    test_bias(4096 + 3, 7, 4096 + 8);
    test_bias(2048, 512, 2048);
    test_swiglu(768, 8, 1, 0);
    test_swiglu(1024, 3, 0, 0);
    test_swiglu(14336, 1, 0, 0);
    test_swiglu(1000, 3, 1, 1);
    test_scale(151936, 0.125f, 0);
    test_scale(50257 + 11, 8.0f, 1);
    test_scale(1000, 3.0f, 1);
    test_sigmoid(1);
    test_sigmoid(513);
    test_add_rmsnorm(256, 7);
    test_add_rmsnorm(2048, 5);
    test_add_rmsnorm(2048 + 96, 3);
    test_add_rmsnorm(4096 + 1024 + 32, 2); /* past the registers: two passes */
    test_qkv_prep(32, 4, 128, 1, 1, 1, 1, 1);  /* qwen3's decode step */
    test_qkv_prep(32, 4, 128, 7, 1, 1, 1, 0);
    test_qkv_prep(16, 16, 64, 3, 0, 0, 0, 1);  /* no norms, normal pairs, f32 cache */
    test_qkv_prep(8, 2, 64, 5, 1, 0, 1, 0);
    test_topk(151936, 104, 1);
    test_topk(151936, 1, 0);
    test_topk(50257, 1024, 1);
    test_topk(2048, 1024, 0);
    test_topk(5, 5, 1);
    test_topk(4099, 40, 1);
    test_argmax(151936, 0);
    test_argmax(151936, 1);
    test_argmax(1, 0);
    test_argmax(50257, 2);
    test_argmax(8192, 3);
    return test_report();
}

#else /* !STRATA_HAVE_CUDA */

TEST_MAIN_WITHOUT_CUDA()

#endif
