/* nccl.c - NCCL loaded at run time (nccl.h): dlopen of libnccl.so.2, its functions looked up by
 * name, a status and a message where it is absent, and the all-to-all made of grouped sends and
 * receives. Nothing here links against NCCL or needs its header. */
#include "nccl.h"
#include "common.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Looks up each function; the first one missing names the library and the symbol. */
static strata_status st_nccl_bind(st_nccl *n, const char *name) {
    static const struct { const char *sym; size_t off; } fns[] = {
        {"ncclGetErrorString", offsetof(st_nccl, get_error_string)},
        {"ncclGetVersion", offsetof(st_nccl, get_version)},
        {"ncclGetUniqueId", offsetof(st_nccl, get_unique_id)},
        {"ncclCommInitRank", offsetof(st_nccl, comm_init_rank)},
        {"ncclCommInitAll", offsetof(st_nccl, comm_init_all)},
        {"ncclCommDestroy", offsetof(st_nccl, comm_destroy)},
        {"ncclGroupStart", offsetof(st_nccl, group_start)},
        {"ncclGroupEnd", offsetof(st_nccl, group_end)},
        {"ncclSend", offsetof(st_nccl, send)},
        {"ncclRecv", offsetof(st_nccl, recv)},
    };
    for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
        void *f = dlsym(n->lib, fns[k].sym);
        if (!f) return st_error(STRATA_ERR_UNSUPPORTED, "%s is not NCCL: it lacks %s", name, fns[k].sym);
        memcpy((char *)n + fns[k].off, &f, sizeof f); /* (a data pointer to a function pointer: POSIX) */
    }
    return STRATA_OK;
}

strata_status st_nccl_open(const char *name, st_nccl *out) {
    if (!name || !out) return st_error(STRATA_ERR_INVALID_ARG, "st_nccl_open: NULL argument");
    memset(out, 0, sizeof *out);
    out->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!out->lib) {
        const char *why = dlerror();
        return st_error(STRATA_ERR_UNSUPPORTED, "%s not found (%s); install NCCL 2 (the nccl package of your "
                        "CUDA distribution) or put it on the loader's path", name, why ? why : "dlopen failed");
    }
    strata_status st = st_nccl_bind(out, name);
    if (st == STRATA_OK) st = st_nccl_check(out, out->get_version(&out->version), "ncclGetVersion");
    if (st != STRATA_OK) st_nccl_close(out);
    return st;
}

void st_nccl_close(st_nccl *n) {
    if (!n) return;
    if (n->lib) dlclose(n->lib);
    memset(n, 0, sizeof *n);
}

strata_status st_nccl_check(const st_nccl *n, st_nccl_result r, const char *what) {
    if (r == 0) return STRATA_OK;
    const char *s = n && n->get_error_string ? n->get_error_string(r) : NULL;
    return st_error(STRATA_ERR_BACKEND, "NCCL error in %s: %s (%d)", what, s ? s : "unknown", r);
}

static pthread_once_t st_nccl_once = PTHREAD_ONCE_INIT;
static st_nccl st_nccl_lib;
static strata_status st_nccl_status;
static char st_nccl_why[512];

static void st_nccl_load_once(void) {
    st_nccl_status = st_nccl_open("libnccl.so.2", &st_nccl_lib);
    snprintf(st_nccl_why, sizeof st_nccl_why, "%s", st_nccl_status == STRATA_OK ? "" : strata_last_error());
}

strata_status st_nccl_load(const st_nccl **out) {
    if (out) *out = NULL;
    if (pthread_once(&st_nccl_once, st_nccl_load_once) != 0)
        return st_error(STRATA_ERR_INTERNAL, "st_nccl_load: pthread_once failed");
    if (st_nccl_status != STRATA_OK) return st_error(st_nccl_status, "%s", st_nccl_why);
    if (out) *out = &st_nccl_lib;
    return STRATA_OK;
}

strata_status st_nccl_all_to_all(const st_nccl *n, st_nccl_comm comm, int n_ranks, const void *send, void *recv,
                                  size_t count, int type, size_t bytes, void *stream) {
    if (!n || !n->lib) return st_error(STRATA_ERR_INVALID_ARG, "st_nccl_all_to_all: NCCL not loaded");
    ST_TRY(st_nccl_check(n, n->group_start(), "ncclGroupStart"));
    strata_status st = STRATA_OK;
    for (int r = 0; r < n_ranks && st == STRATA_OK; r++) {
        const size_t off = (size_t)r * count * bytes;
        st = st_nccl_check(n, n->send((const char *)send + off, count, type, r, comm, stream), "ncclSend");
        if (st == STRATA_OK)
            st = st_nccl_check(n, n->recv((char *)recv + off, count, type, r, comm, stream), "ncclRecv");
    }
    const strata_status end = st_nccl_check(n, n->group_end(), "ncclGroupEnd"); /* (always closes the group) */
    return st != STRATA_OK ? st : end;
}
