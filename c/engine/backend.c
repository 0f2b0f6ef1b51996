/* backend.c - the list of compute backends behind sessions (backend.h): one table per kind. */
#include "backend.h"

extern const st_backend st_backend_cpu;  /* cpu/backend_cpu.c */
extern const st_backend st_backend_cuda; /* cuda/backend_cuda.c */

const st_backend *st_backend_of(strata_backend_kind kind) {
    return kind == STRATA_BACKEND_CUDA ? &st_backend_cuda : &st_backend_cpu;
}
