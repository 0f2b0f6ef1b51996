/* test_ops.c - the CPU ops (ops.h) and the thread pool against naive double-precision references
 * on random data: matmul per weight type, multi-matmul, RMSNorm, softmax, RoPE (normal, NEOX,
 * partial, linear, YaRN), attention with GQA over f32/f16 caches, routing and the MoE step, the
 * chunked gated delta rule (qwen3next) against the recurrent form, and bit-identical results for
 * 1, 2 and 5 threads and, for the delta rule, for any split of the rows into calls. */
#include "test.h"
#include "ops.h"
#include "kv.h"
#include "ops_ssm.h"
#include "threadpool.h"

#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

static test_rng rng = {0x9e3779b97f4a7c15ULL};

static void fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = test_rng_float(&rng) * scale;
}

/* A weight tensor of rows x n (x experts) quantized to type from random floats; *deq gets the
 * dequantized values (what the weights really are). */
typedef struct {
    st_tensor t;
    uint8_t *buf;
    float *deq;
} tw;

static tw make_weights(strata_type type, int64_t n, int64_t rows, int64_t experts) {
    tw w;
    int64_t total = rows * experts;
    float *src = malloc(sizeof(float) * (size_t)(n * total));
    fill(src, n * total, 1.0f);
    size_t rb = (size_t)strata_row_bytes(type, n);
    w.buf = malloc(rb * (size_t)total);
    w.deq = malloc(sizeof(float) * (size_t)(n * total));
    for (int64_t r = 0; r < total; r++) {
        strata_quantize_row(type, src + r * n, w.buf + (size_t)r * rb, n);
        strata_dequantize_row(type, w.buf + (size_t)r * rb, w.deq + r * n, n);
    }
    free(src);
    memset(&w.t, 0, sizeof w.t);
    w.t.type = type;
    w.t.data = w.buf;
    w.t.ne[0] = n;
    w.t.ne[1] = rows;
    w.t.ne[2] = experts;
    w.t.row_bytes = rb;
    w.t.name = "test";
    return w;
}
static void free_weights(tw *w) { free(w->buf); free(w->deq); }

/* Bound on |dot(w, q8(x)) - dot(w, x)|: each q8 value is off by at most half a step
 * (amax/127/2) plus the fp16 rounding of the block scale (2^-11 relative, times 127 steps). */
static double q8_bound(strata_type wtype, const float *w, const float *x, int64_t n) {
    strata_type act = strata_act_type(wtype);
    double s = 0, sabs = 0;
    int64_t bs = act == STRATA_TYPE_Q8_0 ? 32 : act == STRATA_TYPE_Q8_K ? 256 : 0;
    for (int64_t b = 0; b < n; b += (bs ? bs : n)) {
        int64_t e = bs ? b + bs : n;
        double amax = 0;
        for (int64_t i = b; i < e; i++) amax = fmax(amax, fabs(x[i]));
        for (int64_t i = b; i < e; i++) {
            sabs += fabs(w[i] * x[i]);
            if (bs) s += fabs(w[i]) * (amax / 127.0 * 0.5 + amax * 1.0 / 1024.0);
        }
    }
    return s + 2e-6 * sabs + 1e-6;
}

/* ---------------------------------------------------------------------------------------------
 * Thread pool
 * ------------------------------------------------------------------------------------------- */

typedef struct { atomic_int *hits; int n_threads; atomic_int bad_tid; } tp_ctx;
static void tp_task(void *ctx, int64_t b, int64_t e, int tid) {
    tp_ctx *c = ctx;
    if (tid < 0 || tid >= c->n_threads) atomic_store(&c->bad_tid, 1);
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

static void test_threadpool(void) {
    const int64_t N = 1000;
    atomic_int *hits = malloc(sizeof(atomic_int) * N);
    int threads[] = {1, 2, 3, 5};
    for (size_t ti = 0; ti < ST_ARRAY_LEN(threads); ti++) {
        st_threadpool *tp = NULL;
        CHECK(st_threadpool_create(threads[ti], &tp) == STRATA_OK, "create %d", threads[ti]);
        if (!tp) continue;
        CHECK(st_threadpool_n_threads(tp) == threads[ti], "n_threads");
        int ok = 1;
        tp_ctx c = {hits, threads[ti], 0};
        for (int rep = 0; rep < 2000; rep++) {
            int64_t n = 1 + rep % N;
            int64_t chunk = 1 + rep % 17;
            for (int64_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
            st_threadpool_run(tp, n, chunk, tp_task, &c);
            for (int64_t i = 0; i < n; i++) ok &= atomic_load(&hits[i]) == 1;
        }
        CHECK(ok, "%d threads: every item exactly once over 2000 jobs", threads[ti]);
        CHECK(!atomic_load(&c.bad_tid), "thread ids in range");
        st_threadpool_free(tp);
    }
    st_threadpool *bad = NULL;
    CHECK(st_threadpool_create(0, &bad) == STRATA_ERR_INVALID_ARG && !bad, "0 threads refused");
    /* explicit placement: every worker bound where the affinity set has the CPUs, none where
     * it has too few; jobs still run each item once */
    cpu_set_t set;
    const int n_cpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    for (int nt = 1; nt <= 3; nt++) {
        st_threadpool *tp = NULL;
        if (st_threadpool_create(nt, &tp) != STRATA_OK) { CHECK(0, "create %d", nt); continue; }
        const int bound = st_threadpool_pin(tp);
        CHECK(bound == (nt <= n_cpu ? nt - 1 : 0), "%d threads on %d CPUs: %d workers bound", nt, n_cpu, bound);
        tp_ctx c = {hits, nt, 0};
        for (int64_t i = 0; i < N; i++) atomic_store(&hits[i], 0);
        st_threadpool_run(tp, N, 7, tp_task, &c);
        int ok = 1;
        for (int64_t i = 0; i < N; i++) ok &= atomic_load(&hits[i]) == 1;
        CHECK(ok, "pinned pool of %d: every item once", nt);
        st_threadpool_free(tp);
    }
    CHECK(st_threadpool_pin(NULL) == 0, "pin NULL");
    /* held workers (st_threadpool_hold): jobs after gaps longer than the spin still run each item
     * once, the hold can be dropped and taken again, and freeing a held pool returns */
    for (int nt = 2; nt <= 3; nt++) {
        st_threadpool *tp = NULL;
        if (st_threadpool_create(nt, &tp) != STRATA_OK) { CHECK(0, "create %d", nt); continue; }
        tp_ctx c = {hits, nt, 0};
        int ok = 1;
        for (int rep = 0; rep < 24; rep++) {
            st_threadpool_hold(tp, rep < 8 || rep >= 16); /* held, released, held again */
            usleep(rep % 3 == 0 ? 3000 : 200);
            for (int64_t i = 0; i < N; i++) atomic_store(&hits[i], 0);
            st_threadpool_run(tp, N, 1 + rep % 9, tp_task, &c);
            for (int64_t i = 0; i < N; i++) ok &= atomic_load(&hits[i]) == 1;
        }
        CHECK(ok && !atomic_load(&c.bad_tid), "held pool of %d: every item once across gaps", nt);
        st_threadpool_free(tp); /* still held */
    }
    st_threadpool_hold(NULL, 1); /* a no-op */
    /* posted jobs (st_threadpool_post): the workers run them while the caller goes on; wait,
     * the next run or post, and free each wait for them; a pool without workers drops them */
    for (int nt = 1; nt <= 3; nt++) {
        st_threadpool *tp = NULL;
        if (st_threadpool_create(nt, &tp) != STRATA_OK) { CHECK(0, "create %d", nt); continue; }
        tp_ctx c = {hits, nt, 0};
        int ok = 1;
        for (int rep = 0; rep < 300; rep++) {
            const int64_t n = 1 + (rep * 37) % N;
            for (int64_t i = 0; i < N; i++) atomic_store(&hits[i], 0);
            st_threadpool_hold(tp, rep & 1);
            st_threadpool_post(tp, n, 1 + rep % 5, tp_task, &c);
            if (rep % 3 == 0) st_threadpool_wait(tp);
            else if (rep % 3 == 1) st_threadpool_run(tp, n, 3, tp_task, &c); /* waits first */
            else st_threadpool_post(tp, n, 2, tp_task, &c), st_threadpool_wait(tp);
            const int want = nt == 1 ? (rep % 3 == 1) : (rep % 3 == 0 ? 1 : 2);
            for (int64_t i = 0; i < N; i++) ok &= atomic_load(&hits[i]) == (i < n ? want : 0);
        }
        st_threadpool_hold(tp, 0);
        CHECK(ok && !atomic_load(&c.bad_tid), "posted jobs on a pool of %d: every item as often as posted "
              "and run (none without workers)", nt);
        for (int64_t i = 0; i < N; i++) atomic_store(&hits[i], 0);
        st_threadpool_post(tp, N, 1, tp_task, &c);
        st_threadpool_free(tp); /* waits for the posted job */
        int all = 1;
        for (int64_t i = 0; i < N; i++) all &= atomic_load(&hits[i]) == (nt > 1);
        CHECK(all, "pool of %d freed with a posted job: its items done first", nt);
    }
    st_threadpool_wait(NULL); /* a no-op */
    /* cancelled posted jobs (st_threadpool_cancel): at once or after the workers took some, each
     * item runs at most once and none after the call returns; the pool's next jobs run each item
     * once (a wrong done count would hang them); a pool without workers, or none posted: no-op */
    for (int nt = 1; nt <= 4; nt++) {
        st_threadpool *tp = NULL;
        if (st_threadpool_create(nt, &tp) != STRATA_OK) { CHECK(0, "create %d", nt); continue; }
        tp_ctx c = {hits, nt, 0};
        int ok = 1, later = 1;
        int64_t ran = 0;
        for (int rep = 0; rep < 400; rep++) {
            for (int64_t i = 0; i < N; i++) atomic_store(&hits[i], 0);
            st_threadpool_hold(tp, rep & 1);
            st_threadpool_post(tp, N, 1 + rep % 4, tp_task, &c);
            for (volatile int spin = 0; spin < (rep % 5) * 2000; spin++) {
            }
            st_threadpool_cancel(tp);
            int64_t n = 0;
            for (int64_t i = 0; i < N; i++) {
                const int h = atomic_load(&hits[i]);
                ok &= h == 0 || h == 1;
                n += h;
            }
            ran += n;
            usleep(rep % 50 == 0 ? 200 : 0);
            int64_t n2 = 0;
            for (int64_t i = 0; i < N; i++) n2 += atomic_load(&hits[i]);
            later &= n2 == n; /* nothing of the cancelled job ran after the call */
            for (int64_t i = 0; i < N; i++) atomic_store(&hits[i], 0);
            if (rep % 3 == 0) st_threadpool_run(tp, N, 1 + rep % 7, tp_task, &c);
            else st_threadpool_post(tp, N, 1 + rep % 7, tp_task, &c), st_threadpool_wait(tp);
            const int want = nt > 1 || rep % 3 == 0;
            for (int64_t i = 0; i < N; i++) ok &= atomic_load(&hits[i]) == want;
        }
        st_threadpool_hold(tp, 0);
        st_threadpool_cancel(tp); /* none posted: a no-op */
        CHECK(ok && later && !atomic_load(&c.bad_tid), "cancelled posted jobs on a pool of %d: items at most "
              "once, none after the cancel, the next jobs whole", nt);
        /* and it drops work: waiting instead would have run all 400 x N items */
        CHECK(nt > 1 ? ran < 400 * N : ran == 0, "pool of %d: %lld of %lld items ran before their cancel", nt,
              (long long)ran, (long long)(400 * N));
        st_threadpool_free(tp);
    }
    st_threadpool_cancel(NULL); /* a no-op */
    free(hits);
}

/* A job whose items were all claimed, followed at once by a larger one: the window in which a
 * worker that read the old claim word sees the new n_items. Before the claim word was closed
 * between jobs, a worker could claim a phantom chunk there, the new job's done count overshot and
 * st_threadpool_run waited forever (it hung CI). Many tiny jobs on more threads than cores make
 * the window likely; a hang is turned into a failure by an alarm. */
static void tp_alarm(int sig) {
    (void)sig;
    static const char msg[] = "FAIL test_ops: thread pool deadlocked in the alternating-jobs stress\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
    _exit(1);
}

static void test_threadpool_stress(void) {
    atomic_int hits[64];
    for (int nt = 2; nt <= 6; nt += 2) {
        st_threadpool *tp = NULL;
        CHECK(st_threadpool_create(nt, &tp) == STRATA_OK, "create %d", nt);
        if (!tp) continue;
        tp_ctx c = {hits, nt, 0};
        int ok = 1;
        signal(SIGALRM, tp_alarm);
        alarm(120);
        for (int rep = 0; rep < 60000; rep++) {
            const int64_t n = (rep & 1) ? 40 + rep % 24 : 2 + rep % 3, chunk = (rep & 1) ? 3 : 1;
            for (int64_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
            st_threadpool_run(tp, n, chunk, tp_task, &c);
            for (int64_t i = 0; i < n; i++) ok &= atomic_load(&hits[i]) == 1;
        }
        alarm(0);
        CHECK(ok, "%d threads: 60000 alternating small/large jobs, every item exactly once", nt);
        st_threadpool_free(tp);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Matmul
 * ------------------------------------------------------------------------------------------- */

static void test_matmul_type(strata_type type, st_threadpool **pools, int n_pools) {
    const int64_t n = 512, rows = 37, T = 41;
    tw w = make_weights(type, n, rows, 1);
    float *x = malloc(sizeof(float) * (size_t)(n * T));
    fill(x, n * T, 2.0f);
    float *y[3];
    void *ws = malloc(st_matmul_wsize(n, T));
    for (int p = 0; p < n_pools; p++) {
        y[p] = malloc(sizeof(float) * (size_t)(rows * T));
        st_matmul(pools[p], &w.t, x, T, y[p], ws);
    }
    int ok_ref = 1, ok_api = 1;
    double worst = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t r = 0; r < rows; r++) {
            double ref = 0;
            for (int64_t i = 0; i < n; i++) ref += (double)w.deq[r * n + i] * x[t * n + i];
            double bound = q8_bound(type, w.deq + r * n, x + t * n, n);
            double err = fabs(y[0][t * rows + r] - ref);
            if (err > bound) ok_ref = 0;
            worst = fmax(worst, err / bound);
            float api = 0;
            strata_vec_dot_f32(type, w.buf + (size_t)r * w.t.row_bytes, x + t * n, n, &api);
            if (memcmp(&api, &y[0][t * rows + r], 4) != 0) ok_api = 0;
        }
    CHECK(ok_ref, "%s: matmul vs double reference (worst err/bound %.3f)", strata_type_name(type), worst);
    CHECK(ok_api, "%s: matmul bit-identical to strata_vec_dot_f32 per row", strata_type_name(type));
    for (int p = 1; p < n_pools; p++)
        CHECK(memcmp(y[0], y[p], sizeof(float) * (size_t)(rows * T)) == 0,
              "%s: matmul bit-identical with %d threads", strata_type_name(type),
              st_threadpool_n_threads(pools[p]));
    for (int p = 0; p < n_pools; p++) free(y[p]);
    free(ws);
    free(x);
    free_weights(&w);
}

static void test_matmul_multi(st_threadpool **pools, int n_pools) {
    const int64_t n = 256, T = 35;
    strata_type types[3] = {STRATA_TYPE_F32, STRATA_TYPE_Q8_0, STRATA_TYPE_Q4_K};
    int64_t rows[3] = {19, 64, 7};
    tw w[3];
    for (int m = 0; m < 3; m++) w[m] = make_weights(types[m], n, rows[m], 1);
    float *x = malloc(sizeof(float) * (size_t)(n * T));
    fill(x, n * T, 1.0f);
    void *ws = malloc(st_matmul_wsize(n, T));
    float *ys[3][3];
    for (int p = 0; p < n_pools; p++) {
        st_mm mm[3];
        for (int m = 0; m < 3; m++) {
            ys[p][m] = malloc(sizeof(float) * (size_t)((rows[m] + 3) * T));
            mm[m].w = &w[m].t;
            mm[m].y = ys[p][m];
            mm[m].ldy = rows[m] + 3;
        }
        st_matmul_multi(pools[p], mm, 3, x, T, ws);
    }
    for (int m = 0; m < 3; m++) {
        float *single = malloc(sizeof(float) * (size_t)(rows[m] * T));
        st_matmul(pools[0], &w[m].t, x, T, single, ws);
        int same = 1, stable = 1;
        for (int64_t t = 0; t < T; t++)
            for (int64_t r = 0; r < rows[m]; r++) {
                if (memcmp(&single[t * rows[m] + r], &ys[0][m][t * (rows[m] + 3) + r], 4)) same = 0;
                for (int p = 1; p < n_pools; p++)
                    if (memcmp(&ys[p][m][t * (rows[m] + 3) + r], &ys[0][m][t * (rows[m] + 3) + r], 4))
                        stable = 0;
            }
        CHECK(same, "multi-matmul matrix %d (%s) equals the single matmul", m, strata_type_name(types[m]));
        CHECK(stable, "multi-matmul matrix %d bit-identical across thread counts", m);
        free(single);
    }
    for (int p = 0; p < n_pools; p++)
        for (int m = 0; m < 3; m++) free(ys[p][m]);
    for (int m = 0; m < 3; m++) free_weights(&w[m]);
    free(ws);
    free(x);
}

/* ---------------------------------------------------------------------------------------------
 * Norms, softmax, RoPE
 * ------------------------------------------------------------------------------------------- */

static void test_norms(void) {
    const int64_t n = 300;
    float x[300], w[300], y[300];
    fill(x, n, 3.0f);
    fill(w, n, 1.0f);
    st_rmsnorm(y, x, w, n, 1e-5f);
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double sc = 1.0 / sqrt(ss / n + 1e-5);
    double err = 0;
    for (int64_t i = 0; i < n; i++) err = fmax(err, fabs(y[i] - x[i] * sc * w[i]));
    CHECK(err < 1e-5, "rmsnorm vs double: %g", err);
    memcpy(y, x, sizeof x);
    st_rmsnorm(y, y, NULL, n, 1e-6f);
    err = 0;
    sc = 1.0 / sqrt(ss / n + 1e-6);
    for (int64_t i = 0; i < n; i++) err = fmax(err, fabs(y[i] - x[i] * sc));
    CHECK(err < 1e-5, "rmsnorm in place, no weight: %g", err);

    float s[50];
    fill(s, 50, 20.0f);
    double mx = -1e30, tot = 0, ref[50];
    for (int i = 0; i < 50; i++) mx = fmax(mx, s[i]);
    for (int i = 0; i < 50; i++) tot += ref[i] = exp(s[i] - mx);
    st_softmax(s, 50);
    err = 0;
    for (int i = 0; i < 50; i++) err = fmax(err, fabs(s[i] - ref[i] / tot));
    CHECK(err < 1e-6, "softmax vs double: %g", err);

    float g[40], u[40], h[40];
    fill(g, 40, 6.0f);
    fill(u, 40, 1.0f);
    st_swiglu(h, g, u, 40);
    err = 0;
    for (int i = 0; i < 40; i++) err = fmax(err, fabs(h[i] - g[i] / (1 + exp(-(double)g[i])) * u[i]));
    CHECK(err < 1e-5, "swiglu vs double: %g", err);
}

/* Reference RoPE: NEOX as transformers' rotate_half (x*cos + rotate_half(x)*sin, cos repeated over
 * both halves); NORM as complex multiplication of (x[2i] + i x[2i+1]) by e^{i theta}. theta from
 * inv_freq[i] = base^(-2i/n_rot), then YaRN's blend written as transformers does (linear_ramp over
 * dim//2, extrapolation factor 1 - ramp, attention factor 0.1 ln(s) + 1). */
static void rope_ref(st_rope_style style, int n_rot, double base, double scale_factor, int yarn,
                     int orig_ctx, double beta_fast, double beta_slow, double attn_factor,
                     const float *x, double *out, int hd, int64_t pos) {
    int half = n_rot / 2;
    double mscale = attn_factor;
    double lo = 0, hi = 0;
    if (yarn) {
        lo = floor(n_rot * log(orig_ctx / (beta_fast * 2 * M_PI)) / (2 * log(base)));
        hi = ceil(n_rot * log(orig_ctx / (beta_slow * 2 * M_PI)) / (2 * log(base)));
        lo = fmax(lo, 0);
        hi = fmin(hi, n_rot - 1);
        if (lo == hi) hi += 0.001;
        mscale *= 0.1 * log(scale_factor) + 1.0;
    }
    for (int i = 0; i < hd; i++) out[i] = x[i];
    for (int i = 0; i < half; i++) {
        double extrap = 1.0 / pow(base, 2.0 * i / n_rot);
        double interp = extrap / scale_factor;
        double inv = interp;
        if (yarn) {
            double ramp = fmin(1, fmax(0, (i - lo) / (hi - lo)));
            double ef = 1 - ramp;
            inv = interp * (1 - ef) + extrap * ef;
        }
        double th = pos * inv, c = cos(th) * mscale, s = sin(th) * mscale;
        if (style == ST_ROPE_NEOX) {
            out[i] = x[i] * c - x[i + half] * s;
            out[i + half] = x[i + half] * c + x[i] * s;
        } else {
            out[2 * i] = x[2 * i] * c - x[2 * i + 1] * s;
            out[2 * i + 1] = x[2 * i] * s + x[2 * i + 1] * c;
        }
    }
}

static void test_rope(void) {
    const int hd = 64, nh = 3;
    struct { st_rope_style style; int n_rot; double base, factor; int yarn; const char *name; } cases[] = {
        {ST_ROPE_NEOX, 64, 10000, 1, 0, "neox"},
        {ST_ROPE_NORM, 64, 500000, 1, 0, "norm"},
        {ST_ROPE_NEOX, 32, 10000, 1, 0, "neox n_rot 32 < head_dim"},
        {ST_ROPE_NORM, 48, 10000, 1, 0, "norm n_rot 48 < head_dim"},
        {ST_ROPE_NORM, 64, 10000, 4, 0, "norm linear x4"},
        {ST_ROPE_NEOX, 64, 1000000, 4, 1, "neox yarn x4"},
        {ST_ROPE_NORM, 64, 10000, 8, 1, "norm yarn x8"},
    };
    for (size_t c = 0; c < ST_ARRAY_LEN(cases); c++) {
        st_rope_params p;
        memset(&p, 0, sizeof p);
        p.style = cases[c].style;
        p.n_rot = cases[c].n_rot;
        p.freq_base = (float)cases[c].base;
        p.freq_scale = (float)(1.0 / cases[c].factor);
        p.ext_factor = cases[c].yarn ? 1.0f : 0.0f;
        p.attn_factor = 1.0f;
        p.beta_fast = 32.0f;
        p.beta_slow = 1.0f;
        p.n_ctx_orig = 4096;
        double err = 0;
        int64_t positions[] = {0, 1, 7, 1000, 30000};
        for (size_t pi = 0; pi < ST_ARRAY_LEN(positions); pi++) {
            float x[3 * 64], y[3 * 64], cs[64];
            fill(x, nh * hd, 1.0f);
            memcpy(y, x, sizeof x);
            st_rope_cache(&p, positions[pi], cs);
            st_rope_apply(&p, cs, y, nh, hd);
            for (int h = 0; h < nh; h++) {
                double ref[64];
                rope_ref(p.style, p.n_rot, cases[c].base, cases[c].factor, cases[c].yarn, 4096, 32, 1,
                         1.0, x + h * hd, ref, hd, positions[pi]);
                for (int i = 0; i < hd; i++) err = fmax(err, fabs(y[h * hd + i] - ref[i]));
            }
        }
        /* float32 angles at position 30000 lose ~1e-3 rad in references that use f32; ours are
         * double, so the bound is tight */
        CHECK(err < 2e-5, "rope %s vs direct formula: %g", cases[c].name, err);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Attention
 * ------------------------------------------------------------------------------------------- */

static float f16_round(float v) { return st_fp16_to_f32(st_f32_to_fp16(v)); }

static void test_attention_kv(strata_type kv_type, st_threadpool **pools, int n_pools) {
    const int nh = 6, nkv = 2, hd = 32, hdv = 24;
    const int64_t n_ctx = 40, pos0 = 9, T = 5;   /* prefill 9 tokens, then a batch of 5 */
    const int64_t nk = nkv * hd, nv = nkv * hdv;
    const size_t el = kv_type == STRATA_TYPE_F32 ? 4 : 2;
    st_kv_layer kv = {kv_type, calloc((size_t)(n_ctx * nk), el), calloc((size_t)(n_ctx * nv), el), n_ctx};
    st_attn_shape s = {.n_head = nh, .n_head_kv = nkv, .head_dim = hd, .head_dim_v = hdv, .scale = 1.0f / sqrtf((float)hd)};
    float *k = malloc(sizeof(float) * (size_t)((pos0 + T) * nk));
    float *v = malloc(sizeof(float) * (size_t)((pos0 + T) * nv));
    float *q = malloc(sizeof(float) * (size_t)(T * nh * hd));
    fill(k, (pos0 + T) * nk, 2.0f);
    fill(v, (pos0 + T) * nv, 1.0f);
    fill(q, T * nh * hd, 2.0f);
    st_kv_store(&kv, &s, k, v, pos0, 0);
    st_kv_store(&kv, &s, k + pos0 * nk, v + pos0 * nv, T, pos0);
    float *out[3];
    float *scratch = malloc(sizeof(float) * (size_t)(5 * n_ctx));
    for (int p = 0; p < n_pools; p++) {
        out[p] = malloc(sizeof(float) * (size_t)(T * nh * hdv));
        st_attention(pools[p], &kv, &s, q, T, pos0, out[p], scratch);
    }
    double err = 0;
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            int hk = h / (nh / nkv);
            int64_t np = pos0 + t + 1;
            double sc[64], mx = -1e30, tot = 0;
            for (int64_t j = 0; j < np; j++) {
                double d = 0;
                for (int i = 0; i < hd; i++) {
                    float kk = k[j * nk + hk * hd + i];
                    if (kv_type == STRATA_TYPE_F16) kk = f16_round(kk);
                    d += (double)q[(t * nh + h) * hd + i] * kk;
                }
                sc[j] = d / sqrt((double)hd);
                mx = fmax(mx, sc[j]);
            }
            for (int64_t j = 0; j < np; j++) tot += sc[j] = exp(sc[j] - mx);
            for (int i = 0; i < hdv; i++) {
                double o = 0;
                for (int64_t j = 0; j < np; j++) {
                    float vv = v[j * nv + hk * hdv + i];
                    if (kv_type == STRATA_TYPE_F16) vv = f16_round(vv);
                    o += sc[j] / tot * vv;
                }
                err = fmax(err, fabs(out[0][(t * nh + h) * hdv + i] - o));
            }
        }
    CHECK(err < 2e-5, "attention (%s cache, GQA 6/2, hd 32/24) vs naive: %g", strata_type_name(kv_type), err);
    for (int p = 1; p < n_pools; p++)
        CHECK(memcmp(out[0], out[p], sizeof(float) * (size_t)(T * nh * hdv)) == 0,
              "attention bit-identical with %d threads", st_threadpool_n_threads(pools[p]));
    for (int p = 0; p < n_pools; p++) free(out[p]);
    free(scratch); free(q); free(k); free(v); free(kv.k); free(kv.vt);
}

/* ---------------------------------------------------------------------------------------------
 * Routing and MoE
 * ------------------------------------------------------------------------------------------- */

static void test_route(void) {
    float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 0.5f, 1.0f};
    int32_t ids[3];
    float w[3];
    st_route_topk(logits, 6, 3, 0, ids, w);
    CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 5, "top-3 with a tie: %d %d %d", ids[0], ids[1], ids[2]);
    double tot = 0;
    for (int e = 0; e < 6; e++) tot += exp(logits[e]);
    CHECK(fabs(w[0] - exp(2.0) / tot) < 1e-6 && fabs(w[2] - exp(1.0) / tot) < 1e-6, "softmax weights");
    st_route_topk(logits, 6, 3, 1, ids, w);
    CHECK(fabs(w[0] + w[1] + w[2] - 1.0) < 1e-6 && fabs(w[2] - exp(1.0) / (2 * exp(2.0) + exp(1.0))) < 1e-6,
          "renormalized weights: %g %g %g", w[0], w[1], w[2]);
    st_route_topk(logits, 6, 2, 0, ids, w);
    CHECK(ids[0] == 1 && ids[1] == 3, "tie goes to the lower index first");
}

/* st_route_scored against the rule written out by hand (DeepSeek-V3's noaux_tc router:
 * sigmoid scores, a selection bias, the best groups by the sum of their top two). */
static void test_route_scored(void) {
    /* 8 experts in 4 groups of 2; the bias lifts expert 6 and sinks expert 1 */
    const float logits[8] = {0.3f, 2.5f, -0.4f, 0.1f, 1.0f, 0.9f, -0.2f, 0.0f};
    const float bias[8] = {0.0f, -0.9f, 0.0f, 0.0f, 0.0f, 0.0f, 0.8f, 0.0f};
    float p[8], sel[8];
    for (int e = 0; e < 8; e++) p[e] = 1.0f / (1.0f + expf(-logits[e])), sel[e] = p[e] + bias[e];
    /* group sums: g0 = sel0+sel1, g1 = sel2+sel3, g2 = sel4+sel5, g3 = sel6+sel7; the two best */
    float g[4];
    for (int i = 0; i < 4; i++) g[i] = sel[2 * i] + sel[2 * i + 1];
    int b0 = 0;
    for (int i = 1; i < 4; i++) if (g[i] > g[b0]) b0 = i;
    int b1 = b0 == 0 ? 1 : 0;
    for (int i = 0; i < 4; i++) if (i != b0 && g[i] > g[b1]) b1 = i;
    CHECK(b0 == 3 && b1 == 2, "the hand rule's groups: %d %d", b0, b1);
    /* experts of groups 2 and 3 by biased score: 6 (0.45+0.8), 4, 5, then 7 */
    st_route_cfg c = {8, 3, ST_GATING_SIGMOID, 1, 2.5f, 4, 2, bias};
    int32_t ids[3];
    float w[3];
    st_route_scored(&c, logits, ids, w);
    CHECK(ids[0] == 6 && ids[1] == 4 && ids[2] == 5, "grouped top-3: %d %d %d", ids[0], ids[1], ids[2]);
    const float tot = p[6] + p[4] + p[5];
    CHECK(fabsf(w[0] - 2.5f * p[6] / tot) < 1e-6f && fabsf(w[2] - 2.5f * p[5] / tot) < 1e-6f,
          "unbiased, renormalized, scaled weights: %g %g %g", w[0], w[1], w[2]);
    /* without groups expert 1 (the largest score) loses to its bias only against 6 */
    st_route_cfg c2 = {8, 2, ST_GATING_SIGMOID, 0, 1.0f, 1, 1, bias};
    st_route_scored(&c2, logits, ids, w);
    CHECK(ids[0] == 6 && ids[1] == 4 && fabsf(w[0] - p[6]) < 1e-7f, "ungrouped: %d %d", ids[0], ids[1]);
    /* softmax without bias or groups is st_route_topk, then scaled */
    st_route_cfg c3 = {8, 3, ST_GATING_SOFTMAX, 0, 2.0f, 1, 1, NULL};
    int32_t ids2[3];
    float w2[3];
    st_route_scored(&c3, logits, ids, w);
    st_route_topk(logits, 8, 3, 0, ids2, w2);
    CHECK(ids[0] == ids2[0] && ids[2] == ids2[2] && w[1] == 2.0f * w2[1], "softmax path");
    /* softmax with groups: V2's scores grouped */
    st_route_cfg c4 = {8, 2, ST_GATING_SOFTMAX, 0, 1.0f, 4, 1, NULL};
    st_route_scored(&c4, logits, ids, w);
    CHECK(ids[0] == 1 && ids[1] == 0, "softmax, one group: %d %d", ids[0], ids[1]);
}

/* The KV cache keeps rows for attention layers only: qwen3next's recurrent layers get none,
 * latent attention keeps keys only. */
static void test_kv_layers(void) {
    st_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layer = 8;
    hp.n_head_kv = 2;
    hp.head_dim = 16;
    hp.head_dim_v = 16;
    hp.full_attn_interval = 4; /* layers 3 and 7 attend */
    st_kv_cache kv;
    CHECK(st_kv_init(&kv, &hp, 64, STRATA_TYPE_F32) == STRATA_OK, "kv init");
    CHECK(kv.bytes == (size_t)2 * 2 * 64 * 32 * 4, "two attention layers' K and V: %zu bytes", kv.bytes);
    int ok = 1;
    for (int il = 0; il < 8; il++) ok &= (kv.layers[il].k != NULL) == ((il + 1) % 4 == 0);
    CHECK(ok && kv.layers[3].k != kv.layers[7].k && kv.layers[7].vt, "rows for layers 3 and 7 only");
    st_kv_free(&kv);
    hp.full_attn_interval = 0;
    hp.n_lora_kv = 12; /* latent: head_dim 16 = 12 + rope 4, no V */
    CHECK(st_kv_init(&kv, &hp, 64, STRATA_TYPE_F16) == STRATA_OK && kv.bytes == (size_t)8 * 64 * 32 * 2 &&
              kv.layers[0].vt == NULL, "latent cache: keys only (%zu bytes)", kv.bytes);
    st_kv_free(&kv);
}

/* The chunked gated delta rule of one value head over T rows, fed in calls of splits[0],
 * splits[1], ... rows (cycled; a call cut at chunk starts, as the engine cuts it), chunks closed
 * as they fill. Outputs [T][dv]; S_open the state at the start of the last (open) chunk. */
static void gdn_chunked(const float *q, const float *k, const float *v, const float *g, const float *beta,
                        int64_t T, int64_t dk, int64_t dv, const int64_t *splits, int n_splits, float *out,
                        float *S_open) {
    enum { CH = ST_GDN_CHUNK };
    float *S[2], *K[2], *U[2], *G[2];
    for (int b = 0; b < 2; b++) {
        S[b] = calloc((size_t)(dk * dv), sizeof(float));
        K[b] = calloc((size_t)(dk * CH), sizeof(float));
        U[b] = calloc((size_t)(CH * dv), sizeof(float));
        G[b] = calloc(CH, sizeof(float));
    }
    for (int64_t pos = 0, call = 0; pos < T; call++) {
        const int64_t end = pos + splits[call % n_splits] < T ? pos + splits[call % n_splits] : T;
        while (pos < end) {
            const int64_t i0 = pos % CH, n = end - pos < CH - i0 ? end - pos : CH - i0;
            const int b = (int)((pos / CH) & 1);
            for (int64_t i = 0; i < n; i++)
                for (int64_t e = 0; e < dk; e++) K[b][e * CH + i0 + i] = k[(pos + i) * dk + e];
            const st_gdn_chunk c = {S[b], K[b], U[b], G[b], dk, dv};
            st_gdn_chunk_rows(&c, i0, n, q + pos * dk, dk, v + pos * dv, dv, g + pos, beta + pos, 1,
                              out + pos * dv, dv);
            if (i0 + n == CH) st_gdn_chunk_close(&c, CH, S[b ^ 1]);
            pos += n;
        }
    }
    memcpy(S_open, S[(T / CH) & 1], sizeof(float) * (size_t)(dk * dv));
    for (int b = 0; b < 2; b++) { free(S[b]); free(K[b]); free(U[b]); free(G[b]); }
}

/* The chunked form against the recurrent one (transformers' torch_recurrent_gated_delta_rule) in
 * double: S decays by e^g, S += k (x) beta (v - S^T k), out = S^T q; three chunks (150 rows), and
 * the same bits for the rows in one call, one at a time and in uneven calls. */
static void test_gdn_chunk(int64_t dk, int64_t dv) {
    const int64_t T = 150;
    float *q = malloc(sizeof(float) * (size_t)(T * dk)), *k = malloc(sizeof(float) * (size_t)(T * dk));
    float *v = malloc(sizeof(float) * (size_t)(T * dv)), g[150], beta[150];
    fill(q, T * dk, 1.0f);
    fill(k, T * dk, 1.0f);
    fill(v, T * dv, 1.0f);
    for (int64_t t = 0; t < T; t++) {
        st_l2norm(q + t * dk, dk, 1e-6f);
        st_l2norm(k + t * dk, dk, 1e-6f);
        for (int64_t e = 0; e < dk; e++) q[t * dk + e] *= 1.0f / sqrtf((float)dk);
        g[t] = t % 37 == 5 ? -6.0f : -0.3f * (1.0f + test_rng_float(&rng)); /* e^g in (e^-0.6, 1] */
        beta[t] = 0.5f + 0.5f * test_rng_float(&rng);
    }
    double *S = calloc((size_t)(dk * dv), sizeof(double)), *ref = malloc(sizeof(double) * (size_t)(T * dv));
    double *Sref = malloc(sizeof(double) * (size_t)(dk * dv)), delta[64];
    for (int64_t t = 0; t < T; t++) {
        if (t == 128) memcpy(Sref, S, sizeof(double) * (size_t)(dk * dv)); /* the third chunk's start */
        for (int64_t j = 0; j < dv; j++) {
            double sk = 0;
            for (int64_t i = 0; i < dk; i++) sk += (S[i * dv + j] *= exp((double)g[t])) * k[t * dk + i];
            delta[j] = (double)beta[t] * ((double)v[t * dv + j] - sk);
        }
        for (int64_t j = 0; j < dv; j++) {
            double o = 0;
            for (int64_t i = 0; i < dk; i++) o += (S[i * dv + j] += k[t * dk + i] * delta[j]) * q[t * dk + i];
            ref[t * dv + j] = o;
        }
    }
    const int64_t all[] = {T}, one[] = {1}, uneven[] = {1, 63, 2, 80, 3, 17, 64};
    float *out[3], *So[3];
    const int64_t *sp[3] = {all, one, uneven};
    const int nsp[3] = {1, 1, 7};
    for (int c = 0; c < 3; c++) {
        out[c] = malloc(sizeof(float) * (size_t)(T * dv));
        So[c] = malloc(sizeof(float) * (size_t)(dk * dv));
        gdn_chunked(q, k, v, g, beta, T, dk, dv, sp[c], nsp[c], out[c], So[c]);
    }
    double err = 0, mag = 0, serr = 0, smag = 0;
    for (int64_t i = 0; i < T * dv; i++) {
        err = fmax(err, fabs(out[0][i] - ref[i]));
        mag = fmax(mag, fabs(ref[i]));
    }
    for (int64_t i = 0; i < dk * dv; i++) {
        serr = fmax(serr, fabs(So[0][i] - Sref[i]));
        smag = fmax(smag, fabs(Sref[i]));
    }
    CHECK(err <= 1e-5 * mag, "gdn chunk %lldx%lld: outputs %.3g from the recurrent form (max %.3g)",
          (long long)dk, (long long)dv, err, mag);
    CHECK(serr <= 1e-5 * smag, "gdn chunk %lldx%lld: state at position 128 %.3g off (max %.3g)",
          (long long)dk, (long long)dv, serr, smag);
    printf("gdn chunk %lldx%lld: outputs %.3g of %.3g from the recurrent form, state %.3g of %.3g\n",
           (long long)dk, (long long)dv, err, mag, serr, smag);
    for (int c = 1; c < 3; c++)
        CHECK(!memcmp(out[c], out[0], sizeof(float) * (size_t)(T * dv)) &&
                  !memcmp(So[c], So[0], sizeof(float) * (size_t)(dk * dv)),
              "gdn chunk %lldx%lld: split %d gives other bits than one call", (long long)dk, (long long)dv, c);
    for (int c = 0; c < 3; c++) { free(out[c]); free(So[c]); }
    free(q); free(k); free(v); free(S); free(ref); free(Sref);
}

static void test_moe_type(strata_type type, st_threadpool **pools, int n_pools) {
    const int32_t E = 8, k = 3;
    const int64_t n_embd = 256, n_ff = 96, T = 13;
    tw gate = make_weights(type, n_embd, n_ff, E), up = make_weights(type, n_embd, n_ff, E);
    tw down = make_weights(type == STRATA_TYPE_Q4_K ? STRATA_TYPE_Q8_0 : type, n_ff, n_embd, E);
    st_expert ex[8] = {0};
    for (int e = 0; e < E; e++) {
        ex[e].gate = st_tensor_expert(&gate.t, e);
        ex[e].up = st_tensor_expert(&up.t, e);
        ex[e].down = st_tensor_expert(&down.t, e);
    }
    float *x = malloc(sizeof(float) * (size_t)(T * n_embd));
    fill(x, T * n_embd, 1.0f);
    int32_t ids[13 * 3];
    float wts[13 * 3];
    for (int64_t t = 0; t < T; t++) {
        float lg[8];
        fill(lg, E, 3.0f);
        if (t == 4) for (int e = 0; e < E; e++) lg[e] = e == 6 ? 1.0f : 0.0f; /* expert 6 + ties */
        st_route_topk(lg, E, k, t % 2, ids + t * k, wts + t * k);
    }
    void *ws = malloc(st_moe_wsize(T, k, E, n_embd, n_ff));
    float *out[3];
    for (int p = 0; p < n_pools; p++) {
        out[p] = malloc(sizeof(float) * (size_t)(T * n_embd));
        st_moe_ffn(pools[p], ex, E, x, T, ids, wts, k, out[p], ws);
    }
    /* double reference with the dequantized weights and unquantized activations */
    double err = 0, mag = 0;
    double *h = malloc(sizeof(double) * (size_t)n_ff);
    for (int64_t t = 0; t < T; t++) {
        double acc[256] = {0};
        for (int s = 0; s < k; s++) {
            int e = ids[t * k + s];
            for (int64_t r = 0; r < n_ff; r++) {
                double g = 0, u = 0;
                for (int64_t i = 0; i < n_embd; i++) {
                    g += (double)gate.deq[(e * n_ff + r) * n_embd + i] * x[t * n_embd + i];
                    u += (double)up.deq[(e * n_ff + r) * n_embd + i] * x[t * n_embd + i];
                }
                h[r] = g / (1 + exp(-g)) * u;
            }
            for (int64_t r = 0; r < n_embd; r++) {
                double d = 0;
                for (int64_t i = 0; i < n_ff; i++) d += (double)down.deq[(e * n_embd + r) * n_ff + i] * h[i];
                acc[r] += wts[t * k + s] * d;
            }
        }
        for (int64_t r = 0; r < n_embd; r++) {
            err = fmax(err, fabs(out[0][t * n_embd + r] - acc[r]));
            mag = fmax(mag, fabs(acc[r]));
        }
    }
    double tol = type == STRATA_TYPE_F32 ? 1e-5 : 2e-2;   /* q8 activations twice in a row */
    CHECK(err / mag < tol, "moe %s vs double reference: rel err %g", strata_type_name(type), err / mag);
    for (int p = 1; p < n_pools; p++)
        CHECK(memcmp(out[0], out[p], sizeof(float) * (size_t)(T * n_embd)) == 0,
              "moe %s bit-identical with %d threads", strata_type_name(type), st_threadpool_n_threads(pools[p]));
    /* a single token alone gives the same result as inside the batch (grouping is exact) */
    float one[256];
    st_moe_ffn(pools[0], ex, E, x + 7 * n_embd, 1, ids + 7 * k, wts + 7 * k, k, one, ws);
    CHECK(memcmp(one, out[0] + 7 * n_embd, sizeof one) == 0, "moe %s: batch row == single token",
          strata_type_name(type));
    /* one token's step in one dispatch (the default) and in three stages, on every pool, also
     * with a dropped slot: the same bits */
    int32_t ids1[3] = {ids[7 * k], -1, ids[7 * k + 2]};
    float ref1[256];
    st_moe_set_one_dispatch(0);
    st_moe_ffn(pools[0], ex, E, x + 7 * n_embd, 1, ids1, wts + 7 * k, k, ref1, ws);
    for (int p = 0; p < n_pools; p++)
        for (int on = 0; on <= 1; on++) {
            float got1[256], got2[256];
            st_moe_set_one_dispatch(on);
            st_moe_ffn(pools[p], ex, E, x + 7 * n_embd, 1, ids + 7 * k, wts + 7 * k, k, got1, ws);
            st_moe_ffn(pools[p], ex, E, x + 7 * n_embd, 1, ids1, wts + 7 * k, k, got2, ws);
            CHECK(memcmp(got1, one, sizeof one) == 0 && memcmp(got2, ref1, sizeof ref1) == 0,
                  "moe %s: one token, %d threads, one dispatch %d: not the staged bits", strata_type_name(type),
                  st_threadpool_n_threads(pools[p]), on);
        }
    st_moe_set_one_dispatch(1);
    /* the two halves (st_moe_ffn_begin / _end) with the caller busy between them, on every pool,
     * one token (posted to the workers) and the batch (stages in _end): st_moe_ffn's bits */
    for (int p = 0; p < n_pools; p++) {
        float got1[256], *gotb = malloc(sizeof(float) * (size_t)(T * n_embd));
        st_moe_ffn_begin(pools[p], ex, E, x + 7 * n_embd, 1, ids + 7 * k, wts + 7 * k, k, got1, ws);
        volatile double busy = 0; /* the caller's other work (a GPU session's launches) */
        for (int i = 0; i < 200000; i++) busy += i * 1e-9;
        st_moe_ffn_end(pools[p], ws);
        CHECK(memcmp(got1, one, sizeof one) == 0, "moe %s: begin / end, one token, %d threads: not st_moe_ffn's bits",
              strata_type_name(type), st_threadpool_n_threads(pools[p]));
        st_moe_ffn_begin(pools[p], ex, E, x, T, ids, wts, k, gotb, ws);
        st_moe_ffn_end(pools[p], ws);
        CHECK(gotb && memcmp(gotb, out[0], sizeof(float) * (size_t)(T * n_embd)) == 0,
              "moe %s: begin / end, %lld tokens, %d threads: not st_moe_ffn's bits", strata_type_name(type),
              (long long)T, st_threadpool_n_threads(pools[p]));
        free(gotb);
    }
    /* the rows before the sum (st_moe_ffn_end_rows, a GPU session's split): summed in slot order
     * as st_moe_ffn's combine does (first product, then each product and sum rounded), they give
     * its bits; a dropped slot's row is not written */
    for (int p = 0; p < n_pools; p++) {
        float *rows = malloc(sizeof(float) * (size_t)(T * k * n_embd)), *sum = malloc(sizeof(float) * (size_t)(T * n_embd));
        int32_t idr[13 * 3];
        for (int i = 0; i < 13 * 3; i++) idr[i] = i == 4 ? -1 : ids[i];
        float *ref = malloc(sizeof(float) * (size_t)(T * n_embd));
        st_moe_ffn(pools[p], ex, E, x, T, idr, wts, k, ref, ws);
        for (int64_t i = 0; i < T * k * n_embd; i++) rows[i] = -3.0f;
        st_moe_ffn_begin(pools[p], ex, E, x, T, idr, wts, k, sum, ws);
        st_moe_ffn_end_rows(pools[p], ws, rows);
        int untouched = 1;
        for (int64_t i = 0; i < n_embd; i++) untouched &= rows[4 * n_embd + i] == -3.0f;
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < n_embd; i++) {
                float o = 0.0f;
                int first = 1;
                for (int32_t q = 0; q < k; q++) {
                    if (idr[t * k + q] < 0) continue;
                    const float v = wts[t * k + q] * rows[(t * k + q) * n_embd + i];
                    o = first ? v : o + v;
                    first = 0;
                }
                sum[t * n_embd + i] = o;
            }
        CHECK(untouched && memcmp(sum, ref, sizeof(float) * (size_t)(T * n_embd)) == 0,
              "moe %s: the rows of st_moe_ffn_end_rows (%d threads), summed in slot order: %s", strata_type_name(type),
              st_threadpool_n_threads(pools[p]), untouched ? "not st_moe_ffn's bits" : "a dropped slot's row written");
        float one_rows[3 * 256], one_sum[256];
        st_moe_ffn_begin(pools[p], ex, E, x + 7 * n_embd, 1, ids + 7 * k, wts + 7 * k, k, one_sum, ws);
        st_moe_ffn_end_rows(pools[p], ws, one_rows); /* one token: the one-dispatch step */
        int same1 = 1;
        for (int64_t i = 0; i < n_embd; i++) {
            float o = wts[7 * k] * one_rows[i];
            for (int32_t q = 1; q < k; q++) o = o + wts[7 * k + q] * one_rows[q * n_embd + i];
            same1 &= memcmp(&o, &one[i], 4) == 0;
        }
        CHECK(same1, "moe %s: one token's rows (%d threads), summed: not st_moe_ffn's bits", strata_type_name(type),
              st_threadpool_n_threads(pools[p]));
        free(rows); free(sum); free(ref);
    }
    /* a batch with dropped slots (every third id -1): each row still the token alone */
    {
        int32_t idd[13 * 3];
        float bat[13 * 256], alone[256];
        for (int i = 0; i < 13 * 3; i++) idd[i] = i % 3 == 1 ? -1 : ids[i];
        st_moe_ffn(pools[n_pools - 1], ex, E, x, T, idd, wts, k, bat, ws);
        int same_d = 1;
        for (int64_t t = 0; t < T; t++) {
            st_moe_ffn(pools[0], ex, E, x + t * n_embd, 1, idd + t * k, wts + t * k, k, alone, ws);
            same_d &= memcmp(alone, bat + t * n_embd, sizeof alone) == 0;
        }
        CHECK(same_d, "moe %s: a batch with dropped slots, row by row == each token alone", strata_type_name(type));
    }
    /* warming experts (st_moe_warm): left to finish it reads every listed expert's bytes once
     * (repeats and ids out of range skipped); stopped at once it reads no more than that; a step
     * while a warm runs gives the same bits; no workers, nothing read */
    {
        const size_t ebytes = ex[0].gate.ne[1] * ex[0].gate.row_bytes + ex[0].up.ne[1] * ex[0].up.row_bytes +
                              ex[0].down.ne[1] * ex[0].down.row_bytes;
        const int32_t wid[6] = {5, 2, 5, -1, 8, 7}; /* 3 distinct in range */
        for (int p = 0; p < n_pools; p++) {
            st_moe_warm w;
            memset(&w, 0, sizeof w);
            CHECK(st_moe_warm_stop(pools[p], &w) == 0, "warm: stop before any start reads nothing");
            st_moe_warm_start(pools[p], &w, ex, E, wid, 6);
            st_threadpool_wait(pools[p]);
            const int64_t all = st_moe_warm_stop(pools[p], &w);
            const int64_t want = st_threadpool_n_threads(pools[p]) > 1 ? (int64_t)(3 * ebytes) : 0;
            st_moe_warm_start(pools[p], &w, ex, E, wid, 6);
            const int64_t early = st_moe_warm_stop(pools[p], &w);
            float got[256];
            st_moe_warm_start(pools[p], &w, ex, E, wid, 6);
            st_moe_ffn(pools[p], ex, E, x + 7 * n_embd, 1, ids + 7 * k, wts + 7 * k, k, got, ws);
            st_moe_warm_stop(pools[p], &w);
            CHECK(all == want && early >= 0 && early <= want && !memcmp(got, one, sizeof one),
                  "moe %s warm on %d threads: read %lld of %lld bytes (stopped at once: %lld), step bits %s",
                  strata_type_name(type), st_threadpool_n_threads(pools[p]), (long long)all, (long long)want,
                  (long long)early, memcmp(got, one, sizeof one) ? "differ" : "equal");
        }
    }
    for (int p = 0; p < n_pools; p++) free(out[p]);
    free(h); free(ws); free(x);
    free_weights(&gate); free_weights(&up); free_weights(&down);
}

/* st_det_expf (c/core/det_expf.h, the CPU's and the GPU's silu): within 2 ulp of e^x over the
 * float range it covers, exact at 0, the limits as documented; silu within 4 ulp of its double. */
static int64_t ulp_dist(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = (int32_t)0x80000000 - ia;
    if (ib < 0) ib = (int32_t)0x80000000 - ib;
    return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

static void test_det_expf(void) {
    int64_t worst = 0, worst_silu = 0;
    float at = 0, at_silu = 0;
    for (double v = -87.3; v <= 88.7; v += 0.000731) {
        const float x = (float)v;
        const int64_t d = ulp_dist(st_det_expf(x), (float)exp((double)x));
        if (d > worst) { worst = d; at = x; }
        if (x > -80.0f && x < 80.0f) {
            const double sd = (double)x / (1.0 + exp(-(double)x));
            if (fabs(sd) > 1e-30) {
                const int64_t ds = ulp_dist(st_silu(x), (float)sd);
                if (ds > worst_silu) { worst_silu = ds; at_silu = x; }
            }
        }
    }
    CHECK(worst <= 2, "st_det_expf: %lld ulp from exp at %.9g", (long long)worst, (double)at);
    CHECK(worst_silu <= 4, "st_silu: %lld ulp from its double at %.9g", (long long)worst_silu, (double)at_silu);
    CHECK(st_det_expf(0.0f) == 1.0f && st_det_expf(-0.0f) == 1.0f, "st_det_expf(0) = 1");
    CHECK(st_det_expf(89.0f) == INFINITY && st_det_expf(INFINITY) == INFINITY, "st_det_expf: overflow to inf");
    CHECK(st_det_expf(-88.0f) == 0.0f && st_det_expf(-INFINITY) == 0.0f, "st_det_expf: below FLT_MIN to 0");
    CHECK(isnan(st_det_expf(NAN)), "st_det_expf(NaN) is NaN");
    CHECK(st_silu(-100.0f) == 0.0f && st_silu(100.0f) == 100.0f, "st_silu at the ends");
    printf("st_det_expf: worst %lld ulp (at %.6g), st_silu %lld ulp (at %.6g)\n", (long long)worst, (double)at,
           (long long)worst_silu, (double)at_silu);
}

int main(void) {
    test_det_expf();
    test_threadpool();
    test_threadpool_stress();
    st_threadpool *pools[3] = {NULL, NULL, NULL};
    st_threadpool_create(1, &pools[0]);
    st_threadpool_create(2, &pools[1]);
    st_threadpool_create(5, &pools[2]);
    strata_type types[] = {STRATA_TYPE_F32, STRATA_TYPE_F16, STRATA_TYPE_BF16, STRATA_TYPE_Q8_0,
                           STRATA_TYPE_Q4_0, STRATA_TYPE_Q4_K, STRATA_TYPE_Q6_K};
    for (size_t i = 0; i < ST_ARRAY_LEN(types); i++) test_matmul_type(types[i], pools, 3);
    test_matmul_multi(pools, 3);
    test_norms();
    test_rope();
    test_attention_kv(STRATA_TYPE_F32, pools, 3);
    test_attention_kv(STRATA_TYPE_F16, pools, 3);
    test_route();
    test_route_scored();
    test_kv_layers();
    test_gdn_chunk(16, 16);
    test_gdn_chunk(32, 24);
    test_moe_type(STRATA_TYPE_F32, pools, 3);
    test_moe_type(STRATA_TYPE_Q8_0, pools, 3);
    test_moe_type(STRATA_TYPE_Q4_K, pools, 3);
    for (int p = 0; p < 3; p++) st_threadpool_free(pools[p]);
    return test_report();
}
