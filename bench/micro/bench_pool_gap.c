/* bench_pool_gap.c - what a gap between thread-pool jobs costs the next job: the caller
 * busy-waits GAP microseconds (a GPU session's GPU part of a layer), then runs one job that
 * streams BYTES of memory (a CPU layer's expert step), R times, with the workers allowed to sleep
 * between jobs (the default) and held spinning (st_threadpool_hold). Prints the median and mean
 * job time of each.
 *   build/bench_pool_gap [threads] [gap_us] [bytes] [reps]   (defaults: all CPUs, 80, 4 MiB, 2000) */
#include "bench_util.h"
#include "threadpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


typedef struct {
    const uint64_t *src;
    uint64_t sums[256];
} job;

static void stream(void *ctx, int64_t b, int64_t e, int id) {
    job *j = ctx;
    uint64_t s = 0;
    for (int64_t i = b * 512; i < e * 512; i++) s += j->src[i]; /* items of 4 KiB */
    j->sums[id & 255] += s;
}


int main(int argc, char **argv) {
    const int nt = argc > 1 ? atoi(argv[1]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    const double gap = (argc > 2 ? atof(argv[2]) : 80.0) * 1e-6;
    const int64_t bytes = argc > 3 ? atoll(argv[3]) : (int64_t)4 << 20;
    const int reps = argc > 4 ? atoi(argv[4]) : 2000;
    const int64_t region = (int64_t)256 << 20, items = bytes / 4096;
    uint64_t *buf = malloc((size_t)region);
    st_threadpool *tp = NULL;
    if (!buf || items < 1 || nt < 1 || reps < 1 || st_threadpool_create(nt, &tp) != STRATA_OK) {
        fprintf(stderr, "bench_pool_gap: bad arguments or out of memory\n");
        return 1;
    }
    memset(buf, 1, (size_t)region);
    double *t = malloc(sizeof(double) * (size_t)reps);
    job j;
    memset(&j, 0, sizeof j);
    printf("threads %d, gap %.0f us, %lld KiB per job, %d jobs\n", nt, gap * 1e6, (long long)(bytes >> 10), reps);
    for (int hold = 0; hold <= 1; hold++) {
        st_threadpool_hold(tp, hold);
        int64_t off = 0;
        double sum = 0;
        for (int r = 0; r < reps; r++) {
            const double g0 = now_s();
            while (now_s() - g0 < gap) { /* the GPU's part */ }
            if (off + bytes > region) off = 0;
            j.src = buf + off / 8;
            off += bytes;
            const double t0 = now_s();
            st_threadpool_run(tp, items, st_threadpool_chunk(tp, items, 4, 1), stream, &j);
            t[r] = now_s() - t0;
            sum += t[r];
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_d);
        printf("  %-28s median %7.1f us, mean %7.1f us (%.1f GB/s at the median)\n",
               hold ? "held (st_threadpool_hold 1)" : "sleeping between jobs", t[reps / 2] * 1e6,
               sum / reps * 1e6, (double)bytes / t[reps / 2] * 1e-9);
    }
    st_threadpool_hold(tp, 0);
    st_threadpool_free(tp);
    free(t);
    free(buf);
    return (int)(j.sums[0] & 0); /* keep the sums */
}
