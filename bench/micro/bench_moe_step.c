/* bench_moe_step.c - one token's CPU expert step (st_moe_ffn, T = 1), the work of a decode step's
 * CPU layer with `--cpu-moe`: L layers of X random Q4_K experts of qwen3-30b-a3b's shape (n_embd
 * 2048, n_ff 768: 2.65 MB an expert; 8 x 128 of them, 2.7 GB, pass the 300 MiB L3 of the H200
 * host), k = 8 routed at random in the next layer each step, so the weights come from DRAM as in
 * decode; the caller busy-waits GAP microseconds before each step (the GPU's part of a layer)
 * with the workers held spinning, as a GPU session holds them. Modes, alternating: the step as
 * the session runs it; the step in three stages (st_moe_set_one_dispatch(0)); the step after a
 * gap through which the workers warm the step's experts as predicted (st_moe_warm, RIGHT of the
 * k predictions right, the others wrong), as a GPU session does with the next layer's
 * prediction. Prints the median of each and the expert bytes a second; the warmed step's time
 * includes the warm's stop.
 *   build/bench_moe_step [threads] [experts] [steps] [gap_us] [layers] [right]
 *   (defaults: all CPUs, 128, 400, 40, 8, 6) */
#include "bench_util.h"
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* rows x n random Q4_K weights with finite scales */
static uint8_t *random_q4_K(int64_t rows, int64_t n, size_t *rb_out) {
    const size_t rb = (size_t)strata_row_bytes(STRATA_TYPE_Q4_K, n), bytes = rb * (size_t)rows;
    uint8_t *w = malloc(bytes);
    if (!w) return NULL;
    fill_q_rows(STRATA_TYPE_Q4_K, w, bytes);
    *rb_out = rb;
    return w;
}

static st_tensor view(const uint8_t *data, int64_t n, int64_t rows, size_t rb) {
    st_tensor t;
    memset(&t, 0, sizeof t);
    t.type = STRATA_TYPE_Q4_K;
    t.data = data;
    t.ne[0] = n;
    t.ne[1] = rows;
    t.ne[2] = 1;
    t.row_bytes = rb;
    return t;
}

int main(int argc, char **argv) {
    const int nt = argc > 1 ? atoi(argv[1]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    const int32_t X = argc > 2 ? atoi(argv[2]) : 128;
    const int steps = argc > 3 ? atoi(argv[3]) : 400;
    const double gap = (argc > 4 ? atof(argv[4]) : 40.0) * 1e-6;
    const int L = argc > 5 ? atoi(argv[5]) : 8;
    const int right = argc > 6 ? atoi(argv[6]) : 6;
    const int64_t E = 2048, F = 768;
    const int32_t k = 8;
    enum { MODES = 3 };
    if (nt < 1 || X < 2 * k || steps < 2 || L < 1 || right < 0 || right > k) {
        fprintf(stderr, "usage: bench_moe_step [threads >= 1] [experts >= 16] [steps >= 2] [gap_us] "
                        "[layers >= 1] [right 0..8]\n");
        return 1;
    }
    size_t rb_gu = 0, rb_d = 0;
    const int64_t XL = (int64_t)X * L;
    uint8_t *gate = random_q4_K(XL * F, E, &rb_gu), *up = random_q4_K(XL * F, E, &rb_gu);
    uint8_t *down = random_q4_K(XL * E, F, &rb_d);
    st_expert *ex = malloc(sizeof(st_expert) * (size_t)XL);
    float *x = malloc(sizeof(float) * (size_t)E), *out = malloc(sizeof(float) * (size_t)E);
    void *ws = malloc(st_moe_wsize(1, k, X, E, F));
    double *t[MODES];
    for (int m = 0; m < MODES; m++) t[m] = malloc(sizeof(double) * (size_t)steps);
    st_threadpool *tp = NULL;
    if (!gate || !up || !down || !ex || !x || !out || !ws || !t[0] || !t[1] || !t[2] ||
        st_threadpool_create(nt, &tp) != STRATA_OK) {
        fprintf(stderr, "bench_moe_step: out of memory\n");
        return 1;
    }
    for (int64_t e = 0; e < XL; e++) {
        ex[e].gate = view(gate + (size_t)e * (size_t)F * rb_gu, E, F, rb_gu);
        ex[e].up = view(up + (size_t)e * (size_t)F * rb_gu, E, F, rb_gu);
        ex[e].down = view(down + (size_t)e * (size_t)E * rb_d, F, E, rb_d);
    }
    for (int64_t i = 0; i < E; i++) x[i] = rng_float();
    const double expert_bytes = (double)(2 * F * rb_gu + E * rb_d);
    printf("threads %d, %d layers of %d Q4_K experts of %.2f MB (%.0f MB), k %d, %d steps a mode, gap %.0f us, "
           "warm: %d of %d predictions right\n", nt, L, X, expert_bytes * 1e-6, expert_bytes * (double)XL * 1e-6, k,
           steps, gap * 1e6, right, k);
    static const char *const names[MODES] = {"one dispatch", "three stages", "warmed in the gap"};
    st_threadpool_hold(tp, 1);
    float check = 0;
    st_moe_warm warm;
    memset(&warm, 0, sizeof warm);
    double warmed = 0, stop_s = 0; /* bytes the warms read; time their stops took */
    for (int s = 0; s < MODES * steps; s++) {
        const int mode = s % MODES;
        const st_expert *lx = ex + (size_t)(s % L) * (size_t)X; /* the next layer's table */
        int32_t ids[16], pred[8];
        float wts[8];
        for (int i = 0; i < 2 * k; i++) { /* 2k distinct experts: k routed, k wrong predictions */
            int32_t e;
            int dup;
            do {
                e = (int32_t)(rng_next() % (uint64_t)X);
                dup = 0;
                for (int q = 0; q < i; q++) dup |= ids[q] == e;
            } while (dup);
            ids[i] = e;
        }
        for (int i = 0; i < k; i++) {
            wts[i] = 1.0f / (float)k;
            pred[i] = i < right ? ids[i] : ids[k + i];
        }
        if (mode == 2) st_moe_warm_start(tp, &warm, lx, X, pred, k);
        const double g0 = now_s();
        while (now_s() - g0 < gap) { /* the GPU's part */ }
        /* the warm's stop is part of the step it serves (the routing arrived: stop, then compute) */
        const double t0 = now_s();
        if (mode == 2) warmed += (double)st_moe_warm_stop(tp, &warm);
        const double t1 = now_s();
        st_moe_set_one_dispatch(mode != 1);
        st_moe_ffn(tp, lx, X, x, 1, ids, wts, k, out, ws);
        t[mode][s / MODES] = now_s() - t0;
        if (mode == 2) stop_s += t1 - t0;
        check += out[0];
    }
    st_threadpool_hold(tp, 0);
    st_moe_set_one_dispatch(1);
    for (int mode = 0; mode < MODES; mode++) {
        qsort(t[mode], (size_t)steps, sizeof(double), cmp_d);
        const double med = t[mode][steps / 2];
        printf("  %-20s median %7.1f us, p10 %7.1f, p90 %7.1f (%.1f GB/s of expert bytes at the median)\n",
               names[mode], med * 1e6, t[mode][steps / 10] * 1e6, t[mode][steps * 9 / 10] * 1e6,
               expert_bytes * k / med * 1e-9);
    }
    printf("  warm: %.2f MB read in each gap (%.1f GB/s over the gap); its stop %.1f us (in the step's time)\n",
           warmed / steps * 1e-6, warmed / steps / gap * 1e-9, stop_s / steps * 1e6);
    st_threadpool_free(tp);
    free(gate); free(up); free(down); free(ex); free(x); free(out); free(ws);
    for (int m = 0; m < MODES; m++) free(t[m]);
    return check != check ? 1 : 0; /* keep the outputs */
}
