/* error.c - thread-local error messages, status names and the library version. */
#include "common.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char st_last_error[512];

strata_status st_error(strata_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st_last_error, sizeof st_last_error, fmt, ap);
    va_end(ap);
    return status;
}

void st_error_clear(void) { st_last_error[0] = '\0'; }

const char *strata_last_error(void) { return st_last_error; }

const char *strata_status_name(strata_status status) {
    switch (status) {
    case STRATA_OK: return "STRATA_OK";
    case STRATA_ERR_INVALID_ARG: return "STRATA_ERR_INVALID_ARG";
    case STRATA_ERR_IO: return "STRATA_ERR_IO";
    case STRATA_ERR_FORMAT: return "STRATA_ERR_FORMAT";
    case STRATA_ERR_NOMEM: return "STRATA_ERR_NOMEM";
    case STRATA_ERR_UNSUPPORTED: return "STRATA_ERR_UNSUPPORTED";
    case STRATA_ERR_NOT_FOUND: return "STRATA_ERR_NOT_FOUND";
    case STRATA_ERR_TYPE: return "STRATA_ERR_TYPE";
    case STRATA_ERR_BACKEND: return "STRATA_ERR_BACKEND";
    case STRATA_ERR_INTERNAL: return "STRATA_ERR_INTERNAL";
    case STRATA_ERR_RANGE: return "STRATA_ERR_RANGE";
    }
    return "STRATA_ERR_UNKNOWN";
}

#define ST_STR2(x) #x
#define ST_STR(x) ST_STR2(x)

const char *strata_version(void) {
    return ST_STR(STRATA_VERSION_MAJOR) "." ST_STR(STRATA_VERSION_MINOR) "." ST_STR(STRATA_VERSION_PATCH);
}

int strata_version_number(void) {
    return STRATA_VERSION_MAJOR * 10000 + STRATA_VERSION_MINOR * 100 + STRATA_VERSION_PATCH;
}

int strata_abi_version(void) {
    return STRATA_ABI_VERSION;
}
