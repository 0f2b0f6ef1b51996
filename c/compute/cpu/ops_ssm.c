/* ops_ssm.c - the gated DeltaNet math on one token (ops_ssm.h): conv step, L2 norm, the gated
 * delta rule, the gated RMSNorm. Plain loops in float with double sums where a norm reduces. */
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
