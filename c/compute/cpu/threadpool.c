/* threadpool.c - the persistent CPU thread pool (threadpool.h): worker start/stop, job dispatch
 * by generation counter (spin, then condition variable), chunked parallel-for with a
 * generation-tagged claim word, and the completion barrier (counts finished items). */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>


/* Spin iterations before sleeping: tens of microseconds, enough to catch back-to-back jobs. */
#define ST_SPIN_ITERS 4000

typedef struct {
    st_threadpool *tp;
    int id;
} st_worker_arg;

struct st_threadpool {
    int n_threads;                 /* including the caller */
    pthread_t *threads;            /* [n_threads - 1] */
    st_worker_arg *args;           /* [n_threads - 1] */
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t cv_work;        /* a new job (or stop) */
    pthread_cond_t cv_done;        /* the last chunk of a job finished */
    atomic_uint_fast32_t gen;      /* job generation; a change means "new job" */
    atomic_int stop;
    atomic_int hold;               /* st_threadpool_hold: workers keep spinning between jobs */
    /* Claim word: (generation << 32) | first unclaimed item. A thread takes a chunk with a
     * compare-and-swap that also checks the generation, so a worker that wakes up late can
     * never take items of a job it did not see start, and the caller never waits for workers
     * that have not claimed anything (a descheduled worker does not stall the barrier).
     * Before the caller rewrites n_items/chunk for the next job it closes the word
     * (ST_CLAIM_CLOSED): a worker that read the old word and then the new job's n_items (larger)
     * would otherwise win its CAS on the old word and count a phantom chunk into the new job's
     * done counter, which then never equals n_items (a deadlock seen on 2-core machines).
     * claim, n_items and chunk are sequentially consistent so that order holds for every reader. */
    atomic_uint_fast64_t claim;
    atomic_int_fast64_t done;      /* items of the current job finished */
    /* the current job: written by the caller before the claim word is published; read by a
     * worker only after it claimed a chunk (the job cannot end before that chunk is done) */
    st_task_fn fn;
    void *ctx;
    atomic_int_fast64_t n_items;   /* read before the claim, possibly while rewritten */
    atomic_int_fast64_t chunk;
    int posted;                    /* a st_threadpool_post job not yet waited for (caller only) */
};

#define ST_CLAIM_CLOSED 0xffffffffu  /* item index of a closed claim word: above any n_items */

/* ---------------------------------------------------------------------------------------------
 * Work loop
 * ------------------------------------------------------------------------------------------- */

/* Takes and runs chunks of job generation g until none is left. */
static void st_do_chunks(st_threadpool *tp, uint32_t g, int id) {
    for (;;) {
        uint_fast64_t c = atomic_load(&tp->claim);
        if ((uint32_t)(c >> 32) != g) return;
        const uint64_t b = c & 0xffffffffu;
        /* these may already be the next job's values; then the word was closed before they were
         * written (seq_cst order), so the CAS below fails and the loop sees the new word */
        const int64_t n = atomic_load(&tp->n_items);
        const int64_t chunk = atomic_load(&tp->chunk);
        if ((int64_t)b >= n) return;
        if (!atomic_compare_exchange_weak(&tp->claim, &c, c + (uint64_t)chunk)) continue;
        const int64_t e = (int64_t)b + chunk < n ? (int64_t)b + chunk : n;
        tp->fn(tp->ctx, (int64_t)b, e, id);
        const int64_t cnt = e - (int64_t)b;
        if (atomic_fetch_add_explicit(&tp->done, cnt, memory_order_acq_rel) + cnt == n) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->cv_done);
            pthread_mutex_unlock(&tp->mu);
        }
    }
}

static void *st_worker_main(void *p) {
    st_worker_arg *a = p;
    st_threadpool *tp = a->tp;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = (uint32_t)atomic_load_explicit(&tp->gen, memory_order_acquire);
        for (int i = 0; g == seen; i++) {
            if (i >= ST_SPIN_ITERS) { /* held: spin on, yielding every 64 rounds; else sleep */
                if (!atomic_load_explicit(&tp->hold, memory_order_relaxed)) break;
                i = ST_SPIN_ITERS / 4;
            }
            if (atomic_load_explicit(&tp->stop, memory_order_relaxed)) return NULL;
            if (i >= ST_SPIN_ITERS / 4 && i % 64 == 0) sched_yield();
            else ST_PAUSE();
            g = (uint32_t)atomic_load_explicit(&tp->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&tp->mu);
            while ((g = (uint32_t)atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen &&
                   !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv_work, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = g;
        st_do_chunks(tp, g, a->id);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Create / free
 * ------------------------------------------------------------------------------------------- */

strata_status st_threadpool_create(int n_threads, st_threadpool **out) {
    if (!out || n_threads < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "threadpool: n_threads %d < 1", n_threads);
    *out = NULL;
    st_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return st_error(STRATA_ERR_NOMEM, "threadpool: out of memory");
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv_work, NULL);
    pthread_cond_init(&tp->cv_done, NULL);
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->stop, 0);
    atomic_init(&tp->hold, 0);
    atomic_init(&tp->claim, 0);
    atomic_init(&tp->done, 0);
    atomic_init(&tp->n_items, 0);
    atomic_init(&tp->chunk, 1);
    if (n_threads > 1) {
        tp->threads = calloc((size_t)n_threads - 1, sizeof *tp->threads);
        tp->args = calloc((size_t)n_threads - 1, sizeof *tp->args);
        if (!tp->threads || !tp->args) {
            st_threadpool_free(tp);
            return st_error(STRATA_ERR_NOMEM, "threadpool: out of memory for %d threads", n_threads);
        }
        for (int i = 0; i < n_threads - 1; i++) {
            tp->args[i].tp = tp;
            tp->args[i].id = i + 1;
            if (pthread_create(&tp->threads[i], NULL, st_worker_main, &tp->args[i]) != 0) {
                st_threadpool_free(tp);
                return st_error(STRATA_ERR_INTERNAL, "threadpool: pthread_create failed for thread %d of %d",
                                i + 1, n_threads);
            }
            tp->n_started++;
        }
    }
    *out = tp;
    return STRATA_OK;
}

int st_threadpool_pin(st_threadpool *tp) {
    if (!tp || tp->n_started < 1) return 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < tp->n_threads) return 0;
    int cpus[CPU_SETSIZE], n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < tp->n_threads; c++)
        if (CPU_ISSET(c, &set)) cpus[n++] = c;
    int bound = 0;
    for (int i = 0; i < tp->n_started; i++) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[i + 1], &one);
        bound += pthread_setaffinity_np(tp->threads[i], sizeof one, &one) == 0;
    }
    return bound;
}

void st_threadpool_free(st_threadpool *tp) {
    if (!tp) return;
    st_threadpool_wait(tp); /* a posted job's chunks finish first */
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, 1);
    pthread_cond_broadcast(&tp->cv_work);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 0; i < tp->n_started; i++) pthread_join(tp->threads[i], NULL);
    pthread_cond_destroy(&tp->cv_work);
    pthread_cond_destroy(&tp->cv_done);
    pthread_mutex_destroy(&tp->mu);
    free(tp->threads);
    free(tp->args);
    free(tp);
}

int st_threadpool_n_threads(const st_threadpool *tp) { return tp ? tp->n_threads : 1; }

int64_t st_threadpool_chunk(const st_threadpool *tp, int64_t n_items, int per_thread, int64_t min) {
    int64_t parts = (int64_t)st_threadpool_n_threads(tp) * (per_thread > 0 ? per_thread : 1);
    int64_t c = (n_items + parts - 1) / parts;
    if (c < min) c = min;
    return c < 1 ? 1 : c;
}

/* ---------------------------------------------------------------------------------------------
 * Dispatch
 * ------------------------------------------------------------------------------------------- */

/* Publishes a job (the previous one complete) and wakes the workers; returns its generation. */
static uint32_t st_publish(st_threadpool *tp, int64_t n_items, int64_t chunk, st_task_fn fn, void *ctx) {
    /* close the previous job's claim word first, so a worker still looking at it cannot claim
     * against the values written next */
    const uint32_t g = (uint32_t)atomic_load_explicit(&tp->gen, memory_order_relaxed) + 1;
    atomic_store(&tp->claim, ((uint_fast64_t)(g - 1) << 32) | ST_CLAIM_CLOSED);
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store(&tp->n_items, n_items);
    atomic_store(&tp->chunk, chunk);
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    atomic_store(&tp->claim, (uint_fast64_t)g << 32);
    pthread_mutex_lock(&tp->mu);
    atomic_store_explicit(&tp->gen, g, memory_order_release);
    pthread_cond_broadcast(&tp->cv_work);
    pthread_mutex_unlock(&tp->mu);
    return g;
}

/* Joins job g's remaining chunks, then waits until all n_items are done. */
static void st_join(st_threadpool *tp, uint32_t g, int64_t n_items) {
    st_do_chunks(tp, g, 0);
    /* spin briefly, then yield (a worker preempted inside its chunk may be waiting for this very
     * core when the machine is oversubscribed), then sleep */
    for (int i = 0; i < ST_SPIN_ITERS; i++) {
        if (atomic_load_explicit(&tp->done, memory_order_acquire) == n_items) return;
        if (i >= ST_SPIN_ITERS / 4 && i % 64 == 0) sched_yield();
        else ST_PAUSE();
    }
    pthread_mutex_lock(&tp->mu);
    while (atomic_load_explicit(&tp->done, memory_order_acquire) != n_items)
        pthread_cond_wait(&tp->cv_done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}

void st_threadpool_run(st_threadpool *tp, int64_t n_items, int64_t chunk, st_task_fn fn, void *ctx) {
    if (n_items <= 0) return;
    if (chunk < 1) chunk = 1;
    st_threadpool_wait(tp);
    if (!tp || tp->n_threads == 1 || n_items <= chunk || n_items >= ((int64_t)1 << 31)) {
        for (int64_t b = 0; b < n_items; b += chunk) fn(ctx, b, b + chunk < n_items ? b + chunk : n_items, 0);
        return;
    }
    st_join(tp, st_publish(tp, n_items, chunk, fn, ctx), n_items);
}

void st_threadpool_post(st_threadpool *tp, int64_t n_items, int64_t chunk, st_task_fn fn, void *ctx) {
    st_threadpool_wait(tp);
    if (!tp || tp->n_threads == 1 || n_items <= 0 || n_items >= ((int64_t)1 << 31)) return;
    st_publish(tp, n_items, chunk < 1 ? 1 : chunk, fn, ctx);
    tp->posted = 1;
}

void st_threadpool_wait(st_threadpool *tp) {
    if (!tp || !tp->posted) return;
    tp->posted = 0;
    st_join(tp, (uint32_t)atomic_load_explicit(&tp->gen, memory_order_relaxed),
            atomic_load_explicit(&tp->n_items, memory_order_relaxed));
}

void st_threadpool_cancel(st_threadpool *tp) {
    if (!tp || !tp->posted) return;
    const uint32_t g = (uint32_t)atomic_load_explicit(&tp->gen, memory_order_relaxed);
    const int64_t n = atomic_load_explicit(&tp->n_items, memory_order_relaxed);
    /* move the claim word to the end: the items from its old position on are never taken, so
     * they count as done (st_join would claim them one by one: 21-31 us for a warm's ~1,300
     * pieces on 2 threads, and likely the ~0.5 ms a layer --cpu-warm lost on 16) */
    const uint_fast64_t end = ((uint_fast64_t)g << 32) | (uint64_t)n;
    uint_fast64_t c = atomic_load(&tp->claim);
    while ((int64_t)(c & 0xffffffffu) < n && !atomic_compare_exchange_weak(&tp->claim, &c, end))
        ;
    const int64_t b = (int64_t)(c & 0xffffffffu);
    if (b < n) atomic_fetch_add_explicit(&tp->done, n - b, memory_order_acq_rel);
    st_threadpool_wait(tp);
}

void st_threadpool_hold(st_threadpool *tp, int on) {
    if (tp) atomic_store_explicit(&tp->hold, on != 0, memory_order_relaxed);
}
