/* cuda_backend.h - the C interface of the CUDA backend: the device probe, device memory helpers
 * and the kernel entry points. Plain C declarations, callable from .c files; the .cu files define
 * them with C linkage. These exist only in builds with STRATA_HAVE_CUDA (nvcc found at build time);
 * callers guard their use with #ifdef STRATA_HAVE_CUDA.
 *
 * Every function returns STRATA_ERR_BACKEND (message "CUDA error: ... at file:line in call") when
 * a CUDA call fails, and never prints. All functions work on device 0 for now. After an error that
 * leaves the CUDA context unusable (an illegal address inside a kernel), later calls fail too. */
#ifndef STRATA_CUDA_BACKEND_H
#define STRATA_CUDA_BACKEND_H

#include "strata.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- probe and device info ------------------------------------------------------------------ */

/* Whether CUDA can run here. *available = 1 and detail = a one-line description of device 0
 * ("NVIDIA H200, compute 9.0, 139.8 GiB, 132 SMs"), or *available = 0 and detail = why not ("no
 * CUDA driver (libcuda.so not found)", "no CUDA device", a driver error string, or "device has no
 * kernel image in this build"). The probe runs once per process (thread-safe); later calls copy
 * the cached answer. Returns STRATA_OK in both cases; STRATA_ERR_INVALID_ARG for NULL arguments. */
strata_status st_cuda_probe(int *available, char *detail, size_t cap);

typedef struct st_cuda_device_info {
    char name[256];          /* "NVIDIA H200" */
    int cc_major, cc_minor;  /* compute capability */
    int sm_count;
    size_t total_mem;        /* bytes */
    int runtime_version;     /* e.g. 13000 */
    int driver_version;
    size_t smem_optin;       /* shared memory one block may opt in to, bytes (sm_75 64 KiB, sm_86 /
                                sm_89 99 KiB, sm_80 163 KiB, sm_90 227 KiB) */
} st_cuda_device_info;

/* Device 0's properties; STRATA_ERR_UNSUPPORTED (with the probe's reason) when unavailable. */
strata_status st_cuda_device_info_get(st_cuda_device_info *info);
/* Device 0's per-block shared-memory limit (smem_optin) for kernel choices; when no GPU is usable,
 * sm_90's 227 KiB, so host-side plans (tests without a GPU) are those of the H100 / H200. */
size_t st_cuda_smem_limit(void);
/* Device 0's name into name[cap]. */
strata_status st_cuda_device_name(char *name, size_t cap);

/* ---- device memory (synchronous helpers for tests and setup code) --------------------------- */

strata_status st_cuda_malloc(void **dptr, size_t bytes);
strata_status st_cuda_free(void *dptr);                    /* NULL is a no-op */
/* Pinned (page-locked) host memory: copies from it run at the PCIe rate (CEILINGS.md: 55 GB/s
 * against 19 GB/s from pageable memory). NOMEM when the system refuses. */
strata_status st_cuda_host_alloc(void **hptr, size_t bytes);
strata_status st_cuda_host_free(void *hptr);              /* NULL is a no-op */
/* Pinned host memory mapped into the device's address space (zero-filled): *hptr for the host,
 * *dptr for kernels; freed with st_cuda_host_free(*hptr). */
strata_status st_cuda_host_alloc_mapped(void **hptr, void **dptr, size_t bytes);
/* strata_backend_copy_rate for device 0: device-to-device copies of 256 MiB timed with events,
 * the median of six after one untimed, 2 x 256 MiB / time (bytes read + written per second). */
strata_status st_cuda_copy_rate(double *bytes_per_s);
strata_status st_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes);
strata_status st_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes);
/* Enqueues a copy on stream (host -> device when to_device, else device -> host); with pinned host
 * memory it runs asynchronously, ordered with the stream's kernels. The host side must stay valid
 * and unchanged (or unread) until the stream has passed the copy. */
strata_status st_cuda_memcpy_async(void *dst, const void *src, size_t bytes, int to_device, void *stream);
/* Waits for everything enqueued on stream. */
strata_status st_cuda_stream_synchronize(void *stream);

/* ---- events: ordering between streams -------------------------------------------------------- */

/* A stream not ordered with the legacy default stream (its work overlaps the synchronous copies
 * there); order it with events. */
strata_status st_cuda_stream_create_nonblocking(void **stream);
strata_status st_cuda_event_create(void **ev);              /* no timing */
void st_cuda_event_destroy(void *ev);                       /* NULL is a no-op */
strata_status st_cuda_event_record(void *ev, void *stream); /* ev completes after stream's work so far */
strata_status st_cuda_stream_wait_event(void *stream, void *ev); /* stream's later work waits for ev */
int st_cuda_event_done(void *ev);                           /* 1 if ev completed (non-blocking) */
strata_status st_cuda_event_synchronize(void *ev);          /* waits until ev completed */
strata_status st_cuda_memset(void *dptr, int byte, size_t bytes);
strata_status st_cuda_memset_async(void *dptr, int byte, size_t bytes, void *stream); /* stream-ordered */
strata_status st_cuda_synchronize(void);
/* Free and total bytes of device 0's memory (cudaMemGetInfo). */
strata_status st_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);

/* ---- several devices (docs/MULTI_GPU.md) ------------------------------------------------------
 * The functions above work on the calling thread's current device (device 0 unless
 * st_cuda_set_device chose another); a layer split's stages select theirs before each step. */

/* The devices this process sees; 0 (and STRATA_OK) without a driver or a device. */
strata_status st_cuda_device_count(int *count);
/* The calling thread's current device (INVALID_ARG for one that does not exist). */
strata_status st_cuda_set_device(int device);
strata_status st_cuda_get_device(int *device);
/* Free and total bytes of one device's memory (the current device is left as it was). */
strata_status st_cuda_device_mem_info(int device, size_t *free_bytes, size_t *total_bytes);
/* Lets kernels and copies of `device` reach `peer`'s memory: *enabled 1 where the pair supports
 * it (or device == peer: nothing to enable, *enabled 0), else 0 (copies then go through the host). */
strata_status st_cuda_peer_enable(int device, int peer, int *enabled);
/* A device-to-device copy enqueued on stream: within one device, or a peer copy between two. */
strata_status st_cuda_memcpy_d2d_async(void *dst, int dst_device, const void *src, int src_device,
                                       size_t bytes, void *stream);

/* ---- streams and graphs ---------------------------------------------------------------------- */

/* 1 (the default): this thread's kernel launches let the GPU start a kernel while the one before
 * it in the stream finishes (programmatic dependent launch, compute 9.0+; common.cuh); 0: each
 * waits for the one before to complete. The same bits either way. Per thread. */
void st_cuda_set_pdl(int on);

/* A blocking stream (ordered with the legacy default stream, so the synchronous helpers above
 * still see its work complete). */
strata_status st_cuda_stream_create(void **stream);
strata_status st_cuda_stream_destroy(void *stream);           /* NULL is a no-op */
/* Records the launches enqueued on stream from here on into a graph instead of running them. */
strata_status st_cuda_capture_begin(void *stream);
/* Ends the capture and launches it on stream: the executable graph *exec (NULL the first time)
 * is updated in place when the kernels are the same (*reused = 1), else rebuilt. */
strata_status st_cuda_capture_end_launch(void *stream, void **exec, int *reused);
/* Replays an executable graph on stream as it was captured (kernels that must see new values
 * read them from device memory the caller wrote before). */
strata_status st_cuda_graph_launch(void *exec, void *stream);
/* Ends a capture that failed half-way and drops it. */
void st_cuda_capture_abort(void *stream);
void st_cuda_graph_exec_destroy(void *exec);                  /* NULL is a no-op */

/* ---- dequantize ----------------------------------------------------------------------------- */

/* 1 if the GPU dequantize kernels support type (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q8_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K), else 0. Output equals strata_dequantize_row bit for bit. */
int st_cuda_dequant_supports(strata_type type);

/* Device pointers: d_src holds n weights of type (strata_row_bytes(type, n) bytes), d_dst gets n
 * floats. Enqueued on stream (a cudaStream_t; NULL = the default stream) and not waited for.
 * d_src must be aligned to 2 bytes (4 for F32); d_dst to 4. n == 0 is a no-op. Errors:
 * INVALID_ARG (n not a multiple of the block size, NULL or misaligned pointers), UNSUPPORTED
 * (type), BACKEND (launch failure). */
strata_status st_cuda_dequantize(strata_type type, const void *d_src, float *d_dst, int64_t n,
                                 void *stream);

/* Host convenience: copies the host blocks src to the device, dequantizes, copies the n floats
 * back into the host array dst, frees the temporaries. Synchronous. */
strata_status st_cuda_dequantize_host(strata_type type, const void *src, int64_t n, float *dst);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_CUDA_BACKEND_H */
