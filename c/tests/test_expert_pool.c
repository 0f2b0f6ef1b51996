/* test_expert_pool.c - the CPU expert pool and its doorbell protocol (c/experts/pool.c), with the
 * test's main thread playing the GPU: for hundreds of steps and every layer, random rows, routing
 * and CPU masks (slots with id -1 are not the CPU's) are published, the done flag is awaited, and
 * the output rows must equal st_moe_ffn on the same inputs bit for bit; empty layers (T = 0),
 * steps announced ahead, and freeing the pool while it waits for a request that never comes.
 * Split requests (below > 0: the deferral's partial flag): the heavy slots' sum is in out when
 * part_seq is seen, the light ones' in out_light at done_seq, each st_moe_ffn's bits over its
 * half; every call raises part_seq, none leaves it ahead of done_seq.
 * Per-slot requests (rows set: the GPU expert cache's misses, layer 2 here, split steps too):
 * each CPU slot's row equals st_moe_ffn_end_rows' on the same inputs bit for bit, the other
 * slots' rows are left as they were, and those rows summed in slot order (st_moe_ffn's combine,
 * with the rows of slots the test plays the GPU's filled in by the same kernels) give
 * st_moe_ffn's output over every slot bit for bit. */
#include "pool.h"
#include "quant.h"
#include "test.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define L 4
#define X 8
#define K 3
#define E 96
#define F 64
#define MAXT 6
#define ROWS_LAYER 2 /* the layer served per slot */

static uint8_t *make_matrix(int64_t rows, int64_t cols, test_rng *r) {
    const size_t rb = (size_t)strata_row_bytes(STRATA_TYPE_Q8_0, cols);
    uint8_t *m = malloc(rb * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)cols);
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t j = 0; j < cols; j++) row[j] = test_rng_float(r) * 0.2f;
        strata_quantize_row(STRATA_TYPE_Q8_0, row, m + (size_t)i * rb, cols);
    }
    free(row);
    return m;
}

static st_tensor view(const uint8_t *data, int64_t cols, int64_t rows) {
    st_tensor t;
    memset(&t, 0, sizeof t);
    t.type = STRATA_TYPE_Q8_0;
    t.data = data;
    t.ne[0] = cols; t.ne[1] = rows; t.ne[2] = 1;
    t.row_bytes = (size_t)strata_row_bytes(STRATA_TYPE_Q8_0, cols);
    t.name = "expert";
    return t;
}

/* out[t] = sum over slots s in order of wts[t][s] * rows[t][s] (valid ids only; 0 where none):
 * st_moe_ffn's combine, each product and sum rounded on its own (-ffp-contract=off). */
static void combine_rows(const float *rows, const int32_t *ids, const float *wts, int T, float *out) {
    for (int t = 0; t < T; t++) {
        float *o = out + (size_t)t * E;
        int first = 1;
        for (int j = 0; j < K; j++) {
            const int32_t e = ids[t * K + j];
            if (e < 0 || e >= X) continue;
            const float w = wts[t * K + j], *y = rows + ((size_t)t * K + (size_t)j) * E;
            for (int i = 0; i < E; i++) o[i] = first ? w * y[i] : o[i] + w * y[i];
            first = 0;
        }
        if (first) memset(o, 0, sizeof(float) * E);
    }
}

/* Layer ROWS_LAYER's per-slot answer of T rows (the CPU's slots in d->ids, -1 elsewhere; all: the
 * same slots with the GPU's filled in, gpu_ids the ones the CPU skipped), its rows filled with
 * sentinels before the request: whether the CPU's slots' rows are st_moe_ffn_end_rows' bits,
 * the others' still sentinels, and the rows completed with the other slots' summing to
 * st_moe_ffn over all of them. */
static int check_rows(const st_expert *ex, const st_doorbell_layer *d, int T, const int32_t *all,
                      const int32_t *gpu_ids, float *ref, void *ws) {
    const size_t n = (size_t)T * K * E;
    float *want = malloc(sizeof(float) * n), *sum = malloc(sizeof(float) * (size_t)T * E);
    float *full = malloc(sizeof(float) * n);
    int ok = want && sum && full;
    for (size_t i = 0; ok && i < n; i++) want[i] = full[i] = -7.0f;
    if (ok) {
        st_moe_ffn_begin(NULL, ex, X, d->x, T, d->ids, d->wts, K, ref, ws);
        st_moe_ffn_end_rows(NULL, ws, want);
        ok = memcmp(want, d->rows, sizeof(float) * n) == 0; /* (the sentinels too) */
        st_moe_ffn_begin(NULL, ex, X, d->x, T, gpu_ids, d->wts, K, ref, ws);
        st_moe_ffn_end_rows(NULL, ws, full); /* the slots the test plays the GPU's */
        for (int i = 0; i < T * K; i++)
            if (d->ids[i] >= 0) memcpy(full + (size_t)i * E, d->rows + (size_t)i * E, sizeof(float) * E);
        combine_rows(full, all, d->wts, T, sum);
        st_moe_ffn(NULL, ex, X, d->x, T, all, d->wts, K, ref, ws);
        ok = ok && memcmp(sum, ref, sizeof(float) * (size_t)T * E) == 0;
    }
    free(want);
    free(sum);
    free(full);
    return ok;
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "FAIL test_expert_pool: hung (an abandoned step left unfinished, or st_pool_free "
                              "on a step whose requests never came)\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
    _exit(1);
}

static void wait_done(st_doorbell_layer *d, uint32_t s) {
    while (atomic_load_explicit(&d->done_seq, memory_order_acquire) != s) { /* the GPU spins too */ }
}

int main(void) {
    test_rng r = {2024};
    st_expert experts[L * X];
    memset(experts, 0, sizeof experts); /* no biases, SwiGLU */
    uint8_t *mats[L * X * 3];
    for (int e = 0; e < L * X; e++) {
        mats[3 * e] = make_matrix(F, E, &r);
        mats[3 * e + 1] = make_matrix(F, E, &r);
        mats[3 * e + 2] = make_matrix(E, F, &r);
        experts[e].gate = view(mats[3 * e], E, F);
        experts[e].up = view(mats[3 * e + 1], E, F);
        experts[e].down = view(mats[3 * e + 2], F, E);
    }
    st_doorbell_layer db[L];
    memset(db, 0, sizeof db);
    for (int l = 0; l < L; l++) {
        db[l].x = malloc(sizeof(float) * MAXT * E);
        db[l].ids = malloc(sizeof(int32_t) * MAXT * K);
        db[l].wts = malloc(sizeof(float) * MAXT * K);
        db[l].out = malloc(sizeof(float) * MAXT * E);
        db[l].out_light = malloc(sizeof(float) * MAXT * E);
    }
    db[ROWS_LAYER].rows = malloc(sizeof(float) * MAXT * K * E);
    st_expert_pool *pool = NULL;
    CHECK(st_pool_create(experts, L, X, E, F, K, MAXT, db, 2, &pool) == STRATA_OK, "create: %s",
          strata_last_error());
    st_expert_pool *bad = NULL;
    CHECK(st_pool_create(experts, L, X, E, F, X + 1, MAXT, db, 2, &bad) == STRATA_ERR_INVALID_ARG && !bad,
          "k > n_expert refused");
    float *ref = malloc(sizeof(float) * MAXT * E);
    void *ws = malloc(st_moe_wsize(MAXT, K, X, E, F));
    int same = 1, steps = 0, empty = 0, split_same = 1, flags = 1, splits = 0;
    int64_t rows = 0;
    int32_t idh[MAXT * K], idl[MAXT * K], all[MAXT * K], gpu_ids[MAXT * K];
    int rows_same = 1, rows_calls = 0;
    float *refl = malloc(sizeof(float) * MAXT * E);
    for (int it = 0; pool && it < 150; it++) {
        /* announce one or two steps ahead, then produce them in order */
        const int ahead = 1 + it % 2;
        uint32_t s[2];
        for (int a = 0; a < ahead; a++) s[a] = st_pool_step(pool);
        for (int a = 0; a < ahead; a++) {
            for (int l = 0; l < L; l++) {
                st_doorbell_layer *d = &db[l];
                const int T = (int)(test_rng_next(&r) % (MAXT + 1));
                d->T = T;
                empty += T == 0;
                for (int i = 0; i < T * E; i++) d->x[i] = test_rng_float(&r);
                for (int t = 0; t < T; t++)
                    for (int j = 0; j < K; j++) {
                        /* distinct experts per row; about a third of the slots are not the CPU's */
                        d->ids[t * K + j] = all[t * K + j] = (int32_t)((t * 3 + j * 5 + it) % X);
                        if (test_rng_next(&r) % 3 == 0) d->ids[t * K + j] = -1;
                        gpu_ids[t * K + j] = d->ids[t * K + j] < 0 ? all[t * K + j] : -1;
                        d->wts[t * K + j] = 0.1f + 0.3f * (test_rng_float(&r) + 1.0f);
                    }
                /* every third step of layers 1 and 3 split at 0.3 (the weights run 0.1 .. 0.7) */
                const int split = (it % 3 == 0) && (l & 1);
                d->below = split || (l == ROWS_LAYER && it % 2) ? 0.3f : 0.0f; /* (rows: not read) */
                if (d->rows) for (int i = 0; i < MAXT * K * E; i++) d->rows[i] = -7.0f;
                atomic_store_explicit(&d->req_seq, s[a], memory_order_release);
                if (split && T > 0) { /* the heavy half is there at the partial flag */
                    while (atomic_load_explicit(&d->part_seq, memory_order_acquire) != s[a]) { }
                    for (int i = 0; i < T * K; i++) {
                        idh[i] = d->wts[i] >= 0.3f ? d->ids[i] : -1;
                        idl[i] = d->wts[i] >= 0.3f ? -1 : d->ids[i];
                    }
                    st_moe_ffn(NULL, experts + l * X, X, d->x, T, idh, d->wts, K, ref, ws);
                    split_same &= memcmp(ref, d->out, sizeof(float) * (size_t)(T * E)) == 0;
                    splits++;
                }
                wait_done(d, s[a]);
                flags &= atomic_load_explicit(&d->part_seq, memory_order_acquire) == s[a];
                if (d->rows && T > 0) {
                    rows_same &= check_rows(experts + l * X, d, T, all, gpu_ids, ref, ws);
                    rows_calls++;
                    rows += T;
                } else if (split && T > 0) {
                    st_moe_ffn(NULL, experts + l * X, X, d->x, T, idl, d->wts, K, refl, ws);
                    split_same &= memcmp(refl, d->out_light, sizeof(float) * (size_t)(T * E)) == 0;
                    rows += T;
                } else if (T > 0) {
                    st_moe_ffn(NULL, experts + l * X, X, d->x, T, d->ids, d->wts, K, ref, ws);
                    same &= memcmp(ref, d->out, sizeof(float) * (size_t)(T * E)) == 0;
                    rows += T;
                }
            }
            steps++;
        }
    }
    CHECK(same, "%d steps x %d layers: pool output bit-identical to st_moe_ffn", steps, L);
    CHECK(empty > 0, "empty layers (T = 0) were exercised (%d)", empty);
    CHECK(splits > 0 && split_same, "%d split requests: the heavy slots' sum at the partial flag, the light "
          "ones' at done, each st_moe_ffn's bits", splits);
    CHECK(flags, "every call raised its partial flag by its done flag");
    CHECK(rows_calls > 0 && rows_same, "%d per-slot requests: st_moe_ffn_end_rows' rows for the CPU's slots, "
          "the others untouched, summed with the other slots' in slot order st_moe_ffn's bits", rows_calls);
    for (int l = 0; l < L; l++) db[l].below = 0.0f;
    signal(SIGALRM, on_alarm); /* from here on a hang fails the test */
    alarm(60);
    int64_t prow = 0;
    double psec = 0;
    st_pool_counters(pool, &prow, &psec);
    CHECK(prow == rows, "rows counted: %lld of %lld", (long long)prow, (long long)rows);
    /* a producer that fails after publishing one layer of a step: st_pool_abandon finishes the
     * step (the other layers empty), and the next step is served as usual, bit for bit */
    if (pool) {
        const uint32_t sa = st_pool_step(pool);
        db[0].T = 0;
        atomic_store_explicit(&db[0].req_seq, sa, memory_order_release);
        wait_done(&db[0], sa);
        st_pool_abandon(pool, sa);
        int raised = 1;
        for (int l = 0; l < L; l++) { /* hangs (the alarm below) if not */
            wait_done(&db[l], sa);
            raised &= atomic_load_explicit(&db[l].part_seq, memory_order_acquire) == sa;
        }
        CHECK(raised, "an abandoned step's empty layers raise their partial flags too");
        const uint32_t sb = st_pool_step(pool);
        int next_same = 1;
        for (int l = 0; l < L; l++) {
            st_doorbell_layer *d = &db[l];
            d->T = 2;
            for (int i = 0; i < 2 * E; i++) d->x[i] = test_rng_float(&r);
            for (int j = 0; j < 2 * K; j++) {
                d->ids[j] = all[j] = (int32_t)((j * 7 + l) % X);
                d->wts[j] = 0.25f;
                gpu_ids[j] = -1;
            }
            if (d->rows) for (int i = 0; i < MAXT * K * E; i++) d->rows[i] = -7.0f;
            atomic_store_explicit(&d->req_seq, sb, memory_order_release);
            wait_done(d, sb);
            if (d->rows) {
                next_same &= check_rows(experts + l * X, d, 2, all, gpu_ids, ref, ws);
                continue;
            }
            st_moe_ffn(NULL, experts + l * X, X, d->x, 2, d->ids, d->wts, K, ref, ws);
            next_same &= memcmp(ref, d->out, sizeof(float) * 2 * E) == 0;
        }
        CHECK(next_same, "after an abandoned step the next step's output is st_moe_ffn's");
    }
    /* a step announced whose requests never come: freeing must not hang (an alarm fails it) */
    if (pool) st_pool_step(pool);
    st_pool_free(pool);
    alarm(0);
    free(ref); free(refl); free(ws);
    for (int l = 0; l < L; l++) {
        free(db[l].x); free(db[l].ids); free(db[l].wts); free(db[l].out); free(db[l].out_light);
    }
    free(db[ROWS_LAYER].rows);
    for (int i = 0; i < L * X * 3; i++) free(mats[i]);
    return test_report();
}
