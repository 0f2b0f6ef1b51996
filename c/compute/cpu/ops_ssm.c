/* ops_ssm.c - the gated DeltaNet math (ops_ssm.h): conv step, L2 norm, the chunked gated delta
 * rule (rows appended to a chunk, the chunk's close), the gated RMSNorm. Plain loops in float with
 * double sums where a norm reduces; every other sum runs in one fixed order per output value, so
 * a row's bits do not depend on which rows share its call. */
#include "ops_ssm.h"
#include "ops.h"

#include <math.h>
#include <string.h>

void st_ssm_conv_step(const float *w, float *state, const float *x, float *y, int64_t C, int64_t K) {
    for (int64_t c = 0; c < C; c++) {
        const float *wc = w + c * K;
        float acc = 0.0f;
        for (int64_t j = 0; j < K - 1; j++) acc += wc[j] * state[j * C + c];
        acc += wc[K - 1] * x[c];
        y[c] = acc / (1.0f + expf(-acc)); /* silu */
    }
    if (K > 1) {
        memmove(state, state + C, sizeof(float) * (size_t)((K - 2) * C));
        memcpy(state + (K - 2) * C, x, sizeof(float) * (size_t)C);
    }
}

void st_l2norm(float *x, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * (double)x[i];
    const float scale = 1.0f / sqrtf((float)sum + eps);
    for (int64_t i = 0; i < n; i++) x[i] *= scale;
}

/* Rows of S^T x for up to ST_GDN_BLK rows at once (one pass over S): each value summed over the
 * key dims in ascending order, as a single row's; likewise the dot products with the chunk's keys
 * (stored key dim major, so that the sums over the dims run across rows). */
#define ST_GDN_BLK 4

/* sq[b] = S^T q_b and sk[b] = S^T k_b for nb rows. */
static void st_gdn_read_state(const st_gdn_chunk *c, int64_t i0, int64_t nb, const float *q, int64_t ldq,
                              float sq[][1024], float sk[][1024]) {
    const int64_t dv = c->dv;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t j = 0; j < dv; j++) sq[b][j] = sk[b][j] = 0.0f;
    for (int64_t i = 0; i < c->dk; i++) {
        const float *row = c->S + i * dv;
        for (int64_t b = 0; b < nb; b++) {
            const float qi = q[b * ldq + i], ki = c->k[i * ST_GDN_CHUNK + i0 + b];
            float *a = sq[b], *e = sk[b];
            for (int64_t j = 0; j < dv; j++) {
                a[j] += row[j] * qi;
                e[j] += row[j] * ki;
            }
        }
    }
}

/* Row i of the chunk from sq = S^T q and sk = S^T k_i: its G and u stored, its output. */
static void st_gdn_row(const st_gdn_chunk *c, int64_t i, const float *q, const float *v, float g, float beta,
                       const float *sq, const float *sk, float *out) {
    const int64_t dv = c->dv, dk = c->dk, n = i + 1;
    const float Gi = (i > 0 ? c->G[i - 1] : 0.0f) + g, eG = expf(Gi);
    c->G[i] = Gi;
    float kk[ST_GDN_CHUNK], qk[ST_GDN_CHUNK], w[ST_GDN_CHUNK];
    for (int64_t r = 0; r < n; r++) kk[r] = qk[r] = 0.0f;
    for (int64_t e = 0; e < dk; e++) { /* k_i . k_r and q . k_r, each summed over ascending dims */
        const float *col = c->k + e * ST_GDN_CHUNK;
        const float ke = col[i], qe = q[e];
        for (int64_t r = 0; r < n; r++) {
            kk[r] += col[r] * ke;
            qk[r] += col[r] * qe;
        }
    }
    for (int64_t r = 0; r < i; r++) w[r] = expf(Gi - c->G[r]);
    w[i] = 1.0f;
    float *u = c->u + i * dv;
    for (int64_t j = 0; j < dv; j++) u[j] = beta * (v[j] - eG * sk[j]);
    for (int64_t r = 0; r < i; r++) { /* forward substitution over the earlier rows, in order */
        const float a = beta * w[r] * kk[r];
        const float *ur = c->u + r * dv;
        for (int64_t j = 0; j < dv; j++) u[j] -= a * ur[j];
    }
    for (int64_t j = 0; j < dv; j++) out[j] = eG * sq[j];
    for (int64_t r = 0; r < n; r++) {
        const float a = w[r] * qk[r];
        const float *ur = c->u + r * dv;
        for (int64_t j = 0; j < dv; j++) out[j] += a * ur[j];
    }
}

void st_gdn_chunk_rows(const st_gdn_chunk *c, int64_t i0, int64_t n, const float *q, int64_t ldq,
                       const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb,
                       float *out, int64_t ldo) {
    float sq[ST_GDN_BLK][1024], sk[ST_GDN_BLK][1024];
    for (int64_t b0 = 0; b0 < n; b0 += ST_GDN_BLK) {
        const int64_t nb = n - b0 < ST_GDN_BLK ? n - b0 : ST_GDN_BLK;
        st_gdn_read_state(c, i0 + b0, nb, q + b0 * ldq, ldq, sq, sk);
        for (int64_t b = 0; b < nb; b++) {
            const int64_t t = b0 + b;
            st_gdn_row(c, i0 + t, q + t * ldq, v + t * ldv, g[t * ldgb], beta[t * ldgb], sq[b], sk[b],
                       out + t * ldo);
        }
    }
}

void st_gdn_chunk_close(const st_gdn_chunk *c, int64_t n, float *S_next) {
    const int64_t dk = c->dk, dv = c->dv;
    const float Gn = c->G[n - 1], eG = expf(Gn);
    for (int64_t i = 0; i < dk * dv; i++) S_next[i] = eG * c->S[i];
    for (int64_t r = 0; r < n; r++) {
        const float w = expf(Gn - c->G[r]);
        const float *ur = c->u + r * dv;
        for (int64_t i = 0; i < dk; i++) {
            const float a = w * c->k[i * ST_GDN_CHUNK + r];
            float *row = S_next + i * dv;
            for (int64_t j = 0; j < dv; j++) row[j] += a * ur[j];
        }
    }
}

void st_gdn_step(float *S, const float *q, const float *k, const float *v, float g, float beta,
                 float *out, int64_t dk, int64_t dv) {
    const float decay = expf(g);
    float delta[1024]; /* dv <= 1024 (hparams.c) */
    for (int64_t j = 0; j < dv; j++) delta[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) { /* decay, and S^T k of the decayed state */
        float *row = S + i * dv;
        const float ki = k[i];
        for (int64_t j = 0; j < dv; j++) {
            row[j] *= decay;
            delta[j] += row[j] * ki;
        }
    }
    for (int64_t j = 0; j < dv; j++) {
        delta[j] = (v[j] - delta[j]) * beta;
        out[j] = 0.0f;
    }
    for (int64_t i = 0; i < dk; i++) { /* S += k (x) delta, and S^T q of the new state */
        float *row = S + i * dv;
        const float ki = k[i], qi = q[i];
        for (int64_t j = 0; j < dv; j++) {
            row[j] += ki * delta[j];
            out[j] += row[j] * qi;
        }
    }
}

void st_rmsnorm_gated(float *y, const float *x, const float *w, const float *z, int64_t n, float eps) {
    st_rmsnorm(y, x, w, n, eps);
    for (int64_t i = 0; i < n; i++) y[i] *= z[i] / (1.0f + expf(-z[i]));
}

float st_softplus(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}
