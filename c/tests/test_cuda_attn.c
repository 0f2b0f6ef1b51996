/* test_cuda_attn.c - the GPU KV cache store and causal GQA attention (cuda_ops.h) against the
 * CPU's st_kv_store + st_attention on random k, v, q (never zeros). Shapes: Qwen3-30B-A3B (32 q /
 * 4 kv heads x 128), OLMoE (16 / 16 x 128, MHA), Mixtral (32 / 8 x 128), 16 / 4 x 64 and
 * 8 / 2 x 256; contexts 1, 7, 100, 4097, 16384; T = 1..8 query tokens (decode and verify windows)
 * and 128 / 512 (prefill, also after earlier context); f16 caches on both sides (and f32).
 *
 * Per case it checks and prints: the stored cache equals the CPU's f16 (f32) values bit for bit
 * (mapping the CPU's [pos][kv head][d] K and transposed V to the GPU's head-major layout) and the
 * positions never written keep their poison (the GPU cache starts as all-ones bytes, i.e. NaN,
 * so attention reading a position it must not also shows as NaN); attention NMSE <= 1e-6 against
 * the CPU, max abs error, no NaN, guard words after the output and the workspace unchanged, the
 * gaps of a strided output untouched, and a second run bit-identical. Also the one-pass path with
 * no workspace, a workspace too small for the full split, and the argument errors. The kernel
 * each case runs is named (st_cuda_attn_kernel_name) and the choice is checked without a device
 * (decode at depth on the tensor cores unless shape.tc is 0, the FMA kernels for f32 caches,
 * head_dim 256 and short contexts). gpt-oss's sliding windows and sink logits against the CPU's
 * (test_window_sinks). Skips the GPU cases, saying why, where no GPU is usable. */
#include "strata.h"
#include "test.h"

#ifdef STRATA_HAVE_CUDA
#include "cuda_backend.h"
#include "cuda_ops.h"
#include "cuda_mmv.h"
#include "ops.h"
#include "threadpool.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GUARD 64
#define SENTINEL 0xA5A5A5A5u
#define NMSE_ATTN 1e-6

static test_rng rng = {0xA77E2710ULL};
static st_threadpool *pool;

static void fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) {
        float v = test_rng_float(&rng) * scale;
        x[i] = v != 0.0f ? v : 0.25f * scale;
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Device allocation of bytes + GUARD sentinel words, all set to byte value fillb (0xA5 = the
 * sentinel, 0xFF = NaN poison for caches). */
static void *dev_alloc(size_t bytes, int fillb) {
    void *d = NULL;
    if (st_cuda_malloc(&d, bytes + GUARD * 4) != STRATA_OK) return NULL;
    if (st_cuda_memset(d, fillb, bytes) != STRATA_OK ||
        st_cuda_memset((uint8_t *)d + bytes, 0xA5, GUARD * 4) != STRATA_OK) {
        st_cuda_free(d);
        return NULL;
    }
    return d;
}

/* Copies bytes back (synchronizing first) and counts changed guard words after them (-1: error). */
static int dev_fetch(void *h, const void *d, size_t bytes) {
    uint8_t *tmp = malloc(bytes + GUARD * 4);
    if (!tmp) return -1;
    if (st_cuda_synchronize() != STRATA_OK || st_cuda_memcpy_d2h(tmp, d, bytes + GUARD * 4) != STRATA_OK) {
        free(tmp);
        return -1;
    }
    if (h) memcpy(h, tmp, bytes);
    int bad = 0;
    for (int i = 0; i < GUARD; i++) {
        uint32_t w;
        memcpy(&w, tmp + bytes + 4 * i, 4);
        bad += w != SENTINEL;
    }
    free(tmp);
    return bad;
}

typedef struct {
    int n_head, n_kv, hd;
    const char *name;
} shape_t;

typedef enum { WS_FULL, WS_NONE, WS_SMALL } ws_mode;

static int g_tc = 0; /* shape.tc of the next cases: the tensor-core prefill kernel (2: split) */
static double g_last_nmse; /* the last case's NMSE against the CPU */
static const char *g_last_kernel; /* the kernel the last case ran (st_cuda_attn_kernel_name) */
static int g_q8; /* the next cases call st_cuda_attention_q8 (Q8_1 rows, counters) */
static int g_last_q8; /* the last case's q8_done */
static int g_window; /* the next cases' sliding window (0: none) */
static int g_sinks; /* the next cases have a sink logit per head (random, about the scores' size) */

/* One case: a cache of n_ctx = np + 37 positions holding np tokens, T query tokens at
 * pos0 = np - T. ldq/ldo padding pq/po floats per row. */
static void attn_case(shape_t sh, strata_type kvt, int64_t T, int64_t np, int64_t pq, int64_t po,
                      ws_mode wm) {
    const double t_start = now_s();
    const int64_t n_ctx = np + 37, pos0 = np - T, hd = sh.hd;
    const int64_t nk = (int64_t)sh.n_kv * hd, nq = (int64_t)sh.n_head * hd;
    const int64_t ldq = nq + pq, ldo = nq + po;
    const size_t el = kvt == STRATA_TYPE_F16 ? 2 : 4;
    char desc[200];
    /* sinks: the same values on both sides (the GPU's copy on the device) */
    float *sinks = g_sinks ? malloc(sizeof(float) * (size_t)sh.n_head) : NULL;
    void *dsinks = NULL;
    if (sinks) {
        fill(sinks, sh.n_head, 4.0f);
        dsinks = dev_alloc(sizeof(float) * (size_t)sh.n_head, 0xA5);
        if (dsinks && st_cuda_memcpy_h2d(dsinks, sinks, sizeof(float) * (size_t)sh.n_head) != STRATA_OK) {
            st_cuda_free(dsinks);
            dsinks = NULL;
        }
    }
    st_attn_shape cs = {.n_head = sh.n_head, .n_head_kv = sh.n_kv, .head_dim = sh.hd, .head_dim_v = sh.hd,
                        .scale = 1.0f / sqrtf((float)hd), .window = g_window, .sinks = sinks};
    st_cuda_attn_shape gs = {.n_head = sh.n_head, .n_head_kv = sh.n_kv, .head_dim = sh.hd, .head_dim_v = sh.hd,
                             .scale = cs.scale, .tc = g_tc, .window = g_window, .sinks = dsinks};
    const char *kname = st_cuda_attn_kernel_name(kvt, &gs, T, pos0, n_ctx);
    char extra[48] = "";
    if (g_window || g_sinks) snprintf(extra, sizeof extra, " win=%d%s", g_window, g_sinks ? " sinks" : "");
    snprintf(desc, sizeof desc, "%s %s h=%d/%d hd=%lld T=%lld ctx=%lld%s%s%s%s%s [%s]", sh.name,
             strata_type_name(kvt), sh.n_head, sh.n_kv, (long long)hd, (long long)T, (long long)np,
             pq || po ? " strided" : "", wm == WS_NONE ? " ws=none" : "", wm == WS_SMALL ? " ws=small" : "",
             g_tc == 2 ? " tc split" : g_tc == 3 ? " tc split-p" : g_tc ? " tc" : "", extra, kname ? kname + 5 : "?");
    g_last_kernel = kname;
    CHECK(st_cuda_attn_supports(kvt, &gs), "%s: not supported", desc);

    /* host data */
    float *k = malloc(sizeof(float) * (size_t)(np * nk)), *v = malloc(sizeof(float) * (size_t)(np * nk));
    float *q = malloc(sizeof(float) * (size_t)(T * ldq)), *qc = malloc(sizeof(float) * (size_t)(T * nq));
    float *ref = malloc(sizeof(float) * (size_t)(T * nq)), *got = malloc(sizeof(float) * (size_t)(T * ldo));
    float *got2 = malloc(sizeof(float) * (size_t)(T * ldo));
    const int n_thr = st_threadpool_n_threads(pool);
    float *scratch = malloc(sizeof(float) * (size_t)n_thr * (size_t)n_ctx);
    st_kv_layer ckv = {kvt, calloc((size_t)(n_ctx * nk), el), calloc((size_t)(n_ctx * nk), el), n_ctx};
    uint8_t *gk = malloc((size_t)(n_ctx * nk) * el), *gv = malloc((size_t)(n_ctx * nk) * el);
    if (!k || !v || !q || !qc || !ref || !got || !got2 || !scratch || !ckv.k || !ckv.vt || !gk || !gv ||
        (g_sinks && (!sinks || !dsinks))) {
        CHECK(0, "%s: host allocation", desc);
        goto done_host;
    }
    fill(k, np * nk, 1.0f);
    fill(v, np * nk, 1.0f);
    fill(q, T * ldq, 2.5f); /* peakier softmax than unit scale */
    for (int64_t t = 0; t < T; t++) memcpy(qc + t * nq, q + t * ldq, sizeof(float) * (size_t)nq);

    /* CPU reference */
    st_kv_store(&ckv, &cs, k, v, np, 0);
    st_attention(pool, &ckv, &cs, qc, T, pos0, ref, scratch);

    /* GPU: cache poisoned with NaN, prefix stored in one call and the T new tokens in another */
    const size_t kv_bytes = st_cuda_kv_bytes(kvt, &gs, n_ctx);
    CHECK(kv_bytes == (size_t)(n_ctx * nk) * el, "%s: kv bytes %zu", desc, kv_bytes);
    size_t ws_full = st_cuda_attn_wsize(&gs, T, n_ctx);
    size_t ws_bytes = wm == WS_FULL ? ws_full : wm == WS_SMALL ? ws_full / 3 : 0;
    void *dk = NULL, *dv = NULL, *dq = NULL, *dvals = NULL, *dout = NULL, *dws = NULL;
    void *dq8 = NULL, *dq8ref = NULL, *dsync = NULL;
    st_cuda_kv_layer gkv = {kvt, NULL, NULL, n_ctx};
    dk = dev_alloc(kv_bytes, 0xFF);
    dv = dev_alloc(kv_bytes, 0xFF);
    dq = dev_alloc(sizeof(float) * (size_t)(T * ldq), 0xA5);
    dvals = dev_alloc(sizeof(float) * (size_t)(2 * np * nk), 0xA5);
    dout = dev_alloc(sizeof(float) * (size_t)(T * ldo), 0xA5);
    if (ws_bytes) dws = dev_alloc(ws_bytes, 0xA5);
    if (!dk || !dv || !dq || !dvals || !dout || (ws_bytes && !dws)) {
        CHECK(0, "%s: device allocation: %s", desc, strata_last_error());
        goto done;
    }
    gkv.k = dk;
    gkv.v = dv;
    float *dkv = (float *)dvals, *dvv = (float *)dvals + np * nk;
    strata_status st = st_cuda_memcpy_h2d(dkv, k, sizeof(float) * (size_t)(np * nk));
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(dvv, v, sizeof(float) * (size_t)(np * nk));
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(dq, q, sizeof(float) * (size_t)(T * ldq));
    if (st == STRATA_OK) st = st_cuda_kv_store(&gkv, &gs, dkv, nk, dvv, nk, pos0, 0, NULL, NULL);
    if (st == STRATA_OK)
        st = st_cuda_kv_store(&gkv, &gs, dkv + pos0 * nk, nk, dvv + pos0 * nk, nk, T, pos0, NULL, NULL);
    CHECK(st == STRATA_OK, "%s: store: %s", desc, strata_last_error());
    if (st != STRATA_OK) goto done;

    /* the stored cache, bit for bit, and the poison after np */
    int gk_bad = dev_fetch(gk, dk, kv_bytes), gv_bad = dev_fetch(gv, dv, kv_bytes);
    int64_t k_mis = 0, v_mis = 0, poison_bad = 0;
    for (int64_t hk = 0; hk < sh.n_kv; hk++)
        for (int64_t p = 0; p < n_ctx; p++)
            for (int64_t d = 0; d < hd; d++) {
                const size_t go = (size_t)((hk * n_ctx + p) * hd + d) * el;
                if (p >= np) {
                    for (size_t b = 0; b < el; b++) poison_bad += gk[go + b] != 0xFF || gv[go + b] != 0xFF;
                    continue;
                }
                const size_t ko = (size_t)(p * nk + hk * hd + d) * el;
                const size_t vo = (size_t)((hk * hd + d) * n_ctx + p) * el;
                k_mis += memcmp(gk + go, (uint8_t *)ckv.k + ko, el) != 0;
                v_mis += memcmp(gv + go, (uint8_t *)ckv.vt + vo, el) != 0;
            }
    CHECK(gk_bad == 0 && gv_bad == 0, "%s: cache guard words changed (%d, %d)", desc, gk_bad, gv_bad);
    CHECK(k_mis == 0 && v_mis == 0, "%s: stored cache differs from the CPU's: %lld K, %lld V elements",
          desc, (long long)k_mis, (long long)v_mis);
    CHECK(poison_bad == 0, "%s: %lld bytes written past the stored positions", desc, (long long)poison_bad);

    /* attention, twice (g_q8: with Q8_1 rows and counters; where written, the rows must be the
     * bits st_cuda_quantize_q8_1 gives for the output, and the counters must be back at 0) */
    const size_t q8_bytes = (size_t)(T * nq / 32) * 36;
    int q8_done = 0, q8_bad = 0, sync_bad = 0;
    if (g_q8) {
        dq8 = dev_alloc(q8_bytes, 0xA5);
        dq8ref = dev_alloc(q8_bytes, 0x5A);
        dsync = dev_alloc(sizeof(uint32_t) * 256, 0);
        if (!dq8 || !dq8ref || !dsync) {
            CHECK(0, "%s: device allocation: %s", desc, strata_last_error());
            goto done;
        }
    }
    st = g_q8 ? st_cuda_attention_q8(&gkv, &gs, (const float *)dq, ldq, T, pos0, NULL, (float *)dout, ldo, dws,
                                     ws_bytes, dq8, (uint32_t *)dsync, 256, &q8_done, NULL)
              : st_cuda_attention(&gkv, &gs, (const float *)dq, ldq, T, pos0, NULL, (float *)dout, ldo, dws, ws_bytes, NULL);
    CHECK(st == STRATA_OK, "%s: attention: %s", desc, strata_last_error());
    if (st != STRATA_OK) goto done;
    int out_bad = dev_fetch(got, dout, sizeof(float) * (size_t)(T * ldo));
    int ws_bad = dws ? dev_fetch(NULL, dws, ws_bytes) : 0;
    if (q8_done) {
        uint8_t *h8 = malloc(q8_bytes), *h8r = malloc(q8_bytes);
        st = st_cuda_quantize_q8_1((const float *)dout, dq8ref, T * nq, NULL);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(h8, dq8, q8_bytes);
        if (st == STRATA_OK) st = st_cuda_memcpy_d2h(h8r, dq8ref, q8_bytes);
        q8_bad = st != STRATA_OK || !h8 || !h8r || memcmp(h8, h8r, q8_bytes) != 0;
        free(h8);
        free(h8r);
    }
    st = g_q8 ? st_cuda_attention_q8(&gkv, &gs, (const float *)dq, ldq, T, pos0, NULL, (float *)dout, ldo, dws,
                                     ws_bytes, dq8, (uint32_t *)dsync, 256, &q8_done, NULL)
              : st_cuda_attention(&gkv, &gs, (const float *)dq, ldq, T, pos0, NULL, (float *)dout, ldo, dws, ws_bytes, NULL);
    CHECK(st == STRATA_OK, "%s: attention (2nd): %s", desc, strata_last_error());
    int out_bad2 = dev_fetch(got2, dout, sizeof(float) * (size_t)(T * ldo));
    if (g_q8) {
        uint32_t cnt[256];
        sync_bad = st_cuda_memcpy_d2h(cnt, dsync, sizeof cnt) != STRATA_OK;
        for (int i = 0; i < 256; i++) sync_bad += cnt[i] != 0;
        printf("attn  %-56s q8 rows %s, counters %s\n", desc, q8_done ? (q8_bad ? "DIFFER" : "exact") : "not written",
               sync_bad ? "NOT ZERO" : "zero");
        CHECK(q8_bad == 0, "%s: Q8_1 rows differ from st_cuda_quantize_q8_1 of the output", desc);
        CHECK(sync_bad == 0, "%s: counters not back at 0", desc);
    }
    g_last_q8 = q8_done;

    double num = 0, den = 0, max_err = 0;
    int64_t nans = 0, gaps_bad = 0;
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < nq; i++) {
            const float g = got[t * ldo + i], r = ref[t * nq + i];
            if (isnan(g)) { nans++; continue; }
            const double e = (double)g - (double)r;
            num += e * e;
            den += (double)r * (double)r;
            if (fabs(e) > max_err) max_err = fabs(e);
        }
        for (int64_t i = nq; i < ldo; i++) {
            uint32_t w;
            memcpy(&w, &got[t * ldo + i], 4);
            gaps_bad += w != SENTINEL;
        }
    }
    const double nmse = den > 0 ? num / den : num;
    g_last_nmse = nmse;
    const int same = memcmp(got, got2, sizeof(float) * (size_t)(T * ldo)) == 0;
    const int ok = nans == 0 && nmse <= NMSE_ATTN && out_bad == 0 && ws_bad == 0 && gaps_bad == 0 &&
                   same && k_mis == 0 && v_mis == 0 && poison_bad == 0;
    printf("attn  %-56s ws=%-9zu nmse=%.2e max=%.2e nan=%lld guard=%d/%d store=%s %s%s (%.2f s)\n",
           desc, ws_bytes, nmse, max_err, (long long)nans, out_bad, ws_bad,
           k_mis || v_mis || poison_bad ? "BAD" : "exact", ok ? "ok" : "FAIL",
           same ? "" : " (runs differ)", now_s() - t_start);
    CHECK(nans == 0, "%s: %lld NaN outputs (a masked or unwritten position was read?)", desc, (long long)nans);
    CHECK(nmse <= NMSE_ATTN, "%s: nmse %.3e > %.1e (max err %.3e)", desc, nmse, NMSE_ATTN, max_err);
    CHECK(out_bad == 0 && out_bad2 == 0, "%s: output guard words changed (%d, %d)", desc, out_bad, out_bad2);
    CHECK(ws_bad == 0, "%s: workspace guard words changed (%d)", desc, ws_bad);
    CHECK(gaps_bad == 0, "%s: %lld floats between output rows written", desc, (long long)gaps_bad);
    CHECK(same, "%s: two runs differ", desc);
done:
    st_cuda_free(dk); st_cuda_free(dv); st_cuda_free(dq); st_cuda_free(dvals); st_cuda_free(dout);
    st_cuda_free(dws);
    st_cuda_free(dq8); st_cuda_free(dq8ref); st_cuda_free(dsync);
done_host:
    free(k); free(v); free(q); free(qc); free(ref); free(got); free(got2); free(scratch);
    free(sinks);
    st_cuda_free(dsinks);
    free(ckv.k); free(ckv.vt); free(gk); free(gv);
}

/* ---- argument errors (no device needed) ----------------------------------------------------- */

static void test_arguments(void) {
    st_cuda_attn_shape s = {32, 4, 128, 128, 0.088f, 0, 0, NULL};
    CHECK(st_cuda_attn_supports(STRATA_TYPE_F16, &s) && st_cuda_attn_supports(STRATA_TYPE_F32, &s),
          "qwen3 shape");
    st_cuda_attn_shape s80 = {32, 4, 80, 80, 0.1f, 0, 0, NULL}, smla = {32, 4, 128, 64, 0.1f, 0, 0, NULL}, sodd = {30, 4, 128, 128, 0.1f, 0, 0, NULL};
    CHECK(!st_cuda_attn_supports(STRATA_TYPE_F16, &s80), "head_dim 80 is not instantiated");
    CHECK(!st_cuda_attn_supports(STRATA_TYPE_F16, &smla), "head_dim != head_dim_v");
    CHECK(!st_cuda_attn_supports(STRATA_TYPE_F16, &sodd), "n_head not a multiple of n_head_kv");
    CHECK(!st_cuda_attn_supports(STRATA_TYPE_Q8_0, &s), "q8_0 cache");
    CHECK(st_cuda_kv_bytes(STRATA_TYPE_F16, &s, 1000) == (size_t)4 * 1000 * 128 * 2, "kv bytes");
    CHECK(st_cuda_attn_wsize(&s, 1, 1) == 0, "one position needs no split");

    void *fk = (void *)(uintptr_t)0x100000, *fv = (void *)(uintptr_t)0x200000;
    float *fq = (float *)(uintptr_t)0x300000, *fo = (float *)(uintptr_t)0x400000;
    st_cuda_kv_layer kv = {STRATA_TYPE_F16, fk, fv, 100};
    strata_status st = st_cuda_attention(&kv, &s, fq, 4096, 2, 99, NULL, fo, 4096, NULL, 0, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "pos0 + T > n_ctx: %s", strata_status_name(st));
    st = st_cuda_attention(&kv, &s, fq, 4000, 1, 0, NULL, fo, 4096, NULL, 0, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "ldq < n_head * head_dim: %s", strata_status_name(st));
    st = st_cuda_attention(&kv, &s80, fq, 4096, 1, 0, NULL, fo, 4096, NULL, 0, NULL);
    CHECK(st == STRATA_ERR_UNSUPPORTED, "head_dim 80: %s", strata_status_name(st));
    st_cuda_kv_layer kvmis = {STRATA_TYPE_F16, (void *)(uintptr_t)0x100008, fv, 100};
    st = st_cuda_attention(&kvmis, &s, fq, 4096, 1, 0, NULL, fo, 4096, NULL, 0, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "cache not 16-byte aligned: %s", strata_status_name(st));
    st = st_cuda_attention(&kv, &s, NULL, 4096, 1, 0, NULL, fo, 4096, NULL, 0, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "NULL q: %s", strata_status_name(st));
    st = st_cuda_attention(&kv, &s, fq, 4096, 0, 0, NULL, fo, 4096, NULL, 0, NULL);
    CHECK(st == STRATA_OK, "T = 0 is a no-op: %s", strata_last_error());
    st = st_cuda_kv_store(&kv, &s, fq, 512, fq, 512, 5, 96, NULL, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "store past n_ctx: %s", strata_status_name(st));
    st = st_cuda_kv_store(&kv, &s, fq, 500, fq, 512, 1, 0, NULL, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "store ldk < n_kv * hd: %s", strata_status_name(st));
    st_cuda_attn_shape sneg = s;
    sneg.window = -1;
    st = st_cuda_attention(&kv, &sneg, fq, 4096, 1, 0, NULL, fo, 4096, NULL, 0, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "negative window: %s", strata_status_name(st));
    st_cuda_kv_layer kvq = {STRATA_TYPE_Q8_0, fk, fv, 100};
    st = st_cuda_kv_store(&kvq, &s, fq, 512, fq, 512, 1, 0, NULL, NULL);
    CHECK(st == STRATA_ERR_UNSUPPORTED, "q8_0 cache store: %s", strata_status_name(st));
}

/* ---- the kernel each call takes (host logic, no device needed) ---------------------------- */

static int kernel_is(strata_type kvt, const st_cuda_attn_shape *s, int64_t T, int64_t pos0, int64_t n_ctx,
                     const char *want) {
    const char *got = st_cuda_attn_kernel_name(kvt, s, T, pos0, n_ctx);
    return got && strcmp(got, want) == 0;
}

static void test_kernel_choice(void) {
    const strata_type F16 = STRATA_TYPE_F16, F32 = STRATA_TYPE_F32;
    for (int tc = -1; tc <= 3; tc++) {
        const st_cuda_attn_shape q3 = {32, 4, 128, 128, 0.088f, tc, 0, NULL}, ol = {16, 16, 128, 128, 0.088f, tc, 0, NULL},
                                 h64 = {16, 4, 64, 64, 0.125f, tc, 0, NULL}, h256 = {8, 2, 256, 256, 0.0625f, tc, 0, NULL};
        const char *dtc = tc != 0 ? "st_k_attn_dtc" : "st_k_attn_dec";
        const char *tck = tc != 0 ? "st_k_attn_tc" : "st_k_attn";
        /* decode at depth: the tensor-core decode kernel unless shape.tc is 0 */
        CHECK(kernel_is(F16, &q3, 1, 16383, 20000, dtc), "tc %d: qwen3 decode at 16K -> %s", tc, dtc);
        CHECK(kernel_is(F16, &q3, 1, 4095, 20000, dtc), "tc %d: qwen3 decode at 4K -> %s", tc, dtc);
        CHECK(kernel_is(F16, &h64, 2, 5000, 20000, dtc), "tc %d: head_dim 64, 8 rows at 5K -> %s", tc, dtc);
        /* 16 rows per KV head: only the tensor-core decode kernel serves them */
        CHECK(kernel_is(F16, &q3, 2, 16000, 20000, tc != 0 ? "st_k_attn_dtc" : "st_k_attn"),
              "tc %d: qwen3 T = 2 at 16K", tc);
        CHECK(kernel_is(F16, &ol, 16, 5000, 20000, tc != 0 ? "st_k_attn_dtc" : "st_k_attn"),
              "tc %d: olmoe T = 16 at 5K", tc);
        CHECK(kernel_is(F16, &ol, 16, 3000, 20000, "st_k_attn"), "tc %d: olmoe T = 16 at 3K: general kernel", tc);
        CHECK(kernel_is(F16, &ol, 17, 5000, 20000, "st_k_attn"), "tc %d: olmoe T = 17: general kernel", tc);
        /* short contexts keep the FMA kernel; from ST_ATTN_DTC_MIN_NP (4096, rounded length) on
         * a decode kernel (and ST_ATTN_DEC_MIN_NP is 4096 too) */
        CHECK(kernel_is(F16, &q3, 1, 100, 20000, "st_k_attn"), "tc %d: decode at 100 -> st_k_attn", tc);
        CHECK(kernel_is(F16, &q3, 1, 2000, 20000, "st_k_attn"), "tc %d: decode at 2000 -> st_k_attn", tc);
        CHECK(kernel_is(F16, &q3, 1, 3839, 20000, "st_k_attn"), "tc %d: decode at 3839 -> st_k_attn", tc);
        CHECK(kernel_is(F16, &q3, 1, 3900, 20000, dtc), "tc %d: decode at 3900 (rounded 4096) -> %s", tc, dtc);
        /* f32 caches and head_dim 256: the FMA kernels */
        CHECK(kernel_is(F32, &q3, 1, 16383, 20000, "st_k_attn_dec"), "tc %d: f32 cache decode", tc);
        CHECK(kernel_is(F16, &h256, 1, 16383, 20000, "st_k_attn_dec"), "tc %d: head_dim 256 decode", tc);
        /* prompt batches */
        CHECK(kernel_is(F16, &q3, 512, 0, 20000, tck), "tc %d: pp512 -> %s", tc, tck);
        CHECK(kernel_is(F16, &q3, 8, 16000, 20000, tck), "tc %d: 64 rows at 16K -> %s", tc, tck);
        CHECK(kernel_is(F16, &q3, 4, 16000, 20000, "st_k_attn"), "tc %d: 32 rows: general kernel", tc);
        CHECK(st_cuda_attn_kernel_name(F16, &q3, 1, 20000, 20000) == NULL, "tc %d: past n_ctx", tc);
    }
    /* a sliding window or sinks: the FMA kernel whatever the call (the others take neither) */
    const float sk[64] = {0};
    const st_cuda_attn_shape win = {.n_head = 64, .n_head_kv = 8, .head_dim = 64, .head_dim_v = 64,
                                    .scale = 0.125f, .tc = 2, .window = 128},
                             snk = {.n_head = 64, .n_head_kv = 8, .head_dim = 64, .head_dim_v = 64,
                                    .scale = 0.125f, .tc = 2, .sinks = sk};
    CHECK(kernel_is(F16, &win, 1, 16383, 20000, "st_k_attn"), "window: decode at 16K -> st_k_attn");
    CHECK(kernel_is(F16, &snk, 1, 16383, 20000, "st_k_attn"), "sinks: decode at 16K -> st_k_attn");
    CHECK(kernel_is(F16, &win, 512, 0, 20000, "st_k_attn"), "window: pp512 -> st_k_attn");
    CHECK(kernel_is(F16, &snk, 512, 0, 20000, "st_k_attn"), "sinks: pp512 -> st_k_attn");
    const st_cuda_attn_shape s80 = {32, 4, 80, 80, 0.1f, -1, 0, NULL};
    CHECK(st_cuda_attn_kernel_name(STRATA_TYPE_F16, &s80, 1, 0, 100) == NULL, "unsupported shape: NULL");
    CHECK(st_cuda_attn_kernel_name(STRATA_TYPE_F16, NULL, 1, 0, 100) == NULL, "NULL shape");
}

/* gpt-oss's attention: sliding windows (a query sees its last window positions) and per-head
 * sink logits, alone and together, against st_attention with the same shape: decode steps (one
 * pass, split chunks, chunks wholly before the window, the counters' merge with Q8_1 rows),
 * verify windows, prompt batches crossing the window and the chunks, small and no workspace,
 * shape.tc set (ignored: the FMA kernel), an f32 cache, a window wider than the context. */
static void test_window_sinks(void) {
    const shape_t oss = {64, 8, 64, "oss"}, qwen3 = {32, 4, 128, "qwen3"};
    const strata_type F16 = STRATA_TYPE_F16, F32 = STRATA_TYPE_F32;
    const struct { int window, sinks; } ws[] = {{128, 1}, {0, 1}, {128, 0}, {4, 1}};
    const struct { int64_t T, np; ws_mode wm; } cs[] = {
        {1, 1, WS_FULL}, {1, 7, WS_FULL}, {1, 100, WS_FULL}, {1, 300, WS_FULL}, {1, 5000, WS_FULL},
        {1, 16384, WS_FULL},
        {3, 4097, WS_FULL}, {8, 300, WS_FULL}, {12, 12, WS_FULL}, {128, 128, WS_FULL},
        {512, 512, WS_FULL}, {512, 1536, WS_FULL}, {33, 1000, WS_NONE}, {8, 16384, WS_SMALL}};
    for (size_t w = 0; w < sizeof ws / sizeof ws[0]; w++) {
        g_window = ws[w].window;
        g_sinks = ws[w].sinks;
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
            attn_case(oss, F16, cs[i].T, cs[i].np, 0, 0, cs[i].wm);
            CHECK(g_last_kernel && strcmp(g_last_kernel, "st_k_attn") == 0, "window/sinks ran %s",
                  g_last_kernel ? g_last_kernel : "?");
        }
    }
    g_window = 128;
    g_sinks = 1;
    g_tc = 2;
    attn_case(oss, F16, 1, 16384, 0, 0, WS_FULL);
    attn_case(oss, F16, 512, 2048, 0, 0, WS_FULL);
    attn_case(qwen3, F16, 64, 4097, 2 * 4 * 128, 16, WS_FULL);
    g_tc = 0;
    attn_case(oss, F32, 5, 700, 0, 0, WS_FULL);
    g_window = 100000;
    attn_case(oss, F16, 4, 300, 0, 0, WS_FULL);
    /* the Q8_1 rows: one pass and the counters' merge */
    g_window = 128;
    g_q8 = 1;
    static const int64_t q8c[][2] = {{1, 100}, {1, 3000}, {1, 16384}, {4, 1000}};
    for (size_t i = 0; i < sizeof q8c / sizeof q8c[0]; i++) {
        attn_case(oss, F16, q8c[i][0], q8c[i][1], 0, 0, WS_FULL);
        CHECK(g_last_q8 == 1, "window/sinks T=%lld ctx=%lld: q8_done %d", (long long)q8c[i][0],
              (long long)q8c[i][1], g_last_q8);
    }
    g_q8 = 0;
    g_window = 0;
    g_sinks = 0;
}

int main(void) {
    test_arguments();
    test_kernel_choice();

    int available = 0;
    char reason[256];
    strata_status st = st_cuda_probe(&available, reason, sizeof reason);
    CHECK(st == STRATA_OK, "probe: %s", strata_last_error());
    if (!available) {
        CHECK(reason[0] != '\0', "unavailable without a reason");
        st_cuda_attn_shape s = {32, 4, 128, 128, 0.088f, 0, 0, NULL};
        st_cuda_kv_layer kv = {STRATA_TYPE_F16, (void *)(uintptr_t)0x100000, (void *)(uintptr_t)0x200000, 100};
        st = st_cuda_attention(&kv, &s, (float *)(uintptr_t)0x300000, 4096, 1, 0, NULL,
                               (float *)(uintptr_t)0x400000, 4096, NULL, 0, NULL);
        CHECK(st == STRATA_ERR_UNSUPPORTED && strstr(strata_last_error(), reason) != NULL,
              "no device: %s '%s'", strata_status_name(st), strata_last_error());
        SKIP("GPU checks: CUDA unavailable: %s", reason);
        return test_report();
    }
    printf("device: %s\n", reason);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nthr = ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu;
    CHECK(st_threadpool_create(nthr, &pool) == STRATA_OK, "thread pool");
    printf("CPU reference on %d threads\n", nthr);

    const shape_t qwen3 = {32, 4, 128, "qwen3"}, olmoe = {16, 16, 128, "olmoe"},
                  mixtral = {32, 8, 128, "mixtral"}, hd64 = {16, 4, 64, "hd64"},
                  hd256 = {8, 2, 256, "hd256"}, mqa = {8, 1, 128, "mqa"};
    const strata_type F16 = STRATA_TYPE_F16, F32 = STRATA_TYPE_F32;
    /* decode and verify windows: T x context */
    static const int64_t dec[][2] = {{1, 1}, {1, 7}, {7, 7}, {2, 100}, {5, 100}, {1, 4097},
                                     {8, 4097}, {1, 16384}, {3, 16384}, {8, 16384}};
    for (size_t i = 0; i < sizeof dec / sizeof dec[0]; i++) attn_case(qwen3, F16, dec[i][0], dec[i][1], 0, 0, WS_FULL);
    static const int64_t dec2[][2] = {{1, 1}, {4, 7}, {1, 100}, {6, 4097}, {1, 16384}, {8, 16384}};
    for (size_t i = 0; i < sizeof dec2 / sizeof dec2[0]; i++) {
        attn_case(olmoe, F16, dec2[i][0], dec2[i][1], 0, 0, WS_FULL);
        attn_case(mixtral, F16, dec2[i][0], dec2[i][1], 0, 0, WS_FULL);
    }
    attn_case(hd64, F16, 3, 100, 0, 0, WS_FULL);
    attn_case(hd64, F16, 1, 4097, 0, 0, WS_FULL);
    attn_case(hd64, F16, 6, 16384, 0, 0, WS_FULL);
    attn_case(hd256, F16, 1, 100, 0, 0, WS_FULL);
    attn_case(hd256, F16, 8, 4097, 0, 0, WS_FULL);
    attn_case(hd256, F16, 64, 300, 0, 0, WS_FULL);
    /* f32 caches */
    attn_case(qwen3, F32, 1, 4097, 0, 0, WS_FULL);
    attn_case(qwen3, F32, 8, 100, 0, 0, WS_FULL);
    attn_case(hd64, F32, 2, 7, 0, 0, WS_FULL);
    attn_case(olmoe, F32, 128, 1000, 0, 0, WS_FULL);
    /* strided q/out (fused qkv rows), no workspace, a workspace too small for the full split */
    attn_case(qwen3, F16, 4, 4097, 2 * 4 * 128, 16, WS_FULL);
    attn_case(qwen3, F16, 1, 16384, 0, 0, WS_NONE);
    attn_case(qwen3, F16, 8, 16384, 0, 0, WS_SMALL);
    attn_case(olmoe, F16, 2, 4097, 0, 8, WS_SMALL);
    /* prefill */
    attn_case(qwen3, F16, 128, 128, 0, 0, WS_FULL);
    attn_case(qwen3, F16, 512, 512, 0, 0, WS_FULL);
    attn_case(qwen3, F16, 512, 1536, 0, 0, WS_FULL);
    attn_case(olmoe, F16, 512, 512, 0, 0, WS_FULL);
    attn_case(mixtral, F16, 128, 4097, 0, 0, WS_FULL);
    attn_case(hd64, F16, 128, 300, 0, 0, WS_FULL);
    attn_case(qwen3, F16, 33, 1000, 40, 0, WS_NONE);
    /* the tensor-core prefill kernel (shape.tc): the same cases where it applies (f16 cache,
     * head_dim 64/128, 64+ rows per KV head), plus long contexts and rows not a multiple of 64;
     * decode-sized calls keep the other kernels */
    g_tc = 1;
    attn_case(qwen3, F16, 128, 128, 0, 0, WS_FULL);
    attn_case(qwen3, F16, 512, 512, 0, 0, WS_FULL);
    attn_case(qwen3, F16, 512, 1536, 0, 0, WS_FULL);
    attn_case(qwen3, F16, 512, 16384, 0, 0, WS_FULL);
    attn_case(olmoe, F16, 512, 512, 0, 0, WS_FULL);
    attn_case(olmoe, F16, 100, 4097, 0, 0, WS_FULL);
    attn_case(mixtral, F16, 128, 4097, 0, 0, WS_FULL);
    attn_case(hd64, F16, 128, 300, 0, 0, WS_FULL);
    attn_case(hd64, F16, 77, 77, 0, 0, WS_FULL);
    attn_case(qwen3, F16, 33, 1000, 40, 16, WS_NONE);
    attn_case(qwen3, F16, 1, 16384, 0, 0, WS_FULL);
    attn_case(hd256, F16, 64, 300, 0, 0, WS_FULL);
    /* split-K chunks of the tensor-core kernel (few row blocks: verify windows, short batches at
     * depth, one KV head), including chunks wholly past some rows' positions (T = 1024 over 2) */
    attn_case(qwen3, F16, 8, 16384, 0, 0, WS_FULL);
    attn_case(qwen3, F16, 64, 16384, 0, 0, WS_FULL);
    attn_case(mqa, F16, 1024, 1024, 0, 0, WS_FULL);
    attn_case(mqa, F16, 1024, 1024, 0, 0, WS_NONE);
    g_tc = 2;
    attn_case(mqa, F16, 1024, 1024, 0, 0, WS_FULL);
    attn_case(qwen3, F16, 64, 16384, 0, 0, WS_SMALL);
    g_tc = 3;
    attn_case(mqa, F16, 1024, 1024, 0, 0, WS_NONE);
    attn_case(qwen3, F16, 64, 16384, 0, 0, WS_SMALL);
    attn_case(hd64, F16, 77, 77, 0, 0, WS_FULL);
    g_tc = 1;
    /* attn_tc 2: queries and probabilities split into hi + lo f16 parts; at least 20x closer
     * to the CPU than the single-f16 kernel on the same case (H200: 50x at 16K positions, where
     * the f32 sums' order dominates, 500x-500,000x on the others) */
    {
        const struct { shape_t sh; int64_t T, np; } sc[] = {
            {qwen3, 512, 512}, {qwen3, 512, 16384}, {olmoe, 100, 4097}, {hd64, 77, 77}, {mixtral, 128, 4097}};
        for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
            g_tc = 1;
            attn_case(sc[i].sh, F16, sc[i].T, sc[i].np, 0, 0, WS_FULL);
            const double one = g_last_nmse;
            g_tc = 2;
            attn_case(sc[i].sh, F16, sc[i].T, sc[i].np, 0, 0, WS_FULL);
            const double both = g_last_nmse;
            CHECK(both * 20.0 <= one, "%s T=%lld ctx=%lld: split tensor-core attention NMSE %.2e "
                  "not 20x below the single-f16 kernel's %.2e", sc[i].sh.name, (long long)sc[i].T,
                  (long long)sc[i].np, both, one);
            /* attn_tc 3: the probabilities split, the queries single f16: between the two */
            g_tc = 3;
            attn_case(sc[i].sh, F16, sc[i].T, sc[i].np, 0, 0, WS_FULL);
            printf("%s T=%lld ctx=%lld: NMSE single f16 %.3g, split probabilities %.3g, split both %.3g\n",
                   sc[i].sh.name, (long long)sc[i].T, (long long)sc[i].np, one, g_last_nmse, both);
            CHECK(g_last_nmse < one, "%s T=%lld ctx=%lld: split-probability NMSE %.2e not below single "
                  "f16's %.2e", sc[i].sh.name, (long long)sc[i].T, (long long)sc[i].np, g_last_nmse, one);
        }
    }
    /* the tensor-core decode kernel (shape.tc, at most 16 rows per KV head, 4096+ positions):
     * decode steps and verify windows, 16 rows (qwen3 T = 2, olmoe T = 16: chunks wholly past
     * some rows' last positions), GQA groups of 1, 4 and 8 and head_dim 64, one pass, a small
     * workspace, strided rows; split operands (the default) at least 20x closer to the CPU than
     * single f16 on the same case */
    {
        const struct { shape_t sh; int64_t T, np, pq, po; ws_mode wm; } dc[] = {
            {qwen3, 1, 4096, 0, 0, WS_FULL},   {qwen3, 1, 4097, 0, 0, WS_FULL},
            {qwen3, 1, 16384, 0, 0, WS_FULL},  {qwen3, 2, 16384, 0, 0, WS_FULL},
            {qwen3, 1, 16384, 0, 0, WS_NONE},  {qwen3, 2, 16384, 0, 0, WS_SMALL},
            {qwen3, 1, 5000, 2 * 4 * 128, 16, WS_FULL}, {olmoe, 1, 16384, 0, 0, WS_FULL},
            {olmoe, 16, 4097, 0, 0, WS_FULL},  {olmoe, 7, 4200, 0, 8, WS_SMALL},
            {mixtral, 4, 4097, 0, 0, WS_FULL}, {mixtral, 1, 16384, 0, 0, WS_FULL},
            {hd64, 3, 16384, 0, 0, WS_FULL},   {hd64, 4, 4500, 0, 0, WS_NONE},
            {mqa, 2, 6000, 0, 0, WS_FULL}};
        for (size_t i = 0; i < sizeof dc / sizeof dc[0]; i++) {
            g_tc = 2;
            attn_case(dc[i].sh, F16, dc[i].T, dc[i].np, dc[i].pq, dc[i].po, dc[i].wm);
            CHECK(g_last_kernel && strcmp(g_last_kernel, "st_k_attn_dtc") == 0, "%s T=%lld ctx=%lld ran %s",
                  dc[i].sh.name, (long long)dc[i].T, (long long)dc[i].np, g_last_kernel ? g_last_kernel : "?");
            const double split = g_last_nmse;
            g_tc = 1;
            attn_case(dc[i].sh, F16, dc[i].T, dc[i].np, dc[i].pq, dc[i].po, dc[i].wm);
            CHECK(split * 20.0 <= g_last_nmse, "%s T=%lld ctx=%lld: split decode NMSE %.2e not 20x below "
                  "single f16's %.2e", dc[i].sh.name, (long long)dc[i].T, (long long)dc[i].np, split, g_last_nmse);
        }
    }
    /* st_cuda_attention_q8: the FMA kernel writes Q8_1 rows, its chunks merged by the last block
     * of each row group (counters) or in one pass; the other kernels leave them to the caller */
    {
        const struct { shape_t sh; strata_type kt; int64_t T, np, po; ws_mode wm; int tc, want; } qc[] = {
            {qwen3, F16, 1, 1, 0, WS_FULL, 0, 1},     {qwen3, F16, 1, 7, 0, WS_FULL, 0, 1},
            {qwen3, F16, 7, 7, 0, WS_FULL, 0, 1},     {qwen3, F16, 2, 100, 0, WS_FULL, 0, 1},
            {qwen3, F16, 7, 300, 0, WS_FULL, 2, 1},   {qwen3, F16, 1, 3000, 0, WS_FULL, 2, 1},
            {qwen3, F16, 8, 300, 0, WS_FULL, 2, 0},   /* 64 rows a KV head: the tensor-core kernel */
            {qwen3, F16, 5, 2100, 0, WS_SMALL, 2, 1}, {qwen3, F16, 1, 900, 0, WS_NONE, 2, 1},
            {olmoe, F16, 1, 100, 0, WS_FULL, 2, 1},   {olmoe, F16, 8, 2000, 0, WS_FULL, 2, 1},
            {mixtral, F16, 4, 1000, 0, WS_FULL, 2, 1}, {hd64, F16, 3, 100, 0, WS_FULL, 2, 1},
            {hd256, F16, 1, 100, 0, WS_FULL, 2, 1},   {qwen3, F32, 8, 100, 0, WS_FULL, 0, 1},
            {qwen3, F16, 2, 100, 16, WS_FULL, 2, 0},
            /* the decode kernels at depth: their combine pass writes the rows (one pass: not) */
            {qwen3, F16, 1, 16384, 0, WS_FULL, 2, 1}, {qwen3, F16, 1, 16384, 0, WS_FULL, 0, 1},
            {qwen3, F16, 2, 5000, 0, WS_SMALL, 2, 1}, {olmoe, F16, 1, 4500, 0, WS_FULL, 1, 1},
            {hd64, F16, 1, 4200, 0, WS_FULL, 2, 1},  {hd256, F16, 1, 4200, 0, WS_FULL, 2, 1},
            {qwen3, F16, 1, 16384, 0, WS_NONE, 2, 0}};
        g_q8 = 1;
        for (size_t i = 0; i < sizeof qc / sizeof qc[0]; i++) {
            g_tc = qc[i].tc;
            attn_case(qc[i].sh, qc[i].kt, qc[i].T, qc[i].np, 0, qc[i].po, qc[i].wm);
            CHECK(g_last_q8 == qc[i].want, "%s T=%lld ctx=%lld: q8_done %d, expected %d", qc[i].sh.name,
                  (long long)qc[i].T, (long long)qc[i].np, g_last_q8, qc[i].want);
        }
        g_q8 = 0;
    }
    g_tc = 0;
    test_window_sinks();
    st_threadpool_free(pool);
    return test_report();
}

#else /* !STRATA_HAVE_CUDA */

TEST_MAIN_WITHOUT_CUDA()

#endif
