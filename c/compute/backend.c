/* backend.c - strata_backend_query: which compute backends this build has and whether each can run
 * on this machine. Both answers are worked out once per process (pthread_once) and copied out. Also
 * the CUDA devices a layer split may name (strata_cuda_device_count, strata_cuda_device_memory). */
#include "common.h"

#ifdef STRATA_HAVE_CUDA
#include "cuda_backend.h"
#endif

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

static pthread_once_t st_backend_once = PTHREAD_ONCE_INIT;
static strata_backend_info st_backend_infos[STRATA_BACKEND_COUNT];

/* ---- CPU ------------------------------------------------------------------------------------ */

static void st_backend_fill_cpu(strata_backend_info *info) {
    info->kind = STRATA_BACKEND_CPU;
    info->name = "cpu";
    info->compiled = 1;
    info->available = 1;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int usable = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) usable = CPU_COUNT(&set);
    const char *isa = strata_cpu_isa_name(strata_cpu_isa_supported());
    const char *amx = strata_cpu_amx_supported() ? " + amx" : "";
    if (usable > 0 && usable != online)
        snprintf(info->detail, sizeof info->detail, "%s%s, %ld cores (%d usable by this process)",
                 isa, amx, online, usable);
    else
        snprintf(info->detail, sizeof info->detail, "%s%s, %ld cores", isa, amx, online);
}

/* ---- CUDA ----------------------------------------------------------------------------------- */

static void st_backend_fill_cuda(strata_backend_info *info) {
    info->kind = STRATA_BACKEND_CUDA;
    info->name = "cuda";
#ifdef STRATA_HAVE_CUDA
    info->compiled = 1;
    int available = 0;
    if (st_cuda_probe(&available, info->detail, sizeof info->detail) != STRATA_OK) {
        available = 0;
        snprintf(info->detail, sizeof info->detail, "CUDA probe failed: %s", strata_last_error());
        st_error_clear();
    }
    info->available = available;
#else
    info->compiled = 0;
    info->available = 0;
    snprintf(info->detail, sizeof info->detail,
             "built without CUDA (nvcc not found at build time or CUDA=0)");
#endif
}

static void st_backend_init(void) {
    st_backend_fill_cpu(&st_backend_infos[STRATA_BACKEND_CPU]);
    st_backend_fill_cuda(&st_backend_infos[STRATA_BACKEND_CUDA]);
}

/* ---- public --------------------------------------------------------------------------------- */

strata_status strata_backend_query(strata_backend_kind kind, strata_backend_info *info) {
    if (!info) return st_error(STRATA_ERR_INVALID_ARG, "strata_backend_query: NULL info");
    if ((int)kind < 0 || (int)kind >= STRATA_BACKEND_COUNT)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_backend_query: no backend kind %d "
                        "(valid: 0..%d)", (int)kind, STRATA_BACKEND_COUNT - 1);
    if (pthread_once(&st_backend_once, st_backend_init) != 0)
        return st_error(STRATA_ERR_INTERNAL, "strata_backend_query: pthread_once failed");
    *info = st_backend_infos[kind];
    return STRATA_OK;
}

strata_status strata_backend_copy_rate(strata_backend_kind kind, double *bytes_per_s) {
    if (!bytes_per_s) return st_error(STRATA_ERR_INVALID_ARG, "strata_backend_copy_rate: NULL bytes_per_s");
    *bytes_per_s = 0.0;
    if (kind == STRATA_BACKEND_CUDA) {
#ifdef STRATA_HAVE_CUDA
        return st_cuda_copy_rate(bytes_per_s);
#else
        return st_error(STRATA_ERR_UNSUPPORTED, "strata_backend_copy_rate: built without CUDA");
#endif
    }
    if (kind == STRATA_BACKEND_CPU)
        return st_error(STRATA_ERR_UNSUPPORTED, "strata_backend_copy_rate: not measured for the CPU backend "
                        "(bench/micro/bench_dot gives its rates)");
    return st_error(STRATA_ERR_INVALID_ARG, "strata_backend_copy_rate: no backend kind %d", (int)kind);
}

strata_status strata_cuda_device_count(int32_t *count) {
    if (!count) return st_error(STRATA_ERR_INVALID_ARG, "strata_cuda_device_count: NULL count");
    *count = 0;
#ifdef STRATA_HAVE_CUDA
    int n = 0;
    if (st_cuda_device_count(&n) != STRATA_OK) { /* a driver error: none usable */
        st_error_clear();
        n = 0;
    }
    *count = n;
#endif
    return STRATA_OK;
}

strata_status strata_cuda_device_memory(int32_t device, int64_t *free_bytes, int64_t *total_bytes) {
    if (!free_bytes || !total_bytes)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_cuda_device_memory: NULL argument");
    *free_bytes = *total_bytes = 0;
#ifdef STRATA_HAVE_CUDA
    size_t f = 0, t = 0;
    strata_status st = st_cuda_device_mem_info((int)device, &f, &t);
    if (st != STRATA_OK) return st;
    *free_bytes = (int64_t)f;
    *total_bytes = (int64_t)t;
    return STRATA_OK;
#else
    (void)device;
    return st_error(STRATA_ERR_UNSUPPORTED, "strata_cuda_device_memory: built without CUDA");
#endif
}
