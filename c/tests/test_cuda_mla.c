/* test_cuda_mla.c - the GPU kernels of latent attention (cuda_mla.h) against the CPU's own
 * functions at small shapes (and the decode split at contexts of 1, 63, 64, 1000 and 4097 at
 * DeepSeek-V2-Lite's latent width, with the prompt's last row bit for bit against decode): the absorption matmul (f32, f16, bf16, q8_0 weights, strided rows as
 * the session reads q_nope and writes the query rows) against a double-precision product of the
 * weights as strata_dequantize_row gives them; the latent cache store against st_kv_store's f16 /
 * f32 rows (v_in_k), bit for bit; the attention against st_attention with v_in_k (NMSE <= 1e-6,
 * no NaN, guard words after every output). Batch invariance, bit for bit: a prompt in one call
 * against the same tokens one by one (and in uneven pieces), the split (workspace) against the
 * block walk (no workspace), positions from the device (d_pos) against the host's, the
 * absorption of T tokens against each token alone. The fused launches of the session's decode
 * step against the launches they replace, bit for bit: st_cuda_mla_prep (latent norm, key RoPE,
 * query RoPE parts, cache store; f16 and f32 caches, normal and NEOX pairs, YaRN, a partial RoPE,
 * strided rows as the joined projection writes them) against st_cuda_rmsnorm + st_cuda_rope +
 * st_cuda_mla_copy_rows + st_cuda_rope + st_cuda_mla_store, and st_cuda_mla_absorb_q8 against
 * st_cuda_mla_absorb + st_cuda_quantize_q8_1. Skips the GPU checks, saying why, where no GPU is
 * usable. */
#include "strata.h"
#include "test.h"

#ifdef STRATA_HAVE_CUDA
#include "cuda_backend.h"
#include "cuda_mla.h"
#include "cuda_mmv.h"
#include "ops.h"
#include "strata_quant.h"
#include "threadpool.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define GUARD 64
#define SENTINEL 0xA5A5A5A5u

static test_rng rng = {0x5EED3A1AULL};
static st_threadpool *pool;

static void fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) {
        const float v = test_rng_float(&rng) * scale;
        x[i] = v != 0.0f ? v : 0.25f * scale;
    }
}

/* Device bytes + GUARD sentinel words; the bytes set to fillb. */
static void *dev_alloc(size_t bytes, int fillb) {
    void *d = NULL;
    if (st_cuda_malloc(&d, bytes + GUARD * 4) != STRATA_OK) return NULL;
    if (st_cuda_memset(d, fillb, bytes) != STRATA_OK || st_cuda_memset((uint8_t *)d + bytes, 0xA5, GUARD * 4) != STRATA_OK) {
        st_cuda_free(d);
        return NULL;
    }
    return d;
}

/* bytes back (after a sync); returns the changed guard words, -1 on error. */
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

static double nmse(const float *got, const double *ref, int64_t n, int *nan) {
    double num = 0, den = 0;
    *nan = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) (*nan)++;
        num += (got[i] - ref[i]) * (got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}

/* ---- absorption matmul ------------------------------------------------------------------------ */

/* W (cols, rows, H) of type; x rows of T tokens at stride ldx, heads xhs apart (offset xoff);
 * y likewise (yoff, gaps filled with the sentinel and checked). */
static void absorb_case(strata_type type, int64_t cols, int64_t rows, int64_t H, int64_t T, int64_t xpad,
                        int64_t ypad) {
    const int f0 = test_failed;
    char desc[160];
    snprintf(desc, sizeof desc, "absorb %s cols=%lld rows=%lld heads=%lld T=%lld%s", strata_type_name(type),
             (long long)cols, (long long)rows, (long long)H, (long long)T, xpad || ypad ? " strided" : "");
    const size_t rb = (size_t)strata_row_bytes(type, cols), wbytes = rb * (size_t)(rows * H);
    const int64_t xhs = cols + xpad, ldx = H * xhs, yhs = rows + ypad, ldy = H * yhs;
    uint8_t *w = malloc(wbytes);
    float *wf = malloc(sizeof(float) * (size_t)cols), *src = malloc(sizeof(float) * (size_t)cols);
    float *x = malloc(sizeof(float) * (size_t)(T * ldx)), *y = malloc(sizeof(float) * (size_t)(T * ldy));
    float *y1 = malloc(sizeof(float) * (size_t)(T * ldy));
    double *ref = malloc(sizeof(double) * (size_t)(T * H * rows));
    float *got = malloc(sizeof(float) * (size_t)(T * H * rows));
    for (int64_t r = 0; r < rows * H; r++) {
        fill(src, cols, 0.5f);
        strata_quantize_row(type, src, w + (size_t)r * rb, cols);
    }
    fill(x, T * ldx, 1.0f);
    for (int64_t h = 0; h < H; h++)
        for (int64_t j = 0; j < rows; j++) {
            strata_dequantize_row(type, w + (size_t)(h * rows + j) * rb, wf, cols);
            for (int64_t t = 0; t < T; t++) {
                double acc = 0;
                for (int64_t i = 0; i < cols; i++) acc += (double)wf[i] * x[t * ldx + h * xhs + i];
                ref[(t * H + h) * rows + j] = acc;
            }
        }
    void *dw = dev_alloc(wbytes, 0), *dx = dev_alloc(sizeof(float) * (size_t)(T * ldx), 0);
    void *dy = dev_alloc(sizeof(float) * (size_t)(T * ldy), 0xA5);
    CHECK(dw && dx && dy, "%s: device memory", desc);
    if (!dw || !dx || !dy) goto done;
    st_cuda_memcpy_h2d(dw, w, wbytes);
    st_cuda_memcpy_h2d(dx, x, sizeof(float) * (size_t)(T * ldx));
    const st_cuda_mla_w W = {type, dw, cols, rows, H, rb};
    strata_status st = st_cuda_mla_absorb(&W, dx, ldx, xhs, dy, ldy, yhs, T, NULL);
    CHECK(st == STRATA_OK, "%s: %s", desc, strata_last_error());
    const int bad = dev_fetch(y, dy, sizeof(float) * (size_t)(T * ldy));
    CHECK(bad == 0, "%s: %d guard words changed", desc, bad);
    int gaps = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            memcpy(got + (t * H + h) * rows, y + t * ldy + h * yhs, sizeof(float) * (size_t)rows);
            for (int64_t j = rows; j < yhs; j++) {
                uint32_t u;
                memcpy(&u, y + t * ldy + h * yhs + j, 4);
                gaps += u != SENTINEL;
            }
        }
    int nan;
    const double e = nmse(got, ref, T * H * rows, &nan);
    CHECK(e <= 1e-10 && nan == 0, "%s: NMSE %.3e (<= 1e-10), %d non-finite", desc, e, nan);
    CHECK(gaps == 0, "%s: %d values written into the gaps between heads", desc, gaps);
    /* each token alone: the same bits */
    int diff = 0;
    for (int64_t t = 0; t < T; t++) {
        st = st_cuda_mla_absorb(&W, (const float *)dx + t * ldx, ldx, xhs, (float *)dy + t * ldy, ldy, yhs, 1, NULL);
        CHECK(st == STRATA_OK, "%s: %s", desc, strata_last_error());
    }
    dev_fetch(y1, dy, sizeof(float) * (size_t)(T * ldy));
    diff = memcmp(y, y1, sizeof(float) * (size_t)(T * ldy)) != 0;
    CHECK(!diff, "%s: token-by-token results differ from the batch's", desc);
    printf("%s %-60s NMSE %.2e\n", test_failed == f0 ? "PASS" : "FAIL", desc, e);
done:
    st_cuda_free(dw); st_cuda_free(dx); st_cuda_free(dy);
    free(w); free(wf); free(src); free(x); free(y); free(y1); free(ref); free(got);
}

/* st_cuda_mla_absorb_q8 (T tokens, dense rows) against st_cuda_mla_absorb then
 * st_cuda_quantize_q8_1 of its rows: the same values and Q8_1 bytes, guards intact. */
static void absorb_q8_case(strata_type type, int64_t cols, int64_t rows, int64_t H, int64_t T, int64_t xpad) {
    const int f0 = test_failed;
    char desc[160];
    snprintf(desc, sizeof desc, "absorb_q8 %s cols=%lld rows=%lld heads=%lld T=%lld", strata_type_name(type),
             (long long)cols, (long long)rows, (long long)H, (long long)T);
    const size_t rb = (size_t)strata_row_bytes(type, cols), wbytes = rb * (size_t)(rows * H);
    const int64_t xhs = cols + xpad, ldx = H * xhs, ny = T * H * rows;
    const size_t qb = (size_t)(ny / 32) * 36;
    uint8_t *w = malloc(wbytes), *q1 = malloc(qb), *q2 = malloc(qb);
    float *src = malloc(sizeof(float) * (size_t)cols), *x = malloc(sizeof(float) * (size_t)(T * ldx));
    float *y1 = malloc(sizeof(float) * (size_t)ny), *y2 = malloc(sizeof(float) * (size_t)ny);
    for (int64_t r = 0; r < rows * H; r++) {
        fill(src, cols, 0.5f);
        strata_quantize_row(type, src, w + (size_t)r * rb, cols);
    }
    fill(x, T * ldx, 1.0f);
    void *dw = dev_alloc(wbytes, 0), *dx = dev_alloc(sizeof(float) * (size_t)(T * ldx), 0);
    void *dy1 = dev_alloc(sizeof(float) * (size_t)ny, 0), *dy2 = dev_alloc(sizeof(float) * (size_t)ny, 0);
    void *dq1 = dev_alloc(qb, 0), *dq2 = dev_alloc(qb, 0);
    CHECK(dw && dx && dy1 && dy2 && dq1 && dq2, "%s: device memory", desc);
    if (!dw || !dx || !dy1 || !dy2 || !dq1 || !dq2) goto done;
    st_cuda_memcpy_h2d(dw, w, wbytes);
    st_cuda_memcpy_h2d(dx, x, sizeof(float) * (size_t)(T * ldx));
    const st_cuda_mla_w W = {type, dw, cols, rows, H, rb};
    CHECK(st_cuda_mla_absorb(&W, dx, ldx, xhs, dy1, H * rows, rows, T, NULL) == STRATA_OK &&
          st_cuda_quantize_q8_1(dy1, dq1, ny, NULL) == STRATA_OK, "%s: unfused: %s", desc, strata_last_error());
    CHECK(st_cuda_mla_absorb_q8(&W, dx, ldx, xhs, dy2, T, dq2, NULL) == STRATA_OK, "%s: %s", desc,
          strata_last_error());
    const int b1 = dev_fetch(y1, dy1, sizeof(float) * (size_t)ny) + dev_fetch(q1, dq1, qb);
    const int b2 = dev_fetch(y2, dy2, sizeof(float) * (size_t)ny) + dev_fetch(q2, dq2, qb);
    CHECK(b1 == 0 && b2 == 0, "%s: guard words changed (%d, %d)", desc, b1, b2);
    CHECK(memcmp(y1, y2, sizeof(float) * (size_t)ny) == 0, "%s: values differ from st_cuda_mla_absorb's", desc);
    CHECK(memcmp(q1, q2, qb) == 0, "%s: Q8_1 rows differ from st_cuda_quantize_q8_1's", desc);
    printf("%s %s\n", test_failed == f0 ? "PASS" : "FAIL", desc);
done:
    st_cuda_free(dw); st_cuda_free(dx); st_cuda_free(dy1); st_cuda_free(dy2); st_cuda_free(dq1); st_cuda_free(dq2);
    free(w); free(q1); free(q2); free(src); free(x); free(y1); free(y2);
}

/* ---- the fused attention inputs (st_cuda_mla_prep) --------------------------------------------- */

/* T tokens at pos0 (positions from the device), H heads of hk = nope + nr q values at stride lq
 * (the joined projection's rows when lq is wider), latent rows at stride lkv: st_cuda_mla_prep
 * against the five launches it replaces; the latent rows, the query rows (their latent parts
 * keep their poison) and the cache, bit for bit. */
static void prep_case(const st_cuda_rope_params *rp, int H, int R, int nr, int nope, strata_type kvt, int64_t T,
                      int64_t pos0, int64_t lpad, const char *name) {
    const int f0 = test_failed;
    const int64_t D = R + nr, hk = nope + nr, lq = H * hk + lpad, lkv = lpad ? lq : D, ldq = H * D;
    const int64_t n_ctx = pos0 + T + 2;
    const size_t el = kvt == STRATA_TYPE_F16 ? 2 : 4, kvb = (size_t)(n_ctx * D) * el;
    const float eps = 1e-6f;
    char desc[200];
    snprintf(desc, sizeof desc, "prep %s %s H=%d R=%d rope=%d/%d T=%lld pos0=%lld%s", name, strata_type_name(kvt), H, R,
             (int)rp->n_rot, nr, (long long)T, (long long)pos0, lpad ? " joined rows" : "");
    const st_cuda_mla_shape gs = {H, R, nr, 0.1f};
    CHECK(st_cuda_mla_prep_supports(rp, &gs), "%s: not supported", desc);
    const size_t nq = (size_t)(T * lq), nkv = (size_t)(T * lkv);
    float *qh = malloc(sizeof(float) * nq), *kvh = malloc(sizeof(float) * nkv), *wn = malloc(sizeof(float) * (size_t)R);
    float *o1 = malloc(sizeof(float) * (size_t)(T * ldq)), *o2 = malloc(sizeof(float) * (size_t)(T * ldq));
    float *k1 = malloc(sizeof(float) * nkv), *k2 = malloc(sizeof(float) * nkv);
    uint8_t *c1 = malloc(kvb), *c2 = malloc(kvb);
    int32_t *ph = malloc(sizeof(int32_t) * (size_t)T);
    fill(qh, (int64_t)nq, 1.0f);
    fill(kvh, (int64_t)nkv, 2.0f);
    fill(wn, R, 1.0f);
    for (int64_t t = 0; t < T; t++) ph[t] = (int32_t)(pos0 + t);
    float *dq = dev_alloc(sizeof(float) * nq, 0), *dw = dev_alloc(sizeof(float) * (size_t)R, 0);
    float *dkv1 = dev_alloc(sizeof(float) * nkv, 0), *dkv2 = dev_alloc(sizeof(float) * nkv, 0);
    float *dq1 = dev_alloc(sizeof(float) * (size_t)(T * ldq), 0xA5), *dq2 = dev_alloc(sizeof(float) * (size_t)(T * ldq), 0xA5);
    void *dc1 = dev_alloc(kvb, 0xFF), *dc2 = dev_alloc(kvb, 0xFF);
    int32_t *dpos = dev_alloc(sizeof(int32_t) * (size_t)T, 0);
    CHECK(dq && dw && dkv1 && dkv2 && dq1 && dq2 && dc1 && dc2 && dpos, "%s: device memory", desc);
    if (!dq || !dw || !dkv1 || !dkv2 || !dq1 || !dq2 || !dc1 || !dc2 || !dpos) goto done;
    st_cuda_memcpy_h2d(dq, qh, sizeof(float) * nq);
    st_cuda_memcpy_h2d(dw, wn, sizeof(float) * (size_t)R);
    st_cuda_memcpy_h2d(dkv1, kvh, sizeof(float) * nkv);
    st_cuda_memcpy_h2d(dkv2, kvh, sizeof(float) * nkv);
    st_cuda_memcpy_h2d(dpos, ph, sizeof(int32_t) * (size_t)T);
    const st_cuda_kv_layer kv1 = {kvt, dc1, NULL, n_ctx}, kv2 = {kvt, dc2, NULL, n_ctx};
    /* the launches the session made before (st_gpu_mla_block's fallback) */
    strata_status st = st_cuda_rmsnorm(dkv1, lkv, dkv1, lkv, dw, R, 1, T, eps, NULL);
    if (st == STRATA_OK) st = st_cuda_rope(rp, dkv1 + R, lkv, 1, nr, T, dpos, pos0, NULL);
    for (int64_t t = 0; t < T && st == STRATA_OK; t++) /* a token's heads at stride hk, its row at lq */
        st = st_cuda_mla_copy_rows(dq1 + t * ldq + R, D, dq + t * lq + nope, hk, nr, H, NULL);
    if (st == STRATA_OK) st = st_cuda_rope(rp, dq1 + R, ldq, H, D, T, dpos, pos0, NULL);
    if (st == STRATA_OK) st = st_cuda_mla_store(&kv1, &gs, dkv1, lkv, T, pos0, dpos, NULL);
    CHECK(st == STRATA_OK, "%s: unfused: %s", desc, strata_last_error());
    st = st_cuda_mla_prep(rp, &kv2, &gs, dkv2, lkv, dw, eps, dq + nope, lq, hk, dq2, ldq, T, pos0, dpos, NULL);
    CHECK(st == STRATA_OK, "%s: %s", desc, strata_last_error());
    int bad = dev_fetch(o1, dq1, sizeof(float) * (size_t)(T * ldq)) + dev_fetch(o2, dq2, sizeof(float) * (size_t)(T * ldq));
    bad += dev_fetch(k1, dkv1, sizeof(float) * nkv) + dev_fetch(k2, dkv2, sizeof(float) * nkv);
    bad += dev_fetch(c1, dc1, kvb) + dev_fetch(c2, dc2, kvb);
    CHECK(bad == 0, "%s: %d guard words changed", desc, bad);
    CHECK(memcmp(k1, k2, sizeof(float) * nkv) == 0, "%s: latent rows differ from the unfused launches'", desc);
    CHECK(memcmp(o1, o2, sizeof(float) * (size_t)(T * ldq)) == 0, "%s: query rows differ from the unfused launches'", desc);
    CHECK(memcmp(c1, c2, kvb) == 0, "%s: the cache differs from the unfused launches'", desc);
    int poison = 0, moved = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < R; i++) {
                uint32_t u;
                memcpy(&u, o2 + t * ldq + h * D + i, 4);
                poison += u != SENTINEL;
            }
    for (size_t i = 0; i < nkv; i++) moved += k2[i] != kvh[i];
    CHECK(poison == 0, "%s: %d latent parts of the query rows written", desc, poison);
    CHECK(moved > 0, "%s: the latent rows were not touched", desc);
    printf("%s %s\n", test_failed == f0 ? "PASS" : "FAIL", desc);
done:
    st_cuda_free(dq); st_cuda_free(dw); st_cuda_free(dkv1); st_cuda_free(dkv2); st_cuda_free(dq1); st_cuda_free(dq2);
    st_cuda_free(dc1); st_cuda_free(dc2); st_cuda_free(dpos);
    free(qh); free(kvh); free(wn); free(o1); free(o2); free(k1); free(k2); free(c1); free(c2); free(ph);
}

/* ---- store and attention ---------------------------------------------------------------------- */

typedef struct { const char *name; int H, R, nr; } mla_shape_t;

/* GPU attention of T tokens at pos0 over cache dk (rows of positions < pos0 + T stored), into out
 * (T, H*R + po), with or without the workspace, positions from the host or the device. */
static strata_status gpu_attn(const st_cuda_kv_layer *kv, const st_cuda_mla_shape *s, const float *dq, int64_t ldq,
                              int64_t T, int64_t pos0, const int32_t *dpos, float *dout, int64_t ldo, void *ws,
                              size_t wsb) {
    return st_cuda_mla_attention(kv, s, dq, ldq, T, pos0, dpos, dout, ldo, ws, wsb, NULL);
}

/* One shape, cache type and context np: the store against st_kv_store, the prompt (np tokens
 * from 0) against st_attention, then bit-identity with token by token, uneven pieces, no
 * workspace, and device positions. */
static void attn_case(mla_shape_t sh, strata_type kvt, int64_t np, int64_t po) {
    const int64_t H = sh.H, R = sh.R, D = sh.R + sh.nr, n_ctx = np + 3;
    const int64_t ldq = H * D, ldo = H * R + po;
    const size_t el = kvt == STRATA_TYPE_F16 ? 2 : 4, kvb = (size_t)(n_ctx * D) * el;
    const float scale = 0.7f / sqrtf((float)(D - sh.nr / 2));
    const int f0 = test_failed;
    char desc[160];
    snprintf(desc, sizeof desc, "attn %s %s H=%d R=%d rope=%d ctx=%lld%s", sh.name, strata_type_name(kvt), sh.H, sh.R,
             sh.nr, (long long)np, po ? " strided" : "");
    const st_cuda_mla_shape gs = {sh.H, sh.R, sh.nr, scale};
    CHECK(st_cuda_mla_supports(kvt, &gs), "%s: not supported", desc);
    const st_attn_shape cs = {.n_head = sh.H, .n_head_kv = 1, .head_dim = (int32_t)D, .head_dim_v = sh.R, .scale = scale, .v_in_k = 1};
    float *k = malloc(sizeof(float) * (size_t)(np * D)), *q = malloc(sizeof(float) * (size_t)(np * ldq));
    float *ref = malloc(sizeof(float) * (size_t)(np * H * R));
    double *refd = malloc(sizeof(double) * (size_t)(np * H * R));
    float *got = malloc(sizeof(float) * (size_t)(np * ldo)), *got2 = malloc(sizeof(float) * (size_t)(np * ldo));
    float *packed = malloc(sizeof(float) * (size_t)(np * H * R));
    uint8_t *ccache = calloc((size_t)(n_ctx * D), el), *gcache = malloc(kvb);
    float *scratch = malloc(sizeof(float) * (size_t)st_threadpool_n_threads(pool) * (size_t)n_ctx);
    fill(k, np * D, 1.0f);
    fill(q, np * ldq, 1.0f);
    st_kv_layer ckv = {kvt, ccache, NULL, n_ctx};
    st_kv_store(&ckv, &cs, k, NULL, np, 0);
    st_attention(pool, &ckv, &cs, q, np, 0, ref, scratch);
    for (int64_t i = 0; i < np * H * R; i++) refd[i] = ref[i];

    const size_t wsb = st_cuda_mla_wsize(&gs, 2, n_ctx);
    void *dk = dev_alloc(kvb, 0xFF), *dq = dev_alloc(sizeof(float) * (size_t)(np * ldq), 0);
    void *dout = dev_alloc(sizeof(float) * (size_t)(np * ldo), 0xA5), *dkr = dev_alloc(sizeof(float) * (size_t)(np * D), 0);
    void *dws = dev_alloc(wsb, 0), *dpos = dev_alloc(sizeof(int32_t) * 4, 0);
    CHECK(dk && dq && dout && dkr && dws && dpos, "%s: device memory", desc);
    if (!dk || !dq || !dout || !dkr || !dws || !dpos) goto done;
    st_cuda_memcpy_h2d(dq, q, sizeof(float) * (size_t)(np * ldq));
    st_cuda_memcpy_h2d(dkr, k, sizeof(float) * (size_t)(np * D));
    const st_cuda_kv_layer gkv = {kvt, dk, NULL, n_ctx};
    /* the store: the CPU's rows bit for bit, the positions past np keep their poison */
    CHECK(st_cuda_mla_store(&gkv, &gs, dkr, D, np, 0, NULL, NULL) == STRATA_OK, "%s: store: %s", desc, strata_last_error());
    CHECK(dev_fetch(gcache, dk, kvb) == 0, "%s: store wrote past the cache", desc);
    CHECK(memcmp(gcache, ccache, (size_t)(np * D) * el) == 0, "%s: stored rows differ from st_kv_store's", desc);
    int poison = 0;
    for (size_t i = (size_t)(np * D) * el; i < kvb; i++) poison += gcache[i] != 0xFF;
    CHECK(poison == 0, "%s: %d bytes past the stored positions changed", desc, poison);

    /* the prompt in one call, with the library's choice (the split for short calls) */
    strata_status st = gpu_attn(&gkv, &gs, dq, ldq, np, 0, NULL, dout, ldo, dws, wsb);
    CHECK(st == STRATA_OK, "%s: %s", desc, strata_last_error());
    CHECK(dev_fetch(got, dout, sizeof(float) * (size_t)(np * ldo)) == 0, "%s: guard words changed", desc);
    int gaps = 0;
    for (int64_t t = 0; t < np; t++) {
        memcpy(packed + t * H * R, got + t * ldo, sizeof(float) * (size_t)(H * R));
        for (int64_t i = H * R; i < ldo; i++) {
            uint32_t u;
            memcpy(&u, got + t * ldo + i, 4);
            gaps += u != SENTINEL;
        }
    }
    int nan;
    const double e = nmse(packed, refd, np * H * R, &nan);
    CHECK(e <= 1e-6 && nan == 0, "%s: NMSE %.3e against st_attention (<= 1e-6), %d non-finite", desc, e, nan);
    CHECK(gaps == 0, "%s: %d values in the output's gaps", desc, gaps);

    /* token by token with the workspace (the split), positions from the device */
    for (int64_t t = 0; t < np; t++) {
        const int32_t p = (int32_t)t;
        st_cuda_memcpy_h2d(dpos, &p, sizeof p);
        st = gpu_attn(&gkv, &gs, (const float *)dq + t * ldq, ldq, 1, t, dpos, (float *)dout + t * ldo, ldo, dws, wsb);
        CHECK(st == STRATA_OK, "%s: token %lld: %s", desc, (long long)t, strata_last_error());
    }
    dev_fetch(got2, dout, sizeof(float) * (size_t)(np * ldo));
    CHECK(memcmp(got, got2, sizeof(float) * (size_t)(np * ldo)) == 0, "%s: token by token differs from the prompt", desc);
    /* uneven pieces (1, 2, 3, ...) without workspace: the block walk */
    for (int64_t t = 0, n = 1; t < np; t += n, n++) {
        const int64_t m = t + n > np ? np - t : n;
        st = gpu_attn(&gkv, &gs, (const float *)dq + t * ldq, ldq, m, t, NULL, (float *)dout + t * ldo, ldo, NULL, 0);
        CHECK(st == STRATA_OK, "%s: piece at %lld: %s", desc, (long long)t, strata_last_error());
    }
    dev_fetch(got2, dout, sizeof(float) * (size_t)(np * ldo));
    CHECK(memcmp(got, got2, sizeof(float) * (size_t)(np * ldo)) == 0, "%s: pieces without workspace differ", desc);
    printf("%s %-60s NMSE %.2e\n", test_failed == f0 ? "PASS" : "FAIL", desc, e);
done:
    st_cuda_free(dk); st_cuda_free(dq); st_cuda_free(dout); st_cuda_free(dkr); st_cuda_free(dws); st_cuda_free(dpos);
    free(k); free(q); free(ref); free(refd); free(got); free(got2); free(packed); free(ccache); free(gcache);
    free(scratch);
}

/* The decode split at a context of np positions: one token at np - 1 against st_attention (NMSE
 * <= 1e-6), and bit for bit against the block walk (no workspace), the whole prompt in one call
 * and the prompt in two pieces (the last token's rows: batching invariance). */
static void split_case(mla_shape_t sh, strata_type kvt, int64_t np) {
    const int64_t H = sh.H, R = sh.R, D = sh.R + sh.nr, n_ctx = np + 5, ldq = H * D, ldo = H * R;
    const size_t el = kvt == STRATA_TYPE_F16 ? 2 : 4, kvb = (size_t)(n_ctx * D) * el;
    const float scale = 0.7f / sqrtf((float)(D - sh.nr / 2));
    const int f0 = test_failed;
    char desc[160];
    snprintf(desc, sizeof desc, "split %s %s H=%d R=%d rope=%d ctx=%lld", sh.name, strata_type_name(kvt), sh.H, sh.R,
             sh.nr, (long long)np);
    const st_cuda_mla_shape gs = {sh.H, sh.R, sh.nr, scale};
    const st_attn_shape cs = {.n_head = sh.H, .n_head_kv = 1, .head_dim = (int32_t)D, .head_dim_v = sh.R, .scale = scale, .v_in_k = 1};
    float *k = malloc(sizeof(float) * (size_t)(np * D)), *q = malloc(sizeof(float) * (size_t)(np * ldq));
    float *ref = malloc(sizeof(float) * (size_t)ldo), *dec = malloc(sizeof(float) * (size_t)ldo);
    float *other = malloc(sizeof(float) * (size_t)ldo);
    double *refd = malloc(sizeof(double) * (size_t)ldo);
    uint8_t *ccache = calloc((size_t)(n_ctx * D), el);
    float *scratch = malloc(sizeof(float) * (size_t)st_threadpool_n_threads(pool) * (size_t)n_ctx);
    fill(k, np * D, 1.0f);
    fill(q, np * ldq, 1.0f);
    st_kv_layer ckv = {kvt, ccache, NULL, n_ctx};
    st_kv_store(&ckv, &cs, k, NULL, np, 0);
    st_attention(pool, &ckv, &cs, q + (np - 1) * ldq, 1, np - 1, ref, scratch);
    for (int64_t i = 0; i < ldo; i++) refd[i] = ref[i];
    const size_t wsb = st_cuda_mla_wsize(&gs, 1, n_ctx);
    void *dk = dev_alloc(kvb, 0xFF), *dq = dev_alloc(sizeof(float) * (size_t)(np * ldq), 0);
    void *dout = dev_alloc(sizeof(float) * (size_t)(np * ldo), 0xA5), *dkr = dev_alloc(sizeof(float) * (size_t)(np * D), 0);
    void *dws = dev_alloc(wsb, 0);
    CHECK(dk && dq && dout && dkr && dws && wsb > 0, "%s: device memory", desc);
    if (!dk || !dq || !dout || !dkr || !dws) goto done;
    st_cuda_memcpy_h2d(dq, q, sizeof(float) * (size_t)(np * ldq));
    st_cuda_memcpy_h2d(dkr, k, sizeof(float) * (size_t)(np * D));
    const st_cuda_kv_layer gkv = {kvt, dk, NULL, n_ctx};
    CHECK(st_cuda_mla_store(&gkv, &gs, dkr, D, np, 0, NULL, NULL) == STRATA_OK, "%s: store: %s", desc, strata_last_error());
    float *last = (float *)dout + (np - 1) * ldo;
    const float *qlast = (const float *)dq + (np - 1) * ldq;
    /* decode with the workspace: the split */
    CHECK(gpu_attn(&gkv, &gs, qlast, ldq, 1, np - 1, NULL, last, ldo, dws, wsb) == STRATA_OK, "%s: %s", desc,
          strata_last_error());
    CHECK(dev_fetch(NULL, dout, sizeof(float) * (size_t)(np * ldo)) == 0, "%s: guard words changed", desc);
    st_cuda_memcpy_d2h(dec, last, sizeof(float) * (size_t)ldo);
    int nan;
    const double e = nmse(dec, refd, ldo, &nan);
    CHECK(e <= 1e-6 && nan == 0, "%s: NMSE %.3e against st_attention (<= 1e-6), %d non-finite", desc, e, nan);
    /* the block walk (no workspace) */
    CHECK(gpu_attn(&gkv, &gs, qlast, ldq, 1, np - 1, NULL, last, ldo, NULL, 0) == STRATA_OK, "%s: %s", desc,
          strata_last_error());
    st_cuda_synchronize();
    st_cuda_memcpy_d2h(other, last, sizeof(float) * (size_t)ldo);
    CHECK(memcmp(dec, other, sizeof(float) * (size_t)ldo) == 0, "%s: the walk differs from the split", desc);
    /* the prompt in one call, then in two pieces: the last token's rows */
    CHECK(gpu_attn(&gkv, &gs, dq, ldq, np, 0, NULL, dout, ldo, dws, wsb) == STRATA_OK, "%s: %s", desc,
          strata_last_error());
    st_cuda_synchronize();
    st_cuda_memcpy_d2h(other, last, sizeof(float) * (size_t)ldo);
    CHECK(memcmp(dec, other, sizeof(float) * (size_t)ldo) == 0, "%s: the prompt's last row differs from decode", desc);
    const int64_t half = np / 2;
    if (half > 0)
        CHECK(gpu_attn(&gkv, &gs, dq, ldq, half, 0, NULL, dout, ldo, dws, wsb) == STRATA_OK, "%s: %s", desc,
              strata_last_error());
    CHECK(gpu_attn(&gkv, &gs, (const float *)dq + half * ldq, ldq, np - half, half, NULL, (float *)dout + half * ldo,
                   ldo, dws, wsb) == STRATA_OK, "%s: %s", desc, strata_last_error());
    st_cuda_synchronize();
    st_cuda_memcpy_d2h(other, last, sizeof(float) * (size_t)ldo);
    CHECK(memcmp(dec, other, sizeof(float) * (size_t)ldo) == 0, "%s: two pieces' last row differs from decode", desc);
    printf("%s %-60s NMSE %.2e\n", test_failed == f0 ? "PASS" : "FAIL", desc, e);
done:
    st_cuda_free(dk); st_cuda_free(dq); st_cuda_free(dout); st_cuda_free(dkr); st_cuda_free(dws);
    free(k); free(q); free(ref); free(dec); free(other); free(refd); free(ccache); free(scratch);
}

/* Argument errors need no device. */
static void test_arguments(void) {
    const st_cuda_mla_shape s = {16, 512, 64, 0.1f};
    CHECK(st_cuda_mla_supports(STRATA_TYPE_F16, &s) && st_cuda_mla_supports(STRATA_TYPE_F32, &s), "V3 shape");
    const st_cuda_mla_shape big = {16, 1024, 64, 0.1f}, odd = {16, 33, 64, 0.1f};
    CHECK(!st_cuda_mla_supports(STRATA_TYPE_F16, &big) && !st_cuda_mla_supports(STRATA_TYPE_F16, &odd) &&
          !st_cuda_mla_supports(STRATA_TYPE_Q8_0, &s), "unsupported shapes and cache types");
    CHECK(st_cuda_mla_kv_bytes(STRATA_TYPE_F16, &s, 10) == 10 * 576 * 2, "kv bytes");
    CHECK(st_cuda_mla_wsize(&s, 1, 256) == 16 * 4 * 514 * 4 && st_cuda_mla_wsize(&s, 64, 512) == 8 * 16 * 8 * 514 * 4,
          "workspace: %zu, %zu", st_cuda_mla_wsize(&s, 1, 256), st_cuda_mla_wsize(&s, 64, 512));
    CHECK(st_cuda_mla_absorb_supports(STRATA_TYPE_Q8_0, 128) && !st_cuda_mla_absorb_supports(STRATA_TYPE_Q8_0, 48) &&
          st_cuda_mla_absorb_supports(STRATA_TYPE_BF16, 48) && !st_cuda_mla_absorb_supports(STRATA_TYPE_Q4_K, 256),
          "absorb types");
    const st_cuda_kv_layer kv = {STRATA_TYPE_F16, (void *)(uintptr_t)0x100000, NULL, 100};
    CHECK(st_cuda_mla_attention(&kv, &s, (float *)(uintptr_t)0x200000, 16 * 576, 5, 96, NULL,
                                (float *)(uintptr_t)0x300000, 16 * 512, NULL, 0, NULL) == STRATA_ERR_INVALID_ARG,
          "positions past the cache");
    CHECK(st_cuda_mla_attention(&kv, &s, (float *)(uintptr_t)0x200000, 100, 1, 0, NULL,
                                (float *)(uintptr_t)0x300000, 16 * 512, NULL, 0, NULL) == STRATA_ERR_INVALID_ARG,
          "ldq too small");
    const st_cuda_mla_w w = {STRATA_TYPE_F16, (void *)(uintptr_t)0x100000, 128, 512, 16, 256};
    CHECK(st_cuda_mla_absorb(&w, (float *)(uintptr_t)0x200000, 16 * 100, 100, (float *)(uintptr_t)0x300000,
                             16 * 512, 512, 1, NULL) == STRATA_ERR_INVALID_ARG, "x head stride below cols");
    const st_cuda_mla_w w48 = {STRATA_TYPE_F16, (void *)(uintptr_t)0x100000, 128, 48, 16, 256};
    CHECK(st_cuda_mla_absorb_q8(&w, (float *)(uintptr_t)0x200000, 16 * 128, 128, (float *)(uintptr_t)0x300000, 9,
                                (void *)(uintptr_t)0x400000, NULL) == STRATA_ERR_INVALID_ARG &&
          st_cuda_mla_absorb_q8(&w48, (float *)(uintptr_t)0x200000, 16 * 128, 128, (float *)(uintptr_t)0x300000, 1,
                                (void *)(uintptr_t)0x400000, NULL) == STRATA_ERR_INVALID_ARG,
          "absorb_q8: T past 8, rows not a multiple of 32");
    const st_cuda_rope_params rp = {0, 64, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, 4096, 0};
    const st_cuda_rope_params rp128 = {0, 128, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, 4096, 0};
    const st_cuda_mla_shape small = {16, 256, 64, 0.1f};
    CHECK(st_cuda_mla_prep_supports(&rp, &s) && !st_cuda_mla_prep_supports(&rp, &small) &&
          !st_cuda_mla_prep_supports(&rp128, &s), "prep: kv_lora above 256, n_rot within the key part");
    CHECK(st_cuda_mla_prep(&rp, &kv, &s, (float *)(uintptr_t)0x200000, 576, (float *)(uintptr_t)0x300000, 1e-6f,
                           (float *)(uintptr_t)0x400000, 16 * 192, 192, (float *)(uintptr_t)0x500000, 16 * 576, 5, 96,
                           NULL, NULL) == STRATA_ERR_INVALID_ARG, "prep: positions past the cache");
}

int main(void) {
    test_arguments();
    int available = 0;
    char reason[256];
    CHECK(st_cuda_probe(&available, reason, sizeof reason) == STRATA_OK, "probe: %s", strata_last_error());
    if (!available) {
        SKIP("GPU checks: CUDA unavailable: %s", reason);
        return test_report();
    }
    printf("device: %s\n", reason);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(st_threadpool_create(ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu, &pool) == STRATA_OK, "thread pool");

    const strata_type types[4] = {STRATA_TYPE_F32, STRATA_TYPE_F16, STRATA_TYPE_BF16, STRATA_TYPE_Q8_0};
    for (int i = 0; i < 4; i++) {
        absorb_case(types[i], 128, 512, 4, 3, 64, 64);   /* wk_b at V3's widths: q_nope -> the query rows */
        absorb_case(types[i], 512, 128, 4, 11, 0, 0);    /* wv_b */
        absorb_case(types[i], 32, 48, 3, 9, 16, 8);      /* tiny */
    }
    absorb_case(STRATA_TYPE_F16, 20, 7, 5, 17, 4, 0);
    for (int64_t T = 1; T <= 8; T += 7) { /* wv_b at Lite's widths, into the output GEMV's Q8_1 rows */
        absorb_q8_case(STRATA_TYPE_F16, 512, 128, 4, T, 0);
        absorb_q8_case(STRATA_TYPE_Q8_0, 512, 128, 4, T, 32);
        absorb_q8_case(STRATA_TYPE_BF16, 64, 96, 3, T, 0);
    }
    absorb_q8_case(STRATA_TYPE_F32, 128, 64, 2, 3, 0);
    /* the fused attention inputs: Lite's latent (512 + 64, q heads of 128 + 64) */
    const st_cuda_rope_params rn = {0, 64, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, 4096, 0};
    const st_cuda_rope_params rx = {1, 64, 10000.0f, 0.025f, 1.0f, 1.0f, 32.0f, 1.0f, 4096, 0}; /* NEOX, YaRN */
    const st_cuda_rope_params rh = {0, 32, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, 4096, 0};  /* half the key part */
    prep_case(&rn, 16, 512, 64, 128, STRATA_TYPE_F16, 1, 575, 0, "lite");
    prep_case(&rn, 16, 512, 64, 128, STRATA_TYPE_F16, 1, 0, 576, "lite");
    prep_case(&rx, 16, 512, 64, 128, STRATA_TYPE_F32, 8, 100, 576, "lite");
    prep_case(&rn, 16, 512, 64, 128, STRATA_TYPE_F16, 37, 3, 0, "lite");
    prep_case(&rh, 3, 290, 64, 40, STRATA_TYPE_F32, 5, 7, 0, "odd");
    const st_cuda_rope_params rx32 = {1, 32, 50000.0f, 0.25f, 1.0f, 1.0f, 32.0f, 1.0f, 4096, 0};
    prep_case(&rx32, 5, 258, 32, 16, STRATA_TYPE_F16, 2, 1, 290, "odd");
    const mla_shape_t tiny = {"tiny", 4, 32, 16}, mid = {"mid", 16, 64, 32}, odd = {"odd", 3, 40, 8},
                      v3 = {"v3-8h", 8, 512, 64};
    const int64_t ctxs[] = {1, 7, 33, 300, 600};
    for (size_t i = 0; i < sizeof ctxs / sizeof ctxs[0]; i++) {
        attn_case(tiny, STRATA_TYPE_F16, ctxs[i], 0);
        attn_case(mid, STRATA_TYPE_F32, ctxs[i], 0);
        attn_case(odd, STRATA_TYPE_F16, ctxs[i], 8);
    }
    attn_case(v3, STRATA_TYPE_F16, 300, 0);
    attn_case(v3, STRATA_TYPE_F32, 70, 16);
    /* the decode split across contexts (chunk edges at 64), DeepSeek-V2-Lite's latent width */
    const mla_shape_t lite = {"lite-8h", 8, 512, 64};
    const int64_t sctx[] = {1, 63, 64, 1000, 4097};
    for (size_t i = 0; i < sizeof sctx / sizeof sctx[0]; i++) {
        split_case(lite, STRATA_TYPE_F16, sctx[i]);
        split_case(mid, STRATA_TYPE_F32, sctx[i]);
    }
    st_threadpool_free(pool);
    return test_report();
}

#else /* !STRATA_HAVE_CUDA */

TEST_MAIN_WITHOUT_CUDA()

#endif
