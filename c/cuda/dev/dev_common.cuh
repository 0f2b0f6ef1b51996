/* dev_common.cuh - what the standalone check-and-time programs of c/cuda/dev/ share: exit-on-error
 * macros for CUDA and library calls (dev programs only; the library never exits), the median of
 * timings, the device-to-device copy rate they report their bandwidth against, and the PASS/FAIL
 * verdicts, sentinel-guarded device buffers and event timing of the kernel checks (mla_check.cu,
 * deltanet_check.cu). Header-only. */
#ifndef STRATA_CUDA_DEV_COMMON_CUH
#define STRATA_CUDA_DEV_COMMON_CUH

#include <cuda_runtime.h>

#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#define CK(call) do {                                                                         \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, \
                    __LINE__, #call);                                                         \
            exit(2);                                                                          \
        }                                                                                     \
    } while (0)
#define SK(call) do {                                                                         \
        strata_status s_ = (call);                                                            \
        if (s_ != STRATA_OK) {                                                                \
            fprintf(stderr, "strata error at %s:%d: %s: %s\n", __FILE__, __LINE__, #call,     \
                    strata_last_error());                                                     \
            exit(2);                                                                          \
        }                                                                                     \
    } while (0)

template <class T> static T dev_median(std::vector<T> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* Device-to-device copy rate (read + write bytes / s) of a 1 GiB buffer, median of 6 timed copies
 * after a warm-up. */
static double dev_copy_rate() {
    const size_t n = (size_t)1 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    CK(cudaMemset(a, 1, n));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> t;
    for (int i = 0; i < 7; i++) {
        CK(cudaEventRecord(e0));
        CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i > 0) t.push_back(ms * 1e-3);
    }
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return 2.0 * n / dev_median(t);
}

/* ---- PASS/FAIL checks ------------------------------------------------------------------------ */

static int dev_failed = 0; /* set by a failed dev_verdict: the program's exit status */

static inline void dev_verdict(bool ok, const char *what) {
    printf("%s %s\n", ok ? "PASS" : "FAIL", what);
    if (!ok) dev_failed = 1;
}

/* n floats (+ 64 sentinel words of 0xA5A5A5A5 after them) on the device, copied from host if set. */
static inline float *dev_alloc(size_t n, const float *host) {
    float *d;
    CK(cudaMalloc(&d, (n + 64) * sizeof(float)));
    CK(cudaMemset(d + n, 0xA5, 64 * sizeof(float)));
    if (host) CK(cudaMemcpy(d, host, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

/* Whether the sentinels after the n floats of a dev_alloc buffer are intact. */
static inline bool dev_sentinels_ok(const float *d, size_t n) {
    uint32_t w[64];
    CK(cudaMemcpy(w, d + n, sizeof w, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++)
        if (w[i] != 0xA5A5A5A5u) return false;
    return true;
}

/* Median time (s) of 20 runs of f after 3 warm-ups (CUDA events on the default stream). */
template <class F> static double dev_time(F f) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> t;
    for (int i = 0; i < 23; i++) {
        CK(cudaEventRecord(e0));
        f();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 3) t.push_back(ms * 1e-3);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return dev_median(t);
}

#endif /* STRATA_CUDA_DEV_COMMON_CUH */
