/* pool.c - the CPU expert pool (pool.h): a coordinator thread that sleeps between steps, polls
 * each layer's doorbell during a step, and runs the grouped expert FFN on its thread pool. */
#include "pool.h"
#include "common.h"
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>


struct st_expert_pool {
    const st_expert *experts;          /* [n_layer][n_expert] */
    int32_t n_layer, n_expert, k, max_T;
    int64_t n_embd, n_ff;
    st_doorbell_layer *db;             /* [n_layer] */
    st_threadpool *tp;
    void *ws;                          /* st_moe_wsize(max_T, k, n_expert, n_embd, n_ff) */
    int32_t *ids_heavy, *ids_light;    /* [max_T][k] a split request's two halves of ids */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t announced, served;        /* steps announced by the host, and fully served */
    atomic_int stop;
    int64_t rows;
    double seconds;
};

static double st_pool_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Waits until layer l's request of step s is published; 0 when stopped instead. */
static int st_pool_wait_request(st_expert_pool *p, const st_doorbell_layer *d, uint32_t s) {
    for (uint64_t i = 0;; i++) {
        /* s or a later step: a layer published empty by st_pool_skip may already carry the next
         * step's number when the pool serves this one late (the GPU waits for no such layer) */
        if ((int32_t)(atomic_load_explicit(&d->req_seq, memory_order_acquire) - s) >= 0) return 1;
        if (atomic_load_explicit(&p->stop, memory_order_relaxed)) return 0;
        if (i > 20000) sched_yield(); /* the producer is slow: let others run */
        else ST_PAUSE();
    }
}

/* Computes layer l's request of T rows: per slot into rows (rows set), in one pass into out, or
 * (a split) the slots of weight >= below into out, part_seq raised, then the others into
 * out_light. */
static void st_pool_serve(st_expert_pool *p, int32_t l, st_doorbell_layer *d, int64_t T, uint32_t s) {
    const st_expert *ex = p->experts + (size_t)l * (size_t)p->n_expert;
    if (d->rows) { /* (out: _begin's scratch, zeroed where every slot is another side's) */
        st_moe_ffn_begin(p->tp, ex, p->n_expert, d->x, T, d->ids, d->wts, p->k, d->out, p->ws);
        st_moe_ffn_end_rows(p->tp, p->ws, d->rows);
        return;
    }
    if (!(d->below > 0) || !d->out_light) {
        st_moe_ffn(p->tp, ex, p->n_expert, d->x, T, d->ids, d->wts, p->k, d->out, p->ws);
        return;
    }
    for (int64_t i = 0; i < T * p->k; i++) {
        const int heavy = d->wts[i] >= d->below;
        p->ids_heavy[i] = heavy ? d->ids[i] : -1;
        p->ids_light[i] = heavy ? -1 : d->ids[i];
    }
    st_moe_ffn(p->tp, ex, p->n_expert, d->x, T, p->ids_heavy, d->wts, p->k, d->out, p->ws);
    atomic_store_explicit(&d->part_seq, s, memory_order_release);
    st_moe_ffn(p->tp, ex, p->n_expert, d->x, T, p->ids_light, d->wts, p->k, d->out_light, p->ws);
}

static void *st_pool_main(void *arg) {
    st_expert_pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->served == p->announced && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
        const int stop = atomic_load(&p->stop) && p->served == p->announced;
        const uint32_t s = p->served + 1;
        pthread_mutex_unlock(&p->mu);
        if (stop) return NULL;
        /* the workers spin through the producer's part of each layer instead of sleeping and
         * waking (bench/micro/bench_pool_gap), for the step's duration */
        st_threadpool_hold(p->tp, 1);
        for (int32_t l = 0; l < p->n_layer; l++) {
            st_doorbell_layer *d = &p->db[l];
            if (!st_pool_wait_request(p, d, s)) {
                st_threadpool_hold(p->tp, 0);
                return NULL;
            }
            const int64_t T = d->T;
            if (T > 0 && T <= p->max_T) {
                const double t0 = st_pool_now();
                st_pool_serve(p, l, d, T, s);
                p->seconds += st_pool_now() - t0;
                p->rows += T;
            }
            atomic_store_explicit(&d->part_seq, s, memory_order_release); /* (again, for a split) */
            atomic_store_explicit(&d->done_seq, s, memory_order_release);
        }
        st_threadpool_hold(p->tp, 0);
        pthread_mutex_lock(&p->mu);
        p->served = s;
        pthread_mutex_unlock(&p->mu);
    }
}

strata_status st_pool_create(const st_expert *experts, int32_t n_layer, int32_t n_expert,
                             int64_t n_embd, int64_t n_ff, int32_t k, int32_t max_T,
                             st_doorbell_layer *db, int n_threads, st_expert_pool **out) {
    if (!out) return st_error(STRATA_ERR_INVALID_ARG, "st_pool_create: out is NULL");
    *out = NULL;
    if (!experts || !db || n_layer < 1 || n_expert < 1 || k < 1 || k > n_expert || max_T < 1 ||
        n_embd < 1 || n_ff < 1 || n_threads < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "expert pool: bad arguments (%d layers, %d experts, "
                        "k %d, max_T %d, %d threads)", (int)n_layer, (int)n_expert, (int)k,
                        (int)max_T, n_threads);
    st_expert_pool *p = calloc(1, sizeof *p);
    if (!p) return st_error(STRATA_ERR_NOMEM, "expert pool: out of memory");
    p->experts = experts;
    p->n_layer = n_layer;
    p->n_expert = n_expert;
    p->n_embd = n_embd;
    p->n_ff = n_ff;
    p->k = k;
    p->max_T = max_T;
    p->db = db;
    atomic_init(&p->stop, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->ws = malloc(st_moe_wsize(max_T, k, n_expert, n_embd, n_ff));
    p->ids_heavy = malloc(sizeof(int32_t) * (size_t)max_T * (size_t)k);
    p->ids_light = malloc(sizeof(int32_t) * (size_t)max_T * (size_t)k);
    strata_status st = p->ws && p->ids_heavy && p->ids_light ? st_threadpool_create(n_threads, &p->tp)
                             : st_error(STRATA_ERR_NOMEM, "expert pool: out of memory for its workspace");
    if (st == STRATA_OK) {
        if (pthread_create(&p->thread, NULL, st_pool_main, p) != 0)
            st = st_error(STRATA_ERR_INTERNAL, "expert pool: pthread_create failed");
        else
            p->started = 1;
    }
    if (st != STRATA_OK) {
        st_pool_free(p);
        return st;
    }
    *out = p;
    return STRATA_OK;
}

void st_pool_free(st_expert_pool *p) {
    if (!p) return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->stop, 1);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    st_threadpool_free(p->tp);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->ws);
    free(p->ids_heavy);
    free(p->ids_light);
    free(p);
}

uint32_t st_pool_step(st_expert_pool *p) {
    pthread_mutex_lock(&p->mu);
    const uint32_t s = ++p->announced;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return s;
}

void st_pool_skip(st_expert_pool *p, int32_t l, uint32_t step) {
    if (!p || l < 0 || l >= p->n_layer) return;
    st_doorbell_layer *d = &p->db[l];
    d->T = 0;
    atomic_store_explicit(&d->req_seq, step, memory_order_release);
}

void st_pool_abandon(st_expert_pool *p, uint32_t step) {
    if (!p) return;
    for (int32_t l = 0; l < p->n_layer; l++) {
        st_doorbell_layer *d = &p->db[l];
        if (atomic_load_explicit(&d->req_seq, memory_order_acquire) == step) continue;
        d->T = 0;
        atomic_store_explicit(&d->req_seq, step, memory_order_release);
    }
}

void st_pool_counters(const st_expert_pool *p, int64_t *rows, double *seconds) {
    /* read after the producer saw the last done flag (acquire), so the plain fields are current */
    if (rows) *rows = p ? p->rows : 0;
    if (seconds) *seconds = p ? p->seconds : 0;
}
