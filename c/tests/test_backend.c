/* test_backend.c - strata_backend_query: the CPU backend is always there, the CUDA flags match
 * the build, an unusable CUDA says why, bad arguments fail, and answers agree across threads. */
#include "strata.h"
#include "test.h"

#ifdef STRATA_HAVE_CUDA
#include "cuda_backend.h"
#endif

#include <pthread.h>
#include <string.h>
#include <unistd.h>

/* ---- CPU ------------------------------------------------------------------------------------ */

static void test_cpu(void) {
    strata_backend_info info;
    memset(&info, 0x5a, sizeof info);
    strata_status st = strata_backend_query(STRATA_BACKEND_CPU, &info);
    CHECK(st == STRATA_OK, "cpu query: %s (%s)", strata_status_name(st), strata_last_error());
    CHECK(info.kind == STRATA_BACKEND_CPU, "kind %d", (int)info.kind);
    CHECK(info.name && strcmp(info.name, "cpu") == 0, "name '%s'", info.name ? info.name : "(null)");
    CHECK(info.compiled == 1 && info.available == 1, "compiled %d available %d", info.compiled,
          info.available);
    CHECK(memchr(info.detail, '\0', sizeof info.detail) != NULL, "detail not NUL-terminated");
    /* The detail names the ISA level the dot kernels report, and the core count. */
    const char *isa = strata_cpu_isa_name(strata_cpu_isa_supported());
    CHECK(strncmp(info.detail, isa, strlen(isa)) == 0, "detail '%s' does not start with '%s'",
          info.detail, isa);
    char cores[64];
    snprintf(cores, sizeof cores, "%ld cores", sysconf(_SC_NPROCESSORS_ONLN));
    CHECK(strstr(info.detail, cores) != NULL, "detail '%s' lacks '%s'", info.detail, cores);
    printf("cpu:  %s\n", info.detail);
}

/* ---- CUDA ----------------------------------------------------------------------------------- */

static void test_cuda(void) {
    strata_backend_info info;
    memset(&info, 0x5a, sizeof info);
    strata_status st = strata_backend_query(STRATA_BACKEND_CUDA, &info);
    CHECK(st == STRATA_OK, "cuda query: %s (%s)", strata_status_name(st), strata_last_error());
    CHECK(info.kind == STRATA_BACKEND_CUDA, "kind %d", (int)info.kind);
    CHECK(info.name && strcmp(info.name, "cuda") == 0, "name '%s'", info.name ? info.name : "(null)");
    CHECK(memchr(info.detail, '\0', sizeof info.detail) != NULL, "detail not NUL-terminated");
    CHECK(info.detail[0] != '\0', "empty detail (available %d)", info.available);
    printf("cuda: compiled %d, available %d: %s\n", info.compiled, info.available, info.detail);
#ifdef STRATA_HAVE_CUDA
    CHECK(info.compiled == 1, "STRATA_HAVE_CUDA build reports compiled %d", info.compiled);
    /* The backend answer is the probe's. */
    int avail = -1;
    char detail[256];
    st = st_cuda_probe(&avail, detail, sizeof detail);
    CHECK(st == STRATA_OK, "st_cuda_probe: %s", strata_last_error());
    CHECK(avail == info.available, "probe %d vs query %d", avail, info.available);
    CHECK(strcmp(detail, info.detail) == 0, "probe '%s' vs query '%s'", detail, info.detail);
    CHECK(st_cuda_probe(NULL, detail, sizeof detail) == STRATA_ERR_INVALID_ARG, "NULL available");
    if (info.available) {
        /* Available: detail names device 0 and its compute capability. */
        st_cuda_device_info dev;
        st = st_cuda_device_info_get(&dev);
        CHECK(st == STRATA_OK, "device info: %s", strata_last_error());
        CHECK(strncmp(info.detail, dev.name, strlen(dev.name)) == 0, "detail '%s' vs name '%s'",
              info.detail, dev.name);
        char cc[32];
        snprintf(cc, sizeof cc, "compute %d.%d", dev.cc_major, dev.cc_minor);
        CHECK(strstr(info.detail, cc) != NULL, "detail '%s' lacks '%s'", info.detail, cc);
        CHECK(dev.total_mem > 0 && dev.sm_count > 0, "mem %zu sms %d", dev.total_mem, dev.sm_count);
        char name[256];
        CHECK(st_cuda_device_name(name, sizeof name) == STRATA_OK && strcmp(name, dev.name) == 0,
              "device name '%s'", name);
        /* the copy rate: any GPU this runs on copies at more than 50 GB/s (the H200: ~4,100) */
        double rate = 0.0;
        st = strata_backend_copy_rate(STRATA_BACKEND_CUDA, &rate);
        printf("cuda copy rate: %.0f GB/s\n", rate / 1e9);
        CHECK(st == STRATA_OK && rate > 50e9 && rate < 1e14, "copy rate %g: %s", rate, strata_last_error());
    } else {
        /* Compiled but unusable: the reason is given, and device queries fail with it. */
        CHECK(info.available == 0, "available %d", info.available);
        st_cuda_device_info dev;
        st = st_cuda_device_info_get(&dev);
        CHECK(st == STRATA_ERR_UNSUPPORTED, "device info without a device: %s",
              strata_status_name(st));
        CHECK(strstr(strata_last_error(), info.detail) != NULL, "error '%s' lacks reason '%s'",
              strata_last_error(), info.detail);
        void *p = (void *)1;
        st = st_cuda_malloc(&p, 16);
        CHECK(st == STRATA_ERR_UNSUPPORTED && p == NULL, "malloc without a device: %s",
              strata_status_name(st));
        double rate = 1.0;
        st = strata_backend_copy_rate(STRATA_BACKEND_CUDA, &rate);
        CHECK(st == STRATA_ERR_UNSUPPORTED && rate == 0.0, "copy rate without a device: %s",
              strata_status_name(st));
    }
#else
    CHECK(info.compiled == 0 && info.available == 0, "CPU-only build reports compiled %d "
          "available %d", info.compiled, info.available);
    CHECK(strstr(info.detail, "built without CUDA") != NULL, "detail '%s'", info.detail);
    double rate = 1.0;
    st = strata_backend_copy_rate(STRATA_BACKEND_CUDA, &rate);
    CHECK(st == STRATA_ERR_UNSUPPORTED && rate == 0.0, "copy rate without CUDA: %s", strata_status_name(st));
#endif
    /* the CPU backend's copy rate is not this call's (bench/micro/bench_dot); bad arguments are refused */
    double r = 1.0;
    CHECK(strata_backend_copy_rate(STRATA_BACKEND_CPU, &r) == STRATA_ERR_UNSUPPORTED && r == 0.0,
          "cpu copy rate: %s", strata_last_error());
    CHECK(strata_backend_copy_rate(STRATA_BACKEND_COUNT, &r) == STRATA_ERR_INVALID_ARG, "bad kind");
    CHECK(strata_backend_copy_rate(STRATA_BACKEND_CUDA, NULL) == STRATA_ERR_INVALID_ARG, "NULL rate");
}

/* ---- arguments and threads ------------------------------------------------------------------ */

static void test_invalid(void) {
    strata_backend_info info;
    strata_status st = strata_backend_query(STRATA_BACKEND_COUNT, &info);
    CHECK(st == STRATA_ERR_INVALID_ARG, "kind COUNT: %s", strata_status_name(st));
    CHECK(strstr(strata_last_error(), "kind") != NULL, "message '%s'", strata_last_error());
    st = strata_backend_query((strata_backend_kind)-1, &info);
    CHECK(st == STRATA_ERR_INVALID_ARG, "kind -1: %s", strata_status_name(st));
    st = strata_backend_query((strata_backend_kind)1000, &info);
    CHECK(st == STRATA_ERR_INVALID_ARG, "kind 1000: %s", strata_status_name(st));
    st = strata_backend_query(STRATA_BACKEND_CPU, NULL);
    CHECK(st == STRATA_ERR_INVALID_ARG, "NULL info: %s", strata_status_name(st));
}

#define N_THREADS 8
static strata_backend_info thread_infos[N_THREADS][STRATA_BACKEND_COUNT];
static strata_status thread_status[N_THREADS];

static void *query_thread(void *arg) {
    int t = (int)(size_t)arg;
    thread_status[t] = STRATA_OK;
    for (int k = 0; k < STRATA_BACKEND_COUNT; k++) {
        strata_status st = strata_backend_query((strata_backend_kind)k, &thread_infos[t][k]);
        if (st != STRATA_OK) thread_status[t] = st;
    }
    return NULL;
}

/* main runs this first, so the threads race on the one-time probe; all must see one answer. */
static void test_threads(void) {
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++)
        CHECK(pthread_create(&th[t], NULL, query_thread, (void *)(size_t)t) == 0, "thread %d", t);
    for (int t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < N_THREADS; t++) {
        CHECK(thread_status[t] == STRATA_OK, "thread %d: %s", t, strata_status_name(thread_status[t]));
        for (int k = 0; k < STRATA_BACKEND_COUNT; k++) {
            const strata_backend_info *a = &thread_infos[0][k], *b = &thread_infos[t][k];
            CHECK(a->available == b->available && a->compiled == b->compiled &&
                  strcmp(a->detail, b->detail) == 0, "thread %d kind %d disagrees: '%s' vs '%s'",
                  t, k, a->detail, b->detail);
        }
    }
}

int main(void) {
    test_threads(); /* first, so the one-time probe races here */
    test_cpu();
    test_cuda();
    test_invalid();
    return test_report();
}
