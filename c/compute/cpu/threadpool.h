/* threadpool.h - a persistent pool of CPU worker threads and its parallel-for.
 *
 * A pool of n threads counts the caller as thread 0: n - 1 workers are started once and reused
 * for every job. st_threadpool_run splits [0, n_items) into chunks of `chunk` items that the
 * threads take in turn; fn sees each chunk exactly once, and the call returns when every chunk is
 * done (a barrier). Workers spin briefly between jobs, then sleep on a condition variable, so
 * dispatching many small jobs (one per matmul) stays cheap.
 *
 * Results are deterministic when each output element is computed inside exactly one chunk from
 * inputs that no other chunk writes: which thread runs a chunk then does not matter. fn may use
 * per-thread scratch indexed by its thread id (0 .. n_threads-1). */
#ifndef STRATA_THREADPOOL_H
#define STRATA_THREADPOOL_H

#include "common.h"

/* One pause in a spin-wait loop (x86: the PAUSE hint; elsewhere nothing), for the pool's own
 * waits and for its users' (the expert step's readiness flags, the doorbell pool). */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ST_PAUSE() _mm_pause()
#else
#define ST_PAUSE() ((void)0)
#endif

typedef struct st_threadpool st_threadpool;

/* fn(ctx, begin, end, thread_id): process items [begin, end). */
typedef void (*st_task_fn)(void *ctx, int64_t begin, int64_t end, int thread_id);

/* n_threads >= 1 (1: no workers, every job runs on the caller). */
strata_status st_threadpool_create(int n_threads, st_threadpool **out);
void st_threadpool_free(st_threadpool *tp);
int st_threadpool_n_threads(const st_threadpool *tp);

/* Explicit placement: worker i (1 .. n_threads-1) is bound to the i-th CPU of the calling
 * thread's affinity set (CPU numbers in ascending order), the caller's CPU 0 of it left to the
 * caller (which this function does not bind: it is the application's thread). Returns the number
 * of workers bound (0 when the set has fewer CPUs than threads or the system refuses; nothing is
 * changed then). */
int st_threadpool_pin(st_threadpool *tp);

/* Runs fn over [0, n_items) in chunks of chunk (>= 1) items on all threads; returns when done.
 * tp may be NULL (runs on the caller). Not reentrant: one job at a time per pool. */
void st_threadpool_run(st_threadpool *tp, int64_t n_items, int64_t chunk, st_task_fn fn, void *ctx);

/* A background job: fn over [0, n_items) in chunks, run by the workers only (the caller returns at
 * once and goes on with other work, e.g. a GPU session's launches while its CPU expert pool's
 * threads warm the next layer's predicted experts into the caches). st_threadpool_wait joins
 * the caller to what is left and returns when every chunk is done; st_threadpool_run waits for a
 * posted job before it starts. fn should check a flag of its own to finish early when the
 * result is no longer wanted. With no workers (n_threads 1, tp NULL) nothing runs: the job is
 * dropped, so work that must be done is posted only to a pool with workers (st_moe_ffn_begin
 * runs it otherwise). Not reentrant, as st_threadpool_run. */
void st_threadpool_post(st_threadpool *tp, int64_t n_items, int64_t chunk, st_task_fn fn, void *ctx);
void st_threadpool_wait(st_threadpool *tp);
/* Ends a posted job early: its chunks not yet taken are dropped (one exchange on the claim word,
 * however many are left), then as st_threadpool_wait for the chunks under way. Which items ran
 * is then up to timing: for work whose result is no longer wanted (a warm of caches). A no-op
 * without a posted job. */
void st_threadpool_cancel(st_threadpool *tp);

/* on = 1: workers keep spinning between jobs (yielding now and then) instead of sleeping after
 * tens of microseconds; 0 (the default): they sleep again. For a caller that runs jobs with gaps
 * longer than the spin, e.g. a GPU session whose CPU layers' expert steps wait for the GPU's part
 * of each layer: a sleeping worker takes a futex wake-up (tens of microseconds) to join a job.
 * Thread-safe; results do not depend on it. */
void st_threadpool_hold(st_threadpool *tp, int on);

/* A chunk size that gives each thread about `per_thread` chunks of [0, n_items), at least min. */
int64_t st_threadpool_chunk(const st_threadpool *tp, int64_t n_items, int per_thread, int64_t min);

#endif /* STRATA_THREADPOOL_H */
