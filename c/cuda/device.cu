/* device.cu - the CUDA probe (is a driver and a usable device here?), device 0's properties, and
 * the synchronous device-memory helpers of cuda_backend.h.
 *
 * The runtime (cudart) is linked statically, so the library loads on machines without a driver;
 * the probe then finds out why CUDA cannot run and says so instead of failing. */
#include "common.cuh"

#include <dlfcn.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- probe ---------------------------------------------------------------------------------- */

/* variadic: with several architectures __CUDA_ARCH_LIST__ is a comma-separated list */
#define ST_XSTR2(...) #__VA_ARGS__
#define ST_XSTR(...) ST_XSTR2(__VA_ARGS__)
#ifdef __CUDA_ARCH_LIST__
#define ST_BUILT_ARCHS ST_XSTR(__CUDA_ARCH_LIST__)
#else
#define ST_BUILT_ARCHS "unknown"
#endif

static pthread_once_t st_probe_once = PTHREAD_ONCE_INIT;
static int st_probe_available;
static char st_probe_detail[256];
static st_cuda_device_info st_probe_info;

/* Programmatic dependent launch (common.cuh): the device supports it (set by the probe) and this
 * thread has not turned it off (st_cuda_set_pdl). */
static int st_pdl_device;
static thread_local int st_pdl_thread = 1;

int st_cuda_pdl_active(void) { return st_pdl_device && st_pdl_thread; }
extern "C" void st_cuda_set_pdl(int on) { st_pdl_thread = on != 0; }

/* A kernel that exists only so the probe can ask whether this build has an image for the device. */
static __global__ void st_probe_kernel(int *p) {
    if (p) *p = 1;
}

/* Writes the probe's one-line answer (truncated to fit, as any detail may be). */
static void st_probe_say(const char *fmt, ...) ST_PRINTF(1, 2);
static void st_probe_say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st_probe_detail, sizeof st_probe_detail, fmt, ap);
    va_end(ap);
}

static void st_probe_run(void) {
    st_probe_available = 0;

    /* cudart would report a missing driver as "insufficient driver"; look for it ourselves so
     * the reason is plain. The handle stays open: cudart opens the same library next. */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv) drv = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    if (!drv) {
        st_probe_say("no CUDA driver (libcuda.so not found)");
        return;
    }

    int runtime = 0, driver = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaDriverGetVersion(&driver);

    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
        (void)cudaGetLastError();
        st_probe_say("no CUDA device");
        return;
    }
    if (e == cudaErrorInsufficientDriver) {
        (void)cudaGetLastError();
        st_probe_say("CUDA driver %d.%d is older than this build's runtime %d.%d (%s)",
                 driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10,
                 cudaGetErrorString(e));
        return;
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        st_probe_say("CUDA unavailable: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return;
    }

    cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        st_probe_say("CUDA device 0 unreadable: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        return;
    }
    st_cuda_device_info *info = &st_probe_info;
    static_assert(sizeof prop.name >= sizeof info->name, "device name buffer");
    memcpy(info->name, prop.name, sizeof info->name - 1);
    info->name[sizeof info->name - 1] = '\0';
    info->cc_major = prop.major;
    info->cc_minor = prop.minor;
    info->sm_count = prop.multiProcessorCount;
    info->total_mem = prop.totalGlobalMem;
    info->runtime_version = runtime;
    info->driver_version = driver;
    info->smem_optin = prop.sharedMemPerBlockOptin;

    /* Creates the context and checks that one of the built architectures runs on this device. */
    cudaFuncAttributes fa;
    e = cudaFuncGetAttributes(&fa, st_probe_kernel);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction)
            st_probe_say("%s (compute %d.%d) has no kernel image in this build (built for "
                     "%s; rebuild with CUDA_ARCH=%d%d)", prop.name, prop.major, prop.minor,
                     ST_BUILT_ARCHS, prop.major, prop.minor);
        else
            st_probe_say("%s unusable: %s (%s)", prop.name, cudaGetErrorString(e),
                     cudaGetErrorName(e));
        return;
    }

    st_probe_say("%s, compute %d.%d, %.1f GiB, %d SMs, CUDA runtime %d.%d / driver %d.%d",
             prop.name, prop.major, prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024),
             prop.multiProcessorCount, runtime / 1000, runtime % 1000 / 10, driver / 1000,
             driver % 1000 / 10);
    st_pdl_device = prop.major >= 9;
    st_probe_available = 1;
}

extern "C" strata_status st_cuda_probe(int *available, char *detail, size_t cap) {
    if (!available || (!detail && cap))
        return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_probe: NULL argument");
    if (pthread_once(&st_probe_once, st_probe_run) != 0)
        return st_error(STRATA_ERR_INTERNAL, "st_cuda_probe: pthread_once failed");
    *available = st_probe_available;
    if (cap) snprintf(detail, cap, "%s", st_probe_detail);
    return STRATA_OK;
}

/* Declared in common.cuh. */
strata_status st_cuda_require(const char *what) {
    int ok = 0;
    ST_TRY(st_cuda_probe(&ok, NULL, 0));
    if (!ok) return st_error(STRATA_ERR_UNSUPPORTED, "%s: CUDA unavailable: %s", what, st_probe_detail);
    return STRATA_OK;
}

extern "C" strata_status st_cuda_device_info_get(st_cuda_device_info *info) {
    if (!info) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_device_info_get: NULL info");
    ST_TRY(st_cuda_require("st_cuda_device_info_get"));
    *info = st_probe_info;
    return STRATA_OK;
}

extern "C" size_t st_cuda_smem_limit(void) {
    int ok = 0;
    if (st_cuda_probe(&ok, NULL, 0) != STRATA_OK || !ok || st_probe_info.smem_optin == 0) return 227 * 1024;
    return st_probe_info.smem_optin;
}

extern "C" strata_status st_cuda_device_name(char *name, size_t cap) {
    if (!name || cap == 0) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_device_name: no buffer");
    ST_TRY(st_cuda_require("st_cuda_device_name"));
    snprintf(name, cap, "%s", st_probe_info.name);
    return STRATA_OK;
}

/* ---- device memory -------------------------------------------------------------------------- */

extern "C" strata_status st_cuda_malloc(void **dptr, size_t bytes) {
    if (!dptr) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_malloc: NULL dptr");
    *dptr = NULL;
    ST_TRY(st_cuda_require("st_cuda_malloc"));
    cudaError_t e = cudaMalloc(dptr, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        *dptr = NULL;
        return st_error(STRATA_ERR_NOMEM, "st_cuda_malloc: %zu bytes of device memory: %s", bytes,
                        cudaGetErrorString(e));
    }
    ST_CUDA_CHECK(e);
    return STRATA_OK;
}

/* cudaHostAlloc with flags; NOMEM (naming fn) when the system refuses. */
static strata_status st_host_alloc_flags(const char *fn, void **hptr, size_t bytes, unsigned flags) {
    *hptr = NULL;
    ST_TRY(st_cuda_require(fn));
    cudaError_t e = cudaHostAlloc(hptr, bytes ? bytes : 1, flags);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *hptr = NULL;
        return st_error(STRATA_ERR_NOMEM, "%s: %zu bytes of %s host memory: %s", fn, bytes,
                        flags & cudaHostAllocMapped ? "mapped" : "pinned", cudaGetErrorString(e));
    }
    return STRATA_OK;
}

extern "C" strata_status st_cuda_host_alloc(void **hptr, size_t bytes) {
    if (!hptr) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_host_alloc: NULL hptr");
    return st_host_alloc_flags("st_cuda_host_alloc", hptr, bytes, cudaHostAllocDefault);
}

extern "C" strata_status st_cuda_host_alloc_mapped(void **hptr, void **dptr, size_t bytes) {
    if (!hptr || !dptr) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_host_alloc_mapped: NULL pointer");
    *dptr = NULL;
    ST_TRY(st_host_alloc_flags("st_cuda_host_alloc_mapped", hptr, bytes, cudaHostAllocMapped));
    memset(*hptr, 0, bytes ? bytes : 1);
    const cudaError_t e = cudaHostGetDevicePointer(dptr, *hptr, 0);
    if (e != cudaSuccess) {
        (void)cudaFreeHost(*hptr);
        *hptr = *dptr = NULL;
        ST_CUDA_CHECK(e);
    }
    return STRATA_OK;
}

extern "C" strata_status st_cuda_copy_rate(double *bytes_per_s) {
    static const char *fn = "st_cuda_copy_rate";
    if (!bytes_per_s) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL bytes_per_s", fn);
    *bytes_per_s = 0.0;
    ST_TRY(st_cuda_require(fn));
    const size_t n = (size_t)256 << 20;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms[7];
    cudaError_t e = cudaMalloc(&a, n);
    if (e == cudaSuccess) e = cudaMalloc(&b, n);
    if (e == cudaSuccess) e = cudaMemset(a, 1, n);
    if (e == cudaSuccess) e = cudaEventCreate(&e0);
    if (e == cudaSuccess) e = cudaEventCreate(&e1);
    for (int i = 0; i < 7 && e == cudaSuccess; i++) {
        e = cudaEventRecord(e0, 0);
        if (e == cudaSuccess) e = cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0);
        if (e == cudaSuccess) e = cudaEventRecord(e1, 0);
        if (e == cudaSuccess) e = cudaEventSynchronize(e1);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms[i], e0, e1);
    }
    if (e1) (void)cudaEventDestroy(e1);
    if (e0) (void)cudaEventDestroy(e0);
    (void)cudaFree(b);
    (void)cudaFree(a);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return st_error(STRATA_ERR_BACKEND, "%s: %s", fn, cudaGetErrorString(e));
    }
    /* the median of the six timed copies (the first warms up) */
    float t[6];
    for (int i = 0; i < 6; i++) t[i] = ms[i + 1];
    for (int i = 1; i < 6; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            const float x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    const double med_s = 0.5 * ((double)t[2] + (double)t[3]) * 1e-3;
    if (!(med_s > 0.0)) return st_error(STRATA_ERR_BACKEND, "%s: a copy took no measurable time", fn);
    *bytes_per_s = 2.0 * (double)n / med_s;
    return STRATA_OK;
}

extern "C" strata_status st_cuda_host_free(void *hptr) {
    if (!hptr) return STRATA_OK;
    ST_CUDA_CHECK(cudaFreeHost(hptr));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_free(void *dptr) {
    if (!dptr) return STRATA_OK;
    ST_CUDA_CHECK(cudaFree(dptr));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes) {
    if (!bytes) return STRATA_OK;
    if (!dst || !src) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_memcpy_h2d: NULL pointer");
    ST_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes) {
    if (!bytes) return STRATA_OK;
    if (!dst || !src) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_memcpy_d2h: NULL pointer");
    ST_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_memcpy_async(void *dst, const void *src, size_t bytes, int to_device,
                                              void *stream) {
    if (!bytes) return STRATA_OK;
    if (!dst || !src) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_memcpy_async: NULL pointer");
    ST_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                  (cudaStream_t)stream));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_stream_synchronize(void *stream) {
    ST_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_stream_create_nonblocking(void **stream) {
    if (!stream) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_stream_create_nonblocking: NULL");
    *stream = NULL;
    ST_TRY(st_cuda_require("st_cuda_stream_create_nonblocking"));
    cudaStream_t s = NULL;
    ST_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = s;
    return STRATA_OK;
}

extern "C" strata_status st_cuda_event_create(void **ev) {
    if (!ev) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_event_create: NULL");
    *ev = NULL;
    ST_TRY(st_cuda_require("st_cuda_event_create"));
    cudaEvent_t e = NULL;
    ST_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *ev = e;
    return STRATA_OK;
}

extern "C" void st_cuda_event_destroy(void *ev) {
    if (ev) (void)cudaEventDestroy((cudaEvent_t)ev);
}

extern "C" strata_status st_cuda_event_record(void *ev, void *stream) {
    ST_CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_stream_wait_event(void *stream, void *ev) {
    ST_CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)ev, 0));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_event_synchronize(void *ev) {
    ST_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)ev));
    return STRATA_OK;
}

extern "C" int st_cuda_event_done(void *ev) {
    const cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaSuccess) return 1;
    (void)cudaGetLastError(); /* cudaErrorNotReady is not an error to keep */
    return 0;
}

extern "C" strata_status st_cuda_memset(void *dptr, int byte, size_t bytes) {
    if (!bytes) return STRATA_OK;
    if (!dptr) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_memset: NULL pointer");
    ST_CUDA_CHECK(cudaMemset(dptr, byte, bytes));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_memset_async(void *dptr, int byte, size_t bytes, void *stream) {
    if (!bytes) return STRATA_OK;
    if (!dptr) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_memset_async: NULL pointer");
    ST_CUDA_CHECK(cudaMemsetAsync(dptr, byte, bytes, (cudaStream_t)stream));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_synchronize(void) {
    ST_TRY(st_cuda_require("st_cuda_synchronize"));
    ST_CUDA_CHECK(cudaDeviceSynchronize());
    return STRATA_OK;
}

/* ---- streams and graphs (cuda_backend.h) ------------------------------------------------------ */

extern "C" strata_status st_cuda_stream_create(void **stream) {
    if (!stream) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_stream_create: NULL stream");
    *stream = NULL;
    ST_TRY(st_cuda_require("st_cuda_stream_create"));
    cudaStream_t s;
    ST_CUDA_CHECK(cudaStreamCreate(&s)); /* blocking: ordered with the legacy default stream */
    *stream = s;
    return STRATA_OK;
}

extern "C" strata_status st_cuda_stream_destroy(void *stream) {
    if (!stream) return STRATA_OK;
    ST_CUDA_CHECK(cudaStreamDestroy((cudaStream_t)stream));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_capture_begin(void *stream) {
    ST_CUDA_CHECK(cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeRelaxed));
    return STRATA_OK;
}

extern "C" void st_cuda_capture_abort(void *stream) {
    cudaGraph_t g = NULL;
    if (cudaStreamEndCapture((cudaStream_t)stream, &g) == cudaSuccess && g) cudaGraphDestroy(g);
    (void)cudaGetLastError();
}

extern "C" strata_status st_cuda_capture_end_launch(void *stream, void **exec, int *reused) {
    cudaStream_t s = (cudaStream_t)stream;
    cudaGraph_t g = NULL;
    ST_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ex = (cudaGraphExec_t)*exec;
    int ok = 0;
    if (ex) { /* same kernels in the same order: update the parameters in place */
        cudaGraphExecUpdateResultInfo info;
        ok = cudaGraphExecUpdate(ex, g, &info) == cudaSuccess;
        if (!ok) {
            (void)cudaGetLastError();
            cudaGraphExecDestroy(ex);
            ex = NULL;
        }
    }
    if (!ex) {
        cudaError_t e = cudaGraphInstantiate(&ex, g, 0);
        if (e != cudaSuccess) {
            cudaGraphDestroy(g);
            *exec = NULL;
            ST_CUDA_CHECK(e);
        }
    }
    cudaGraphDestroy(g);
    *exec = ex;
    if (reused) *reused = ok;
    ST_CUDA_CHECK(cudaGraphLaunch(ex, s));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_graph_launch(void *exec, void *stream) {
    if (!exec) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_graph_launch: no graph");
    ST_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)stream));
    return STRATA_OK;
}

extern "C" void st_cuda_graph_exec_destroy(void *exec) {
    if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

extern "C" strata_status st_cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
    ST_TRY(st_cuda_require("st_cuda_mem_info"));
    ST_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
    return STRATA_OK;
}

/* ---- several devices (the layer split's stages, docs/MULTI_GPU.md) --------------------------- */

extern "C" strata_status st_cuda_device_count(int *count) {
    if (!count) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_device_count: NULL count");
    *count = 0;
    int ok = 0;
    ST_TRY(st_cuda_probe(&ok, NULL, 0));
    if (!ok) return STRATA_OK; /* no driver, no device: none, not an error */
    ST_CUDA_CHECK(cudaGetDeviceCount(count));
    return STRATA_OK;
}

/* device in 0 .. count - 1, else INVALID_ARG naming what there is. */
static strata_status st_cuda_device_valid(const char *fn, int device) {
    int n = 0;
    ST_TRY(st_cuda_device_count(&n));
    if (device < 0 || device >= n)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: no CUDA device %d (this process sees %d)", fn, device, n);
    return STRATA_OK;
}

extern "C" strata_status st_cuda_set_device(int device) {
    ST_TRY(st_cuda_device_valid("st_cuda_set_device", device));
    ST_CUDA_CHECK(cudaSetDevice(device));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_get_device(int *device) {
    if (!device) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_get_device: NULL device");
    ST_TRY(st_cuda_require("st_cuda_get_device"));
    ST_CUDA_CHECK(cudaGetDevice(device));
    return STRATA_OK;
}

extern "C" strata_status st_cuda_device_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    ST_TRY(st_cuda_device_valid("st_cuda_device_mem_info", device));
    int cur = 0;
    ST_CUDA_CHECK(cudaGetDevice(&cur));
    ST_CUDA_CHECK(cudaSetDevice(device));
    const cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    ST_CUDA_CHECK(cudaSetDevice(cur));
    ST_CUDA_CHECK(e);
    return STRATA_OK;
}

extern "C" strata_status st_cuda_peer_enable(int device, int peer, int *enabled) {
    if (!enabled) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_peer_enable: NULL enabled");
    *enabled = 0;
    ST_TRY(st_cuda_device_valid("st_cuda_peer_enable", device));
    ST_TRY(st_cuda_device_valid("st_cuda_peer_enable", peer));
    if (device == peer) return STRATA_OK;
    int can = 0;
    ST_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer));
    if (!can) return STRATA_OK;
    int cur = 0;
    ST_CUDA_CHECK(cudaGetDevice(&cur));
    ST_CUDA_CHECK(cudaSetDevice(device));
    cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
        e = cudaSuccess;
    }
    ST_CUDA_CHECK(cudaSetDevice(cur));
    ST_CUDA_CHECK(e);
    *enabled = 1;
    return STRATA_OK;
}

extern "C" strata_status st_cuda_memcpy_d2d_async(void *dst, int dst_device, const void *src, int src_device,
                                                  size_t bytes, void *stream) {
    if (bytes == 0) return STRATA_OK;
    if (dst_device == src_device)
        ST_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
    else
        ST_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, (cudaStream_t)stream));
    return STRATA_OK;
}
