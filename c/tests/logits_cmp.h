/* logits_cmp.h - comparing two logit rows in the GPU-vs-CPU tests (test_cuda_session.c,
 * test_cuda_deltanet.c): KL(a || b) of their softmaxes in double, and a row's argmax. */
#ifndef STRATA_TEST_LOGITS_CMP_H
#define STRATA_TEST_LOGITS_CMP_H

#include <math.h>
#include <stdint.h>

static double kl_row(const float *a, const float *b, int32_t V) {
    double ma = -INFINITY, mb = -INFINITY, sa = 0, sb = 0, kl = 0;
    for (int32_t i = 0; i < V; i++) { ma = fmax(ma, a[i]); mb = fmax(mb, b[i]); }
    for (int32_t i = 0; i < V; i++) { sa += exp(a[i] - ma); sb += exp(b[i] - mb); }
    const double la = log(sa) + ma, lb = log(sb) + mb;
    for (int32_t i = 0; i < V; i++) {
        const double lpa = a[i] - la, lpb = b[i] - lb;
        kl += exp(lpa) * (lpa - lpb);
    }
    return kl;
}

static int32_t argmax(const float *x, int32_t V) {
    int32_t b = 0;
    for (int32_t i = 1; i < V; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

#endif /* STRATA_TEST_LOGITS_CMP_H */
