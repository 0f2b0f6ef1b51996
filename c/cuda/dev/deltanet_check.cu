/* deltanet_check.cu - standalone check-and-time program for the gated DeltaNet kernels
 * (c/cuda/deltanet.cu) at Qwen3-Next-80B-A3B's shapes (16 key heads, 32 value heads of 128, conv
 * width 4) and tiny ones (head sizes 16, 32, 64), in the manner of mla_check.cu:
 *
 *  - the conv + SiLU and the gated delta rule over T = 1, 17, 256 tokens from a random state,
 *    against the CPU's own functions (ops_ssm.h: st_ssm_conv_step, st_l2norm, st_gdn_step, the
 *    gates as linear_attn_cpu.c takes them): max |gpu - cpu| / max |cpu| of the conv outputs
 *    (<= 1e-6), of the delta rule's outputs and final state (<= 1e-5), sentinels after every
 *    output; the history rows equal to the inputs, bit for bit;
 *  - batch invariance, bit for bit: the T tokens in one call against 1 + the rest and token by
 *    token (outputs and state);
 *  - the gated RMSNorm against st_rmsnorm_gated (<= 1e-6);
 *  - timed (median of 20, CUDA events): conv + delta rule of one layer at the 80B shape, T = 1 and
 *    T = 512, as tokens/s and the state's bytes read and written per second (against the
 *    device-to-device copy rate).
 * Every check prints PASS or FAIL; the exit status is 1 if any failed.
 *
 * Build and run (make's target, after the CUDA build of the library):
 *   make CUDA=1 deltanet-check       (or: make CUDA=1 build/deltanet_check && build/deltanet_check)
 */
#include "deltanet.cuh"
#include "dev_common.cuh"

extern "C" {
#include "ops_ssm.h"
}

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static uint64_t rs = 0x9E3779B97F4A7C15ULL;
static float frand(void) { /* [-1, 1) */
    rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
    return (float)((double)((rs * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static std::vector<float> fetch(const float *d, size_t n) {
    std::vector<float> h(n);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}
static double rel_err(const std::vector<float> &a, const std::vector<float> &ref) {
    double e = 0, m = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        m = fmax(m, fabs((double)ref[i]));
        e = fmax(e, isnan(a[i]) ? INFINITY : fabs((double)a[i] - ref[i]));
    }
    return m > 0 ? e / m : e;
}

/* One layer's inputs and state. */
struct Case {
    st_cuda_gdn_shape sh;
    int64_t C, T;
    std::vector<float> w, conv0, ssm0, x, ba, A, dt;
    Case(int nk, int nv, int d, int K, int64_t T_) : T(T_) {
        sh.nk = nk, sh.nv = nv, sh.d = d, sh.K = K, sh.eps = 1e-6f;
        C = (int64_t)(2 * nk + nv) * d;
        w.resize((size_t)(C * K)); conv0.resize((size_t)((K - 1) * C));
        ssm0.resize((size_t)nv * d * d); x.resize((size_t)(T * C)); ba.resize((size_t)(T * 2 * nv));
        A.resize((size_t)nv); dt.resize((size_t)nv);
        for (auto &v : w) v = 0.5f * frand();
        for (auto &v : conv0) v = frand();
        for (auto &v : ssm0) v = 0.1f * frand();
        for (auto &v : x) v = frand();
        for (auto &v : ba) v = 2.0f * frand();
        for (auto &v : A) v = -(0.1f + fabsf(frand()));
        for (auto &v : dt) v = frand();
    }
};

/* The CPU: conv outputs y [T][C], core outputs out [T][nv*d], the final states. */
static void cpu_ref(const Case &c, std::vector<float> &y, std::vector<float> &out, std::vector<float> &conv,
                    std::vector<float> &ssm) {
    const int nk = c.sh.nk, nv = c.sh.nv, d = c.sh.d, per = nv / nk;
    conv = c.conv0, ssm = c.ssm0;
    y.assign((size_t)(c.T * c.C), 0.0f);
    out.assign((size_t)(c.T * nv * d), 0.0f);
    std::vector<float> row((size_t)c.C);
    for (int64_t t = 0; t < c.T; t++) {
        st_ssm_conv_step(c.w.data(), conv.data(), &c.x[(size_t)(t * c.C)], &y[(size_t)(t * c.C)], c.C, c.sh.K);
        memcpy(row.data(), &y[(size_t)(t * c.C)], sizeof(float) * (size_t)c.C);
        for (int h = 0; h < 2 * nk; h++) st_l2norm(row.data() + h * d, d, c.sh.eps);
        for (int i = 0; i < nk * d; i++) row[(size_t)i] *= 1.0f / sqrtf((float)d);
        for (int h = 0; h < nv; h++) {
            const int kh = h / per, i = h % per;
            const float b = c.ba[(size_t)(t * 2 * nv + kh * 2 * per + i)];
            const float a = c.ba[(size_t)(t * 2 * nv + kh * 2 * per + per + i)];
            const float g = c.A[(size_t)h] * st_softplus(a + c.dt[(size_t)h]), beta = 1.0f / (1.0f + expf(-b));
            st_gdn_step(&ssm[(size_t)h * d * d], row.data() + kh * d, row.data() + nk * d + kh * d,
                        row.data() + 2 * nk * d + h * d, g, beta, &out[(size_t)(t * nv * d + h * d)], d, d);
        }
    }
}

/* The GPU over the tokens in calls of the given sizes; hist rows from 0 when hist. */
struct GpuRun { std::vector<float> y, out, conv, ssm, hist_x, hist_ba; bool sent; };
static GpuRun gpu_run(const Case &c, const std::vector<int64_t> &calls, bool hist) {
    const int nv = c.sh.nv, d = c.sh.d;
    float *dw = dev_alloc(c.w.size(), c.w.data()), *dconv = dev_alloc(c.conv0.size() + 1, c.conv0.data());
    float *dssm = dev_alloc(c.ssm0.size(), c.ssm0.data()), *dx = dev_alloc(c.x.size(), c.x.data());
    float *dba = dev_alloc(c.ba.size(), c.ba.data()), *dA = dev_alloc(c.A.size(), c.A.data());
    float *ddt = dev_alloc(c.dt.size(), c.dt.data()), *dy = dev_alloc(c.x.size(), NULL);
    float *dout = dev_alloc((size_t)(c.T * nv * d), NULL);
    float *dhx = dev_alloc(c.x.size(), NULL), *dhb = dev_alloc(c.ba.size(), NULL);
    int32_t *drow;
    CK(cudaMalloc(&drow, sizeof(int32_t)));
    int64_t t0 = 0;
    for (int64_t n : calls) {
        const int32_t r = (int32_t)t0;
        CK(cudaMemcpy(drow, &r, sizeof r, cudaMemcpyHostToDevice));
        SK(st_cuda_gdn_conv(&c.sh, dw, dconv, dx + t0 * c.C, c.C, dy + t0 * c.C, n, hist ? dhx : NULL, drow, 0));
        SK(st_cuda_gdn_rule(&c.sh, dy + t0 * c.C, dba + t0 * 2 * nv, 2 * nv, dA, ddt, dssm, dout + t0 * nv * d, n,
                            hist ? dhb : NULL, drow, 0));
        t0 += n;
    }
    GpuRun g;
    g.y = fetch(dy, c.x.size());
    g.out = fetch(dout, (size_t)(c.T * nv * d));
    g.conv = fetch(dconv, c.conv0.size());
    g.ssm = fetch(dssm, c.ssm0.size());
    if (hist) { g.hist_x = fetch(dhx, c.x.size()); g.hist_ba = fetch(dhb, c.ba.size()); }
    g.sent = dev_sentinels_ok(dy, c.x.size()) && dev_sentinels_ok(dout, (size_t)(c.T * nv * d)) &&
             dev_sentinels_ok(dssm, c.ssm0.size()) && dev_sentinels_ok(dhx, c.x.size()) &&
             dev_sentinels_ok(dhb, c.ba.size());
    float *bufs[] = {dw, dconv, dssm, dx, dba, dA, ddt, dy, dout, dhx, dhb};
    for (float *b : bufs) CK(cudaFree(b));
    CK(cudaFree(drow));
    return g;
}

static void check_case(int nk, int nv, int d, int K, int64_t T) {
    Case c(nk, nv, d, K, T);
    std::vector<float> y, out, conv, ssm;
    cpu_ref(c, y, out, conv, ssm);
    GpuRun g = gpu_run(c, {T}, true);
    char what[160];
    const double ey = rel_err(g.y, y), eo = rel_err(g.out, out), es = rel_err(g.ssm, ssm), ec = rel_err(g.conv, conv);
    snprintf(what, sizeof what, "nk %d nv %d d %d K %d T %lld: conv %.2g, out %.2g, state %.2g, conv state %.2g",
             nk, nv, d, K, (long long)T, ey, eo, es, ec);
    dev_verdict(ey <= 1e-6 && eo <= 1e-5 && es <= 1e-5 && ec == 0.0 && g.sent, what);
    dev_verdict(g.hist_x == c.x && g.hist_ba == c.ba, "  history rows = the inputs");
    if (T > 1) {
        std::vector<int64_t> each((size_t)T, 1);
        GpuRun a = gpu_run(c, {1, T - 1}, false), b = gpu_run(c, each, false);
        dev_verdict(a.out == g.out && a.ssm == g.ssm && a.conv == g.conv && b.out == g.out && b.ssm == g.ssm &&
                    b.y == g.y, "  one call = 1 + the rest = token by token, bit for bit");
    }
}

static void check_norm(int nv, int d, int64_t T) {
    std::vector<float> x((size_t)(T * nv * d)), z(x.size()), w((size_t)d), ref(x.size());
    for (auto &v : x) v = frand();
    for (auto &v : z) v = 2.0f * frand();
    for (auto &v : w) v = frand();
    for (int64_t r = 0; r < T * nv; r++)
        st_rmsnorm_gated(&ref[(size_t)(r * d)], &x[(size_t)(r * d)], w.data(), &z[(size_t)(r * d)], d, 1e-6f);
    float *dx = dev_alloc(x.size(), x.data()), *dz = dev_alloc(z.size(), z.data()), *dw = dev_alloc(w.size(), w.data());
    SK(st_cuda_gdn_norm(dx, dz, dw, nv, d, T, 1e-6f, 0));
    const double e = rel_err(fetch(dx, x.size()), ref);
    char what[120];
    snprintf(what, sizeof what, "gated rmsnorm nv %d d %d T %lld: %.2g", nv, d, (long long)T, e);
    dev_verdict(e <= 1e-6 && dev_sentinels_ok(dx, x.size()), what);
    CK(cudaFree(dx)); CK(cudaFree(dz)); CK(cudaFree(dw));
}

static void time_80b(int64_t T, double copy_rate) {
    Case c(16, 32, 128, 4, T);
    float *dw = dev_alloc(c.w.size(), c.w.data()), *dconv = dev_alloc(c.conv0.size(), c.conv0.data());
    float *dssm = dev_alloc(c.ssm0.size(), c.ssm0.data()), *dx = dev_alloc(c.x.size(), c.x.data());
    float *dba = dev_alloc(c.ba.size(), c.ba.data()), *dA = dev_alloc(c.A.size(), c.A.data());
    float *ddt = dev_alloc(c.dt.size(), c.dt.data()), *dy = dev_alloc(c.x.size(), NULL);
    float *dout = dev_alloc((size_t)(T * 32 * 128), NULL);
    const double s = dev_time([&] {
        SK(st_cuda_gdn_conv(&c.sh, dw, dconv, dx, c.C, dy, T, NULL, NULL, 0));
        SK(st_cuda_gdn_rule(&c.sh, dy, dba, 64, dA, ddt, dssm, dout, T, NULL, NULL, 0));
    });
    const double bw = 2.0 * c.ssm0.size() * 4 / s;
    printf("time 80B layer T %lld: %.1f us, %.0f tokens/s, state %.0f GB/s (%.0f%% of the copy rate)\n",
           (long long)T, s * 1e6, T / s, bw * 1e-9, 100.0 * bw / copy_rate);
    float *bufs[] = {dw, dconv, dssm, dx, dba, dA, ddt, dy, dout};
    for (float *b : bufs) CK(cudaFree(b));
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("skip: no usable CUDA device\n");
        return 0;
    }
    const int64_t Ts[] = {1, 17, 256};
    for (int64_t T : Ts) {
        check_case(2, 4, 16, 4, T);
        check_case(1, 2, 32, 3, T);
        check_case(2, 4, 64, 4, T);
        check_case(16, 32, 128, 4, T); /* Qwen3-Next-80B-A3B */
    }
    check_norm(4, 16, 5);
    check_norm(32, 128, 17);
    const double copy = dev_copy_rate();
    time_80b(1, copy);
    time_80b(512, copy);
    printf("%s\n", dev_failed ? "FAIL" : "PASS");
    return dev_failed;
}
