/* nccl.h - NCCL loaded at run time (nccl.c): libnccl.so.2 opened with dlopen, the handful of its
 * functions that moving rows between devices needs (communicators, grouped send / receive, their
 * error strings), and an all-to-all made of them. No NCCL header is needed to build: the few types
 * are declared here as NCCL's ABI has them (nccl.h of NCCL 2.x). Compiled in every build; where the
 * library is absent the loader returns STRATA_ERR_UNSUPPORTED saying so, and nothing else uses it.
 * Used by the split's checks today (peer_device needs it); the expert stage over NCCL is not built
 * yet (docs/MULTI_GPU.md, docs/SCALE_OUT.md). */
#ifndef STRATA_NCCL_H
#define STRATA_NCCL_H

#include "strata.h"

#include <stddef.h>

typedef int st_nccl_result;                        /* ncclResult_t: 0 ncclSuccess */
typedef struct { char internal[128]; } st_nccl_id; /* ncclUniqueId (NCCL_UNIQUE_ID_BYTES 128) */
typedef void *st_nccl_comm;                        /* ncclComm_t */
enum {                                             /* ncclDataType_t, the ones used */
    ST_NCCL_UINT8 = 1,
    ST_NCCL_INT32 = 2,
    ST_NCCL_FLOAT16 = 6,
    ST_NCCL_FLOAT32 = 7
};

typedef struct st_nccl {
    void *lib;       /* the dlopen handle */
    int version;     /* ncclGetVersion: major * 10000 + minor * 100 + patch (2.x) */
    const char *(*get_error_string)(st_nccl_result r);
    st_nccl_result (*get_version)(int *version);
    st_nccl_result (*get_unique_id)(st_nccl_id *id);
    st_nccl_result (*comm_init_rank)(st_nccl_comm *comm, int n_ranks, st_nccl_id id, int rank);
    st_nccl_result (*comm_init_all)(st_nccl_comm *comms, int n_dev, const int *devices);
    st_nccl_result (*comm_destroy)(st_nccl_comm comm);
    st_nccl_result (*group_start)(void);
    st_nccl_result (*group_end)(void);
    st_nccl_result (*send)(const void *buf, size_t count, int type, int peer, st_nccl_comm comm, void *stream);
    st_nccl_result (*recv)(void *buf, size_t count, int type, int peer, st_nccl_comm comm, void *stream);
} st_nccl;

/* libnccl.so.2, opened once per process (thread-safe): *out (NULL allowed: only the answer) or
 * STRATA_ERR_UNSUPPORTED with why ("libnccl.so.2 not found: ...", a missing function). */
strata_status st_nccl_load(const st_nccl **out);
/* Opens the library `name` as NCCL into *out (for tests and other names); st_nccl_close ends it. */
strata_status st_nccl_open(const char *name, st_nccl *out);
void st_nccl_close(st_nccl *n);
/* A failing NCCL result as STRATA_ERR_BACKEND "NCCL error in <what>: <its string>". */
strata_status st_nccl_check(const st_nccl *n, st_nccl_result r, const char *what);
/* Each of n_ranks ranks sends count elements of `type` (bytes each) to every rank, block r of send
 * to rank r, and receives rank r's block into block r of recv: grouped sends and receives on
 * stream (one communicator of this process's rank). */
strata_status st_nccl_all_to_all(const st_nccl *n, st_nccl_comm comm, int n_ranks, const void *send, void *recv,
                                  size_t count, int type, size_t bytes, void *stream);

#endif /* STRATA_NCCL_H */
