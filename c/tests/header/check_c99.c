/* check_c99.c - the public headers (strata.h, strata_gguf.h, strata_quant.h) must compile as strict C99 (-std=c99 -pedantic -Werror). */
/* each header includes what it needs: the format headers first, then strata.h */
#include "strata_quant.h"
#include "strata_gguf.h"
#include "strata.h"

typedef char st_check_status_is_int[sizeof(strata_status) == sizeof(int) ? 1 : -1];

int strata_header_check_c99(void) {
    strata_gguf_value v;
    v.type = STRATA_GGUF_STRING;
    v.v.str.len = 0;
    return (int)v.v.str.len + STRATA_OK + (int)STRATA_TYPE_Q4_K;
}
